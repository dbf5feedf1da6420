//! Property test of `sync::select` over several channels at once (unbounded, bounded,
//! rendezvous): green threads that share every end send, receive and select over random
//! subsets of them (sends and receives mixed in one select), wait for ever, with a timeout
//! branch, with `select_timeout`, without waiting (`try_select`), or inside a `time::timeout`,
//! and cancel each other at random. Every value is received exactly once or handed back,
//! never both, never neither; and nothing is stuck (the driver ends every case).
//!
//! As in `tests/channel_property.rs`, for each value (a token that counts its drops):
//! - it is dropped exactly once, and received at most once;
//! - a send that returned `Ok` was received (the driver drains the channels at the end);
//! - a send that failed (`Err`, handing the value back) was not received;
//! - a send whose green thread was unwound during it was received or dropped, not both.
//!
//! A select's send makes its token only when that send is the operation chosen, so a send
//! that is not chosen has no value to lose. `GREENWEAVE_SELECT_PROPERTY_CASES` sets the number
//! of cases.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use greenweave::sync::mpsc;
use greenweave::sync::select::{Select, SelectedOperation};
use greenweave::thread::{self, JoinHandle};
use greenweave::time::timeout;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

#[cfg(not(target_arch = "aarch64"))]
const DEFAULT_CASES: u32 = 200;
#[cfg(target_arch = "aarch64")]
const DEFAULT_CASES: u32 = 100;

fn cases() -> u32 {
    std::env::var("GREENWEAVE_SELECT_PROPERTY_CASES")
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

/// How a select waits.
#[derive(Clone, Copy, Debug)]
enum How {
    Block,
    /// With a `timeout` branch of this many microseconds.
    TimeoutBranch(u64),
    SelectTimeout(u64),
    /// `try_select`: the default branch.
    Default,
    /// `select` inside `time::timeout`.
    Within(u64),
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Send(usize),
    Recv(usize),
    /// A select over sends on the channels in `sends` and receives from those in `recvs`
    /// (bit masks; never both empty).
    Select {
        sends: u8,
        recvs: u8,
        how: How,
    },
    Yield,
    /// Cancels the green thread with this number (modulo their count; maybe itself).
    Cancel(usize),
}

#[derive(Clone, Debug)]
struct Case {
    kinds: Vec<Kind>,
    threads: Vec<Vec<Op>>,
}

fn how() -> impl Strategy<Value = How> {
    prop_oneof![
        3 => Just(How::Block),
        2 => (0..300u64).prop_map(How::TimeoutBranch),
        2 => (0..300u64).prop_map(How::SelectTimeout),
        2 => Just(How::Default),
        2 => (0..300u64).prop_map(How::Within),
    ]
}

fn op(channels: usize) -> impl Strategy<Value = Op> {
    let all = (1u8 << channels) - 1;
    prop_oneof![
        3 => (0..channels).prop_map(Op::Send),
        3 => (0..channels).prop_map(Op::Recv),
        8 => (0..=all, 0..=all, how()).prop_map(move |(sends, recvs, how)| Op::Select {
            sends,
            recvs: if sends == 0 && recvs == 0 { 1 } else { recvs },
            how,
        }),
        2 => Just(Op::Yield),
        1 => (0..8usize).prop_map(Op::Cancel),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let kind = prop_oneof![
        Just(Kind::Unbounded),
        (1..3usize).prop_map(Kind::Bounded),
        Just(Kind::Rendezvous),
    ];
    (vec(kind, 1..=3), 2..=5usize).prop_flat_map(|(kinds, threads)| {
        let channels = kinds.len();
        vec(vec(op(channels), 0..60), threads).prop_map(move |threads| Case {
            kinds: kinds.clone(),
            threads,
        })
    })
}

// ---------------------------------------------------------------------------------------------
// The values and the ledger
// ---------------------------------------------------------------------------------------------

struct Token {
    id: usize,
    drops: Rc<RefCell<Vec<u32>>>,
}

impl Drop for Token {
    fn drop(&mut self) {
        self.drops.borrow_mut()[self.id] += 1;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    Unwound,
    Ok,
    HandedBack,
}

#[derive(Default)]
struct Ledger {
    drops: Rc<RefCell<Vec<u32>>>,
    sent: Vec<Sent>,
    received: Vec<u32>,
    progress: u64,
}

impl Ledger {
    fn token(&mut self) -> Token {
        let id = self.sent.len();
        self.sent.push(Sent::Unwound);
        self.received.push(0);
        self.drops.borrow_mut().push(0);
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
        let drops = self.drops.borrow();
        for (id, &sent) in self.sent.iter().enumerate() {
            let (dropped, received) = (drops[id], self.received[id]);
            assert_eq!(
                dropped, 1,
                "value {id} ({sent:?}) dropped {dropped} times in {case:?}"
            );
            match sent {
                Sent::Ok => assert_eq!(received, 1, "value {id} sent Ok in {case:?}"),
                Sent::HandedBack => assert_eq!(received, 0, "value {id} handed back in {case:?}"),
                Sent::Unwound => assert!(received <= 1, "value {id} unwound in {case:?}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The ends
// ---------------------------------------------------------------------------------------------

enum SenderEnd {
    Unbounded(mpsc::Sender<Token>),
    Bounded(mpsc::SyncSender<Token>),
}

impl SenderEnd {
    fn send(&self, token: Token) -> Result<(), Token> {
        match self {
            SenderEnd::Unbounded(tx) => tx.send(token),
            SenderEnd::Bounded(tx) => tx.send(token),
        }
        .map_err(|mpsc::SendError(token)| token)
    }

    fn add_to<'a>(&'a self, select: &mut Select<'a>) -> usize {
        match self {
            SenderEnd::Unbounded(tx) => select.send(tx),
            SenderEnd::Bounded(tx) => select.send(tx),
        }
    }

    fn complete(&self, operation: SelectedOperation, token: Token) -> Result<(), Token> {
        match self {
            SenderEnd::Unbounded(tx) => operation.send(tx, token),
            SenderEnd::Bounded(tx) => operation.send(tx, token),
        }
        .map_err(|mpsc::SendError(token)| token)
    }
}

struct Ends {
    senders: Vec<SenderEnd>,
    receivers: Vec<mpsc::Receiver<Token>>,
}

type Handles = Rc<RefCell<Vec<JoinHandle<()>>>>;

fn send_one(ledger: &RefCell<Ledger>, send: impl FnOnce(Token) -> Result<(), Token>) {
    let token = ledger.borrow_mut().token();
    let id = token.id;
    let outcome = match send(token) {
        Ok(()) => Sent::Ok,
        Err(_) => Sent::HandedBack,
    };
    ledger.borrow_mut().sent(id, outcome);
}

/// One select as `op` says; completes the chosen operation.
fn select_once(ends: &Ends, ledger: &RefCell<Ledger>, sends: u8, recvs: u8, how: How) {
    let mut select = Select::new();
    let mut branches = Vec::new(); // (index, Ok(sender) or Err(receiver))
    for channel in 0..ends.senders.len() {
        if sends & (1 << channel) != 0 {
            branches.push((ends.senders[channel].add_to(&mut select), Ok(channel)));
        }
        if recvs & (1 << channel) != 0 {
            branches.push((select.recv(&ends.receivers[channel]), Err(channel)));
        }
    }
    let micros = Duration::from_micros;
    let chosen = match how {
        How::Block => Some(select.select()),
        How::TimeoutBranch(us) => {
            let timeout_branch = select.timeout(micros(us));
            Some(select.select()).filter(|operation| operation.index() != timeout_branch)
        }
        How::SelectTimeout(us) => select.select_timeout(micros(us)).ok(),
        How::Default => select.try_select().ok(),
        How::Within(us) => timeout(micros(us), || select.select()).ok(),
    };
    let Some(operation) = chosen else {
        ledger.borrow_mut().progress += 1;
        return;
    };
    let &(_, end) = branches
        .iter()
        .find(|(index, _)| *index == operation.index())
        .expect("the chosen operation is one of the branches");
    match end {
        Ok(channel) => {
            send_one(ledger, |token| {
                ends.senders[channel].complete(operation, token)
            });
        }
        Err(channel) => match operation.recv(&ends.receivers[channel]) {
            Ok(token) => ledger.borrow_mut().received(token),
            Err(_) => ledger.borrow_mut().progress += 1,
        },
    }
}

fn run_thread(ops: Vec<Op>, ends: Rc<Ends>, ledger: Rc<RefCell<Ledger>>, handles: Handles) {
    for op in ops {
        match op {
            Op::Yield => thread::yield_now(),
            Op::Cancel(target) => {
                let handles = handles.borrow();
                handles[target % handles.len()].cancel();
            }
            Op::Send(channel) => send_one(&ledger, |token| ends.senders[channel].send(token)),
            Op::Recv(channel) => {
                let got = ends.receivers[channel].recv_timeout(Duration::from_micros(200));
                let mut ledger = ledger.borrow_mut();
                match got {
                    Ok(token) => ledger.received(token),
                    Err(_) => ledger.progress += 1,
                }
            }
            Op::Select { sends, recvs, how } => select_once(&ends, &ledger, sends, recvs, how),
        }
    }
}

fn run(case: &Case) {
    let ledger = Rc::new(RefCell::new(Ledger::default()));
    let inner = ledger.clone();
    let case_copy = case.clone();
    greenweave::run(move || drive(case_copy, inner));
    let ledger = Rc::try_unwrap(ledger)
        .ok()
        .expect("the runtime let go of the ledger")
        .into_inner();
    ledger.check(case);
}

fn drive(case: Case, ledger: Rc<RefCell<Ledger>>) {
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for kind in &case.kinds {
        match kind {
            Kind::Unbounded => {
                let (tx, rx) = mpsc::channel();
                senders.push(SenderEnd::Unbounded(tx));
                receivers.push(rx);
            }
            Kind::Bounded(bound) => {
                let (tx, rx) = mpsc::sync_channel(*bound);
                senders.push(SenderEnd::Bounded(tx));
                receivers.push(rx);
            }
            Kind::Rendezvous => {
                let (tx, rx) = mpsc::sync_channel(0);
                senders.push(SenderEnd::Bounded(tx));
                receivers.push(rx);
            }
        }
    }
    let ends = Rc::new(Ends { senders, receivers });
    let handles: Handles = Rc::new(RefCell::new(Vec::new()));
    for ops in case.threads.iter().cloned() {
        let (ends, ledger, handles2) = (ends.clone(), ledger.clone(), handles.clone());
        let handle = greenweave::spawn(move || run_thread(ops, ends, ledger, handles2));
        handles.borrow_mut().push(handle);
    }
    // Let them run. When rounds make no progress, every green thread may wait for room, for a
    // receiver, or for a message (the senders never all go, so a receive can wait for ever):
    // act as one more receiver, parking briefly on each channel (a parked receiver is what a
    // select's send on a rendezvous channel waits for); if that finds nothing, as one more
    // sender, without waiting.
    let mut stalled = 0;
    while !handles.borrow().iter().all(JoinHandle::is_finished) {
        let before = ledger.borrow().progress;
        thread::yield_now();
        if ledger.borrow().progress == before {
            stalled += 1;
            thread::sleep(Duration::from_micros(20));
            if stalled >= 3 {
                let mut took = false;
                for rx in &ends.receivers {
                    if let Ok(token) = rx.recv_timeout(Duration::from_micros(100)) {
                        ledger.borrow_mut().received(token);
                        took = true;
                    }
                }
                if !took {
                    for tx in &ends.senders {
                        let token = ledger.borrow_mut().token();
                        let id = token.id;
                        let sent = match tx {
                            SenderEnd::Unbounded(tx) => tx.send(token).is_ok(),
                            SenderEnd::Bounded(tx) => tx.try_send(token).is_ok(),
                        };
                        let outcome = if sent { Sent::Ok } else { Sent::HandedBack };
                        ledger.borrow_mut().sent(id, outcome);
                    }
                }
                stalled = 0;
            }
        } else {
            stalled = 0;
        }
    }
    for handle in handles.take() {
        if let Err(error) = handle.join() {
            assert!(error.is_cancelled(), "a green thread panicked: {error}");
        }
    }
    for rx in &ends.receivers {
        while let Ok(token) = rx.try_recv() {
            ledger.borrow_mut().received(token);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        rng_seed: RngSeed::Fixed(0x7365_6c65_6374_2121),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_value_sent_through_selects_and_plain_operations_is_received_once_or_handed_back(
        case in case()
    ) {
        run(&case);
    }
}
