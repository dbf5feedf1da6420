//! Borrowing green threads: `run`'s closure and value may borrow from its caller, and
//! `thread::scope` starts green threads that borrow from the caller of `scope`, all of which
//! end before it returns, whether its closure returns, panics, is cancelled or times out, and
//! when the runtime ends around it.
//!
//! The tests record events in order. A scoped green thread's destructor writes into data
//! borrowed from the frame that called `scope` (a `Witness`); the witness, when that frame
//! drops it, copies what it holds into a log that outlives it. So "the scoped green threads
//! ended before the frame they borrow from went" reads as: their entries come before the
//! witness's own in the log (a write after the witness was dropped would be lost, and be a
//! use after free). No test depends on timing: sleeps are either far longer than any test
//! (and ended by a cancellation or a timeout) or only let others run.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::time::Duration;

use greenweave::greenlet::Greenlet;
use greenweave::sync::{Event, mpsc};
use greenweave::thread::{self, Builder, JoinError};
use greenweave::time;
use greenweave::{Coroutine, CoroutineResult, Runtime};

mod common;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Longer than any test runs: a sleep that only a cancellation or a timeout ends.
const FOREVER: Duration = Duration::from_secs(3600);

type Log = Rc<RefCell<Vec<String>>>;

fn new_log() -> Log {
    Rc::new(RefCell::new(Vec::new()))
}

fn entries(log: &Log) -> Vec<String> {
    log.borrow().clone()
}

/// Data in the frame that calls `scope`, lent to its green threads: they note events into it,
/// and when it is dropped it moves them into `log`, followed by its own "dropped" entry.
struct Witness {
    notes: RefCell<Vec<String>>,
    log: Log,
    name: &'static str,
}

impl Witness {
    fn new(log: &Log, name: &'static str) -> Witness {
        Witness {
            notes: RefCell::new(Vec::new()),
            log: log.clone(),
            name,
        }
    }

    fn note(&self, event: impl Into<String>) {
        self.notes.borrow_mut().push(event.into());
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let mut log = self.log.borrow_mut();
        log.extend(self.notes.take());
        log.push(format!("{} dropped", self.name));
    }
}

/// Notes `event` into a borrowed witness when dropped (by an unwind or at the end of a scope).
struct NoteOnDrop<'a> {
    witness: &'a Witness,
    event: String,
}

impl Drop for NoteOnDrop<'_> {
    fn drop(&mut self) {
        self.witness.note(std::mem::take(&mut self.event));
    }
}

fn note_on_drop(witness: &Witness, event: impl Into<String>) -> NoteOnDrop<'_> {
    NoteOnDrop {
        witness,
        event: event.into(),
    }
}

/// The message of a panic whose payload is a `&str` or a `String`.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|message| (*message).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| panic!("the panic payload is neither &str nor String"))
}

/// Runs `f`, expecting it to panic, and returns the panic's message.
fn expect_panic<T>(f: impl FnOnce() -> T) -> String {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(_) => panic!("expected a panic"),
        Err(payload) => panic_message(&*payload),
    }
}

/// Yields until `done()`, which another green thread makes true.
fn yield_until(done: impl Fn() -> bool) {
    while !done() {
        thread::yield_now();
    }
}

// ---------------------------------------------------------------------------------------------
// run
// ---------------------------------------------------------------------------------------------

#[test]
fn run_borrows_from_its_caller_and_returns_a_value_that_borrows_too() {
    let mut numbers = vec![1, 2, 3];
    let text = String::from("green threads");
    let first_word: &str = greenweave::run(|| {
        numbers.push(4);
        thread::yield_now();
        numbers.push(text.len());
        text.split(' ').next().unwrap()
    });
    assert_eq!(first_word, "green");
    assert_eq!(numbers, [1, 2, 3, 4, 13]);
}

#[test]
fn runtime_run_borrows_from_its_caller_too() {
    let mut count = 0;
    let runtime = Runtime::new();
    let seen = runtime.run(|| {
        count += 1;
        &count
    });
    assert_eq!(*seen, 1);
}

#[test]
fn run_ends_the_borrowing_main_green_thread_before_it_reraises_a_deadlock() {
    let log = new_log();
    let message = expect_panic(|| {
        let witness = Witness::new(&log, "caller's data");
        greenweave::run(|| {
            let _noted = note_on_drop(&witness, "main unwound");
            let (_sender, receiver) = mpsc::channel::<()>();
            receiver.recv().unwrap();
        })
    });
    assert!(message.contains("deadlock"), "{message}");
    assert_eq!(entries(&log), ["main unwound", "caller's data dropped"]);
}

// ---------------------------------------------------------------------------------------------
// scope: the ordinary cases
// ---------------------------------------------------------------------------------------------

#[test]
fn scoped_green_threads_mutate_borrowed_data_and_the_caller_sees_it_after_scope() {
    greenweave::run(|| {
        let mut halves = [vec![1, 2], vec![3, 4]];
        let mut counter = 0;
        let factor = 10;
        let [left, right] = &mut halves;
        thread::scope(|s| {
            s.spawn(|| {
                for value in left.iter_mut() {
                    thread::yield_now();
                    *value *= factor;
                }
            });
            s.spawn(|| {
                for value in right.iter_mut() {
                    thread::yield_now();
                    *value *= factor;
                }
            });
            s.spawn(|| counter += 1);
        });
        assert_eq!(halves, [vec![10, 20], vec![30, 40]]);
        assert_eq!(counter, 1);
    });
}

#[test]
fn scope_returns_its_closures_value_only_after_every_green_thread_finished() {
    greenweave::run(|| {
        let events = RefCell::new(Vec::new());
        // The waiter parks until the yielder is done, so that it finishes last. (A short sleep
        // could end first: its deadline could pass before it parked, under qemu.)
        let (yielded, yielder_done) = greenweave::sync::oneshot::channel::<()>();
        let value = thread::scope(|s| {
            s.spawn(|| {
                yielder_done
                    .recv()
                    .expect("the yielder sends once it is done");
                events.borrow_mut().push("waiter finished");
            });
            s.spawn(|| {
                for _ in 0..3 {
                    thread::yield_now();
                }
                events.borrow_mut().push("yielder finished");
                yielded.send(()).unwrap();
            });
            events.borrow_mut().push("closure returned");
            42
        });
        events.borrow_mut().push("scope returned");
        assert_eq!(value, 42);
        assert_eq!(
            events.into_inner(),
            [
                "closure returned",
                "yielder finished",
                "waiter finished",
                "scope returned"
            ]
        );
    });
}

#[test]
fn a_scoped_join_handle_gives_the_value_the_thread_and_whether_it_finished() {
    greenweave::run(|| {
        let words = [String::from("green"), String::from("threads")];
        thread::scope(|s| {
            let handle = Builder::new()
                .name("counter".into())
                .spawn_scoped(s, || {
                    assert_eq!(thread::current().name(), Some("counter"));
                    words.iter().map(|word| word.len()).sum::<usize>()
                })
                .unwrap();
            assert_eq!(handle.thread().name(), Some("counter"));
            assert!(!handle.is_finished());
            thread::yield_now();
            assert!(handle.is_finished());
            assert_eq!(handle.join().unwrap(), 12);
        });
    });
}

#[test]
fn scoped_green_threads_spawn_more_into_their_scope_and_all_are_joined() {
    greenweave::run(|| {
        let total = Cell::new(0);
        thread::scope(|s| {
            for i in 1..=3 {
                let total = &total;
                s.spawn(move || {
                    s.spawn(move || {
                        thread::yield_now();
                        total.set(total.get() + i * 10);
                    });
                    total.set(total.get() + i);
                });
            }
        });
        assert_eq!(total.get(), 66);
    });
}

#[test]
fn a_scoped_green_thread_that_panicked_unjoined_makes_scope_panic_after_the_others_finished() {
    greenweave::run(|| {
        let events = RefCell::new(Vec::new());
        let message = expect_panic(|| {
            thread::scope(|s| {
                s.spawn(|| {
                    events.borrow_mut().push("failing starts");
                    thread::yield_now();
                    panic!("a child failed");
                });
                s.spawn(|| {
                    events.borrow_mut().push("worker starts");
                    for _ in 0..5 {
                        thread::yield_now();
                    }
                    events.borrow_mut().push("worker finished");
                });
            })
        });
        events.borrow_mut().push("scope panicked");
        assert_eq!(message, "a scoped thread panicked");
        assert_eq!(
            events.into_inner(),
            [
                "failing starts",
                "worker starts",
                "worker finished",
                "scope panicked"
            ]
        );
    });
}

#[test]
fn a_panic_taken_by_join_does_not_make_scope_panic() {
    greenweave::run(|| {
        let value = thread::scope(|s| {
            let failing = s.spawn(|| -> u8 { panic!("handled") });
            match failing.join() {
                Err(error) => assert_eq!(error.panic_message(), Some("handled")),
                Ok(_) => panic!("the green thread panicked"),
            }
            7
        });
        assert_eq!(value, 7);
    });
}

#[test]
fn a_result_that_borrows_is_joined_or_dropped_within_the_scope() {
    greenweave::run(|| {
        let log = new_log();
        let witness = Witness::new(&log, "caller's data");
        thread::scope(|s| {
            // Joined: the value borrows the witness.
            let joined = s.spawn(|| note_on_drop(&witness, "joined result dropped"));
            drop(joined.join().unwrap());
            // Never joined: its result is dropped with the handle, inside the scope.
            let unjoined = s.spawn(|| note_on_drop(&witness, "unjoined result dropped"));
            thread::yield_now();
            assert!(unjoined.is_finished());
        });
        drop(witness);
        assert_eq!(
            entries(&log),
            [
                "joined result dropped",
                "unjoined result dropped",
                "caller's data dropped"
            ]
        );
    });
}

#[test]
fn nested_scopes_borrow_from_every_enclosing_frame() {
    greenweave::run(|| {
        let mut grid = vec![vec![0; 3]; 2];
        let base = 100;
        thread::scope(|outer| {
            for (row_index, row) in grid.iter_mut().enumerate() {
                outer.spawn(move || {
                    // A scope inside a scoped green thread: its green threads borrow the row,
                    // lent by the outer scope's caller.
                    thread::scope(|inner| {
                        for (column, cell) in row.iter_mut().enumerate() {
                            inner.spawn(move || {
                                thread::yield_now();
                                *cell = base + row_index * 10 + column;
                            });
                        }
                    });
                });
            }
            // A scope inside the outer scope's closure, on the same green thread.
            let doubled = thread::scope(|inner| inner.spawn(|| base * 2).join().unwrap());
            assert_eq!(doubled, 200);
        });
        assert_eq!(grid, [[100, 101, 102], [110, 111, 112]]);
    });
}

// ---------------------------------------------------------------------------------------------
// scope: unwinds, cancellations and timeouts
// ---------------------------------------------------------------------------------------------

#[test]
fn the_closures_own_panic_cancels_the_scoped_threads_and_comes_out_after_they_unwound() {
    greenweave::run(|| {
        let log = new_log();
        let message = expect_panic(|| {
            let witness = Witness::new(&log, "caller's data");
            let (_sender, receiver) = mpsc::channel::<u32>();
            thread::scope(|s| {
                s.spawn(|| {
                    let _noted = note_on_drop(&witness, "waiting thread unwound");
                    // Waits for what the closure would have sent.
                    receiver.recv().unwrap()
                });
                thread::yield_now();
                panic!("the closure failed");
            })
        });
        assert_eq!(message, "the closure failed");
        assert_eq!(
            entries(&log),
            ["waiting thread unwound", "caller's data dropped"]
        );
    });
}

/// A green thread calling `scope` whose two scoped green threads park for good, noting their
/// unwind into a witness in that green thread's frame; `log` gets every entry. With
/// `return_first`, the scope's closure returns (so the owner waits at the end of the scope);
/// otherwise it parks too.
fn owner_of_parked_children(
    log: &Log,
    parked: &Rc<Cell<usize>>,
    return_first: bool,
) -> greenweave::thread::JoinHandle<()> {
    let log = log.clone();
    let parked = parked.clone();
    greenweave::spawn(move || {
        let witness = Witness::new(&log, "owner's data");
        thread::scope(|s| {
            for i in 0..2 {
                let witness = &witness;
                let parked = &parked;
                s.spawn(move || {
                    let _noted = note_on_drop(witness, format!("child {i} unwound"));
                    parked.set(parked.get() + 1);
                    thread::sleep(FOREVER);
                });
            }
            if !return_first {
                thread::sleep(FOREVER);
            }
        });
        witness.note("scope returned");
    })
}

#[test]
fn cancelling_the_owner_in_its_closure_ends_the_scoped_threads_before_its_frame_goes() {
    let log = new_log();
    greenweave::run(|| {
        let parked = Rc::new(Cell::new(0));
        let owner = owner_of_parked_children(&log, &parked, false);
        yield_until(|| parked.get() == 2);
        owner.cancel();
        assert!(owner.join().unwrap_err().is_cancelled());
    });
    assert_eq!(
        entries(&log),
        ["child 0 unwound", "child 1 unwound", "owner's data dropped"]
    );
}

#[test]
fn cancelling_the_owner_while_it_waits_at_the_end_of_the_scope_ends_the_scoped_threads_first() {
    let log = new_log();
    greenweave::run(|| {
        let parked = Rc::new(Cell::new(0));
        let owner = owner_of_parked_children(&log, &parked, true);
        yield_until(|| parked.get() == 2);
        owner.cancel();
        assert!(owner.join().unwrap_err().is_cancelled());
    });
    assert_eq!(
        entries(&log),
        ["child 0 unwound", "child 1 unwound", "owner's data dropped"]
    );
}

#[test]
fn a_timeout_that_elapses_in_the_closure_ends_the_scoped_threads_before_it_returns() {
    let log = new_log();
    greenweave::run(|| {
        let outcome = time::timeout(Duration::from_millis(5), || {
            let witness = Witness::new(&log, "timed frame's data");
            thread::scope(|s| {
                // Made before the spawn: the note is written whether the child ran or was
                // dropped unrun (the timeout may elapse before it starts, as under qemu).
                let noted = note_on_drop(&witness, "child unwound");
                s.spawn(move || {
                    let _noted = noted;
                    thread::sleep(FOREVER);
                });
                thread::sleep(FOREVER);
            })
        });
        assert!(outcome.is_err());
        log.borrow_mut().push("timeout returned".into());
    });
    assert_eq!(
        entries(&log),
        [
            "child unwound",
            "timed frame's data dropped",
            "timeout returned"
        ]
    );
}

#[test]
fn a_timeout_that_elapses_while_the_scope_waits_ends_the_scoped_threads_before_it_returns() {
    let log = new_log();
    greenweave::run(|| {
        let outcome = time::timeout(Duration::from_millis(5), || {
            let witness = Witness::new(&log, "timed frame's data");
            thread::scope(|s| {
                // Made before the spawn: the note is written whether the child ran or was
                // dropped unrun (the timeout may elapse before it starts, as under qemu).
                let noted = note_on_drop(&witness, "child unwound");
                s.spawn(move || {
                    let _noted = noted;
                    thread::sleep(FOREVER);
                });
                "the closure returned"
            })
        });
        assert!(outcome.is_err());
        log.borrow_mut().push("timeout returned".into());
    });
    assert_eq!(
        entries(&log),
        [
            "child unwound",
            "timed frame's data dropped",
            "timeout returned"
        ]
    );
}

#[test]
fn a_green_thread_spawned_by_a_destructor_while_the_scope_is_cancelled_never_runs() {
    greenweave::run(|| {
        let ran = Cell::new(false);
        let outcome = time::timeout(Duration::from_millis(5), || {
            thread::scope(|s| {
                struct SpawnOnDrop<'scope, 'env>(
                    &'scope thread::Scope<'scope, 'env>,
                    &'env Cell<bool>,
                );
                impl Drop for SpawnOnDrop<'_, '_> {
                    fn drop(&mut self) {
                        let ran = self.1;
                        let late = self.0.spawn(move || ran.set(true));
                        drop(late);
                    }
                }
                // Made before the spawn, so its destructor runs whether the child ran or was
                // dropped unrun.
                let spawner = SpawnOnDrop(s, &ran);
                s.spawn(move || {
                    let _spawner = spawner;
                    thread::sleep(FOREVER);
                });
                thread::sleep(FOREVER);
            })
        });
        assert!(outcome.is_err());
        assert!(!ran.get());
    });
}

#[test]
fn a_scope_entered_while_unwinding_refuses_to_spawn() {
    struct ScopeInDrop<'a>(&'a Cell<Option<io::ErrorKind>>);
    impl Drop for ScopeInDrop<'_> {
        fn drop(&mut self) {
            thread::scope(|s| {
                let error = Builder::new().spawn_scoped(s, || ()).unwrap_err();
                self.0.set(Some(error.kind()));
            });
        }
    }
    greenweave::run(|| {
        let refused = Cell::new(None);
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            let _in_drop = ScopeInDrop(&refused);
            panic!("unwinding");
        }));
        assert!(unwound.is_err());
        assert_eq!(refused.get(), Some(io::ErrorKind::Other));
    });
}

#[test]
fn a_scope_waiting_for_its_green_threads_is_named_in_the_deadlock_report() {
    let message = expect_panic(|| {
        greenweave::run(|| {
            let (_sender, receiver) = mpsc::channel::<()>();
            thread::scope(|s| {
                s.spawn(|| receiver.recv());
            });
        })
    });
    assert!(
        message.contains(
            "green thread 'main' (id 1): waiting in thread::scope for 1 green thread spawned in it"
        ),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// scope: the runtime ending around it
// ---------------------------------------------------------------------------------------------

#[test]
fn shutdown_ends_the_scoped_threads_before_the_owners_frame_goes() {
    let log = new_log();
    let parked = Rc::new(Cell::new(0));
    greenweave::run(|| {
        let owner = owner_of_parked_children(&log, &parked, true);
        yield_until(|| parked.get() == 2);
        drop(owner); // main returns: shutdown cancels the owner and its green threads
    });
    assert_eq!(
        entries(&log),
        ["child 0 unwound", "child 1 unwound", "owner's data dropped"]
    );
}

/// A scoped green thread that keeps catching its cancellation; `caught` counts the catches.
fn stubborn(caught: &Cell<u32>) {
    loop {
        let _ = catch_unwind(AssertUnwindSafe(|| thread::sleep(FOREVER)));
        caught.set(caught.get() + 1);
    }
}

#[test]
fn shutdown_completes_when_a_scoped_thread_keeps_catching_its_cancellation() {
    let log = new_log();
    let caught = Rc::new(Cell::new(0));
    greenweave::run(|| {
        let log = log.clone();
        let caught = caught.clone();
        let started = Rc::new(Cell::new(false));
        let start = started.clone();
        greenweave::spawn(move || {
            let witness = Witness::new(&log, "owner's data");
            thread::scope(|s| {
                s.spawn(|| {
                    let _noted = note_on_drop(&witness, "stubborn thread unwound");
                    start.set(true);
                    stubborn(&caught);
                });
            });
        });
        yield_until(|| started.get());
    });
    // Given up on: the stubborn green thread was leaked, never resumed, so its destructor never
    // ran; the owner's frame was unwound only once nothing could run on the leaked stack.
    assert!(caught.get() > 1);
    assert_eq!(entries(&log), ["owner's data dropped"]);
}

#[test]
fn shutdown_unwinds_nested_scope_owners_innermost_first_around_a_stubborn_thread() {
    let log = new_log();
    let caught = Rc::new(Cell::new(0));
    greenweave::run(|| {
        let log = log.clone();
        let caught = caught.clone();
        let started = Rc::new(Cell::new(false));
        let start = started.clone();
        greenweave::spawn(move || {
            let outer = Witness::new(&log, "outer owner's data");
            thread::scope(|s| {
                s.spawn(|| {
                    let inner = Witness::new(&log, "inner owner's data");
                    let _noted = note_on_drop(&outer, "inner owner unwound");
                    thread::scope(|s| {
                        s.spawn(|| {
                            let _noted = note_on_drop(&inner, "stubborn thread unwound");
                            start.set(true);
                            stubborn(&caught);
                        });
                    });
                });
            });
        });
        yield_until(|| started.get());
    });
    assert!(caught.get() > 1);
    assert_eq!(
        entries(&log),
        [
            "inner owner's data dropped",
            "inner owner unwound",
            "outer owner's data dropped"
        ]
    );
}

#[test]
fn cancelling_a_scoped_thread_through_its_handle_lets_the_scope_return_normally() {
    greenweave::run(|| {
        let value = thread::scope(|s| {
            let sleeper = s.spawn(|| thread::sleep(FOREVER));
            thread::yield_now();
            sleeper.cancel();
            matches!(sleeper.join(), Err(JoinError::Cancelled))
        });
        assert!(value);
    });
}

// ---------------------------------------------------------------------------------------------
// scope inside a generator: its waiter is whichever green thread waits in it now
// ---------------------------------------------------------------------------------------------

/// A generator whose body calls `scope`, spawns two green threads that each count themselves
/// in `started`, wait (parked) for `go` and then count themselves finished, and suspends inside
/// the scope's closure; resumed again, it leaves the closure, so `scope` waits for the two, and
/// it returns how many finished. Each scoped green thread notes its end into a witness on the
/// generator's stack.
fn generator_suspended_in_a_scope(
    log: &Log,
    go: &Rc<Event>,
    started: &Rc<Cell<usize>>,
) -> Coroutine<(), (), usize> {
    let (log, go, started) = (log.clone(), go.clone(), started.clone());
    Coroutine::new(move |yielder, ()| {
        let witness = Witness::new(&log, "generator's data");
        let finished = Cell::new(0);
        thread::scope(|s| {
            for i in 0..2 {
                let (witness, finished, go, started) = (&witness, &finished, &go, &started);
                s.spawn(move || {
                    let _noted = note_on_drop(witness, format!("child {i} ended"));
                    started.set(started.get() + 1);
                    go.wait();
                    finished.set(finished.get() + 1);
                });
            }
            yielder.suspend(());
        });
        finished.get()
    })
}

#[test]
fn a_scope_in_a_generator_resumed_by_another_green_thread_wakes_that_one_when_its_threads_end() {
    let log = new_log();
    greenweave::run(|| {
        let go = Rc::new(Event::new());
        let (to_resumer, from_entering) = mpsc::channel();
        let (to_entering, from_resumer) = mpsc::channel();
        let generator = generator_suspended_in_a_scope(&log, &go, &Rc::default());
        // Enters the scope, hands the generator on, and stays alive, parked.
        let entering = greenweave::spawn(move || {
            let mut generator = generator;
            assert_eq!(generator.resume(()), CoroutineResult::Yield(()));
            to_resumer.send(generator).unwrap();
            from_resumer.recv().unwrap()
        });
        let resumer = greenweave::spawn(move || {
            let mut generator: Coroutine<(), (), usize> = from_entering.recv().unwrap();
            go.set();
            // `scope` waits here, in this green thread: the last scoped thread's end wakes it.
            let result = generator.resume(());
            to_entering.send(result).unwrap();
        });
        resumer.join().unwrap();
        assert_eq!(entering.join().unwrap(), CoroutineResult::Return(2));
    });
    assert_eq!(
        entries(&log),
        ["child 0 ended", "child 1 ended", "generator's data dropped"]
    );
}

#[test]
fn a_scope_in_a_generator_resumed_after_the_green_thread_that_entered_it_ended_waits_for_its_threads()
 {
    const NAME: &str = "a_scope_in_a_generator_resumed_after_the_green_thread_that_entered_it_ended_waits_for_its_threads";
    // In a child process: were the scoped threads cut short and left in the task table, `run`
    // would never return.
    let outcome = common::run_in_child(NAME, || {
        let log = new_log();
        greenweave::run(|| {
            let go = Rc::new(Event::new());
            let generator = generator_suspended_in_a_scope(&log, &go, &Rc::default());
            let entering = greenweave::spawn(move || {
                let mut generator = generator;
                assert_eq!(generator.resume(()), CoroutineResult::Yield(()));
                generator
            });
            let mut generator = entering.join().unwrap();
            let resumer = greenweave::spawn(move || {
                go.set();
                generator.resume(())
            });
            let result = resumer.join().unwrap();
            println!("generator returned {result:?}");
            if result != CoroutineResult::Return(2) {
                // Do not wait for a `run` that would not return.
                std::process::exit(1);
            }
        });
        println!("run returned; log: {:?}", entries(&log));
        std::process::exit(0);
    });
    assert!(outcome.status.success(), "{}", outcome.describe());
    assert!(
        outcome.stdout.contains("generator returned Return(2)")
            && outcome.stdout.contains(
                r#"run returned; log: ["child 0 ended", "child 1 ended", "generator's data dropped"]"#
            ),
        "{}",
        outcome.describe()
    );
}

#[test]
fn a_scope_in_a_generator_resumed_from_a_greenlet_of_another_green_thread_wakes_that_green_thread()
{
    let log = new_log();
    greenweave::run(|| {
        let go = Rc::new(Event::new());
        let (to_resumer, from_entering) = mpsc::channel();
        let (to_entering, from_resumer) = mpsc::channel();
        let generator = generator_suspended_in_a_scope(&log, &go, &Rc::default());
        // Enters the scope from a greenlet of its own, and stays alive, parked.
        let entering = greenweave::spawn(move || {
            let enters = Greenlet::new(move |_: Option<()>| {
                let mut generator = generator;
                assert_eq!(generator.resume(()), CoroutineResult::Yield(()));
                to_resumer.send(generator).unwrap();
                None
            });
            assert_eq!(enters.switch(None), None);
            from_resumer.recv().unwrap()
        });
        let resumer = greenweave::spawn(move || {
            let resumes = Greenlet::new(move |_: Option<usize>| {
                let mut generator: Coroutine<(), (), usize> = from_entering.recv().unwrap();
                go.set();
                // `scope` waits inside this greenlet, parking its green thread.
                generator.resume(()).into_return()
            });
            to_entering.send(resumes.switch(None)).unwrap();
        });
        resumer.join().unwrap();
        assert_eq!(entering.join().unwrap(), Some(2));
    });
    assert_eq!(
        entries(&log),
        ["child 0 ended", "child 1 ended", "generator's data dropped"]
    );
}

#[test]
fn dropping_a_generator_suspended_in_a_scope_from_another_green_thread_ends_its_threads_first() {
    let log = new_log();
    greenweave::run(|| {
        // `go` is never set: the scoped threads wait until they are cancelled.
        let go = Rc::new(Event::new());
        let (to_dropper, from_entering) = mpsc::channel();
        let (to_entering, from_dropper) = mpsc::channel::<()>();
        let started = Rc::new(Cell::new(0));
        let generator = generator_suspended_in_a_scope(&log, &go, &started);
        let entering = greenweave::spawn(move || {
            let mut generator = generator;
            assert_eq!(generator.resume(()), CoroutineResult::Yield(()));
            yield_until(|| started.get() == 2);
            to_dropper.send(generator).unwrap();
            from_dropper.recv().unwrap();
        });
        let dropper = greenweave::spawn(move || {
            let generator: Coroutine<(), (), usize> = from_entering.recv().unwrap();
            // The generator unwinds from inside the scope's closure: `scope` cancels its
            // green threads and waits for them, in this green thread, before the unwind goes on.
            drop(generator);
            to_entering.send(()).unwrap();
        });
        dropper.join().unwrap();
        entering.join().unwrap();
    });
    assert_eq!(
        entries(&log),
        ["child 0 ended", "child 1 ended", "generator's data dropped"]
    );
}

/// Asserts that a child process aborted and said why a scope could not wait.
fn assert_aborted_because_the_scope_could_not_wait(outcome: &common::ChildOutcome) {
    assert_eq!(
        outcome.signal(),
        Some(libc::SIGABRT),
        "{}",
        outcome.describe()
    );
    assert!(
        outcome.stderr.contains(
            "a thread::scope with 1 green thread(s) still running was unwound while the green \
             thread running it was itself unwinding"
        ),
        "{}",
        outcome.describe()
    );
}

#[test]
fn a_generator_suspended_in_a_scope_dropped_by_a_panic_aborts_saying_the_scope_cannot_wait() {
    const NAME: &str =
        "a_generator_suspended_in_a_scope_dropped_by_a_panic_aborts_saying_the_scope_cannot_wait";
    let outcome = common::run_in_child(NAME, || {
        greenweave::run(|| {
            let mut generator = Coroutine::<(), (), ()>::new(|yielder, ()| {
                thread::scope(|s| {
                    s.spawn(|| thread::sleep(FOREVER));
                    yielder.suspend(());
                });
            });
            generator.resume(());
            thread::yield_now();
            panic!("unwinds with the generator on this green thread's stack");
        });
    });
    assert_aborted_because_the_scope_could_not_wait(&outcome);
}

#[test]
fn a_greenlet_suspended_in_a_scope_killed_by_a_panic_aborts_saying_the_scope_cannot_wait() {
    const NAME: &str =
        "a_greenlet_suspended_in_a_scope_killed_by_a_panic_aborts_saying_the_scope_cannot_wait";
    let outcome = common::run_in_child(NAME, || {
        greenweave::run(|| {
            let greenlet = Greenlet::new(|()| {
                thread::scope(|s| {
                    s.spawn(|| thread::sleep(FOREVER));
                    // No handle to itself kept across the switch: the last handle is main's.
                    let main = greenweave::greenlet::current::<()>().parent().unwrap();
                    main.switch(());
                });
            });
            greenlet.switch(());
            thread::yield_now();
            panic!("unwinds with the greenlet's last handle on this green thread's stack");
        });
    });
    assert_aborted_because_the_scope_could_not_wait(&outcome);
}

#[test]
fn a_generator_suspended_in_a_scope_whose_green_thread_the_runtimes_end_cancels_lets_run_return() {
    const NAME: &str = "a_generator_suspended_in_a_scope_whose_green_thread_the_runtimes_end_cancels_lets_run_return";
    // In a child process: without the runtime's end to stop them, the scope would abort.
    let outcome = common::run_in_child(NAME, || {
        let log = new_log();
        let started = Rc::new(Cell::new(0));
        greenweave::run(|| {
            // `go` is never set: the scoped threads wait until the runtime's end.
            let go = Rc::new(Event::new());
            let mut generator = generator_suspended_in_a_scope(&log, &go, &started);
            greenweave::spawn(move || {
                assert_eq!(generator.resume(()), CoroutineResult::Yield(()));
                // Holds the generator, suspended in the scope, until the runtime's end cancels
                // this green thread: its unwind drops the generator.
                thread::sleep(FOREVER);
            });
            yield_until(|| started.get() == 2);
        });
        println!("run returned; log: {:?}", entries(&log));
        std::process::exit(0);
    });
    assert!(outcome.status.success(), "{}", outcome.describe());
    // Stopped where they stood (their stacks leaked, their destructors not run), and said so.
    assert!(
        outcome
            .stdout
            .contains(r#"run returned; log: ["generator's data dropped"]"#)
            && outcome.stderr.contains(
                "so they were stopped where they stood and their stacks leaked, their \
                 destructors not run"
            ),
        "{}",
        outcome.describe()
    );
}
