//! The `tokio` feature: every worker has a tokio runtime, current in each of its green threads
//! and driven by the worker's own scheduler. tokio's timers, sockets, `spawn`,
//! `Handle::current()` and `spawn_blocking` work in green threads, inside `block_on` and out,
//! and any number of green threads of one worker can be in `block_on` at once. Concurrency is
//! shown by the order of events, never by timing.
#![cfg(feature = "tokio")]

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use greenweave::{Runtime, block_on, thread};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A green thread that counts its ticks (a 1 ms greenweave sleep each) until stopped.
struct Heartbeat {
    ticks: Rc<Cell<u64>>,
    stop: Rc<Cell<bool>>,
    handle: thread::JoinHandle<()>,
}

impl Heartbeat {
    fn start() -> Heartbeat {
        let ticks = Rc::new(Cell::new(0));
        let stop = Rc::new(Cell::new(false));
        let handle = {
            let (ticks, stop) = (ticks.clone(), stop.clone());
            greenweave::spawn(move || {
                while !stop.get() {
                    thread::sleep(Duration::from_millis(1));
                    ticks.set(ticks.get() + 1);
                }
            })
        };
        Heartbeat {
            ticks,
            stop,
            handle,
        }
    }

    fn stop(self) {
        self.stop.set(true);
        self.handle.join().unwrap();
    }
}

#[test]
fn a_tokio_sleep_in_block_on_works_as_written() {
    greenweave::run(|| {
        let start = std::time::Instant::now();
        // Made outside any future: tokio's context is current in every green thread.
        block_on(tokio::time::sleep(Duration::from_millis(20)));
        assert!(start.elapsed() >= Duration::from_millis(20));
    });
}

#[test]
fn a_green_thread_in_block_on_parks_only_itself() {
    let done = hang_watchdog("a_green_thread_in_block_on_parks_only_itself");
    greenweave::run(|| {
        let heartbeat = Heartbeat::start();
        // A tokio future that only the heartbeat green thread completes, after three ticks:
        // were the worker blocked while this green thread waits, it would never be.
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let ticks = heartbeat.ticks.clone();
        let notifier = greenweave::spawn(move || {
            while ticks.get() < 3 {
                thread::sleep(Duration::from_millis(1));
            }
            sender.send(ticks.get()).unwrap();
        });
        let ticks_seen = block_on(receiver).unwrap();
        assert!(ticks_seen >= 3);
        notifier.join().unwrap();
        heartbeat.stop();
    });
    done.store(true, Ordering::SeqCst);
}

#[test]
fn a_hundred_green_threads_of_one_worker_are_in_block_on_at_once() {
    greenweave::run(|| {
        let events = Rc::new(RefCell::new(Vec::new()));
        let sleepers: Vec<_> = (0..100)
            .map(|i| {
                let events = events.clone();
                greenweave::spawn(move || {
                    events.borrow_mut().push(("start", i));
                    let slept = block_on(async move {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        i * 2
                    });
                    events.borrow_mut().push(("end", i));
                    slept
                })
            })
            .collect();
        let outputs: Vec<_> = sleepers.into_iter().map(|s| s.join().unwrap()).collect();
        assert_eq!(outputs, (0..100).map(|i| i * 2).collect::<Vec<_>>());
        let events = events.borrow();
        let first_end = events.iter().position(|(what, _)| *what == "end").unwrap();
        assert_eq!(
            first_end, 100,
            "every sleep started before any ended: {events:?}"
        );
    });
}

#[test]
fn tokio_tcp_between_a_tokio_task_and_green_threads() {
    greenweave::run(|| {
        let listener = block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let address = listener.local_addr().unwrap();
        // A tokio task on this worker's runtime, spawned from a green thread.
        let server = tokio::spawn(async move {
            for _ in 0..10 {
                let (mut stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buffer = [0; 64];
                    loop {
                        let n = stream.read(&mut buffer).await.unwrap();
                        if n == 0 {
                            break;
                        }
                        stream.write_all(&buffer[..n]).await.unwrap();
                    }
                });
            }
        });
        let clients: Vec<_> = (0..10u8)
            .map(|i| {
                greenweave::spawn(move || {
                    block_on(async move {
                        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
                        let message = [i; 16];
                        stream.write_all(&message).await.unwrap();
                        let mut echoed = [0; 16];
                        stream.read_exact(&mut echoed).await.unwrap();
                        echoed
                    })
                })
            })
            .collect();
        for (i, client) in clients.into_iter().enumerate() {
            assert_eq!(client.join().unwrap(), [i as u8; 16]);
        }
        block_on(server).unwrap();
    });
}

#[test]
fn tokio_spawn_handle_current_and_spawn_blocking_work_outside_block_on() {
    greenweave::run(|| {
        let handle = tokio::runtime::Handle::current();
        let task = tokio::spawn(async { 40 });
        let on_handle = handle.spawn(async { 1 });
        let blocking = tokio::task::spawn_blocking(|| 1);
        // The tokio tasks run while this green thread does something else.
        thread::sleep(Duration::from_millis(5));
        let sum = block_on(async { task.await.unwrap() + on_handle.await.unwrap() })
            + block_on(blocking).unwrap();
        assert_eq!(sum, 42);
    });
}

#[test]
fn a_tokio_task_that_wakes_a_green_thread_is_no_deadlock() {
    greenweave::run(|| {
        // The green thread waits on a greenweave channel that only a tokio task, after a tokio
        // sleep, sends to: a live tokio task may wake it.
        let (sender, receiver) = greenweave::sync::shared::channel::<u32>();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            sender.send(7).unwrap();
        });
        assert_eq!(receiver.recv().unwrap(), 7);
    });
}

#[test]
fn tokio_tasks_run_on_the_worker_that_spawned_them() {
    let runtime = Runtime::builder().workers(2).build().unwrap();
    let placed = runtime.run_on_every_worker(|worker| {
        let task = tokio::spawn(async { greenweave::runtime::current_worker() });
        (worker, block_on(task).unwrap())
    });
    assert_eq!(placed, [(0, 0), (1, 1)]);
}

#[test]
fn the_runtime_ends_after_its_green_threads_and_drops_pending_tokio_tasks() {
    /// Sets its flag when dropped.
    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let task_dropped = Arc::new(AtomicBool::new(false));
    let green_dropped = Rc::new(Cell::new(false));
    {
        let task_dropped = task_dropped.clone();
        let green_dropped = green_dropped.clone();
        greenweave::run(move || {
            let probe = SetOnDrop(task_dropped);
            tokio::spawn(async move {
                let _probe = probe;
                std::future::pending::<()>().await;
            });
            // A green thread parked in block_on at the end: cancelled, its future dropped.
            greenweave::spawn(move || {
                struct Flag(Rc<Cell<bool>>);
                impl Drop for Flag {
                    fn drop(&mut self) {
                        self.0.set(true);
                    }
                }
                let flag = Flag(green_dropped);
                block_on(async move {
                    let _flag = flag;
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                });
            });
            thread::yield_now();
        });
    }
    assert!(green_dropped.get());
    assert!(task_dropped.load(Ordering::SeqCst));
}

#[test]
#[should_panic(expected = "called from a tokio task")]
fn block_on_in_a_tokio_task_names_the_mistake() {
    greenweave::run(|| {
        let task = tokio::spawn(async { block_on(async { 1 }) });
        if let Err(error) = block_on(task) {
            std::panic::resume_unwind(error.into_panic());
        }
    });
}

/// Ends the test binary with a message if `done` is not set within a generous bound: what a
/// lost wake-up would otherwise make a hang.
fn hang_watchdog(what: &'static str) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let watched = done.clone();
    std::thread::spawn(move || {
        for _ in 0..600 {
            if watched.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("{what}: still waiting after 60 s, a lost wake-up");
        std::process::exit(1);
    });
    done
}

#[test]
fn a_tokio_event_seen_by_a_green_threads_budget_poll_still_gets_its_turn() {
    let done = hang_watchdog("a_tokio_event_seen_by_a_green_threads_budget_poll");
    greenweave::run(|| {
        let listener = block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0; 4];
            stream.read_exact(&mut request).await.unwrap();
            stream.write_all(&request).await.unwrap();
        });
        let mut client = block_on(tokio::net::TcpStream::connect(address)).unwrap();
        block_on(client.write_all(b"ping")).unwrap();
        // tokio's epoll fd now has events (the accept, the request). This green thread spends
        // its budget: the poll that comes with the forced yield runs on its own stack and takes
        // the fd's edge, so the turn is left to the scheduler, which must not sleep on it.
        for _ in 0..3 * 128 {
            block_on(async {});
        }
        let mut reply = [0; 4];
        block_on(client.read_exact(&mut reply)).unwrap();
        assert_eq!(&reply, b"ping");
        block_on(server).unwrap();
    });
    done.store(true, Ordering::SeqCst);
}
