//! libc's own functions, for the calls greenweave makes itself and for the hooks that wrap them.
//!
//! Without the `hooks` feature these are libc's functions, re-exported. With it, the final
//! binary defines `recv`, `poll`, `close` and the rest itself (`crate::hooks`), so a call to
//! `libc::recv` would reach the hook; greenweave's own calls (the eventfd, the readiness probe,
//! non-blocking connect, the hooks' retries) must reach libc's. Each function here then calls
//! the next definition of its symbol after this object, found once with
//! `dlsym(RTLD_NEXT, name)`: libc's, or an interposer's loaded before it (Valgrind's,
//! AddressSanitizer's), which is what a plain call would have reached without the hooks.
//!
//! The addresses are resolved at load time by an `.init_array` constructor, so a caller that
//! cannot call `dlsym` (the stack-overflow handler writes its report with `write` inside a
//! signal handler) finds them ready; a call made before the constructors ran (another
//! library's constructor) resolves its symbol on the spot.
//!
//! May not: call anything but the function it names; keep state besides the addresses.

#[cfg(not(feature = "hooks"))]
pub(crate) use libc::{connect, epoll_wait, listen, poll, read, recv, recvfrom, socket, write};

/// libc's `fcntl(fd, cmd, arg)`, with the argument always passed (commands without one
/// ignore it), as the hooks' version of this function takes it.
///
/// # Safety
/// That of `fcntl`: for commands that take a pointer, `arg` must be a valid one.
#[cfg(not(feature = "hooks"))]
#[inline]
pub(crate) unsafe fn fcntl(fd: libc::c_int, cmd: libc::c_int, arg: libc::c_ulong) -> libc::c_int {
    // SAFETY: the caller upholds the command's contract.
    unsafe { libc::fcntl(fd, cmd, arg) }
}

#[cfg(feature = "hooks")]
pub(crate) use resolved::*;

#[cfg(feature = "hooks")]
mod resolved {
    use std::ffi::CStr;
    use std::sync::atomic::{AtomicPtr, Ordering};

    use libc::{
        addrinfo, c_char, c_int, c_uint, c_ulong, c_void, clockid_t, epoll_event, fd_set, hostent,
        iovec, msghdr, nfds_t, pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec,
        timeval, useconds_t,
    };

    /// Declares, for each libc function, its slot in the address table and a wrapper that
    /// calls through it with the same signature.
    macro_rules! real_functions {
        ($( $index:literal $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty; )*) => {
            /// The names looked up, NUL-terminated, by slot.
            const NAMES: &[&CStr] = &[$( {
                // The index in the list above is the slot.
                let _ = $index;
                match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(name) => name,
                    Err(_) => panic!("a function name has no interior NUL"),
                }
            } ),*];

            $(
                #[doc = concat!("libc's `", stringify!($name), "`.")]
                ///
                /// # Safety
                /// That of the libc function: the caller upholds its pointer and fd contracts.
                #[inline]
                pub(crate) unsafe fn $name($($arg: $ty),*) -> $ret {
                    // SAFETY: the slot holds the address of the next definition of this very
                    // symbol, whose C signature this wrapper repeats.
                    let function: unsafe extern "C" fn($($ty),*) -> $ret =
                        unsafe { std::mem::transmute::<*mut c_void, _>(address($index)) };
                    // SAFETY: the caller upholds the function's contract.
                    unsafe { function($($arg),*) }
                }
            )*
        };
    }

    real_functions! {
        0 read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t;
        1 write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t;
        2 readv(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t;
        3 writev(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t;
        4 recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t;
        5 recvfrom(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int,
                   addr: *mut sockaddr, addrlen: *mut socklen_t) -> ssize_t;
        6 recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
        7 send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t;
        8 sendto(fd: c_int, buf: *const c_void, len: size_t, flags: c_int,
                 addr: *const sockaddr, addrlen: socklen_t) -> ssize_t;
        9 sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
        10 connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
        11 accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
        12 accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
        13 poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int;
        14 ppoll(fds: *mut pollfd, nfds: nfds_t, timeout: *const timespec,
               sigmask: *const sigset_t) -> c_int;
        15 select(nfds: c_int, readfds: *mut fd_set, writefds: *mut fd_set,
                  exceptfds: *mut fd_set, timeout: *mut timeval) -> c_int;
        16 nanosleep(req: *const timespec, rem: *mut timespec) -> c_int;
        17 clock_nanosleep(clock: clockid_t, flags: c_int, req: *const timespec,
                           rem: *mut timespec) -> c_int;
        18 usleep(usec: useconds_t) -> c_int;
        19 sleep(seconds: c_uint) -> c_uint;
        20 close(fd: c_int) -> c_int;
        21 getaddrinfo(node: *const c_char, service: *const c_char, hints: *const addrinfo,
                       res: *mut *mut addrinfo) -> c_int;
        22 gethostbyname(name: *const c_char) -> *mut hostent;
        23 setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void,
                      len: socklen_t) -> c_int;
        24 socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int;
        25 dup(fd: c_int) -> c_int;
        26 dup2(old: c_int, new: c_int) -> c_int;
        27 dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
        28 pread64(fd: c_int, buf: *mut c_void, count: size_t, offset: libc::off64_t) -> ssize_t;
        29 epoll_wait(epfd: c_int, events: *mut epoll_event, maxevents: c_int,
                      timeout: c_int) -> c_int;
        30 epoll_pwait(epfd: c_int, events: *mut epoll_event, maxevents: c_int, timeout: c_int,
                       sigmask: *const sigset_t) -> c_int;
        // glibc 2.35 and later; before, `resolve` falls back to `epoll_pwait2_syscall`.
        31 epoll_pwait2(epfd: c_int, events: *mut epoll_event, maxevents: c_int,
                        timeout: *const timespec, sigmask: *const sigset_t) -> c_int;
        32 listen(fd: c_int, backlog: c_int) -> c_int;
    }

    // Two more slots follow those: the variadic functions, which the macro cannot type; the
    // wrappers below call them with the one argument every command of theirs takes, if any.
    const FCNTL: usize = NAMES.len();
    const IOCTL: usize = NAMES.len() + 1;
    const SLOTS: usize = NAMES.len() + 2;

    /// libc's `fcntl(fd, cmd, arg)`. Commands without an argument ignore `arg`.
    ///
    /// # Safety
    /// That of `fcntl`: for commands that take a pointer, `arg` must be a valid one.
    #[inline]
    pub(crate) unsafe fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
        // SAFETY: the slot holds libc's `fcntl`, declared `int fcntl(int, int, ...)`.
        let function: unsafe extern "C" fn(c_int, c_int, ...) -> c_int =
            unsafe { std::mem::transmute::<*mut c_void, _>(address(FCNTL)) };
        // SAFETY: the caller upholds the command's contract.
        unsafe { function(fd, cmd, arg) }
    }

    /// libc's `ioctl(fd, request, arg)`.
    ///
    /// # Safety
    /// That of `ioctl`: `arg` must be what the request expects.
    #[inline]
    pub(crate) unsafe fn ioctl(fd: c_int, request: c_ulong, arg: c_ulong) -> c_int {
        // SAFETY: the slot holds libc's `ioctl`, declared `int ioctl(int, unsigned long, ...)`.
        let function: unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int =
            unsafe { std::mem::transmute::<*mut c_void, _>(address(IOCTL)) };
        // SAFETY: the caller upholds the request's contract.
        unsafe { function(fd, request, arg) }
    }

    /// The name of slot `slot`'s symbol.
    fn symbol_name(slot: usize) -> &'static CStr {
        match slot {
            FCNTL => c"fcntl",
            IOCTL => c"ioctl",
            _ => NAMES[slot],
        }
    }

    /// The resolved addresses, by slot; null until resolved.
    static ADDRESSES: [AtomicPtr<c_void>; SLOTS] =
        [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];

    /// The address of the next definition of slot `slot`'s symbol.
    #[inline]
    fn address(slot: usize) -> *mut c_void {
        let address = ADDRESSES[slot].load(Ordering::Relaxed);
        if address.is_null() {
            return resolve(slot);
        }
        address
    }

    /// Looks the symbol up and remembers it (two threads may both look it up; they find the
    /// same address).
    #[cold]
    fn resolve(slot: usize) -> *mut c_void {
        let name = symbol_name(slot);
        // SAFETY: `name` is NUL-terminated; RTLD_NEXT is a pseudo-handle dlsym accepts.
        let mut address = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        if address.is_null() && name == c"epoll_pwait2" {
            // A glibc older than 2.35 (RHEL 9's 2.34) has no wrapper: make the system call.
            address = epoll_pwait2_syscall as *mut c_void;
        }
        if address.is_null() {
            missing(name);
        }
        ADDRESSES[slot].store(address, Ordering::Relaxed);
        address
    }

    /// `epoll_pwait2` where libc has no wrapper for it: the system call itself, as glibc's
    /// wrapper makes it (the kernel's sigset size, `errno` set on failure).
    ///
    /// # Safety
    /// That of `epoll_pwait2`.
    unsafe extern "C" fn epoll_pwait2_syscall(
        epfd: c_int,
        events: *mut epoll_event,
        maxevents: c_int,
        timeout: *const timespec,
        sigmask: *const sigset_t,
    ) -> c_int {
        /// The kernel's signal set size (`_NSIG / 8`), not `size_of::<sigset_t>()` (128).
        const KERNEL_SIGSET_SIZE: libc::c_long = 8;
        // SAFETY: the caller upholds epoll_pwait2's contract; `syscall` sets errno on failure.
        unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                epfd,
                events,
                maxevents,
                timeout,
                sigmask,
                KERNEL_SIGSET_SIZE,
            ) as c_int
        }
    }

    /// No definition after ours: nothing to call. Says so on stderr (with libc's `write`,
    /// reached by its raw system call, since the table is what failed) and aborts.
    #[cold]
    fn missing(name: &CStr) -> ! {
        let message = format!(
            "greenweave hooks: dlsym(RTLD_NEXT, \"{}\") found no definition of the function \
             after greenweave's; the hooks cannot reach libc (is the binary static?)\n",
            name.to_string_lossy()
        );
        // SAFETY: writes a live buffer to stderr.
        unsafe {
            libc::syscall(libc::SYS_write, 2, message.as_ptr(), message.len());
        }
        std::process::abort();
    }

    /// Resolves every slot, at load time.
    extern "C" fn resolve_all() {
        for (slot, address) in ADDRESSES.iter().enumerate() {
            if address.load(Ordering::Relaxed).is_null() {
                resolve(slot);
            }
        }
    }

    /// Runs `resolve_all` as a constructor of the binary (before `main`).
    #[used]
    #[unsafe(link_section = ".init_array")]
    static RESOLVE_AT_LOAD: extern "C" fn() = resolve_all;
}
