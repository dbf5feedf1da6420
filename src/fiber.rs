//! The fiber layer: a closure launched on its own [`Stack`], under every public API.
//!
//! Owns: placing a body on a fresh stack, the root frame that calls it, and the rule for the
//! last word a fiber sends. [`Coroutine`](crate::Coroutine) (asymmetric) and
//! [`Greenlet`](crate::greenlet::Greenlet) (symmetric) are both built on [`launch`]; they differ
//! only in what their bodies do around the user's closure and where they switch.
//!
//! May not: decide where a fiber switches to or what its words mean (that is the layer above),
//! or let a panic reach the assembly: the root aborts if the body it was given unwinds, so
//! layers above must catch the user's panics themselves.
//!
//! # The last word
//! A body returns an [`Exit`]: where to switch and a message. The root keeps the message in
//! its own frame (which stays intact, because a finished fiber is never resumed) and sends its
//! address with [`FINISHED_TAG`] set. [`Message`] keeps the low bit of every message address
//! free for that tag.

use core::marker::PhantomData;
use core::mem::{self, ManuallyDrop};
use core::ptr::{self, NonNull};

use crate::arch::{self, StackPointer, Transfer};
use crate::stack::Stack;

/// Low bit set on the last word a fiber sends: the message of its [`Exit`].
pub(crate) const FINISHED_TAG: usize = 1;

/// Room left below the body for its first frames, so that a body that barely fits is refused
/// with a message instead of overflowing before it runs.
const MIN_RUN_SPACE: usize = 4096;

/// Copies of the payload that the entry may make on the stack before the user's code runs:
/// one to move the closure out for its by-value call, and another that unoptimised builds
/// make on the way (measured: a 112 KiB capture runs on a 256 KiB stack in release builds,
/// 80 KiB in debug).
const COPIES_MADE_TO_RUN: usize = 2;

/// A value in transit through a switch, owned by the sender's frame and moved out by the
/// receiver. The alignment of at least 2 keeps the low bit of its address free for
/// [`FINISHED_TAG`].
#[repr(C, align(2))]
pub(crate) struct Message<T>(ManuallyDrop<T>);

impl<T> Message<T> {
    pub(crate) const fn new(value: T) -> Self {
        Message(ManuallyDrop::new(value))
    }

    /// The word to send: this message's address.
    pub(crate) fn word(&self) -> usize {
        self as *const Self as usize
    }

    /// Moves the value out of the message whose address `word` is (tag bit ignored).
    ///
    /// # Safety
    /// `word` must come from [`Message::word`] of a `Message<T>` (possibly tagged) whose sender
    /// is suspended or finished and will never read or drop it, and it must be taken once.
    pub(crate) unsafe fn take(word: usize) -> T {
        // SAFETY: per the contract, the address is a live Message<T> nobody else will use;
        // Message<T> starts with the (transparent) ManuallyDrop<T>.
        unsafe { ptr::read((word & !FINISHED_TAG) as *const T) }
    }
}

/// Where a finished body switches to, what it sends there, and how.
pub(crate) struct Exit<M> {
    pub(crate) to: StackPointer,
    pub(crate) message: M,
    pub(crate) leave: Leave,
}

/// Which switch primitive a finished fiber leaves by (see [`crate::arch`]): both are correct,
/// the right one keeps the processor's return predictor balanced.
pub(crate) enum Leave {
    /// `to` resumed this fiber (`arch::resume`): go back with `arch::suspend`.
    ToResumer,
    /// `to` is a peer that switched here symmetrically: `arch::switch`.
    ToPeer,
}

/// What a fiber runs: a value that [`launch`] places at the top of the stack, and the function
/// that the fiber's root calls with it.
///
/// The root is generic over the body, so `run` is called directly (and usually inlined into
/// the root) rather than through a function pointer stored on the stack.
pub(crate) trait FiberBody: Sized {
    /// What the body's [`Exit`] sends as the fiber's last message.
    type Message;

    /// Runs the body; its return value says where the fiber's last message goes.
    ///
    /// It receives the body by pointer, where [`launch`] placed it at the top of the stack, and
    /// must move out (`ptr::read`) or drop in place whatever it owns there, exactly once.
    /// Taking it by pointer rather than by value matters: a closure passed by value through a
    /// few frames (and `catch_unwind`) is copied down the stack at each one, and a large
    /// capture would then overflow a stack that it fits in.
    ///
    /// # Safety
    /// `this` is the value [`launch`] placed, not yet moved out or dropped; `first` is the
    /// [`Transfer`] of the first switch to the fiber.
    unsafe fn run(this: *mut Self, first: Transfer) -> Exit<Self::Message>;
}

/// The function a fiber runs, for bodies that are a payload and a function taking it:
/// `entry(payload, first_transfer) -> Exit` (see [`FiberBody::run`], whose contract it has).
pub(crate) type Entry<P, M> = unsafe fn(payload: *mut P, first: Transfer) -> Exit<M>;

/// A payload and the [`Entry`] that runs it: what [`launch`] places for such a body.
struct EntryAndPayload<P, M> {
    entry: Entry<P, M>,
    payload: P,
}

impl<P, M> FiberBody for EntryAndPayload<P, M> {
    type Message = M;

    #[inline]
    unsafe fn run(this: *mut Self, first: Transfer) -> Exit<M> {
        // SAFETY: `this` is ours (per the trait's contract); the fn pointer is Copy and the
        // payload stays where it is, owned by the entry from here on.
        unsafe {
            let (entry, payload) = ((*this).entry, &raw mut (*this).payload);
            entry(payload, first)
        }
    }
}

/// Prepares `stack` so that the first switch to the returned pointer calls
/// `entry(&mut payload, that switch's Transfer)` on it. When `entry` returns an [`Exit`], the
/// fiber switches to `exit.to` with the address of `exit.message` tagged with
/// [`FINISHED_TAG`], and never runs again.
///
/// # Panics
/// If the payload does not fit in `stack` three times over with 4 KiB to spare (see
/// [`COPIES_MADE_TO_RUN`]).
///
/// # Safety
/// As for [`launch_body`].
pub(crate) unsafe fn launch<P, M>(stack: &Stack, payload: P, entry: Entry<P, M>) -> StackPointer {
    // SAFETY: forwarded from the caller.
    unsafe { launch_body(stack, EntryAndPayload { entry, payload }) }
}

/// Prepares `stack` so that the first switch to the returned pointer calls
/// [`FiberBody::run`] on `body`, placed at the top of the stack, with that switch's
/// [`Transfer`]. When it returns an [`Exit`], the fiber switches to `exit.to` with the address
/// of `exit.message` tagged with [`FINISHED_TAG`], and never runs again.
///
/// # Panics
/// If the body does not fit in `stack` three times over with 4 KiB to spare (see
/// [`COPIES_MADE_TO_RUN`]); the body is dropped.
///
/// # Safety
/// Nothing else may be running on `stack` or use it until the fiber has finished (or is never
/// started, in which case the body is leaked). The receiver of the last message must take it
/// ([`Message::take`]) before the stack is reused or unmapped.
#[inline]
pub(crate) unsafe fn launch_body<B: FiberBody>(stack: &Stack, body: B) -> StackPointer {
    let top = stack.top().as_ptr() as usize;
    let Some(launch_at) = Placement::<B>::at(top, stack.size()) else {
        body_does_not_fit(mem::size_of::<B>(), stack.size())
    };
    // Under ASan: whatever ran on this stack before left redzones behind (nothing otherwise).
    arch::release_stack(stack.limit(), top);
    // SAFETY: `launch_at..top` lies in the usable range of `stack` (checked by `at`) and is
    // aligned for B; the caller guarantees nothing else uses the stack. `root` owns the body
    // from its first call on.
    unsafe { (launch_at as *mut B).write(body) };
    // SAFETY: `launch_at` is 16-byte aligned, non-null, and the INITIAL_FRAME_BYTES below it
    // are unused stack memory (checked by `at`).
    let context = unsafe {
        arch::init_stack(
            NonNull::new_unchecked(launch_at as *mut u8),
            root::<B>,
            launch_at,
        )
    };
    arch::set_stack_bounds(context, stack.limit(), top);
    context
}

/// Where [`launch_body`] places a `B` on a stack, and the room it must leave below it.
struct Placement<B>(PhantomData<B>);

impl<B> Placement<B> {
    /// The body's alignment, and at least the 16 bytes the initial frame needs.
    const ALIGN: usize = if mem::align_of::<B>() > 16 {
        mem::align_of::<B>()
    } else {
        16
    };

    /// Bytes the body takes at the top of a stack whose top is `ALIGN`-aligned.
    const RESERVED: usize = mem::size_of::<B>().next_multiple_of(Self::ALIGN);

    /// Bytes that must stay free below the body: the entry moves the user's closure out once
    /// to call it (more in debug builds), so the rest of the stack must hold that many more
    /// copies besides the initial frame and the room to run. Saturates: a body that large
    /// fits nowhere.
    const BELOW: usize = mem::size_of::<B>()
        .saturating_mul(COPIES_MADE_TO_RUN)
        .saturating_add(arch::INITIAL_FRAME_BYTES + MIN_RUN_SPACE);

    /// The smallest usable size of a stack that a `B` fits in, when the stack's top is
    /// `ALIGN`-aligned (it is page-aligned, and no page is smaller than 4 KiB).
    const MIN_STACK_SIZE: usize = Self::RESERVED.saturating_add(Self::BELOW);

    /// The address for the body on a stack with `size` usable bytes below `top`, if it fits.
    #[inline]
    fn at(top: usize, size: usize) -> Option<usize> {
        if Self::ALIGN <= 4096 {
            // A constant: a body placed this way costs one comparison.
            return (size >= Self::MIN_STACK_SIZE).then(|| top - Self::RESERVED);
        }
        let bottom = top - size;
        top.checked_sub(mem::size_of::<B>())
            .map(|at| at & !(Self::ALIGN - 1))
            .filter(|&at| {
                bottom
                    .checked_add(Self::BELOW)
                    .is_some_and(|needed| needed <= at)
            })
    }
}

/// Refuses a body too large for its stack (kept out of line: the caller's check is a
/// comparison with a constant).
#[cold]
#[inline(never)]
fn body_does_not_fit(body_size: usize, stack_size: usize) -> ! {
    panic!(
        "greenweave: a body of {body_size} bytes does not fit in a {stack_size}-byte stack (it \
         needs room for {COPIES_MADE_TO_RUN} more copies of itself and 4 KiB to run); box the \
         captured data or use a larger Stack"
    )
}

/// The first Rust frame on every fiber stack, called by the trampoline.
///
/// Under AddressSanitizer this frame is not instrumented, so `message` lives on the fiber's
/// own stack (which stays intact until the receiver takes it) rather than on ASan's fake
/// stack, which the last switch frees.
///
/// # Safety
/// Called only by the trampoline, for a stack prepared by [`launch_body`] with the same `B`:
/// `launch_at` is the address of the body it placed.
#[cfg_attr(greenweave_asan, sanitize(address = "off"))]
unsafe extern "C" fn root<B: FiberBody>(from: StackPointer, data: usize, launch_at: usize) -> ! {
    // SAFETY: this is the first code on the fiber's stack, which the first switch just reached.
    unsafe { arch::entered_fresh_stack(from) };
    let first = Transfer { from, data };
    // A guard rather than `catch_unwind`: it costs nothing unless the body unwinds, and then
    // its destructor aborts before the unwind can leave this frame.
    let abort_on_unwind = AbortOnUnwind;
    // SAFETY: per this function's contract, the body is at `launch_at` and is now ours.
    let exit = unsafe { B::run(launch_at as *mut B, first) };
    mem::forget(abort_on_unwind);
    let message = Message::new(exit.message);
    let word = message.word() | FINISHED_TAG;
    // SAFETY: `exit.to` is a suspended context chosen by the layer above; it takes `message`
    // before this stack is reused, and never switches back here. `message` is in this frame,
    // which is never on a fake stack (see above).
    unsafe {
        match exit.leave {
            Leave::ToResumer => arch::suspend_last(exit.to, word),
            Leave::ToPeer => arch::switch_last(exit.to, word),
        }
    }
}

/// Aborts if dropped: lives across a fiber body's call in [`root`] and is forgotten when the body
/// returns, so its destructor runs only if the body unwinds.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        fatal(
            "a fiber body unwound to its root (greenweave bug: the layer above must catch panics)",
        )
    }
}

/// Reports a broken internal invariant and aborts; unwinding is not possible at a fiber root.
fn fatal(what: &str) -> ! {
    eprintln!("fatal runtime error: greenweave: {what}; aborting");
    std::process::abort()
}
