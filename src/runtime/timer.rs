//! Deadlines of parked green threads: a binary heap, nearest first.
//!
//! Insert is O(log n). Cancelling is O(1) and lazy: an entry names the park it was made for
//! (the task's park sequence number), and an entry whose park is over is discarded when it
//! reaches the top. Because a long deadline at the top can shield many stale entries below it
//! (every I/O call with a timeout that completes early leaves one), the heap is compacted
//! whenever it has doubled since the last compaction: amortised O(1) per insert, and the heap
//! never holds more than about twice the live entries. The nearest deadline is the reactor's
//! `epoll_wait` timeout.

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

pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
    inserted: u64,
    /// Compact when the heap reaches this size.
    compact_at: usize,
}

/// The smallest heap worth compacting.
const MIN_COMPACT_AT: usize = 64;

impl Default for Timers {
    fn default() -> Self {
        Timers {
            heap: BinaryHeap::new(),
            inserted: 0,
            compact_at: MIN_COMPACT_AT,
        }
    }
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
        if self.heap.len() >= self.compact_at {
            self.heap
                .retain(|Reverse(entry)| entry.task.is_in_park(entry.park));
            self.compact_at = (self.heap.len() * 2).max(MIN_COMPACT_AT);
        }
    }

    /// Entries held, live or stale.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no entry is held (not even a stale one).
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::task::TaskState;
    use std::time::Duration;

    /// A task parked in park number `park`.
    fn parked_task(park: u64) -> Rc<Task> {
        let task: Rc<Task> = Rc::new(Task::new(1, 0, None));
        task.state.set(TaskState::Parked);
        task.park_number.set(park);
        task
    }

    #[test]
    fn stale_entries_behind_a_long_deadline_are_compacted_away() {
        let now = Instant::now();
        let mut timers = Timers::default();
        let idle = parked_task(1);
        timers.insert(now + Duration::from_secs(3600), idle.clone(), 1);
        let busy = parked_task(0);
        for park in 1..=100_000u64 {
            // Each park of the busy task ends before its deadline, leaving a stale entry.
            busy.park_number.set(park);
            timers.insert(now + Duration::from_secs(7200), busy.clone(), park);
        }
        assert!(
            timers.len() <= 2 * MIN_COMPACT_AT,
            "heap holds {} entries",
            timers.len()
        );
        assert_eq!(
            timers.next_deadline(),
            Some(now + Duration::from_secs(3600))
        );
    }

    #[test]
    fn due_entries_expire_earliest_first_and_fifo_among_equals() {
        let now = Instant::now();
        let mut timers = Timers::default();
        let tasks: Vec<_> = (0..4).map(|_| parked_task(1)).collect();
        let later = now + Duration::from_millis(2);
        timers.insert(later, tasks[0].clone(), 1);
        timers.insert(now, tasks[1].clone(), 1);
        timers.insert(later, tasks[2].clone(), 1);
        timers.insert(now + Duration::from_secs(60), tasks[3].clone(), 1);
        let mut order = Vec::new();
        timers.expire(later, |task, _| {
            order.push(tasks.iter().position(|t| Rc::ptr_eq(t, &task)).unwrap())
        });
        assert_eq!(order, [1, 0, 2]);
    }
}
