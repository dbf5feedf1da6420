//! What running a blocking client through the hooks costs: `ureq` (std's `TcpStream`, made
//! green by the `hooks` feature) against a hand-written minimal HTTP/1.1 GET on
//! `greenweave::net::TcpStream`, the same requests to the same in-process server. A third
//! client, the same hand-written GET on `std::net::TcpStream` (so through the hooks), splits the
//! difference: hooked std against green is the hooks' price, `ureq` against hooked std is
//! `ureq`'s own.
//!
//! N green threads each make M GETs one after another on a kept-alive connection; the time the
//! N x M requests take (connecting included), the client OS thread's CPU time and the server's
//! (the rest of the process's) per request are measured, for each client in turn, R rounds
//! (the order rotates from round to round).
//! The server (`examples/support/http_server.rs`, `greenweave::net`) runs on another OS thread
//! with its own runtime, pinned to CPU 0 with the client on CPU 1 when the machine has two.
//!
//! ```sh
//! cargo run --release --features hooks --example hooks_http_bench
//! cargo run --release --features hooks --example hooks_http_bench -- --clients 100 --requests 500
//! cargo run --features hooks --example hooks_http_bench -- --quick   # tiny counts, for CI and qemu
//! ```
//!
//! `ureq` does more per request than the hand-written client (its pool checks a reused
//! connection with a non-blocking peek, which is two `ioctl(FIONBIO)` and a `recv`, and clears
//! the socket's timeouts with two `setsockopt`; it parses the URL and every header), so the
//! ratio is the price of `ureq` and of the hooks together; the hooked std client, and
//! `benches/hooks_echo.sh`, show the hooks' alone.

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

#[path = "support/http_server.rs"]
mod http_server;

const USAGE: &str = "usage: hooks_http_bench [--clients N] [--requests M] [--rounds R] [--quick]
                        [--only ureq|std|green]

  --clients N     green threads making requests at once (default 50)
  --requests M    GETs per green thread (default 200)
  --rounds R      how many times each client runs (default 5)
  --quick         4 clients x 10 requests, 1 round, for CI and qemu
  --only CLIENT   run one client only (to profile it, or count its system calls)";

struct Options {
    clients: usize,
    requests: usize,
    rounds: usize,
    clients_run: Vec<Client>,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        clients: 50,
        requests: 200,
        rounds: 5,
        clients_run: CLIENTS.to_vec(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut count = || -> Result<usize, String> {
            let text = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            text.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{flag}: not a positive whole number: {text:?}"))
        };
        match flag.as_str() {
            "--clients" => options.clients = count()?,
            "--requests" => options.requests = count()?,
            "--rounds" => options.rounds = count()?,
            "--only" => {
                let name = args.next().ok_or("--only needs a value")?;
                let client = match name.as_str() {
                    "ureq" => Client::Ureq,
                    "std" => Client::StdHooked,
                    "green" => Client::Green,
                    _ => return Err(format!("--only: not ureq, std or green: {name:?}")),
                };
                options.clients_run = vec![client];
            }
            "--quick" => (options.clients, options.requests, options.rounds) = (4, 10, 1),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    Ok(options)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Client {
    /// `ureq` 2, blocking std sockets, through the hooks.
    Ureq,
    /// The minimal HTTP/1.1 GET below, on a blocking `std::net::TcpStream`, through the hooks.
    StdHooked,
    /// The same GET on `greenweave::net::TcpStream`.
    Green,
}

const CLIENTS: [Client; 3] = [Client::Ureq, Client::StdHooked, Client::Green];

/// Reads one figure of a run.
type Figure = fn(&Run) -> Duration;

/// What one run of N x M requests measured.
struct Run {
    elapsed: Duration,
    /// CPU time of the client's OS thread (all its green threads and the scheduler).
    cpu: Duration,
    /// CPU time of the rest of the process: the server's OS thread.
    server_cpu: Duration,
    failed: u64,
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("hooks_http_bench: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let two_cpus = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let server = http_server::spawn(Duration::ZERO, two_cpus.then_some(0));
    let pinned = two_cpus && http_server::pin_this_thread(1);
    println!(
        "hooks_http_bench: {} green threads x {} GETs, {} round(s), server {server} ({})",
        options.clients,
        options.requests,
        options.rounds,
        if pinned {
            "server on CPU 0, clients on CPU 1"
        } else {
            "unpinned"
        }
    );
    greenweave::run(move || compare(server, &options))
}

fn compare(server: SocketAddr, options: &Options) -> ExitCode {
    let total = (options.clients * options.requests) as f64;
    let mut runs: Vec<(Client, Run)> = Vec::new();
    println!(
        "| round | client | time, ms | µs/request | client CPU µs/request | server CPU µs/request |"
    );
    println!("|---|---|---|---|---|---|");
    for round in 1..=options.rounds {
        let mut order = options.clients_run.clone();
        let len = order.len();
        order.rotate_left((round - 1) % len);
        for client in order {
            let run = run_clients(client, server, options);
            println!(
                "| {round} | {client:?} | {:.1} | {:.2} | {:.2} | {:.2} |",
                run.elapsed.as_secs_f64() * 1e3,
                run.elapsed.as_secs_f64() * 1e6 / total,
                run.cpu.as_secs_f64() * 1e6 / total,
                run.server_cpu.as_secs_f64() * 1e6 / total,
            );
            runs.push((client, run));
        }
    }
    let median = |client: Client, figure: Figure| {
        let mut values: Vec<f64> = runs
            .iter()
            .filter(|(which, _)| *which == client)
            .map(|(_, run)| figure(run).as_secs_f64() * 1e6 / total)
            .collect();
        values.sort_by(f64::total_cmp);
        let middle = values.len() / 2;
        if values.len() % 2 == 1 {
            values[middle]
        } else {
            (values[middle - 1] + values[middle]) / 2.0
        }
    };
    let failed: u64 = runs.iter().map(|(_, run)| run.failed).sum();
    if failed > 0 {
        eprintln!("hooks_http_bench: {failed} requests failed or got another's reply");
        return ExitCode::FAILURE;
    }
    if options.clients_run.len() < CLIENTS.len() {
        return ExitCode::SUCCESS;
    }
    println!();
    println!(
        "| median of {} round(s) | ureq (hooks) | std GET (hooks) | greenweave::net GET | ureq / greenweave::net | std (hooks) / greenweave::net |",
        options.rounds
    );
    println!("|---|---|---|---|---|---|");
    let figures: [(&str, Figure); 3] = [
        ("time per request, µs", |run| run.elapsed),
        ("client CPU per request, µs", |run| run.cpu),
        ("server CPU per request, µs", |run| run.server_cpu),
    ];
    for (name, figure) in figures {
        let [ureq, std, green] = CLIENTS.map(|client| median(client, figure));
        println!(
            "| {name} | {ureq:.2} | {std:.2} | {green:.2} | {:.2}x | {:.2}x |",
            ureq / green,
            std / green
        );
    }
    ExitCode::SUCCESS
}

/// N green threads x M requests with `client`; returns what it took.
fn run_clients(client: Client, server: SocketAddr, options: &Options) -> Run {
    let failed = Rc::new(Cell::new(0_u64));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .max_idle_connections(options.clients)
        .max_idle_connections_per_host(options.clients)
        .build()
        .into();
    let cpu_before = cpu_time(libc::CLOCK_THREAD_CPUTIME_ID);
    let process_before = cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID);
    let started = Instant::now();
    let handles: Vec<_> = (0..options.clients)
        .map(|id| {
            let (failed, agent, requests) = (failed.clone(), agent.clone(), options.requests);
            greenweave::spawn(move || {
                let paths =
                    (0..requests).map(move |request| format!("/client/{id}/request/{request}"));
                let check = |path: &str, reply: io::Result<String>| match reply {
                    Ok(body) if body == path => {}
                    Ok(body) => {
                        eprintln!("hooks_http_bench: asked for {path}, got {body:?}");
                        failed.set(failed.get() + 1);
                    }
                    Err(error) => {
                        eprintln!("hooks_http_bench: GET {path}: {error}");
                        failed.set(failed.get() + 1);
                    }
                };
                match client {
                    Client::Ureq => {
                        let base = format!("http://{server}");
                        for path in paths {
                            let reply = agent
                                .get(&format!("{base}{path}"))
                                .call()
                                .map_err(io::Error::other)
                                .and_then(|mut response| {
                                    response
                                        .body_mut()
                                        .read_to_string()
                                        .map_err(io::Error::other)
                                });
                            check(&path, reply);
                        }
                    }
                    Client::StdHooked => match Http::<std::net::TcpStream>::connect(server) {
                        Ok(mut connection) => {
                            for path in paths {
                                let reply = connection.get(&path);
                                check(&path, reply);
                            }
                        }
                        Err(error) => check("(connect)", Err(error)),
                    },
                    Client::Green => match Http::<greenweave::net::TcpStream>::connect(server) {
                        Ok(mut connection) => {
                            for path in paths {
                                let reply = connection.get(&path);
                                check(&path, reply);
                            }
                        }
                        Err(error) => check("(connect)", Err(error)),
                    },
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("a client does not panic");
    }
    let elapsed = started.elapsed();
    let cpu = cpu_time(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(cpu_before);
    let process = cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID).saturating_sub(process_before);
    Run {
        elapsed,
        cpu,
        server_cpu: process.saturating_sub(cpu),
        failed: failed.get(),
    }
}

/// The streams the hand-written client runs on: std's (through the hooks) and greenweave's.
trait Stream: Read + Write + Sized {
    fn connect(server: SocketAddr) -> io::Result<Self>;
    fn set_nodelay(&self, nodelay: bool) -> io::Result<()>;
}

impl Stream for std::net::TcpStream {
    fn connect(server: SocketAddr) -> io::Result<Self> {
        std::net::TcpStream::connect(server)
    }
    fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        std::net::TcpStream::set_nodelay(self, nodelay)
    }
}

impl Stream for greenweave::net::TcpStream {
    fn connect(server: SocketAddr) -> io::Result<Self> {
        greenweave::net::TcpStream::connect(server)
    }
    fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        greenweave::net::TcpStream::set_nodelay(self, nodelay)
    }
}

/// A kept-alive HTTP/1.1 connection: as little as a GET needs.
struct Http<S> {
    stream: S,
    host: String,
    /// Bytes read past the last response (none, with one request at a time; kept for honesty).
    pending: Vec<u8>,
}

impl<S: Stream> Http<S> {
    fn connect(server: SocketAddr) -> io::Result<Http<S>> {
        let stream = S::connect(server)?;
        stream.set_nodelay(true)?;
        Ok(Http {
            stream,
            host: server.to_string(),
            pending: Vec::with_capacity(4096),
        })
    }

    /// `GET path`; the body of a `200 OK` reply.
    fn get(&mut self, path: &str) -> io::Result<String> {
        let request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", self.host);
        self.stream.write_all(request.as_bytes())?;
        let head_end = loop {
            if let Some(end) = find(&self.pending, b"\r\n\r\n") {
                break end;
            }
            self.fill()?;
        };
        let head = std::str::from_utf8(&self.pending[..head_end])
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a head that is not UTF-8"))?;
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap_or_default();
        if status.split(' ').nth(1) != Some("200") {
            return Err(io::Error::other(format!("the server said {status:?}")));
        }
        let length = lines
            .filter_map(|line| line.split_once(':'))
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.trim().parse::<usize>().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Content-Length"))?;
        let body_start = head_end + 4;
        while self.pending.len() < body_start + length {
            self.fill()?;
        }
        let body =
            String::from_utf8_lossy(&self.pending[body_start..body_start + length]).into_owned();
        self.pending.drain(..body_start + length);
        Ok(body)
    }

    /// Reads what the server sent next onto `pending`.
    fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0_u8; 4096];
        match self.stream.read(&mut chunk)? {
            0 => Err(io::ErrorKind::UnexpectedEof.into()),
            n => {
                self.pending.extend_from_slice(&chunk[..n]);
                Ok(())
            }
        }
    }
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The CPU time `clock` reads (the calling OS thread's, or the process's).
fn cpu_time(clock: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a live timespec for clock_gettime to fill in.
    unsafe { libc::clock_gettime(clock, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}
