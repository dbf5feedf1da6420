//! Green networking with `std::net`'s names: [`TcpListener`], [`TcpStream`], [`UdpSocket`].
//!
//! Each type owns a std socket in non-blocking mode, registered once with the runtime's
//! reactor. A call that would block parks the calling green thread until epoll reports the
//! socket ready (or its timeout passes); other green threads run meanwhile. The types are
//! `!Send`: a socket belongs to the runtime (OS thread) that registered it.
//!
//! Hostnames are resolved on another OS thread (the system resolver blocks), which is why the
//! address parameters are `ToSocketAddrs + Sync` where std's are only `ToSocketAddrs`.

mod tcp;
mod udp;

pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::runtime::offload;

/// Resolves `addr` on another OS thread, parking this green thread meanwhile.
pub(crate) fn resolve<A: ToSocketAddrs + Sync>(
    what: &'static str,
    addr: &A,
) -> io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> =
        offload::on_os_thread(what, || addr.to_socket_addrs().map(Iterator::collect))?;
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: the address resolved to no socket addresses"),
        ));
    }
    Ok(addrs)
}

/// std's rule for timeouts: `Some(0)` is an error, not "no timeout".
pub(crate) fn check_timeout(timeout: Option<Duration>) -> io::Result<()> {
    if timeout == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a zero timeout is not allowed; pass None to wait without a timeout",
        ));
    }
    Ok(())
}
