//! A green mutual-exclusion lock with std's `Mutex` API: waiting for it parks the green
//! thread, not the OS thread.
//!
//! Owns: the lock state (held or not, poisoned or not: `RawMutex`, apart from the value so that
//! a [`MappedMutexGuard`] of a part of the value can release it), the protected value and the
//! FIFO queue of waiters. Unlocking hands the lock straight to the longest waiter, so a green
//! thread that arrives in between cannot overtake it.

use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::ptr::NonNull;
use std::sync::{LockResult, PoisonError, TryLockError, TryLockResult};

use super::grant_queue::GrantQueue;
use crate::runtime::budget;
use crate::runtime::task::Wait;

/// A lock protecting a `T`, for green threads: [`lock`](Mutex::lock) parks the calling green
/// thread while another holds it, and every other green thread runs meanwhile.
///
/// The API is `std::sync::Mutex`'s, with std's [`LockResult`] and [`PoisonError`]:
///
/// - **FIFO.** Waiters get the lock in the order they asked for it. Unlocking hands it
///   directly to the first waiter; a green thread that calls `lock` meanwhile queues behind.
/// - **Poisoning.** A guard dropped while its green thread unwinds poisons the lock, as std's
///   does; later `lock` calls return `Err(PoisonError)`, whose
///   [`into_inner`](PoisonError::into_inner) still gives the guard. That includes the unwind
///   of a cancellation or of an expired [`timeout`](crate::time::timeout): the critical
///   section was cut short all the same.
/// - **Held across parks.** The holder may sleep, do I/O or wait on other primitives while
///   holding the guard.
/// - **Deadlocks are reported.** A green thread waiting here can only be woken by another one,
///   so if every green thread ends up waiting, [`run`](crate::run) panics with a report
///   naming each thread and what it waits on. Locking a mutex the same green thread already
///   holds never returns (as with std).
/// - **One runtime.** Green threads all run on one OS thread, so the lock needs no atomics and
///   is neither `Send` nor `Sync`; share it between green threads with an
///   [`Rc`](std::rc::Rc).
///
/// A `timeout` around `lock` bounds the wait: if it expires, the waiter leaves the queue
/// and the body unwinds.
///
/// # Examples
///
/// ```
/// use std::rc::Rc;
/// use greenweave::sync::Mutex;
///
/// greenweave::run(|| {
///     let counter = Rc::new(Mutex::new(0));
///     let workers: Vec<_> = (0..10)
///         .map(|_| {
///             let counter = counter.clone();
///             greenweave::spawn(move || {
///                 let mut n = counter.lock().unwrap();
///                 let seen = *n;
///                 greenweave::thread::yield_now(); // the others run, and wait for the lock
///                 *n = seen + 1;
///             })
///         })
///         .collect();
///     for worker in workers {
///         worker.join().unwrap();
///     }
///     assert_eq!(*counter.lock().unwrap(), 10);
/// });
/// ```
///
/// The lock stays on its runtime's OS thread:
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// assert_send(greenweave::sync::Mutex::new(0));
/// ```
pub struct Mutex<T: ?Sized> {
    raw: RawMutex,
    data: UnsafeCell<T>,
}

/// The lock itself, apart from the value: what a guard needs to unlock and poison, in a type
/// that does not depend on `T`, so that a [`MappedMutexGuard`] of a part of the value can
/// unlock it too.
struct RawMutex {
    locked: Cell<bool>,
    /// The id of the green thread holding the lock (0: none, or handed to a waiter that has
    /// not run yet), for `runtime::dump`'s wait-for edges.
    holder: Cell<u64>,
    poisoned: Cell<bool>,
    waiters: GrantQueue<()>,
}

impl RawMutex {
    /// Releases the lock: to the first waiter if there is one (the mutex stays locked, now on
    /// its behalf), otherwise for anyone.
    fn unlock(&self) {
        self.holder.set(0);
        if self.waiters.grant_front().is_none() {
            self.locked.set(false);
        }
    }

    /// What a guard does when it goes: poisons the lock if its green thread began unwinding
    /// while holding it (`panicking`: whether it already was when it took the lock), then
    /// unlocks.
    fn release(&self, panicking: bool) {
        if !panicking && std::thread::panicking() {
            self.poisoned.set(true);
        }
        self.unlock();
    }
}

// As std's: a panic while the lock is held poisons it, so a mutex crossing `catch_unwind` shows
// no broken invariant unasked.
impl<T: ?Sized> UnwindSafe for Mutex<T> {}
impl<T: ?Sized> RefUnwindSafe for Mutex<T> {}

impl<T> Mutex<T> {
    /// A new, unlocked mutex holding `value`.
    ///
    /// ```
    /// use greenweave::sync::Mutex;
    ///
    /// greenweave::run(|| {
    ///     let mutex = Mutex::new(5);
    ///     assert_eq!(*mutex.lock().unwrap(), 5);
    /// });
    /// ```
    pub const fn new(value: T) -> Mutex<T> {
        Mutex {
            raw: RawMutex {
                locked: Cell::new(false),
                holder: Cell::new(0),
                poisoned: Cell::new(false),
                waiters: GrantQueue::new(),
            },
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the mutex and returns the value.
    ///
    /// # Errors
    /// If the mutex is poisoned, `Err` with a [`PoisonError`] that holds the value.
    ///
    /// ```
    /// use greenweave::sync::Mutex;
    ///
    /// greenweave::run(|| {
    ///     let mutex = Mutex::new(String::from("inside"));
    ///     mutex.lock().unwrap().push_str(" out");
    ///     assert_eq!(mutex.into_inner().unwrap(), "inside out");
    /// });
    /// ```
    pub fn into_inner(self) -> LockResult<T> {
        let poisoned = self.raw.poisoned.get();
        let value = self.data.into_inner();
        if poisoned {
            Err(PoisonError::new(value))
        } else {
            Ok(value)
        }
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks the mutex, parking this green thread until it is its turn, and returns a guard
    /// that unlocks it when dropped.
    ///
    /// # Errors
    /// If the mutex is poisoned (a holder unwound), `Err` with a [`PoisonError`] holding the
    /// guard: the lock is acquired either way.
    ///
    /// # Panics
    /// If it has to wait outside a runtime (with nobody else to unlock it). A pending
    /// cancellation or an expired [`timeout`](crate::time::timeout) unwinds from here when it
    /// has to wait.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use std::time::Duration;
    /// use greenweave::sync::Mutex;
    ///
    /// greenweave::run(|| {
    ///     let log = Rc::new(Mutex::new(Vec::new()));
    ///     let guard = log.lock().unwrap();
    ///     let waiter = {
    ///         let log = log.clone();
    ///         greenweave::spawn(move || log.lock().unwrap().push("waiter"))
    ///     };
    ///     greenweave::thread::sleep(Duration::from_millis(1)); // the waiter parks meanwhile
    ///     drop(guard);
    ///     waiter.join().unwrap();
    ///     assert_eq!(*log.lock().unwrap(), ["waiter"]);
    /// });
    /// ```
    pub fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        budget::spend("Mutex::lock");
        // Unlocking hands the lock to a waiter if there is one, so an unlocked mutex has none.
        if !self.raw.locked.get() {
            self.raw.locked.set(true);
        } else {
            let wait = Wait::Lock {
                what: "Mutex::lock",
                holder: &self.raw.holder,
            };
            self.raw
                .waiters
                .wait_as("Mutex::lock", wait, (), None, |granted| {
                    if granted {
                        self.unlock();
                    }
                });
        }
        self.guard()
    }

    /// Locks the mutex if nobody holds it, without waiting.
    ///
    /// # Errors
    /// [`TryLockError::WouldBlock`] if it is held (or handed to a waiter that has not run
    /// yet); [`TryLockError::Poisoned`], holding the guard, if the lock was acquired but is
    /// poisoned.
    ///
    /// ```
    /// use std::sync::TryLockError;
    /// use greenweave::sync::Mutex;
    ///
    /// greenweave::run(|| {
    ///     let mutex = Mutex::new(1);
    ///     let guard = mutex.try_lock().unwrap();
    ///     assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
    ///     drop(guard);
    ///     assert!(mutex.try_lock().is_ok());
    /// });
    /// ```
    pub fn try_lock(&self) -> TryLockResult<MutexGuard<'_, T>> {
        if self.raw.locked.get() {
            return Err(TryLockError::WouldBlock);
        }
        self.raw.locked.set(true);
        Ok(self.guard()?)
    }

    /// Whether a holder unwound (panicked, was cancelled or timed out) while holding the lock.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use greenweave::sync::Mutex;
    ///
    /// greenweave::run(|| {
    ///     let mutex = Rc::new(Mutex::new(0));
    ///     let holder = mutex.clone();
    ///     let result = greenweave::spawn(move || {
    ///         let _guard = holder.lock().unwrap();
    ///         panic!("while holding the lock");
    ///     })
    ///     .join();
    ///     assert!(result.is_err());
    ///     assert!(mutex.is_poisoned());
    /// });
    /// ```
    pub fn is_poisoned(&self) -> bool {
        self.raw.poisoned.get()
    }

    /// Marks the mutex as no longer poisoned, once the value is known to be consistent again.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use greenweave::sync::Mutex;
    ///
    /// greenweave::run(|| {
    ///     let mutex = Rc::new(Mutex::new(0));
    ///     let holder = mutex.clone();
    ///     let _ = greenweave::spawn(move || {
    ///         let mut n = holder.lock().unwrap();
    ///         *n = -1; // half-way through an update
    ///         panic!("update interrupted");
    ///     })
    ///     .join();
    ///     let mut n = mutex.lock().unwrap_err().into_inner();
    ///     *n = 0; // repaired
    ///     mutex.clear_poison();
    ///     drop(n);
    ///     assert!(mutex.lock().is_ok());
    /// });
    /// ```
    pub fn clear_poison(&self) {
        self.raw.poisoned.set(false);
    }

    /// The value, through a mutable borrow of the mutex (which proves nobody holds it).
    ///
    /// # Errors
    /// If the mutex is poisoned, `Err` with a [`PoisonError`] holding the reference.
    ///
    /// ```
    /// use greenweave::sync::Mutex;
    ///
    /// greenweave::run(|| {
    ///     let mut mutex = Mutex::new(1);
    ///     *mutex.get_mut().unwrap() += 1;
    ///     assert_eq!(*mutex.lock().unwrap(), 2);
    /// });
    /// ```
    pub fn get_mut(&mut self) -> LockResult<&mut T> {
        let poisoned = self.raw.poisoned.get();
        let value = self.data.get_mut();
        if poisoned {
            Err(PoisonError::new(value))
        } else {
            Ok(value)
        }
    }

    /// A guard for the lock this green thread has just acquired.
    fn guard(&self) -> LockResult<MutexGuard<'_, T>> {
        self.raw.holder.set(crate::runtime::dump::running_id());
        let guard = MutexGuard {
            mutex: self,
            panicking: std::thread::panicking(),
        };
        if self.raw.poisoned.get() {
            Err(PoisonError::new(guard))
        } else {
            Ok(guard)
        }
    }

    /// Releases the lock (see [`RawMutex::unlock`]).
    fn unlock(&self) {
        self.raw.unlock();
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Mutex<T> {
        Mutex::new(T::default())
    }
}

impl<T> From<T> for Mutex<T> {
    fn from(value: T) -> Mutex<T> {
        Mutex::new(value)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Mutex");
        match self.try_lock() {
            Ok(guard) => d.field("data", &&*guard),
            Err(TryLockError::Poisoned(poisoned)) => d.field("data", &&*poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => d.field("data", &format_args!("<locked>")),
        };
        d.field("poisoned", &self.raw.poisoned.get());
        d.finish_non_exhaustive()
    }
}

/// Proof that a green thread holds a [`Mutex`]: gives access to the value, and unlocks (handing
/// the lock to the next waiter) when dropped.
///
/// Like std's guard, it is neither `Send` nor `Sync`.
///
/// ```
/// use greenweave::sync::Mutex;
///
/// greenweave::run(|| {
///     let names = Mutex::new(vec!["a"]);
///     {
///         let mut guard = names.lock().unwrap();
///         guard.push("b"); // DerefMut to the Vec
///     } // unlocked here
///     assert_eq!(names.lock().unwrap().len(), 2);
/// });
/// ```
#[must_use = "if unused the Mutex will immediately unlock"]
pub struct MutexGuard<'a, T: ?Sized + 'a> {
    mutex: &'a Mutex<T>,
    /// Whether the thread was already unwinding when it took the lock: only an unwind that
    /// began while holding it poisons it (as std's guards do).
    panicking: bool,
}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    /// Makes a guard of a part of the locked value (a field, an element, an enum's variant),
    /// which keeps the mutex locked until it is dropped, as parking_lot's `MutexGuard::map`
    /// and std's (nightly, `mapped_lock_guards`). An associated function, so that it does not
    /// hide a `map` method of the value.
    ///
    /// # Panics
    /// If `f` panics: the original guard is then dropped, which unlocks the mutex and poisons
    /// it, as std's does.
    ///
    /// ```
    /// use greenweave::sync::{MappedMutexGuard, Mutex, MutexGuard};
    ///
    /// greenweave::run(|| {
    ///     let pair = Mutex::new((1, String::from("one")));
    ///     let mut name: MappedMutexGuard<'_, String> =
    ///         MutexGuard::map(pair.lock().unwrap(), |(_, name)| name);
    ///     name.push_str(" and only");
    ///     drop(name);
    ///     assert_eq!(pair.lock().unwrap().1, "one and only");
    /// });
    /// ```
    pub fn map<U, F>(orig: Self, f: F) -> MappedMutexGuard<'a, U>
    where
        F: FnOnce(&mut T) -> &mut U,
        U: ?Sized,
    {
        // SAFETY: the guard holds the lock, so this is the only reference to the value (see
        // `deref_mut`); the closure's signature ties what it returns to the borrow it is given,
        // and the guard is consumed, so the mapped guard's pointer is the only way left to the
        // value until the lock is released. If `f` panics, `orig` is dropped: unlocked.
        let data = NonNull::from(f(unsafe { &mut *orig.mutex.data.get() }));
        let orig = ManuallyDrop::new(orig);
        MappedMutexGuard::new(&orig.mutex.raw, data, orig.panicking)
    }

    /// [`map`](MutexGuard::map) for a part that may not be there: `f` returns `None` and the
    /// original guard comes back as `Err`, still holding the lock. parking_lot's
    /// `MutexGuard::try_map` (std's nightly names it `filter_map`).
    ///
    /// # Errors
    /// The original guard, when `f` returns `None`.
    ///
    /// # Panics
    /// If `f` panics: the original guard is then dropped, which unlocks the mutex and poisons
    /// it.
    ///
    /// ```
    /// use greenweave::sync::{Mutex, MutexGuard};
    ///
    /// greenweave::run(|| {
    ///     let slots = Mutex::new(vec![1, 2]);
    ///     let guard = MutexGuard::try_map(slots.lock().unwrap(), |v| v.get_mut(5))
    ///         .expect_err("there is no slot 5");
    ///     let mut second = MutexGuard::try_map(guard, |v| v.get_mut(1)).unwrap();
    ///     *second = 20;
    ///     drop(second);
    ///     assert_eq!(*slots.lock().unwrap(), [1, 20]);
    /// });
    /// ```
    pub fn try_map<U, F>(orig: Self, f: F) -> Result<MappedMutexGuard<'a, U>, Self>
    where
        F: FnOnce(&mut T) -> Option<&mut U>,
        U: ?Sized,
    {
        // SAFETY: as in `map`.
        match f(unsafe { &mut *orig.mutex.data.get() }) {
            Some(data) => {
                let data = NonNull::from(data);
                let orig = ManuallyDrop::new(orig);
                Ok(MappedMutexGuard::new(&orig.mutex.raw, data, orig.panicking))
            }
            None => Err(orig),
        }
    }

    /// Releases the lock without poisoning it, for [`Condvar`](super::Condvar) to wait, and
    /// returns the mutex to lock again.
    pub(crate) fn unlock_for_wait(guard: MutexGuard<'a, T>) -> &'a Mutex<T> {
        let mutex = guard.mutex;
        std::mem::forget(guard);
        mutex.unlock();
        mutex
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while its green thread holds the lock, which no other
        // guard can then do, and all green threads run on this one OS thread; so no `&mut T`
        // exists while this `&T` lives.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only borrow through the one guard.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.raw.release(self.panicking);
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

/// A guard of a part of a [`Mutex`]'s value, made by [`MutexGuard::map`] or
/// [`MutexGuard::try_map`] (parking_lot's names; std's nightly `mapped_lock_guards` has the same
/// type): gives access to that part only, and unlocks the mutex when dropped, poisoning it if
/// dropped while its green thread unwinds, as a [`MutexGuard`] does.
///
/// Invariant in `T`, as std's is, and, like [`MutexGuard`], neither `Send` nor `Sync`.
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// greenweave::run(|| {
///     let mutex = greenweave::sync::Mutex::new((1, 2));
///     let guard = greenweave::sync::MutexGuard::map(mutex.lock().unwrap(), |pair| &mut pair.0);
///     assert_send(guard);
/// });
/// ```
#[must_use = "if unused the Mutex will immediately unlock"]
pub struct MappedMutexGuard<'a, T: ?Sized + 'a> {
    raw: &'a RawMutex,
    /// The part of the value, valid while the lock is held, which is for `'a` at most.
    data: NonNull<T>,
    /// As [`MutexGuard`]'s: whether the thread was already unwinding when it took the lock.
    panicking: bool,
    /// The guard stands for a `&'a mut T` (invariance, as std's).
    _variance: PhantomData<&'a mut T>,
}

impl<'a, T: ?Sized> MappedMutexGuard<'a, T> {
    fn new(raw: &'a RawMutex, data: NonNull<T>, panicking: bool) -> MappedMutexGuard<'a, T> {
        MappedMutexGuard {
            raw,
            data,
            panicking,
            _variance: PhantomData,
        }
    }

    /// Maps again, to a part of this part, as [`MutexGuard::map`].
    ///
    /// # Panics
    /// If `f` panics: the guard is then dropped, which unlocks the mutex and poisons it.
    ///
    /// ```
    /// use greenweave::sync::{MappedMutexGuard, Mutex, MutexGuard};
    ///
    /// greenweave::run(|| {
    ///     let nested = Mutex::new(((0, 1), 2));
    ///     let inner = MutexGuard::map(nested.lock().unwrap(), |n| &mut n.0);
    ///     let mut one = MappedMutexGuard::map(inner, |pair| &mut pair.1);
    ///     *one += 10;
    ///     drop(one);
    ///     assert_eq!(*nested.lock().unwrap(), ((0, 11), 2));
    /// });
    /// ```
    pub fn map<U, F>(mut orig: Self, f: F) -> MappedMutexGuard<'a, U>
    where
        F: FnOnce(&mut T) -> &mut U,
        U: ?Sized,
    {
        // SAFETY: the guard holds the lock and is the only way to its part of the value (see
        // `MutexGuard::map`), and it is consumed here; if `f` panics, `orig` is dropped.
        let data = NonNull::from(f(unsafe { orig.data.as_mut() }));
        let orig = ManuallyDrop::new(orig);
        MappedMutexGuard::new(orig.raw, data, orig.panicking)
    }

    /// [`map`](MappedMutexGuard::map) for a part that may not be there, as
    /// [`MutexGuard::try_map`].
    ///
    /// # Errors
    /// The original guard, when `f` returns `None`.
    ///
    /// # Panics
    /// If `f` panics: the guard is then dropped, which unlocks the mutex and poisons it.
    pub fn try_map<U, F>(mut orig: Self, f: F) -> Result<MappedMutexGuard<'a, U>, Self>
    where
        F: FnOnce(&mut T) -> Option<&mut U>,
        U: ?Sized,
    {
        // SAFETY: as in `map`.
        match f(unsafe { orig.data.as_mut() }) {
            Some(data) => {
                let data = NonNull::from(data);
                let orig = ManuallyDrop::new(orig);
                Ok(MappedMutexGuard::new(orig.raw, data, orig.panicking))
            }
            None => Err(orig),
        }
    }
}

impl<T: ?Sized> Deref for MappedMutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no other guard reaches the value, and it came
        // from a `&mut` to a part of the value (see `MutexGuard::map`); all green threads run on
        // this one OS thread.
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for MappedMutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only borrow through the guard.
        unsafe { self.data.as_mut() }
    }
}

impl<T: ?Sized> Drop for MappedMutexGuard<'_, T> {
    fn drop(&mut self) {
        self.raw.release(self.panicking);
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MappedMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MappedMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}
