//! Runtime metrics: counters per worker that a monitoring thread can read at any time, for the
//! cost of a few relaxed loads.
//!
//! Owns: [`RuntimeMetrics`] (the public, `Send + Sync` view of one runtime's counters, after
//! tokio's type of the same name), [`ParkReason`], [`WorkerMetrics`] (one worker's atomics,
//! written only by that worker's scheduler, or for the blocking-pool gauges only under that
//! pool's lock) and [`HotCounters`] (the few counts the scheduler's hottest paths bump, kept in
//! plain `Cell`s on its own thread and folded into the atomics at each poll).
//!
//! May not: make a switch pay an atomic read-modify-write, or a clock read. Every counter has
//! one writer, so a bump is `store(load + 1)` with relaxed ordering, never a locked
//! instruction. What a switch, a yield and a park count (polls, yields, parks by reason, the
//! ready queue's length) is counted in `HotCounters` and published when the scheduler is about
//! to wait in `epoll_wait`, after it ran its ready queue dry, every 488 green threads it runs
//! while the queue never empties, when a green thread of that worker asks for the metrics, and
//! when the worker ends: a reader on another OS thread sees those as of the last publication,
//! a reader on the worker itself sees them exactly. The scheduling delay is sampled at the
//! same moments (see [`RuntimeMetrics::worker_scheduling_delay_histogram_bucket_count`]).

use std::cell::Cell;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::task::Wait;

/// Why a green thread parked, as counted by [`RuntimeMetrics::worker_green_park_count`].
///
/// ```
/// use greenweave::runtime::ParkReason;
///
/// assert_eq!(ParkReason::ALL.len(), 12);
/// assert!(ParkReason::ALL.contains(&ParkReason::Sleep));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParkReason {
    /// [`thread::sleep`](crate::thread::sleep) and the other waits for a deadline alone.
    Sleep,
    /// A socket or other file descriptor to become readable or writable.
    Io,
    /// [`JoinHandle::join`](crate::thread::JoinHandle::join) of a green thread on the same
    /// worker.
    Join,
    /// A result from another OS thread: [`unblock`](crate::unblock), hostname lookups.
    Remote,
    /// A green synchronisation primitive: a channel, lock, semaphore, event...
    Sync,
    /// [`thread::scope`](crate::thread::scope) waiting for the green threads spawned in it.
    Scope,
    /// [`sync::select`](crate::sync::select) over several operations.
    Select,
    /// Joining a green thread spawned on another worker
    /// ([`thread::spawn_on`](crate::thread::spawn_on)).
    OtherWorker,
    /// An end of a [`sync::shared`](crate::sync::shared) channel, whose other end may be on
    /// another OS thread.
    Shared,
    /// A futex wait made green by the `hooks` feature (a std or parking_lot lock, condvar,
    /// channel or `thread::park`).
    Futex,
    /// [`thread::park`](crate::thread::park) with no deadline, ended by
    /// [`Thread::unpark`](crate::thread::Thread::unpark).
    Park,
    /// [`block_on`](crate::block_on) waiting for its future's waker.
    Future,
}

impl ParkReason {
    /// Every reason, in the order of their counters.
    pub const ALL: [ParkReason; PARK_REASONS] = [
        ParkReason::Sleep,
        ParkReason::Io,
        ParkReason::Join,
        ParkReason::Remote,
        ParkReason::Sync,
        ParkReason::Scope,
        ParkReason::Select,
        ParkReason::OtherWorker,
        ParkReason::Shared,
        ParkReason::Futex,
        ParkReason::Park,
        ParkReason::Future,
    ];

    /// The reason a park for `wait` is counted under.
    #[inline(always)]
    pub(crate) fn of(wait: &Wait) -> ParkReason {
        match wait {
            Wait::Sleep => ParkReason::Sleep,
            Wait::Io { .. } => ParkReason::Io,
            Wait::Join(_) => ParkReason::Join,
            Wait::Remote(_) => ParkReason::Remote,
            Wait::Sync { .. } | Wait::Lock { .. } => ParkReason::Sync,
            Wait::Scope { .. } => ParkReason::Scope,
            Wait::Select(_) => ParkReason::Select,
            Wait::OtherWorker { .. } => ParkReason::OtherWorker,
            Wait::Shared(_) => ParkReason::Shared,
            Wait::Futex(_) => ParkReason::Futex,
            Wait::Park => ParkReason::Park,
            Wait::Future(_) => ParkReason::Future,
        }
    }
}

/// How many [`ParkReason`]s there are.
const PARK_REASONS: usize = 12;

/// Buckets of the scheduling delay histogram: bucket 0 holds delays under 64 ns, bucket `i`
/// delays from `64 << (i - 1)` ns up to `64 << i` ns, and the last one everything from
/// `64 << 22` ns (about 268 ms) up.
const DELAY_BUCKETS: usize = 24;

/// The width of bucket 0, in nanoseconds, as a power of two.
const DELAY_FIRST_BUCKET_LOG2: u32 = 6;

/// A counter with one writer: bumped with a relaxed load and store (no locked instruction),
/// read by anyone.
#[derive(Default)]
struct Counter(AtomicU64);

impl Counter {
    #[inline(always)]
    fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// `add` with release ordering: a reader that acquires this value sees every earlier
    /// store of the writer (for `num_alive_tasks`, which reads `ended` before `spawned`).
    #[inline(always)]
    fn add_release(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Release,
        );
    }

    #[inline(always)]
    fn get_acquire(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    #[inline(always)]
    fn set(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }

    #[inline(always)]
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One worker's counters, shared with every [`RuntimeMetrics`] of its runtime.
#[derive(Default)]
pub(crate) struct WorkerMetrics {
    spawned: Counter,
    /// Green threads that left the task table: finished, or ended by shutdown.
    ended: Counter,
    budget_forced_yields: Counter,
    /// `epoll_wait` calls, blocking or not.
    io_polls: Counter,
    /// Readiness events `epoll_wait` returned for registered fds.
    io_ready: Counter,
    /// `epoll_wait` calls that could block (the worker had nothing to run).
    worker_parks: Counter,
    delay: [Counter; DELAY_BUCKETS],
    // Published from `HotCounters`.
    polls: Counter,
    yields: Counter,
    parks: [Counter; PARK_REASONS],
    ready_depth: AtomicUsize,
    // The worker's blocking pool, written under that pool's lock.
    blocking_threads: AtomicUsize,
    blocking_idle: AtomicUsize,
    blocking_queued: AtomicUsize,
    // The long-park sweep (`runtime::stack_release`).
    stack_releases: Counter,
    stack_bytes_released: Counter,
    long_parked_stack_bytes: Counter,
    // Compaction (`runtime::compaction`): counted by the sweep and by wake-ups.
    stack_compactions: Counter,
    stack_restorations: Counter,
    compacted_stack_bytes: Counter,
}

impl WorkerMetrics {
    #[inline]
    pub(crate) fn spawned(&self) {
        self.spawned.add_release(1);
    }

    #[inline]
    pub(crate) fn ended(&self, tasks: usize) {
        self.ended.add_release(tasks as u64);
    }

    pub(crate) fn budget_forced_yield(&self) {
        self.budget_forced_yields.add(1);
    }

    /// One `epoll_wait` that returned `ready` events for registered fds; `could_block` if it
    /// was called with a timeout other than zero (the worker parked).
    pub(crate) fn io_polled(&self, ready: usize, could_block: bool) {
        self.io_polls.add(1);
        self.io_ready.add(ready as u64);
        if could_block {
            self.worker_parks.add(1);
        }
    }

    /// One sample of the scheduling delay.
    pub(crate) fn record_delay(&self, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.delay[delay_bucket(nanos)].add(1);
    }

    /// One sweep of the long-parked green threads' stacks: `releases` of them gave back
    /// `released` bytes, and the stacks of those parked for the threshold or longer hold
    /// `held` bytes now.
    pub(crate) fn stacks_swept(&self, sweep: &super::stack_release::SweepResult) {
        self.stack_releases.add(sweep.releases);
        self.stack_bytes_released.add(sweep.released);
        self.stack_compactions.add(sweep.compactions);
        if sweep.round_complete {
            self.long_parked_stack_bytes.set(sweep.held);
            self.compacted_stack_bytes.set(sweep.compacted);
        }
    }

    /// One green thread compacted at its park (the checking mode of `runtime::compaction`; not
    /// counted as a release: what it gave back is not measured there).
    #[cfg_attr(not(greenweave_compact_check), allow(dead_code))]
    pub(crate) fn stack_compacted(&self) {
        self.stack_compactions.add(1);
    }

    /// One compacted green thread's frames put back on its stack (`runtime::compaction`).
    pub(crate) fn stack_restored(&self) {
        self.stack_restorations.add(1);
    }

    /// The blocking pool's state, as it is now (called under the pool's lock).
    pub(crate) fn blocking_pool(&self, threads: usize, idle: usize, queued: usize) {
        self.blocking_threads.store(threads, Ordering::Relaxed);
        self.blocking_idle.store(idle, Ordering::Relaxed);
        self.blocking_queued.store(queued, Ordering::Relaxed);
    }
}

/// The bucket of the scheduling delay histogram a delay of `nanos` falls in.
#[inline]
fn delay_bucket(nanos: u64) -> usize {
    let above_first = nanos >> DELAY_FIRST_BUCKET_LOG2;
    ((u64::BITS - above_first.leading_zeros()) as usize).min(DELAY_BUCKETS - 1)
}

/// What the scheduler counts on its hottest paths, in plain cells on its own thread: a park
/// bumps one cell (by reason, from the parking green thread, where the reason is a constant),
/// a yield or a poll of a green thread nothing at all (the run
/// loop's countdown to its next poll counts runs already; yields are the runs that ended in
/// neither a park nor a finish). Folded into the worker's atomics by [`publish`](Self::publish).
#[derive(Default)]
pub(crate) struct HotCounters {
    parks: [Cell<u64>; PARK_REASONS],
    /// Green threads that finished by running to their end (not those shutdown ended).
    finished: Cell<u64>,
}

impl HotCounters {
    /// Counts a park for `wait`.
    #[inline(always)]
    pub(crate) fn park(&self, wait: &Wait) {
        let cell = &self.parks[ParkReason::of(wait) as usize];
        cell.set(cell.get() + 1);
    }

    /// Counts a green thread that ran to its end.
    #[inline]
    pub(crate) fn finished(&self) {
        self.finished.set(self.finished.get() + 1);
    }

    /// Makes the counts readable from `shared`: `runs` green threads run so far (each run ends
    /// in a park, a finish or a yield) and `ready` in the ready queue now.
    pub(crate) fn publish(&self, shared: &WorkerMetrics, runs: u64, ready: usize) {
        let mut parks = 0;
        for (cell, counter) in self.parks.iter().zip(&shared.parks) {
            parks += cell.get();
            counter.set(cell.get());
        }
        shared.polls.set(runs);
        shared
            .yields
            .set(runs.saturating_sub(parks + self.finished.get()));
        shared.ready_depth.store(ready, Ordering::Relaxed);
    }
}

/// A handle to a runtime's metrics: what its green threads and workers have done so far,
/// readable from any thread, during the run and after it. Names and meanings follow tokio's
/// `RuntimeMetrics` where they are the same; a runtime with one worker (as [`run`](super::run)
/// makes) has worker 0 only.
///
/// Counts are totals since the runtime started and never go down; gauges (`num_`, `_depth`)
/// are values at one instant. What the scheduler counts on its hottest paths (polls, yields,
/// green thread parks, the ready queue's depth) is published before it waits in `epoll_wait`,
/// when its ready queue runs dry, and every 488 green threads it runs while the queue never
/// does: read from another OS thread, those figures are as of that moment; read from a green
/// thread of the same worker, or once the runtime has ended, they are exact.
///
/// Reading costs a few relaxed atomic loads per figure; counting costs the scheduler no
/// atomic read-modify-write and no clock read per switch (see `BENCHMARKS.md`).
///
/// # Examples
///
/// ```
/// let metrics = greenweave::run(|| {
///     let sleeper = greenweave::spawn(|| {
///         greenweave::thread::sleep(std::time::Duration::from_millis(1));
///     });
///     sleeper.join().unwrap();
///     greenweave::runtime::metrics()
/// });
/// use greenweave::runtime::ParkReason;
/// assert_eq!(metrics.num_workers(), 1);
/// assert_eq!(metrics.spawned_tasks_count(), 2); // main and the sleeper
/// assert_eq!(metrics.worker_green_park_count(0, ParkReason::Sleep), 1);
/// assert_eq!(metrics.worker_green_park_count(0, ParkReason::Join), 1);
/// assert_eq!(metrics.num_alive_tasks(), 0); // read after the runtime ended
/// ```
#[derive(Clone)]
pub struct RuntimeMetrics {
    workers: Arc<[Arc<WorkerMetrics>]>,
}

impl std::fmt::Debug for RuntimeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The per-worker counts, summed over every worker.
        let total =
            |count: &dyn Fn(usize) -> u64| -> u64 { (0..self.num_workers()).map(count).sum() };
        /// The green parks by reason, the reasons that never parked left out.
        struct Parks<'a>(&'a RuntimeMetrics);
        impl std::fmt::Debug for Parks<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_map()
                    .entries(
                        ParkReason::ALL
                            .iter()
                            .map(|&reason| (reason, self.0.green_park_count(reason)))
                            .filter(|&(_, count)| count > 0),
                    )
                    .finish()
            }
        }
        let queued: usize = (0..self.num_workers())
            .map(|worker| self.worker_local_queue_depth(worker))
            .sum();
        f.debug_struct("RuntimeMetrics")
            .field("num_workers", &self.num_workers())
            .field("num_alive_tasks", &self.num_alive_tasks())
            .field("spawned_tasks_count", &self.spawned_tasks_count())
            .field("worker_poll_count", &total(&|w| self.worker_poll_count(w)))
            .field(
                "worker_yield_count",
                &total(&|w| self.worker_yield_count(w)),
            )
            .field("worker_park_count", &total(&|w| self.worker_park_count(w)))
            .field("green_park_counts", &Parks(self))
            .field("worker_local_queue_depth", &queued)
            .field(
                "budget_forced_yield_count",
                &self.budget_forced_yield_count(),
            )
            .field(
                "worker_io_poll_count",
                &total(&|w| self.worker_io_poll_count(w)),
            )
            .field("io_driver_ready_count", &self.io_driver_ready_count())
            .field("num_blocking_threads", &self.num_blocking_threads())
            .field(
                "num_idle_blocking_threads",
                &self.num_idle_blocking_threads(),
            )
            .field("blocking_queue_depth", &self.blocking_queue_depth())
            .finish_non_exhaustive()
    }
}

impl RuntimeMetrics {
    pub(crate) fn new(workers: Arc<[Arc<WorkerMetrics>]>) -> RuntimeMetrics {
        RuntimeMetrics { workers }
    }

    fn worker(&self, worker: usize) -> &WorkerMetrics {
        self.workers.get(worker).unwrap_or_else(|| {
            panic!(
                "greenweave: worker {worker} does not exist; this runtime has {} worker{} \
                 (0 to num_workers() - 1)",
                self.workers.len(),
                if self.workers.len() == 1 { "" } else { "s" }
            )
        })
    }

    fn sum(&self, figure: impl Fn(&WorkerMetrics) -> u64) -> u64 {
        self.workers.iter().map(|worker| figure(worker)).sum()
    }

    /// How many workers the runtime has (see [`Builder::workers`](super::Builder::workers)).
    ///
    /// ```
    /// let runtime = greenweave::Runtime::builder().workers(2).build()?;
    /// let metrics = runtime.run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.num_workers(), 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn num_workers(&self) -> usize {
        self.workers.len()
    }

    /// How many green threads are alive now, on every worker: spawned and not yet ended.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let metrics = greenweave::runtime::metrics();
    ///     assert_eq!(metrics.num_alive_tasks(), 1); // main
    ///     let child = greenweave::spawn(|| {});
    ///     assert_eq!(metrics.num_alive_tasks(), 2);
    ///     child.join().unwrap();
    ///     assert_eq!(metrics.num_alive_tasks(), 1);
    /// });
    /// ```
    pub fn num_alive_tasks(&self) -> usize {
        // Per worker, `ended` first and with acquire ordering: its spawns happened before its
        // ends, so the count read next is at least as new, and never below it.
        self.workers
            .iter()
            .map(|worker| {
                let ended = worker.ended.get_acquire();
                (worker.spawned.get_acquire() - ended) as usize
            })
            .sum()
    }

    /// How many green threads have been spawned on every worker, the main ones included.
    ///
    /// ```
    /// let metrics = greenweave::run(|| {
    ///     for _ in 0..3 {
    ///         greenweave::spawn(|| {}).join().unwrap();
    ///     }
    ///     greenweave::runtime::metrics()
    /// });
    /// assert_eq!(metrics.spawned_tasks_count(), 4);
    /// ```
    pub fn spawned_tasks_count(&self) -> u64 {
        self.sum(|worker| worker.spawned.get())
    }

    /// How many times worker `worker` has run a green thread (a switch into it and, when it
    /// parks, yields or ends, back out): tokio's poll of a task.
    ///
    /// # Panics
    /// If `worker` is not below [`num_workers`](Self::num_workers).
    ///
    /// ```
    /// let metrics = greenweave::run(|| {
    ///     greenweave::thread::yield_now();
    ///     greenweave::runtime::metrics()
    /// });
    /// // main ran, yielded, ran again and finished.
    /// assert_eq!(metrics.worker_poll_count(0), 2);
    /// ```
    pub fn worker_poll_count(&self, worker: usize) -> u64 {
        self.worker(worker).polls.get()
    }

    /// How many times a green thread on worker `worker` yielded
    /// ([`thread::yield_now`](crate::thread::yield_now), a spent budget) and went to the back
    /// of the ready queue.
    ///
    /// # Panics
    /// If `worker` is not below [`num_workers`](Self::num_workers).
    ///
    /// ```
    /// let metrics = greenweave::run(|| {
    ///     for _ in 0..5 {
    ///         greenweave::thread::yield_now();
    ///     }
    ///     greenweave::runtime::metrics()
    /// });
    /// assert_eq!(metrics.worker_yield_count(0), 5);
    /// ```
    pub fn worker_yield_count(&self, worker: usize) -> u64 {
        self.worker(worker).yields.get()
    }

    /// How many times a green thread on worker `worker` parked for `reason`.
    ///
    /// # Panics
    /// If `worker` is not below [`num_workers`](Self::num_workers).
    ///
    /// ```
    /// use greenweave::runtime::ParkReason;
    ///
    /// let metrics = greenweave::run(|| {
    ///     let (sender, receiver) = greenweave::sync::mpsc::channel();
    ///     let child = greenweave::spawn(move || receiver.recv().unwrap());
    ///     greenweave::thread::yield_now(); // the child parks in recv
    ///     sender.send(7).unwrap();
    ///     assert_eq!(child.join().unwrap(), 7);
    ///     greenweave::runtime::metrics()
    /// });
    /// assert_eq!(metrics.worker_green_park_count(0, ParkReason::Sync), 1);
    /// ```
    pub fn worker_green_park_count(&self, worker: usize, reason: ParkReason) -> u64 {
        self.worker(worker).parks[reason as usize].get()
    }

    /// How many times green threads on every worker parked for `reason`.
    ///
    /// ```
    /// use greenweave::runtime::ParkReason;
    ///
    /// let metrics = greenweave::run(|| {
    ///     greenweave::thread::sleep(std::time::Duration::from_millis(1));
    ///     greenweave::runtime::metrics()
    /// });
    /// assert_eq!(metrics.green_park_count(ParkReason::Sleep), 1);
    /// ```
    pub fn green_park_count(&self, reason: ParkReason) -> u64 {
        self.sum(|worker| worker.parks[reason as usize].get())
    }

    /// How many times worker `worker` parked: waited in `epoll_wait` because it had no green
    /// thread to run (tokio's worker park).
    ///
    /// # Panics
    /// If `worker` is not below [`num_workers`](Self::num_workers).
    ///
    /// ```
    /// let metrics = greenweave::run(|| {
    ///     // The only green thread waits for another OS thread: the worker waits in epoll_wait.
    ///     greenweave::unblock(|| ());
    ///     greenweave::runtime::metrics()
    /// });
    /// assert!(metrics.worker_park_count(0) >= 1);
    /// ```
    pub fn worker_park_count(&self, worker: usize) -> u64 {
        self.worker(worker).worker_parks.get()
    }

    /// How many green threads are in worker `worker`'s ready queue, waiting to run.
    ///
    /// # Panics
    /// If `worker` is not below [`num_workers`](Self::num_workers).
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let children: Vec<_> = (0..3).map(|_| greenweave::spawn(|| {})).collect();
    ///     assert_eq!(greenweave::runtime::metrics().worker_local_queue_depth(0), 3);
    ///     for child in children {
    ///         child.join().unwrap();
    ///     }
    /// });
    /// ```
    pub fn worker_local_queue_depth(&self, worker: usize) -> usize {
        self.worker(worker).ready_depth.load(Ordering::Relaxed)
    }

    /// How many times a green thread was made to yield because it used up its budget of
    /// operations without parking, on every worker.
    ///
    /// ```
    /// let metrics = greenweave::run(|| {
    ///     let (sender, receiver) = greenweave::sync::mpsc::channel();
    ///     for i in 0..300 {
    ///         sender.send(i).unwrap();
    ///     }
    ///     // Every receive spends budget and none parks: 128 per turn.
    ///     for _ in 0..300 {
    ///         receiver.recv().unwrap();
    ///     }
    ///     greenweave::runtime::metrics()
    /// });
    /// assert_eq!(metrics.budget_forced_yield_count(), 2);
    /// ```
    pub fn budget_forced_yield_count(&self) -> u64 {
        self.sum(|worker| worker.budget_forced_yields.get())
    }

    /// [`budget_forced_yield_count`](Self::budget_forced_yield_count) of worker `worker` alone.
    ///
    /// # Panics
    /// If `worker` is not below [`num_workers`](Self::num_workers).
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.worker_budget_forced_yield_count(0), 0);
    /// ```
    pub fn worker_budget_forced_yield_count(&self, worker: usize) -> u64 {
        self.worker(worker).budget_forced_yields.get()
    }

    /// How many times worker `worker` polled its epoll instance (`epoll_wait`, waiting or
    /// not). With [`worker_io_ready_count`](Self::worker_io_ready_count): events per poll.
    ///
    /// # Panics
    /// If `worker` is not below [`num_workers`](Self::num_workers).
    ///
    /// ```
    /// let metrics = greenweave::run(|| {
    ///     // The only green thread waits for another OS thread: the worker polls for it.
    ///     greenweave::unblock(|| ());
    ///     greenweave::runtime::metrics()
    /// });
    /// assert!(metrics.worker_io_poll_count(0) >= 1);
    /// ```
    pub fn worker_io_poll_count(&self, worker: usize) -> u64 {
        self.worker(worker).io_polls.get()
    }

    /// How many readiness events for sockets and other registered fds worker `worker`'s
    /// polls returned.
    ///
    /// # Panics
    /// If `worker` is not below [`num_workers`](Self::num_workers).
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.worker_io_ready_count(0), 0);
    /// ```
    pub fn worker_io_ready_count(&self, worker: usize) -> u64 {
        self.worker(worker).io_ready.get()
    }

    /// [`worker_io_ready_count`](Self::worker_io_ready_count) summed over every worker
    /// (tokio's name: the readiness events its I/O driver processed).
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.io_driver_ready_count(), 0);
    /// ```
    pub fn io_driver_ready_count(&self) -> u64 {
        self.sum(|worker| worker.io_ready.get())
    }

    /// How many helper threads the blocking pools (behind [`unblock`](crate::unblock); one
    /// pool per worker) run now, busy or idle.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     greenweave::unblock(|| ());
    ///     let metrics = greenweave::runtime::metrics();
    ///     assert_eq!(metrics.num_blocking_threads(), 1); // stays 10 s for the next call
    ///     assert_eq!(metrics.blocking_queue_depth(), 0);
    /// });
    /// ```
    pub fn num_blocking_threads(&self) -> usize {
        self.workers
            .iter()
            .map(|worker| worker.blocking_threads.load(Ordering::Relaxed))
            .sum()
    }

    /// How many of the blocking pools' helper threads are idle, waiting for a call; the others
    /// are busy with one.
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.num_idle_blocking_threads(), 0);
    /// ```
    pub fn num_idle_blocking_threads(&self) -> usize {
        self.workers
            .iter()
            .map(|worker| worker.blocking_idle.load(Ordering::Relaxed))
            .sum()
    }

    /// How many calls wait in the blocking pools' queues for a helper thread.
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.blocking_queue_depth(), 0);
    /// ```
    pub fn blocking_queue_depth(&self) -> usize {
        self.workers
            .iter()
            .map(|worker| worker.blocking_queued.load(Ordering::Relaxed))
            .sum()
    }

    /// How many times a long-parked green thread's stack gave back the pages below its stack
    /// pointer (its high-water pages): at most once per park, for a green thread parked for
    /// [`Builder::stack_release`](super::Builder::stack_release)'s threshold (1 s by default)
    /// whose stack held pages there. A compaction
    /// ([`Builder::compact_parked_stacks`](super::Builder::compact_parked_stacks)), which gives
    /// back the whole stack, counts as one too. See
    /// [`stack_bytes_released`](Self::stack_bytes_released).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use greenweave::Runtime;
    ///
    /// #[inline(never)]
    /// fn go_deep() {
    ///     let mut buffer = [7u8; 128 * 1024];
    ///     std::hint::black_box(&mut buffer);
    /// }
    ///
    /// let runtime = Runtime::builder().stack_release(Some(Duration::ZERO)).build()?;
    /// let metrics = runtime.run(|| {
    ///     let (wake, parked) = greenweave::sync::shared::channel::<()>();
    ///     let deep = greenweave::spawn(move || {
    ///         go_deep(); // 128 KiB of stack touched, then a long park
    ///         parked.recv().unwrap();
    ///     });
    ///     // Idle turns of the scheduler until it has swept the parked green thread.
    ///     while greenweave::runtime::metrics().stack_release_count() == 0 {
    ///         greenweave::thread::sleep(Duration::from_millis(1));
    ///     }
    ///     wake.send(()).unwrap();
    ///     deep.join().unwrap();
    ///     greenweave::runtime::metrics()
    /// });
    /// assert!(metrics.stack_bytes_released() >= 100 * 1024);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stack_release_count(&self) -> u64 {
        self.sum(|worker| worker.stack_releases.get())
    }

    /// [`stack_release_count`](Self::stack_release_count) of worker `worker` alone.
    ///
    /// # Panics
    /// If `worker` is not below [`num_workers`](Self::num_workers).
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.worker_stack_release_count(0), 0);
    /// ```
    pub fn worker_stack_release_count(&self, worker: usize) -> u64 {
        self.worker(worker).stack_releases.get()
    }

    /// How many bytes of stack the releases counted by
    /// [`stack_release_count`](Self::stack_release_count) gave back to the kernel, plus those
    /// the same sweeps released from stacks freed into the workers' stack pools (which keep
    /// what their last green thread touched). These are data pages; the page tables that
    /// mapped them stay (see `BENCHMARKS.md`).
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.stack_bytes_released(), 0);
    /// ```
    pub fn stack_bytes_released(&self) -> u64 {
        self.sum(|worker| worker.stack_bytes_released.get())
    }

    /// The bytes resident in the stacks of green threads parked for the release threshold or
    /// longer ([`Builder::stack_release`](super::Builder::stack_release); 1 s by default), as
    /// each worker's latest sweep found them, after its releases: what idle green threads
    /// cost in stack. Green threads parked for less are not measured (a sweep visits a park
    /// once, when it has lasted the threshold), nor any while the release is off (0).
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.long_parked_stack_bytes(), 0);
    /// ```
    pub fn long_parked_stack_bytes(&self) -> u64 {
        self.sum(|worker| worker.long_parked_stack_bytes.get())
    }

    /// How many times a long-parked green thread was compacted: its live frames copied to the
    /// heap and its whole stack given back
    /// ([`Builder::compact_parked_stacks`](super::Builder::compact_parked_stacks)). Off by
    /// default, so 0.
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.stack_compaction_count(), 0);
    /// ```
    pub fn stack_compaction_count(&self) -> u64 {
        self.sum(|worker| worker.stack_compactions.get())
    }

    /// How many compacted green threads had their frames put back on their stack to run again
    /// (after their wake-up, before their first instruction). A dump with backtraces puts
    /// them back too, to walk them; those are not counted.
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.stack_restoration_count(), 0);
    /// ```
    pub fn stack_restoration_count(&self) -> u64 {
        self.sum(|worker| worker.stack_restorations.get())
    }

    /// The bytes of frames that compacted green threads keep on the heap, as each worker's
    /// latest sweep found them (not counting the allocator's own overhead). Their stacks hold
    /// no pages, so they add nothing to
    /// [`long_parked_stack_bytes`](Self::long_parked_stack_bytes).
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.compacted_stack_bytes(), 0);
    /// ```
    pub fn compacted_stack_bytes(&self) -> u64 {
        self.sum(|worker| worker.compacted_stack_bytes.get())
    }

    /// How many buckets the scheduling delay histogram has (see
    /// [`worker_scheduling_delay_histogram_bucket_count`](Self::worker_scheduling_delay_histogram_bucket_count)).
    ///
    /// ```
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.scheduling_delay_histogram_num_buckets(), 24);
    /// ```
    pub fn scheduling_delay_histogram_num_buckets(&self) -> usize {
        DELAY_BUCKETS
    }

    /// The delays bucket `bucket` of the scheduling delay histogram counts: bucket 0 those
    /// under 64 ns, each next one twice as wide, the last one everything from about 268 ms up
    /// (its end is `Duration::MAX`).
    ///
    /// # Panics
    /// If `bucket` is not below
    /// [`scheduling_delay_histogram_num_buckets`](Self::scheduling_delay_histogram_num_buckets).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let metrics = greenweave::run(greenweave::runtime::metrics);
    /// assert_eq!(metrics.scheduling_delay_histogram_bucket_range(0), Duration::ZERO..Duration::from_nanos(64));
    /// assert_eq!(
    ///     metrics.scheduling_delay_histogram_bucket_range(5),
    ///     Duration::from_nanos(1024)..Duration::from_nanos(2048)
    /// );
    /// ```
    pub fn scheduling_delay_histogram_bucket_range(&self, bucket: usize) -> Range<Duration> {
        assert!(
            bucket < DELAY_BUCKETS,
            "greenweave: the scheduling delay histogram has buckets 0 to {}, not {bucket}",
            DELAY_BUCKETS - 1
        );
        let start = match bucket {
            0 => 0,
            _ => 1u64 << (DELAY_FIRST_BUCKET_LOG2 + bucket as u32 - 1),
        };
        let end = if bucket == DELAY_BUCKETS - 1 {
            Duration::MAX
        } else {
            Duration::from_nanos(1u64 << (DELAY_FIRST_BUCKET_LOG2 + bucket as u32))
        };
        Duration::from_nanos(start)..end
    }

    /// How many samples of the scheduling delay (the time from a green thread's wake-up to its
    /// running) on worker `worker` fell in bucket `bucket`.
    ///
    /// The delay is sampled, so that no switch reads the clock: each time the worker has
    /// polled for I/O after its ready queue ran dry, and at every 8th of the polls it makes
    /// without waiting (one per 61 green threads it runs, while the queue never empties), it
    /// notes the time and the green thread at the back of its ready queue; when that one
    /// starts to run, the time since then is one sample. For a green thread that the poll
    /// itself woke (I/O, a timer, another OS thread) that is its delay from wake-up to
    /// running; for one queued before (a yield, a wake-up by another green thread) it is a
    /// lower bound. A sample for a green thread that runs next, with none before it, goes in
    /// bucket 0 without a clock read.
    ///
    /// # Panics
    /// If `worker` is not below [`num_workers`](Self::num_workers), or `bucket` not below
    /// [`scheduling_delay_histogram_num_buckets`](Self::scheduling_delay_histogram_num_buckets).
    ///
    /// ```
    /// let metrics = greenweave::run(|| {
    ///     greenweave::thread::sleep(std::time::Duration::from_millis(1));
    ///     greenweave::runtime::metrics()
    /// });
    /// let samples: u64 = (0..metrics.scheduling_delay_histogram_num_buckets())
    ///     .map(|bucket| metrics.worker_scheduling_delay_histogram_bucket_count(0, bucket))
    ///     .sum();
    /// assert!(samples >= 1); // the wake-up after the sleep, at least
    /// ```
    pub fn worker_scheduling_delay_histogram_bucket_count(
        &self,
        worker: usize,
        bucket: usize,
    ) -> u64 {
        let worker = self.worker(worker);
        assert!(
            bucket < DELAY_BUCKETS,
            "greenweave: the scheduling delay histogram has buckets 0 to {}, not {bucket}",
            DELAY_BUCKETS - 1
        );
        worker.delay[bucket].get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_falls_in_the_bucket_whose_range_holds_it() {
        let metrics = RuntimeMetrics::new(Arc::new([]));
        for nanos in [
            0,
            1,
            63,
            64,
            65,
            127,
            128,
            1000,
            1 << 20,
            (1 << 28) + 5,
            u64::MAX,
        ] {
            let bucket = delay_bucket(nanos);
            let range = metrics.scheduling_delay_histogram_bucket_range(bucket);
            assert!(
                range.contains(&Duration::from_nanos(nanos)),
                "{nanos} ns went to bucket {bucket}, {range:?}"
            );
        }
    }

    #[test]
    fn park_reasons_are_in_the_order_of_their_counters() {
        for (index, reason) in ParkReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, index);
        }
    }
}
