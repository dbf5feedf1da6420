//! The futex table: which green threads wait on which futex word, shared by every OS thread of
//! the process, so that a `FUTEX_WAKE` made anywhere (a green thread, a plain OS thread, another
//! worker, another runtime) finds the green waiters on its address.
//!
//! Owns: the buckets (a spin lock and a FIFO of [`Waiter`]s each, chosen by the word's
//! address), the process-wide count of green waiters that a wake reads first, and the barrier
//! that makes that one read enough.
//!
//! May not: block or park (it runs inside `syscall(SYS_futex)` itself, so a std `Mutex` here
//! would wait on a futex and come back in), nor touch a task: a waiter names its green thread
//! by [`TaskKey`] and the runtime's [`RemoteQueue`], which is how any OS thread may wake it.
//!
//! # No lost wake-up
//!
//! The kernel makes "the word still holds the expected value" and "the waiter is queued" one
//! step under its hash-bucket lock; here the bucket's spin lock does the same. A waiter counts
//! itself in [`GREEN_WAITERS`], then, under the bucket lock, reads the word and queues itself
//! only if it still holds the expected value. A waker has changed the word before it calls
//! `FUTEX_WAKE` (that is the futex protocol), then reads the count: zero means no green thread
//! waits anywhere and the wake goes straight to the kernel; otherwise it takes the bucket lock.
//!
//! For that read to be enough, the waker's store to the word and its read of the count must not
//! pass each other, which neither x86 (a store waits in the store buffer while a later load
//! goes ahead) nor aarch64 promise: the `syscall` trampoline runs a full fence (`mfence`,
//! `dmb ish`) between them, and the waiter one between counting itself and reading the word.
//! Then either the waker's store is visible to the waiter's read (it does not queue itself,
//! and returns `EAGAIN`), or the waker's read sees the count (and takes the bucket lock, which
//! orders the rest). A fence on every wake costs a few dozen cycles beside the system call the
//! wake makes anyway; the alternative, an asymmetric barrier (`membarrier`) on every green
//! wait, was measured at two system calls per std condvar round trip, and it interrupts every
//! CPU that runs a thread of the process, which does not scale with workers.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::hint;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};

use crate::runtime::scheduler::{self, RemoteQueue};
use crate::runtime::task::TaskKey;

/// How many green threads wait in the table. Read by the `syscall` trampoline
/// (`asm/hooks_<arch>.S`), after a fence, before anything else on a wake: zero sends the wake
/// straight to the kernel.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)] // the assembly names it; lower case as a C symbol
pub static greenweave_futex_green_waiters: AtomicUsize = AtomicUsize::new(0);

/// The count, by its Rust name.
use greenweave_futex_green_waiters as GREEN_WAITERS;

/// One green thread waiting on a futex word.
pub(super) struct Waiter {
    /// The word's address; changed (under both buckets' locks) when a requeue moves the waiter.
    address: AtomicUsize,
    /// `FUTEX_WAIT_BITSET`'s mask (all ones for `FUTEX_WAIT`): a wake whose mask shares no bit
    /// with it passes it by.
    bitset: u32,
    /// Whether a waker took it off the table to wake it (set before the wake-up is sent).
    woken: AtomicBool,
    /// A wait on its OS thread's std parker: every wake on its address wakes every such waiter
    /// (see `futex.rs`, "One parker per OS thread").
    pub(super) broadcast: bool,
    /// A parker waiter that parks with a deadline for re-checking (see `futex.rs`).
    pub(super) rechecks: AtomicBool,
    remote: Arc<RemoteQueue>,
    task: TaskKey,
}

impl Waiter {
    /// A waiter for the green thread running now, on `address`.
    pub(super) fn for_current_green_thread(
        address: usize,
        bitset: u32,
        broadcast: bool,
    ) -> Arc<Waiter> {
        let (remote, task) = scheduler::with_scheduler("a futex wait (hooked)", |scheduler| {
            (scheduler.remote.clone(), scheduler.current_task_key())
        });
        Arc::new(Waiter {
            address: AtomicUsize::new(address),
            bitset,
            woken: AtomicBool::new(false),
            broadcast,
            rechecks: AtomicBool::new(false),
            remote,
            task,
        })
    }

    /// Whether a waker took it off the table.
    pub(super) fn is_woken(&self) -> bool {
        self.woken.load(Ordering::Acquire)
    }

    /// Marks it woken and makes its green thread runnable: directly if that green thread's
    /// runtime runs on this OS thread, else through its runtime's wake-up queue. Called with
    /// no bucket locked (the remote queue takes a lock of its own).
    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        if !scheduler::wake_if_local(&self.remote, self.task, None) {
            self.remote.wake(self.task);
        }
    }
}

/// How many buckets; a power of two.
const BUCKETS: usize = 256;

/// The waiters of the addresses that hash to one bucket, in the order they came.
struct Bucket {
    locked: AtomicBool,
    waiters: UnsafeCell<VecDeque<Arc<Waiter>>>,
}

// SAFETY: `waiters` is only touched through a `BucketGuard`, which holds `locked`.
unsafe impl Sync for Bucket {}

static TABLE: [Bucket; BUCKETS] = [const {
    Bucket {
        locked: AtomicBool::new(false),
        waiters: UnsafeCell::new(VecDeque::new()),
    }
}; BUCKETS];

/// The bucket of `address` (Fibonacci hashing of the word's index).
fn bucket_index(address: usize) -> usize {
    let word = (address >> 2) as u64;
    (word.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BUCKETS.trailing_zeros())) as usize
}

/// A locked bucket.
struct BucketGuard(&'static Bucket);

impl BucketGuard {
    /// Spins for the bucket's lock: every section under it is a few queue operations (and an
    /// allocation when a queue grows), never a wait, so a spin is shorter than any sleep.
    fn lock(index: usize) -> BucketGuard {
        let bucket = &TABLE[index];
        let mut spins = 0u32;
        while bucket
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                hint::spin_loop();
            } else {
                // The holder was preempted: let it run. sched_yield is not hooked, and is not
                // a futex.
                // SAFETY: no arguments, no memory.
                unsafe { libc::sched_yield() };
            }
        }
        BucketGuard(bucket)
    }

    fn waiters(&mut self) -> &mut VecDeque<Arc<Waiter>> {
        // SAFETY: this guard holds the bucket's lock, and `&mut self` makes the borrow unique.
        unsafe { &mut *self.0.waiters.get() }
    }
}

impl Drop for BucketGuard {
    fn drop(&mut self) {
        self.0.locked.store(false, Ordering::Release);
    }
}

/// Counts one more green waiter, then fences (see the module docs): after it, a waker that
/// changed the word either is seen by the waiter's read of the word or sees the count. Must be
/// matched by one `uncount`, by the waiter (it did not queue itself) or by whoever takes it off
/// the table.
fn count_one() {
    GREEN_WAITERS.fetch_add(1, Ordering::SeqCst);
    fence(Ordering::SeqCst);
}

fn uncount(waiters: usize) {
    if waiters > 0 {
        GREEN_WAITERS.fetch_sub(waiters, Ordering::Release);
    }
}

/// Whether any green thread may be waiting on any futex (a wake must look at the table). The
/// caller has changed the futex word; the fence orders that store before this load, as the
/// trampoline's does.
#[inline]
pub(super) fn any_green_waiter() -> bool {
    fence(Ordering::SeqCst);
    GREEN_WAITERS.load(Ordering::Relaxed) != 0
}

/// What [`enqueue`] found when it read the word.
pub(super) enum Enqueued {
    /// The waiter is on the table.
    Waiting,
    /// The word did not hold what the caller expected: not queued (`EAGAIN`).
    ValueChanged,
}

/// Queues `waiter` at the back of its address's queue if `still_expected()`, read under the
/// bucket's lock after the waiter is counted, says the word still holds the expected value.
/// `before_queue` runs under the same lock just before the waiter is queued, with the bucket's
/// waiters (the parker case uses it to see who else waits).
pub(super) fn enqueue(
    waiter: &Arc<Waiter>,
    still_expected: impl FnOnce() -> bool,
    before_queue: impl FnOnce(&VecDeque<Arc<Waiter>>),
) -> Enqueued {
    count_one();
    let address = waiter.address.load(Ordering::Relaxed);
    let mut bucket = BucketGuard::lock(bucket_index(address));
    if !still_expected() {
        drop(bucket);
        uncount(1);
        return Enqueued::ValueChanged;
    }
    before_queue(bucket.waiters());
    bucket.waiters().push_back(waiter.clone());
    Enqueued::Waiting
}

/// Takes `waiter` off the table if it is still there (its wait timed out or was interrupted);
/// `false` if a waker took it off first, in which case it was woken and must say so.
pub(super) fn withdraw(waiter: &Arc<Waiter>) -> bool {
    loop {
        let address = waiter.address.load(Ordering::Acquire);
        let mut bucket = BucketGuard::lock(bucket_index(address));
        if waiter.address.load(Ordering::Acquire) != address {
            continue; // requeued meanwhile: look in the new bucket
        }
        let waiters = bucket.waiters();
        let Some(at) = waiters
            .iter()
            .position(|queued| Arc::ptr_eq(queued, waiter))
        else {
            return false;
        };
        waiters.remove(at);
        drop(bucket);
        uncount(1);
        return true;
    }
}

/// Whether a green thread waits on `address` now.
pub(super) fn has_waiter(address: usize) -> bool {
    if !any_green_waiter() {
        return false;
    }
    let mut bucket = BucketGuard::lock(bucket_index(address));
    bucket
        .waiters()
        .iter()
        .any(|waiter| waiter.address.load(Ordering::Relaxed) == address)
}

/// Whether a queued waiter matches a wake on `address` with mask `bitset`.
fn matches(waiter: &Waiter, address: usize, bitset: u32) -> bool {
    waiter.address.load(Ordering::Relaxed) == address && waiter.bitset & bitset != 0
}

/// Takes up to `count` waiters on `address` whose mask meets `bitset` off the queue, oldest
/// first, into `into`, and every parker waiter on `address` whatever the count (a wake on a
/// parker wakes them all, see `futex.rs`).
fn take_matching(
    waiters: &mut VecDeque<Arc<Waiter>>,
    address: usize,
    bitset: u32,
    count: usize,
    into: &mut Vec<Arc<Waiter>>,
) {
    let mut at = 0;
    let mut taken = 0;
    while at < waiters.len() {
        let waiter = &waiters[at];
        if matches(waiter, address, bitset) && (waiter.broadcast || taken < count) {
            let waiter = waiters.remove(at).expect("the index is in bounds");
            if !waiter.broadcast {
                taken += 1;
            }
            into.push(waiter);
        } else {
            at += 1;
        }
    }
}

/// Wakes up to `count` green waiters on `address` whose mask meets `bitset`, oldest first (and
/// every parker waiter there, even for a count of 0); returns how many.
pub(super) fn wake(address: usize, bitset: u32, count: usize) -> usize {
    if !any_green_waiter() {
        return 0;
    }
    let mut woken = Vec::new();
    let mut bucket = BucketGuard::lock(bucket_index(address));
    let waiters = bucket.waiters();
    // The common case, one waiter woken (a lock handed on, a condvar's notify_one): no list.
    if count == 1 {
        if let Some(at) = waiters
            .iter()
            .position(|waiter| matches(waiter, address, bitset))
        {
            if !waiters[at].broadcast {
                let waiter = waiters.remove(at).expect("the index is in bounds");
                drop(bucket);
                uncount(1);
                waiter.wake();
                return 1;
            }
        } else {
            return 0;
        }
    }
    take_matching(waiters, address, bitset, count, &mut woken);
    drop(bucket);
    uncount(woken.len());
    for waiter in &woken {
        waiter.wake();
    }
    woken.len()
}

/// Wakes the parker waiters on `address` that park without a re-check deadline (they come
/// back and park again with one); returns how many.
pub(super) fn wake_unbounded_parker_waiters(address: usize) -> usize {
    let mut woken = Vec::new();
    {
        let mut bucket = BucketGuard::lock(bucket_index(address));
        let waiters = bucket.waiters();
        let mut at = 0;
        while at < waiters.len() {
            let waiter = &waiters[at];
            if waiter.address.load(Ordering::Relaxed) == address
                && waiter.broadcast
                && !waiter.rechecks.load(Ordering::Relaxed)
            {
                woken.push(waiters.remove(at).expect("the index is in bounds"));
            } else {
                at += 1;
            }
        }
    }
    uncount(woken.len());
    for waiter in &woken {
        waiter.wake();
    }
    woken.len()
}

/// What a requeue did to the green waiters.
pub(super) struct Requeued {
    pub(super) woken: usize,
    pub(super) moved: usize,
}

/// `FUTEX_REQUEUE` / `FUTEX_CMP_REQUEUE` for the green waiters: if `still_expected()` (read with
/// both buckets locked), wakes up to `wake_count` waiters on `from` and moves up to
/// `move_count` of the rest to `to`; `None` if the word changed.
pub(super) fn requeue(
    from: usize,
    to: usize,
    wake_count: usize,
    move_count: usize,
    still_expected: impl FnOnce() -> bool,
) -> Option<Requeued> {
    let (first, second) = (bucket_index(from), bucket_index(to));
    // Two buckets are always locked in index order, so two requeues cannot deadlock.
    let mut low = BucketGuard::lock(first.min(second));
    let mut high = (first != second).then(|| BucketGuard::lock(first.max(second)));
    if !still_expected() {
        return None;
    }
    let mut woken = Vec::new();
    let mut moving = Vec::new();
    {
        // `low` holds the lower index, `high` (if the two differ) the higher.
        let source = match high.as_mut() {
            Some(high) if first > second => high.waiters(),
            _ => low.waiters(),
        };
        take_matching(source, from, u32::MAX, wake_count, &mut woken);
        take_matching(source, from, u32::MAX, move_count, &mut moving);
    }
    for waiter in &moving {
        waiter.address.store(to, Ordering::Release);
    }
    let moved = moving.len();
    let destination = match high.as_mut() {
        Some(high) if second > first => high.waiters(),
        _ => low.waiters(),
    };
    destination.extend(moving);
    drop(high);
    drop(low);
    uncount(woken.len());
    for waiter in &woken {
        waiter.wake();
    }
    Some(Requeued {
        woken: woken.len(),
        moved,
    })
}
