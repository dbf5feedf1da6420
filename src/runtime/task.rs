//! A green thread as the scheduler sees it: a coroutine plus the state of its current park.
//!
//! Owns: `Task` (id, table slot, name, coroutine, park bookkeeping, cancellation flag, joiner)
//! and the vocabulary of parking: why a task waits ([`Wait`]), what it hands the scheduler when
//! it switches out ([`Suspend`], with a [`ParkRequest`] to arm once that switch completes), and
//! why it was woken ([`Wake`]).
//!
//! May not: run the scheduler loop or touch the reactor; that is `scheduler`.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::fmt;
use std::mem::{self, MaybeUninit};
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use super::parker::Parker;
use super::stack_release::StackWatch;
use crate::arch::StackPointer;
use crate::coroutine::{Coroutine, Yielder};
use crate::greenlet::World;
use crate::stack::frames::SavedFrames;

use super::locals::TableHome;
use super::reactor::{Interest, ScheduledIo};

/// The cache line size assumed by the scheduler's prefetches (64 bytes on the x86_64 and
/// aarch64 cores we run on; a wrong guess only makes a hint less useful).
const CACHE_LINE: usize = 64;

/// Lines of a task record prefetched ahead of its turn: the record's first 144 bytes, what a
/// switch and a park read (see [`Task`]), lie within three lines from its start.
const RECORD_LINES_PREFETCHED: usize = 3;

/// At most this many lines from a suspended task's saved stack pointer are prefetched ahead of
/// its turn: the saved registers (24 bytes on x86_64, 32 on aarch64) and the frames a resume
/// returns through. A green thread parked in a socket read resumes through about 700 bytes of
/// frames (the switch, `Source::park_until`, `Source::do_io`, the `Read` impl) before its own
/// code; a yield, about 312 bytes, all there is up to its stack's top. The lines stop at the
/// top (`Coroutine::resume_window`): past it lies the next mapping, often a neighbouring
/// stack's guard region, which no translation is cached for.
const RESUME_LINES_PREFETCHED: usize = 12;

/// How many lines to prefetch from a resume window of `bytes` (`Coroutine::resume_window`):
/// only lines that start inside it, so a frame parked close to its stack's top (a yield, a
/// sleep) gets fewer than [`RESUME_LINES_PREFETCHED`].
#[inline(always)]
fn resume_lines(bytes: usize) -> usize {
    bytes.div_ceil(CACHE_LINE).min(RESUME_LINES_PREFETCHED)
}

/// Prefetches `lines` cache lines from `start` on.
#[inline(always)]
fn prefetch_lines(start: usize, lines: usize) {
    for line in 0..lines {
        crate::arch::prefetch(start + line * CACHE_LINE);
    }
}

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
    /// thread (or by a remote sender, which the scheduler counts separately); `address` tells
    /// one primitive from another (0: not known), for `runtime::dump`.
    Sync {
        what: &'static str,
        address: usize,
    },
    /// `thread::scope` waiting for `running` green threads spawned in it to end; `scope` is the
    /// address of the scope's record, which each of them has as its [`Task::scope`] (for
    /// `runtime::dump`'s wait-for edges).
    Scope {
        running: usize,
        scope: usize,
    },
    /// A `sync::select` over several operations at once.
    Select(SelectWait),
    /// Joining a `thread::spawn_on` green thread on worker `worker` of the same runtime: woken
    /// by a job from that worker, which the runtime-wide deadlock verdict counts. Its id is in
    /// the handle's cell at `green_thread` (0 until that worker has spawned it), which lives at
    /// least as long as this park (the parked green thread borrows the handle); read only by
    /// `runtime::dump`.
    OtherWorker {
        worker: usize,
        green_thread: *const AtomicU64,
    },
    /// An end of a `sync::shared` channel: the other end is `Send` and may be on another OS
    /// thread, so another OS thread may end this wait (a send, a receive, the other end's
    /// drop).
    Shared(&'static str),
    /// A futex word at this address (the `hooks` feature's `syscall(SYS_futex)`: a std or
    /// parking_lot lock, condvar, `Once`, channel or `thread::park`): any OS thread may wake it.
    #[cfg_attr(not(feature = "hooks"), allow(dead_code))]
    Futex(usize),
    /// `thread::park` with no deadline: woken by `Thread::unpark`, from any green thread or OS
    /// thread that holds a handle (the scheduler asks the task whether one may be out).
    Park,
    /// A green lock (`sync::Mutex`, the write side of `sync::RwLock`) named `what`, whose
    /// holder's id (0: nobody yet, or readers) is kept in the cell at `holder`: the lock's own,
    /// which lives at least as long as this park (the parked green thread borrows the lock).
    /// Read only on the lock's worker, by `runtime::dump`.
    Lock {
        what: &'static str,
        holder: *const Cell<u64>,
    },
    /// `greenweave::block_on`, waiting for the future of this type (its `type_name`) to wake
    /// it: its waker is `Send`, and a tokio timer or socket, another OS thread or another green
    /// thread may hold it.
    Future(&'static str),
}

/// What a parked `select` waits for, in one `Copy` word or two for the deadlock report: how
/// many operations of each kind, and the first join and fd by name. Counts saturate at 255.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SelectWait {
    pub(crate) receives: u8,
    pub(crate) sends: u8,
    pub(crate) joins: u8,
    pub(crate) fds: u8,
    /// The id of the first green thread joined.
    pub(crate) first_join: u64,
    /// The first fd waited on, and for what.
    pub(crate) first_fd: Option<(RawFd, Interest)>,
    /// Whether an operation may be made ready by another OS thread (`sync::shared`).
    pub(crate) other_threads: bool,
}

impl fmt::Display for SelectWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |count: u8| if count == 1 { "" } else { "s" };
        let mut parts = Vec::new();
        if self.receives > 0 {
            parts.push(format!(
                "a receive on {} channel{}",
                self.receives,
                plural(self.receives)
            ));
        }
        if self.sends > 0 {
            parts.push(format!(
                "a send on {} channel{}",
                self.sends,
                plural(self.sends)
            ));
        }
        if self.joins > 0 {
            let more = self.joins - 1;
            parts.push(match more {
                0 => format!("green thread {} to finish", self.first_join),
                _ => format!(
                    "green thread {} (or {more} more) to finish",
                    self.first_join
                ),
            });
        }
        if let Some((fd, interest)) = self.first_fd {
            let more = self.fds - 1;
            parts.push(match more {
                0 => format!("fd {fd} to be {interest}"),
                _ => format!("fd {fd} to be {interest} (or {more} more fds)"),
            });
        }
        if parts.is_empty() {
            return f.write_str("in a select with nothing to wait for");
        }
        write!(f, "in a select, waiting for {}", parts.join(", or "))
    }
}

impl Wait {
    /// Whether something other than a green thread (a timer, the kernel, another OS thread)
    /// could end this wait, given whether it has a deadline.
    pub(crate) fn can_end_by_itself(&self, has_deadline: bool) -> bool {
        has_deadline
            || matches!(
                self,
                Wait::Sleep
                    | Wait::Io { .. }
                    | Wait::Remote(_)
                    | Wait::Shared(_)
                    | Wait::Futex(_)
                    | Wait::Future(_)
            )
            || matches!(self, Wait::Select(select) if select.fds > 0 || select.other_threads)
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Sleep => write!(f, "sleeping"),
            Wait::Io { fd, interest } => write!(f, "waiting for fd {fd} to be {interest}"),
            Wait::Join(id) => write!(f, "joining green thread {id}"),
            Wait::Remote(what) => write!(f, "waiting for {what} on another OS thread"),
            Wait::Sync { what, .. } => write!(f, "waiting on {what}"),
            Wait::Scope { running: 1, .. } => write!(
                f,
                "waiting in thread::scope for 1 green thread spawned in it"
            ),
            Wait::Scope { running, .. } => write!(
                f,
                "waiting in thread::scope for {running} green threads spawned in it"
            ),
            Wait::Select(select) => select.fmt(f),
            Wait::OtherWorker { worker, .. } => {
                write!(f, "joining a green thread spawned on worker {worker}")
            }
            Wait::Shared(what) => write!(
                f,
                "waiting on {what}, whose other end may be on another OS thread"
            ),
            Wait::Futex(address) => write!(
                f,
                "waiting on the futex at {address:#x} (a std or parking_lot lock, condvar, \
                 channel or thread::park), which any OS thread may wake"
            ),
            Wait::Park => write!(f, "in greenweave::thread::park, until a Thread::unpark"),
            Wait::Lock { what, .. } => write!(f, "waiting on {what}"),
            Wait::Future(type_name) => {
                write!(
                    f,
                    "in greenweave::block_on, waiting on a future of type {type_name}"
                )
            }
        }
    }
}

/// What a green thread hands the scheduler when it switches out: the value its coroutine
/// suspends with (one word, so it travels cheaply). `Copy`, so that the yield's message can be
/// a static that every yield sends.
#[derive(Clone, Copy)]
pub(crate) enum Suspend {
    /// `yield_now`: back to the end of the ready queue, nothing to arm.
    Yield,
    /// A park: arm this, now that the switch out has completed. The request lives in the
    /// parking green thread's `park` frame, which stays alive (suspended in that park) at
    /// least until the scheduler has armed it, right after the switch; so does what it
    /// borrows (the lifetime is erased here, not extended).
    Park(NonNull<ParkRequest<'static>>),
}

/// What a parking task asks the scheduler to arm after its switch out has completed.
pub(crate) struct ParkRequest<'a> {
    pub(crate) wait: Wait,
    pub(crate) deadline: Option<Instant>,
    /// The fd's readiness to wait on, borrowed from `park`'s caller (no count per park).
    pub(crate) io: Option<&'a ScheduledIo>,
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
/// what the scheduler should do with it.
pub(crate) type TaskCoroutine = Coroutine<Wake, Suspend, ()>;

/// A compacted green thread's coroutine, taken out of its task while its live frames are on
/// the heap and its stack's pages are given back (`runtime::compaction`).
pub(crate) struct CompactedCoroutine {
    pub(crate) coroutine: TaskCoroutine,
    pub(crate) frames: SavedFrames,
}

/// Who waits for a green thread to finish.
pub(crate) enum Joiner {
    /// A green thread in `join` (or a `select` with a join), in park number `.1`.
    Green(Rc<Task>, u64),
    /// A task awaiting the `JoinHandle` as a future.
    Future(std::task::Waker),
}

/// How code outside the scheduler's loop (another OS thread, a remote channel) names a green
/// thread: its slot in the scheduler's task table, and its id, which tells a reused slot apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TaskKey {
    pub(crate) slot: usize,
    pub(crate) id: u64,
}

/// A green thread's record.
///
/// `repr(C)`, so the fields keep the order written: the first group is what a switch into the
/// task and back out reads (`run_task`, `yield_now`), 64 bytes that follow the `Rc`'s two
/// counts and so span two cache lines wherever the allocation starts; a park adds the second
/// group. Among 100,000 runnable green threads each of these lines is a cache miss at the
/// task's turn, and Rust's own field order spread them over five lines (issue 33, item 2).
#[repr(C)]
pub(crate) struct Task {
    // -- Read by every switch into the task and back out. --
    /// `None` once finished (the stack is recycled at once).
    pub(crate) coroutine: RefCell<Option<TaskCoroutine>>,
    /// The scheduler context that resumed the body last: where its next park or yield
    /// switches to. Kept here, in the line a switch reads anyway, rather than in the body's
    /// [`Yielder`] at the top of its stack, so that a yield touches no line there (issue 33,
    /// item 2); the yielder's own copy is brought up to date when the body ends (`spawn_task`).
    /// A placeholder, never switched to, until the body starts.
    pub(crate) resumer: Cell<StackPointer>,
    /// Its greenlets, stored here while it does not run (installed by `run_task` while it
    /// does); empty unless it has used greenlets.
    pub(crate) greenlets: World,
    pub(crate) state: Cell<TaskState>,
    pub(crate) wake: Cell<Wake>,
    /// What the next park or yield must look at before it switches, in one byte so that a
    /// park tests all with one load: [`Task::CANCEL`] (set by `JoinHandle::cancel` or
    /// shutdown, and never cleared while the body runs: every park raises the cancellation
    /// until the green thread ends), [`Task::STALL_WATCHED`] (the stall report is on: the
    /// park says whether the run it ends was reported as a stall) and [`Task::IN_SCOPE`] (a
    /// `time::timeout` deadline is in force: `scope_deadline` is `Some`).
    pub(crate) attention: Cell<u8>,

    // -- Read or written by every park. --
    /// Counts parks; wake-ups and timer entries name the park they are for.
    pub(crate) park_number: Cell<u64>,
    /// Set while parked: what it waits for and whether it has a deadline.
    pub(crate) waiting: Cell<Option<(Wait, bool)>>,
    /// When its current park began, to the scheduler's coarse clock (`runtime::dump`); set
    /// with `waiting`, meaningful only while that is `Some`.
    pub(crate) parked_since: Cell<Option<Instant>>,
    /// The deadline of its current park, if any (for `runtime::dump`); as `parked_since`.
    pub(crate) parked_until: Cell<Option<Instant>>,
    /// Its coroutine and live frames while it is compacted (`runtime::compaction`): its
    /// stack's pages are then given back, and `coroutine` is `None`, so that `run_task`'s test
    /// for a coroutine (which it makes anyway) is what finds a compacted green thread and puts
    /// its frames back first ([`Task::restore_compacted`]); nothing is added to a wake-up or a
    /// switch.
    pub(crate) compacted: Cell<Option<Box<CompactedCoroutine>>>,
    /// How many `thread::scope`s of its own are open: while any is, green threads it spawned
    /// may borrow from its stack, and it is never compacted.
    pub(crate) lent: Cell<u32>,

    // -- The rest: read at the ends of its life, by handles, or on rarer paths. --
    /// The running body's yielder, set when the body starts. Valid while the coroutine lives.
    /// A park reads it only on its way out by unwinding.
    pub(crate) yielder: Cell<*const Yielder<Wake, Suspend>>,
    pub(crate) id: u64,
    /// Index in the scheduler's task table while the task is unfinished.
    pub(crate) slot: usize,
    pub(crate) name: Option<Box<str>>,
    /// How many times the cancellation has been raised (more than once: the body caught it).
    pub(crate) cancellations_delivered: Cell<u32>,
    /// The innermost `time::timeout` deadline in force, with the token of the `timeout` call
    /// that owns it; every park is bounded by it. Set through
    /// [`set_scope_deadline`](Task::set_scope_deadline), which keeps [`Task::IN_SCOPE`] true.
    pub(crate) scope_deadline: Cell<Option<(Instant, u64)>>,
    /// Who waits for this one to finish: a green thread in `join`, or a future's waker.
    pub(crate) joiner: Cell<Option<Joiner>>,
    /// Where the body leaves its result for the `JoinHandle`.
    pub(crate) result: ResultSlot,
    /// Its green-thread-local values (`runtime::locals`): one pointer, null until first used.
    pub(crate) locals: TableHome,
    /// The `tracing` spans it holds entered while it does not run (`runtime::trace`).
    #[cfg(feature = "tracing")]
    pub(crate) spans: super::trace::TaskSpans,
    /// What its `thread::Thread` handles share (the park token, where an unpark sends its
    /// wake-up): made when the first handle is, replaced when the task is reused.
    pub(crate) parker: RefCell<Option<Arc<Parker>>>,
    /// The id of the green thread that spawned it (0: none, spawned by the runtime itself).
    pub(crate) parent: Cell<u64>,
    /// The address of the `thread::scope` record it was spawned in (0: none), as the scope's
    /// waiter names it in `Wait::Scope`: for `runtime::dump`'s wait-for edges.
    pub(crate) scope: Cell<usize>,
    /// Set while `block_on` polls a future on this green thread, to name the mistake of a
    /// `block_on` nested inside that poll.
    pub(crate) polling_future: Cell<bool>,
    /// How deep its stack has gone and what the long-park sweep did with it
    /// (`runtime::stack_release`).
    pub(crate) stack_watch: StackWatch,
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
            resumer: Cell::new(StackPointer::placeholder()),
            state: Cell::new(TaskState::Runnable),
            park_number: Cell::new(0),
            waiting: Cell::new(None),
            wake: Cell::new(Wake::Notified),
            attention: Cell::new(0),
            cancellations_delivered: Cell::new(0),
            scope_deadline: Cell::new(None),
            joiner: Cell::new(None),
            result: ResultSlot::new(),
            greenlets: World::new(),
            locals: TableHome::new(),
            #[cfg(feature = "tracing")]
            spans: super::trace::TaskSpans::default(),
            parker: RefCell::new(None),
            parked_since: Cell::new(None),
            parked_until: Cell::new(None),
            compacted: Cell::new(None),
            lent: Cell::new(0),
            parent: Cell::new(0),
            scope: Cell::new(0),
            polling_future: Cell::new(false),
            stack_watch: StackWatch::default(),
        }
    }

    /// Makes a finished task that nothing else refers to (hence `&mut`) as new, for a spawn
    /// to reuse its allocation. Its park number keeps counting: no wake-up can name an old
    /// park, since whatever could send one held a reference.
    #[inline]
    pub(crate) fn reuse(&mut self, id: u64, slot: usize, name: Option<Box<str>>) {
        debug_assert!(self.state.get() == TaskState::Finished);
        debug_assert!(self.coroutine.get_mut().is_none() && self.joiner.get_mut().is_none());
        debug_assert!(self.greenlets.is_empty());
        self.id = id;
        self.slot = slot;
        self.name = name;
        self.yielder.set(std::ptr::null());
        self.state.set(TaskState::Runnable);
        self.waiting.set(None);
        self.wake.set(Wake::Notified);
        self.attention.set(0);
        self.cancellations_delivered.set(0);
        self.scope_deadline.set(None);
        self.scope.set(0);
        self.lent.set(0);
        self.polling_future.set(false);
        self.stack_watch.reset();
        self.result.reset();
        self.locals.reset();
        #[cfg(feature = "tracing")]
        self.spans.reset();
        // Handles of the green thread that ran in this allocation keep their own parker, whose
        // key names that thread: an unpark through one finds it gone and does nothing.
        *self.parker.get_mut() = None;
    }

    /// Whether its frames are on the heap (`runtime::compaction`).
    #[inline]
    pub(crate) fn is_compacted(&self) -> bool {
        // SAFETY: a shared read of the Cell's contents, on the task's own thread (a Task is
        // not Sync); no reference into a Cell's contents ever exists, so nothing writes it
        // during this read.
        unsafe { (*self.compacted.as_ptr()).is_some() }
    }

    /// The bytes of frames it keeps on the heap while compacted, else `None`.
    pub(crate) fn compacted_bytes(&self) -> Option<usize> {
        self.with_compacted(|compacted| compacted.frames.bytes())
    }

    /// Calls `f` with its compacted coroutine and frames, if it is compacted.
    pub(crate) fn with_compacted<T>(&self, f: impl FnOnce(&CompactedCoroutine) -> T) -> Option<T> {
        let compacted = self.compacted.take()?;
        let result = f(&compacted);
        self.compacted.set(Some(compacted));
        Some(result)
    }

    /// Puts a compacted task's frames back on its stack and its coroutine back in the task;
    /// returns whether it was compacted. Called before anything can touch its stack again:
    /// `run_task` (which finds no coroutine), its abandonment, its drop, and `runtime::dump`'s
    /// walk.
    #[inline]
    pub(crate) fn restore_compacted(&self) -> bool {
        if !self.is_compacted() {
            return false;
        }
        self.put_back_compacted();
        true
    }

    #[cold]
    #[inline(never)]
    fn put_back_compacted(&self) {
        let Some(compacted) = self.compacted.take() else {
            return;
        };
        let CompactedCoroutine { coroutine, frames } = *compacted;
        // SAFETY: the frames came from this coroutine's stack, whose context stayed
        // suspended since: the coroutine was out of the task, so nothing resumed it, and
        // nothing touches a compacted stack (`runtime::compaction`'s list).
        unsafe { frames.restore(coroutine.stack()) };
        let empty = self.coroutine.replace(Some(coroutine));
        debug_assert!(empty.is_none());
    }

    /// Prefetches this task's record: what running it reads first (state, wake, coroutine).
    #[inline(always)]
    pub(crate) fn prefetch_record(&self) {
        // The record's hot fields lie in its first lines; the rest (result, locals) is read
        // only at the ends of a green thread's life.
        prefetch_lines(self as *const Task as usize, RECORD_LINES_PREFETCHED);
    }

    /// Prefetches the register frame this task's coroutine resumes from and the frames just
    /// above it, the first stack memory a switch to it touches.
    #[inline(always)]
    pub(crate) fn prefetch_resume_frame(&self) {
        let Ok(coroutine) = self.coroutine.try_borrow() else {
            return;
        };
        if let Some((frame, bytes)) = coroutine
            .as_ref()
            .and_then(|coroutine| coroutine.resume_window())
        {
            prefetch_lines(frame, resume_lines(bytes));
        }
    }

    /// Gives up on a task whose runtime is ending while it is still unfinished (shutdown could
    /// not unwind it): marks it finished and hands its coroutine to the caller to end, by
    /// dropping it (a forced unwind) or by leaking it.
    ///
    /// From then on the task is over for everyone: a wake-up through a primitive's queue, or a
    /// `JoinHandle::cancel` from a handle that outlived the runtime (and is used in a later
    /// one), finds it finished rather than parked, so it is never queued without a coroutine;
    /// its body, if the forced unwind reaches its root, records `JoinError::Cancelled`; and a
    /// join that finds no result reports it cancelled instead of waiting for ever. Its joiner
    /// link is dropped with it (the joiner belongs to the same ended runtime).
    pub(crate) fn abandon(&self) -> Option<TaskCoroutine> {
        // Its coroutine is about to be unwound (or leaked): its frames must be in place.
        self.restore_compacted();
        self.state.set(TaskState::Finished);
        self.waiting.set(None);
        drop(self.joiner.take());
        self.coroutine.borrow_mut().take()
    }

    /// Ends a coroutine taken from this task (by `abandon`): drops it, which unwinds its
    /// stack, with the task's greenlets installed (the unwind may kill greenlets, which
    /// switches to them), or leaks it; then ends the task's greenlet world.
    pub(crate) fn end_coroutine(&self, coroutine: Option<TaskCoroutine>, leak: bool) {
        if leak {
            std::mem::forget(coroutine);
        } else {
            // The world in place (another green thread's, when a scope's owner being unwound
            // ends its children) is stored aside meanwhile.
            let outer = World::new();
            outer.leave();
            self.greenlets.enter();
            drop(coroutine);
            self.greenlets.leave();
            outer.enter();
        }
        self.greenlets.end();
    }

    /// Whether a green thread about to start should not run its body because it was cancelled
    /// first (the request stays set, as every cancellation does).
    pub(crate) fn cancelled_before_start(&self) -> bool {
        self.cancel_requested()
    }

    /// [`Task::attention`]: a cancellation was requested.
    pub(crate) const CANCEL: u8 = 1;
    /// [`Task::attention`]: the stall report is on.
    pub(crate) const STALL_WATCHED: u8 = 2;
    /// [`Task::attention`]: a `time::timeout` deadline is in force (`scope_deadline` is
    /// `Some`), so a yield must check it and a park must be bounded by it.
    pub(crate) const IN_SCOPE: u8 = 4;

    /// Sets the `time::timeout` deadline in force (or none), and [`Task::IN_SCOPE`] with it.
    pub(crate) fn set_scope_deadline(&self, scope: Option<(Instant, u64)>) {
        self.scope_deadline.set(scope);
        let attention = self.attention.get() & !Task::IN_SCOPE;
        self.attention.set(if scope.is_some() {
            attention | Task::IN_SCOPE
        } else {
            attention
        });
    }

    /// Whether a cancellation was requested (it stays requested until the green thread ends).
    #[inline]
    pub(crate) fn cancel_requested(&self) -> bool {
        self.attention.get() & Task::CANCEL != 0
    }

    /// Requests the cancellation, raised at every park from now on.
    pub(crate) fn request_cancel(&self) {
        self.attention.set(self.attention.get() | Task::CANCEL);
    }

    /// The key that names this task from outside the scheduler's loop.
    pub(crate) fn key(&self) -> TaskKey {
        TaskKey {
            slot: self.slot,
            id: self.id,
        }
    }

    /// For a task parked in `thread::park` (`Wait::Park`): whether a `thread::Thread` handle
    /// may exist through which an unpark could end the park. Two references to the parker are
    /// not handles: the task's own record of it and the parking call's. A handle kept on the
    /// parked green thread's own stack counts all the same: the answer errs on "may".
    pub(crate) fn may_be_unparked(&self) -> bool {
        self.parker
            .borrow()
            .as_ref()
            .is_some_and(|parker| Arc::strong_count(parker) > 2)
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

/// Room for a green thread's result inside its task, in words: enough for a
/// `Result<T, JoinError>` with `T` up to three words (a `String`, a `Vec`). A larger or more
/// aligned result is boxed, and the box stored here.
const INLINE_RESULT_WORDS: usize = 4;

/// Where a green thread's body leaves its result for its `JoinHandle`, inside the task, so a
/// spawn needs no allocation of its own for it. The task does not know the result's type: only
/// the spawning code does (`thread::Builder::spawn`, which puts and takes one type `V` per
/// task), and the slot keeps a function that drops what it holds.
pub(crate) struct ResultSlot {
    /// Drops the stored value in place; `Some` exactly while a value is stored.
    drop_stored: Cell<Option<unsafe fn(*mut u8)>>,
    /// No `JoinHandle` is left: a value put from now on is dropped at once.
    detached: Cell<bool>,
    storage: UnsafeCell<MaybeUninit<[usize; INLINE_RESULT_WORDS]>>,
}

impl ResultSlot {
    fn new() -> ResultSlot {
        ResultSlot {
            drop_stored: Cell::new(None),
            detached: Cell::new(false),
            storage: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Whether a `V` is stored in place (otherwise a `Box<V>` is).
    const fn fits_inline<V>() -> bool {
        mem::size_of::<V>() <= mem::size_of::<[usize; INLINE_RESULT_WORDS]>()
            && mem::align_of::<V>() <= mem::align_of::<usize>()
    }

    /// Stores `value`, or drops it now if the slot is detached.
    ///
    /// # Safety
    /// Every `put` and `take` on this slot uses the same `V`, and nothing is stored yet.
    pub(crate) unsafe fn put<V>(&self, value: V) {
        debug_assert!(self.drop_stored.get().is_none());
        if self.detached.get() {
            drop(value);
            return;
        }
        let storage = self.storage.get().cast::<u8>();
        if Self::fits_inline::<V>() {
            // SAFETY: the storage is empty (caller), and large and aligned enough for a `V`.
            unsafe { storage.cast::<V>().write(value) };
            self.drop_stored.set(Some(drop_stored_as::<V>));
        } else {
            // SAFETY: as above, for the one-word `Box<V>`.
            unsafe { storage.cast::<Box<V>>().write(Box::new(value)) };
            self.drop_stored.set(Some(drop_stored_as::<Box<V>>));
        }
    }

    /// Takes the stored value, if there is one.
    ///
    /// # Safety
    /// The value, if any, was stored by `put::<V>` with this same `V`.
    pub(crate) unsafe fn take<V>(&self) -> Option<V> {
        // Emptied first: the slot never hands out or drops one value twice.
        self.drop_stored.take()?;
        let storage = self.storage.get().cast::<u8>();
        // SAFETY: a `V` (or a `Box<V>`, as `put` chose by the same test) was stored there
        // (caller) and was not taken since (`drop_stored` was set); the slot is now empty, so
        // it is read exactly once.
        Some(unsafe {
            if Self::fits_inline::<V>() {
                storage.cast::<V>().read()
            } else {
                *storage.cast::<Box<V>>().read()
            }
        })
    }

    /// Whether a value is stored.
    pub(crate) fn is_set(&self) -> bool {
        self.drop_stored.get().is_some()
    }

    /// The `JoinHandle` is gone: drops the value stored, and any put later.
    #[inline]
    pub(crate) fn detach(&self) {
        self.detached.set(true);
        self.clear();
    }

    /// Empty and attached again, as new.
    #[inline]
    fn reset(&mut self) {
        self.clear();
        self.detached.set(false);
    }

    #[inline]
    fn clear(&self) {
        // Emptied before the drop runs, so a destructor that reaches this task sees it empty.
        if let Some(drop_stored) = self.drop_stored.take() {
            // SAFETY: `drop_stored` was set by `put` together with the value it drops, which is
            // still there (nothing took it: `take` clears `drop_stored`).
            unsafe { drop_stored(self.storage.get().cast::<u8>()) };
        }
    }
}

impl Drop for ResultSlot {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Drops the `V` at `storage`.
///
/// # Safety
/// `storage` holds a `V` that is not used again.
unsafe fn drop_stored_as<V>(storage: *mut u8) {
    // SAFETY: the caller's contract.
    unsafe { ptr::drop_in_place(storage.cast::<V>()) }
}

/// A task dropped while compacted (its runtime ended with it parked and compacted) gets its
/// frames back before its coroutine is dropped, which unwinds that stack.
impl Drop for Task {
    fn drop(&mut self) {
        self.restore_compacted();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_support::DropCounter;

    /// A result slot that only ever holds `V`, which makes `put` and `take` safe to call.
    struct TypedSlot<V> {
        slot: ResultSlot,
        marker: std::marker::PhantomData<V>,
    }

    impl<V> TypedSlot<V> {
        fn new() -> Self {
            TypedSlot {
                slot: ResultSlot::new(),
                marker: std::marker::PhantomData,
            }
        }

        fn put(&self, value: V) {
            // SAFETY: this slot only ever holds a `V`, and the tests put at most once before
            // taking.
            unsafe { self.slot.put(value) }
        }

        fn take(&self) -> Option<V> {
            // SAFETY: this slot only ever holds a `V`.
            unsafe { self.slot.take() }
        }
    }

    #[test]
    fn a_result_slot_hands_back_what_was_put_inline_or_boxed_once() {
        let small = TypedSlot::<u64>::new();
        assert!(!small.slot.is_set());
        small.put(7);
        assert!(small.slot.is_set());
        assert_eq!(small.take(), Some(7));
        assert_eq!(small.take(), None);

        let large = TypedSlot::<[u64; 16]>::new();
        assert!(!ResultSlot::fits_inline::<[u64; 16]>());
        large.put([3; 16]);
        assert_eq!(large.take(), Some([3; 16]));
        assert!(!large.slot.is_set());
    }

    #[test]
    fn a_detached_result_slot_drops_what_it_holds_and_whatever_is_put_later() {
        let drops = Rc::new(Cell::new(0));
        let slot = TypedSlot::new();
        slot.put(DropCounter(drops.clone()));
        slot.slot.detach();
        assert_eq!(drops.get(), 1);
        assert!(!slot.slot.is_set());
        slot.put(DropCounter(drops.clone()));
        assert_eq!(drops.get(), 2);
        assert!(!slot.slot.is_set());
    }

    #[test]
    fn a_result_slot_drops_an_untaken_value_inline_or_boxed_with_itself() {
        let drops = Rc::new(Cell::new(0));
        let inline = TypedSlot::new();
        inline.put(DropCounter(drops.clone()));
        let boxed = TypedSlot::new();
        assert!(!ResultSlot::fits_inline::<[DropCounter; 5]>());
        boxed.put([(); 5].map(|()| DropCounter(drops.clone())));
        drop(inline);
        assert_eq!(drops.get(), 1);
        drop(boxed);
        assert_eq!(drops.get(), 6);
    }

    /// What a switch into a task and back out reads lies in the record's first 64 bytes
    /// (after the `Rc`'s counts: two cache lines wherever the allocation starts), and what a
    /// park adds follows them.
    #[test]
    fn the_fields_a_switch_reads_are_the_first_64_bytes_of_the_record() {
        use std::mem::offset_of;
        let switch_fields = [
            offset_of!(Task, coroutine) + size_of::<RefCell<Option<TaskCoroutine>>>(),
            offset_of!(Task, resumer) + size_of::<StackPointer>(),
            offset_of!(Task, greenlets) + size_of::<World>(),
            offset_of!(Task, state) + 1,
            offset_of!(Task, wake) + 1,
            offset_of!(Task, attention) + 1,
        ];
        for end in switch_fields {
            assert!(end <= 64, "a switch-time field ends at byte {end}");
        }
        for park_field in [
            offset_of!(Task, park_number),
            offset_of!(Task, waiting),
            offset_of!(Task, parked_since),
            offset_of!(Task, parked_until),
        ] {
            // Right after the switch-time fields: 80 bytes in all (`waiting` is 40).
            assert!(
                (64..144).contains(&park_field),
                "a park field at byte {park_field}"
            );
        }
    }

    #[test]
    fn a_time_scope_sets_and_clears_its_attention_bit_without_touching_the_others() {
        let task = Task::new(1, 0, None);
        task.request_cancel();
        task.set_scope_deadline(Some((Instant::now(), 7)));
        assert_eq!(task.attention.get(), Task::CANCEL | Task::IN_SCOPE);
        task.set_scope_deadline(None);
        assert_eq!(task.attention.get(), Task::CANCEL);
        assert!(task.scope_deadline.get().is_none());
    }

    #[test]
    fn the_resume_prefetch_never_starts_a_line_past_the_window() {
        // A yield parks 312 bytes below its stack's top (x86_64): 5 lines, the last starting
        // at 256, inside; 12 lines (768 bytes) would have run 456 bytes into the next mapping.
        for bytes in [1, 24, 63, 64, 65, 312, 700, 768, 769, 4096] {
            let lines = resume_lines(bytes);
            assert!(lines >= 1);
            assert!(
                (lines - 1) * CACHE_LINE < bytes,
                "{bytes} bytes: {lines} lines"
            );
            assert!(lines == RESUME_LINES_PREFETCHED || lines * CACHE_LINE >= bytes);
        }
    }

    #[test]
    fn a_reused_task_is_as_new_with_its_new_identity() {
        let mut task = Task::new(1, 0, Some("first".into()));
        task.state.set(TaskState::Finished);
        task.request_cancel();
        task.result.detach();
        task.park_number.set(5);
        task.reuse(2, 3, None);
        assert_eq!(task.key(), TaskKey { slot: 3, id: 2 });
        assert!(task.name.is_none());
        assert_eq!(task.state.get(), TaskState::Runnable);
        assert!(!task.cancel_requested());
        assert!(task.waiting.get().is_none());
        // Attached again: a value put now is kept for the new handle.
        // SAFETY: this slot only ever holds a u8.
        unsafe { task.result.put::<u8>(1) };
        assert!(task.result.is_set());
        // Parks keep counting, so no wake-up for an old park can match a new one.
        assert_eq!(task.park_number.get(), 5);
    }
}
