//! What a stack's pages cost, and giving back those below a suspended context.
//!
//! Owns: reading which pages of a [`Stack`] are resident (`mincore`, one call per stack), the
//! lowest address a suspended context's saved stack pointer leaves free to release
//! ([`release_limit`]), and releasing such ranges with `MADV_DONTNEED`, many stacks' ranges in
//! one `process_madvise` call where the kernel allows ([`ReleaseBatch`]).
//!
//! May not: decide which stacks may be released. Only a caller that knows nothing runs on a
//! stack, and that the saved stack pointer it passes is the context's own, may release below
//! it (`runtime::stack_release`: parked green threads, on their scheduler's thread).
//!
//! Why `mincore`: a stack's pages are committed on first touch and stay until released, so
//! the lowest resident page is the deepest the stack has gone since its last release (its
//! high-water mark), read with one system call and no work at all while the stack runs.
//! Painting a stack at spawn would commit the pages it paints; `/proc/self/pagemap` costs an
//! open and a read per look. A blind `MADV_DONTNEED` of everything below the stack pointer is
//! about as cheap, but says neither how deep the stack went nor how much it gave back
//! (BENCHMARKS.md, "Stack high-water release and stack use").

use std::io;

use super::{Stack, page_size};

/// Bytes kept below a saved stack pointer on top of the ABI's red zone: nothing lives there
/// (a suspended context's switch routine pushed its last word at the stack pointer), so this
/// is only a margin against a mistake in that reasoning.
const MARGIN_BELOW_SP: usize = 128;

/// The most ranges one `process_madvise` call takes (`UIO_MAXIOV`).
const MAX_RANGES_PER_CALL: usize = 1024;

/// What `mincore` says about one stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Residency {
    /// Bytes from the lowest resident page to the top: the deepest the stack has gone since
    /// its pages were last released (0 if no page is resident).
    pub(crate) deepest: usize,
    /// Bytes resident in the stack.
    pub(crate) resident: usize,
    /// The resident pages below `below` (the argument of [`residency`]): the range from the
    /// lowest of them to `below`, and how many bytes of it are resident.
    pub(crate) releasable: Option<(usize, usize)>,
    pub(crate) releasable_resident: usize,
}

/// Reads which pages of `stack` are resident; `below` (page aligned, inside the stack, or the
/// stack's limit for "none") bounds what counts as releasable. `scratch` is `mincore`'s
/// vector, kept by the caller between calls so a sweep allocates once.
///
/// # Errors
/// Those of `mincore` (none expected for a mapped stack).
pub(crate) fn residency(
    stack: &Stack,
    below: usize,
    scratch: &mut Vec<u8>,
) -> io::Result<Residency> {
    let page = page_size();
    let limit = stack.limit();
    let top = stack.top().as_ptr() as usize;
    debug_assert!(below >= limit && below <= top && below.is_multiple_of(page));
    let pages = stack.size() / page;
    scratch.clear();
    scratch.resize(pages, 0);
    // SAFETY: `[limit, top)` is the usable range of a live stack mapping (page aligned), and
    // `scratch` has one byte per page of it for the kernel to fill. mincore only reads the
    // page tables; it neither touches nor changes the memory.
    let rc = unsafe {
        libc::mincore(
            limit as *mut libc::c_void,
            top - limit,
            scratch.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut residency = Residency::default();
    let Some(lowest) = scratch.iter().position(|flags| flags & 1 != 0) else {
        return Ok(residency);
    };
    residency.deepest = top - (limit + lowest * page);
    residency.resident = scratch[lowest..]
        .iter()
        .filter(|flags| *flags & 1 != 0)
        .count()
        * page;
    let below_index = (below - limit) / page;
    if lowest < below_index {
        residency.releasable = Some((limit + lowest * page, below));
        residency.releasable_resident = scratch[lowest..below_index]
            .iter()
            .filter(|flags| *flags & 1 != 0)
            .count()
            * page;
    }
    Ok(residency)
}

/// The end of what may be released below a context suspended at `sp` on `stack`: `sp` less
/// the red zone and a margin, rounded down to a page; the stack's limit (nothing) if that
/// falls below it or `sp` is not on this stack.
pub(crate) fn release_limit(stack: &Stack, sp: usize) -> usize {
    let limit = stack.limit();
    let top = stack.top().as_ptr() as usize;
    if sp <= limit || sp > top {
        return limit;
    }
    let free_below = sp.saturating_sub(crate::arch::RED_ZONE_BYTES + MARGIN_BELOW_SP);
    (free_below & !(page_size() - 1)).max(limit)
}

/// `MADV_GUARD_REMOVE` from the kernel's `include/uapi/asm-generic/mman-common.h` (Linux
/// 6.13): lifts guard markers installed with `MADV_GUARD_INSTALL`, leaving the pages empty.
pub(crate) const MADV_GUARD_REMOVE: libc::c_int = 103;

/// Sorts `ranges` by address and merges each run of touching ones into one.
fn coalesce(ranges: &mut Vec<libc::iovec>) {
    ranges.sort_unstable_by_key(|range| range.iov_base as usize);
    let mut merged = 0;
    for index in 0..ranges.len() {
        let range = ranges[index];
        if merged > 0 {
            let last = &mut ranges[merged - 1];
            if last.iov_base as usize + last.iov_len == range.iov_base as usize {
                last.iov_len += range.iov_len;
                continue;
            }
        }
        ranges[merged] = range;
        merged += 1;
    }
    ranges.truncate(merged);
}

/// Ranges to release with `MADV_DONTNEED`, gathered over a sweep and released together: one
/// `process_madvise` per 1024 ranges where the kernel lets a process advise itself that way
/// (Linux 6.13, `PIDFD_SELF` from 6.15), else one `madvise` each.
#[derive(Default)]
pub(crate) struct ReleaseBatch {
    ranges: Vec<libc::iovec>,
    /// Guard pages of compacted stacks whose guard-region markers go before the release
    /// (`stack::frames::lift_guard`): markers are page-table entries, and a page-table page
    /// that holds one is never freed.
    guards: Vec<libc::iovec>,
}

impl ReleaseBatch {
    /// Adds `[start, end)` to the batch.
    ///
    /// # Safety
    /// Until [`release`](Self::release) returns, nothing may live in the range or be written
    /// there: it lies in a stack below the stack pointer of a context that stays suspended
    /// (see [`release_limit`]). Its pages then read as zeros.
    pub(crate) unsafe fn push(&mut self, start: usize, end: usize) {
        debug_assert!(start < end && start.is_multiple_of(page_size()));
        self.ranges.push(libc::iovec {
            iov_base: start as *mut libc::c_void,
            iov_len: end - start,
        });
    }

    /// Adds the guard page at `start` (`len` bytes) of a compacted stack, whose guard-region
    /// markers [`release`](Self::release) removes before it releases the ranges.
    ///
    /// # Safety
    /// Nothing runs on the stack until its guard is installed again
    /// (`stack::frames::reinstall_guard`): until then it has no overflow protection.
    pub(crate) unsafe fn push_guard(&mut self, start: usize, len: usize) {
        self.guards.push(libc::iovec {
            iov_base: start as *mut libc::c_void,
            iov_len: len,
        });
    }

    /// Releases every range gathered, and empties the batch (keeping its allocation).
    ///
    /// Neighbouring ranges are released as one: the kernel frees a page-table page (Linux
    /// 6.14 and later) only when one `MADV_DONTNEED` covers the whole 2 MiB it maps, which a
    /// run of compacted neighbours' stacks, guard pages included, does.
    pub(crate) fn release(&mut self) {
        for chunk in self.guards.chunks(MAX_RANGES_PER_CALL) {
            // SAFETY: `push_guard`'s caller promised that nothing runs on these stacks until
            // their guards are back; removing the markers leaves the pages empty.
            if !unsafe { super::batch::advise_self(chunk, MADV_GUARD_REMOVE) } {
                for guard in chunk {
                    // SAFETY: as above.
                    unsafe { libc::madvise(guard.iov_base, guard.iov_len, MADV_GUARD_REMOVE) };
                }
            }
        }
        self.guards.clear();
        coalesce(&mut self.ranges);
        for chunk in self.ranges.chunks(MAX_RANGES_PER_CALL) {
            // SAFETY: `push`'s caller promised that nothing lives in these ranges.
            if !unsafe { super::batch::advise_self(chunk, libc::MADV_DONTNEED) } {
                for range in chunk {
                    // SAFETY: `push`'s caller promised that nothing lives in the range until
                    // now; MADV_DONTNEED drops its pages (they read as zeros if touched again).
                    unsafe { libc::madvise(range.iov_base, range.iov_len, libc::MADV_DONTNEED) };
                }
            }
        }
        self.ranges.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_stack_has_only_its_top_page_resident_at_most() {
        let stack = Stack::new(64 * 1024).unwrap();
        let mut scratch = Vec::new();
        let residency = residency(&stack, stack.limit(), &mut scratch).unwrap();
        assert!(residency.deepest <= page_size());
        assert_eq!(residency.releasable, None);
    }

    #[test]
    fn touched_pages_below_the_limit_are_released_and_read_as_zero() {
        let stack = Stack::new(64 * 1024).unwrap();
        let page = page_size();
        let top = stack.top().as_ptr() as usize;
        let deep = top - 40 * 1024;
        // SAFETY: `deep` lies in the usable range of a stack that nothing runs on.
        unsafe { (deep as *mut u64).write_volatile(0x5eed) };
        let sp = top - 2 * page + 64;
        let below = release_limit(&stack, sp);
        assert_eq!(below, top - 3 * page);
        let mut scratch = Vec::new();
        let before = residency(&stack, below, &mut scratch).unwrap();
        assert_eq!(before.deepest, top - (deep & !(page - 1)));
        let (start, end) = before.releasable.unwrap();
        assert_eq!((start, end), (deep & !(page - 1), below));
        assert_eq!(before.releasable_resident, page);
        let mut batch = ReleaseBatch::default();
        // SAFETY: nothing runs on the stack; the range lies below `sp`.
        unsafe { batch.push(start, end) };
        batch.release();
        assert!(batch.ranges.is_empty());
        let after = residency(&stack, below, &mut scratch).unwrap();
        assert_eq!(after.releasable, None);
        // SAFETY: as above; the released page reads as zeros.
        assert_eq!(unsafe { (deep as *const u64).read_volatile() }, 0);
    }

    #[test]
    fn touching_ranges_are_merged_in_address_order() {
        let range = |start: usize, len: usize| libc::iovec {
            iov_base: start as *mut libc::c_void,
            iov_len: len,
        };
        let mut ranges = vec![
            range(0x3000, 0x1000),
            range(0x1000, 0x1000),
            range(0x2000, 0x1000),
            range(0x8000, 0x2000),
        ];
        coalesce(&mut ranges);
        let got: Vec<(usize, usize)> = ranges
            .iter()
            .map(|range| (range.iov_base as usize, range.iov_len))
            .collect();
        assert_eq!(got, [(0x1000, 0x3000), (0x8000, 0x2000)]);
    }

    #[test]
    fn nothing_is_releasable_for_a_stack_pointer_off_the_stack() {
        let stack = Stack::new(64 * 1024).unwrap();
        assert_eq!(release_limit(&stack, stack.limit()), stack.limit());
        assert_eq!(release_limit(&stack, 8), stack.limit());
        let top = stack.top().as_ptr() as usize;
        assert_eq!(release_limit(&stack, top + 4096), stack.limit());
    }
}
