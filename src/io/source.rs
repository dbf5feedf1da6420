//! An fd registered with the runtime's reactor, and the loop every green I/O call runs:
//! try the operation; on `WouldBlock`, forget the cached readiness and park until the next
//! edge (or the deadline); retry `EINTR`. Also the read's variant of it, where a TCP read that
//! comes up short forgets the cached readiness too ([`Source::do_read`]), and the accept loop's,
//! which pauses after a failure for lack of resources (see [`Source::do_accept`]).
//!
//! Two of std's behaviours live here too, so every green socket type gets them alike. A read
//! or write that runs past its timeout fails with `ErrorKind::WouldBlock`, as std's does on
//! Linux (the kernel's `EAGAIN` for `SO_RCVTIMEO`/`SO_SNDTIMEO`); an explicit wait's own
//! deadline (`connect_timeout`) is `TimedOut`, as std's. And a source the program made
//! non-blocking ([`Source::set_nonblocking`]) returns `WouldBlock` where it would park: the
//! program's choice, kept here, while the fd itself is always `O_NONBLOCK` for the runtime.
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
    /// The program's `set_nonblocking(true)`: an operation that would park returns
    /// `WouldBlock` instead. Read only on that path. The fd is non-blocking either way.
    nonblocking: Cell<bool>,
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
            nonblocking: Cell::new(false),
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    /// The program's choice, as std's `set_nonblocking`: when `true`, [`do_io`](Self::do_io)
    /// and [`do_accept`](Self::do_accept) try the operation once and return its `WouldBlock`
    /// instead of parking. Changes nothing in the kernel: the fd stays `O_NONBLOCK` (which the
    /// runtime needs, and which the hooks' `fd_state` has recorded), so no other handle of the
    /// same file, and no hooked libc call on it, sees a difference.
    pub(crate) fn set_nonblocking(&self, nonblocking: bool) {
        self.nonblocking.set(nonblocking);
    }

    pub(crate) fn is_nonblocking(&self) -> bool {
        self.nonblocking.get()
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
    /// ready in `interest`'s direction. `timeout` bounds the whole call: past it, the call
    /// fails with `WouldBlock`, saying which timeout passed (std on Linux reports the
    /// kernel's `EAGAIN` there). A non-blocking source returns the operation's `WouldBlock`
    /// instead of parking.
    ///
    /// Spends a unit of the green thread's budget first (`runtime::budget`), so that a loop of
    /// calls that never park (a peer that always keeps up, an accept that keeps failing) lets
    /// the others run every `budget::BUDGET` calls; a non-blocking source, like a `try_` call,
    /// never spends.
    pub(crate) fn do_io<R>(
        &self,
        what: &str,
        interest: Interest,
        timeout: Option<Duration>,
        operation: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        // A source the program made non-blocking is polled by the program, like a `try_` call:
        // it never spends, so it never switches.
        if !self.nonblocking.get() {
            budget::spend(what);
        }
        self.do_io_unbudgeted(what, interest, timeout, operation)
    }

    /// `do_io` without spending budget: for a caller that has spent (or chosen not to) itself.
    #[inline]
    fn do_io_unbudgeted<R>(
        &self,
        what: &str,
        interest: Interest,
        timeout: Option<Duration>,
        mut operation: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        let deadline = timeout.and_then(|timeout| Instant::now().checked_add(timeout));
        loop {
            // Non-blocking: always ask the kernel, as std does (the cache may be another
            // runtime's, or no runtime may be running at all).
            if self.is_ready(interest) || self.nonblocking.get() {
                match operation() {
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                        self.registration.borrow().io.clear_readiness(interest);
                        if self.nonblocking.get() {
                            return Err(error);
                        }
                    }
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                    result => return result,
                }
            }
            // The operation will be retried anyway, so trust the edge: no poll(2) check.
            if !self.park_until(what, interest, deadline, Verify::No)? {
                return Err(timeout_passed(what, interest, timeout, self.fd));
            }
        }
    }

    /// `do_io` for a read of at most `capacity` bytes (the sum of the buffers), with what a
    /// short read means for this kind of fd.
    ///
    /// With [`ShortRead::Drains`], a read that returns more than 0 but fewer than `capacity`
    /// bytes ends the cached readability (`ScheduledIo::note_short_read`): the receive queue was
    /// empty, so the next read parks at once instead of asking the kernel only to hear
    /// `EAGAIN`, which saves a system call on every request of a request/response protocol.
    /// Data that arrives after the read wakes the park: its edge is delivered at the next
    /// `poll`, which runs only after this green thread parks.
    ///
    /// Only while a runtime runs: outside any, a read the cache calls not ready would panic
    /// for want of a runtime to park in, where the kernel may well have the bytes.
    #[inline]
    pub(crate) fn do_read(
        &self,
        what: &str,
        timeout: Option<Duration>,
        short_read: ShortRead,
        capacity: usize,
        operation: impl FnMut() -> io::Result<usize>,
    ) -> io::Result<usize> {
        let read = self.do_io(what, Interest::Readable, timeout, operation)?;
        if short_read == ShortRead::Drains && read > 0 && read < capacity && scheduler::in_runtime()
        {
            self.registration.borrow().io.note_short_read();
        }
        Ok(read)
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
    ///
    /// **An accept loop runs until `EAGAIN`.** Only the first accept of a turn (a run of the
    /// green thread between two switches) spends a unit of the budget; one that follows a
    /// successful accept in the same turn does not, up to [`ACCEPTS_PER_TURN`] in a row, the
    /// bound after which the loop lets the others run as a spent budget does. So every
    /// connection the kernel has queued is taken in one turn, where 128 a turn (the budget)
    /// left a burst of clients in the listen queue for as many rounds of the ready queue as it
    /// held 128s: with 10,000 connections on one worker each round took a quarter to half a
    /// second, and the last connections waited seconds for their first reply (BENCHMARKS.md,
    /// "HTTP at 10,000 connections on one worker"). A failed accept ends the run, so a loop of
    /// failures spends as any other call.
    ///
    /// A non-blocking source never parks, for the pause either: its caller polls, and gets the
    /// error at once; nor does it spend.
    pub(crate) fn do_accept<R>(
        &self,
        what: &str,
        state: &AcceptState,
        operation: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        if !self.nonblocking.get() {
            let run = state.run_length(scheduler::runs_completed());
            budget::spend_in_run(what, run, ACCEPTS_PER_TURN);
        }
        match self.do_io_unbudgeted(what, Interest::Readable, None, operation) {
            Ok(accepted) => {
                state.accepted(scheduler::runs_completed());
                Ok(accepted)
            }
            Err(error) if is_out_of_resources(&error) && !self.nonblocking.get() => {
                state.failed();
                let deadline = Instant::now().checked_add(state.next_pause());
                // Parked only for the pause: a cancellation or an expired `timeout` unwinds
                // out of `park`; a spurious wake-up just ends the pause early.
                scheduler::park(what, Wait::Sleep, deadline, None, |_, _| {});
                Err(error)
            }
            Err(error) => {
                state.failed();
                Err(error)
            }
        }
    }

    /// Parks until the fd is ready in `interest`'s direction.
    ///
    /// The cached readiness is optimistic (a new registration, or one woken by an edge,
    /// counts as ready so that the operation is simply tried), which is right for `do_io` but
    /// not for an explicit wait: so when the cache says ready, the kernel is asked with a
    /// zero-timeout `poll(2)` before returning, and a "no" clears the cache and parks.
    ///
    /// # Errors
    /// `TimedOut` when `deadline` passes first (std's `connect_timeout` error).
    pub(crate) fn wait_until(
        &self,
        what: &str,
        interest: Interest,
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        if self.park_until(what, interest, deadline, Verify::Yes)? {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{what} timed out waiting for fd {} to be {interest}",
                self.fd
            ),
        ))
    }

    /// Parks until the fd is ready in `interest`'s direction: `Ok(true)`; `Ok(false)` when
    /// `deadline` passes first (each caller says what that means).
    fn park_until(
        &self,
        what: &str,
        interest: Interest,
        deadline: Option<Instant>,
        verify: Verify,
    ) -> io::Result<bool> {
        loop {
            let io = self.registered_io(what)?;
            if io.is_closed() {
                return Err(closed(what));
            }
            if io.is_ready(interest) {
                if verify == Verify::No
                    || crate::sys::is_ready_now(io.fd, interest == Interest::Writable)?
                {
                    return Ok(true);
                }
                io.clear_readiness(interest);
            }
            let wait = Wait::Io {
                fd: io.fd,
                interest,
            };
            match scheduler::park(what, wait, deadline, Some(io), |_, _| {}) {
                Wake::Notified => continue,
                Wake::TimedOut if std::thread::panicking() => {
                    // While unwinding, `park` refuses to wait and times out at once: say so.
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "{what} could not wait (the green thread is unwinding, and a green \
                             thread does not switch while it unwinds) for fd {} to be {interest}",
                            self.fd
                        ),
                    ));
                }
                Wake::TimedOut => return Ok(false),
                // `park` raises a cancellation itself, as an unwind; it never returns it.
                Wake::Cancelled => unreachable!("park returned Wake::Cancelled"),
            }
        }
    }
}

/// How many connections an accept loop may take in a row in one turn before it lets the other
/// green threads run (see [`Source::do_accept`]): the longest listen queue Linux gives by
/// default (`net.core.somaxconn`, 4096 since 5.4), so a turn empties a full queue. Each accept
/// is a few microseconds (the `accept4`, registering the socket, a spawn), so a full turn holds
/// the OS thread for some milliseconds, once per burst; the connections it takes had been
/// waiting longer.
pub(crate) const ACCEPTS_PER_TURN: u32 = 4096;

/// What a listener's accepts remember between calls ([`Source::do_accept`]): the run of
/// successful accepts in the current turn, and the pause to take after a failure for lack of
/// resources.
pub(crate) struct AcceptState {
    /// The turn of the last successful accept, as the scheduler's count of completed runs
    /// (which does not change while a green thread runs, and grows at each of its switches).
    turn: Cell<u64>,
    /// Successful accepts in a row in that turn.
    run: Cell<u32>,
    /// The failures for lack of resources in a row, as the next pause.
    pause: Cell<Duration>,
}

impl AcceptState {
    const FIRST_PAUSE: Duration = Duration::from_millis(1);
    const MAX_PAUSE: Duration = Duration::from_millis(64);

    pub(crate) fn new() -> AcceptState {
        AcceptState {
            turn: Cell::new(u64::MAX),
            run: Cell::new(0),
            pause: Cell::new(AcceptState::FIRST_PAUSE),
        }
    }

    /// Successful accepts in a row so far in `turn` (0 in a new turn).
    fn run_length(&self, turn: u64) -> u32 {
        if self.turn.get() == turn {
            self.run.get()
        } else {
            0
        }
    }

    /// An accept succeeded in `turn`: the run goes on (or starts), and the pause is reset.
    fn accepted(&self, turn: u64) {
        let run = self.run_length(turn);
        self.turn.set(turn);
        self.run.set(run + 1);
        self.pause.set(AcceptState::FIRST_PAUSE);
    }

    /// An accept failed: the run ends.
    fn failed(&self) {
        self.run.set(0);
    }

    /// The pause to take now; doubles the one after it.
    fn next_pause(&self) -> Duration {
        let pause = self.pause.get();
        self.pause.set(cmp::min(pause * 2, AcceptState::MAX_PAUSE));
        pause
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

/// What a read that returns fewer bytes than it asked for says about the fd's receive queue
/// (see [`Source::do_read`]). Chosen per socket type, from what the kernel's read does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ShortRead {
    /// The queue was empty when the read returned. TCP: `recvmsg` copies every queued byte up
    /// to the buffer's end, and stops short only at an urgent mark, which the reactor knows of
    /// (`EPOLLPRI`) and then keeps the fd readable.
    Drains,
    /// Nothing: the next read asks the kernel. Datagram sockets (a datagram shorter than the
    /// buffer says nothing of the next one), Unix stream sockets (a read stops after a message
    /// that carries fds, and between messages of different credentials, with more queued),
    /// peeks (nothing was taken), and any `Read` of `io::Async`.
    ProvesNothing,
}

/// Whether a wait confirms cached readiness with the kernel before returning.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verify {
    /// Explicit waits (`readable()`, a connect in progress): the cache may be optimistic.
    Yes,
    /// `do_io`: the operation itself is the check, and it is retried on `WouldBlock`.
    No,
}

/// The error of a read or write that ran past its timeout: `WouldBlock`, as std's on Linux
/// (where the kernel returns `EAGAIN`), so code written for std's sockets recognises it.
fn timeout_passed(
    what: &str,
    interest: Interest,
    timeout: Option<Duration>,
    fd: RawFd,
) -> io::Error {
    let which = match interest {
        Interest::Readable => "read",
        Interest::Writable => "write",
    };
    let timeout = timeout.unwrap_or_default();
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!(
            "{what}: the {which} timeout ({timeout:?}) passed before fd {fd} was {interest} \
             (std reports this as WouldBlock too); set a longer one with set_{which}_timeout"
        ),
    )
}

fn closed(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        format!("{what}: the fd was closed (deregistered) while this green thread waited on it"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_accepts_is_counted_within_one_turn_and_ends_with_the_turn_or_a_failure() {
        let state = AcceptState::new();
        assert_eq!(state.run_length(7), 0, "a new listener has no run");
        for accepted in 1..=ACCEPTS_PER_TURN {
            state.accepted(7);
            assert_eq!(state.run_length(7), accepted);
        }
        // `do_accept` yields at the bound: the next turn starts a new run.
        assert_eq!(state.run_length(8), 0);
        state.accepted(8);
        assert_eq!(state.run_length(8), 1);
        state.failed();
        assert_eq!(state.run_length(8), 0, "a failure ends the run");
    }

    #[test]
    fn a_success_resets_the_pause_after_failures_for_lack_of_resources() {
        let state = AcceptState::new();
        let pauses: Vec<u64> = (0..8)
            .map(|_| state.next_pause().as_millis() as u64)
            .collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 64, 64]);
        state.accepted(1);
        assert_eq!(state.next_pause(), Duration::from_millis(1));
    }
}
