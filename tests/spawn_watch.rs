//! The tests' guard against qemu-user's fork deadlock (`tests/common/spawn_watch.rs`): a child
//! that never reaches its `exec` is killed and the command spawned again, instead of
//! `Command::spawn` waiting for it forever.
//!
//! The stuck child is made on purpose: a `pre_exec` hook, which runs in the child between
//! `fork` and `exec`, waits forever in `pause` on the attempts the test chooses.

#[path = "common/spawn_watch.rs"]
mod spawn_watch;

use std::fs;
use std::io::ErrorKind;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Short, so the tests are quick; long enough for a good child to reach `exec` under qemu
/// and Valgrind (a child that did not would be killed and the test would fail, not hang).
const LIMIT: Duration = Duration::from_secs(3);

/// A `true` whose first `stuck_attempts` children wait forever before their `exec`. The
/// attempts are counted by the files `count-0`, `count-1`, ... that each child creates in
/// `dir` (`O_CREAT | O_EXCL`, async-signal-safe like `pause`).
fn true_stuck_on_first_attempts(dir: &PathBuf, stuck_attempts: usize) -> Command {
    fs::create_dir_all(dir).unwrap();
    let counters: Vec<std::ffi::CString> = (0..spawn_watch::TRIES + 1)
        .map(|n| std::ffi::CString::new(format!("{}/count-{n}", dir.display())).unwrap())
        .collect();
    let mut command = Command::new("true");
    // SAFETY: the hook calls only open, close and pause, which are async-signal-safe, and
    // reads only `counters`, which the fork copied whole.
    unsafe {
        command.pre_exec(move || {
            for (attempt, counter) in counters.iter().enumerate() {
                let fd = libc::open(
                    counter.as_ptr(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                    0o600,
                );
                if fd >= 0 {
                    libc::close(fd);
                    if attempt < stuck_attempts {
                        loop {
                            libc::pause();
                        }
                    }
                    return Ok(());
                }
            }
            Ok(())
        });
    }
    command
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spawn-watch-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn attempts_made(dir: &PathBuf) -> usize {
    fs::read_dir(dir).unwrap().count()
}

#[test]
fn a_child_stuck_before_exec_is_killed_and_the_command_spawned_again() {
    let dir = scratch_dir("once");
    let mut command = true_stuck_on_first_attempts(&dir, 1);
    let mut child = spawn_watch::spawn_within(&mut command, LIMIT).expect("the second try runs");
    assert!(child.wait().unwrap().success());
    assert_eq!(attempts_made(&dir), 2, "one stuck child, then one that ran");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_command_whose_children_always_stick_fails_saying_so_after_every_try() {
    let dir = scratch_dir("always");
    let mut command = true_stuck_on_first_attempts(&dir, spawn_watch::TRIES);
    let error = spawn_watch::spawn_within(&mut command, LIMIT).expect_err("every try sticks");
    assert_eq!(error.kind(), ErrorKind::Other);
    assert!(
        error.to_string().contains("stuck between fork and exec"),
        "{error}"
    );
    assert_eq!(attempts_made(&dir), spawn_watch::TRIES);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_child_that_execs_is_spawned_once() {
    let dir = scratch_dir("never");
    let mut command = true_stuck_on_first_attempts(&dir, 0);
    let mut child = spawn_watch::spawn_within(&mut command, LIMIT).expect("it runs");
    assert!(child.wait().unwrap().success());
    assert_eq!(attempts_made(&dir), 1);
    fs::remove_dir_all(&dir).unwrap();
}
