//! Deadlines of parked green threads: a binary heap, nearest first.
//!
//! Insert is O(log n). Cancelling is O(1) and lazy: an entry names the park it was made for
//! (the task's park sequence number), and an entry whose park is over is discarded when it
//! reaches the top. The nearest deadline is the reactor's `epoll_wait` timeout.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::rc::Rc;
use std::time::Instant;

use super::task::Task;

struct Entry {
    deadline: Instant,
    /// Insertion order, so equal deadlines fire first-in first-out.
    order: u64,
    task: Rc<Task>,
    park: u64,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.deadline, self.order).cmp(&(other.deadline, other.order))
    }
}

#[derive(Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
    inserted: u64,
}

impl Timers {
    /// Wakes `task` at `deadline` if it is still in park number `park` then.
    pub(crate) fn insert(&mut self, deadline: Instant, task: Rc<Task>, park: u64) {
        self.inserted += 1;
        self.heap.push(Reverse(Entry {
            deadline,
            order: self.inserted,
            task,
            park,
        }));
    }

    /// The nearest deadline whose park is still in progress (stale entries are dropped).
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(Reverse(entry)) = self.heap.peek() {
            if entry.task.is_in_park(entry.park) {
                return Some(entry.deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// Removes every entry due at `now`, returning the parks to wake, earliest first.
    pub(crate) fn expire(&mut self, now: Instant, mut wake: impl FnMut(Rc<Task>, u64)) {
        while let Some(Reverse(entry)) = self.heap.peek() {
            if entry.deadline > now {
                break;
            }
            let Reverse(entry) = self.heap.pop().expect("peeked");
            wake(entry.task, entry.park);
        }
    }

    /// Drops every entry (at shutdown), releasing the tasks they hold.
    pub(crate) fn clear(&mut self) {
        self.heap.clear();
    }
}
