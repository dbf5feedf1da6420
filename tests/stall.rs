//! The stall report (`runtime::Builder::stall_report`, `GREENWEAVE_STALL_REPORT_MS`): a green
//! thread that runs ten times the threshold without parking is named on stderr, once, with
//! the system call its OS thread is blocked in (or that it computes); nothing is printed when
//! the report is off or when green threads park often. And `runtime::is_in_runtime` /
//! `is_in_green_thread`, which say where code runs.
//!
//! Each workload runs in a child process (tests/common), whose stderr the test reads. Stalls
//! last ten times the threshold and the quiet workload parks two hundred times per threshold,
//! so machine noise cannot flip an outcome; nothing here asserts a duration.
//!
//! Under qemu-user (the aarch64 suite on an x86_64 host) `/proc/self/task/*/syscall` is the
//! host kernel's, in the host's numbering: the report then says "blocked in a system call
//! (which one is unknown ...)" instead of a name, and the tests that check a name accept that
//! wording too ([`assert_blocked_in`]). The report uses it only when its own check found the
//! numbers foreign, so a native run must name the call.

mod common;

use std::time::{Duration, Instant};

use common::{ChildOutcome, run_in_child};
use greenweave::Runtime;

const WITHOUT_PARKING: &str = "without parking";

/// Holds the OS thread for `duration` without parking, with or without the `hooks` feature
/// (std's sleep would park with it): a loop on the clock.
#[inline(never)]
fn block_the_os_thread_for(duration: Duration) {
    let start = Instant::now();
    while start.elapsed() < duration {
        std::hint::spin_loop();
    }
}

/// Runs `main` on a runtime with the stall report at `threshold` (if any), then ends the child
/// process with status 0.
fn run_and_exit(threshold: Option<Duration>, main: impl FnOnce() + 'static) -> ! {
    let mut builder = Runtime::builder();
    if let Some(threshold) = threshold {
        builder = builder.stall_report(threshold);
    }
    builder.build().expect("a runtime").run(main);
    std::process::exit(0);
}

/// A green thread named "stuck" that blocks its OS thread for 500 ms, then parks (a yield),
/// next to another that is held up meanwhile.
fn stuck_then_parks() {
    let stuck = greenweave::thread::Builder::new()
        .name("stuck".into())
        .spawn(|| {
            block_the_os_thread_for(Duration::from_millis(500));
            greenweave::thread::yield_now();
        })
        .expect("a green thread");
    let other = greenweave::spawn(|| greenweave::thread::sleep(Duration::from_millis(1)));
    stuck.join().unwrap();
    other.join().unwrap();
}

fn assert_exited_cleanly(outcome: &ChildOutcome) {
    assert!(
        outcome.status.success(),
        "the child should exit with status 0\n{}",
        outcome.describe()
    );
}

fn report_lines(outcome: &ChildOutcome) -> usize {
    outcome.stderr.matches(WITHOUT_PARKING).count()
}

/// Asserts that the report says the green thread's OS thread was blocked in system call
/// `name`, or, where `/proc` numbers calls as another architecture does (qemu-user), in some
/// system call.
fn assert_blocked_in(outcome: &ChildOutcome, name: &str) {
    let named = format!("without parking, blocked in the system call {name};");
    let under_emulation = "without parking, blocked in a system call (which one is unknown: \
                           /proc numbers system calls as another architecture does";
    assert!(
        outcome.stderr.contains(&named) || outcome.stderr.contains(under_emulation),
        "the report should say the OS thread is blocked in {name}\n{}",
        outcome.describe()
    );
}

#[test]
fn a_green_thread_running_ten_thresholds_without_parking_is_named_once_on_stderr() {
    let outcome = run_in_child(
        "a_green_thread_running_ten_thresholds_without_parking_is_named_once_on_stderr",
        || run_and_exit(Some(Duration::from_millis(50)), stuck_then_parks),
    );
    assert_exited_cleanly(&outcome);
    assert!(
        outcome
            .stderr
            .contains("greenweave: green thread 'stuck' (id ")
            && outcome.stderr.contains("is holding up every green thread"),
        "the report should name the stuck green thread\n{}",
        outcome.describe()
    );
    assert_eq!(
        report_lines(&outcome),
        1,
        "one stall, one report\n{}",
        outcome.describe()
    );
}

#[test]
fn a_reported_stall_is_followed_by_a_backtrace_of_the_park_that_ended_it() {
    let outcome = run_in_child(
        "a_reported_stall_is_followed_by_a_backtrace_of_the_park_that_ended_it",
        || run_and_exit(Some(Duration::from_millis(50)), stuck_then_parks),
    );
    assert_exited_cleanly(&outcome);
    let report = outcome
        .stderr
        .find(WITHOUT_PARKING)
        .unwrap_or_else(|| panic!("the stall should be reported\n{}", outcome.describe()));
    let end = outcome
        .stderr
        .find("green thread 'stuck' (id ")
        .and_then(|_| outcome.stderr.find("parked after a stall of at least"))
        .unwrap_or_else(|| panic!("the stall's end should be reported\n{}", outcome.describe()));
    assert!(
        report < end,
        "the stall is reported before its end\n{}",
        outcome.describe()
    );
    // The park's backtrace goes through the green thread's own code, the closure of
    // `stuck_then_parks`, right after the call that blocked.
    assert!(
        outcome.stderr[end..].contains("stuck_then_parks"),
        "the backtrace should show where the green thread parked\n{}",
        outcome.describe()
    );
}

#[test]
fn an_unnamed_green_thread_is_reported_by_its_id() {
    let outcome = run_in_child("an_unnamed_green_thread_is_reported_by_its_id", || {
        run_and_exit(Some(Duration::from_millis(50)), || {
            // Green thread 1 is main, named "main"; this one is 2.
            greenweave::spawn(|| block_the_os_thread_for(Duration::from_millis(500)))
                .join()
                .unwrap();
        })
    });
    assert_exited_cleanly(&outcome);
    assert!(
        outcome.stderr.contains(
            "greenweave: green thread <unnamed> (id 2) has held its OS thread for at least"
        ),
        "the report should name the green thread by its id\n{}",
        outcome.describe()
    );
    assert_eq!(report_lines(&outcome), 1, "{}", outcome.describe());
}

#[test]
fn a_stall_that_ends_with_the_green_thread_finishing_says_so() {
    let outcome = run_in_child(
        "a_stall_that_ends_with_the_green_thread_finishing_says_so",
        || {
            run_and_exit(Some(Duration::from_millis(50)), || {
                let stuck = greenweave::thread::Builder::new()
                    .name("stuck".into())
                    .spawn(|| block_the_os_thread_for(Duration::from_millis(500)))
                    .expect("a green thread");
                stuck.join().unwrap();
            })
        },
    );
    assert_exited_cleanly(&outcome);
    assert_eq!(report_lines(&outcome), 1, "{}", outcome.describe());
    assert!(
        outcome
            .stderr
            .contains("green thread 'stuck' (id 2) finished after a stall of at least"),
        "the stall's end should be reported\n{}",
        outcome.describe()
    );
}

#[test]
fn a_stall_is_reported_while_the_runtime_thread_holds_the_stderr_lock() {
    let outcome = run_in_child(
        "a_stall_is_reported_while_the_runtime_thread_holds_the_stderr_lock",
        || {
            // std's stderr lock is reentrant: the green threads (on this OS thread) can still
            // print, and the watchdog must not wait for it.
            let stderr = std::io::stderr().lock();
            Runtime::builder()
                .stall_report(Duration::from_millis(50))
                .build()
                .expect("a runtime")
                .run(stuck_then_parks);
            drop(stderr);
            std::process::exit(0);
        },
    );
    assert_exited_cleanly(&outcome);
    assert!(
        outcome.stderr.contains("green thread 'stuck'"),
        "the report should name the stuck green thread\n{}",
        outcome.describe()
    );
    assert_eq!(report_lines(&outcome), 1, "{}", outcome.describe());
}

/// With the `hooks` feature a std lock's futex wait parks the green thread (`hooks::futex`):
/// nothing to report then.
#[cfg(not(feature = "hooks"))]
#[test]
fn a_green_thread_blocked_on_a_std_mutex_is_reported_in_the_system_call_futex() {
    let outcome = run_in_child(
        "a_green_thread_blocked_on_a_std_mutex_is_reported_in_the_system_call_futex",
        || {
            run_and_exit(Some(Duration::from_millis(50)), || {
                let lock = std::sync::Arc::new(std::sync::Mutex::new(()));
                let held = lock.clone();
                let (locked, is_locked) = std::sync::mpsc::channel();
                // Another OS thread holds the lock for 500 ms; the green thread waits on it, which
                // is a futex wait no hook can turn into a park.
                let holder = std::thread::spawn(move || {
                    let _guard = held.lock().unwrap();
                    locked.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(500));
                });
                is_locked.recv().unwrap();
                let waiter = greenweave::thread::Builder::new()
                    .name("waiter".into())
                    .spawn(move || drop(lock.lock().unwrap()))
                    .expect("a green thread");
                waiter.join().unwrap();
                holder.join().unwrap();
            })
        },
    );
    assert_exited_cleanly(&outcome);
    assert!(
        outcome.stderr.contains("green thread 'waiter'"),
        "the report should name the waiting green thread\n{}",
        outcome.describe()
    );
    assert_blocked_in(&outcome, "futex");
    assert_eq!(report_lines(&outcome), 1, "{}", outcome.describe());
}

/// As above: with the `hooks` feature a raw futex wait from a green thread parks.
#[cfg(not(feature = "hooks"))]
#[test]
fn a_green_thread_in_a_raw_futex_wait_is_reported_in_the_system_call_futex() {
    let outcome = run_in_child(
        "a_green_thread_in_a_raw_futex_wait_is_reported_in_the_system_call_futex",
        || {
            run_and_exit(Some(Duration::from_millis(50)), || {
                let waiter = greenweave::thread::Builder::new()
                    .name("db".into())
                    .spawn(|| {
                        // A wait on a word no one wakes, for ten thresholds.
                        let word = std::sync::atomic::AtomicU32::new(0);
                        let timeout = libc::timespec {
                            tv_sec: 0,
                            tv_nsec: 500_000_000,
                        };
                        // SAFETY: FUTEX_WAIT reads the word (alive, aligned) and the relative
                        // timeout (alive); it returns ETIMEDOUT, or EINTR, touching nothing.
                        unsafe {
                            libc::syscall(
                                libc::SYS_futex,
                                word.as_ptr(),
                                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                                0_u32,
                                &raw const timeout,
                            )
                        }
                    })
                    .expect("a green thread");
                waiter.join().unwrap();
            })
        },
    );
    assert_exited_cleanly(&outcome);
    assert!(
        outcome
            .stderr
            .contains("greenweave: green thread 'db' (id 2) has held its OS thread"),
        "the report should name the waiting green thread\n{}",
        outcome.describe()
    );
    assert_blocked_in(&outcome, "futex");
    assert!(
        outcome.stderr.contains("greenweave::sync"),
        "a futex wait's report should point at greenweave::sync\n{}",
        outcome.describe()
    );
    assert_eq!(report_lines(&outcome), 1, "{}", outcome.describe());
}

#[test]
fn a_green_thread_in_a_call_the_hooks_do_not_cover_is_reported_in_that_call() {
    let outcome = run_in_child(
        "a_green_thread_in_a_call_the_hooks_do_not_cover_is_reported_in_that_call",
        || {
            run_and_exit(Some(Duration::from_millis(50)), || {
                greenweave::spawn(|| {
                    // A wait for a signal no one sends, for ten thresholds: a system call that
                    // blocks the OS thread with or without the hooks.
                    // SAFETY: a zeroed sigset_t is a valid value for sigemptyset to fill.
                    let mut signals: libc::sigset_t = unsafe { std::mem::zeroed() };
                    let timeout = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 500_000_000,
                    };
                    // SAFETY: the set and the timeout are alive; a null siginfo is allowed.
                    unsafe {
                        libc::sigemptyset(&raw mut signals);
                        libc::sigaddset(&raw mut signals, libc::SIGUSR2);
                        libc::sigtimedwait(
                            &raw const signals,
                            std::ptr::null_mut(),
                            &raw const timeout,
                        )
                    }
                })
                .join()
                .unwrap();
            })
        },
    );
    assert_exited_cleanly(&outcome);
    assert!(
        outcome.stderr.contains("green thread <unnamed> (id 2)"),
        "the report should name the waiting green thread\n{}",
        outcome.describe()
    );
    assert_blocked_in(&outcome, "rt_sigtimedwait");
    assert_eq!(report_lines(&outcome), 1, "{}", outcome.describe());
}

#[test]
fn a_green_thread_spinning_in_its_own_code_is_reported_as_running_it() {
    let outcome = run_in_child(
        "a_green_thread_spinning_in_its_own_code_is_reported_as_running_it",
        || {
            run_and_exit(Some(Duration::from_millis(50)), || {
                let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let set = done.clone();
                // The spinner makes no system call at all (not even a clock read): an OS
                // thread ends it after ten thresholds.
                let timer = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(500));
                    set.store(true, std::sync::atomic::Ordering::Release);
                });
                let spinner = greenweave::thread::Builder::new()
                    .name("spinner".into())
                    .spawn(move || {
                        while !done.load(std::sync::atomic::Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                    })
                    .expect("a green thread");
                spinner.join().unwrap();
                timer.join().unwrap();
            })
        },
    );
    assert_exited_cleanly(&outcome);
    assert!(
        outcome.stderr.contains(
            "greenweave: green thread 'spinner' (id 2) has held its OS thread for at least"
        ) && outcome
            .stderr
            .contains("without parking, running its own code in user space, in no system call;")
            && outcome.stderr.contains("greenweave::thread::yield_now"),
        "the report should say the green thread computes\n{}",
        outcome.describe()
    );
    assert_eq!(report_lines(&outcome), 1, "{}", outcome.describe());
}

/// Spins until `done` is set, in no system call; never inlined, so its name is the one the
/// report finds at the sampled program counter (or a function it calls, in a debug build).
#[inline(never)]
fn spins_in_its_own_function(done: &std::sync::atomic::AtomicBool) {
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        std::hint::spin_loop();
    }
}

#[test]
fn with_a_dump_signal_a_spinning_green_thread_is_reported_with_where_it_runs() {
    let outcome = run_in_child(
        "with_a_dump_signal_a_spinning_green_thread_is_reported_with_where_it_runs",
        || {
            // The dump's signal is greenweave's own: the report may ask the thread with it.
            let runtime = Runtime::builder()
                .stall_report(Duration::from_millis(50))
                .dump_on_signal(libc::SIGUSR2)
                .build()
                .expect("a runtime");
            runtime.run(|| {
                let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let set = done.clone();
                let timer = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(500));
                    set.store(true, std::sync::atomic::Ordering::Release);
                });
                let spinner = greenweave::thread::Builder::new()
                    .name("spinner".into())
                    .spawn(move || spins_in_its_own_function(&done))
                    .expect("a green thread");
                spinner.join().unwrap();
                timer.join().unwrap();
            });
            std::process::exit(0);
        },
    );
    assert_exited_cleanly(&outcome);
    let line = outcome
        .stderr
        .lines()
        .find(|line| line.contains("has held its OS thread for at least"))
        .unwrap_or_else(|| panic!("no stall report\n{}", outcome.describe()));
    assert!(
        line.contains(
            "without parking, running its own code in user space, in no system call, at 0x"
        ),
        "the report should give the program counter\n{line}"
    );
    assert!(
        [
            "spins_in_its_own_function",
            "core::sync::atomic",
            "spin_loop"
        ]
        .iter()
        .any(|function| line.contains(function)),
        "the report should name the spinner's function\n{line}"
    );
}

#[test]
fn without_the_stall_report_a_stuck_green_thread_prints_nothing() {
    let outcome = run_in_child(
        "without_the_stall_report_a_stuck_green_thread_prints_nothing",
        || run_and_exit(None, stuck_then_parks),
    );
    assert_exited_cleanly(&outcome);
    assert!(
        !outcome.stderr.contains("greenweave:"),
        "nothing should be reported\n{}",
        outcome.describe()
    );
}

#[test]
fn green_threads_that_park_every_millisecond_are_never_reported() {
    let outcome = run_in_child(
        "green_threads_that_park_every_millisecond_are_never_reported",
        || {
            run_and_exit(Some(Duration::from_millis(200)), || {
                let start = Instant::now();
                let busy = greenweave::spawn(move || {
                    let mut yields = 0_u64;
                    while start.elapsed() < Duration::from_millis(600) {
                        block_the_os_thread_for(Duration::from_millis(1));
                        greenweave::thread::yield_now();
                        yields += 1;
                    }
                    yields
                });
                let sleeper = greenweave::spawn(move || {
                    let mut sleeps = 0_u64;
                    while start.elapsed() < Duration::from_millis(600) {
                        greenweave::thread::sleep(Duration::from_millis(1));
                        sleeps += 1;
                    }
                    sleeps
                });
                assert!(busy.join().unwrap() > 0);
                assert!(sleeper.join().unwrap() > 0);
            })
        },
    );
    assert_exited_cleanly(&outcome);
    assert!(
        !outcome.stderr.contains("greenweave:"),
        "nothing should be reported\n{}",
        outcome.describe()
    );
}

#[test]
fn a_runtime_waiting_for_events_is_not_a_stall() {
    let outcome = run_in_child("a_runtime_waiting_for_events_is_not_a_stall", || {
        // The only green thread sleeps for ten thresholds: the scheduler waits in epoll, which
        // is no green thread running.
        run_and_exit(Some(Duration::from_millis(50)), || {
            greenweave::thread::sleep(Duration::from_millis(500))
        })
    });
    assert_exited_cleanly(&outcome);
    assert!(
        !outcome.stderr.contains("greenweave:"),
        "nothing should be reported\n{}",
        outcome.describe()
    );
}

#[test]
fn the_environment_variable_turns_the_stall_report_on() {
    let outcome = run_in_child("the_environment_variable_turns_the_stall_report_on", || {
        // SAFETY: this child process runs only this test (`--exact`, one test thread) and no
        // runtime yet, so no other thread reads or writes the environment meanwhile.
        unsafe { std::env::set_var("GREENWEAVE_STALL_REPORT_MS", "50") };
        greenweave::run(stuck_then_parks);
        std::process::exit(0);
    });
    assert_exited_cleanly(&outcome);
    assert!(
        outcome.stderr.contains("green thread 'stuck'"),
        "the report should name the stuck green thread\n{}",
        outcome.describe()
    );
    assert_eq!(report_lines(&outcome), 1, "{}", outcome.describe());
}

#[test]
fn the_environment_variable_at_zero_turns_a_configured_stall_report_off() {
    let outcome = run_in_child(
        "the_environment_variable_at_zero_turns_a_configured_stall_report_off",
        || {
            // SAFETY: as in `the_environment_variable_turns_the_stall_report_on`.
            unsafe { std::env::set_var("GREENWEAVE_STALL_REPORT_MS", "0") };
            run_and_exit(Some(Duration::from_millis(50)), stuck_then_parks)
        },
    );
    assert_exited_cleanly(&outcome);
    assert!(
        !outcome.stderr.contains("greenweave:"),
        "nothing should be reported\n{}",
        outcome.describe()
    );
}

#[test]
fn is_in_runtime_is_false_outside_any_runtime() {
    assert!(!greenweave::runtime::is_in_runtime());
    assert!(!greenweave::runtime::is_in_green_thread());
}

#[test]
fn is_in_runtime_is_true_in_green_threads_and_false_on_os_threads_they_start() {
    let (main, spawned, os_thread) = greenweave::run(|| {
        let main = (
            greenweave::runtime::is_in_runtime(),
            greenweave::runtime::is_in_green_thread(),
        );
        let spawned = greenweave::spawn(|| {
            (
                greenweave::runtime::is_in_runtime(),
                greenweave::runtime::is_in_green_thread(),
            )
        })
        .join()
        .unwrap();
        let os_thread = std::thread::spawn(|| {
            (
                greenweave::runtime::is_in_runtime(),
                greenweave::runtime::is_in_green_thread(),
            )
        })
        .join()
        .unwrap();
        (main, spawned, os_thread)
    });
    assert_eq!(main, (true, true), "the main green thread");
    assert_eq!(spawned, (true, true), "a spawned green thread");
    assert_eq!(
        os_thread,
        (false, false),
        "a std thread started in a green thread"
    );
    // The scheduler itself (true, false) runs no user code a test can reach.
}
