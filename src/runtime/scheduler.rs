//! The single-thread scheduler: a FIFO ready queue, the loop that runs it, parking and
//! waking, deadlock detection and shutdown.
//!
//! Owns: [`Scheduler`] (tasks, ready queue, timers, reactor, remote wake-ups), the
//! thread-local pointer to the scheduler running on this OS thread, and [`park`], the one
//! primitive every blocking-looking operation is built on: a green thread says what it waits
//! for and until when, switches to the scheduler, and the scheduler arms the timer and the fd
//! wait only after that switch has completed.
//!
//! May not: be reached from another OS thread (everything here is `!Send`); the only way in
//! from outside is [`RemoteQueue`], an eventfd plus a locked list of wake-ups.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::io;
use std::mem::ManuallyDrop;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::arch::StackPointer;
use crate::coroutine::{CoroutineResult, Message, Yielder};
use crate::greenlet::World;
use crate::stack::Stack;
use crate::sys::eventfd::EventFd;

use super::metrics::{HotCounters, WorkerMetrics};
use super::reactor::{Reactor, ScheduledIo};
use super::ring::Ring;
use super::stack_release::StackSweep;
use super::stall::StallWatch;
use super::task::{
    Joiner, ParkRequest, Suspend, Task, TaskCoroutine, TaskKey, TaskState, Wait, Wake,
};
use super::workers::WorkerLink;

/// How many finished tasks the scheduler keeps for reuse by later spawns.
const SPARE_TASKS: usize = 64;

/// How many green threads run between two non-blocking polls of epoll when the ready queue
/// never empties, so a green thread looping on `yield_now` cannot starve I/O.
const RUNS_BETWEEN_POLLS: u32 = 61;

/// How many polls without blocking (one per `RUNS_BETWEEN_POLLS` runs of a busy ready queue)
/// make one publication of the metrics and one scheduling delay sample: each costs a few dozen
/// instructions (two clock reads for a sample), which a busy queue then pays once per 488
/// runs. Every poll that could block publishes and samples.
const POLLS_PER_SAMPLE: u32 = 8;

/// From this many queued tasks on, the loop prefetches what the tasks a few places behind the
/// front will touch first (see [`ReadyQueue::prefetch_ahead`]). Below it, a round of the queue
/// fits in the caches and the hint would only cost instructions. Measured on a 2-vCPU AMD EPYC
/// VM (1 MiB L2 per core; `examples/yield_table`, the hint on from 32 against never, three
/// alternating runs): ns per yield among 33, 11-14 without against 14-22 with; among 1,000 and
/// 3,000 no difference beyond the noise; among 10,000, 40-74 without against 24-32 with; among
/// 30,000, 153-222 against 70-84. A yield touches about 600 bytes of a green thread (record
/// and stack top), so 1,024 of them are ~600 KiB, within a 1 MiB L2 but past a 256 KiB one.
const PREFETCH_MIN_QUEUE: usize = 1024;

/// How far behind the front the loop prefetches a task's record...
const TASK_PREFETCH_DISTANCE: usize = 8;

/// ...and the saved frame at the top of its stack, which it finds through the record: fetched
/// that many runs earlier, so the stack pointer is read from cache.
const STACK_PREFETCH_DISTANCE: usize = 4;

/// What `run_until` does when nothing can wake any remaining task.
#[derive(Clone, Copy)]
enum OnDeadlock {
    Panic,
    Stop,
}

/// The panic payload that unwinds a cancelled green thread from its park point.
pub(crate) struct Cancelled;

/// Whether a task of the worker's tokio runtime (feature `tokio`) is alive, and so may wake a
/// green thread.
#[inline]
fn tokio_tasks_may_wake() -> bool {
    #[cfg(feature = "tokio")]
    return super::tokio_context::may_wake();
    #[cfg(not(feature = "tokio"))]
    false
}

/// Wake-ups sent from other OS threads: a list under a lock, and an eventfd that makes the
/// runtime's `epoll_wait` return.
///
/// A remote wake-up names a green thread, not a park: it makes the thread runnable if it is
/// parked at all, and the woken code re-checks what it waits for (a remote result, a remote
/// channel's queue), as every waiter in the runtime does. So a wake-up that arrives between
/// two parks of the same wait is never lost, and one that arrives late is harmless.
pub(crate) struct RemoteQueue {
    eventfd: EventFd,
    woken: Mutex<Vec<TaskKey>>,
    /// Live `Send` handles (remote senders) through which a wake-up may still come; while
    /// non-zero the deadlock detector cannot rule one out.
    pub(crate) handles: AtomicUsize,
    /// Set by `wake`, cleared when the scheduler takes the list: a wake-up is waiting even if
    /// every handle that could send one is gone (a remote sender's last send, then its drop).
    queued: AtomicBool,
}

impl RemoteQueue {
    pub(crate) fn new() -> io::Result<RemoteQueue> {
        Ok(RemoteQueue {
            eventfd: EventFd::new()?,
            woken: Mutex::new(Vec::new()),
            handles: AtomicUsize::new(0),
            queued: AtomicBool::new(false),
        })
    }

    /// Makes the scheduler look at what was sent to it (its worker's jobs) soon, even if it is
    /// blocked in `epoll_wait` or busy. Callable from any thread.
    pub(crate) fn ring(&self) {
        self.queued.store(true, Ordering::Release);
        self.eventfd.notify();
    }

    /// Makes green thread `task` runnable if it is parked. Callable from any thread.
    pub(crate) fn wake(&self, task: TaskKey) {
        self.woken
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(task);
        self.queued.store(true, Ordering::Release);
        self.eventfd.notify();
    }
}

pub(crate) struct Scheduler {
    pub(crate) reactor: Rc<Reactor>,
    /// This scheduler's worker: its place among the runtime's workers (one, for `run`).
    pub(crate) worker: WorkerLink,
    pub(crate) remote: Arc<RemoteQueue>,
    /// Remote operations in flight: while non-zero, a wake-up can come from another thread.
    pub(crate) remote_pending: Cell<usize>,
    ready: ReadyQueue,
    /// The running task, or null while the scheduler itself runs. Not a counted reference:
    /// `run_task` holds one for exactly as long as this is set.
    current: Cell<*const Task>,
    /// Every task not yet finished.
    tasks: RefCell<TaskTable>,
    timers: RefCell<super::timer::Timers>,
    next_id: Cell<u64>,
    /// How far apart this worker's green thread ids are (the number of workers; each worker
    /// starts at its own index plus one, so ids are unique across the runtime).
    id_step: u64,
    /// Finished tasks nothing else refers to, kept so a spawn can reuse one instead of
    /// allocating (at most `SPARE_TASKS`).
    spare_tasks: RefCell<Vec<Rc<Task>>>,
    /// Green threads the loop runs before its next stop: a poll for I/O, or the end of a
    /// scheduling delay sample (`Scheduler::stop`). Counted down, so the loop's test is a
    /// decrement and a branch.
    countdown: Cell<u32>,
    /// How many green threads the loop will have run when `countdown` reaches zero: with it,
    /// the count of runs, for the metrics (`runs_end - countdown`).
    runs_end: Cell<u64>,
    /// While a scheduling delay sample is under way (see `Scheduler::begin_period`): the
    /// runs from its end to the next poll, never zero; zero while none is.
    sample_runs_after: Cell<u32>,
    /// When the scheduling delay sample under way started.
    sample_started: Cell<Option<Instant>>,
    /// Polls without blocking so far (wrapping): one in `POLLS_PER_SAMPLE` publishes the
    /// metrics and starts a scheduling delay sample.
    polls_without_blocking: Cell<u32>,
    /// The metrics' counts of the hot paths, published into `metrics` at each poll.
    hot_counters: HotCounters,
    /// This worker's counters, readable from any thread (`runtime::metrics`).
    pub(crate) metrics: Arc<WorkerMetrics>,
    /// The tasks one `poll` (or one firing of the timers) found woken, kept between uses
    /// (empty) so that neither allocates: taken out while in use, so a wake-up that reaches
    /// the scheduler meanwhile finds an empty one.
    woken_scratch: Cell<Vec<(Rc<Task>, u64)>>,
    /// Unfinished tasks that caught their cancellation `SHUTDOWN_DELIVERIES` times, plus
    /// cancelled ones that wait for other green threads before they can end (a `thread::scope`
    /// waiting for the green threads spawned in it, see `count_waiting_for_others`): shutdown
    /// stops running green threads once only these are left.
    stubborn_tasks: Cell<usize>,
    pub(crate) default_stack_size: usize,
    /// The helper threads behind `unblock` and `on_pool`, closed when the scheduler goes.
    pub(crate) blocking_pool: super::offload::PoolHandle,
    /// The stall report's side of the runtime, while it is on (see `runtime::stall`).
    stall: Option<StallWatch>,
    /// A coarse clock: the time of the last poll (at most `RUNS_BETWEEN_POLLS` runs ago),
    /// which a park records as its start for `runtime::dump` without reading the clock.
    coarse_now: Cell<Instant>,
    /// The long-park sweep of stacks (`runtime::stack_release`), unless it is off.
    stack_sweep: Option<StackSweep>,
}

/// The runnable tasks, in FIFO order.
///
/// Not a `RefCell`: every operation is one step that neither hands out a reference into the
/// queue nor runs code that could reach it (pushing and popping only move an `Rc` in or out;
/// `clear` empties the queue before dropping the tasks), so no two can overlap, and the
/// queue's hottest operations pay no borrow flag.
#[derive(Default)]
struct ReadyQueue {
    tasks: UnsafeCell<Ring<Rc<Task>>>,
}

impl ReadyQueue {
    #[inline]
    fn push_back(&self, task: Rc<Task>) {
        // SAFETY: no reference into the queue is live (see the type's comment); growing the
        // ring runs no code of ours.
        unsafe { (*self.tasks.get()).push_back(task) }
    }

    #[inline]
    fn pop_front(&self) -> Option<Rc<Task>> {
        // SAFETY: as in `push_back`.
        unsafe { (*self.tasks.get()).pop_front() }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        // SAFETY: as in `push_back`.
        unsafe { (*self.tasks.get()).is_empty() }
    }

    #[inline]
    fn len(&self) -> usize {
        // SAFETY: as in `push_back`.
        unsafe { (*self.tasks.get()).len() }
    }

    /// Takes `task` out of the queue, if it is queued; the caller drops it (after the queue is
    /// left alone, as in `clear`).
    fn remove(&self, task: &Task) -> Option<Rc<Task>> {
        // SAFETY: as in `push_back`; comparing addresses runs no code of ours.
        let ring = unsafe { &mut *self.tasks.get() };
        let at = ring
            .iter()
            .position(|queued| std::ptr::eq(Rc::as_ptr(queued), task))?;
        ring.remove(at)
    }

    /// With many tasks queued, asks the cache for the records of the task
    /// [`TASK_PREFETCH_DISTANCE`] places behind the front and for the resume frame of the one
    /// [`STACK_PREFETCH_DISTANCE`] places behind it, so that by their turn neither is a miss.
    /// Among 100,000 runnable green threads every one is cold by its turn: a yield waited for
    /// a task record, then for its stack (whose address is in the record), one after the
    /// other; now both arrive while earlier tasks run (BENCHMARKS.md, "Connections per core").
    #[inline(always)]
    fn prefetch_ahead(&self) {
        // SAFETY: as in `push_back`; the references below end before this returns, and the
        // prefetches run no code that could reach the queue.
        let tasks = unsafe { &*self.tasks.get() };
        if tasks.len() >= PREFETCH_MIN_QUEUE {
            Self::prefetch_from(tasks);
        }
    }

    /// The prefetches of [`prefetch_ahead`](Self::prefetch_ahead), out of line: inlined,
    /// they made the loop's registers scarcer for every queue, and a yield round trip between
    /// two green threads cost 10 instructions more (callgrind).
    #[inline(never)]
    fn prefetch_from(tasks: &Ring<Rc<Task>>) {
        if let Some(task) = tasks.get(TASK_PREFETCH_DISTANCE) {
            task.prefetch_record();
        }
        if let Some(task) = tasks.get(STACK_PREFETCH_DISTANCE) {
            task.prefetch_resume_frame();
        }
    }

    /// Drops every queued task, after emptying the queue: dropping a task can run its
    /// destructors, which may spawn.
    fn clear(&self) {
        // SAFETY: as in `push_back`; the tasks are dropped after the queue is left alone.
        let tasks = std::mem::take(unsafe { &mut *self.tasks.get() });
        drop(tasks);
    }
}

/// Every unfinished task, in a slab: a task's `slot` is its index, and freed slots are reused
/// last-freed first, so a spawn+join loop keeps using one warm slot and no id is hashed.
///
/// Invariant kept for [`Scheduler::spawn_task`]'s bodies: a task in the table still owns its
/// coroutine, and the table never drops a task whose coroutine is still inside it (`Drop` takes
/// each coroutine out first), so a body never runs inside its own task's destructor.
#[derive(Default)]
struct TaskTable {
    slots: Vec<Option<Rc<Task>>>,
    free: Vec<usize>,
    len: usize,
}

impl TaskTable {
    /// Takes the slot the next task will fill (`fill`): the last freed one, or a new one at
    /// the end. A slot reserved and never filled (a spawn that panicked in between) stays
    /// empty for good, which every lookup tolerates.
    #[inline]
    fn reserve(&mut self) -> usize {
        match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        }
    }

    /// Puts `task` in the slot reserved for it.
    #[inline]
    fn fill(&mut self, task: Rc<Task>) {
        let slot = task.slot;
        // The reserved slot is empty: nothing to drop (skipping the drop glue's test).
        let empty = self.slots[slot].replace(task);
        debug_assert!(empty.is_none());
        std::mem::forget(empty);
        self.len += 1;
    }

    fn remove(&mut self, slot: usize) -> Option<Rc<Task>> {
        let task = self.slots.get_mut(slot)?.take()?;
        self.free.push(slot);
        self.len -= 1;
        Some(task)
    }

    /// The task `key` names, if it is still unfinished.
    fn get(&self, key: TaskKey) -> Option<&Rc<Task>> {
        self.slots
            .get(key.slot)?
            .as_ref()
            .filter(|task| task.id == key.id)
    }

    fn len(&self) -> usize {
        self.len
    }

    fn iter(&self) -> impl Iterator<Item = &Rc<Task>> {
        self.slots.iter().flatten()
    }

    fn drain(&mut self) -> Vec<Rc<Task>> {
        self.free.clear();
        self.len = 0;
        std::mem::take(&mut self.slots)
            .into_iter()
            .flatten()
            .collect()
    }
}

impl Drop for TaskTable {
    fn drop(&mut self) {
        // Normally empty (shutdown drains it); if shutdown itself was cut short by a panic,
        // end the coroutines while their tasks are still whole, leaking them when unwinding
        // them now would be a panic while panicking.
        for task in self.slots.iter().flatten() {
            let coroutine = task.abandon();
            task.end_coroutine(coroutine, std::thread::panicking());
        }
    }
}

/// A new task's allocation, when no spare one is left (out of line: a spawn+join loop reuses
/// one task, and `Task::new` is a large frame).
#[inline(never)]
fn allocate_task(id: u64, slot: usize, name: Option<Box<str>>) -> Rc<Task> {
    Rc::new(Task::new(id, slot, name))
}

thread_local! {
    /// The scheduler running on this OS thread, or null outside `run`.
    static SCHEDULER: Cell<*const Scheduler> = const { Cell::new(std::ptr::null()) };
}

/// Calls `f` with this thread's scheduler.
///
/// # Panics
/// Outside a runtime, naming `what` and saying how to fix it.
#[inline]
pub(crate) fn with_scheduler<R>(what: &str, f: impl FnOnce(&Scheduler) -> R) -> R {
    let scheduler = SCHEDULER.get();
    if scheduler.is_null() {
        outside_runtime(what);
    }
    // SAFETY: the pointer is set only while `Scheduler::enter`'s guard lives, during which the
    // scheduler is alive (it is owned by the frame that holds the guard).
    f(unsafe { &*scheduler })
}

/// The panic of [`with_scheduler`] outside a runtime (out of line: every park and wake-up
/// passes the check).
#[cold]
#[inline(never)]
fn outside_runtime(what: &str) -> ! {
    panic!(
        "{what} called outside a greenweave runtime; wrap the code in greenweave::run \
         (or Runtime::run) and call it from a green thread"
    );
}

/// Wakes `task` (with `Wake::Notified`) if it is still in park number `park`, as a green
/// synchronisation primitive does; returns whether it was.
///
/// # Panics
/// If it is, outside a runtime (a primitive used after its runtime ended).
#[inline(always)]
pub(crate) fn notify(task: Rc<Task>, park: u64) -> bool {
    if !task.is_in_park(park) {
        return false;
    }
    let scheduler = SCHEDULER.get();
    if scheduler.is_null() {
        drop(task);
        outside_runtime("a green synchronisation primitive");
    }
    // SAFETY: as in `with_scheduler`: the pointer is set only while the scheduler is alive.
    unsafe { &*scheduler }.make_runnable(task, Wake::Notified);
    true
}

/// Wakes green thread `task`, parked in park number `park` (or, for `None`, in whatever park
/// it is in: the woken code re-checks, as for every remote wake-up) on the runtime whose
/// wake-up queue is `remote`, directly through the scheduler if that runtime runs on this OS
/// thread, and returns `true`; returns `false` (doing nothing) if it runs elsewhere, or if its
/// task table is in use right now: the caller then wakes it through `remote`. For `Send`
/// primitives (`sync::shared`, `thread::spawn_on`'s join) whose waker may be on the waiter's
/// own runtime (no system call then) or on any other thread.
pub(crate) fn wake_if_local(remote: &Arc<RemoteQueue>, task: TaskKey, park: Option<u64>) -> bool {
    let scheduler = SCHEDULER.get();
    if scheduler.is_null() {
        return false;
    }
    // SAFETY: as in `with_scheduler`: the pointer is set only while the scheduler is alive.
    let scheduler = unsafe { &*scheduler };
    if !Arc::ptr_eq(&scheduler.remote, remote) {
        return false;
    }
    let Ok(tasks) = scheduler.tasks.try_borrow() else {
        return false;
    };
    let task = tasks.get(task).cloned();
    drop(tasks);
    if let Some(task) = task {
        let park = park.unwrap_or_else(|| task.park_number.get());
        scheduler.unpark(task, park, Wake::Notified);
    }
    true
}

/// Whether the code running now runs on behalf of a green thread (on its stack or on one it
/// resumed), as opposed to the scheduler itself or code outside any runtime.
#[inline]
pub(crate) fn in_green_thread() -> bool {
    !current_task_ptr().is_null()
}

/// Whether this thread is inside a runtime.
#[inline]
pub(crate) fn in_runtime() -> bool {
    !SCHEDULER.get().is_null()
}

/// The running green thread's task, or null when no green thread runs on this OS thread
/// (outside `run`, or on the scheduler itself). A coroutine or greenlet that a green thread
/// resumed runs on its behalf: this is that green thread's task. Valid while it runs (`run_task`
/// holds it); for green-thread-local storage (`runtime::locals`).
#[inline]
pub(crate) fn current_task_ptr() -> *const Task {
    let scheduler = SCHEDULER.get();
    if scheduler.is_null() {
        return std::ptr::null();
    }
    // SAFETY: as in `with_scheduler`: the pointer is set only while the scheduler is alive.
    unsafe { (*scheduler).current.get() }
}

/// Whether the running green thread has a cancellation requested (false outside one). For the
/// hooks' futex waits, which park uninterruptibly and so raise a pending cancellation themselves,
/// and for `thread::scope`'s uninterruptible wait.
pub(crate) fn cancel_requested() -> bool {
    let task = current_task_ptr();
    // SAFETY: a non-null running task is kept alive by `run_task` while `current` points at it.
    !task.is_null() && unsafe { (*task).cancel_requested() }
}

/// Whether the code running now may park: it runs on behalf of a green thread (on its own
/// stack, or on a coroutine's or greenlet's that the green thread resumed or switched to; not
/// on the scheduler or another OS thread), and that green thread is not unwinding. The hooks
/// layer asks this before each call it might park; everywhere else a hooked call is libc's own.
#[inline]
#[cfg_attr(not(feature = "hooks"), allow(dead_code))]
pub(crate) fn can_park_here() -> bool {
    in_green_thread() && !std::thread::panicking()
}

/// The running green thread's name, for the stack-overflow report.
///
/// # Safety
/// Called from the SIGSEGV handler on the faulting thread: reads the thread-local scheduler
/// pointer and the current task's (immutable) name without borrowing or allocating. The fault
/// interrupted the green thread that owns the name, so it is alive while the report is written.
unsafe fn current_green_name() -> Option<&'static [u8]> {
    let scheduler = SCHEDULER.get();
    if scheduler.is_null() {
        return None;
    }
    // SAFETY: see above; the running task (kept alive by `run_task`) is not being modified
    // while its own code faults, and its name never changes.
    unsafe {
        let task = (*scheduler).current.get();
        if task.is_null() {
            return None;
        }
        let name: &str = (*task).name.as_deref()?;
        Some(&*(name.as_bytes() as *const [u8]))
    }
}

/// The running green thread as the deadlock report names it (`'worker' (id 3)`), or `None`
/// outside one (no runtime on this thread, or the scheduler itself runs). For the panic hook
/// (`runtime::panic_report`): never panics.
pub(crate) fn describe_running_green_thread() -> Option<String> {
    let task = current_task_ptr();
    if task.is_null() {
        return None;
    }
    // SAFETY: a non-null running task is kept alive by `run_task` while `current` points at it.
    let described = unsafe { (*task).describe() };
    // SAFETY: `current_task_ptr` was not null, so the scheduler pointer is set and alive.
    let worker = unsafe { &(*SCHEDULER.get()).worker };
    Some(if worker.pool.len() > 1 {
        format!("{described} on worker {}", worker.index)
    } else {
        described
    })
}

/// How many runs of green threads this OS thread's scheduler has completed (the one under way
/// is not counted until it parks, yields or ends); 0 outside a runtime. Constant while a green
/// thread runs, so it names the turn (the hooks' futex waits, a listener's run of accepts).
pub(crate) fn runs_completed() -> u64 {
    let scheduler = SCHEDULER.get();
    if scheduler.is_null() {
        return 0;
    }
    // SAFETY: as in `with_scheduler`: the pointer is set only while the scheduler is alive.
    unsafe { (*scheduler).runs() }
}

/// The panic of code that needs a running green thread but runs on the scheduler itself.
#[cold]
#[inline(never)]
fn not_on_a_green_thread() -> ! {
    panic!("greenweave: this code must run on a green thread, not the scheduler");
}

/// Resets the thread's scheduler pointer when `run` ends, normally or by panic, and gives the
/// OS thread its greenlets back.
struct EnterGuard {
    /// The OS thread's greenlets (outside any green thread), stored away while `run` runs.
    os_thread_greenlets: World,
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        SCHEDULER.set(std::ptr::null());
        self.os_thread_greenlets.enter();
    }
}

impl Scheduler {
    /// A scheduler whose green threads get `default_stack_size` stacks by default, with a
    /// stall report for runs of `stall_report` or longer if given, the stacks of green threads
    /// parked for `stack_release` or longer released below their stack pointer if given, and
    /// at most `max_blocking_threads` helper threads for `unblock`.
    pub(crate) fn new(
        default_stack_size: usize,
        stall_report: Option<Duration>,
        stack_release: Option<Duration>,
        compact_parked: bool,
        max_blocking_threads: usize,
        worker: WorkerLink,
    ) -> io::Result<Rc<Scheduler>> {
        #[cfg(greenweave_chaos)]
        super::chaos::runtime_starting();
        let reactor = Rc::new(Reactor::new()?);
        let remote = worker.pool.remote(worker.index).clone();
        let id_step = worker.pool.len() as u64;
        let first_id = worker.index as u64 + 1;
        reactor.register_remote(std::os::fd::AsRawFd::as_raw_fd(&remote.eventfd))?;
        let stall = stall_report.map(StallWatch::start).transpose()?;
        let metrics = worker.pool.metrics(worker.index).clone();
        let blocking_pool = super::offload::PoolHandle::new(max_blocking_threads, metrics.clone());
        Ok(Rc::new(Scheduler {
            reactor,
            worker,
            remote,
            remote_pending: Cell::new(0),
            ready: ReadyQueue::default(),
            current: Cell::new(std::ptr::null()),
            tasks: RefCell::new(TaskTable::default()),
            timers: RefCell::new(super::timer::Timers::default()),
            next_id: Cell::new(first_id),
            id_step,
            spare_tasks: RefCell::new(Vec::new()),
            countdown: Cell::new(RUNS_BETWEEN_POLLS),
            runs_end: Cell::new(u64::from(RUNS_BETWEEN_POLLS)),
            sample_runs_after: Cell::new(0),
            sample_started: Cell::new(None),
            polls_without_blocking: Cell::new(0),
            hot_counters: HotCounters::default(),
            metrics,
            woken_scratch: Cell::new(Vec::new()),
            stubborn_tasks: Cell::new(0),
            default_stack_size,
            blocking_pool,
            stall,
            coarse_now: Cell::new(Instant::now()),
            stack_sweep: StackSweep::new(stack_release, compact_parked),
        }))
    }

    /// Makes this the thread's scheduler until the guard drops.
    fn enter(&self) -> EnterGuard {
        crate::overflow::set_green_name_source(current_green_name);
        if in_runtime() {
            panic!(
                "greenweave::run called inside a greenweave runtime; spawn a green thread \
                 (greenweave::spawn) instead of starting a runtime within one"
            );
        }
        #[cfg(feature = "hooks")]
        crate::hooks::learn_std_parker();
        SCHEDULER.set(self);
        let os_thread_greenlets = World::new();
        os_thread_greenlets.leave();
        EnterGuard {
            os_thread_greenlets,
        }
    }

    /// Creates a task running `body` on `stack` and queues it. The body is handed its own
    /// task (for its cancellation flag).
    pub(crate) fn spawn_task(
        &self,
        name: Option<Box<str>>,
        stack: Stack,
        body: impl FnOnce(&Task) + 'static,
    ) -> Rc<Task> {
        let id = self.next_id.get();
        self.next_id.set(id + self.id_step);
        let slot = self.tasks.borrow_mut().reserve();
        let task = self.new_task(id, slot, name);
        let parent = self.current.get();
        // SAFETY: a non-null `current` is the running task, held by `run_task`.
        task.parent.set(if parent.is_null() {
            0
        } else {
            unsafe { (*parent).id }
        });
        let this: *const Task = Rc::as_ptr(&task);
        let coroutine = TaskCoroutine::with_stack(stack, move |yielder, _first_wake| {
            // SAFETY: the coroutine lives in this task and runs only while the task is alive:
            // `run_task` holds an Rc while it resumes it, and everything that drops it
            // (`finish`, `shutdown`, `TaskTable`'s destructor) takes it out of a task that is
            // still held. Every field reached through it is a Cell or RefCell.
            let this = unsafe { &*this };
            this.yielder.set(yielder);
            // Parks keep the resumer in the task record (`suspend_to_scheduler`), which the
            // switch reads anyway; the yielder's copy, at the top of the stack, is what the
            // body's root leaves by, so it is brought up to date however the body ends.
            this.resumer.set(yielder.resumer());
            let _hand_back = ResumerHandBack {
                yielder,
                slot: &this.resumer,
            };
            body(this);
        });
        let empty = task.coroutine.replace(Some(coroutine));
        // A new or reused task has no coroutine yet: nothing to drop, so skip the drop glue
        // (an out-of-line call on every spawn).
        debug_assert!(empty.is_none());
        std::mem::forget(empty);
        self.tasks.borrow_mut().fill(task.clone());
        self.ready.push_back(task.clone());
        self.metrics.spawned();
        #[cfg(feature = "tracing")]
        super::trace::spawned(&task);
        task
    }

    /// A fresh task: a spare one reset, or a new allocation.
    #[inline(always)]
    fn new_task(&self, id: u64, slot: usize, name: Option<Box<str>>) -> Rc<Task> {
        let spare = self.spare_tasks.borrow_mut().pop();
        if let Some(mut task) = spare
            && let Some(reset) = Rc::get_mut(&mut task)
        {
            reset.reuse(id, slot, name);
            return task;
        }
        allocate_task(id, slot, name)
    }

    /// Keeps `task` for reuse if it is finished and the caller holds its last reference
    /// (which the caller then drops).
    #[inline]
    pub(crate) fn recycle(&self, task: &Rc<Task>) {
        if Rc::strong_count(task) == 1 && task.state.get() == TaskState::Finished {
            self.keep_spare(task);
        }
    }

    /// Keeps a finished, otherwise unreferenced `task` for a later spawn, if there is room.
    #[inline]
    fn keep_spare(&self, task: &Rc<Task>) {
        let mut spare = self.spare_tasks.borrow_mut();
        if spare.len() < SPARE_TASKS {
            spare.push(task.clone());
        }
    }

    /// Counts (`true`) or uncounts (`false`) a cancelled green thread that cannot end before
    /// other green threads do (a `thread::scope` waiting for the green threads it spawned)
    /// with the stubborn ones: shutdown stops running green threads once only such ones are
    /// left, rather than running for ever the stubborn ones they wait for. The caller uncounts
    /// before its green thread ends; shutdown, which gives up on what is left, resets the count.
    pub(crate) fn count_waiting_for_others(&self, waiting: bool) {
        let count = self.stubborn_tasks.get();
        self.stubborn_tasks.set(if waiting {
            count + 1
        } else {
            count.saturating_sub(1)
        });
    }

    /// The running task.
    pub(crate) fn current_task(&self) -> Rc<Task> {
        let task = self.current_task_ref();
        // SAFETY: `current` was made from the `Rc` that `run_task` holds while it is set, so
        // it points into a live Rc allocation; the extra count is owned by the new Rc.
        unsafe {
            Rc::increment_strong_count(task);
            Rc::from_raw(task)
        }
    }

    /// Whether `task` is the running task.
    #[inline]
    pub(crate) fn is_current(&self, task: &Task) -> bool {
        std::ptr::eq(self.current_task_ref(), task)
    }

    /// The running task's key, without counting a reference.
    #[inline]
    pub(crate) fn current_task_key(&self) -> TaskKey {
        // SAFETY: see `current_task_ref`; the reference does not outlive this call.
        unsafe { (*self.current_task_ref()).key() }
    }

    /// Whether the stall report is on: the one test its hooks cost the scheduler's paths
    /// while it is off (each hook's work is out of line).
    #[inline(always)]
    fn watches_stalls(&self) -> bool {
        self.stall.is_some()
    }

    /// The stall report's part of a switch into `task`.
    #[inline(never)]
    fn stall_entering(&self, task: &Task) {
        if let Some(watch) = &self.stall {
            task.attention
                .set(task.attention.get() | Task::STALL_WATCHED);
            watch.entering(task);
        }
    }

    /// The running task, without counting a reference: valid until it next parks (it stays
    /// alive at least until then, held by `run_task`).
    #[inline]
    fn current_task_ref(&self) -> *const Task {
        let task = self.current.get();
        if task.is_null() {
            not_on_a_green_thread();
        }
        task
    }

    /// Makes `task` runnable if it is still in park number `park`, with `wake` as the reason.
    #[inline]
    pub(crate) fn unpark(&self, task: Rc<Task>, park: u64, wake: Wake) {
        if task.is_in_park(park) {
            self.make_runnable(task, wake);
        }
    }

    /// Queues a parked `task` to run, woken for `wake`.
    #[inline(always)]
    fn make_runnable(&self, task: Rc<Task>, wake: Wake) {
        #[cfg(feature = "tracing")]
        super::trace::woken(&task, wake);
        task.state.set(TaskState::Runnable);
        task.wake.set(wake);
        task.waiting.set(None);
        self.ready.push_back(task);
    }

    /// Puts a compacted task's frames and coroutine back (`runtime::compaction`) before it
    /// runs, and counts it. With no green thread current meanwhile: the checking mode's
    /// restore takes a lock, which under the hooks would otherwise park the very green thread
    /// whose stack is not back yet.
    #[cold]
    #[inline(never)]
    fn restore_to_run(&self, task: &Task) {
        let current = self.current.replace(std::ptr::null());
        if task.restore_compacted() {
            self.metrics.stack_restored();
        }
        self.current.set(current);
    }

    /// Runs tasks until `done()` is true (returning `true`), or until every remaining task is
    /// parked with nothing that could wake one: then panics with the deadlock report, or
    /// returns `false`, as `on_deadlock` says.
    fn run_until(&self, done: impl Fn() -> bool, on_deadlock: OnDeadlock) -> bool {
        loop {
            if done() {
                return true;
            }
            self.begin_period();
            // Run ready tasks in FIFO order; a task that yields goes to the back. Every
            // RUNS_BETWEEN_POLLS runs, timers and I/O get a turn even if the queue never
            // empties, so `yield_now` loops cannot starve them (and a busy queue does not pay a
            // system call per task).
            loop {
                let Some(task) = self.ready.pop_front() else {
                    break;
                };
                self.ready.prefetch_ahead();
                self.run_task(task);
                if done() {
                    // The countdown does not see this run: count it for the metrics.
                    self.runs_end.set(self.runs_end.get() + 1);
                    return true;
                }
                let left = self.countdown.get() - 1;
                self.countdown.set(left);
                if left == 0 {
                    self.stop();
                }
            }
            // Nothing is ready: wait for I/O until the nearest deadline (one clock read serves
            // both, and the parks' clock: the poll below does not read it again unless it
            // waits, and a run of sweeps due at once (a compaction backlog) polls without
            // waiting, so without this every park meanwhile looked older than it was).
            let now = Instant::now();
            self.coarse_now.set(now);
            self.fire_timers(now);
            if !self.ready.is_empty() {
                continue;
            }
            let sweep_due = self.look_at_stacks(now);
            let next_deadline = self.timers.borrow_mut().next_deadline();
            // The worker's tokio runtime's next timer, or "now" when it has work left.
            #[cfg(feature = "tokio")]
            let next_deadline = super::tokio_context::earliest(next_deadline);
            let timeout = next_deadline.map(|deadline| deadline.saturating_duration_since(now));
            if timeout.is_none() && !self.can_anything_wake() {
                // A remote wake-up may be queued behind the eventfd (its sender already gone):
                // look once more, without blocking, before calling it a deadlock.
                self.poll(Some(Duration::ZERO));
                if !self.ready.is_empty() {
                    continue;
                }
                match on_deadlock {
                    OnDeadlock::Panic => {
                        let verdict = self
                            .worker
                            .pool
                            .stuck(self.worker.index, || self.deadlock_lines());
                        if let Some(report) = verdict {
                            panic!("{report}");
                        }
                        // Only another worker can wake one of ours: wait for its job.
                    }
                    OnDeadlock::Stop => return false,
                }
            }
            // Wake for the next stack sweep too, but only after the verdict above: a sweep
            // due is no reason to think a green thread could wake.
            let timeout = match sweep_due {
                Some(due) => {
                    let until_sweep = due.saturating_duration_since(now);
                    Some(timeout.map_or(until_sweep, |timeout| timeout.min(until_sweep)))
                }
                None => timeout,
            };
            if let Some(watch) = &self.stall {
                watch.idle();
            }
            // What a reader on another thread sees while this worker waits is exact.
            self.publish_metrics();
            // Under the hooks, green threads in std's `thread::park` need the scheduler to
            // watch their OS thread's parker word while it sleeps (`hooks/futex.rs`).
            #[cfg(feature = "hooks")]
            let timeout = if crate::hooks::std_parker_before_sleep() {
                timeout
            } else {
                Some(Duration::ZERO)
            };
            self.poll(timeout);
            #[cfg(feature = "hooks")]
            crate::hooks::std_parker_after_poll();
            // `poll` read the clock when epoll returned.
            self.fire_timers(self.coarse_now.get());
        }
    }

    /// Fires due timers and polls epoll without blocking, making what they wake runnable: what
    /// the loop does every `RUNS_BETWEEN_POLLS` runs, and a green thread whose budget is spent
    /// before it yields (`budget`), so that what it kept waiting runs before it does again.
    pub(crate) fn poll_without_blocking(&self) {
        // One clock read per look: the timers' and the dump's (the poll below does not read it
        // again).
        let now = Instant::now();
        self.coarse_now.set(now);
        // Only what could have something to say: the timers when one is set, epoll when an
        // fd is registered or another thread may wake us. A pure compute-and-yield program
        // makes no system call here.
        if !self.timers.borrow().is_empty() {
            self.fire_timers(now);
        }
        if self.reactor.has_registrations() || self.remote_may_wake() {
            self.poll(Some(Duration::ZERO));
        }
        self.look_at_stacks(now);
        #[cfg(feature = "hooks")]
        crate::hooks::std_parker_after_poll();
        let polls = self.polls_without_blocking.get().wrapping_add(1);
        self.polls_without_blocking.set(polls);
        if polls.is_multiple_of(POLLS_PER_SAMPLE) {
            self.begin_period();
        } else {
            self.sample_runs_after.set(0);
            self.count_down(RUNS_BETWEEN_POLLS);
        }
    }

    /// The loop's stop after `countdown` runs: the end of a scheduling delay sample (the green
    /// thread it measures runs next), or a poll. Out of line: once per 61 runs at most.
    #[cold]
    #[inline(never)]
    fn stop(&self) {
        let runs_after = self.sample_runs_after.get();
        if runs_after != 0 {
            self.end_delay_sample(runs_after);
        } else {
            self.poll_without_blocking();
        }
    }

    /// Ends the scheduling delay sample under way (its green thread runs next) and counts
    /// down the `runs_after` runs left to the next poll.
    #[inline(never)]
    fn end_delay_sample(&self, runs_after: u32) {
        self.sample_runs_after.set(0);
        if let Some(started) = self.sample_started.get() {
            self.metrics.record_delay(started.elapsed());
        }
        self.count_down(runs_after);
    }

    /// The green threads run so far.
    fn runs(&self) -> u64 {
        self.runs_end.get() - u64::from(self.countdown.get())
    }

    /// Sets the loop's countdown to its next stop to `runs`.
    #[inline]
    fn count_down(&self, runs: u32) {
        self.runs_end.set(self.runs() + u64::from(runs));
        self.countdown.set(runs);
    }

    /// Starts the loop's next period after a poll: publishes the metrics, counts down to the
    /// next poll, and starts a scheduling delay sample for the green thread at the back of
    /// the ready queue (it runs `ahead` runs from now, or `ahead + 1` if a green thread runs
    /// now: this is a poll from its budget), ended by `stop` when it is next.
    #[inline(never)]
    fn begin_period(&self) {
        self.publish_metrics();
        let queued = self.ready.len() as u32;
        let ahead = queued.saturating_sub(1) + u32::from(!self.current.get().is_null());
        self.sample_runs_after.set(0);
        if queued == 0 || ahead >= RUNS_BETWEEN_POLLS {
            self.count_down(RUNS_BETWEEN_POLLS);
        } else if ahead == 0 {
            // It runs next: nothing in between, no clock to read.
            self.metrics.record_delay(Duration::ZERO);
            self.count_down(RUNS_BETWEEN_POLLS);
        } else {
            self.sample_started.set(Some(Instant::now()));
            self.sample_runs_after.set(RUNS_BETWEEN_POLLS - ahead);
            self.count_down(ahead);
        }
    }

    /// Makes the hot paths' counts readable from other threads (`runtime::metrics`).
    pub(crate) fn publish_metrics(&self) {
        // Runs completed: one under way (a green thread that asks for the metrics) is not
        // counted until it parks, yields or ends.
        self.hot_counters
            .publish(&self.metrics, self.runs(), self.ready.len());
    }

    /// Always inlined into the loop: a frame of its own costs a dozen instructions per switch.
    #[inline(always)]
    fn run_task(&self, task: Rc<Task>) {
        // Before anything is marked as running: a delay here is the scheduler's, not the
        // green thread's (the stall report must not count it).
        #[cfg(greenweave_chaos)]
        super::chaos::before_run(task.yielder.get().is_null());
        task.state.set(TaskState::Running);
        super::budget::refill();
        let wake = task.wake.replace(Wake::Notified);
        if self.watches_stalls() {
            self.stall_entering(&task);
        }
        self.current.set(Rc::as_ptr(&task));
        #[cfg(feature = "tracing")]
        super::trace::switch_in(&task);
        task.greenlets.enter();
        let outcome = {
            let mut coroutine = task.coroutine.borrow_mut();
            if coroutine.is_none() {
                // Compacted while it was parked: its frames go back now, the first time
                // anything needs its stack (the test is the one `expect` below makes anyway).
                drop(coroutine);
                self.restore_to_run(&task);
                coroutine = task.coroutine.borrow_mut();
            }
            let coroutine = coroutine
                .as_mut()
                .expect("a runnable task has its coroutine");
            coroutine.resume(wake)
        };
        task.greenlets.leave();
        #[cfg(feature = "tracing")]
        super::trace::switch_out(&task);
        self.current.set(std::ptr::null());
        match outcome {
            CoroutineResult::Yield(Suspend::Yield) => {
                task.state.set(TaskState::Runnable);
                self.ready.push_back(task);
            }
            CoroutineResult::Yield(Suspend::Park(request)) => {
                // SAFETY: the request is in the frame of the `park` that just suspended this
                // task, which is alive until the task is resumed, and so is the `io` it borrows
                // (an argument of that `park`); nothing resumes it before `arm_park` returns.
                let request = unsafe { request.as_ref() };
                #[cfg(feature = "tracing")]
                super::trace::parked(&task, &request.wait);
                self.arm_park(task, request)
            }
            CoroutineResult::Return(()) => self.finish(task),
        }
    }

    /// Arms what a task asked for when it parked, now that its switch out is complete.
    /// Always inlined into `run_task`: every park passes here.
    #[inline(always)]
    fn arm_park(&self, task: Rc<Task>, request: &ParkRequest<'_>) {
        let park = task.park_number.get();
        task.state.set(TaskState::Parked);
        if let (Some(io), Wait::Io { interest, .. }) = (request.io, &request.wait) {
            io.add_waiter(*interest, task.clone(), park);
        }
        if let Some(deadline) = request.deadline {
            self.timers
                .borrow_mut()
                .insert(deadline, task.clone(), park);
        }
        task.waiting
            .set(Some((request.wait, request.deadline.is_some())));
        // For `runtime::dump`: plain stores of what is at hand, no clock read.
        task.parked_since.set(Some(self.coarse_now.get()));
        task.parked_until.set(request.deadline);
        #[cfg(greenweave_compact_check)]
        super::compaction::check_at_park(&task, &self.metrics);
    }

    fn finish(&self, task: Rc<Task>) {
        #[cfg(feature = "tracing")]
        super::trace::finished(&task);
        task.state.set(TaskState::Finished);
        if task.is_stubborn() {
            self.stubborn_tasks.set(self.stubborn_tasks.get() - 1);
        }
        if self.watches_stalls() {
            self.stall_finished(&task);
        }
        // Dropping the finished coroutine returns its stack to the pool now, not when the last
        // JoinHandle goes.
        drop(task.coroutine.borrow_mut().take());
        task.greenlets.end();
        self.tasks.borrow_mut().remove(task.slot);
        self.hot_counters.finished();
        self.metrics.ended(1);
        match task.joiner.take() {
            Some(Joiner::Green(joiner, park)) => self.unpark(joiner, park, Wake::Notified),
            Some(Joiner::Future(waker)) => waker.wake(),
            None => {}
        }
        // A detached task's last reference is this one.
        self.recycle(&task);
    }

    /// The stall report's part of a park or a yield of the running green thread `task`, on its
    /// stack (so that a reported stall's end can show a backtrace of the park); reached
    /// through `attend` (`Task::STALL_WATCHED`). Parks and yields attend to nothing while they
    /// unwind: such a park does not switch, and the stall goes on.
    #[inline(never)]
    fn stall_parking(&self, task: &Task) {
        if let Some(watch) = &self.stall {
            watch.parking(task);
        }
    }

    /// The stall report's part of `task`'s end.
    #[inline(never)]
    fn stall_finished(&self, task: &Task) {
        if let Some(watch) = &self.stall {
            watch.finished(task);
        }
    }

    /// The long-park stack sweep's look at `now` (`runtime::stack_release`): sweeps the
    /// stacks of green threads parked long enough if one is due; returns when the next is.
    #[inline]
    fn look_at_stacks(&self, now: Instant) -> Option<Instant> {
        let sweep = self.stack_sweep.as_ref()?;
        sweep.look(now, self.runs(), &self.metrics, &mut |from, each| {
            let tasks = self.tasks.borrow();
            let slots = tasks.slots.get(from..).unwrap_or_default();
            for (offset, task) in slots.iter().enumerate() {
                if let Some(task) = task
                    && !each(task)
                {
                    return Some(from + offset);
                }
            }
            None
        })
    }

    /// Fires the timers due at `now` (a clock read of the caller's: a timer that falls due
    /// just after it fires at the next look, never early).
    fn fire_timers(&self, now: Instant) {
        // The poll's buffer (`woken_scratch`), free between polls: no allocation per batch.
        let mut due = self.woken_scratch.take();
        self.timers
            .borrow_mut()
            .expire(now, |task, park| due.push((task, park)));
        for (task, park) in due.drain(..) {
            self.unpark(task, park, Wake::TimedOut);
        }
        self.woken_scratch.set(due);
    }

    /// Polls the reactor (and the remote queue) and makes woken tasks runnable.
    fn poll(&self, timeout: Option<Duration>) {
        let mut woken = self.woken_scratch.take();
        let (remote, ready) = self
            .reactor
            .poll(timeout, |task, park| woken.push((task, park)))
            .unwrap_or_else(|error| panic!("greenweave: epoll_wait failed: {error}"));
        let waited = timeout != Some(Duration::ZERO);
        self.metrics.io_polled(ready, waited);
        if waited {
            // A poll that did not wait comes right after a clock read (`poll_without_blocking`,
            // the idle loop's look before a deadlock verdict).
            self.coarse_now.set(Instant::now());
        }
        for (task, park) in woken.drain(..) {
            // Its record is in cache now (the reactor found it through it); ask for the stack
            // lines it resumes through too, so that a batch of wake-ups fetches them all at
            // once instead of one after another as each runs.
            task.prefetch_resume_frame();
            self.unpark(task, park, Wake::Notified);
        }
        self.woken_scratch.set(woken);
        // tokio's turn, when its epoll fd has events or its deadline passed: on the scheduler's
        // own stack only (a green thread's budget polls too; its turn waits for the loop).
        #[cfg(feature = "tokio")]
        if self.current.get().is_null() {
            super::tokio_context::turn_if_due();
        }
        if remote {
            self.remote.eventfd.drain();
            // Cleared before the list is taken: a wake-up pushed after the take sets it again.
            self.remote.queued.store(false, Ordering::Release);
            let woken = std::mem::take(
                &mut *self
                    .remote
                    .woken
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            );
            for key in woken {
                self.wake_task(key);
            }
            self.worker.pool.run_jobs(self.worker.index, self);
        }
    }

    /// Makes green thread `key` runnable if it is still alive and parked (in whatever park it
    /// is in: the woken code re-checks what it waits for). For wake-ups from other OS threads.
    pub(crate) fn wake_task(&self, key: TaskKey) {
        let task = self.tasks.borrow().get(key).cloned();
        if let Some(task) = task {
            let park = task.park_number.get();
            self.unpark(task, park, Wake::Notified);
        }
    }

    /// Whether another OS thread may send a wake-up (a remote operation in flight, or a live
    /// remote sender) or has sent one the scheduler has not taken yet.
    fn remote_may_wake(&self) -> bool {
        self.remote_pending.get() > 0
            || self.remote.handles.load(Ordering::Acquire) > 0
            || self.remote.queued.load(Ordering::Acquire)
    }

    /// Whether a parked task can be woken by something other than a green thread.
    fn can_anything_wake(&self) -> bool {
        self.remote_may_wake()
            || tokio_tasks_may_wake()
            || self
                .tasks
                .borrow()
                .iter()
                .any(|task| match task.waiting.get() {
                    Some((Wait::Park, false)) => task.may_be_unparked(),
                    Some((wait, has_deadline)) => wait.can_end_by_itself(has_deadline),
                    None => task.state.get() != TaskState::Parked,
                })
    }

    /// Calls `each` with every unfinished task of this worker (in slot order), after `count`
    /// with how many there are: what `runtime::dump` reads. Neither may spawn or end a task.
    pub(crate) fn for_each_task<S>(
        &self,
        state: &mut S,
        count: impl FnOnce(&mut S, usize),
        mut each: impl FnMut(&mut S, &Task),
    ) {
        let tasks = self.tasks.borrow();
        count(state, tasks.len());
        for task in tasks.iter() {
            each(state, task);
        }
    }

    /// The deadlock report's lines for this worker's green threads (the header is the
    /// pool's: `workers::Pool::stuck`).
    fn deadlock_lines(&self) -> String {
        let mut tasks: Vec<Rc<Task>> = self.tasks.borrow().iter().cloned().collect();
        tasks.sort_by_key(|task| task.id);
        let on_worker = if self.worker.pool.len() > 1 {
            format!(" on worker {}", self.worker.index)
        } else {
            String::new()
        };
        let mut lines = String::new();
        for task in tasks {
            let waiting = match task.waiting.get() {
                Some((wait, _)) => wait.to_string(),
                None => "not parked".to_owned(),
            };
            lines.push_str(&format!(
                "\n  green thread {}{on_worker}: {waiting}",
                task.describe()
            ));
        }
        lines
    }

    /// Ends every task still alive: each is cancelled (woken with `Cancelled`, so it unwinds
    /// from its park point and its destructors run; they cannot park, see `park`). Tasks
    /// spawned meanwhile are cancelled in the next pass.
    ///
    /// Always completes. A task that catches its cancellation meets it again at every park
    /// (it is sticky), letting the others run each time; one that has caught it
    /// `SHUTDOWN_DELIVERIES` times is given up on: it is not run again and its stack is
    /// leaked (its frames hold live values, so it can be neither reused nor unwound), with a
    /// line on stderr naming it. Any other task still alive then, stuck with nothing that
    /// could wake it or never started, is dropped, which unwinds its stack.
    fn shutdown(&self) {
        for _ in 0..3 {
            let tasks: Vec<Rc<Task>> = self.tasks.borrow().iter().cloned().collect();
            if tasks.is_empty() {
                break;
            }
            for task in tasks {
                task.request_cancel();
                if task.state.get() == TaskState::Parked {
                    self.unpark(task.clone(), task.park_number.get(), Wake::Cancelled);
                }
            }
            let only_stubborn_left = || self.tasks.borrow().len() == self.stubborn_tasks.get();
            // Stuck with nothing that could wake the rest (say, green threads spawned by
            // destructors meanwhile, waiting for each other): the next pass cancels them too.
            self.run_until(only_stubborn_left, OnDeadlock::Stop);
        }
        self.timers.borrow_mut().clear();
        let leftovers = self.tasks.borrow_mut().drain();
        self.metrics.ended(leftovers.len());
        self.stubborn_tasks.set(0);
        for task in leftovers {
            let coroutine = task.abandon();
            let stubborn = task.is_stubborn();
            if stubborn {
                report_abandoned(&task);
            }
            // `run` itself may have been called during an unwind (from a destructor):
            // unwinding a stack then would be a panic while panicking, which aborts. Leak it
            // instead, as a stubborn one is.
            task.end_coroutine(coroutine, stubborn || std::thread::panicking());
        }
        self.ready.clear();
        self.publish_metrics();
    }
}

/// How many times shutdown raises a green thread's cancellation before giving up on it (it
/// keeps catching it).
const SHUTDOWN_DELIVERIES: u32 = 64;

impl Task {
    /// Whether this task has caught its cancellation so often that shutdown gives up on it.
    fn is_stubborn(&self) -> bool {
        self.cancellations_delivered.get() >= SHUTDOWN_DELIVERIES
    }
}

/// Ends `task`, unfinished, whose runtime is ending without it, as shutdown ends its leftovers:
/// marks it finished (`Task::abandon`) and unwinds its stack, or leaks it (never to be resumed)
/// if it keeps catching its cancellation or the thread is unwinding. For a green thread that
/// must not outlive a stack which the runtime's end is unwinding (the green threads of a
/// `thread::scope` whose stack that is: they borrow from it). Does nothing to a task already
/// ended. If the scheduler still lists the task (its shutdown has not taken the leftovers yet),
/// it is taken off its table and ready queue, so the loop neither runs it nor waits for it.
pub(crate) fn end_abandoned(task: &Task) {
    let retired = in_runtime()
        .then(|| with_scheduler("a runtime's end", |scheduler| scheduler.retire(task)))
        .flatten();
    let coroutine = task.abandon();
    // A stubborn one is reported by shutdown, which holds the task if it is not retired here.
    task.end_coroutine(coroutine, task.is_stubborn() || std::thread::panicking());
    drop(retired);
}

impl Scheduler {
    /// Takes `task` off the task table and the ready queue, if it is on them, for
    /// `end_abandoned`; returns the references taken, for the caller to drop once the task is
    /// ended.
    fn retire(&self, task: &Task) -> Option<(Rc<Task>, Option<Rc<Task>>)> {
        let listed = {
            let mut tasks = self.tasks.try_borrow_mut().ok()?;
            let is_listed = tasks
                .get(task.key())
                .is_some_and(|listed| std::ptr::eq(Rc::as_ptr(listed), task));
            if !is_listed {
                return None;
            }
            tasks.remove(task.slot)?
        };
        if task.is_stubborn() {
            self.stubborn_tasks
                .set(self.stubborn_tasks.get().saturating_sub(1));
            report_abandoned(task);
        }
        Some((listed, self.ready.remove(task)))
    }
}

/// Whether the runtime running on this thread is ending: its shutdown has begun (or is about
/// to, on this worker).
pub(crate) fn runtime_is_ending() -> bool {
    in_runtime()
        && with_scheduler("a runtime's end", |scheduler| {
            scheduler.worker.pool.is_shutting_down()
        })
}

/// Says on stderr that shutdown gave up on `task`, which kept catching its cancellation.
#[cold]
fn report_abandoned(task: &Task) {
    eprintln!(
        "greenweave: green thread {} caught its cancellation {SHUTDOWN_DELIVERIES} times while \
         the runtime was shutting down; it was stopped where it stood and its stack leaked \
         (catch_unwind in a loop must let greenweave's cancellation through: re-raise payloads \
         you do not recognise with std::panic::resume_unwind; with the hooks feature, a loop of \
         hooked libc calls must stop on their ECANCELED errors, and a std or parking_lot lock, \
         condvar or channel that nothing will release cannot be left by unwinding: its futex \
         wait is inside a C call)",
        task.describe()
    );
}

/// When a worker that runs a main green thread leaves its loop.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ends {
    /// When its main green thread has finished; it then starts the end of the whole runtime
    /// (`Runtime::run`: worker 0).
    WithMain,
    /// When the runtime ends (`Runtime::run_on_every_worker`: the last worker's closure to
    /// return starts the end).
    WithPool,
}

/// A scheduler for worker `worker` on this OS thread, configured by `settings`.
fn start_scheduler(settings: &super::Runtime, worker: WorkerLink) -> Rc<Scheduler> {
    let stall_report = super::stall::threshold(settings.stall_report);
    Scheduler::new(
        settings.stack_size,
        stall_report,
        settings.stack_release,
        settings.compact_parked,
        settings.max_blocking_threads,
        worker,
    )
    .unwrap_or_else(|error| panic!("greenweave: could not start a runtime: {error}"))
}

/// Runs worker `worker`'s scheduler on this OS thread, with no main green thread of its own,
/// until the runtime ends; then ends its green threads.
pub(crate) fn run_worker(settings: &super::Runtime, worker: WorkerLink) {
    let scheduler = start_scheduler(settings, worker);
    let _entered = scheduler.enter();
    // Ends after the green threads, at the end of this frame (`shutdown` runs first).
    #[cfg(feature = "tokio")]
    let _tokio = super::tokio_context::start(&scheduler);
    let pool = scheduler.worker.pool.clone();
    let ended = || pool.is_shutting_down();
    let run = panic::catch_unwind(AssertUnwindSafe(|| {
        scheduler.run_until(ended, OnDeadlock::Panic)
    }));
    scheduler.shutdown();
    if let Err(payload) = run {
        panic::resume_unwind(payload);
    }
}

/// Runs `main` as the first green thread of a new scheduler on this OS thread (worker
/// `worker`), configured by `settings`, until `ends` says; then ends the remaining green
/// threads, and returns what `main` returned (or re-raises its panic).
///
/// `main` and its result may borrow from the caller (`'a`): every way out of this function
/// ends the main green thread first (see the erasure below).
pub(crate) fn run_main<'a, T: 'a>(
    settings: &super::Runtime,
    worker: WorkerLink,
    main: impl FnOnce() -> T + 'a,
    ends: Ends,
) -> T {
    let scheduler = start_scheduler(settings, worker);
    let _entered = scheduler.enter();
    // Ends after the green threads, at the end of this frame (`shutdown` runs first).
    #[cfg(feature = "tokio")]
    let _tokio = super::tokio_context::start(&scheduler);
    let stack = Stack::new(settings.main_stack_size)
        .unwrap_or_else(|error| panic!("greenweave: could not start a runtime: {error}"));
    let outcome: Rc<RefCell<Option<std::thread::Result<T>>>> = Rc::new(RefCell::new(None));
    let slot = outcome.clone();
    let body: Box<dyn FnOnce(&Task) + 'a> = Box::new(move |task| {
        let outcome = panic::catch_unwind(AssertUnwindSafe(main));
        super::locals::end_of_green_thread(task);
        *slot.borrow_mut() = Some(outcome);
    });
    // SAFETY: only the lifetime is erased; the body (`main`, and the slot for its result) is
    // never used after this function returns or unwinds. The body lives in the main task's
    // coroutine, and the scheduler, which is never shared (`Rc` owned by this frame), ends
    // every coroutine of its tasks before this frame goes, on every path out: `run_until`
    // returns when the main green thread has finished (its body consumed); if it panics (the
    // deadlock report, or anything else), the panic is caught and `shutdown` ends every task
    // still alive by an unwind (the body's captures dropped) or, for one that kept catching
    // its cancellation, by leaking its coroutine (`mem::forget`: its stack stays mapped and is
    // never resumed, so the borrows frozen on it are never used); if `shutdown` itself panics,
    // the scheduler's drop, on the way out of this frame, does the same (`TaskTable`'s
    // destructor: unwind, or leak while panicking). No coroutine is ever dropped or resumed
    // after that.
    let body: Box<dyn FnOnce(&Task) + 'static> = unsafe {
        std::mem::transmute::<Box<dyn FnOnce(&Task) + 'a>, Box<dyn FnOnce(&Task) + 'static>>(body)
    };
    let main_task = scheduler.spawn_task(Some("main".into()), stack, body);
    let pool = scheduler.worker.pool.clone();
    let ended = || match ends {
        Ends::WithMain => main_task.state.get() == TaskState::Finished,
        Ends::WithPool => pool.is_shutting_down(),
    };
    let run = panic::catch_unwind(AssertUnwindSafe(|| {
        scheduler.run_until(ended, OnDeadlock::Panic)
    }));
    // The other workers end their green threads while this one does.
    pool.begin_shutdown();
    scheduler.shutdown();
    if let Err(payload) = run {
        panic::resume_unwind(payload);
    }
    match outcome
        .borrow_mut()
        .take()
        .expect("the main green thread finished")
    {
        Ok(value) => value,
        Err(payload) if payload.is::<Cancelled>() => {
            panic!("greenweave: the main green thread was cancelled")
        }
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// Parks the running green thread until something wakes it or `deadline` passes.
///
/// `register` runs with the task and its new park number before the switch, for waits whose
/// waker is another green thread (a joiner slot, a lock's queue): nothing else can run until
/// the switch, so registering then cannot race. Timers and fd waits are armed by the scheduler
/// after the switch.
///
/// Every park is a cancellation point, and a cancellation is sticky: it is raised (as an
/// unwind caught at the green thread's root) at every park until the green thread ends, so a
/// loop that catches it cannot keep the green thread alive for ever. From the second delivery
/// on, the green thread first lets the others run, so such a loop cannot starve them either.
///
/// A green thread never switches while it unwinds (see [`wait_while_unwinding`]): std keeps
/// "this thread is panicking" per OS thread, so a switch would show every other green thread
/// a panic that is not theirs. Such a park returns at once instead.
///
/// Returns [`Wake::Notified`] or [`Wake::TimedOut`] (its own deadline passed, or it could not
/// wait while unwinding). A `time::timeout` scope ends only at the top of a park, when its
/// deadline has already passed; a park woken by the scope's deadline returns `Notified`, so the
/// caller re-checks first and a result that arrived in the same turn is not lost.
///
/// Always inlined into its callers (each has its own `register` closure anyway): a frame of
/// ours between a caller's loop and the switch costs a mispredicted return on every park (see
/// `yield_now`).
#[inline(always)]
pub(crate) fn park(
    what: &str,
    wait: Wait,
    deadline: Option<Instant>,
    io: Option<Rc<ScheduledIo>>,
    mut register: impl FnMut(&Rc<Task>, u64),
) -> Wake {
    let io = io.as_deref();
    let (task, counters) = with_scheduler(what, |scheduler| {
        (
            scheduler.current_task_ref(),
            &raw const scheduler.hot_counters,
        )
    });
    if std::thread::panicking() {
        return wait_while_unwinding(what, wait, deadline);
    }
    // SAFETY: `task` came from the Rc that `run_task` holds until this green thread suspends
    // below; borrowing that count (ManuallyDrop: never released here) saves a count update on
    // every park, and nothing of it is used after the suspend.
    let task = ManuallyDrop::new(unsafe { Rc::from_raw(task) });
    deliver_pending_cancellation(&task);
    // A `time::timeout` in force bounds this park too (and ends here if it has passed).
    let scope_in_force = if task.attention.get() & Task::IN_SCOPE != 0 {
        task.scope_deadline.get()
    } else {
        None
    };
    let (effective_deadline, scope) = match scope_in_force {
        None => (deadline, None),
        Some(scope) => bound_by_scope(deadline, scope),
    };
    let park = task.park_number.get() + 1;
    task.park_number.set(park);
    register(&task, park);
    count_park(counters, &wait);
    let request = ParkRequest {
        wait,
        deadline: effective_deadline,
        io,
    };
    // The request's lifetime is erased for the trip through the coroutine: the scheduler
    // reads it before this frame (and `io`, which it borrows) can go (see `Suspend::Park`).
    let request = NonNull::from(&request).cast::<ParkRequest<'static>>();
    match suspend_to_scheduler(&task, Suspend::Park(request)) {
        // Woken to be cancelled: unwind from here. Whatever this wait was for stays where it
        // is (a message in its channel, a result in its task).
        Wake::Cancelled => deliver_cancellation(&task),
        // The scope's deadline, not the caller's, ran out. What the caller waits for may have
        // arrived in the same turn of the scheduler (a green thread woken by an earlier timer
        // of that turn ran first), so this is a spurious wake-up, not the end of the scope: the
        // caller re-checks its condition, and if it must wait again, the next park finds the
        // scope elapsed before suspending and unwinds. A satisfied wait is never reported as
        // timed out, and an unsatisfied one leaves the value where it was.
        Wake::TimedOut
            if scope.is_some_and(|(scope_deadline, _)| {
                deadline.is_none_or(|own| scope_deadline < own)
            }) =>
        {
            Wake::Notified
        }
        wake => wake,
    }
}

/// A park for a green thread that must wait however it is interrupted: it neither raises a
/// pending cancellation nor is bounded by a `time::timeout` scope, and a cancellation that
/// wakes it is only a wake-up (the request stays set, for the caller to raise later). For the
/// offload layer's wait after it has already caught a cancellation or a scope's end: it must
/// still wait for the work it lent to another OS thread, and a park that raised again at once
/// each time would spin instead of letting the other green threads run.
pub(crate) fn park_uninterruptible(what: &str, wait: Wait) {
    park_uninterruptible_with(what, wait, |_, _| {});
}

/// [`park_uninterruptible`] for a wait whose waker is another green thread: `register` runs
/// with the task and its new park number before the switch, as in [`park`] (the wait of
/// `thread::scope` for its green threads).
pub(crate) fn park_uninterruptible_with(
    what: &str,
    wait: Wait,
    register: impl FnMut(&Rc<Task>, u64),
) {
    park_uninterruptible_until(what, wait, None, register);
}

/// [`park_uninterruptible_with`] bounded by `deadline`: returns [`Wake::TimedOut`] once it
/// passes, [`Wake::Cancelled`] for a cancellation (which stays requested, for the caller to
/// raise later), else [`Wake::Notified`]. For waits inside C frames that no unwind may cross
/// and that must honour their own timeout (the hooks' futex waits).
#[cfg_attr(not(feature = "hooks"), allow(dead_code))]
pub(crate) fn park_uninterruptible_until(
    what: &str,
    wait: Wait,
    deadline: Option<Instant>,
    mut register: impl FnMut(&Rc<Task>, u64),
) -> Wake {
    let (task, counters) = with_scheduler(what, |scheduler| {
        (
            scheduler.current_task_ref(),
            &raw const scheduler.hot_counters,
        )
    });
    if std::thread::panicking() {
        return wait_while_unwinding(what, wait, deadline);
    }
    // SAFETY: as in `park`: `run_task` holds the task's Rc until it suspends below.
    let task = ManuallyDrop::new(unsafe { Rc::from_raw(task) });
    let park = task.park_number.get() + 1;
    task.park_number.set(park);
    register(&task, park);
    count_park(counters, &wait);
    let request = ParkRequest {
        wait,
        deadline,
        io: None,
    };
    // As in `park`: the scheduler reads the request right after the switch.
    let request = NonNull::from(&request).cast::<ParkRequest<'static>>();
    suspend_to_scheduler(&task, Suspend::Park(request))
}

/// Counts a park for `wait` in the metrics of the scheduler whose `counters` these are, from
/// the parking green thread: `park` is inlined into its caller, where the kind of wait is a
/// constant, so this is one increment at a fixed offset (counted by the scheduler from the
/// request, it would first have to work the variant out of `Wait`'s layout).
#[inline(always)]
fn count_park(counters: *const HotCounters, wait: &Wait) {
    // SAFETY: `counters` is in the scheduler running this green thread, which outlives every
    // park of it (the pointer comes from `with_scheduler` in the same park).
    unsafe { (*counters).park(wait) }
}

/// What a park does when its green thread is unwinding (a destructor that waits, run during
/// a panic or a cancellation): it does not switch, since every other green thread would then
/// see `std::thread::panicking()` true (std's panic count is per OS thread), and so would the
/// code after `run` if the unwind never resumed.
///
/// A wait that can end without another green thread's help, or has its own deadline (sleeps,
/// I/O, `recv_timeout`, `wait_timeout`...), times out at once: the caller reports a timeout
/// or an I/O error. A wait that only another green thread can end and that has no deadline
/// (`Mutex::lock`, `join`, `recv`, `Event::wait`...) has no way to report failure, so it
/// panics with a message that says why; inside a destructor during an unwind that panic
/// aborts the process, as any panic escaping a destructor then does in Rust.
#[cold]
#[inline(never)]
fn wait_while_unwinding(what: &str, wait: Wait, deadline: Option<Instant>) -> Wake {
    if deadline.is_some() || matches!(wait, Wait::Sleep | Wait::Io { .. }) {
        return Wake::TimedOut;
    }
    panic!(
        "greenweave: {what} would wait while its green thread is unwinding (a destructor that \
         waits, run during a panic or a cancellation). A green thread does not switch while it \
         unwinds: std's panic state is per OS thread and every other green thread would see it. \
         Wait before the unwind starts, use a try_ or timed variant in the destructor (a timed \
         wait times out at once while unwinding), or move the wait to another green thread."
    );
}

/// Lets every other ready green thread run, then returns: the running green thread goes to the
/// back of the ready queue. A cancellation point, and bounded by a `time::timeout` in force, as
/// every park is; but nothing is armed and nothing but the scheduler resumes it, so it takes
/// no park number and needs no request.
///
/// Always inlined, into `thread::yield_now` and through it into the caller's loop: a frame of
/// ours between that loop and the switch costs a mispredicted return on every yield (the
/// switch leaves the return-stack predictor one entry off), measured at 75 ns per yield round
/// trip with this function out of line against 18 ns inlined.
#[inline(always)]
pub(crate) fn yield_now(what: &str) {
    let task = with_scheduler(what, |scheduler| scheduler.current_task_ref());
    // A green thread never switches while it unwinds (see `wait_while_unwinding`); a yield has
    // nothing to report, so it simply does not happen.
    if std::thread::panicking() {
        return;
    }
    // SAFETY: `run_task` holds the task's Rc until this green thread suspends below, and the
    // reference is not used after the suspend.
    let task = unsafe { &*task };
    // One load for the cancellation, the stall report and a `time::timeout` in force.
    if task.attention.get() != 0 {
        attend_at_yield(task);
    }
    // A yielded task goes straight back to the ready queue, never through `unpark`, so it is
    // always resumed with `Wake::Notified`; a cancellation requested meanwhile is delivered at
    // its next park.
    suspend_to_scheduler(task, Suspend::Yield);
}

/// Switches from the running green thread `task` back to the scheduler with `suspend`, and
/// returns why it was resumed.
///
/// The running stack may be the green thread's own or that of a coroutine or greenlet running
/// inside it (a generator that reads a socket, a greenlet that sleeps): the switch goes to the
/// scheduler from there, and the scheduler's `resume` of the green thread's coroutine records
/// that stack's pointer, so the wake-up resumes exactly the stack that parked. The stacks in
/// between stay suspended where they were (a nested `Coroutine::resume`, a greenlet switch),
/// and are unwound through, root by root, if the green thread is dropped while parked.
#[inline]
fn suspend_to_scheduler(task: &Task, suspend: Suspend) -> Wake {
    // SAFETY: the yielder was set by this green thread's body when it started and lives in
    // its root frame, which is alive: this green thread runs (`run_task` resumed it and set
    // it current), on its own stack or on one it resumed or switched to, each suspended in
    // the one before. The stack suspending here is resumed only by the scheduler, through this
    // coroutine (a coroutine is resumed only by its owner, which is suspended under it; a
    // greenlet only from its own green thread's world, see `greenlet::World`). Only `park`
    // and `yield_now` call this, and they never switch while unwinding. `task.resumer` was
    // filled from the yielder when the body started (`spawn_task`) and every resume since has
    // come back through here.
    unsafe {
        match suspend {
            Suspend::Yield => {
                Yielder::suspend_on_behalf(&task.resumer, &YIELD.0, || task.yielder.get())
            }
            park => {
                let message = Message::new(park);
                Yielder::suspend_on_behalf(&task.resumer, &message, || task.yielder.get())
            }
        }
    }
}

/// The message of every yield, in a static: a yield then writes nothing on its stack before
/// it switches (one cache line fewer among many runnable green threads; issue 33, item 2).
struct YieldMessage(Message<Suspend>);

// SAFETY: it holds `Suspend::Yield`, which has no pointer in it, and nothing ever writes it;
// receivers only copy it out (`Suspend` is `Copy`).
unsafe impl Sync for YieldMessage {}

static YIELD: YieldMessage = YieldMessage(Message::new(Suspend::Yield));

/// Hands a green thread's resumer, kept in its task record while the body runs, back to the
/// body's yielder when the body ends, by returning or unwinding: the root of the coroutine
/// leaves by the yielder's copy.
struct ResumerHandBack<'a> {
    yielder: &'a Yielder<Wake, Suspend>,
    slot: &'a Cell<StackPointer>,
}

impl Drop for ResumerHandBack<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the slot was filled from this yielder when the body started, and only
        // `suspend_to_scheduler` (`suspend_on_behalf` with this slot) has switched since.
        unsafe { self.yielder.take_resumer_from(self.slot) }
    }
}

/// The deadline of a park whose own deadline is `deadline`, inside the `time::timeout` scope
/// `scope` (its deadline and token), and the scope that bounds it, if any. Ends the scope
/// instead if its deadline has passed.
#[inline]
fn bound_by_scope(
    deadline: Option<Instant>,
    scope: (Instant, u64),
) -> (Option<Instant>, Option<(Instant, u64)>) {
    end_scope_if_elapsed(Some(scope));
    let (scope_deadline, _) = scope;
    let bounded = match deadline {
        Some(own) => own.min(scope_deadline),
        None => scope_deadline,
    };
    (Some(bounded), Some(scope))
}

/// Ends the `time::timeout` scope in force by unwinding to it, if its deadline has passed.
/// Only called where the green thread is not unwinding (parks and yields return before).
#[inline]
fn end_scope_if_elapsed(scope: Option<(Instant, u64)>) {
    if let Some((scope_deadline, token)) = scope
        && Instant::now() >= scope_deadline
    {
        panic::resume_unwind(Box::new(ScopeElapsed(token)));
    }
}

/// The panic payload that ends a `time::timeout` scope whose deadline passed, carrying the
/// token of the `timeout` call it belongs to.
pub(crate) struct ScopeElapsed(pub(crate) u64);

/// Whether `payload` is one of the runtime's interruptions of a park (a cancellation, a
/// `time::timeout` scope's end), both raised again at the green thread's next park: a wait
/// that catches one may let a result that arrived in the same instant win, and return it.
pub(crate) fn is_interruption(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<Cancelled>() || payload.is::<ScopeElapsed>()
}

/// Raises `task`'s cancellation, if one was requested. Only called where the green thread is
/// not unwinding (parks and yields return before).
///
/// The request stays set (a cancellation is sticky): a body that catches the unwind meets it
/// again at its next park. Every delivery after the first lets the other green threads run
/// before unwinding, so a loop that keeps catching it cannot starve them, and the runtime's
/// shutdown can count the deliveries and give up on such a green thread.
///
/// The same test covers the stall report's look at the park (`Task::STALL_WATCHED`), so that
/// the report costs a park nothing while it is off.
#[inline]
fn deliver_pending_cancellation(task: &Task) {
    if task.attention.get() & (Task::CANCEL | Task::STALL_WATCHED) != 0 {
        attend(task);
    }
}

/// What a yield does when its task needs attention: a park's (above), and the end of a
/// `time::timeout` scope whose deadline has passed.
#[cold]
#[inline(never)]
fn attend_at_yield(task: &Task) {
    deliver_pending_cancellation(task);
    end_scope_if_elapsed(task.scope_deadline.get());
}

/// What a park or yield does when its task needs attention: the stall report's look first
/// (printing a stall's end may itself park, under the hooks, before anything of this park is
/// registered), then the cancellation.
#[cold]
#[inline(never)]
fn attend(task: &Task) {
    if task.attention.get() & Task::STALL_WATCHED != 0 {
        with_scheduler("a park", |scheduler| scheduler.stall_parking(task));
    }
    if task.cancel_requested() {
        deliver_cancellation(task);
    }
}

#[cold]
#[inline(never)]
fn deliver_cancellation(task: &Task) -> ! {
    let delivered = task.cancellations_delivered.get();
    task.cancellations_delivered
        .set(delivered.saturating_add(1));
    if delivered.saturating_add(1) == SHUTDOWN_DELIVERIES {
        with_scheduler("a cancellation", |scheduler| {
            scheduler
                .stubborn_tasks
                .set(scheduler.stubborn_tasks.get() + 1)
        });
    }
    if delivered > 0 {
        suspend_to_scheduler(task, Suspend::Yield);
    }
    panic::resume_unwind(Box::new(Cancelled));
}
