//! What the program has told the kernel about each fd, as far as the hooks need it: whether it
//! is a socket, one epoll cannot watch (a regular file), non-blocking (`O_NONBLOCK`, the
//! program's choice, which a hooked call honours by returning `EAGAIN` instead of parking),
//! and whether it has a receive or send timeout (`SO_RCVTIMEO`, `SO_SNDTIMEO`).
//!
//! Process-wide (fds are), one byte per fd in chunks allocated on first use, read and written
//! with relaxed atomics: the byte is a cache of kernel state, and each update is made by the
//! thread whose libc call changed that state, right after the call.
//!
//! Kept true by the hooks that change or reset it: `socket` and `accept4` fill it in, `fcntl(F_SETFL)`
//! and `ioctl(FIONBIO)` record `O_NONBLOCK`, `setsockopt` the timeouts, and `close` and
//! `dup2`/`dup3` (on the fd they replace) forget it. An fd nothing has told us about is looked
//! up once (`fstat`, `fcntl(F_GETFL)`, `getsockopt`), on the slow path of a call that would
//! block. `O_NONBLOCK` and socket options belong to the open file description, which `dup`
//! shares: an fd that has been duplicated is marked shared, and for it the flag and the
//! timeouts are asked of the kernel each time they are needed.
//!
//! Next to the byte, each fd number has a generation ([`generation`]), counted up whenever an
//! fd of that number is closed or replaced through the hooks, on any OS thread. A runtime's
//! reactor keeps the registrations the hooks make by fd number; the generation tells it that
//! the number now names another file, even when the old one was closed on a thread that does
//! not run that runtime (where `close` cannot reach its reactor).
//!
//! What the cache cannot see: an fd closed, or its flags changed, by a raw system call or by
//! a shared library that does not reach the hooks (see the `hooks` module's limits).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, Ordering};
use std::time::Duration;

use super::real;

/// The byte is filled in: the other bits are valid.
const KNOWN: u8 = 1;
const NONBLOCK: u8 = 1 << 1;
const RECV_TIMEOUT: u8 = 1 << 2;
const SEND_TIMEOUT: u8 = 1 << 3;
const SOCKET: u8 = 1 << 4;
/// epoll cannot watch it (regular file, directory, block device): calls on it never park.
const NOT_POLLABLE: u8 = 1 << 5;
/// The open file description is shared with another fd: `NONBLOCK` and the timeouts may change
/// through that fd, so they are never taken from here.
const SHARED: u8 = 1 << 6;
/// A regular file whose reads do not take `RWF_NOWAIT` (the hooks read it as libc does).
const NO_NOWAIT_READS: u8 = 1 << 7;

const CHUNK: usize = 4096;
const CHUNKS: usize = 1024;

/// `CHUNKS` pointers to chunks of `CHUNK` bytes: fds up to 4 Mi. Larger fds are never cached.
static TABLE: [AtomicPtr<[AtomicU8; CHUNK]>; CHUNKS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

/// The generations, laid out as `TABLE`.
static GENERATIONS: [AtomicPtr<[AtomicU32; CHUNK]>; CHUNKS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

/// The byte of `fd`, if it has one (allocating its chunk when `create`).
fn slot(fd: RawFd, create: bool) -> Option<&'static AtomicU8> {
    slot_in(&TABLE, fd, create, || {
        Box::new([const { AtomicU8::new(0) }; CHUNK])
    })
}

/// The entry of `fd` in `table`, if it has one (allocating its chunk with `fresh` when
/// `create`).
fn slot_in<T>(
    table: &'static [AtomicPtr<[T; CHUNK]>; CHUNKS],
    fd: RawFd,
    create: bool,
    fresh: fn() -> Box<[T; CHUNK]>,
) -> Option<&'static T> {
    let fd = usize::try_from(fd).ok()?;
    let (chunk, index) = (fd / CHUNK, fd % CHUNK);
    let table = table.get(chunk)?;
    let mut pointer = table.load(Ordering::Acquire);
    if pointer.is_null() {
        if !create {
            return None;
        }
        let fresh = Box::into_raw(fresh());
        pointer = match table.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh,
            Err(installed) => {
                // SAFETY: `fresh` came from Box::into_raw above and was never shared.
                drop(unsafe { Box::from_raw(fresh) });
                installed
            }
        };
    }
    // SAFETY: installed chunks are never freed.
    Some(unsafe { &(*pointer)[index] })
}

fn load(fd: RawFd) -> u8 {
    slot(fd, false).map_or(0, |byte| byte.load(Ordering::Relaxed))
}

fn store(fd: RawFd, value: u8) {
    if let Some(byte) = slot(fd, value != 0) {
        byte.store(value, Ordering::Relaxed);
    }
}

/// A new socket (`socket`, `accept4`), non-blocking or not.
pub(crate) fn new_socket(fd: RawFd, nonblocking: bool) {
    store(fd, KNOWN | SOCKET | if nonblocking { NONBLOCK } else { 0 });
}

/// The program set or cleared `O_NONBLOCK` on `fd` (`fcntl(F_SETFL)`, `ioctl(FIONBIO)`).
pub(crate) fn set_nonblocking(fd: RawFd, nonblocking: bool) {
    let old = load(fd);
    if old & KNOWN != 0 {
        store(
            fd,
            (old & !NONBLOCK) | if nonblocking { NONBLOCK } else { 0 },
        );
    }
}

/// The program set or cleared a receive (`SO_RCVTIMEO`) or send (`SO_SNDTIMEO`) timeout.
pub(crate) fn set_timeout(fd: RawFd, send: bool, set: bool) {
    let old = load(fd);
    if old & KNOWN != 0 {
        let bit = if send { SEND_TIMEOUT } else { RECV_TIMEOUT };
        store(fd, (old & !bit) | if set { bit } else { 0 });
    }
}

/// Reads of `fd` (a regular file) do not take `RWF_NOWAIT`: the hooks stop asking.
pub(crate) fn note_no_nowait_reads(fd: RawFd) {
    let old = load(fd);
    if old & KNOWN != 0 {
        store(fd, old | NO_NOWAIT_READS);
    }
}

/// `fd` is closed, or is about to be replaced (`dup2`, `dup3`): nothing is known of the next fd
/// with that number, which is of a new generation.
pub(crate) fn forget(fd: RawFd) {
    store(fd, 0);
    let generation = slot_in(&GENERATIONS, fd, true, || {
        Box::new([const { AtomicU32::new(0) }; CHUNK])
    });
    if let Some(generation) = generation {
        // Release, paired with `generation`'s Acquire: made before libc's close, whose return
        // the kernel orders before the number can be handed out again.
        generation.fetch_add(1, Ordering::Release);
    }
}

/// How many times an fd numbered `fd` has been closed or replaced through the hooks (wrapping):
/// a registration made under one generation is stale under another. Fds above the table's
/// range always read 0.
pub(crate) fn generation(fd: RawFd) -> u32 {
    slot_in(&GENERATIONS, fd, false, || unreachable!("not created"))
        .map_or(0, |generation| generation.load(Ordering::Acquire))
}

/// `old` was duplicated into `new`: both share one open file description.
pub(crate) fn duplicated(old: RawFd, new: RawFd) {
    let kind = load(old) & (KNOWN | SOCKET | NOT_POLLABLE);
    store(old, load(old) | SHARED);
    // `new` has the kind of `old` (when known), and its flags must be asked for.
    store(
        new,
        if kind & KNOWN != 0 {
            kind | SHARED
        } else {
            SHARED
        },
    );
}

/// What a hooked call needs to know of an fd.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FdState {
    bits: u8,
}

impl FdState {
    pub(crate) fn is_socket(self) -> bool {
        self.bits & SOCKET != 0
    }

    /// Whether epoll can watch it: calls on a regular file never park.
    pub(crate) fn is_pollable(self) -> bool {
        self.bits & NOT_POLLABLE == 0
    }

    /// Whether reads of this (regular) file may be tried with `RWF_NOWAIT` first.
    pub(crate) fn reads_nowait(self) -> bool {
        self.bits & NO_NOWAIT_READS == 0
    }

    /// Whether the program made it non-blocking (then a would-block call returns `EAGAIN`).
    pub(crate) fn is_nonblocking(self) -> bool {
        self.bits & NONBLOCK != 0
    }

    fn has_timeout(self, send: bool) -> bool {
        self.bits & if send { SEND_TIMEOUT } else { RECV_TIMEOUT } != 0
    }
}

/// The state of `fd`, from the cache or (first use, or a shared description) from the kernel.
/// Keeps `errno` as it was.
pub(crate) fn state(fd: RawFd) -> FdState {
    let bits = load(fd);
    if bits & KNOWN != 0 && bits & SHARED == 0 {
        return FdState { bits };
    }
    let saved_errno = errno();
    let bits = look_up(fd, bits);
    set_errno(saved_errno);
    FdState { bits }
}

/// The receive (`send == false`) or send timeout of socket `fd`, if it has one.
pub(crate) fn timeout(fd: RawFd, state: FdState, send: bool) -> Option<Duration> {
    if !state.has_timeout(send) {
        return None;
    }
    let saved_errno = errno();
    let timeout = socket_timeout(fd, send);
    set_errno(saved_errno);
    timeout
}

/// Asks the kernel what the cache does not know, and caches it unless the description is
/// shared (then the kind is kept, and the rest asked again next time).
#[cold]
fn look_up(fd: RawFd, cached: u8) -> u8 {
    let mut bits = KNOWN | (cached & SHARED);
    if cached & KNOWN != 0 {
        bits |= cached & (SOCKET | NOT_POLLABLE);
    } else {
        // SAFETY: fstat writes a `stat` into live, writable memory; all zeroes is a valid one.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd, &mut stat) } == 0 {
            match stat.st_mode & libc::S_IFMT {
                libc::S_IFSOCK => bits |= SOCKET,
                libc::S_IFREG | libc::S_IFDIR | libc::S_IFBLK => bits |= NOT_POLLABLE,
                _ => {}
            }
        } else {
            // Not an open fd: the call itself will say so (EBADF); nothing to cache.
            return NOT_POLLABLE | KNOWN;
        }
    }
    // O_NONBLOCK means nothing to a regular file (the kernel ignores it), so a file's first
    // read costs one look-up (fstat), not two.
    if bits & NOT_POLLABLE == 0 {
        // SAFETY: F_GETFL takes no argument.
        let flags = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
        if flags != -1 && flags & libc::O_NONBLOCK != 0 {
            bits |= NONBLOCK;
        }
    }
    if bits & SOCKET != 0 {
        if socket_timeout(fd, false).is_some() {
            bits |= RECV_TIMEOUT;
        }
        if socket_timeout(fd, true).is_some() {
            bits |= SEND_TIMEOUT;
        }
    }
    store(fd, bits);
    bits
}

/// `SO_RCVTIMEO` or `SO_SNDTIMEO` of `fd`; `None` for none (zero) or an error.
fn socket_timeout(fd: RawFd, send: bool) -> Option<Duration> {
    let option = if send {
        libc::SO_SNDTIMEO
    } else {
        libc::SO_RCVTIMEO
    };
    let mut value = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live, writable and sized for a timeval.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    if rc != 0 || (value.tv_sec == 0 && value.tv_usec == 0) {
        return None;
    }
    Some(Duration::new(
        u64::try_from(value.tv_sec).unwrap_or(0),
        u32::try_from(value.tv_usec).unwrap_or(0) * 1000,
    ))
}

/// This OS thread's `errno`.
pub(crate) fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() }
}

/// Sets this OS thread's `errno`.
pub(crate) fn set_errno(value: libc::c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value }
}
