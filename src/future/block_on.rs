//! [`block_on`]: runs a future to completion from straight-line code, parking only the green
//! thread that calls it.
//!
//! Owns: the poll-park loop, the one spare waker each OS thread keeps for the next call (so a
//! call allocates nothing once a previous one has ended with no clone of its waker kept), and
//! the explanations of the mistakes a poll can panic with.
//!
//! May not: poll the future anywhere but on the calling green thread's stack (it is pinned
//! there, and dropped there by a cancellation's unwind), or park other than through
//! `scheduler::park` (so cancellation, `time::timeout` and the dump see it as any park).

use std::any::Any;
use std::cell::Cell;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use super::waker::{FirstPollWaker, GreenWaker, ThreadWaker};
use crate::runtime::budget;
use crate::runtime::scheduler::{self, RemoteQueue, with_scheduler};
use crate::runtime::task::{TaskKey, Wait};

thread_local! {
    /// A waker whose call has ended and which nothing else holds, for the next call on this
    /// OS thread to reuse.
    static SPARE_WAKER: Cell<Option<Arc<GreenWaker>>> = const { Cell::new(None) };
}

/// Runs `future` to completion and returns its output, as `futures::executor::block_on` and
/// `pollster::block_on` do, but parking only the calling green thread while the future is
/// pending: the other green threads of its worker run meanwhile.
///
/// The future is polled on the calling green thread. Its waker is `Send + Sync`: a wake from
/// this green thread, another green thread of any worker, a plain OS thread or a tokio thread
/// makes it poll again, and a wake that comes before the park is never lost. Spurious wake-ups
/// only cost a poll. A waker kept after the call has returned wakes nothing.
///
/// With the cargo feature `tokio`, every worker has a tokio runtime whose context is current in
/// its green threads, so tokio's own futures (`tokio::time::sleep`, `tokio::net`, a
/// `tokio-postgres` query, `reqwest`) work here as written, and any number of green threads of
/// one worker can be in `block_on` at once (see the README's "Async crates from green
/// threads"). Without it, futures that need no runtime work (channels, `futures`' combinators,
/// a greenweave [`JoinHandle`](crate::thread::JoinHandle) awaited); a tokio future panics with
/// a message that names the feature.
///
/// Each poll spends a unit of the green thread's cooperative budget, as every green I/O call
/// does, so a future that wakes itself and returns `Pending` for ever cannot starve the other
/// green threads.
///
/// A cancellation ([`JoinHandle::cancel`](crate::thread::JoinHandle::cancel)), an expired
/// [`time::timeout`](crate::time::timeout) or the runtime's end unwinds the green thread from
/// its park here: the future is dropped on the way, in the green thread and (with `tokio`) in
/// its worker's tokio context, so its destructors run.
///
/// In a generator or greenlet that a green thread runs, it parks that green thread. **Outside a
/// green thread** (a plain OS thread, or before `run`) it blocks the calling OS thread until the
/// future completes, as `futures::executor::block_on` does.
///
/// # Panics
/// If the future panics (the panic goes on). If called from inside a future that `block_on` is
/// polling on the same green thread (`.await` the inner future instead), or from a tokio task
/// on a worker's tokio runtime (it would block the worker that runs the task). If called by a green
/// thread that is unwinding (it cannot switch then; see
/// [`JoinHandle::cancel`](crate::thread::JoinHandle::cancel)).
///
/// # Examples
///
/// ```
/// use std::future::Future;
/// use std::pin::Pin;
/// use std::task::{Context, Poll};
///
/// /// A future that is ready the second time it is polled, after waking itself once.
/// struct Twice(bool);
///
/// impl Future for Twice {
///     type Output = &'static str;
///     fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
///         if self.0 {
///             return Poll::Ready("done");
///         }
///         self.0 = true;
///         cx.waker().wake_by_ref();
///         Poll::Pending
///     }
/// }
///
/// greenweave::run(|| {
///     let other = greenweave::spawn(|| greenweave::block_on(async { 6 * 7 }));
///     assert_eq!(greenweave::block_on(Twice(false)), "done");
///     assert_eq!(other.join().unwrap(), 42);
/// });
/// // Outside a runtime it blocks the OS thread.
/// assert_eq!(greenweave::block_on(async { 1 + 1 }), 2);
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    if !scheduler::in_green_thread() {
        #[cfg(feature = "tokio")]
        if crate::runtime::tokio_context::in_turn() {
            in_a_tokio_task();
        }
        return block_on_os_thread(future);
    }
    block_on_green(future)
}

/// The green thread's `block_on`.
fn block_on_green<F: Future>(future: F) -> F::Output {
    const WHAT: &str = "greenweave::block_on";
    let (remote, task) = with_scheduler(WHAT, |scheduler| {
        (&raw const scheduler.remote, scheduler::current_task_ptr())
    });
    // SAFETY: the running green thread's task lives at least as long as its body runs
    // (`run_task` holds it, and the body is this call's caller).
    let task = unsafe { &*task };
    if task.polling_future.get() {
        nested_block_on(task.id);
    }
    let key = task.key();
    // SAFETY: the scheduler, and its queue, outlive every green thread it runs, and so this
    // call and the polls it lends the first waker to.
    let remote: &Arc<RemoteQueue> = unsafe { &*remote };
    let make = move || acquire_waker(remote, key);
    let first = FirstPollWaker::new(make);
    let finish = FinishOnExit(&first);
    let first_waker = first.waker();
    // The `GreenWaker` once the future has cloned the first waker: later polls get it, so
    // that a future comparing wakers (`will_wake`) sees the one it kept.
    let mut kept: Option<Waker> = None;
    let mut future = pin!(future);
    let wait = Wait::Future(std::any::type_name::<F>());
    let output = loop {
        budget::spend(WHAT);
        if let Some(shared) = first.shared() {
            shared.begin_poll();
        }
        let waker = kept.as_ref().unwrap_or(&first_waker);
        let mut context = Context::from_waker(waker);
        task.polling_future.set(true);
        let polled = panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut context)));
        task.polling_future.set(false);
        match polled {
            Ok(Poll::Ready(output)) => break output,
            Ok(Poll::Pending) => {}
            Err(payload) => panic_explained(payload),
        }
        if kept.is_none() {
            kept = first.clone_shared().map(Waker::from);
        }
        let shared = first.shared();
        let woken = first.take_woken() | shared.is_some_and(|shared| shared.woken_during_poll());
        if woken {
            // Woken while it polled: poll again (the budget bounds such a loop).
            continue;
        }
        // Any wake-up ends the park, and the loop polls again: a spurious one costs a poll.
        scheduler::park(WHAT, wait, None, None, |_, _| {
            if let Some(shared) = shared {
                shared.mark_parked();
            }
        });
    };
    drop(kept);
    drop(finish);
    if let Some(shared) = first.into_shared() {
        keep_spare_waker(shared);
    }
    output
}

/// The `GreenWaker` of a call by green thread `key` of the runtime whose queue is `remote`:
/// this OS thread's spare if nothing else holds it, else a new one.
fn acquire_waker(remote: &Arc<RemoteQueue>, key: TaskKey) -> Arc<GreenWaker> {
    take_spare_waker()
        .and_then(|mut spare| {
            Arc::get_mut(&mut spare)?.reuse(remote, key);
            Some(spare)
        })
        .unwrap_or_else(|| Arc::new(GreenWaker::new(remote.clone(), key)))
}

/// Marks the call's waker finished however the call ends (a return, the future's panic, a
/// cancellation's unwind), so a clone kept elsewhere wakes nothing.
struct FinishOnExit<'a, M: Fn() -> Arc<GreenWaker> + Sync>(&'a FirstPollWaker<M>);

impl<M: Fn() -> Arc<GreenWaker> + Sync> Drop for FinishOnExit<'_, M> {
    fn drop(&mut self) {
        if let Some(shared) = self.0.shared() {
            shared.finish();
        }
    }
}

fn take_spare_waker() -> Option<Arc<GreenWaker>> {
    SPARE_WAKER.try_with(Cell::take).ok().flatten()
}

/// Keeps `waker` for the next call if nothing else holds it (no clone escaped).
fn keep_spare_waker(waker: Arc<GreenWaker>) {
    if Arc::strong_count(&waker) == 1 {
        let _ = SPARE_WAKER.try_with(|spare| spare.set(Some(waker)));
    }
}

/// `block_on` on a plain OS thread: polls, and parks the OS thread until a wake.
fn block_on_os_thread<F: Future>(future: F) -> F::Output {
    let waker = Arc::new(ThreadWaker {
        thread: std::thread::current(),
        notified: AtomicBool::new(false),
    });
    let std_waker = Waker::from(waker.clone());
    let mut context = Context::from_waker(&std_waker);
    let mut future = pin!(future);
    loop {
        let polled = panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut context)));
        match polled {
            Ok(Poll::Ready(output)) => return output,
            Ok(Poll::Pending) => {}
            Err(payload) => panic_explained(payload),
        }
        while !waker.notified.swap(false, Ordering::Acquire) {
            std::thread::park();
        }
    }
}

/// The panic of a `block_on` from a tokio task of a worker's runtime: it would block the
/// worker, which drives that task.
#[cfg(feature = "tokio")]
#[cold]
#[inline(never)]
fn in_a_tokio_task() -> ! {
    panic!(
        "greenweave::block_on called from a tokio task (or a future it polls) on a greenweave \
         worker: it would block the worker, which runs that task and drives its I/O. `.await` \
         the future in the task, or hand blocking work to a green thread (greenweave::spawn) \
         and `.await` its JoinHandle"
    );
}

#[cold]
#[inline(never)]
fn nested_block_on(green_thread: u64) -> ! {
    panic!(
        "greenweave::block_on called inside a future that greenweave::block_on is polling on \
         the same green thread ({green_thread}): the outer future could not be polled again \
         until the inner one finished. `.await` the inner future instead, or give it to \
         another green thread (greenweave::spawn) and await its JoinHandle"
    );
}

/// Re-raises a panic from a poll, with an explanation prepended when it is one of the
/// mistakes greenweave can name the fix for.
#[cold]
#[inline(never)]
fn panic_explained(payload: Box<dyn Any + Send>) -> ! {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
    if let Some(explanation) = message.and_then(explain) {
        panic!(
            "{explanation}\n(the future's own panic: {})",
            message.unwrap_or_default()
        );
    }
    panic::resume_unwind(payload)
}

/// What to do about a poll's panic message, when greenweave recognises it.
fn explain(message: &str) -> Option<String> {
    if message.contains("Cannot start a runtime from within a runtime") {
        return Some(
            "greenweave::block_on: a future started a tokio runtime of its own (`Runtime::\
             block_on`, as the sync wrapper of an async crate does) on an OS thread that is \
             already inside one: tokio allows one per OS thread, and every green thread of a \
             worker shares its OS thread. Call the crate's async API inside greenweave::\
             block_on instead (for `postgres`, `tokio-postgres`)"
                .to_owned(),
        );
    }
    let needs_tokio = message.contains("must be called from the context of a Tokio")
        || message.contains("there is no reactor running");
    if needs_tokio {
        return Some(if cfg!(feature = "tokio") {
            "greenweave::block_on: this future needs a tokio runtime, and none is current on \
             this thread: with greenweave's `tokio` feature every worker of a greenweave runtime \
             has one, so call block_on from a green thread (inside greenweave::run)"
                .to_owned()
        } else {
            "greenweave::block_on: this future needs a tokio runtime. Enable greenweave's \
             `tokio` cargo feature (greenweave = { features = [\"tokio\"] }): every worker then \
             has a tokio runtime, current in each of its green threads and driven by the \
             worker's own scheduler"
                .to_owned()
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::explain;

    #[test]
    fn tokio_mistakes_are_explained_and_other_panics_are_not() {
        let no_reactor = "there is no reactor running, must be called from the context of a \
                          Tokio 1.x runtime";
        assert!(explain(no_reactor).unwrap().contains("tokio"));
        let nested = "Cannot start a runtime from within a runtime. This happens because ...";
        assert!(explain(nested).unwrap().contains("tokio-postgres"));
        assert_eq!(explain("index out of bounds"), None);
    }
}
