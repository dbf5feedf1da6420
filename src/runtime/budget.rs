//! The cooperative budget: how many green I/O and synchronisation operations a green thread
//! may complete in a row without parking before the next one first lets the others run.
//!
//! A green thread runs until it parks, so one whose operations never have to wait (a socket
//! whose peer always keeps up, connects to a listener on the same OS thread, an accept that
//! keeps failing, a channel that always has a message) would never let the others run: the
//! listener's acceptor, a heartbeat, a timer. As tokio does, every operation that may park
//! [`spend`]s one unit of a per-OS-thread budget of [`BUDGET`] units; the scheduler refills it
//! each time it resumes a green thread, so an operation that parks (or a `yield_now`) starts
//! the count again. When an operation finds the budget spent, it first polls the reactor and
//! the timers, so the green threads they wake run ahead of it, then yields (a cancellation
//! point, bounded by a `time::timeout` in force, as every yield), and only then does its work:
//! nothing it took is lost if the yield unwinds.
//!
//! What spends: every green I/O call that may wait (read, write, send, receive, peek, accept,
//! connect, the `Async` adapter's calls and waits; of a run of accepts that succeed in one
//! turn only the first, see `Source::do_accept`), and every green synchronisation call that
//! may park (a channel's `recv` and a bounded channel's `send`, `Mutex::lock`, `RwLock::read`
//! and `write`, `Semaphore::acquire`, a oneshot `recv`, `JoinHandle::join`, `Barrier::wait`,
//! `Event::wait`, `WaitGroup::wait`, and their timed variants). What does not, as in tokio:
//! the `try_` calls (`try_recv`, `try_send`, `try_lock`, `try_acquire`...) and an unbounded
//! channel's `send`, which never park, so that they never switch either: code may rely on a
//! `try_` call not letting another green thread run in the middle of its work (the one
//! exception, a receive that meets a select waiting to send on a rendezvous channel, is in
//! `sync::mpsc`'s documentation).
//!
//! Owns: the budget counter (one thread-local `Cell<u32>`), [`spend`] and [`refill`].
//! May not: park (only yield), or cost the operations' fast path more than a decrement and a
//! branch: the yield is out of line. Outside a green thread (no runtime, the scheduler's own
//! stack, a coroutine a green thread resumed, an unwind) a spent budget is refilled and the
//! operation goes on: it never yields there.

use std::cell::Cell;

use super::scheduler;

/// Operations a green thread may complete without parking before the next one yields.
///
/// 128, as tokio. A yield and the reactor poll that precedes it cost about a microsecond (one
/// non-blocking `epoll_wait` and two switches), against at least 128 system calls of a few
/// hundred nanoseconds each for an I/O loop: under 2% of a loop that never parks, nothing for
/// one that parks at least once per 128 operations (every request-response server). And a
/// green thread holds its OS thread for at most 128 operations between two chances of the
/// others, a fraction of a millisecond of system calls; a listener's backlog (128 by default)
/// holds every connection a connecting loop makes before its acceptor gets its turn.
pub(crate) const BUDGET: u32 = 128;

thread_local! {
    /// Operations the running green thread may still complete without parking. Set to
    /// [`BUDGET`] by the scheduler each time it resumes a green thread.
    static LEFT: Cell<u32> = const { Cell::new(BUDGET) };
}

/// Gives the green thread the scheduler is about to resume a full budget.
#[inline(always)]
pub(crate) fn refill() {
    LEFT.set(BUDGET);
}

/// Spends one unit of the running green thread's budget, at the start of an operation that
/// may park (`what` names it, for the panic of a yield outside a runtime, which cannot
/// happen). If the budget is spent, the other green threads run first (see the module doc).
#[inline(always)]
pub(crate) fn spend(what: &str) {
    let left = LEFT.get();
    if left == 0 {
        exhausted(what);
    } else {
        LEFT.set(left - 1);
    }
}

/// Spends for one call of a run of calls that may go on in one turn without spending (an
/// accept loop: `Source::do_accept`, the hooked `accept4`): `run` is how many calls of the run
/// came before this one in this turn. The first call of a run spends a unit as any call; from
/// the `bound`th on, the others run first, as with a spent budget; the calls between spend
/// nothing.
#[inline]
pub(crate) fn spend_in_run(what: &str, run: u32, bound: u32) {
    if run == 0 {
        spend(what);
    } else if run >= bound {
        exhausted(what);
    }
}

/// The budget is spent: lets the other green threads run, woken I/O and timers first, then
/// spends the first unit of the budget the resume refilled. Where the code cannot yield, only
/// refills.
#[cold]
#[inline(never)]
fn exhausted(what: &str) {
    if scheduler::can_park_here() {
        scheduler::with_scheduler(what, |scheduler| {
            scheduler.metrics.budget_forced_yield();
            scheduler.poll_without_blocking();
        });
        scheduler::yield_now(what);
    }
    LEFT.set(BUDGET - 1);
}

/// Operations left in the running green thread's budget (for unit tests).
#[cfg(test)]
pub(crate) fn left() -> u32 {
    LEFT.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_runtime_a_spent_budget_is_refilled_without_yielding() {
        // Outside a runtime a yield would panic: three times round the budget and one more.
        for _ in 0..BUDGET * 3 + 1 {
            spend("a test");
        }
        assert_eq!(left(), BUDGET - 1);
    }

    #[test]
    fn a_run_spends_for_its_first_call_and_at_its_bound_only() {
        refill();
        spend_in_run("a test", 0, 4);
        assert_eq!(left(), BUDGET - 1, "the first call of a run spends");
        for run in 1..4 {
            spend_in_run("a test", run, 4);
        }
        assert_eq!(left(), BUDGET - 1, "the calls inside the run spend nothing");
        spend("a test");
        assert_eq!(left(), BUDGET - 2);
        // At the bound, the spent budget's path whatever is left (outside a runtime: a refill,
        // less the unit of this call), where a plain spend would leave BUDGET - 3.
        spend_in_run("a test", 4, 4);
        assert_eq!(left(), BUDGET - 1, "the bound is a spent budget");
    }
}
