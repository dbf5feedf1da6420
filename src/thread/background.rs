//! A runtime started on OS threads of its own ([`Runtime::start`]), for programs whose own
//! threads are not green: a tokio program, a thread pool, `main` itself.
//!
//! Owns: the OS thread that runs the runtime's worker 0 (its main green thread waits for the
//! end), and [`Background`], the `Send + Sync` handle that spawns green threads onto its
//! workers from any thread and ends it.
//!
//! May not: run a green thread on the caller's thread. A green thread is spawned by a job sent
//! to its worker, as `thread::spawn_on` does between workers; its `RemoteJoinHandle` is joined
//! or awaited from anywhere.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use super::{Builder, JoinError, RemoteJoinHandle};
use crate::runtime::Runtime;
use crate::runtime::scheduler::with_scheduler;
use crate::runtime::workers::Pool;
use crate::sync::shared;

/// A greenweave runtime running on OS threads of its own, started by [`Runtime::start`]:
/// spawn green threads onto it from any thread (a tokio task, a plain OS thread) and join or
/// `.await` them. A better `spawn_blocking` for blocking library code: with the `hooks`
/// feature, a blocking client (`redis`, `postgres`, `ureq`) in each green thread parks only
/// that green thread, so thousands of calls are in flight on a few OS threads, and an async
/// caller awaits each [`RemoteJoinHandle`] without blocking its executor.
///
/// Dropping it ends the runtime as [`shutdown`](Background::shutdown) does.
///
/// # Examples
///
/// ```
/// use greenweave::Runtime;
///
/// let runtime = Runtime::builder().workers(2).build()?.start()?;
/// let handles: Vec<_> = (0..4).map(|i| runtime.spawn(move || i * 10)).collect();
/// // From a plain OS thread: `join` blocks it (async code `.await`s the handle instead).
/// let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
/// assert_eq!(results, [0, 10, 20, 30]);
/// runtime.shutdown();
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Background {
    pool: Arc<Pool>,
    /// The next worker [`spawn`](Background::spawn) sends to (round robin).
    next_worker: AtomicUsize,
    /// Dropped to end the runtime: its main green thread waits on the other end.
    stop: Mutex<Option<shared::Sender<()>>>,
    /// The OS thread running worker 0 (and, through `Runtime::run`, starting the others).
    main: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Runtime {
    /// Starts this runtime on OS threads of its own (as many as its workers) and returns a
    /// handle to spawn green threads onto it from anywhere: see [`Background`].
    ///
    /// # Errors
    /// If the OS thread cannot be created, or the runtime cannot start on it (the error says
    /// why).
    pub fn start(self) -> io::Result<Background> {
        let (pool_sender, pool_receiver) = mpsc::channel();
        let (stop, stopped) = shared::channel::<()>();
        let main = std::thread::Builder::new()
            .name("greenweave-main".into())
            .spawn(move || {
                self.run(move || {
                    let pool =
                        with_scheduler("Runtime::start", |scheduler| scheduler.worker.pool.clone());
                    if pool_sender.send(pool).is_err() {
                        return;
                    }
                    // Until the handle is dropped or shut down: then the runtime ends.
                    let _ = stopped.recv();
                });
            })?;
        let pool = match pool_receiver.recv() {
            Ok(pool) => pool,
            Err(_) => {
                let why = match main.join() {
                    Err(payload) => JoinError::Panicked(payload)
                        .panic_message()
                        .unwrap_or("its runtime panicked")
                        .to_owned(),
                    Ok(()) => "its runtime ended at once".to_owned(),
                };
                return Err(io::Error::other(format!(
                    "greenweave::Runtime::start: the runtime could not start: {why}"
                )));
            }
        };
        Ok(Background {
            pool,
            next_worker: AtomicUsize::new(0),
            stop: Mutex::new(Some(stop)),
            main: Mutex::new(Some(main)),
        })
    }
}

impl Background {
    /// Spawns a green thread running `f` on one of the runtime's workers (each in turn), from
    /// any thread, and returns a handle to join it (blocking an OS thread, parking a green
    /// thread) or `.await` it.
    ///
    /// # Panics
    /// If the runtime has ended ([`shutdown`](Background::shutdown) from another thread).
    pub fn spawn<F, T>(&self, f: F) -> RemoteJoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let worker = self.next_worker.fetch_add(1, Ordering::Relaxed) % self.pool.len();
        self.spawn_on(worker, f)
            .unwrap_or_else(|error| panic!("greenweave::runtime::Background::spawn: {error}"))
    }

    /// Spawns a green thread running `f` on worker `worker`.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a worker that does not exist;
    /// [`io::ErrorKind::BrokenPipe`] once the runtime has ended.
    pub fn spawn_on<F, T>(&self, worker: usize, f: F) -> io::Result<RemoteJoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        Builder::new().spawn_on_pool(&self.pool, None, worker, f)
    }

    /// How many workers (OS threads) the runtime has.
    pub fn workers(&self) -> usize {
        self.pool.len()
    }

    /// Ends the runtime, as the end of [`Runtime::run`] does: green threads still running are
    /// cancelled (their handles' joins return `Err(JoinError::Cancelled)`), then its OS
    /// threads end; returns once they have.
    ///
    /// # Panics
    /// If the runtime panicked (the panic goes on here).
    pub fn shutdown(self) {
        self.end();
    }

    fn end(&self) {
        drop(self.stop.lock().unwrap_or_else(|p| p.into_inner()).take());
        let main = self.main.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(main) = main
            && let Err(payload) = main.join()
            && !std::thread::panicking()
        {
            std::panic::resume_unwind(payload);
        }
    }
}

impl Drop for Background {
    /// Ends the runtime, as [`shutdown`](Background::shutdown) does.
    fn drop(&mut self) {
        self.end();
    }
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field("workers", &self.pool.len())
            .finish_non_exhaustive()
    }
}
