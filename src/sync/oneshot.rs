//! A channel for one value: the usual way to hand a single result from one green thread to
//! another.
//!
//! ```
//! use greenweave::sync::oneshot;
//!
//! greenweave::run(|| {
//!     let (tx, rx) = oneshot::channel();
//!     greenweave::spawn(move || tx.send(6 * 7).unwrap());
//!     assert_eq!(rx.recv().unwrap(), 42);
//! });
//! ```

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;
use std::time::{Duration, Instant};

pub use std::sync::mpsc::{RecvError, RecvTimeoutError, TryRecvError};

use crate::runtime::budget;
use crate::runtime::scheduler;
use crate::runtime::task::Wake;

use super::wait_queue::WaitQueue;

mod select;

struct Shared<T> {
    value: RefCell<Option<T>>,
    sender_alive: Cell<bool>,
    receiver_alive: Cell<bool>,
    receiver_waiting: WaitQueue,
}

/// Creates a one-value channel.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Rc::new(Shared {
        value: RefCell::new(None),
        sender_alive: Cell::new(true),
        receiver_alive: Cell::new(true),
        receiver_waiting: WaitQueue::new(),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

/// Sends the one value.
pub struct Sender<T> {
    shared: Rc<Shared<T>>,
}

impl<T> Sender<T> {
    /// Sends the value, consuming the sender; hands it back if the receiver is gone.
    pub fn send(self, value: T) -> Result<(), T> {
        if !self.shared.receiver_alive.get() {
            return Err(value);
        }
        // Nothing was stored before (the sender sends once), so nothing is dropped in the
        // borrow.
        let empty = self.shared.value.borrow_mut().replace(value);
        debug_assert!(empty.is_none());
        Ok(())
        // Drop (below) wakes the receiver.
    }

    /// Whether the receiver has been dropped.
    pub fn is_closed(&self) -> bool {
        !self.shared.receiver_alive.get()
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.shared.sender_alive.set(false);
        if scheduler::in_runtime() {
            self.shared.receiver_waiting.notify_all();
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oneshot::Sender").finish_non_exhaustive()
    }
}

/// Receives the one value.
pub struct Receiver<T> {
    shared: Rc<Shared<T>>,
}

impl<T> Receiver<T> {
    /// Waits (parking this green thread) for the value; fails if the sender was dropped
    /// without sending, or once the value has been received.
    ///
    /// Takes `&self`, as `std::sync::mpsc::Receiver::recv` does, so that the receiver outlives
    /// a wait that is given up: when a [`time::timeout`](crate::time::timeout) around it
    /// expires first, the value (when it comes) stays in the channel for the next call. A value
    /// that arrived in the same turn of the scheduler as the deadline is received, not lost.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::oneshot;
    /// use greenweave::time::timeout;
    ///
    /// greenweave::run(|| {
    ///     let (tx, rx) = oneshot::channel();
    ///     assert!(timeout(Duration::from_millis(1), || rx.recv()).is_err());
    ///     tx.send("late").unwrap();
    ///     assert_eq!(rx.recv(), Ok("late")); // still there after the timeout
    ///     assert!(rx.recv().is_err()); // there was only one
    /// });
    /// ```
    pub fn recv(&self) -> Result<T, RecvError> {
        self.recv_until(None).map_err(|_| RecvError)
    }

    /// Like [`recv`](Self::recv), giving up after `timeout` (the receiver stays usable).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_until(Instant::now().checked_add(timeout))
    }

    /// The value if it has been sent, without parking.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let value = self.shared.value.borrow_mut().take();
        match value {
            Some(value) => Ok(value),
            None if !self.shared.sender_alive.get() => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// However the wait wakes (the value, a dropped sender, the deadline, a spurious wake-up),
    /// the top of the loop decides: a value that arrived in the same turn as the deadline is
    /// received, not reported as a timeout.
    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        budget::spend("oneshot::Receiver::recv");
        let mut timed_out = false;
        loop {
            let value = self.shared.value.borrow_mut().take();
            if let Some(value) = value {
                return Ok(value);
            }
            if !self.shared.sender_alive.get() {
                return Err(RecvTimeoutError::Disconnected);
            }
            if timed_out || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err(RecvTimeoutError::Timeout);
            }
            // `TimedOut` ends the wait after one more look (it is also how a wait made while
            // unwinding times out at once).
            let wake = self
                .shared
                .receiver_waiting
                .wait("a oneshot channel (recv)", deadline);
            timed_out = wake == Wake::TimedOut;
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.receiver_alive.set(false);
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oneshot::Receiver").finish_non_exhaustive()
    }
}
