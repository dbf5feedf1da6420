//! A real `memcached` (Debian's package) for a test, on a free loopback port, UDP off; stopped
//! when the guard drops. The test file includes `server_process.rs` beside it.

use std::path::Path;
use std::process::Command;

use super::server_process::{Program, ServerProcess};

/// A running `memcached`, killed (and waited for) on drop.
pub struct MemcachedServer {
    server: ServerProcess,
}

impl MemcachedServer {
    /// Starts a server and waits until it answers `version`. Returns `None`, after saying so
    /// loudly on stderr, if `memcached` is not installed and this is not CI; on CI (the `CI`
    /// environment variable is set) a missing server fails the test.
    pub fn start() -> Option<MemcachedServer> {
        let command = |port: u16, _log: &Path| {
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
            command
        };
        let program = Program {
            name: "memcached",
            package: "memcached",
            command: &command,
            writes_own_log: false,
            probe: b"version\r\n",
            answer: b"VERSION ",
        };
        ServerProcess::start(&program).map(|server| MemcachedServer { server })
    }

    /// The `memcache://` URL of the server (the `memcache` crate's scheme; its binary protocol
    /// unless `?protocol=ascii` is added).
    pub fn url(&self) -> String {
        format!("memcache://127.0.0.1:{}", self.server.port())
    }
}
