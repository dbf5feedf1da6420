//! The gevent echo server: one green thread per connection, all on one OS thread.
//!
//! Each connection's green thread reads and writes as if it had the OS thread to itself;
//! a read with nothing to read parks only that green thread, and epoll wakes it when the
//! client sends more. Thousands of connections cost thousands of small stacks, not thousands
//! of OS threads. The soft limit on open files is raised to the hard limit at start, since
//! each connection is a file descriptor.
//!
//! ```sh
//! cargo run --release --example echo_server                       # 127.0.0.1:7000, forever
//! cargo run --example echo_server -- --addr 0.0.0.0:7001
//! cargo run --example echo_server -- --max-connections 3          # exit after 3 clients
//! cargo run --example echo_server -- --max-connections 0          # bind, report, exit
//! ```
//!
//! Try it with `nc 127.0.0.1 7000`, or load it with
//! `cargo run --release --example echo_load -- --addr 127.0.0.1:7000 --connections 1000`.

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use greenweave::net::{TcpListener, TcpStream};
use greenweave::thread::{self, JoinHandle};

#[path = "support/fd_limit.rs"]
mod fd_limit;
use fd_limit::raise_fd_limit;

const USAGE: &str = "usage: echo_server [--addr HOST:PORT] [--max-connections N]

  --addr HOST:PORT      where to listen (default 127.0.0.1:7000)
  --max-connections N   serve N connections, wait for them to close, then exit
                        (default: serve forever; 0 binds, reports and exits)";

struct Options {
    addr: String,
    max_connections: Option<u64>,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        addr: "127.0.0.1:7000".to_owned(),
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
            eprintln!("echo_server: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fd_limit = raise_fd_limit();
    greenweave::run(move || serve(&options, fd_limit))
}

fn serve(options: &Options, fd_limit: u64) -> ExitCode {
    let listener = match TcpListener::bind(options.addr.as_str()) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("echo_server: cannot listen on {}: {error}", options.addr);
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    println!("echo_server: listening on {addr} (open-file limit {fd_limit})");
    match options.max_connections {
        Some(max) => println!("echo_server: will exit after serving {max} connections"),
        None => println!("echo_server: serving until interrupted (Ctrl-C)"),
    }

    let open = Rc::new(Cell::new(0_u64));
    let echoed = Rc::new(Cell::new(0_u64));
    let mut accepted = 0_u64;
    // Handles are kept only when we are going to wait for the connections to end.
    let mut handlers: Vec<JoinHandle<()>> = Vec::new();
    while options.max_connections.is_none_or(|max| accepted < max) {
        let (stream, peer) = match listener.accept() {
            Ok(connection) => connection,
            // Out of file descriptors, or a client gone before we accepted it: report, let
            // the other connections make progress, and go on.
            Err(error) => {
                eprintln!("echo_server: accept failed: {error}");
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        accepted += 1;
        let id = accepted;
        open.set(open.get() + 1);
        println!(
            "echo_server: connection {id} from {peer} ({} open)",
            open.get()
        );
        let (open, echoed) = (open.clone(), echoed.clone());
        let handler = greenweave::spawn(move || {
            let bytes = echo(&stream, peer);
            open.set(open.get() - 1);
            echoed.set(echoed.get() + bytes);
            println!(
                "echo_server: connection {id} closed after {bytes} bytes ({} open)",
                open.get()
            );
        });
        if options.max_connections.is_some() {
            handlers.push(handler);
        }
    }
    for handler in handlers {
        handler.join().expect("a connection handler does not panic");
    }
    println!(
        "echo_server: served {accepted} connections, echoed {} bytes; exiting",
        echoed.get()
    );
    ExitCode::SUCCESS
}

/// Echoes until the client closes; returns how many bytes went back.
fn echo(stream: &TcpStream, peer: SocketAddr) -> u64 {
    // Small request/response exchanges: do not let Nagle hold back a reply.
    let _ = stream.set_nodelay(true);
    let mut io = stream; // Read and Write are implemented for &TcpStream
    let mut buf = [0_u8; 16 * 1024];
    let mut total = 0_u64;
    loop {
        let n = match io.read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => n,
            Err(error) if error.kind() == ErrorKind::ConnectionReset => return total,
            Err(error) => {
                eprintln!("echo_server: reading from {peer}: {error}");
                return total;
            }
        };
        if let Err(error) = io.write_all(&buf[..n]) {
            if !matches!(
                error.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
            ) {
                eprintln!("echo_server: writing to {peer}: {error}");
            }
            return total;
        }
        total += n as u64;
    }
}
