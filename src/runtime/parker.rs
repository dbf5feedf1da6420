//! The state behind `thread::park`, `park_timeout` and `Thread::unpark`: std's park token for
//! green threads.
//!
//! Owns: [`Parker`], what every `thread::Thread` handle of one green thread shares (its
//! identity, the token, and where an unpark sends its wake-up), and the park loop
//! ([`park_green`]). The public functions are `thread::park`'s; this is the runtime's half, so
//! that a task (`task::Task::parker`) can hold its parker without the runtime reaching into
//! `thread`.
//!
//! May not: wake a green thread by any path but the runtime's own: on the green thread's OS
//! thread an unpark goes through the scheduler directly, from anywhere else through the
//! runtime's [`RemoteQueue`] (as `sync::shared` does). A handle names its green thread by
//! [`TaskKey`], whose id is never reused in a runtime, so a handle that outlives its green
//! thread wakes nothing (not the recycled task in the same slot).
//!
//! The token has three states. A park consumes a token that is there (`NOTIFIED` to `EMPTY`)
//! and returns; otherwise it marks the parker `PARKED` just before its switch out (in the
//! park's `register` step, after everything that could itself park), and `unpark` that finds
//! `PARKED` sends the wake-up. An unpark that lands between the first look and the mark
//! leaves `NOTIFIED`, which the mark sees: the green thread then wakes itself through the
//! remote queue, which the scheduler reads only after the switch, so no wake-up is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use super::budget;
use super::scheduler::{self, RemoteQueue, with_scheduler};
use super::task::{Task, TaskKey, TaskState, Wait, Wake};

/// No token, nobody parked.
const EMPTY: u8 = 0;
/// An unpark left a token for the next park.
const NOTIFIED: u8 = 1;
/// The green thread is parked (or about to switch out to park): an unpark must wake it.
const PARKED: u8 = 2;

/// What the `thread::Thread` handles of one green thread share.
pub(crate) struct Parker {
    /// The green thread's id (never 0).
    pub(crate) id: std::num::NonZeroU64,
    pub(crate) name: Option<Box<str>>,
    /// The runtime's wake-up queue and the task's key; `None` for a handle made after the
    /// green thread ended (there is nothing left to wake).
    target: Option<(Arc<RemoteQueue>, TaskKey)>,
    state: AtomicU8,
}

impl Parker {
    /// The parker of `task`, made the first time one of its handles is.
    pub(crate) fn of(task: &Task) -> Arc<Parker> {
        let mut slot = task.parker.borrow_mut();
        slot.get_or_insert_with(|| {
            // A task that has not finished belongs to the runtime running on this OS thread
            // (tasks and their `JoinHandle`s are `!Send`), whose queue reaches it.
            let target =
                (task.state.get() != TaskState::Finished && scheduler::in_runtime()).then(|| {
                    with_scheduler("greenweave::thread::Thread", |scheduler| {
                        (scheduler.remote.clone(), task.key())
                    })
                });
            Arc::new(Parker {
                id: std::num::NonZeroU64::new(task.id).expect("green thread ids start at 1"),
                name: task.name.clone(),
                target,
                state: AtomicU8::new(EMPTY),
            })
        })
        .clone()
    }

    /// Leaves the token, and wakes the green thread if it is parked for it.
    pub(crate) fn unpark(&self) {
        // Release: what the unparker did before is seen by the parked thread after its
        // Acquire of the token.
        if self.state.swap(NOTIFIED, Ordering::Release) == PARKED {
            self.wake();
        }
    }

    /// Wakes the green thread in whatever park it is in (it re-checks the token): directly if
    /// its runtime runs on this OS thread, else through the runtime's remote queue.
    fn wake(&self) {
        if let Some((remote, key)) = &self.target
            && !scheduler::wake_if_local(remote, *key, None)
        {
            remote.wake(*key);
        }
    }

    /// Wakes the green thread through its runtime's remote queue, which the scheduler reads
    /// between runs of green threads: from the green thread itself, before it switches out.
    fn wake_after_switch(&self) {
        if let Some((remote, key)) = &self.target {
            remote.wake(*key);
        }
    }

    /// Consumes the token if there is one.
    fn take_token(&self) -> bool {
        self.state
            .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }
}

/// Puts `PARKED` back to `EMPTY` when a park ends by an unwind (a cancellation, a
/// `time::timeout` scope), leaving a token that arrived meanwhile for the next park.
struct Unmark<'a>(&'a Parker);

impl Drop for Unmark<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .state
            .compare_exchange(PARKED, EMPTY, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// The park of a green thread: until the token is there, or `deadline` passes.
pub(crate) fn park_green(what: &'static str, deadline: Option<Instant>) {
    park_green_with(what, deadline, || ());
}

/// [`park_green`], running `after_first_look` between the look for a token and the park (for
/// the test of an unpark that lands there).
#[inline(always)]
pub(crate) fn park_green_with(
    what: &'static str,
    deadline: Option<Instant>,
    after_first_look: impl FnOnce(),
) {
    budget::spend(what);
    let parker = with_scheduler(what, |scheduler| Parker::of(&scheduler.current_task()));
    if parker.take_token() {
        return;
    }
    after_first_look();
    let _unmark = Unmark(&parker);
    loop {
        let wake = scheduler::park(what, Wait::Park, deadline, None, |_, _| {
            if parker
                .state
                .compare_exchange(EMPTY, PARKED, Ordering::Acquire, Ordering::Acquire)
                .is_err()
            {
                // An unpark came after the first look: be woken at once (the scheduler reads
                // its remote queue only after this switch; a direct wake-up would find this
                // green thread running, not parked, and do nothing).
                parker.wake_after_switch();
            }
        });
        if parker.state.swap(EMPTY, Ordering::Acquire) == NOTIFIED {
            return;
        }
        // `TimedOut` is our own deadline (a `time::timeout` scope's comes back as `Notified`,
        // and ends at the next park) or a park while unwinding, which cannot wait.
        if wake == Wake::TimedOut {
            return;
        }
        // A wake-up meant for another wait, or a scope's deadline: park again.
    }
}
