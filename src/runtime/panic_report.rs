//! Naming the green thread in a panic's report.
//!
//! Owns: the panic hook that the first [`run`](crate::run) in the process installs, once,
//! around the hook in place then. In a green thread, when that hook is std's default, it
//! writes std's report with the green thread named:
//!
//! ```text
//! thread 'main' (4242), green thread 'worker-3' (id 4), panicked at src/main.rs:7:9:
//! no such user
//! note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
//! ```
//!
//! (`green thread <unnamed> (id 5)` for one spawned without a name, as the deadlock and stall
//! reports name it.) Anywhere else, and whenever the hook in place was not std's default, it
//! calls that hook unchanged.
//!
//! May not: replace a hook the program installed (the program's hook is called as it was);
//! install itself more than once; panic (a panic inside a panic hook aborts the process).
//!
//! A hook the program installs after its first `run` replaces this one, as `set_hook` says;
//! the program then reports green threads' panics as it chooses.
//!
//! Also owns: the line that explains tokio's "Cannot start a runtime from within a runtime" in
//! a green thread (after the report, whichever hook wrote it; once per process). Green threads
//! of one worker share its OS thread, and tokio allows one runtime in `block_on` per OS thread:
//! a second green thread that calls a client built on a hidden tokio runtime (the synchronous
//! `postgres` client, `r2d2_postgres`'s pooled connections) while another is parked inside a
//! call panics. Often that panic cannot even unwind: a `postgres::Client` dropped on the way
//! out (r2d2 drops the connection whose check-out test panicked) closes itself through its
//! runtime, panics the same way inside its destructor, and Rust aborts the process with "panic
//! in a destructor during cleanup", which names neither tokio nor the cause. No hook can turn
//! that abort into a panic (a destructor's panic during an unwind aborts by the language's
//! rule) nor keep tokio from panicking (its per-thread context is private), so the line says
//! why, and what to do, before the abort.

use std::backtrace::Backtrace;
use std::fmt::{self, Write as _};
use std::panic::{self, PanicHookInfo};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use super::scheduler;

type Hook = Box<dyn Fn(&PanicHookInfo<'_>) + Sync + Send + 'static>;

/// Installs the hook, the first time it is called in the process (from `Runtime::run`).
/// Does nothing on a thread that is panicking (std's `take_hook` would panic): the next `run`
/// installs it.
pub(crate) fn install() {
    static INSTALLED: Once = Once::new();
    if INSTALLED.is_completed() || std::thread::panicking() {
        return;
    }
    INSTALLED.call_once(|| {
        let previous = panic::take_hook();
        let previous_is_std_default = is_std_default(&previous);
        panic::set_hook(Box::new(move |info| {
            let green_thread = scheduler::describe_running_green_thread();
            match green_thread.as_deref().filter(|_| previous_is_std_default) {
                Some(green_thread) => report(info, green_thread),
                None => previous(info),
            }
            if green_thread.is_some() {
                explain_tokio_runtime_rule(info);
            }
        }));
    });
}

/// Whether `hook`, just taken with `take_hook`, is std's default hook. Call it right after that
/// `take_hook`: it takes the hook again, which (std's default being in place now) returns a box
/// of std's default hook, and compares the two trait objects, data pointer and vtable.
///
/// std boxes its default hook, a zero-sized function item, anew at each `take_hook` from the
/// same code, so two such boxes have the same (dangling) data pointer and the same vtable: the
/// answer is `true` for std's default. A hook the program set is a different type, so a
/// different vtable (its call entries point at its own code), unless the compiler merged two
/// byte-identical vtables, which only identical code allows: a hook that behaves as std's
/// does. Where std's vtable was emitted twice (codegen units, a second copy of std), the answer
/// is `false`, and the program's hook, std's own, is called: the report names the OS thread
/// only, as without greenweave. Unsure is always the program's hook.
fn is_std_default(hook: &Hook) -> bool {
    let std_default = panic::take_hook();
    std::ptr::eq(&**hook, &*std_default)
}

/// Writes std's panic report for a panic in green thread `green_thread` (named as the
/// deadlock report names it), honouring `RUST_BACKTRACE` as std's default hook does.
fn report(info: &PanicHookInfo<'_>, green_thread: &str) {
    let message = message(info).unwrap_or("Box<dyn Any>");
    let os_thread = std::thread::current();
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    let mut text = String::new();
    let _ = write!(
        text,
        "\nthread '{}' ({tid}), green thread {green_thread}, panicked at ",
        os_thread.name().unwrap_or("<unnamed>"),
    );
    if let Some(location) = info.location() {
        let _ = write!(text, "{location}");
    }
    let _ = writeln!(text, ":\n{message}");
    static FIRST_PANIC: AtomicBool = AtomicBool::new(true);
    match std::env::var("RUST_BACKTRACE").as_deref() {
        Err(_) | Ok("0") => {
            if FIRST_PANIC.swap(false, Ordering::Relaxed) {
                text.push_str(
                    "note: run with `RUST_BACKTRACE=1` environment variable to display a \
                     backtrace\n",
                );
            }
        }
        Ok("full") => {
            let _ = writeln!(text, "stack backtrace:\n{:#}", Backtrace::force_capture());
        }
        Ok(_) => {
            let backtrace = Backtrace::force_capture().to_string();
            let _ = writeln!(text, "stack backtrace:\n{}", short(&backtrace).trim_end());
            text.push_str(
                "note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose \
                 backtrace.\n",
            );
        }
    }
    // Through `eprint!`, so that a test harness that captures a test's output captures this
    // report too, as it does std's. `eprint!` panics when stderr fails (a closed pipe), and a
    // panic in a panic hook aborts: `IgnoreErrors` reports success to the formatter whatever
    // the write did, so the report is lost instead, as std's own hook loses it.
    eprint!("{}", IgnoreErrors(&text));
}

/// The message of a panic's payload (`&str` or `String`), if it has one.
fn message<'a>(info: &'a PanicHookInfo<'_>) -> Option<&'a str> {
    let payload = info.payload();
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}

/// tokio's panic when `block_on` is called on an OS thread where a runtime is entered.
const TOKIO_NESTED_RUNTIME: &str = "Cannot start a runtime from within a runtime";

/// After the report of a panic in a green thread: if it is tokio's nested-runtime panic, says
/// (once per process) why it happens between green threads, that it may end in an abort, and
/// what to do.
fn explain_tokio_runtime_rule(info: &PanicHookInfo<'_>) {
    static EXPLAINED: AtomicBool = AtomicBool::new(false);
    if !message(info).is_some_and(|message| message.contains(TOKIO_NESTED_RUNTIME))
        || EXPLAINED.swap(true, Ordering::Relaxed)
    {
        return;
    }
    let text = "greenweave: tokio allows one runtime in block_on per OS thread, and one is \
                already entered on this worker's OS thread, most often by another green thread \
                of this worker parked inside a call of a client built on a hidden tokio runtime \
                (the synchronous postgres client, r2d2_postgres's pooled connections). If this \
                panic unwinds through such a client (a postgres::Client closes itself through \
                its runtime when dropped; r2d2 drops the connection whose check-out test \
                panicked), its drop panics the same way and Rust aborts the process with \
                \"panic in a destructor during cleanup\". Give each such call an OS thread of \
                its own: at most one client in a call per worker \
                (Runtime::builder().workers(n)), or the call inside greenweave::unblock; or \
                use tokio-postgres in greenweave::block_on (feature tokio), any number per \
                worker.\n";
    eprint!("{}", IgnoreErrors(text));
}

/// `backtrace` (a `Backtrace`'s display) without the frames of the panic machinery, as std's
/// short backtraces: the frames up to std's `__rust_end_short_backtrace` marker are dropped,
/// and the rest renumbered from 0. Unchanged if the marker is not found.
fn short(backtrace: &str) -> String {
    let mut frames: Vec<Vec<&str>> = Vec::new();
    for line in backtrace.lines() {
        let starts_frame = line
            .trim_start()
            .split_once(": ")
            .is_some_and(|(number, _)| number.parse::<usize>().is_ok());
        match frames.last_mut() {
            Some(frame) if !starts_frame => frame.push(line),
            _ => frames.push(vec![line]),
        }
    }
    let Some(marker) = frames
        .iter()
        .position(|frame| frame[0].contains("__rust_end_short_backtrace"))
    else {
        return backtrace.to_owned();
    };
    let mut out = String::new();
    for (number, frame) in frames[marker + 1..].iter().enumerate() {
        let (_, symbol) = frame[0]
            .trim_start()
            .split_once(": ")
            .unwrap_or(("", frame[0]));
        let _ = writeln!(out, "{number:>4}: {symbol}");
        for line in &frame[1..] {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// Formats its text and tells the formatter it succeeded even when the destination failed.
struct IgnoreErrors<'a>(&'a str);

impl fmt::Display for IgnoreErrors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let _ = f.write_str(self.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::short;

    #[test]
    fn a_short_backtrace_starts_after_stds_marker_and_is_renumbered_from_zero() {
        let full = "   0: greenweave::runtime::panic_report::report\n             at ./src/x.rs:1:1\n   1: std::sys::backtrace::__rust_end_short_backtrace\n   2: rust_begin_unwind\n             at ./std/p.rs:2:2\n  10: user::code\n";
        assert_eq!(
            short(full),
            "   0: rust_begin_unwind\n             at ./std/p.rs:2:2\n   1: user::code\n"
        );
        let unmarked = "   0: user::code\n";
        assert_eq!(short(unmarked), unmarked);
    }
}
