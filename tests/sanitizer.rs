//! Switching stacks under AddressSanitizer.
//!
//! These tests earn their keep in the ASan build (`bash .ci/asan`, or `RUSTFLAGS=
//! -Zsanitizer=address cargo +nightly test --target x86_64-unknown-linux-gnu`): a switch that
//! ASan is not told about makes it warn (`WARNING: ASan is ignoring requested
//! __asan_handle_no_return`) on the next panic and then report errors that are not there. A
//! warning does not fail a test, so the program runs in a child process whose stderr is
//! checked. In a native build they check that the same program runs.

mod common;

use std::hint::black_box;
use std::panic::{AssertUnwindSafe, catch_unwind};

use common::run_in_child;
use greenweave::greenlet::{Greenlet, current};
use greenweave::{Coroutine, CoroutineResult};

/// Every kind of switch the crate makes, each a few times so stacks are recycled: panics
/// unwinding on coroutine stacks, forced unwinds, nested coroutines, large values crossing
/// switches, and greenlets; then a leak check at exit (`process::exit` runs LSan's).
fn exercise_every_switch() {
    for round in 0..20u64 {
        // A panic unwinds a coroutine's stack and is re-raised in the resumer.
        let mut panicking = Coroutine::<u64, u64, ()>::new(|yielder, n| {
            let held = Box::new(n);
            yielder.suspend(*held);
            panic!("round {n}");
        });
        assert_eq!(panicking.resume(round), CoroutineResult::Yield(round));
        let caught = catch_unwind(AssertUnwindSafe(|| panicking.resume(0)));
        assert!(caught.is_err());

        // A suspended coroutine is dropped: its stack is force-unwound.
        let mut suspended = Coroutine::<(), (), ()>::new(move |yielder, ()| {
            let _held = Box::new([round; 16]);
            loop {
                yielder.suspend(());
            }
        });
        assert_eq!(suspended.resume(()), CoroutineResult::Yield(()));
        drop(suspended);

        // A coroutine resumes another inside its body; a large value comes back from each.
        let mut outer = Coroutine::<(), (), [u64; 64]>::new(move |_, ()| {
            let mut inner = Coroutine::<(), (), [u64; 64]>::new(move |_, ()| [round; 64]);
            let CoroutineResult::Return(inner) = inner.resume(()) else {
                unreachable!("the inner coroutine never yields")
            };
            inner.map(|n| n + 1)
        });
        assert_eq!(outer.resume(()), CoroutineResult::Return([round + 1; 64]));

        // Greenlets switch symmetrically, and one panics into its parent.
        let main = current::<Option<u64>>();
        let echo = Greenlet::new(move |n: Option<u64>| {
            let next = main.switch(n.map(|n| n + 1));
            black_box(Box::new(next));
            next.map(|n| n * 2)
        });
        assert_eq!(echo.switch(Some(round)), Some(round + 1));
        assert_eq!(echo.switch(Some(round)), Some(round * 2));
        let failing = Greenlet::new(|n: Option<u64>| -> Option<u64> { panic!("greenlet {n:?}") });
        assert!(catch_unwind(AssertUnwindSafe(|| failing.switch(Some(round)))).is_err());
    }
}

#[test]
fn panics_unwinds_and_recycled_stacks_give_address_sanitizer_nothing_to_report() {
    const NAME: &str =
        "panics_unwinds_and_recycled_stacks_give_address_sanitizer_nothing_to_report";
    let outcome = run_in_child(NAME, || {
        exercise_every_switch();
        std::process::exit(0);
    });
    assert!(outcome.status.success(), "{}", outcome.describe());
    for report in ["AddressSanitizer", "LeakSanitizer", "WARNING: ASan"] {
        assert!(
            !outcome.stderr.contains(report),
            "the child printed `{report}`\n{}",
            outcome.describe()
        );
    }
}

#[test]
fn every_kind_of_switch_runs_in_process_under_address_sanitizer() {
    // The same program in this process, where an ASan report kills the test binary.
    exercise_every_switch();
}
