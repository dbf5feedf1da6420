//! The FIFO queue of green threads waiting to be *handed* a resource (a lock, a permit) by the
//! green thread that releases it: the hand-off that makes [`Mutex`](super::Mutex),
//! [`RwLock`](super::RwLock) and [`Semaphore`](super::Semaphore) fair.
//!
//! Owns: the waiters' order (a waiter still in it has not been granted what it waits for).
//! [`WaitQueue`](super::wait_queue::WaitQueue) wakes a waiter that then re-checks and, if a
//! green thread that came along meanwhile took the resource first, queues again at the back.
//! Here the releaser updates the primitive's state on the waiter's behalf *and then* wakes it,
//! so the waiter owns the resource before it even runs: nobody can overtake it, and a waiter
//! woken for any other reason (a stray remote wake-up) parks again without losing its place.
//!
//! May not: know what is granted. The primitive owns its state, decides whom to grant
//! ([`GrantQueue::front`], [`GrantQueue::grant_front`]), and takes back a grant whose waiter
//! left without using it (the `leave` callback of [`GrantQueue::wait`]).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use super::wait_queue::WaiterList;
use crate::runtime::scheduler::{self, with_scheduler};
use crate::runtime::task::{Task, Wait, Wake};

/// One parked green thread and what it asked for.
struct Waiter<K> {
    /// What it waits for, for the primitive to decide (a read or a write, say).
    kind: K,
    task: Rc<Task>,
    /// The number of its current park, refreshed every time it parks again.
    park: u64,
    /// The task's park number when it queued: with the task's address, tells this wait's
    /// entry from one that has taken its slot since (a task's park numbers never repeat, and
    /// every wait parks at least once).
    queued_at: u64,
}

/// Which entry a waiter's is: its slot, the task's address (only compared, never
/// dereferenced) and `queued_at`.
#[derive(Clone, Copy)]
struct Identity {
    slot: u32,
    task: *const Task,
    queued_at: u64,
}

/// Green threads waiting to be granted a resource, in arrival order.
///
/// Only waiters that are still waiting are in the queue: a grant takes the waiter out (so a
/// waiter whose entry is gone has been granted), and a waiter that times out or unwinds
/// (cancellation, a `time::timeout` scope) removes itself on the way out, in O(1) through the
/// slot it keeps. A wait allocates nothing once the queue has grown to the most waiters it has
/// held at once.
pub(crate) struct GrantQueue<K: Copy> {
    waiters: RefCell<WaiterList<Waiter<K>>>,
}

impl<K: Copy> GrantQueue<K> {
    pub(crate) const fn new() -> GrantQueue<K> {
        GrantQueue {
            waiters: RefCell::new(WaiterList::new()),
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

    /// Hands the resource to the longest-waiting green thread: removes it from the queue
    /// (which is what tells it it was granted) and makes it runnable. The caller has already
    /// updated its own state to count that waiter as a holder. Returns what the waiter asked
    /// for, or `None` if the queue is empty.
    pub(crate) fn grant_front(&self) -> Option<K> {
        let waiter = self.waiters.borrow_mut().pop_front()?;
        // A waiter that is not in its park (already woken, by a cancellation say) sees the
        // grant when it runs; `unpark` does nothing then.
        with_scheduler("a green lock's release", |scheduler| {
            scheduler.unpark(waiter.task, waiter.park, Wake::Notified)
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
        let wait = Wait::Sync {
            what,
            address: self as *const GrantQueue<K> as usize,
        };
        self.wait_as(what, wait, kind, deadline, leave)
    }

    /// [`GrantQueue::wait`], recording the park as `wait` (a lock says who holds it).
    pub(crate) fn wait_as(
        &self,
        what: &'static str,
        wait: Wait,
        kind: K,
        deadline: Option<Instant>,
        leave: impl Fn(bool),
    ) -> bool {
        let task = with_scheduler(what, |scheduler| scheduler.current_task());
        let identity = Identity {
            slot: 0,
            task: Rc::as_ptr(&task),
            queued_at: task.park_number.get(),
        };
        let slot = self.waiters.borrow_mut().push_back(Waiter {
            kind,
            task,
            park: 0,
            queued_at: identity.queued_at,
        });
        let identity = Identity { slot, ..identity };
        let departure = Departure {
            queue: self,
            identity,
            leave: &leave,
        };
        loop {
            let wake = scheduler::park(what, wait, deadline, None, |_, park| {
                if let Some(waiter) = self.waiting(identity).as_deref_mut() {
                    waiter.park = park;
                }
            });
            // A grant wins over a deadline that passed in the same turn of the scheduler.
            if self.waiting(identity).is_none() {
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

    /// The entry of the wait `identity`, if it is still queued (not granted yet).
    fn waiting(&self, identity: Identity) -> Option<std::cell::RefMut<'_, Waiter<K>>> {
        std::cell::RefMut::filter_map(self.waiters.borrow_mut(), |waiters| {
            waiters.get_mut(identity.slot).filter(|waiter| {
                std::ptr::eq(Rc::as_ptr(&waiter.task), identity.task)
                    && waiter.queued_at == identity.queued_at
            })
        })
        .ok()
    }
}

/// Takes a waiter that leaves without its grant out of the queue, and lets the primitive
/// take back a grant it will not use.
struct Departure<'a, K: Copy, F: Fn(bool)> {
    queue: &'a GrantQueue<K>,
    identity: Identity,
    leave: &'a F,
}

impl<K: Copy, F: Fn(bool)> Drop for Departure<'_, K, F> {
    fn drop(&mut self) {
        let still_queued = self.queue.waiting(self.identity).is_some();
        let removed =
            still_queued.then(|| self.queue.waiters.borrow_mut().unlink(self.identity.slot));
        // Our own task: dropping its count runs nothing.
        drop(removed);
        (self.leave)(!still_queued);
    }
}
