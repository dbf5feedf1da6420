//! An echo server holding idle keep-alive connections after one deep request each: memory per
//! connection right after the requests and once the long-park sweep has released the deep
//! stack pages (issue 32, item 3), or, with `--compact`, once the sweep has compacted the
//! parked handlers (issue 32, item 5), in user space and, apart, the kernel's socket memory.
//!
//! ```sh
//! cargo run --release --example idle_connections                   # 10,000 connections
//! cargo run --release --example idle_connections -- --count 1000
//! cargo run --release --example idle_connections -- --quick         # 100, for CI
//! cargo run --release --example idle_connections -- --compact       # compaction on
//! cargo run --release --example idle_connections -- --compact --quick
//! ```
//!
//! The server runs one green thread per connection on one worker. Its clients run on a plain
//! OS thread of the same process (their user-space memory is a `TcpStream`, one fd, each, and
//! the thread's stack), or in a child process (this program with `--client`) when both ends
//! of every connection do not fit under the open-file limit: each connection sends one request, whose handler goes 128 KiB deep (a
//! TLS handshake, a JSON document) before it answers, then stays open and idle. The server
//! reads `/proc/self/status` (user space: `RssAnon`, and the page tables, `VmPTE`) before the
//! connections, after every answer, and after the sweep (threshold 5 s here, so the first
//! reading comes before it; the default is 1 s), and the kernel's side at the same moments:
//! `/proc/net/sockstat`'s TCP `mem` (pages of socket buffers) and, where readable (root),
//! `/proc/slabinfo` (the socket objects), both for the whole machine: both ends of each
//! loopback connection, and anything else running.
//!
//! `--compact` builds the server's runtime with `Builder::compact_parked_stacks` (same
//! threshold): the sweep then compacts each parked handler (its live frames, about 1.3 KiB
//! here, copied to the heap, its whole stack given back) instead of releasing the pages below
//! its stack pointer, so there is no separate release reading; the third reading comes once
//! every connection's green thread is compacted (compactions less restorations reach the
//! connection count; the example gives up with an error if that count stands still for
//! `STALL_LIMIT`), and adds the frames kept on the heap (`compacted_stack_bytes`). Run without
//! `--compact` for the release figures to compare with.
//!
//! Before the connections close, every client sends a second, shallow request and checks its
//! echo: the released (or compacted, then restored) handlers still answer.

use std::cell::Cell;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use greenweave::net::{TcpListener, TcpStream};

#[path = "support/fd_limit.rs"]
mod fd_limit;

const DEFAULT_COUNT: usize = 10_000;
const DEEP_BYTES: usize = 128 * 1024;
const RELEASE_AFTER: Duration = Duration::from_secs(5);

/// With `--compact`: how long the count of compacted green threads may stand still before the
/// example gives up.
const STALL_LIMIT: Duration = Duration::from_secs(30);

/// The first request on each connection: its handler goes [`DEEP_BYTES`] deep.
const DEEP_REQUEST: u8 = b'D';
/// The second, before the connection closes: answered without going deep.
const SHALLOW_REQUEST: u8 = b's';

const USAGE: &str = "usage: idle_connections [--count N | --quick] [--compact]

  --count N   connections (default 10000)
  --quick     100 connections, release threshold 1 s (for CI)
  --compact   compact the parked handlers instead of releasing their deep pages";

/// What the server measures: how many connections, after how long parked their stacks are
/// released (or compacted), and whether they are compacted.
struct Settings {
    count: usize,
    release_after: Duration,
    compact: bool,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, addr, count] = args.as_slice()
        && flag == "--client"
    {
        return client_process(addr, count);
    }
    match parse(&args) {
        Some(settings) => server(settings),
        None => usage(),
    }
}

fn parse(args: &[String]) -> Option<Settings> {
    let mut settings = Settings {
        count: DEFAULT_COUNT,
        release_after: RELEASE_AFTER,
        compact: false,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => {
                settings.count = 100;
                settings.release_after = Duration::from_secs(1);
            }
            "--count" => match args.next()?.replace('_', "").parse() {
                Ok(count) if count > 0 => settings.count = count,
                _ => return None,
            },
            "--compact" => settings.compact = true,
            _ => return None,
        }
    }
    Some(settings)
}

fn usage() -> ExitCode {
    eprintln!("{USAGE}");
    ExitCode::from(2)
}

/// The clients: `count` connections to `addr`, one deep request and its answer each; says so
/// on `connected`, then holds them open until `stop` says (or its sender goes); then sends a
/// second, shallow request on each and checks its echo before closing them all.
fn client(
    addr: std::net::SocketAddr,
    count: usize,
    connected: impl FnOnce(),
    stop: impl FnOnce(),
) -> Result<(), String> {
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        echo(&mut stream, DEEP_REQUEST).map_err(|error| format!("first request: {error}"))?;
        streams.push(stream);
    }
    connected();
    stop();
    for (number, stream) in streams.iter_mut().enumerate() {
        echo(stream, SHALLOW_REQUEST).map_err(|error| {
            format!("connection {number} of {count}, second request after the idle time: {error}")
        })?;
    }
    Ok(())
}

/// Sends `request` on `stream` and checks that the same byte comes back.
fn echo(stream: &mut std::net::TcpStream, request: u8) -> Result<(), String> {
    stream
        .write_all(&[request])
        .map_err(|error| format!("sending: {error}"))?;
    let mut answer = [0u8; 1];
    stream
        .read_exact(&mut answer)
        .map_err(|error| format!("reading the echo: {error}"))?;
    if answer[0] != request {
        return Err(format!(
            "sent {:?}, echoed {:?}",
            request as char, answer[0] as char
        ));
    }
    Ok(())
}

/// `--client ADDR COUNT`: [`client`] in a process of its own (for more connections than one
/// process may have files open for both ends): says `connected` on stdout, then holds the
/// connections until stdin closes.
fn client_process(addr: &str, count: &str) -> ExitCode {
    fd_limit::raise_fd_limit();
    let (Ok(addr), Ok(count)) = (addr.parse(), count.parse()) else {
        return usage();
    };
    let checked = client(
        addr,
        count,
        || println!("connected"),
        || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        },
    );
    match checked {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("idle_connections --client: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Where the clients run: a thread of this process, or (when both ends of every connection
/// would not fit under the open-file limit) a child process.
enum Clients {
    Thread(
        std::thread::JoinHandle<Result<(), String>>,
        std::sync::mpsc::Sender<()>,
    ),
    Process(std::process::Child),
}

impl Clients {
    /// Starts `count` clients of `addr` and returns once they are connected (parking the
    /// calling green thread).
    fn start(addr: std::net::SocketAddr, count: usize, in_process: bool) -> Clients {
        if in_process {
            let (connected, connections_made) = greenweave::sync::shared::channel();
            let (stop, stopped) = std::sync::mpsc::channel::<()>();
            let thread = std::thread::spawn(move || {
                client(
                    addr,
                    count,
                    || connected.send(()).expect("the server waits"),
                    || {
                        let _ = stopped.recv();
                    },
                )
            });
            connections_made.recv().expect("the clients connected");
            return Clients::Thread(thread, stop);
        }
        let mut child =
            std::process::Command::new(std::env::current_exe().expect("this program's path"))
                .args(["--client", &addr.to_string(), &count.to_string()])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start the clients' process");
        let stdout = child.stdout.take().expect("piped");
        // Reading the child's line blocks: off the worker.
        let line = greenweave::unblock(move || {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
                .map(|_| line)
        });
        assert_eq!(line.expect("the clients' line").trim(), "connected");
        Clients::Process(child)
    }

    /// Has every client send its second request and check the echo, then close its
    /// connection; says which failed.
    fn stop(self) -> Result<(), String> {
        match self {
            Clients::Thread(thread, stop) => {
                drop(stop);
                greenweave::unblock(move || thread.join()).expect("the clients' thread")
            }
            Clients::Process(mut child) => {
                drop(child.stdin.take());
                match greenweave::unblock(move || child.wait()) {
                    Ok(status) if status.success() => Ok(()),
                    Ok(status) => Err(format!(
                        "the clients' process failed ({status}); its stderr says why"
                    )),
                    Err(error) => Err(format!("waiting for the clients' process: {error}")),
                }
            }
        }
    }
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

/// One connection: each request byte is echoed, a [`DEEP_REQUEST`] after a deep call; then it
/// waits (parked) for the next.
fn serve(mut stream: TcpStream, answered: Rc<Cell<usize>>) {
    let mut request = [0u8; 1];
    while let Ok(1) = stream.read(&mut request) {
        if request[0] == DEEP_REQUEST {
            go_deep(DEEP_BYTES);
        }
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

/// Makes room for `fds` open files: the soft limit raised to the hard one, and both raised
/// further if that is short (which needs privilege); says what to do if it cannot.
fn make_room_for(fds: u64) -> Result<(), String> {
    if fd_limit::raise_fd_limit() >= fds {
        return Ok(());
    }
    let wanted = libc::rlimit {
        rlim_cur: fds,
        rlim_max: fds,
    };
    // SAFETY: `wanted` is a valid rlimit; raising the hard limit needs CAP_SYS_RESOURCE, and
    // without it the call fails and changes nothing.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } == 0 {
        return Ok(());
    }
    Err(format!(
        "idle_connections: {fds} open files are needed, more than the hard limit allows; \
         raise it (ulimit -Hn {fds}, as root) or use --count"
    ))
}

/// Green threads compacted now: compactions less restorations.
fn compacted_now() -> u64 {
    let metrics = greenweave::runtime::metrics();
    metrics.stack_compaction_count() - metrics.stack_restoration_count()
}

/// Sleeps until `count` green threads are compacted at once; gives up if that count stands
/// still for [`STALL_LIMIT`] once `release_after` has passed.
fn wait_for_compaction(count: usize, release_after: Duration) -> Result<(), String> {
    let mut last = (compacted_now(), Instant::now() + release_after);
    while compacted_now() < count as u64 {
        greenweave::thread::sleep(Duration::from_millis(10));
        let now = compacted_now();
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > STALL_LIMIT {
            return Err(format!(
                "only {now} of {count} idle connections' green threads are compacted, and none \
                 more for {} s after the {} s threshold; is a handler parked in a wait that is \
                 never compacted (see Builder::compact_parked_stacks)?",
                STALL_LIMIT.as_secs(),
                release_after.as_secs_f64()
            ));
        }
    }
    Ok(())
}

/// Prints the readings: `before` the connections, `deep` after their requests, and `idle`
/// once the sweep has released (or, if `compact`, compacted) every handler's stack,
/// `waited` after `deep`.
fn report(count: usize, readings: [Reading; 3], waited: Duration, compact: bool) {
    let [before, deep, idle] = readings;
    let per = |bytes: usize| bytes as f64 / count as f64;
    let after = if compact {
        "after compaction"
    } else {
        "after the sweep"
    };
    let metrics = greenweave::runtime::metrics();
    println!("{count} idle keep-alive connections, each after one request that went 128 KiB deep");
    if compact {
        println!(
            "compaction on: every handler's stack compacted instead of released (same threshold)"
        );
    }
    println!(
        "user space, RssAnon: {:.0} bytes per connection after the requests, {:.0} {after} \
         ({:.2} s later)",
        per(deep.anon.saturating_sub(before.anon)),
        per(idle.anon.saturating_sub(before.anon)),
        waited.as_secs_f64()
    );
    println!(
        "page tables, VmPTE: {:.0} bytes per connection after the requests, {:.0} after",
        per(deep.page_tables.saturating_sub(before.page_tables)),
        per(idle.page_tables.saturating_sub(before.page_tables))
    );
    println!(
        "kernel socket buffers (/proc/net/sockstat TCP mem, whole machine, both ends of each \
         loopback connection): {:.0} bytes per connection after the requests, {:.0} after",
        per(deep.tcp_pages.saturating_sub(before.tcp_pages) * 4096),
        per(idle.tcp_pages.saturating_sub(before.tcp_pages) * 4096)
    );
    if let (Some(was), Some(parked)) = (before.socket_slabs, deep.socket_slabs) {
        println!(
            "kernel socket objects ({} slabs, /proc/slabinfo, whole machine, both ends of \
             each loopback connection): {:.0} bytes per connection",
            SOCKET_SLABS.join(", "),
            per(parked.saturating_sub(was))
        );
    }
    if compact {
        println!(
            "compactions: {}, restorations: {}, frames on the heap (compacted_stack_bytes): \
             {:.0} bytes per connection (part of RssAnon above)",
            metrics.stack_compaction_count(),
            metrics.stack_restoration_count(),
            per(metrics.compacted_stack_bytes() as usize)
        );
    }
    println!(
        "releases: {}, bytes released: {}, long-parked stacks hold {:.0} bytes per connection",
        metrics.stack_release_count(),
        metrics.stack_bytes_released(),
        per(metrics.long_parked_stack_bytes() as usize)
    );
}

fn server(settings: Settings) -> ExitCode {
    let Settings {
        count,
        release_after,
        compact,
    } = settings;
    // Both ends in this process if they fit, else the clients in a child process.
    let in_process = make_room_for(2 * count as u64 + 256).is_ok();
    if let Err(message) = make_room_for(count as u64 + 256) {
        eprintln!("{message}");
        return ExitCode::from(2);
    }
    let mut builder = greenweave::Runtime::builder().stack_release(Some(release_after));
    if compact {
        // SAFETY: no green thread of this runtime lends its stack to another OS thread: the
        // clients' thread and the `unblock` helpers are given only owned values (an address,
        // a count, channel ends, the child's pipe and handle).
        builder = unsafe { builder.compact_parked_stacks() };
    }
    let runtime = builder.build().expect("runtime");
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
        let clients = Clients::start(addr, count, in_process);
        acceptor.join().expect("acceptor");
        assert_eq!(answered.get(), count);
        let deep = read_memory();
        let waited = Instant::now();
        if compact {
            if let Err(message) = wait_for_compaction(count, release_after) {
                eprintln!("idle_connections: {message}");
                return ExitCode::FAILURE;
            }
        } else {
            while greenweave::runtime::metrics().stack_release_count() < count as u64 {
                greenweave::thread::sleep(Duration::from_millis(10));
            }
        }
        let idle = read_memory();
        report(count, [before, deep, idle], waited.elapsed(), compact);
        let restored_before = greenweave::runtime::metrics().stack_restoration_count();
        if let Err(message) = clients.stop() {
            eprintln!("idle_connections: {message}");
            return ExitCode::FAILURE;
        }
        if compact {
            let restored =
                greenweave::runtime::metrics().stack_restoration_count() - restored_before;
            if restored < count as u64 {
                eprintln!(
                    "idle_connections: the {count} connections answered their second request, \
                     but only {restored} compacted green threads were restored meanwhile"
                );
                return ExitCode::FAILURE;
            }
            println!(
                "after compaction every connection echoed a second request ({restored} \
                 restorations)"
            );
        }
        ExitCode::SUCCESS
    })
}
