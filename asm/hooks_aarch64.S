/*
 * greenweave hooks: the variadic libc entry points, aarch64, AAPCS64 as Linux uses it, ELF,
 * GNU assembler. Built only with the `hooks` cargo feature (build.rs).
 *
 *   int fcntl(int fd, int cmd, ...);            also exported as fcntl64
 *   int ioctl(int fd, unsigned long request, ...);
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

    .section .note.GNU-stack,"",%progbits   // this object needs no executable stack
