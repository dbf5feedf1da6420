//! `greenweave::block_on`: a future polled on its green thread, which parks while the future is
//! pending; a waker that wakes it from anywhere, never loses a wake, and wakes nothing once the
//! call is over. Each wake test keeps every other waker quiet until it asserts: the only thing
//! that can end a park is the wake under test.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use greenweave::runtime::ParkReason;
use greenweave::{Coroutine, CoroutineResult, Runtime, thread};

/// A future that is pending until its flag is set, and hands its waker out each time it is
/// polled (the latest is kept).
#[derive(Clone, Default)]
struct Gate(Arc<GateState>);

#[derive(Default)]
struct GateState {
    open: AtomicBool,
    polls: AtomicUsize,
    waker: Mutex<Option<Waker>>,
}

impl Gate {
    /// Opens the gate and wakes the latest waker.
    fn open(&self) {
        self.0.open.store(true, Ordering::SeqCst);
        if let Some(waker) = self.0.waker.lock().unwrap().take() {
            waker.wake();
        }
    }

    fn polls(&self) -> usize {
        self.0.polls.load(Ordering::SeqCst)
    }

    fn has_waker(&self) -> bool {
        self.0.waker.lock().unwrap().is_some()
    }

    fn wait(&self) -> GateFuture {
        GateFuture(self.clone())
    }

    /// Spawns a green thread that waits for the gate in `block_on`, and lets it run until it
    /// has parked there (polled once).
    fn spawn_parked_waiter(&self) -> thread::JoinHandle<usize> {
        let gate = self.clone();
        let waiter = greenweave::spawn(move || greenweave::block_on(gate.wait()));
        yield_until(|| self.has_waker());
        waiter
    }
}

struct GateFuture(Gate);

impl Future for GateFuture {
    type Output = usize;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        let state = &(self.0).0;
        let polls = state.polls.fetch_add(1, Ordering::SeqCst) + 1;
        *state.waker.lock().unwrap() = Some(cx.waker().clone());
        if state.open.load(Ordering::SeqCst) {
            Poll::Ready(polls)
        } else {
            Poll::Pending
        }
    }
}

/// Yields until `condition` holds (bounded: the green threads it waits for are runnable).
fn yield_until(condition: impl Fn() -> bool) {
    for _ in 0..100_000 {
        if condition() {
            return;
        }
        thread::yield_now();
    }
    panic!("the condition never held");
}

#[test]
fn a_ready_future_returns_its_output_without_parking() {
    greenweave::run(|| {
        assert_eq!(greenweave::block_on(async { 6 * 7 }), 42);
        let metrics = greenweave::runtime::metrics();
        assert_eq!(metrics.worker_green_park_count(0, ParkReason::Future), 0);
    });
}

#[test]
fn a_wake_from_another_green_thread_of_the_same_worker_ends_the_park() {
    greenweave::run(|| {
        let gate = Gate::default();
        let waiter = gate.spawn_parked_waiter();
        // The waiter is parked: it was polled once, and nothing wakes it but this.
        assert_eq!(gate.polls(), 1);
        assert!(!waiter.is_finished());
        gate.open();
        assert_eq!(waiter.join().unwrap(), 2);
        let metrics = greenweave::runtime::metrics();
        assert_eq!(metrics.worker_green_park_count(0, ParkReason::Future), 1);
    });
}

#[test]
fn a_wake_from_a_plain_os_thread_ends_the_park() {
    greenweave::run(|| {
        let gate = Gate::default();
        let waiter = gate.spawn_parked_waiter();
        let opener = gate.clone();
        // The OS thread is joined only after the wake reached the waiter: main waits in the
        // green join, so the worker keeps running.
        let helper = std::thread::spawn(move || opener.open());
        assert_eq!(waiter.join().unwrap(), 2);
        helper.join().unwrap();
    });
}

#[test]
fn a_wake_from_another_worker_ends_the_park() {
    let runtime = Runtime::builder().workers(2).build().unwrap();
    runtime.run(|| {
        let gate = Gate::default();
        let waiter = {
            let gate = gate.clone();
            greenweave::thread::spawn_on(1, move || greenweave::block_on(gate.wait()))
        };
        // Worker 1's green thread parks; this one (worker 0) opens the gate.
        while !gate.has_waker() {
            greenweave::thread::sleep(Duration::from_millis(1));
        }
        gate.open();
        assert_eq!(waiter.join().unwrap(), 2);
    });
}

/// Wakes its waker from inside its own poll (before the park), `times` times.
struct WakesItselfDuringPoll {
    left: usize,
}

impl Future for WakesItselfDuringPoll {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.left == 0 {
            return Poll::Ready(());
        }
        self.left -= 1;
        // A clone woken by value (kept a moment, as a wake from elsewhere would), and the
        // original by reference.
        let clone = cx.waker().clone();
        cx.waker().wake_by_ref();
        clone.wake();
        Poll::Pending
    }
}

#[test]
fn a_wake_that_comes_before_the_park_is_not_lost() {
    greenweave::run(|| {
        // Were the wakes lost, nothing else could wake it: the runtime would report a
        // deadlock... except that a future wait may always end by itself, so it would hang;
        // a watchdog green thread turns that into a failure.
        let watchdog = greenweave::thread::spawn_after(Duration::from_secs(60), || {
            panic!("block_on lost a wake that came during its poll")
        });
        greenweave::block_on(WakesItselfDuringPoll { left: 3 });
        watchdog.cancel();
    });
}

#[test]
fn a_wake_from_another_os_thread_between_the_poll_and_the_park_is_not_lost() {
    /// Pending once; its poll hands the waker to an OS thread that wakes it after the poll
    /// returned, while the green thread may be anywhere between the poll and its park.
    struct WokenFromAfar(bool);
    impl Future for WokenFromAfar {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            let waker = cx.waker().clone();
            std::thread::spawn(move || waker.wake());
            Poll::Pending
        }
    }
    greenweave::run(|| {
        for _ in 0..200 {
            greenweave::block_on(WokenFromAfar(false));
        }
    });
}

#[test]
fn spurious_wakes_only_cost_a_poll() {
    greenweave::run(|| {
        let gate = Gate::default();
        let waiter = gate.spawn_parked_waiter();
        // Three wakes with the gate still shut: three more polls, each Pending.
        for expected_polls in 2..=4 {
            let waker = gate.0.waker.lock().unwrap().clone().unwrap();
            waker.wake();
            yield_until(|| gate.polls() == expected_polls);
            assert!(!waiter.is_finished());
        }
        gate.open();
        assert_eq!(waiter.join().unwrap(), 5);
    });
}

#[test]
fn a_waker_kept_by_a_finished_call_on_the_same_green_thread_does_not_poll_the_next_call() {
    greenweave::run(|| {
        let (stale_tx, stale_rx) = std::sync::mpsc::channel::<Waker>();
        let second = Gate::default();
        let waiter = {
            let second = second.clone();
            greenweave::spawn(move || {
                // The first call ends; its waker escapes.
                greenweave::block_on(std::future::poll_fn(|cx| {
                    stale_tx.send(cx.waker().clone()).unwrap();
                    Poll::Ready(())
                }));
                greenweave::block_on(second.wait())
            })
        };
        yield_until(|| second.has_waker());
        let stale = stale_rx.recv().unwrap();
        stale.wake();
        for _ in 0..100 {
            thread::yield_now();
        }
        assert_eq!(second.polls(), 1, "the stale waker polled the next call");
        second.open();
        assert_eq!(waiter.join().unwrap(), 2);
    });
}

/// Wakes itself and stays pending until `done` is set.
struct SpinsUntil(Rc<Cell<bool>>);

impl Future for SpinsUntil {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.get() {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn a_future_that_wakes_itself_for_ever_lets_the_other_green_threads_run() {
    greenweave::run(|| {
        let done = Rc::new(Cell::new(false));
        let setter = {
            let done = done.clone();
            greenweave::spawn(move || done.set(true))
        };
        // Ends only if the setter gets to run while this future spins.
        greenweave::block_on(SpinsUntil(done));
        setter.join().unwrap();
    });
}

/// Records where it was dropped.
struct DropProbe {
    dropped_in_green_thread: Rc<Cell<Option<bool>>>,
}

impl Drop for DropProbe {
    fn drop(&mut self) {
        self.dropped_in_green_thread
            .set(Some(greenweave::runtime::is_in_green_thread()));
    }
}

#[test]
fn a_cancelled_block_on_drops_its_future_in_its_green_thread() {
    greenweave::run(|| {
        let dropped = Rc::new(Cell::new(None));
        let gate = Gate::default();
        let waiter = {
            let dropped = dropped.clone();
            let gate = gate.clone();
            greenweave::spawn(move || {
                let probe = DropProbe {
                    dropped_in_green_thread: dropped,
                };
                greenweave::block_on(async move {
                    let _probe = probe;
                    gate.wait().await
                })
            })
        };
        yield_until(|| gate.has_waker());
        assert_eq!(dropped.get(), None);
        waiter.cancel();
        assert!(waiter.join().unwrap_err().is_cancelled());
        assert_eq!(dropped.get(), Some(true));
        // Its waker wakes nothing now.
        gate.open();
    });
}

#[test]
fn a_timeout_around_block_on_drops_the_future_and_returns_elapsed() {
    greenweave::run(|| {
        let dropped = Rc::new(Cell::new(None));
        let probe = DropProbe {
            dropped_in_green_thread: dropped.clone(),
        };
        let result = greenweave::time::timeout(Duration::from_millis(20), || {
            greenweave::block_on(async move {
                let _probe = probe;
                std::future::pending::<()>().await
            })
        });
        assert!(result.is_err());
        assert_eq!(dropped.get(), Some(true));
    });
}

#[test]
fn in_a_generator_it_parks_the_green_thread_that_resumes_it() {
    greenweave::run(|| {
        let gate = Gate::default();
        let events = Rc::new(RefCell::new(Vec::new()));
        let opener = {
            let gate = gate.clone();
            let events = events.clone();
            greenweave::spawn(move || {
                yield_until(|| gate.has_waker());
                events
                    .borrow_mut()
                    .push("opener ran while the generator waited");
                gate.open();
            })
        };
        let mut generator = {
            let gate = gate.clone();
            Coroutine::new(move |yielder, (): ()| {
                let polls = greenweave::block_on(gate.wait());
                yielder.suspend(polls);
                0
            })
        };
        assert_eq!(generator.resume(()), CoroutineResult::Yield(2));
        events.borrow_mut().push("generator resumed");
        opener.join().unwrap();
        assert_eq!(
            *events.borrow(),
            ["opener ran while the generator waited", "generator resumed"]
        );
        assert_eq!(generator.resume(()), CoroutineResult::Return(0));
    });
}

#[test]
fn outside_a_green_thread_it_blocks_the_os_thread_until_the_wake() {
    let gate = Gate::default();
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            while !gate.has_waker() {
                std::thread::yield_now();
            }
            gate.open();
        })
    };
    assert_eq!(greenweave::block_on(gate.wait()), 2);
    opener.join().unwrap();
}

#[test]
fn the_dump_shows_a_green_thread_in_block_on_with_its_future_type() {
    greenweave::run(|| {
        let gate = Gate::default();
        let waiter = {
            let gate = gate.clone();
            thread::Builder::new()
                .name("awaiting".into())
                .spawn(move || greenweave::block_on(gate.wait()))
                .unwrap()
        };
        yield_until(|| gate.has_waker());
        let dump = greenweave::runtime::dump_without_backtraces();
        let entry = dump
            .green_threads()
            .iter()
            .find(|entry| entry.name() == Some("awaiting"))
            .unwrap();
        assert_eq!(entry.wait_kind(), Some("future"));
        let waiting_on = entry.waiting_on().unwrap();
        assert!(waiting_on.contains("block_on"), "{waiting_on}");
        assert!(waiting_on.contains("GateFuture"), "{waiting_on}");
        gate.open();
        waiter.join().unwrap();
    });
}

#[test]
#[should_panic(expected = "inside a future that greenweave::block_on is polling")]
fn a_block_on_nested_in_a_polled_future_names_the_mistake() {
    greenweave::run(|| {
        greenweave::block_on(async { greenweave::block_on(async { 1 }) });
    });
}

#[cfg(not(feature = "tokio"))]
#[test]
#[should_panic(expected = "Enable greenweave's `tokio` cargo feature")]
fn a_tokio_future_without_the_tokio_feature_names_the_feature() {
    greenweave::run(|| {
        // Inside an async block, so that the sleep is made (and tokio's panic raised) in the
        // poll; `block_on(tokio::time::sleep(..))` panics before block_on is even called.
        greenweave::block_on(async { tokio::time::sleep(Duration::from_millis(1)).await });
    });
}
