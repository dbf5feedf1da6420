//! The per-thread pool of freed default-size stacks.
//!
//! Owns: a bounded list of [`Stack::DEFAULT_SIZE`] stacks per OS thread, so creating a
//! coroutine reuses a mapping instead of calling `mmap` and installing a guard page each time.
//!
//! May not: hold stacks of any other size (they would be handed to callers who asked for the
//! default), or outlive its thread: the pool is a `thread_local!`, and its stacks are unmapped
//! when the thread exits. Pooled stacks keep the pages their last coroutine touched.

use std::cell::RefCell;
use std::io;

use super::Stack;

/// Stacks kept per thread; more than this are unmapped when freed.
const MAX_POOLED: usize = 64;

thread_local! {
    static POOL: RefCell<Vec<Stack>> = const { RefCell::new(Vec::new()) };
}

/// A default-size stack: a pooled one if this thread has any, else a new mapping.
#[inline]
pub(crate) fn take_default() -> io::Result<Stack> {
    // During thread teardown the pool may already be gone; then a new stack is mapped.
    if let Ok(Some(stack)) = POOL.try_with(|pool| pool.borrow_mut().pop()) {
        return Ok(stack);
    }
    map_default()
}

/// The pool is empty: map a new stack (kept out of line; `take_default` is on every spawn).
#[cold]
#[inline(never)]
fn map_default() -> io::Result<Stack> {
    Stack::new(Stack::DEFAULT_SIZE)
}

/// Returns `stack` to this thread's pool if it is default-size and the pool has room;
/// otherwise unmaps it.
#[inline]
pub(crate) fn recycle(stack: Stack) {
    if stack.size() != Stack::DEFAULT_SIZE {
        return;
    }
    // During thread teardown the pool may already be gone; then the stack is simply unmapped.
    let _ = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < MAX_POOLED {
            pool.push(stack);
        }
    });
}
