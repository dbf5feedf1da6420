//! The runtime: a single-thread scheduler with an epoll reactor and timers, on which green
//! threads run.
//!
//! Layout: `scheduler` (ready queue, the loop, `park`, deadlock detection, shutdown), `task`
//! (a green thread as the scheduler sees it), `timer` (deadline heap), `reactor` (epoll and
//! per-fd readiness), `offload` (running a blocking call on another OS thread while the green
//! thread parks), `stall` (the stall report's watchdog, see [`Builder::stall_report`]). The
//! public face is [`run`], [`Runtime`] and [`Builder`]; green threads themselves are in
//! [`crate::thread`], sockets in [`crate::net`].

pub(crate) mod locals;
pub mod offload;
pub(crate) mod reactor;
pub(crate) mod scheduler;
mod stall;
pub(crate) mod task;
mod timer;

use std::io;
use std::time::Duration;

use crate::stack::Stack;

/// Runs `main` as the first green thread of a new runtime on the current OS thread and
/// returns its value.
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
pub fn run<T: 'static>(main: impl FnOnce() -> T + 'static) -> T {
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
    stall_report: Option<Duration>,
}

impl Runtime {
    /// A runtime with the default settings.
    pub fn new() -> Runtime {
        Runtime {
            stack_size: Stack::DEFAULT_SIZE,
            stall_report: None,
        }
    }

    /// Configures a runtime.
    pub fn builder() -> Builder {
        Builder {
            stack_size: Stack::DEFAULT_SIZE,
            stall_report: None,
        }
    }

    /// Runs `main` as the first green thread, as [`run`] does, with this configuration.
    pub fn run<T: 'static>(&self, main: impl FnOnce() -> T + 'static) -> T {
        scheduler::run_main(self.stack_size, self.stall_report, main)
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::new()
    }
}

/// Settings for a [`Runtime`].
#[derive(Debug, Clone)]
pub struct Builder {
    stack_size: usize,
    stall_report: Option<Duration>,
}

impl Builder {
    /// The stack size of green threads spawned without
    /// [`thread::Builder::stack_size`](crate::thread::Builder::stack_size), and of the main
    /// green thread. Default: [`Stack::DEFAULT_SIZE`] (256 KiB), whose stacks are pooled.
    ///
    /// As `std::thread::Builder::stack_size` rounds up to the platform's minimum, a size below
    /// 16 KiB is rounded up to 16 KiB, and every size to whole pages (and, for each green
    /// thread, to fit its closure: see `thread::Builder::stack_size`). 0 is refused by
    /// [`build`](Builder::build).
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = bytes;
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
    /// cannot):
    ///
    /// ```text
    /// greenweave: green thread 'worker' (id 3) has run for at least 112 ms without parking; a blocking call (std::sync lock, file I/O, a raw syscall, a CPU-bound loop) is holding up every green thread on this OS thread
    /// ```
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

    /// Checks the settings, mapping one stack of the configured size to be sure one can be
    /// (so that [`Runtime::run`] does not fail for a size this could have refused).
    ///
    /// # Errors
    /// Those of [`Stack::new`]: [`io::ErrorKind::InvalidInput`] for a stack size of 0 or one so
    /// large that the mapping size overflows, [`io::ErrorKind::OutOfMemory`] if the kernel
    /// refuses the mapping (a size larger than the address space, for one).
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
        Ok(Runtime {
            stack_size: probe.size(),
            stall_report: self.stall_report,
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
