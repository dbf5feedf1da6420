//! x86_64 (System V) half of [`crate::arch`]: how Rust enters the switch, and the layout of a
//! fresh stack.
//!
//! The switch itself is `asm/x86_64.S`, which saves and restores only rbx and rbp (the
//! callee-saved registers LLVM reserves). This file enters it from `asm!` blocks (a `call`, or
//! two instructions that push a resume address and jump) that declare every other register
//! clobbered, r12-r15 included: the compiler then saves those in the enclosing function's
//! prologue, once, and only the ones that function uses, instead of the switch saving all six
//! on every switch. It also writes the frame that the first switch to a new stack pops.
//! Fresh stack, highest address at the top:
//!
//! ```text
//!   top ->  +----------------------+  16-byte aligned
//!           | (not written)        |  top - 8   padding, keeps the entry's stack aligned
//!           | entry                |  top - 16  the function the trampoline enters
//!           | trampoline           |  top - 24  resume address: the first switch jumps here
//!           | 0  (rbp)             |  top - 32  ends frame-pointer walks
//!   sp  ->  | arg (rbx)            |  top - 40  the entry's third argument
//!           +----------------------+
//! ```
//!
//! After the switch pops three words, rsp = top - 16, which is 16-byte aligned as the SysV ABI
//! requires where a `call` would be, and holds the entry; the trampoline pushes a return
//! address and jumps to it, so the entry starts with rsp = 8 mod 16, as after a call. The
//! padding is never read.
//!
//! The first switch leaves r12-r15 as the resumer had them: the entry saves them if it uses
//! them, and never returns to restore them, and the resumer declared them clobbered.

use super::{EntryFn, StackPointer, Transfer};

unsafe extern "C" {
    // Not functions of the C ABI: each is reached only from the `asm!` blocks below, with the
    // registers `asm/x86_64.S` documents. Declared as functions so `sym` can name them.
    /// Saves this side, resumes `to` by an indirect jump.
    fn greenweave_switch();
    /// The same, resuming `to` by `ret`.
    fn greenweave_switch_ret();
    /// The last switch of a finished fiber: resumes `to` by an indirect jump, saving nothing.
    fn greenweave_switch_last();
    /// The same, resuming `to` by `ret`.
    fn greenweave_switch_last_ret();
    /// Never entered by Rust: the resume address of a fresh stack.
    fn greenweave_trampoline();
}

/// Runs `$enter` (instructions that enter `$routine` with this side's resume address on the
/// stack, the label `2:` after them) with `$to` in rdi and `$data` in rdx, and returns the
/// [`Transfer`] this side is resumed with.
macro_rules! switch_by {
    ($routine:path, $to:expr, $data:expr, $($enter:literal),+) => {{
        let from: *mut u8;
        let data: usize;
        // SAFETY (for the caller to uphold): `$to` is a suspended context. The routine saves
        // rbx and rbp and restores them when this side is resumed; every other register is
        // declared clobbered: the caller-saved ones (clobber_abi) and r12-r15, which whatever
        // runs before we are resumed may change. rsp is unchanged once we are resumed: the
        // resume address pushed on the way in is popped on the way back, by whichever routine
        // resumes us; the block may push because it does not claim `nostack`, and rustc
        // aligns rsp for a call at its start.
        core::arch::asm!(
            $($enter,)+
            routine = sym $routine,
            in("rdi") $to.0.as_ptr(),
            inlateout("rdx") $data => data,
            lateout("rax") from,
            lateout("r12") _, lateout("r13") _, lateout("r14") _, lateout("r15") _,
            clobber_abi("C"),
        );
        Transfer {
            // The switch hands over the stack pointer it saved, never null (the macro expands
            // inside the caller's unsafe block).
            from: StackPointer(core::ptr::NonNull::new_unchecked(from)),
            data,
        }
    }};
}

/// # Safety
/// As `crate::arch::switch`.
#[inline(always)]
pub(super) unsafe fn switch(to: StackPointer, data: usize) -> Transfer {
    // SAFETY: forwarded; see `switch_by`.
    unsafe {
        switch_by!(
            greenweave_switch,
            to,
            data,
            "lea rax, [rip + 2f]", // this side's resume address: the label below
            "push rax",            // saved where a call would save it (frame layout in the .S)
            "jmp {routine}",       // into the switch, without a return-stack entry
            "2:"                   // execution comes back here
        )
    }
}

/// # Safety
/// As `crate::arch::switch`.
#[inline(always)]
pub(super) unsafe fn resume(to: StackPointer, data: usize) -> Transfer {
    // SAFETY: forwarded; see `switch_by`.
    unsafe {
        switch_by!(
            greenweave_switch,
            to,
            data,
            "call {routine}", // pushes this side's resume address, and the return-stack entry
            "2:"              // that the other side's `ret` (arch::suspend) brings us back to
        )
    }
}

/// # Safety
/// As `crate::arch::switch`.
#[inline(always)]
pub(super) unsafe fn suspend(to: StackPointer, data: usize) -> Transfer {
    // SAFETY: forwarded; see `switch_by`.
    unsafe {
        switch_by!(
            greenweave_switch_ret,
            to,
            data,
            "lea rax, [rip + 2f]", // this side's resume address: the label below
            "push rax",            // saved where a call would save it
            "jmp {routine}",       // into the switch that leaves by `ret`
            "2:"                   // execution comes back here
        )
    }
}

/// Enters `$routine`, one of the last switches, by a plain `jmp`: nothing comes back here.
macro_rules! leave_by {
    ($routine:path, $to:expr, $data:expr) => {
        // SAFETY (for the caller to uphold): `$to` is a suspended context, and this one is
        // never resumed, so nothing needs saving and nothing is clobbered that anyone reads.
        core::arch::asm!(
            "jmp {routine}", // into the switch, with no resume address: this side is over
            routine = sym $routine,
            in("rdi") $to.0.as_ptr(),
            in("rdx") $data,
            options(noreturn),
        )
    };
}

/// # Safety
/// As `crate::arch::switch_last`.
#[inline(always)]
pub(super) unsafe fn switch_last(to: StackPointer, data: usize) -> ! {
    // SAFETY: forwarded; see `leave_by`.
    unsafe { leave_by!(greenweave_switch_last, to, data) }
}

/// # Safety
/// As `crate::arch::suspend_last`.
#[inline(always)]
pub(super) unsafe fn suspend_last(to: StackPointer, data: usize) -> ! {
    // SAFETY: forwarded; see `leave_by`.
    unsafe { leave_by!(greenweave_switch_last_ret, to, data) }
}

/// Bytes of the frame every switch saves at a suspended stack's pointer: rbx, rbp and the resume address
/// (see the table at the top of the assembly file).
pub(super) const SAVED_FRAME_BYTES: usize = 24;

/// Bytes of the initial frame, including the padding word.
pub(super) const INITIAL_FRAME_BYTES: usize = 40;

/// The red zone (SysV x86_64 ABI 3.2.2): the 128 bytes below the stack pointer that a leaf
/// function may use without moving it, and that signal delivery therefore skips.
pub(super) const RED_ZONE_BYTES: usize = 128;

/// # Safety
/// `top` is 16-byte aligned and the 40 bytes below it are writable and unused.
#[inline]
pub(super) unsafe fn init_stack(top: *mut u8, entry: EntryFn, arg: usize) -> *mut u8 {
    // SAFETY: the caller guarantees the 40 bytes below `top` are ours; `top` is 16-aligned so
    // every slot is 8-aligned, enough for usize.
    unsafe {
        let sp = top.sub(INITIAL_FRAME_BYTES);
        let slot = |index: usize| sp.cast::<usize>().add(index);
        slot(0).write(arg); // rbx: the entry's third argument
        slot(1).write(0); // rbp: a null frame pointer ends frame-pointer walks
        slot(2).write(greenweave_trampoline as *const () as usize); // resume address
        slot(3).write(entry as *const () as usize); // the function the trampoline enters
        sp
    }
}

/// The interrupted rip, saved in `gregs[REG_RIP]`.
///
/// # Safety
/// `context` is the `ucontext_t` the kernel passed the running signal handler.
pub(super) unsafe fn interrupted_program_counter(context: *const libc::ucontext_t) -> usize {
    // SAFETY: the kernel's context for this handler, valid while it runs.
    unsafe { (*context).uc_mcontext.gregs[libc::REG_RIP as usize] as usize }
}

/// Where a suspended context's resume address lies in its saved frame (`asm/x86_64.S`: rbx at
/// `frame + 0`, rbp at `frame + 8`, the resume address at `frame + 16`).
pub(super) const SUSPENDED_RESUME_ADDRESS_OFFSET: usize = 16;

/// The suspended side's stack pointer at its resume address, as an offset from its saved
/// frame: the frame's three words popped (`asm/probe_x86_64.S` names it as the CFA).
pub(super) const SUSPENDED_FRAME_BYTES: usize = 24;

/// # Safety
/// As `crate::arch::load_word`.
#[inline(always)]
pub(super) unsafe fn load_word(address: usize) -> usize {
    let word: usize;
    // SAFETY: the caller's contract: `address` is 8-byte aligned, mapped and readable. A plain
    // load; no flags are changed and nothing is written.
    unsafe {
        core::arch::asm!(
            "mov {word}, qword ptr [{address}]",
            address = in(reg) address,
            word = lateout(reg) word,
            options(readonly, nostack, preserves_flags),
        )
    };
    word
}

/// # Safety
/// As `crate::arch::copy_words`.
#[inline]
pub(super) unsafe fn copy_words(src: *const usize, dst: *mut usize, words: usize) {
    // SAFETY: the caller's contract: both ranges are `words` aligned words, mapped, and apart.
    // `rep movsq` copies rcx quadwords from [rsi] to [rdi], upward: the SysV ABI (3.2.1) has
    // the direction flag clear at every call boundary, and Rust code never sets it. It
    // advances rsi and rdi and counts rcx down to 0, all declared clobbered.
    unsafe {
        core::arch::asm!(
            "rep movsq",
            inout("rcx") words => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags),
        )
    };
}

#[inline(always)]
pub(super) fn current_stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads rsp into a register; no memory or flags are touched.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

/// The thread pointer: on x86_64 Linux, `fs:0` holds the address of the thread control block
/// itself (the TCB's self pointer, which the psABI's TLS model requires).
#[cfg_attr(not(feature = "hooks"), allow(dead_code))]
pub(super) fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: a load from the TCB's first word, which every thread of a glibc process has.
    unsafe {
        core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
}

/// Where the executable's static TLS block lies: TLS variant II (x86_64 psABI), the blocks sit
/// below the thread pointer, the executable's nearest, `size` rounded up to `align` below it.
/// The range is widened by one `align` downwards (where other modules' blocks, also
/// thread-local, begin) to absorb the first-byte offset the loader may add.
#[cfg_attr(not(feature = "hooks"), allow(dead_code))]
pub(super) fn executable_tls_block(size: usize, align: usize) -> core::ops::Range<usize> {
    let tp = thread_pointer();
    let align = align.max(1);
    let below = size.div_ceil(align) * align + align;
    tp.saturating_sub(below)..tp
}

#[inline(always)]
pub(super) fn prefetch(addr: usize) {
    // SAFETY: `prefetcht0` is a hint: it reads nothing architecturally and never faults, even
    // for an unmapped address, so any value of `addr` is sound. SSE is in the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
}

pub(super) fn valgrind_client_request(default: usize, args: &[usize; 6]) -> usize {
    let result: usize;
    // SAFETY: this is valgrind.h's x86_64 client-request sequence. The rotations of rdi total
    // 128 bits, so rdi ends as it began, and `xchg rbx, rbx` changes nothing: on hardware the
    // block only clobbers flags. Under Valgrind it reads `args` (alive for the whole block)
    // through rax and leaves the result in rdx.
    unsafe {
        core::arch::asm!(
            "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51",
            "xchg rbx, rbx",
            inout("rdx") default => result,
            in("rax") args.as_ptr(),
            options(nostack),
        );
    }
    result
}
