//! A race detector for the test suite, compiled only with `--cfg greenweave_chaos`: before the
//! scheduler runs a green thread, it sometimes sleeps the OS thread for a few milliseconds, as
//! a machine under load, Valgrind or qemu does at random.
//!
//! A test that holds only because a green thread started or ran "soon enough" (a sleep of a
//! few milliseconds expected to outlast another green thread's short timeout, say) then fails
//! here on this machine, rather than once in a while in CI. `.ci/chaos` runs the suite so.
//!
//! The first run of a runtime (of its OS thread, that is: a worker, or a thread that called
//! `run`) may be delayed much longer, up to [`LONGEST_START_DELAY_US`], as a thread that the
//! kernel starts late: tests whose OS threads meet through sleeps fail then.
//!
//! Which runs are delayed is drawn from `GREENWEAVE_CHAOS_SEED` (a number) and the order in
//! which OS threads first ran a green thread, so a failure can often be replayed. A green
//! thread's first run is delayed more often than its later ones (the race above), and each OS
//! thread delays at most [`DELAYS_PER_THREAD`] times, so that tests with millions of switches
//! still end.

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

/// One in this many runtimes has its first run delayed.
const START_ODDS: u64 = 4;
/// The longest delay of a runtime's first run, in microseconds.
const LONGEST_START_DELAY_US: u64 = 300_000;

thread_local! {
    static STATE: Cell<Option<(u64, u32)>> = const { Cell::new(None) };
    /// Set when a scheduler is made on this OS thread, until its first run.
    static STARTING: Cell<bool> = const { Cell::new(false) };
}

/// Called when a scheduler is made: its first run is a runtime's start.
pub(crate) fn runtime_starting() {
    STARTING.with(|starting| starting.set(true));
}

/// Called by the scheduler just before it switches to a green thread.
pub(crate) fn before_run(first_run: bool) {
    let starting = STARTING.with(|starting| starting.replace(false));
    STATE.with(|state| {
        let (mut random, delays) = state.get().unwrap_or_else(|| (seed(), 0));
        if delays >= DELAYS_PER_THREAD {
            return;
        }
        let (odds, longest) = if starting {
            (START_ODDS, LONGEST_START_DELAY_US)
        } else if first_run {
            (FIRST_RUN_ODDS, LONGEST_DELAY_US)
        } else {
            (LATER_RUN_ODDS, LONGEST_DELAY_US)
        };
        random = xorshift(random);
        let delayed = random % odds == 0;
        if delayed {
            random = xorshift(random);
            std::thread::sleep(Duration::from_micros(random % (longest + 1)));
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
    // splitmix64's finaliser: neighbouring seeds and threads give unrelated streams.
    let mut z = base.wrapping_add(thread.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1 // xorshift's state must not be 0
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}
