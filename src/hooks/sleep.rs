//! The hooked sleeps: `nanosleep`, `clock_nanosleep` (what std's `thread::sleep` calls),
//! `usleep` and `sleep`. In a green thread each parks on the runtime's timers. A sleep cut short
//! by a cancellation or the end of a `time::timeout` scope returns as if it had slept (see
//! `wait::sleep_until`), so the Rust code after it reaches its next park, where the
//! cancellation or the scope's end is raised.

use std::time::{Duration, Instant};

use libc::{c_int, c_uint, clockid_t, timespec, useconds_t};

use super::wait;
use crate::runtime::scheduler;
use crate::sys::fd_state::set_errno;
use crate::sys::real;

/// A relative `timespec` as a duration, or `None` if libc would refuse it (`EINVAL`).
fn duration_of(time: &timespec) -> Option<Duration> {
    if time.tv_sec < 0 || !(0..1_000_000_000).contains(&time.tv_nsec) {
        return None;
    }
    Some(Duration::new(time.tv_sec as u64, time.tv_nsec as u32))
}

/// Parks the green thread for `duration` (an overflowing deadline sleeps for ever).
fn green_sleep(what: &'static str, duration: Duration) {
    let deadline = Instant::now().checked_add(duration);
    // Cut short: returns as if it had slept (see the module doc).
    let _ = wait::sleep_until(what, deadline);
}

/// `nanosleep(2)`.
///
/// # Safety
/// That of libc's `nanosleep`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    // SAFETY (the libc call): the caller's contract is libc's, passed on unchanged.
    if req.is_null() || !scheduler::can_park_here() {
        return unsafe { real::nanosleep(req, rem) };
    }
    // SAFETY: non-null, and libc's contract makes it a live timespec.
    let Some(duration) = duration_of(unsafe { &*req }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    green_sleep("nanosleep (hooked)", duration);
    0
}

/// Whether a green thread can sleep on `clock`: the clocks that measure elapsed time. CPU-time
/// clocks go to libc.
fn is_wall_or_monotonic(clock: clockid_t) -> bool {
    matches!(
        clock,
        libc::CLOCK_MONOTONIC | libc::CLOCK_REALTIME | libc::CLOCK_BOOTTIME | libc::CLOCK_TAI
    )
}

/// `clock_nanosleep(2)`, relative or absolute (`TIMER_ABSTIME`). Returns an error number, as
/// libc's does, and never sets `errno`.
///
/// # Safety
/// That of libc's `clock_nanosleep`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn clock_nanosleep(
    clock: clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    // SAFETY (the libc call): the caller's contract is libc's, passed on unchanged.
    if req.is_null() || !is_wall_or_monotonic(clock) || !scheduler::can_park_here() {
        return unsafe { real::clock_nanosleep(clock, flags, req, rem) };
    }
    // SAFETY: non-null, and libc's contract makes it a live timespec.
    let Some(requested) = duration_of(unsafe { &*req }) else {
        return libc::EINVAL;
    };
    let duration = if flags & libc::TIMER_ABSTIME != 0 {
        let mut now = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a live timespec.
        if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
            return libc::EINVAL;
        }
        let now = duration_of(&now).unwrap_or_default();
        requested.saturating_sub(now)
    } else {
        requested
    };
    green_sleep("clock_nanosleep (hooked)", duration);
    0
}

/// `usleep(3)`.
///
/// # Safety
/// None beyond libc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn usleep(usec: useconds_t) -> c_int {
    if !scheduler::can_park_here() {
        // SAFETY: no preconditions.
        return unsafe { real::usleep(usec) };
    }
    green_sleep("usleep (hooked)", Duration::from_micros(u64::from(usec)));
    0
}

/// `sleep(3)`: returns 0, the seconds left unslept (a green sleep is never interrupted by a
/// signal).
///
/// # Safety
/// None beyond libc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sleep(seconds: c_uint) -> c_uint {
    if !scheduler::can_park_here() {
        // SAFETY: no preconditions.
        return unsafe { real::sleep(seconds) };
    }
    green_sleep("sleep (hooked)", Duration::from_secs(u64::from(seconds)));
    0
}
