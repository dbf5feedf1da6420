//! Waiting for many green threads at once: [`join_all`], gevent's [`Group`] and its bounded
//! form, [`Pool`].
//!
//! Owns: the count of a group's running members and the queue of green threads waiting for
//! it to drop to zero; a pool adds a [`Semaphore`] of slots. The members themselves are
//! ordinary green threads, whose handles go to the caller.

use std::cell::Cell;
use std::fmt;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::semaphore::Semaphore;
use super::wait_queue::WaitQueue;
use crate::runtime::budget;
use crate::runtime::task::Wake;
use crate::thread::{Builder, JoinError, JoinHandle};

/// Joins every green thread in `handles`, in order, and returns their results in that order.
///
/// `handles` is collected first, so a lazy iterator that spawns (`(0..n).map(|_| spawn(..))`)
/// starts all its green threads before the first join, and they run concurrently.
///
/// # Panics
/// Outside a runtime, as [`JoinHandle::join`].
///
/// ```
/// use std::time::Duration;
/// use greenweave::sync::join_all;
///
/// greenweave::run(|| {
///     let results = join_all((1..=3).map(|i| {
///         greenweave::spawn(move || {
///             greenweave::thread::sleep(Duration::from_millis(3 - i));
///             i * 10
///         })
///     }));
///     let values: Vec<u64> = results.into_iter().map(Result::unwrap).collect();
///     assert_eq!(values, [10, 20, 30]);
/// });
/// ```
pub fn join_all<T>(handles: impl IntoIterator<Item = JoinHandle<T>>) -> Vec<Result<T, JoinError>> {
    let handles: Vec<JoinHandle<T>> = handles.into_iter().collect();
    handles.into_iter().map(JoinHandle::join).collect()
}

/// The members' count, shared by the group and the members themselves.
struct Members {
    running: Cell<usize>,
    idle: WaitQueue,
}

/// A running member of a group: counts it down when its green thread ends (returns, panics,
/// is cancelled, or is dropped before it ever ran).
struct Membership(Rc<Members>);

impl Membership {
    fn join(members: &Rc<Members>) -> Membership {
        members.running.set(members.running.get() + 1);
        Membership(members.clone())
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        let running = self.0.running.get() - 1;
        self.0.running.set(running);
        if running == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// A set of green threads to wait for together, as gevent's `Group`: spawn into it, then
/// [`join`](Group::join) waits until all of them have finished.
///
/// Members are ordinary green threads: [`spawn`](Group::spawn) returns their
/// [`JoinHandle`], to join one of them, take its result or cancel it, or to drop (the group
/// still waits for it). A member that panics or is cancelled counts as finished. The group
/// keeps no results, so it can serve a long-running server; use [`join_all`] to collect them.
/// Neither `Send` nor `Sync`.
///
/// # Examples
///
/// ```
/// use std::cell::Cell;
/// use std::rc::Rc;
/// use std::time::Duration;
/// use greenweave::sync::Group;
///
/// greenweave::run(|| {
///     let group = Group::new();
///     let done = Rc::new(Cell::new(0));
///     for i in 0..5 {
///         let done = done.clone();
///         group.spawn(move || {
///             greenweave::thread::sleep(Duration::from_millis(i));
///             done.set(done.get() + 1);
///         });
///     }
///     assert_eq!(group.len(), 5);
///     group.join();
///     assert_eq!((group.len(), done.get()), (0, 5));
/// });
/// ```
pub struct Group {
    members: Rc<Members>,
}

impl Group {
    /// An empty group.
    ///
    /// ```
    /// use greenweave::sync::Group;
    ///
    /// greenweave::run(|| {
    ///     let group = Group::new();
    ///     assert!(group.is_empty());
    ///     group.join(); // nothing to wait for
    /// });
    /// ```
    pub fn new() -> Group {
        Group {
            members: Rc::new(Members {
                running: Cell::new(0),
                idle: WaitQueue::new(),
            }),
        }
    }

    /// Spawns a green thread running `f` as a member of the group, with the runtime's default
    /// stack, and returns its handle.
    ///
    /// # Panics
    /// Outside a runtime, or if no stack can be mapped (as [`crate::spawn`]).
    ///
    /// ```
    /// use greenweave::sync::Group;
    ///
    /// greenweave::run(|| {
    ///     let group = Group::new();
    ///     let answer = group.spawn(|| 42);
    ///     assert_eq!(answer.join().unwrap(), 42);
    ///     assert!(group.is_empty());
    /// });
    /// ```
    pub fn spawn<T: 'static>(&self, f: impl FnOnce() -> T + 'static) -> JoinHandle<T> {
        self.spawn_holding((), crate::spawn, f)
    }

    /// Spawns a member configured by `builder` (a name, a stack size).
    ///
    /// # Errors
    /// Those of [`Builder::spawn`].
    ///
    /// # Panics
    /// Outside a runtime.
    ///
    /// ```
    /// use greenweave::sync::Group;
    /// use greenweave::thread::Builder;
    ///
    /// greenweave::run(|| {
    ///     let group = Group::new();
    ///     let worker = group
    ///         .spawn_with(Builder::new().name("worker".into()), || {
    ///             greenweave::thread::current().name().map(str::to_owned)
    ///         })
    ///         .unwrap();
    ///     assert_eq!(worker.join().unwrap().as_deref(), Some("worker"));
    /// });
    /// ```
    pub fn spawn_with<T: 'static>(
        &self,
        builder: Builder,
        f: impl FnOnce() -> T + 'static,
    ) -> io::Result<JoinHandle<T>> {
        self.spawn_holding((), |body| builder.spawn(body), f)
    }

    /// Spawns `f` as a member with `spawner`, keeping `held` alive (a pool's slot, say) until
    /// the member ends.
    fn spawn_holding<T: 'static, H: 'static, R>(
        &self,
        held: H,
        spawner: impl FnOnce(Box<dyn FnOnce() -> T>) -> R,
        f: impl FnOnce() -> T + 'static,
    ) -> R {
        // Moved into the body, so it ends with the member however the member ends; dropped
        // here if spawning fails. The membership is released last, after `held`.
        let membership = Membership::join(&self.members);
        spawner(Box::new(move || {
            let _membership = membership;
            let _held = held;
            f()
        }))
    }

    /// How many members are still running.
    ///
    /// ```
    /// use greenweave::sync::Group;
    ///
    /// greenweave::run(|| {
    ///     let group = Group::new();
    ///     group.spawn(|| ());
    ///     assert_eq!(group.len(), 1); // spawned, not yet finished
    ///     group.join();
    ///     assert_eq!(group.len(), 0);
    /// });
    /// ```
    pub fn len(&self) -> usize {
        self.members.running.get()
    }

    /// Whether no member is running.
    ///
    /// ```
    /// use greenweave::sync::Group;
    ///
    /// greenweave::run(|| {
    ///     assert!(Group::new().is_empty());
    /// });
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Parks this green thread until no member is running (members spawned meanwhile
    /// included). Called from a member, it waits for ever: that member is still running.
    ///
    /// # Panics
    /// If it has to wait outside a runtime. A pending cancellation or an expired
    /// [`timeout`](crate::time::timeout) unwinds from here when it has to wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::Group;
    ///
    /// greenweave::run(|| {
    ///     let group = Group::new();
    ///     group.spawn(|| greenweave::thread::sleep(Duration::from_millis(2)));
    ///     group.join();
    ///     assert!(group.is_empty());
    /// });
    /// ```
    pub fn join(&self) {
        self.join_until("Group::join", None);
    }

    /// Waits as [`join`](Group::join), for at most `duration`; returns whether every member
    /// finished (false if the time ran out first).
    ///
    /// # Panics
    /// As [`join`](Group::join).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::Group;
    ///
    /// greenweave::run(|| {
    ///     let group = Group::new();
    ///     let slow = group.spawn(|| greenweave::thread::sleep(Duration::from_secs(60)));
    ///     assert!(!group.join_timeout(Duration::from_millis(5)));
    ///     slow.cancel();
    ///     assert!(group.join_timeout(Duration::from_secs(60)));
    /// });
    /// ```
    pub fn join_timeout(&self, duration: Duration) -> bool {
        self.join_until("Group::join_timeout", Instant::now().checked_add(duration))
    }

    fn join_until(&self, what: &'static str, deadline: Option<Instant>) -> bool {
        budget::spend(what);
        loop {
            if self.is_empty() {
                return true;
            }
            let wake = self.members.idle.wait(what, deadline);
            if wake == Wake::TimedOut && deadline.is_some() {
                return self.is_empty();
            }
        }
    }
}

impl Default for Group {
    fn default() -> Group {
        Group::new()
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("running", &self.len())
            .finish()
    }
}

/// Gives a pool's slot back when its member ends.
struct Slot(Rc<Semaphore>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.add_permits(1);
    }
}

/// A [`Group`] that runs at most `size` members at a time, as gevent's `Pool`:
/// [`spawn`](Pool::spawn) parks the caller while `size` members are running, until one
/// finishes. Callers waiting to spawn get the free slots in FIFO order.
///
/// A member that spawns into its own full pool waits for a slot like anyone else; if every
/// member does so, they wait for ever (and the runtime reports the deadlock).
///
/// # Examples
///
/// ```
/// use std::cell::Cell;
/// use std::rc::Rc;
/// use std::time::Duration;
/// use greenweave::sync::Pool;
///
/// greenweave::run(|| {
///     let pool = Pool::new(2);
///     let (running, most) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
///     for _ in 0..6 {
///         let (running, most) = (running.clone(), most.clone());
///         pool.spawn(move || {
///             running.set(running.get() + 1);
///             most.set(most.get().max(running.get()));
///             greenweave::thread::sleep(Duration::from_millis(1));
///             running.set(running.get() - 1);
///         });
///     }
///     pool.join();
///     assert_eq!(most.get(), 2);
/// });
/// ```
pub struct Pool {
    size: usize,
    slots: Rc<Semaphore>,
    group: Group,
}

impl Pool {
    /// A pool that runs at most `size` green threads at a time.
    ///
    /// # Panics
    /// If `size` is 0 (nothing could ever be spawned).
    ///
    /// ```
    /// use greenweave::sync::Pool;
    ///
    /// greenweave::run(|| {
    ///     let pool = Pool::new(4);
    ///     assert_eq!((pool.size(), pool.free_count()), (4, 4));
    /// });
    /// ```
    pub fn new(size: usize) -> Pool {
        assert!(
            size > 0,
            "Pool::new: the size must be at least 1, or no green thread could ever be spawned"
        );
        Pool {
            size,
            slots: Rc::new(Semaphore::new(size)),
            group: Group::new(),
        }
    }

    /// Spawns a green thread running `f` in the pool, first parking the caller until a slot
    /// is free; returns its handle.
    ///
    /// # Panics
    /// Outside a runtime, or if no stack can be mapped (as [`crate::spawn`]). A pending
    /// cancellation or an expired [`timeout`](crate::time::timeout) unwinds from here when it
    /// has to wait.
    ///
    /// ```
    /// use greenweave::sync::Pool;
    ///
    /// greenweave::run(|| {
    ///     let pool = Pool::new(1);
    ///     let first = pool.spawn(|| 1);
    ///     let second = pool.spawn(|| 2); // waits until `first` has finished
    ///     assert!(first.is_finished());
    ///     assert_eq!(first.join().unwrap() + second.join().unwrap(), 3);
    /// });
    /// ```
    pub fn spawn<T: 'static>(&self, f: impl FnOnce() -> T + 'static) -> JoinHandle<T> {
        let slot = self.take_slot();
        self.group.spawn_holding(slot, crate::spawn, f)
    }

    /// Spawns into the pool, as [`spawn`](Pool::spawn), a member configured by `builder`.
    ///
    /// # Errors
    /// Those of [`Builder::spawn`] (the slot is given back).
    ///
    /// # Panics
    /// As [`spawn`](Pool::spawn), but not when a stack cannot be mapped.
    ///
    /// ```
    /// use greenweave::sync::Pool;
    /// use greenweave::thread::Builder;
    ///
    /// greenweave::run(|| {
    ///     let pool = Pool::new(2);
    ///     let worker = pool.spawn_with(Builder::new().stack_size(64 * 1024), || 7).unwrap();
    ///     assert_eq!(worker.join().unwrap(), 7);
    /// });
    /// ```
    pub fn spawn_with<T: 'static>(
        &self,
        builder: Builder,
        f: impl FnOnce() -> T + 'static,
    ) -> io::Result<JoinHandle<T>> {
        let slot = self.take_slot();
        self.group
            .spawn_holding(slot, |body| builder.spawn(body), f)
    }

    fn take_slot(&self) -> Slot {
        self.slots.acquire_named("Pool::spawn").forget();
        Slot(self.slots.clone())
    }

    /// The most members that run at once.
    ///
    /// ```
    /// use greenweave::sync::Pool;
    ///
    /// greenweave::run(|| {
    ///     assert_eq!(Pool::new(3).size(), 3);
    /// });
    /// ```
    pub fn size(&self) -> usize {
        self.size
    }

    /// How many more members could be spawned now without waiting.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::Pool;
    ///
    /// greenweave::run(|| {
    ///     let pool = Pool::new(3);
    ///     pool.spawn(|| greenweave::thread::sleep(Duration::from_millis(1)));
    ///     assert_eq!(pool.free_count(), 2);
    ///     pool.join();
    ///     assert_eq!(pool.free_count(), 3);
    /// });
    /// ```
    pub fn free_count(&self) -> usize {
        self.slots.available_permits()
    }

    /// How many members are running.
    ///
    /// ```
    /// use greenweave::sync::Pool;
    ///
    /// greenweave::run(|| {
    ///     let pool = Pool::new(3);
    ///     pool.spawn(|| ());
    ///     assert_eq!(pool.len(), 1);
    ///     pool.join();
    ///     assert_eq!(pool.len(), 0);
    /// });
    /// ```
    pub fn len(&self) -> usize {
        self.group.len()
    }

    /// Whether no member is running.
    ///
    /// ```
    /// use greenweave::sync::Pool;
    ///
    /// greenweave::run(|| {
    ///     assert!(Pool::new(1).is_empty());
    /// });
    /// ```
    pub fn is_empty(&self) -> bool {
        self.group.is_empty()
    }

    /// Parks this green thread until no member is running, as [`Group::join`].
    ///
    /// # Panics
    /// As [`Group::join`].
    ///
    /// ```
    /// use greenweave::sync::Pool;
    ///
    /// greenweave::run(|| {
    ///     let pool = Pool::new(2);
    ///     for _ in 0..4 {
    ///         pool.spawn(greenweave::thread::yield_now);
    ///     }
    ///     pool.join();
    ///     assert!(pool.is_empty());
    /// });
    /// ```
    pub fn join(&self) {
        self.group.join_until("Pool::join", None);
    }

    /// Waits as [`join`](Pool::join), for at most `duration`; returns whether every member
    /// finished.
    ///
    /// # Panics
    /// As [`Group::join`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::Pool;
    ///
    /// greenweave::run(|| {
    ///     let pool = Pool::new(2);
    ///     pool.spawn(|| greenweave::thread::sleep(Duration::from_millis(1)));
    ///     assert!(pool.join_timeout(Duration::from_secs(60)));
    /// });
    /// ```
    pub fn join_timeout(&self, duration: Duration) -> bool {
        self.group
            .join_until("Pool::join_timeout", Instant::now().checked_add(duration))
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("size", &self.size)
            .field("running", &self.len())
            .finish()
    }
}
