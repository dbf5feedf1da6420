//! Green UDP: [`UdpSocket`], with `std::net`'s method names.

use std::cell::Cell;
use std::fmt;
use std::io;
use std::net::{self, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use crate::io::source::Source;
use crate::runtime::reactor::Interest;

use super::{resolve, resolve_for_new_socket};

/// A UDP socket. Receiving parks the green thread until a datagram arrives (or the read
/// timeout passes); sending parks it only while the socket's send buffer is full.
///
/// Every method takes `&self`, so green threads can share one socket: one can wait in
/// [`recv_from`](Self::recv_from) while another sends.
///
/// ```
/// use greenweave::net::UdpSocket;
///
/// greenweave::run(|| {
///     let server = UdpSocket::bind("127.0.0.1:0").unwrap();
///     let server_addr = server.local_addr().unwrap();
///     let echo = greenweave::spawn(move || {
///         let mut buf = [0; 64];
///         let (len, from) = server.recv_from(&mut buf).unwrap(); // parks until a datagram
///         server.send_to(&buf[..len], from).unwrap();
///     });
///     let client = UdpSocket::bind("127.0.0.1:0").unwrap();
///     client.connect(server_addr).unwrap();
///     client.send(b"ping").unwrap();
///     let mut reply = [0; 64];
///     let len = client.recv(&mut reply).unwrap();
///     assert_eq!(&reply[..len], b"ping");
///     echo.join().unwrap();
/// });
/// ```
pub struct UdpSocket {
    source: Source,
    inner: net::UdpSocket,
    read_timeout: Cell<Option<Duration>>,
    write_timeout: Cell<Option<Duration>>,
}

impl UdpSocket {
    /// Binds to `addr` (resolving a hostname on another OS thread), trying each resolved
    /// address in turn, as `std::net::UdpSocket::bind`.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<UdpSocket> {
        let addrs = resolve_for_new_socket("UdpSocket::bind", &addr)?;
        UdpSocket::from_std(net::UdpSocket::bind(&addrs[..])?)
    }

    /// Binds to `addr` as [`bind`](Self::bind) does, with `SO_REUSEPORT` set: other sockets
    /// bound this way (by the same user) may bind the same address, and the kernel spreads
    /// incoming datagrams among them by a hash of the sender's address and port, so each
    /// worker of a multi-worker program can receive on its own socket. A socket bound without
    /// the option makes the bind fail with `AddrInUse`, as before.
    ///
    /// ```
    /// use greenweave::net::UdpSocket;
    ///
    /// greenweave::run(|| {
    ///     let first = UdpSocket::bind_reuse_port("127.0.0.1:0").unwrap();
    ///     let addr = first.local_addr().unwrap();
    ///     let second = UdpSocket::bind_reuse_port(addr).unwrap();
    ///     assert_eq!(second.local_addr().unwrap(), addr);
    /// });
    /// ```
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind_reuse_port<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<UdpSocket> {
        let addrs = resolve_for_new_socket("UdpSocket::bind_reuse_port", &addr)?;
        let mut last_error = None;
        for addr in addrs {
            match crate::sys::socket::bind_reuse_port(&addr, libc::SOCK_DGRAM, 0) {
                Ok(fd) => return UdpSocket::from_std(net::UdpSocket::from(fd)),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.expect("resolve returns at least one address"))
    }

    /// Makes a std socket green (switches it to non-blocking mode and registers it). Its std
    /// timeouts and mode are not carried over: the green socket parks (see
    /// [`set_nonblocking`](Self::set_nonblocking)); set timeouts with
    /// [`set_read_timeout`](Self::set_read_timeout).
    pub fn from_std(socket: net::UdpSocket) -> io::Result<UdpSocket> {
        let source = Source::new("UdpSocket::from_std", socket.as_raw_fd())?;
        Ok(UdpSocket {
            source,
            inner: socket,
            read_timeout: Cell::new(None),
            write_timeout: Cell::new(None),
        })
    }

    /// Deregisters the socket and returns the std one, **still in non-blocking mode**: the mode
    /// belongs to the open socket, which a green clone (`try_clone`) may still be using, and
    /// switching it back would make that clone block its OS thread. Call
    /// `set_nonblocking(false)` on the result once no green clone is left.
    pub fn into_std(self) -> io::Result<net::UdpSocket> {
        let UdpSocket { source, inner, .. } = self;
        drop(source);
        Ok(inner)
    }

    /// Sets the default destination of [`send`](Self::send) and the only source
    /// [`recv`](Self::recv) accepts, as std's; a hostname is resolved on another OS thread.
    /// Connecting a UDP socket sends nothing, so this never waits for the peer.
    pub fn connect<A: ToSocketAddrs + Sync>(&self, addr: A) -> io::Result<()> {
        let addrs = resolve("UdpSocket::connect", &addr)?;
        self.inner.connect(&addrs[..])
    }

    /// Sends `buf` as one datagram to the connected peer; returns the bytes sent.
    ///
    /// # Errors
    /// Those of std (`NotConnected` before [`connect`](Self::connect); `ConnectionRefused` when
    /// an earlier datagram drew an ICMP port-unreachable); `WouldBlock` past the write
    /// timeout, as std's.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.source.do_io(
            "UdpSocket::send",
            Interest::Writable,
            self.write_timeout.get(),
            || self.inner.send(buf),
        )
    }

    /// Sends `buf` as one datagram to `addr`, as std's: a name that resolves to several
    /// addresses is sent to the first. An address or IP literal is used at once; a hostname is
    /// resolved on the runtime's blocking pool at every call, so a connected socket and
    /// [`send`](Self::send) are cheaper for many datagrams to a named peer.
    ///
    /// # Errors
    /// Those of std; `WouldBlock` past the write timeout, as std's.
    pub fn send_to<A: ToSocketAddrs + Sync>(&self, buf: &[u8], addr: A) -> io::Result<usize> {
        let target = resolve("UdpSocket::send_to", &addr)?[0];
        self.source.do_io(
            "UdpSocket::send_to",
            Interest::Writable,
            self.write_timeout.get(),
            || self.inner.send_to(buf, target),
        )
    }

    /// Receives one datagram from the connected peer into `buf`, waiting for one if none is
    /// queued; returns its length. A datagram longer than `buf` is truncated, as in std.
    ///
    /// # Errors
    /// Those of std; `WouldBlock` past the read timeout, as std's.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.do_io(
            "UdpSocket::recv",
            Interest::Readable,
            self.read_timeout.get(),
            || self.inner.recv(buf),
        )
    }

    /// Receives one datagram into `buf`, waiting for one if none is queued; returns its length
    /// and its sender.
    ///
    /// # Errors
    /// Those of std; `WouldBlock` past the read timeout, as std's.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.source.do_io(
            "UdpSocket::recv_from",
            Interest::Readable,
            self.read_timeout.get(),
            || self.inner.recv_from(buf),
        )
    }

    /// As [`recv`](Self::recv), but leaves the datagram queued for the next receive.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.do_io(
            "UdpSocket::peek",
            Interest::Readable,
            self.read_timeout.get(),
            || self.inner.peek(buf),
        )
    }

    /// As [`recv_from`](Self::recv_from), but leaves the datagram queued for the next receive.
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.source.do_io(
            "UdpSocket::peek_from",
            Interest::Readable,
            self.read_timeout.get(),
            || self.inner.peek_from(buf),
        )
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The connected peer's address.
    ///
    /// # Errors
    /// `NotConnected` before [`connect`](Self::connect), as std.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    crate::io::green_socket::timeout_methods!();

    /// Sets `SO_BROADCAST`: whether datagrams may be sent to a broadcast address.
    pub fn set_broadcast(&self, broadcast: bool) -> io::Result<()> {
        self.inner.set_broadcast(broadcast)
    }

    /// Reads `SO_BROADCAST`.
    pub fn broadcast(&self) -> io::Result<bool> {
        self.inner.broadcast()
    }

    /// Sets `IP_TTL`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.set_ttl(ttl)
    }

    /// Reads `IP_TTL`.
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.ttl()
    }

    /// Joins the IPv4 multicast group `multiaddr` on the interface with address `interface`
    /// (`UNSPECIFIED`: the system's choice), as std's.
    pub fn join_multicast_v4(&self, multiaddr: &Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        self.inner.join_multicast_v4(multiaddr, interface)
    }

    /// Leaves a group joined with [`join_multicast_v4`](Self::join_multicast_v4).
    pub fn leave_multicast_v4(&self, multiaddr: &Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        self.inner.leave_multicast_v4(multiaddr, interface)
    }

    /// Joins the IPv6 multicast group `multiaddr` on interface number `interface` (0: the
    /// system's choice), as std's.
    pub fn join_multicast_v6(&self, multiaddr: &Ipv6Addr, interface: u32) -> io::Result<()> {
        self.inner.join_multicast_v6(multiaddr, interface)
    }

    /// Leaves a group joined with [`join_multicast_v6`](Self::join_multicast_v6).
    pub fn leave_multicast_v6(&self, multiaddr: &Ipv6Addr, interface: u32) -> io::Result<()> {
        self.inner.leave_multicast_v6(multiaddr, interface)
    }

    /// Sets `IP_MULTICAST_LOOP`: whether this host receives its own IPv4 multicast datagrams.
    pub fn set_multicast_loop_v4(&self, multicast_loop_v4: bool) -> io::Result<()> {
        self.inner.set_multicast_loop_v4(multicast_loop_v4)
    }

    /// Reads `IP_MULTICAST_LOOP`.
    pub fn multicast_loop_v4(&self) -> io::Result<bool> {
        self.inner.multicast_loop_v4()
    }

    /// Sets `IP_MULTICAST_TTL`: how many hops IPv4 multicast datagrams may take.
    pub fn set_multicast_ttl_v4(&self, multicast_ttl_v4: u32) -> io::Result<()> {
        self.inner.set_multicast_ttl_v4(multicast_ttl_v4)
    }

    /// Reads `IP_MULTICAST_TTL`.
    pub fn multicast_ttl_v4(&self) -> io::Result<u32> {
        self.inner.multicast_ttl_v4()
    }

    /// Sets `IPV6_MULTICAST_LOOP`: whether this host receives its own IPv6 multicast
    /// datagrams.
    pub fn set_multicast_loop_v6(&self, multicast_loop_v6: bool) -> io::Result<()> {
        self.inner.set_multicast_loop_v6(multicast_loop_v6)
    }

    /// Reads `IPV6_MULTICAST_LOOP`.
    pub fn multicast_loop_v6(&self) -> io::Result<bool> {
        self.inner.multicast_loop_v6()
    }

    /// Takes the pending socket error (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// Moves the socket into or out of non-blocking mode, as std's: non-blocking, a receive
    /// (or peek) with no datagram queued, or a send with the buffer full, returns
    /// `ErrorKind::WouldBlock` at once instead of parking this green thread.
    ///
    /// The mode is this handle's: the socket stays non-blocking underneath (the runtime needs
    /// that), so a [`try_clone`](Self::try_clone) starts in this handle's mode and keeps its
    /// own afterwards, where std's clones share one.
    ///
    /// ```
    /// use std::io::ErrorKind;
    /// use greenweave::net::UdpSocket;
    ///
    /// greenweave::run(|| {
    ///     let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    ///     socket.set_nonblocking(true).unwrap();
    ///     let mut buf = [0; 8];
    ///     let error = socket.recv_from(&mut buf).unwrap_err(); // nothing sent yet
    ///     assert_eq!(error.kind(), ErrorKind::WouldBlock);
    /// });
    /// ```
    ///
    /// # Errors
    /// None today; the `io::Result` is std's signature.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.source.set_nonblocking(nonblocking);
        Ok(())
    }

    /// A second handle to the same socket (a `dup`), registered separately, with the same
    /// timeouts and blocking or non-blocking mode.
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        let clone = UdpSocket::from_std(self.inner.try_clone()?)?;
        clone.read_timeout.set(self.read_timeout.get());
        clone.write_timeout.set(self.write_timeout.get());
        clone.source.set_nonblocking(self.source.is_nonblocking());
        Ok(clone)
    }
}

crate::io::green_socket::fd_traits!(UdpSocket);

crate::net::detached::detachable!(
    stream UdpSocket,
    net::UdpSocket,
    "    use greenweave::net::UdpSocket;\n    \
     let socket = UdpSocket::bind(\"127.0.0.1:0\").unwrap();"
);
