//! A real `redis-server` (Debian's package) for a test, on a free loopback port, with nothing
//! saved to disk; stopped when the guard drops, so a failing test stops it too.
//!
//! Started from a plain OS thread (outside `greenweave::run`), where every hooked libc call is
//! libc's. Under qemu-user the test binary is aarch64 and `redis-server` the host's x86_64
//! binary: the host kernel runs it, and the two talk over loopback.

use std::env;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long the server may take to answer `PING` after it was started (it takes milliseconds;
/// the bound only turns a server that never comes up into a failure instead of a hang).
const READY_LIMIT: Duration = Duration::from_secs(30);

/// How many ports are tried: the port is chosen by binding port 0 and closing the listener, so
/// another process may take it before the server binds it.
const PORT_TRIES: usize = 3;

/// A running `redis-server`, killed (and waited for) on drop.
pub struct RedisServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`. Returns `None`, after saying so
    /// loudly on stderr, if `redis-server` is not installed and this is not CI; on CI (the `CI`
    /// environment variable is set) a missing server fails the test.
    pub fn start() -> Option<RedisServer> {
        if !on_path("redis-server") {
            let message = "redis-server is not on PATH: the real-redis test cannot run. \
                           Install Debian's package (`apt-get install -y redis-server`; .ci/run \
                           does)";
            if env::var_os("CI").is_some() {
                panic!("{message}");
            }
            eprintln!("\n!!!!! SKIPPED: {message} !!!!!\n");
            return None;
        }
        let mut failures = Vec::new();
        for _ in 0..PORT_TRIES {
            match RedisServer::start_on(free_port()) {
                Ok(server) => return Some(server),
                Err(failure) => failures.push(failure),
            }
        }
        panic!(
            "redis-server did not come up:\n{}",
            failures.join("\n---\n")
        );
    }

    /// The `redis://` URL of the server.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn start_on(port: u16) -> Result<RedisServer, String> {
        let log = env::temp_dir().join(format!(
            "greenweave-redis-{}-{port}.log",
            std::process::id()
        ));
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--dir", &env::temp_dir().to_string_lossy()])
            .args(["--logfile", &log.to_string_lossy()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| format!("could not start redis-server: {error}"))?;
        // On the error paths below `server` drops, which kills the child.
        let mut server = RedisServer { child, port, log };
        let begun = Instant::now();
        loop {
            if let Some(status) = server.child.try_wait().expect("waiting for redis-server") {
                return Err(format!(
                    "redis-server on port {port} exited with {status}; its log:\n{}",
                    fs::read_to_string(&server.log).unwrap_or_default()
                ));
            }
            if answers_ping(port) {
                return Ok(server);
            }
            if begun.elapsed() > READY_LIMIT {
                return Err(format!(
                    "redis-server on port {port} did not answer PING within {READY_LIMIT:?}; \
                     its log:\n{}",
                    fs::read_to_string(&server.log).unwrap_or_default()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_file(&self.log);
    }
}

/// Whether `program` is an executable file in one of `PATH`'s directories.
fn on_path(program: &str) -> bool {
    env::var_os("PATH").is_some_and(|path| {
        env::split_paths(&path).any(|directory| directory.join(program).is_file())
    })
}

/// A loopback port nothing listens on right now.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("binding a loopback port")
        .port()
}

/// Whether a server on `port` answers an inline `PING` with `+PONG`.
fn answers_ping(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut reply = [0; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}
