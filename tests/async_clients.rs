//! Real async client crates, unchanged, in green threads (feature `tokio`), each future polled by
//! `greenweave::block_on` in the worker's own tokio context: `tokio-postgres` and `sqlx` against
//! Debian's PostgreSQL, `reqwest` against a green-thread HTTP server in the same runtime, and
//! `redis`'s async client against a real `redis-server` (the servers are started by the tests:
//! tests/common/).
//!
//! Each test shows by the order of events, with no timing threshold, that a client waiting in
//! `block_on` parks only its own green thread: every client waits at a gate that a coordinator
//! on a plain OS thread opens only once the server (or the green HTTP server) holds every
//! client's request at once (sqlx: as many as its pool has connections, while the other
//! clients wait in the pool), and a heartbeat has ticked since. The clients run on one worker
//! (one OS thread) with a heartbeat green thread beside them, except in
//! `tokio_tasks_await_green_threads_of_a_started_runtime_...`, where they run on a started
//! runtime (`Runtime::start`) whose green threads a tokio program's tasks await, and the
//! heartbeat is a task of that program. A `block_on` that blocked its worker would hold the
//! other clients back from the gate (and the heartbeat from ticking); the coordinator then
//! gives up after [`GATE_LIMIT`], failing the test. The log then reads: every client's start,
//! a tick, the gate's opening, every client's finish. The last test is of the end of a
//! `block_on` cut short: a cancelled or timed-out `BLPOP` leaves the server and takes nothing.
#![cfg(feature = "tokio")]

#[path = "common/http_get.rs"]
mod http_get;
#[path = "common/postgres_server.rs"]
mod postgres_server;
#[path = "common/redis_server.rs"]
mod redis_server;
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/spawn_watch.rs"]
mod spawn_watch;
#[path = "common/tokio_program.rs"]
mod tokio_program;

use std::io::BufReader;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use postgres_server::PostgresServer;
use redis_server::RedisServer;

/// How long the coordinator waits for every client to reach the gate and the heartbeat to tick
/// before it fails the test (a `block_on` that blocked the worker would keep it waiting for
/// ever); also how long a gated client waits for the gate. Never reached in a passing run.
const GATE_LIMIT: Duration = Duration::from_secs(120);

/// How long a client's `BLPOP` waits in redis: longer than the coordinator, whose give-up
/// says why.
const BLPOP_LIMIT: f64 = 2.0 * GATE_LIMIT.as_secs_f64();

/// The advisory lock key the PostgreSQL coordinators hold and every client waits for.
const GATE: i64 = 30_004;

/// What happened, in order, across the worker and the coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// The client is about to wait at the gate.
    Start(usize),
    Tick,
    /// The coordinator opened the gate.
    Released,
    /// The client has its answer, checked.
    Finish(usize),
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

    /// How many clients have started.
    fn starts(&self) -> usize {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .filter(|e| matches!(e, Event::Start(_)))
            .count()
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Whether a tick was logged at or after position `since`.
    fn ticked_since(&self, since: usize) -> bool {
        self.0.lock().unwrap()[since..].contains(&Event::Tick)
    }
}

/// A green thread on the calling worker that logs a tick every millisecond (a green sleep)
/// until [`Heartbeat::stop`].
struct Heartbeat {
    done: Arc<AtomicBool>,
    thread: greenweave::thread::JoinHandle<()>,
}

impl Heartbeat {
    fn start(log: &Log) -> Heartbeat {
        let done = Arc::new(AtomicBool::new(false));
        let thread = greenweave::spawn({
            let (log, done) = (log.clone(), done.clone());
            move || {
                while !done.load(Ordering::Relaxed) {
                    log.push(Event::Tick);
                    greenweave::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        Heartbeat { done, thread }
    }

    fn stop(self) {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
    }
}

/// The coordinator's part, on a plain OS thread: waits (bounded by [`GATE_LIMIT`]) until
/// `all_waiting` says every client waits at the gate, then until the heartbeat has ticked
/// since, logs [`Event::Released`] and calls `open`. Past the limit it opens the gate all the
/// same, so that the clients end and the test fails with its message instead of hanging, and
/// panics.
fn open_gate_when_all_wait(log: &Log, mut all_waiting: impl FnMut() -> bool, open: impl FnOnce()) {
    let begun = Instant::now();
    let past_limit = |what| {
        std::thread::sleep(Duration::from_millis(1));
        (begun.elapsed() > GATE_LIMIT).then_some(what)
    };
    let mut failure = None;
    while failure.is_none() && !all_waiting() {
        failure = past_limit("not every client reached the gate");
    }
    let all_there = log.len();
    while failure.is_none() && !log.ticked_since(all_there) {
        failure = past_limit("the heartbeat did not tick while every client waited at the gate");
    }
    if failure.is_none() {
        log.push(Event::Released);
    }
    open();
    if let Some(what) = failure {
        panic!(
            "{what}: a client's block_on blocked its worker; events: {:?}",
            log.events()
        );
    }
}

/// Joins a coordinator's thread: its give-up fails the test with its own message.
fn join_gate(gate: std::thread::JoinHandle<()>) {
    if let Err(panic) = gate.join() {
        std::panic::resume_unwind(panic);
    }
}

/// Checks that the log is every client's start, a tick, the gate's release, every client's
/// finish (ticks aside, one of each).
fn assert_all_started_then_a_tick_then_all_finished(events: &[Event], clients: usize) {
    let position = |event| events.iter().position(|&e| e == event);
    let count = |event| events.iter().filter(|&&e| e == event).count();
    let released = position(Event::Released).expect("the gate was opened");
    for client in 0..clients {
        let start = position(Event::Start(client)).expect("every client started");
        let finish = position(Event::Finish(client)).expect("every client finished");
        assert!(start < released && released < finish, "{events:?}");
        assert_eq!(count(Event::Start(client)), 1, "{events:?}");
        assert_eq!(count(Event::Finish(client)), 1, "{events:?}");
    }
    let last_start = (0..clients)
        .filter_map(|client| position(Event::Start(client)))
        .max()
        .unwrap_or(0);
    assert!(
        events[last_start..released].contains(&Event::Tick),
        "no tick between the last start and the gate's opening: {events:?}"
    );
    assert_eq!(count(Event::Released), 1, "{events:?}");
    assert_eq!(
        events.len(),
        2 * clients + 1 + count(Event::Tick),
        "{events:?}"
    );
}

/// A PostgreSQL coordinator: holds the advisory lock [`GATE`] (exclusively, through the
/// synchronous `postgres` client on a plain OS thread) until `clients` clients have started,
/// `in_server` sessions wait for the lock in the server, and the heartbeat has ticked since.
fn start_postgres_gate(
    params: &str,
    clients: usize,
    in_server: usize,
    log: &Log,
) -> std::thread::JoinHandle<()> {
    let (locked_tx, locked_rx) = mpsc::channel();
    let thread = std::thread::spawn({
        let (params, log) = (params.to_owned(), log.clone());
        move || {
            let mut client = postgres::Client::connect(&params, postgres::NoTls).unwrap();
            client
                .execute("SELECT pg_advisory_lock($1)", &[&GATE])
                .unwrap();
            locked_tx.send(()).unwrap();
            let mut waiting = postgres::Client::connect(&params, postgres::NoTls).unwrap();
            let all_waiting = || {
                let row = waiting
                    .query_one(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                        &[],
                    )
                    .unwrap();
                row.get::<_, i64>(0) == in_server as i64 && log.starts() == clients
            };
            open_gate_when_all_wait(&log, all_waiting, || {
                client
                    .execute("SELECT pg_advisory_unlock($1)", &[&GATE])
                    .unwrap();
            });
        }
    });
    locked_rx
        .recv()
        .expect("the coordinator takes the lock before the clients start");
    thread
}

#[test]
fn tokio_postgres_in_100_green_threads_on_one_worker_all_wait_in_the_server_before_any_finishes() {
    const CLIENTS: usize = 100;
    // Every client has its own connection (a query waits in the server per connection), plus
    // the coordinator's two.
    let Some(server) = PostgresServer::start_with_max_connections(CLIENTS + 10) else {
        return;
    };
    let log = Log::default();
    let gate = start_postgres_gate(&server.params(), CLIENTS, CLIENTS, &log);
    greenweave::run(|| {
        let heartbeat = Heartbeat::start(&log);
        let clients: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let (params, log) = (server.params(), log.clone());
                greenweave::spawn(move || {
                    log.push(Event::Start(id));
                    let (value, slept) = greenweave::block_on(async {
                        let (client, connection) =
                            tokio_postgres::connect(&params, tokio_postgres::NoTls)
                                .await
                                .unwrap();
                        // The connection's task runs on this worker's tokio runtime.
                        let connection = tokio::spawn(connection);
                        client
                            .execute("SELECT pg_advisory_lock_shared($1)", &[&GATE])
                            .await
                            .unwrap();
                        let row = client
                            .query_one(
                                "SELECT pg_sleep(0.1)::text, $1::int * 1000 + 7",
                                &[&(id as i32)],
                            )
                            .await
                            .unwrap();
                        drop(client);
                        connection.await.unwrap().unwrap();
                        (row.get::<_, i32>(1), row.get::<_, String>(0))
                    });
                    assert_eq!(value, id as i32 * 1000 + 7);
                    assert_eq!(slept, "");
                    log.push(Event::Finish(id));
                })
            })
            .collect();
        for client in clients {
            client.join().unwrap();
        }
        heartbeat.stop();
    });
    join_gate(gate);
    assert_all_started_then_a_tick_then_all_finished(&log.events(), CLIENTS);
}

#[test]
fn sqlx_pool_of_5_shared_by_20_green_threads_on_one_worker_hands_each_its_turn() {
    use sqlx::postgres::PgPoolOptions;

    const CLIENTS: usize = 20;
    const CONNECTIONS: usize = 5;
    let Some(server) = PostgresServer::start() else {
        return;
    };
    let log = Log::default();
    // Opens once every client has started: five wait for the gate in the server, holding the
    // pool's every connection, and fifteen wait in the pool for one of theirs.
    let gate = start_postgres_gate(&server.params(), CLIENTS, CONNECTIONS, &log);
    greenweave::run(|| {
        let heartbeat = Heartbeat::start(&log);
        let pool = greenweave::block_on(
            PgPoolOptions::new()
                .max_connections(CONNECTIONS as u32)
                .acquire_timeout(GATE_LIMIT)
                .connect(&server.url()),
        )
        .unwrap();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let (pool, log) = (pool.clone(), log.clone());
                greenweave::spawn(move || {
                    log.push(Event::Start(id));
                    let (number, text): (i32, String) = greenweave::block_on(async {
                        let mut connection = pool.acquire().await.unwrap();
                        sqlx::query("SELECT pg_advisory_lock_shared($1)")
                            .bind(GATE)
                            .execute(&mut *connection)
                            .await
                            .unwrap();
                        let row = sqlx::query_as(
                            "SELECT $1::int * 1000 + 7, format('green thread %s', $1::int)",
                        )
                        .bind(id as i32)
                        .fetch_one(&mut *connection)
                        .await
                        .unwrap();
                        let (unlocked,): (bool,) =
                            sqlx::query_as("SELECT pg_advisory_unlock_shared($1)")
                                .bind(GATE)
                                .fetch_one(&mut *connection)
                                .await
                                .unwrap();
                        assert!(unlocked);
                        row
                    });
                    assert_eq!(number, id as i32 * 1000 + 7);
                    assert_eq!(text, format!("green thread {id}"));
                    log.push(Event::Finish(id));
                })
            })
            .collect();
        for client in clients {
            client.join().unwrap();
        }
        // A connection came back to the pool for each waiting client, none beyond its size.
        assert_eq!(pool.size(), CONNECTIONS as u32);
        greenweave::block_on(pool.close());
        heartbeat.stop();
    });
    join_gate(gate);
    assert_all_started_then_a_tick_then_all_finished(&log.events(), CLIENTS);
}

#[test]
fn tokio_tasks_await_green_threads_of_a_started_runtime_that_each_run_tokio_postgres_there() {
    const TASKS: usize = 20;
    let Some(server) = PostgresServer::start() else {
        return;
    };
    let log = Log::default();
    let gate = start_postgres_gate(&server.params(), TASKS, TASKS, &log);
    // Two kinds of tokio runtime at once: the program's own, whose tasks await the green
    // threads, and each greenweave worker's, which runs the green threads' futures.
    let background = Arc::new(
        greenweave::Runtime::builder()
            .workers(2)
            .build()
            .unwrap()
            .start()
            .unwrap(),
    );
    let program = tokio_program::runtime();
    let done = Arc::new(AtomicBool::new(false));
    program.block_on(async {
        // The program's heartbeat: its threads stay free while every task awaits.
        let heartbeat = tokio_program::heartbeat(&done, {
            let log = log.clone();
            move || log.push(Event::Tick)
        });
        let tasks: Vec<_> = (0..TASKS)
            .map(|id| {
                let (background, params, log) = (background.clone(), server.params(), log.clone());
                tokio::spawn(async move {
                    let value = background
                        .spawn(move || {
                            log.push(Event::Start(id));
                            let value = greenweave::block_on(async {
                                let (client, connection) =
                                    tokio_postgres::connect(&params, tokio_postgres::NoTls)
                                        .await
                                        .unwrap();
                                tokio::spawn(connection);
                                client
                                    .execute("SELECT pg_advisory_lock_shared($1)", &[&GATE])
                                    .await
                                    .unwrap();
                                let row = client
                                    .query_one("SELECT $1::int * 1000 + 7", &[&(id as i32)])
                                    .await
                                    .unwrap();
                                row.get::<_, i32>(0)
                            });
                            log.push(Event::Finish(id));
                            value
                        })
                        .await
                        .unwrap();
                    assert_eq!(value, id as i32 * 1000 + 7);
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        done.store(true, Ordering::Release);
        heartbeat.await.unwrap();
    });
    Arc::into_inner(background)
        .expect("every task has dropped its handle on the runtime")
        .shutdown();
    join_gate(gate);
    assert_all_started_then_a_tick_then_all_finished(&log.events(), TASKS);
}

/// The body the green HTTP server answers `path` with.
fn body_for(path: &str) -> String {
    format!("you asked for {path}")
}

#[test]
fn reqwest_in_20_green_threads_gets_every_answer_from_a_green_server_on_the_same_worker() {
    const CLIENTS: usize = 20;
    const REQUESTS_EACH: usize = 5;
    let log = Log::default();
    // The green server counts the first requests it holds; the coordinator opens the gate.
    let arrived = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicBool::new(false));
    let gate = std::thread::spawn({
        let (log, arrived, open) = (log.clone(), arrived.clone(), open.clone());
        move || {
            open_gate_when_all_wait(
                &log,
                || arrived.load(Ordering::Acquire) == CLIENTS,
                || open.store(true, Ordering::Release),
            )
        }
    });
    greenweave::run(|| {
        let heartbeat = Heartbeat::start(&log);
        let listener = greenweave::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        // Answers every GET on each keep-alive connection, holding each client's first one
        // (path ending in /0) at the gate.
        let server = greenweave::spawn({
            let (arrived, open) = (arrived.clone(), open.clone());
            move || {
                let mut handlers = Vec::new();
                for stream in listener.incoming() {
                    let stream = stream.unwrap();
                    let (arrived, open) = (arrived.clone(), open.clone());
                    handlers.push(greenweave::spawn(move || {
                        let mut reader = BufReader::new(&stream);
                        while let Some(get) = http_get::read_get(&mut reader) {
                            if get.path.ends_with("/0") {
                                arrived.fetch_add(1, Ordering::Release);
                                let begun = Instant::now();
                                while !open.load(Ordering::Acquire) {
                                    assert!(begun.elapsed() < GATE_LIMIT, "the gate stayed shut");
                                    greenweave::thread::sleep(Duration::from_millis(1));
                                }
                            }
                            http_get::write_ok(&stream, &body_for(&get.path));
                        }
                    }));
                }
                handlers
            }
        });

        // One client for every green thread, as a program shares it; its pool keeps a
        // connection per green thread alive between requests.
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(GATE_LIMIT)
            .build()
            .unwrap();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let (client, log) = (client.clone(), log.clone());
                greenweave::spawn(move || {
                    log.push(Event::Start(id));
                    for request in 0..REQUESTS_EACH {
                        let path = format!("/client/{id}/request/{request}");
                        let url = format!("http://{address}{path}");
                        let (status, body) = greenweave::block_on(async {
                            let response = client.get(url).send().await.unwrap();
                            (response.status(), response.text().await.unwrap())
                        });
                        assert_eq!(status, reqwest::StatusCode::OK);
                        assert_eq!(body, body_for(&path));
                    }
                    log.push(Event::Finish(id));
                })
            })
            .collect();
        for client in clients {
            client.join().unwrap();
        }
        heartbeat.stop();
        // The server's green threads would wait for more requests for ever: end them.
        server.cancel();
        assert!(server.join().unwrap_err().is_cancelled());
    });
    join_gate(gate);
    assert_all_started_then_a_tick_then_all_finished(&log.events(), CLIENTS);
}

/// The value the redis coordinator pushes to client `id`'s list.
fn redis_value(id: usize) -> String {
    format!("value for green thread {id}")
}

fn redis_key(id: usize) -> String {
    format!("greenweave:async:{id}")
}

#[test]
fn redis_async_blpop_in_50_green_threads_on_one_worker_all_wait_in_the_server_at_once() {
    use redis::AsyncCommands;

    const CLIENTS: usize = 50;
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let log = Log::default();
    let gate = std::thread::spawn({
        let (url, log) = (url.clone(), log.clone());
        move || {
            let client = redis::Client::open(url).unwrap();
            let mut connection = client.get_connection().unwrap();
            let all_waiting = || {
                let info: String = redis::cmd("INFO")
                    .arg("clients")
                    .query(&mut connection)
                    .unwrap();
                blocked_clients(&info) == CLIENTS
            };
            let mut pusher = client.get_connection().unwrap();
            open_gate_when_all_wait(&log, all_waiting, || {
                for id in 0..CLIENTS {
                    let _: usize =
                        redis::Commands::lpush(&mut pusher, redis_key(id), redis_value(id))
                            .unwrap();
                }
            });
        }
    });
    greenweave::run(|| {
        let heartbeat = Heartbeat::start(&log);
        let client = redis::Client::open(url).unwrap();
        // BLPOP's answer comes when the gate opens: no response timeout.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let clients: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let (client, config, log) = (client.clone(), config.clone(), log.clone());
                greenweave::spawn(move || {
                    let (stored, popped) = greenweave::block_on(async {
                        // Its own connection: a BLPOP holds its connection in the server.
                        let mut connection = client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await
                            .unwrap();
                        let own = format!("{}:own", redis_key(id));
                        let () = connection.set(&own, id).await.unwrap();
                        let stored: usize = connection.get(&own).await.unwrap();
                        log.push(Event::Start(id));
                        let popped: Option<(String, String)> =
                            connection.blpop(redis_key(id), BLPOP_LIMIT).await.unwrap();
                        (stored, popped)
                    });
                    assert_eq!(stored, id);
                    assert_eq!(popped, Some((redis_key(id), redis_value(id))));
                    log.push(Event::Finish(id));
                })
            })
            .collect();
        for client in clients {
            client.join().unwrap();
        }
        heartbeat.stop();
    });
    join_gate(gate);
    assert_all_started_then_a_tick_then_all_finished(&log.events(), CLIENTS);
    drop(server);
}

/// The `blocked_clients` figure of redis's `INFO clients`.
fn blocked_clients(info: &str) -> usize {
    info_figure(info, "blocked_clients")
}

/// A figure of redis's `INFO`, by name.
fn info_figure(info: &str, name: &str) -> usize {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("INFO reports {name}:\n{info}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_redis_async_blpop_cancelled_or_timed_out_closes_its_connection_and_takes_nothing() {
    use redis::AsyncCommands;

    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    greenweave::run(move || {
        let client = redis::Client::open(url).unwrap();
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let mut probe = greenweave::block_on(client.get_multiplexed_async_connection()).unwrap();
        // Waits (bounded) until the server counts `blocked` clients in a blocking command and
        // `connected` connections (the probe's among them).
        let mut until_server_counts = |blocked: usize, connected: usize| {
            let begun = Instant::now();
            loop {
                let info: String =
                    greenweave::block_on(redis::cmd("INFO").arg("clients").query_async(&mut probe))
                        .unwrap();
                let counts = (
                    info_figure(&info, "blocked_clients"),
                    info_figure(&info, "connected_clients"),
                );
                if counts == (blocked, connected) {
                    return;
                }
                assert!(
                    begun.elapsed() < GATE_LIMIT,
                    "the server never counted {blocked} blocked of {connected} clients:\n{info}"
                );
                greenweave::thread::sleep(Duration::from_millis(1));
            }
        };
        // A BLPOP on its own connection, made and dropped inside the green thread's block_on.
        let pop = |key: &'static str| {
            let (client, config) = (client.clone(), config.clone());
            move || {
                greenweave::block_on(async move {
                    let mut connection = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .unwrap();
                    let popped: Option<(String, String)> =
                        connection.blpop(key, BLPOP_LIMIT).await.unwrap();
                    popped
                })
            }
        };

        // Cancelled while the server holds its BLPOP: dropping the future in the green thread
        // drops the connection, whose tokio task then closes the socket.
        let cancelled = greenweave::spawn(pop("greenweave:cancelled"));
        until_server_counts(1, 2);
        cancelled.cancel();
        assert!(cancelled.join().unwrap_err().is_cancelled());
        until_server_counts(0, 1);

        // Timed out, in the server or on its way there: the same.
        let timed_out = greenweave::spawn({
            let pop = pop("greenweave:timed-out");
            move || greenweave::time::timeout(Duration::from_millis(20), pop)
        });
        assert!(timed_out.join().unwrap().is_err());
        until_server_counts(0, 1);

        // Neither took what is pushed afterwards.
        for key in ["greenweave:cancelled", "greenweave:timed-out"] {
            let lengths: (usize, usize) = greenweave::block_on(
                redis::pipe()
                    .lpush(key, "after")
                    .llen(key)
                    .query_async(&mut probe),
            )
            .unwrap();
            assert_eq!(lengths, (1, 1));
        }
    });
    drop(server);
}
