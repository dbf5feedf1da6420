//! Stackful coroutines and green threads for Rust on Linux (x86_64 and aarch64), with
//! hand-written context switches.
//!
//! Every coroutine runs on its own mmap'd [`Stack`] with a guard page below it; running off the
//! end is reported by name and aborts, as std does for OS threads. One fiber core serves three
//! ways of using it, and they compose: a generator or a greenlet running inside a green thread
//! parks that green thread when it waits.
//!
//! # Where to start
//!
//! | you want | start with |
//! |---|---|
//! | blocking-looking code that never blocks the OS thread (the gevent model) | [`run`] + [`spawn`], the std-shaped [`thread`], [`net`], [`sync`], [`time`] |
//! | a generator: `resume` it, it `suspend`s values back | [`Coroutine`] |
//! | explicit switching between coroutines (Python's greenlet) | [`greenlet`] |
//! | every CPU: one scheduler per OS thread (a worker), a listener per worker | [`Runtime::builder`]`().`[`workers`](runtime::Builder::workers)`(n)`, [`Runtime::run_on_every_worker`], [`thread::spawn_on`], [`sync::shared`] between workers |
//! | std and C code nobody rewrote (std's sockets, sleeps, locks; blocking client crates) to park only its green thread | the cargo feature `hooks` (the `hooks` module); [`unblock`] for what it does not cover |
//! | what every green thread is waiting for, from inside or by a signal | [`runtime::dump`], [`runtime::Builder::dump_on_signal`]; a run that never parks: [`runtime::Builder::stall_report`] |
//! | counts to log or export (runs, parks, I/O, the ready queue, scheduling delay) | [`runtime::metrics`] |
//! | how much stack each green thread uses, and idle ones that hand back what a deep call touched | [`runtime::GreenThread::stack_peak`] in a dump, [`runtime::Builder::stack_release`] (on by default: 1 s), [`runtime::RuntimeMetrics::stack_bytes_released`] |
//! | async crates (tokio-postgres, sqlx, reqwest, redis's async client) from green threads | [`block_on`], with the cargo feature `tokio` (a tokio runtime per worker, driven by its scheduler); async code awaits a green thread's [`thread::JoinHandle`], and a tokio program spawns green threads with [`Runtime::start`] |
//!
//! ## Green threads
//!
//! [`run`] starts a scheduler on the calling OS thread and runs its closure as the first green
//! thread; [`spawn`] starts more. A read, accept, sleep, channel receive or lock that would
//! wait parks only the green thread that called it; epoll or a timer wakes it.
//!
//! ```
//! use greenweave::net::{TcpListener, TcpStream};
//! use std::io::{Read, Write};
//!
//! greenweave::run(|| {
//!     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
//!     let address = listener.local_addr().unwrap();
//!     let server = greenweave::spawn(move || {
//!         let (mut stream, _) = listener.accept().unwrap(); // parks until the client connects
//!         let mut request = [0; 4];
//!         stream.read_exact(&mut request).unwrap();
//!         stream.write_all(b"pong").unwrap();
//!     });
//!     let mut client = TcpStream::connect(address).unwrap();
//!     client.write_all(b"ping").unwrap();
//!     let mut reply = String::new();
//!     client.read_to_string(&mut reply).unwrap();
//!     assert_eq!(reply, "pong");
//!     server.join().unwrap();
//! });
//! ```
//!
//! ## Generators
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
//! ## Greenlets
//!
//! ```
//! use greenweave::greenlet::{self, Greenlet};
//!
//! let child = Greenlet::new(|first: Option<u32>| {
//!     let main = greenlet::current::<Option<u32>>().parent().unwrap();
//!     let second = main.switch(first.map(|n| n * 2)); // to main, and back
//!     second.map(|n| n + 1) // returning goes to the parent
//! });
//! assert_eq!(child.switch(Some(21)), Some(42));
//! assert_eq!(child.switch(Some(1)), Some(2));
//! ```
//!
//! # What blocks every green thread
//!
//! All green threads of a worker share one OS thread (a runtime has one worker unless
//! [`runtime::Builder::workers`] says more). A call that blocks that OS thread stops every one
//! of them until it returns:
//!
//! - **std's blocking I/O**: `std::net`, `std::os::unix::net`, `std::fs`, `std::io::stdin`, and
//!   every crate built on them (HTTP clients, database drivers). Use [`net`] and
//!   [`os::unix::net`] instead, [`unblock`] for work that must block, or the `hooks` feature.
//! - **std's sleeps and waits**: `std::thread::sleep`, a `std::sync::Mutex` that a parked
//!   green thread holds, `std::sync::mpsc` receives, `std::thread::park`,
//!   `std::thread::JoinHandle::join`. Use [`thread::sleep`], [`sync`]'s locks and channels,
//!   and [`thread::JoinHandle`], or the `hooks` feature.
//! - **long computations** without a park: a green thread runs until it waits; call
//!   [`thread::yield_now`] in long loops.
//!
//! With the cargo feature `hooks` (off by default), std's sockets and sleeps, std's locks,
//! condvars, `Once`, channels and `thread::park` (their futex waits), and the crates and C
//! libraries built on libc's calls, park only their green thread instead: see the `hooks`
//! module and the README's "Making blocking code green". Still blocking: disk writes, `open`
//! and `stat`, and computations. A std channel's send never wakes a receiver on its own OS
//! thread, so between two green threads of one worker use [`sync::mpsc`] (the `hooks` module's
//! "Limits" lists this and the rest).
//!
//! std's `thread_local!` is per OS thread, so it is shared by every green thread of a runtime.
//!
//! # Layers
//!
//! `arch` (the assembly switch, one file per architecture) is used by `coroutine`, which runs
//! closures on a `stack`; `overflow` turns a fault in a guard page into a report; `runtime`
//! schedules green threads on coroutines. See `ARCHITECTURE.md` in the repository for the data
//! flow of a switch and of a park, and where each invariant is kept.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// Built with AddressSanitizer (nightly only), the fiber root opts out of instrumentation.
#![cfg_attr(greenweave_asan, feature(sanitize))]

#[cfg(not(target_os = "linux"))]
compile_error!("greenweave supports Linux only");

mod arch;
mod coroutine;
mod fiber;
mod future;
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
pub use future::block_on;
pub use runtime::offload::unblock;
pub use runtime::{Runtime, run};
pub use stack::Stack;
pub use thread::spawn;

/// The README's usage example, compiled and run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
