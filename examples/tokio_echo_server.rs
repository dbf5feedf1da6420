//! The echo server of `echo_server.rs`, written with tokio on a `current_thread` runtime, or
//! with `--workers N` on its multi-thread runtime. It exists only as the comparison for
//! BENCHMARKS.md ("Echo server vs tokio current_thread", produced by `benches/echo_compare.sh`,
//! and "Every core (issue 15)", by `benches/scaling.sh`); tokio is a dev-dependency and
//! greenweave does not use it.
//!
//! Same protocol and flags as `echo_server`: one task per connection, each reading up to
//! 16 KiB and writing it back until the client closes, TCP_NODELAY on; one OS thread, or N
//! work-stealing workers sharing one listener (as tokio users run it), pinned with `--pin` to
//! the listed CPUs in the order the runtime's threads start. The soft limit on open files is
//! raised to the hard limit at start.
//!
//! ```sh
//! cargo run --release --example tokio_echo_server                 # 127.0.0.1:7000, forever
//! cargo run --release --example tokio_echo_server -- --workers 2 --pin 0,1
//! cargo run --example tokio_echo_server -- --addr 127.0.0.1:0 --max-connections 0
//! ```

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[path = "support/cpus.rs"]
mod cpus;
#[path = "support/fd_limit.rs"]
mod fd_limit;
use fd_limit::raise_fd_limit;

const USAGE: &str = "usage: tokio_echo_server [--addr HOST:PORT] [--workers N] [--pin CPU-LIST]
                         [--max-connections N]

  --addr HOST:PORT      where to listen (default 127.0.0.1:7000)
  --workers N           run on the multi-thread runtime with N worker threads
                        (default: the current_thread runtime, on this thread)
  --pin CPU-LIST        pin the runtime's threads to the CPUs of the list, e.g. 0,1 or 0-3,
                        in the order they start (round robin; default: not pinned)
  --max-connections N   serve N connections, wait for them to close, then exit
                        (default: serve forever; 0 binds, reports and exits)";

struct Options {
    addr: String,
    workers: Option<usize>,
    cpus: Vec<usize>,
    max_connections: Option<u64>,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        addr: "127.0.0.1:7000".to_owned(),
        workers: None,
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
                let workers =
                    text.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        format!("--workers: not a positive whole number: {text:?}")
                    })?;
                options.workers = Some(workers);
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
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("tokio_echo_server: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fd_limit = raise_fd_limit();
    let Some(worker_count) = options.workers else {
        if let Some(&cpu) = options.cpus.first()
            && let Err(error) = cpus::pin_this_thread(cpu)
        {
            eprintln!("tokio_echo_server: {error}");
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .expect("build a current_thread runtime");
        return runtime.block_on(serve(options, fd_limit));
    };
    let cpus = Arc::new(options.cpus.clone());
    let started = AtomicUsize::new(0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_count)
        .enable_io()
        .enable_time()
        .on_thread_start(move || {
            if !cpus.is_empty() {
                let cpu = cpus[started.fetch_add(1, Relaxed) % cpus.len()];
                if let Err(error) = cpus::pin_this_thread(cpu) {
                    eprintln!("tokio_echo_server: {error}");
                }
            }
        })
        .build()
        .expect("build a multi-thread runtime");
    // The accept loop is a task, so it runs on the workers, not on this (unpinned) thread.
    runtime
        .block_on(async move { tokio::spawn(serve(options, fd_limit)).await })
        .expect("the accept loop does not panic")
}

async fn serve(options: Options, fd_limit: u64) -> ExitCode {
    let listener = match TcpListener::bind(options.addr.as_str()).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!(
                "tokio_echo_server: cannot listen on {}: {error}",
                options.addr
            );
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    println!("tokio_echo_server: listening on {addr} (open-file limit {fd_limit})");
    match options.max_connections {
        Some(max) => println!("tokio_echo_server: will exit after serving {max} connections"),
        None => println!("tokio_echo_server: serving until interrupted (Ctrl-C)"),
    }

    // `tokio::spawn` needs Send futures even on a current_thread runtime, hence Arc and
    // atomics where echo_server has Rc and Cell; they are touched once per connection only.
    let open = Arc::new(AtomicU64::new(0));
    let echoed = Arc::new(AtomicU64::new(0));
    let mut accepted = 0_u64;
    // Handles are kept only when we are going to wait for the connections to end.
    let mut handlers: Vec<JoinHandle<()>> = Vec::new();
    while options.max_connections.is_none_or(|max| accepted < max) {
        let (stream, peer) = match listener.accept().await {
            Ok(connection) => connection,
            // Out of file descriptors, or a client gone before we accepted it: report, let
            // the other connections make progress, and go on.
            Err(error) => {
                eprintln!("tokio_echo_server: accept failed: {error}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        accepted += 1;
        let id = accepted;
        let now_open = open.fetch_add(1, Relaxed) + 1;
        println!("tokio_echo_server: connection {id} from {peer} ({now_open} open)");
        let (open, echoed) = (open.clone(), echoed.clone());
        let handler = tokio::spawn(async move {
            let bytes = echo(stream, peer).await;
            let now_open = open.fetch_sub(1, Relaxed) - 1;
            echoed.fetch_add(bytes, Relaxed);
            println!(
                "tokio_echo_server: connection {id} closed after {bytes} bytes ({now_open} open)"
            );
        });
        if options.max_connections.is_some() {
            handlers.push(handler);
        }
    }
    for handler in handlers {
        handler.await.expect("a connection handler does not panic");
    }
    println!(
        "tokio_echo_server: served {accepted} connections, echoed {} bytes; exiting",
        echoed.load(Relaxed)
    );
    ExitCode::SUCCESS
}

/// Echoes until the client closes; returns how many bytes went back.
async fn echo(mut stream: TcpStream, peer: SocketAddr) -> u64 {
    // Small request/response exchanges: do not let Nagle hold back a reply.
    let _ = stream.set_nodelay(true);
    let mut buf = [0_u8; 16 * 1024];
    let mut total = 0_u64;
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) => return total,
            Ok(n) => n,
            Err(error) if error.kind() == ErrorKind::ConnectionReset => return total,
            Err(error) => {
                eprintln!("tokio_echo_server: reading from {peer}: {error}");
                return total;
            }
        };
        if let Err(error) = stream.write_all(&buf[..n]).await {
            if !matches!(
                error.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
            ) {
                eprintln!("tokio_echo_server: writing to {peer}: {error}");
            }
            return total;
        }
        total += n as u64;
    }
}
