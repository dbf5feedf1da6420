//! x86_64 (System V) half of [`crate::arch`]: how Rust enters the switch, and the layout of a
//! fresh stack.
//!
//! The switch itself is `asm/x86_64.S`; this file enters it (by a call, or by three
//! instructions of glue that push a resume address and jump) and writes the frame that the
//! first switch to a new stack pops. Fresh stack, highest address at the top:
//!
//! ```text
//!   top ->  +----------------------+  16-byte aligned
//!           | (not written)        |  top - 8   padding, keeps the entry's stack aligned
//!           | (not written)        |  top - 16
//!           | trampoline           |  top - 24  resume address: the first switch jumps here
//!           | 0  (rbp)             |  top - 32  ends frame-pointer walks
//!           | (not written) (rbx)  |  top - 40
//!           | entry (r12)          |  top - 48
//!           | arg   (r13)          |  top - 56
//!           | (not written) (r14)  |  top - 64
//!   sp  ->  | (not written) (r15)  |  top - 72
//!           +----------------------+
//! ```
//!
//! After the switch pops seven words, rsp = top - 16, which is 16-byte aligned as the SysV ABI
//! requires where a `call` would be; the trampoline pushes a return address and jumps, so the
//! entry starts with rsp = 8 mod 16, as after a call.
//!
//! Only the four words the trampoline and unwinders read are written (this is on the path of
//! every coroutine's creation). The switch loads the other three register slots into rbx, r14
//! and r15, whose values nothing reads: the trampoline passes on only rax, rdx and r13, and
//! the entry, which saves them if it uses them, never returns to restore them. The padding is
//! never read at all.

use super::{EntryFn, StackPointer, Transfer};

unsafe extern "C" {
    /// Defined in `asm/x86_64.S`: saves this side, resumes `to` by an indirect jump.
    fn greenweave_switch(to: StackPointer, data: usize) -> Transfer;
    /// Defined in `asm/x86_64.S`: the same, resuming `to` by `ret`. Entered only by a jump.
    fn greenweave_switch_ret();
    /// Defined in `asm/x86_64.S`; never called directly, only jumped into.
    fn greenweave_trampoline();
}

/// Enters `$routine` by a jump, having pushed the address right after the jump as this side's
/// resume address, exactly where a `call` would have put it but without a return-stack entry.
macro_rules! jump_into {
    ($routine:path, $to:expr, $data:expr) => {{
        let from: *mut u8;
        let data: usize;
        // SAFETY (for the caller to uphold): `$to` is a suspended context. The routine saves
        // rbx, rbp and r12-r15 and restores them when this side is resumed, so only the
        // caller-saved registers are clobbered (clobber_abi). The push is undone by whichever
        // routine resumes us, which pops the resume address, so rsp is unchanged; the block
        // may push because it does not claim `nostack`.
        core::arch::asm!(
            "lea rax, [rip + 2f]", // this side's resume address: the label below
            "push rax",            // saved as a call would save it (frame layout in the .S)
            "jmp {routine}",       // into the switch; execution comes back at 2:
            "2:",
            routine = sym $routine,
            in("rdi") $to.0.as_ptr(),
            in("rsi") $data,
            out("rax") from,
            out("rdx") data,
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
    // SAFETY: forwarded; see `jump_into`.
    unsafe { jump_into!(greenweave_switch, to, data) }
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
    // SAFETY: forwarded; see `jump_into`.
    unsafe { jump_into!(greenweave_switch_ret, to, data) }
}

/// Bytes of the initial frame, including the two words of alignment padding.
pub(super) const INITIAL_FRAME_BYTES: usize = 72;

/// # Safety
/// `top` is 16-byte aligned and the 72 bytes below it are writable and unused.
#[inline]
pub(super) unsafe fn init_stack(top: *mut u8, entry: EntryFn, arg: usize) -> *mut u8 {
    // SAFETY: the caller guarantees the 72 bytes below `top` are ours; `top` is 16-aligned so
    // every slot is 8-aligned, enough for usize.
    unsafe {
        let sp = top.sub(INITIAL_FRAME_BYTES);
        let slot = |index: usize| sp.cast::<usize>().add(index);
        slot(2).write(arg); // r13: third argument of the entry
        slot(3).write(entry as *const () as usize); // r12: the function the trampoline enters
        slot(5).write(0); // rbp: a null frame pointer ends frame-pointer walks
        slot(6).write(greenweave_trampoline as *const () as usize); // resume address
        sp
    }
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
