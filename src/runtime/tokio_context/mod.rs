//! A tokio runtime per worker (cargo feature `tokio`), current in every green thread of the
//! worker and driven by the worker's own scheduler.
//!
//! Owns: each worker's tokio current-thread runtime ([`WorkerTokio`]), the worker-long
//! `Handle::enter` that makes it current on the worker's OS thread, its epoll fd's registration
//! in the worker's reactor, and the *turn*: one `Runtime::block_on` of a future that is ready
//! once tokio's driver has polled for events (`epoll_turn`), run by the scheduler on its own
//! stack when tokio's epoll fd is readable or its next timer is due.
//!
//! How tokio is driven without an OS thread of its own (the shape of tokio's proposed
//! `LocalEventLoop`: a host loop that owns the waiting, and asks the guest loop for a turn and
//! its next deadline):
//! - tokio's I/O driver waits in `epoll_wait` on an epoll fd of its own. That fd is registered
//!   in the worker's reactor: it is readable whenever tokio has an I/O event, or a wake-up from
//!   any thread (tokio's waker is an eventfd in that epoll: a `tokio::spawn` from a green thread,
//!   a task woken from another OS thread, a timer earlier than the one it sleeps for).
//! - During a turn, tokio's own `epoll_wait` on that fd is made with a zero timeout
//!   (`epoll_turn`): tokio dispatches what is ready, fires its due timers, and the timeout it
//!   asked for is kept as the worker's tokio deadline, which bounds the scheduler's sleep. So
//!   the worker sleeps in one place, its own `epoll_wait`.
//! - A turn runs tokio's ready tasks on the scheduler's stack, outside any green thread:
//!   tokio tasks are async code and do not block, as on any tokio runtime (a blocking call
//!   there blocks the worker, as it would block a tokio worker thread).
//!
//! Green threads poll their own futures (`block_on`), outside tokio's scheduler, with tokio's
//! context current: they register timers and sockets with this worker's drivers and are woken
//! by their waker, through the runtime's own paths.
//!
//! May not: turn on a green thread's stack (a budget's poll from a green thread leaves the turn
//! to the scheduler's loop); turn while tokio's "runtime entered" flag may be set by a green
//! thread parked inside another tokio runtime's `block_on` (a sync client such as `postgres`
//! under the `hooks` feature; tokio would panic): turns wait until no such green thread is
//! parked.

mod epoll_turn;

use std::cell::Cell;
use std::io;
use std::mem::ManuallyDrop;
use std::rc::Rc;
use std::time::Instant;

use super::reactor::{Interest, Registration};
use super::scheduler::Scheduler;

#[cfg(feature = "hooks")]
pub(crate) use epoll_turn::intercept_epoll_wait;

/// How soon a turn held back by a foreign runtime's wait is tried again.
const HELD_BACK_RETRY: std::time::Duration = std::time::Duration::from_millis(1);

thread_local! {
    /// The running worker's tokio runtime, or null outside a worker (set by [`start`] for as
    /// long as its guard lives).
    static WORKER: Cell<*const WorkerTokio> = const { Cell::new(std::ptr::null()) };
}

/// One worker's tokio runtime and the state of its turns.
pub(crate) struct WorkerTokio {
    /// `ManuallyDrop`: ended by `shutdown_background` in `Drop` (no wait for `spawn_blocking`
    /// threads, which keep running to their end on their own).
    runtime: ManuallyDrop<tokio::runtime::Runtime>,
    /// The enter guard of the worker's whole life: makes `handle` current on this OS thread.
    /// Borrows `*handle` (a box, so its address holds still); dropped before it.
    entered: ManuallyDrop<tokio::runtime::EnterGuard<'static>>,
    handle: ManuallyDrop<Box<tokio::runtime::Handle>>,
    /// tokio's epoll fd (learnt at the first turn) and its registration in the worker's
    /// reactor.
    epfd: Cell<Option<i32>>,
    registration: Option<Registration>,
    /// When tokio asked to be polled again at the latest: its next timer, or now when it has
    /// work left; `None` when it waits for events alone.
    deadline: Cell<Option<Instant>>,
}

/// Starts the tokio runtime of the worker whose scheduler is `scheduler`, on its OS thread,
/// and makes it current there; ends it when the returned guard is dropped (after the worker's
/// green threads have ended).
///
/// # Panics
/// If tokio's runtime cannot be built (its epoll fd or eventfd: the process's fd limit), saying
/// so.
pub(crate) fn start(scheduler: &Scheduler) -> WorkerTokioGuard {
    let worker = WorkerTokio::new(scheduler).unwrap_or_else(|error| {
        panic!(
            "greenweave: could not start a worker's tokio runtime (the `tokio` feature): {error}"
        )
    });
    let worker = Rc::new(worker);
    WORKER.set(Rc::as_ptr(&worker));
    WorkerTokioGuard { worker }
}

/// Ends the worker's tokio runtime when dropped (see [`start`]).
pub(crate) struct WorkerTokioGuard {
    worker: Rc<WorkerTokio>,
}

impl Drop for WorkerTokioGuard {
    fn drop(&mut self) {
        WORKER.set(std::ptr::null());
        let _ = &self.worker;
    }
}

impl WorkerTokio {
    fn new(scheduler: &Scheduler) -> io::Result<WorkerTokio> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let handle = Box::new(runtime.handle().clone());
        // SAFETY: the guard borrows the boxed handle, whose address does not change when the
        // box moves into the struct, and which `Drop` frees only after dropping the guard.
        let entered = unsafe {
            std::mem::transmute::<tokio::runtime::EnterGuard<'_>, tokio::runtime::EnterGuard<'static>>(
                handle.enter(),
            )
        };
        let mut worker = WorkerTokio {
            runtime: ManuallyDrop::new(runtime),
            entered: ManuallyDrop::new(entered),
            handle: ManuallyDrop::new(handle),
            epfd: Cell::new(None),
            registration: None,
            deadline: Cell::new(None),
        };
        epoll_turn::keep_epoll_wait_linked();
        // The first turn finds tokio's epoll fd (its driver waits on it), which the reactor
        // then watches.
        let epfd = worker.turn().ok_or_else(|| {
            io::Error::other("tokio's driver made no epoll_wait during its first turn")
        })?;
        worker.registration = Some(scheduler.reactor.register(epfd)?);
        Ok(worker)
    }

    /// One turn: tokio runs its ready tasks and polls its driver once without waiting; returns
    /// the driver's epoll fd, if it polled.
    fn turn(&self) -> Option<i32> {
        let outcome = epoll_turn::turn(&self.runtime, self.epfd.get());
        self.deadline.set(outcome.deadline);
        if self.epfd.get().is_none() {
            self.epfd.set(outcome.epfd);
        }
        outcome.epfd
    }

    /// Whether tokio has something to do now: an event on its epoll fd, or a deadline passed.
    fn is_due(&self, now: Instant) -> bool {
        self.is_readable() || self.deadline.get().is_some_and(|deadline| deadline <= now)
    }

    /// Whether an event on tokio's epoll fd has been seen and not yet turned for.
    fn is_readable(&self) -> bool {
        self.registration
            .as_ref()
            .is_some_and(|registration| registration.io.is_ready(Interest::Readable))
    }

    fn clear_readiness(&self) {
        if let Some(registration) = &self.registration {
            registration.io.clear_readiness(Interest::Readable);
        }
    }
}

impl Drop for WorkerTokio {
    fn drop(&mut self) {
        // Out of the reactor before tokio closes the fd.
        drop(self.registration.take());
        // SAFETY: each field is dropped exactly once, here, and the guard (which borrows the
        // handle) before the handle.
        unsafe {
            ManuallyDrop::drop(&mut self.entered);
            ManuallyDrop::drop(&mut self.handle);
            ManuallyDrop::take(&mut self.runtime).shutdown_background();
        }
    }
}

/// Calls `f` with the running worker's tokio runtime, if there is one.
fn with_worker<R>(f: impl FnOnce(&WorkerTokio) -> R) -> Option<R> {
    let worker = WORKER.get();
    if worker.is_null() {
        return None;
    }
    // SAFETY: the pointer is set only while the `Rc` in `start`'s guard keeps it alive.
    Some(f(unsafe { &*worker }))
}

/// The scheduler's look after each poll, on its own stack: a turn if tokio has something to
/// do (an event on its epoll fd, a deadline passed).
pub(crate) fn turn_if_due() {
    with_worker(|worker| {
        let now = Instant::now();
        if !worker.is_due(now) {
            return;
        }
        if foreign_runtime_may_be_entered() {
            // Due, but held back: look again shortly (the foreign wait's end makes no event
            // here, and the readiness already seen stays cached).
            worker.deadline.set(now.checked_add(HELD_BACK_RETRY));
            return;
        }
        // Cleared first: an event that comes during the turn is a new edge, seen next time.
        worker.clear_readiness();
        worker.turn();
    });
}

/// The earlier of `deadline` and tokio's: how long the scheduler may sleep.
///
/// An event already seen on tokio's epoll fd whose turn has not come yet counts as due now: a
/// green thread's budget poll (on its own stack, where no turn is taken) takes the fd's edge,
/// and no second edge comes for it, so the scheduler must not sleep on it.
pub(crate) fn earliest(deadline: Option<Instant>) -> Option<Instant> {
    let tokio = with_worker(|worker| {
        if worker.is_readable() {
            Some(Instant::now())
        } else {
            worker.deadline.get()
        }
    })
    .flatten();
    match (deadline, tokio) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether a tokio task may still wake a green thread (for the deadlock verdict): tokio tasks
/// are alive on this worker.
pub(crate) fn may_wake() -> bool {
    with_worker(|worker| worker.handle.metrics().num_alive_tasks() > 0).unwrap_or(false)
}

/// Whether a turn is under way on this OS thread (tokio tasks or its driver running).
pub(crate) fn in_turn() -> bool {
    epoll_turn::in_turn()
}

/// Whether a green thread of this worker is parked inside a foreign event loop (the hooks'
/// `epoll_wait`): if that loop is another tokio runtime's `block_on` (a sync client such as
/// `postgres`), tokio's per-OS-thread "entered" flag is set, and a turn would panic.
fn foreign_runtime_may_be_entered() -> bool {
    #[cfg(feature = "hooks")]
    return crate::hooks::foreign_loops_waiting() > 0;
    #[cfg(not(feature = "hooks"))]
    false
}
