//! The runtime: a single-thread scheduler with an epoll reactor and timers, on which green
//! threads run.
//!
//! Layout: `scheduler` (ready queue, the loop, `park`, deadlock detection, shutdown), `budget`
//! (how many operations a green thread completes without parking before it yields), `task`
//! (a green thread as the scheduler sees it), `timer` (deadline heap), `reactor` (epoll and
//! per-fd readiness), `offload` (running a blocking call on another OS thread while the green
//! thread parks), `stall` (the stall report's watchdog, see [`Builder::stall_report`]),
//! `panic_report` (the panic hook that names the green thread, see [`run`]), `metrics` (the
//! counters behind [`metrics()`](metrics())), `dump` (the dump of every green thread, see
//! [`dump()`] and [`Builder::dump_on_signal`]), `stack_release` (the sweep that gives back a
//! long-parked green thread's high-water stack pages, see [`Builder::stack_release`]). The
//! public face is [`run`], [`Runtime`] and [`Builder`]; green threads themselves are in
//! [`crate::thread`], sockets in [`crate::net`].

pub(crate) mod budget;
#[cfg(greenweave_chaos)]
mod chaos;
pub(crate) mod compaction;
pub(crate) mod dump;
pub(crate) mod locals;
mod metrics;
pub mod offload;
mod panic_report;
pub(crate) mod parker;
pub(crate) mod reactor;
pub(crate) mod ring;
pub(crate) mod scheduler;
mod stack_release;
mod stall;
pub(crate) mod task;
mod timer;
#[cfg(feature = "tokio")]
pub(crate) mod tokio_context;
#[cfg(feature = "tracing")]
mod trace;
pub(crate) mod workers;

use std::io;
use std::time::Duration;

use crate::stack::Stack;

pub use dump::{Dump, Frame, GreenThread, GreenThreadState, dump, dump_without_backtraces};
pub use metrics::{ParkReason, RuntimeMetrics};

/// Runs `main` as the first green thread of a new runtime on the current OS thread and
/// returns its value.
///
/// `main` may borrow from the caller, and its value may too: the main green thread always ends
/// before `run` returns (as the closure of `std::thread::scope` does). Green threads it starts
/// with [`spawn`](crate::spawn) may not borrow (they are `'static`, see below);
/// [`thread::scope`](crate::thread::scope) starts green threads that may.
///
/// Inside `main`, [`spawn`](crate::spawn) starts more green threads, and blocking-looking calls
/// ([`sleep`](crate::thread::sleep), reads and writes on [`net`](crate::net) sockets, joins)
/// park only the calling green thread while the others run. When `main` returns, green threads
/// still alive are cancelled: each is unwound from the point where it is parked, so its
/// destructors run, before `run` returns. A panic in `main` is raised again from `run`, after
/// that clean-up. Shutdown always completes: a green thread that keeps catching its
/// cancellation (it is raised again at every park point) is given up on after 64 deliveries,
/// its stack leaked with a line on stderr naming it. A destructor that panics during one of
/// these unwinds aborts the process, as in any Rust unwind.
///
/// `main` runs on an 8 MiB stack, as std gives the main thread, so recursive code that works
/// in a plain `main` works here too; spawned green threads get 256 KiB by default (see
/// [`Builder::main_stack_size`] and [`Builder::stack_size`]).
///
/// A panic in a green thread is reported on stderr under the green thread's name as well as
/// the OS thread's, in std's format otherwise (`RUST_BACKTRACE` included):
///
/// ```text
/// thread 'main' (4242), green thread 'worker-3' (id 4), panicked at src/main.rs:7:9:
/// ```
///
/// `green thread <unnamed> (id 5)` names one spawned without a name. For this the first `run`
/// in the process installs a panic hook, once, around the hook in place then: if that is std's
/// default, it writes the report above in a green thread and calls std's elsewhere; if the
/// program installed its own hook before, it calls that hook unchanged for every panic. A
/// hook the program installs later replaces it, as `std::panic::set_hook` always does.
///
/// # Panics
/// If called from inside a runtime; if the runtime cannot be created (no epoll or eventfd);
/// with the deadlock report if every green thread ends up parked with nothing that could wake
/// one; and with `main`'s own panic.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let sum = greenweave::run(|| {
///     let a = greenweave::spawn(|| {
///         greenweave::thread::sleep(Duration::from_millis(20));
///         1
///     });
///     let b = greenweave::spawn(|| {
///         greenweave::thread::sleep(Duration::from_millis(10));
///         2
///     });
///     // Both sleeps overlap: this takes about 20 ms, not 30.
///     a.join().unwrap() + b.join().unwrap()
/// });
/// assert_eq!(sum, 3);
/// ```
///
/// Borrowing from the caller:
///
/// ```
/// let mut log = Vec::new();
/// let text = String::from("green threads");
/// let first_word = greenweave::run(|| {
///     log.push("started");
///     greenweave::thread::yield_now();
///     log.push("done");
///     text.split(' ').next().unwrap() // borrows `text`, and is returned from `run`
/// });
/// assert_eq!(first_word, "green");
/// assert_eq!(log, ["started", "done"]);
/// ```
///
/// A green thread spawned with [`spawn`](crate::spawn) may outlive the main one (it is
/// cancelled when `main` returns, but only then), so it cannot borrow from `run`'s caller:
///
/// ```compile_fail
/// let mut log = Vec::new();
/// greenweave::run(|| {
///     greenweave::spawn(|| log.push(1)).join().unwrap();
/// });
/// ```
pub fn run<T>(main: impl FnOnce() -> T) -> T {
    Runtime::new().run(main)
}

/// A configured runtime; [`Runtime::run`] starts it on the current thread.
///
/// ```
/// use greenweave::Runtime;
///
/// let runtime = Runtime::builder().stack_size(128 * 1024).build()?;
/// assert_eq!(runtime.run(|| 6 * 7), 42);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Runtime {
    stack_size: usize,
    main_stack_size: usize,
    stall_report: Option<Duration>,
    stack_release: Option<Duration>,
    compact_parked: bool,
    max_blocking_threads: usize,
    workers: usize,
    pins: Option<Vec<usize>>,
    dump_signal: Option<i32>,
}

/// The main green thread's stack size unless configured: std's main thread gets 8 MiB.
const MAIN_STACK_SIZE: usize = 8 * 1024 * 1024;

impl Runtime {
    /// A runtime with the default settings.
    pub fn new() -> Runtime {
        Runtime {
            stack_size: Stack::DEFAULT_SIZE,
            main_stack_size: MAIN_STACK_SIZE,
            stall_report: None,
            stack_release: Some(stack_release::DEFAULT_RELEASE_AFTER),
            compact_parked: false,
            max_blocking_threads: offload::DEFAULT_MAX_BLOCKING_THREADS,
            workers: 1,
            pins: None,
            dump_signal: None,
        }
    }

    /// Configures a runtime: one worker (the OS thread that calls [`Runtime::run`]) unless
    /// [`Builder::workers`] says more.
    pub fn builder() -> Builder {
        Builder {
            stack_size: Stack::DEFAULT_SIZE,
            main_stack_size: None,
            stall_report: None,
            stack_release: Some(stack_release::DEFAULT_RELEASE_AFTER),
            compact_parked: false,
            max_blocking_threads: offload::DEFAULT_MAX_BLOCKING_THREADS,
            workers: 1,
            pins: None,
            dump_signal: None,
        }
    }

    /// Configures a runtime with one worker per CPU this process may run on
    /// (`std::thread::available_parallelism`): each worker is a single-thread scheduler on an
    /// OS thread of its own. [`Builder::workers`] changes the number,
    /// [`Builder::pin_workers`] pins each to a CPU.
    ///
    /// ```
    /// use greenweave::Runtime;
    ///
    /// let runtime = Runtime::multi_worker().build()?;
    /// let cpus = std::thread::available_parallelism()?.get();
    /// assert_eq!(runtime.workers(), cpus);
    /// let per_worker = runtime.run_on_every_worker(|worker| worker * 10);
    /// assert_eq!(per_worker, (0..cpus).map(|worker| worker * 10).collect::<Vec<_>>());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn multi_worker() -> Builder {
        Builder {
            workers: workers::default_workers(),
            ..Runtime::builder()
        }
    }

    /// How many workers this runtime runs: single-thread schedulers, each on an OS thread of
    /// its own (the first on the thread that calls [`run`](Runtime::run)).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Runs `main` as the first green thread, as [`run`] does, with this configuration.
    ///
    /// With more than one worker (see [`Builder::workers`]), `main` runs on worker 0, the
    /// calling OS thread, and the others are OS threads started for this call (named
    /// `greenweave-worker-1` and up). Green threads stay where they are spawned:
    /// [`spawn`](crate::spawn) starts one on the calling green thread's own worker, and
    /// [`thread::spawn_on`](crate::thread::spawn_on) on a chosen one. When `main` returns,
    /// every worker cancels its green threads (their destructors run on their own workers),
    /// the worker threads are joined, and then `run` returns. The deadlock report covers every
    /// worker: it is raised when every green thread on every worker is parked and nothing, not
    /// even a job on its way from one worker to another, can wake one.
    ///
    /// ```
    /// use greenweave::Runtime;
    ///
    /// let runtime = Runtime::builder().workers(2).build()?;
    /// let (first, second) = runtime.run(|| {
    ///     let here = greenweave::runtime::current_worker();
    ///     let there = greenweave::thread::spawn_on(1, greenweave::runtime::current_worker);
    ///     (here, there.join().unwrap())
    /// });
    /// assert_eq!((first, second), (0, 1));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn run<T>(&self, main: impl FnOnce() -> T) -> T {
        panic_report::install();
        workers::run(self, main)
    }

    /// Runs `each(worker)` as the main green thread of every worker at once (`worker` from 0
    /// to [`workers`](Runtime::workers) - 1; worker 0 is the calling OS thread) and returns
    /// their values in worker order. The runtime ends when the last of them has returned:
    /// green threads they spawned run until then, and are cancelled then. A panic in any of
    /// them is raised again from here after that end (the lowest worker's, if several
    /// panicked). The shape of a server: each worker accepts on a listener of its own.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// use greenweave::Runtime;
    ///
    /// let started = AtomicUsize::new(0);
    /// let runtime = Runtime::builder().workers(3).build()?;
    /// let workers = runtime.run_on_every_worker(|worker| {
    ///     started.fetch_add(1, Ordering::Relaxed);
    ///     greenweave::spawn(move || worker).join().unwrap()
    /// });
    /// assert_eq!(workers, [0, 1, 2]);
    /// assert_eq!(started.load(Ordering::Relaxed), 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[must_use = "each worker's result is in the Vec: a worker whose closure failed (a listener \
                  that could not bind) says so only there"]
    pub fn run_on_every_worker<T: Send>(&self, each: impl Fn(usize) -> T + Sync) -> Vec<T> {
        panic_report::install();
        workers::run_on_every_worker(self, each)
    }
}

/// The index of the worker the calling green thread runs on: 0 for [`run`] and for the
/// worker that called [`Runtime::run`], 1 and up for the others. A green thread never moves,
/// so the answer never changes during its life.
///
/// # Panics
/// Outside a runtime.
///
/// ```
/// assert_eq!(greenweave::run(greenweave::runtime::current_worker), 0);
/// ```
pub fn current_worker() -> usize {
    scheduler::with_scheduler("greenweave::runtime::current_worker", |scheduler| {
        scheduler.worker.index
    })
}

/// How many workers the calling green thread's runtime has (see [`Builder::workers`]).
///
/// # Panics
/// Outside a runtime.
///
/// ```
/// assert_eq!(greenweave::run(greenweave::runtime::worker_count), 1);
/// ```
pub fn worker_count() -> usize {
    scheduler::with_scheduler("greenweave::runtime::worker_count", |scheduler| {
        scheduler.worker.pool.len()
    })
}

/// A handle to the metrics of the calling green thread's runtime: counters of every worker,
/// readable from any thread while the runtime runs and after it ends (send a clone to a
/// monitoring thread). The hot paths' counts of the caller's own worker are brought up to
/// date first, so a green thread reading its own worker's figures through this handle right
/// away reads them exactly. tokio's `Handle::current().metrics()`.
///
/// # Panics
/// Outside a runtime.
///
/// ```
/// let metrics = greenweave::run(|| {
///     let children: Vec<_> = (0..4).map(|_| greenweave::spawn(|| {})).collect();
///     for child in children {
///         child.join().unwrap();
///     }
///     greenweave::runtime::metrics()
/// });
/// assert_eq!(metrics.spawned_tasks_count(), 5);
/// assert_eq!(metrics.num_alive_tasks(), 0);
/// ```
pub fn metrics() -> RuntimeMetrics {
    scheduler::with_scheduler("greenweave::runtime::metrics", |scheduler| {
        scheduler.publish_metrics();
        scheduler.worker.pool.runtime_metrics()
    })
}

/// Whether the calling code runs inside a greenweave runtime on this OS thread: in one of its
/// green threads (or a coroutine or greenlet one resumed), or in its scheduler itself (a
/// destructor it runs, say). False outside [`run`] and [`Runtime::run`], and on every other OS
/// thread, including a `std::thread` started from a green thread and the helper threads of
/// [`unblock`](crate::unblock): code there does not park, and a greenweave call that must park
/// blocks the OS thread or panics as documented for it.
///
/// Where [`is_in_green_thread`] is true, this is true; the converse does not hold.
///
/// ```
/// use greenweave::runtime::is_in_runtime;
///
/// assert!(!is_in_runtime());
/// greenweave::run(|| {
///     assert!(is_in_runtime());
///     let os_thread = std::thread::spawn(is_in_runtime);
///     assert!(!os_thread.join().unwrap());
/// });
/// ```
pub fn is_in_runtime() -> bool {
    scheduler::in_runtime()
}

/// Whether the calling code runs on behalf of a green thread: on its stack, or on that of a
/// coroutine or greenlet it resumed. This is where a blocking-looking greenweave call
/// ([`sleep`](crate::thread::sleep), a socket read, a join) parks the calling green thread
/// instead of blocking the OS thread. False outside a runtime, on other OS threads, and in the
/// runtime's scheduler itself (see [`is_in_runtime`]).
///
/// ```
/// use greenweave::runtime::is_in_green_thread;
///
/// assert!(!is_in_green_thread());
/// greenweave::run(|| {
///     assert!(is_in_green_thread());
///     assert!(greenweave::spawn(is_in_green_thread).join().unwrap());
/// });
/// ```
pub fn is_in_green_thread() -> bool {
    scheduler::in_green_thread()
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::new()
    }
}

/// Settings for a [`Runtime`].
#[derive(Debug, Clone)]
#[must_use = "a Builder configures nothing until build() makes the Runtime"]
pub struct Builder {
    stack_size: usize,
    main_stack_size: Option<usize>,
    stall_report: Option<Duration>,
    stack_release: Option<Duration>,
    compact_parked: bool,
    max_blocking_threads: usize,
    workers: usize,
    pins: Option<Vec<usize>>,
    dump_signal: Option<i32>,
}

impl Builder {
    /// How many workers the runtime runs: single-thread schedulers, each on an OS thread of
    /// its own; the first is the thread that calls [`Runtime::run`]. Default: 1 from
    /// [`Runtime::builder`], one per CPU from [`Runtime::multi_worker`]. 0 is refused by
    /// [`build`](Builder::build).
    ///
    /// A green thread runs on one worker from start to end and never migrates, so what it
    /// holds need not be `Send`. Work reaches another worker through
    /// [`thread::spawn_on`](crate::thread::spawn_on) (a `Send` closure), listeners bound on
    /// every worker ([`Runtime::run_on_every_worker`]), and `Send` channels. Each worker has
    /// its own epoll, timers and stack pool; the blocking pool
    /// ([`max_blocking_threads`](Builder::max_blocking_threads)) is per worker too.
    ///
    /// ```
    /// use greenweave::Runtime;
    ///
    /// let runtime = Runtime::builder().workers(2).build()?;
    /// assert_eq!(runtime.run_on_every_worker(|worker| worker), [0, 1]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn workers(mut self, workers: usize) -> Builder {
        self.workers = workers;
        self
    }

    /// Pins worker `i` to CPU `cpus[i]` (`sched_setaffinity`) while the runtime runs; give one
    /// CPU per worker (a CPU may repeat). Worker 0 is the thread that calls
    /// [`Runtime::run`]: it gets its own CPUs back when `run` returns. Default: not pinned
    /// (the kernel moves workers between CPUs as it likes).
    ///
    /// Pinning keeps each worker's caches warm and its interrupts predictable, which helps a
    /// server that owns the machine; on a shared machine it can also put a worker on a CPU
    /// that is busy with something else.
    ///
    /// # Errors (from [`build`](Builder::build))
    /// [`io::ErrorKind::InvalidInput`] when the list's length differs from the number of
    /// workers, or names a CPU this process may not run on (outside its affinity mask).
    ///
    /// ```
    /// use greenweave::Runtime;
    ///
    /// let runtime = Runtime::builder().workers(1).pin_workers([0]).build()?;
    /// runtime.run(|| greenweave::thread::yield_now());
    ///
    /// let error = Runtime::builder().workers(2).pin_workers([0]).build().unwrap_err();
    /// assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn pin_workers(mut self, cpus: impl IntoIterator<Item = usize>) -> Builder {
        self.pins = Some(cpus.into_iter().collect());
        self
    }

    /// The stack size of green threads spawned without
    /// [`thread::Builder::stack_size`](crate::thread::Builder::stack_size). Default:
    /// [`Stack::DEFAULT_SIZE`] (256 KiB), whose stacks are pooled. The main green thread (the
    /// closure given to [`Runtime::run`]) gets the larger of this and 8 MiB, unless
    /// [`main_stack_size`](Builder::main_stack_size) sets its size.
    ///
    /// As `std::thread::Builder::stack_size` rounds up to the platform's minimum, a size below
    /// 16 KiB is rounded up to 16 KiB, and every size to whole pages (and, for each green
    /// thread, to fit its closure: see `thread::Builder::stack_size`). 0 is refused by
    /// [`build`](Builder::build).
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = bytes;
        self
    }

    /// The stack size of the main green thread, the one that runs the closure given to
    /// [`Runtime::run`]. Default: 8 MiB (std's main thread's), or
    /// [`stack_size`](Builder::stack_size) if that is larger, so that recursive code that
    /// runs in a plain `main` also runs in a green `main`.
    ///
    /// The stack is one mapping, committed only where it is touched: 8 MiB costs address
    /// space, and memory only for the depth the main green thread reaches. It is mapped when
    /// the runtime starts and unmapped when it ends (only 256 KiB stacks are pooled). Sizes are
    /// rounded as for [`stack_size`](Builder::stack_size); 0 is refused by
    /// [`build`](Builder::build).
    ///
    /// ```
    /// use greenweave::Runtime;
    ///
    /// let runtime = Runtime::builder().main_stack_size(64 * 1024 * 1024).build()?;
    /// let depth = runtime.run(|| {
    ///     fn down(n: u32) -> u32 {
    ///         let frame = std::hint::black_box([0u8; 256]);
    ///         if n == 0 { 0 } else { 1 + down(n - 1) + u32::from(frame[0]) }
    ///     }
    ///     down(50_000) // more than the default 8 MiB holds in a debug build
    /// });
    /// assert_eq!(depth, 50_000);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn main_stack_size(mut self, bytes: usize) -> Builder {
        self.main_stack_size = Some(bytes);
        self
    }

    /// The most helper OS threads the runtime's blocking pool runs at once: the threads
    /// behind [`unblock`](crate::unblock), hostname lookups of [`net`](crate::net), and (with
    /// the `hooks` feature) offloaded libc calls. More calls than that wait in a queue for a
    /// free thread. Default: 16. tokio's name for the same setting.
    ///
    /// Threads are started only when a call finds none idle, and each leaves after 10 seconds
    /// idle or when the runtime ends, so a larger limit costs nothing until calls overlap.
    /// Then each thread is an OS thread: a 2 MiB stack mapping (touched pages only), a kernel
    /// task, and its share of the CPU if the calls compute rather than wait. Raise it when
    /// many calls block at once (slow disks, a blocking client library); with 16 threads, 200
    /// calls that each wait 50 ms take 13 rounds. 0 is refused by [`build`](Builder::build).
    ///
    /// ```
    /// use greenweave::Runtime;
    ///
    /// let runtime = Runtime::builder().max_blocking_threads(64).build()?;
    /// runtime.run(|| {
    ///     let calls: Vec<_> = (0..64u64)
    ///         .map(|i| greenweave::spawn(move || greenweave::unblock(move || i * 2)))
    ///         .collect();
    ///     let sum: u64 = calls.into_iter().map(|call| call.join().unwrap()).sum();
    ///     assert_eq!(sum, 64 * 63);
    /// });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn max_blocking_threads(mut self, threads: usize) -> Builder {
        self.max_blocking_threads = threads;
        self
    }

    /// Reports on stderr every green thread that runs for `threshold` or longer without
    /// parking. Such a green thread holds up every other one on its OS thread: it is blocked
    /// in a call greenweave does not turn into a park (a `std::sync` lock held across work,
    /// file I/O, a raw system call, a blocking call the `hooks` feature does not cover) or it
    /// computes in a loop. Off by default; `Duration::ZERO` turns it off. The environment
    /// variable `GREENWEAVE_STALL_REPORT_MS`, read when a runtime starts, sets the threshold in
    /// milliseconds without a change to the code, and takes precedence over this setting (`0`
    /// turns the report off).
    ///
    /// While it is on, a watchdog thread (one per running runtime, stopped when the runtime
    /// ends) looks every half threshold at which green thread runs. When one has run for the
    /// threshold without parking, the watchdog writes one line at once (the stuck thread
    /// cannot), with what the OS thread is doing: the system call it is blocked in, read from
    /// `/proc/self/task/<tid>/syscall` and named for the common ones (else `system call 123`),
    /// or `computing` when it runs its own code; and what usually causes that:
    ///
    /// ```text
    /// greenweave: green thread 'db' (id 7) has held its OS thread for at least 1.2 s without parking, blocked in the system call futex; it is holding up every green thread on this OS thread (a std::sync lock or channel, or a raw futex wait: greenweave::sync parks instead, greenweave::unblock runs a blocking call on a helper thread)
    /// greenweave: green thread 'worker' (id 3) has held its OS thread for at least 112 ms without parking, computing (running its own code, in no system call); it is holding up every green thread on this OS thread (a CPU-bound loop: call greenweave::thread::yield_now in it, or run it with greenweave::unblock)
    /// ```
    ///
    /// Under qemu-user, whose `/proc` is the host kernel's, the call is not named ("blocked in
    /// a system call"); where `/proc` cannot be read, the line says so.
    ///
    /// When that green thread next parks, it writes how long the stall lasted and a backtrace
    /// of that park: the first frame below greenweave's own is the code right after the
    /// blocking call. If it finishes instead, only the duration. A stall is reported once.
    /// Durations are lower bounds, and a stall is noticed between one and one and a half
    /// thresholds after it starts.
    ///
    /// Off, the report costs the scheduler a branch that always goes the same way at each
    /// switch; on, a few stores per switch into a green thread, and a copy of its name when it
    /// is not the one that ran last.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// use greenweave::Runtime;
    ///
    /// let runtime = Runtime::builder()
    ///     .stall_report(Duration::from_millis(100))
    ///     .build()?;
    /// runtime.run(|| {
    ///     let spinner = greenweave::thread::Builder::new()
    ///         .name("spinner".into())
    ///         .spawn(|| {
    ///             // A loop that never parks: reported on stderr after 100 to 150 ms.
    ///             let start = Instant::now();
    ///             while start.elapsed() < Duration::from_millis(300) {
    ///                 std::hint::spin_loop();
    ///             }
    ///         })?;
    ///     spinner.join().unwrap();
    ///     Ok::<(), std::io::Error>(())
    /// })?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stall_report(mut self, threshold: Duration) -> Builder {
        self.stall_report = (!threshold.is_zero()).then_some(threshold);
        self
    }

    /// Gives back the stack pages of green threads parked for `after` or longer that lie below
    /// their stack pointer: a green thread that once went 100 KiB deep (a TLS handshake, a
    /// large JSON document) and then waits for its next request holds only the pages its
    /// parked frames use. `None` turns it off. Default: `Some(1 s)`.
    ///
    /// The scheduler sweeps in its idle time and at its polls (every few dozen green threads
    /// it runs), never on a park or a switch: a park that lasts `after` is swept once, with
    /// one `mincore` over its stack to find the pages touched below its stack pointer, and the
    /// ranges of every green thread swept at once are released with one `MADV_DONTNEED` call
    /// (`process_madvise`). A green thread that wakes and goes deep again gets fresh zeroed
    /// pages, as on its first descent (a page fault per 4 KiB page it touches again). The
    /// figures are in [`RuntimeMetrics`]: [`stack_release_count`](RuntimeMetrics::stack_release_count),
    /// [`stack_bytes_released`](RuntimeMetrics::stack_bytes_released) and
    /// [`long_parked_stack_bytes`](RuntimeMetrics::long_parked_stack_bytes). Page tables are
    /// not freed, only the pages they map.
    ///
    /// The sweep also learns how deep each stack has gone: a green thread whose stack use
    /// passes 75% of its stack gets one warning line on stderr, naming it, before it
    /// overflows. That line comes at the first sweep (or [`dump()`]) after the deep call, so
    /// a green thread that never parks for `after` is warned only by a dump; with the release
    /// off, only a dump warns.
    ///
    /// `Duration::ZERO` sweeps every park at the scheduler's next look (when it polls or goes
    /// idle): for tests, or a program that would rather pay the page faults than hold pages.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use greenweave::Runtime;
    ///
    /// // Idle connections give back their deep pages after 5 s instead of 1 s.
    /// let runtime = Runtime::builder()
    ///     .stack_release(Some(Duration::from_secs(5)))
    ///     .build()?;
    /// assert_eq!(runtime.run(|| 6 * 7), 42);
    /// // Never release.
    /// let runtime = Runtime::builder().stack_release(None).build()?;
    /// assert_eq!(runtime.run(|| 6 * 7), 42);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stack_release(mut self, after: Option<Duration>) -> Builder {
        self.stack_release = after;
        self
    }

    /// Compacts green threads parked for [`stack_release`](Self::stack_release)'s threshold
    /// (1 s by default): their live frames (0.5 KiB for a green thread in `thread::park`, 1.3
    /// KiB for the echo handler of `examples/idle_connections` waiting on its socket) are
    /// copied to the heap and their whole stack, the page its frames were on included, is
    /// given back to the kernel. When one wakes, its frames are copied back to
    /// the same addresses before it runs, so every reference into them is valid again. Off by
    /// default; it needs the release on (`stack_release(Some(..))`).
    ///
    /// A compacted green thread holds its task record and its frames: 1.2 KiB in all for one
    /// in `thread::park`, where an uncompacted one holds a 4 KiB page and 0.5 KiB of page
    /// tables (BENCHMARKS.md, "Compaction of long-parked green threads"). Its wake-up pays the
    /// guard page's `madvise`, the copy back and a page fault: about 3.7 us instead of 0.2.
    ///
    /// Only parks whose waker writes nothing on the parked stack are compacted: sleeps, I/O
    /// readiness, `thread::park`, green locks, channels, events, condvars and joins. A green
    /// thread with a `thread::scope` open, or parked in a `select`, a scope's wait, an
    /// `unblock`, a futex wait (the `hooks` feature's std locks), a `block_on` or a wait on
    /// a `sync::shared` channel, or inside a generator or greenlet it runs, is released
    /// below its stack pointer as without compaction. ARCHITECTURE.md ("Who may touch a
    /// parked stack") lists every way to a parked stack and how each is kept off a compacted
    /// one.
    ///
    /// # Safety
    ///
    /// greenweave cannot see other OS threads that borrow a green thread's stack. While a
    /// green thread of this runtime parks in one of the waits above, no other OS thread may
    /// read or write its stack: no `std::thread::scope`, `crossbeam::scope` or scoped thread
    /// pool may be open in it with threads that use its locals, and no pointer to its locals
    /// may have been handed to another thread by `unsafe` code. Without compaction such a
    /// thread reads what the parked frames hold; with it, it would read zeros (and its writes
    /// would be lost when the frames come back).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use greenweave::Runtime;
    ///
    /// // SAFETY: no green thread lends its stack to another OS thread.
    /// let runtime = unsafe {
    ///     Runtime::builder()
    ///         .stack_release(Some(Duration::ZERO))
    ///         .compact_parked_stacks()
    /// }
    /// .build()?;
    /// let compactions = runtime.run(|| {
    ///     let (wake, parked) = greenweave::sync::mpsc::channel::<u64>();
    ///     let waiter = greenweave::spawn(move || {
    ///         let local = 40;
    ///         let got = parked.recv().unwrap(); // parked here, then compacted
    ///         local + got // its frames are back: `local` is still 40
    ///     });
    ///     while greenweave::runtime::metrics().stack_compaction_count() == 0 {
    ///         greenweave::thread::sleep(Duration::from_millis(1));
    ///     }
    ///     wake.send(2).unwrap();
    ///     assert_eq!(waiter.join().unwrap(), 42);
    ///     greenweave::runtime::metrics().stack_compaction_count()
    /// });
    /// assert!(compactions >= 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub unsafe fn compact_parked_stacks(mut self) -> Builder {
        self.compact_parked = true;
        self
    }

    /// Writes a [`Dump`] of every green thread to stderr each time the process receives
    /// `signal` (say `libc::SIGQUIT`, as Go does, or `SIGUSR1`), while the runtime runs; the
    /// program goes on. The handler only writes a byte to a pipe; a watcher thread
    /// (`greenweave-dump`) takes the dump and writes it, with backtraces, so nothing
    /// async-signal-unsafe runs in the handler. The handler replaces the signal's default
    /// action (for `SIGQUIT`: a core dump) for the rest of the process. Off by default.
    ///
    /// # Errors
    /// [`build`](Builder::build) returns [`io::ErrorKind::InvalidInput`] for a signal that
    /// cannot be caught or that reports a crash (`SIGKILL`, `SIGSTOP`, `SIGSEGV`, `SIGBUS`,
    /// `SIGILL`, `SIGFPE`, `SIGABRT`), that the C library keeps for itself (the real-time
    /// signals below `libc::SIGRTMIN()`: 32 and 33 on glibc) or is not a signal number.
    ///
    /// # Examples
    ///
    /// ```
    /// use greenweave::Runtime;
    ///
    /// let runtime = Runtime::builder().dump_on_signal(libc::SIGUSR2).build()?;
    /// runtime.run(|| {
    ///     // `kill -USR2 <pid>` now prints every green thread to stderr.
    /// });
    /// assert!(Runtime::builder().dump_on_signal(libc::SIGKILL).build().is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn dump_on_signal(mut self, signal: i32) -> Builder {
        self.dump_signal = Some(signal);
        self
    }

    /// Checks the settings, mapping one stack of each configured size to be sure one can be
    /// (so that [`Runtime::run`] does not fail for a size this could have refused).
    ///
    /// # Errors
    /// Those of [`Stack::new`]: [`io::ErrorKind::InvalidInput`] for a stack size of 0 or one so
    /// large that the mapping size overflows, [`io::ErrorKind::OutOfMemory`] if the kernel
    /// refuses the mapping (a size larger than the address space, for one).
    /// [`io::ErrorKind::InvalidInput`] for `max_blocking_threads(0)`.
    ///
    /// ```
    /// use greenweave::Runtime;
    ///
    /// let error = Runtime::builder().stack_size(usize::MAX).build().unwrap_err();
    /// assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    /// // A tiny stack is rounded up to the minimum.
    /// let runtime = Runtime::builder().stack_size(1).build()?;
    /// assert_eq!(runtime.run(|| 6 * 7), 42);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn build(self) -> io::Result<Runtime> {
        let size = green_stack_size(self.stack_size, 0)?;
        let probe = Stack::new(size)?;
        let main_size = match self.main_stack_size {
            Some(bytes) => green_stack_size(bytes, 0)?,
            None => MAIN_STACK_SIZE.max(probe.size()),
        };
        let main_probe = Stack::new(main_size)?;
        if self.max_blocking_threads == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "max_blocking_threads must be at least 1 (the default is 16)",
            ));
        }
        if self.workers == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "workers must be at least 1 (Runtime::builder's default is 1, \
                 Runtime::multi_worker's one per CPU)",
            ));
        }
        if let Some(cpus) = &self.pins {
            workers::check_pinning(self.workers, cpus)?;
        }
        if let Some(signal) = self.dump_signal {
            dump::check_signal(signal)?;
        }
        Ok(Runtime {
            stack_size: probe.size(),
            main_stack_size: main_probe.size(),
            stall_report: self.stall_report,
            stack_release: self.stack_release,
            compact_parked: self.compact_parked,
            max_blocking_threads: self.max_blocking_threads,
            workers: self.workers,
            pins: self.pins,
            dump_signal: self.dump_signal,
        })
    }
}

/// The smallest stack a green thread gets, whatever size it asks for: `PTHREAD_STACK_MIN` on
/// x86_64, room for the root frame, the task's bookkeeping around the closure and a few pages
/// of the closure's own frames.
const MIN_STACK_SIZE: usize = 16 * 1024;

/// How many copies of a green thread's closure its stack must have room for: the one placed at
/// its top and those made on the way to calling it (measured: 12 in unoptimised builds, where
/// every layer between the root frame and the call moves it by value; 2 or 3 in optimised
/// ones). Stacks are committed only where touched, so the room costs address space, not
/// memory.
const CLOSURE_COPIES: usize = 16;

/// The stack size a green thread whose closure takes `closure_bytes` gets when it asks for
/// `requested` bytes: at least [`MIN_STACK_SIZE`] plus [`CLOSURE_COPIES`] times the closure,
/// so that a spawn neither fails nor overflows for a closure its stack cannot hold.
/// [`Stack::new`] then rounds it up to whole pages. The one rule for both
/// [`thread::Builder`](crate::thread::Builder) and the runtime's default.
///
/// # Errors
/// [`io::ErrorKind::InvalidInput`] for a size of 0.
#[inline]
pub(crate) fn green_stack_size(requested: usize, closure_bytes: usize) -> io::Result<usize> {
    if requested == 0 {
        return Err(zero_stack_size());
    }
    let needed = MIN_STACK_SIZE.saturating_add(closure_bytes.saturating_mul(CLOSURE_COPIES));
    Ok(requested.max(needed))
}

#[cold]
fn zero_stack_size() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "a green thread's stack size must be greater than zero (sizes below 16 KiB are rounded \
         up to 16 KiB; the default is 256 KiB)",
    )
}
