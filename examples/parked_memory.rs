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
//! Each stack's guard page is either a guard region (Linux 6.13+, `MADV_GUARD_INSTALL`: one
//! mapping per stack, and neighbouring stacks merge into one) or a `PROT_NONE` page (two
//! mappings per stack, none merge). In the second case the kernel's `vm.max_map_count` (65530
//! by default) caps the process near 32,000 stacks; the example checks the count against it
//! before spawning anything.

use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Instant;

use greenweave::Stack;
use greenweave::sync::Event;

const USAGE: &str = "usage: parked_memory [--count N | --quick]

  --count N   green threads to park, each on a default-size (256 KiB) stack (default 100000)
  --quick     park 10000 green threads (for CI)
  --deep      each green thread goes 128 KiB deep before it parks; print memory after they
              park and again after the long-park sweep has released their deep pages

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
const DEEP_RELEASE_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

fn parse_count() -> Result<(usize, bool), String> {
    let mut count = DEFAULT_COUNT;
    let mut deep = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => count = QUICK_COUNT,
            "--deep" => deep = true,
            "--count" => {
                let value = args.next().ok_or("--count needs a value")?;
                count = value
                    .replace('_', "")
                    .parse()
                    .map_err(|_| format!("--count: {value:?} is not a whole number"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if count == 0 {
        return Err("--count must be at least 1".to_owned());
    }
    Ok((count, deep))
}

fn main() -> ExitCode {
    let (count, deep) = match parse_count() {
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

    let guard = guard_kind();
    if let Err(message) = check_mapping_limit(count, &guard) {
        eprintln!("{message}");
        return ExitCode::from(2);
    }
    println!("parking {count} green threads; guard kind: {guard}");

    // With --deep, a release threshold long enough for every green thread to have parked (and
    // the memory to be read) before the first sweep: spawning 10,000 that each touch 128 KiB
    // takes over a second here.
    let runtime = greenweave::Runtime::builder()
        .stack_release(Some(if deep {
            DEEP_RELEASE_AFTER
        } else {
            std::time::Duration::from_secs(1)
        }))
        .build()
        .expect("a runtime with default settings builds");
    match runtime.run(move || park_and_measure(count, deep, &guard)) {
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

fn park_and_measure(count: usize, deep: bool, guard: &str) -> Result<(), String> {
    let before = resident();
    let maps_before = mapping_count();

    let event = Rc::new(Event::new());
    let parked = Rc::new(Cell::new(0usize));
    // An address on green thread 0's stack, to find its mapping in smaps.
    let sample = Rc::new(Cell::new(0usize));
    let mut handles = Vec::with_capacity(count);
    let start = Instant::now();
    for i in 0..count {
        let (waits_on, parked, sample) = (event.clone(), parked.clone(), sample.clone());
        let spawned = greenweave::thread::Builder::new().spawn(move || {
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
        });
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(error) => {
                // Let the ones already spawned finish, so the runtime shuts down cleanly.
                event.set();
                let spawned = handles.len();
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

    if deep {
        // Wait for the long-park sweep (5 s after they parked, at the scheduler's next look):
        // the event is the metrics' count of releases reaching one per green thread.
        let waited = Instant::now();
        while greenweave::runtime::metrics().stack_release_count() < count as u64 {
            greenweave::thread::sleep(std::time::Duration::from_millis(10));
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

    event.set();
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

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}
