//! A parked stack's live frames moved to the heap and back: the memory side of compaction.
//!
//! Owns: [`SavedFrames`] (the bytes from a saved stack pointer up to the stack's top, in a
//! right-sized heap buffer), saving them, putting them back at the same
//! addresses, and the checking mode's protection of a compacted stack
//! ([`protect_released`], [`unprotect_released`]).
//!
//! May not: decide which stack may be compacted or when (`runtime::compaction` does, and keeps
//! the list of everything that may touch a parked stack); release pages itself (the caller
//! adds [`compacted_range`] to its `ReleaseBatch`, so that neighbouring stacks are released in
//! one call).
//!
//! Frames go back to the addresses they came from, so every pointer into them (a borrow held
//! by a frame higher up, a saved frame pointer, a return address's caller frame) is valid
//! again once [`SavedFrames::restore`] returns. Between save and restore the range reads as
//! zeros (released) or faults (the checking mode).

use std::io;

use super::usage::{MADV_GUARD_REMOVE, ReleaseBatch};
use super::{GuardKind, MADV_GUARD_INSTALL, Stack, guard_kind, page_size};
use crate::arch;

/// The live frames of a parked stack, `[top - 8 * len, top)`, in a heap buffer of exactly
/// that many words. The stack they came from is not recorded: the caller keeps the two
/// together (a green thread's task record holds both).
pub(crate) struct SavedFrames {
    words: Box<[usize]>,
    /// Whether [`queue_release`](Self::queue_release) lifted the stack's guard region.
    guard_lifted: bool,
    /// Whether [`protect`](Self::protect) made the frames' pages fault (the checking mode).
    protected: bool,
}

impl SavedFrames {
    /// Copies what is live on `stack` for a context suspended with stack pointer `sp`: from
    /// `sp` (rounded down to 16 bytes) up to the top. Returns `None` if `sp` is not on
    /// `stack`.
    ///
    /// Not the red zone below `sp` (128 bytes on x86_64, none on aarch64): the innermost frame
    /// of a suspended context is the switch's, and every function above it made a call, so
    /// none keeps anything there (ARCHITECTURE.md, "Stack high-water release": the argument
    /// that lets the sweep release below a parked stack pointer). It saves 128 bytes per
    /// compacted green thread on x86_64.
    ///
    /// # Safety
    /// The context suspended at `sp` on `stack` stays suspended until the frames are restored,
    /// and nothing reads or writes `[limit, top)` of `stack` meanwhile (the caller's list of
    /// who may touch a parked stack says why).
    pub(crate) unsafe fn save(stack: &Stack, sp: usize) -> Option<SavedFrames> {
        let top = stack.top().as_ptr() as usize;
        if sp <= stack.limit() || sp > top {
            return None;
        }
        let low = sp & !15;
        let len = (top - low) / 8;
        let mut words = vec![0usize; len].into_boxed_slice();
        // SAFETY: `[low, top)` is inside the stack's usable range, which is mapped read-write
        // (pages never touched read as zeros), 16-byte aligned at both ends; `words` is a new
        // allocation of `len` words. The stack does not change during the copy (the caller's
        // contract).
        unsafe { arch::copy_words(low as *const usize, words.as_mut_ptr(), len) };
        Some(SavedFrames {
            words,
            guard_lifted: false,
            protected: false,
        })
    }

    /// Bytes the frames take on the heap (not counting the allocator's header).
    pub(crate) fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Queues the release of `stack`, whose frames these are, in `batch`; if `lift_guard` and
    /// its guard is a guard region, its guard page and the markers there too: the page tables
    /// that map a run of compacted neighbours are then empty, and the kernel frees them with
    /// the release. [`restore`](Self::restore) puts the guard back first.
    ///
    /// # Safety
    /// As [`save`](Self::save): nothing runs on `stack` or touches it until the frames are
    /// restored.
    pub(crate) unsafe fn queue_release(
        &mut self,
        stack: &Stack,
        batch: &mut ReleaseBatch,
        lift_guard: bool,
    ) {
        let (start, end) = compacted_range(stack);
        super::valgrind::forbid(start, end);
        self.guard_lifted = lift_guard && stack.guard() == GuardKind::GuardRegion;
        // SAFETY: the caller's contract: nothing lives on the stack or runs there until the
        // frames come back (and the guard with them).
        unsafe {
            if self.guard_lifted {
                let page = page_size();
                batch.push_guard(start - page, page);
                batch.push(start - page, end);
            } else {
                batch.push(start, end);
            }
        }
    }

    /// The checking mode: makes the pages that held these frames on `stack` fault (once the
    /// stack is released), as a guard region where the kernel has them and `PROT_NONE`
    /// otherwise, and registers them with the fault handler as green thread `owner`'s, so
    /// that a stray access is reported by name instead of reading zeros.
    ///
    /// # Safety
    /// As [`save`](Self::save).
    pub(crate) unsafe fn protect(&mut self, stack: &Stack, owner: u64) {
        // SAFETY: forwarded.
        if unsafe { protect_released(stack, self) } {
            let (start, end) = frame_pages(stack, self);
            crate::overflow::register_compacted(start, end - start, owner);
            self.protected = true;
        }
    }

    /// Puts the frames back where [`save`](Self::save) found them on `stack`, after putting
    /// back its guard (if [`queue_release`](Self::queue_release) lifted it) and lifting the
    /// checking mode's protection (if [`protect`](Self::protect) set it).
    ///
    /// # Safety
    /// `stack` is the stack they were saved from, with nothing having run on it since.
    pub(crate) unsafe fn restore(self, stack: &Stack) {
        if self.guard_lifted {
            reinstall_guard(stack);
        }
        if self.protected {
            crate::overflow::unregister_guard(frame_pages(stack, &self).0);
            if let Err(error) = unprotect_released(stack, &self) {
                eprintln!(
                    "greenweave (compaction checking mode): could not make a compacted \
                     stack accessible again ({error}), aborting"
                );
                std::process::abort();
            }
        }
        let (start, top) = compacted_range(stack);
        super::valgrind::allow(start, top);
        let low = top - self.bytes();
        // SAFETY: `[low, top)` is the range the frames were saved from, on the same stack,
        // mapped read-write; nothing runs on it (the caller's contract). A write to a released
        // page gets a fresh one from the kernel.
        unsafe { arch::copy_words(self.words.as_ptr(), low as *mut usize, self.words.len()) };
    }
}

/// The range a compacted stack gives back: its whole usable range, page aligned (the frames
/// were saved, and nothing else lives on a parked stack).
fn compacted_range(stack: &Stack) -> (usize, usize) {
    (stack.limit(), stack.top().as_ptr() as usize)
}

/// Puts back the guard region that [`SavedFrames::queue_release`] lifted, before anything runs on
/// `stack` again. Falls back to `PROT_NONE` if the kernel refuses the markers (no memory for
/// a page-table page); aborts, saying why, if it refuses that too: a stack without its guard
/// would let an overflow write into its neighbour.
fn reinstall_guard(stack: &Stack) {
    let page = page_size();
    let guard = (stack.limit() - page) as *mut libc::c_void;
    // SAFETY: the guard page of this stack's own mapping, empty since its markers were
    // lifted; nothing refers to it.
    if unsafe { libc::madvise(guard, page, MADV_GUARD_INSTALL) } == 0 {
        return;
    }
    // SAFETY: as above; `PROT_NONE` makes the same page fault, as a separate mapping.
    if unsafe { libc::mprotect(guard, page, libc::PROT_NONE) } == 0 {
        return;
    }
    let error = io::Error::last_os_error();
    eprintln!(
        "greenweave: could not put back the guard page of a compacted green thread's stack \
         before waking it ({error}); it cannot run without one, aborting"
    );
    std::process::abort();
}

/// The pages that held the frames `saved` of `stack`: what the checking mode protects, where
/// anything that holds a pointer into the parked green thread's live data would touch. (The
/// rest of the stack is dead memory, released all the same.)
fn frame_pages(stack: &Stack, saved: &SavedFrames) -> (usize, usize) {
    let top = stack.top().as_ptr() as usize;
    let start = (top - saved.bytes()) & !(super::page_size() - 1);
    (start, top)
}

/// The checking mode: makes the pages that held a compacted stack's frames ([`frame_pages`])
/// fault, as a guard region where the kernel has them and `PROT_NONE` otherwise, so that a
/// stray access is reported by the fault handler instead of reading zeros. Returns whether it
/// did.
///
/// # Safety
/// As [`SavedFrames::save`]: nothing may touch the range until [`unprotect_released`].
unsafe fn protect_released(stack: &Stack, saved: &SavedFrames) -> bool {
    let (start, end) = frame_pages(stack, saved);
    let advice = match guard_kind() {
        GuardKind::GuardRegion => MADV_GUARD_INSTALL,
        GuardKind::ProtNone => 0,
    };
    // SAFETY: the range is the stack's own usable range, which nothing uses (the caller's
    // contract); guard markers replace its pages, `PROT_NONE` keeps them but forbids access.
    let rc = unsafe {
        if advice != 0 {
            libc::madvise(start as *mut libc::c_void, end - start, advice)
        } else {
            libc::mprotect(start as *mut libc::c_void, end - start, libc::PROT_NONE)
        }
    };
    rc == 0
}

/// Undoes [`protect_released`]: the range is accessible again, and reads as zeros where the
/// guard markers were.
///
/// # Errors
/// The kernel's, if it refuses (no memory to split a mapping under `PROT_NONE`).
fn unprotect_released(stack: &Stack, saved: &SavedFrames) -> io::Result<()> {
    let (start, end) = frame_pages(stack, saved);
    // SAFETY: the range is the stack's own usable range, protected by `protect_released`;
    // lifting the protection makes no memory visible that was not the stack's.
    let rc = unsafe {
        match guard_kind() {
            GuardKind::GuardRegion => {
                libc::madvise(start as *mut libc::c_void, end - start, MADV_GUARD_REMOVE)
            }
            GuardKind::ProtNone => libc::mprotect(
                start as *mut libc::c_void,
                end - start,
                libc::PROT_READ | libc::PROT_WRITE,
            ),
        }
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::usage::ReleaseBatch;

    #[test]
    fn frames_come_back_to_the_same_addresses_after_the_stack_is_released() {
        let stack = Stack::new(64 * 1024).unwrap();
        let top = stack.top().as_ptr() as usize;
        let sp = top - 1000;
        let low = sp & !15;
        for (index, at) in (low..top).step_by(8).enumerate() {
            // SAFETY: inside the stack's usable range; nothing runs on it.
            unsafe { (at as *mut usize).write(0x5eed_0000 + index) };
        }
        // SAFETY: nothing runs on this stack.
        let frames = unsafe { SavedFrames::save(&stack, sp) }.unwrap();
        assert_eq!(frames.bytes(), top - low);
        let (start, end) = compacted_range(&stack);
        let mut batch = ReleaseBatch::default();
        // SAFETY: the frames are saved and nothing runs on the stack.
        unsafe { batch.push(start, end) };
        batch.release();
        // SAFETY: as above; released pages read as zeros.
        assert_eq!(unsafe { ((top - 8) as *const usize).read() }, 0);
        // SAFETY: the same stack, nothing ran on it.
        unsafe { frames.restore(&stack) };
        for (index, at) in (low..top).step_by(8).enumerate() {
            // SAFETY: as above.
            assert_eq!(unsafe { (at as *const usize).read() }, 0x5eed_0000 + index);
        }
    }

    #[test]
    fn a_stack_pointer_off_the_stack_saves_nothing() {
        let stack = Stack::new(64 * 1024).unwrap();
        // SAFETY: nothing runs on this stack.
        assert!(unsafe { SavedFrames::save(&stack, stack.limit()) }.is_none());
        let above = stack.top().as_ptr() as usize + 16;
        // SAFETY: as above.
        assert!(unsafe { SavedFrames::save(&stack, above) }.is_none());
    }

    #[test]
    fn a_protected_stack_becomes_usable_again() {
        let stack = Stack::new(64 * 1024).unwrap();
        let top = stack.top().as_ptr() as usize;
        // SAFETY: nothing runs on this stack.
        unsafe { ((top - 8) as *mut usize).write(7) };
        // SAFETY: as above.
        let frames = unsafe { SavedFrames::save(&stack, top - 64) }.unwrap();
        // SAFETY: as above.
        assert!(unsafe { protect_released(&stack, &frames) });
        unprotect_released(&stack, &frames).unwrap();
        // SAFETY: as above.
        unsafe { frames.restore(&stack) };
        // SAFETY: as above.
        assert_eq!(unsafe { ((top - 8) as *const usize).read() }, 7);
    }
}
