//! Non-blocking socket creation and `connect`, which std only offers in blocking form, for
//! inet sockets (`std::net::SocketAddr`) and Unix-domain ones (`std::os::unix::net::SocketAddr`);
//! and `MSG_PEEK` receives on Unix-domain sockets, which std has not stabilised.

use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::SocketAddr as UnixSocketAddr;

use super::check;

/// A `sockaddr` for `addr`, with its length.
pub(crate) fn to_raw(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data for which all zeroes is a valid value, and it is
    // large and aligned enough to hold either sockaddr_in or sockaddr_in6.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(v4) => {
            let raw = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: see above: the storage holds a sockaddr_in.
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in>().write(raw) };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let raw = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: see above: the storage holds a sockaddr_in6.
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in6>().write(raw) };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// A `sockaddr_un` for a Unix-domain address (a path or, on Linux, an abstract name), with
/// its length.
///
/// # Errors
/// `InvalidInput` for an unnamed address, which nothing can connect or send to.
pub(crate) fn unix_to_raw(
    addr: &UnixSocketAddr,
) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data for which all zeroes is a valid value.
    let mut raw: libc::sockaddr_un = unsafe { mem::zeroed() };
    raw.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // A path is written NUL-terminated; an abstract name after a leading NUL, unterminated.
    let (skip, name, terminator) = if let Some(path) = addr.as_pathname() {
        (0, path.as_os_str().as_bytes(), 1)
    } else if let Some(name) = addr.as_abstract_name() {
        (1, name, 0)
    } else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an unnamed Unix socket address cannot be connected or sent to; \
             use the address of a socket bound to a path or an abstract name",
        ));
    };
    // std's SocketAddr already guarantees this; a failure here is a bug, not bad input.
    assert!(
        skip + name.len() + terminator <= raw.sun_path.len(),
        "a std Unix SocketAddr fits in sun_path"
    );
    for (slot, byte) in raw.sun_path[skip..].iter_mut().zip(name) {
        *slot = *byte as libc::c_char;
    }
    let len = mem::offset_of!(libc::sockaddr_un, sun_path) + skip + name.len() + terminator;
    Ok((raw, len as libc::socklen_t))
}

/// A new non-blocking, close-on-exec stream socket of `addr`'s family.
pub(crate) fn stream_socket_for(addr: &SocketAddr) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    new_socket(family, libc::SOCK_STREAM)
}

/// A new non-blocking, close-on-exec Unix-domain socket of type `kind` (`SOCK_STREAM`,
/// `SOCK_DGRAM`).
pub(crate) fn unix_socket(kind: libc::c_int) -> io::Result<OwnedFd> {
    new_socket(libc::AF_UNIX, kind)
}

fn new_socket(family: libc::c_int, kind: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: no memory preconditions; a non-negative result is a new fd that we own.
    let fd = check(unsafe {
        super::real::socket(family, kind | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: `fd` was just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new non-blocking, close-on-exec socket of type `kind` (`SOCK_STREAM`, `SOCK_DGRAM`) bound
/// to `addr` with `SO_REUSEPORT` set, so that other sockets that set it too (of the same user)
/// can bind the same address, and the kernel spreads incoming connections (or datagrams) among
/// them by a hash of the 4-tuple. A stream socket also gets `SO_REUSEADDR`, as std's
/// `TcpListener::bind` sets it, and is left listening with `backlog`.
pub(crate) fn bind_reuse_port(
    addr: &SocketAddr,
    kind: libc::c_int,
    backlog: u32,
) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let fd = new_socket(family, kind)?;
    set_flag(&fd, libc::SO_REUSEPORT)?;
    if kind == libc::SOCK_STREAM {
        set_flag(&fd, libc::SO_REUSEADDR)?;
    }
    let (storage, len) = to_raw(addr);
    // SAFETY: `storage` holds a valid sockaddr of length `len`; `fd` is a live socket.
    check(unsafe { libc::bind(fd.as_raw_fd(), (&raw const storage).cast(), len) })?;
    if kind == libc::SOCK_STREAM {
        set_backlog(fd.as_fd(), backlog)?;
    }
    Ok(fd)
}

/// Sets the `SOL_SOCKET` option `option` to 1.
fn set_flag(fd: &OwnedFd, option: libc::c_int) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `one` is a live int and the length says so; `fd` is a live socket.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw const one).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Starts a connect on a non-blocking socket. `Ok(true)`: connected at once; `Ok(false)`: in
/// progress (wait for writability, then call [`take_error`]).
pub(crate) fn start_connect(fd: &OwnedFd, addr: &SocketAddr) -> io::Result<bool> {
    let (storage, len) = to_raw(addr);
    // SAFETY: `storage` holds a valid sockaddr of length `len`.
    unsafe { connect_raw(fd, (&raw const storage).cast(), len) }
}

/// Connects a non-blocking Unix-domain socket, as [`start_connect`] does an inet one.
///
/// Linux completes (or refuses) a Unix-domain connect at once, so `Ok(false)` is not expected
/// in practice; but when the listener's backlog is full the connect fails with `EAGAIN`
/// (`ErrorKind::WouldBlock`) and has *not* started: the socket stays unconnected (and polls
/// writable), so the caller must try again later rather than wait for writability.
pub(crate) fn start_connect_unix(fd: &OwnedFd, addr: &UnixSocketAddr) -> io::Result<bool> {
    let (sockaddr, len) = unix_to_raw(addr)?;
    // SAFETY: `sockaddr` holds a valid sockaddr_un of length `len`.
    unsafe { connect_raw(fd, (&raw const sockaddr).cast(), len) }
}

/// `connect`, retrying `EINTR`; `Ok(false)` for `EINPROGRESS`.
///
/// # Safety
/// `addr` must point to a valid socket address of `len` bytes for the duration of the call.
unsafe fn connect_raw(
    fd: &OwnedFd,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> io::Result<bool> {
    loop {
        // SAFETY: the caller guarantees `addr` and `len`.
        let rc = unsafe { super::real::connect(fd.as_raw_fd(), addr, len) };
        match check(rc) {
            Ok(_) => return Ok(true),
            Err(error) if error.raw_os_error() == Some(libc::EINPROGRESS) => return Ok(false),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        }
    }
}

/// The pending error of a socket (`SO_ERROR`), which ends a non-blocking connect.
pub(crate) fn take_error(fd: &OwnedFd) -> io::Result<Option<io::Error>> {
    let mut error: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `error` and `len` are live and sized for SO_ERROR's int.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&raw mut error).cast(),
            &mut len,
        )
    })?;
    Ok((error != 0).then(|| io::Error::from_raw_os_error(error)))
}

/// `recv(2)` with `MSG_PEEK`: copies what is queued (a stream's bytes, a datagram's payload,
/// truncated to `buf`) and leaves it queued. Returns `WouldBlock` on a non-blocking socket with
/// nothing queued, like any receive.
pub(crate) fn peek(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable for `buf.len()` bytes for the duration of the call.
    let received = unsafe {
        super::real::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK,
        )
    };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(received as usize)
}

/// `recvfrom(2)` with `MSG_PEEK` on a Unix-domain socket: [`peek`], with the sender's address.
pub(crate) fn peek_from_unix(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, UnixSocketAddr)> {
    // SAFETY: sockaddr_un is plain data for which all zeroes is a valid value.
    let mut raw: libc::sockaddr_un = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `buf` is writable for `buf.len()` bytes; `raw` and `len` are live, and `len`
    // says how large `raw` is.
    let received = unsafe {
        super::real::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK,
            (&raw mut raw).cast(),
            &mut len,
        )
    };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((received as usize, unix_from_raw(&raw, len)?))
}

/// std's address for a `sockaddr_un` of `len` bytes that the kernel filled in: a path, an
/// abstract name (leading NUL), or unnamed (no name bytes at all).
fn unix_from_raw(raw: &libc::sockaddr_un, len: libc::socklen_t) -> io::Result<UnixSocketAddr> {
    let offset = mem::offset_of!(libc::sockaddr_un, sun_path);
    let name_len = (len as usize)
        .saturating_sub(offset)
        .min(raw.sun_path.len());
    // `c_char` is `i8` on x86_64 and `u8` on aarch64: take the byte as it is either way.
    let name: Vec<u8> = raw.sun_path[..name_len]
        .iter()
        .map(|byte| u8::from_ne_bytes(byte.to_ne_bytes()))
        .collect();
    match name.split_first() {
        None => unnamed_unix_addr(),
        Some((0, abstract_name)) => UnixSocketAddr::from_abstract_name(abstract_name),
        Some(_) => {
            // A path runs to its NUL terminator (which Linux counts in `len`, other systems not).
            let end = name
                .iter()
                .position(|&byte| byte == 0)
                .unwrap_or(name.len());
            UnixSocketAddr::from_pathname(std::ffi::OsStr::from_bytes(&name[..end]))
        }
    }
}

/// An unnamed Unix-domain address, which std has no constructor for. An empty pathname is
/// one in std on Linux (its length ends where `sun_path` begins); should that ever change,
/// an unbound socket's own address is one.
fn unnamed_unix_addr() -> io::Result<UnixSocketAddr> {
    match UnixSocketAddr::from_pathname("") {
        Ok(addr) if addr.is_unnamed() => Ok(addr),
        _ => std::os::unix::net::UnixDatagram::unbound()?.local_addr(),
    }
}

/// The backlog a listener gets unless told otherwise: as many pending connections as the
/// kernel allows (`net.core.somaxconn`, 4096 since Linux 5.4; the kernel caps any larger
/// value to it), as std's `UnixListener` already asks for on Linux. std's `TcpListener` asks
/// for 128, which a burst of connects overflows: the kernel then drops their SYNs, and each
/// waits a second or more for a retransmission.
pub(crate) const DEFAULT_BACKLOG: u32 = libc::c_int::MAX as u32;

/// Sets the backlog of a listening socket (`listen(2)` again: on Linux that only changes the
/// queue's length). Values above `c_int::MAX` mean the same as it: the kernel's maximum.
pub(crate) fn set_backlog(fd: BorrowedFd<'_>, backlog: u32) -> io::Result<()> {
    let backlog = libc::c_int::try_from(backlog).unwrap_or(libc::c_int::MAX);
    // SAFETY: listen takes no pointers; `fd` is a live socket for the duration of the call.
    check(unsafe { super::real::listen(fd.as_raw_fd(), backlog) })?;
    Ok(())
}

/// Puts `fd` in non-blocking mode (for fds handed to us by std or the user).
pub(crate) fn set_nonblocking(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl on an fd the caller owns; F_GETFL/F_SETFL take no pointers.
    let flags = check(unsafe { super::real::fcntl(fd, libc::F_GETFL, 0) })?;
    if flags & libc::O_NONBLOCK == 0 {
        // SAFETY: as above.
        check(unsafe {
            super::real::fcntl(
                fd,
                libc::F_SETFL,
                (flags | libc::O_NONBLOCK) as libc::c_ulong,
            )
        })?;
    }
    // The hooks' cache must see it: a green socket's calls that reach them must not park.
    #[cfg(feature = "hooks")]
    super::fd_state::set_nonblocking(fd, true);
    Ok(())
}
