//! The `hooks` feature links every hook into a program that merely depends on greenweave, with
//! nothing in the runtime referring to them (`asm/hooks_anchor.S`, linked whole): each libc
//! function the hooks replace resolves, for the dynamic linker, to this executable's own
//! definition, and libc's stays reachable behind it.
#![cfg(feature = "hooks")]

use std::ffi::CString;

/// Every function the hooks define, as `asm/hooks_anchor.S` lists them.
const HOOKED: &[&str] = &[
    "pread64",
    "pread",
    "__read_chk",
    "__recv_chk",
    "__recvfrom_chk",
    "__poll_chk",
    "__ppoll_chk",
    "read",
    "write",
    "readv",
    "writev",
    "recv",
    "recvfrom",
    "recvmsg",
    "send",
    "sendto",
    "sendmsg",
    "connect",
    "accept",
    "accept4",
    "listen",
    "socket",
    "close",
    "dup",
    "dup2",
    "dup3",
    "setsockopt",
    "fcntl",
    "fcntl64",
    "ioctl",
    "syscall",
    "poll",
    "ppoll",
    "select",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "nanosleep",
    "clock_nanosleep",
    "usleep",
    "sleep",
    "getaddrinfo",
    "gethostbyname",
];

/// The base address of the object that defines the code at `address`.
fn object_of(address: *const libc::c_void) -> *mut libc::c_void {
    // SAFETY: dladdr fills a plain struct for any address; all zeroes is a valid start.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is live and writable.
    assert_ne!(
        unsafe { libc::dladdr(address, &mut info) },
        0,
        "dladdr knows {address:?}"
    );
    info.dli_fbase
}

#[test]
fn every_hook_is_defined_by_the_executable_itself_and_libcs_is_still_behind_it() {
    // A program that uses greenweave at all (here, one green thread) links the crate, and with
    // it the anchor.
    assert_eq!(
        greenweave::run(|| greenweave::spawn(|| 1).join().unwrap()),
        1
    );
    let executable = object_of(
        every_hook_is_defined_by_the_executable_itself_and_libcs_is_still_behind_it as *const _,
    );
    for name in HOOKED {
        let symbol = CString::new(*name).unwrap();
        // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope in load order,
        // the executable first.
        let first = unsafe { libc::dlsym(libc::RTLD_DEFAULT, symbol.as_ptr()) };
        assert!(!first.is_null(), "{name} is defined somewhere");
        assert_eq!(
            object_of(first),
            executable,
            "{name} resolves to the executable's hook, not to a shared library's"
        );
        // SAFETY: as above; RTLD_NEXT searches the objects after this executable.
        let behind = unsafe { libc::dlsym(libc::RTLD_NEXT, symbol.as_ptr()) };
        assert!(
            !behind.is_null() || *name == "epoll_pwait2",
            "libc's {name} is still there"
        );
        if !behind.is_null() {
            assert_ne!(
                object_of(behind),
                executable,
                "libc's {name} is another object's"
            );
        }
    }
}
