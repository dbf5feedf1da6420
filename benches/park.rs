//! `thread::park` / `Thread::unpark` ping-pong: two parties take turns on a shared counter,
//! each unparking the other and parking until its turn comes; one round trip is two unparks
//! and two parks.
//!
//! ```text
//! cargo bench --bench park                          # every case, 9 rounds, medians
//! cargo bench --bench park -- same_worker 100000    # one case, once
//! ```
//!
//! - `same_worker`: two green threads of one runtime (the unpark goes through the scheduler:
//!   no system call).
//! - `cross_worker`: green threads on two workers of one runtime (through the other worker's
//!   `RemoteQueue`: a lock, an eventfd write, an epoll wake-up).
//! - `green_and_os_thread`: a green thread and a plain OS thread that parks with std's park.
//! - `std_os_threads`: two OS threads with `std::thread::park`: the reference.
//!
//! The cases take turns within each round, so that a change in the machine's load touches
//! them alike; the table is the median over the rounds. Starting runtimes and threads is not
//! timed. Without `--bench` (as `cargo test --benches` runs it) each case runs a few round
//! trips once, to check it still works.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use greenweave::Runtime;
use greenweave::thread::{self, Thread};

mod round_trip_driver;
use round_trip_driver::Case;

const CASES: &[Case] = &[
    Case {
        id: "same_worker",
        run: same_worker,
    },
    Case {
        id: "cross_worker",
        run: cross_worker,
    },
    Case {
        id: "green_and_os_thread",
        run: green_and_os_thread,
    },
    Case {
        id: "std_os_threads",
        run: std_os_threads,
    },
];

/// One side's half of `rounds` round trips: waits (with `park`) for the counter to reach its
/// turn, then moves it on and unparks the other side. `first` is whether it moves first.
fn take_turns(counter: &AtomicU64, rounds: u64, first: bool, park: fn(), unpark_other: impl Fn()) {
    for round in 0..rounds {
        let (wait_for, then) = if first {
            (2 * round, 2 * round + 1)
        } else {
            (2 * round + 1, 2 * round + 2)
        };
        while counter.load(Ordering::Acquire) != wait_for {
            park();
        }
        counter.store(then, Ordering::Release);
        unpark_other();
    }
}

/// The two sides' handles, handed over through a lock.
fn wait_for_handle<T: Clone>(slot: &Mutex<Option<T>>, park: fn()) -> T {
    loop {
        if let Some(handle) = slot.lock().unwrap().clone() {
            return handle;
        }
        park();
    }
}

/// Main green thread against `other`, run with `spawn`, which sends its `Thread` through the
/// slot and then takes turns.
fn green_pair(n: u64, spawn: impl FnOnce(Box<dyn FnOnce() + Send>)) -> Duration {
    let counter = Arc::new(AtomicU64::new(0));
    let slot: Arc<Mutex<Option<Thread>>> = Arc::new(Mutex::new(None));
    let main = thread::current();
    {
        let (counter, slot, main) = (counter.clone(), slot.clone(), main.clone());
        spawn(Box::new(move || {
            *slot.lock().unwrap() = Some(thread::current());
            main.unpark();
            take_turns(&counter, n + 1, false, thread::park, || main.unpark());
        }));
    }
    let other = wait_for_handle(&slot, thread::park);
    take_turns(&counter, 1, true, thread::park, || other.unpark());
    let start = Instant::now();
    // The remaining `n` rounds, counted on from where the untimed one left the counter.
    for round in 1..=n {
        while counter.load(Ordering::Acquire) != 2 * round {
            thread::park();
        }
        counter.store(2 * round + 1, Ordering::Release);
        other.unpark();
    }
    while counter.load(Ordering::Acquire) != 2 * n + 2 {
        thread::park();
    }
    start.elapsed()
}

fn same_worker(n: u64) -> Duration {
    greenweave::run(move || {
        let spawned = std::cell::RefCell::new(None);
        let elapsed = green_pair(n, |body| {
            *spawned.borrow_mut() = Some(greenweave::spawn(body))
        });
        spawned.into_inner().unwrap().join().unwrap();
        elapsed
    })
}

fn cross_worker(n: u64) -> Duration {
    let runtime = Runtime::builder().workers(2).build().unwrap();
    runtime.run(move || {
        let spawned = std::cell::RefCell::new(None);
        let elapsed = green_pair(n, |body| {
            *spawned.borrow_mut() = Some(thread::spawn_on(1, body))
        });
        spawned.into_inner().unwrap().join().unwrap();
        elapsed
    })
}

fn green_and_os_thread(n: u64) -> Duration {
    let counter = Arc::new(AtomicU64::new(0));
    let slot: Arc<Mutex<Option<Thread>>> = Arc::new(Mutex::new(None));
    let os_thread = {
        let (counter, slot) = (counter.clone(), slot.clone());
        std::thread::spawn(move || {
            let green = wait_for_handle(&slot, std::thread::park);
            take_turns(&counter, n + 1, false, std::thread::park, || green.unpark());
        })
    };
    let os_handle = os_thread.thread().clone();
    let elapsed = greenweave::run(move || {
        *slot.lock().unwrap() = Some(thread::current());
        os_handle.unpark();
        take_turns(&counter, 1, true, thread::park, || os_handle.unpark());
        let start = Instant::now();
        for round in 1..=n {
            while counter.load(Ordering::Acquire) != 2 * round {
                thread::park();
            }
            counter.store(2 * round + 1, Ordering::Release);
            os_handle.unpark();
        }
        while counter.load(Ordering::Acquire) != 2 * n + 2 {
            thread::park();
        }
        start.elapsed()
    });
    os_thread.join().unwrap();
    elapsed
}

fn std_os_threads(n: u64) -> Duration {
    let counter = Arc::new(AtomicU64::new(0));
    let main = std::thread::current();
    let other = {
        let (counter, main) = (counter.clone(), main.clone());
        std::thread::spawn(move || {
            take_turns(&counter, n + 1, false, std::thread::park, || main.unpark());
        })
    };
    let other_handle = other.thread().clone();
    take_turns(&counter, 1, true, std::thread::park, || {
        other_handle.unpark()
    });
    let start = Instant::now();
    for round in 1..=n {
        while counter.load(Ordering::Acquire) != 2 * round {
            std::thread::park();
        }
        counter.store(2 * round + 1, Ordering::Release);
        other_handle.unpark();
    }
    while counter.load(Ordering::Acquire) != 2 * n + 2 {
        std::thread::park();
    }
    let elapsed = start.elapsed();
    other.join().unwrap();
    elapsed
}

/// Round trips per timed run of a case: enough for a few milliseconds at least.
fn round_trips(id: &str) -> u64 {
    match id {
        "same_worker" => 200_000,
        _ => 20_000,
    }
}

fn main() -> ExitCode {
    round_trip_driver::main("park", CASES, round_trips)
}
