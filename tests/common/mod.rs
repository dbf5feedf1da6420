#![allow(dead_code)] // each test binary uses its own subset of these helpers
//! Running a test's body in a child process, for behaviour that ends the process (aborts,
//! fatal signals) and so cannot be observed from inside it.
//!
//! The parent re-executes this test binary with `--exact <test name>` and an environment
//! variable naming the test; in the child, the same test function sees the variable and runs
//! the crashing part instead of spawning again.
//!
//! When the tests run under qemu-user (`cargo test --target aarch64-unknown-linux-gnu` on an
//! x86_64 host), `current_exe()` is the guest binary, which the host kernel cannot execute
//! (qemu-user does not intercept `execve`): the child is then started through the emulator.

use std::env;
use std::fs;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

pub mod spawn_watch;

/// Set in the child to the name of the test it must run the crashing part of.
const CHILD_ENV: &str = "GREENWEAVE_CRASH_CHILD";

/// Printed by the child right before it runs the crashing part, so the parent can tell a
/// crash from a child that never got there (a wrong test name, a failed exec).
pub const CHILD_STARTED: &str = "greenweave-crash-child-started";

/// How long a child may take, after its `exec`, to print [`CHILD_STARTED`] before it is taken
/// for stuck on its way there and started again; a child that got going prints the marker
/// within a second or two even under qemu. (A child stuck before its `exec`, qemu-user's fork
/// deadlock, is [`spawn_watch`]'s to kill: `Command::spawn` does not return until the `exec`.)
const START_LIMIT: Duration = Duration::from_secs(60);

/// How many times a child that never started is started again.
const START_TRIES: usize = 3;

/// How long a started child may run before it is killed: turns a hang into a failure.
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// How a child process ended.
pub struct ChildOutcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl ChildOutcome {
    /// The signal that killed the child, if one did.
    pub fn signal(&self) -> Option<i32> {
        self.status.signal()
    }

    /// Everything the child wrote, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "status: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// In the parent, runs `test_name` (which must be the name of the calling test) in a child
/// process where `child` runs, and returns how the child ended. In that child, runs `child`,
/// which must end the process (by crashing, or with `std::process::exit` to show it did not);
/// if `child` returns, the child test fails.
pub fn run_in_child(test_name: &str, child: impl FnOnce()) -> ChildOutcome {
    run_in_child_with_env(test_name, &[], child)
}

/// Whether this process is the child that [`run_in_child`] starts for `test_name`: for a test
/// whose parent part must not run again there (it starts a server that the crashing child
/// could not stop; the child gets what it needs through [`run_in_child_with_env`]).
#[allow(dead_code)] // only some test binaries have such a test
pub fn is_child_of(test_name: &str) -> bool {
    env::var_os(CHILD_ENV).is_some_and(|name| name == test_name)
}

/// [`run_in_child`], with `env` set in the child's environment (what the parent started for
/// it: a server's address).
pub fn run_in_child_with_env(
    test_name: &str,
    env: &[(&str, String)],
    child: impl FnOnce(),
) -> ChildOutcome {
    if is_child_of(test_name) {
        println!("{CHILD_STARTED}");
        eprintln!("{CHILD_STARTED}");
        child();
        panic!("the child part of `{test_name}` returned instead of ending the process");
    }
    let mut last = None;
    for launcher in launchers() {
        for _ in 0..START_TRIES {
            let (outcome, stuck_before_start) = spawn_child(launcher.as_deref(), test_name, env);
            if outcome.stdout.contains(CHILD_STARTED) {
                return outcome;
            }
            last = Some(outcome);
            if !stuck_before_start {
                break; // it ended without starting: another try would end the same way
            }
        }
    }
    panic!(
        "the child never reached the crashing part of `{test_name}`\n{}",
        last.expect("there is at least one launcher").describe()
    );
}

/// Runs this test binary, through `launcher` if given, for the child part of `test_name`.
/// Returns how it ended, and whether it was killed for not starting within [`START_LIMIT`].
fn spawn_child(
    launcher: Option<&[String]>,
    test_name: &str,
    env: &[(&str, String)],
) -> (ChildOutcome, bool) {
    let exe = env::current_exe().expect("the test binary knows its own path");
    let mut command = match launcher {
        Some([program, args @ ..]) => {
            let mut command = Command::new(program);
            command.args(args).arg(&exe);
            command
        }
        _ => Command::new(&exe),
    };
    command
        // --include-ignored: the parent may itself be an ignored test run on request.
        .args([
            "--exact",
            test_name,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, test_name)
        .envs(env.iter().map(|(name, value)| (name, value)));
    // Under AddressSanitizer, whose SIGSEGV/SIGBUS handler would otherwise be the one that
    // greenweave's handler passes a fault it does not own to (and that reports it and exits
    // with status 1): these children test what the process's own handlers, greenweave's and
    // std's, do with a fault. Instrumentation stays on.
    #[cfg(greenweave_asan)]
    command.env(
        "ASAN_OPTIONS",
        format!(
            "{}:handle_segv=0:handle_sigbus=0",
            env::var("ASAN_OPTIONS").unwrap_or_default()
        ),
    );
    // An abort must not leave a core file behind (qemu-user writes its own, `qemu_*.core`).
    // SAFETY: the closure only calls setrlimit, which is async-signal-safe, between fork and
    // exec.
    unsafe {
        command.pre_exec(|| {
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            Ok(())
        });
    }
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match spawn_watch::spawn(&mut command) {
        Ok(child) => child,
        Err(error) => {
            let outcome = ChildOutcome {
                status: ExitStatus::from_raw(127 << 8),
                stdout: String::new(),
                stderr: format!("could not start {launcher:?} {exe:?}: {error}"),
            };
            return (outcome, false);
        }
    };
    let started = Arc::new(AtomicBool::new(false));
    let stdout = read_in_background(&mut child, Some(started.clone()));
    let stderr = read_in_background(&mut child, None);
    let (status, stuck) = wait_with_limits(&mut child, &started);
    let outcome = ChildOutcome {
        status,
        stdout: stdout.join().expect("the stdout reader does not panic"),
        stderr: stderr.join().expect("the stderr reader does not panic"),
    };
    (outcome, stuck)
}

/// Reads the child's stdout (`started` given: setting it once the marker shows) or stderr to
/// the end on a thread of its own, so neither pipe fills up while the parent waits.
fn read_in_background(
    child: &mut Child,
    started: Option<Arc<AtomicBool>>,
) -> thread::JoinHandle<String> {
    let mut pipe: Box<dyn Read + Send> = match &started {
        Some(_) => Box::new(child.stdout.take().expect("stdout is piped")),
        None => Box::new(child.stderr.take().expect("stderr is piped")),
    };
    thread::spawn(move || {
        let mut text = Vec::new();
        let mut chunk = [0; 4096];
        while let Ok(read @ 1..) = pipe.read(&mut chunk) {
            text.extend_from_slice(&chunk[..read]);
            if let Some(started) = &started
                && String::from_utf8_lossy(&text).contains(CHILD_STARTED)
            {
                started.store(true, Ordering::Release);
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

/// Waits for the child, killing it if it has not printed the marker within [`START_LIMIT`]
/// (then the second value is true) or has not ended within [`RUN_LIMIT`].
fn wait_with_limits(child: &mut Child, started: &AtomicBool) -> (ExitStatus, bool) {
    let begun = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            return (status, false);
        }
        let elapsed = begun.elapsed();
        let stuck = !started.load(Ordering::Acquire) && elapsed > START_LIMIT;
        if stuck || elapsed > RUN_LIMIT {
            let _ = child.kill();
            let status = child.wait().expect("waiting for the killed child");
            return (status, stuck);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The ways to start this binary to try, in order: `None` runs it directly, `Some` through
/// that emulator command line.
fn launchers() -> Vec<Option<Vec<String>>> {
    let guest_arch = env::consts::ARCH;
    // /proc/sys/kernel/arch comes from the real kernel even under qemu-user, which emulates
    // uname(2) to report the guest architecture. Older kernels lack it: then try both ways.
    match fs::read_to_string("/proc/sys/kernel/arch") {
        Ok(kernel_arch) if kernel_arch.trim() == guest_arch => vec![None],
        Ok(_) => vec![emulator(guest_arch)],
        Err(_) => vec![None, emulator(guest_arch)],
    }
}

/// The emulator that runs a binary for `guest_arch` on this kernel, or `None` if the kernel
/// starts it by itself.
fn emulator(guest_arch: &str) -> Option<Vec<String>> {
    let runner_var = format!(
        "CARGO_TARGET_{}_UNKNOWN_LINUX_GNU_RUNNER",
        guest_arch.to_uppercase()
    );
    if let Ok(runner) = env::var(&runner_var) {
        let words: Vec<String> = runner.split_whitespace().map(str::to_owned).collect();
        if !words.is_empty() {
            return Some(words);
        }
    }
    // With qemu registered in binfmt_misc, the kernel starts the emulator by itself.
    let binfmt = Path::new("/proc/sys/fs/binfmt_misc").join(format!("qemu-{guest_arch}"));
    if fs::read_to_string(binfmt).is_ok_and(|entry| entry.starts_with("enabled")) {
        return None;
    }
    // The runner that .cargo/config.toml configures.
    Some(vec![
        format!("qemu-{guest_arch}"),
        "-L".to_owned(),
        format!("/usr/{guest_arch}-linux-gnu"),
    ])
}

/// Asserts that the child aborted (SIGABRT) and that its stderr contains `expected`.
pub fn assert_aborted_saying(outcome: &ChildOutcome, expected: &str) {
    assert_eq!(
        outcome.signal(),
        Some(libc::SIGABRT),
        "the child should abort\n{}",
        outcome.describe()
    );
    assert!(
        outcome.stderr.contains(expected),
        "stderr should contain {expected:?}\n{}",
        outcome.describe()
    );
}
