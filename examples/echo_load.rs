//! A load generator for an echo server, itself written with green threads: C connections,
//! each a green thread doing request/response (write a message, read the echo back, check it)
//! as fast as the server answers, for D seconds. Prints requests per second and the p50 and
//! p99 round-trip latency.
//!
//! With `--spawn-server` it also starts an echo server in-process, on an ephemeral loopback
//! port, on a second OS thread with its own greenweave runtime, so it needs nothing else.
//!
//! ```sh
//! cargo run --release --example echo_load -- --spawn-server
//! cargo run --release --example echo_load -- --spawn-server --connections 1000 --duration 10
//! cargo run --release --example echo_server &  # or load a separate server
//! cargo run --release --example echo_load -- --addr 127.0.0.1:7000 --size 1024
//! cargo run --release --example echo_load -- --spawn-server --requests 100000  # a fixed count
//! ```
//!
//! Both ends run on one OS thread each: the numbers measure the runtime's per-switch and
//! per-syscall costs on loopback, not a network.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use greenweave::net::{TcpListener, TcpStream};

#[path = "support/fd_limit.rs"]
mod fd_limit;
use fd_limit::raise_fd_limit;

const USAGE: &str = "usage: echo_load [--addr HOST:PORT | --spawn-server] [--connections C]
                 [--duration SECONDS] [--requests N] [--size BYTES] [--start-when PATH]

  --addr HOST:PORT     the echo server to load (default 127.0.0.1:7000)
  --spawn-server       start an echo server in-process (another OS thread, its own runtime)
                       on an ephemeral loopback port, and load that instead
  --connections C      concurrent connections, one green thread each (default 100)
  --duration SECONDS   how long to send requests; fractions allowed (default 5)
  --requests N         stop after N requests in all (shared evenly among the connections),
                       or at the end of the duration if that comes first
  --size BYTES         bytes per message (default 64)
  --start-when PATH    once connected, wait until PATH exists before sending: several load
                       processes then measure one interval (the harness creates PATH after
                       every process says \"connected\", and reads its counters then)";

struct Options {
    addr: String,
    spawn_server: bool,
    connections: usize,
    duration: Duration,
    requests: Option<usize>,
    size: usize,
    start_when: Option<std::path::PathBuf>,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        addr: "127.0.0.1:7000".to_owned(),
        spawn_server: false,
        connections: 100,
        duration: Duration::from_secs(5),
        requests: None,
        size: 64,
        start_when: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--addr" => options.addr = value()?,
            "--spawn-server" => options.spawn_server = true,
            "--connections" => options.connections = positive(&flag, &value()?)?,
            "--size" => options.size = positive(&flag, &value()?)?,
            "--requests" => options.requests = Some(positive(&flag, &value()?)?),
            "--start-when" => options.start_when = Some(value()?.into()),
            "--duration" => {
                let text = value()?;
                options.duration = text
                    .parse::<f64>()
                    .ok()
                    .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| format!("--duration: not a number of seconds > 0: {text:?}"))?;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    Ok(options)
}

fn positive(flag: &str, text: &str) -> Result<usize, String> {
    text.parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{flag}: not a positive whole number: {text:?}"))
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("echo_load: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // Client sockets, plus the server's when it runs in this process.
    let fds_needed = options.connections as u64 * if options.spawn_server { 2 } else { 1 } + 64;
    let fd_limit = raise_fd_limit();
    if fd_limit < fds_needed {
        eprintln!(
            "echo_load: {} connections need about {fds_needed} open files, but the limit is \
             {fd_limit} (see `ulimit -Hn`)",
            options.connections
        );
        return ExitCode::FAILURE;
    }
    let addr = if options.spawn_server {
        let addr = spawn_server();
        println!("echo_load: started an echo server on {addr} (another OS thread)");
        addr.to_string()
    } else {
        options.addr.clone()
    };
    greenweave::run(move || load(&addr, &options))
}

/// Starts an echo server on an ephemeral loopback port, on a new OS thread running its own
/// runtime, and returns its address. It serves until the process exits.
fn spawn_server() -> SocketAddr {
    let (send_addr, addr) = mpsc::channel();
    std::thread::Builder::new()
        .name("echo server".into())
        .spawn(move || {
            greenweave::run(move || {
                let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
                send_addr
                    .send(listener.local_addr().unwrap())
                    .expect("main is waiting for the address");
                for stream in listener.incoming() {
                    match stream {
                        Ok(stream) => drop(greenweave::spawn(move || echo(stream))),
                        Err(error) => eprintln!("echo server: accept failed: {error}"),
                    }
                }
            })
        })
        .expect("start the server's OS thread");
    addr.recv().expect("the server thread sends its address")
}

/// Echoes until the client closes or the connection fails.
fn echo(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut io = &stream;
    let mut buf = [0_u8; 16 * 1024];
    while let Ok(n @ 1..) = io.read(&mut buf) {
        if io.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// What one connection measured.
struct Report {
    /// Round-trip times in microseconds, one per request.
    latencies_us: Vec<u32>,
    mismatches: u64,
}

fn load(addr: &str, options: &Options) -> ExitCode {
    println!(
        "echo_load: {} connections to {addr}, {}-byte messages, for {:.2} s",
        options.connections,
        options.size,
        options.duration.as_secs_f64()
    );
    // Connect everything first, one at a time (gentle on the server's listen backlog), so the
    // measured interval has every connection busy from its start.
    let connecting = Instant::now();
    let mut streams = Vec::with_capacity(options.connections);
    for _ in 0..options.connections {
        match TcpStream::connect(addr) {
            Ok(stream) => {
                stream.set_nodelay(true).expect("set TCP_NODELAY");
                streams.push(stream);
            }
            Err(error) => {
                eprintln!(
                    "echo_load: cannot connect to {addr}: {error} (is an echo server running? \
                     --spawn-server starts one)"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(path) = &options.start_when {
        // Connecting 10,000 sockets takes seconds, and not the same for every process: without
        // a common start, one process sends while another still connects, and counters read
        // "once all are sending" cover less than the requests they are divided by.
        println!(
            "echo_load: {} connections open in {:.3} s; connected, waiting for {}",
            streams.len(),
            connecting.elapsed().as_secs_f64(),
            path.display()
        );
        while !path.exists() {
            greenweave::thread::sleep(Duration::from_millis(1));
        }
    }
    println!(
        "echo_load: {} connections open in {:.3} s; sending",
        streams.len(),
        connecting.elapsed().as_secs_f64()
    );

    let start = Instant::now();
    let deadline = start + options.duration;
    let size = options.size;
    let connections = streams.len();
    let clients: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, stream)| {
            // Connection i's share of --requests: the remainder goes to the first ones.
            let quota = options.requests.map_or(usize::MAX, |requests| {
                requests / connections + usize::from(i < requests % connections)
            });
            greenweave::spawn(move || client(stream, i, size, deadline, quota))
        })
        .collect();
    let reports: Vec<Report> = clients
        .into_iter()
        .map(|client| client.join().expect("a load client does not panic"))
        .collect();
    let elapsed = start.elapsed();

    let mismatches: u64 = reports.iter().map(|report| report.mismatches).sum();
    let mut latencies: Vec<u32> = reports
        .into_iter()
        .flat_map(|report| report.latencies_us)
        .collect();
    latencies.sort_unstable();
    let requests = latencies.len();
    println!(
        "requests:   {requests} in {:.3} s = {:.0} requests/s",
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64()
    );
    if requests > 0 {
        println!(
            "latency:    p50 {} µs, p99 {} µs, max {} µs",
            percentile(&latencies, 50.0),
            percentile(&latencies, 99.0),
            latencies[requests - 1]
        );
    }
    if mismatches > 0 {
        eprintln!("echo_load: {mismatches} echoes differed from what was sent");
        return ExitCode::FAILURE;
    }
    if requests == 0 {
        eprintln!("echo_load: no request completed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// One connection's loop: send a message, read the echo back, check it, until `deadline` or
/// `quota` requests.
fn client(stream: TcpStream, id: usize, size: usize, deadline: Instant, quota: usize) -> Report {
    let mut io = &stream; // Read and Write are implemented for &TcpStream
    // Every connection sends its own bytes, so a crossed stream would show.
    let message: Vec<u8> = (0..size).map(|i| (i * 7 + id * 13) as u8).collect();
    let mut echo = vec![0_u8; size];
    let mut report = Report {
        latencies_us: Vec::new(),
        mismatches: 0,
    };
    while report.latencies_us.len() < quota && Instant::now() < deadline {
        let sent = Instant::now();
        if let Err(error) = io.write_all(&message) {
            eprintln!("echo_load: connection {id}: write failed: {error}");
            break;
        }
        if let Err(error) = io.read_exact(&mut echo) {
            eprintln!("echo_load: connection {id}: read failed: {error}");
            break;
        }
        let micros = sent.elapsed().as_micros();
        report
            .latencies_us
            .push(u32::try_from(micros).unwrap_or(u32::MAX));
        if echo != message {
            report.mismatches += 1;
        }
    }
    report
}

/// The `p`th percentile of sorted, non-empty `values` (nearest rank).
fn percentile(values: &[u32], p: f64) -> u32 {
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}
