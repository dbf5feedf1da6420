//! Property test over every channel kind (unbounded, bounded, rendezvous, oneshot, and an
//! unbounded one fed by a remote sender on another OS thread): several green threads send,
//! receive, give up by deadline or `time::timeout`, and cancel each other at random, and every
//! value sent is received exactly once or handed back to its sender, never both, never neither.
//!
//! Precisely, for each value (a token that counts its drops):
//! - it is dropped exactly once, and received at most once;
//! - a send that returned `Ok` was received (the test drains the channel at the end);
//! - a send that failed (`Err` handing the value back, or a `time::timeout` that expired
//!   around it) was not received, ever;
//! - a send whose green thread was cancelled during it was received or dropped, not both.
//!
//! About 100k operations in all on x86_64; half as many under qemu (aarch64), where everything
//! runs slower. `GREENWEAVE_CHANNEL_PROPERTY_CASES` sets the number of cases.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use greenweave::sync::{mpsc, oneshot};
use greenweave::thread::{self, JoinHandle};
use greenweave::time::timeout;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// Cases by default: about 100k operations on x86_64 (scripts average ~320 operations).
#[cfg(not(target_arch = "aarch64"))]
const DEFAULT_CASES: u32 = 320;
#[cfg(target_arch = "aarch64")]
const DEFAULT_CASES: u32 = 160;

fn cases() -> u32 {
    std::env::var("GREENWEAVE_CHANNEL_PROPERTY_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Unbounded,
    Bounded(usize),
    Rendezvous,
    Oneshot,
    /// Unbounded, with another OS thread sending this many values through a remote sender.
    Remote(u32),
}

/// How long a timed operation may wait.
#[derive(Clone, Copy, Debug)]
enum Limit {
    /// Already over: the operation gives up at its first park.
    Zero,
    Short,
}

impl Limit {
    fn duration(self) -> Duration {
        match self {
            Limit::Zero => Duration::ZERO,
            Limit::Short => Duration::from_micros(200),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum SendOp {
    Send,
    TrySend,
    /// `send` inside a `time::timeout`.
    SendWithin(Limit),
    Yield,
    /// Cancels the green thread with this number (modulo their count; maybe itself).
    Cancel(usize),
}

#[derive(Clone, Copy, Debug)]
enum RecvOp {
    Recv,
    TryRecv,
    RecvTimeout(Limit),
    /// `recv` inside a `time::timeout`.
    RecvWithin(Limit),
    Yield,
    Cancel(usize),
}

#[derive(Clone, Debug)]
struct Case {
    kind: Kind,
    senders: Vec<Vec<SendOp>>,
    receivers: Vec<Vec<RecvOp>>,
}

impl Case {
    fn operations(&self) -> usize {
        let remote = match self.kind {
            Kind::Remote(count) => count as usize,
            _ => 0,
        };
        self.senders.iter().map(Vec::len).sum::<usize>()
            + self.receivers.iter().map(Vec::len).sum::<usize>()
            + remote
    }
}

fn limit() -> impl Strategy<Value = Limit> {
    prop_oneof![3 => Just(Limit::Zero), 1 => Just(Limit::Short)]
}

fn send_op() -> impl Strategy<Value = SendOp> {
    prop_oneof![
        8 => Just(SendOp::Send),
        3 => Just(SendOp::TrySend),
        3 => limit().prop_map(SendOp::SendWithin),
        3 => Just(SendOp::Yield),
        1 => (0..8usize).prop_map(SendOp::Cancel),
    ]
}

fn recv_op() -> impl Strategy<Value = RecvOp> {
    prop_oneof![
        8 => Just(RecvOp::Recv),
        3 => Just(RecvOp::TryRecv),
        3 => limit().prop_map(RecvOp::RecvTimeout),
        3 => limit().prop_map(RecvOp::RecvWithin),
        3 => Just(RecvOp::Yield),
        1 => (0..8usize).prop_map(RecvOp::Cancel),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let kind = prop_oneof![
        Just(Kind::Unbounded),
        (1..4usize).prop_map(Kind::Bounded),
        Just(Kind::Rendezvous),
        Just(Kind::Oneshot),
        (1..200u32).prop_map(Kind::Remote),
    ];
    (kind, 1..=4usize, 1..=3usize).prop_flat_map(|(kind, senders, receivers)| {
        // A oneshot has one sender and one receiver.
        let (senders, receivers) = match kind {
            Kind::Oneshot => (1, 1),
            _ => (senders, receivers),
        };
        (
            vec(vec(send_op(), 0..150), senders),
            vec(vec(recv_op(), 0..150), receivers),
        )
            .prop_map(move |(senders, receivers)| Case {
                kind,
                senders,
                receivers,
            })
    })
}

// ---------------------------------------------------------------------------------------------
// The values and the ledger
// ---------------------------------------------------------------------------------------------

/// A value sent through a channel: its number, and the run's drop counts (shared with the
/// remote sender's OS thread).
#[derive(Debug)]
struct Token {
    id: usize,
    drops: Arc<Vec<AtomicU32>>,
}

impl Drop for Token {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::Relaxed);
    }
}

/// What the send of a value reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    /// The send did not return: its green thread was cancelled during it.
    Unwound,
    Ok,
    /// It failed and handed the value back.
    HandedBack,
    /// The `time::timeout` around it expired.
    TimedOut,
}

struct Ledger {
    drops: Arc<Vec<AtomicU32>>,
    sent: Vec<Sent>,
    received: Vec<u32>,
    /// Operations completed, so the driver can tell when every green thread is stuck.
    progress: u64,
}

impl Ledger {
    fn new(capacity: usize) -> Ledger {
        Ledger {
            drops: Arc::new((0..capacity).map(|_| AtomicU32::new(0)).collect()),
            sent: Vec::new(),
            received: vec![0; capacity],
            progress: 0,
        }
    }

    /// A new value, marked as in a send that has not returned yet.
    fn token(&mut self) -> Token {
        let id = self.sent.len();
        self.sent.push(Sent::Unwound);
        Token {
            id,
            drops: self.drops.clone(),
        }
    }

    fn sent(&mut self, id: usize, outcome: Sent) {
        self.sent[id] = outcome;
        self.progress += 1;
    }

    fn received(&mut self, token: Token) {
        self.received[token.id] += 1;
        self.progress += 1;
    }

    fn check(&self, case: &Case) {
        let context = || format!("in {case:?}");
        for (id, &sent) in self.sent.iter().enumerate() {
            let drops = self.drops[id].load(Ordering::Relaxed);
            let received = self.received[id];
            assert_eq!(
                drops,
                1,
                "value {id} ({sent:?}) dropped {drops} times {}",
                context()
            );
            match sent {
                Sent::Ok => assert_eq!(
                    received,
                    1,
                    "value {id} sent Ok received {received} times {}",
                    context()
                ),
                Sent::HandedBack | Sent::TimedOut => assert_eq!(
                    received,
                    0,
                    "value {id} whose send failed ({sent:?}) was received {}",
                    context()
                ),
                Sent::Unwound => assert!(
                    received <= 1,
                    "value {id} of a cancelled send received {received} times {}",
                    context()
                ),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The ends, and one operation on each
// ---------------------------------------------------------------------------------------------

enum SenderEnd {
    Unbounded(mpsc::Sender<Token>),
    Bounded(mpsc::SyncSender<Token>),
    /// `None` once it has sent.
    Oneshot(Option<oneshot::Sender<Token>>),
}

impl SenderEnd {
    /// Whether it can still send (a oneshot sends once).
    fn is_spent(&self) -> bool {
        matches!(self, SenderEnd::Oneshot(None))
    }

    fn send(&mut self, token: Token) -> Result<(), Token> {
        match self {
            SenderEnd::Unbounded(tx) => tx.send(token).map_err(|mpsc::SendError(token)| token),
            SenderEnd::Bounded(tx) => tx.send(token).map_err(|mpsc::SendError(token)| token),
            SenderEnd::Oneshot(tx) => tx.take().expect("not spent").send(token),
        }
    }

    fn try_send(&mut self, token: Token) -> Result<(), Token> {
        match self {
            SenderEnd::Bounded(tx) => tx.try_send(token).map_err(|error| match error {
                mpsc::TrySendError::Full(token) | mpsc::TrySendError::Disconnected(token) => token,
            }),
            _ => self.send(token),
        }
    }
}

#[derive(Clone)]
enum ReceiverEnd {
    Mpsc(Rc<mpsc::Receiver<Token>>),
    Oneshot(Rc<RefCell<oneshot::Receiver<Token>>>),
}

impl ReceiverEnd {
    /// One receive as `op` says; `Some` with the value if it got one.
    fn receive(&self, op: RecvOp) -> Option<Token> {
        match (self, op) {
            (ReceiverEnd::Mpsc(rx), RecvOp::Recv) => rx.recv().ok(),
            (ReceiverEnd::Mpsc(rx), RecvOp::TryRecv) => rx.try_recv().ok(),
            (ReceiverEnd::Mpsc(rx), RecvOp::RecvTimeout(limit)) => {
                rx.recv_timeout(limit.duration()).ok()
            }
            (ReceiverEnd::Mpsc(rx), RecvOp::RecvWithin(limit)) => {
                timeout(limit.duration(), || rx.recv()).ok()?.ok()
            }
            (ReceiverEnd::Oneshot(rx), RecvOp::Recv) => rx.borrow().recv().ok(),
            (ReceiverEnd::Oneshot(rx), RecvOp::TryRecv) => rx.borrow_mut().try_recv().ok(),
            (ReceiverEnd::Oneshot(rx), RecvOp::RecvTimeout(limit)) => {
                rx.borrow_mut().recv_timeout(limit.duration()).ok()
            }
            (ReceiverEnd::Oneshot(rx), RecvOp::RecvWithin(limit)) => {
                timeout(limit.duration(), || rx.borrow().recv()).ok()?.ok()
            }
            (_, RecvOp::Yield | RecvOp::Cancel(_)) => unreachable!("not a receive"),
        }
    }

    /// A value if one is there, without parking (for the driver; `None` also while a green
    /// thread holds the oneshot receiver).
    fn try_take(&self) -> Option<Token> {
        match self {
            ReceiverEnd::Mpsc(rx) => rx.try_recv().ok(),
            ReceiverEnd::Oneshot(rx) => rx.try_borrow_mut().ok()?.try_recv().ok(),
        }
    }
}

type Handles = Rc<RefCell<Vec<JoinHandle<()>>>>;

fn cancel(handles: &Handles, target: usize) {
    let handles = handles.borrow();
    handles[target % handles.len()].cancel();
}

fn run_sender(ops: Vec<SendOp>, mut end: SenderEnd, ledger: Rc<RefCell<Ledger>>, handles: Handles) {
    for op in ops {
        match op {
            SendOp::Yield => thread::yield_now(),
            SendOp::Cancel(target) => cancel(&handles, target),
            _ if end.is_spent() => {}
            SendOp::Send | SendOp::TrySend => {
                let token = ledger.borrow_mut().token();
                let id = token.id;
                let sent = match op {
                    SendOp::Send => end.send(token),
                    _ => end.try_send(token),
                };
                let outcome = if sent.is_ok() {
                    Sent::Ok
                } else {
                    Sent::HandedBack
                };
                ledger.borrow_mut().sent(id, outcome);
            }
            SendOp::SendWithin(limit) => {
                let token = ledger.borrow_mut().token();
                let id = token.id;
                let outcome = match timeout(limit.duration(), || end.send(token)) {
                    Ok(Ok(())) => Sent::Ok,
                    Ok(Err(_)) => Sent::HandedBack,
                    Err(_) => Sent::TimedOut,
                };
                ledger.borrow_mut().sent(id, outcome);
            }
        }
    }
}

fn run_receiver(ops: Vec<RecvOp>, end: ReceiverEnd, ledger: Rc<RefCell<Ledger>>, handles: Handles) {
    for op in ops {
        match op {
            RecvOp::Yield => thread::yield_now(),
            RecvOp::Cancel(target) => cancel(&handles, target),
            _ => {
                let got = end.receive(op);
                let mut ledger = ledger.borrow_mut();
                match got {
                    Some(token) => ledger.received(token),
                    None => ledger.progress += 1,
                }
            }
        }
    }
}

/// Runs one case in its own runtime and checks the ledger.
fn run(case: &Case) {
    let capacity = case.operations();
    let ledger = Rc::new(RefCell::new(Ledger::new(capacity)));
    let inner = ledger.clone();
    let case_copy = case.clone();
    greenweave::run(move || drive(case_copy, inner));
    Rc::try_unwrap(ledger)
        .ok()
        .expect("the runtime let go of the ledger")
        .into_inner()
        .check(case);
}

fn drive(case: Case, ledger: Rc<RefCell<Ledger>>) {
    let (senders, receiver, remote): (Vec<SenderEnd>, ReceiverEnd, _) = match case.kind {
        Kind::Unbounded | Kind::Remote(_) => {
            let (tx, rx) = mpsc::channel();
            let remote = match case.kind {
                Kind::Remote(count) => Some((tx.remote(), count)),
                _ => None,
            };
            let senders = case
                .senders
                .iter()
                .map(|_| SenderEnd::Unbounded(tx.clone()));
            (senders.collect(), ReceiverEnd::Mpsc(Rc::new(rx)), remote)
        }
        Kind::Bounded(_) | Kind::Rendezvous => {
            let bound = match case.kind {
                Kind::Bounded(bound) => bound,
                _ => 0,
            };
            let (tx, rx) = mpsc::sync_channel(bound);
            let senders = case.senders.iter().map(|_| SenderEnd::Bounded(tx.clone()));
            (senders.collect(), ReceiverEnd::Mpsc(Rc::new(rx)), None)
        }
        Kind::Oneshot => {
            let (tx, rx) = oneshot::channel();
            let senders = vec![SenderEnd::Oneshot(Some(tx))];
            (
                senders,
                ReceiverEnd::Oneshot(Rc::new(RefCell::new(rx))),
                None,
            )
        }
    };

    // The remote values are numbered first, so the other OS thread needs no ledger.
    let remote_thread = remote.map(|(tx, count)| {
        let tokens: Vec<Token> = (0..count).map(|_| ledger.borrow_mut().token()).collect();
        for token in &tokens {
            ledger.borrow_mut().sent(token.id, Sent::Ok);
        }
        std::thread::spawn(move || {
            for (n, token) in tokens.into_iter().enumerate() {
                tx.send(token)
                    .expect("the receiver outlives the remote sender");
                if n % 16 == 0 {
                    std::thread::yield_now();
                }
            }
        })
    });

    let handles: Handles = Rc::new(RefCell::new(Vec::new()));
    for (ops, end) in case.senders.iter().cloned().zip(senders) {
        let (ledger, handles2) = (ledger.clone(), handles.clone());
        let handle = greenweave::spawn(move || run_sender(ops, end, ledger, handles2));
        handles.borrow_mut().push(handle);
    }
    for ops in case.receivers.iter().cloned() {
        let (end, ledger, handles2) = (receiver.clone(), ledger.clone(), handles.clone());
        let handle = greenweave::spawn(move || run_receiver(ops, end, ledger, handles2));
        handles.borrow_mut().push(handle);
    }

    // Let them run. When a round makes no progress, they may wait for a timer or for the other
    // OS thread: sleep, so the scheduler's ready queue empties and it waits in epoll (a
    // wake-up sent when the last remote sender drops is only seen there). When several rounds
    // make none, every green thread may be parked on a full channel or on a sender waiting for
    // the receiver: take a value (as one more receiver) so they can go on.
    let mut stalled = 0;
    while !handles.borrow().iter().all(JoinHandle::is_finished) {
        let before = ledger.borrow().progress;
        thread::yield_now();
        if ledger.borrow().progress == before {
            stalled += 1;
            thread::sleep(Duration::from_micros(20));
            if stalled >= 3
                && let Some(token) = receiver.try_take()
            {
                ledger.borrow_mut().received(token);
                stalled = 0;
            }
        } else {
            stalled = 0;
        }
    }
    for handle in handles.take() {
        // Finished: returned, or cancelled (a cancelled one's result is `Cancelled`).
        if let Err(error) = handle.join() {
            assert!(error.is_cancelled(), "a green thread panicked: {error}");
        }
    }
    if let Some(remote) = remote_thread {
        remote.join().expect("the remote sender's thread");
    }
    // Whatever is still in the channel is received now.
    while let Some(token) = receiver.try_take() {
        ledger.borrow_mut().received(token);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        rng_seed: RngSeed::Fixed(0x6368_616e_6e65_6c73),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_value_sent_on_any_channel_is_received_once_or_handed_back_never_both(
        case in case()
    ) {
        run(&case);
    }
}
