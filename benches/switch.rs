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
//! - `coroutine_round_trip/{greenweave,corosensei,generator}`: `resume` into a coroutine that
//!   suspends straight back, with the resume inlined into the timing loop (generator-rs:
//!   `send` into a generator that `yield_`s straight back).
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
//! greenweave and the crate it is compared with. The loops are in `loops/mod.rs`, shared with
//! `instructions.rs`, which counts their instructions instead.

use criterion::{Criterion, criterion_group, criterion_main};

mod loops;

fn switches(c: &mut Criterion) {
    for group in [
        "raw_switch_round_trip",
        "coroutine_round_trip",
        "coroutine_round_trip_out_of_line",
        "greenlet_round_trip",
        "yield_now_round_trip",
    ] {
        loops::bench_group(c, group, 50);
    }
}

criterion_group!(benches, switches);
criterion_main!(benches);
