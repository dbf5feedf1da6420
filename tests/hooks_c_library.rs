//! The `hooks` feature and shared C libraries (libcurl, libpq): a C library the program loads
//! calls libc's blocking functions through the dynamic linker, which binds them to the hooks,
//! because the executable exports the functions it defines that libc also defines. So a C
//! library's blocking call parks only its green thread, as the program's own calls do.
//!
//! The library is `tests/c/blocking_calls.c`, compiled for the target when the tests start (on
//! an x86_64 host testing aarch64, with the cross compiler: qemu-user runs the test binary but
//! hands the `execve` of the host's compiler to the host) and loaded with `dlopen`.
#![cfg(feature = "hooks")]

mod common;

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_long, c_ulong, c_void};
use std::io::{ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::Duration;

use greenweave::thread::yield_now;

/// How long a C `recv` may wait (`SO_RCVTIMEO`) before it gives up with `EAGAIN`: not a timing
/// assertion, a guard that turns a C call that blocked the OS thread (the one green thread that
/// would send it the data can then never run) into a wrong order of events, not a hang.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// How long the C library's sleeps sleep: long enough that the other green thread, already
/// runnable, gets its turn first however loaded the machine is.
const SLEEP_MS: c_int = 100;

unsafe extern "C" {
    /// Not in the `libc` crate; the hooks define it.
    fn gethostbyname(name: *const c_char) -> *mut c_void;
}

/// `long c_recv(int fd, void *buffer, unsigned long length)`: recv's result, or -errno.
type CRecv = unsafe extern "C" fn(c_int, *mut c_void, c_ulong) -> c_long;

/// `int c_nanosleep_ms(int ms)` and `int c_poll_sleep_ms(int ms)`: 0, or -errno.
type CSleep = unsafe extern "C" fn(c_int) -> c_int;

/// The C library's functions, looked up once.
struct CLibrary {
    /// `c_recv`: `recv(fd, buffer, length, 0)`.
    recv: CRecv,
    /// `c_nanosleep_ms`: `nanosleep` for that many milliseconds.
    nanosleep_ms: CSleep,
    /// `c_poll_sleep_ms`: `poll(NULL, 0, ms)`, the C idiom for a sleep.
    poll_sleep_ms: CSleep,
    /// `c_hooked_names` and `c_hooked_functions`: each function the hooks define, and the
    /// address the dynamic linker bound the library's references to it to.
    bound: Vec<(String, usize)>,
}

/// The C library, compiled and loaded by the first test that needs it.
fn library() -> &'static CLibrary {
    static LIBRARY: OnceLock<CLibrary> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let symbol = load(compile());
        // SAFETY: `c_hooked_count` is a `const unsigned long`, and the two arrays hold that
        // many entries: function addresses, and NUL-terminated string literals.
        let bound = unsafe {
            let count = *(symbol(c"c_hooked_count") as *const c_ulong) as usize;
            let names = symbol(c"c_hooked_names") as *const *const c_char;
            let functions = symbol(c"c_hooked_functions") as *const usize;
            (0..count)
                .map(|i| {
                    let name = CStr::from_ptr(*names.add(i)).to_str().unwrap().to_owned();
                    (name, *functions.add(i))
                })
                .collect()
        };
        // SAFETY: each symbol is a function defined with this C signature in blocking_calls.c.
        unsafe {
            CLibrary {
                recv: std::mem::transmute::<*mut c_void, CRecv>(symbol(c"c_recv")),
                nanosleep_ms: std::mem::transmute::<*mut c_void, CSleep>(symbol(c"c_nanosleep_ms")),
                poll_sleep_ms: std::mem::transmute::<*mut c_void, CSleep>(symbol(
                    c"c_poll_sleep_ms",
                )),
                bound,
            }
        }
    })
}

/// Loads the shared library at `path` (then removes the file: the mapping stays) and returns
/// a lookup of its symbols, which fails the test for a missing one.
fn load(path: PathBuf) -> impl Fn(&CStr) -> *mut c_void {
    let path_c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; the library's constructors are the compiler's defaults.
    let handle = unsafe { libc::dlopen(path_c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(
        !handle.is_null(),
        "dlopen {}: {}",
        path.display(),
        dlerror()
    );
    std::fs::remove_file(&path).unwrap();
    move |name: &CStr| {
        // SAFETY: a live handle (never closed) and a NUL-terminated name.
        let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
        assert!(!address.is_null(), "dlsym {name:?}: {}", dlerror());
        address
    }
}

/// Compiles `tests/c/blocking_calls.c` into a shared library for the target, in the target's
/// temporary directory, under a name of its own (the tests of both architectures may run at
/// once), and returns its path.
fn compile() -> PathBuf {
    // Without _FORTIFY_SOURCE (some distributions' compilers define it), which turns calls
    // into buffers of known size into their `__*_chk` variants: `fortified_library` has those.
    compile_library("blocking_calls", "-U_FORTIFY_SOURCE")
}

/// Compiles `tests/c/<name>.c`, with `fortify` (`-U_FORTIFY_SOURCE` or `-D_FORTIFY_SOURCE=2`),
/// into a shared library as `compile` says.
fn compile_library(name: &str, fortify: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let output = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "lib{name}-{}-{}.so",
        std::env::consts::ARCH,
        std::process::id()
    ));
    // The cross compiler first, for an x86_64 host testing aarch64; a native aarch64 host has
    // only `cc`.
    let compilers: &[&str] = if cfg!(target_arch = "aarch64") {
        &["aarch64-linux-gnu-gcc", "cc"]
    } else {
        &["cc"]
    };
    for compiler in compilers {
        let mut command = Command::new(compiler);
        command
            .args(["-shared", "-fPIC", "-O2", fortify, "-Wall", "-Werror"])
            .arg("-o")
            .arg(&output)
            .arg(&source);
        let status = common::spawn_watch::spawn(&mut command).and_then(|mut child| child.wait());
        match status {
            Ok(status) if status.success() => return output,
            Ok(status) => panic!(
                "{compiler} failed to compile {}: {status}",
                source.display()
            ),
            Err(error) if error.kind() == ErrorKind::NotFound => continue,
            Err(error) => panic!("cannot run {compiler}: {error}"),
        }
    }
    panic!("no C compiler found (tried {compilers:?})");
}

/// `long c_fortified_recv(int fd, unsigned long length)`: the first byte received, 0 at end of
/// stream, or -errno; a length above 16 fails glibc's fortify check.
type CFortifiedRecv = unsafe extern "C" fn(c_int, c_ulong) -> c_long;

/// `int c_fortified_poll(int fd, unsigned long count, int timeout_ms)`: poll's result, or -errno.
type CFortifiedPoll = unsafe extern "C" fn(c_int, c_ulong, c_int) -> c_int;

/// `tests/c/fortified_calls.c`, built with `-D_FORTIFY_SOURCE=2`: its calls are `__recv_chk`
/// and `__poll_chk`.
fn fortified_library() -> &'static (CFortifiedRecv, CFortifiedPoll) {
    static LIBRARY: OnceLock<(CFortifiedRecv, CFortifiedPoll)> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let symbol = load(compile_library("fortified_calls", "-D_FORTIFY_SOURCE=2"));
        // SAFETY: each symbol is a function defined with this C signature in fortified_calls.c.
        unsafe {
            (
                std::mem::transmute::<*mut c_void, CFortifiedRecv>(symbol(c"c_fortified_recv")),
                std::mem::transmute::<*mut c_void, CFortifiedPoll>(symbol(c"c_fortified_poll")),
            )
        }
    })
}

/// The dynamic linker's last error message.
fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message valid until the next dl call.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "no error".to_owned();
    }
    // SAFETY: non-null, so a NUL-terminated message.
    unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

/// `-errno` as the C library returns it.
fn negative(errno: c_int) -> c_long {
    -c_long::from(errno)
}

#[test]
fn a_c_library_binds_every_hooked_function_to_the_hook_the_executable_defines() {
    // What the executable's own code calls: with the feature, the hooks.
    let hooks: [(&str, usize); 30] = [
        ("read", libc::read as *const () as usize),
        ("write", libc::write as *const () as usize),
        ("readv", libc::readv as *const () as usize),
        ("writev", libc::writev as *const () as usize),
        ("recv", libc::recv as *const () as usize),
        ("recvfrom", libc::recvfrom as *const () as usize),
        ("recvmsg", libc::recvmsg as *const () as usize),
        ("send", libc::send as *const () as usize),
        ("sendto", libc::sendto as *const () as usize),
        ("sendmsg", libc::sendmsg as *const () as usize),
        ("connect", libc::connect as *const () as usize),
        ("accept", libc::accept as *const () as usize),
        ("accept4", libc::accept4 as *const () as usize),
        ("socket", libc::socket as *const () as usize),
        ("close", libc::close as *const () as usize),
        ("dup", libc::dup as *const () as usize),
        ("dup2", libc::dup2 as *const () as usize),
        ("dup3", libc::dup3 as *const () as usize),
        ("setsockopt", libc::setsockopt as *const () as usize),
        ("fcntl", libc::fcntl as *const () as usize),
        ("ioctl", libc::ioctl as *const () as usize),
        ("poll", libc::poll as *const () as usize),
        ("ppoll", libc::ppoll as *const () as usize),
        ("select", libc::select as *const () as usize),
        ("nanosleep", libc::nanosleep as *const () as usize),
        (
            "clock_nanosleep",
            libc::clock_nanosleep as *const () as usize,
        ),
        ("usleep", libc::usleep as *const () as usize),
        ("sleep", libc::sleep as *const () as usize),
        ("getaddrinfo", libc::getaddrinfo as *const () as usize),
        ("gethostbyname", gethostbyname as *const () as usize),
    ];
    // SAFETY: a NUL-terminated name; RTLD_NOLOAD only finds the libc already loaded.
    let libc_handle =
        unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!libc_handle.is_null(), "libc.so.6 is loaded: {}", dlerror());
    let bound = &library().bound;
    assert_eq!(
        bound
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>(),
        hooks.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        "the C library lists the functions the hooks define"
    );
    for ((name, in_c_library), (_, hook)) in bound.iter().zip(hooks) {
        let name_c = CString::new(name.as_str()).unwrap();
        // SAFETY: a live handle and a NUL-terminated name.
        let libcs = unsafe { libc::dlsym(libc_handle, name_c.as_ptr()) } as usize;
        assert_ne!(libcs, 0, "libc defines {name}");
        assert_ne!(hook, libcs, "the executable defines its own {name}");
        assert_eq!(*in_c_library, hook, "the C library's {name} is the hook");
    }
}

#[test]
fn a_c_librarys_recv_parks_only_its_green_thread() {
    let recv = library().recv;
    let events = Rc::new(RefCell::new(Vec::<String>::new()));
    let log = events.clone();
    greenweave::run(move || {
        let (reader_end, mut writer_end) = UnixStream::pair().unwrap();
        reader_end.set_read_timeout(Some(HANG_GUARD)).unwrap();
        let reader_log = log.clone();
        let reader = greenweave::spawn(move || {
            reader_log.borrow_mut().push("C recv called".to_owned());
            let mut byte = 0u8;
            // SAFETY: a live socket and a one-byte buffer.
            let result = unsafe { recv(reader_end.as_raw_fd(), (&raw mut byte).cast(), 1) };
            let outcome = format!("C recv returned {result}, byte {:?}", byte as char);
            reader_log.borrow_mut().push(outcome);
        });
        // Runs once the reader is in its C recv: only if that recv parked.
        while log.borrow().is_empty() {
            yield_now();
        }
        log.borrow_mut().push("writer ran".to_owned());
        // Fails (EPIPE) only if the reader gave up and closed its end: the order tells.
        let _ = writer_end.write_all(b"x");
        reader.join().unwrap();
    });
    assert_eq!(
        *events.borrow(),
        ["C recv called", "writer ran", "C recv returned 1, byte 'x'"]
    );
}

#[test]
fn a_c_librarys_sleeps_let_other_green_threads_run() {
    let library = library();
    let sleeps = [
        ("nanosleep", library.nanosleep_ms),
        ("poll", library.poll_sleep_ms),
    ];
    for (name, sleep_ms) in sleeps {
        let events = Rc::new(RefCell::new(Vec::<String>::new()));
        let log = events.clone();
        greenweave::run(move || {
            let sleeper_log = log.clone();
            let sleeper = greenweave::spawn(move || {
                sleeper_log.borrow_mut().push(format!("C {name} starts"));
                // SAFETY: takes and returns plain integers.
                let result = unsafe { sleep_ms(SLEEP_MS) };
                sleeper_log
                    .borrow_mut()
                    .push(format!("C {name} returned {result}"));
            });
            let ticker_log = log.clone();
            let ticker = greenweave::spawn(move || {
                // Ticks once the sleeper is in its C sleep: before it ends only if it parked.
                while ticker_log.borrow().is_empty() {
                    yield_now();
                }
                ticker_log.borrow_mut().push("tick".to_owned());
            });
            sleeper.join().unwrap();
            ticker.join().unwrap();
        });
        assert_eq!(
            *events.borrow(),
            [
                format!("C {name} starts"),
                "tick".to_owned(),
                format!("C {name} returned 0")
            ]
        );
    }
}

#[test]
fn a_cancelled_green_threads_c_recv_fails_with_ecanceled_then_rust_code_unwinds() {
    let recv = library().recv;
    let events = Rc::new(RefCell::new(Vec::<String>::new()));
    let log = events.clone();
    greenweave::run(move || {
        let (reader_end, _writer_end) = UnixStream::pair().unwrap();
        reader_end.set_read_timeout(Some(HANG_GUARD)).unwrap();
        let reader_log = log.clone();
        let reader = greenweave::spawn(move || {
            reader_log.borrow_mut().push("C recv called".to_owned());
            let mut byte = 0u8;
            // SAFETY: a live socket and a one-byte buffer.
            let result = unsafe { recv(reader_end.as_raw_fd(), (&raw mut byte).cast(), 1) };
            reader_log
                .borrow_mut()
                .push(format!("C recv returned {result}"));
            // The cancellation is raised here, at the next park in Rust code.
            yield_now();
            reader_log.borrow_mut().push("not reached".to_owned());
        });
        while log.borrow().is_empty() {
            yield_now();
        }
        log.borrow_mut().push("cancelled".to_owned());
        reader.cancel();
        let joined = reader.join();
        log.borrow_mut().push(format!("joined: {joined:?}"));
    });
    assert_eq!(
        *events.borrow(),
        [
            "C recv called".to_owned(),
            "cancelled".to_owned(),
            format!("C recv returned {}", negative(libc::ECANCELED)),
            "joined: Err(Cancelled)".to_owned()
        ]
    );
}

#[test]
fn a_fortified_c_librarys_recv_chk_and_poll_chk_park_only_their_green_thread() {
    let &(recv, poll) = fortified_library();
    let events = Rc::new(RefCell::new(Vec::<String>::new()));
    let log = events.clone();
    greenweave::run(move || {
        let (reader_end, mut writer_end) = UnixStream::pair().unwrap();
        reader_end.set_read_timeout(Some(HANG_GUARD)).unwrap();
        let reader_log = log.clone();
        let reader = greenweave::spawn(move || {
            let fd = reader_end.as_raw_fd();
            reader_log.borrow_mut().push("C poll called".to_owned());
            let timeout = HANG_GUARD.as_millis() as c_int;
            // SAFETY: a live socket; one entry of the C function's array of two.
            let ready = unsafe { poll(fd, 1, timeout) };
            reader_log
                .borrow_mut()
                .push(format!("C poll returned {ready}"));
            // SAFETY: a live socket; 1 byte fits the C function's buffer of 16.
            let first = unsafe { recv(fd, 1) };
            reader_log
                .borrow_mut()
                .push(format!("C recv returned {first}"));
            reader_log.borrow_mut().push("C recv called".to_owned());
            // SAFETY: as above.
            let second = unsafe { recv(fd, 16) };
            reader_log
                .borrow_mut()
                .push(format!("C recv returned {second}"));
        });
        while log.borrow().is_empty() {
            yield_now();
        }
        log.borrow_mut().push("writer ran".to_owned());
        let _ = writer_end.write_all(b"x");
        while log.borrow().len() < 5 {
            yield_now();
        }
        log.borrow_mut().push("writer ran again".to_owned());
        let _ = writer_end.write_all(b"y");
        reader.join().unwrap();
    });
    assert_eq!(
        *events.borrow(),
        [
            "C poll called",
            "writer ran",
            "C poll returned 1",
            "C recv returned 120",
            "C recv called",
            "writer ran again",
            "C recv returned 121",
        ]
    );
}

#[test]
fn a_fortified_recv_longer_than_its_buffer_aborts_as_glibc_reports_it() {
    let outcome = common::run_in_child(
        "a_fortified_recv_longer_than_its_buffer_aborts_as_glibc_reports_it",
        || {
            let &(recv, _) = fortified_library();
            greenweave::run(move || {
                let (reader_end, _writer_end) = UnixStream::pair().unwrap();
                // SAFETY: 17 bytes do not fit the C function's buffer of 16: the check fails
                // before anything is written.
                unsafe { recv(reader_end.as_raw_fd(), 17) };
            });
            std::process::exit(0);
        },
    );
    common::assert_aborted_saying(&outcome, "buffer overflow detected");
}
