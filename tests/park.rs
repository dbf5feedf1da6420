//! `thread::park`, `thread::park_timeout` and `Thread::unpark`: std's token model for green
//! threads. Unparks from a green thread of the same OS thread, from one on another worker and
//! from a plain OS thread; a handle that outlives its green thread; cancellation and
//! `time::timeout` of a parked green thread; the deadlock report; `park` outside a green thread.
//!
//! The tests named `test_park_*` are ported from std's `library/std/src/thread/tests.rs` (same
//! names), with green threads where std has OS threads.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use greenweave::thread::{self, Thread};
use greenweave::{Runtime, time};

// Ported from std's thread tests: `test_park_unpark_before`.
#[test]
fn test_park_unpark_before() {
    greenweave::run(|| {
        for _ in 0..10 {
            thread::current().unpark();
            thread::park();
        }
    });
}

// Ported from std's thread tests: `test_park_unpark_called_other_thread` (the unparker is a
// green thread of the same OS thread).
#[test]
fn test_park_unpark_called_other_thread() {
    greenweave::run(|| {
        for _ in 0..10 {
            let th = thread::current();
            let _guard = greenweave::spawn(move || {
                thread::sleep(Duration::from_millis(50));
                th.unpark();
            });
            thread::park();
        }
    });
}

// Ported from std's thread tests: `test_park_timeout_unpark_before`.
#[test]
fn test_park_timeout_unpark_before() {
    greenweave::run(|| {
        for _ in 0..10 {
            thread::current().unpark();
            thread::park_timeout(Duration::from_millis(u32::MAX as u64));
        }
    });
}

// Ported from std's thread tests: `test_park_timeout_unpark_not_called`.
#[test]
fn test_park_timeout_unpark_not_called() {
    greenweave::run(|| {
        for _ in 0..10 {
            thread::park_timeout(Duration::from_millis(10));
        }
    });
}

// Ported from std's thread tests: `test_park_timeout_unpark_called_other_thread`.
#[test]
fn test_park_timeout_unpark_called_other_thread() {
    greenweave::run(|| {
        for _ in 0..10 {
            let th = thread::current();
            let _guard = greenweave::spawn(move || {
                thread::sleep(Duration::from_millis(50));
                th.unpark();
            });
            thread::park_timeout(Duration::from_millis(u32::MAX as u64));
        }
    });
}

#[test]
fn the_handle_is_send_and_sync_as_stds_is() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Thread>();
}

#[test]
fn tokens_do_not_add_up_two_unparks_before_a_park_end_one_park() {
    let events = greenweave::run(|| {
        let events = Rc::new(RefCell::new(Vec::new()));
        let me = thread::current();
        me.unpark();
        me.unpark();
        let helper = {
            let events = events.clone();
            greenweave::spawn(move || {
                events.borrow_mut().push("helper unparks");
                me.unpark();
            })
        };
        thread::park(); // the token is there: returns without letting the helper run
        events.borrow_mut().push("first park returned");
        thread::park(); // no token left: waits for the helper
        events.borrow_mut().push("second park returned");
        helper.join().unwrap();
        Rc::try_unwrap(events).unwrap().into_inner()
    });
    assert_eq!(
        events,
        [
            "first park returned",
            "helper unparks",
            "second park returned"
        ]
    );
}

#[test]
fn park_timeout_consumes_the_token_and_the_next_park_waits_for_a_new_one() {
    let order = greenweave::run(|| {
        let order = Rc::new(RefCell::new(Vec::new()));
        thread::current().unpark();
        thread::park_timeout(Duration::from_secs(60));
        order.borrow_mut().push("token consumed");
        let me = thread::current();
        let helper = {
            let order = order.clone();
            greenweave::spawn(move || {
                order.borrow_mut().push("unpark");
                me.unpark();
            })
        };
        thread::park_timeout(Duration::from_secs(60));
        order.borrow_mut().push("woken");
        helper.join().unwrap();
        Rc::try_unwrap(order).unwrap().into_inner()
    });
    assert_eq!(order, ["token consumed", "unpark", "woken"]);
}

#[test]
fn a_green_thread_unparks_a_parked_one_through_its_join_handles_thread() {
    greenweave::run(|| {
        let woke = Rc::new(Cell::new(false));
        let parked = {
            let woke = woke.clone();
            greenweave::spawn(move || {
                thread::park();
                woke.set(true);
            })
        };
        thread::yield_now(); // it parks
        thread::yield_now();
        assert!(!woke.get(), "park does not return without an unpark");
        parked.thread().unpark();
        parked.join().unwrap();
        assert!(woke.get());
    });
}

#[test]
fn a_green_thread_on_another_worker_unparks_the_main_green_thread() {
    let runtime = Runtime::builder().workers(2).build().unwrap();
    runtime.run(|| {
        let done = Arc::new(AtomicBool::new(false));
        let main = thread::current();
        let flag = done.clone();
        let other = thread::spawn_on(1, move || {
            thread::sleep(Duration::from_millis(5));
            flag.store(true, Ordering::Release);
            main.unpark();
        });
        while !done.load(Ordering::Acquire) {
            thread::park();
        }
        other.join().unwrap();
    });
}

#[test]
fn the_main_green_thread_unparks_a_green_thread_parked_on_another_worker() {
    let runtime = Runtime::builder().workers(2).build().unwrap();
    runtime.run(|| {
        let handle: Arc<Mutex<Option<Thread>>> = Arc::new(Mutex::new(None));
        let done = Arc::new(AtomicBool::new(false));
        let main = thread::current();
        let parked = {
            let (handle, done) = (handle.clone(), done.clone());
            thread::spawn_on(1, move || {
                *handle.lock().unwrap() = Some(thread::current());
                main.unpark();
                while !done.load(Ordering::Acquire) {
                    thread::park();
                }
                greenweave::runtime::current_worker()
            })
        };
        let other = loop {
            if let Some(other) = handle.lock().unwrap().clone() {
                break other;
            }
            thread::park();
        };
        thread::sleep(Duration::from_millis(5)); // it parks, most likely
        done.store(true, Ordering::Release);
        other.unpark();
        assert_eq!(parked.join().unwrap(), 1);
    });
}

#[test]
fn a_plain_os_thread_unparks_a_green_thread() {
    greenweave::run(|| {
        let done = Arc::new(AtomicBool::new(false));
        let parked = thread::current();
        let flag = done.clone();
        let os_thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            flag.store(true, Ordering::Release);
            parked.unpark();
        });
        while !done.load(Ordering::Acquire) {
            thread::park();
        }
        os_thread.join().unwrap();
    });
}

/// Ping-pong between a green thread and another party, each side waiting in a park loop for
/// its turn on a shared counter: a lost wake-up would hang it.
fn ping_pong(counter: &AtomicUsize, rounds: usize, me_odd: bool, unpark_other: impl Fn()) {
    for round in 0..rounds {
        let (mine, theirs) = if me_odd {
            (2 * round + 1, 2 * round)
        } else {
            (2 * round + 2, 2 * round + 1)
        };
        while counter.load(Ordering::Acquire) != theirs {
            thread::park();
        }
        counter.store(mine, Ordering::Release);
        unpark_other();
    }
}

#[test]
fn park_and_unpark_between_workers_lose_no_wake_up_over_many_rounds() {
    const ROUNDS: usize = 2_000;
    let runtime = Runtime::builder().workers(2).build().unwrap();
    runtime.run(|| {
        let counter = Arc::new(AtomicUsize::new(0));
        let main_handle = thread::current();
        let other_handle: Arc<Mutex<Option<Thread>>> = Arc::new(Mutex::new(None));
        let other = {
            let (counter, other_handle, main_handle) =
                (counter.clone(), other_handle.clone(), main_handle.clone());
            thread::spawn_on(1, move || {
                *other_handle.lock().unwrap() = Some(thread::current());
                main_handle.unpark();
                ping_pong(&counter, ROUNDS, true, || main_handle.unpark());
            })
        };
        let other_thread = loop {
            if let Some(other) = other_handle.lock().unwrap().clone() {
                break other;
            }
            thread::park();
        };
        ping_pong(&counter, ROUNDS, false, || other_thread.unpark());
        other.join().unwrap();
        assert_eq!(counter.load(Ordering::Acquire), 2 * ROUNDS);
    });
}

#[test]
fn park_and_unpark_between_a_green_thread_and_an_os_thread_lose_no_wake_up_over_many_rounds() {
    const ROUNDS: usize = 2_000;
    greenweave::run(|| {
        let counter = Arc::new(AtomicUsize::new(0));
        let green = thread::current();
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let os_thread = {
            let counter = counter.clone();
            std::thread::spawn(move || {
                let main: Thread = handle_rx.recv().unwrap();
                // Outside a green thread, `greenweave::thread::park` is std's park.
                ping_pong(&counter, ROUNDS, true, || main.unpark());
            })
        };
        let os_handle = os_thread.thread().clone();
        handle_tx.send(green).unwrap();
        ping_pong(&counter, ROUNDS, false, || os_handle.unpark());
        os_thread.join().unwrap();
        assert_eq!(counter.load(Ordering::Acquire), 2 * ROUNDS);
    });
}

#[test]
fn a_handle_that_outlives_its_green_thread_wakes_nothing_not_the_next_thread_in_its_slot() {
    greenweave::run(|| {
        let first = greenweave::spawn(thread::current);
        let stale = first.join().unwrap();
        // Most likely in the finished thread's task allocation and table slot.
        let woke = Rc::new(Cell::new(false));
        let next = {
            let woke = woke.clone();
            greenweave::spawn(move || {
                thread::park();
                woke.set(true);
            })
        };
        thread::yield_now(); // it parks
        assert_ne!(next.thread().id(), stale.id());
        stale.unpark();
        // From another OS thread too, through the runtime's wake-up queue.
        let remote = stale.clone();
        std::thread::spawn(move || remote.unpark()).join().unwrap();
        thread::sleep(Duration::from_millis(5));
        assert!(!woke.get(), "a stale handle woke another green thread");
        next.thread().unpark();
        next.join().unwrap();
        assert!(woke.get());
    });
}

#[test]
fn a_handle_used_after_its_runtime_ended_does_nothing() {
    let handle = greenweave::run(thread::current);
    handle.unpark();
    std::thread::spawn(move || handle.unpark()).join().unwrap();
}

struct SetOnDrop(Rc<Cell<bool>>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.set(true);
    }
}

#[test]
fn cancelling_a_parked_green_thread_unwinds_it_and_runs_its_destructors() {
    greenweave::run(|| {
        let dropped = Rc::new(Cell::new(false));
        let parked = {
            let guard = SetOnDrop(dropped.clone());
            greenweave::spawn(move || {
                let _guard = guard;
                loop {
                    thread::park();
                }
            })
        };
        thread::yield_now(); // it parks
        // A handle is out, so this is no deadlock, and the cancel is what ends the park.
        let _handle = parked.thread();
        parked.cancel();
        assert!(parked.join().unwrap_err().is_cancelled());
        assert!(dropped.get());
    });
}

#[test]
fn a_timeout_scope_ends_a_park_loop_and_the_token_survives_for_the_next_park() {
    greenweave::run(|| {
        let _keep_unparkable = thread::current();
        let ended = time::timeout(Duration::from_millis(2), || {
            loop {
                thread::park();
            }
        });
        assert!(ended.is_err());
        // The unwind left the park as it was: a token given now ends the next park.
        thread::current().unpark();
        thread::park();
    });
}

#[test]
fn park_timeout_in_a_destructor_during_a_cancellation_returns_at_once() {
    struct ParksOnDrop;
    impl Drop for ParksOnDrop {
        fn drop(&mut self) {
            // A green thread does not switch while it unwinds: a timed wait times out at once.
            thread::park_timeout(Duration::from_secs(3600));
        }
    }
    greenweave::run(|| {
        let parked = greenweave::spawn(|| {
            let _guard = ParksOnDrop;
            thread::sleep(Duration::from_secs(3600));
        });
        thread::yield_now();
        parked.cancel();
        assert!(parked.join().unwrap_err().is_cancelled());
    });
}

#[test]
fn a_park_nothing_can_end_is_reported_as_a_deadlock_naming_thread_park() {
    let payload = panic::catch_unwind(AssertUnwindSafe(|| {
        greenweave::run(|| {
            let parked = thread::Builder::new()
                .name("parker".into())
                .spawn(thread::park)
                .unwrap();
            parked.join().unwrap();
        })
    }))
    .expect_err("every green thread waits, and nobody holds the parked one's handle");
    let report = payload
        .downcast_ref::<String>()
        .expect("the deadlock report is a String");
    assert!(report.contains("'parker'"), "{report}");
    assert!(report.contains("thread::park"), "{report}");
}

#[test]
fn outside_a_green_thread_park_is_stds_park() {
    std::thread::current().unpark();
    thread::park(); // std's token: returns at once
    std::thread::current().unpark();
    thread::park_timeout(Duration::from_secs(3600));
    thread::park_timeout(Duration::from_millis(1)); // no token: times out
}
