/*
 * greenweave context switch: x86_64, System V AMD64 ABI, ELF, GNU assembler (AT&T syntax).
 *
 * Three routines, declared in src/arch/x86_64.rs:
 *
 *   Transfer greenweave_switch(StackPointer to, usize data);
 *       Saves the callee-saved registers on the current stack, below the resume address that
 *       is already there, moves to the stack `to` (saved by an earlier switch, or built by
 *       init_stack in Rust), restores that side's registers and jumps to *its* resume address,
 *       handing it Transfer { from: the stack pointer just saved, data } in rax:rdx. A 16-byte
 *       struct of two INTEGER-class words is returned in rax:rdx by the SysV ABI (section
 *       3.2.3), so the word travels in registers and no memory is shared between the sides.
 *       Entered two ways: by an ordinary `call` (arch::resume), or by Rust glue that pushes
 *       its own resume address and jumps here (arch::switch).
 *
 *   Transfer greenweave_switch_ret(StackPointer to, usize data);
 *       The same, but leaves with `ret`. Entered only by glue that pushed its resume address
 *       and jumped (arch::suspend); `to` is normally a context that entered greenweave_switch
 *       by `call`, so this `ret` is the one that balances that `call`.
 *
 *   greenweave_trampoline
 *       Never called: init_stack makes it the resume address of a fresh stack, so the first
 *       switch to that stack jumps into it. It enters entry(from, data, arg), which must never
 *       return.
 *
 * The saved frame, identical on every suspended stack (lowest address first):
 *
 *       sp + 0   r15
 *       sp + 8   r14
 *       sp + 16  r13        fresh stack: arg, the entry function's third argument
 *       sp + 24  r12        fresh stack: entry, the function the trampoline enters
 *       sp + 32  rbx
 *       sp + 40  rbp        fresh stack: 0, ends frame-pointer walks
 *       sp + 48  resume address (pushed by a `call` or by the glue; fresh stack: trampoline)
 *
 * Because every suspended stack has this same layout, whichever routine saved it and
 * whichever resumes it, the CFI below stays true for every instruction, including after the
 * stack pointer moves: a profiler or debugger that stops mid-switch unwinds whichever stack
 * rsp is on. The two routines differ only in how the processor will *predict* the final
 * branch; both are correct for any suspended stack.
 *
 * Floating-point control state (MXCSR control bits, x87 control word) is NOT switched: it is
 * treated as per-OS-thread state shared by every coroutine on the thread, as Go and corosensei
 * do. Saving it costs an stmxcsr/ldmxcsr pair (ldmxcsr is microcoded and slow) on every switch
 * for a setting almost no program changes. Code that changes the rounding mode must restore it
 * before it suspends (ARCHITECTURE.md, "Floating-point control state").
 *
 * Why two exits: the return-stack buffer. A `ret` is predicted from a hardware stack of the
 * addresses that `call`s pushed. A symmetric switch that is entered by `call` and leaves by
 * `ret` always mispredicts (the buffer holds this side's call site, the `ret` goes to the
 * other side's): measured 15.9 ns per raw round trip against 3.27 ns for an indirect jump.
 * Entering by `call` and leaving by `jmp` predicts the switch itself but leaves one stale
 * entry per switch, and every later `ret` of the caller's frames mispredicts (about 8 ns per
 * non-inlined frame). So greenweave never unbalances the buffer:
 *   - arch::switch (greenlets): glue pushes its address and jumps in, greenweave_switch
 *     jumps out. No `call`, no `ret`: the buffer is untouched.
 *   - arch::resume (coroutine resume, scheduler running a task): `call greenweave_switch`,
 *     which jumps out into the coroutine. The buffer now holds the resumer's call site.
 *   - arch::suspend (the coroutine suspends or finishes): glue jumps into
 *     greenweave_switch_ret, whose `ret` goes to that call site, exactly as predicted.
 * The indirect jumps are predicted by the branch-target predictor from their history.
 * Resume sites are reached by indirect jumps without an `endbr64`, so this object must not be
 * marked CET-compatible (it is not: it has no .note.gnu.property), and the process runs
 * without IBT/shadow stacks.
 */

/* Pushes the six callee-saved registers (SysV 3.2.1) below the resume address at (%rsp),
 * completing the saved frame, with CFI that describes each save. */
    .macro SAVE_CALLEE_SAVED
    pushq   %rbp                            /* callee-saved: frame pointer */
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
    .endm

/* Records this side's stack pointer as Transfer.from and moves onto the stack `to` (rdi). */
    .macro SWAP_STACKS
    movq    %rsp, %rax                      /* Transfer.from = where this side's frame is */
    movq    %rdi, %rsp                      /* become the other side: its frame has the same */
                                            /* layout, so the CFI above still describes it */
    .endm

/* Pops the other side's callee-saved registers, leaving only its resume address at (%rsp),
 * and puts the word in Transfer.data. */
    .macro RESTORE_CALLEE_SAVED
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
    .endm

    .text

    .globl  greenweave_switch
    .hidden greenweave_switch               /* internal to the crate: no PLT/GOT indirection */
    .type   greenweave_switch, @function
    .p2align 4                              /* 16-byte entry alignment for the decoder */
greenweave_switch:
    .cfi_startproc                          /* on entry CFA = rsp + 8, resume address at CFA-8 */
    endbr64                                 /* CET/IBT landing pad (a nop without CET) */
    SAVE_CALLEE_SAVED
    SWAP_STACKS
    RESTORE_CALLEE_SAVED
    popq    %rcx                            /* resume address into a scratch register (rcx is */
    .cfi_adjust_cfa_offset -8               /* caller-saved, and not a return register) */
    .cfi_register %rip, %rcx                /* CFA = rsp; the return address now lives in rcx */
    jmpq    *%rcx                           /* go there by indirect jump: the return-stack */
                                            /* buffer is neither pushed nor popped (above) */
    .cfi_endproc
    .size   greenweave_switch, .-greenweave_switch


    .globl  greenweave_switch_ret
    .hidden greenweave_switch_ret
    .type   greenweave_switch_ret, @function
    .p2align 4
greenweave_switch_ret:
    .cfi_startproc                          /* on entry CFA = rsp + 8, resume address at CFA-8 */
    endbr64                                 /* landing pad, as above */
    SAVE_CALLEE_SAVED
    SWAP_STACKS
    RESTORE_CALLEE_SAVED
    retq                                    /* pop the resume address and go there: predicted */
                                            /* by the entry the resumer's `call` pushed */
    .cfi_endproc
    .size   greenweave_switch_ret, .-greenweave_switch_ret


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
    leaq    1f(%rip), %rcx                  /* a return address inside this routine, so an */
    pushq   %rcx                            /* unwinder reaching it stops at the CFI above; */
                                            /* rsp is now 8 mod 16, as after a `call` (3.2.2) */
    jmpq    *%r12                           /* enter entry(from, data, arg) without a `call`: */
                                            /* it leaves by arch::suspend, whose `ret` must */
                                            /* match the resumer's call, not one made here */
1:  ud2                                     /* entry never returns; trap instead of falling */
                                            /* off the stack if it ever did */
    .cfi_endproc
    .size   greenweave_trampoline, .-greenweave_trampoline

    .section .note.GNU-stack,"",@progbits   /* this object needs no executable stack */
