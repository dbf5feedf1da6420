//! Calls a hook hands to the offload pool (`offload::on_pool`) while only its green thread
//! parks: resolver lookups (`dns.rs`) and regular-file reads that would wait for the disk
//! (`file.rs`).
//!
//! The helper borrows the caller's arguments (pointers into C or Rust memory). That is sound
//! because the green thread waits for it whatever happens: the offload wait defers a
//! cancellation (or a `time::timeout` scope's end) until the call has returned, and the
//! deferred unwind is caught here and turned into a normal return of the finished call's
//! result, so nothing of the caller's is freed early and no result is lost (a read's bytes
//! have left the kernel); the cancellation is raised again at the green thread's next park.

use std::panic::{self, AssertUnwindSafe};

use crate::runtime::offload;

/// The caller's pointers, handed to the helper thread.
pub(super) struct Borrowed<T>(pub(super) T);

// SAFETY: the pointers are only used by the helper while the calling green thread waits for it
// (see the module doc); nothing else touches what they point to meanwhile.
unsafe impl<T> Send for Borrowed<T> {}

impl<T> Borrowed<T> {
    /// The pointers (a method, so that a closure captures the whole `Send` wrapper rather than
    /// its fields).
    pub(super) fn into_inner(self) -> T {
        self.0
    }
}

/// Runs `call` on a helper OS thread while the green thread parks, and returns what it
/// returned even if a cancellation came meanwhile (it is raised again at the next park).
/// `finished` is where the call leaves its result; `call` stores it there before returning.
pub(super) fn on_helper<R: Copy>(
    what: &'static str,
    call: impl FnOnce() + Send,
    finished: impl Fn() -> R,
) -> R {
    // Any payload is a deferred cancellation or scope end (the call itself does not panic):
    // dropped here, raised again at the next park.
    let _ = panic::catch_unwind(AssertUnwindSafe(|| offload::on_pool(what, call)));
    finished()
}
