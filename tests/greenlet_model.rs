//! Model-based property test: random sequences of switch, throw, drop, reparent and create
//! operations on a dozen greenlets move values exactly as a small model of greenlet semantics
//! predicts.
//!
//! Every greenlet runs the same program: it notes each thing it receives in a shared log,
//! then either returns a value derived from it (falling off the end of `run`, so the value
//! goes to its nearest live ancestor) or switches the value to the main greenlet and waits.
//! Some greenlets catch a number of `GreenletExit`s (a throw, or the kill when their last
//! handle goes) and carry on; the others die of them. Only the main greenlet drives
//! operations, so each operation is a chain of deliveries that ends back in main: the model
//! replays that chain (redirects past dead greenlets, starting unstarted ones, kills of
//! greenlets whose last reference goes) and predicts the log, what main gets back, every
//! greenlet's state and parent, whether `set_parent` refuses a cycle, and how many of the
//! greenlets' closures have been dropped.

use std::cell::{Cell, RefCell};
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::rc::Rc;

use greenweave::greenlet::{Greenlet, GreenletExit, GreenletId, current};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

const SLOTS: usize = 12;

type Msg = Option<u64>;

// ---------------------------------------------------------------------------------------------
// The program every greenlet runs, and the pure step function it shares with the model
// ---------------------------------------------------------------------------------------------

/// What a greenlet got at its switch point (or as the argument of `run`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Received {
    Value(Msg),
    /// A `GreenletExit`, caught.
    Caught,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Switch this to main and wait.
    Yield(Msg),
    /// Return this from `run`.
    Return(Msg),
}

/// What greenlet `who` (its creation number) does with what it received.
fn step(who: usize, input: Received) -> Action {
    match input {
        Received::Value(Some(x)) => {
            let h = (x ^ (who as u64).wrapping_mul(0x2545_F491_4F6C_DD1D))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29)
                % 1000;
            match h % 6 {
                0 | 1 => Action::Return(Some(h)),
                2 => Action::Return(None),
                _ => Action::Yield(Some(h)),
            }
        }
        // A child's exit (or a `None` result) reached it.
        Received::Value(None) => Action::Yield(Some(1000 + who as u64)),
        Received::Caught => Action::Yield(Some(2000 + who as u64)),
    }
}

type Log = Rc<RefCell<Vec<(usize, Received)>>>;

/// Counts its drop: a greenlet's closure holds one, so the count says how many closures were
/// dropped (after running to the end or unwinding, or unrun).
struct Token(Rc<Cell<usize>>);

impl Drop for Token {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

fn program(
    who: usize,
    mut catches: u8,
    log: Log,
    main: Greenlet<Msg>,
    token: Token,
    first: Msg,
) -> Msg {
    let _token = token;
    let mut input = Received::Value(first);
    loop {
        log.borrow_mut().push((who, input));
        match step(who, input) {
            Action::Return(value) => return value,
            Action::Yield(value) => {
                input = match catch_unwind(AssertUnwindSafe(|| main.switch(value))) {
                    Ok(received) => Received::Value(received),
                    Err(payload) if payload.is::<GreenletExit>() && catches > 0 => {
                        catches -= 1;
                        Received::Caught
                    }
                    Err(payload) => resume_unwind(payload),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Unstarted,
    Suspended,
    Dead,
    /// Refused its kill (caught the GreenletExit and switched back) and lost its last
    /// reference: nobody can reach it; its stack and closure are leaked.
    Gone,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Parent {
    Main,
    Greenlet(usize),
}

#[derive(Debug)]
struct Record {
    state: State,
    parent: Parent,
    catches: u8,
    /// The record exists: something still refers to it.
    alive: bool,
    /// References held for the length of an operation (the one a kill holds).
    pins: usize,
}

enum Payload {
    Value(Msg),
    Exit,
}

/// What main gets from a switch or throw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Value(Msg),
    /// `GreenletExit` raised in main.
    Exit,
}

#[derive(Default, Debug)]
struct Model {
    records: Vec<Record>,
    slots: [Option<usize>; SLOTS],
    log: Vec<(usize, Received)>,
}

impl Model {
    fn references(&self, who: usize) -> usize {
        let handles = self.slots.iter().filter(|&&slot| slot == Some(who)).count();
        let children = self
            .records
            .iter()
            .filter(|child| child.alive && child.parent == Parent::Greenlet(who))
            .count();
        handles + children + self.records[who].pins
    }

    fn dead_count(&self) -> usize {
        self.records
            .iter()
            .filter(|record| record.state == State::Dead)
            .count()
    }

    fn live_ancestor(&self, mut at: Parent) -> Parent {
        while let Parent::Greenlet(who) = at {
            let record = &self.records[who];
            assert!(record.alive, "the model reached a dropped record");
            if record.state != State::Dead {
                break;
            }
            at = record.parent;
        }
        at
    }

    fn is_ancestor_or_self(&self, who: usize, mut of: Parent) -> bool {
        while let Parent::Greenlet(at) = of {
            if at == who {
                return true;
            }
            of = self.records[at].parent;
        }
        false
    }

    /// A reference to `who` went away while main runs: if it was the last one, a suspended
    /// or unstarted greenlet is killed, and the record is dropped, releasing its parent.
    fn release(&mut self, who: usize) {
        if !self.records[who].alive || self.references(who) > 0 {
            return;
        }
        if matches!(self.records[who].state, State::Unstarted | State::Suspended) {
            self.kill(who);
        }
        let record = &mut self.records[who];
        record.alive = false;
        if record.state == State::Suspended {
            record.state = State::Gone;
        }
        if let Parent::Greenlet(parent) = record.parent {
            self.release(parent);
        }
    }

    /// Throws GreenletExit into `who` with main as its new parent; what comes back is dropped.
    /// The old parent is held for the length of the kill, and `who` gets it back afterwards,
    /// dead or not, as Python's kill does (the caller's release then releases it, so an
    /// orphaned parent dies after its child).
    fn kill(&mut self, who: usize) {
        let previous = std::mem::replace(&mut self.records[who].parent, Parent::Main);
        if let Parent::Greenlet(previous) = previous {
            self.records[previous].pins += 1;
        }
        self.records[who].pins += 1;
        let outcome = self.deliver(who, Payload::Exit);
        assert!(
            matches!(outcome, Outcome::Value(_)),
            "a kill comes back as a value"
        );
        self.records[who].pins -= 1;
        self.records[who].parent = previous;
        if let Parent::Greenlet(previous) = previous {
            self.records[previous].pins -= 1;
        }
    }

    /// `who` died. Its record goes once nothing refers to it: in the receiver, which holds
    /// the nearest live ancestor as the running greenlet, so only dead records go here.
    fn die(&mut self, who: usize) {
        self.records[who].state = State::Dead;
        let mut at = who;
        loop {
            let record = &self.records[at];
            if !record.alive || record.state != State::Dead || self.references(at) > 0 {
                break;
            }
            self.records[at].alive = false;
            match self.records[at].parent {
                Parent::Greenlet(parent) => at = parent,
                Parent::Main => break,
            }
        }
    }

    /// Main switches (or throws) to `target`; follows the chain of deliveries until control
    /// is back in main.
    fn deliver(&mut self, target: usize, mut payload: Payload) -> Outcome {
        if self.records[target].state == State::Dead && matches!(payload, Payload::Exit) {
            // A dead greenlet turns a GreenletExit thrown at it into the value a greenlet
            // dying of it hands on, as Python's throw does.
            payload = Payload::Value(None);
        }
        let mut to = Parent::Greenlet(target);
        loop {
            let who = match self.live_ancestor(to) {
                Parent::Main => {
                    return match payload {
                        Payload::Value(value) => Outcome::Value(value),
                        Payload::Exit => Outcome::Exit,
                    };
                }
                Parent::Greenlet(who) => who,
            };
            let record = &mut self.records[who];
            let input = match (record.state, payload) {
                (_, Payload::Value(value)) => Received::Value(value),
                (State::Suspended, Payload::Exit) if record.catches > 0 => {
                    record.catches -= 1;
                    Received::Caught
                }
                (State::Unstarted | State::Suspended, Payload::Exit) => {
                    self.die(who);
                    payload = Payload::Value(None);
                    to = self.records[who].parent;
                    continue;
                }
                (state, Payload::Exit) => unreachable!("delivered to a {state:?} greenlet"),
            };
            self.log.push((who, input));
            match step(who, input) {
                Action::Return(value) => {
                    self.die(who);
                    payload = Payload::Value(value);
                    to = self.records[who].parent;
                }
                Action::Yield(value) => {
                    self.records[who].state = State::Suspended;
                    // Main drops the reference the running greenlet held: if that was the
                    // last, the greenlet is killed before main's switch returns.
                    self.release(who);
                    return Outcome::Value(value);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Operations and the runner
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    /// Makes a greenlet in `slot` (dropping the handle there) whose parent is the greenlet in
    /// `parent` (main if `None` or empty) and that catches `catches` GreenletExits.
    Create {
        slot: usize,
        parent: Option<usize>,
        catches: u8,
    },
    Switch {
        slot: usize,
        value: u64,
    },
    Throw {
        slot: usize,
    },
    /// Drops main's handle.
    Drop {
        slot: usize,
    },
    SetParent {
        slot: usize,
        parent: Option<usize>,
    },
}

fn parent_choice() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![1 => Just(None), 3 => (0..SLOTS).prop_map(Some)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..SLOTS, parent_choice(), 0..3u8)
            .prop_map(|(slot, parent, catches)| Op::Create { slot, parent, catches }),
        8 => (0..SLOTS, 0..1000u64).prop_map(|(slot, value)| Op::Switch { slot, value }),
        3 => (0..SLOTS).prop_map(|slot| Op::Throw { slot }),
        2 => (0..SLOTS).prop_map(|slot| Op::Drop { slot }),
        4 => (0..SLOTS, parent_choice()).prop_map(|(slot, parent)| Op::SetParent { slot, parent }),
    ]
}

/// A dozen greenlets, each a child of main or of one made before it, then the operations.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    (vec((parent_choice(), 0..3u8), SLOTS), vec(op(), 1..100)).prop_map(|(setup, ops)| {
        setup
            .into_iter()
            .enumerate()
            .map(|(slot, (parent, catches))| Op::Create {
                slot,
                parent: parent.filter(|&parent| parent < slot),
                catches,
            })
            .chain(ops)
            .collect()
    })
}

struct Real {
    main: Greenlet<Msg>,
    slots: [Option<Greenlet<Msg>>; SLOTS],
    /// Every greenlet's id, by creation number.
    ids: Vec<GreenletId>,
    log: Log,
    dropped: Rc<Cell<usize>>,
}

impl Real {
    /// The handle in `slot`, or main's if the slot is empty or not given.
    fn parent_handle(&self, parent: Option<usize>) -> Greenlet<Msg> {
        parent
            .and_then(|slot| self.slots[slot].clone())
            .unwrap_or_else(|| self.main.clone())
    }

    fn outcome(&self, op: impl FnOnce() -> Msg) -> Outcome {
        match catch_unwind(AssertUnwindSafe(op)) {
            Ok(value) => Outcome::Value(value),
            Err(payload) if payload.is::<GreenletExit>() => Outcome::Exit,
            Err(payload) => resume_unwind(payload),
        }
    }
}

fn run(ops: &[Op]) {
    let main = current::<Msg>();
    assert!(main.is_main());
    let mut real = Real {
        main: main.clone(),
        slots: Default::default(),
        ids: Vec::new(),
        log: Rc::new(RefCell::new(Vec::new())),
        dropped: Rc::new(Cell::new(0)),
    };
    let mut model = Model::default();

    for (index, op) in ops.iter().enumerate() {
        let context = || format!("after op {index}: {op:?}\nops: {ops:?}");
        match *op {
            Op::Create {
                slot,
                parent,
                catches,
            } => {
                let who = model.records.len();
                let parent_handle = real.parent_handle(parent);
                let (log, main, token) = (
                    real.log.clone(),
                    real.main.clone(),
                    Token(real.dropped.clone()),
                );
                let greenlet = Greenlet::with_parent(&parent_handle, move |first: Msg| {
                    program(who, catches, log, main, token, first)
                });
                drop(parent_handle);
                real.ids.push(greenlet.id());
                real.slots[slot] = Some(greenlet);

                let parent = match parent.and_then(|slot| model.slots[slot]) {
                    Some(parent) => Parent::Greenlet(parent),
                    None => Parent::Main,
                };
                model.records.push(Record {
                    state: State::Unstarted,
                    parent,
                    catches,
                    alive: true,
                    pins: 0,
                });
                if let Some(previous) = model.slots[slot].replace(who) {
                    model.release(previous);
                }
            }
            Op::Switch { slot, value } => {
                let Some(greenlet) = real.slots[slot].clone() else {
                    continue;
                };
                let actual = real.outcome(|| greenlet.switch(Some(value)));
                drop(greenlet);
                let target = model.slots[slot].unwrap();
                let expected = model.deliver(target, Payload::Value(Some(value)));
                assert_eq!(actual, expected, "what main got back, {}", context());
            }
            Op::Throw { slot } => {
                let Some(greenlet) = real.slots[slot].clone() else {
                    continue;
                };
                let actual = real.outcome(|| greenlet.throw());
                drop(greenlet);
                let target = model.slots[slot].unwrap();
                let expected = model.deliver(target, Payload::Exit);
                assert_eq!(actual, expected, "what main got back, {}", context());
            }
            Op::Drop { slot } => {
                real.slots[slot] = None;
                if let Some(who) = model.slots[slot].take() {
                    model.release(who);
                }
            }
            Op::SetParent { slot, parent } => {
                let Some(greenlet) = real.slots[slot].clone() else {
                    continue;
                };
                let parent_handle = real.parent_handle(parent);
                let result = greenlet.set_parent(&parent_handle);
                drop((greenlet, parent_handle));

                let who = model.slots[slot].unwrap();
                let new_parent = match parent.and_then(|slot| model.slots[slot]) {
                    Some(parent) => Parent::Greenlet(parent),
                    None => Parent::Main,
                };
                if model.is_ancestor_or_self(who, new_parent) {
                    let error = result.expect_err("a cycle must be refused");
                    assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{}", context());
                } else {
                    result.unwrap_or_else(|error| panic!("{error}, {}", context()));
                    let previous = std::mem::replace(&mut model.records[who].parent, new_parent);
                    if let Parent::Greenlet(previous) = previous {
                        model.release(previous);
                    }
                }
            }
        }
        check(&real, &model, &context);
    }

    for slot in 0..SLOTS {
        real.slots[slot] = None;
        if let Some(who) = model.slots[slot].take() {
            model.release(who);
        }
    }
    check(&real, &model, &|| {
        format!("after dropping every handle\nops: {ops:?}")
    });
    for (who, record) in model.records.iter().enumerate() {
        assert!(
            !record.alive,
            "greenlet {who} is still referenced: {record:?}"
        );
        assert!(
            matches!(record.state, State::Dead | State::Gone),
            "greenlet {who} was neither killed nor leaked: {record:?}"
        );
    }
    assert!(current::<Msg>().is_main());
}

fn check(real: &Real, model: &Model, context: &dyn Fn() -> String) {
    assert_eq!(*real.log.borrow(), model.log, "the log, {}", context());
    assert_eq!(
        real.dropped.get(),
        model.dead_count(),
        "closures dropped: one per dead greenlet, {}",
        context()
    );
    for slot in 0..SLOTS {
        let (greenlet, who) = match (&real.slots[slot], model.slots[slot]) {
            (Some(greenlet), Some(who)) => (greenlet, who),
            (None, None) => continue,
            (greenlet, who) => panic!("slot {slot}: {greenlet:?} vs {who:?}, {}", context()),
        };
        let record = &model.records[who];
        assert_eq!(greenlet.id(), real.ids[who], "slot {slot}, {}", context());
        assert_eq!(
            (greenlet.is_started(), greenlet.is_dead()),
            (
                record.state != State::Unstarted,
                record.state == State::Dead
            ),
            "state of greenlet {who} in slot {slot} ({record:?}), {}",
            context()
        );
        let parent = greenlet.parent().expect("not main").id();
        let expected = match record.parent {
            Parent::Main => real.main.id(),
            Parent::Greenlet(parent) => real.ids[parent],
        };
        assert_eq!(parent, expected, "parent of greenlet {who}, {}", context());
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        rng_seed: RngSeed::Fixed(0x6772_6565_6e6c_6574),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_switches_throws_drops_and_reparentings_of_a_dozen_greenlets_match_the_model(
        ops in ops()
    ) {
        run(&ops);
    }
}

#[test]
fn the_model_and_the_greenlets_agree_on_a_hand_written_sequence() {
    let ops = [
        Op::Create {
            slot: 0,
            parent: None,
            catches: 1,
        },
        Op::Create {
            slot: 1,
            parent: Some(0),
            catches: 0,
        },
        Op::Create {
            slot: 2,
            parent: Some(1),
            catches: 2,
        },
        Op::Switch { slot: 2, value: 5 },
        Op::Switch { slot: 0, value: 7 },
        Op::SetParent {
            slot: 0,
            parent: Some(2),
        },
        Op::SetParent {
            slot: 2,
            parent: Some(2),
        },
        Op::Throw { slot: 1 },
        Op::Throw { slot: 2 },
        Op::Throw { slot: 2 },
        Op::Switch { slot: 1, value: 9 },
        Op::Drop { slot: 1 },
        Op::Drop { slot: 0 },
        Op::Throw { slot: 2 },
        Op::Switch { slot: 2, value: 11 },
        Op::Create {
            slot: 2,
            parent: None,
            catches: 0,
        },
        Op::Throw { slot: 2 },
        Op::Throw { slot: 2 },
    ];
    run(&ops);
}
