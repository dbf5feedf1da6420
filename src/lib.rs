//! Stackful coroutines (green threads) for Rust, with hand-written context switches for
//! x86_64 and aarch64.
//!
//! Each coroutine runs on its own mmap'd [`Stack`] with a guard page below it. Running off the
//! end of a stack is reported, never silent: the process prints which thread overflowed and
//! aborts, as std does for OS threads.
//!
//! # Generator-style coroutines
//!
//! ```
//! use greenweave::{Coroutine, CoroutineResult};
//!
//! let mut counter = Coroutine::new(|yielder, start: u32| {
//!     let mut n = start;
//!     loop {
//!         let step = yielder.suspend(n); // hands `n` to resume, waits for the next input
//!         if step == 0 {
//!             return n;
//!         }
//!         n += step;
//!     }
//! });
//! assert_eq!(counter.resume(10), CoroutineResult::Yield(10));
//! assert_eq!(counter.resume(5), CoroutineResult::Yield(15));
//! assert_eq!(counter.resume(0), CoroutineResult::Return(15));
//! ```
//!
//! # Layers
//!
//! `arch` (the assembly switch, one file per architecture) is used by `coroutine`, which runs
//! closures on a `stack`; `overflow` turns a fault in a guard page into a report. See
//! `ARCHITECTURE.md` in the repository for the data flow of a switch and where each invariant
//! is kept.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// Built with AddressSanitizer (nightly only), the fiber root opts out of instrumentation.
#![cfg_attr(greenweave_asan, feature(sanitize))]

#[cfg(not(target_os = "linux"))]
compile_error!("greenweave supports Linux only");

mod arch;
mod coroutine;
mod fiber;
pub mod greenlet;
#[cfg(feature = "hooks")]
pub mod hooks;
pub mod io;
pub mod net;
pub mod os;
mod overflow;
pub mod runtime;
mod stack;
pub mod sync;
mod sys;
#[cfg(test)]
mod test_support;
pub mod thread;
pub mod time;

#[doc(hidden)]
pub mod bench_support;

pub use coroutine::{Coroutine, CoroutineResult, Yielder};
pub use runtime::offload::unblock;
pub use runtime::{Runtime, run};
pub use stack::Stack;
pub use thread::spawn;

/// The README's usage example, compiled and run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
