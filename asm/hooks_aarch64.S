/*
 * greenweave hooks: the variadic libc entry points, aarch64, AAPCS64 as Linux uses it, ELF,
 * GNU assembler. Built only with the `hooks` cargo feature (build.rs).
 *
 *   int fcntl(int fd, int cmd, ...);            also exported as fcntl64
 *   int ioctl(int fd, unsigned long request, ...);
 *   long syscall(long number, ...);             futex calls to src/hooks/futex.rs, the rest
 *                                               to libc's syscall untouched
 *
 * Stable Rust cannot define a variadic function, so these two are defined here and branch to
 * the Rust functions greenweave_hook_fcntl(fd, cmd, arg) and greenweave_hook_ioctl(fd,
 * request, arg) (src/hooks/io.rs), which take the one optional argument as a third named
 * argument of a full word. That is exact under this ABI on Linux: AAPCS64 passes variadic
 * arguments in the same registers as named ones (only Apple's variant puts them on the
 * stack), so the caller's third argument is in x2 either way. An int passed variadically
 * leaves x2's upper half unspecified; the Rust side passes the word on unchanged and reads
 * only the low half of int arguments.
 *
 * Each routine is a tail call: no frame of its own, lr still holds the caller's return
 * address, so the Rust function returns straight to the caller.
 */

    .text

    .globl  fcntl
    .globl  fcntl64
    .type   fcntl, %function
    .type   fcntl64, %function
    .p2align 4
fcntl:
fcntl64:                                    // glibc 2.28+: the LFS name C code compiled with
                                            // _FILE_OFFSET_BITS=64 calls; the same function
    .cfi_startproc                          // CFA = sp, return address in x30
    hint    #34                             // BTI c landing pad (a nop without BTI): callers
                                            // reach it by `blr` through the PLT
    b       greenweave_hook_fcntl           // x0 = fd, w1 = cmd, x2 = the optional argument:
                                            // already where the Rust function takes them;
                                            // `b` keeps x30, so it returns to our caller
    .cfi_endproc
    .size   fcntl, .-fcntl
    .size   fcntl64, .-fcntl64


    .globl  ioctl
    .type   ioctl, %function
    .p2align 4
ioctl:
    .cfi_startproc                          // CFA = sp, return address in x30
    hint    #34                             // BTI c landing pad, as above
    b       greenweave_hook_ioctl           // x0 = fd, x1 = request, x2 = the optional
                                            // argument (a pointer for every request the
                                            // hooks read)
    .cfi_endproc
    .size   ioctl, .-ioctl


/*
 * long syscall(long number, ...)
 *
 * Every number but SYS_futex, and a futex wake while no green thread waits on any futex
 * (greenweave_futex_green_waiters == 0, read after a full barrier), branches to libc's
 * syscall with every register as the caller set it: x0 = number, x1..x6 = the arguments (Linux AAPCS64 passes variadic
 * arguments in registers like named ones). Only x16 and x17 are used on the way: the
 * intra-procedure-call scratch registers, which a call may clobber and which carry nothing
 * (AAPCS64 6.1.1).
 *
 * A futex wait (FUTEX_WAIT, FUTEX_WAIT_BITSET), or any futex call while green threads wait,
 * goes to
 *   long greenweave_hook_futex(uaddr, op, val, timeout, uaddr2, val3)
 * with the arguments moved down one register. Still a tail call: x30 holds the caller's
 * return address throughout.
 */
    .globl  syscall
    .type   syscall, %function
    .p2align 4
syscall:
    .cfi_startproc                          // CFA = sp, return address in x30
    hint    #34                             // BTI c landing pad, as above
    cmp     x0, #98                         // SYS_futex on aarch64
    b.ne    .Lsyscall_libc                  // any other system call: libc's
    and     w16, w2, #0x7f                  // the command (op's low half), without the
                                            // PRIVATE/CLOCK_REALTIME flags
    cbz     w16, .Lsyscall_futex            // FUTEX_WAIT (0): maybe a green thread's
    cmp     w16, #9                         // FUTEX_WAIT_BITSET
    b.eq    .Lsyscall_futex
    dmb     ish                             // the caller's store to the futex word must be
                                            // visible before the count is read, which a later
                                            // load may otherwise pass (src/hooks/futex_table.rs,
                                            // "No lost wake-up")
    adrp    x17, :got:greenweave_futex_green_waiters
    ldr     x17, [x17, :got_lo12:greenweave_futex_green_waiters]
    ldr     x17, [x17]                      // the one load a wake costs when no green
    cbnz    x17, .Lsyscall_futex            // thread waits: nonzero, look at the table
.Lsyscall_libc:
    adrp    x16, :got:greenweave_real_syscall
    ldr     x16, [x16, :got_lo12:greenweave_real_syscall]
    ldr     x16, [x16]                      // libc's syscall, resolved at load time
    cbz     x16, .Lsyscall_resolve          // a call before the constructors ran
    br      x16                             // tail call; BTI accepts br x16 at a `bti c`
.Lsyscall_futex:
    mov     x0, x1                          // uaddr
    mov     x1, x2                          // op
    mov     x2, x3                          // val
    mov     x3, x4                          // timeout (or val2)
    mov     x4, x5                          // uaddr2
    mov     x5, x6                          // val3
    b       greenweave_hook_futex
.Lsyscall_resolve:
    stp     x29, x30, [sp, #-80]!           // a frame: the call below clobbers x30; sp stays
    .cfi_def_cfa_offset 80                  // 16-byte aligned (AAPCS64 5.2.2.1)
    .cfi_offset x29, -80
    .cfi_offset x30, -72
    mov     x29, sp
    stp     x0, x1, [sp, #16]               // the argument registers, saved across the call
    stp     x2, x3, [sp, #32]
    stp     x4, x5, [sp, #48]
    stp     x6, x7, [sp, #64]
    bl      greenweave_resolve_real_syscall // returns libc's syscall in x0
    mov     x16, x0
    ldp     x0, x1, [sp, #16]
    ldp     x2, x3, [sp, #32]
    ldp     x4, x5, [sp, #48]
    ldp     x6, x7, [sp, #64]
    ldp     x29, x30, [sp], #80
    .cfi_def_cfa_offset 0
    .cfi_restore x29
    .cfi_restore x30
    br      x16
    .cfi_endproc
    .size   syscall, .-syscall

    .section .note.GNU-stack,"",%progbits   // this object needs no executable stack
