//! Scoped green threads, in the shape of `std::thread::scope`: [`scope`], [`Scope`],
//! [`ScopedJoinHandle`] and [`Builder::spawn_scoped`]. A green thread spawned in a scope may
//! borrow from the caller of `scope`, because `scope` does not return before it has ended.
//!
//! Owns: a scope's record (`ScopeData`: its green threads still alive, the green thread that
//! waits at its end and the park it waits in, the panics nobody joined) and the wait at the end
//! of a scope, which a cancellation, an elapsed `time::timeout` or a panic cannot cut short: any
//! of them cancels the scope's green threads, and the wait goes on until they have ended.
//!
//! The waiter is whichever green thread runs the end of `scope`, not the one that entered it:
//! inside a generator (a [`Coroutine`](crate::Coroutine)) the two differ when another green
//! thread resumes it, and the one that entered may have ended. Only code that runs on no green
//! thread at all (the runtime's end, force-unwinding what it could not end otherwise) ends the
//! scope's green threads at once instead of waiting.
//!
//! May not: let `scope` return or unwind while a green thread spawned in it can still run
//! (every way out goes through `ScopeData::wait_for_all`, or aborts); switch while unwinding
//! (the wait comes after the closure's unwind has been caught, a scope entered during an unwind
//! refuses spawns, and one unwound inside another unwind does not wait); reach into the
//! scheduler beyond spawning, parking, waking, and the hooks of a runtime's end
//! (`end_abandoned`, `count_waiting_for_others`, `runtime_is_ending`).

use std::cell::{Cell, OnceCell, RefCell};
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;

use super::{Builder, JoinError, JoinHandle, Outcome, Thread};
use crate::runtime::compaction::Lending;
use crate::runtime::scheduler::{self, with_scheduler};
use crate::runtime::task::{Task, TaskState, Wait, Wake};

/// A panic payload, as `catch_unwind` returns it.
type Payload = Box<dyn std::any::Any + Send + 'static>;

/// Runs `f` with a [`Scope`] in which green threads that borrow from the caller can be
/// spawned, and returns what `f` returns once every green thread spawned in the scope has
/// ended, as `std::thread::scope` does for OS threads.
///
/// The green threads are joined automatically when `f` returns: `scope` parks (only this green
/// thread) until the last of them has ended, so they may borrow anything that outlives the
/// call, mutably or not. If one of them panicked and its [`ScopedJoinHandle`] was not joined,
/// `scope` then panics with "a scoped thread panicked", as std's does; a panic that was joined
/// is the joiner's to handle.
///
/// If `f` unwinds (a panic, a [`cancel`](super::JoinHandle::cancel) of this green thread, or
/// a [`time::timeout`](crate::time::timeout) that elapses around the `scope`), the green
/// threads still running are cancelled (each unwinds from its park point, running its
/// destructors), and the unwind goes on only once all of them have ended. The same happens if
/// this green thread is cancelled or its timeout elapses while it waits for them after `f`
/// returned. std cannot cancel OS threads and lets them run on; here a scope that is being
/// abandoned ends its work promptly, and no green thread is left waiting for what `f` would
/// have sent it. The wait itself cannot be cut short: a scope bounded by a timeout returns
/// `Err(Elapsed)` only after its green threads have unwound.
///
/// Inside a generator ([`Coroutine`](crate::Coroutine)) or a greenlet, the green thread that
/// waits at the end of the scope is the one running it then: a generator suspended in `f` and
/// resumed, or dropped, by another green thread makes that one wait (the one that entered the
/// scope may have ended).
///
/// # Panics
/// Outside a runtime (or on the scheduler rather than a green thread); with `f`'s own panic;
/// and with "a scoped thread panicked", as described above.
///
/// # Aborts
/// If the scope's stack is unwound while green threads of the scope still run and the green
/// thread running the scope is itself unwinding (a generator or greenlet suspended inside `f`,
/// dropped during a panic or a cancellation): the scope could neither wait for them (a green
/// thread does not switch while it unwinds) nor let them outlive what they borrow. Once the
/// runtime is ending (its shutdown cancelled that green thread), the scope's green threads are
/// stopped where they stand instead, never to run again (their stacks leaked, their destructors
/// not run, and a line on stderr says so), and `run` returns.
///
/// # Examples
///
/// ```
/// use greenweave::thread;
///
/// greenweave::run(|| {
///     let mut numbers = vec![1, 2, 3];
///     let label = String::from("sum");
///     let mut total = 0;
///     thread::scope(|s| {
///         s.spawn(|| {
///             // Borrows `label` and `numbers` from the caller.
///             println!("{label} of {numbers:?}");
///             numbers.iter().sum::<i32>()
///         });
///         s.spawn(|| {
///             thread::yield_now();
///             total = 6; // a mutable borrow, ended with the scope
///         });
///     });
///     // Every green thread of the scope has ended: the borrows are over.
///     numbers.push(total);
///     assert_eq!(numbers, [1, 2, 3, 6]);
///
///     // A value that borrows, through the join handle.
///     let words = [String::from("green"), String::from("threads")];
///     let longest = thread::scope(|s| {
///         let handle = s.spawn(|| words.iter().max_by_key(|word| word.len()));
///         handle.join().unwrap()
///     });
///     assert_eq!(longest.map(String::as_str), Some("threads"));
/// });
/// ```
#[track_caller]
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    // Only on a green thread (this panics elsewhere, saying so): the end of the scope waits.
    // Until it has waited, the green threads spawned in it may borrow anything on this
    // green thread's stack, which must then stay where it is (`runtime::compaction`).
    let _lending = with_scheduler("greenweave::thread::scope", |scheduler| {
        Lending::begin(scheduler.current_task())
    });
    let scope = Scope {
        data: Rc::new(ScopeData {
            children: RefCell::new(Children::default()),
            unjoined_panics: Cell::new(0),
            waiter: RefCell::new(None),
            state: Cell::new(ScopeState::Open),
            entered_while_unwinding: std::thread::panicking(),
            counted_waiting: Cell::new(false),
        }),
        scope: PhantomData,
        env: PhantomData,
    };
    let result = panic::catch_unwind(AssertUnwindSafe(|| f(&scope)));
    // Every green thread of the scope ends here, whatever happened in `f` or happens now.
    let interruption = scope.data.wait_for_all(result.is_err());
    match (result, interruption) {
        // The wait was interrupted: after the closure returned, by a cancellation or an elapsed
        // timeout; or, whatever the closure did, by the runtime ending, whose unwind of the
        // stack the wait parked on must reach that stack's root. That unwind goes on.
        (result, Some(payload)) => {
            drop(result);
            panic::resume_unwind(payload)
        }
        (Err(payload), None) => panic::resume_unwind(payload),
        (Ok(_), None) if scope.data.unjoined_panics.get() > 0 => {
            panic!("a scoped thread panicked")
        }
        (Ok(value), None) => value,
    }
}

/// A scope to spawn green threads in, which may borrow from outside it; see [`scope`].
///
/// `'scope` is the lifetime of the scope itself (green threads spawned in it end within it),
/// `'env` that of what they may borrow (it outlives the scope), as in `std::thread::Scope`.
pub struct Scope<'scope, 'env: 'scope> {
    data: Rc<ScopeData>,
    /// Invariant in both lifetimes, as std's: a green thread may neither be spawned into a
    /// longer scope nor borrow for less than `'env`.
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Spawns a green thread in this scope, with the runtime's default settings; it may borrow
    /// from outside the scope (anything that lives for `'scope`).
    ///
    /// If its [`ScopedJoinHandle`] is dropped, the green thread is joined when the scope ends,
    /// and if it panicked, [`scope`] panics then. A green thread spawned while the scope is
    /// being cancelled (its closure unwound) is cancelled before it runs.
    ///
    /// # Panics
    /// If no stack can be mapped, or if the scope was entered while its green thread was
    /// unwinding ([`Builder::spawn_scoped`] returns those errors instead).
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let mut hits = 0;
    ///     greenweave::thread::scope(|s| {
    ///         let handle = s.spawn(|| {
    ///             hits += 1;
    ///             "done"
    ///         });
    ///         assert_eq!(handle.join().unwrap(), "done");
    ///     });
    ///     assert_eq!(hits, 1);
    /// });
    /// ```
    pub fn spawn<F, T>(&'scope self, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + 'scope,
        T: 'scope,
    {
        Builder::new()
            .spawn_scoped_named("greenweave::thread::Scope::spawn", self, f)
            .unwrap_or_else(|error| {
                panic!("greenweave::thread::Scope::spawn: could not create a green thread: {error}")
            })
    }
}

impl fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("running", &self.data.children.borrow().running)
            .field("unjoined_panics", &self.data.unjoined_panics.get())
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Spawns a green thread with these settings in `scope`, as [`Scope::spawn`] does; the
    /// green thread may borrow from outside the scope. The shape of
    /// `std::thread::Builder::spawn_scoped`.
    ///
    /// # Errors
    /// Those of [`Builder::spawn`] (the stack cannot be mapped); and
    /// [`io::ErrorKind::Other`] if `scope` was entered while its green thread was unwinding (in
    /// a destructor during a panic or a cancellation): the scope could not wait for the green
    /// thread, since a green thread does not switch while it unwinds.
    ///
    /// ```
    /// use greenweave::thread::{self, Builder};
    ///
    /// greenweave::run(|| {
    ///     let name = String::from("worker");
    ///     thread::scope(|s| {
    ///         let handle = Builder::new()
    ///             .name(name.clone())
    ///             .spawn_scoped(s, || thread::current().name() == Some(name.as_str()))
    ///             .unwrap();
    ///         assert_eq!(handle.thread().name(), Some("worker"));
    ///         assert!(handle.join().unwrap());
    ///     });
    /// });
    /// ```
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn spawn_scoped<'scope, 'env, F, T>(
        self,
        scope: &'scope Scope<'scope, 'env>,
        f: F,
    ) -> io::Result<ScopedJoinHandle<'scope, T>>
    where
        F: FnOnce() -> T + 'scope,
        T: 'scope,
    {
        self.spawn_scoped_named("greenweave::thread::Builder::spawn_scoped", scope, f)
    }

    fn spawn_scoped_named<'scope, 'env, F, T>(
        self,
        what: &str,
        scope: &'scope Scope<'scope, 'env>,
        f: F,
    ) -> io::Result<ScopedJoinHandle<'scope, T>>
    where
        F: FnOnce() -> T + 'scope,
        T: 'scope,
    {
        self.check_name();
        let data: &'scope ScopeData = &scope.data;
        if data.entered_while_unwinding {
            return Err(io::Error::other(
                "thread::scope was entered while its green thread was unwinding (in a destructor \
                 during a panic or a cancellation): it could not wait for a green thread spawned \
                 in it, since a green thread does not switch while it unwinds; spawn before the \
                 unwind starts, or from another green thread",
            ));
        }
        if data.state.get() == ScopeState::Abandoned {
            return Err(io::Error::other(
                "the runtime is ending: the stack this thread::scope is on is being unwound \
                 and no green thread can be spawned in its scope any more",
            ));
        }
        with_scheduler(what, |scheduler| {
            let stack = self.green_stack(scheduler, size_of_val(&f))?;
            let slot = data.children.borrow_mut().reserve();
            let child = Child {
                f,
                ended: ChildEnded {
                    data: scope.data.clone(),
                    slot,
                },
            };
            let body = move |task: &Task| {
                // Destructured so that the closure (with what it borrows) is consumed, and its
                // result handed over, before `ended` tells the scope.
                let Child { f, ended } = child;
                let result = super::run_green_body(task, f);
                if result.as_ref().is_err_and(JoinError::is_panic) {
                    ended
                        .data
                        .unjoined_panics
                        .set(ended.data.unjoined_panics.get() + 1);
                }
                // SAFETY: this task's result slot holds only an `Outcome<T>`: put here, taken
                // by its `JoinHandle<T>` (inside the `ScopedJoinHandle`).
                unsafe { task.result.put::<Outcome<T>>(result) };
                drop(ended);
            };
            let body: Box<dyn FnOnce(&Task) + 'scope> = Box::new(body);
            // SAFETY: only the lifetime is erased: what the body borrows lives for `'scope`,
            // and the body is never used after `scope` returns or unwinds. The body runs (or is
            // dropped unrun) in this task's coroutine, and its last act is to drop `ended`,
            // which takes the task off the scope's list; `scope` cannot leave before that list
            // is empty (`ScopeData::wait_for_all`: its wait cannot be cut short, and a
            // cancellation, an elapsed timeout or a panic only cancel the green threads
            // first). When the runtime force-unwinds the stack `scope` is on
            // (`ScopeData::end_now`), the tasks still on the list are ended first: unwound,
            // which drops the body, or leaked, never to be resumed. The result, which may
            // borrow for `'scope` too, is either dropped in `put` (no handle left) or owned
            // by the `ScopedJoinHandle`, which lives for `'scope` at most, or leaked with it.
            let body: Box<dyn FnOnce(&Task) + 'static> = unsafe {
                std::mem::transmute::<Box<dyn FnOnce(&Task) + 'scope>, Box<dyn FnOnce(&Task)>>(body)
            };
            let name = self.name.map(String::into_boxed_str);
            let task = scheduler.spawn_task(name, stack, body);
            task.scope.set(data.address());
            if data.state.get() == ScopeState::Cancelling {
                // Spawned by a destructor while the scope's green threads are being cancelled:
                // it never runs (its closure is dropped unrun).
                task.request_cancel();
            }
            data.children.borrow_mut().fill(slot, task.clone());
            Ok(ScopedJoinHandle {
                handle: JoinHandle {
                    task,
                    marker: PhantomData,
                },
                thread: OnceCell::new(),
                scope: data,
            })
        })
    }
}

/// An owned permission to join a green thread spawned in a [`Scope`], as
/// `std::thread::ScopedJoinHandle`. Dropping it leaves the green thread to be joined at the end
/// of the scope.
pub struct ScopedJoinHandle<'scope, T> {
    handle: JoinHandle<T>,
    /// Made on first use: a `Thread` shares an allocation with the green thread's other
    /// handles, which a scoped spawn need not pay for unless asked.
    thread: OnceCell<Thread>,
    scope: &'scope ScopeData,
}

impl<'scope, T> ScopedJoinHandle<'scope, T> {
    /// Waits (parking only this green thread) for the green thread to finish and returns its
    /// result: `Ok` with its return value, `Err(JoinError::Panicked)` with its panic payload
    /// (which [`scope`] then leaves to the caller: it does not panic for it), or
    /// `Err(JoinError::Cancelled)`.
    ///
    /// # Panics
    /// If a green thread joins itself.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let total = greenweave::thread::scope(|s| {
    ///         let failing = s.spawn(|| -> u32 { panic!("bad input") });
    ///         let error = failing.join().unwrap_err();
    ///         assert_eq!(error.panic_message(), Some("bad input"));
    ///         s.spawn(|| 2 + 2).join().unwrap()
    ///     });
    ///     // The panic was joined, so `scope` returns normally.
    ///     assert_eq!(total, 4);
    /// });
    /// ```
    pub fn join(self) -> Result<T, JoinError> {
        let ScopedJoinHandle { handle, scope, .. } = self;
        let result = handle.join();
        if result.as_ref().is_err_and(JoinError::is_panic) {
            // Handled by this caller: not a reason for `scope` to panic.
            scope
                .unjoined_panics
                .set(scope.unjoined_panics.get().saturating_sub(1));
        }
        result
    }

    /// Whether the green thread has finished (returned, panicked or been cancelled), so that
    /// [`join`](ScopedJoinHandle::join) will not wait.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// The green thread's identity.
    pub fn thread(&self) -> &Thread {
        self.thread.get_or_init(|| self.handle.thread())
    }

    /// Cancels the green thread, as [`JoinHandle::cancel`] does; its result becomes
    /// `Err(JoinError::Cancelled)`.
    pub fn cancel(&self) {
        self.handle.cancel();
    }
}

impl<T> fmt::Debug for ScopedJoinHandle<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedJoinHandle")
            .field("thread", &self.thread)
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Where a scope is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScopeState {
    /// Its closure runs, or has returned and `scope` waits for its green threads.
    Open,
    /// Its closure unwound, or the green thread waiting at its end was cancelled or timed out
    /// there: the green threads have been cancelled, and new ones are cancelled at spawn.
    Cancelling,
    /// The runtime is ending and force-unwinds the stack `scope` is on, with no green thread to
    /// wait in it: its green threads are ended at once, and no new one can be spawned.
    Abandoned,
}

/// The record of one [`scope`], shared by its `Scope`, its green threads (through
/// `ChildEnded`) and their handles.
pub(super) struct ScopeData {
    children: RefCell<Children>,
    /// Green threads of the scope that panicked and whose panic no `join` has taken.
    unjoined_panics: Cell<usize>,
    /// The green thread that waits at the end of the scope for the last of its green threads,
    /// and the park it waits in, while it does. Registered at each park of the wait: the green
    /// thread that runs the end of `scope`, which is not the one that entered it when a
    /// generator holding the scope was handed to another green thread.
    waiter: RefCell<Option<(Rc<Task>, u64)>>,
    state: Cell<ScopeState>,
    /// `scope` was called while its green thread was unwinding: it could not wait.
    entered_while_unwinding: bool,
    /// The waiter is counted by the scheduler as waiting for others (see `wait_for_all`).
    counted_waiting: Cell<bool>,
}

impl ScopeData {
    /// Waits, in the green thread running this code, until every green thread of the scope has
    /// ended, and returns the payload of the unwind that interrupted the wait, if one did (a
    /// cancellation, an elapsed timeout, the runtime ending), for the caller to resume once the
    /// wait is over. With `interrupted` (the closure unwound) or after an interruption, the
    /// green threads still alive are cancelled first, and the wait goes on whatever else
    /// happens.
    /// What names this scope to `runtime::dump`: each of its green threads has it as
    /// `Task::scope`, and its waiter in `Wait::Scope`.
    fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    fn wait_for_all(&self, mut interrupted: bool) -> Option<Payload> {
        const WHAT: &str = "greenweave::thread::scope";
        let mut payload = None;
        loop {
            if !scheduler::in_green_thread() {
                // No green thread runs this code, so none can wait in it: the runtime is
                // ending (its shutdown force-unwinds a green thread's stack, or a generator's
                // or greenlet's dropped with it) or has ended (a generator dropped after
                // `run`). Nothing will run the green threads again, so they are ended here,
                // before the frames they borrow from go.
                self.end_now();
                break;
            }
            let running = self.children.borrow().running;
            if running == 0 {
                break;
            }
            if std::thread::panicking() {
                // The scope's own unwind (its closure's stack force-unwound) runs inside another
                // that is still going on: a generator or greenlet suspended in the closure,
                // dropped during a panic or a cancellation of the green thread running it.
                // Waiting would switch. At the runtime's end (its shutdown cancelled that green
                // thread) the green threads are stopped where they stand, never to run again;
                // otherwise nothing can keep them from outliving the frames they borrow.
                if !scheduler::runtime_is_ending() {
                    cannot_wait_while_unwinding(running);
                }
                report_stopped_at_the_end(running);
                self.end_now();
                break;
            }
            if interrupted && self.state.get() == ScopeState::Open {
                self.cancel_children();
            }
            let register = |task: &Rc<Task>, park| {
                *self.waiter.borrow_mut() = Some((task.clone(), park));
            };
            let wait = Wait::Scope {
                running,
                scope: self.address(),
            };
            let park = panic::catch_unwind(AssertUnwindSafe(|| {
                if interrupted {
                    if scheduler::cancel_requested() && !self.counted_waiting.replace(true) {
                        with_scheduler(WHAT, |scheduler| scheduler.count_waiting_for_others(true));
                    }
                    // Already interrupted: the green threads must still end before the frames
                    // they borrow from go, and a park that raised again each time would spin.
                    scheduler::park_uninterruptible_with(WHAT, wait, register);
                } else {
                    let _woken: Wake = scheduler::park(WHAT, wait, None, None, register);
                }
            }));
            if let Err(unwind) = park {
                // A cancellation or an elapsed timeout (or, when the runtime ends, the unwind of
                // the stack this wait parked on, which wins over an earlier one so that it
                // reaches that stack's root; the next turn of the loop finds no green thread
                // running and ends the scope's green threads): kept, and resumed once the wait
                // is over.
                payload = Some(unwind);
                interrupted = true;
            }
        }
        drop(self.waiter.take());
        self.uncount_waiting();
        payload
    }

    /// Cancels every green thread of the scope still alive; later spawns are cancelled too.
    fn cancel_children(&self) {
        self.state.set(ScopeState::Cancelling);
        let children = self.children.borrow().alive();
        for child in children {
            // As `JoinHandle::cancel`.
            if child.state.get() == TaskState::Finished {
                continue;
            }
            child.request_cancel();
            if child.state.get() == TaskState::Parked {
                let park = child.park_number.get();
                with_scheduler("greenweave::thread::scope", |scheduler| {
                    scheduler.unpark(child.clone(), park, Wake::Cancelled)
                });
            }
        }
    }

    /// Ends every green thread of the scope still alive, now: for a scope whose stack the ending
    /// runtime force-unwinds, whose green threads the scheduler will not run again. Each is
    /// unwound (its destructors run, while the frames of `scope`'s caller are still whole) or,
    /// if it keeps catching its cancellation, leaked and never resumed
    /// (`scheduler::end_abandoned`).
    fn end_now(&self) {
        self.state.set(ScopeState::Abandoned);
        let children = self.children.borrow().alive();
        for child in children {
            scheduler::end_abandoned(&child);
        }
    }

    /// Takes back the waiter's count as a green thread waiting for others, if it was counted.
    fn uncount_waiting(&self) {
        if self.counted_waiting.replace(false) && scheduler::in_runtime() {
            with_scheduler("greenweave::thread::scope", |scheduler| {
                scheduler.count_waiting_for_others(false)
            });
        }
    }
}

/// Aborts for a scope that must wait for `running` green threads while the green thread that
/// would wait is unwinding: it may not switch (std's panic state is per OS thread), and the
/// green threads may not outlive the frames they borrow, which the unwind is about to free. A
/// panic would be caught by the scope itself (or unwind those frames), so this cannot be one.
#[cold]
#[inline(never)]
fn cannot_wait_while_unwinding(running: usize) -> ! {
    eprintln!(
        "fatal runtime error: greenweave: a thread::scope with {running} green thread(s) still \
         running was unwound while the green thread running it was itself unwinding (a \
         generator or greenlet suspended inside the scope's closure, dropped during a panic or a \
         cancellation): the scope can neither wait for them (a green thread does not switch \
         while it unwinds) nor let them outlive the frames they borrow; aborting. Finish or drop \
         such a generator or greenlet before the unwind starts."
    );
    std::process::abort()
}

/// Says on stderr that the runtime's end stopped `running` green threads of a scope where they
/// stood (`wait_for_all`, the scope unwound inside its green thread's own unwind): their
/// destructors do not run.
#[cold]
fn report_stopped_at_the_end(running: usize) {
    eprintln!(
        "greenweave: the runtime is ending, and a thread::scope with {running} green thread(s) \
         still running was unwound while the green thread running it was itself unwinding (a \
         generator or greenlet suspended inside the scope's closure, dropped by its green \
         thread's cancellation): the scope could not wait for them (a green thread does not \
         switch while it unwinds), so they were stopped where they stood and their stacks \
         leaked, their destructors not run. Finish or drop such a generator or greenlet before \
         the runtime ends."
    );
}

/// The green threads of a scope still alive, in a slab: a green thread takes its own entry out
/// when it ends (`ChildEnded`), so a scope that spawns many in turn keeps only the live ones.
#[derive(Default)]
struct Children {
    slots: Vec<Option<Rc<Task>>>,
    free: Vec<usize>,
    /// Slots reserved or filled: green threads spawned and not yet ended.
    running: usize,
}

impl Children {
    fn reserve(&mut self) -> usize {
        self.running += 1;
        match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        }
    }

    fn fill(&mut self, slot: usize, task: Rc<Task>) {
        self.slots[slot] = Some(task);
    }

    /// Takes `slot` out; returns its task, if it was filled.
    fn release(&mut self, slot: usize) -> Option<Rc<Task>> {
        self.running -= 1;
        self.free.push(slot);
        self.slots[slot].take()
    }

    fn alive(&self) -> Vec<Rc<Task>> {
        self.slots.iter().flatten().cloned().collect()
    }
}

/// What a scoped green thread's body is made of: the user's closure, dropped before `ended`
/// (fields drop in order) when the body is dropped unrun.
struct Child<F> {
    f: F,
    ended: ChildEnded,
}

/// Tells the scope, when dropped, that one of its green threads has ended: dropped as the last
/// act of its body (or with its unrun body), after everything that borrows from outside the
/// scope is gone. Wakes the waiter if it waits for the last one.
///
/// Also dropped, with its `Child`, when a spawn fails between `reserve` and the spawn (the
/// stack is mapped before the reservation, so only a panic in between could).
struct ChildEnded {
    data: Rc<ScopeData>,
    slot: usize,
}

impl Drop for ChildEnded {
    fn drop(&mut self) {
        let (task, running) = {
            let mut children = self.data.children.borrow_mut();
            let task = children.release(self.slot);
            (task, children.running)
        };
        // Not the task's last reference (the scheduler holds one while it runs or is ended).
        drop(task);
        if running > 0 {
            return;
        }
        self.data.uncount_waiting();
        let waiter = self.data.waiter.take();
        if let Some((task, park)) = waiter
            && scheduler::in_runtime()
        {
            scheduler::notify(task, park);
        }
    }
}
