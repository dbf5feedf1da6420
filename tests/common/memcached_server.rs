//! A real `memcached` (Debian's package) for a test, on a free loopback port, UDP off; stopped
//! when the guard drops, so a failing test stops it too. The pattern of `redis_server.rs`.
//!
//! Started from a plain OS thread (outside `greenweave::run`), where every hooked libc call is
//! libc's. Under qemu-user the test binary is aarch64 and `memcached` the host's x86_64 binary:
//! the host kernel runs it, and the two talk over loopback.

use std::env;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long the server may take to answer `version` after it was started (it takes
/// milliseconds; the bound only turns a server that never comes up into a failure instead of a
/// hang).
const READY_LIMIT: Duration = Duration::from_secs(30);

/// How many ports are tried: the port is chosen by binding port 0 and closing the listener, so
/// another process may take it before the server binds it.
const PORT_TRIES: usize = 3;

/// A running `memcached`, killed (and waited for) on drop.
pub struct MemcachedServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl MemcachedServer {
    /// Starts a server and waits until it answers `version`. Returns `None`, after saying so
    /// loudly on stderr, if `memcached` is not installed and this is not CI; on CI (the `CI`
    /// environment variable is set) a missing server fails the test.
    pub fn start() -> Option<MemcachedServer> {
        if !on_path("memcached") {
            let message = "memcached is not on PATH: the real-memcached test cannot run. \
                           Install Debian's package (`apt-get install -y memcached`; .ci/run \
                           does)";
            if env::var_os("CI").is_some() {
                panic!("{message}");
            }
            eprintln!("\n!!!!! SKIPPED: {message} !!!!!\n");
            return None;
        }
        let mut failures = Vec::new();
        for _ in 0..PORT_TRIES {
            match MemcachedServer::start_on(free_port()) {
                Ok(server) => return Some(server),
                Err(failure) => failures.push(failure),
            }
        }
        panic!("memcached did not come up:\n{}", failures.join("\n---\n"));
    }

    /// The `memcache://` URL of the server (the `memcache` crate's scheme; its binary protocol
    /// unless `?protocol=ascii` is added).
    pub fn url(&self) -> String {
        format!("memcache://127.0.0.1:{}", self.port)
    }

    fn start_on(port: u16) -> Result<MemcachedServer, String> {
        let log = env::temp_dir().join(format!(
            "greenweave-memcached-{}-{port}.log",
            std::process::id()
        ));
        let log_file =
            File::create(&log).map_err(|error| format!("could not create {log:?}: {error}"))?;
        let mut command = Command::new("memcached");
        command
            .args(["--port", &port.to_string()])
            .args(["--listen", "127.0.0.1"])
            .args(["--udp-port", "0"])
            .args(["--memory-limit", "16"])
            .arg("-v");
        // memcached refuses to run as root unless told which user to be.
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            command.args(["--user", "root"]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|error| format!("could not start memcached: {error}"))?;
        // On the error paths below `server` drops, which kills the child.
        let mut server = MemcachedServer { child, port, log };
        let begun = Instant::now();
        loop {
            if let Some(status) = server.child.try_wait().expect("waiting for memcached") {
                return Err(format!(
                    "memcached on port {port} exited with {status}; its log:\n{}",
                    fs::read_to_string(&server.log).unwrap_or_default()
                ));
            }
            if answers_version(port) {
                return Ok(server);
            }
            if begun.elapsed() > READY_LIMIT {
                return Err(format!(
                    "memcached on port {port} did not answer `version` within {READY_LIMIT:?}; \
                     its log:\n{}",
                    fs::read_to_string(&server.log).unwrap_or_default()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for MemcachedServer {
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

/// Whether a server on `port` answers the ASCII `version` command with `VERSION <x>`.
fn answers_version(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut reply = [0; 8];
    stream.write_all(b"version\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"VERSION "
}
