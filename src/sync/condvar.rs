//! A green condition variable with std's `Condvar` API, for greenweave's [`Mutex`].
//!
//! Owns: the FIFO queue of green threads waiting for a notification. The mutex they release
//! and take again is the caller's.

use std::fmt;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::{LockResult, PoisonError};
use std::time::{Duration, Instant};

use super::mutex::{Mutex, MutexGuard};
use super::wait_queue::WaitQueue;
use crate::runtime::task::Wake;

/// Whether a timed wait on a [`Condvar`] returned because its time ran out.
///
/// greenweave's own type, since std's cannot be constructed outside std; same method.
///
/// ```
/// use std::time::Duration;
/// use greenweave::sync::{Condvar, Mutex};
///
/// greenweave::run(|| {
///     let (mutex, condvar) = (Mutex::new(()), Condvar::new());
///     let guard = mutex.lock().unwrap();
///     let (_guard, result) = condvar.wait_timeout(guard, Duration::from_millis(1)).unwrap();
///     assert!(result.timed_out()); // nobody notified
/// });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// Whether the wait ended because its time ran out (rather than by a notification).
    ///
    /// ```
    /// use std::rc::Rc;
    /// use std::time::Duration;
    /// use greenweave::sync::{Condvar, Mutex};
    ///
    /// greenweave::run(|| {
    ///     let pair = Rc::new((Mutex::new(false), Condvar::new()));
    ///     let notifier = pair.clone();
    ///     greenweave::spawn(move || {
    ///         *notifier.0.lock().unwrap() = true;
    ///         notifier.1.notify_one();
    ///     });
    ///     let (lock, condvar) = &*pair;
    ///     let guard = lock.lock().unwrap();
    ///     let (guard, result) = condvar
    ///         .wait_timeout_while(guard, Duration::from_secs(60), |ready| !*ready)
    ///         .unwrap();
    ///     assert!(*guard && !result.timed_out());
    /// });
    /// ```
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

/// A condition variable for green threads: [`wait`](Condvar::wait) releases a greenweave
/// [`Mutex`], parks the green thread until notified, and takes the mutex again.
///
/// The API is `std::sync::Condvar`'s. Waiters are notified in FIFO order. As with std, a
/// wait may return without a notification (wrap it in a loop, or use
/// [`wait_while`](Condvar::wait_while)), and a notification with no waiter is lost. Use one
/// condition variable with one mutex.
///
/// A [`timeout`](crate::time::timeout) (or a cancellation) that ends a wait unwinds from it
/// without the mutex; if the waiter had already been notified, the notification passes to the
/// next waiter, so it is not lost.
///
/// # Examples
///
/// ```
/// use std::rc::Rc;
/// use greenweave::sync::{Condvar, Mutex};
///
/// greenweave::run(|| {
///     let pair = Rc::new((Mutex::new(false), Condvar::new()));
///     let starter = pair.clone();
///     greenweave::spawn(move || {
///         let (lock, condvar) = &*starter;
///         *lock.lock().unwrap() = true;
///         condvar.notify_one();
///     });
///     let (lock, condvar) = &*pair;
///     let mut started = lock.lock().unwrap();
///     while !*started {
///         started = condvar.wait(started).unwrap();
///     }
/// });
/// ```
pub struct Condvar {
    waiters: WaitQueue,
}

// As std's: a condition variable holds no value of the program's, only its waiters, which a
// panic leaves consistent.
impl UnwindSafe for Condvar {}
impl RefUnwindSafe for Condvar {}

impl Condvar {
    /// A condition variable nobody waits on.
    ///
    /// ```
    /// use greenweave::sync::Condvar;
    ///
    /// greenweave::run(|| {
    ///     let condvar = Condvar::new();
    ///     condvar.notify_all(); // nobody waits: nothing happens
    /// });
    /// ```
    pub const fn new() -> Condvar {
        Condvar {
            waiters: WaitQueue::new(),
        }
    }

    /// Releases the mutex behind `guard`, parks this green thread until a notification
    /// reaches it, then locks the mutex again and returns its guard.
    ///
    /// # Errors
    /// If the mutex is poisoned when it is taken again, `Err` with a [`PoisonError`] holding
    /// the guard.
    ///
    /// # Panics
    /// Outside a runtime. A pending cancellation or an expired
    /// [`timeout`](crate::time::timeout) unwinds from here, without the mutex.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use greenweave::sync::{Condvar, Mutex};
    ///
    /// greenweave::run(|| {
    ///     let pair = Rc::new((Mutex::new(Vec::new()), Condvar::new()));
    ///     let producer = pair.clone();
    ///     greenweave::spawn(move || {
    ///         producer.0.lock().unwrap().push(42);
    ///         producer.1.notify_one();
    ///     });
    ///     let (queue, condvar) = &*pair;
    ///     let mut items = queue.lock().unwrap();
    ///     while items.is_empty() {
    ///         items = condvar.wait(items).unwrap();
    ///     }
    ///     assert_eq!(items.pop(), Some(42));
    /// });
    /// ```
    pub fn wait<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>) -> LockResult<MutexGuard<'a, T>> {
        // Nothing else runs between the unlock and the park: no notification can slip in.
        let mutex = MutexGuard::unlock_for_wait(guard);
        let wake = self.waiters.wait("Condvar::wait", None);
        self.relock(mutex, wake)
    }

    /// Waits, as [`wait`](Condvar::wait), for as long as `condition` holds for the value; it is
    /// checked first, with the mutex held.
    ///
    /// # Errors
    /// As [`wait`](Condvar::wait).
    ///
    /// ```
    /// use std::rc::Rc;
    /// use greenweave::sync::{Condvar, Mutex};
    ///
    /// greenweave::run(|| {
    ///     let pair = Rc::new((Mutex::new(0), Condvar::new()));
    ///     for _ in 0..3 {
    ///         let worker = pair.clone();
    ///         greenweave::spawn(move || {
    ///             *worker.0.lock().unwrap() += 1;
    ///             worker.1.notify_all();
    ///         });
    ///     }
    ///     let (done, condvar) = &*pair;
    ///     let done = condvar.wait_while(done.lock().unwrap(), |n| *n < 3).unwrap();
    ///     assert_eq!(*done, 3);
    /// });
    /// ```
    pub fn wait_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> LockResult<MutexGuard<'a, T>> {
        while condition(&mut *guard) {
            guard = self.wait(guard)?;
        }
        Ok(guard)
    }

    /// Waits as [`wait`](Condvar::wait), for at most `duration`; the result says whether the
    /// time ran out. As with std, it may also return early without a notification.
    ///
    /// # Errors
    /// As [`wait`](Condvar::wait), with the guard and the result.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::{Condvar, Mutex};
    ///
    /// greenweave::run(|| {
    ///     let (mutex, condvar) = (Mutex::new(0), Condvar::new());
    ///     let guard = mutex.lock().unwrap();
    ///     let (guard, result) = condvar.wait_timeout(guard, Duration::from_millis(5)).unwrap();
    ///     assert!(result.timed_out());
    ///     assert_eq!(*guard, 0); // the mutex is held again
    /// });
    /// ```
    pub fn wait_timeout<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        duration: Duration,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
        let deadline = Instant::now().checked_add(duration);
        let mutex = MutexGuard::unlock_for_wait(guard);
        let wake = self.waiters.wait("Condvar::wait_timeout", deadline);
        let result = WaitTimeoutResult(wake == Wake::TimedOut);
        match self.relock(mutex, wake) {
            Ok(guard) => Ok((guard, result)),
            Err(poisoned) => Err(PoisonError::new((poisoned.into_inner(), result))),
        }
    }

    /// Waits, as [`wait_timeout`](Condvar::wait_timeout), for as long as `condition` holds
    /// and at most `duration` in all. The result says whether the time ran out with the
    /// condition still holding.
    ///
    /// # Errors
    /// As [`wait_timeout`](Condvar::wait_timeout).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::{Condvar, Mutex};
    ///
    /// greenweave::run(|| {
    ///     let (ready, condvar) = (Mutex::new(false), Condvar::new());
    ///     let (ready, result) = condvar
    ///         .wait_timeout_while(ready.lock().unwrap(), Duration::from_millis(5), |r| !*r)
    ///         .unwrap();
    ///     assert!(result.timed_out() && !*ready);
    /// });
    /// ```
    pub fn wait_timeout_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        duration: Duration,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
        let start = Instant::now();
        loop {
            if !condition(&mut *guard) {
                return Ok((guard, WaitTimeoutResult(false)));
            }
            let Some(left) = duration.checked_sub(start.elapsed()) else {
                return Ok((guard, WaitTimeoutResult(true)));
            };
            guard = self.wait_timeout(guard, left)?.0;
        }
    }

    /// Wakes the green thread that has waited longest, if any.
    ///
    /// ```
    /// use std::cell::Cell;
    /// use std::rc::Rc;
    /// use greenweave::sync::{Condvar, Mutex};
    ///
    /// greenweave::run(|| {
    ///     let pair = Rc::new((Mutex::new(()), Condvar::new()));
    ///     let woken = Rc::new(Cell::new(0));
    ///     for _ in 0..2 {
    ///         let (pair, woken) = (pair.clone(), woken.clone());
    ///         greenweave::spawn(move || {
    ///             let guard = pair.0.lock().unwrap();
    ///             let _guard = pair.1.wait(guard).unwrap();
    ///             woken.set(woken.get() + 1);
    ///         });
    ///     }
    ///     greenweave::thread::yield_now(); // both wait now
    ///     pair.1.notify_one();
    ///     greenweave::thread::yield_now();
    ///     assert_eq!(woken.get(), 1);
    ///     pair.1.notify_one();
    ///     greenweave::thread::yield_now();
    ///     assert_eq!(woken.get(), 2);
    /// });
    /// ```
    pub fn notify_one(&self) {
        self.waiters.notify_one();
    }

    /// Wakes every green thread waiting now.
    ///
    /// ```
    /// use std::cell::Cell;
    /// use std::rc::Rc;
    /// use greenweave::sync::{Condvar, Mutex};
    ///
    /// greenweave::run(|| {
    ///     let pair = Rc::new((Mutex::new(()), Condvar::new()));
    ///     let woken = Rc::new(Cell::new(0));
    ///     for _ in 0..3 {
    ///         let (pair, woken) = (pair.clone(), woken.clone());
    ///         greenweave::spawn(move || {
    ///             let guard = pair.0.lock().unwrap();
    ///             let _guard = pair.1.wait(guard).unwrap();
    ///             woken.set(woken.get() + 1);
    ///         });
    ///     }
    ///     greenweave::thread::yield_now();
    ///     pair.1.notify_all();
    ///     greenweave::thread::yield_now();
    ///     assert_eq!(woken.get(), 3);
    /// });
    /// ```
    pub fn notify_all(&self) {
        self.waiters.notify_all();
    }

    /// Takes the mutex again after a wait that ended with `wake`. If that unwinds (a
    /// cancellation or an expired `timeout` while waiting for the mutex) after a notification
    /// had reached this waiter, passes the notification on to the next waiter.
    fn relock<'a, T: ?Sized>(
        &self,
        mutex: &'a Mutex<T>,
        wake: Wake,
    ) -> LockResult<MutexGuard<'a, T>> {
        struct PassOn<'q> {
            waiters: &'q WaitQueue,
            notified: bool,
        }
        impl Drop for PassOn<'_> {
            // Runs only if `lock` unwinds (it is forgotten otherwise).
            fn drop(&mut self) {
                if self.notified {
                    self.waiters.notify_one();
                }
            }
        }
        let pass_on = PassOn {
            waiters: &self.waiters,
            notified: wake == Wake::Notified,
        };
        let relocked = mutex.lock();
        std::mem::forget(pass_on);
        relocked
    }
}

impl Default for Condvar {
    fn default() -> Condvar {
        Condvar::new()
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condvar").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Condvar, Mutex};

    #[test]
    fn waits_that_time_out_leave_no_entry_in_the_queue() {
        crate::run(|| {
            let (mutex, condvar) = (Mutex::new(()), Condvar::new());
            let mut guard = mutex.lock().unwrap();
            for _ in 0..100_000 {
                let (again, result) = condvar.wait_timeout(guard, Duration::ZERO).unwrap();
                assert!(result.timed_out());
                guard = again;
            }
            assert_eq!(condvar.waiters.entries(), 0);
        });
    }
}
