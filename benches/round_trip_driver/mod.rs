//! The driver the round-trip benchmarks share (`benches/park.rs`, `benches/shared_channel.rs`):
//! a list of cases, each timing `n` round trips, run as `cargo bench --bench NAME` (the median
//! of `ROUNDS` rounds per case), as `cargo test --benches` (each case once with 10 round trips,
//! to show it works), or as `NAME CASE N` (one case, for a profiler).

use std::process::ExitCode;
use std::time::Duration;

/// A case: runs `n` round trips (after one untimed one) and returns how long they took.
pub struct Case {
    pub id: &'static str,
    pub run: fn(u64) -> Duration,
}

/// Timed runs of every case; the median is printed.
const ROUNDS: usize = 9;

/// Runs `cases` as the command line of benchmark `name` asks; `round_trips` says how many round
/// trips a timed run of each case makes.
pub fn main(name: &str, cases: &[Case], round_trips: fn(&str) -> u64) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let full = args.iter().any(|arg| arg == "--bench");
    let args: Vec<&String> = args.iter().filter(|arg| *arg != "--bench").collect();
    if let [id, iterations] = args.as_slice() {
        let Some(case) = cases.iter().find(|case| case.id == id.as_str()) else {
            eprintln!("{name}: no case named {id:?}");
            return ExitCode::from(2);
        };
        let Ok(iterations) = iterations.parse::<u64>() else {
            eprintln!("{name}: {iterations:?} is not a whole number of round trips");
            return ExitCode::from(2);
        };
        let elapsed = (case.run)(iterations);
        println!("{id}: {iterations} round trips in {elapsed:?}");
        return ExitCode::SUCCESS;
    }
    if !full {
        for case in cases {
            (case.run)(10);
            println!("ran {} x10", case.id);
        }
        return ExitCode::SUCCESS;
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for _ in 0..ROUNDS {
        for (case, samples) in cases.iter().zip(&mut samples) {
            let n = round_trips(case.id);
            let elapsed = (case.run)(n);
            samples.push(elapsed.as_nanos() as f64 / n as f64);
        }
    }
    println!("ns per round trip, median of {ROUNDS} rounds (min..max):");
    for (case, samples) in cases.iter().zip(&mut samples) {
        samples.sort_by(f64::total_cmp);
        println!(
            "{:<30} {:>10.1}   ({:.1}..{:.1})",
            case.id,
            samples[ROUNDS / 2],
            samples[0],
            samples[ROUNDS - 1]
        );
    }
    ExitCode::SUCCESS
}
