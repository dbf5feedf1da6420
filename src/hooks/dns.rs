//! The hooked resolvers: `getaddrinfo` and `gethostbyname`. glibc's resolver talks to DNS
//! servers and reads files through internal calls no hook sees, so a green thread's lookup runs
//! on the offload pool (`offload::on_pool`) while only that green thread parks.
//!
//! The helper borrows the caller's arguments. That is sound because the green thread waits for
//! it whatever happens: the offload wait defers a cancellation (or a `time::timeout` scope's
//! end) until the call has returned, and the deferred unwind is caught here and turned into a
//! normal return of the finished call's result, so nothing of the caller's is freed early and
//! the result is not lost; the cancellation is raised again at the green thread's next park.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

use libc::{addrinfo, c_char, c_int, hostent};

use crate::runtime::offload;
use crate::runtime::scheduler;
use crate::sys::real;

/// The caller's pointers, handed to the helper thread.
struct Borrowed<T>(T);

// SAFETY: the pointers are only used by the helper while the calling green thread waits for it
// (see the module doc); nothing else touches what they point to meanwhile.
unsafe impl<T> Send for Borrowed<T> {}

impl<T> Borrowed<T> {
    /// The pointers (a method, so that a closure captures the whole `Send` wrapper rather than
    /// its fields).
    fn into_inner(self) -> T {
        self.0
    }
}

/// Runs `call` on a helper OS thread while the green thread parks, and returns what it
/// returned even if a cancellation came meanwhile (it is raised again at the next park).
/// `finished` is where the call leaves its result; `call` stores it there before returning.
fn on_helper<R: Copy>(
    what: &'static str,
    call: impl FnOnce() + Send,
    finished: impl Fn() -> R,
) -> R {
    // Any payload is a deferred cancellation or scope end (the call itself does not panic):
    // dropped here, raised again at the next park.
    let _ = panic::catch_unwind(AssertUnwindSafe(|| offload::on_pool(what, call)));
    finished()
}

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
