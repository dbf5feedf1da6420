//! x86_64 (System V) half of [`crate::arch`]: the layout of a fresh stack.
//!
//! The switch itself is `asm/x86_64.S`; this file only writes the frame that the first switch
//! to a new stack pops. Fresh stack, highest address at the top:
//!
//! ```text
//!   top ->  +----------------------+  16-byte aligned
//!           | 0                    |  top - 8   padding, keeps the trampoline's call aligned
//!           | 0                    |  top - 16
//!           | trampoline           |  top - 24  resume address: the first `ret` lands here
//!           | 0  (rbp)             |  top - 32  ends frame-pointer walks
//!           | 0  (rbx)             |  top - 40
//!           | entry (r12)          |  top - 48
//!           | arg   (r13)          |  top - 56
//!           | 0  (r14)             |  top - 64
//!   sp  ->  | 0  (r15)             |  top - 72
//!           +----------------------+
//! ```
//!
//! After the switch pops seven words, rsp = top - 16, which is 16-byte aligned as the SysV ABI
//! requires at the trampoline's `call`.

use super::EntryFn;

unsafe extern "C" {
    /// Defined in `asm/x86_64.S`; never called directly, only returned into.
    fn greenweave_trampoline();
}

/// Bytes of the initial frame, including the two words of alignment padding.
pub(super) const INITIAL_FRAME_BYTES: usize = 72;

/// # Safety
/// `top` is 16-byte aligned and the 72 bytes below it are writable and unused.
pub(super) unsafe fn init_stack(top: *mut u8, entry: EntryFn, arg: usize) -> *mut u8 {
    let frame: [usize; 9] = [
        0,                                           // r15
        0,                                           // r14
        arg,                                         // r13: third argument of the entry
        entry as *const () as usize,                 // r12: the function the trampoline calls
        0,                                           // rbx
        0,                                           // rbp: a null frame pointer ends fp walks
        greenweave_trampoline as *const () as usize, // resume address
        0,                                           // padding
        0,                                           // padding
    ];
    // SAFETY: the caller guarantees the 72 bytes below `top` are ours; `top` is 16-aligned so
    // `sp` is 8-aligned, enough for usize.
    unsafe {
        let sp = top.sub(INITIAL_FRAME_BYTES);
        sp.cast::<[usize; 9]>().write(frame);
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
