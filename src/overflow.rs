//! Stack-overflow reporting for coroutine stacks.
//!
//! Owns: the process-wide registry of guard pages (filled by [`crate::Stack`] when it maps and
//! unmaps, never on a switch), the `SIGSEGV`/`SIGBUS` handler, and a per-thread alternate
//! signal stack for threads that have none.
//!
//! A fault inside one of our guard pages prints
//! `green thread '<name>' on thread '<os thread>' has overflowed its stack (<size> KiB)` and
//! aborts, like std's report for an OS thread. Any other fault goes to the handler that was
//! installed before ours (std's, which reports main-thread and std-thread overflows), or to the
//! default action.
//!
//! May not: allocate, lock (other than `try_lock`), or format with `std::fmt` inside the signal
//! handler; everything the handler touches is async-signal-safe.

use core::cell::Cell;
use core::ffi::{c_int, c_void};
use core::mem::MaybeUninit;
use core::ptr;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock, TryLockError};

use memmap2::MmapOptions;

/// A guard page (or pages) of a live stack.
struct GuardPage {
    /// One past the last guard byte.
    end: usize,
    /// Usable bytes of the stack above it, for the report.
    stack_bytes: usize,
}

/// Live guard pages, keyed by their first byte. Written when a stack is mapped or unmapped.
static GUARDS: Mutex<BTreeMap<usize, GuardPage>> = Mutex::new(BTreeMap::new());

/// Names the green thread running on the calling OS thread, if a layer above knows one.
///
/// # Safety
/// Called from the signal handler: it must be async-signal-safe (no allocation, no locks) and
/// return bytes that stay valid while the faulting green thread exists.
pub(crate) type GreenNameSource = unsafe fn() -> Option<&'static [u8]>;

/// The registered [`GreenNameSource`] (null: none). Set by the runtime when it starts.
static GREEN_NAME_SOURCE: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Lets the overflow report name the green thread: the runtime registers a function that reads
/// its current task's name.
pub(crate) fn set_green_name_source(source: GreenNameSource) {
    GREEN_NAME_SOURCE.store(source as *mut (), Ordering::Release);
}

/// The actions installed for SIGSEGV and SIGBUS before ours, to forward other faults to.
static PREVIOUS_SEGV: OnceLock<libc::sigaction> = OnceLock::new();
static PREVIOUS_BUS: OnceLock<libc::sigaction> = OnceLock::new();

/// Records `[start, start + len)` as the guard of a stack with `stack_bytes` usable bytes, and
/// installs the fault handler on first use.
pub(crate) fn register_guard(start: usize, len: usize, stack_bytes: usize) {
    install_handler();
    lock_guards().insert(
        start,
        GuardPage {
            end: start + len,
            stack_bytes,
        },
    );
}

/// Forgets the guard starting at `start`.
pub(crate) fn unregister_guard(start: usize) {
    lock_guards().remove(&start);
}

fn lock_guards() -> MutexGuard<'static, BTreeMap<usize, GuardPage>> {
    // The map stays consistent even if a holder panicked (insert/remove are not interrupted
    // halfway by a panic of ours), so poisoning carries no information here.
    GUARDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Installs [`on_fault`] for SIGSEGV and SIGBUS, once per process.
fn install_handler() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        for (signal, previous) in [
            (libc::SIGSEGV, &PREVIOUS_SEGV),
            (libc::SIGBUS, &PREVIOUS_BUS),
        ] {
            // SAFETY: sigaction with a null new action only reads the current one into `old`,
            // which is a plain C struct that zeroes are a valid value of.
            let old = unsafe {
                let mut old = MaybeUninit::<libc::sigaction>::zeroed();
                libc::sigaction(signal, ptr::null(), old.as_mut_ptr());
                old.assume_init()
            };
            // Saved before ours is installed, so a fault that races the install still finds it.
            let _ = previous.set(old);
            // SAFETY: `on_fault` has the SA_SIGINFO signature and is async-signal-safe; the
            // struct is fully initialised (zeroed, then every field we rely on set).
            unsafe {
                let mut action = MaybeUninit::<libc::sigaction>::zeroed().assume_init();
                action.sa_sigaction = on_fault as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, ptr::null_mut());
            }
        }
    });
}

/// The SIGSEGV/SIGBUS handler: reports and aborts for our guard pages, forwards the rest.
extern "C" fn on_fault(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler; si_addr is the
    // faulting address for SIGSEGV and SIGBUS.
    let address = unsafe { (*info).si_addr() } as usize;
    if let Some(stack_bytes) = guarded_stack_size(address) {
        report_overflow_and_abort(stack_bytes);
    }
    forward(signal, info, context);
}

/// The usable size of the stack whose guard contains `address`, if any.
fn guarded_stack_size(address: usize) -> Option<usize> {
    // Another thread may hold the lock for the few instructions of an insert; wait for it.
    // If this thread holds it (a fault inside the registry itself), give up after a while.
    for _ in 0..10_000_000 {
        let guards = match GUARDS.try_lock() {
            Ok(guards) => guards,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                core::hint::spin_loop();
                continue;
            }
        };
        let (_, guard) = guards.range(..=address).next_back()?;
        return (address < guard.end).then_some(guard.stack_bytes);
    }
    None
}

/// Hands a fault that is not ours to the previous handler, or to the default action.
fn forward(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let previous = match signal {
        libc::SIGSEGV => PREVIOUS_SEGV.get(),
        libc::SIGBUS => PREVIOUS_BUS.get(),
        _ => None,
    };
    match previous {
        Some(action)
            if action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN =>
        {
            if action.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: a handler installed with SA_SIGINFO has this signature; we pass on
                // exactly the arguments the kernel gave us.
                let handler: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { core::mem::transmute(action.sa_sigaction) };
                handler(signal, info, context);
            } else {
                // SAFETY: a handler installed without SA_SIGINFO takes only the signal number.
                let handler: extern "C" fn(c_int) =
                    unsafe { core::mem::transmute(action.sa_sigaction) };
                handler(signal);
            }
        }
        _ => {
            // Restore the default action and return: the faulting instruction runs again and
            // the kernel terminates the process with the signal, as if we were never here.
            // SAFETY: installs SIG_DFL with an empty mask; no pointers are kept.
            unsafe {
                let mut action = MaybeUninit::<libc::sigaction>::zeroed().assume_init();
                action.sa_sigaction = libc::SIG_DFL;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, ptr::null_mut());
            }
        }
    }
}

/// Writes the overflow report to stderr and aborts. Async-signal-safe: no allocation, no locks.
fn report_overflow_and_abort(stack_bytes: usize) -> ! {
    let mut thread_name = [0u8; 64];
    let mut message = MessageBuffer::new();
    message.push(b"\ngreen thread '");
    let green_name = GREEN_NAME_SOURCE.load(Ordering::Acquire);
    let green_name = if green_name.is_null() {
        None
    } else {
        // SAFETY: only `set_green_name_source` stores here, always a `GreenNameSource`.
        let source: GreenNameSource = unsafe { core::mem::transmute(green_name) };
        // SAFETY: the source's contract: async-signal-safe, valid for the current thread.
        unsafe { source() }
    };
    message.push(green_name.unwrap_or(b"<unnamed>"));
    message.push(b"' on thread '");
    message.push(os_thread_name(&mut thread_name));
    message.push(b"' has overflowed its stack (");
    message.push_decimal(stack_bytes / 1024);
    message
        .push(b" KiB)\nfatal runtime error: stack overflow in a greenweave coroutine, aborting\n");
    // SAFETY: write(2) and abort(3) are async-signal-safe; the buffer is valid for its length.
    unsafe {
        libc::write(
            libc::STDERR_FILENO,
            message.bytes.as_ptr().cast(),
            message.len,
        );
        libc::abort()
    }
}

/// The OS thread's name as std reports it (`main`, `<unnamed>`, or the name given to
/// `thread::Builder`), recorded in [`THREAD_NAME`] when the thread made its first coroutine.
/// Falls back to the kernel's `comm` for a thread that never did (which cannot be running a
/// coroutine, so this only matters if the registry and the thread disagree).
fn os_thread_name(buffer: &mut [u8; 64]) -> &[u8] {
    let recorded = THREAD_NAME.get();
    if recorded.len > 0 {
        let len = recorded.len.min(buffer.len());
        buffer[..len].copy_from_slice(&recorded.bytes[..len]);
        return &buffer[..len];
    }
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL-terminated, into the buffer.
    let rc = unsafe { libc::prctl(libc::PR_GET_NAME, buffer.as_mut_ptr()) };
    if rc != 0 {
        return b"<unknown>";
    }
    let len = buffer.iter().position(|&b| b == 0).unwrap_or(16);
    &buffer[..len]
}

/// A thread's name, kept where the signal handler can read it without locks or allocation.
#[derive(Clone, Copy)]
struct RecordedName {
    bytes: [u8; 64],
    len: usize,
}

thread_local! {
    /// This thread's name as std knows it; empty until the thread makes a coroutine.
    static THREAD_NAME: Cell<RecordedName> = const {
        Cell::new(RecordedName { bytes: [0; 64], len: 0 })
    };
}

/// Records the calling thread's std name for the overflow report (truncated to 64 bytes).
fn record_thread_name() {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("<unnamed>").as_bytes();
    let mut recorded = RecordedName {
        bytes: [0; 64],
        len: name.len().min(64),
    };
    recorded.bytes[..recorded.len].copy_from_slice(&name[..recorded.len]);
    THREAD_NAME.set(recorded);
}

/// A fixed-size byte buffer for composing a message without allocating.
struct MessageBuffer {
    bytes: [u8; 256],
    len: usize,
}

impl MessageBuffer {
    fn new() -> Self {
        MessageBuffer {
            bytes: [0; 256],
            len: 0,
        }
    }

    /// Appends as much of `text` as fits.
    fn push(&mut self, text: &[u8]) {
        let n = text.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&text[..n]);
        self.len += n;
    }

    fn push_decimal(&mut self, mut value: usize) {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        self.push(&digits[start..]);
    }
}

/// An alternate signal stack that this module installed for the current thread.
struct AltStack {
    /// `None` when the thread already had one (std installs one on every thread it starts).
    mapping: Option<memmap2::MmapMut>,
}

thread_local! {
    static ALT_STACK: AltStack = AltStack::install();
}

/// Makes sure the calling thread has an alternate signal stack, so the fault handler can run
/// when a coroutine has used up its own. Called when a coroutine is created (coroutines never
/// change thread, so this is the thread that will run it).
#[inline]
pub(crate) fn ensure_alt_stack() {
    // Initialising the thread-local installs the stack; later calls are a flag check.
    let _ = ALT_STACK.try_with(|_| ());
}

impl AltStack {
    fn install() -> AltStack {
        record_thread_name();
        // SAFETY: a null new stack only reads the current setting into `current`.
        let current = unsafe {
            let mut current = MaybeUninit::<libc::stack_t>::zeroed();
            libc::sigaltstack(ptr::null(), current.as_mut_ptr());
            current.assume_init()
        };
        if current.ss_flags & libc::SS_DISABLE == 0 {
            return AltStack { mapping: None };
        }
        // SAFETY: getauxval has no preconditions; 0 means "not provided".
        let minimum = unsafe { libc::getauxval(libc::AT_MINSIGSTKSZ) } as usize;
        let size = minimum.max(libc::SIGSTKSZ) + 64 * 1024;
        let Ok(mapping) = MmapOptions::new().len(size).stack().map_anon() else {
            return AltStack { mapping: None };
        };
        let stack = libc::stack_t {
            ss_sp: mapping.as_ptr() as *mut c_void,
            ss_flags: 0,
            ss_size: size,
        };
        // SAFETY: the mapping lives as long as this thread-local, and Drop disables the
        // alternate stack before unmapping it.
        let rc = unsafe { libc::sigaltstack(&stack, ptr::null_mut()) };
        AltStack {
            mapping: (rc == 0).then_some(mapping),
        }
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        if self.mapping.is_some() {
            let disable = libc::stack_t {
                ss_sp: ptr::null_mut(),
                ss_flags: libc::SS_DISABLE,
                ss_size: 0,
            };
            // SAFETY: disables this thread's alternate stack before the mapping is unmapped.
            unsafe { libc::sigaltstack(&disable, ptr::null_mut()) };
        }
    }
}
