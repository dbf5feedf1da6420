// The echo server shared by `examples/echo_server.rs` (greenweave::net) and
// `examples/hooks_echo_server.rs` (std::net through the hooks), included by both so that the
// benchmark that compares them (benches/hooks_echo.sh) runs the very same server code. The
// including file brings into scope: `NAME` (the program's name, for its messages),
// `TcpListener` and `TcpStream` (with `accept`, `set_nodelay`, `Read`/`Write` on `&`),
// `green_listener` (a std listener made into that `TcpListener`), `sleep`, the modules
// `workers` and `cpus` (support/workers.rs, support/cpus.rs); and the std items this uses (`Cell`, `ErrorKind`, `Read`,
// `Write`, `SocketAddr`, `ToSocketAddrs`, `ExitCode`, `Rc`, `Duration`) and `raise_fd_limit`.

const OPTIONS: &str = "[--addr HOST:PORT] [--workers N] [--pin CPU-LIST] [--max-connections N]

  --addr HOST:PORT      where to listen (default 127.0.0.1:7000)
  --workers N           the runtime's workers (OS threads), each with its own
                        SO_REUSEPORT listener on that address (default 1)
  --pin CPU-LIST        pin worker i to the i-th CPU of the list, e.g. 0,1 or 0-3
                        (round robin when the list is shorter; default: not pinned)
  --max-connections N   serve N connections, wait for them to close, then exit; needs
                        --workers 1 when N > 0 (the kernel picks each connection's worker)
                        (default: serve forever; 0 binds, reports and exits)";

struct Options {
    addr: String,
    workers: usize,
    cpus: Vec<usize>,
    max_connections: Option<u64>,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        addr: "127.0.0.1:7000".to_owned(),
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
                options.workers = text
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("--workers: not a positive whole number: {text:?}"))?;
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
                println!("usage: {NAME} {OPTIONS}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    if options.workers > 1 && options.max_connections.is_some_and(|max| max > 0) {
        return Err(format!(
            "--max-connections {} needs --workers 1: with {} workers the kernel decides which \
             worker gets each connection",
            options.max_connections.unwrap_or(0),
            options.workers
        ));
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{NAME}: {message}\nusage: {NAME} {OPTIONS}");
            return ExitCode::from(2);
        }
    };
    let fd_limit = raise_fd_limit();
    let addr = match options.addr.to_socket_addrs().map(|mut addrs| addrs.next()) {
        Ok(Some(addr)) => addr,
        Ok(None) => {
            eprintln!("{NAME}: {} names no address", options.addr);
            return ExitCode::FAILURE;
        }
        Err(error) => {
            eprintln!("{NAME}: cannot resolve {}: {error}", options.addr);
            return ExitCode::FAILURE;
        }
    };
    let listeners = match workers::reuse_port_listeners(addr, options.workers) {
        Ok(listeners) => listeners,
        Err(error) => {
            eprintln!("{NAME}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let addr = listeners[0].local_addr().unwrap_or(addr);
    let pinning = if options.cpus.is_empty() {
        "not pinned".to_owned()
    } else {
        format!("pinned to CPUs {:?}", options.cpus)
    };
    println!(
        "{NAME}: listening on {addr} (open-file limit {fd_limit}) with {} worker(s), {pinning}",
        options.workers
    );
    match options.max_connections {
        Some(0) => {
            println!("{NAME}: --max-connections 0: exiting");
            return ExitCode::SUCCESS;
        }
        Some(max) => println!("{NAME}: will exit after serving {max} connections"),
        None => println!("{NAME}: serving until interrupted (Ctrl-C)"),
    }
    let max_connections = options.max_connections;
    let results = workers::run_workers(listeners, &options.cpus, move |worker, listener| {
        serve(worker, listener, max_connections)
    });
    let results = match results {
        Ok(results) => results,
        Err(error) => {
            eprintln!("{NAME}: cannot start the workers: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (mut accepted, mut echoed, mut failed) = (0, 0, false);
    for result in results {
        match result {
            Ok((worker_accepted, worker_echoed)) => {
                accepted += worker_accepted;
                echoed += worker_echoed;
            }
            Err(message) => {
                eprintln!("{NAME}: {message}");
                failed = true;
            }
        }
    }
    println!("{NAME}: served {accepted} connections, echoed {echoed} bytes; exiting");
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// One worker's accept loop: a green thread per connection. Returns the connections served and
/// the bytes echoed once `max_connections` connections have closed (never without it).
fn serve(
    worker: usize,
    listener: std::net::TcpListener,
    max_connections: Option<u64>,
) -> Result<(u64, u64), String> {
    let listener = green_listener(listener)
        .map_err(|error| format!("worker {worker}: cannot make its listener green: {error}"))?;
    let open = Rc::new(Cell::new(0_u64));
    let echoed = Rc::new(Cell::new(0_u64));
    let mut accepted = 0_u64;
    // Handles are kept only when we are going to wait for the connections to end.
    let mut handlers: Vec<greenweave::thread::JoinHandle<()>> = Vec::new();
    while max_connections.is_none_or(|max| accepted < max) {
        let (stream, peer) = match listener.accept() {
            Ok(connection) => connection,
            // Out of file descriptors, or a client gone before we accepted it: report, let
            // the other connections make progress, and go on.
            Err(error) => {
                eprintln!("{NAME}: worker {worker}: accept failed: {error}");
                sleep(Duration::from_millis(10));
                continue;
            }
        };
        accepted += 1;
        let id = accepted;
        open.set(open.get() + 1);
        println!(
            "{NAME}: worker {worker}: connection {id} from {peer} ({} open)",
            open.get()
        );
        let (open, echoed) = (open.clone(), echoed.clone());
        let handler = greenweave::spawn(move || {
            let bytes = echo(&stream, peer);
            open.set(open.get() - 1);
            echoed.set(echoed.get() + bytes);
            println!(
                "{NAME}: worker {worker}: connection {id} closed after {bytes} bytes ({} open)",
                open.get()
            );
        });
        if max_connections.is_some() {
            handlers.push(handler);
        }
    }
    for handler in handlers {
        handler.join().expect("a connection handler does not panic");
    }
    Ok((accepted, echoed.get()))
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
                eprintln!("{NAME}: reading from {peer}: {error}");
                return total;
            }
        };
        if let Err(error) = io.write_all(&buf[..n]) {
            if !matches!(
                error.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
            ) {
                eprintln!("{NAME}: writing to {peer}: {error}");
            }
            return total;
        }
        total += n as u64;
    }
}
