//! `sync::select` and `select!`: each kind of operation taken alone; exactly one taken when
//! several are ready, the others losing nothing; the default branch, deadlines and timeouts;
//! wake-ups passed on when a select consumed one it did not use; rendezvous channels with a
//! select on either side; and cancellations and `time::timeout` scopes leaving the queues as
//! they were. The property test at the end mixes all of it over several channels.

use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::panic;
use std::rc::Rc;
use std::time::{Duration, Instant};

use greenweave::net::{TcpListener, TcpStream};
use greenweave::os::unix::net::UnixStream;
use greenweave::select;
use greenweave::sync::select::{Select, SelectTimeoutError, TrySelectError};
use greenweave::sync::{mpsc, oneshot};
use greenweave::thread;
use greenweave::time::timeout;

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|text| text.to_string()))
        .unwrap_or_default()
}

/// Long enough never to pass in a test; only there to give a select a deadline.
const NEVER: Duration = Duration::from_secs(600);

// ---------------------------------------------------------------------------------------------
// Each kind alone
// ---------------------------------------------------------------------------------------------

#[test]
fn a_receive_alone_waits_for_the_message_and_takes_it() {
    let got = greenweave::run(|| {
        let (tx, rx) = mpsc::channel();
        greenweave::spawn(move || tx.send("hello").unwrap());
        let mut select = Select::new();
        let recv = select.recv(&rx);
        let operation = select.select();
        assert_eq!(operation.index(), recv);
        operation.recv(&rx)
    });
    assert_eq!(got, Ok("hello"));
}

#[test]
fn a_receive_on_a_oneshot_channel_waits_for_its_value() {
    let got = greenweave::run(|| {
        let (tx, rx) = oneshot::channel();
        greenweave::spawn(move || tx.send(42).unwrap());
        select! {
            recv(rx) -> value => value,
        }
    });
    assert_eq!(got, Ok(42));
}

#[test]
fn a_receive_from_a_disconnected_channel_is_ready_and_fails() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u8>();
        drop(tx);
        let got = select! {
            recv(rx) -> message => message,
        };
        assert_eq!(got, Err(mpsc::RecvError));
    });
}

#[test]
fn a_send_on_a_full_bounded_channel_waits_for_room_then_sends() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::sync_channel(1);
        tx.send(1).unwrap();
        let events = Rc::new(RefCell::new(Vec::new()));
        let receiver = {
            let events = events.clone();
            greenweave::spawn(move || {
                events.borrow_mut().push("receiver takes 1");
                assert_eq!(rx.recv(), Ok(1));
                assert_eq!(rx.recv(), Ok(2));
            })
        };
        select! {
            send(tx, 2) -> sent => {
                sent.unwrap();
                events.borrow_mut().push("select sent 2");
            }
        }
        receiver.join().unwrap();
        assert_eq!(*events.borrow(), ["receiver takes 1", "select sent 2"]);
    });
}

#[test]
fn a_send_to_a_dropped_receiver_is_ready_and_hands_the_value_back() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::sync_channel::<String>(0);
        drop(rx);
        let got = select! {
            send(tx, "kept".to_string()) -> sent => sent,
        };
        assert_eq!(got.unwrap_err().0, "kept");
    });
}

#[test]
fn a_join_alone_waits_for_the_green_thread_and_gives_its_result() {
    greenweave::run(|| {
        let worker = greenweave::spawn(|| {
            thread::sleep(Duration::from_millis(1));
            "result"
        });
        let got = select! {
            join(worker) -> result => result.unwrap(),
        };
        assert_eq!(got, "result");
    });
}

#[test]
fn a_join_of_a_panicked_green_thread_gives_the_panic() {
    greenweave::run(|| {
        let worker = greenweave::spawn(|| -> u8 { panic!("boom") });
        let mut select = Select::new();
        select.join(&worker);
        let operation = select.select();
        let error = operation.join(worker).unwrap_err();
        assert_eq!(error.panic_message(), Some("boom"));
    });
}

#[test]
fn a_readable_branch_waits_for_data_on_a_tcp_stream() {
    greenweave::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let writer = greenweave::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            thread::sleep(Duration::from_millis(1));
            stream.write_all(b"ping").unwrap();
            stream
        });
        let mut stream = TcpStream::connect(address).unwrap();
        let (_never_tx, never) = mpsc::channel::<()>();
        select! {
            recv(never) -> _ => unreachable!("nothing is sent"),
            readable(stream) => {}
        }
        let mut buf = [0; 4];
        stream.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        drop(writer.join().unwrap());
    });
}

#[test]
fn a_readable_branch_on_a_listener_is_taken_when_a_client_connects() {
    greenweave::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let client = greenweave::spawn(move || TcpStream::connect(address).unwrap());
        let mut select = Select::new();
        let accept = select.readable(&listener);
        select.timeout(NEVER);
        assert_eq!(select.select().index(), accept);
        listener.accept().unwrap();
        drop(client.join().unwrap());
    });
}

#[test]
fn a_writable_branch_is_taken_when_the_peer_makes_room() {
    greenweave::run(|| {
        let (mut full, mut peer) = UnixStream::pair().unwrap();
        // Fill the socket's buffers.
        let chunk = [7u8; 4096];
        let mut written = 0;
        loop {
            let mut select = Select::new();
            let writable = select.writable(&full);
            match select.try_select() {
                Ok(operation) => {
                    assert_eq!(operation.index(), writable);
                    written += full.write(&chunk).unwrap();
                }
                Err(TrySelectError) => break,
            }
        }
        let reader = greenweave::spawn(move || {
            let mut buf = vec![0; written + 4];
            peer.read_exact(&mut buf).unwrap();
            buf.split_off(written)
        });
        select! {
            writable(full) => full.write_all(b"more").unwrap(),
            timeout(NEVER) => unreachable!(),
        }
        assert_eq!(reader.join().unwrap(), b"more");
    });
}

#[test]
fn a_timeout_alone_is_a_sleep_that_other_green_threads_run_during() {
    greenweave::run(|| {
        let ticks = Rc::new(Cell::new(0));
        let heartbeat = {
            let ticks = ticks.clone();
            greenweave::spawn(move || {
                loop {
                    ticks.set(ticks.get() + 1);
                    thread::yield_now();
                }
            })
        };
        // A timeout whose time is up before the select could park lets nothing run (under
        // qemu 2 ms can pass on the way): such a try is made again, longer.
        for wait in [2, 20, 200, 2000].map(Duration::from_millis) {
            let start = Instant::now();
            let taken = select! {
                timeout(wait) => "timeout",
            };
            assert_eq!(taken, "timeout");
            assert!(start.elapsed() >= wait);
            if ticks.get() > 0 {
                break;
            }
        }
        assert!(ticks.get() > 0, "the heartbeat ran while the select waited");
        heartbeat.cancel();
    });
}

#[test]
fn the_nearest_deadline_is_taken_when_nothing_else_becomes_ready() {
    greenweave::run(|| {
        let (_tx, rx) = mpsc::channel::<()>();
        let now = Instant::now();
        let mut select = Select::new();
        select.recv(&rx);
        let later = select.deadline(now + NEVER);
        let sooner = select.deadline(now + Duration::from_millis(1));
        let operation = select.select();
        assert_eq!(operation.index(), sooner);
        assert_ne!(operation.index(), later);
    });
}

// ---------------------------------------------------------------------------------------------
// Exactly one, nothing lost
// ---------------------------------------------------------------------------------------------

#[test]
fn of_two_ready_receives_exactly_one_is_taken_and_the_other_message_stays() {
    greenweave::run(|| {
        let (a_tx, a) = mpsc::channel();
        let (b_tx, b) = mpsc::channel();
        a_tx.send("a").unwrap();
        b_tx.send("b").unwrap();
        let taken = select! {
            recv(a) -> message => message.unwrap(),
            recv(b) -> message => message.unwrap(),
        };
        let left = if taken == "a" { &b } else { &a };
        let other = if taken == "a" { "b" } else { "a" };
        assert_eq!(left.try_recv(), Ok(other));
        assert_eq!(a.try_recv(), Err(mpsc::TryRecvError::Empty));
        assert_eq!(b.try_recv(), Err(mpsc::TryRecvError::Empty));
    });
}

#[test]
fn the_value_of_a_send_that_is_not_taken_is_never_evaluated() {
    greenweave::run(|| {
        let (full_tx, full_rx) = mpsc::sync_channel(1);
        full_tx.send(0).unwrap();
        let (ready_tx, ready) = mpsc::channel();
        ready_tx.send("ready").unwrap();
        let made = Cell::new(0);
        let make = || {
            made.set(made.get() + 1);
            1
        };
        let taken = select! {
            send(full_tx, make()) -> _ => "send",
            recv(ready) -> _ => "recv",
        };
        assert_eq!(taken, "recv");
        assert_eq!(made.get(), 0);
        assert_eq!(full_rx.try_recv(), Ok(0));
        assert!(full_rx.try_recv().is_err());
    });
}

#[test]
fn a_join_handle_is_moved_only_when_its_branch_is_taken() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel();
        let worker = greenweave::spawn(|| {
            thread::sleep(Duration::from_millis(1));
            5
        });
        tx.send(()).unwrap();
        let worker = select! {
            join(worker) -> _ => unreachable!("still sleeping"),
            recv(rx) -> _ => worker, // not taken: the handle is still ours
        };
        assert_eq!(worker.join().unwrap(), 5);
    });
}

#[test]
fn every_ready_operation_is_taken_sometimes() {
    greenweave::run(|| {
        let (a_tx, a) = mpsc::channel();
        let (b_tx, b) = mpsc::channel();
        let (c_tx, c) = mpsc::channel();
        let mut taken = [0; 3];
        for _ in 0..300 {
            for tx in [&a_tx, &b_tx, &c_tx] {
                tx.send(()).unwrap();
            }
            let index = select! {
                recv(a) -> _ => 0,
                recv(b) -> _ => 1,
                recv(c) -> _ => 2,
            };
            taken[index] += 1;
            // Empty the others again.
            for rx in [&a, &b, &c] {
                while rx.try_recv().is_ok() {}
            }
        }
        assert!(taken.iter().all(|&count| count > 0), "{taken:?}");
    });
}

// ---------------------------------------------------------------------------------------------
// default, deadlines and timeouts
// ---------------------------------------------------------------------------------------------

#[test]
fn the_default_branch_is_taken_when_nothing_is_ready_and_only_then() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel();
        let first = select! {
            recv(rx) -> _ => "recv",
            default => "default",
        };
        tx.send(()).unwrap();
        let second = select! {
            recv(rx) -> _ => "recv",
            default => "default",
        };
        assert_eq!([first, second], ["default", "recv"]);
    });
}

#[test]
fn a_message_that_arrives_in_time_beats_the_timeout_branch() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel();
        greenweave::spawn(move || tx.send(1).unwrap());
        let got = select! {
            recv(rx) -> message => message.ok(),
            timeout(NEVER) => None,
        };
        assert_eq!(got, Some(1));
    });
}

#[test]
fn a_ready_operation_wins_over_a_deadline_that_has_passed_too() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel();
        tx.send(1).unwrap();
        for _ in 0..50 {
            let got = select! {
                deadline(Instant::now()) => None,
                recv(rx) -> message => message.ok(),
            };
            assert_eq!(got, Some(1));
            tx.send(1).unwrap();
        }
    });
}

#[test]
fn select_timeout_gives_up_and_the_message_sent_later_stays_for_a_plain_recv() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel();
        let mut select = Select::new();
        select.recv(&rx);
        assert_eq!(
            select
                .select_timeout(Duration::from_millis(1))
                .map(|operation| operation.index()),
            Err(SelectTimeoutError)
        );
        tx.send(9).unwrap();
        assert_eq!(rx.recv(), Ok(9));
    });
}

#[test]
fn a_select_ended_by_a_time_timeout_scope_takes_nothing() {
    greenweave::run(|| {
        let (a_tx, a) = mpsc::channel();
        let (b_tx, b) = mpsc::sync_channel(1);
        b_tx.send(0).unwrap();
        let ended = timeout(Duration::from_millis(1), || {
            select! {
                recv(a) -> _ => unreachable!("nothing is sent"),
                send(b_tx, 1) -> _ => unreachable!("the channel is full"),
            }
        });
        assert!(ended.is_err());
        a_tx.send(5).unwrap();
        assert_eq!(a.recv(), Ok(5));
        assert_eq!(b.recv(), Ok(0));
        assert!(
            b.try_recv().is_err(),
            "the send that was not taken sent nothing"
        );
        b_tx.send(2).unwrap();
        assert_eq!(b.recv(), Ok(2));
    });
}

// ---------------------------------------------------------------------------------------------
// Passing on the wake-ups a select consumed
// ---------------------------------------------------------------------------------------------

/// A select parked on A and B is the first waiter on B; a plain receiver waits behind it on B.
/// B gets a message, then A, in the same turn: the select is woken through B, and takes A or B
/// at random. When it takes A, B's wake-up must go to the other receiver, or B's message sits
/// in the channel while its receiver sleeps (and `run` reports a deadlock).
#[test]
fn a_select_that_takes_another_channel_passes_the_wake_up_on_to_the_next_receiver() {
    greenweave::run(|| {
        let mut took_a = 0;
        for _ in 0..64 {
            let (a_tx, a) = mpsc::channel::<&str>();
            let (b_tx, b) = mpsc::channel::<&str>();
            let b = Rc::new(b);
            let selecting = {
                let b = b.clone();
                greenweave::spawn(move || {
                    select! {
                        recv(a) -> message => message.unwrap(),
                        recv(b) -> message => message.unwrap(),
                    }
                })
            };
            thread::yield_now(); // the select parks first on B
            let plain = {
                let b = b.clone();
                greenweave::spawn(move || b.recv().unwrap())
            };
            thread::yield_now(); // the plain receiver parks behind it
            b_tx.send("b").unwrap();
            a_tx.send("a").unwrap();
            let taken = selecting.join().unwrap();
            if taken == "a" {
                took_a += 1;
            } else {
                b_tx.send("b again").unwrap();
            }
            let expected = if taken == "a" { "b" } else { "b again" };
            assert_eq!(plain.join().unwrap(), expected);
        }
        assert!(took_a > 0);
    });
}

/// The same on the sending side: room made in a bounded channel wakes the select first, which
/// may send on another channel instead; the room must go to the plain sender behind it.
#[test]
fn a_select_that_sends_elsewhere_passes_the_room_on_to_the_next_sender() {
    greenweave::run(|| {
        let mut sent_d = 0;
        for _ in 0..64 {
            let (c_tx, c) = mpsc::sync_channel::<&str>(1);
            let (d_tx, d) = mpsc::sync_channel::<&str>(1);
            c_tx.send("c0").unwrap();
            d_tx.send("d0").unwrap();
            let selecting = {
                let (c_tx, d_tx) = (c_tx.clone(), d_tx.clone());
                greenweave::spawn(move || {
                    select! {
                        send(c_tx, "c1") -> sent => { sent.unwrap(); "c" }
                        send(d_tx, "d1") -> sent => { sent.unwrap(); "d" }
                    }
                })
            };
            thread::yield_now(); // the select parks first on C
            let plain = {
                let c_tx = c_tx.clone();
                greenweave::spawn(move || c_tx.send("c2").unwrap())
            };
            thread::yield_now(); // the plain sender parks behind it
            assert_eq!(c.recv(), Ok("c0"));
            assert_eq!(d.recv(), Ok("d0"));
            let took = selecting.join().unwrap();
            if took == "d" {
                sent_d += 1;
                plain.join().unwrap();
                assert_eq!(c.recv(), Ok("c2"));
                assert_eq!(d.recv(), Ok("d1"));
            } else {
                assert_eq!(c.recv(), Ok("c1"));
                plain.join().unwrap();
                assert_eq!(c.recv(), Ok("c2"));
            }
        }
        assert!(sent_d > 0);
    });
}

// ---------------------------------------------------------------------------------------------
// Rendezvous channels
// ---------------------------------------------------------------------------------------------

#[test]
fn a_send_select_on_a_rendezvous_channel_is_taken_when_a_plain_receiver_arrives() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::sync_channel::<u32>(0);
        let sender = greenweave::spawn(move || {
            // No deadline: without the receiver's wake-up this is a deadlock, which `run`
            // reports.
            select! {
                send(tx, 7) -> sent => sent.unwrap(),
            }
        });
        thread::yield_now(); // the select parks: no receiver yet
        assert_eq!(rx.recv(), Ok(7));
        sender.join().unwrap();
    });
}

#[test]
fn a_send_select_and_a_receive_select_on_one_rendezvous_channel_meet() {
    greenweave::run(|| {
        for sender_first in [true, false] {
            let (tx, rx) = mpsc::sync_channel::<u32>(0);
            let (_idle_tx, idle) = mpsc::channel::<u32>();
            let send = move || {
                select! {
                    send(tx, 3) -> sent => sent.unwrap(),
                }
            };
            let receive = move || {
                select! {
                    recv(rx) -> got => got.unwrap(),
                    recv(idle) -> _ => unreachable!("nothing is sent"),
                }
            };
            let (sender, receiver) = if sender_first {
                let sender = greenweave::spawn(send);
                thread::yield_now();
                (sender, greenweave::spawn(receive))
            } else {
                let receiver = greenweave::spawn(receive);
                thread::yield_now();
                (greenweave::spawn(send), receiver)
            };
            assert_eq!(receiver.join().unwrap(), 3);
            sender.join().unwrap();
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Cancellation, completion checks, the deadlock report
// ---------------------------------------------------------------------------------------------

#[test]
fn a_select_cancelled_while_parked_takes_nothing_and_every_channel_works_after() {
    greenweave::run(|| {
        let (a_tx, a) = mpsc::channel::<u32>();
        let (b_tx, b) = mpsc::sync_channel::<u32>(1);
        b_tx.send(0).unwrap();
        let (r_tx, r) = mpsc::sync_channel::<u32>(0);
        // The worker waits until the end of the test, so that its join is never ready. (A 1 ms
        // sleep could end before the cancel, and the select would take the join.)
        let (_release, released) = greenweave::sync::oneshot::channel::<()>();
        let worker = greenweave::spawn(move || {
            let _ = released.recv();
            "worker"
        });
        let a = Rc::new(a);
        let selecting = {
            let (a, b_tx, r_tx) = (a.clone(), b_tx.clone(), r_tx.clone());
            greenweave::spawn(move || {
                select! {
                    recv(a) -> _ => unreachable!("cancelled first"),
                    send(b_tx, 1) -> _ => unreachable!("cancelled first"),
                    send(r_tx, 2) -> _ => unreachable!("cancelled first"),
                    join(worker) -> _ => unreachable!("cancelled first"),
                }
            })
        };
        thread::yield_now(); // it parks
        selecting.cancel();
        assert!(selecting.join().unwrap_err().is_cancelled());
        // Nothing was taken and the queues work as if it had never waited.
        a_tx.send(10).unwrap();
        assert_eq!(a.recv(), Ok(10));
        assert_eq!(b.recv(), Ok(0));
        assert!(b.try_recv().is_err());
        let rendezvous = greenweave::spawn(move || r.recv().unwrap());
        r_tx.send(11).unwrap();
        assert_eq!(rendezvous.join().unwrap(), 11);
    });
}

#[test]
fn completing_with_another_channel_than_the_one_selected_panics() {
    greenweave::run(|| {
        let (a_tx, a) = mpsc::channel::<u8>();
        let (_b_tx, b) = mpsc::channel::<u8>();
        a_tx.send(1).unwrap();
        let mut select = Select::new();
        select.recv(&a);
        select.recv(&b);
        let operation = select.select();
        let outcome = panic::catch_unwind(panic::AssertUnwindSafe(|| operation.recv(&b)));
        let message = panic_message(&*outcome.unwrap_err());
        assert!(
            message.contains("another operation than the one selected"),
            "{message}"
        );
        assert_eq!(a.try_recv(), Ok(1), "nothing was taken");
    });
}

#[test]
fn dropping_a_selected_receive_without_completing_it_panics() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u8>();
        tx.send(1).unwrap();
        let outcome = panic::catch_unwind(panic::AssertUnwindSafe(|| {
            let mut select = Select::new();
            select.recv(&rx);
            drop(select.select());
        }));
        let message = panic_message(&*outcome.unwrap_err());
        assert!(
            message.contains("dropped without being completed"),
            "{message}"
        );
        assert_eq!(rx.try_recv(), Ok(1));
    });
}

#[test]
fn a_select_that_can_never_end_is_reported_as_a_deadlock_saying_what_it_waits_for() {
    let outcome = panic::catch_unwind(|| {
        greenweave::run(|| {
            let (_a_tx, a) = mpsc::channel::<u8>();
            let (b_tx, _b) = mpsc::sync_channel::<u8>(0);
            let idle = greenweave::spawn(|| {
                let (_tx, rx) = mpsc::channel::<u8>();
                rx.recv().ok()
            });
            select! {
                recv(a) -> _ => {}
                send(b_tx, 1) -> _ => {}
                join(idle) -> _ => {}
            }
        })
    });
    let message = panic_message(&*outcome.unwrap_err());
    assert!(message.contains("deadlock"), "{message}");
    assert!(
        message.contains(
            "in a select, waiting for a receive on 1 channel, or a send on 1 channel, or green \
             thread 2 to finish"
        ),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// select_biased! and Select::new_biased (issue 25, crossbeam's surface)
// ---------------------------------------------------------------------------------------------

#[test]
fn select_biased_takes_the_first_ready_branch_written_every_time() {
    greenweave::run(|| {
        let (first_tx, first) = mpsc::channel::<u32>();
        let (second_tx, second) = mpsc::channel::<u32>();
        for n in 0..100 {
            first_tx.send(n).unwrap();
            second_tx.send(n).unwrap();
        }
        let mut order = Vec::new();
        for _ in 0..200 {
            greenweave::select_biased! {
                recv(first) -> n => order.push(("first", n.unwrap())),
                recv(second) -> n => order.push(("second", n.unwrap())),
            }
        }
        // The first channel is drained before the second is ever taken.
        let expected: Vec<_> = (0..100)
            .map(|n| ("first", n))
            .chain((0..100).map(|n| ("second", n)))
            .collect();
        assert_eq!(order, expected);
    });
}

#[test]
fn a_biased_select_still_waits_and_takes_whichever_becomes_ready() {
    greenweave::run(|| {
        let (_idle_tx, idle) = mpsc::channel::<u32>();
        let (tx, rx) = mpsc::channel::<u32>();
        greenweave::spawn(move || tx.send(5).unwrap());
        let mut select = Select::new_biased();
        select.recv(&idle);
        let later = select.recv(&rx);
        let operation = select.select();
        assert_eq!(operation.index(), later);
        assert_eq!(operation.recv(&rx), Ok(5));
    });
}

#[test]
fn select_biased_with_default_takes_the_default_only_when_nothing_is_ready() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u32>();
        let first = greenweave::select_biased! {
            recv(rx) -> _ => "recv",
            default => "default",
        };
        tx.send(1).unwrap();
        let second = greenweave::select_biased! {
            recv(rx) -> _ => "recv",
            default => "default",
        };
        assert_eq!([first, second], ["default", "recv"]);
    });
}

#[test]
fn ready_passes_the_wake_up_it_consumed_on_to_the_next_receiver() {
    greenweave::run(|| {
        let (tx, rx) = mpsc::channel::<u32>();
        let rx = Rc::new(rx);
        // A select that only asks which operation is ready parks first, then a plain receiver.
        let asker = {
            let rx = rx.clone();
            greenweave::spawn(move || {
                let mut select = Select::new();
                select.recv(&*rx);
                select.ready() // and never receives
            })
        };
        thread::yield_now();
        let receiver = {
            let rx = rx.clone();
            greenweave::spawn(move || rx.recv())
        };
        thread::yield_now();
        // One message, one wake-up, which goes to the asker, parked first: it passes it on.
        tx.send(9).unwrap();
        assert_eq!(asker.join().unwrap(), 0);
        assert_eq!(receiver.join().unwrap(), Ok(9));
    });
}

// ---------------------------------------------------------------------------------------------
// A receive that does not park meets a select waiting to send on a rendezvous channel
// (issue 25, item 3), on both channel kinds
// ---------------------------------------------------------------------------------------------

macro_rules! hand_off_tests {
    ($kind:ident) => {
        mod $kind {
            use std::cell::Cell;
            use std::rc::Rc;
            use std::time::Duration;

            use greenweave::sync::$kind::{self as channel, TryRecvError};
            use greenweave::{select, select_biased, thread};

            #[test]
            fn a_try_recv_takes_the_message_of_a_select_waiting_to_send_on_a_rendezvous_channel() {
                greenweave::run(|| {
                    let (tx, rx) = channel::sync_channel::<u32>(0);
                    let evaluated = Rc::new(Cell::new(false));
                    let selecting = {
                        let evaluated = evaluated.clone();
                        greenweave::spawn(move || {
                            select! {
                                send(tx, { evaluated.set(true); 7 }) -> sent => sent.unwrap(),
                            }
                        })
                    };
                    thread::yield_now(); // the select parks: no receiver
                    assert!(!evaluated.get());
                    assert_eq!(rx.try_recv(), Ok(7));
                    selecting.join().unwrap();
                    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
                });
            }

            #[test]
            fn try_select_with_a_receive_takes_the_message_of_a_select_waiting_to_send() {
                greenweave::run(|| {
                    let (tx, rx) = channel::sync_channel::<u32>(0);
                    let (_idle_tx, idle) = channel::channel::<u32>();
                    let selecting = greenweave::spawn(move || {
                        select! {
                            send(tx, 8) -> sent => sent.unwrap(),
                        }
                    });
                    thread::yield_now();
                    let got = select! {
                        recv(idle) -> _ => unreachable!("nothing is sent there"),
                        recv(rx) -> message => message,
                        default => panic!("the select waiting to send was not met"),
                    };
                    assert_eq!(got, Ok(8));
                    selecting.join().unwrap();
                });
            }

            #[test]
            fn a_try_recv_whose_select_takes_another_operation_finds_the_channel_empty() {
                greenweave::run(|| {
                    let (tx, rx) = channel::sync_channel::<u32>(0);
                    let (other_tx, other) = channel::channel::<&str>();
                    let selecting = greenweave::spawn(move || {
                        // Biased: with both ready, the receive (written first) is taken.
                        let taken = select_biased! {
                            recv(other) -> message => message.unwrap(),
                            send(tx, 9) -> _ => "send",
                        };
                        (taken, tx)
                    });
                    thread::yield_now(); // the select parks
                    other_tx.send("other").unwrap(); // ready too, in the same turn
                    let got = greenweave::time::timeout(Duration::from_secs(10), || rx.try_recv());
                    assert_eq!(got, Ok(Err(TryRecvError::Empty)));
                    let (taken, tx) = selecting.join().unwrap();
                    assert_eq!(taken, "other");
                    // The channel is as it was: a plain send and receive still meet.
                    let sender = greenweave::spawn(move || tx.send(10).unwrap());
                    assert_eq!(rx.recv(), Ok(10));
                    sender.join().unwrap();
                });
            }

            #[test]
            fn a_try_recv_with_no_select_waiting_to_send_lets_no_other_green_thread_run() {
                greenweave::run(|| {
                    let (tx, rx) = channel::sync_channel::<u32>(0);
                    let ran = Rc::new(Cell::new(false));
                    {
                        let ran = ran.clone();
                        greenweave::spawn(move || ran.set(true));
                    }
                    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
                    assert!(!ran.get(), "try_recv switched");
                    // A plain sender's message is in the channel while it waits: no switch
                    // either.
                    let sender = greenweave::spawn(move || tx.send(11).unwrap());
                    thread::yield_now(); // the sender and the green thread above run
                    ran.set(false);
                    greenweave::spawn({
                        let ran = ran.clone();
                        move || ran.set(true)
                    });
                    assert_eq!(rx.try_recv(), Ok(11));
                    assert!(!ran.get(), "try_recv switched");
                    sender.join().unwrap();
                });
            }

            #[test]
            fn a_try_recv_whose_select_is_cancelled_before_it_looks_finds_the_channel_empty() {
                greenweave::run(|| {
                    let (tx, rx) = channel::sync_channel::<u32>(0);
                    // Alive throughout: the select's unwind does not disconnect the channel
                    // (which would wake every receive).
                    let _sender = tx.clone();
                    let selecting = greenweave::spawn(move || {
                        select! {
                            send(tx, 12) -> sent => sent.unwrap(),
                        }
                    });
                    thread::yield_now(); // the select parks
                    // It is to unwind when it runs next, before it looks at the channel: the
                    // try_recv must not wait for a look that never comes.
                    selecting.cancel();
                    let got = greenweave::time::timeout(Duration::from_secs(10), || rx.try_recv());
                    assert_eq!(got, Ok(Err(TryRecvError::Empty)));
                    assert!(selecting.join().unwrap_err().is_cancelled());
                });
            }
        }
    };
}

mod hand_off {
    hand_off_tests!(mpsc);
    hand_off_tests!(shared);
}

/// Completing a selected receive takes the message the select found, whatever is left of the
/// green thread's cooperative budget: a completion that spent the budget and yielded first
/// let another receiver of the same channel take the message, and the select's receive then
/// waited for one that never came (a deadlock here). Each round sends one message and
/// selects it with a thief spinning on `try_recv`; the rounds spend the budget a few units at
/// a time, so some round's completion falls on a spent budget.
mod completion_ignores_the_budget {
    use super::*;

    fn rounds_with_a_thief<R: 'static>(
        make: impl FnOnce() -> (Rc<dyn Fn(u32)>, Rc<R>),
        try_take: impl Fn(&R) -> Option<bool> + 'static,
        select_take: impl Fn(&R) -> Option<u32>,
    ) {
        greenweave::run(move || {
            let (send, receiver) = make();
            let stop = Rc::new(Cell::new(false));
            let progress = Rc::new(Cell::new(0_u32));
            let thief = {
                let (receiver, stop, progress) = (receiver.clone(), stop.clone(), progress.clone());
                let send = send.clone();
                thread::spawn(move || {
                    let mut stolen = 0;
                    // Each yield lets the main green thread run (the ready queue is FIFO): a
                    // round that does not move in a thousand of them is parked for good.
                    let (mut seen, mut idle) = (progress.get(), 0);
                    while !stop.get() {
                        match try_take(&receiver) {
                            Some(true) => stolen += 1,
                            Some(false) => thread::yield_now(),
                            None => break,
                        }
                        if progress.get() == seen {
                            idle += 1;
                            if idle == 1000 {
                                // Unstick it with a message it cannot expect, so that the test
                                // fails instead of hanging.
                                send(u32::MAX);
                                panic!("the select's receive waited for a message it selected");
                            }
                        } else {
                            (seen, idle) = (progress.get(), 0);
                        }
                    }
                    stolen
                })
            };
            let mut selected = 0;
            for round in 0..400 {
                progress.set(round + 1);
                send(round);
                // The message is there now, unless the thief took it at a yield of `send`.
                if let Some(message) = select_take(&receiver) {
                    assert_eq!(message, round);
                    selected += 1;
                }
            }
            stop.set(true);
            let stolen = thread::spawn(move || thief.join().unwrap()).join().unwrap();
            assert_eq!(
                selected + stolen,
                400,
                "every message is received exactly once"
            );
        });
    }

    #[test]
    fn on_an_mpsc_channel() {
        rounds_with_a_thief(
            || {
                let (sender, receiver) = mpsc::channel::<u32>();
                (Rc::new(move |m| sender.send(m).unwrap()), Rc::new(receiver))
            },
            |receiver| match receiver.try_recv() {
                Ok(_) => Some(true),
                Err(mpsc::TryRecvError::Empty) => Some(false),
                Err(mpsc::TryRecvError::Disconnected) => None,
            },
            |receiver| {
                select! {
                    recv(receiver) -> message => Some(message.unwrap()),
                    default => None,
                }
            },
        );
    }

    #[test]
    fn on_a_shared_channel() {
        use greenweave::sync::shared;
        rounds_with_a_thief(
            || {
                let (sender, receiver) = shared::channel::<u32>();
                (Rc::new(move |m| sender.send(m).unwrap()), Rc::new(receiver))
            },
            |receiver| match receiver.try_recv() {
                Ok(_) => Some(true),
                Err(shared::TryRecvError::Empty) => Some(false),
                Err(shared::TryRecvError::Disconnected) => None,
            },
            |receiver| {
                select! {
                    recv(receiver) -> message => Some(message.unwrap()),
                    default => None,
                }
            },
        );
    }
}
