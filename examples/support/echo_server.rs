// The echo server shared by `examples/echo_server.rs` (greenweave::net) and
// `examples/hooks_echo_server.rs` (std::net through the hooks), included by both so that the
// benchmark that compares them (benches/hooks_echo.sh) runs the very same server code. The
// including file brings into scope: `NAME` (the program's name, for its messages),
// `TcpListener` and `TcpStream` (with `bind`, `accept`, `set_nodelay`, `Read`/`Write` on `&`),
// and `sleep`; and the std items this uses (`Cell`, `ErrorKind`, `Read`, `Write`,
// `SocketAddr`, `ExitCode`, `Rc`, `Duration`) and `raise_fd_limit`.

const OPTIONS: &str = "[--addr HOST:PORT] [--max-connections N]

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
                println!("usage: {NAME} {OPTIONS}");
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
            eprintln!("{NAME}: {message}\nusage: {NAME} {OPTIONS}");
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
            eprintln!("{NAME}: cannot listen on {}: {error}", options.addr);
            return ExitCode::FAILURE;
        }
    };
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    println!("{NAME}: listening on {addr} (open-file limit {fd_limit})");
    match options.max_connections {
        Some(max) => println!("{NAME}: will exit after serving {max} connections"),
        None => println!("{NAME}: serving until interrupted (Ctrl-C)"),
    }

    let open = Rc::new(Cell::new(0_u64));
    let echoed = Rc::new(Cell::new(0_u64));
    let mut accepted = 0_u64;
    // Handles are kept only when we are going to wait for the connections to end.
    let mut handlers: Vec<greenweave::thread::JoinHandle<()>> = Vec::new();
    while options.max_connections.is_none_or(|max| accepted < max) {
        let (stream, peer) = match listener.accept() {
            Ok(connection) => connection,
            // Out of file descriptors, or a client gone before we accepted it: report, let
            // the other connections make progress, and go on.
            Err(error) => {
                eprintln!("{NAME}: accept failed: {error}");
                sleep(Duration::from_millis(10));
                continue;
            }
        };
        accepted += 1;
        let id = accepted;
        open.set(open.get() + 1);
        println!(
            "{NAME}: connection {id} from {peer} ({} open)",
            open.get()
        );
        let (open, echoed) = (open.clone(), echoed.clone());
        let handler = greenweave::spawn(move || {
            let bytes = echo(&stream, peer);
            open.set(open.get() - 1);
            echoed.set(echoed.get() + bytes);
            println!(
                "{NAME}: connection {id} closed after {bytes} bytes ({} open)",
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
        "{NAME}: served {accepted} connections, echoed {} bytes; exiting",
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
