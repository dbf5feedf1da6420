//! Compaction of long-parked green threads: their live frames moved to the heap, their whole
//! stack given back to the kernel, the frames put back at the same addresses before anything
//! touches them again.
//!
//! Owns: which parked green thread may be compacted ([`may_compact`], the rules that keep the
//! list in ARCHITECTURE.md, "Who may touch a parked stack", true), compacting one into a
//! sweep's release batch ([`compact`]), restoring one ([`restore`]), and the checking mode
//! (`--cfg greenweave_compact_check`: [`check_at_park`]).
//!
//! May not: run anywhere but on the green thread's own scheduler with the green thread parked;
//! touch the park path or the switch in ordinary builds (the sweep of `runtime::stack_release`
//! compacts, and `Scheduler::make_runnable` restores, at the one place a parked green thread
//! becomes runnable again); decide what a wait means.
//!
//! Frames are restored before a green thread is made runnable (so before the ready queue's
//! prefetch, before its resume, before a dump walks it), before its coroutine is dropped
//! (`Task`'s `Drop`, `Task::abandon`) and before `runtime::dump` walks it for a backtrace.

use std::rc::Rc;

use super::task::{Task, TaskState, Wait};
use crate::stack::frames::{self, SavedFrames};
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

/// Compacts `task`, which [`may_compact`]: copies its live frames into its record and adds
/// its whole stack to `batch`, whose `release` gives the pages back. Returns the bytes of
/// frames saved, or `None` if its coroutine is borrowed, finished, or suspended on another
/// stack.
pub(crate) fn compact(task: &Task, batch: &mut ReleaseBatch) -> Option<usize> {
    debug_assert!(may_compact(task));
    let coroutine = task.coroutine.try_borrow().ok()?;
    let coroutine = coroutine.as_ref()?;
    let stack = coroutine.stack();
    let sp = coroutine.suspended_at()?.addr();
    // SAFETY: `task` is parked (`may_compact`), on this scheduler's thread, which runs no
    // green thread now; it stays parked until `Scheduler::make_runnable`, which restores the
    // frames first, as do the other ways its stack is reached (`restore`'s callers). Nothing
    // else touches its stack meanwhile: its wait is one whose waker writes only to the heap,
    // and it lends nothing (`may_compact`; ARCHITECTURE.md, "Who may touch a parked stack").
    let saved = unsafe { SavedFrames::save(stack, sp) }?;
    let bytes = saved.bytes();
    // SAFETY: as above; the frames are saved, and the range is released only after this
    // sweep has visited every task, with `task` still parked. Its guard, if lifted, is back
    // before it runs (`restore_compacted`).
    unsafe { frames::queue_release(stack, batch, LIFTS_GUARDS) };
    task.compacted.set(Some(saved));
    Some(bytes)
}

/// Puts `task`'s frames back on its stack, if it is compacted; returns whether it was.
/// Called before anything can touch its stack again: `Scheduler::make_runnable`, the drop or
/// abandonment of its coroutine, `runtime::dump`'s walk.
#[inline]
pub(crate) fn restore(task: &Task) -> bool {
    if !task.is_compacted() {
        return false;
    }
    restore_compacted(task);
    true
}

#[cold]
#[inline(never)]
fn restore_compacted(task: &Task) {
    let Some(saved) = task.compacted.take() else {
        return;
    };
    let coroutine = task.coroutine.borrow();
    let stack = coroutine
        .as_ref()
        .expect("a compacted green thread keeps its coroutine")
        .stack();
    if LIFTS_GUARDS && frames::guard_can_be_lifted(stack) {
        frames::reinstall_guard(stack);
    }
    if CHECKING {
        crate::overflow::unregister_guard(frames::frame_pages(stack, &saved).0);
        if let Err(error) = frames::unprotect_released(stack, &saved) {
            panic!(
                "greenweave (compaction checking mode): could not make a compacted stack \
                 accessible again: {error}"
            );
        }
    }
    // SAFETY: the frames came from this stack, whose context stayed suspended since (the
    // task was parked, and nothing runs on a compacted stack); the range is writable again
    // (released pages, or unprotected just above).
    unsafe { saved.restore(stack) };
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
pub(crate) const CHECKING: bool = cfg!(greenweave_compact_check);

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
    let mut batch = ReleaseBatch::default();
    if compact(task, &mut batch).is_none() {
        return;
    }
    metrics.stack_compacted();
    batch.release();
    let coroutine = task.coroutine.borrow();
    let Some(stack) = coroutine.as_ref().map(|coroutine| coroutine.stack()) else {
        return;
    };
    let Some(saved) = task.compacted.take() else {
        return;
    };
    // SAFETY: the task is compacted (above): nothing may touch its stack until `restore`,
    // which lifts the protection first.
    if unsafe { frames::protect_released(stack, &saved) } {
        let (start, end) = frames::frame_pages(stack, &saved);
        crate::overflow::register_compacted(start, end - start, task.id);
    }
    task.compacted.set(Some(saved));
}
