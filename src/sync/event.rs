//! gevent's `Event`: a flag that green threads wait to see set.
//!
//! Owns: the flag, a count of how many times it has been set, and the FIFO queue of waiters.

use std::cell::Cell;
use std::fmt;
use std::time::{Duration, Instant};

use super::wait_queue::WaitQueue;
use crate::runtime::budget;
use crate::runtime::task::Wake;

/// A flag that green threads can wait for, as gevent's (and Python's `threading`) `Event`:
/// [`set`](Event::set) wakes every waiter, [`clear`](Event::clear) resets it, and
/// [`wait`](Event::wait) returns at once while it is set.
///
/// A waiter woken by `set` returns even if the flag is cleared again before it runs (as in
/// Python since 3.3). Neither `Send` nor `Sync`: share it between green threads with an
/// [`Rc`](std::rc::Rc).
///
/// # Examples
///
/// ```
/// use std::rc::Rc;
/// use greenweave::sync::Event;
///
/// greenweave::run(|| {
///     let ready = Rc::new(Event::new());
///     let waiters: Vec<_> = (0..3)
///         .map(|i| {
///             let ready = ready.clone();
///             greenweave::spawn(move || {
///                 ready.wait();
///                 i
///             })
///         })
///         .collect();
///     greenweave::thread::yield_now(); // all three wait now
///     ready.set();
///     let sum: i32 = waiters.into_iter().map(|w| w.join().unwrap()).sum();
///     assert_eq!(sum, 3);
/// });
/// ```
pub struct Event {
    flag: Cell<bool>,
    /// Bumped by every `set` that changes the flag, so a waiter can tell it was set while it
    /// waited even if it has been cleared since.
    sets: Cell<u64>,
    waiters: WaitQueue,
}

impl Event {
    /// An event that is not set.
    ///
    /// ```
    /// use greenweave::sync::Event;
    ///
    /// greenweave::run(|| {
    ///     assert!(!Event::new().is_set());
    /// });
    /// ```
    pub const fn new() -> Event {
        Event {
            flag: Cell::new(false),
            sets: Cell::new(0),
            waiters: WaitQueue::new(),
        }
    }

    /// Sets the flag and wakes every green thread waiting for it. Waits that start while it
    /// is set return at once.
    ///
    /// ```
    /// use greenweave::sync::Event;
    ///
    /// greenweave::run(|| {
    ///     let event = Event::new();
    ///     event.set();
    ///     event.wait(); // returns at once
    ///     assert!(event.is_set());
    /// });
    /// ```
    pub fn set(&self) {
        if !self.flag.get() {
            self.flag.set(true);
            self.sets.set(self.sets.get() + 1);
            self.waiters.notify_all();
        }
    }

    /// Resets the flag, so that later waits wait for the next [`set`](Event::set).
    ///
    /// ```
    /// use greenweave::sync::Event;
    ///
    /// greenweave::run(|| {
    ///     let event = Event::new();
    ///     event.set();
    ///     event.clear();
    ///     assert!(!event.is_set());
    /// });
    /// ```
    pub fn clear(&self) {
        self.flag.set(false);
    }

    /// Whether the flag is set.
    ///
    /// ```
    /// use greenweave::sync::Event;
    ///
    /// greenweave::run(|| {
    ///     let event = Event::new();
    ///     assert!(!event.is_set());
    ///     event.set();
    ///     assert!(event.is_set());
    /// });
    /// ```
    pub fn is_set(&self) -> bool {
        self.flag.get()
    }

    /// Parks this green thread until the flag is set; returns at once if it is.
    ///
    /// # Panics
    /// If it has to wait outside a runtime. A pending cancellation or an expired
    /// [`timeout`](crate::time::timeout) unwinds from here when it has to wait.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use std::time::Duration;
    /// use greenweave::sync::Event;
    ///
    /// greenweave::run(|| {
    ///     let event = Rc::new(Event::new());
    ///     let setter = event.clone();
    ///     greenweave::thread::spawn_after(Duration::from_millis(1), move || setter.set());
    ///     event.wait();
    ///     assert!(event.is_set());
    /// });
    /// ```
    pub fn wait(&self) {
        self.wait_until("Event::wait", None);
    }

    /// Waits as [`wait`](Event::wait), for at most `duration`; returns whether the flag was
    /// set (false if the time ran out first).
    ///
    /// # Panics
    /// As [`wait`](Event::wait).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::Event;
    ///
    /// greenweave::run(|| {
    ///     let event = Event::new();
    ///     assert!(!event.wait_timeout(Duration::from_millis(5)));
    ///     event.set();
    ///     assert!(event.wait_timeout(Duration::from_millis(5)));
    /// });
    /// ```
    pub fn wait_timeout(&self, duration: Duration) -> bool {
        self.wait_until("Event::wait_timeout", Instant::now().checked_add(duration))
    }

    fn wait_until(&self, what: &'static str, deadline: Option<Instant>) -> bool {
        budget::spend(what);
        if self.flag.get() {
            return true;
        }
        let sets = self.sets.get();
        loop {
            let wake = self.waiters.wait(what, deadline);
            if self.flag.get() || self.sets.get() != sets {
                return true;
            }
            if wake == Wake::TimedOut && deadline.is_some() {
                return false;
            }
        }
    }
}

impl Default for Event {
    fn default() -> Event {
        Event::new()
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("set", &self.flag.get())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Event;

    #[test]
    fn waits_that_time_out_leave_no_entry_in_the_queue() {
        crate::run(|| {
            let event = Event::new();
            for _ in 0..100_000 {
                assert!(!event.wait_timeout(Duration::ZERO));
            }
            assert_eq!(event.waiters.entries(), 0);
        });
    }
}
