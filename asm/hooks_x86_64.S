/*
 * greenweave hooks: the variadic libc entry points, x86_64, System V AMD64 ABI, ELF, GNU
 * assembler (AT&T syntax). Built only with the `hooks` cargo feature (build.rs).
 *
 *   int fcntl(int fd, int cmd, ...);            also exported as fcntl64
 *   int ioctl(int fd, unsigned long request, ...);
 *   long syscall(long number, ...);             futex calls to src/hooks/futex.rs, the rest
 *                                               to libc's syscall untouched
 *
 * Stable Rust cannot define a variadic function, so these two are defined here and jump to
 * the Rust functions greenweave_hook_fcntl(fd, cmd, arg) and greenweave_hook_ioctl(fd,
 * request, arg) (src/hooks/io.rs), which take the one optional argument as a third named
 * argument of a full word. That is exact under this ABI: a variadic integer or pointer
 * argument is passed in the next free integer register like a named one (SysV 3.5.7), so
 * the caller's third argument is in rdx either way; al (the count of vector registers a
 * variadic caller sets) is read by no one here. An int passed variadically leaves rdx's
 * upper half unspecified; the Rust side passes the word on unchanged and reads only the low
 * half of int arguments.
 *
 * Each routine is a tail call: no frame of its own, the caller's return address stays on
 * top of the stack, so the Rust function returns straight to the caller, with rsp as the
 * caller left it (16-byte aligned minus the return address, as at any function entry).
 */

    .text

    .globl  fcntl
    .globl  fcntl64
    .type   fcntl, @function
    .type   fcntl64, @function
    .p2align 4
fcntl:
fcntl64:                                    /* glibc 2.28+: the LFS name C code compiled with
                                               _FILE_OFFSET_BITS=64 calls; the same function */
    .cfi_startproc                          /* CFA = rsp + 8, return address at rsp */
    endbr64                                 /* CET indirect-branch landing pad (a nop without
                                               CET): callers reach it through the PLT/GOT */
    jmp     greenweave_hook_fcntl@PLT       /* rdi = fd, esi = cmd, rdx = the optional
                                               argument: already where the Rust function
                                               takes its three arguments */
    .cfi_endproc
    .size   fcntl, .-fcntl
    .size   fcntl64, .-fcntl64


    .globl  ioctl
    .type   ioctl, @function
    .p2align 4
ioctl:
    .cfi_startproc                          /* CFA = rsp + 8, return address at rsp */
    endbr64                                 /* landing pad, as above */
    jmp     greenweave_hook_ioctl@PLT       /* rdi = fd, rsi = request, rdx = the optional
                                               argument (a pointer for every request the
                                               hooks read) */
    .cfi_endproc
    .size   ioctl, .-ioctl


/*
 * long syscall(long number, ...)
 *
 * Every number but SYS_futex, and a futex wake while no green thread waits on any futex
 * (greenweave_futex_green_waiters == 0, read after a full fence), jumps to libc's syscall
 * with every register as the caller set it: rdi = number, rsi, rdx, rcx, r8, r9 = the first five arguments, the sixth on
 * the stack above the return address, al = the variadic vector-register count. Only r10 and
 * r11 are used on the way: caller-saved, and no argument register (SysV 3.2.3).
 *
 * A futex wait (FUTEX_WAIT, FUTEX_WAIT_BITSET, from any thread: the Rust side asks whether it
 * runs in a green thread), or any futex call while green threads wait, goes to
 *   long greenweave_hook_futex(uaddr, op, val, timeout, uaddr2, val3)
 * with the arguments moved down one register, the sixth from the stack into r9. Still a tail
 * call: the caller's return address stays on top of the stack, so the Rust function returns
 * straight to the caller.
 */
    .globl  syscall
    .type   syscall, @function
    .p2align 4
syscall:
    .cfi_startproc                          /* CFA = rsp + 8, return address at rsp */
    endbr64                                 /* landing pad, as above */
    cmpq    $202, %rdi                      /* SYS_futex on x86_64 */
    jne     .Lsyscall_libc                  /* any other system call: libc's */
    movl    %edx, %r10d                     /* edx = op (an int: only the low half is set) */
    andl    $0x7f, %r10d                    /* the command, without PRIVATE/CLOCK_REALTIME */
    jz      .Lsyscall_futex                 /* FUTEX_WAIT (0): maybe a green thread's */
    cmpl    $9, %r10d                       /* FUTEX_WAIT_BITSET */
    je      .Lsyscall_futex
    mfence                                  /* the caller's store to the futex word must be
                                               visible before the count is read: a store may
                                               otherwise wait in the store buffer while the
                                               load below goes ahead (src/hooks/futex_table.rs,
                                               "No lost wake-up") */
    movq    greenweave_futex_green_waiters@GOTPCREL(%rip), %r11
    cmpq    $0, (%r11)                      /* the one load a wake costs when no green */
    jne     .Lsyscall_futex                 /* thread waits: nonzero, look at the table */
.Lsyscall_libc:
    movq    greenweave_real_syscall@GOTPCREL(%rip), %r11
    movq    (%r11), %r11                    /* libc's syscall, resolved at load time */
    testq   %r11, %r11
    jz      .Lsyscall_resolve               /* a call before the constructors ran */
    jmp     *%r11                           /* tail call, every argument register intact */
.Lsyscall_futex:
    movq    %rsi, %rdi                      /* uaddr */
    movq    %rdx, %rsi                      /* op */
    movq    %rcx, %rdx                      /* val */
    movq    %r8, %rcx                       /* timeout (or val2) */
    movq    %r9, %r8                        /* uaddr2 */
    movq    8(%rsp), %r9                    /* val3: the seventh C argument, on the stack
                                               just above the return address */
    jmp     greenweave_hook_futex@PLT
.Lsyscall_resolve:
    /* Save the argument registers (and al), resolve, restore, jump: seven pushes take rsp
       from 8 mod 16 (at entry) to 0 mod 16, the alignment a call needs. */
    pushq   %rdi
    .cfi_adjust_cfa_offset 8
    pushq   %rsi
    .cfi_adjust_cfa_offset 8
    pushq   %rdx
    .cfi_adjust_cfa_offset 8
    pushq   %rcx
    .cfi_adjust_cfa_offset 8
    pushq   %r8
    .cfi_adjust_cfa_offset 8
    pushq   %r9
    .cfi_adjust_cfa_offset 8
    pushq   %rax
    .cfi_adjust_cfa_offset 8
    call    greenweave_resolve_real_syscall@PLT  /* returns libc's syscall in rax */
    movq    %rax, %r11
    popq    %rax
    .cfi_adjust_cfa_offset -8
    popq    %r9
    .cfi_adjust_cfa_offset -8
    popq    %r8
    .cfi_adjust_cfa_offset -8
    popq    %rcx
    .cfi_adjust_cfa_offset -8
    popq    %rdx
    .cfi_adjust_cfa_offset -8
    popq    %rsi
    .cfi_adjust_cfa_offset -8
    popq    %rdi
    .cfi_adjust_cfa_offset -8
    jmp     *%r11
    .cfi_endproc
    .size   syscall, .-syscall

    .section .note.GNU-stack,"",%progbits   /* this object needs no executable stack */
