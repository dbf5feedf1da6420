//! Running a blocking call on another OS thread while only the calling green thread waits.
//!
//! Owns: a small pool of helper OS threads, reached by [`unblock`] (`'static` work: file I/O,
//! CPU-heavy work) and by `on_pool` (work that borrows from the green thread's stack: hostname
//! resolution, the hooks' resolver calls). Either way the green thread parks, and the helper
//! wakes it through the runtime's remote queue when done.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

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
    let (remote, task) = remote_and_task(what);
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
    BlockingPool::global().submit(job);
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

/// Runs a blocking function on a small pool of helper OS threads and parks the calling green
/// thread until it returns; other green threads run meanwhile. For work that would block the
/// OS thread: file I/O, a blocking library call, a CPU-heavy computation.
///
/// The pool starts threads on demand, up to 16, and lets a thread go after 10 seconds idle.
/// A panic in `f` is raised again in the calling green thread.
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
pub fn unblock<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    on_pool("greenweave::unblock", f)
}

fn remote_and_task(what: &str) -> (Arc<RemoteQueue>, TaskKey) {
    with_scheduler(what, |scheduler| {
        (scheduler.remote.clone(), scheduler.current_task_key())
    })
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

/// The process-wide pool behind [`unblock`].
struct BlockingPool {
    state: Mutex<PoolState>,
    work: Condvar,
}

struct PoolState {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

const MAX_POOL_THREADS: usize = 16;
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

impl BlockingPool {
    fn global() -> &'static BlockingPool {
        static POOL: OnceLock<BlockingPool> = OnceLock::new();
        POOL.get_or_init(|| BlockingPool {
            state: Mutex::new(PoolState {
                jobs: VecDeque::new(),
                threads: 0,
                idle: 0,
            }),
            work: Condvar::new(),
        })
    }

    fn submit(&'static self, job: Job) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.jobs.push_back(job);
        if state.idle == 0 && state.threads < MAX_POOL_THREADS {
            state.threads += 1;
            let spawned = std::thread::Builder::new()
                .name("greenweave-unblock".into())
                .spawn(move || self.work_loop());
            if spawned.is_err() {
                state.threads -= 1;
            }
        } else {
            self.work.notify_one();
        }
    }

    fn work_loop(&self) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loop {
            if let Some(job) = state.jobs.pop_front() {
                drop(state);
                job();
                state = self
                    .state
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                continue;
            }
            state.idle += 1;
            let (next, timeout) = self
                .work
                .wait_timeout(state, POOL_IDLE_TIMEOUT)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            state = next;
            state.idle -= 1;
            if timeout.timed_out() && state.jobs.is_empty() {
                state.threads -= 1;
                return;
            }
        }
    }
}
