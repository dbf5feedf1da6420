//! Green Unix-domain sockets with `std::os::unix::net`'s names: [`UnixListener`],
//! [`UnixStream`], [`UnixDatagram`].
//!
//! As in [`crate::net`], each type owns a std socket in non-blocking mode, registered once with
//! the runtime's reactor; a call that would block parks only the calling green thread, and the
//! types are `!Send` (`detach` makes a `Send` [`Detached`](crate::net::Detached) of each). Paths need no resolving, so the path parameters are std's `AsRef<Path>`.
//!
//! Connecting is where these differ from std underneath: std's [`UnixStream::connect`] blocks
//! while the listener's backlog is full, and the kernel offers nothing to wait on for "the
//! backlog has room", so the green connect retries on a timer instead (see its docs).

use std::cell::Cell;
use std::cmp;
use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::{self, SocketAddr};
use std::path::Path;
use std::time::Duration;

use crate::io::source::{AcceptState, Source};
use crate::runtime::budget;
use crate::runtime::reactor::Interest;
use crate::sys::socket;

/// The first pause before retrying a connect that found the listener's backlog full; each
/// retry doubles it, up to [`CONNECT_RETRY_MAX`].
const CONNECT_RETRY_FIRST: Duration = Duration::from_millis(1);
const CONNECT_RETRY_MAX: Duration = Duration::from_millis(64);

/// A Unix-domain socket server, listening for connections on a path; `accept` parks the green
/// thread until a client connects.
///
/// As with std's, dropping the listener does not remove the socket file: remove it yourself.
///
/// ```
/// use std::io::{Read, Write};
/// use greenweave::os::unix::net::{UnixListener, UnixStream};
///
/// let name = format!("greenweave-doc-listener-{}.sock", std::process::id());
/// let path = std::env::temp_dir().join(name);
/// let server_path = path.clone();
/// greenweave::run(move || {
///     let listener = UnixListener::bind(&server_path).unwrap();
///     let server = greenweave::spawn(move || {
///         let (mut stream, _) = listener.accept().unwrap(); // parks until the client connects
///         let mut request = String::new();
///         stream.read_to_string(&mut request).unwrap();
///         stream.write_all(request.to_uppercase().as_bytes()).unwrap();
///     });
///     let mut client = UnixStream::connect(&server_path).unwrap();
///     client.write_all(b"hello").unwrap();
///     client.shutdown(std::net::Shutdown::Write).unwrap();
///     let mut reply = String::new();
///     client.read_to_string(&mut reply).unwrap();
///     assert_eq!(reply, "HELLO");
///     server.join().unwrap();
/// });
/// std::fs::remove_file(&path).unwrap();
/// ```
pub struct UnixListener {
    source: Source,
    inner: net::UnixListener,
    accept_state: AcceptState,
}

impl UnixListener {
    /// Creates a socket file at `path` and listens on it, as
    /// `std::os::unix::net::UnixListener::bind`, with a queue of pending connections as long
    /// as the kernel allows (`net.core.somaxconn`: 4096 since Linux 5.4), as std on Linux and
    /// this crate's [`TcpListener::bind`](crate::net::TcpListener::bind) ask for. Choose the
    /// length with [`bind_with_backlog`](Self::bind_with_backlog).
    ///
    /// # Errors
    /// Those of std: `AddrInUse` if `path` exists (a stale socket file included: remove it
    /// first), `InvalidInput` for a path too long for `sun_path` or with a NUL byte.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixListener> {
        UnixListener::bind_with_backlog(path, socket::DEFAULT_BACKLOG)
    }

    /// Creates a socket file at `path` and listens on it as [`bind`](Self::bind) does, with
    /// a queue of at most `backlog` pending connections (the `backlog` of `listen(2)`, capped
    /// by the kernel at `net.core.somaxconn`). Linux holds `backlog + 1`; while the queue is
    /// full, a green [`UnixStream::connect`] waits (std's blocks).
    ///
    /// ```
    /// use greenweave::os::unix::net::{UnixListener, UnixStream};
    ///
    /// let name = format!("greenweave-doc-backlog-{}.sock", std::process::id());
    /// let path = std::env::temp_dir().join(name);
    /// let server_path = path.clone();
    /// greenweave::run(move || {
    ///     let listener = UnixListener::bind_with_backlog(&server_path, 16).unwrap();
    ///     let _client = UnixStream::connect(&server_path).unwrap();
    ///     let (_served, _) = listener.accept().unwrap();
    /// });
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`bind`](Self::bind).
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind_with_backlog<P: AsRef<Path>>(path: P, backlog: u32) -> io::Result<UnixListener> {
        UnixListener::with_backlog(net::UnixListener::bind(path)?, backlog)
    }

    /// Listens on `addr` (a path or, on Linux, an abstract name), as std's `bind_addr`, with
    /// the queue length of [`bind`](Self::bind).
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind_addr(addr: &SocketAddr) -> io::Result<UnixListener> {
        UnixListener::bind_addr_with_backlog(addr, socket::DEFAULT_BACKLOG)
    }

    /// Listens on `addr` (a path or, on Linux, an abstract name) with a queue of at most
    /// `backlog` pending connections, as [`bind_with_backlog`](Self::bind_with_backlog).
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind_addr_with_backlog(addr: &SocketAddr, backlog: u32) -> io::Result<UnixListener> {
        UnixListener::with_backlog(net::UnixListener::bind_addr(addr)?, backlog)
    }

    fn with_backlog(listener: net::UnixListener, backlog: u32) -> io::Result<UnixListener> {
        socket::set_backlog(listener.as_fd(), backlog)?;
        UnixListener::from_std(listener)
    }

    /// Makes a std listener green (switches it to non-blocking mode and registers it). Its
    /// backlog stays as it is. The green listener parks in [`accept`](Self::accept) whatever
    /// the std one's mode was, until [`set_nonblocking`](Self::set_nonblocking) says otherwise.
    pub fn from_std(listener: net::UnixListener) -> io::Result<UnixListener> {
        let source = Source::new("UnixListener::from_std", listener.as_raw_fd())?;
        Ok(UnixListener {
            source,
            inner: listener,
            accept_state: AcceptState::new(),
        })
    }

    /// Deregisters the socket and returns the std one, **still in non-blocking mode**: the mode
    /// belongs to the open socket, which a green clone (`try_clone`) may still be using, and
    /// switching it back would make that clone block its OS thread. Call
    /// `set_nonblocking(false)` on the result once no green clone is left.
    pub fn into_std(self) -> io::Result<net::UnixListener> {
        let UnixListener { source, inner, .. } = self;
        drop(source);
        Ok(inner)
    }

    /// Waits (parking this green thread) for a connection; returns it with the client's
    /// address (usually unnamed: clients rarely bind).
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
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let (stream, addr) =
            self.source
                .do_accept("UnixListener::accept", &self.accept_state, || {
                    self.inner.accept()
                })?;
        Ok((UnixStream::from_std(stream)?, addr))
    }

    /// An endless iterator of accepted connections, as std's `incoming`.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
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
    /// use greenweave::os::unix::net::{UnixListener, UnixStream};
    ///
    /// let name = format!("greenweave-doc-nonblocking-{}.sock", std::process::id());
    /// let path = std::env::temp_dir().join(name);
    /// let server_path = path.clone();
    /// greenweave::run(move || {
    ///     let listener = UnixListener::bind(&server_path).unwrap();
    ///     listener.set_nonblocking(true).unwrap();
    ///     let error = listener.accept().unwrap_err(); // nobody has connected
    ///     assert_eq!(error.kind(), ErrorKind::WouldBlock);
    ///     let _client = UnixStream::connect(&server_path).unwrap();
    ///     listener.accept().unwrap(); // the connection is queued: no wait needed
    /// });
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    ///
    /// # Errors
    /// None today; the `io::Result` is std's signature.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.source.set_nonblocking(nonblocking);
        Ok(())
    }

    /// A second handle to the same listener (a `dup`), registered separately, in this
    /// handle's blocking or non-blocking mode.
    pub fn try_clone(&self) -> io::Result<UnixListener> {
        let clone = UnixListener::from_std(self.inner.try_clone()?)?;
        clone.source.set_nonblocking(self.source.is_nonblocking());
        Ok(clone)
    }
}

/// The iterator of [`UnixListener::incoming`]; never returns `None`.
pub struct Incoming<'a> {
    listener: &'a UnixListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<UnixStream>;

    fn next(&mut self) -> Option<io::Result<UnixStream>> {
        Some(self.listener.accept().map(|(stream, _)| stream))
    }
}

/// A Unix-domain stream connection. Reads and writes park the green thread instead of
/// blocking; `Read` and `Write` are also implemented for `&UnixStream`, so one green thread can
/// read while another writes.
///
/// ```
/// use std::io::{Read, Write};
/// use greenweave::os::unix::net::UnixStream;
///
/// greenweave::run(|| {
///     let (mut left, right) = UnixStream::pair().unwrap();
///     let reader = greenweave::spawn(move || {
///         let mut buf = [0; 5];
///         (&right).read_exact(&mut buf).unwrap(); // parks until the writer has written
///         buf
///     });
///     left.write_all(b"hello").unwrap();
///     assert_eq!(&reader.join().unwrap(), b"hello");
/// });
/// ```
pub struct UnixStream {
    source: Source,
    inner: net::UnixStream,
    read_timeout: Cell<Option<Duration>>,
    write_timeout: Cell<Option<Duration>>,
}

impl UnixStream {
    /// Connects to the socket at `path`, as `std::os::unix::net::UnixStream::connect`.
    ///
    /// Where std blocks because the listener's backlog is full, this parks the green thread
    /// and tries again after 1 ms, then 2, 4, ... up to 64 ms between attempts, until the
    /// server accepts enough connections to make room (or the green thread is cancelled).
    ///
    /// # Errors
    /// Those of std: `NotFound` if nothing is at `path`, `ConnectionRefused` if no one listens
    /// there (a socket file left behind by a listener that has gone), `PermissionDenied`,
    /// `InvalidInput` for a path too long for `sun_path` or with a NUL byte.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn connect<P: AsRef<Path>>(path: P) -> io::Result<UnixStream> {
        UnixStream::connect_addr(&SocketAddr::from_pathname(path)?)
    }

    /// Connects to `addr` (a path or, on Linux, an abstract name), as
    /// [`connect`](Self::connect) does to a path.
    ///
    /// # Errors
    /// As [`connect`](Self::connect); `InvalidInput` for an unnamed address.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn connect_addr(addr: &SocketAddr) -> io::Result<UnixStream> {
        // A connect that completes without parking counts against the budget, as a read does.
        budget::spend("UnixStream::connect");
        let fd = socket::unix_socket(libc::SOCK_STREAM)?;
        let source = Source::new("UnixStream::connect", fd.as_raw_fd())?;
        let mut pause = CONNECT_RETRY_FIRST;
        loop {
            match socket::start_connect_unix(&fd, addr) {
                Ok(true) => break,
                // Linux does not do this for Unix sockets today; if it ever does, this is how
                // a non-blocking connect in progress ends.
                Ok(false) => {
                    source.wait_until("UnixStream::connect", Interest::Writable, None)?;
                    if let Some(error) = socket::take_error(&fd)? {
                        return Err(error);
                    }
                    break;
                }
                // The backlog is full and the connect has not started: nothing will become
                // ready on this socket when there is room, so retry on a timer.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    crate::thread::sleep(pause);
                    pause = cmp::min(pause * 2, CONNECT_RETRY_MAX);
                }
                Err(error) => return Err(error),
            }
        }
        Ok(UnixStream::with_source(source, net::UnixStream::from(fd)))
    }

    /// A pair of connected streams, as std's `pair`.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = net::UnixStream::pair()?;
        Ok((UnixStream::from_std(a)?, UnixStream::from_std(b)?))
    }

    fn with_source(source: Source, inner: net::UnixStream) -> UnixStream {
        UnixStream {
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
    pub fn from_std(stream: net::UnixStream) -> io::Result<UnixStream> {
        let source = Source::new("UnixStream::from_std", stream.as_raw_fd())?;
        Ok(UnixStream::with_source(source, stream))
    }

    /// Deregisters the socket and returns the std one, **still in non-blocking mode**: the mode
    /// belongs to the open socket, which a green clone (`try_clone`) may still be using, and
    /// switching it back would make that clone block its OS thread. Call
    /// `set_nonblocking(false)` on the result once no green clone is left.
    pub fn into_std(self) -> io::Result<net::UnixStream> {
        let UnixStream { source, inner, .. } = self;
        drop(source);
        Ok(inner)
    }

    /// The local address (usually unnamed for a client).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Shuts down the read half, the write half, or both, as std's: after `Write`, the peer
    /// reads end-of-file.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }

    crate::io::green_socket::timeout_methods!();

    /// Takes the pending socket error (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// Receives data without removing it from the queue, waiting for some if there is none
    /// (bounded by the read timeout; non-blocking: `WouldBlock` at once), as std's `peek`
    /// (unstable there: `MSG_PEEK`).
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use greenweave::os::unix::net::UnixStream;
    ///
    /// greenweave::run(|| {
    ///     let (mut left, mut right) = UnixStream::pair().unwrap();
    ///     left.write_all(b"hi").unwrap();
    ///     let mut buf = [0; 8];
    ///     assert_eq!(right.peek(&mut buf).unwrap(), 2);
    ///     assert_eq!(right.read(&mut buf).unwrap(), 2); // the peeked bytes are still there
    /// });
    /// ```
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.do_io(
            "UnixStream::peek",
            Interest::Readable,
            self.read_timeout.get(),
            || socket::peek(self.inner.as_fd(), buf),
        )
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
    /// use greenweave::os::unix::net::UnixStream;
    ///
    /// greenweave::run(|| {
    ///     let (mut left, mut right) = UnixStream::pair().unwrap();
    ///     right.set_nonblocking(true).unwrap();
    ///     let mut buf = [0; 8];
    ///     let error = right.read(&mut buf).unwrap_err(); // nothing written yet
    ///     assert_eq!(error.kind(), ErrorKind::WouldBlock);
    ///     left.write_all(b"hi").unwrap();
    ///     assert_eq!(right.read(&mut buf).unwrap(), 2);
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
    pub fn try_clone(&self) -> io::Result<UnixStream> {
        let clone = UnixStream::from_std(self.inner.try_clone()?)?;
        clone.read_timeout.set(self.read_timeout.get());
        clone.write_timeout.set(self.write_timeout.get());
        clone.source.set_nonblocking(self.source.is_nonblocking());
        Ok(clone)
    }
}

crate::io::green_socket::stream_read_write!(
    UnixStream,
    "UnixStream",
    crate::io::source::ShortRead::ProvesNothing
);

/// A Unix-domain datagram socket. Receiving parks the green thread until a datagram arrives
/// (or the read timeout passes); sending parks it while the receiver's queue is full.
///
/// ```
/// use greenweave::os::unix::net::UnixDatagram;
///
/// let pid = std::process::id();
/// let server_path = std::env::temp_dir().join(format!("greenweave-doc-server-{pid}.sock"));
/// let client_path = std::env::temp_dir().join(format!("greenweave-doc-client-{pid}.sock"));
/// let (server_at, client_at) = (server_path.clone(), client_path.clone());
/// greenweave::run(move || {
///     let server = UnixDatagram::bind(&server_at).unwrap();
///     let echo = greenweave::spawn(move || {
///         let mut buf = [0; 64];
///         let (len, from) = server.recv_from(&mut buf).unwrap(); // parks until a datagram
///         server.send_to_addr(&buf[..len], &from).unwrap();
///     });
///     let client = UnixDatagram::bind(&client_at).unwrap();
///     client.send_to(b"ping", &server_at).unwrap();
///     let mut reply = [0; 64];
///     let len = client.recv(&mut reply).unwrap();
///     assert_eq!(&reply[..len], b"ping");
///     echo.join().unwrap();
/// });
/// std::fs::remove_file(&server_path).unwrap();
/// std::fs::remove_file(&client_path).unwrap();
/// ```
pub struct UnixDatagram {
    source: Source,
    inner: net::UnixDatagram,
    read_timeout: Cell<Option<Duration>>,
    write_timeout: Cell<Option<Duration>>,
}

impl UnixDatagram {
    /// Creates a socket file at `path` and binds a datagram socket to it, as std's `bind`.
    ///
    /// # Errors
    /// Those of std: `AddrInUse` if `path` exists, `InvalidInput` for a path too long for
    /// `sun_path` or with a NUL byte.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind<P: AsRef<Path>>(path: P) -> io::Result<UnixDatagram> {
        UnixDatagram::from_std(net::UnixDatagram::bind(path)?)
    }

    /// Binds to `addr` (a path or, on Linux, an abstract name), as std's `bind_addr`.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn bind_addr(addr: &SocketAddr) -> io::Result<UnixDatagram> {
        UnixDatagram::from_std(net::UnixDatagram::bind_addr(addr)?)
    }

    /// A socket bound to no address: it can send, but nothing can reply to it unless it
    /// [`connect`](Self::connect)s first and the peer connects back, as std's `unbound`.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn unbound() -> io::Result<UnixDatagram> {
        UnixDatagram::from_std(net::UnixDatagram::unbound()?)
    }

    /// A pair of connected, unnamed datagram sockets, as std's `pair`.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn pair() -> io::Result<(UnixDatagram, UnixDatagram)> {
        let (a, b) = net::UnixDatagram::pair()?;
        Ok((UnixDatagram::from_std(a)?, UnixDatagram::from_std(b)?))
    }

    /// Makes a std socket green (switches it to non-blocking mode and registers it). Its std
    /// timeouts and mode are not carried over: the green socket parks (see
    /// [`set_nonblocking`](Self::set_nonblocking)); set timeouts with
    /// [`set_read_timeout`](Self::set_read_timeout).
    pub fn from_std(socket: net::UnixDatagram) -> io::Result<UnixDatagram> {
        let source = Source::new("UnixDatagram::from_std", socket.as_raw_fd())?;
        Ok(UnixDatagram {
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
    pub fn into_std(self) -> io::Result<net::UnixDatagram> {
        let UnixDatagram { source, inner, .. } = self;
        drop(source);
        Ok(inner)
    }

    /// Sets the default destination of [`send`](Self::send) and the only source
    /// [`recv`](Self::recv) accepts, as std's. Never waits.
    ///
    /// # Errors
    /// Those of std: `NotFound` if nothing is at `path`, `ConnectionRefused` if no socket is
    /// bound there.
    pub fn connect<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        self.inner.connect(path)
    }

    /// Connects to `addr` (a path or, on Linux, an abstract name), as
    /// [`connect`](Self::connect).
    pub fn connect_addr(&self, addr: &SocketAddr) -> io::Result<()> {
        self.inner.connect_addr(addr)
    }

    /// Sends `buf` as one datagram to the connected peer; returns the bytes sent.
    ///
    /// # Errors
    /// Those of std (`NotConnected` before [`connect`](Self::connect)); `WouldBlock` past the
    /// write timeout, as std's.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.source.do_io(
            "UnixDatagram::send",
            Interest::Writable,
            self.write_timeout.get(),
            || self.inner.send(buf),
        )
    }

    /// Sends `buf` as one datagram to the socket bound at `path`.
    ///
    /// A receiver whose queue is full makes this park until the socket can send again; the
    /// kernel signals that when datagrams this socket sent earlier are read, so a receiver
    /// kept full only by *other* senders can hold it until the write timeout.
    ///
    /// # Errors
    /// Those of std (`NotFound`, `ConnectionRefused`); `WouldBlock` past the write timeout,
    /// as std's.
    pub fn send_to<P: AsRef<Path>>(&self, buf: &[u8], path: P) -> io::Result<usize> {
        self.send_to_addr(buf, &SocketAddr::from_pathname(path)?)
    }

    /// Sends `buf` as one datagram to `addr` (for instance the sender returned by
    /// [`recv_from`](Self::recv_from)), as [`send_to`](Self::send_to).
    pub fn send_to_addr(&self, buf: &[u8], addr: &SocketAddr) -> io::Result<usize> {
        self.source.do_io(
            "UnixDatagram::send_to",
            Interest::Writable,
            self.write_timeout.get(),
            || self.inner.send_to_addr(buf, addr),
        )
    }

    /// Receives one datagram into `buf`, waiting for one if none is queued; returns its
    /// length. A datagram longer than `buf` is truncated, as in std.
    ///
    /// # Errors
    /// Those of std; `WouldBlock` past the read timeout, as std's.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.do_io(
            "UnixDatagram::recv",
            Interest::Readable,
            self.read_timeout.get(),
            || self.inner.recv(buf),
        )
    }

    /// Receives one datagram into `buf`, waiting for one if none is queued; returns its length
    /// and its sender's address (unnamed if the sender is not bound).
    ///
    /// # Errors
    /// Those of std; `WouldBlock` past the read timeout, as std's.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.source.do_io(
            "UnixDatagram::recv_from",
            Interest::Readable,
            self.read_timeout.get(),
            || self.inner.recv_from(buf),
        )
    }

    /// As [`recv`](Self::recv), but leaves the datagram queued for the next receive, as std's
    /// `peek` (unstable there: `MSG_PEEK`).
    ///
    /// ```
    /// use greenweave::os::unix::net::UnixDatagram;
    ///
    /// greenweave::run(|| {
    ///     let (left, right) = UnixDatagram::pair().unwrap();
    ///     left.send(b"hello").unwrap();
    ///     let mut buf = [0; 8];
    ///     assert_eq!(right.peek(&mut buf).unwrap(), 5);
    ///     assert_eq!(right.recv(&mut buf).unwrap(), 5); // the same datagram
    /// });
    /// ```
    ///
    /// # Errors
    /// Those of [`recv`](Self::recv).
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.do_io(
            "UnixDatagram::peek",
            Interest::Readable,
            self.read_timeout.get(),
            || socket::peek(self.inner.as_fd(), buf),
        )
    }

    /// As [`recv_from`](Self::recv_from), but leaves the datagram queued for the next receive,
    /// as std's `peek_from` (unstable there).
    ///
    /// ```
    /// use greenweave::os::unix::net::UnixDatagram;
    ///
    /// greenweave::run(|| {
    ///     let (left, right) = UnixDatagram::pair().unwrap();
    ///     left.send(b"hello").unwrap();
    ///     let mut buf = [0; 8];
    ///     let (len, from) = right.peek_from(&mut buf).unwrap();
    ///     assert_eq!((len, from.is_unnamed()), (5, true)); // a pair's sockets have no name
    ///     assert_eq!(right.recv(&mut buf).unwrap(), 5);
    /// });
    /// ```
    ///
    /// # Errors
    /// Those of [`recv_from`](Self::recv_from).
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.source.do_io(
            "UnixDatagram::peek_from",
            Interest::Readable,
            self.read_timeout.get(),
            || socket::peek_from_unix(self.inner.as_fd(), buf),
        )
    }

    /// The address the socket is bound to (unnamed if it is not).
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

    /// Shuts down receiving, sending, or both, as std's.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }

    crate::io::green_socket::timeout_methods!();

    /// Takes the pending socket error (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.inner.take_error()
    }

    /// Moves the socket into or out of non-blocking mode, as std's: non-blocking, a receive
    /// (or peek) with no datagram queued, or a send the receiver has no room for, returns
    /// `ErrorKind::WouldBlock` at once instead of parking this green thread.
    ///
    /// The mode is this handle's: the socket stays non-blocking underneath (the runtime needs
    /// that), so a [`try_clone`](Self::try_clone) starts in this handle's mode and keeps its
    /// own afterwards, where std's clones share one.
    ///
    /// ```
    /// use std::io::ErrorKind;
    /// use greenweave::os::unix::net::UnixDatagram;
    ///
    /// greenweave::run(|| {
    ///     let (left, right) = UnixDatagram::pair().unwrap();
    ///     right.set_nonblocking(true).unwrap();
    ///     let mut buf = [0; 8];
    ///     let error = right.recv(&mut buf).unwrap_err(); // nothing sent yet
    ///     assert_eq!(error.kind(), ErrorKind::WouldBlock);
    ///     left.send(b"hi").unwrap();
    ///     assert_eq!(right.recv(&mut buf).unwrap(), 2);
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
    pub fn try_clone(&self) -> io::Result<UnixDatagram> {
        let clone = UnixDatagram::from_std(self.inner.try_clone()?)?;
        clone.read_timeout.set(self.read_timeout.get());
        clone.write_timeout.set(self.write_timeout.get());
        clone.source.set_nonblocking(self.source.is_nonblocking());
        Ok(clone)
    }
}

crate::io::green_socket::fd_traits!(UnixListener, UnixStream, UnixDatagram);

crate::net::detached::detachable!(
    listener UnixListener,
    net::UnixListener,
    "    use std::os::linux::net::SocketAddrExt;\n    \
     use std::os::unix::net::SocketAddr;\n    \
     use greenweave::os::unix::net::UnixListener;\n    \
     let name = format!(\"greenweave-doc-detach-{}\", std::process::id());\n    \
     let addr = SocketAddr::from_abstract_name(name).unwrap();\n    \
     let socket = UnixListener::bind_addr(&addr).unwrap();"
);

crate::net::detached::detachable!(
    stream UnixStream,
    net::UnixStream,
    "    use greenweave::os::unix::net::UnixStream;\n    \
     let (socket, _peer) = UnixStream::pair().unwrap();"
);

crate::net::detached::detachable!(
    stream UnixDatagram,
    net::UnixDatagram,
    "    use greenweave::os::unix::net::UnixDatagram;\n    \
     let (socket, _peer) = UnixDatagram::pair().unwrap();"
);
