//! Green-thread-local storage: [`LocalKey`], declared with [`green_local!`](crate::green_local),
//! std's `thread_local!` / `LocalKey` with one value per green thread.
//!
//! Owns: the values' tables (one per green thread, kept behind one pointer in its `Task`, and one
//! per OS thread for code that runs outside any green thread), the process-wide numbering of
//! keys, lazy initialisation, and destruction at a green thread's end ([`end_of_green_thread`])
//! and at an OS thread's exit.
//!
//! May not: cost a green thread that never uses it more than that pointer (nothing on spawn,
//! park or yield; one test when it ends), or free a value that anything may still borrow.
//!
//! Layout. A key gets a small index the first time it is used anywhere in the process (an atomic
//! counter); a table is a vector of slots indexed by it, each holding a boxed value, so a lookup
//! is an index and a null test. Whose table: the scheduler's running task's (a coroutine or
//! greenlet resumed by a green thread runs on its behalf, so it sees that green thread's values),
//! else this OS thread's (`OS_TABLE`).
//!
//! Soundness. A value is freed only when its table is destroyed, and a table is destroyed only
//! when no `with` (nor a lazy initialisation) is in progress on it: each holds a count on the
//! table while it runs (`LocalTable::borrows`). Normally none is when a green thread ends (they
//! are frames of its own stack), but a coroutine or greenlet it resumed may be suspended inside
//! one and outlive it; then the values still alive, and the table, are leaked rather than freed.

use std::cell::{Cell, RefCell, UnsafeCell};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::scheduler::{self, Cancelled};
use super::task::Task;

/// A key to green-thread-local storage, declared with [`green_local!`](crate::green_local): each
/// green thread that uses it gets its own value, initialised on its first use there and dropped
/// when that green thread ends. Code outside any green thread (a plain OS thread, before or after
/// [`run`](crate::run), the scheduler itself) gets one value per OS thread, as with std's
/// `thread_local!`.
///
/// The methods are those of `std::thread::LocalKey`.
///
/// ```
/// use std::cell::Cell;
///
/// greenweave::green_local! {
///     static REQUESTS: Cell<u32> = const { Cell::new(0) };
/// }
///
/// greenweave::run(|| {
///     REQUESTS.set(10);
///     let other = greenweave::spawn(|| {
///         REQUESTS.set(REQUESTS.get() + 1);
///         REQUESTS.get()
///     });
///     assert_eq!(other.join().unwrap(), 1); // its own value, starting at 0
///     assert_eq!(REQUESTS.get(), 10); // ours is untouched
/// });
/// ```
pub struct LocalKey<T: 'static> {
    /// The key's slot in every table, `UNASSIGNED` until its first use.
    index: AtomicUsize,
    init: fn() -> T,
}

/// `LocalKey::index` before the key's first use. Never a slot: a lookup with it misses.
const UNASSIGNED: usize = usize::MAX;

/// The next index to hand to a key on its first use.
static NEXT_INDEX: AtomicUsize = AtomicUsize::new(0);

/// The error of [`LocalKey::try_with`]: the value was already destroyed (its green thread or OS
/// thread is ending and its destructor has run or is running), as `std::thread::AccessError`.
///
/// ```
/// use std::cell::RefCell;
///
/// struct LooksAtItself;
///
/// impl Drop for LooksAtItself {
///     fn drop(&mut self) {
///         // Its own key's value is being dropped (this very destructor).
///         let error = ITSELF.try_with(|_| ()).unwrap_err();
///         assert_eq!(error.to_string(), "already destroyed");
///     }
/// }
///
/// greenweave::green_local! {
///     static ITSELF: RefCell<Option<LooksAtItself>> = const { RefCell::new(None) };
/// }
///
/// greenweave::run(|| ITSELF.set(Some(LooksAtItself)));
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AccessError(());

impl fmt::Debug for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessError").finish_non_exhaustive()
    }
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("already destroyed")
    }
}

impl std::error::Error for AccessError {}

impl<T: 'static> fmt::Debug for LocalKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalKey").finish_non_exhaustive()
    }
}

impl<T: 'static> LocalKey<T> {
    /// Used by [`green_local!`](crate::green_local); not a public interface.
    #[doc(hidden)]
    pub const fn new(init: fn() -> T) -> LocalKey<T> {
        LocalKey {
            index: AtomicUsize::new(UNASSIGNED),
            init,
        }
    }

    /// Calls `f` with a reference to this green thread's value, initialising it first if this
    /// green thread has not used it yet.
    ///
    /// # Panics
    /// If the value was already destroyed (a destructor of another green-local value, run as the
    /// green thread ends, that uses this one after it was dropped; [`try_with`] returns an
    /// error instead), and with the initialiser's panic.
    ///
    /// [`try_with`]: LocalKey::try_with
    ///
    /// ```
    /// use std::cell::RefCell;
    ///
    /// greenweave::green_local! {
    ///     static LOG: RefCell<Vec<&'static str>> = RefCell::new(Vec::new());
    /// }
    ///
    /// greenweave::run(|| {
    ///     LOG.with(|log| log.borrow_mut().push("started"));
    ///     assert_eq!(LOG.with(|log| log.borrow().len()), 1);
    /// });
    /// ```
    #[inline]
    pub fn with<F, R>(&'static self, f: F) -> R
    where
        F: FnOnce(&T) -> R,
    {
        match self.try_with(f) {
            Ok(result) => result,
            Err(error) => access_failed(error),
        }
    }

    /// Calls `f` with a reference to this green thread's value, as [`with`](LocalKey::with)
    /// does, or returns [`AccessError`] if the value was already destroyed.
    ///
    /// # Panics
    /// With the initialiser's panic.
    ///
    /// ```
    /// use std::cell::Cell;
    ///
    /// greenweave::green_local! {
    ///     static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// }
    ///
    /// greenweave::run(|| {
    ///     assert_eq!(DEPTH.try_with(|depth| depth.get()), Ok(0));
    /// });
    /// ```
    #[inline]
    pub fn try_with<F, R>(&'static self, f: F) -> Result<R, AccessError>
    where
        F: FnOnce(&T) -> R,
    {
        let (table, value) = self.value()?;
        let _borrow = Borrow::new(table);
        // SAFETY: the value lives in a box owned by `table`, freed only when the table is
        // destroyed, which never happens while a borrow of it is counted (`_borrow`, dropped
        // after `f` returns or unwinds); no `&mut` to it is ever made.
        Ok(f(unsafe { value.as_ref() }))
    }

    /// This green thread's (or OS thread's) table and the value in it, initialised if needed.
    #[inline(always)]
    fn value(&'static self) -> Result<(NonNull<LocalTable>, NonNull<T>), AccessError> {
        let table = current_table()?;
        // SAFETY: `current_table` returns a live table (see `LocalTable`'s invariants).
        match unsafe { table.as_ref() }.lookup(self.index.load(Ordering::Relaxed)) {
            Some(value) => Ok((table, value.cast())),
            None => {
                let (value, unstored) = self.initialize(table, None)?;
                // A nested use of the key by its initialiser stored a value first. Dropping
                // the other cannot free it: only the table's destruction frees values, and it
                // never runs inside a use of the table.
                drop(unstored);
                Ok((table, value))
            }
        }
    }

    /// The key's index, assigned on its first use.
    #[inline]
    fn index(&self) -> usize {
        match self.index.load(Ordering::Relaxed) {
            UNASSIGNED => self.assign_index(),
            index => index,
        }
    }

    #[cold]
    fn assign_index(&self) -> usize {
        // The index is only a number (it publishes no other data): relaxed suffices. Two
        // threads racing here both take a number; the loser's is never used.
        let fresh = NEXT_INDEX.fetch_add(1, Ordering::Relaxed);
        assert!(fresh < UNASSIGNED, "greenweave: too many green_local! keys");
        match self
            .index
            .compare_exchange(UNASSIGNED, fresh, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => fresh,
            Err(winner) => winner,
        }
    }

    /// Stores the key's value in `table`: `given`, or else what the initialiser returns. With
    /// the value in the table, returns what was not stored (see below).
    ///
    /// The initialiser may use other keys (the table grows) or park. If it uses this key itself,
    /// the value that nested use stored is kept and the one computed here comes back unstored:
    /// a reference to the first may still exist (in a coroutine suspended inside that nested
    /// `with`), none to the second does. (std keeps the second; with no coroutines it cannot
    /// tell the difference.)
    #[cold]
    #[inline(never)]
    fn initialize(
        &'static self,
        table: NonNull<LocalTable>,
        given: Option<T>,
    ) -> Result<(NonNull<T>, Option<T>), AccessError> {
        let index = self.index();
        // SAFETY: the table is live; the borrow of its slot ends before any code of the user's.
        if let Some(value) = unsafe { table.as_ref() }.prepare(index)? {
            return Ok((value.cast(), given));
        }
        let value = {
            // The initialiser is user code, which may suspend (in a coroutine): the table must
            // outlive it even if its green thread ends meanwhile.
            let _borrow = Borrow::new(table);
            given.unwrap_or_else(self.init)
        };
        // SAFETY: the table is still live: it is destroyed only with no borrow counted, and a
        // table whose destruction found one is leaked. No user code runs while the slot is
        // borrowed (`store` only moves pointers).
        match unsafe { table.as_ref() }.store(index, Box::new(value)) {
            Ok(value) => Ok((value, None)),
            Err((Some(kept), unstored)) => Ok((kept.cast(), Some(*unstored))),
            Err((None, unstored)) => {
                drop(unstored);
                Err(AccessError(()))
            }
        }
    }

    /// Calls `f` with `init` (if the value already existed) or `None` (if `init` became the
    /// value, without running the initialiser) and a reference to the value: std's way of
    /// implementing `set` on keys of cells.
    fn initialize_with<F, R>(&'static self, init: T, f: F) -> R
    where
        F: FnOnce(Option<T>, &T) -> R,
    {
        let table = current_table().unwrap_or_else(|error| access_failed(error));
        // SAFETY: `current_table` returns a live table.
        let found = unsafe { table.as_ref() }.lookup(self.index.load(Ordering::Relaxed));
        let (unstored, value) = match found {
            Some(value) => (Some(init), value.cast::<T>()),
            None => {
                let (value, unstored) = self
                    .initialize(table, Some(init))
                    .unwrap_or_else(|error| access_failed(error));
                (unstored, value)
            }
        };
        let _borrow = Borrow::new(table);
        // SAFETY: as in `try_with`.
        f(unstored, unsafe { value.as_ref() })
    }
}

impl<T: 'static> LocalKey<Cell<T>> {
    /// Sets this green thread's value to `value`. If this green thread has not used the key
    /// yet, `value` becomes its value without running the initialiser (as std's `set`).
    ///
    /// # Panics
    /// If the value was already destroyed.
    ///
    /// ```
    /// use std::cell::Cell;
    ///
    /// greenweave::green_local! {
    ///     static X: Cell<i32> = panic!("never run: set initialises it");
    /// }
    ///
    /// greenweave::run(|| {
    ///     X.set(123);
    ///     assert_eq!(X.get(), 123);
    /// });
    /// ```
    pub fn set(&'static self, value: T) {
        self.initialize_with(Cell::new(value), |value, cell| {
            if let Some(value) = value {
                // The cell existed, so `value` did not initialise it: overwrite.
                cell.set(value.into_inner());
            }
        });
    }

    /// A copy of this green thread's value.
    ///
    /// # Panics
    /// If the value was already destroyed.
    ///
    /// ```
    /// use std::cell::Cell;
    ///
    /// greenweave::green_local! {
    ///     static X: Cell<i32> = const { Cell::new(1) };
    /// }
    ///
    /// greenweave::run(|| assert_eq!(X.get(), 1));
    /// ```
    pub fn get(&'static self) -> T
    where
        T: Copy,
    {
        self.with(Cell::get)
    }

    /// Takes this green thread's value, leaving `Default::default()`.
    ///
    /// # Panics
    /// If the value was already destroyed.
    ///
    /// ```
    /// use std::cell::Cell;
    ///
    /// greenweave::green_local! {
    ///     static X: Cell<Option<i32>> = const { Cell::new(Some(1)) };
    /// }
    ///
    /// greenweave::run(|| {
    ///     assert_eq!(X.take(), Some(1));
    ///     assert_eq!(X.take(), None);
    /// });
    /// ```
    pub fn take(&'static self) -> T
    where
        T: Default,
    {
        self.with(Cell::take)
    }

    /// Replaces this green thread's value with `value`, returning the old one.
    ///
    /// # Panics
    /// If the value was already destroyed.
    ///
    /// ```
    /// use std::cell::Cell;
    ///
    /// greenweave::green_local! {
    ///     static X: Cell<i32> = const { Cell::new(1) };
    /// }
    ///
    /// greenweave::run(|| {
    ///     assert_eq!(X.replace(2), 1);
    ///     assert_eq!(X.replace(3), 2);
    /// });
    /// ```
    pub fn replace(&'static self, value: T) -> T {
        self.with(|cell| cell.replace(value))
    }
}

impl<T: 'static> LocalKey<RefCell<T>> {
    /// Calls `f` with a shared borrow of this green thread's value.
    ///
    /// # Panics
    /// If the value is mutably borrowed, or was already destroyed.
    ///
    /// ```
    /// use std::cell::RefCell;
    ///
    /// greenweave::green_local! {
    ///     static X: RefCell<Vec<i32>> = RefCell::new(vec![1, 2]);
    /// }
    ///
    /// greenweave::run(|| X.with_borrow(|v| assert_eq!(*v, [1, 2])));
    /// ```
    pub fn with_borrow<F, R>(&'static self, f: F) -> R
    where
        F: FnOnce(&T) -> R,
    {
        self.with(|cell| f(&cell.borrow()))
    }

    /// Calls `f` with a mutable borrow of this green thread's value.
    ///
    /// # Panics
    /// If the value is borrowed, or was already destroyed.
    ///
    /// ```
    /// use std::cell::RefCell;
    ///
    /// greenweave::green_local! {
    ///     static X: RefCell<Vec<i32>> = RefCell::new(Vec::new());
    /// }
    ///
    /// greenweave::run(|| {
    ///     X.with_borrow_mut(|v| v.push(1));
    ///     X.with_borrow(|v| assert_eq!(*v, [1]));
    /// });
    /// ```
    pub fn with_borrow_mut<F, R>(&'static self, f: F) -> R
    where
        F: FnOnce(&mut T) -> R,
    {
        self.with(|cell| f(&mut cell.borrow_mut()))
    }

    /// Sets this green thread's value to `value`. If this green thread has not used the key
    /// yet, `value` becomes its value without running the initialiser (as std's `set`).
    ///
    /// # Panics
    /// If the value is borrowed, or was already destroyed.
    ///
    /// ```
    /// use std::cell::RefCell;
    ///
    /// greenweave::green_local! {
    ///     static X: RefCell<Vec<i32>> = panic!("never run: set initialises it");
    /// }
    ///
    /// greenweave::run(|| {
    ///     X.set(vec![1, 2, 3]);
    ///     X.with_borrow(|v| assert_eq!(*v, [1, 2, 3]));
    /// });
    /// ```
    pub fn set(&'static self, value: T) {
        self.initialize_with(RefCell::new(value), |value, cell| {
            if let Some(value) = value {
                // The cell existed, so `value` did not initialise it: overwrite.
                *cell.borrow_mut() = value.into_inner();
            }
        });
    }

    /// Takes this green thread's value, leaving `Default::default()`.
    ///
    /// # Panics
    /// If the value is borrowed, or was already destroyed.
    ///
    /// ```
    /// use std::cell::RefCell;
    ///
    /// greenweave::green_local! {
    ///     static X: RefCell<Vec<i32>> = RefCell::new(vec![1]);
    /// }
    ///
    /// greenweave::run(|| {
    ///     assert_eq!(X.take(), [1]);
    ///     assert!(X.take().is_empty());
    /// });
    /// ```
    pub fn take(&'static self) -> T
    where
        T: Default,
    {
        self.with(RefCell::take)
    }

    /// Replaces this green thread's value with `value`, returning the old one.
    ///
    /// # Panics
    /// If the value is borrowed, or was already destroyed.
    ///
    /// ```
    /// use std::cell::RefCell;
    ///
    /// greenweave::green_local! {
    ///     static X: RefCell<Vec<i32>> = RefCell::new(Vec::new());
    /// }
    ///
    /// greenweave::run(|| {
    ///     assert!(X.replace(vec![1]).is_empty());
    ///     assert_eq!(X.replace(vec![2]), [1]);
    /// });
    /// ```
    pub fn replace(&'static self, value: T) -> T {
        self.with(|cell| cell.replace(value))
    }
}

/// The panic of `with` (and the cell methods) on a destroyed value.
#[cold]
#[inline(never)]
fn access_failed(error: AccessError) -> ! {
    panic!(
        "cannot access a green-thread-local value during or after destruction ({error}): a \
         destructor of a green_local! value used a key whose value was already dropped; use \
         LocalKey::try_with there"
    )
}

/// Where a green thread's (or an OS thread's) table lives: a pointer to it, null until the
/// first use and [`DESTROYED`] once destruction has finished. One word in every `Task`.
///
/// It has no destructor: a table still here when its owner goes (a green thread whose runtime
/// gave up on it, its stack leaked) is leaked, never dropped.
pub(crate) struct TableHome {
    table: Cell<*mut LocalTable>,
}

/// [`TableHome`] after its table was destroyed: dangling and never dereferenced (no allocation of
/// a `LocalTable` has this address).
const DESTROYED: *mut LocalTable = NonNull::<LocalTable>::dangling().as_ptr();

impl TableHome {
    pub(crate) const fn new() -> TableHome {
        TableHome {
            table: Cell::new(ptr::null_mut()),
        }
    }

    /// Makes the home as new, for a task reused by a later spawn (its table is already
    /// destroyed, or leaked with its stack).
    #[inline]
    pub(crate) fn reset(&self) {
        self.table.set(ptr::null_mut());
    }
}

/// One green thread's (or OS thread's) values.
///
/// Invariants: a table is live (neither freed nor destroyed) while its home points to it; it is
/// freed only by [`destroy`], and only when `borrows` is 0, so a table with a borrow counted is
/// never freed; a slot's value is freed only by `destroy`, under the same rule. Nothing
/// reentrant runs while a reference into `slots` or `order` is held (only pointer moves), so
/// those references never overlap.
struct LocalTable {
    slots: UnsafeCell<Vec<Slot>>,
    /// The indices of the live values, in the order they were initialised (destroyed last
    /// first, so a value made from another one is dropped before it).
    order: UnsafeCell<Vec<usize>>,
    /// `with` calls and initialisations in progress on this table's values.
    borrows: Cell<usize>,
}

#[derive(Clone, Copy)]
struct Slot {
    /// The value (a `Box<T>` made into a pointer), or null when there is none.
    value: *mut (),
    /// Drops `value`'s box.
    drop_value: unsafe fn(*mut ()),
    /// The value was dropped (or is being dropped) by the table's destruction; the key cannot
    /// be used again in this table.
    destroyed: bool,
}

impl Slot {
    const EMPTY: Slot = Slot {
        value: ptr::null_mut(),
        drop_value: drop_nothing,
        destroyed: false,
    };
}

/// `Slot::drop_value` of an empty slot.
unsafe fn drop_nothing(_: *mut ()) {}

/// `Slot::drop_value` of a `T`.
///
/// # Safety
/// `value` came from `Box::<T>::into_raw` and is dropped once.
unsafe fn drop_box<T>(value: *mut ()) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(value.cast::<T>()) });
}

impl LocalTable {
    fn new() -> LocalTable {
        LocalTable {
            slots: UnsafeCell::new(Vec::new()),
            order: UnsafeCell::new(Vec::new()),
            borrows: Cell::new(0),
        }
    }

    /// The live value at `index`, if there is one (`UNASSIGNED` never has one).
    #[inline(always)]
    fn lookup(&self, index: usize) -> Option<NonNull<()>> {
        // SAFETY: no other reference into `slots` is live (see the type's invariants).
        let slots = unsafe { &*self.slots.get() };
        NonNull::new(slots.get(index)?.value)
    }

    /// Makes room for slot `index` and says what is in it: `Ok(Some)` a live value,
    /// `Ok(None)` nothing yet, `Err` destroyed.
    fn prepare(&self, index: usize) -> Result<Option<NonNull<()>>, AccessError> {
        // SAFETY: as in `lookup`; growing the vector runs no code of the user's.
        let slots = unsafe { &mut *self.slots.get() };
        if slots.len() <= index {
            slots.resize(index + 1, Slot::EMPTY);
        }
        let slot = slots[index];
        if slot.destroyed {
            return Err(AccessError(()));
        }
        Ok(NonNull::new(slot.value))
    }

    /// Puts `value` in slot `index` (made by `prepare`), unless it has a value already or was
    /// destroyed meanwhile (by a nested use of the key during the initialiser): then `value`
    /// comes back, with the value already there if there is one.
    fn store<T>(&self, index: usize, value: Box<T>) -> Result<NonNull<T>, Unstored<T>> {
        // SAFETY: as in `lookup`; nothing here runs code of the user's.
        let slot = unsafe { &mut (&mut *self.slots.get())[index] };
        if slot.destroyed || !slot.value.is_null() {
            return Err((NonNull::new(slot.value), value));
        }
        let value = NonNull::from(Box::leak(value));
        slot.value = value.as_ptr().cast();
        slot.drop_value = drop_box::<T>;
        // SAFETY: as above, for `order`.
        unsafe { (*self.order.get()).push(index) };
        Ok(value)
    }

    /// Takes the most recently initialised live value out of its slot (marking the slot
    /// destroyed): a copy of the slot as it was, for its value and the function that drops it.
    fn take_last(&self) -> Option<Slot> {
        // SAFETY: as in `lookup`; nothing here runs code of the user's.
        let index = unsafe { (*self.order.get()).pop()? };
        // SAFETY: as above.
        let slot = unsafe { &mut (&mut *self.slots.get())[index] };
        let taken = *slot;
        slot.destroyed = true;
        slot.value = ptr::null_mut();
        Some(taken)
    }
}

/// What [`LocalTable::store`] did not store: the value already in the slot, if any (none: the
/// slot was destroyed), and the value it was given.
type Unstored<T> = (Option<NonNull<()>>, Box<T>);

/// A counted borrow of a table: the table is not freed while it lives.
struct Borrow(NonNull<LocalTable>);

impl Borrow {
    #[inline(always)]
    fn new(table: NonNull<LocalTable>) -> Borrow {
        // SAFETY: the caller has a live table; from now on it is not freed (see `LocalTable`).
        let borrows = unsafe { &table.as_ref().borrows };
        borrows.set(borrows.get() + 1);
        Borrow(table)
    }
}

impl Drop for Borrow {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the count this borrow holds kept the table from being freed.
        let borrows = unsafe { &self.0.as_ref().borrows };
        borrows.set(borrows.get() - 1);
    }
}

thread_local! {
    /// The table of code that runs outside any green thread on this OS thread. No destructor,
    /// so reaching it never checks for one; [`DRAIN`] destroys the table.
    static OS_TABLE: TableHome = const { TableHome::new() };

    /// Destroys this OS thread's table when the thread exits; registered when the table is
    /// made.
    static DRAIN: Drain = const { Drain };
}

/// The running code's table: the running green thread's, or else this OS thread's; made on the
/// first use.
#[inline(always)]
fn current_table() -> Result<NonNull<LocalTable>, AccessError> {
    let task = scheduler::current_task_ptr();
    let home: *const TableHome = if task.is_null() {
        OS_TABLE.with(ptr::from_ref)
    } else {
        // SAFETY: the running task is alive while it runs (`run_task` holds it).
        unsafe { &raw const (*task).locals }
    };
    // SAFETY: a task's home lives as long as the task, which runs now; the OS thread's has no
    // destructor, so it lives as long as the thread.
    let table = unsafe { (*home).table.get() };
    if !table.is_null() && table != DESTROYED {
        // SAFETY: not null.
        return Ok(unsafe { NonNull::new_unchecked(table) });
    }
    // SAFETY: as above.
    open_table(unsafe { &*home }, task.is_null())
}

/// Makes the table of `home` on its first use, or says it is destroyed.
#[cold]
#[inline(never)]
fn open_table(home: &TableHome, of_os_thread: bool) -> Result<NonNull<LocalTable>, AccessError> {
    if home.table.get() == DESTROYED {
        return Err(AccessError(()));
    }
    // Reaching DRAIN registers its destructor; it fails only if the thread is exiting and DRAIN
    // is gone, when no table can be destroyed any more.
    if of_os_thread && DRAIN.try_with(|_| ()).is_err() {
        return Err(AccessError(()));
    }
    let table = NonNull::from(Box::leak(Box::new(LocalTable::new())));
    home.table.set(table.as_ptr());
    Ok(table)
}

/// Destroys this OS thread's table when the thread exits.
struct Drain;

impl Drop for Drain {
    fn drop(&mut self) {
        let _ = OS_TABLE.try_with(|home| {
            // (`std::thread::current` may be gone by now.)
            destroy(home, || "an OS thread, outside any green thread".to_owned())
        });
    }
}

/// Drops the values of the green thread `task`, which has just finished its body (returned,
/// panicked or was cancelled), on its own stack: to be called by every green thread's body
/// before it publishes its result, so its joiner sees the destructors' effects.
///
/// Values are dropped last initialised first. A destructor may park (a cancelled green thread's
/// cancellation is raised again at such a park, which ends that destructor early); it may use
/// keys not yet dropped, and initialise new ones, which are then dropped in turn (each key at
/// most once, so this ends); a key already dropped gives `AccessError`. A destructor that
/// panics aborts the process, as std's do.
///
/// If `task` is not running (its runtime is ending without it and unwinds its stack from
/// outside), its values are leaked: their destructors would not run on its behalf.
#[inline]
pub(crate) fn end_of_green_thread(task: &Task) {
    if task.locals.table.get().is_null() {
        return; // never used
    }
    destroy_green(task);
}

#[cold]
#[inline(never)]
fn destroy_green(task: &Task) {
    if !ptr::eq(scheduler::current_task_ptr(), task) {
        return;
    }
    destroy(&task.locals, || format!("green thread {}", task.describe()));
}

/// Destroys the table of `home` (see [`end_of_green_thread`]); `owner` names its green thread
/// or OS thread for the abort message.
fn destroy(home: &TableHome, owner: impl Fn() -> String) {
    let table = home.table.get();
    if table.is_null() || table == DESTROYED {
        return;
    }
    // SAFETY: the home points to the table, so it is live, and it stays so until freed below.
    let live = unsafe { &*table };
    loop {
        if live.borrows.get() != 0 {
            // A coroutine or greenlet suspended inside a `with` (or an initialiser) on this
            // table outlives its owner: what it borrows must stay. Leak the rest.
            home.table.set(DESTROYED);
            return;
        }
        let Some(Slot {
            value, drop_value, ..
        }) = live.take_last()
        else {
            break;
        };
        // SAFETY: the value was just taken out of its slot, which is marked destroyed, so it is
        // dropped exactly once; no borrow of the table is counted, so nothing refers to it.
        let dropped = panic::catch_unwind(AssertUnwindSafe(|| unsafe { drop_value(value) }));
        if let Err(payload) = dropped
            && !payload.is::<Cancelled>()
        {
            // A cancelled green thread's destructor that parked was cut short by its
            // cancellation (already unwound): the rest of the values are still dropped. Any
            // other panic aborts, as std does for a thread_local! value's destructor.
            eprintln!(
                "fatal runtime error: greenweave: a green_local! value's destructor panicked \
                 in {}; aborting",
                owner()
            );
            std::process::abort();
        }
    }
    home.table.set(DESTROYED);
    // SAFETY: allocated by `open_table`; the home no longer points to it and no borrow is
    // counted, so nothing refers to it.
    drop(unsafe { Box::from_raw(table) });
}

/// Declares green-thread-local statics, with the syntax of std's `thread_local!`: each
/// `static NAME: T = init;` becomes a [`LocalKey<T>`](crate::thread::LocalKey), whose value is
/// per green thread.
///
/// Each green thread that uses a key gets its own value, made by `init` on its first use there
/// and dropped when that green thread ends (returns, panics or is cancelled), on its own stack
/// and before its `JoinHandle::join` returns, so a destructor may park. Coroutines and greenlets
/// resumed by a green thread run on its behalf and see its values. Code outside any green thread
/// (a plain OS thread, before or after [`run`](crate::run)) gets one value per OS thread, dropped
/// when the OS thread exits, as with std's `thread_local!`: library code works in and out of a
/// runtime.
///
/// **std's `thread_local!` is per OS thread, so all the green threads of an OS thread share
/// one value** (a `RefCell` borrowed across a park is then borrowed by another green thread
/// too). Use `green_local!` for state that belongs to a request, a connection, a task; keep
/// `thread_local!` for caches that any green thread may share.
///
/// `const { ... }` initialisers, several declarations, attributes and visibility are accepted,
/// as by `thread_local!`.
///
/// ```
/// use std::cell::{Cell, RefCell};
/// use std::time::Duration;
///
/// greenweave::green_local! {
///     /// The id of the request this green thread serves.
///     pub static REQUEST_ID: Cell<u64> = const { Cell::new(0) };
///     static TRAIL: RefCell<Vec<String>> = RefCell::new(Vec::new());
/// }
///
/// greenweave::run(|| {
///     let handles: Vec<_> = (1..=3)
///         .map(|id| {
///             greenweave::spawn(move || {
///                 REQUEST_ID.set(id);
///                 greenweave::thread::sleep(Duration::from_millis(1)); // the others run
///                 TRAIL.with_borrow_mut(|trail| trail.push(format!("done {}", REQUEST_ID.get())));
///                 TRAIL.take()
///             })
///         })
///         .collect();
///     for (id, handle) in (1..=3).zip(handles) {
///         assert_eq!(handle.join().unwrap(), [format!("done {id}")]);
///     }
/// });
/// ```
///
/// Destruction follows std where std defines it: values are dropped last initialised first; a
/// destructor that uses a key already dropped gets [`AccessError`](crate::thread::AccessError)
/// from `try_with` (and `with` panics); one that initialises a key not used yet gets a value,
/// dropped in turn (each key at most once per green thread, so destruction always ends); a
/// destructor that panics aborts the process. Values are leaked, never dropped, when their
/// green thread's stack is (a green thread that kept catching its cancellation at shutdown, or
/// that the runtime stopped without unwinding), and when a coroutine or greenlet suspended inside
/// a `with` on them outlives their green thread.
#[macro_export]
macro_rules! green_local {
    () => {};
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const $init:block; $($rest:tt)*) => {
        $crate::__green_local_key!($(#[$attr])* $vis $name, $t, const $init);
        $crate::green_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const $init:block) => {
        $crate::__green_local_key!($(#[$attr])* $vis $name, $t, const $init);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $crate::__green_local_key!($(#[$attr])* $vis $name, $t, $init);
        $crate::green_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr) => {
        $crate::__green_local_key!($(#[$attr])* $vis $name, $t, $init);
    };
}

/// One key of [`green_local!`]; not a public interface.
#[doc(hidden)]
#[macro_export]
macro_rules! __green_local_key {
    ($(#[$attr:meta])* $vis:vis $name:ident, $t:ty, $($init:tt)*) => {
        $(#[$attr])*
        $vis static $name: $crate::thread::LocalKey<$t> = {
            #[inline]
            fn __green_local_init() -> $t {
                $($init)*
            }
            $crate::thread::LocalKey::new(__green_local_init)
        };
    };
}
