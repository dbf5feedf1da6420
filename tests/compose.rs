//! One fiber core under three APIs: coroutines and greenlets running inside a green thread
//! park it (sleep, green I/O, channels), and the wake-up resumes exactly the stack that parked.

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::rc::Rc;
use std::time::Duration;

use greenweave::greenlet::{self, Greenlet};
use greenweave::net::{TcpListener, TcpStream};
use greenweave::sync::mpsc;
use greenweave::{Coroutine, CoroutineResult};

/// An ordered record of events, shared by the green threads of one runtime.
#[derive(Clone, Default)]
struct Log(Rc<RefCell<Vec<String>>>);

impl Log {
    fn push(&self, event: impl Into<String>) {
        self.0.borrow_mut().push(event.into());
    }

    fn events(&self) -> Vec<String> {
        self.0.borrow().clone()
    }
}

/// Pushes `name` to the log when dropped.
struct Guard(Log, &'static str);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.push(self.1);
    }
}

/// A connected green TCP pair on loopback.
fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let client = greenweave::spawn(move || TcpStream::connect(address).unwrap());
    let (server, _) = listener.accept().unwrap();
    (server, client.join().unwrap())
}

#[test]
fn a_generator_inside_a_green_thread_yields_lines_it_reads_from_a_green_socket() {
    greenweave::run(|| {
        let (reader, mut writer) = tcp_pair();
        let log = Log::default();
        let writer_log = log.clone();
        // The reader's word that it is about to read again. (A short sleep before each write
        // could let the writer get ahead under qemu: its deadline could pass before it parked.)
        let (read_again, reading_again) = mpsc::channel::<()>();
        let writing = greenweave::spawn(move || {
            for line in ["alpha", "beta", "gamma"] {
                // Each line only once the reader is about to read again: the generator's read
                // must park for every one (this green thread runs only once it has).
                reading_again.recv().unwrap();
                writer_log.push(format!("wrote {line}"));
                writeln!(writer, "{line}").unwrap();
            }
        });
        let lines = Coroutine::<(), String, ()>::new(move |yielder, ()| {
            for line in BufReader::new(reader).lines() {
                yielder.suspend(line.unwrap());
            }
        });
        read_again.send(()).unwrap();
        for line in lines {
            log.push(format!("got {line}"));
            // The writer is gone after the last line.
            let _ = read_again.send(());
        }
        writing.join().unwrap();
        assert_eq!(
            log.events(),
            [
                "wrote alpha",
                "got alpha",
                "wrote beta",
                "got beta",
                "wrote gamma",
                "got gamma"
            ]
        );
    });
}

#[test]
fn a_generator_parked_on_a_channel_lets_other_green_threads_run_and_resumes_with_the_message() {
    greenweave::run(|| {
        let (sender, receiver) = mpsc::channel::<u32>();
        let log = Log::default();
        let mut doubled = Coroutine::<(), u32, ()>::new(move |yielder, ()| {
            while let Ok(value) = receiver.recv() {
                yielder.suspend(value * 2);
            }
        });
        let sender_log = log.clone();
        greenweave::spawn(move || {
            for value in 1..=3 {
                sender_log.push(format!("send {value}"));
                sender.send(value).unwrap();
                greenweave::thread::yield_now();
            }
        });
        while let CoroutineResult::Yield(value) = doubled.resume(()) {
            log.push(format!("got {value}"));
        }
        assert_eq!(
            log.events(),
            ["send 1", "got 2", "send 2", "got 4", "send 3", "got 6"]
        );
    });
}

/// One rally of [`greenlets_ping_pong_inside_a_green_thread_with_both_sides_sleeping`], each
/// stroke after a sleep of `nap`, beside a ticker: the log, ticks included.
fn ping_pong_rally(nap: Duration) -> Vec<String> {
    let log = Log::default();
    let ticker_log = log.clone();
    let ticking = Rc::new(std::cell::Cell::new(true));
    let still_ticking = ticking.clone();
    let ticker = greenweave::spawn(move || {
        while still_ticking.get() {
            ticker_log.push("tick");
            greenweave::thread::sleep(Duration::from_millis(1));
        }
    });
    let pong_log = log.clone();
    let pong = Greenlet::new(move |mut ball: Option<u32>| {
        let main = greenlet::current::<Option<u32>>().parent().unwrap();
        while let Some(stroke) = ball.filter(|&stroke| stroke < 6) {
            greenweave::thread::sleep(nap);
            pong_log.push(format!("pong {stroke}"));
            ball = main.switch(Some(stroke + 1));
        }
        ball
    });
    let mut ball = 0;
    while ball < 6 {
        greenweave::thread::sleep(nap);
        log.push(format!("ping {ball}"));
        ball = pong.switch(Some(ball + 1)).unwrap();
    }
    assert_eq!(pong.switch(Some(ball)), Some(6));
    assert!(pong.is_dead());
    ticking.set(false);
    ticker.join().unwrap();
    log.events()
}

#[test]
fn greenlets_ping_pong_inside_a_green_thread_with_both_sides_sleeping() {
    greenweave::run(|| {
        // A sleep whose time is up before it could park only yields, and the ticker, asleep
        // itself, need not run then (under qemu 3 ms can pass on the way to the park): such a
        // rally is played again, with longer sleeps.
        let mut events = Vec::new();
        for nap in [3, 30, 300].map(Duration::from_millis) {
            events = ping_pong_rally(nap);
            let rally: Vec<&String> = events.iter().filter(|event| *event != "tick").collect();
            assert_eq!(
                rally,
                ["ping 0", "pong 1", "ping 2", "pong 3", "ping 4", "pong 5"]
            );
            let ticked_before = |stroke: &str| {
                let at = events.iter().position(|event| event == stroke).unwrap();
                events[at - 1] == "tick"
            };
            if ["pong 1", "ping 2", "pong 3"]
                .into_iter()
                .all(ticked_before)
            {
                break;
            }
        }
        // Both sides' sleeps parked the green thread: the ticker ran between the strokes.
        for stroke in ["pong 1", "ping 2", "pong 3"] {
            let at = events.iter().position(|event| event == stroke).unwrap();
            assert_eq!(
                events[at - 1],
                "tick",
                "no tick before {stroke}: {events:?}"
            );
        }
    });
}

#[test]
fn a_greenlet_parked_in_one_green_thread_is_still_current_when_it_wakes_while_another_has_its_own()
{
    greenweave::run(|| {
        let log = Log::default();
        let mut handles = Vec::new();
        // Each greenlet parks until the waker below says so, once both have parked. (A short
        // sleep here could let one wake before the other parked: under qemu its deadline could
        // pass before it parked, and then it went on at once.)
        let mut wake_ups = Vec::new();
        for name in ["a", "b"] {
            let log = log.clone();
            let (wake, woken) = greenweave::sync::oneshot::channel::<()>();
            wake_ups.push(wake);
            handles.push(greenweave::spawn(move || {
                let main_id = greenlet::current::<()>().id();
                assert!(greenlet::current::<()>().is_main());
                let child_log = log.clone();
                let child = Greenlet::new(move |()| {
                    let me = greenlet::current::<()>().id();
                    child_log.push(format!("{name} parks"));
                    woken.recv().expect("the waker sends once both have parked");
                    child_log.push(format!("{name} wakes"));
                    assert_eq!(greenlet::current::<()>().id(), me);
                    assert!(!greenlet::current::<()>().is_main());
                });
                child.switch(());
                assert!(child.is_dead());
                assert_eq!(greenlet::current::<()>().id(), main_id);
                assert!(greenlet::current::<()>().is_main());
            }));
        }
        let waker_log = log.clone();
        let waker = greenweave::spawn(move || {
            // Bounded, so that a greenlet that never parks fails the test rather than hang it.
            let logged = |event: &str| waker_log.events().iter().any(|e| e == event);
            for _ in 0..100_000 {
                if logged("a parks") && logged("b parks") {
                    break;
                }
                greenweave::thread::yield_now();
            }
            // Each pushes its "parks" right before its receive: both are parked now. One at a
            // time, a first.
            let mut wake_ups = wake_ups.into_iter();
            wake_ups.next().unwrap().send(()).unwrap();
            for _ in 0..100_000 {
                if logged("a wakes") {
                    break;
                }
                greenweave::thread::yield_now();
            }
            wake_ups.next().unwrap().send(()).unwrap();
        });
        for handle in handles {
            handle.join().unwrap();
        }
        waker.join().unwrap();
        // Both parked before either woke: the two greenlets were suspended at once, each the
        // running greenlet of its own green thread.
        assert_eq!(log.events(), ["a parks", "b parks", "a wakes", "b wakes"]);
    });
}

#[test]
fn switching_to_a_greenlet_of_another_green_thread_panics_saying_so() {
    greenweave::run(|| {
        let shared: Rc<RefCell<Option<Greenlet<()>>>> = Rc::default();
        let slot = shared.clone();
        // The owner stays alive, parked, until the stolen switch was tried. (A short sleep here
        // could end before: under qemu its deadline could pass before it parked.)
        let (done, until_done) = greenweave::sync::oneshot::channel::<()>();
        let owner = greenweave::spawn(move || {
            let child = Greenlet::new(|()| {
                let main = greenlet::current::<()>().parent().unwrap();
                main.switch(());
            });
            child.switch(());
            *slot.borrow_mut() = Some(child);
            until_done
                .recv()
                .expect("the test sends once the switch was tried");
        });
        greenweave::thread::yield_now();
        let stolen = shared
            .borrow_mut()
            .take()
            .expect("the owner left its greenlet");
        let error = greenweave::spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                stolen.switch(());
            }));
            // Dropping the last handle here does not kill it either (it would switch to it):
            // it is leaked.
            drop(stolen);
            result
        })
        .join()
        .unwrap()
        .unwrap_err();
        let message = error.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.contains("belongs to another green thread"),
            "{message}"
        );
        assert!(!owner.is_finished());
        done.send(()).unwrap();
        owner.join().unwrap();
    });
}

#[test]
fn a_green_thread_cancelled_while_parked_inside_a_generator_unwinds_both_stacks_in_order() {
    greenweave::run(|| {
        let log = Log::default();
        let (sender, receiver) = mpsc::channel::<u32>();
        let thread_log = log.clone();
        let parked = greenweave::spawn(move || {
            let _outer = Guard(thread_log.clone(), "green thread's guard dropped");
            let generator_log = thread_log.clone();
            let mut generator = Coroutine::<(), u32, ()>::new(move |yielder, ()| {
                let _inner = Guard(generator_log.clone(), "generator's guard dropped");
                generator_log.push("generator waits");
                let value = receiver.recv().unwrap();
                generator_log.push("generator woke (must not happen)");
                yielder.suspend(value);
            });
            generator.resume(());
            thread_log.push("resume returned (must not happen)");
        });
        greenweave::thread::yield_now();
        parked.cancel();
        assert!(parked.join().unwrap_err().is_cancelled());
        assert_eq!(
            log.events(),
            [
                "generator waits",
                "generator's guard dropped",
                "green thread's guard dropped"
            ]
        );
        // The receiver died with the generator's stack: the value comes back to the sender,
        // and nothing wakes the dead stack.
        assert_eq!(sender.send(7).unwrap_err().0, 7);
        greenweave::thread::sleep(Duration::from_millis(1));
        assert_eq!(log.events().len(), 3);
    });
}

#[test]
fn a_green_thread_cancelled_while_parked_inside_a_greenlet_unwinds_the_greenlet_first() {
    greenweave::run(|| {
        let log = Log::default();
        let thread_log = log.clone();
        let parked = greenweave::spawn(move || {
            let _outer = Guard(thread_log.clone(), "green thread's guard dropped");
            let child_log = thread_log.clone();
            let child = Greenlet::new(move |()| {
                let _inner = Guard(child_log.clone(), "greenlet's guard dropped");
                child_log.push("greenlet sleeps");
                greenweave::thread::sleep(Duration::from_secs(3600));
                child_log.push("greenlet woke (must not happen)");
            });
            child.switch(());
            thread_log.push("switch returned (must not happen)");
        });
        greenweave::thread::yield_now();
        parked.cancel();
        assert!(parked.join().unwrap_err().is_cancelled());
        assert_eq!(
            log.events(),
            [
                "greenlet sleeps",
                "greenlet's guard dropped",
                "green thread's guard dropped"
            ]
        );
    });
}

/// A destructor run by a green thread's cancellation switches to a greenlet that sleeps. Were
/// the switch made, the greenlet would see the unwind as its own (`panicking()` true) and its
/// sleep would return at once, as an unwinding green thread's does; the switch is refused
/// instead, saying why, and the greenlet never runs.
#[test]
fn a_greenlet_switch_in_a_destructor_during_a_cancellation_is_refused_instead_of_running_as_if_unwinding()
 {
    type Outcome = Rc<RefCell<Option<Result<Option<bool>, String>>>>;
    struct SwitchesOnDrop(Outcome);
    impl Drop for SwitchesOnDrop {
        fn drop(&mut self) {
            let sleeper = Greenlet::new(|_: Option<bool>| {
                greenweave::thread::sleep(Duration::from_millis(1));
                Some(std::thread::panicking())
            });
            let switched =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sleeper.switch(None)));
            let outcome = switched.map_err(|payload| match payload.downcast::<String>() {
                Ok(message) => *message,
                Err(_) => "a panic without a message".to_owned(),
            });
            *self.0.borrow_mut() = Some(outcome);
        }
    }
    greenweave::run(|| {
        let outcome = Outcome::default();
        let guard = SwitchesOnDrop(outcome.clone());
        let parked = greenweave::spawn(move || {
            let _guard = guard;
            greenweave::thread::sleep(Duration::from_secs(3600));
        });
        greenweave::thread::yield_now();
        parked.cancel();
        assert!(parked.join().unwrap_err().is_cancelled());
        let refused = outcome.take().unwrap().expect_err("the switch is refused");
        assert!(
            refused.contains("Greenlet::switch called while this thread is unwinding"),
            "{refused}"
        );
    });
}

#[test]
fn a_timeout_around_a_generator_whose_inner_read_never_ends_elapses_and_runs_its_destructors() {
    greenweave::run(|| {
        let (reader, _writer) = tcp_pair();
        let log = Log::default();
        let generator_log = log.clone();
        let outcome = greenweave::time::timeout(Duration::from_millis(10), || {
            let mut lines = Coroutine::<(), String, ()>::new(move |yielder, ()| {
                let _guard = Guard(generator_log, "generator's guard dropped");
                for line in BufReader::new(reader).lines() {
                    yielder.suspend(line.unwrap());
                }
            });
            lines.resume(())
        });
        assert!(
            outcome.is_err(),
            "the read never completes, so the scope elapses"
        );
        assert_eq!(log.events(), ["generator's guard dropped"]);
    });
}

#[test]
fn green_threads_parked_inside_generators_and_greenlets_are_unwound_when_run_ends() {
    let log = Log::default();
    let inner_log = log.clone();
    greenweave::run(move || {
        let generator_log = inner_log.clone();
        greenweave::spawn(move || {
            let mut generator = Coroutine::<(), (), ()>::new(move |_, ()| {
                let _guard = Guard(generator_log, "generator unwound");
                greenweave::thread::sleep(Duration::from_secs(3600));
            });
            generator.resume(());
        });
        let greenlet_log = inner_log.clone();
        greenweave::spawn(move || {
            let child = Greenlet::new(move |()| {
                let _guard = Guard(greenlet_log, "greenlet unwound");
                greenweave::thread::sleep(Duration::from_secs(3600));
            });
            child.switch(());
        });
        greenweave::thread::yield_now();
    });
    let mut events = log.events();
    events.sort();
    assert_eq!(events, ["generator unwound", "greenlet unwound"]);
}

#[test]
fn the_os_threads_greenlets_are_untouched_by_a_runtime_whose_green_threads_use_their_own() {
    let outside = Greenlet::new(|mut x: Option<u32>| {
        let main = greenlet::current::<Option<u32>>().parent().unwrap();
        loop {
            x = main.switch(x.map(|x| x * 10));
        }
    });
    assert_eq!(outside.switch(Some(1)), Some(10));
    let main_id = greenlet::current::<Option<u32>>().id();
    greenweave::run(|| {
        greenweave::spawn(|| {
            let inner = Greenlet::new(|x: Option<u32>| {
                greenweave::thread::sleep(Duration::from_millis(1));
                x.map(|x| x + 1)
            });
            assert_eq!(inner.switch(Some(1)), Some(2));
        })
        .join()
        .unwrap();
    });
    assert_eq!(greenlet::current::<Option<u32>>().id(), main_id);
    assert_eq!(outside.switch(Some(2)), Some(20));
}
