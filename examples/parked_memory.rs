//! Resident memory per parked green thread: parks N green threads (default-size, 256 KiB
//! stacks) on one `sync::Event`, reads `VmRSS` and `RssAnon` from `/proc/self/status` before
//! spawning and while all of them are parked, and prints the total and the cost per green
//! thread, the number of memory mappings, and which kind of guard page the stacks use. Then it
//! sets the event and joins every green thread.
//!
//! ```sh
//! cargo run --release --example parked_memory                    # 100,000 green threads
//! cargo run --release --example parked_memory -- --count 1000000
//! cargo run --release --example parked_memory -- --quick         # 10,000, for CI
//! cargo run --release --example parked_memory -- --deep --count 10000
//! cargo run --release --example parked_memory -- --compact --count 1000000
//! ```
//!
//! With `--deep`, each green thread first goes 128 KiB deep (a handler that once parsed a
//! large request), then parks; the example prints the memory held right after they park, then
//! waits until the runtime's long-park sweep (`runtime::Builder::stack_release`, set to 5 s
//! here so that the first sweep comes after the measurement; the default is 1 s) has released
//! their stacks below the stack pointer, and prints it again: the bytes held before and after
//! the release. The release frees data pages, not the page tables that
//! mapped them (VmPTE stays).
//!
//! With `--compact`, the runtime compacts long-parked green threads
//! (`runtime::Builder::compact_parked_stacks`, threshold 1 s): their live frames are copied to
//! the heap and their whole stack is released. Each green thread then waits in
//! `thread::park()` (woken by its `Thread::unpark`) instead of on the event, noting the time
//! it wakes. The example prints the memory held once all have parked, waits until every one
//! has been compacted and prints it again, with the frame bytes each keeps on the heap. It
//! also measures the wake-up latency (from `unpark` until the woken green thread runs) of a
//! sample of green threads parked for less than the threshold (the last spawned, woken before
//! any wait) and of a sample of other, compacted ones, and prints both and their ratio: the
//! price of restoring the frames and faulting the stack page back in.
//!
//! Each stack's guard page is either a guard region (Linux 6.13+, `MADV_GUARD_INSTALL`: one
//! mapping per stack, and neighbouring stacks merge into one) or a `PROT_NONE` page (two
//! mappings per stack, none merge). In the second case the kernel's `vm.max_map_count` (65530
//! by default) caps the process near 32,000 stacks; the example checks the count against it
//! before spawning anything.

use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use greenweave::Stack;
use greenweave::sync::Event;
use greenweave::thread::JoinHandle;

const USAGE: &str =
    "usage: parked_memory [--count N | --quick] [--deep | --compact [--wake-sample K]]

  --count N   green threads to park, each on a default-size (256 KiB) stack (default 100000)
  --quick     park 10000 green threads (for CI)
  --deep      each green thread goes 128 KiB deep before it parks; print memory after they
              park and again after the long-park sweep has released their deep pages
  --compact   compact green threads parked for 1 s (Builder::compact_parked_stacks): each
              waits in thread::park(); print memory after they park and again once all are
              compacted, and the wake-up latency of K green threads parked for less than 1 s
              against K compacted ones (p50, p99, max and the ratio of the p50s)
  --wake-sample K
              green threads in each wake-up sample with --compact (default 2000, at most
              half of N)

Prints resident memory (VmRSS, RssAnon and the page tables, VmPTE, from /proc/self/status)
before spawning and while all green threads are parked, per green thread, the number of memory
mappings and the guard kind.
If N stacks need more memory mappings than vm.max_map_count allows (only with PROT_NONE guard
pages: two mappings per stack), it prints how many fit and the sysctl command that raises the
limit, and exits with status 2 without spawning anything.";

const DEFAULT_COUNT: usize = 100_000;
const QUICK_COUNT: usize = 10_000;

/// Mappings kept free for everything that is not a green thread's stack: the runtime, the
/// allocator's arenas, the handle vector, the main green thread's stack, pooled stacks.
const MAPPING_HEADROOM: usize = 1_000;

/// How deep each green thread goes before it parks with `--deep`.
const DEEP_BYTES: usize = 128 * 1024;

/// The long-park threshold with `--deep` (`runtime::Builder::stack_release`; the default is
/// 1 s).
const DEEP_RELEASE_AFTER: Duration = Duration::from_secs(5);

/// The long-park threshold with `--compact`: a green thread parked this long is compacted at
/// the scheduler's next sweep.
const COMPACT_AFTER: Duration = Duration::from_secs(1);

/// Green threads woken in each wake-up sample with `--compact`, unless `--wake-sample` says.
const DEFAULT_WAKE_SAMPLE: usize = 2_000;

/// How long the compaction count may stand still before the example gives up waiting for it.
const COMPACTION_STALL: Duration = Duration::from_secs(30);

/// What the command line asks for.
struct Options {
    count: usize,
    deep: bool,
    compact: bool,
    /// Green threads in each wake-up sample (`--compact` only).
    wake_sample: usize,
}

fn parse_options() -> Result<Options, String> {
    let mut count = DEFAULT_COUNT;
    let mut deep = false;
    let mut compact = false;
    let mut wake_sample = DEFAULT_WAKE_SAMPLE;
    let whole_number = |flag: &str, value: Option<String>| -> Result<usize, String> {
        let value = value.ok_or(format!("{flag} needs a value"))?;
        value
            .replace('_', "")
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a whole number"))
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => count = QUICK_COUNT,
            "--deep" => deep = true,
            "--compact" => compact = true,
            "--count" => count = whole_number("--count", args.next())?,
            "--wake-sample" => wake_sample = whole_number("--wake-sample", args.next())?,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if count == 0 {
        return Err("--count must be at least 1".to_owned());
    }
    if deep && compact {
        return Err(
            "--deep and --compact measure different things (the release below the stack \
             pointer, and compaction); run them one at a time"
                .to_owned(),
        );
    }
    Ok(Options {
        count,
        deep,
        compact,
        // Two disjoint samples: the last spawned (not compacted yet) and the first.
        wake_sample: wake_sample.min(count / 2),
    })
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(parsed) => parsed,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("parked_memory: {message}\n");
            }
            eprintln!("{USAGE}");
            return if message.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };

    let count = options.count;
    let guard = guard_kind();
    if let Err(message) = check_mapping_limit(count, &guard) {
        eprintln!("{message}");
        return ExitCode::from(2);
    }
    println!("parking {count} green threads; guard kind: {guard}");

    // With --deep, a release threshold long enough for every green thread to have parked (and
    // the memory to be read) before the first sweep: spawning 10,000 that each touch 128 KiB
    // takes over a second here.
    let builder = greenweave::Runtime::builder().stack_release(Some(if options.deep {
        DEEP_RELEASE_AFTER
    } else if options.compact {
        COMPACT_AFTER
    } else {
        Duration::from_secs(1)
    }));
    let builder = if options.compact {
        // SAFETY: no green thread of this example lends its stack to another OS thread: it
        // starts no OS thread and hands no pointer to its locals to one.
        unsafe { builder.compact_parked_stacks() }
    } else {
        builder
    };
    let runtime = builder
        .build()
        .expect("a runtime with default settings builds");
    match runtime.run(move || park_and_measure(&options, &guard)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("parked_memory: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The guard kind the crate uses in this process, as a stack's `Debug` output names it:
/// `GuardRegion` or `ProtNone`. Making one stack also runs the crate's once-per-process probe.
fn guard_kind() -> String {
    let stack = Stack::new(Stack::DEFAULT_SIZE).expect("one stack can be mapped");
    let text = format!("{stack:?}");
    text.split("guard: ")
        .nth(1)
        .and_then(|rest| rest.split([' ', ',', '}']).next())
        .unwrap_or("unknown")
        .to_owned()
}

/// Mappings one more live stack adds with this guard kind, in the worst case.
fn mappings_per_stack(guard: &str) -> usize {
    match guard {
        // Neighbouring stacks are identical anonymous mappings and merge into one, so stacks
        // add next to nothing (a new mapping only where something else sits between two).
        "GuardRegion" => 0,
        // The guard page and the usable range are two mappings, and no two stacks merge.
        _ => 2,
    }
}

/// Checks that `count` stacks fit under `vm.max_map_count`; if not, explains how many do and
/// how to raise the limit.
fn check_mapping_limit(count: usize, guard: &str) -> Result<(), String> {
    let Some(limit) = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
    else {
        // Without the limit there is nothing to check; a refused mapping still reports it.
        return Ok(());
    };
    let per_stack = mappings_per_stack(guard);
    let needed = mapping_count() + MAPPING_HEADROOM + per_stack * count;
    if needed <= limit {
        return Ok(());
    }
    let fit = limit.saturating_sub(mapping_count() + MAPPING_HEADROOM) / per_stack.max(1);
    Err(format!(
        "parked_memory: {count} green threads do not fit. With {guard} guard pages each stack \
         takes {per_stack} memory mappings, so about {needed} are needed, but vm.max_map_count \
         is {limit}: about {fit} green threads fit.\n\
         Raise the limit (until the next reboot) and run again:\n\n    \
         sudo sysctl -w vm.max_map_count={}\n\n\
         or run with --count {fit}.",
        needed.next_multiple_of(1000)
    ))
}

/// Lines of `/proc/self/maps`: the process's memory mappings.
fn mapping_count() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .map(|maps| maps.lines().count())
        .unwrap_or(0)
}

/// The resident-memory lines of `/proc/self/status`, in bytes.
#[derive(Clone, Copy)]
struct Resident {
    rss: usize,
    anon: usize,
    /// Page tables: not part of VmRSS, but memory the kernel spends on the process.
    page_tables: usize,
}

fn resident() -> Resident {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
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
    };
    Resident {
        rss: field("VmRSS:"),
        anon: field("RssAnon:"),
        page_tables: field("VmPTE:"),
    }
}

/// The mapping that holds `address`, from `/proc/self/smaps`: its size and resident bytes.
fn smaps_entry(address: usize) -> Option<(usize, usize)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut lines = smaps.lines();
    while let Some(line) = lines.next() {
        let Some((range, _)) = line.split_once(' ') else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        if !(start <= address && address < end) {
            continue;
        }
        let rss = lines
            .by_ref()
            .take_while(|line| !line.starts_with("VmFlags"))
            .find_map(|line| line.strip_prefix("Rss:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<usize>()
            .ok()?;
        return Some((end - start, rss * 1024));
    }
    None
}

/// Touches `bytes` of stack below the caller, 4 KiB at a time, and returns.
#[inline(never)]
fn go_deep(bytes: usize) {
    let mut frame = [0u8; 4096];
    std::hint::black_box(&mut frame);
    if bytes > frame.len() {
        go_deep(bytes - frame.len());
    }
}

/// What the green threads of `--compact` share with the main green thread.
struct Wakes {
    /// Whether the green threads wait in `thread::park()` (`--compact`) rather than on the
    /// event.
    in_park: bool,
    /// Set before the final unparks: the green threads return instead of parking again.
    stop: Cell<bool>,
    /// When a green thread last woke from `thread::park()`.
    woke_at: Cell<Option<Instant>>,
}

fn park_and_measure(options: &Options, guard: &str) -> Result<(), String> {
    let Options {
        count,
        deep,
        compact,
        wake_sample,
    } = *options;
    let before = resident();
    let maps_before = mapping_count();

    let event = Rc::new(Event::new());
    let wakes = Rc::new(Wakes {
        in_park: compact,
        stop: Cell::new(false),
        woke_at: Cell::new(None),
    });
    let parked = Rc::new(Cell::new(0usize));
    // An address on green thread 0's stack, to find its mapping in smaps.
    let sample = Rc::new(Cell::new(0usize));
    let mut handles = Vec::with_capacity(count);
    let start = Instant::now();
    for i in 0..count {
        let (parked, sample) = (parked.clone(), sample.clone());
        let spawned = if compact {
            let wakes = wakes.clone();
            greenweave::thread::Builder::new().spawn(move || {
                let marker = 0u8;
                if i == 0 {
                    sample.set(std::hint::black_box(&marker) as *const u8 as usize);
                }
                parked.set(parked.get() + 1);
                loop {
                    greenweave::thread::park();
                    if wakes.stop.get() {
                        return i;
                    }
                    wakes.woke_at.set(Some(Instant::now()));
                }
            })
        } else {
            let waits_on = event.clone();
            greenweave::thread::Builder::new().spawn(move || {
                let marker = 0u8;
                if i == 0 {
                    sample.set(std::hint::black_box(&marker) as *const u8 as usize);
                }
                if deep {
                    go_deep(DEEP_BYTES);
                }
                parked.set(parked.get() + 1);
                waits_on.wait();
                i
            })
        };
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(error) => {
                // Let the ones already spawned finish, so the runtime shuts down cleanly.
                let spawned = handles.len();
                wake_all(&event, &wakes, &handles);
                for handle in handles {
                    let _ = handle.join();
                }
                return Err(format!(
                    "could not spawn green thread {} of {count} (after {spawned}): {error}",
                    spawned + 1
                ));
            }
        }
    }
    // The ready queue is FIFO: one yield lets every new green thread run up to its wait. Loop
    // anyway, so the measurement never starts before the last one has parked.
    while parked.get() < count {
        greenweave::thread::yield_now();
    }
    let spawn_time = start.elapsed();
    let all_parked = Instant::now();

    // The wake-up latency of green threads parked for less than the threshold: the last
    // spawned, parked moments ago. Measured before anything else, so that none of them has
    // been parked for 1 s; each parks again at once.
    let uncompacted_wakes = if compact && wake_sample > 0 {
        let restorations = greenweave::runtime::metrics().stack_restoration_count();
        let wakes_measured = wake_latencies(&handles[count - wake_sample..], &wakes);
        let restored = greenweave::runtime::metrics().stack_restoration_count() - restorations;
        if restored != 0 {
            // Restorations come only from unparks of compacted green threads.
            return Err(finish_early(
                &event,
                &wakes,
                handles,
                format!(
                    "{restored} of the {wake_sample} green threads of the uncompacted wake-up \
                     sample had been compacted already"
                ),
            ));
        }
        Some(wakes_measured)
    } else {
        None
    };

    let during = resident();
    let maps_during = mapping_count();
    let rss = during.rss.saturating_sub(before.rss);
    let anon = during.anon.saturating_sub(before.anon);
    let per = |bytes: usize| bytes as f64 / count as f64;
    println!(
        "spawned and parked {count} green threads in {:.2} s ({:.0} ns per green thread)",
        spawn_time.as_secs_f64(),
        spawn_time.as_nanos() as f64 / count as f64
    );
    println!(
        "VmRSS:   {:>8.1} MiB before, {:>8.1} MiB parked: +{:.1} MiB, {:.0} bytes ({:.2} KiB) \
         per green thread",
        mib(before.rss),
        mib(during.rss),
        mib(rss),
        per(rss),
        per(rss) / 1024.0
    );
    println!(
        "RssAnon: {:>8.1} MiB before, {:>8.1} MiB parked: +{:.1} MiB, {:.0} bytes ({:.2} KiB) \
         per green thread",
        mib(before.anon),
        mib(during.anon),
        mib(anon),
        per(anon),
        per(anon) / 1024.0
    );
    let page_tables = during.page_tables.saturating_sub(before.page_tables);
    println!(
        "VmPTE:   {:>8.1} MiB before, {:>8.1} MiB parked: +{:.1} MiB, {:.0} bytes per green \
         thread (page tables, not counted in VmRSS)",
        mib(before.page_tables),
        mib(during.page_tables),
        mib(page_tables),
        per(page_tables)
    );
    println!(
        "mappings (/proc/self/maps lines): {maps_before} before, {maps_during} parked; guard \
         kind: {guard}"
    );
    // The stack share: the mapping holding green thread 0's stack holds either that one stack
    // (PROT_NONE guards) or many merged neighbours (guard regions); its resident bytes per
    // stack it holds approximate what each parked green thread keeps on its stack.
    if let Some((size, rss)) = smaps_entry(sample.get()) {
        let stacks = (size / (Stack::DEFAULT_SIZE + page_size())).max(1);
        println!(
            "stack: {:.0} bytes resident per stack, from the mapping that holds green thread \
             0's stack ({stacks} stack(s) of {} KiB, {} KiB resident); the rest is heap",
            rss as f64 / stacks as f64,
            Stack::DEFAULT_SIZE / 1024,
            rss / 1024
        );
    }

    if compact {
        let compacted = greenweave::runtime::metrics().stack_compaction_count();
        if compacted > 0 {
            println!(
                "({compacted} of them were compacted already when the memory was read: they had \
                 parked {} s before the last one did)",
                COMPACT_AFTER.as_secs_f64()
            );
        }
        if let Err(message) = wait_for_compaction(count, all_parked) {
            return Err(finish_early(&event, &wakes, handles, message));
        }
        let metrics = greenweave::runtime::metrics();
        let after = resident();
        println!(
            "all {count} green threads compacted {:.2} s after the last one parked (threshold \
             {} s): {} compactions, {} restorations",
            all_parked.elapsed().as_secs_f64(),
            COMPACT_AFTER.as_secs_f64(),
            metrics.stack_compaction_count(),
            metrics.stack_restoration_count()
        );
        if metrics.stack_restoration_count() > 0 {
            // Nothing has woken a parked green thread since the first sample (which restored
            // none), and the main green thread's sleeps are the only timed parks here.
            println!(
                "({} restorations before any compacted green thread was woken: the main green \
                 thread, compacted in its 10 ms sleeps and restored when each ended)",
                metrics.stack_restoration_count()
            );
        }
        for (name, base, was, now) in [
            ("VmRSS:  ", before.rss, during.rss, after.rss),
            ("RssAnon:", before.anon, during.anon, after.anon),
            (
                "VmPTE:  ",
                before.page_tables,
                during.page_tables,
                after.page_tables,
            ),
        ] {
            println!(
                "{name} {:>8.1} MiB parked, {:>8.1} MiB compacted: {:.0} -> {:.0} bytes per \
                 green thread",
                mib(was),
                mib(now),
                per(was.saturating_sub(base)),
                per(now.saturating_sub(base)),
            );
        }
        println!(
            "frames on the heap: {:.1} MiB, {:.0} bytes per green thread \
             (RuntimeMetrics::compacted_stack_bytes); stacks of long-parked green threads \
             still hold {:.1} MiB (long_parked_stack_bytes)",
            mib(metrics.compacted_stack_bytes() as usize),
            per(metrics.compacted_stack_bytes() as usize),
            mib(metrics.long_parked_stack_bytes() as usize)
        );
        println!(
            "per green thread, VmRSS and RssAnon hold its task record, its closure, its \
             JoinHandle's slot in the handle vector, its Thread's parker and, compacted, its \
             frames on the heap (plus the allocator's overhead on each), and, parked, its \
             stack page; VmPTE, the page tables that mapped its stack (the release leaves them)"
        );

        if let Some(uncompacted) = uncompacted_wakes {
            // Other green threads than the first sample's: the first spawned, all compacted.
            let restorations = metrics.stack_restoration_count();
            let compacted = wake_latencies(&handles[..wake_sample], &wakes);
            let restored = greenweave::runtime::metrics().stack_restoration_count() - restorations;
            let ([p50, p99, max], [c50, c99, cmax]) =
                (percentiles(&uncompacted), percentiles(&compacted));
            println!(
                "wake-up latency, unpark until the woken green thread runs ({wake_sample} green \
                 threads each, one at a time):"
            );
            for (label, [p50, p99, max]) in [
                (
                    format!(
                        "parked < {} s (not compacted):",
                        COMPACT_AFTER.as_secs_f64()
                    ),
                    [p50, p99, max],
                ),
                (
                    format!("compacted ({restored} restored):"),
                    [c50, c99, cmax],
                ),
            ] {
                println!("  {label:<31} p50 {p50:>8.2} us, p99 {p99:>8.2} us, max {max:>8.2} us");
            }
            println!("  compacted / not compacted, p50: {:.2}x", c50 / p50);
        }
    }

    if deep {
        // Wait for the long-park sweep (5 s after they parked, at the scheduler's next look):
        // the event is the metrics' count of releases reaching one per green thread.
        let waited = Instant::now();
        while greenweave::runtime::metrics().stack_release_count() < count as u64 {
            greenweave::thread::sleep(Duration::from_millis(10));
        }
        let metrics = greenweave::runtime::metrics();
        let after = resident();
        println!(
            "after the long-park sweep ({:.2} s later): {} releases, {:.1} MiB released ({:.0} \
             bytes per green thread)",
            waited.elapsed().as_secs_f64(),
            metrics.stack_release_count(),
            mib(metrics.stack_bytes_released() as usize),
            per(metrics.stack_bytes_released() as usize)
        );
        for (name, base, was, now) in [
            ("VmRSS:  ", before.rss, during.rss, after.rss),
            ("RssAnon:", before.anon, during.anon, after.anon),
            (
                "VmPTE:  ",
                before.page_tables,
                during.page_tables,
                after.page_tables,
            ),
        ] {
            println!(
                "{name} {:>8.1} MiB parked deep, {:>8.1} MiB after the release: {:.0} -> {:.0} \
                 bytes per green thread",
                mib(was),
                mib(now),
                per(was.saturating_sub(base)),
                per(now.saturating_sub(base)),
            );
        }
        println!(
            "long-parked stacks hold {:.1} MiB ({:.0} bytes per green thread; \
             RuntimeMetrics::long_parked_stack_bytes)",
            mib(metrics.long_parked_stack_bytes() as usize),
            per(metrics.long_parked_stack_bytes() as usize)
        );
    }

    wake_all(&event, &wakes, &handles);
    let mut finished = 0usize;
    for (i, handle) in handles.into_iter().enumerate() {
        match handle.join() {
            Ok(value) if value == i => finished += 1,
            Ok(value) => return Err(format!("green thread {i} returned {value}")),
            Err(error) => return Err(format!("green thread {i} failed: {error:?}")),
        }
    }
    assert_eq!(finished, count, "every green thread finished");
    println!("woke and joined all {finished} green threads");
    Ok(())
}

/// Wakes every green thread for good: sets the event (the default waits) and the stop flag,
/// and unparks each one (`--compact`'s waits).
fn wake_all(event: &Event, wakes: &Wakes, handles: &[JoinHandle<usize>]) {
    event.set();
    if wakes.in_park && !wakes.stop.replace(true) {
        for handle in handles {
            handle.thread().unpark();
        }
    }
}

/// Wakes every green thread and joins them, so the runtime shuts down cleanly, then hands
/// back `message` for the caller to return.
fn finish_early(
    event: &Event,
    wakes: &Wakes,
    handles: Vec<JoinHandle<usize>>,
    message: String,
) -> String {
    wake_all(event, wakes, &handles);
    for handle in handles {
        let _ = handle.join();
    }
    message
}

/// Green threads compacted now: compactions less restorations (each restoration undoes one;
/// nothing here drops a compacted green thread). Not the compaction count alone: the main
/// green thread's short sleeps may be compacted and restored too, each adding one of each.
fn compacted_now() -> u64 {
    let metrics = greenweave::runtime::metrics();
    metrics.stack_compaction_count() - metrics.stack_restoration_count()
}

/// Sleeps (short green sleeps) until `count` green threads are compacted at once (the main
/// green thread, which is running, is not one of them); gives up, explaining, if the number
/// stands still for [`COMPACTION_STALL`].
fn wait_for_compaction(count: usize, all_parked: Instant) -> Result<(), String> {
    let mut last = compacted_now();
    let mut last_progress = Instant::now();
    while last < count as u64 {
        greenweave::thread::sleep(Duration::from_millis(10));
        let now = compacted_now();
        if now != last {
            (last, last_progress) = (now, Instant::now());
        } else if last_progress.elapsed() >= COMPACTION_STALL {
            return Err(format!(
                "only {last} of {count} parked green threads were compacted {:.1} s after the \
                 last one parked, and none more in the last {} s; is compaction on \
                 (Builder::compact_parked_stacks) and does each wait in thread::park()?",
                all_parked.elapsed().as_secs_f64(),
                COMPACTION_STALL.as_secs()
            ));
        }
    }
    Ok(())
}

/// Wakes each green thread of `sample` in turn, each parked in `thread::park()`, and returns
/// the latencies, sorted: from just before its `unpark` until it noted the time it woke. The
/// woken green thread runs before this one does again (the ready queue is FIFO, and this one
/// yields after the unpark); if it has not, this one yields again until it has.
fn wake_latencies(sample: &[JoinHandle<usize>], wakes: &Wakes) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(sample.len());
    for handle in sample {
        let thread = handle.thread();
        wakes.woke_at.set(None);
        let unparked = Instant::now();
        thread.unpark();
        let woke_at = loop {
            greenweave::thread::yield_now();
            if let Some(woke_at) = wakes.woke_at.get() {
                break woke_at;
            }
        };
        latencies.push(woke_at.saturating_duration_since(unparked));
    }
    latencies.sort_unstable();
    latencies
}

/// The median, the 99th percentile and the maximum of `sorted`, in microseconds.
fn percentiles(sorted: &[Duration]) -> [f64; 3] {
    let at = |quantile: f64| {
        let index = ((sorted.len() as f64 * quantile) as usize).min(sorted.len() - 1);
        sorted[index].as_secs_f64() * 1e6
    };
    [at(0.5), at(0.99), at(1.0)]
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}
