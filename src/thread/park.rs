//! [`park`], [`park_timeout`] and [`Thread::unpark`](super::Thread::unpark): std's park token
//! for green threads.
//!
//! Owns: the public functions. The token itself, what every [`Thread`](super::Thread) handle of
//! one green thread shares, and the park loop are the runtime's (`runtime::parker`), which a
//! task holds.
//!
//! May not: keep state of its own.

use std::time::{Duration, Instant};

use crate::runtime::parker::park_green;
use crate::runtime::scheduler;

/// Blocks the calling green thread until its token is available, as `std::thread::park`:
/// [`Thread::unpark`](super::Thread::unpark) (from any green thread of any worker, or from any
/// OS thread) makes the token available, and an unpark that comes first makes the next park
/// return at once. The other green threads run meanwhile.
///
/// As std's, it may in principle return spuriously, so call it in a loop that checks a
/// condition; this one avoids it: a wake-up meant for another wait parks again.
///
/// A cancellation ([`JoinHandle::cancel`](super::JoinHandle::cancel)) or an expired
/// [`time::timeout`](crate::time::timeout) unwinds the green thread from here, as from every
/// park. Called outside a green thread (a plain OS thread), it is `std::thread::park`, whose
/// token is std's `Thread`'s.
///
/// **Use this, not `std::thread::park`, in a green thread**: std's blocks the whole OS thread
/// and every green thread on it (unless the `hooks` feature makes its futex wait green).
///
/// # Panics
/// While its green thread unwinds (in a destructor during a panic or a cancellation), as
/// every untimed wait then does. A park nothing could ever end (every green thread waits, and
/// no handle of this one is held but by itself) is a deadlock: [`run`](crate::run) panics with
/// the report, which names it.
///
/// # Examples
///
/// ```
/// use std::cell::Cell;
/// use std::rc::Rc;
/// use greenweave::thread;
///
/// greenweave::run(|| {
///     let done = Rc::new(Cell::new(false));
///     let parked = thread::current();
///     let flag = done.clone();
///     let worker = greenweave::spawn(move || {
///         flag.set(true);
///         parked.unpark();
///     });
///     while !done.get() {
///         thread::park();
///     }
///     worker.join().unwrap();
/// });
/// ```
pub fn park() {
    if !scheduler::in_green_thread() {
        std::thread::park();
        return;
    }
    park_green("greenweave::thread::park", None);
}

/// [`park`], but for at most `timeout`, as `std::thread::park_timeout`: returns when the token
/// is available (consuming it) or when `timeout` has passed, whichever comes first; the caller
/// tells which by its own condition. Outside a green thread it is `std::thread::park_timeout`.
///
/// ```
/// use std::time::{Duration, Instant};
/// use greenweave::thread;
///
/// greenweave::run(|| {
///     let start = Instant::now();
///     thread::park_timeout(Duration::from_millis(5)); // nobody unparks
///     assert!(start.elapsed() >= Duration::from_millis(5));
///
///     thread::current().unpark();
///     thread::park_timeout(Duration::from_secs(60)); // the token is there: returns at once
/// });
/// ```
///
/// # Panics
/// As [`park`], except that it never counts as a deadlock and returns at once while its green
/// thread unwinds.
pub fn park_timeout(timeout: Duration) {
    if !scheduler::in_green_thread() {
        std::thread::park_timeout(timeout);
        return;
    }
    // A timeout too large to add to now is a park that returns after a very long time, as
    // std's returns after its longest futex wait.
    let deadline = Instant::now()
        .checked_add(timeout)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(u32::MAX.into()));
    park_green("greenweave::thread::park_timeout", Some(deadline));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::runtime::parker::park_green_with;

    #[test]
    fn an_unpark_between_the_look_for_a_token_and_the_switch_out_is_not_lost() {
        crate::run(|| {
            // Nobody else holds a handle: were the unpark lost, the park would be reported as
            // a deadlock.
            park_green_with("test", None, || crate::thread::current().unpark());
            // From another OS thread, as it happens in the race.
            park_green_with("test", None, || {
                let me = crate::thread::current();
                std::thread::spawn(move || me.unpark()).join().unwrap();
            });
            // Timed: it returns with the token, not at its (far) deadline.
            let deadline = std::time::Instant::now() + Duration::from_secs(3600);
            park_green_with("test", Some(deadline), || crate::thread::current().unpark());
        });
    }
}
