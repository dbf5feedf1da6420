//! The tests' guard against qemu-user's fork deadlock (`tests/common/spawn_watch.rs`): a child
//! that never reaches its `exec` is killed and the command spawned again, instead of
//! `Command::spawn` waiting for it forever.
//!
//! The stuck child is made on purpose: a `pre_exec` hook, which runs in the child between
//! `fork` and `exec`, waits forever in `pause` on the attempts the test chooses. A spawn held
//! up after its `exec` (another process holds the pipe `Command::spawn` waits on, as another
//! test's stuck child does when it was forked while this spawn forked) is made with a hook that
//! forks a grandchild which keeps that pipe open for a while.

#[path = "common/spawn_watch.rs"]
mod spawn_watch;

use std::fs;
use std::io::ErrorKind;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Short, so the tests are quick; long enough for a good child to reach `exec` under qemu
/// and Valgrind (a child that did not would be killed and the test would fail, not hang).
const LIMIT: Duration = Duration::from_secs(3);

/// A `true` whose first `stuck_attempts` children wait forever before their `exec`. The
/// attempts are counted by the files `count-0`, `count-1`, ... that each child creates in
/// `dir` (`O_CREAT | O_EXCL`, async-signal-safe like `pause`).
fn true_stuck_on_first_attempts(dir: &Path, stuck_attempts: usize) -> Command {
    true_with_hook(dir, stuck_attempts, None)
}

/// [`true_stuck_on_first_attempts`]; with `pipe_held_for`, each child that goes on to its
/// `exec` first forks a grandchild that sleeps that long with the child's descriptors (the
/// pipe to its parent's `Command::spawn` among them), then exits.
fn true_with_hook(dir: &Path, stuck_attempts: usize, pipe_held_for: Option<Duration>) -> Command {
    let pipe_held_for = pipe_held_for.map(|hold| libc::timespec {
        tv_sec: hold.as_secs() as libc::time_t,
        tv_nsec: 0,
    });
    fs::create_dir_all(dir).unwrap();
    let counters: Vec<std::ffi::CString> = (0..spawn_watch::TRIES + 1)
        .map(|n| std::ffi::CString::new(format!("{}/count-{n}", dir.display())).unwrap())
        .collect();
    let mut command = Command::new("true");
    // SAFETY: the hook calls only open, close, pause, fork, nanosleep and _exit, which are
    // async-signal-safe, and reads only `counters` and `pipe_held_for`, which the fork copied
    // whole.
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
                    if let Some(hold) = &pipe_held_for
                        && libc::fork() == 0
                    {
                        libc::nanosleep(hold, std::ptr::null_mut());
                        libc::_exit(0);
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

fn attempts_made(dir: &Path) -> usize {
    fs::read_dir(dir).unwrap().count()
}

/// Spawns `command` through the watch, checks that its child ran `true` to its end, and
/// returns how many attempts its children counted in `dir` (which it then removes).
fn attempts_to_run(dir: &Path, mut command: Command) -> usize {
    let mut child = spawn_watch::spawn_within(&mut command, LIMIT).expect("a try runs");
    assert!(
        child.wait().unwrap().success(),
        "the child ran `true` to its end"
    );
    let attempts = attempts_made(dir);
    fs::remove_dir_all(dir).unwrap();
    attempts
}

#[test]
fn a_child_stuck_before_exec_is_killed_and_the_command_spawned_again() {
    let dir = scratch_dir("once");
    let command = true_stuck_on_first_attempts(&dir, 1);
    assert_eq!(
        attempts_to_run(&dir, command),
        2,
        "one stuck child, then one that ran"
    );
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
    let command = true_stuck_on_first_attempts(&dir, 0);
    assert_eq!(attempts_to_run(&dir, command), 1);
}

/// The case that an earlier version of the watch got wrong, seen when the tests above started
/// at the same moment: the child exec'd, but `Command::spawn` still waited, because another
/// process held its pipe. The watch must neither kill that child (it runs its program) nor
/// spawn again; the spawn returns when the holder lets go.
#[test]
fn a_spawn_held_up_after_its_exec_by_another_holder_of_its_pipe_is_waited_for_not_repeated() {
    let dir = scratch_dir("held");
    let command = true_with_hook(&dir, 0, Some(LIMIT * 2));
    assert_eq!(attempts_to_run(&dir, command), 1, "spawned once");
}
