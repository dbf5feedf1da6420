//! The FIFO queue of parked green threads that every green synchronisation primitive is
//! built on.
//!
//! Owns: [`WaitQueue`] and [`WaiterList`], the slab-backed list in which it and
//! [`GrantQueue`](super::grant_queue::GrantQueue) keep their waiters, so that a waiter that
//! leaves early takes its entry out in O(1) and a wait allocates nothing.
//! May not: decide what a wake-up means (callers re-check their condition).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use crate::runtime::scheduler;
use crate::runtime::task::{Task, Wait, Wake};

/// A parked green thread and the number of the park it waits in.
type Waiter = (Rc<Task>, u64);

/// Where [`WaitQueue::push`] put a waiter, for [`WaitQueue::remove`] to take it out again
/// without a search.
///
/// It names the entry by its place (the `first` slot or a slot of the list behind it) and by
/// who is in it (the task's address and park number: a task's park numbers never repeat), so a
/// registration whose entry a notify has already taken, and whose slot now holds somebody
/// else, removes nothing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Registration {
    /// The slot in `rest`, or [`NIL`] if the entry went into `first`.
    slot: u32,
    /// Only compared, never dereferenced.
    task: *const Task,
    park: u64,
}

/// Green threads waiting for something another green thread will signal, in arrival order.
///
/// A waiter that leaves without being notified (its deadline passed, or an unwind went through
/// its park: a cancellation, a `time::timeout` scope ending) takes its own entry out, in O(1):
/// [`wait`](WaitQueue::wait) does so on the way out, and a primitive that parks through
/// `scheduler::park` itself can with the [`Registration`] that [`push`](WaitQueue::push)
/// returns. An entry left behind all the same (a caller that does not remove it) is stale,
/// recognised by its park number: the notify calls skip it, and `push` drops the stale entries
/// at the back of the queue, so the queue never wakes the wrong park and never holds more than
/// one stale entry per green thread parked behind it.
///
/// The longest waiter sits in a slot of its own, `first`, and only the others in a list: most
/// queues hold one waiter at a time (a receiver, one blocked sender, one waiter on an event),
/// and a `Cell` moved in and out costs a few instructions where the list costs a borrow flag
/// and index arithmetic. Invariant: `first` is empty only if `rest` is too, so `first` is
/// always the front. An entry only ever moves from `rest` into `first`, never back.
#[derive(Default)]
pub(crate) struct WaitQueue {
    first: Cell<Option<Waiter>>,
    rest: RefCell<WaiterList<Waiter>>,
}

impl WaitQueue {
    pub(crate) const fn new() -> WaitQueue {
        WaitQueue {
            first: Cell::new(None),
            rest: RefCell::new(WaiterList::new()),
        }
    }

    /// Parks the running green thread at the back of the queue until a notify reaches it
    /// (`Wake::Notified`) or `deadline` passes (`Wake::TimedOut`). `what` names the primitive
    /// in the deadlock report. Callers re-check their condition after waking.
    ///
    /// However the wait ends (an unwind out of the park included), the waiter's entry is no
    /// longer in the queue afterwards.
    pub(crate) fn wait(&self, what: &'static str, deadline: Option<Instant>) -> Wake {
        let departure = Departure {
            queue: self,
            registration: Cell::new(None),
        };
        let wait = Wait::Sync {
            what,
            address: self as *const WaitQueue as usize,
        };
        scheduler::park(what, wait, deadline, None, |task, park| {
            // A park that goes round again registers again: the earlier entry is stale.
            if let Some(earlier) = departure.registration.take() {
                self.remove(earlier);
            }
            let registration = self.push(task.clone(), park);
            departure.registration.set(Some(registration));
        })
        // `departure` drops here, and on an unwind: a notify took the entry already, but a
        // timeout, a cancellation or a stray remote wake-up left it.
    }

    /// Queues `task`, parking in park number `park`, at the back (for primitives that park
    /// through `scheduler::park` themselves); the registration lets the waiter take the entry
    /// out again with [`remove`](WaitQueue::remove) when it leaves without being notified.
    #[inline]
    pub(crate) fn push(&self, task: Rc<Task>, park: u64) -> Registration {
        let mut registration = Registration {
            slot: NIL,
            task: Rc::as_ptr(&task),
            park,
        };
        match self.first.take() {
            None => self.first.set(Some((task, park))),
            Some(first) => {
                registration.slot = self.push_behind(first, (task, park));
            }
        }
        registration
    }

    /// `push` when the queue is not empty: `first` (taken out of its slot) and the entries
    /// behind it stay, except stale ones at the back, which go (a caller that never removes
    /// its entries, timing out again and again, would otherwise grow the queue for ever).
    /// Returns the slot of `waiter` in `rest`, or `NIL` if it took the place of a stale
    /// `first`.
    #[inline(never)]
    fn push_behind(&self, first: Waiter, waiter: Waiter) -> u32 {
        // One at a time, so that no task is dropped while `rest` is borrowed.
        loop {
            let mut rest = self.rest.borrow_mut();
            if rest
                .back()
                .is_none_or(|(task, park)| task.is_in_park(*park))
            {
                break;
            }
            let stale = rest.pop_back();
            drop(rest);
            drop(stale);
        }
        let mut rest = self.rest.borrow_mut();
        if rest.is_empty() && !first.0.is_in_park(first.1) {
            drop(rest);
            self.first.set(Some(waiter));
            drop(first);
            return NIL;
        }
        self.first.set(Some(first));
        rest.push_back(waiter)
    }

    /// Takes the entry that `registration` names out of the queue, if it is still there (a
    /// notify takes the entry it wakes). O(1); keeps the others' order. Returns whether it was
    /// there: if not, a notify (or `push`, dropping it as stale) took it, which a `select`
    /// woken through several queues needs to know to pass a wake-up on.
    pub(crate) fn remove(&self, registration: Registration) -> bool {
        let is_it = |(task, park): &Waiter| {
            std::ptr::eq(Rc::as_ptr(task), registration.task) && *park == registration.park
        };
        // Checked first whatever the slot: an entry queued behind may have moved up to `first`.
        let first = self.first.take();
        if first.as_ref().is_some_and(is_it) {
            let next = self.rest.borrow_mut().pop_front();
            self.first.set(next);
            drop(first);
            return true;
        }
        self.first.set(first);
        if registration.slot != NIL {
            let mut rest = self.rest.borrow_mut();
            let removed = rest
                .get(registration.slot)
                .is_some_and(is_it)
                .then(|| rest.unlink(registration.slot));
            drop(rest);
            return removed.is_some();
        }
        false
    }

    /// How many entries the queue holds, stale ones included.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        let first = self.first.take();
        let entries = usize::from(first.is_some()) + self.rest.borrow().len();
        self.first.set(first);
        entries
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
    /// Always inlined: a channel's send wakes its receiver through it.
    #[inline(always)]
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

/// "No slot": the end of a list, or a waiter in `first`.
pub(super) const NIL: u32 = u32::MAX;

/// One slot of a [`WaiterList`].
struct Slot<E> {
    /// `None` while the slot is free.
    entry: Option<E>,
    prev: u32,
    /// The next entry in the queue; in a free slot, the next free slot.
    next: u32,
}

/// Waiters in arrival order: a doubly linked list threaded through a vector of slots, so an
/// entry can leave from anywhere in O(1) given its slot, and a wait allocates nothing once
/// the vector has grown to the most waiters the queue has held at once. Freed slots are
/// reused, last freed first. Shared by [`WaitQueue`] (the waiters behind `first`) and
/// [`GrantQueue`](super::grant_queue::GrantQueue).
pub(super) struct WaiterList<E> {
    slots: Vec<Slot<E>>,
    head: u32,
    tail: u32,
    free: u32,
    len: usize,
}

impl<E> WaiterList<E> {
    pub(super) const fn new() -> WaiterList<E> {
        WaiterList {
            slots: Vec::new(),
            head: NIL,
            tail: NIL,
            free: NIL,
            len: 0,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The entry in `slot`, if the slot is in use.
    pub(super) fn get(&self, slot: u32) -> Option<&E> {
        self.slots.get(slot as usize)?.entry.as_ref()
    }

    /// The entry in `slot`, if the slot is in use.
    pub(super) fn get_mut(&mut self, slot: u32) -> Option<&mut E> {
        self.slots.get_mut(slot as usize)?.entry.as_mut()
    }

    pub(super) fn front(&self) -> Option<&E> {
        self.get(self.head)
    }

    pub(super) fn back(&self) -> Option<&E> {
        self.get(self.tail)
    }

    /// Queues `entry` at the back; returns its slot, which stays its own until it leaves.
    pub(super) fn push_back(&mut self, entry: E) -> u32 {
        let filled = Slot {
            entry: Some(entry),
            prev: self.tail,
            next: NIL,
        };
        let slot = if self.free != NIL {
            let slot = self.free;
            self.free = self.slots[slot as usize].next;
            self.slots[slot as usize] = filled;
            slot
        } else {
            let slot = u32::try_from(self.slots.len())
                .ok()
                .filter(|&slot| slot != NIL)
                .expect("more than 4 billion green threads wait on one primitive");
            self.slots.push(filled);
            slot
        };
        match self.tail {
            NIL => self.head = slot,
            tail => self.slots[tail as usize].next = slot,
        }
        self.tail = slot;
        self.len += 1;
        slot
    }

    pub(super) fn pop_front(&mut self) -> Option<E> {
        (self.head != NIL).then(|| self.unlink(self.head))
    }

    pub(super) fn pop_back(&mut self) -> Option<E> {
        (self.tail != NIL).then(|| self.unlink(self.tail))
    }

    /// Takes the entry in `slot` (which must be in use) out of the list and frees the slot.
    pub(super) fn unlink(&mut self, slot: u32) -> E {
        let freed = &mut self.slots[slot as usize];
        let entry = freed.entry.take().expect("unlink: the slot is in use");
        let (prev, next) = (freed.prev, freed.next);
        freed.next = self.free;
        self.free = slot;
        match prev {
            NIL => self.head = next,
            prev => self.slots[prev as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            next => self.slots[next as usize].prev = prev,
        }
        self.len -= 1;
        entry
    }

    /// The entries, front to back.
    pub(super) fn iter(&self) -> impl Iterator<Item = &E> {
        let mut slot = self.head;
        std::iter::from_fn(move || {
            let current = self.slots.get(slot as usize)?;
            slot = current.next;
            current.entry.as_ref()
        })
    }
}

impl<E> Default for WaiterList<E> {
    fn default() -> WaiterList<E> {
        WaiterList::new()
    }
}

/// Takes a waiter's entry out of the queue when its wait ends, however it ends.
struct Departure<'a> {
    queue: &'a WaitQueue,
    registration: Cell<Option<Registration>>,
}

impl Drop for Departure<'_> {
    fn drop(&mut self) {
        if let Some(registration) = self.registration.take() {
            self.queue.remove(registration);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::time::{Duration, Instant};

    use super::WaitQueue;
    use crate::runtime::scheduler;
    use crate::runtime::task::{Wait, Wake};

    #[test]
    fn waiters_whose_deadline_passes_leave_no_entry_behind() {
        crate::run(|| {
            let queue = WaitQueue::new();
            for _ in 0..100_000 {
                assert_eq!(queue.wait("test", Some(Instant::now())), Wake::TimedOut);
            }
            assert_eq!(queue.entries(), 0);
        });
    }

    #[test]
    fn a_cancelled_waiter_and_one_ended_by_a_timeout_scope_leave_no_entry_behind() {
        crate::run(|| {
            let queue = Rc::new(WaitQueue::new());
            let waiter = {
                let queue = queue.clone();
                crate::spawn(move || queue.wait("test", None))
            };
            crate::thread::yield_now(); // it parks
            assert_eq!(queue.entries(), 1);
            waiter.cancel();
            assert!(waiter.join().unwrap_err().is_cancelled());
            assert_eq!(queue.entries(), 0);

            // A scope's deadline wakes a wait spuriously (callers re-check, then park again),
            // and the next park ends the scope: wait in a loop, as every caller does.
            let ended = crate::time::timeout(Duration::from_millis(1), || {
                loop {
                    queue.wait("test", None);
                }
            });
            assert!(ended.is_err());
            assert_eq!(queue.entries(), 0);
        });
    }

    #[test]
    fn a_waiter_leaving_from_the_middle_keeps_the_others_in_arrival_order() {
        crate::run(|| {
            let queue = Rc::new(WaitQueue::new());
            let woken = Rc::new(RefCell::new(Vec::new()));
            // "a", "b" and "c" arrive in this order; "b" gives up after 1 ms.
            let waiters: Vec<_> = [("a", None), ("b", Some(1)), ("c", None)]
                .into_iter()
                .map(|(name, patience)| {
                    let (queue, woken) = (queue.clone(), woken.clone());
                    crate::spawn(move || {
                        let deadline =
                            patience.map(|ms| Instant::now() + Duration::from_millis(ms));
                        let wake = queue.wait("test", deadline);
                        woken.borrow_mut().push((name, wake));
                    })
                })
                .collect();
            crate::thread::yield_now(); // all three park
            assert_eq!(queue.entries(), 3);
            crate::thread::sleep(Duration::from_millis(2)); // "b" times out
            assert_eq!(queue.entries(), 2);
            assert!(queue.notify_one());
            crate::thread::yield_now();
            assert!(queue.notify_one());
            assert!(!queue.notify_one());
            for waiter in waiters {
                waiter.join().unwrap();
            }
            assert_eq!(
                *woken.borrow(),
                [
                    ("b", Wake::TimedOut),
                    ("a", Wake::Notified),
                    ("c", Wake::Notified)
                ]
            );
            assert_eq!(queue.entries(), 0);
        });
    }

    #[test]
    fn a_waiter_that_pushes_and_never_removes_its_entries_leaves_at_most_one_behind() {
        crate::run(|| {
            let queue = WaitQueue::new();
            let patient = Rc::new(WaitQueue::new());
            // Another green thread parked in front, so the stale entries queue behind it.
            let other = {
                let queue = patient.clone();
                crate::spawn(move || queue.wait("test", None))
            };
            crate::thread::yield_now();
            for _ in 0..1_000 {
                scheduler::park(
                    "test",
                    Wait::Sync {
                        what: "test",
                        address: 0,
                    },
                    Some(Instant::now()),
                    None,
                    |task, park| {
                        patient.push(task.clone(), park);
                        queue.push(task.clone(), park);
                    },
                );
            }
            assert_eq!(queue.entries(), 1);
            assert_eq!(patient.entries(), 2);
            assert!(patient.notify_one());
            other.join().unwrap();
        });
    }
}
