//! Async crates from green threads against the same crates on tokio alone (issue 30), side by
//! side in one run:
//!
//! 1. **tokio-postgres**: N clients, each running Q queries (`SELECT $1::int` on a prepared
//!    statement, every answer checked) one after another, as N green threads on one worker
//!    (`greenweave::block_on` per query) and as N tasks on a tokio `current_thread` runtime.
//!    Client i uses connection i mod C; by default C = N, a connection each. Connections are
//!    opened (and the statement prepared) before the clock starts and closed after it stops.
//!    Reported per query: wall time, the client's CPU (its OS thread's) and the server's CPU,
//!    the sum over the postmaster and every process it forked of `/proc/PID/schedstat`'s time
//!    on CPU (nanoseconds; backends are found through `pg_backend_pid()`'s parent).
//! 2. **tokio `TcpStream` echo**: one client making M sequential round trips of 64 bytes over
//!    loopback to a blocking echo server on an OS thread of its own: from a tokio task, from a
//!    green thread with a `block_on` per call (write, then read), per round trip, and around
//!    the whole loop, and (for reference, no tokio) on `greenweave::net::TcpStream`.
//!
//! The PostgreSQL server is started by the benchmark (Debian's `postgresql`, as the tests start
//! it: tests/common/postgres_server.rs) with `max_connections` C + 10, unless `--postgres-url`
//! names one (whose CPU is then read only if it runs on this machine). With two CPUs or more,
//! the servers run on CPU 0 and the clients on CPU 1. Each client kind runs R rounds, in an
//! order that rotates from round to round; the summary gives medians.
//!
//! ```sh
//! cargo run --release --features tokio --example async_clients_bench
//! cargo run --release --features tokio --example async_clients_bench -- --connections 100
//! cargo run --features tokio --example async_clients_bench -- --quick   # tiny counts, for CI
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "support/cpus.rs"]
#[allow(dead_code)] // parse_cpu_list is the servers'
mod cpus;
#[path = "../tests/common/postgres_server.rs"]
#[allow(dead_code)] // url() and start() are the tests'
mod postgres_server;
#[path = "../tests/common/spawn_watch.rs"]
mod spawn_watch;

const USAGE: &str = "usage: async_clients_bench [--tasks N] [--connections C] [--queries Q]
                           [--round-trips M] [--rounds R] [--quick]
                           [--only postgres|echo] [--postgres-url URL]

  --tasks N          concurrent postgres clients: green threads, tokio tasks (default 1000)
  --connections C    postgres connections, client i on connection i mod C (default N)
  --queries Q        queries per client, one after another (default 10)
  --round-trips M    echo round trips (default 20000)
  --rounds R         runs of each client kind (default 3)
  --quick            20 clients x 2 queries, 200 round trips, 1 round: for CI
  --only WHAT        run the postgres or the echo comparison only
  --postgres-url URL use this server instead of starting one";

struct Options {
    tasks: usize,
    connections: Option<usize>,
    queries: usize,
    round_trips: usize,
    rounds: usize,
    postgres: bool,
    echo: bool,
    postgres_url: Option<String>,
}

impl Options {
    fn connections(&self) -> usize {
        self.connections.unwrap_or(self.tasks)
    }
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        tasks: 1000,
        connections: None,
        queries: 10,
        round_trips: 20_000,
        rounds: 3,
        postgres: true,
        echo: true,
        postgres_url: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        let mut count = || -> Result<usize, String> {
            let text = value()?;
            text.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{flag}: not a positive whole number: {text:?}"))
        };
        match flag.as_str() {
            "--tasks" => options.tasks = count()?,
            "--connections" => options.connections = Some(count()?),
            "--queries" => options.queries = count()?,
            "--round-trips" => options.round_trips = count()?,
            "--rounds" => options.rounds = count()?,
            "--quick" => {
                (options.tasks, options.queries) = (20, 2);
                (options.round_trips, options.rounds) = (200, 1);
            }
            "--only" => match value()?.as_str() {
                "postgres" => options.echo = false,
                "echo" => options.postgres = false,
                other => return Err(format!("--only: not postgres or echo: {other:?}")),
            },
            "--postgres-url" => options.postgres_url = Some(value()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("async_clients_bench: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let two_cpus = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    // The servers are started from here while this thread is on CPU 0, so their processes and
    // threads inherit it; then this thread, which runs every client, moves to CPU 1.
    let pin = |cpu| two_cpus && cpus::pin_this_thread(cpu).is_ok();
    let servers_pinned = pin(0);
    let mut started_server = None;
    let postgres_params = match (&options.postgres_url, options.postgres) {
        (Some(url), true) => Some(url.clone()),
        (None, true) => {
            let server = postgres_server::PostgresServer::start_with_max_connections(
                options.connections() + 10,
            );
            let params = server.as_ref().map(|server| server.params());
            started_server = server;
            params
        }
        (_, false) => None,
    };
    let echo_server = options.echo.then(spawn_echo_server);
    let clients_pinned = servers_pinned && pin(1);
    println!(
        "async_clients_bench ({}; {})",
        if clients_pinned {
            "servers on CPU 0, clients on CPU 1"
        } else {
            "unpinned"
        },
        if cfg!(debug_assertions) {
            "debug build: pass --release for figures"
        } else {
            "release build"
        }
    );
    if options.postgres {
        match &postgres_params {
            Some(params) => compare_postgres(params, &options),
            None => println!("\npostgres: skipped (PostgreSQL is not installed)"),
        }
    }
    if let Some(server) = echo_server {
        compare_echo(server, &options);
    }
    drop(started_server);
    ExitCode::SUCCESS
}

/// The CPU time of the calling OS thread.
fn thread_cpu() -> Duration {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a live timespec; the clock id is a constant the kernel knows.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
}

/// What one timed stretch measured.
#[derive(Clone, Copy)]
struct Run {
    elapsed: Duration,
    /// CPU time of the OS thread that ran every client.
    client_cpu: Duration,
    /// CPU time of the server's processes, if they can be read.
    server_cpu: Option<Duration>,
}

/// Reads one figure of a run (`None`: not measured).
type Figure = fn(&Run) -> Option<Duration>;

/// The start of a timed stretch; [`Stopwatch::stop`] makes it a [`Run`].
struct Stopwatch {
    server: Option<u32>,
    started: Instant,
    client_cpu: Duration,
    server_cpu: Option<Duration>,
}

impl Stopwatch {
    fn start(server: Option<u32>) -> Stopwatch {
        let server_cpu = server.and_then(server_cpu);
        Stopwatch {
            server,
            client_cpu: thread_cpu(),
            server_cpu,
            started: Instant::now(),
        }
    }

    fn stop(self) -> Run {
        let elapsed = self.started.elapsed();
        let client_cpu = thread_cpu() - self.client_cpu;
        let server_cpu = match (self.server_cpu, self.server.and_then(server_cpu)) {
            (Some(before), Some(after)) => Some(after.saturating_sub(before)),
            _ => None,
        };
        Run {
            elapsed,
            client_cpu,
            server_cpu,
        }
    }
}

/// The median of `values` (not empty).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// Prints the table of medians: a row per kind, each figure per operation and as a ratio to
/// the first kind's (tokio's).
fn report<K: Copy + PartialEq + std::fmt::Debug>(
    kinds: &[K],
    runs: &[(K, Run)],
    operations: usize,
    unit: (&str, f64),
) {
    let (unit_name, scale) = unit;
    let figures: [(&str, Figure); 3] = [
        ("wall time", |run| Some(run.elapsed)),
        ("client CPU", |run| Some(run.client_cpu)),
        ("server CPU", |run| run.server_cpu),
    ];
    // The median of each figure for each kind, per operation; `None` if not measured.
    let medians: Vec<Vec<Option<f64>>> = kinds
        .iter()
        .map(|kind| {
            figures
                .iter()
                .map(|(_, figure)| {
                    let values: Option<Vec<f64>> = runs
                        .iter()
                        .filter(|(which, _)| which == kind)
                        .map(|(_, run)| {
                            figure(run)
                                .map(|duration| duration.as_secs_f64() * scale / operations as f64)
                        })
                        .collect();
                    values.map(median)
                })
                .collect()
        })
        .collect();
    let shown: Vec<usize> = (0..figures.len())
        .filter(|&figure| medians[0][figure].is_some())
        .collect();
    let names = |suffix: &str| -> String {
        shown
            .iter()
            .map(|&figure| format!("{}{suffix}", figures[figure].0))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    println!(
        "\n| median, per operation | {} | {} |",
        names(&format!(", {unit_name}")),
        names(&format!(" / {:?}", kinds[0]))
    );
    println!("|---|{}", "---:|".repeat(2 * shown.len()));
    for (kind, row) in kinds.iter().zip(&medians) {
        let values = shown.iter().map(|&figure| {
            let value = row[figure].unwrap_or(0.0);
            // Nanoseconds whole; microseconds to two places.
            if scale > 1e6 {
                format!("{value:.0}")
            } else {
                format!("{value:.2}")
            }
        });
        let ratios = shown
            .iter()
            .map(|&figure| match (row[figure], medians[0][figure]) {
                (Some(value), Some(base)) => format!("{:.2}x", value / base),
                _ => String::new(),
            });
        println!(
            "| {kind:?} | {} | {} |",
            values.collect::<Vec<_>>().join(" | "),
            ratios.collect::<Vec<_>>().join(" | ")
        );
    }
}

/// Runs `each` for every kind, `rounds` times in rotating order, printing each run.
fn rounds<K: Copy + std::fmt::Debug>(
    kinds: &[K],
    rounds: usize,
    mut each: impl FnMut(K) -> Run,
) -> Vec<(K, Run)> {
    let mut runs = Vec::new();
    for round in 0..rounds {
        let mut order = kinds.to_vec();
        order.rotate_left(round % kinds.len());
        for kind in order {
            let run = each(kind);
            println!(
                "  round {}: {kind:?}: {:.1} ms wall, client CPU {:.1} ms, server CPU {}",
                round + 1,
                run.elapsed.as_secs_f64() * 1e3,
                run.client_cpu.as_secs_f64() * 1e3,
                run.server_cpu
                    .map_or("not measured".to_owned(), |cpu| format!(
                        "{:.1} ms",
                        cpu.as_secs_f64() * 1e3
                    )),
            );
            runs.push((kind, run));
        }
    }
    runs
}

// ---- tokio-postgres ----

#[derive(Clone, Copy, PartialEq, Debug)]
enum PostgresClient {
    /// Tasks on a tokio `current_thread` runtime.
    Tokio,
    /// Green threads on one worker, `greenweave::block_on` per query.
    Greenweave,
}

/// The query every client runs, prepared once per connection.
const QUERY: &str = "SELECT $1::int";

/// A connection with [`QUERY`] prepared on it.
struct Connection {
    client: tokio_postgres::Client,
    statement: tokio_postgres::Statement,
}

/// Connects, hands the connection's I/O to a tokio task (of the current runtime: the worker's
/// own under greenweave) and prepares [`QUERY`].
async fn connect(
    params: &str,
) -> (
    Connection,
    tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
) {
    let (client, io) = tokio_postgres::connect(params, tokio_postgres::NoTls)
        .await
        .expect("connecting to PostgreSQL");
    let io = tokio::spawn(io);
    let statement = client.prepare(QUERY).await.expect("preparing the query");
    (Connection { client, statement }, io)
}

/// Client `task`'s queries, one after another, each answer checked.
async fn queries(connections: &[Connection], task: usize, queries: usize) {
    let connection = &connections[task % connections.len()];
    for query in 0..queries {
        let value = (task * queries + query) as i32;
        let row = connection
            .client
            .query_one(&connection.statement, &[&value])
            .await
            .expect("a query");
        assert_eq!(row.get::<_, i32>(0), value, "the server's answer");
    }
}

/// The postmaster's process id, if the server runs on this machine: the parent of a backend
/// (read while its connection is open: the backend ends with it).
fn postmaster(params: &str) -> Option<u32> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let (connection, io) = connect(params).await;
        let row = connection
            .client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .expect("asking for the backend's pid");
        let backend: i32 = row.get(0);
        let stat = std::fs::read_to_string(format!("/proc/{backend}/stat"));
        drop(connection);
        io.await.expect("the connection's task").ok();
        parent(&stat.ok()?)
    })
}

/// The parent's pid in the text of `/proc/PID/stat` (its 4th field, after the command name in
/// parentheses, which may hold spaces).
fn parent(stat: &str) -> Option<u32> {
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// The CPU time of the postmaster and of every process it forked that is alive now (the
/// backends of the open connections among them), from `/proc/PID/schedstat` (nanoseconds on
/// CPU, not the clock ticks of `/proc/PID/stat`, too coarse for a backend that runs a few
/// queries).
fn server_cpu(postmaster: u32) -> Option<Duration> {
    let on_cpu = |pid: u32| -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
        text.split_whitespace().next()?.parse().ok()
    };
    let mut total = on_cpu(postmaster)?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if parent(&stat) == Some(postmaster) {
            total += on_cpu(pid).unwrap_or(0);
        }
    }
    Some(Duration::from_nanos(total))
}

fn compare_postgres(params: &str, options: &Options) {
    let (tasks, connections, queries) = (options.tasks, options.connections(), options.queries);
    let total = tasks * queries;
    println!(
        "\ntokio-postgres: {tasks} clients x {queries} queries ({QUERY:?}, prepared) on \
         {connections} connections, {} round(s); connecting is not timed",
        options.rounds
    );
    let server = postmaster(params);
    let kinds = [PostgresClient::Tokio, PostgresClient::Greenweave];
    let runs = rounds(&kinds, options.rounds, |kind| match kind {
        PostgresClient::Tokio => postgres_on_tokio(params, options, server),
        PostgresClient::Greenweave => postgres_on_greenweave(params, options, server),
    });
    report(&kinds, &runs, total, ("µs", 1e6));
}

fn postgres_on_tokio(params: &str, options: &Options, server: Option<u32>) -> Run {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let opening: Vec<_> = (0..options.connections())
            .map(|_| tokio::spawn(connect_owned(params.to_owned())))
            .collect();
        let mut connections = Vec::new();
        let mut ios = Vec::new();
        for opened in opening {
            let (connection, io) = opened.await.expect("connecting");
            connections.push(connection);
            ios.push(io);
        }
        let connections = Arc::new(connections);

        let stopwatch = Stopwatch::start(server);
        let clients: Vec<_> = (0..options.tasks)
            .map(|task| {
                let (connections, count) = (connections.clone(), options.queries);
                tokio::spawn(async move { queries(&connections, task, count).await })
            })
            .collect();
        for client in clients {
            client.await.expect("a client task");
        }
        let run = stopwatch.stop();

        drop(connections);
        for io in ios {
            io.await
                .expect("a connection's task")
                .expect("a connection");
        }
        run
    })
}

/// [`connect`] with an owned string, for `tokio::spawn`.
async fn connect_owned(
    params: String,
) -> (
    Connection,
    tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
) {
    connect(&params).await
}

fn postgres_on_greenweave(params: &str, options: &Options, server: Option<u32>) -> Run {
    greenweave::run(|| {
        let opening: Vec<_> = (0..options.connections())
            .map(|_| {
                let params = params.to_owned();
                greenweave::spawn(move || greenweave::block_on(connect(&params)))
            })
            .collect();
        let mut connections = Vec::new();
        let mut ios = Vec::new();
        for opened in opening {
            let (connection, io) = opened.join().expect("connecting");
            connections.push(connection);
            ios.push(io);
        }
        let connections = Arc::new(connections);

        let stopwatch = Stopwatch::start(server);
        let clients: Vec<_> = (0..options.tasks)
            .map(|task| {
                let (connections, count) = (connections.clone(), options.queries);
                greenweave::spawn(move || {
                    greenweave::block_on(queries(&connections, task, count));
                })
            })
            .collect();
        for client in clients {
            client.join().expect("a client green thread");
        }
        let run = stopwatch.stop();

        drop(connections);
        for io in ios {
            greenweave::block_on(io)
                .expect("a connection's task")
                .expect("a connection");
        }
        run
    })
}

// ---- tokio TcpStream echo ----

/// Bytes per echo message.
const MESSAGE: usize = 64;

#[derive(Clone, Copy, PartialEq, Debug)]
enum EchoClient {
    /// A task on a tokio `current_thread` runtime.
    Tokio,
    /// A green thread, `block_on` per call: `block_on(write_all)`, `block_on(read_exact)`.
    BlockOnPerCall,
    /// A green thread, one `block_on` per round trip (its write and its read).
    BlockOnPerRoundTrip,
    /// A green thread, one `block_on` around the whole loop.
    BlockOnAroundLoop,
    /// A green thread on `greenweave::net::TcpStream`, no tokio: for reference.
    GreenweaveNet,
}

/// A blocking echo server, an OS thread per connection (one client at a time here).
fn spawn_echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding the echo server");
    let address = listener.local_addr().expect("the echo server's address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let mut buffer = [0; MESSAGE];
                while let Ok(read @ 1..) = stream.read(&mut buffer) {
                    if stream.write_all(&buffer[..read]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

fn compare_echo(server: SocketAddr, options: &Options) {
    let round_trips = options.round_trips;
    println!(
        "\ntokio TcpStream echo: 1 client, {round_trips} sequential round trips of {MESSAGE} \
         bytes to a blocking std echo server on its own OS thread, {} round(s)",
        options.rounds
    );
    let kinds = [
        EchoClient::Tokio,
        EchoClient::BlockOnPerCall,
        EchoClient::BlockOnPerRoundTrip,
        EchoClient::BlockOnAroundLoop,
        EchoClient::GreenweaveNet,
    ];
    let runs = rounds(&kinds, options.rounds, |kind| {
        echo_round_trips(kind, server, round_trips)
    });
    report(&kinds, &runs, round_trips, ("ns", 1e9));
}

/// `round_trips` echo round trips by `kind`, timed from the first write to the last read.
fn echo_round_trips(kind: EchoClient, server: SocketAddr, round_trips: usize) -> Run {
    use greenweave::block_on;
    use tokio::net::TcpStream;
    let message = [7_u8; MESSAGE];
    let mut reply = [0_u8; MESSAGE];
    let (run, reply) = match kind {
        EchoClient::Tokio => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async move {
                tokio::spawn(async move {
                    let mut stream = TcpStream::connect(server).await.expect("connecting");
                    stream.set_nodelay(true).expect("TCP_NODELAY");
                    let stopwatch = Stopwatch::start(None);
                    for _ in 0..round_trips {
                        stream.write_all(&message).await.expect("write");
                        stream.read_exact(&mut reply).await.expect("read");
                    }
                    (stopwatch.stop(), reply)
                })
                .await
                .expect("the client task")
            })
        }
        EchoClient::GreenweaveNet => greenweave::run(move || {
            let mut stream = greenweave::net::TcpStream::connect(server).expect("connecting");
            stream.set_nodelay(true).expect("TCP_NODELAY");
            let stopwatch = Stopwatch::start(None);
            for _ in 0..round_trips {
                stream.write_all(&message).expect("write");
                stream.read_exact(&mut reply).expect("read");
            }
            (stopwatch.stop(), reply)
        }),
        _ => greenweave::run(move || {
            let mut stream = block_on(TcpStream::connect(server)).expect("connecting");
            stream.set_nodelay(true).expect("TCP_NODELAY");
            let stopwatch = Stopwatch::start(None);
            match kind {
                EchoClient::BlockOnPerCall => {
                    for _ in 0..round_trips {
                        block_on(stream.write_all(&message)).expect("write");
                        block_on(stream.read_exact(&mut reply)).expect("read");
                    }
                }
                EchoClient::BlockOnPerRoundTrip => {
                    for _ in 0..round_trips {
                        block_on(async {
                            stream.write_all(&message).await.expect("write");
                            stream.read_exact(&mut reply).await.expect("read");
                        });
                    }
                }
                _ => block_on(async {
                    for _ in 0..round_trips {
                        stream.write_all(&message).await.expect("write");
                        stream.read_exact(&mut reply).await.expect("read");
                    }
                }),
            }
            (stopwatch.stop(), reply)
        }),
    };
    assert_eq!(reply, message, "the echo");
    run
}
