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

/// Resolves `addr`: directly when its type cannot involve a name lookup (a `SocketAddr`, an
/// `(IpAddr, u16)` pair, a slice of them), else on the offload pool, parking this green thread
/// meanwhile.
pub(crate) fn resolve<A: ToSocketAddrs + Sync>(
    what: &'static str,
    addr: &A,
) -> io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = if is_lookup_free(std::any::type_name::<A>()) {
        addr.to_socket_addrs()?.collect()
    } else {
        offload::on_pool(what, || addr.to_socket_addrs().map(Iterator::collect))?
    };
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}: the address resolved to no socket addresses"),
        ));
    }
    Ok(addrs)
}

/// Whether a `ToSocketAddrs` type, named by `type_name`, is made only of std's address types
/// (and port numbers), whose `to_socket_addrs` never consults the resolver. Strings and any
/// other type (a user's, which might look names up) answer `false` and go to another thread.
/// `type_name`'s output is not guaranteed stable; an unrecognised spelling only costs the
/// slower, always-correct path.
fn is_lookup_free(type_name: &str) -> bool {
    let mut saw_address = false;
    for part in type_name
        .split(['&', '(', ')', '[', ']', ',', ';', ' '])
        .filter(|part| !part.is_empty())
    {
        let std_address = ["core::net::", "std::net::"]
            .iter()
            .any(|prefix| part.starts_with(prefix))
            && !part.contains("str");
        if std_address {
            saw_address = true;
        } else if part != "u16" && part.parse::<usize>().is_err() {
            return false;
        }
    }
    saw_address
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

#[cfg(test)]
mod tests {
    use super::is_lookup_free;
    use std::any::type_name;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

    #[test]
    fn std_address_types_resolve_without_a_lookup() {
        assert!(is_lookup_free(type_name::<SocketAddr>()));
        assert!(is_lookup_free(type_name::<&SocketAddr>()));
        assert!(is_lookup_free(type_name::<SocketAddrV4>()));
        assert!(is_lookup_free(type_name::<(IpAddr, u16)>()));
        assert!(is_lookup_free(type_name::<(Ipv4Addr, u16)>()));
        assert!(is_lookup_free(type_name::<&[SocketAddr]>()));
        assert!(is_lookup_free(type_name::<[SocketAddr; 2]>()));
    }

    #[test]
    fn strings_and_other_types_go_to_another_thread() {
        assert!(!is_lookup_free(type_name::<&str>()));
        assert!(!is_lookup_free(type_name::<String>()));
        assert!(!is_lookup_free(type_name::<(&str, u16)>()));
        assert!(!is_lookup_free(type_name::<(String, u16)>()));
        assert!(!is_lookup_free(type_name::<Vec<SocketAddr>>()));
        assert!(!is_lookup_free(type_name::<u16>()));
    }
}
