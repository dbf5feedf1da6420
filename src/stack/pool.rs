//! The per-thread pool of freed default-size stacks.
//!
//! Owns: a bounded list of [`Stack::DEFAULT_SIZE`] stacks per OS thread, so creating a
//! coroutine reuses a mapping instead of calling `mmap` and installing a guard page each time.
//!
//! May not: hold stacks of any other size (they would be handed to callers who asked for the
//! default), or outlive its thread: the pool is a `thread_local!`, and its stacks are unmapped
//! when the thread exits. Pooled stacks keep the pages their last coroutine touched, until a
//! runtime's long-park sweep on this thread releases them ([`queue_pooled_pages`]).
//!
//! A stack freed while the pool is full is not unmapped at once: it waits, with up to 63
//! others, until 64 can be unmapped together ([`batch::unmap_batch`]: one `munmap` per run of
//! neighbours instead of one per stack, each of which splits a mapping). A waiting stack is
//! reused if the pool runs empty first, instead of a new mapping.
//!
//! Taking or returning a stack is on the path of every coroutine's creation and drop, so both
//! are a few moves of words:
//! - The list is intrusive: the pool holds the most recently freed stack, and each pooled
//!   stack holds the next one in the top bytes of its own usable range (which its last
//!   coroutine touched anyway, and the next one overwrites). No heap, no `RefCell`.
//! - The pool's thread-local has no destructor, so reaching it is a plain thread-local access
//!   with no "already destroyed?" check. The stacks are freed at thread exit by a second
//!   thread-local, [`DRAIN`], whose destructor the pool registers the first time it keeps a
//!   stack; until then, and once that destructor has run, the pool has no room and a freed
//!   stack is unmapped.

use core::cell::Cell;
use core::hint;
use core::mem::ManuallyDrop;
use std::io;

use super::usage::{self, ReleaseBatch};
use super::{Stack, batch};
use crate::overflow;

/// Stacks kept per thread; more than this are unmapped when freed (in groups of
/// [`batch::MAX_BATCH`]).
const MAX_POOLED: usize = 64;

/// A singly linked list of stacks, threaded through the stacks themselves.
///
/// It owns the stacks in the list, but has no destructor of its own (hence `ManuallyDrop`):
/// [`DRAIN`] frees a thread's lists.
struct StackList {
    /// The most recently pushed stack, whose link holds the rest of the list.
    head: Cell<Option<ManuallyDrop<Stack>>>,
}

impl StackList {
    const fn new() -> StackList {
        StackList {
            head: Cell::new(None),
        }
    }

    #[inline]
    fn pop(&self) -> Option<Stack> {
        let stack = self.head.take()?;
        // SAFETY: every stack in the list had its link written by `push` (the rest of the
        // list, moved out of `head` there), and nothing has used the stack since.
        self.head.set(unsafe { link(&stack).read() });
        Some(ManuallyDrop::into_inner(stack))
    }

    #[inline]
    fn push(&self, stack: Stack) {
        let link = link(&stack);
        let rest = self.head.replace(Some(ManuallyDrop::new(stack)));
        // SAFETY: the link lies in the usable range of a stack that nothing runs on (it is
        // being freed); the rest of the list moves into it, to be read back once by `pop`.
        unsafe { link.write(rest) };
    }

    /// Calls `each` with every stack in the list, most recently pushed first, leaving the list
    /// as it is.
    fn for_each(&self, mut each: impl FnMut(&Stack)) {
        let head = self.head.take();
        let mut next: *const Option<ManuallyDrop<Stack>> = &head;
        // SAFETY: `next` points at `head` or at the link of a stack in the list, written by
        // `push` (the rest of the list) and unchanged since: nothing runs on a pooled stack,
        // and `each` cannot reach this list (it is this module's).
        while let Some(stack) = unsafe { &*next } {
            each(stack);
            next = link(stack);
        }
        self.head.set(head);
    }

    /// Takes the whole list, leaving it empty: its stacks, most recently pushed first.
    fn take(&self) -> impl Iterator<Item = Stack> {
        let list = StackList {
            head: Cell::new(self.head.take()),
        };
        core::iter::from_fn(move || list.pop())
    }
}

/// A thread's pooled stacks, and the stacks it has yet to unmap.
struct Pool {
    /// Stacks to reuse, at most [`MAX_POOLED`].
    kept: StackList,
    /// How many more stacks the pool keeps: `MAX_POOLED` minus the stacks in `kept` once
    /// [`DRAIN`] is registered, and 0 before that and after it has run.
    room: Cell<usize>,
    /// Stacks freed while `kept` was full, to be unmapped together once there are
    /// [`batch::MAX_BATCH`] of them (or at thread exit); reused first if `kept` runs empty.
    doomed: StackList,
    /// How many stacks `doomed` holds.
    doomed_count: Cell<usize>,
    /// Whether [`DRAIN`]'s destructor has been registered (it may also have run since).
    drain_registered: Cell<bool>,
    /// Whether [`DRAIN`]'s destructor has run: a stack freed after that is unmapped at once.
    drained: Cell<bool>,
    /// Stacks the next batch maps when the pool runs empty: 1 at first, doubling with every
    /// batch up to [`MAX_POOLED`], so that a thread that makes one coroutine maps one stack
    /// and a thread that spawns thousands maps them 64 at a time.
    batch: Cell<usize>,
}

thread_local! {
    static POOL: Pool = const {
        Pool {
            kept: StackList::new(),
            room: Cell::new(0),
            doomed: StackList::new(),
            doomed_count: Cell::new(0),
            drain_registered: Cell::new(false),
            drained: Cell::new(false),
            batch: Cell::new(1),
        }
    };

    /// Unmaps this thread's pooled stacks when the thread exits.
    static DRAIN: Drain = const { Drain };
}

/// Where a pooled stack keeps the next pooled stack: the top bytes of its usable range, which
/// are aligned for it (the top is page aligned).
fn link(stack: &Stack) -> *mut Option<ManuallyDrop<Stack>> {
    stack
        .top()
        .as_ptr()
        .cast::<Option<ManuallyDrop<Stack>>>()
        .wrapping_sub(1)
}

impl Pool {
    #[inline]
    fn pop(&self) -> Option<Stack> {
        let Some(stack) = self.kept.pop() else {
            return self.pop_doomed();
        };
        self.room.set(self.room.get() + 1);
        Some(stack)
    }

    /// `pop` when nothing is kept: a stack waiting to be unmapped is as good as a new one.
    #[cold]
    #[inline(never)]
    fn pop_doomed(&self) -> Option<Stack> {
        let stack = self.doomed.pop()?;
        self.doomed_count.set(self.doomed_count.get() - 1);
        Some(stack)
    }

    #[inline]
    fn push(&self, stack: Stack) {
        let room = self.room.get();
        if room == 0 {
            return self.push_without_room(stack);
        }
        self.room.set(room - 1);
        self.kept.push(stack);
    }

    /// Puts a stack freed while the pool is full with those waiting to be unmapped, and unmaps
    /// them all once there are [`batch::MAX_BATCH`].
    fn doom(&self, stack: Stack) {
        self.doomed.push(stack);
        let count = self.doomed_count.get() + 1;
        if count < batch::MAX_BATCH {
            self.doomed_count.set(count);
            return;
        }
        self.doomed_count.set(0);
        batch::unmap_batch(self.doomed.take());
    }

    /// How many stacks to map now that the pool is empty: the next batch size, but no more
    /// than the pool can keep besides the one taken (none once the thread is exiting).
    fn next_batch(&self) -> usize {
        let batch = self.batch.get();
        self.batch.set((batch * 2).min(MAX_POOLED));
        let room = if self.drain_registered.get() {
            self.room.get()
        } else {
            MAX_POOLED // the first push makes this much room
        };
        batch.min(room + 1).min(batch::MAX_BATCH)
    }

    /// `push` when the pool has no room: it is full, or the thread has never pooled a stack
    /// (then register [`DRAIN`] and make room), or the thread is exiting.
    #[cold]
    #[inline(never)]
    fn push_without_room(&self, stack: Stack) {
        if self.drained.get() {
            return; // the thread is exiting: `stack` is unmapped here
        }
        if self.drain_registered.get() {
            return self.doom(stack);
        }
        // Reaching DRAIN registers its destructor; it fails only if the thread is exiting and
        // DRAIN is already gone, and then the stack is unmapped.
        if DRAIN.try_with(|_| ()).is_err() {
            return;
        }
        self.drain_registered.set(true);
        self.room.set(MAX_POOLED);
        // `take_default` promises that a thread taking a pooled stack has an alternate signal
        // stack. This is the thread that will take it.
        overflow::ensure_alt_stack();
        self.push(stack);
    }
}

/// Unmaps the pooled stacks of its thread when dropped, and closes the pool.
struct Drain;

impl Drop for Drain {
    fn drop(&mut self) {
        // POOL has no destructor, so it is reachable for as long as the thread runs code.
        POOL.with(|pool| {
            pool.drained.set(true);
            pool.room.set(0);
            pool.doomed_count.set(0);
            batch::unmap_batch(pool.kept.take().chain(pool.doomed.take()));
        });
    }
}

/// A default-size stack: a pooled one if this thread has any, else a new mapping.
///
/// The calling thread has an alternate signal stack when this returns
/// ([`overflow::ensure_alt_stack`]), so a coroutine can run on the stack right away: a new
/// mapping ensures it, and a pooled stack implies it (the pool ensured it when it first kept
/// a stack, on this same thread).
#[inline]
pub(crate) fn take_default() -> io::Result<Stack> {
    // `try_with` rather than `with`: it is inlined, and it cannot fail (POOL has no destructor).
    let stack = match POOL.try_with(Pool::pop) {
        Ok(Some(stack)) => stack,
        _ => map_default()?,
    };
    // SAFETY: the pool keeps only default-size stacks (`recycle` checks), and `map_default`
    // checks the size of a new one. Telling the compiler lets it drop the size checks of the
    // stack's first user and of `recycle` when the stack comes back.
    unsafe { hint::assert_unchecked(stack.size() == Stack::DEFAULT_SIZE) };
    Ok(stack)
}

/// The pool is empty: map a batch of new stacks, return one and keep the rest (kept out of
/// line; `take_default` is on every spawn).
#[cold]
#[inline(never)]
fn map_default() -> io::Result<Stack> {
    overflow::ensure_alt_stack();
    assert_eq!(
        Stack::DEFAULT_SIZE % super::page_size(),
        0,
        "greenweave: the page size must divide Stack::DEFAULT_SIZE"
    );
    let count = POOL.try_with(Pool::next_batch).unwrap_or(1);
    // The batch comes lowest stack first. The highest is returned and the others are pooled
    // in ascending order, so the thread takes them highest first: stack by stack downwards,
    // and on into the next batch, which the kernel usually maps just below this one. Green
    // threads spawned one after another then hold neighbouring stacks, which, freed together,
    // are unmapped together (`Pool::doom`).
    let mut highest = None;
    batch::map_batch(Stack::DEFAULT_SIZE, count, |stack| {
        if let Some(lower) = highest.replace(stack) {
            // The pool was empty and `next_batch` counted its room, so it keeps them all (a
            // stack it cannot keep would be unmapped, which is also correct).
            let _ = POOL.try_with(|pool| pool.push(lower));
        }
    })?;
    Ok(highest.expect("a batch maps at least one stack"))
}

/// Adds to `batch` the pages that this thread's pooled stacks (kept, and waiting to be
/// unmapped) hold below their top page, where their last coroutines left them; returns their
/// bytes. Nothing lives there: a pooled stack holds only its link to the next, in its top
/// bytes. For the long-park sweep (`runtime::stack_release`), which releases the batch before
/// the thread can take a stack from the pool again. `mincore` reuses `scratch`.
pub(crate) fn queue_pooled_pages(scratch: &mut Vec<u8>, batch: &mut ReleaseBatch) -> usize {
    let page = super::page_size();
    let mut bytes = 0;
    let _ = POOL.try_with(|pool| {
        for list in [&pool.kept, &pool.doomed] {
            list.for_each(|stack| {
                let below = stack.top().as_ptr() as usize - page;
                let Ok(residency) = usage::residency(stack, below, scratch) else {
                    return;
                };
                if let Some((start, end)) = residency.releasable {
                    // SAFETY: the stack is in the pool: nothing runs on it, and the only
                    // thing it holds, the link, is in its top page, above `end`. The caller
                    // releases the batch before this thread takes a stack from the pool.
                    unsafe { batch.push(start, end) };
                    bytes += residency.releasable_resident;
                }
            });
        }
    });
    bytes
}

/// Returns `stack` to this thread's pool if it is default-size and the pool has room;
/// otherwise unmaps it.
#[inline]
pub(crate) fn recycle(stack: Stack) {
    if stack.size() != Stack::DEFAULT_SIZE {
        return;
    }
    // Under ASan: the last fiber may have left redzones where `push` writes the link (the
    // next launch clears the rest of the stack).
    let top = stack.top().as_ptr() as usize;
    crate::arch::release_stack(top - size_of::<Option<ManuallyDrop<Stack>>>(), top);
    // `try_with` rather than `with`: it is inlined, and it cannot fail (POOL has no destructor).
    let _ = POOL.try_with(|pool| pool.push(stack));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::tests::UNMAP_CALLS;

    /// Green threads that end in the order they were spawned free neighbouring stacks: a
    /// fresh thread takes 256 stacks and frees them in the order taken. The pool keeps 64;
    /// the other 192 are unmapped in three groups of 64, one `munmap` per run of neighbours,
    /// not one per stack (192). A group is one run where the batches' mappings lie back to
    /// back; the kernel may leave gaps between batches (it aligns large mappings), and each
    /// gap a group spans costs one more call. Seen: 3 to 8.
    #[test]
    fn stacks_freed_beyond_the_pool_are_unmapped_in_runs_of_neighbours() {
        std::thread::spawn(|| {
            let stacks: Vec<Stack> = (0..256).map(|_| take_default().unwrap()).collect();
            let before = UNMAP_CALLS.with(Cell::get);
            for stack in stacks {
                recycle(stack);
            }
            let calls = UNMAP_CALLS.with(Cell::get) - before;
            assert!(
                (3..=12).contains(&calls),
                "{calls} munmap calls for the 192 stacks the pool does not keep"
            );
        })
        .join()
        .unwrap();
    }

    /// A stack waiting to be unmapped is taken again before a new batch is mapped.
    #[test]
    fn a_stack_waiting_to_be_unmapped_is_reused_when_the_pool_runs_empty() {
        std::thread::spawn(|| {
            let stacks: Vec<Stack> = (0..MAX_POOLED + 1)
                .map(|_| take_default().unwrap())
                .collect();
            let waiting = stacks.last().unwrap().top();
            let before = UNMAP_CALLS.with(Cell::get);
            for stack in stacks {
                recycle(stack);
            }
            let again: Vec<Stack> = (0..MAX_POOLED + 1)
                .map(|_| take_default().unwrap())
                .collect();
            assert_eq!(UNMAP_CALLS.with(Cell::get), before, "nothing was unmapped");
            assert_eq!(again.last().unwrap().top(), waiting);
        })
        .join()
        .unwrap();
    }
}
