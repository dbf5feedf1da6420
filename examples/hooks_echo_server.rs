//! The echo server of `examples/echo_server.rs` written with `std::net` only: with the `hooks`
//! feature, std's blocking `accept`, `read` and `write` park only their green thread, so one
//! green thread per connection serves them all on one OS thread, as the `greenweave::net`
//! version does. `benches/hooks_echo.sh` loads the two side by side (server CPU per request,
//! system calls per request).
//!
//! ```sh
//! cargo run --release --features hooks --example hooks_echo_server          # 127.0.0.1:7000
//! cargo run --features hooks --example hooks_echo_server -- --addr 127.0.0.1:0 --max-connections 0
//! cargo run --release --example echo_load -- --addr 127.0.0.1:7000 --connections 1000
//! ```
//!
//! Same options, same output, same per-connection work as `echo_server`.

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

#[path = "support/fd_limit.rs"]
mod fd_limit;
use fd_limit::raise_fd_limit;

const USAGE: &str = "usage: hooks_echo_server [--addr HOST:PORT] [--max-connections N]

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
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
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
            eprintln!("hooks_echo_server: {message}\n{USAGE}");
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
            eprintln!(
                "hooks_echo_server: cannot listen on {}: {error}",
                options.addr
            );
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    println!("hooks_echo_server: listening on {addr} (open-file limit {fd_limit})");

    let open = Rc::new(Cell::new(0_u64));
    let echoed = Rc::new(Cell::new(0_u64));
    let mut accepted = 0_u64;
    let mut handlers = Vec::new();
    while options.max_connections.is_none_or(|max| accepted < max) {
        // A hooked accept: parks this green thread until a client connects.
        let (stream, peer) = match listener.accept() {
            Ok(connection) => connection,
            Err(error) => {
                eprintln!("hooks_echo_server: accept failed: {error}");
                std::thread::sleep(Duration::from_millis(10)); // a hooked sleep
                continue;
            }
        };
        accepted += 1;
        let id = accepted;
        open.set(open.get() + 1);
        println!(
            "hooks_echo_server: connection {id} from {peer} ({} open)",
            open.get()
        );
        let (open, echoed) = (open.clone(), echoed.clone());
        let handler = greenweave::spawn(move || {
            let bytes = echo(stream, peer);
            open.set(open.get() - 1);
            echoed.set(echoed.get() + bytes);
            println!(
                "hooks_echo_server: connection {id} closed after {bytes} bytes ({} open)",
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
        "hooks_echo_server: served {accepted} connections, echoed {} bytes; exiting",
        echoed.get()
    );
    ExitCode::SUCCESS
}

/// Echoes until the client closes; returns how many bytes went back.
fn echo(mut stream: TcpStream, peer: SocketAddr) -> u64 {
    let _ = stream.set_nodelay(true);
    let mut buf = [0_u8; 16 * 1024];
    let mut total = 0_u64;
    loop {
        // A hooked recv: parks this green thread while the client has sent nothing.
        let n = match stream.read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => n,
            Err(error) if error.kind() == ErrorKind::ConnectionReset => return total,
            Err(error) => {
                eprintln!("hooks_echo_server: reading from {peer}: {error}");
                return total;
            }
        };
        if let Err(error) = stream.write_all(&buf[..n]) {
            if !matches!(
                error.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
            ) {
                eprintln!("hooks_echo_server: writing to {peer}: {error}");
            }
            return total;
        }
        total += n as u64;
    }
}
