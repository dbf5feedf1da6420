//! The gevent echo server: one green thread per connection, all on one OS thread.
//!
//! Each connection's green thread reads and writes as if it had the OS thread to itself;
//! a read with nothing to read parks only that green thread, and epoll wakes it when the
//! client sends more. Thousands of connections cost thousands of small stacks, not thousands
//! of OS threads. The soft limit on open files is raised to the hard limit at start, since
//! each connection is a file descriptor.
//!
//! With `--workers N` it runs on N workers (`Runtime::builder().workers(N)`), each with its own
//! listening socket on the same address (`SO_REUSEPORT`: the kernel spreads the connections
//! over them), a connection's green thread staying on the worker that accepted it; `--pin 0-3`
//! pins worker i to the i-th CPU of the list.
//!
//! ```sh
//! cargo run --release --example echo_server                       # 127.0.0.1:7000, forever
//! cargo run --release --example echo_server -- --workers 2 --pin 0,1
//! cargo run --example echo_server -- --addr 0.0.0.0:7001
//! cargo run --example echo_server -- --max-connections 3          # exit after 3 clients
//! cargo run --example echo_server -- --max-connections 0          # bind, report, exit
//! ```
//!
//! Try it with `nc 127.0.0.1 7000`, or load it with
//! `cargo run --release --example echo_load -- --addr 127.0.0.1:7000 --connections 1000`.

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use greenweave::net::{TcpListener, TcpStream};
use greenweave::thread::sleep;

#[path = "support/cpus.rs"]
#[allow(dead_code)] // pin_this_thread is the tokio peers': the runtime pins its own workers
mod cpus;
#[path = "support/fd_limit.rs"]
mod fd_limit;
#[path = "support/workers.rs"]
mod workers;
use fd_limit::raise_fd_limit;

/// The program's name, in its messages.
const NAME: &str = "echo_server";

/// Makes a listener from `workers` green.
fn green_listener(listener: std::net::TcpListener) -> std::io::Result<TcpListener> {
    TcpListener::from_std(listener)
}

include!("support/echo_server.rs");
