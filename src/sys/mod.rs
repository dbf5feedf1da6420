//! Thin, safe wrappers over the Linux system calls the runtime needs.
//!
//! Owns: CPU affinity (`affinity`, for pinning workers), what another OS thread is doing
//! (`os_thread`: its system call from `/proc`, or its program counter), `epoll` (one instance per runtime), `eventfd` (the runtime's wake-up line from other
//! OS threads), and the conversions between std's socket addresses (`std::net::SocketAddr`,
//! `std::os::unix::net::SocketAddr`) and `sockaddr` that a non-blocking `connect` needs. Each
//! wrapper returns `io::Result` and retries `EINTR` where retrying is the only sensible answer.
//!
//! May not: know about tasks, wakers or scheduling; callers decide what readiness means.

pub(crate) mod affinity;
pub(crate) mod epoll;
pub(crate) mod eventfd;
#[cfg(feature = "hooks")]
pub(crate) mod fd_state;
pub(crate) mod os_thread;
pub(crate) mod real;
pub(crate) mod socket;

use std::io;

/// Turns a `-1` return into the `errno` error.
pub(crate) fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Whether `fd` is ready for reading (`writable == false`) or writing right now, asked of the
/// kernel with a zero-timeout `poll(2)`. Errors and hang-ups count as ready: the next
/// operation will report them.
pub(crate) fn is_ready_now(fd: std::os::fd::RawFd, writable: bool) -> io::Result<bool> {
    let events = if writable {
        libc::POLLOUT
    } else {
        libc::POLLIN | libc::POLLPRI
    };
    let mut entry = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, zero timeout.
        match check(unsafe { real::poll(&mut entry, 1, 0) }) {
            Ok(_) => {
                return Ok(entry.revents
                    & (events | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL)
                    != 0);
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        }
    }
}
