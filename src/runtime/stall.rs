//! The stall report: a watchdog OS thread that says on stderr when a green thread has run
//! for longer than a threshold without parking, which holds up every other green thread on its
//! OS thread (a `std::sync` lock, file I/O, a raw system call, a CPU-bound loop).
//!
//! Owns: [`StallWatch`], the runtime's side (it publishes which green thread the scheduler
//! switched into, and prints the end of a reported stall, with a backtrace of where the green
//! thread parked); the watchdog thread; what the two share (atomics and a locked copy of the
//! running green thread's name); the `GREENWEAVE_STALL_REPORT_MS` variable.
//!
//! May not: touch a task from the watchdog (tasks are `!Send` and may be freed at any time):
//! the watchdog sees ids, a copied name and atomics, nothing else. Nor cost anything on the
//! scheduler's paths when the report is off: the scheduler holds an `Option<StallWatch>` and
//! tests it once per switch into a green thread and once per finished green thread, a branch
//! that always goes the same way; a park's look shares the test a park makes anyway for a
//! pending cancellation (`Task::attention`).
//!
//! How a stall is seen. On every switch into a green thread the scheduler bumps a switch
//! number and publishes the green thread's id beside it (a seqlock: the number is odd while the
//! id is being written), and before it blocks in `epoll_wait` it publishes id 0 (nobody runs).
//! A named green thread's name is copied under a lock when it is not the last one copied; an
//! unnamed one only sets a bit beside its id, so a switch between unnamed green threads takes
//! no lock. The watchdog wakes every half threshold; a switch number it sees unchanged, with a green
//! thread running, for at least the threshold since it first saw it, is a stall: it prints one
//! line at once (the runtime's own thread is stuck, so only another thread can say so in time)
//! and records which switch it reported. When that green thread next parks, it finds its switch
//! reported and prints a second line with how long the stall lasted and a backtrace of the
//! park, which points just past the blocking call. Durations are lower bounds: the watchdog
//! knows when it first saw the switch, not when it happened (at most half a threshold before).
//! The watchdog writes its line with one `write(2)`, never through std's stderr lock, which
//! the stuck thread may hold.
//!
//! What the stuck OS thread is doing. The runtime's thread publishes its kernel thread id when
//! the watch starts; when the watchdog reports a stall it asks `sys::os_thread` what that
//! thread is doing: the system call it sits in (from `/proc/self/task/<tid>/syscall`), or that
//! it runs its own code, and then, when the process has a dump signal, where (its program
//! counter and the function there). Under qemu-user the file's numbers are the host's, and the
//! line says only that the thread is in a system call. A file that cannot be read (no
//! `/proc`) leaves the state unknown, said so in the line; nothing fails.

use std::backtrace::Backtrace;
use std::cell::Cell;
use std::env;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::task::Task;
use crate::sys::os_thread::{Activity, Numbering, ThreadState};

/// The environment variable that sets the threshold, in milliseconds, when a runtime starts
/// (`0` turns the report off); it takes precedence over `Builder::stall_report`.
const ENV_VAR: &str = "GREENWEAVE_STALL_REPORT_MS";

/// The shortest time between two looks of the watchdog, whatever the threshold.
const MIN_PERIOD: Duration = Duration::from_millis(1);

/// The threshold a runtime starting now uses: the environment variable's if it is set (`0`:
/// none), else `configured` (from `Builder::stall_report`). A value that is not a number of
/// milliseconds is ignored, with a line on stderr that says so.
pub(crate) fn threshold(configured: Option<Duration>) -> Option<Duration> {
    let Some(value) = env::var_os(ENV_VAR) else {
        return configured;
    };
    match parse_millis(value.to_str()) {
        Some(millis) => (millis > 0).then(|| Duration::from_millis(millis)),
        None => {
            eprintln!(
                "greenweave: ignoring {ENV_VAR}={value:?}: expected a whole number of \
                 milliseconds (0 turns the stall report off)"
            );
            configured
        }
    }
}

/// `text` as a whole number of milliseconds, surrounding blanks allowed.
fn parse_millis(text: Option<&str>) -> Option<u64> {
    text?.trim().parse().ok()
}

/// What the runtime's thread and the watchdog share.
struct Shared {
    threshold: Duration,
    /// The seqlock over `running`: bumped by two on every switch into a green thread and
    /// whenever the scheduler is about to wait for events; odd while `running` is rewritten.
    switch: AtomicU64,
    /// The id of the green thread the scheduler switched into at `switch`, with [`NAMED`] set
    /// if it has a name; 0 while the scheduler waits for events (no green thread has id 0).
    running: AtomicU64,
    /// The name of the last named green thread switched into (published, when it changes,
    /// before the switch number that names it).
    name: Mutex<PublishedName>,
    /// The switch number of the last stall the watchdog reported (0: none yet).
    reported: AtomicU64,
    /// When the watchdog first saw that switch, in nanoseconds since `epoch`; written before
    /// `reported`.
    reported_since: AtomicU64,
    epoch: Instant,
    /// The kernel thread id of the runtime's OS thread (whose `/proc/self/task/<tid>/syscall`
    /// says what it is blocked in).
    tid: libc::pid_t,
    /// Set when the runtime ends; the condition variable wakes the watchdog for it.
    stop: Mutex<bool>,
    wake: Condvar,
}

/// The bit of `Shared::running` that says the green thread has a name (ids count up from 1
/// and never reach it).
const NAMED: u64 = 1 << 63;

/// A named green thread's id and name, copied for the watchdog.
#[derive(Default)]
struct PublishedName {
    id: u64,
    /// The buffer is reused from one name to the next.
    name: String,
}

/// The runtime's side of the stall report, held by the scheduler while the report is on; its
/// drop stops the watchdog thread and joins it.
pub(crate) struct StallWatch {
    shared: Arc<Shared>,
    watchdog: Option<thread::JoinHandle<()>>,
    /// The last switch number published (even), the runtime thread's own copy.
    switch: Cell<u64>,
    /// The id whose name is published (0: none yet).
    named: Cell<u64>,
    /// The last reported switch whose end was printed, so a park made while printing it (a
    /// hooked write to a full pipe) does not print it again.
    ended: Cell<u64>,
}

impl StallWatch {
    /// Starts the watchdog for a runtime on the calling thread that reports green threads
    /// running for `threshold` or longer without parking.
    ///
    /// # Errors
    /// If the watchdog thread cannot be started.
    pub(crate) fn start(threshold: Duration) -> io::Result<StallWatch> {
        let shared = Arc::new(Shared {
            threshold,
            switch: AtomicU64::new(0),
            running: AtomicU64::new(0),
            name: Mutex::new(PublishedName::default()),
            reported: AtomicU64::new(0),
            reported_since: AtomicU64::new(0),
            epoch: Instant::now(),
            // SAFETY: gettid(2) has no preconditions and cannot fail. Called on the runtime's
            // own OS thread: `Scheduler::new` starts the watch on the thread it will run on.
            tid: unsafe { libc::gettid() },
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let watched = shared.clone();
        let watchdog = thread::Builder::new()
            .name("greenweave-stall-watchdog".into())
            .spawn(move || watch(&watched))?;
        Ok(StallWatch {
            shared,
            watchdog: Some(watchdog),
            switch: Cell::new(0),
            named: Cell::new(0),
            ended: Cell::new(0),
        })
    }

    /// Called by the scheduler right before it switches into `task`: a new switch number,
    /// naming `task`.
    #[inline]
    pub(crate) fn entering(&self, task: &Task) {
        let Some(name) = &task.name else {
            self.publish(task.id);
            return;
        };
        if self.named.get() != task.id {
            self.publish_name(task.id, name);
        }
        self.publish(task.id | NAMED);
    }

    /// Called by the scheduler before it blocks waiting for events: nobody runs.
    pub(crate) fn idle(&self) {
        self.publish(0);
    }

    /// The seqlock's write side (the runtime's thread is the only writer): `running` becomes
    /// `id` (with its `NAMED` bit), at a new switch number.
    #[inline]
    fn publish(&self, id: u64) {
        let switch = self.switch.get() + 2;
        self.switch.set(switch);
        self.shared.switch.store(switch - 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.shared.running.store(id, Ordering::Relaxed);
        self.shared.switch.store(switch, Ordering::Release);
    }

    /// Copies a named green thread's id and name where the watchdog can read them. Before the
    /// switch number that names the task is published, so a watchdog that sees the number
    /// sees the name.
    #[inline(never)]
    fn publish_name(&self, id: u64, name: &str) {
        let mut published = self
            .shared
            .name
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        published.id = id;
        published.name.clear();
        published.name.push_str(name);
        self.named.set(id);
    }

    /// Called on the running green thread's stack before it parks or yields: if the watchdog
    /// reported this run as a stall, says how long it lasted and where it parked.
    #[inline]
    pub(crate) fn parking(&self, task: &Task) {
        if let Some(stalled_for) = self.reported_stall_ends() {
            report_parked(task, stalled_for);
        }
    }

    /// Called by the scheduler when `task` has finished: if the watchdog reported its last run
    /// as a stall, says how long it lasted.
    pub(crate) fn finished(&self, task: &Task) {
        if let Some(stalled_for) = self.reported_stall_ends() {
            eprintln!(
                "greenweave: green thread {} finished after a stall of at least {} ms (it \
                 never parked again, so there is no park to show a backtrace of)",
                task.describe(),
                stalled_for.as_millis()
            );
        }
    }

    /// If the watchdog reported the run in progress and its end has not been printed: how long
    /// it has lasted (at least), marking its end printed.
    #[inline]
    fn reported_stall_ends(&self) -> Option<Duration> {
        let switch = self.switch.get();
        if self.shared.reported.load(Ordering::Acquire) != switch || self.ended.get() == switch {
            return None;
        }
        self.ended.set(switch);
        let since = self.shared.reported_since.load(Ordering::Relaxed);
        let now = self.shared.epoch.elapsed().as_nanos();
        Some(Duration::from_nanos(
            u64::try_from(now.saturating_sub(u128::from(since))).unwrap_or(u64::MAX),
        ))
    }
}

impl Drop for StallWatch {
    fn drop(&mut self) {
        *self
            .shared
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_one();
        if let Some(watchdog) = self.watchdog.take() {
            // A panic on the watchdog (it has none of its own) is not this runtime's to raise.
            let _ = watchdog.join();
        }
    }
}

/// Prints the end of a reported stall, with a backtrace of the park that ended it: the frames
/// below greenweave's own are the code right after the blocking call. On the green thread's
/// stack, before it switches out.
#[cold]
#[inline(never)]
fn report_parked(task: &Task, stalled_for: Duration) {
    let backtrace = Backtrace::force_capture();
    // A failed write to stderr is not worth a panic in the middle of a park.
    let _ = writeln!(
        io::stderr().lock(),
        "greenweave: green thread {} parked after a stall of at least {} ms; the blocking \
         call is just before this park:\n{backtrace}",
        task.describe(),
        stalled_for.as_millis()
    );
}

/// The watchdog thread's loop: looks every half threshold until the runtime ends.
fn watch(shared: &Shared) {
    let period = (shared.threshold / 2).max(MIN_PERIOD);
    // The switch seen running at the last look, and when it was first seen.
    let mut seen: Option<(u64, Instant)> = None;
    let mut reported = 0;
    loop {
        {
            let stop = shared.stop.lock().unwrap_or_else(PoisonError::into_inner);
            let (stop, _) = shared
                .wake
                .wait_timeout_while(stop, period, |stop| !*stop)
                .unwrap_or_else(PoisonError::into_inner);
            if *stop {
                return;
            }
        }
        let now = Instant::now();
        let Some((switch, id)) = read_running(shared) else {
            seen = None;
            continue;
        };
        match seen {
            Some((seen_switch, since)) if seen_switch == switch => {
                if switch != reported && now.duration_since(since) >= shared.threshold {
                    reported = switch;
                    report_stall(shared, switch, id, since, now);
                }
            }
            _ => seen = Some((switch, now)),
        }
    }
}

/// The seqlock's read side: the switch number and the id of the green thread running since,
/// or `None` if no green thread runs or the runtime's thread is publishing a switch right now.
fn read_running(shared: &Shared) -> Option<(u64, u64)> {
    let before = shared.switch.load(Ordering::Acquire);
    let id = shared.running.load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    let after = shared.switch.load(Ordering::Relaxed);
    (before == after && before.is_multiple_of(2) && id != 0).then_some((before, id))
}

/// Reports the stall of green thread `id` (with its `NAMED` bit), running since switch number
/// `switch`, which the watchdog first saw at `since`, with what its OS thread is doing now;
/// then marks it reported, so that the green thread's own line about the stall's end (printed
/// once it sees the mark) comes after this one.
///
/// One `write(2)` of the whole line, without std's stderr lock: the runtime's thread may hold
/// that lock (it may even be what it is stuck in), and the runtime joins this thread when it
/// ends. If the green thread parks between the look that found the stall and the mark, the
/// line about its end is not printed.
fn report_stall(shared: &Shared, switch: u64, id: u64, since: Instant, now: Instant) {
    // As `Task::describe` names a green thread.
    let name = if id & NAMED == 0 {
        format!("<unnamed> (id {id})")
    } else {
        let id = id & !NAMED;
        let published = shared.name.lock().unwrap_or_else(PoisonError::into_inner);
        // Published before `switch` was; another id means the green thread has already
        // parked and another named one runs: no stall to report any more.
        if published.id != id {
            return;
        }
        format!("'{}' (id {id})", published.name)
    };
    let state = ThreadState::of_thread(shared.tid, Numbering::of_this_process());
    let line = format!(
        "greenweave: green thread {name} has held its OS thread for at least {} without \
         parking, {}; it is holding up every green thread on this OS thread ({})\n",
        Lasting(now.duration_since(since)),
        state.describe(shared.tid),
        advice(state.activity),
    );
    write_to_stderr(line.as_bytes());
    let since_epoch = since.saturating_duration_since(shared.epoch).as_nanos();
    shared.reported_since.store(
        u64::try_from(since_epoch).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    shared.reported.store(switch, Ordering::Release);
}

/// A duration as a report says it: whole milliseconds below a second, tenths of a second above.
struct Lasting(Duration);

impl std::fmt::Display for Lasting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 < Duration::from_secs(1) {
            write!(f, "{} ms", self.0.as_millis())
        } else {
            // Truncated, not rounded, as a lower bound must be.
            let tenths = self.0.as_millis() / 100;
            write!(f, "{}.{} s", tenths / 10, tenths % 10)
        }
    }
}

/// The end of the report's line: what usually causes this, and what parks instead.
fn advice(activity: Activity) -> &'static str {
    match activity {
        Activity::Syscall(libc::SYS_futex) => {
            "a std::sync lock or channel, or a raw futex wait: greenweave::sync parks \
             instead, greenweave::unblock runs a blocking call on a helper thread"
        }
        Activity::Syscall(libc::SYS_nanosleep | libc::SYS_clock_nanosleep) => {
            "a sleep of the OS thread: greenweave::thread::sleep parks instead"
        }
        Activity::Computing => {
            "a CPU-bound loop: call greenweave::thread::yield_now in it, or run it with \
             greenweave::unblock"
        }
        Activity::Syscall(_) if cfg!(feature = "hooks") => {
            "file I/O, a blocking socket or another blocking call the hooks do not cover: \
             greenweave::unblock runs it on a helper thread, greenweave::net parks"
        }
        Activity::Syscall(_) => {
            "file I/O, a blocking socket or another blocking call: greenweave::unblock \
             runs it on a helper thread, greenweave::net parks, the hooks feature makes \
             common ones park"
        }
        // What the call is, is not known.
        Activity::ForeignSyscall | Activity::BlockedOutsideSyscall | Activity::Unknown => {
            "a std::sync lock, file I/O, a blocking socket, a sleep of the OS thread or a \
             CPU-bound loop: greenweave::sync, greenweave::net and \
             greenweave::thread::sleep park instead, greenweave::unblock runs a blocking \
             call on a helper thread"
        }
    }
}

/// Writes `bytes` to fd 2 with libc's `write` (not the hooks', though this thread is not a
/// green thread anyway), retrying a short write; errors are ignored, as a report has nowhere
/// else to go.
pub(crate) fn write_to_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: the buffer is valid for its length; write(2) on a closed or bad fd fails
        // with an error, which ends the loop.
        let written = unsafe {
            crate::sys::real::write(libc::STDERR_FILENO, bytes.as_ptr().cast(), bytes.len())
        };
        match usize::try_from(written) {
            Ok(0) => return,
            Ok(written) => bytes = &bytes[written.min(bytes.len())..],
            Err(_) if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Lasting, parse_millis};

    #[test]
    fn durations_are_milliseconds_below_a_second_and_truncated_tenths_above() {
        assert_eq!(Lasting(Duration::from_millis(112)).to_string(), "112 ms");
        assert_eq!(Lasting(Duration::from_millis(1_299)).to_string(), "1.2 s");
        assert_eq!(Lasting(Duration::from_millis(61_050)).to_string(), "61.0 s");
    }

    #[test]
    fn the_environment_variable_is_a_whole_number_of_milliseconds() {
        assert_eq!(parse_millis(Some("100")), Some(100));
        assert_eq!(parse_millis(Some(" 50\n")), Some(50));
        assert_eq!(parse_millis(Some("0")), Some(0));
        assert_eq!(parse_millis(Some("100ms")), None);
        assert_eq!(parse_millis(Some("-1")), None);
        assert_eq!(parse_millis(Some("")), None);
        assert_eq!(parse_millis(None), None);
    }
}
