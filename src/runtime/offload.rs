//! Running a blocking call on another OS thread while only the calling green thread waits.
//!
//! Owns: each runtime's pool of helper OS threads (`BlockingPool`, sized by
//! [`Builder::max_blocking_threads`](crate::runtime::Builder::max_blocking_threads)), reached by
//! [`unblock`] (`'static` work: file I/O, CPU-heavy work) and by `on_pool` (work that borrows
//! from the green thread's stack: hostname resolution, the hooks' resolver calls). Either way
//! the green thread parks, and the helper wakes it through the runtime's remote queue when done.
//!
//! May not: let `on_pool`'s green thread return (or unwind) while a helper still uses what it
//! lent; make `unblock`'s green thread wait for a call it gave up on (a timeout, a
//! cancellation): `unblock` lends nothing, so the helper finishes on its own and drops the
//! late result itself.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::metrics::WorkerMetrics;
use super::scheduler::{self, RemoteQueue, with_scheduler};
use super::task::{TaskKey, Wait};

/// Runs `call` on the helper pool of [`unblock`] and parks the calling green thread until it
/// returns; unlike `unblock`, `call` and its result may borrow from the green thread's stack
/// (hostname resolution, the hooks' `getaddrinfo`). `what` names the call in the deadlock
/// report and in the outside-a-runtime panic.
///
/// If the green thread is cancelled while it waits, it unwinds once the call has returned (an
/// OS thread cannot be interrupted).
pub(crate) fn on_pool<'a, R: Send + 'a>(
    what: &'static str,
    call: impl FnOnce() -> R + Send + 'a,
) -> R {
    let (remote, task, pool) = remote_task_and_pool(what);
    let slot: Arc<Mutex<Option<std::thread::Result<R>>>> = Arc::new(Mutex::new(None));
    let filled = slot.clone();
    let job: Box<dyn FnOnce() + Send + 'a> = Box::new(move || {
        // `call` (and whatever it borrows) is consumed here, before the slot is filled; after
        // that the job touches only what it owns (the slot's Arc, the remote queue).
        let result = panic::catch_unwind(AssertUnwindSafe(call));
        *filled
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(result);
        remote.wake(task);
    });
    // SAFETY: only the lifetime is erased. What the job borrows (`'a`) is used only while `call`
    // runs, and this green thread does not return (nor unwind: `wait_for` defers a
    // cancellation) until the slot is filled, which happens after `call` has returned and been
    // dropped. A green thread that shutdown gives up on keeps its stack (leaked), so the borrow
    // outlives the job in that case too. The result moves out of the slot before `'a` can end;
    // the job's copy of the slot then holds `None`.
    let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Job>(job) };
    pool.submit(job);
    let take = || {
        slot.lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    };
    let mut result = None;
    wait_for(what, || {
        result = take();
        result.is_some()
    });
    match result.expect("wait_for returns once the result is in") {
        Ok(value) => value,
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// Runs a blocking function on the runtime's pool of helper OS threads and parks the calling
/// green thread until it returns; other green threads run meanwhile. For work that would
/// block the OS thread: file I/O, a blocking library call, a CPU-heavy computation.
///
/// The pool starts threads on demand, up to
/// [`Builder::max_blocking_threads`](crate::runtime::Builder::max_blocking_threads) (16 by
/// default; further calls queue), and lets a thread go after 10 seconds idle or when the
/// runtime ends. A panic in `f` is raised again in the calling green thread.
///
/// The wait is a park like any other: a [`time::timeout`](crate::time::timeout) around it
/// returns at its deadline, and a cancelled green thread unwinds at once. An OS thread cannot
/// be interrupted, so `f` itself is not: if it has started, it runs to the end on its helper
/// thread and its result (or panic) is dropped there; if it is still queued, it never runs
/// and is dropped unrun. Either way it is dropped exactly once.
///
/// # Panics
/// Outside a runtime; and with `f`'s panic.
///
/// ```
/// greenweave::run(|| {
///     let ticker = greenweave::spawn(|| {
///         for _ in 0..3 {
///             greenweave::thread::yield_now();
///         }
///     });
///     // Hashing a file would block; here the green thread parks while a helper thread works.
///     let sum = greenweave::unblock(|| (1..=1_000_000u64).sum::<u64>());
///     assert_eq!(sum, 500_000_500_000);
///     ticker.join().unwrap();
/// });
/// ```
///
/// Giving up on a slow call:
///
/// ```
/// use std::time::Duration;
/// use greenweave::time::timeout;
///
/// greenweave::run(|| {
///     let slow = timeout(Duration::from_millis(10), || {
///         greenweave::unblock(|| std::thread::sleep(Duration::from_millis(200)))
///     });
///     // Back after about 10 ms; the helper thread finishes its sleep on its own.
///     assert!(slow.is_err());
/// });
/// ```
pub fn unblock<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    const WHAT: &str = "greenweave::unblock";
    let (remote, task, pool) = remote_task_and_pool(WHAT);
    let handoff = Arc::new(Mutex::new(Handoff::Waiting));
    let helper_side = handoff.clone();
    pool.submit(Box::new(move || {
        if matches!(*lock(&helper_side), Handoff::Abandoned) {
            return; // given up on before it started: `f` is dropped unrun, here
        }
        let result = panic::catch_unwind(AssertUnwindSafe(f));
        let mut slot = lock(&helper_side);
        if matches!(*slot, Handoff::Abandoned) {
            drop(slot);
            drop(result); // the late result, dropped on this thread (a panic here is caught)
        } else {
            *slot = Handoff::Done(result);
            drop(slot);
            remote.wake(task);
        }
    }));
    let waiter = Waiter { handoff };
    let result = wait_abandoning(WHAT, || waiter.take());
    match result {
        Ok(value) => value,
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// Where `unblock`'s helper leaves its result, and how the waiting green thread says it has
/// left.
enum Handoff<T> {
    Waiting,
    Done(std::thread::Result<T>),
    /// The green thread left (a timeout, a cancellation): the helper drops `f` or its result.
    Abandoned,
}

/// The green thread's side of an `unblock`: marks the call abandoned if the wait ends without
/// the result (the park unwound), so the helper drops what it would have handed over.
struct Waiter<T> {
    handoff: Arc<Mutex<Handoff<T>>>,
}

impl<T> Waiter<T> {
    fn take(&self) -> Option<std::thread::Result<T>> {
        let mut slot = lock(&self.handoff);
        match std::mem::replace(&mut *slot, Handoff::Waiting) {
            Handoff::Done(result) => {
                *slot = Handoff::Abandoned; // taken: nothing more may arrive
                Some(result)
            }
            other => {
                *slot = other;
                None
            }
        }
    }
}

impl<T> Drop for Waiter<T> {
    fn drop(&mut self) {
        // A result that arrived after the park that unwound is dropped here, with the slot's
        // lock released; otherwise the helper sees `Abandoned` and drops it.
        let late = std::mem::replace(&mut *lock(&self.handoff), Handoff::Abandoned);
        drop(late);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How many jobs the running runtime has handed to its helper pool so far (`unblock`,
/// hostname lookups, the hooks' offloaded calls). For tests that check a call did not go to
/// the pool; not a stable API.
///
/// # Panics
/// Outside a runtime.
#[doc(hidden)]
pub fn jobs_handed_out() -> u64 {
    with_scheduler(
        "greenweave::runtime::offload::jobs_handed_out",
        |scheduler| scheduler.blocking_pool.0.submitted.load(Ordering::Relaxed),
    )
}

fn remote_task_and_pool(what: &str) -> (Arc<RemoteQueue>, TaskKey, Arc<BlockingPool>) {
    with_scheduler(what, |scheduler| {
        (
            scheduler.remote.clone(),
            scheduler.current_task_key(),
            scheduler.blocking_pool.0.clone(),
        )
    })
}

/// Parks (as a remote wait) until `take()` gives the result, and unwinds at once if a park
/// does (a cancellation, a `time::timeout`'s deadline): for `unblock`, whose helper borrows
/// nothing from this green thread. Parks at least once, as `wait_for` does.
fn wait_abandoning<R>(what: &'static str, mut take: impl FnMut() -> Option<R>) -> R {
    with_scheduler(what, |scheduler| {
        scheduler
            .remote_pending
            .set(scheduler.remote_pending.get() + 1)
    });
    let _pending = PendingGuard;
    loop {
        scheduler::park(what, Wait::Remote(what), None, None, |_, _| {});
        if let Some(result) = take() {
            return result;
        }
    }
}

/// Parks (as a remote wait, which the deadlock detector counts as wakeable) until `done()`.
/// Cancellation is deferred: the green thread keeps waiting for the work it handed out, so
/// that nothing it lent to the other thread is freed early, and unwinds afterwards.
///
/// It parks at least once, even when the helper has finished before the first look: handing
/// work to another OS thread always lets the other green threads run, rather than only when
/// the helper happens to be slower than this thread (which a loaded machine decides). The
/// helper's wake-up cannot be missed: it is queued, and the scheduler reads its queue only
/// after this green thread has parked.
fn wait_for(what: &'static str, mut done: impl FnMut() -> bool) {
    with_scheduler(what, |scheduler| {
        scheduler
            .remote_pending
            .set(scheduler.remote_pending.get() + 1)
    });
    let _pending = PendingGuard;
    let mut cancelled = None;
    loop {
        if cancelled.is_none() {
            let park = panic::catch_unwind(AssertUnwindSafe(|| {
                scheduler::park(what, Wait::Remote(what), None, None, |_, _| {})
            }));
            if let Err(payload) = park {
                cancelled = Some(payload);
            }
        } else {
            // Already interrupted: a plain park would raise again at once, every time.
            scheduler::park_uninterruptible(what, Wait::Remote(what));
        }
        if done() {
            break;
        }
    }
    if let Some(payload) = cancelled {
        panic::resume_unwind(payload);
    }
}

/// Keeps the runtime's count of remote operations in flight right, even when the wait unwinds.
struct PendingGuard;

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if scheduler::in_runtime() {
            with_scheduler("offload", |scheduler| {
                scheduler
                    .remote_pending
                    .set(scheduler.remote_pending.get().saturating_sub(1))
            });
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A runtime's pool of helper threads, behind [`unblock`] and `on_pool`. The runtime holds it
/// through a [`PoolHandle`]; each helper thread holds it too, so a helper still busy with a
/// call when the runtime ends finishes it (and the jobs queued behind it) and then exits.
pub(crate) struct BlockingPool {
    state: Mutex<PoolState>,
    work: Condvar,
    max_threads: usize,
    /// Jobs handed to the pool, for [`jobs_handed_out`].
    submitted: AtomicU64,
    /// Where the pool's threads and queue are counted (`runtime::metrics`), under `state`'s
    /// lock.
    metrics: Arc<WorkerMetrics>,
}

struct PoolState {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
    /// Set when the runtime ends: idle helpers exit, busy ones once the queue is empty.
    closed: bool,
}

/// The default of [`Builder::max_blocking_threads`](crate::runtime::Builder::max_blocking_threads).
pub(crate) const DEFAULT_MAX_BLOCKING_THREADS: usize = 16;
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// The runtime's ownership of its pool: closes the pool when the runtime ends.
pub(crate) struct PoolHandle(Arc<BlockingPool>);

impl PoolHandle {
    /// A pool of at most `max_threads` (at least 1) helper threads, none started yet.
    pub(crate) fn new(max_threads: usize, metrics: Arc<WorkerMetrics>) -> PoolHandle {
        PoolHandle(Arc::new(BlockingPool {
            state: Mutex::new(PoolState {
                jobs: VecDeque::new(),
                threads: 0,
                idle: 0,
                closed: false,
            }),
            work: Condvar::new(),
            max_threads: max_threads.max(1),
            submitted: AtomicU64::new(0),
            metrics,
        }))
    }
}

impl Drop for PoolHandle {
    fn drop(&mut self) {
        lock(&self.0.state).closed = true;
        self.0.work.notify_all();
    }
}

impl BlockingPool {
    fn submit(self: &Arc<Self>, job: Job) {
        self.submitted.fetch_add(1, Ordering::Relaxed);
        let mut state = lock(&self.state);
        state.jobs.push_back(job);
        // An idle helper takes one queued job; a helper told there is work but not yet awake
        // still counts as idle, so the idle count, not "anyone idle?", says whether this job
        // has a thread: a burst of submits must not all be handed to the same sleeper.
        if state.jobs.len() > state.idle && state.threads < self.max_threads {
            state.threads += 1;
            let pool = self.clone();
            let spawned = std::thread::Builder::new()
                .name("greenweave-unblock".into())
                .spawn(move || pool.work_loop());
            if spawned.is_err() {
                // The job waits for a thread already running; with none, the next submit
                // tries again (the waiting green thread stays parked meanwhile).
                state.threads -= 1;
            }
        } else {
            self.work.notify_one();
        }
        self.count(&state);
    }

    /// Publishes the pool's threads and queue to the metrics (under the lock, after a change).
    fn count(&self, state: &PoolState) {
        self.metrics
            .blocking_pool(state.threads, state.idle, state.jobs.len());
    }

    fn work_loop(&self) {
        let mut state = lock(&self.state);
        loop {
            if let Some(job) = state.jobs.pop_front() {
                self.count(&state);
                drop(state);
                // A job catches its call's panic; what can still unwind is the drop of a call
                // or result nobody waits for any more. The helper survives it.
                if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(job)) {
                    let dropped = panic::catch_unwind(AssertUnwindSafe(move || drop(payload)));
                    // A payload whose destructor panics: its own payload is leaked, not
                    // dropped, to end the chain.
                    if let Err(payload) = dropped {
                        std::mem::forget(payload);
                    }
                }
                state = lock(&self.state);
                continue;
            }
            if state.closed {
                state.threads -= 1;
                self.count(&state);
                return;
            }
            state.idle += 1;
            self.count(&state);
            let (next, timeout) = self
                .work
                .wait_timeout(state, POOL_IDLE_TIMEOUT)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            state = next;
            state.idle -= 1;
            if timeout.timed_out() && state.jobs.is_empty() {
                state.threads -= 1;
                self.count(&state);
                return;
            }
            self.count(&state);
        }
    }
}
