//! A turn of a worker's tokio runtime: one `Runtime::block_on` of [`TurnOnce`], a future that
//! is ready once tokio's driver has polled for events, during which tokio's own `epoll_wait` is
//! made with a zero timeout.
//!
//! Owns: the per-OS-thread state of the turn under way, [`intercept_epoll_wait`] (which the
//! `epoll_wait` that mio calls consults first: the `hooks` feature's, or without that feature
//! the one defined here), and the turn's outcome: tokio's epoll fd and the deadline it asked
//! to sleep until.
//!
//! How a turn goes, in tokio's current-thread scheduler: `block_on` polls `TurnOnce` (pending:
//! it keeps the waker), runs the ready tasks, and when none is left parks its driver: the time
//! driver computes the wait until its next timer and the I/O driver calls `epoll_wait(epfd, ..,
//! timeout)`. Intercepted, that call asks the kernel with a zero timeout. If that brought
//! events, tokio dispatches them, runs the tasks they woke and polls again; that second poll
//! (or a first that found nothing) ends the turn without asking the kernel again: the timeout
//! tokio asked for is recorded, `TurnOnce` is woken, and tokio polls it again, ready (see
//! [`intercept_epoll_wait`]).
//!
//! May not: intercept any `epoll_wait` but the first one of a turn on the worker's own tokio
//! epoll fd (the first turn learns it), or wait in the kernel during a turn.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use libc::{c_int, epoll_event};

thread_local! {
    static TURN: Turn = const {
        Turn {
            active: Cell::new(false),
            epfd: Cell::new(-1),
            polled: Cell::new(false),
            timeout: Cell::new(-1),
            rounds: Cell::new(0),
            full: Cell::new(false),
            waker: Cell::new(None),
        }
    };
}

/// The turn under way on this OS thread.
struct Turn {
    active: Cell<bool>,
    /// tokio's epoll fd: known after the first turn, -1 during it (the first `epoll_wait` of
    /// the first turn, which runs before any tokio task exists, is tokio's).
    epfd: Cell<c_int>,
    /// The driver has made the turn's last poll.
    polled: Cell<bool>,
    /// The timeout tokio asked for at the turn's last poll, in milliseconds (-1: none, only
    /// events; 0: work is left, turn again soon).
    timeout: Cell<c_int>,
    /// How many times the driver has polled this turn.
    rounds: Cell<u32>,
    /// The first poll filled tokio's event buffer: more events may wait, with no new edge.
    full: Cell<bool>,
    /// `TurnOnce`'s waker, woken when the driver has polled.
    waker: Cell<Option<Waker>>,
}

/// What a turn found.
pub(super) struct TurnOutcome {
    /// tokio's epoll fd, if its driver polled.
    pub(super) epfd: Option<c_int>,
    /// When tokio must turn again at the latest.
    pub(super) deadline: Option<Instant>,
}

/// Runs one turn of `runtime`, whose epoll fd is `epfd` (`None` for the first turn).
pub(super) fn turn(runtime: &tokio::runtime::Runtime, epfd: Option<c_int>) -> TurnOutcome {
    TURN.with(|turn| {
        turn.active.set(true);
        turn.epfd.set(epfd.unwrap_or(-1));
        turn.polled.set(false);
        turn.timeout.set(-1);
        turn.rounds.set(0);
        turn.full.set(false);
    });
    let ended = EndTurn;
    runtime.block_on(TurnOnce);
    drop(ended);
    TURN.with(|turn| {
        let polled = turn.polled.get();
        let now = Instant::now();
        let deadline = match turn.timeout.get() {
            // The turn ended without its last poll (a panic): again soon.
            _ if !polled => Some(now),
            timeout if timeout < 0 => None,
            timeout => now.checked_add(Duration::from_millis(timeout as u64)),
        };
        TurnOutcome {
            epfd: polled.then(|| turn.epfd.get()),
            deadline,
        }
    })
}

/// Whether a turn is under way on this OS thread.
pub(super) fn in_turn() -> bool {
    TURN.try_with(|turn| turn.active.get()).unwrap_or(false)
}

/// Marks the turn over however it ends (a tokio task's panic that tokio re-raises).
struct EndTurn;

impl Drop for EndTurn {
    fn drop(&mut self) {
        let _ = TURN.try_with(|turn| {
            turn.active.set(false);
            drop(turn.waker.take());
        });
    }
}

/// Ready once the driver has polled during this turn.
struct TurnOnce;

impl Future for TurnOnce {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        TURN.with(|turn| {
            if turn.polled.get() {
                Poll::Ready(())
            } else {
                turn.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
    }
}

/// What `epoll_wait(epfd, events, maxevents, timeout)` returns when it is tokio's driver
/// polling during a turn on this OS thread (`None` otherwise: the call is not ours to change).
///
/// A turn asks the kernel once, without waiting, at its first poll. If that brought events (or
/// tokio asked for no wait: a timer is due, or it has tasks left), tokio dispatches them, runs
/// the tasks they woke and polls again. The turn ends at the first poll that found nothing, or
/// at the second, which asks the kernel nothing: the timeout tokio asked for is recorded
/// ("now" if it asked for none, or the first poll filled the buffer), and `TurnOnce` is woken
/// (from inside the runtime: tokio then writes no eventfd). An event that came after the first
/// poll is a new edge of tokio's epoll fd in the worker's reactor (its ready list gained an
/// entry), which makes the next turn due.
///
/// # Safety
/// That of libc's `epoll_wait`.
pub(crate) unsafe fn intercept_epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    maxevents: c_int,
    timeout: c_int,
) -> Option<c_int> {
    let first = TURN
        .try_with(|turn| {
            let known = turn.epfd.get();
            let ours = turn.active.get() && !turn.polled.get() && (known < 0 || known == epfd);
            ours.then(|| {
                turn.epfd.set(epfd);
                turn.rounds.set(turn.rounds.get() + 1);
                turn.rounds.get() == 1
            })
        })
        .ok()
        .flatten()?;
    let mut found = 0;
    if first {
        // SAFETY: the caller's contract is libc's, passed on with a zero timeout.
        found = unsafe { real_epoll_wait(epfd, events, maxevents, 0) };
        if found == maxevents {
            // More may be left in tokio's ready list, with no new edge to say so.
            TURN.with(|turn| turn.full.set(true));
        }
        if found != 0 || timeout == 0 {
            return Some(found);
        }
    }
    // The turn ends here.
    let waker = TURN.with(|turn| {
        turn.polled.set(true);
        turn.timeout.set(if turn.full.get() || timeout == 0 {
            0
        } else {
            timeout
        });
        turn.waker.take()
    });
    if let Some(waker) = waker {
        waker.wake();
    }
    Some(found)
}

/// libc's `epoll_wait`: with the `hooks` feature, the one `sys::real` resolved; without it
/// the system call (this module defines the `epoll_wait` symbol itself then, so libc's name
/// would come back here).
///
/// # Safety
/// That of libc's `epoll_wait`.
unsafe fn real_epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    maxevents: c_int,
    timeout: c_int,
) -> c_int {
    #[cfg(feature = "hooks")]
    // SAFETY: the caller's contract.
    return unsafe { crate::sys::real::epoll_wait(epfd, events, maxevents, timeout) };
    #[cfg(not(feature = "hooks"))]
    // SAFETY: the caller's contract; `epoll_pwait` with no signal mask is `epoll_wait` (the
    // one system call both architectures have), and `syscall` sets `errno` on failure.
    unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait,
            epfd,
            events,
            maxevents,
            timeout,
            std::ptr::null::<libc::sigset_t>(),
            std::mem::size_of::<libc::sigset_t>() / 8,
        ) as c_int
    }
}

/// `epoll_wait(2)`, defined by the binary when the `tokio` feature is on without `hooks` (which
/// defines its own, that asks [`intercept_epoll_wait`] first too): tokio's driver (mio) calls
/// it, and during a turn its call must not wait. Every other call is libc's, unchanged.
///
/// # Safety
/// That of libc's `epoll_wait`.
#[cfg(not(feature = "hooks"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    maxevents: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's contract, passed on.
    if let Some(result) = unsafe { intercept_epoll_wait(epfd, events, maxevents, timeout) } {
        return result;
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { real_epoll_wait(epfd, events, maxevents, timeout) }
}

/// Makes sure the linker keeps this module's `epoll_wait`: a program that refers to nothing
/// else here would bind mio's call to libc's (called when a worker starts its tokio runtime).
pub(super) fn keep_epoll_wait_linked() {
    #[cfg(not(feature = "hooks"))]
    std::hint::black_box(epoll_wait as unsafe extern "C" fn(_, _, _, _) -> _);
}
