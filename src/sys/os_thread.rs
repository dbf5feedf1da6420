//! What another OS thread of this process is doing, as reports say it: the system call it is
//! blocked in, from its `/proc/self/task/<tid>/syscall` (proc(5)); or, when it runs its own
//! code, where: its user-space program counter, asked of the thread itself, and the function
//! there, when it can be named. The stall report says it of a worker whose green thread does
//! not park, the dump of a worker that does not answer.
//!
//! Owns: [`ThreadState`] and [`Activity`] (the file's reading), [`Numbering`] (whether the
//! file numbers system calls as this architecture does; checked once per process), the names
//! of the common blocking calls, the program-counter sample and the naming of a code address.
//!
//! The sample. The file says only `running` of a thread in user code; its program counter is
//! in its registers, which only the thread itself can read without stopping the process
//! (`ptrace` refuses a thread of the same process). So the thread is sent a signal whose
//! handler reads the interrupted context: `rt_tgsigqueueinfo(2)` queues it to that one thread
//! with a value ([`SAMPLE_TAG`] and a request number) that tells the handler it is a sample and
//! not the signal the program or a user sent. greenweave catches no signal for this alone: it
//! uses the signal whose handler it already owns, the dump's
//! ([`Builder::dump_on_signal`](crate::runtime::Builder::dump_on_signal)), and only while that
//! handler is still installed (checked before each sample, so a program that has since taken
//! the signal back never receives one from here). Without it the state says only that the
//! thread runs its own code. The handler runs between two instructions of a thread that is
//! computing, so it interrupts no system call (SA_RESTART restarts one it would meet, as any
//! signal's would).
//!
//! Naming an address: `dladdr(3)` finds the object (the executable or a shared library) and,
//! for an exported function, its name; any other function is looked up in the object's ELF
//! symbol table (`.symtab`, which a stripped binary lacks), its Rust name demangled (legacy
//! mangling; v0 names are left as they are). Else the report gives the object and the offset,
//! which `addr2line -f -C -e <object> <offset>` resolves.
//!
//! May not: change what the thread does: the file is only read, and the sample's handler only
//! reads the interrupted context and stores two words; nor send a signal whose handler is not
//! greenweave's.

use std::ffi::CStr;
use std::fs::File;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Whether `/proc/self/task/<tid>/syscall` numbers system calls as the architecture this was
/// built for does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Numbering {
    /// It does (a native run): a number names a call through `libc::SYS_*`.
    Native,
    /// It does not: the file is another kernel's idea, as under qemu-user, where it shows the
    /// host's numbers for the host call that qemu makes.
    Foreign,
    /// The file cannot be read on this system.
    Unreadable,
}

impl Numbering {
    /// This process's numbering, checked at the first call. Call it from an OS thread that is
    /// not a green thread (the check reads a file, and must see its own `read(2)`).
    pub(crate) fn of_this_process() -> Numbering {
        static NUMBERING: OnceLock<Numbering> = OnceLock::new();
        *NUMBERING.get_or_init(Numbering::check)
    }

    /// Reads the calling thread's own file: the call in progress is the `read(2)` of it, so
    /// the number shown must be `SYS_read` if the numbers are this architecture's.
    pub(crate) fn check() -> Numbering {
        // SAFETY: gettid(2) has no preconditions and cannot fail.
        let own = unsafe { libc::gettid() };
        match read_syscall_file(own) {
            Some(Activity::Syscall(number)) if number == libc::SYS_read => Numbering::Native,
            Some(_) => Numbering::Foreign,
            None => Numbering::Unreadable,
        }
    }
}

/// What an OS thread is doing, as its `/proc/self/task/<tid>/syscall` says (proc(5)).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Activity {
    /// Blocked in the system call of this number (this architecture's numbering).
    Syscall(libc::c_long),
    /// Blocked in a system call whose number is not this architecture's (see `Numbering`).
    ForeignSyscall,
    /// Running user code (`running`): computing.
    Computing,
    /// Blocked in the kernel, but not in a system call (`-1`: a page fault, for one).
    BlockedOutsideSyscall,
    /// The file could not be read, or said something else.
    Unknown,
}

impl Activity {
    /// What thread `tid` is doing now, its call named only if `numbering` allows.
    pub(crate) fn of_thread(tid: libc::pid_t, numbering: Numbering) -> Activity {
        match (read_syscall_file(tid), numbering) {
            (None, _) | (_, Numbering::Unreadable) => Activity::Unknown,
            (Some(Activity::Syscall(_)), Numbering::Foreign) => Activity::ForeignSyscall,
            (Some(activity), _) => activity,
        }
    }

    /// The file's text (its first field: a number, `-1` or `running`) as an activity.
    pub(crate) fn parse(text: &str) -> Activity {
        let first = text.split_ascii_whitespace().next().unwrap_or("");
        if first == "running" {
            return Activity::Computing;
        }
        match first.parse::<libc::c_long>() {
            Ok(-1) => Activity::BlockedOutsideSyscall,
            Ok(number) if number >= 0 => Activity::Syscall(number),
            _ => Activity::Unknown,
        }
    }

    /// What the OS thread of kernel id `tid` is doing, for a report's line.
    pub(crate) fn describe(self, tid: libc::pid_t) -> String {
        match self {
            Activity::Syscall(number) => match syscall_name(number) {
                Some(name) => format!("blocked in the system call {name}"),
                None => format!("blocked in system call {number}"),
            },
            Activity::ForeignSyscall => "blocked in a system call (which one is unknown: \
                                         /proc numbers system calls as another architecture \
                                         does, as under qemu-user)"
                .to_owned(),
            Activity::Computing => "running its own code in user space, in no system call".into(),
            Activity::BlockedOutsideSyscall => {
                "blocked in the kernel outside a system call (a page fault, for one)".into()
            }
            Activity::Unknown => {
                format!("doing what /proc/self/task/{tid}/syscall could not tell")
            }
        }
    }
}

/// What an OS thread is doing, and for one that computes, where.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct ThreadState {
    pub(crate) activity: Activity,
    /// The user-space program counter of a thread that computes, if a sample could be taken.
    pub(crate) program_counter: Option<usize>,
}

impl ThreadState {
    /// What thread `tid` of this process is doing now; for one that computes, its program
    /// counter, if greenweave owns a signal to ask it with. Blocks for at most
    /// [`SAMPLE_WAIT`]. Call it from an OS thread that is not a green thread.
    pub(crate) fn of_thread(tid: libc::pid_t, numbering: Numbering) -> ThreadState {
        let activity = Activity::of_thread(tid, numbering);
        let program_counter = match activity {
            Activity::Computing => sample_program_counter(tid),
            _ => None,
        };
        ThreadState {
            activity,
            program_counter,
        }
    }

    /// The state for a report's line: the activity, then where the code runs, if known.
    pub(crate) fn describe(self, tid: libc::pid_t) -> String {
        let mut line = self.activity.describe(tid);
        if let Some(address) = self.program_counter {
            line.push_str(", at ");
            line.push_str(&describe_code_address(address));
        }
        line
    }
}

/// Reads `/proc/self/task/<tid>/syscall`; `None` if it cannot be read. The file is read with
/// plain `read(2)` calls (on the caller's thread, which is no green thread: the hooks, if
/// linked, pass them through).
fn read_syscall_file(tid: libc::pid_t) -> Option<Activity> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
        .ok()
        .map(|text| Activity::parse(&text))
}

/// The name of system call `number` for the common blocking ones (this architecture's
/// numbering, through `libc::SYS_*`); `None` for the rest. x86_64 keeps older calls that
/// aarch64 never had (`poll`, `epoll_wait`, `open`, ...).
pub(crate) fn syscall_name(number: libc::c_long) -> Option<&'static str> {
    Some(match number {
        libc::SYS_futex => "futex",
        libc::SYS_read => "read",
        libc::SYS_write => "write",
        libc::SYS_readv => "readv",
        libc::SYS_writev => "writev",
        libc::SYS_pread64 => "pread64",
        libc::SYS_pwrite64 => "pwrite64",
        libc::SYS_openat => "openat",
        libc::SYS_close => "close",
        libc::SYS_fsync => "fsync",
        libc::SYS_fdatasync => "fdatasync",
        libc::SYS_flock => "flock",
        libc::SYS_fcntl => "fcntl",
        libc::SYS_ioctl => "ioctl",
        libc::SYS_epoll_pwait => "epoll_pwait",
        libc::SYS_epoll_pwait2 => "epoll_pwait2",
        libc::SYS_ppoll => "ppoll",
        libc::SYS_pselect6 => "pselect6",
        libc::SYS_nanosleep => "nanosleep",
        libc::SYS_clock_nanosleep => "clock_nanosleep",
        libc::SYS_recvfrom => "recvfrom",
        libc::SYS_recvmsg => "recvmsg",
        libc::SYS_sendto => "sendto",
        libc::SYS_sendmsg => "sendmsg",
        libc::SYS_accept => "accept",
        libc::SYS_accept4 => "accept4",
        libc::SYS_connect => "connect",
        libc::SYS_wait4 => "wait4",
        libc::SYS_waitid => "waitid",
        libc::SYS_io_uring_enter => "io_uring_enter",
        libc::SYS_msync => "msync",
        libc::SYS_sendfile => "sendfile",
        libc::SYS_sched_yield => "sched_yield",
        libc::SYS_getrandom => "getrandom",
        libc::SYS_rt_sigtimedwait => "rt_sigtimedwait",
        libc::SYS_rt_sigsuspend => "rt_sigsuspend",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait => "epoll_wait",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll => "poll",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_select => "select",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_open => "open",
        #[cfg(target_arch = "x86_64")]
        libc::SYS_pause => "pause",
        _ => return None,
    })
}

/// How long a sample waits for the thread's handler to run. A thread that computes is on a CPU
/// or next in line for one: the signal is handled at its next return to user space.
pub(crate) const SAMPLE_WAIT: Duration = Duration::from_millis(200);

/// The high bits of a sample's signal value; the low 16 are the request's number.
const SAMPLE_TAG: usize = 0x6777_5f70_6300_0000;
const SAMPLE_NUMBER: usize = 0xffff;

/// The signal whose handler greenweave owns and that carries samples (0: none), and that
/// handler's address.
static SAMPLE_SIGNAL: AtomicI32 = AtomicI32::new(0);
static SAMPLE_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// The sample the handler answered last: its tag and number, and the program counter, which
/// is written first.
static ANSWERED: AtomicUsize = AtomicUsize::new(0);
static ANSWERED_PC: AtomicUsize = AtomicUsize::new(0);

/// Says that greenweave's `handler` (an `SA_SIGINFO` handler that calls [`answer_sample`]
/// first) is installed for `signal`, which may then carry samples.
pub(crate) fn sample_with(signal: i32, handler: usize) {
    SAMPLE_HANDLER.store(handler, Ordering::Relaxed);
    SAMPLE_SIGNAL.store(signal, Ordering::Release);
}

/// For the signal handler: if the signal is a sample's, records the interrupted program
/// counter and returns `true` (the handler does nothing else); `false` for any other signal.
/// Async-signal-safe: reads the context, stores two words.
///
/// # Safety
/// `info` and `context` are the handler's own arguments (`SA_SIGINFO`).
pub(crate) unsafe fn answer_sample(
    info: *const libc::siginfo_t,
    context: *const libc::c_void,
) -> bool {
    // SAFETY: the kernel's siginfo for this handler. `si_value` is the queued value for an
    // `SI_QUEUE` signal, the only kind looked at.
    let value = unsafe {
        if info.is_null() || (*info).si_code != libc::SI_QUEUE || (*info).si_pid() != libc::getpid()
        {
            return false;
        }
        (*info).si_value().sival_ptr as usize
    };
    if value & !SAMPLE_NUMBER != SAMPLE_TAG || context.is_null() {
        return false;
    }
    // SAFETY: the handler's context, passed on as the kernel gave it.
    let pc = unsafe { crate::arch::interrupted_program_counter(context.cast()) };
    ANSWERED_PC.store(pc, Ordering::Relaxed);
    ANSWERED.store(value, Ordering::Release);
    true
}

/// The user-space program counter of thread `tid` of this process, asked of the thread with
/// the sample's signal; `None` without one, if greenweave's handler is no longer installed,
/// or if the thread does not answer within [`SAMPLE_WAIT`] (it has the signal blocked, say).
fn sample_program_counter(tid: libc::pid_t) -> Option<usize> {
    // One sample at a time: the answer has one slot.
    static REQUESTS: Mutex<usize> = Mutex::new(0);
    let signal = SAMPLE_SIGNAL.load(Ordering::Acquire);
    if signal == 0 {
        return None;
    }
    let mut requests = REQUESTS.lock().unwrap_or_else(PoisonError::into_inner);
    // SAFETY: sigaction with no new action only reads the installed one.
    let installed = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == SAMPLE_HANDLER.load(Ordering::Relaxed)
    };
    if !installed {
        return None;
    }
    *requests = (*requests + 1) & SAMPLE_NUMBER;
    let value = SAMPLE_TAG | *requests;
    let info = QueuedSignal::new(signal, value);
    // SAFETY: rt_tgsigqueueinfo(2) reads the siginfo laid out as the kernel's; the target is a
    // thread of this process, to which any `si_code` may be sent.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            tid,
            signal,
            &raw const info,
        )
    };
    if sent != 0 {
        return None;
    }
    let deadline = Instant::now() + SAMPLE_WAIT;
    while Instant::now() < deadline {
        if ANSWERED.load(Ordering::Acquire) == value {
            return Some(ANSWERED_PC.load(Ordering::Relaxed));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    None
}

/// A `siginfo_t` for `rt_tgsigqueueinfo(2)`, laid out as the kernel's for an `SI_QUEUE`
/// signal on a 64-bit target (libc's type keeps these fields private): 128 bytes.
#[repr(C)]
struct QueuedSignal {
    signo: i32,
    errno: i32,
    code: i32,
    _pad: i32,
    pid: libc::pid_t,
    uid: libc::uid_t,
    value: usize,
    _rest: [u64; 12],
}

const _: () = assert!(size_of::<QueuedSignal>() == size_of::<libc::siginfo_t>());

impl QueuedSignal {
    fn new(signal: i32, value: usize) -> QueuedSignal {
        QueuedSignal {
            signo: signal,
            errno: 0,
            code: libc::SI_QUEUE,
            _pad: 0,
            // SAFETY: getpid(2) and getuid(2) cannot fail.
            pid: unsafe { libc::getpid() },
            uid: unsafe { libc::getuid() },
            value,
            _rest: [0; 12],
        }
    }
}

/// A code address for people: `0x55d0c3a1b2c4 (dump::spins_until+0x24 in /path/to/binary)`,
/// or with the object's offset instead of a function when none can be named.
pub(crate) fn describe_code_address(address: usize) -> String {
    // SAFETY: dladdr only reads the loader's tables; a zeroed Dl_info is valid to fill.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let found = unsafe { libc::dladdr(address as *const libc::c_void, &mut info) } != 0;
    if !found || info.dli_fname.is_null() {
        return format!("{address:#x}");
    }
    // SAFETY: dladdr's strings are the loader's, alive while the object stays loaded.
    let object = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    let object = if object.is_empty() {
        std::env::current_exe()
            .map(|path| path.display().to_string())
            .unwrap_or(object)
    } else {
        object
    };
    let base = info.dli_fbase as usize;
    let exported = (!info.dli_sname.is_null()).then(|| {
        // SAFETY: as above.
        let name = unsafe { CStr::from_ptr(info.dli_sname) }.to_string_lossy();
        (demangle(&name), address - info.dli_saddr as usize)
    });
    match exported.or_else(|| elf::function_at(&object, base, address)) {
        Some((name, offset)) => format!("{address:#x} ({name}+{offset:#x} in {object})"),
        None => format!("{address:#x} ({object}+{:#x})", address - base),
    }
}

/// A Rust symbol's legacy mangling (`_ZN...E`, with its hash) as the path it names; any other
/// name as it is.
fn demangle(symbol: &str) -> String {
    let Some(mut rest) = symbol.strip_prefix("_ZN") else {
        return symbol.to_owned();
    };
    let mut parts = Vec::new();
    while let Some(digits) = rest.find(|c: char| !c.is_ascii_digit()).filter(|&n| n > 0) {
        let Ok(length) = rest[..digits].parse::<usize>() else {
            return symbol.to_owned();
        };
        let Some(part) = rest.get(digits..digits + length) else {
            return symbol.to_owned();
        };
        parts.push(part);
        rest = &rest[digits + length..];
    }
    if !rest.starts_with('E') || parts.is_empty() {
        return symbol.to_owned();
    }
    let is_hash = |part: &str| {
        part.len() == 17
            && part.starts_with('h')
            && part[1..].bytes().all(|b| b.is_ascii_hexdigit())
    };
    if parts.len() > 1 && is_hash(parts[parts.len() - 1]) {
        parts.pop();
    }
    let unescaped: Vec<String> = parts
        .iter()
        .map(|part| {
            // A leading `_` only escapes a `$` that would start the part.
            let part = if part.starts_with("_$") {
                &part[1..]
            } else {
                part
            };
            let mut out = part.replace("..", "::");
            for (from, to) in [
                ("$LT$", "<"),
                ("$GT$", ">"),
                ("$RF$", "&"),
                ("$BP$", "*"),
                ("$C$", ","),
                ("$LP$", "("),
                ("$RP$", ")"),
                ("$SP$", "@"),
                ("$u20$", " "),
                ("$u27$", "'"),
                ("$u5b$", "["),
                ("$u5d$", "]"),
                ("$u7b$", "{"),
                ("$u7d$", "}"),
                ("$u7e$", "~"),
            ] {
                out = out.replace(from, to);
            }
            out
        })
        .collect();
    unescaped.join("::")
}

/// Looking a code address up in an ELF object's symbol table (64-bit, little-endian: the
/// targets greenweave builds for).
mod elf {
    use super::{File, demangle};

    const SHT_SYMTAB: u32 = 2;
    const PT_LOAD: u32 = 1;
    const STT_FUNC: u8 = 2;

    /// The function of `object` (loaded at `base`, dladdr's `dli_fbase`) that holds `address`,
    /// demangled, with the offset of `address` in it; `None` if the object cannot be read, is
    /// not a 64-bit ELF file or has no symbol table.
    pub(super) fn function_at(
        object: &str,
        base: usize,
        address: usize,
    ) -> Option<(String, usize)> {
        let file = File::open(object).ok()?;
        // SAFETY: a private read-only mapping of a file; an object the process runs is not
        // rewritten under it (the loader itself maps it so).
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let bytes = &map[..];
        if bytes.get(..5)? != b"\x7fELF\x02" {
            return None;
        }
        let u16_at = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
        let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        let u64_at =
            |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?) as usize);
        // Where the object's addresses start: `base` is where its first segment was mapped.
        let (phoff, phentsize, phnum) = (u64_at(0x20)?, usize::from(u16_at(0x36)?), u16_at(0x38)?);
        let first_load = (0..usize::from(phnum))
            .map(|i| phoff + i * phentsize)
            .filter(|&header| u32_at(header) == Some(PT_LOAD))
            .filter_map(|header| u64_at(header + 16))
            .min()?;
        let wanted = address.checked_sub(base.checked_sub(first_load & !0xfff)?)?;
        let (shoff, shentsize, shnum) = (u64_at(0x28)?, usize::from(u16_at(0x3a)?), u16_at(0x3c)?);
        let section = |index: usize| shoff + index * shentsize;
        let symtab = (0..usize::from(shnum))
            .map(section)
            .find(|&header| u32_at(header + 4) == Some(SHT_SYMTAB))?;
        let (symbols, size, strtab) = (
            u64_at(symtab + 24)?,
            u64_at(symtab + 32)?,
            section(u32_at(symtab + 40)? as usize),
        );
        let strings = u64_at(strtab + 24)?;
        (0..size / 24).map(|i| symbols + i * 24).find_map(|symbol| {
            let (value, length) = (u64_at(symbol + 8)?, u64_at(symbol + 16)?);
            let is_function = bytes.get(symbol + 4)? & 0xf == STT_FUNC;
            if !is_function || !(value..value + length.max(1)).contains(&wanted) {
                return None;
            }
            let name_at = strings + u32_at(symbol)? as usize;
            let name = bytes.get(name_at..)?;
            let name = &name[..name.iter().position(|&b| b == 0)?];
            Some((demangle(&String::from_utf8_lossy(name)), wanted - value))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Activity, Numbering, demangle, describe_code_address, syscall_name};

    #[test]
    fn the_syscall_file_says_a_number_running_or_minus_one() {
        // proc(5): the number and six arguments, stack pointer and program counter; `-1`,
        // stack pointer and program counter when blocked outside a call; else `running`.
        let futex = format!(
            "{} 0x7f00 0x80 0x2 0x0 0x0 0x0 0x7ffd 0x7f01\n",
            libc::SYS_futex
        );
        assert_eq!(Activity::parse(&futex), Activity::Syscall(libc::SYS_futex));
        assert_eq!(Activity::parse("running\n"), Activity::Computing);
        assert_eq!(
            Activity::parse("-1 0x7ffd 0x7f01\n"),
            Activity::BlockedOutsideSyscall
        );
        assert_eq!(Activity::parse(""), Activity::Unknown);
        assert_eq!(Activity::parse("what"), Activity::Unknown);
    }

    #[test]
    fn common_blocking_calls_are_named_and_the_rest_numbered() {
        assert_eq!(syscall_name(libc::SYS_futex), Some("futex"));
        assert_eq!(syscall_name(libc::SYS_read), Some("read"));
        assert_eq!(syscall_name(libc::SYS_epoll_pwait), Some("epoll_pwait"));
        assert_eq!(syscall_name(libc::SYS_getpid), None);
        assert_eq!(
            Activity::Syscall(libc::SYS_futex).describe(1),
            "blocked in the system call futex"
        );
        assert_eq!(
            Activity::Syscall(libc::SYS_getpid).describe(1),
            format!("blocked in system call {}", libc::SYS_getpid)
        );
    }

    #[test]
    fn a_thread_reading_its_own_syscall_file_sees_read() {
        // Natively the check finds `read`. The aarch64 build's tests may run under qemu-user,
        // whose /proc is the host kernel's (its own numbers): then the numbers are foreign,
        // which the report says rather than naming a wrong call.
        let numbering = Numbering::check();
        if cfg!(target_arch = "x86_64") {
            assert_eq!(numbering, Numbering::Native);
        } else {
            assert_ne!(numbering, Numbering::Unreadable);
        }
    }

    #[test]
    fn rust_names_are_demangled_without_their_hash() {
        assert_eq!(
            demangle("_ZN4dump11spins_until17h0123456789abcdefE"),
            "dump::spins_until"
        );
        assert_eq!(
            demangle("_ZN36_$LT$T$u20$as$u20$core..any..Any$GT$7type_id17h0123456789abcdefE"),
            "<T as core::any::Any>::type_id"
        );
        assert_eq!(demangle("memcpy"), "memcpy");
        assert_eq!(demangle("_ZN3foo"), "_ZN3foo");
    }

    #[inline(never)]
    fn a_function_of_this_test() -> usize {
        // Its own address, as a code address inside it.
        a_function_of_this_test as fn() -> usize as usize + 1
    }

    #[test]
    fn a_code_address_of_the_executable_is_named_by_its_function() {
        let described = describe_code_address(a_function_of_this_test());
        assert!(
            described.contains("a_function_of_this_test+0x1 in "),
            "{described}"
        );
    }
}
