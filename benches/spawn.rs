//! Lifecycles: what it costs to create something that runs on its own, run a trivial body to
//! the end, and be rid of it, next to the nearest thing another crate (or std) offers.
//!
//! ```text
//! cargo bench --bench spawn                      # every group
//! cargo bench --bench spawn -- --quick           # a rough pass (also fine under qemu)
//! ```
//!
//! - `coroutine_create_run_drop/*`: create a coroutine with a trivial body, resume it to the
//!   end, drop it. No iteration maps memory.
//!   - `greenweave_pool`: `Coroutine::new`, which takes a default-size stack from greenweave's
//!     per-thread pool and gives it back on drop (the warm-up leaves one in the pool);
//!   - `greenweave_with_stack`: `Coroutine::with_stack` on one default-size stack that
//!     `into_stack` hands back every iteration;
//!   - `corosensei`: exactly that with corosensei's `with_stack`/`into_stack` and one
//!     `DefaultStack` of the same size.
//! - `spawn_join/*`: start a thread of some kind with a trivial body and wait for its result.
//!   - `greenweave`: `greenweave::spawn` + `JoinHandle::join` from a green thread;
//!   - `tokio`: `tokio::spawn` + `.await` of the handle from a task on a `current_thread`
//!     runtime;
//!   - `std_thread`: `std::thread::spawn` + `join`.
//!
//!   For the two runtimes, a whole batch of iterations runs inside one `greenweave::run` /
//!   `block_on`, timed from inside, so starting and stopping the runtime is not measured.

use std::hint::black_box;
use std::time::{Duration, Instant};

use corosensei::stack::DefaultStack;
use criterion::{Criterion, criterion_group, criterion_main};
use greenweave::{CoroutineResult, Stack};

fn coroutine_create_run_drop(c: &mut Criterion) {
    let mut group = c.benchmark_group("coroutine_create_run_drop");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);

    group.bench_function("greenweave_pool", |b| {
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for i in 0..iterations {
                let mut coroutine =
                    greenweave::Coroutine::<u64, (), u64>::new(|_, input| black_box(input));
                match coroutine.resume(black_box(i)) {
                    CoroutineResult::Return(value) => black_box(value),
                    CoroutineResult::Yield(()) => unreachable!("the body never suspends"),
                };
                drop(coroutine);
            }
            start.elapsed()
        });
    });

    group.bench_function("greenweave_with_stack", |b| {
        let mut stack = Some(Stack::new(Stack::DEFAULT_SIZE).expect("map a stack"));
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for i in 0..iterations {
                let mut coroutine = greenweave::Coroutine::<u64, (), u64>::with_stack(
                    stack.take().expect("the stack comes back every iteration"),
                    |_, input| black_box(input),
                );
                match coroutine.resume(black_box(i)) {
                    CoroutineResult::Return(value) => black_box(value),
                    CoroutineResult::Yield(()) => unreachable!("the body never suspends"),
                };
                stack = Some(coroutine.into_stack());
            }
            start.elapsed()
        });
    });

    group.bench_function("corosensei", |b| {
        // The same size as greenweave's default stack, mapped once and reused.
        let mut stack = Some(DefaultStack::new(Stack::DEFAULT_SIZE).expect("map a stack"));
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for i in 0..iterations {
                let mut coroutine = corosensei::Coroutine::<u64, (), u64, _>::with_stack(
                    stack.take().expect("the stack comes back every iteration"),
                    |_, input| black_box(input),
                );
                match coroutine.resume(black_box(i)) {
                    corosensei::CoroutineResult::Return(value) => black_box(value),
                    corosensei::CoroutineResult::Yield(()) => {
                        unreachable!("the body never suspends")
                    }
                };
                stack = Some(coroutine.into_stack());
            }
            start.elapsed()
        });
    });

    group.finish();
}

fn spawn_join(c: &mut Criterion) {
    let mut group = c.benchmark_group("spawn_join");
    // std's spawn+join takes tens of microseconds; fewer samples keep this group short.
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);

    group.bench_function("greenweave", |b| {
        b.iter_custom(|iterations| {
            greenweave::run(move || {
                let start = Instant::now();
                for i in 0..iterations {
                    let handle = greenweave::spawn(move || black_box(i));
                    black_box(handle.join().expect("the body cannot panic"));
                }
                start.elapsed()
            })
        });
    });

    group.bench_function("tokio", |b| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("start a tokio runtime");
        b.iter_custom(|iterations| {
            // The loop runs in a spawned task, as greenweave's runs in a green thread.
            runtime.block_on(async move {
                tokio::spawn(async move {
                    let start = Instant::now();
                    for i in 0..iterations {
                        let handle = tokio::spawn(async move { black_box(i) });
                        black_box(handle.await.expect("the body cannot panic"));
                    }
                    start.elapsed()
                })
                .await
                .expect("the timing loop cannot panic")
            })
        });
    });

    group.bench_function("std_thread", |b| {
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for i in 0..iterations {
                let handle = std::thread::spawn(move || black_box(i));
                black_box(handle.join().expect("the body cannot panic"));
            }
            start.elapsed()
        });
    });

    group.finish();
}

criterion_group!(benches, coroutine_create_run_drop, spawn_join);
criterion_main!(benches);
