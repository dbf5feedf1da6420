//! The hooked foreign event loops: `epoll_wait`, `epoll_pwait` and `epoll_pwait2`. A loop the
//! program runs itself (raw `epoll`, `mio`, the `tokio` runtime hidden in a blocking client
//! such as `postgres`) waits in one of them; in a green thread that wait parks only the green
//! thread.
//!
//! An epoll fd is itself pollable: it is readable while its ready list holds an event. So the
//! kernel is asked first with a zero timeout (one system call when an event is ready: the fast
//! path); if none is, the green thread parks on the epoll fd's readability in the runtime's
//! reactor (and on the timeout), and the kernel is asked again, with a zero timeout, on each
//! wake-up. What the caller gets is what libc gives: the events, 0 once the timeout has passed
//! with none, or -1 and `errno`.
//!
//! The runtime's own `epoll_wait` never comes here (`sys::epoll` calls `sys::real`), so the fd
//! waited on is always a foreign loop's.
//!
//! May not: keep state of its own, or change the foreign epoll instance (it only waits on it).

use std::cell::Cell;
use std::time::{Duration, Instant};

use libc::{c_int, epoll_event, sigset_t, timespec};

use super::wait::{self, FdWaitError, Interrupted};
use crate::runtime::reactor::Interest;
use crate::runtime::scheduler;
use crate::sys::fd_state::set_errno;
use crate::sys::real;

thread_local! {
    /// Green threads of this OS thread parked in a foreign event loop's wait.
    static FOREIGN_LOOPS_WAITING: Cell<usize> = const { Cell::new(0) };
}

/// How many green threads of this OS thread are parked in a foreign event loop's wait. One of
/// them may be inside another tokio runtime's `block_on` (a sync client such as `postgres`),
/// which sets tokio's per-OS-thread "runtime entered" flag: the worker's own tokio runtime
/// (feature `tokio`) cannot turn meanwhile.
#[cfg(feature = "tokio")]
pub(crate) fn foreign_loops_waiting() -> usize {
    FOREIGN_LOOPS_WAITING.with(Cell::get)
}

/// Counts a green thread parked in a foreign loop's wait while it lives.
struct ForeignLoopWaiting;

impl ForeignLoopWaiting {
    fn new() -> ForeignLoopWaiting {
        FOREIGN_LOOPS_WAITING.with(|waiting| waiting.set(waiting.get() + 1));
        ForeignLoopWaiting
    }
}

impl Drop for ForeignLoopWaiting {
    fn drop(&mut self) {
        FOREIGN_LOOPS_WAITING.with(|waiting| waiting.set(waiting.get() - 1));
    }
}

/// How a green thread's wait on a foreign epoll instance ended.
enum Outcome {
    /// What the call returns (with `errno` set for -1).
    Returned(c_int),
    /// The reactor cannot watch the epoll fd (epoll refused to nest it, `ELOOP`): block the OS
    /// thread in libc instead, until this deadline (`None`: for ever), as libc would.
    Block(Option<Instant>),
}

/// The green-thread wait on `epfd`: asks the kernel with `ask` (the caller's call with a zero
/// timeout and no signal mask), parks on `epfd`'s readability until `deadline` while nothing
/// is ready, and asks again after each wake-up. Only called where
/// `scheduler::can_park_here()`.
fn green_wait(
    what: &'static str,
    epfd: c_int,
    deadline: Option<Instant>,
    ask: impl Fn() -> c_int,
) -> Outcome {
    let ask = || Outcome::Returned(ask());
    loop {
        // Events, or an error (a bad fd, not an epoll fd, a bad buffer): returned as they are.
        let asked = ask();
        if !matches!(asked, Outcome::Returned(0)) {
            return asked;
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return asked;
        }
        let waiting = ForeignLoopWaiting::new();
        let waited = wait::for_fd(what, epfd, Interest::Readable, deadline);
        drop(waiting);
        match waited {
            // Readable, or closed through the `close` hook: the kernel says which (`EBADF`).
            Ok(()) | Err(FdWaitError::Closed) => continue,
            // An event that came right at the deadline is still the caller's.
            Err(FdWaitError::TimedOut) => return ask(),
            // A `time::timeout` scope that ran out: the caller sees its wait time out, as a
            // `poll` does.
            Err(FdWaitError::Interrupted(Interrupted::ScopeElapsed)) => {
                return Outcome::Returned(0);
            }
            Err(FdWaitError::Interrupted(interrupted)) => {
                set_errno(interrupted.errno());
                return Outcome::Returned(-1);
            }
            Err(FdWaitError::Unwatchable) => return Outcome::Block(deadline),
        }
    }
}

/// The deadline of a timeout in milliseconds; `None` (for ever) for a negative one, as the
/// kernel reads it.
fn deadline_after_millis(timeout: c_int) -> Option<Instant> {
    let millis = u64::try_from(timeout).ok()?;
    Instant::now().checked_add(Duration::from_millis(millis))
}

/// The milliseconds left until `deadline`, rounded up (-1 for none), for a call that blocks
/// after the green path gave up.
fn millis_left(deadline: Option<Instant>) -> c_int {
    deadline.map_or(-1, |deadline| {
        let left = deadline.saturating_duration_since(Instant::now());
        left.as_nanos().div_ceil(1_000_000).min(c_int::MAX as u128) as c_int
    })
}

/// `epoll_wait(2)`.
///
/// # Safety
/// That of libc's `epoll_wait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    maxevents: c_int,
    timeout: c_int,
) -> c_int {
    // The worker's own tokio runtime polling its driver during a turn (feature `tokio`).
    #[cfg(feature = "tokio")]
    // SAFETY: the caller's contract is libc's, passed on.
    if let Some(result) = unsafe {
        crate::runtime::tokio_context::intercept_epoll_wait(epfd, events, maxevents, timeout)
    } {
        return result;
    }
    if timeout == 0 || !scheduler::can_park_here() {
        // SAFETY: the caller's contract is libc's, passed on unchanged.
        return unsafe { real::epoll_wait(epfd, events, maxevents, timeout) };
    }
    let deadline = deadline_after_millis(timeout);
    // SAFETY: the caller's contract is libc's, passed on with a zero timeout.
    let ask = || unsafe { real::epoll_wait(epfd, events, maxevents, 0) };
    match green_wait("epoll_wait (hooked)", epfd, deadline, ask) {
        Outcome::Returned(result) => result,
        // SAFETY: as above, with what is left of the timeout.
        Outcome::Block(deadline) => unsafe {
            real::epoll_wait(epfd, events, maxevents, millis_left(deadline))
        },
    }
}

/// `epoll_pwait(2)`. The signal mask is applied only when the call goes to libc: a green
/// thread that parks shares the OS thread's mask with every other green thread, so a mask is
/// not swapped around a park (as the hooked `ppoll`).
///
/// # Safety
/// That of libc's `epoll_pwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut epoll_event,
    maxevents: c_int,
    timeout: c_int,
    sigmask: *const sigset_t,
) -> c_int {
    if timeout == 0 || !scheduler::can_park_here() {
        // SAFETY: the caller's contract is libc's, passed on unchanged.
        return unsafe { real::epoll_pwait(epfd, events, maxevents, timeout, sigmask) };
    }
    let deadline = deadline_after_millis(timeout);
    // SAFETY: the caller's contract is libc's, passed on with a zero timeout (and, as a
    // parked wait, no mask).
    let ask = || unsafe { real::epoll_wait(epfd, events, maxevents, 0) };
    match green_wait("epoll_pwait (hooked)", epfd, deadline, ask) {
        Outcome::Returned(result) => result,
        // SAFETY: as above, with what is left of the timeout.
        Outcome::Block(deadline) => unsafe {
            real::epoll_pwait(epfd, events, maxevents, millis_left(deadline), sigmask)
        },
    }
}

/// `epoll_pwait2(2)`: a `timespec` timeout (NULL for none), and the mask as `epoll_pwait`.
///
/// # Safety
/// That of libc's `epoll_pwait2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    events: *mut epoll_event,
    maxevents: c_int,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    let deadline = if timeout.is_null() {
        Some(None)
    } else {
        // SAFETY: a non-null timeout points to a timespec (libc's contract).
        let t = unsafe { &*timeout };
        let valid = t.tv_sec >= 0 && (0..1_000_000_000).contains(&t.tv_nsec);
        let zero = t.tv_sec == 0 && t.tv_nsec == 0;
        // A zero timeout never parks; an invalid one is the kernel's `EINVAL`, at once.
        (valid && !zero)
            .then(|| Instant::now().checked_add(Duration::new(t.tv_sec as u64, t.tv_nsec as u32)))
    };
    let deadline = match deadline {
        Some(deadline) if scheduler::can_park_here() => deadline,
        // SAFETY: the caller's contract is libc's, passed on unchanged.
        _ => return unsafe { real::epoll_pwait2(epfd, events, maxevents, timeout, sigmask) },
    };
    let zero = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Asked with `epoll_pwait2` itself, so a kernel without it says `ENOSYS` as libc's would.
    // SAFETY: the caller's contract is libc's, passed on with a zero timeout (and, as a
    // parked wait, no mask).
    let ask = || unsafe { real::epoll_pwait2(epfd, events, maxevents, &zero, std::ptr::null()) };
    match green_wait("epoll_pwait2 (hooked)", epfd, deadline, ask) {
        Outcome::Returned(result) => result,
        Outcome::Block(deadline) => {
            let left = deadline.map(|deadline| {
                let left = deadline.saturating_duration_since(Instant::now());
                timespec {
                    tv_sec: left.as_secs() as libc::time_t,
                    tv_nsec: left.subsec_nanos() as libc::c_long,
                }
            });
            let left_ptr = left
                .as_ref()
                .map_or(std::ptr::null(), |left| left as *const timespec);
            // SAFETY: as above, with what is left of the timeout (a live timespec or NULL).
            unsafe { real::epoll_pwait2(epfd, events, maxevents, left_ptr, sigmask) }
        }
    }
}
