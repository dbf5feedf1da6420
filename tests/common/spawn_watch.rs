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
//! [`EXEC_LIMIT`], it kills the thread's children that are still a copy of this process (their
//! command line is this process's: they have not reached `exec`) and spawns again, at most
//! [`TRIES`] times. Killing the stuck child also frees the other tests' pipes.
//!
//! A spawn can also wait that long with no child of its own stuck: its child has exec'd, but
//! another test's stuck child, forked at the same moment, holds the pipe `Command::spawn` waits
//! on. That child is left alone (it is running its program), and the spawn returns once the
//! other test's watch has killed the stuck one. Natively, and under qemu when the fork goes
//! well, [`spawn`] is one `Command::spawn`.

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
        let mut next_look = begun + exec_limit;
        while !spawner.is_finished() {
            if !killed && Instant::now() >= next_look {
                killed = kill_unexeced_children_of_thread(tid, begun.elapsed());
                next_look += Duration::from_secs(1);
            }
            thread::sleep(Duration::from_millis(10));
        }
        let spawned = spawner.join().expect("Command::spawn does not panic");
        (spawned, killed)
    })
}

/// Sends SIGKILL to every child that the thread `tid` of this process started and that has
/// not reached its `exec` (its spawn began `stuck_for` ago); returns whether there was one.
///
/// A child that has not exec'd is a copy of this process, command line included; one that has
/// runs another (the tests always add arguments when they run this binary again), and a child
/// that has ended has none. Children of other threads that ended are handed to a live thread,
/// possibly `tid`: they have exec'd or ended, so the command line leaves them alone too.
fn kill_unexeced_children_of_thread(tid: libc::pid_t, stuck_for: Duration) -> bool {
    let pid = std::process::id();
    // Not /proc/self or /proc/PID/cmdline: qemu-user (and Valgrind) answer those with the
    // guest's arguments, not the host process's, which is what the child's file shows. Through
    // task/PID they are read from the kernel. The ids are the host's, under qemu too.
    let read_command_line = |path: String| std::fs::read(path).ok().filter(|line| !line.is_empty());
    let Some(own_command_line) = read_command_line(format!("/proc/{pid}/task/{pid}/cmdline"))
    else {
        return false;
    };
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")).unwrap_or_default();
    let mut killed = false;
    for child in children
        .split_whitespace()
        .filter_map(|child| child.parse::<libc::pid_t>().ok())
    {
        if read_command_line(format!("/proc/{child}/task/{child}/cmdline")).as_ref()
            != Some(&own_command_line)
        {
            continue;
        }
        eprintln!(
            "spawn_watch: killing child {child}, stuck for {stuck_for:.1?} between fork and exec"
        );
        // SAFETY: kill has no memory preconditions; `child` is a child of this process that
        // nobody has reaped (its spawning thread has not returned, and a child handed over from
        // an ended thread has exec'd), so the id is not reused.
        unsafe { libc::kill(child, libc::SIGKILL) };
        killed = true;
    }
    killed
}
