//! How a hook waits: parks the calling green thread on the runtime's reactor (an fd, or several
//! for `poll`) or its timers, and turns whatever ends the park into what a C caller can see.
//!
//! A hook is an `extern "C"` function: nothing may unwind out of it. A park unwinds for two
//! reasons, a cancellation (`JoinHandle::cancel`, the runtime's shutdown) and the end of a
//! `time::timeout` scope; here both are caught and become an error return instead
//! ([`Interrupted`]). Both stay in force: a cancellation is raised again at the green thread's
//! next park in Rust code, and a scope whose deadline has passed ends at its next park, so the
//! error only has to get the caller back to Rust code.

use std::os::fd::RawFd;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::time::Instant;

use crate::runtime::reactor::{Interest, ScheduledIo};
use crate::runtime::scheduler::{self, Cancelled, ScopeElapsed, with_scheduler};
use crate::runtime::task::{Wait, Wake};

/// Why a hooked wait ended without what it waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Interrupted {
    /// The green thread was cancelled: the call fails with `ECANCELED`, which no caller
    /// retries (an `EINTR` would be retried, and meet the cancellation again, for ever).
    Cancelled,
    /// The `time::timeout` scope around the call ran out: the call fails as a timeout.
    ScopeElapsed,
}

impl Interrupted {
    /// The `errno` a call interrupted so reports.
    pub(super) fn errno(self) -> libc::c_int {
        match self {
            Interrupted::Cancelled => libc::ECANCELED,
            Interrupted::ScopeElapsed => libc::ETIMEDOUT,
        }
    }
}

/// How a wait for an fd ended, short of the fd becoming ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FdWaitError {
    /// The deadline (a socket timeout) passed.
    TimedOut,
    /// The fd was closed (through the `close` hook) while the green thread waited.
    Closed,
    Interrupted(Interrupted),
    /// The reactor cannot watch this fd (epoll refused it): the caller blocks the OS thread
    /// instead, as libc would.
    Unwatchable,
}

/// Parks (catching the unwinds of cancellation and scope ends) until woken or `deadline`.
pub(super) fn park(
    what: &'static str,
    wait: Wait,
    deadline: Option<Instant>,
    io: Option<Rc<ScheduledIo>>,
    register: impl FnMut(&Rc<crate::runtime::task::Task>, u64),
) -> Result<Wake, Interrupted> {
    match panic::catch_unwind(AssertUnwindSafe(|| {
        scheduler::park(what, wait, deadline, io, register)
    })) {
        Ok(wake) => Ok(wake),
        Err(payload) if payload.is::<Cancelled>() => Err(Interrupted::Cancelled),
        Err(payload) if payload.is::<ScopeElapsed>() => Err(Interrupted::ScopeElapsed),
        // Nothing else unwinds out of a park; if it did, letting it reach the `extern "C"`
        // boundary aborts with Rust's message, which is the right end for a bug.
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// Spends one unit of the cooperative budget (`runtime::budget`) for a hooked call that may
/// park, as greenweave's own sockets do for theirs: a green thread whose calls never have to
/// wait (a std socket whose peer always keeps up) lets the others run every `BUDGET` calls.
/// Made before the call, so nothing it took is lost if the yield is interrupted: then
/// `Err`, and the hook fails as a park so interrupted would.
pub(super) fn spend_budget(what: &'static str) -> Result<(), Interrupted> {
    interruptible(|| crate::runtime::budget::spend(what))
}

/// `spend_budget` for a call of a run of calls that go on without spending
/// (`runtime::budget::spend_in_run`: the hooked `accept4`).
pub(super) fn spend_budget_in_run(
    what: &'static str,
    run: u32,
    bound: u32,
) -> Result<(), Interrupted> {
    interruptible(|| crate::runtime::budget::spend_in_run(what, run, bound))
}

/// Runs `spend`, turning the unwind of an interrupted yield in it into `Err`.
#[inline(always)]
fn interruptible(spend: impl FnOnce() + panic::UnwindSafe) -> Result<(), Interrupted> {
    // The closure is inlined: the unwind guard costs nothing unless the budget's cold path
    // yields and the yield unwinds.
    match panic::catch_unwind(spend) {
        Ok(()) => Ok(()),
        Err(payload) if payload.is::<Cancelled>() => Err(Interrupted::Cancelled),
        Err(payload) if payload.is::<ScopeElapsed>() => Err(Interrupted::ScopeElapsed),
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// The readiness of `fd` in the running runtime's reactor (registered on first use, and again
/// once the number names another file).
fn registered(what: &'static str, fd: RawFd) -> Option<Rc<ScheduledIo>> {
    let generation = crate::sys::fd_state::generation(fd);
    with_scheduler(what, |scheduler| {
        scheduler.reactor.register_borrowed(fd, generation)
    })
    .ok()
}

/// Parks the calling green thread until `fd` is ready in `interest`'s direction, after a call
/// on it said `EAGAIN`. Only called where `scheduler::can_park_here()`.
pub(super) fn for_fd(
    what: &'static str,
    fd: RawFd,
    interest: Interest,
    deadline: Option<Instant>,
) -> Result<(), FdWaitError> {
    let Some(io) = registered(what, fd) else {
        return Err(FdWaitError::Unwatchable);
    };
    // The call just said EAGAIN: whatever readiness was cached is used up. An edge that came
    // since is queued in the kernel and wakes the park below.
    io.clear_readiness(interest);
    loop {
        if io.is_closed() {
            return Err(FdWaitError::Closed);
        }
        if io.is_ready(interest) {
            return Ok(());
        }
        let wait = Wait::Io { fd, interest };
        match park(what, wait, deadline, Some(io.clone()), |_, _| {}) {
            Ok(Wake::Notified) => continue,
            Ok(Wake::TimedOut) => return Err(FdWaitError::TimedOut),
            Ok(Wake::Cancelled) => unreachable!("park raises a cancellation, never returns it"),
            Err(interrupted) => return Err(FdWaitError::Interrupted(interrupted)),
        }
    }
}

/// How a wait for several fds ended.
pub(super) enum ManyWait {
    /// One of them may be ready (the caller asks the kernel).
    Woken,
    TimedOut,
    Interrupted(Interrupted),
    /// One of the fds cannot be watched: the caller blocks the OS thread instead.
    Unwatchable,
}

/// Parks until one of `fds` (each with the directions it waits for) has an edge, or
/// `deadline`. The caller has just asked the kernel (a zero-timeout `poll`) and found none
/// ready; edges since then are queued in the kernel and wake this park.
pub(super) fn for_any_fd(
    what: &'static str,
    fds: &[(RawFd, bool, bool)],
    deadline: Option<Instant>,
) -> ManyWait {
    let mut watched = Vec::with_capacity(fds.len());
    for &(fd, readable, writable) in fds {
        let Some(io) = registered(what, fd) else {
            return ManyWait::Unwatchable;
        };
        watched.push((io, readable, writable));
    }
    let (first_fd, first_interest) =
        fds.first()
            .map_or((-1, Interest::Readable), |&(fd, readable, _)| {
                (
                    fd,
                    if readable {
                        Interest::Readable
                    } else {
                        Interest::Writable
                    },
                )
            });
    let wait = Wait::Io {
        fd: first_fd,
        interest: first_interest,
    };
    let register = |task: &Rc<crate::runtime::task::Task>, park: u64| {
        for (io, readable, writable) in &watched {
            if *readable {
                io.add_waiter(Interest::Readable, task.clone(), park);
            }
            if *writable {
                io.add_waiter(Interest::Writable, task.clone(), park);
            }
        }
    };
    match park(what, wait, deadline, None, register) {
        Ok(Wake::Notified) => ManyWait::Woken,
        Ok(Wake::TimedOut) => ManyWait::TimedOut,
        Ok(Wake::Cancelled) => unreachable!("park raises a cancellation, never returns it"),
        Err(interrupted) => ManyWait::Interrupted(interrupted),
    }
}

/// Sleeps the calling green thread until `deadline` (or for ever, `None`, as `poll` with no
/// fds and an infinite timeout does). Returns early, without error, if it is cancelled or its
/// `time::timeout` scope ends: a sleep cut short needs no error to reach the Rust code that
/// raises them (std's `sleep` would turn an error into a panic).
pub(super) fn sleep_until(
    what: &'static str,
    deadline: Option<Instant>,
) -> Result<(), Interrupted> {
    loop {
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Ok(());
        }
        match park(what, Wait::Sleep, deadline, None, |_, _| {}) {
            Ok(Wake::TimedOut) => return Ok(()),
            // Woken by nothing a sleep waits for (a scope's deadline): look again.
            Ok(_) => continue,
            Err(interrupted) => return Err(interrupted),
        }
    }
}
