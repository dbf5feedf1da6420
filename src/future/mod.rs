//! Futures from green threads: [`block_on`], and (in `thread`) `JoinHandle` and
//! `RemoteJoinHandle` as futures.
//!
//! Owns: the poll-park loop of `block_on` (`block_on.rs`) and the wakers it hands out
//! (`waker.rs`).
//!
//! May not: run an executor of its own: a future is polled by the green thread that waits for
//! it, and a wake-up goes through the runtime's own paths (the scheduler on the same OS thread,
//! the runtime's remote queue from any other).

mod block_on;
mod waker;

pub use block_on::block_on;
