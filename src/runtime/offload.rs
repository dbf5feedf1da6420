//! Running a blocking call on another OS thread while only the calling green thread waits.
//!
//! Owns: [`on_os_thread`], used for hostname resolution (and by `unblock` later). The call runs
//! on a scoped OS thread, so it may borrow from the green thread's stack; the green thread
//! parks, and the helper thread wakes it through the runtime's remote queue when done.

use std::panic;

use super::scheduler::{self, with_scheduler};
use super::task::{Wait, Wake};

/// Runs `call` on a new OS thread and parks the calling green thread until it returns.
/// `what` names the call in the deadlock report and in the outside-a-runtime panic.
///
/// If the green thread is cancelled while it waits, it unwinds once the call has returned
/// (the OS thread cannot be interrupted).
pub(crate) fn on_os_thread<R: Send>(what: &'static str, call: impl FnOnce() -> R + Send) -> R {
    let (remote, task_id, park) = with_scheduler(what, |scheduler| {
        let task = scheduler.current_task();
        (
            scheduler.remote.clone(),
            task.id,
            task.park_number.get() + 1,
        )
    });
    std::thread::scope(|scope| {
        let helper = scope.spawn(move || {
            let result = panic::catch_unwind(panic::AssertUnwindSafe(call));
            remote.wake(task_id, park);
            result
        });
        with_scheduler(what, |scheduler| {
            scheduler
                .remote_pending
                .set(scheduler.remote_pending.get() + 1)
        });
        let pending = PendingGuard;
        let wake = scheduler::park(what, Wait::Remote(what), None, None, |_, number| {
            debug_assert_eq!(number, park, "the helper wakes the park it was promised");
        });
        drop(pending);
        debug_assert!(matches!(wake, Wake::Notified | Wake::Cancelled));
        // The helper has sent its wake-up, so it is about to exit: joining waits microseconds.
        match helper
            .join()
            .expect("the helper thread catches the call's panic")
        {
            Ok(result) => result,
            Err(payload) => panic::resume_unwind(payload),
        }
    })
}

/// Keeps the runtime's count of remote operations in flight right, even when the wait unwinds.
struct PendingGuard;

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if scheduler::in_runtime() {
            with_scheduler("offload", |scheduler| {
                scheduler
                    .remote_pending
                    .set(scheduler.remote_pending.get().saturating_sub(1))
            });
        }
    }
}
