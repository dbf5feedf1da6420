//! Valgrind client requests that tell Valgrind where our stacks are.
//!
//! Owns: `STACK_REGISTER` / `STACK_DEREGISTER`, and the ids Valgrind hands out for registered
//! stacks. Without them, Valgrind sees the stack pointer jump into an mmap'd region on every
//! switch and reports spurious invalid accesses.
//!
//! A client request is a magic instruction sequence that does nothing on real hardware (it
//! rotates a register by a total of 128 bits and executes a no-op `xchg`/`orr`); under Valgrind
//! it is intercepted and returns a result. Natively it returns the default value.
//!
//! The ids are kept here, by the stack's lowest usable address, rather than in every
//! [`Stack`](super::Stack): they exist only under Valgrind, and a `Stack` without them is two
//! words. Natively the table stays empty and is never locked.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// `VG_USERREQ__RUNNING_ON_VALGRIND` from valgrind.h.
const RUNNING_ON_VALGRIND: usize = 0x1001;
/// `VG_USERREQ__STACK_REGISTER` from valgrind.h.
const STACK_REGISTER: usize = 0x1501;
/// `VG_USERREQ__STACK_DEREGISTER` from valgrind.h.
const STACK_DEREGISTER: usize = 0x1502;

/// `VG_USERREQ__MAKE_MEM_NOACCESS` from memcheck.h (`VG_USERREQ_TOOL_BASE('M', 'C')`).
const MAKE_MEM_NOACCESS: usize = 0x4d43_0000;
/// `VG_USERREQ__MAKE_MEM_UNDEFINED` from memcheck.h.
const MAKE_MEM_UNDEFINED: usize = 0x4d43_0001;

/// Valgrind's id of every registered stack, by the stack's lowest usable address.
static IDS: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

/// Whether any stack was ever registered, so that natively a dropped stack skips the lock.
static ANY_REGISTERED: AtomicBool = AtomicBool::new(false);

/// Registers `[low, high)` as a stack, if the program runs under Valgrind.
pub(super) fn register_stack(low: usize, high: usize) {
    if client_request(0, [RUNNING_ON_VALGRIND, 0, 0, 0, 0, 0]) == 0 {
        return;
    }
    let id = client_request(0, [STACK_REGISTER, low, high, 0, 0, 0]);
    ids().insert(low, id);
    ANY_REGISTERED.store(true, Ordering::Release);
}

/// Forgets the stack whose lowest usable address is `low`, if it was registered.
pub(super) fn deregister_stack(low: usize) {
    if !ANY_REGISTERED.load(Ordering::Acquire) {
        return;
    }
    if let Some(id) = ids().remove(&low) {
        client_request(0, [STACK_DEREGISTER, id, 0, 0, 0, 0]);
    }
}

/// Tells Memcheck that nothing may read or write `[low, high)` (a compacted stack, whose
/// frames are on the heap): a stray access is then reported, where natively it would read the
/// zeros of a released page. Does nothing natively.
pub(super) fn forbid(low: usize, high: usize) {
    if ANY_REGISTERED.load(Ordering::Acquire) {
        client_request(0, [MAKE_MEM_NOACCESS, low, high - low, 0, 0, 0]);
    }
}

/// Undoes [`forbid`]: `[low, high)` is addressable again, its contents undefined until
/// written (the restored frames bring their own definedness with the copy).
pub(super) fn allow(low: usize, high: usize) {
    if ANY_REGISTERED.load(Ordering::Acquire) {
        client_request(0, [MAKE_MEM_UNDEFINED, low, high - low, 0, 0, 0]);
    }
}

fn ids() -> std::sync::MutexGuard<'static, BTreeMap<usize, usize>> {
    // Inserts and removes are not interrupted halfway by a panic, so a poisoned table is
    // still consistent.
    IDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Issues a client request: `args[0]` is the request code, `args[1..]` its arguments.
fn client_request(default: usize, args: [usize; 6]) -> usize {
    crate::arch::valgrind_client_request(default, &args)
}
