//! Property test of `sync::shared` across two OS threads: green threads of one runtime send
//! (waiting, trying, under `time::timeout`), green threads of a runtime on another OS thread
//! receive (waiting, trying, with `recv_timeout`, under `time::timeout`), both sides yield and
//! cancel their own green threads at random, on an unbounded, a bounded and a rendezvous
//! channel; and every value is received exactly once or handed back to its sender, never
//! both, never neither.
//!
//! Precisely, for each value (a token that counts its drops):
//! - it is dropped exactly once, and received at most once;
//! - a send that returned `Ok` was received (the receiving side drains the channel at the end);
//! - a send that failed (`Err` handing the value back, or a `time::timeout` that expired
//!   around it) was not received, ever;
//! - a send whose green thread was cancelled during it was received or dropped, not both.
//!
//! `GREENWEAVE_SHARED_PROPERTY_CASES` sets the number of cases.

use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use greenweave::sync::shared::{self, SendError, TrySendError};
use greenweave::thread::{self, JoinHandle};
use greenweave::time::timeout;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

#[cfg(not(target_arch = "aarch64"))]
const DEFAULT_CASES: u32 = 96;
#[cfg(target_arch = "aarch64")]
const DEFAULT_CASES: u32 = 32;

fn cases() -> u32 {
    std::env::var("GREENWEAVE_SHARED_PROPERTY_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Unbounded,
    Bounded(usize),
    Rendezvous,
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
    /// Cancels the sending green thread with this number (modulo their count; maybe itself).
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
    ];
    (kind, 1..=4usize, 1..=3usize).prop_flat_map(|(kind, senders, receivers)| {
        (
            vec(vec(send_op(), 0..120), senders),
            vec(vec(recv_op(), 0..120), receivers),
        )
            .prop_map(move |(senders, receivers)| Case {
                kind,
                senders,
                receivers,
            })
    })
}

/// A value sent through the channel: its number, and the run's drop counts.
#[derive(Debug)]
struct Token {
    id: usize,
    drops: Arc<Vec<AtomicU32>>,
}

impl Drop for Token {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::SeqCst);
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

/// Shared by the two OS threads.
struct Ledger {
    drops: Arc<Vec<AtomicU32>>,
    sent: Mutex<Vec<Sent>>,
    received: Vec<AtomicU32>,
}

impl Ledger {
    fn new(capacity: usize) -> Ledger {
        Ledger {
            drops: Arc::new((0..capacity).map(|_| AtomicU32::new(0)).collect()),
            sent: Mutex::new(Vec::new()),
            received: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// A new value, marked as in a send that has not returned yet.
    fn token(&self) -> Token {
        let mut sent = self.sent.lock().unwrap();
        let id = sent.len();
        sent.push(Sent::Unwound);
        Token {
            id,
            drops: self.drops.clone(),
        }
    }

    fn sent(&self, id: usize, outcome: Sent) {
        self.sent.lock().unwrap()[id] = outcome;
    }

    fn received(&self, token: Token) {
        self.received[token.id].fetch_add(1, Ordering::SeqCst);
    }

    fn check(&self, case: &Case) {
        let context = || format!("in {case:?}");
        for (id, &sent) in self.sent.lock().unwrap().iter().enumerate() {
            let drops = self.drops[id].load(Ordering::SeqCst);
            let received = self.received[id].load(Ordering::SeqCst);
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

enum SenderEnd {
    Unbounded(shared::Sender<Token>),
    Bounded(shared::SyncSender<Token>),
}

impl SenderEnd {
    fn send(&self, token: Token) -> Result<(), Token> {
        match self {
            SenderEnd::Unbounded(tx) => tx.send(token).map_err(|SendError(token)| token),
            SenderEnd::Bounded(tx) => tx.send(token).map_err(|SendError(token)| token),
        }
    }

    fn try_send(&self, token: Token) -> Result<(), Token> {
        match self {
            SenderEnd::Bounded(tx) => tx.try_send(token).map_err(|error| match error {
                TrySendError::Full(token) | TrySendError::Disconnected(token) => token,
            }),
            SenderEnd::Unbounded(_) => self.send(token),
        }
    }
}

type Handles = Rc<std::cell::RefCell<Vec<JoinHandle<()>>>>;

fn cancel(handles: &Handles, target: usize) {
    let handles = handles.borrow();
    handles[target % handles.len()].cancel();
}

fn run_sender(ops: Vec<SendOp>, end: SenderEnd, ledger: Arc<Ledger>, handles: Handles) {
    for op in ops {
        match op {
            SendOp::Yield => thread::yield_now(),
            SendOp::Cancel(target) => cancel(&handles, target),
            SendOp::Send | SendOp::TrySend => {
                let token = ledger.token();
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
                ledger.sent(id, outcome);
            }
            SendOp::SendWithin(limit) => {
                let token = ledger.token();
                let id = token.id;
                let outcome = match timeout(limit.duration(), || end.send(token)) {
                    Ok(Ok(())) => Sent::Ok,
                    Ok(Err(_)) => Sent::HandedBack,
                    Err(_) => Sent::TimedOut,
                };
                ledger.sent(id, outcome);
            }
        }
    }
}

fn run_receiver(
    ops: Vec<RecvOp>,
    rx: Rc<shared::Receiver<Token>>,
    ledger: Arc<Ledger>,
    handles: Handles,
) {
    for op in ops {
        let got = match op {
            RecvOp::Yield => {
                thread::yield_now();
                None
            }
            RecvOp::Cancel(target) => {
                cancel(&handles, target);
                None
            }
            RecvOp::Recv => rx.recv().ok(),
            RecvOp::TryRecv => rx.try_recv().ok(),
            RecvOp::RecvTimeout(limit) => rx.recv_timeout(limit.duration()).ok(),
            RecvOp::RecvWithin(limit) => timeout(limit.duration(), || rx.recv())
                .ok()
                .and_then(Result::ok),
        };
        if let Some(token) = got {
            ledger.received(token);
        }
    }
}

/// Waits for every green thread of `handles`, each finished or cancelled. The list stays
/// whole until they all have (their scripts cancel each other through it).
fn join_all(handles: &Handles) {
    while !handles.borrow().iter().all(JoinHandle::is_finished) {
        thread::sleep(Duration::from_micros(50));
    }
    for handle in handles.take() {
        if let Err(error) = handle.join() {
            assert!(error.is_cancelled(), "a green thread panicked: {error}");
        }
    }
}

fn run(case: &Case) {
    // At most one value per send operation.
    let capacity = case.senders.iter().map(Vec::len).sum();
    let ledger = Arc::new(Ledger::new(capacity));
    let (senders, rx): (Vec<SenderEnd>, _) = match case.kind {
        Kind::Unbounded => {
            let (tx, rx) = shared::channel();
            let senders = case
                .senders
                .iter()
                .map(|_| SenderEnd::Unbounded(tx.clone()));
            (senders.collect(), rx)
        }
        Kind::Bounded(_) | Kind::Rendezvous => {
            let bound = match case.kind {
                Kind::Bounded(bound) => bound,
                _ => 0,
            };
            let (tx, rx) = shared::sync_channel(bound);
            let senders = case.senders.iter().map(|_| SenderEnd::Bounded(tx.clone()));
            (senders.collect(), rx)
        }
    };

    let sending_ledger = ledger.clone();
    let scripts = case.senders.clone();
    // The sending runtime: its green threads end when their scripts do (a send waiting for
    // room or for a rendezvous waits for the receiving side, which drains at the end), and
    // each drops its end then, so the receiving side sees the disconnection.
    let sending = std::thread::spawn(move || {
        greenweave::run(move || {
            let handles: Handles = Rc::default();
            for (ops, end) in scripts.into_iter().zip(senders) {
                let (ledger, handles2) = (sending_ledger.clone(), handles.clone());
                let handle = greenweave::spawn(move || run_sender(ops, end, ledger, handles2));
                handles.borrow_mut().push(handle);
            }
            join_all(&handles);
        })
    });

    let receiving_ledger = ledger.clone();
    let scripts = case.receivers.clone();
    greenweave::run(move || {
        let rx = Rc::new(rx);
        let handles: Handles = Rc::default();
        for ops in scripts {
            let (rx, ledger, handles2) = (rx.clone(), receiving_ledger.clone(), handles.clone());
            let handle = greenweave::spawn(move || run_receiver(ops, rx, ledger, handles2));
            handles.borrow_mut().push(handle);
        }
        join_all(&handles);
        // Whatever is sent from now on, or is still there, is received here, until every
        // sender is gone.
        for token in rx.iter() {
            receiving_ledger.received(token);
        }
    });
    sending.join().expect("the sending runtime");
    ledger.check(case);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        rng_seed: RngSeed::Fixed(0x7368_6172_6564_2121),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_value_sent_across_os_threads_is_received_once_or_handed_back_never_both(
        case in case()
    ) {
        run(&case);
    }
}
