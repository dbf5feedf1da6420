//! aarch64 (AAPCS64) half of [`crate::arch`]: how Rust enters the switch, and the layout of a
//! fresh stack.
//!
//! The switch itself is `asm/aarch64.S`, which saves and restores only x19, the frame pointer
//! and lr (the registers LLVM reserves or the switch needs). This file enters it from `asm!`
//! blocks (a `bl`, or two instructions that set lr and branch) that declare every other
//! register clobbered, x20-x28 and v8-v15 included: the compiler then saves those in the
//! enclosing function's prologue, once, and only the ones that function uses, instead of the
//! switch saving all twenty on every switch. It also writes the frame that the first switch
//! to a new stack loads. Fresh stack, highest address at the top:
//!
//! ```text
//!   top ->  +----------------------+  16-byte aligned
//!           | (not written)        |  top - 8    padding (sp must stay 16-aligned)
//!           | entry                |  top - 16   the function the trampoline enters
//!           | (not written)        |  top - 24   padding of the switch's frame
//!           | x19 = arg            |  top - 32   the entry's third argument
//!           | x30 = trampoline     |  top - 40   lr: where the first switch lands
//!   sp  ->  | x29 = 0              |  top - 48   ends frame-record walks
//!           +----------------------+
//! ```
//!
//! After the switch pops its 32 bytes, sp = top - 16: 16-byte aligned, as AAPCS64 requires
//! always, and the entry is at sp, where the trampoline reads it. The padding is never read.
//!
//! The first switch leaves x20-x28 and d8-d15 as the resumer had them: the entry saves them if
//! it uses them, and never returns to restore them, and the resumer declared them clobbered.

use super::{EntryFn, StackPointer, Transfer};

unsafe extern "C" {
    // Not functions of the C ABI: each is reached only from the `asm!` blocks below, with the
    // registers `asm/aarch64.S` documents. Declared as functions so `sym` can name them.
    /// Saves this side, resumes `to` with `br`.
    fn greenweave_switch();
    /// The same, resuming `to` with `ret`.
    fn greenweave_switch_ret();
    /// The last switch of a finished fiber: resumes `to` by an indirect jump, saving nothing.
    fn greenweave_switch_last();
    /// The same, resuming `to` by `ret`.
    fn greenweave_switch_last_ret();
    /// Never entered by Rust: the lr of a fresh stack.
    fn greenweave_trampoline();
}

/// Runs `$enter` (instructions that enter `$routine` with this side's resume address in lr,
/// the label `2:` after them) with `$to` in x0 and `$data` in x1, and returns the [`Transfer`]
/// this side is resumed with.
macro_rules! switch_by {
    ($routine:path, $to:expr, $data:expr, $($enter:literal),+) => {{
        let from: *mut u8;
        let data: usize;
        // SAFETY (for the caller to uphold): `$to` is a suspended context. The routine saves
        // x19, x29 and lr and restores them when this side is resumed; every other register
        // is declared clobbered: the caller-saved ones and all of v0-v31 (clobber_abi: its
        // list includes lr, which the glue sets) and x20-x28, which whatever runs before we
        // are resumed may change. x18 is neither used nor clobbered. sp is unchanged once we
        // are resumed (the routine pops the frame it pushed); the block may use the stack
        // because it does not claim `nostack`.
        core::arch::asm!(
            $($enter,)+
            routine = sym $routine,
            in("x0") $to.0.as_ptr(),
            inlateout("x1") $data => data,
            lateout("x2") from,
            lateout("x20") _, lateout("x21") _, lateout("x22") _, lateout("x23") _,
            lateout("x24") _, lateout("x25") _, lateout("x26") _, lateout("x27") _,
            lateout("x28") _,
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
            "adr x30, 2f", // this side's resume address: the label below
            "b {routine}", // into the switch, without pushing the return-address predictor
            "2:"           // execution comes back here
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
            "bl {routine}", // sets lr to this side's resume address and pushes the predictor
            "2:"            // entry that the other side's `ret` (arch::suspend) comes back by
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
            "adr x30, 2f", // this side's resume address: the label below
            "b {routine}", // into the switch that leaves by `ret`
            "2:"           // execution comes back here
        )
    }
}

/// Enters `$routine`, one of the last switches, by a plain `b`: nothing comes back here.
macro_rules! leave_by {
    ($routine:path, $to:expr, $data:expr) => {
        // SAFETY (for the caller to uphold): `$to` is a suspended context, and this one is
        // never resumed, so nothing needs saving and nothing is clobbered that anyone reads.
        core::arch::asm!(
            "b {routine}", // into the switch, with no resume address: this side is over
            routine = sym $routine,
            in("x0") $to.0.as_ptr(),
            in("x1") $data,
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

/// Bytes of the frame every switch saves at a suspended stack's pointer: x29 and x30, then x19 and its padding word
/// (see the table at the top of the assembly file).
pub(super) const SAVED_FRAME_BYTES: usize = 32;

/// Bytes of the initial frame: the switch's 32 and the entry's 16-byte slot above it.
pub(super) const INITIAL_FRAME_BYTES: usize = 48;

/// AAPCS64 defines no red zone: a function keeps nothing below the stack pointer (a signal
/// frame may be pushed right below it at any instruction).
pub(super) const RED_ZONE_BYTES: usize = 0;

/// # Safety
/// `top` is 16-byte aligned and the 48 bytes below it are writable and unused.
#[inline]
pub(super) unsafe fn init_stack(top: *mut u8, entry: EntryFn, arg: usize) -> *mut u8 {
    // SAFETY: the caller guarantees the 48 bytes below `top` are ours; `top` is 16-aligned so
    // every slot is 8-aligned, enough for usize.
    unsafe {
        let sp = top.sub(INITIAL_FRAME_BYTES);
        let slot = |index: usize| sp.cast::<usize>().add(index);
        slot(0).write(0); // x29: a null frame pointer ends frame-record walks
        slot(1).write(greenweave_trampoline as *const () as usize); // x30: resume address
        slot(2).write(arg); // x19: the entry's third argument
        slot(4).write(entry as *const () as usize); // the function the trampoline enters
        sp
    }
}

/// The interrupted pc, saved in `mcontext_t::pc`.
///
/// # Safety
/// `context` is the `ucontext_t` the kernel passed the running signal handler.
pub(super) unsafe fn interrupted_program_counter(context: *const libc::ucontext_t) -> usize {
    // SAFETY: the kernel's context for this handler, valid while it runs.
    unsafe { (*context).uc_mcontext.pc as usize }
}

/// Where a suspended context's resume address lies in its saved frame (`asm/aarch64.S`: x29
/// at `frame + 0`, x30, the resume address, at `frame + 8`, x19 at `frame + 16`).
pub(super) const SUSPENDED_RESUME_ADDRESS_OFFSET: usize = 8;

/// The suspended side's stack pointer at its resume address, as an offset from its saved
/// frame: the frame's 32 bytes popped (`asm/probe_aarch64.S` names it as the CFA).
pub(super) const SUSPENDED_FRAME_BYTES: usize = 32;

/// # Safety
/// As `crate::arch::load_word`.
#[inline(always)]
pub(super) unsafe fn load_word(address: usize) -> usize {
    let word: usize;
    // SAFETY: the caller's contract: `address` is 8-byte aligned, mapped and readable. A plain
    // load (`ldr` of a doubleword); no flags are changed and nothing is written.
    unsafe {
        core::arch::asm!(
            "ldr {word}, [{address}]",
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
    // A word at a time, upward: `ldr`/`str` with post-index advance each pointer by 8, `subs`
    // counts down and sets the flags that `b.ne` tests (flags are declared clobbered by not
    // saying `preserves_flags`); a count of 0 skips the loop (`cbz`).
    unsafe {
        core::arch::asm!(
            "cbz {n}, 2f",
            "1:",
            "ldr {w}, [{s}], #8",
            "str {w}, [{d}], #8",
            "subs {n}, {n}, #1",
            "b.ne 1b",
            "2:",
            n = inout(reg) words => _,
            s = inout(reg) src => _,
            d = inout(reg) dst => _,
            w = out(reg) _,
            options(nostack),
        )
    };
}

#[inline(always)]
pub(super) fn current_stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: copies sp into a register; no memory or flags are touched.
    unsafe {
        core::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

/// The thread pointer: `tpidr_el0`, which Linux sets per thread and glibc points at the
/// thread control block.
#[cfg_attr(not(feature = "hooks"), allow(dead_code))]
pub(super) fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads a system register that EL0 may read; no memory or flags are touched.
    unsafe {
        core::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nomem, nostack, preserves_flags))
    };
    tp
}

/// Where the executable's static TLS block lies: TLS variant I (AAPCS64 ELF TLS), a 16-byte
/// TCB at the thread pointer, then the executable's block at the next multiple of `align`.
/// The range is widened by one `align` to absorb the loader's alignment padding.
#[cfg_attr(not(feature = "hooks"), allow(dead_code))]
pub(super) fn executable_tls_block(size: usize, align: usize) -> core::ops::Range<usize> {
    let tp = thread_pointer();
    let align = align.max(1);
    tp..tp.saturating_add(16 + align + size)
}

#[inline(always)]
pub(super) fn prefetch(addr: usize) {
    // SAFETY: `prfm` is a hint (Arm ARM: a prefetch never generates a synchronous abort), so
    // any address is sound; it writes no register, memory or flags.
    unsafe {
        core::arch::asm!("prfm pldl1keep, [{}]", in(reg) addr, options(nostack, preserves_flags, readonly))
    };
}

pub(super) fn valgrind_client_request(default: usize, args: &[usize; 6]) -> usize {
    let result: usize;
    // SAFETY: this is valgrind.h's arm64 client-request sequence. The rotations of x12 total
    // 128 bits, so x12 ends as it began, and `orr x10, x10, x10` changes nothing: on hardware
    // the block has no effect. Under Valgrind it reads `args` (alive for the whole block)
    // through x4 and leaves the result in x3.
    unsafe {
        core::arch::asm!(
            "ror x12, x12, #3", "ror x12, x12, #13", "ror x12, x12, #51", "ror x12, x12, #61",
            "orr x10, x10, x10",
            inout("x3") default => result,
            in("x4") args.as_ptr(),
            options(nostack, preserves_flags),
        );
    }
    result
}
