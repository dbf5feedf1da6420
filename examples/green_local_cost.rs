//! What one access to a green-thread-local value costs, next to std's `thread_local!`: a loop
//! of `KEY.with(|c| c.set(c.get() + 1))` on a `Cell<u64>`, in a green thread and outside any.
//!
//! ```text
//! cargo run --release --example green_local_cost
//! cargo run --release --example green_local_cost -- --quick   # tiny counts, for qemu
//! ```
//!
//! Each row runs once untimed (the first use initialises the value), then 15 samples of
//! `ITERATIONS` accesses; the table gives the median, minimum and maximum nanoseconds per
//! access. The key goes through `black_box` on every iteration so that the compiler cannot hoist
//! the lookup out of the loop: each iteration pays the whole access, as scattered uses would.

use std::cell::Cell;
use std::hint::black_box;
use std::time::Instant;

const ITERATIONS: u64 = 20_000_000;
const SAMPLES: usize = 15;

greenweave::green_local! {
    static GREEN: Cell<u64> = const { Cell::new(0) };
    static GREEN_LAZY: Cell<u64> = Cell::new(0);
}

thread_local! {
    static STD_CONST: Cell<u64> = const { Cell::new(0) };
    // Lazy on purpose: the row measures the lazy form's "initialised yet?" test.
    #[allow(clippy::missing_const_for_thread_local)]
    static STD_LAZY: Cell<u64> = Cell::new(0);
}

/// Nanoseconds per access of `iterations` accesses through `access` (inlined into the loop:
/// one instance of this function per row).
#[inline(never)]
fn sample(iterations: u64, access: impl Fn()) -> f64 {
    let start = Instant::now();
    for _ in 0..iterations {
        access();
    }
    start.elapsed().as_nanos() as f64 / iterations as f64
}

/// Median, minimum and maximum of `samples` samples, after one untimed run.
fn measure(iterations: u64, samples: usize, access: impl Fn() + Copy) -> (f64, f64, f64) {
    sample(iterations / 10 + 1, access);
    let mut times: Vec<f64> = (0..samples).map(|_| sample(iterations, access)).collect();
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[0], times[times.len() - 1])
}

type Row = (&'static str, (f64, f64, f64));

/// Every row, measured where this is called.
fn rows(iterations: u64, samples: usize) -> Vec<Row> {
    vec![
        (
            "green_local!, const init",
            measure(iterations, samples, || {
                black_box(&GREEN).with(|c| c.set(c.get() + 1))
            }),
        ),
        (
            "green_local!, lazy init",
            measure(iterations, samples, || {
                black_box(&GREEN_LAZY).with(|c| c.set(c.get() + 1))
            }),
        ),
        (
            "std thread_local!, const init",
            measure(iterations, samples, || {
                black_box(&STD_CONST).with(|c| c.set(c.get() + 1))
            }),
        ),
        (
            "std thread_local!, lazy init",
            measure(iterations, samples, || {
                black_box(&STD_LAZY).with(|c| c.set(c.get() + 1))
            }),
        ),
    ]
}

fn print_table(title: &str, rows: &[Row]) {
    println!("{title}");
    println!(
        "{:<36} {:>10} {:>8} {:>8}",
        "access (Cell<u64> get+set)", "median ns", "min ns", "max ns"
    );
    for (name, (median, min, max)) in rows {
        println!("{name:<36} {median:>10.2} {min:>8.2} {max:>8.2}");
    }
    println!();
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let (iterations, samples) = if quick {
        (10_000, 3)
    } else {
        (ITERATIONS, SAMPLES)
    };
    println!(
        "green-thread-local access on {} (cargo run --release --example green_local_cost), \
         median of {samples} samples of {iterations} accesses\n",
        std::env::consts::ARCH
    );
    let in_green_thread = greenweave::run(move || rows(iterations, samples));
    print_table("inside a green thread", &in_green_thread);
    let outside = rows(iterations, samples);
    print_table(
        "outside any runtime (green_local! falls back to the OS thread's table)",
        &outside,
    );
}
