//! How the cost of a yield grows with the number of runnable green threads: N green threads
//! (N = 10, 32, 33, 1,024, 1,025, 100,000) each call `thread::yield_now` in a loop, round-robin
//! through the scheduler's FIFO ready queue, and the table gives nanoseconds per yield (one
//! switch into a green thread and one out, plus the queue). Each row makes about the same
//! number of yields, so the rows take about as long as each other; rows are repeated
//! (`--repeat`) and the median printed.
//!
//! 1,024 and 1,025 straddle the queue length from which the scheduler prefetches (its
//! `PREFETCH_MIN_QUEUE`), and 32 and 33 the one it used to be: a hint that misbehaves shows
//! there as a step (issue 33 found a yield among 33 costing 19 times one among 32). After the table, every step between neighbouring
//! rows is checked against the caches: a step of more than 1.5x is explained only if the
//! green threads' working set (about [`BYTES_PER_GREEN_THREAD`] each) outgrows a cache level
//! of this CPU between the two rows. An unexplained step is printed as such; with `--check`
//! it also makes the exit status 1.
//!
//! ```sh
//! cargo run --release --example yield_table                 # 2,000,000 yields a row, 5 repeats
//! cargo run --release --example yield_table -- --quick      # up to 1,025, 20,000 yields (CI)
//! cargo run --release --example yield_table -- --counts 10,100000 --yields 4000000
//! ```
//!
//! `BENCHMARKS.md` ("Cost at scale") has the table, against Go's `runtime.Gosched`
//! (`benches/scale_compare.py` runs both).

use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str =
    "usage: yield_table [--quick] [--counts N,N,...] [--yields Y] [--repeat R] [--check]

  --counts N,...        numbers of runnable green threads (default 10,32,33,1024,1025,100000)
  --yields Y            yields per row, shared among its green threads (default 2000000)
  --repeat R            runs of each row; the median is printed (default 5)
  --quick               10, 32, 33, 1024 and 1025 green threads, 20000 yields a row, one run (CI)
  --check               exit with status 1 if a step between rows is larger than the caches
                        explain";

/// What one runnable green thread's yield touches, for the step check: the hot lines of its
/// task record (4 of 64 bytes) and its stack from the saved frame to the top (a yield parks
/// about 312 bytes below it: 5 lines). An estimate; it only decides which rows a cache level
/// falls between.
const BYTES_PER_GREEN_THREAD: usize = 9 * 64;

/// A step between neighbouring rows up to this ratio passes without explanation (noise, the
/// queue's own growth).
const UNEXPLAINED_STEP_LIMIT: f64 = 1.5;

struct Options {
    counts: Vec<usize>,
    yields: usize,
    repeat: usize,
    check: bool,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        counts: vec![10, 32, 33, 1_024, 1_025, 100_000],
        yields: 2_000_000,
        repeat: 5,
        check: false,
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
                options.counts = vec![10, 32, 33, 1_024, 1_025];
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
            "--check" => options.check = true,
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
    let mut rows = Vec::new();
    for &count in &options.counts {
        let runs = (0..options.repeat)
            .map(|_| measure(count, options.yields))
            .collect();
        let ns = median(runs);
        println!("| {count} | {ns:.1} |");
        rows.push((count, ns));
    }
    let caches = cache_sizes();
    let unexplained = unexplained_steps(&rows, &caches);
    for step in &unexplained {
        println!("unexplained step: {step}");
    }
    if unexplained.is_empty() {
        println!(
            "steps: none above {UNEXPLAINED_STEP_LIMIT}x that the caches ({}) do not explain",
            describe(&caches)
        );
    }
    if options.check && !unexplained.is_empty() {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// The steps between neighbouring rows (`(green threads, ns per yield)`, in the order run)
/// that grow by more than [`UNEXPLAINED_STEP_LIMIT`] while the working set outgrows no cache.
fn unexplained_steps(rows: &[(usize, f64)], caches: &[usize]) -> Vec<String> {
    rows.windows(2)
        .filter_map(|pair| {
            let [(from, from_ns), (to, to_ns)] = [pair[0], pair[1]];
            let ratio = to_ns / from_ns;
            let (small, large) = (
                from.min(to) * BYTES_PER_GREEN_THREAD,
                from.max(to) * BYTES_PER_GREEN_THREAD,
            );
            let crosses_a_cache = caches.iter().any(|&size| small <= size && size < large);
            (ratio > UNEXPLAINED_STEP_LIMIT && !crosses_a_cache).then(|| {
                format!(
                    "{from} -> {to} green threads: {ratio:.1}x per yield, while their working set \
                     ({small} -> {large} bytes) stays within one cache level"
                )
            })
        })
        .collect()
}

/// The data and unified cache sizes of CPU 0, from sysfs (empty if it cannot be read: then
/// every large step is reported).
fn cache_sizes() -> Vec<usize> {
    let mut sizes = Vec::new();
    for index in 0.. {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
        let Ok(kind) = std::fs::read_to_string(format!("{dir}/type")) else {
            break;
        };
        if kind.trim() == "Instruction" {
            continue;
        }
        let Ok(size) = std::fs::read_to_string(format!("{dir}/size")) else {
            continue;
        };
        let size = size.trim();
        let (digits, unit) = size.split_at(size.trim_end_matches(char::is_alphabetic).len());
        let Ok(number) = digits.parse::<usize>() else {
            continue;
        };
        sizes.push(match unit {
            "K" => number << 10,
            "M" => number << 20,
            "G" => number << 30,
            _ => number,
        });
    }
    sizes
}

fn describe(caches: &[usize]) -> String {
    if caches.is_empty() {
        return "unknown".to_owned();
    }
    caches
        .iter()
        .map(|size| format!("{} KiB", size >> 10))
        .collect::<Vec<_>>()
        .join(", ")
}
