//! A green counting semaphore: a number of permits that green threads take and give back.
//!
//! Owns: the count of free permits and the FIFO queue of green threads waiting for one.
//! Releasing a permit hands it straight to the longest waiter, so free permits and waiters
//! never coexist.

use std::cell::Cell;
use std::fmt;
use std::time::{Duration, Instant};

use super::grant_queue::GrantQueue;
use crate::runtime::budget;

/// A counting semaphore for green threads: at most `permits` holders at a time.
///
/// [`acquire`](Semaphore::acquire) parks the green thread until a permit is free and returns
/// a [`SemaphorePermit`] that gives it back when dropped. Waiters get permits in FIFO order;
/// a released permit goes straight to the first waiter, never to a green thread that arrives
/// meanwhile. Neither `Send` nor `Sync`: share it between green threads with an
/// [`Rc`](std::rc::Rc).
///
/// # Examples
///
/// At most two green threads inside at once:
///
/// ```
/// use std::cell::Cell;
/// use std::rc::Rc;
/// use greenweave::sync::Semaphore;
///
/// greenweave::run(|| {
///     let semaphore = Rc::new(Semaphore::new(2));
///     let inside = Rc::new(Cell::new(0));
///     let workers: Vec<_> = (0..6)
///         .map(|_| {
///             let (semaphore, inside) = (semaphore.clone(), inside.clone());
///             greenweave::spawn(move || {
///                 let _permit = semaphore.acquire();
///                 inside.set(inside.get() + 1);
///                 assert!(inside.get() <= 2);
///                 greenweave::thread::yield_now();
///                 inside.set(inside.get() - 1);
///             })
///         })
///         .collect();
///     for worker in workers {
///         worker.join().unwrap();
///     }
///     assert_eq!(semaphore.available_permits(), 2);
/// });
/// ```
pub struct Semaphore {
    permits: Cell<usize>,
    waiters: GrantQueue<()>,
}

impl Semaphore {
    /// A semaphore with `permits` free permits.
    ///
    /// ```
    /// use greenweave::sync::Semaphore;
    ///
    /// greenweave::run(|| {
    ///     let semaphore = Semaphore::new(3);
    ///     assert_eq!(semaphore.available_permits(), 3);
    /// });
    /// ```
    pub const fn new(permits: usize) -> Semaphore {
        Semaphore {
            permits: Cell::new(permits),
            waiters: GrantQueue::new(),
        }
    }

    /// Takes a permit, parking this green thread until one is free (and every green thread
    /// that asked before has had its own).
    ///
    /// # Panics
    /// If it has to wait outside a runtime. A pending cancellation or an expired
    /// [`timeout`](crate::time::timeout) unwinds from here when it has to wait.
    ///
    /// ```
    /// use greenweave::sync::Semaphore;
    ///
    /// greenweave::run(|| {
    ///     let semaphore = Semaphore::new(1);
    ///     let permit = semaphore.acquire();
    ///     assert_eq!(semaphore.available_permits(), 0);
    ///     drop(permit);
    ///     assert_eq!(semaphore.available_permits(), 1);
    /// });
    /// ```
    pub fn acquire(&self) -> SemaphorePermit<'_> {
        self.acquire_named("Semaphore::acquire")
    }

    /// [`acquire`](Semaphore::acquire), with `what` naming the wait in the deadlock report.
    pub(crate) fn acquire_named(&self, what: &'static str) -> SemaphorePermit<'_> {
        budget::spend(what);
        if !self.take_free_permit() {
            self.wait_for_permit(what, None);
        }
        SemaphorePermit { semaphore: self }
    }

    /// Takes a permit if one is free now, without waiting.
    ///
    /// ```
    /// use greenweave::sync::Semaphore;
    ///
    /// greenweave::run(|| {
    ///     let semaphore = Semaphore::new(1);
    ///     let first = semaphore.try_acquire();
    ///     assert!(first.is_some());
    ///     assert!(semaphore.try_acquire().is_none());
    /// });
    /// ```
    pub fn try_acquire(&self) -> Option<SemaphorePermit<'_>> {
        // Not `then_some`: a permit built eagerly and dropped would add a permit.
        self.take_free_permit()
            .then(|| SemaphorePermit { semaphore: self })
    }

    /// Takes a permit, waiting at most `duration` for one; `None` if the time ran out first.
    ///
    /// # Panics
    /// If it has to wait outside a runtime. A pending cancellation or an expired
    /// [`timeout`](crate::time::timeout) unwinds from here when it has to wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::Semaphore;
    ///
    /// greenweave::run(|| {
    ///     let semaphore = Semaphore::new(1);
    ///     let _held = semaphore.acquire();
    ///     assert!(semaphore.acquire_timeout(Duration::from_millis(5)).is_none());
    /// });
    /// ```
    pub fn acquire_timeout(&self, duration: Duration) -> Option<SemaphorePermit<'_>> {
        budget::spend("Semaphore::acquire_timeout");
        if self.take_free_permit()
            || self.wait_for_permit(
                "Semaphore::acquire_timeout",
                Instant::now().checked_add(duration),
            )
        {
            Some(SemaphorePermit { semaphore: self })
        } else {
            None
        }
    }

    /// Adds `n` permits, handing them to waiters first.
    ///
    /// # Panics
    /// If the number of permits would overflow `usize`.
    ///
    /// ```
    /// use greenweave::sync::Semaphore;
    ///
    /// greenweave::run(|| {
    ///     let semaphore = Semaphore::new(0);
    ///     semaphore.add_permits(2);
    ///     assert_eq!(semaphore.available_permits(), 2);
    /// });
    /// ```
    pub fn add_permits(&self, n: usize) {
        let permits = self
            .permits
            .get()
            .checked_add(n)
            .expect("Semaphore::add_permits: the number of permits overflows usize");
        self.permits.set(permits);
        self.dispatch();
    }

    /// How many permits are free now (always 0 while green threads wait for one).
    ///
    /// ```
    /// use greenweave::sync::Semaphore;
    ///
    /// greenweave::run(|| {
    ///     let semaphore = Semaphore::new(2);
    ///     let _permit = semaphore.acquire();
    ///     assert_eq!(semaphore.available_permits(), 1);
    /// });
    /// ```
    pub fn available_permits(&self) -> usize {
        self.permits.get()
    }

    /// Takes a free permit if there is one. Free permits are handed to waiters as soon as they
    /// appear, so there is none while anybody waits: this cannot overtake a waiter.
    fn take_free_permit(&self) -> bool {
        let permits = self.permits.get();
        if permits == 0 {
            return false;
        }
        self.permits.set(permits - 1);
        true
    }

    /// Waits in line for a permit; whether one was granted before `deadline`.
    fn wait_for_permit(&self, what: &'static str, deadline: Option<Instant>) -> bool {
        self.waiters.wait(what, (), deadline, |granted| {
            if granted {
                self.add_permits(1);
            }
        })
    }

    /// Hands free permits to waiters, first come first served.
    fn dispatch(&self) {
        while self.permits.get() > 0 && self.waiters.grant_front().is_some() {
            self.permits.set(self.permits.get() - 1);
        }
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("permits", &self.permits.get())
            .field("waiters", &self.waiters.len())
            .finish()
    }
}

/// A permit taken from a [`Semaphore`]; dropping it gives the permit back (to the first
/// waiter, if any).
///
/// ```
/// use greenweave::sync::Semaphore;
///
/// greenweave::run(|| {
///     let semaphore = Semaphore::new(1);
///     {
///         let _permit = semaphore.acquire();
///         assert_eq!(semaphore.available_permits(), 0);
///     }
///     assert_eq!(semaphore.available_permits(), 1);
/// });
/// ```
#[must_use = "if unused the permit is given back at once"]
pub struct SemaphorePermit<'a> {
    semaphore: &'a Semaphore,
}

impl SemaphorePermit<'_> {
    /// Keeps the permit for good: the semaphore has one permit fewer from now on.
    ///
    /// ```
    /// use greenweave::sync::Semaphore;
    ///
    /// greenweave::run(|| {
    ///     let semaphore = Semaphore::new(2);
    ///     semaphore.acquire().forget();
    ///     assert_eq!(semaphore.available_permits(), 1);
    /// });
    /// ```
    pub fn forget(self) {
        std::mem::forget(self);
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        self.semaphore.add_permits(1);
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::time::Duration;

    use super::Semaphore;

    #[test]
    fn acquires_that_time_out_leave_no_waiter_in_the_queue() {
        crate::run(|| {
            let semaphore = Semaphore::new(0);
            for _ in 0..100_000 {
                assert!(semaphore.acquire_timeout(Duration::ZERO).is_none());
            }
            assert_eq!(semaphore.waiters.len(), 0);
        });
    }

    #[test]
    fn a_waiter_leaving_from_the_middle_keeps_the_others_in_arrival_order() {
        crate::run(|| {
            let semaphore = Rc::new(Semaphore::new(0));
            let served = Rc::new(RefCell::new(Vec::new()));
            // "a", "b" and "c" arrive in this order; "b" gives up after 1 ms.
            let waiters: Vec<_> = [("a", None), ("b", Some(1)), ("c", None)]
                .into_iter()
                .map(|(name, patience)| {
                    let (semaphore, served) = (semaphore.clone(), served.clone());
                    crate::spawn(move || {
                        let permit = match patience {
                            None => Some(semaphore.acquire()),
                            Some(ms) => semaphore.acquire_timeout(Duration::from_millis(ms)),
                        };
                        served.borrow_mut().push((name, permit.is_some()));
                        if let Some(permit) = permit {
                            permit.forget();
                        }
                    })
                })
                .collect();
            crate::thread::yield_now(); // all three wait
            assert_eq!(semaphore.waiters.len(), 3);
            // "b" gives up when its 1 ms runs out: wait until it says so (a fixed sleep longer
            // than its patience assumed when a loaded machine runs each green thread).
            while served.borrow().is_empty() {
                crate::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(*served.borrow(), [("b", false)]);
            assert_eq!(semaphore.waiters.len(), 2);
            semaphore.add_permits(1);
            crate::thread::yield_now();
            semaphore.add_permits(1);
            for waiter in waiters {
                waiter.join().unwrap();
            }
            assert_eq!(*served.borrow(), [("b", false), ("a", true), ("c", true)]);
            assert_eq!(semaphore.waiters.len(), 0);
            assert_eq!(semaphore.available_permits(), 0);
        });
    }
}
