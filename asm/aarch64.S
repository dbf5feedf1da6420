/*
 * greenweave context switch: aarch64, AAPCS64, ELF, GNU assembler.
 *
 * Three routines, declared in src/arch/aarch64.rs:
 *
 *   Transfer greenweave_switch(StackPointer to, usize data);
 *       Saves the callee-saved registers (x19-x28, fp, d8-d15) and the resume address in lr
 *       on the current stack, moves to the stack `to` (saved by an earlier switch, or built by
 *       init_stack in Rust), restores that side's registers and branches to *its* resume
 *       address with `br`, handing it Transfer { from: the stack pointer just saved, data } in
 *       x0:x1. A 16-byte composite of two words is returned in x0 and x1 by AAPCS64 (section
 *       6.9), so the word travels in registers and no memory is shared between the two sides.
 *       Entered two ways: by an ordinary `bl` (arch::resume), or by Rust glue that sets lr to
 *       its own resume address and branches here with `b` (arch::switch).
 *
 *   Transfer greenweave_switch_ret(StackPointer to, usize data);
 *       The same, but leaves with `ret`. Entered only by glue (arch::suspend); `to` is
 *       normally a context that entered greenweave_switch by `bl`, so this `ret` is the one
 *       that balances that `bl`.
 *
 *   greenweave_trampoline
 *       Never called: init_stack makes it the lr of a fresh stack, so the first switch to that
 *       stack branches into it. It enters entry(from, data, arg), which must never return.
 *
 * The saved frame, 160 bytes, identical on every suspended stack (lowest address first):
 *
 *       sp + 0    x19 x20   fresh stack: x19 = entry, x20 = arg
 *       sp + 16   x21 x22
 *       sp + 32   x23 x24
 *       sp + 48   x25 x26
 *       sp + 64   x27 x28
 *       sp + 80   x29 x30   fresh stack: fp = 0 (ends frame-record walks), lr = trampoline
 *       sp + 96   d8  d9    only the low 64 bits of v8-v15 are callee-saved (AAPCS64 6.1.2)
 *       sp + 112  d10 d11
 *       sp + 128  d12 d13
 *       sp + 144  d14 d15
 *
 * Because both sides of a switch have this same layout, the CFI below stays true for every
 * instruction, including after sp moves: a debugger that stops mid-switch unwinds whichever
 * stack sp is on.
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
 * BTI-compatible (it has no .note.gnu.property) and must not be.
 */

// Stores the callee-saved registers and lr (the resume address) in a new 160-byte frame on
// the current stack, with CFI that describes each save.
    .macro SAVE_CALLEE_SAVED
    sub     sp, sp, #160                    // room for the frame; sp stays 16-byte aligned
    .cfi_def_cfa_offset 160                 // CFA = sp + 160
    stp     x19, x20, [sp, #0]              // callee-saved general registers (AAPCS64 6.1.1)
    .cfi_offset x19, -160
    .cfi_offset x20, -152
    stp     x21, x22, [sp, #16]
    .cfi_offset x21, -144
    .cfi_offset x22, -136
    stp     x23, x24, [sp, #32]
    .cfi_offset x23, -128
    .cfi_offset x24, -120
    stp     x25, x26, [sp, #48]
    .cfi_offset x25, -112
    .cfi_offset x26, -104
    stp     x27, x28, [sp, #64]
    .cfi_offset x27, -96
    .cfi_offset x28, -88
    stp     x29, x30, [sp, #80]             // frame pointer and the resume address (lr)
    .cfi_offset x29, -80
    .cfi_offset x30, -72
    stp     d8, d9, [sp, #96]               // low halves of v8-v15 are callee-saved
    .cfi_offset d8, -64
    .cfi_offset d9, -56
    stp     d10, d11, [sp, #112]
    .cfi_offset d10, -48
    .cfi_offset d11, -40
    stp     d12, d13, [sp, #128]
    .cfi_offset d12, -32
    .cfi_offset d13, -24
    stp     d14, d15, [sp, #144]            // the frame is now complete
    .cfi_offset d14, -16
    .cfi_offset d15, -8
    .endm

// Records this side's sp as Transfer.from (in x2 for now) and moves onto the stack `to` (x0).
    .macro SWAP_STACKS
    mov     x2, sp                          // Transfer.from = where this side's frame is
    mov     sp, x0                          // become the other side: same frame layout, so
                                            // the CFI above still describes it
    .endm

// Loads the other side's callee-saved registers and resume address (into lr) and pops its
// frame; Transfer.from goes to x0, and x1 (data) passes through untouched.
    .macro RESTORE_CALLEE_SAVED
    ldp     x19, x20, [sp, #0]              // restore the other side's callee-saved registers
    ldp     x21, x22, [sp, #16]
    ldp     x23, x24, [sp, #32]
    ldp     x25, x26, [sp, #48]
    ldp     x27, x28, [sp, #64]
    ldp     x29, x30, [sp, #80]             // its fp, and its resume address into lr
    ldp     d8, d9, [sp, #96]
    ldp     d10, d11, [sp, #112]
    ldp     d12, d13, [sp, #128]
    ldp     d14, d15, [sp, #144]
    add     sp, sp, #160                    // pop the frame: sp is the other side's again
    .cfi_def_cfa_offset 0
    .cfi_restore x19
    .cfi_restore x20
    .cfi_restore x21
    .cfi_restore x22
    .cfi_restore x23
    .cfi_restore x24
    .cfi_restore x25
    .cfi_restore x26
    .cfi_restore x27
    .cfi_restore x28
    .cfi_restore x29
    .cfi_restore x30
    .cfi_restore d8
    .cfi_restore d9
    .cfi_restore d10
    .cfi_restore d11
    .cfi_restore d12
    .cfi_restore d13
    .cfi_restore d14
    .cfi_restore d15
    mov     x0, x2                          // Transfer.from in x0 (x1 = data, passed through)
    .endm

    .text

    .globl  greenweave_switch
    .hidden greenweave_switch               // internal to the crate: no PLT indirection
    .type   greenweave_switch, %function
    .p2align 4
greenweave_switch:
    .cfi_startproc                          // on entry CFA = sp, resume address in x30
    hint    #34                             // BTI c landing pad (a nop without BTI)
    SAVE_CALLEE_SAVED
    SWAP_STACKS
    RESTORE_CALLEE_SAVED
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
    hint    #34                             // BTI c landing pad (a nop without BTI)
    SAVE_CALLEE_SAVED
    SWAP_STACKS
    RESTORE_CALLEE_SAVED
    ret                                     // to x30, predicted from the resumer's `bl`
    .cfi_endproc
    .size   greenweave_switch_ret, .-greenweave_switch_ret


    .globl  greenweave_trampoline
    .hidden greenweave_trampoline
    .type   greenweave_trampoline, %function
    .p2align 4
greenweave_trampoline:
    .cfi_startproc
    .cfi_undefined x30                      // no caller: unwinders stop here, cleanly
    hint    #38                             // BTI jc landing pad: it is reached by `br`
                                            // x0 = Transfer.from (arg 1), x1 = data (arg 2)
    mov     x2, x20                         // arg 3: the entry's argument, from the frame
    mov     x16, x19                        // the entry, in the register BTI lets `br` use
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
