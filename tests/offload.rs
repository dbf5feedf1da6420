//! The runtime's blocking pool behind `unblock`: how many calls it runs at once, and what
//! happens to a call the green thread gives up on (a timeout, a cancellation).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

use greenweave::Runtime;
use greenweave::thread::JoinError;
use greenweave::time::timeout;

/// How long a helper waits for something the test controls before giving up: long enough that
/// only a broken runtime reaches it, so a failure shows up as a wrong value, not a hung test.
const SAFETY_NET: Duration = Duration::from_secs(20);

/// Counts the calls inside the pool: how many run now, and the most that ever ran at once.
/// Each call, once in, waits until `until` calls have been in at the same time (or, for the
/// calls after the first `until`, goes straight through), so that a pool of `until` threads
/// must run `until` calls at once for any of them to finish.
struct Latch {
    state: Mutex<LatchState>,
    changed: Condvar,
    until: usize,
}

#[derive(Default)]
struct LatchState {
    running: usize,
    most: usize,
    opened: bool,
}

impl Latch {
    fn new(until: usize) -> Latch {
        Latch {
            state: Mutex::new(LatchState::default()),
            changed: Condvar::new(),
            until,
        }
    }

    /// One call's life in the pool; returns whether the latch opened (false: it waited in
    /// vain for `SAFETY_NET`).
    fn pass(&self) -> bool {
        let mut state = self.state.lock().unwrap();
        state.running += 1;
        state.most = state.most.max(state.running);
        if state.running >= self.until {
            state.opened = true;
            self.changed.notify_all();
        }
        let (mut state, _) = self
            .changed
            .wait_timeout_while(state, SAFETY_NET, |state| !state.opened)
            .unwrap();
        // Stay in a moment, so that a pool larger than `until` would show more at once.
        drop(state);
        std::thread::sleep(Duration::from_millis(5));
        state = self.state.lock().unwrap();
        state.running -= 1;
        state.opened
    }
}

#[test]
fn a_pool_of_n_threads_runs_n_blocking_calls_at_once_and_never_more() {
    const N: usize = 4;
    const CALLS: usize = N + 3;
    let runtime = Runtime::builder().max_blocking_threads(N).build().unwrap();
    let latch = Arc::new(Latch::new(N));
    let opened = runtime.run({
        let latch = latch.clone();
        move || {
            let calls: Vec<_> = (0..CALLS)
                .map(|_| {
                    let latch = latch.clone();
                    greenweave::spawn(move || greenweave::unblock(move || latch.pass()))
                })
                .collect();
            calls
                .into_iter()
                .map(|call| call.join().unwrap())
                .collect::<Vec<bool>>()
        }
    });
    assert_eq!(
        opened, [true; CALLS],
        "every call completed, after N were in at once"
    );
    assert_eq!(
        latch.state.lock().unwrap().most,
        N,
        "never more than N at once"
    );
}

#[test]
fn a_burst_of_calls_meeting_an_idle_helper_gets_a_thread_for_each_call_the_idle_ones_cannot_take() {
    // One helper has gone idle; then eight calls arrive at once, each waiting for all eight to
    // run. The idle helper can take one of them: the other seven need threads of their own,
    // even while that helper, already told there is work, has not woken up yet.
    const N: usize = 8;
    let runtime = Runtime::builder().max_blocking_threads(N).build().unwrap();
    let latch = Arc::new(Latch::new(N));
    let opened = runtime.run({
        let latch = latch.clone();
        move || {
            greenweave::unblock(|| ());
            // Lets the helper that ran it go back to waiting for work (idle).
            greenweave::thread::sleep(Duration::from_millis(50));
            let calls: Vec<_> = (0..N)
                .map(|_| {
                    let latch = latch.clone();
                    greenweave::spawn(move || greenweave::unblock(move || latch.pass()))
                })
                .collect();
            calls
                .into_iter()
                .map(|call| call.join().unwrap())
                .collect::<Vec<bool>>()
        }
    });
    assert_eq!(opened, [true; N], "all eight calls ran at once");
}

#[test]
fn a_pool_of_one_thread_runs_blocking_calls_one_at_a_time_in_the_order_they_were_made() {
    let runtime = Runtime::builder().max_blocking_threads(1).build().unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    runtime.run({
        let events = events.clone();
        move || {
            let calls: Vec<_> = (0..4)
                .map(|call| {
                    let events = events.clone();
                    greenweave::spawn(move || {
                        greenweave::unblock(move || {
                            events.lock().unwrap().push(format!("start {call}"));
                            // Long enough that a second thread, if there were one, would start
                            // a call meanwhile.
                            std::thread::sleep(Duration::from_millis(5));
                            events.lock().unwrap().push(format!("end {call}"));
                        })
                    })
                })
                .collect();
            for call in calls {
                call.join().unwrap();
            }
        }
    });
    let expected: Vec<String> = (0..4)
        .flat_map(|call| [format!("start {call}"), format!("end {call}")])
        .collect();
    assert_eq!(*events.lock().unwrap(), expected);
}

#[test]
fn a_pool_of_zero_threads_is_refused_by_build() {
    let error = Runtime::builder()
        .max_blocking_threads(0)
        .build()
        .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(
        error.to_string().contains("max_blocking_threads"),
        "{error}"
    );
}

/// A value whose drop reports which OS thread dropped it and whether the helper that made it
/// had been released by then.
struct Reported {
    released: bool,
    drops: Arc<AtomicUsize>,
    report: mpsc::Sender<(std::thread::ThreadId, bool)>,
}

impl Drop for Reported {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        let _ = self
            .report
            .send((std::thread::current().id(), self.released));
    }
}

#[test]
fn a_timeout_around_unblock_returns_before_the_call_ends_and_the_late_result_is_dropped_once_by_the_helper()
 {
    // A call the helper has not started by the deadline is dropped unrun (the next test); the
    // deadline doubles until the call did start first, and every round checks what happened.
    let mut deadline = Duration::from_millis(10);
    loop {
        let drops = Arc::new(AtomicUsize::new(0));
        let (report, reports) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let drops_seen = drops.clone();
        let started = greenweave::run(move || {
            let outcome = timeout(deadline, move || {
                greenweave::unblock(move || Reported {
                    released: released.recv_timeout(SAFETY_NET).is_ok(),
                    drops: drops_seen,
                    report,
                })
            });
            assert!(
                outcome.is_err(),
                "the deadline passed while the call blocked"
            );
            assert_eq!(drops.load(Ordering::SeqCst), 0, "the call is still blocked");
            release.send(()).unwrap();
            match greenweave::unblock(move || reports.recv_timeout(SAFETY_NET)) {
                Ok((dropped_on, was_released)) => {
                    assert!(
                        was_released,
                        "timeout returned before the test released the call"
                    );
                    assert_ne!(
                        dropped_on,
                        std::thread::current().id(),
                        "the late result was dropped by the helper, not the runtime's thread"
                    );
                    assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped exactly once");
                    true
                }
                // The call never started: its closure (and the report's sender) was dropped.
                Err(mpsc::RecvTimeoutError::Disconnected) => false,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("the call neither ran nor ended"),
            }
        });
        if started {
            break;
        }
        deadline *= 2;
    }
}

#[test]
fn cancelling_a_green_thread_waiting_in_unblock_ends_it_before_the_call_returns() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (report, reports) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let (start, started) = mpsc::channel::<()>();
    let drops_seen = drops.clone();
    greenweave::run(move || {
        let waiter = greenweave::spawn(move || {
            greenweave::unblock(move || {
                start.send(()).unwrap();
                Reported {
                    released: released.recv_timeout(SAFETY_NET).is_ok(),
                    drops: drops_seen,
                    report,
                }
            })
        });
        greenweave::unblock(move || started.recv_timeout(SAFETY_NET)).unwrap();
        waiter.cancel();
        assert!(matches!(waiter.join(), Err(JoinError::Cancelled)));
        assert_eq!(drops.load(Ordering::SeqCst), 0, "the call is still blocked");
        release.send(()).unwrap();
        let (_, was_released) =
            greenweave::unblock(move || reports.recv_timeout(SAFETY_NET).unwrap());
        assert!(
            was_released,
            "the join returned before the test released the call"
        );
        assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped exactly once");
    });
}

#[test]
fn a_call_given_up_on_before_a_helper_took_it_never_runs_and_its_closure_is_dropped_once() {
    struct Captured(Arc<AtomicUsize>);
    impl Drop for Captured {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let runtime = Runtime::builder().max_blocking_threads(1).build().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let (release, released) = mpsc::channel::<()>();
    let (ran_seen, drops_seen) = (ran.clone(), drops.clone());
    runtime.run(move || {
        // The pool's one thread is busy until released; the second call waits in the queue.
        let busy = greenweave::spawn(move || {
            greenweave::unblock(move || released.recv_timeout(SAFETY_NET).is_ok())
        });
        while greenweave::runtime::offload::jobs_handed_out() == 0 {
            greenweave::thread::yield_now();
        }
        let captured = Captured(drops_seen);
        let queued = timeout(Duration::from_millis(10), move || {
            greenweave::unblock(move || {
                let _captured = captured;
                ran_seen.fetch_add(1, Ordering::SeqCst);
            })
        });
        assert!(queued.is_err());
        release.send(()).unwrap();
        assert!(busy.join().unwrap(), "the first call was released");
        // The pool's one thread has now gone past the abandoned call; one more call behind it
        // proves it.
        greenweave::unblock(|| ());
    });
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the abandoned call never ran"
    );
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "its closure was dropped once"
    );
}

#[test]
fn ip_literal_strings_connect_without_the_pool_and_hostnames_resolve_on_it() {
    use greenweave::net::{TcpListener, TcpStream, UdpSocket};
    use greenweave::runtime::offload::jobs_handed_out;

    greenweave::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let before = jobs_handed_out();
        let literal = format!("127.0.0.1:{port}");
        for stream in [
            TcpStream::connect(literal.as_str()),
            TcpStream::connect(literal.clone()),
            TcpStream::connect(&literal),
            TcpStream::connect(("127.0.0.1", port)),
            TcpStream::connect((String::from("127.0.0.1"), port)),
        ] {
            let stream = stream.unwrap();
            assert_eq!(stream.peer_addr().unwrap().port(), port);
        }
        // An IPv6 literal is parsed too; whether the machine has IPv6 decides only the result.
        let v6 = UdpSocket::bind(("::1", 0));
        if let Ok(socket) = &v6 {
            assert_eq!(
                socket.local_addr().unwrap().ip(),
                std::net::Ipv6Addr::LOCALHOST
            );
        }
        let _ = UdpSocket::bind("[::1]:0");
        assert_eq!(jobs_handed_out(), before, "no literal went to the pool");

        let by_name = TcpStream::connect(format!("localhost:{port}")).unwrap();
        assert_eq!(by_name.peer_addr().unwrap().port(), port);
        assert!(
            jobs_handed_out() > before,
            "the hostname was resolved on the pool"
        );
    });
}
