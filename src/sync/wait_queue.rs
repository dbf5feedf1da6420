//! The FIFO queue of parked green threads that every green synchronisation primitive is
//! built on.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use crate::runtime::scheduler;
use crate::runtime::task::{Task, Wait, Wake};

/// A parked green thread and the number of the park it waits in.
type Waiter = (Rc<Task>, u64);

/// Green threads waiting for something another green thread will signal, in arrival order.
///
/// A waiter that timed out or was cancelled leaves a stale entry, recognised by its park
/// number and skipped by the notify calls; the queue therefore never wakes the wrong park.
///
/// The longest waiter sits in a slot of its own, `first`, and only the others in a deque: most
/// queues hold one waiter at a time (a receiver, one blocked sender, one waiter on an event),
/// and a `Cell` moved in and out costs a few instructions where the deque costs a borrow flag
/// and index arithmetic. Invariant: `first` is empty only if `rest` is too, so `first` is
/// always the front.
#[derive(Default)]
pub(crate) struct WaitQueue {
    first: Cell<Option<Waiter>>,
    rest: RefCell<VecDeque<Waiter>>,
}

impl WaitQueue {
    pub(crate) const fn new() -> WaitQueue {
        WaitQueue {
            first: Cell::new(None),
            rest: RefCell::new(VecDeque::new()),
        }
    }

    /// Parks the running green thread at the back of the queue until a notify reaches it
    /// (`Wake::Notified`) or `deadline` passes (`Wake::TimedOut`). `what` names the primitive
    /// in the deadlock report. Callers re-check their condition after waking.
    pub(crate) fn wait(&self, what: &'static str, deadline: Option<Instant>) -> Wake {
        scheduler::park(what, Wait::Sync(what), deadline, None, |task, park| {
            self.push(task.clone(), park);
        })
    }

    /// Queues `task`, parking in park number `park`, at the back (for primitives that park
    /// through `scheduler::park` themselves).
    #[inline]
    pub(crate) fn push(&self, task: Rc<Task>, park: u64) {
        match self.first.take() {
            None => self.first.set(Some((task, park))),
            Some(first) => {
                self.first.set(Some(first));
                self.rest.borrow_mut().push_back((task, park));
            }
        }
    }

    /// Takes the front entry, live or stale.
    fn pop_front(&self) -> Option<Waiter> {
        let front = self.first.take()?;
        let next = self.rest.borrow_mut().pop_front();
        self.first.set(next);
        Some(front)
    }

    /// Whether some green thread is still parked here (not woken or timed out since).
    pub(crate) fn has_parked_waiter(&self) -> bool {
        let first = self.first.take();
        let parked = first
            .as_ref()
            .is_some_and(|(task, park)| task.is_in_park(*park))
            || self
                .rest
                .borrow()
                .iter()
                .any(|(task, park)| task.is_in_park(*park));
        self.first.set(first);
        parked
    }

    /// Wakes the longest-waiting green thread still parked here; returns whether there was one.
    #[inline]
    pub(crate) fn notify_one(&self) -> bool {
        let Some((task, park)) = self.first.take() else {
            return false;
        };
        // The usual case: a lone waiter, still parked. (`try_borrow` cannot fail here, as no
        // borrow of `rest` outlives a call; it only keeps a panic path out of the fast path.)
        if self.rest.try_borrow().is_ok_and(|rest| rest.is_empty()) && task.is_in_park(park) {
            return scheduler::notify(task, park);
        }
        self.notify_one_after(task, park)
    }

    /// `notify_one` past the front entry `(task, park)`, already taken out of `first`, when
    /// others wait behind it or it is stale (out of line: the usual front is alone and live).
    #[inline(never)]
    fn notify_one_after(&self, task: Rc<Task>, park: u64) -> bool {
        let next = self.rest.borrow_mut().pop_front();
        self.first.set(next);
        if scheduler::notify(task, park) {
            return true;
        }
        while let Some((task, park)) = self.pop_front() {
            if scheduler::notify(task, park) {
                return true;
            }
        }
        false
    }

    /// Wakes every green thread parked here.
    pub(crate) fn notify_all(&self) {
        while self.notify_one() {}
    }
}
