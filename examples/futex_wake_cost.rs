//! What a `FUTEX_WAKE` that wakes nobody costs in user space, with and without the `hooks`
//! feature (issue 22).
//!
//! Every std unlock of a contended lock, every `Condvar::notify_*` and every `Thread::unpark`
//! of a parked thread is a `syscall(SYS_futex, word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n)`.
//! With the feature that call reaches the binary's own `syscall` (the trampoline in
//! `asm/hooks_<arch>.S`), which, while no green thread waits on any futex, compares the system
//! call number, the futex command and the count of green waiters and jumps to libc's
//! `syscall`; without the feature it is libc's `syscall` straight away. This program makes N
//! such calls on a word nobody waits on (each returns 0: nobody woken), so that an instruction
//! counter run at N and 2N calls gives the user-space cost of one; the kernel's part is the
//! same either way and no user-space counter sees it.
//!
//! The same source builds both ways (no `required-features`): the feature alone decides
//! whether the trampoline is linked in. `--green-waiter` (feature builds only) makes the calls
//! from a green thread while another green thread of the runtime waits in a std `Condvar`:
//! every wake then goes through `greenweave_hook_futex` and the futex table's look-up before
//! the kernel's wake.
//!
//! ```sh
//! cargo run --release --example futex_wake_cost
//! cargo run --release --features hooks --example futex_wake_cost
//! cargo run --release --features hooks --example futex_wake_cost -- --green-waiter
//! cargo run --example futex_wake_cost -- --quick        # 1,000 calls, for CI and qemu
//!
//! # user-space instructions per call: the difference of two counts, N and 2N calls
//! cargo build --release --example futex_wake_cost
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/futex_wake_cost --calls 100000   # then --calls 200000
//! ```
//!
//! It prints the build (with or without the hooks), the calls and their wall time per call
//! (the calls alone, not the runtime's start; indicative only: most of it is the kernel's).

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: futex_wake_cost [--calls N] [--green-waiter] [--quick]

  --calls N        FUTEX_WAKE calls to make (default 100000)
  --green-waiter   make them while another green thread waits in a std Condvar (needs the
                   hooks feature)
  --quick          1000 calls, for CI and qemu";

/// The futex word the wakes name: nobody ever waits on it.
static NOBODY_WAITS_HERE: AtomicU32 = AtomicU32::new(0);

/// Makes `calls` wakes of one waiter on [`NOBODY_WAITS_HERE`], with std's arguments (its
/// `futex_wake`: the word, the private wake, a count of 1); returns how many were woken in
/// all (0). Out of line, so that a profiler can name it.
#[inline(never)]
fn wake_nobody(calls: u64) -> i64 {
    let word = NOBODY_WAITS_HERE.as_ptr();
    let mut woken = 0;
    for _ in 0..calls {
        // SAFETY: a wake reads no memory; the word is a live, aligned u32 all the same.
        woken += unsafe {
            libc::syscall(
                libc::SYS_futex,
                black_box(word),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            )
        };
    }
    woken
}

/// The wakes from a green thread while another green thread of the runtime is parked in a
/// std `Condvar` wait (so the count of green futex waiters is not zero).
/// [`wake_nobody`] and how long it took.
fn timed_wakes(calls: u64) -> (i64, Duration) {
    let start = Instant::now();
    let woken = wake_nobody(calls);
    (woken, start.elapsed())
}

#[cfg(feature = "hooks")]
fn wake_nobody_beside_a_green_waiter(calls: u64) -> (i64, Duration) {
    use std::sync::{Arc, Condvar, Mutex};

    greenweave::run(move || {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let waiter_side = pair.clone();
        let waiter = greenweave::spawn(move || {
            let (released, changed) = &*waiter_side;
            let mut released = released.lock().unwrap();
            while !*released {
                released = changed.wait(released).unwrap();
            }
        });
        greenweave::thread::yield_now(); // the waiter runs and parks in its futex wait
        let wakes = timed_wakes(calls);
        *pair.0.lock().unwrap() = true;
        pair.1.notify_one();
        waiter.join().unwrap();
        wakes
    })
}

#[cfg(not(feature = "hooks"))]
fn wake_nobody_beside_a_green_waiter(_calls: u64) -> (i64, Duration) {
    unreachable!("--green-waiter is refused without the hooks feature")
}

struct Options {
    calls: u64,
    green_waiter: bool,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        calls: 100_000,
        green_waiter: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--calls" => {
                let text = args.next().ok_or("--calls needs a value")?;
                options.calls = text
                    .parse()
                    .map_err(|_| format!("--calls: not a whole number: {text:?}"))?;
            }
            "--green-waiter" if cfg!(feature = "hooks") => options.green_waiter = true,
            "--green-waiter" => {
                return Err("--green-waiter needs the hooks feature \
                            (cargo run --features hooks --example futex_wake_cost)"
                    .into());
            }
            "--quick" => options.calls = 1_000,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(error) => {
            if !error.is_empty() {
                eprintln!("futex_wake_cost: {error}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (woken, elapsed) = if options.green_waiter {
        wake_nobody_beside_a_green_waiter(options.calls)
    } else {
        timed_wakes(options.calls)
    };
    let build = if cfg!(feature = "hooks") {
        "with the hooks (the syscall trampoline)"
    } else {
        "without the hooks (libc's syscall)"
    };
    let beside = if options.green_waiter {
        ", a green thread waiting on another futex"
    } else {
        ""
    };
    println!(
        "{} FUTEX_WAKE calls on a word nobody waits on, {build}{beside}: {:.0} ns per call",
        options.calls,
        per_call(elapsed, options.calls),
    );
    if woken != 0 {
        eprintln!("futex_wake_cost: the wakes woke {woken} waiters; expected none");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn per_call(elapsed: Duration, calls: u64) -> f64 {
    elapsed.as_nanos() as f64 / calls.max(1) as f64
}
