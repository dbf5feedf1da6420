//! A real `redis-server` (Debian's package) for a test, on a free loopback port, with nothing
//! saved to disk; stopped when the guard drops. The test file includes `server_process.rs`
//! beside it.

use std::env;
use std::path::Path;
use std::process::Command;

use super::server_process::{Program, ServerProcess};

/// A running `redis-server`, killed (and waited for) on drop.
pub struct RedisServer {
    server: ServerProcess,
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`. Returns `None`, after saying so
    /// loudly on stderr, if `redis-server` is not installed and this is not CI; on CI (the `CI`
    /// environment variable is set) a missing server fails the test.
    pub fn start() -> Option<RedisServer> {
        let command = |port: u16, log: &Path| {
            let mut command = Command::new("redis-server");
            command
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1"])
                .args(["--save", ""])
                .args(["--appendonly", "no"])
                .args(["--daemonize", "no"])
                .args(["--dir", &env::temp_dir().to_string_lossy()])
                .args(["--logfile", &log.to_string_lossy()]);
            command
        };
        let program = Program {
            name: "redis-server",
            package: "redis-server",
            command: &command,
            writes_own_log: true,
            probe: b"PING\r\n",
            answer: b"+PONG\r\n",
        };
        ServerProcess::start(&program).map(|server| RedisServer { server })
    }

    /// The `redis://` URL of the server.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.server.port())
    }
}
