//! Reads of regular files in a green thread (`read`, `readv`, `pread`/`pread64`). epoll cannot watch a file, and
//! a read that misses the page cache waits for the disk, blocking every green thread. So each
//! read is first made with `preadv2(.., -1, RWF_NOWAIT)`: the kernel serves what is cached at
//! once (one system call, as the plain read) and says `EAGAIN` instead of waiting for the disk.
//! Then the rest of the read runs on the offload pool while only this green thread parks.
//!
//! What the program sees is a plain read's: the file position (offset -1 means "the current
//! one, updated"), the bytes, a short count only at end of file or after an error. A cached
//! part followed by an uncached one is read as one call, as the kernel would. Where the kernel
//! or the filesystem does not take `RWF_NOWAIT` (`EOPNOTSUPP`; older kernels, qemu-user), the
//! fd is remembered as such and read as before: by libc, blocking.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicIsize, Ordering};

use libc::{c_int, iovec, ssize_t};

use super::offloaded::{Borrowed, on_helper};
use crate::sys::fd_state::{self, errno, set_errno};
use crate::sys::real;

/// Where a read reads: at the file position (and advances it), or at an offset (`pread`).
#[derive(Clone, Copy)]
pub(super) enum At {
    Position,
    Offset(i64),
}

impl At {
    /// The offset argument of `preadv`/`preadv2` for the part of the read after `done` bytes:
    /// -1 for the file position.
    fn offset_after(self, done: usize) -> i64 {
        match self {
            At::Position => -1,
            At::Offset(offset) => offset.saturating_add(done as i64),
        }
    }
}

/// Reads into `iov` (`count` buffers) from the regular file `fd` for a green thread, as
/// `readv` (or, at an offset, `preadv`) would.
///
/// # Safety
/// That of `readv`: `iov` points to `count` live iovecs, each a writable buffer.
pub(super) unsafe fn read(fd: RawFd, iov: *const iovec, count: c_int, at: At) -> ssize_t {
    let Ok(len) = usize::try_from(count) else {
        // SAFETY: the caller's contract; libc reports the bad count.
        return unsafe { blocking_read(fd, iov, count, at.offset_after(0)) };
    };
    if len == 0 || iov.is_null() || matches!(at, At::Offset(offset) if offset < 0) {
        // SAFETY: as above (libc reports a negative offset).
        return unsafe { blocking_read(fd, iov, count, at.offset_after(0)) };
    }
    // SAFETY: the caller passes `count` live iovecs.
    let buffers = unsafe { std::slice::from_raw_parts(iov, len) };
    let wanted: usize = buffers.iter().map(|buffer| buffer.iov_len).sum();
    let mut done = 0usize;
    // The buffers not yet filled, once a first part has been read (kept alive for the call).
    let mut rest: Vec<iovec>;
    loop {
        let (pointer, count) = if done == 0 {
            (iov, count)
        } else {
            rest = after(buffers, done);
            (rest.as_ptr(), rest.len() as c_int)
        };
        let offset = at.offset_after(done);
        // SAFETY: `pointer` holds `count` iovecs into the caller's buffers (or the part of
        // them not yet filled); offset -1 reads at the file position and advances it.
        let read = unsafe { libc::preadv2(fd, pointer, count, offset, libc::RWF_NOWAIT) };
        match read {
            0 => return done as ssize_t,
            read if read > 0 => {
                done += read as usize;
                if done >= wanted {
                    return done as ssize_t;
                }
            }
            _ => {
                let failed = errno();
                return match failed {
                    // The rest is not cached: read it from the disk on the pool.
                    // SAFETY: as above: `pointer` and `count` describe the caller's buffers.
                    libc::EAGAIN => {
                        finish(done, unsafe { read_on_pool(fd, pointer, count, offset) })
                    }
                    // No RWF_NOWAIT here: read as libc does, and do not ask again.
                    libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL => {
                        fd_state::note_no_nowait_reads(fd);
                        // SAFETY: as above.
                        finish(done, unsafe { blocking_read(fd, pointer, count, offset) })
                    }
                    _ => finish(done, -1),
                };
            }
        }
    }
}

/// The result of a read that already got `done` bytes, then made a last call that returned
/// `last`: the bytes so far if there were any (a later error is left for the next call, as the
/// kernel does for a short read), else `last` with its errno.
fn finish(done: usize, last: ssize_t) -> ssize_t {
    if last >= 0 {
        (done + last as usize) as ssize_t
    } else if done > 0 {
        done as ssize_t
    } else {
        last
    }
}

/// The iovecs of `buffers` after their first `skip` bytes.
fn after(buffers: &[iovec], mut skip: usize) -> Vec<iovec> {
    let mut rest = Vec::with_capacity(buffers.len());
    for buffer in buffers {
        if skip >= buffer.iov_len {
            skip -= buffer.iov_len;
            continue;
        }
        rest.push(iovec {
            // SAFETY: `skip < iov_len`, so the offset stays inside the buffer.
            iov_base: unsafe { buffer.iov_base.cast::<u8>().add(skip) }.cast(),
            iov_len: buffer.iov_len - skip,
        });
        skip = 0;
    }
    rest
}

/// The read as libc makes it, blocking: `readv` at the file position (`offset` -1), `preadv`
/// at an offset (neither is hooked).
///
/// # Safety
/// As `read`.
unsafe fn blocking_read(fd: RawFd, iov: *const iovec, count: c_int, offset: i64) -> ssize_t {
    if offset == -1 {
        // SAFETY: the caller's contract.
        unsafe { real::readv(fd, iov, count) }
    } else {
        // SAFETY: the caller's contract.
        unsafe { libc::preadv(fd, iov, count, offset) }
    }
}

/// The read on the offload pool while the green thread parks; its result and errno.
///
/// # Safety
/// As `read`: `iov` and `count` describe live, writable buffers, which stay so while the green
/// thread waits (it does, whatever happens: see `offloaded.rs`).
unsafe fn read_on_pool(fd: RawFd, iov: *const iovec, count: c_int, offset: i64) -> ssize_t {
    let arguments = Borrowed(iov);
    let result = AtomicIsize::new(-1);
    let error = AtomicI32::new(0);
    let read = on_helper(
        "read of a regular file (hooked)",
        || {
            let iov = arguments.into_inner();
            // SAFETY: the caller's buffers, live while it waits.
            let read = unsafe { blocking_read(fd, iov, count, offset) };
            error.store(errno(), Ordering::Relaxed);
            result.store(read, Ordering::Release);
        },
        || result.load(Ordering::Acquire),
    );
    if read < 0 {
        set_errno(error.load(Ordering::Relaxed));
    }
    read
}
