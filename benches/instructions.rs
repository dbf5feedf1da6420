//! Runs one loop of `loops/mod.rs` a given number of times, for an instruction counter to
//! watch: `benches/count_instructions.py` runs it under `valgrind --tool=callgrind` (x86_64)
//! and under `qemu-aarch64` with its execution log (aarch64), twice with different iteration
//! counts, and divides the difference by the difference in iterations.
//!
//! ```text
//! cargo bench --bench instructions -- --list                           # every loop's id
//! cargo bench --bench instructions -- coroutine_round_trip/greenweave 1000
//! cargo bench --bench instructions                                     # every loop, 10 times
//! ```
//!
//! Without a loop id (as `cargo bench` and `cargo test --benches` run it), every loop runs ten
//! iterations, so the suite checks that each still runs.

use std::process::ExitCode;

mod loops;

const USAGE: &str = "\
usage: instructions [--list | <group/function> <iterations>]
  --list                       print the id of every loop
  <group/function> <n>         prepare that loop, then run n iterations of it once
  (nothing)                    run every loop for 10 iterations";

fn main() -> ExitCode {
    // cargo passes `--bench` to every benchmark binary under `cargo bench`; it means nothing
    // here.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| arg != "--bench")
        .collect();
    match args.as_slice() {
        [] => {
            for each in loops::LOOPS {
                (each.prepare)()(10);
                println!("ran {} x10", each.id());
            }
            ExitCode::SUCCESS
        }
        [list] if list == "--list" => {
            for each in loops::LOOPS {
                println!("{}", each.id());
            }
            ExitCode::SUCCESS
        }
        [id, iterations] => {
            let Some(each) = loops::LOOPS.iter().find(|each| each.id() == *id) else {
                eprintln!("instructions: no loop named {id:?}; --list prints them");
                return ExitCode::from(2);
            };
            let Ok(iterations) = iterations.parse::<u64>() else {
                eprintln!("instructions: {iterations:?} is not a whole number of iterations");
                return ExitCode::from(2);
            };
            let mut run = (each.prepare)();
            let elapsed = run(iterations);
            println!("{id}: {iterations} iterations in {elapsed:?}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
