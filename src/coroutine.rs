//! Asymmetric coroutines: [`Coroutine`], [`Yielder`] and [`CoroutineResult`].
//!
//! Owns: running a closure on its own [`Stack`], the protocol of words exchanged through
//! [`arch::switch`](crate::arch), catching panics at the coroutine's root, and force-unwinding
//! a suspended coroutine when it is dropped.
//!
//! May not: touch registers or stack layout (that is `arch`), map memory (that is `stack`), or
//! keep per-thread state: a coroutine is driven entirely through the handle that owns it.
//!
//! # The protocol of a switch
//!
//! Every switch carries one word. From the resumer to the coroutine it is the address of the
//! input value on the resumer's stack, or [`UNWIND_REQUEST`] (0) to make the coroutine unwind.
//! From the coroutine to the resumer it is the address of a [`Message`] on the coroutine's
//! stack: a `Yield` value, or, tagged with [`FINISHED_TAG`] in its low bit, the body's
//! [`Finished`] outcome. The receiver moves the value out at once, while the sender is
//! suspended and its stack frame is still intact; the sender never drops it.

use core::cell::Cell;
use core::fmt;
use core::marker::PhantomData;
use core::mem::{self, ManuallyDrop};
use core::ptr;
use std::any::Any;
use std::io;
use std::panic::{self, AssertUnwindSafe};

use crate::arch::{self, StackPointer, Transfer};
pub(crate) use crate::fiber::Message;
use crate::fiber::{self, Exit, FINISHED_TAG, FiberBody, Leave};
use crate::overflow;
use crate::stack::{Stack, pool};

/// The word sent to a coroutine to make it unwind instead of resuming.
const UNWIND_REQUEST: usize = 0;

/// What a coroutine produced when it gave control back: a yielded value or its return value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoroutineResult<Yield, Return> {
    /// The body called [`Yielder::suspend`] with this value; it can be resumed again.
    Yield(Yield),
    /// The body returned this value; the coroutine is finished.
    Return(Return),
}

impl<Y, R> CoroutineResult<Y, R> {
    /// The yielded value, if this is a `Yield`.
    pub fn into_yield(self) -> Option<Y> {
        match self {
            CoroutineResult::Yield(value) => Some(value),
            CoroutineResult::Return(_) => None,
        }
    }

    /// The returned value, if this is a `Return`.
    pub fn into_return(self) -> Option<R> {
        match self {
            CoroutineResult::Yield(_) => None,
            CoroutineResult::Return(value) => Some(value),
        }
    }
}

/// How a coroutine's body ended; sent once, with [`FINISHED_TAG`].
enum Finished<R> {
    Returned(R),
    Panicked(Box<dyn Any + Send>),
    /// It unwound because its owner asked it to (drop or `into_stack`), or it was dropped
    /// before it started and its closure was dropped unrun.
    Unwound,
}

/// The panic payload that unwinds a coroutine being dropped. It carries the address of the
/// coroutine's [`Yielder`] so that the root recognises its own request and no other.
struct ForcedUnwind(usize);

/// A function running on its own stack that can suspend itself and be resumed.
///
/// `Input` is what each [`resume`](Coroutine::resume) sends in, `Yield` what each
/// [`Yielder::suspend`] sends out, and `Return` what the body returns. The first `resume`
/// starts the body with its input as the second argument; every later `resume` becomes the
/// return value of the `suspend` the body is waiting in.
///
/// # Examples
///
/// ```
/// use greenweave::{Coroutine, CoroutineResult};
///
/// // A running total: each resume sends a number in, each suspend sends the sum so far out.
/// let mut sum = Coroutine::new(|yielder, mut n: i32| {
///     let mut total = 0;
///     while n != 0 {
///         total += n;
///         n = yielder.suspend(total);
///     }
///     "done"
/// });
/// assert_eq!(sum.resume(3), CoroutineResult::Yield(3));
/// assert_eq!(sum.resume(4), CoroutineResult::Yield(7));
/// assert_eq!(sum.resume(0), CoroutineResult::Return("done"));
/// assert!(sum.is_done());
/// ```
///
/// A panic in the body is caught at the coroutine's root and raised again from `resume`:
///
/// ```
/// use greenweave::Coroutine;
///
/// let mut co = Coroutine::<(), (), ()>::new(|_, ()| panic!("boom"));
/// let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| co.resume(())));
/// assert!(caught.is_err());
/// assert!(co.is_done());
/// ```
///
/// Dropping a coroutine that is suspended unwinds its stack, so every destructor on it runs
/// (a destructor that panics during that unwind aborts the process, as in any Rust unwind;
/// see [`into_stack`](Coroutine::into_stack) for the other cases):
///
/// ```
/// use greenweave::Coroutine;
/// use std::rc::Rc;
///
/// let alive = Rc::new(());
/// let held = alive.clone();
/// let mut co = Coroutine::<(), (), ()>::new(move |yielder, ()| {
///     let _held = held;
///     yielder.suspend(());
///     unreachable!("never resumed");
/// });
/// co.resume(());
/// assert_eq!(Rc::strong_count(&alive), 2);
/// drop(co);
/// assert_eq!(Rc::strong_count(&alive), 1);
/// ```
///
/// A coroutine belongs to the thread that made it; it cannot be sent to another:
///
/// ```compile_fail
/// let co = greenweave::Coroutine::<(), (), ()>::new(|_, ()| ());
/// std::thread::spawn(move || drop(co));
/// ```
pub struct Coroutine<Input, Yield, Return> {
    /// The stack the body runs on. Taken by `into_stack` and `Drop`, which recycle it (or leak
    /// it, if the body refused to unwind), so it has no drop glue of its own.
    stack: ManuallyDrop<Stack>,
    state: State,
    /// Covariant in `Yield` and `Return`, contravariant in `Input`; `!Send` and `!Sync`,
    /// because the body and whatever it holds live on this thread's stacks.
    marker: PhantomData<(ResumeSignature<Input, Yield, Return>, NotSendOrSync)>,
}

/// The shape of `resume`, for variance: contravariant in what goes in, covariant in what
/// comes out.
type ResumeSignature<I, Y, R> = fn(I) -> CoroutineResult<Y, R>;

/// A raw pointer: `!Send` and `!Sync`, which is what a coroutine is.
type NotSendOrSync = *mut ();

/// Where the coroutine is, in one word, since every resume rewrites it: the saved stack
/// pointer of a suspended coroutine, the same with [`State::UNSTARTED_BIT`] set for one that
/// has not started, or 0 for a finished one.
#[derive(Clone, Copy)]
struct State(usize);

impl State {
    /// The body returned, panicked or was unwound; the stack holds nothing live.
    const FINISHED: State = State(0);

    /// Set in the word of a coroutine built but not yet resumed (switching to it starts the
    /// body). Stack pointers are at least 8-byte aligned, so the bit is free.
    const UNSTARTED_BIT: usize = 1;

    #[inline(always)]
    fn unstarted(sp: StackPointer) -> State {
        debug_assert_eq!(sp.addr() & Self::UNSTARTED_BIT, 0);
        State(sp.addr() | Self::UNSTARTED_BIT)
    }

    /// Waiting in `suspend` at `sp`.
    #[inline(always)]
    fn suspended(sp: StackPointer) -> State {
        debug_assert_eq!(sp.addr() & Self::UNSTARTED_BIT, 0);
        State(sp.addr())
    }

    /// The saved context to switch to, unless the coroutine has finished.
    #[inline(always)]
    fn target(self) -> Option<StackPointer> {
        StackPointer::from_addr(self.0 & !Self::UNSTARTED_BIT)
    }

    fn is_started(self) -> bool {
        self.0 & Self::UNSTARTED_BIT == 0
    }

    fn is_finished(self) -> bool {
        self.0 == 0
    }
}

impl<I, Y, R> Coroutine<I, Y, R> {
    /// Where a started coroutine that is not running now is suspended: the saved frame of its
    /// last switch out (on its own stack, or on that of a coroutine or greenlet it was running
    /// when that one suspended on its behalf); `None` before it starts and once it has
    /// finished. Valid until it is next resumed; for walking the stack (`runtime::dump`).
    pub(crate) fn suspended_at(&self) -> Option<StackPointer> {
        if self.state.is_started() {
            self.state.target()
        } else {
            None
        }
    }

    /// The usable bytes of its own stack, `limit..top` (a suspended frame found elsewhere by
    /// [`suspended_at`](Coroutine::suspended_at) lies on another coroutine's or greenlet's
    /// stack). For reading a suspended stack (`runtime::dump`).
    pub(crate) fn stack_bounds(&self) -> core::ops::Range<usize> {
        self.stack.limit()..self.stack.top().as_ptr() as usize
    }

    /// The stack the body runs on (for `runtime::stack_release`, which reads which of its
    /// pages are resident and releases those below a parked green thread's stack pointer).
    #[inline]
    pub(crate) fn stack(&self) -> &Stack {
        &self.stack
    }

    /// Where the next resume will read first: the saved register frame of a suspended (or
    /// unstarted) coroutine, for the scheduler to prefetch before it gets there. `None` once it
    /// has finished.
    #[inline(always)]
    pub(crate) fn resume_point(&self) -> Option<usize> {
        self.state.target().map(StackPointer::addr)
    }

    /// The memory the next resume reads first, as `(start, bytes)`: from the saved frame
    /// ([`resume_point`](Self::resume_point)) up to the top of this coroutine's stack, or, when
    /// the frame was saved on another stack (a nested coroutine suspended on this one's
    /// behalf), [`arch::SAVED_FRAME_BYTES`] alone. A hint that reads past a stack's top lands
    /// in the next mapping, often a neighbour's guard region, where every access misses the
    /// TLB and walks the page tables again (issue 33: a yield among 33 runnable green threads
    /// cost 19 times one among 32); so the window never extends past the top.
    #[inline(always)]
    pub(crate) fn resume_window(&self) -> Option<(usize, usize)> {
        let start = self.resume_point()?;
        let top = self.stack.top().as_ptr() as usize;
        let bytes = if (self.stack.limit()..top).contains(&start) {
            top - start
        } else {
            arch::SAVED_FRAME_BYTES
        };
        Some((start, bytes))
    }

    /// Creates a coroutine that will run `body` on a default-size stack
    /// ([`Stack::DEFAULT_SIZE`]) from this thread's pool. Nothing runs until the first
    /// [`resume`](Coroutine::resume).
    ///
    /// # Panics
    /// If no stack can be mapped (see [`Stack::new`] for why); use [`Coroutine::try_new`] to
    /// get that as an error instead.
    #[inline]
    pub fn new<F>(body: F) -> Self
    where
        F: FnOnce(&Yielder<I, Y>, I) -> R + 'static,
    {
        match Self::try_new(body) {
            Ok(coroutine) => coroutine,
            Err(error) => panic!("greenweave: could not create a coroutine: {error}"),
        }
    }

    /// Like [`Coroutine::new`], but returns an error if no stack can be mapped.
    ///
    /// # Errors
    /// Those of [`Stack::new`]: most often `OutOfMemory` when `vm.max_map_count` is reached.
    #[inline]
    pub fn try_new<F>(body: F) -> io::Result<Self>
    where
        F: FnOnce(&Yielder<I, Y>, I) -> R + 'static,
    {
        // A pooled stack comes with this thread's alternate signal stack already ensured.
        Ok(Self::launch(pool::take_default()?, body))
    }

    /// Creates a coroutine that will run `body` on `stack`. Get the stack back with
    /// [`into_stack`](Coroutine::into_stack) to reuse it.
    ///
    /// # Panics
    /// If `body` (the closure and what it captures) does not fit in `stack` with at least
    /// 4 KiB to spare for running it.
    #[inline]
    pub fn with_stack<F>(stack: Stack, body: F) -> Self
    where
        F: FnOnce(&Yielder<I, Y>, I) -> R + 'static,
    {
        overflow::ensure_alt_stack();
        Self::launch(stack, body)
    }

    /// Places `body` on `stack`. The calling thread must have an alternate signal stack
    /// ([`overflow::ensure_alt_stack`]), so that an overflow of `stack` can be reported.
    #[inline]
    fn launch<F>(stack: Stack, body: F) -> Self
    where
        F: FnOnce(&Yielder<I, Y>, I) -> R + 'static,
    {
        let launch = CoroutineLaunch {
            body,
            stack_limit: stack.limit(),
            marker: PhantomData,
        };
        // SAFETY: the stack is fresh or recycled and owned by this coroutine from here on; it
        // is started at most once, and its last message is taken by `receive` or
        // `unwind_unfinished`.
        let start = unsafe { fiber::launch_body(&stack, launch) };
        Coroutine {
            stack: ManuallyDrop::new(stack),
            state: State::unstarted(start),
            marker: PhantomData,
        }
    }

    /// Runs the coroutine until it suspends or returns, sending it `input`.
    ///
    /// The first call starts the body with `input` as its second argument; later calls make
    /// `input` the return value of the [`Yielder::suspend`] it is waiting in.
    ///
    /// Called from a destructor during an unwind (a destructor that drains a generator), the
    /// body runs as part of that destructor, as a function it calls would: every suspend
    /// returns to it, so `std::thread::panicking()` is true in the body as it is in the
    /// destructor, and the body switches nowhere else either: in a green thread its waits time
    /// out at once or panic, as the destructor's own would, and a greenlet switch in it panics
    /// (see [`greenlet`](crate::greenlet#no-switch-while-unwinding)). Python does the same for
    /// a generator resumed from an `except` block: it sees the caller's exception.
    ///
    /// # Panics
    /// If the coroutine has already finished (check [`is_done`](Coroutine::is_done)), and
    /// with the body's own panic, re-raised here, if the body panics.
    #[inline]
    pub fn resume(&mut self, input: I) -> CoroutineResult<Y, R> {
        let target = match self.state.target() {
            Some(sp) => sp,
            None => panic!(
                "greenweave: Coroutine::resume called on a coroutine that has already finished; \
                 check is_done() before resuming"
            ),
        };
        let input = ManuallyDrop::new(input);
        // SAFETY: `target` is this coroutine's saved context, not resumed since it was saved
        // (the state is replaced right after). The coroutine moves `input` out before it
        // switches back, and this frame stays alive (and pinned) until then.
        let transfer = unsafe { arch::resume(target, &input as *const ManuallyDrop<I> as usize) };
        // SAFETY: the word came from our own coroutine, per the module's protocol.
        match unsafe { self.receive(transfer) } {
            Ok(result) => result,
            Err(Finished::Panicked(payload)) => panic::resume_unwind(payload),
            Err(Finished::Returned(_)) => unreachable!("receive maps Returned to Ok"),
            Err(Finished::Unwound) => panic!(
                "greenweave: a coroutine unwound itself with an unwind request that was not \
                 meant for it (a ForcedUnwind payload was caught and re-raised elsewhere)"
            ),
        }
    }

    /// Takes what the coroutine sent with the switch that just returned, and records its state.
    ///
    /// Returns `Err` for the outcomes that are not a `CoroutineResult` (panic, unwound).
    ///
    /// # Safety
    /// `transfer` must be the result of a switch to this coroutine.
    #[inline]
    unsafe fn receive(&mut self, transfer: Transfer) -> Result<CoroutineResult<Y, R>, Finished<R>> {
        if transfer.data & FINISHED_TAG == 0 {
            self.state = State::suspended(transfer.from);
            // SAFETY: an untagged word is the address of a Message<Y> on the suspended
            // coroutine's stack, which it will never read or drop again.
            return Ok(CoroutineResult::Yield(unsafe {
                Message::<Y>::take(transfer.data)
            }));
        }
        self.state = State::FINISHED;
        // SAFETY: a tagged word is the address of the Message<Finished<R>> in the coroutine's
        // root frame; the coroutine never runs again, and its stack is still mapped.
        match unsafe { Message::<Finished<R>>::take(transfer.data) } {
            Finished::Returned(value) => Ok(CoroutineResult::Return(value)),
            other => Err(other),
        }
    }

    /// Whether the body has been entered (by a first [`resume`](Coroutine::resume)).
    pub fn is_started(&self) -> bool {
        self.state.is_started()
    }

    /// Whether the body has returned or panicked. A finished coroutine cannot be resumed.
    pub fn is_done(&self) -> bool {
        self.state.is_finished()
    }

    /// Finishes the coroutine (unwinding it first if it is suspended, so its destructors run)
    /// and returns its stack for reuse with [`Coroutine::with_stack`].
    ///
    /// # Panics
    /// Re-raises a panic from dropping the body of a coroutine that never started (its
    /// captured values are dropped, not unwound). A destructor that panics while a *suspended*
    /// coroutine's stack unwinds aborts the process instead, as a panic escaping a destructor
    /// during any unwind does in Rust; so does a body that catches the unwind and then
    /// suspends while still unwinding. A body that catches the unwind, finishes catching and
    /// suspends again makes this panic (its stack is leaked, since its frames are live).
    #[inline]
    pub fn into_stack(self) -> Stack {
        // Once the stack is taken nothing is left for `Drop` to do, so skip it.
        let mut this = ManuallyDrop::new(self);
        // SAFETY: the stack is taken once, here, and `this` is never dropped.
        let stack = unsafe { ManuallyDrop::take(&mut this.stack) };
        match this.state.target() {
            None => stack,
            // SAFETY: `sp` is this coroutine's saved context, not resumed since it was saved,
            // and the coroutine is never used again.
            Some(sp) => unsafe { into_stack_unfinished::<Y, R>(sp, stack) },
        }
    }
}

impl<I, Y, R> Drop for Coroutine<I, Y, R> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the stack is taken once, here, and the coroutine is never used again.
        let stack = unsafe { ManuallyDrop::take(&mut self.stack) };
        match self.state.target() {
            None => pool::recycle(stack),
            // SAFETY: `sp` is this coroutine's saved context, not resumed since it was saved,
            // and the coroutine is never used again.
            Some(sp) => unsafe { drop_unfinished::<Y, R>(sp, stack) },
        }
    }
}

/// `into_stack` of a coroutine that has not finished: unwinds it (drops its unrun body if it
/// never started), then returns its stack, or re-raises a panic from a destructor.
///
/// # Safety
/// As for [`unwind_unfinished`].
#[cold]
#[inline(never)]
unsafe fn into_stack_unfinished<Y, R>(target: StackPointer, stack: Stack) -> Stack {
    // SAFETY: forwarded from the caller.
    match unsafe { unwind_unfinished::<Y, R>(target, stack) } {
        (Some(stack), None) => stack,
        (stack, Some(payload)) => {
            drop(stack);
            panic::resume_unwind(payload)
        }
        (None, None) => unreachable!("a stack is kept unless the body refused to unwind"),
    }
}

/// `Drop` of a coroutine that has not finished: unwinds it (drops its unrun body if it never
/// started), then recycles its stack and re-raises a panic from a destructor unless the thread
/// is already panicking.
///
/// # Safety
/// As for [`unwind_unfinished`].
#[cold]
#[inline(never)]
unsafe fn drop_unfinished<Y, R>(target: StackPointer, stack: Stack) {
    // SAFETY: forwarded from the caller.
    let (stack, leftover) = unsafe { unwind_unfinished::<Y, R>(target, stack) };
    if let Some(stack) = stack {
        pool::recycle(stack);
    }
    if let Some(payload) = leftover
        && !std::thread::panicking()
    {
        panic::resume_unwind(payload);
    }
}

/// Sends the unwind request to the coroutine saved at `target`, which runs on `stack`, and
/// waits for it to finish. Returns the stack if it can be reused (it is leaked if the body
/// caught the unwind and suspended again), and a panic payload that the caller should
/// re-raise.
///
/// Kept apart from the `Coroutine` (it takes and returns values, never `&mut self`), so that
/// the handle of a finished coroutine, the common case, can live in registers.
///
/// # Safety
/// `target` must be the saved context of a coroutine with these `Y` and `R`, running on
/// `stack`, that has not been resumed since it was saved; it must not be resumed again.
unsafe fn unwind_unfinished<Y, R>(
    target: StackPointer,
    stack: Stack,
) -> (Option<Stack>, Option<Box<dyn Any + Send>>) {
    // SAFETY: as in `resume`, with the unwind request instead of an input (the caller
    // vouches for `target`).
    let transfer = unsafe { arch::resume(target, UNWIND_REQUEST) };
    if transfer.data & FINISHED_TAG == 0 {
        // SAFETY: an untagged word is the address of a Message<Y> on the suspended
        // coroutine's stack, which it will never read or drop again.
        let yielded = unsafe { Message::<Y>::take(transfer.data) };
        // The body caught the unwind and suspended again. Its frames are live, so the stack
        // cannot be reused or unmapped: leak it, and say why.
        mem::forget(stack);
        drop(yielded);
        let message = "greenweave: a coroutine suspended while it was being dropped; its body \
                       must not catch the unwind (catch_unwind around suspend) and keep going. \
                       Its stack has been leaked.";
        return (None, Some(Box::new(message)));
    }
    // SAFETY: a tagged word is the address of the Message<Finished<R>> in the coroutine's
    // root frame; the coroutine never runs again, and its stack is still mapped.
    let leftover = match unsafe { Message::<Finished<R>>::take(transfer.data) } {
        Finished::Returned(_) | Finished::Unwound => None,
        Finished::Panicked(payload) => Some(payload),
    };
    (Some(stack), leftover)
}

impl<I, Y, R> fmt::Debug for Coroutine<I, Y, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.state.is_finished() {
            "finished"
        } else if self.state.is_started() {
            "suspended"
        } else {
            "unstarted"
        };
        f.debug_struct("Coroutine")
            .field("state", &state)
            .field("stack", &*self.stack)
            .finish()
    }
}

/// A coroutine that takes no input and returns nothing is an iterator over what it yields.
///
/// ```
/// use greenweave::Coroutine;
///
/// let squares = Coroutine::new(|yielder, ()| {
///     for n in 1..=4u32 {
///         yielder.suspend(n * n);
///     }
/// });
/// assert_eq!(squares.collect::<Vec<_>>(), [1, 4, 9, 16]);
/// ```
impl<Y> Iterator for Coroutine<(), Y, ()> {
    type Item = Y;

    fn next(&mut self) -> Option<Y> {
        if self.is_done() {
            return None;
        }
        self.resume(()).into_yield()
    }
}

/// The handle a coroutine's body uses to suspend itself.
///
/// It is passed by reference to the body and cannot outlive it. It is `!Sync`, so it cannot
/// be shared with another thread; calling [`suspend`](Yielder::suspend) from any stack other
/// than its own coroutine's panics.
pub struct Yielder<Input, Yield> {
    /// The context that resumed us last: where `suspend` goes back to.
    resumer: Cell<StackPointer>,
    /// Lowest usable address of this coroutine's stack; with the Yielder's own address (in the
    /// root frame, near the top) it bounds the stack for the misuse check in `suspend`.
    stack_limit: usize,
    /// Whether the resumer was unwinding when it last resumed us (read right after the switch,
    /// before any code of ours ran). Then `std::thread::panicking()` is the resumer's unwind,
    /// not ours, and suspending back to it is fine.
    resumed_while_unwinding: Cell<bool>,
    marker: PhantomData<fn(Yield) -> Input>,
}

impl<I, Y> Yielder<I, Y> {
    /// Suspends the coroutine, handing `value` to the [`Coroutine::resume`] that is running
    /// it; returns the input of the next `resume`.
    ///
    /// If the coroutine is dropped instead of resumed, `suspend` does not return: it unwinds
    /// the body (a panic that the coroutine's root catches; the panic hook is not called), so
    /// the destructors of everything on the stack run.
    ///
    /// A coroutine does not suspend while it unwinds (from a destructor run during a panic of
    /// its own body, or while it is being dropped): std keeps "this thread is panicking" per
    /// OS thread, so the resumer would go on with `std::thread::panicking()` true, and for
    /// good if the coroutine were never resumed. `suspend` panics instead; in a destructor
    /// during an unwind that aborts the process, as any panic escaping a destructor then does.
    /// Suspending while the *resumer* unwinds (a destructor that drains a generator) is fine.
    ///
    /// # Panics
    /// If called from outside this yielder's own coroutine (for instance from a nested
    /// coroutine that was handed a reference to it), or while the coroutine unwinds.
    #[inline]
    pub fn suspend(&self, value: Y) -> I {
        if std::thread::panicking() && !self.resumed_while_unwinding.get() {
            suspend_while_unwinding();
        }
        let input = self.switch_to_resumer(value);
        self.resumed_while_unwinding.set(std::thread::panicking());
        input
    }

    /// Suspends this coroutine from whichever stack is running on its behalf: its own, or that
    /// of a coroutine or greenlet it resumed or switched to, which is suspended in turn. For the
    /// scheduler's green threads, whose parks may come from a generator or a greenlet running
    /// inside the green thread: the switch goes to this coroutine's resumer (the scheduler),
    /// whose `resume` records the stack pointer of the stack that actually suspended, so the
    /// next `resume` continues exactly there. Skips `suspend`'s own-stack check and its unwinding
    /// check and bookkeeping, which would be on every park otherwise (parks refuse to switch
    /// while unwinding).
    ///
    /// Touches nothing at the top of the coroutine's stack, where the yielder lies, unless it
    /// unwinds: the resumer is read from and written to `resumer`, a slot of the caller's (the
    /// scheduler keeps it in the task record, a line every switch reads anyway), and `yielder`
    /// is asked for the yielder only on the way out by unwinding. The slot starts as a copy of
    /// [`resumer`](Yielder::resumer) and is handed back with
    /// [`take_resumer_from`](Yielder::take_resumer_from) before the body ends (its root leaves
    /// by the yielder's copy), however the body ends; an unwind request also brings the
    /// yielder's copy up to date itself.
    /// The resumer moves the value out of `message`: one the caller gives up (a
    /// [`Message::new`] of its own), or a `Copy` value in a static, which may be taken any
    /// number of times and costs the suspend no store on the stack.
    ///
    /// An unwind request (the coroutine dropped while suspended here) unwinds the suspending
    /// stack: a nested coroutine's or greenlet's root hands the panic to its resumer or parent,
    /// which re-raises it, until it reaches this coroutine's root, which recognises it.
    ///
    /// # Safety
    /// This coroutine is running: every stack between its own and the running one is
    /// suspended inside it (a nested `Coroutine::resume`, a greenlet switch made from a stack
    /// of this coroutine's), and nothing but this coroutine's resumer can resume the stack that
    /// suspends here. The caller is not unwinding. `resumer` holds the context that resumed
    /// this coroutine last (every resume since the body started has come back through this
    /// function with the same slot, or the slot was refreshed from [`resumer`](Yielder::resumer)).
    /// `yielder` returns this coroutine's yielder. `message` stays alive until the resumer has
    /// taken its value, and nothing else takes it unless its value is `Copy`.
    #[inline(always)]
    pub(crate) unsafe fn suspend_on_behalf(
        resumer: &Cell<StackPointer>,
        message: &Message<Y>,
        yielder: impl FnOnce() -> *const Self,
    ) -> I {
        debug_assert!(!std::thread::panicking());
        // SAFETY: `resumer` holds the context that resumed this coroutine and waits in its
        // switch (the coroutine runs, per the contract); it moves the value out of `message`
        // before anything can resume this stack, and the caller keeps `message` alive until
        // then. The resumer's `receive` records this stack's pointer as where the coroutine is
        // suspended.
        let transfer = unsafe { arch::suspend(resumer.get(), message.word()) };
        resumer.set(transfer.from);
        if transfer.data == UNWIND_REQUEST {
            // SAFETY: per the contract, `yielder` gives this coroutine's yielder, alive in its
            // root frame.
            let yielder = unsafe { &*yielder() };
            // The root leaves by the yielder's own copy. The caller's hand-back copies the slot
            // there too as the unwind passes it; this copy keeps an unwind request's way out
            // right without relying on that (a cold path: one store).
            yielder.resumer.set(transfer.from);
            panic::resume_unwind(Box::new(ForcedUnwind(yielder as *const Self as usize)));
        }
        // SAFETY: a non-zero word from the resumer is the address of its input, which it has
        // given up (ManuallyDrop) and keeps alive until we switch back.
        unsafe { ptr::read(transfer.data as *const I) }
    }

    /// The context that resumed this coroutine last, as recorded by `suspend` or, before any
    /// suspend, by the body's start: what a caller of
    /// [`suspend_on_behalf`](Yielder::suspend_on_behalf) fills its slot with first.
    #[inline]
    pub(crate) fn resumer(&self) -> StackPointer {
        self.resumer.get()
    }

    /// Makes `resumer`, a slot kept by [`suspend_on_behalf`](Yielder::suspend_on_behalf)
    /// since it was filled from [`resumer`](Yielder::resumer), this yielder's record again:
    /// the body's root leaves through it when the body ends.
    ///
    /// # Safety
    /// As for the slot of `suspend_on_behalf`: it holds the context that resumed this
    /// coroutine last.
    #[inline]
    pub(crate) unsafe fn take_resumer_from(&self, resumer: &Cell<StackPointer>) {
        self.resumer.set(resumer.get());
    }

    /// The switch of `suspend`: checks the yielder is used on its own stack, hands `value` to
    /// the resumer and returns the next input (or unwinds, if the coroutine is being dropped).
    #[inline(always)]
    fn switch_to_resumer(&self, value: Y) -> I {
        let here = arch::current_stack_pointer();
        let root = self as *const Self as usize;
        if here < self.stack_limit || here > root {
            suspend_outside_its_coroutine();
        }
        let message = Message::new(value);
        // SAFETY: `resumer` is the context that resumed us and is waiting in its switch (a
        // coroutine runs only while its resumer is suspended). It moves `message` out before
        // anything can resume us, and this frame stays alive until then.
        let transfer = unsafe { arch::suspend(self.resumer.get(), message.word()) };
        self.resumer.set(transfer.from);
        if transfer.data == UNWIND_REQUEST {
            panic::resume_unwind(Box::new(ForcedUnwind(root)));
        }
        // SAFETY: a non-zero word from the resumer is the address of its input, which it has
        // given up (ManuallyDrop) and keeps alive until we switch back.
        unsafe { ptr::read(transfer.data as *const I) }
    }
}

/// The panic of `Yielder::suspend` called from a stack other than its coroutine's own.
#[cold]
#[inline(never)]
fn suspend_outside_its_coroutine() -> ! {
    panic!("greenweave: Yielder::suspend called outside its own coroutine");
}

/// The panic of `Yielder::suspend` called while its coroutine unwinds.
#[cold]
#[inline(never)]
fn suspend_while_unwinding() -> ! {
    panic!(
        "greenweave: Yielder::suspend called while the coroutine is unwinding (a destructor that \
         suspends, run during a panic of the body or while the coroutine is dropped). A \
         coroutine does not suspend while it unwinds: std's panic state is per OS thread, so \
         the resumer would see it as its own. Suspend before the unwind starts."
    );
}

impl<I, Y> fmt::Debug for Yielder<I, Y> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Yielder").finish_non_exhaustive()
    }
}

/// What a coroutine's fiber is launched with: the user's closure and what the [`Yielder`]
/// needs to know about the stack.
struct CoroutineLaunch<I, Y, R, F> {
    body: F,
    /// Lowest usable address of the stack, for the [`Yielder`]'s misuse check.
    stack_limit: usize,
    marker: PhantomData<fn(I) -> (Y, R)>,
}

impl<I, Y, R, F> FiberBody for CoroutineLaunch<I, Y, R, F>
where
    F: FnOnce(&Yielder<I, Y>, I) -> R,
{
    type Message = Finished<R>;

    /// Builds the [`Yielder`], runs the body (or drops it unrun), and returns how it ended, to
    /// be sent to the last resumer.
    ///
    /// Not instrumented under AddressSanitizer: the yielder must be in this frame on the
    /// coroutine's own stack, where `suspend`'s misuse check looks for it, not on ASan's fake
    /// stack.
    #[inline]
    #[cfg_attr(greenweave_asan, sanitize(address = "off"))]
    unsafe fn run(launch: *mut Self, transfer: Transfer) -> Exit<Finished<R>> {
        // SAFETY: the launch record is ours (the trait's contract); `stack_limit` is Copy.
        let (body, stack_limit) = unsafe { (&raw mut (*launch).body, (*launch).stack_limit) };
        let yielder = Yielder {
            resumer: Cell::new(transfer.from),
            stack_limit,
            resumed_while_unwinding: Cell::new(std::thread::panicking()),
            marker: PhantomData,
        };
        let outcome = if transfer.data == UNWIND_REQUEST {
            // Dropped before it started: drop the closure in place without running it.
            // SAFETY: the body has not been moved out, and is dropped once.
            match panic::catch_unwind(AssertUnwindSafe(|| unsafe { ptr::drop_in_place(body) })) {
                Ok(()) => Finished::Unwound,
                Err(payload) => Finished::Panicked(payload),
            }
        } else {
            // SAFETY: a non-zero first word is the address of the resumer's input (see
            // `resume`).
            let input = unsafe { ptr::read(transfer.data as *const I) };
            // The body is moved out only here, at the call, so a large capture is copied once.
            let run = || {
                // SAFETY: the body has not been moved out or dropped, and is read once.
                let body = unsafe { ptr::read(body) };
                body(&yielder, input)
            };
            match panic::catch_unwind(AssertUnwindSafe(run)) {
                Ok(value) => Finished::Returned(value),
                Err(payload) => match payload.downcast_ref::<ForcedUnwind>() {
                    Some(request) if request.0 == &yielder as *const Yielder<I, Y> as usize => {
                        Finished::Unwound
                    }
                    _ => Finished::Panicked(payload),
                },
            }
        };
        Exit {
            to: yielder.resumer.get(),
            message: outcome,
            leave: Leave::ToResumer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window the scheduler prefetches for a suspended coroutine starts at its saved frame
    /// and ends at its stack's top, never beyond (issue 33: a prefetch past the top).
    #[test]
    fn the_resume_window_ends_at_the_stack_top() {
        let mut co = Coroutine::<(), (), ()>::new(|yielder, ()| {
            yielder.suspend(());
        });
        let top = co.stack.top().as_ptr() as usize;
        let (start, bytes) = co.resume_window().expect("unstarted: the initial frame");
        assert_eq!(start + bytes, top);
        assert!((arch::INITIAL_FRAME_BYTES..4096).contains(&bytes));
        assert_eq!(co.resume(()), CoroutineResult::Yield(()));
        let (start, bytes) = co.resume_window().expect("suspended");
        assert_eq!(Some(start), co.suspended_at().map(StackPointer::addr));
        assert_eq!(start + bytes, top);
        assert!(bytes >= arch::SAVED_FRAME_BYTES && bytes < co.stack.size());
        assert_eq!(co.resume(()), CoroutineResult::Return(()));
        assert!(co.resume_window().is_none());
    }
}
