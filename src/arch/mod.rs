//! The one narrow interface to the architecture-specific context switch.
//!
//! Owns: the [`StackPointer`] of a suspended context, the switch primitives ([`switch`],
//! [`resume`], [`suspend`]), and [`init_stack`], which lays out a fresh stack so that the
//! first switch to it starts an entry function. Everything above this module (stacks,
//! coroutines, the scheduler) is portable.
//!
//! May not: allocate, know about coroutines, or be selected by `cfg` anywhere else: this file
//! is the only place that picks an architecture.
//!
//! Built with AddressSanitizer (`-Zsanitizer=address`; `build.rs` then sets the
//! `greenweave_asan` cfg), every switch is announced to ASan, which needs the bounds of the
//! stack it lands on (`asan.rs`); that build allocates, in a table of those bounds. The hooks
//! for it ([`set_stack_bounds`], [`entered_fresh_stack`], [`release_stack`], [`stack_mapped`],
//! [`stack_unmapped`]) are empty in any other build.

use core::ptr::NonNull;

cfg_if::cfg_if! {
    if #[cfg(target_arch = "x86_64")] {
        mod x86_64;
        use x86_64 as imp;
    } else if #[cfg(target_arch = "aarch64")] {
        mod aarch64;
        use aarch64 as imp;
    } else {
        compile_error!("greenweave supports x86_64 and aarch64 only");
    }
}

#[cfg(greenweave_asan)]
mod asan;

/// Evaluates `$switch`, an expression that leaves this context for `$to` and yields the
/// [`Transfer`] this context is resumed with. Without ASan it is exactly `$switch`; with it,
/// ASan is told before the switch where the stack pointer goes and after it where it came
/// back from (`asan.rs`). Expands inside the caller's unsafe block.
#[cfg(not(greenweave_asan))]
macro_rules! announced {
    ($to:expr, $switch:expr) => {
        $switch
    };
}

#[cfg(greenweave_asan)]
macro_rules! announced {
    ($to:expr, $switch:expr) => {{
        // ASan parks this context's fake stack here while it is suspended.
        let mut fake_stack = core::ptr::null_mut();
        asan::departing(Some(&mut fake_stack), $to);
        let transfer: Transfer = $switch;
        asan::arrived(fake_stack, transfer.from);
        transfer
    }};
}

/// Bytes of the register frame saved at a suspended stack's pointer: what a switch to that
/// stack reads first.
pub(crate) const SAVED_FRAME_BYTES: usize = imp::SAVED_FRAME_BYTES;

/// Bytes that [`init_stack`] uses at the top of a fresh stack before the entry runs.
pub(crate) const INITIAL_FRAME_BYTES: usize = imp::INITIAL_FRAME_BYTES;

/// Bytes below the stack pointer that the ABI lets a function use without moving it (the red
/// zone): live data of a running context may lie there, never below it.
pub(crate) const RED_ZONE_BYTES: usize = imp::RED_ZONE_BYTES;

/// The saved stack pointer of a context that is not running.
///
/// It points at the register frame the switch routine pushed (or [`init_stack`] built); it is
/// valid exactly until that context is switched to once.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StackPointer(NonNull<u8>);

impl StackPointer {
    /// The address, for a layer above that packs it with flags in one word. It is at least
    /// 8-byte aligned, so the low bits are zero.
    #[inline(always)]
    pub(crate) fn addr(self) -> usize {
        self.0.as_ptr() as usize
    }

    /// A value for a slot that holds no context yet. It is not a context: switching to it is
    /// undefined; a slot holding it must be filled from a [`Transfer`] before anyone switches
    /// through it.
    #[inline]
    pub(crate) const fn placeholder() -> StackPointer {
        StackPointer(NonNull::dangling())
    }

    /// The stack pointer at `addr`, as returned by [`StackPointer::addr`]; `None` for 0.
    /// Switching to it is only sound if it came from a `StackPointer` that is still valid.
    #[inline(always)]
    pub(crate) fn from_addr(addr: usize) -> Option<StackPointer> {
        NonNull::new(addr as *mut u8).map(StackPointer)
    }
}

/// What arrives with every switch: where the other side stopped, and the word it sent.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Transfer {
    /// The stack pointer of the context that just switched here; switching to it resumes it.
    pub(crate) from: StackPointer,
    /// The word passed to [`switch`] by that context.
    pub(crate) data: usize,
}

/// The function a fresh stack starts in: `entry(from, data, arg)`.
///
/// `from` and `data` are the [`Transfer`] of the first switch; `arg` is the word given to
/// [`init_stack`]. It runs on the new stack and must never return (it has no caller).
pub(crate) type EntryFn = unsafe extern "C" fn(from: StackPointer, data: usize, arg: usize) -> !;

// Three ways through the same assembly, which differ only in how the processor predicts the
// final branch (`asm/x86_64.S` explains the return-stack buffer and has the measurements).
// Every one is *correct* for any suspended context; choosing the matching one is what keeps
// the predictor balanced:
//
//   switch   symmetric (greenlets): enters and leaves by jumps, the predictor is untouched.
//   resume   enters by an ordinary call and leaves by a jump into the target.
//   suspend  enters by a jump and leaves by the `ret` that matches the call in the `resume`
//            that started or resumed this context.

/// Suspends the running context and resumes the one saved at `to`, sending it `data`.
///
/// Returns when some context switches back to this one, with that context's stack pointer and
/// the word it sent. For symmetric transfers (greenlets); use [`resume`] and [`suspend`] for a
/// resumer and the context it runs.
///
/// # Safety
/// `to` must be the stack pointer of a suspended context (from a [`Transfer`] or from
/// [`init_stack`]) that has not been resumed since; it is consumed by this call. Whatever runs
/// on the other side must eventually switch back here or never touch this stack again, and no
/// unwinding may cross the switch (the assembly has no landing pads).
#[inline(always)]
pub(crate) unsafe fn switch(to: StackPointer, data: usize) -> Transfer {
    // SAFETY: forwarded from the caller.
    unsafe { announced!(to, imp::switch(to, data)) }
}

/// [`switch`] from a resumer into a context that will come back with [`suspend`] (a coroutine
/// resumed by its caller, a green thread run by the scheduler).
///
/// # Safety
/// As for [`switch`].
#[inline(always)]
pub(crate) unsafe fn resume(to: StackPointer, data: usize) -> Transfer {
    // SAFETY: forwarded from the caller.
    unsafe { announced!(to, imp::resume(to, data)) }
}

/// [`switch`] from a context back to the resumer that last [`resume`]d it (a coroutine
/// suspending or finishing). Switching with it to any other context is correct but costs a
/// mispredicted return.
///
/// # Safety
/// As for [`switch`].
#[inline(always)]
pub(crate) unsafe fn suspend(to: StackPointer, data: usize) -> Transfer {
    // SAFETY: forwarded from the caller.
    unsafe { announced!(to, imp::suspend(to, data)) }
}

/// [`suspend`] as the last switch of a context that is never resumed (a fiber that finished):
/// it saves nothing and never returns. The receiver's [`Transfer::from`] is then not a
/// context (only non-null) and must not be switched to. Under ASan this frees the context's
/// fake stack, so the word sent must not point into one: it must point into memory that stays
/// valid, such as a frame ASan does not instrument (the fiber's root).
///
/// # Safety
/// As for [`suspend`], and nothing may ever switch back to this context.
#[inline(always)]
pub(crate) unsafe fn suspend_last(to: StackPointer, data: usize) -> ! {
    #[cfg(greenweave_asan)]
    // SAFETY: the switch follows at once, and the caller never comes back here.
    unsafe {
        asan::departing(None, to)
    };
    // SAFETY: forwarded from the caller.
    unsafe { imp::suspend_last(to, data) }
}

/// [`switch`] as the last switch of a context that is never resumed; see [`suspend_last`].
///
/// # Safety
/// As for [`suspend_last`].
#[inline(always)]
pub(crate) unsafe fn switch_last(to: StackPointer, data: usize) -> ! {
    #[cfg(greenweave_asan)]
    // SAFETY: the switch follows at once, and the caller never comes back here.
    unsafe {
        asan::departing(None, to)
    };
    // SAFETY: forwarded from the caller.
    unsafe { imp::switch_last(to, data) }
}

unsafe extern "C" {
    /// `asm/probe_<arch>.S`: calls `probe(arg)` with CFI that makes the suspended context
    /// whose saved frame is at `frame` its caller, for an unwinder started inside `probe`.
    fn greenweave_probe_parked(
        frame: *const u8,
        probe: unsafe extern "C" fn(*mut u8),
        arg: *mut u8,
    );
}

/// Runs `probe(arg)` on this stack as if the suspended context `frame` had called it: an
/// unwinder started inside `probe` (`std::backtrace::Backtrace::force_capture`) walks on from
/// `probe` into that context's stack, from its switch point to its root, without resuming it.
///
/// # Safety
/// `frame` is the saved stack pointer of a context that stays suspended, unchanged, for the
/// whole call (nothing resumes or frees it: call this on the OS thread that owns it, where
/// nothing else runs meanwhile); `probe` must not unwind.
pub(crate) unsafe fn probe_suspended(
    frame: StackPointer,
    probe: unsafe extern "C" fn(*mut u8),
    arg: *mut u8,
) {
    // SAFETY: forwarded from the caller; the routine is an ordinary C function of this
    // signature, which preserves every callee-saved register.
    unsafe { greenweave_probe_parked(frame.0.as_ptr(), probe, arg) }
}

/// Tells ASan's annotations that `context`, just built by [`init_stack`], runs on the stack
/// `[bottom, top)`. Does nothing in other builds.
#[inline(always)]
pub(crate) fn set_stack_bounds(context: StackPointer, bottom: usize, top: usize) {
    #[cfg(greenweave_asan)]
    asan::fresh_context(context, bottom, top);
    #[cfg(not(greenweave_asan))]
    let _ = (context, bottom, top);
}

/// Must be the first thing an [`EntryFn`] does: under ASan it completes the switch that
/// started the context (`from` is that switch's [`Transfer::from`]). Does nothing in other
/// builds.
///
/// # Safety
/// Called once, by the entry of a fresh context, before anything else on its stack.
#[inline(always)]
pub(crate) unsafe fn entered_fresh_stack(from: StackPointer) {
    #[cfg(greenweave_asan)]
    // SAFETY: per the caller, this is the first code on a stack the first switch just reached;
    // a fresh context has no fake stack yet.
    unsafe {
        asan::arrived(core::ptr::null_mut(), from)
    };
    #[cfg(not(greenweave_asan))]
    let _ = from;
}

/// Called when the stack `[bottom, top)` has been mapped: under ASan, LeakSanitizer then scans
/// it for pointers. Does nothing in other builds.
#[inline(always)]
pub(crate) fn stack_mapped(bottom: usize, top: usize) {
    #[cfg(greenweave_asan)]
    asan::stack_mapped(bottom, top);
    #[cfg(not(greenweave_asan))]
    let _ = (bottom, top);
}

/// Called right before the stack `[bottom, top)` of a [`stack_mapped`] call is unmapped: under
/// ASan, undoes that call and does what [`release_stack`] does. Does nothing in other builds.
#[inline(always)]
pub(crate) fn stack_unmapped(bottom: usize, top: usize) {
    #[cfg(greenweave_asan)]
    asan::stack_unmapped(bottom, top);
    #[cfg(not(greenweave_asan))]
    let _ = (bottom, top);
}

/// Called when no context runs on the stack `[bottom, top)` any more (it is about to be
/// reused or unmapped): under ASan, forgets the contexts saved on it and clears the redzones
/// its frames left. Does nothing in other builds.
#[inline(always)]
pub(crate) fn release_stack(bottom: usize, top: usize) {
    #[cfg(greenweave_asan)]
    asan::release_stack(bottom, top);
    #[cfg(not(greenweave_asan))]
    let _ = (bottom, top);
}

/// Lays out a fresh stack ending (exclusive) at `top` so that the first [`switch`] to the
/// returned pointer calls `entry(from, data, arg)` on that stack.
///
/// # Safety
/// `top` must be 16-byte aligned, and the `INITIAL_FRAME_BYTES` bytes below it must be
/// writable memory that belongs to a stack nothing else is using.
#[inline]
pub(crate) unsafe fn init_stack(top: NonNull<u8>, entry: EntryFn, arg: usize) -> StackPointer {
    debug_assert_eq!(
        top.as_ptr() as usize % 16,
        0,
        "stack top must be 16-byte aligned"
    );
    // SAFETY: forwarded from the caller.
    let sp = unsafe { imp::init_stack(top.as_ptr(), entry, arg) };
    // SAFETY: `sp` is below `top`, which is non-null, and the platform code never returns 0.
    StackPointer(unsafe { NonNull::new_unchecked(sp) })
}

/// Where a suspended context's resume address lies in the saved frame its [`StackPointer`]
/// points at (the switch's layout, the same on every stack).
pub(crate) const SUSPENDED_RESUME_ADDRESS_OFFSET: usize = imp::SUSPENDED_RESUME_ADDRESS_OFFSET;

/// A suspended context's stack pointer at its resume address, as an offset from its saved
/// frame: where the suspended code's own frames begin (the CFA that the stack probe names).
pub(crate) const SUSPENDED_FRAME_BYTES: usize = imp::SUSPENDED_FRAME_BYTES;

/// Reads the machine word at `address` with one load the compiler cannot see into: for a
/// suspended stack, whose words are whatever its frames left there (a return address, or
/// bytes Rust would call uninitialised); the load yields a plain value either way.
///
/// # Safety
/// `address` is 8-byte aligned, and its 8 bytes are mapped and readable for the whole call.
#[inline(always)]
pub(crate) unsafe fn load_word(address: usize) -> usize {
    // SAFETY: forwarded from the caller.
    unsafe { imp::load_word(address) }
}

/// Copies `words` machine words from `src` to `dst` with loads and stores the compiler cannot
/// see into (and AddressSanitizer does not check): for a parked stack's frames, which hold
/// ASan's poisoned redzones and bytes Rust would call uninitialised, moved to the heap and back
/// by `stack::frames`.
///
/// # Safety
/// Both ranges are 8-byte aligned, `words * 8` bytes long, mapped (readable at `src`, writable
/// at `dst`) for the whole call, and do not overlap.
#[inline]
pub(crate) unsafe fn copy_words(src: *const usize, dst: *mut usize, words: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { imp::copy_words(src, dst, words) }
}

/// The current stack pointer, approximately (exact to within the caller's frame).
#[inline(always)]
pub(crate) fn current_stack_pointer() -> usize {
    imp::current_stack_pointer()
}

/// The user-space program counter of the code a signal interrupted, read from the context the
/// kernel passed the handler (its third argument, with `SA_SIGINFO`).
///
/// # Safety
/// `context` must be the `ucontext_t` the kernel passed the running signal handler.
pub(crate) unsafe fn interrupted_program_counter(context: *const libc::ucontext_t) -> usize {
    // SAFETY: the caller passes the handler's own context.
    unsafe { imp::interrupted_program_counter(context) }
}

/// The addresses of this OS thread's static TLS block for the executable, whose `PT_TLS`
/// segment is `size` bytes aligned to `align`: where every `thread_local!` of the crates linked
/// into it lives (widened a little, within thread-local memory; see each architecture).
#[cfg_attr(not(feature = "hooks"), allow(dead_code))]
pub(crate) fn executable_tls_block(size: usize, align: usize) -> core::ops::Range<usize> {
    imp::executable_tls_block(size, align)
}

/// Asks the cache to fetch the line holding `addr` for reading, without waiting for it: a
/// hint, never a fault (an unmapped or stale address is ignored by the hardware).
#[inline(always)]
pub(crate) fn prefetch(addr: usize) {
    imp::prefetch(addr)
}

/// Issues a Valgrind client request (`args[0]` is the request code); returns `default` when
/// the program is not running under Valgrind. The instruction sequence is a no-op on hardware.
pub(crate) fn valgrind_client_request(default: usize, args: &[usize; 6]) -> usize {
    imp::valgrind_client_request(default, args)
}
