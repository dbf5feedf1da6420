//! A real PostgreSQL server (Debian's `postgresql` package) for a test: a throwaway cluster
//! made with `initdb` in a temporary directory, trust authentication, listening on a free
//! loopback port with its Unix socket in that directory; stopped (`pg_ctl stop -m fast`) and
//! removed when the guard drops, so a failing test stops it too.
//!
//! PostgreSQL refuses to run as root: when the test runs as root, the cluster belongs to the
//! `postgres` user (which the package creates) and every server program runs as it.
//!
//! Started from a plain OS thread (outside `greenweave::run`), where every hooked libc call is
//! libc's. Under qemu-user the test binary is aarch64 and the server the host's x86_64 binary:
//! the host kernel runs it, and the two talk over loopback.

use std::env;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many ports are tried: the port is chosen by binding port 0 and closing the listener, so
/// another process may take it before the server binds it.
const PORT_TRIES: usize = 3;

/// How long `pg_ctl` waits for the server to accept connections, in seconds (it takes well
/// under one; the bound only turns a server that never comes up into a failure).
const READY_LIMIT_SECS: &str = "60";

/// A running PostgreSQL cluster, stopped and deleted on drop.
pub struct PostgresServer {
    bin: PathBuf,
    dir: PathBuf,
    user: Option<(u32, u32)>,
    port: u16,
}

impl PostgresServer {
    /// Makes a cluster and starts its server, which takes 50 connections at once. Returns
    /// `None`, after saying so loudly on stderr, if PostgreSQL is not installed and this is not
    /// CI; on CI (the `CI` environment variable is set) a missing server fails the test.
    pub fn start() -> Option<PostgresServer> {
        Self::start_with_max_connections(50)
    }

    /// As [`start`](Self::start), with a server that takes `max_connections` connections at
    /// once (each is a server process: a test asks for what it uses).
    pub fn start_with_max_connections(max_connections: usize) -> Option<PostgresServer> {
        let Some(bin) = server_bin() else {
            let message = "PostgreSQL's initdb and pg_ctl were not found (in \
                           /usr/lib/postgresql/*/bin or on PATH): the real-PostgreSQL test \
                           cannot run. Install Debian's package (`apt-get install -y \
                           postgresql`; .ci/run does)";
            if env::var_os("CI").is_some() {
                panic!("{message}");
            }
            eprintln!("\n!!!!! SKIPPED: {message} !!!!!\n");
            return None;
        };
        static CLUSTERS: AtomicUsize = AtomicUsize::new(0);
        let dir = env::temp_dir().join(format!(
            "greenweave-postgres-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).expect("creating the cluster's directory");
        let user = server_user();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .expect("giving the cluster's directory to the postgres user");
        }
        // From here on, a failure drops `server`, which stops and removes what was made.
        let mut server = PostgresServer {
            bin,
            dir,
            user,
            port: 0,
        };
        let data = server.data();
        let initdb = server.run(
            "initdb",
            &[
                "-D",
                &data,
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        if !initdb.status.success() {
            panic!("initdb failed:\n{}", describe(&initdb));
        }
        let mut failures = Vec::new();
        for _ in 0..PORT_TRIES {
            let port = free_port();
            let options = format!(
                "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={} \
                 -c fsync=off -c max_connections={max_connections}",
                server.dir.display()
            );
            let log = server.dir.join("server.log").display().to_string();
            let start = server.run(
                "pg_ctl",
                &[
                    "-D",
                    &data,
                    "-l",
                    &log,
                    "-o",
                    &options,
                    "-w",
                    "-t",
                    READY_LIMIT_SECS,
                    "start",
                ],
            );
            if start.status.success() {
                server.port = port;
                return Some(server);
            }
            failures.push(format!(
                "pg_ctl start on port {port}:\n{}\nits log:\n{}",
                describe(&start),
                fs::read_to_string(&log).unwrap_or_default()
            ));
        }
        panic!("PostgreSQL did not come up:\n{}", failures.join("\n---\n"));
    }

    /// The connection parameters of the server, as the `postgres` crate takes them.
    pub fn params(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// The server's URL, as `sqlx` takes it.
    #[allow(dead_code)] // only the binaries that use sqlx
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    /// Runs one of the server's programs (as the postgres user when we are root) to its end.
    fn run(&self, program: &str, args: &[&str]) -> Output {
        let mut command = Command::new(self.bin.join(program));
        command
            .args(args)
            .current_dir(&self.dir)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some((uid, gid)) = self.user {
            // std drops root's supplementary groups before it switches the user.
            command.uid(uid).gid(gid);
        }
        super::spawn_watch::spawn(&mut command)
            .and_then(|child| child.wait_with_output())
            .unwrap_or_else(|error| panic!("could not run {program}: {error}"))
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if self.dir.join("data").join("postmaster.pid").exists() {
            let data = self.data();
            let _ = self.run("pg_ctl", &["-D", &data, "stop", "-m", "fast", "-w"]);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The directory holding `initdb` and `pg_ctl`: Debian keeps them off PATH, in
/// `/usr/lib/postgresql/<version>/bin` (the newest version is taken); otherwise PATH's.
fn server_bin() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_both(bin))
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    env::var_os("PATH").and_then(|path| env::split_paths(&path).find(|dir| has_both(dir)))
}

/// The user and group to run the server as: the `postgres` user's when we are root (which
/// PostgreSQL refuses to run as), `None` (ourselves) otherwise.
fn server_user() -> Option<(u32, u32)> {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    // SAFETY: a NUL-terminated name; the result, if not null, points to libc's static entry,
    // read at once (the test starts its servers from one thread).
    let entry = unsafe { libc::getpwnam(c"postgres".as_ptr()) };
    assert!(
        !entry.is_null(),
        "the test runs as root, and PostgreSQL will not: it needs the `postgres` user, which \
         Debian's postgresql package creates"
    );
    // SAFETY: non-null, so a live passwd entry.
    let entry = unsafe { &*entry };
    Some((entry.pw_uid, entry.pw_gid))
}

/// A loopback port nothing listens on right now.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("binding a loopback port")
        .port()
}

fn describe(output: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
