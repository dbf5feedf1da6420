//! Channels whose messages are instants, sent by a clock: [`after`] (one message, once a
//! duration has passed), [`at`] (one message, at an instant), [`tick`] (one message every
//! period) and [`never`](never()) (no message, ever): crossbeam's timer channels, for a deadline or a
//! heartbeat that takes part in a [`Select`](super::select::Select) or a
//! [`select!`](crate::select!) as one more receive.
//!
//! Each returns a [`Receiver`] of [`Instant`] (the instant the message was due), with the
//! receiving methods of the other channels (`recv`, `try_recv`, `recv_timeout`,
//! `recv_deadline`, `iter`, `try_iter`, `len`, `is_empty`, `is_full`, `capacity`) and their
//! error types; nothing sends on it, and it is never disconnected. A timer channel holds one
//! message at most: a tick that nobody receives is dropped, and the next one is due a period
//! after the late one was received (as crossbeam's).
//!
//! No thread sends the messages: a receive computes them from the clock. In a green thread, a
//! wait for the next one parks on the scheduler's timer (a select's park ends at the nearest
//! timer channel's instant); outside a runtime it sleeps the OS thread. The receiver is `Send`
//! and `Sync`, and its clones share the messages: an `after` message is received once among
//! them all.
//!
//! ```
//! use std::time::Duration;
//! use greenweave::select;
//! use greenweave::sync::{mpsc, timer_channel};
//!
//! greenweave::run(|| {
//!     let (_tx, jobs) = mpsc::channel::<u32>();
//!     let heartbeat = timer_channel::tick(Duration::from_millis(1));
//!     let give_up = timer_channel::after(Duration::from_secs(60));
//!     let mut beats = 0;
//!     while beats < 3 {
//!         select! {
//!             recv(jobs) -> job => unreachable!("no job is sent: {job:?}"),
//!             recv(heartbeat) -> _ => beats += 1,
//!             recv(give_up) -> _ => break,
//!         }
//!     }
//!     assert_eq!(beats, 3);
//! });
//! ```
//!
//! Owns: the timer channels' state (an instant and whether its message was taken, or a
//! tick's next instant) and their waits. May not: start a thread, or wake anybody (nobody
//! waits on it but its own receivers, which wait for an instant).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

pub use std::sync::mpsc::{RecvError, RecvTimeoutError, TryRecvError};

use crate::runtime::budget;
use crate::runtime::scheduler;
use crate::runtime::task::Wait;

mod select;

/// A channel that receives one message, `duration` from now: the instant it was due.
///
/// A duration too long to represent gives a channel that never receives, as [`never`](never()).
///
/// ```
/// use std::time::{Duration, Instant};
/// use greenweave::sync::timer_channel;
///
/// greenweave::run(|| {
///     let start = Instant::now();
///     let timer = timer_channel::after(Duration::from_millis(2));
///     let due = timer.recv().unwrap();
///     assert!(due >= start + Duration::from_millis(2));
///     assert!(Instant::now() >= due);
///     assert!(timer.try_recv().is_err()); // one message only
/// });
/// ```
pub fn after(duration: Duration) -> Receiver {
    match Instant::now().checked_add(duration) {
        Some(instant) => at(instant),
        None => never(),
    }
}

/// A channel that receives one message at `instant`: `instant` itself (at once, if it has
/// passed).
///
/// ```
/// use std::time::{Duration, Instant};
/// use greenweave::sync::timer_channel;
///
/// let instant = Instant::now() + Duration::from_millis(1);
/// let timer = timer_channel::at(instant);
/// assert_eq!(timer.recv(), Ok(instant)); // outside a runtime, the OS thread sleeps
/// ```
pub fn at(instant: Instant) -> Receiver {
    Receiver::new(Timer::At {
        instant,
        taken: AtomicBool::new(false),
    })
}

/// A channel that receives a message every `period`, the first one `period` from now: the
/// instant each was due. It holds one message at most: while nobody receives, ticks are
/// dropped, and after a late receive the next tick is due a period later.
///
/// A period too long to represent gives a channel that never receives, as [`never`](never()).
///
/// ```
/// use std::time::Duration;
/// use greenweave::sync::timer_channel;
///
/// greenweave::run(|| {
///     let ticks = timer_channel::tick(Duration::from_millis(1));
///     let due: Vec<_> = ticks.iter().take(3).collect();
///     assert!(due[0] < due[1] && due[1] < due[2]);
/// });
/// ```
pub fn tick(period: Duration) -> Receiver {
    match Instant::now().checked_add(period) {
        Some(first) => Receiver::new(Timer::Tick {
            period,
            next: Mutex::new(Some(first)),
        }),
        None => never(),
    }
}

/// A channel that never receives a message: a receive from it waits for ever (a branch of a
/// select that is never taken, for an optional timer).
///
/// ```
/// use std::time::Duration;
/// use greenweave::select;
/// use greenweave::sync::{mpsc, timer_channel};
///
/// greenweave::run(|| {
///     let (tx, rx) = mpsc::channel();
///     tx.send("work").unwrap();
///     let limit: Option<Duration> = None;
///     let deadline = limit.map_or_else(timer_channel::never, timer_channel::after);
///     select! {
///         recv(rx) -> message => assert_eq!(message, Ok("work")),
///         recv(deadline) -> _ => unreachable!("never"),
///     }
/// });
/// ```
pub fn never() -> Receiver {
    Receiver::new(Timer::Never)
}

enum Timer {
    At {
        instant: Instant,
        taken: AtomicBool,
    },
    Tick {
        period: Duration,
        /// `None` once the next tick would be too far to represent.
        next: Mutex<Option<Instant>>,
    },
    Never,
}

/// The receiving end of a timer channel ([`after`], [`at`], [`tick`], [`never`](never())). `Send`,
/// `Sync` and `Clone`; clones share the messages.
#[derive(Clone)]
pub struct Receiver {
    timer: Arc<Timer>,
}

impl Receiver {
    fn new(timer: Timer) -> Receiver {
        Receiver {
            timer: Arc::new(timer),
        }
    }

    /// The instant the next message is due (it may have passed), or `None` if none will come.
    fn due(&self) -> Option<Instant> {
        match &*self.timer {
            Timer::At { instant, taken } => (!taken.load(Ordering::Acquire)).then_some(*instant),
            Timer::Tick { next, .. } => *next.lock().unwrap_or_else(PoisonError::into_inner),
            Timer::Never => None,
        }
    }

    /// Takes the message due at or before `now`, if there is one.
    fn take(&self, now: Instant) -> Option<Instant> {
        match &*self.timer {
            Timer::At { instant, taken } => {
                (now >= *instant && !taken.swap(true, Ordering::AcqRel)).then_some(*instant)
            }
            Timer::Tick { period, next } => {
                let mut next = next.lock().unwrap_or_else(PoisonError::into_inner);
                let due = (*next).filter(|&due| now >= due)?;
                // One message at most: the ticks missed since `due` are dropped.
                *next = due.max(now).checked_add(*period);
                Some(due)
            }
            Timer::Never => None,
        }
    }

    /// Whether a message is there now.
    fn has_message(&self) -> bool {
        self.due().is_some_and(|due| Instant::now() >= due)
    }

    /// Waits for the next message: parks this green thread until it is due, or, outside a
    /// runtime, sleeps the OS thread. For ever, if none will come.
    ///
    /// # Errors
    /// Never: nothing can disconnect a timer channel (the `Result` is the shape of every
    /// channel's `recv`).
    ///
    /// # Panics
    /// In a green thread that is unwinding (a destructor run by a panic), if it would have to
    /// wait: a green thread cannot park then.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::timer_channel;
    ///
    /// greenweave::run(|| {
    ///     let timer = timer_channel::after(Duration::from_millis(1));
    ///     assert!(timer.recv().is_ok());
    /// });
    /// ```
    pub fn recv(&self) -> Result<Instant, RecvError> {
        self.recv_until(None).map_err(|_| RecvError)
    }

    /// Like [`recv`](Self::recv), giving up after `timeout`. A message due at the same instant
    /// as the timeout is received.
    ///
    /// # Errors
    /// [`RecvTimeoutError::Timeout`] if no message was due in time (never `Disconnected`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::timer_channel::{self, RecvTimeoutError};
    ///
    /// greenweave::run(|| {
    ///     let timer = timer_channel::after(Duration::from_secs(60));
    ///     let waited = timer.recv_timeout(Duration::from_millis(1));
    ///     assert_eq!(waited, Err(RecvTimeoutError::Timeout));
    /// });
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Instant, RecvTimeoutError> {
        self.recv_until(Instant::now().checked_add(timeout))
    }

    /// Like [`recv`](Self::recv), giving up at `deadline`.
    ///
    /// # Errors
    /// [`RecvTimeoutError::Timeout`] if no message was due by then (never `Disconnected`).
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use greenweave::sync::timer_channel;
    ///
    /// let due = Instant::now() + Duration::from_millis(1);
    /// let timer = timer_channel::at(due);
    /// assert_eq!(timer.recv_deadline(due + Duration::from_secs(5)), Ok(due));
    /// ```
    pub fn recv_deadline(&self, deadline: Instant) -> Result<Instant, RecvTimeoutError> {
        self.recv_until(Some(deadline))
    }

    /// Takes the message if it is due, without waiting.
    ///
    /// # Errors
    /// [`TryRecvError::Empty`] if it is not (never `Disconnected`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::timer_channel::{self, TryRecvError};
    ///
    /// let timer = timer_channel::after(Duration::ZERO);
    /// assert!(timer.try_recv().is_ok());
    /// assert_eq!(timer.try_recv(), Err(TryRecvError::Empty));
    /// ```
    pub fn try_recv(&self) -> Result<Instant, TryRecvError> {
        self.take(Instant::now()).ok_or(TryRecvError::Empty)
    }

    /// An iterator that receives for ever (for an [`after`] channel: one message, then it
    /// waits for ever).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::timer_channel;
    ///
    /// greenweave::run(|| {
    ///     let ticks = timer_channel::tick(Duration::from_millis(1));
    ///     assert_eq!(ticks.iter().take(2).count(), 2);
    /// });
    /// ```
    pub fn iter(&self) -> Iter<'_> {
        Iter { receiver: self }
    }

    /// An iterator over the message that is due now, if any; never waits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::timer_channel;
    ///
    /// let timer = timer_channel::after(Duration::ZERO);
    /// assert_eq!(timer.try_iter().count(), 1);
    /// ```
    pub fn try_iter(&self) -> TryIter<'_> {
        TryIter { receiver: self }
    }

    /// The number of messages waiting: 0 or 1.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::timer_channel;
    ///
    /// let timer = timer_channel::after(Duration::ZERO);
    /// assert_eq!(timer.len(), 1);
    /// timer.recv().unwrap();
    /// assert_eq!(timer.len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        usize::from(self.has_message())
    }

    /// Whether no message is waiting.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::timer_channel;
    ///
    /// assert!(timer_channel::after(Duration::from_secs(60)).is_empty());
    /// assert!(!timer_channel::after(Duration::ZERO).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        !self.has_message()
    }

    /// Whether the channel holds as many messages as it can: one for [`after`], [`at`] and
    /// [`tick`], none for [`never`](never()) (so a never channel is always full, as crossbeam's).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::timer_channel;
    ///
    /// assert!(timer_channel::after(Duration::ZERO).is_full());
    /// assert!(timer_channel::never().is_full());
    /// ```
    pub fn is_full(&self) -> bool {
        match &*self.timer {
            Timer::Never => true,
            _ => self.has_message(),
        }
    }

    /// The most messages the channel holds: `Some(1)`, or `Some(0)` for [`never`](never()).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::timer_channel;
    ///
    /// assert_eq!(timer_channel::tick(Duration::from_secs(1)).capacity(), Some(1));
    /// assert_eq!(timer_channel::never().capacity(), Some(0));
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        match &*self.timer {
            Timer::Never => Some(0),
            _ => Some(1),
        }
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Result<Instant, RecvTimeoutError> {
        const WHAT: &str = "timer_channel::Receiver::recv";
        let green = scheduler::in_green_thread();
        if green {
            budget::spend(WHAT);
        }
        loop {
            let now = Instant::now();
            if let Some(message) = self.take(now) {
                return Ok(message);
            }
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Err(RecvTimeoutError::Timeout);
            }
            // Until the message is due, or the caller's deadline, whichever is first.
            let wake_at = match (self.due(), deadline) {
                (Some(due), Some(deadline)) => Some(due.min(deadline)),
                (due, deadline) => due.or(deadline),
            };
            if green {
                if std::thread::panicking() {
                    // A green thread does not switch while it unwinds: a timed receive times
                    // out at once, as every timed wait then does; `recv`, which has no timeout
                    // to report, fails as an untimed wait does (this park panics, saying why).
                    if deadline.is_none() {
                        scheduler::park(
                            WHAT,
                            Wait::Sync {
                                what: "a timer channel (recv)",
                                address: 0,
                            },
                            None,
                            None,
                            |_, _| {},
                        );
                    }
                    return Err(RecvTimeoutError::Timeout);
                }
                let wait = if wake_at.is_some() {
                    Wait::Sleep
                } else {
                    Wait::Sync {
                        what: "a timer channel that will receive no message (recv)",
                        address: 0,
                    }
                };
                // However it wakes (the instant, a spurious wake-up, a `time::timeout` scope's
                // look), the top of the loop decides.
                scheduler::park(WHAT, wait, wake_at, None, |_, _| {});
            } else {
                match wake_at {
                    Some(at) => std::thread::sleep(at.saturating_duration_since(now)),
                    None => std::thread::park(),
                }
            }
        }
    }
}

impl fmt::Debug for Receiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &*self.timer {
            Timer::At { .. } => "at",
            Timer::Tick { .. } => "tick",
            Timer::Never => "never",
        };
        f.debug_struct("Receiver")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

/// Iterator of [`Receiver::iter`].
#[derive(Debug)]
pub struct Iter<'a> {
    receiver: &'a Receiver,
}

impl Iterator for Iter<'_> {
    type Item = Instant;

    fn next(&mut self) -> Option<Instant> {
        self.receiver.recv().ok()
    }
}

/// Iterator of [`Receiver::try_iter`].
#[derive(Debug)]
pub struct TryIter<'a> {
    receiver: &'a Receiver,
}

impl Iterator for TryIter<'_> {
    type Item = Instant;

    fn next(&mut self) -> Option<Instant> {
        self.receiver.try_recv().ok()
    }
}
