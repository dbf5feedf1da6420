//! A race detector for the test suite, compiled only with `--cfg greenweave_chaos`: before the
//! scheduler runs a green thread, it sometimes sleeps the OS thread for a few milliseconds, as
//! a machine under load, Valgrind or qemu does at random.
//!
//! A test that holds only because a green thread started or ran "soon enough" (a sleep of a
//! few milliseconds expected to outlast another green thread's short timeout, say) then fails
//! here on this machine, rather than once in a while in CI. `.ci/chaos` runs the suite so.
//!
//! Which runs are delayed is drawn from `GREENWEAVE_CHAOS_SEED` (a number) and the order in
//! which OS threads first ran a green thread, so a failure can often be replayed. A green thread's first run is delayed more often
//! than its later ones (the race above), and each OS thread delays at most
//! [`DELAYS_PER_THREAD`] times, so that tests with millions of switches still end.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Most delays one OS thread takes; the rest of its runs go undisturbed.
const DELAYS_PER_THREAD: u32 = 300;
/// One in this many first runs of a green thread is delayed.
const FIRST_RUN_ODDS: u64 = 2;
/// One in this many later runs is delayed.
const LATER_RUN_ODDS: u64 = 8;
/// The longest delay, in microseconds; each is drawn evenly up to it.
const LONGEST_DELAY_US: u64 = 30_000;

thread_local! {
    static STATE: Cell<Option<(u64, u32)>> = const { Cell::new(None) };
}

/// Called by the scheduler just before it switches to a green thread.
pub(crate) fn before_run(first_run: bool) {
    STATE.with(|state| {
        let (mut random, delays) = state.get().unwrap_or_else(|| (seed(), 0));
        if delays >= DELAYS_PER_THREAD {
            return;
        }
        let odds = if first_run {
            FIRST_RUN_ODDS
        } else {
            LATER_RUN_ODDS
        };
        random = xorshift(random);
        let delayed = random % odds == 0;
        if delayed {
            random = xorshift(random);
            std::thread::sleep(Duration::from_micros(random % (LONGEST_DELAY_US + 1)));
        }
        state.set(Some((random, delays + u32::from(delayed))));
    });
}

fn seed() -> u64 {
    let base = std::env::var("GREENWEAVE_CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse::<u64>().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15);
    static THREADS: AtomicU64 = AtomicU64::new(0);
    let thread = THREADS.fetch_add(1, Ordering::Relaxed) + 1;
    (base ^ thread.wrapping_mul(0x2545_f491_4f6c_dd1d)) | 1
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}
