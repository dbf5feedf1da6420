//! A keep-alive HTTP/1.1 server on every worker: one green thread per connection, requests
//! parsed with `httparse`, every request answered `200 OK` with the body `Hello, World!`.
//! The server of the "Every core (issue 15)" benchmark (`benches/scaling.sh`), against
//! `tokio_http_server` (the same protocol on tokio's multi-thread runtime) and Go's net/http.
//!
//! With `--workers N` it runs on N workers (`Runtime::builder().workers(N)`), each with its own
//! listening socket on the same address (`SO_REUSEPORT`: the kernel spreads the connections
//! over them, `Runtime::run_on_every_worker` runs an accept loop on each); a connection's green
//! thread stays on the worker that accepted it. `--pin 0-3` pins worker i to the i-th CPU of
//! the list (round robin when it is shorter).
//! Pipelined requests are answered in order, one write per batch; `Connection: close` closes
//! after the reply; a malformed request gets `400 Bad Request` and the connection closes (see
//! `support/http_reply.rs` for the rest of the protocol).
//!
//! ```sh
//! cargo run --release --example http_server                          # 127.0.0.1:8080, forever
//! cargo run --release --example http_server -- --workers 2 --pin 0,1
//! cargo run --example http_server -- --addr 127.0.0.1:0 --max-connections 0  # bind, exit
//! wrk -t 1 -c 64 -d 10 http://127.0.0.1:8080/
//! ```

use std::cell::Cell;
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use greenweave::net::TcpListener;

#[path = "support/cpus.rs"]
#[allow(dead_code)] // pin_this_thread is the tokio peers': the runtime pins its own workers
mod cpus;
#[path = "support/fd_limit.rs"]
mod fd_limit;
#[path = "support/http_connection.rs"]
mod http_connection;
#[path = "support/http_reply.rs"]
mod http_reply;
#[path = "support/workers.rs"]
mod workers;

use fd_limit::raise_fd_limit;

const USAGE: &str = "usage: http_server [--addr HOST:PORT] [--workers N] [--pin CPU-LIST]
                   [--max-connections N]

  --addr HOST:PORT      where to listen (default 127.0.0.1:8080)
  --workers N           the runtime's workers (OS threads), each with its own
                        SO_REUSEPORT listener on that address (default 1)
  --pin CPU-LIST        pin worker i to the i-th CPU of the list, e.g. 0,1 or 0-3
                        (round robin when the list is shorter; default: not pinned)
  --max-connections N   serve N connections, wait for them to close, then exit; needs
                        --workers 1 when N > 0 (the kernel picks each connection's worker)
                        (default: serve forever; 0 binds, reports and exits)";

struct Options {
    addr: String,
    workers: usize,
    cpus: Vec<usize>,
    max_connections: Option<u64>,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        addr: "127.0.0.1:8080".to_owned(),
        workers: 1,
        cpus: Vec::new(),
        max_connections: None,
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
            "--workers" => {
                let text = value()?;
                options.workers =
                    text.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        format!("--workers: not a positive whole number: {text:?}")
                    })?;
            }
            "--pin" => options.cpus = cpus::parse_cpu_list(&value()?)?,
            "--max-connections" => {
                let text = value()?;
                let count = text
                    .parse()
                    .map_err(|_| format!("--max-connections: not a count: {text:?}"))?;
                options.max_connections = Some(count);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    if options.workers > 1 && options.max_connections.is_some_and(|max| max > 0) {
        return Err(format!(
            "--max-connections {} needs --workers 1: with {} workers the kernel decides which \
             worker gets each connection",
            options.max_connections.unwrap_or(0),
            options.workers
        ));
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("http_server: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fd_limit = raise_fd_limit();
    let addr = match options.addr.to_socket_addrs().map(|mut addrs| addrs.next()) {
        Ok(Some(addr)) => addr,
        Ok(None) => {
            eprintln!("http_server: {} names no address", options.addr);
            return ExitCode::FAILURE;
        }
        Err(error) => {
            eprintln!("http_server: cannot resolve {}: {error}", options.addr);
            return ExitCode::FAILURE;
        }
    };
    let listeners = match workers::reuse_port_listeners(addr, options.workers) {
        Ok(listeners) => listeners,
        Err(error) => {
            eprintln!("http_server: {error}");
            return ExitCode::FAILURE;
        }
    };
    let addr = listeners[0].local_addr().unwrap_or(addr);
    let pinning = if options.cpus.is_empty() {
        "not pinned".to_owned()
    } else {
        format!("pinned to CPUs {:?}", options.cpus)
    };
    println!(
        "http_server: listening on {addr} with {} worker(s), {pinning} (open-file limit {fd_limit})",
        options.workers
    );
    match options.max_connections {
        Some(0) => {
            println!("http_server: --max-connections 0: exiting");
            return ExitCode::SUCCESS;
        }
        Some(max) => println!("http_server: will exit after serving {max} connections"),
        None => println!("http_server: serving until interrupted (Ctrl-C)"),
    }
    let max_connections = options.max_connections;
    let results = workers::run_workers(listeners, &options.cpus, move |worker, listener| {
        serve(worker, listener, max_connections)
    });
    let results = match results {
        Ok(results) => results,
        Err(error) => {
            eprintln!("http_server: cannot start the workers: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (mut connections, mut requests, mut failed) = (0, 0, false);
    for result in results {
        match result {
            Ok((worker_connections, worker_requests)) => {
                connections += worker_connections;
                requests += worker_requests;
            }
            Err(message) => {
                eprintln!("http_server: {message}");
                failed = true;
            }
        }
    }
    println!("http_server: served {connections} connections, {requests} requests; exiting");
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// One worker's accept loop: a green thread per connection. Returns the connections and
/// requests served once `max_connections` connections have closed (never without it).
fn serve(
    worker: usize,
    listener: std::net::TcpListener,
    max_connections: Option<u64>,
) -> Result<(u64, u64), String> {
    let listener = TcpListener::from_std(listener)
        .map_err(|error| format!("worker {worker}: cannot make its listener green: {error}"))?;
    let requests = Rc::new(Cell::new(0_u64));
    let mut accepted = 0_u64;
    // Handles are kept only when we are going to wait for the connections to end.
    let mut handlers = Vec::new();
    while max_connections.is_none_or(|max| accepted < max) {
        let (stream, peer) = match listener.accept() {
            Ok(connection) => connection,
            // Out of file descriptors, or a client gone before we accepted it: report, let
            // the other connections make progress, and go on.
            Err(error) => {
                eprintln!("http_server: worker {worker}: accept failed: {error}");
                greenweave::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        accepted += 1;
        let requests = requests.clone();
        let handler = greenweave::spawn(move || match http_connection::serve_connection(&stream) {
            Ok(served) => requests.set(requests.get() + served),
            Err(error) => report(peer, &error),
        });
        if max_connections.is_some() {
            handlers.push(handler);
        }
    }
    for handler in handlers {
        handler
            .join()
            .expect("a connection's green thread does not panic");
    }
    Ok((accepted, requests.get()))
}

/// Reports a connection's error, except a client that went away, which is routine.
fn report(peer: SocketAddr, error: &std::io::Error) {
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset};
    if !matches!(error.kind(), BrokenPipe | ConnectionReset) {
        eprintln!("http_server: connection from {peer}: {error}");
    }
}
