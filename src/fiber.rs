//! The fiber layer: a closure launched on its own [`Stack`], under every public API.
//!
//! Owns: placing a body on a fresh stack, the root frame that calls it, and the rule for the
//! last word a fiber sends. [`Coroutine`](crate::Coroutine) (asymmetric) and
//! [`Greenlet`](crate::greenlet::Greenlet) (symmetric) are both built on [`launch`]; they differ
//! only in what their bodies do around the user's closure and where they switch.
//!
//! May not: decide where a fiber switches to or what its words mean (that is the layer above),
//! or let a panic reach the assembly: the root aborts if the body it was given unwinds, so
//! layers above must catch the user's panics themselves.
//!
//! # The last word
//! A body returns an [`Exit`]: where to switch and a message. The root keeps the message in
//! its own frame (which stays intact, because a finished fiber is never resumed) and sends its
//! address with [`FINISHED_TAG`] set. [`Message`] keeps the low bit of every message address
//! free for that tag.

use core::mem::{self, ManuallyDrop};
use core::ptr::{self, NonNull};

use crate::arch::{self, StackPointer, Transfer};
use crate::stack::Stack;

/// Low bit set on the last word a fiber sends: the message of its [`Exit`].
pub(crate) const FINISHED_TAG: usize = 1;

/// Room left below the body for its first frames, so that a body that barely fits is refused
/// with a message instead of overflowing before it runs.
const MIN_RUN_SPACE: usize = 4096;

/// Copies of the payload that the entry may make on the stack before the user's code runs:
/// one to move the closure out for its by-value call, and another that unoptimised builds
/// make on the way (measured: a 112 KiB capture runs on a 256 KiB stack in release builds,
/// 80 KiB in debug).
const COPIES_MADE_TO_RUN: usize = 2;

/// A value in transit through a switch, owned by the sender's frame and moved out by the
/// receiver. The alignment of at least 2 keeps the low bit of its address free for
/// [`FINISHED_TAG`].
#[repr(C, align(2))]
pub(crate) struct Message<T>(ManuallyDrop<T>);

impl<T> Message<T> {
    pub(crate) fn new(value: T) -> Self {
        Message(ManuallyDrop::new(value))
    }

    /// The word to send: this message's address.
    pub(crate) fn word(&self) -> usize {
        self as *const Self as usize
    }

    /// Moves the value out of the message whose address `word` is (tag bit ignored).
    ///
    /// # Safety
    /// `word` must come from [`Message::word`] of a `Message<T>` (possibly tagged) whose sender
    /// is suspended or finished and will never read or drop it, and it must be taken once.
    pub(crate) unsafe fn take(word: usize) -> T {
        // SAFETY: per the contract, the address is a live Message<T> nobody else will use;
        // Message<T> starts with the (transparent) ManuallyDrop<T>.
        unsafe { ptr::read((word & !FINISHED_TAG) as *const T) }
    }
}

/// Where a finished body switches to, what it sends there, and how.
pub(crate) struct Exit<M> {
    pub(crate) to: StackPointer,
    pub(crate) message: M,
    pub(crate) leave: Leave,
}

/// Which switch primitive a finished fiber leaves by (see [`crate::arch`]): both are correct,
/// the right one keeps the processor's return predictor balanced.
pub(crate) enum Leave {
    /// `to` resumed this fiber (`arch::resume`): go back with `arch::suspend`.
    ToResumer,
    /// `to` is a peer that switched here symmetrically: `arch::switch`.
    ToPeer,
}

/// The function a fiber runs: `entry(payload, first_transfer) -> Exit`.
///
/// It receives its payload by pointer, where [`launch`] placed it at the top of the stack, and
/// must move out (`ptr::read`) or drop in place whatever it owns there, exactly once. Taking
/// the payload by pointer rather than by value matters: a closure passed by value through a
/// few frames (and `catch_unwind`) is copied down the stack at each one, and a large capture
/// would then overflow a stack that it fits in.
pub(crate) type Entry<P, M> = unsafe fn(payload: *mut P, first: Transfer) -> Exit<M>;

/// What [`launch`] writes at the top of a stack.
struct Launch<P, M> {
    entry: Entry<P, M>,
    payload: P,
}

/// Prepares `stack` so that the first switch to the returned pointer calls
/// `entry(&mut payload, that switch's Transfer)` on it. When `entry` returns an [`Exit`], the
/// fiber switches to `exit.to` with the address of `exit.message` tagged with
/// [`FINISHED_TAG`], and never runs again.
///
/// # Panics
/// If the payload does not fit in `stack` three times over with 4 KiB to spare (see
/// [`COPIES_MADE_TO_RUN`]).
///
/// # Safety
/// Nothing else may be running on `stack` or use it until the fiber has finished (or is never
/// started, in which case the payload is leaked). The receiver of the last message must take
/// it ([`Message::take`]) before the stack is reused or unmapped.
pub(crate) unsafe fn launch<P, M>(stack: &Stack, payload: P, entry: Entry<P, M>) -> StackPointer {
    let top = stack.top().as_ptr() as usize;
    let bottom = stack.limit();
    // The payload goes at the top of the stack, 16-byte aligned; the trampoline's frame below.
    let size = mem::size_of::<Launch<P, M>>();
    // The payload goes at the top of the stack, 16-byte aligned; the trampoline's frame below.
    // The entry moves the user's closure out once to call it (more in debug builds), so the
    // rest of the stack must hold two more copies besides the room to run.
    let launch_at = top
        .checked_sub(size)
        .map(|at| at & !(mem::align_of::<Launch<P, M>>().max(16) - 1))
        .filter(|&at| {
            size.checked_mul(COPIES_MADE_TO_RUN)
                .and_then(|copies| {
                    copies.checked_add(bottom + arch::INITIAL_FRAME_BYTES + MIN_RUN_SPACE)
                })
                .is_some_and(|needed| at >= needed)
        })
        .unwrap_or_else(|| {
            panic!(
                "greenweave: a body of {} bytes does not fit in a {}-byte stack (it needs room \
                 for {COPIES_MADE_TO_RUN} more copies of itself and 4 KiB to run); box the \
                 captured data or use a larger Stack",
                mem::size_of::<P>(),
                stack.size()
            )
        });
    // SAFETY: `launch_at..top` lies in the usable range of `stack` (checked above) and is
    // aligned for Launch; the caller guarantees nothing else uses the stack. The entry owns
    // the payload from its first call on.
    unsafe { (launch_at as *mut Launch<P, M>).write(Launch { entry, payload }) };
    // SAFETY: `launch_at` is 16-byte aligned, non-null, and the INITIAL_FRAME_BYTES below it
    // are unused stack memory (checked above).
    unsafe {
        arch::init_stack(
            NonNull::new_unchecked(launch_at as *mut u8),
            root::<P, M>,
            launch_at,
        )
    }
}

/// The first Rust frame on every fiber stack, called by the trampoline.
///
/// # Safety
/// Called only by the trampoline, for a stack prepared by [`launch`] with the same `P` and
/// `M`: `launch_at` is the address of the `Launch<P, M>` it wrote.
unsafe extern "C" fn root<P, M>(from: StackPointer, data: usize, launch_at: usize) -> ! {
    let launch = launch_at as *mut Launch<P, M>;
    // SAFETY: per this function's contract; the fn pointer is Copy, the payload stays put.
    let (entry, payload) = unsafe { ((*launch).entry, &raw mut (*launch).payload) };
    let first = Transfer { from, data };
    // A guard rather than `catch_unwind`: it costs nothing unless the body unwinds, and then
    // its destructor aborts before the unwind can leave this frame.
    let abort_on_unwind = AbortOnUnwind;
    // SAFETY: the entry was written for this payload type, which it now owns.
    let exit = unsafe { entry(payload, first) };
    mem::forget(abort_on_unwind);
    let message = Message::new(exit.message);
    // SAFETY: `exit.to` is a suspended context chosen by the layer above; it takes `message`
    // before this stack is reused, and never switches back here.
    let word = message.word() | FINISHED_TAG;
    // SAFETY: as above.
    unsafe {
        match exit.leave {
            Leave::ToResumer => arch::suspend(exit.to, word),
            Leave::ToPeer => arch::switch(exit.to, word),
        }
    };
    fatal("a finished fiber was resumed")
}

/// Aborts if dropped: lives across a fiber body's call in [`root`] and is forgotten when the body
/// returns, so its destructor runs only if the body unwinds.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        fatal(
            "a fiber body unwound to its root (greenweave bug: the layer above must catch panics)",
        )
    }
}

/// Reports a broken internal invariant and aborts; unwinding is not possible at a fiber root.
fn fatal(what: &str) -> ! {
    eprintln!("fatal runtime error: greenweave: {what}; aborting");
    std::process::abort()
}
