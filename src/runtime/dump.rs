//! The dump of every green thread: what each one is, where it is and what it waits for, with a
//! backtrace of its suspended stack, and the wait-for chains between them (Go's `SIGQUIT`
//! goroutine dump, for greenweave).
//!
//! Owns: [`Dump`] and [`GreenThread`] (the value, its `Display` and JSON), the collection of a
//! worker's part, the wait-for edges and their cycles, the stack probe's Rust side, and the
//! opt-in signal ([`Builder::dump_on_signal`](super::Builder::dump_on_signal)): its handler,
//! self-pipe and watcher thread.
//!
//! How a dump is taken. A worker's tasks are `!Send`, so each worker produces its own part: the
//! dumper sends every worker (its own included) a job through the worker's remote queue, which
//! the worker runs on its scheduler (not on a green thread) at its next poll, and waits for the
//! answers. A worker begins its answer at its next poll; one that has not begun within
//! [`BEGIN_WAIT`] is stuck (a green thread that does not park holds its OS thread) and is left
//! out, named in the dump with what its OS thread is doing (`sys::os_thread`: the system call
//! it is blocked in, or its program counter and function when it runs its own code); one that
//! has begun is waited for up to [`ANSWER_WAIT`]. A green thread that dumps parks meanwhile (the wait is
//! lent to an `unblock` helper thread), so its own worker can answer and its own stack is
//! walked like any other; an OS thread outside the runtime (the signal's watcher) simply waits.
//! The part is read from what every park already records (`Task::waiting`, and
//! `Task::parked_since`/`parked_until`, stored by `Scheduler::arm_park` from a coarse clock
//! that the scheduler refreshes at each poll, so a park reads no clock).
//!
//! How a parked stack is walked. A green thread that is not running is suspended in a switch
//! whose saved frame (`Coroutine::suspended_at`) has the same layout on every stack. The probe
//! (`asm/probe_<arch>.S`) calls a function on the worker's own stack with CFI that names that
//! saved frame as the function's caller, and the function runs the unwinder
//! (`_Unwind_Backtrace`), which walks from it into the suspended stack and down to its root,
//! without resuming it or writing to it. That full walk happens once per distinct shape of
//! stack: later stacks of the same shape are recognised by their return addresses, read where
//! the shape keeps them, and share one stack record ([`stacks`]). Each distinct stack is also
//! captured once by `std::backtrace::Backtrace::force_capture()`, whose symbols are resolved
//! later, on the dumper's side, when the dump is displayed; the text shows each shared
//! backtrace once and names it for the other green threads that have it.
//!
//! May not: touch a task off its worker, resume or change a suspended stack, or do more in the
//! signal handler than write one byte (everything else happens on the watcher thread) or
//! answer a program-counter sample (`os_thread::answer_sample`: two stores).

mod stacks;

use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::io::{self, Write as _};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak, mpsc};
use std::time::{Duration, Instant};

use super::reactor::Interest;
use super::scheduler::{self, Scheduler};
use super::stack_release::StackUse;
use super::task::{SelectWait, Task, TaskState, Wait};
use super::workers::Pool;
use crate::sys::os_thread::{self, Numbering, ThreadState};
use stacks::{DistinctStack, StackWalker};

/// How long a dump waits for a worker to begin its part (all of them at once): a worker runs
/// the dump's job at its next poll, which only a green thread that holds its OS thread without
/// parking for this long delays.
pub(crate) const BEGIN_WAIT: Duration = Duration::from_secs(2);

/// How long a dump waits for the parts of the workers that have begun theirs (all at once).
pub(crate) const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// Takes a dump of every green thread of the calling green thread's runtime, on every worker,
/// with a backtrace of each suspended stack.
///
/// The dumping green thread parks while the workers answer (its own worker included, which
/// answers as soon as it has nothing else to run), and appears in the dump parked in
/// `unblock`, with [`Dump::taken_by`] naming it. Each worker stops for the time it takes to
/// list its green threads and walk their stacks: the unwinder walks each distinct shape of
/// stack once, and green threads parked at the same point through the same calls share that
/// backtrace (a comparison of a few dozen words each after the first); symbols are resolved
/// only when the dump is displayed or its frames are read, once per distinct backtrace. A
/// worker that has not begun to answer within 2 seconds (a green thread holds its OS thread
/// without parking) is left out and named by [`Dump::unanswered_workers`]; the dump's text
/// says what its OS thread is doing.
///
/// # Panics
/// Outside a green thread.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// greenweave::run(|| {
///     let sleeper = greenweave::thread::Builder::new()
///         .name("sleeper".into())
///         .spawn(|| greenweave::thread::sleep(Duration::from_secs(60)))
///         .unwrap();
///     greenweave::thread::yield_now(); // the sleeper parks
///     let dump = greenweave::runtime::dump();
///     let sleeper_entry = dump
///         .green_threads()
///         .iter()
///         .find(|thread| thread.name() == Some("sleeper"))
///         .unwrap();
///     assert_eq!(sleeper_entry.wait_kind(), Some("sleep"));
///     println!("{dump}");
///     sleeper.cancel();
/// });
/// ```
pub fn dump() -> Dump {
    dump_from_green_thread(true)
}

/// [`dump`] without backtraces: the cheap kind, for a program with very many green threads.
///
/// # Panics
/// Outside a green thread.
///
/// ```
/// greenweave::run(|| {
///     let dump = greenweave::runtime::dump_without_backtraces();
///     let me = &dump.green_threads()[0];
///     assert_eq!(me.name(), Some("main"));
///     assert!(me.backtrace().is_none());
/// });
/// ```
pub fn dump_without_backtraces() -> Dump {
    dump_from_green_thread(false)
}

fn dump_from_green_thread(backtraces: bool) -> Dump {
    const WHAT: &str = "greenweave::runtime::dump";
    if !scheduler::in_green_thread() {
        panic!(
            "{WHAT} called outside a green thread; call it from a green thread of the runtime \
             to dump (greenweave::run), or use Builder::dump_on_signal"
        );
    }
    let (pool, me) = scheduler::with_scheduler(WHAT, |scheduler| {
        (
            scheduler.worker.pool.clone(),
            scheduler.current_task_key().id,
        )
    });
    let answers = ask_workers(&pool, backtraces);
    let mut dump = crate::unblock(move || collect_answers(&pool, answers));
    dump.taken_by = Some(me);
    dump
}

/// Takes a dump of `pool`'s runtime from an OS thread that is not one of its workers.
fn dump_from_outside(pool: &Arc<Pool>, backtraces: bool) -> Dump {
    let answers = ask_workers(pool, backtraces);
    collect_answers(pool, answers)
}

/// What a worker sends the dumper: that it has begun its part, then the part.
enum Answer {
    Begun(usize),
    Part(usize, Vec<GreenThread>),
}

/// Sends every worker of `pool` the job that lists its green threads; returns where the
/// answers arrive.
fn ask_workers(pool: &Arc<Pool>, backtraces: bool) -> mpsc::Receiver<Answer> {
    let (sender, answers) = mpsc::channel();
    for index in 0..pool.len() {
        // A worker that has ended drops the job unrun, and with it the sender: it is then
        // reported as not having answered.
        let _ = pool.submit(index, part_job(index, sender.clone(), backtraces));
    }
    answers
}

/// The job that sends worker `index`'s part to `sender`.
fn part_job(index: usize, sender: mpsc::Sender<Answer>, backtraces: bool) -> super::workers::Job {
    Box::new(move |scheduler: &Scheduler| {
        if scheduler::in_green_thread() {
            // Jobs also run inside a green thread whose budget ran out (`budget`), where a
            // wait (the backtrace lock, under the hooks) could park it and let the stacks being
            // walked run: answer from the scheduler's own loop instead.
            let pool = scheduler.worker.pool.clone();
            let _ = pool.submit(index, part_job(index, sender, backtraces));
            return;
        }
        let _ = sender.send(Answer::Begun(index));
        let _ = sender.send(Answer::Part(index, worker_part(scheduler, backtraces)));
    })
}

/// Collects the parts of `pool`'s workers and puts them together: waits [`BEGIN_WAIT`] for
/// each worker to begin, and [`ANSWER_WAIT`] for those that began to end; then says what the
/// OS thread of each worker that did not answer is doing.
fn collect_answers(pool: &Pool, answers: mpsc::Receiver<Answer>) -> Dump {
    let expected = pool.len();
    let start = Instant::now();
    let mut parts: Vec<Option<Vec<GreenThread>>> = (0..expected).map(|_| None).collect();
    let mut begun = vec![false; expected];
    let mut received = 0;
    while received < expected {
        let waiting_on_begun = (0..expected).any(|i| begun[i] && parts[i].is_none());
        let deadline = start
            + if waiting_on_begun {
                ANSWER_WAIT
            } else {
                BEGIN_WAIT
            };
        match answers.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Answer::Begun(index)) => begun[index] = true,
            Ok(Answer::Part(index, part)) => {
                parts[index] = Some(part);
                received += 1;
            }
            Err(_) => break,
        }
    }
    let waited = start.elapsed();
    let unanswered: Vec<usize> = (0..expected).filter(|&i| parts[i].is_none()).collect();
    let unanswered_states = unanswered
        .iter()
        .map(|&worker| UnansweredWorker::now(pool, worker, begun[worker], waited))
        .collect();
    let mut parts = parts.into_iter().flatten();
    // The first part is kept, the others moved into it (one worker: no copy at all).
    let mut threads = parts.next().unwrap_or_default();
    for part in parts {
        threads.extend(part);
    }
    // Slots are reused, so a worker's part is only nearly in id order.
    threads.sort_unstable_by_key(|thread| thread.id);
    if expected > 1 {
        share_backtraces(&mut threads);
    }
    choose_scope_edges(&mut threads);
    let cycles = find_cycles(&threads);
    Dump {
        workers: expected,
        threads,
        unanswered,
        unanswered_states,
        cycles,
        taken_by: None,
    }
}

/// The part of worker `scheduler`: every unfinished green thread on it, run on its scheduler
/// (no green thread runs meanwhile, so every one is suspended and stays so).
fn worker_part(scheduler: &Scheduler, backtraces: bool) -> Vec<GreenThread> {
    let now = Instant::now();
    let worker = scheduler.worker.index;
    let mut part = (Vec::new(), Vec::new());
    let mut walker = backtraces.then(StackWalker::default);
    scheduler.for_each_task(
        &mut part,
        |(part, _), count| part.reserve_exact(count),
        |(part, mincore), task| {
            if task.state.get() != TaskState::Finished {
                part.push(describe(task, worker, now, walker.as_mut(), mincore));
            }
        },
    );
    part.0
}

fn describe(
    task: &Task,
    worker: usize,
    now: Instant,
    walker: Option<&mut StackWalker>,
    mincore: &mut Vec<u8>,
) -> GreenThread {
    let state = match task.state.get() {
        TaskState::Running => GreenThreadState::Running,
        TaskState::Runnable => GreenThreadState::Ready,
        TaskState::Parked | TaskState::Finished => GreenThreadState::Parked,
    };
    let parked = task
        .waiting
        .get()
        .filter(|_| state == GreenThreadState::Parked);
    let wait = parked.map(|(wait, _)| WaitRecord::from_wait(wait));
    let parked_for = parked
        .and(task.parked_since.get())
        .map(|since| now.saturating_duration_since(since));
    let deadline_in = parked
        .and(task.parked_until.get())
        .map(|until| until.saturating_duration_since(now));
    // A dump with backtraces also measures each stack's peak (one `mincore`); the cheap one
    // reports the peak the long-park sweep last measured.
    let backtraces = walker.is_some();
    // A compacted green thread's frames are on the heap: a backtrace needs them back on its
    // stack (the next sweep compacts it again). Its stack use is measured first, so that the
    // dump says it was compacted.
    let stack = super::stack_release::measure(task, backtraces.then_some(mincore));
    if backtraces && task.restore_compacted() {
        task.stack_watch.sweep_again();
    }
    let backtrace = walker.and_then(|walker| walker.walk(task));
    let parent = task.parent.get();
    GreenThread {
        id: task.id,
        name: task.name.clone(),
        worker,
        state,
        wait,
        parked_for,
        deadline_in,
        parent: (parent != 0).then_some(parent),
        in_scope: task.scope.get(),
        stack,
        backtrace,
    }
}

/// The id of the green thread running now, or 0 outside one: what a green lock records as its
/// holder.
#[inline]
pub(crate) fn running_id() -> u64 {
    let task = scheduler::current_task_ptr();
    if task.is_null() {
        0
    } else {
        // SAFETY: a non-null running task is kept alive by `run_task` while it is current.
        unsafe { (*task).id }
    }
}

/// A dump of every green thread of a runtime, taken by [`dump`],
/// [`dump_without_backtraces`], or on a signal
/// ([`Builder::dump_on_signal`](super::Builder::dump_on_signal)).
///
/// Its `Display` is the human-readable dump (one block per green thread, then the cycles of
/// green threads waiting for each other); [`to_json`](Dump::to_json) is the same as JSON. A
/// backtrace that several green threads share is shown in full once, under the first of them
/// (`backtrace 1, the same for 1000 green threads:`), and named under each of the others
/// (`backtrace 1, as for green thread 2 above`): every green thread keeps its own block.
///
/// ```
/// greenweave::run(|| {
///     let dump = greenweave::runtime::dump_without_backtraces();
///     assert_eq!(dump.workers(), 1);
///     assert!(dump.cycles().is_empty());
///     assert!(dump.to_json().starts_with('{'));
///     assert!(dump.to_string().contains("'main'"));
/// });
/// ```
#[derive(Debug)]
pub struct Dump {
    workers: usize,
    threads: Vec<GreenThread>,
    unanswered: Vec<usize>,
    /// For each of `unanswered`, in the same order: what its OS thread was doing.
    unanswered_states: Vec<UnansweredWorker>,
    cycles: Vec<Vec<u64>>,
    taken_by: Option<u64>,
}

/// A worker that did not answer a dump, and what its OS thread was doing then.
#[derive(Debug)]
struct UnansweredWorker {
    worker: usize,
    /// Its OS thread's kernel id (`None`: the thread had not started, or the worker ended).
    tid: Option<libc::pid_t>,
    /// How long the dump waited for it.
    waited: Duration,
    /// Whether it had begun its part (it was walking stacks when the dump gave up).
    begun: bool,
    /// What its OS thread was doing, for people.
    doing: String,
}

impl UnansweredWorker {
    /// Looks at worker `worker` of `pool` now. On an OS thread that is no green thread.
    fn now(pool: &Pool, worker: usize, begun: bool, waited: Duration) -> UnansweredWorker {
        let tid = pool.thread_id(worker);
        let doing = match tid {
            Some(tid) => ThreadState::of_thread(tid, Numbering::of_this_process()).describe(tid),
            None => "not running (its OS thread has not started, or has ended)".to_owned(),
        };
        UnansweredWorker {
            worker,
            tid,
            waited,
            begun,
            doing,
        }
    }
}

impl fmt::Display for UnansweredWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "worker {} did not answer within {}, so its green threads are missing",
            self.worker,
            human(self.waited)
        )?;
        if self.begun {
            write!(f, " (it had begun listing them)")?;
        } else {
            write!(
                f,
                " (a green thread holds its OS thread without parking; the stall report, \
                 Builder::stall_report, names it)"
            )?;
        }
        match self.tid {
            Some(tid) => write!(f, ": its OS thread (tid {tid}) is {}", self.doing),
            None => write!(f, ": its OS thread is {}", self.doing),
        }
    }
}

/// One green thread in a [`Dump`].
///
/// ```
/// greenweave::run(|| {
///     let dump = greenweave::runtime::dump_without_backtraces();
///     let main = &dump.green_threads()[0];
///     assert_eq!((main.id(), main.worker(), main.parent()), (1, 0, None));
/// });
/// ```
#[derive(Debug)]
pub struct GreenThread {
    id: u64,
    name: Option<Box<str>>,
    worker: usize,
    state: GreenThreadState,
    wait: Option<WaitRecord>,
    parked_for: Option<Duration>,
    deadline_in: Option<Duration>,
    parent: Option<u64>,
    /// The address of the `thread::scope` it was spawned in (0: none); internal, to find a
    /// scope's green threads.
    in_scope: usize,
    /// Its stack's use (`runtime::stack_release`); `None` while it runs.
    stack: Option<StackUse>,
    /// Its parked stack, shared with every green thread parked with the same one.
    backtrace: Option<Arc<DistinctStack>>,
}

/// What a green thread in a [`Dump`] was doing.
///
/// ```
/// use greenweave::runtime::GreenThreadState;
///
/// greenweave::run(|| {
///     let dump = greenweave::runtime::dump_without_backtraces();
///     // The dumping green thread itself is parked while the workers answer.
///     assert_eq!(dump.green_threads()[0].state(), GreenThreadState::Parked);
/// });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GreenThreadState {
    /// Running on its worker when the worker answered (never, in practice: a worker answers
    /// between two green threads).
    Running,
    /// In its worker's ready queue.
    Ready,
    /// Parked: see [`GreenThread::waiting_on`].
    Parked,
}

impl GreenThreadState {
    fn as_str(self) -> &'static str {
        match self {
            GreenThreadState::Running => "running",
            GreenThreadState::Ready => "ready",
            GreenThreadState::Parked => "parked",
        }
    }
}

/// One frame of a backtrace in a [`Dump`]: a symbol and, when debug info says, where.
///
/// ```
/// greenweave::run(|| {
///     let dump = greenweave::runtime::dump();
///     let frames = dump.green_threads()[0].backtrace().unwrap();
///     assert!(frames.iter().any(|frame| frame.symbol().contains("greenweave")));
/// });
/// ```
#[derive(Clone, Debug)]
pub struct Frame {
    symbol: String,
    location: Option<String>,
}

impl Frame {
    /// The function's name (demangled), or `<unknown>`.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert!(entry.backtrace().unwrap().iter().any(|f| f.symbol().contains("sleep")));
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// `file:line:column`, if the program has line tables.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert!(entry.backtrace().unwrap().iter().any(|f| f.location().is_some()));
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn location(&self) -> Option<&str> {
        self.location.as_deref()
    }
}

/// The frames of std's rendering of `backtrace`, from the suspended switch point on: those of
/// the probe itself (up to `greenweave_probe_parked`) are dropped.
fn parse_backtrace(backtrace: &Backtrace) -> Vec<Frame> {
    let text = backtrace.to_string();
    let mut frames: Vec<Frame> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(location) = trimmed.strip_prefix("at ") {
            if let Some(frame) = frames.last_mut() {
                frame.location.get_or_insert_with(|| location.to_owned());
            }
            continue;
        }
        // "  12: symbol" opens a frame; an inlined function's line has no number.
        let symbol = match trimmed.split_once(": ") {
            Some((number, symbol)) if number.bytes().all(|b| b.is_ascii_digit()) => symbol,
            _ => trimmed,
        };
        if symbol.is_empty() {
            continue;
        }
        frames.push(Frame {
            symbol: symbol.to_owned(),
            location: None,
        });
    }
    if let Some(probe) = frames
        .iter()
        .position(|frame| frame.symbol.contains("greenweave_probe_parked"))
    {
        frames.drain(..=probe);
    }
    frames
}

/// What a parked green thread waits for, as the dump keeps it (`Send`: a lock's holder is read
/// on its worker).
#[derive(Clone, Copy, Debug)]
enum WaitRecord {
    Sleep,
    Io {
        fd: RawFd,
        interest: Interest,
    },
    Join(u64),
    Remote(&'static str),
    Sync {
        what: &'static str,
        address: usize,
    },
    /// `thread::scope` waiting for `running` green threads spawned in the scope at `scope`;
    /// `child` is the one of them the dump gives as this wait's edge (0: none listed).
    Scope {
        running: usize,
        scope: usize,
        child: u64,
    },
    Select(SelectWait),
    /// Joining green thread `green_thread` (0: not spawned yet) on worker `worker`.
    OtherWorker {
        worker: usize,
        green_thread: u64,
    },
    Shared(&'static str),
    Futex(usize),
    Lock {
        what: &'static str,
        address: usize,
        holder: u64,
    },
    Park,
    /// `block_on`, waiting on a future of this type.
    Future(&'static str),
}

impl WaitRecord {
    fn from_wait(wait: Wait) -> WaitRecord {
        match wait {
            Wait::Sleep => WaitRecord::Sleep,
            Wait::Io { fd, interest } => WaitRecord::Io { fd, interest },
            Wait::Join(id) => WaitRecord::Join(id),
            Wait::Remote(what) => WaitRecord::Remote(what),
            Wait::Sync { what, address } => WaitRecord::Sync { what, address },
            // The edge is chosen once every green thread is listed (`choose_scope_edges`).
            Wait::Scope { running, scope } => WaitRecord::Scope {
                running,
                scope,
                child: 0,
            },
            Wait::Select(select) => WaitRecord::Select(select),
            Wait::OtherWorker {
                worker,
                green_thread,
            } => WaitRecord::OtherWorker {
                worker,
                // SAFETY: the handle's cell outlives the park that names it
                // (`Wait::OtherWorker`); it is atomic, so reading it here while the target
                // worker stores the id is sound.
                green_thread: unsafe { (*green_thread).load(Ordering::Relaxed) },
            },
            Wait::Shared(what) => WaitRecord::Shared(what),
            Wait::Futex(address) => WaitRecord::Futex(address),
            Wait::Park => WaitRecord::Park,
            Wait::Future(type_name) => WaitRecord::Future(type_name),
            Wait::Lock { what, holder } => WaitRecord::Lock {
                what,
                address: holder as usize,
                // SAFETY: the lock outlives the park that names it (`Wait::Lock`), and this
                // runs on the lock's worker, where nothing changes it meanwhile.
                holder: unsafe { (*holder).get() },
            },
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            WaitRecord::Sleep => "sleep",
            WaitRecord::Io { .. } => "io",
            WaitRecord::Join(_) => "join",
            WaitRecord::Remote(_) => "remote",
            WaitRecord::Sync { .. } => "sync",
            WaitRecord::Scope { .. } => "scope",
            WaitRecord::Select(_) => "select",
            WaitRecord::OtherWorker { .. } => "other_worker",
            WaitRecord::Shared(_) => "shared",
            WaitRecord::Futex(_) => "futex",
            WaitRecord::Park => "park",
            WaitRecord::Lock { .. } => "lock",
            WaitRecord::Future(_) => "future",
        }
    }

    /// The green thread this wait can only be ended by (a join, on this worker or another, a
    /// lock's holder).
    fn waits_for(&self) -> Option<u64> {
        match *self {
            WaitRecord::Join(id) => Some(id),
            WaitRecord::OtherWorker { green_thread, .. } if green_thread != 0 => Some(green_thread),
            WaitRecord::Scope { child, .. } if child != 0 => Some(child),
            WaitRecord::Lock { holder, .. } if holder != 0 => Some(holder),
            _ => None,
        }
    }
}

impl fmt::Display for WaitRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let wait = match *self {
            WaitRecord::Sleep => Wait::Sleep,
            WaitRecord::Io { fd, interest } => Wait::Io { fd, interest },
            WaitRecord::Join(id) => Wait::Join(id),
            WaitRecord::Remote(what) => Wait::Remote(what),
            WaitRecord::Sync { what, address } => {
                return match address {
                    0 => write!(f, "waiting on {what}"),
                    address => write!(f, "waiting on {what} (at {address:#x})"),
                };
            }
            WaitRecord::Scope { running, scope, .. } => Wait::Scope { running, scope },
            WaitRecord::Select(select) => Wait::Select(select),
            WaitRecord::OtherWorker {
                worker,
                green_thread: 0,
            } => {
                return write!(
                    f,
                    "joining a green thread spawned on worker {worker} (not started yet)"
                );
            }
            WaitRecord::OtherWorker {
                worker,
                green_thread,
            } => {
                return write!(f, "joining green thread {green_thread} on worker {worker}");
            }
            WaitRecord::Shared(what) => Wait::Shared(what),
            WaitRecord::Futex(address) => Wait::Futex(address),
            WaitRecord::Future(type_name) => Wait::Future(type_name),
            WaitRecord::Park => {
                return write!(f, "in greenweave::thread::park, until Thread::unpark");
            }
            WaitRecord::Lock {
                what,
                address,
                holder,
            } => {
                write!(f, "waiting on {what} (the lock at {address:#x}), ")?;
                return match holder {
                    0 => write!(f, "held by readers or being handed over"),
                    holder => write!(f, "held by green thread {holder}"),
                };
            }
        };
        wait.fmt(f)
    }
}

impl GreenThread {
    /// Its id, as [`Thread::id`](crate::thread::Thread::id) numbers it.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(entry.id(), sleeper.thread().id().as_u64());
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its name, if it was given one.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(entry.name(), Some("sleeper"));
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The worker it runs on.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(entry.worker(), 0);
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// Running, ready or parked.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(entry.state(), greenweave::runtime::GreenThreadState::Parked);
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn state(&self) -> GreenThreadState {
        self.state
    }

    /// For a parked green thread, the kind of its wait, one word: `sleep`, `io` (an fd),
    /// `join`, `remote` (a result from another OS thread: `unblock`, a hostname lookup),
    /// `sync` (a channel, condvar, event, barrier, semaphore...), `lock` (a green `Mutex` or
    /// `RwLock`), `scope` (`thread::scope` waiting for its green threads), `select`,
    /// `other_worker` (joining a green thread of another worker), `shared` (a `sync::shared`
    /// channel) or `futex` (a std or parking_lot primitive, under the `hooks` feature).
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(entry.wait_kind(), Some("sleep"));
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn wait_kind(&self) -> Option<&'static str> {
        self.wait.as_ref().map(WaitRecord::kind)
    }

    /// For a parked green thread, what it waits on, in words (the fd and interest, the lock
    /// and who holds it, the green thread joined, the channel or other primitive and its
    /// address, which tells two channels apart...).
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(entry.waiting_on().as_deref(), Some("sleeping"));
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn waiting_on(&self) -> Option<String> {
        self.wait.as_ref().map(ToString::to_string)
    }

    /// The green thread whose progress alone can end this one's wait: the one it joins (on
    /// this worker or, once that worker has spawned it, on another), the holder of the lock
    /// it waits for, or, at the end of a `thread::scope`, one of the scope's green threads
    /// still running (the one on a wait-for cycle, if one is). The edges of the dump's
    /// wait-for graph.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(entry.waits_for(), None); // a sleep waits for no green thread
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn waits_for(&self) -> Option<u64> {
        self.wait.as_ref().and_then(WaitRecord::waits_for)
    }

    /// How long it has been parked: from the scheduler's last poll before the park (at most a
    /// few dozen green-thread runs earlier), so it can read a little long.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert!(entry.parked_for().is_some());
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn parked_for(&self) -> Option<Duration> {
        self.parked_for
    }

    /// How long until its park's deadline (a sleep's end, a timeout), if it has one.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert!(entry.deadline_in().unwrap() <= std::time::Duration::from_secs(60));
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn deadline_in(&self) -> Option<Duration> {
        self.deadline_in
    }

    /// The green thread that spawned it, if any (a green thread spawned by `spawn_on` from
    /// another worker names none).
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(entry.parent(), Some(greenweave::thread::current().id().as_u64()));
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn parent(&self) -> Option<u64> {
        self.parent
    }

    /// The backtrace of its suspended stack, innermost frame first (from the switch where it
    /// parked or yielded); `None` in a dump without backtraces, and for a green thread that
    /// has not started. A green thread suspended inside a coroutine or greenlet it runs (a
    /// generator that parked) shows that stack, down to its root. Green threads parked with
    /// the same chain of calls share one backtrace (the same slice).
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert!(entry.backtrace().unwrap().iter().any(|f| f.symbol().contains("sleep")));
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn backtrace(&self) -> Option<&[Frame]> {
        self.backtrace.as_deref().map(DistinctStack::frames)
    }

    /// How many bytes of its stack it uses now: from the top of its stack to its saved stack
    /// pointer. `None` for a green thread that runs, has not started, or is suspended inside a
    /// coroutine or greenlet it runs (on that one's stack).
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump_without_backtraces();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     let used = entry.stack_used().unwrap();
    ///     assert!(used > 0 && used <= entry.stack_peak().unwrap());
    ///     assert!(entry.stack_peak().unwrap() <= entry.stack_size().unwrap());
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn stack_used(&self) -> Option<usize> {
        self.stack.and_then(|stack| stack.current)
    }

    /// The most of its stack it has been seen to use, in bytes: the deepest page it has
    /// touched, so a whole number of pages, remembered across the releases of
    /// [`Builder::stack_release`](super::Builder::stack_release). `None` for a green thread
    /// that runs.
    ///
    /// [`dump`](super::dump()) reads it from the page tables (`mincore`, about a microsecond
    /// per stack) unless the long-park sweep has measured this very park. A dump without
    /// backtraces, made to stay cheap for a million green threads, makes no system call: its
    /// peak is the deepest measured so far (by the sweep, a dump with backtraces) or the
    /// current use if that is deeper, so a green thread that went deep and parked less than
    /// the release threshold ago may show less than it used. A green thread on a stack reused
    /// from a finished one may show pages that one touched until the sweep releases them.
    pub fn stack_peak(&self) -> Option<usize> {
        self.stack.map(|stack| stack.peak)
    }

    /// The usable size of its stack, in bytes; `None` for a green thread that runs.
    pub fn stack_size(&self) -> Option<usize> {
        self.stack.map(|stack| stack.size)
    }

    /// The bytes of frames it keeps on the heap if it was compacted when the dump was taken
    /// ([`Builder::compact_parked_stacks`](super::Builder::compact_parked_stacks)): its stack
    /// then holds no pages. `None` if it was not compacted. A dump with backtraces puts the
    /// frames back on the stack to walk them (the next sweep compacts it again).
    pub fn stack_compacted(&self) -> Option<usize> {
        self.stack.and_then(|stack| stack.compacted)
    }

    fn describe(&self) -> String {
        match &self.name {
            Some(name) => format!("'{name}' (id {})", self.id),
            None => format!("<unnamed> (id {})", self.id),
        }
    }
}

impl Dump {
    /// Every green thread, by id.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(dump.green_threads().len(), 2); // main and the sleeper
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn green_threads(&self) -> &[GreenThread] {
        &self.threads
    }

    /// How many workers the runtime has.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(dump.workers(), 1);
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The workers that did not answer in time (stuck in a long stall): their green threads
    /// are missing.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert!(dump.unanswered_workers().is_empty());
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn unanswered_workers(&self) -> &[usize] {
        &self.unanswered
    }

    /// The id of the green thread that took the dump, if a green thread did.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert_eq!(dump.taken_by(), Some(greenweave::thread::current().id().as_u64()));
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn taken_by(&self) -> Option<u64> {
        self.taken_by
    }

    /// The green threads that wait for each other in a cycle (each can only be woken by the
    /// next, the last by the first: a deadlock, even if the rest of the program runs on), each
    /// cycle starting from its smallest id.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert!(dump.cycles().is_empty());
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn cycles(&self) -> &[Vec<u64>] {
        &self.cycles
    }

    /// The chain of green threads that `id` waits for, one after the other (a join, a lock's
    /// holder), ending at one that waits for nobody in particular or where a cycle closes.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let sleeper = greenweave::thread::Builder::new()
    ///         .name("sleeper".into())
    ///         .spawn(|| greenweave::thread::sleep(std::time::Duration::from_secs(60)))
    ///         .unwrap();
    ///     greenweave::thread::yield_now();
    ///     let dump = greenweave::runtime::dump();
    ///     let entry = dump.green_threads().iter().find(|t| t.name() == Some("sleeper")).unwrap();
    ///     assert!(dump.wait_chain(entry.id()).is_empty());
    ///     sleeper.cancel();
    /// });
    /// ```
    pub fn wait_chain(&self, id: u64) -> Vec<u64> {
        let mut chain = Vec::new();
        let mut next = self.find(id).and_then(GreenThread::waits_for);
        while let Some(id) = next {
            if chain.contains(&id) {
                chain.push(id);
                break;
            }
            chain.push(id);
            next = self.find(id).and_then(GreenThread::waits_for);
        }
        chain
    }

    /// Numbers the distinct backtraces from 1, in the order of the first green thread (by id)
    /// with each, and counts the green threads that share each.
    fn backtrace_numbers(&self) -> BacktraceNumbers {
        let mut numbers = BacktraceNumbers::new();
        for thread in &self.threads {
            let Some(stack) = &thread.backtrace else {
                continue;
            };
            let next = numbers.len() + 1;
            numbers
                .entry(Arc::as_ptr(stack))
                .or_insert(SharedBacktrace {
                    number: next,
                    first: thread.id,
                    count: 0,
                })
                .count += 1;
        }
        numbers
    }

    fn find(&self, id: u64) -> Option<&GreenThread> {
        self.threads
            .binary_search_by_key(&id, |thread| thread.id)
            .ok()
            .map(|index| &self.threads[index])
    }

    /// The dump as one JSON object: `workers`, `unanswered_workers`, `unanswered` (for each
    /// of those: `worker`, `tid`, `waited_ms`, `doing`: what its OS thread was doing), `taken_by`,
    /// `green_threads` (each with `id`, `name`, `worker`, `state`, `parent`, `wait` (`kind`,
    /// `description` and the kind's own fields: `fd` and `interest`; `joins`; `lock`,
    /// `address` and `holder`; `primitive` and `address` (a channel, condvar, event...);
    /// `futex`; `running` (a scope); `other_worker` and `green_thread` (a join on another worker)), `parked_for_ms`, `deadline_in_ms`,
    /// `waits_for`, `stack` (`used`, `peak`, `size`, `compacted` in bytes, as
    /// [`GreenThread::stack_used`], [`GreenThread::stack_peak`], [`GreenThread::stack_size`]
    /// and [`GreenThread::stack_compacted`]; `null` while it runs),
    /// `backtrace_id` (the same number for green threads with the same backtrace, from 1;
    /// `null` without one), `backtrace` (`symbol`, `location`)) and `cycles`.
    ///
    /// ```
    /// greenweave::run(|| {
    ///     let json = greenweave::runtime::dump_without_backtraces().to_json();
    ///     assert!(json.contains(r#""name":"main""#));
    /// });
    /// ```
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(256 + self.threads.len() * 160);
        let _ = write!(
            out,
            "{{\"workers\":{},\"unanswered_workers\":[",
            self.workers
        );
        join(&mut out, &self.unanswered, |out, worker| {
            let _ = write!(out, "{worker}");
        });
        out.push_str("],\"unanswered\":[");
        join(&mut out, &self.unanswered_states, |out, unanswered| {
            let _ = write!(out, "{{\"worker\":{},\"tid\":", unanswered.worker);
            json_option(out, unanswered.tid.map(|tid| tid as u64));
            out.push_str(",\"waited_ms\":");
            json_millis(out, Some(unanswered.waited));
            out.push_str(",\"doing\":");
            json_string(out, &unanswered.doing);
            out.push('}');
        });
        out.push_str("],\"taken_by\":");
        json_option(&mut out, self.taken_by);
        out.push_str(",\"green_threads\":[");
        let numbers = self.backtrace_numbers();
        join(&mut out, &self.threads, |out, thread| {
            thread.write_json(out, &numbers)
        });
        out.push_str("],\"cycles\":[");
        join(&mut out, &self.cycles, |out, cycle| {
            out.push('[');
            join(out, cycle, |out, id| {
                let _ = write!(out, "{id}");
            });
            out.push(']');
        });
        out.push_str("]}");
        out
    }
}

impl GreenThread {
    fn write_json(&self, out: &mut String, numbers: &BacktraceNumbers) {
        let _ = write!(out, "{{\"id\":{},\"name\":", self.id);
        match &self.name {
            Some(name) => json_string(out, name),
            None => out.push_str("null"),
        }
        let _ = write!(
            out,
            ",\"worker\":{},\"state\":\"{}\",\"parent\":",
            self.worker,
            self.state.as_str()
        );
        json_option(out, self.parent);
        out.push_str(",\"wait\":");
        match &self.wait {
            None => out.push_str("null"),
            Some(wait) => {
                let _ = write!(out, "{{\"kind\":\"{}\",\"description\":", wait.kind());
                json_string(out, &wait.to_string());
                match *wait {
                    WaitRecord::Io { fd, interest } => {
                        let _ = write!(out, ",\"fd\":{fd},\"interest\":\"{interest}\"");
                    }
                    WaitRecord::Join(id) => {
                        let _ = write!(out, ",\"joins\":{id}");
                    }
                    WaitRecord::Lock {
                        what,
                        address,
                        holder,
                    } => {
                        out.push_str(",\"lock\":");
                        json_string(out, what);
                        let _ = write!(out, ",\"address\":\"{address:#x}\",\"holder\":");
                        json_option(out, (holder != 0).then_some(holder));
                    }
                    WaitRecord::Futex(address) => {
                        let _ = write!(out, ",\"futex\":\"{address:#x}\"");
                    }
                    WaitRecord::Sync { what, address } => {
                        out.push_str(",\"primitive\":");
                        json_string(out, what);
                        if address != 0 {
                            let _ = write!(out, ",\"address\":\"{address:#x}\"");
                        }
                    }
                    WaitRecord::Scope { running, .. } => {
                        let _ = write!(out, ",\"running\":{running}");
                    }
                    WaitRecord::OtherWorker {
                        worker,
                        green_thread,
                    } => {
                        let _ = write!(out, ",\"other_worker\":{worker},\"green_thread\":");
                        json_option(out, (green_thread != 0).then_some(green_thread));
                    }
                    _ => {}
                }
                out.push('}');
            }
        }
        out.push_str(",\"parked_for_ms\":");
        json_millis(out, self.parked_for);
        out.push_str(",\"deadline_in_ms\":");
        json_millis(out, self.deadline_in);
        out.push_str(",\"waits_for\":");
        json_option(out, self.waits_for());
        out.push_str(",\"stack\":");
        match self.stack {
            None => out.push_str("null"),
            Some(stack) => {
                out.push_str("{\"used\":");
                json_option(out, stack.current.map(|used| used as u64));
                let _ = write!(out, ",\"peak\":{},\"size\":{}", stack.peak, stack.size);
                out.push_str(",\"compacted\":");
                json_option(out, stack.compacted.map(|bytes| bytes as u64));
                out.push('}');
            }
        }
        out.push_str(",\"backtrace_id\":");
        let shared = self
            .backtrace
            .as_ref()
            .map(|stack| &numbers[&Arc::as_ptr(stack)]);
        json_option(out, shared.map(|shared| shared.number as u64));
        out.push_str(",\"backtrace\":");
        match &self.backtrace {
            None => out.push_str("null"),
            // Written once per distinct stack, copied for each green thread that shares it.
            Some(stack) => out.push_str(stack.json()),
        }
        out.push('}');
    }
}

/// `frames` as a JSON array of `{"symbol":..., "location":...}`.
fn json_frames(out: &mut String, frames: &[Frame]) {
    out.push('[');
    join(out, frames, |out, frame| {
        out.push_str("{\"symbol\":");
        json_string(out, &frame.symbol);
        out.push_str(",\"location\":");
        match &frame.location {
            Some(location) => json_string(out, location),
            None => out.push_str("null"),
        }
        out.push('}');
    });
    out.push(']');
}

fn join<T>(out: &mut String, items: &[T], mut each: impl FnMut(&mut String, &T)) {
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        each(out, item);
    }
}

fn json_option(out: &mut String, value: Option<u64>) {
    match value {
        Some(value) => {
            let _ = write!(out, "{value}");
        }
        None => out.push_str("null"),
    }
}

fn json_millis(out: &mut String, value: Option<Duration>) {
    match value {
        Some(value) => {
            let _ = write!(out, "{:.3}", value.as_secs_f64() * 1000.0);
        }
        None => out.push_str("null"),
    }
}

/// `text` as a JSON string (RFC 8259, section 7).
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl fmt::Display for Dump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |state| self.threads.iter().filter(|t| t.state == state).count();
        writeln!(
            f,
            "greenweave dump: {} green threads on {} worker{} ({} running, {} ready, {} parked)",
            self.threads.len(),
            self.workers,
            if self.workers == 1 { "" } else { "s" },
            count(GreenThreadState::Running),
            count(GreenThreadState::Ready),
            count(GreenThreadState::Parked),
        )?;
        for unanswered in &self.unanswered_states {
            writeln!(f, "{unanswered}")?;
        }
        let numbers = self.backtrace_numbers();
        for thread in &self.threads {
            writeln!(f)?;
            write!(f, "green thread {}", thread.describe())?;
            if self.workers > 1 {
                write!(f, " on worker {}", thread.worker)?;
            }
            if let Some(parent) = thread.parent {
                write!(f, ", spawned by {parent}")?;
            }
            if self.taken_by == Some(thread.id) {
                write!(f, ", taking this dump")?;
            }
            write!(f, ": {}", thread.state.as_str())?;
            if let Some(parked_for) = thread.parked_for {
                write!(f, " for {}", human(parked_for))?;
            }
            if let Some(wait) = &thread.wait {
                write!(f, ", {wait}")?;
            }
            if let Some(deadline_in) = thread.deadline_in {
                write!(f, " (deadline in {})", human(deadline_in))?;
            }
            writeln!(f)?;
            if let Some(stack) = thread.stack {
                write!(f, "    stack: ")?;
                if let Some(used) = stack.current {
                    write!(f, "{} in use, ", bytes(used))?;
                }
                write!(f, "{} at most, of {}", bytes(stack.peak), bytes(stack.size))?;
                match stack.compacted {
                    Some(frames) => {
                        writeln!(f, "; compacted: {} of frames on the heap", bytes(frames))?
                    }
                    None => writeln!(f)?,
                }
            }
            let chain = self.wait_chain(thread.id);
            if chain.len() > 1 {
                let names: Vec<String> = chain.iter().map(u64::to_string).collect();
                writeln!(f, "    waits for green threads {}", names.join(" -> "))?;
            }
            if let Some(stack) = &thread.backtrace {
                let shared = &numbers[&Arc::as_ptr(stack)];
                if shared.first != thread.id {
                    // Shown once, under the first green thread that has it.
                    writeln!(
                        f,
                        "    backtrace {}, as for green thread {} above",
                        shared.number, shared.first
                    )?;
                } else {
                    if shared.count > 1 {
                        writeln!(
                            f,
                            "    backtrace {}, the same for {} green threads:",
                            shared.number, shared.count
                        )?;
                    }
                    for (index, frame) in stack.frames().iter().enumerate() {
                        writeln!(f, "  {index:>3}: {}", frame.symbol)?;
                        if let Some(location) = &frame.location {
                            writeln!(f, "           at {location}")?;
                        }
                    }
                }
            }
        }
        for cycle in &self.cycles {
            let names: Vec<String> = cycle.iter().map(u64::to_string).collect();
            writeln!(
                f,
                "\ndeadlock: green threads {} -> {} wait for each other in a cycle (a join or a \
                 lock held by the next); nothing else can wake them",
                names.join(" -> "),
                cycle[0]
            )?;
        }
        write!(f, "\nend of greenweave dump")
    }
}

/// A distinct backtrace of a dump, as its text and JSON name it.
struct SharedBacktrace {
    /// Its number, from 1 (the JSON's `backtrace_id`).
    number: usize,
    /// The first green thread (by id) with it: the text shows its frames there.
    first: u64,
    /// How many green threads have it.
    count: usize,
}

/// Each distinct backtrace of a dump, by its stack's address.
type BacktraceNumbers = HashMap<*const DistinctStack, SharedBacktrace>;

/// Makes green threads of different workers parked with the same chain of return addresses
/// share one stack (each worker interns its own), so that it is symbolized and shown once.
/// Linear in the green threads; one lookup of a chain per distinct stack of each worker.
fn share_backtraces(threads: &mut [GreenThread]) {
    // Each worker's stack (kept alive here, so its address stays its own) and the one that
    // replaces it.
    let mut chosen: HashMap<*const DistinctStack, (Arc<DistinctStack>, Arc<DistinctStack>)> =
        HashMap::new();
    let mut by_chain: HashMap<Box<[usize]>, Arc<DistinctStack>> = HashMap::new();
    for thread in threads {
        let Some(stack) = &mut thread.backtrace else {
            continue;
        };
        let replacement = &chosen
            .entry(Arc::as_ptr(stack))
            .or_insert_with(|| {
                let shared = by_chain
                    .entry(stack.addresses().into())
                    .or_insert_with(|| stack.clone())
                    .clone();
                (stack.clone(), shared)
            })
            .1;
        if !Arc::ptr_eq(replacement, stack) {
            *stack = replacement.clone();
        }
    }
}

/// A size for people: `712 B`, `3.5 KiB`, `132 KiB`, `8 MiB`.
fn bytes(bytes: usize) -> String {
    const KIB: usize = 1024;
    match bytes {
        0..KIB => format!("{bytes} B"),
        KIB..10240 => format!("{:.1} KiB", bytes as f64 / KIB as f64),
        10240..1_048_576 => format!("{} KiB", bytes / KIB),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

/// A duration for people: `850 ms`, `12.3 s`, `5 min 2 s`.
fn human(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs >= 60 {
        format!("{} min {} s", secs / 60, secs % 60)
    } else if secs >= 1 {
        format!("{:.1} s", duration.as_secs_f64())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// The cycles of the wait-for graph of the parked green threads in `threads` (sorted by id).
/// Each green thread waits for at most one other, so every weakly connected piece has at most
/// one cycle: follow each chain once, colouring what it visits.
/// Gives each green thread waiting at the end of a `thread::scope` its one edge: a green
/// thread of that scope still listed. The wait cannot end before every one of them has, so any
/// of them is a true edge. The one chosen lies on a cycle of the wait-for graph where there is
/// one (a depth-first walk over every edge, a scope's to each of its green threads, finds
/// them), else it is one that itself waits for a green thread, else the first. Linear in the
/// green threads and their edges.
fn choose_scope_edges(threads: &mut [GreenThread]) {
    let scope_of = |thread: &GreenThread| match thread.wait {
        Some(WaitRecord::Scope { scope, .. }) if thread.state == GreenThreadState::Parked => {
            Some(scope)
        }
        _ => None,
    };
    if !threads.iter().any(|thread| scope_of(thread).is_some()) {
        return;
    }
    let index_of = |id: u64| threads.binary_search_by_key(&id, |thread| thread.id).ok();
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for (index, thread) in threads.iter().enumerate() {
        if thread.in_scope != 0 {
            members.entry(thread.in_scope).or_default().push(index);
        }
    }
    // Every other parked green thread has at most one edge.
    let single: Vec<Option<usize>> = threads
        .iter()
        .map(|thread| {
            (thread.state == GreenThreadState::Parked && scope_of(thread).is_none())
                .then(|| thread.waits_for().and_then(index_of))
                .flatten()
        })
        .collect();
    let scoped: Vec<&[usize]> = threads
        .iter()
        .map(|thread| {
            scope_of(thread)
                .and_then(|scope| members.get(&scope))
                .map_or(&[][..], Vec::as_slice)
        })
        .collect();
    let mut chosen: Vec<Option<usize>> = vec![None; threads.len()];
    // 0: not reached yet; 1: on the walk's path now; 2: every edge from it followed.
    let mut colour = vec![0u8; threads.len()];
    // The walk's path: each green thread on it with the index of its next edge to follow.
    let mut path: Vec<(usize, usize)> = Vec::new();
    for root in 0..threads.len() {
        if colour[root] != 0 {
            continue;
        }
        colour[root] = 1;
        path.push((root, 0));
        while let Some(top) = path.len().checked_sub(1) {
            let (at, edge) = path[top];
            path[top].1 += 1;
            let target = match single[at] {
                Some(to) => (edge == 0).then_some(to),
                None => scoped[at].get(edge).copied(),
            };
            match target {
                None => {
                    colour[at] = 2;
                    path.pop();
                }
                Some(to) if colour[to] == 0 => {
                    colour[to] = 1;
                    path.push((to, 0));
                }
                Some(to) if colour[to] == 1 => {
                    // A cycle: from `to` along the path to `at`, and back to `to`. Each scope
                    // waiter on it takes its successor on the cycle (the first cycle found
                    // through it keeps it).
                    let start = path
                        .iter()
                        .rposition(|&(node, _)| node == to)
                        .expect("a green thread on the walk's path is on `path`");
                    for position in start..path.len() {
                        let node = path[position].0;
                        let successor = path.get(position + 1).map_or(to, |&(next, _)| next);
                        if !scoped[node].is_empty() && chosen[node].is_none() {
                            chosen[node] = Some(successor);
                        }
                    }
                }
                Some(_) => {}
            }
        }
    }
    for at in 0..threads.len() {
        let members = scoped[at];
        let Some(&first) = members.first() else {
            continue;
        };
        let child = chosen[at].unwrap_or_else(|| {
            members
                .iter()
                .copied()
                .find(|&member| single[member].is_some() || !scoped[member].is_empty())
                .unwrap_or(first)
        });
        let child_id = threads[child].id;
        if let Some(WaitRecord::Scope { child, .. }) = &mut threads[at].wait {
            *child = child_id;
        }
    }
}

fn find_cycles(threads: &[GreenThread]) -> Vec<Vec<u64>> {
    let index_of = |id: u64| threads.binary_search_by_key(&id, |thread| thread.id).ok();
    // 0: not visited; otherwise the number of the walk that first visited it.
    let mut visited = vec![0usize; threads.len()];
    let mut cycles = Vec::new();
    for start in 0..threads.len() {
        if visited[start] != 0 {
            continue;
        }
        let walk = start + 1;
        let mut at = start;
        loop {
            visited[at] = walk;
            let next = threads[at]
                .waits_for()
                .filter(|_| threads[at].state == GreenThreadState::Parked)
                .and_then(index_of);
            let Some(next) = next else { break };
            if visited[next] == walk {
                // A cycle through `next`, found on this walk: collect it.
                let mut cycle = vec![threads[next].id];
                let mut member = next;
                while let Some(following) = threads[member].waits_for().and_then(index_of) {
                    if following == next {
                        break;
                    }
                    cycle.push(threads[following].id);
                    member = following;
                }
                let smallest = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
                cycle.rotate_left(smallest);
                cycles.push(cycle);
                break;
            }
            if visited[next] != 0 {
                break;
            }
            at = next;
        }
    }
    cycles
}

// The signal: a handler that writes one byte to a pipe, and a watcher thread that reads it
// and writes the dump of every runtime that asked for it to stderr.

/// The pipe's write end, for the handler (-1 until the watcher has started).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

/// The runtimes that dump on a signal (each registers while it runs), and the signals whose
/// handler is installed.
static WATCHED: Mutex<Watched> = Mutex::new(Watched {
    pools: Vec::new(),
    signals: Vec::new(),
});

struct Watched {
    pools: Vec<(i32, Weak<Pool>)>,
    signals: Vec<i32>,
}

/// The signals [`Builder::dump_on_signal`](super::Builder::dump_on_signal) refuses: those that
/// cannot be caught, and those the program's own crash handling needs.
pub(crate) fn check_signal(signal: i32) -> io::Result<()> {
    let refused = [
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
    ];
    if signal <= 0 || signal > libc::SIGRTMAX() || refused.contains(&signal) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "dump_on_signal: signal {signal} cannot carry the dump (it is not a signal \
                 number, cannot be caught, or reports a crash); use SIGQUIT, SIGUSR1 or SIGUSR2"
            ),
        ));
    }
    // Linux numbers its real-time signals from 32; glibc keeps the first few for its threads
    // and timers and moves SIGRTMIN past them. Catching one breaks what glibc uses it for, and
    // `sigaction` refuses it (`EINVAL` when the runtime starts).
    if (32..libc::SIGRTMIN()).contains(&signal) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "dump_on_signal: signal {signal} is reserved by the C library (glibc keeps \
                 signals 32 to {} for its own threads and timers); use SIGQUIT, SIGUSR1, SIGUSR2 \
                 or a real-time signal from libc::SIGRTMIN() ({}) to libc::SIGRTMAX()",
                libc::SIGRTMIN() - 1,
                libc::SIGRTMIN(),
            ),
        ));
    }
    Ok(())
}

/// Makes `signal` write a dump of `pool`'s runtime to stderr while the pool lives: installs
/// the handler (once per signal) and starts the watcher thread (once per process).
pub(crate) fn dump_on_signal(signal: i32, pool: &Arc<Pool>) -> io::Result<()> {
    start_watcher()?;
    let mut watched = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
    watched.pools.retain(|(_, pool)| pool.strong_count() > 0);
    watched.pools.push((signal, Arc::downgrade(pool)));
    if !watched.signals.contains(&signal) {
        install_handler(signal)?;
        watched.signals.push(signal);
    }
    Ok(())
}

fn start_watcher() -> io::Result<()> {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    STARTED
        .get_or_init(|| {
            let mut fds = [0; 2];
            // SAFETY: `fds` has room for the two descriptors pipe2 writes.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                return Err(io::Error::last_os_error().to_string());
            }
            let [read_end, write_end] = fds;
            // The handler must never block: a full pipe already has a dump coming.
            // SAFETY: fcntl on a descriptor we own.
            unsafe { libc::fcntl(write_end, libc::F_SETFL, libc::O_NONBLOCK) };
            SIGNAL_PIPE.store(write_end, Ordering::Release);
            std::thread::Builder::new()
                .name("greenweave-dump".into())
                .spawn(move || watch(read_end))
                .map(drop)
                .map_err(|error| error.to_string())
        })
        .clone()
        .map_err(|error| {
            io::Error::other(format!(
                "dump_on_signal: could not start the dump's watcher thread: {error}"
            ))
        })
}

/// Installs the handler for `signal`, which from then on also carries `os_thread`'s program
/// counter samples (the dump of a worker that runs its own code says where).
fn install_handler(signal: i32) -> io::Result<()> {
    type Handler = extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void);
    let handler = on_signal as Handler as usize;
    // SAFETY: a zeroed sigaction is a valid start; the handler is async-signal-safe (one
    // write(2), errno saved and restored, or a sample's two stores); SA_RESTART keeps the
    // program's blocking calls from failing with EINTR because of the signal.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    os_thread::sample_with(signal, handler);
    Ok(())
}

/// The signal handler: a program-counter sample's answer, or else one byte down the pipe;
/// nothing else (async-signal-safe).
extern "C" fn on_signal(signal: i32, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel's own arguments to this SA_SIGINFO handler.
    if unsafe { os_thread::answer_sample(info, context) } {
        return;
    }
    let fd = SIGNAL_PIPE.load(Ordering::Acquire);
    if fd < 0 {
        return;
    }
    // SAFETY: errno is this thread's; write(2) is async-signal-safe; the byte says which
    // signal (every signal number fits in a byte).
    unsafe {
        let errno = *libc::__errno_location();
        let byte = signal as u8;
        libc::write(fd, (&raw const byte).cast(), 1);
        *libc::__errno_location() = errno;
    }
}

/// The watcher thread: for each signal byte, dumps every live runtime registered for that
/// signal to stderr, with backtraces.
fn watch(read_end: RawFd) {
    loop {
        let mut byte = 0u8;
        // SAFETY: reads one byte into `byte` from the pipe we own.
        let read = unsafe { libc::read(read_end, (&raw mut byte).cast(), 1) };
        if read < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if read <= 0 {
            return;
        }
        let pools: Vec<Arc<Pool>> = {
            let watched = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
            watched
                .pools
                .iter()
                .filter(|(signal, _)| *signal as u8 == byte)
                .filter_map(|(_, pool)| pool.upgrade())
                .collect()
        };
        for pool in pools {
            let dump = dump_from_outside(&pool, true);
            drop(pool);
            let text = format!("{dump}\n");
            let _ = io::stderr().lock().write_all(text.as_bytes());
        }
    }
}
