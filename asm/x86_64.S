/*
 * greenweave context switch: x86_64, System V AMD64 ABI, ELF, GNU assembler (AT&T syntax).
 *
 * Two routines, declared in src/arch/x86_64.rs:
 *
 *   Transfer greenweave_switch(StackPointer to, usize data);
 *       Saves the caller's callee-saved registers and resume address on the current stack,
 *       moves to the stack `to` (saved by an earlier switch, or built by init_stack in Rust),
 *       restores that side's registers and returns *there*, handing it
 *       Transfer { from: the stack pointer just saved, data } in rax:rdx. A 16-byte struct of
 *       two INTEGER-class words is returned in rax:rdx by the SysV ABI (section 3.2.3), so the
 *       word travels in registers and no memory is shared between the two sides.
 *
 *   greenweave_trampoline
 *       Never called: init_stack makes it the resume address of a fresh stack, so the first
 *       switch to that stack "returns" into it. It calls entry(from, data, arg), which must
 *       never return.
 *
 * The saved frame, identical on every suspended stack (lowest address first):
 *
 *       sp + 0   r15
 *       sp + 8   r14
 *       sp + 16  r13        fresh stack: arg, the entry function's third argument
 *       sp + 24  r12        fresh stack: entry, the function the trampoline calls
 *       sp + 32  rbx
 *       sp + 40  rbp        fresh stack: 0, ends frame-pointer walks
 *       sp + 48  resume address (pushed by the caller's `call`; fresh stack: trampoline)
 *
 * Because both sides of a switch have this same layout, the CFI below stays true for every
 * instruction, including after the stack pointer moves: a profiler or debugger that stops
 * mid-switch unwinds whichever stack rsp is on.
 *
 * Floating-point control state (MXCSR control bits, x87 control word) is NOT switched: it is
 * treated as per-OS-thread state shared by every coroutine on the thread, as Go and corosensei
 * do. Saving it costs an stmxcsr/ldmxcsr pair (ldmxcsr is microcoded and slow) on every switch
 * for a setting almost no program changes. Code that changes the rounding mode must restore it
 * before it suspends (ARCHITECTURE.md, "Floating-point control state").
 *
 * The switch resumes the other side with `pop %rcx; jmp *%rcx`, not `ret`. A `ret` is predicted
 * by the return-stack buffer, which always holds *this* side's call site, so in a ping-pong
 * every switch's `ret` mispredicts; the indirect `jmp` is predicted by the branch-target
 * predictor, which learns the alternating targets from history. Measured on the development
 * machine (x86_64, 2 cores), same binary built both ways, pinned to one core, 9 samples of
 * 20M round trips each: `ret` 15.9 ns per raw round trip, `pop; jmp` 3.27 ns (4.9x faster);
 * coroutine resume+suspend 17.0 ns vs 4.27 ns. The cost: the return-stack buffer is left
 * unbalanced (one more `call` than `ret`), and the resume site is reached by an indirect jump
 * without an `endbr64`, so this object must not be marked CET-compatible (it is not: it has no
 * .note.gnu.property), and the process runs without IBT/shadow stacks.
 */

    .text

    .globl  greenweave_switch
    .hidden greenweave_switch               /* internal to the crate: no PLT/GOT indirection */
    .type   greenweave_switch, @function
    .p2align 4                              /* 16-byte entry alignment for the decoder */
greenweave_switch:
    .cfi_startproc                          /* on entry CFA = rsp + 8, return address at CFA-8 */
    endbr64                                 /* CET/IBT landing pad (a nop without CET) */
    pushq   %rbp                            /* callee-saved (SysV 3.2.1): frame pointer */
    .cfi_adjust_cfa_offset 8                /* CFA = rsp + 16 */
    .cfi_rel_offset %rbp, 0                 /* rbp saved at rsp + 0 */
    pushq   %rbx                            /* callee-saved */
    .cfi_adjust_cfa_offset 8                /* CFA = rsp + 24 */
    .cfi_rel_offset %rbx, 0
    pushq   %r12                            /* callee-saved */
    .cfi_adjust_cfa_offset 8                /* CFA = rsp + 32 */
    .cfi_rel_offset %r12, 0
    pushq   %r13                            /* callee-saved */
    .cfi_adjust_cfa_offset 8                /* CFA = rsp + 40 */
    .cfi_rel_offset %r13, 0
    pushq   %r14                            /* callee-saved */
    .cfi_adjust_cfa_offset 8                /* CFA = rsp + 48 */
    .cfi_rel_offset %r14, 0
    pushq   %r15                            /* callee-saved; the frame is now complete */
    .cfi_adjust_cfa_offset 8                /* CFA = rsp + 56 */
    .cfi_rel_offset %r15, 0

    movq    %rsp, %rax                      /* Transfer.from = where this side's frame is */
    movq    %rdi, %rsp                      /* become the other side: its frame has the same */
                                            /* layout, so the CFI above still describes it */

    popq    %r15                            /* restore the other side's callee-saved regs, */
    .cfi_adjust_cfa_offset -8               /* in the reverse order of the pushes above */
    .cfi_restore %r15
    popq    %r14
    .cfi_adjust_cfa_offset -8
    .cfi_restore %r14
    popq    %r13
    .cfi_adjust_cfa_offset -8
    .cfi_restore %r13
    popq    %r12
    .cfi_adjust_cfa_offset -8
    .cfi_restore %r12
    popq    %rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbx
    popq    %rbp
    .cfi_adjust_cfa_offset -8               /* CFA = rsp + 8: only the resume address is left */
    .cfi_restore %rbp

    movq    %rsi, %rdx                      /* Transfer.data = the word the caller passed */
    popq    %rcx                            /* resume address into a scratch register (rcx is */
    .cfi_adjust_cfa_offset -8               /* caller-saved, and not a return register) */
    .cfi_register %rip, %rcx                /* CFA = rsp; the return address now lives in rcx */
    jmpq    *%rcx                           /* go there: an indirect jump, predicted by target */
                                            /* history rather than the return stack (above) */
    .cfi_endproc
    .size   greenweave_switch, .-greenweave_switch


    .globl  greenweave_trampoline
    .hidden greenweave_trampoline
    .type   greenweave_trampoline, @function
    .p2align 4
greenweave_trampoline:
    .cfi_startproc
    .cfi_undefined %rip                     /* no caller: unwinders stop here, cleanly */
    endbr64                                 /* landing pad: the switch reaches it by a jmp */
                                            /* rsp is 16-byte aligned here (init_stack) */
    movq    %rax, %rdi                      /* arg 1: Transfer.from, the resumer's stack */
    movq    %rdx, %rsi                      /* arg 2: Transfer.data, the first word sent */
    movq    %r13, %rdx                      /* arg 3: the entry's argument, from the frame */
    callq   *%r12                           /* entry(from, data, arg); aligned call, SysV 3.2.2 */
    ud2                                     /* entry never returns; trap instead of falling */
                                            /* off the stack if it ever did */
    .cfi_endproc
    .size   greenweave_trampoline, .-greenweave_trampoline

    .section .note.GNU-stack,"",@progbits   /* this object needs no executable stack */
