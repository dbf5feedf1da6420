//! greenweave against corosensei, operation by operation.
//!
//! Run with `cargo bench --bench switch` (add `-- --quick` for a rough pass, or a filter such
//! as `-- create` for one group).
//!
//! - `switch`: one round trip into a suspended coroutine and back. `greenweave/raw` is the bare
//!   assembly switch with no coroutine protocol around it: the floor for the other two.
//!   Criterion calls a routine per iteration, and that routine returns after its resume, so
//!   these numbers include whatever a switch does to the CPU's prediction of the `ret`s that
//!   follow it (the table from `examples/switch_latency.rs` shows the same trip with the
//!   resume inlined into the loop, and behind a call).
//! - `create`: a coroutine's whole life with a trivial body: create, run to completion, drop.
//!   No iteration maps memory: `greenweave/create_run_drop` takes a stack from greenweave's
//!   per-thread pool of default-size stacks; `corosensei/create_run_drop` reuses one stack of
//!   the same size through `with_stack` and `into_stack`, and
//!   `greenweave/with_stack_into_stack` does exactly that with greenweave.

use std::hint::black_box;
use std::time::Duration;

use corosensei::stack::DefaultStack;
use criterion::{Criterion, criterion_group, criterion_main};
use greenweave::Stack;
use greenweave::bench_support::raw_switch_round_trips;

fn switch(c: &mut Criterion) {
    let mut group = c.benchmark_group("switch");

    group.bench_function("greenweave/raw", |b| b.iter_custom(raw_switch_round_trips));

    group.bench_function("greenweave/coroutine_round_trip", |b| {
        let mut echo = greenweave::Coroutine::<u64, u64, ()>::new(|yielder, mut value| {
            loop {
                value = yielder.suspend(value);
            }
        });
        echo.resume(0); // start it, so each iteration resumes into `suspend`
        b.iter(|| echo.resume(black_box(1)));
    });

    group.bench_function("corosensei/coroutine_round_trip", |b| {
        let mut echo = corosensei::Coroutine::<u64, u64, ()>::new(|yielder, mut value| {
            loop {
                value = yielder.suspend(value);
            }
        });
        echo.resume(0);
        b.iter(|| echo.resume(black_box(1)));
    });

    group.finish();
}

fn create(c: &mut Criterion) {
    let mut group = c.benchmark_group("create");

    group.bench_function("greenweave/create_run_drop", |b| {
        b.iter(|| {
            let mut coroutine =
                greenweave::Coroutine::<u64, (), u64>::new(|_, input| black_box(input));
            coroutine.resume(black_box(1))
        });
    });

    group.bench_function("greenweave/with_stack_into_stack", |b| {
        let mut stack = Some(Stack::new(Stack::DEFAULT_SIZE).expect("map a stack"));
        b.iter(|| {
            let mut coroutine = greenweave::Coroutine::<u64, (), u64>::with_stack(
                stack.take().expect("the stack is returned every iteration"),
                |_, input| black_box(input),
            );
            let result = coroutine.resume(black_box(1));
            stack = Some(coroutine.into_stack());
            result
        });
    });

    group.bench_function("corosensei/create_run_drop", |b| {
        // The same size as greenweave's default stack, mapped once and reused.
        let mut stack = Some(DefaultStack::new(Stack::DEFAULT_SIZE).expect("map a stack"));
        b.iter(|| {
            let mut coroutine = corosensei::Coroutine::<u64, (), u64, _>::with_stack(
                stack.take().expect("the stack is returned every iteration"),
                |_, input| black_box(input),
            );
            let result = coroutine.resume(black_box(1));
            stack = Some(coroutine.into_stack());
            result
        });
    });

    group.finish();
}

/// Short runs: every benchmark here takes nanoseconds, so two seconds give plenty of samples
/// and the whole suite finishes in well under a minute.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = switch, create
}
criterion_main!(benches);
