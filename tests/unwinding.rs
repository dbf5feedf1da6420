//! Unwinding and cancellation: what a green thread may do while it unwinds, sticky
//! cancellation, shutdown that always completes, and panicking destructors on stacks that
//! greenweave unwinds.
//!
//! The contract pinned down here: a green thread (or a coroutine) never switches while it
//! unwinds, because std keeps "this thread is panicking" per OS thread and every other green
//! thread would see it. A wait that can time out or fail times out at once instead; one that
//! cannot (a lock, a join, an untimed receive) panics with a message that says why, which in
//! a destructor during an unwind aborts the process. Crash-type outcomes run in a child process.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::time::Duration;

use greenweave::greenlet::Greenlet;
use greenweave::sync::{Event, Mutex, mpsc};
use greenweave::thread::{self, JoinHandle};
use greenweave::time::timeout;
use greenweave::{Coroutine, CoroutineResult};

mod common;

use common::assert_aborted_saying;

const FOREVER: Duration = Duration::from_secs(3600);

/// Lets every runnable green thread run a few times.
fn settle() {
    for _ in 0..32 {
        thread::yield_now();
    }
}

/// Records `std::thread::panicking()` as seen by each green thread that runs while `probe` is
/// alive, so a test can show that one green thread's unwind is never visible to another.
fn spawn_panicking_probe(seen: Rc<RefCell<Vec<bool>>>, stop: Rc<Cell<bool>>) -> JoinHandle<()> {
    greenweave::spawn(move || {
        while !stop.get() {
            seen.borrow_mut().push(std::thread::panicking());
            thread::yield_now();
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Item 12: no switch while unwinding
// ---------------------------------------------------------------------------------------------

/// A destructor that sleeps during a cancellation's unwind: the sleep returns at once, no
/// other green thread runs meanwhile, and none of them ever sees `panicking()` true.
#[test]
fn a_sleep_in_a_destructor_during_an_unwind_returns_at_once_without_switching() {
    struct SleepsOnDrop(Rc<RefCell<Vec<&'static str>>>);
    impl Drop for SleepsOnDrop {
        fn drop(&mut self) {
            self.0.borrow_mut().push("destructor sleeps");
            thread::sleep(Duration::from_millis(50));
            self.0.borrow_mut().push("destructor slept");
        }
    }
    let (events, seen) = greenweave::run(|| {
        let events = Rc::new(RefCell::new(Vec::new()));
        let seen = Rc::new(RefCell::new(Vec::new()));
        let stop = Rc::new(Cell::new(false));
        let probe = spawn_panicking_probe(seen.clone(), stop.clone());
        let guard = SleepsOnDrop(events.clone());
        let (log, owner_events) = (events.clone(), events.clone());
        let owner = greenweave::spawn(move || {
            let _guard = guard;
            owner_events.borrow_mut().push("owner parks");
            thread::sleep(FOREVER);
        });
        settle();
        owner.cancel();
        assert!(owner.join().unwrap_err().is_cancelled());
        log.borrow_mut().push("joined");
        stop.set(true);
        probe.join().unwrap();
        (events.take(), seen.take())
    });
    assert_eq!(
        events,
        [
            "owner parks",
            "destructor sleeps",
            "destructor slept",
            "joined"
        ]
    );
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|panicking| !panicking), "{seen:?}");
    assert!(!std::thread::panicking());
}

/// Timed waits in a destructor during a panic's unwind time out at once: `Event::wait_timeout`
/// reports false, `recv_timeout` reports `Timeout` and leaves the channel as it was.
#[test]
fn timed_waits_in_a_destructor_during_an_unwind_time_out_at_once() {
    struct WaitsOnDrop {
        event: Rc<Event>,
        receiver: mpsc::Receiver<u32>,
        outcome: Rc<RefCell<Vec<String>>>,
    }
    impl Drop for WaitsOnDrop {
        fn drop(&mut self) {
            let set = self.event.wait_timeout(FOREVER);
            let received = self.receiver.recv_timeout(FOREVER);
            self.outcome
                .borrow_mut()
                .push(format!("event {set}, recv {received:?}"));
        }
    }
    let outcome = greenweave::run(|| {
        let outcome = Rc::new(RefCell::new(Vec::new()));
        let (sender, receiver) = mpsc::channel::<u32>();
        let guard = WaitsOnDrop {
            event: Rc::new(Event::new()),
            receiver,
            outcome: outcome.clone(),
        };
        let panicking = greenweave::spawn(move || {
            let _guard = guard;
            panic!("unwinds into a destructor that waits with a timeout");
        });
        assert!(panicking.join().unwrap_err().is_panic());
        drop(sender);
        outcome.take()
    });
    assert_eq!(outcome, ["event false, recv Err(Timeout)"]);
}

/// A socket read in a destructor during an unwind does not park: it fails at once with
/// `TimedOut`, and the error says why.
#[test]
fn a_socket_read_in_a_destructor_during_an_unwind_fails_at_once_saying_why() {
    use greenweave::os::unix::net::UnixStream;
    use std::io::Read;
    struct ReadsOnDrop(UnixStream, Rc<RefCell<Option<std::io::Error>>>);
    impl Drop for ReadsOnDrop {
        fn drop(&mut self) {
            let error = self.0.read(&mut [0_u8; 1]).unwrap_err();
            *self.1.borrow_mut() = Some(error);
        }
    }
    let error = greenweave::run(|| {
        let (near, far) = UnixStream::pair().unwrap();
        let error = Rc::new(RefCell::new(None));
        let guard = ReadsOnDrop(near, error.clone());
        let panicking = greenweave::spawn(move || {
            let _guard = guard;
            panic!("unwinds into a destructor that reads");
        });
        assert!(panicking.join().unwrap_err().is_panic());
        drop(far);
        error.take().expect("the destructor ran")
    });
    assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
    assert!(
        error.to_string().contains("the green thread is unwinding"),
        "{error}"
    );
}

/// `run` returns, and `panicking()` is false afterwards, when a green thread's destructor
/// waited (with a timeout) during its unwind while `main` was finishing.
#[test]
fn run_returns_and_panicking_is_false_after_a_destructor_waited_during_an_unwind() {
    struct WaitsOnDrop(Rc<Event>);
    impl Drop for WaitsOnDrop {
        fn drop(&mut self) {
            self.0.wait_timeout(FOREVER);
        }
    }
    greenweave::run(|| {
        let never = Rc::new(Event::new());
        let on_drop = WaitsOnDrop(never.clone());
        greenweave::spawn(move || {
            let _on_drop = on_drop;
            panic!("unwinds into a destructor that waits");
        });
        settle();
    });
    assert!(!std::thread::panicking());
    // A later runtime on the same thread sees no panic either.
    greenweave::run(|| assert!(!std::thread::panicking()));
}

/// A wait that cannot time out (here `Mutex::lock`, contended) in a destructor during an
/// unwind does not switch: it panics with a message naming the wait and the rule, which in a
/// destructor during an unwind aborts the process (as any panic escaping one does in Rust).
#[test]
fn an_untimed_wait_in_a_destructor_during_an_unwind_fails_fast_with_a_message() {
    const NAME: &str = "an_untimed_wait_in_a_destructor_during_an_unwind_fails_fast_with_a_message";
    struct LocksOnDrop(Rc<Mutex<()>>);
    impl Drop for LocksOnDrop {
        fn drop(&mut self) {
            drop(self.0.lock());
        }
    }
    let outcome = common::run_in_child(NAME, || {
        greenweave::run(|| {
            let mutex = Rc::new(Mutex::new(()));
            let _held = mutex.lock().unwrap();
            let on_drop = LocksOnDrop(mutex.clone());
            let unwinding = greenweave::spawn(move || {
                let _on_drop = on_drop;
                panic!("unwinds into a destructor that waits for the lock");
            });
            let _ = unwinding.join();
        });
    });
    assert_aborted_saying(
        &outcome,
        "Mutex::lock would wait while its green thread is unwinding",
    );
}

/// The same for a join in a destructor of a cancelled green thread.
#[test]
fn a_join_in_a_destructor_during_a_cancellation_fails_fast_with_a_message() {
    const NAME: &str = "a_join_in_a_destructor_during_a_cancellation_fails_fast_with_a_message";
    struct JoinsOnDrop(Option<JoinHandle<()>>);
    impl Drop for JoinsOnDrop {
        fn drop(&mut self) {
            let _ = self.0.take().unwrap().join();
        }
    }
    let outcome = common::run_in_child(NAME, || {
        greenweave::run(|| {
            let cleanup = greenweave::spawn(|| thread::sleep(FOREVER));
            let owner = greenweave::spawn(move || {
                let _guard = JoinsOnDrop(Some(cleanup));
                thread::sleep(FOREVER);
            });
            settle();
            owner.cancel();
            let _ = owner.join();
        });
    });
    assert_aborted_saying(
        &outcome,
        "JoinHandle::join would wait while its green thread is unwinding",
    );
}

/// A coroutine whose destructor suspends while its body unwinds from a panic: `suspend`
/// panics (aborting, from a destructor during an unwind) instead of handing the resumer a
/// raised panic count.
#[test]
fn a_coroutine_that_suspends_while_it_unwinds_fails_fast_with_a_message() {
    const NAME: &str = "a_coroutine_that_suspends_while_it_unwinds_fails_fast_with_a_message";
    let outcome = common::run_in_child(NAME, || {
        let mut co = Coroutine::<(), u32, ()>::new(|yielder, ()| {
            struct SuspendsOnDrop<'a>(&'a greenweave::Yielder<(), u32>);
            impl Drop for SuspendsOnDrop<'_> {
                fn drop(&mut self) {
                    self.0.suspend(7);
                }
            }
            let _guard = SuspendsOnDrop(yielder);
            panic!("the body panics");
        });
        let _ = catch_unwind(AssertUnwindSafe(|| co.resume(())));
    });
    assert_aborted_saying(
        &outcome,
        "Yielder::suspend called while the coroutine is unwinding",
    );
}

/// Suspending while the *resumer* unwinds is fine: a destructor that drains a generator during
/// a panic gets every value.
#[test]
fn a_destructor_can_drain_a_generator_while_its_own_thread_unwinds() {
    struct DrainsOnDrop(Rc<RefCell<Vec<u32>>>);
    impl Drop for DrainsOnDrop {
        fn drop(&mut self) {
            let generator = Coroutine::<(), u32, ()>::new(|yielder, ()| {
                for n in 1..=3 {
                    yielder.suspend(n);
                }
            });
            self.0.borrow_mut().extend(generator);
        }
    }
    let drained = Rc::new(RefCell::new(Vec::new()));
    let guard = DrainsOnDrop(drained.clone());
    let result = catch_unwind(AssertUnwindSafe(move || {
        let _guard = guard;
        panic!("unwinds through a destructor that drains a generator");
    }));
    assert!(result.is_err());
    assert_eq!(*drained.borrow(), [1, 2, 3]);
    assert!(!std::thread::panicking());
}

/// A generator resumed from a destructor during an unwind runs as part of that destructor, as
/// a function it calls would: `panicking()` is true in it as well (the unwind is its
/// resumer's, which every suspend returns to), and like the destructor it switches nowhere
/// else: a greenlet switch in it is refused. Once the unwind is over, the same generator sees
/// none.
#[test]
fn a_generator_resumed_from_a_destructor_during_an_unwind_runs_as_part_of_it_and_switches_to_no_greenlet()
 {
    type Seen = Rc<RefCell<Vec<String>>>;
    type Slot = Rc<RefCell<Option<Coroutine<(), (), ()>>>>;
    struct ResumesOnDrop(Slot, Seen);
    impl Drop for ResumesOnDrop {
        fn drop(&mut self) {
            let result = self.0.borrow_mut().as_mut().unwrap().resume(());
            self.1
                .borrow_mut()
                .push(format!("destructor got {result:?}"));
        }
    }
    let seen = Seen::default();
    let inner = seen.clone();
    let generator = Coroutine::<(), (), ()>::new(move |yielder, ()| {
        for _ in 0..2 {
            let panicking = std::thread::panicking();
            let greenlet = Greenlet::new(|()| ());
            let switch = catch_unwind(AssertUnwindSafe(|| greenlet.switch(())));
            inner.borrow_mut().push(format!(
                "panicking: {panicking}, greenlet switch refused: {}",
                switch.is_err()
            ));
            yielder.suspend(());
        }
    });
    let slot = Slot::new(RefCell::new(Some(generator)));
    let guard = ResumesOnDrop(slot.clone(), seen.clone());
    let result = catch_unwind(AssertUnwindSafe(move || {
        let _guard = guard;
        panic!("unwinds through a destructor that resumes a generator");
    }));
    assert!(result.is_err());
    let mut generator = slot.take().unwrap();
    assert_eq!(generator.resume(()), CoroutineResult::Yield(()));
    assert_eq!(generator.resume(()), CoroutineResult::Return(()));
    assert_eq!(
        *seen.borrow(),
        [
            "panicking: true, greenlet switch refused: true",
            "destructor got Yield(())",
            "panicking: false, greenlet switch refused: false",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Item 11: sticky cancellation, shutdown that always completes
// ---------------------------------------------------------------------------------------------

/// A supervisor loop that catches every panic of its worker and restarts it after a pause:
/// the cancellation is raised again at the pause (outside the catch), so `cancel` + `join`
/// completes with `Cancelled`.
#[test]
fn a_cancellation_caught_by_a_supervisor_loop_is_raised_again_at_its_next_park() {
    let restarts = greenweave::run(|| {
        let restarts = Rc::new(Cell::new(0));
        let count = restarts.clone();
        let supervisor = greenweave::spawn(move || {
            loop {
                let _ = catch_unwind(|| thread::sleep(FOREVER));
                count.set(count.get() + 1);
                thread::sleep(Duration::from_millis(1)); // restart after a pause
            }
        });
        settle();
        supervisor.cancel();
        assert!(supervisor.join().unwrap_err().is_cancelled());
        restarts.get()
    });
    assert_eq!(
        restarts, 1,
        "the worker was caught once, then the pause ended it"
    );
}

/// A loop that catches its cancellation with no park outside the catch: it meets the
/// cancellation at every park and lets the others run each time, and when `main` returns the
/// shutdown gives up on it after a bounded number of deliveries: `run` returns.
#[test]
fn run_returns_when_a_green_thread_keeps_catching_its_cancellation() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (caught, others_ran) = greenweave::run(|| {
            let caught = Rc::new(Cell::new(0_u32));
            let count = caught.clone();
            let stubborn = greenweave::spawn(move || {
                loop {
                    let _ = catch_unwind(|| thread::sleep(FOREVER));
                    count.set(count.get() + 1);
                }
            });
            settle();
            stubborn.cancel();
            // Each re-delivery lets the others run: this green thread keeps making progress.
            let others_ran = Rc::new(Cell::new(0_u32));
            for _ in 0..10 {
                thread::yield_now();
                others_ran.set(others_ran.get() + 1);
            }
            assert!(caught.get() >= 1 && !stubborn.is_finished());
            (caught, others_ran.get())
        });
        done.send((caught.get(), others_ran)).unwrap();
    });
    let (caught, others_ran) = finished
        .recv_timeout(Duration::from_secs(120))
        .expect("run returned although a green thread kept catching its cancellation");
    assert_eq!(others_ran, 10);
    assert!((10..=64).contains(&caught), "caught {caught} times");
}

/// A cancellation is a cancellation point at every park, including `yield_now`.
#[test]
fn a_caught_cancellation_is_raised_again_at_the_next_yield() {
    let outcome = greenweave::run(|| {
        let log = Rc::new(RefCell::new(Vec::new()));
        let l = log.clone();
        let handle = greenweave::spawn(move || {
            let first = catch_unwind(|| thread::sleep(FOREVER));
            l.borrow_mut().push(format!("caught: {}", first.is_err()));
            thread::yield_now();
            l.borrow_mut().push("never".to_owned());
        });
        settle();
        handle.cancel();
        let result = handle.join();
        (log.take(), result.unwrap_err().is_cancelled())
    });
    assert_eq!(outcome, (vec!["caught: true".to_owned()], true));
}

// ---------------------------------------------------------------------------------------------
// Item 9: panicking destructors on stacks greenweave unwinds
// ---------------------------------------------------------------------------------------------

struct PanicsOnDrop;
impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("a destructor panicked during the unwind");
    }
}

/// Dropping a suspended coroutine unwinds its stack; a destructor there that panics aborts the
/// process (Rust's rule for a panic escaping a destructor during an unwind), as documented on
/// `Coroutine`'s `Drop`.
#[test]
fn a_panicking_destructor_on_a_dropped_suspended_coroutine_aborts() {
    const NAME: &str = "a_panicking_destructor_on_a_dropped_suspended_coroutine_aborts";
    let outcome = common::run_in_child(NAME, || {
        let mut co = Coroutine::<(), (), ()>::new(|yielder, ()| {
            let _guard = PanicsOnDrop;
            yielder.suspend(());
        });
        assert_eq!(co.resume(()), CoroutineResult::Yield(()));
        drop(co);
    });
    assert_aborted_saying(&outcome, "a destructor panicked during the unwind");
}

/// `into_stack` on a suspended coroutine unwinds it the same way.
#[test]
fn a_panicking_destructor_on_a_suspended_coroutine_turned_into_its_stack_aborts() {
    const NAME: &str =
        "a_panicking_destructor_on_a_suspended_coroutine_turned_into_its_stack_aborts";
    let outcome = common::run_in_child(NAME, || {
        let mut co = Coroutine::<(), (), ()>::new(|yielder, ()| {
            let _guard = PanicsOnDrop;
            yielder.suspend(());
        });
        assert_eq!(co.resume(()), CoroutineResult::Yield(()));
        drop(co.into_stack());
    });
    assert_aborted_saying(&outcome, "a destructor panicked during the unwind");
}

/// A panicking destructor of a *value* the body returned or held unstarted is not on an
/// unwinding stack: that panic reaches the caller (here through `into_stack` of an unstarted
/// coroutine whose capture panics on drop).
#[test]
fn a_panicking_capture_of_an_unstarted_coroutine_is_raised_from_into_stack() {
    let held = PanicsOnDrop;
    let co = Coroutine::<(), (), ()>::new(move |_, ()| drop(held));
    let payload = catch_unwind(AssertUnwindSafe(move || drop(co.into_stack()))).unwrap_err();
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("a destructor panicked during the unwind")
    );
}

/// `JoinHandle::cancel`, a `time::timeout` and the runtime's shutdown unwind a green thread's
/// stack: a destructor that panics there aborts, as documented on each.
#[test]
fn a_panicking_destructor_on_a_cancelled_green_thread_aborts() {
    const NAME: &str = "a_panicking_destructor_on_a_cancelled_green_thread_aborts";
    let outcome = common::run_in_child(NAME, || {
        greenweave::run(|| {
            let handle = greenweave::spawn(|| {
                let _guard = PanicsOnDrop;
                thread::sleep(FOREVER);
            });
            settle();
            handle.cancel();
            let _ = handle.join();
        });
    });
    assert_aborted_saying(&outcome, "a destructor panicked during the unwind");
}

#[test]
fn a_panicking_destructor_in_an_expired_timeout_aborts() {
    const NAME: &str = "a_panicking_destructor_in_an_expired_timeout_aborts";
    let outcome = common::run_in_child(NAME, || {
        greenweave::run(|| {
            let _ = timeout(Duration::from_millis(1), || {
                let _guard = PanicsOnDrop;
                thread::sleep(FOREVER);
            });
        });
    });
    assert_aborted_saying(&outcome, "a destructor panicked during the unwind");
}

#[test]
fn a_panicking_destructor_on_a_green_thread_ended_by_shutdown_aborts() {
    const NAME: &str = "a_panicking_destructor_on_a_green_thread_ended_by_shutdown_aborts";
    let outcome = common::run_in_child(NAME, || {
        greenweave::run(|| {
            greenweave::spawn(|| {
                let _guard = PanicsOnDrop;
                thread::sleep(FOREVER);
            });
            settle();
        });
    });
    assert_aborted_saying(&outcome, "a destructor panicked during the unwind");
}

/// For contrast: a panicking destructor that runs when a green thread *returns* (not on an
/// unwinding stack) is an ordinary panic of that green thread, reported by `join`.
#[test]
fn a_panicking_destructor_on_a_returning_green_thread_is_reported_by_join() {
    greenweave::run(|| {
        let handle = greenweave::spawn(|| {
            let _guard = PanicsOnDrop;
        });
        let error = handle.join().unwrap_err();
        assert_eq!(
            error.panic_message(),
            Some("a destructor panicked during the unwind")
        );
    });
}
