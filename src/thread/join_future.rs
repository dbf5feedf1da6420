//! [`JoinHandle`] as a [`Future`]: async code awaits a green thread of its own worker.
//!
//! Owns: the poll, which takes the result when the green thread has finished and otherwise
//! leaves the waker in the task's joiner slot, which the scheduler wakes when the green thread
//! ends (`Joiner::Future`).
//!
//! May not: park (a poll never waits), or be reached from another OS thread (a `JoinHandle`
//! is `!Send`: the task that awaits it runs on the green thread's worker, in `block_on` or as
//! a task of that worker's runtime).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{JoinError, JoinHandle, Outcome};
use crate::runtime::scheduler::{self, with_scheduler};
use crate::runtime::task::{Joiner, TaskState};

/// Awaits the green thread's end, as [`join`](JoinHandle::join) waits for it, without
/// blocking: its output is `join`'s result.
///
/// ```
/// greenweave::run(|| {
///     let answer = greenweave::spawn(|| 6 * 7);
///     let doubled = greenweave::block_on(async move { answer.await.unwrap() * 2 });
///     assert_eq!(doubled, 84);
/// });
/// ```
///
/// # Panics
/// A green thread that awaits its own handle (it would wait for ever).
impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: the body of this handle's task puts an `Outcome<T>` (`spawn_named`).
        if let Some(result) = unsafe { self.task.result.take::<Outcome<T>>() } {
            return Poll::Ready(result);
        }
        if self.task.state.get() == TaskState::Finished {
            // Ended without a result: its runtime gave up on it (see `join`).
            return Poll::Ready(Err(JoinError::Cancelled));
        }
        if scheduler::in_green_thread()
            && with_scheduler("JoinHandle::poll", |scheduler| {
                scheduler.is_current(&self.task)
            })
        {
            panic!(
                "greenweave: a green thread cannot await its own JoinHandle (it would wait forever)"
            );
        }
        self.task
            .joiner
            .set(Some(Joiner::Future(cx.waker().clone())));
        Poll::Pending
    }
}
