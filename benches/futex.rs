//! Mutex + condition-variable ping-pong (issue 22): a `Mutex<bool>` says whose turn it is, one
//! `Condvar` carries the hand-over; one iteration is a round trip (the turn goes to the echo
//! side and comes back).
//!
//! ```text
//! cargo bench --features hooks --bench futex
//! cargo bench --features hooks --bench futex -- --quick   # a rough pass
//! target/release/deps/futex-<hash> std_green 10000        # one case once (callgrind)
//! ```
//!
//! - `condvar_ping_pong/std_green`: std's `Mutex` and `Condvar` between two green threads of
//!   one runtime. Under the `hooks` feature their futex waits park the green thread
//!   (`src/hooks/futex.rs`) and a wake takes the waiter off the futex table; no system call.
//!   Without the feature the first wait would block the runtime's OS thread for ever, hence
//!   `required-features = ["hooks"]`.
//! - `condvar_ping_pong/std_os_threads`: the same code between two OS threads, no runtime:
//!   what the green threads replace (futex waits and wakes in the kernel; swings with whether
//!   the two threads share a CPU).
//! - `condvar_ping_pong/greenweave_green`: `greenweave::sync::{Mutex, Condvar}` between two
//!   green threads: what code written for green threads would use.
//!
//! One ping-pong body serves all three (`ping_pong!`: the two `Mutex`/`Condvar` pairs have the
//! same API). Starting the runtime or the echo thread is not timed: each batch of iterations
//! is timed from inside, after one untimed round trip.

use std::time::Duration;

use criterion::{Criterion, criterion_group};

/// The two sides of the ping-pong over a `(Mutex<bool>, Condvar)` pair reached through `$pair`
/// (an `Arc` or an `Rc` of the tuple): `true` means it is the echo side's turn.
macro_rules! ping_pong {
    ($pair:ty) => {
        /// Takes `rounds` turns: waits for the turn, hands it back.
        fn echo(pair: $pair, rounds: u64) {
            let (turn, changed) = &*pair;
            for _ in 0..rounds {
                let mut echo_turn = turn.lock().unwrap();
                while !*echo_turn {
                    echo_turn = changed.wait(echo_turn).unwrap();
                }
                *echo_turn = false;
                changed.notify_one();
            }
        }

        /// One untimed round trip, then `rounds` timed ones; the echo side must take
        /// `rounds + 1` turns.
        fn hit(pair: &$pair, rounds: u64) -> Duration {
            let (turn, changed) = &**pair;
            let round_trip = || {
                let mut echo_turn = turn.lock().unwrap();
                *echo_turn = true;
                changed.notify_one();
                while *echo_turn {
                    echo_turn = changed.wait(echo_turn).unwrap();
                }
            };
            round_trip();
            let start = Instant::now();
            for _ in 0..rounds {
                round_trip();
            }
            start.elapsed()
        }
    };
}

/// std's lock and condition variable, shared between OS threads or green threads alike.
mod std_sync {
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::{Duration, Instant};

    pub type Pair = Arc<(Mutex<bool>, Condvar)>;

    ping_pong!(Pair);

    pub fn pair() -> Pair {
        Arc::new((Mutex::new(false), Condvar::new()))
    }

    /// Two green threads of one runtime; the waits park through the hooks.
    pub fn green_round_trips(rounds: u64) -> Duration {
        greenweave::run(move || {
            let pair = pair();
            let echo_side = pair.clone();
            let echo = greenweave::spawn(move || echo(echo_side, rounds + 1));
            let elapsed = hit(&pair, rounds);
            echo.join().unwrap();
            elapsed
        })
    }

    /// Two OS threads, no runtime.
    pub fn os_thread_round_trips(rounds: u64) -> Duration {
        let pair = pair();
        let echo_side = pair.clone();
        let echo = std::thread::spawn(move || echo(echo_side, rounds + 1));
        let elapsed = hit(&pair, rounds);
        echo.join().unwrap();
        elapsed
    }
}

/// greenweave's lock and condition variable: one runtime's, shared with an `Rc`.
mod greenweave_sync {
    use std::rc::Rc;
    use std::time::{Duration, Instant};

    use greenweave::sync::{Condvar, Mutex};

    pub type Pair = Rc<(Mutex<bool>, Condvar)>;

    ping_pong!(Pair);

    /// Two green threads of one runtime.
    pub fn green_round_trips(rounds: u64) -> Duration {
        greenweave::run(move || {
            let pair = Rc::new((Mutex::new(false), Condvar::new()));
            let echo_side = pair.clone();
            let echo = greenweave::spawn(move || echo(echo_side, rounds + 1));
            let elapsed = hit(&pair, rounds);
            echo.join().unwrap();
            elapsed
        })
    }
}

/// A case: runs the given number of round trips (after one untimed one) and returns how long
/// they took.
type RoundTrips = fn(u64) -> Duration;

/// The cases of the `condvar_ping_pong` group, by name.
const CASES: &[(&str, RoundTrips)] = &[
    ("std_green", std_sync::green_round_trips),
    ("std_os_threads", std_sync::os_thread_round_trips),
    ("greenweave_green", greenweave_sync::green_round_trips),
];

fn condvar_ping_pongs(c: &mut Criterion) {
    let mut group = c.benchmark_group("condvar_ping_pong");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    for &(name, round_trips) in CASES {
        group.bench_function(name, |b| b.iter_custom(round_trips));
    }
    group.finish();
}

criterion_group!(benches, condvar_ping_pongs);

/// criterion's main, or, given `<case> <rounds>` (a case's name within the group), that many
/// round trips of that case once, for an instruction counter.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [case, rounds] = args.as_slice()
        && let Ok(rounds) = rounds.parse::<u64>()
    {
        let Some((_, round_trips)) = CASES.iter().find(|(name, _)| name == case) else {
            let names: Vec<&str> = CASES.iter().map(|(name, _)| *name).collect();
            eprintln!(
                "futex bench: no case {case:?}; the cases: {}",
                names.join(", ")
            );
            std::process::exit(2);
        };
        let elapsed = round_trips(rounds);
        println!("{case}: {rounds} round trips, {elapsed:?}");
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
