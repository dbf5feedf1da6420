//! Every measured loop, in one table shared by the criterion benchmarks (`switch.rs`,
//! `spawn.rs`, `channel.rs`, which time them), `instructions.rs` (which runs one of them under
//! an instruction counter) and `examples/switch_latency.rs` (the latency table).
//!
//! A loop is named `<group>/<function>` as criterion names it: the group is the operation, the
//! function the implementation (`greenweave`, or the crate it is compared with). Its `prepare`
//! does the setup that must not be timed (start a coroutine, a runtime, an echo loop) and
//! returns a [`Run`]: called with a number of iterations, it performs exactly that many and
//! returns how long the iterations alone took. A `Run` can be called again, as criterion does.
//!
//! The runtimes are the exception: their loops start `greenweave::run` or a tokio `block_on`
//! on every call (a run cannot outlive the call that started it) and time from inside, so
//! starting and stopping the runtime is outside the timed region but inside an instruction
//! count of one call. `benches/count_instructions.py` counts two calls of different lengths and
//! takes the difference, which leaves only the iterations.

// Each benchmark binary includes this module and uses only part of it.
#![allow(dead_code)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use corosensei::stack::DefaultStack;
use greenweave::bench_support::{raw_switch_round_trips, raw_symmetric_switch_round_trips};
use greenweave::greenlet::{self, Greenlet};
use greenweave::{CoroutineResult, Stack};

/// Runs the given number of iterations and returns the time they took.
pub type Run = Box<dyn FnMut(u64) -> Duration>;

/// One measured loop.
pub struct Loop {
    /// Criterion's benchmark group: the operation.
    pub group: &'static str,
    /// Criterion's function within the group: the implementation.
    pub function: &'static str,
    /// Does the untimed setup and returns the timed loop.
    pub prepare: fn() -> Run,
}

impl Loop {
    /// `<group>/<function>`, criterion's id for it.
    pub fn id(&self) -> String {
        format!("{}/{}", self.group, self.function)
    }
}

/// Every loop, grouped by operation, greenweave first in each group.
pub const LOOPS: &[Loop] = &[
    Loop {
        group: "raw_switch_round_trip",
        function: "asymmetric",
        prepare: || Box::new(raw_switch_round_trips),
    },
    Loop {
        group: "raw_switch_round_trip",
        function: "symmetric",
        prepare: || Box::new(raw_symmetric_switch_round_trips),
    },
    Loop {
        group: "coroutine_round_trip",
        function: "greenweave",
        prepare: greenweave_round_trips,
    },
    Loop {
        group: "coroutine_round_trip",
        function: "corosensei",
        prepare: corosensei_round_trips,
    },
    Loop {
        group: "coroutine_round_trip",
        function: "generator",
        prepare: generator_round_trips,
    },
    Loop {
        group: "coroutine_round_trip_out_of_line",
        function: "greenweave",
        prepare: greenweave_round_trips_out_of_line,
    },
    Loop {
        group: "coroutine_round_trip_out_of_line",
        function: "corosensei",
        prepare: corosensei_round_trips_out_of_line,
    },
    Loop {
        group: "greenlet_round_trip",
        function: "greenweave",
        prepare: greenlet_round_trips,
    },
    Loop {
        group: "yield_now_round_trip",
        function: "greenweave",
        prepare: || Box::new(greenweave_yields),
    },
    Loop {
        group: "yield_now_round_trip",
        function: "tokio",
        prepare: tokio_yields,
    },
    Loop {
        group: "channel_ping_pong",
        function: "greenweave",
        prepare: || Box::new(greenweave_ping_pongs),
    },
    Loop {
        group: "channel_ping_pong",
        function: "tokio",
        prepare: tokio_ping_pongs,
    },
    Loop {
        group: "channel_ping_pong",
        function: "std_thread",
        prepare: std_thread_ping_pongs,
    },
    Loop {
        group: "coroutine_create_run_drop",
        function: "greenweave_pool",
        prepare: || Box::new(greenweave_lifecycles_pooled),
    },
    Loop {
        group: "coroutine_create_run_drop",
        function: "greenweave_with_stack",
        prepare: greenweave_lifecycles_with_stack,
    },
    Loop {
        group: "coroutine_create_run_drop",
        function: "corosensei",
        prepare: corosensei_lifecycles,
    },
    Loop {
        group: "coroutine_create_run_drop",
        function: "generator",
        prepare: || Box::new(generator_lifecycles),
    },
    Loop {
        group: "spawn_join",
        function: "greenweave",
        prepare: || Box::new(greenweave_spawn_joins),
    },
    Loop {
        group: "spawn_join",
        function: "tokio",
        prepare: tokio_spawn_joins,
    },
    Loop {
        group: "spawn_join",
        function: "std_thread",
        prepare: || Box::new(std_spawn_joins),
    },
    Loop {
        group: "block_on_ready",
        function: "greenweave",
        prepare: || Box::new(greenweave_block_on_ready),
    },
    Loop {
        group: "block_on_ready",
        function: "tokio",
        prepare: tokio_block_on_ready,
    },
    Loop {
        group: "block_on_ping_pong",
        function: "greenweave",
        prepare: || Box::new(greenweave_block_on_ping_pongs),
    },
    Loop {
        group: "block_on_ping_pong",
        function: "tokio",
        prepare: tokio_block_on_ping_pongs,
    },
];

/// The loops of one group, in table order.
pub fn group(name: &str) -> impl Iterator<Item = &'static Loop> + '_ {
    LOOPS.iter().filter(move |each| each.group == name)
}

// ---- coroutine round trips ----

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

/// `resume` into the echo, inlined into the loop.
fn greenweave_round_trips() -> Run {
    let mut echo = greenweave_echo();
    Box::new(move |iterations| {
        let start = Instant::now();
        for i in 0..iterations {
            black_box(echo.resume(black_box(i)));
        }
        start.elapsed()
    })
}

fn corosensei_round_trips() -> Run {
    let mut echo = corosensei_echo();
    Box::new(move |iterations| {
        let start = Instant::now();
        for i in 0..iterations {
            black_box(echo.resume(black_box(i)));
        }
        start.elapsed()
    })
}

/// The same with generator-rs (`generator`, may's coroutine layer): `send` into a
/// generator whose body `yield_`s every value straight back.
fn generator_round_trips() -> Run {
    let mut echo = generator::Gn::<u64>::new_scoped(|mut scope| {
        let mut value = 0;
        while let Some(next) = scope.yield_(value) {
            value = next;
        }
        value
    });
    black_box(echo.send(0));
    Box::new(move |iterations| {
        let start = Instant::now();
        for i in 0..iterations {
            black_box(echo.send(black_box(i)));
        }
        start.elapsed()
    })
}

/// `resume` in a function that is called, and returns, on every trip, as in a program whose
/// resume is not in the loop that calls it: where the switch's effect on return prediction
/// shows.
fn greenweave_round_trips_out_of_line() -> Run {
    #[inline(never)]
    fn resume(echo: &mut GreenweaveEcho, input: u64) -> Option<u64> {
        echo.resume(input).into_yield()
    }
    let mut echo = greenweave_echo();
    Box::new(move |iterations| {
        let start = Instant::now();
        for i in 0..iterations {
            black_box(resume(&mut echo, black_box(i)));
        }
        start.elapsed()
    })
}

fn corosensei_round_trips_out_of_line() -> Run {
    #[inline(never)]
    fn resume(echo: &mut CorosenseiEcho, input: u64) -> Option<u64> {
        echo.resume(input).as_yield()
    }
    let mut echo = corosensei_echo();
    Box::new(move |iterations| {
        let start = Instant::now();
        for i in 0..iterations {
            black_box(resume(&mut echo, black_box(i)));
        }
        start.elapsed()
    })
}

/// `switch` from the main greenlet to one that switches every value straight back (two
/// greenlet switches per iteration). Dropping the `Run` drops the last handle to the
/// suspended echo, which kills it.
fn greenlet_round_trips() -> Run {
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
    Box::new(move |iterations| {
        let start = Instant::now();
        for i in 0..iterations {
            black_box(echo.switch(black_box(Some(i))));
        }
        start.elapsed()
    })
}

// ---- scheduler round trips ----

/// Two green threads that both loop on `yield_now`; one iteration is one yield by each.
fn greenweave_yields(iterations: u64) -> Duration {
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
}

/// A tokio `current_thread` runtime, started once per `Run`.
fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("start a tokio runtime")
}

/// The same with two tasks on a tokio `current_thread` runtime.
fn tokio_yields() -> Run {
    let runtime = tokio_runtime();
    Box::new(move |iterations| {
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
    })
}

/// One word sent to an echo loop over one unbounded channel and sent back over another; one
/// iteration is a send and a receive on each side. Two green threads.
fn greenweave_ping_pongs(iterations: u64) -> Duration {
    use greenweave::sync::mpsc;
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
}

/// The same with two tasks on a tokio `current_thread` runtime and
/// `tokio::sync::mpsc::unbounded_channel`.
fn tokio_ping_pongs() -> Run {
    use tokio::sync::mpsc;
    let runtime = tokio_runtime();
    Box::new(move |iterations| {
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
    })
}

/// The same between two OS threads with `std::sync::mpsc`: what green threads replace. The
/// echo thread lives as long as the `Run`.
fn std_thread_ping_pongs() -> Run {
    use std::sync::mpsc;

    /// Ends the echo thread (by closing its inbox) and waits for it.
    struct EchoThread {
        to_echo: Option<mpsc::Sender<u64>>,
        thread: Option<std::thread::JoinHandle<()>>,
    }
    impl EchoThread {
        fn sender(&self) -> &mpsc::Sender<u64> {
            self.to_echo.as_ref().expect("taken only by drop")
        }
    }
    impl Drop for EchoThread {
        fn drop(&mut self) {
            drop(self.to_echo.take());
            if let Some(thread) = self.thread.take() {
                thread.join().expect("the echo thread cannot panic");
            }
        }
    }

    let (to_echo, echo_inbox) = mpsc::channel::<u64>();
    let (to_main, main_inbox) = mpsc::channel::<u64>();
    let thread = std::thread::spawn(move || {
        for value in echo_inbox {
            if to_main.send(value).is_err() {
                break;
            }
        }
    });
    let echo = EchoThread {
        to_echo: Some(to_echo),
        thread: Some(thread),
    };
    echo.sender().send(0).expect("the echo thread is running");
    main_inbox.recv().expect("the echo thread answers");
    Box::new(move |iterations| {
        // The only sender is the echo's own, so the thread ends when the Run is dropped.
        let to_echo = echo.sender();
        let start = Instant::now();
        for i in 0..iterations {
            to_echo
                .send(black_box(i))
                .expect("the echo thread is running");
            black_box(main_inbox.recv().expect("the echo thread answers"));
        }
        start.elapsed()
    })
}

// ---- lifecycles ----

/// `Coroutine::new` (a default-size stack from the per-thread pool, given back on drop) with a
/// trivial body, resumed to the end, dropped. No iteration maps memory once the pool has one.
fn greenweave_lifecycles_pooled(iterations: u64) -> Duration {
    let start = Instant::now();
    for i in 0..iterations {
        let mut coroutine = greenweave::Coroutine::<u64, (), u64>::new(|_, input| black_box(input));
        match coroutine.resume(black_box(i)) {
            CoroutineResult::Return(value) => black_box(value),
            CoroutineResult::Yield(()) => unreachable!("the body never suspends"),
        };
        drop(coroutine);
    }
    start.elapsed()
}

/// `Coroutine::with_stack` on one default-size stack that `into_stack` hands back every
/// iteration.
fn greenweave_lifecycles_with_stack() -> Run {
    let mut stack = Some(Stack::new(Stack::DEFAULT_SIZE).expect("map a stack"));
    Box::new(move |iterations| {
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
    })
}

/// Exactly that with corosensei's `with_stack`/`into_stack` and one `DefaultStack` of the same
/// size as greenweave's default.
fn corosensei_lifecycles() -> Run {
    let mut stack = Some(DefaultStack::new(Stack::DEFAULT_SIZE).expect("map a stack"));
    Box::new(move |iterations| {
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
    })
}

/// generator-rs: a generator with a stack of greenweave's default size, run to the end
/// and dropped. It has no way to reuse a stack, so every iteration maps and unmaps one: this
/// row shows what that costs, not a like-for-like switch path.
fn generator_lifecycles(iterations: u64) -> Duration {
    let words = Stack::DEFAULT_SIZE / size_of::<usize>();
    let start = Instant::now();
    for i in 0..iterations {
        let mut coroutine =
            generator::Gn::<u64>::new_scoped_opt(words, |mut scope| black_box(scope.get_yield()));
        black_box(coroutine.send(black_box(i)));
        drop(coroutine);
    }
    start.elapsed()
}

/// `greenweave::spawn` + `JoinHandle::join` of a trivial body, from a green thread.
fn greenweave_spawn_joins(iterations: u64) -> Duration {
    greenweave::run(move || {
        let start = Instant::now();
        for i in 0..iterations {
            let handle = greenweave::spawn(move || black_box(i));
            black_box(handle.join().expect("the body cannot panic"));
        }
        start.elapsed()
    })
}

/// `tokio::spawn` + `.await` of the handle, from a task on a `current_thread` runtime.
fn tokio_spawn_joins() -> Run {
    let runtime = tokio_runtime();
    Box::new(move |iterations| {
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
    })
}

/// `std::thread::spawn` + `join`.
fn std_spawn_joins(iterations: u64) -> Duration {
    let start = Instant::now();
    for i in 0..iterations {
        let handle = std::thread::spawn(move || black_box(i));
        black_box(handle.join().expect("the body cannot panic"));
    }
    start.elapsed()
}

// ---- futures (issue 30) ----

/// `greenweave::block_on` of a future that is ready at its first poll, on a green thread: the
/// call's fixed cost (its waker reused from the previous call, one poll, no park).
fn greenweave_block_on_ready(iterations: u64) -> Duration {
    greenweave::run(move || {
        let start = Instant::now();
        for i in 0..iterations {
            black_box(greenweave::block_on(std::future::ready(black_box(i))));
        }
        start.elapsed()
    })
}

/// The same through tokio's `Runtime::block_on` on a `current_thread` runtime, from outside
/// it: what the sync wrapper of an async crate (the `postgres` crate) pays per call.
fn tokio_block_on_ready() -> Run {
    let runtime = tokio_runtime();
    Box::new(move |iterations| {
        let start = Instant::now();
        for i in 0..iterations {
            black_box(runtime.block_on(std::future::ready(black_box(i))));
        }
        start.elapsed()
    })
}

/// Where a waiting side leaves its waker for the other to wake.
type WakerSlot = std::cell::Cell<Option<std::task::Waker>>;

/// A future that is pending at its first poll, after leaving its waker in `slot` for the other
/// side to wake, and ready at the next.
struct PendingOnce<'a> {
    slot: &'a WakerSlot,
    polled: bool,
}

impl std::future::Future for PendingOnce<'_> {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.polled {
            return std::task::Poll::Ready(());
        }
        self.polled = true;
        self.slot.set(Some(context.waker().clone()));
        std::task::Poll::Pending
    }
}

/// The two sides' slots of a ping-pong of wakes. Each side, `iterations` times, wakes the
/// other's waker (if it left one) and then waits in a [`PendingOnce`] of its own; after its
/// last wait it wakes the other's last. One iteration is one such step by each side: two
/// Pending -> wake -> Ready cycles, each woken by the other side on the same OS thread.
#[derive(Default)]
struct PingPong {
    slots: [WakerSlot; 2],
}

impl PingPong {
    /// Side `side`'s step: wakes the other side, then returns the wait to block on or await.
    fn step(&self, side: usize) -> PendingOnce<'_> {
        self.wake_other(side);
        PendingOnce {
            slot: &self.slots[side],
            polled: false,
        }
    }

    fn wake_other(&self, side: usize) {
        if let Some(waker) = self.slots[1 - side].take() {
            waker.wake();
        }
    }
}

/// The ping-pong between two green threads of one worker, each waiting in `greenweave::block_on`.
fn greenweave_block_on_ping_pongs(iterations: u64) -> Duration {
    greenweave::run(move || {
        let ping_pong = std::rc::Rc::new(PingPong::default());
        let side = |side: usize| {
            let ping_pong = ping_pong.clone();
            move || {
                for _ in 0..iterations {
                    greenweave::block_on(ping_pong.step(side));
                }
                ping_pong.wake_other(side);
            }
        };
        let start = Instant::now();
        let first = greenweave::spawn(side(0));
        let second = greenweave::spawn(side(1));
        first.join().expect("a ping-pong side cannot panic");
        second.join().expect("a ping-pong side cannot panic");
        start.elapsed()
    })
}

/// The same between two tasks on a tokio `current_thread` runtime, each awaiting its
/// `PendingOnce` (tasks of a `LocalSet`: the slots are not `Send`).
fn tokio_block_on_ping_pongs() -> Run {
    let runtime = tokio_runtime();
    Box::new(move |iterations| {
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, async move {
            let ping_pong = std::rc::Rc::new(PingPong::default());
            let side = |side: usize| {
                let ping_pong = ping_pong.clone();
                async move {
                    for _ in 0..iterations {
                        ping_pong.step(side).await;
                    }
                    ping_pong.wake_other(side);
                }
            };
            let start = Instant::now();
            let first = tokio::task::spawn_local(side(0));
            let second = tokio::task::spawn_local(side(1));
            first.await.expect("a ping-pong side cannot panic");
            second.await.expect("a ping-pong side cannot panic");
            start.elapsed()
        })
    })
}

// ---- criterion ----

/// Times every loop of `group` under criterion, side by side in one benchmark group, with a
/// one-second warm-up and three seconds of measurement: thousands of iterations per sample
/// for the nanosecond operations, and the whole of `cargo bench` under three minutes.
pub fn bench_group(c: &mut criterion::Criterion, group: &str, sample_size: usize) {
    let mut benchmarks = c.benchmark_group(group);
    benchmarks
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(sample_size);
    for each in self::group(group) {
        benchmarks.bench_function(each.function, |b| {
            let mut run = (each.prepare)();
            b.iter_custom(&mut run);
        });
    }
    benchmarks.finish();
}
