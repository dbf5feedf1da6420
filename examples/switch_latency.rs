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
//! Each row is a function that performs a given number of iterations of one operation and
//! returns how long they took, with any setup (spawning a thread, creating a coroutine) left
//! out of the timing. A row is run once untimed to warm caches, the stack pool and the branch
//! predictors, then `--samples` times (15 by default); each sample gives nanoseconds per
//! iteration, and the table reports the median with the minimum and maximum around it. The
//! ratio column divides a row's median by the first row's, the bare switch.
//!
//! Iteration counts are fixed per row so that one sample takes roughly 10–50 ms on a current
//! x86_64 machine; `--iterations-scale` multiplies them all, and `--quick` shrinks them (and
//! the number of samples) enough to finish in well under a second natively.
//!
//! # Adding a row
//!
//! Append a [`Row`] to [`ROWS`]: a name, a base iteration count, and a `fn(u64) -> Duration`
//! that runs that many iterations and times only the loop.

use std::fmt::Write as _;
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use greenweave::bench_support::{raw_switch_round_trips, raw_symmetric_switch_round_trips};
use greenweave::greenlet::{self, Greenlet};
use greenweave::{Coroutine, CoroutineResult};

/// One line of the table.
struct Row {
    /// What one iteration is, as printed.
    name: &'static str,
    /// Iterations per sample at `--iterations-scale 1`, sized for roughly 10–50 ms natively.
    iterations: u64,
    /// Runs the given number of iterations and returns the time the iterations alone took.
    run: fn(u64) -> Duration,
}

/// Every row, in the order printed. The first is the unit of the ratio column.
const ROWS: &[Row] = &[
    Row {
        name: "raw switch round trip",
        iterations: 10_000_000,
        run: raw_switch_round_trips,
    },
    Row {
        name: "raw symmetric switch round trip (greenlet-style)",
        iterations: 10_000_000,
        run: raw_symmetric_switch_round_trips,
    },
    Row {
        name: "coroutine resume+suspend round trip",
        iterations: 5_000_000,
        run: coroutine_round_trips,
    },
    Row {
        name: "coroutine round trip, resume in a non-inlined fn",
        iterations: 2_000_000,
        run: coroutine_round_trips_out_of_line,
    },
    Row {
        name: "coroutine create+run+drop (pooled stack)",
        iterations: 1_000_000,
        run: coroutine_lifecycles,
    },
    Row {
        name: "greenlet switch round trip (main <-> greenlet)",
        iterations: 2_000_000,
        run: greenlet_round_trips,
    },
    Row {
        name: "scheduler yield_now round trip (2 green threads)",
        iterations: 1_000_000,
        run: yield_round_trips,
    },
    Row {
        name: "channel ping-pong round trip (2 green threads)",
        iterations: 500_000,
        run: channel_round_trips,
    },
    Row {
        name: "green thread spawn+join (trivial body)",
        iterations: 500_000,
        run: green_spawn_joins,
    },
    Row {
        name: "OS thread round trip (mpsc, 2 threads)",
        iterations: 1_000,
        run: thread_round_trips,
    },
];

/// A coroutine that hands each input straight back from `suspend`, forever.
type Echo = Coroutine<u64, u64, ()>;

/// `resume` into an echo coroutine, called straight from the timing loop (rustc inlines it
/// there, so nothing returns between trips).
fn coroutine_round_trips(iterations: u64) -> Duration {
    echo_round_trips(iterations, |echo, input| echo.resume(input))
}

/// `resume` into an echo coroutine from a function of its own that is called, and returns,
/// on every trip, as in a program whose resume is not in the same loop as its caller. Compared
/// with the inlined row, this exposes the cost of what the switch does to return prediction:
/// a `ret` after the switch costs nothing only if the CPU predicts it.
fn coroutine_round_trips_out_of_line(iterations: u64) -> Duration {
    #[inline(never)]
    fn resume(echo: &mut Echo, input: u64) -> CoroutineResult<u64, ()> {
        echo.resume(input)
    }
    echo_round_trips(iterations, resume)
}

/// Times `iterations` round trips into a started echo coroutine, each made by `resume`.
fn echo_round_trips(
    iterations: u64,
    resume: impl Fn(&mut Echo, u64) -> CoroutineResult<u64, ()>,
) -> Duration {
    let mut echo = Echo::new(|yielder, mut value| {
        loop {
            value = yielder.suspend(value);
        }
    });
    // Start the body so that every timed resume is a resume into `suspend`.
    black_box(echo.resume(0));
    let start = Instant::now();
    for i in 0..iterations {
        black_box(resume(&mut echo, black_box(i)));
    }
    let elapsed = start.elapsed();
    // Dropping the suspended echo loop unwinds it; that is not part of what is measured.
    drop(echo);
    elapsed
}

/// Create a coroutine on a default-size (pooled) stack, run its trivial body to the end and
/// drop it. The warm-up run leaves a stack in this thread's pool, so no iteration maps memory.
fn coroutine_lifecycles(iterations: u64) -> Duration {
    let start = Instant::now();
    for i in 0..iterations {
        let mut coroutine = Coroutine::<u64, (), u64>::new(|_, input| black_box(input));
        match coroutine.resume(black_box(i)) {
            CoroutineResult::Return(value) => {
                black_box(value);
            }
            CoroutineResult::Yield(()) => unreachable!("the body never suspends"),
        }
        drop(coroutine);
    }
    start.elapsed()
}

/// `switch` from the main greenlet into a greenlet that switches every value straight back
/// to main: two greenlet switches per iteration.
fn greenlet_round_trips(iterations: u64) -> Duration {
    let echo = Greenlet::new(|mut value: Option<u64>| {
        let main = greenlet::current::<Option<u64>>()
            .parent()
            .expect("created by main");
        loop {
            value = main.switch(value);
        }
    });
    // Start it, so that every timed switch is a switch into a suspended greenlet.
    black_box(echo.switch(Some(0)));
    let start = Instant::now();
    for i in 0..iterations {
        black_box(echo.switch(black_box(Some(i))));
    }
    let elapsed = start.elapsed();
    // Dropping the last handle to the suspended greenlet unwinds it; not part of the timing.
    drop(echo);
    elapsed
}

/// Two green threads that both loop on `yield_now`: one iteration is one yield by each, so
/// two trips through the scheduler's ready queue. Timed inside the runtime, from the main
/// green thread, so runtime start-up and shutdown are not counted.
fn yield_round_trips(iterations: u64) -> Duration {
    greenweave::run(move || {
        let partner = greenweave::spawn(move || {
            for _ in 0..iterations {
                greenweave::thread::yield_now();
            }
        });
        let start = Instant::now();
        for _ in 0..iterations {
            greenweave::thread::yield_now();
        }
        let elapsed = start.elapsed();
        partner.join().expect("the partner only yields");
        elapsed
    })
}

/// Ping-pong one word between two green threads over a pair of unbounded green channels:
/// one iteration is a send and a receive on each side.
fn channel_round_trips(iterations: u64) -> Duration {
    use greenweave::sync::mpsc;
    greenweave::run(move || {
        let (to_echo, echo_inbox) = mpsc::channel::<u64>();
        let (to_main, main_inbox) = mpsc::channel::<u64>();
        let echo = greenweave::spawn(move || {
            for value in echo_inbox.iter() {
                to_main.send(value).expect("main outlives the echo loop");
            }
        });
        let start = Instant::now();
        for i in 0..iterations {
            to_echo
                .send(black_box(i))
                .expect("the echo loop is running");
            black_box(main_inbox.recv().expect("the echo loop answers"));
        }
        let elapsed = start.elapsed();
        drop(to_echo);
        echo.join()
            .expect("the echo loop ends when its sender goes");
        elapsed
    })
}

/// Spawn a green thread with a trivial body (default stack, from the pool) and join it.
fn green_spawn_joins(iterations: u64) -> Duration {
    greenweave::run(move || {
        let start = Instant::now();
        for i in 0..iterations {
            let handle = greenweave::spawn(move || black_box(i));
            black_box(handle.join().expect("the body cannot panic"));
        }
        start.elapsed()
    })
}

/// Ping-pong one word between this thread and an echo thread over a pair of `mpsc` channels:
/// what a user would write to hand work to another OS thread and wait for the answer.
fn thread_round_trips(iterations: u64) -> Duration {
    let (to_echo, echo_inbox) = mpsc::channel::<u64>();
    let (to_main, main_inbox) = mpsc::channel::<u64>();
    let echo = thread::spawn(move || {
        for value in echo_inbox {
            if to_main.send(value).is_err() {
                break;
            }
        }
    });
    // One untimed trip, so the echo thread is running before the clock starts.
    to_echo.send(0).expect("echo thread exited");
    main_inbox.recv().expect("echo thread exited");

    let start = Instant::now();
    for i in 0..iterations {
        to_echo.send(black_box(i)).expect("echo thread exited");
        black_box(main_inbox.recv().expect("echo thread exited"));
    }
    let elapsed = start.elapsed();

    drop(to_echo); // ends the echo thread's loop
    echo.join().expect("echo thread panicked");
    elapsed
}

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

/// Warms `row` up, then times `samples` runs of `iterations` each.
fn measure(row: &Row, iterations: u64, samples: usize) -> Measurement {
    (row.run)(iterations);
    let mut per_iteration: Vec<f64> = (0..samples)
        .map(|_| (row.run)(iterations).as_nanos() as f64 / iterations as f64)
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
