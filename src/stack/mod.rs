//! Guard-paged, lazily committed stacks for coroutines.
//!
//! Owns: [`Stack`] (one anonymous mapping: a `PROT_NONE` guard page below the usable range),
//! its registration with the overflow reporter and with Valgrind, and the per-thread pool of
//! default-size stacks (`pool`).
//!
//! May not: run code on a stack or know what runs there; that is the coroutine layer's job.

pub(crate) mod pool;
mod valgrind;

use core::fmt;
use core::ptr::NonNull;
use std::io;

use memmap2::{MmapMut, MmapOptions};

use crate::overflow;

/// An mmap'd stack for a coroutine, with a guard page below it.
///
/// The usable range is reserved, not committed: the kernel supplies a page only when the
/// coroutine first touches it, so a large stack that is mostly unused costs address space,
/// not memory. Running off the bottom hits the guard page, and greenweave's fault handler
/// reports the overflow and aborts the process (see the crate docs).
///
/// Each stack is two memory mappings (the guard page and the usable range), so a process
/// with the kernel's default `vm.max_map_count` (65530) can hold about 32,000 stacks at once.
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
    /// The whole region: `[guard page][usable range]`, lowest address first.
    mapping: MmapMut,
    /// Bytes of guard at the bottom of `mapping`.
    guard_bytes: usize,
    /// Valgrind's handle for the usable range (0 when not running under Valgrind).
    valgrind_id: usize,
}

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
        let total = usable + page;
        let mapping = MmapOptions::new()
            .len(total)
            .stack()
            .no_reserve_swap()
            .map_anon()
            .map_err(|e| mapping_error("reserve", size, e))?;
        // SAFETY: the first page lies inside `mapping`, which this function owns exclusively;
        // making it inaccessible cannot invalidate any reference because none exists yet.
        let rc =
            unsafe { libc::mprotect(mapping.as_ptr() as *mut libc::c_void, page, libc::PROT_NONE) };
        if rc != 0 {
            return Err(mapping_error(
                "protect the guard page of",
                size,
                io::Error::last_os_error(),
            ));
        }
        let base = mapping.as_ptr() as usize;
        let valgrind_id = valgrind::register_stack(base + page, base + total);
        overflow::register_guard(base, page, usable);
        Ok(Stack {
            mapping,
            guard_bytes: page,
            valgrind_id,
        })
    }

    /// Usable bytes: the requested size rounded up to whole pages, guard page not included.
    pub fn size(&self) -> usize {
        self.mapping.len() - self.guard_bytes
    }

    /// One past the highest usable byte; 16-byte aligned (page aligned, in fact).
    pub(crate) fn top(&self) -> NonNull<u8> {
        let top = self.mapping.as_ptr() as usize + self.mapping.len();
        NonNull::new(top as *mut u8).expect("a mapping never ends at address 0")
    }

    /// The lowest usable byte, just above the guard page.
    pub(crate) fn limit(&self) -> usize {
        self.mapping.as_ptr() as usize + self.guard_bytes
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        overflow::unregister_guard(self.mapping.as_ptr() as usize);
        valgrind::deregister_stack(self.valgrind_id);
        // `mapping` unmaps the guard page and the usable range together.
    }
}

impl fmt::Debug for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stack")
            .field("limit", &format_args!("{:#x}", self.limit()))
            .field("top", &self.top())
            .field("size", &self.size())
            .finish()
    }
}

/// The system page size, which is also the guard size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; _SC_PAGESIZE is always supported on Linux.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).expect("the page size is positive")
}

/// Explains a failed `mmap`/`mprotect`, naming the limit that usually causes it.
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
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!(
            "could not {action} a {size}-byte coroutine stack: out of memory or out of memory \
             mappings. Each guarded stack costs two mappings and vm.max_map_count (now {limit}) \
             caps a process near half that many live stacks: raise it (sysctl -w \
             vm.max_map_count=2200000), keep fewer coroutines alive, or use smaller stacks"
        ),
    )
}
