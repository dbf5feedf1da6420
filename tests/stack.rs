//! `Stack`: what sizes it accepts, how it rounds them, that it survives a trip through a
//! coroutine, and that its guard page is inaccessible and costs the mappings its kind says.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

mod common;

use greenweave::{Coroutine, CoroutineResult, Stack};

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap()
}

#[test]
fn a_zero_sized_stack_is_invalid_input() {
    let error = Stack::new(0).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn a_stack_whose_size_overflows_when_rounded_up_is_invalid_input() {
    let error = Stack::new(usize::MAX).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    let error = Stack::new(usize::MAX - page_size() + 2).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn absurdly_large_stacks_are_refused_with_an_error_not_a_panic() {
    let page = page_size();
    for size in [
        usize::MAX - page,
        usize::MAX - 2 * page,
        usize::MAX / 2,
        usize::MAX / 2 + 1,
        1 << 62,
    ] {
        assert!(
            Stack::new(size).is_err(),
            "a {size}-byte stack cannot be mapped"
        );
    }
}

#[test]
fn sizes_are_rounded_up_to_whole_pages() {
    let page = page_size();
    for (requested, usable) in [
        (1, page),
        (page - 1, page),
        (page, page),
        (page + 1, 2 * page),
        (10 * page + page / 2, 11 * page),
        (64 * 1024, (64 * 1024usize).next_multiple_of(page)),
    ] {
        let stack = Stack::new(requested).unwrap();
        assert_eq!(stack.size(), usable, "requested {requested} bytes");
    }
}

#[test]
fn a_default_size_stack_has_the_default_size() {
    let stack = Stack::new(Stack::DEFAULT_SIZE).unwrap();
    assert_eq!(stack.size(), Stack::DEFAULT_SIZE);
}

#[test]
fn a_stack_keeps_its_size_through_a_coroutine_and_back() {
    let stack = Stack::new(40 * 1024 + 1).unwrap();
    let size = stack.size();

    let mut co = Coroutine::with_stack(stack, |yielder, n: u32| yielder.suspend(n) + 1);
    assert_eq!(co.resume(1), CoroutineResult::Yield(1));
    let stack = co.into_stack();
    assert_eq!(stack.size(), size);

    let mut co = Coroutine::<u32, (), u32>::with_stack(stack, |_, n| n * 2);
    assert_eq!(co.resume(21), CoroutineResult::Return(42));
    assert_eq!(co.into_stack().size(), size);
}

#[test]
fn a_stack_can_be_reused_by_many_coroutines_in_turn() {
    let mut stack = Stack::new(32 * 1024).unwrap();
    for round in 0..100u64 {
        let mut co = Coroutine::with_stack(stack, move |yielder, n: u64| {
            let doubled = yielder.suspend(n + round);
            doubled * 2
        });
        assert_eq!(co.resume(1), CoroutineResult::Yield(1 + round));
        assert_eq!(co.resume(round), CoroutineResult::Return(round * 2));
        stack = co.into_stack();
    }
    assert_eq!(stack.size(), 32 * 1024);
}

#[test]
fn a_body_must_leave_4_kib_of_its_stack_free_to_run_in() {
    // One 4 KiB page cannot hold the initial frame and 4 KiB of room below the body.
    let stack = Stack::new(4096).unwrap();
    let fits = stack.size() > 4096;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut co = Coroutine::<u8, (), u8>::with_stack(stack, |_, n| n + 1);
        co.resume(1)
    }));
    match outcome {
        Ok(result) => {
            assert!(fits, "a 4 KiB stack has no room for a body");
            assert_eq!(result, CoroutineResult::Return(2));
        }
        Err(payload) => {
            assert!(!fits, "a larger page leaves room for a small body");
            assert!(panic_message(&*payload).contains("does not fit"));
        }
    }
    let stack = Stack::new(8 * 1024).unwrap();
    let mut co = Coroutine::<u8, (), u8>::with_stack(stack, |_, n| n + 1);
    assert_eq!(co.resume(1), CoroutineResult::Return(2));
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("")
}

#[test]
fn a_body_too_large_for_its_stack_is_refused_with_a_message_and_dropped() {
    use std::rc::Rc;

    let stack = Stack::new(16 * 1024).unwrap();
    let witness = Rc::new(());
    let captured = Rc::clone(&witness);
    let big = [7u8; 64 * 1024];
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        Coroutine::<(), (), usize>::with_stack(stack, move |_, ()| {
            let _captured = &captured;
            big.iter().map(|&b| usize::from(b)).sum()
        })
    }));
    let payload = result.expect_err("a 64 KiB body cannot fit in a 16 KiB stack");
    let message = panic_message(&*payload);
    assert!(
        message.contains("does not fit"),
        "unexpected message {message:?}"
    );
    assert_eq!(
        Rc::strong_count(&witness),
        1,
        "the refused body's captures are dropped"
    );
}

#[test]
fn debug_output_of_a_stack_names_its_size() {
    let stack = Stack::new(8 * 1024).unwrap();
    let text = format!("{stack:?}");
    assert!(text.contains(&format!("size: {}", stack.size())), "{text}");
}

/// One line of `/proc/self/maps`: `[start, end)` and the permissions (`rw-p`, `---p`, ...).
struct Mapping {
    start: usize,
    end: usize,
    perms: String,
}

fn memory_mappings() -> Vec<Mapping> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next().unwrap();
            let perms = fields.next().unwrap().to_owned();
            let (start, end) = range.split_once('-').unwrap();
            Mapping {
                start: usize::from_str_radix(start, 16).unwrap(),
                end: usize::from_str_radix(end, 16).unwrap(),
                perms,
            }
        })
        .collect()
}

/// Where a stack lies and which guard kind it reports, read from its `Debug` output
/// (`Stack { limit: 0x.., top: 0x.., size: .., guard: .. }`), the only place the public API
/// shows them.
struct StackLayout {
    limit: usize,
    top: usize,
    guard: String,
}

fn layout_of(stack: &Stack) -> StackLayout {
    let text = format!("{stack:?}");
    let field = |name: &str| -> &str {
        let start = text
            .find(&format!("{name}: "))
            .unwrap_or_else(|| panic!("{text}"))
            + name.len()
            + 2;
        let rest = &text[start..];
        &rest[..rest.find([',', ' ']).unwrap_or(rest.len())]
    };
    let address =
        |name: &str| usize::from_str_radix(field(name).trim_start_matches("0x"), 16).unwrap();
    StackLayout {
        limit: address("limit"),
        top: address("top"),
        guard: field("guard").to_owned(),
    }
}

/// Whether the kernel refuses to read the byte at `address`: write(2) from it into a pipe
/// fails with EFAULT. The kernel does the read, so a working guard page fails the call
/// instead of killing the test.
fn kernel_cannot_read(pipe: &OwnedFd, address: usize) -> bool {
    // SAFETY: write(2) only reads one byte at `address`, through the kernel's user-copy
    // routine, which turns a fault into EFAULT; the pipe (64 KiB) has room for every byte the
    // test writes (one per stack), so the call cannot block.
    let written = unsafe { libc::write(pipe.as_raw_fd(), address as *const libc::c_void, 1) };
    written == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT)
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just opened and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Every stack's guard page is inaccessible whichever way the crate made it, and costs what
/// its kind says: with guard regions (Linux 6.13+ `MADV_GUARD_INSTALL`) a stack is one
/// mapping and neighbours merge, so 2,000 stacks take far fewer than 2,000 mappings; with
/// `PROT_NONE` guard pages each stack is exactly two (a one-page `---p` guard and its usable
/// range). Only this test's own stacks are counted, so tests running alongside do not matter.
#[test]
fn guard_pages_fault_and_take_the_mappings_their_kind_says() {
    const STACKS: usize = 2000;
    let page = page_size();
    let stacks: Vec<Stack> = (0..STACKS)
        .map(|_| Stack::new(Stack::DEFAULT_SIZE).unwrap())
        .collect();
    let layouts: Vec<StackLayout> = stacks.iter().map(layout_of).collect();
    let kind = layouts[0].guard.clone();
    assert!(
        layouts.iter().all(|layout| layout.guard == kind),
        "every stack of a process uses the same guard kind"
    );

    let (_read_end, write_end) = pipe();
    for layout in &layouts {
        assert_eq!(layout.top - layout.limit, Stack::DEFAULT_SIZE);
        assert!(
            kernel_cannot_read(&write_end, layout.limit - page),
            "the {kind} guard page below {:#x} must be inaccessible",
            layout.limit
        );
        assert!(
            !kernel_cannot_read(&write_end, layout.limit),
            "the lowest usable byte at {:#x} must be readable",
            layout.limit
        );
    }

    let maps = memory_mappings();
    let containing = |address: usize| {
        maps.iter()
            .position(|m| m.start <= address && address < m.end)
            .unwrap_or_else(|| panic!("{address:#x} is not mapped"))
    };
    let mut used = std::collections::BTreeSet::new();
    for layout in &layouts {
        let guard = containing(layout.limit - page);
        let usable = containing(layout.limit);
        used.extend([guard, usable, containing(layout.top - 1)]);
        match kind.as_str() {
            "GuardRegion" => {
                assert_eq!(
                    guard, usable,
                    "a guard region does not split its stack's mapping"
                );
                assert!(maps[guard].perms.starts_with("rw"), "{}", maps[guard].perms);
            }
            "ProtNone" => {
                let (guard, usable) = (&maps[guard], &maps[usable]);
                assert_eq!(
                    (guard.start, guard.end),
                    (layout.limit - page, layout.limit)
                );
                assert!(guard.perms.starts_with("---"), "{}", guard.perms);
                assert_eq!((usable.start, usable.end), (layout.limit, layout.top));
                assert!(usable.perms.starts_with("rw"), "{}", usable.perms);
            }
            other => panic!("unknown guard kind {other:?}"),
        }
    }
    println!(
        "guard kind {kind}: {STACKS} stacks take {} mappings (/proc/self/maps lines)",
        used.len()
    );
    if kind == "GuardRegion" {
        assert!(
            used.len() <= STACKS / 10,
            "neighbouring stacks with guard regions should share mappings, but {STACKS} stacks \
             take {} mappings",
            used.len()
        );
    } else {
        assert_eq!(used.len(), 2 * STACKS);
    }
}

/// The stacks of `Coroutine::new`, in the order a fresh thread gets them: the pool maps them in
/// batches (1, 2, 4, ... 64 at a time), so neighbours from one batch lie back to back, each with
/// its own inaccessible guard page; each reports the default size.
fn pooled_stacks_of_a_fresh_thread(count: usize) -> Vec<Stack> {
    std::thread::spawn(move || {
        let coroutines: Vec<_> = (0..count)
            .map(|i| Coroutine::<(), (), usize>::new(move |_, ()| i))
            .collect();
        coroutines
            .into_iter()
            .enumerate()
            .map(|(i, mut co)| {
                assert_eq!(co.resume(()), CoroutineResult::Return(i));
                co.into_stack()
            })
            .collect()
    })
    .join()
    .unwrap()
}

#[test]
fn pooled_stacks_lie_back_to_back_and_each_has_an_inaccessible_guard_page_below_it() {
    let page = page_size();
    let stacks = pooled_stacks_of_a_fresh_thread(300);
    let mut layouts: Vec<StackLayout> = stacks.iter().map(layout_of).collect();
    layouts.sort_by_key(|layout| layout.limit);
    let (_read_end, write_end) = pipe();
    for layout in &layouts {
        assert_eq!(layout.top - layout.limit, Stack::DEFAULT_SIZE);
        assert!(
            kernel_cannot_read(&write_end, layout.limit - page),
            "the guard page below {:#x} must be inaccessible",
            layout.limit
        );
        assert!(!kernel_cannot_read(&write_end, layout.limit));
        assert!(!kernel_cannot_read(&write_end, layout.top - 1));
    }
    let back_to_back = layouts
        .windows(2)
        .filter(|pair| pair[1].limit - page == pair[0].top)
        .count();
    // 300 stacks come in 10 batches (1, 2, 4, ..., 64, 64, 64, 45 of the last one used), so
    // at least 290 stacks follow a neighbour from their own batch.
    assert!(
        back_to_back >= 290,
        "only {back_to_back} of 300 stacks follow their neighbour directly"
    );
}

#[test]
fn overflowing_a_stack_from_the_middle_of_a_batch_is_reported() {
    let outcome = common::run_in_child(
        "overflowing_a_stack_from_the_middle_of_a_batch_is_reported",
        || {
            let mut stacks = pooled_stacks_of_a_fresh_thread(100);
            // The 100th stack of a thread comes from its seventh batch (64 stacks); the 80th
            // lies inside it, between two others of the same mapping.
            let stack = stacks.swap_remove(80);
            let mut co = Coroutine::<(), (), u64>::with_stack(stack, |_, ()| {
                #[inline(never)]
                fn recurse(depth: u64) -> u64 {
                    let mut frame = [0u8; 512];
                    frame[0] = depth as u8;
                    std::hint::black_box(&mut frame);
                    if std::hint::black_box(depth) == u64::MAX {
                        return 0;
                    }
                    recurse(depth + 1).wrapping_add(u64::from(std::hint::black_box(frame)[1]))
                }
                recurse(0)
            });
            co.resume(());
        },
    );
    common::assert_aborted_saying(
        &outcome,
        &format!(
            "has overflowed its stack ({} KiB)",
            Stack::DEFAULT_SIZE / 1024
        ),
    );
}

#[test]
fn every_stack_of_a_batch_is_unmapped_once_freed_and_its_threads_pool_drained() {
    let outcome = common::run_in_child(
        "every_stack_of_a_batch_is_unmapped_once_freed_and_its_threads_pool_drained",
        || {
            // In a child process: no other test maps memory where the freed stacks were.
            let stacks = pooled_stacks_of_a_fresh_thread(300);
            let ranges: Vec<(usize, usize)> = stacks
                .iter()
                .map(layout_of)
                .map(|layout| (layout.limit - page_size(), layout.top))
                .collect();
            // The thread that mapped them has exited (its pool, with the rest of the last batch,
            // was drained). Each stack now runs a coroutine on another thread and goes back to
            // that thread's pool when the coroutine is dropped: the pool keeps 64, unmaps the
            // rest at once, and unmaps its 64 when the thread exits.
            std::thread::spawn(move || {
                for stack in stacks {
                    let mut co = Coroutine::<(), (), ()>::with_stack(stack, |_, ()| ());
                    assert_eq!(co.resume(()), CoroutineResult::Return(()));
                }
            })
            .join()
            .unwrap();
            let maps = memory_mappings();
            let still_mapped = ranges
                .iter()
                .filter(|(start, end)| maps.iter().any(|m| m.start < *end && *start < m.end))
                .count();
            std::process::exit(if still_mapped == 0 { 0 } else { 1 });
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
}
