//! The latency table: what one context switch, one coroutine round trip and one coroutine's
//! whole life cost, next to the OS-thread round trip they replace, all from the same run.
//!
//! ```text
//! cargo run --release --example switch_latency                # the table
//! cargo run --release --example switch_latency -- --json      # the same data as JSON
//! cargo run --release --example switch_latency -- --quick     # tiny counts, for CI and qemu
//! ```
//!
//! # Method
//!
//! Each row is a loop from `benches/loops/mod.rs`: prepared once (spawning a thread, starting a
//! coroutine, all left out of the timing), then called with a number of iterations of one
//! operation, returning how long they took. A row is run once untimed to warm caches, the
//! stack pool and the branch predictors, then `--samples` times (15 by default); each sample
//! gives nanoseconds per iteration, and the table reports the median with the minimum and
//! maximum around it. The ratio column divides a row's median by the first row's, the bare
//! switch.
//!
//! Iteration counts are fixed per row so that one sample takes roughly 10–50 ms on a current
//! x86_64 machine; `--iterations-scale` multiplies them all, and `--quick` shrinks them (and
//! the number of samples) enough to finish in well under a second natively.
//!
//! # Adding a row
//!
//! Add the loop to `benches/loops/mod.rs` (where criterion and `benches/count_instructions.py`
//! find it too), then append a [`Row`] to [`ROWS`]: a name, a base iteration count, and the
//! loop's `<group>/<function>` id.

use std::fmt::Write as _;
use std::process::ExitCode;

#[path = "../benches/loops/mod.rs"]
mod loops;

/// One line of the table.
struct Row {
    /// What one iteration is, as printed.
    name: &'static str,
    /// Iterations per sample at `--iterations-scale 1`, sized for roughly 10–50 ms natively.
    iterations: u64,
    /// The loop that measures it: `<group>/<function>` in `benches/loops/mod.rs`, the table the
    /// criterion benches and the instruction counter use too.
    measured_by: &'static str,
}

/// Every row, in the order printed. The first is the unit of the ratio column.
const ROWS: &[Row] = &[
    Row {
        name: "raw switch round trip",
        iterations: 10_000_000,
        measured_by: "raw_switch_round_trip/asymmetric",
    },
    Row {
        name: "raw symmetric switch round trip (greenlet-style)",
        iterations: 10_000_000,
        measured_by: "raw_switch_round_trip/symmetric",
    },
    Row {
        name: "coroutine resume+suspend round trip",
        iterations: 5_000_000,
        measured_by: "coroutine_round_trip/greenweave",
    },
    Row {
        name: "coroutine round trip, resume in a non-inlined fn",
        iterations: 2_000_000,
        measured_by: "coroutine_round_trip_out_of_line/greenweave",
    },
    Row {
        name: "coroutine create+run+drop (pooled stack)",
        iterations: 1_000_000,
        measured_by: "coroutine_create_run_drop/greenweave_pool",
    },
    Row {
        name: "  the same round trip in corosensei (comparison)",
        iterations: 5_000_000,
        measured_by: "coroutine_round_trip/corosensei",
    },
    Row {
        name: "  create+run+drop in corosensei (comparison)",
        iterations: 1_000_000,
        measured_by: "coroutine_create_run_drop/corosensei",
    },
    Row {
        name: "greenlet switch round trip (main <-> greenlet)",
        iterations: 2_000_000,
        measured_by: "greenlet_round_trip/greenweave",
    },
    Row {
        name: "scheduler yield_now round trip (2 green threads)",
        iterations: 1_000_000,
        measured_by: "yield_now_round_trip/greenweave",
    },
    Row {
        name: "channel ping-pong round trip (2 green threads)",
        iterations: 500_000,
        measured_by: "channel_ping_pong/greenweave",
    },
    Row {
        name: "green thread spawn+join (trivial body)",
        iterations: 500_000,
        measured_by: "spawn_join/greenweave",
    },
    Row {
        name: "OS thread round trip (mpsc, 2 threads)",
        iterations: 1_000,
        measured_by: "channel_ping_pong/std_thread",
    },
];

/// Command-line settings.
struct Options {
    json: bool,
    samples: usize,
    iterations_scale: f64,
}

const USAGE: &str = "\
Usage: cargo run --release --example switch_latency -- [OPTIONS]

Prints the median nanoseconds per operation of greenweave's context switch, coroutine round
trip and coroutine lifecycle, next to an OS-thread round trip, from one run.

Options:
  --json                     print the results as JSON instead of a table
  --samples <n>              timed samples per row (default 15)
  --iterations-scale <f>     multiply every row's iterations per sample by <f> (default 1)
  --quick                    tiny counts for CI and emulators (--samples 5, --iterations-scale 0.01)
  -h, --help                 print this help";

impl Options {
    /// Parses the arguments after the program name. `Ok(None)` means help was asked for.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
        let mut options = Options {
            json: false,
            samples: 15,
            iterations_scale: 1.0,
        };
        while let Some(arg) = args.next() {
            // Accept both `--flag value` and `--flag=value`.
            let (flag, inline_value) = match arg.split_once('=') {
                Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
                None => (arg, None),
            };
            let mut value = |name: &str| {
                inline_value
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match flag.as_str() {
                "--json" => options.json = true,
                "--quick" => {
                    options.samples = 5;
                    options.iterations_scale = 0.01;
                }
                "--samples" => {
                    options.samples = value("--samples")?
                        .parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or("--samples needs a positive whole number")?;
                }
                "--iterations-scale" => {
                    options.iterations_scale = value("--iterations-scale")?
                        .parse()
                        .ok()
                        .filter(|&f: &f64| f.is_finite() && f > 0.0)
                        .ok_or("--iterations-scale needs a positive number")?;
                }
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        Ok(Some(options))
    }

    /// Iterations per sample for `row`: its base count scaled, and at least one.
    fn iterations(&self, row: &Row) -> u64 {
        ((row.iterations as f64 * self.iterations_scale).round() as u64).max(1)
    }
}

/// The summary of one row's samples, in nanoseconds per iteration.
struct Measurement {
    name: &'static str,
    median_ns: f64,
    min_ns: f64,
    max_ns: f64,
    iterations: u64,
    samples: usize,
}

/// Prepares `row`'s loop, warms it up, then times `samples` runs of `iterations` each.
fn measure(row: &Row, iterations: u64, samples: usize) -> Measurement {
    let measured_by = loops::LOOPS
        .iter()
        .find(|each| each.id() == row.measured_by)
        .unwrap_or_else(|| panic!("no loop {} in benches/loops/mod.rs", row.measured_by));
    let mut run = (measured_by.prepare)();
    run(iterations);
    let mut per_iteration: Vec<f64> = (0..samples)
        .map(|_| run(iterations).as_nanos() as f64 / iterations as f64)
        .collect();
    per_iteration.sort_by(f64::total_cmp);
    Measurement {
        name: row.name,
        median_ns: median(&per_iteration),
        min_ns: per_iteration[0],
        max_ns: per_iteration[per_iteration.len() - 1],
        iterations,
        samples,
    }
}

/// The median of a sorted, non-empty slice.
fn median(sorted: &[f64]) -> f64 {
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

/// The command that reproduces this run (profile and arguments), for the table's header.
fn command_line() -> String {
    let mut command = String::from("cargo run");
    if !cfg!(debug_assertions) {
        command.push_str(" --release");
    }
    command.push_str(" --example switch_latency");
    let extra: Vec<String> = std::env::args().skip(1).collect();
    if !extra.is_empty() {
        command.push_str(" -- ");
        command.push_str(&extra.join(" "));
    }
    command
}

/// The cargo profile this was built with, as far as it can tell.
fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

fn print_table(options: &Options, results: &[Measurement]) {
    let baseline = results[0].median_ns;
    println!(
        "greenweave switch latency on {} ({})",
        std::env::consts::ARCH,
        command_line()
    );
    if cfg!(debug_assertions) {
        println!("warning: debug build; these numbers say little, pass --release");
    }
    println!(
        "nanoseconds per operation, median of {} samples after one warm-up run\n",
        options.samples
    );
    let name_width = results.iter().map(|m| m.name.len()).max().unwrap_or(0);
    println!(
        "{:<name_width$}  {:>10}  {:>10}  {:>10}  {:>9}  {:>10}",
        "operation", "median ns", "min ns", "max ns", "ratio", "iterations"
    );
    for m in results {
        println!(
            "{:<name_width$}  {:>10.2}  {:>10.2}  {:>10.2}  {:>8.1}x  {:>10}",
            m.name,
            m.median_ns,
            m.min_ns,
            m.max_ns,
            m.median_ns / baseline,
            m.iterations
        );
    }
}

/// A JSON string literal for `text`.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number for `value`; JSON has no infinities or NaN, so those become `null`.
fn json_number(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.3}")
    } else {
        "null".to_owned()
    }
}

fn print_json(results: &[Measurement]) {
    let baseline = results[0].median_ns;
    let rows: Vec<String> = results
        .iter()
        .map(|m| {
            format!(
                "    {{\"name\": {}, \"median_ns\": {}, \"min_ns\": {}, \"max_ns\": {}, \
                 \"ratio\": {}, \"iterations\": {}, \"samples\": {}}}",
                json_string(m.name),
                json_number(m.median_ns),
                json_number(m.min_ns),
                json_number(m.max_ns),
                json_number(m.median_ns / baseline),
                m.iterations,
                m.samples
            )
        })
        .collect();
    println!(
        "{{\n  \"arch\": {},\n  \"profile\": {},\n  \"rows\": [\n{}\n  ]\n}}",
        json_string(std::env::consts::ARCH),
        json_string(profile()),
        rows.join(",\n")
    );
}

fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("switch_latency: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let results: Vec<Measurement> = ROWS
        .iter()
        .map(|row| measure(row, options.iterations(row), options.samples))
        .collect();
    if options.json {
        print_json(&results);
    } else {
        print_table(&options, &results);
    }
    ExitCode::SUCCESS
}
