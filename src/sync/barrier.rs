//! A green barrier with std's `Barrier` API: green threads wait until `n` of them have
//! arrived, then all go on together.
//!
//! Owns: the count of green threads waiting in the current round, the round number and the
//! queue of waiters.

use std::cell::Cell;
use std::fmt;
use std::panic::{RefUnwindSafe, UnwindSafe};

use super::wait_queue::WaitQueue;
use crate::runtime::budget;

/// Lets `n` green threads wait for each other, as `std::sync::Barrier`: the first `n - 1`
/// callers of [`wait`](Barrier::wait) park, and the `n`th wakes them all and goes on as the
/// round's leader. The barrier can be used again for further rounds.
///
/// A waiter that leaves early (cancelled, or ended by a [`timeout`](crate::time::timeout))
/// no longer counts towards the round. Neither `Send` nor `Sync`: share it between green
/// threads with an [`Rc`](std::rc::Rc).
///
/// # Examples
///
/// ```
/// use std::rc::Rc;
/// use greenweave::sync::Barrier;
///
/// greenweave::run(|| {
///     let barrier = Rc::new(Barrier::new(3));
///     let others: Vec<_> = (0..2)
///         .map(|_| {
///             let barrier = barrier.clone();
///             greenweave::spawn(move || barrier.wait().is_leader())
///         })
///         .collect();
///     let mut leaders = usize::from(barrier.wait().is_leader());
///     for other in others {
///         leaders += usize::from(other.join().unwrap());
///     }
///     assert_eq!(leaders, 1);
/// });
/// ```
pub struct Barrier {
    parties: usize,
    /// Green threads that have arrived in this round.
    arrived: Cell<usize>,
    /// Counts completed rounds; a waiter goes on when it changes.
    round: Cell<u64>,
    waiters: WaitQueue,
}

// As std's: a barrier holds only counts and its waiters, no value of the program's that a
// panic could leave half-changed.
impl UnwindSafe for Barrier {}
impl RefUnwindSafe for Barrier {}

impl Barrier {
    /// A barrier for groups of `n` green threads. `n` of 0 acts as 1: nobody waits.
    ///
    /// ```
    /// use greenweave::sync::Barrier;
    ///
    /// greenweave::run(|| {
    ///     let barrier = Barrier::new(1);
    ///     assert!(barrier.wait().is_leader()); // alone: no wait
    /// });
    /// ```
    pub const fn new(n: usize) -> Barrier {
        Barrier {
            parties: n,
            arrived: Cell::new(0),
            round: Cell::new(0),
            waiters: WaitQueue::new(),
        }
    }

    /// Parks this green thread until `n` green threads (this one included) have called
    /// `wait` in this round. Exactly one of them, the last to arrive, gets a result whose
    /// [`is_leader`](BarrierWaitResult::is_leader) is true.
    ///
    /// # Panics
    /// If it has to wait outside a runtime. A pending cancellation or an expired
    /// [`timeout`](crate::time::timeout) unwinds from here when it has to wait.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use greenweave::sync::Barrier;
    ///
    /// greenweave::run(|| {
    ///     let barrier = Rc::new(Barrier::new(2));
    ///     let other = barrier.clone();
    ///     let worker = greenweave::spawn(move || other.wait().is_leader());
    ///     let main_led = barrier.wait().is_leader();
    ///     assert!(main_led != worker.join().unwrap());
    /// });
    /// ```
    pub fn wait(&self) -> BarrierWaitResult {
        budget::spend("Barrier::wait");
        let arrived = self.arrived.get() + 1;
        if arrived >= self.parties {
            self.arrived.set(0);
            self.round.set(self.round.get() + 1);
            self.waiters.notify_all();
            return BarrierWaitResult { is_leader: true };
        }
        self.arrived.set(arrived);
        let round = self.round.get();
        // If the wait unwinds, this green thread no longer counts towards the round.
        let leave = Leave {
            barrier: self,
            round,
        };
        while self.round.get() == round {
            self.waiters.wait("Barrier::wait", None);
        }
        std::mem::forget(leave);
        BarrierWaitResult { is_leader: false }
    }
}

/// Takes a waiter that unwinds out of the round it had joined.
struct Leave<'a> {
    barrier: &'a Barrier,
    round: u64,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if self.barrier.round.get() == self.round {
            self.barrier.arrived.set(self.barrier.arrived.get() - 1);
        }
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier")
            .field("parties", &self.parties)
            .field("arrived", &self.arrived.get())
            .finish_non_exhaustive()
    }
}

/// What [`Barrier::wait`] returns: whether this green thread was the round's leader.
///
/// ```
/// use greenweave::sync::Barrier;
///
/// greenweave::run(|| {
///     let result = Barrier::new(1).wait();
///     assert!(result.is_leader());
/// });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierWaitResult {
    is_leader: bool,
}

impl BarrierWaitResult {
    /// Whether this green thread was the round's leader: exactly one per round is.
    ///
    /// ```
    /// use greenweave::sync::Barrier;
    ///
    /// greenweave::run(|| {
    ///     assert!(Barrier::new(0).wait().is_leader());
    /// });
    /// ```
    pub fn is_leader(&self) -> bool {
        self.is_leader
    }
}
