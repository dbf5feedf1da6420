//! The hooked multiplexers: `poll`, `ppoll` and `select`. In a green thread, the kernel is asked
//! first with a zero timeout (one system call when something is ready: the fast path); if
//! nothing is, the green thread parks on every fd at once (and the timeout), and the kernel is
//! asked again on each wake-up. `select` is `poll` over the fds in its sets.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use libc::{c_int, fd_set, nfds_t, pollfd, sigset_t, timespec, timeval};

use super::wait::{self, ManyWait};
use crate::runtime::scheduler;
use crate::sys::fd_state::set_errno;
use crate::sys::real;

/// The green-thread `poll`: `Ok(n)` as poll returns, `Err(errno)`; `None` for "block the OS
/// thread in libc instead" (an fd the reactor cannot watch).
fn green_poll(
    what: &'static str,
    fds: &mut [pollfd],
    deadline: Option<Instant>,
) -> Option<Result<c_int, c_int>> {
    let watched: Vec<(RawFd, bool, bool)> = fds
        .iter()
        .filter(|entry| entry.fd >= 0)
        .map(|entry| {
            let readable = entry.events & (libc::POLLIN | libc::POLLPRI | libc::POLLRDHUP) != 0;
            let writable = entry.events & libc::POLLOUT != 0;
            // Errors and hang-ups are reported whatever was asked: wait for reading then.
            (entry.fd, readable || !writable, writable)
        })
        .collect();
    loop {
        // SAFETY: `fds` is a live, writable slice of pollfds.
        let ready = unsafe { real::poll(fds.as_mut_ptr(), fds.len() as nfds_t, 0) };
        if ready != 0 {
            return Some(if ready == -1 {
                Err(crate::sys::fd_state::errno())
            } else {
                Ok(ready)
            });
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Some(Ok(0));
        }
        let outcome = if watched.is_empty() {
            // No fds: a sleep.
            match wait::sleep_until(what, deadline) {
                Ok(()) => ManyWait::TimedOut,
                Err(interrupted) => ManyWait::Interrupted(interrupted),
            }
        } else {
            wait::for_any_fd(what, &watched, deadline)
        };
        match outcome {
            ManyWait::Woken => continue,
            ManyWait::TimedOut => return Some(Ok(0)),
            // A `time::timeout` scope that ran out: the caller sees its poll time out.
            ManyWait::Interrupted(super::wait::Interrupted::ScopeElapsed) => return Some(Ok(0)),
            ManyWait::Interrupted(interrupted) => return Some(Err(interrupted.errno())),
            ManyWait::Unwatchable => return None,
        }
    }
}

/// The deadline of a timeout given in milliseconds, negative for none.
fn deadline_after_millis(timeout: c_int) -> Option<Instant> {
    let millis = u64::try_from(timeout).ok()?;
    Instant::now().checked_add(Duration::from_millis(millis))
}

/// The deadline of a `timespec` timeout; `Err(())` for an invalid one (libc's `EINVAL`).
fn deadline_after_timespec(timeout: &timespec) -> Result<Option<Instant>, ()> {
    if timeout.tv_sec < 0 || !(0..1_000_000_000).contains(&timeout.tv_nsec) {
        return Err(());
    }
    let duration = Duration::new(timeout.tv_sec as u64, timeout.tv_nsec as u32);
    Ok(Instant::now().checked_add(duration))
}

fn finish(result: Result<c_int, c_int>) -> c_int {
    match result {
        Ok(ready) => ready,
        Err(errno) => {
            set_errno(errno);
            -1
        }
    }
}

/// The `nfds` pollfds at `fds` as a slice (empty for none, whatever `fds` is).
///
/// # Safety
/// For `nfds > 0`, `fds` points to `nfds` live, writable pollfds, not otherwise used meanwhile.
unsafe fn entries<'a>(fds: *mut pollfd, nfds: nfds_t) -> &'a mut [pollfd] {
    if nfds == 0 {
        &mut []
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) }
    }
}

/// `poll(2)`.
///
/// # Safety
/// That of libc's `poll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    // SAFETY (both libc calls): the caller's contract is libc's, passed on unchanged.
    if timeout == 0 || !scheduler::can_park_here() || (nfds > 0 && fds.is_null()) {
        return unsafe { real::poll(fds, nfds, timeout) };
    }
    // SAFETY: the caller passes `nfds` live pollfds at `fds`, as libc requires.
    let entries = unsafe { entries(fds, nfds) };
    match green_poll("poll (hooked)", entries, deadline_after_millis(timeout)) {
        Some(result) => finish(result),
        None => unsafe { real::poll(fds, nfds, timeout) },
    }
}

/// `ppoll(2)`. The signal mask is applied only when the call goes to libc: a green thread that
/// parks shares the OS thread's mask with every other green thread, so a mask is not swapped
/// around a park (only signals, which green threads cannot target, would tell the difference).
///
/// # Safety
/// That of libc's `ppoll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    // SAFETY (the libc calls): the caller's contract is libc's, passed on unchanged.
    let zero = !timeout.is_null() && {
        // SAFETY: a non-null timeout points to a timespec (libc's contract).
        let t = unsafe { &*timeout };
        t.tv_sec == 0 && t.tv_nsec == 0
    };
    if zero || !scheduler::can_park_here() || (nfds > 0 && fds.is_null()) {
        return unsafe { real::ppoll(fds, nfds, timeout, sigmask) };
    }
    let deadline = if timeout.is_null() {
        None
    } else {
        // SAFETY: as above.
        match deadline_after_timespec(unsafe { &*timeout }) {
            Ok(deadline) => deadline,
            Err(()) => {
                set_errno(libc::EINVAL);
                return -1;
            }
        }
    };
    // SAFETY: the caller passes `nfds` live pollfds at `fds`.
    let entries = unsafe { entries(fds, nfds) };
    match green_poll("ppoll (hooked)", entries, deadline) {
        Some(result) => finish(result),
        None => unsafe { real::ppoll(fds, nfds, timeout, sigmask) },
    }
}

/// Whether `fd` is in `set` (a null set holds nothing).
///
/// # Safety
/// `set` is null or points to a live fd_set, and `fd < FD_SETSIZE`.
unsafe fn in_set(set: *mut fd_set, fd: c_int) -> bool {
    // SAFETY: the caller's contract.
    !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
}

/// `select(2)`, as `poll` over the fds of its three sets. On return the sets hold the ready
/// fds and `timeout` (Linux's behaviour) what was left of it.
///
/// # Safety
/// That of libc's `select`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    // SAFETY (the libc calls): the caller's contract is libc's, passed on unchanged.
    let zero = !timeout.is_null() && {
        // SAFETY: a non-null timeout points to a timeval (libc's contract).
        let t = unsafe { &*timeout };
        t.tv_sec == 0 && t.tv_usec == 0
    };
    if zero || !scheduler::can_park_here() || !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        return unsafe { real::select(nfds, readfds, writefds, exceptfds, timeout) };
    }
    let deadline = if timeout.is_null() {
        None
    } else {
        // SAFETY: as above.
        let t = unsafe { &*timeout };
        if t.tv_sec < 0 || !(0..1_000_000).contains(&t.tv_usec) {
            set_errno(libc::EINVAL);
            return -1;
        }
        Instant::now().checked_add(Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000))
    };
    let mut entries = Vec::new();
    for fd in 0..nfds {
        // SAFETY: each set is null or live (libc's contract), and fd < nfds <= FD_SETSIZE.
        let (read, write, except) = unsafe {
            (
                in_set(readfds, fd),
                in_set(writefds, fd),
                in_set(exceptfds, fd),
            )
        };
        let mut events = 0;
        if read {
            events |= libc::POLLIN;
        }
        if write {
            events |= libc::POLLOUT;
        }
        if except {
            events |= libc::POLLPRI;
        }
        if events != 0 {
            entries.push(pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    let result = match green_poll("select (hooked)", &mut entries, deadline) {
        Some(result) => result,
        None => return unsafe { real::select(nfds, readfds, writefds, exceptfds, timeout) },
    };
    if let Some(deadline) = deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        // SAFETY: non-null (a deadline came from it) and live.
        unsafe {
            *timeout = timeval {
                tv_sec: left.as_secs() as libc::time_t,
                tv_usec: left.subsec_micros() as libc::suseconds_t,
            }
        };
    }
    let ready = match result {
        Ok(ready) => ready,
        Err(errno) => return finish(Err(errno)),
    };
    if entries
        .iter()
        .any(|entry| entry.revents & libc::POLLNVAL != 0)
    {
        set_errno(libc::EBADF);
        return -1;
    }
    // SAFETY (the set updates): each set is null or live, and every fd < FD_SETSIZE.
    unsafe {
        for set in [readfds, writefds, exceptfds] {
            if !set.is_null() {
                libc::FD_ZERO(set);
            }
        }
    }
    let mut count = 0;
    if ready > 0 {
        for entry in &entries {
            let revents = entry.revents;
            let error = revents & (libc::POLLERR | libc::POLLHUP) != 0;
            let marks = [
                (
                    readfds,
                    libc::POLLIN,
                    revents & libc::POLLIN != 0 || (error && entry.events & libc::POLLIN != 0),
                ),
                (
                    writefds,
                    libc::POLLOUT,
                    revents & libc::POLLOUT != 0 || (error && entry.events & libc::POLLOUT != 0),
                ),
                (exceptfds, libc::POLLPRI, revents & libc::POLLPRI != 0),
            ];
            for (set, asked, ready) in marks {
                if ready && entry.events & asked != 0 {
                    // SAFETY: the set was given (the fd asked for it), fd < FD_SETSIZE.
                    unsafe { libc::FD_SET(entry.fd, set) };
                    count += 1;
                }
            }
        }
    }
    count
}
