//! The I/O driver: one epoll instance per runtime and the cached readiness of every fd.
//!
//! Owns: [`ScheduledIo`] (per fd: readiness bits cached from edge-triggered events, a list of
//! parked readers and one of parked writers, a closed flag), the slab that maps epoll tokens to
//! them, and [`Registration`], the handle an I/O object keeps. Each fd is registered once, for
//! both directions, edge-triggered: waiting costs no `epoll_ctl` in the steady state.
//!
//! Besides "readable" and "writable", the cache keeps what the last edge said about the read
//! side: whether it is closed (`EPOLLRDHUP`, `EPOLLHUP`, `EPOLLERR`) and whether urgent data is
//! pending (`EPOLLPRI`). Those decide whether a stream read that returned fewer bytes than it
//! asked for may end the cached readability ([`ScheduledIo::note_short_read`]).
//!
//! May not: run tasks. Waking is done through the callback the scheduler passes to `poll`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::rc::{Rc, Weak};
use std::time::Duration;

use crate::sys::epoll::{Epoll, READ_CLOSED_EVENTS, READ_EVENTS, URGENT_EVENTS, WRITE_EVENTS};

use super::task::Task;

/// A direction of readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Interest {
    Readable,
    Writable,
}

impl Interest {
    fn bit(self) -> u8 {
        match self {
            Interest::Readable => 1,
            Interest::Writable => 2,
        }
    }
}

impl fmt::Display for Interest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Interest::Readable => "readable",
            Interest::Writable => "writable",
        })
    }
}

/// Readiness bit: the last edge said the read side is closed (the peer shut its write side, or
/// the connection is gone): the rest of the stream, then its end, can be read without waiting.
const READ_CLOSED: u8 = 4;

/// Readiness bit: the last edge said urgent (out-of-band) data is pending: a TCP read stops
/// short at the urgent mark with bytes still queued behind it.
const URGENT: u8 = 8;

/// The token of the runtime's own eventfd (remote wake-ups).
pub(crate) const REMOTE_TOKEN: u64 = u64::MAX;

/// Readiness and waiters of one registered fd.
pub(crate) struct ScheduledIo {
    pub(crate) fd: RawFd,
    token: u64,
    /// Bits of [`Interest`] seen ready since the last `WouldBlock` in that direction (or, for
    /// reads, the last short read: `note_short_read`), and `READ_CLOSED` and `URGENT` as the
    /// last edge reported them.
    readiness: Cell<u8>,
    readers: RefCell<Vec<(Rc<Task>, u64)>>,
    writers: RefCell<Vec<(Rc<Task>, u64)>>,
    closed: Cell<bool>,
}

impl ScheduledIo {
    pub(crate) fn is_ready(&self, interest: Interest) -> bool {
        self.readiness.get() & interest.bit() != 0
    }

    /// Forgets readiness in one direction after the fd said `WouldBlock`: the next edge sets
    /// it again.
    pub(crate) fn clear_readiness(&self, interest: Interest) {
        self.readiness.set(self.readiness.get() & !interest.bit());
    }

    /// Forgets readability after a stream read returned fewer bytes than it asked for, as a
    /// `WouldBlock` would, so that the next read parks instead of asking the kernel only to
    /// hear `EAGAIN`. Only for fds where such a read proves the receive queue was empty when it
    /// returned (TCP copies all that is queued, up to the buffer, except past an urgent mark).
    ///
    /// Kept when the last edge said the read side is closed or urgent data is pending: then
    /// bytes (or the end of the stream, or an error) may still be waiting, and no edge will
    /// announce them. The edge of bytes that arrive after the read is not lost: it is queued in
    /// the kernel until the next `poll`, which cannot run before the caller parks or yields, so
    /// it always comes after this.
    pub(crate) fn note_short_read(&self) {
        let readiness = self.readiness.get();
        if readiness & (READ_CLOSED | URGENT) == 0 {
            self.readiness.set(readiness & !Interest::Readable.bit());
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// Parks `task` (in park number `park`) until the fd is ready in `interest`'s direction.
    pub(crate) fn add_waiter(&self, interest: Interest, task: Rc<Task>, park: u64) {
        let waiters = match interest {
            Interest::Readable => &self.readers,
            Interest::Writable => &self.writers,
        };
        let mut waiters = waiters.borrow_mut();
        // Drop waiters whose park ended some other way (a timeout), so the list stays short.
        waiters.retain(|(task, park)| task.is_in_park(*park));
        waiters.push((task, park));
    }

    /// Takes the waiters of the directions in `bits` (all, if the fd closed).
    fn take_waiters(&self, bits: u8) -> Vec<(Rc<Task>, u64)> {
        let mut woken = Vec::new();
        if bits & Interest::Readable.bit() != 0 {
            woken.append(&mut self.readers.borrow_mut());
        }
        if bits & Interest::Writable.bit() != 0 {
            woken.append(&mut self.writers.borrow_mut());
        }
        woken
    }

    /// Hands the waiters of the directions in `bits` to `wake`, emptying their lists in place:
    /// the lists keep their capacity, so nothing is allocated on this path, which every event
    /// takes. `wake` only collects (the scheduler's `poll` makes the tasks runnable after the
    /// reactor's), so the list's borrow held across it is never met again.
    fn wake_waiters(&self, bits: u8, wake: &mut impl FnMut(Rc<Task>, u64)) {
        if bits & Interest::Readable.bit() != 0 {
            for (task, park) in self.readers.borrow_mut().drain(..) {
                wake(task, park);
            }
        }
        if bits & Interest::Writable.bit() != 0 {
            for (task, park) in self.writers.borrow_mut().drain(..) {
                wake(task, park);
            }
        }
    }
}

/// Keeps an fd registered with the runtime's reactor; dropping it deregisters the fd and wakes
/// any green thread still waiting on it (which then sees an error).
pub(crate) struct Registration {
    pub(crate) io: Rc<ScheduledIo>,
    reactor: Weak<Reactor>,
}

impl Registration {
    /// Whether this is a registration with `reactor` (and not with the reactor of a runtime
    /// that has ended). The weak reference keeps the old reactor's allocation, so its address
    /// cannot be reused by a new reactor while this lives.
    pub(crate) fn is_with(&self, reactor: &Rc<Reactor>) -> bool {
        std::ptr::eq(self.reactor.as_ptr(), Rc::as_ptr(reactor))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.io.closed.set(true);
        if let Some(reactor) = self.reactor.upgrade() {
            reactor.deregister(&self.io);
        }
    }
}

pub(crate) struct Reactor {
    epoll: Epoll,
    /// Token -> registration; a token is `index | generation << 32`, so a stale event for a
    /// reused index is recognised and dropped.
    slots: RefCell<Slab>,
    events: RefCell<Vec<libc::epoll_event>>,
    /// Tasks woken by `deregister` (their fd closed), to be handed to the scheduler at the
    /// next poll.
    orphaned: RefCell<Vec<(Rc<Task>, u64)>>,
    /// Registrations of fds that no greenweave type owns (the `hooks` feature waits on the
    /// program's own sockets), by fd, with the fd number's generation when it was registered;
    /// each lives until the fd is closed through `close`, the number is found of another
    /// generation, or the runtime ends.
    borrowed: RefCell<HashMap<RawFd, (Registration, u32)>>,
}

#[derive(Default)]
struct Slab {
    entries: Vec<(u32, Option<Weak<ScheduledIo>>)>,
    free: Vec<u32>,
}

impl Reactor {
    pub(crate) fn new() -> io::Result<Reactor> {
        Ok(Reactor {
            epoll: Epoll::new()?,
            slots: RefCell::new(Slab::default()),
            events: RefCell::new(vec![libc::epoll_event { events: 0, u64: 0 }; 1024]),
            orphaned: RefCell::new(Vec::new()),
            borrowed: RefCell::new(HashMap::new()),
        })
    }

    /// Registers `fd` (already non-blocking) for both directions, edge-triggered.
    pub(crate) fn register(self: &Rc<Self>, fd: RawFd) -> io::Result<Registration> {
        // An fd the hooks registered on the program's behalf now gets an owner (a std socket
        // turned into a green one with `from_std`): that registration gives way, or epoll
        // would refuse this one (EEXIST).
        #[cfg(feature = "hooks")]
        self.forget_borrowed(fd);
        let mut slab = self.slots.borrow_mut();
        let index = match slab.free.pop() {
            Some(index) => index,
            None => {
                slab.entries.push((0, None));
                (slab.entries.len() - 1) as u32
            }
        };
        let generation = slab.entries[index as usize].0.wrapping_add(1);
        let token = u64::from(index) | (u64::from(generation) << 32);
        let io = Rc::new(ScheduledIo {
            fd,
            token,
            // Optimistic: the first operation is tried before anything is waited for.
            readiness: Cell::new(Interest::Readable.bit() | Interest::Writable.bit()),
            readers: RefCell::new(Vec::new()),
            writers: RefCell::new(Vec::new()),
            closed: Cell::new(false),
        });
        if let Err(error) = self.epoll.add(fd, token) {
            slab.free.push(index);
            return Err(error);
        }
        slab.entries[index as usize] = (generation, Some(Rc::downgrade(&io)));
        Ok(Registration {
            io,
            reactor: Rc::downgrade(self),
        })
    }

    /// The readiness of `fd`, an fd the program owns (the hooks layer parks on it), registering
    /// it the first time. The registration is kept until [`forget_borrowed`](Self::forget_borrowed)
    /// (the program closes the fd) or the runtime ends.
    ///
    /// An fd a greenweave type has registered itself (epoll says `EEXIST`) is not registered
    /// again: its owner's readiness is returned.
    ///
    /// # Errors
    /// Those of `epoll_ctl`: `EPERM` for an fd epoll cannot watch (a regular file).
    ///
    /// `generation` names the file the number stands for now (`sys::fd_state::generation`): a
    /// registration of another generation is of a file closed where this reactor could not see
    /// it (on another OS thread), which epoll has dropped; it gives way to a new one.
    #[cfg_attr(not(feature = "hooks"), allow(dead_code))]
    pub(crate) fn register_borrowed(
        self: &Rc<Self>,
        fd: RawFd,
        generation: u32,
    ) -> io::Result<Rc<ScheduledIo>> {
        if let Some((registration, registered)) = self.borrowed.borrow().get(&fd)
            && *registered == generation
        {
            return Ok(registration.io.clone());
        }
        // `register` drops a stale registration of this number first.
        let registration = match self.register(fd) {
            Ok(registration) => registration,
            // A greenweave type registered the fd itself (a green socket's fd handed to
            // `poll`): wait on its readiness, which its events keep up to date.
            Err(error) if error.raw_os_error() == Some(libc::EEXIST) => {
                return self.owned_io(fd).ok_or(error);
            }
            Err(error) => return Err(error),
        };
        let io = registration.io.clone();
        self.borrowed
            .borrow_mut()
            .insert(fd, (registration, generation));
        Ok(io)
    }

    /// The readiness of `fd` as the greenweave type that registered it keeps it, if one did.
    /// A scan of every registration: only for a wait on an fd its owner registered, which
    /// epoll refused to register again.
    #[cfg_attr(not(feature = "hooks"), allow(dead_code))]
    fn owned_io(&self, fd: RawFd) -> Option<Rc<ScheduledIo>> {
        self.slots
            .borrow()
            .entries
            .iter()
            .filter_map(|(_, io)| io.as_ref()?.upgrade())
            .find(|io| io.fd == fd && !io.is_closed())
    }

    /// Drops the registration of a borrowed fd that is about to be closed: the fd leaves epoll
    /// and the green threads waiting on it wake to find it closed.
    #[cfg_attr(not(feature = "hooks"), allow(dead_code))]
    pub(crate) fn forget_borrowed(&self, fd: RawFd) {
        let mut borrowed = self.borrowed.borrow_mut();
        // Most runtimes borrow no fd: then there is nothing to hash for.
        if borrowed.is_empty() {
            return;
        }
        // Taken out first: dropping it deregisters, which borrows the slab.
        let registration = borrowed.remove(&fd);
        drop(borrowed);
        drop(registration);
    }

    /// Whether any fd is registered (besides the remote eventfd) or an orphaned waiter is
    /// queued: otherwise polling cannot wake anything but a remote wake-up.
    pub(crate) fn has_registrations(&self) -> bool {
        let slab = self.slots.borrow();
        slab.entries.len() > slab.free.len() || !self.orphaned.borrow().is_empty()
    }

    /// Registers the runtime's eventfd under [`REMOTE_TOKEN`].
    pub(crate) fn register_remote(&self, fd: RawFd) -> io::Result<()> {
        self.epoll.add(fd, REMOTE_TOKEN)
    }

    fn deregister(&self, io: &ScheduledIo) {
        // The fd may already be closed by its owner; nothing is left to remove then.
        let _ = self.epoll.delete(io.fd);
        let index = (io.token & u64::from(u32::MAX)) as u32;
        let mut slab = self.slots.borrow_mut();
        if let Some(entry) = slab.entries.get_mut(index as usize)
            && u64::from(entry.0) == io.token >> 32
        {
            entry.1 = None;
            slab.free.push(index);
        }
        drop(slab);
        let woken = io.take_waiters(Interest::Readable.bit() | Interest::Writable.bit());
        self.orphaned.borrow_mut().extend(woken);
    }

    /// Waits for events up to `timeout` (forever if `None`), caches readiness, and calls `wake`
    /// for every parked waiter whose direction became ready. Returns whether the remote eventfd
    /// fired, and how many events for registered fds came (for the metrics).
    pub(crate) fn poll(
        &self,
        timeout: Option<Duration>,
        mut wake: impl FnMut(Rc<Task>, u64),
    ) -> io::Result<(bool, usize)> {
        let mut orphans_woken = false;
        for (task, park) in self.orphaned.borrow_mut().drain(..) {
            wake(task, park);
            orphans_woken = true;
        }
        // A green thread woken here is runnable as soon as this returns: do not wait for an
        // event first (none may ever come: its fd was the one that would have had them).
        let timeout = if orphans_woken {
            Some(Duration::ZERO)
        } else {
            timeout
        };
        let mut events = self.events.borrow_mut();
        let count = self.epoll.wait(&mut events, timeout)?;
        let mut remote = false;
        let mut ready = 0;
        for event in &events[..count] {
            let token = event.u64;
            if token == REMOTE_TOKEN {
                remote = true;
                continue;
            }
            let io = {
                let slab = self.slots.borrow();
                let index = (token & u64::from(u32::MAX)) as usize;
                match slab.entries.get(index) {
                    Some((generation, Some(io))) if u64::from(*generation) == token >> 32 => {
                        io.upgrade()
                    }
                    _ => None,
                }
            };
            let Some(io) = io else { continue };
            ready += 1;
            let mut bits = 0;
            if event.events & READ_EVENTS != 0 {
                bits |= Interest::Readable.bit();
            }
            if event.events & WRITE_EVENTS != 0 {
                bits |= Interest::Writable.bit();
            }
            // The event's bits are the fd's state when `epoll_wait` returned, not only what
            // changed: the read side's two flags are replaced, not accumulated (a socket
            // registered before it connects reports `EPOLLHUP` until it does).
            let mut read_side = 0;
            if event.events & READ_CLOSED_EVENTS != 0 {
                read_side |= READ_CLOSED;
            }
            if event.events & URGENT_EVENTS != 0 {
                read_side |= URGENT;
            }
            io.readiness
                .set((io.readiness.get() & !(READ_CLOSED | URGENT)) | bits | read_side);
            io.wake_waiters(bits, &mut wake);
        }
        Ok((remote, ready))
    }
}
