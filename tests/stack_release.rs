//! The long-park sweep (`runtime::Builder::stack_release`): a green thread that went deep and
//! then parks gives back the stack pages below its stack pointer, keeps everything above it,
//! and goes deep again correctly; the dump and the metrics show stack use; a green thread past
//! 75% of its stack is warned about once.
//!
//! No test waits for a time to pass: each sets the threshold to zero and waits for the event
//! that proves the sweep ran (the metrics' release count), turning the scheduler idle with
//! short green sleeps meanwhile.

mod common;

use std::cell::Cell;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::run_in_child;
use greenweave::Runtime;
// The parked green threads here wait on `sync::shared` channels (std's shape, both ends
// `Send`), a wait that compaction never takes (`runtime::compaction`): these tests are about
// the release below the stack pointer, which the compaction checking mode of `.ci/run` (every
// compactable park compacted at once) would otherwise replace.
use greenweave::sync::shared as mpsc;

const PAGE: usize = 4096;

/// The stack pointer: where the running green thread's stack is in use. Not the address of a
/// local, which AddressSanitizer (its `detect_stack_use_after_return`, on in `.ci/asan`) moves
/// to a "fake stack" of its own elsewhere.
#[inline(always)]
fn stack_pointer() -> usize {
    let sp: usize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads a register into a local; no memory is touched.
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above.
    unsafe {
        std::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

/// Recurses, 1 KiB of frame at a time, until the stack pointer reaches `until` (an address
/// below the caller's); each frame holds a pattern of its depth, checked on the way back up.
/// Returns the sum of the patterns and stores the lowest stack pointer in `deepest`.
#[inline(never)]
fn go_deep(until: usize, depth: u64, deepest: &Cell<usize>) -> u64 {
    let mut frame = [0u8; 1024];
    for (index, byte) in frame.iter_mut().enumerate() {
        *byte = (depth as usize * 7 + index) as u8;
    }
    black_box(&mut frame);
    let here = stack_pointer();
    let below = if here > until {
        go_deep(until, depth + 1, deepest)
    } else {
        deepest.set(here);
        0
    };
    for (index, byte) in black_box(&frame).iter().enumerate() {
        assert_eq!(
            *byte,
            (depth as usize * 7 + index) as u8,
            "frame {depth} changed"
        );
    }
    below + depth
}

/// Whether the page holding `address` is resident.
fn resident(address: usize) -> bool {
    let page = address & !(PAGE - 1);
    let mut flag = 0u8;
    // SAFETY: the page lies in a mapped stack (the caller's green thread is parked, not
    // finished); mincore only reads the page tables into `flag`.
    let rc = unsafe { libc::mincore(page as *mut libc::c_void, PAGE, &mut flag) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    flag & 1 != 0
}

/// Idle turns of the scheduler (each green sleep leaves it nothing to run) until `done`.
fn idle_until(done: impl Fn() -> bool) {
    while !done() {
        greenweave::thread::sleep(Duration::from_millis(1));
    }
}

fn releases() -> u64 {
    greenweave::runtime::metrics().stack_release_count()
}

/// A green thread that goes `depth` bytes deep, parks until told, then checks that its parked
/// frame's values survived and goes deep again; returns what it saw and where it went.
struct DeepRun {
    deepest: Rc<Cell<usize>>,
    wake: mpsc::Sender<()>,
    handle: greenweave::thread::JoinHandle<(u64, u64)>,
}

fn spawn_deep(name: &str, stack_size: usize, depth: usize) -> DeepRun {
    let deepest = Rc::new(Cell::new(0));
    let seen = deepest.clone();
    let (wake, woken) = mpsc::channel::<()>();
    let handle = greenweave::thread::Builder::new()
        .name(name.into())
        .stack_size(stack_size)
        .spawn(move || {
            // Values in this frame, above the parked stack pointer: they must survive.
            let kept: [u64; 64] = std::array::from_fn(|i| (i as u64).wrapping_mul(0x9e37_79b9));
            black_box(&kept);
            let start = stack_pointer();
            let first = go_deep(start - depth, 0, &seen);
            woken.recv().unwrap();
            assert_eq!(
                black_box(&kept),
                &std::array::from_fn::<u64, 64, _>(|i| (i as u64).wrapping_mul(0x9e37_79b9))
            );
            let again = go_deep(start - depth, 0, &seen);
            (first, again)
        })
        .unwrap();
    greenweave::thread::yield_now();
    DeepRun {
        deepest,
        wake,
        handle,
    }
}

#[test]
fn a_deep_green_thread_that_parks_gives_back_its_pages_below_the_stack_pointer_and_goes_deep_again_intact()
 {
    let runtime = Runtime::builder()
        .stack_release(Some(Duration::ZERO))
        .build()
        .unwrap();
    runtime.run(|| {
        let deep = spawn_deep("deep", 256 * 1024, 128 * 1024);
        let deepest = deep.deepest.get();
        assert_ne!(deepest, 0, "the green thread has gone deep and parked");
        assert!(resident(deepest));
        idle_until(|| !resident(deepest));
        assert!(releases() >= 1);
        let metrics = greenweave::runtime::metrics();
        assert!(metrics.stack_bytes_released() >= 120 * 1024);
        // What it still holds: the pages its parked frames use, not the 128 KiB.
        let held = metrics.long_parked_stack_bytes();
        assert!(held > 0 && held < 64 * 1024, "held {held} bytes");
        deep.wake.send(()).unwrap();
        let (first, again) = deep.handle.join().unwrap();
        assert_eq!(first, again);
    });
}

#[test]
fn a_stack_freed_into_the_pool_after_a_deep_green_thread_ends_is_released_too() {
    let runtime = Runtime::builder()
        .stack_release(Some(Duration::ZERO))
        .build()
        .unwrap();
    runtime.run(|| {
        let deepest = Rc::new(Cell::new(0));
        let seen = deepest.clone();
        greenweave::spawn(move || {
            let start = stack_pointer();
            go_deep(start - 128 * 1024, 0, &seen);
        })
        .join()
        .unwrap();
        // Its stack is back in this thread's pool, with the pages it touched.
        assert!(resident(deepest.get()));
        idle_until(|| !resident(deepest.get()));
        assert!(greenweave::runtime::metrics().stack_bytes_released() >= 120 * 1024);
    });
}

#[test]
fn many_parks_due_at_once_are_all_released_over_several_sweeps() {
    // More than one sweep measures (256): the rest are swept at the following looks.
    const GREEN_THREADS: usize = 600;
    let runtime = Runtime::builder()
        .stack_release(Some(Duration::ZERO))
        .build()
        .unwrap();
    runtime.run(|| {
        let event = Rc::new(greenweave::sync::Event::new());
        let deepest: Vec<Rc<Cell<usize>>> =
            (0..GREEN_THREADS).map(|_| Rc::new(Cell::new(0))).collect();
        let handles: Vec<_> = deepest
            .iter()
            .map(|seen| {
                let (seen, event) = (seen.clone(), event.clone());
                greenweave::spawn(move || {
                    let start = stack_pointer();
                    go_deep(start - 24 * 1024, 0, &seen);
                    event.wait();
                })
            })
            .collect();
        greenweave::thread::yield_now();
        assert!(deepest.iter().all(|seen| seen.get() != 0));
        idle_until(|| deepest.iter().all(|seen| !resident(seen.get())));
        event.set();
        for handle in handles {
            handle.join().unwrap();
        }
    });
}

#[test]
fn a_green_thread_parked_inside_a_generator_keeps_its_own_stack_whole() {
    // Its saved stack pointer is on the generator's stack; where its own stack is in use is
    // not recorded, so nothing of it may be released. A green thread parked on its own stack
    // at the same time is the witness that the sweep ran.
    let runtime = Runtime::builder()
        .stack_release(Some(Duration::ZERO))
        .build()
        .unwrap();
    runtime.run(|| {
        let deepest = Rc::new(Cell::new(0));
        let seen = deepest.clone();
        let (wake, woken) = mpsc::channel::<u64>();
        let nested = greenweave::spawn(move || {
            let start = stack_pointer();
            let before = go_deep(start - 128 * 1024, 0, &seen);
            let mut generator = greenweave::Coroutine::<(), u64, ()>::new(move |yielder, ()| {
                let value = woken.recv().unwrap();
                yielder.suspend(value);
            });
            let value = generator.resume(()).into_yield().unwrap();
            (before, value)
        });
        let witness = spawn_deep("witness", 256 * 1024, 128 * 1024);
        greenweave::thread::yield_now();
        idle_until(|| !resident(witness.deepest.get()));
        assert!(
            resident(deepest.get()),
            "the nested park's own stack was released"
        );
        wake.send(42).unwrap();
        let (depth_sum, value) = nested.join().unwrap();
        assert_eq!(value, 42);
        assert!(depth_sum > 0);
        witness.wake.send(()).unwrap();
        let (first, again) = witness.handle.join().unwrap();
        assert_eq!(first, again);
    });
}

#[test]
fn with_the_release_off_a_deep_parked_green_thread_keeps_its_pages() {
    let runtime = Runtime::builder().stack_release(None).build().unwrap();
    runtime.run(|| {
        let deep = spawn_deep("deep", 256 * 1024, 128 * 1024);
        // With a zero threshold, two idle turns sweep (a_deep_green_thread_that_parks_...);
        // give it many more.
        for _ in 0..20 {
            greenweave::thread::sleep(Duration::from_millis(1));
        }
        assert!(resident(deep.deepest.get()));
        let metrics = greenweave::runtime::metrics();
        assert_eq!(metrics.stack_release_count(), 0);
        assert_eq!(metrics.stack_bytes_released(), 0);
        deep.wake.send(()).unwrap();
        let (first, again) = deep.handle.join().unwrap();
        assert_eq!(first, again);
    });
}

/// Whether the page holding `address` is resident, for an address passed between workers.
fn resident_at(address: &AtomicUsize) -> bool {
    resident(address.load(Ordering::Relaxed))
}

#[test]
fn each_park_is_released_once_and_a_shallow_park_releases_nothing() {
    // The green thread under test runs alone on worker 1, so that worker's counts are its own
    // (the main green thread's parks on worker 0 are swept too).
    let runtime = Runtime::builder()
        .workers(2)
        .stack_release(Some(Duration::ZERO))
        .build()
        .unwrap();
    runtime.run(|| {
        let (wake, woken) = greenweave::sync::shared::channel::<bool>();
        let (parked, parks) = greenweave::sync::shared::channel::<()>();
        let deepest = Arc::new(AtomicUsize::new(0));
        let seen = deepest.clone();
        let worker = greenweave::thread::spawn_on(1, move || {
            let local = Cell::new(0);
            let start = stack_pointer();
            parked.send(()).unwrap();
            while let Ok(deep) = woken.recv() {
                if deep {
                    go_deep(start - 96 * 1024, 0, &local);
                    seen.store(local.get(), Ordering::Relaxed);
                }
                parked.send(()).unwrap();
            }
        });
        let released = || greenweave::runtime::metrics().worker_stack_release_count(1);
        // Parked, shallow, and swept (long_parked_stack_bytes says so): nothing released.
        parks.recv().unwrap();
        idle_until(|| greenweave::runtime::metrics().long_parked_stack_bytes() > 0);
        for _ in 0..5 {
            greenweave::thread::sleep(Duration::from_millis(1));
        }
        // 0 natively; under AddressSanitizer the instrumented calls before the first park reach
        // a page below it, and this park releases that once.
        let shallow = released();
        assert!(shallow <= 1, "a shallow park released {shallow} times");
        for round in 1..=3 {
            wake.send(true).unwrap();
            parks.recv().unwrap();
            idle_until(|| released() >= shallow + round);
            // Many more idle turns: the same park is not released again.
            for _ in 0..5 {
                greenweave::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(released(), shallow + round);
            assert!(!resident_at(&deepest));
        }
        // A shallow round after deep ones: its park is swept, nothing is left to release.
        wake.send(false).unwrap();
        parks.recv().unwrap();
        for _ in 0..5 {
            greenweave::thread::sleep(Duration::from_millis(1));
        }
        let after_shallow = released() - 3 - shallow;
        assert!(
            after_shallow <= shallow,
            "the shallow round released {after_shallow} times"
        );
        drop(wake);
        worker.join().unwrap();
    });
}

#[test]
fn the_dump_shows_current_and_peak_stack_use() {
    let runtime = Runtime::builder()
        .stack_release(Some(Duration::ZERO))
        .build()
        .unwrap();
    runtime.run(|| {
        let deep = spawn_deep("deep", 256 * 1024, 128 * 1024);
        // Before any sweep, a dump without backtraces makes no system call: it knows the
        // current use only.
        let cheap = greenweave::runtime::dump_without_backtraces();
        let entry = cheap
            .green_threads()
            .iter()
            .find(|thread| thread.name() == Some("deep"))
            .unwrap();
        let used = entry.stack_used().unwrap();
        assert!(entry.stack_peak().unwrap() >= used);
        assert!(entry.stack_peak().unwrap() < 64 * 1024);
        // A dump with backtraces reads the page tables.
        let dump = greenweave::runtime::dump();
        let entry = dump
            .green_threads()
            .iter()
            .find(|thread| thread.name() == Some("deep"))
            .unwrap();
        assert_eq!(entry.stack_used(), Some(used));
        let peak = entry.stack_peak().unwrap();
        assert_eq!(entry.stack_size(), Some(256 * 1024));
        assert!(used < 32 * 1024, "parked near its top: {used}");
        assert!(peak >= 128 * 1024, "went 128 KiB deep: {peak}");
        assert_eq!(peak % PAGE, 0);
        let text = dump.to_string();
        assert!(
            text.contains(&format!(
                "    stack: {} KiB at most, of 256 KiB",
                peak / 1024
            )) || text.contains(" at most, of 256 KiB"),
            "{text}"
        );
        let json = dump.to_json();
        assert!(
            json.contains(&format!(
                "\"stack\":{{\"used\":{used},\"peak\":{peak},\"size\":262144,\"compacted\":null}}"
            )),
            "{json}"
        );
        // The peak survives the release of the pages it was measured from, and the cheap dump
        // knows it too once the sweep has measured the park.
        idle_until(|| !resident(deep.deepest.get()));
        let dump = greenweave::runtime::dump_without_backtraces();
        let entry = dump
            .green_threads()
            .iter()
            .find(|thread| thread.name() == Some("deep"))
            .unwrap();
        assert_eq!(entry.stack_peak(), Some(peak));
        assert_eq!(entry.stack_used(), Some(used));
        deep.wake.send(()).unwrap();
        deep.handle.join().unwrap();
    });
}

#[test]
fn a_green_thread_past_three_quarters_of_its_stack_is_warned_about_once() {
    const TEST: &str = "a_green_thread_past_three_quarters_of_its_stack_is_warned_about_once";
    let outcome = run_in_child(TEST, || {
        let runtime = Runtime::builder()
            .stack_release(Some(Duration::ZERO))
            .build()
            .unwrap();
        runtime.run(|| {
            let (wake, woken) = mpsc::channel::<()>();
            let deepest = Rc::new(Cell::new(0));
            let seen = deepest.clone();
            let deep = greenweave::thread::Builder::new()
                .name("deep".into())
                .stack_size(64 * 1024)
                .spawn(move || {
                    let start = stack_pointer();
                    // 52 KiB of 64: past 75%, short of an overflow.
                    while woken.recv().is_ok() {
                        go_deep(start - 52 * 1024, 0, &seen);
                    }
                })
                .unwrap();
            // A shallow green thread, swept as often: never warned about.
            let (_keep, shallow_waits) = mpsc::channel::<()>();
            let shallow = greenweave::thread::Builder::new()
                .name("shallow".into())
                .stack_size(64 * 1024)
                .spawn(move || {
                    let _ = shallow_waits.recv();
                })
                .unwrap();
            for round in 1..=4 {
                wake.send(()).unwrap();
                idle_until(|| releases() >= round);
            }
            // A dump measures too; it must not warn again.
            drop(greenweave::runtime::dump_without_backtraces());
            drop(wake);
            deep.join().unwrap();
            shallow.cancel();
        });
        std::process::exit(0);
    });
    assert!(outcome.status.success(), "{}", outcome.describe());
    let warnings: Vec<&str> = outcome
        .stderr
        .lines()
        .filter(|line| line.contains("of its 64 KiB stack"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", outcome.describe());
    assert!(
        warnings[0].starts_with("greenweave: green thread 'deep' (id "),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].contains("overflows"), "{}", warnings[0]);
}
