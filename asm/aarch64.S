/*
 * greenweave context switch: aarch64, AAPCS64, ELF, GNU assembler.
 *
 * Five routines, declared in src/arch/aarch64.rs and reached only from its inline `asm!`
 * blocks, which is why they may use a register convention of their own:
 *
 *   greenweave_switch          in: x0 = to, x1 = data, lr = resume address
 *                              out: x2 = from, x1 = data
 *       Saves x19, the frame pointer and the resume address in lr on the current stack, moves
 *       to the stack `to` (saved by an earlier switch, or built by init_stack in Rust),
 *       restores that side's three and branches to *its* resume address with `br`. The other
 *       side's `asm!` block receives Transfer { from: the stack pointer just saved, data }:
 *       `from` in x2, and `data` in x1, which nothing here touches, so the word travels in a
 *       register and no memory is shared between the two sides. Entered two ways: by a `bl`
 *       in the glue (arch::resume), or by glue that sets lr to its own resume address and
 *       branches here with `b` (arch::switch).
 *
 *   greenweave_switch_ret      the same registers
 *       The same, but leaves with `ret`. Entered only by glue (arch::suspend); `to` is
 *       normally a context that entered greenweave_switch by `bl`, so this `ret` is the one
 *       that balances that `bl`.
 *
 *   greenweave_switch_last, greenweave_switch_last_ret      in: x0 = to, x1 = data
 *       The last switch of a finished fiber (arch::switch_last, arch::suspend_last): the same
 *       two exits, but nothing is saved, since that side is never resumed.
 *
 *   greenweave_trampoline
 *       Never called: init_stack makes it the lr of a fresh stack, so the first switch to that
 *       stack branches into it. It enters entry(from, data, arg), which must never return.
 *
 * Which registers are saved where. A switch must preserve, for the code that resumes, every
 * callee-saved register of AAPCS64 (6.1.1, 6.1.2): x19-x29, sp, and the low halves of v8-v15.
 * The `asm!` blocks that reach these routines declare x20-x28 clobbered (as outputs nobody
 * reads) and all of v0-v31 (clobber_abi("C")), and the compiler saves them itself, in the
 * enclosing function's prologue, only if that function uses them and once per call of it,
 * however many switches it makes. x19 and x29 cannot be declared clobbered (LLVM reserves
 * them: a base pointer and the frame pointer), so these routines save those two by hand, and
 * lr, which holds the resume address. x18, the platform register, is never touched.
 *
 * The saved frame, 32 bytes, identical on every suspended stack (lowest address first):
 *
 *       sp + 0    x29 x30   fresh stack: fp = 0 (ends frame-record walks), lr = trampoline
 *       sp + 16   x19 (pad) fresh stack: x19 = arg, the entry function's third argument
 *
 * A fresh stack also has the entry's address in the 16 bytes above that frame (init_stack).
 *
 * Because both sides of a switch have this same layout, the CFI below stays true for every
 * instruction, including after sp moves: a debugger that stops mid-switch unwinds whichever
 * stack sp is on. Above the frame is the frame of the function whose `asm!` block switched;
 * its own CFI says where its prologue saved x20-x28 and d8-d15 for its caller, so an unwinder
 * walks a suspended stack to its root with every callee-saved register recovered.
 *
 * FPCR (rounding mode, flush-to-zero) is NOT switched: it is per-OS-thread state shared by
 * every coroutine on the thread, as Go and corosensei treat it. Code that changes it must
 * restore it before it suspends (ARCHITECTURE.md, "Floating-point control state").
 *
 * Why two exits: the return-address predictor, which aarch64 cores keep just as x86_64 ones do
 * (`bl`/`blr` push it, `ret` pops it; `br` and `b` leave it alone). The same scheme as
 * x86_64.S (see there for the measurements) keeps it balanced:
 *   - arch::switch (greenlets): glue branches in with `b`, greenweave_switch leaves with
 *     `br x30`: the predictor is untouched.
 *   - arch::resume: `bl greenweave_switch`, which leaves with `br` into the coroutine.
 *   - arch::suspend: glue branches into greenweave_switch_ret, whose `ret` goes back to the
 *     resumer's `bl`, as predicted.
 * Under qemu timing means nothing and no aarch64 hardware was available, so the benefit on
 * aarch64 is reasoned from x86_64's, not measured (BENCHMARKS.md lists it as open). The resume
 * sites reached by `br x30` carry no BTI landing pad, so this object is not marked
 * BTI-compatible (it has no .note.gnu.property) and must not be. For the same reason the two
 * switch routines carry no landing pad of their own: they are reached only by direct `bl`
 * and `b`, which BTI does not check.
 */

// Stores the frame pointer, lr (the resume address) and x19 in a new 32-byte frame on the
// current stack, with CFI that describes each save.
    .macro SAVE_RESERVED
    stp     x29, x30, [sp, #-32]!           // frame pointer and resume address; sp stays
    .cfi_def_cfa_offset 32                  // 16-byte aligned (AAPCS64 6.4.5.1): CFA = sp + 32
    .cfi_offset x29, -32
    .cfi_offset x30, -24
    str     x19, [sp, #16]                  // callee-saved, LLVM-reserved: base pointer;
    .cfi_offset x19, -16                    // the frame is now complete
    .endm

// Records this side's sp as Transfer.from (in x2) and moves onto the stack `to` (x0).
    .macro SWAP_STACKS
    mov     x2, sp                          // Transfer.from = where this side's frame is
    mov     sp, x0                          // become the other side: same frame layout, so
                                            // the CFI above still describes it
    .endm

// Loads the other side's x19, frame pointer and resume address (into lr) and pops its frame;
// x1 (data) and x2 (from) pass through untouched.
    .macro RESTORE_RESERVED
    ldr     x19, [sp, #16]                  // restore the other side's reserved registers
    ldp     x29, x30, [sp], #32             // its fp, its resume address into lr, and pop
    .cfi_def_cfa_offset 0                   // the frame: sp is the other side's again
    .cfi_restore x19
    .cfi_restore x29
    .cfi_restore x30
    .endm

    .text

    .globl  greenweave_switch
    .hidden greenweave_switch               // internal to the crate: no PLT indirection
    .type   greenweave_switch, %function
    .p2align 4
greenweave_switch:
    .cfi_startproc                          // on entry CFA = sp, resume address in x30
    SAVE_RESERVED
    SWAP_STACKS
    RESTORE_RESERVED
    br      x30                             // to the other side's resume address, without
                                            // popping the return-address predictor (above)
    .cfi_endproc
    .size   greenweave_switch, .-greenweave_switch


    .globl  greenweave_switch_ret
    .hidden greenweave_switch_ret
    .type   greenweave_switch_ret, %function
    .p2align 4
greenweave_switch_ret:
    .cfi_startproc                          // on entry CFA = sp, resume address in x30
    SAVE_RESERVED
    SWAP_STACKS
    RESTORE_RESERVED
    ret                                     // to x30, predicted from the resumer's `bl`
    .cfi_endproc
    .size   greenweave_switch_ret, .-greenweave_switch_ret


// The last switch of a fiber that has finished (in: x0 = to, x1 = data). Its side is never
// resumed, so nothing is saved: it moves to `to`, restores that side as the routines above
// do, and hands it Transfer.from = the abandoned stack pointer (never null; a receiver of a
// last word does not use it). Entered by a plain `b`: until sp moves there is no caller to
// unwind to.
    .macro LEAVE_FOR_GOOD
    .cfi_undefined x30                      // the finished side has nothing to unwind to
    mov     x2, sp                          // Transfer.from: not null, never used
    mov     sp, x0                          // become the other side: a saved frame, so
    .cfi_def_cfa_offset 32                  // CFA = sp + 32, as after SAVE_RESERVED
    .cfi_offset x29, -32
    .cfi_offset x30, -24
    .cfi_offset x19, -16
    RESTORE_RESERVED
    .endm

    .globl  greenweave_switch_last
    .hidden greenweave_switch_last
    .type   greenweave_switch_last, %function
    .p2align 4
greenweave_switch_last:
    .cfi_startproc
    LEAVE_FOR_GOOD
    br      x30                             // leaves the return-address predictor alone, as
                                            // greenweave_switch does
    .cfi_endproc
    .size   greenweave_switch_last, .-greenweave_switch_last


    .globl  greenweave_switch_last_ret
    .hidden greenweave_switch_last_ret
    .type   greenweave_switch_last_ret, %function
    .p2align 4
greenweave_switch_last_ret:
    .cfi_startproc
    LEAVE_FOR_GOOD
    ret                                     // to the resumer's `bl`, as predicted
    .cfi_endproc
    .size   greenweave_switch_last_ret, .-greenweave_switch_last_ret


    .globl  greenweave_trampoline
    .hidden greenweave_trampoline
    .type   greenweave_trampoline, %function
    .p2align 4
greenweave_trampoline:
    .cfi_startproc
    .cfi_undefined x30                      // no caller: unwinders stop here, cleanly
    hint    #38                             // BTI jc landing pad: it is reached by `br`
    mov     x0, x2                          // arg 1: Transfer.from; x1 = data is arg 2
    mov     x2, x19                         // arg 3: the entry's argument, from the frame
    ldr     x16, [sp]                       // the entry, which init_stack stored just above
                                            // the frame, in the register BTI lets `br` use
                                            // to reach a `bti c` function start
    adr     x30, 1f                         // a return address inside this routine, so an
                                            // unwinder reaching it stops at the CFI above
    br      x16                             // enter entry(from, data, arg) without `blr`: it
                                            // leaves by a switch whose `ret`, if any, must
                                            // match the resumer's `bl`, not one made here;
                                            // sp is 16-byte aligned (init_stack)
1:  brk     #0x1                            // entry never returns; trap instead of falling
                                            // off the stack if it ever did
    .cfi_endproc
    .size   greenweave_trampoline, .-greenweave_trampoline

    .section .note.GNU-stack,"",%progbits   // this object needs no executable stack
