//! Handles that outlive their runtime: a value returned from `run` (a `JoinHandle`, a socket,
//! a channel with a remote sender) and used after it, in a later runtime on the same OS thread
//! or outside any. Each use either works in the new runtime or reports at once what happened;
//! none hangs, and none reaches an internal assertion.
//!
//! A test whose subject could wait for ever bounds the wait (a `time::timeout` inside the
//! second run, or the whole test on an OS thread given a generous limit), so a regression
//! fails instead of hanging. The limits only turn a hang into a failure; nothing here asserts
//! that anything is fast.

mod common;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use greenweave::sync::Event;
use greenweave::thread::{self, JoinError, JoinHandle};

use common::run_in_child;

const FOREVER: Duration = Duration::from_secs(3600);

/// Counts its own drops in a shared counter.
struct Tally(Rc<Cell<usize>>);

impl Drop for Tally {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

// ---------------------------------------------------------------------------------------------
// JoinHandle
// ---------------------------------------------------------------------------------------------

type HandleSlot = Rc<RefCell<Option<JoinHandle<()>>>>;

/// A guard whose destructor spawns a green thread that waits on `event` with `tally` alive,
/// and puts its handle in `slot`.
struct SpawnsWaiterOnDrop {
    event: Rc<Event>,
    tally: Rc<Cell<usize>>,
    slot: HandleSlot,
}

impl Drop for SpawnsWaiterOnDrop {
    fn drop(&mut self) {
        let event = self.event.clone();
        let tally = self.tally.clone();
        let waiter = greenweave::spawn(move || {
            let _tally = Tally(tally);
            event.wait();
        });
        *self.slot.borrow_mut() = Some(waiter);
    }
}

/// Runs a runtime that gives up on a green thread at shutdown, and returns that green thread's
/// handle, the event it waits on, and how many of its destructors have run.
///
/// The green thread is spawned by a destructor that runs during shutdown, and waits on an
/// event that nothing sets: shutdown finds it stuck with nothing that could wake it, and ends
/// it by force.
fn green_thread_given_up_at_shutdown() -> (JoinHandle<()>, Rc<Event>, Rc<Cell<usize>>) {
    let event = Rc::new(Event::new());
    let tally = Rc::new(Cell::new(0));
    let slot = HandleSlot::default();
    let guard = SpawnsWaiterOnDrop {
        event: event.clone(),
        tally: tally.clone(),
        slot: slot.clone(),
    };
    greenweave::run(move || {
        greenweave::spawn(move || {
            let _guard = guard;
            thread::sleep(FOREVER);
        });
        thread::yield_now(); // it starts and sleeps; shutdown cancels it
    });
    let handle = slot.borrow_mut().take().expect("the guard ran at shutdown");
    (handle, event, tally)
}

#[test]
fn join_reports_cancelled_for_a_green_thread_its_runtime_ended_by_force() {
    let (handle, _event, tally) = green_thread_given_up_at_shutdown();
    assert_eq!(tally.get(), 1, "its destructors ran");
    assert!(handle.is_finished());
    assert!(matches!(handle.join(), Err(JoinError::Cancelled)));
}

#[test]
fn cancel_in_a_later_run_of_a_green_thread_its_runtime_ended_by_force_changes_nothing() {
    let (handle, event, tally) = green_thread_given_up_at_shutdown();
    let outcome = greenweave::run(move || {
        handle.cancel();
        thread::yield_now(); // the scheduler runs whatever the cancel queued
        let outcome = handle.join();
        // The runtime keeps working, and reuses the handle's task allocation, if it can.
        let next = greenweave::spawn(|| 7);
        assert_eq!(next.join().unwrap(), 7);
        drop(event);
        outcome
    });
    assert!(matches!(outcome, Err(JoinError::Cancelled)));
    assert_eq!(tally.get(), 1);
}

#[test]
fn a_primitive_still_listing_a_green_thread_of_an_ended_runtime_skips_it_in_a_later_run() {
    let (handle, event, _tally) = green_thread_given_up_at_shutdown();
    greenweave::run(move || {
        let waiter = {
            let event = event.clone();
            greenweave::spawn(move || event.wait())
        };
        thread::yield_now(); // it waits, behind the green thread of the ended runtime
        event.set();
        thread::yield_now(); // the scheduler runs whatever `set` woke
        waiter.join().unwrap();
        drop(handle);
    });
}

#[test]
fn cancel_in_a_later_run_of_a_green_thread_cancelled_at_shutdown_changes_nothing() {
    let handle = greenweave::run(|| {
        let handle = greenweave::spawn(|| thread::sleep(FOREVER));
        thread::yield_now();
        handle
    });
    let outcome = greenweave::run(move || {
        handle.cancel();
        thread::yield_now();
        handle.join()
    });
    assert!(matches!(outcome, Err(JoinError::Cancelled)));
}

/// A guard whose destructor waits on an event that nothing sets.
struct WaitsOnDrop(Rc<Event>);

impl Drop for WaitsOnDrop {
    fn drop(&mut self) {
        self.0.wait();
    }
}

#[test]
fn join_in_a_later_run_of_a_green_thread_leaked_mid_unwind_at_shutdown_reports_cancelled() {
    // The green thread parks in a destructor while it unwinds (cancelled at shutdown), which
    // leaves the OS thread's panic count raised for good once its stack is leaked: a panic
    // from then on aborts, so the scenario runs in a child process.
    let outcome = run_in_child(
        "join_in_a_later_run_of_a_green_thread_leaked_mid_unwind_at_shutdown_reports_cancelled",
        || {
            let event = Rc::new(Event::new());
            let guard = WaitsOnDrop(event.clone());
            let handle = greenweave::run(move || {
                let handle = greenweave::spawn(move || {
                    let _guard = guard;
                    thread::sleep(FOREVER);
                });
                thread::yield_now();
                handle
            });
            let finished = handle.is_finished();
            let joined = greenweave::run(move || handle.join());
            let cancelled = matches!(joined, Err(JoinError::Cancelled));
            println!("finished: {finished}, cancelled: {cancelled}");
            std::process::exit(if finished && cancelled { 0 } else { 1 });
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
}
