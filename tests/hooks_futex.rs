//! The `hooks` feature's futex: std's and parking_lot's locks, condvars, `Once`, channels and
//! `thread::park`, all of which wait and wake with `syscall(SYS_futex, ...)`, park only their
//! green thread, and a wake from anywhere (another green thread, a plain OS thread, another
//! runtime) reaches it; but a std channel's send never wakes a receiver on its own OS thread,
//! which greenweave can only report.
//!
//! Every test runs on one OS thread unless it says otherwise, so the order of events is the
//! proof: if a futex wait blocked the OS thread, no other green thread could run while it
//! waited, and the heartbeat's tick could not come between the wait and its end (the test
//! would hang instead). No test depends on how long anything takes.
#![cfg(feature = "hooks")]

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Condvar, LazyLock, Mutex, OnceLock, mpsc};
use std::time::Duration;

use greenweave::thread::yield_now;

/// What happened, in order, as the green threads of one runtime saw it.
#[derive(Clone, Default)]
struct Log(Rc<RefCell<Vec<String>>>);

impl Log {
    fn push(&self, event: impl Into<String>) {
        self.0.borrow_mut().push(event.into());
    }
    fn contains(&self, event: &str) -> bool {
        self.0.borrow().iter().any(|seen| seen == event)
    }
    fn events(&self) -> Vec<String> {
        self.0.borrow().clone()
    }
    /// Yields until `event` is logged, then a few more times, so that whoever logged it has
    /// gone on into the wait that follows (a green thread runs until it parks).
    fn wait_for(&self, event: &str) {
        while !self.contains(event) {
            yield_now();
        }
        for _ in 0..3 {
            yield_now();
        }
    }
}

fn position(events: &[String], event: &str) -> usize {
    events
        .iter()
        .position(|seen| seen == event)
        .unwrap_or_else(|| panic!("{event:?} never happened: {events:?}"))
}

#[test]
fn a_std_mutex_held_across_a_park_parks_the_next_locker_while_others_run() {
    greenweave::run(|| {
        let lock = Arc::new(Mutex::new(0));
        let log = Log::default();
        let (go, went) = greenweave::sync::mpsc::channel::<()>();
        let holder = greenweave::spawn({
            let (lock, log) = (lock.clone(), log.clone());
            move || {
                let mut guard = lock.lock().unwrap();
                log.push("held");
                went.recv().unwrap(); // parks, holding the std lock
                *guard += 1;
                log.push("released");
            }
        });
        let locker = greenweave::spawn({
            let (lock, log) = (lock.clone(), log.clone());
            move || {
                log.wait_for("held");
                log.push("locking");
                let mut guard = lock.lock().unwrap(); // a futex wait: parks
                *guard += 10;
                log.push("locked");
            }
        });
        log.wait_for("locking");
        log.push("tick");
        go.send(()).unwrap();
        holder.join().unwrap();
        locker.join().unwrap();
        assert_eq!(
            log.events(),
            ["held", "locking", "tick", "released", "locked"]
        );
        assert_eq!(*lock.lock().unwrap(), 11);
    });
}

#[test]
fn std_mpsc_recv_parks_until_a_green_thread_of_another_worker_sends() {
    // The sender lives until the receiver has its value: only the send can have woken it (a
    // dropped sender's disconnect wakes a receiver too).
    let runtime = greenweave::Runtime::builder().workers(2).build().unwrap();
    runtime.run(|| {
        let (sender, receiver) = mpsc::channel::<u32>();
        let receiving = Arc::new(AtomicBool::new(false));
        let receiver = greenweave::thread::spawn_on(1, {
            let receiving = receiving.clone();
            move || {
                receiving.store(true, Ordering::Release);
                receiver.recv().unwrap()
            }
        });
        while !receiving.load(Ordering::Acquire) {
            yield_now();
        }
        std::thread::sleep(Duration::from_millis(10)); // into its recv's park by now
        sender.send(42).unwrap();
        assert_eq!(receiver.join().unwrap(), 42);
        drop(sender);
    });
}

#[test]
fn a_std_mpsc_send_does_not_wake_a_receiver_on_the_same_worker_and_greenweave_says_why() {
    // std's channels wake no receiver on the sender's own OS thread (its thread id), and the
    // two green threads are that one OS thread. What greenweave can do is say so.
    let outcome = common::run_in_child(
        "a_std_mpsc_send_does_not_wake_a_receiver_on_the_same_worker_and_greenweave_says_why",
        || {
            greenweave::run(|| {
                let (sender, receiver) = mpsc::channel::<u32>();
                let log = Log::default();
                let receiving = greenweave::spawn({
                    let log = log.clone();
                    move || {
                        log.push("receiving");
                        let value = receiver.recv().unwrap();
                        log.push(format!("received {value}"));
                    }
                });
                log.wait_for("receiving");
                sender.send(42).unwrap();
                // This green thread goes on running (the report needs another one to run),
                // and the receiver is never woken by the send.
                for _ in 0..150 {
                    greenweave::thread::sleep(Duration::from_millis(10));
                }
                assert_eq!(log.events(), ["receiving"], "the send woke the receiver");
                drop(sender); // a disconnect wakes every receiver, on any thread
                receiving.join().unwrap();
                assert_eq!(log.events(), ["receiving", "received 42"]);
            });
            std::process::exit(0);
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
    assert!(
        outcome
            .stderr
            .contains("for a std::sync::mpsc receive while other green threads")
            && outcome.stderr.contains("greenweave::sync::mpsc"),
        "no report of the same-OS-thread send: {}",
        outcome.describe()
    );
}

#[test]
fn two_green_threads_each_waiting_on_its_own_std_channel_both_receive_every_value() {
    // Both wait in std's thread::park, on the one parker of their OS thread.
    const ROUNDS: u32 = 200;
    greenweave::run(|| {
        let (to_first, first) = mpsc::channel::<u32>();
        let (to_second, second) = mpsc::channel::<u32>();
        let receivers: Vec<_> = [first, second]
            .into_iter()
            .map(|receiver| {
                greenweave::spawn(move || receiver.iter().take(ROUNDS as usize).sum::<u32>())
            })
            .collect();
        // One sender is a plain OS thread, the other a green thread; they interleave as they
        // please, and every unpark must reach its receiver.
        let os_thread = std::thread::spawn(move || {
            for value in 0..ROUNDS {
                to_first.send(value).unwrap();
                if value % 16 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let green = greenweave::spawn(move || {
            for value in 0..ROUNDS {
                to_second.send(value * 2).unwrap();
                yield_now();
            }
        });
        let sums: Vec<u32> = receivers.into_iter().map(|r| r.join().unwrap()).collect();
        green.join().unwrap();
        os_thread.join().unwrap();
        let expected: u32 = (0..ROUNDS).sum();
        assert_eq!(sums, [expected, expected * 2]);
    });
}

#[test]
fn std_thread_park_in_a_green_thread_is_ended_by_unpark_from_a_green_thread_and_an_os_thread() {
    greenweave::run(|| {
        let flag = Arc::new(AtomicUsize::new(0));
        let log = Log::default();
        let parked = greenweave::spawn({
            let (flag, log) = (flag.clone(), log.clone());
            move || {
                let me = std::thread::current();
                for round in 1..=2 {
                    log.push(format!("parking {round}"));
                    while flag.load(Ordering::Acquire) < round {
                        std::thread::park();
                    }
                    log.push(format!("unparked {round}"));
                }
                me.id()
            }
        });
        log.wait_for("parking 1");
        log.push("tick");
        flag.store(1, Ordering::Release);
        std::thread::current().unpark(); // same OS thread, another green thread
        log.wait_for("parking 2");
        let thread = std::thread::current();
        let flag_for_os_thread = flag.clone();
        std::thread::spawn(move || {
            flag_for_os_thread.store(2, Ordering::Release);
            thread.unpark();
        })
        .join()
        .unwrap();
        assert_eq!(parked.join().unwrap(), std::thread::current().id());
        assert_eq!(
            log.events(),
            ["parking 1", "tick", "unparked 1", "parking 2", "unparked 2"]
        );
    });
}

#[test]
fn a_std_condvar_wait_parks_and_notify_from_a_green_thread_ends_it() {
    greenweave::run(|| {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let log = Log::default();
        let waiter = greenweave::spawn({
            let (pair, log) = (pair.clone(), log.clone());
            move || {
                let (lock, ready) = &*pair;
                let mut done = lock.lock().unwrap();
                log.push("waiting");
                while !*done {
                    done = ready.wait(done).unwrap();
                }
                log.push("notified");
            }
        });
        log.wait_for("waiting");
        log.push("tick");
        *pair.0.lock().unwrap() = true;
        pair.1.notify_one();
        waiter.join().unwrap();
        assert_eq!(log.events(), ["waiting", "tick", "notified"]);
    });
}

#[test]
fn a_green_thread_waiting_on_a_std_condvar_is_woken_by_a_plain_os_thread() {
    greenweave::run(|| {
        let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
        let ticks = Rc::new(RefCell::new(0u32));
        // The heartbeat's word that it ticked, which it can only do once the waiter waits.
        // (The notifier waited 20 ms instead, which could pass before the waiter even waited,
        // were this OS thread held up, as under Valgrind.)
        let (ticked, first_tick) = std::sync::mpsc::channel::<()>();
        let heartbeat = greenweave::spawn({
            let (pair, ticks) = (pair.clone(), ticks.clone());
            move || {
                let mut ticked = Some(ticked);
                // Ticks until the value arrives: runs only while the waiter is parked.
                while *pair.0.lock().unwrap() == 0 {
                    *ticks.borrow_mut() += 1;
                    if let Some(ticked) = ticked.take() {
                        ticked.send(()).unwrap();
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        let notifier = {
            let pair = pair.clone();
            std::thread::spawn(move || {
                let (lock, ready) = &*pair;
                // Waits until the green thread waits (its wait releases the lock).
                first_tick.recv().unwrap();
                *lock.lock().unwrap() = 7;
                ready.notify_all();
            })
        };
        let (lock, ready) = &*pair;
        let value = *ready.wait_while(lock.lock().unwrap(), |v| *v == 0).unwrap();
        assert_eq!(value, 7);
        notifier.join().unwrap();
        heartbeat.join().unwrap();
        assert!(
            *ticks.borrow() > 0,
            "the heartbeat never ran while the waiter waited"
        );
    });
}

#[test]
fn once_lock_and_lazy_lock_initialised_by_a_parked_green_thread_park_the_others() {
    static LAZY: LazyLock<u32> = LazyLock::new(|| {
        std::thread::sleep(Duration::from_millis(10)); // hooked: parks inside the init
        5
    });
    greenweave::run(|| {
        let cell = Arc::new(OnceLock::new());
        let log = Log::default();
        let (go, went) = greenweave::sync::mpsc::channel::<()>();
        let initialiser = greenweave::spawn({
            let (cell, log) = (cell.clone(), log.clone());
            move || {
                *cell.get_or_init(|| {
                    log.push("initialising");
                    went.recv().unwrap(); // parks inside the initialiser
                    1
                })
            }
        });
        let reader = greenweave::spawn({
            let (cell, log) = (cell.clone(), log.clone());
            move || {
                log.wait_for("initialising");
                log.push("reading");
                *cell.get_or_init(|| 2) // waits on the Once's futex
            }
        });
        log.wait_for("reading");
        log.push("tick");
        go.send(()).unwrap();
        assert_eq!(initialiser.join().unwrap(), 1);
        assert_eq!(reader.join().unwrap(), 1);
        assert_eq!(log.events(), ["initialising", "reading", "tick"]);
        let lazies: Vec<_> = (0..3).map(|_| greenweave::spawn(|| *LAZY)).collect();
        for lazy in lazies {
            assert_eq!(lazy.join().unwrap(), 5);
        }
    });
}

#[test]
fn a_std_barrier_between_green_threads_releases_them_all_with_one_leader() {
    const THREADS: usize = 5;
    greenweave::run(|| {
        let barrier = Arc::new(Barrier::new(THREADS));
        let log = Log::default();
        let waiters: Vec<_> = (0..THREADS)
            .map(|index| {
                let (barrier, log) = (barrier.clone(), log.clone());
                greenweave::spawn(move || {
                    log.push(format!("before {index}"));
                    let leader = barrier.wait().is_leader();
                    log.push(format!("after {index}"));
                    leader
                })
            })
            .collect();
        let leaders = waiters
            .into_iter()
            .map(|waiter| waiter.join().unwrap())
            .filter(|&leader| leader)
            .count();
        assert_eq!(leaders, 1);
        let events = log.events();
        let last_before = (0..THREADS)
            .map(|index| position(&events, &format!("before {index}")))
            .max()
            .unwrap();
        let first_after = (0..THREADS)
            .map(|index| position(&events, &format!("after {index}")))
            .min()
            .unwrap();
        assert!(last_before < first_after, "{events:?}");
    });
}

#[test]
fn parking_lot_mutex_held_across_a_park_parks_the_next_locker() {
    greenweave::run(|| {
        let lock = Arc::new(parking_lot::Mutex::new(0));
        let log = Log::default();
        let (go, went) = greenweave::sync::mpsc::channel::<()>();
        let holder = greenweave::spawn({
            let (lock, log) = (lock.clone(), log.clone());
            move || {
                let mut guard = lock.lock();
                log.push("held");
                went.recv().unwrap();
                *guard += 1;
            }
        });
        let locker = greenweave::spawn({
            let (lock, log) = (lock.clone(), log.clone());
            move || {
                log.wait_for("held");
                log.push("locking");
                *lock.lock() += 10;
                log.push("locked");
            }
        });
        log.wait_for("locking");
        log.push("tick");
        go.send(()).unwrap();
        holder.join().unwrap();
        locker.join().unwrap();
        assert_eq!(log.events(), ["held", "locking", "tick", "locked"]);
        assert_eq!(*lock.lock(), 11);
    });
}

#[test]
fn timed_std_waits_time_out_in_green_threads_while_others_run() {
    greenweave::run(|| {
        let log = Log::default();
        let heartbeat = greenweave::spawn({
            let log = log.clone();
            move || {
                while !log.contains("timed out twice") {
                    log.push("tick");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        // Each wait must park for the heartbeat to tick meanwhile; one whose time is up before
        // it could park returns without one (under qemu or Valgrind the first pass through the
        // hook can take that long): such a wait is made again, longer.
        let ticks = || log.events().iter().filter(|event| *event == "tick").count();
        let (_sender, receiver) = mpsc::channel::<()>();
        for wait in [20, 200, 2000].map(Duration::from_millis) {
            let before = ticks();
            assert_eq!(
                receiver.recv_timeout(wait),
                Err(mpsc::RecvTimeoutError::Timeout)
            );
            if ticks() > before {
                break;
            }
        }
        let pair = (Mutex::new(()), Condvar::new());
        for wait in [20, 200, 2000].map(Duration::from_millis) {
            let before = ticks();
            let (_guard, result) = pair.1.wait_timeout(pair.0.lock().unwrap(), wait).unwrap();
            assert!(result.timed_out());
            if ticks() > before {
                break;
            }
        }
        log.push("timed out twice");
        heartbeat.join().unwrap();
        assert!(log.events().iter().filter(|event| *event == "tick").count() >= 2);
    });
}

// The raw system call, as std and parking_lot make it.

fn futex(word: &AtomicU32, op: i32, value: u32, timeout: *const libc::timespec) -> (i64, i32) {
    // SAFETY: a live word; the timeout is null or live.
    let result = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            value,
            timeout,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    (
        result,
        if result == -1 {
            std::io::Error::last_os_error().raw_os_error().unwrap()
        } else {
            0
        },
    )
}

const WAIT: i32 = libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG;
const WAKE: i32 = libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG;

#[test]
fn raw_futex_waiters_are_woken_oldest_first_and_wake_counts_them() {
    greenweave::run(|| {
        let word = Arc::new(AtomicU32::new(0));
        let order = Log::default();
        let waiters: Vec<_> = (0..3)
            .map(|index| {
                let (word, order) = (word.clone(), order.clone());
                greenweave::spawn(move || {
                    order.push(format!("waiting {index}"));
                    assert_eq!(futex(&word, WAIT, 0, std::ptr::null()), (0, 0));
                    order.push(format!("woken {index}"));
                })
            })
            .collect();
        order.wait_for("waiting 2");
        assert_eq!(futex(&word, WAKE, 1, std::ptr::null()).0, 1);
        order.wait_for("woken 0");
        assert_eq!(futex(&word, WAKE, i32::MAX as u32, std::ptr::null()).0, 2);
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert_eq!(futex(&word, WAKE, 1, std::ptr::null()).0, 0);
        let events = order.events();
        assert!(position(&events, "woken 0") < position(&events, "woken 1"));
        assert!(position(&events, "woken 1") < position(&events, "woken 2"));
    });
}

#[test]
fn raw_futex_wait_is_eagain_on_a_changed_word_and_etimedout_at_its_timeout() {
    greenweave::run(|| {
        let word = AtomicU32::new(1);
        assert_eq!(futex(&word, WAIT, 0, std::ptr::null()), (-1, libc::EAGAIN));
        let timeout = libc::timespec {
            tv_sec: 0,
            tv_nsec: 5_000_000,
        };
        let ticker = greenweave::spawn(yield_now);
        assert_eq!(futex(&word, WAIT, 1, &timeout), (-1, libc::ETIMEDOUT));
        assert!(ticker.is_finished(), "the other green thread ran meanwhile");
        let bad = libc::timespec {
            tv_sec: 0,
            tv_nsec: 2_000_000_000,
        };
        assert_eq!(futex(&word, WAIT, 1, &bad), (-1, libc::EINVAL));
    });
}

#[test]
fn a_green_futex_waiter_is_woken_by_another_runtime_on_another_os_thread() {
    let word = Arc::new(AtomicU32::new(0));
    let waiting = Arc::new(AtomicBool::new(false));
    let other_runtime = std::thread::spawn({
        let (word, waiting) = (word.clone(), waiting.clone());
        move || {
            greenweave::run(move || {
                // Waits for the first runtime's green thread to be on the table.
                while !waiting.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(Duration::from_millis(5));
                word.store(1, Ordering::Release);
                futex(&word, WAKE, 1, std::ptr::null()).0
            })
        }
    });
    greenweave::run(|| {
        waiting.store(true, Ordering::Release);
        while word.load(Ordering::Acquire) == 0 {
            futex(&word, WAIT, 0, std::ptr::null());
        }
    });
    assert!(other_runtime.join().unwrap() <= 1);
}

#[test]
fn cmp_requeue_moves_green_waiters_to_the_second_word() {
    greenweave::run(|| {
        let first = Arc::new(AtomicU32::new(0));
        let second = Arc::new(AtomicU32::new(0));
        let log = Log::default();
        let waiters: Vec<_> = (0..3)
            .map(|index| {
                let (first, log) = (first.clone(), log.clone());
                greenweave::spawn(move || {
                    log.push(format!("waiting {index}"));
                    futex(&first, WAIT, 0, std::ptr::null());
                    log.push(format!("woken {index}"));
                })
            })
            .collect();
        log.wait_for("waiting 2");
        // Wake one, move the other two to `second`.
        // SAFETY: two live words.
        let moved = unsafe {
            libc::syscall(
                libc::SYS_futex,
                first.as_ptr(),
                libc::FUTEX_CMP_REQUEUE | libc::FUTEX_PRIVATE_FLAG,
                1u32,
                2usize,
                second.as_ptr(),
                0u32,
            )
        };
        assert_eq!(moved, 3);
        log.wait_for("woken 0");
        assert_eq!(futex(&first, WAKE, 10, std::ptr::null()).0, 0);
        assert_eq!(futex(&second, WAKE, 10, std::ptr::null()).0, 2);
        for waiter in waiters {
            waiter.join().unwrap();
        }
    });
}

#[test]
fn outside_a_runtime_futexes_and_other_system_calls_are_the_kernels() {
    // Two OS threads contend on a std Mutex and Condvar, as without the hooks.
    let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
    let other = {
        let pair = pair.clone();
        std::thread::spawn(move || {
            for _ in 0..1000 {
                *pair.0.lock().unwrap() += 1;
                pair.1.notify_one();
            }
        })
    };
    {
        let (lock, counted) = &*pair;
        let _done = counted
            .wait_while(lock.lock().unwrap(), |count| *count < 1000)
            .unwrap();
    }
    other.join().unwrap();
    let word = AtomicU32::new(3);
    assert_eq!(futex(&word, WAIT, 0, std::ptr::null()), (-1, libc::EAGAIN));
    let timeout = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    assert_eq!(futex(&word, WAIT, 3, &timeout), (-1, libc::ETIMEDOUT));
    assert_eq!(futex(&word, WAKE, 1, std::ptr::null()), (0, 0));
    // Other numbers pass through with their arguments: getpid, and mmap's sixth argument
    // (on the stack on x86_64) reaching the kernel as the file offset.
    // SAFETY: getpid takes nothing.
    assert_eq!(
        unsafe { libc::syscall(libc::SYS_getpid) },
        i64::from(std::process::id())
    );
    let page = 4096usize;
    // SAFETY: a fresh memfd, two pages long, mapped read-only at the second page.
    unsafe {
        let fd = libc::memfd_create(c"greenweave-syscall".as_ptr(), 0);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, (2 * page) as libc::off_t), 0);
        let marker = [7u8; 1];
        assert_eq!(
            libc::pwrite(fd, marker.as_ptr().cast(), 1, page as libc::off_t),
            1
        );
        let mapped = libc::syscall(
            libc::SYS_mmap,
            std::ptr::null::<u8>(),
            page,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            page,
        );
        assert_ne!(mapped, -1);
        assert_eq!(*(mapped as *const u8), 7);
        libc::munmap(mapped as *mut libc::c_void, page);
        libc::close(fd);
    }
}

#[test]
fn green_threads_left_waiting_on_a_std_channel_and_lock_do_not_hold_up_the_end_of_run() {
    // Nothing will ever end these waits, and a futex wait cannot be unwound (it is inside a C
    // call): each cancellation delivery wakes it once, std waits again, and shutdown gives up
    // after its deliveries, as for any green thread that will not end. `run` returns.
    let (sender, receiver) = mpsc::channel::<u32>();
    let lock = Arc::new(Mutex::new(0));
    let held = lock.clone();
    let returned = greenweave::run(move || {
        greenweave::spawn(move || receiver.recv().is_ok());
        let guard = held.lock().unwrap();
        let locker = held.clone();
        greenweave::spawn(move || *locker.lock().unwrap());
        yield_now();
        yield_now();
        std::mem::forget(guard); // the lock stays held for good
        "returned"
    });
    assert_eq!(returned, "returned");
    drop(sender);
    assert!(
        lock.try_lock().is_err(),
        "the forgotten guard still holds it"
    );
}

#[test]
fn two_green_threads_of_one_os_thread_parked_in_parking_lot_at_once_abort_saying_why() {
    // parking_lot keeps each waiter's queue record in a thread_local!, which the green threads
    // of one OS thread share: the second wait has rewritten the first's record before it reaches
    // the futex. Nothing sound can follow, so the process aborts with a message, never hangs.
    let outcome = common::run_in_child(
        "two_green_threads_of_one_os_thread_parked_in_parking_lot_at_once_abort_saying_why",
        || {
            greenweave::run(|| {
                let lock = Arc::new(parking_lot::Mutex::new(()));
                let (go, went) = greenweave::sync::mpsc::channel::<()>();
                let holder = greenweave::spawn({
                    let lock = lock.clone();
                    move || {
                        let _held = lock.lock();
                        went.recv().unwrap();
                    }
                });
                yield_now();
                let lockers: Vec<_> = (0..2)
                    .map(|_| {
                        let lock = lock.clone();
                        greenweave::spawn(move || drop(lock.lock()))
                    })
                    .collect();
                for _ in 0..5 {
                    yield_now();
                }
                go.send(()).unwrap();
                holder.join().unwrap();
                for locker in lockers {
                    locker.join().unwrap();
                }
            });
            std::process::exit(0);
        },
    );
    assert_eq!(
        outcome.signal(),
        Some(libc::SIGABRT),
        "{}",
        outcome.describe()
    );
    assert!(
        outcome.stderr.contains("thread-local storage")
            && outcome.stderr.contains("parking_lot")
            && outcome.stderr.contains("greenweave::unblock"),
        "{}",
        outcome.describe()
    );
}

#[test]
fn parking_lot_waits_spread_one_per_os_thread_through_unblock_all_end() {
    // The way out the abort message names: each wait on an OS thread of its own.
    greenweave::run(|| {
        let pair = Arc::new((parking_lot::Mutex::new(0u32), parking_lot::Condvar::new()));
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let pair = pair.clone();
                greenweave::spawn(move || {
                    greenweave::unblock(move || {
                        let mut value = pair.0.lock();
                        pair.1.wait_while(&mut value, |value| *value == 0);
                        *value
                    })
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(10));
        *pair.0.lock() = 9;
        pair.1.notify_all();
        for waiter in waiters {
            assert_eq!(waiter.join().unwrap(), 9);
        }
    });
}

#[test]
fn wake_op_changes_the_second_word_and_wakes_its_waiters_only_when_the_comparison_holds() {
    // FUTEX_OP_SET (0, bits 28-31) with argument 1 (bits 12-23), compared with
    // FUTEX_OP_CMP_EQ (0, bits 24-27) against 0 (bits 0-11): the old value.
    const SET_1_IF_WAS_0: u32 = 1 << 12;
    const WAKE_OP: i32 = libc::FUTEX_WAKE_OP | libc::FUTEX_PRIVATE_FLAG;
    let wake_op = |first: &AtomicU32, second: &AtomicU32| {
        // SAFETY: two live words; the fourth argument is the second word's wake count.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                first.as_ptr(),
                WAKE_OP,
                1u32,
                1usize,
                second.as_ptr(),
                SET_1_IF_WAS_0,
            )
        }
    };
    greenweave::run(move || {
        let first = Arc::new(AtomicU32::new(0));
        let second = Arc::new(AtomicU32::new(0));
        let log = Log::default();
        let waiters: Vec<_> = [("first", first.clone()), ("second", second.clone())]
            .into_iter()
            .map(|(name, word)| {
                let log = log.clone();
                greenweave::spawn(move || {
                    log.push(format!("waiting {name}"));
                    futex(&word, WAIT, 0, std::ptr::null());
                    log.push(format!("woken {name}"));
                })
            })
            .collect();
        log.wait_for("waiting second");
        // The second word was 0: it becomes 1, and both words' waiters are woken.
        assert_eq!(wake_op(&first, &second), 2);
        assert_eq!(second.load(Ordering::SeqCst), 1);
        for waiter in waiters {
            waiter.join().unwrap();
        }
        // Now it was 1: the comparison fails, the second word's new waiter stays.
        let log = Log::default();
        let waiter = greenweave::spawn({
            let (second, log) = (second.clone(), log.clone());
            move || {
                log.push("waiting");
                futex(&second, WAIT, 1, std::ptr::null());
                log.push("woken");
            }
        });
        log.wait_for("waiting");
        assert_eq!(wake_op(&first, &second), 0);
        assert!(!log.contains("woken"));
        assert_eq!(futex(&second, WAKE, 1, std::ptr::null()).0, 1);
        waiter.join().unwrap();
        assert_eq!(log.events(), ["waiting", "woken"]);
    });
}

#[test]
fn an_unlock_wakes_a_waiting_os_thread_before_a_green_waiter_whose_os_thread_it_is() {
    // Green thread A waits on a std Mutex (parked, in the futex table). Green thread B of the
    // same OS thread unwinds through a destructor that locks the same Mutex: while unwinding
    // a green thread never parks, so that wait is the kernel's, and it blocks A's OS thread.
    // When the holder, a plain OS thread, unlocks, its one wake must go to the kernel waiter:
    // given to A instead, it would wake a green thread whose OS thread sleeps in the kernel on
    // that very lock, for ever. In a child process, whose holder ends it if it hangs.
    let outcome = common::run_in_child(
        "an_unlock_wakes_a_waiting_os_thread_before_a_green_waiter_whose_os_thread_it_is",
        || {
            struct LockOnDrop(Arc<Mutex<u32>>, Arc<AtomicUsize>);
            impl Drop for LockOnDrop {
                fn drop(&mut self) {
                    self.1.fetch_add(1, Ordering::SeqCst); // B is unwinding, about to lock
                    *self.0.lock().unwrap_or_else(|p| p.into_inner()) += 10;
                }
            }
            let lock = Arc::new(Mutex::new(0));
            let waiting = Arc::new(AtomicUsize::new(0));
            let done = Arc::new(AtomicBool::new(false));
            let holder = {
                let (lock, waiting, done) = (lock.clone(), waiting.clone(), done.clone());
                let (held, hold) = mpsc::channel();
                let holder = std::thread::spawn(move || {
                    let guard = lock.lock().unwrap();
                    held.send(()).unwrap();
                    while waiting.load(Ordering::SeqCst) < 2 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    // Lets B's lock reach its wait in the kernel.
                    std::thread::sleep(Duration::from_millis(200));
                    drop(guard);
                    for _ in 0..2000 {
                        if done.load(Ordering::SeqCst) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    eprintln!("the runtime's OS thread never got the lock: deadlock");
                    std::process::exit(3);
                });
                hold.recv().unwrap();
                holder
            };
            greenweave::run({
                let (lock, waiting) = (lock.clone(), waiting.clone());
                move || {
                    let a = greenweave::spawn({
                        let (lock, waiting) = (lock.clone(), waiting.clone());
                        move || {
                            waiting.fetch_add(1, Ordering::SeqCst);
                            *lock.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                        }
                    });
                    yield_now();
                    let b = greenweave::spawn(move || {
                        let _locks = LockOnDrop(lock, waiting);
                        panic!("B unwinds");
                    });
                    assert!(b.join().is_err(), "B panicked");
                    a.join().unwrap();
                }
            });
            done.store(true, Ordering::SeqCst);
            holder.join().unwrap();
            assert_eq!(*lock.lock().unwrap(), 11);
            std::process::exit(0);
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
}
