//! Green threads, in the shape of `std::thread`: [`spawn`], [`Builder`], [`JoinHandle`],
//! [`sleep`], [`yield_now`], [`current`], [`park`] and [`park_timeout`] with
//! [`Thread::unpark`], and [`scope`], whose green threads may borrow from the caller (they all
//! end before `scope` returns).
//!
//! Every function here must be called from a green thread, that is, inside
//! [`greenweave::run`](crate::run); outside one it panics with a message that says so. The
//! exceptions are [`park`] and [`park_timeout`], which are std's there, and
//! [`Thread::unpark`], callable from any OS thread.
//!
//! A green thread runs until it parks: on a socket that would block, a [`sleep`], a
//! [`JoinHandle::join`], a [`yield_now`]. Then the scheduler runs the next ready one on the same
//! OS thread. Green threads never move to another OS thread, so nothing here needs `Send`;
//! in a runtime with several workers (see `runtime::Builder::workers`), [`spawn_on`] starts a
//! green thread on another worker from a `Send` closure, with a `Send` [`RemoteJoinHandle`].
//!
//! A green thread whose calls never have to wait still lets the others run: every green I/O
//! call (a read, a write, an accept, a connect) and every green synchronisation call that may
//! park (a channel's `recv`, a lock, a [`JoinHandle::join`]) spends a unit of a budget of 128,
//! which the scheduler refills each time it resumes the green thread, as tokio's cooperative
//! budget. When it is spent, the next such call first lets the green threads waiting for I/O,
//! timers or a turn run (a yield: a cancellation point), then does its work. So a loop of
//! connects to a listener on the same OS thread, of accepts that keep failing, or of reads that
//! always find data cannot starve the others. `try_` calls (`try_recv`, `try_lock`...), an
//! unbounded channel's `send` and the calls of a socket the program made non-blocking
//! (`set_nonblocking(true)`) never yield.
//!
//! # Green-thread-local storage
//!
//! [`green_local!`](crate::green_local) declares statics with one value per green thread
//! ([`LocalKey`], with the methods of std's): made on first use in each green thread, dropped
//! when it ends. **std's `thread_local!` is per OS thread: every green thread of an OS thread
//! shares its one value**, so state that belongs to a request or a connection (a current user, a
//! trace id, a buffer borrowed across a park) needs `green_local!`. `thread_local!` stays right
//! for what any green thread may share (a cache, a counter of the OS thread's work). Outside any
//! green thread a `green_local!` key has one value per OS thread, so library code that uses one
//! works in and out of a runtime.
//!
//! ```
//! use std::cell::Cell;
//!
//! thread_local! {
//!     static SHARED: Cell<u32> = const { Cell::new(0) };
//! }
//! greenweave::green_local! {
//!     static OWN: Cell<u32> = const { Cell::new(0) };
//! }
//!
//! greenweave::run(|| {
//!     let other = greenweave::spawn(|| {
//!         SHARED.set(1);
//!         OWN.set(1);
//!     });
//!     other.join().unwrap();
//!     assert_eq!(SHARED.get(), 1); // the other green thread's write, on the same OS thread
//!     assert_eq!(OWN.get(), 0); // this green thread's own value
//! });
//! ```

use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::budget;
use crate::runtime::parker::Parker;
use crate::runtime::scheduler::{self, Cancelled, with_scheduler};
use crate::runtime::task::{Joiner, Task, TaskState, Wait, Wake};
use crate::stack::{Stack, pool};

mod background;
mod join_future;
pub(crate) mod park;
mod remote;
mod scope;
mod select;

pub use crate::runtime::locals::{AccessError, LocalKey};
pub use background::Background;
pub use park::{park, park_timeout};
pub use remote::{RemoteJoinHandle, spawn_on};
pub use scope::{Scope, ScopedJoinHandle, scope};

/// Spawns a green thread running `f` with the runtime's default stack, and returns a handle to
/// join it.
///
/// # Panics
/// Outside a runtime, or if no stack can be mapped ([`Builder::spawn`] returns that error
/// instead).
///
/// # Examples
///
/// ```
/// greenweave::run(|| {
///     let handle = greenweave::spawn(|| "hello from a green thread");
///     assert_eq!(handle.join().unwrap(), "hello from a green thread");
/// });
/// ```
pub fn spawn<T: 'static>(f: impl FnOnce() -> T + 'static) -> JoinHandle<T> {
    Builder::new()
        .spawn_named("greenweave::spawn", f)
        .unwrap_or_else(|error| {
            panic!("greenweave::spawn: could not create a green thread: {error}")
        })
}

/// Spawns a green thread that sleeps for `delay` and then runs `f`.
///
/// ```
/// use std::time::{Duration, Instant};
///
/// greenweave::run(|| {
///     let start = Instant::now();
///     let later = greenweave::thread::spawn_after(Duration::from_millis(10), || 7);
///     assert_eq!(later.join().unwrap(), 7);
///     assert!(start.elapsed() >= Duration::from_millis(10));
/// });
/// ```
pub fn spawn_after<T: 'static>(delay: Duration, f: impl FnOnce() -> T + 'static) -> JoinHandle<T> {
    spawn(move || {
        sleep(delay);
        f()
    })
}

/// Settings for a new green thread: a name and a stack size, as `std::thread::Builder`.
///
/// ```
/// greenweave::run(|| {
///     let handle = greenweave::thread::Builder::new()
///         .name("worker".into())
///         .stack_size(64 * 1024)
///         .spawn(|| greenweave::thread::current().name().map(str::to_owned))
///         .unwrap();
///     assert_eq!(handle.join().unwrap().as_deref(), Some("worker"));
/// });
/// ```
#[derive(Debug, Default)]
#[must_use = "must eventually spawn the green thread"]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
}

impl Builder {
    /// Default settings: unnamed, the runtime's stack size.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Names the green thread (shown in panics' deadlock reports and by [`current`]).
    pub fn name(mut self, name: String) -> Builder {
        self.name = Some(name);
        self
    }

    /// The green thread's usable stack size in bytes. Stacks of the default size come from a
    /// per-thread pool; others are mapped for this green thread.
    ///
    /// As `std::thread::Builder::stack_size` rounds up to the platform's minimum, the size is
    /// rounded up to at least 16 KiB plus 16 times the size of the closure (which is placed on
    /// the stack, and copied several times on the way to its call in unoptimised builds), and
    /// to whole pages: a green thread with a tiny stack runs, though a deep call overflows it
    /// (which aborts, see [`Stack`]). 0 is refused by [`spawn`](Builder::spawn).
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// Spawns the green thread.
    ///
    /// # Errors
    /// Those of [`Stack::new`](crate::Stack::new): `InvalidInput` for a size of 0 or one so
    /// large that the mapping size overflows (`usize::MAX`), `OutOfMemory` when the kernel
    /// refuses the mapping (often `vm.max_map_count`, or a size larger than the address space).
    ///
    /// ```
    /// greenweave::run(|| {
    ///     use greenweave::thread::Builder;
    ///
    ///     let error = Builder::new().stack_size(usize::MAX).spawn(|| ()).unwrap_err();
    ///     assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    ///     // A tiny stack is rounded up to the minimum.
    ///     let tiny = Builder::new().stack_size(1).spawn(|| 6 * 7).unwrap();
    ///     assert_eq!(tiny.join().unwrap(), 42);
    /// });
    /// ```
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn spawn<T: 'static>(self, f: impl FnOnce() -> T + 'static) -> io::Result<JoinHandle<T>> {
        self.spawn_named("greenweave::thread::Builder::spawn", f)
    }

    /// The stack for a green thread of this builder whose closure takes `closure_bytes`: the
    /// builder's size or the runtime's default, grown for the closure, from the pool when it is
    /// the default size.
    pub(crate) fn green_stack(
        &self,
        scheduler: &crate::runtime::scheduler::Scheduler,
        closure_bytes: usize,
    ) -> io::Result<Stack> {
        let requested = self.stack_size.unwrap_or(scheduler.default_stack_size);
        let size = crate::runtime::green_stack_size(requested, closure_bytes)?;
        if size == Stack::DEFAULT_SIZE {
            pool::take_default()
        } else {
            Stack::new(size)
        }
    }

    /// Panics, as `std::thread::Builder`'s spawns do, if the name has a NUL byte (std's thread
    /// names are C strings; a green thread's name is shown where std shows a thread's).
    pub(crate) fn check_name(&self) {
        if let Some(name) = self.name.as_ref().filter(|name| name.contains('\0')) {
            // std's very words: its `expect` on the C string's `NulError`.
            std::ffi::CString::new(name.as_bytes())
                .expect("thread name may not contain interior null bytes");
        }
    }

    fn spawn_named<T: 'static>(
        self,
        what: &str,
        f: impl FnOnce() -> T + 'static,
    ) -> io::Result<JoinHandle<T>> {
        self.check_name();
        with_scheduler(what, |scheduler| {
            let stack = self.green_stack(scheduler, size_of_val(&f))?;
            let body = move |task: &Task| {
                let result = run_green_body(task, f);
                // SAFETY: this task's result slot holds only an `Outcome<T>`: put here, taken by
                // its `JoinHandle<T>`.
                unsafe { task.result.put::<Outcome<T>>(result) };
            };
            let name = self.name.map(String::into_boxed_str);
            let task = scheduler.spawn_task(name, stack, body);
            Ok(JoinHandle {
                task,
                marker: PhantomData,
            })
        })
    }
}

/// What a green thread ends with, as `join` returns it; kept in its task's result slot.
type Outcome<T> = Result<T, JoinError>;

/// Why a green thread has no result: it panicked, or it was cancelled.
pub enum JoinError {
    /// The green thread panicked; this is the payload, as `std::thread::JoinHandle::join`
    /// returns it.
    Panicked(Box<dyn Any + Send + 'static>),
    /// [`JoinHandle::cancel`] unwound it (or it was still running when the runtime ended).
    Cancelled,
}

impl JoinError {
    fn from_payload(payload: Box<dyn Any + Send + 'static>) -> JoinError {
        if payload.is::<Cancelled>() {
            JoinError::Cancelled
        } else {
            JoinError::Panicked(payload)
        }
    }

    /// Whether the green thread panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panicked(_))
    }

    /// Whether the green thread was cancelled.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, JoinError::Cancelled)
    }

    /// The panic payload, if it panicked (to re-raise it with `std::panic::resume_unwind`).
    pub fn into_panic(self) -> Option<Box<dyn Any + Send + 'static>> {
        match self {
            JoinError::Panicked(payload) => Some(payload),
            JoinError::Cancelled => None,
        }
    }

    /// The panic message, if it panicked with a string (as `panic!` does).
    pub fn panic_message(&self) -> Option<&str> {
        match self {
            JoinError::Panicked(payload) => payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str)),
            JoinError::Cancelled => None,
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(_) => match self.panic_message() {
                Some(message) => write!(f, "Panicked({message:?})"),
                None => f.write_str("Panicked(..)"),
            },
            JoinError::Cancelled => f.write_str("Cancelled"),
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(_) => match self.panic_message() {
                Some(message) => write!(f, "green thread panicked: {message}"),
                None => f.write_str("green thread panicked"),
            },
            JoinError::Cancelled => f.write_str("green thread was cancelled"),
        }
    }
}

impl std::error::Error for JoinError {}

/// What every green thread's body does with the user's closure `f`: runs it (or drops it unrun
/// if the green thread was cancelled before it started), catching its panic or cancellation,
/// then drops the green thread's green-local values, before the caller publishes the result
/// (so a joiner sees what their destructors did).
pub(crate) fn run_green_body<T>(task: &Task, f: impl FnOnce() -> T) -> Result<T, JoinError> {
    let result = if task.cancelled_before_start() {
        // Cancelled before it ever ran: the closure is dropped unrun.
        drop(f);
        Err(JoinError::Cancelled)
    } else {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
            if task.state.get() == TaskState::Finished {
                // Its runtime ended without it and is force-unwinding its stack
                // (`Task::abandon`): whatever the payload, it was cancelled.
                JoinError::Cancelled
            } else {
                JoinError::from_payload(payload)
            }
        })
    };
    crate::runtime::locals::end_of_green_thread(task);
    result
}

/// An owned permission to join a green thread (wait for it and take its result).
///
/// Dropping the handle detaches the green thread: it runs on, and its result is dropped.
pub struct JoinHandle<T> {
    task: Rc<Task>,
    /// The handle stands for the result in the task's slot (variance and drop check as for
    /// an owned, mutable `Outcome<T>`).
    marker: PhantomData<Cell<Option<Outcome<T>>>>,
}

impl<T> JoinHandle<T> {
    /// Waits (parking only this green thread) for the green thread to finish and returns its
    /// result: `Ok` with its return value, `Err(JoinError::Panicked)` with its panic payload,
    /// or `Err(JoinError::Cancelled)`.
    ///
    /// A handle can outlive its runtime (returned from [`run`](crate::run), say). Every green
    /// thread has ended by the time `run` returns (finished, or cancelled at shutdown), so such
    /// a join never waits: it returns the result, or `Err(JoinError::Cancelled)` if the
    /// runtime had to give up on the green thread, inside a later runtime or outside any.
    ///
    /// # Panics
    /// If a green thread joins itself, or if it has to wait outside a runtime.
    // Always inlined, so that no frame of ours sits between the caller and the switch into
    // the scheduler (a mispredicted return on every join: 77 -> 53 ns per spawn+join).
    #[inline(always)]
    pub fn join(self) -> Result<T, JoinError> {
        match self.wait_for_result("JoinHandle::join", None) {
            Some(result) => result,
            None => unreachable!("a wait with no deadline ends only with the result"),
        }
    }

    /// Waits, as [`join`](JoinHandle::join) does, but at most `timeout`: if the green thread
    /// is still running then, the handle comes back as `Err`, still joinable, so nothing is
    /// lost (with `time::timeout(d, || handle.join())` the handle is consumed and the result
    /// dropped when the timeout wins). A result that arrives in the same turn as the deadline
    /// is returned, not reported as a timeout.
    ///
    /// # Panics
    /// As [`join`](JoinHandle::join).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::thread;
    ///
    /// greenweave::run(|| {
    ///     let slow = greenweave::spawn(|| {
    ///         thread::sleep(Duration::from_millis(200));
    ///         7
    ///     });
    ///     let slow = slow
    ///         .join_timeout(Duration::from_millis(1))
    ///         .expect_err("still sleeping");
    ///     assert_eq!(slow.join().unwrap(), 7);
    /// });
    /// ```
    pub fn join_timeout(self, timeout: Duration) -> Result<Result<T, JoinError>, JoinHandle<T>> {
        let deadline = Instant::now().checked_add(timeout);
        match self.wait_for_result("JoinHandle::join_timeout", deadline) {
            Some(result) => Ok(result),
            None => Err(self),
        }
    }

    /// The wait of `join` and `join_timeout`: the green thread's result, or `None` once
    /// `deadline` has passed. After the deadline's wake-up it looks once more, so a result that
    /// arrived in the same turn is returned, not reported as a timeout.
    ///
    /// Always inlined, as `join` is: with no deadline the timeout checks fold away.
    #[inline(always)]
    fn wait_for_result(&self, what: &str, deadline: Option<Instant>) -> Option<Outcome<T>> {
        budget::spend(what);
        let mut timed_out = false;
        loop {
            // SAFETY: the body of this handle's task puts an `Outcome<T>` (`spawn_named`).
            if let Some(result) = unsafe { self.task.result.take::<Outcome<T>>() } {
                return Some(result);
            }
            if self.task.state.get() == TaskState::Finished {
                // Finished without a result: its runtime ended without it and leaked its stack
                // (`Task::abandon`). Nothing will ever put one.
                return Some(Err(JoinError::Cancelled));
            }
            if timed_out || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return None;
            }
            if with_scheduler(what, |scheduler| scheduler.is_current(&self.task)) {
                panic!("greenweave: a green thread cannot join itself (it would wait forever)");
            }
            let wake = scheduler::park(
                what,
                Wait::Join(self.task.id),
                deadline,
                None,
                |me, park| {
                    self.task.joiner.set(Some(Joiner::Green(me.clone(), park)));
                },
            );
            timed_out = deadline.is_some() && wake == Wake::TimedOut;
        }
    }

    /// Whether the green thread has finished (returned, panicked or been cancelled), so that
    /// [`join`](JoinHandle::join) will not wait.
    pub fn is_finished(&self) -> bool {
        self.task.result.is_set() || self.task.state.get() == TaskState::Finished
    }

    /// Cancels the green thread, as gevent's `kill`: at its next park point (or at once, if it
    /// is parked) it unwinds, running its destructors, and its result becomes
    /// `Err(JoinError::Cancelled)`. A green thread that has not started never runs. Does not
    /// wait; [`join`](JoinHandle::join) to wait.
    ///
    /// The cancellation is sticky: a body that catches the unwind (`catch_unwind` in a
    /// supervisor loop) meets it again at its next park point, and so on until it ends. While
    /// it unwinds the green thread does not switch: its destructors' timed waits and sleeps
    /// return at once, and an untimed wait (a lock, a join) panics, which aborts, as does a
    /// destructor that panics during the unwind (Rust's rule for any unwind).
    ///
    /// With the `hooks` feature, a green thread parked in a hooked libc call (std's sockets
    /// and sleep, a blocking client crate) cannot unwind through C frames: the call fails with
    /// `ECANCELED` (a sleep ends early) and the unwind comes at its next park in Rust code. A
    /// body that returns without parking again returns its value (typically the error), which
    /// [`join`](JoinHandle::join) gives as `Ok`; a loop that ignores those errors and never
    /// parks in Rust code is not stopped (see the `hooks` module, "Cancellation").
    ///
    /// Does nothing once the green thread has finished, which includes every green thread of a
    /// runtime that has ended (a handle used in a later runtime, or outside any).
    pub fn cancel(&self) {
        if self.task.state.get() == TaskState::Finished {
            return;
        }
        self.task.request_cancel();
        if self.task.state.get() == TaskState::Parked {
            with_scheduler("JoinHandle::cancel", |scheduler| {
                scheduler.unpark(
                    self.task.clone(),
                    self.task.park_number.get(),
                    Wake::Cancelled,
                )
            });
        }
    }

    /// The green thread's identity.
    pub fn thread(&self) -> Thread {
        Thread::of(&self.task)
    }
}

impl<T> Drop for JoinHandle<T> {
    /// Detaches the green thread: its result, now or when it finishes, is dropped.
    fn drop(&mut self) {
        self.task.result.detach();
        // After a join this is usually the task's last reference: hand the allocation back
        // for the next spawn.
        if self.task.state.get() == TaskState::Finished && scheduler::in_runtime() {
            with_scheduler("JoinHandle::drop", |scheduler| {
                scheduler.recycle(&self.task)
            });
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("thread", &self.thread())
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// A handle to a green thread, as `std::thread::Thread`: its id and name, and
/// [`unpark`](Thread::unpark), which makes its [`park`] token available.
///
/// `Send` and `Sync`, and cheap to clone (one shared allocation per green thread), so any green
/// thread of any worker, or any OS thread, may hold one and unpark with it. A handle may outlive
/// its green thread: `unpark` then does nothing.
///
/// Two handles are equal when their ids and names are.
///
/// ```
/// fn assert_send_sync<T: Send + Sync>() {}
/// assert_send_sync::<greenweave::thread::Thread>();
/// ```
#[derive(Clone)]
pub struct Thread {
    parker: Arc<Parker>,
}

impl Thread {
    pub(crate) fn of(task: &Task) -> Thread {
        Thread {
            parker: Parker::of(task),
        }
    }

    /// The id, unique within its runtime; the main green thread's is 1.
    pub fn id(&self) -> ThreadId {
        ThreadId(self.parker.id)
    }

    /// The name given with [`Builder::name`]; `Some("main")` for the main green thread.
    pub fn name(&self) -> Option<&str> {
        self.parker.name.as_deref()
    }

    /// Makes the green thread's [`park`] token available, as `std::thread::Thread::unpark`:
    /// if it is parked in [`park`] or [`park_timeout`] it wakes, and otherwise its next park
    /// returns at once. Tokens do not add up: two unparks before a park end one park.
    ///
    /// Callable from anywhere: a green thread of the same OS thread (which wakes it directly),
    /// one on another worker or any other OS thread (through its runtime's wake-up queue).
    /// Does nothing once the green thread has ended.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use greenweave::thread;
    ///
    /// greenweave::run(|| {
    ///     let parked = thread::current();
    ///     let done = Arc::new(AtomicBool::new(false));
    ///     let flag = done.clone();
    ///     // A plain OS thread unparks a green thread.
    ///     let os_thread = std::thread::spawn(move || {
    ///         flag.store(true, Ordering::Release);
    ///         parked.unpark();
    ///     });
    ///     while !done.load(Ordering::Acquire) {
    ///         thread::park();
    ///     }
    ///     os_thread.join().unwrap();
    /// });
    /// ```
    pub fn unpark(&self) {
        self.parker.unpark();
    }
}

impl fmt::Debug for Thread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Thread")
            .field("id", &self.id())
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl PartialEq for Thread {
    fn eq(&self, other: &Thread) -> bool {
        self.id() == other.id() && self.name() == other.name()
    }
}

impl Eq for Thread {}

impl std::hash::Hash for Thread {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id().hash(state);
        self.name().hash(state);
    }
}

/// A green thread's id: never 0 (ids start at 1), so an `Option<ThreadId>` is 8 bytes, as
/// std's is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId(pub(crate) NonZeroU64);

impl ThreadId {
    /// The id as a number (never 0).
    pub fn as_u64(self) -> u64 {
        self.0.get()
    }
}

/// The running green thread: a handle that any green thread or OS thread may use to
/// [`unpark`](Thread::unpark) it.
///
/// # Panics
/// Outside a runtime.
pub fn current() -> Thread {
    with_scheduler("greenweave::thread::current", |scheduler| {
        Thread::of(&scheduler.current_task())
    })
}

/// Lets every other ready green thread run, then continues. A cancellation point.
///
/// # Panics
/// Outside a runtime.
#[inline(always)]
pub fn yield_now() {
    scheduler::yield_now("greenweave::thread::yield_now");
}

/// Parks this green thread for at least `duration`; the others run meanwhile.
///
/// A zero `duration` still lets every other ready green thread run first, as [`yield_now`]
/// does (gevent's `sleep(0)`), so a loop of `sleep(Duration::ZERO)` is a cancellation point
/// and is ended by a `time::timeout`, like any other wait.
///
/// # Panics
/// Outside a runtime.
///
/// ```
/// use std::time::{Duration, Instant};
///
/// greenweave::run(|| {
///     let start = Instant::now();
///     greenweave::thread::sleep(Duration::from_millis(5));
///     assert!(start.elapsed() >= Duration::from_millis(5));
/// });
/// ```
pub fn sleep(duration: Duration) {
    match Instant::now().checked_add(duration) {
        Some(deadline) => sleep_until_named("greenweave::thread::sleep", deadline),
        // Too far to represent: park with no deadline would be reported as a deadlock, so
        // sleep in the longest steps there are.
        None => loop {
            sleep_until_named(
                "greenweave::thread::sleep",
                Instant::now() + Duration::from_secs(u32::MAX.into()),
            );
        },
    }
}

/// Parks this green thread until `deadline`. A deadline that has passed makes it yield
/// instead, as [`yield_now`] does: the others run first, and it is still a cancellation point.
///
/// # Panics
/// Outside a runtime.
pub fn sleep_until(deadline: Instant) {
    sleep_until_named("greenweave::thread::sleep_until", deadline);
}

fn sleep_until_named(what: &str, deadline: Instant) {
    // Outside a runtime this is a mistake whether or not the deadline has passed: say so every
    // time, not only when the machine happens to be fast enough to reach the park.
    with_scheduler(what, |_| ());
    if Instant::now() >= deadline {
        // No wait at all would make `loop { sleep(ZERO) }` hold the OS thread for good, deaf to
        // cancellation and to `timeout`: yield, which honours both.
        scheduler::yield_now(what);
        return;
    }
    while Instant::now() < deadline {
        // `TimedOut` is the sleep's end, or, while this green thread unwinds (it cannot park
        // then), a sleep cut short; anything else is a spurious wake-up: sleep on.
        if scheduler::park(what, Wait::Sleep, Some(deadline), None, |_, _| {}) == Wake::TimedOut {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::time::Duration;

    use crate::test_support::DropCounter;

    #[test]
    fn a_result_nobody_joins_is_dropped_when_the_detached_thread_finishes() {
        let drops = Rc::new(Cell::new(0));
        let d = drops.clone();
        let seen = crate::run(move || {
            let counter = d.clone();
            drop(super::spawn(move || DropCounter(counter)));
            super::yield_now(); // the detached thread runs and finishes
            d.get()
        });
        assert_eq!(seen, 1);
        assert_eq!(drops.get(), 1);
    }

    #[test]
    fn a_result_left_unjoined_is_dropped_with_its_handle() {
        let drops = Rc::new(Cell::new(0));
        let d = drops.clone();
        crate::run(move || {
            let counter = d.clone();
            // Larger than the inline room, so it is boxed.
            let handle = super::spawn(move || [(); 6].map(|()| DropCounter(counter.clone())));
            super::yield_now();
            assert!(handle.is_finished());
            assert_eq!(d.get(), 0);
            drop(handle);
            assert_eq!(d.get(), 6);
        });
        assert_eq!(drops.get(), 6);
    }

    #[test]
    fn a_thread_spawned_after_others_were_joined_starts_afresh() {
        crate::run(|| {
            let named = super::Builder::new()
                .name("first".into())
                .spawn(super::current)
                .unwrap();
            let first = named.join().unwrap();
            assert_eq!(first.name(), Some("first"));
            let cancelled = super::spawn(|| ());
            cancelled.cancel();
            assert!(cancelled.join().unwrap_err().is_cancelled());
            // Most likely in the allocation of one of the two above: a new id, no name, no
            // pending cancellation, and its own result.
            let next = super::spawn(|| (super::current(), 42));
            let (thread, answer) = next.join().unwrap();
            assert_ne!(thread.id(), first.id());
            assert_eq!(thread.name(), None);
            assert_eq!(answer, 42);
        });
    }

    #[test]
    fn yield_now_ends_a_timeout_scope_whose_deadline_passed() {
        crate::run(|| {
            let outcome = crate::time::timeout(Duration::from_millis(5), || {
                loop {
                    super::yield_now();
                }
            });
            assert!(outcome.is_err());
        });
    }
}
