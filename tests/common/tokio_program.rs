//! A tokio program for the tests in which tokio tasks await green threads: its two-thread
//! runtime, and a heartbeat task that ticks every millisecond until told to stop (its ticks,
//! logged among the test's events, show that the program's threads stayed free).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A multi-thread tokio runtime with two worker threads, I/O and timers.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Spawns (on the current tokio runtime) a task that calls `tick` every millisecond until
/// `done` is set.
pub fn heartbeat(
    done: &Arc<AtomicBool>,
    tick: impl Fn() + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let done = done.clone();
    tokio::spawn(async move {
        while !done.load(Ordering::Acquire) {
            tick();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}
