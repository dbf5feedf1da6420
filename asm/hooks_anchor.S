/*
 * greenweave hooks: the anchor that links them. Built only with the `hooks` cargo feature
 * (build.rs), for x86_64 and aarch64 alike (GNU assembler; nothing here is architecture-
 * specific: 8-byte data words and section flags both assemblers read the same way).
 *
 * The hooks are ordinary global functions in the library's archive, and a linker takes an
 * archive member only when something already linked refers to one of its symbols: nothing in
 * a program refers to greenweave's `recv` (its calls to `recv` would as happily bind to
 * libc's). So build.rs links this object's archive with the `+whole-archive` modifier, which
 * makes the linker take it whatever is referred to, and this object refers to every hook,
 * which pulls their members in. Its section is marked retained ("R", SHF_GNU_RETAIN), so
 * `--gc-sections` keeps it, and with it every hook it names. The runtime needs to know none
 * of this: the hooks stay a layer above it.
 *
 * Every exported hook (`#[no_mangle]` in src/hooks, the trampolines in hooks_<arch>.S) must be
 * listed here; tests/hooks_linked.rs checks that each one is the binary's own definition.
 */

    .section .data.rel.ro.greenweave_hooks_anchor,"awR",%progbits
    .p2align 3
    .globl  greenweave_hooks_anchor
    .type   greenweave_hooks_anchor, %object
greenweave_hooks_anchor:
    .quad   pread64
    .quad   pread
    .quad   __read_chk
    .quad   __recv_chk
    .quad   __recvfrom_chk
    .quad   __poll_chk
    .quad   __ppoll_chk
    .quad   read
    .quad   write
    .quad   readv
    .quad   writev
    .quad   recv
    .quad   recvfrom
    .quad   recvmsg
    .quad   send
    .quad   sendto
    .quad   sendmsg
    .quad   connect
    .quad   accept
    .quad   accept4
    .quad   listen
    .quad   socket
    .quad   close
    .quad   dup
    .quad   dup2
    .quad   dup3
    .quad   setsockopt
    .quad   fcntl
    .quad   fcntl64
    .quad   ioctl
    .quad   syscall
    .quad   poll
    .quad   ppoll
    .quad   select
    .quad   epoll_wait
    .quad   epoll_pwait
    .quad   epoll_pwait2
    .quad   nanosleep
    .quad   clock_nanosleep
    .quad   usleep
    .quad   sleep
    .quad   getaddrinfo
    .quad   gethostbyname
    .size   greenweave_hooks_anchor, .-greenweave_hooks_anchor

    .section .note.GNU-stack,"",%progbits   /* this object needs no executable stack */
