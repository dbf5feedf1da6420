//! The FIFO queue of green threads waiting to be *handed* a resource (a lock, a permit) by the
//! green thread that releases it: the hand-off that makes [`Mutex`](super::Mutex),
//! [`RwLock`](super::RwLock) and [`Semaphore`](super::Semaphore) fair.
//!
//! Owns: the waiters' order and, per waiter, whether it has been granted what it waits for.
//! [`WaitQueue`](super::wait_queue::WaitQueue) wakes a waiter that then re-checks and, if a
//! green thread that came along meanwhile took the resource first, queues again at the back.
//! Here the releaser updates the primitive's state on the waiter's behalf *and then* wakes it,
//! so the waiter owns the resource before it even runs: nobody can overtake it, and a waiter
//! woken for any other reason (a stray remote wake-up) parks again without losing its place.
//!
//! May not: know what is granted. The primitive owns its state, decides whom to grant
//! ([`GrantQueue::front`], [`GrantQueue::grant_front`]), and takes back a grant whose waiter
//! left without using it (the `leave` callback of [`GrantQueue::wait`]).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use crate::runtime::scheduler::{self, with_scheduler};
use crate::runtime::task::{Task, Wait, Wake};

/// One parked green thread and what it asked for.
struct Waiter<K> {
    /// What it waits for, for the primitive to decide (a read or a write, say).
    kind: K,
    task: Rc<Task>,
    /// The number of its current park, refreshed every time it parks again.
    park: Cell<u64>,
    /// Set by the releaser when it hands the resource over; from then on the primitive counts
    /// this waiter as a holder.
    granted: Cell<bool>,
}

/// Green threads waiting to be granted a resource, in arrival order.
///
/// Only waiters that are still waiting are in the queue: a waiter that times out or unwinds
/// (cancellation, a `time::timeout` scope) removes itself on the way out.
pub(crate) struct GrantQueue<K: Copy> {
    waiters: RefCell<VecDeque<Rc<Waiter<K>>>>,
}

impl<K: Copy> GrantQueue<K> {
    pub(crate) const fn new() -> GrantQueue<K> {
        GrantQueue {
            waiters: RefCell::new(VecDeque::new()),
        }
    }

    /// What the longest-waiting green thread asked for.
    pub(crate) fn front(&self) -> Option<K> {
        self.waiters.borrow().front().map(|waiter| waiter.kind)
    }

    /// Whether nobody waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.borrow().is_empty()
    }

    /// How many green threads wait.
    pub(crate) fn len(&self) -> usize {
        self.waiters.borrow().len()
    }

    /// Hands the resource to the longest-waiting green thread: removes it from the queue,
    /// marks it granted and makes it runnable. The caller has already updated its own state
    /// to count that waiter as a holder. Returns what the waiter asked for, or `None` if the
    /// queue is empty.
    pub(crate) fn grant_front(&self) -> Option<K> {
        let waiter = self.waiters.borrow_mut().pop_front()?;
        waiter.granted.set(true);
        // A waiter that is not in its park (already woken, by a cancellation say) sees the
        // grant when it runs; `unpark` does nothing then.
        with_scheduler("a green lock's release", |scheduler| {
            scheduler.unpark(waiter.task.clone(), waiter.park.get(), Wake::Notified)
        });
        Some(waiter.kind)
    }

    /// Parks the running green thread at the back of the queue until a releaser grants it
    /// what it asked for (`true`), or until `deadline` passes first (`false`). `what` names
    /// the wait in the deadlock report.
    ///
    /// When the waiter leaves without returning `true` (its deadline passed, or an unwind
    /// went through the park: a cancellation, a `time::timeout` scope ending), it is removed
    /// from the queue and `leave(granted)` runs: `granted` says whether a releaser had handed
    /// it the resource in the meantime, which the primitive must then release again; either
    /// way the primitive may now be able to grant the waiters behind it.
    pub(crate) fn wait(
        &self,
        what: &'static str,
        kind: K,
        deadline: Option<Instant>,
        leave: impl Fn(bool),
    ) -> bool {
        let task = with_scheduler(what, |scheduler| scheduler.current_task());
        let waiter = Rc::new(Waiter {
            kind,
            task,
            park: Cell::new(0),
            granted: Cell::new(false),
        });
        self.waiters.borrow_mut().push_back(waiter.clone());
        let departure = Departure {
            queue: self,
            waiter: &waiter,
            leave: &leave,
        };
        loop {
            let wake = scheduler::park(what, Wait::Sync(what), deadline, None, |_, park| {
                waiter.park.set(park)
            });
            // A grant wins over a deadline that passed in the same turn of the scheduler.
            if waiter.granted.get() {
                std::mem::forget(departure);
                return true;
            }
            // `park` reports `TimedOut` only for our own deadline (an expired `time::timeout`
            // scope comes back as a spurious wake-up and ends at the next park) or, while this
            // thread unwinds, at once: either way the wait ends here.
            if wake == Wake::TimedOut && deadline.is_some() {
                drop(departure);
                return false;
            }
        }
    }
}

/// Takes a waiter that leaves without its grant out of the queue, and lets the primitive
/// take back a grant it will not use.
struct Departure<'a, K: Copy, F: Fn(bool)> {
    queue: &'a GrantQueue<K>,
    waiter: &'a Rc<Waiter<K>>,
    leave: &'a F,
}

impl<K: Copy, F: Fn(bool)> Drop for Departure<'_, K, F> {
    fn drop(&mut self) {
        let granted = self.waiter.granted.get();
        if !granted {
            self.queue
                .waiters
                .borrow_mut()
                .retain(|other| !Rc::ptr_eq(other, self.waiter));
        }
        (self.leave)(granted);
    }
}
