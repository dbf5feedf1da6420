//! Green I/O on any fd: [`Async`] wraps an owned fd (a pipe, an eventfd, a terminal, a socket
//! type greenweave has no wrapper for) so that reads and writes park the green thread instead
//! of blocking the OS thread.

pub(crate) mod green_socket;
pub(crate) mod source;

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use crate::runtime::budget;
use crate::runtime::reactor::Interest;
use source::Source;

/// An fd-backed value made green: the fd is switched to non-blocking mode and registered with
/// the runtime, and [`Read`]/[`Write`] (when `T` has them) park the green thread until the fd
/// is ready.
///
/// ```
/// use std::io::{Read, Write};
/// use std::os::unix::net::UnixStream;
/// use greenweave::io::Async;
///
/// greenweave::run(|| {
///     let (a, b) = UnixStream::pair().unwrap();
///     let (mut a, mut b) = (Async::new(a).unwrap(), Async::new(b).unwrap());
///     let reader = greenweave::spawn(move || {
///         let mut buf = [0; 5];
///         b.read_exact(&mut buf).unwrap(); // parks until the writer has written
///         buf
///     });
///     a.write_all(b"hello").unwrap();
///     assert_eq!(&reader.join().unwrap(), b"hello");
/// });
/// ```
pub struct Async<T: AsFd> {
    source: Source,
    inner: T,
}

impl<T: AsFd> Async<T> {
    /// Registers `inner`'s fd with this thread's runtime, in non-blocking mode.
    ///
    /// # Errors
    /// If the fd cannot be made non-blocking or registered with epoll (regular files cannot:
    /// `EPERM`; use `unblock`-style offloading for them).
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn new(inner: T) -> io::Result<Async<T>> {
        let source = Source::new("greenweave::io::Async::new", inner.as_fd().as_raw_fd())?;
        Ok(Async { source, inner })
    }

    /// Parks until the fd is readable (returns at once if the kernel says it already is).
    pub fn readable(&self) -> io::Result<()> {
        budget::spend("Async::readable");
        self.source
            .wait_until("Async::readable", Interest::Readable, None)
    }

    /// Parks until the fd is writable (returns at once if the kernel says it already is).
    pub fn writable(&self) -> io::Result<()> {
        budget::spend("Async::writable");
        self.source
            .wait_until("Async::writable", Interest::Writable, None)
    }

    /// Runs a non-blocking read-side operation on the inner value, parking whenever it says
    /// `WouldBlock`.
    pub fn read_with<R>(&self, operation: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        let mut operation = operation;
        self.source
            .do_io("Async::read_with", Interest::Readable, None, || {
                operation(&self.inner)
            })
    }

    /// Runs a non-blocking write-side operation on the inner value, parking whenever it says
    /// `WouldBlock`.
    pub fn write_with<R>(&self, operation: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        let mut operation = operation;
        self.source
            .do_io("Async::write_with", Interest::Writable, None, || {
                operation(&self.inner)
            })
    }

    /// Moves this wrapper into or out of non-blocking mode, as std's sockets'
    /// `set_nonblocking`: non-blocking, [`Read`], [`Write`], [`read_with`](Self::read_with) and
    /// [`write_with`](Self::write_with) return the operation's `ErrorKind::WouldBlock` at once
    /// instead of parking this green thread ([`readable`](Self::readable) and
    /// [`writable`](Self::writable) still wait: they are explicit waits).
    ///
    /// Only the wrapper's choice changes: the fd stays non-blocking (the runtime needs that), so
    /// do not call the inner value's own `set_nonblocking(false)`.
    ///
    /// ```
    /// use std::io::{ErrorKind, Read, Write};
    /// use std::os::unix::net::UnixStream;
    /// use greenweave::io::Async;
    ///
    /// greenweave::run(|| {
    ///     let (a, b) = UnixStream::pair().unwrap();
    ///     let (mut a, mut b) = (Async::new(a).unwrap(), Async::new(b).unwrap());
    ///     b.set_nonblocking(true);
    ///     let mut buf = [0; 5];
    ///     assert_eq!(b.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    ///     a.write_all(b"hello").unwrap();
    ///     assert_eq!(b.read(&mut buf).unwrap(), 5);
    /// });
    /// ```
    pub fn set_nonblocking(&self, nonblocking: bool) {
        self.source.set_nonblocking(nonblocking);
    }

    /// The inner value.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The inner value, mutably. Do not replace or close its fd.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Deregisters the fd and returns the inner value (still in non-blocking mode).
    pub fn into_inner(self) -> T {
        let Async { source, inner } = self;
        drop(source);
        inner
    }
}

impl<T: AsFd + Read> Read for Async<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Async { source, inner } = self;
        source.do_io("Async::read", Interest::Readable, None, || inner.read(buf))
    }
}

impl<T: AsFd + Write> Write for Async<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Async { source, inner } = self;
        source.do_io("Async::write", Interest::Writable, None, || {
            inner.write(buf)
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        let Async { source, inner } = self;
        source.do_io("Async::flush", Interest::Writable, None, || inner.flush())
    }
}

impl<T: AsFd> Read for &Async<T>
where
    for<'a> &'a T: Read,
{
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.source
            .do_io("Async::read", Interest::Readable, None, || {
                (&self.inner).read(buf)
            })
    }
}

impl<T: AsFd> Write for &Async<T>
where
    for<'a> &'a T: Write,
{
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.source
            .do_io("Async::write", Interest::Writable, None, || {
                (&self.inner).write(buf)
            })
    }

    fn flush(&mut self) -> io::Result<()> {
        self.source
            .do_io("Async::flush", Interest::Writable, None, || {
                (&self.inner).flush()
            })
    }
}

impl<T: AsFd> AsFd for Async<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl<T: AsFd> AsRawFd for Async<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.source.fd()
    }
}

impl<T: AsFd> crate::sync::select::sealed::Sealed for Async<T> {
    fn operand(&self) -> crate::sync::select::sealed::Operand<'_> {
        crate::sync::select::sealed::Operand::io(&self.source)
    }
}

impl<T: AsFd> crate::sync::select::Pollable for Async<T> {}

impl<T: AsFd + fmt::Debug> fmt::Debug for Async<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Async").field("inner", &self.inner).finish()
    }
}
