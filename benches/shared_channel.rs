//! `sync::shared` ping-pong: one word sent to an echo loop over one unbounded channel and sent
//! back over another; one round trip is a send and a receive on each side.
//!
//! ```text
//! cargo bench --bench shared_channel                      # every case, 9 rounds, medians
//! cargo bench --bench shared_channel -- same_runtime/shared 1000   # one case, once (callgrind)
//! ```
//!
//! - `cross_runtime/shared`: two OS threads, each in `greenweave::run`, `sync::shared::channel`.
//! - `cross_runtime/remote_sender`: the same over two `sync::mpsc` channels, each fed by the
//!   other runtime's `Sender::remote` (the one-way `Send` handle that existed before).
//! - `os_threads/std_mpsc`: two OS threads, `std::sync::mpsc::channel`: the reference.
//! - `same_runtime/shared`: two green threads of one runtime, `sync::shared::channel`.
//! - `same_runtime/mpsc`: the same over `sync::mpsc::channel` (no lock, no atomics).
//!
//! The cases take turns within each round, so that a change in the machine's load touches
//! them alike; the table is the median over the rounds. Starting runtimes and threads is not
//! timed. Without `--bench` (as `cargo test --benches` runs it) each case runs a few round
//! trips once, to check it still works.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use greenweave::sync::{mpsc, shared};

mod round_trip_driver;
use round_trip_driver::Case;

const CASES: &[Case] = &[
    Case {
        id: "cross_runtime/shared",
        run: cross_runtime_shared,
    },
    Case {
        id: "cross_runtime/remote_sender",
        run: cross_runtime_remote_sender,
    },
    Case {
        id: "os_threads/std_mpsc",
        run: os_threads_std_mpsc,
    },
    Case {
        id: "same_runtime/shared",
        run: same_runtime_shared,
    },
    Case {
        id: "same_runtime/mpsc",
        run: same_runtime_mpsc,
    },
];

fn cross_runtime_shared(n: u64) -> Duration {
    let (to_echo, echo_inbox) = shared::channel::<u64>();
    let (to_main, main_inbox) = shared::channel::<u64>();
    let echo = std::thread::spawn(move || {
        greenweave::run(move || {
            for word in echo_inbox {
                to_main.send(word).unwrap();
            }
        })
    });
    let elapsed = greenweave::run(move || {
        to_echo.send(0).unwrap();
        main_inbox.recv().unwrap();
        let start = Instant::now();
        for word in 0..n {
            to_echo.send(word).unwrap();
            main_inbox.recv().unwrap();
        }
        start.elapsed()
    });
    echo.join().unwrap();
    elapsed
}

fn cross_runtime_remote_sender(n: u64) -> Duration {
    // Each runtime hands the other a remote sender of its own inbox.
    let (echo_remote_tx, echo_remote_rx) = std::sync::mpsc::channel();
    let (main_remote_tx, main_remote_rx) = std::sync::mpsc::channel();
    let echo = std::thread::spawn(move || {
        greenweave::run(move || {
            let (tx, inbox) = mpsc::channel::<u64>();
            echo_remote_tx.send(tx.remote()).unwrap();
            drop(tx);
            let to_main: mpsc::RemoteSender<u64> = main_remote_rx.recv().unwrap();
            for word in inbox {
                to_main.send(word).unwrap();
            }
        })
    });
    let elapsed = greenweave::run(move || {
        let (tx, inbox) = mpsc::channel::<u64>();
        main_remote_tx.send(tx.remote()).unwrap();
        drop(tx);
        let to_echo = echo_remote_rx.recv().unwrap();
        to_echo.send(0).unwrap();
        inbox.recv().unwrap();
        let start = Instant::now();
        for word in 0..n {
            to_echo.send(word).unwrap();
            inbox.recv().unwrap();
        }
        start.elapsed()
    });
    echo.join().unwrap();
    elapsed
}

fn os_threads_std_mpsc(n: u64) -> Duration {
    let (to_echo, echo_inbox) = std::sync::mpsc::channel::<u64>();
    let (to_main, main_inbox) = std::sync::mpsc::channel::<u64>();
    let echo = std::thread::spawn(move || {
        for word in echo_inbox {
            to_main.send(word).unwrap();
        }
    });
    to_echo.send(0).unwrap();
    main_inbox.recv().unwrap();
    let start = Instant::now();
    for word in 0..n {
        to_echo.send(word).unwrap();
        main_inbox.recv().unwrap();
    }
    let elapsed = start.elapsed();
    drop(to_echo);
    echo.join().unwrap();
    elapsed
}

fn same_runtime_shared(n: u64) -> Duration {
    greenweave::run(move || {
        let (to_echo, echo_inbox) = shared::channel::<u64>();
        let (to_main, main_inbox) = shared::channel::<u64>();
        let echo = greenweave::spawn(move || {
            for word in echo_inbox {
                to_main.send(word).unwrap();
            }
        });
        to_echo.send(0).unwrap();
        main_inbox.recv().unwrap();
        let start = Instant::now();
        for word in 0..n {
            to_echo.send(word).unwrap();
            main_inbox.recv().unwrap();
        }
        let elapsed = start.elapsed();
        drop(to_echo);
        echo.join().unwrap();
        elapsed
    })
}

fn same_runtime_mpsc(n: u64) -> Duration {
    greenweave::run(move || {
        let (to_echo, echo_inbox) = mpsc::channel::<u64>();
        let (to_main, main_inbox) = mpsc::channel::<u64>();
        let echo = greenweave::spawn(move || {
            for word in echo_inbox {
                to_main.send(word).unwrap();
            }
        });
        to_echo.send(0).unwrap();
        main_inbox.recv().unwrap();
        let start = Instant::now();
        for word in 0..n {
            to_echo.send(word).unwrap();
            main_inbox.recv().unwrap();
        }
        let elapsed = start.elapsed();
        drop(to_echo);
        echo.join().unwrap();
        elapsed
    })
}

/// Round trips per timed run of each kind of case: the cross-thread ones cost microseconds.
fn round_trips(id: &str) -> u64 {
    if id.starts_with("same_runtime") {
        200_000
    } else {
        20_000
    }
}

fn main() -> ExitCode {
    round_trip_driver::main("shared_channel", CASES, round_trips)
}
