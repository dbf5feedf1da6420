//! The `tracing` feature: a span entered in a green thread stays its own across parks, and the
//! scheduler's trace-level events name the green thread.
#![cfg(feature = "tracing")]

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::{info, info_span};
use tracing_subscriber::fmt::MakeWriter;

/// Everything the subscriber writes, shared with the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// A `fmt` subscriber writing into `captured`, at `level` and up, without time or colour: a
/// line is `LEVEL span{fields}:span{fields}: target: message fields`.
fn subscriber(
    captured: &Captured,
    level: tracing::Level,
) -> impl tracing::Subscriber + Send + Sync + 'static {
    tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(level)
        .with_ansi(false)
        .without_time()
        .finish()
}

#[test]
fn two_interleaving_green_threads_each_log_under_their_own_span() {
    let captured = Captured::default();
    tracing::subscriber::with_default(subscriber(&captured, tracing::Level::INFO), || {
        let outer = info_span!("caller");
        let _outer = outer.enter();
        greenweave::run(|| {
            let worker = |name: &'static str| {
                move || {
                    let span = info_span!("green", name);
                    let _entered = span.enter();
                    for step in 0..3 {
                        info!(step, "from {name}");
                        // Parks with the span entered; the other green thread runs meanwhile.
                        greenweave::thread::yield_now();
                    }
                }
            };
            let a = greenweave::spawn(worker("a"));
            let b = greenweave::spawn(worker("b"));
            a.join().unwrap();
            b.join().unwrap();
            info!("main again");
        });
        info!("after run");
    });
    let lines = captured.lines();
    let expected: Vec<String> = (0..3)
        .flat_map(|step| {
            ["a", "b"].map(|name| {
                format!(
                    " INFO caller:green{{name=\"{name}\"}}: tracing_spans: from {name} step={step}"
                )
            })
        })
        .chain([
            " INFO caller: tracing_spans: main again".to_owned(),
            " INFO caller: tracing_spans: after run".to_owned(),
        ])
        .collect();
    assert_eq!(lines, expected);
}

#[test]
fn a_span_held_across_a_park_is_not_current_in_the_green_thread_that_runs_next() {
    let captured = Captured::default();
    tracing::subscriber::with_default(subscriber(&captured, tracing::Level::INFO), || {
        greenweave::run(|| {
            let (sender, receiver) = greenweave::sync::mpsc::channel::<()>();
            let holder = greenweave::spawn(move || {
                let span = info_span!("held");
                let _entered = span.enter();
                receiver.recv().unwrap(); // parks inside the span
                info!("woken");
            });
            greenweave::thread::yield_now(); // the holder enters its span and parks
            info!("while it is parked");
            assert!(tracing::Span::current().is_none());
            sender.send(()).unwrap();
            holder.join().unwrap();
            info!("after it ended");
        });
    });
    assert_eq!(
        captured.lines(),
        [
            " INFO tracing_spans: while it is parked",
            " INFO held: tracing_spans: woken",
            " INFO tracing_spans: after it ended",
        ]
    );
}

#[test]
fn spawn_park_wake_and_finish_are_trace_events_naming_the_green_thread() {
    let captured = Captured::default();
    tracing::subscriber::with_default(subscriber(&captured, tracing::Level::TRACE), || {
        greenweave::run(|| {
            let child = greenweave::thread::Builder::new()
                .name("child".into())
                .spawn(greenweave::thread::park)
                .unwrap();
            // The child runs and parks; main wakes it, then waits for its end.
            greenweave::thread::yield_now();
            child.thread().unpark();
            child.join().unwrap();
        });
    });
    let events: Vec<String> = captured
        .lines()
        .into_iter()
        .filter(|line| line.contains(" greenweave: "))
        .collect();
    // Main is green thread 1, the child 2. Every park here ends by another green thread's act,
    // not by a clock, so the order is the same on every machine.
    assert_eq!(
        events,
        [
            "TRACE greenweave: spawn green_thread.id=1 green_thread.name=\"main\"",
            "TRACE greenweave: spawn green_thread.id=2 green_thread.name=\"child\"",
            "TRACE greenweave: park green_thread.id=2 green_thread.name=\"child\" \
             wait=in greenweave::thread::park, until a Thread::unpark",
            "TRACE greenweave: wake green_thread.id=2 green_thread.name=\"child\" \
             reason=Notified",
            "TRACE greenweave: park green_thread.id=1 green_thread.name=\"main\" \
             wait=joining green thread 2",
            "TRACE greenweave: finish green_thread.id=2 green_thread.name=\"child\"",
            "TRACE greenweave: wake green_thread.id=1 green_thread.name=\"main\" \
             reason=Notified",
            "TRACE greenweave: finish green_thread.id=1 green_thread.name=\"main\"",
        ]
    );
}
