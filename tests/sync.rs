//! The green synchronisation primitives seen from outside: `Mutex`, `RwLock`, `Condvar`,
//! `Semaphore`, `Event`, `Barrier`, `WaitGroup`, `join_all`, `Group` and `Pool`.
//!
//! Pinned down for each: waiters are served in the order they arrived (every test records the
//! order in which green threads get through); a green thread that arrives while a released
//! resource is on its way to a waiter cannot overtake it; poisoning behaves as std's; a
//! `timeout` or a cancellation takes a waiter out of line (its destructors run, and nothing is
//! handed to it afterwards); a lock-order deadlock is reported by the runtime. A model test runs
//! 100,000 random operations over producer and consumer green threads and checks that every
//! waiter gets through (no lost wake-up) and that the final state is the model's.
//!
//! No test asserts that anything is fast: durations appear only as lower bounds.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::TryLockError;
use std::time::{Duration, Instant};

use greenweave::sync::{
    Barrier, Condvar, Event, Group, Mutex, Pool, RwLock, Semaphore, WaitGroup, join_all,
};
use greenweave::thread::{self, Builder, JoinHandle};
use greenweave::time::timeout;

mod common;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A shared, ordered record of events.
type Log<T> = Rc<RefCell<Vec<T>>>;

fn log<T>() -> Log<T> {
    Rc::new(RefCell::new(Vec::new()))
}

fn record<T>(log: &Log<T>, event: T) {
    log.borrow_mut().push(event);
}

fn taken<T: Clone>(log: &Log<T>) -> Vec<T> {
    log.borrow().clone()
}

/// Counts its own drops in a shared counter: shows that an unwound body's destructors ran.
struct Tally(Rc<Cell<usize>>);

impl Drop for Tally {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
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

/// Yields `n` times: lets a green thread arrive at a primitive after those spawned with a
/// smaller `n`, whatever the order in which they were spawned.
fn yield_times(n: usize) {
    for _ in 0..n {
        thread::yield_now();
    }
}

/// Lets every ready green thread run until all of them are parked (or done): each yield lets
/// the whole ready queue run once, and these tests' green threads park within a few turns.
fn settle() {
    yield_times(32);
}

/// Spawns `count` green threads, the `i`th of which yields `count - i` times and then runs
/// `body(i)`: they reach `body` in the reverse of the order they were spawned in, so a
/// recorded order that matches arrival cannot be an accident of spawn order.
fn spawn_in_reverse_arrival<T: 'static>(
    count: usize,
    body: impl Fn(usize) -> T + Clone + 'static,
) -> Vec<JoinHandle<T>> {
    (0..count)
        .map(|i| {
            let body = body.clone();
            greenweave::spawn(move || {
                yield_times(count - i);
                body(i)
            })
        })
        .collect()
}

/// The order in which [`spawn_in_reverse_arrival`]'s green threads arrive.
fn reverse_arrival(count: usize) -> Vec<usize> {
    (0..count).rev().collect()
}

fn join_every<T>(handles: Vec<JoinHandle<T>>) -> Vec<T> {
    handles
        .into_iter()
        .map(|handle| handle.join().expect("the green thread finished normally"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Mutex
// ---------------------------------------------------------------------------------------------

#[test]
fn mutex_waiters_acquire_in_arrival_order() {
    greenweave::run(|| {
        let mutex = Rc::new(Mutex::new(()));
        let order = log();
        let guard = mutex.lock().unwrap();
        let waiters = spawn_in_reverse_arrival(8, {
            let (mutex, order) = (mutex.clone(), order.clone());
            move |i| {
                let _guard = mutex.lock().unwrap();
                record(&order, i);
                thread::yield_now(); // held across a park: the others stay queued
            }
        });
        settle();
        drop(guard);
        join_every(waiters);
        assert_eq!(taken(&order), reverse_arrival(8));
    });
}

#[test]
fn an_unlocked_mutex_goes_to_its_first_waiter_not_to_a_green_thread_that_arrives_meanwhile() {
    greenweave::run(|| {
        let mutex = Rc::new(Mutex::new(()));
        let order = log();
        let guard = mutex.lock().unwrap();
        let waiter = {
            let (mutex, order) = (mutex.clone(), order.clone());
            greenweave::spawn(move || {
                let _guard = mutex.lock().unwrap();
                record(&order, "waiter");
            })
        };
        settle();
        drop(guard);
        // The lock now belongs to the waiter, which has not run yet: not even the green thread
        // that just unlocked can take it back.
        assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
        let _again = mutex.lock().unwrap();
        record(&order, "unlocker");
        assert!(waiter.is_finished());
        assert_eq!(taken(&order), ["waiter", "unlocker"]);
    });
}

#[test]
fn a_mutex_held_across_sleeps_excludes_every_other_green_thread() {
    greenweave::run(|| {
        let mutex = Rc::new(Mutex::new(0u32));
        let inside = Rc::new(Cell::new(false));
        let workers: Vec<_> = (0..6)
            .map(|_| {
                let (mutex, inside) = (mutex.clone(), inside.clone());
                greenweave::spawn(move || {
                    for _ in 0..3 {
                        let mut n = mutex.lock().unwrap();
                        assert!(!inside.replace(true), "two holders at once");
                        let seen = *n;
                        thread::sleep(Duration::from_micros(200));
                        *n = seen + 1;
                        inside.set(false);
                    }
                })
            })
            .collect();
        join_every(workers);
        assert_eq!(*mutex.lock().unwrap(), 18);
    });
}

#[test]
fn a_panic_while_holding_a_mutex_poisons_it_as_std_does() {
    greenweave::run(|| {
        let mutex = Rc::new(Mutex::new(vec![1]));
        let holder = mutex.clone();
        let result = greenweave::spawn(move || {
            let mut guard = holder.lock().unwrap();
            guard.push(2);
            panic!("while holding the lock");
        })
        .join();
        assert_eq!(
            result.unwrap_err().panic_message(),
            Some("while holding the lock")
        );
        assert!(mutex.is_poisoned());

        // lock: Err, but the lock is held and the guard inside gives the value.
        let poisoned = mutex.lock().unwrap_err();
        let mut guard = poisoned.into_inner();
        assert_eq!(*guard, [1, 2]);
        guard.push(3);
        assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
        drop(guard);

        // try_lock: Poisoned, with the guard.
        match mutex.try_lock() {
            Err(TryLockError::Poisoned(poisoned)) => assert_eq!(*poisoned.into_inner(), [1, 2, 3]),
            other => panic!("expected Poisoned, got {:?}", other.map(|_| ())),
        }
        mutex.clear_poison();
        assert!(!mutex.is_poisoned());
        assert_eq!(*mutex.lock().unwrap(), [1, 2, 3]);

        // A panic after the guard is gone poisons nothing.
        let holder = mutex.clone();
        let _ = greenweave::spawn(move || {
            drop(holder.lock().unwrap());
            panic!("after unlocking");
        })
        .join();
        assert!(!mutex.is_poisoned());
    });
}

#[test]
fn a_poisoned_mutex_returns_the_value_as_an_error_from_into_inner_and_get_mut() {
    let mut mutex = greenweave::run(|| {
        let mutex = Rc::new(Mutex::new(5));
        let holder = mutex.clone();
        let _ = greenweave::spawn(move || {
            let _guard = holder.lock().unwrap();
            panic!("poison");
        })
        .join();
        Rc::try_unwrap(mutex).expect("the only reference left")
    });
    assert_eq!(*mutex.get_mut().unwrap_err().into_inner(), 5);
    assert_eq!(mutex.into_inner().unwrap_err().into_inner(), 5);
}

#[test]
fn a_guard_taken_while_already_unwinding_does_not_poison_the_mutex() {
    // As std: only an unwind that starts while the lock is held poisons it, not a destructor
    // that takes the lock during an unwind that had started before.
    struct LocksOnDrop(Rc<Mutex<u32>>);
    impl Drop for LocksOnDrop {
        fn drop(&mut self) {
            *self.0.lock().unwrap() += 1;
        }
    }
    greenweave::run(|| {
        let mutex = Rc::new(Mutex::new(0));
        let on_drop = LocksOnDrop(mutex.clone());
        let result = greenweave::spawn(move || {
            let _on_drop = on_drop;
            panic!("unwinding through a destructor that locks");
        })
        .join();
        assert!(result.is_err());
        assert!(!mutex.is_poisoned());
        assert_eq!(*mutex.lock().unwrap(), 1);
    });
}

#[test]
fn a_timeout_takes_a_mutex_waiter_out_of_line_and_runs_its_destructors() {
    greenweave::run(|| {
        let mutex = Rc::new(Mutex::new(Vec::new()));
        let drops = Rc::new(Cell::new(0));
        let guard = mutex.lock().unwrap();
        let impatient = {
            let (mutex, drops) = (mutex.clone(), drops.clone());
            greenweave::spawn(move || {
                timeout(Duration::from_millis(5), || {
                    let _tally = Tally(drops);
                    mutex.lock().unwrap().push("impatient");
                })
            })
        };
        let patient = {
            let mutex = mutex.clone();
            greenweave::spawn(move || {
                thread::yield_now(); // queues behind the impatient one
                mutex.lock().unwrap().push("patient");
            })
        };
        assert!(impatient.join().unwrap().is_err());
        assert_eq!(drops.get(), 1);
        drop(guard); // goes to the patient waiter, not the one that left
        patient.join().unwrap();
        assert!(!mutex.is_poisoned());
        assert_eq!(*mutex.lock().unwrap(), ["patient"]);
        assert!(mutex.try_lock().is_ok());
    });
}

#[test]
fn a_cancelled_mutex_waiter_leaves_the_queue_and_the_lock_goes_to_the_next() {
    greenweave::run(|| {
        let mutex = Rc::new(Mutex::new(Vec::new()));
        let guard = mutex.lock().unwrap();
        let waiters: Vec<_> = ["first", "second"]
            .into_iter()
            .map(|name| {
                let mutex = mutex.clone();
                greenweave::spawn(move || mutex.lock().unwrap().push(name))
            })
            .collect();
        settle();
        waiters[0].cancel();
        drop(guard);
        let mut results = waiters.into_iter().map(JoinHandle::join);
        assert!(results.next().unwrap().unwrap_err().is_cancelled());
        results.next().unwrap().unwrap();
        assert_eq!(*mutex.lock().unwrap(), ["second"]);
    });
}

#[test]
fn a_mutex_granted_to_a_waiter_cancelled_before_it_ran_passes_to_the_next() {
    greenweave::run(|| {
        let mutex = Rc::new(Mutex::new(Vec::new()));
        let guard = mutex.lock().unwrap();
        let waiters: Vec<_> = ["first", "second"]
            .into_iter()
            .map(|name| {
                let mutex = mutex.clone();
                greenweave::spawn(move || mutex.lock().unwrap().push(name))
            })
            .collect();
        settle();
        // Cancelled (runnable, not yet run), then handed the lock: it unwinds and hands on.
        waiters[0].cancel();
        drop(guard);
        assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
        let mut results = waiters.into_iter().map(JoinHandle::join);
        assert!(results.next().unwrap().unwrap_err().is_cancelled());
        results.next().unwrap().unwrap();
        assert_eq!(*mutex.lock().unwrap(), ["second"]);
        assert!(!mutex.is_poisoned());
    });
}

#[test]
fn two_green_threads_locking_two_mutexes_in_opposite_order_are_reported_as_a_deadlock() {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        greenweave::run(|| {
            let a = Rc::new(Mutex::new(()));
            let b = Rc::new(Mutex::new(()));
            let lock_both = |name: &str, first: Rc<Mutex<()>>, second: Rc<Mutex<()>>| {
                Builder::new()
                    .name(name.into())
                    .spawn(move || {
                        let _first = first.lock().unwrap();
                        thread::yield_now(); // the other takes its first lock meanwhile
                        let _second = second.lock().unwrap();
                    })
                    .unwrap()
            };
            let alpha = lock_both("alpha", a.clone(), b.clone());
            let beta = lock_both("beta", b, a);
            let _ = alpha.join();
            let _ = beta.join();
        })
    }));
    let message = panic_message(&*outcome.expect_err("run must report the deadlock"));
    assert!(message.contains("deadlock"), "{message}");
    assert!(message.contains("'alpha'"), "{message}");
    assert!(message.contains("'beta'"), "{message}");
    assert!(message.contains("Mutex::lock"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// RwLock
// ---------------------------------------------------------------------------------------------

#[test]
fn rwlock_readers_share_and_a_writer_waits_for_all_of_them() {
    greenweave::run(|| {
        let lock = Rc::new(RwLock::new(0));
        let (readers_inside, most_readers) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
        let readers: Vec<_> = (0..5)
            .map(|_| {
                let (lock, inside, most) =
                    (lock.clone(), readers_inside.clone(), most_readers.clone());
                greenweave::spawn(move || {
                    let guard = lock.read().unwrap();
                    inside.set(inside.get() + 1);
                    most.set(most.get().max(inside.get()));
                    yield_times(3);
                    inside.set(inside.get() - 1);
                    *guard
                })
            })
            .collect();
        thread::yield_now();
        *lock.write().unwrap() += 1;
        assert_eq!(readers_inside.get(), 0);
        assert_eq!(join_every(readers), [0; 5]);
        assert_eq!(most_readers.get(), 5);
        assert_eq!(*lock.read().unwrap(), 1);
    });
}

#[test]
fn rwlock_is_fifo_and_a_waiting_writer_holds_back_later_readers() {
    greenweave::run(|| {
        let lock = Rc::new(RwLock::new(()));
        let order = log();
        let first_reader = lock.read().unwrap();
        // Arrive in this order while main reads: W1, R2, W3, R4, R5.
        let plan = [
            ("W1", true),
            ("R2", false),
            ("W3", true),
            ("R4", false),
            ("R5", false),
        ];
        let waiters: Vec<_> = plan
            .into_iter()
            .enumerate()
            .map(|(i, (name, writes))| {
                let (lock, order) = (lock.clone(), order.clone());
                greenweave::spawn(move || {
                    yield_times(i);
                    if writes {
                        let _guard = lock.write().unwrap();
                        record(&order, format!("{name} in"));
                        thread::yield_now();
                        record(&order, format!("{name} out"));
                    } else {
                        let _guard = lock.read().unwrap();
                        record(&order, format!("{name} in"));
                        yield_times(2);
                        record(&order, format!("{name} out"));
                    }
                })
            })
            .collect();
        settle();
        // A writer is waiting, so a new reader may not join the one inside.
        assert!(matches!(lock.try_read(), Err(TryLockError::WouldBlock)));
        assert!(matches!(lock.try_write(), Err(TryLockError::WouldBlock)));
        drop(first_reader);
        join_every(waiters);
        assert_eq!(
            taken(&order),
            [
                "W1 in", "W1 out", "R2 in", "R2 out", "W3 in", "W3 out", "R4 in", "R5 in",
                "R4 out", "R5 out"
            ]
        );
    });
}

#[test]
fn a_writer_that_times_out_lets_the_readers_queued_behind_it_in() {
    greenweave::run(|| {
        let lock = Rc::new(RwLock::new(()));
        let reading = lock.read().unwrap();
        let writer = {
            let lock = lock.clone();
            greenweave::spawn(move || timeout(Duration::from_millis(5), || drop(lock.write())))
        };
        let reader = {
            let lock = lock.clone();
            greenweave::spawn(move || {
                thread::yield_now(); // behind the writer
                drop(lock.read().unwrap());
                "read"
            })
        };
        assert!(writer.join().unwrap().is_err());
        // The main green thread still reads; the queued reader needed only the writer gone.
        assert_eq!(reader.join().unwrap(), "read");
        drop(reading);
        assert!(lock.try_write().is_ok());
    });
}

#[test]
fn a_panicking_writer_poisons_an_rwlock_and_a_panicking_reader_does_not() {
    greenweave::run(|| {
        let lock = Rc::new(RwLock::new(1));
        let reader = lock.clone();
        let _ = greenweave::spawn(move || {
            let _guard = reader.read().unwrap();
            panic!("while reading");
        })
        .join();
        assert!(!lock.is_poisoned());

        let writer = lock.clone();
        let _ = greenweave::spawn(move || {
            let mut guard = writer.write().unwrap();
            *guard = 2;
            panic!("while writing");
        })
        .join();
        assert!(lock.is_poisoned());
        assert_eq!(*lock.read().unwrap_err().into_inner(), 2);
        assert_eq!(*lock.write().unwrap_err().into_inner(), 2);
        assert!(matches!(lock.try_read(), Err(TryLockError::Poisoned(_))));
        lock.clear_poison();
        assert!(lock.write().is_ok());
    });
}

/// A value whose `Debug` reaches the lock that holds it (through a weak back-reference: a
/// cycle) and records whether a writer could get in while it is being formatted.
struct ReachesItsOwnLock {
    lock: RefCell<std::rc::Weak<RwLock<ReachesItsOwnLock>>>,
    writer_got_in: Cell<Option<bool>>,
}

impl std::fmt::Debug for ReachesItsOwnLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lock = self.lock.borrow().upgrade().expect("the lock is alive");
        self.writer_got_in.set(Some(lock.try_write().is_ok()));
        f.write_str("ReachesItsOwnLock")
    }
}

#[test]
fn rwlock_debug_formats_the_value_under_a_read_lock_that_keeps_writers_out() {
    greenweave::run(|| {
        let lock = Rc::new(RwLock::new(ReachesItsOwnLock {
            lock: RefCell::new(std::rc::Weak::new()),
            writer_got_in: Cell::new(None),
        }));
        *lock.read().unwrap().lock.borrow_mut() = Rc::downgrade(&lock);
        let shown = format!("{lock:?}");
        assert_eq!(
            shown,
            "RwLock { data: ReachesItsOwnLock, poisoned: false, .. }"
        );
        // A write lock inside `fmt` would hand out a `&mut` to the value being formatted.
        assert_eq!(lock.read().unwrap().writer_got_in.get(), Some(false));
        // And the read lock is released once formatting is done.
        assert!(lock.try_write().is_ok());
        let writer = lock.write().unwrap();
        assert_eq!(
            format!("{lock:?}"),
            "RwLock { data: <locked>, poisoned: false, .. }"
        );
        drop(writer);
    });
}

// ---------------------------------------------------------------------------------------------
// Condvar
// ---------------------------------------------------------------------------------------------

#[test]
fn condvar_notify_one_wakes_waiters_in_arrival_order() {
    greenweave::run(|| {
        let pair = Rc::new((Mutex::new(()), Condvar::new()));
        let order = log();
        let waiters = spawn_in_reverse_arrival(6, {
            let (pair, order) = (pair.clone(), order.clone());
            move |i| {
                let guard = pair.0.lock().unwrap();
                let _guard = pair.1.wait(guard).unwrap();
                record(&order, i);
            }
        });
        settle();
        for woken in 1..=6 {
            pair.1.notify_one();
            settle();
            assert_eq!(order.borrow().len(), woken, "one notification, one waiter");
        }
        join_every(waiters);
        assert_eq!(taken(&order), reverse_arrival(6));
    });
}

#[test]
fn condvar_notify_all_wakes_every_waiter_and_they_retake_the_mutex_in_arrival_order() {
    greenweave::run(|| {
        let pair = Rc::new((Mutex::new(Vec::new()), Condvar::new()));
        let waiters = spawn_in_reverse_arrival(6, {
            let pair = pair.clone();
            move |i| {
                let guard = pair.0.lock().unwrap();
                let mut guard = pair.1.wait(guard).unwrap();
                guard.push(i);
                thread::yield_now(); // holds the mutex across a park
            }
        });
        settle();
        let guard = pair.0.lock().unwrap();
        pair.1.notify_all();
        settle(); // all woken, all queued on the mutex main holds
        drop(guard);
        join_every(waiters);
        assert_eq!(*pair.0.lock().unwrap(), reverse_arrival(6));
    });
}

#[test]
fn condvar_wait_timeout_times_out_with_the_mutex_held_again() {
    greenweave::run(|| {
        let (mutex, condvar) = (Mutex::new(7), Condvar::new());
        let start = Instant::now();
        let (guard, result) = condvar
            .wait_timeout(mutex.lock().unwrap(), Duration::from_millis(20))
            .unwrap();
        assert!(result.timed_out());
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(*guard, 7);
        assert!(matches!(mutex.try_lock(), Err(TryLockError::WouldBlock)));
        drop(guard);

        let (guard, result) = condvar
            .wait_timeout_while(mutex.lock().unwrap(), Duration::from_millis(5), |n| *n == 7)
            .unwrap();
        assert!(result.timed_out());
        assert_eq!(*guard, 7);
    });
}

#[test]
fn condvar_wait_timeout_notified_in_time_does_not_time_out() {
    greenweave::run(|| {
        let pair = Rc::new((Mutex::new(false), Condvar::new()));
        let notifier = pair.clone();
        greenweave::spawn(move || {
            thread::sleep(Duration::from_millis(1));
            *notifier.0.lock().unwrap() = true;
            notifier.1.notify_one();
        });
        let (guard, result) = pair
            .1
            .wait_timeout_while(pair.0.lock().unwrap(), Duration::from_secs(60), |ready| {
                !*ready
            })
            .unwrap();
        assert!(*guard);
        assert!(!result.timed_out());
    });
}

#[test]
fn condvar_wait_while_returns_once_the_condition_fails() {
    greenweave::run(|| {
        let pair = Rc::new((Mutex::new(0), Condvar::new()));
        for _ in 0..5 {
            let pair = pair.clone();
            greenweave::spawn(move || {
                *pair.0.lock().unwrap() += 1;
                pair.1.notify_one();
            });
        }
        let count = pair
            .1
            .wait_while(pair.0.lock().unwrap(), |n| *n < 5)
            .unwrap();
        assert_eq!(*count, 5);
    });
}

#[test]
fn a_condvar_wait_returns_the_poison_of_a_holder_that_panicked_meanwhile() {
    greenweave::run(|| {
        let pair = Rc::new((Mutex::new(0), Condvar::new()));
        let waiter = {
            let pair = pair.clone();
            greenweave::spawn(move || {
                let guard = pair.0.lock().unwrap();
                let guard = pair.1.wait(guard).unwrap_err().into_inner();
                *guard
            })
        };
        settle();
        let panicker = pair.clone();
        let _ = greenweave::spawn(move || {
            let mut guard = panicker.0.lock().unwrap();
            *guard = 9;
            panicker.1.notify_one();
            panic!("after notifying");
        })
        .join();
        assert_eq!(waiter.join().unwrap(), 9);
    });
}

#[test]
fn a_timeout_ends_a_condvar_wait_without_the_mutex_and_runs_the_destructors() {
    greenweave::run(|| {
        let pair = Rc::new((Mutex::new(()), Condvar::new()));
        let drops = Rc::new(Cell::new(0));
        let timed = {
            let (pair, drops) = (pair.clone(), drops.clone());
            greenweave::spawn(move || {
                timeout(Duration::from_millis(5), || {
                    let _tally = Tally(drops);
                    let guard = pair.0.lock().unwrap();
                    // A loop, as every condvar wait should be: the scope's deadline wakes the
                    // wait (spuriously, so a condition met in that turn is seen) and the next
                    // park ends the scope.
                    drop(pair.1.wait_while(guard, |()| true));
                })
            })
        };
        assert!(timed.join().unwrap().is_err());
        assert_eq!(drops.get(), 1);
        assert!(pair.0.try_lock().is_ok(), "the mutex was left unlocked");
        assert!(!pair.0.is_poisoned());
        // The stale wait does not swallow a later notification.
        let later = {
            let pair = pair.clone();
            greenweave::spawn(move || drop(pair.1.wait(pair.0.lock().unwrap())))
        };
        settle();
        pair.1.notify_one();
        later.join().unwrap();
    });
}

#[test]
fn a_notified_condvar_waiter_cancelled_while_retaking_the_mutex_passes_the_notification_on() {
    greenweave::run(|| {
        let pair = Rc::new((Mutex::new(Vec::new()), Condvar::new()));
        let waiters: Vec<_> = ["first", "second"]
            .into_iter()
            .map(|name| {
                let pair = pair.clone();
                greenweave::spawn(move || {
                    let guard = pair.0.lock().unwrap();
                    pair.1.wait(guard).unwrap().push(name);
                })
            })
            .collect();
        settle();
        let guard = pair.0.lock().unwrap();
        pair.1.notify_one(); // reaches "first", which then waits for the mutex main holds
        settle();
        waiters[0].cancel();
        drop(guard);
        let mut results = waiters.into_iter().map(JoinHandle::join);
        assert!(results.next().unwrap().unwrap_err().is_cancelled());
        results.next().unwrap().unwrap();
        assert_eq!(*pair.0.lock().unwrap(), ["second"]);
    });
}

// ---------------------------------------------------------------------------------------------
// Semaphore
// ---------------------------------------------------------------------------------------------

#[test]
fn semaphore_waiters_get_permits_in_arrival_order_and_latecomers_cannot_take_them() {
    greenweave::run(|| {
        let semaphore = Rc::new(Semaphore::new(0));
        let order = log();
        let waiters = spawn_in_reverse_arrival(8, {
            let (semaphore, order) = (semaphore.clone(), order.clone());
            move |i| {
                let _permit = semaphore.acquire();
                record(&order, i);
                thread::yield_now();
            }
        });
        settle();
        semaphore.add_permits(2);
        // Both handed to waiters already: none left for a latecomer.
        assert_eq!(semaphore.available_permits(), 0);
        assert!(semaphore.try_acquire().is_none());
        join_every(waiters);
        assert_eq!(taken(&order), reverse_arrival(8));
        assert_eq!(semaphore.available_permits(), 2);
    });
}

#[test]
fn semaphore_permits_never_exceed_the_count_under_many_green_threads() {
    const PERMITS: usize = 5;
    greenweave::run(|| {
        let semaphore = Rc::new(Semaphore::new(PERMITS));
        let (inside, most) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
        let workers: Vec<_> = (0..300)
            .map(|i| {
                let (semaphore, inside, most) = (semaphore.clone(), inside.clone(), most.clone());
                greenweave::spawn(move || {
                    for round in 0..3 {
                        let _permit = semaphore.acquire();
                        inside.set(inside.get() + 1);
                        assert!(inside.get() <= PERMITS, "{} holders", inside.get());
                        most.set(most.get().max(inside.get()));
                        yield_times((i + round) % 4);
                        inside.set(inside.get() - 1);
                    }
                })
            })
            .collect();
        join_every(workers);
        assert_eq!(most.get(), PERMITS);
        assert_eq!(semaphore.available_permits(), PERMITS);
    });
}

#[test]
fn semaphore_acquire_timeout_gives_up_and_leaves_the_queue() {
    greenweave::run(|| {
        let semaphore = Rc::new(Semaphore::new(1));
        let held = semaphore.acquire();
        let start = Instant::now();
        assert!(
            semaphore
                .acquire_timeout(Duration::from_millis(10))
                .is_none()
        );
        assert!(start.elapsed() >= Duration::from_millis(10));
        drop(held);
        assert_eq!(
            semaphore.available_permits(),
            1,
            "nothing was handed to the leaver"
        );
        let permit = semaphore.acquire_timeout(Duration::from_millis(10));
        assert!(permit.is_some());
    });
}

#[test]
fn a_timeout_interrupts_a_semaphore_acquire_and_runs_the_destructors() {
    greenweave::run(|| {
        let semaphore = Rc::new(Semaphore::new(1));
        let drops = Rc::new(Cell::new(0));
        let held = semaphore.acquire();
        let timed = {
            let (semaphore, drops) = (semaphore.clone(), drops.clone());
            greenweave::spawn(move || {
                timeout(Duration::from_millis(5), || {
                    let _tally = Tally(drops);
                    semaphore.acquire().forget();
                })
            })
        };
        assert!(timed.join().unwrap().is_err());
        assert_eq!(drops.get(), 1);
        drop(held);
        assert_eq!(semaphore.available_permits(), 1);
    });
}

// ---------------------------------------------------------------------------------------------
// Event
// ---------------------------------------------------------------------------------------------

#[test]
fn event_set_wakes_every_waiter_in_arrival_order() {
    greenweave::run(|| {
        let event = Rc::new(Event::new());
        let order = log();
        let waiters = spawn_in_reverse_arrival(10, {
            let (event, order) = (event.clone(), order.clone());
            move |i| {
                event.wait();
                record(&order, i);
            }
        });
        settle();
        assert!(order.borrow().is_empty());
        event.set();
        join_every(waiters);
        assert_eq!(taken(&order), reverse_arrival(10));
        event.wait(); // set: returns at once
    });
}

#[test]
fn event_waiters_woken_by_set_go_on_even_if_it_is_cleared_before_they_run() {
    greenweave::run(|| {
        let event = Rc::new(Event::new());
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let event = event.clone();
                greenweave::spawn(move || event.wait_timeout(Duration::from_secs(60)))
            })
            .collect();
        settle();
        event.set();
        event.clear();
        assert_eq!(join_every(waiters), [true; 3]);
        assert!(!event.is_set());
    });
}

#[test]
fn event_wait_timeout_returns_false_when_nobody_sets_it() {
    greenweave::run(|| {
        let event = Event::new();
        let start = Instant::now();
        assert!(!event.wait_timeout(Duration::from_millis(10)));
        assert!(start.elapsed() >= Duration::from_millis(10));
        event.set();
        assert!(event.wait_timeout(Duration::ZERO));
    });
}

// ---------------------------------------------------------------------------------------------
// Barrier and WaitGroup
// ---------------------------------------------------------------------------------------------

#[test]
fn barrier_releases_all_at_n_with_exactly_one_leader_per_round() {
    const PARTIES: usize = 5;
    const ROUNDS: usize = 4;
    greenweave::run(|| {
        let barrier = Rc::new(Barrier::new(PARTIES));
        let arrived = Rc::new(RefCell::new(vec![0; ROUNDS]));
        let leaders = Rc::new(RefCell::new(vec![0; ROUNDS]));
        let parties: Vec<_> = (0..PARTIES)
            .map(|i| {
                let (barrier, arrived, leaders) =
                    (barrier.clone(), arrived.clone(), leaders.clone());
                greenweave::spawn(move || {
                    for round in 0..ROUNDS {
                        yield_times((i * 3 + round) % 5);
                        arrived.borrow_mut()[round] += 1;
                        let result = barrier.wait();
                        // Nobody gets through before everyone has arrived.
                        assert_eq!(arrived.borrow()[round], PARTIES);
                        if result.is_leader() {
                            leaders.borrow_mut()[round] += 1;
                        }
                    }
                })
            })
            .collect();
        join_every(parties);
        assert_eq!(*leaders.borrow(), [1; ROUNDS]);
    });
}

#[test]
fn barrier_releases_its_waiters_in_arrival_order_after_the_leader() {
    greenweave::run(|| {
        let barrier = Rc::new(Barrier::new(6));
        let order = log();
        let waiters = spawn_in_reverse_arrival(5, {
            let (barrier, order) = (barrier.clone(), order.clone());
            move |i| {
                assert!(!barrier.wait().is_leader());
                record(&order, i);
            }
        });
        settle();
        assert!(barrier.wait().is_leader());
        record(&order, 99);
        join_every(waiters);
        let mut expected = vec![99];
        expected.extend(reverse_arrival(5));
        assert_eq!(taken(&order), expected);
    });
}

#[test]
fn a_barrier_waiter_that_times_out_no_longer_counts_towards_the_round() {
    greenweave::run(|| {
        let barrier = Rc::new(Barrier::new(2));
        let leaver = barrier.clone();
        let gave_up =
            greenweave::spawn(move || timeout(Duration::from_millis(2), || leaver.wait()).is_err());
        assert!(gave_up.join().unwrap());
        // Had it still counted, main alone would complete the round.
        let other = barrier.clone();
        let partner = greenweave::spawn(move || other.wait().is_leader());
        let main_leads = barrier.wait().is_leader();
        assert!(main_leads != partner.join().unwrap());
    });
}

#[test]
fn wait_group_wakes_its_waiters_in_arrival_order_when_the_count_reaches_zero() {
    greenweave::run(|| {
        let group = Rc::new(WaitGroup::new());
        let order = log();
        group.add(3);
        let waiters = spawn_in_reverse_arrival(4, {
            let (group, order) = (group.clone(), order.clone());
            move |i| {
                group.wait();
                record(&order, i);
            }
        });
        settle();
        group.done();
        group.done();
        settle();
        assert!(order.borrow().is_empty(), "count 1: nobody goes on");
        assert!(!group.wait_timeout(Duration::from_millis(1)));
        group.done();
        join_every(waiters);
        assert_eq!(taken(&order), reverse_arrival(4));
        group.wait();
    });
}

#[test]
fn wait_group_done_below_zero_panics_as_gos_does() {
    greenweave::run(|| {
        let group = WaitGroup::new();
        let message = catch_unwind(AssertUnwindSafe(|| group.done())).unwrap_err();
        assert!(panic_message(&*message).contains("more done() calls than jobs added"));
    });
}

// ---------------------------------------------------------------------------------------------
// join_all, Group, Pool
// ---------------------------------------------------------------------------------------------

#[test]
fn join_all_returns_every_result_in_order_including_panics() {
    greenweave::run(|| {
        let results = join_all((0..5u64).map(|i| {
            greenweave::spawn(move || {
                thread::sleep(Duration::from_millis(5 - i));
                if i == 3 {
                    panic!("number three");
                }
                i
            })
        }));
        let summary: Vec<_> = results
            .iter()
            .map(|result| match result {
                Ok(value) => Ok(*value),
                Err(error) => Err(error.panic_message().unwrap().to_owned()),
            })
            .collect();
        assert_eq!(
            summary,
            [Ok(0), Ok(1), Ok(2), Err("number three".into()), Ok(4)]
        );
    });
}

#[test]
fn group_join_waits_for_every_member_however_it_ends() {
    greenweave::run(|| {
        let group = Group::new();
        let finished = Rc::new(Cell::new(0));
        for i in 0..4 {
            let finished = finished.clone();
            group.spawn(move || {
                thread::sleep(Duration::from_millis(i));
                finished.set(finished.get() + 1);
            });
        }
        drop(group.spawn(|| panic!("a member panics")));
        let stuck = group.spawn(|| thread::sleep(Duration::from_secs(3600)));
        assert_eq!(group.len(), 6);
        assert!(!group.join_timeout(Duration::from_millis(10)));
        stuck.cancel();
        group.join();
        assert_eq!(finished.get(), 4);
        assert!(group.is_empty());
    });
}

#[test]
fn group_joiners_are_woken_in_arrival_order() {
    greenweave::run(|| {
        let group = Rc::new(Group::new());
        let order = log();
        let gate = Rc::new(Event::new());
        let member = {
            let gate = gate.clone();
            group.spawn(move || gate.wait())
        };
        let joiners = spawn_in_reverse_arrival(4, {
            let (group, order) = (group.clone(), order.clone());
            move |i| {
                group.join();
                record(&order, i);
            }
        });
        settle();
        gate.set();
        member.join().unwrap();
        join_every(joiners);
        assert_eq!(taken(&order), reverse_arrival(4));
    });
}

#[test]
fn pool_never_runs_more_than_its_size_at_once() {
    const SIZE: usize = 4;
    greenweave::run(|| {
        let pool = Rc::new(Pool::new(SIZE));
        let (running, most, done) = (
            Rc::new(Cell::new(0)),
            Rc::new(Cell::new(0)),
            Rc::new(Cell::new(0)),
        );
        // Two spawners compete for the pool's slots.
        let spawners: Vec<_> = (0..2)
            .map(|s| {
                let (pool, running, most, done) =
                    (pool.clone(), running.clone(), most.clone(), done.clone());
                greenweave::spawn(move || {
                    for i in 0..50 {
                        let (running, most, done) = (running.clone(), most.clone(), done.clone());
                        pool.spawn(move || {
                            running.set(running.get() + 1);
                            assert!(running.get() <= SIZE, "{} running", running.get());
                            most.set(most.get().max(running.get()));
                            if (i + s) % 7 == 0 {
                                thread::sleep(Duration::from_micros(300));
                            } else {
                                yield_times((i + s) % 3);
                            }
                            running.set(running.get() - 1);
                            done.set(done.get() + 1);
                        });
                        assert!(pool.len() <= SIZE);
                    }
                })
            })
            .collect();
        join_every(spawners);
        pool.join();
        assert_eq!(done.get(), 100);
        assert_eq!(most.get(), SIZE);
        assert_eq!(pool.free_count(), SIZE);
    });
}

#[test]
fn pool_spawners_waiting_for_a_slot_get_it_in_arrival_order() {
    greenweave::run(|| {
        let pool = Rc::new(Pool::new(1));
        let order = log();
        let gate = Rc::new(Event::new());
        let blocker = {
            let gate = gate.clone();
            pool.spawn(move || gate.wait())
        };
        let spawners = spawn_in_reverse_arrival(5, {
            let (pool, order) = (pool.clone(), order.clone());
            move |i| {
                let order = order.clone();
                pool.spawn(move || record(&order, i))
            }
        });
        settle();
        assert_eq!((pool.len(), pool.free_count()), (1, 0));
        gate.set();
        blocker.join().unwrap();
        join_every(join_every(spawners));
        pool.join();
        assert_eq!(taken(&order), reverse_arrival(5));
    });
}

#[test]
fn a_pool_member_that_fails_to_spawn_gives_its_slot_back() {
    greenweave::run(|| {
        let pool = Pool::new(1);
        let error = pool
            .spawn_with(Builder::new().stack_size(0), || ())
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!((pool.len(), pool.free_count()), (0, 1));
        pool.spawn(|| ()).join().unwrap();
    });
}

// ---------------------------------------------------------------------------------------------
// Model test: random operations, no lost wake-ups
// ---------------------------------------------------------------------------------------------

mod model {
    //! Six green threads (three producers, three consumers) run random scripts of operations on
    //! one of each primitive. Producers never wait for consumers, so they always finish, and
    //! consumers take exactly as many items as producers make and wait for an event that the
    //! last producer to finish sets for good: every script can run to its end, and one that
    //! does not is a lost wake-up (the runtime then panics with its deadlock report).
    //!
    //! Checked as it runs: mutual exclusion of the mutex and the write lock, reader/writer
    //! exclusion, at most `PERMITS` permits out, and FIFO hand-off: a green thread that finds
    //! a lock or the semaphore taken (its `try_` variant fails) queues, and if it waits with no
    //! deadline, it must be the first of those still queued when it gets through. Checked at the end, against the model: the
    //! mutex's counter equals the number of increments scripted, the rwlock's value the number
    //! of writes, every permit is back, and the consumers took every item exactly once, each
    //! in production order.

    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

    const PRODUCERS: usize = 3;
    const CONSUMERS: usize = 3;
    const THREADS: usize = PRODUCERS + CONSUMERS;
    const PERMITS: usize = 2;
    const OPS_PER_CASE: usize = 2000;

    #[derive(Clone, Copy, Debug)]
    enum Op {
        Yield,
        /// Lock the mutex, hold it across `hold` yields, add one.
        Increment {
            hold: u8,
        },
        /// Try to lock the mutex under a tiny `timeout`; on success, count a hit.
        TimedIncrement,
        Read {
            hold: u8,
        },
        Write {
            hold: u8,
        },
        Permit {
            hold: u8,
        },
        /// `acquire_timeout` with a deadline that has already passed or is about to.
        TimedPermit,
        /// Producer: push the next item and notify one (or all) consumers. Consumer: wait for
        /// an item and take it.
        Transfer {
            notify_all: bool,
        },
        /// A notification nobody asked for (spurious wake-ups must be harmless).
        NotifyAll,
        /// Producer: set or clear the event. Consumer: wait for it.
        Event {
            set: bool,
        },
    }

    /// Decodes one operation from random bits. Generating plain integers and decoding them
    /// keeps the 100,000 operations cheap to generate (a tree of strategies per operation is
    /// what would dominate the run time, under qemu especially), and still shrinks: towards 0,
    /// which decodes as a yield.
    fn decode(bits: u32) -> Op {
        let hold = ((bits >> 8) % 3) as u8;
        let flag = bits & (1 << 12) != 0;
        // Weights: the lower an operation's band, the more often it comes up.
        match bits % 22 {
            0..=1 => Op::Yield,
            2..=5 => Op::Increment { hold },
            6 => Op::TimedIncrement,
            7..=9 => Op::Read { hold },
            10..=11 => Op::Write { hold: hold % 2 },
            12..=14 => Op::Permit {
                hold: ((bits >> 8) % 5) as u8,
            },
            15 => Op::TimedPermit,
            16..=19 => Op::Transfer { notify_all: flag },
            20 => Op::NotifyAll,
            _ => Op::Event { set: flag },
        }
    }

    /// One script per green thread; producers are threads `0..PRODUCERS`. Transfers are
    /// balanced afterwards, so consumers take exactly what producers make.
    fn scripts() -> impl Strategy<Value = Vec<Vec<Op>>> {
        vec(any::<u32>(), OPS_PER_CASE).prop_map(|ops| {
            let mut scripts = vec![Vec::new(); THREADS];
            for bits in ops {
                scripts[(bits >> 16) as usize % THREADS].push(decode(bits));
            }
            let transfers = |range: std::ops::Range<usize>, scripts: &[Vec<Op>]| {
                scripts[range]
                    .iter()
                    .flatten()
                    .filter(|op| matches!(op, Op::Transfer { .. }))
                    .count()
            };
            let made = transfers(0..PRODUCERS, &scripts);
            let taken = transfers(PRODUCERS..THREADS, &scripts);
            let (short, missing) = if made < taken {
                (0, taken - made)
            } else {
                (PRODUCERS, made - taken)
            };
            scripts[short].extend((0..missing).map(|_| Op::Transfer { notify_all: false }));
            scripts
        })
    }

    /// Tickets of the green threads queued on one primitive, in the order they queued.
    #[derive(Default)]
    struct Line {
        next: Cell<u64>,
        queued: RefCell<VecDeque<u64>>,
    }

    impl Line {
        fn join(&self) -> u64 {
            let ticket = self.next.get();
            self.next.set(ticket + 1);
            self.queued.borrow_mut().push_back(ticket);
            ticket
        }

        /// The holder of `ticket`, which waited with no deadline, got through: it must have
        /// been first in line. (Only a grant makes such a waiter runnable, so waiters of this
        /// kind run in the order they were granted; a timed waiter whose timer made it
        /// runnable early may run before a waiter granted ahead of it, and is checked out
        /// with `leave`.)
        fn through(&self, ticket: u64, what: &str) {
            let first = self.queued.borrow_mut().pop_front();
            assert_eq!(first, Some(ticket), "{what}: overtaken in the queue");
        }

        /// The holder of `ticket` gave up waiting, or was a timed waiter that got through.
        fn leave(&self, ticket: u64) {
            self.queued.borrow_mut().retain(|queued| *queued != ticket);
        }
    }

    struct Shared {
        counter: Mutex<u64>,
        counter_line: Line,
        counter_held: Cell<bool>,
        timed_hits: Cell<u64>,
        rw: RwLock<u64>,
        rw_line: Line,
        readers: Cell<usize>,
        writing: Cell<bool>,
        permits: Semaphore,
        permit_line: Line,
        permits_out: Cell<usize>,
        items: Mutex<VecDeque<u64>>,
        item_ready: Condvar,
        next_item: Cell<u64>,
        event: Event,
        producers_done: Cell<usize>,
    }

    fn shared() -> Shared {
        Shared {
            counter: Mutex::new(0),
            counter_line: Line::default(),
            counter_held: Cell::new(false),
            timed_hits: Cell::new(0),
            rw: RwLock::new(0),
            rw_line: Line::default(),
            readers: Cell::new(0),
            writing: Cell::new(false),
            permits: Semaphore::new(PERMITS),
            permit_line: Line::default(),
            permits_out: Cell::new(0),
            items: Mutex::new(VecDeque::new()),
            item_ready: Condvar::new(),
            next_item: Cell::new(0),
            event: Event::new(),
            producers_done: Cell::new(0),
        }
    }

    fn hold(n: u8) {
        yield_times(usize::from(n));
    }

    fn increment(shared: &Shared, hold_for: u8) {
        let mut counter = match shared.counter.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::WouldBlock) => {
                let ticket = shared.counter_line.join();
                let guard = shared.counter.lock().unwrap();
                shared.counter_line.through(ticket, "mutex");
                guard
            }
            Err(TryLockError::Poisoned(_)) => panic!("nobody panics while holding the mutex"),
        };
        assert!(!shared.counter_held.replace(true), "two mutex holders");
        let seen = *counter;
        hold(hold_for);
        *counter = seen + 1;
        shared.counter_held.set(false);
    }

    fn timed_increment(shared: &Shared) {
        if shared.counter.try_lock().is_ok() {
            return; // free: nothing to time out on
        }
        let ticket = shared.counter_line.join();
        match timeout(Duration::from_micros(1), || shared.counter.lock().unwrap()) {
            Ok(guard) => {
                shared.counter_line.leave(ticket);
                shared.timed_hits.set(shared.timed_hits.get() + 1);
                drop(guard);
            }
            Err(_) => shared.counter_line.leave(ticket),
        }
    }

    fn read(shared: &Shared, hold_for: u8) {
        let guard = match shared.rw.try_read() {
            Ok(guard) => guard,
            Err(_) => {
                let ticket = shared.rw_line.join();
                let guard = shared.rw.read().unwrap();
                shared.rw_line.through(ticket, "rwlock read");
                guard
            }
        };
        assert!(!shared.writing.get(), "a reader inside with a writer");
        shared.readers.set(shared.readers.get() + 1);
        let seen = *guard;
        hold(hold_for);
        assert_eq!(*guard, seen);
        shared.readers.set(shared.readers.get() - 1);
    }

    fn write(shared: &Shared, hold_for: u8) {
        let mut guard = match shared.rw.try_write() {
            Ok(guard) => guard,
            Err(_) => {
                let ticket = shared.rw_line.join();
                let guard = shared.rw.write().unwrap();
                shared.rw_line.through(ticket, "rwlock write");
                guard
            }
        };
        assert_eq!(shared.readers.get(), 0, "a writer inside with readers");
        assert!(!shared.writing.replace(true), "two writers");
        let seen = *guard;
        hold(hold_for);
        *guard = seen + 1;
        shared.writing.set(false);
    }

    fn permit(shared: &Shared, hold_for: u8) {
        let permit = match shared.permits.try_acquire() {
            Some(permit) => permit,
            None => {
                let ticket = shared.permit_line.join();
                let permit = shared.permits.acquire();
                shared.permit_line.through(ticket, "semaphore");
                permit
            }
        };
        shared.permits_out.set(shared.permits_out.get() + 1);
        assert!(shared.permits_out.get() <= PERMITS, "too many permits out");
        hold(hold_for);
        shared.permits_out.set(shared.permits_out.get() - 1);
        drop(permit);
    }

    fn timed_permit(shared: &Shared) {
        if shared.permits.try_acquire().is_some() {
            return;
        }
        let ticket = shared.permit_line.join();
        match shared.permits.acquire_timeout(Duration::from_micros(1)) {
            Some(_permit) => shared.permit_line.leave(ticket),
            None => shared.permit_line.leave(ticket),
        }
    }

    fn produce(shared: &Shared, notify_all: bool) {
        let item = shared.next_item.get();
        shared.next_item.set(item + 1);
        shared.items.lock().unwrap().push_back(item);
        if notify_all {
            shared.item_ready.notify_all();
        } else {
            shared.item_ready.notify_one();
        }
    }

    fn consume(shared: &Shared) -> u64 {
        let items = shared.items.lock().unwrap();
        let mut items = shared
            .item_ready
            .wait_while(items, |items| items.is_empty())
            .unwrap();
        items.pop_front().expect("wait_while saw an item")
    }

    fn run_script(shared: &Shared, producer: bool, script: &[Op]) -> Vec<u64> {
        let mut consumed = Vec::new();
        for op in script {
            match *op {
                Op::Yield => thread::yield_now(),
                Op::Increment { hold } => increment(shared, hold),
                Op::TimedIncrement => timed_increment(shared),
                Op::Read { hold } => read(shared, hold),
                Op::Write { hold } => write(shared, hold),
                Op::Permit { hold } => permit(shared, hold),
                Op::TimedPermit => timed_permit(shared),
                Op::Transfer { notify_all } if producer => produce(shared, notify_all),
                Op::Transfer { .. } => consumed.push(consume(shared)),
                Op::NotifyAll => shared.item_ready.notify_all(),
                Op::Event { set: true } if producer => shared.event.set(),
                Op::Event { set: false } if producer => shared.event.clear(),
                Op::Event { .. } => shared.event.wait(),
            }
        }
        if producer {
            shared.producers_done.set(shared.producers_done.get() + 1);
            if shared.producers_done.get() == PRODUCERS {
                shared.event.set(); // for good: nobody clears it any more
            }
        }
        consumed
    }

    fn check(scripts: Vec<Vec<Op>>) {
        let count = |pred: fn(&Op) -> bool| scripts.iter().flatten().filter(|op| pred(op)).count();
        let increments = count(|op| matches!(op, Op::Increment { .. })) as u64;
        let writes = count(|op| matches!(op, Op::Write { .. })) as u64;
        let items = scripts[..PRODUCERS]
            .iter()
            .flatten()
            .filter(|op| matches!(op, Op::Transfer { .. }))
            .count() as u64;
        greenweave::run(move || {
            let shared = Rc::new(shared());
            let threads: Vec<_> = scripts
                .into_iter()
                .enumerate()
                .map(|(i, script)| {
                    let shared = shared.clone();
                    let producer = i < PRODUCERS;
                    let name = if producer {
                        format!("producer {i}")
                    } else {
                        format!("consumer {i}")
                    };
                    Builder::new()
                        .name(name)
                        .spawn(move || run_script(&shared, producer, &script))
                        .unwrap()
                })
                .collect();
            let mut all_consumed = Vec::new();
            for consumed in join_every(threads) {
                assert!(
                    consumed.windows(2).all(|pair| pair[0] < pair[1]),
                    "a consumer took items out of production order: {consumed:?}"
                );
                all_consumed.extend(consumed);
            }
            all_consumed.sort_unstable();
            assert_eq!(all_consumed, (0..items).collect::<Vec<_>>());
            assert_eq!(*shared.counter.lock().unwrap(), increments);
            assert_eq!(*shared.rw.read().unwrap(), writes);
            assert_eq!(shared.permits.available_permits(), PERMITS);
            assert!(shared.items.lock().unwrap().is_empty());
            assert!(shared.event.is_set());
            assert!(!shared.counter.is_poisoned() && !shared.rw.is_poisoned());
            for line in [&shared.counter_line, &shared.rw_line, &shared.permit_line] {
                assert!(line.queued.borrow().is_empty());
            }
        });
    }

    proptest! {
        // 50 cases of 2,000 operations: 100,000 in all.
        #![proptest_config(ProptestConfig {
            cases: 50,
            rng_seed: RngSeed::Fixed(0x7379_6e63_6d6f_6465),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn random_operations_on_every_primitive_lose_no_wake_up_and_match_the_model(
            scripts in scripts()
        ) {
            check(scripts);
        }
    }
}

// Waits in destructors during an unwind (they fail fast instead of switching) are covered in
// tests/unwinding.rs.

// Parity with std's surface (issue 25, items 4 and 5), each after std's own test of the item.

#[test]
fn mutex_rwlock_condvar_and_barrier_are_unwind_safe_whatever_they_hold_as_stds_are() {
    fn unwind_safe<T: std::panic::UnwindSafe + std::panic::RefUnwindSafe>() {}
    // A Cell is neither: std's locks are both anyway (poisoning stands for the invariant).
    unwind_safe::<greenweave::sync::Mutex<std::cell::Cell<i32>>>();
    unwind_safe::<greenweave::sync::RwLock<std::cell::Cell<i32>>>();
    unwind_safe::<greenweave::sync::Condvar>();
    unwind_safe::<greenweave::sync::Barrier>();
    unwind_safe::<std::sync::Mutex<std::cell::Cell<i32>>>(); // the model
}

#[test]
fn an_rwlock_read_guard_is_covariant_in_its_value_as_stds_is() {
    // std's `test_read_guard_covariance` (rwlock.rs), in its shape: a guard of `&'j i32` passes
    // where one of `&'i i32` is asked for, and the lock is used (dropped) after the call, so
    // its borrow cannot end early and stand in for covariance. Compiles only if the guard is
    // covariant in its value.
    fn do_stuff<'a>(_: greenweave::sync::RwLockReadGuard<'_, &'a i32>, _: &'a i32) {}
    greenweave::run(|| {
        let j: i32 = 5;
        let lock = greenweave::sync::RwLock::new(&j);
        {
            let i = 6;
            do_stuff(lock.read().unwrap(), &i);
        }
        drop(lock);
    });
}

#[test]
fn an_option_of_a_thread_id_is_one_word_as_stds_is() {
    assert_eq!(
        std::mem::size_of::<Option<greenweave::thread::ThreadId>>(),
        std::mem::size_of::<Option<std::thread::ThreadId>>()
    );
    assert_eq!(
        std::mem::size_of::<Option<greenweave::thread::ThreadId>>(),
        8
    );
    greenweave::run(|| assert!(greenweave::thread::current().id().as_u64() > 0));
}

#[test]
fn a_thread_name_with_a_nul_byte_panics_at_spawn_as_std_test_invalid_named_thread() {
    greenweave::run(|| {
        let message = |result: std::thread::Result<()>| {
            let payload = result.expect_err("the spawn panics");
            payload
                .downcast_ref::<&str>()
                .map(|text| text.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap()
        };
        let spawn = std::panic::catch_unwind(|| {
            let _ = greenweave::thread::Builder::new()
                .name("ab\0".to_string())
                .spawn(|| {});
        });
        // std's very words, its `expect` on the C string's `NulError`.
        let expected = "thread name may not contain interior null bytes: NulError(2, [97, 98, 0])";
        assert_eq!(message(spawn), expected);
        let spawn_on = std::panic::catch_unwind(|| {
            let _ = greenweave::thread::Builder::new()
                .name("\0".to_string())
                .spawn_on(0, || {});
        });
        assert!(message(spawn_on).starts_with("thread name may not contain interior null bytes"));
        let scoped = std::panic::catch_unwind(|| {
            greenweave::thread::scope(|scope| {
                let _ = greenweave::thread::Builder::new()
                    .name("a\0b".to_string())
                    .spawn_scoped(scope, || {});
            });
        });
        assert!(message(scoped).starts_with("thread name may not contain interior null bytes"));
        // And std's own, the model.
        let std_spawn = std::panic::catch_unwind(|| {
            let _ = std::thread::Builder::new()
                .name("ab\0".to_string())
                .spawn(|| {});
        });
        assert_eq!(message(std_spawn), expected);
    });
}

// Guard mapping and `RwLockWriteGuard::downgrade` (issue 25). The tests with std's names are
// ported from std's `library/std/tests/sync/mutex.rs` and `rwlock.rs`, with green threads and
// `Rc` where std has OS threads and `Arc`, and parking_lot's `try_map` where std's nightly
// says `filter_map`.

mod mutex_std {
    use std::panic::{self, AssertUnwindSafe};
    use std::rc::Rc;
    use std::sync::TryLockError;

    use greenweave::sync::{MappedMutexGuard, Mutex, MutexGuard};

    // std's `test_mapping_mapped_guard` (mutex.rs).
    #[test]
    fn test_mapping_mapped_guard() {
        greenweave::run(|| {
            let arr = [0; 4];
            let mut lock = Mutex::new(arr);
            let guard = lock.lock().unwrap();
            let guard = MutexGuard::map(guard, |arr| &mut arr[..2]);
            let mut guard = MappedMutexGuard::map(guard, |slice| &mut slice[1..]);
            assert_eq!(guard.len(), 1);
            guard[0] = 42;
            drop(guard);
            assert_eq!(*lock.get_mut().unwrap(), [0, 42, 0, 0]);
        });
    }

    // std's `test_mutex_arc_poison_mapped` (mutex.rs).
    #[test]
    fn test_mutex_arc_poison_mapped() {
        greenweave::run(|| {
            let arc = Rc::new(Mutex::new(1));
            assert!(!arc.is_poisoned());
            let arc2 = arc.clone();
            let joined = greenweave::spawn(move || {
                let lock = arc2.lock().unwrap();
                let lock = MutexGuard::map(lock, |val| val);
                assert_eq!(*lock, 2); // deliberate assertion failure to poison the mutex
            })
            .join();
            assert!(joined.is_err());
            assert!(arc.lock().is_err());
            assert!(arc.is_poisoned());
        });
    }

    // std's `panic_while_mapping_unlocked_poison` (mutex.rs), with the poison cleared after
    // each case so that each one's check counts.
    #[test]
    fn panic_while_mapping_unlocked_poison() {
        greenweave::run(|| {
            let lock = Mutex::new(());
            let check = |what: &str| {
                match lock.try_lock() {
                    Ok(_) => panic!("panicking in a {what} closure should poison the Mutex"),
                    Err(TryLockError::WouldBlock) => {
                        panic!("panicking in a {what} closure should unlock the mutex")
                    }
                    Err(TryLockError::Poisoned(_)) => {}
                }
                lock.clear_poison();
            };

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.lock().unwrap();
                let _guard = MutexGuard::map::<(), _>(guard, |_| panic!());
            }));
            check("MutexGuard::map");

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.lock().unwrap();
                let _guard = MutexGuard::try_map::<(), _>(guard, |_| panic!());
            }));
            check("MutexGuard::try_map");

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.lock().unwrap();
                let guard = MutexGuard::map::<(), _>(guard, |val| val);
                let _guard = MappedMutexGuard::map::<(), _>(guard, |_| panic!());
            }));
            check("MappedMutexGuard::map");

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.lock().unwrap();
                let guard = MutexGuard::map::<(), _>(guard, |val| val);
                let _guard = MappedMutexGuard::try_map::<(), _>(guard, |_| panic!());
            }));
            check("MappedMutexGuard::try_map");
        });
    }

    #[test]
    fn a_mapped_guard_keeps_the_lock_and_hands_it_to_the_first_waiter_when_dropped() {
        greenweave::run(|| {
            let lock = Rc::new(Mutex::new((0, Vec::new())));
            let mut log = MutexGuard::map(lock.lock().unwrap(), |(_, log)| log);
            let waiter = {
                let lock = lock.clone();
                greenweave::spawn(move || lock.lock().unwrap().1.push("waiter"))
            };
            greenweave::thread::yield_now(); // the waiter queues
            assert!(matches!(lock.try_lock(), Err(TryLockError::WouldBlock)));
            log.push("mapped");
            drop(log);
            waiter.join().unwrap();
            assert_eq!(lock.lock().unwrap().1, ["mapped", "waiter"]);
        });
    }

    #[test]
    fn try_map_that_finds_nothing_gives_back_the_guard_still_holding_the_lock() {
        greenweave::run(|| {
            let lock = Mutex::new(vec![1]);
            let guard = MutexGuard::try_map(lock.lock().unwrap(), |v| v.get_mut(3)).unwrap_err();
            assert!(matches!(lock.try_lock(), Err(TryLockError::WouldBlock)));
            let mapped = MutexGuard::map(guard, |v| &mut v[0]);
            let mapped = MappedMutexGuard::try_map(mapped, |_| None::<&mut ()>).unwrap_err();
            assert_eq!(*mapped, 1);
            assert!(matches!(lock.try_lock(), Err(TryLockError::WouldBlock)));
            drop(mapped);
            assert!(lock.try_lock().is_ok());
        });
    }
}

mod rwlock_std {
    use std::panic::{self, AssertUnwindSafe};
    use std::rc::Rc;
    use std::sync::TryLockError;

    use greenweave::sync::{
        MappedRwLockReadGuard, MappedRwLockWriteGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    };
    use greenweave::thread;

    // std's `test_downgrade_basic` (rwlock.rs).
    #[test]
    fn test_downgrade_basic() {
        greenweave::run(|| {
            let r = RwLock::new(());
            let write_guard = r.write().unwrap();
            let _read_guard = RwLockWriteGuard::downgrade(write_guard);
        });
    }

    // std's `test_downgrade_observe` (rwlock.rs): `W` writers each increment the counter `N`
    // times and check that the value they wrote has not changed after downgrading; here each
    // yields after the downgrade, so that the others try to get in.
    #[test]
    fn test_downgrade_observe() {
        const W: usize = 20;
        const N: usize = 100;
        greenweave::run(|| {
            let rw = Rc::new(RwLock::new(0));
            let handles: Vec<_> = (0..W)
                .map(|_| {
                    let rw = rw.clone();
                    greenweave::spawn(move || {
                        for _ in 0..N {
                            let mut write_guard = rw.write().unwrap();
                            *write_guard += 1;
                            let cur_val = *write_guard;
                            let read_guard = RwLockWriteGuard::downgrade(write_guard);
                            thread::yield_now();
                            assert_eq!(cur_val, *read_guard);
                        }
                    })
                })
                .collect();
            for handle in handles {
                handle.join().unwrap();
            }
            assert_eq!(*rw.read().unwrap(), W * N);
        });
    }

    // std's `test_downgrade_atomic` (rwlock.rs): writers queued behind the write lock cannot
    // get in between the downgrade and the read that follows it.
    #[test]
    fn test_downgrade_atomic() {
        const NEW_VALUE: i32 = -1;
        const W: usize = 20;
        greenweave::run(|| {
            let rwlock = Rc::new(RwLock::new(0));
            let mut main_write_guard = rwlock.write().unwrap();
            let handles: Vec<_> = (0..W)
                .map(|_| {
                    let rwlock = rwlock.clone();
                    greenweave::spawn(move || {
                        let mut evil_guard = rwlock.write().unwrap();
                        *evil_guard += 1;
                    })
                })
                .collect();
            thread::yield_now(); // every evil writer queues
            *main_write_guard = NEW_VALUE;
            let main_read_guard = RwLockWriteGuard::downgrade(main_write_guard);
            thread::yield_now(); // they run, and must still wait
            assert_eq!(*main_read_guard, NEW_VALUE, "`downgrade` was not atomic");
            drop(main_read_guard);
            for handle in handles {
                handle.join().unwrap();
            }
            assert_eq!(*rwlock.read().unwrap(), W as i32 + NEW_VALUE);
        });
    }

    #[test]
    fn a_downgrade_lets_in_the_readers_queued_before_the_first_waiting_writer_and_no_one_else() {
        let order = greenweave::run(|| {
            let lock = Rc::new(RwLock::new(0));
            let order = Rc::new(std::cell::RefCell::new(Vec::new()));
            let mut guard = lock.write().unwrap();
            let waiter = |name: &'static str, write: bool| {
                let (lock, order) = (lock.clone(), order.clone());
                greenweave::spawn(move || {
                    if write {
                        let mut value = lock.write().unwrap();
                        *value += 1;
                        order.borrow_mut().push(name);
                    } else {
                        let value = lock.read().unwrap();
                        order.borrow_mut().push(name);
                        // Reads what the downgrading writer left while it still holds its read
                        // lock, or what the writer queued before it left.
                        assert!(*value == 10 || *value == 11, "{name} read {}", *value);
                    }
                })
            };
            let waiters = [
                waiter("reader 1", false),
                waiter("reader 2", false),
                waiter("writer", true),
                waiter("reader 3", false),
            ];
            thread::yield_now(); // all four queue, in this order
            *guard = 10;
            let read = RwLockWriteGuard::downgrade(guard);
            thread::yield_now(); // readers 1 and 2 were let in; the writer waits, and reader 3
            order.borrow_mut().push("downgraded reader done");
            assert_eq!(*read, 10);
            drop(read);
            for waiter in waiters {
                waiter.join().unwrap();
            }
            Rc::try_unwrap(order).unwrap().into_inner()
        });
        assert_eq!(
            order,
            [
                "reader 1",
                "reader 2",
                "downgraded reader done",
                "writer",
                "reader 3"
            ]
        );
    }

    #[test]
    fn a_downgrade_during_an_unwind_does_not_poison_the_lock_as_stds_does_not() {
        greenweave::run(|| {
            let lock = RwLock::new(0);
            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                struct DowngradeOnDrop<'a>(Option<RwLockWriteGuard<'a, i32>>);
                impl Drop for DowngradeOnDrop<'_> {
                    fn drop(&mut self) {
                        let read = RwLockWriteGuard::downgrade(self.0.take().unwrap());
                        assert_eq!(*read, 0);
                    }
                }
                let _guard = DowngradeOnDrop(Some(lock.write().unwrap()));
                panic!("unwinding with the write lock");
            }));
            assert!(!lock.is_poisoned());
            assert!(lock.try_write().is_ok());
        });
    }

    // std's `test_mapping_mapped_guard` (rwlock.rs).
    #[test]
    fn test_mapping_mapped_guard() {
        greenweave::run(|| {
            let arr = [0; 4];
            let mut lock = RwLock::new(arr);
            let guard = lock.write().unwrap();
            let guard = RwLockWriteGuard::map(guard, |arr| &mut arr[..2]);
            let mut guard = MappedRwLockWriteGuard::map(guard, |slice| &mut slice[1..]);
            assert_eq!(guard.len(), 1);
            guard[0] = 42;
            drop(guard);
            assert_eq!(*lock.get_mut().unwrap(), [0, 42, 0, 0]);

            let guard = lock.read().unwrap();
            let guard = RwLockReadGuard::map(guard, |arr| &arr[..2]);
            let guard = MappedRwLockReadGuard::map(guard, |slice| &slice[1..]);
            assert_eq!(*guard, [42]);
            drop(guard);
            assert_eq!(*lock.get_mut().unwrap(), [0, 42, 0, 0]);
        });
    }

    // std's `test_mapped_read_guard_covariance` (rwlock.rs): compiles only if the mapped read
    // guard is covariant.
    #[test]
    fn test_mapped_read_guard_covariance() {
        fn do_stuff<'a>(_: MappedRwLockReadGuard<'_, &'a i32>, _: &'a i32) {}
        greenweave::run(|| {
            let j: i32 = 5;
            let lock = RwLock::new((&j, &j));
            {
                let i = 6;
                let guard = lock.read().unwrap();
                let guard = RwLockReadGuard::map(guard, |(val, _val)| val);
                do_stuff(guard, &i);
            }
            drop(lock);
        });
    }

    // std's `poison_test_rwlock_try_write` (rwlock.rs): a mapped read guard keeps the read
    // lock.
    #[test]
    fn poison_test_rwlock_try_write() {
        greenweave::run(|| {
            let lock = RwLock::new(0isize);
            let read_guard = lock.read().unwrap();
            assert!(matches!(lock.try_write(), Err(TryLockError::WouldBlock)));
            drop(read_guard);
            let mapped_read_guard = RwLockReadGuard::map(lock.read().unwrap(), |_| &());
            assert!(matches!(lock.try_write(), Err(TryLockError::WouldBlock)));
            drop(mapped_read_guard);
            assert!(lock.try_write().is_ok());
        });
    }

    // std's `test_rw_arc_poison_mapped_w_r`, `test_rw_arc_poison_mapped_w_w`,
    // `test_rw_arc_no_poison_mapped_r_r` and `test_rw_arc_no_poison_mapped_r_w` (rwlock.rs),
    // in one: a mapped write guard poisons on a panic, a mapped read guard does not.
    #[test]
    fn test_rw_arc_poison_mapped_w_r() {
        greenweave::run(|| {
            let arc = Rc::new(RwLock::new(1));
            let arc2 = arc.clone();
            let _ = greenweave::spawn(move || {
                let lock = arc2.write().unwrap();
                let _lock = RwLockWriteGuard::map(lock, |val| val);
                panic!();
            })
            .join();
            assert!(arc.read().is_err());
            assert!(arc.write().is_err());
            assert!(arc.is_poisoned());

            let arc = Rc::new(RwLock::new(1));
            let arc2 = arc.clone();
            let _ = greenweave::spawn(move || {
                let lock = arc2.read().unwrap();
                let _lock = RwLockReadGuard::map(lock, |val| val);
                panic!();
            })
            .join();
            assert_eq!(*arc.read().unwrap(), 1);
            assert_eq!(*arc.write().unwrap(), 1);
        });
    }

    // std's `panic_while_mapping_read_unlocked_no_poison` (rwlock.rs).
    #[test]
    fn panic_while_mapping_read_unlocked_no_poison() {
        greenweave::run(|| {
            let lock = RwLock::new(());
            let check = |what: &str| match lock.try_write() {
                Ok(_) => {}
                Err(TryLockError::WouldBlock) => {
                    panic!("panicking in a {what} closure should release the read lock")
                }
                Err(TryLockError::Poisoned(_)) => {
                    panic!("panicking in a {what} closure should not poison the RwLock")
                }
            };

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.read().unwrap();
                let _guard = RwLockReadGuard::map::<(), _>(guard, |_| panic!());
            }));
            check("RwLockReadGuard::map");

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.read().unwrap();
                let _guard = RwLockReadGuard::try_map::<(), _>(guard, |_| panic!());
            }));
            check("RwLockReadGuard::try_map");

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.read().unwrap();
                let guard = RwLockReadGuard::map::<(), _>(guard, |val| val);
                let _guard = MappedRwLockReadGuard::map::<(), _>(guard, |_| panic!());
            }));
            check("MappedRwLockReadGuard::map");

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.read().unwrap();
                let guard = RwLockReadGuard::map::<(), _>(guard, |val| val);
                let _guard = MappedRwLockReadGuard::try_map::<(), _>(guard, |_| panic!());
            }));
            check("MappedRwLockReadGuard::try_map");
        });
    }

    // std's `panic_while_mapping_write_unlocked_poison` (rwlock.rs), with the poison cleared
    // after each case so that each one's check counts.
    #[test]
    fn panic_while_mapping_write_unlocked_poison() {
        greenweave::run(|| {
            let lock = RwLock::new(());
            let check = |what: &str| {
                match lock.try_write() {
                    Ok(_) => panic!("panicking in a {what} closure should poison the RwLock"),
                    Err(TryLockError::WouldBlock) => {
                        panic!("panicking in a {what} closure should release the write lock")
                    }
                    Err(TryLockError::Poisoned(_)) => {}
                }
                lock.clear_poison();
            };

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.write().unwrap();
                let _guard = RwLockWriteGuard::map::<(), _>(guard, |_| panic!());
            }));
            check("RwLockWriteGuard::map");

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.write().unwrap();
                let _guard = RwLockWriteGuard::try_map::<(), _>(guard, |_| panic!());
            }));
            check("RwLockWriteGuard::try_map");

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.write().unwrap();
                let guard = RwLockWriteGuard::map::<(), _>(guard, |val| val);
                let _guard = MappedRwLockWriteGuard::map::<(), _>(guard, |_| panic!());
            }));
            check("MappedRwLockWriteGuard::map");

            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                let guard = lock.write().unwrap();
                let guard = RwLockWriteGuard::map::<(), _>(guard, |val| val);
                let _guard = MappedRwLockWriteGuard::try_map::<(), _>(guard, |_| panic!());
            }));
            check("MappedRwLockWriteGuard::try_map");
        });
    }

    #[test]
    fn a_mapped_write_guard_dropped_hands_the_lock_to_the_queued_readers() {
        greenweave::run(|| {
            let lock = Rc::new(RwLock::new((0, 0)));
            let mut first = RwLockWriteGuard::map(lock.write().unwrap(), |pair| &mut pair.0);
            let readers: Vec<_> = (0..3)
                .map(|_| {
                    let lock = lock.clone();
                    greenweave::spawn(move || lock.read().unwrap().0)
                })
                .collect();
            thread::yield_now(); // they queue
            *first = 7;
            drop(first);
            for reader in readers {
                assert_eq!(reader.join().unwrap(), 7);
            }
        });
    }
}
