//! The synchronous `postgres` client, unchanged, in green threads (feature `hooks`), against a
//! real PostgreSQL server (Debian's, started by the test: tests/common/postgres_server.rs).
//!
//! The client runs a hidden current-thread tokio runtime per connection and waits in libc's
//! `epoll_wait` (through mio), which the hooks park: a foreign event loop. Every reply is
//! checked, and the order of events shows the park, with no timing threshold: a coordinator on
//! a plain OS thread holds an advisory lock that every client waits for in the server, and
//! lets it go only once every client has started and a heartbeat green thread on the client's
//! own OS thread has ticked while the client waited. A client that blocked its OS thread
//! instead of parking would keep its heartbeat from ticking, and the lock would never be let
//! go (the coordinator gives up after [`COORDINATOR_LIMIT`], failing the test).
//!
//! tokio allows one runtime in `block_on` per OS thread at a time (its context is an OS
//! thread-local), so two such clients cannot be in a call at once on one OS thread: the second
//! panics with tokio's "Cannot start a runtime from within a runtime". The 20 concurrent
//! clients therefore run one per worker, and the last test pins that limit down.
#![cfg(feature = "hooks")]

mod common;
#[path = "common/postgres_server.rs"]
mod postgres_server;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::spawn_watch;
use greenweave::Runtime;
use postgres::{Client, NoTls};
use postgres_server::PostgresServer;

/// The advisory lock key the coordinator holds and every client waits for.
const GATE: i64 = 22_002;

/// How long the coordinator waits for every client to start and every heartbeat to tick
/// before it fails the test (a client that blocked its OS thread would keep it waiting for
/// ever). Never reached in a passing run.
const COORDINATOR_LIMIT: Duration = Duration::from_secs(120);

/// What happened, in order, across every worker.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, event: impl Into<String>) {
        self.0.lock().unwrap().push(event.into());
    }

    fn events(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Holds the advisory lock [`GATE`] from a plain OS thread (where the hooks are libc) until
/// `clients` clients have each had a heartbeat tick while they waited, then lets it go.
struct Coordinator {
    /// Counts clients whose heartbeat ticked after they started waiting.
    ticked: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl Coordinator {
    fn start(params: &str, clients: usize, log: &Log) -> Coordinator {
        let ticked = Arc::new(AtomicUsize::new(0));
        let (locked_tx, locked_rx) = mpsc::channel();
        let thread = std::thread::spawn({
            let (params, ticked, log) = (params.to_owned(), ticked.clone(), log.clone());
            move || {
                let mut client = Client::connect(&params, NoTls).unwrap();
                client
                    .execute("SELECT pg_advisory_lock($1)", &[&GATE])
                    .unwrap();
                locked_tx.send(()).unwrap();
                let begun = Instant::now();
                while ticked.load(Ordering::Acquire) < clients {
                    assert!(
                        begun.elapsed() < COORDINATOR_LIMIT,
                        "only {} of {clients} clients had a heartbeat tick while they waited \
                         in the server: a client blocked its OS thread; events: {:?}",
                        ticked.load(Ordering::Acquire),
                        log.events()
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                log.push("released");
                client
                    .execute("SELECT pg_advisory_unlock($1)", &[&GATE])
                    .unwrap();
            }
        });
        locked_rx
            .recv()
            .expect("the coordinator takes the lock before the clients start");
        Coordinator { ticked, thread }
    }

    fn join(self) {
        self.thread.join().unwrap();
    }
}

/// One client in the calling green thread, with a heartbeat green thread beside it on the same
/// OS thread: connects, says it started, waits in the server for the gate, sleeps there
/// (`pg_sleep(0.1)`), checks a computed value, says it ended.
fn client(id: i32, params: &str, log: &Log, ticked: &Arc<AtomicUsize>) {
    let waiting = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let heartbeat = greenweave::spawn({
        let (waiting, done, ticked) = (waiting.clone(), done.clone(), ticked.clone());
        move || {
            let mut counted = false;
            while !done.load(Ordering::Relaxed) {
                let was_waiting = waiting.load(Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
                // A tick that began after the client started waiting ran while it was parked in
                // the client's call: on this OS thread nothing else could have run it.
                if was_waiting && !counted {
                    counted = true;
                    ticked.fetch_add(1, Ordering::Release);
                }
            }
        }
    });
    let mut connection = Client::connect(params, NoTls).unwrap();
    log.push(format!("start {id}"));
    waiting.store(true, Ordering::Relaxed);
    connection
        .execute("SELECT pg_advisory_lock_shared($1)", &[&GATE])
        .unwrap();
    connection.execute("SELECT pg_sleep(0.1)", &[]).unwrap();
    let row = connection
        .query_one("SELECT $1::int * 1000 + 7", &[&id])
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), id * 1000 + 7);
    log.push(format!("end {id}"));
    done.store(true, Ordering::Relaxed);
    heartbeat.join().unwrap();
}

/// Checks that the log is every start, then the gate's release, then every end.
fn assert_all_started_before_any_ended(events: &[String], clients: usize) {
    let position = |event: &str| events.iter().position(|e| e == event);
    let released = position("released").expect("the gate was released");
    for id in 0..clients {
        let start = position(&format!("start {id}")).expect("every client started");
        let end = position(&format!("end {id}")).expect("every client ended");
        assert!(start < released && released < end, "{events:?}");
    }
    assert_eq!(events.len(), 2 * clients + 1, "{events:?}");
}

#[test]
fn a_postgres_sync_client_in_a_green_thread_waits_in_the_server_while_a_heartbeat_ticks() {
    let Some(server) = PostgresServer::start() else {
        return;
    };
    let log = Log::default();
    let coordinator = Coordinator::start(&server.params(), 1, &log);
    let ticked = coordinator.ticked.clone();
    greenweave::run(|| client(0, &server.params(), &log, &ticked));
    coordinator.join();
    assert_all_started_before_any_ended(&log.events(), 1);
}

#[test]
fn postgres_sync_clients_in_20_green_threads_one_per_worker_all_wait_in_the_server_at_once() {
    const CLIENTS: usize = 20;
    let Some(server) = PostgresServer::start() else {
        return;
    };
    let log = Log::default();
    let coordinator = Coordinator::start(&server.params(), CLIENTS, &log);
    let ticked = coordinator.ticked.clone();
    let runtime = Runtime::builder().workers(CLIENTS).build().unwrap();
    let _ = runtime
        .run_on_every_worker(|worker| client(worker as i32, &server.params(), &log, &ticked));
    coordinator.join();
    assert_all_started_before_any_ended(&log.events(), CLIENTS);
}

#[test]
fn a_second_postgres_sync_client_in_a_call_on_the_same_os_thread_meets_tokios_one_runtime_rule() {
    let Some(server) = PostgresServer::start() else {
        return;
    };
    let log = Log::default();
    let coordinator = Coordinator::start(&server.params(), 1, &log);
    let ticked = coordinator.ticked.clone();
    greenweave::run(|| {
        let first = greenweave::spawn({
            let (params, log) = (server.params(), log.clone());
            move || client(0, &params, &log, &ticked)
        });
        // Once the first client has started (it is then in a call, parked), a second one on
        // this OS thread enters tokio while the first's runtime is entered: tokio panics.
        while log.events().is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let params = server.params();
        let second = greenweave::spawn(move || Client::connect(&params, NoTls).map(drop));
        assert!(second.join().unwrap_err().is_panic());
        first.join().unwrap();
    });
    coordinator.join();
    assert_all_started_before_any_ended(&log.events(), 1);
}

/// With the `tokio` feature too: while a sync client's call is parked inside its own tokio
/// runtime's `block_on` (tokio's "entered" flag set on this OS thread), the worker's tokio
/// runtime waits for its turn instead of starting one (which would make tokio panic), and
/// takes it once the call has ended.
#[cfg(feature = "tokio")]
#[test]
fn the_workers_tokio_runtime_waits_for_a_parked_sync_postgres_call_instead_of_panicking() {
    let Some(server) = PostgresServer::start() else {
        return;
    };
    let log = Log::default();
    greenweave::run(|| {
        // The worker's own runtime (while the query is parked, the current one on this OS
        // thread is the client's).
        let worker_runtime = tokio::runtime::Handle::current();
        let query = greenweave::spawn({
            let (params, log) = (server.params(), log.clone());
            move || {
                let mut client = Client::connect(&params, NoTls).unwrap();
                log.push("query start");
                let row = client
                    .query_one("SELECT 5 FROM pg_sleep(0.3)", &[])
                    .unwrap();
                log.push("query end");
                row.get::<_, i32>(0)
            }
        });
        while log.events().is_empty() {
            greenweave::thread::sleep(Duration::from_millis(1));
        }
        // The query is parked inside its client's runtime: this task needs a turn of the
        // worker's runtime, which waits for the query to end.
        let task = worker_runtime.spawn({
            let log = log.clone();
            async move { log.push("tokio task ran") }
        });
        greenweave::block_on(task).unwrap();
        assert_eq!(query.join().unwrap(), 5);
    });
    assert_eq!(log.events(), ["query start", "query end", "tokio task ran"]);
}

/// r2d2_postgres's connection manager, as that crate writes it (it is not a dependency here):
/// a pooled connection is a `postgres::Client`, checked at each check-out with an empty query.
struct PostgresManager(String);

impl r2d2::ManageConnection for PostgresManager {
    type Connection = Client;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Client, postgres::Error> {
        Client::connect(&self.0, NoTls)
    }

    fn is_valid(&self, client: &mut Client) -> Result<(), postgres::Error> {
        client.simple_query("").map(drop)
    }

    fn has_broken(&self, client: &mut Client) -> bool {
        client.is_closed()
    }
}

/// Two green threads of one worker on an r2d2 pool of sync postgres clients: the second's
/// check-out test enters its client's tokio runtime while the first is parked inside its own,
/// and tokio panics; the unwind drops the connection being checked out, whose `Drop` closes it
/// through the same runtime, and panics again, in a destructor during the unwind: Rust aborts
/// the process, and no one can catch that. What greenweave can do is say why, and what to do,
/// before the abort: its panic hook does, at tokio's first panic in a green thread.
#[test]
fn r2d2_postgres_checked_out_by_two_green_threads_of_one_worker_aborts_saying_why() {
    const NAME: &str =
        "r2d2_postgres_checked_out_by_two_green_threads_of_one_worker_aborts_saying_why";
    // The parent starts the server and stops it; the child, which aborts, only connects (a
    // server it started itself would outlive it).
    const PARAMS: &str = "GREENWEAVE_TEST_POSTGRES_PARAMS";
    let server = if common::is_child_of(NAME) {
        None
    } else {
        match PostgresServer::start() {
            Some(server) => Some(server),
            None => return,
        }
    };
    let params = match &server {
        Some(server) => server.params(),
        None => std::env::var(PARAMS).expect("the parent passes the server's parameters"),
    };
    let outcome = common::run_in_child_with_env(NAME, &[(PARAMS, params.clone())], || {
        greenweave::run(|| {
            let pool = r2d2::Pool::builder()
                .max_size(2)
                .build(PostgresManager(params))
                .unwrap();
            let in_query = Arc::new(AtomicBool::new(false));
            let first = greenweave::spawn({
                let (pool, in_query) = (pool.clone(), in_query.clone());
                move || {
                    let mut client = pool.get().unwrap();
                    in_query.store(true, Ordering::Release);
                    client.execute("SELECT pg_sleep(2)", &[]).unwrap();
                }
            });
            while !in_query.load(Ordering::Acquire) {
                greenweave::thread::sleep(Duration::from_millis(1));
            }
            // Let the first enter its call and park there.
            greenweave::thread::sleep(Duration::from_millis(100));
            let second = greenweave::spawn(move || drop(pool.get()));
            let _ = second.join();
            let _ = first.join();
        });
        println!("both green threads ended");
        std::process::exit(0);
    });
    common::assert_aborted_saying(&outcome, "panic in a destructor during cleanup");
    common::assert_aborted_saying(
        &outcome,
        "greenweave: tokio allows one runtime in block_on per OS thread",
    );
    common::assert_aborted_saying(&outcome, "Runtime::builder().workers(n)");
}
