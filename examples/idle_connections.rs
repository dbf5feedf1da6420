//! An echo server holding idle keep-alive connections after one deep request each: memory per
//! connection right after the requests and once the long-park sweep has released the deep
//! stack pages (issue 32, item 3), in user space and, apart, the kernel's socket memory.
//!
//! ```sh
//! cargo run --release --example idle_connections                   # 10,000 connections
//! cargo run --release --example idle_connections -- --count 1000
//! ```
//!
//! The server (this process) runs one green thread per connection on one worker. Its clients
//! are a child process (this program again, `--client`), so that their memory is not the
//! server's: each connection sends one request, whose handler goes 128 KiB deep (a TLS
//! handshake, a JSON document) before it answers, then stays open and idle. The server reads
//! `/proc/self/status` (user space: `RssAnon`, and the page tables, `VmPTE`) before the
//! connections, after every answer, and after the sweep (threshold 5 s here, so the first
//! reading comes before it; the default is 1 s), and `/proc/net/sockstat`'s TCP `mem` (pages
//! of socket buffers, for the whole machine: both ends of each loopback connection, and
//! anything else running) at the same moments.

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use greenweave::net::{TcpListener, TcpStream};

#[path = "support/fd_limit.rs"]
mod fd_limit;

const DEFAULT_COUNT: usize = 10_000;
const DEEP_BYTES: usize = 128 * 1024;
const RELEASE_AFTER: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    fd_limit::raise_fd_limit();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, addr, count] if flag == "--client" => client(addr, count.parse().unwrap()),
        [] => server(DEFAULT_COUNT),
        [flag, count] if flag == "--count" => match count.replace('_', "").parse() {
            Ok(count) if count > 0 => server(count),
            _ => usage(),
        },
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: idle_connections [--count N]   (N connections, default 10000)");
    ExitCode::from(2)
}

/// The clients: `count` connections to `addr`, one request and its answer each, then idle
/// until stdin closes.
fn client(addr: &str, count: usize) -> ExitCode {
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        stream.write_all(b"D").expect("request");
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer).expect("answer");
        assert_eq!(&answer, b"D");
        streams.push(stream);
    }
    println!("connected");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    ExitCode::SUCCESS
}

/// Touches `bytes` of stack below the caller, 4 KiB at a time.
#[inline(never)]
fn go_deep(bytes: usize) {
    let mut frame = [0u8; 4096];
    std::hint::black_box(&mut frame);
    if bytes > frame.len() {
        go_deep(bytes - frame.len());
    }
}

/// One connection: each request byte is answered after a deep call; then it waits (parked)
/// for the next.
fn serve(mut stream: TcpStream, answered: Rc<Cell<usize>>) {
    let mut request = [0u8; 1];
    while let Ok(1) = stream.read(&mut request) {
        go_deep(DEEP_BYTES);
        if stream.write_all(&request).is_err() {
            return;
        }
        answered.set(answered.get() + 1);
    }
}

/// The kernel's slab caches a TCP connection's socket uses (its `struct sock`, socket inode,
/// `struct file`, dentry, and the server's epoll item), from `/proc/slabinfo` (root only).
const SOCKET_SLABS: [&str; 5] = ["TCP", "sock_inode_cache", "filp", "dentry", "eventpoll_epi"];

#[derive(Clone, Copy)]
struct Reading {
    anon: usize,
    page_tables: usize,
    tcp_pages: usize,
    /// Bytes of objects in use in [`SOCKET_SLABS`], for the whole machine; `None` without
    /// permission to read `/proc/slabinfo`.
    socket_slabs: Option<usize>,
}

fn socket_slab_bytes() -> Option<usize> {
    let slabinfo = std::fs::read_to_string("/proc/slabinfo").ok()?;
    Some(
        slabinfo
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                let name = words.next()?;
                if !SOCKET_SLABS.contains(&name) {
                    return None;
                }
                let active: usize = words.next()?.parse().ok()?;
                let _total = words.next()?;
                let size: usize = words.next()?.parse().ok()?;
                Some(active * size)
            })
            .sum(),
    )
}

fn read_memory() -> Reading {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .map_or(0, |kib: usize| kib * 1024)
    };
    let sockstat = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    let tcp_pages = sockstat
        .lines()
        .find(|line| line.starts_with("TCP:"))
        .and_then(|line| {
            line.split_whitespace()
                .skip_while(|word| *word != "mem")
                .nth(1)
        })
        .and_then(|pages| pages.parse().ok())
        .unwrap_or(0);
    Reading {
        anon: field("RssAnon:"),
        page_tables: field("VmPTE:"),
        tcp_pages,
        socket_slabs: socket_slab_bytes(),
    }
}

fn server(count: usize) -> ExitCode {
    let runtime = greenweave::Runtime::builder()
        .stack_release(Some(RELEASE_AFTER))
        .build()
        .expect("runtime");
    runtime.run(move || {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("local address");
        let before = read_memory();
        let answered = Rc::new(Cell::new(0usize));
        let accepted = answered.clone();
        let acceptor = greenweave::spawn(move || {
            for _ in 0..count {
                let (stream, _) = listener.accept().expect("accept");
                let answered = accepted.clone();
                greenweave::spawn(move || serve(stream, answered));
            }
        });
        let exe = std::env::current_exe().expect("this program's path");
        let mut clients = Command::new(exe)
            .args(["--client", &addr.to_string(), &count.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the clients");
        let stdout = clients.stdout.take().expect("piped");
        // Reading the child's "connected" line blocks: off the worker.
        let connected = greenweave::unblock(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        });
        assert_eq!(connected.expect("the clients' line").trim(), "connected");
        acceptor.join().expect("acceptor");
        assert_eq!(answered.get(), count);
        let deep = read_memory();
        let waited = Instant::now();
        while greenweave::runtime::metrics().stack_release_count() < count as u64 {
            greenweave::thread::sleep(Duration::from_millis(10));
        }
        let released = read_memory();
        let per = |bytes: usize| bytes as f64 / count as f64;
        println!(
            "{count} idle keep-alive connections, each after one request that went 128 KiB deep"
        );
        println!(
            "user space, RssAnon: {:.0} bytes per connection after the requests, {:.0} after the \
             sweep ({:.2} s later)",
            per(deep.anon.saturating_sub(before.anon)),
            per(released.anon.saturating_sub(before.anon)),
            waited.elapsed().as_secs_f64()
        );
        println!(
            "page tables, VmPTE: {:.0} bytes per connection after the requests, {:.0} after",
            per(deep.page_tables.saturating_sub(before.page_tables)),
            per(released.page_tables.saturating_sub(before.page_tables))
        );
        println!(
            "kernel socket buffers (/proc/net/sockstat TCP mem, whole machine, both ends of each \
             loopback connection): {:.0} bytes per connection after the requests, {:.0} after",
            per(deep.tcp_pages.saturating_sub(before.tcp_pages) * 4096),
            per(released.tcp_pages.saturating_sub(before.tcp_pages) * 4096)
        );
        if let (Some(was), Some(parked)) = (before.socket_slabs, deep.socket_slabs) {
            println!(
                "kernel socket objects ({} slabs, /proc/slabinfo, whole machine, both ends of \
                 each loopback connection): {:.0} bytes per connection",
                SOCKET_SLABS.join(", "),
                per(parked.saturating_sub(was))
            );
        }
        let metrics = greenweave::runtime::metrics();
        println!(
            "releases: {}, bytes released: {}, long-parked stacks hold {:.0} bytes per connection",
            metrics.stack_release_count(),
            metrics.stack_bytes_released(),
            per(metrics.long_parked_stack_bytes() as usize)
        );
        drop(clients.stdin.take());
        let _ = greenweave::unblock(move || clients.wait());
    });
    ExitCode::SUCCESS
}
