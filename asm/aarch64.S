/*
 * greenweave context switch: aarch64, AAPCS64, ELF, GNU assembler.
 *
 * Two routines, declared in src/arch/aarch64.rs:
 *
 *   Transfer greenweave_switch(StackPointer to, usize data);
 *       Saves the caller's callee-saved registers (x19-x28, fp, lr, d8-d15) on the current
 *       stack, moves to the stack `to` (saved by an earlier switch, or built by init_stack in
 *       Rust), restores that side's registers and returns *there*, handing it
 *       Transfer { from: the stack pointer just saved, data } in x0:x1. A 16-byte composite
 *       of two words is returned in x0 and x1 by AAPCS64 (section 6.9), so the word travels in
 *       registers and no memory is shared between the two sides.
 *
 *   greenweave_trampoline
 *       Never called: init_stack makes it the lr of a fresh stack, so the first switch to that
 *       stack "returns" into it. It calls entry(from, data, arg), which must never return.
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
 * The switch ends in `ret` (through x30). On x86_64 an indirect jump measured 4.9x faster than
 * `ret` for a ping-pong (see x86_64.S); the same reasoning may hold for aarch64's return-stack
 * predictor, but under qemu timing means nothing and no aarch64 hardware was available to
 * measure `br x30` against `ret`, so this keeps the conventional, balanced form until someone
 * measures on hardware (BENCHMARKS.md lists it as open).
 */

    .text

    .globl  greenweave_switch
    .hidden greenweave_switch               // internal to the crate: no PLT indirection
    .type   greenweave_switch, %function
    .p2align 4
greenweave_switch:
    .cfi_startproc                          // on entry CFA = sp, return address in x30
    hint    #34                             // BTI c landing pad (a nop without BTI)
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

    mov     x2, sp                          // Transfer.from = where this side's frame is
    mov     sp, x0                          // become the other side: same frame layout, so
                                            // the CFI above still describes it

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
    ret                                     // branch to x30, the other side's resume address
    .cfi_endproc
    .size   greenweave_switch, .-greenweave_switch


    .globl  greenweave_trampoline
    .hidden greenweave_trampoline
    .type   greenweave_trampoline, %function
    .p2align 4
greenweave_trampoline:
    .cfi_startproc
    .cfi_undefined x30                      // no caller: unwinders stop here, cleanly
    hint    #34                             // BTI c landing pad, harmless when reached by ret
                                            // x0 = Transfer.from (arg 1), x1 = data (arg 2)
    mov     x2, x20                         // arg 3: the entry's argument, from the frame
    blr     x19                             // entry(from, data, arg); sp is 16-byte aligned
    brk     #0x1                            // entry never returns; trap instead of falling
                                            // off the stack if it ever did
    .cfi_endproc
    .size   greenweave_trampoline, .-greenweave_trampoline

    .section .note.GNU-stack,"",%progbits   // this object needs no executable stack
