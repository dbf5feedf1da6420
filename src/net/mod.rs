//! Green networking with `std::net`'s names: [`TcpListener`], [`TcpStream`], [`UdpSocket`].
//!
//! Each type owns a std socket in non-blocking mode, registered once with the runtime's
//! reactor. A call that would block parks the calling green thread until epoll reports the
//! socket ready (or its timeout passes); other green threads run meanwhile. The types are
//! `!Send`: a socket belongs to the runtime (OS thread) that registered it; its `detach`
//! method turns it into a [`Detached`], which is `Send`, to be attached to another OS thread's
//! runtime.
//!
//! Addresses are taken as std takes them (`ToSocketAddrs`). A `SocketAddr`, an `(IpAddr, u16)`
//! pair, or a string holding an IP literal (`"127.0.0.1:80"`, `("::1", 80)`) is used at once;
//! a hostname is resolved on the runtime's blocking pool (the system resolver blocks) while
//! only the calling green thread parks, which is why the address parameters are
//! `ToSocketAddrs + Sync` where std's are only `ToSocketAddrs`.

pub(crate) mod detached;
mod least_loaded;
mod tcp;
mod udp;

pub use detached::{Detach, Detached};
pub use least_loaded::LeastLoaded;
pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;

use std::any::TypeId;
use std::io;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::runtime::offload;

/// [`resolve`] for a call that makes a new green socket, which needs a runtime: outside one it
/// fails here, naming the caller, before any socket is made.
///
/// # Panics
/// Outside a runtime, naming `what`.
pub(crate) fn resolve_for_new_socket<A: ToSocketAddrs + Sync>(
    what: &'static str,
    addr: &A,
) -> io::Result<Vec<SocketAddr>> {
    crate::runtime::scheduler::with_scheduler(what, |_| ());
    resolve(what, addr)
}

/// Resolves `addr`: directly when its type cannot involve a name lookup (a `SocketAddr`, an
/// `(IpAddr, u16)` pair, a slice of them) or it is a string holding an IP literal, else on the
/// offload pool, parking this green thread meanwhile.
///
/// # Panics
/// Outside a runtime, naming `what`, if `addr` needs a lookup.
pub(crate) fn resolve<A: ToSocketAddrs + Sync>(
    what: &'static str,
    addr: &A,
) -> io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = if let Some(literal) = ip_literal(addr) {
        vec![literal]
    } else if is_lookup_free(std::any::type_name::<A>()) {
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

/// The address `addr` names if it is one of std's string forms (`&str`, `String`, `&String`,
/// or one of those with a port) and holds an IP literal: what std's `to_socket_addrs` returns
/// for it without a lookup (it parses these forms the same way before it asks the resolver).
/// `None` sends it to the resolver, as std would.
fn ip_literal<A: ToSocketAddrs + ?Sized>(addr: &A) -> Option<SocketAddr> {
    let id = type_id_ignoring_lifetimes::<A>();
    if id == TypeId::of::<&str>() {
        // SAFETY: `A` is `&'x str` for some 'x (`TypeId`s differ for any other type, and
        // lifetimes are the only thing they ignore); `&A: 'r` implies 'x outlives the borrow,
        // and the `&str` read here is used only within it.
        let text: &str = unsafe { *(addr as *const A).cast::<&str>() };
        return text.parse().ok();
    }
    if id == TypeId::of::<String>() || id == TypeId::of::<&String>() {
        let text: &str = if id == TypeId::of::<String>() {
            // SAFETY: `A` is `String` (it has no lifetime); borrowed for no longer than `addr`.
            unsafe { &*(addr as *const A).cast::<String>() }
        } else {
            // SAFETY: `A` is `&'x String`; as for `&str` above.
            unsafe { *(addr as *const A).cast::<&String>() }
        };
        return text.parse().ok();
    }
    let (host, port): (&str, u16) = if id == TypeId::of::<(&str, u16)>() {
        // SAFETY: `A` is `(&'x str, u16)`; as for `&str` above.
        unsafe { *(addr as *const A).cast::<(&str, u16)>() }
    } else if id == TypeId::of::<(String, u16)>() {
        // SAFETY: `A` is `(String, u16)`; borrowed for no longer than `addr`.
        let pair = unsafe { &*(addr as *const A).cast::<(String, u16)>() };
        (&pair.0, pair.1)
    } else {
        return None;
    };
    let ip: IpAddr = host.parse().ok()?;
    Some(SocketAddr::new(ip, port))
}

/// `TypeId::of::<T>()` for a `T` that may borrow (`&'a str`): the id of `T` with its lifetimes
/// made `'static`, which is the same id, since a `TypeId` does not depend on lifetimes.
/// `TypeId::of` itself asks for `T: 'static` only because a lifetime-blind comparison could
/// be used to extend a borrow; [`ip_literal`], the one caller, reads through the pointer only
/// for the length of the borrow it was given.
fn type_id_ignoring_lifetimes<T: ?Sized>() -> TypeId {
    trait TypeIdOf {
        fn type_id_of(&self) -> TypeId
        where
            Self: 'static;
    }
    impl<T: ?Sized> TypeIdOf for PhantomData<T> {
        fn type_id_of(&self) -> TypeId
        where
            Self: 'static,
        {
            TypeId::of::<T>()
        }
    }
    let marker = PhantomData::<T>;
    let marker: &dyn TypeIdOf = &marker;
    // SAFETY: only the trait object's lifetime bound is changed. The object is a `PhantomData`
    // (no data, nothing dereferenced), and the one method called only computes the `TypeId`
    // of `T`, which is the same whatever lifetimes `T` has; nothing outlives this call.
    let marker: &(dyn TypeIdOf + 'static) =
        unsafe { std::mem::transmute::<&dyn TypeIdOf, &(dyn TypeIdOf + 'static)>(marker) };
    marker.type_id_of()
}

/// Whether a `ToSocketAddrs` type, named by `type_name`, is made only of std's address types
/// (and port numbers), whose `to_socket_addrs` never consults the resolver. Strings (unless
/// [`ip_literal`] parsed them) and any other type (a user's, which might look names up) answer
/// `false` and go to another thread.
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
    use super::{ip_literal, is_lookup_free};
    use std::any::type_name;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};

    #[test]
    fn ip_literal_strings_are_parsed_as_std_parses_them_and_names_are_left_to_the_resolver() {
        let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, 8080));
        let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, 8080));
        let owned = String::from("127.0.0.1:8080");
        assert_eq!(ip_literal(&"127.0.0.1:8080"), Some(v4));
        assert_eq!(ip_literal(&"[::1]:8080"), Some(v6));
        assert_eq!(ip_literal(&owned), Some(v4));
        assert_eq!(ip_literal(&&owned), Some(v4));
        assert_eq!(ip_literal(&("127.0.0.1", 8080)), Some(v4));
        assert_eq!(ip_literal(&("::1", 8080)), Some(v6));
        assert_eq!(ip_literal(&(String::from("::1"), 8080)), Some(v6));
        // Names, and strings std would refuse or look up, are not literals.
        assert_eq!(ip_literal(&"localhost:8080"), None);
        assert_eq!(ip_literal(&("localhost", 8080)), None);
        assert_eq!(ip_literal(&"127.0.0.1"), None);
        assert_eq!(ip_literal(&("[::1]", 8080)), None);
        // Other types take the other paths.
        assert_eq!(ip_literal(&v4), None);
        for (text, port) in [("127.0.0.1", 1), ("::1", 2), ("10.1.2.3", 65535)] {
            let std_says: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&(text, port))
                .unwrap()
                .collect();
            assert_eq!(
                ip_literal(&(text, port)).map(|addr| vec![addr]),
                Some(std_says)
            );
        }
    }

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
