//! The cooperative budget: a green thread whose I/O and synchronisation calls never have to
//! wait still lets the other green threads run, every so many calls (tokio's coop budget; see
//! `runtime::budget`).
//!
//! Each test runs a loop of calls that never park beside a heartbeat, a green thread that
//! counts its turns, and asserts on the order of events: how many times the heartbeat ran
//! while the loop was in flight, or whether an acceptor ran between a connector's connects.
//! Never on durations.

use std::cell::{Cell, RefCell};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::rc::Rc;

use greenweave::net::{TcpListener, TcpStream, UdpSocket};
use greenweave::sync::{Barrier, Event, Group, Mutex, RwLock, Semaphore, WaitGroup, mpsc, oneshot};
use greenweave::thread::{self, JoinHandle};

/// Calls a loop makes in each test: many budgets' worth.
const CALLS: usize = 10_000;

/// The fewest heartbeat turns that count as "ran many times" during `CALLS` calls: one turn
/// per 1,000 calls, so any budget up to 1,000 passes (greenweave's is 128, as tokio's).
const MANY: usize = CALLS / 1_000;

/// A green thread that counts its turns, yielding after each, until it is stopped.
struct Heartbeat {
    ticks: Rc<Cell<usize>>,
    stop: Rc<Cell<bool>>,
    handle: JoinHandle<()>,
}

impl Heartbeat {
    fn start() -> Heartbeat {
        let ticks = Rc::new(Cell::new(0));
        let stop = Rc::new(Cell::new(false));
        let handle = {
            let (ticks, stop) = (ticks.clone(), stop.clone());
            greenweave::spawn(move || {
                while !stop.get() {
                    ticks.set(ticks.get() + 1);
                    thread::yield_now();
                }
            })
        };
        Heartbeat {
            ticks,
            stop,
            handle,
        }
    }

    /// How many turns the heartbeat took while `work` ran (on this green thread).
    fn ticks_during(&self, work: impl FnOnce()) -> usize {
        let before = self.ticks.get();
        work();
        self.ticks.get() - before
    }

    fn stop(self) {
        self.stop.set(true);
        self.handle.join().unwrap();
    }
}

/// Runs `call` `CALLS` times on the main green thread beside a heartbeat; returns the
/// heartbeat's turns meanwhile.
fn heartbeat_ticks_during_calls(mut call: impl FnMut()) -> usize {
    let heartbeat = Heartbeat::start();
    let ticks = heartbeat.ticks_during(|| {
        for _ in 0..CALLS {
            call();
        }
    });
    heartbeat.stop();
    ticks
}

#[test]
fn udp_sends_that_never_block_let_a_heartbeat_run_many_times() {
    greenweave::run(|| {
        let sender = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        // Nobody reads: once its buffer is full the kernel drops the datagrams, and a send on
        // loopback never waits.
        let sink = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let to = sink.local_addr().unwrap();
        let ticks = heartbeat_ticks_during_calls(|| {
            assert_eq!(sender.send_to(b"beat", to).unwrap(), 4);
        });
        assert!(
            ticks >= MANY,
            "the heartbeat ran {ticks} times in {CALLS} sends"
        );
    });
}

#[test]
fn tcp_reads_that_always_find_data_let_a_heartbeat_run_many_times() {
    greenweave::run(|| {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        // Everything the reads will take is there before the first one: none waits.
        let sent = vec![7u8; CALLS];
        (&client).write_all(&sent).unwrap();
        let mut received = Vec::with_capacity(CALLS);
        let ticks = heartbeat_ticks_during_calls(|| {
            let mut byte = [0u8; 1];
            assert_eq!((&server).read(&mut byte).unwrap(), 1);
            received.push(byte[0]);
        });
        assert_eq!(received, sent, "every byte arrives, in order");
        assert!(
            ticks >= MANY,
            "the heartbeat ran {ticks} times in {CALLS} reads"
        );
    });
}

/// What the connector and the acceptor did, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Connected,
    Accepted,
}

#[test]
fn connects_to_a_listener_on_the_same_thread_let_its_acceptor_take_them_as_they_come() {
    const CONNECTS: usize = 600;
    let steps = greenweave::run(|| {
        // A backlog that holds every connection: without the budget the connects never have to
        // wait, and the acceptor would run only after the last of them.
        let listener = TcpListener::bind_with_backlog((Ipv4Addr::LOCALHOST, 0), 1024).unwrap();
        let addr = listener.local_addr().unwrap();
        let steps = Rc::new(RefCell::new(Vec::new()));
        let acceptor = {
            let steps = steps.clone();
            greenweave::spawn(move || {
                for _ in 0..CONNECTS {
                    let (stream, _) = listener.accept().unwrap();
                    drop(stream);
                    steps.borrow_mut().push(Step::Accepted);
                }
            })
        };
        // The acceptor runs first and parks in `accept`, waiting for epoll to say a
        // connection is there: a spent budget must poll epoll for it to run again.
        thread::yield_now();
        assert!(steps.borrow().is_empty());
        for _ in 0..CONNECTS {
            drop(TcpStream::connect(addr).unwrap());
            steps.borrow_mut().push(Step::Connected);
        }
        acceptor.join().unwrap();
        Rc::try_unwrap(steps).unwrap().into_inner()
    });
    let accepted = steps.iter().filter(|&&step| step == Step::Accepted).count();
    assert_eq!(accepted, CONNECTS, "every connection is accepted");
    let first_accept = steps
        .iter()
        .position(|&step| step == Step::Accepted)
        .unwrap();
    assert!(
        first_accept < CONNECTS / 2,
        "the acceptor first ran after {first_accept} connects"
    );
    // Accepts interleave with connects: many separate runs of accepts, not one at the end.
    let accept_runs = steps
        .windows(2)
        .filter(|pair| pair == &[Step::Connected, Step::Accepted])
        .count();
    assert!(
        accept_runs >= 3,
        "the acceptor ran between connects only {accept_runs} times: {steps:?}"
    );
}

/// What a heartbeat and an accept loop did, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    Tick,
    Accepted,
}

#[test]
fn an_accept_loop_takes_every_pending_connection_in_one_turn() {
    // More than two budgets' worth, and fewer than the per-turn bound of accepts (4096); few
    // enough for a default open-file limit of 1024 (each connection is two fds here).
    const PENDING: usize = 300;
    let turns = greenweave::run(|| {
        let listener = TcpListener::bind_with_backlog((Ipv4Addr::LOCALHOST, 0), 1024).unwrap();
        let addr = listener.local_addr().unwrap();
        // Every connection is queued (handshake done) before the accept loop starts.
        let clients: Vec<TcpStream> = (0..PENDING)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let turns = Rc::new(RefCell::new(Vec::new()));
        let stop = Rc::new(Cell::new(false));
        let heartbeat = {
            let (turns, stop) = (turns.clone(), stop.clone());
            greenweave::spawn(move || {
                while !stop.get() {
                    turns.borrow_mut().push(Turn::Tick);
                    thread::yield_now();
                }
            })
        };
        thread::yield_now();
        let mut served = Vec::new();
        for _ in 0..PENDING {
            served.push(listener.accept().unwrap().0);
            turns.borrow_mut().push(Turn::Accepted);
        }
        stop.set(true);
        heartbeat.join().unwrap();
        drop((clients, served));
        Rc::try_unwrap(turns).unwrap().into_inner()
    });
    let first = turns
        .iter()
        .position(|&turn| turn == Turn::Accepted)
        .unwrap();
    let last = turns
        .iter()
        .rposition(|&turn| turn == Turn::Accepted)
        .unwrap();
    let ticks_between = turns[first..=last]
        .iter()
        .filter(|&&turn| turn == Turn::Tick)
        .count();
    assert_eq!(
        ticks_between, 0,
        "the heartbeat ran {ticks_between} times between the first and the last of {PENDING} \
         accepts of connections already queued: the accept loop stopped before EAGAIN"
    );
}

#[test]
fn an_accept_loop_that_keeps_failing_lets_a_heartbeat_run_many_times() {
    greenweave::run(|| {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        // A listening socket shut down for reading stops listening: every accept fails at once
        // with EINVAL, and nothing is there to wait for.
        // SAFETY: a plain system call on an fd the listener owns and keeps open.
        let rc = unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RD) };
        assert_eq!(rc, 0, "shutdown: {}", std::io::Error::last_os_error());
        let ticks = heartbeat_ticks_during_calls(|| {
            let error = listener.accept().unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
        });
        assert!(
            ticks >= MANY,
            "the heartbeat ran {ticks} times in {CALLS} failed accepts"
        );
    });
}

#[test]
fn receives_from_a_channel_that_always_has_a_message_let_a_heartbeat_run_many_times() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel();
        for n in 0..CALLS {
            tx.send(n).unwrap();
        }
        let mut received = Vec::with_capacity(CALLS);
        let ticks = heartbeat_ticks_during_calls(|| received.push(rx.recv().unwrap()));
        assert_eq!(
            received,
            (0..CALLS).collect::<Vec<_>>(),
            "nothing lost or reordered"
        );
        assert!(
            ticks >= MANY,
            "the heartbeat ran {ticks} times in {CALLS} receives"
        );
    });
}

#[test]
fn sends_on_a_bounded_channel_with_room_let_a_heartbeat_run_many_times() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::sync_channel(1);
        let mut received = Vec::with_capacity(CALLS);
        let mut next = 0;
        let ticks = heartbeat_ticks_during_calls(|| {
            tx.send(next).unwrap();
            next += 1;
            // `try_recv` never spends the budget: the sends alone make the heartbeat run.
            received.push(rx.try_recv().unwrap());
        });
        assert_eq!(
            received,
            (0..CALLS).collect::<Vec<_>>(),
            "nothing lost or reordered"
        );
        assert!(
            ticks >= MANY,
            "the heartbeat ran {ticks} times in {CALLS} sends"
        );
    });
}

#[test]
fn every_waiting_sync_call_that_need_not_wait_lets_a_heartbeat_run_many_times() {
    greenweave::run(|| {
        let mutex = Mutex::new(0);
        let rwlock = RwLock::new(0);
        let semaphore = Semaphore::new(1);
        let barrier = Barrier::new(1);
        let event = Event::new();
        event.set();
        let wait_group = WaitGroup::new();
        let group = Group::new();
        type Call<'a> = (&'a str, Box<dyn FnMut() + 'a>);
        let calls: Vec<Call<'_>> = vec![
            ("Mutex::lock", Box::new(|| *mutex.lock().unwrap() += 1)),
            ("RwLock::read", Box::new(|| drop(rwlock.read().unwrap()))),
            ("RwLock::write", Box::new(|| *rwlock.write().unwrap() += 1)),
            ("Semaphore::acquire", Box::new(|| drop(semaphore.acquire()))),
            (
                "Barrier::wait",
                Box::new(|| assert!(barrier.wait().is_leader())),
            ),
            ("Event::wait", Box::new(|| event.wait())),
            ("WaitGroup::wait", Box::new(|| wait_group.wait())),
            ("Group::join", Box::new(|| group.join())),
            (
                "oneshot::Receiver::recv",
                Box::new(|| {
                    let (tx, rx) = oneshot::channel();
                    tx.send(1).unwrap();
                    assert_eq!(rx.recv(), Ok(1));
                }),
            ),
        ];
        for (name, call) in calls {
            let ticks = heartbeat_ticks_during_calls(call);
            assert!(
                ticks >= MANY,
                "{name}: the heartbeat ran {ticks} times in {CALLS} calls"
            );
        }
        assert_eq!(*mutex.lock().unwrap(), CALLS);
        assert_eq!(*rwlock.read().unwrap(), CALLS);
    });
}

#[test]
fn joins_of_finished_green_threads_let_a_heartbeat_run_many_times() {
    greenweave::run(|| {
        let handles: Vec<JoinHandle<usize>> =
            (0..CALLS).map(|n| greenweave::spawn(move || n)).collect();
        while !handles.iter().all(JoinHandle::is_finished) {
            thread::yield_now();
        }
        let mut handles = handles.into_iter();
        let mut joined = Vec::with_capacity(CALLS);
        let ticks =
            heartbeat_ticks_during_calls(|| joined.push(handles.next().unwrap().join().unwrap()));
        assert_eq!(joined, (0..CALLS).collect::<Vec<_>>());
        assert!(
            ticks >= MANY,
            "the heartbeat ran {ticks} times in {CALLS} joins"
        );
    });
}

#[test]
fn try_calls_and_unbounded_sends_never_yield() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel();
        let (bounded_tx, bounded_rx) = mpsc::sync_channel(1);
        let mutex = Mutex::new(());
        let rwlock = RwLock::new(());
        let semaphore = Semaphore::new(1);
        let ticks = heartbeat_ticks_during_calls(|| {
            tx.send(1).unwrap();
            assert_eq!(rx.try_recv(), Ok(1));
            bounded_tx.try_send(2).unwrap();
            assert_eq!(bounded_rx.try_recv(), Ok(2));
            drop(mutex.try_lock().unwrap());
            drop(rwlock.try_read().unwrap());
            drop(rwlock.try_write().unwrap());
            drop(semaphore.try_acquire().unwrap());
        });
        assert_eq!(
            ticks, 0,
            "a try_ call or an unbounded send let another green thread run"
        );
    });
}

#[test]
fn a_green_thread_that_yields_within_its_budget_never_yields_for_it() {
    const ROUNDS: usize = 100;
    greenweave::run(|| {
        let mutex = Mutex::new(0);
        let heartbeat = Heartbeat::start();
        let ticks = heartbeat.ticks_during(|| {
            for _ in 0..ROUNDS {
                // Fewer calls than a budget between two yields: each resume refills it, so
                // the heartbeat runs only at the explicit yields, once each.
                for _ in 0..100 {
                    *mutex.lock().unwrap() += 1;
                }
                thread::yield_now();
            }
        });
        heartbeat.stop();
        assert_eq!(ticks, ROUNDS);
    });
}

#[test]
fn outside_a_runtime_calls_that_need_not_wait_never_yield() {
    // A yield outside a runtime would panic ("called outside a greenweave runtime").
    let (socket, to) = greenweave::run(|| {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let to: SocketAddr = socket.local_addr().unwrap();
        (socket, to)
    });
    let mutex = Mutex::new(0);
    let (tx, rx) = mpsc::channel();
    let event = Event::new();
    event.set();
    for n in 0..CALLS {
        *mutex.lock().unwrap() += 1;
        tx.send(n).unwrap();
        assert_eq!(rx.recv(), Ok(n));
        event.wait();
        socket.send_to(b"x", to).unwrap();
    }
    assert_eq!(*mutex.lock().unwrap(), CALLS);
}
