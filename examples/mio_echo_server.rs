//! The echo server of `echo_server.rs`, written by hand on `mio`: one OS thread, one epoll
//! instance, a readiness state machine per connection and no runtime at all. It exists only as
//! the "raw epoll" comparison for BENCHMARKS.md (`benches/echo_compare.sh`,
//! `benches/echo_syscalls.sh`); mio is a dev-dependency and greenweave does not use it.
//!
//! It is written to be the floor: what one read and one write per request cost when nothing
//! sits between the program and epoll. Each connection is registered once, for both
//! directions, edge-triggered. An event marks the connection readable (and, with
//! `EPOLLRDHUP`/`EPOLLHUP`, read-closed); the connection then reads once into its 16 KiB
//! buffer, and a read that returns less than the buffer ends its readiness (the kernel's queue
//! is empty: the next bytes bring a new edge), so no read ever returns `EAGAIN` in the steady
//! state, unless the peer's read side closed, when it reads on to the end of the stream. What
//! was read is written back at once; what the kernel did not take waits for a writable edge,
//! and no more is read meanwhile.
//!
//! Same protocol and flags as `echo_server`: each connection echoed until the client closes,
//! TCP_NODELAY on. The soft limit on open files is raised to the hard limit at start.
//!
//! ```sh
//! cargo run --release --example mio_echo_server                   # 127.0.0.1:7000, forever
//! cargo run --example mio_echo_server -- --addr 127.0.0.1:0 --max-connections 0
//! ```

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

#[path = "support/fd_limit.rs"]
mod fd_limit;
use fd_limit::raise_fd_limit;

const NAME: &str = "mio_echo_server";

const USAGE: &str = "usage: mio_echo_server [--addr HOST:PORT] [--max-connections N]

  --addr HOST:PORT      where to listen (default 127.0.0.1:7000)
  --max-connections N   serve N connections, wait for them to close, then exit
                        (default: serve forever; 0 binds, reports and exits)";

/// The listener's token; connection `i` of the table is `Token(i + 1)`.
const LISTENER: Token = Token(0);

/// Bytes read (and echoed) at most per read.
const BUFFER: usize = 16 * 1024;

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

/// One client: its socket, its buffer, and what the last events said about it.
struct Connection {
    id: u64,
    peer: SocketAddr,
    stream: TcpStream,
    buf: Box<[u8; BUFFER]>,
    /// Bytes of `buf` read and not yet written back: `buf[written..read]`.
    read: usize,
    written: usize,
    /// An edge said readable and no read since has found the queue empty.
    readable: bool,
    /// The peer shut its write side (or the connection is gone): read until 0.
    read_closed: bool,
    /// An edge said writable and no write since was refused.
    writable: bool,
    echoed: u64,
}

/// What serving a connection's readiness came to.
enum Progress {
    /// Waiting for the next edge.
    Open,
    /// The client closed (or the connection failed); drop it.
    Closed,
}

impl Connection {
    /// Reads and writes while the cached readiness allows.
    fn serve(&mut self) -> Progress {
        loop {
            // Write back what is pending first; no more is read until it is gone.
            while self.written < self.read {
                if !self.writable {
                    return Progress::Open;
                }
                match self.stream.write(&self.buf[self.written..self.read]) {
                    Ok(n) => {
                        self.written += n;
                        self.echoed += n as u64;
                    }
                    Err(error) if error.kind() == ErrorKind::WouldBlock => self.writable = false,
                    Err(error) if error.kind() == ErrorKind::Interrupted => {}
                    Err(error) => return self.failed("writing to", &error),
                }
            }
            if !self.readable {
                return Progress::Open;
            }
            match self.stream.read(&mut self.buf[..]) {
                Ok(0) => return Progress::Closed,
                Ok(n) => {
                    // A short read emptied the kernel's queue: the next bytes bring an edge.
                    // After the peer's FIN no edge comes, so then read on to the 0.
                    if n < BUFFER && !self.read_closed {
                        self.readable = false;
                    }
                    self.read = n;
                    self.written = 0;
                }
                Err(error) if error.kind() == ErrorKind::WouldBlock => self.readable = false,
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                Err(error) => return self.failed("reading from", &error),
            }
        }
    }

    fn failed(&self, doing: &str, error: &std::io::Error) -> Progress {
        if !matches!(
            error.kind(),
            ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
        ) {
            eprintln!("{NAME}: {doing} {}: {error}", self.peer);
        }
        Progress::Closed
    }
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{NAME}: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fd_limit = raise_fd_limit();
    match serve(&options, fd_limit) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("{NAME}: {error}");
            ExitCode::FAILURE
        }
    }
}

fn serve(options: &Options, fd_limit: u64) -> std::io::Result<ExitCode> {
    let listener = match std::net::TcpListener::bind(options.addr.as_str()) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("{NAME}: cannot listen on {}: {error}", options.addr);
            return Ok(ExitCode::FAILURE);
        }
    };
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let addr = listener.local_addr()?;
    println!("{NAME}: listening on {addr} (open-file limit {fd_limit})");
    match options.max_connections {
        Some(max) => println!("{NAME}: will exit after serving {max} connections"),
        None => println!("{NAME}: serving until interrupted (Ctrl-C)"),
    }

    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut accepting = options.max_connections.is_none_or(|max| max > 0);
    if accepting {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
    }
    let mut connections: Vec<Option<Connection>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut open = 0_u64;
    let mut accepted = 0_u64;
    let mut echoed = 0_u64;
    while accepting || open > 0 {
        match poll.poll(&mut events, None) {
            Ok(()) => {}
            Err(error) if error.kind() == ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        }
        for event in &events {
            if event.token() == LISTENER {
                // Edge-triggered: accept until the queue is empty.
                while accepting {
                    let (mut stream, peer) = match listener.accept() {
                        Ok(connection) => connection,
                        Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                        Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                        // Out of file descriptors, or a client gone before we accepted it:
                        // report, let the other connections make progress, and go on.
                        Err(error) => {
                            eprintln!("{NAME}: accept failed: {error}");
                            std::thread::sleep(Duration::from_millis(10));
                            break;
                        }
                    };
                    // Small request/response exchanges: do not let Nagle hold back a reply.
                    let _ = stream.set_nodelay(true);
                    let index = free.pop().unwrap_or_else(|| {
                        connections.push(None);
                        connections.len() - 1
                    });
                    poll.registry().register(
                        &mut stream,
                        Token(index + 1),
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                    accepted += 1;
                    open += 1;
                    println!("{NAME}: connection {accepted} from {peer} ({open} open)");
                    // Optimistic, like a fresh registration in any runtime: the first read
                    // and write are simply tried.
                    connections[index] = Some(Connection {
                        id: accepted,
                        peer,
                        stream,
                        buf: Box::new([0; BUFFER]),
                        read: 0,
                        written: 0,
                        readable: true,
                        read_closed: false,
                        writable: true,
                        echoed: 0,
                    });
                    if options.max_connections.is_some_and(|max| accepted >= max) {
                        accepting = false;
                        poll.registry().deregister(&mut listener)?;
                    }
                }
                continue;
            }
            let index = event.token().0 - 1;
            let Some(Some(connection)) = connections.get_mut(index) else {
                continue; // an event for a connection closed earlier in this batch
            };
            if event.is_readable() || event.is_read_closed() || event.is_error() {
                connection.readable = true;
            }
            if event.is_read_closed() || event.is_error() {
                connection.read_closed = true;
            }
            if event.is_writable() || event.is_write_closed() || event.is_error() {
                connection.writable = true;
            }
            if let Progress::Closed = connection.serve() {
                let mut connection = connections[index].take().expect("served just now");
                poll.registry().deregister(&mut connection.stream)?;
                free.push(index);
                open -= 1;
                echoed += connection.echoed;
                println!(
                    "{NAME}: connection {} closed after {} bytes ({open} open)",
                    connection.id, connection.echoed
                );
            }
        }
    }
    println!("{NAME}: served {accepted} connections, echoed {echoed} bytes; exiting");
    Ok(ExitCode::SUCCESS)
}
