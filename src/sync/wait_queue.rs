//! The FIFO queue of parked green threads that every green synchronisation primitive is
//! built on.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use crate::runtime::scheduler::{self, with_scheduler};
use crate::runtime::task::{Task, Wait, Wake};

/// Green threads waiting for something another green thread will signal, in arrival order.
///
/// A waiter that timed out or was cancelled leaves a stale entry, recognised by its park
/// number and skipped by the notify calls; the queue therefore never wakes the wrong park.
#[derive(Default)]
pub(crate) struct WaitQueue {
    waiters: RefCell<VecDeque<(Rc<Task>, u64)>>,
}

impl WaitQueue {
    pub(crate) const fn new() -> WaitQueue {
        WaitQueue {
            waiters: RefCell::new(VecDeque::new()),
        }
    }

    /// Parks the running green thread at the back of the queue until a notify reaches it
    /// (`Wake::Notified`) or `deadline` passes (`Wake::TimedOut`). `what` names the primitive
    /// in the deadlock report. Callers re-check their condition after waking.
    pub(crate) fn wait(&self, what: &'static str, deadline: Option<Instant>) -> Wake {
        scheduler::park(what, Wait::Sync(what), deadline, None, |task, park| {
            self.waiters.borrow_mut().push_back((task.clone(), park));
        })
    }

    /// Wakes the longest-waiting green thread still parked here; returns whether there was one.
    pub(crate) fn notify_one(&self) -> bool {
        loop {
            let Some((task, park)) = self.waiters.borrow_mut().pop_front() else {
                return false;
            };
            if task.is_in_park(park) {
                with_scheduler("a green synchronisation primitive", |scheduler| {
                    scheduler.unpark(task, park, Wake::Notified)
                });
                return true;
            }
        }
    }

    /// Wakes every green thread parked here.
    pub(crate) fn notify_all(&self) {
        while self.notify_one() {}
    }
}
