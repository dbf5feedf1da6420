//! AddressSanitizer's fiber annotations, compiled only into builds with `-Zsanitizer=address`
//! (the `greenweave_asan` cfg, set by `build.rs`).
//!
//! Owns: the calls that tell ASan the stack pointer is about to move to another stack and has
//! arrived there, the bounds of the stack of every suspended context (by its saved stack
//! pointer), unpoisoning a stack that no context runs on any more, and showing every mapped
//! stack to LeakSanitizer.
//!
//! May not: be reached from a native build. `super` calls it only under the cfg, so a build
//! without ASan has none of this code and no table.
//!
//! # Why
//! ASan keeps, per OS thread, the bounds of the stack it runs on and a *fake stack* (with
//! `detect_stack_use_after_return`, the default, every instrumented frame lives there). When
//! the stack pointer jumps into an mmap'd stack behind its back, it reports errors that are
//! not there (`__asan_handle_no_return`, called before every panic, unpoisons "the stack"
//! between the stack pointer and a top that belongs to another stack), and frames of two
//! contexts end up interleaved on one fake stack. The protocol (`sanitizer/common_interface_defs.h`):
//!
//! ```text
//!   leaving:   __sanitizer_start_switch_fiber(&save, bottom, size)   bounds of the TARGET stack;
//!                                                                   ASan parks our fake stack in
//!                                                                   `save` (or frees it, if
//!                                                                   `save` is null: we never
//!                                                                   come back)
//!   <the switch>
//!   arrived:   __sanitizer_finish_switch_fiber(save, &bottom, &size) our fake stack back (null on
//!                                                                   a fresh stack); out: bounds
//!                                                                   of the stack we came FROM
//! ```
//!
//! The switch knows only the target's saved stack pointer, so the bounds travel in [`BOUNDS`]:
//! every context that arrives somewhere records the bounds ASan gives back for the context it
//! came from (whose stack pointer arrives in the `Transfer`), and [`fresh_context`] records a
//! context that `init_stack` has just built. A stack pointer is switched to at most once, so switching to it takes its
//! entry out; entries of contexts that never run again (a finished fiber's last one) are
//! dropped when their stack is reused or unmapped ([`release_stack`]). The bounds of an OS
//! thread's own stack come from ASan itself, the first time a context leaves it.
//!
//! A context that is never resumed and never finishes (its stack leaked on purpose, see
//! `Coroutine`'s drop and `greenlet`'s kill) keeps its fake stack: ASan frees one only at that
//! context's last switch.
//!
//! LeakSanitizer looks for pointers to heap blocks in globals, thread-locals and the stacks of
//! OS threads, not in mmap'd memory: the frames of a suspended coroutine would hide from it,
//! and what they own would be reported as leaked. So every stack is a root region from its
//! mapping ([`stack_mapped`]) to its unmapping ([`stack_unmapped`]). Frames that ASan keeps on a
//! suspended context's fake stack are still not scanned (no interface shows LSan a fake stack):
//! a heap block that only such a frame refers to when the leak check runs (at exit) is reported.
//!
//! [`BOUNDS`] is one map for the process, under a mutex, because a suspended context may be
//! resumed from another OS thread (a `Stack` is `Send`). This costs a lock per switch, only
//! under ASan.

use core::ffi::c_void;
use core::ptr;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use super::StackPointer;

unsafe extern "C" {
    // From compiler-rt's sanitizer/common_interface_defs.h and asan_interface.h; the ASan
    // runtime that `-Zsanitizer=address` links defines them.
    fn __sanitizer_start_switch_fiber(
        fake_stack_save: *mut *mut c_void,
        bottom: *const c_void,
        size: usize,
    );
    fn __sanitizer_finish_switch_fiber(
        fake_stack_save: *mut c_void,
        bottom_old: *mut *const c_void,
        size_old: *mut usize,
    );
    fn __asan_unpoison_memory_region(addr: *const c_void, size: usize);
    // From sanitizer/lsan_interface.h (LeakSanitizer is part of the ASan runtime on Linux).
    fn __lsan_register_root_region(addr: *const c_void, size: usize);
    fn __lsan_unregister_root_region(addr: *const c_void, size: usize);
}

/// The stack `[bottom, bottom + size)` that a suspended context runs on, by the context's
/// saved stack pointer.
static BOUNDS: Mutex<BTreeMap<usize, (usize, usize)>> = Mutex::new(BTreeMap::new());

fn bounds() -> MutexGuard<'static, BTreeMap<usize, (usize, usize)>> {
    // No code that can panic runs under the lock (BTreeMap's operations only allocate, and
    // an allocation failure aborts), so a poisoned map is still consistent.
    BOUNDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Records that the fresh context `sp` (from `init_stack`) runs on `[bottom, top)`.
pub(super) fn fresh_context(sp: StackPointer, bottom: usize, top: usize) {
    bounds().insert(sp.addr(), (bottom, top - bottom));
}

/// Called just before this context switches to `to`. `fake_stack_save` receives this
/// context's fake stack, to be handed back to [`arrived`] when this context is resumed;
/// `None` means it never will be (a fiber's last switch), and ASan frees the fake stack.
///
/// # Safety
/// The switch to `to` must follow with nothing in between that uses this context's fake
/// stack, and, if `fake_stack_save` is `None`, this context's instrumented frames must never
/// be used again.
#[inline(always)]
pub(super) unsafe fn departing(fake_stack_save: Option<&mut *mut c_void>, to: StackPointer) {
    let Some((bottom, size)) = bounds().remove(&to.addr()) else {
        // Every context comes from `init_stack` (recorded by `fresh_context`) or arrived in a
        // `Transfer` (recorded by `arrived`): a miss is a bug in this module, and switching
        // without the bounds would make ASan report errors that are not there.
        eprintln!(
            "fatal runtime error: greenweave: switching to a context whose stack bounds \
             AddressSanitizer was never told ({:#x}); aborting",
            to.addr()
        );
        std::process::abort()
    };
    let save = fake_stack_save.map_or(ptr::null_mut(), |save| save as *mut *mut c_void);
    // SAFETY: `save` is null or points to a live local of the caller; the bounds are those
    // of the stack `to` was saved on, which stays mapped while a context suspended on it
    // exists.
    unsafe { __sanitizer_start_switch_fiber(save, bottom as *const c_void, size) };
}

/// Called first thing after a switch has arrived in this context: gives ASan back this
/// context's fake stack (`fake_stack` from [`departing`], or null on a fresh stack), and
/// records the bounds of the stack that `from`, the context that switched here, is saved on.
///
/// # Safety
/// Must be called exactly once per switch, right after it, on the stack switched to.
#[inline(always)]
pub(super) unsafe fn arrived(fake_stack: *mut c_void, from: StackPointer) {
    let mut bottom: *const c_void = ptr::null();
    let mut size = 0;
    // SAFETY: a `departing` call started this switch; the out-pointers are live locals.
    unsafe { __sanitizer_finish_switch_fiber(fake_stack, &mut bottom, &mut size) };
    bounds().insert(from.addr(), (bottom as usize, size));
}

/// Forgets the contexts saved on `[bottom, top)`, which no context runs on any more, and
/// unpoisons it: redzones left in ASan's shadow by frames that never returned (a finished
/// fiber's, a force-unwound one's) would otherwise make the stack's next user, or the next
/// mapping at that address, report errors that are not there.
pub(super) fn release_stack(bottom: usize, top: usize) {
    let mut bounds = bounds();
    // Usually one entry (the last context of the fiber that ran here), often none.
    while let Some((&sp, _)) = bounds.range(bottom..top).next() {
        bounds.remove(&sp);
    }
    drop(bounds);
    // SAFETY: unpoisoning only changes ASan's shadow of a range the caller owns; it never
    // touches the memory itself.
    unsafe { __asan_unpoison_memory_region(bottom as *const c_void, top - bottom) };
}

/// Makes the stack `[bottom, top)`, just mapped, a root region for LeakSanitizer.
pub(super) fn stack_mapped(bottom: usize, top: usize) {
    // SAFETY: registering a range only makes LSan read it during a leak check, and LSan skips
    // whatever is not mapped readable at that time.
    unsafe { __lsan_register_root_region(bottom as *const c_void, top - bottom) };
}

/// Undoes [`stack_mapped`] and [`release_stack`]s the stack: it is about to be unmapped.
pub(super) fn stack_unmapped(bottom: usize, top: usize) {
    release_stack(bottom, top);
    // SAFETY: `stack_mapped` registered exactly this range (a `Stack`'s bounds never change).
    unsafe { __lsan_unregister_root_region(bottom as *const c_void, top - bottom) };
}
