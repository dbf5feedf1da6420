//! Millions of parked green threads, compacted (issue 32): spawns N green threads in waves,
//! each parked in `thread::park()`, and waits after each wave until the runtime has compacted
//! it (`runtime::Builder::compact_parked_stacks`, threshold 200 ms), so that only one wave is
//! ever parked uncompacted (ten million parked at once, each holding its stack's top page,
//! would need about 52 GB). Then prints the memory per parked green thread (VmRSS, and the page
//! tables, VmPTE, which are not in VmRSS), the frame bytes each keeps on the heap, the time to
//! spawn and park them, and the wake-up of 2,000 compacted green threads against 2,000 parked
//! for less than the threshold: the time from `unpark` until the woken green thread runs (p50,
//! p99, max; it parks again at once). Finally wakes and joins them all, a wave at a time.
//!
//! ```sh
//! cargo run --release --example compacted_millions -- --count 10000000 --wave 500000
//! cargo run --release --example compacted_millions -- --quick     # 20,000, for CI
//! ```
//!
//! Needs guard regions (Linux 6.13+) for counts above about 30,000 (a `PROT_NONE` guard page is
//! two memory mappings per stack, and `vm.max_map_count` is 65530 by default), and Linux 6.14+
//! for the page tables of compacted stacks to be freed (before, each keeps about 520 bytes of
//! them).

use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use greenweave::thread::JoinHandle;

const USAGE: &str = "usage: compacted_millions [--count N] [--wave W] [--quick]

  --count N   green threads to park and compact (default 1000000)
  --wave W    how many are spawned before waiting for their compaction (default 250000)
  --quick     20000 in waves of 10000 (for CI)";

/// How long a green thread stays parked before it is compacted.
const THRESHOLD: Duration = Duration::from_millis(200);

/// Green threads in each wake-up sample.
const WAKE_SAMPLE: usize = 2_000;

/// How long the compaction count may stand still before the example gives up.
const STALL_LIMIT: Duration = Duration::from_secs(60);

fn parse() -> Result<(usize, usize), String> {
    let (mut count, mut wave) = (1_000_000, 250_000);
    let mut args = std::env::args().skip(1);
    let number = |value: Option<String>, name: &str| -> Result<usize, String> {
        let value = value.ok_or(format!("{name} needs a value"))?;
        value
            .replace('_', "")
            .parse()
            .map_err(|_| format!("{name}: {value:?} is not a whole number"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--count" => count = number(args.next(), "--count")?,
            "--wave" => wave = number(args.next(), "--wave")?,
            "--quick" => (count, wave) = (20_000, 10_000),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if count < 2 * WAKE_SAMPLE || wave == 0 {
        return Err(format!(
            "--count must be at least {} and --wave at least 1",
            2 * WAKE_SAMPLE
        ));
    }
    Ok((count, wave))
}

/// A field of `/proc/self/status`, in bytes.
fn status(name: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<usize>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}

fn gib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Green threads compacted now: compactions less restorations.
fn compacted_now() -> u64 {
    let metrics = greenweave::runtime::metrics();
    metrics.stack_compaction_count() - metrics.stack_restoration_count()
}

/// Sleeps until `count` green threads are compacted at once.
fn wait_for_compaction(count: usize) -> Result<(), String> {
    let mut last = (compacted_now(), Instant::now());
    while compacted_now() < count as u64 {
        greenweave::thread::sleep(Duration::from_millis(5));
        let now = compacted_now();
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > STALL_LIMIT {
            return Err(format!(
                "only {now} of {count} green threads compacted, and none more for {} s",
                STALL_LIMIT.as_secs()
            ));
        }
    }
    Ok(())
}

/// What the green threads share with the main one: when the last woken one ran, and whether
/// they should end.
#[derive(Clone, Default)]
struct Shared {
    woke_at: Rc<Cell<Option<Instant>>>,
    stop: Rc<Cell<bool>>,
}

/// Spawns `count` green threads that park until unparked, note when they run again, and park
/// again, until `shared.stop`.
fn spawn_parked(count: usize, shared: &Shared) -> Result<Vec<JoinHandle<()>>, String> {
    (0..count)
        .map(|_| {
            let shared = shared.clone();
            greenweave::thread::Builder::new()
                .spawn(move || {
                    loop {
                        greenweave::thread::park();
                        if shared.stop.get() {
                            return;
                        }
                        shared.woke_at.set(Some(Instant::now()));
                    }
                })
                .map_err(|error| format!("could not spawn a green thread: {error}"))
        })
        .collect()
}

/// The time from unparking each of `handles` until it runs (the ready queue is FIFO: the one
/// woken runs when the caller yields); each parks again at once.
fn wake_latencies(handles: &[JoinHandle<()>], shared: &Shared) -> Vec<Duration> {
    handles
        .iter()
        .map(|handle| {
            shared.woke_at.set(None);
            let start = Instant::now();
            handle.thread().unpark();
            greenweave::thread::yield_now();
            let woke_at = shared
                .woke_at
                .get()
                .expect("the woken green thread ran first");
            woke_at.saturating_duration_since(start)
        })
        .collect()
}

fn percentiles(mut latencies: Vec<Duration>) -> String {
    latencies.sort();
    let at = |fraction: f64| {
        latencies[((latencies.len() - 1) as f64 * fraction) as usize].as_secs_f64() * 1e6
    };
    format!(
        "p50 {:>7.2} us, p99 {:>7.2} us, max {:>8.2} us",
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

fn park_and_measure(count: usize, wave: usize) -> Result<(), String> {
    let (rss_before, pte_before) = (status("VmRSS:"), status("VmPTE:"));
    let shared = Shared::default();
    let mut handles: Vec<JoinHandle<()>> = Vec::with_capacity(count);
    let started = Instant::now();
    let mut spawning = Duration::ZERO;
    while handles.len() < count {
        let spawn_started = Instant::now();
        handles.extend(spawn_parked(wave.min(count - handles.len()), &shared)?);
        // FIFO: one yield lets every new green thread run up to its park.
        greenweave::thread::yield_now();
        spawning += spawn_started.elapsed();
        wait_for_compaction(handles.len())?;
        eprintln!(
            "{} parked and compacted after {:.1} s; VmRSS {:.2} GiB",
            handles.len(),
            started.elapsed().as_secs_f64(),
            gib(status("VmRSS:"))
        );
    }
    let metrics = greenweave::runtime::metrics();
    let (rss, pte) = (status("VmRSS:"), status("VmPTE:"));
    let per = |bytes: usize| bytes as f64 / count as f64;
    println!(
        "{count} green threads parked and compacted in {:.1} s; spawning and parking took \
         {:.1} s ({:.0} ns per green thread)",
        started.elapsed().as_secs_f64(),
        spawning.as_secs_f64(),
        spawning.as_nanos() as f64 / count as f64
    );
    println!(
        "per compacted green thread: VmRSS {:.0} B, VmPTE {:.0} B, together {:.0} B; of which \
         frames on the heap {:.0} B (compacted_stack_bytes)",
        per(rss.saturating_sub(rss_before)),
        per(pte.saturating_sub(pte_before)),
        per(rss.saturating_sub(rss_before) + pte.saturating_sub(pte_before)),
        per(metrics.compacted_stack_bytes() as usize)
    );
    println!(
        "total: VmRSS {:.2} GiB, VmPTE {:.2} GiB",
        gib(rss.saturating_sub(rss_before)),
        gib(pte.saturating_sub(pte_before))
    );

    // Wake-ups: a fresh sample parked for less than the threshold, then compacted ones spread
    // over the whole population.
    let fresh = spawn_parked(WAKE_SAMPLE, &shared)?;
    greenweave::thread::yield_now();
    let uncompacted = wake_latencies(&fresh, &shared);
    let restored_before = metrics.stack_restoration_count();
    let step = count / WAKE_SAMPLE;
    let mut sample = Vec::with_capacity(WAKE_SAMPLE);
    let mut rest = Vec::with_capacity(count);
    for (index, handle) in handles.into_iter().enumerate() {
        if index % step == 0 && sample.len() < WAKE_SAMPLE {
            sample.push(handle);
        } else {
            rest.push(handle);
        }
    }
    let mut handles = rest;
    let compacted = wake_latencies(&sample, &shared);
    let restored = greenweave::runtime::metrics().stack_restoration_count() - restored_before;
    println!("wake-up, from unpark until the woken green thread runs:");
    println!(
        "  parked < {} ms (not compacted): {}",
        THRESHOLD.as_millis(),
        percentiles(uncompacted)
    );
    println!(
        "  compacted ({restored} restored):        {}",
        percentiles(compacted)
    );
    shared.stop.set(true);
    for handle in fresh.into_iter().chain(sample) {
        handle.thread().unpark();
        handle
            .join()
            .map_err(|error| format!("a green thread failed: {error}"))?;
    }

    let ending = Instant::now();
    while !handles.is_empty() {
        let rest = handles.split_off(handles.len().saturating_sub(wave));
        // `stop` is set: each ends when unparked.
        for handle in &rest {
            handle.thread().unpark();
        }
        for handle in rest {
            handle
                .join()
                .map_err(|error| format!("a green thread failed: {error}"))?;
        }
    }
    println!(
        "woke and joined the rest in {:.1} s",
        ending.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> ExitCode {
    let (count, wave) = match parse() {
        Ok(parsed) => parsed,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("compacted_millions: {message}\n");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(if message.is_empty() { 0 } else { 2 });
        }
    };
    // SAFETY: no green thread here lends its stack to another OS thread.
    let builder = unsafe {
        greenweave::Runtime::builder()
            .stack_release(Some(THRESHOLD))
            .compact_parked_stacks()
    };
    let runtime = builder
        .build()
        .expect("a runtime with these settings builds");
    match runtime.run(move || park_and_measure(count, wave)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("compacted_millions: {message}");
            ExitCode::FAILURE
        }
    }
}
