//! Measurements of internals for the latency table and the criterion suite. Not a public API:
//! hidden from the docs, and free to change.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::arch::{self, StackPointer};
use crate::stack::pool;

/// Times `round_trips` bare switch round trips (there and back again) between this stack and a
/// context whose only code is switching straight back, entered the way a coroutine is: the
/// loop resumes (`arch::resume`) and the echo suspends back (`arch::suspend`).
pub fn raw_switch_round_trips(round_trips: u64) -> Duration {
    /// Sends every word straight back, forever.
    unsafe extern "C" fn echo(mut from: StackPointer, mut data: usize, _arg: usize) -> ! {
        // SAFETY: the first code on the echo's fresh stack.
        unsafe { arch::entered_fresh_stack(from) };
        loop {
            // SAFETY: `from` is the measuring loop's context, waiting in its resume.
            let transfer = unsafe { arch::suspend(from, data) };
            from = transfer.from;
            data = transfer.data;
        }
    }
    // SAFETY: `echo` is suspended exactly when the loop runs; see `time_echo`.
    unsafe { time_echo(round_trips, echo, |to, data| arch::resume(to, data)) }
}

/// The same with the symmetric switch on both sides (`arch::switch`), as between greenlets.
pub fn raw_symmetric_switch_round_trips(round_trips: u64) -> Duration {
    /// Sends every word straight back, forever.
    unsafe extern "C" fn echo(mut from: StackPointer, mut data: usize, _arg: usize) -> ! {
        // SAFETY: the first code on the echo's fresh stack.
        unsafe { arch::entered_fresh_stack(from) };
        loop {
            // SAFETY: `from` is the measuring loop's context, waiting in its switch.
            let transfer = unsafe { arch::switch(from, data) };
            from = transfer.from;
            data = transfer.data;
        }
    }
    // SAFETY: as above.
    unsafe { time_echo(round_trips, echo, |to, data| arch::switch(to, data)) }
}

/// Starts `echo` on a pooled stack and times `round_trips` calls of `switch` to it.
///
/// # Safety
/// `switch` must be one of the `arch` switch primitives (it is called with the echo's saved
/// context), and `echo` must switch straight back every time and never return.
#[inline(always)]
unsafe fn time_echo(
    round_trips: u64,
    echo: arch::EntryFn,
    switch: impl Fn(StackPointer, usize) -> arch::Transfer,
) -> Duration {
    let stack = pool::take_default().expect("greenweave: could not map a stack for the benchmark");
    // SAFETY: the stack's top is page-aligned and the stack is fresh or recycled, so unused.
    let mut echo_context = unsafe { arch::init_stack(stack.top(), echo, 0) };
    arch::set_stack_bounds(echo_context, stack.limit(), stack.top().as_ptr() as usize);
    let start = Instant::now();
    for i in 0..round_trips {
        // `echo_context` is the echo loop's saved context, replaced by the new one on every
        // trip (the caller vouches for `switch`).
        let transfer = switch(echo_context, i as usize);
        echo_context = transfer.from;
        black_box(transfer.data);
    }
    let elapsed = start.elapsed();
    // The echo context is parked in its switch with nothing to drop on its stack.
    pool::recycle(stack);
    elapsed
}
