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
//! timed from inside, after one untimed trip.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};

fn channel_ping_pong(c: &mut Criterion) {
    let mut group = c.benchmark_group("channel_ping_pong");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);

    group.bench_function("greenweave", |b| {
        use greenweave::sync::mpsc;
        b.iter_custom(|iterations| {
            greenweave::run(move || {
                let (to_echo, echo_inbox) = mpsc::channel::<u64>();
                let (to_main, main_inbox) = mpsc::channel::<u64>();
                let echo = greenweave::spawn(move || {
                    for value in echo_inbox.iter() {
                        to_main.send(value).expect("main outlives the echo loop");
                    }
                });
                to_echo.send(0).expect("the echo loop is running");
                main_inbox.recv().expect("the echo loop answers");

                let start = Instant::now();
                for i in 0..iterations {
                    to_echo
                        .send(black_box(i))
                        .expect("the echo loop is running");
                    black_box(main_inbox.recv().expect("the echo loop answers"));
                }
                let elapsed = start.elapsed();

                drop(to_echo); // ends the echo loop
                echo.join().expect("the echo loop cannot panic");
                elapsed
            })
        });
    });

    group.bench_function("tokio", |b| {
        use tokio::sync::mpsc;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("start a tokio runtime");
        b.iter_custom(|iterations| {
            runtime.block_on(async move {
                let (to_echo, mut echo_inbox) = mpsc::unbounded_channel::<u64>();
                let (to_main, mut main_inbox) = mpsc::unbounded_channel::<u64>();
                let echo = tokio::spawn(async move {
                    while let Some(value) = echo_inbox.recv().await {
                        to_main.send(value).expect("main outlives the echo loop");
                    }
                });
                // The pinging side is a task too, as greenweave's is a green thread.
                let main = tokio::spawn(async move {
                    to_echo.send(0).expect("the echo loop is running");
                    main_inbox.recv().await.expect("the echo loop answers");

                    let start = Instant::now();
                    for i in 0..iterations {
                        to_echo
                            .send(black_box(i))
                            .expect("the echo loop is running");
                        black_box(main_inbox.recv().await.expect("the echo loop answers"));
                    }
                    start.elapsed()
                    // Dropping `to_echo` here ends the echo loop.
                });
                let elapsed = main.await.expect("the ping loop cannot panic");
                echo.await.expect("the echo loop cannot panic");
                elapsed
            })
        });
    });

    group.bench_function("std_thread", |b| {
        use std::sync::mpsc;
        let (to_echo, echo_inbox) = mpsc::channel::<u64>();
        let (to_main, main_inbox) = mpsc::channel::<u64>();
        let echo = std::thread::spawn(move || {
            for value in echo_inbox {
                if to_main.send(value).is_err() {
                    break;
                }
            }
        });
        to_echo.send(0).expect("the echo thread is running");
        main_inbox.recv().expect("the echo thread answers");
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for i in 0..iterations {
                to_echo
                    .send(black_box(i))
                    .expect("the echo thread is running");
                black_box(main_inbox.recv().expect("the echo thread answers"));
            }
            start.elapsed()
        });
        drop(to_echo); // ends the echo thread's loop
        echo.join().expect("the echo thread cannot panic");
    });

    group.finish();
}

criterion_group!(benches, channel_ping_pong);
criterion_main!(benches);
