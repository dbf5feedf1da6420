/*
 * greenweave stack probe: aarch64, AAPCS64, ELF, GNU assembler.
 *
 *   void greenweave_probe_parked(const void *frame, void (*probe)(void *), void *arg)
 *       An ordinary C function (x0, x1, x2; returns nothing). Calls probe(arg) on the
 *       caller's own stack, but while the call lasts this routine's CFI claims that its caller
 *       is the suspended context whose saved frame is at `frame` (see aarch64.S: x29 at
 *       frame + 0, the resume address (x30) at frame + 8, x19 at frame + 16, CFA = frame + 32).
 *       An unwinder started inside `probe` (std::backtrace) therefore walks probe's frames,
 *       this one, and then the suspended stack, from the parked switch point down to its root
 *       (the trampoline's `.cfi_undefined x30` ends the walk), without that stack being
 *       resumed or written. Used by runtime::dump.
 *
 * As in probe_x86_64.S: the lie covers only the `blr` (an unwinder looks up a caller's CFI at
 * its return address minus one), `probe` must not unwind, and `frame` must stay suspended and
 * unchanged for the whole call (the owning OS thread calls this, nothing else runs meanwhile).
 */

    .text

    .globl  greenweave_probe_parked
    .hidden greenweave_probe_parked         // internal to the crate: no PLT indirection
    .type   greenweave_probe_parked, %function
    .p2align 4
greenweave_probe_parked:
    .cfi_startproc                          // on entry CFA = sp, return address in x30
    hint    #34                             // BTI landing pad (`bti c`): may be called by blr
    stp     x29, x30, [sp, #-32]!           // frame record; sp stays 16-byte aligned
    .cfi_def_cfa_offset 32                  // (AAPCS64 6.4.5.1): CFA = sp + 32
    .cfi_offset x29, -32
    .cfi_offset x30, -24
    str     x19, [sp, #16]                  // callee-saved: we keep `frame` in it
    .cfi_offset x19, -16
    mov     x29, sp                         // our frame record, for frame-pointer walkers
    mov     x19, x0                         // x19 = the parked frame, kept across the call
    mov     x0, x2                          // probe's one argument
    .cfi_remember_state                     // from here to the call: the parked caller
    .cfi_def_cfa x19, 32                    // CFA = frame + 32: the parked side's sp once its
                                            // frame is popped, as at its resume address
    .cfi_offset x29, -32                    // its frame pointer at frame + 0
    .cfi_offset x30, -24                    // its resume address at frame + 8
    .cfi_offset x19, -16                    // its x19 at frame + 16
    blr     x1                              // probe(arg); x19 and sp come back unchanged
    .cfi_restore_state                      // the truth again: CFA = sp + 32
    ldr     x19, [sp, #16]                  // the caller's x19
    .cfi_restore x19
    ldp     x29, x30, [sp], #32             // the caller's frame pointer and return address
    .cfi_def_cfa_offset 0
    .cfi_restore x29
    .cfi_restore x30
    ret
    .cfi_endproc
    .size   greenweave_probe_parked, .-greenweave_probe_parked

    .section .note.GNU-stack,"",%progbits   // this object needs no executable stack
