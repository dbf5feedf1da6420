//! Non-blocking socket creation and `connect`, which std only offers in blocking form.

use std::io;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};

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

/// A new non-blocking, close-on-exec stream socket of `addr`'s family.
pub(crate) fn stream_socket_for(addr: &SocketAddr) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: no memory preconditions; a non-negative result is a new fd that we own.
    let fd = check(unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Starts a connect on a non-blocking socket. `Ok(true)`: connected at once; `Ok(false)`: in
/// progress (wait for writability, then call [`take_error`]).
pub(crate) fn start_connect(fd: &OwnedFd, addr: &SocketAddr) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let (storage, len) = to_raw(addr);
    loop {
        // SAFETY: `storage` holds a valid sockaddr of length `len`.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&raw const storage).cast::<libc::sockaddr>(),
                len,
            )
        };
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
    use std::os::fd::AsRawFd;
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

/// Puts `fd` in non-blocking mode (for fds handed to us by std or the user).
pub(crate) fn set_nonblocking(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl on an fd the caller owns; F_GETFL/F_SETFL take no pointers.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    if flags & libc::O_NONBLOCK == 0 {
        // SAFETY: as above.
        check(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    }
    Ok(())
}
