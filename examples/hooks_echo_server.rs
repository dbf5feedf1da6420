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
//! The same source as `echo_server` (`support/echo_server.rs`): same options, same output,
//! same per-connection work; only the types differ.

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::rc::Rc;
use std::thread::sleep; // a hooked clock_nanosleep
use std::time::Duration;

#[path = "support/cpus.rs"]
#[allow(dead_code)] // pin_this_thread is the tokio peers': the runtime pins its own workers
mod cpus;
#[path = "support/fd_limit.rs"]
mod fd_limit;
#[path = "support/workers.rs"]
mod workers;
use fd_limit::raise_fd_limit;

/// The program's name, in its messages.
const NAME: &str = "hooks_echo_server";

/// A std listener is already green through the hooks: its blocking `accept` parks.
fn green_listener(listener: TcpListener) -> std::io::Result<TcpListener> {
    Ok(listener)
}

include!("support/echo_server.rs");
