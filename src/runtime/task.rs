//! A green thread as the scheduler sees it: a coroutine plus the state of its current park.
//!
//! Owns: `Task` (id, table slot, name, coroutine, park bookkeeping, cancellation flag, joiner)
//! and the vocabulary of parking: why a task waits ([`Wait`]), what it asks the scheduler to arm once
//! its switch out completes ([`ParkRequest`]), and why it was woken ([`Wake`]).
//!
//! May not: run the scheduler loop or touch the reactor; that is `scheduler`.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Instant;

use crate::coroutine::{Coroutine, Yielder};

use super::reactor::{Interest, ScheduledIo};

/// Why a parked green thread was woken; what `park` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Whatever it waited for happened (or may have: callers re-check).
    Notified,
    /// Its deadline passed first.
    TimedOut,
    /// `JoinHandle::cancel` was called, or the runtime is shutting down.
    Cancelled,
}

/// What a parked green thread waits for, for the deadlock report and to know whether anything
/// but another green thread could wake it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// `yield_now`: runnable again at once.
    Yield,
    Sleep,
    Io {
        fd: RawFd,
        interest: Interest,
    },
    /// Joining green thread number `0`.
    Join(u64),
    /// A result from another OS thread (hostname lookup, `unblock`).
    Remote(&'static str),
    /// A green synchronisation primitive (channel, lock, event...), woken by another green
    /// thread (or by a remote sender, which the scheduler counts separately).
    Sync(&'static str),
}

impl Wait {
    /// Whether something other than a green thread (a timer, the kernel, another OS thread)
    /// could end this wait, given whether it has a deadline.
    pub(crate) fn can_end_by_itself(&self, has_deadline: bool) -> bool {
        has_deadline
            || matches!(
                self,
                Wait::Yield | Wait::Sleep | Wait::Io { .. } | Wait::Remote(_)
            )
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Yield => write!(f, "yielding"),
            Wait::Sleep => write!(f, "sleeping"),
            Wait::Io { fd, interest } => write!(f, "waiting for fd {fd} to be {interest}"),
            Wait::Join(id) => write!(f, "joining green thread {id}"),
            Wait::Remote(what) => write!(f, "waiting for {what} on another OS thread"),
            Wait::Sync(what) => write!(f, "waiting on {what}"),
        }
    }
}

/// What a parking task asks the scheduler to arm after its switch out has completed.
pub(crate) struct ParkRequest {
    pub(crate) wait: Wait,
    pub(crate) deadline: Option<Instant>,
    pub(crate) io: Option<Rc<ScheduledIo>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TaskState {
    /// In the ready queue.
    Runnable,
    Running,
    Parked,
    Finished,
}

/// The coroutine type every green thread runs in: resumed with why it woke, suspending with
/// nothing (its park request is in the task).
pub(crate) type TaskCoroutine = Coroutine<Wake, (), ()>;

/// How code outside the scheduler's loop (another OS thread, a remote channel) names a green
/// thread: its slot in the scheduler's task table, and its id, which tells a reused slot apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TaskKey {
    pub(crate) slot: usize,
    pub(crate) id: u64,
}

pub(crate) struct Task {
    pub(crate) id: u64,
    /// Index in the scheduler's task table while the task is unfinished.
    pub(crate) slot: usize,
    pub(crate) name: Option<Box<str>>,
    /// `None` once finished (the stack is recycled at once).
    pub(crate) coroutine: RefCell<Option<TaskCoroutine>>,
    /// The running body's yielder, set when the body starts. Valid while the coroutine lives.
    pub(crate) yielder: Cell<*const Yielder<Wake, ()>>,
    pub(crate) state: Cell<TaskState>,
    /// Counts parks; wake-ups and timer entries name the park they are for.
    pub(crate) park_number: Cell<u64>,
    /// Set while parked: what it waits for and whether it has a deadline.
    pub(crate) waiting: Cell<Option<(Wait, bool)>>,
    /// Set by `park` just before the switch out, taken by the scheduler just after it.
    pub(crate) park_request: Cell<Option<ParkRequest>>,
    pub(crate) wake: Cell<Wake>,
    pub(crate) cancel_requested: Cell<bool>,
    /// The innermost `time::timeout` deadline in force, with the token of the `timeout` call
    /// that owns it; every park is bounded by it.
    pub(crate) scope_deadline: Cell<Option<(Instant, u64)>>,
    /// The green thread waiting in `join` for this one, with its park number.
    pub(crate) joiner: RefCell<Option<(Rc<Task>, u64)>>,
}

impl Task {
    /// A task with no coroutine yet (the scheduler launches it once the task has an address
    /// its body can refer to).
    pub(crate) fn new(id: u64, slot: usize, name: Option<Box<str>>) -> Task {
        Task {
            id,
            slot,
            name,
            coroutine: RefCell::new(None),
            yielder: Cell::new(std::ptr::null()),
            state: Cell::new(TaskState::Runnable),
            park_number: Cell::new(0),
            waiting: Cell::new(None),
            park_request: Cell::new(None),
            wake: Cell::new(Wake::Notified),
            cancel_requested: Cell::new(false),
            scope_deadline: Cell::new(None),
            joiner: RefCell::new(None),
        }
    }

    /// The key that names this task from outside the scheduler's loop.
    pub(crate) fn key(&self) -> TaskKey {
        TaskKey {
            slot: self.slot,
            id: self.id,
        }
    }

    /// Whether the task is parked in park number `park` (not woken since).
    pub(crate) fn is_in_park(&self, park: u64) -> bool {
        self.state.get() == TaskState::Parked && self.park_number.get() == park
    }

    /// The name for messages: `'name' (id N)` or `<unnamed> (id N)`.
    pub(crate) fn describe(&self) -> String {
        match &self.name {
            Some(name) => format!("'{name}' (id {})", self.id),
            None => format!("<unnamed> (id {})", self.id),
        }
    }
}
