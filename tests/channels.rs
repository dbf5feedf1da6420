//! Green channels (`sync::mpsc`, `sync::oneshot`), the remote bridge from other OS threads,
//! `time::timeout` and `unblock`: what each delivers, in what order, and how each fails.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::time::{Duration, Instant};

use greenweave::sync::{mpsc, oneshot};
use greenweave::thread::{self, Builder};
use greenweave::time::timeout;

/// Counts its drops.
struct Tally(Rc<Cell<usize>>);

impl Drop for Tally {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|text| text.to_string()))
        .unwrap_or_default()
}

#[test]
fn messages_arrive_in_the_order_one_sender_sent_them() {
    let got = greenweave::run(|| {
        let (tx, rx) = mpsc::channel();
        greenweave::spawn(move || {
            for n in 0..100 {
                tx.send(n).unwrap();
                if n % 7 == 0 {
                    thread::yield_now();
                }
            }
        });
        rx.iter().collect::<Vec<u32>>()
    });
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

#[test]
fn recv_fails_once_every_sender_is_gone_and_send_fails_once_the_receiver_is() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u8>();
        tx.send(1).unwrap();
        drop(tx);
        assert_eq!(rx.recv(), Ok(1), "queued messages are still delivered");
        assert_eq!(rx.recv(), Err(mpsc::RecvError));
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Disconnected));

        let (tx, rx) = mpsc::channel::<u8>();
        drop(rx);
        assert_eq!(
            tx.send(7),
            Err(mpsc::SendError(7)),
            "the message comes back"
        );
    });
}

#[test]
fn a_parked_receiver_wakes_with_an_error_when_the_last_sender_drops() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u8>();
        let receiver = greenweave::spawn(move || rx.recv());
        thread::yield_now();
        drop(tx);
        assert_eq!(receiver.join().unwrap(), Err(mpsc::RecvError));
    });
}

#[test]
fn try_recv_and_recv_timeout_report_empty_and_timeout() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u8>();
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(5)),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        tx.send(3).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_millis(5)), Ok(3));
    });
}

#[test]
fn a_bounded_channel_parks_senders_while_full_and_keeps_fifo_order() {
    let log = greenweave::run(|| {
        let log = Rc::new(RefCell::new(Vec::new()));
        let (tx, rx) = mpsc::sync_channel(2);
        let sent = log.clone();
        let producer = greenweave::spawn(move || {
            for n in 0..5 {
                tx.send(n).unwrap();
                sent.borrow_mut().push(format!("sent {n}"));
            }
        });
        thread::yield_now();
        log.borrow_mut().push("receiving".to_owned());
        let got: Vec<u32> = rx.iter().collect();
        producer.join().unwrap();
        assert_eq!(got, [0, 1, 2, 3, 4]);
        Rc::try_unwrap(log).unwrap().into_inner()
    });
    // Two fit before the receiver runs; the third send parked until a slot freed.
    assert_eq!(&log[..3], ["sent 0", "sent 1", "receiving"]);
}

#[test]
fn try_send_reports_full_and_disconnected() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::sync_channel(1);
        assert_eq!(tx.try_send(1), Ok(()));
        assert_eq!(tx.try_send(2), Err(mpsc::TrySendError::Full(2)));
        drop(rx);
        assert_eq!(tx.try_send(3), Err(mpsc::TrySendError::Disconnected(3)));
    });
}

#[test]
fn a_rendezvous_send_returns_only_after_the_receiver_took_the_message() {
    let order = greenweave::run(|| {
        let order = Rc::new(RefCell::new(Vec::new()));
        let (tx, rx) = mpsc::sync_channel(0);
        let log = order.clone();
        let sender = greenweave::spawn(move || {
            tx.send("ping").unwrap();
            log.borrow_mut().push("send returned");
        });
        thread::yield_now();
        thread::yield_now();
        order.borrow_mut().push("about to receive");
        assert_eq!(rx.recv().unwrap(), "ping");
        sender.join().unwrap();
        Rc::try_unwrap(order).unwrap().into_inner()
    });
    assert_eq!(order, ["about to receive", "send returned"]);
}

#[test]
fn a_rendezvous_send_gets_its_message_back_if_the_receiver_goes_first() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::sync_channel::<String>(0);
        let sender = greenweave::spawn(move || tx.send("lost?".to_owned()));
        thread::yield_now();
        drop(rx);
        assert_eq!(
            sender.join().unwrap(),
            Err(mpsc::SendError("lost?".to_owned()))
        );
    });
}

#[test]
fn a_remote_sender_used_from_four_os_threads_delivers_every_message_exactly_once() {
    const PER_THREAD: u32 = 2_000;
    let got = greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<(u32, u32)>();
        let workers: Vec<_> = (0..4)
            .map(|worker| {
                let remote = tx.remote();
                std::thread::spawn(move || {
                    for n in 0..PER_THREAD {
                        remote.send((worker, n)).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        // A green thread keeps running meanwhile: the receiver parks, the OS thread does not.
        let ticks = Rc::new(Cell::new(0));
        let counter = ticks.clone();
        let ticker = greenweave::spawn(move || {
            for _ in 0..10 {
                counter.set(counter.get() + 1);
                thread::yield_now();
            }
        });
        let got: Vec<(u32, u32)> = rx.iter().collect();
        for worker in workers {
            worker.join().unwrap();
        }
        ticker.join().unwrap();
        assert_eq!(ticks.get(), 10);
        got
    });
    assert_eq!(got.len(), 4 * PER_THREAD as usize);
    let distinct: HashSet<_> = got.iter().copied().collect();
    assert_eq!(distinct.len(), got.len(), "no message twice");
    for worker in 0..4 {
        let mine: Vec<u32> = got
            .iter()
            .filter(|(w, _)| *w == worker)
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(
            mine,
            (0..PER_THREAD).collect::<Vec<_>>(),
            "each sender's order is kept"
        );
    }
}

#[test]
fn a_receiver_waiting_only_on_a_live_remote_sender_is_not_a_deadlock() {
    let got = greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u8>();
        let remote = tx.remote();
        drop(tx);
        let worker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            remote.send(9).unwrap();
        });
        let got = rx.recv();
        worker.join().unwrap();
        got
    });
    assert_eq!(got, Ok(9));
}

/// The last remote sender sends, then drops, while the ready queue never empties (a green
/// thread keeps yielding): the periodic poll must still pick the wake-up up, although no
/// handle that could send another is left.
#[test]
fn a_remote_senders_last_message_wakes_its_receiver_while_other_green_threads_keep_yielding() {
    const YIELDS: u32 = 100_000;
    let outcome = greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u8>();
        let remote = tx.remote();
        drop(tx);
        let received = Rc::new(Cell::new(None));
        let slot = received.clone();
        let receiver = greenweave::spawn(move || slot.set(Some(rx.recv())));
        thread::yield_now(); // the receiver parks in recv
        let worker = std::thread::spawn(move || remote.send(7).unwrap()); // then drops it
        while !worker.is_finished() {
            thread::yield_now();
        }
        worker.join().unwrap();
        // Only yields from here: the ready queue never empties, so only the periodic poll
        // can see the wake-up.
        let mut yields = 0;
        while received.get().is_none() && yields < YIELDS {
            thread::yield_now();
            yields += 1;
        }
        let outcome = received.take();
        if outcome.is_none() {
            receiver.cancel();
        }
        outcome
    });
    assert_eq!(outcome, Some(Ok(7)));
}

#[test]
fn a_deadlock_among_channels_is_reported_with_every_parked_green_thread() {
    let outcome = panic::catch_unwind(|| {
        greenweave::run(|| {
            let (to_alice, alice_inbox) = mpsc::channel::<u8>();
            let (to_bob, bob_inbox) = mpsc::channel::<u8>();
            let alice = Builder::new()
                .name("alice".into())
                .spawn(move || {
                    let n = alice_inbox.recv().unwrap();
                    to_bob.send(n).unwrap();
                })
                .unwrap();
            let bob = Builder::new()
                .name("bob".into())
                .spawn(move || {
                    let n = bob_inbox.recv().unwrap();
                    to_alice.send(n).unwrap();
                })
                .unwrap();
            alice.join().unwrap();
            bob.join().unwrap();
        })
    });
    let message = panic_message(&*outcome.unwrap_err());
    assert!(message.contains("deadlock"), "{message}");
    assert!(
        message.contains("'alice'") && message.contains("'bob'"),
        "{message}"
    );
    assert!(message.contains("waiting on a channel (recv)"), "{message}");
    assert!(
        message.contains("'main' (id 1): joining green thread"),
        "{message}"
    );
}

#[test]
fn a_oneshot_delivers_its_value_and_reports_a_dropped_sender() {
    greenweave::run(|| {
        let (tx, rx) = oneshot::channel();
        greenweave::spawn(move || {
            thread::yield_now();
            tx.send("done").unwrap();
        });
        assert_eq!(rx.recv(), Ok("done"));

        let (tx, rx) = oneshot::channel::<u8>();
        drop(tx);
        assert_eq!(rx.recv(), Err(oneshot::RecvError));

        let (tx, mut rx) = oneshot::channel::<u8>();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(2)),
            Err(oneshot::RecvTimeoutError::Timeout)
        );
        drop(rx);
        assert!(tx.is_closed());
        assert_eq!(tx.send(1), Err(1));
    });
}

#[test]
fn timeout_interrupts_a_channel_receive_and_runs_the_bodys_destructors() {
    let drops = Rc::new(Cell::new(0));
    let counted = drops.clone();
    greenweave::run(move || {
        let (_tx, rx) = mpsc::channel::<u8>();
        let result = timeout(Duration::from_millis(5), || {
            let _guard = Tally(counted.clone());
            rx.recv()
        });
        assert!(result.is_err());
        assert_eq!(counted.get(), 1, "the body was unwound");
        // The receiver still works after the scope ended.
        assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
    });
    assert_eq!(drops.get(), 1);
}

#[test]
fn timeout_interrupts_sleeps_joins_and_socket_reads() {
    greenweave::run(|| {
        assert!(
            timeout(Duration::from_millis(5), || thread::sleep(
                Duration::from_secs(60)
            ))
            .is_err()
        );
        let sleeper = greenweave::spawn(|| thread::sleep(Duration::from_millis(200)));
        assert!(timeout(Duration::from_millis(5), || sleeper.join()).is_err());

        let listener = greenweave::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = greenweave::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let read = timeout(Duration::from_millis(5), || {
            use std::io::Read;
            let mut buf = [0; 8];
            (&server).read(&mut buf)
        });
        assert!(read.is_err());
        drop(client);
    });
}

#[test]
fn nested_timeouts_each_report_only_their_own_expiry() {
    greenweave::run(|| {
        let outer = timeout(Duration::from_millis(5), || {
            let inner = timeout(Duration::from_secs(60), || {
                thread::sleep(Duration::from_secs(60))
            });
            unreachable!("the outer deadline ends both scopes: {inner:?}");
        });
        assert!(outer.is_err());

        let outer = timeout(Duration::from_secs(60), || {
            timeout(Duration::from_millis(5), || {
                thread::sleep(Duration::from_secs(60))
            })
        });
        assert_eq!(outer.map(|inner| inner.is_err()), Ok(true));
    });
}

#[test]
fn timeout_returns_the_value_of_a_body_that_finishes_in_time() {
    greenweave::run(|| {
        assert_eq!(timeout(Duration::from_secs(60), || 5), Ok(5));
    });
}

#[test]
fn unblock_runs_on_another_os_thread_while_other_green_threads_run() {
    greenweave::run(|| {
        let ticks = Rc::new(Cell::new(0));
        let counter = ticks.clone();
        // The closure blocks its helper until the ticker is done. (Blocking for a short sleep
        // instead could end before the ticker did, were this OS thread held up meanwhile, as
        // under Valgrind it can be.)
        let (ticked, all_ticked) = std::sync::mpsc::channel::<()>();
        let ticker = greenweave::spawn(move || {
            for _ in 0..5 {
                counter.set(counter.get() + 1);
                thread::yield_now();
            }
            ticked.send(()).unwrap();
        });
        let caller = std::thread::current().id();
        let (ran_on, value) = greenweave::unblock(move || {
            all_ticked.recv().expect("the ticker sends once it is done");
            (std::thread::current().id(), 42)
        });
        assert_eq!(value, 42);
        assert_ne!(ran_on, caller, "the closure ran on a helper thread");
        assert_eq!(ticks.get(), 5, "the ticker ran to completion meanwhile");
        ticker.join().unwrap();
    });
}

#[test]
fn unblock_lets_the_other_ready_green_threads_run_even_when_its_work_is_already_done() {
    for _ in 0..20 {
        let order = greenweave::run(|| {
            let order = Rc::new(RefCell::new(Vec::new()));
            let other_order = order.clone();
            let other = greenweave::spawn(move || other_order.borrow_mut().push("other ran"));
            // Work so short that the helper may be done before the caller first looks.
            greenweave::unblock(|| ());
            order.borrow_mut().push("unblock returned");
            other.join().unwrap();
            Rc::try_unwrap(order).unwrap().into_inner()
        });
        assert_eq!(order, ["other ran", "unblock returned"]);
    }
}

#[test]
fn a_panic_in_unblock_is_raised_in_the_calling_green_thread() {
    greenweave::run(|| {
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            greenweave::unblock(|| -> u8 { panic!("helper failed") })
        }));
        assert_eq!(panic_message(&*outcome.unwrap_err()), "helper failed");
    });
}

#[test]
fn green_threads_sharing_one_receiver_each_get_distinct_messages() {
    let got = greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u32>();
        let rx = Rc::new(rx);
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let rx = rx.clone();
                greenweave::spawn(move || rx.iter().collect::<Vec<u32>>())
            })
            .collect();
        thread::yield_now(); // every worker is parked in recv now
        for n in 0..30 {
            tx.send(n).unwrap();
            if n % 4 == 0 {
                thread::yield_now();
            }
        }
        drop(tx);
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap())
            .collect::<Vec<_>>()
    });
    // A worker that wakes drains what is queued, so the split is uneven, but the work is
    // shared and no message is lost or doubled.
    let busy = got.iter().filter(|mine| !mine.is_empty()).count();
    assert!(busy >= 2, "more than one worker got work: {got:?}");
    let mut all: Vec<u32> = got.into_iter().flatten().collect();
    all.sort();
    assert_eq!(all, (0..30).collect::<Vec<_>>());
}

#[test]
fn green_threads_sharing_one_receiver_are_served_in_the_order_they_parked() {
    let got = greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u32>();
        let rx = Rc::new(rx);
        let got = Rc::new(RefCell::new(Vec::new()));
        // Spawned in this order, so they park in `recv` in this order: the first waits alone,
        // the others behind it.
        let workers: Vec<_> = (0..4)
            .map(|worker| {
                let (rx, got) = (rx.clone(), got.clone());
                greenweave::spawn(move || {
                    let message = rx.recv().unwrap();
                    got.borrow_mut().push((worker, message));
                })
            })
            .collect();
        thread::yield_now();
        for n in 0..4 {
            tx.send(n * 10).unwrap();
            thread::yield_now(); // the woken worker takes its message before the next send
        }
        for worker in workers {
            worker.join().unwrap();
        }
        got.take()
    });
    assert_eq!(got, [(0, 0), (1, 10), (2, 20), (3, 30)]);
}

#[test]
fn a_send_skips_a_receiver_that_timed_out_and_wakes_the_next_one_waiting() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u32>();
        let rx = Rc::new(rx);
        let impatient = greenweave::spawn({
            let rx = rx.clone();
            move || rx.recv_timeout(Duration::from_millis(1))
        });
        let patient = greenweave::spawn({
            let rx = rx.clone();
            move || rx.recv()
        });
        thread::yield_now(); // both parked, the impatient one first
        assert_eq!(
            impatient.join().unwrap(),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        // The impatient receiver's stale entry is still at the front: a waiter parked now
        // queues behind the patient one.
        let late = greenweave::spawn({
            let rx = rx.clone();
            move || rx.recv()
        });
        thread::yield_now();
        tx.send(1).unwrap();
        assert_eq!(patient.join().unwrap(), Ok(1));
        assert!(!late.is_finished());
        tx.send(2).unwrap();
        assert_eq!(late.join().unwrap(), Ok(2));
    });
}

// ---------------------------------------------------------------------------------------------
// A delivery and a deadline in the same turn of the scheduler
// ---------------------------------------------------------------------------------------------

/// Runs `deliver` on a green thread that sleeps until just before `deadline`, and `wait` (given
/// that thread's handle and `deadline`) on the calling one, holding the scheduler back (a
/// green thread spinning without parking) until `deadline` has passed. The two timers then
/// expire in the same turn, the deliverer's first: it runs and delivers after the waiter's
/// deadline has fired but before the waiter runs. No timing is asserted: `lead` only has to
/// cover the setup, and `None` says it did not (the caller retries with a longer one).
fn deliver_in_the_turn_of_the_deadline<D: 'static, R>(
    lead: Duration,
    deliver: impl FnOnce() -> D + 'static,
    wait: impl FnOnce(thread::JoinHandle<D>, Instant) -> R,
) -> Option<R> {
    let delivery = Instant::now() + lead;
    let deadline = delivery + lead;
    let deliverer = greenweave::spawn(move || {
        thread::sleep_until(delivery);
        deliver()
    });
    thread::yield_now(); // the deliverer parks until `delivery`
    let past_both = deadline + lead; // room for a deadline computed from a duration
    // The spinner runs only once `wait` has parked: if it starts before `delivery`, the wait
    // was armed in time (a thread preempted between the check below and its park would arm it
    // after the deadline, and the attempt says nothing).
    let spinner = greenweave::spawn(move || {
        let armed_in_time = Instant::now() < delivery;
        while Instant::now() < past_both {
            std::hint::spin_loop();
        }
        armed_in_time
    });
    if Instant::now() >= delivery {
        spinner.join().unwrap();
        drop(deliverer);
        return None;
    }
    let result = wait(deliverer, deadline);
    spinner.join().unwrap().then_some(result)
}

/// Calls `attempt` with a longer and longer lead until the setup fits in it.
fn with_growing_lead<R>(attempt: impl Fn(Duration) -> Option<R>) -> R {
    for lead in [10, 100, 1000, 10_000] {
        if let Some(result) = attempt(Duration::from_millis(lead)) {
            return result;
        }
    }
    panic!("the machine was too slow to set up a green thread within 10 s");
}

#[test]
fn a_join_whose_thread_finishes_in_the_turn_its_timeout_expires_gets_the_result() {
    let outcome = with_growing_lead(|lead| {
        greenweave::run(move || {
            deliver_in_the_turn_of_the_deadline(
                lead,
                || 42,
                |worker, deadline| {
                    greenweave::time::timeout_at(deadline, || worker.join().unwrap())
                },
            )
        })
    });
    assert_eq!(outcome, Ok(42));
}

#[test]
fn a_oneshot_recv_whose_value_arrives_in_the_turn_its_timeout_expires_gets_the_value() {
    let outcome = with_growing_lead(|lead| {
        greenweave::run(move || {
            let (tx, rx) = oneshot::channel();
            deliver_in_the_turn_of_the_deadline(
                lead,
                move || tx.send(7).unwrap(),
                |sender, deadline| {
                    let got = greenweave::time::timeout_at(deadline, || rx.recv());
                    sender.join().unwrap();
                    got
                },
            )
        })
    });
    assert_eq!(outcome, Ok(Ok(7)));
}

#[test]
fn a_channel_recv_whose_message_arrives_in_the_turn_its_timeout_expires_gets_it_once() {
    let (outcome, after) = with_growing_lead(|lead| {
        greenweave::run(move || {
            let (tx, rx) = mpsc::channel();
            let tx2 = tx.clone();
            deliver_in_the_turn_of_the_deadline(
                lead,
                move || tx2.send(7).unwrap(),
                |sender, deadline| {
                    let got = greenweave::time::timeout_at(deadline, || rx.recv());
                    sender.join().unwrap();
                    (got, rx.try_recv())
                },
            )
        })
    });
    assert_eq!(outcome, Ok(Ok(7)));
    assert_eq!(
        after,
        Err(mpsc::TryRecvError::Empty),
        "received exactly once"
    );
}

#[test]
fn a_recv_timeout_whose_message_arrives_in_the_turn_it_expires_gets_it_once() {
    let (outcome, after) = with_growing_lead(|lead| {
        greenweave::run(move || {
            let (tx, rx) = mpsc::channel();
            let tx2 = tx.clone();
            deliver_in_the_turn_of_the_deadline(
                lead,
                move || tx2.send(7).unwrap(),
                |sender, deadline| {
                    let got = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
                    sender.join().unwrap();
                    (got, rx.try_recv())
                },
            )
        })
    });
    assert_eq!(outcome, Ok(7));
    assert_eq!(
        after,
        Err(mpsc::TryRecvError::Empty),
        "received exactly once"
    );
}

#[test]
fn a_oneshot_recv_timeout_whose_value_arrives_in_the_turn_it_expires_gets_it() {
    let outcome = with_growing_lead(|lead| {
        greenweave::run(move || {
            let (tx, mut rx) = oneshot::channel();
            deliver_in_the_turn_of_the_deadline(
                lead,
                move || tx.send(7).unwrap(),
                |sender, deadline| {
                    let got = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
                    sender.join().unwrap();
                    got
                },
            )
        })
    });
    assert_eq!(outcome, Ok(7));
}

#[test]
fn a_rendezvous_send_taken_in_the_turn_its_timeout_expires_reports_success() {
    let (sent, received) = with_growing_lead(|lead| {
        greenweave::run(move || {
            let (tx, rx) = mpsc::sync_channel(0);
            deliver_in_the_turn_of_the_deadline(
                lead,
                move || rx.recv(),
                |receiver, deadline| {
                    let sent = greenweave::time::timeout_at(deadline, || tx.send(7));
                    (sent, receiver.join().unwrap())
                },
            )
        })
    });
    assert_eq!(received, Ok(7));
    assert_eq!(
        sent,
        Ok(Ok(())),
        "a delivered send is not reported as timed out"
    );
}

#[test]
fn a_oneshot_value_sent_after_a_timeout_gave_up_on_it_is_still_received() {
    greenweave::run(|| {
        let (tx, rx) = oneshot::channel();
        assert!(timeout(Duration::from_millis(1), || rx.recv()).is_err());
        tx.send(5).unwrap();
        assert_eq!(rx.recv(), Ok(5));
        assert_eq!(rx.recv(), Err(oneshot::RecvError), "only once");
    });
}

// ---------------------------------------------------------------------------------------------
// A send that fails does not deliver
// ---------------------------------------------------------------------------------------------

#[test]
fn a_rendezvous_send_ended_by_a_timeout_is_never_received_and_its_message_is_dropped_once() {
    let drops = Rc::new(Cell::new(0));
    let counted = drops.clone();
    greenweave::run(move || {
        let (tx, rx) = mpsc::sync_channel(0);
        let sender = greenweave::spawn(move || {
            timeout(Duration::from_millis(1), || tx.send(Tally(counted))).is_err()
        });
        assert!(sender.join().unwrap(), "the send timed out");
        assert!(
            rx.try_recv().is_err(),
            "a failed send is not delivered later"
        );
    });
    assert_eq!(drops.get(), 1);
}

#[test]
fn a_cancelled_rendezvous_send_is_never_received_and_its_message_is_dropped_once() {
    let drops = Rc::new(Cell::new(0));
    let counted = drops.clone();
    greenweave::run(move || {
        let (tx, rx) = mpsc::sync_channel(0);
        let sender = greenweave::spawn(move || tx.send(Tally(counted)).is_ok());
        thread::yield_now(); // parked, its message queued
        sender.cancel();
        assert!(sender.join().unwrap_err().is_cancelled());
        assert!(
            rx.try_recv().is_err(),
            "a cancelled send is not delivered later"
        );
    });
    assert_eq!(drops.get(), 1);
}

#[test]
fn a_bounded_send_ended_by_a_timeout_while_full_is_never_received() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::sync_channel(1);
        tx.send(1).unwrap();
        let tx2 = tx.clone();
        let sender = greenweave::spawn(move || timeout(Duration::from_millis(1), || tx2.send(2)));
        assert!(sender.join().unwrap().is_err(), "the send timed out");
        drop(tx);
        assert_eq!(rx.iter().collect::<Vec<_>>(), [1]);
    });
}

// ---------------------------------------------------------------------------------------------
// Messages' destructors may use their channel
// ---------------------------------------------------------------------------------------------

/// A message that, when dropped, sends a follow-up on its own bounded channel and counts the
/// sends that were refused.
struct SendsOnDrop {
    tx: Option<mpsc::SyncSender<SendsOnDrop>>,
    refused: Rc<Cell<usize>>,
}

impl Drop for SendsOnDrop {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let follow_up = SendsOnDrop {
                tx: None,
                refused: self.refused.clone(),
            };
            if tx.send(follow_up).is_err() {
                self.refused.set(self.refused.get() + 1);
            }
        }
    }
}

#[test]
fn dropping_a_receiver_drops_queued_messages_whose_destructors_send_on_the_channel() {
    let refused = Rc::new(Cell::new(0));
    let counted = refused.clone();
    greenweave::run(move || {
        let (tx, rx) = mpsc::sync_channel(4);
        for _ in 0..2 {
            let message = SendsOnDrop {
                tx: Some(tx.clone()),
                refused: counted.clone(),
            };
            tx.send(message).unwrap();
        }
        drop(rx);
    });
    assert_eq!(
        refused.get(),
        2,
        "each destructor's send failed: the receiver is gone"
    );
}

/// A message from another OS thread that carries a remote sender of its own channel.
struct CarriesItsSender(#[allow(dead_code)] mpsc::RemoteSender<CarriesItsSender>);

#[test]
fn dropping_a_receiver_drops_remote_messages_that_hold_remote_senders_of_the_channel() {
    // Before the fix this deadlocked on the channel's inbox lock: run it on its own thread.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        greenweave::run(|| {
            let (tx, rx) = mpsc::channel::<CarriesItsSender>();
            let remote = tx.remote();
            std::thread::spawn(move || remote.send(CarriesItsSender(remote.clone())).unwrap())
                .join()
                .unwrap();
            drop(rx);
        });
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(120))
        .expect("dropping the receiver deadlocked");
}

// `SyncSender::send_timeout` (issue 25). std's own repository has no test of it beyond its
// doc example (std's mpmc channels come from crossbeam-channel); the two tests named
// `send_timeout_*` are ported from crossbeam-channel's `send_timeout` tests (tests/array.rs
// and tests/zero.rs), with green threads; the others pin down what the message becomes in
// each outcome.
mod send_timeout {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;
    use std::time::Duration;

    use greenweave::sync::mpsc::{self, SendError, SendTimeoutError};
    use greenweave::thread;
    use greenweave::time::timeout;

    use super::Tally;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    // crossbeam-channel's tests/array.rs `send_timeout`, with signals where the original's
    // receiver sleeps, so that the order of events does not depend on timing.
    #[test]
    fn send_timeout_array() {
        greenweave::run(|| {
            let (s, r) = mpsc::sync_channel(2);
            let (go, wait_for_go) = mpsc::channel::<()>();
            let receiver = greenweave::spawn(move || {
                wait_for_go.recv().unwrap();
                assert_eq!(r.recv(), Ok(1));
                wait_for_go.recv().unwrap();
                assert_eq!(r.recv(), Ok(2));
                assert_eq!(r.recv(), Ok(4));
            });
            assert_eq!(s.send_timeout(1, ms(100)), Ok(()));
            assert_eq!(s.send_timeout(2, ms(100)), Ok(()));
            assert_eq!(s.send_timeout(3, ms(5)), Err(SendTimeoutError::Timeout(3)));
            go.send(()).unwrap();
            assert_eq!(s.send_timeout(4, Duration::from_secs(60)), Ok(()));
            go.send(()).unwrap();
            receiver.join().unwrap();
            assert_eq!(s.send(5), Err(SendError(5)));
        });
    }

    // crossbeam-channel's tests/zero.rs `send_timeout`, with a signal where the original's
    // receiver sleeps.
    #[test]
    fn send_timeout_zero() {
        greenweave::run(|| {
            let (s, r) = mpsc::sync_channel(0);
            let (go, wait_for_go) = mpsc::channel::<()>();
            let receiver = greenweave::spawn(move || {
                wait_for_go.recv().unwrap();
                assert_eq!(r.recv(), Ok(8));
            });
            assert_eq!(s.send_timeout(7, ms(5)), Err(SendTimeoutError::Timeout(7)));
            go.send(()).unwrap();
            assert_eq!(s.send_timeout(8, Duration::from_secs(60)), Ok(()));
            assert_eq!(
                s.send_timeout(9, Duration::from_secs(60)),
                Err(SendTimeoutError::Disconnected(9))
            );
            receiver.join().unwrap();
        });
    }

    #[test]
    fn a_full_channel_hands_the_message_back_on_timeout_and_keeps_the_others() {
        let drops = Rc::new(Cell::new(0));
        let tally = |n| (n, Tally(drops.clone()));
        greenweave::run(|| {
            let (tx, rx) = mpsc::sync_channel(1);
            tx.send(tally(1)).unwrap();
            let Err(SendTimeoutError::Timeout((2, back))) = tx.send_timeout(tally(2), ms(1)) else {
                panic!("the send timed out");
            };
            assert_eq!(drops.get(), 0, "the message came back whole");
            drop(back);
            drop(tx);
            let got: Vec<i32> = rx.iter().map(|(n, _)| n).collect();
            assert_eq!(got, [1]);
        });
        assert_eq!(drops.get(), 2);
    }

    #[test]
    fn room_made_before_the_deadline_lets_the_send_through_in_order() {
        let got = greenweave::run(|| {
            let (tx, rx) = mpsc::sync_channel(1);
            tx.send(1).unwrap();
            let receiver = greenweave::spawn(move || {
                let first = rx.recv().unwrap(); // makes room for the waiting send
                let second = rx.recv().unwrap();
                vec![first, second]
            });
            tx.send_timeout(2, Duration::from_secs(60)).unwrap();
            receiver.join().unwrap()
        });
        assert_eq!(got, [1, 2]);
    }

    #[test]
    fn room_that_is_there_wins_over_a_timeout_of_zero() {
        greenweave::run(|| {
            let (tx, rx) = mpsc::sync_channel(1);
            assert_eq!(tx.send_timeout(1, Duration::ZERO), Ok(()));
            assert_eq!(
                tx.send_timeout(2, Duration::ZERO),
                Err(SendTimeoutError::Timeout(2))
            );
            assert_eq!(rx.try_recv(), Ok(1));
        });
    }

    #[test]
    fn the_receiver_dropped_during_the_wait_hands_the_message_back_as_disconnected() {
        greenweave::run(|| {
            for bound in [0, 1] {
                let (tx, rx) = mpsc::sync_channel(bound);
                if bound == 1 {
                    tx.send(0).unwrap();
                }
                let dropper = greenweave::spawn(move || drop(rx));
                assert_eq!(
                    tx.send_timeout(7, Duration::from_secs(60)),
                    Err(SendTimeoutError::Disconnected(7))
                );
                dropper.join().unwrap();
            }
        });
    }

    #[test]
    fn a_rendezvous_send_that_times_out_takes_its_message_back_and_a_later_receive_finds_none() {
        greenweave::run(|| {
            let (tx, rx) = mpsc::sync_channel(0);
            assert_eq!(tx.send_timeout(1, ms(1)), Err(SendTimeoutError::Timeout(1)));
            assert_eq!(rx.try_recv(), Err(mpsc::TryRecvError::Empty));
            // A receiver that waits takes the next one.
            let receiver = greenweave::spawn(move || rx.recv());
            thread::yield_now();
            assert_eq!(tx.send_timeout(2, Duration::from_secs(60)), Ok(()));
            assert_eq!(receiver.join().unwrap(), Ok(2));
        });
    }

    #[test]
    fn a_send_timeout_unwound_by_a_timeout_scope_or_a_cancellation_delivers_nothing() {
        let drops = Rc::new(Cell::new(0));
        greenweave::run(|| {
            for bound in [0, 1] {
                let (tx, rx) = mpsc::sync_channel(bound);
                if bound == 1 {
                    tx.send(Tally(drops.clone())).unwrap();
                }
                let before = drops.get();
                let scoped = timeout(ms(1), || {
                    tx.send_timeout(Tally(drops.clone()), Duration::from_secs(60))
                });
                assert!(scoped.is_err(), "the scope ended the wait");
                assert_eq!(drops.get(), before + 1, "the message went with the unwind");
                let tx = Rc::new(tx);
                let waiter = {
                    let (tx, drops) = (tx.clone(), drops.clone());
                    greenweave::spawn(move || {
                        let _ = tx.send_timeout(Tally(drops), Duration::from_secs(60));
                    })
                };
                thread::yield_now(); // it waits
                waiter.cancel();
                assert!(waiter.join().unwrap_err().is_cancelled());
                assert_eq!(drops.get(), before + 2);
                drop(tx);
                assert_eq!(
                    rx.iter().count(),
                    bound,
                    "only the message sent first is there"
                );
            }
        });
    }

    #[test]
    fn senders_that_time_out_leave_the_line_in_order_for_the_ones_that_wait() {
        let order = greenweave::run(|| {
            let (tx, rx) = mpsc::sync_channel(1);
            tx.send("first").unwrap();
            let order = Rc::new(RefCell::new(Vec::new()));
            let mut senders = [("impatient", ms(1)), ("patient", Duration::from_secs(60))]
                .into_iter()
                .map(|(name, patience)| {
                    let (tx, order) = (tx.clone(), order.clone());
                    greenweave::spawn(move || {
                        let outcome = tx.send_timeout(name, patience);
                        order.borrow_mut().push((name, outcome.is_ok()));
                    })
                });
            let impatient = senders.next().unwrap();
            let patient = senders.next().unwrap();
            // The impatient one gives up while nobody receives; the patient one is still in
            // line (a sleep here instead once lost the race under Valgrind: the impatient one
            // had not yet started when the sleep ended).
            impatient.join().unwrap();
            drop(tx);
            let got: Vec<_> = rx.iter().collect();
            patient.join().unwrap();
            (got, Rc::try_unwrap(order).unwrap().into_inner())
        });
        assert_eq!(order.0, ["first", "patient"]);
        assert_eq!(order.1, [("impatient", false), ("patient", true)]);
    }

    #[test]
    fn a_send_timeout_in_a_destructor_during_an_unwind_times_out_at_once_with_its_message() {
        struct SendsOnDrop(
            mpsc::SyncSender<i32>,
            Rc<Cell<Option<SendTimeoutError<i32>>>>,
        );
        impl Drop for SendsOnDrop {
            fn drop(&mut self) {
                // A green thread does not switch while it unwinds: the wait cannot happen.
                self.1
                    .set(self.0.send_timeout(7, Duration::from_secs(3600)).err());
            }
        }
        greenweave::run(|| {
            for bound in [0, 1] {
                let (tx, rx) = mpsc::sync_channel(bound);
                if bound == 1 {
                    tx.send(0).unwrap();
                }
                let outcome = Rc::new(Cell::new(None));
                let guard = SendsOnDrop(tx, outcome.clone());
                let cancelled = greenweave::spawn(move || {
                    let _guard = guard;
                    thread::sleep(Duration::from_secs(3600));
                });
                thread::yield_now();
                cancelled.cancel();
                assert!(cancelled.join().unwrap_err().is_cancelled());
                assert_eq!(outcome.take(), Some(SendTimeoutError::Timeout(7)));
                assert_eq!(rx.iter().count(), bound);
            }
        });
    }

    #[test]
    fn send_timeout_error_reads_as_stds_and_converts_from_send_error() {
        let timeout: SendTimeoutError<i32> = SendTimeoutError::Timeout(1);
        let disconnected: SendTimeoutError<i32> = SendError(2).into();
        assert_eq!(disconnected, SendTimeoutError::Disconnected(2));
        assert_eq!(timeout.to_string(), "timed out waiting on send operation");
        assert_eq!(
            disconnected.to_string(),
            "sending on a disconnected channel"
        );
        // Debug needs no `Debug` message, as std's (whose very code prints the quoted text).
        struct NotDebug;
        let opaque: SendTimeoutError<NotDebug> = SendTimeoutError::Timeout(NotDebug);
        assert!(format!("{opaque:?}").contains("SendTimeoutError(..)"));
        let _: &dyn std::error::Error = &timeout;
    }
}
