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
//! May not: wake the green thread by any path but the runtime's own (`wake_if_local`, the
//! remote queue), or name it by anything but its [`TaskKey`], whose id is never reused, so a
//! late wake can at worst end another park of the same green thread early, which every park
//! re-checks (as every remote wake-up in the runtime).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::task::Wake;

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

    fn notify(&self) {
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
