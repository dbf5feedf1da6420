#![allow(dead_code)] // each test binary uses its own subset of these helpers
//! Starting a child process from a test without hanging on qemu-user's `fork`.
//!
//! Under qemu-user (the aarch64 tests on an x86_64 host), a `fork` made while other threads of
//! the guest run now and then leaves the child deadlocked before its `exec`: both of its host
//! threads wait on a futex forever. qemu 7.2 (Debian 12) does it about once in a thousand
//! spawns from four threads while four others allocate and start threads; a CI run of the test
//! suite hung on it until its time ran out. Two things then hang:
//! - `Command::spawn`, which waits for the child's `exec` (or its error) on a pipe and so never
//!   returns;
//! - any other test's reader of a child's pipe: the stuck child holds a copy of every
//!   descriptor its parent had open at the fork, so the pipe never reaches end of file.
//!
//! [`spawn`] runs `Command::spawn` on a thread of its own. If that has not returned within
//! [`EXEC_LIMIT`], it kills the thread's children (the child stuck before `exec`; the thread
//! has no other) and spawns again, at most [`TRIES`] times. Killing the stuck child also frees
//! the other tests' pipes. Natively, and under qemu when the fork goes well, it is one spawn.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How long `Command::spawn` may wait for the child's `exec` before the child is taken for
/// stuck. Even under qemu and Valgrind an exec comes within a second or two.
pub const EXEC_LIMIT: Duration = Duration::from_secs(20);

/// How many times a spawn whose child got stuck before `exec` is tried in all.
pub const TRIES: usize = 3;

/// Like `command.spawn()`, but a child stuck before its `exec` is killed and spawned again.
/// Fails with the error `Command::spawn` gave, or, after [`TRIES`] stuck children, with an
/// error that says so.
pub fn spawn(command: &mut Command) -> io::Result<Child> {
    spawn_within(command, EXEC_LIMIT)
}

/// [`spawn`], with `exec_limit` in place of [`EXEC_LIMIT`].
pub fn spawn_within(command: &mut Command, exec_limit: Duration) -> io::Result<Child> {
    for _ in 0..TRIES {
        let (spawned, killed_a_stuck_child) = spawn_once(command, exec_limit);
        if !killed_a_stuck_child {
            return spawned;
        }
        // The attempt's child was killed, whatever `spawn` made of it: reap it, try again.
        if let Ok(mut killed) = spawned {
            let _ = killed.wait();
        }
    }
    Err(io::Error::other(format!(
        "{TRIES} children of {command:?} stuck between fork and exec (qemu-user's fork \
         deadlock) and were killed; see tests/common/spawn_watch.rs"
    )))
}

/// One `command.spawn()` on a thread of its own, watched: returns what it gave, and whether
/// its child was killed for not reaching `exec` within `exec_limit`.
fn spawn_once(command: &mut Command, exec_limit: Duration) -> (io::Result<Child>, bool) {
    thread::scope(|scope| {
        let (tid_sender, tid) = mpsc::channel();
        let spawner = scope.spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tid_sender.send(unsafe { libc::gettid() });
            command.spawn()
        });
        let tid = tid.recv().expect("the spawning thread sends its id first");
        let begun = Instant::now();
        let mut killed = false;
        while !spawner.is_finished() {
            if !killed && begun.elapsed() > exec_limit {
                kill_children_of_thread(tid, exec_limit);
                killed = true;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let spawned = spawner.join().expect("Command::spawn does not panic");
        (spawned, killed)
    })
}

/// Sends SIGKILL to every child that the thread `tid` of this process started, which have been
/// stuck for `stuck_for`.
fn kill_children_of_thread(tid: libc::pid_t, stuck_for: Duration) {
    // Not /proc/self: qemu-user answers some /proc/self files itself. The process id and
    // the thread id are the host's, under qemu too.
    let path = format!("/proc/{}/task/{tid}/children", std::process::id());
    let children = std::fs::read_to_string(&path).unwrap_or_default();
    for pid in children
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
    {
        eprintln!(
            "spawn_watch: killing child {pid}, stuck for {stuck_for:?} between fork and exec"
        );
        // SAFETY: kill has no memory preconditions; `pid` is a child of this process that
        // has not been reaped (the spawning thread has not returned), so the id is not reused.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}
