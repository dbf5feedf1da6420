//! Green threads as `tracing` sees them (the `tracing` cargo feature): spans that stay with
//! the green thread that entered them, and trace-level events for its life.
//!
//! `tracing` keeps the current span per OS thread (its subscriber's span stack), and every
//! green thread of a worker runs on that worker's OS thread: without care, a span a green
//! thread enters and holds across a park would be current in whichever green thread runs
//! next, and that one's events would be recorded inside it. So, as tokio's `Instrumented`
//! enters its span around each poll, the scheduler gives each green thread its own stack of
//! entered spans: when a green thread switches out, every span it entered that is still
//! current (those above what was current when it was switched in) is exited, innermost first,
//! and kept in its task ([`TaskSpans`]); when it is next switched in, they are entered again,
//! outermost first. The stack is read through the dispatcher's `current_span`, which
//! tracing-subscriber's `Registry` (and so `fmt`) answers; a subscriber that does not track the
//! current span answers "unknown", and then nothing is moved.
//!
//! Events, all at the trace level with target `greenweave`, each carrying the green thread's
//! `green_thread.id` and `green_thread.name`: `spawn`, `park` (with `wait`, what it waits
//! for), `wake` (with `reason`: notified, timed out, cancelled) and `finish`.
//!
//! Owns: [`TaskSpans`], the switch-in and switch-out hooks and the events.
//! May not: cost anything when no subscriber was ever set (one relaxed load of tracing's
//! global flag per switch), or anything at all without the feature (the scheduler's hooks are
//! compiled out).

use std::cell::RefCell;

use tracing::{Id, dispatcher};

use super::task::{Task, Wait, Wake};

/// A green thread's spans: those it had entered when it last switched out, outermost first,
/// and while it runs, the span that was current when it was switched in (kept here rather
/// than on the scheduler's stack, so that nothing of it is live across the switch).
#[derive(Default)]
pub(crate) struct TaskSpans {
    entered: RefCell<Vec<Id>>,
    below: RefCell<Option<Id>>,
}

impl TaskSpans {
    /// Forgets the spans of a finished task, for reuse.
    pub(crate) fn reset(&self) {
        self.entered.borrow_mut().clear();
        self.below.borrow_mut().take();
    }
}

/// How deep a green thread's stack of entered spans may be before the switch-out stops
/// exiting them (a guard against a subscriber whose `exit` does not pop what `current_span`
/// reports).
const MAX_SPANS: usize = 1024;

/// Before `task` is switched in: notes the span current now (its switch-out goes back down
/// to it) and enters again the spans it had entered when it switched out.
#[inline(always)]
pub(crate) fn switch_in(task: &Task) {
    if dispatcher::has_been_set() {
        enter_spans(task);
    }
}

#[cold]
#[inline(never)]
fn enter_spans(task: &Task) {
    dispatcher::get_default(|dispatch| {
        *task.spans.below.borrow_mut() = dispatch.current_span().id().cloned();
        for id in task.spans.entered.borrow().iter() {
            dispatch.enter(id);
        }
    });
}

/// After `task` switched out (parked, yielded or finished): exits the spans it entered and
/// still holds, down to the one current at its switch-in, and keeps them in the task.
#[inline(always)]
pub(crate) fn switch_out(task: &Task) {
    if dispatcher::has_been_set() {
        exit_spans(task);
    }
}

#[cold]
#[inline(never)]
fn exit_spans(task: &Task) {
    let baseline = task.spans.below.borrow_mut().take();
    dispatcher::get_default(|dispatch| {
        let mut spans = task.spans.entered.borrow_mut();
        spans.clear();
        while spans.len() < MAX_SPANS {
            let current = dispatch.current_span();
            let Some(id) = current.id() else { break };
            if Some(id) == baseline.as_ref() {
                break;
            }
            let id = id.clone();
            dispatch.exit(&id);
            let popped = dispatch.current_span().id() != Some(&id);
            spans.push(id);
            if !popped {
                break;
            }
        }
        spans.reverse();
    });
}

/// `task` was spawned.
#[inline]
pub(crate) fn spawned(task: &Task) {
    tracing::event!(
        target: "greenweave",
        tracing::Level::TRACE,
        green_thread.id = task.id,
        green_thread.name = task.name.as_deref(),
        "spawn"
    );
}

/// `task` parked for `wait`.
#[inline]
pub(crate) fn parked(task: &Task, wait: &Wait) {
    tracing::event!(
        target: "greenweave",
        tracing::Level::TRACE,
        green_thread.id = task.id,
        green_thread.name = task.name.as_deref(),
        wait = %wait,
        "park"
    );
}

/// `task` was made runnable for `reason`.
#[inline]
pub(crate) fn woken(task: &Task, reason: Wake) {
    tracing::event!(
        target: "greenweave",
        tracing::Level::TRACE,
        green_thread.id = task.id,
        green_thread.name = task.name.as_deref(),
        reason = ?reason,
        "wake"
    );
}

/// `task` ran to its end.
#[inline]
pub(crate) fn finished(task: &Task) {
    tracing::event!(
        target: "greenweave",
        tracing::Level::TRACE,
        green_thread.id = task.id,
        green_thread.name = task.name.as_deref(),
        "finish"
    );
}
