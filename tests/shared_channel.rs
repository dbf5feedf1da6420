//! `sync::shared`: channels both of whose ends are `Send`, between runtimes on different OS
//! threads, within one runtime, and with a plain OS thread on one end: what each delivers, in
//! what order, how each fails, and that nothing is lost or delivered twice when a wait times
//! out or is cancelled.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use greenweave::sync::shared::{self, RecvError, RecvTimeoutError, TryRecvError, TrySendError};
use greenweave::thread;
use greenweave::time::timeout;

/// Counts its drops, and remembers the OS thread of the last one.
struct Tally {
    drops: Arc<AtomicUsize>,
    dropped_on: Arc<Mutex<Option<ThreadId>>>,
}

impl Tally {
    fn new(drops: &Arc<AtomicUsize>) -> Tally {
        Tally {
            drops: drops.clone(),
            dropped_on: Arc::new(Mutex::new(None)),
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        *self.dropped_on.lock().unwrap() = Some(std::thread::current().id());
    }
}

/// Runs `body` in its own runtime on a new OS thread.
fn runtime_thread<T: Send + 'static>(
    body: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || greenweave::run(body))
}

#[test]
fn two_runtimes_on_two_os_threads_play_ping_pong() {
    const ROUNDS: u32 = 1_000;
    let (to_echo, echo_inbox) = shared::channel::<u32>();
    let (to_main, main_inbox) = shared::channel::<u32>();
    let echo = runtime_thread(move || {
        let mut echoed = 0;
        for n in echo_inbox {
            to_main.send(n + 1).unwrap();
            echoed += 1;
        }
        echoed
    });
    greenweave::run(move || {
        for n in 0..ROUNDS {
            to_echo.send(n * 2).unwrap();
            assert_eq!(main_inbox.recv(), Ok(n * 2 + 1));
        }
    });
    assert_eq!(echo.join().unwrap(), ROUNDS);
}

#[test]
fn a_stream_of_values_crosses_runtimes_in_the_order_it_was_sent() {
    const VALUES: u32 = 20_000;
    let (tx, rx) = shared::channel();
    let producer = runtime_thread(move || {
        for n in 0..VALUES {
            tx.send(n).unwrap();
            if n % 1000 == 0 {
                thread::yield_now();
            }
        }
    });
    let got: Vec<u32> = greenweave::run(move || rx.iter().collect());
    producer.join().unwrap();
    assert_eq!(got, (0..VALUES).collect::<Vec<_>>());
}

#[test]
fn many_green_threads_on_each_side_deliver_every_value_exactly_once_in_each_senders_order() {
    const SENDERS: u32 = 8;
    const RECEIVERS: usize = 8;
    const PER_SENDER: u32 = 500;
    let (tx, rx) = shared::sync_channel::<(u32, u32)>(4);
    let producers = runtime_thread(move || {
        let handles: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let tx = tx.clone();
                greenweave::spawn(move || {
                    for n in 0..PER_SENDER {
                        tx.send((sender, n)).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        for handle in handles {
            handle.join().unwrap();
        }
    });
    let per_receiver: Vec<Vec<(u32, u32)>> = greenweave::run(move || {
        let rx = Rc::new(rx);
        let handles: Vec<_> = (0..RECEIVERS)
            .map(|_| {
                let rx = rx.clone();
                greenweave::spawn(move || rx.iter().collect::<Vec<_>>())
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    });
    producers.join().unwrap();
    for got in &per_receiver {
        for sender in 0..SENDERS {
            let mine: Vec<u32> = got
                .iter()
                .filter(|(from, _)| *from == sender)
                .map(|(_, n)| *n)
                .collect();
            assert!(
                mine.windows(2).all(|pair| pair[0] < pair[1]),
                "one receiver sees each sender's values in the order sent"
            );
        }
    }
    let mut all: Vec<(u32, u32)> = per_receiver.into_iter().flatten().collect();
    all.sort();
    let expected: Vec<(u32, u32)> = (0..SENDERS)
        .flat_map(|sender| (0..PER_SENDER).map(move |n| (sender, n)))
        .collect();
    assert_eq!(all, expected, "every value received exactly once");
}

#[test]
fn green_threads_on_two_workers_of_one_runtime_stream_values_and_ping_pong() {
    const VALUES: u32 = 2_000;
    let runtime = greenweave::Runtime::builder().workers(2).build().unwrap();
    let (got, pongs, workers) = runtime.run(|| {
        let (tx, rx) = shared::sync_channel::<u32>(8);
        let (to_echo, echo_inbox) = shared::channel::<u32>();
        let (to_main, main_inbox) = shared::channel::<u32>();
        let remote = thread::spawn_on(1, move || {
            for n in 0..VALUES {
                tx.send(n).unwrap(); // parks on worker 1 while the channel is full
            }
            drop(tx);
            for n in echo_inbox {
                to_main.send(n + 1).unwrap();
            }
            greenweave::runtime::current_worker()
        });
        let got: Vec<u32> = rx.iter().collect();
        let pongs: Vec<u32> = (0..100)
            .map(|n| {
                to_echo.send(n).unwrap();
                main_inbox.recv().unwrap()
            })
            .collect();
        drop(to_echo);
        let there = remote.join().unwrap();
        (got, pongs, (greenweave::runtime::current_worker(), there))
    });
    assert_eq!(workers, (0, 1), "the two ends ran on two workers");
    assert_eq!(got, (0..VALUES).collect::<Vec<_>>());
    assert_eq!(pongs, (1..=100).collect::<Vec<_>>());
}

#[test]
fn two_green_threads_of_one_runtime_play_ping_pong_through_a_shared_channel() {
    let got = greenweave::run(|| {
        let (to_echo, echo_inbox) = shared::channel::<u32>();
        let (to_main, main_inbox) = shared::channel::<u32>();
        let echo = greenweave::spawn(move || {
            for n in echo_inbox {
                to_main.send(n * 10).unwrap();
            }
        });
        let got: Vec<u32> = (1..=100)
            .map(|n| {
                to_echo.send(n).unwrap();
                main_inbox.recv().unwrap()
            })
            .collect();
        drop(to_echo);
        echo.join().unwrap();
        got
    });
    assert_eq!(got, (1..=100).map(|n| n * 10).collect::<Vec<_>>());
}

#[test]
fn a_bounded_sender_parks_only_its_green_thread_while_the_channel_is_full() {
    let (tx, rx) = shared::sync_channel::<u32>(1);
    let (go, wait_for_go) = shared::channel::<()>();
    let consumer = runtime_thread(move || {
        // Takes nothing until the producing runtime's heartbeat has run.
        wait_for_go.recv().unwrap();
        rx.iter().collect::<Vec<_>>()
    });
    let log = greenweave::run(move || {
        let log = Rc::new(RefCell::new(Vec::new()));
        let sender_log = log.clone();
        let sender = greenweave::spawn(move || {
            tx.send(1).unwrap();
            sender_log.borrow_mut().push("sent 1");
            tx.send(2).unwrap(); // full: parks until the consumer takes 1
            sender_log.borrow_mut().push("sent 2");
        });
        let heartbeat_log = log.clone();
        let heartbeat = greenweave::spawn(move || {
            heartbeat_log.borrow_mut().push("heartbeat");
            go.send(()).unwrap();
        });
        sender.join().unwrap();
        heartbeat.join().unwrap();
        log.take()
    });
    assert_eq!(log, ["sent 1", "heartbeat", "sent 2"]);
    assert_eq!(consumer.join().unwrap(), [1, 2]);
}

#[test]
fn recv_fails_once_every_sender_is_gone_and_send_fails_once_the_receiver_is() {
    let (tx, rx) = shared::channel::<u8>();
    tx.send(1).unwrap();
    let tx2 = tx.clone();
    drop(tx);
    assert_eq!(rx.try_recv(), Ok(1));
    assert_eq!(
        rx.try_recv(),
        Err(TryRecvError::Empty),
        "a clone is still alive"
    );
    tx2.send(2).unwrap();
    drop(tx2);
    assert_eq!(rx.recv(), Ok(2), "queued messages are still delivered");
    assert_eq!(rx.recv(), Err(RecvError));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));

    let (tx, rx) = shared::sync_channel::<u8>(1);
    drop(rx);
    assert_eq!(tx.send(3).unwrap_err().0, 3);
    assert_eq!(tx.try_send(4), Err(TrySendError::Disconnected(4)));
}

#[test]
fn a_parked_receiver_wakes_with_an_error_when_the_last_sender_drops_on_another_os_thread() {
    let (tx, rx) = shared::channel::<u8>();
    let dropper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        drop(tx);
    });
    let got = greenweave::run(move || rx.recv());
    dropper.join().unwrap();
    assert_eq!(got, Err(RecvError));
}

#[test]
fn a_parked_bounded_sender_gets_its_value_back_when_the_receiver_drops_on_another_runtime() {
    let (tx, rx) = shared::sync_channel::<String>(1);
    let (parked, wait_for_parked) = shared::channel::<()>();
    let receiver = runtime_thread(move || {
        wait_for_parked.recv().unwrap();
        drop(rx);
    });
    let back = greenweave::run(move || {
        tx.send("first".into()).unwrap();
        let sender = greenweave::spawn(move || tx.send("second".into()));
        thread::yield_now(); // the sender parks: full
        parked.send(()).unwrap();
        sender.join().unwrap()
    });
    receiver.join().unwrap();
    assert_eq!(back.unwrap_err().0, "second");
}

#[test]
fn a_rendezvous_send_returns_once_taken_or_hands_its_value_back_if_the_receiver_goes_first() {
    // Taken by a receiver on another runtime: the send returns Ok only afterwards.
    let (tx, rx) = shared::sync_channel::<u32>(0);
    let taken = Arc::new(AtomicUsize::new(0));
    let seen = taken.clone();
    let receiver = runtime_thread(move || {
        thread::sleep(Duration::from_millis(20));
        let got = rx.recv().unwrap();
        seen.store(1, Ordering::SeqCst);
        got
    });
    greenweave::run(move || tx.send(7).unwrap());
    // The receiver marks `taken` after its recv; the send returned before the join, and the
    // value it delivered is the one the receiver got.
    assert_eq!(receiver.join().unwrap(), 7);
    assert_eq!(taken.load(Ordering::SeqCst), 1);

    // The receiver drops first: the value comes back.
    let (tx, rx) = shared::sync_channel::<String>(0);
    let dropper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        drop(rx);
    });
    let back = greenweave::run(move || tx.send("mine".to_owned()));
    dropper.join().unwrap();
    assert_eq!(back.unwrap_err().0, "mine");
}

#[test]
fn a_plain_os_thread_can_be_either_end() {
    // OS thread receiving from a green sender, with a timeout first.
    let (tx, rx) = shared::channel::<u32>();
    // The sender waits for the receiver's word that its timeout is over. (Waiting 20 ms
    // instead could end first, were the receiver's thread held up, as under Valgrind.)
    let (timed_out, wait_for_timed_out) = shared::channel::<()>();
    let receiver = std::thread::spawn(move || {
        let first = rx.recv_timeout(Duration::from_millis(1));
        timed_out.send(()).unwrap();
        let rest: Vec<u32> = rx.iter().collect();
        (first, rest)
    });
    greenweave::run(move || {
        wait_for_timed_out.recv().unwrap();
        for n in 0..3 {
            tx.send(n).unwrap();
        }
    });
    let (first, rest) = receiver.join().unwrap();
    assert_eq!(first, Err(RecvTimeoutError::Timeout));
    assert_eq!(rest, [0, 1, 2]);

    // OS thread sending into a bounded channel (blocking while full) to a green receiver.
    let (tx, rx) = shared::sync_channel::<u32>(2);
    let sender = std::thread::spawn(move || {
        for n in 0..50 {
            tx.send(n).unwrap();
        }
    });
    let got: Vec<u32> = greenweave::run(move || {
        let mut got = Vec::new();
        while let Ok(n) = rx.recv() {
            got.push(n);
            if n % 10 == 0 {
                thread::sleep(Duration::from_millis(1)); // let the sender fill the channel
            }
        }
        got
    });
    sender.join().unwrap();
    assert_eq!(got, (0..50).collect::<Vec<_>>());

    // Two plain OS threads, no runtime anywhere, through a rendezvous.
    let (tx, rx) = shared::sync_channel::<&str>(0);
    let sender = std::thread::spawn(move || tx.send("hand-off"));
    assert_eq!(rx.recv(), Ok("hand-off"));
    assert_eq!(sender.join().unwrap(), Ok(()));
}

#[test]
fn a_green_thread_waiting_on_another_os_thread_that_sends_later_is_not_a_deadlock() {
    let (tx, rx) = shared::channel::<u8>();
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        tx.send(9).unwrap();
    });
    // The only green thread waits on the channel: the runtime must wait for the other OS
    // thread, not report a deadlock.
    let got = greenweave::run(move || rx.recv());
    late.join().unwrap();
    assert_eq!(got, Ok(9));

    // The same for a sender waiting for room.
    let (tx, rx) = shared::sync_channel::<u8>(1);
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        rx.iter().collect::<Vec<_>>()
    });
    greenweave::run(move || {
        tx.send(1).unwrap();
        tx.send(2).unwrap();
    });
    assert_eq!(late.join().unwrap(), [1, 2]);
}

#[test]
fn a_receive_cut_short_by_timeout_or_cancel_leaves_every_message_for_a_later_receive() {
    const VALUES: u32 = 300;
    let (tx, rx) = shared::channel::<u32>();
    let producer = runtime_thread(move || {
        for n in 0..VALUES {
            tx.send(n).unwrap();
            if n % 3 == 0 {
                thread::sleep(Duration::from_micros(200));
            }
        }
    });
    let got = greenweave::run(move || {
        let rx = Rc::new(rx);
        let mut got = Vec::new();
        let mut round = 0u32;
        loop {
            round += 1;
            let outcome = match round % 3 {
                // A scope that may end while the receive is parked.
                0 => match timeout(Duration::from_micros(100), || rx.recv()) {
                    Ok(received) => received.map_err(|_| RecvTimeoutError::Disconnected),
                    Err(_elapsed) => Err(RecvTimeoutError::Timeout),
                },
                1 => rx.recv_timeout(Duration::from_micros(100)),
                // A receiving green thread cancelled while it may be parked.
                _ => {
                    let receiver = rx.clone();
                    let handle = greenweave::spawn(move || receiver.recv());
                    thread::yield_now();
                    handle.cancel();
                    match handle.join() {
                        Ok(received) => received.map_err(|_| RecvTimeoutError::Disconnected),
                        Err(error) => {
                            assert!(error.is_cancelled());
                            Err(RecvTimeoutError::Timeout)
                        }
                    }
                }
            };
            match outcome {
                Ok(n) => got.push(n),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break got,
            }
        }
    });
    producer.join().unwrap();
    assert_eq!(
        got,
        (0..VALUES).collect::<Vec<_>>(),
        "each value once, in order"
    );
}

#[test]
fn a_bounded_send_cut_short_by_timeout_or_cancel_does_not_deliver_and_drops_its_value_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = shared::sync_channel::<(u32, Tally)>(1);
    let counted = drops.clone();
    greenweave::run(move || {
        tx.send((1, Tally::new(&counted))).unwrap();
        // Full: a send under a timeout gives up and its value goes with the unwound frame.
        let gave_up = timeout(Duration::from_millis(5), || {
            tx.send((2, Tally::new(&counted)))
        });
        assert!(gave_up.is_err());
        assert_eq!(
            counted.load(Ordering::SeqCst),
            1,
            "the timed-out value was dropped"
        );
        // A parked sender cancelled.
        let tx2 = tx.clone();
        let tally = Tally::new(&counted);
        let sender = greenweave::spawn(move || tx2.send((3, tally)));
        thread::yield_now();
        sender.cancel();
        assert!(sender.join().unwrap_err().is_cancelled());
        assert_eq!(
            counted.load(Ordering::SeqCst),
            2,
            "the cancelled value was dropped"
        );
    });
    // Only the first value was ever delivered.
    let (n, tally) = rx.try_recv().unwrap();
    assert_eq!(n, 1);
    drop(tally);
    assert_eq!(
        rx.try_recv().map(|(n, _)| n),
        Err(TryRecvError::Disconnected)
    );
    assert_eq!(drops.load(Ordering::SeqCst), 3);
}

#[test]
fn a_rendezvous_send_cut_short_by_a_timeout_takes_its_value_back_and_is_never_received() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = shared::sync_channel::<Tally>(0);
    let counted = drops.clone();
    greenweave::run(move || {
        let gave_up = timeout(Duration::from_millis(5), || tx.send(Tally::new(&counted)));
        assert!(gave_up.is_err());
        assert_eq!(counted.load(Ordering::SeqCst), 1);
    });
    assert!(rx.try_recv().is_err(), "the value was taken back");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

/// A remote send wakes the longest-waiting of two receiving green threads; that one is
/// cancelled before it runs. The wake-up must pass to the other, which takes the message.
#[test]
fn a_receiver_cancelled_after_its_wake_up_passes_it_on_to_the_next_waiting_receiver() {
    let (tx, rx) = shared::channel::<u32>();
    let got = greenweave::run(move || {
        let rx = Rc::new(rx);
        let first = rx.clone();
        let first = greenweave::spawn(move || first.recv());
        let second = rx.clone();
        let second = greenweave::spawn(move || second.recv());
        thread::yield_now(); // both park, `first` first
        // Sent from another OS thread: `first` is taken off the list and its wake-up queued,
        // but the scheduler reads the queue only when this green thread parks.
        let tx2 = tx.clone();
        std::thread::spawn(move || tx2.send(5).unwrap())
            .join()
            .unwrap();
        first.cancel();
        // `first` unwinds while this joins it, and hands the wake-up to `second`, which is
        // queued ahead of this green thread's own wake-up (the join) and so has run by now.
        assert!(first.join().unwrap_err().is_cancelled());
        assert!(second.is_finished(), "the wake-up was passed on");
        second.join().unwrap()
    });
    assert_eq!(got, Ok(5));
}

#[test]
fn dropping_the_receiver_drops_each_queued_value_once_on_the_dropping_thread() {
    const VALUES: usize = 10;
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = shared::channel::<Tally>();
    let places: Vec<_> = (0..VALUES)
        .map(|_| {
            let tally = Tally::new(&drops);
            let place = tally.dropped_on.clone();
            tx.send(tally).unwrap();
            place
        })
        .collect();
    let dropper = runtime_thread(move || {
        drop(rx);
        std::thread::current().id()
    });
    let dropper_id = dropper.join().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), VALUES);
    for place in places {
        assert_eq!(*place.lock().unwrap(), Some(dropper_id));
    }
    // The sender's later sends fail and hand the value back; nothing is dropped twice.
    let back = tx.send(Tally::new(&drops)).unwrap_err().0;
    assert_eq!(drops.load(Ordering::SeqCst), VALUES);
    drop(back);
    drop(tx);
    assert_eq!(drops.load(Ordering::SeqCst), VALUES + 1);
}

#[test]
fn ends_are_send_and_the_sender_is_sync_like_std() {
    fn send_and_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_and_sync::<shared::Sender<Vec<u8>>>();
    send_and_sync::<shared::SyncSender<Vec<u8>>>();
    send::<shared::Receiver<Vec<u8>>>();
}

#[test]
fn a_select_over_a_shared_receiver_waits_for_another_os_thread_without_a_deadlock_report() {
    let (tx, rx) = shared::channel::<u32>();
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        tx.send(5).unwrap();
    });
    // The only green thread waits in a select on a local channel nobody sends on and on the
    // shared one: only the other OS thread can end the wait.
    let got = greenweave::run(move || {
        let (_local_tx, local) = greenweave::sync::mpsc::channel::<u32>();
        greenweave::select! {
            recv(local) -> _ => unreachable!("nobody sends locally"),
            recv(rx) -> n => n,
        }
    });
    late.join().unwrap();
    assert_eq!(got, Ok(5));
}

#[test]
fn a_select_send_on_a_full_shared_channel_is_taken_once_another_runtime_makes_room() {
    let (tx, rx) = shared::sync_channel::<u32>(1);
    let (go, wait_for_go) = shared::channel::<()>();
    let consumer = runtime_thread(move || {
        wait_for_go.recv().unwrap();
        rx.iter().collect::<Vec<_>>()
    });
    let log = greenweave::run(move || {
        tx.send(1).unwrap();
        let (_idle_tx, idle) = greenweave::sync::mpsc::channel::<u32>();
        let mut log = Vec::new();
        let mut select = greenweave::sync::select::Select::new();
        let send = select.send(&tx);
        let _idle = select.recv(&idle);
        log.push(match select.try_select() {
            Ok(_) => "ready while full",
            Err(_) => "not ready while full",
        });
        go.send(()).unwrap(); // the consumer starts taking
        let operation = select.select();
        assert_eq!(operation.index(), send);
        operation.send(&tx, 2).unwrap();
        log.push("sent 2");
        log
    });
    assert_eq!(log, ["not ready while full", "sent 2"]);
    assert_eq!(consumer.join().unwrap(), [1, 2]);
}

#[test]
fn a_select_send_on_a_shared_rendezvous_is_taken_once_a_receiver_waits_on_another_os_thread() {
    let (tx, rx) = shared::sync_channel::<&str>(0);
    // The receiver starts once the try has been made. (Starting after 20 ms instead could be
    // too soon, were this thread held up, as under Valgrind.)
    let (go, wait_for_go) = shared::channel::<()>();
    let receiver = std::thread::spawn(move || {
        wait_for_go.recv().unwrap();
        rx.recv()
    });
    greenweave::run(move || {
        let mut select = greenweave::sync::select::Select::new();
        let send = select.send(&tx);
        assert!(select.try_select().is_err(), "no receiver waits yet");
        go.send(()).unwrap();
        let operation = select.select();
        assert_eq!(operation.index(), send);
        operation.send(&tx, "hand-off").unwrap();
    });
    assert_eq!(receiver.join().unwrap(), Ok("hand-off"));
}

#[test]
fn a_try_recv_on_a_plain_os_thread_takes_the_message_of_a_select_waiting_to_send_in_a_runtime() {
    let (tx, rx) = shared::sync_channel::<u32>(0);
    let selecting = std::thread::spawn(move || {
        greenweave::run(move || {
            greenweave::select! {
                send(tx, 13) -> sent => sent.unwrap(),
            }
        })
    });
    // A try_recv on a rendezvous channel succeeds only against a parked sender, so this waits
    // (bounded) for the select to park; a sleep of 200 ms here once fell short under Valgrind on
    // a loaded machine, where the other thread had not yet started its runtime.
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    let got = loop {
        match rx.try_recv() {
            Err(TryRecvError::Empty) if std::time::Instant::now() < give_up => {
                std::thread::sleep(Duration::from_millis(1))
            }
            other => break other,
        }
    };
    assert_eq!(got, Ok(13));
    selecting.join().unwrap();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
}

// `SyncSender::send_timeout` (issue 25), on channels whose ends are on different OS threads.
// The `send_timeout_*` tests are ported from crossbeam-channel's `send_timeout` tests
// (tests/array.rs and tests/zero.rs; std's mpmc channels come from crossbeam-channel, and
// std's own repository has no test of `send_timeout` beyond its doc example), with the sender
// a green thread and the receiver a plain OS thread.
mod send_timeout {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use greenweave::sync::shared::{self, SendError, SendTimeoutError, TryRecvError};
    use greenweave::thread;
    use greenweave::time::timeout;

    use super::{Tally, runtime_thread};

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    // crossbeam-channel's tests/array.rs `send_timeout`. Its receiver's sleeps, which order it
    // against the sender's timeouts, are signals here: the two sides are on different OS
    // threads, whose start-up times differ (by more than a short timeout under qemu).
    #[test]
    fn send_timeout_array() {
        let (s, r) = shared::sync_channel(2);
        let (go, wait_for_go) = shared::channel::<()>();
        let (done, wait_for_done) = shared::channel::<()>();
        let receiver = std::thread::spawn(move || {
            wait_for_go.recv().unwrap();
            assert_eq!(r.recv(), Ok(1));
            wait_for_go.recv().unwrap();
            assert_eq!(r.recv(), Ok(2));
            assert_eq!(r.recv(), Ok(4));
            drop(r);
            done.send(()).unwrap();
        });
        greenweave::run(move || {
            assert_eq!(s.send_timeout(1, ms(100)), Ok(()));
            assert_eq!(s.send_timeout(2, ms(100)), Ok(()));
            assert_eq!(s.send_timeout(3, ms(5)), Err(SendTimeoutError::Timeout(3)));
            go.send(()).unwrap();
            assert_eq!(s.send_timeout(4, Duration::from_secs(60)), Ok(()));
            go.send(()).unwrap();
            wait_for_done.recv().unwrap();
            assert_eq!(s.send(5), Err(SendError(5)));
        });
        receiver.join().unwrap();
    }

    // crossbeam-channel's tests/zero.rs `send_timeout`, with a signal for the receiver's sleep
    // (see `send_timeout_array`).
    #[test]
    fn send_timeout_zero() {
        let (s, r) = shared::sync_channel(0);
        let (go, wait_for_go) = shared::channel::<()>();
        let receiver = std::thread::spawn(move || {
            wait_for_go.recv().unwrap();
            assert_eq!(r.recv(), Ok(8));
        });
        greenweave::run(move || {
            assert_eq!(s.send_timeout(7, ms(5)), Err(SendTimeoutError::Timeout(7)));
            go.send(()).unwrap();
            assert_eq!(s.send_timeout(8, Duration::from_secs(60)), Ok(()));
            assert_eq!(
                s.send_timeout(9, Duration::from_secs(60)),
                Err(SendTimeoutError::Disconnected(9))
            );
        });
        receiver.join().unwrap();
    }

    #[test]
    fn outside_a_runtime_a_send_timeout_blocks_the_os_thread_and_hands_the_message_back() {
        let drops = Arc::new(AtomicUsize::new(0));
        for bound in [0, 1] {
            let (tx, rx) = shared::sync_channel(bound);
            if bound == 1 {
                tx.send(Tally::new(&drops)).unwrap();
            }
            let Err(SendTimeoutError::Timeout(back)) = tx.send_timeout(Tally::new(&drops), ms(1))
            else {
                panic!("nobody receives: the send times out");
            };
            drop(back);
            drop(tx);
            assert_eq!(
                rx.iter().count(),
                bound,
                "the timed-out message is not in the channel"
            );
        }
        assert_eq!(drops.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_receive_in_another_runtime_makes_room_for_a_green_send_timeout() {
        let (tx, rx) = shared::sync_channel(1);
        let (go, wait_for_go) = shared::channel::<()>();
        let consumer = runtime_thread(move || {
            wait_for_go.recv().unwrap();
            rx.iter().collect::<Vec<i32>>()
        });
        greenweave::run(move || {
            tx.send(1).unwrap();
            go.send(()).unwrap();
            assert_eq!(tx.send_timeout(2, Duration::from_secs(60)), Ok(()));
        });
        assert_eq!(consumer.join().unwrap(), [1, 2]);
    }

    #[test]
    fn the_receiver_dropped_on_another_os_thread_ends_the_wait_as_disconnected() {
        for bound in [0, 1] {
            let (tx, rx) = shared::sync_channel(bound);
            if bound == 1 {
                tx.send(0).unwrap();
            }
            let dropper = std::thread::spawn(move || {
                std::thread::sleep(ms(5));
                drop(rx);
            });
            greenweave::run(|| {
                assert_eq!(
                    tx.send_timeout(7, Duration::from_secs(60)),
                    Err(SendTimeoutError::Disconnected(7))
                );
            });
            dropper.join().unwrap();
        }
    }

    #[test]
    fn a_send_timeout_in_a_destructor_during_an_unwind_times_out_at_once_with_its_message() {
        struct SendsOnDrop(
            shared::SyncSender<i32>,
            std::sync::mpsc::Sender<Option<SendTimeoutError<i32>>>,
        );
        impl Drop for SendsOnDrop {
            fn drop(&mut self) {
                // A green thread does not switch while it unwinds: the wait cannot happen.
                let outcome = self.0.send_timeout(7, Duration::from_secs(3600)).err();
                self.1.send(outcome).unwrap();
            }
        }
        greenweave::run(|| {
            for bound in [0, 1] {
                let (tx, rx) = shared::sync_channel(bound);
                if bound == 1 {
                    tx.send(0).unwrap();
                }
                let (report, outcome) = std::sync::mpsc::channel();
                let guard = SendsOnDrop(tx, report);
                let cancelled = greenweave::spawn(move || {
                    let _guard = guard;
                    thread::sleep(Duration::from_secs(3600));
                });
                thread::yield_now();
                cancelled.cancel();
                assert!(cancelled.join().unwrap_err().is_cancelled());
                assert_eq!(outcome.recv().unwrap(), Some(SendTimeoutError::Timeout(7)));
                assert_eq!(rx.iter().count(), bound);
            }
        });
    }

    #[test]
    fn a_send_timeout_unwound_by_a_timeout_scope_delivers_nothing() {
        let drops = Arc::new(AtomicUsize::new(0));
        greenweave::run(|| {
            for bound in [0, 1] {
                let (tx, rx) = shared::sync_channel(bound);
                if bound == 1 {
                    tx.send(Tally::new(&drops)).unwrap();
                }
                let scoped = timeout(ms(1), || {
                    tx.send_timeout(Tally::new(&drops), Duration::from_secs(60))
                });
                assert!(scoped.is_err(), "the scope ended the wait");
                drop(tx);
                assert_eq!(rx.iter().count(), bound);
                assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
            }
        });
        assert_eq!(drops.load(Ordering::SeqCst), 3);
    }
}
