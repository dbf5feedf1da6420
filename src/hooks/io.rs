//! The hooked fd calls: reads, writes, socket sends and receives, `connect`, `accept`,
//! `listen`, and the calls that keep [`fd_state`] true (`socket`, `close`, `dup*`,
//! `setsockopt`, `fcntl`, `ioctl`).
//!
//! Inside a green thread, a socket call is made with `MSG_DONTWAIT` (the fd's own mode is never
//! changed, so every other thread sees libc's behaviour); if it says `EAGAIN` and the program
//! did not make the fd non-blocking, the green thread parks until the fd is ready (or the
//! socket's timeout) and the call is made again. A call returns what libc's blocking call would
//! have: a send on a blocking socket goes on until everything is sent, a receive with
//! `MSG_WAITALL` on a stream socket until everything has come (or the end of the stream, an
//! error, the timeout), each spending one unit of the cooperative budget. `accept` waits for
//! the listener to be readable and then makes libc's blocking call (a loop of accepts runs
//! until `EAGAIN`, spending only for the first of a turn, as greenweave's listeners do);
//! `connect`, which has no per-call flag, turns `O_NONBLOCK` on for the one attempt (see each
//! for why). Reads and writes of fds that are not sockets but that epoll can watch (pipes,
//! terminals) ask the kernel whether they are ready (`poll` with a zero timeout) and park until
//! they are. Writes to fds 1 and 2 never park (see [`is_standard_stream`]). Reads of regular
//! files are `file.rs`'s; writes to them, and every call made outside a green thread, go
//! straight to libc.

use std::cell::Cell;
use std::os::fd::RawFd;
use std::time::Instant;

use libc::{
    EAGAIN, EINPROGRESS, MSG_DONTWAIT, MSG_NOSIGNAL, MSG_PEEK, MSG_WAITALL, c_int, c_ulong, c_void,
    iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t,
};

use super::file;
use super::wait::{self, FdWaitError};
use crate::io::source::ACCEPTS_PER_TURN;
use crate::runtime::reactor::Interest;
use crate::runtime::scheduler::{self, with_scheduler};
use crate::sys::fd_state::{self, errno, set_errno};
use crate::sys::real;

/// Whether `fd` is standard output or standard error, which writes never park on.
///
/// std's `Stdout` and `Stderr` write to fds 1 and 2 under an OS-thread-reentrant lock
/// (`ReentrantLock<RefCell<..>>`): a green thread parked inside such a write would hold it, and
/// another green thread of the same OS thread would enter it (it is the same OS thread) and
/// panic on the `RefCell` (`already borrowed`). So these writes go to libc as they are and, to
/// a full pipe, block the OS thread as libc's do; a line is never torn and no `println!`
/// panics. C's stdio (`printf`, `fwrite(stdout)`) writes fds 1 and 2 the same way, under a
/// `FILE` lock that is also recursive per OS thread.
#[inline]
fn is_standard_stream(fd: RawFd) -> bool {
    fd == libc::STDOUT_FILENO || fd == libc::STDERR_FILENO
}

/// The result of a transfer that moved `done` bytes before it ended with `error`: the count if
/// it moved any (as the kernel returns a partial count, keeping the error for the next call),
/// else -1 with `error`.
fn done_or(done: usize, error: c_int) -> ssize_t {
    if done > 0 {
        done as ssize_t
    } else {
        set_errno(error);
        -1
    }
}

/// Whether the kernel would end a blocking transfer that has already moved bytes here, without
/// a further call: an error is pending on the socket (and, for a receive, nothing is left to
/// read before it). Another call would take the pending error (`SO_ERROR` is cleared by the
/// call that reports it) where libc's one call returns the count and leaves it for the next.
/// Only asked on the rare path of a transfer that goes on after a partial one.
fn error_is_pending(fd: RawFd, interest: Interest) -> bool {
    let mut entry = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let saved = errno();
    // SAFETY: one live pollfd, zero timeout.
    let ready = unsafe { real::poll(&mut entry, 1, 0) };
    set_errno(saved);
    ready == 1
        && entry.revents & libc::POLLERR != 0
        && (interest == Interest::Writable || entry.revents & libc::POLLIN == 0)
}

/// Whether `fd` is a stream socket (`SO_TYPE`), where `MSG_WAITALL` waits for every byte; a
/// datagram socket's receive returns one datagram whatever the flag says.
fn is_stream_socket(fd: RawFd) -> bool {
    let mut kind: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    let saved = errno();
    // SAFETY: `kind` and `len` are live and sized for SO_TYPE's int.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&raw mut kind).cast(),
            &mut len,
        )
    };
    set_errno(saved);
    rc == 0 && kind == libc::SOCK_STREAM
}

/// Runs a socket call made with `MSG_DONTWAIT` for a green thread, as libc's blocking call
/// would have gone: `attempt(done)` makes the call for what is left after the `done` bytes
/// already moved, and `more(done)` says, after a call moved some, whether libc's call would
/// go on (a send until everything is sent, a `MSG_WAITALL` receive until everything came).
///
/// Parks while the call says `EAGAIN` on an fd the program left blocking, bounded by the
/// socket's timeout in that direction for the whole call (then `EAGAIN`, as libc reports an
/// expired `SO_RCVTIMEO`, or the count moved so far). An error after some bytes moved returns
/// the count, as the kernel does. Spends one unit of the cooperative budget.
fn socket_call(
    what: &'static str,
    fd: RawFd,
    interest: Interest,
    mut attempt: impl FnMut(usize) -> ssize_t,
    mut more: impl FnMut(usize) -> bool,
) -> ssize_t {
    if let Err(interrupted) = wait::spend_budget(what) {
        set_errno(interrupted.errno());
        return -1;
    }
    let mut done = 0;
    let mut deadline: Option<Option<Instant>> = None;
    loop {
        if done > 0 && error_is_pending(fd, interest) {
            return done as ssize_t;
        }
        let result = attempt(done);
        if result > 0 {
            done += result as usize;
            if more(done) {
                continue;
            }
            return done as ssize_t;
        }
        if result == 0 {
            // The end of the stream (or nothing asked for).
            return done as ssize_t;
        }
        let error = errno();
        if error != EAGAIN {
            return done_or(done, error);
        }
        let state = fd_state::state(fd);
        if state.is_nonblocking() {
            return done_or(done, EAGAIN);
        }
        let deadline = *deadline.get_or_insert_with(|| {
            fd_state::timeout(fd, state, interest == Interest::Writable)
                .and_then(|timeout| Instant::now().checked_add(timeout))
        });
        if let Err(failed) = wait_for(what, fd, interest, deadline) {
            return done_or(done, failed);
        }
    }
}

/// `more` for a receive with `flags` of `len` bytes: with `MSG_WAITALL` (and without
/// `MSG_PEEK`, see [`peek_call`]) on a stream socket, until all `len` came.
fn receive_more(fd: RawFd, flags: c_int, len: usize) -> impl FnMut(usize) -> bool {
    let mut stream = None;
    move |done| {
        flags & MSG_WAITALL != 0
            && done < len
            && *stream.get_or_insert_with(|| is_stream_socket(fd))
    }
}

/// The flags of a continued send: `MSG_NOSIGNAL` once some bytes went (the kernel raises
/// `SIGPIPE` only for a call that sent nothing, and libc's one call has sent some).
fn send_flags(flags: c_int, done: usize) -> c_int {
    flags | MSG_DONTWAIT | if done > 0 { MSG_NOSIGNAL } else { 0 }
}

/// A `MSG_PEEK | MSG_WAITALL` receive on a stream socket, for a green thread: libc's waits until
/// `len` bytes can be peeked (or the end of the stream, an error, the timeout) and returns them
/// all from the front of the queue, so each `attempt` peeks the whole buffer again and the
/// green thread parks until more has come. `len()` is asked once a call has succeeded.
fn peek_call(
    what: &'static str,
    fd: RawFd,
    mut len: impl FnMut() -> usize,
    mut attempt: impl FnMut() -> ssize_t,
) -> ssize_t {
    if !is_stream_socket(fd) {
        return socket_call(what, fd, Interest::Readable, |_| attempt(), |_| false);
    }
    if let Err(interrupted) = wait::spend_budget(what) {
        set_errno(interrupted.errno());
        return -1;
    }
    let mut deadline: Option<Option<Instant>> = None;
    loop {
        let result = attempt();
        let peeked = usize::try_from(result).unwrap_or(0);
        if result == -1 && errno() != EAGAIN || result == 0 || peeked >= len() {
            return result;
        }
        if peeked > 0 && read_side_is_done(fd) {
            return result;
        }
        let state = fd_state::state(fd);
        if state.is_nonblocking() {
            return done_or(peeked, EAGAIN);
        }
        let deadline = *deadline.get_or_insert_with(|| {
            fd_state::timeout(fd, state, false)
                .and_then(|timeout| Instant::now().checked_add(timeout))
        });
        if let Err(failed) = wait_for(what, fd, Interest::Readable, deadline) {
            return done_or(peeked, failed);
        }
    }
}

/// Whether nothing more will come to read on `fd`: the peer shut its side, or an error is
/// pending (a peek that found some bytes then returns them, as the kernel's does).
fn read_side_is_done(fd: RawFd) -> bool {
    let mut entry = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    let saved = errno();
    // SAFETY: one live pollfd, zero timeout.
    let ready = unsafe { real::poll(&mut entry, 1, 0) };
    set_errno(saved);
    ready == 1 && entry.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
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

/// Runs a call on a pollable fd that is not a socket (a pipe, a terminal) or a call with no
/// per-call non-blocking flag (`accept`) for a green thread: asks the kernel whether the fd is
/// ready, parks until it is (or `deadline`: then `EAGAIN`), then makes the call (which then
/// does not block, unless another thread empties the fd first). Spends one unit of the
/// cooperative budget.
fn poll_then_call(
    what: &'static str,
    fd: RawFd,
    interest: Interest,
    deadline: impl FnMut() -> Option<Instant>,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    if let Err(interrupted) = wait::spend_budget(what) {
        set_errno(interrupted.errno());
        return -1;
    }
    poll_then_call_unbudgeted(what, fd, interest, deadline, call)
}

/// `poll_then_call` without spending budget: for a caller that has spent (or chosen not to).
fn poll_then_call_unbudgeted(
    what: &'static str,
    fd: RawFd,
    interest: Interest,
    mut deadline: impl FnMut() -> Option<Instant>,
    call: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let mut until: Option<Option<Instant>> = None;
    loop {
        match crate::sys::is_ready_now(fd, interest == Interest::Writable) {
            Ok(true) | Err(_) => return call(),
            Ok(false) => {}
        }
        let until = *until.get_or_insert_with(&mut deadline);
        if let Err(failed) = wait_for(what, fd, interest, until) {
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
            socket_call(
                "read (hooked)",
                fd,
                Interest::Readable,
                |_| unsafe { real::recv(fd, buf, count, MSG_DONTWAIT) },
                |_| false,
            ),
            || unsafe { real::read(fd, buf, count) },
        ),
        Route::OtherPollable => poll_then_call(
            "read (hooked)",
            fd,
            Interest::Readable,
            || None,
            || unsafe { real::read(fd, buf, count) },
        ),
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

/// `write(2)`. On a blocking socket, as libc's: everything is sent (parking while the send
/// buffer is full), unless the timeout or an error ends it first.
///
/// # Safety
/// That of libc's `write`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY (every call below): the caller's contract is libc's, passed on unchanged; a
    // continued call sends the tail of the caller's buffer, `done < count` bytes in.
    if !scheduler::can_park_here() || is_standard_stream(fd) {
        return unsafe { real::write(fd, buf, count) };
    }
    match route(fd) {
        Route::Libc | Route::File => unsafe { real::write(fd, buf, count) },
        Route::Socket => unless_not_a_socket(
            fd,
            socket_call(
                "write (hooked)",
                fd,
                Interest::Writable,
                |done| unsafe {
                    real::send(fd, buf.byte_add(done), count - done, send_flags(0, done))
                },
                |done| done < count,
            ),
            || unsafe { real::write(fd, buf, count) },
        ),
        Route::OtherPollable => poll_then_call(
            "write (hooked)",
            fd,
            Interest::Writable,
            || None,
            || unsafe { real::write(fd, buf, count) },
        ),
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

/// The caller's iovecs as a slice.
///
/// # Safety
/// `iov` points to `count` live iovecs (a call on them has just succeeded, so the kernel found
/// the array readable).
unsafe fn iovecs<'a>(iov: *const iovec, count: usize) -> &'a [iovec] {
    if count == 0 {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(iov, count) }
}

/// How many bytes `iov` covers.
fn iov_total(iov: &[iovec]) -> usize {
    iov.iter()
        .fold(0usize, |total, entry| total.saturating_add(entry.iov_len))
}

/// What is left of `iov` once `done` bytes of it have been transferred: the entries it used
/// up dropped, the one it stopped in shortened. A continued vectored call is made on this copy;
/// the caller's array is never changed.
fn iov_after(iov: &[iovec], done: usize) -> Vec<iovec> {
    let mut skip = done;
    let mut rest = Vec::with_capacity(iov.len());
    for entry in iov {
        if skip >= entry.iov_len {
            skip -= entry.iov_len;
            continue;
        }
        rest.push(iovec {
            // The pointer is only handed to the kernel, which checks it.
            iov_base: entry.iov_base.wrapping_byte_add(skip),
            iov_len: entry.iov_len - skip,
        });
        skip = 0;
    }
    rest
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
            let result = socket_call(
                "readv (hooked)",
                fd,
                Interest::Readable,
                |_| unsafe { real::recvmsg(fd, &mut message, MSG_DONTWAIT) },
                |_| false,
            );
            unless_not_a_socket(fd, result, || unsafe { real::readv(fd, iov, iovcnt) })
        }
        Route::OtherPollable => poll_then_call(
            "readv (hooked)",
            fd,
            Interest::Readable,
            || None,
            || unsafe { real::readv(fd, iov, iovcnt) },
        ),
    }
}

/// `writev(2)`. On a blocking socket, as libc's: everything is sent, the iovecs advanced past
/// what went (on a copy) after each partial send.
///
/// # Safety
/// That of libc's `writev`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY (every call below): the caller's contract is libc's, passed on unchanged.
    if !scheduler::can_park_here() || iovcnt < 0 || is_standard_stream(fd) {
        return unsafe { real::writev(fd, iov, iovcnt) };
    }
    match route(fd) {
        Route::Libc | Route::File => unsafe { real::writev(fd, iov, iovcnt) },
        Route::Socket => {
            let count = iovcnt as usize;
            let mut total = None;
            let result = socket_call(
                "writev (hooked)",
                fd,
                Interest::Writable,
                |done| {
                    // SAFETY: a call on the caller's array has succeeded (`done > 0`).
                    let rest = (done > 0).then(|| iov_after(unsafe { iovecs(iov, count) }, done));
                    let message = match &rest {
                        Some(rest) => iov_message(rest.as_ptr(), rest.len() as c_int),
                        None => iov_message(iov, iovcnt),
                    };
                    // SAFETY: the message's iovecs are the caller's, or a live copy of part of
                    // them.
                    unsafe { real::sendmsg(fd, &message, send_flags(0, done)) }
                },
                // SAFETY: as above.
                |done| {
                    done < *total.get_or_insert_with(|| iov_total(unsafe { iovecs(iov, count) }))
                },
            );
            unless_not_a_socket(fd, result, || unsafe { real::writev(fd, iov, iovcnt) })
        }
        Route::OtherPollable => poll_then_call(
            "writev (hooked)",
            fd,
            Interest::Writable,
            || None,
            || unsafe { real::writev(fd, iov, iovcnt) },
        ),
    }
}

/// Whether a socket call with `flags` may park: in a green thread, and the call itself did not
/// ask not to wait.
fn may_park(flags: c_int) -> bool {
    flags & MSG_DONTWAIT == 0 && scheduler::can_park_here()
}

/// Whether a receive with `flags` is a `MSG_PEEK | MSG_WAITALL` one ([`peek_call`]).
fn peeks_all(flags: c_int) -> bool {
    flags & (MSG_PEEK | MSG_WAITALL) == MSG_PEEK | MSG_WAITALL
}

/// `recv(2)`. With `MSG_WAITALL` on a stream socket, as libc's: parks until all `len` bytes
/// came (or the end of the stream, an error, the timeout).
///
/// # Safety
/// That of libc's `recv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY (every call below): the caller's contract is libc's, passed on unchanged; a
    // continued call fills the tail of the caller's buffer, `done < len` bytes in.
    if !may_park(flags) {
        return unsafe { real::recv(fd, buf, len, flags) };
    }
    if peeks_all(flags) {
        return peek_call(
            "recv (hooked)",
            fd,
            || len,
            || unsafe { real::recv(fd, buf, len, flags | MSG_DONTWAIT) },
        );
    }
    socket_call(
        "recv (hooked)",
        fd,
        Interest::Readable,
        |done| unsafe { real::recv(fd, buf.byte_add(done), len - done, flags | MSG_DONTWAIT) },
        receive_more(fd, flags, len),
    )
}

/// `recvfrom(2)`, as `recv`.
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
    // SAFETY (every call below): as in `recv`.
    if !may_park(flags) {
        return unsafe { real::recvfrom(fd, buf, len, flags, addr, addrlen) };
    }
    if peeks_all(flags) {
        return peek_call(
            "recvfrom (hooked)",
            fd,
            || len,
            || unsafe { real::recvfrom(fd, buf, len, flags | MSG_DONTWAIT, addr, addrlen) },
        );
    }
    socket_call(
        "recvfrom (hooked)",
        fd,
        Interest::Readable,
        |done| unsafe {
            real::recvfrom(
                fd,
                buf.byte_add(done),
                len - done,
                flags | MSG_DONTWAIT,
                addr,
                addrlen,
            )
        },
        receive_more(fd, flags, len),
    )
}

/// `recvmsg(2)`, as `recv`. A continued `MSG_WAITALL` call fills the rest of the caller's
/// iovecs (through a copy of them) and may still receive control data; once a call has
/// received some, the receive ends there, as the kernel's ends after a message that carried
/// file descriptors.
///
/// # Safety
/// That of libc's `recvmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY (every call below): the caller's contract is libc's, passed on unchanged.
    if !may_park(flags) {
        return unsafe { real::recvmsg(fd, msg, flags) };
    }
    if peeks_all(flags) {
        let len = || {
            // SAFETY: a call on the caller's msghdr and iovecs has succeeded.
            let message = unsafe { msg.read() };
            iov_total(unsafe { iovecs(message.msg_iov, message.msg_iovlen) })
        };
        return peek_call("recvmsg (hooked)", fd, len, || unsafe {
            real::recvmsg(fd, msg, flags | MSG_DONTWAIT)
        });
    }
    if flags & MSG_WAITALL == 0 {
        return socket_call(
            "recvmsg (hooked)",
            fd,
            Interest::Readable,
            |_| unsafe { real::recvmsg(fd, msg, flags | MSG_DONTWAIT) },
            |_| false,
        );
    }
    // SAFETY: the caller's msghdr is live and readable (libc's contract).
    let original = unsafe { msg.read() };
    let count = original.msg_iovlen;
    let mut total = None;
    let mut stream = None;
    socket_call(
        "recvmsg (hooked)",
        fd,
        Interest::Readable,
        |done| {
            if done == 0 {
                // SAFETY: as above.
                return unsafe { real::recvmsg(fd, msg, flags | MSG_DONTWAIT) };
            }
            // SAFETY: a call on the caller's array has succeeded (`done > 0`).
            let rest = iov_after(unsafe { iovecs(original.msg_iov, count) }, done);
            let mut message = original;
            message.msg_iov = rest.as_ptr().cast_mut();
            message.msg_iovlen = rest.len() as _;
            // SAFETY: the caller's name and control buffers, and a live copy of part of its
            // iovecs.
            let result = unsafe { real::recvmsg(fd, &mut message, flags | MSG_DONTWAIT) };
            if result > 0 {
                // SAFETY: the caller's msghdr is live and writable (libc's contract): what
                // this call said about the name, control data and flags is the caller's.
                unsafe {
                    (*msg).msg_namelen = message.msg_namelen;
                    (*msg).msg_controllen = message.msg_controllen;
                    (*msg).msg_flags |= message.msg_flags;
                }
            }
            result
        },
        |done| {
            // SAFETY: as above (read only).
            let control = unsafe { (*msg).msg_controllen };
            control == 0
                && done
                    < *total.get_or_insert_with(|| {
                        // SAFETY: a call on the caller's array has succeeded.
                        iov_total(unsafe { iovecs(original.msg_iov, count) })
                    })
                && *stream.get_or_insert_with(|| is_stream_socket(fd))
        },
    )
}

/// `send(2)`. On a blocking socket, as libc's: everything is sent (parking while the send
/// buffer is full), unless the timeout or an error ends it first.
///
/// # Safety
/// That of libc's `send`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY (both calls): the caller's contract is libc's, passed on unchanged; a continued
    // call sends the tail of the caller's buffer, `done < len` bytes in.
    if !may_park(flags) {
        return unsafe { real::send(fd, buf, len, flags) };
    }
    socket_call(
        "send (hooked)",
        fd,
        Interest::Writable,
        |done| unsafe { real::send(fd, buf.byte_add(done), len - done, send_flags(flags, done)) },
        |done| done < len,
    )
}

/// `sendto(2)`, as `send`.
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
    // SAFETY (both calls): as in `send`.
    if !may_park(flags) {
        return unsafe { real::sendto(fd, buf, len, flags, addr, addrlen) };
    }
    socket_call(
        "sendto (hooked)",
        fd,
        Interest::Writable,
        |done| unsafe {
            real::sendto(
                fd,
                buf.byte_add(done),
                len - done,
                send_flags(flags, done),
                addr,
                addrlen,
            )
        },
        |done| done < len,
    )
}

/// `sendmsg(2)`, as `send`: a continued call sends the rest of the caller's iovecs (through a
/// copy of them) without the control data, which went with the first.
///
/// # Safety
/// That of libc's `sendmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY (every call below): the caller's contract is libc's, passed on unchanged.
    if !may_park(flags) {
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    let mut total = None;
    socket_call(
        "sendmsg (hooked)",
        fd,
        Interest::Writable,
        |done| {
            if done == 0 {
                // SAFETY: as above.
                return unsafe { real::sendmsg(fd, msg, send_flags(flags, 0)) };
            }
            // SAFETY: the caller's msghdr is live and readable, and a call on its iovecs has
            // succeeded (`done > 0`).
            let mut message = unsafe { msg.read() };
            let rest = iov_after(unsafe { iovecs(message.msg_iov, message.msg_iovlen) }, done);
            message.msg_iov = rest.as_ptr().cast_mut();
            message.msg_iovlen = rest.len() as _;
            message.msg_control = std::ptr::null_mut();
            message.msg_controllen = 0;
            // SAFETY: the caller's name, and a live copy of part of its iovecs.
            unsafe { real::sendmsg(fd, &message, send_flags(flags, done)) }
        },
        |done| {
            done < *total.get_or_insert_with(|| {
                // SAFETY: as above.
                let message = unsafe { msg.read() };
                iov_total(unsafe { iovecs(message.msg_iov, message.msg_iovlen) })
            })
        },
    )
}

/// Makes one call with `O_NONBLOCK` turned on for it, for `connect` (which has no per-call
/// flag) on an fd the program left blocking; `flags` are its `F_GETFL` flags. Keeps the call's
/// `errno`.
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
/// `O_NONBLOCK` is turned on for the one `connect` call and off again: connect has no per-call
/// flag, and only a non-blocking attempt starts a connection without waiting for it. The flag
/// belongs to the open file description, so another thread could see it for those few
/// microseconds; but a socket being connected is the connecting thread's (it almost always
/// made it just before), and another thread has nothing to do with it until it is connected.
/// `accept`, whose listener other threads do use at the same time, never changes the flag.
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
    if let Err(interrupted) = wait::spend_budget("connect (hooked)") {
        set_errno(interrupted.errno());
        return -1;
    }
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

/// `accept4(2)`: in a green thread on a blocking listener, the green thread parks until the
/// listener is readable (a connection is queued; or the listener's `SO_RCVTIMEO` passes: then
/// `EAGAIN`, as libc's), then libc's blocking `accept4` takes the connection.
///
/// The listener's mode is never touched: `O_NONBLOCK` belongs to the open file description,
/// which other threads and processes share (a plain thread's blocking `accept` on the same
/// listener would fail with `EAGAIN` while it was on). The price: if another thread or process
/// takes the queued connection between the readiness check and the call, the call blocks this
/// OS thread until the next connection, exactly as libc's accept would block it, and no result
/// differs from libc's. A listener that green threads on several OS threads (or processes)
/// accept from at once is better served by greenweave's `net::TcpListener`, or one listener per
/// worker (`bind_reuse_port`).
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
    let state = fd_state::state(fd);
    let accepted = if scheduler::can_park_here() && state.is_socket() && !state.is_nonblocking() {
        let deadline = || {
            fd_state::timeout(fd, state, false)
                .and_then(|timeout| Instant::now().checked_add(timeout))
        };
        // SAFETY: the caller's contract is libc's, passed on unchanged.
        let call = || unsafe { real::accept4(fd, addr, len, flags) as ssize_t };
        green_accept4(fd, deadline, call)
    } else {
        // SAFETY: the caller's contract is libc's, passed on unchanged.
        unsafe { real::accept4(fd, addr, len, flags) }
    };
    if accepted >= 0 {
        fd_state::new_socket(accepted, flags & libc::SOCK_NONBLOCK != 0);
    }
    accepted
}

thread_local! {
    /// The run of successful hooked accepts on this OS thread (see `Source::do_accept`): the
    /// listener, the turn (the scheduler's count of completed runs, constant while a green
    /// thread runs, so the turn names the green thread too), and how many in a row.
    static ACCEPT_RUN: Cell<(c_int, u64, u32)> = const { Cell::new((-1, u64::MAX, 0)) };
}

/// The hooked `accept4` of a green thread: as greenweave's own listeners, a loop of accepts
/// runs until `EAGAIN` (it parks), spending budget only for the first accept of a run in one
/// turn, up to `ACCEPTS_PER_TURN` in a row (`Source::do_accept`); a failure ends the run.
fn green_accept4(
    fd: c_int,
    deadline: impl FnMut() -> Option<Instant>,
    call: impl FnOnce() -> ssize_t,
) -> c_int {
    const WHAT: &str = "accept (hooked)";
    let run_in = |turn: u64| match ACCEPT_RUN.get() {
        (listener, at, run) if listener == fd && at == turn => run,
        _ => 0,
    };
    let run = run_in(scheduler::runs_completed());
    if let Err(interrupted) = wait::spend_budget_in_run(WHAT, run, ACCEPTS_PER_TURN) {
        set_errno(interrupted.errno());
        return -1;
    }
    let accepted = poll_then_call_unbudgeted(WHAT, fd, Interest::Readable, deadline, call);
    if accepted >= 0 {
        // A yield or a park in between started a new turn, and a new run.
        let turn = scheduler::runs_completed();
        ACCEPT_RUN.set((fd, turn, run_in(turn) + 1));
    } else {
        ACCEPT_RUN.set((-1, u64::MAX, 0));
    }
    accepted as c_int
}

/// The backlog std's `TcpListener::bind` asks for, which is not the program's choice.
const STD_BACKLOG: c_int = 128;

/// `listen(2)`: in a green thread, std's backlog of 128 becomes as long as the kernel allows
/// (`net.core.somaxconn`), as greenweave's `net::TcpListener` has it. Green threads make
/// connections in bursts no OS-thread program would (a thousand green threads each connecting
/// once, before the acceptor's turn); a burst longer than the backlog has its SYNs dropped,
/// and each of those connects waits a second or more for the kernel's retry. Any other
/// backlog is the program's choice and kept; outside a green thread, libc's `listen` as is.
///
/// # Safety
/// That of libc's `listen` (none beyond it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    let backlog = if backlog == STD_BACKLOG && scheduler::can_park_here() {
        crate::sys::socket::DEFAULT_BACKLOG as c_int
    } else {
        backlog
    };
    // SAFETY: no memory preconditions.
    unsafe { real::listen(fd, backlog) }
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
