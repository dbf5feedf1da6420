//! Model-based property test: random interleavings of creating, resuming, dropping and
//! reclaiming up to eight coroutines behave exactly like a plain state machine per coroutine.
//!
//! Each coroutine runs a small program determined by its seed: it yields a value derived from
//! the seed and every input it has received, a fixed number of times, then returns one. A
//! "poison" input makes it panic. Each program holds a token that counts its own drop, so the
//! test also checks that every coroutine's state is dropped exactly when it should be: when
//! the program returns or panics, or when the coroutine is dropped or reclaimed with
//! `into_stack`, whether it had started or not.

use std::any::Any;
use std::cell::Cell;
use std::hint::black_box;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;

use greenweave::{Coroutine, CoroutineResult, Stack, Yielder};
use proptest::collection::vec;
use proptest::prelude::*;

const SLOTS: usize = 8;

/// An input that makes a program panic.
const POISON: u32 = 0xDEAD_BEEF;

/// Bytes of the non-default stacks some coroutines get.
const CUSTOM_STACK: usize = 64 * 1024;

// ---------------------------------------------------------------------------------------------
// The program each coroutine runs, and the pure functions it shares with the model
// ---------------------------------------------------------------------------------------------

fn start(seed: u32, first: u32) -> u64 {
    (u64::from(seed) << 32 | u64::from(first)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn advance(acc: u64, step: u8, input: u32) -> u64 {
    (acc ^ u64::from(input)).rotate_left(u32::from(step) + 5) ^ 0xA5A5
}

fn finish(acc: u64) -> u64 {
    acc.wrapping_add(0x1234_5678)
}

fn poison_message(seed: u32) -> String {
    format!("poisoned input reached coroutine {seed:#x}")
}

/// Counts its drop in the run's shared counter.
struct Token(Rc<Cell<usize>>);

impl Drop for Token {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

/// Suspends `depth` frames down, so that suspended coroutines have stacks of varied depth;
/// each frame checks its own local once the resume comes back up.
#[inline(never)]
fn suspend_from_depth(yielder: &Yielder<u32, u64>, value: u64, depth: u32) -> u32 {
    let mine = black_box(value ^ u64::from(depth));
    let input = if depth == 0 {
        yielder.suspend(value)
    } else {
        suspend_from_depth(yielder, value, depth - 1)
    };
    assert_eq!(mine, value ^ u64::from(depth), "a frame's local changed");
    input
}

fn program(yielder: &Yielder<u32, u64>, first: u32, seed: u32, steps: u8, token: Token) -> u64 {
    let _token = token;
    if first == POISON {
        panic!("{}", poison_message(seed));
    }
    let mut acc = start(seed, first);
    for step in 0..steps {
        let input = suspend_from_depth(yielder, acc, (seed + u32::from(step)) % 4);
        if input == POISON {
            panic!("{}", poison_message(seed));
        }
        acc = advance(acc, step, input);
    }
    finish(acc)
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Phase {
    Unstarted,
    Suspended { step: u8, acc: u64 },
    Finished,
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Yield(u64),
    Return(u64),
    Panic(String),
}

#[derive(Debug)]
struct Model {
    seed: u32,
    steps: u8,
    phase: Phase,
}

impl Model {
    fn is_started(&self) -> bool {
        !matches!(self.phase, Phase::Unstarted)
    }

    fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Finished)
    }

    /// Whether the program's token is still alive inside the coroutine.
    fn holds_token(&self) -> bool {
        !self.is_done()
    }

    fn resume(&mut self, input: u32) -> Outcome {
        let acc = match self.phase {
            Phase::Finished => return Outcome::Panic("already finished".to_owned()),
            _ if input == POISON => {
                self.phase = Phase::Finished;
                return Outcome::Panic(poison_message(self.seed));
            }
            Phase::Unstarted => start(self.seed, input),
            Phase::Suspended { step, acc } => advance(acc, step, input),
        };
        // The step the program is now at: how many inputs it has folded in after the first.
        let step = match self.phase {
            Phase::Suspended { step, .. } => step + 1,
            _ => 0,
        };
        if step == self.steps {
            self.phase = Phase::Finished;
            Outcome::Return(finish(acc))
        } else {
            self.phase = Phase::Suspended { step, acc };
            Outcome::Yield(acc)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Operations and the runner
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    /// Creates a coroutine in `slot`, dropping whatever was there.
    Create {
        slot: usize,
        seed: u32,
        steps: u8,
        custom_stack: bool,
    },
    Resume {
        slot: usize,
        input: u32,
    },
    Drop {
        slot: usize,
    },
    IntoStack {
        slot: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let input = prop_oneof![15 => any::<u32>(), 1 => Just(POISON)];
    prop_oneof![
        3 => (0..SLOTS, any::<u32>(), 0..6u8, any::<bool>()).prop_map(
            |(slot, seed, steps, custom_stack)| Op::Create { slot, seed, steps, custom_stack }
        ),
        10 => (0..SLOTS, input).prop_map(|(slot, input)| Op::Resume { slot, input }),
        1 => (0..SLOTS).prop_map(|slot| Op::Drop { slot }),
        1 => (0..SLOTS).prop_map(|slot| Op::IntoStack { slot }),
    ]
}

struct Live {
    coroutine: Coroutine<u32, u64, u64>,
    model: Model,
    stack_size: usize,
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|message| (*message).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "<non-string payload>".to_owned())
}

fn run(ops: &[Op]) {
    let drops = Rc::new(Cell::new(0usize));
    let mut created = 0usize;
    let mut slots: [Option<Live>; SLOTS] = Default::default();

    for (index, op) in ops.iter().enumerate() {
        match *op {
            Op::Create {
                slot,
                seed,
                steps,
                custom_stack,
            } => {
                slots[slot] = None;
                let token = Token(Rc::clone(&drops));
                let body = move |yielder: &Yielder<u32, u64>, first: u32| {
                    program(yielder, first, seed, steps, token)
                };
                let (coroutine, stack_size) = if custom_stack {
                    let stack = Stack::new(CUSTOM_STACK).unwrap();
                    let size = stack.size();
                    (Coroutine::with_stack(stack, body), size)
                } else {
                    (Coroutine::new(body), Stack::DEFAULT_SIZE)
                };
                created += 1;
                slots[slot] = Some(Live {
                    coroutine,
                    model: Model {
                        seed,
                        steps,
                        phase: Phase::Unstarted,
                    },
                    stack_size,
                });
            }
            Op::Resume { slot, input } => {
                let Some(live) = slots[slot].as_mut() else {
                    continue;
                };
                let expected = live.model.resume(input);
                let coroutine = &mut live.coroutine;
                let actual = match panic::catch_unwind(AssertUnwindSafe(|| coroutine.resume(input)))
                {
                    Ok(CoroutineResult::Yield(value)) => Outcome::Yield(value),
                    Ok(CoroutineResult::Return(value)) => Outcome::Return(value),
                    Err(payload) => Outcome::Panic(panic_message(&*payload)),
                };
                match (&expected, &actual) {
                    // The library's message says more than the model does.
                    (Outcome::Panic(want), Outcome::Panic(got))
                        if want == "already finished" && got.contains(want) => {}
                    _ => assert_eq!(actual, expected, "op {index}: {op:?}"),
                }
            }
            Op::Drop { slot } => {
                slots[slot] = None;
            }
            Op::IntoStack { slot } => {
                if let Some(live) = slots[slot].take() {
                    let stack = live.coroutine.into_stack();
                    assert_eq!(stack.size(), live.stack_size, "op {index}: {op:?}");
                }
            }
        }

        for (slot, live) in slots.iter().enumerate() {
            if let Some(live) = live {
                assert_eq!(
                    live.coroutine.is_started(),
                    live.model.is_started(),
                    "slot {slot} after op {index}: {op:?}"
                );
                assert_eq!(
                    live.coroutine.is_done(),
                    live.model.is_done(),
                    "slot {slot} after op {index}: {op:?}"
                );
            }
        }
        let holding = slots
            .iter()
            .flatten()
            .filter(|live| live.model.holds_token())
            .count();
        assert_eq!(
            drops.get(),
            created - holding,
            "tokens dropped after op {index}: {op:?}"
        );
    }

    drop(slots);
    assert_eq!(drops.get(), created, "every token is dropped in the end");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_operations_on_up_to_eight_coroutines_match_the_model(ops in vec(op(), 1..80)) {
        run(&ops);
    }
}

#[test]
fn the_model_and_the_program_agree_on_a_hand_written_sequence() {
    let ops = [
        Op::Create {
            slot: 0,
            seed: 1,
            steps: 2,
            custom_stack: false,
        },
        Op::Create {
            slot: 1,
            seed: 2,
            steps: 0,
            custom_stack: true,
        },
        Op::Resume { slot: 0, input: 5 },
        Op::Resume { slot: 1, input: 6 },
        Op::Resume { slot: 1, input: 6 },
        Op::Resume { slot: 0, input: 7 },
        Op::Create {
            slot: 2,
            seed: 3,
            steps: 4,
            custom_stack: true,
        },
        Op::Resume { slot: 2, input: 1 },
        Op::Resume {
            slot: 2,
            input: POISON,
        },
        Op::Resume { slot: 0, input: 8 },
        Op::Resume { slot: 0, input: 9 },
        Op::Create {
            slot: 3,
            seed: 4,
            steps: 3,
            custom_stack: false,
        },
        Op::Resume { slot: 3, input: 1 },
        Op::IntoStack { slot: 3 },
        Op::Create {
            slot: 4,
            seed: 5,
            steps: 3,
            custom_stack: true,
        },
        Op::Drop { slot: 4 },
    ];
    run(&ops);
}
