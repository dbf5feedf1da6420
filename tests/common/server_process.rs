//! A real server program (one of Debian's packages) for a test: started on a free loopback port,
//! waited for until it answers a probe, killed and waited for when the guard drops, so a
//! failing test stops it too. What `redis_server.rs` and `memcached_server.rs` share.
//!
//! Started from a plain OS thread (outside `greenweave::run`), where every hooked libc call is
//! libc's. Under qemu-user the test binary is aarch64 and the server the host's x86_64 binary:
//! the host kernel runs it, and the two talk over loopback.
#![allow(dead_code)] // each server module uses its own subset

use std::env;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a server may take to answer its probe after it was started (it takes
/// milliseconds; the bound only turns a server that never comes up into a failure instead of a
/// hang).
const READY_LIMIT: Duration = Duration::from_secs(30);

/// How many ports are tried: the port is chosen by binding port 0 and closing the listener, so
/// another process may take it before the server binds it.
const PORT_TRIES: usize = 3;

/// How to start one server program and tell that it is ready.
pub struct Program<'a> {
    /// The executable, looked up on `PATH`.
    pub name: &'a str,
    /// The Debian package that installs it, for the message when it is missing.
    pub package: &'a str,
    /// The command that starts it listening on 127.0.0.1:`port`, logging to `log` if it takes
    /// a log file (its stdout and stderr go to `log` otherwise).
    pub command: &'a dyn Fn(u16, &Path) -> Command,
    /// Whether the server writes its log itself (to the file its command names).
    pub writes_own_log: bool,
    /// What the readiness probe sends, and the first bytes of the answer it expects.
    pub probe: &'a [u8],
    pub answer: &'a [u8],
}

/// A running server, killed (and waited for) on drop.
pub struct ServerProcess {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl ServerProcess {
    /// Starts `program` and waits until it answers its probe. Returns `None`, after saying so
    /// loudly on stderr, if the program is not installed and this is not CI; on CI (the `CI`
    /// environment variable is set) a missing server fails the test.
    pub fn start(program: &Program) -> Option<ServerProcess> {
        if !on_path(program.name) {
            let message = format!(
                "{name} is not on PATH: the real-{name} test cannot run. Install Debian's \
                 package (`apt-get install -y {package}`; .ci/run does)",
                name = program.name,
                package = program.package,
            );
            if env::var_os("CI").is_some() {
                panic!("{message}");
            }
            eprintln!("\n!!!!! SKIPPED: {message} !!!!!\n");
            return None;
        }
        let mut failures = Vec::new();
        for _ in 0..PORT_TRIES {
            match ServerProcess::start_on(program, free_port()) {
                Ok(server) => return Some(server),
                Err(failure) => failures.push(failure),
            }
        }
        panic!(
            "{} did not come up:\n{}",
            program.name,
            failures.join("\n---\n")
        );
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn start_on(program: &Program, port: u16) -> Result<ServerProcess, String> {
        let name = program.name;
        let log = env::temp_dir().join(format!(
            "greenweave-{name}-{}-{port}.log",
            std::process::id()
        ));
        let mut command = (program.command)(port, &log);
        command.stdin(Stdio::null());
        if program.writes_own_log {
            command.stdout(Stdio::null()).stderr(Stdio::null());
        } else {
            let output =
                File::create(&log).map_err(|error| format!("could not create {log:?}: {error}"))?;
            let errors = output
                .try_clone()
                .map_err(|error| format!("could not share {log:?}: {error}"))?;
            command.stdout(output).stderr(errors);
        }
        let child = super::spawn_watch::spawn(&mut command)
            .map_err(|error| format!("could not start {name}: {error}"))?;
        // On the error paths below `server` drops, which kills the child.
        let mut server = ServerProcess { child, port, log };
        let begun = Instant::now();
        loop {
            if let Some(status) = server.child.try_wait().expect("waiting for the server") {
                return Err(format!(
                    "{name} on port {port} exited with {status}; its log:\n{}",
                    server.log_text()
                ));
            }
            if answers(port, program.probe, program.answer) {
                return Ok(server);
            }
            if begun.elapsed() > READY_LIMIT {
                return Err(format!(
                    "{name} on port {port} did not answer its probe within {READY_LIMIT:?}; \
                     its log:\n{}",
                    server.log_text()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_file(&self.log);
    }
}

/// Whether `program` is an executable file in one of `PATH`'s directories.
pub fn on_path(program: &str) -> bool {
    env::var_os("PATH").is_some_and(|path| {
        env::split_paths(&path).any(|directory| directory.join(program).is_file())
    })
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("binding a loopback port")
        .port()
}

/// Whether a server on `port` answers `probe` with a reply that starts with `answer`.
fn answers(port: u16, probe: &[u8], answer: &[u8]) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut reply = vec![0; answer.len()];
    stream.write_all(probe).is_ok() && stream.read_exact(&mut reply).is_ok() && reply == answer
}
