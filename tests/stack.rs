//! `Stack`: what sizes it accepts, how it rounds them, and that it survives a trip through a
//! coroutine.

use std::io;

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
