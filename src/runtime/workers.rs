//! A runtime's workers: one single-thread scheduler per OS thread, each optionally pinned to
//! a CPU, and the few things that cross between them.
//!
//! Owns: [`Pool`], what every worker of one runtime shares: each worker's wake-up line (its
//! scheduler's [`RemoteQueue`]) and inbox of [`Job`]s (closures another worker sends it: a
//! green thread to spawn for `thread::spawn_on`, a joiner to wake), the shutdown flag, and the
//! runtime-wide deadlock verdict; and [`run`] / [`run_on_every_worker`], which start the
//! workers' OS threads, run the main closure, shut every worker down and join them.
//!
//! Green threads never migrate: a green thread runs on the worker that spawned it, from its
//! first instruction to its last, so everything `!Send` it holds (an `Rc`, a green socket, a
//! `thread_local!`'s value) stays on one OS thread. Only `Send` values cross, inside jobs.
//!
//! May not: touch another worker's scheduler, tasks or reactor (a worker's state is `!Send`;
//! a job runs on the worker it was sent to, on that worker's scheduler); hold the pool's lock
//! while running a job or dropping one (a job's destructor completes a join, which may send a
//! job in turn).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::metrics::{RuntimeMetrics, WorkerMetrics};
use super::scheduler::{self, RemoteQueue, Scheduler};
use crate::sys::affinity::CpuSet;

/// Work sent to a worker: runs there, on its scheduler (not on a green thread), when the worker
/// next looks at its remote queue. Dropped unrun if the worker has ended; a job's destructor
/// must then hand back what it carries (a `spawn_on`'s join completes as cancelled).
pub(crate) type Job = Box<dyn FnOnce(&Scheduler) + Send>;

/// What the workers of one runtime share.
pub(crate) struct Pool {
    slots: Box<[Slot]>,
    state: Mutex<PoolState>,
    /// Set once, when the runtime starts to end: every worker leaves its loop and ends its
    /// green threads.
    shutting_down: AtomicBool,
    /// Each worker's metrics, written by that worker only (`runtime::metrics`).
    metrics: Arc<[Arc<WorkerMetrics>]>,
}

/// One worker's side of the pool.
struct Slot {
    /// Its scheduler's wake-up line, made before its OS thread starts (so a job can be sent to
    /// it from the first instant).
    remote: Arc<RemoteQueue>,
    /// Jobs sent to it and not yet taken; `None` once it has ended.
    jobs: Mutex<Option<Vec<Job>>>,
    /// Jobs sent to it and not yet run. Raised before a job is queued; lowered, under the
    /// pool's lock, after the worker has run it and left the stuck set, so that the deadlock
    /// verdict never misses a job in flight.
    unfinished: AtomicUsize,
    /// The kernel thread id of its OS thread, 0 until that thread starts (for the dump, which
    /// says what a worker that does not answer is doing).
    tid: AtomicI32,
}

#[derive(Default)]
struct PoolState {
    /// For each worker that found nothing but another worker could wake any of its green
    /// threads: the deadlock report's lines for them, as they were then.
    stuck: Vec<Option<String>>,
    /// The report, once every worker was found stuck with no job in flight.
    deadlock: Option<String>,
    /// `run_on_every_worker`: how many workers' closures are still running.
    closures_running: usize,
}

/// A scheduler's place in its pool.
#[derive(Clone)]
pub(crate) struct WorkerLink {
    pub(crate) pool: Arc<Pool>,
    pub(crate) index: usize,
}

impl Pool {
    fn new(workers: usize) -> std::io::Result<Pool> {
        let slots = (0..workers)
            .map(|_| {
                Ok(Slot {
                    remote: Arc::new(RemoteQueue::new()?),
                    jobs: Mutex::new(Some(Vec::new())),
                    unfinished: AtomicUsize::new(0),
                    tid: AtomicI32::new(0),
                })
            })
            .collect::<std::io::Result<Box<[Slot]>>>()?;
        Ok(Pool {
            state: Mutex::new(PoolState {
                stuck: vec![None; workers],
                ..PoolState::default()
            }),
            slots,
            shutting_down: AtomicBool::new(false),
            metrics: (0..workers).map(|_| Arc::default()).collect(),
        })
    }

    /// How many workers the runtime has.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Worker `index`'s metrics.
    pub(crate) fn metrics(&self, index: usize) -> &Arc<WorkerMetrics> {
        &self.metrics[index]
    }

    /// A reader of every worker's metrics.
    pub(crate) fn runtime_metrics(&self) -> RuntimeMetrics {
        RuntimeMetrics::new(self.metrics.clone())
    }

    /// Worker `index`'s wake-up line.
    pub(crate) fn remote(&self, index: usize) -> &Arc<RemoteQueue> {
        &self.slots[index].remote
    }

    /// The kernel thread id of worker `index`'s OS thread, once it has started.
    pub(crate) fn thread_id(&self, index: usize) -> Option<libc::pid_t> {
        Some(self.slots[index].tid.load(Ordering::Acquire)).filter(|&tid| tid != 0)
    }

    /// Records the calling OS thread as worker `index`'s.
    fn runs_on_this_thread(&self, index: usize) {
        // SAFETY: gettid(2) has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() };
        self.slots[index].tid.store(tid, Ordering::Release);
    }

    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sends `job` to worker `index`, or hands it back if that worker has ended.
    pub(crate) fn submit(&self, index: usize, job: Job) -> Result<(), Job> {
        let slot = &self.slots[index];
        {
            let mut jobs = slot.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let Some(jobs) = jobs.as_mut() else {
                return Err(job);
            };
            slot.unfinished.fetch_add(1, Ordering::SeqCst);
            jobs.push(job);
        }
        slot.remote.ring();
        Ok(())
    }

    /// Runs the jobs sent to worker `index`, on its scheduler: called by the scheduler when its
    /// wake-up line rang. Then marks the worker as not stuck.
    pub(crate) fn run_jobs(&self, index: usize, scheduler: &Scheduler) {
        let slot = &self.slots[index];
        let jobs = {
            let mut jobs = slot.jobs.lock().unwrap_or_else(|p| p.into_inner());
            jobs.as_mut().map(std::mem::take).unwrap_or_default()
        };
        let ran = jobs.len();
        for job in jobs {
            job(scheduler);
        }
        let mut state = self.state();
        state.stuck[index] = None;
        slot.unfinished.fetch_sub(ran, Ordering::SeqCst);
    }

    /// Worker `index` found every one of its green threads parked with nothing but another
    /// worker able to wake one (no timer, no fd, no other OS thread); `lines` describes them
    /// for the report. Returns the runtime's deadlock report when worker `index` is the one
    /// that reports it (worker 0) and every worker is stuck with no job in flight; otherwise
    /// `None`: the worker waits for its wake-up line.
    pub(crate) fn stuck(&self, index: usize, lines: impl FnOnce() -> String) -> Option<String> {
        let mut state = self.state();
        if self.shutting_down.load(Ordering::SeqCst) {
            return None;
        }
        if state.deadlock.is_none() {
            state.stuck[index] = Some(lines());
            let everyone_stuck = state.stuck.iter().all(Option::is_some);
            let nothing_in_flight = self
                .slots
                .iter()
                .all(|slot| slot.unfinished.load(Ordering::SeqCst) == 0);
            if everyone_stuck && nothing_in_flight {
                state.deadlock = Some(self.deadlock_report(&state.stuck));
                if index != 0 {
                    // Worker 0 reports it (from `run`): wake it up to look.
                    self.slots[0].remote.ring();
                }
            }
        }
        if index == 0 {
            state.deadlock.clone()
        } else {
            None
        }
    }

    fn deadlock_report(&self, stuck: &[Option<String>]) -> String {
        let mut report = if self.len() == 1 {
            String::from(
                "greenweave: deadlock: every green thread is parked and nothing can wake any of \
                 them (no timer, no I/O wait, no other OS thread):",
            )
        } else {
            format!(
                "greenweave: deadlock: every green thread on all {} workers is parked and \
                 nothing can wake any of them (no timer, no I/O wait, no other OS thread, no \
                 job between workers in flight):",
                self.len()
            )
        };
        for lines in stuck.iter().flatten() {
            report.push_str(lines);
        }
        report
    }

    /// Whether the runtime is ending: every worker leaves its loop.
    #[inline]
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    /// Starts the end of the runtime: every worker leaves its loop and ends its green threads.
    pub(crate) fn begin_shutdown(&self) {
        if !self.shutting_down.swap(true, Ordering::SeqCst) {
            for slot in &self.slots {
                slot.remote.ring();
            }
        }
    }

    /// Worker `index` has ended: jobs sent to it from now on are handed back, and those it
    /// never took are dropped (here, outside every lock; each hands back what it carries).
    fn close(&self, index: usize) {
        let left = self.slots[index]
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        drop(left);
    }

    /// `run_on_every_worker`: one worker's closure returned; the last one ends the runtime.
    fn closure_ended(&self) {
        let last = {
            let mut state = self.state();
            state.closures_running -= 1;
            state.closures_running == 0
        };
        if last {
            self.begin_shutdown();
        }
    }
}

/// Closes worker `index`'s inbox when its OS thread leaves its loop, however it leaves.
struct CloseOnExit<'a>(&'a Pool, usize);

impl Drop for CloseOnExit<'_> {
    fn drop(&mut self) {
        self.0.close(self.1);
    }
}

/// Starts the end of the runtime however a worker's thread leaves its frame (a panic
/// included), so that every worker thread ends and can be joined; a no-op when it has started.
struct ShutdownOnExit<'a>(&'a Pool);

impl Drop for ShutdownOnExit<'_> {
    fn drop(&mut self) {
        self.0.begin_shutdown();
    }
}

/// Pins the calling OS thread to `cpu` until the guard drops, then gives it its old CPUs back.
struct PinnedThread {
    old: CpuSet,
}

impl PinnedThread {
    fn pin(worker: usize, cpu: usize) -> PinnedThread {
        let old = CpuSet::of_this_thread().unwrap_or_else(|error| {
            panic!("greenweave: could not read this thread's CPUs: {error}")
        });
        CpuSet::only(cpu)
            .apply_to_this_thread()
            .unwrap_or_else(|error| {
                panic!("greenweave: could not pin worker {worker} to CPU {cpu}: {error}")
            });
        PinnedThread { old }
    }
}

impl Drop for PinnedThread {
    fn drop(&mut self) {
        let _ = self.old.apply_to_this_thread();
    }
}

/// Checks a pinning list for `workers` workers against the CPUs this process may use, with an
/// error that says what to change.
pub(crate) fn check_pinning(workers: usize, cpus: &[usize]) -> std::io::Result<()> {
    let invalid = |message: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, message);
    if cpus.len() != workers {
        return Err(invalid(format!(
            "pin_workers was given {} CPU{} for {workers} worker{}: give exactly one CPU per \
             worker (a CPU may repeat)",
            cpus.len(),
            if cpus.len() == 1 { "" } else { "s" },
            if workers == 1 { "" } else { "s" },
        )));
    }
    let allowed = CpuSet::of_this_thread()?;
    if let Some(&cpu) = cpus.iter().find(|&&cpu| !allowed.contains(cpu)) {
        return Err(invalid(format!(
            "CPU {cpu} is not one this process may run on (allowed: {:?}); pin_workers takes \
             CPU numbers from that list",
            allowed.cpus()
        )));
    }
    Ok(())
}

/// The number of workers `Runtime::multi_worker` starts with: the CPUs this process may run on.
pub(crate) fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The closure every worker runs in `run_on_every_worker`, shared by reference.
type EveryWorker<'f> = &'f (dyn Fn(usize) + Sync);

/// Runs `main` on worker 0 (the calling OS thread) of a runtime configured by `settings`, with
/// its other workers on OS threads of their own; when `main` returns (or unwinds), ends every
/// worker's green threads, joins the workers, and returns what `main` returned.
pub(crate) fn run<'a, T: 'a>(settings: &super::Runtime, main: impl FnOnce() -> T + 'a) -> T {
    on_workers(settings, None, |pool| {
        let link = WorkerLink {
            pool: pool.clone(),
            index: 0,
        };
        scheduler::run_main(settings, link, main, scheduler::Ends::WithMain)
    })
}

/// Runs `each(worker)` as the main green thread of every worker of a runtime configured by
/// `settings`, and returns their values in worker order once all have returned; the runtime
/// ends then. A panic in any of them is raised again, after the end, from the lowest worker
/// that panicked.
pub(crate) fn run_on_every_worker<T: Send>(
    settings: &super::Runtime,
    each: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    let results: Vec<Mutex<Option<std::thread::Result<T>>>> =
        (0..settings.workers).map(|_| Mutex::new(None)).collect();
    let closure = |worker: usize| {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| each(worker)));
        *results[worker].lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
    };
    let closure: EveryWorker<'_> = &closure;
    on_workers(settings, Some(closure), |pool| {
        worker_main(settings, pool, 0, Some(closure))
    });
    results
        .into_iter()
        .map(|slot| {
            match slot
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .expect("every worker ran its closure")
            {
                Ok(value) => value,
                Err(payload) => std::panic::resume_unwind(payload),
            }
        })
        .collect()
}

/// The frame of every multi-worker run: makes the pool, starts workers 1 and up (each running
/// `each` if given), pins the calling thread as worker 0 and runs `worker_zero` on it; however
/// that ends, starts the end of the runtime, closes worker 0's inbox, gives the calling thread
/// its CPUs back and joins the other workers.
fn on_workers<R>(
    settings: &super::Runtime,
    each: Option<EveryWorker<'_>>,
    worker_zero: impl FnOnce(&Arc<Pool>) -> R,
) -> R {
    let pool = Arc::new(
        Pool::new(settings.workers)
            .unwrap_or_else(|error| panic!("greenweave: could not start a runtime: {error}")),
    );
    if each.is_some() {
        pool.state().closures_running = settings.workers;
    }
    if let Some(signal) = settings.dump_signal {
        super::dump::dump_on_signal(signal, &pool)
            .unwrap_or_else(|error| panic!("greenweave: could not start a runtime: {error}"));
    }
    std::thread::scope(|scope| {
        let _shutdown = ShutdownOnExit(&pool);
        start_other_workers(scope, settings, &pool, each);
        let _pinned = settings
            .pins
            .as_ref()
            .map(|cpus| PinnedThread::pin(0, cpus[0]));
        let _closed = CloseOnExit(&pool, 0);
        pool.runs_on_this_thread(0);
        worker_zero(&pool)
    })
}

/// Starts workers 1 and up on OS threads of their own in `scope`.
fn start_other_workers<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    settings: &'env super::Runtime,
    pool: &'env Arc<Pool>,
    each: Option<EveryWorker<'env>>,
) {
    for index in 1..settings.workers {
        let started = std::thread::Builder::new()
            .name(format!("greenweave-worker-{index}"))
            .spawn_scoped(scope, move || {
                let _closed = CloseOnExit(pool, index);
                pool.runs_on_this_thread(index);
                // A worker leaves its loop only once the runtime is ending; if its thread
                // unwinds instead (its scheduler could not start), this ends the runtime, and
                // the scope joining it raises the panic from `run`.
                let _shutdown = ShutdownOnExit(pool);
                let _pinned = settings
                    .pins
                    .as_ref()
                    .map(|cpus| PinnedThread::pin(index, cpus[index]));
                worker_main(settings, pool, index, each);
            });
        if let Err(error) = started {
            pool.begin_shutdown();
            panic!("greenweave: could not start worker {index}'s OS thread: {error}");
        }
    }
}

/// One worker's life on its OS thread: its scheduler runs until the runtime ends, with
/// `each(index)` as its main green thread if given.
fn worker_main(
    settings: &super::Runtime,
    pool: &Arc<Pool>,
    index: usize,
    each: Option<EveryWorker<'_>>,
) {
    let link = WorkerLink {
        pool: pool.clone(),
        index,
    };
    match each {
        Some(each) => scheduler::run_main(
            settings,
            link,
            move || {
                each(index);
                pool.closure_ended();
            },
            scheduler::Ends::WithPool,
        ),
        None => scheduler::run_worker(settings, link),
    }
}
