//! Compaction of long-parked green threads (`runtime::Builder::compact_parked_stacks`): the
//! live frames go to the heap, the whole stack is given back, and the frames come back to the
//! same addresses before the green thread runs, is cancelled, is dumped with a backtrace or is
//! dropped with its runtime. A green thread that lends its stack (a `thread::scope` is open)
//! is never compacted.
//!
//! No test waits for a time to pass: the threshold is zero and each test waits for the event
//! that proves a compaction happened (the metrics' count), turning the scheduler idle with
//! short green sleeps meanwhile. Everything a test asserts after a wake-up was on the
//! compacted stack while it was parked: locals, a borrowed buffer, a `String`'s pointer.

mod common;

use std::cell::Cell;
use std::hint::black_box;
use std::io::{Read, Write};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::run_in_child;
use greenweave::Runtime;
use greenweave::net::{TcpListener, TcpStream};
use greenweave::runtime::metrics;
use greenweave::sync::mpsc;

/// A runtime that compacts every park at the scheduler's next look.
fn compacting_runtime() -> Runtime {
    // SAFETY: no test here lends a green thread's stack to another OS thread.
    unsafe {
        Runtime::builder()
            .stack_release(Some(Duration::ZERO))
            .compact_parked_stacks()
    }
    .build()
    .unwrap()
}

/// Sleeps in short green sleeps until the runtime has made `count` compactions in all.
fn wait_for_compactions(count: u64) {
    for _ in 0..20_000 {
        if metrics().stack_compaction_count() >= count {
            return;
        }
        greenweave::thread::sleep(Duration::from_millis(1));
    }
    panic!(
        "only {} of {count} compactions after 20,000 turns",
        metrics().stack_compaction_count()
    );
}

/// Fills a 4 KiB frame with a pattern, parks through `park` inside it, and checks the pattern
/// afterwards: the frame is on the stack across the park.
#[inline(never)]
fn park_in_a_patterned_frame(seed: u8, park: impl FnOnce() -> u64) -> u64 {
    let mut frame = [0u8; 4096];
    for (index, byte) in frame.iter_mut().enumerate() {
        *byte = seed.wrapping_add(index as u8);
    }
    black_box(&mut frame);
    let got = park();
    black_box(&mut frame);
    let intact = frame
        .iter()
        .enumerate()
        .all(|(index, byte)| *byte == seed.wrapping_add(index as u8));
    assert!(intact, "the parked frame came back changed");
    got
}

#[test]
fn a_compacted_green_thread_wakes_with_its_frames_and_borrows_intact() {
    compacting_runtime().run(|| {
        let (wake, parked) = mpsc::channel::<u64>();
        let waiter = greenweave::spawn(move || {
            let name = String::from("kept across the park");
            let borrowed: &str = &name;
            let got = park_in_a_patterned_frame(7, || parked.recv().unwrap());
            (borrowed.to_owned(), got)
        });
        wait_for_compactions(1);
        let restored_before = metrics().stack_restoration_count();
        let dump = greenweave::runtime::dump_without_backtraces();
        assert!(
            dump.green_threads()
                .iter()
                .any(|thread| thread.stack_compacted().is_some()),
            "{dump}"
        );
        wake.send(42).unwrap();
        let (name, got) = waiter.join().unwrap();
        assert_eq!(name, "kept across the park");
        assert_eq!(got, 42);
        assert!(metrics().stack_restoration_count() > restored_before);
    });
}

#[test]
fn a_green_thread_compacted_while_waiting_for_a_socket_reads_every_byte() {
    compacting_runtime().run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let reader = greenweave::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut received = Vec::new();
            park_in_a_patterned_frame(3, || stream.read_to_end(&mut received).unwrap() as u64);
            received
        });
        let mut client = TcpStream::connect(address).unwrap();
        // The reader is parked on its socket and compacted before any byte is sent.
        wait_for_compactions(1);
        let sent: Vec<u8> = (0..100_000u32).map(|n| (n % 251) as u8).collect();
        client.write_all(&sent).unwrap();
        drop(client);
        assert_eq!(reader.join().unwrap(), sent);
    });
}

#[test]
fn a_sleeping_green_thread_is_compacted_and_wakes_at_its_deadline() {
    compacting_runtime().run(|| {
        let sleeper = greenweave::spawn(|| {
            park_in_a_patterned_frame(11, || {
                greenweave::thread::sleep(Duration::from_millis(200));
                5
            })
        });
        wait_for_compactions(1);
        assert_eq!(sleeper.join().unwrap(), 5);
    });
}

#[test]
fn a_green_thread_with_a_scope_open_is_never_compacted() {
    compacting_runtime().run(|| {
        let (wake, parked) = mpsc::channel::<()>();
        let (ready, scope_parked) = mpsc::channel::<()>();
        let (seen_tx, seen) = mpsc::channel::<u64>();
        let parent = greenweave::spawn(move || {
            let local = Cell::new(1u64);
            greenweave::thread::scope(|scope| {
                scope.spawn(|| {
                    // Reads the parent's local after the parent has parked (and been swept).
                    scope_parked.recv().unwrap();
                    seen_tx.send(local.get()).unwrap();
                });
                local.set(77);
                // The parent parks in a compactable wait while its child borrows `local`.
                parked.recv().unwrap();
            });
        });
        // A second parked green thread, which is compacted: the sweep did run.
        let (_keep, other_waits) = mpsc::channel::<()>();
        let other = greenweave::spawn(move || {
            let _ = other_waits.recv();
        });
        wait_for_compactions(1);
        let dump = greenweave::runtime::dump_without_backtraces();
        let compacted: Vec<u64> = dump
            .green_threads()
            .iter()
            .filter(|thread| thread.stack_compacted().is_some())
            .map(|thread| thread.id())
            .collect();
        assert!(
            !compacted.contains(&parent.thread().id().as_u64()),
            "{dump}"
        );
        assert!(compacted.contains(&other.thread().id().as_u64()), "{dump}");
        ready.send(()).unwrap();
        assert_eq!(seen.recv().unwrap(), 77);
        wake.send(()).unwrap();
        parent.join().unwrap();
        other.cancel();
    });
}

#[test]
fn a_compacted_green_thread_that_is_cancelled_unwinds_through_its_frames() {
    compacting_runtime().run(|| {
        let dropped = Rc::new(Cell::new(false));
        struct SetOnDrop(Rc<Cell<bool>>, u64);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                assert_eq!(self.1, 0xfeed, "the guard's frame came back changed");
                self.0.set(true);
            }
        }
        let (_keep, never) = mpsc::channel::<()>();
        let guard_flag = dropped.clone();
        let waiter = greenweave::spawn(move || {
            let _guard = SetOnDrop(guard_flag, 0xfeed);
            park_in_a_patterned_frame(13, || {
                let _ = never.recv();
                0
            })
        });
        wait_for_compactions(1);
        waiter.cancel();
        assert!(waiter.join().is_err());
        assert!(dropped.get());
    });
}

#[test]
fn compacted_green_threads_left_parked_are_unwound_when_the_runtime_ends() {
    let dropped = Arc::new(AtomicUsize::new(0));
    struct CountOnDrop(Arc<AtomicUsize>);
    impl Drop for CountOnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let counter = dropped.clone();
    let keep = compacting_runtime().run(move || {
        let (keep, never) = mpsc::channel::<()>();
        let never = Rc::new(never);
        for _ in 0..10 {
            let never = never.clone();
            let guard = CountOnDrop(counter.clone());
            greenweave::spawn(move || {
                let _guard = guard;
                let _ = never.recv();
            });
        }
        wait_for_compactions(10);
        // The sender stays alive: the ten are still parked when `run` returns.
        keep
    });
    assert_eq!(dropped.load(Ordering::SeqCst), 10);
    drop(keep);
}

#[inline(never)]
fn parks_compacted_in_a_named_frame(parked: mpsc::Receiver<()>) {
    park_in_a_patterned_frame(17, || {
        let _ = parked.recv();
        0
    });
}

#[test]
fn a_dump_shows_compaction_and_walks_a_compacted_green_thread() {
    compacting_runtime().run(|| {
        let (wake, parked) = mpsc::channel::<()>();
        let waiter = greenweave::thread::Builder::new()
            .name("compacted".into())
            .spawn(move || parks_compacted_in_a_named_frame(parked))
            .unwrap();
        wait_for_compactions(1);
        let cheap = greenweave::runtime::dump_without_backtraces();
        let entry = cheap
            .green_threads()
            .iter()
            .find(|thread| thread.name() == Some("compacted"))
            .unwrap();
        let frames = entry.stack_compacted().expect("compacted");
        assert!(
            frames > 4096 && frames < 16 * 1024,
            "{frames} bytes of frames"
        );
        assert!(cheap.to_string().contains("compacted:"), "{cheap}");
        assert!(
            cheap.to_json().contains("\"compacted\":"),
            "{}",
            cheap.to_json()
        );
        // The walk needs the frames back on the stack; the dump still says it was compacted.
        let full = greenweave::runtime::dump();
        let text = full.to_string();
        assert!(text.contains("parks_compacted_in_a_named_frame"), "{text}");
        // Swept again, it is compacted again.
        wait_for_compactions(2);
        wake.send(()).unwrap();
        waiter.join().unwrap();
    });
}

/// Hands the address of a local (on a green thread's stack) to another green thread with raw
/// pointers: what `unsafe` code could do, and what compaction cannot see. Without the checking
/// mode the other side reads zeros from the released page; with it (`--cfg
/// greenweave_compact_check`, `.ci/run`) the read faults and the report names both green
/// threads.
#[test]
fn a_stray_read_of_a_compacted_stack_reads_zeros_or_is_reported_by_name() {
    const TEST: &str = "a_stray_read_of_a_compacted_stack_reads_zeros_or_is_reported_by_name";
    let outcome = run_in_child(TEST, || {
        compacting_runtime().run(|| {
            let (address_tx, address) = mpsc::channel::<usize>();
            let (_keep, never) = mpsc::channel::<()>();
            let _owner = greenweave::thread::Builder::new()
                .name("owner".into())
                .spawn(move || {
                    let local = black_box([0x5au8; 64]);
                    address_tx.send(local.as_ptr() as usize).unwrap();
                    let _ = never.recv();
                    black_box(local);
                })
                .unwrap();
            let at = address.recv().unwrap();
            wait_for_compactions(1);
            let reader = greenweave::thread::Builder::new()
                .name("stray reader".into())
                .spawn(move || {
                    // SAFETY: not safe, and that is the point: the owner's stack is compacted.
                    // The page is mapped (released pages read as zeros) unless the checking
                    // mode made it fault.
                    unsafe { (at as *const u8).read_volatile() }
                })
                .unwrap();
            let byte = reader.join().unwrap();
            println!("stray read: {byte:#x}");
            end_child_now();
        });
    });
    if cfg!(greenweave_compact_check) {
        assert_aborted_saying(&outcome, &["green thread 'stray reader'", "compacted"]);
    } else {
        assert!(outcome.status.success(), "{}", outcome.describe());
        // Under AddressSanitizer the local lives on its fake stack, which is not compacted.
        let expected = if std::env::var_os("ASAN_OPTIONS").is_some() {
            ["stray read: 0x0", "stray read: 0x5a"].as_slice()
        } else {
            ["stray read: 0x0"].as_slice()
        };
        assert!(
            expected.iter().any(|line| outcome.stdout.contains(line)),
            "{}",
            outcome.describe()
        );
    }
}

/// Checks that a child ended by `abort` after writing each of `lines` to stderr.
fn assert_aborted_saying(outcome: &common::ChildOutcome, lines: &[&str]) {
    assert_eq!(
        outcome.signal(),
        Some(libc::SIGABRT),
        "{}",
        outcome.describe()
    );
    for line in lines {
        assert!(
            outcome.stderr.contains(line),
            "{line:?}: {}",
            outcome.describe()
        );
    }
}

/// Ends a child process at once, its output flushed, without the exit handlers: the runtime
/// is left running on purpose, and LeakSanitizer's exit check (the AddressSanitizer run of
/// `.ci/run`) would report what it holds.
fn end_child_now() -> ! {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    // SAFETY: `_exit` ends the process without running anything of ours.
    unsafe { libc::_exit(0) }
}

#[test]
fn without_the_setting_nothing_is_compacted() {
    let runtime = Runtime::builder()
        .stack_release(Some(Duration::ZERO))
        .build()
        .unwrap();
    runtime.run(|| {
        let (wake, parked) = mpsc::channel::<()>();
        let waiter = greenweave::spawn(move || parked.recv().unwrap());
        // Swept: released below its stack pointer, or measured (or, in the checking mode,
        // compacted at its park whatever the setting).
        while metrics().stack_release_count() == 0
            && metrics().long_parked_stack_bytes() == 0
            && metrics().compacted_stack_bytes() == 0
        {
            greenweave::thread::sleep(Duration::from_millis(1));
        }
        if !cfg!(greenweave_compact_check) {
            assert_eq!(metrics().stack_compaction_count(), 0);
        }
        wake.send(()).unwrap();
        waiter.join().unwrap();
    });
}

/// Recurses 1 KiB a frame until `depth` reaches `until` (far past any stack here).
#[inline(never)]
fn overflow(depth: u64, until: u64) -> u64 {
    let mut frame = [depth as u8; 1024];
    black_box(&mut frame);
    if depth == until {
        return 0;
    }
    overflow(depth + 1, until) + u64::from(frame[7])
}

/// Compaction lifts a stack's guard region with its pages (so that the page tables of a run of
/// compacted neighbours can go): the guard must be back before the green thread runs, and an
/// overflow after the wake-up is reported as one, not a write into the neighbouring stack.
#[test]
fn a_compacted_green_thread_that_overflows_after_waking_hits_its_guard() {
    const TEST: &str = "a_compacted_green_thread_that_overflows_after_waking_hits_its_guard";
    let outcome = run_in_child(TEST, || {
        compacting_runtime().run(|| {
            let (wake, parked) = mpsc::channel::<()>();
            let deep = greenweave::thread::Builder::new()
                .name("overflows after its wake-up".into())
                .stack_size(64 * 1024)
                .spawn(move || {
                    parked.recv().unwrap();
                    overflow(0, black_box(u64::MAX))
                })
                .unwrap();
            // Its neighbours, compacted too: a missing guard would let the overflow run into
            // one of them.
            let (_keep, never) = mpsc::channel::<()>();
            let never = Rc::new(never);
            for _ in 0..8 {
                let never = never.clone();
                greenweave::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let _ = never.recv();
                    })
                    .unwrap();
            }
            wait_for_compactions(9);
            wake.send(()).unwrap();
            let _ = deep.join();
            println!("the overflow was not caught");
            end_child_now();
        });
    });
    assert_aborted_saying(
        &outcome,
        &[
            "green thread 'overflows after its wake-up'",
            "has overflowed its stack",
        ],
    );
}

#[test]
fn the_metrics_gauge_the_bytes_compacted_green_threads_keep_on_the_heap() {
    compacting_runtime().run(|| {
        let (_keep, never) = mpsc::channel::<()>();
        let never = Rc::new(never);
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let never = never.clone();
                greenweave::spawn(move || {
                    let _ = never.recv();
                })
            })
            .collect();
        wait_for_compactions(4);
        // The gauge is published when a round of sweeps has visited every task.
        for _ in 0..20_000 {
            if metrics().compacted_stack_bytes() > 0 {
                break;
            }
            greenweave::thread::sleep(Duration::from_millis(1));
        }
        let dump = greenweave::runtime::dump_without_backtraces();
        let in_dump: usize = dump
            .green_threads()
            .iter()
            .filter_map(|thread| thread.stack_compacted())
            .sum();
        let gauge = metrics().compacted_stack_bytes() as usize;
        // Not equal: the main green thread's short sleeps may be compacted at a round's time
        // and not at the dump's.
        assert!(
            gauge > 0 && in_dump > 0,
            "gauge {gauge}, dump {in_dump}: {dump}"
        );
        for waiter in waiters {
            waiter.cancel();
        }
    });
}
