/*
 * greenweave context switch: x86_64, System V AMD64 ABI, ELF, GNU assembler (AT&T syntax).
 *
 * Five routines, declared in src/arch/x86_64.rs and reached only from its inline `asm!`
 * blocks, which is why they may use a register convention of their own:
 *
 *   greenweave_switch          in: rdi = to, rdx = data      out: rax = from, rdx = data
 *       Saves rbx and rbp on the current stack, below the resume address that is already
 *       there, moves to the stack `to` (saved by an earlier switch, or built by init_stack in
 *       Rust), restores that side's rbx and rbp and jumps to *its* resume address. The other
 *       side's `asm!` block receives Transfer { from: the stack pointer just saved, data }:
 *       `from` in rax, and `data` in rdx, which nothing here touches, so the word travels in a
 *       register and no memory is shared between the sides. Entered two ways: by a `call` in
 *       the glue (arch::resume), or by glue that pushes its own resume address and jumps here
 *       (arch::switch).
 *
 *   greenweave_switch_ret      the same registers
 *       The same, but leaves with `ret`. Entered only by glue that pushed its resume address
 *       and jumped (arch::suspend); `to` is normally a context that entered greenweave_switch
 *       by `call`, so this `ret` is the one that balances that `call`.
 *
 *   greenweave_switch_last, greenweave_switch_last_ret      in: rdi = to, rdx = data
 *       The last switch of a finished fiber (arch::switch_last, arch::suspend_last): the same
 *       two exits, but nothing is saved, since that side is never resumed.
 *
 *   greenweave_trampoline
 *       Never called: init_stack makes it the resume address of a fresh stack, so the first
 *       switch to that stack jumps into it. It enters entry(from, data, arg), which must never
 *       return.
 *
 * Which registers are saved where. A switch must preserve, for the code that resumes, every
 * callee-saved register of SysV (3.2.1, figure 3.4): rbx, rbp, r12-r15 (and rsp, which the
 * switch itself restores). The `asm!` blocks that reach these routines declare r12-r15
 * clobbered (as outputs nobody reads), and the compiler saves them itself, in the enclosing
 * function's prologue, only if that function uses them and once per call of it, however many
 * switches it makes. rbx and rbp cannot be declared clobbered (LLVM reserves them: a base
 * pointer and the frame pointer), so these routines save those two by hand. Everything else
 * is caller-saved, declared clobbered by the glue's clobber_abi("C").
 *
 * The saved frame, identical on every suspended stack (lowest address first):
 *
 *       sp + 0   rbx        fresh stack: arg, the entry function's third argument
 *       sp + 8   rbp        fresh stack: 0, ends frame-pointer walks
 *       sp + 16  resume address (pushed by a `call` or by the glue; fresh stack: trampoline)
 *
 * Because every suspended stack has this same layout, whichever routine saved it and
 * whichever resumes it, the CFI below stays true for every instruction, including after the
 * stack pointer moves: a profiler or debugger that stops mid-switch unwinds whichever stack
 * rsp is on. Above the frame is the frame of the function whose `asm!` block switched; its
 * own CFI says where its prologue saved r12-r15 for its caller, so an unwinder walks a
 * suspended stack to its root with every callee-saved register recovered. The two routines
 * differ only in how the processor will *predict* the final branch; both are correct for any
 * suspended stack.
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
 * without IBT/shadow stacks. For the same reason the routines carry no `endbr64` of their
 * own: they are reached only by direct `call` and `jmp`, which IBT does not check.
 */

/* Pushes rbp and rbx below the resume address at (%rsp), completing the saved frame, with CFI
 * that describes each save. */
    .macro SAVE_RESERVED
    pushq   %rbp                            /* callee-saved, LLVM-reserved: frame pointer */
    .cfi_adjust_cfa_offset 8                /* CFA = rsp + 16 */
    .cfi_rel_offset %rbp, 0                 /* rbp saved at rsp + 0 */
    pushq   %rbx                            /* callee-saved, LLVM-reserved: base pointer; */
    .cfi_adjust_cfa_offset 8                /* the frame is now complete: CFA = rsp + 24 */
    .cfi_rel_offset %rbx, 0
    .endm

/* Records this side's stack pointer as Transfer.from and moves onto the stack `to` (rdi). */
    .macro SWAP_STACKS
    movq    %rsp, %rax                      /* Transfer.from = where this side's frame is */
    movq    %rdi, %rsp                      /* become the other side: its frame has the same */
                                            /* layout, so the CFI above still describes it */
    .endm

/* Pops the other side's rbx and rbp, leaving only its resume address at (%rsp). */
    .macro RESTORE_RESERVED
    popq    %rbx                            /* in the reverse order of the pushes above */
    .cfi_adjust_cfa_offset -8               /* CFA = rsp + 16 */
    .cfi_restore %rbx
    popq    %rbp
    .cfi_adjust_cfa_offset -8               /* CFA = rsp + 8: only the resume address is left */
    .cfi_restore %rbp
    .endm

    .text

    .globl  greenweave_switch
    .hidden greenweave_switch               /* internal to the crate: no PLT/GOT indirection */
    .type   greenweave_switch, @function
    .p2align 4                              /* 16-byte entry alignment for the decoder */
greenweave_switch:
    .cfi_startproc                          /* on entry CFA = rsp + 8, resume address at CFA-8 */
    SAVE_RESERVED
    SWAP_STACKS
    RESTORE_RESERVED
    popq    %rcx                            /* resume address into a scratch register (rcx is */
    .cfi_adjust_cfa_offset -8               /* caller-saved, and carries neither from nor data) */
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
    SAVE_RESERVED
    SWAP_STACKS
    RESTORE_RESERVED
    retq                                    /* pop the resume address and go there: predicted */
                                            /* by the entry the resumer's `call` pushed */
    .cfi_endproc
    .size   greenweave_switch_ret, .-greenweave_switch_ret


/* The last switch of a fiber that has finished (in: rdi = to, rdx = data). Its side is
 * never resumed, so nothing is saved: it moves to `to`, restores that side as the routines
 * above do, and hands it Transfer.from = the abandoned stack pointer (never null; a receiver
 * of a last word does not use it). Entered by a plain `jmp`, with no resume address pushed:
 * until the stack pointer moves there is no caller to unwind to. */
    .macro LEAVE_FOR_GOOD
    .cfi_undefined %rip                     /* the finished side has nothing to unwind to */
    movq    %rsp, %rax                      /* Transfer.from: not null, never used */
    movq    %rdi, %rsp                      /* become the other side: a saved frame, so */
    .cfi_def_cfa_offset 24                  /* CFA = rsp + 24, as after SAVE_RESERVED */
    .cfi_offset %rbx, -24
    .cfi_offset %rbp, -16
    .cfi_offset %rip, -8
    RESTORE_RESERVED
    .endm

    .globl  greenweave_switch_last
    .hidden greenweave_switch_last
    .type   greenweave_switch_last, @function
    .p2align 4
greenweave_switch_last:
    .cfi_startproc
    LEAVE_FOR_GOOD
    popq    %rcx                            /* resume address into a scratch register, and */
    .cfi_adjust_cfa_offset -8               /* jump: the return-stack buffer is untouched, as */
    .cfi_register %rip, %rcx                /* in greenweave_switch */
    jmpq    *%rcx
    .cfi_endproc
    .size   greenweave_switch_last, .-greenweave_switch_last


    .globl  greenweave_switch_last_ret
    .hidden greenweave_switch_last_ret
    .type   greenweave_switch_last_ret, @function
    .p2align 4
greenweave_switch_last_ret:
    .cfi_startproc
    LEAVE_FOR_GOOD
    retq                                    /* to the resumer's call site, as predicted */
    .cfi_endproc
    .size   greenweave_switch_last_ret, .-greenweave_switch_last_ret


    .globl  greenweave_trampoline
    .hidden greenweave_trampoline
    .type   greenweave_trampoline, @function
    .p2align 4
greenweave_trampoline:
    .cfi_startproc
    .cfi_undefined %rip                     /* no caller: unwinders stop here, cleanly */
    endbr64                                 /* landing pad: the switch reaches it by an */
                                            /* indirect jmp; rsp is 16-byte aligned here */
                                            /* (init_stack) and (%rsp) holds the entry */
    movq    %rax, %rdi                      /* arg 1: Transfer.from, the resumer's stack */
    movq    %rdx, %rsi                      /* arg 2: Transfer.data, the first word sent */
    movq    %rbx, %rdx                      /* arg 3: the entry's argument, from the frame */
    leaq    1f(%rip), %rcx                  /* a return address inside this routine, so an */
    pushq   %rcx                            /* unwinder reaching it stops at the CFI above; */
                                            /* rsp is now 8 mod 16, as after a `call` (3.2.2) */
    jmpq    *8(%rsp)                        /* enter entry(from, data, arg), stored just above */
                                            /* the pushed address, without a `call`: it leaves */
                                            /* by arch::suspend, whose `ret` must match the */
                                            /* resumer's call, not one made here */
1:  ud2                                     /* entry never returns; trap instead of falling */
                                            /* off the stack if it ever did */
    .cfi_endproc
    .size   greenweave_trampoline, .-greenweave_trampoline

    .section .note.GNU-stack,"",@progbits   /* this object needs no executable stack */
