//! Green-thread-local storage (`greenweave::green_local!`, `thread::LocalKey`): one value per
//! green thread, made lazily and dropped when the green thread ends; one per OS thread outside
//! any green thread; std's `thread_local!` shared by all the green threads of an OS thread.

mod common;

use std::cell::{Cell, RefCell};
use std::panic::catch_unwind;
use std::time::Duration;

use common::{assert_aborted_saying, run_in_child};
use greenweave::greenlet::Greenlet;
use greenweave::{Coroutine, CoroutineResult, thread};

thread_local! {
    /// What happened, in order, on this OS thread (each test runs on its own): green threads
    /// and destructors append to it. A std thread-local: shared by every green thread here.
    static EVENTS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn note(event: impl Into<String>) {
    EVENTS.with_borrow_mut(|events| events.push(event.into()));
}

fn events() -> Vec<String> {
    EVENTS.take()
}

/// Notes `dropped <name>` when dropped.
struct Noted(&'static str);

impl Drop for Noted {
    fn drop(&mut self) {
        note(format!("dropped {}", self.0));
    }
}

greenweave::green_local! {
    static NUMBER: Cell<u32> = const { Cell::new(0) };
    static NOTED: RefCell<Option<Noted>> = const { RefCell::new(None) };
}

#[test]
fn two_interleaving_green_threads_each_see_their_own_value() {
    greenweave::run(|| {
        let worker = |n: u32| {
            move || {
                NUMBER.set(n);
                for round in 0..3 {
                    thread::yield_now(); // the other one runs and sets its own value
                    note(format!("{n} sees {} in round {round}", NUMBER.get()));
                    NUMBER.set(NUMBER.get() + 10);
                }
            }
        };
        let a = greenweave::spawn(worker(1));
        let b = greenweave::spawn(worker(2));
        a.join().unwrap();
        b.join().unwrap();
    });
    assert_eq!(
        events(),
        [
            "1 sees 1 in round 0",
            "2 sees 2 in round 0",
            "1 sees 11 in round 1",
            "2 sees 12 in round 1",
            "1 sees 21 in round 2",
            "2 sees 22 in round 2",
        ]
    );
}

#[test]
fn a_value_set_in_one_green_thread_is_not_seen_by_another() {
    let seen = greenweave::run(|| {
        NUMBER.set(7);
        let other = greenweave::spawn(|| {
            let before = NUMBER.get();
            NUMBER.set(99);
            before
        });
        let other_saw = other.join().unwrap();
        (other_saw, NUMBER.get())
    });
    assert_eq!(seen, (0, 7));
}

thread_local! {
    static INITIALISED: Cell<u32> = const { Cell::new(0) };
}

fn counted_init() -> Vec<u32> {
    INITIALISED.set(INITIALISED.get() + 1);
    vec![INITIALISED.get()]
}

greenweave::green_local! {
    static COUNTED: RefCell<Vec<u32>> = RefCell::new(counted_init());
}

#[test]
fn the_initialiser_runs_once_per_green_thread_on_its_first_use() {
    let seen = greenweave::run(|| {
        let use_it_often = || {
            let mut seen = Vec::new();
            for _ in 0..3 {
                seen.push(COUNTED.with_borrow(|v| v.clone()));
                thread::yield_now();
            }
            seen
        };
        let idle = greenweave::spawn(|| ());
        idle.join().unwrap();
        assert_eq!(
            INITIALISED.get(),
            0,
            "a green thread that never uses it runs nothing"
        );
        let a = greenweave::spawn(use_it_often);
        let b = greenweave::spawn(use_it_often);
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(seen, (vec![vec![1]; 3], vec![vec![2]; 3]));
    assert_eq!(INITIALISED.get(), 2);
}

thread_local! {
    /// What `SLOW_TO_MAKE`'s initialiser waits for: the heartbeat's word that it ran.
    static TICKED: RefCell<Option<greenweave::sync::oneshot::Receiver<()>>> =
        const { RefCell::new(None) };
}

greenweave::green_local! {
    // Parks until the heartbeat has run. (A short sleep here failed under qemu: its deadline
    // could pass before the sleep parked, and then it returned at once.)
    static SLOW_TO_MAKE: Cell<u32> = {
        let ticked = TICKED.take().expect("the test leaves the receiver here");
        ticked.recv().expect("the heartbeat sends once it has run");
        note("made");
        Cell::new(5)
    };
}

#[test]
fn an_initialiser_may_park_while_other_green_threads_run() {
    greenweave::run(|| {
        let (tick, ticked) = greenweave::sync::oneshot::channel();
        TICKED.set(Some(ticked));
        let heartbeat = greenweave::spawn(|| {
            note("tick");
            tick.send(()).unwrap();
        });
        note(format!("got {}", SLOW_TO_MAKE.get()));
        heartbeat.join().unwrap();
    });
    assert_eq!(events(), ["tick", "made", "got 5"]);
}

#[test]
fn values_are_dropped_when_their_green_thread_returns_before_join_returns() {
    greenweave::run(|| {
        let worker = greenweave::spawn(|| {
            NOTED.set(Some(Noted("worker's")));
            note("worker returns");
        });
        worker.join().unwrap();
        note("joined");
        NOTED.set(Some(Noted("main's")));
    });
    note("run returned");
    assert_eq!(
        events(),
        [
            "worker returns",
            "dropped worker's",
            "joined",
            "dropped main's",
            "run returned"
        ]
    );
}

#[test]
fn values_of_a_panicking_green_thread_are_dropped_before_join_returns() {
    greenweave::run(|| {
        let worker = greenweave::spawn(|| {
            NOTED.set(Some(Noted("panicker's")));
            panic!("on purpose");
        });
        let error = worker.join().unwrap_err();
        note(format!("joined: {}", error.panic_message().unwrap()));
    });
    assert_eq!(events(), ["dropped panicker's", "joined: on purpose"]);
}

#[test]
fn values_of_a_cancelled_green_thread_are_dropped_before_join_returns() {
    greenweave::run(|| {
        let worker = greenweave::spawn(|| {
            NOTED.set(Some(Noted("cancelled one's")));
            thread::sleep(Duration::from_secs(3600));
        });
        thread::yield_now(); // it sets its value and parks
        worker.cancel();
        let error = worker.join().unwrap_err();
        note(format!("joined: cancelled {}", error.is_cancelled()));
    });
    assert_eq!(
        events(),
        ["dropped cancelled one's", "joined: cancelled true"]
    );
}

#[test]
fn values_of_green_threads_cancelled_at_shutdown_are_dropped_before_run_returns() {
    greenweave::run(|| {
        drop(greenweave::spawn(|| {
            NOTED.set(Some(Noted("detached one's")));
            thread::sleep(Duration::from_secs(3600));
        }));
        thread::yield_now();
        note("main returns");
    });
    note("run returned");
    assert_eq!(
        events(),
        ["main returns", "dropped detached one's", "run returned"]
    );
}

/// Sleeps (parks) in its destructor, noting before and after.
/// Parks in its destructor until the heartbeat says it ran. (A short sleep here failed under
/// qemu: its deadline had passed before the sleep could park, so it returned at once.)
struct ParksWhenDropped(greenweave::sync::oneshot::Receiver<()>);

impl Drop for ParksWhenDropped {
    fn drop(&mut self) {
        note("destructor parks");
        self.0.recv().expect("the heartbeat sends once it has run");
        note("destructor resumes");
    }
}

greenweave::green_local! {
    static PARKS_WHEN_DROPPED: RefCell<Option<ParksWhenDropped>> = const { RefCell::new(None) };
}

#[test]
fn a_destructor_may_park_and_the_other_green_threads_run_meanwhile() {
    greenweave::run(|| {
        let (ran, heartbeat_ran) = greenweave::sync::oneshot::channel();
        let worker =
            greenweave::spawn(|| PARKS_WHEN_DROPPED.set(Some(ParksWhenDropped(heartbeat_ran))));
        let heartbeat = greenweave::spawn(|| {
            // Bounded, so that a destructor that never runs fails the test rather than hang it
            // (dropping `ran` unsent wakes the destructor with an error, which panics).
            for _ in 0..100_000 {
                if worker_is_parked_in_its_destructor() {
                    note("heartbeat");
                    ran.send(()).unwrap();
                    return;
                }
                thread::yield_now();
            }
        });
        worker.join().unwrap();
        note("joined");
        heartbeat.join().unwrap();
    });
    assert_eq!(
        events(),
        [
            "destructor parks",
            "heartbeat",
            "destructor resumes",
            "joined"
        ]
    );
}

greenweave::green_local! {
    static ALSO_PARKS_WHEN_DROPPED: RefCell<Option<ParksWhenDropped>> =
        const { RefCell::new(None) };
}

/// A cancellation is sticky until the green thread ends: a park in a destructor raises it
/// again, which ends that destructor early; the other values are still dropped.
#[test]
fn in_a_cancelled_green_thread_a_destructor_that_parks_is_cut_short_and_the_rest_still_drop() {
    greenweave::run(|| {
        // Kept here, unsent, so that the destructor's receive parks (and is cut short).
        let (_never_sent, never) = greenweave::sync::oneshot::channel();
        let worker = greenweave::spawn(|| {
            NOTED.set(Some(Noted("first made")));
            ALSO_PARKS_WHEN_DROPPED.set(Some(ParksWhenDropped(never)));
            thread::sleep(Duration::from_secs(3600));
        });
        thread::yield_now();
        worker.cancel();
        assert!(worker.join().unwrap_err().is_cancelled());
        note("joined");
    });
    assert_eq!(
        events(),
        ["destructor parks", "dropped first made", "joined"]
    );
}

fn worker_is_parked_in_its_destructor() -> bool {
    EVENTS.with_borrow(|events| events.iter().any(|event| event == "destructor parks"))
}

#[test]
fn the_main_green_thread_has_its_own_value_apart_from_code_before_and_after_run() {
    NUMBER.set(1);
    let inside = greenweave::run(|| {
        let first = NUMBER.get();
        NUMBER.set(2);
        first
    });
    assert_eq!((inside, NUMBER.get()), (0, 1));
}

#[test]
fn outside_a_runtime_the_value_is_per_os_thread_and_dropped_when_it_exits() {
    NUMBER.set(3);
    let other = std::thread::spawn(|| {
        let before = NUMBER.get();
        NUMBER.set(4);
        NOTED.set(Some(Noted("OS thread's")));
        (before, NUMBER.get())
    });
    let seen_there = other.join().unwrap();
    assert_eq!(seen_there, (0, 4));
    assert_eq!(NUMBER.get(), 3);
    // Its value was dropped on that thread (whose EVENTS it used), not on this one.
    assert!(events().is_empty());

    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        struct Reports(std::sync::mpsc::Sender<&'static str>);
        impl Drop for Reports {
            fn drop(&mut self) {
                self.0.send("dropped at thread exit").unwrap();
            }
        }
        greenweave::green_local! {
            static REPORTS: RefCell<Option<Reports>> = const { RefCell::new(None) };
        }
        REPORTS.set(Some(Reports(sender)));
    })
    .join()
    .unwrap();
    assert_eq!(receiver.try_recv(), Ok("dropped at thread exit"));
}

thread_local! {
    static STD_SHARED: Cell<u32> = const { Cell::new(0) };
}

/// The difference users must know: std's thread-locals are per OS thread, so every green thread
/// of an OS thread sees (and changes) the same value.
#[test]
fn std_thread_local_is_shared_by_all_the_green_threads_of_an_os_thread() {
    let seen = greenweave::run(|| {
        STD_SHARED.set(1);
        NUMBER.set(1);
        let other = greenweave::spawn(|| {
            let seen = (STD_SHARED.get(), NUMBER.get());
            STD_SHARED.set(2);
            NUMBER.set(2);
            seen
        });
        let other_saw = other.join().unwrap();
        (other_saw, (STD_SHARED.get(), NUMBER.get()))
    });
    assert_eq!(seen, ((1, 0), (2, 1)));
}

#[test]
fn a_coroutine_resumed_inside_a_green_thread_sees_that_green_threads_value() {
    let seen = greenweave::run(|| {
        let reader = || {
            Coroutine::new(|yielder, ()| {
                loop {
                    yielder.suspend(NUMBER.get());
                }
            })
        };
        let mut shared = reader();
        NUMBER.set(10);
        let mine = shared.resume(());
        let other = greenweave::spawn(move || {
            NUMBER.set(20);
            let mut own = reader();
            (own.resume(()), shared.resume(()))
        });
        (mine, other.join().unwrap())
    });
    assert_eq!(
        seen,
        (
            CoroutineResult::Yield(10),
            (CoroutineResult::Yield(20), CoroutineResult::Yield(20))
        )
    );
}

#[test]
fn a_greenlet_switched_to_inside_a_green_thread_sees_that_green_threads_value() {
    let seen = greenweave::run(|| {
        NUMBER.set(30);
        let greenlet = Greenlet::new(|_: Option<u32>| Some(NUMBER.get()));
        greenlet.switch(None)
    });
    assert_eq!(seen, Some(30));
}

#[test]
fn a_coroutine_outside_a_runtime_sees_the_os_threads_value() {
    NUMBER.set(40);
    let mut reader = Coroutine::<(), (), u32>::new(|_, ()| NUMBER.get());
    assert_eq!(reader.resume(()), CoroutineResult::Return(40));
}

greenweave::green_local! {
    static FIRST: RefCell<Option<UsesSecond>> = const { RefCell::new(None) };
    static SECOND: RefCell<Option<UsesFirst>> = const { RefCell::new(None) };
}

/// In `FIRST`: its destructor looks at `SECOND`.
struct UsesSecond;

impl Drop for UsesSecond {
    fn drop(&mut self) {
        let second = SECOND.try_with(|second| second.borrow().is_some());
        note(format!("FIRST dropped, SECOND: {second:?}"));
    }
}

/// In `SECOND`: its destructor looks at `FIRST`, and at itself.
struct UsesFirst;

impl Drop for UsesFirst {
    fn drop(&mut self) {
        let first = FIRST.try_with(|first| first.borrow().is_some());
        let itself = SECOND.try_with(|_| ());
        note(format!(
            "SECOND dropped, FIRST: {first:?}, itself: {itself:?}"
        ));
    }
}

#[test]
fn values_are_dropped_last_initialised_first_and_a_dropped_key_gives_an_access_error() {
    greenweave::run(|| {
        greenweave::spawn(|| {
            FIRST.set(Some(UsesSecond));
            SECOND.set(Some(UsesFirst));
        })
        .join()
        .unwrap();
    });
    assert_eq!(
        events(),
        [
            "SECOND dropped, FIRST: Ok(true), itself: Err(AccessError { .. })",
            "FIRST dropped, SECOND: Err(AccessError { .. })",
        ]
    );
}

greenweave::green_local! {
    static MAKES_ANOTHER: RefCell<Option<MakesAnother>> = const { RefCell::new(None) };
    static MADE_LATE: RefCell<Option<Noted>> = const { RefCell::new(None) };
}

/// Initialises `MADE_LATE` from its destructor, and tries to make itself again.
struct MakesAnother;

impl Drop for MakesAnother {
    fn drop(&mut self) {
        MADE_LATE.set(Some(Noted("made late")));
        let again = MAKES_ANOTHER.try_with(|slot| slot.replace(Some(MakesAnother)));
        note(format!(
            "made another; making itself again: {}",
            again.is_ok()
        ));
    }
}

#[test]
fn a_destructor_may_initialise_another_key_which_is_then_dropped_and_destruction_ends() {
    greenweave::run(|| {
        greenweave::spawn(|| MAKES_ANOTHER.set(Some(MakesAnother)))
            .join()
            .unwrap();
        note("joined");
    });
    assert_eq!(
        events(),
        [
            "made another; making itself again: false",
            "dropped made late",
            "joined"
        ]
    );
}

#[test]
fn with_panics_on_a_destroyed_key_saying_to_use_try_with() {
    struct UsesItself;
    impl Drop for UsesItself {
        fn drop(&mut self) {
            let error = catch_unwind(|| ITSELF.with(|_| ())).unwrap_err();
            let message = error.downcast_ref::<String>().unwrap();
            note(message.clone());
        }
    }
    greenweave::green_local! {
        static ITSELF: RefCell<Option<UsesItself>> = const { RefCell::new(None) };
    }
    greenweave::run(|| {
        greenweave::spawn(|| ITSELF.set(Some(UsesItself)))
            .join()
            .unwrap()
    });
    let events = events();
    assert_eq!(events.len(), 1);
    assert!(
        events[0].contains("during or after destruction") && events[0].contains("try_with"),
        "{events:?}"
    );
}

#[test]
fn set_initialises_the_value_without_running_the_initialiser() {
    fn never() -> Cell<u32> {
        note("initialiser ran");
        Cell::new(0)
    }
    greenweave::green_local! {
        static SET_FIRST: Cell<u32> = never();
        static SET_FIRST_REF: RefCell<Vec<u32>> = { note("initialiser ran"); RefCell::new(Vec::new()) };
    }
    let seen = greenweave::run(|| {
        SET_FIRST.set(1);
        SET_FIRST_REF.set(vec![2]);
        (SET_FIRST.get(), SET_FIRST_REF.take())
    });
    assert_eq!(seen, (1, vec![2]));
    assert!(events().is_empty());
}

#[test]
fn cell_and_refcell_methods_behave_as_stds() {
    greenweave::green_local! {
        static C: Cell<u32> = const { Cell::new(1) };
        static R: RefCell<Vec<u32>> = RefCell::new(vec![1]);
    }
    greenweave::run(|| {
        assert_eq!(C.replace(2), 1);
        assert_eq!(C.take(), 2);
        assert_eq!(C.get(), 0);
        R.with_borrow_mut(|v| v.push(2));
        assert_eq!(R.with_borrow(|v| v.clone()), [1, 2]);
        assert_eq!(R.replace(vec![3]), [1, 2]);
        assert_eq!(R.take(), [3]);
        R.set(vec![4]);
        assert_eq!(R.with_borrow(Vec::len), 1);
        // A mutable borrow held across `with_borrow` panics, as RefCell does.
        let conflict = R.with_borrow_mut(|_| catch_unwind(|| R.with_borrow(|_| ())));
        assert!(conflict.is_err());
    });
}

/// Its initialiser uses the key itself once (a guard stops the recursion).
fn nested_init() -> Cell<u32> {
    thread_local! {
        static NESTED: Cell<bool> = const { Cell::new(false) };
    }
    if NESTED.replace(true) {
        return Cell::new(1); // the nested use's value
    }
    let nested_saw = REENTERED.get();
    NESTED.set(false);
    Cell::new(100 + nested_saw) // the outer use's value
}

greenweave::green_local! {
    static REENTERED: Cell<u32> = nested_init();
}

#[test]
fn an_initialiser_that_uses_its_own_key_keeps_the_value_made_first() {
    let seen = greenweave::run(|| REENTERED.get());
    assert_eq!(seen, 1);
}

greenweave::green_local! {
    static TEXT: RefCell<String> = RefCell::new(String::from("the green thread's text"));
    static TEXT_DROPS: RefCell<Option<Noted>> = const { RefCell::new(None) };
}

/// A coroutine suspended inside `with` holds a reference to the value: the value must outlive
/// the green thread that resumed it, so it is leaked rather than dropped.
#[test]
fn a_value_borrowed_by_a_coroutine_that_outlives_its_green_thread_is_leaked_not_freed() {
    let text = greenweave::run(|| {
        let borrower = greenweave::spawn(|| {
            TEXT_DROPS.set(Some(Noted("borrowed table")));
            let mut coroutine = Coroutine::new(|yielder, ()| {
                TEXT.with(|text| {
                    yielder.suspend(());
                    text.borrow().clone()
                })
            });
            assert_eq!(coroutine.resume(()), CoroutineResult::Yield(()));
            coroutine // suspended inside `with`
        });
        let mut coroutine = borrower.join().unwrap();
        // Overwrite what a freed value's memory might be reused for.
        let _noise: Vec<String> = (0..64).map(|i| format!("noise {i:032}")).collect();
        match coroutine.resume(()) {
            CoroutineResult::Return(text) => text,
            CoroutineResult::Yield(()) => unreachable!(),
        }
    });
    assert_eq!(text, "the green thread's text");
    assert!(
        events().is_empty(),
        "nothing of that green thread's was dropped"
    );
}

/// A green thread that keeps catching its cancellation at shutdown has its stack leaked: its
/// values are leaked with it, never dropped.
#[test]
fn values_of_a_green_thread_whose_stack_is_leaked_at_shutdown_are_never_dropped() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        greenweave::run(|| {
            drop(greenweave::spawn(|| {
                NOTED.set(Some(Noted("stubborn one's")));
                loop {
                    let _ = catch_unwind(|| thread::sleep(Duration::from_secs(3600)));
                }
            }));
            thread::yield_now();
        });
        done.send(events()).unwrap();
    });
    let events = finished
        .recv_timeout(Duration::from_secs(120))
        .expect("run returned");
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn a_destructor_that_panics_aborts_naming_the_green_thread() {
    let outcome = run_in_child(
        "a_destructor_that_panics_aborts_naming_the_green_thread",
        || {
            struct Panics;
            impl Drop for Panics {
                fn drop(&mut self) {
                    panic!("destructor on purpose");
                }
            }
            greenweave::green_local! {
                static PANICS: RefCell<Option<Panics>> = const { RefCell::new(None) };
            }
            greenweave::run(|| {
                greenweave::thread::Builder::new()
                    .name("doomed".into())
                    .spawn(|| PANICS.set(Some(Panics)))
                    .unwrap()
                    .join()
                    .unwrap();
            });
            std::process::exit(0);
        },
    );
    assert_aborted_saying(
        &outcome,
        "a green_local! value's destructor panicked in green thread 'doomed'",
    );
    assert!(outcome.stderr.contains("destructor on purpose"));
}

greenweave::green_local! {
    /// Documented, public, several at once, with and without `const`.
    pub static PUBLIC: Cell<u8> = const { Cell::new(1) };
    #[allow(dead_code)]
    pub(crate) static CRATE_VISIBLE: RefCell<String> = RefCell::new("two".into());
    static PLAIN: u64 = 3
}

#[test]
fn the_macro_takes_std_thread_locals_syntax() {
    let seen = greenweave::run(|| {
        (
            PUBLIC.get(),
            CRATE_VISIBLE.with_borrow(String::clone),
            PLAIN.with(|plain| *plain),
        )
    });
    assert_eq!(seen, (1, "two".to_owned(), 3));
}

/// A key is usable from many OS threads at once (each with its own runtime or none): the index
/// it takes on first use is the same for all.
#[test]
fn a_key_first_used_on_several_os_threads_at_once_keeps_one_value_per_green_thread() {
    greenweave::green_local! {
        static RACED: Cell<usize> = const { Cell::new(0) };
    }
    let threads: Vec<_> = (0..4)
        .map(|n| {
            std::thread::spawn(move || {
                greenweave::run(move || {
                    RACED.set(n);
                    let inner = greenweave::spawn(move || {
                        RACED.set(n + 100);
                        RACED.get()
                    });
                    (RACED.get(), inner.join().unwrap())
                })
            })
        })
        .collect();
    let seen: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(seen, [(0, 100), (1, 101), (2, 102), (3, 103)]);
}
