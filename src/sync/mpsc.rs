//! Green channels in `std::sync::mpsc`'s shape: [`channel`] (unbounded), [`sync_channel`]
//! (bounded; 0 is a rendezvous), and [`Sender::remote`], the `Send` handle that lets another
//! OS thread send to a green receiver.
//!
//! The error types are std's own (`SendError`, `RecvError`, `TryRecvError`,
//! `RecvTimeoutError`, `TrySendError`), so code written against std's channels matches on the
//! same variants.
//!
//! **A receive that does not park.** `try_recv`, and a receive in a select that does not wait
//! ([`Select::try_select`](super::select::Select::try_select), `try_ready`, [`select!`](crate::select!)
//! with `default`), never switches, with one exception: on a rendezvous channel
//! (`sync_channel(0)`) with no message, where a select is parked waiting to send. That
//! select's message does not exist yet (a select evaluates a send's value only once it has
//! chosen it), so the receive hands it the turn, as a receiver that parks would: it wakes the
//! select, counting as a receiver present, and yields once (the ready queue is FIFO, so the
//! select looks before the receive resumes). It then returns the message, or `Empty` if the
//! select took another of its operations. As in Go and crossbeam, a select waiting to send
//! thus meets a receive that does not wait; the cost is a switch, only then: with no such
//! select the answer is `Empty` at once, and a plain sender's message is in the channel while
//! it waits.
//!
//! ```
//! use greenweave::sync::mpsc;
//!
//! greenweave::run(|| {
//!     let (tx, rx) = mpsc::channel();
//!     for id in 0..3 {
//!         let tx = tx.clone();
//!         greenweave::spawn(move || tx.send(id * 10).unwrap());
//!     }
//!     drop(tx);
//!     let mut got: Vec<i32> = rx.iter().collect(); // ends when every sender is gone
//!     got.sort();
//!     assert_eq!(got, [0, 10, 20]);
//! });
//! ```

use std::cell::{Cell, OnceCell, UnsafeCell};
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use std::sync::mpsc::{RecvError, RecvTimeoutError, SendError, TryRecvError, TrySendError};

/// Why a [`SyncSender::send_timeout`] failed, with the message handed back: std's nightly
/// `std::sync::mpsc::SendTimeoutError` (feature `sendtimeout`), which stable std does not
/// export, so greenweave has its own with std's shape and words. `sync::shared`'s
/// `send_timeout` returns the same type.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum SendTimeoutError<T> {
    /// The channel stayed full (on a rendezvous channel: no receiver took the message) until
    /// the timeout passed.
    Timeout(T),
    /// The receiver is gone: the message could never be received.
    Disconnected(T),
}

impl<T> fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // As std's: the message need not be `Debug`.
        "SendTimeoutError(..)".fmt(f)
    }
}

impl<T> fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(..) => "timed out waiting on send operation".fmt(f),
            SendTimeoutError::Disconnected(..) => "sending on a disconnected channel".fmt(f),
        }
    }
}

impl<T> std::error::Error for SendTimeoutError<T> {}

impl<T> From<SendError<T>> for SendTimeoutError<T> {
    fn from(error: SendError<T>) -> SendTimeoutError<T> {
        SendTimeoutError::Disconnected(error.0)
    }
}

use crate::runtime::budget;
use crate::runtime::ring::Ring;
use crate::runtime::scheduler::{self, RemoteQueue, with_scheduler};
use crate::runtime::task::{Task, TaskKey, Wait, Wake};

use super::wait_queue::WaitQueue;

mod capacity;
mod select;

/// State shared by the ends of one channel (all on one runtime).
struct Shared<T> {
    /// Messages with their sequence numbers (a rendezvous sender waits for its own).
    queue: Messages<T>,
    /// `None`: unbounded; `Some(0)`: rendezvous.
    bound: Option<usize>,
    next_seq: Cell<u64>,
    /// Sequence number of the next message the receiver will take (kept by bounded channels
    /// only: a rendezvous sender waits for it to pass its own).
    next_taken: Cell<u64>,
    senders: Cell<usize>,
    receiver_alive: Cell<bool>,
    /// Green threads parked in a receive, with their park numbers, in arrival order. Usually
    /// one; several when green threads share the receiver (through an `Rc`).
    receivers_waiting: WaitQueue,
    /// Senders of a bounded channel waiting for room (or for their message to be taken).
    senders_waiting: WaitQueue,
    /// Receives that do not park (`try_recv`, a select's `default`) handing the turn to a
    /// select waiting to send on this rendezvous channel: they count as a receiver present
    /// for that select's look (see `Receiver::hand_off`).
    receivers_handing_off: Cell<usize>,
    /// Messages from other OS threads, once a remote sender exists (set once, never removed).
    inbox: OnceCell<Arc<Inbox<T>>>,
}

impl<T> Shared<T> {
    fn new(bound: Option<usize>) -> Rc<Shared<T>> {
        Rc::new(Shared {
            queue: Messages(UnsafeCell::new(Ring::new())),
            bound,
            next_seq: Cell::new(0),
            next_taken: Cell::new(0),
            senders: Cell::new(1),
            receiver_alive: Cell::new(true),
            receivers_waiting: WaitQueue::new(),
            senders_waiting: WaitQueue::new(),
            receivers_handing_off: Cell::new(0),
            inbox: OnceCell::new(),
        })
    }

    /// Wakes the longest-waiting receiver still parked.
    #[inline]
    fn wake_receiver(&self) {
        self.receivers_waiting.notify_one();
    }

    /// Wakes every parked receiver (the channel was disconnected).
    fn wake_all_receivers(&self) {
        self.receivers_waiting.notify_all();
    }

    /// Appends a message; returns its sequence number. Always inlined: it is most of a send.
    #[inline(always)]
    fn push(&self, message: T) -> u64 {
        let seq = self.next_seq.get();
        self.next_seq.set(seq + 1);
        self.queue.push_back((seq, message));
        self.wake_receiver();
        seq
    }

    /// Takes message number `seq` back out of the queue if the receiver has not taken it (a
    /// rendezvous sender whose send fails). The borrow ends before the caller can drop it.
    fn take_back(&self, seq: u64) -> Option<T> {
        self.queue.take_back(seq)
    }

    fn remote_senders(&self) -> usize {
        self.inbox.get().map_or(0, |inbox| inbox.lock().senders)
    }
}

/// A channel's local messages, with their sequence numbers.
///
/// Not a `RefCell`: every method is one step that hands out no reference into the ring and
/// runs no code of the program while it holds one (it moves messages in and out and compares
/// sequence numbers; it never drops a message: `take_all` hands them to the caller), so no two
/// can overlap, and the channel's hottest path pays no borrow flag.
struct Messages<T>(UnsafeCell<Ring<(u64, T)>>);

impl<T> Messages<T> {
    #[inline(always)]
    fn push_back(&self, message: (u64, T)) {
        // SAFETY: no reference into the ring is live (see the type's comment); growing it runs
        // no code of the program.
        unsafe { (*self.0.get()).push_back(message) }
    }

    #[inline(always)]
    fn pop_front(&self) -> Option<(u64, T)> {
        // SAFETY: as in `push_back`.
        unsafe { (*self.0.get()).pop_front() }
    }

    #[inline(always)]
    fn len(&self) -> usize {
        // SAFETY: as in `push_back`.
        unsafe { (*self.0.get()).len() }
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes message number `seq` out, if it is still queued.
    fn take_back(&self, seq: u64) -> Option<T> {
        // SAFETY: as in `push_back`; the search only compares sequence numbers.
        let ring = unsafe { &mut *self.0.get() };
        let at = ring.iter().position(|(queued, _)| *queued == seq)?;
        ring.remove(at).map(|(_, message)| message)
    }

    /// Takes every message out, for the caller to drop once it holds nothing of the channel.
    fn take_all(&self) -> Ring<(u64, T)> {
        // SAFETY: as in `push_back`.
        std::mem::take(unsafe { &mut *self.0.get() })
    }
}

/// Messages sent from other OS threads, under a lock.
struct Inbox<T> {
    state: Mutex<InboxState<T>>,
}

struct InboxState<T> {
    messages: VecDeque<T>,
    senders: usize,
    receiver_alive: bool,
    /// Green threads parked (or about to park) in a receive.
    waiting: Vec<TaskKey>,
    /// The wake-up queue of the runtime the receiver runs in, through which remote sends wake
    /// it, and whose `handles` count the remote senders. Under the lock with `senders` and
    /// `waiting`, so that moving to another runtime (`follow`) moves the count and the keys
    /// together.
    remote: Arc<RemoteQueue>,
}

impl<T> Inbox<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, InboxState<T>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<T> InboxState<T> {
    /// Moves the inbox to `remote`, the queue of the runtime the receiver is using it from
    /// now, if it belonged to another: one that has ended, since a channel's ends stay on one
    /// OS thread, where runtimes run one after another. A wake-up sent to the old queue would
    /// reach nobody, and the new runtime must count the remote senders as possible wakers.
    /// The waiting keys named green threads of the old runtime: they are dropped.
    fn follow(&mut self, remote: &Arc<RemoteQueue>) {
        if Arc::ptr_eq(&self.remote, remote) {
            return;
        }
        self.remote
            .handles
            .fetch_sub(self.senders, Ordering::AcqRel);
        remote.handles.fetch_add(self.senders, Ordering::AcqRel);
        self.remote = remote.clone();
        self.waiting.clear();
    }
}

/// Creates an unbounded channel: `send` never parks.
///
/// # Panics
/// No: the ends can be created anywhere, but sending and receiving need a runtime.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Shared::new(None);
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

/// Creates a bounded channel holding at most `bound` messages: `send` parks while it is full.
/// With `bound == 0` every send waits until the receiver has taken its message (a rendezvous).
///
/// ```
/// use greenweave::sync::mpsc;
///
/// greenweave::run(|| {
///     let (tx, rx) = mpsc::sync_channel(0);
///     let producer = greenweave::spawn(move || {
///         tx.send("hand-off").unwrap(); // returns only once the receiver has it
///     });
///     assert_eq!(rx.recv().unwrap(), "hand-off");
///     producer.join().unwrap();
/// });
/// ```
pub fn sync_channel<T>(bound: usize) -> (SyncSender<T>, Receiver<T>) {
    let shared = Shared::new(Some(bound));
    (
        SyncSender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

/// The sending half of [`channel`]; clone it for more senders.
pub struct Sender<T> {
    shared: Rc<Shared<T>>,
}

impl<T> Sender<T> {
    /// Sends a message; never parks. Fails (handing the message back) if the receiver is gone.
    #[inline(always)]
    pub fn send(&self, message: T) -> Result<(), SendError<T>> {
        if !self.shared.receiver_alive.get() {
            return Err(SendError(message));
        }
        self.shared.push(message);
        Ok(())
    }
}

impl<T: Send> Sender<T> {
    /// A `Send` handle for another OS thread: its sends wake the receiving green thread through
    /// the runtime's eventfd. While any remote sender is alive, the runtime knows a wake-up can
    /// come from outside, so a receiver waiting only on it is not reported as a deadlock.
    /// Remote sends are unbounded.
    ///
    /// # Panics
    /// Outside a runtime.
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// greenweave::run(|| {
    ///     let (tx, rx) = mpsc::channel();
    ///     let remote = tx.remote();
    ///     drop(tx);
    ///     let worker = std::thread::spawn(move || {
    ///         for n in 1..=3 {
    ///             remote.send(n).unwrap();
    ///         }
    ///     });
    ///     let got: Vec<u32> = rx.iter().collect(); // ends when the remote sender is dropped
    ///     assert_eq!(got, [1, 2, 3]);
    ///     worker.join().unwrap();
    /// });
    /// ```
    pub fn remote(&self) -> RemoteSender<T> {
        let remote = with_scheduler("Sender::remote", |scheduler| scheduler.remote.clone());
        let inbox = self.shared.inbox.get_or_init(|| {
            Arc::new(Inbox {
                state: Mutex::new(InboxState {
                    messages: VecDeque::new(),
                    senders: 0,
                    receiver_alive: self.shared.receiver_alive.get(),
                    waiting: Vec::new(),
                    remote: remote.clone(),
                }),
            })
        });
        // The channel may come from a runtime that has ended: count this sender in this one.
        inbox.lock().follow(&remote);
        RemoteSender::attach(inbox.clone())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.senders.set(self.shared.senders.get() + 1);
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        release_sender(&self.shared);
    }
}

fn release_sender<T>(shared: &Shared<T>) {
    shared.senders.set(shared.senders.get() - 1);
    if shared.senders.get() == 0 && scheduler::in_runtime() {
        // Receivers may be waiting for a message that can now never come.
        shared.wake_all_receivers();
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

/// The sending half of [`sync_channel`]; clone it for more senders.
pub struct SyncSender<T> {
    shared: Rc<Shared<T>>,
}

impl<T> SyncSender<T> {
    /// Sends a message, parking while the channel is full (for a rendezvous channel, until the
    /// receiver has taken it). Fails, handing the message back, if the receiver is gone first.
    ///
    /// A send that returns `Ok` delivered its message exactly once (into the channel; for a
    /// rendezvous, to the receiver); one that fails did not deliver it. If the green thread is
    /// unwound while it waits here ([`JoinHandle::cancel`](crate::thread::JoinHandle::cancel),
    /// an expired [`time::timeout`](crate::time::timeout)), a message the receiver has not
    /// taken yet is taken back out of the channel and dropped with the unwinding frame: it is
    /// never received later.
    ///
    /// # Panics
    /// If it has to park outside a runtime.
    pub fn send(&self, message: T) -> Result<(), SendError<T>> {
        budget::spend("SyncSender::send");
        let shared = &self.shared;
        let bound = shared.bound.expect("a SyncSender's channel is bounded");
        while bound > 0 && shared.queue.len() >= bound {
            if !shared.receiver_alive.get() {
                return Err(SendError(message));
            }
            shared.senders_waiting.wait("a full channel (send)", None);
        }
        if !shared.receiver_alive.get() {
            return Err(SendError(message));
        }
        let seq = shared.push(message);
        if bound == 0 {
            // If the wait below unwinds, the send fails: the message must not be received
            // after that.
            let unwinding = TakeBack { shared, seq };
            while shared.next_taken.get() <= seq {
                if !shared.receiver_alive.get() {
                    std::mem::forget(unwinding);
                    // Never taken: take it back and hand it to the caller.
                    return match shared.take_back(seq) {
                        Some(message) => Err(SendError(message)),
                        None => Ok(()),
                    };
                }
                shared
                    .senders_waiting
                    .wait("a rendezvous channel (send)", None);
            }
            std::mem::forget(unwinding);
        }
        Ok(())
    }

    /// [`send`](SyncSender::send), waiting at most `timeout` for room (on a rendezvous
    /// channel, for the receiver to take the message), as std's nightly
    /// `SyncSender::send_timeout`. A message that could not be delivered in time comes back in
    /// [`SendTimeoutError::Timeout`], and one the receiver is gone for in
    /// [`SendTimeoutError::Disconnected`]: nothing is lost. Room that appears in the same turn
    /// as the deadline wins: the message is sent.
    ///
    /// # Errors
    /// `Timeout` with the message once `timeout` has passed; `Disconnected` with the message if
    /// the receiver is gone (before or during the wait).
    ///
    /// # Panics
    /// If it has to park outside a runtime. A cancellation or an expired
    /// [`time::timeout`](crate::time::timeout) unwinds from the wait as from `send`'s.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::mpsc::{self, SendTimeoutError};
    ///
    /// greenweave::run(|| {
    ///     let (tx, rx) = mpsc::sync_channel(1);
    ///     tx.send_timeout(1, Duration::from_millis(1)).unwrap();
    ///     // Full, and nobody receives: the message comes back.
    ///     assert_eq!(
    ///         tx.send_timeout(2, Duration::from_millis(1)),
    ///         Err(SendTimeoutError::Timeout(2))
    ///     );
    ///     assert_eq!(rx.recv(), Ok(1));
    ///     drop(rx);
    ///     assert_eq!(
    ///         tx.send_timeout(3, Duration::from_millis(1)),
    ///         Err(SendTimeoutError::Disconnected(3))
    ///     );
    /// });
    /// ```
    pub fn send_timeout(&self, message: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        budget::spend("SyncSender::send_timeout");
        // A timeout too large to add to now waits as long as `send` does.
        let deadline = Instant::now().checked_add(timeout);
        let passed = |timed_out: bool| {
            timed_out || deadline.is_some_and(|deadline| Instant::now() >= deadline)
        };
        let shared = &self.shared;
        let bound = shared.bound.expect("a SyncSender's channel is bounded");
        let mut timed_out = false;
        while bound > 0 && shared.queue.len() >= bound {
            if !shared.receiver_alive.get() {
                return Err(SendTimeoutError::Disconnected(message));
            }
            if passed(timed_out) {
                return Err(SendTimeoutError::Timeout(message));
            }
            // `TimedOut` is the deadline (or a wait while unwinding, which cannot wait): one
            // more look, then the send fails.
            timed_out = shared
                .senders_waiting
                .wait("a full channel (send_timeout)", deadline)
                == Wake::TimedOut;
        }
        if !shared.receiver_alive.get() {
            return Err(SendTimeoutError::Disconnected(message));
        }
        let seq = shared.push(message);
        if bound == 0 {
            // If the wait below unwinds, the send fails: the message must not be received
            // after that.
            let unwinding = TakeBack { shared, seq };
            let mut timed_out = false;
            while shared.next_taken.get() <= seq {
                let failed = if !shared.receiver_alive.get() {
                    Some(SendTimeoutError::Disconnected as fn(T) -> SendTimeoutError<T>)
                } else if passed(timed_out) {
                    Some(SendTimeoutError::Timeout as fn(T) -> SendTimeoutError<T>)
                } else {
                    None
                };
                if let Some(error) = failed {
                    std::mem::forget(unwinding);
                    // Never taken: take it back and hand it to the caller.
                    return match shared.take_back(seq) {
                        Some(message) => Err(error(message)),
                        None => Ok(()),
                    };
                }
                timed_out = shared
                    .senders_waiting
                    .wait("a rendezvous channel (send_timeout)", deadline)
                    == Wake::TimedOut;
            }
            std::mem::forget(unwinding);
        }
        Ok(())
    }

    /// Sends without parking: `Full` if there is no room (for a rendezvous channel: unless the
    /// receiver is parked waiting, in which case the message is handed over),
    /// `Disconnected` if the receiver is gone.
    pub fn try_send(&self, message: T) -> Result<(), TrySendError<T>> {
        let shared = &self.shared;
        if !shared.receiver_alive.get() {
            return Err(TrySendError::Disconnected(message));
        }
        let bound = shared.bound.expect("a SyncSender's channel is bounded");
        let room = if bound == 0 {
            shared.receivers_waiting.has_parked_waiter() && shared.queue.is_empty()
        } else {
            shared.queue.len() < bound
        };
        if !room {
            return Err(TrySendError::Full(message));
        }
        shared.push(message);
        Ok(())
    }
}

/// Takes a rendezvous sender's message back out of the queue when its wait unwinds, and drops
/// it after the queue's borrow has ended (its destructor may use the channel).
struct TakeBack<'a, T> {
    shared: &'a Shared<T>,
    seq: u64,
}

impl<T> Drop for TakeBack<'_, T> {
    fn drop(&mut self) {
        drop(self.shared.take_back(self.seq));
    }
}

impl<T> Clone for SyncSender<T> {
    fn clone(&self) -> Self {
        self.shared.senders.set(self.shared.senders.get() + 1);
        SyncSender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for SyncSender<T> {
    fn drop(&mut self) {
        release_sender(&self.shared);
    }
}

impl<T> fmt::Debug for SyncSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncSender").finish_non_exhaustive()
    }
}

/// A sender for another OS thread (see [`Sender::remote`]). `Send` and `Clone`.
pub struct RemoteSender<T> {
    inbox: Arc<Inbox<T>>,
}

impl<T> RemoteSender<T> {
    fn attach(inbox: Arc<Inbox<T>>) -> RemoteSender<T> {
        let mut state = inbox.lock();
        state.senders += 1;
        state.remote.handles.fetch_add(1, Ordering::AcqRel);
        drop(state);
        RemoteSender { inbox }
    }

    /// Sends a message from any thread; never blocks. Fails, handing the message back, if the
    /// receiver is gone.
    pub fn send(&self, message: T) -> Result<(), SendError<T>> {
        let mut state = self.inbox.lock();
        if !state.receiver_alive {
            return Err(SendError(message));
        }
        state.messages.push_back(message);
        // Woken under the lock, so that `follow` cannot move the inbox in between.
        wake_all(&mut state);
        Ok(())
    }
}

impl<T> Clone for RemoteSender<T> {
    fn clone(&self) -> Self {
        RemoteSender::attach(self.inbox.clone())
    }
}

impl<T> Drop for RemoteSender<T> {
    fn drop(&mut self) {
        let mut state = self.inbox.lock();
        state.senders -= 1;
        if state.senders == 0 {
            // Receivers may be waiting for a message that can now never come.
            wake_all(&mut state);
        }
        // After the wake-up, so a runtime that sees no handle left finds it on its eventfd.
        state.remote.handles.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Wakes every receiver waiting on the inbox, through the queue of the runtime it runs in.
fn wake_all<T>(state: &mut InboxState<T>) {
    for task in state.waiting.drain(..) {
        state.remote.wake(task);
    }
}

impl<T> fmt::Debug for RemoteSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteSender").finish_non_exhaustive()
    }
}

/// The receiving half of a channel.
///
/// Green threads of one runtime may share a receiver through an `Rc` (a pool of workers
/// taking jobs from one queue): each message goes to one of them, the longest-waiting first.
pub struct Receiver<T> {
    shared: Rc<Shared<T>>,
}

impl<T> Receiver<T> {
    /// Takes the next message, parking this green thread until one arrives. Fails once the
    /// channel is empty and every sender (local and remote) is gone.
    ///
    /// # Panics
    /// If it has to park outside a runtime.
    #[inline(always)]
    pub fn recv(&self) -> Result<T, RecvError> {
        self.recv_without_deadline()
    }

    /// Like [`recv`](Self::recv), giving up after `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_with_deadline(Instant::now().checked_add(timeout))
    }

    /// Takes a message if one is there, without parking.
    ///
    /// On a rendezvous channel where a select is parked waiting to send (whose message does
    /// not exist until its green thread runs the send's branch), it lets that green thread
    /// run first: the one case where a `try_` call switches (see the module documentation,
    /// "A receive that does not park").
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        match self.take() {
            Some(message) => Ok(message),
            None if self.is_disconnected() => Err(TryRecvError::Disconnected),
            None if self.shared.bound == Some(0) && self.hand_off() => {
                self.take().ok_or(TryRecvError::Empty)
            }
            None => Err(TryRecvError::Empty),
        }
    }

    /// An iterator that receives until every sender is gone.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { receiver: self }
    }

    /// An iterator over the messages already there; never parks.
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { receiver: self }
    }

    /// `recv_until(None)`, its own copy so that every deadline check folds away (the ping-pong
    /// of a plain `recv` is the channel's hottest path). Always inlined, with `recv`,
    /// `Iter::next` and `scheduler::park`, so that no frame of ours sits between the caller's
    /// loop and the switch: each one costs a mispredicted return per receive (90 -> 53 ns per
    /// ping-pong round trip when all were inlined, though 645 -> 722 instructions).
    #[inline(always)]
    fn recv_without_deadline(&self) -> Result<T, RecvError> {
        self.recv_until(None).map_err(|_| RecvError)
    }

    /// `recv_until` for `recv_timeout`, out of line (a timed receive is not the hot path, and
    /// its copy of the loop is large).
    #[inline(never)]
    fn recv_with_deadline(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        self.recv_until(deadline)
    }

    /// Inlined into its two callers above, each of which gets its own copy.
    #[inline(always)]
    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        budget::spend("Receiver::recv");
        let mut timed_out = false;
        loop {
            if let Some(message) = self.take() {
                return Ok(message);
            }
            if self.is_disconnected() {
                return Err(RecvTimeoutError::Disconnected);
            }
            if timed_out || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err(RecvTimeoutError::Timeout);
            }
            // However it wakes (a message, a disconnection, its own deadline, a spurious
            // wake-up), the top of the loop decides: a message that arrived in the same turn as
            // the deadline is taken, not reported as a timeout. `TimedOut` ends the wait after
            // that look (it is also how a wait made while unwinding times out at once).
            let wake = scheduler::park(
                "Receiver::recv",
                Wait::Sync {
                    what: "a channel (recv)",
                    address: Rc::as_ptr(&self.shared) as usize,
                },
                deadline,
                None,
                |task, park| {
                    self.shared.receivers_waiting.push(task.clone(), park);
                    if self.shared.bound == Some(0) || self.shared.inbox.get().is_some() {
                        self.register_with_senders(task);
                    }
                },
            );
            timed_out = wake == Wake::TimedOut;
            if self.shared.inbox.get().is_some() {
                self.unregister_from_inbox();
            }
        }
    }

    /// The part of a receive's registration that only a rendezvous channel or one with a
    /// remote sender needs (out of line, so that the usual park stays small).
    #[inline(never)]
    fn register_with_senders(&self, task: &Task) {
        if self.shared.bound == Some(0) {
            // A select waiting to send on this rendezvous channel waits for a receiver: here
            // is one.
            self.shared.senders_waiting.notify_one();
        }
        if let Some(inbox) = self.shared.inbox.get() {
            let mut state = inbox.lock();
            // The channel may come from a runtime that has ended: be woken here.
            with_scheduler("Receiver::recv", |scheduler| {
                state.follow(&scheduler.remote)
            });
            state.waiting.push(task.key());
            if !state.messages.is_empty() || state.senders == 0 {
                // Something arrived since we looked: make sure we wake.
                state.remote.wake(task.key());
            }
        }
    }

    /// After a park of a channel with a remote sender: no remote send needs to wake this green
    /// thread any more.
    #[inline(never)]
    fn unregister_from_inbox(&self) {
        if let Some(inbox) = self.shared.inbox.get() {
            let me = with_scheduler("Receiver::recv", |scheduler| scheduler.current_task_key());
            inbox.lock().waiting.retain(|&key| key != me);
        }
    }

    /// The next message, local first, then from other threads.
    #[inline]
    fn take(&self) -> Option<T> {
        let shared = &self.shared;
        // The borrow ends here, before waking anyone.
        let front = shared.queue.pop_front();
        if let Some((seq, message)) = front {
            // Only a bounded channel's senders wait for the count of messages taken.
            if let Some(bound) = shared.bound {
                shared.next_taken.set(seq + 1);
                self.wake_senders(bound);
            }
            return Some(message);
        }
        if shared.inbox.get().is_some() {
            return self.take_remote();
        }
        None
    }

    /// After a message of a bounded channel was taken: wakes a sender parked for room, or
    /// every rendezvous sender (one of them waits for this message). Out of line, so the
    /// unbounded path of `take` stays small.
    #[inline(never)]
    fn wake_senders(&self, bound: usize) {
        if !scheduler::in_runtime() {
            return;
        }
        if bound == 0 {
            self.shared.senders_waiting.notify_all();
        } else {
            self.shared.senders_waiting.notify_one();
        }
    }

    /// The next message from other threads, once a remote sender exists (out of line, so the
    /// local path of `take` stays small).
    #[inline(never)]
    fn take_remote(&self) -> Option<T> {
        self.shared
            .inbox
            .get()
            .and_then(|inbox| inbox.lock().messages.pop_front())
    }

    /// Whether no message can come any more: the queue is empty and every sender is gone.
    /// The usual answer, a local sender is alive, is inline; the rest is not (it locks).
    #[inline(always)]
    fn is_disconnected(&self) -> bool {
        self.shared.senders.get() == 0 && self.is_disconnected_without_local_senders()
    }

    #[inline(never)]
    fn is_disconnected_without_local_senders(&self) -> bool {
        self.shared.remote_senders() == 0
            && self.shared.queue.is_empty()
            && self
                .shared
                .inbox
                .get()
                .is_none_or(|inbox| inbox.lock().messages.is_empty())
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let shared = &self.shared;
        shared.receiver_alive.set(false);
        // Nobody will read the queued messages. They are dropped last, once the inbox's lock
        // and the queue's borrow are released and the senders woken: a message's destructor
        // may use this channel (send on it, drop a sender of it).
        let remote = shared.inbox.get().map(|inbox| {
            let mut state = inbox.lock();
            state.receiver_alive = false;
            std::mem::take(&mut state.messages)
        });
        let local = if shared.bound == Some(0) {
            // A rendezvous sender takes its own message back instead.
            Ring::new()
        } else {
            shared.queue.take_all()
        };
        if scheduler::in_runtime() {
            shared.senders_waiting.notify_all();
        }
        drop(local);
        drop(remote);
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

    #[inline(always)]
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
