//! Futex waits that park only the green thread: the hooked `syscall(SYS_futex, ...)`.
//!
//! Every lock, condvar, `Once`, channel and `thread::park` of std waits and wakes with
//! `libc::syscall(SYS_futex, ...)`, and so do parking_lot and crossbeam. The binary's own
//! `syscall` (`asm/hooks_<arch>.S`, a trampoline: `syscall` is variadic) sends every other
//! system call number to libc's `syscall` with its registers untouched, a futex wake to libc's
//! too while no green thread waits on any futex (a fence, one load and a branch), and the rest
//! here.
//!
//! - `FUTEX_WAIT` / `FUTEX_WAIT_BITSET` from a green thread: the green thread is queued in the
//!   process-wide futex table (`futex_table`) if the word still holds the expected value, and
//!   parks until a wake takes it off the table, or its timeout (`ETIMEDOUT`). No unwind may
//!   cross std's C-ABI call, so a `time::timeout` scope does not end such a wait, and a
//!   cancellation ends it as a spurious wake-up (return 0): the caller re-checks its lock and,
//!   if it must wait again, calls again, and each call meanwhile raises and catches the
//!   cancellation at once, counted as a delivery, so the runtime's shutdown gives up on a green
//!   thread that std keeps waiting (after 64, as for any green thread that will not end) instead
//!   of waiting for it for ever.
//! - `FUTEX_WAKE` / `FUTEX_WAKE_BITSET` from any thread: wakes the kernel's waiters first (an
//!   OS thread woken can always run; a green waiter only when its scheduler does, which may be
//!   asleep in the kernel on this very word), then green waiters, oldest first, for what is
//!   left of the count.
//! - `FUTEX_REQUEUE` / `FUTEX_CMP_REQUEUE` and `FUTEX_WAKE_OP`: the same for green waiters, then
//!   the kernel's. Priority-inheritance operations go to the kernel unchanged: a green thread
//!   waiting in one blocks its OS thread.
//! - A non-private (process-shared) wait may be woken from another process, which this table
//!   never sees: such a green wait also looks at the word every [`SHARED_RECHECK`] and returns
//!   once it changed.
//!
//! Everywhere else (a plain OS thread, the scheduler, a green thread that is unwinding) every
//! operation is the kernel's.
//!
//! # One parker per OS thread
//!
//! std's `thread::park` (and so std's mpsc receivers, and crates such as `reqwest::blocking`
//! that wait with it) waits on one futex word per OS thread, the parker of its `Thread`, which
//! every green thread of that OS thread shares: `EMPTY` (0), `PARKED` (-1), `NOTIFIED` (1).
//! `park` moves it down by one (`NOTIFIED` -> `EMPTY` returns at once) and waits while it is
//! `PARKED`, making no system call when it is anything else; `unpark` swaps in `NOTIFIED` and
//! makes a futex wake only if it found `PARKED`. Left so, a second green thread's `park` would
//! move a `PARKED` word to -2 and spin for ever in user space, where no hook sees it.
//!
//! So the word's address is learnt per OS thread when its scheduler starts (an empty
//! `park_timeout` whose futex call is watched), and a green thread's wait on it does this:
//! - It gives the word back to `EMPTY` (under the table's bucket lock, unless an unpark is
//!   already there to take), so the next green thread's `park` comes here too.
//! - An unpark then makes no system call; the scheduler looks for `NOTIFIED` whenever it polls
//!   (one thread-local load while no green thread waits there), and before it sleeps in
//!   `epoll_wait` it makes the word `PARKED`, so that an unpark from another OS thread does make
//!   the futex wake, which reaches the waiters through the table and wakes the worker (the word
//!   is `EMPTY` again before any green thread runs).
//! - Any unpark wakes *every* green thread waiting there: it names the OS thread, not one of
//!   them, and `park` may return spuriously (every caller re-checks). Each leaves with the word
//!   `NOTIFIED`, which its `park` takes.
//!
//! Where it stops: a `park` or `park_timeout` of a green thread that runs between an unpark and
//! the scheduler's next poll takes the token itself (in user space) and returns, and the green
//! threads already waiting do not learn of it. So while two or more green threads of one OS
//! thread wait there at once, each also re-checks every [`PARKER_RECHECK`]: a token taken so
//! costs that delay (and a `park_timeout` that times out on a `NOTIFIED` word wakes the others
//! first). A green thread waiting alone costs nothing more, and is exact unless another green
//! thread's `park` takes its token and that green thread then never waits there again while it
//! waits (the unpark and that `park` must both fall between two polls of the scheduler): it
//! then waits for the next unpark of its OS thread.
//! [`greenweave::sync::mpsc`](crate::sync::mpsc) and the runtime's own parking have none of
//! this and are the better choice in code written for green threads.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use libc::{c_int, c_long, c_void, timespec};

use super::futex_table::{self, Enqueued, Waiter};
use super::wait;
use crate::runtime::scheduler;
use crate::runtime::task::{Wait, Wake};
use crate::sys::fd_state::{errno, set_errno};

const FUTEX_WAIT: c_int = 0;
const FUTEX_WAKE: c_int = 1;
const FUTEX_REQUEUE: c_int = 3;
const FUTEX_CMP_REQUEUE: c_int = 4;
const FUTEX_WAKE_OP: c_int = 5;
const FUTEX_WAIT_BITSET: c_int = 9;
const FUTEX_WAKE_BITSET: c_int = 10;
/// The operation without its flags (`FUTEX_PRIVATE_FLAG`, `FUTEX_CLOCK_REALTIME`).
const FUTEX_COMMAND_MASK: c_int = 0x7f;

/// How often a green thread in a process-shared futex wait looks at the word, since a wake
/// from another process reaches only the kernel.
pub(super) const SHARED_RECHECK: Duration = Duration::from_millis(5);

/// How often a green thread waiting on its OS thread's std parker re-checks while another
/// green thread of that OS thread waits there too (see "One parker per OS thread").
pub(super) const PARKER_RECHECK: Duration = Duration::from_millis(5);

/// The parker's states (std's `thread_parking/futex.rs`), as the word's `u32`.
const PARKER_EMPTY: u32 = 0;
const PARKER_NOTIFIED: u32 = 1;
const PARKER_PARKED: u32 = u32::MAX;

/// libc's `syscall`, the next definition after the binary's: the trampoline jumps to it for
/// every call that is not ours. Resolved at load time (below), or by the trampoline on its
/// first call if that comes earlier (`greenweave_resolve_real_syscall`).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)] // the assembly names it; lower case as a C symbol
pub static greenweave_real_syscall: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Looks up libc's `syscall` and remembers it; returns it. Called by the trampoline (with
/// every argument register saved) when the address is not known yet, and at load time.
#[unsafe(no_mangle)]
pub extern "C" fn greenweave_resolve_real_syscall() -> *mut c_void {
    // SAFETY: a NUL-terminated name; RTLD_NEXT is a pseudo-handle dlsym accepts.
    let address = unsafe { libc::dlsym(libc::RTLD_NEXT, c"syscall".as_ptr()) };
    if address.is_null() {
        let message = b"greenweave hooks: dlsym(RTLD_NEXT, \"syscall\") found no libc syscall \
                        after greenweave's (is the binary static?)\n";
        // SAFETY: a live buffer to stderr, through libc's own write (not a hook).
        unsafe { crate::sys::real::write(2, message.as_ptr().cast(), message.len()) };
        std::process::abort();
    }
    greenweave_real_syscall.store(address, Ordering::Release);
    address
}

extern "C" fn resolve_at_load() {
    greenweave_resolve_real_syscall();
}

/// Runs `resolve_at_load` as a constructor of the binary (before `main`).
#[used]
#[unsafe(link_section = ".init_array")]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_at_load;

/// The kernel's futex call, through libc's `syscall`.
///
/// # Safety
/// That of the futex operation: the pointers are what `op` expects.
unsafe fn kernel_futex(
    word: usize,
    op: c_int,
    value: u32,
    timeout_or_value2: usize,
    word2: usize,
    value3: u32,
) -> c_long {
    let mut address = greenweave_real_syscall.load(Ordering::Acquire);
    if address.is_null() {
        address = greenweave_resolve_real_syscall();
    }
    // SAFETY: the address is libc's `long syscall(long number, ...)`.
    let syscall: unsafe extern "C" fn(c_long, ...) -> c_long =
        unsafe { std::mem::transmute::<*mut c_void, _>(address) };
    // SAFETY: the caller upholds the operation's contract.
    unsafe {
        syscall(
            libc::SYS_futex,
            word,
            op,
            value,
            timeout_or_value2,
            word2,
            value3,
        )
    }
}

/// `syscall(SYS_futex, word, op, value, timeout, word2, value3)`, reached from the `syscall`
/// trampoline for futex waits (from any thread) and for other futex operations while a green
/// thread waits on some futex. Arguments come as full registers: the variadic caller leaves
/// the upper half of an `int` unspecified, so each is narrowed to the width the kernel reads.
///
/// # Safety
/// That of the futex system call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn greenweave_hook_futex(
    word: usize,
    op: usize,
    value: usize,
    timeout_or_value2: usize,
    word2: usize,
    value3: usize,
) -> c_long {
    let op = op as c_int;
    let value = value as u32;
    let value3 = value3 as u32;
    // SAFETY (every call below): the caller's contract is the futex call's, passed on.
    let pass_on = || unsafe { kernel_futex(word, op, value, timeout_or_value2, word2, value3) };
    if PARKER.get() == DISCOVERING {
        // `learn_std_parker`'s own `park_timeout`: learn the word, let the kernel wait.
        PARKER.set(word);
        return pass_on();
    }
    match op & FUTEX_COMMAND_MASK {
        FUTEX_WAIT | FUTEX_WAIT_BITSET if scheduler::can_park_here() => {
            let bitset = if op & FUTEX_COMMAND_MASK == FUTEX_WAIT {
                u32::MAX
            } else {
                value3
            };
            // SAFETY: the caller passes a valid word and timeout pointer, as for the kernel.
            unsafe {
                wait(
                    word,
                    op,
                    value,
                    timeout_or_value2 as *const timespec,
                    bitset,
                )
            }
        }
        FUTEX_WAKE | FUTEX_WAKE_BITSET => {
            let bitset = if op & FUTEX_COMMAND_MASK == FUTEX_WAKE {
                u32::MAX
            } else {
                value3
            };
            if bitset == 0 {
                return pass_on(); // the kernel's EINVAL
            }
            kernel_then_green(value, pass_on, |left| futex_table::wake(word, bitset, left))
        }
        FUTEX_REQUEUE | FUTEX_CMP_REQUEUE if futex_table::any_green_waiter() => {
            // SAFETY: the caller's words, as for the kernel.
            unsafe { requeue(word, op, value, timeout_or_value2, word2, value3) }
        }
        FUTEX_WAKE_OP if futex_table::any_green_waiter() => {
            // SAFETY: the caller's words, as for the kernel.
            unsafe { wake_op(word, op, value, timeout_or_value2, word2, value3) }
        }
        _ => pass_on(),
    }
}

/// A wake count as the kernel reads it (an `int`; negative counts wake nobody here).
fn count(value: u32) -> usize {
    usize::try_from(value as i32).unwrap_or(0)
}

/// A wake of up to `requested` waiters: the kernel's first (`kernel`, the call with the full
/// count), then green waiters for what is left (`green`, given that count). Kernel waiters
/// first because a woken OS thread can always run, while a green waiter runs only when its
/// scheduler does, and that scheduler may itself be one of the kernel's waiters on this very
/// word (the runtime's own locks are taken by green threads and by schedulers alike): handing
/// the one wake of a mutex's unlock to that green waiter would leave its OS thread asleep in
/// the kernel for ever. Returns the total, or the kernel's error if it failed.
fn kernel_then_green(
    requested: u32,
    kernel: impl FnOnce() -> c_long,
    green: impl FnOnce(usize) -> usize,
) -> c_long {
    let woken = kernel();
    if woken < 0 {
        return woken;
    }
    let left = count(requested).saturating_sub(usize::try_from(woken).unwrap_or(0));
    woken + green(left) as c_long
}

/// What a futex word's address is read as.
///
/// # Safety
/// `word` is the address of a live, aligned `u32` (the futex contract).
unsafe fn word_at<'a>(word: usize) -> &'a AtomicU32 {
    // SAFETY: the caller's contract; the kernel reads the word atomically too.
    unsafe { &*(word as *const AtomicU32) }
}

/// A green thread's futex wait.
///
/// # Safety
/// `word` is a live futex word; `timeout` is null or a live timespec.
unsafe fn wait(
    word: usize,
    op: c_int,
    expected: u32,
    timeout: *const timespec,
    bitset: u32,
) -> c_long {
    if bitset == 0 || !word.is_multiple_of(4) {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's contract: `timeout` is null or live.
    let deadline = match unsafe { deadline_of(op, timeout) } {
        Ok(deadline) => deadline,
        Err(error) => {
            set_errno(error);
            return -1;
        }
    };
    if deadline.is_some_and(|deadline| deadline <= Instant::now()) {
        // An expired timeout: the kernel still checks the value first.
        // SAFETY: the caller's contract.
        let current = unsafe { word_at(word) }.load(Ordering::SeqCst);
        set_errno(if current == expected {
            libc::ETIMEDOUT
        } else {
            libc::EAGAIN
        });
        return -1;
    }
    let parker = word == this_threads_parker();
    if scheduler::cancel_requested() {
        deliver_pending_cancellation(word);
        if parker {
            // SAFETY: the caller's contract. A token, for `park` to take and return.
            unsafe { word_at(word) }.store(PARKER_NOTIFIED, Ordering::SeqCst);
        }
        return 0;
    }
    if parker {
        // SAFETY: as above.
        return unsafe { wait_on_parker(word, deadline) };
    }
    if futex_table::has_waiter(word) && is_thread_local(word) {
        two_waiters_on_a_thread_local_word(word);
    }
    let shared = op & libc::FUTEX_PRIVATE_FLAG == 0;
    let waiter = Waiter::for_current_green_thread(word, bitset, false);
    // SAFETY: the caller's contract.
    let still_expected = || unsafe { word_at(word) }.load(Ordering::SeqCst) == expected;
    if let Enqueued::ValueChanged = futex_table::enqueue(&waiter, still_expected, |_| {}) {
        set_errno(libc::EAGAIN);
        return -1;
    }
    loop {
        let recheck = shared.then(|| Instant::now() + SHARED_RECHECK);
        let park_deadline = earliest(deadline, recheck);
        let wake = park_for("a futex wait (hooked)", word, park_deadline);
        if waiter.is_woken() {
            return 0;
        }
        let timed_out = deadline.is_some_and(|deadline| Instant::now() >= deadline);
        let shared_changed = shared && wake == Wake::TimedOut && !timed_out && !still_expected();
        if wake == Wake::TimedOut && !timed_out && !shared_changed {
            continue; // a re-check of a shared word that still holds the value
        }
        // Timed out, interrupted, the shared word changed, or a spurious wake-up: leave the
        // table, unless a waker took the waiter off first (then this was its wake-up).
        if !futex_table::withdraw(&waiter) {
            return 0;
        }
        if timed_out {
            set_errno(libc::ETIMEDOUT);
            return -1;
        }
        return 0;
    }
}

/// Raises the running green thread's pending cancellation at a park point and catches it:
/// the scheduler counts the delivery (letting the other green threads run from the second on),
/// so shutdown can give up on a green thread that std's futex loop keeps sending back here.
/// The caller then returns a spurious wake-up.
fn deliver_pending_cancellation(word: usize) {
    let delivered = wait::park(
        "a futex wait (hooked)",
        Wait::Futex(word),
        None,
        None,
        |_, _| {},
    );
    debug_assert!(
        delivered.is_err(),
        "a pending cancellation is raised at once"
    );
}

/// Parks for a futex wait until woken or `deadline`. Uninterruptible: neither a cancellation
/// nor a `time::timeout` scope can unwind through std's C-ABI call; a cancellation ends the
/// park as [`Wake::Cancelled`] and is raised by the next wait (`deliver_pending_cancellation`).
fn park_for(what: &'static str, word: usize, deadline: Option<Instant>) -> Wake {
    scheduler::park_uninterruptible_until(what, Wait::Futex(word), deadline, |_, _| {})
}

/// The earlier of two optional deadlines.
fn earliest(first: Option<Instant>, second: Option<Instant>) -> Option<Instant> {
    match (first, second) {
        (Some(first), Some(second)) => Some(first.min(second)),
        (first, None) => first,
        (None, second) => second,
    }
}

/// The deadline of a wait's timeout: relative for `FUTEX_WAIT`, absolute for
/// `FUTEX_WAIT_BITSET` (on `CLOCK_MONOTONIC`, or `CLOCK_REALTIME` with
/// `FUTEX_CLOCK_REALTIME`); `Err(errno)` for a timespec the kernel refuses.
///
/// # Safety
/// `timeout` is null or a live timespec.
unsafe fn deadline_of(op: c_int, timeout: *const timespec) -> Result<Option<Instant>, c_int> {
    if timeout.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let timeout = unsafe { *timeout };
    if timeout.tv_sec < 0 || !(0..1_000_000_000).contains(&timeout.tv_nsec) {
        return Err(libc::EINVAL);
    }
    let given = Duration::new(timeout.tv_sec as u64, timeout.tv_nsec as u32);
    let now = Instant::now();
    if op & FUTEX_COMMAND_MASK == FUTEX_WAIT {
        return Ok(Some(now.checked_add(given).unwrap_or(now + FAR_FUTURE)));
    }
    let clock = if op & libc::FUTEX_CLOCK_REALTIME != 0 {
        libc::CLOCK_REALTIME
    } else {
        libc::CLOCK_MONOTONIC
    };
    let mut clock_now = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a live timespec to fill.
    unsafe { libc::clock_gettime(clock, &mut clock_now) };
    let clock_now = Duration::new(clock_now.tv_sec as u64, clock_now.tv_nsec as u32);
    let left = given.saturating_sub(clock_now);
    Ok(Some(now.checked_add(left).unwrap_or(now + FAR_FUTURE)))
}

/// A deadline that stands for "never" when a timeout overflows `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `FUTEX_REQUEUE` / `FUTEX_CMP_REQUEUE` while green threads wait somewhere: the green waiters
/// first, then the kernel's for what is left. Not kernel first, as a plain wake is: the
/// kernel's `CMP_REQUEUE` returns how many it woke and moved together, so what is left of each
/// count for the green waiters could not be told. std and parking_lot never requeue.
///
/// # Safety
/// The futex contract: `word` and `word2` are live futex words.
unsafe fn requeue(
    word: usize,
    op: c_int,
    wake_count: u32,
    move_count: usize,
    word2: usize,
    compare: u32,
) -> c_long {
    let compares = op & FUTEX_COMMAND_MASK == FUTEX_CMP_REQUEUE;
    let move_count_int = move_count as u32;
    // SAFETY: the caller's contract.
    let still_expected = || !compares || unsafe { word_at(word) }.load(Ordering::SeqCst) == compare;
    let Some(green) = futex_table::requeue(
        word,
        word2,
        count(wake_count),
        count(move_count_int),
        still_expected,
    ) else {
        set_errno(libc::EAGAIN);
        return -1;
    };
    let wake_left = count(wake_count).saturating_sub(green.woken);
    let move_left = count(move_count_int).saturating_sub(green.moved);
    // SAFETY: the caller's contract, with smaller counts.
    let kernel = unsafe { kernel_futex(word, op, wake_left as u32, move_left, word2, compare) };
    let green_total = if compares {
        green.woken + green.moved
    } else {
        green.woken
    };
    match kernel {
        -1 if green_total > 0 || errno() == libc::EAGAIN && green.woken > 0 => {
            green_total as c_long
        }
        -1 => -1,
        kernel => kernel + green_total as c_long,
    }
}

/// `FUTEX_WAKE_OP` while green threads wait somewhere: the operation on `word2` is made here
/// (atomically, as the kernel would), then the waiters of `word` are woken, and those of
/// `word2` if the comparison with its old value holds; each time the kernel's waiters first,
/// with a plain wake, then green ones (`kernel_then_green`).
///
/// # Safety
/// The futex contract: `word` and `word2` are live futex words.
unsafe fn wake_op(
    word: usize,
    op: c_int,
    wake_count: u32,
    wake_count2: usize,
    word2: usize,
    encoded: u32,
) -> c_long {
    let private = op & libc::FUTEX_PRIVATE_FLAG;
    let operation = (encoded >> 28) & 0x7;
    let shift = (encoded >> 28) & 0x8 != 0;
    let comparison = (encoded >> 24) & 0xf;
    let sign_extend = |field: u32| ((field << 20) as i32 >> 20) as u32;
    let mut argument = sign_extend((encoded >> 12) & 0xfff);
    let compare_with = sign_extend(encoded & 0xfff);
    if shift {
        if argument > 31 {
            set_errno(libc::EINVAL);
            return -1;
        }
        argument = 1 << argument;
    }
    if operation > 4 || comparison > 5 {
        set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: the caller's contract.
    let target = unsafe { word_at(word2) };
    let old = target
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |old| {
            Some(match operation {
                0 => argument,
                1 => old.wrapping_add(argument),
                2 => old | argument,
                3 => old & !argument,
                _ => old ^ argument,
            })
        })
        .unwrap_or_else(|old| old);
    let (old, compare_with) = (old as i32, compare_with as i32);
    let holds = match comparison {
        0 => old == compare_with,
        1 => old != compare_with,
        2 => old < compare_with,
        3 => old <= compare_with,
        4 => old > compare_with,
        _ => old >= compare_with,
    };
    let plain_wake = |address: usize, count: u32| {
        kernel_then_green(
            count,
            // SAFETY: the caller's word, a plain wake.
            || unsafe { kernel_futex(address, FUTEX_WAKE | private, count, 0, 0, 0) },
            |left| futex_table::wake(address, u32::MAX, left),
        )
        .max(0)
    };
    let mut woken = plain_wake(word, wake_count);
    if holds {
        woken += plain_wake(word2, wake_count2 as u32);
    }
    woken
}

thread_local! {
    /// The address of this OS thread's std parker word: 0 until learnt, [`DISCOVERING`] while
    /// being learnt, [`NO_PARKER`] if it could not be.
    static PARKER: Cell<usize> = const { Cell::new(0) };
}

/// [`PARKER`] while `learn_std_parker` watches for the futex call of its `park_timeout`.
const DISCOVERING: usize = 1;
/// [`PARKER`] when no futex call was seen (a std whose parker is not a futex word).
const NO_PARKER: usize = 2;

/// The address of this OS thread's std parker word, as [`learn_std_parker`] found it (0 if it
/// did not run here, [`NO_PARKER`] if it found none).
fn this_threads_parker() -> usize {
    PARKER.get()
}

/// Learns the address of this OS thread's std parker word; the scheduler calls it as it starts
/// on an OS thread, outside any green thread. A `park_timeout` with an empty token waits on
/// exactly that word, with a futex call the hook sees (`greenweave_hook_futex` records the
/// address while [`DISCOVERING`]). If an unpark token was pending, the first `park_timeout`
/// takes it without a futex call; then a second one is made. An unpark is given afterwards in
/// any case, so no token is lost (a spurious return from `park` is allowed).
///
/// Not learnt inside a green thread's wait: a `park` there has already made the word `PARKED`,
/// and the `park_timeout` would find it so and make no futex call.
pub(crate) fn learn_std_parker() {
    let known = PARKER.get();
    if known != 0 && known != DISCOVERING {
        return;
    }
    for _ in 0..2 {
        PARKER.set(DISCOVERING);
        std::thread::park_timeout(Duration::from_nanos(1));
        if PARKER.get() != DISCOVERING {
            break;
        }
    }
    if PARKER.get() == DISCOVERING {
        PARKER.set(NO_PARKER);
    }
    std::thread::current().unpark();
}

/// The executable's `PT_TLS` segment, `(size, align)`: `(0, 0)` if it has none; `usize::MAX`
/// in the size until looked up (several threads may look it up at once; they find the same).
static TLS_SEGMENT: [AtomicUsize; 2] = [AtomicUsize::new(usize::MAX), AtomicUsize::new(0)];

/// Whether `word` lies in this OS thread's static thread-local storage: a `thread_local!` of a
/// crate linked into the executable, such as parking_lot's per-thread waiter record.
fn is_thread_local(word: usize) -> bool {
    let mut size = TLS_SEGMENT[0].load(Ordering::Acquire);
    if size == usize::MAX {
        let (found_size, found_align) = executable_tls_segment();
        TLS_SEGMENT[1].store(found_align, Ordering::Relaxed);
        TLS_SEGMENT[0].store(found_size, Ordering::Release);
        size = found_size;
    }
    let align = TLS_SEGMENT[1].load(Ordering::Relaxed);
    size > 0 && crate::arch::executable_tls_block(size, align).contains(&word)
}

/// Reads the executable's `PT_TLS` program header: the first object `dl_iterate_phdr` reports
/// is the executable.
fn executable_tls_segment() -> (usize, usize) {
    unsafe extern "C" fn first_object(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        found: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a live info whose `dlpi_phdr` has `dlpi_phnum` headers, and
        // `found` is the `(usize, usize)` below.
        unsafe {
            let info = &*info;
            let headers = std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum));
            if let Some(tls) = headers.iter().find(|header| header.p_type == libc::PT_TLS) {
                *found.cast::<(usize, usize)>() = (tls.p_memsz as usize, tls.p_align as usize);
            }
        }
        1 // the executable is enough: stop
    }
    let mut found = (0usize, 0usize);
    // SAFETY: the callback writes only `found`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first_object), (&raw mut found).cast()) };
    found
}

/// Two green threads of one OS thread waiting on one thread-local futex word: the crate that
/// waits keeps a waiter record per OS thread (parking_lot's parking lot does), which every
/// green thread of that OS thread shares; the second has already rewritten the first's record
/// before its wait came here, so their queues are corrupt and nothing can be recovered. Says so
/// on stderr, with libc's `write` (std's stderr lock may be held), and aborts.
#[cold]
fn two_waiters_on_a_thread_local_word(word: usize) -> ! {
    let who = scheduler::describe_running_green_thread().unwrap_or_else(|| "?".to_owned());
    let message = format!(
        "greenweave: green thread {who} waited on the futex word at {word:#x} while another \
         green thread of the same OS thread waited on it. The word lies in that OS thread's \
         thread-local storage: the crate waiting keeps its waiter record per OS thread \
         (parking_lot's parking lot does, so parking_lot's Mutex, RwLock and Condvar and what is \
         built on them, such as r2d2), and green threads of one OS thread share it, so the two \
         waits have corrupted each other's queue entries. Aborting. In green threads use \
         greenweave::sync, or call such code through greenweave::unblock (each call on an OS \
         thread of its own).\n"
    );
    // SAFETY: a live buffer to stderr, through libc's own write (not a hook).
    unsafe { crate::sys::real::write(2, message.as_ptr().cast(), message.len()) };
    std::process::abort();
}

thread_local! {
    /// How many green threads of this OS thread wait on its parker now.
    static PARKER_WAITERS: Cell<usize> = const { Cell::new(0) };
    /// Whether the scheduler made the parker word `PARKED` before it slept
    /// ([`std_parker_before_sleep`]), to be made `EMPTY` again when it wakes.
    static PARKER_ARMED: Cell<bool> = const { Cell::new(false) };
}

/// A green thread's wait on its OS thread's std parker (see "One parker per OS thread"):
/// std's `park` has just moved the word from `EMPTY` to `PARKED`; a `NOTIFIED` word means an
/// unpark is there to take.
///
/// # Safety
/// `word` is this OS thread's parker word.
unsafe fn wait_on_parker(word: usize, deadline: Option<Instant>) -> c_long {
    // SAFETY: the caller's contract.
    let state = unsafe { word_at(word) };
    let waiter = Waiter::for_current_green_thread(word, u32::MAX, true);
    let crowded = PARKER_WAITERS.get() > 0;
    waiter.rechecks.store(crowded, Ordering::Relaxed);
    // Under the bucket's lock: take an unpark that is there, else give the word back to
    // `EMPTY`, so that the next green thread's `park` on this OS thread moves it to `PARKED`
    // and comes here too (from `PARKED`, its `fetch_sub` would leave -2, on which std's wait
    // returns at once and its `park` spins). The scheduler now watches for unparks.
    let still_waits = || loop {
        let current = state.load(Ordering::SeqCst);
        if current == PARKER_NOTIFIED {
            return false;
        }
        if current == PARKER_EMPTY
            || state
                .compare_exchange(current, PARKER_EMPTY, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return true;
        }
    };
    if let Enqueued::ValueChanged = futex_table::enqueue(&waiter, still_waits, |_| {}) {
        set_errno(libc::EAGAIN);
        return -1;
    }
    PARKER_WAITERS.set(PARKER_WAITERS.get() + 1);
    if crowded {
        // Those already parked without a re-check deadline come back and take one.
        futex_table::wake_unbounded_parker_waiters(word);
    }
    let started = Instant::now();
    let park_deadline = earliest(deadline, crowded.then(|| started + PARKER_RECHECK));
    // A long wait alone is looked at once (see `std_channel_report`).
    let mut look_at = (!crowded && !STD_CHANNEL_REPORTED.load(Ordering::Relaxed)).then(|| {
        (
            started + STD_CHANNEL_REPORT_AFTER,
            scheduler::runs_completed(),
        )
    });
    let wake = loop {
        let wake = park_for(
            "std::thread::park (hooked futex)",
            word,
            earliest(park_deadline, look_at.map(|(at, _)| at)),
        );
        let Some((at, runs_before)) = look_at.take() else {
            break wake;
        };
        if wake != Wake::TimedOut || waiter.is_woken() || park_deadline.is_some_and(|d| d <= at) {
            break wake;
        }
        // Still on the table: this was the look, not the end of the wait. A waker on another
        // OS thread reaches the green thread through its runtime's queue, which the scheduler
        // takes only once this green thread has parked again, so none is lost in between.
        let others_ran = scheduler::runs_completed().saturating_sub(runs_before) > 1;
        if others_ran {
            std_channel_report(started);
        }
    };
    PARKER_WAITERS.set(PARKER_WAITERS.get() - 1);
    let woken = waiter.is_woken() || !futex_table::withdraw(&waiter);
    let timed_out = deadline.is_some_and(|deadline| Instant::now() >= deadline);
    if !woken && timed_out && wake == Wake::TimedOut {
        if state.load(Ordering::SeqCst) == PARKER_NOTIFIED {
            // std's `park_timeout` takes this token on its way out, and it may have been meant
            // for another green thread waiting here: they all go and look.
            futex_table::wake(word, u32::MAX, 0);
        }
        set_errno(libc::ETIMEDOUT);
        return -1;
    }
    // Woken, re-checking, or interrupted: leave with a token, which `park` takes and returns
    // (spuriously, if nothing was meant for this green thread: the caller re-checks).
    state.store(PARKER_NOTIFIED, Ordering::SeqCst);
    0
}

/// How long a green thread waits alone on its OS thread's std parker, while other green threads
/// of that OS thread run, before [`std_channel_report`] looks at what it waits in.
const STD_CHANNEL_REPORT_AFTER: Duration = Duration::from_secs(1);

/// Whether [`std_channel_report`] has printed its report (once per process).
static STD_CHANNEL_REPORTED: AtomicBool = AtomicBool::new(false);

/// A green thread has waited [`STD_CHANNEL_REPORT_AFTER`] in std's `thread::park` while other
/// green threads of its OS thread ran. If it waits in a receive of std's mpsc channels (or
/// crossbeam-channel, whose rule is the same), a send from one of those green threads did not
/// wake it and never will: std's channels pass over a waiter on the sender's own OS thread
/// (its thread id, the address of a thread-local, is the same for every green thread of an OS
/// thread). A futex hook cannot change that rule, so this says so, once per process, on stderr
/// (libc's `write`: std's stderr lock may be held). Whether the wait is a channel's is read from
/// its backtrace (one capture per such wait, after a second of waiting), so a long
/// `thread::park` of another kind, such as a blocking client waiting for its own OS thread,
/// prints nothing.
#[cold]
#[inline(never)]
fn std_channel_report(started: Instant) {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    let channel = if trace.contains("crossbeam_channel") {
        "crossbeam-channel"
    } else if trace.contains("mpmc") || trace.contains("mpsc") {
        "std::sync::mpsc"
    } else {
        return;
    };
    if STD_CHANNEL_REPORTED.swap(true, Ordering::Relaxed) {
        return;
    }
    let who = scheduler::describe_running_green_thread().unwrap_or_else(|| "?".to_owned());
    let message = format!(
        "greenweave: green thread {who} has waited {:.1?} for a {channel} receive while other \
         green threads of its OS thread ran. A send from one of them never wakes it: {channel} \
         wakes no receiver on the sender's own OS thread, and every green thread of a worker is \
         that OS thread. It wakes at its timeout, when every sender is gone, or on a send from \
         another OS thread. Between green threads use greenweave::sync::mpsc (one worker) or \
         greenweave::sync::shared (any threads). (Printed once.)\n",
        started.elapsed(),
    );
    // SAFETY: a live buffer to stderr, through libc's own write (not a hook).
    unsafe { crate::sys::real::write(2, message.as_ptr().cast(), message.len()) };
}

/// The scheduler is about to sleep in `epoll_wait`: if green threads of this OS thread wait on
/// its std parker, makes the word `PARKED`, so that an unpark from another OS thread makes the
/// futex wake that reaches them (and the scheduler) through the futex table. Returns `false`,
/// having woken them, if an unpark is already there: the scheduler must not sleep then.
pub(crate) fn std_parker_before_sleep() -> bool {
    if PARKER_WAITERS.get() == 0 {
        return true;
    }
    // SAFETY: a green thread waits on this OS thread's parker, so its address was learnt, and
    // the `Thread` (and its parker) lives as long as the OS thread.
    let state = unsafe { word_at(PARKER.get()) };
    match state.compare_exchange(
        PARKER_EMPTY,
        PARKER_PARKED,
        Ordering::SeqCst,
        Ordering::SeqCst,
    ) {
        Ok(_) | Err(PARKER_PARKED) => {
            PARKER_ARMED.set(true);
            true
        }
        Err(PARKER_NOTIFIED) => {
            wake_std_parkers(state);
            false
        }
        Err(_) => true,
    }
}

/// The scheduler has polled (after a sleep, or every so many runs while busy): gives the
/// parker word back to `EMPTY` if [`std_parker_before_sleep`] made it `PARKED` (a green thread
/// may run next, and its `park` must find it so), and wakes every green thread waiting on it
/// if an unpark came meanwhile. One thread-local load while nobody waits there.
#[inline]
pub(crate) fn std_parker_after_poll() {
    if PARKER_WAITERS.get() != 0 || PARKER_ARMED.get() {
        look_at_std_parker();
    }
}

#[cold]
fn look_at_std_parker() {
    // SAFETY: as in `std_parker_before_sleep`.
    let state = unsafe { word_at(PARKER.get()) };
    if PARKER_ARMED.replace(false)
        && state
            .compare_exchange(
                PARKER_PARKED,
                PARKER_EMPTY,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
    {
        return;
    }
    if state.load(Ordering::SeqCst) == PARKER_NOTIFIED {
        wake_std_parkers(state);
    }
}

/// An unpark reached this OS thread's parker while green threads wait on it: it names the OS
/// thread, not one of them, so every one of them is woken (each leaves with a token for its
/// `park` to take, and re-checks), and the scheduler takes this token.
fn wake_std_parkers(state: &AtomicU32) {
    futex_table::wake(state.as_ptr() as usize, u32::MAX, 0);
    let _ = state.compare_exchange(
        PARKER_NOTIFIED,
        PARKER_EMPTY,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
}
