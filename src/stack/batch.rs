//! Mapping many stacks of one size at once.
//!
//! Owns: [`map_batch`], which reserves several stacks with a single `mmap`, makes the page
//! below each one its guard, commits each stack's top page and registers every stack with the
//! overflow reporter and Valgrind, in as few system calls as the kernel allows; and
//! [`unmap_batch`], which unmaps several freed stacks with one `munmap` per run of neighbours.
//! The per-thread pool (`pool`) uses them when it runs empty and when it is full, so spawning
//! and ending many green threads costs one `mmap` and about one `munmap` per batch instead of
//! one per stack.
//!
//! May not: keep any record of a batch. Each stack it hands out is an ordinary [`Stack`], laid
//! out exactly like one from [`Stack::new`] (a guard page, then the usable range), which can be
//! unmapped on its own (dropped, splitting the batch's mapping where needed) or with whichever
//! stacks are freed beside it. So memory returns stack by stack, and a long-lived green thread
//! never pins the rest of its batch.
//!
//! # What ending a stack costs the kernel
//! A `munmap` of one stack from the middle of a batch's mapping splits that mapping and
//! flushes the TLB: about 4.6 µs on the 2-core EPYC VM among 100,000 live stacks, 50x a yield
//! there (BENCHMARKS.md, "Connections per core (issue 23)"). Green threads spawned together
//! got neighbouring stacks, and they often end together; [`unmap_batch`] sorts what it is
//! given and unmaps each run of neighbours at once, so the split and the flush are paid once
//! per run.
//!
//! # What a stack costs the kernel
//! Without batching each new stack took an `mmap`, a `madvise(MADV_GUARD_INSTALL)` (or an
//! `mprotect`), and a page fault when its first frame was written. Here a batch of `n` takes:
//! - one `mmap`;
//! - one `process_madvise(MADV_GUARD_INSTALL)` over the `n` guard pages, an array of ranges in
//!   one call (Linux 6.13 lets a process give itself any advice this way; `PIDFD_SELF` names
//!   the caller since 6.15), or else one `madvise` (or `mprotect`) per guard. Guard regions do
//!   not split the mapping, so the whole batch is one mapping (and merges with its neighbours);
//!   `PROT_NONE` guards split it, two mappings per stack, as for single stacks;
//! - one `process_madvise(MADV_POPULATE_WRITE)` over the `n` top pages, which commits the page
//!   each stack's first frames use without a fault apiece; where that call is not available
//!   the pages are committed by their first touch, as before.

use core::ptr::{self, NonNull};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{GuardKind, MADV_GUARD_INSTALL, PROT_NONE_BIT, Stack, install_guard, mapping_error};
use super::{guard_kind, page_size, valgrind};
use crate::overflow;

/// The most stacks one batch holds: the pool's size, and well below `UIO_MAXIOV` (1024), the
/// most ranges one `process_madvise` call takes.
pub(crate) const MAX_BATCH: usize = 64;

/// `PIDFD_SELF` from the kernel's `include/uapi/linux/pidfd.h` (Linux 6.15): a pidfd argument
/// that names the calling process without opening a descriptor. Older kernels answer `EBADF`.
const PIDFD_SELF: libc::c_int = -10000;

/// Cleared the first time `process_madvise` on ourselves fails, so that a kernel (or an
/// emulator) without it costs one failed call per process, not one per batch.
static VECTORED_ADVICE: AtomicBool = AtomicBool::new(true);

/// Maps `count` (1 to [`MAX_BATCH`]) stacks of `size` usable bytes (a whole, nonzero number of
/// pages) with one `mmap`, and hands each to `keep`, lowest address first.
///
/// # Errors
/// As [`Stack::new`]. If the guard of a stack cannot be installed, the stacks already handed to
/// `keep` stay valid and the rest of the batch is unmapped.
pub(super) fn map_batch(size: usize, count: usize, mut keep: impl FnMut(Stack)) -> io::Result<()> {
    let page = page_size();
    debug_assert!(size > 0 && size.is_multiple_of(page));
    debug_assert!((1..=MAX_BATCH).contains(&count));
    let each = size + page;
    let total = each
        .checked_mul(count)
        .ok_or_else(|| mapping_error("reserve", size, io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: a new private anonymous mapping at an address of the kernel's choosing; it
    // replaces nothing. Each `each`-byte slice of it is owned by the Stack made for it below
    // (or unmapped on error).
    let base = unsafe {
        libc::mmap(
            ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(mapping_error("reserve", size, io::Error::last_os_error()));
    }
    let base = base as usize;
    let guards = || (0..count).map(|i| base + i * each);

    // The guards: all at once if the kernel takes an array of ranges, else one by one.
    // A single stack (`Stack::new`) takes the one-by-one path: one call either way.
    let all_guarded = count > 1
        && guard_kind() == GuardKind::GuardRegion
        && advise_each(guards(), page, MADV_GUARD_INSTALL);
    let mut kinds = [GuardKind::GuardRegion; MAX_BATCH];
    if !all_guarded {
        for (i, guard) in guards().enumerate() {
            match install_guard(guard as *const u8, page) {
                Ok(kind) => kinds[i] = kind,
                Err(error) => {
                    // SAFETY: stacks `i..` of the batch were handed to nobody; their range
                    // is still ours alone.
                    unsafe { libc::munmap(guard as *mut libc::c_void, total - i * each) };
                    // The stacks before `i` are complete: hand them out, so that they are
                    // unmapped one by one like any stack.
                    register(base, i, size, &kinds, &mut keep);
                    return Err(mapping_error("protect the guard page of", size, error));
                }
            }
        }
    }
    // The top pages: committed now in one call if possible. Failing is harmless (the first
    // frame's write commits the page), so the answer is ignored beyond remembering it.
    // A single stack is left to its first touch, as it always was: committing it here would
    // cost the same one system call as the fault it saves.
    if count > 1 {
        advise_each(
            guards().map(|guard| guard + each - page),
            page,
            libc::MADV_POPULATE_WRITE,
        );
    }
    register(base, count, size, &kinds, &mut keep);
    Ok(())
}

/// Unmaps `stacks`, sorted by address, with one `munmap` for each run of stacks that lie back
/// to back (at most [`MAX_BATCH`] stacks per sort; more are taken in groups).
pub(super) fn unmap_batch(stacks: impl IntoIterator<Item = Stack>) {
    let mut ranges = [(0, 0); MAX_BATCH];
    let mut count = 0;
    for stack in stacks {
        if count == MAX_BATCH {
            unmap_runs(&mut ranges);
            count = 0;
        }
        ranges[count] = stack.into_mapping();
        count += 1;
    }
    unmap_runs(&mut ranges[..count]);
}

/// Unmaps the stack mappings `ranges` (`[start, end)` each, given up by their stacks), one
/// `munmap` per run of neighbours.
fn unmap_runs(ranges: &mut [(usize, usize)]) {
    ranges.sort_unstable_by_key(|&(start, _)| start);
    let mut rest = &ranges[..];
    while let Some(&(start, first_end)) = rest.first() {
        // The run: each next mapping starts where the one before it ends.
        let mut end = first_end;
        let mut length = 1;
        while let Some(&(next_start, next_end)) = rest.get(length)
            && next_start == end
        {
            end = next_end;
            length += 1;
        }
        let (run, after) = rest.split_at(length);
        // SAFETY: every range was given up by its stack (`Stack::into_mapping`), so the run
        // is mappings that nothing uses any more and that nothing else will unmap.
        if !unsafe { super::unmap(start, end - start) } {
            // Refused (at `vm.max_map_count`, a run that splits a mapping): one by one, as a
            // dropped stack would be, so that at least the runs' outer stacks are freed.
            for &(start, end) in run {
                // SAFETY: as above; the whole run was left mapped.
                unsafe { super::unmap(start, end - start) };
            }
        }
        rest = after;
    }
}

/// Registers the first `count` stacks of the batch at `base` (guard kinds in `kinds`) with the
/// overflow reporter, Valgrind and ASan, and hands them to `keep`.
fn register(
    base: usize,
    count: usize,
    size: usize,
    kinds: &[GuardKind; MAX_BATCH],
    keep: &mut impl FnMut(Stack),
) {
    let page = page_size();
    let each = size + page;
    overflow::register_guards((0..count).map(|i| base + i * each), page, size);
    for (i, kind) in kinds.iter().enumerate().take(count) {
        let limit = base + i * each + page;
        let top = limit + size;
        valgrind::register_stack(limit, top);
        crate::arch::stack_mapped(limit, top);
        let guard_bit = match kind {
            GuardKind::GuardRegion => 0,
            GuardKind::ProtNone => PROT_NONE_BIT,
        };
        keep(Stack {
            top: NonNull::new(top as *mut u8).expect("a mapping never ends at address 0"),
            size_and_guard: size | guard_bit,
        });
    }
}

/// Gives `advice` for `len` bytes at each of `starts` (at most [`MAX_BATCH`]) in one
/// `process_madvise` call on ourselves. Returns whether every range was advised; `false` if the
/// kernel cannot do it (then it is not asked again) or did only part of it.
fn advise_each(starts: impl Iterator<Item = usize>, len: usize, advice: libc::c_int) -> bool {
    let mut ranges = [libc::iovec {
        iov_base: ptr::null_mut(),
        iov_len: 0,
    }; MAX_BATCH];
    let mut count = 0;
    for (range, start) in ranges.iter_mut().zip(starts) {
        *range = libc::iovec {
            iov_base: start as *mut libc::c_void,
            iov_len: len,
        };
        count += 1;
    }
    let advised = advise_ranges(&ranges[..count], advice, &VECTORED_ADVICE);
    advised == Some(count * len)
}

/// Cleared the first time `process_madvise(MADV_DONTNEED)` on ourselves fails for a reason
/// that would recur (kept apart from [`VECTORED_ADVICE`]: a kernel may take one advice this
/// way and refuse the other).
static VECTORED_RELEASE: AtomicBool = AtomicBool::new(true);

/// Gives `advice` (`MADV_DONTNEED`) for each of `ranges` (at most 1024) in one
/// `process_madvise` call on ourselves; `false` if the kernel cannot (then the caller advises
/// range by range, and this is not tried again) or did only part of it.
///
/// # Safety
/// The ranges lie in stacks the caller owns, and nothing lives in them: the advice discards
/// their contents.
pub(super) unsafe fn advise_self(ranges: &[libc::iovec], advice: libc::c_int) -> bool {
    let total: usize = ranges.iter().map(|range| range.iov_len).sum();
    advise_ranges(ranges, advice, &VECTORED_RELEASE) == Some(total)
}

/// One `process_madvise(PIDFD_SELF, ranges, advice)`, unless `vectored` says the kernel cannot
/// take it: the bytes advised, or `None` (and `vectored` cleared if the failure would recur).
fn advise_ranges(
    ranges: &[libc::iovec],
    advice: libc::c_int,
    vectored: &AtomicBool,
) -> Option<usize> {
    if !vectored.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: `ranges` are initialised iovecs naming ranges of mappings that the callers own,
    // where the advice is harmless (guard markers or committed zero pages in fresh stacks,
    // discarded pages where nothing lives: see the callers). The call reads the array and
    // keeps no pointer.
    let advised = unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            PIDFD_SELF,
            ranges.as_ptr(),
            ranges.len(),
            advice,
            0,
        )
    };
    if advised < 0 {
        // No such call (ENOSYS: before Linux 5.10, or an emulator), no PIDFD_SELF (EBADF:
        // before 6.15), or advice it refuses for a process (EINVAL: before 6.13): never again.
        // Anything else (ENOMEM while committing pages) concerns this call only.
        let error = io::Error::last_os_error().raw_os_error();
        if matches!(
            error,
            Some(libc::ENOSYS | libc::EBADF | libc::EINVAL | libc::EPERM)
        ) {
            vectored.store(false, Ordering::Relaxed);
        }
        return None;
    }
    Some(advised as usize)
}
