//! Green threads started on another worker: [`spawn_on`], [`Builder::spawn_on`] and
//! [`RemoteJoinHandle`].
//!
//! Owns: the outcome a remote green thread leaves for its handle (`Shared`, under a lock: the
//! handle is `Send` and may be joined from any OS thread), and the two ways a join waits (a
//! green thread parks, woken by a job sent to its own worker; any other thread blocks, woken
//! by `Thread::unpark`).
//!
//! May not: move a green thread (the closure is sent, and becomes a green thread on the target
//! worker); lose a result: the outcome is completed exactly once, by the green thread's end,
//! or as cancelled by whatever drops the closure unrun (a job to a worker that has ended, a
//! green thread cancelled before it started, a runtime that ends first).

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Builder, JoinError, run_green_body};
use crate::runtime::scheduler::{self, Scheduler, with_scheduler};
use crate::runtime::task::{Task, TaskKey, Wait, Wake};
use crate::runtime::workers::{Pool, WorkerLink};

/// Spawns a green thread on worker `worker` of the calling green thread's runtime and returns
/// a handle to join it from anywhere.
///
/// The closure is sent to that worker (hence `Send`), becomes a green thread there and never
/// leaves it; its value is sent back (hence `Send`). Worker indices run from 0 to
/// [`runtime::worker_count`](crate::runtime::worker_count) - 1; sending to the calling green
/// thread's own worker ([`runtime::current_worker`](crate::runtime::current_worker)) is
/// allowed, and is [`spawn`](crate::spawn) with a `Send` handle.
///
/// # Panics
/// Outside a runtime; for a worker that does not exist; when the green thread cannot be
/// created (see [`Builder::spawn_on`] for the `Result` form).
///
/// # Examples
///
/// ```
/// use greenweave::{Runtime, runtime, thread};
///
/// let runtime = Runtime::builder().workers(2).build()?;
/// runtime.run(|| {
///     let handles: Vec<_> = (0..4)
///         .map(|i| thread::spawn_on(i % 2, move || (i, runtime::current_worker())))
///         .collect();
///     let placed: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
///     assert_eq!(placed, [(0, 0), (1, 1), (2, 0), (3, 1)]);
/// });
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn spawn_on<F, T>(worker: usize, f: F) -> RemoteJoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new()
        .spawn_on(worker, f)
        .unwrap_or_else(|error| panic!("greenweave::thread::spawn_on: {error}"))
}

impl Builder {
    /// Spawns a green thread with this builder's settings on worker `worker`, as
    /// [`spawn_on`] does.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a worker that does not exist;
    /// [`io::ErrorKind::BrokenPipe`] once that worker has ended (the runtime is shutting
    /// down); a stack that cannot be mapped on the calling worker, as
    /// [`spawn`](Builder::spawn). On another worker a failure to map the stack is reported by
    /// [`RemoteJoinHandle::join`] as a panic whose payload (a `String`) says so.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn spawn_on<F, T>(self, worker: usize, f: F) -> io::Result<RemoteJoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.check_name();
        let (pool, here) = with_scheduler("greenweave::thread::spawn_on", |scheduler| {
            (scheduler.worker.pool.clone(), scheduler.worker.index)
        });
        self.spawn_on_pool(&pool, Some(here), worker, f)
    }

    /// [`spawn_on`](Builder::spawn_on) onto worker `worker` of the runtime whose workers are
    /// `pool`, from worker `here` of it, or (`None`) from any thread outside it (a
    /// `thread::Background`'s caller).
    pub(crate) fn spawn_on_pool<F, T>(
        self,
        pool: &Arc<Pool>,
        here: Option<usize>,
        worker: usize,
        f: F,
    ) -> io::Result<RemoteJoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        if worker >= pool.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "worker {worker} does not exist: this runtime has {} worker{} (0 to {}); \
                     Builder::workers sets how many",
                    pool.len(),
                    if pool.len() == 1 { "" } else { "s" },
                    pool.len() - 1
                ),
            ));
        }
        let shared = Arc::new(Shared::new());
        let completion = Completion {
            shared: Some(shared.clone()),
        };
        let handle = RemoteJoinHandle {
            shared,
            pool: pool.clone(),
            worker,
        };
        if here == Some(worker) {
            with_scheduler("greenweave::thread::spawn_on", |scheduler| {
                self.spawn_remote_body(scheduler, f, completion)
            })?;
            return Ok(handle);
        }
        let job = Box::new(move |scheduler: &Scheduler| {
            // A failure is reported to the handle (the outcome says why); the job has no one
            // else to tell.
            let _ = self.spawn_remote_body(scheduler, f, completion);
        });
        match pool.submit(worker, job) {
            Ok(()) => Ok(handle),
            Err(job) => {
                drop(job);
                Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    format!("worker {worker} has ended: its runtime is shutting down"),
                ))
            }
        }
    }

    /// Spawns, on `scheduler` (the target worker's), the green thread of a `spawn_on`: runs
    /// `f`, then completes its handle's outcome. If the stack cannot be mapped, completes it as
    /// a panic saying so and returns the error.
    fn spawn_remote_body<F, T>(
        self,
        scheduler: &Scheduler,
        f: F,
        completion: Completion<T>,
    ) -> io::Result<()>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let stack = match self.green_stack(scheduler, size_of_val(&f)) {
            Ok(stack) => stack,
            Err(error) => {
                let message = format!(
                    "greenweave::thread::spawn_on: could not create a green thread on worker \
                     {}: {error}",
                    scheduler.worker.index
                );
                completion.complete(Err(JoinError::Panicked(Box::new(message))));
                return Err(error);
            }
        };
        let shared = completion.shared.clone();
        let body = move |task: &Task| {
            let result = run_green_body(task, f);
            completion.complete(result);
        };
        let name = self.name.map(String::into_boxed_str);
        let task = scheduler.spawn_task(name, stack, body);
        if let Some(shared) = shared {
            // Relaxed: the id is only shown (by `runtime::dump`), nothing is published with it.
            shared.green_thread.store(task.id, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// An owned permission to join a green thread started with [`spawn_on`]. Unlike
/// [`JoinHandle`](super::JoinHandle) it is `Send`: it may be joined from any green thread of
/// any worker, or from an OS thread outside the runtime (which then blocks).
///
/// Dropping the handle detaches the green thread: it runs on, and its result is dropped on its
/// worker.
pub struct RemoteJoinHandle<T> {
    shared: Arc<Shared<T>>,
    /// The runtime the green thread runs in, to tell a join from within it (whose wait the
    /// deadlock report can judge) from one in another runtime.
    pool: Arc<Pool>,
    worker: usize,
}

impl<T> RemoteJoinHandle<T> {
    /// Waits for the green thread to finish and returns its result: `Ok` with its value,
    /// `Err(JoinError::Panicked)` with its panic payload, or `Err(JoinError::Cancelled)` (it
    /// was cancelled, or its worker ended before it could run or finish).
    ///
    /// In a green thread, this parks only the calling green thread; elsewhere (an OS thread
    /// outside the runtime, or a green thread that is unwinding) it blocks the calling OS
    /// thread. A green thread that joins one of its own worker's `spawn_on` green threads
    /// while unwinding would wait for ever, and panics instead.
    pub fn join(self) -> Result<T, JoinError> {
        match self.wait(None) {
            Some(result) => result,
            None => unreachable!("a wait with no deadline ends only with the result"),
        }
    }

    /// Waits, as [`join`](RemoteJoinHandle::join) does, but at most `timeout`: if the green
    /// thread is still running then, the handle comes back as `Err`, still joinable.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::{Runtime, thread};
    ///
    /// let runtime = Runtime::builder().workers(2).build()?;
    /// runtime.run(|| {
    ///     let slow = thread::spawn_on(1, || {
    ///         thread::sleep(Duration::from_millis(200));
    ///         7
    ///     });
    ///     let slow = slow.join_timeout(Duration::from_millis(1)).expect_err("still sleeping");
    ///     assert_eq!(slow.join().unwrap(), 7);
    /// });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn join_timeout(
        self,
        timeout: Duration,
    ) -> Result<Result<T, JoinError>, RemoteJoinHandle<T>> {
        let deadline = Instant::now().checked_add(timeout);
        match self.wait(Some(deadline.unwrap_or_else(far_future))) {
            Some(result) => Ok(result),
            None => Err(self),
        }
    }

    /// Whether the green thread has finished, so that [`join`](RemoteJoinHandle::join) will
    /// not wait.
    pub fn is_finished(&self) -> bool {
        self.shared.lock().result.is_some()
    }

    /// The worker the green thread runs on.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// The result, or `None` once `deadline` has passed (looking once more after it).
    fn wait(&self, deadline: Option<Instant>) -> Option<Result<T, JoinError>> {
        let in_green_thread = scheduler::in_green_thread() && !std::thread::panicking();
        if !in_green_thread {
            return self.wait_blocking(deadline);
        }
        let (waiter, same_runtime) = with_scheduler("RemoteJoinHandle::join", |scheduler| {
            let waiter = Waiter::Green {
                worker: scheduler.worker.clone(),
                task: scheduler.current_task_key(),
            };
            (waiter, Arc::ptr_eq(&scheduler.worker.pool, &self.pool))
        });
        // Within the runtime, the green thread that will wake this one is on one of its
        // workers: the deadlock report may count this wait as one only a green thread can end.
        // From another runtime, the wake-up comes from another OS thread.
        let wait = if same_runtime {
            Wait::OtherWorker {
                worker: self.worker,
                // Read by the dump, which may come before the target worker has spawned it.
                green_thread: &raw const self.shared.green_thread,
            }
        } else {
            Wait::Remote("a green thread of another runtime")
        };
        let _unregister = Unregister(&self.shared);
        let mut timed_out = false;
        loop {
            {
                let mut shared = self.shared.lock();
                if let Some(result) = shared.result.take() {
                    return Some(result);
                }
                if timed_out || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    return None;
                }
                shared.waiter = Some(waiter.clone());
            }
            let wake = scheduler::park("RemoteJoinHandle::join", wait, deadline, None, |_, _| {});
            timed_out = deadline.is_some() && wake == Wake::TimedOut;
        }
    }

    /// `wait` for a caller that is not a green thread (or is one that is unwinding, which
    /// cannot park): blocks the OS thread.
    fn wait_blocking(&self, deadline: Option<Instant>) -> Option<Result<T, JoinError>> {
        if scheduler::in_runtime() {
            let here = with_scheduler("RemoteJoinHandle::join", |scheduler| {
                Arc::ptr_eq(&scheduler.worker.pool, &self.pool).then_some(scheduler.worker.index)
            });
            if here == Some(self.worker) && !self.is_finished() {
                panic!(
                    "greenweave: RemoteJoinHandle::join would block worker {} waiting for a \
                     green thread that only that worker can run (joined while unwinding, or \
                     from the scheduler itself)",
                    self.worker
                );
            }
        }
        let _unregister = Unregister(&self.shared);
        loop {
            {
                let mut shared = self.shared.lock();
                if let Some(result) = shared.result.take() {
                    return Some(result);
                }
                shared.waiter = Some(Waiter::Thread(std::thread::current()));
            }
            match deadline {
                None => std::thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return self.shared.lock().result.take();
                    }
                    std::thread::park_timeout(deadline - now);
                }
            }
        }
    }
}

/// Awaits the green thread's end from any async code, on any thread (a tokio task on tokio's
/// own workers, say), without blocking it: the output is [`join`](RemoteJoinHandle::join)'s
/// result. Polled again after it returned `Ready`, it stays pending.
///
/// ```
/// use greenweave::Runtime;
///
/// let runtime = Runtime::builder().workers(2).build()?.start()?;
/// let handle = runtime.spawn(|| 6 * 7);
/// // Any executor will do; here, block_on outside a green thread.
/// assert_eq!(greenweave::block_on(handle).unwrap(), 42);
/// runtime.shutdown();
/// # Ok::<(), std::io::Error>(())
/// ```
impl<T> std::future::Future for RemoteJoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let mut shared = self.shared.lock();
        match shared.result.take() {
            Some(result) => std::task::Poll::Ready(result),
            None => {
                shared.waiter = Some(Waiter::Future(cx.waker().clone()));
                std::task::Poll::Pending
            }
        }
    }
}

/// A deadline no wait reaches (a timeout too large to add to now).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

impl<T> fmt::Debug for RemoteJoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteJoinHandle")
            .field("worker", &self.worker)
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}

/// What a `spawn_on` green thread and its handle share.
struct Shared<T> {
    state: Mutex<SharedState<T>>,
    /// The green thread's id once its worker has spawned it (0 until then), so that a join
    /// can name the green thread it waits for (`runtime::dump`'s wait-for edges across
    /// workers). Written once, on the target worker, before the green thread first runs.
    green_thread: AtomicU64,
}

struct SharedState<T> {
    /// The green thread's outcome, until the handle takes it.
    result: Option<Result<T, JoinError>>,
    /// Who waits for it.
    waiter: Option<Waiter>,
}

/// A join waiting for a `spawn_on` green thread.
#[derive(Clone)]
enum Waiter {
    /// A green thread, parked on its worker: woken by a job sent there (counted as a job in
    /// flight, so the deadlock verdict cannot miss it).
    Green { worker: WorkerLink, task: TaskKey },
    /// An OS thread, blocked in `std::thread::park`.
    Thread(std::thread::Thread),
    /// A task awaiting the handle as a future.
    Future(std::task::Waker),
}

impl<T> Shared<T> {
    fn new() -> Shared<T> {
        Shared {
            state: Mutex::new(SharedState {
                result: None,
                waiter: None,
            }),
            green_thread: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SharedState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Takes a join's waiter out however the join ends (result, timeout, cancellation).
struct Unregister<'a, T>(&'a Shared<T>);

impl<T> Drop for Unregister<'_, T> {
    fn drop(&mut self) {
        self.0.lock().waiter = None;
    }
}

/// The green thread's side of [`Shared`]: completes it once, with the result, or as cancelled
/// if dropped first (the closure dropped unrun with it).
struct Completion<T> {
    shared: Option<Arc<Shared<T>>>,
}

impl<T> Completion<T> {
    fn complete(mut self, result: Result<T, JoinError>) {
        if let Some(shared) = self.shared.take() {
            finish(&shared, result);
        }
    }
}

impl<T> Drop for Completion<T> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            finish(&shared, Err(JoinError::Cancelled));
        }
    }
}

/// Stores `result` and wakes the waiter, outside the lock.
fn finish<T>(shared: &Shared<T>, result: Result<T, JoinError>) {
    let waiter = {
        let mut state = shared.lock();
        state.result = Some(result);
        state.waiter.take()
    };
    match waiter {
        Some(Waiter::Green { worker, task }) => {
            // On the joiner's own worker, wake it directly; from elsewhere, with a job (counted
            // in flight). A worker that has ended has already unwound the waiter: nothing to
            // wake.
            let remote = worker.pool.remote(worker.index);
            if !scheduler::wake_if_local(remote, task, None) {
                let _ = worker.pool.submit(
                    worker.index,
                    Box::new(move |scheduler: &Scheduler| scheduler.wake_task(task)),
                );
            }
        }
        Some(Waiter::Thread(thread)) => thread.unpark(),
        Some(Waiter::Future(waker)) => waker.wake(),
        None => {}
    }
}
