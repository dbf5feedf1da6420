//! Handles that outlive their runtime: a value returned from `run` (a `JoinHandle`, a socket,
//! a channel with a remote sender) and used after it, in a later runtime on the same OS thread
//! or outside any. Each use either works in the new runtime or reports at once what happened;
//! none hangs, and none reaches an internal assertion.
//!
//! A test whose subject could wait for ever bounds the wait (a `time::timeout` inside the
//! second run, or the whole test on an OS thread given a generous limit), so a regression
//! fails instead of hanging. The limits only turn a hang into a failure; nothing here asserts
//! that anything is fast.

mod common;

use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use greenweave::io::Async;
use greenweave::net::{TcpListener, TcpStream, UdpSocket};
use greenweave::os::unix::net::{UnixDatagram, UnixStream};
use greenweave::sync::{Event, mpsc};
use greenweave::thread::{self, JoinError, JoinHandle};
use greenweave::time::timeout;

/// Longer than any wait here can take, even under qemu on a loaded machine; it only turns a
/// hang into a failure.
const LIMIT: Duration = Duration::from_secs(60);

const FOREVER: Duration = Duration::from_secs(3600);

/// Runs `f` on an OS thread of its own and returns its value, failing the test if it has not
/// finished within [`LIMIT`] (the thread is left behind then).
fn within_limit<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    result
        .recv_timeout(LIMIT)
        .unwrap_or_else(|error| panic!("the test body did not finish: {error}"))
}

/// Counts its own drops in a shared counter.
struct Tally(Rc<Cell<usize>>);

impl Drop for Tally {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

// ---------------------------------------------------------------------------------------------
// JoinHandle
// ---------------------------------------------------------------------------------------------

type HandleSlot = Rc<RefCell<Option<JoinHandle<()>>>>;

/// A guard whose destructor spawns a green thread that waits on `event` with `tally` alive,
/// and puts its handle in `slot`.
struct SpawnsWaiterOnDrop {
    event: Rc<Event>,
    tally: Rc<Cell<usize>>,
    slot: HandleSlot,
}

impl Drop for SpawnsWaiterOnDrop {
    fn drop(&mut self) {
        let event = self.event.clone();
        let tally = self.tally.clone();
        let waiter = greenweave::spawn(move || {
            let _tally = Tally(tally);
            event.wait();
        });
        *self.slot.borrow_mut() = Some(waiter);
    }
}

/// Runs a runtime that gives up on a green thread at shutdown, and returns that green thread's
/// handle, the event it waits on, and how many of its destructors have run.
///
/// The green thread is spawned by a destructor that runs during shutdown, and waits on an
/// event that nothing sets: shutdown finds it stuck with nothing that could wake it, and ends
/// it by force.
fn green_thread_given_up_at_shutdown() -> (JoinHandle<()>, Rc<Event>, Rc<Cell<usize>>) {
    let event = Rc::new(Event::new());
    let tally = Rc::new(Cell::new(0));
    let slot = HandleSlot::default();
    let guard = SpawnsWaiterOnDrop {
        event: event.clone(),
        tally: tally.clone(),
        slot: slot.clone(),
    };
    greenweave::run(move || {
        greenweave::spawn(move || {
            let _guard = guard;
            thread::sleep(FOREVER);
        });
        thread::yield_now(); // it starts and sleeps; shutdown cancels it
    });
    let handle = slot.borrow_mut().take().expect("the guard ran at shutdown");
    (handle, event, tally)
}

#[test]
fn join_reports_cancelled_for_a_green_thread_its_runtime_ended_by_force() {
    let (handle, _event, tally) = green_thread_given_up_at_shutdown();
    assert_eq!(tally.get(), 1, "its destructors ran");
    assert!(handle.is_finished());
    assert!(matches!(handle.join(), Err(JoinError::Cancelled)));
}

#[test]
fn cancel_in_a_later_run_of_a_green_thread_its_runtime_ended_by_force_changes_nothing() {
    let (handle, event, tally) = green_thread_given_up_at_shutdown();
    let outcome = greenweave::run(move || {
        handle.cancel();
        thread::yield_now(); // the scheduler runs whatever the cancel queued
        let outcome = handle.join();
        // The runtime keeps working, and reuses the handle's task allocation, if it can.
        let next = greenweave::spawn(|| 7);
        assert_eq!(next.join().unwrap(), 7);
        drop(event);
        outcome
    });
    assert!(matches!(outcome, Err(JoinError::Cancelled)));
    assert_eq!(tally.get(), 1);
}

#[test]
fn a_primitive_still_listing_a_green_thread_of_an_ended_runtime_skips_it_in_a_later_run() {
    let (handle, event, _tally) = green_thread_given_up_at_shutdown();
    greenweave::run(move || {
        let waiter = {
            let event = event.clone();
            greenweave::spawn(move || event.wait())
        };
        thread::yield_now(); // it waits, behind the green thread of the ended runtime
        event.set();
        thread::yield_now(); // the scheduler runs whatever `set` woke
        waiter.join().unwrap();
        drop(handle);
    });
}

#[test]
fn cancel_in_a_later_run_of_a_green_thread_cancelled_at_shutdown_changes_nothing() {
    let handle = greenweave::run(|| {
        let handle = greenweave::spawn(|| thread::sleep(FOREVER));
        thread::yield_now();
        handle
    });
    let outcome = greenweave::run(move || {
        handle.cancel();
        thread::yield_now();
        handle.join()
    });
    assert!(matches!(outcome, Err(JoinError::Cancelled)));
}

/// A green thread that keeps catching its cancellation is given up on by its runtime's
/// shutdown (its stack leaked); its handle, used in a later runtime, reports it cancelled.
#[test]
fn join_in_a_later_run_of_a_green_thread_its_shutdown_gave_up_on_reports_cancelled() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let handle = greenweave::run(|| {
            let handle = greenweave::spawn(|| {
                loop {
                    let _ = std::panic::catch_unwind(|| thread::sleep(FOREVER));
                }
            });
            thread::yield_now();
            handle
        });
        let finished = handle.is_finished();
        let joined = greenweave::run(move || handle.join());
        done.send((finished, matches!(joined, Err(JoinError::Cancelled))))
            .unwrap();
    });
    let outcome = finished
        .recv_timeout(Duration::from_secs(120))
        .expect("both runs returned");
    assert_eq!(outcome, (true, true));
}

// ---------------------------------------------------------------------------------------------
// I/O objects
// ---------------------------------------------------------------------------------------------

/// Runs `body` in a runtime, bounded by [`LIMIT`], and returns its value.
fn in_a_new_run<T: 'static>(body: impl FnOnce() -> T + 'static) -> T {
    greenweave::run(move || timeout(LIMIT, body).expect("the body finished within the limit"))
}

#[test]
fn a_unix_stream_pair_from_an_ended_runtime_carries_data_both_ways_in_the_next() {
    let (a, b) = greenweave::run(|| UnixStream::pair().unwrap());
    // More than the socket buffers hold: the writer waits for room while the reader waits for
    // data, so both directions park in the new runtime.
    const LEN: usize = 4 << 20;
    let received = in_a_new_run(move || {
        let mut a = a;
        let mut b = b;
        let writer = greenweave::spawn(move || {
            let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
            a.write_all(&data).unwrap();
        });
        let mut received = Vec::new();
        let mut buf = vec![0; 64 * 1024];
        while received.len() < LEN {
            let read = b.read(&mut buf).unwrap();
            assert!(read > 0, "the writer is still there");
            received.extend_from_slice(&buf[..read]);
        }
        writer.join().unwrap();
        received
    });
    assert_eq!(received.len(), LEN);
    assert!(
        received
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8)
    );
}

#[test]
fn a_tcp_stream_from_an_ended_runtime_reads_in_the_next() {
    let (client, server) = greenweave::run(|| {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    });
    let got = in_a_new_run(move || {
        let mut client = client;
        let mut server = server;
        // The reader waits first: the writer runs only once it has parked.
        greenweave::spawn(move || client.write_all(b"later").unwrap());
        let mut buf = [0; 5];
        server.read_exact(&mut buf).unwrap();
        buf
    });
    assert_eq!(&got, b"later");
}

#[test]
fn a_tcp_listener_from_an_ended_runtime_accepts_in_the_next() {
    let listener = greenweave::run(|| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap());
    let greeting = in_a_new_run(move || {
        let addr = listener.local_addr().unwrap();
        greenweave::spawn(move || {
            let mut client = TcpStream::connect(addr).unwrap();
            client.write_all(b"hi").unwrap();
        });
        let (mut server, _) = listener.accept().unwrap();
        let mut buf = [0; 2];
        server.read_exact(&mut buf).unwrap();
        buf
    });
    assert_eq!(&greeting, b"hi");
}

#[test]
fn a_udp_socket_from_an_ended_runtime_receives_in_the_next() {
    let (receiver, sender) = greenweave::run(|| {
        let receiver = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let sender = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        (receiver, sender)
    });
    let (len, from, expected_from) = in_a_new_run(move || {
        let to = receiver.local_addr().unwrap();
        let from: SocketAddr = sender.local_addr().unwrap();
        greenweave::spawn(move || sender.send_to(b"ping", to).unwrap());
        let mut buf = [0; 16];
        let (len, source) = receiver.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"ping");
        (len, source, from)
    });
    assert_eq!((len, from), (4, expected_from));
}

#[test]
fn a_unix_datagram_from_an_ended_runtime_receives_in_the_next() {
    let (a, b) = greenweave::run(|| UnixDatagram::pair().unwrap());
    let got = in_a_new_run(move || {
        greenweave::spawn(move || a.send(b"dgram").unwrap());
        let mut buf = [0; 16];
        let len = b.recv(&mut buf).unwrap();
        buf[..len].to_vec()
    });
    assert_eq!(got, b"dgram");
}

#[test]
fn an_async_fd_from_an_ended_runtime_waits_for_readable_in_the_next() {
    let (a, b) = greenweave::run(|| {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        (Async::new(a).unwrap(), Async::new(b).unwrap())
    });
    let got = in_a_new_run(move || {
        greenweave::spawn(move || (&a).write_all(b"ready").unwrap());
        b.readable().unwrap(); // parks until the writer has written
        let mut buf = [0; 5];
        (&b).read_exact(&mut buf).unwrap();
        buf
    });
    assert_eq!(&got, b"ready");
}

#[test]
fn an_io_object_from_an_ended_runtime_that_must_wait_outside_any_says_to_use_run() {
    let (_a, mut b) = greenweave::run(|| UnixStream::pair().unwrap());
    let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut buf = [0; 1];
        let _ = b.read(&mut buf); // nothing to read: it would have to wait
    }))
    .expect_err("a wait outside any runtime panics");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("outside a greenweave runtime") && message.contains("greenweave::run"),
        "{message:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Remote senders
// ---------------------------------------------------------------------------------------------

/// In a runtime: makes `send` run on another OS thread once this green thread has parked (a
/// green thread spawned now runs only then), and returns that OS thread's handle.
fn send_from_another_thread_once_parked<S: Send + 'static>(
    send: impl FnOnce() -> S + Send + 'static,
) -> std::thread::JoinHandle<S> {
    let (go, wait_for_go) = std::sync::mpsc::channel();
    let other = std::thread::spawn(move || {
        wait_for_go.recv().unwrap();
        send()
    });
    greenweave::spawn(move || go.send(()).unwrap());
    other
}

#[test]
fn a_remote_sender_from_an_ended_runtime_wakes_its_receiver_in_the_next() {
    let (receiver, remote) = greenweave::run(|| {
        let (sender, receiver) = mpsc::channel::<u32>();
        (receiver, sender.remote())
    });
    let got = in_a_new_run(move || {
        let other = send_from_another_thread_once_parked(move || remote.send(7).unwrap());
        let got = receiver.recv();
        other.join().unwrap();
        got
    });
    assert_eq!(got, Ok(7));
}

#[test]
fn a_remote_sender_alive_from_an_ended_runtime_is_not_taken_for_a_deadlock_in_the_next() {
    // `recv` with no deadline and nothing else to wait for: only the remote sender can end the
    // wait, so the runtime must count it, not report a deadlock.
    let got = within_limit(|| {
        let (receiver, remote) = greenweave::run(|| {
            let (sender, receiver) = mpsc::channel::<u32>();
            (receiver, sender.remote())
        });
        greenweave::run(move || {
            let other = send_from_another_thread_once_parked(move || {
                remote.send(1).unwrap();
                remote.send(2).unwrap();
                // Dropped here: the receiver then sees the channel disconnected.
            });
            let got: Vec<u32> = receiver.iter().collect();
            other.join().unwrap();
            got
        })
    });
    assert_eq!(got, [1, 2]);
}

#[test]
fn a_remote_sender_made_in_a_later_run_for_a_channel_of_an_ended_one_wakes_the_receiver() {
    let got = within_limit(|| {
        let (sender, receiver) = greenweave::run(|| {
            let (sender, receiver) = mpsc::channel::<u32>();
            drop(sender.remote()); // the channel's remote inbox belongs to this runtime
            (sender, receiver)
        });
        greenweave::run(move || {
            let remote = sender.remote();
            drop(sender);
            let other = send_from_another_thread_once_parked(move || remote.send(3).unwrap());
            let got: Vec<u32> = receiver.iter().collect();
            other.join().unwrap();
            got
        })
    });
    assert_eq!(got, [3]);
}
