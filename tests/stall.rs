//! The stall report (`runtime::Builder::stall_report`, `GREENWEAVE_STALL_REPORT_MS`): a green
//! thread that runs ten times the threshold without parking is named on stderr, once; nothing
//! is printed when the report is off or when green threads park often.
//!
//! Each workload runs in a child process (tests/common), whose stderr the test reads. Stalls
//! last ten times the threshold and the quiet workload parks two hundred times per threshold,
//! so machine noise cannot flip an outcome; nothing here asserts a duration.

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
        outcome
            .stderr
            .contains("greenweave: green thread <unnamed> (id 2) has run for at least"),
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

#[test]
fn a_green_thread_blocked_on_a_std_mutex_is_reported() {
    let outcome = run_in_child("a_green_thread_blocked_on_a_std_mutex_is_reported", || {
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
    });
    assert_exited_cleanly(&outcome);
    assert!(
        outcome.stderr.contains("green thread 'waiter'"),
        "the report should name the waiting green thread\n{}",
        outcome.describe()
    );
    assert_eq!(report_lines(&outcome), 1, "{}", outcome.describe());
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
