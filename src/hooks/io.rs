//! The hooked fd calls: reads, writes, socket sends and receives, `connect`, `accept`, and the
//! calls that keep [`fd_state`] true (`socket`, `close`, `dup*`, `setsockopt`, `fcntl`,
//! `ioctl`).
//!
//! Inside a green thread, a socket call is made with `MSG_DONTWAIT` (the fd's own mode is never
//! changed, so every other thread sees libc's behaviour); if it says `EAGAIN` and the program
//! did not make the fd non-blocking, the green thread parks until the fd is ready (or the
//! socket's timeout) and the call is made again. Calls with no per-call non-blocking flag
//! (`connect`, `accept`) turn `O_NONBLOCK` on for the one attempt. Reads and writes of fds that
//! are not sockets but that epoll can watch (pipes, terminals) ask the kernel whether they are
//! ready (`poll` with a zero timeout) and park until they are. Reads of regular files are
//! `file.rs`'s; writes to them, and every call made outside a green thread, go straight to
//! libc.

use std::os::fd::RawFd;
use std::time::Instant;

use libc::{
    EAGAIN, EINPROGRESS, MSG_DONTWAIT, c_int, c_ulong, c_void, iovec, msghdr, size_t, sockaddr,
    socklen_t, ssize_t,
};

use super::file;
use super::wait::{self, FdWaitError};
use crate::runtime::reactor::Interest;
use crate::runtime::scheduler::{self, with_scheduler};
use crate::sys::fd_state::{self, errno, set_errno};
use crate::sys::real;

/// Runs a socket call made with `MSG_DONTWAIT` (`attempt`) for a green thread: parks while it
/// says `EAGAIN` on an fd the program left blocking, bounded by the socket's timeout in that
/// direction (then `EAGAIN`, as libc reports an expired `SO_RCVTIMEO`).
fn socket_call(
    what: &'static str,
    fd: RawFd,
    interest: Interest,
    mut attempt: impl FnMut() -> ssize_t,
) -> ssize_t {
    let mut deadline: Option<Option<Instant>> = None;
    loop {
        let result = attempt();
        if result != -1 || errno() != EAGAIN {
            return result;
        }
        let state = fd_state::state(fd);
        if state.is_nonblocking() {
            set_errno(EAGAIN);
            return -1;
        }
        let deadline = *deadline.get_or_insert_with(|| {
            fd_state::timeout(fd, state, interest == Interest::Writable)
                .and_then(|timeout| Instant::now().checked_add(timeout))
        });
        if let Err(failed) = wait_for(what, fd, interest, deadline) {
            set_errno(failed);
            return -1;
        }
    }
}

/// Waits for `fd` to be ready in `interest`'s direction; `Err(errno)` to return instead.
fn wait_for(
    what: &'static str,
    fd: RawFd,
    interest: Interest,
    deadline: Option<Instant>,
) -> Result<(), c_int> {
    match wait::for_fd(what, fd, interest, deadline) {
        Ok(()) => Ok(()),
        Err(FdWaitError::TimedOut) => Err(EAGAIN),
        Err(FdWaitError::Closed) => Err(libc::EBADF),
        Err(FdWaitError::Interrupted(interrupted)) => Err(interrupted.errno()),
        Err(FdWaitError::Unwatchable) => block_until_ready(fd, interest, deadline),
    }
}

/// The fallback for an fd the reactor cannot watch: waits as libc would, blocking the OS thread.
fn block_until_ready(
    fd: RawFd,
    interest: Interest,
    deadline: Option<Instant>,
) -> Result<(), c_int> {
    let events = match interest {
        Interest::Readable => libc::POLLIN,
        Interest::Writable => libc::POLLOUT,
    };
    let mut entry = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let timeout = deadline.map_or(-1, |deadline| {
        let left = deadline.saturating_duration_since(Instant::now());
        c_int::try_from(left.as_millis()).unwrap_or(c_int::MAX)
    });
    // SAFETY: one live pollfd.
    match unsafe { real::poll(&mut entry, 1, timeout) } {
        0 => Err(EAGAIN),
        -1 => Err(errno()),
        _ => Ok(()),
    }
}

/// Runs a call on a pollable fd that is not a socket (a pipe, a terminal) for a green thread:
/// asks the kernel whether it is ready, parks until it is, then makes the call (which then
/// does not block, unless another thread empties the fd first).
fn poll_then_call(
    what: &'static str,
    fd: RawFd,
    interest: Interest,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    loop {
        match crate::sys::is_ready_now(fd, interest == Interest::Writable) {
            Ok(true) | Err(_) => return call(),
            Ok(false) => {}
        }
        if let Err(failed) = wait_for(what, fd, interest, None) {
            set_errno(failed);
            return -1;
        }
    }
}

/// Which way a `read`/`write`-like call on `fd` goes in a green thread.
enum Route {
    /// Straight to libc: the program made the fd non-blocking, or epoll cannot watch it (for
    /// a read, a regular file that does not take `RWF_NOWAIT`).
    Libc,
    Socket,
    OtherPollable,
    /// A regular file (or directory, or block device) whose reads may be tried without
    /// waiting for the disk (`file.rs`); writes to it go to libc.
    File,
}

fn route(fd: RawFd) -> Route {
    let state = fd_state::state(fd);
    if state.is_nonblocking() {
        Route::Libc
    } else if !state.is_pollable() {
        if state.reads_nowait() {
            Route::File
        } else {
            Route::Libc
        }
    } else if state.is_socket() {
        Route::Socket
    } else {
        Route::OtherPollable
    }
}

/// The result of a socket call made on an fd the cache took for a socket. If the kernel says it
/// is not one (the fd was closed behind libc's back and its number reused), the cache is
/// forgotten and the plain call (`plain`) is made instead, as libc would have.
fn unless_not_a_socket(fd: RawFd, result: ssize_t, plain: impl FnOnce() -> ssize_t) -> ssize_t {
    if result == -1 && errno() == libc::ENOTSOCK {
        fd_state::forget(fd);
        return plain();
    }
    result
}

/// `read(2)`.
///
/// # Safety
/// That of libc's `read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY (every call below): the caller's contract is libc's, passed on unchanged.
    if !scheduler::can_park_here() {
        return unsafe { real::read(fd, buf, count) };
    }
    match route(fd) {
        Route::Libc => unsafe { real::read(fd, buf, count) },
        Route::File => {
            let buffer = iovec {
                iov_base: buf,
                iov_len: count,
            };
            unsafe { file::read(fd, &buffer, 1, file::At::Position) }
        }
        Route::Socket => unless_not_a_socket(
            fd,
            socket_call("read (hooked)", fd, Interest::Readable, || unsafe {
                real::recv(fd, buf, count, MSG_DONTWAIT)
            }),
            || unsafe { real::read(fd, buf, count) },
        ),
        Route::OtherPollable => {
            poll_then_call("read (hooked)", fd, Interest::Readable, || unsafe {
                real::read(fd, buf, count)
            })
        }
    }
}

/// `pread64(2)` (and `pread`, the same function under its other name): reads at an offset,
/// which only regular files take; as `read` for them in a green thread.
///
/// # Safety
/// That of libc's `pread64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: libc::off64_t,
) -> ssize_t {
    // SAFETY (both calls): the caller's contract is libc's, passed on unchanged.
    if !scheduler::can_park_here() || !matches!(route(fd), Route::File) {
        return unsafe { real::pread64(fd, buf, count, offset) };
    }
    let buffer = iovec {
        iov_base: buf,
        iov_len: count,
    };
    unsafe { file::read(fd, &buffer, 1, file::At::Offset(offset)) }
}

/// `pread(2)`: `pread64` (the same function on 64-bit Linux).
///
/// # Safety
/// That of libc's `pread`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: libc::off_t,
) -> ssize_t {
    // SAFETY: the same contract; off_t is off64_t on 64-bit Linux.
    unsafe { pread64(fd, buf, count, offset) }
}

/// `write(2)`.
///
/// # Safety
/// That of libc's `write`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY (every call below): the caller's contract is libc's, passed on unchanged.
    if !scheduler::can_park_here() {
        return unsafe { real::write(fd, buf, count) };
    }
    match route(fd) {
        Route::Libc | Route::File => unsafe { real::write(fd, buf, count) },
        Route::Socket => unless_not_a_socket(
            fd,
            socket_call("write (hooked)", fd, Interest::Writable, || unsafe {
                real::send(fd, buf, count, MSG_DONTWAIT)
            }),
            || unsafe { real::write(fd, buf, count) },
        ),
        Route::OtherPollable => {
            poll_then_call("write (hooked)", fd, Interest::Writable, || unsafe {
                real::write(fd, buf, count)
            })
        }
    }
}

/// A `msghdr` that carries only `iov` (what `readv`/`writev` on a socket are as `recvmsg`/`sendmsg`).
fn iov_message(iov: *const iovec, iovcnt: c_int) -> msghdr {
    // SAFETY: msghdr is plain data for which all zeroes is valid (no address, no control data).
    let mut message: msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = iov.cast_mut();
    message.msg_iovlen = usize::try_from(iovcnt).unwrap_or(0) as _;
    message
}

/// `readv(2)`.
///
/// # Safety
/// That of libc's `readv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY (every call below): the caller's contract is libc's, passed on unchanged; a
    // negative count goes to libc as is, for its EINVAL.
    if !scheduler::can_park_here() || iovcnt < 0 {
        return unsafe { real::readv(fd, iov, iovcnt) };
    }
    match route(fd) {
        Route::Libc => unsafe { real::readv(fd, iov, iovcnt) },
        Route::File => unsafe { file::read(fd, iov, iovcnt, file::At::Position) },
        Route::Socket => {
            let mut message = iov_message(iov, iovcnt);
            let result = socket_call("readv (hooked)", fd, Interest::Readable, || unsafe {
                real::recvmsg(fd, &mut message, MSG_DONTWAIT)
            });
            unless_not_a_socket(fd, result, || unsafe { real::readv(fd, iov, iovcnt) })
        }
        Route::OtherPollable => {
            poll_then_call("readv (hooked)", fd, Interest::Readable, || unsafe {
                real::readv(fd, iov, iovcnt)
            })
        }
    }
}

/// `writev(2)`.
///
/// # Safety
/// That of libc's `writev`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY (every call below): the caller's contract is libc's, passed on unchanged.
    if !scheduler::can_park_here() || iovcnt < 0 {
        return unsafe { real::writev(fd, iov, iovcnt) };
    }
    match route(fd) {
        Route::Libc | Route::File => unsafe { real::writev(fd, iov, iovcnt) },
        Route::Socket => {
            let message = iov_message(iov, iovcnt);
            let result = socket_call("writev (hooked)", fd, Interest::Writable, || unsafe {
                real::sendmsg(fd, &message, MSG_DONTWAIT)
            });
            unless_not_a_socket(fd, result, || unsafe { real::writev(fd, iov, iovcnt) })
        }
        Route::OtherPollable => {
            poll_then_call("writev (hooked)", fd, Interest::Writable, || unsafe {
                real::writev(fd, iov, iovcnt)
            })
        }
    }
}

/// Whether a socket call with `flags` may park: in a green thread, and the call itself did not
/// ask not to wait.
fn may_park(flags: c_int) -> bool {
    flags & MSG_DONTWAIT == 0 && scheduler::can_park_here()
}

/// `recv(2)`.
///
/// # Safety
/// That of libc's `recv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY (both calls): the caller's contract is libc's, passed on unchanged.
    if !may_park(flags) {
        return unsafe { real::recv(fd, buf, len, flags) };
    }
    socket_call("recv (hooked)", fd, Interest::Readable, || unsafe {
        real::recv(fd, buf, len, flags | MSG_DONTWAIT)
    })
}

/// `recvfrom(2)`.
///
/// # Safety
/// That of libc's `recvfrom`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    // SAFETY (both calls): the caller's contract is libc's, passed on unchanged.
    if !may_park(flags) {
        return unsafe { real::recvfrom(fd, buf, len, flags, addr, addrlen) };
    }
    socket_call("recvfrom (hooked)", fd, Interest::Readable, || unsafe {
        real::recvfrom(fd, buf, len, flags | MSG_DONTWAIT, addr, addrlen)
    })
}

/// `recvmsg(2)`.
///
/// # Safety
/// That of libc's `recvmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY (both calls): the caller's contract is libc's, passed on unchanged.
    if !may_park(flags) {
        return unsafe { real::recvmsg(fd, msg, flags) };
    }
    socket_call("recvmsg (hooked)", fd, Interest::Readable, || unsafe {
        real::recvmsg(fd, msg, flags | MSG_DONTWAIT)
    })
}

/// `send(2)`.
///
/// # Safety
/// That of libc's `send`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY (both calls): the caller's contract is libc's, passed on unchanged.
    if !may_park(flags) {
        return unsafe { real::send(fd, buf, len, flags) };
    }
    socket_call("send (hooked)", fd, Interest::Writable, || unsafe {
        real::send(fd, buf, len, flags | MSG_DONTWAIT)
    })
}

/// `sendto(2)`.
///
/// # Safety
/// That of libc's `sendto`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    // SAFETY (both calls): the caller's contract is libc's, passed on unchanged.
    if !may_park(flags) {
        return unsafe { real::sendto(fd, buf, len, flags, addr, addrlen) };
    }
    socket_call("sendto (hooked)", fd, Interest::Writable, || unsafe {
        real::sendto(fd, buf, len, flags | MSG_DONTWAIT, addr, addrlen)
    })
}

/// `sendmsg(2)`.
///
/// # Safety
/// That of libc's `sendmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY (both calls): the caller's contract is libc's, passed on unchanged.
    if !may_park(flags) {
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    socket_call("sendmsg (hooked)", fd, Interest::Writable, || unsafe {
        real::sendmsg(fd, msg, flags | MSG_DONTWAIT)
    })
}

/// Makes one call with `O_NONBLOCK` turned on for it, for calls that have no per-call flag
/// (`connect`, `accept`) on an fd the program left blocking; `flags` are its `F_GETFL` flags.
/// Keeps the call's `errno`.
///
/// # Safety
/// `call` must be safe to make on `fd`.
unsafe fn with_nonblocking<R>(fd: RawFd, flags: c_int, call: impl FnOnce() -> R) -> R {
    // SAFETY: F_SETFL takes an int of flags.
    unsafe { real::fcntl(fd, libc::F_SETFL, (flags | libc::O_NONBLOCK) as c_ulong) };
    let result = call();
    let saved = errno();
    // SAFETY: as above; restores the program's flags.
    unsafe { real::fcntl(fd, libc::F_SETFL, flags as c_ulong) };
    set_errno(saved);
    result
}

/// The `F_GETFL` flags of `fd`, if it is a blocking socket (one whose calls must be made
/// non-blocking for the green thread to park instead).
fn blocking_socket_flags(fd: RawFd) -> Option<c_int> {
    let state = fd_state::state(fd);
    if !state.is_socket() || state.is_nonblocking() {
        return None;
    }
    let saved = errno();
    // SAFETY: F_GETFL takes no argument.
    let flags = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
    set_errno(saved);
    (flags != -1 && flags & libc::O_NONBLOCK == 0).then_some(flags)
}

/// `connect(2)`: in a green thread on a blocking socket, started non-blocking; the green thread
/// parks until the socket is writable (or its send timeout, `SO_SNDTIMEO`, passes: then
/// `EINPROGRESS`, as libc's connect reports it) and the result is read from `SO_ERROR`.
///
/// # Safety
/// That of libc's `connect`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let flags = match scheduler::can_park_here().then(|| blocking_socket_flags(fd)) {
        Some(Some(flags)) => flags,
        // SAFETY: the caller's contract is libc's, passed on unchanged.
        _ => return unsafe { real::connect(fd, addr, len) },
    };
    // SAFETY: as above.
    let started = unsafe { with_nonblocking(fd, flags, || real::connect(fd, addr, len)) };
    if started == 0 || errno() != EINPROGRESS {
        // Done at once (loopback, Unix sockets) or refused at once; EAGAIN (a Unix listener's
        // full backlog) is returned too, as a program asking non-blockingly would see it.
        return started;
    }
    let state = fd_state::state(fd);
    let deadline =
        fd_state::timeout(fd, state, true).and_then(|timeout| Instant::now().checked_add(timeout));
    match wait_for("connect (hooked)", fd, Interest::Writable, deadline) {
        Ok(()) => {}
        Err(EAGAIN) => {
            set_errno(EINPROGRESS);
            return -1;
        }
        Err(failed) => {
            set_errno(failed);
            return -1;
        }
    }
    let mut error: c_int = 0;
    let mut error_len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: `error` and `error_len` are live and sized for SO_ERROR's int.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&raw mut error).cast(),
            &mut error_len,
        )
    };
    if rc == -1 {
        return -1;
    }
    if error != 0 {
        set_errno(error);
        return -1;
    }
    0
}

/// `accept(2)`.
///
/// # Safety
/// That of libc's `accept`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    if !scheduler::can_park_here() {
        // SAFETY: the caller's contract is libc's, passed on unchanged.
        return unsafe { real::accept(fd, addr, len) };
    }
    // SAFETY: accept(fd, addr, len) is accept4 with no flags.
    unsafe { accept4(fd, addr, len, 0) }
}

/// `accept4(2)`: in a green thread on a blocking listener, each attempt is made non-blocking,
/// and the green thread parks until a connection comes (or the listener's `SO_RCVTIMEO`).
///
/// # Safety
/// That of libc's `accept4`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let accepted = match scheduler::can_park_here().then(|| blocking_socket_flags(fd)) {
        Some(Some(listener_flags)) => {
            let accepted = socket_call("accept (hooked)", fd, Interest::Readable, || {
                // SAFETY: the caller's contract is libc's, passed on unchanged.
                unsafe {
                    with_nonblocking(fd, listener_flags, || {
                        real::accept4(fd, addr, len, flags) as ssize_t
                    })
                }
            });
            accepted as c_int
        }
        // SAFETY: the caller's contract is libc's, passed on unchanged.
        _ => unsafe { real::accept4(fd, addr, len, flags) },
    };
    if accepted >= 0 {
        fd_state::new_socket(accepted, flags & libc::SOCK_NONBLOCK != 0);
    }
    accepted
}

/// `socket(2)`: records the new socket's mode.
///
/// # Safety
/// That of libc's `socket` (none beyond it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    let fd = unsafe { real::socket(domain, kind, protocol) };
    if fd >= 0 {
        forget_registration(fd);
        fd_state::new_socket(fd, kind & libc::SOCK_NONBLOCK != 0);
    }
    fd
}

/// Drops this OS thread's runtime's registration of `fd`, if it has one: the fd leaves epoll
/// and green threads waiting on it wake to find it closed.
fn forget_registration(fd: RawFd) {
    if scheduler::in_runtime() {
        with_scheduler("close (hooked)", |scheduler| {
            scheduler.reactor.forget_borrowed(fd)
        });
    }
}

/// `close(2)`: a green thread parked on the fd wakes with `EBADF`, and the fd leaves epoll,
/// before libc closes it.
///
/// # Safety
/// That of libc's `close`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let saved = errno();
    fd_state::forget(fd);
    forget_registration(fd);
    set_errno(saved);
    // SAFETY: the caller's contract is libc's.
    unsafe { real::close(fd) }
}

/// `dup(2)`.
///
/// # Safety
/// That of libc's `dup`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    // SAFETY: no memory preconditions.
    let new = unsafe { real::dup(old) };
    if new >= 0 {
        fd_state::duplicated(old, new);
    }
    new
}

/// `dup2(2)`: `new`, if open, is closed by it, so it is forgotten first.
///
/// # Safety
/// That of libc's `dup2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new {
        fd_state::forget(new);
        forget_registration(new);
    }
    // SAFETY: no memory preconditions.
    let result = unsafe { real::dup2(old, new) };
    if result >= 0 && old != new {
        fd_state::duplicated(old, new);
    }
    result
}

/// `dup3(2)`.
///
/// # Safety
/// That of libc's `dup3`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new {
        fd_state::forget(new);
        forget_registration(new);
    }
    // SAFETY: no memory preconditions.
    let result = unsafe { real::dup3(old, new, flags) };
    if result >= 0 {
        fd_state::duplicated(old, new);
    }
    result
}

/// `setsockopt(2)`: records whether the socket has a receive or send timeout.
///
/// # Safety
/// That of libc's `setsockopt`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: the caller's contract is libc's, passed on unchanged.
    let result = unsafe { real::setsockopt(fd, level, name, value, len) };
    if result == 0
        && level == libc::SOL_SOCKET
        && (name == libc::SO_RCVTIMEO || name == libc::SO_SNDTIMEO)
        && len as usize >= std::mem::size_of::<libc::timeval>()
    {
        // SAFETY: the call succeeded, so `value` pointed to a timeval libc read.
        let timeval = unsafe { value.cast::<libc::timeval>().read_unaligned() };
        let set = timeval.tv_sec != 0 || timeval.tv_usec != 0;
        fd_state::set_timeout(fd, name == libc::SO_SNDTIMEO, set);
    }
    result
}

/// What `fcntl` and `fcntl64` jump to (`asm/hooks_<arch>.S`): the variadic argument arrives in
/// the register a third named argument would (both ABIs pass variadic integer arguments as
/// named ones), as a full word whose upper half is the caller's if it passed an int.
///
/// # Safety
/// That of libc's `fcntl` for `cmd`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn greenweave_hook_fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the caller's contract is libc's, passed on unchanged (the same word).
    let result = unsafe { real::fcntl(fd, cmd, arg) };
    if result != -1 {
        match cmd {
            libc::F_SETFL => fd_state::set_nonblocking(fd, arg as c_int & libc::O_NONBLOCK != 0),
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => fd_state::duplicated(fd, result),
            _ => {}
        }
    }
    result
}

/// What `ioctl` jumps to (`asm/hooks_<arch>.S`), as `greenweave_hook_fcntl`.
///
/// # Safety
/// That of libc's `ioctl` for `request`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn greenweave_hook_ioctl(fd: c_int, request: c_ulong, arg: c_ulong) -> c_int {
    // SAFETY: the caller's contract is libc's, passed on unchanged.
    let result = unsafe { real::ioctl(fd, request, arg) };
    if result != -1 && request == libc::FIONBIO as c_ulong {
        // SAFETY: the call succeeded, so `arg` pointed to the int libc read.
        let nonblocking = unsafe { (arg as *const c_int).read_unaligned() } != 0;
        fd_state::set_nonblocking(fd, nonblocking);
    }
    result
}
