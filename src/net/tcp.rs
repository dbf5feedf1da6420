//! Green TCP: [`TcpListener`] and [`TcpStream`], with `std::net`'s method names.

use std::cell::Cell;
use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{self, Shutdown, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use crate::io::source::{AcceptState, Source};
use crate::runtime::budget;
use crate::runtime::reactor::Interest;
use crate::sys::socket;

use super::{check_timeout, resolve_for_new_socket};

/// A TCP socket server, listening for connections; `accept` parks the green thread until a
/// client connects.
///
/// ```
/// use std::io::{BufRead, BufReader, Write};
/// use greenweave::net::{TcpListener, TcpStream};
///
/// greenweave::run(|| {
///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
///     let addr = listener.local_addr().unwrap();
///     let server = greenweave::spawn(move || {
///         let (stream, _) = listener.accept().unwrap();
///         let mut line = String::new();
///         BufReader::new(&stream).read_line(&mut line).unwrap();
///         (&stream).write_all(line.to_uppercase().as_bytes()).unwrap();
///     });
///     let mut client = TcpStream::connect(addr).unwrap();
///     client.write_all(b"hello\n").unwrap();
///     let mut reply = String::new();
///     BufReader::new(&client).read_line(&mut reply).unwrap();
///     assert_eq!(reply, "HELLO\n");
///     server.join().unwrap();
/// });
/// ```
pub struct TcpListener {
    source: Source,
    inner: net::TcpListener,
    accept_state: AcceptState,
}

impl TcpListener {
    /// Binds to `addr` (resolving a hostname on another OS thread), as
    /// `std::net::TcpListener::bind`, but with a longer queue of pending connections: as long
    /// as the kernel allows (`net.core.somaxconn`: 4096 since Linux 5.4) where std asks for
    /// 128. A burst of clients connecting at once is then held until accepted, instead of
    /// having SYNs dropped and waiting a second or more for each retransmission. Choose the
    /// length with [`bind_with_backlog`](Self::bind_with_backlog).
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<TcpListener> {
        TcpListener::bind_named("TcpListener::bind", addr, socket::DEFAULT_BACKLOG)
    }

    /// Binds to `addr` as [`bind`](Self::bind) does, with a queue of at most `backlog`
    /// connections that have completed their handshake but are not accepted yet: the
    /// `backlog` of `listen(2)`, which std does not let you choose (tokio's
    /// `TcpSocket::listen(backlog)` is the same knob). The kernel caps it at
    /// `net.core.somaxconn`. When the queue is full, Linux drops new SYNs and the clients
    /// retransmit them later.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use greenweave::net::{TcpListener, TcpStream};
    ///
    /// greenweave::run(|| {
    ///     let listener = TcpListener::bind_with_backlog("127.0.0.1:0", 16).unwrap();
    ///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    ///     client.write_all(b"hi").unwrap();
    ///     let (mut served, _) = listener.accept().unwrap();
    ///     let mut greeting = [0; 2];
    ///     served.read_exact(&mut greeting).unwrap();
    ///     assert_eq!(&greeting, b"hi");
    /// });
    /// ```
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind_with_backlog<A: ToSocketAddrs + Sync>(
        addr: A,
        backlog: u32,
    ) -> io::Result<TcpListener> {
        TcpListener::bind_named("TcpListener::bind_with_backlog", addr, backlog)
    }

    /// Binds to `addr` as [`bind`](Self::bind) does, with `SO_REUSEPORT` set: other listeners
    /// bound this way (by the same user) may bind the same address, and the kernel spreads
    /// incoming connections among them by a hash of each connection's addresses and ports.
    /// This is how each worker of a multi-worker program gets its own listener on one port,
    /// accepting on its own OS thread with no hand-off; a listener bound without the option
    /// (or by another user) still makes the bind fail with `AddrInUse`. std has no way to set
    /// the option before `bind`; tokio's is `TcpSocket::set_reuseport`.
    ///
    /// The hash spreads connections evenly only on average: a few long connections can land
    /// on one worker. Every listener must keep accepting, since a connection hashed to one
    /// waits for it alone.
    ///
    /// ```
    /// use greenweave::net::TcpListener;
    ///
    /// greenweave::run(|| {
    ///     let first = TcpListener::bind_reuse_port("127.0.0.1:0").unwrap();
    ///     let addr = first.local_addr().unwrap();
    ///     let second = TcpListener::bind_reuse_port(addr).unwrap(); // usually on another worker
    ///     assert_eq!(second.local_addr().unwrap(), addr);
    ///     assert!(TcpListener::bind(addr).is_err()); // AddrInUse: it did not ask to share
    /// });
    /// ```
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind_reuse_port<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<TcpListener> {
        let addrs = resolve_for_new_socket("TcpListener::bind_reuse_port", &addr)?;
        let mut last_error = None;
        for addr in addrs {
            let bound = socket::bind_reuse_port(&addr, libc::SOCK_STREAM, socket::DEFAULT_BACKLOG);
            match bound {
                Ok(fd) => return TcpListener::from_std(net::TcpListener::from(fd)),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.expect("resolve returns at least one address"))
    }

    fn bind_named<A: ToSocketAddrs + Sync>(
        what: &'static str,
        addr: A,
        backlog: u32,
    ) -> io::Result<TcpListener> {
        let addrs = resolve_for_new_socket(what, &addr)?;
        let inner = net::TcpListener::bind(&addrs[..])?;
        socket::set_backlog(inner.as_fd(), backlog)?;
        TcpListener::from_std(inner)
    }

    /// Makes a std listener green (switches it to non-blocking mode and registers it). Its
    /// backlog stays as it is (128 if std's `bind` made it). The green listener parks in
    /// [`accept`](Self::accept) whatever the std one's mode was, until
    /// [`set_nonblocking`](Self::set_nonblocking) says otherwise.
    pub fn from_std(listener: net::TcpListener) -> io::Result<TcpListener> {
        let source = Source::new("TcpListener::from_std", listener.as_raw_fd())?;
        Ok(TcpListener {
            source,
            inner: listener,
            accept_state: AcceptState::new(),
        })
    }

    /// Deregisters the socket and returns the std one, **still in non-blocking mode**: the mode
    /// belongs to the open socket, which a green clone (`try_clone`) may still be using, and
    /// switching it back would make that clone block its OS thread. Call
    /// `set_nonblocking(false)` on the result once no green clone is left.
    pub fn into_std(self) -> io::Result<net::TcpListener> {
        let TcpListener { source, inner, .. } = self;
        drop(source);
        Ok(inner)
    }

    /// Waits (parking this green thread) for a connection.
    ///
    /// # Errors
    /// Those of std. When the process or system is out of fds or memory (`EMFILE`, `ENFILE`,
    /// `ENOBUFS`, `ENOMEM`), the connection stays queued and this parks for a pause (1 ms,
    /// doubling with each such failure in a row, up to 64 ms) before returning the error, so
    /// that a loop which reports errors and calls again lets the other green threads run
    /// (and close fds) instead of spinning; the next call takes the connection once it can.
    ///
    /// # Fairness
    /// A loop of accepts takes every connection already queued in one turn: only the first
    /// accept of a turn spends the cooperative budget, and the loop lets the other green
    /// threads run after 4096 accepts in a row (the kernel's longest default backlog) or when
    /// the queue is empty (it parks). A burst of clients is so taken at once rather than 128
    /// per round of the other green threads.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (stream, peer) =
            self.source
                .do_accept("TcpListener::accept", &self.accept_state, || {
                    self.inner.accept()
                })?;
        Ok((TcpStream::from_std(stream)?, peer))
    }

    /// An endless iterator of accepted connections, as `std::net::TcpListener::incoming`.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The local address, as `std`'s.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Sets `IP_TTL`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.set_ttl(ttl)
    }

    /// Reads `IP_TTL`.
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.ttl()
    }

    /// Takes the pending socket error (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// Moves the listener into or out of non-blocking mode, as std's: non-blocking,
    /// [`accept`](Self::accept) returns `ErrorKind::WouldBlock` at once when no connection is
    /// queued, instead of parking this green thread. Accepted streams start in blocking
    /// (parking) mode, as on Linux.
    ///
    /// The mode is this handle's: the socket stays non-blocking underneath (the runtime needs
    /// that), so a [`try_clone`](Self::try_clone) starts in this handle's mode and keeps its
    /// own afterwards, where std's clones share one.
    ///
    /// ```
    /// use std::io::ErrorKind;
    /// use greenweave::net::{TcpListener, TcpStream};
    ///
    /// greenweave::run(|| {
    ///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    ///     listener.set_nonblocking(true).unwrap();
    ///     let error = listener.accept().unwrap_err(); // nobody has connected
    ///     assert_eq!(error.kind(), ErrorKind::WouldBlock);
    ///     let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    ///     listener.accept().unwrap(); // the connection is queued: no wait needed
    /// });
    /// ```
    ///
    /// # Errors
    /// None today; the `io::Result` is std's signature.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.source.set_nonblocking(nonblocking);
        Ok(())
    }

    /// A second handle to the same socket (a `dup`), registered separately, in this handle's
    /// blocking or non-blocking mode.
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        let clone = TcpListener::from_std(self.inner.try_clone()?)?;
        clone.source.set_nonblocking(self.source.is_nonblocking());
        Ok(clone)
    }
}

/// The iterator of [`TcpListener::incoming`]; never returns `None`.
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;

    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.listener.accept().map(|(stream, _)| stream))
    }
}

/// A TCP connection. Reads and writes park the green thread instead of blocking; `Read` and
/// `Write` are also implemented for `&TcpStream`, so one green thread can read while another
/// writes, and any code written against `std::io` (a `BufReader`, a parser) runs unchanged.
pub struct TcpStream {
    source: Source,
    inner: net::TcpStream,
    read_timeout: Cell<Option<Duration>>,
    write_timeout: Cell<Option<Duration>>,
}

impl TcpStream {
    /// Connects to `addr`, trying each resolved address in turn, as
    /// `std::net::TcpStream::connect`. A hostname is resolved on another OS thread, so other
    /// green threads keep running meanwhile.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn connect<A: ToSocketAddrs + Sync>(addr: A) -> io::Result<TcpStream> {
        let addrs = resolve_for_new_socket("TcpStream::connect", &addr)?;
        let mut last_error = None;
        for addr in addrs {
            match TcpStream::connect_to(&addr, None) {
                Ok(stream) => return Ok(stream),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "could not resolve to any addresses",
            )
        }))
    }

    /// Connects to `addr`, giving up after `timeout`, as `std::net::TcpStream::connect_timeout`.
    ///
    /// # Errors
    /// `InvalidInput` for a zero timeout; `TimedOut` when it passes.
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        check_timeout(Some(timeout))?;
        TcpStream::connect_to(addr, Instant::now().checked_add(timeout))
    }

    fn connect_to(addr: &SocketAddr, deadline: Option<Instant>) -> io::Result<TcpStream> {
        // A connect that completes without parking counts against the budget, as a read does.
        budget::spend("TcpStream::connect");
        let fd = socket::stream_socket_for(addr)?;
        let source = Source::new("TcpStream::connect", fd.as_raw_fd())?;
        if !socket::start_connect(&fd, addr)? {
            source.wait_until("TcpStream::connect", Interest::Writable, deadline)?;
            if let Some(error) = socket::take_error(&fd)? {
                return Err(error);
            }
        }
        Ok(TcpStream::with_source(source, net::TcpStream::from(fd)))
    }

    fn with_source(source: Source, inner: net::TcpStream) -> TcpStream {
        TcpStream {
            source,
            inner,
            read_timeout: Cell::new(None),
            write_timeout: Cell::new(None),
        }
    }

    /// Makes a std stream green (switches it to non-blocking mode and registers it). Its std
    /// timeouts and mode are not carried over: the green stream parks (see
    /// [`set_nonblocking`](Self::set_nonblocking)); set timeouts with
    /// [`set_read_timeout`](Self::set_read_timeout).
    pub fn from_std(stream: net::TcpStream) -> io::Result<TcpStream> {
        let source = Source::new("TcpStream::from_std", stream.as_raw_fd())?;
        Ok(TcpStream::with_source(source, stream))
    }

    /// Deregisters the socket and returns the std one, **still in non-blocking mode**: the mode
    /// belongs to the open socket, which a green clone (`try_clone`) may still be using, and
    /// switching it back would make that clone block its OS thread. Call
    /// `set_nonblocking(false)` on the result once no green clone is left.
    pub fn into_std(self) -> io::Result<net::TcpStream> {
        let TcpStream { source, inner, .. } = self;
        drop(source);
        Ok(inner)
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Shuts down the read half, the write half, or both, as std's.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }

    /// Sets `TCP_NODELAY`.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.inner.set_nodelay(nodelay)
    }

    /// Reads `TCP_NODELAY`.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.inner.nodelay()
    }

    /// Sets `IP_TTL`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.inner.set_ttl(ttl)
    }

    /// Reads `IP_TTL`.
    pub fn ttl(&self) -> io::Result<u32> {
        self.inner.ttl()
    }

    crate::io::green_socket::timeout_methods!();

    /// Receives data without removing it from the queue, waiting for some if there is none
    /// (bounded by the read timeout; non-blocking: `WouldBlock` at once).
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use greenweave::net::{TcpListener, TcpStream};
    ///
    /// greenweave::run(|| {
    ///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    ///     let (mut served, _) = listener.accept().unwrap();
    ///     client.write_all(b"hi").unwrap();
    ///     let mut buf = [0; 8];
    ///     assert_eq!(served.peek(&mut buf).unwrap(), 2);
    ///     assert_eq!(served.read(&mut buf).unwrap(), 2); // the peeked bytes are still there
    /// });
    /// ```
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.do_io(
            "TcpStream::peek",
            Interest::Readable,
            self.read_timeout.get(),
            || self.inner.peek(buf),
        )
    }

    /// Takes the pending socket error (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// Moves the stream into or out of non-blocking mode, as std's: non-blocking, a read,
    /// write or [`peek`](Self::peek) that would wait returns `ErrorKind::WouldBlock` at once
    /// instead of parking this green thread.
    ///
    /// The mode is this handle's: the socket stays non-blocking underneath (the runtime needs
    /// that), so a [`try_clone`](Self::try_clone) starts in this handle's mode and keeps its
    /// own afterwards, where std's clones share one.
    ///
    /// ```
    /// use std::io::{ErrorKind, Read, Write};
    /// use greenweave::net::{TcpListener, TcpStream};
    ///
    /// greenweave::run(|| {
    ///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    ///     let (mut served, _) = listener.accept().unwrap();
    ///     served.set_nonblocking(true).unwrap();
    ///     let mut buf = [0; 8];
    ///     let error = served.read(&mut buf).unwrap_err(); // nothing sent yet
    ///     assert_eq!(error.kind(), ErrorKind::WouldBlock);
    ///     client.write_all(b"hi").unwrap();
    ///     served.set_nonblocking(false).unwrap();
    ///     assert_eq!(served.read(&mut buf).unwrap(), 2);
    /// });
    /// ```
    ///
    /// # Errors
    /// None today; the `io::Result` is std's signature.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.source.set_nonblocking(nonblocking);
        Ok(())
    }

    /// A second handle to the same connection (a `dup`), registered separately, with the same
    /// timeouts and blocking or non-blocking mode.
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        let clone = TcpStream::from_std(self.inner.try_clone()?)?;
        clone.read_timeout.set(self.read_timeout.get());
        clone.write_timeout.set(self.write_timeout.get());
        clone.source.set_nonblocking(self.source.is_nonblocking());
        Ok(clone)
    }
}

crate::io::green_socket::stream_read_write!(
    TcpStream,
    "TcpStream",
    crate::io::source::ShortRead::Drains
);

crate::io::green_socket::fd_traits!(TcpListener, TcpStream);

crate::net::detached::detachable!(
    listener TcpListener,
    net::TcpListener,
    "    use greenweave::net::TcpListener;\n    \
     let socket = TcpListener::bind(\"127.0.0.1:0\").unwrap();"
);

crate::net::detached::detachable!(
    stream TcpStream,
    net::TcpStream,
    "    use greenweave::net::{TcpListener, TcpStream};\n    \
     let listener = TcpListener::bind(\"127.0.0.1:0\").unwrap();\n    \
     let socket = TcpStream::connect(listener.local_addr().unwrap()).unwrap();"
);
