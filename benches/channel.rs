//! Channel ping-pong: one word sent to an echo loop over one unbounded channel and sent back
//! over another; one iteration is a send and a receive on each side.
//!
//! ```text
//! cargo bench --bench channel
//! cargo bench --bench channel -- --quick         # a rough pass (also fine under qemu)
//! ```
//!
//! - `channel_ping_pong/greenweave`: two green threads, `greenweave::sync::mpsc::channel`.
//! - `channel_ping_pong/tokio`: two tasks on a `current_thread` runtime,
//!   `tokio::sync::mpsc::unbounded_channel`.
//! - `channel_ping_pong/std_thread`: two OS threads, `std::sync::mpsc::channel`: what green
//!   threads replace. This one swings a lot (between about 2.5 and 30 µs on a 2-vCPU VM)
//!   with whether the two threads share a CPU.
//!
//! Starting the runtimes, threads and echo loops is not timed: each batch of iterations is
//! timed from inside, after one untimed trip. The loops are in `loops/mod.rs`, shared with
//! `instructions.rs`.

use criterion::{Criterion, criterion_group, criterion_main};

mod loops;

fn ping_pongs(c: &mut Criterion) {
    loops::bench_group(c, "channel_ping_pong", 50);
}

criterion_group!(benches, ping_pongs);
criterion_main!(benches);
