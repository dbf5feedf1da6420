/*
 * greenweave hooks: the variadic libc entry points, x86_64, System V AMD64 ABI, ELF, GNU
 * assembler (AT&T syntax). Built only with the `hooks` cargo feature (build.rs).
 *
 *   int fcntl(int fd, int cmd, ...);            also exported as fcntl64
 *   int ioctl(int fd, unsigned long request, ...);
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

    .section .note.GNU-stack,"",%progbits   /* this object needs no executable stack */
