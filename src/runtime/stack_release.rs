//! The long-park sweep: what a parked green thread's stack holds, and giving back its
//! high-water pages.
//!
//! Owns: [`StackWatch`] (per green thread: the deepest its stack has been seen to go, the park
//! last swept, whether the 75% warning was written), [`StackSweep`] (per scheduler: the
//! threshold, when the next sweep is due, the buffers a sweep reuses), the sweep itself, the
//! stack-use figures of `runtime::dump` ([`measure`]) and the 75% warning.
//!
//! May not: touch the stack of a green thread that is not parked, or run anywhere but on its
//! scheduler's OS thread with that green thread suspended (the scheduler calls [`StackSweep::
//! look`] from its loop, or from a poll inside another green thread's run); read a clock (the
//! scheduler hands it the time of its look); put anything on the park path: a park already
//! records its start (`Task::parked_since`) and its number (`Task::park_number`), which is all
//! the sweep needs.
//!
//! A green thread parked for at least the threshold (`runtime::Builder::stack_release`,
//! default 1 s) is swept once per park: one `mincore` over its stack gives the lowest resident
//! page (how deep it has gone since its pages were last released) and the resident pages below
//! its saved stack pointer, which nothing uses while it is parked (see ARCHITECTURE.md, "Stack
//! high-water release"); those are released with `MADV_DONTNEED`, every swept green thread's
//! range in one `process_madvise` call. A green thread that wakes and goes deep again gets
//! fresh zeroed pages from the kernel, as on its first descent. The stacks in the thread's pool
//! (`stack::pool`), which keep what their last green thread touched, are released below their
//! top page at each sweep too.
//!
//! With compaction on (`runtime::Builder::compact_parked_stacks`), a swept green thread that
//! `runtime::compaction` may compact is compacted instead: its frames go to the heap and its
//! whole stack is released in the same batch.
//!
//! When: the scheduler looks at each poll (every `RUNS_BETWEEN_POLLS` runs of a busy queue,
//! and before it waits in `epoll_wait`). A look is a compare unless a sweep is due; an idle
//! scheduler with parks not yet swept waits in `epoll_wait` at most until the first of them
//! has been parked for the threshold, then sweeps, then sleeps until something runs again.

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::metrics::WorkerMetrics;
use super::task::{Task, TaskState};
use crate::stack::usage::{self, ReleaseBatch};

/// How long a green thread stays parked before its stack's pages below its stack pointer are
/// released, unless `runtime::Builder::stack_release` says otherwise.
pub(crate) const DEFAULT_RELEASE_AFTER: Duration = Duration::from_secs(1);

/// The most stacks one sweep measures (and releases): each costs a `mincore` (1 to 5 us here)
/// and, after a deep descent, its share of the release (about 20 us for 124 KiB), so a sweep
/// holds its worker up for at most a few milliseconds. Parks left over are due at once: the
/// scheduler runs what is ready and sweeps again at its next look, from the task it stopped at
/// (`StackSweep::cursor`).
const MAX_STACKS_PER_SWEEP: usize = 256;

/// The most tasks one sweep visits, swept or not: a visit is a few loads (about 50 ns among
/// millions, a cache miss each), so a sweep of ten million parked green threads held its
/// worker up for 290 ms in one go, and 8,192 visits still showed as a 400 us p99 in the
/// wake-ups of `examples/compacted_millions`. Past this, the sweep stops where it is and the
/// next one (due at once) goes on from there.
const MAX_VISITS_PER_SWEEP: usize = 1024;

/// A round of sweeps costs its worker at most about `1 / ROUND_COST_DIVISOR` of its time: the
/// next round comes no sooner than this many times the last round's own duration after it.
/// Among ten million parked green threads a round takes several hundred milliseconds, so
/// rounds come seconds apart and a park is swept up to that late.
const ROUND_COST_DIVISOR: u32 = 4;

/// Sweeps are at least `after / SWEEP_SPACING_DIVISOR` apart (`after`: the release threshold),
/// so that a stack is released at most an eighth of the threshold late, and a scheduler with
/// 10,000 green threads parking and waking does not walk them all at every look.
const SWEEP_SPACING_DIVISOR: u32 = 8;

/// The share of its stack (in percent) past which a green thread's use draws one warning.
const WARN_PERCENT: usize = 75;

/// One green thread's stack, as the sweep and the dump have seen it. Plain cells, written only
/// by its scheduler's thread while the green thread is suspended.
///
/// Three words, of which a spawn that reuses a task record resets one (`reset`): the park
/// numbers go on counting across reuses, so a stale `swept_park` never matches (and `held` is
/// read only when it does).
#[derive(Default)]
pub(crate) struct StackWatch {
    /// The deepest its stack has been seen to go, in bytes from the top (the lowest resident
    /// page at a sweep or a dump, so a whole number of pages): pages released since do not
    /// lower it. Its low bit, [`WARNED`], records that the 75% warning was written.
    deepest_and_warned: Cell<usize>,
    /// The number of the park last swept (`Task::park_number`): each park is swept once.
    swept_park: Cell<u64>,
    /// Bytes its stack held after that sweep (what the metrics' gauge sums while it stays
    /// parked).
    held: Cell<usize>,
}

/// The bit of [`StackWatch::deepest_and_warned`] set once the warning is written.
const WARNED: usize = 1;

impl StackWatch {
    /// As new, for a task record reused by another green thread (see above).
    #[inline]
    pub(crate) fn reset(&self) {
        self.deepest_and_warned.set(0);
    }

    /// Lets the next sweep visit the current park again (its frames were put back on the
    /// stack for a dump while it stayed parked).
    pub(crate) fn sweep_again(&self) {
        self.swept_park.set(0);
    }

    /// Records that `task`'s stack of `size` bytes has gone `deepest` bytes deep, and writes
    /// the warning the first time that passes [`WARN_PERCENT`]. Returns the deepest seen.
    fn note_deepest(&self, task: &Task, deepest: usize, size: usize) -> usize {
        let recorded = self.deepest_and_warned.get();
        let deepest = deepest
            .next_multiple_of(crate::stack::page_size())
            .max(recorded & !WARNED);
        let mut warned = recorded & WARNED;
        if warned == 0 && deepest * 100 > size * WARN_PERCENT {
            warned = WARNED;
            warn_deep(task, deepest, size);
        }
        self.deepest_and_warned.set(deepest | warned);
        deepest
    }
}

/// Writes the one line that says `task` has used more than [`WARN_PERCENT`] of its stack.
fn warn_deep(task: &Task, deepest: usize, size: usize) {
    let mut line = String::new();
    let _ = writeln!(
        line,
        "greenweave: green thread {} has used {} KiB of its {} KiB stack ({}%); it overflows \
         (and the process aborts) at 100%: give it a larger stack \
         (greenweave::thread::Builder::stack_size, runtime::Builder::stack_size) or make it \
         use less",
        task.describe(),
        deepest / 1024,
        size / 1024,
        deepest * 100 / size,
    );
    super::stall::write_to_stderr(line.as_bytes());
}

/// A green thread's stack use, for `runtime::dump`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StackUse {
    /// Bytes between the top and its saved stack pointer: `None` if it is suspended on another
    /// stack (inside a coroutine or greenlet it runs) or has not started.
    pub(crate) current: Option<usize>,
    /// The deepest it has been seen to go (see [`StackWatch`]).
    pub(crate) peak: usize,
    /// Its stack's usable size.
    pub(crate) size: usize,
    /// Bytes of frames on the heap while it is compacted (`runtime::compaction`).
    pub(crate) compacted: Option<usize>,
}

/// Measures `task`'s stack use, noting its peak (and writing the 75% warning the first time
/// that passes it); `None` if it runs now (its coroutine is borrowed) or has finished. Called
/// on the task's scheduler's thread, with the task suspended.
///
/// The current use is read from the saved stack pointer, for nothing. The peak is exact
/// without a system call when the sweep has measured this very park (nothing ran on the stack
/// since); otherwise `mincore` (about 1.2 us a stack here) finds it when `scratch` is given
/// (`runtime::dump` with backtraces, whose walk costs several times that anyway), and without
/// it (`dump_without_backtraces`, which must stay cheap for a million green threads) the
/// peak is the deepest measured so far, or the current use if that is deeper.
pub(crate) fn measure(task: &Task, scratch: Option<&mut Vec<u8>>) -> Option<StackUse> {
    // A compacted green thread's coroutine is in its compacted record, with its frames.
    if let Some(measured) = task.with_compacted(|compacted| {
        measure_coroutine(
            task,
            &compacted.coroutine,
            None,
            Some(compacted.frames.bytes()),
        )
    }) {
        return measured;
    }
    let coroutine = task.coroutine.try_borrow().ok()?;
    measure_coroutine(task, coroutine.as_ref()?, scratch, None)
}

/// [`measure`] for `task`'s coroutine, wherever it is; `compacted`: the bytes of its frames on
/// the heap, if it is compacted (then its stack holds nothing to measure).
fn measure_coroutine(
    task: &Task,
    coroutine: &super::task::TaskCoroutine,
    scratch: Option<&mut Vec<u8>>,
    compacted: Option<usize>,
) -> Option<StackUse> {
    let stack = coroutine.stack();
    let top = stack.top().as_ptr() as usize;
    let current = coroutine
        .suspended_at()
        .map(|sp| sp.addr())
        .filter(|&sp| sp > stack.limit() && sp <= top)
        .map(|sp| top - sp);
    let swept_this_park = task.state.get() == TaskState::Parked
        && task.stack_watch.swept_park.get() == task.park_number.get();
    let measured = match scratch {
        Some(scratch) if !swept_this_park => {
            usage::residency(stack, stack.limit(), scratch)
                .ok()?
                .deepest
        }
        _ => 0,
    };
    let peak =
        task.stack_watch
            .note_deepest(task, measured.max(current.unwrap_or(0)), stack.size());
    Some(StackUse {
        current,
        peak,
        size: stack.size(),
        compacted,
    })
}

/// A scheduler's side of the sweep.
pub(crate) struct StackSweep {
    /// How long a green thread must have been parked to be swept.
    after: Duration,
    /// Whether a swept green thread that may be is compacted (`runtime::compaction`) rather
    /// than released below its stack pointer.
    compact: bool,
    /// When the next sweep is due: `None` when no park is waiting for one.
    next: Cell<Option<Instant>>,
    /// The runs the scheduler had made at the last look that found nothing to wait for:
    /// another run since may have parked a green thread.
    runs_seen: Cell<u64>,
    /// `mincore`'s vector and the ranges to release, reused from sweep to sweep.
    scratch: RefCell<(Vec<u8>, ReleaseBatch)>,
    /// Where the next sweep starts in the task table: 0, or where a capped one stopped.
    cursor: Cell<usize>,
    /// What the round under way has gathered so far.
    round: Cell<Round>,
}

/// What one sweep found, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SweepResult {
    /// Green threads whose pages were released.
    pub(crate) releases: u64,
    /// Bytes released, from parked green threads' stacks and from pooled ones.
    pub(crate) released: u64,
    /// Bytes the stacks of green threads parked for the threshold or longer hold now.
    pub(crate) held: u64,
    /// Green threads compacted by this sweep (`runtime::compaction`).
    pub(crate) compactions: u64,
    /// Bytes of frames that compacted green threads keep on the heap now.
    pub(crate) compacted: u64,
    /// Whether this sweep ended a round (reached the end of the task table): only then are
    /// `held` and `compacted` the figures of every task.
    pub(crate) round_complete: bool,
}

impl StackSweep {
    /// The sweep for a runtime configured with `after` (`None`: no release, no sweep), which
    /// compacts the green threads it may if `compact`.
    pub(crate) fn new(after: Option<Duration>, compact: bool) -> Option<StackSweep> {
        after.map(|after| StackSweep {
            after,
            compact,
            next: Cell::new(None),
            runs_seen: Cell::new(0),
            scratch: RefCell::new((Vec::new(), ReleaseBatch::default())),
            cursor: Cell::new(0),
            round: Cell::new(Round::default()),
        })
    }

    /// A look of the scheduler at `now`, having made `runs` runs so far: sweeps if one is due
    /// (calling `visit_tasks` to visit every unfinished task), and returns when the
    /// next is due, for an idle scheduler's `epoll_wait` timeout.
    #[inline]
    pub(crate) fn look(
        &self,
        now: Instant,
        runs: u64,
        metrics: &WorkerMetrics,
        visit_tasks: VisitTasks<'_>,
    ) -> Option<Instant> {
        match self.next.get() {
            None if runs != self.runs_seen.get() => {
                // Green threads ran since the last look: any that parked meanwhile is due for
                // its sweep `after` from now at the latest.
                self.runs_seen.set(runs);
                self.next.set(Some(now + self.after));
            }
            Some(due) if now >= due => {
                self.runs_seen.set(runs);
                let (next, result) = self.sweep(now, visit_tasks);
                self.next.set(next);
                metrics.stacks_swept(&result);
            }
            _ => {}
        }
        self.next.get()
    }

    /// Sweeps every task parked for the threshold and not yet swept in this park; returns
    /// when the first of those parked for less will be due (`None`: none is), and the
    /// figures.
    #[cold]
    #[inline(never)]
    fn sweep(&self, now: Instant, visit_tasks: VisitTasks<'_>) -> (Option<Instant>, SweepResult) {
        let mut scratch = self.scratch.borrow_mut();
        let (mincore, batch) = &mut *scratch;
        let mut round = self.round.take();
        let mut result = SweepResult::default();
        let mut measured = 0;
        let mut visited = 0;
        let stopped_at = visit_tasks(self.cursor.get(), &mut |task| {
            if visited == MAX_VISITS_PER_SWEEP {
                return false;
            }
            visited += 1;
            if task.state.get() != TaskState::Parked {
                return true;
            }
            let watch = &task.stack_watch;
            if watch.swept_park.get() == task.park_number.get() {
                if let Some(frames) = task.compacted_bytes() {
                    round.compacted += frames as u64;
                } else {
                    round.held += watch.held.get() as u64;
                }
                return true;
            }
            let Some(since) = task.parked_since.get() else {
                return true;
            };
            let due = since + self.after;
            if now < due {
                round.next = Some(round.next.map_or(due, |next| next.min(due)));
                return true;
            }
            if measured == MAX_STACKS_PER_SWEEP {
                // The next sweep starts here.
                return false;
            }
            measured += 1;
            watch.swept_park.set(task.park_number.get());
            // Compacted at its park (the checking mode): nothing left to release.
            #[cfg(greenweave_compact_check)]
            if let Some(frames) = task.compacted_bytes() {
                round.compacted += frames as u64;
                watch.held.set(0);
                return true;
            }
            if self.compact && super::compaction::may_compact(task) {
                // How deep it went is measured first: compaction gives back every page.
                let mut resident = 0;
                if let Ok(coroutine) = task.coroutine.try_borrow()
                    && let Some(stack) = coroutine.as_ref().map(|coroutine| coroutine.stack())
                    && let Ok(residency) = usage::residency(stack, stack.limit(), mincore)
                {
                    watch.note_deepest(task, residency.deepest, stack.size());
                    resident = residency.resident;
                }
                if let Some(frames) = super::compaction::compact(task, batch) {
                    result.compactions += 1;
                    round.compacted += frames as u64;
                    if resident > 0 {
                        result.releases += 1;
                        result.released += resident as u64;
                    }
                    watch.held.set(0);
                    return true;
                }
            }
            if let Some((released, held)) = sweep_one(task, mincore, batch) {
                if released > 0 {
                    result.releases += 1;
                    result.released += released as u64;
                }
                watch.held.set(held);
                round.held += held as u64;
            }
            true
        });
        let finished = Instant::now();
        round.work += finished.saturating_duration_since(now);
        if let Some(slot) = stopped_at {
            // Capped: the rest of the round is due at once (after the scheduler has run what
            // is ready), from where this one stopped, so that a round of a million parked
            // green threads walks the task table once, not once per 256 stacks, and in
            // steps.
            self.cursor.set(slot);
            self.round.set(round);
            batch.release();
            return (Some(now), result);
        }
        // The round is complete: its figures are the gauges.
        self.cursor.set(0);
        result.held = round.held;
        result.compacted = round.compacted;
        result.round_complete = true;
        // Stacks freed into this thread's pool keep what their last green thread touched.
        result.released += crate::stack::pool::queue_pooled_pages(mincore, batch) as u64;
        batch.release();
        // A round visits every task, so a busy scheduler whose parks keep falling due one
        // after another must not sweep at every look: the next round comes no sooner than an
        // eighth of the threshold from now, nor than its own cost allows.
        let spacing = (self.after / SWEEP_SPACING_DIVISOR).max(round.work * ROUND_COST_DIVISOR);
        let next = round.next.map(|next| next.max(finished + spacing));
        (next, result)
    }
}

/// How a sweep visits the scheduler's unfinished tasks: from the task-table slot it is given,
/// in slot order, calling the visitor on each until it returns `false`; returns the slot of
/// the task it stopped at (the next sweep starts there), or `None` at the end of the table.
pub(crate) type VisitTasks<'a> =
    &'a mut dyn FnMut(usize, &mut dyn FnMut(&Task) -> bool) -> Option<usize>;

/// What a round of sweeps (one or more, each capped at [`MAX_STACKS_PER_SWEEP`] stacks)
/// gathers until it reaches the end of the task table.
#[derive(Clone, Copy, Default)]
struct Round {
    /// The earliest time a park seen too young becomes due.
    next: Option<Instant>,
    /// Bytes the swept stacks hold.
    held: u64,
    /// Bytes of frames compacted green threads keep on the heap.
    compacted: u64,
    /// The time its sweeps took so far.
    work: Duration,
}

/// Sweeps one parked task: notes how deep its stack went, and adds the resident pages below
/// its saved stack pointer to `batch`. Returns the bytes that will be released and those its
/// stack holds after that; `None` if its coroutine cannot be read (borrowed: it runs).
fn sweep_one(
    task: &Task,
    mincore: &mut Vec<u8>,
    batch: &mut ReleaseBatch,
) -> Option<(usize, usize)> {
    let coroutine = task.coroutine.try_borrow().ok()?;
    let coroutine = coroutine.as_ref()?;
    let stack = coroutine.stack();
    // Suspended on its own stack? Parked inside a coroutine or greenlet it runs, its saved
    // stack pointer is on that one, and where its own stack is in use is not recorded: then
    // nothing of it is released.
    let below = coroutine
        .suspended_at()
        .map_or(stack.limit(), |sp| usage::release_limit(stack, sp.addr()));
    let residency = usage::residency(stack, below, mincore).ok()?;
    task.stack_watch
        .note_deepest(task, residency.deepest, stack.size());
    let Some((start, end)) = residency.releasable else {
        return Some((0, residency.resident));
    };
    // SAFETY: the task is parked (the caller checked, and nothing resumes it during the sweep,
    // which runs on its scheduler's thread outside it); `[start, end)` lies below its saved
    // stack pointer less the red zone and a margin, on its own stack, where nothing lives
    // while it is suspended (ARCHITECTURE.md, "Stack high-water release"). It stays parked
    // until `batch.release()` at the end of this sweep.
    unsafe { batch.push(start, end) };
    Some((
        residency.releasable_resident,
        residency.resident - residency.releasable_resident,
    ))
}
