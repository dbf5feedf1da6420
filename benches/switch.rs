//! Round trips: how long it takes to go into another context and come back, at every layer,
//! each next to the nearest thing another crate offers.
//!
//! ```text
//! cargo bench --bench switch                     # every group
//! cargo bench --bench switch -- coroutine        # groups whose id contains "coroutine"
//! cargo bench --bench switch -- --quick          # a rough pass (also fine under qemu)
//! cargo bench -- --quick                         # every criterion file, a rough pass
//! python3 benches/chart.py                       # chart + Markdown table of the results
//! ```
//!
//! Benchmark ids are `<group>/<implementation>`, so criterion prints each greenweave figure
//! next to the one it is compared with, and `benches/chart.py` can pair them up:
//!
//! - `raw_switch_round_trip/{asymmetric,symmetric}`: the bare assembly switch with no
//!   coroutine protocol around it, resume/suspend style and greenlet (switch/switch) style.
//!   The floor for everything else; no other crate exposes an equivalent.
//! - `coroutine_round_trip/{greenweave,corosensei}`: `resume` into a coroutine that suspends
//!   straight back, with the resume inlined into the timing loop.
//! - `coroutine_round_trip_out_of_line/{greenweave,corosensei}`: the same, with the resume in a
//!   function that is called, and returns, on every trip, as in a program whose resume is not
//!   in the loop that calls it. This is where the switch's effect on return prediction shows.
//! - `greenlet_round_trip/greenweave`: `switch` from the main greenlet to one that switches
//!   every value straight back (two greenlet switches).
//! - `yield_now_round_trip/{greenweave,tokio}`: two green threads (tokio: two tasks on a
//!   `current_thread` runtime) that both loop on `yield_now`; one iteration is one yield by
//!   each. The runtime is started outside the timed region.
//!
//! Every benchmark times its own loop with `iter_custom`, so the loop has the same shape for
//! greenweave and the crate it is compared with.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use greenweave::bench_support::{raw_switch_round_trips, raw_symmetric_switch_round_trips};
use greenweave::greenlet::{self, Greenlet};

/// Settings for groups whose operations take nanoseconds: a one-second warm-up and three seconds
/// of measurement give criterion thousands of iterations per sample, and keep the whole of
/// `cargo bench` (every file in `benches/`) under two minutes.
fn short_group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    group
}

fn raw_switch(c: &mut Criterion) {
    let mut group = short_group(c, "raw_switch_round_trip");
    group.bench_function("asymmetric", |b| b.iter_custom(raw_switch_round_trips));
    group.bench_function("symmetric", |b| {
        b.iter_custom(raw_symmetric_switch_round_trips)
    });
    group.finish();
}

type GreenweaveEcho = greenweave::Coroutine<u64, u64, ()>;
type CorosenseiEcho = corosensei::Coroutine<u64, u64, ()>;

/// A greenweave coroutine that hands each input straight back, already started, so every
/// resume lands in `suspend`.
fn greenweave_echo() -> GreenweaveEcho {
    let mut echo = GreenweaveEcho::new(|yielder, mut value| {
        loop {
            value = yielder.suspend(value);
        }
    });
    black_box(echo.resume(0));
    echo
}

/// The same with corosensei.
fn corosensei_echo() -> CorosenseiEcho {
    let mut echo = CorosenseiEcho::new(|yielder, mut value| {
        loop {
            value = yielder.suspend(value);
        }
    });
    black_box(echo.resume(0));
    echo
}

fn coroutine_round_trip(c: &mut Criterion) {
    let mut group = short_group(c, "coroutine_round_trip");
    group.bench_function("greenweave", |b| {
        let mut echo = greenweave_echo();
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for i in 0..iterations {
                black_box(echo.resume(black_box(i)));
            }
            start.elapsed()
        });
    });
    group.bench_function("corosensei", |b| {
        let mut echo = corosensei_echo();
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for i in 0..iterations {
                black_box(echo.resume(black_box(i)));
            }
            start.elapsed()
        });
    });
    group.finish();
}

fn coroutine_round_trip_out_of_line(c: &mut Criterion) {
    #[inline(never)]
    fn resume_greenweave(echo: &mut GreenweaveEcho, input: u64) -> Option<u64> {
        echo.resume(input).into_yield()
    }
    #[inline(never)]
    fn resume_corosensei(echo: &mut CorosenseiEcho, input: u64) -> Option<u64> {
        echo.resume(input).as_yield()
    }

    let mut group = short_group(c, "coroutine_round_trip_out_of_line");
    group.bench_function("greenweave", |b| {
        let mut echo = greenweave_echo();
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for i in 0..iterations {
                black_box(resume_greenweave(&mut echo, black_box(i)));
            }
            start.elapsed()
        });
    });
    group.bench_function("corosensei", |b| {
        let mut echo = corosensei_echo();
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for i in 0..iterations {
                black_box(resume_corosensei(&mut echo, black_box(i)));
            }
            start.elapsed()
        });
    });
    group.finish();
}

fn greenlet_round_trip(c: &mut Criterion) {
    let mut group = short_group(c, "greenlet_round_trip");
    group.bench_function("greenweave", |b| {
        let echo = Greenlet::new(|mut value: Option<u64>| {
            let main = greenlet::current::<Option<u64>>()
                .parent()
                .expect("created by the main greenlet");
            loop {
                value = main.switch(value);
            }
        });
        // Start it, so that every timed switch goes into a suspended greenlet.
        black_box(echo.switch(Some(0)));
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for i in 0..iterations {
                black_box(echo.switch(black_box(Some(i))));
            }
            start.elapsed()
        });
        // Dropping the last handle to the suspended greenlet kills it.
    });
    group.finish();
}

fn yield_now_round_trip(c: &mut Criterion) {
    let mut group = short_group(c, "yield_now_round_trip");
    group.bench_function("greenweave", |b| {
        b.iter_custom(|iterations| {
            greenweave::run(move || {
                let yielder = move || {
                    for _ in 0..iterations {
                        greenweave::thread::yield_now();
                    }
                };
                let start = Instant::now();
                let first = greenweave::spawn(yielder);
                let second = greenweave::spawn(yielder);
                first.join().expect("a yield loop cannot panic");
                second.join().expect("a yield loop cannot panic");
                start.elapsed()
            })
        });
    });
    group.bench_function("tokio", |b| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("start a tokio runtime");
        b.iter_custom(|iterations| {
            runtime.block_on(async move {
                let yielder = move || async move {
                    for _ in 0..iterations {
                        tokio::task::yield_now().await;
                    }
                };
                let start = Instant::now();
                let first = tokio::spawn(yielder());
                let second = tokio::spawn(yielder());
                first.await.expect("a yield loop cannot panic");
                second.await.expect("a yield loop cannot panic");
                start.elapsed()
            })
        });
    });
    group.finish();
}

criterion_group!(
    benches,
    raw_switch,
    coroutine_round_trip,
    coroutine_round_trip_out_of_line,
    greenlet_round_trip,
    yield_now_round_trip
);
criterion_main!(benches);
