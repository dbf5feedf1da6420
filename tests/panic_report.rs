//! How a panic in a green thread is reported on stderr: under the green thread's name when the
//! program kept std's panic hook, by the program's own hook when it installed one.
//!
//! Each test runs in a child process (see `common`): the panic hook is process-wide, and the
//! report goes to the child's stderr, which the parent reads.

mod common;

use common::run_in_child;

/// Spawns a green thread called `name` (unnamed for `None`) that panics with "boom", joins
/// it, and exits with 0 if the join reported the panic.
fn panic_in_a_green_thread(name: Option<&'static str>) -> ! {
    let reported = greenweave::run(move || {
        let builder = match name {
            Some(name) => greenweave::thread::Builder::new().name(name.to_owned()),
            None => greenweave::thread::Builder::new(),
        };
        let worker = builder.spawn(|| -> () { panic!("boom") }).unwrap();
        worker.join().is_err()
    });
    std::process::exit(if reported { 0 } else { 1 });
}

/// Sets `RUST_BACKTRACE` in the child before anything panics.
fn set_rust_backtrace(value: &str) {
    // SAFETY: called in the child before it starts any thread of its own or panics; libtest's
    // main thread is waiting for this test and reads no environment meanwhile.
    unsafe { std::env::set_var("RUST_BACKTRACE", value) };
}

/// The lines of `stderr` that report a panic.
fn panic_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|line| line.contains("panicked at"))
        .collect()
}

#[test]
fn a_panicking_green_thread_is_reported_under_its_own_name_in_stds_format() {
    let outcome = run_in_child(
        "a_panicking_green_thread_is_reported_under_its_own_name_in_stds_format",
        || {
            set_rust_backtrace("0");
            panic_in_a_green_thread(Some("worker-3"));
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
    let lines = panic_lines(&outcome.stderr);
    assert_eq!(lines.len(), 1, "one report\n{}", outcome.describe());
    assert!(
        lines[0].starts_with("thread '")
            && lines[0].contains("), green thread 'worker-3' (id ")
            && lines[0].contains("), panicked at tests/panic_report.rs:"),
        "{}",
        outcome.describe()
    );
    assert!(
        outcome.stderr.contains(&format!(
            "{}\nboom\nnote: run with `RUST_BACKTRACE=1` environment variable to display a \
             backtrace\n",
            lines[0]
        )),
        "the message and std's note follow\n{}",
        outcome.describe()
    );
}

#[test]
fn a_panicking_green_thread_prints_a_backtrace_when_rust_backtrace_asks_for_one() {
    let outcome = run_in_child(
        "a_panicking_green_thread_prints_a_backtrace_when_rust_backtrace_asks_for_one",
        || {
            set_rust_backtrace("1");
            panic_in_a_green_thread(Some("worker-3"));
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
    let report = outcome
        .stderr
        .split_once("green thread 'worker-3'")
        .map(|(_, report)| report)
        .unwrap_or_else(|| panic!("no report\n{}", outcome.describe()));
    assert!(
        report.contains("\nboom\nstack backtrace:\n"),
        "{}",
        outcome.describe()
    );
}

#[test]
fn an_unnamed_panicking_green_thread_is_reported_as_unnamed_with_its_id() {
    let outcome = run_in_child(
        "an_unnamed_panicking_green_thread_is_reported_as_unnamed_with_its_id",
        || panic_in_a_green_thread(None),
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
    let lines = panic_lines(&outcome.stderr);
    assert_eq!(lines.len(), 1, "one report\n{}", outcome.describe());
    assert!(
        lines[0].contains("), green thread <unnamed> (id "),
        "{}",
        outcome.describe()
    );
}

#[test]
fn a_hook_the_program_installed_before_run_is_called_for_green_threads_unchanged() {
    let outcome = run_in_child(
        "a_hook_the_program_installed_before_run_is_called_for_green_threads_unchanged",
        || {
            std::panic::set_hook(Box::new(|info| {
                let message = info.payload().downcast_ref::<&str>().copied();
                eprintln!("the program's hook saw {message:?}");
            }));
            panic_in_a_green_thread(Some("worker-3"));
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
    assert!(
        outcome
            .stderr
            .contains("the program's hook saw Some(\"boom\")"),
        "{}",
        outcome.describe()
    );
    assert!(
        panic_lines(&outcome.stderr).is_empty(),
        "no report but the program's\n{}",
        outcome.describe()
    );
}

#[test]
fn a_panic_outside_green_threads_gets_stds_report_once_run_installed_its_hook() {
    let outcome = run_in_child(
        "a_panic_outside_green_threads_gets_stds_report_once_run_installed_its_hook",
        || {
            greenweave::run(|| ());
            let outcome = std::thread::Builder::new()
                .name("plain".to_owned())
                .spawn(|| -> () { panic!("outside") })
                .unwrap()
                .join();
            std::process::exit(if outcome.is_err() { 0 } else { 1 });
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
    let lines = panic_lines(&outcome.stderr);
    assert_eq!(lines.len(), 1, "one report\n{}", outcome.describe());
    assert!(
        lines[0].starts_with("thread 'plain' (") && !lines[0].contains("green thread"),
        "{}",
        outcome.describe()
    );
}

#[test]
fn a_green_thread_panic_reported_to_a_closed_stderr_pipe_is_still_only_a_panic() {
    let outcome = run_in_child(
        "a_green_thread_panic_reported_to_a_closed_stderr_pipe_is_still_only_a_panic",
        || {
            // stderr becomes a pipe nobody reads: every write to it fails with EPIPE (Rust
            // programs ignore SIGPIPE).
            let mut ends = [0; 2];
            // SAFETY: `ends` has room for the two descriptors; closing the read end and
            // moving the write end onto fd 2 touch only descriptors this child owns.
            unsafe {
                assert_eq!(libc::pipe(ends.as_mut_ptr()), 0);
                libc::close(ends[0]);
                assert_eq!(
                    libc::dup2(ends[1], libc::STDERR_FILENO),
                    libc::STDERR_FILENO
                );
            }
            panic_in_a_green_thread(Some("worker-3"));
        },
    );
    assert!(
        outcome.status.success(),
        "the panic was joined, not turned into an abort\n{}",
        outcome.describe()
    );
}
