//! Guard-paged, lazily committed stacks for coroutines.
//!
//! Owns: [`Stack`] (one anonymous mapping with an inaccessible guard page below the usable
//! range), the once-per-process choice of how that guard page is made inaccessible
//! ([`GuardKind`]), the stack's registration with the overflow reporter and with Valgrind, and
//! the per-thread pool of default-size stacks (`pool`).
//!
//! May not: run code on a stack or know what runs there; that is the coroutine layer's job.
//!
//! # Guard pages and `vm.max_map_count`
//! Making the guard page `PROT_NONE` with `mprotect` splits the stack's mapping in two, and no
//! two stacks can then merge, so every stack costs two of the process's `vm.max_map_count`
//! mappings (65530 by default: about 32,000 stacks). Linux 6.13 added
//! `madvise(MADV_GUARD_INSTALL)`, which marks the page in the page tables instead: the mapping
//! stays whole, and adjacent stacks (identical anonymous mappings) merge into one, so a million
//! stacks take a handful of mappings. The crate uses it when a probe shows that it really
//! faults (see [`guard_kind`]) and falls back to `mprotect` otherwise.

mod batch;
pub(crate) mod frames;
pub(crate) mod pool;
pub(crate) mod usage;
mod valgrind;

use core::fmt;
use core::ptr::NonNull;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use memmap2::MmapOptions;

use crate::overflow;

/// An mmap'd stack for a coroutine, with a guard page below it.
///
/// The usable range is reserved, not committed: the kernel supplies a page only when the
/// coroutine first touches it, so a large stack that is mostly unused costs address space,
/// not memory. Running off the bottom hits the guard page, and greenweave's fault handler
/// reports the overflow and aborts the process (see the crate docs).
///
/// On Linux 6.13 and later the guard page is a guard region (`MADV_GUARD_INSTALL`): each stack
/// is one memory mapping and neighbouring stacks merge, so the kernel's `vm.max_map_count`
/// rarely limits how many can be live (a million stacks take a few dozen mappings). On older
/// kernels (and under emulators that ignore the
/// request) the guard page is made `PROT_NONE`, each stack is two mappings, and a process with
/// the default `vm.max_map_count` (65530) can hold about 32,000 stacks at once. The `Debug`
/// output names the kind in use (`guard: GuardRegion` or `guard: ProtNone`).
///
/// # Examples
///
/// ```
/// use greenweave::{Coroutine, CoroutineResult, Stack};
///
/// let stack = Stack::new(64 * 1024)?;
/// assert!(stack.size() >= 64 * 1024);
/// let mut co = Coroutine::<u32, (), u32>::with_stack(stack, |_, n| n * 2);
/// assert_eq!(co.resume(21), CoroutineResult::Return(42));
/// let stack = co.into_stack(); // reuse it for the next coroutine
/// # drop(stack);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Stack {
    /// One past the highest usable byte (page aligned). The mapping ends here.
    top: NonNull<u8>,
    /// Usable bytes (a whole number of pages, so the low bit is free), with [`PROT_NONE_BIT`]
    /// set if the guard page is `PROT_NONE` rather than a guard region. The guard page lies just
    /// below the usable range, where the mapping starts.
    ///
    /// Two words in all, so that a `Stack`, held by every green thread and moved into and out
    /// of every coroutine, moves in one 16-byte copy. The mapping's start and length follow
    /// from these and the page size; Valgrind's handle for the stack, needed only under
    /// Valgrind, is kept by the `valgrind` module.
    size_and_guard: usize,
}

/// The bit of [`Stack::size_and_guard`] that records a `PROT_NONE` guard page.
const PROT_NONE_BIT: usize = 1;

// SAFETY: a `Stack` owns its mapping outright (like a `Box<[u8]>`): nothing else refers to it,
// and which thread unmaps it does not matter. (It holds a raw pointer only to stay two words.)
unsafe impl Send for Stack {}
// SAFETY: `&Stack` only reads the top and the size; it gives no access to the memory.
unsafe impl Sync for Stack {}

impl Stack {
    /// The usable size of the stacks that [`Coroutine::new`](crate::Coroutine::new) takes from
    /// the per-thread pool: 256 KiB.
    ///
    /// Only the pages a coroutine touches are ever committed, so this is an upper bound on
    /// depth, not a cost per coroutine.
    pub const DEFAULT_SIZE: usize = 256 * 1024;

    /// Reserves a stack of at least `size` usable bytes (rounded up to whole pages) with a
    /// guard page below it.
    ///
    /// # Errors
    /// - [`io::ErrorKind::InvalidInput`] if `size` is 0 or so large that the mapping size
    ///   overflows.
    /// - [`io::ErrorKind::OutOfMemory`] if the kernel refuses the mapping or the guard page;
    ///   the message names `vm.max_map_count`, the usual cause when many stacks are live.
    pub fn new(size: usize) -> io::Result<Stack> {
        let page = page_size();
        if size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "stack size must be greater than zero (Stack::DEFAULT_SIZE is 256 KiB)",
            ));
        }
        let usable = size
            .checked_next_multiple_of(page)
            .and_then(|usable| usable.checked_add(page).map(|_| usable))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("stack size {size} is too large to map"),
                )
            })?;
        let mut stack = None;
        batch::map_batch(usable, 1, |mapped| stack = Some(mapped))?;
        Ok(stack.expect("a batch of one maps one stack"))
    }

    /// Usable bytes: the requested size rounded up to whole pages, guard page not included.
    #[inline]
    pub fn size(&self) -> usize {
        self.size_and_guard & !PROT_NONE_BIT
    }

    /// One past the highest usable byte; 16-byte aligned (page aligned, in fact).
    #[inline]
    pub(crate) fn top(&self) -> NonNull<u8> {
        self.top
    }

    /// The lowest usable byte, just above the guard page.
    #[inline]
    pub(crate) fn limit(&self) -> usize {
        self.top.as_ptr() as usize - self.size()
    }

    /// How the guard page was made inaccessible.
    fn guard(&self) -> GuardKind {
        if self.size_and_guard & PROT_NONE_BIT == 0 {
            GuardKind::GuardRegion
        } else {
            GuardKind::ProtNone
        }
    }
}

impl Stack {
    /// Ends the stack's registrations (overflow reporter, Valgrind, ASan) and returns its whole
    /// mapping, guard page included, as `[start, end)`: what is left to do is the `munmap`.
    fn unregister(&self) -> (usize, usize) {
        let page = page_size();
        let start = self.limit() - page;
        let end = self.top.as_ptr() as usize;
        overflow::unregister_guard(start);
        valgrind::deregister_stack(self.limit());
        crate::arch::stack_unmapped(self.limit(), end);
        (start, end)
    }

    /// Gives up the stack without unmapping it: its registrations end, and its mapping
    /// `[start, end)` becomes the caller's to unmap (`batch::unmap_batch` unmaps neighbours
    /// together).
    fn into_mapping(self) -> (usize, usize) {
        let range = self.unregister();
        core::mem::forget(self);
        range
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let (start, end) = self.unregister();
        // SAFETY: `[start, end)` is this stack's own mapping; the stack is being dropped, so
        // nothing runs on it or refers to it any more.
        unsafe { unmap(start, end - start) };
    }
}

/// Unmaps `[start, start + len)`, one or more whole stack mappings (guard pages included);
/// returns whether the kernel did.
///
/// Unmapping removes guard pages and usable ranges together (and with them guard regions'
/// markers). Unmapping stacks from the middle of a mapping merged with their neighbours splits
/// that mapping, which the kernel refuses only when the process is already at
/// `vm.max_map_count`; the range then stays mapped (leaked), never reused.
///
/// # Safety
/// The range is the mapping of stacks that have been given up ([`Stack::into_mapping`] or a
/// dropped `Stack`): nothing runs on it or refers to it any more.
unsafe fn unmap(start: usize, len: usize) -> bool {
    #[cfg(test)]
    tests::UNMAP_CALLS.with(|calls| calls.set(calls.get() + 1));
    // SAFETY: the caller's promise: the range is ours alone and nothing uses it.
    unsafe { libc::munmap(start as *mut libc::c_void, len) == 0 }
}

impl fmt::Debug for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stack")
            .field("limit", &format_args!("{:#x}", self.limit()))
            .field("top", &self.top())
            .field("size", &self.size())
            .field("guard", &self.guard())
            .finish()
    }
}

/// The system page size, which is also the guard size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; _SC_PAGESIZE is always supported on Linux.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).expect("the page size is positive")
}

/// How a stack's guard page is made inaccessible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GuardKind {
    /// `madvise(MADV_GUARD_INSTALL)`: a marker in the page tables; the mapping stays whole.
    GuardRegion,
    /// `mprotect(PROT_NONE)`: the guard page becomes a mapping of its own.
    ProtNone,
}

/// `MADV_GUARD_INSTALL` from the kernel's `include/uapi/asm-generic/mman-common.h` (Linux 6.13,
/// the same value on every architecture). The `libc` crate in use (0.2.191) does not define it.
/// Its counterpart `MADV_GUARD_REMOVE` (103) is never needed: unmapping removes the markers.
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// The guard kind this process uses, probed once (on the first stack) and then cached.
///
/// `madvise` returns `EINVAL` for advice the kernel does not know, which would be easy to
/// detect, but qemu-user (which runs the aarch64 tests) returns success for advice it does not
/// implement and does nothing: trusting the return value would silently leave stacks without
/// overflow protection. So the probe also checks that the marked page really faults.
fn guard_kind() -> GuardKind {
    static KIND: OnceLock<GuardKind> = OnceLock::new();
    *KIND.get_or_init(|| {
        if guard_regions_fault() {
            GuardKind::GuardRegion
        } else {
            GuardKind::ProtNone
        }
    })
}

/// Whether `MADV_GUARD_INSTALL` is accepted *and* makes the page inaccessible. Any failure
/// along the way (an old kernel, no memory, no file descriptors left) answers no, which only
/// costs mappings, never protection.
fn guard_regions_fault() -> bool {
    let page = page_size();
    let Ok(probe) = MmapOptions::new().len(2 * page).map_anon() else {
        return false;
    };
    let guard = probe.as_ptr();
    // SAFETY: the first page of `probe` belongs to this function alone and nothing refers to
    // it; the advice only makes it inaccessible (or, under an emulator, does nothing).
    let rc = unsafe { libc::madvise(guard as *mut libc::c_void, page, MADV_GUARD_INSTALL) };
    if rc != 0 {
        return false;
    }
    // Reading the page ourselves would raise SIGSEGV if the guard works. write(2) reads it
    // through the kernel's user-copy routine instead, which reports the same fault as EFAULT.
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return false;
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else; the
    // OwnedFds close them when this function returns.
    let (_read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: `guard` points to one byte inside `probe`, which outlives the call; a fresh pipe
    // has room for it, so the write cannot block. If the guard works the kernel reads nothing
    // and fails with EFAULT.
    let written = unsafe { crate::sys::real::write(write_end.as_raw_fd(), guard.cast(), 1) };
    written == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT)
}

/// Makes `[start, start + len)`, the bottom of a new stack mapping, inaccessible, as a guard
/// region when the probe showed they work and with `mprotect` otherwise (also if installing a
/// guard region fails for this one stack: it then costs a mapping more, but is protected).
fn install_guard(start: *const u8, len: usize) -> io::Result<GuardKind> {
    if guard_kind() == GuardKind::GuardRegion {
        // SAFETY: the range is the first page of a mapping that `Stack::new` has just made
        // and owns exclusively; no reference into it exists, so making it fault is harmless.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, MADV_GUARD_INSTALL) };
        if rc == 0 {
            return Ok(GuardKind::GuardRegion);
        }
    }
    // SAFETY: as above: the range lies inside a mapping this stack owns and nothing refers to
    // it yet.
    let rc = unsafe { libc::mprotect(start as *mut libc::c_void, len, libc::PROT_NONE) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(GuardKind::ProtNone)
}

/// Explains a failed `mmap`/`mprotect`/`madvise`, naming the limit that usually causes it.
fn mapping_error(action: &str, size: usize, error: io::Error) -> io::Error {
    if error.raw_os_error() != Some(libc::ENOMEM) {
        return io::Error::new(
            error.kind(),
            format!("could not {action} a {size}-byte coroutine stack: {error}"),
        );
    }
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .map(|text| text.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    let mappings = match guard_kind() {
        GuardKind::ProtNone => format!(
            "Each stack's PROT_NONE guard page makes it two mappings, so vm.max_map_count (now \
             {limit}) caps a process near half that many live stacks"
        ),
        GuardKind::GuardRegion => format!(
            "Stacks use guard regions and neighbouring ones share a mapping, but mappings that \
             cannot merge still count against vm.max_map_count (now {limit})"
        ),
    };
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!(
            "could not {action} a {size}-byte coroutine stack: out of memory, address space or \
             memory mappings. {mappings}: raise it (sysctl -w vm.max_map_count=2200000), keep \
             fewer coroutines alive, or use smaller stacks"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// `munmap` calls made for stacks by this thread (see the pool's tests).
        pub(super) static UNMAP_CALLS: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
    }

    /// Every green thread holds a `Stack` and every coroutine moves one in and out: it stays
    /// two words, and an empty `Option<Stack>` costs nothing more.
    #[test]
    fn a_stack_handle_is_two_words() {
        assert_eq!(size_of::<Stack>(), 2 * size_of::<usize>());
        assert_eq!(size_of::<Option<Stack>>(), 2 * size_of::<usize>());
    }

    #[test]
    fn a_stack_reports_its_bounds_and_guard_kind() {
        let stack = Stack::new(Stack::DEFAULT_SIZE).unwrap();
        assert_eq!(stack.size(), Stack::DEFAULT_SIZE);
        assert_eq!(stack.top().as_ptr() as usize % page_size(), 0);
        assert_eq!(stack.limit() % page_size(), 0);
        assert_eq!(stack.guard(), guard_kind());
    }
}
