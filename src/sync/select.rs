//! Waiting for the first of several operations: Go's `select`, gevent's `wait`, crossbeam's
//! `Select`. [`Select`] is the builder, [`select!`](crate::select!) the macro over it.
//!
//! An operation is a receive ([`mpsc::Receiver`](super::mpsc::Receiver),
//! [`oneshot::Receiver`](super::oneshot::Receiver), [`shared::Receiver`](super::shared::Receiver),
//! and the timer channels' [`timer_channel::Receiver`](super::timer_channel::Receiver)),
//! a send ([`mpsc::Sender`](super::mpsc::Sender), [`mpsc::SyncSender`](super::mpsc::SyncSender),
//! [`shared::Sender`](super::shared::Sender), [`shared::SyncSender`](super::shared::SyncSender)),
//! the end of a green thread
//! ([`JoinHandle`]), a green socket or [`io::Async`](crate::io::Async) becoming readable or
//! writable, or a deadline. A select waits (parking only its green thread) until one of them
//! is *ready*, that is, would complete without waiting, and returns it, chosen at random among
//! those ready at once (or the first one added: [`Select::new_biased`],
//! [`select_biased!`](crate::select_biased!)); the caller then completes that one operation.
//! So exactly one is taken, and nothing is lost from the others: a message not received stays
//! in its channel, and the value of a send not chosen never left the caller (it is passed only
//! to the completion). [`Select::ready`] and its variants only say which operation is ready,
//! and leave it to the caller to perform it (crossbeam's `ready`).
//!
//! ```
//! use std::time::Duration;
//! use greenweave::sync::mpsc;
//! use greenweave::sync::select::Select;
//!
//! greenweave::run(|| {
//!     let (jobs_tx, jobs) = mpsc::channel::<u32>();
//!     let (quit_tx, quit) = mpsc::channel::<()>();
//!     greenweave::spawn(move || {
//!         jobs_tx.send(7).unwrap();
//!         greenweave::thread::sleep(Duration::from_millis(1));
//!         quit_tx.send(()).unwrap();
//!     });
//!     let mut done = Vec::new();
//!     loop {
//!         let mut select = Select::new();
//!         let job = select.recv(&jobs);
//!         let stop = select.recv(&quit);
//!         let operation = select.select();
//!         match operation.index() {
//!             i if i == job => match operation.recv(&jobs) {
//!                 Ok(n) => done.push(n),
//!                 Err(_) => break, // every job sender is gone (ready too, once disconnected)
//!             },
//!             i if i == stop => {
//!                 operation.recv(&quit).unwrap();
//!                 break;
//!             }
//!             _ => unreachable!(),
//!         }
//!     }
//!     assert_eq!(done, [7]);
//! });
//! ```
//!
//! # How it waits
//!
//! One park for all the operations: the green thread is registered, with the same park
//! number, in every queue it waits in (a channel's receivers or senders, the joined green
//! thread's joiner slot, an fd's readers or writers, a timer for the nearest deadline), then
//! parks once. However it wakes, it takes every registration out again, looks at every
//! operation, and picks one of the ready ones uniformly at random, as Go does (a fixed order
//! would starve the later ones). Deadlines count only when no other operation is ready: a
//! message that arrived in the same turn as the deadline is taken, as everywhere in
//! greenweave.
//!
//! A channel wakes one waiter per message. A select woken by channel B that takes channel A
//! instead (both became ready in the same turn) consumed B's wake-up: it passes it on, waking
//! the next green thread waiting on B, so no message sits in a channel while its receivers
//! sleep. The same holds for room in a bounded channel.
//!
//! A select that does not wait ([`Select::try_select`], [`Select::try_ready`], `default`)
//! meets a select parked waiting to send on a rendezvous channel it receives from: that
//! send's value does not exist until its select runs the branch, so the receive hands it the
//! turn and takes its message (or finds the channel empty if it took another operation). It
//! is the one case where a non-waiting select (or `try_recv`) switches; see
//! [`mpsc`](super::mpsc) ("A receive that does not park") and [`shared`](super::shared).
//!
//! A select is a cancellation point and obeys [`time::timeout`](crate::time::timeout), as
//! every park does; cancelled or timed out while parked, it takes nothing and leaves no entry
//! in any queue.
//!
//! Owns: the builder, the choice, and the completion checks. May not: reach into a channel's
//! or a green thread's state except through `Operation`, which each of them implements next
//! to its own state.

use std::cell::Cell;
use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::io::source::Source;
use crate::runtime::reactor::{Interest, ScheduledIo};
use crate::runtime::scheduler;
use crate::runtime::task::{SelectWait, Task, Wait, Wake};
use crate::thread::{JoinError, JoinHandle};

use super::mpsc::{RecvError, SendError};
use super::wait_queue::Registration;

/// What the builder needs of a channel end or a green thread to wait on it: implemented next
/// to each one's state (`mpsc::select`, `oneshot`, `thread::select`).
pub(crate) trait Operation {
    /// Whether the operation would complete now without waiting (a message or room is there,
    /// the other side is gone, the green thread has finished).
    fn is_ready(&self) -> bool;

    /// Registers `task`, about to park in park number `park`, to be woken when the operation
    /// may have become ready. Called right before the switch: nothing else runs in between.
    fn register(&self, task: &Rc<Task>, park: u64) -> Option<Registration>;

    /// Takes that registration out again after the park. Returns whether it had been taken
    /// already (a wake-up through this queue, or one meant for it, was consumed).
    fn deregister(&self, task: &Task, park: u64, registration: Option<Registration>) -> bool;

    /// Wakes the next green thread waiting on this queue: a wake-up this select consumed and
    /// did not use (see the module doc). Nothing for waits whose every waiter is woken.
    fn pass_on(&self) {}

    /// What to call it in the deadlock report.
    fn kind(&self) -> OperationKind;

    /// For a receive that was not ready, in a select that does not wait (`try_select`,
    /// `try_ready`, `select!` with `default`): if a select is parked waiting to send on this
    /// rendezvous channel, hands it the turn, as `try_recv` does, and returns whether a
    /// message is now there (see the module documentation).
    fn hand_off(&self) -> bool {
        false
    }

    /// The instant at which the operation becomes ready by itself, if it does (a timer
    /// channel's next message): the select's park ends then at the latest, through the
    /// scheduler's timer.
    fn ready_at(&self) -> Option<Instant> {
        None
    }

    /// Whether another OS thread may make it ready (an end of a `sync::shared` channel,
    /// whose other end is `Send`): the deadlock report then leaves the select alone.
    fn may_be_woken_from_another_thread(&self) -> bool {
        false
    }
}

/// The kinds of [`Operation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OperationKind {
    Recv,
    Send,
    /// Joining the green thread with this id.
    Join(u64),
}

pub(crate) mod sealed {
    use super::{Operation, OperationKind};
    use crate::io::source::Source;

    /// How a type takes part in a select: through an [`Operation`], or as an fd.
    pub struct Operand<'a> {
        pub(crate) target: Target<'a>,
        /// What the completion methods compare, to check they are given the selected end:
        /// the channel's (or the green thread's) shared state.
        pub(crate) identity: *const (),
    }

    pub(crate) enum Target<'a> {
        Operation(&'a dyn Operation),
        Io(&'a Source),
    }

    impl<'a> Operand<'a> {
        pub(crate) fn operation(operation: &'a dyn Operation, identity: *const ()) -> Self {
            Operand {
                target: Target::Operation(operation),
                identity,
            }
        }

        pub(crate) fn io(source: &'a Source) -> Self {
            Operand {
                target: Target::Io(source),
                identity: std::ptr::from_ref(source).cast(),
            }
        }

        pub(crate) fn kind(&self) -> Option<OperationKind> {
            match self.target {
                Target::Operation(operation) => Some(operation.kind()),
                Target::Io(_) => None,
            }
        }
    }

    /// Only greenweave's own types take part in a select.
    pub trait Sealed {
        fn operand(&self) -> Operand<'_>;
    }

    impl<S: Sealed + ?Sized> Sealed for &S {
        fn operand(&self) -> Operand<'_> {
            (**self).operand()
        }
    }

    impl<S: Sealed + ?Sized> Sealed for std::rc::Rc<S> {
        fn operand(&self) -> Operand<'_> {
            (**self).operand()
        }
    }
}

use sealed::{Operand, Sealed, Target};

/// The receiving end of a channel, for [`Select::recv`] and [`SelectedOperation::recv`]:
/// [`mpsc::Receiver`](super::mpsc::Receiver), [`oneshot::Receiver`](super::oneshot::Receiver),
/// [`shared::Receiver`](super::shared::Receiver) and
/// [`timer_channel::Receiver`](super::timer_channel::Receiver) (and references and `Rc`s to
/// them: green threads share a receiver through an `Rc`). Sealed.
pub trait ReceiveEnd: Sealed {
    /// The type of the messages.
    type Message;

    /// Receives, as the end's own `recv` does (it does not wait: the select found it ready).
    #[doc(hidden)]
    fn recv_selected(&self) -> Result<Self::Message, RecvError>;
}

/// The sending end of a channel, for [`Select::send`] and [`SelectedOperation::send`]:
/// [`mpsc::Sender`](super::mpsc::Sender), [`mpsc::SyncSender`](super::mpsc::SyncSender),
/// [`shared::Sender`](super::shared::Sender) and [`shared::SyncSender`](super::shared::SyncSender)
/// (and references and `Rc`s to them). Sealed.
pub trait SendEnd: Sealed {
    /// The type of the messages.
    type Message;

    /// Sends, as the end's own `send` does.
    #[doc(hidden)]
    fn send_selected(&self, message: Self::Message) -> Result<(), SendError<Self::Message>>;
}

/// An fd that the runtime watches, for [`Select::readable`] and [`Select::writable`]: every
/// green socket (`net::{TcpStream, TcpListener, UdpSocket}`,
/// `os::unix::net::{UnixStream, UnixListener, UnixDatagram}`) and [`io::Async`](crate::io::Async)
/// (and references and `Rc`s to them). Sealed.
pub trait Pollable: Sealed {}

impl<R: ReceiveEnd + ?Sized> ReceiveEnd for &R {
    type Message = R::Message;

    fn recv_selected(&self) -> Result<R::Message, RecvError> {
        (**self).recv_selected()
    }
}

impl<S: SendEnd + ?Sized> SendEnd for &S {
    type Message = S::Message;

    fn send_selected(&self, message: S::Message) -> Result<(), SendError<S::Message>> {
        (**self).send_selected(message)
    }
}

impl<P: Pollable + ?Sized> Pollable for &P {}

impl<R: ReceiveEnd + ?Sized> ReceiveEnd for Rc<R> {
    type Message = R::Message;

    fn recv_selected(&self) -> Result<R::Message, RecvError> {
        (**self).recv_selected()
    }
}

impl<S: SendEnd + ?Sized> SendEnd for Rc<S> {
    type Message = S::Message;

    fn send_selected(&self, message: S::Message) -> Result<(), SendError<S::Message>> {
        (**self).send_selected(message)
    }
}

impl<P: Pollable + ?Sized> Pollable for Rc<P> {}

/// One operation of a [`Select`].
struct Branch<'a> {
    target: BranchTarget<'a>,
    identity: *const (),
    /// Scratch of one `select` call: whether the last look found it ready.
    ready: Cell<bool>,
    /// Scratch of one park: the queue entry to take out afterwards.
    registration: Cell<Option<Registration>>,
    /// Scratch of one park: the fd's readiness, kept while this green thread waits on it.
    io: Cell<Option<Rc<ScheduledIo>>>,
    /// Scratch of one park: whether a wake-up through this queue was consumed.
    consumed: Cell<bool>,
}

enum BranchTarget<'a> {
    Operation(&'a dyn Operation),
    Io(&'a Source, Interest),
    /// `None`: a deadline too far to represent, which never passes.
    Deadline(Option<Instant>),
}

/// Waits for the first of several operations; see the [module](self) documentation.
///
/// Add operations with [`recv`](Select::recv), [`send`](Select::send),
/// [`join`](Select::join), [`readable`](Select::readable), [`writable`](Select::writable),
/// [`deadline`](Select::deadline) and [`timeout`](Select::timeout), each of which returns the
/// operation's index; then [`select`](Select::select) (or [`try_select`](Select::try_select),
/// the non-blocking select with a default, or [`select_timeout`](Select::select_timeout))
/// returns the [`SelectedOperation`]. Complete it with the matching method: `recv` or `send`
/// with the same channel, `join` with the handle; the others need nothing. Or ask only which
/// operation is ready, with [`ready`](Select::ready), [`try_ready`](Select::try_ready) or
/// [`ready_timeout`](Select::ready_timeout), and perform it yourself.
///
/// A `Select` can be used for several selects in a row; each looks at every operation afresh.
///
/// ```
/// use greenweave::sync::mpsc;
/// use greenweave::sync::select::Select;
///
/// greenweave::run(|| {
///     let (tx, rx) = mpsc::sync_channel::<&str>(1);
///     tx.send("fills the channel").unwrap();
///     let worker = greenweave::spawn(|| 42);
///
///     let mut select = Select::new();
///     let send = select.send(&tx); // not ready: the channel is full
///     let join = select.join(&worker);
///     let operation = select.select(); // waits for the worker to finish
///     assert_eq!(operation.index(), join);
///     assert_ne!(operation.index(), send);
///     assert_eq!(operation.join(worker).unwrap(), 42);
///     assert_eq!(rx.recv(), Ok("fills the channel")); // the channel is as it was
/// });
/// ```
pub struct Select<'a> {
    branches: Vec<Branch<'a>>,
    /// Picks the first ready operation in the order they were added, instead of one at random
    /// ([`Select::new_biased`]).
    biased: bool,
    /// A select's branches are waited on by its own green thread only (`!Send`).
    marker: PhantomData<*mut ()>,
}

impl<'a> Select<'a> {
    /// A select with no operations yet. Among the operations ready at once it picks one at
    /// random, so that none is starved.
    ///
    /// ```
    /// use greenweave::sync::select::Select;
    ///
    /// let select = Select::new();
    /// # drop(select);
    /// ```
    pub fn new() -> Select<'a> {
        Select {
            branches: Vec::new(),
            biased: false,
            marker: PhantomData,
        }
    }

    /// A select with no operations yet that, among the operations ready at once, picks the
    /// one added first (crossbeam's `Select::new_biased`; the builder under
    /// [`select_biased!`](crate::select_biased!)). A priority order: an operation that is
    /// always ready starves those added after it.
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    /// use greenweave::sync::select::Select;
    ///
    /// greenweave::run(|| {
    ///     let (urgent_tx, urgent) = mpsc::channel();
    ///     let (normal_tx, normal) = mpsc::channel();
    ///     normal_tx.send("normal").unwrap();
    ///     urgent_tx.send("urgent").unwrap();
    ///     let mut select = Select::new_biased();
    ///     let first = select.recv(&urgent);
    ///     select.recv(&normal);
    ///     let operation = select.select();
    ///     assert_eq!(operation.index(), first); // both are ready: the first one added wins
    ///     assert_eq!(operation.recv(&urgent), Ok("urgent"));
    /// });
    /// ```
    pub fn new_biased() -> Select<'a> {
        Select {
            biased: true,
            ..Select::new()
        }
    }

    fn add(&mut self, target: BranchTarget<'a>, identity: *const ()) -> usize {
        self.branches.push(Branch {
            target,
            identity,
            ready: Cell::new(false),
            registration: Cell::new(None),
            io: Cell::new(None),
            consumed: Cell::new(false),
        });
        self.branches.len() - 1
    }

    fn add_operand(&mut self, operand: Operand<'a>, interest: Interest) -> usize {
        let target = match operand.target {
            Target::Operation(operation) => BranchTarget::Operation(operation),
            Target::Io(source) => BranchTarget::Io(source, interest),
        };
        self.add(target, operand.identity)
    }

    /// Adds a receive from `receiver`: ready when a message is there, or when the channel is
    /// disconnected (the receive then fails at once). Returns its index.
    pub fn recv<R: ReceiveEnd>(&mut self, receiver: &'a R) -> usize {
        self.add_operand(receiver.operand(), Interest::Readable)
    }

    /// Adds a send on `sender`: ready when the channel has room (an unbounded channel always
    /// has; a rendezvous channel has when a receiver is waiting), or when the receiver is gone
    /// (the send then fails at once, handing the message back). Returns its index.
    ///
    /// The message is given only to [`SelectedOperation::send`], so a send that is not chosen
    /// never takes it.
    pub fn send<S: SendEnd>(&mut self, sender: &'a S) -> usize {
        self.add_operand(sender.operand(), Interest::Writable)
    }

    /// Adds the end of the green thread that `handle` joins: ready when it has finished.
    /// Returns its index. Complete it with [`SelectedOperation::join`], which takes the handle
    /// (only when this operation is the one chosen).
    ///
    /// # Panics
    /// `select` panics if the green thread is the one selecting (it would wait for ever), or if
    /// another green thread is waiting to join it at the same time (a handle shared through an
    /// `Rc`: a green thread has one joiner).
    pub fn join<T>(&mut self, handle: &'a JoinHandle<T>) -> usize {
        self.add_operand(handle.operand(), Interest::Readable)
    }

    /// Adds a wait for `io` to be readable (data, a connection to accept, the peer's shutdown,
    /// an error): then a read would not wait. Returns its index. The kernel confirms readiness
    /// before the select returns it.
    pub fn readable<P: Pollable>(&mut self, io: &'a P) -> usize {
        self.add_operand(io.operand(), Interest::Readable)
    }

    /// Adds a wait for `io` to be writable. Returns its index.
    pub fn writable<P: Pollable>(&mut self, io: &'a P) -> usize {
        self.add_operand(io.operand(), Interest::Writable)
    }

    /// Adds a deadline: ready once `deadline` has passed, if no other operation is ready then.
    /// Returns its index.
    pub fn deadline(&mut self, deadline: Instant) -> usize {
        self.add(BranchTarget::Deadline(Some(deadline)), std::ptr::null())
    }

    /// Adds a timeout, a deadline `timeout` from now: ready once it has passed, if no other
    /// operation is ready then (a sleep that the other operations can cut short). Returns its
    /// index.
    pub fn timeout(&mut self, timeout: Duration) -> usize {
        self.add(
            BranchTarget::Deadline(Instant::now().checked_add(timeout)),
            std::ptr::null(),
        )
    }

    /// Waits until one operation is ready and returns it, parking this green thread meanwhile.
    ///
    /// # Panics
    /// If the select has no operation (it would wait for ever), and, if it has to wait,
    /// outside a runtime; see also [`join`](Select::join).
    pub fn select(&mut self) -> SelectedOperation {
        assert!(
            !self.branches.is_empty(),
            "greenweave: Select::select with no operations would wait for ever"
        );
        match self.run("Select::select", None, true, true) {
            Ok(index) => self.selected(index),
            Err(()) => unreachable!("a select with no deadline ends only with an operation"),
        }
    }

    /// Returns an operation that is ready now, without waiting: the `default` branch of Go's
    /// `select`. Deadlines that have passed count as ready.
    ///
    /// # Errors
    /// [`TrySelectError`] if none is ready.
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    /// use greenweave::sync::select::Select;
    ///
    /// greenweave::run(|| {
    ///     let (tx, rx) = mpsc::channel::<u8>();
    ///     let mut select = Select::new();
    ///     select.recv(&rx);
    ///     assert!(select.try_select().is_err());
    ///     tx.send(1).unwrap();
    ///     let operation = select.try_select().unwrap();
    ///     assert_eq!(operation.recv(&rx), Ok(1));
    /// });
    /// ```
    pub fn try_select(&mut self) -> Result<SelectedOperation, TrySelectError> {
        self.run("Select::try_select", None, false, true)
            .map(|index| self.selected(index))
            .map_err(|()| TrySelectError)
    }

    /// Waits as [`select`](Select::select) does, at most `timeout`. An operation that became
    /// ready in the same turn as the deadline is returned, not reported as a timeout.
    ///
    /// # Errors
    /// [`SelectTimeoutError`] if no operation became ready in time.
    pub fn select_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<SelectedOperation, SelectTimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        self.run("Select::select_timeout", deadline, true, true)
            .map(|index| self.selected(index))
            .map_err(|()| SelectTimeoutError)
    }

    /// Waits as [`select`](Select::select) does, until `deadline` at the latest.
    ///
    /// # Errors
    /// [`SelectTimeoutError`] if no operation became ready in time.
    pub fn select_deadline(
        &mut self,
        deadline: Instant,
    ) -> Result<SelectedOperation, SelectTimeoutError> {
        self.run("Select::select_deadline", Some(deadline), true, true)
            .map(|index| self.selected(index))
            .map_err(|()| SelectTimeoutError)
    }

    /// Waits until one operation is ready and returns its index, without performing it
    /// (crossbeam's `Select::ready`): the caller then performs it with the channel's own
    /// method, `try_recv` or `try_send` (which may find it not ready after all: another green
    /// thread or OS thread may have been first, so be ready to loop), or not at all.
    ///
    /// Unlike [`select`](Select::select), it consumes no wake-up: one that woke it through
    /// a channel is passed on to the next green thread waiting there, so an operation that the
    /// caller does not perform leaves nobody asleep in front of a message (another waiter may
    /// wake for nothing instead, and wait again).
    ///
    /// # Panics
    /// As [`select`](Select::select).
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    /// use greenweave::sync::select::Select;
    ///
    /// greenweave::run(|| {
    ///     let (tx, rx) = mpsc::channel();
    ///     greenweave::spawn(move || tx.send(10).unwrap());
    ///     let mut select = Select::new();
    ///     let receive = select.recv(&rx);
    ///     assert_eq!(select.ready(), receive);
    ///     assert_eq!(rx.try_recv(), Ok(10)); // the caller performs it
    /// });
    /// ```
    pub fn ready(&mut self) -> usize {
        assert!(
            !self.branches.is_empty(),
            "greenweave: Select::ready with no operations would wait for ever"
        );
        match self.run("Select::ready", None, true, false) {
            Ok(index) => index,
            Err(()) => unreachable!("a select with no deadline ends only with an operation"),
        }
    }

    /// The index of an operation that is ready now, without waiting and without performing
    /// it (crossbeam's `Select::try_ready`; see [`ready`](Select::ready)). Deadlines that
    /// have passed count as ready.
    ///
    /// # Errors
    /// [`TryReadyError`] if none is ready.
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    /// use greenweave::sync::select::Select;
    ///
    /// greenweave::run(|| {
    ///     let (tx, rx) = mpsc::sync_channel::<u8>(1);
    ///     let mut select = Select::new();
    ///     let receive = select.recv(&rx);
    ///     assert!(select.try_ready().is_err());
    ///     tx.send(1).unwrap();
    ///     assert_eq!(select.try_ready(), Ok(receive));
    ///     assert_eq!(select.try_ready(), Ok(receive)); // still there: nothing was taken
    ///     assert_eq!(rx.try_recv(), Ok(1));
    /// });
    /// ```
    pub fn try_ready(&mut self) -> Result<usize, TryReadyError> {
        self.run("Select::try_ready", None, false, false)
            .map_err(|()| TryReadyError)
    }

    /// Waits as [`ready`](Select::ready) does, at most `timeout`.
    ///
    /// # Errors
    /// [`ReadyTimeoutError`] if no operation became ready in time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use greenweave::sync::mpsc;
    /// use greenweave::sync::select::{ReadyTimeoutError, Select};
    ///
    /// greenweave::run(|| {
    ///     let (_tx, rx) = mpsc::channel::<u8>();
    ///     let mut select = Select::new();
    ///     select.recv(&rx);
    ///     let waited = select.ready_timeout(Duration::from_millis(1));
    ///     assert_eq!(waited, Err(ReadyTimeoutError));
    /// });
    /// ```
    pub fn ready_timeout(&mut self, timeout: Duration) -> Result<usize, ReadyTimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        self.run("Select::ready_timeout", deadline, true, false)
            .map_err(|()| ReadyTimeoutError)
    }

    /// Waits as [`ready`](Select::ready) does, until `deadline` at the latest.
    ///
    /// # Errors
    /// [`ReadyTimeoutError`] if no operation became ready in time.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use greenweave::sync::mpsc;
    /// use greenweave::sync::select::Select;
    ///
    /// greenweave::run(|| {
    ///     let (tx, rx) = mpsc::channel::<u8>();
    ///     tx.send(3).unwrap();
    ///     let mut select = Select::new();
    ///     let receive = select.recv(&rx);
    ///     let deadline = Instant::now() + Duration::from_secs(5);
    ///     assert_eq!(select.ready_deadline(deadline), Ok(receive));
    /// });
    /// ```
    pub fn ready_deadline(&mut self, deadline: Instant) -> Result<usize, ReadyTimeoutError> {
        self.run("Select::ready_deadline", Some(deadline), true, false)
            .map_err(|()| ReadyTimeoutError)
    }

    /// The loop of every select: look, and park until something may have changed; returns
    /// the index of the operation chosen. `Err` when nothing was ready and `deadline` passed
    /// (or, not `blocking`, at once). `performs`: the caller completes the chosen operation
    /// (a select), so a wake-up consumed through it is used; otherwise (`ready`) it is
    /// passed on too.
    fn run(
        &mut self,
        what: &'static str,
        deadline: Option<Instant>,
        blocking: bool,
        performs: bool,
    ) -> Result<usize, ()> {
        for branch in &self.branches {
            branch.consumed.set(false);
        }
        let mut timed_out = false;
        loop {
            if let Some(index) = self.pick_ready(performs) {
                return Ok(index);
            }
            // Nothing else is ready: a deadline that has passed is. After a park that timed
            // out, the nearest deadline counts as passed (a park made while unwinding times
            // out at once).
            let now = Instant::now();
            let nearest = self.nearest_deadline();
            let ends_select = |at: Option<Instant>| match (at, deadline) {
                (Some(branch), Some(own)) => own < branch,
                (None, Some(_)) => true,
                (_, None) => false,
            };
            if let Some((index, at)) = nearest
                && (at <= now || timed_out)
                && !ends_select(Some(at))
            {
                return Ok(index);
            }
            if !blocking {
                // A rendezvous send parked in another select has no message until its green
                // thread runs: hand it the turn, then look once more.
                let handed_off = self.branches.iter().any(Branch::hand_off);
                return match handed_off {
                    true => self.pick_ready(performs).ok_or(()),
                    false => Err(()),
                };
            }
            if deadline.is_some_and(|own| own <= now) {
                return Err(());
            }
            if timed_out && ends_select(nearest.map(|(_, at)| at)) {
                return Err(());
            }
            let park_deadline = match (nearest.map(|(_, at)| at), deadline) {
                (Some(branch), Some(own)) => Some(branch.min(own)),
                (branch, own) => branch.or(own),
            };
            // An operation that becomes ready by itself (a timer channel) ends the park at
            // its instant; that end is not the timeout of a deadline, and the look at the top
            // of the loop finds the operation ready.
            let operation_at = self.nearest_ready_at();
            let (park_deadline, by_operation) = match (operation_at, park_deadline) {
                (Some(operation), Some(other)) if operation < other => (Some(operation), true),
                (Some(operation), None) => (Some(operation), true),
                (_, other) => (other, false),
            };
            timed_out = self.park(what, park_deadline) == Wake::TimedOut && !by_operation;
        }
    }

    /// Looks at every operation but the deadlines and picks one of the ready ones (uniformly
    /// at random, or the first one added if the select is biased); passes on the wake-ups
    /// this select consumed through the others, and through the chosen one too unless the
    /// caller `performs` it.
    fn pick_ready(&self, performs: bool) -> Option<usize> {
        let mut ready = 0;
        for branch in &self.branches {
            let is_ready = branch.is_ready();
            branch.ready.set(is_ready);
            ready += usize::from(is_ready);
        }
        if ready == 0 {
            return None;
        }
        let nth = if ready == 1 || self.biased {
            0
        } else {
            random_below(ready)
        };
        let (chosen, _) = self
            .branches
            .iter()
            .enumerate()
            .filter(|(_, branch)| branch.ready.get())
            .nth(nth)?;
        for (index, branch) in self.branches.iter().enumerate() {
            if (index != chosen || !performs) && branch.consumed.get() && branch.ready.get() {
                branch.pass_on();
            }
        }
        Some(chosen)
    }

    /// The nearest instant at which an operation becomes ready by itself.
    fn nearest_ready_at(&self) -> Option<Instant> {
        self.branches
            .iter()
            .filter_map(|branch| match branch.target {
                BranchTarget::Operation(operation) => operation.ready_at(),
                _ => None,
            })
            .min()
    }

    /// The deadline branch that passes first (the first added, among equal ones).
    fn nearest_deadline(&self) -> Option<(usize, Instant)> {
        self.branches
            .iter()
            .enumerate()
            .filter_map(|(index, branch)| match branch.target {
                BranchTarget::Deadline(at) => Some((index, at?)),
                _ => None,
            })
            .min_by_key(|&(index, at)| (at, index))
    }

    fn selected(&self, index: usize) -> SelectedOperation {
        let branch = &self.branches[index];
        SelectedOperation {
            index,
            kind: match branch.target {
                BranchTarget::Operation(operation) => Selected::Operation(operation.kind()),
                BranchTarget::Io(..) | BranchTarget::Deadline(_) => Selected::Other,
            },
            identity: branch.identity,
            completed: false,
        }
    }

    /// Parks once, registered in the queue of every operation; afterwards no registration is
    /// left, however the park ends (an unwind included).
    fn park(&self, what: &'static str, deadline: Option<Instant>) -> Wake {
        let departure = Departure {
            branches: &self.branches,
            parked: Cell::new(None),
        };
        scheduler::park(
            what,
            Wait::Select(self.summary()),
            deadline,
            None,
            |task, park| {
                departure.parked.set(Some((task.clone(), park)));
                for branch in &self.branches {
                    branch.register(task, park);
                }
            },
        )
        // `departure` takes the registrations out here, or on the way out of an unwind.
    }

    /// What the deadlock report says this select waits for.
    fn summary(&self) -> SelectWait {
        let mut summary = SelectWait::default();
        let count = |counter: &mut u8| *counter = counter.saturating_add(1);
        for branch in &self.branches {
            if let BranchTarget::Operation(operation) = branch.target
                && operation.may_be_woken_from_another_thread()
            {
                summary.other_threads = true;
            }
            match branch.target {
                BranchTarget::Operation(operation) => match operation.kind() {
                    OperationKind::Recv => count(&mut summary.receives),
                    OperationKind::Send => count(&mut summary.sends),
                    OperationKind::Join(id) => {
                        if summary.joins == 0 {
                            summary.first_join = id;
                        }
                        count(&mut summary.joins);
                    }
                },
                BranchTarget::Io(source, interest) => {
                    summary.first_fd.get_or_insert((source.fd(), interest));
                    count(&mut summary.fds);
                }
                BranchTarget::Deadline(_) => {}
            }
        }
        summary
    }
}

impl Default for Select<'_> {
    fn default() -> Self {
        Select::new()
    }
}

impl fmt::Debug for Select<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Select")
            .field("operations", &self.branches.len())
            .finish_non_exhaustive()
    }
}

impl Branch<'_> {
    fn is_ready(&self) -> bool {
        match self.target {
            BranchTarget::Operation(operation) => operation.is_ready(),
            BranchTarget::Io(source, interest) => io_is_ready(source, interest),
            BranchTarget::Deadline(_) => false,
        }
    }

    fn register(&self, task: &Rc<Task>, park: u64) {
        match self.target {
            BranchTarget::Operation(operation) => {
                self.registration.set(operation.register(task, park));
            }
            BranchTarget::Io(source, interest) => {
                // Not ready a moment ago, so registered with the running reactor.
                if let Ok(io) = source.registered_io("Select::select") {
                    io.add_waiter(interest, task.clone(), park);
                    self.io.set(Some(io));
                }
            }
            // The park's own deadline is the nearest.
            BranchTarget::Deadline(_) => {}
        }
    }

    fn deregister(&self, task: &Task, park: u64) {
        match self.target {
            BranchTarget::Operation(operation) => {
                let registration = self.registration.take();
                self.consumed
                    .set(operation.deregister(task, park, registration));
            }
            // Every waiter of a direction is woken at once: nothing to pass on. An entry left
            // behind is stale (its park number is over) and dropped by the next wait there.
            BranchTarget::Io(..) => drop(self.io.take()),
            BranchTarget::Deadline(_) => {}
        }
    }

    fn pass_on(&self) {
        if let BranchTarget::Operation(operation) = self.target {
            operation.pass_on();
        }
    }

    fn hand_off(&self) -> bool {
        match self.target {
            BranchTarget::Operation(operation) => {
                operation.kind() == OperationKind::Recv && operation.hand_off()
            }
            _ => false,
        }
    }
}

/// Whether `source` is ready in `interest`'s direction: the cached readiness, confirmed by
/// the kernel (the cache is optimistic). An fd that cannot be asked, or is closed, counts as
/// ready: the operation will report the error at once.
fn io_is_ready(source: &Source, interest: Interest) -> bool {
    let Ok(io) = source.registered_io("Select::select") else {
        return true;
    };
    if io.is_closed() {
        return true;
    }
    if !io.is_ready(interest) {
        return false;
    }
    match crate::sys::is_ready_now(io.fd, interest == Interest::Writable) {
        Ok(true) | Err(_) => true,
        Ok(false) => {
            io.clear_readiness(interest);
            false
        }
    }
}

/// Takes a parked select's registrations out when its park ends, however it ends.
struct Departure<'b, 'a> {
    branches: &'b [Branch<'a>],
    parked: Cell<Option<(Rc<Task>, u64)>>,
}

impl Drop for Departure<'_, '_> {
    fn drop(&mut self) {
        if let Some((task, park)) = self.parked.take() {
            for branch in self.branches {
                branch.deregister(&task, park);
            }
        }
    }
}

/// A uniformly random number below `bound` (at least 2): from std's per-thread random keys,
/// which greenweave keeps no state for. Only drawn when several operations are ready at once.
fn random_below(bound: usize) -> usize {
    let random = RandomState::new().build_hasher().finish();
    // Lemire's multiply-shift: uniform enough for a handful of operations.
    ((u128::from(random) * bound as u128) >> 64) as usize
}

/// The operation a select chose; complete it with the method that matches it.
///
/// [`index`](SelectedOperation::index) says which one it is. A receive is completed with
/// [`recv`](SelectedOperation::recv), a send with [`send`](SelectedOperation::send) (which
/// takes the message only now), a join with [`join`](SelectedOperation::join); readiness and
/// deadlines need nothing more.
///
/// The completion does not wait when called before this green thread parks again (nothing
/// else runs in between). If the caller parks first, another green thread may take the
/// message or the room meanwhile, and the completion then waits as the plain operation does.
///
/// # Panics
/// Dropped without completing a selected receive or send: the select may have consumed the
/// wake-up meant for another green thread waiting on that channel (crossbeam panics too). Not
/// while the green thread is already panicking.
#[must_use = "a selected receive or send must be completed"]
pub struct SelectedOperation {
    index: usize,
    kind: Selected,
    identity: *const (),
    completed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Selected {
    Operation(OperationKind),
    /// Readiness or a deadline: nothing to complete.
    Other,
}

impl SelectedOperation {
    /// The index of the operation, as the `Select` method that added it returned.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Completes the selected receive: takes the message (or reports the disconnection).
    ///
    /// # Panics
    /// If the selected operation is not a receive from `receiver`'s channel.
    pub fn recv<R: ReceiveEnd>(mut self, receiver: &R) -> Result<R::Message, RecvError> {
        self.check("recv", receiver.operand(), |kind| {
            kind == OperationKind::Recv
        });
        self.completed = true;
        receiver.recv_selected()
    }

    /// Completes the selected send with `message`. On an unbounded or bounded channel it does
    /// not wait. On a rendezvous channel (`sync_channel(0)`) it waits, as `SyncSender::send`
    /// does, until the receiver has taken the message: the select chose it because a receiver
    /// was waiting, so that is usually at once, but a receiver that was itself waiting in a
    /// select may have taken another operation.
    ///
    /// # Errors
    /// The receiver is gone: the message comes back.
    ///
    /// # Panics
    /// If the selected operation is not a send on `sender`'s channel.
    pub fn send<S: SendEnd>(
        mut self,
        sender: &S,
        message: S::Message,
    ) -> Result<(), SendError<S::Message>> {
        self.check("send", sender.operand(), |kind| kind == OperationKind::Send);
        self.completed = true;
        sender.send_selected(message)
    }

    /// Completes the selected join: the green thread's result, as
    /// [`JoinHandle::join`](crate::thread::JoinHandle::join) returns it (without waiting).
    ///
    /// # Panics
    /// If the selected operation is not the join of `handle`'s green thread.
    pub fn join<T>(mut self, handle: JoinHandle<T>) -> Result<T, JoinError> {
        self.check("join", handle.operand(), |kind| {
            matches!(kind, OperationKind::Join(_))
        });
        self.completed = true;
        handle.join()
    }

    fn check(&self, method: &str, operand: Operand<'_>, expected: impl Fn(OperationKind) -> bool) {
        let matches = match (self.kind, operand.kind()) {
            (Selected::Operation(kind), Some(given)) => {
                expected(kind) && expected(given) && std::ptr::eq(self.identity, operand.identity)
            }
            _ => false,
        };
        assert!(
            matches,
            "greenweave: SelectedOperation::{method} was given another operation than the one \
             selected (index {}, {})",
            self.index,
            self.kind.describe()
        );
    }
}

impl Selected {
    fn describe(self) -> &'static str {
        match self {
            Selected::Operation(OperationKind::Recv) => "a receive",
            Selected::Operation(OperationKind::Send) => "a send",
            Selected::Operation(OperationKind::Join(_)) => "a join",
            Selected::Other => "a readiness or a deadline, which needs no completion",
        }
    }
}

impl Drop for SelectedOperation {
    fn drop(&mut self) {
        let must_complete = matches!(
            self.kind,
            Selected::Operation(OperationKind::Recv | OperationKind::Send)
        );
        if must_complete && !self.completed && !std::thread::panicking() {
            panic!(
                "greenweave: a selected {} (index {}) was dropped without being completed: call \
                 SelectedOperation::{} with its channel (the select may have taken the wake-up \
                 of another green thread waiting on it)",
                if self.kind == Selected::Operation(OperationKind::Recv) {
                    "receive"
                } else {
                    "send"
                },
                self.index,
                if self.kind == Selected::Operation(OperationKind::Recv) {
                    "recv"
                } else {
                    "send"
                },
            );
        }
    }
}

impl fmt::Debug for SelectedOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SelectedOperation")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// [`Select::try_select`] found no operation ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrySelectError;

impl fmt::Display for TrySelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no operation of the select was ready")
    }
}

impl std::error::Error for TrySelectError {}

/// [`Select::select_timeout`] or [`Select::select_deadline`] found no operation ready in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectTimeoutError;

impl fmt::Display for SelectTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("timed out waiting for an operation of the select")
    }
}

impl std::error::Error for SelectTimeoutError {}

/// [`Select::try_ready`] found no operation ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TryReadyError;

impl fmt::Display for TryReadyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no operation of the select was ready")
    }
}

impl std::error::Error for TryReadyError {}

/// [`Select::ready_timeout`] or [`Select::ready_deadline`] found no operation ready in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyTimeoutError;

impl fmt::Display for ReadyTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("timed out waiting for an operation of the select to become ready")
    }
}

impl std::error::Error for ReadyTimeoutError {}

/// Waits for the first of several operations and runs the branch of the one taken: Go's
/// `select`, over [`Select`](crate::sync::select::Select).
///
/// Branches, separated by commas (optional after a block):
///
/// | branch | taken when | binds |
/// |---|---|---|
/// | `recv(rx) -> msg => body` | a message is there, or every sender is gone | `Result<T, RecvError>` |
/// | `send(tx, value) -> res => body` | the channel has room (or the receiver is gone) | `Result<(), SendError<T>>` |
/// | `join(handle) -> res => body` | the green thread has finished | `Result<T, JoinError>` |
/// | `readable(socket) => body` | the fd is readable | |
/// | `writable(socket) => body` | the fd is writable | |
/// | `timeout(duration) => body` | the duration has passed and nothing else is ready | |
/// | `deadline(instant) => body` | the instant has passed and nothing else is ready | |
/// | `default => body` | nothing is ready now: the select does not wait (it lets a select waiting to send on a rendezvous channel it receives from run first: see the [module](crate::sync::select) documentation) | |
///
/// Exactly one branch runs. Among the operations ready at once one is chosen at random
/// ([`select_biased!`](crate::select_biased!) takes the first one written instead); the
/// others lose nothing: `value` is evaluated only if its send is taken, and `handle` (a
/// variable) is moved only if its join is taken. `rx`, `tx` and `socket` are evaluated once,
/// and may be references. A branch body may `break`, `continue` or `return` as in a `match`.
///
/// ```
/// use std::time::Duration;
/// use greenweave::select;
/// use greenweave::sync::mpsc;
///
/// greenweave::run(|| {
///     let (numbers_tx, numbers) = mpsc::channel::<u32>();
///     let (words_tx, words) = mpsc::channel::<&str>();
///     let worker = greenweave::spawn(move || {
///         numbers_tx.send(1).unwrap();
///         words_tx.send("two").unwrap();
///         "worker done"
///     });
///     let mut seen = Vec::new();
///     while seen.len() < 2 {
///         select! {
///             // Err once the worker has gone and the channel is empty.
///             recv(numbers) -> n => if let Ok(n) = n { seen.push(format!("number {n}")) },
///             recv(words) -> w => if let Ok(w) = w { seen.push(format!("word {w}")) },
///             timeout(Duration::from_secs(5)) => panic!("nothing for 5 s"),
///         }
///     }
///     seen.sort();
///     assert_eq!(seen, ["number 1", "word two"]);
///
///     // `worker` is moved only if its branch is taken.
///     let line = select! {
///         join(worker) -> result => result.unwrap(),
///         timeout(Duration::from_secs(5)) => panic!("the worker never finished"),
///     };
///     let (results, results_rx) = mpsc::sync_channel::<&str>(1);
///     select! {
///         send(results, line) -> sent => sent.unwrap(),
///         default => unreachable!("the channel has room"),
///     }
///     assert_eq!(results_rx.recv(), Ok("worker done"));
/// });
/// ```
#[macro_export]
macro_rules! select {
    // Each branch is read in three steps: its head (`@branch`), its body (`@body`: a block,
    // with or without a comma after it, or an expression followed by a comma or the end), and
    // then it is added to the select (`@add`), which also appends its arm to the dispatch that
    // runs once the select has chosen. `$default` is `{}` until a default branch is read.
    (@branch $ctx:tt $dispatch:tt $default:tt recv($r:expr) -> $p:pat => $($rest:tt)*) => {
        $crate::select!(@body $ctx $dispatch $default (recv ($r) ($p)) $($rest)*)
    };
    (@branch $ctx:tt $dispatch:tt $default:tt
        send($s:expr, $m:expr) -> $p:pat => $($rest:tt)*) => {
        $crate::select!(@body $ctx $dispatch $default (send ($s) ($m) ($p)) $($rest)*)
    };
    (@branch $ctx:tt $dispatch:tt $default:tt join($h:expr) -> $p:pat => $($rest:tt)*) => {
        $crate::select!(@body $ctx $dispatch $default (join ($h) ($p)) $($rest)*)
    };
    (@branch $ctx:tt $dispatch:tt $default:tt readable($io:expr) => $($rest:tt)*) => {
        $crate::select!(@body $ctx $dispatch $default (readable ($io)) $($rest)*)
    };
    (@branch $ctx:tt $dispatch:tt $default:tt writable($io:expr) => $($rest:tt)*) => {
        $crate::select!(@body $ctx $dispatch $default (writable ($io)) $($rest)*)
    };
    (@branch $ctx:tt $dispatch:tt $default:tt timeout($d:expr) => $($rest:tt)*) => {
        $crate::select!(@body $ctx $dispatch $default (timeout ($d)) $($rest)*)
    };
    (@branch $ctx:tt $dispatch:tt $default:tt deadline($d:expr) => $($rest:tt)*) => {
        $crate::select!(@body $ctx $dispatch $default (deadline ($d)) $($rest)*)
    };
    (@branch $ctx:tt $dispatch:tt $default:tt default => $($rest:tt)*) => {
        $crate::select!(@body $ctx $dispatch $default (default) $($rest)*)
    };
    // The end: select (or, with a default branch, try without waiting) and dispatch.
    (@branch ($sel:ident, $op:ident) { $($dispatch:tt)* } {}) => {{
        let $op = $sel.select();
        $($dispatch)* { ::core::unreachable!() }
    }};
    (@branch ($sel:ident, $op:ident) { $($dispatch:tt)* } { $($default:tt)+ }) => {
        match $sel.try_select() {
            ::core::result::Result::Ok($op) => { $($dispatch)* { ::core::unreachable!() } }
            ::core::result::Result::Err(_) => { $($default)+ }
        }
    };
    (@branch $ctx:tt $dispatch:tt $default:tt $($rest:tt)+) => {
        ::core::compile_error!(::core::concat!(
            "select!: expected a branch (recv(rx) -> msg => .., send(tx, value) -> res => .., \
             join(handle) -> res => .., readable(io) => .., writable(io) => .., \
             timeout(duration) => .., deadline(instant) => .., default => ..), found `",
            ::core::stringify!($($rest)+),
            "`"
        ))
    };

    (@body $ctx:tt $dispatch:tt $default:tt $head:tt $body:block, $($rest:tt)*) => {
        $crate::select!(@add $ctx $dispatch $default $head ($body) $($rest)*)
    };
    (@body $ctx:tt $dispatch:tt $default:tt $head:tt $body:block $($rest:tt)*) => {
        $crate::select!(@add $ctx $dispatch $default $head ($body) $($rest)*)
    };
    (@body $ctx:tt $dispatch:tt $default:tt $head:tt $body:expr, $($rest:tt)*) => {
        $crate::select!(@add $ctx $dispatch $default $head ($body) $($rest)*)
    };
    (@body $ctx:tt $dispatch:tt $default:tt $head:tt $body:expr) => {
        $crate::select!(@add $ctx $dispatch $default $head ($body))
    };

    (@add ($sel:ident, $op:ident) { $($dispatch:tt)* } $default:tt
        (recv ($r:expr) ($p:pat)) ($($body:tt)*) $($rest:tt)*) => {{
        let __receiver = &$r;
        let __index = $sel.recv(__receiver);
        $crate::select!(@branch ($sel, $op) {
            $($dispatch)*
            if $op.index() == __index {
                let $p = $op.recv(__receiver);
                $($body)*
            } else
        } $default $($rest)*)
    }};
    (@add ($sel:ident, $op:ident) { $($dispatch:tt)* } $default:tt
        (send ($s:expr) ($m:expr) ($p:pat)) ($($body:tt)*) $($rest:tt)*) => {{
        let __sender = &$s;
        let __index = $sel.send(__sender);
        $crate::select!(@branch ($sel, $op) {
            $($dispatch)*
            if $op.index() == __index {
                let $p = $op.send(__sender, $m);
                $($body)*
            } else
        } $default $($rest)*)
    }};
    (@add ($sel:ident, $op:ident) { $($dispatch:tt)* } $default:tt
        (join ($h:expr) ($p:pat)) ($($body:tt)*) $($rest:tt)*) => {{
        let __index = $sel.join(&$h);
        $crate::select!(@branch ($sel, $op) {
            $($dispatch)*
            if $op.index() == __index {
                let $p = $op.join($h);
                $($body)*
            } else
        } $default $($rest)*)
    }};
    (@add ($sel:ident, $op:ident) { $($dispatch:tt)* } $default:tt
        (readable ($io:expr)) ($($body:tt)*) $($rest:tt)*) => {{
        let __index = $sel.readable(&$io);
        $crate::select!(@branch ($sel, $op) {
            $($dispatch)* if $op.index() == __index { $($body)* } else
        } $default $($rest)*)
    }};
    (@add ($sel:ident, $op:ident) { $($dispatch:tt)* } $default:tt
        (writable ($io:expr)) ($($body:tt)*) $($rest:tt)*) => {{
        let __index = $sel.writable(&$io);
        $crate::select!(@branch ($sel, $op) {
            $($dispatch)* if $op.index() == __index { $($body)* } else
        } $default $($rest)*)
    }};
    (@add ($sel:ident, $op:ident) { $($dispatch:tt)* } $default:tt
        (timeout ($d:expr)) ($($body:tt)*) $($rest:tt)*) => {{
        let __index = $sel.timeout($d);
        $crate::select!(@branch ($sel, $op) {
            $($dispatch)* if $op.index() == __index { $($body)* } else
        } $default $($rest)*)
    }};
    (@add ($sel:ident, $op:ident) { $($dispatch:tt)* } $default:tt
        (deadline ($d:expr)) ($($body:tt)*) $($rest:tt)*) => {{
        let __index = $sel.deadline($d);
        $crate::select!(@branch ($sel, $op) {
            $($dispatch)* if $op.index() == __index { $($body)* } else
        } $default $($rest)*)
    }};
    (@add $ctx:tt $dispatch:tt {} (default) ($($body:tt)*) $($rest:tt)*) => {
        $crate::select!(@branch $ctx $dispatch { $($body)* } $($rest)*)
    };
    (@add $ctx:tt $dispatch:tt $default:tt (default) $body:tt $($rest:tt)*) => {
        ::core::compile_error!("select! has more than one default branch")
    };

    // The entry, last: the internal rules above start with `@`.
    () => {
        ::core::compile_error!("select! needs at least one branch")
    };
    ($($branches:tt)+) => {{
        let mut __select = $crate::sync::select::Select::new();
        $crate::select!(@branch (__select, __operation) {} {} $($branches)+)
    }};
}

/// [`select!`](crate::select!) with a priority order: among the operations ready at once, the
/// branch written first is taken, instead of one at random (crossbeam's `select_biased!`, Go
/// has none). Same branches, same rules, over [`Select::new_biased`].
///
/// An operation that is always ready starves the branches written after it; use it for a
/// priority (a shutdown signal before the work queue), not for fairness.
///
/// ```
/// use greenweave::select_biased;
/// use greenweave::sync::mpsc;
///
/// greenweave::run(|| {
///     let (quit_tx, quit) = mpsc::channel::<()>();
///     let (jobs_tx, jobs) = mpsc::channel::<u32>();
///     jobs_tx.send(1).unwrap();
///     quit_tx.send(()).unwrap();
///     let stopped = select_biased! {
///         recv(quit) -> _ => true, // written first: wins while both are ready
///         recv(jobs) -> _ => false,
///     };
///     assert!(stopped);
///     assert_eq!(jobs.try_recv(), Ok(1)); // the job was left in its channel
/// });
/// ```
#[macro_export]
macro_rules! select_biased {
    () => {
        ::core::compile_error!("select_biased! needs at least one branch")
    };
    ($($branches:tt)+) => {{
        let mut __select = $crate::sync::select::Select::new_biased();
        $crate::select!(@branch (__select, __operation) {} {} $($branches)+)
    }};
}
