//! `sync::timer_channel`: what greenweave adds to crossbeam's `after`, `tick` and `never`
//! (whose own tests are ported in `tests/crossbeam.rs`): the waits are the scheduler's, so they
//! obey `time::timeout` and the deadlock report; the same receivers work on a plain OS thread;
//! clones share the messages.

use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use greenweave::sync::timer_channel::{self, RecvTimeoutError, TryRecvError};
use greenweave::time::timeout;

#[test]
fn a_timer_receive_is_ended_by_a_time_timeout_scope() {
    greenweave::run(|| {
        let never = timer_channel::never();
        assert!(timeout(Duration::from_millis(5), || never.recv()).is_err());
        let late = timer_channel::after(Duration::from_secs(60));
        assert!(timeout(Duration::from_millis(5), || late.recv()).is_err());
        // The scope took nothing: the message is still to come.
        assert_eq!(late.try_recv(), Err(TryRecvError::Empty));
    });
}

#[test]
fn a_receive_from_a_never_channel_alone_is_reported_as_a_deadlock() {
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        greenweave::run(|| timer_channel::never().recv())
    }));
    let payload = outcome.expect_err("a receive that can never end");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("deadlock"), "{message}");
    assert!(
        message.contains("a timer channel that will receive no message"),
        "{message}"
    );
}

#[test]
fn clones_of_an_after_channel_share_its_one_message() {
    greenweave::run(|| {
        let timer = timer_channel::after(Duration::ZERO);
        let clone = timer.clone();
        assert!(clone.recv().is_ok());
        assert_eq!(timer.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(
            timer.recv_timeout(Duration::from_millis(1)),
            Err(RecvTimeoutError::Timeout)
        );
    });
}

#[test]
fn timer_channels_work_on_a_plain_os_thread_and_cross_os_threads() {
    let ticks = timer_channel::tick(Duration::from_millis(1));
    let first = ticks.recv().unwrap(); // no runtime: the OS thread sleeps
    let second = std::thread::spawn(move || greenweave::run(move || ticks.recv().unwrap()))
        .join()
        .unwrap();
    assert!(second >= first + Duration::from_millis(1));
    let start = Instant::now();
    assert_eq!(
        timer_channel::never().recv_timeout(Duration::from_millis(2)),
        Err(RecvTimeoutError::Timeout)
    );
    assert!(start.elapsed() >= Duration::from_millis(2));
}
