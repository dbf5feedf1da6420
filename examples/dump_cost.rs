//! What `runtime::dump` costs at scale (issue 24): parks N green threads (default-size stacks,
//! each inside a function of its own, on one `sync::Event`), then takes a dump without
//! backtraces and one with them, and prints for each the time `dump` took, the time to render
//! it (`Display`, which resolves the symbols, then `to_json`), and the resident memory it
//! added (VmRSS from `/proc/self/status`, read before the dump and while it is held).
//!
//! ```sh
//! cargo run --release --example dump_cost                        # 100,000 green threads
//! cargo run --release --example dump_cost -- --count 1000000
//! cargo run --release --example dump_cost -- --count 1000000 --no-backtraces
//! cargo run --release --example dump_cost -- --quick             # 10,000, for CI
//! cargo run --release --example dump_cost -- --shapes 100        # 100 distinct stacks
//! ```
//!
//! `--no-render` skips the `Display` and JSON. `--shapes N` parks the green threads at N
//! depths of one recursion (0 to N - 1 calls deep), round robin, so that their stacks have N
//! distinct shapes (default 1: every one parked through the same calls, the common case that
//! a dump with backtraces walks once per shape). A 256 KiB stack holds a few thousand levels.

use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use greenweave::sync::Event;

const USAGE: &str = "usage: dump_cost [--count N | --quick] [--shapes N] [--no-backtraces]
                 [--no-render]

  --count N          green threads to park (default 100000)
  --quick            park 10000 green threads (for CI)
  --shapes N         park them at N depths of a recursion: N distinct stacks (default 1)
  --no-backtraces    only the dump without backtraces
  --no-render        skip rendering the dumps as text and JSON";

fn main() -> ExitCode {
    let mut count = 100_000usize;
    let mut backtraces = true;
    let mut render = true;
    let mut shapes = 1usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => count = 10_000,
            "--no-backtraces" => backtraces = false,
            "--no-render" => render = false,
            "--count" | "--shapes" => {
                let Some(value) = args
                    .next()
                    .and_then(|value| value.replace('_', "").parse().ok())
                    .filter(|&value| value > 0)
                else {
                    eprintln!("dump_cost: {arg} needs a whole number above 0\n\n{USAGE}");
                    return ExitCode::from(2);
                };
                if arg == "--count" {
                    count = value;
                } else {
                    shapes = value;
                }
            }
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    greenweave::run(move || measure(count, shapes, backtraces, render));
    ExitCode::SUCCESS
}

/// Where every green thread parks: a frame of its own for the backtrace to name, `depth`
/// calls of itself deep.
#[inline(never)]
fn wait_for_the_end(event: &Event, depth: usize) {
    if depth == 0 {
        event.wait();
    } else {
        wait_for_the_end(event, depth - 1);
    }
    // Keeps the recursive call from becoming a jump: each level keeps its frame.
    std::hint::black_box(depth);
}

fn measure(count: usize, shapes: usize, backtraces: bool, render: bool) {
    let event = Rc::new(Event::new());
    let handles: Vec<_> = (0..count)
        .map(|index| {
            let event = event.clone();
            let depth = index % shapes;
            if depth == 0 {
                // The closure of issue 24's measurement, for the same heap layout.
                greenweave::spawn(move || wait_for_the_end(&event, 0))
            } else {
                greenweave::spawn(move || wait_for_the_end(&event, depth))
            }
        })
        .collect();
    greenweave::thread::yield_now(); // every one runs once and parks
    println!("{count} parked green threads, {shapes} distinct stack shape(s)");

    let before = resident_bytes();
    let started = Instant::now();
    let dump = greenweave::runtime::dump_without_backtraces();
    let took = started.elapsed();
    report("without backtraces", &dump, count, took, before, render);
    drop(dump);

    if backtraces {
        let before = resident_bytes();
        let started = Instant::now();
        let dump = greenweave::runtime::dump();
        let took = started.elapsed();
        report("with backtraces", &dump, count, took, before, render);
    }

    event.set();
    for handle in handles {
        handle.join().unwrap();
    }
}

fn report(
    kind: &str,
    dump: &greenweave::runtime::Dump,
    count: usize,
    took: Duration,
    before: usize,
    render: bool,
) {
    let held = resident_bytes();
    assert!(
        dump.green_threads().len() > count,
        "every green thread is listed"
    );
    let added = held.saturating_sub(before);
    if !render {
        println!(
            "{kind:>20}: dump {:>9.3} ms ({:.0} ns per green thread), +{:.1} MiB resident \
             ({:.0} bytes per green thread)",
            took.as_secs_f64() * 1e3,
            took.as_nanos() as f64 / count as f64,
            added as f64 / (1 << 20) as f64,
            added as f64 / count as f64,
        );
        return;
    }
    let started = Instant::now();
    let text = dump.to_string();
    let rendered = started.elapsed();
    let started = Instant::now();
    let json = dump.to_json();
    let jsoned = started.elapsed();
    println!(
        "{kind:>20}: dump {:>9.3} ms ({:.0} ns per green thread), +{:.1} MiB resident \
         ({:.0} bytes per green thread); Display {:>9.3} ms ({:.1} MiB of text), JSON {:.3} ms \
         ({:.1} MiB)",
        took.as_secs_f64() * 1e3,
        took.as_nanos() as f64 / count as f64,
        added as f64 / (1 << 20) as f64,
        added as f64 / count as f64,
        rendered.as_secs_f64() * 1e3,
        text.len() as f64 / (1 << 20) as f64,
        jsoned.as_secs_f64() * 1e3,
        json.len() as f64 / (1 << 20) as f64,
    );
}

/// VmRSS, in bytes.
fn resident_bytes() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmRSS:")
                    .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .map_or(0, |kib: usize| kib * 1024)
}
