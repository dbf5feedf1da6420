//! aarch64 (AAPCS64) half of [`crate::arch`]: how Rust enters the switch, and the layout of a
//! fresh stack.
//!
//! The switch itself is `asm/aarch64.S`; this file enters it (by a call, or by two
//! instructions of glue that set lr and branch) and writes the 160-byte frame that the first
//! switch to a new stack loads. Fresh stack, highest address at the top:
//!
//! ```text
//!   top ->  +----------------------+  16-byte aligned
//!           | (not written)        |  top - 16   padding (sp must stay 16-aligned)
//!           | d8..d15 (not written)|  top - 80   .. top - 16
//!           | x29 = 0, x30 = tramp |  top - 96   fp ends frame-record walks; lr is where the
//!           |                      |             first switch lands
//!           | x21..x28 (not written)| top - 160  .. top - 96
//!   sp  ->  | x19 = entry, x20 = arg| top - 176
//!           +----------------------+
//! ```
//!
//! After the switch pops 160 bytes, sp = top - 16: 16-byte aligned, as AAPCS64 requires always.
//!
//! Only the four words the trampoline and unwinders read are written (this is on the path of
//! every coroutine's creation). The switch loads the other slots into x21-x28 and d8-d15, whose
//! values nothing reads: the trampoline passes on only x0, x1 and x20, and the entry, which
//! saves them if it uses them, never returns to restore them. The padding is never read.

use super::{EntryFn, StackPointer, Transfer};

unsafe extern "C" {
    /// Defined in `asm/aarch64.S`: saves this side, resumes `to` with `br`.
    fn greenweave_switch(to: StackPointer, data: usize) -> Transfer;
    /// Defined in `asm/aarch64.S`: the same, resuming `to` with `ret`. Entered only by `b`.
    fn greenweave_switch_ret();
    /// Defined in `asm/aarch64.S`; never called directly, only branched into.
    fn greenweave_trampoline();
}

/// Enters `$routine` with `b`, having set lr to the address right after it as this side's
/// resume address, as `bl` would but without pushing the return-address predictor.
macro_rules! branch_into {
    ($routine:path, $to:expr, $data:expr) => {{
        let from: *mut u8;
        let data: usize;
        // SAFETY (for the caller to uphold): `$to` is a suspended context. The routine saves
        // x19-x29, lr and d8-d15 and restores them when this side is resumed, so only the
        // caller-saved registers (and lr, which the glue sets) are clobbered; sp is unchanged
        // once we are resumed (the routine pops the frame it pushed).
        core::arch::asm!(
            "adr x30, 2f",   // this side's resume address: the label below
            "b {routine}",   // into the switch; execution comes back at 2:
            "2:",
            routine = sym $routine,
            inlateout("x0") $to.0.as_ptr() => from,
            inlateout("x1") $data => data,
            out("x30") _,
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
    // SAFETY: forwarded; see `branch_into`.
    unsafe { branch_into!(greenweave_switch, to, data) }
}

/// # Safety
/// As `crate::arch::switch`.
#[inline(always)]
pub(super) unsafe fn resume(to: StackPointer, data: usize) -> Transfer {
    // SAFETY: the routine saves every callee-saved register the ABI requires, so to the
    // compiler this is an ordinary call; `to` is a suspended context (forwarded).
    unsafe { greenweave_switch(to, data) }
}

/// # Safety
/// As `crate::arch::switch`.
#[inline(always)]
pub(super) unsafe fn suspend(to: StackPointer, data: usize) -> Transfer {
    // SAFETY: forwarded; see `branch_into`.
    unsafe { branch_into!(greenweave_switch_ret, to, data) }
}

/// Bytes of the initial frame, including the 16 bytes of padding.
pub(super) const INITIAL_FRAME_BYTES: usize = 176;

/// # Safety
/// `top` is 16-byte aligned and the 176 bytes below it are writable and unused.
#[inline]
pub(super) unsafe fn init_stack(top: *mut u8, entry: EntryFn, arg: usize) -> *mut u8 {
    // SAFETY: the caller guarantees the 176 bytes below `top` are ours; `top` is 16-aligned so
    // every slot is 8-aligned, enough for usize.
    unsafe {
        let sp = top.sub(INITIAL_FRAME_BYTES);
        let slot = |index: usize| sp.cast::<usize>().add(index);
        slot(0).write(entry as *const () as usize); // x19: the function the trampoline enters
        slot(1).write(arg); // x20: its third argument
        slot(10).write(0); // x29: a null frame pointer ends frame-record walks
        slot(11).write(greenweave_trampoline as *const () as usize); // x30: resume address
        sp
    }
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
