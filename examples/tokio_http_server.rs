//! The HTTP server of `http_server.rs`, written with tokio on its multi-thread runtime. It
//! exists only as the comparison for BENCHMARKS.md ("Every core (issue 15)", produced by
//! `benches/scaling.sh`); tokio is a dev-dependency and greenweave does not use it.
//!
//! Same protocol (`support/http_reply.rs`: the same bytes for the same requests) and flags as
//! `http_server`: one task per connection, TCP_NODELAY on, one read buffer per connection and
//! one write per batch of pipelined requests. As tokio users run it: one listener whose accept
//! loop is a task, and the runtime's work-stealing workers (`--workers N`) share the tasks;
//! `--pin` pins the runtime's threads to the listed CPUs in the order they start.
//!
//! ```sh
//! cargo run --release --example tokio_http_server -- --workers 2     # 127.0.0.1:8080
//! cargo run --example tokio_http_server -- --addr 127.0.0.1:0 --max-connections 0
//! ```

use std::io::{self, ErrorKind};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "support/cpus.rs"]
mod cpus;
#[path = "support/fd_limit.rs"]
mod fd_limit;
#[path = "support/http_reply.rs"]
mod http_reply;

use fd_limit::raise_fd_limit;

const USAGE: &str = "usage: tokio_http_server [--addr HOST:PORT] [--workers N] [--pin CPU-LIST]
                         [--max-connections N]

  --addr HOST:PORT      where to listen (default 127.0.0.1:8080)
  --workers N           the multi-thread runtime's worker threads (default 1)
  --pin CPU-LIST        pin the runtime's threads to the CPUs of the list, e.g. 0,1 or 0-3,
                        in the order they start (round robin; default: not pinned)
  --max-connections N   serve N connections, wait for them to close, then exit
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
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("tokio_http_server: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fd_limit = raise_fd_limit();
    let cpus = Arc::new(options.cpus.clone());
    let started = AtomicUsize::new(0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.workers)
        .enable_io()
        .enable_time()
        .on_thread_start(move || {
            if !cpus.is_empty() {
                let cpu = cpus[started.fetch_add(1, Relaxed) % cpus.len()];
                if let Err(error) = cpus::pin_this_thread(cpu) {
                    eprintln!("tokio_http_server: {error}");
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
                "tokio_http_server: cannot listen on {}: {error}",
                options.addr
            );
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    let pinning = if options.cpus.is_empty() {
        "not pinned".to_owned()
    } else {
        format!("pinned to CPUs {:?}", options.cpus)
    };
    println!(
        "tokio_http_server: listening on {addr} with {} worker(s), {pinning} (open-file limit \
         {fd_limit})",
        options.workers
    );
    match options.max_connections {
        Some(0) => {
            println!("tokio_http_server: --max-connections 0: exiting");
            return ExitCode::SUCCESS;
        }
        Some(max) => println!("tokio_http_server: will exit after serving {max} connections"),
        None => println!("tokio_http_server: serving until interrupted (Ctrl-C)"),
    }
    let requests = Arc::new(AtomicU64::new(0));
    let mut accepted = 0_u64;
    let mut handlers = Vec::new();
    while options.max_connections.is_none_or(|max| accepted < max) {
        let (stream, peer) = match listener.accept().await {
            Ok(connection) => connection,
            Err(error) => {
                eprintln!("tokio_http_server: accept failed: {error}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        accepted += 1;
        let requests = requests.clone();
        let handler = tokio::spawn(async move {
            match serve_connection(stream).await {
                Ok(served) => {
                    requests.fetch_add(served, Relaxed);
                }
                Err(error)
                    if matches!(
                        error.kind(),
                        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
                    ) => {}
                Err(error) => eprintln!("tokio_http_server: connection from {peer}: {error}"),
            }
        });
        if options.max_connections.is_some() {
            handlers.push(handler);
        }
    }
    for handler in handlers {
        handler.await.expect("a connection's task does not panic");
    }
    println!(
        "tokio_http_server: served {accepted} connections, {} requests; exiting",
        requests.load(Relaxed)
    );
    ExitCode::SUCCESS
}

/// `support/http_connection.rs`'s loop, in tokio: serves the connection's requests until the
/// client closes it or a reply closes it; returns how many requests were answered.
async fn serve_connection(mut stream: TcpStream) -> io::Result<u64> {
    stream.set_nodelay(true)?;
    let mut input = vec![0_u8; http_reply::BUFFER];
    let mut filled = 0;
    let mut output = Vec::with_capacity(4096);
    let mut served = 0;
    loop {
        let n = stream.read(&mut input[filled..]).await?;
        if n == 0 {
            return Ok(served);
        }
        filled += n;
        let answered = http_reply::answer(&input[..filled], &mut output);
        served += answered.requests;
        if !output.is_empty() {
            stream.write_all(&output).await?;
            output.clear();
        }
        if answered.close {
            // Close our side, then drain what the client still sends until it closes (at most
            // 64 KiB), so unread input does not turn the close into a reset.
            stream.shutdown().await?;
            let mut sink = [0_u8; 4096];
            let mut drained = 0;
            while drained < 64 * 1024 {
                match stream.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => drained += n,
                }
            }
            return Ok(served);
        }
        input.copy_within(answered.consumed..filled, 0);
        filled -= answered.consumed;
    }
}
