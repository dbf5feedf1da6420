//! The behaviour of `Coroutine` and `Yielder` seen from outside: values in and out, what
//! survives a switch, panics, drops and unwinding, deep stacks, many coroutines, backtraces,
//! misuse.

use std::any::Any;
use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};
use std::hint::black_box;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::thread;

use greenweave::{Coroutine, CoroutineResult, Stack, Yielder};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The message of a panic whose payload is a `&str` or a `String`.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or_else(|| panic!("the panic payload is neither &str nor String"))
}

/// Runs `f`, expecting it to panic, and returns the payload.
fn expect_panic<T>(f: impl FnOnce() -> T) -> Box<dyn Any + Send> {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(_) => panic!("expected a panic"),
        Err(payload) => payload,
    }
}

/// Counts its own drops in a shared counter.
struct Tally(Rc<Cell<usize>>);

impl Drop for Tally {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

/// Records its label in a shared log when dropped, to check the order of destructors.
struct Labelled(&'static str, u32, Rc<RefCell<Vec<(&'static str, u32)>>>);

impl Drop for Labelled {
    fn drop(&mut self) {
        self.2.borrow_mut().push((self.0, self.1));
    }
}

// ---------------------------------------------------------------------------------------------
// Values in and out
// ---------------------------------------------------------------------------------------------

#[test]
fn values_pass_both_ways_intact_through_a_million_resume_suspend_cycles() {
    const CYCLES: u64 = 1_000_000;
    const STOP: u64 = u64::MAX;
    let mut co = Coroutine::<u64, u64, u64>::new(|yielder, mut input| {
        let mut received = 0u64;
        while input != STOP {
            received += 1;
            input = yielder.suspend(input.wrapping_mul(2).wrapping_add(1));
        }
        received
    });
    for i in 0..CYCLES {
        // Spread the inputs over the whole u64 range so that high bits are exercised too.
        let input = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % STOP;
        match co.resume(input) {
            CoroutineResult::Yield(output) => {
                if output != input.wrapping_mul(2).wrapping_add(1) {
                    panic!("cycle {i}: sent {input}, got back {output}");
                }
            }
            CoroutineResult::Return(_) => panic!("cycle {i}: returned early"),
        }
    }
    assert_eq!(co.resume(STOP), CoroutineResult::Return(CYCLES));
    assert!(co.is_done());
}

#[test]
fn the_first_resume_input_is_the_bodys_argument_and_later_ones_are_suspends_results() {
    let log = Rc::new(RefCell::new(Vec::new()));
    let body_log = Rc::clone(&log);
    let mut co = Coroutine::new(move |yielder, first: &'static str| {
        body_log.borrow_mut().push(first);
        let second = yielder.suspend(1u8);
        body_log.borrow_mut().push(second);
        let third = yielder.suspend(2);
        body_log.borrow_mut().push(third);
        'r'
    });
    assert_eq!(co.resume("a"), CoroutineResult::Yield(1));
    assert_eq!(*log.borrow(), ["a"]);
    assert_eq!(co.resume("b"), CoroutineResult::Yield(2));
    assert_eq!(*log.borrow(), ["a", "b"]);
    assert_eq!(co.resume("c"), CoroutineResult::Return('r'));
    assert_eq!(*log.borrow(), ["a", "b", "c"]);
}

#[test]
fn values_with_destructors_are_moved_through_switches_and_dropped_exactly_once() {
    let token = Rc::new(());
    let mut co = Coroutine::<Rc<()>, Rc<()>, Rc<()>>::new(|yielder, first| {
        let second = yielder.suspend(first);
        let third = yielder.suspend(second);
        drop(third);
        Rc::new(())
    });
    // Every Rc sent in comes back out: ownership moves, nothing is copied or leaked.
    let out = co.resume(Rc::clone(&token)).into_yield().unwrap();
    assert!(Rc::ptr_eq(&out, &token));
    assert_eq!(Rc::strong_count(&token), 2);
    drop(out);
    let out = co.resume(Rc::clone(&token)).into_yield().unwrap();
    assert_eq!(Rc::strong_count(&token), 2);
    drop(out);
    let returned = co.resume(Rc::clone(&token)).into_return().unwrap();
    assert_eq!(Rc::strong_count(&token), 1, "the body dropped its input");
    assert_eq!(Rc::strong_count(&returned), 1);
}

#[test]
fn large_values_pass_intact_both_ways() {
    type Big = Box<[u64; 1024]>;
    fn pattern(seed: u64) -> [u64; 1024] {
        std::array::from_fn(|i| seed.wrapping_mul(i as u64 + 1) ^ 0x5555_5555)
    }
    let mut co = Coroutine::<[u64; 1024], [u64; 1024], Big>::new(|yielder, first| {
        assert_eq!(first, pattern(1));
        let second = yielder.suspend(pattern(2));
        assert_eq!(second, pattern(3));
        Box::new(pattern(4))
    });
    assert_eq!(co.resume(pattern(1)), CoroutineResult::Yield(pattern(2)));
    assert_eq!(
        co.resume(pattern(3)).into_return().as_deref(),
        Some(&pattern(4))
    );
}

#[test]
fn over_aligned_values_pass_intact_and_stay_aligned() {
    #[repr(align(64))]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Aligned([u64; 3]);

    fn is_aligned(value: &Aligned) -> bool {
        (value as *const Aligned as usize).is_multiple_of(64)
    }

    let mut co = Coroutine::<Aligned, Aligned, Aligned>::new(|yielder, first| {
        assert!(is_aligned(&first));
        let next = yielder.suspend(Aligned([first.0[2], first.0[1], first.0[0]]));
        assert!(is_aligned(&next));
        next
    });
    let out = co.resume(Aligned([1, 2, 3])).into_yield().unwrap();
    assert!(is_aligned(&out));
    assert_eq!(out, Aligned([3, 2, 1]));
    assert_eq!(
        co.resume(Aligned([7, 8, 9])),
        CoroutineResult::Return(Aligned([7, 8, 9]))
    );
}

#[test]
fn zero_sized_inputs_yields_and_returns_work() {
    struct Unit;
    let mut co = Coroutine::<(), Unit, ()>::new(|yielder, ()| {
        yielder.suspend(Unit);
        yielder.suspend(Unit);
    });
    assert!(matches!(co.resume(()), CoroutineResult::Yield(Unit)));
    assert!(matches!(co.resume(()), CoroutineResult::Yield(Unit)));
    assert!(matches!(co.resume(()), CoroutineResult::Return(())));
}

#[test]
fn coroutine_result_gives_its_yield_or_its_return() {
    let yielded: CoroutineResult<u8, &str> = CoroutineResult::Yield(3);
    assert_eq!(yielded.into_yield(), Some(3));
    assert_eq!(yielded.into_return(), None);
    let returned: CoroutineResult<u8, &str> = CoroutineResult::Return("end");
    assert_eq!(returned.into_yield(), None);
    assert_eq!(returned.into_return(), Some("end"));
}

// ---------------------------------------------------------------------------------------------
// Registers
// ---------------------------------------------------------------------------------------------

/// Defines `churn`, which keeps eighteen integer and eighteen floating-point values live across
/// every call of `between`, as separate locals, so that the optimiser keeps what it can in
/// callee-saved registers (rbx, rbp, r12-r15 on x86_64; x19-x28 and d8-d15 on aarch64) and
/// spills the rest to the stack. Each round feeds every value back into itself, so none of them
/// can be recomputed after the call instead of being kept across it, and chains each value to
/// the one before it, so that the optimiser cannot pack them into vector registers (whose
/// upper halves no call preserves anyway).
macro_rules! define_churn {
    ($($int:ident),+ ; $($float:ident),+) => {
        #[inline(always)]
        fn churn(seed: u64, rounds: u64, mut between: impl FnMut(u64) -> u64) -> Vec<u64> {
            let mut k = 0u64;
            $(
                k += 1;
                let mut $int: u64 = black_box(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15 ^ k);
            )+
            $(
                k += 1;
                let mut $float: f64 = (black_box(seed) % 1000) as f64 + k as f64 * 0.25;
            )+
            black_box(k);
            for round in 0..rounds {
                let y = between(round ^ $($int)^+ ^ $($float.to_bits())^+);
                let mut int_carry = y;
                $(
                    $int = $int.rotate_left(7) ^ int_carry;
                    int_carry = $int;
                )+
                let mut float_carry = (y % 4096) as f64;
                $(
                    $float = $float * 0.5 + float_carry * 0.125;
                    float_carry = $float;
                )+
                black_box((int_carry, float_carry));
            }
            vec![$($int),+, $($float.to_bits()),+]
        }
    };
}

define_churn!(
    i0, i1, i2, i3, i4, i5, i6, i7, i8, i9, i10, i11, i12, i13, i14, i15, i16, i17;
    f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17
);

#[test]
fn values_kept_in_registers_survive_every_switch_in_both_the_resumer_and_the_body() {
    const ROUNDS: u64 = 2_000;
    let resumer_seed = black_box(0x0123_4567_89AB_CDEF);
    let body_seed = black_box(0xFEDC_BA98_7654_3210);
    // What the body answers to each input: a function of the input alone, so the resumer's
    // expected values can be computed without a coroutine.
    fn answer(input: u64) -> u64 {
        input.rotate_left(17) ^ 0xA5A5_A5A5
    }

    let mut co = Coroutine::<u64, u64, Vec<u64>>::new(move |yielder, first| {
        let mut pending = first;
        churn(body_seed, ROUNDS, |own| {
            pending = yielder.suspend(answer(pending));
            own.rotate_left(1)
        })
    });
    let resumer_values = churn(resumer_seed, ROUNDS, |own| match co.resume(own) {
        CoroutineResult::Yield(answered) => {
            assert_eq!(answered, answer(own));
            answered
        }
        CoroutineResult::Return(_) => panic!("the body returned early"),
    });
    let body_values = co.resume(0).into_return().expect("the body returns");

    assert_eq!(resumer_values, churn(resumer_seed, ROUNDS, answer));
    assert_eq!(
        body_values,
        churn(body_seed, ROUNDS, |own| own.rotate_left(1))
    );
}

#[test]
fn values_kept_in_registers_survive_switches_between_nested_coroutines() {
    const ROUNDS: u64 = 300;
    fn answer(input: u64) -> u64 {
        input ^ 0x1111
    }
    let mut outer = Coroutine::<u64, u64, (Vec<u64>, Vec<u64>)>::new(|yielder, first| {
        let mut inner = Coroutine::<u64, u64, Vec<u64>>::new(|yielder, first| {
            let mut pending = first;
            churn(black_box(3), ROUNDS, |own| {
                pending = yielder.suspend(answer(pending));
                own.wrapping_add(1)
            })
        });
        let mut pending = first;
        let outer_values = churn(black_box(2), ROUNDS, |own| {
            let answered = inner.resume(own).into_yield().unwrap();
            assert_eq!(answered, answer(own));
            pending = yielder.suspend(pending.wrapping_mul(3));
            answered
        });
        let inner_values = inner.resume(0).into_return().unwrap();
        (outer_values, inner_values)
    });
    for input in 5..5 + ROUNDS {
        assert_eq!(outer.resume(input), CoroutineResult::Yield(input * 3));
    }
    let (outer_values, inner_values) = outer.resume(0).into_return().unwrap();
    assert_eq!(outer_values, churn(2, ROUNDS, answer));
    assert_eq!(inner_values, churn(3, ROUNDS, |own| own.wrapping_add(1)));
}

/// How many callee-saved registers `call_with_callee_saved` sets and reads back: rbx, rbp and
/// r12-r15 on x86_64; x19-x29 and d8-d15 on aarch64.
#[cfg(target_arch = "x86_64")]
const CALLEE_SAVED: usize = 6;
#[cfg(target_arch = "aarch64")]
const CALLEE_SAVED: usize = 19;

// `call_with_callee_saved(values, seen, f, ctx)` loads `values` into every callee-saved
// register, calls `f(ctx)`, stores what those registers hold once `f` returns into `seen`, and
// restores its caller's registers. By the ABI, `seen` must equal `values` whatever `f` does; `f`
// switching stacks must not change that. The callback must not unwind (there is no CFI here).
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".pushsection .text",
    ".globl coroutine_test_call_with_callee_saved",
    ".p2align 4",
    "coroutine_test_call_with_callee_saved:",
    "push rbp",
    "push rbx",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "push rsi", // `seen`; also makes rsp 16-byte aligned for the call
    "mov rbx, [rdi]",
    "mov rbp, [rdi + 8]",
    "mov r12, [rdi + 16]",
    "mov r13, [rdi + 24]",
    "mov r14, [rdi + 32]",
    "mov r15, [rdi + 40]",
    "mov rdi, rcx",
    "call rdx",
    "pop rsi",
    "mov [rsi], rbx",
    "mov [rsi + 8], rbp",
    "mov [rsi + 16], r12",
    "mov [rsi + 24], r13",
    "mov [rsi + 32], r14",
    "mov [rsi + 40], r15",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbx",
    "pop rbp",
    "ret",
    ".popsection",
);

#[cfg(target_arch = "aarch64")]
std::arch::global_asm!(
    ".pushsection .text",
    ".globl coroutine_test_call_with_callee_saved",
    ".p2align 4",
    "coroutine_test_call_with_callee_saved:",
    "stp x29, x30, [sp, #-176]!",
    "stp x19, x20, [sp, #16]",
    "stp x21, x22, [sp, #32]",
    "stp x23, x24, [sp, #48]",
    "stp x25, x26, [sp, #64]",
    "stp x27, x28, [sp, #80]",
    "stp d8, d9, [sp, #96]",
    "stp d10, d11, [sp, #112]",
    "stp d12, d13, [sp, #128]",
    "stp d14, d15, [sp, #144]",
    "str x1, [sp, #160]", // `seen`
    "ldp x19, x20, [x0, #0]",
    "ldp x21, x22, [x0, #16]",
    "ldp x23, x24, [x0, #32]",
    "ldp x25, x26, [x0, #48]",
    "ldp x27, x28, [x0, #64]",
    "ldr x29, [x0, #80]",
    "ldp d8, d9, [x0, #88]",
    "ldp d10, d11, [x0, #104]",
    "ldp d12, d13, [x0, #120]",
    "ldp d14, d15, [x0, #136]",
    "mov x0, x3",
    "blr x2",
    "ldr x1, [sp, #160]",
    "stp x19, x20, [x1, #0]",
    "stp x21, x22, [x1, #16]",
    "stp x23, x24, [x1, #32]",
    "stp x25, x26, [x1, #48]",
    "stp x27, x28, [x1, #64]",
    "str x29, [x1, #80]",
    "stp d8, d9, [x1, #88]",
    "stp d10, d11, [x1, #104]",
    "stp d12, d13, [x1, #120]",
    "stp d14, d15, [x1, #136]",
    "ldp x19, x20, [sp, #16]",
    "ldp x21, x22, [sp, #32]",
    "ldp x23, x24, [sp, #48]",
    "ldp x25, x26, [sp, #64]",
    "ldp x27, x28, [sp, #80]",
    "ldp d8, d9, [sp, #96]",
    "ldp d10, d11, [sp, #112]",
    "ldp d12, d13, [sp, #128]",
    "ldp d14, d15, [sp, #144]",
    "ldp x29, x30, [sp], #176",
    "ret",
    ".popsection",
);

unsafe extern "C" {
    fn coroutine_test_call_with_callee_saved(
        values: *const [u64; CALLEE_SAVED],
        seen: *mut [u64; CALLEE_SAVED],
        f: extern "C" fn(*mut core::ffi::c_void),
        ctx: *mut core::ffi::c_void,
    );
}

/// Runs `f` with every callee-saved register set to `values`; returns what they hold after.
fn with_callee_saved_registers(
    values: [u64; CALLEE_SAVED],
    mut f: impl FnMut(),
) -> [u64; CALLEE_SAVED] {
    extern "C" fn trampoline<F: FnMut()>(ctx: *mut core::ffi::c_void) {
        // SAFETY: `ctx` is the `&mut F` passed below, alive for the whole call.
        let f = unsafe { &mut *ctx.cast::<F>() };
        f();
    }
    fn trampoline_for<F: FnMut()>(_: &F) -> extern "C" fn(*mut core::ffi::c_void) {
        trampoline::<F>
    }
    let mut seen = [0; CALLEE_SAVED];
    let callback = trampoline_for(&f);
    // SAFETY: the routine follows the C ABI; `values` and `seen` are valid arrays of the
    // length it reads and writes; `ctx` is a live `&mut F` matching `callback`.
    unsafe {
        coroutine_test_call_with_callee_saved(
            &values,
            &mut seen,
            callback,
            (&raw mut f).cast::<core::ffi::c_void>(),
        );
    }
    seen
}

/// A distinct value for each register, side and round.
fn register_pattern(side: u64, round: u64) -> [u64; CALLEE_SAVED] {
    std::array::from_fn(|register| {
        0xC0DE_0000_0000_0000 | side << 40 | round << 8 | register as u64
    })
}

#[test]
fn every_callee_saved_register_is_restored_on_both_sides_of_every_switch() {
    const ROUNDS: u64 = 50;
    const RESUMER: u64 = 1;
    const BODY: u64 = 2;
    // Nothing in the callbacks may panic (they run under an extern "C" frame), so each side
    // records what it saw and the test compares afterwards.
    let mut co = Coroutine::<u64, u64, Vec<(u64, [u64; CALLEE_SAVED])>>::new(|yielder, mut n| {
        let mut seen_by_body = Vec::new();
        for round in 0..ROUNDS {
            let seen = with_callee_saved_registers(register_pattern(BODY, round), || {
                n = yielder.suspend(n + 1);
            });
            seen_by_body.push((round, seen));
        }
        seen_by_body
    });
    let mut seen_by_resumer = Vec::new();
    let mut results = Vec::new();
    for round in 0..=ROUNDS {
        let seen = with_callee_saved_registers(register_pattern(RESUMER, round), || {
            results.push(co.resume(round * 10));
        });
        seen_by_resumer.push((round, seen));
    }

    for (round, seen) in seen_by_resumer {
        let expected = register_pattern(RESUMER, round);
        assert!(
            seen == expected,
            "resumer, round {round}: registers hold {seen:#x?}, expected {expected:#x?}"
        );
    }
    let seen_by_body = results
        .pop()
        .unwrap()
        .into_return()
        .expect("the body returned");
    for (round, seen) in seen_by_body {
        let expected = register_pattern(BODY, round);
        assert!(
            seen == expected,
            "body, round {round}: registers hold {seen:#x?}, expected {expected:#x?}"
        );
    }
    let expected: Vec<_> = (0..ROUNDS)
        .map(|round| CoroutineResult::Yield(round * 10 + 1))
        .collect();
    assert_eq!(results, expected);
}

/// The same for the symmetric switch (`arch::switch`, which greenlets use): main and a
/// greenlet ping-pong, each with its own pattern in every callee-saved register.
#[test]
fn every_callee_saved_register_is_restored_on_both_sides_of_every_greenlet_switch() {
    use greenweave::greenlet::{self, Greenlet};

    const ROUNDS: u64 = 50;
    const MAIN: u64 = 3;
    const GREENLET: u64 = 4;
    let seen_by_greenlet = Rc::new(RefCell::new(Vec::new()));
    let record = seen_by_greenlet.clone();
    // Option: a greenlet's message type must say what a killed greenlet hands on (None).
    let echo = Greenlet::new(move |mut n: Option<u64>| {
        let main = greenlet::current::<Option<u64>>()
            .parent()
            .expect("made by main");
        for round in 0..ROUNDS {
            let seen = with_callee_saved_registers(register_pattern(GREENLET, round), || {
                n = main.switch(n.map(|n| n + 1));
            });
            record.borrow_mut().push((round, seen));
        }
        n
    });
    let mut seen_by_main = Vec::new();
    let mut replies = Vec::new();
    for round in 0..=ROUNDS {
        let seen = with_callee_saved_registers(register_pattern(MAIN, round), || {
            replies.push(echo.switch(Some(round * 10)));
        });
        seen_by_main.push((round, seen));
    }

    for (round, seen) in seen_by_main {
        let expected = register_pattern(MAIN, round);
        assert!(
            seen == expected,
            "main, round {round}: registers hold {seen:#x?}, expected {expected:#x?}"
        );
    }
    for (round, seen) in seen_by_greenlet.borrow().iter().copied() {
        let expected = register_pattern(GREENLET, round);
        assert!(
            seen == expected,
            "greenlet, round {round}: registers hold {seen:#x?}, expected {expected:#x?}"
        );
    }
    assert_eq!(seen_by_greenlet.borrow().len(), ROUNDS as usize);
    let mut expected: Vec<_> = (0..ROUNDS).map(|round| Some(round * 10 + 1)).collect();
    expected.push(Some(ROUNDS * 10));
    assert_eq!(replies, expected);
    assert!(echo.is_dead());
}

// ---------------------------------------------------------------------------------------------
// Panics
// ---------------------------------------------------------------------------------------------

#[test]
fn a_panic_in_the_body_is_raised_again_from_resume_with_its_str_payload() {
    let mut co = Coroutine::<(), (), ()>::new(|_, ()| panic!("static message"));
    let payload = expect_panic(|| co.resume(()));
    assert_eq!(panic_message(&*payload), "static message");
    assert!(co.is_done());
}

#[test]
fn a_panic_in_the_body_is_raised_again_from_resume_with_its_formatted_payload() {
    let mut co = Coroutine::<u32, u32, ()>::new(|yielder, first| {
        let second = yielder.suspend(first + 1);
        panic!("formatted {first} and {second}");
    });
    assert_eq!(co.resume(10), CoroutineResult::Yield(11));
    let payload = expect_panic(|| co.resume(20));
    assert!(payload.is::<String>());
    assert_eq!(panic_message(&*payload), "formatted 10 and 20");
    assert!(co.is_done());
}

#[test]
fn a_panic_with_a_payload_of_any_type_keeps_that_payload() {
    #[derive(Debug, PartialEq)]
    struct Custom(u64, &'static str);
    let mut co = Coroutine::<(), (), ()>::new(|_, ()| panic::panic_any(Custom(7, "seven")));
    let payload = expect_panic(|| co.resume(()));
    assert_eq!(payload.downcast_ref::<Custom>(), Some(&Custom(7, "seven")));
}

#[test]
fn a_panic_in_the_body_drops_what_the_body_held() {
    let drops = Rc::new(Cell::new(0));
    let held = Tally(Rc::clone(&drops));
    let mut co = Coroutine::<(), (), ()>::new(move |yielder, ()| {
        let _held = held;
        yielder.suspend(());
        panic!("after a suspend");
    });
    co.resume(());
    assert_eq!(drops.get(), 0);
    expect_panic(|| co.resume(()));
    assert_eq!(drops.get(), 1);
}

#[test]
fn a_panic_caught_inside_the_body_does_not_end_the_coroutine() {
    let mut co = Coroutine::<(), u32, u32>::new(|yielder, ()| {
        let caught = panic::catch_unwind(|| panic!("contained"));
        assert!(caught.is_err());
        yielder.suspend(1);
        2
    });
    assert_eq!(co.resume(()), CoroutineResult::Yield(1));
    assert_eq!(co.resume(()), CoroutineResult::Return(2));
}

#[test]
fn resuming_a_coroutine_that_returned_panics_with_already_finished() {
    let mut co = Coroutine::<(), (), u8>::new(|_, ()| 1);
    assert_eq!(co.resume(()), CoroutineResult::Return(1));
    let payload = expect_panic(|| co.resume(()));
    assert!(
        panic_message(&*payload).contains("already finished"),
        "{:?}",
        panic_message(&*payload)
    );
    assert!(co.is_done());
}

#[test]
fn resuming_a_coroutine_that_panicked_panics_with_already_finished() {
    let mut co = Coroutine::<(), (), ()>::new(|_, ()| panic!("first"));
    expect_panic(|| co.resume(()));
    let payload = expect_panic(|| co.resume(()));
    assert!(panic_message(&*payload).contains("already finished"));
}

// ---------------------------------------------------------------------------------------------
// Dropping and unwinding
// ---------------------------------------------------------------------------------------------

/// Holds a labelled value in each of `depth + 1` frames, then suspends at the bottom.
#[inline(never)]
fn hold_in_frames_then_suspend(
    depth: u32,
    log: &Rc<RefCell<Vec<(&'static str, u32)>>>,
    yielder: &Yielder<(), u32>,
) {
    let _held = Labelled("frame", depth, Rc::clone(log));
    if depth == 0 {
        yielder.suspend(black_box(0));
        panic!("resumed after being dropped");
    } else {
        hold_in_frames_then_suspend(depth - 1, log, yielder);
    }
    black_box(depth);
}

#[test]
fn dropping_a_suspended_coroutine_runs_every_destructor_on_its_stack_innermost_first() {
    let log = Rc::new(RefCell::new(Vec::new()));
    let captured = Labelled("captured", 0, Rc::clone(&log));
    let body_log = Rc::clone(&log);
    let mut co = Coroutine::<(), u32, ()>::new(move |yielder, ()| {
        let _captured = captured;
        let _local = Labelled("local", 0, Rc::clone(&body_log));
        hold_in_frames_then_suspend(9, &body_log, yielder);
    });
    assert_eq!(co.resume(()), CoroutineResult::Yield(0));
    assert!(
        log.borrow().is_empty(),
        "nothing is dropped while suspended"
    );

    drop(co);

    let mut expected: Vec<_> = (0..=9).map(|depth| ("frame", depth)).collect();
    expected.push(("local", 0));
    expected.push(("captured", 0));
    assert_eq!(*log.borrow(), expected);
    assert_eq!(
        Rc::strong_count(&log),
        1,
        "the body's own Rc was dropped too"
    );
}

#[test]
fn dropping_an_unstarted_coroutine_drops_its_captures_without_running_the_body() {
    let drops = Rc::new(Cell::new(0));
    let ran = Rc::new(Cell::new(false));
    let held = (Tally(Rc::clone(&drops)), Tally(Rc::clone(&drops)));
    let body_ran = Rc::clone(&ran);
    let co = Coroutine::<(), (), ()>::new(move |_, ()| {
        body_ran.set(true);
        drop(held);
    });
    assert_eq!(drops.get(), 0);
    drop(co);
    assert_eq!(drops.get(), 2);
    assert!(!ran.get());
    assert_eq!(Rc::strong_count(&ran), 1);
}

#[test]
fn dropping_a_finished_coroutine_is_harmless() {
    let drops = Rc::new(Cell::new(0));
    let held = Tally(Rc::clone(&drops));
    let mut co = Coroutine::<(), (), u8>::new(move |_, ()| {
        drop(held);
        5
    });
    assert_eq!(co.resume(()), CoroutineResult::Return(5));
    assert_eq!(drops.get(), 1);
    drop(co);
    assert_eq!(drops.get(), 1);

    let mut panicked = Coroutine::<(), (), ()>::new(|_, ()| panic!("gone"));
    expect_panic(|| panicked.resume(()));
    drop(panicked);
}

#[test]
fn a_suspended_coroutine_dropped_while_a_panic_unwinds_past_it_is_unwound_too() {
    let drops = Rc::new(Cell::new(0));
    let held = Tally(Rc::clone(&drops));
    let payload = expect_panic(move || {
        let mut co = Coroutine::<(), (), ()>::new(move |yielder, ()| {
            let _held = held;
            yielder.suspend(());
        });
        co.resume(());
        panic!("unwinding past a suspended coroutine");
    });
    assert_eq!(
        panic_message(&*payload),
        "unwinding past a suspended coroutine"
    );
    assert_eq!(drops.get(), 1);
    assert!(!thread::panicking());
}

#[test]
fn a_panicking_destructor_of_an_unstarted_coroutines_capture_is_raised_from_drop() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("capture refused to drop");
        }
    }
    let held = PanicsOnDrop;
    let co = Coroutine::<(), (), ()>::new(move |_, ()| drop(held));
    let payload = expect_panic(move || drop(co));
    assert_eq!(panic_message(&*payload), "capture refused to drop");
}

#[test]
fn a_body_that_catches_its_forced_unwind_and_suspends_again_makes_drop_panic() {
    let mut co = Coroutine::<(), u32, ()>::new(|yielder, ()| {
        let _ = panic::catch_unwind(AssertUnwindSafe(|| yielder.suspend(1)));
        yielder.suspend(2);
    });
    assert_eq!(co.resume(()), CoroutineResult::Yield(1));
    let payload = expect_panic(move || drop(co));
    assert!(
        panic_message(&*payload).contains("suspended while it was being dropped"),
        "{:?}",
        panic_message(&*payload)
    );
}

#[test]
fn a_body_that_catches_its_forced_unwind_and_returns_is_dropped_quietly() {
    let drops = Rc::new(Cell::new(0));
    let held = Tally(Rc::clone(&drops));
    let mut co = Coroutine::<(), u32, u32>::new(move |yielder, ()| {
        let _held = held;
        let caught = panic::catch_unwind(AssertUnwindSafe(|| yielder.suspend(1)));
        assert!(caught.is_err());
        7
    });
    assert_eq!(co.resume(()), CoroutineResult::Yield(1));
    drop(co);
    assert_eq!(drops.get(), 1);
}

#[test]
fn into_stack_on_a_suspended_coroutine_unwinds_it_and_the_stack_can_be_reused() {
    let log = Rc::new(RefCell::new(Vec::new()));
    let body_log = Rc::clone(&log);
    let stack = Stack::new(64 * 1024).unwrap();
    let mut co = Coroutine::<(), u32, ()>::with_stack(stack, move |yielder, ()| {
        let _captured = Labelled("captured", 0, Rc::clone(&body_log));
        hold_in_frames_then_suspend(4, &body_log, yielder);
    });
    assert_eq!(co.resume(()), CoroutineResult::Yield(0));

    let stack = co.into_stack();
    assert_eq!(log.borrow().len(), 6, "five frames and the captured value");
    assert_eq!(stack.size(), 64 * 1024);

    let mut reused = Coroutine::with_stack(stack, |yielder, n: u32| {
        let m = yielder.suspend(n * 2);
        n + m
    });
    assert_eq!(reused.resume(4), CoroutineResult::Yield(8));
    assert_eq!(reused.resume(5), CoroutineResult::Return(9));
}

#[test]
fn into_stack_on_an_unstarted_coroutine_drops_the_body_unrun() {
    let drops = Rc::new(Cell::new(0));
    let held = Tally(Rc::clone(&drops));
    let ran = Rc::new(Cell::new(false));
    let body_ran = Rc::clone(&ran);
    let co = Coroutine::<(), (), ()>::with_stack(Stack::new(32 * 1024).unwrap(), move |_, ()| {
        body_ran.set(true);
        drop(held);
    });
    let stack = co.into_stack();
    assert_eq!(drops.get(), 1);
    assert!(!ran.get());
    assert_eq!(stack.size(), 32 * 1024);
}

#[test]
fn into_stack_on_a_finished_coroutine_returns_the_stack() {
    let mut co = Coroutine::<(), (), u8>::with_stack(Stack::new(32 * 1024).unwrap(), |_, ()| 3);
    assert_eq!(co.resume(()), CoroutineResult::Return(3));
    assert_eq!(co.into_stack().size(), 32 * 1024);
}

// ---------------------------------------------------------------------------------------------
// Deep stacks and many coroutines
// ---------------------------------------------------------------------------------------------

/// Recurses `depth` frames, each holding a value it checks after the frames below return;
/// suspends at the bottom and returns the next input plus the sum of the frames' values.
#[inline(never)]
fn descend_and_suspend(depth: u64, yielder: &Yielder<u64, u64>) -> u64 {
    let here = black_box(depth * 3 + 1);
    if depth == 0 {
        return yielder.suspend(here);
    }
    let below = descend_and_suspend(depth - 1, yielder);
    assert_eq!(here, depth * 3 + 1, "frame {depth} was overwritten");
    below + here
}

#[test]
fn a_coroutine_a_hundred_frames_deep_suspends_at_the_bottom_and_resumes_repeatedly() {
    const DEPTH: u64 = 99; // frames 99 down to 0: a hundred of them
    const ROUNDS: u64 = 5;
    let mut co = Coroutine::<u64, u64, u64>::new(|yielder, _first| {
        (0..ROUNDS)
            .map(|_| descend_and_suspend(DEPTH, yielder))
            .sum()
    });
    let frames_sum: u64 = (1..=DEPTH).map(|depth| depth * 3 + 1).sum();
    assert_eq!(co.resume(0), CoroutineResult::Yield(1));
    for round in 0..ROUNDS - 1 {
        assert_eq!(co.resume(10 + round), CoroutineResult::Yield(1));
    }
    let inputs: u64 = (10..10 + ROUNDS).sum();
    assert_eq!(
        co.resume(10 + ROUNDS - 1),
        CoroutineResult::Return(inputs + ROUNDS * frames_sum)
    );
}

#[test]
fn ten_thousand_suspended_coroutines_can_be_resumed_round_robin() {
    const COUNT: u64 = 10_000;
    const ROUNDS: u64 = 3;
    let mut coroutines: Vec<Coroutine<u64, u64, u64>> = (0..COUNT)
        .map(|id| {
            Coroutine::new(move |yielder, first| {
                let mut total = id * 1_000 + first;
                for _ in 0..ROUNDS {
                    total += yielder.suspend(total);
                }
                total
            })
        })
        .collect();
    let mut expected: Vec<u64> = (0..COUNT).map(|id| id * 1_000).collect();
    for round in 0..=ROUNDS {
        for (id, co) in coroutines.iter_mut().enumerate() {
            let input = round + 1;
            expected[id] += input;
            let result = co.resume(input);
            let want = if round == ROUNDS {
                CoroutineResult::Return(expected[id])
            } else {
                CoroutineResult::Yield(expected[id])
            };
            if result != want {
                panic!("coroutine {id}, round {round}: {result:?} instead of {want:?}");
            }
        }
    }
    assert!(coroutines.iter().all(Coroutine::is_done));
}

#[test]
fn coroutines_run_independently_on_several_threads_at_once() {
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            thread::spawn(move || {
                let mut coroutines: Vec<_> = (0..50u64)
                    .map(|i| {
                        Coroutine::<u64, u64, u64>::new(move |yielder, mut n| {
                            for _ in 0..100 {
                                n = yielder.suspend(n + t * 1_000 + i);
                            }
                            n
                        })
                    })
                    .collect();
                for step in 0..100u64 {
                    for (i, co) in coroutines.iter_mut().enumerate() {
                        let i = i as u64;
                        assert_eq!(
                            co.resume(step),
                            CoroutineResult::Yield(step + t * 1_000 + i)
                        );
                    }
                }
                coroutines
                    .iter_mut()
                    .map(|co| co.resume(7).into_return().unwrap())
                    .sum::<u64>()
            })
        })
        .collect();
    for handle in threads {
        assert_eq!(handle.join().unwrap(), 50 * 7);
    }
}

// ---------------------------------------------------------------------------------------------
// Backtraces
// ---------------------------------------------------------------------------------------------

#[inline(never)]
fn capture_backtrace_in_named_frame() -> String {
    let backtrace = Backtrace::force_capture().to_string();
    black_box(&backtrace);
    backtrace
}

#[test]
fn a_backtrace_captured_inside_a_coroutine_names_the_function_that_captured_it() {
    let mut co = Coroutine::<(), String, String>::new(|yielder, ()| {
        yielder.suspend(capture_backtrace_in_named_frame());
        Backtrace::force_capture().to_string()
    });
    let inner = co.resume(()).into_yield().unwrap();
    assert!(
        inner.contains("capture_backtrace_in_named_frame"),
        "backtrace:\n{inner}"
    );
    let outermost = co.resume(()).into_return().unwrap();
    assert!(!outermost.trim().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Lifecycle and the Iterator impl
// ---------------------------------------------------------------------------------------------

#[test]
fn is_started_and_is_done_follow_the_lifecycle() {
    let mut co = Coroutine::<(), (), ()>::new(|yielder, ()| yielder.suspend(()));
    assert!(!co.is_started() && !co.is_done());
    assert_eq!(co.resume(()), CoroutineResult::Yield(()));
    assert!(co.is_started() && !co.is_done());
    assert_eq!(co.resume(()), CoroutineResult::Return(()));
    assert!(co.is_started() && co.is_done());

    let mut returns_at_once = Coroutine::<(), (), ()>::new(|_, ()| ());
    assert_eq!(returns_at_once.resume(()), CoroutineResult::Return(()));
    assert!(returns_at_once.is_started() && returns_at_once.is_done());

    let mut panics = Coroutine::<(), (), ()>::new(|_, ()| panic!("ends it"));
    expect_panic(|| panics.resume(()));
    assert!(panics.is_started() && panics.is_done());
}

#[test]
fn debug_output_names_the_state() {
    let mut co = Coroutine::<(), (), ()>::new(|yielder, ()| yielder.suspend(()));
    assert!(format!("{co:?}").contains("unstarted"));
    co.resume(());
    assert!(format!("{co:?}").contains("suspended"));
    co.resume(());
    assert!(format!("{co:?}").contains("finished"));
}

#[test]
fn a_finite_generator_collects_into_what_it_yielded() {
    let squares = Coroutine::new(|yielder, ()| {
        for n in 1..=6u32 {
            yielder.suspend(n * n);
        }
    });
    assert_eq!(squares.collect::<Vec<_>>(), [1, 4, 9, 16, 25, 36]);
}

#[test]
fn an_exhausted_generator_keeps_returning_none() {
    let mut two = Coroutine::new(|yielder, ()| {
        yielder.suspend('a');
        yielder.suspend('b');
    });
    assert_eq!(two.next(), Some('a'));
    assert_eq!(two.next(), Some('b'));
    assert_eq!(two.next(), None);
    assert!(two.is_done());
    assert_eq!(two.next(), None);
}

#[test]
fn an_infinite_generator_can_be_taken_from_and_dropped() {
    let drops = Rc::new(Cell::new(0));
    let held = Tally(Rc::clone(&drops));
    let naturals = Coroutine::new(move |yielder, ()| {
        let _held = held;
        let mut n = 0u64;
        loop {
            yielder.suspend(n);
            n += 1;
        }
    });
    assert_eq!(naturals.take(5).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
    assert_eq!(drops.get(), 1);
}

// ---------------------------------------------------------------------------------------------
// Nesting and misuse
// ---------------------------------------------------------------------------------------------

#[test]
fn a_panic_in_a_body_unwinds_the_suspended_coroutines_it_owns() {
    let drops = Rc::new(Cell::new(0));
    let held = Tally(Rc::clone(&drops));
    let mut outer = Coroutine::<(), (), ()>::new(move |_, ()| {
        let mut inner = Coroutine::<(), (), ()>::new(move |yielder, ()| {
            let _held = held;
            yielder.suspend(());
        });
        inner.resume(());
        panic!("the outer body gives up");
    });
    let payload = expect_panic(|| outer.resume(()));
    assert_eq!(panic_message(&*payload), "the outer body gives up");
    assert_eq!(drops.get(), 1);
    assert!(outer.is_done());
}

#[test]
fn dropping_a_suspended_coroutine_unwinds_the_suspended_coroutines_it_owns() {
    let log = Rc::new(RefCell::new(Vec::new()));
    let outer_log = Rc::clone(&log);
    let mut outer = Coroutine::<(), u32, ()>::new(move |yielder, ()| {
        let _outer = Labelled("outer", 0, Rc::clone(&outer_log));
        let middle_log = Rc::clone(&outer_log);
        let mut middle = Coroutine::<(), u32, ()>::new(move |yielder, ()| {
            let _middle = Labelled("middle", 0, Rc::clone(&middle_log));
            let inner_log = Rc::clone(&middle_log);
            let mut inner = Coroutine::<(), u32, ()>::new(move |yielder, ()| {
                let _inner = Labelled("inner", 0, inner_log);
                yielder.suspend(3);
            });
            let from_inner = inner.resume(()).into_yield().unwrap();
            yielder.suspend(from_inner * 10);
        });
        let from_middle = middle.resume(()).into_yield().unwrap();
        yielder.suspend(from_middle * 10);
    });
    assert_eq!(outer.resume(()), CoroutineResult::Yield(300));
    assert!(log.borrow().is_empty());
    drop(outer);
    // Each body's locals drop in reverse order: the owned coroutine (declared after the
    // labelled value) first, so the innermost goes first.
    assert_eq!(*log.borrow(), [("inner", 0), ("middle", 0), ("outer", 0)]);
}

thread_local! {
    static PARKED: RefCell<Option<Coroutine<(), (), ()>>> = const { RefCell::new(None) };
}

/// Parks a suspended coroutine in `PARKED` on a new thread and lets the thread exit; returns
/// how many times the value the coroutine held was dropped.
fn park_suspended_coroutine_and_exit_thread(touch_thread_local_first: bool) -> usize {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct SharedTally(Arc<AtomicUsize>);
    impl Drop for SharedTally {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    let drops = Arc::new(AtomicUsize::new(0));
    let held = SharedTally(Arc::clone(&drops));
    thread::spawn(move || {
        if touch_thread_local_first {
            // Thread-local destructors run in reverse order of first use: touching PARKED
            // before any coroutine exists makes it outlive greenweave's own thread-locals.
            PARKED.with(|_| ());
        }
        let mut co = Coroutine::<(), (), ()>::new(move |yielder, ()| {
            let _held = held;
            yielder.suspend(());
        });
        co.resume(());
        PARKED.with(|parked| *parked.borrow_mut() = Some(co));
    })
    .join()
    .expect("the thread exits cleanly");
    drops.load(Ordering::SeqCst)
}

#[test]
fn a_suspended_coroutine_in_a_thread_local_is_unwound_when_its_thread_exits() {
    assert_eq!(park_suspended_coroutine_and_exit_thread(false), 1);
}

#[test]
fn a_suspended_coroutine_in_a_thread_local_that_outlives_the_stack_pool_is_unwound_at_exit() {
    assert_eq!(park_suspended_coroutine_and_exit_thread(true), 1);
}

#[test]
fn a_coroutine_can_resume_another_inside_its_body() {
    let mut outer = Coroutine::<u32, u32, u32>::new(|yielder, mut input| {
        let mut inner = Coroutine::<u32, u32, u32>::new(|yielder, mut input| {
            let mut sum = 0;
            while input != 0 {
                sum += input;
                input = yielder.suspend(input * 2);
            }
            sum
        });
        loop {
            match inner.resume(input) {
                CoroutineResult::Yield(doubled) => input = yielder.suspend(doubled + 100),
                CoroutineResult::Return(sum) => return sum + 1_000,
            }
        }
    });
    assert_eq!(outer.resume(1), CoroutineResult::Yield(102));
    assert_eq!(outer.resume(5), CoroutineResult::Yield(110));
    assert_eq!(outer.resume(7), CoroutineResult::Yield(114));
    assert_eq!(outer.resume(0), CoroutineResult::Return(1_013));
}

#[test]
fn a_coroutine_can_be_resumed_by_one_context_then_another() {
    let counter = Coroutine::<u32, u32, ()>::new(|yielder, mut n| {
        loop {
            n = yielder.suspend(n + 1);
        }
    });
    // Started inside another coroutine, handed back out, then resumed from the test itself.
    type Counter = Coroutine<u32, u32, ()>;
    let mut carrier = Coroutine::<(), u32, Counter>::new(move |yielder, ()| {
        let mut counter = counter;
        let first = counter.resume(10).into_yield().unwrap();
        yielder.suspend(first);
        let second = counter.resume(20).into_yield().unwrap();
        yielder.suspend(second);
        counter
    });
    assert_eq!(carrier.resume(()).into_yield(), Some(11));
    assert_eq!(carrier.resume(()).into_yield(), Some(21));
    let mut counter = carrier.resume(()).into_return().unwrap();
    assert_eq!(counter.resume(30), CoroutineResult::Yield(31));
    drop(carrier);
    assert_eq!(counter.resume(40), CoroutineResult::Yield(41));
}

#[test]
fn suspending_through_another_coroutines_yielder_panics_outside_its_own_coroutine() {
    let mut outer = Coroutine::<(), u32, &'static str>::new(|yielder, ()| {
        let mut inner = Coroutine::<&Yielder<(), u32>, (), ()>::new(|_, outer_yielder| {
            outer_yielder.suspend(1);
        });
        let payload = expect_panic(|| inner.resume(yielder));
        assert!(
            panic_message(&*payload).contains("outside its own coroutine"),
            "{:?}",
            panic_message(&*payload)
        );
        assert!(inner.is_done());
        // The outer yielder still works from its own coroutine.
        yielder.suspend(2);
        "outer finished"
    });
    assert_eq!(outer.resume(()), CoroutineResult::Yield(2));
    assert_eq!(outer.resume(()), CoroutineResult::Return("outer finished"));
}

#[test]
fn try_new_makes_a_working_coroutine() {
    let mut co = Coroutine::<u8, u8, u8>::try_new(|yielder, n| yielder.suspend(n) + 1).unwrap();
    assert_eq!(co.resume(1), CoroutineResult::Yield(1));
    assert_eq!(co.resume(2), CoroutineResult::Return(3));
}
