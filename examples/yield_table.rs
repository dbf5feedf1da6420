//! How the cost of a yield grows with the number of runnable green threads: N green threads
//! (N = 10, 1,000, 100,000) each call `thread::yield_now` in a loop, round-robin through the
//! scheduler's FIFO ready queue, and the table gives nanoseconds per yield (one switch into a
//! green thread and one out, plus the queue). Each row makes about the same number of yields,
//! so the rows take about as long as each other; rows are repeated (`--repeat`) and the median
//! printed.
//!
//! ```sh
//! cargo run --release --example yield_table                 # 2,000,000 yields a row, 5 repeats
//! cargo run --release --example yield_table -- --quick      # 10/100/1,000, 20,000 yields (CI)
//! cargo run --release --example yield_table -- --counts 10,100000 --yields 4000000
//! ```
//!
//! `BENCHMARKS.md` ("Cost at scale") has the table, against Go's `runtime.Gosched`
//! (`benches/scale_compare.py` runs both).

use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: yield_table [--quick] [--counts N,N,...] [--yields Y] [--repeat R]

  --counts N,...        numbers of runnable green threads (default 10,1000,100000)
  --yields Y            yields per row, shared among its green threads (default 2000000)
  --repeat R            runs of each row; the median is printed (default 5)
  --quick               10, 100 and 1000 green threads, 20000 yields a row, one run (CI)";

struct Options {
    counts: Vec<usize>,
    yields: usize,
    repeat: usize,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        counts: vec![10, 1_000, 100_000],
        yields: 2_000_000,
        repeat: 5,
    };
    let mut args = std::env::args().skip(1);
    let number = |flag: &str, value: Option<String>| -> Result<usize, String> {
        let value = value.ok_or(format!("{flag} needs a value"))?;
        match value.replace('_', "").parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{flag}: {value:?} is not a positive whole number")),
        }
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => {
                // Small enough for qemu, where each stack is two mappings (PROT_NONE guards).
                options.counts = vec![10, 100, 1_000];
                options.yields = 20_000;
                options.repeat = 1;
            }
            "--counts" => {
                let value = args.next().ok_or("--counts needs a value")?;
                options.counts = value
                    .split(',')
                    .map(|n| number("--counts", Some(n.to_owned())))
                    .collect::<Result<_, _>>()?;
            }
            "--yields" => options.yields = number("--yields", args.next())?,
            "--repeat" => options.repeat = number("--repeat", args.next())?,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

/// Nanoseconds per yield with `count` green threads sharing `yields` yields.
fn measure(count: usize, yields: usize) -> f64 {
    let rounds = (yields / count).max(1);
    greenweave::run(move || {
        // Spawn them all first: each parks in its first yield until the last one is queued,
        // so the timed part is the round-robin alone.
        let handles: Vec<_> = (0..count)
            .map(|_| {
                greenweave::spawn(move || {
                    for _ in 0..rounds {
                        greenweave::thread::yield_now();
                    }
                })
            })
            .collect();
        // One yield of ours lets each of them run up to its first yield.
        greenweave::thread::yield_now();
        let start = Instant::now();
        for handle in handles {
            handle.join().expect("a yielding green thread never panics");
        }
        start.elapsed().as_nanos() as f64 / (count * rounds) as f64
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("yield_table: {message}\n");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(if message.is_empty() { 0 } else { 2 });
        }
    };
    println!("| runnable green threads | ns per yield |");
    println!("|---|---|");
    for &count in &options.counts {
        let runs = (0..options.repeat)
            .map(|_| measure(count, options.yields))
            .collect();
        println!("| {count} | {:.1} |", median(runs));
    }
    ExitCode::SUCCESS
}
