//! The `hooks` feature and std's `thread::park`: every green thread of an OS thread shares that
//! OS thread's one std parker, and several of them may wait in `park` at once.
//!
//! No test has a helper OS thread that unparks, which would break a wait that spins or sleeps
//! for good: every unpark is the one the test is about. A wait that never ends is caught by a
//! watchdog (a plain OS thread that does not touch the runtime) that fails the test binary
//! with a message instead of hanging.
#![cfg(feature = "hooks")]

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// How long a test may take before the watchdog calls it hung: each takes milliseconds.
const HANG_LIMIT: Duration = Duration::from_secs(20);

/// Ends the process, saying which test hung, unless dropped within [`HANG_LIMIT`].
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn start(test: &'static str) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let watching = done.clone();
        std::thread::spawn(move || {
            let step = Duration::from_millis(10);
            let mut waited = Duration::ZERO;
            while waited < HANG_LIMIT {
                std::thread::sleep(step);
                if watching.load(Ordering::Acquire) {
                    return;
                }
                waited += step;
            }
            // Not `eprintln!`, which the test harness captures and would lose at the exit.
            let message =
                format!("{test}: still not done after {HANG_LIMIT:?}: a std::thread::park hung\n");
            let _ = std::io::stderr().write_all(message.as_bytes());
            std::process::exit(101);
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Parks with std's `thread::park` until `flag` is set, as std's own docs show it; returns
/// how many times `park` returned.
fn park_until(flag: &AtomicBool) -> usize {
    let mut parks = 0;
    while !flag.load(Ordering::Acquire) {
        std::thread::park();
        parks += 1;
    }
    parks
}

#[test]
fn two_green_threads_of_one_os_thread_in_std_park_are_both_ended_by_a_third_ones_unpark() {
    let _watchdog = Watchdog::start("two_green_threads_of_one_os_thread_in_std_park");
    greenweave::run(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let parked: Vec<_> = (0..2)
            .map(|_| {
                let flag = flag.clone();
                greenweave::spawn(move || park_until(&flag))
            })
            .collect();
        let unparker = greenweave::spawn(move || {
            std::thread::sleep(Duration::from_millis(10)); // both are in `park` by now
            flag.store(true, Ordering::Release);
            std::thread::current().unpark();
        });
        unparker.join().unwrap();
        for waiter in parked {
            assert!(waiter.join().unwrap() >= 1, "each waited in park");
        }
    });
}

#[test]
fn green_threads_in_std_park_on_an_idle_worker_are_ended_by_an_unpark_from_another_worker() {
    let _watchdog = Watchdog::start("green_threads_in_std_park_on_an_idle_worker");
    let runtime = greenweave::Runtime::builder().workers(2).build().unwrap();
    runtime.run(|| {
        assert_eq!(greenweave::runtime::current_worker(), 0);
        let flag = Arc::new(AtomicBool::new(false));
        let parked: Vec<_> = (0..3)
            .map(|_| {
                let flag = flag.clone();
                greenweave::spawn(move || park_until(&flag))
            })
            .collect();
        let worker_0 = std::thread::current();
        let unparker = greenweave::thread::spawn_on(1, move || {
            std::thread::sleep(Duration::from_millis(10)); // worker 0 sleeps in epoll by now
            flag.store(true, Ordering::Release);
            worker_0.unpark();
        });
        unparker.join().unwrap();
        for waiter in parked {
            waiter.join().unwrap();
        }
    });
}

#[test]
fn green_threads_in_std_park_on_a_busy_worker_are_ended_by_an_unpark_from_another_worker() {
    let _watchdog = Watchdog::start("green_threads_in_std_park_on_a_busy_worker");
    let runtime = greenweave::Runtime::builder().workers(2).build().unwrap();
    runtime.run(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let unparked = Arc::new(AtomicUsize::new(0));
        let parked: Vec<_> = (0..2)
            .map(|_| {
                let (flag, unparked) = (flag.clone(), unparked.clone());
                greenweave::spawn(move || {
                    park_until(&flag);
                    unparked.fetch_add(1, Ordering::Release);
                })
            })
            .collect();
        // Worker 0 never sleeps until both waiters are out of `park`, so the unpark finds its
        // parker word as the waiters left it and makes no futex wake: the scheduler's poll
        // between runs must notice it.
        let busy = greenweave::spawn(move || {
            while unparked.load(Ordering::Acquire) < 2 {
                greenweave::thread::yield_now();
            }
        });
        let worker_0 = std::thread::current();
        greenweave::thread::spawn_on(1, move || {
            std::thread::sleep(Duration::from_millis(10));
            flag.store(true, Ordering::Release);
            worker_0.unpark();
        })
        .join()
        .unwrap();
        busy.join().unwrap();
        for waiter in parked {
            waiter.join().unwrap();
        }
    });
}
