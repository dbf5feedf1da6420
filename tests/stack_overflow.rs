//! What happens when code faults: overflowing a coroutine's stack is reported and aborts, and
//! every other fault still gets the treatment it would get without greenweave.
//!
//! Each test runs its crashing part in a child process (see `common`).

mod common;

use std::hint::black_box;
use std::ptr;
use std::thread;

use common::run_in_child;
use greenweave::{Coroutine, Stack};

/// Recurses until the stack runs out. The array, touched through `black_box`, gives each
/// frame a real size and keeps the recursion from being turned into a loop.
#[inline(never)]
fn recurse_forever(depth: u64) -> u64 {
    let mut frame = [0u8; 512];
    frame[0] = depth as u8;
    black_box(&mut frame);
    if black_box(depth) == u64::MAX {
        return 0;
    }
    recurse_forever(depth + 1).wrapping_add(u64::from(black_box(frame)[1]))
}

fn assert_green_thread_overflow_report(outcome: &common::ChildOutcome, thread: &str, kib: usize) {
    common::assert_aborted_saying(
        outcome,
        &format!(
            "green thread '<unnamed>' on thread '{thread}' has overflowed its stack ({kib} KiB)"
        ),
    );
}

#[test]
fn overflowing_a_coroutine_stack_reports_the_green_thread_and_its_os_thread_then_aborts() {
    let outcome = run_in_child(
        "overflowing_a_coroutine_stack_reports_the_green_thread_and_its_os_thread_then_aborts",
        || {
            thread::Builder::new()
                .name("overflow-probe".to_owned())
                .spawn(|| {
                    let stack = Stack::new(64 * 1024).unwrap();
                    let mut co =
                        Coroutine::<(), (), u64>::with_stack(stack, |_, ()| recurse_forever(0));
                    co.resume(());
                })
                .unwrap()
                .join()
                .unwrap();
        },
    );
    assert_green_thread_overflow_report(&outcome, "overflow-probe", 64);
}

#[test]
fn overflowing_a_default_size_coroutine_stack_reports_its_size() {
    let outcome = run_in_child(
        "overflowing_a_default_size_coroutine_stack_reports_its_size",
        || {
            thread::Builder::new()
                .name("default-size".to_owned())
                .spawn(|| {
                    let mut co = Coroutine::<(), (), u64>::new(|_, ()| recurse_forever(0));
                    co.resume(());
                })
                .unwrap()
                .join()
                .unwrap();
        },
    );
    assert_green_thread_overflow_report(&outcome, "default-size", Stack::DEFAULT_SIZE / 1024);
}

#[test]
fn overflowing_a_coroutine_nested_in_another_reports_the_overflow() {
    let outcome = run_in_child(
        "overflowing_a_coroutine_nested_in_another_reports_the_overflow",
        || {
            thread::Builder::new()
                .name("nested".to_owned())
                .spawn(|| {
                    let mut outer = Coroutine::<(), (), ()>::new(|_, ()| {
                        let stack = Stack::new(32 * 1024).unwrap();
                        let mut inner =
                            Coroutine::<(), (), u64>::with_stack(stack, |_, ()| recurse_forever(0));
                        inner.resume(());
                    });
                    outer.resume(());
                })
                .unwrap()
                .join()
                .unwrap();
        },
    );
    assert_green_thread_overflow_report(&outcome, "nested", 32);
}

#[test]
fn overflowing_a_coroutine_on_an_unnamed_thread_names_it_unnamed_as_std_does() {
    let outcome = run_in_child(
        "overflowing_a_coroutine_on_an_unnamed_thread_names_it_unnamed_as_std_does",
        || {
            thread::spawn(|| {
                let stack = Stack::new(64 * 1024).unwrap();
                let mut co =
                    Coroutine::<(), (), u64>::with_stack(stack, |_, ()| recurse_forever(0));
                co.resume(());
            })
            .join()
            .unwrap();
        },
    );
    assert_green_thread_overflow_report(&outcome, "<unnamed>", 64);
}

#[test]
fn overflowing_a_named_green_thread_reports_its_name() {
    let outcome = run_in_child("overflowing_a_named_green_thread_reports_its_name", || {
        thread::Builder::new()
            .name("runtime-thread".to_owned())
            .spawn(|| {
                greenweave::run(|| {
                    greenweave::thread::Builder::new()
                        .name("deep-recursion".to_owned())
                        .stack_size(64 * 1024)
                        .spawn(|| recurse_forever(0))
                        .unwrap()
                        .join()
                        .unwrap()
                })
            })
            .unwrap()
            .join()
            .unwrap();
    });
    assert_eq!(
        outcome.signal(),
        Some(libc::SIGABRT),
        "{}",
        outcome.describe()
    );
    let expected = "green thread 'deep-recursion' on thread 'runtime-thread' has overflowed its \
                    stack (64 KiB)";
    assert!(
        outcome.stderr.contains(expected),
        "stderr should contain {expected:?}\n{}",
        outcome.describe()
    );
}

/// Maps and unmaps a stack at every level of an ever deeper recursion, so that the stack runs
/// out inside `Stack::new` or `Stack`'s drop, at the deepest point of either: with the guard
/// registry's lock held by this very thread.
#[inline(never)]
fn map_stacks_ever_deeper(depth: u64) -> u64 {
    let mut frame = [0u8; 16];
    frame[0] = depth as u8;
    black_box(&mut frame);
    drop(black_box(Stack::new(16 * 1024).unwrap()));
    if black_box(depth) == u64::MAX {
        return 0;
    }
    map_stacks_ever_deeper(depth + 1).wrapping_add(u64::from(black_box(frame)[1]))
}

/// Keeps this many stacks mapped, so the guard registry is a tree of some depth whose inserts
/// and removals need more stack than the code around them.
fn map_some_stacks() -> Vec<Stack> {
    (0..2000).map(|_| Stack::new(16 * 1024).unwrap()).collect()
}

#[test]
fn overflowing_a_coroutine_stack_while_mapping_a_stack_reports_the_overflow() {
    let outcome = run_in_child(
        "overflowing_a_coroutine_stack_while_mapping_a_stack_reports_the_overflow",
        || {
            thread::Builder::new()
                .name("registry-holder".to_owned())
                .spawn(|| {
                    let live = map_some_stacks();
                    let stack = Stack::new(64 * 1024).unwrap();
                    let mut co = Coroutine::<(), (), u64>::with_stack(stack, |_, ()| {
                        map_stacks_ever_deeper(0)
                    });
                    co.resume(());
                    drop(live);
                })
                .unwrap()
                .join()
                .unwrap();
        },
    );
    assert_green_thread_overflow_report(&outcome, "registry-holder", 64);
}

#[test]
fn overflowing_a_std_thread_while_mapping_a_stack_is_still_reported_by_std() {
    let outcome = run_in_child(
        "overflowing_a_std_thread_while_mapping_a_stack_is_still_reported_by_std",
        || {
            thread::Builder::new()
                .name("registry-holder".to_owned())
                .stack_size(128 * 1024)
                .spawn(|| {
                    let live = map_some_stacks();
                    map_stacks_ever_deeper(0);
                    drop(live);
                })
                .unwrap()
                .join()
                .unwrap();
        },
    );
    assert_eq!(
        outcome.signal(),
        Some(libc::SIGABRT),
        "std aborts on a thread's overflow\n{}",
        outcome.describe()
    );
    assert!(
        outcome
            .stderr
            .contains("thread 'registry-holder' has overflowed its stack")
            || outcome.stderr.contains("thread 'registry-holder' ("),
        "std should report the overflow of the thread\n{}",
        outcome.describe()
    );
    assert!(
        !outcome.stderr.contains("green thread"),
        "a std thread is not a green thread\n{}",
        outcome.describe()
    );
}

#[test]
fn a_null_pointer_write_still_dies_of_sigsegv_once_the_handler_is_installed() {
    let outcome = run_in_child(
        "a_null_pointer_write_still_dies_of_sigsegv_once_the_handler_is_installed",
        || {
            // Mapping a stack installs greenweave's fault handler.
            let stack = Stack::new(16 * 1024).unwrap();
            black_box(&stack);
            let null = black_box(ptr::null_mut::<u64>());
            // SAFETY: not safe at all: this is the fault under test.
            unsafe { ptr::write_volatile(null, 1) };
        },
    );
    assert_eq!(
        outcome.signal(),
        Some(libc::SIGSEGV),
        "the child should die of SIGSEGV\n{}",
        outcome.describe()
    );
    assert!(
        !outcome.stderr.contains("overflowed"),
        "a null-pointer write is not an overflow\n{}",
        outcome.describe()
    );
}

#[test]
fn a_fault_inside_a_coroutine_outside_its_guard_page_still_dies_of_sigsegv() {
    let outcome = run_in_child(
        "a_fault_inside_a_coroutine_outside_its_guard_page_still_dies_of_sigsegv",
        || {
            let mut co = Coroutine::<(), (), ()>::new(|_, ()| {
                // An inaccessible page of our own, just like a guard page but not registered.
                // SAFETY: a fresh anonymous mapping; nothing else refers to it.
                let page = unsafe {
                    libc::mmap(
                        ptr::null_mut(),
                        4096,
                        libc::PROT_NONE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                assert_ne!(page, libc::MAP_FAILED);
                // SAFETY: not safe at all: this is the fault under test.
                unsafe { ptr::write_volatile(black_box(page.cast::<u64>()), 1) };
            });
            co.resume(());
        },
    );
    assert_eq!(
        outcome.signal(),
        Some(libc::SIGSEGV),
        "the child should die of SIGSEGV\n{}",
        outcome.describe()
    );
    assert!(
        !outcome.stderr.contains("overflowed"),
        "a fault in an unrelated page is not an overflow\n{}",
        outcome.describe()
    );
}

#[test]
fn a_std_thread_overflow_is_still_reported_by_std_once_the_handler_is_installed() {
    let outcome = run_in_child(
        "a_std_thread_overflow_is_still_reported_by_std_once_the_handler_is_installed",
        || {
            let stack = Stack::new(16 * 1024).unwrap();
            black_box(&stack);
            thread::Builder::new()
                .name("deep-recursion".to_owned())
                .stack_size(128 * 1024)
                .spawn(|| recurse_forever(0))
                .unwrap()
                .join()
                .unwrap();
        },
    );
    assert_eq!(
        outcome.signal(),
        Some(libc::SIGABRT),
        "std aborts on a thread's overflow\n{}",
        outcome.describe()
    );
    // std writes `thread '<name>' (<tid>) has overflowed its stack`; older versions leave
    // out the thread id.
    let report = outcome
        .stderr
        .lines()
        .find(|line| line.contains("has overflowed its stack"))
        .unwrap_or_else(|| panic!("std should report the overflow\n{}", outcome.describe()));
    assert!(
        report.starts_with("thread 'deep-recursion'"),
        "std's report should name the thread\n{}",
        outcome.describe()
    );
    assert!(
        !outcome.stderr.contains("green thread"),
        "a std thread is not a green thread\n{}",
        outcome.describe()
    );
}

/// The body is written at the top of the stack and moved out once more to be called (twice
/// in debug builds), so `with_stack` only accepts a body that fits three times over with 4 KiB
/// to spare; one that it accepts must then run without overflowing.
#[test]
fn a_body_that_with_stack_accepts_runs_without_overflowing() {
    const BODY_BYTES: usize = 16 * 1024;
    let outcome = run_in_child(
        "a_body_that_with_stack_accepts_runs_without_overflowing",
        || {
            let stack = Stack::new(64 * 1024).unwrap();
            let data = [1u8; BODY_BYTES];
            let mut co = Coroutine::<(), (), usize>::with_stack(stack, move |_, ()| {
                data.iter().map(|&byte| usize::from(byte)).sum()
            });
            assert_eq!(co.resume(()).into_return(), Some(BODY_BYTES));
            std::process::exit(0);
        },
    );
    assert!(
        outcome.status.success(),
        "three copies of a {BODY_BYTES}-byte body leave 16 KiB of a 64 KiB stack to spare\n{}",
        outcome.describe()
    );
}

#[test]
fn overflowing_a_spawned_green_thread_says_which_settings_give_it_a_larger_stack() {
    let outcome = run_in_child(
        "overflowing_a_spawned_green_thread_says_which_settings_give_it_a_larger_stack",
        || {
            greenweave::run(|| {
                greenweave::thread::Builder::new()
                    .name("worker".to_owned())
                    .spawn(|| recurse_forever(0))
                    .unwrap()
                    .join()
                    .unwrap()
            });
        },
    );
    common::assert_aborted_saying(
        &outcome,
        "' has overflowed its stack (256 KiB)\n\
         help: give it a larger stack: greenweave::thread::Builder::stack_size for a spawned \
         green thread (Runtime::builder().stack_size for all of them), \
         Runtime::builder().main_stack_size for the main green thread of run (8 MiB by default), \
         the Stack given to a Coroutine or Greenlet\n\
         fatal runtime error: stack overflow in a greenweave coroutine, aborting",
    );
    assert!(
        outcome.stderr.contains("green thread 'worker' on thread '"),
        "{}",
        outcome.describe()
    );
}

/// Recurses `depth` deep with a 16-byte array live in every frame: 20,000 levels need more
/// than a 256 KiB stack, and fit std's 8 MiB main thread (also with AddressSanitizer's larger
/// frames).
#[inline(never)]
fn recurse_with_a_live_array(depth: u32) -> u64 {
    let mut frame = [0u8; 16];
    frame[0] = depth as u8;
    black_box(&mut frame);
    if depth == 0 {
        return 0;
    }
    recurse_with_a_live_array(depth - 1) + u64::from(black_box(frame)[0])
}

#[test]
fn the_main_green_thread_of_run_fits_a_20000_deep_recursion_as_std_main_does() {
    // In a child: without the room, the recursion aborts the process.
    let outcome = run_in_child(
        "the_main_green_thread_of_run_fits_a_20000_deep_recursion_as_std_main_does",
        || {
            let sum = greenweave::run(|| recurse_with_a_live_array(20_000));
            let expected: u64 = (1..=20_000u32).map(|depth| u64::from(depth as u8)).sum();
            std::process::exit(if sum == expected { 0 } else { 1 });
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
}

#[test]
fn a_main_stack_size_too_small_for_a_recursion_overflows_where_the_default_does_not() {
    // The setting is honoured: the same recursion overflows a 256 KiB main green thread.
    let outcome = run_in_child(
        "a_main_stack_size_too_small_for_a_recursion_overflows_where_the_default_does_not",
        || {
            let runtime = greenweave::Runtime::builder()
                .main_stack_size(256 * 1024)
                .build()
                .unwrap();
            runtime.run(|| recurse_with_a_live_array(20_000));
            std::process::exit(0);
        },
    );
    common::assert_aborted_saying(&outcome, "has overflowed its stack (256 KiB)");
    assert!(
        outcome.stderr.contains("green thread 'main' on thread '"),
        "{}",
        outcome.describe()
    );
}
