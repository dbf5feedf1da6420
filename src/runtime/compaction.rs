//! Compaction of long-parked green threads: their live frames moved to the heap, their whole
//! stack given back to the kernel, the frames put back at the same addresses before anything
//! touches them again.
//!
//! Owns: which parked green thread may be compacted ([`may_compact`], the rules that keep the
//! list in ARCHITECTURE.md, "Who may touch a parked stack", true), compacting one into a
//! sweep's release batch ([`compact`]: its frames and its coroutine go into
//! `Task::compacted`), [`Lending`] (a `thread::scope` open), and the checking mode (`--cfg
//! greenweave_compact_check`: `check_at_park`).
//!
//! May not: run anywhere but on the green thread's own scheduler with the green thread parked;
//! touch the park path, a wake-up or the switch in ordinary builds (the sweep of
//! `runtime::stack_release` compacts; `Task::restore_compacted` restores); decide what a wait
//! means.
//!
//! A compacted task has no coroutine (it is in `Task::compacted`, with the frames), so nothing
//! can resume it or walk its stack by mistake. Its frames go back when `run_task` finds no
//! coroutine (a test it makes anyway), before its coroutine is dropped (`Task`'s `Drop`,
//! `Task::abandon`) and before `runtime::dump` walks it for a backtrace.

use std::rc::Rc;

use super::task::{CompactedCoroutine, Task, TaskState, Wait};
use crate::stack::frames::SavedFrames;
use crate::stack::usage::ReleaseBatch;

/// Whether `wait`'s waker leaves the parked green thread's stack alone: it writes only to
/// records on the heap (the task, a primitive's queue, the reactor's per-fd waiters, the timer
/// heap, a `Parker`), and the green thread re-reads its condition after waking. The waits not
/// listed either keep a record on the parked stack that another party writes (a `select`'s
/// record), or lend it (a `thread::scope` waiting for green threads that borrow from it, an
/// `unblock` or `on_pool` helper using what the green thread lent it, a futex word that may
/// live on the stack, a future polled in place whose wakers and timers tokio may hold), or
/// are woken from another OS thread that may have been handed a borrow of it.
fn wait_leaves_stack_alone(wait: &Wait) -> bool {
    match wait {
        Wait::Sleep
        | Wait::Io { .. }
        | Wait::Park
        | Wait::Sync { .. }
        | Wait::Lock { .. }
        | Wait::Join(_) => true,
        Wait::Remote(_)
        | Wait::Scope { .. }
        | Wait::Select(_)
        | Wait::OtherWorker { .. }
        | Wait::Shared(_)
        | Wait::Futex(_)
        | Wait::Future(_) => false,
    }
}

/// Whether `task` may be compacted now: it is parked in a wait whose waker leaves its stack
/// alone, it lends nothing of its stack (no `thread::scope` of its own is open: its scoped
/// green threads may borrow any local of it), it is not compacted already, and it is
/// suspended on its own stack (parked inside a generator or greenlet it runs, it is not
/// compacted: what those stacks borrow from its own is not tracked).
pub(crate) fn may_compact(task: &Task) -> bool {
    task.state.get() == TaskState::Parked
        && task.lent.get() == 0
        && !task.is_compacted()
        && task
            .waiting
            .get()
            .is_some_and(|(wait, _)| wait_leaves_stack_alone(&wait))
}

/// Compacts `task`, which [`may_compact`]: copies its live frames to the heap, takes its
/// coroutine out of it into its compacted record with them, and adds its whole stack to
/// `batch`, whose `release` gives the pages back. Returns the bytes of frames saved, or `None`
/// if its coroutine is borrowed, finished, or suspended on another stack.
pub(crate) fn compact(task: &Task, batch: &mut ReleaseBatch) -> Option<usize> {
    compact_and_protect(task, batch, false)
}

/// [`compact`], and in the checking mode, if `protect`, makes the frames' pages fault. Only
/// with no green thread current (`check_at_park`, from the scheduler's loop): the protection
/// registers with the fault handler under a lock, which under the hooks would park a current
/// green thread, from inside a sweep.
fn compact_and_protect(task: &Task, batch: &mut ReleaseBatch, protect: bool) -> Option<usize> {
    debug_assert!(may_compact(task));
    let mut slot = task.coroutine.try_borrow_mut().ok()?;
    let coroutine = slot.as_ref()?;
    let stack = coroutine.stack();
    let sp = coroutine.suspended_at()?.addr();
    // SAFETY: `task` is parked (`may_compact`), on this scheduler's thread, which runs no
    // green thread now. Its coroutine leaves the task below, so nothing can resume it until
    // `Task::restore_compacted` has put the frames back (`run_task`, which finds no coroutine,
    // and every other way to its stack: ARCHITECTURE.md, "Who may touch a parked stack").
    // Nothing else touches its stack meanwhile: its wait is one whose waker writes only to
    // the heap, and it lends nothing (`may_compact`).
    let mut frames = unsafe { SavedFrames::save(stack, sp) }?;
    let bytes = frames.bytes();
    // SAFETY: as above; the range is released at the end of this sweep (or at once, in the
    // checking mode), with `task` still parked. Its guard, if lifted, comes back first thing
    // in its restore.
    unsafe { frames.queue_release(stack, batch, LIFTS_GUARDS) };
    if CHECKING && protect {
        // SAFETY: as above.
        unsafe { frames.protect(stack, task.id) };
    }
    let coroutine = slot.take()?;
    task.compacted
        .set(Some(Box::new(CompactedCoroutine { coroutine, frames })));
    Some(bytes)
}

/// Held while a green thread lends its stack to green threads it spawned (a `thread::scope`
/// of its own is open): it is never compacted meanwhile. Counts, so nested scopes add up.
pub(crate) struct Lending(Rc<Task>);

impl Lending {
    /// Marks `task`'s stack as lent until the returned value drops.
    pub(crate) fn begin(task: Rc<Task>) -> Lending {
        task.lent.set(task.lent.get() + 1);
        Lending(task)
    }
}

impl Drop for Lending {
    fn drop(&mut self) {
        self.0.lent.set(self.0.lent.get() - 1);
    }
}

/// Whether compaction lifts a stack's guard region with its pages, so that the page tables of
/// a run of compacted neighbours are freed (BENCHMARKS.md, "Compaction"); the checking mode
/// keeps every guard, to check one thing at a time.
const LIFTS_GUARDS: bool = !CHECKING;

/// Whether the checking mode is built in (`--cfg greenweave_compact_check`, set by
/// `.ci/run` for one pass of the test suite).
const CHECKING: bool = cfg!(greenweave_compact_check);

/// The checking mode's compaction at the park itself: if `task` may be compacted, its frames
/// are saved, its stack released and made inaccessible at once, and the range registered
/// with the fault handler, so that anything that touches it before the restore is reported
/// by name instead of reading zeros. Called by the scheduler right after the park is armed
/// (the park request on the stack has been read).
#[cfg(greenweave_compact_check)]
pub(crate) fn check_at_park(task: &Task, metrics: &super::metrics::WorkerMetrics) {
    if !may_compact(task) {
        return;
    }
    // Not measured (a `mincore` over an 8 MiB main stack at every park made the debug suite
    // crawl): the metrics count the compaction, not a release.
    let mut batch = ReleaseBatch::default();
    if compact_and_protect(task, &mut batch, true).is_some() {
        batch.release();
        metrics.stack_compacted();
    }
}
