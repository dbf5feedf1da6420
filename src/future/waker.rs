//! The wakers [`block_on`](super::block_on) hands the futures it polls: [`GreenWaker`], which
//! wakes one green thread from anywhere, and [`ThreadWaker`], which unparks a plain OS thread.
//!
//! Owns: the waker's state word and the protocol between a poll, a park and a wake, the same
//! three-state token as `thread::park`'s, with a fourth state for a call that has ended:
//!
//! - `POLLING`: the green thread is polling (or about to): a wake leaves `NOTIFIED`, which it
//!   reads after the poll, and polls again instead of parking.
//! - `PARKED`: set by the park's `register` step, just before the switch out. A wake that finds
//!   it sends the green thread a wake-up (directly on its own OS thread, else through its
//!   runtime's remote queue).
//! - `NOTIFIED`: a wake came since the last poll began.
//! - `DONE`: the `block_on` call has returned or unwound; a waker kept since wakes nothing.
//!
//! The first poll of a call gets a [`FirstPollWaker`] on the call's stack instead, which
//! makes the `GreenWaker` only when the future clones it: a future that is ready at once (or
//! only wakes by reference during its poll) costs no allocation and no atomic read-modify-write.
//!
//! May not: wake the green thread by any path but the runtime's own (`wake_if_local`, the
//! remote queue), or name it by anything but its [`TaskKey`], whose id is never reused, so a
//! late wake can at worst end another park of the same green thread early, which every park
//! re-checks (as every remote wake-up in the runtime).

use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use std::task::{RawWaker, RawWakerVTable, Wake, Waker};

use crate::runtime::scheduler::{self, RemoteQueue};
use crate::runtime::task::TaskKey;

/// The green thread is polling, or about to.
pub(super) const POLLING: u8 = 0;
/// The green thread is parked (or about to switch out to park): a wake must wake it.
pub(super) const PARKED: u8 = 1;
/// A wake came since the current poll began.
pub(super) const NOTIFIED: u8 = 2;
/// The `block_on` call is over.
pub(super) const DONE: u8 = 3;

/// Wakes the green thread of one `block_on` call, from any thread.
pub(super) struct GreenWaker {
    pub(super) state: AtomicU8,
    /// The runtime's wake-up queue and the green thread's key.
    remote: Arc<RemoteQueue>,
    key: TaskKey,
}

impl GreenWaker {
    pub(super) fn new(remote: Arc<RemoteQueue>, key: TaskKey) -> GreenWaker {
        GreenWaker {
            state: AtomicU8::new(POLLING),
            remote,
            key,
        }
    }

    /// Makes this waker, which nothing else refers to (`&mut`), one for a new call by green
    /// thread `key` of the runtime whose queue is `remote`.
    pub(super) fn reuse(&mut self, remote: &Arc<RemoteQueue>, key: TaskKey) {
        *self.state.get_mut() = POLLING;
        if !Arc::ptr_eq(&self.remote, remote) {
            self.remote = remote.clone();
        }
        self.key = key;
    }

    /// Starts a poll: a wake from now on is seen after it. Acquire: what the waker's side did
    /// before its wake is seen by the poll.
    #[inline]
    pub(super) fn begin_poll(&self) {
        self.state.swap(POLLING, Ordering::Acquire);
    }

    /// Whether a wake came during the poll that just ended.
    #[inline]
    pub(super) fn woken_during_poll(&self) -> bool {
        self.state.load(Ordering::Acquire) == NOTIFIED
    }

    /// The park's `register` step, on the green thread just before it switches out: marks it
    /// parked, unless a wake came since the poll ended (another OS thread's), in which case
    /// the green thread wakes itself through the remote queue, which the scheduler reads only
    /// after this switch (a direct wake-up would find it running and do nothing).
    #[inline]
    pub(super) fn mark_parked(&self) {
        if self
            .state
            .compare_exchange(POLLING, PARKED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            self.remote.wake(self.key);
        }
    }

    /// The call is over: later wakes do nothing.
    pub(super) fn finish(&self) {
        self.state.store(DONE, Ordering::Release);
    }

    pub(super) fn notify(&self) {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state == DONE || state == NOTIFIED {
                return;
            }
            // Release: what the waker did before is seen by the poll that follows.
            match self.state.compare_exchange_weak(
                state,
                NOTIFIED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        if state == PARKED && !scheduler::wake_if_local(&self.remote, self.key, None) {
            self.remote.wake(self.key);
        }
    }
}

impl Wake for GreenWaker {
    fn wake(self: Arc<Self>) {
        self.notify();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.notify();
    }
}

/// Wakes a plain OS thread blocked in `block_on` outside any green thread.
pub(super) struct ThreadWaker {
    pub(super) thread: std::thread::Thread,
    pub(super) notified: AtomicBool,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.notified.swap(true, Ordering::Release) {
            self.thread.unpark();
        }
    }
}

/// The waker of a call's polls until the future keeps one: it lives on the calling green
/// thread's stack for the whole call, and makes the call's [`GreenWaker`] (through `make`)
/// the first time it is cloned. A wake by reference before that only sets `woken`, which the
/// call reads after the poll.
///
/// It is `Sync` (the waker it stands behind may be used from another thread during a poll,
/// say a scoped thread): the flag is atomic, and the `GreenWaker` is published once with a
/// compare-and-swap of the pointer (a clone that loses the race drops the one it made).
pub(super) struct FirstPollWaker<F: Fn() -> Arc<GreenWaker> + Sync> {
    woken: AtomicBool,
    /// The `GreenWaker` (one count, from `Arc::into_raw`), or null until a clone makes it.
    shared: AtomicPtr<GreenWaker>,
    make: F,
}

impl<F: Fn() -> Arc<GreenWaker> + Sync> FirstPollWaker<F> {
    pub(super) fn new(make: F) -> Self {
        FirstPollWaker {
            woken: AtomicBool::new(false),
            shared: AtomicPtr::new(std::ptr::null_mut()),
            make,
        }
    }

    /// A waker that refers to `self` without owning anything: it must not outlive `self`,
    /// which the caller ensures by lending it only to polls made while `self` lives (a
    /// `Context` borrows it for one poll; cloning it makes an owned `GreenWaker` one).
    pub(super) fn waker(&self) -> ManuallyDrop<Waker> {
        let data = (self as *const Self).cast::<()>();
        // SAFETY: the vtable's functions read `data` as a `&Self`, which lives at least as
        // long as the waker (the caller lends it only within `self`'s life, see above) and is
        // `Sync`; `drop` does nothing (the waker owns nothing), and `ManuallyDrop` keeps even
        // that from running.
        ManuallyDrop::new(unsafe { Waker::from_raw(RawWaker::new(data, Self::VTABLE)) })
    }

    const VTABLE: &'static RawWakerVTable = &RawWakerVTable::new(
        Self::clone_raw,
        Self::wake_raw,
        Self::wake_raw,
        Self::drop_raw,
    );

    /// The call's `GreenWaker`, if a clone has made it.
    pub(super) fn shared(&self) -> Option<&GreenWaker> {
        let shared = self.shared.load(Ordering::Acquire);
        // SAFETY: a non-null pointer holds a count of a live `GreenWaker`, released only when
        // `self` goes (`into_shared`, `drop`), so it outlives this borrow of `self`.
        (!shared.is_null()).then(|| unsafe { &*shared })
    }

    /// A counted handle to the call's `GreenWaker`, if a clone has made it.
    pub(super) fn clone_shared(&self) -> Option<Arc<GreenWaker>> {
        let shared = self.shared.load(Ordering::Acquire);
        if shared.is_null() {
            return None;
        }
        // SAFETY: `shared` came from `Arc::into_raw` and its count is held by `self` (see
        // `shared`): one more is taken for the handle returned.
        unsafe {
            Arc::increment_strong_count(shared);
            Some(Arc::from_raw(shared))
        }
    }

    /// The `GreenWaker`, made now if no clone has made it yet.
    fn shared_or_make(&self) -> *const GreenWaker {
        let shared = self.shared.load(Ordering::Acquire);
        if !shared.is_null() {
            return shared;
        }
        let made = Arc::into_raw((self.make)()).cast_mut();
        match self.shared.compare_exchange(
            std::ptr::null_mut(),
            made,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => made,
            Err(published) => {
                // SAFETY: `made` came from `Arc::into_raw` above and was published nowhere.
                drop(unsafe { Arc::from_raw(made) });
                published
            }
        }
    }

    /// Whether a wake by reference came through this waker.
    pub(super) fn take_woken(&self) -> bool {
        // A load first: the flag is almost always clear, and a load is cheaper than a swap.
        self.woken.load(Ordering::Acquire) && self.woken.swap(false, Ordering::Acquire)
    }

    /// Takes the `GreenWaker` out (the call is over).
    pub(super) fn into_shared(self) -> Option<Arc<GreenWaker>> {
        let shared = self.shared.swap(std::ptr::null_mut(), Ordering::Acquire);
        // SAFETY: a non-null pointer holds the count `self` owned, handed over here (the
        // pointer is null now, so `drop` does not release it again).
        (!shared.is_null()).then(|| unsafe { Arc::from_raw(shared) })
    }

    /// # Safety
    /// `data` is the `&Self` of a waker made by [`waker`](Self::waker), still alive.
    unsafe fn clone_raw(data: *const ()) -> RawWaker {
        // SAFETY: the caller's contract.
        let this = unsafe { &*data.cast::<Self>() };
        let shared = this.shared_or_make();
        // SAFETY: `shared` holds a count owned by `this`; the waker made takes one more.
        let owned = ManuallyDrop::new(Waker::from(unsafe {
            Arc::increment_strong_count(shared);
            Arc::from_raw(shared)
        }));
        // The owned waker's parts are handed over whole (its count goes with them).
        RawWaker::new(owned.data(), owned.vtable())
    }

    /// # Safety
    /// As [`clone_raw`](Self::clone_raw).
    unsafe fn wake_raw(data: *const ()) {
        // SAFETY: the caller's contract.
        let this = unsafe { &*data.cast::<Self>() };
        this.woken.store(true, Ordering::Release);
        if let Some(shared) = this.shared() {
            shared.notify();
        }
    }

    fn drop_raw(_: *const ()) {}
}

impl<F: Fn() -> Arc<GreenWaker> + Sync> Drop for FirstPollWaker<F> {
    fn drop(&mut self) {
        let shared = *self.shared.get_mut();
        if !shared.is_null() {
            // SAFETY: the count `self` owns (see `into_shared`).
            drop(unsafe { Arc::from_raw(shared) });
        }
    }
}
