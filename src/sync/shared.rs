//! Channels whose two ends are `Send`: [`channel`] (unbounded) and [`sync_channel`] (bounded; 0
//! is a rendezvous) in `std::sync::mpsc`'s shapes and with its error types (the same ones
//! [`sync::mpsc`](super::mpsc) uses, so code moves between the three by changing a path), for
//! green threads of different runtimes (different OS threads, different workers), or a green
//! thread and a plain OS thread.
//!
//! Each end works in three places. In a green thread, a wait parks only that green thread, and
//! the other end wakes it: directly through the scheduler when it runs on the same runtime
//! (no system call), through the waiter's runtime's wake-up queue (its eventfd) from anywhere
//! else. Outside a runtime, a wait blocks the OS thread, as std's does. And under a
//! [`time::timeout`](crate::time::timeout) or a cancellation, nothing is lost: a message is
//! received exactly once or stays in the channel; a send that is unwound out of its wait has
//! not delivered its message (it is dropped with the unwinding frame), except on a rendezvous
//! channel whose receiver took it in the same instant (then it was delivered, once).
//!
//! ```
//! use greenweave::sync::shared;
//!
//! let (tx, rx) = shared::channel();
//! // A runtime on another OS thread sends; this one receives.
//! let producer = std::thread::spawn(move || {
//!     greenweave::run(move || {
//!         for n in 1..=3 {
//!             tx.send(n).unwrap();
//!         }
//!     })
//! });
//! greenweave::run(move || {
//!     let got: Vec<i32> = rx.iter().collect(); // ends when the sender is dropped
//!     assert_eq!(got, [1, 2, 3]);
//! });
//! producer.join().unwrap();
//! ```
//!
//! **What it costs.** Every operation takes the channel's one lock (a `std::sync::Mutex`
//! around a `VecDeque` and the lists of waiters); a send that wakes a green thread of another
//! runtime adds that runtime's wake-up (a second lock and an eventfd write, and the epoll
//! wake-up on the other side); a send that wakes a green thread of its own runtime adds
//! nothing but the scheduler's queueing. BENCHMARKS.md ("Shared channels") has a ping-pong
//! across two runtimes and within one, against `sync::mpsc` and `std::sync::mpsc`.
//!
//! **Select.** Both ends take part in a [`Select`](super::select::Select) and in
//! [`select!`](crate::select!), as `sync::mpsc`'s do. A selected send on a bounded shared
//! channel found room, but a sender on another OS thread may take it before the completion
//! ([`SelectedOperation::send`](super::select::SelectedOperation::send)), which then waits for
//! room as a plain send does.
//!
//! **A receive that does not park.** `try_recv`, and a receive in a select that does not wait
//! (`try_select`, `try_ready`, `select!` with `default`), never waits, with one exception: on
//! a rendezvous channel with no message, where a select is waiting to send. That select's
//! message does not exist until its thread runs the send's branch, so the receive wakes it as
//! an arriving receiver does, first in line for its message, and waits (parking its green
//! thread, or blocking its OS thread: the select may run on any OS thread) until the select has
//! sent, or has taken another operation and no other select waiting to send takes the turn.
//! It then returns the message, or `Empty`. `sync::mpsc` has the same rule (there the wait is
//! one yield).
//!
//! **The deadlock report.** A green thread waiting on a shared channel whose other end is alive
//! can be woken from another OS thread, which its runtime cannot see, so its runtime never
//! reports it as deadlocked: like std's channels, a receive whose sender is held (and never
//! used) by a green thread of the same runtime waits for ever. A wait whose other end is
//! dropped ends by itself: the drop wakes it and it returns its error.
//!
//! Owns: the channel (its queue, its counts of ends, its lists of waiters, each waiter a green
//! thread of some runtime or a blocked OS thread). May not: hold its lock while running code
//! of the program (a message's destructor, a wake-up's scheduling) or across a park; wake a
//! green thread of another runtime other than through that runtime's `RemoteQueue`.

use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use super::mpsc::SendTimeoutError;
pub use std::sync::mpsc::{RecvError, RecvTimeoutError, SendError, TryRecvError, TrySendError};

use crate::runtime::budget;
use crate::runtime::scheduler::{self, RemoteQueue, with_scheduler};
use crate::runtime::task::{TaskKey, Wait, Wake};

mod capacity;
mod select;

/// The state both ends share, behind one lock.
struct Chan<T> {
    state: Mutex<State<T>>,
    /// `None`: unbounded; `Some(0)`: rendezvous.
    bound: Option<usize>,
}

struct State<T> {
    /// Messages with their sequence numbers (a rendezvous sender waits for its own).
    queue: VecDeque<(u64, T)>,
    next_seq: u64,
    /// One past the sequence number of the last message the receiver took. Messages are taken
    /// from the front, in sequence order, and only a rendezvous sender takes one back (its own,
    /// and then it stops waiting for it), so a waiting sender's message was taken exactly when
    /// `next_taken` has passed its number.
    next_taken: u64,
    senders: usize,
    receiver_alive: bool,
    /// Receives waiting for a message, longest first. Usually one; several when green threads
    /// of one runtime share the receiver (through an `Rc`).
    receivers: VecDeque<Waiter>,
    /// Sends of a bounded channel waiting for room, longest first; on a rendezvous channel,
    /// each waiting for its own message to be taken.
    senders_waiting: VecDeque<Waiter>,
    /// Names the next registration, for its waiter to find its entry again.
    next_waiter: u64,
}

/// A registered wait: who to wake and how.
struct Waiter {
    id: u64,
    /// On a rendezvous channel, the sequence number of the sender's message; [`SELECT_SEQ`]
    /// for a select's send, which owns no message.
    seq: u64,
    waker: Waker,
}

enum Waker {
    /// A green thread parked in park number `park` on the runtime whose wake-up queue is
    /// `remote`.
    Green {
        remote: Arc<RemoteQueue>,
        task: TaskKey,
        park: u64,
    },
    /// An OS thread blocked outside any runtime.
    Thread(std::thread::Thread),
}

impl Waker {
    /// Wakes the waiter; called with the channel's lock released (the scheduler's queueing
    /// and another runtime's wake-up take locks of their own).
    fn wake(self) {
        match self {
            Waker::Green { remote, task, park } => {
                if !scheduler::wake_if_local(&remote, task, Some(park)) {
                    remote.wake(task);
                }
            }
            Waker::Thread(thread) => thread.unpark(),
        }
    }
}

/// The `seq` of a select's entry among the waiting senders: no message has it.
const SELECT_SEQ: u64 = u64::MAX;

/// The `seq` of a receive that does not park (`try_recv`, a select's `default`) among the
/// waiting receivers, while it hands the turn to a select waiting to send (see
/// `Receiver::hand_off`).
const HAND_OFF_SEQ: u64 = u64::MAX - 1;

/// Which list of waiters a wait is in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Receive,
    Send,
}

impl<T> Chan<T> {
    fn new(bound: Option<usize>) -> Arc<Chan<T>> {
        Arc::new(Chan {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                next_seq: 0,
                next_taken: 0,
                senders: 1,
                receiver_alive: true,
                receivers: VecDeque::new(),
                senders_waiting: VecDeque::new(),
                next_waiter: 0,
            }),
            bound,
        })
    }

    /// The state. Nothing panics while holding it (no code of the program runs under it), so
    /// a poisoned lock still holds consistent state.
    #[inline]
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a bounded sender has room (a rendezvous channel always has: its senders wait
    /// after queueing, for their message to be taken).
    fn has_room(&self, state: &State<T>) -> bool {
        match self.bound {
            None | Some(0) => true,
            Some(bound) => state.queue.len() < bound,
        }
    }
}

impl<T> State<T> {
    /// Queues a message and takes the receive it should wake, if one waits; returns its
    /// sequence number too.
    #[inline]
    fn push(&mut self, message: T) -> (u64, Option<Waker>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push_back((seq, message));
        (seq, self.receivers.pop_front().map(|waiter| waiter.waker))
    }

    /// Takes the next message and the send it should wake: one waiting for room, or on a
    /// rendezvous channel the one waiting for this very message.
    #[inline]
    fn take(&mut self, bound: Option<usize>) -> Option<(T, Option<Waker>)> {
        let (seq, message) = self.queue.pop_front()?;
        self.next_taken = seq + 1;
        let sender = match bound {
            None => None,
            Some(0) => {
                let at = self.senders_waiting.iter().position(|w| w.seq == seq);
                at.and_then(|at| self.senders_waiting.remove(at))
            }
            Some(_) => self.senders_waiting.pop_front(),
        };
        Some((message, sender.map(|waiter| waiter.waker)))
    }

    /// Takes message number `seq` back out of the queue, if the receiver has not taken it.
    fn take_back(&mut self, seq: u64) -> Option<T> {
        let at = self.queue.iter().position(|(queued, _)| *queued == seq)?;
        self.queue.remove(at).map(|(_, message)| message)
    }

    fn waiters(&mut self, side: Side) -> &mut VecDeque<Waiter> {
        match side {
            Side::Receive => &mut self.receivers,
            Side::Send => &mut self.senders_waiting,
        }
    }

    /// Takes the longest-waiting select that waits to send (on a rendezvous channel: for a
    /// receiver), to wake it.
    fn select_sender(&mut self) -> Option<Waker> {
        let at = self
            .senders_waiting
            .iter()
            .position(|waiter| waiter.seq == SELECT_SEQ)?;
        self.senders_waiting.remove(at).map(|waiter| waiter.waker)
    }

    /// Takes every waiter of `side` out, to wake them all (a disconnection).
    fn take_all(&mut self, side: Side) -> Vec<Waker> {
        self.waiters(side)
            .drain(..)
            .map(|waiter| waiter.waker)
            .collect()
    }
}

fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

fn wake_all(wakers: Vec<Waker>) {
    for waker in wakers {
        waker.wake();
    }
}

/// A wait's entry in a list of waiters while it waits, and its departure: whichever way the
/// wait ends (a message, a timeout, an unwind out of the park), the entry is gone afterwards;
/// and a wait that was woken but is unwound before it could act on the wake-up (a
/// cancellation) passes it on to the next waiter of its side, so that a wake-up meant for "one
/// of you" is never spent on a waiter that left.
struct Registration<'a, T> {
    chan: &'a Chan<T>,
    side: Side,
    id: Option<u64>,
}

impl<'a, T> Registration<'a, T> {
    fn new(chan: &'a Chan<T>, side: Side) -> Registration<'a, T> {
        Registration {
            chan,
            side,
            id: None,
        }
    }

    /// Takes the entry out, if it is still in its list (not taken by a wake-up). Under the lock
    /// the caller already holds for its look.
    #[inline]
    fn leave(&mut self, state: &mut State<T>) {
        if let Some(id) = self.id.take() {
            let waiters = state.waiters(self.side);
            if let Some(at) = waiters.iter().position(|waiter| waiter.id == id) {
                waiters.remove(at);
            }
        }
    }

    /// Waits until woken, or until `deadline`, unless `ready` already holds (looked at under
    /// the lock, where the entry is made, so that no wake-up falls between the look and the
    /// entry). `seq` is the rendezvous sender's message number. Returns whether the park's own
    /// deadline passed; the caller looks again either way.
    fn wait(
        &mut self,
        what: &'static str,
        seq: u64,
        deadline: Option<Instant>,
        ready: impl Fn(&State<T>) -> bool,
    ) -> bool {
        if scheduler::in_green_thread() {
            let wake = scheduler::park(what, Wait::Shared(what), deadline, None, |task, park| {
                let remote = with_scheduler(what, |scheduler| scheduler.remote.clone());
                let mut state = self.chan.lock();
                self.leave(&mut state);
                if ready(&state) {
                    // Another OS thread changed the channel since the caller looked: be woken
                    // at once (the scheduler reads its queue only after this switch).
                    drop(state);
                    remote.wake(task.key());
                    return;
                }
                let waker = Waker::Green {
                    remote,
                    task: task.key(),
                    park,
                };
                self.register(&mut state, seq, waker);
                let select = self.receiver_arrives(&mut state);
                drop(state);
                wake(select);
            });
            wake == Wake::TimedOut
        } else {
            let mut state = self.chan.lock();
            self.leave(&mut state);
            if ready(&state) {
                return false;
            }
            self.register(&mut state, seq, Waker::Thread(std::thread::current()));
            let select = self.receiver_arrives(&mut state);
            drop(state);
            wake(select);
            match deadline {
                None => std::thread::park(),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return true;
                    }
                    std::thread::park_timeout(left);
                }
            }
            false
        }
    }

    /// A receive about to wait on a rendezvous channel: a select waiting to send there waits
    /// for a receiver, and here is one. The waker to call once the lock is released.
    fn receiver_arrives(&self, state: &mut State<T>) -> Option<Waker> {
        if self.side == Side::Receive && self.chan.bound == Some(0) {
            state.select_sender()
        } else {
            None
        }
    }

    fn register(&mut self, state: &mut State<T>, seq: u64, waker: Waker) {
        let id = state.next_waiter;
        state.next_waiter += 1;
        self.id = Some(id);
        let waiter = Waiter { id, seq, waker };
        if seq == HAND_OFF_SEQ {
            // First in line for the message of the select it woke.
            state.receivers.push_front(waiter);
        } else {
            state.waiters(self.side).push_back(waiter);
        }
    }
}

impl<T> Drop for Registration<'_, T> {
    fn drop(&mut self) {
        let Some(id) = self.id else {
            return; // left under the caller's last look
        };
        let mut state = self.chan.lock();
        let waiters = state.waiters(self.side);
        if let Some(at) = waiters.iter().position(|waiter| waiter.id == id) {
            waiters.remove(at);
            return; // never woken: nothing to pass on
        }
        // Woken, and leaving without acting on it (an unwind out of the park): pass it on.
        let next = match self.side {
            Side::Receive if !state.queue.is_empty() => state.receivers.pop_front(),
            Side::Send if self.chan.bound != Some(0) && self.chan.has_room(&state) => {
                state.senders_waiting.pop_front()
            }
            _ => None,
        };
        drop(state);
        wake(next.map(|waiter| waiter.waker));
    }
}

/// Creates an unbounded channel whose ends are `Send`: `send` never waits.
///
/// ```
/// use greenweave::sync::shared;
///
/// let (tx, rx) = shared::channel();
/// let worker = std::thread::spawn(move || {
///     // A plain OS thread: its receive blocks it, as std's does.
///     rx.recv().unwrap() * 2
/// });
/// greenweave::run(move || tx.send(21).unwrap());
/// assert_eq!(worker.join().unwrap(), 42);
/// ```
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let chan = Chan::new(None);
    (
        Sender { chan: chan.clone() },
        Receiver {
            chan,
            not_sync: PhantomData,
        },
    )
}

/// Creates a channel holding at most `bound` messages, whose ends are `Send`: `send` waits
/// while it is full. With `bound == 0` every send waits until the receiver has taken its
/// message (a rendezvous, as std's); a rendezvous send that fails hands its message back, one
/// that succeeds delivered it exactly once.
///
/// ```
/// use greenweave::sync::shared;
///
/// let (tx, rx) = shared::sync_channel(1);
/// let consumer = std::thread::spawn(move || {
///     greenweave::run(move || rx.iter().sum::<u32>())
/// });
/// greenweave::run(move || {
///     for n in 1..=100 {
///         tx.send(n).unwrap(); // parks this green thread while the slot is taken
///     }
/// });
/// assert_eq!(consumer.join().unwrap(), 5050);
/// ```
pub fn sync_channel<T>(bound: usize) -> (SyncSender<T>, Receiver<T>) {
    let chan = Chan::new(Some(bound));
    (
        SyncSender { chan: chan.clone() },
        Receiver {
            chan,
            not_sync: PhantomData,
        },
    )
}

/// The sending half of [`channel`]: `Send`, and `Clone` for more senders.
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Sender<T> {
    /// Sends a message; never waits. Fails, handing the message back, if the receiver is gone.
    ///
    /// ```
    /// use greenweave::sync::shared;
    ///
    /// let (tx, rx) = shared::channel();
    /// tx.send(1).unwrap();
    /// drop(rx);
    /// assert_eq!(tx.send(2).unwrap_err().0, 2);
    /// ```
    pub fn send(&self, message: T) -> Result<(), SendError<T>> {
        let mut state = self.chan.lock();
        if !state.receiver_alive {
            return Err(SendError(message));
        }
        let (_, receiver) = state.push(message);
        drop(state);
        wake(receiver);
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.chan.lock().senders += 1;
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        release_sender(&self.chan);
    }
}

/// Uncounts a sender; the last one wakes every receive (none can get a message any more,
/// unless one is queued).
fn release_sender<T>(chan: &Chan<T>) {
    let mut state = chan.lock();
    state.senders -= 1;
    let receivers = if state.senders == 0 {
        state.take_all(Side::Receive)
    } else {
        Vec::new()
    };
    drop(state);
    wake_all(receivers);
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

/// The sending half of [`sync_channel`]: `Send`, and `Clone` for more senders.
pub struct SyncSender<T> {
    chan: Arc<Chan<T>>,
}

impl<T> SyncSender<T> {
    /// Sends a message, waiting while the channel is full (on a rendezvous channel, until the
    /// receiver has taken it). Fails, handing the message back, if the receiver is gone first.
    ///
    /// In a green thread the wait parks only the green thread; outside a runtime it blocks the
    /// OS thread. A send that returns `Ok` delivered its message exactly once (into the
    /// channel; for a rendezvous, to the receiver). If the green thread is unwound while it
    /// waits here (a cancellation, an expired [`time::timeout`](crate::time::timeout)), the
    /// message is not delivered: it is dropped with the unwinding frame. A rendezvous sender
    /// takes it back out of the channel first, unless the receiver, on another OS thread, has
    /// taken it in the same instant: then the send returns `Ok` (it delivered), and the
    /// cancellation or the timeout's end comes at the green thread's next park instead.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::shared;
    /// use greenweave::time::timeout;
    ///
    /// greenweave::run(|| {
    ///     let (tx, rx) = shared::sync_channel(1);
    ///     tx.send(1).unwrap();
    ///     // Full: the second send waits, and the timeout unwinds it without delivering.
    ///     assert!(timeout(Duration::from_millis(10), || tx.send(2)).is_err());
    ///     drop(tx);
    ///     assert_eq!(rx.iter().collect::<Vec<_>>(), [1]);
    /// });
    /// ```
    pub fn send(&self, message: T) -> Result<(), SendError<T>> {
        const WHAT: &str = "a full shared channel (send)";
        spend("shared::SyncSender::send");
        let chan = &*self.chan;
        let mut registration = Registration::new(chan, Side::Send);
        loop {
            let mut state = chan.lock();
            registration.leave(&mut state);
            if !state.receiver_alive {
                drop(state);
                return Err(SendError(message));
            }
            if chan.has_room(&state) {
                let (seq, receiver) = state.push(message);
                drop(state);
                wake(receiver);
                if chan.bound == Some(0) {
                    return self.wait_taken(seq);
                }
                return Ok(());
            }
            drop(state);
            registration.wait(WHAT, 0, None, |state| {
                !state.receiver_alive || chan.has_room(state)
            });
        }
    }

    /// [`send`](SyncSender::send), waiting at most `timeout` for room (on a rendezvous
    /// channel, for the receiver to take the message), as std's nightly
    /// `SyncSender::send_timeout`; in a green thread or outside a runtime, as `send`. A
    /// message that could not be delivered in time comes back in
    /// [`SendTimeoutError::Timeout`], one the receiver is gone for in
    /// [`SendTimeoutError::Disconnected`]: nothing is lost. Room that appears before the
    /// last look wins over the deadline. An unwind out of the wait (a cancellation, an expired
    /// [`time::timeout`](crate::time::timeout)) does as `send`'s.
    ///
    /// # Errors
    /// `Timeout` with the message once `timeout` has passed; `Disconnected` with the message if
    /// the receiver is gone (before or during the wait).
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::shared::{self, SendTimeoutError};
    ///
    /// let (tx, rx) = shared::sync_channel(0);
    /// // Outside a runtime: blocks this OS thread, at most 1 ms; no receiver takes it.
    /// assert_eq!(tx.send_timeout(1, Duration::from_millis(1)), Err(SendTimeoutError::Timeout(1)));
    /// let receiver = std::thread::spawn(move || rx.recv());
    /// greenweave::run(move || tx.send_timeout(2, Duration::from_secs(60)).unwrap());
    /// assert_eq!(receiver.join().unwrap(), Ok(2));
    /// ```
    pub fn send_timeout(&self, message: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        const WHAT: &str = "a full shared channel (send_timeout)";
        spend("shared::SyncSender::send_timeout");
        // A timeout too large to add to now waits as long as `send` does.
        let deadline = Instant::now().checked_add(timeout);
        let chan = &*self.chan;
        let mut registration = Registration::new(chan, Side::Send);
        let mut timed_out = false;
        loop {
            let mut state = chan.lock();
            registration.leave(&mut state);
            if !state.receiver_alive {
                drop(state);
                return Err(SendTimeoutError::Disconnected(message));
            }
            if chan.has_room(&state) {
                let (seq, receiver) = state.push(message);
                drop(state);
                wake(receiver);
                if chan.bound == Some(0) {
                    return self.wait_taken_until(seq, deadline);
                }
                return Ok(());
            }
            drop(state);
            if timed_out || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err(SendTimeoutError::Timeout(message));
            }
            timed_out = registration.wait(WHAT, 0, deadline, |state| {
                !state.receiver_alive || chan.has_room(state)
            });
        }
    }

    /// A rendezvous send's wait for its message (number `seq`) to be taken.
    fn wait_taken(&self, seq: u64) -> Result<(), SendError<T>> {
        self.wait_taken_until(seq, None)
            .map_err(|error| match error {
                SendTimeoutError::Disconnected(message) => SendError(message),
                SendTimeoutError::Timeout(_) => {
                    unreachable!("a wait with no deadline never times out")
                }
            })
    }

    /// A rendezvous send's wait for its message (number `seq`) to be taken, until `deadline`:
    /// past it, the message is taken back and handed back in `Timeout`.
    fn wait_taken_until(
        &self,
        seq: u64,
        deadline: Option<Instant>,
    ) -> Result<(), SendTimeoutError<T>> {
        const WHAT: &str = "a shared rendezvous channel (send)";
        let chan = &*self.chan;
        // Declared before the registration, so dropped after it: an unwind takes the message
        // back once the entry is gone.
        let take_back = TakeBack { chan, seq };
        let mut registration = Registration::new(chan, Side::Send);
        let mut timed_out = false;
        loop {
            let mut state = chan.lock();
            registration.leave(&mut state);
            if state.next_taken > seq {
                drop(state);
                std::mem::forget(take_back);
                return Ok(());
            }
            let failed = if !state.receiver_alive {
                Some(SendTimeoutError::Disconnected as fn(T) -> SendTimeoutError<T>)
            } else if timed_out || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                Some(SendTimeoutError::Timeout as fn(T) -> SendTimeoutError<T>)
            } else {
                None
            };
            if let Some(error) = failed {
                let message = state.take_back(seq);
                drop(state);
                std::mem::forget(take_back);
                return match message {
                    Some(message) => Err(error(message)),
                    None => Ok(()),
                };
            }
            drop(state);
            let waited = panic::catch_unwind(AssertUnwindSafe(|| {
                registration.wait(WHAT, seq, deadline, |state| {
                    state.next_taken > seq || !state.receiver_alive
                })
            }));
            // `true`: the park's own deadline passed (one more look, then the send fails).
            timed_out = matches!(waited, Ok(true));
            if let Err(payload) = waited {
                // Unwound out of the park (a cancellation, a `time::timeout` ending): the
                // receiver, on another OS thread, may have taken the message since the look
                // above. Decided under one lock: taken, the send succeeded, and an
                // interruption (raised again at the next park: both are sticky) gives way to
                // it; not taken, the message is taken back and goes with the unwind.
                let mut state = chan.lock();
                if state.next_taken > seq && scheduler::is_interruption(&*payload) {
                    drop(state);
                    std::mem::forget(take_back);
                    return Ok(());
                }
                let message = state.take_back(seq);
                drop(state);
                std::mem::forget(take_back);
                drop(message);
                panic::resume_unwind(payload);
            }
        }
    }

    /// Sends without waiting: `Full` if there is no room (on a rendezvous channel: unless a
    /// receive is waiting and nothing is queued, in which case the message is handed over),
    /// `Disconnected` if the receiver is gone.
    ///
    /// ```
    /// use greenweave::sync::shared::{self, TrySendError};
    ///
    /// let (tx, rx) = shared::sync_channel(1);
    /// tx.try_send(1).unwrap();
    /// assert_eq!(tx.try_send(2), Err(TrySendError::Full(2)));
    /// assert_eq!(rx.recv(), Ok(1));
    /// ```
    pub fn try_send(&self, message: T) -> Result<(), TrySendError<T>> {
        let chan = &*self.chan;
        let mut state = chan.lock();
        if !state.receiver_alive {
            return Err(TrySendError::Disconnected(message));
        }
        let room = match chan.bound {
            Some(0) => !state.receivers.is_empty() && state.queue.is_empty(),
            _ => chan.has_room(&state),
        };
        if !room {
            return Err(TrySendError::Full(message));
        }
        let (_, receiver) = state.push(message);
        drop(state);
        wake(receiver);
        Ok(())
    }
}

/// Takes a rendezvous sender's message back out of the channel when its wait unwinds, and
/// drops it once the lock is released (its destructor may use the channel).
struct TakeBack<'a, T> {
    chan: &'a Chan<T>,
    seq: u64,
}

impl<T> Drop for TakeBack<'_, T> {
    fn drop(&mut self) {
        let message = self.chan.lock().take_back(self.seq);
        drop(message);
    }
}

impl<T> Clone for SyncSender<T> {
    fn clone(&self) -> Self {
        self.chan.lock().senders += 1;
        SyncSender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for SyncSender<T> {
    fn drop(&mut self) {
        release_sender(&self.chan);
    }
}

impl<T> fmt::Debug for SyncSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncSender").finish_non_exhaustive()
    }
}

/// The receiving half of a shared channel: `Send`, not `Clone` (as std's, one receiver).
///
/// Green threads of one runtime may share it through an `Rc`: each message goes to one of
/// them, the longest-waiting first.
///
/// ```compile_fail
/// fn shareable<T: Sync>(_: &T) {}
/// let (_tx, rx) = greenweave::sync::shared::channel::<u8>();
/// shareable(&rx); // a receiver is not `Sync`, as std's
/// ```
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
    /// `!Sync`, as std's receiver: one OS thread receives at a time.
    not_sync: PhantomData<std::cell::Cell<()>>,
}

impl<T> Receiver<T> {
    /// Takes the next message, waiting until one arrives: in a green thread, parks it; outside
    /// a runtime, blocks the OS thread. Fails once the channel is empty and every sender is
    /// gone.
    ///
    /// ```
    /// use greenweave::sync::shared;
    ///
    /// let (tx, rx) = shared::channel();
    /// std::thread::spawn(move || tx.send("hello").unwrap());
    /// greenweave::run(move || {
    ///     assert_eq!(rx.recv(), Ok("hello"));
    ///     assert!(rx.recv().is_err()); // the sender is gone
    /// });
    /// ```
    pub fn recv(&self) -> Result<T, RecvError> {
        self.recv_until(None).map_err(|_| RecvError)
    }

    /// Like [`recv`](Self::recv), giving up after `timeout`. A message that arrives in the
    /// same instant as the timeout is received, not left behind.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::shared::{self, RecvTimeoutError};
    ///
    /// let (tx, rx) = shared::channel::<u8>();
    /// greenweave::run(move || {
    ///     let waited = rx.recv_timeout(Duration::from_millis(5));
    ///     assert_eq!(waited, Err(RecvTimeoutError::Timeout));
    ///     drop(tx);
    /// });
    /// ```
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.recv_until(Some(deadline)),
            None => self.recv_until(None),
        }
    }

    /// Like [`recv`](Self::recv), giving up at `deadline`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use greenweave::sync::shared::{self, RecvTimeoutError};
    ///
    /// let (tx, rx) = shared::channel::<u8>();
    /// let deadline = Instant::now() + Duration::from_millis(5);
    /// assert_eq!(rx.recv_deadline(deadline), Err(RecvTimeoutError::Timeout));
    /// drop(tx);
    /// assert_eq!(rx.recv_deadline(deadline), Err(RecvTimeoutError::Disconnected));
    /// ```
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.recv_until(Some(deadline))
    }

    /// Takes a message if one is there, without waiting.
    ///
    /// ```
    /// use greenweave::sync::shared::{self, TryRecvError};
    ///
    /// let (tx, rx) = shared::channel();
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    /// tx.send(7).unwrap();
    /// drop(tx);
    /// assert_eq!(rx.try_recv(), Ok(7));
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    /// ```
    ///
    /// On a rendezvous channel where a select is parked waiting to send (whose message does
    /// not exist until its thread runs the send's branch), it waits for that select to send
    /// or to take another operation: the one case where a `try_` call waits (see the module
    /// documentation, "A receive that does not park").
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut state = self.chan.lock();
        match state.take(self.chan.bound) {
            Some((message, sender)) => {
                drop(state);
                wake(sender);
                Ok(message)
            }
            None if state.senders == 0 => Err(TryRecvError::Disconnected),
            None if self.chan.bound == Some(0) => {
                drop(state);
                if !self.hand_off() {
                    return Err(TryRecvError::Empty);
                }
                let mut state = self.chan.lock();
                let (message, sender) = state.take(self.chan.bound).ok_or(TryRecvError::Empty)?;
                drop(state);
                wake(sender);
                Ok(message)
            }
            None => Err(TryRecvError::Empty),
        }
    }

    /// An iterator that receives until every sender is gone.
    ///
    /// ```
    /// use greenweave::sync::shared;
    ///
    /// let (tx, rx) = shared::channel();
    /// let producer = std::thread::spawn(move || (0..4).for_each(|n| tx.send(n).unwrap()));
    /// let got: Vec<i32> = greenweave::run(move || rx.iter().collect());
    /// assert_eq!(got, [0, 1, 2, 3]);
    /// producer.join().unwrap();
    /// ```
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { receiver: self }
    }

    /// An iterator over the messages already there; never waits.
    ///
    /// ```
    /// use greenweave::sync::shared;
    ///
    /// let (tx, rx) = shared::channel();
    /// tx.send(1).unwrap();
    /// tx.send(2).unwrap();
    /// assert_eq!(rx.try_iter().collect::<Vec<_>>(), [1, 2]);
    /// ```
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { receiver: self }
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        const WHAT: &str = "a shared channel (recv)";
        spend("shared::Receiver::recv");
        let chan = &*self.chan;
        let mut registration = Registration::new(chan, Side::Receive);
        let mut timed_out = false;
        loop {
            let mut state = chan.lock();
            registration.leave(&mut state);
            if let Some((message, sender)) = state.take(chan.bound) {
                drop(state);
                wake(sender);
                return Ok(message);
            }
            if state.senders == 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
            drop(state);
            // However it woke (a message, a disconnection, its deadline, a stray wake-up), the
            // look above decides first: a message that arrived with the deadline is taken.
            if timed_out || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err(RecvTimeoutError::Timeout);
            }
            timed_out = registration.wait(WHAT, 0, deadline, |state| {
                !state.queue.is_empty() || state.senders == 0
            });
        }
    }
}

/// Spends a unit of the cooperative budget, in a green thread (see `runtime::budget`).
#[inline]
fn spend(what: &str) {
    if scheduler::in_green_thread() {
        budget::spend(what);
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.chan.lock();
        state.receiver_alive = false;
        // Nobody will read the queued messages: they are dropped here, on this thread, once
        // the lock is released (a message's destructor may use the channel). A rendezvous
        // sender takes its own message back instead, to hand it back in its error.
        let queued = if self.chan.bound == Some(0) {
            VecDeque::new()
        } else {
            std::mem::take(&mut state.queue)
        };
        let senders = state.take_all(Side::Send);
        drop(state);
        wake_all(senders);
        drop(queued);
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

/// Iterator of [`Receiver::iter`].
pub struct Iter<'a, T> {
    receiver: &'a Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.receiver.recv().ok()
    }
}

/// Iterator of [`Receiver::try_iter`].
pub struct TryIter<'a, T> {
    receiver: &'a Receiver<T>,
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.receiver.try_recv().ok()
    }
}

/// Iterator of `Receiver`'s `IntoIterator`.
pub struct IntoIter<T> {
    receiver: Receiver<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.receiver.recv().ok()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    /// ```
    /// use greenweave::sync::shared;
    ///
    /// let (tx, rx) = shared::channel();
    /// std::thread::spawn(move || tx.send(5).unwrap());
    /// for n in rx {
    ///     assert_eq!(n, 5);
    /// }
    /// ```
    fn into_iter(self) -> IntoIter<T> {
        IntoIter { receiver: self }
    }
}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}
