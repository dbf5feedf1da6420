//! An fd registered with the runtime's reactor, and the loop every green I/O call runs:
//! try the operation; on `WouldBlock`, forget the cached readiness and park until the next
//! edge (or the deadline); retry `EINTR`. Also the accept loop's variant of it, which pauses
//! after a failure for lack of resources (see [`Source::do_accept`]).
//!
//! An I/O object can outlive the runtime it was registered with (returned from `run`) and be
//! used in a later one on the same OS thread. The old epoll is gone with its runtime, so a
//! park would wait for events that can never come: before it parks, a source whose
//! registration belongs to another reactor registers its fd with the running one, with fresh
//! (optimistic) readiness, and the operation is simply tried again.

use std::cell::{Cell, RefCell};
use std::cmp;
use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::runtime::budget;
use crate::runtime::reactor::{Interest, Registration, ScheduledIo};
use crate::runtime::scheduler::{self, with_scheduler};
use crate::runtime::task::{Wait, Wake};
use crate::sys::socket::set_nonblocking;

/// A registered, non-blocking fd.
pub(crate) struct Source {
    fd: RawFd,
    /// With the reactor of the runtime that last parked on this fd (or created it). Replaced
    /// only in `registered_io`; no borrow of it is held across an operation or a park.
    registration: RefCell<Registration>,
}

impl Source {
    /// Puts `fd` in non-blocking mode and registers it with this thread's runtime.
    ///
    /// # Panics
    /// Outside a runtime, naming `what`.
    pub(crate) fn new(what: &str, fd: RawFd) -> io::Result<Source> {
        set_nonblocking(fd)?;
        let registration = with_scheduler(what, |scheduler| scheduler.reactor.register(fd))?;
        Ok(Source {
            fd,
            registration: RefCell::new(registration),
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    /// The fd's readiness and waiters in the running runtime's reactor: registers the fd there
    /// first if its registration belongs to a runtime that has ended (see the module doc).
    ///
    /// # Errors
    /// If that registration fails (epoll's limits), saying the runtime changed.
    ///
    /// Outside any runtime, the registration as it is: a wait that is already over needs no
    /// runtime, and a park panics saying one is needed.
    pub(crate) fn registered_io(&self, what: &str) -> io::Result<Rc<ScheduledIo>> {
        if !scheduler::in_runtime() {
            return Ok(self.registration.borrow().io.clone());
        }
        with_scheduler(what, |scheduler| {
            let mut registration = self.registration.borrow_mut();
            if !registration.is_with(&scheduler.reactor) {
                // Dropping the old registration marks its readiness closed; its reactor is
                // gone, so there is no epoll to remove the fd from.
                *registration = scheduler.reactor.register(self.fd).map_err(|error| {
                    io::Error::new(
                        error.kind(),
                        format!(
                            "{what}: fd {} was registered with a greenweave runtime that has \
                             ended, and registering it with the running one failed: {error}",
                            self.fd
                        ),
                    )
                })?;
            }
            Ok(registration.io.clone())
        })
    }

    /// Whether the cached readiness (of whichever runtime registered the fd last) says
    /// `interest`: the operation is worth trying without waiting.
    #[inline]
    fn is_ready(&self, interest: Interest) -> bool {
        self.registration.borrow().io.is_ready(interest)
    }

    /// Runs `operation` until it completes, parking this green thread while the fd is not
    /// ready in `interest`'s direction. `timeout` bounds the whole call.
    ///
    /// Spends a unit of the green thread's budget first (`runtime::budget`), so that a loop of
    /// calls that never park (a peer that always keeps up, an accept that keeps failing) lets
    /// the others run every `budget::BUDGET` calls.
    pub(crate) fn do_io<R>(
        &self,
        what: &str,
        interest: Interest,
        timeout: Option<Duration>,
        mut operation: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        budget::spend(what);
        let deadline = timeout.and_then(|timeout| Instant::now().checked_add(timeout));
        loop {
            if self.is_ready(interest) {
                match operation() {
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        self.registration.borrow().io.clear_readiness(interest)
                    }
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                    result => return result,
                }
            }
            // The operation will be retried anyway, so trust the edge: no poll(2) check.
            self.park_until(what, interest, deadline, Verify::No)?;
        }
    }

    /// `do_io` for `accept(2)` on a listener. When the kernel refuses for lack of resources
    /// (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`), this green thread parks for a pause (`backoff`:
    /// 1 ms, doubling with each such failure in a row up to 64 ms) before the error is
    /// returned, so that an accept loop which reports errors and goes on, as std's docs show,
    /// lets the other green threads run (and free fds) instead of spinning, and is a
    /// cancellation point and bounded by a `time::timeout`.
    ///
    /// The cached readiness is kept: such a failure does not consume the pending connection,
    /// and with edge-triggered epoll no new edge comes for connections already queued, so
    /// forgetting it would leave them unserved until another client connects. The call after
    /// the pause tries `accept(2)` again, which either succeeds or (nothing queued) clears the
    /// cache and parks as usual.
    pub(crate) fn do_accept<R>(
        &self,
        what: &str,
        backoff: &AcceptBackoff,
        operation: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        match self.do_io(what, Interest::Readable, None, operation) {
            Ok(accepted) => {
                backoff.reset();
                Ok(accepted)
            }
            Err(error) if is_out_of_resources(&error) => {
                let deadline = Instant::now().checked_add(backoff.next_pause());
                // Parked only for the pause: a cancellation or an expired `timeout` unwinds
                // out of `park`; a spurious wake-up just ends the pause early.
                scheduler::park(what, Wait::Sleep, deadline, None, |_, _| {});
                Err(error)
            }
            Err(error) => Err(error),
        }
    }

    /// Parks until the fd is ready in `interest`'s direction.
    ///
    /// The cached readiness is optimistic (a new registration, or one woken by an edge,
    /// counts as ready so that the operation is simply tried), which is right for `do_io` but
    /// not for an explicit wait: so when the cache says ready, the kernel is asked with a
    /// zero-timeout `poll(2)` before returning, and a "no" clears the cache and parks.
    pub(crate) fn wait_until(
        &self,
        what: &str,
        interest: Interest,
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        self.park_until(what, interest, deadline, Verify::Yes)
    }

    fn park_until(
        &self,
        what: &str,
        interest: Interest,
        deadline: Option<Instant>,
        verify: Verify,
    ) -> io::Result<()> {
        loop {
            let io = self.registered_io(what)?;
            if io.is_closed() {
                return Err(closed(what));
            }
            if io.is_ready(interest) {
                if verify == Verify::No
                    || crate::sys::is_ready_now(io.fd, interest == Interest::Writable)?
                {
                    return Ok(());
                }
                io.clear_readiness(interest);
            }
            let wait = Wait::Io {
                fd: io.fd,
                interest,
            };
            match scheduler::park(what, wait, deadline, Some(io), |_, _| {}) {
                Wake::Notified => continue,
                Wake::TimedOut => {
                    // While unwinding, `park` refuses to wait and times out at once: say so.
                    let failed = if std::thread::panicking() {
                        "could not wait (the green thread is unwinding, and a green thread does \
                         not switch while it unwinds)"
                    } else {
                        "timed out waiting"
                    };
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{what} {failed} for fd {} to be {interest}", self.fd),
                    ));
                }
                // `park` raises a cancellation itself, as an unwind; it never returns it.
                Wake::Cancelled => unreachable!("park returned Wake::Cancelled"),
            }
        }
    }
}

/// The pause of [`Source::do_accept`] after a failure for lack of resources: a listener's
/// count of such failures in a row, as the next pause.
pub(crate) struct AcceptBackoff {
    pause: Cell<Duration>,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(1);
    const MAX: Duration = Duration::from_millis(64);

    pub(crate) fn new() -> AcceptBackoff {
        AcceptBackoff {
            pause: Cell::new(AcceptBackoff::FIRST),
        }
    }

    /// The pause to take now; doubles the one after it.
    fn next_pause(&self) -> Duration {
        let pause = self.pause.get();
        self.pause.set(cmp::min(pause * 2, AcceptBackoff::MAX));
        pause
    }

    fn reset(&self) {
        self.pause.set(AcceptBackoff::FIRST);
    }
}

/// Whether `accept(2)` failed for lack of fds or memory, which no readiness event will
/// announce the end of.
fn is_out_of_resources(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Whether a wait confirms cached readiness with the kernel before returning.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verify {
    /// Explicit waits (`readable()`, a connect in progress): the cache may be optimistic.
    Yes,
    /// `do_io`: the operation itself is the check, and it is retried on `WouldBlock`.
    No,
}

fn closed(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        format!("{what}: the fd was closed (deregistered) while this green thread waited on it"),
    )
}
