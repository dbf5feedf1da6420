//! The hooked resolvers: `getaddrinfo` and `gethostbyname`. glibc's resolver talks to DNS
//! servers and reads files through internal calls no hook sees, so a green thread's lookup runs
//! on the offload pool (`offload::on_pool`) while only that green thread parks.
//!
//! The helper borrows the caller's arguments; `offloaded.rs` says why that is sound and how a
//! cancellation meanwhile loses nothing.

use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

use libc::{addrinfo, c_char, c_int, hostent};

use super::offloaded::{Borrowed, on_helper};
use crate::runtime::scheduler;
use crate::sys::real;

/// `getaddrinfo(3)`.
///
/// # Safety
/// That of libc's `getaddrinfo`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const addrinfo,
    res: *mut *mut addrinfo,
) -> c_int {
    if !scheduler::can_park_here() {
        // SAFETY: the caller's contract is libc's, passed on unchanged.
        return unsafe { real::getaddrinfo(node, service, hints, res) };
    }
    let arguments = Borrowed((node, service, hints, res));
    let result = AtomicI32::new(libc::EAI_SYSTEM);
    let errno = AtomicI32::new(0);
    on_helper(
        "getaddrinfo (hooked)",
        || {
            let (node, service, hints, res) = arguments.into_inner();
            // SAFETY: the caller's pointers, valid while it waits (module doc).
            let rc = unsafe { real::getaddrinfo(node, service, hints, res) };
            errno.store(crate::sys::fd_state::errno(), Ordering::Relaxed);
            result.store(rc, Ordering::Release);
        },
        || {
            // EAI_SYSTEM reports its cause in errno, which is the helper thread's.
            crate::sys::fd_state::set_errno(errno.load(Ordering::Relaxed));
            result.load(Ordering::Acquire)
        },
    )
}

/// `gethostbyname(3)`: the result points to libc's static storage (shared by every thread, as
/// for a call made on this one); `h_errno` is copied from the helper thread.
///
/// # Safety
/// That of libc's `gethostbyname`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gethostbyname(name: *const c_char) -> *mut hostent {
    if !scheduler::can_park_here() {
        // SAFETY: the caller's contract is libc's, passed on unchanged.
        return unsafe { real::gethostbyname(name) };
    }
    let argument = Borrowed(name);
    let result = AtomicPtr::new(std::ptr::null_mut());
    let h_errno = AtomicI32::new(0);
    on_helper(
        "gethostbyname (hooked)",
        || {
            let name = argument.into_inner();
            // SAFETY: the caller's string, valid while it waits (module doc).
            let entry = unsafe { real::gethostbyname(name) };
            // SAFETY: __h_errno_location returns the helper thread's h_errno.
            h_errno.store(unsafe { *__h_errno_location() }, Ordering::Relaxed);
            result.store(entry, Ordering::Release);
        },
        || {
            // SAFETY: this thread's h_errno.
            unsafe { *__h_errno_location() = h_errno.load(Ordering::Relaxed) };
            result.load(Ordering::Acquire)
        },
    )
}

unsafe extern "C" {
    /// glibc's per-thread `h_errno`.
    fn __h_errno_location() -> *mut c_int;
}
