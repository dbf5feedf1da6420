//! The `Send` form of a green socket: [`Detached<T>`], which carries a socket from one OS
//! thread's runtime to another's (from the worker that accepted a connection to the worker
//! that will serve it).
//!
//! Owns: taking a green socket apart into its fd and what the green socket knows beyond the fd
//! (its read and write timeouts, the program's blocking choice from `set_nonblocking`), and
//! putting it back together, registered with the runtime of the OS thread that attaches it.
//! Each socket type implements the sealed [`Detach`] through [`detachable!`], next to its
//! fields.
//!
//! May not: keep anything of the old runtime. Detaching drops the socket's `Source`, whose
//! registration takes the fd out of the old epoll (`EPOLL_CTL_DEL`) while that runtime still
//! runs on this OS thread, so no event for it can reach the old reactor afterwards; what
//! crosses the threads is only an `OwnedFd` and plain settings.
//!
//! Kernel state needs no carrying: the fd stays `O_NONBLOCK` (so the hooks' `fd_state` stays
//! true), and socket options, a listener's backlog and any bytes already queued stay with the
//! open socket. A new registration starts with optimistic readiness, so data that arrived
//! before (or while) the socket moved is read by the first call after `attach`, without
//! waiting for an edge that already came.

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::runtime::scheduler;

/// A green socket taken out of its runtime, to be moved to another OS thread (it is `Send`
/// and `Sync`) and made green again there with [`attach`](Detached::attach).
///
/// Made by the `detach` method of each green socket type ([`TcpStream`](super::TcpStream),
/// [`TcpListener`](super::TcpListener), [`UdpSocket`](super::UdpSocket) and the Unix types of
/// [`os::unix::net`](crate::os::unix::net)). It keeps the socket's read and write timeouts
/// and its blocking or non-blocking mode; bytes already queued on the socket stay queued and
/// are read after `attach`. Dropping it closes the socket.
///
/// A clone made with `try_clone` is a separate fd (a `dup`) with its own registration: it
/// stays with its runtime and keeps working while the detached one moves (both refer to the
/// same connection, as std's clones do).
///
/// ```
/// use std::io::{Read, Write};
/// use std::time::Duration;
/// use greenweave::net::{TcpListener, TcpStream};
///
/// greenweave::run(|| {
///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
///     let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
///     let (served, _) = listener.accept().unwrap();
///     served.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
///     client.write_all(b"ping").unwrap();
///
///     // Serve the connection on another OS thread, in that thread's own runtime.
///     let detached = served.detach();
///     let server = std::thread::spawn(move || {
///         greenweave::run(move || {
///             let mut served = detached.attach().unwrap();
///             assert_eq!(served.read_timeout().unwrap(), Some(Duration::from_secs(5)));
///             let mut request = [0; 4];
///             served.read_exact(&mut request).unwrap();
///             served.write_all(b"pong").unwrap();
///         })
///     });
///     let mut reply = [0; 4];
///     client.read_exact(&mut reply).unwrap(); // parks this green thread, not the OS thread
///     assert_eq!(&reply, b"pong");
///     server.join().unwrap();
/// });
/// ```
pub struct Detached<T: Detach> {
    fd: OwnedFd,
    settings: sealed::Settings,
    /// `fn() -> T`: says which type `attach` makes, without holding a `T` (which is `!Send`).
    kind: PhantomData<fn() -> T>,
}

/// A green socket type that can be [`Detached`]: every green socket of [`net`](super) and
/// [`os::unix::net`](crate::os::unix::net). Sealed.
pub trait Detach: sealed::Sealed {}

pub(crate) mod sealed {
    use std::io;
    use std::os::fd::OwnedFd;
    use std::time::Duration;

    /// What a green socket knows beyond its fd, carried across by a `Detached`.
    #[derive(Clone, Copy, Debug)]
    pub struct Settings {
        pub(crate) read_timeout: Option<Duration>,
        pub(crate) write_timeout: Option<Duration>,
        pub(crate) nonblocking: bool,
    }

    pub trait Sealed: Sized {
        /// The type's name, for messages.
        const NAME: &'static str;

        /// Deregisters the socket (dropping its `Source`) and returns its fd and settings.
        fn into_parts(self) -> (OwnedFd, Settings);

        /// Registers `fd` with the running runtime and applies `settings`.
        ///
        /// # Panics
        /// Outside a runtime (`Detached::attach` checks first).
        fn from_parts(fd: OwnedFd, settings: Settings) -> io::Result<Self>;
    }
}

impl<T: Detach> Detached<T> {
    pub(crate) fn new(socket: T) -> Detached<T> {
        let (fd, settings) = socket.into_parts();
        Detached {
            fd,
            settings,
            kind: PhantomData,
        }
    }

    /// Makes the socket green again, registered with the runtime running on this OS thread,
    /// with the timeouts and mode it had when it was detached.
    ///
    /// # Errors
    /// Outside a runtime (no green thread can use the socket there): an error saying so,
    /// and the socket is closed. If the runtime's epoll refuses the fd (its limits): that
    /// error, and the socket is closed.
    pub fn attach(self) -> io::Result<T> {
        if !scheduler::in_runtime() {
            return Err(io::Error::other(format!(
                "Detached<{name}>::attach needs a greenweave runtime on this OS thread: call it \
                 inside greenweave::run (or a green thread the runtime runs); fd {fd} is closed",
                name = T::NAME,
                fd = self.fd.as_raw_fd(),
            )));
        }
        T::from_parts(self.fd, self.settings)
    }
}

impl<T: Detach> AsFd for Detached<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl<T: Detach> AsRawFd for Detached<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The socket's fd, owned: the settings are dropped, as `into_std` would leave them.
impl<T: Detach> From<Detached<T>> for OwnedFd {
    fn from(detached: Detached<T>) -> OwnedFd {
        detached.fd
    }
}

impl<T: Detach> fmt::Debug for Detached<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Detached")
            .field("type", &T::NAME)
            .field("fd", &self.fd.as_raw_fd())
            .field("read_timeout", &self.settings.read_timeout)
            .field("write_timeout", &self.settings.write_timeout)
            .field("nonblocking", &self.settings.nonblocking)
            .finish()
    }
}

/// The timeouts a detached listener carries: none (it has none).
pub(crate) const NO_TIMEOUT: Option<Duration> = None;

/// `Detach` for a green socket type, and its inherent `detach` method (use at module level,
/// where the type's fields are visible). The type must have the fields `source: Source` and
/// `inner` (a std socket, `From<OwnedFd>` and `Into<OwnedFd>`), and a `from_std`. `stream`
/// types also have `read_timeout` / `write_timeout: Cell<Option<Duration>>`; `listener` types
/// have no timeouts. `$example` is the body of a doc example that makes `socket`.
macro_rules! detachable {
    (stream $type:ident, $std:ty, $example:literal) => {
        crate::net::detached::detachable!(@impl $type, $std, $example,
            |socket| (socket.read_timeout.get(), socket.write_timeout.get()),
            |socket, settings| {
                socket.read_timeout.set(settings.read_timeout);
                socket.write_timeout.set(settings.write_timeout);
            });
    };
    (listener $type:ident, $std:ty, $example:literal) => {
        crate::net::detached::detachable!(@impl $type, $std, $example,
            |_socket| (crate::net::detached::NO_TIMEOUT, crate::net::detached::NO_TIMEOUT),
            |socket, settings| {});
    };
    (@impl $type:ident, $std:ty, $example:literal,
        |$get:ident| $timeouts:expr,
        |$set:ident, $settings:ident| $apply:block) => {
        impl $type {
            #[doc = concat!(
                "Takes the socket out of this runtime (its fd leaves the runtime's epoll) into \
                 a [`Detached`](crate::net::Detached), which is `Send`: move it to another OS \
                 thread and [`attach`](crate::net::Detached::attach) it to that thread's \
                 runtime. The timeouts and the blocking or non-blocking mode go with it; a \
                 `try_clone`d handle is a separate fd and stays here, working.\n\n\
                 ```\n\
                 greenweave::run(|| {\n",
                $example,
                "\n    let detached = socket.detach(); // Send\n    \
                 let other = std::thread::spawn(move || {\n        \
                 greenweave::run(move || {\n            \
                 let _socket = detached.attach().unwrap(); // green, in this thread's runtime\n        \
                 })\n    \
                 });\n    \
                 other.join().unwrap();\n\
                 });\n\
                 ```"
            )]
            pub fn detach(self) -> crate::net::Detached<$type> {
                crate::net::Detached::new(self)
            }
        }

        impl crate::net::detached::sealed::Sealed for $type {
            const NAME: &'static str = stringify!($type);

            fn into_parts(
                self,
            ) -> (std::os::fd::OwnedFd, crate::net::detached::sealed::Settings) {
                let $get = &self;
                let (read_timeout, write_timeout) = $timeouts;
                let settings = crate::net::detached::sealed::Settings {
                    read_timeout,
                    write_timeout,
                    nonblocking: self.source.is_nonblocking(),
                };
                let $type { source, inner, .. } = self;
                // The registration goes first: it takes the fd out of this runtime's epoll
                // (the fd must still be open for that).
                drop(source);
                (std::os::fd::OwnedFd::from(inner), settings)
            }

            fn from_parts(
                fd: std::os::fd::OwnedFd,
                $settings: crate::net::detached::sealed::Settings,
            ) -> std::io::Result<$type> {
                let $set = $type::from_std(<$std>::from(fd))?;
                $set.source.set_nonblocking($settings.nonblocking);
                $apply
                Ok($set)
            }
        }

        impl crate::net::Detach for $type {}
    };
}

pub(crate) use detachable;
