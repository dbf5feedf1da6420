//! What every green socket type has in common, written once: the timeout accessors, the
//! `Read`/`Write` impls (for the type and for a shared reference to it), and the fd traits.
//!
//! Each macro expects the socket type to have the fields `source: Source`, `inner` (the std
//! socket) and, for the first two, `read_timeout` / `write_timeout: Cell<Option<Duration>>`.

/// The four timeout accessors of std's sockets, as inherent methods (use inside `impl`).
/// A green call that waits longer than its timeout fails with `ErrorKind::WouldBlock`, as
/// std's does on Linux.
macro_rules! timeout_methods {
    () => {
        /// Bounds each read or receive: one that waits longer fails with
        /// `ErrorKind::WouldBlock`, as std's does on Linux (the kernel's `EAGAIN`), with a
        /// message naming the read timeout. `None` waits forever.
        ///
        /// # Errors
        /// `InvalidInput` for `Some(Duration::ZERO)`, as std.
        pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
            crate::net::check_timeout(timeout)?;
            self.read_timeout.set(timeout);
            Ok(())
        }

        /// Bounds each write or send, as [`set_read_timeout`](Self::set_read_timeout) bounds
        /// reads.
        ///
        /// # Errors
        /// `InvalidInput` for `Some(Duration::ZERO)`, as std.
        pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
            crate::net::check_timeout(timeout)?;
            self.write_timeout.set(timeout);
            Ok(())
        }

        /// The read timeout.
        pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
            Ok(self.read_timeout.get())
        }

        /// The write timeout.
        pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
            Ok(self.write_timeout.get())
        }
    };
}

/// `Read` and `Write` for a green stream type and for `&` it, each call going through
/// `Source::do_read` or `Source::do_io` with the stream's timeouts. `$name` names the type in
/// error messages; `$short_read` (a `crate::io::source::ShortRead`) says what a short read
/// proves for it.
macro_rules! stream_read_write {
    ($type:ty, $name:literal, $short_read:expr) => {
        impl $type {
            fn read_green(&self, buf: &mut [u8]) -> io::Result<usize> {
                let capacity = buf.len();
                self.source.do_read(
                    concat!($name, "::read"),
                    self.read_timeout.get(),
                    $short_read,
                    capacity,
                    || (&self.inner).read(buf),
                )
            }

            fn read_vectored_green(&self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
                let capacity = bufs.iter().map(|buf| buf.len()).sum();
                self.source.do_read(
                    concat!($name, "::read"),
                    self.read_timeout.get(),
                    $short_read,
                    capacity,
                    || (&self.inner).read_vectored(bufs),
                )
            }

            fn write_green(&self, buf: &[u8]) -> io::Result<usize> {
                self.source.do_io(
                    concat!($name, "::write"),
                    Interest::Writable,
                    self.write_timeout.get(),
                    || (&self.inner).write(buf),
                )
            }

            fn write_vectored_green(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                self.source.do_io(
                    concat!($name, "::write"),
                    Interest::Writable,
                    self.write_timeout.get(),
                    || (&self.inner).write_vectored(bufs),
                )
            }
        }

        impl Read for $type {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.read_green(buf)
            }

            fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
                self.read_vectored_green(bufs)
            }
        }

        impl Read for &$type {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.read_green(buf)
            }

            fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
                self.read_vectored_green(bufs)
            }
        }

        impl Write for $type {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.write_green(buf)
            }

            fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                self.write_vectored_green(bufs)
            }

            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }

        impl Write for &$type {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.write_green(buf)
            }

            fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                self.write_vectored_green(bufs)
            }

            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
    };
}

/// `AsFd`, `AsRawFd` and `Debug` (the std socket's) for green socket types, and their part in
/// a select (`sync::select::Pollable`).
macro_rules! fd_traits {
    ($($type:ty),+) => {
        $(
            impl AsFd for $type {
                fn as_fd(&self) -> BorrowedFd<'_> {
                    self.inner.as_fd()
                }
            }

            impl AsRawFd for $type {
                fn as_raw_fd(&self) -> RawFd {
                    self.inner.as_raw_fd()
                }
            }

            impl fmt::Debug for $type {
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    self.inner.fmt(f)
                }
            }

            impl crate::sync::select::sealed::Sealed for $type {
                fn operand(&self) -> crate::sync::select::sealed::Operand<'_> {
                    crate::sync::select::sealed::Operand::io(&self.source)
                }
            }

            impl crate::sync::select::Pollable for $type {}
        )+
    };
}

pub(crate) use {fd_traits, stream_read_write, timeout_methods};
