//! Greenlets: symmetric coroutines with Python `greenlet`'s semantics, typed.
//!
//! Every OS thread has an implicit **main greenlet** (the thread's own stack); [`current`]
//! returns a handle to whichever greenlet is running. [`Greenlet::new`] makes a greenlet whose
//! **parent** is the current one. [`Greenlet::switch`] moves control to any greenlet, carrying
//! a value:
//!
//! - the first switch into a greenlet starts its `run` with the value;
//! - a later switch makes the value the return of the `switch` the greenlet is suspended in;
//! - switching to yourself returns the value at once;
//! - when `run` returns, its value goes to the **parent** (as the return of the parent's
//!   pending `switch`, or as the argument that starts an unstarted parent); switching to a
//!   dead greenlet goes to its nearest live ancestor;
//! - a panic that escapes `run` is raised again in the parent at its switch point;
//! - [`Greenlet::throw`] raises [`GreenletExit`] inside a greenlet at its switch point; if
//!   uncaught, the greenlet dies and its parent receives `T::from_greenlet_exit(GreenletExit)` as a normal
//!   value. Throwing into an unstarted greenlet kills it without running it; throwing into a
//!   dead one sends that value to its nearest live ancestor (so if that is the thrower,
//!   `throw` returns it);
//! - dropping the last handle to a suspended greenlet kills it the same way (with the dropper
//!   as its parent for the length of the kill), so every destructor on its stack runs; a
//!   greenlet that refuses (catches `GreenletExit` and switches back) gets its old parent back.
//!
//! # The type rule
//!
//! Greenlets that switch to one another exchange one message type `T`: `Greenlet<T>`'s `run`
//! takes a `T` and returns a `T`, and `switch` sends a `T` and returns the `T` that the next
//! switch back brings. `T` must be able to say "the greenlet exited", which is what a parent
//! receives from a child killed by [`GreenletExit`]: hence the bound `T: FromGreenletExit`,
//! implemented here for `()`, `Option<U>` (as `None`) and `Result<U, GreenletExit>` (as `Err`),
//! and by users for their own message enums.
//!
//! A greenlet can hold handles of another message type, but the value that arrives at a
//! switch must be of the type that switch expects; this is checked at run time, and a
//! mismatch panics in the sender before it switches.
//!
//! ```
//! use greenweave::greenlet::{self, Greenlet};
//!
//! // Values go both ways: the child receives 1, sends 2 back to main, receives 3, returns 4.
//! let child = Greenlet::new(|first: Option<u32>| {
//!     assert_eq!(first, Some(1));
//!     let main = greenlet::current::<Option<u32>>().parent().unwrap();
//!     let third = main.switch(Some(2));
//!     assert_eq!(third, Some(3));
//!     Some(4) // returning goes to the parent: main
//! });
//! assert_eq!(child.switch(Some(1)), Some(2));
//! assert_eq!(child.switch(Some(3)), Some(4));
//! assert!(child.is_dead());
//! ```
//!
//! # Inside green threads
//!
//! Inside a green thread, greenlets are the green thread's own: its stack is their main
//! greenlet, and a greenlet that sleeps, does green I/O or waits on a channel parks the green
//! thread; the wake-up resumes that greenlet, still the running one, while every other green
//! thread sees its own main and its own running greenlet:
//!
//! ```
//! use greenweave::greenlet::{self, Greenlet};
//! use std::time::Duration;
//!
//! greenweave::run(|| {
//!     let child = Greenlet::new(|x: Option<u32>| {
//!         greenweave::thread::sleep(Duration::from_millis(1)); // parks this green thread
//!         x.map(|x| x + 1)
//!     });
//!     assert_eq!(child.switch(Some(1)), Some(2));
//!     assert!(greenlet::current::<Option<u32>>().is_main());
//! });
//! ```
//!
//! A greenlet runs only where it was created: switching to (or throwing into) a greenlet of
//! another green thread, or of the OS thread outside the runtime, panics, as Python refuses a
//! switch to another thread's greenlet; dropping the last handle to such a greenlet leaks it
//! (its destructors do not run) instead of killing it, since killing is a switch. The trace
//! hook ([`set_trace`]) is per OS thread and sees every green thread's switches.
//!
//! Greenlets belong to their OS thread; a handle cannot be sent to another:
//!
//! ```compile_fail
//! let g = greenweave::greenlet::Greenlet::new(|x: ()| x);
//! std::thread::spawn(move || drop(g));
//! ```
//!
//! # No switch while unwinding
//!
//! Python keeps the exception being handled per greenlet: a greenlet switched to from an
//! `except` block has none of its own. Rust's counterpart, `std::thread::panicking()`, is kept
//! per OS thread, and no stable API saves or restores it around a switch: a greenlet switched to
//! from a destructor during an unwind would see that unwind as its own, and would run as if it
//! were unwinding (inside a green thread its timed waits would time out at once and its untimed
//! ones panic). So a greenlet does not switch while it unwinds, as a green thread does not:
//! [`switch`](Greenlet::switch) and [`throw`](Greenlet::throw) made while the thread unwinds
//! panic at once, saying why, before anything moves (in a destructor during an unwind that
//! aborts the process, as any panic escaping a destructor then does). Dropping the last handle
//! to a suspended greenlet still kills it during an unwind: the greenlet then unwinds too, so
//! `panicking()` is true for it anyway, but it cannot refuse to die, since its switch back would
//! be refused. A [`Coroutine`](crate::Coroutine) resumed from such a destructor is a call made
//! by the destructor, not a switch away from it, and may run and suspend back; a greenlet switch
//! inside it is refused the same way.
//!
//! ```
//! use greenweave::greenlet::Greenlet;
//! use std::panic::{self, AssertUnwindSafe};
//!
//! struct SwitchesOnDrop(Greenlet<()>);
//! impl Drop for SwitchesOnDrop {
//!     fn drop(&mut self) {
//!         // Refused: the greenlet would see this unwind as its own.
//!         let refused = panic::catch_unwind(AssertUnwindSafe(|| self.0.switch(())));
//!         assert!(refused.is_err());
//!     }
//! }
//! let g = Greenlet::new(|()| assert!(!std::thread::panicking()));
//! let unwound = panic::catch_unwind(AssertUnwindSafe(|| {
//!     let _guard = SwitchesOnDrop(g.clone());
//!     panic!("unwinds through a destructor that switches");
//! }));
//! assert!(unwound.is_err());
//! assert!(!g.is_started());
//! g.switch(()); // once the unwind is over, the greenlet runs and sees none
//! assert!(g.is_dead());
//! ```
//!
//! # Reference cycles
//!
//! Handles are reference-counted, and there is no cycle collector. A greenlet keeps its
//! parent alive; if the parent also keeps the greenlet (a handle on the parent's stack, say)
//! while the greenlet is suspended in a switch to it, the two form a cycle that is never
//! killed: their destructors do not run and their stacks leak. Python's collector would kill
//! both. Break such cycles explicitly: `throw()` into the child, or `set_parent` it elsewhere,
//! before dropping the last outside handle.
//!
//! # Tracing
//!
//! [`set_trace`] installs a per-thread hook called before every switch and throw with the
//! origin and target ids, as `greenlet.settrace` does. With no hook it costs one branch. A hook
//! must not switch greenlets itself (that panics), and a hook that panics is uninstalled.

use core::cell::{Cell, RefCell};
use core::fmt;
use core::marker::PhantomData;
use core::mem::{ManuallyDrop, MaybeUninit};
use core::ptr;
use std::any::{Any, TypeId, type_name};
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;

use crate::arch::{self, StackPointer, Transfer};
use crate::fiber::{self, Exit, FINISHED_TAG, Leave, Message};
use crate::overflow;
use crate::stack::{Stack, pool};

/// The payload of [`Greenlet::throw`]: the request that a greenlet finish.
///
/// A greenlet that dies of an uncaught `GreenletExit` is not an error: its parent receives
/// `T::from_greenlet_exit(GreenletExit)` from its pending switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GreenletExit;

/// A message type that can say "the greenlet exited": what a parent receives from a child
/// that died of an uncaught [`GreenletExit`]. Implement it for your own message type (an enum
/// with an `Exited` variant, say) to use it with greenlets.
pub trait FromGreenletExit {
    /// The value that stands for a child killed by `exit`.
    fn from_greenlet_exit(exit: GreenletExit) -> Self;
}

impl FromGreenletExit for () {
    fn from_greenlet_exit(_: GreenletExit) {}
}

impl<U> FromGreenletExit for Option<U> {
    fn from_greenlet_exit(_: GreenletExit) -> Self {
        None
    }
}

impl<U> FromGreenletExit for Result<U, GreenletExit> {
    fn from_greenlet_exit(exit: GreenletExit) -> Self {
        Err(exit)
    }
}

/// A greenlet's identity, stable for its life and unique on its thread; the main greenlet's
/// is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GreenletId(u64);

/// What a trace hook is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// Control moves from `origin` to `target` with a value (including a finished greenlet
    /// handing its result to its parent).
    Switch,
    /// Control moves from `origin` to `target` to raise a panic there ([`Greenlet::throw`],
    /// or a kill on drop).
    Throw,
}

/// A trace hook: `hook(event, origin, target)`, called before the switch happens.
///
/// A hook must not switch greenlets: a [`switch`](Greenlet::switch) or
/// [`throw`](Greenlet::throw) inside it, or the drop of the last handle to an unstarted or
/// suspended greenlet (which kills it by a switch), panics. The switch it was called for has
/// been checked against the state it is about to act on; letting the hook move control
/// elsewhere would invalidate that check. Record the event and act on it once the hook has
/// returned.
///
/// A hook that panics is uninstalled (as Python's `greenlet.settrace` does with a tracer that
/// raised), and the switch it was called for does not happen: the panic goes on in the sender,
/// or, for a greenlet handing its result to its parent, in the parent instead.
pub type TraceHook = fn(Event, GreenletId, GreenletId);

/// Installs `hook` as this thread's trace hook (or removes it, with `None`); returns the one it
/// replaces. It may be called from inside a hook (the change applies from the next switch).
///
/// ```
/// use greenweave::greenlet::{self, Event, Greenlet, GreenletId};
/// use std::cell::RefCell;
///
/// thread_local!(static SEEN: RefCell<Vec<(Event, GreenletId, GreenletId)>> = RefCell::new(Vec::new()));
/// fn record(event: Event, origin: GreenletId, target: GreenletId) {
///     SEEN.with(|seen| seen.borrow_mut().push((event, origin, target)));
/// }
///
/// let g = Greenlet::new(|x: ()| x);
/// greenlet::set_trace(Some(record));
/// g.switch(());
/// greenlet::set_trace(None);
/// let main = greenlet::current::<()>().id();
/// let seen = SEEN.with(|seen| seen.take());
/// assert_eq!(seen, [(Event::Switch, main, g.id()), (Event::Switch, g.id(), main)]);
/// ```
pub fn set_trace(hook: Option<TraceHook>) -> Option<TraceHook> {
    let tracing = TRACE.get();
    TRACE.set(Tracing { hook, ..tracing });
    set_current(current_or_null());
    tracing.hook
}

/// A handle to the greenlet running now on this thread (the main greenlet if no other is).
///
/// `T` is the message type this handle switches with; see the module docs for the type rule.
pub fn current<T>() -> Greenlet<T> {
    Greenlet {
        record: current_record(),
        marker: PhantomData,
    }
}

/// A handle to a greenlet. Cloning it makes another handle to the same greenlet; dropping the
/// last handle to a suspended greenlet kills it (its destructors run).
pub struct Greenlet<T> {
    record: Rc<Record>,
    /// `T` goes in and comes out; `!Send`/`!Sync` come from the `Rc`.
    marker: PhantomData<fn(T) -> T>,
}

impl<T: FromGreenletExit + 'static> Greenlet<T> {
    /// A greenlet that will run `run` when first switched to; its parent is the current
    /// greenlet. It runs on a default-size stack from this thread's pool.
    ///
    /// # Panics
    /// If no stack can be mapped; [`Greenlet::try_new`] returns that as an error instead.
    pub fn new<F>(run: F) -> Self
    where
        F: FnOnce(T) -> T + 'static,
    {
        Self::try_new(run)
            .unwrap_or_else(|error| panic!("greenweave: could not create a greenlet: {error}"))
    }

    /// Like [`Greenlet::new`], but returns an error if no stack can be mapped.
    ///
    /// # Errors
    /// Those of [`Stack::new`](crate::Stack::new).
    pub fn try_new<F>(run: F) -> io::Result<Self>
    where
        F: FnOnce(T) -> T + 'static,
    {
        Ok(Self::with_parent_and_stack(
            &current_record(),
            pool::take_default()?,
            run,
        ))
    }

    /// A greenlet that will run `run`, whose parent is `parent` instead of the current one.
    pub fn with_parent<F>(parent: &Greenlet<T>, run: F) -> Self
    where
        F: FnOnce(T) -> T + 'static,
    {
        let stack = pool::take_default()
            .unwrap_or_else(|error| panic!("greenweave: could not create a greenlet: {error}"));
        Self::with_parent_and_stack(&parent.record, stack, run)
    }

    fn with_parent_and_stack<F>(parent: &Rc<Record>, stack: Stack, run: F) -> Self
    where
        F: FnOnce(T) -> T + 'static,
    {
        let world = current_world();
        if parent.world != world {
            another_world(parent.id, "be the parent of a new greenlet");
        }
        overflow::ensure_alt_stack();
        // SAFETY: the stack is fresh or recycled and owned by this record from here on; the
        // record is started at most once and its last message is taken by `arrive`.
        let start = unsafe { fiber::launch(&stack, run, greenlet_entry::<T, F>) };
        let record = Rc::new(Record {
            id: next_id(),
            waiting: Cell::new(Some(Expected::of::<T>())),
            context: Cell::new(start),
            world,
            phase: Cell::new(Phase::Unstarted),
            parent: RefCell::new(Some(parent.clone())),
            stack: Cell::new(Some(stack)),
            kill: kill::<T>,
        });
        Greenlet {
            record,
            marker: PhantomData,
        }
    }

    /// Switches to this greenlet, sending `value`; returns the value that the next switch back
    /// to the current greenlet brings.
    ///
    /// If this greenlet has not started, `value` starts its `run`; if it is suspended, `value`
    /// becomes the return of its pending `switch`; if it is dead, the switch goes to its
    /// nearest live ancestor; if it is the current greenlet, `value` is returned at once.
    ///
    /// # Panics
    /// Re-raises a panic delivered to this switch point: a child's panic that escaped its
    /// `run`, or a [`throw`](Greenlet::throw) aimed at the current greenlet. Also panics if the
    /// target is suspended in a switch that expects another message type, if called inside a
    /// trace hook (see [`TraceHook`]), or if called while the thread unwinds and control would
    /// move to another greenlet (see [No switch while unwinding](self#no-switch-while-unwinding)).
    #[inline]
    pub fn switch(&self, value: T) -> T {
        transfer(
            &self.record,
            Payload::Value(value),
            Event::Switch,
            Unwinding::Refuse,
        )
    }

    /// Raises [`GreenletExit`] in this greenlet at its switch point (see
    /// [`throw_with`](Greenlet::throw_with)). Into a dead greenlet whose nearest live ancestor
    /// is the current one, it returns `T::from_greenlet_exit(GreenletExit)` at once, as
    /// Python's `throw` returns the `GreenletExit`:
    ///
    /// ```
    /// use greenweave::greenlet::{Greenlet, GreenletExit};
    ///
    /// let g = Greenlet::new(|x: Result<u32, GreenletExit>| x);
    /// assert_eq!(g.switch(Ok(1)), Ok(1));
    /// assert!(g.is_dead());
    /// assert_eq!(g.throw(), Err(GreenletExit));
    /// ```
    pub fn throw(&self) -> T {
        self.throw_with(Box::new(GreenletExit))
    }

    /// Switches to this greenlet and makes its pending `switch` panic with `payload`; returns
    /// the value that the next switch back to the current greenlet brings.
    ///
    /// If the greenlet does not catch the panic it dies, and the panic goes on to its parent
    /// (a `GreenletExit` payload arrives there as `T::from_greenlet_exit(GreenletExit)`, not as a panic).
    /// An unstarted greenlet dies without running. A dead one hands the payload on to its
    /// nearest live ancestor (right here, if that is the current greenlet) as a greenlet dying
    /// of it would: a `GreenletExit` as the value `T::from_greenlet_exit(GreenletExit)`, any
    /// other payload as a panic.
    ///
    /// # Panics
    /// Re-raises a panic delivered to this switch point, as [`switch`](Greenlet::switch) does;
    /// also panics if a `GreenletExit` turned into a value goes to a greenlet suspended in a
    /// switch that expects another message type, if called inside a trace hook, or if called
    /// while the thread unwinds and control would move to another greenlet.
    pub fn throw_with(&self, payload: Box<dyn Any + Send>) -> T {
        transfer(
            &self.record,
            Payload::Panic(payload),
            Event::Throw,
            Unwinding::Refuse,
        )
    }
}

impl<T> Greenlet<T> {
    /// The parent: where this greenlet's result (or escaped panic) goes when `run` ends.
    /// `None` only for a main greenlet.
    pub fn parent(&self) -> Option<Greenlet<T>> {
        let parent = self.record.parent.borrow().clone()?;
        Some(Greenlet {
            record: parent,
            marker: PhantomData,
        })
    }

    /// Makes `parent` this greenlet's parent.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if that would make a cycle (`parent` is this greenlet
    /// or one of its descendants), or if this is a main greenlet, which has no parent.
    pub fn set_parent(&self, parent: &Greenlet<T>) -> io::Result<()> {
        if self.record.is_main() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the main greenlet cannot have a parent",
            ));
        }
        if parent.record.world != self.record.world {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cannot make greenlet {} the parent of greenlet {}: they belong to different \
                     green threads (or OS threads), and a greenlet only ever runs in its own",
                    parent.record.id.0, self.record.id.0
                ),
            ));
        }
        let mut ancestor = Some(parent.record.clone());
        while let Some(record) = ancestor {
            if Rc::ptr_eq(&record, &self.record) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "cannot make greenlet {} the parent of greenlet {}: it is a descendant of it (or it \
                         itself), and a parent chain must not form a cycle",
                        parent.record.id.0, self.record.id.0
                    ),
                ));
            }
            ancestor = record.parent.borrow().clone();
        }
        let previous = self.record.parent.replace(Some(parent.record.clone()));
        release(previous);
        Ok(())
    }

    /// This greenlet's id.
    pub fn id(&self) -> GreenletId {
        self.record.id
    }

    /// Whether `run` has been entered (always true for a main greenlet).
    pub fn is_started(&self) -> bool {
        !matches!(self.record.state(), State::Unstarted)
    }

    /// Whether `run` has ended (returned, panicked or been killed). A main greenlet never dies.
    pub fn is_dead(&self) -> bool {
        matches!(self.record.state(), State::Dead)
    }

    /// Started and not dead.
    pub fn is_active(&self) -> bool {
        self.is_started() && !self.is_dead()
    }

    /// Whether this is the main greenlet of its thread.
    pub fn is_main(&self) -> bool {
        self.record.is_main()
    }
}

impl<T> Clone for Greenlet<T> {
    fn clone(&self) -> Self {
        Greenlet {
            record: self.record.clone(),
            marker: PhantomData,
        }
    }
}

impl<T> PartialEq for Greenlet<T> {
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.record, &other.record)
    }
}

impl<T> Eq for Greenlet<T> {}

impl<T> fmt::Debug for Greenlet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.record.state() {
            State::Unstarted => "unstarted",
            State::Running => "running",
            State::Suspended => "suspended",
            State::Dead => "dead",
        };
        f.debug_struct("Greenlet")
            .field("id", &self.record.id.0)
            .field("state", &state)
            .finish()
    }
}

impl<T> Drop for Greenlet<T> {
    fn drop(&mut self) {
        kill_if_last(&self.record);
    }
}

/// The type-erased state of one greenlet, shared by its handles and its children (as parent).
///
/// **The self count.** A started greenlet that has not finished owns one strong count of its
/// own record (taken in `greenlet_entry`; the main greenlet's is `MAIN`'s), so that a switch
/// moves no counts: the running greenlet and a suspended sender are kept alive by their own.
/// It is given up when the greenlet's last message is received (`release_finished`), or when
/// a kill is refused and nothing else refers to the greenlet (`kill`). So a suspended greenlet
/// that nobody else refers to has a strong count of exactly 1 (the receiver of its switch
/// kills it then: `sender_suspended`), an unstarted one of 0.
///
/// **The state** is three fields. `waiting`, which a switch reads and writes, is `Some` exactly
/// when the greenlet is suspended or unstarted, with the message type its pending switch (or
/// its `run`) takes: so one comparison tells a switch that its target can take its value now.
/// The sender of a switch sets its own `waiting` and clears the target's; the receiver writes
/// the sender's `context`, which only it learns. `phase` (unstarted, started, dead) changes
/// once or twice in a greenlet's life. [`Record::state`] puts them together.
///
/// `#[repr(C)]` with the fields a switch touches first, so that they and the strong count that
/// `arrive` reads are the first 32 bytes of the allocation.
#[repr(C)]
struct Record {
    /// The message type its pending switch (or its unstarted `run`) takes; `None` while it
    /// runs, and once it is dead.
    waiting: Cell<Option<Expected>>,
    /// Where to switch to resume it (a fresh frame if unstarted): valid while `waiting` is
    /// `Some`, except between its own switch away and the receiver's `arrive`, which nothing
    /// else runs in.
    context: Cell<StackPointer>,
    /// The main greenlet of the world it belongs to (itself, for a main greenlet): a switch
    /// goes only between greenlets of one world (see [`World`]). Alive while this record is:
    /// every record's parent chain ends at its world's main.
    world: *const Record,
    phase: Cell<Phase>,
    id: GreenletId,
    /// `None` only for the main greenlet.
    parent: RefCell<Option<Rc<Record>>>,
    /// `None` for the main greenlet, and once a dead greenlet's stack is recycled.
    stack: Cell<Option<Stack>>,
    /// Kills this greenlet (a throw of GreenletExit, typed for its `run`); a no-op for main.
    kill: fn(&Rc<Record>),
}

impl Record {
    fn is_main(&self) -> bool {
        self.id.0 == 0
    }

    /// What it is doing, from `phase` and `waiting`.
    fn state(&self) -> State {
        match (self.phase.get(), self.waiting.get()) {
            (Phase::Dead, _) => State::Dead,
            (_, None) => State::Running,
            (Phase::Unstarted, Some(_)) => State::Unstarted,
            (Phase::Started, Some(_)) => State::Suspended,
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(stack) = self.stack.take() {
            match self.state() {
                // Never started: only the unrun closure is on it, and it is leaked with it.
                // Suspended: frames are live (a kill was refused), so the memory must stay.
                State::Unstarted | State::Suspended => core::mem::forget(stack),
                State::Running | State::Dead => pool::recycle(stack),
            }
        }
        release(self.parent.get_mut().take());
    }
}

/// What a greenlet is doing (see [`Record::state`]).
#[derive(Clone, Copy, Debug)]
enum State {
    Unstarted,
    Running,
    Suspended,
    Dead,
}

/// The part of a greenlet's state that changes at most twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// `run` has not been entered.
    Unstarted,
    /// Entered (set by `greenlet_entry` first thing), or a main greenlet.
    Started,
    /// `run` has ended.
    Dead,
}

/// A message type, for the run-time check at a switch: the address of [`describe::<T>`], so
/// that the check on the fast path is one comparison of words.
///
/// Equal addresses mean the same type: one address is one function, which returns
/// `TypeId::of::<T>()` (were two types' functions merged into one, it would return one
/// `TypeId` for both, which `TypeId` rules out). Unequal addresses do not mean different
/// types: each crate that instantiates `describe::<T>` may have its own copy, so then the
/// `TypeId`s decide ([`Expected::is`]), on the slow path of a switch.
#[derive(Clone, Copy, Debug)]
struct Expected(fn() -> (TypeId, &'static str));

/// What [`Expected`] stands for: `T`'s `TypeId` and name.
///
/// `#[inline(never)]` so that a crate has one copy of it per type: a function the compiler may
/// inline into other crates (as it may any small one) is copied into every codegen unit that
/// uses it, and the fast path's comparison would fail between them.
#[inline(never)]
fn describe<T: 'static>() -> (TypeId, &'static str) {
    (TypeId::of::<T>(), type_name::<T>())
}

impl Expected {
    #[inline(always)]
    fn of<T: 'static>() -> Self {
        Expected(describe::<T>)
    }

    /// Whether `waiting` is this crate's token of `T` (if not, it may still be `T`: see
    /// [`Expected::is`]).
    #[inline(always)]
    fn is_exactly<T: 'static>(waiting: Option<Expected>) -> bool {
        // One comparison of words: `None` is null, which no function's address is.
        let waiting = waiting.map_or(ptr::null(), |expected| expected.0 as *const ());
        ptr::eq(waiting, Expected::of::<T>().0 as *const ())
    }

    /// Whether this is `T`.
    #[inline(always)]
    fn is<T: 'static>(self) -> bool {
        Expected::is_exactly::<T>(Some(self)) || self.is_by_id::<T>()
    }

    /// [`Expected::is`] for another copy of `describe` than this crate's.
    #[cold]
    #[inline(never)]
    fn is_by_id<T: 'static>(self) -> bool {
        (self.0)().0 == TypeId::of::<T>()
    }

    fn name(self) -> &'static str {
        (self.0)().1
    }
}

/// What a switch carries besides control.
enum Payload<T> {
    Value(T),
    Panic(Box<dyn Any + Send>),
}

/// What travels through the switch word between greenlets.
///
/// `#[repr(C)]` with the type-independent [`Header`] first: a panic may be delivered to a
/// greenlet waiting for another message type (a kill, a throw through a handle of another
/// type, a child's panic), and the receiver must read it without knowing the sender's `T`.
/// The value is read only when there is no panic, and values are type-checked by the sender.
///
/// The word sent is the delivery's address with two tag bits: fiber's `FINISHED_TAG` on a
/// finished greenlet's last message, and `PANIC_TAG` on a panic sent by `switch_to`. So a
/// plain value (the common switch) writes and reads no panic slot.
#[repr(C)]
struct Delivery<T> {
    header: Header,
    /// Initialised exactly when there is no panic.
    value: MaybeUninit<T>,
}

#[repr(C)]
struct Header {
    /// The sender, kept alive by its self count (a finished sender's until the receiver gives
    /// it up). The receiver was made `CURRENT` and `Running` by the sender.
    from: *const Record,
    /// Initialised when the word carries `PANIC_TAG` (then `Some`) or `FINISHED_TAG`.
    panic: MaybeUninit<Option<Box<dyn Any + Send>>>,
}

/// Set in the switch word when a delivery sent by `switch_to` carries a panic. Free, since a
/// `Delivery` (it holds pointers) is at least 4-aligned.
const PANIC_TAG: usize = 2;

impl<T> Delivery<T> {
    /// A delivery sent by `switch_to`, and the tag its word carries.
    #[inline(always)]
    fn new(from: *const Record, payload: Payload<T>) -> (Self, usize) {
        const { assert!(align_of::<Message<Delivery<T>>>() > PANIC_TAG | FINISHED_TAG) };
        match payload {
            Payload::Value(value) => (
                Delivery {
                    header: Header {
                        from,
                        panic: MaybeUninit::uninit(),
                    },
                    value: MaybeUninit::new(value),
                },
                0,
            ),
            Payload::Panic(payload) => (
                Delivery {
                    header: Header {
                        from,
                        panic: MaybeUninit::new(Some(payload)),
                    },
                    value: MaybeUninit::uninit(),
                },
                PANIC_TAG,
            ),
        }
    }

    /// A finished greenlet's last message (sent with `FINISHED_TAG` by the fiber root).
    fn last(from: *const Record, payload: Payload<T>) -> Self {
        let (panic, value) = match payload {
            Payload::Value(value) => (None, MaybeUninit::new(value)),
            Payload::Panic(payload) => (Some(payload), MaybeUninit::uninit()),
        };
        Delivery {
            header: Header {
                from,
                panic: MaybeUninit::new(panic),
            },
            value,
        }
    }
}

thread_local! {
    /// The running greenlet (its self count keeps it alive; this owns none); null until this
    /// thread first uses greenlets, and again from thread teardown on. Tagged with [`SLOW`]
    /// when a switch must take the slow path: when it is null, or a trace hook is installed.
    /// A plain `Cell` of a pointer, so the fast path of a switch reads one word with no
    /// lazy-initialisation or destructor-registration check (it tests `FAST_WORLD` instead of
    /// the tag).
    static CURRENT: Cell<*const Record> = const { Cell::new(ptr::without_provenance(SLOW)) };
    /// The world (its main greenlet's record) of the running greenlet when a switch may take
    /// the fast path, else null: kept by [`set_current`] with `CURRENT`'s tag. The fast path
    /// compares it with the target's world, one load and one comparison for both tests.
    static FAST_WORLD: Cell<*const Record> = const { Cell::new(ptr::null()) };
    /// The main greenlet's self count (`Rc::into_raw`); null until it is made.
    static MAIN: Cell<*const Record> = const { Cell::new(ptr::null()) };
    /// Releases MAIN's count when the thread exits; touched once, when main is created.
    static TEARDOWN: Teardown = const { Teardown };
    static TRACE: Cell<Tracing> = const { Cell::new(Tracing { hook: None, in_hook: false }) };
    static NEXT_ID: Cell<u64> = const { Cell::new(1) };
}

/// This thread's trace hook, and whether it is running now.
#[derive(Clone, Copy)]
struct Tracing {
    hook: Option<TraceHook>,
    /// The hook is running: every switch is refused (`transfer_slow`), and `CURRENT` stays
    /// tagged even if the hook uninstalls itself, so that no switch takes the fast path.
    in_hook: bool,
}

/// The tag bit of `CURRENT`: a switch must take the slow path. Free, since a `Record` (it holds
/// pointers) is at least 2-aligned.
const SLOW: usize = 1;
const _: () = assert!(align_of::<Record>() > SLOW);

/// Makes `record` `CURRENT`, tagged if a switch must take the slow path, and sets
/// `FAST_WORLD` to match.
#[inline]
fn set_current(record: *const Record) {
    let tracing = TRACE.get();
    let slow = record.is_null() || tracing.hook.is_some() || tracing.in_hook;
    CURRENT.set(record.map_addr(|addr| addr | usize::from(slow)));
    FAST_WORLD.set(if slow {
        ptr::null()
    } else {
        // SAFETY: not null (so not slow), it is the running greenlet, alive by its self count.
        unsafe { (*record).world }
    });
}

/// The running greenlet's record, or null if this thread has no greenlets (yet, or any more).
#[inline]
fn current_or_null() -> *const Record {
    CURRENT.get().map_addr(|addr| addr & !SLOW)
}

/// At thread exit, forgets `CURRENT` and drops the main greenlet's self count.
struct Teardown;

impl Drop for Teardown {
    fn drop(&mut self) {
        set_current(ptr::null());
        let main = MAIN.replace(ptr::null());
        if !main.is_null() {
            // SAFETY: MAIN owns one strong count of a record made by Rc::into_raw.
            drop(unsafe { Rc::from_raw(main) });
        }
    }
}

/// The main greenlet of the running world (made now if it has none).
#[inline]
fn current_world() -> *const Record {
    // SAFETY: the running greenlet is alive by its self count.
    unsafe { (*current_ptr()).world }
}

/// The panic of a greenlet operation that would cross from one world to another.
#[cold]
#[inline(never)]
fn another_world(target: GreenletId, what: &str) -> ! {
    panic!(
        "greenweave: greenlet {} belongs to another green thread (or to the OS thread outside \
         the runtime) and cannot {what} from here; a greenlet runs only in the green thread (or \
         plain OS thread) that created it, as a Python greenlet runs only in its own thread",
        target.0
    );
}

/// A set of greenlets that switch among one another: those of one green thread, or of an OS
/// thread outside any runtime. Each has its own main greenlet (the green thread's own stack,
/// or the OS thread's) and its own running greenlet.
///
/// The thread-locals `CURRENT` and `MAIN` describe the world of the code running now. The
/// scheduler keeps every other world in a `World` and swaps: `run` stores the OS thread's
/// world away while it runs (and the scheduler's own code runs with an empty world);
/// `run_task` installs a green thread's world before resuming it and stores it back when it
/// switches out, so a green thread parked inside a greenlet comes back to that greenlet as
/// the running one, while every other green thread sees its own. A green thread that never
/// uses greenlets has an empty world, and the two swaps are one test each.
///
/// Switches never cross worlds (each record knows its world's main, checked at every
/// switch): a greenlet's stack may be a green thread's parked position, which only the
/// scheduler may resume.
pub(crate) struct World {
    /// The running greenlet when the world was stored (untagged); null for an empty world.
    current: Cell<*const Record>,
    /// The world's main greenlet's self count (`Rc::into_raw`); null for an empty world.
    main: Cell<*const Record>,
}

impl World {
    /// A world with no greenlets yet (its main is made on first use).
    pub(crate) const fn new() -> World {
        World {
            current: Cell::new(ptr::null()),
            main: Cell::new(ptr::null()),
        }
    }

    /// Makes this world the thread's; the thread's world must be empty. Leaves this one
    /// empty.
    #[inline(always)]
    pub(crate) fn enter(&self) {
        if !self.main.get().is_null() {
            self.install();
        }
    }

    #[cold]
    #[inline(never)]
    fn install(&self) {
        MAIN.set(self.main.replace(ptr::null()));
        set_current(self.current.replace(ptr::null()));
    }

    /// Takes the thread's world into this one (which must be empty), leaving the thread's
    /// empty.
    #[inline(always)]
    pub(crate) fn leave(&self) {
        if !MAIN.get().is_null() {
            self.store();
        }
    }

    #[cold]
    #[inline(never)]
    fn store(&self) {
        self.main.set(MAIN.replace(ptr::null()));
        self.current.set(current_or_null());
        set_current(ptr::null());
    }

    /// Ends the stored world of a green thread that is over: gives up its main greenlet's
    /// self count. Its other greenlets are gone by then, or are held from other worlds, which
    /// can never switch to them (and leak rather than kill them when they drop them).
    pub(crate) fn end(&self) {
        self.current.set(ptr::null());
        let main = self.main.replace(ptr::null());
        if !main.is_null() {
            // SAFETY: `main` is the world's main greenlet's self count, given up once, here.
            drop(unsafe { Rc::from_raw(main) });
        }
    }

    /// Whether it has no greenlets.
    pub(crate) fn is_empty(&self) -> bool {
        self.main.get().is_null()
    }
}

fn next_id() -> GreenletId {
    NEXT_ID.with(|next| {
        let id = next.get();
        next.set(id + 1);
        GreenletId(id)
    })
}

/// The running greenlet's record, creating this thread's main greenlet on first use. The
/// pointer stays valid while that greenlet runs (its self count keeps it alive).
#[inline]
fn current_ptr() -> *const Record {
    let current = current_or_null();
    if current.is_null() {
        make_main()
    } else {
        current
    }
}

#[cold]
fn make_main() -> *const Record {
    let main = Rc::new_cyclic(|me| Record {
        id: GreenletId(0),
        waiting: Cell::new(None),
        // Never switched to: main's context is read only while it waits, which it first does
        // after a switch away, whose receiver writes the real one.
        context: Cell::new(StackPointer::from_addr(usize::MAX & !0xf).expect("not 0")),
        world: me.as_ptr(),
        phase: Cell::new(Phase::Started),
        parent: RefCell::new(None),
        stack: Cell::new(None),
        kill: |_| {},
    });
    // Releases the main greenlet of the world installed at thread exit: the OS thread's (a
    // green thread's world is stored in its task by then, and ended by the scheduler).
    TEARDOWN.with(|_| {});
    let main = Rc::into_raw(main);
    MAIN.set(main);
    set_current(main);
    main
}

/// A new strong reference to the running greenlet.
fn current_record() -> Rc<Record> {
    let current = current_ptr();
    // SAFETY: `current` came from Rc::into_raw (every record is made by Rc::new) and its self
    // count keeps it alive; the increment gives the new Rc its own count.
    unsafe {
        Rc::increment_strong_count(current);
        Rc::from_raw(current)
    }
}

/// `record` if it is not dead, else its nearest live ancestor (a main greenlet never dies).
#[cold]
fn live_ancestor(record: &Rc<Record>) -> Rc<Record> {
    let mut candidate = record.clone();
    while matches!(candidate.state(), State::Dead) {
        let parent = candidate
            .parent
            .borrow()
            .clone()
            .expect("a dead greenlet is never a main greenlet");
        candidate = parent;
    }
    candidate
}

/// Moves control to `target` (or its nearest live ancestor) with `payload`; returns what the
/// next switch back here brings.
///
/// The fast path is a suspended or unstarted target of the running world that takes the
/// payload (any panic; a value if it waits for this crate's token of `T`), with no trace hook
/// installed and the main greenlet made: one comparison of `FAST_WORLD` and one of the
/// target's `waiting`, and nothing but this function runs between reading the target's saved
/// context and switching to it. Everything else (dead targets, a switch to oneself, a type mismatch,
/// tracing, the first use on a thread) is `transfer_slow`.
#[inline(always)]
fn transfer<T: FromGreenletExit + 'static>(
    target: &Rc<Record>,
    payload: Payload<T>,
    event: Event,
    unwinding: Unwinding,
) -> T {
    let waiting = target.waiting.get();
    let takes_payload = match payload {
        Payload::Value(_) => Expected::is_exactly::<T>(waiting),
        Payload::Panic(_) => waiting.is_some(),
    };
    // A target's world is never null, and FAST_WORLD is null unless the fast path is open. The
    // unwinding test comes last: one load of std's global panic count, and a constant for a
    // kill.
    if takes_payload
        && FAST_WORLD.get() == target.world
        && (unwinding == Unwinding::Kill || !std::thread::panicking())
    {
        // FAST_WORLD is set, so `CURRENT` is untagged (`set_current`): the running greenlet.
        let current = CURRENT.get();
        // SAFETY: `target` waits, so its context is valid, and nothing ran since it was read;
        // `current` is the running greenlet (not `target`, which waits), of `target`'s world;
        // a value is a T, which `target` waits for; no hook is installed.
        unsafe { switch_to(current, target, target.context.get(), payload, 0) }
    } else {
        // Taken apart and rebuilt for the call, so that the payload is put in memory (where
        // the call takes it) on this path only, and not before the branch.
        match payload {
            Payload::Value(value) => transfer_slow(target, Payload::Value(value), event, unwinding),
            Payload::Panic(panic) => transfer_slow(target, Payload::Panic(panic), event, unwinding),
        }
    }
}

/// Whether a switch may be made while this OS thread unwinds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unwinding {
    /// No: a `switch` or `throw`, which would hand the unwind's panic count to the greenlet
    /// switched to (see [`switch_while_unwinding`]).
    Refuse,
    /// Yes: the kill of a greenlet whose last handle is dropped, which makes it unwind too.
    Kill,
}

/// [`transfer`] to a dead target, to the running greenlet itself, or with a trace hook.
///
/// Everything that can run user code (`from_greenlet_exit`) comes before the target is
/// resolved and checked, and the hook, which comes after, cannot switch: so the checks hold
/// when the payload is delivered.
#[cold]
#[inline(never)]
fn transfer_slow<T: FromGreenletExit + 'static>(
    target: &Rc<Record>,
    payload: Payload<T>,
    event: Event,
    unwinding: Unwinding,
) -> T {
    if TRACE.get().in_hook {
        switch_in_trace_hook(target.id);
    }
    if target.world != current_world() {
        another_world(target.id, "be switched to or thrown into");
    }
    let redirected;
    let (target, payload, event) = if matches!(target.state(), State::Dead) {
        // As in Python, a dead greenlet turns a `GreenletExit` thrown at it into the value a
        // greenlet dying of it hands on; a switch carries that value to its live ancestor.
        let (payload, event) = match payload {
            Payload::Panic(panic) if panic.is::<GreenletExit>() => (
                Payload::Value(T::from_greenlet_exit(GreenletExit)),
                Event::Switch,
            ),
            payload => (payload, event),
        };
        redirected = live_ancestor(target);
        (&redirected, payload, event)
    } else {
        (target, payload, event)
    };
    let current = current_ptr();
    if ptr::eq(Rc::as_ptr(target), current) {
        return deliver_here(payload);
    }
    if unwinding == Unwinding::Refuse && std::thread::panicking() {
        switch_while_unwinding(target.id, event);
    }
    if let Payload::Value(_) = payload {
        check_expects::<T>(target);
    }
    // SAFETY: `current` is the running greenlet, alive by its self count.
    trace(event, unsafe { &*current }, target);
    // The hook could not switch (`call_trace_hook`), so the checks above still hold.
    let to = match target.state() {
        State::Unstarted | State::Suspended => target.context.get(),
        State::Running | State::Dead => {
            unreachable!("only the current greenlet runs, and dead targets were redirected")
        }
    };
    let slow = usize::from(TRACE.get().hook.is_some());
    // SAFETY: `to` was read just now and nothing ran since; `target` is not `current`; `slow`
    // says whether a hook is installed.
    unsafe { switch_to(current, target, to, payload, slow) }
}

/// The switch itself: makes `target` the running greenlet and jumps to it.
///
/// # Safety
/// `current` is the running greenlet and `target` another one, waiting (suspended or
/// unstarted) at `to`; if `payload` is a value, `target` waits for a `T`. `slow` is `SLOW` if
/// a trace hook is installed, else 0.
#[inline(always)]
unsafe fn switch_to<T: 'static>(
    current: *const Record,
    target: &Record,
    to: StackPointer,
    payload: Payload<T>,
    slow: usize,
) -> T {
    // The sender waits for a T from here on, and the receiver runs. The sender's context is
    // written by the receiver (`arrive`), which alone learns where it stopped, before anything
    // else runs.
    // SAFETY: per the contract, the running greenlet, alive by its self count.
    unsafe { (*current).waiting.set(Some(Expected::of::<T>())) };
    target.waiting.set(None);
    CURRENT.set(ptr::from_ref(target).map_addr(|addr| addr | slow));
    let (delivery, tag) = Delivery::new(current, payload);
    let delivery = Message::new(delivery);
    // SAFETY: `to` is the saved context of a suspended or unstarted greenlet, which is
    // replaced by the receiver (`arrive`) before anything could switch to it again. The
    // receiver takes `delivery` before we can be resumed.
    let transfer = unsafe { arch::switch(to, delivery.word() | tag) };
    // SAFETY: whoever switched here sent a Delivery<T>: they checked our `waiting`.
    unsafe { arrive::<T>(transfer) }
}

/// The panic of a `switch` or `throw` made while this OS thread unwinds (from a destructor run
/// during a panic, a cancellation or a kill): std keeps "this thread is panicking" per OS thread
/// and no stable API saves or restores it, so the greenlet switched to would see the unwind as
/// its own (`std::thread::panicking()` true, its timed waits timing out at once and its
/// untimed ones panicking, as in an unwinding green thread), and so would every greenlet it
/// switched to in turn, for as long as the unwind stayed suspended. In a destructor during the
/// unwind this panic aborts the process, as any panic escaping a destructor then does.
#[cold]
#[inline(never)]
fn switch_while_unwinding(target: GreenletId, event: Event) -> ! {
    let what = match event {
        Event::Switch => "Greenlet::switch",
        Event::Throw => "Greenlet::throw",
    };
    panic!(
        "greenweave: {what} called while this thread is unwinding (in a destructor run during a \
         panic, a cancellation or a greenlet's kill), targeting greenlet {}. A greenlet does not \
         switch while it unwinds: std's panic state is per OS thread, so greenlet {} would run \
         as if it were unwinding itself. Switch before the unwind starts or once it has been \
         caught, or drop the greenlet's last handle instead, which kills it as part of the \
         unwind.",
        target.0, target.0
    );
}

/// A switch to the running greenlet itself: the value comes straight back (or the panic is
/// raised here).
#[cold]
fn deliver_here<T>(payload: Payload<T>) -> T {
    match payload {
        Payload::Value(value) => value,
        Payload::Panic(payload) => panic::resume_unwind(payload),
    }
}

/// Panics (in the sender) if `target`'s pending switch takes another message type than `T`.
/// `target` waits (it is neither running nor dead).
fn check_expects<T: 'static>(target: &Record) {
    let expected = target
        .waiting
        .get()
        .expect("a greenlet that is neither running nor dead waits");
    if !expected.is::<T>() {
        type_mismatch::<T>(target.id, expected);
    }
}

#[cold]
#[inline(never)]
fn type_mismatch<T>(target: GreenletId, expected: Expected) -> ! {
    panic!(
        "greenweave: switched a `{}` to greenlet {}, which is waiting for a `{}`; greenlets \
         that switch to each other must exchange one message type",
        type_name::<T>(),
        target.0,
        expected.name()
    );
}

#[inline]
fn trace(event: Event, origin: &Record, target: &Record) {
    if let Some(hook) = TRACE.get().hook {
        call_trace_hook(hook, event, origin, target);
    }
}

/// Calls the hook with switching forbidden: its caller has checked the target's state and the
/// message type, and acts on that check once the hook returns, so nothing may switch in
/// between (a switch in the hook panics in `transfer_slow`; `CURRENT` is tagged, so none takes
/// the fast path). A hook that panics is uninstalled, then its panic goes on.
#[cold]
#[inline(never)]
fn call_trace_hook(hook: TraceHook, event: Event, origin: &Record, target: &Record) {
    TRACE.set(Tracing {
        in_hook: true,
        ..TRACE.get()
    });
    set_current(current_or_null());
    let (origin, target) = (origin.id, target.id);
    let outcome = panic::catch_unwind(|| hook(event, origin, target));
    let hook = match outcome {
        Ok(()) => TRACE.get().hook,
        Err(_) => None,
    };
    TRACE.set(Tracing {
        hook,
        in_hook: false,
    });
    set_current(current_or_null());
    if let Err(payload) = outcome {
        panic::resume_unwind(payload);
    }
}

/// A switch asked for while a trace hook runs (see [`TraceHook`]).
#[cold]
#[inline(never)]
fn switch_in_trace_hook(target: GreenletId) -> ! {
    panic!(
        "greenweave: a greenlet trace hook tried to switch to greenlet {} (by a switch, a throw, \
         or dropping the last handle to a greenlet, which kills it); a trace hook must not \
         switch greenlets: record the event and act on it after the hook returns",
        target.0
    );
}

/// Runs in the greenlet that was just switched to (which the sender already made `CURRENT`
/// and `Running`): records where the sender stopped, and returns the value (or raises the
/// panic) that came with the switch.
///
/// # Safety
/// `transfer` must be the result of a switch made by `switch_to` or a finishing greenlet,
/// with a `Delivery<T>`.
#[inline(always)]
unsafe fn arrive<T>(transfer: Transfer) -> T {
    if transfer.data & (FINISHED_TAG | PANIC_TAG) != 0 {
        // SAFETY: forwarded.
        return unsafe { arrive_tagged::<T>(transfer) };
    }
    // A value from a sender suspended in `switch_to`.
    let delivery = transfer.data as *const Delivery<T>;
    // SAFETY: per the contract the word addresses a Delivery<T> whose sender is suspended and
    // never reads it again; untagged, so the value is there (a T: the sender checked our
    // `expects`). Taken once, before the sender can be killed below.
    let (from, value) = unsafe {
        (
            (*delivery).header.from,
            ptr::read(&raw const (*delivery).value).assume_init(),
        )
    };
    // SAFETY: the sender is suspended in `switch_to`, at `transfer.from`.
    unsafe { sender_suspended(from, transfer.from) };
    value
}

/// [`arrive`] with a panic, or with a finished greenlet's last message.
///
/// # Safety
/// As for [`arrive`], and the word carries `FINISHED_TAG` or `PANIC_TAG`.
#[cold]
#[inline(never)]
unsafe fn arrive_tagged<T>(transfer: Transfer) -> T {
    let delivery = (transfer.data & !(FINISHED_TAG | PANIC_TAG)) as *const Delivery<T>;
    // SAFETY: per the contract the word addresses a Delivery of some message type, whose
    // sender is suspended or finished and never reads it again; the header is at offset 0
    // whatever that type is, its panic slot is initialised (the word is tagged), and it is
    // taken once.
    let Header { from, panic } = unsafe { ptr::read(delivery.cast::<Header>()) };
    // SAFETY: as above.
    let panic = unsafe { panic.assume_init() };
    // Take the value now: the delivery may live on a finished sender's stack, which is
    // recycled (possibly unmapped) below, and a suspended sender may be killed below.
    let payload = match panic {
        Some(payload) => Payload::Panic(payload),
        // SAFETY: no panic, so the sender put a value there, and a value is only sent to a
        // switch whose expected type the sender checked against its own: it is a T. Once.
        None => Payload::Value(unsafe { ptr::read(&raw const (*delivery).value).assume_init() }),
    };
    if transfer.data & FINISHED_TAG != 0 {
        // SAFETY: a finished sender's last message: it is dead, and its self count, which
        // keeps it alive, is ours to give up.
        unsafe { release_finished(from) };
    } else {
        // SAFETY: the sender is suspended in `switch_to`, at `transfer.from`.
        unsafe { sender_suspended(from, transfer.from) };
    }
    match payload {
        Payload::Value(value) => value,
        Payload::Panic(payload) => panic::resume_unwind(payload),
    }
}

/// Records where `sender` stopped (`sp`; it made itself waiting before it switched), and kills
/// it if nothing but its self count refers to it (nothing could ever switch to it again).
///
/// # Safety
/// `sender` is a greenlet that has just switched away from `switch_to`, stopping at `sp`.
#[inline(always)]
unsafe fn sender_suspended(sender: *const Record, sp: StackPointer) {
    // SAFETY: per the contract it is suspended, so alive by its self count.
    unsafe { (*sender).context.set(sp) };
    // SAFETY: as above; a live record made by Rc::new.
    if unsafe { strong_count(sender) } == 1 {
        // SAFETY: as above.
        unsafe { kill_unreferenced(sender) };
    }
}

/// The strong count of a record.
///
/// # Safety
/// `record` addresses a live record (all are made by `Rc::new`).
#[inline(always)]
unsafe fn strong_count(record: *const Record) -> usize {
    // SAFETY: per the contract; ManuallyDrop keeps the count as it is.
    let record = ManuallyDrop::new(unsafe { Rc::from_raw(record) });
    Rc::strong_count(&record)
}

/// The sender finished and we have its last message: its stack is free, and its self count
/// is given up (which may drop the record).
///
/// # Safety
/// `sender` is a dead greenlet whose last message has just been taken, and its self count is
/// given up exactly once, here.
#[cold]
#[inline(never)]
unsafe fn release_finished(sender: *const Record) {
    // SAFETY: per the contract, the self count makes this Rc.
    let sender = unsafe { Rc::from_raw(sender) };
    if let Some(stack) = sender.stack.take() {
        pool::recycle(stack);
    }
    release(Some(sender));
}

/// Kills a suspended greenlet that only its self count refers to (see [`kill`]).
///
/// # Safety
/// `record` addresses a live record.
#[cold]
#[inline(never)]
unsafe fn kill_unreferenced(record: *const Record) {
    // SAFETY: live, so the increment gives the new Rc its own count.
    let record = unsafe {
        Rc::increment_strong_count(record);
        Rc::from_raw(record)
    };
    kill_now(&record);
}

/// Drops a reference to a record, killing the greenlet first if this was the last reference
/// and it is suspended (or unstarted), so that its destructors run.
///
/// A chain of records each holding the last reference to the next (unstarted or dead
/// greenlets, each the parent of the next) is released by this loop, one link at a time: the
/// last reference to a record has its parent link taken out before it is dropped, so no
/// `Drop` recurses into the next link, and a chain of any length needs no more stack than one.
#[inline]
fn release(mut next: Option<Rc<Record>>) {
    while let Some(record) = next {
        kill_if_last(&record);
        next = if Rc::strong_count(&record) == 1 {
            record.parent.take()
        } else {
            None
        };
    }
}

/// Kills the greenlet if `record`, about to be dropped, is its last reference besides the
/// self count (unstarted greenlets have none; running and dead ones are never killed).
#[inline]
fn kill_if_last(record: &Rc<Record>) {
    let last = match record.state() {
        State::Unstarted => 1,
        State::Suspended => 2,
        State::Running | State::Dead => return,
    };
    if Rc::strong_count(record) == last {
        kill_now(record);
    }
}

#[cold]
#[inline(never)]
fn kill_now(record: &Rc<Record>) {
    (record.kill)(record);
}

/// Kills `record` by throwing [`GreenletExit`] into it with the current greenlet as its
/// parent, so its result comes back here (and is dropped). `record` is about to be dropped by
/// the caller.
fn kill<T: FromGreenletExit + 'static>(record: &Rc<Record>) {
    // During thread teardown CURRENT is gone, and a greenlet of another world (its last handle
    // dropped in another green thread) cannot be switched to from here: then the greenlet is
    // leaked, not killed (its self count keeps the record, and its stack stays mapped).
    let current = current_or_null();
    // SAFETY: a non-null CURRENT is the running greenlet, alive by its self count.
    if current.is_null() || unsafe { (*current).world } != record.world {
        return;
    }
    let previous = record.parent.replace(Some(current_record()));
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        // A kill goes ahead while this thread unwinds (a handle dropped by the unwind): the
        // greenlet unwinds too, so `std::thread::panicking()` is true for it anyway.
        transfer::<T>(
            record,
            Payload::Panic(Box::new(GreenletExit)),
            Event::Throw,
            Unwinding::Kill,
        )
    }));
    // As Python does, it gets its old parent back, dead or not (it may have refused to die:
    // caught GreenletExit and switched back). The old parent is not released here but by our
    // caller's release of `record`, so a chain of unstarted greenlets is killed by that loop
    // rather than by recursion through this function.
    release(record.parent.replace(previous));
    if matches!(record.state(), State::Suspended) && Rc::strong_count(record) == 2 {
        // It refused, and nothing refers to it but its self count and `record`, which our
        // caller is about to drop: give up the self count so the record goes with it (its
        // stack, with live frames, is leaked by `Record::drop`).
        // SAFETY: a started greenlet that has not finished owns one count of itself, given up
        // once: here, since it will never run or finish again.
        unsafe { Rc::decrement_strong_count(Rc::as_ptr(record)) };
    }
    if let Err(payload) = outcome
        && !std::thread::panicking()
    {
        panic::resume_unwind(payload);
    }
}

/// What every greenlet's fiber runs: arrive, run, and hand the outcome to the parent.
///
/// # Safety
/// A [`fiber::Entry`]: `run` points at the greenlet's closure, which this function owns.
unsafe fn greenlet_entry<T, F>(run: *mut F, transfer: Transfer) -> Exit<Delivery<T>>
where
    T: FromGreenletExit + 'static,
    F: FnOnce(T) -> T,
{
    // Take the self count, given up by whoever receives this greenlet's last message.
    // SAFETY: the sender made this greenlet CURRENT; it is alive because the sender holds a
    // reference to it (the handle of the `switch` or `throw` that got here, or the redirected
    // or killed record) or, if the sender is finishing, is its nearest live ancestor, which the
    // sender's record (alive by its self count until we take its message) reaches through
    // parent links.
    unsafe { Rc::increment_strong_count(current_or_null()) };
    // SAFETY: as above.
    unsafe { (*current_or_null()).phase.set(Phase::Started) };
    let mut run_taken = false;
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the first switch into a greenlet comes from `switch_to::<T>`, which checked
        // that a Value is a T (a Panic kills it here, before `run` is called).
        let first = unsafe { arrive::<T>(transfer) };
        run_taken = true;
        // The closure is moved out only here, at the call, so a large capture is copied once.
        // SAFETY: not moved out or dropped before; read once.
        let run = unsafe { ptr::read(run) };
        run(first)
    }));
    if !run_taken {
        // Killed (a throw) before it started: drop the closure without running it.
        // SAFETY: never moved out; dropped once (a panic of its destructor leaves the rest
        // leaked).
        catch_quietly(|| unsafe { ptr::drop_in_place(run) });
    }
    let mut payload = match outcome {
        Ok(value) => Payload::Value(value),
        // `from_greenlet_exit` is user code: a panic in it goes to the parent instead.
        Err(payload) if payload.is::<GreenletExit>() => {
            match panic::catch_unwind(|| T::from_greenlet_exit(GreenletExit)) {
                Ok(value) => Payload::Value(value),
                Err(payload) => Payload::Panic(payload),
            }
        }
        Err(payload) => Payload::Panic(payload),
    };
    let me = current_record();
    // Find where the payload goes, check that it can take it, and tell the hook. This greenlet
    // still runs (its phase is `Started`) until all of that holds: user code that runs on the
    // way (the destructor of a value the parent cannot take, or of a payload that a panicking
    // hook replaces) may switch away and back, as `run` could, and change the parent chain or
    // what the parent waits for, so the lookup and the check start over after it. The hook
    // itself cannot switch (`call_trace_hook`). This ends: each pass that drops something
    // leaves a panic, which needs no type check, and a hook that panics is uninstalled.
    let parent = loop {
        let parent = live_ancestor(
            &me.parent
                .borrow()
                .clone()
                .expect("a greenlet that is not main has a parent"),
        );
        let parent_waits_for = parent
            .waiting
            .get()
            .expect("a live ancestor of the running greenlet waits");
        if let Payload::Value(_) = payload
            && !parent_waits_for.is::<T>()
        {
            let mismatch = Payload::Panic(Box::new(format!(
                "greenweave: greenlet {} finished with a `{}`, but its parent (greenlet {}) is waiting for a `{}`",
                me.id.0,
                type_name::<T>(),
                parent.id.0,
                parent_waits_for.name()
            )));
            release(Some(parent));
            let value = core::mem::replace(&mut payload, mismatch);
            catch_quietly(|| drop(value));
            continue;
        }
        // A panic escaping `run` is raised in the parent: traced as a throw. A hook that
        // panics cannot unwind from here (this frame is the fiber's root): its panic goes to
        // the parent instead.
        let event = match payload {
            Payload::Value(_) => Event::Switch,
            Payload::Panic(_) => Event::Throw,
        };
        match panic::catch_unwind(AssertUnwindSafe(|| trace(event, &me, &parent))) {
            Ok(()) => break parent,
            Err(hook_panic) => {
                release(Some(parent));
                let replaced = core::mem::replace(&mut payload, Payload::Panic(hook_panic));
                catch_quietly(|| drop(replaced));
            }
        }
    };
    // Nothing runs from here to the switch, so the checks above hold at the delivery.
    me.phase.set(Phase::Dead);
    let to = match parent.state() {
        State::Unstarted | State::Suspended => parent.context.get(),
        State::Running | State::Dead => {
            unreachable!("a live parent of the running greenlet is not running")
        }
    };
    // The parent runs from here on; this greenlet's self count keeps its record (and through
    // it the parent) alive until the parent takes the message.
    parent.waiting.set(None);
    set_current(Rc::as_ptr(&parent));
    Exit {
        to,
        message: Delivery::last(Rc::as_ptr(&me), payload),
        leave: Leave::ToPeer,
    }
}

/// Runs `f`, which runs user code (a destructor) in a greenlet's root frame, where nothing may
/// unwind: a panic is caught, and its payload leaked rather than dropped (its own destructor
/// could panic again).
fn catch_quietly(f: impl FnOnce()) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(f)) {
        core::mem::forget(payload);
    }
}
