//! Stack-overflow reporting for coroutine stacks.
//!
//! Owns: the process-wide registry of guard pages (filled by [`crate::Stack`] when it maps and
//! unmaps, never on a switch; a table the handler reads without locking, see [`TABLE`]), the
//! `SIGSEGV`/`SIGBUS` handler, and a per-thread alternate signal stack for threads that have
//! none.
//!
//! A fault inside one of our guard pages prints
//! `green thread '<name>' on thread '<os thread>' has overflowed its stack (<size> KiB)`, then
//! a line on how to give each kind of coroutine a larger stack ([`STACK_SIZE_HELP`]), and
//! aborts, like std's report for an OS thread. Any other fault goes to the handler that was
//! installed before ours (std's, which reports main-thread and std-thread overflows), or to the
//! default action.
//!
//! May not: allocate, lock, or format with `std::fmt` inside the signal handler; everything the
//! handler touches is async-signal-safe (atomic loads, `write(2)`, `abort(3)`). In particular
//! the handler must work when the faulting thread holds the registry's lock: its stack can run
//! out inside `Stack::new` or `Stack`'s drop.

use core::cell::Cell;
use core::ffi::{c_int, c_void};
use core::mem::MaybeUninit;
use core::ptr;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering, fence};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

use memmap2::MmapOptions;

/// The guard pages of live stacks, as the fault handler reads them: without a lock, so that a
/// fault while some thread (the faulting one included) is registering or unregistering a stack
/// is still recognised.
///
/// Slots live in chunks that are allocated on demand, each twice the size of the one before,
/// and never freed (a slot is three words: a million live stacks take 24 MiB). A chunk is
/// published through its `OnceLock`, whose `get` never blocks; the handler scans the published
/// chunks in order and stops at the first that is not.
static TABLE: [OnceLock<Box<[GuardSlot]>>; TABLE_CHUNKS] =
    [const { OnceLock::new() }; TABLE_CHUNKS];

/// Slots in the first chunk of [`TABLE`]; chunk `k` holds `FIRST_CHUNK_SLOTS << k`.
const FIRST_CHUNK_SLOTS: usize = 256;

/// Chunks in [`TABLE`]: room for 2^40 guard pages, more than an address space has stacks for.
const TABLE_CHUNKS: usize = 32;

/// One guard page in [`TABLE`]. `start` is 0 while the slot is free.
///
/// Written only under [`REGISTRY`]'s lock, read by the handler without it, seqlock fashion:
/// `start` is cleared before the other fields change and stored last (with release ordering)
/// once they are set, and the handler re-reads `start` after reading them, so it uses an entry
/// only if nothing changed it meanwhile. The one change it cannot see is a slot freed and
/// reused for a new stack whose guard starts at the same address; then it may read the new
/// stack's size for the old one, which only matters for a stack being replaced while another
/// thread faults in its guard page.
struct GuardSlot {
    /// First byte of the guard, or 0 for a free slot.
    start: AtomicUsize,
    /// One past the last guard byte.
    end: AtomicUsize,
    /// Usable bytes of the stack above the guard, for the report.
    stack_bytes: AtomicUsize,
}

impl GuardSlot {
    fn free() -> GuardSlot {
        GuardSlot {
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            stack_bytes: AtomicUsize::new(0),
        }
    }
}

/// What only writers need: which slot each live guard is in, and which slots are free.
struct Registry {
    /// The slot of every live guard, by the guard's first byte.
    slot_of: BTreeMap<usize, usize>,
    /// Slots freed by [`unregister_guard`], reused first.
    free: Vec<usize>,
    /// How many slots have ever been handed out: the next fresh one.
    used: usize,
}

/// The writers' side of [`TABLE`]. Locked when a stack is mapped or unmapped, never by the
/// fault handler.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    slot_of: BTreeMap::new(),
    free: Vec::new(),
    used: 0,
});

/// The slot numbered `index` (counting across chunks), allocating its chunk if need be.
/// Called with [`REGISTRY`] locked, so chunks are created in order.
fn slot(index: usize) -> &'static GuardSlot {
    let (chunk, offset) = chunk_and_offset(index);
    let slots = TABLE[chunk].get_or_init(|| {
        (0..FIRST_CHUNK_SLOTS << chunk)
            .map(|_| GuardSlot::free())
            .collect()
    });
    &slots[offset]
}

/// Which chunk of [`TABLE`] holds slot `index`, and where in it.
fn chunk_and_offset(index: usize) -> (usize, usize) {
    let chunk = (index / FIRST_CHUNK_SLOTS + 1).ilog2() as usize;
    (chunk, index - FIRST_CHUNK_SLOTS * ((1 << chunk) - 1))
}

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

/// Records `[start, start + len)` for each of `starts` as the guard of a stack with
/// `stack_bytes` usable bytes, taking the registry's lock once for them all (a batch of stacks,
/// `stack::batch`), and installs the fault handler on first use.
pub(crate) fn register_guards(
    starts: impl IntoIterator<Item = usize>,
    len: usize,
    stack_bytes: usize,
) {
    install_handler();
    let mut registry = lock_registry();
    for start in starts {
        register_locked(&mut registry, start, len, stack_bytes);
    }
}

/// Records one guard, with the registry locked.
fn register_locked(registry: &mut Registry, start: usize, len: usize, stack_bytes: usize) {
    debug_assert!(start != 0 && len != 0);
    let index = match registry.free.pop() {
        Some(index) => index,
        None => {
            registry.used += 1;
            registry.used - 1
        }
    };
    let slot = slot(index);
    // The slot's `start` is 0 (it is free): a handler that reads any of the stores below
    // and then re-reads `start` sees 0 or the new value, never the old one (see GuardSlot).
    fence(Ordering::Release);
    slot.end.store(start + len, Ordering::Relaxed);
    slot.stack_bytes.store(stack_bytes, Ordering::Relaxed);
    slot.start.store(start, Ordering::Release);
    registry.slot_of.insert(start, index);
}

/// The bit of a [`GuardSlot`]'s `stack_bytes` that marks a compacted stack's range (the
/// checking mode of `runtime::compaction`) rather than a guard page; the other bits hold the
/// id of the green thread whose stack it is.
const COMPACTED: usize = 1 << (usize::BITS - 1);

/// Records `[start, start + len)`, the usable range of green thread `green_thread`'s stack,
/// as compacted and made inaccessible (the checking mode of `runtime::compaction`): a fault
/// there is reported as a touch of a compacted stack, naming both green threads, and aborts.
/// [`unregister_guard`] forgets it.
#[cfg_attr(not(greenweave_compact_check), allow(dead_code))]
pub(crate) fn register_compacted(start: usize, len: usize, green_thread: u64) {
    install_handler();
    let mut registry = lock_registry();
    register_locked(
        &mut registry,
        start,
        len,
        COMPACTED | (green_thread as usize & !COMPACTED),
    );
}

/// Forgets the guard starting at `start`.
pub(crate) fn unregister_guard(start: usize) {
    let mut registry = lock_registry();
    let Some(index) = registry.slot_of.remove(&start) else {
        return;
    };
    slot(index).start.store(0, Ordering::Release);
    registry.free.push(index);
}

fn lock_registry() -> MutexGuard<'static, Registry> {
    // The registry stays consistent even if a holder panicked (an allocation failure in
    // `insert` or `push` aborts rather than unwinding halfway), so poisoning carries no
    // information here.
    REGISTRY
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
        if stack_bytes & COMPACTED != 0 {
            report_compacted_touch_and_abort(address, stack_bytes & !COMPACTED);
        }
        report_overflow_and_abort(stack_bytes);
    }
    forward(signal, info, context);
}

/// The usable size of the stack whose guard contains `address`, if any.
///
/// Reads [`TABLE`] without a lock, so it answers even when the faulting thread was itself
/// mapping or unmapping a stack (and held [`REGISTRY`]'s lock) when its stack ran out.
fn guarded_stack_size(address: usize) -> Option<usize> {
    for chunk in &TABLE {
        // `get` never blocks; chunks are published in order, so the first missing one ends
        // the table.
        let slots = chunk.get()?;
        for slot in slots.iter() {
            let start = slot.start.load(Ordering::Acquire);
            if start == 0 || address < start {
                continue;
            }
            let end = slot.end.load(Ordering::Relaxed);
            let stack_bytes = slot.stack_bytes.load(Ordering::Relaxed);
            // Seqlock check: if `start` is unchanged, `end` and `stack_bytes` belong to it.
            fence(Ordering::Acquire);
            if address < end && slot.start.load(Ordering::Relaxed) == start {
                return Some(stack_bytes);
            }
        }
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

/// Writes the checking mode's report of a touch of a compacted stack and aborts.
/// Async-signal-safe, as the overflow report.
fn report_compacted_touch_and_abort(address: usize, owner: usize) -> ! {
    let mut thread_name = [0u8; 64];
    let mut message = MessageBuffer::new();
    message.push(b"\ngreenweave (compaction checking mode): green thread '");
    push_green_name(&mut message);
    message.push(b"' on thread '");
    message.push(os_thread_name(&mut thread_name));
    message.push(b"' touched address ");
    message.push_decimal(address);
    message.push(b" on the stack of green thread #");
    message.push_decimal(owner);
    message.push(
        b", which was parked and compacted (its frames copied to the heap, its pages \
          released): without the checking mode it would have read zeros. Whatever lent that \
          stack must keep it from being compacted (runtime::compaction, ARCHITECTURE.md: \
          \"Who may touch a parked stack\")\n",
    );
    message.push(b"fatal runtime error: compacted stack touched, aborting\n");
    write_and_abort(&message)
}

/// Writes `message` to stderr and aborts. Async-signal-safe.
fn write_and_abort(message: &MessageBuffer) -> ! {
    // SAFETY: write(2) and abort(3) are async-signal-safe (and libc's `write` was resolved at
    // load time, with the hooks on); the buffer is valid for its length.
    unsafe {
        crate::sys::real::write(
            libc::STDERR_FILENO,
            message.bytes.as_ptr().cast(),
            message.len,
        );
        libc::abort()
    }
}

/// Appends the name of the green thread running on this OS thread, as the registered
/// [`GreenNameSource`] gives it (cut to 128 bytes), or `<unnamed>`. Async-signal-safe.
fn push_green_name(message: &mut MessageBuffer) {
    let green_name = GREEN_NAME_SOURCE.load(Ordering::Acquire);
    let green_name = if green_name.is_null() {
        None
    } else {
        // SAFETY: only `set_green_name_source` stores here, always a `GreenNameSource`.
        let source: GreenNameSource = unsafe { core::mem::transmute(green_name) };
        // SAFETY: the source's contract: async-signal-safe, valid for the current thread.
        unsafe { source() }
    };
    let green_name = green_name.unwrap_or(b"<unnamed>");
    message.push(&green_name[..green_name.len().min(128)]);
}

/// Writes the overflow report to stderr and aborts. Async-signal-safe: no allocation, no locks.
fn report_overflow_and_abort(stack_bytes: usize) -> ! {
    let mut thread_name = [0u8; 64];
    let mut message = MessageBuffer::new();
    message.push(b"\ngreen thread '");
    // A long name is cut short so that the advice and the last line always fit.
    push_green_name(&mut message);
    message.push(b"' on thread '");
    message.push(os_thread_name(&mut thread_name));
    message.push(b"' has overflowed its stack (");
    message.push_decimal(stack_bytes / 1024);
    message.push(b" KiB)\n");
    message.push(STACK_SIZE_HELP);
    message.push(b"\nfatal runtime error: stack overflow in a greenweave coroutine, aborting\n");
    write_and_abort(&message)
}

/// The overflow report's advice. The handler cannot tell which kind of stack overflowed (a
/// spawned green thread's, `run`'s main one, a coroutine's inside either), so it names the
/// setting for each.
const STACK_SIZE_HELP: &[u8] = b"help: give it a larger stack: \
    greenweave::thread::Builder::stack_size for a spawned green thread \
    (Runtime::builder().stack_size for all of them), \
    Runtime::builder().main_stack_size for the main green thread of run (8 MiB by default), \
    the Stack given to a Coroutine or Greenlet";

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
    bytes: [u8; 1024],
    len: usize,
}

impl MessageBuffer {
    fn new() -> Self {
        MessageBuffer {
            bytes: [0; 1024],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_table_slots_are_numbered_consecutively_across_chunks_that_double_in_size() {
        let mut expected = Vec::new();
        for chunk in 0..4 {
            for offset in 0..FIRST_CHUNK_SLOTS << chunk {
                expected.push((chunk, offset));
            }
        }
        let numbered: Vec<_> = (0..expected.len()).map(chunk_and_offset).collect();
        assert_eq!(numbered, expected);
        // The last slot of the table is the last slot of its last chunk.
        let capacity = FIRST_CHUNK_SLOTS * ((1 << TABLE_CHUNKS) - 1);
        assert_eq!(
            chunk_and_offset(capacity - 1),
            (
                TABLE_CHUNKS - 1,
                (FIRST_CHUNK_SLOTS << (TABLE_CHUNKS - 1)) - 1
            )
        );
    }

    #[test]
    fn a_registered_guard_is_found_without_the_lock_and_forgotten_when_unregistered() {
        // Addresses inside a mapping of our own, so no real stack's guard can overlap them.
        let reserved = MmapOptions::new().len(3 * 4096).map_anon().unwrap();
        let start = reserved.as_ptr() as usize;
        register_guards([start], 4096, 8192);
        let held = lock_registry();
        assert_eq!(guarded_stack_size(start), Some(8192));
        assert_eq!(guarded_stack_size(start + 4095), Some(8192));
        assert_eq!(guarded_stack_size(start + 4096), None);
        drop(held);
        unregister_guard(start);
        assert_eq!(guarded_stack_size(start), None);
    }
}
