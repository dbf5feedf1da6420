//! The runtime: a single-thread scheduler with an epoll reactor and timers, on which green
//! threads run.
//!
//! Layout: `scheduler` (ready queue, the loop, `park`, deadlock detection, shutdown), `task`
//! (a green thread as the scheduler sees it), `timer` (deadline heap), `reactor` (epoll and
//! per-fd readiness), `offload` (running a blocking call on another OS thread while the green
//! thread parks). The public face is [`run`], [`Runtime`] and [`Builder`]; green threads
//! themselves are in [`crate::thread`], sockets in [`crate::net`].

pub mod offload;
pub(crate) mod reactor;
pub(crate) mod scheduler;
pub(crate) mod task;
mod timer;

use std::io;

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
}

impl Runtime {
    /// A runtime with the default settings.
    pub fn new() -> Runtime {
        Runtime {
            stack_size: Stack::DEFAULT_SIZE,
        }
    }

    /// Configures a runtime.
    pub fn builder() -> Builder {
        Builder {
            stack_size: Stack::DEFAULT_SIZE,
        }
    }

    /// Runs `main` as the first green thread, as [`run`] does, with this configuration.
    pub fn run<T: 'static>(&self, main: impl FnOnce() -> T + 'static) -> T {
        scheduler::run_main(self.stack_size, main)
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
}

impl Builder {
    /// The stack size of green threads spawned without
    /// [`thread::Builder::stack_size`](crate::thread::Builder::stack_size), and of the main
    /// green thread. Default: [`Stack::DEFAULT_SIZE`] (256 KiB), whose stacks are pooled.
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = bytes;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a stack size of 0.
    pub fn build(self) -> io::Result<Runtime> {
        if self.stack_size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the runtime's stack size must be greater than zero",
            ));
        }
        Ok(Runtime {
            stack_size: self.stack_size,
        })
    }
}
