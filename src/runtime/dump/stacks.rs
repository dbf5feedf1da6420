//! The backtraces of a dump: each parked stack's chain of return addresses, walked in full once
//! per distinct shape and recognised in O(frames) loads after that, and a table of the distinct
//! stacks, each symbolized once, on first use.
//!
//! Owns: [`StackWalker`] (one per worker's part of a dump), [`DistinctStack`] (one chain of
//! return addresses, shared by every green thread parked with it), and the unwinder's entry
//! points it calls (`_Unwind_Backtrace`, from the unwinder std already links).
//!
//! Why shapes. A program with very many green threads parks most of them at a handful of
//! points, each reached through the same calls: their stacks have the same depth and the same
//! return addresses at the same places, only their data differ. The unwinder (which reads each
//! frame's CFI, a table search and a small interpreter per frame) is asked once per shape; a
//! later stack whose resume address and depth match a shape's is compared with it at the places
//! where that shape keeps its return addresses, and if each holds the same address it is that
//! shape: the unwinder's next step from each of those frames depends only on its return address
//! and where its frame begins, both equal, so it would walk the same chain. A stack that
//! matches no shape is walked in full and becomes a shape of its own.
//!
//! What a shape assumes: a frame's size is fixed by its return address (true of all code that
//! Rust and C compilers emit except C's `alloca` and variable-length arrays). The walker checks
//! that in what it walks: a return address seen with two frame sizes is never part of a shape,
//! and every shape learnt before is dropped.
//!
//! May not: write to a suspended stack, read outside `[frame, top)` of a green thread's own
//! stack (a frame on another stack, a generator's, is walked by the unwinder each time), or run
//! anywhere but on the stack's own worker with no green thread running.

use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::fmt;
use std::sync::{Arc, OnceLock};

use super::{Frame, json_frames, parse_backtrace};
use crate::arch::{self, StackPointer};
use crate::runtime::task::Task;

/// The most frames of one stack that a dump keeps (a runaway recursion is cut there; such a
/// stack is walked by the unwinder each time and never becomes a shape).
const MAX_FRAMES: usize = 1024;

/// One distinct parked stack: its return addresses, and std's capture of the first green
/// thread found parked with it, from which its frames are symbolized, once, when first read.
pub(super) struct DistinctStack {
    /// Return addresses, innermost first: the resume address of the switch, then one per
    /// frame down to the stack's root.
    addresses: Box<[usize]>,
    captured: Backtrace,
    frames: OnceLock<Vec<Frame>>,
    /// The frames as a JSON array, written once for every green thread that shares them.
    json: OnceLock<String>,
}

impl DistinctStack {
    /// Its frames, symbolized on first use (std's symbolizer, which reads the debug info).
    pub(super) fn frames(&self) -> &[Frame] {
        self.frames.get_or_init(|| parse_backtrace(&self.captured))
    }

    /// Its frames as a JSON array (`[{"symbol":..., "location":...}, ...]`).
    pub(super) fn json(&self) -> &str {
        self.json.get_or_init(|| {
            let mut out = String::new();
            json_frames(&mut out, self.frames());
            out
        })
    }

    /// The return addresses, innermost first.
    pub(super) fn addresses(&self) -> &[usize] {
        &self.addresses
    }
}

impl fmt::Debug for DistinctStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.frames()).finish()
    }
}

/// A shape: a stack that was walked in full, and where its return addresses lie.
struct Shape {
    /// `(offset from the saved frame, return address)` for each frame but the root's, from
    /// the innermost frame out: where its caller's return address is kept, and what it is.
    slots: Box<[(usize, usize)]>,
    stack: Arc<DistinctStack>,
}

/// Walks the parked stacks of one worker's part of a dump, learning shapes as it goes.
#[derive(Default)]
pub(super) struct StackWalker {
    /// The shapes learnt, by the resume address and the depth (stack top minus saved frame)
    /// that every stack of that shape has.
    shapes: HashMap<(usize, usize), Vec<Shape>>,
    /// Every distinct chain of return addresses met, with its stack.
    distinct: HashMap<Box<[usize]>, Arc<DistinctStack>>,
    /// Each return address's frame size (its caller's stack pointer minus its own) as the
    /// unwinder found it; [`VARIES`] for one seen with two sizes.
    frame_sizes: HashMap<usize, usize>,
    /// The last full walk's `(return address, stack pointer)` per frame, reused.
    walked: Vec<(usize, usize)>,
}

/// A frame size that differed between two walks.
const VARIES: usize = usize::MAX;

/// How many shapes a (resume address, depth) keeps: past that, the stacks that match none are
/// walked in full (each still shares its symbols with the same chain met before).
const SHAPES_PER_KEY: usize = 8;

impl StackWalker {
    /// The stack `task` is suspended on, from its switch point to its root; `None` if it has
    /// none (not started, running, finished).
    ///
    /// Runs on `task`'s worker, on the scheduler, with no green thread running: every
    /// suspended stack of the worker stays as it is until this returns.
    pub(super) fn walk(&mut self, task: &Task) -> Option<Arc<DistinctStack>> {
        let coroutine = task.coroutine.try_borrow().ok()?;
        let coroutine = coroutine.as_ref()?;
        let frame = coroutine.suspended_at()?;
        let own_stack = coroutine.stack_bounds();
        let at = frame.addr();
        // A frame on the green thread's own stack is read directly; one on another stack (a
        // generator's or greenlet's, whose bounds are not known here) only by the unwinder.
        // Under ASan the direct reads would meet its redzones: the unwinder only, there too.
        let key = (own_stack.contains(&at) && !cfg!(greenweave_asan)).then(|| {
            // SAFETY: `frame` is the saved frame of a suspended context, on this stack at
            // `[at, top)`: its resume address slot is part of it, mapped and 8-byte aligned.
            let resume = unsafe { arch::load_word(at + arch::SUSPENDED_RESUME_ADDRESS_OFFSET) };
            (resume, own_stack.end - at)
        });
        if let Some(shapes) = key.as_ref().and_then(|key| self.shapes.get(key)) {
            for shape in shapes {
                // SAFETY: every slot of a shape under this key lies below `at + depth`, the
                // stack's top (`learn` keeps only slots inside the walked stack's `[at, top)`,
                // and the key's depth is the same), at an 8-byte aligned offset from the
                // 8-byte aligned `at`: mapped, readable, and unchanged while it is suspended.
                let same = shape
                    .slots
                    .iter()
                    .all(|&(offset, address)| unsafe { arch::load_word(at + offset) } == address);
                if same {
                    return Some(shape.stack.clone());
                }
            }
        }
        let complete = self.walk_in_full(frame);
        let stack = self.intern(frame);
        if let Some(key) = key.filter(|_| complete) {
            self.learn(key, at, stack.clone());
        }
        Some(stack)
    }

    /// Walks the stack suspended at `frame` with the unwinder, into `self.walked`; `false` if
    /// it was cut at [`MAX_FRAMES`].
    fn walk_in_full(&mut self, frame: StackPointer) -> bool {
        self.walked.clear();
        let mut walk = Walk {
            parked_stack_pointer: frame.addr() + arch::SUSPENDED_FRAME_BYTES,
            in_parked_stack: false,
            frames: &mut self.walked,
            cut: false,
        };
        // SAFETY: `frame` is the saved frame of a suspended context that stays so (the
        // caller's contract: its worker runs this, with no green thread running, and the
        // coroutine is borrowed); `unwind_parked` does not unwind (an `extern "C"` function
        // aborts instead), and writes only `walk`.
        unsafe {
            arch::probe_suspended(frame, unwind_parked, (&raw mut walk).cast::<u8>());
        }
        !walk.cut
    }

    /// The distinct stack of the chain just walked: the one met before with the same
    /// addresses, or a new one, captured by std for its symbols (a second walk, once per
    /// distinct stack).
    fn intern(&mut self, frame: StackPointer) -> Arc<DistinctStack> {
        let addresses: Vec<usize> = self.walked.iter().map(|&(address, _)| address).collect();
        if let Some(stack) = self.distinct.get(addresses.as_slice()) {
            return stack.clone();
        }
        let mut captured: Option<Backtrace> = None;
        // SAFETY: as in `walk_in_full`; `capture` writes only `captured`.
        unsafe {
            arch::probe_suspended(frame, capture, (&raw mut captured).cast::<u8>());
        }
        let addresses = addresses.into_boxed_slice();
        let stack = Arc::new(DistinctStack {
            addresses: addresses.clone(),
            captured: captured.unwrap_or_else(Backtrace::disabled),
            frames: OnceLock::new(),
            json: OnceLock::new(),
        });
        self.distinct.insert(addresses, stack.clone());
        stack
    }

    /// Makes the chain just walked, of the stack whose saved frame is at `at` with key `key`,
    /// a shape: finds where each frame keeps its caller's return address. Gives up (no shape)
    /// where a frame is not inside the stack, a return address is not found in its frame, or a
    /// frame's size differs from the one its return address had before.
    fn learn(&mut self, key: (usize, usize), at: usize, stack: Arc<DistinctStack>) {
        let top = at + key.1;
        let Some(&(resume, _)) = self.walked.first() else {
            return;
        };
        if resume != key.0 {
            return;
        }
        let mut slots = Vec::with_capacity(self.walked.len());
        let mut usable = true;
        // Frame `i` spans `[its stack pointer, its caller's)`; the first begins where the
        // switch's saved frame ends.
        if self.walked[0].1 != at + arch::SUSPENDED_FRAME_BYTES {
            return;
        }
        for pair in self.walked.windows(2) {
            let [(address, start), (caller, end)] = [pair[0], pair[1]];
            if end <= start || end > top || end % 8 != 0 {
                return;
            }
            let size = end - start;
            let known = self.frame_sizes.entry(address).or_insert(size);
            if *known != size {
                if *known != VARIES {
                    // Shapes learnt with this return address assumed one size: drop them all.
                    *known = VARIES;
                    self.shapes.clear();
                }
                usable = false;
            }
            // The caller's return address, from the top of the frame down (x86_64's `call`
            // leaves it in the frame's highest word; aarch64 code stores x30 where its
            // prologue chooses).
            // SAFETY: each word read lies in `[start, end)`, inside `[at, top)` as checked
            // above, and is 8-byte aligned (`end` is, as checked).
            let slot = (1..=size / 8)
                .map(|words| end - 8 * words)
                .find(|&slot| unsafe { arch::load_word(slot) } == caller);
            let Some(slot) = slot else { return };
            slots.push((slot - at, caller));
        }
        if !usable {
            return;
        }
        let shapes = self.shapes.entry(key).or_default();
        if shapes.len() < SHAPES_PER_KEY {
            shapes.push(Shape {
                slots: slots.into_boxed_slice(),
                stack,
            });
        }
    }
}

/// What [`unwind_parked`] fills in.
struct Walk<'a> {
    /// The parked side's stack pointer at its resume address: the innermost parked frame is
    /// the one the unwinder reports with it.
    parked_stack_pointer: usize,
    in_parked_stack: bool,
    frames: &'a mut Vec<(usize, usize)>,
    cut: bool,
}

/// `_Unwind_Reason_Code` values (the Itanium C++ ABI's unwinding interface, 5.1).
const URC_NO_REASON: c_int = 0;
const URC_NORMAL_STOP: c_int = 4;

/// The unwinder's context for one frame (opaque).
#[repr(C)]
struct UnwindContext {
    _opaque: [u8; 0],
}

type TraceFn = extern "C" fn(*mut UnwindContext, *mut c_void) -> c_int;

unsafe extern "C" {
    // libgcc_s's (or LLVM libunwind's) entry points, which std links for its own backtraces
    // and panics; the Itanium C++ ABI's unwinding interface.
    /// Calls `trace(context, arg)` for each frame from the caller outwards, until `trace`
    /// returns other than `_URC_NO_REASON` or the stack ends.
    fn _Unwind_Backtrace(trace: TraceFn, arg: *mut c_void) -> c_int;
    /// The frame's instruction pointer: its return address (the caller's frames), or the
    /// current one (the innermost).
    fn _Unwind_GetIP(context: *mut UnwindContext) -> usize;
    /// Named for the CFA, but in a trace callback it is the frame's own stack pointer (the CFA
    /// of the frame it called): libgcc's context carries the callee's CFA with the caller's
    /// registers, and LLVM's libunwind returns the frame's sp.
    fn _Unwind_GetCFA(context: *mut UnwindContext) -> usize;
}

/// The probe of a full walk: called (through `asm/probe_<arch>.S`) as if from the suspended
/// switch point; has the unwinder walk on into the suspended stack.
///
/// # Safety
/// `walk` points to a [`Walk`].
unsafe extern "C" fn unwind_parked(walk: *mut u8) {
    // SAFETY: the unwinder calls `each_frame` with `walk` as given, for this call only.
    unsafe { _Unwind_Backtrace(each_frame, walk.cast()) };
}

/// `_Unwind_Backtrace`'s callback: skips the frames up to the probe's, keeps the parked ones.
extern "C" fn each_frame(context: *mut UnwindContext, walk: *mut c_void) -> c_int {
    // SAFETY: `walk` is the `Walk` that `unwind_parked` was given, alive and not otherwise
    // borrowed while the unwinder runs; `context` is the unwinder's, valid for this call.
    let (walk, address, stack_pointer) = unsafe {
        (
            &mut *walk.cast::<Walk<'_>>(),
            _Unwind_GetIP(context),
            _Unwind_GetCFA(context),
        )
    };
    // The probe's CFI names the parked stack pointer as its CFA, so the frame after it, the
    // innermost parked one, has it as its stack pointer; no frame on this OS thread's own
    // stack has a stack pointer inside the parked stack.
    walk.in_parked_stack |= stack_pointer == walk.parked_stack_pointer;
    // libgcc reports one last frame, of address 0, past the root whose return address is
    // undefined (the trampoline's): not a frame.
    if !walk.in_parked_stack || address == 0 {
        return URC_NO_REASON;
    }
    if walk.frames.len() == MAX_FRAMES {
        walk.cut = true;
        return URC_NORMAL_STOP;
    }
    walk.frames.push((address, stack_pointer));
    URC_NO_REASON
}

/// The probe that captures std's backtrace (for its symbols): called (through
/// `asm/probe_<arch>.S`) as if from the suspended switch point.
///
/// # Safety
/// `out` points to an `Option<Backtrace>`.
unsafe extern "C" fn capture(out: *mut u8) {
    let backtrace = Backtrace::force_capture();
    // SAFETY: the caller's contract.
    unsafe { *out.cast::<Option<Backtrace>>() = Some(backtrace) };
}
