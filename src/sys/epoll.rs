//! `epoll`: one instance, edge-triggered registrations keyed by a 64-bit token.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::check;

/// Readiness bits the reactor cares about, as `epoll` reports them.
pub(crate) const READ_EVENTS: u32 =
    (libc::EPOLLIN | libc::EPOLLPRI | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
pub(crate) const WRITE_EVENTS: u32 = (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) as u32;
/// The read side is closed: the peer shut its write side, or the connection is gone.
pub(crate) const READ_CLOSED_EVENTS: u32 =
    (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
/// Urgent (out-of-band) data is pending.
pub(crate) const URGENT_EVENTS: u32 = libc::EPOLLPRI as u32;

/// An epoll instance.
pub(crate) struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 has no memory preconditions; a non-negative result is a new fd
        // that we own.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just returned to us and is owned by nothing else.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Registers `fd` for reads and writes, edge-triggered, reporting `token`; with
    /// `EPOLLRDHUP` and `EPOLLPRI`, so the reactor knows when a short read proves nothing.
    pub(crate) fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN
                | libc::EPOLLOUT
                | libc::EPOLLRDHUP
                | libc::EPOLLPRI
                | libc::EPOLLET) as u32,
            u64: token,
        };
        // SAFETY: `event` is a valid epoll_event for the duration of the call.
        check(unsafe {
            libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event)
        })?;
        Ok(())
    }

    /// Removes `fd`; errors (the fd already closed) are ignored by callers.
    pub(crate) fn delete(&self, fd: RawFd) -> io::Result<()> {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL since Linux 2.6.9.
        check(unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        })?;
        Ok(())
    }

    /// Waits up to `timeout` (forever if `None`) and fills `events`; returns how many arrived.
    /// An interrupted wait returns 0 events.
    pub(crate) fn wait(
        &self,
        events: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let timeout_ms = match timeout {
            None => -1,
            // Round up, so a wait for 0.5 ms does not spin with a 0 ms timeout.
            Some(timeout) => timeout
                .as_nanos()
                .div_ceil(1_000_000)
                .min(libc::c_int::MAX as u128) as libc::c_int,
        };
        let capacity = events.len().min(libc::c_int::MAX as usize) as libc::c_int;
        // SAFETY: `events` is writable for `capacity` entries. libc's own `epoll_wait`, never
        // the hook (which would take the runtime's wait for a foreign loop's).
        let rc = unsafe {
            super::real::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                capacity,
                timeout_ms,
            )
        };
        match check(rc) {
            Ok(n) => Ok(n as usize),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(error) => Err(error),
        }
    }
}
