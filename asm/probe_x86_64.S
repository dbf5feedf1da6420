/*
 * greenweave stack probe: x86_64, System V AMD64 ABI, ELF, GNU assembler (AT&T syntax).
 *
 *   void greenweave_probe_parked(const void *frame, void (*probe)(void *), void *arg)
 *       An ordinary C function (rdi, rsi, rdx; returns nothing). Calls probe(arg) on the
 *       caller's own stack, but while the call lasts this routine's CFI claims that its caller
 *       is the suspended context whose saved frame is at `frame` (see x86_64.S: rbx at
 *       frame + 0, rbp at frame + 8, resume address at frame + 16). An unwinder started inside
 *       `probe` (std::backtrace) therefore walks probe's frames, this one, and then the
 *       suspended stack, from the parked switch point down to its root (the trampoline's
 *       `.cfi_undefined %rip` ends the walk), without that stack being resumed or written:
 *       the suspended side's memory is only read, by the unwinder. Used by runtime::dump.
 *
 * The lie lasts only for the `call` instruction (an unwinder looks up a caller's CFI at its
 * return address minus one); everywhere else the CFI describes this frame truthfully, so the
 * routine's own prologue and epilogue unwind into the real caller. Nothing unwinds *through*
 * the lie back into the real caller: `probe` must not unwind (it is called from Rust through
 * an `extern "C"` function that aborts on a panic).
 *
 * `frame` must be the saved frame of a suspended context that stays suspended, unchanged, for
 * the whole call: runtime::dump calls this only on the OS thread that owns the context, where
 * nothing else runs meanwhile.
 */

    .text

    .globl  greenweave_probe_parked
    .hidden greenweave_probe_parked         /* internal to the crate: no PLT/GOT indirection */
    .type   greenweave_probe_parked, @function
    .p2align 4
greenweave_probe_parked:
    .cfi_startproc                          /* on entry CFA = rsp + 8, return address at CFA-8 */
    endbr64                                 /* landing pad: reached by a Rust call, which may */
                                            /* be indirect */
    pushq   %rbp                            /* callee-saved: saved, then our frame pointer */
    .cfi_adjust_cfa_offset 8                /* CFA = rsp + 16 */
    .cfi_rel_offset %rbp, 0
    movq    %rsp, %rbp                      /* rbp = this frame, survives the call (callee-saved) */
    .cfi_def_cfa_register %rbp              /* CFA = rbp + 16 */
    pushq   %r12                            /* callee-saved: we keep `frame` in it */
    .cfi_offset %r12, -24
    subq    $8, %rsp                        /* rsp = CFA - 32: 16-byte aligned for the call */
                                            /* (3.2.2: rsp + 8 aligned at a callee's entry) */
    movq    %rdi, %r12                      /* r12 = the parked frame, kept across the call */
    movq    %rdx, %rdi                      /* probe's one argument */
    .cfi_remember_state                     /* from here to the call: the parked caller */
    .cfi_def_cfa %r12, 24                   /* CFA = frame + 24: the parked side's rsp once */
                                            /* its frame is popped, as at its resume address */
    .cfi_offset %rbx, -24                   /* its rbx at frame + 0 */
    .cfi_offset %rbp, -16                   /* its rbp at frame + 8 */
    .cfi_offset %rip, -8                    /* "return address": its resume address */
    .cfi_same_value %r12                    /* the parked function saved its own r12 (its */
                                            /* `asm!` block clobbers r12), its CFI says where */
    callq   *%rsi                           /* probe(arg); rbp and r12 come back unchanged */
    .cfi_restore_state                      /* the truth again: CFA = rbp + 16 */
    addq    $8, %rsp
    popq    %r12                            /* the caller's r12 */
    .cfi_restore %r12
    popq    %rbp                            /* the caller's rbp */
    .cfi_def_cfa %rsp, 8                    /* CFA = rsp + 8: only the return address left */
    .cfi_restore %rbp
    retq
    .cfi_endproc
    .size   greenweave_probe_parked, .-greenweave_probe_parked

    .section .note.GNU-stack,"",@progbits   /* this object needs no executable stack */
