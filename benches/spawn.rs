//! Lifecycles: what it costs to create something that runs on its own, run a trivial body to
//! the end, and be rid of it, next to the nearest thing another crate (or std) offers.
//!
//! ```text
//! cargo bench --bench spawn                      # every group
//! cargo bench --bench spawn -- --quick           # a rough pass (also fine under qemu)
//! ```
//!
//! - `coroutine_create_run_drop/*`: create a coroutine with a trivial body, resume it to the
//!   end, drop it. No greenweave or corosensei iteration maps memory.
//!   - `greenweave_pool`: `Coroutine::new`, which takes a default-size stack from greenweave's
//!     per-thread pool and gives it back on drop (the warm-up leaves one in the pool);
//!   - `greenweave_with_stack`: `Coroutine::with_stack` on one default-size stack that
//!     `into_stack` hands back every iteration;
//!   - `corosensei`: exactly that with corosensei's `with_stack`/`into_stack` and one
//!     `DefaultStack` of the same size.
//!   - `generator`: generator-rs, which cannot reuse a stack: each iteration maps and unmaps
//!     one of the same size, so this shows what that costs, not a like-for-like path.
//! - `spawn_join/*`: start a thread of some kind with a trivial body and wait for its result.
//!   - `greenweave`: `greenweave::spawn` + `JoinHandle::join` from a green thread;
//!   - `tokio`: `tokio::spawn` + `.await` of the handle from a task on a `current_thread`
//!     runtime;
//!   - `std_thread`: `std::thread::spawn` + `join`.
//!
//!   For the two runtimes, a whole batch of iterations runs inside one `greenweave::run` /
//!   `block_on`, timed from inside, so starting and stopping the runtime is not measured.
//!
//! The loops are in `loops/mod.rs`, shared with `instructions.rs`.

use criterion::{Criterion, criterion_group, criterion_main};

mod loops;

fn lifecycles(c: &mut Criterion) {
    loops::bench_group(c, "coroutine_create_run_drop", 50);
    // std's spawn+join takes tens of microseconds; fewer samples keep this group short.
    loops::bench_group(c, "spawn_join", 30);
}

criterion_group!(benches, lifecycles);
criterion_main!(benches);
