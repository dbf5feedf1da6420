//! Go's `sync.WaitGroup` for green threads: wait until a count of outstanding jobs drops to
//! zero.
//!
//! Owns: the count, how many times it has reached zero, and the queue of waiters.

use std::cell::Cell;
use std::fmt;
use std::time::{Duration, Instant};

use super::wait_queue::WaitQueue;
use crate::runtime::budget;
use crate::runtime::task::Wake;

/// Waits for a set of jobs to finish, Go style: [`add`](WaitGroup::add) counts jobs up,
/// [`done`](WaitGroup::done) counts one down, and [`wait`](WaitGroup::wait) parks until the
/// count is zero.
///
/// Go's explicit counting was picked over a clone-and-drop handle because it works the same
/// for jobs that are not green threads (a callback, a request in flight) and because a
/// forgotten clone cannot silently keep `wait` waiting. Call `add` before starting the job,
/// not inside it, so that `wait` cannot see zero too early. The group can be reused once the
/// count is back at zero.
///
/// A waiter woken by the count reaching zero returns even if `add` raises it again before the
/// waiter runs. Neither `Send` nor `Sync`: share it between green threads with an
/// [`Rc`](std::rc::Rc).
///
/// # Examples
///
/// ```
/// use std::cell::Cell;
/// use std::rc::Rc;
/// use std::time::Duration;
/// use greenweave::sync::WaitGroup;
///
/// greenweave::run(|| {
///     let jobs = Rc::new(WaitGroup::new());
///     let finished = Rc::new(Cell::new(0));
///     for i in 0..4 {
///         jobs.add(1);
///         let (jobs, finished) = (jobs.clone(), finished.clone());
///         greenweave::spawn(move || {
///             greenweave::thread::sleep(Duration::from_millis(i));
///             finished.set(finished.get() + 1);
///             jobs.done();
///         });
///     }
///     jobs.wait();
///     assert_eq!(finished.get(), 4);
/// });
/// ```
pub struct WaitGroup {
    count: Cell<usize>,
    /// Bumped every time the count reaches zero.
    zeros: Cell<u64>,
    waiters: WaitQueue,
}

impl WaitGroup {
    /// A group with a count of zero.
    ///
    /// ```
    /// use greenweave::sync::WaitGroup;
    ///
    /// greenweave::run(|| {
    ///     let group = WaitGroup::new();
    ///     group.wait(); // nothing to wait for
    ///     assert_eq!(group.count(), 0);
    /// });
    /// ```
    pub const fn new() -> WaitGroup {
        WaitGroup {
            count: Cell::new(0),
            zeros: Cell::new(0),
            waiters: WaitQueue::new(),
        }
    }

    /// Adds `n` outstanding jobs.
    ///
    /// # Panics
    /// If the count would overflow `usize`.
    ///
    /// ```
    /// use greenweave::sync::WaitGroup;
    ///
    /// greenweave::run(|| {
    ///     let group = WaitGroup::new();
    ///     group.add(2);
    ///     assert_eq!(group.count(), 2);
    /// });
    /// ```
    pub fn add(&self, n: usize) {
        let count = self
            .count
            .get()
            .checked_add(n)
            .expect("WaitGroup::add: the count overflows usize");
        self.count.set(count);
    }

    /// Marks one job as finished; when the count reaches zero, wakes every waiter.
    ///
    /// # Panics
    /// If the count is already zero (more `done` calls than jobs added), as Go's does.
    ///
    /// ```
    /// use greenweave::sync::WaitGroup;
    ///
    /// greenweave::run(|| {
    ///     let group = WaitGroup::new();
    ///     group.add(1);
    ///     group.done();
    ///     assert_eq!(group.count(), 0);
    /// });
    /// ```
    pub fn done(&self) {
        let count = self.count.get().checked_sub(1).expect(
            "WaitGroup::done called with a count of zero: more done() calls than jobs added",
        );
        self.count.set(count);
        if count == 0 {
            self.zeros.set(self.zeros.get() + 1);
            self.waiters.notify_all();
        }
    }

    /// The number of outstanding jobs.
    ///
    /// ```
    /// use greenweave::sync::WaitGroup;
    ///
    /// greenweave::run(|| {
    ///     let group = WaitGroup::new();
    ///     group.add(3);
    ///     group.done();
    ///     assert_eq!(group.count(), 2);
    /// });
    /// ```
    pub fn count(&self) -> usize {
        self.count.get()
    }

    /// Parks this green thread until the count is zero; returns at once if it is.
    ///
    /// # Panics
    /// If it has to wait outside a runtime. A pending cancellation or an expired
    /// [`timeout`](crate::time::timeout) unwinds from here when it has to wait.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use greenweave::sync::WaitGroup;
    ///
    /// greenweave::run(|| {
    ///     let group = Rc::new(WaitGroup::new());
    ///     group.add(1);
    ///     let worker = group.clone();
    ///     greenweave::spawn(move || worker.done());
    ///     group.wait();
    ///     assert_eq!(group.count(), 0);
    /// });
    /// ```
    pub fn wait(&self) {
        self.wait_until("WaitGroup::wait", None);
    }

    /// Waits as [`wait`](WaitGroup::wait), for at most `duration`; returns whether the count
    /// reached zero (false if the time ran out first).
    ///
    /// # Panics
    /// As [`wait`](WaitGroup::wait).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::WaitGroup;
    ///
    /// greenweave::run(|| {
    ///     let group = WaitGroup::new();
    ///     group.add(1); // never done
    ///     assert!(!group.wait_timeout(Duration::from_millis(5)));
    /// });
    /// ```
    pub fn wait_timeout(&self, duration: Duration) -> bool {
        self.wait_until(
            "WaitGroup::wait_timeout",
            Instant::now().checked_add(duration),
        )
    }

    fn wait_until(&self, what: &'static str, deadline: Option<Instant>) -> bool {
        budget::spend(what);
        if self.count.get() == 0 {
            return true;
        }
        let zeros = self.zeros.get();
        loop {
            let wake = self.waiters.wait(what, deadline);
            if self.count.get() == 0 || self.zeros.get() != zeros {
                return true;
            }
            if wake == Wake::TimedOut && deadline.is_some() {
                return false;
            }
        }
    }
}

impl Default for WaitGroup {
    fn default() -> WaitGroup {
        WaitGroup::new()
    }
}

impl fmt::Debug for WaitGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitGroup")
            .field("count", &self.count.get())
            .finish_non_exhaustive()
    }
}
