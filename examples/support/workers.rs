//! Servers on every worker, for the examples that take `--workers N --pin CPU-LIST`
//! (`echo_server`, `hooks_echo_server`, `http_server`) and their test. Included with
//! `#[path]`; not an example itself.
//!
//! A worker is one of the runtime's workers (`Runtime::builder().workers(n)`: an OS thread with
//! its own scheduler, optionally pinned to one CPU) with its own listening socket: every
//! worker's socket is bound to the same address with `SO_REUSEPORT`, so the kernel spreads
//! incoming connections over the workers (by a hash of the connection's addresses) and a
//! connection's green thread lives and dies on the worker that accepted it. No work moves
//! between workers. This module owns making those sockets and starting the workers on them; it
//! serves nothing itself. CPU lists are `support/cpus.rs`'s.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

/// The queue of connections not accepted yet: as long as Linux allows by default
/// (`net.core.somaxconn`, which caps it), as `greenweave::net::TcpListener::bind` asks.
const BACKLOG: libc::c_int = 4096;

/// Makes `count` listening sockets all bound to `addr` with `SO_REUSEPORT` (blocking, as std's
/// `bind` makes them; `greenweave::net::TcpListener::from_std` makes one green). With port 0,
/// the first gets an ephemeral port and the others bind to that one.
///
/// # Errors
/// Those of `socket(2)`, `setsockopt(2)`, `bind(2)` and `listen(2)`, with the address.
pub fn reuse_port_listeners(
    addr: SocketAddr,
    count: usize,
) -> io::Result<Vec<std::net::TcpListener>> {
    let mut listeners = Vec::with_capacity(count);
    let mut addr = addr;
    for _ in 0..count {
        let listener = reuse_port_listener(addr).map_err(|error| {
            io::Error::new(error.kind(), format!("cannot listen on {addr}: {error}"))
        })?;
        addr = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

fn reuse_port_listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket(2) takes no pointers; a negative result is an error, checked below.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    for option in [libc::SO_REUSEADDR, libc::SO_REUSEPORT] {
        let on: libc::c_int = 1;
        // SAFETY: `on` is a live c_int and the length passed is its size.
        let result = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&raw const on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if result != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: all zeroes is a valid sockaddr_storage (family AF_UNSPEC), which is large and
    // aligned enough for either address family written into it below.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let length = match addr {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: `storage` holds a sockaddr of the family and `length` written above.
    let bound = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            (&raw const storage).cast(),
            length as libc::socklen_t,
        )
    };
    if bound != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: listen(2) takes no pointers.
    if unsafe { libc::listen(socket.as_raw_fd(), BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(std::net::TcpListener::from(socket))
}

/// Runs `serve(worker, listener)` on every worker of a runtime with one worker per listener
/// (`Runtime::builder().workers(n)`, worker i pinned to `cpus[i % cpus.len()]` when `cpus` is
/// not empty), each worker with its own listener, and returns what each returned, in worker
/// order, once all have. A panic in `serve` is raised again from here (the runtime's rule).
///
/// # Errors
/// Those of building the runtime: a CPU this process may not run on, for one.
pub fn run_workers<T, F>(
    listeners: Vec<std::net::TcpListener>,
    cpus: &[usize],
    serve: F,
) -> io::Result<Vec<T>>
where
    T: Send,
    F: Fn(usize, std::net::TcpListener) -> T + Sync,
{
    let workers = listeners.len();
    let mut builder = greenweave::Runtime::builder().workers(workers);
    if !cpus.is_empty() {
        builder = builder.pin_workers((0..workers).map(|worker| cpus[worker % cpus.len()]));
    }
    let runtime = builder.build()?;
    // Each worker takes its own listener out, once.
    let listeners: Vec<Mutex<Option<std::net::TcpListener>>> = listeners
        .into_iter()
        .map(|listener| Mutex::new(Some(listener)))
        .collect();
    Ok(runtime.run_on_every_worker(|worker| {
        let listener = listeners[worker]
            .lock()
            .expect("no worker panics while taking its listener")
            .take()
            .expect("every worker runs once");
        serve(worker, listener)
    }))
}
