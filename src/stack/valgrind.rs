//! Valgrind client requests that tell Valgrind where our stacks are.
//!
//! Owns: `STACK_REGISTER` / `STACK_DEREGISTER`. Without them, Valgrind sees the stack pointer
//! jump into an mmap'd region on every switch and reports spurious invalid accesses.
//!
//! A client request is a magic instruction sequence that does nothing on real hardware (it
//! rotates a register by a total of 128 bits and executes a no-op `xchg`/`orr`); under Valgrind
//! it is intercepted and returns a result. Natively it returns the default value, 0.

/// `VG_USERREQ__STACK_REGISTER` from valgrind.h.
const STACK_REGISTER: usize = 0x1501;
/// `VG_USERREQ__STACK_DEREGISTER` from valgrind.h.
const STACK_DEREGISTER: usize = 0x1502;

/// Registers `[low, high)` as a stack; returns Valgrind's id for it (0 when not under Valgrind).
pub(super) fn register_stack(low: usize, high: usize) -> usize {
    client_request(0, [STACK_REGISTER, low, high, 0, 0, 0])
}

/// Forgets the stack with `id`, as returned by [`register_stack`].
pub(super) fn deregister_stack(id: usize) {
    client_request(0, [STACK_DEREGISTER, id, 0, 0, 0, 0]);
}

/// Issues a client request: `args[0]` is the request code, `args[1..]` its arguments.
fn client_request(default: usize, args: [usize; 6]) -> usize {
    crate::arch::valgrind_client_request(default, &args)
}
