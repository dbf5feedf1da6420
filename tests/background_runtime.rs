//! A tokio program that hands blocking library code to green threads (feature `hooks`): it
//! starts a greenweave runtime on OS threads of its own (`Runtime::start`, a
//! `thread::Background`), its tasks spawn green threads onto it and `.await` their
//! `RemoteJoinHandle`s, a better `spawn_blocking`.
//!
//! The order of events shows, with no timing threshold, that an awaited green thread holds
//! neither a tokio worker nor a greenweave worker while it waits: 100 tokio tasks each hand a
//! synchronous `redis` `BLPOP` to a green thread, and a coordinator on a plain OS thread pushes
//! the values they wait for only once the server holds all 100 `BLPOP`s at once and a tokio
//! heartbeat task has ticked since. An await that blocked a tokio worker would keep the other
//! tasks from spawning theirs, and a `BLPOP` that blocked a greenweave worker would keep the
//! other green threads on it from sending theirs; the coordinator then gives up after
//! [`GATE_LIMIT`], failing the test.
#![cfg(feature = "hooks")]

#[path = "common/redis_server.rs"]
mod redis_server;
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/spawn_watch.rs"]
mod spawn_watch;
#[path = "common/tokio_program.rs"]
mod tokio_program;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use greenweave::Runtime;
use redis::Commands;
use redis_server::RedisServer;

/// How long the coordinator waits for every `BLPOP` to reach the server and the heartbeat to
/// tick before it fails the test; the `BLPOP`s' own timeout is longer. Never reached in a
/// passing run.
const GATE_LIMIT: Duration = Duration::from_secs(120);

/// What happened, in order, across the tokio tasks, the green threads and the coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// Task `n`'s green thread is about to send its `BLPOP`.
    Waiting(usize),
    /// The tokio heartbeat task ran.
    Tick,
    /// The coordinator saw every `BLPOP` held by the server and pushed the values.
    Pushed,
    /// Task `n`'s await returned its green thread's value, checked.
    Done(usize),
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Event>>>);

impl Log {
    fn push(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }

    fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
}

fn key(task: usize) -> String {
    format!("greenweave:background:{task}")
}

fn value(task: usize) -> String {
    format!("value for task {task}")
}

/// The `blocked_clients` figure of redis's `INFO clients`.
fn blocked_clients(info: &str) -> usize {
    info.lines()
        .find_map(|line| line.strip_prefix("blocked_clients:"))
        .expect("INFO clients reports blocked_clients")
        .trim()
        .parse()
        .unwrap()
}

/// On a plain OS thread: waits (bounded by [`GATE_LIMIT`]) until the server holds `clients`
/// blocked clients and then until the heartbeat has ticked, logs [`Event::Pushed`] and pushes
/// every value. Past the limit it pushes them all the same, so that the tasks end and the test
/// fails with its message instead of waiting out the `BLPOP`s, and panics.
fn push_when_all_wait(url: &str, clients: usize, log: &Log) {
    let client = redis::Client::open(url).unwrap();
    let mut connection = client.get_connection().unwrap();
    let begun = Instant::now();
    let past_limit = |what| {
        std::thread::sleep(Duration::from_millis(1));
        (begun.elapsed() > GATE_LIMIT).then_some(what)
    };
    let mut failure = None;
    while failure.is_none() {
        let info: String = redis::cmd("INFO")
            .arg("clients")
            .query(&mut connection)
            .unwrap();
        if blocked_clients(&info) == clients {
            break;
        }
        failure = past_limit("not every BLPOP reached the server");
    }
    let all_there = log.events().len();
    while failure.is_none() && !log.events()[all_there..].contains(&Event::Tick) {
        failure = past_limit("the tokio heartbeat did not tick while every BLPOP waited");
    }
    if failure.is_none() {
        log.push(Event::Pushed);
    }
    for task in 0..clients {
        let _: usize = connection.lpush(key(task), value(task)).unwrap();
    }
    if let Some(what) = failure {
        panic!(
            "{what}: an await or a BLPOP blocked its worker; events: {:?}",
            log.events()
        );
    }
}

#[test]
fn a_hundred_tokio_tasks_await_green_threads_that_all_wait_in_blocking_redis_calls_at_once() {
    const TASKS: usize = 100;
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let log = Log::default();
    let coordinator = std::thread::spawn({
        let (url, log) = (url.clone(), log.clone());
        move || push_when_all_wait(&url, TASKS, &log)
    });

    let background = Arc::new(
        Runtime::builder()
            .workers(2)
            .build()
            .unwrap()
            .start()
            .unwrap(),
    );
    let tokio = tokio_program::runtime();
    let client = redis::Client::open(url).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    tokio.block_on(async {
        let heartbeat = tokio_program::heartbeat(&done, {
            let log = log.clone();
            move || log.push(Event::Tick)
        });
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let (background, client, log) = (background.clone(), client.clone(), log.clone());
                tokio::spawn(async move {
                    // The blocking call, as written for a plain thread, on a green thread.
                    let popped = background
                        .spawn(move || {
                            let mut connection = client.get_connection().unwrap();
                            log.push(Event::Waiting(task));
                            let popped: Option<(String, String)> = connection
                                .blpop(key(task), 2.0 * GATE_LIMIT.as_secs_f64())
                                .unwrap();
                            popped
                        })
                        .await
                        .unwrap();
                    assert_eq!(popped, Some((key(task), value(task))));
                })
            })
            .collect();
        for (task, handle) in tasks.into_iter().enumerate() {
            handle.await.unwrap();
            log.push(Event::Done(task));
        }
        done.store(true, Ordering::Release);
        heartbeat.await.unwrap();
    });
    coordinator
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    Arc::into_inner(background)
        .expect("every task has dropped its handle on the runtime")
        .shutdown();

    let events = log.events();
    let position = |event| events.iter().position(|&e| e == event);
    let pushed = position(Event::Pushed).expect("the coordinator pushed the values");
    for task in 0..TASKS {
        let waiting = position(Event::Waiting(task)).expect("every green thread waited");
        let done = position(Event::Done(task)).expect("every task ended");
        assert!(waiting < pushed && pushed < done, "{events:?}");
    }
    let last_waiting = (0..TASKS)
        .filter_map(|task| position(Event::Waiting(task)))
        .max()
        .unwrap();
    assert!(
        events[last_waiting..pushed].contains(&Event::Tick),
        "no tokio tick while every BLPOP waited: {events:?}"
    );
    drop(server);
}

#[test]
fn a_current_thread_tokio_runtime_runs_its_other_tasks_while_one_awaits_a_green_thread() {
    let background = Runtime::builder()
        .workers(1)
        .build()
        .unwrap()
        .start()
        .unwrap();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (sender, receiver) = greenweave::sync::shared::channel();
    let sent = Arc::new(AtomicUsize::new(0));
    let answer = tokio.block_on(async {
        // The green thread waits for what only another task of this one-thread tokio runtime
        // sends: the await below must give the thread back to tokio. (Bounded: a blocked
        // tokio thread fails the test instead of hanging it.)
        let green = background.spawn(move || receiver.recv_timeout(GATE_LIMIT).map(|n: u64| n * 2));
        let sender_task = tokio::spawn({
            let sent = sent.clone();
            async move {
                tokio::task::yield_now().await;
                sender.send(21).unwrap();
                sent.fetch_add(1, Ordering::Release);
            }
        });
        let answer = green.await.unwrap();
        sender_task.await.unwrap();
        answer
    });
    assert_eq!(answer, Ok(42));
    assert_eq!(sent.load(Ordering::Acquire), 1);
    drop(tokio);
    background.shutdown();
}
