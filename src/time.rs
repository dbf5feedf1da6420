//! Scoped deadlines: [`timeout`] bounds every park point inside a closure, gevent's
//! `Timeout`.

use std::cell::Cell;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::runtime::scheduler::{ScopeElapsed, with_scheduler};

/// The error of [`timeout`]: the deadline passed before the body finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed(());

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// Runs `body`, giving up if it is still running after `duration`: every park point inside it
/// (socket reads and writes, channel receives, locks, sleeps, joins) is bounded by the
/// deadline, and when the deadline passes at one of them, `body` is unwound from there (its
/// destructors run) and `timeout` returns `Err(Elapsed)`.
///
/// Code that does not park cannot be interrupted: the deadline is checked at park points.
/// The unwind follows the rules of every green thread's unwind: its destructors do not switch
/// (timed waits return at once, untimed ones panic), and one that panics aborts the process.
/// Timeouts nest; the earliest deadline in force wins, and each `timeout` reports only its
/// own expiry (an outer one's passes through the inner one as an unwind).
///
/// # Panics
/// Outside a runtime; and with `body`'s own panic.
///
/// ```
/// use std::time::Duration;
/// use greenweave::time::timeout;
///
/// greenweave::run(|| {
///     let slow = timeout(Duration::from_millis(10), || {
///         greenweave::thread::sleep(Duration::from_secs(60));
///         "finished"
///     });
///     assert!(slow.is_err());
///     let fast = timeout(Duration::from_secs(60), || "finished");
///     assert_eq!(fast, Ok("finished"));
/// });
/// ```
pub fn timeout<T>(duration: Duration, body: impl FnOnce() -> T) -> Result<T, Elapsed> {
    match Instant::now().checked_add(duration) {
        Some(deadline) => timeout_at(deadline, body),
        None => Ok(body()),
    }
}

/// Like [`timeout`], with a deadline instead of a duration.
///
/// # Panics
/// Outside a runtime; and with `body`'s own panic.
pub fn timeout_at<T>(deadline: Instant, body: impl FnOnce() -> T) -> Result<T, Elapsed> {
    thread_local! {
        static NEXT_TOKEN: Cell<u64> = const { Cell::new(1) };
    }
    let token = NEXT_TOKEN.with(|next| next.replace(next.get() + 1));
    let task = with_scheduler("greenweave::time::timeout", |scheduler| {
        scheduler.current_task()
    });
    let outer = task.scope_deadline.get();
    let inner = match outer {
        Some((outer_deadline, _)) if outer_deadline <= deadline => outer,
        _ => Some((deadline, token)),
    };
    task.set_scope_deadline(inner);
    let result = panic::catch_unwind(AssertUnwindSafe(body));
    task.set_scope_deadline(outer);
    match result {
        Ok(value) => Ok(value),
        Err(payload) => match payload.downcast_ref::<ScopeElapsed>() {
            Some(ScopeElapsed(expired)) if *expired == token => Err(Elapsed(())),
            _ => panic::resume_unwind(payload),
        },
    }
}
