//! A green reader-writer lock with std's `RwLock` API, fair between readers and writers.
//!
//! Owns: the lock state (how many readers, whether a writer, poisoned or not: `RawRwLock`,
//! apart from the value so that the mapped guards of a part of it can release it), the
//! protected value and the FIFO queue of waiting readers and writers. Releasing hands the lock
//! straight to the waiters at the front: one writer, or every reader up to the next waiting
//! writer; so does a writer's downgrade to a read lock, in the same step.

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

/// What a waiter asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// A reader-writer lock for green threads: any number of readers, or one writer, at a time.
///
/// The API is `std::sync::RwLock`'s, with std's [`LockResult`] and [`PoisonError`]:
///
/// - **Fair.** Waiters are served in FIFO order: a waiting writer blocks readers that arrive
///   after it (so a stream of readers cannot starve it), and when a writer unlocks, every
///   reader queued before the next writer gets in together. A green thread that already holds
///   a read lock and asks for another while a writer waits therefore waits for ever; as with
///   std, do not take a read lock twice.
/// - **Poisoning.** A write guard dropped while its green thread unwinds poisons the lock, as
///   std's does (read guards do not).
/// - Neither `Send` nor `Sync`: share it between green threads with an [`Rc`](std::rc::Rc).
///
/// # Examples
///
/// ```
/// use std::rc::Rc;
/// use greenweave::sync::RwLock;
///
/// greenweave::run(|| {
///     let config = Rc::new(RwLock::new(String::from("v1")));
///     let readers: Vec<_> = (0..3)
///         .map(|_| {
///             let config = config.clone();
///             greenweave::spawn(move || {
///                 let seen = config.read().unwrap();
///                 greenweave::thread::yield_now(); // other readers share the lock meanwhile
///                 seen.clone()
///             })
///         })
///         .collect();
///     greenweave::thread::yield_now(); // the readers take the lock
///     config.write().unwrap().push_str("+patch"); // waits for them to finish
///     for reader in readers {
///         assert_eq!(reader.join().unwrap(), "v1");
///     }
///     assert_eq!(*config.read().unwrap(), "v1+patch");
/// });
/// ```
pub struct RwLock<T: ?Sized> {
    raw: RawRwLock,
    data: UnsafeCell<T>,
}

/// The lock itself, apart from the value: what a guard needs to unlock and poison, in a type
/// that does not depend on `T`, so that the mapped guards of a part of the value can unlock
/// it too.
struct RawRwLock {
    readers: Cell<usize>,
    writer: Cell<bool>,
    /// The id of the green thread holding the write lock (0: none, readers, or handed to a
    /// waiter that has not run yet), for `runtime::dump`'s wait-for edges.
    writer_id: Cell<u64>,
    poisoned: Cell<bool>,
    waiters: GrantQueue<Access>,
}

// As std's: a panic while the write lock is held poisons it, and a read lock cannot leave the
// value half-changed, so a lock crossing `catch_unwind` shows no broken invariant unasked.
impl<T: ?Sized> UnwindSafe for RwLock<T> {}
impl<T: ?Sized> RefUnwindSafe for RwLock<T> {}

impl<T> RwLock<T> {
    /// A new, unlocked lock holding `value`.
    ///
    /// ```
    /// use greenweave::sync::RwLock;
    ///
    /// greenweave::run(|| {
    ///     let lock = RwLock::new(5);
    ///     assert_eq!(*lock.read().unwrap(), 5);
    /// });
    /// ```
    pub const fn new(value: T) -> RwLock<T> {
        RwLock {
            raw: RawRwLock {
                readers: Cell::new(0),
                writer: Cell::new(false),
                writer_id: Cell::new(0),
                poisoned: Cell::new(false),
                waiters: GrantQueue::new(),
            },
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the lock and returns the value.
    ///
    /// # Errors
    /// If the lock is poisoned, `Err` with a [`PoisonError`] that holds the value.
    ///
    /// ```
    /// use greenweave::sync::RwLock;
    ///
    /// greenweave::run(|| {
    ///     let lock = RwLock::new(vec![1]);
    ///     lock.write().unwrap().push(2);
    ///     assert_eq!(lock.into_inner().unwrap(), [1, 2]);
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

impl<T: ?Sized> RwLock<T> {
    /// Takes a shared read lock, parking this green thread while a writer holds the lock or
    /// any green thread waits before it.
    ///
    /// # Errors
    /// If the lock is poisoned, `Err` with a [`PoisonError`] holding the guard (the lock is
    /// held either way).
    ///
    /// # Panics
    /// If it has to wait outside a runtime. A pending cancellation or an expired
    /// [`timeout`](crate::time::timeout) unwinds from here when it has to wait.
    ///
    /// ```
    /// use greenweave::sync::RwLock;
    ///
    /// greenweave::run(|| {
    ///     let lock = RwLock::new(1);
    ///     let (a, b) = (lock.read().unwrap(), lock.read().unwrap()); // readers share
    ///     assert_eq!(*a + *b, 2);
    /// });
    /// ```
    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, T>> {
        budget::spend("RwLock::read");
        self.take_read()
    }

    /// `read` without spending the budget (`try_read` never yields).
    fn take_read(&self) -> LockResult<RwLockReadGuard<'_, T>> {
        if !self.raw.writer.get() && self.raw.waiters.is_empty() {
            self.raw.readers.set(self.raw.readers.get() + 1);
        } else {
            let wait = Wait::Lock {
                what: "RwLock::read",
                holder: &self.raw.writer_id,
            };
            self.raw
                .waiters
                .wait_as("RwLock::read", wait, Access::Read, None, |granted| {
                    if granted {
                        self.raw.read_unlock();
                    } else {
                        self.raw.dispatch();
                    }
                });
        }
        let guard = RwLockReadGuard::new(self);
        if self.raw.poisoned.get() {
            Err(PoisonError::new(guard))
        } else {
            Ok(guard)
        }
    }

    /// Takes the exclusive write lock, parking this green thread while anyone holds the lock
    /// or any green thread waits before it.
    ///
    /// # Errors
    /// If the lock is poisoned, `Err` with a [`PoisonError`] holding the guard (the lock is
    /// held either way).
    ///
    /// # Panics
    /// If it has to wait outside a runtime. A pending cancellation or an expired
    /// [`timeout`](crate::time::timeout) unwinds from here when it has to wait.
    ///
    /// ```
    /// use greenweave::sync::RwLock;
    ///
    /// greenweave::run(|| {
    ///     let lock = RwLock::new(1);
    ///     *lock.write().unwrap() += 1;
    ///     assert_eq!(*lock.read().unwrap(), 2);
    /// });
    /// ```
    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, T>> {
        budget::spend("RwLock::write");
        self.take_write()
    }

    /// `write` without spending the budget (`try_write` never yields).
    fn take_write(&self) -> LockResult<RwLockWriteGuard<'_, T>> {
        if !self.raw.writer.get() && self.raw.readers.get() == 0 && self.raw.waiters.is_empty() {
            self.raw.writer.set(true);
        } else {
            let wait = Wait::Lock {
                what: "RwLock::write",
                holder: &self.raw.writer_id,
            };
            self.raw
                .waiters
                .wait_as("RwLock::write", wait, Access::Write, None, |granted| {
                    if granted {
                        self.raw.write_unlock();
                    } else {
                        self.raw.dispatch();
                    }
                });
        }
        self.write_guard()
    }

    /// Takes a read lock if that needs no waiting: no writer holds the lock and nobody waits.
    ///
    /// # Errors
    /// [`TryLockError::WouldBlock`] if it would wait; [`TryLockError::Poisoned`], holding the
    /// guard, if the lock was taken but is poisoned.
    ///
    /// ```
    /// use greenweave::sync::RwLock;
    ///
    /// greenweave::run(|| {
    ///     let lock = RwLock::new(0);
    ///     let writer = lock.write().unwrap();
    ///     assert!(lock.try_read().is_err());
    ///     drop(writer);
    ///     assert!(lock.try_read().is_ok());
    /// });
    /// ```
    pub fn try_read(&self) -> TryLockResult<RwLockReadGuard<'_, T>> {
        if self.raw.writer.get() || !self.raw.waiters.is_empty() {
            return Err(TryLockError::WouldBlock);
        }
        Ok(self.take_read()?)
    }

    /// Takes the write lock if nobody holds it and nobody waits.
    ///
    /// # Errors
    /// [`TryLockError::WouldBlock`] if it would wait; [`TryLockError::Poisoned`], holding the
    /// guard, if the lock was taken but is poisoned.
    ///
    /// ```
    /// use greenweave::sync::RwLock;
    ///
    /// greenweave::run(|| {
    ///     let lock = RwLock::new(0);
    ///     let reader = lock.read().unwrap();
    ///     assert!(lock.try_write().is_err());
    ///     drop(reader);
    ///     assert!(lock.try_write().is_ok());
    /// });
    /// ```
    pub fn try_write(&self) -> TryLockResult<RwLockWriteGuard<'_, T>> {
        if self.raw.writer.get() || self.raw.readers.get() > 0 || !self.raw.waiters.is_empty() {
            return Err(TryLockError::WouldBlock);
        }
        Ok(self.take_write()?)
    }

    /// Whether a writer unwound (panicked, was cancelled or timed out) while holding the lock.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use greenweave::sync::RwLock;
    ///
    /// greenweave::run(|| {
    ///     let lock = Rc::new(RwLock::new(0));
    ///     let writer = lock.clone();
    ///     let _ = greenweave::spawn(move || {
    ///         let _guard = writer.write().unwrap();
    ///         panic!("while writing");
    ///     })
    ///     .join();
    ///     assert!(lock.is_poisoned());
    ///     assert!(lock.read().is_err());
    /// });
    /// ```
    pub fn is_poisoned(&self) -> bool {
        self.raw.poisoned.get()
    }

    /// Marks the lock as no longer poisoned.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use greenweave::sync::RwLock;
    ///
    /// greenweave::run(|| {
    ///     let lock = Rc::new(RwLock::new(0));
    ///     let writer = lock.clone();
    ///     let _ = greenweave::spawn(move || {
    ///         let _guard = writer.write().unwrap();
    ///         panic!("while writing");
    ///     })
    ///     .join();
    ///     lock.clear_poison();
    ///     assert!(lock.write().is_ok());
    /// });
    /// ```
    pub fn clear_poison(&self) {
        self.raw.poisoned.set(false);
    }

    /// The value, through a mutable borrow of the lock (which proves nobody holds it).
    ///
    /// # Errors
    /// If the lock is poisoned, `Err` with a [`PoisonError`] holding the reference.
    ///
    /// ```
    /// use greenweave::sync::RwLock;
    ///
    /// greenweave::run(|| {
    ///     let mut lock = RwLock::new(1);
    ///     *lock.get_mut().unwrap() = 2;
    ///     assert_eq!(*lock.read().unwrap(), 2);
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

    fn write_guard(&self) -> LockResult<RwLockWriteGuard<'_, T>> {
        self.raw.writer_id.set(crate::runtime::dump::running_id());
        let guard = RwLockWriteGuard {
            lock: self,
            panicking: std::thread::panicking(),
        };
        if self.raw.poisoned.get() {
            Err(PoisonError::new(guard))
        } else {
            Ok(guard)
        }
    }
}

impl RawRwLock {
    fn read_unlock(&self) {
        self.readers.set(self.readers.get() - 1);
        self.dispatch();
    }

    fn write_unlock(&self) {
        self.writer.set(false);
        self.writer_id.set(0);
        self.dispatch();
    }

    /// Grants the lock to the waiters at the front for as long as it can: a writer once the
    /// lock is free, readers while no writer holds it and none is first in line. Runs after
    /// every release and whenever a waiter leaves the queue (a writer that timed out may have
    /// been all that kept the readers behind it waiting).
    fn dispatch(&self) {
        if self.writer.get() {
            return;
        }
        loop {
            match self.waiters.front() {
                Some(Access::Write) => {
                    if self.readers.get() == 0 {
                        self.writer.set(true);
                        self.waiters.grant_front();
                    }
                    return;
                }
                Some(Access::Read) => {
                    self.readers.set(self.readers.get() + 1);
                    self.waiters.grant_front();
                }
                None => return,
            }
        }
    }

    /// What a write guard does when it goes: poisons the lock if its green thread began
    /// unwinding while holding it (`panicking`: whether it already was when it took the lock),
    /// then unlocks.
    fn release_write(&self, panicking: bool) {
        if !panicking && std::thread::panicking() {
            self.poisoned.set(true);
        }
        self.write_unlock();
    }

    /// Turns the write lock into a read lock held by the same green thread, and lets in the
    /// readers queued at the front (up to the first waiting writer), all in one step: no
    /// writer can take the lock in between.
    fn downgrade(&self) {
        self.writer.set(false);
        self.writer_id.set(0);
        self.readers.set(1);
        self.dispatch();
    }
}

impl<T: Default> Default for RwLock<T> {
    fn default() -> RwLock<T> {
        RwLock::new(T::default())
    }
}

impl<T> From<T> for RwLock<T> {
    fn from(value: T) -> RwLock<T> {
        RwLock::new(value)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Formatted under a read guard, as std does: `T::fmt` is user code that may reach this
        // lock again (through an `Rc` in a thread-local, a cycle) and ask for `write()`, or park
        // and let another green thread do so; the guard keeps every writer out until the value
        // has been formatted.
        let mut d = f.debug_struct("RwLock");
        match self.try_read() {
            Ok(guard) => d.field("data", &&*guard),
            Err(TryLockError::Poisoned(poisoned)) => d.field("data", &&*poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => d.field("data", &format_args!("<locked>")),
        };
        d.field("poisoned", &self.raw.poisoned.get());
        d.finish_non_exhaustive()
    }
}

/// Shared access to an [`RwLock`]'s value; releases the read lock when dropped.
///
/// ```
/// use greenweave::sync::RwLock;
///
/// greenweave::run(|| {
///     let lock = RwLock::new(vec![1, 2]);
///     let guard = lock.read().unwrap();
///     assert_eq!(guard.len(), 2); // Deref to the Vec
/// });
/// ```
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockReadGuard<'a, T: ?Sized + 'a> {
    /// The value, as a pointer rather than a reference into the lock: anything that reaches
    /// `T` through the lock's `UnsafeCell<T>` (a `&'a RwLock<T>`, a `NonNull<RwLock<T>>`) makes
    /// the guard invariant in `T`, where std's read guard (which only hands out `&T`) is
    /// covariant; `NonNull<T>` is covariant. Valid, and only read, while the guard lives (at
    /// most `'a`): the read lock keeps writers out.
    data: NonNull<T>,
    /// The lock's state, which does not depend on `T`: to unlock.
    raw: &'a RawRwLock,
}

impl<'a, T: ?Sized> RwLockReadGuard<'a, T> {
    /// The guard of a read lock just taken on `lock`.
    fn new(lock: &'a RwLock<T>) -> RwLockReadGuard<'a, T> {
        RwLockReadGuard {
            // SAFETY: `UnsafeCell::get` is never null.
            data: unsafe { NonNull::new_unchecked(lock.data.get()) },
            raw: &lock.raw,
        }
    }

    /// The lock's state, for as long as the guard's borrow of the lock (`'a`), to hand to a
    /// mapped guard.
    fn raw(&self) -> &'a RawRwLock {
        self.raw
    }

    /// Makes a guard of a part of the value (a field, an element, an enum's variant), which
    /// keeps the read lock until it is dropped, as parking_lot's `RwLockReadGuard::map` and
    /// std's (nightly, `mapped_lock_guards`). An associated function, so that it does not hide
    /// a `map` method of the value.
    ///
    /// # Panics
    /// If `f` panics: the original guard is then dropped, which releases the read lock (a read
    /// guard does not poison).
    ///
    /// ```
    /// use greenweave::sync::{RwLock, RwLockReadGuard};
    ///
    /// greenweave::run(|| {
    ///     let config = RwLock::new((String::from("name"), 8080));
    ///     let port = RwLockReadGuard::map(config.read().unwrap(), |(_, port)| port);
    ///     assert_eq!(*port, 8080);
    ///     assert!(config.try_write().is_err(), "still read-locked");
    /// });
    /// ```
    pub fn map<U, F>(orig: Self, f: F) -> MappedRwLockReadGuard<'a, U>
    where
        F: FnOnce(&T) -> &U,
        U: ?Sized,
    {
        let data = NonNull::from(f(&*orig));
        let orig = ManuallyDrop::new(orig);
        MappedRwLockReadGuard {
            raw: orig.raw(),
            data,
        }
    }

    /// [`map`](RwLockReadGuard::map) for a part that may not be there: `f` returns `None` and
    /// the original guard comes back as `Err`, still holding the read lock. parking_lot's
    /// `RwLockReadGuard::try_map` (std's nightly names it `filter_map`).
    ///
    /// # Errors
    /// The original guard, when `f` returns `None`.
    ///
    /// # Panics
    /// If `f` panics: the original guard is then dropped, which releases the read lock.
    ///
    /// ```
    /// use greenweave::sync::{RwLock, RwLockReadGuard};
    ///
    /// greenweave::run(|| {
    ///     let names = RwLock::new(vec!["a", "b"]);
    ///     let guard = RwLockReadGuard::try_map(names.read().unwrap(), |v| v.get(2))
    ///         .expect_err("there is no third name");
    ///     let second = RwLockReadGuard::try_map(guard, |v| v.get(1)).unwrap();
    ///     assert_eq!(*second, "b");
    /// });
    /// ```
    pub fn try_map<U, F>(orig: Self, f: F) -> Result<MappedRwLockReadGuard<'a, U>, Self>
    where
        F: FnOnce(&T) -> Option<&U>,
        U: ?Sized,
    {
        match f(&*orig) {
            Some(data) => {
                let data = NonNull::from(data);
                let orig = ManuallyDrop::new(orig);
                Ok(MappedRwLockReadGuard {
                    raw: orig.raw(),
                    data,
                })
            }
            None => Err(orig),
        }
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: while a read guard exists no writer holds the lock (the lock state counts
        // this reader), so no `&mut T` exists; the pointer came from the lock's cell. Under
        // covariance `T` may name shorter lifetimes than the lock was made with, which changes
        // neither its layout nor what the guard does with it (read it).
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        self.raw.read_unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

/// Exclusive access to an [`RwLock`]'s value; releases the write lock when dropped, and
/// poisons it if dropped while its green thread unwinds.
///
/// ```
/// use greenweave::sync::RwLock;
///
/// greenweave::run(|| {
///     let lock = RwLock::new(vec![1]);
///     lock.write().unwrap().push(2); // DerefMut to the Vec
///     assert_eq!(*lock.read().unwrap(), [1, 2]);
/// });
/// ```
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockWriteGuard<'a, T: ?Sized + 'a> {
    lock: &'a RwLock<T>,
    /// Whether the thread was already unwinding when it took the lock (see `MutexGuard`).
    panicking: bool,
}

impl<'a, T: ?Sized> RwLockWriteGuard<'a, T> {
    /// Turns the write lock into a read lock, atomically, as std's
    /// `RwLockWriteGuard::downgrade`: the readers queued at the front of the line (up to the
    /// first waiting writer) get in with it, and no writer can take the lock in between, so
    /// the value read through the returned guard is the value this writer left. Does not
    /// poison the lock.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use greenweave::sync::{RwLock, RwLockWriteGuard};
    ///
    /// greenweave::run(|| {
    ///     let lock = Rc::new(RwLock::new(1));
    ///     let mut guard = lock.write().unwrap();
    ///     let writer = {
    ///         let lock = lock.clone();
    ///         greenweave::spawn(move || *lock.write().unwrap() += 1)
    ///     };
    ///     greenweave::thread::yield_now(); // the other writer queues
    ///     *guard = 10;
    ///     let read = RwLockWriteGuard::downgrade(guard);
    ///     greenweave::thread::yield_now(); // it cannot get in while the read lock is held
    ///     assert_eq!(*read, 10);
    ///     drop(read);
    ///     writer.join().unwrap();
    ///     assert_eq!(*lock.read().unwrap(), 11);
    /// });
    /// ```
    pub fn downgrade(s: Self) -> RwLockReadGuard<'a, T> {
        let lock = s.lock;
        // Not dropped: that would release the write lock (and might poison it).
        std::mem::forget(s);
        lock.raw.downgrade();
        RwLockReadGuard::new(lock)
    }

    /// Makes a guard of a part of the value, which keeps the write lock until it is dropped,
    /// as parking_lot's `RwLockWriteGuard::map` and std's (nightly, `mapped_lock_guards`).
    ///
    /// # Panics
    /// If `f` panics: the original guard is then dropped, which releases the write lock and
    /// poisons it, as std's does.
    ///
    /// ```
    /// use greenweave::sync::{RwLock, RwLockWriteGuard};
    ///
    /// greenweave::run(|| {
    ///     let config = RwLock::new((String::from("name"), 8080));
    ///     let mut port = RwLockWriteGuard::map(config.write().unwrap(), |(_, port)| port);
    ///     *port = 9090;
    ///     drop(port);
    ///     assert_eq!(config.read().unwrap().1, 9090);
    /// });
    /// ```
    pub fn map<U, F>(orig: Self, f: F) -> MappedRwLockWriteGuard<'a, U>
    where
        F: FnOnce(&mut T) -> &mut U,
        U: ?Sized,
    {
        // SAFETY: the write guard is the only guard while it exists (see `deref_mut`); the
        // closure's signature ties what it returns to the borrow it is given, and the guard is
        // consumed, so the mapped guard's pointer is the only way left to the value until the
        // lock is released. If `f` panics, `orig` is dropped: unlocked and poisoned.
        let data = NonNull::from(f(unsafe { &mut *orig.lock.data.get() }));
        let orig = ManuallyDrop::new(orig);
        MappedRwLockWriteGuard::new(&orig.lock.raw, data, orig.panicking)
    }

    /// [`map`](RwLockWriteGuard::map) for a part that may not be there: `f` returns `None` and
    /// the original guard comes back as `Err`, still holding the write lock. parking_lot's
    /// `RwLockWriteGuard::try_map` (std's nightly names it `filter_map`).
    ///
    /// # Errors
    /// The original guard, when `f` returns `None`.
    ///
    /// # Panics
    /// If `f` panics: the original guard is then dropped, which releases the write lock and
    /// poisons it.
    pub fn try_map<U, F>(orig: Self, f: F) -> Result<MappedRwLockWriteGuard<'a, U>, Self>
    where
        F: FnOnce(&mut T) -> Option<&mut U>,
        U: ?Sized,
    {
        // SAFETY: as in `map`.
        match f(unsafe { &mut *orig.lock.data.get() }) {
            Some(data) => {
                let data = NonNull::from(data);
                let orig = ManuallyDrop::new(orig);
                Ok(MappedRwLockWriteGuard::new(
                    &orig.lock.raw,
                    data,
                    orig.panicking,
                ))
            }
            None => Err(orig),
        }
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the write guard is the only guard while it exists, and all green threads run
        // on this one OS thread.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only borrow through the guard.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.raw.release_write(self.panicking);
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

/// Shared access to a part of an [`RwLock`]'s value, made by [`RwLockReadGuard::map`] or
/// [`RwLockReadGuard::try_map`] (parking_lot's names; std's nightly `mapped_lock_guards` has
/// the same type); releases the read lock when dropped.
///
/// Covariant in `T`, as std's is, and, like [`RwLockReadGuard`], neither `Send` nor `Sync`.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct MappedRwLockReadGuard<'a, T: ?Sized + 'a> {
    raw: &'a RawRwLock,
    /// The part of the value, valid while the read lock is held, which is for `'a` at most.
    data: NonNull<T>,
}

impl<'a, T: ?Sized> MappedRwLockReadGuard<'a, T> {
    /// Maps again, to a part of this part, as [`RwLockReadGuard::map`].
    ///
    /// # Panics
    /// If `f` panics: the guard is then dropped, which releases the read lock.
    ///
    /// ```
    /// use greenweave::sync::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};
    ///
    /// greenweave::run(|| {
    ///     let nested = RwLock::new(((0, 1), 2));
    ///     let inner = RwLockReadGuard::map(nested.read().unwrap(), |n| &n.0);
    ///     let one = MappedRwLockReadGuard::map(inner, |pair| &pair.1);
    ///     assert_eq!(*one, 1);
    /// });
    /// ```
    pub fn map<U, F>(orig: Self, f: F) -> MappedRwLockReadGuard<'a, U>
    where
        F: FnOnce(&T) -> &U,
        U: ?Sized,
    {
        let data = NonNull::from(f(&*orig));
        let orig = ManuallyDrop::new(orig);
        MappedRwLockReadGuard {
            raw: orig.raw,
            data,
        }
    }

    /// [`map`](MappedRwLockReadGuard::map) for a part that may not be there, as
    /// [`RwLockReadGuard::try_map`].
    ///
    /// # Errors
    /// The original guard, when `f` returns `None`.
    ///
    /// # Panics
    /// If `f` panics: the guard is then dropped, which releases the read lock.
    pub fn try_map<U, F>(orig: Self, f: F) -> Result<MappedRwLockReadGuard<'a, U>, Self>
    where
        F: FnOnce(&T) -> Option<&U>,
        U: ?Sized,
    {
        match f(&*orig) {
            Some(data) => {
                let data = NonNull::from(data);
                let orig = ManuallyDrop::new(orig);
                Ok(MappedRwLockReadGuard {
                    raw: orig.raw,
                    data,
                })
            }
            None => Err(orig),
        }
    }
}

impl<T: ?Sized> Deref for MappedRwLockReadGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: while the guard exists no writer holds the lock (the lock counts this
        // reader), and the pointer came from a `&` to a part of the value.
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> Drop for MappedRwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        self.raw.read_unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MappedRwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MappedRwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

/// Exclusive access to a part of an [`RwLock`]'s value, made by [`RwLockWriteGuard::map`] or
/// [`RwLockWriteGuard::try_map`]; releases the write lock when dropped, and poisons it if
/// dropped while its green thread unwinds, as a [`RwLockWriteGuard`] does.
///
/// Invariant in `T`, as std's is, and neither `Send` nor `Sync`.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct MappedRwLockWriteGuard<'a, T: ?Sized + 'a> {
    raw: &'a RawRwLock,
    /// The part of the value, valid while the write lock is held, which is for `'a` at most.
    data: NonNull<T>,
    /// As [`RwLockWriteGuard`]'s: whether the thread was already unwinding when it took the
    /// lock.
    panicking: bool,
    /// The guard stands for a `&'a mut T` (invariance, as std's).
    _variance: PhantomData<&'a mut T>,
}

impl<'a, T: ?Sized> MappedRwLockWriteGuard<'a, T> {
    fn new(raw: &'a RawRwLock, data: NonNull<T>, panicking: bool) -> MappedRwLockWriteGuard<'a, T> {
        MappedRwLockWriteGuard {
            raw,
            data,
            panicking,
            _variance: PhantomData,
        }
    }

    /// Maps again, to a part of this part, as [`RwLockWriteGuard::map`].
    ///
    /// # Panics
    /// If `f` panics: the guard is then dropped, which releases the write lock and poisons it.
    ///
    /// ```
    /// use greenweave::sync::{MappedRwLockWriteGuard, RwLock, RwLockWriteGuard};
    ///
    /// greenweave::run(|| {
    ///     let nested = RwLock::new(((0, 1), 2));
    ///     let inner = RwLockWriteGuard::map(nested.write().unwrap(), |n| &mut n.0);
    ///     let mut one = MappedRwLockWriteGuard::map(inner, |pair| &mut pair.1);
    ///     *one = 10;
    ///     drop(one);
    ///     assert_eq!(*nested.read().unwrap(), ((0, 10), 2));
    /// });
    /// ```
    pub fn map<U, F>(mut orig: Self, f: F) -> MappedRwLockWriteGuard<'a, U>
    where
        F: FnOnce(&mut T) -> &mut U,
        U: ?Sized,
    {
        // SAFETY: the guard holds the write lock and is the only way to its part of the value
        // (see `RwLockWriteGuard::map`), and it is consumed here; if `f` panics, `orig` is
        // dropped.
        let data = NonNull::from(f(unsafe { orig.data.as_mut() }));
        let orig = ManuallyDrop::new(orig);
        MappedRwLockWriteGuard::new(orig.raw, data, orig.panicking)
    }

    /// [`map`](MappedRwLockWriteGuard::map) for a part that may not be there, as
    /// [`RwLockWriteGuard::try_map`].
    ///
    /// # Errors
    /// The original guard, when `f` returns `None`.
    ///
    /// # Panics
    /// If `f` panics: the guard is then dropped, which releases the write lock and poisons it.
    pub fn try_map<U, F>(mut orig: Self, f: F) -> Result<MappedRwLockWriteGuard<'a, U>, Self>
    where
        F: FnOnce(&mut T) -> Option<&mut U>,
        U: ?Sized,
    {
        // SAFETY: as in `map`.
        match f(unsafe { orig.data.as_mut() }) {
            Some(data) => {
                let data = NonNull::from(data);
                let orig = ManuallyDrop::new(orig);
                Ok(MappedRwLockWriteGuard::new(orig.raw, data, orig.panicking))
            }
            None => Err(orig),
        }
    }
}

impl<T: ?Sized> Deref for MappedRwLockWriteGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard holds the write lock, so no other guard reaches the value, and the
        // pointer came from a `&mut` to a part of it; all green threads run on this OS thread.
        unsafe { self.data.as_ref() }
    }
}

impl<T: ?Sized> DerefMut for MappedRwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only borrow through the guard.
        unsafe { self.data.as_mut() }
    }
}

impl<T: ?Sized> Drop for MappedRwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.raw.release_write(self.panicking);
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MappedRwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MappedRwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}
