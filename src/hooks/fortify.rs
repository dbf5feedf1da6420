//! The fortified variants of hooked functions. C code compiled with `_FORTIFY_SOURCE` (the
//! default of several distributions' compilers) calls `__read_chk`, `__recv_chk`,
//! `__recvfrom_chk`, `__poll_chk` or `__ppoll_chk` instead of the plain function when the
//! destination's size is known: the same call, after a check that the length fits the buffer.
//! Each makes that check (failing as glibc does, through its `__chk_fail`, which reports the
//! overflow and aborts) and then calls the hook.

use libc::{
    c_int, c_void, nfds_t, pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec,
};

use super::{io, poll};

unsafe extern "C" {
    /// glibc's report of a failed fortify check: prints "*** buffer overflow detected ***" and
    /// aborts.
    fn __chk_fail() -> !;
}

/// Fails as glibc does when `needed` bytes do not fit the `available` ones.
fn check(needed: size_t, available: size_t) {
    if needed > available {
        // SAFETY: no preconditions; it does not return.
        unsafe { __chk_fail() }
    }
}

/// `__read_chk`: `read` into a buffer of `buflen` bytes.
///
/// # Safety
/// That of libc's `read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    nbytes: size_t,
    buflen: size_t,
) -> ssize_t {
    check(nbytes, buflen);
    // SAFETY: the caller's contract, with the length checked against the buffer.
    unsafe { io::read(fd, buf, nbytes) }
}

/// `__recv_chk`: `recv` into a buffer of `buflen` bytes.
///
/// # Safety
/// That of libc's `recv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    check(len, buflen);
    // SAFETY: as above.
    unsafe { io::recv(fd, buf, len, flags) }
}

/// `__recvfrom_chk`: `recvfrom` into a buffer of `buflen` bytes.
///
/// # Safety
/// That of libc's `recvfrom`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    check(len, buflen);
    // SAFETY: as above.
    unsafe { io::recvfrom(fd, buf, len, flags, addr, addrlen) }
}

/// `__poll_chk`: `poll` over an array of `fdslen` bytes.
///
/// # Safety
/// That of libc's `poll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: c_int,
    fdslen: size_t,
) -> c_int {
    check((nfds as size_t).saturating_mul(size_of::<pollfd>()), fdslen);
    // SAFETY: as above.
    unsafe { poll::poll(fds, nfds, timeout) }
}

/// `__ppoll_chk`: `ppoll` over an array of `fdslen` bytes.
///
/// # Safety
/// That of libc's `ppoll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: *const timespec,
    sigmask: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    check((nfds as size_t).saturating_mul(size_of::<pollfd>()), fdslen);
    // SAFETY: as above.
    unsafe { poll::ppoll(fds, nfds, timeout, sigmask) }
}
