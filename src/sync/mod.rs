//! Green synchronisation: channels and locks whose waits park the green thread, not the OS
//! thread.
//!
//! Everything here lives on one runtime (one OS thread): handles are `!Send`, and no atomics
//! are needed. Waiters queue in FIFO order. To talk to other OS threads, use
//! [`mpsc::Sender::remote`], a `Send` handle whose sends wake the receiving green thread
//! through the runtime's eventfd, or a [`shared`] channel, both of whose ends are `Send`.

mod barrier;
mod condvar;
mod event;
mod grant_queue;
mod group;
pub mod mpsc;
mod mutex;
pub mod oneshot;
mod rwlock;
pub mod select;
mod semaphore;
pub mod shared;
pub mod timer_channel;
mod wait_group;
pub(crate) mod wait_queue;

pub use barrier::{Barrier, BarrierWaitResult};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use event::Event;
pub use group::{Group, Pool, join_all};
pub use mutex::{MappedMutexGuard, Mutex, MutexGuard};
pub use rwlock::{
    MappedRwLockReadGuard, MappedRwLockWriteGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
pub use semaphore::{Semaphore, SemaphorePermit};
pub use wait_group::WaitGroup;
