//! Async crates from green threads: straight-line code that calls `async fn`s through
//! `greenweave::block_on`, which parks only the calling green thread while the future is
//! pending. With the `tokio` feature every worker has a tokio runtime, current in each of its
//! green threads, so tokio's own futures (and the crates built on them) work as written.
//!
//! What it does, all on one worker (one OS thread), over loopback only:
//! 1. 100 green threads each `block_on(tokio::time::sleep(20 ms))`: they sleep at once, so the
//!    whole takes about 20 ms, not 2 s.
//! 2. A `tokio::net` echo server runs as a tokio task (`tokio::spawn` from a green thread); 10
//!    green threads each connect with `tokio::net::TcpStream` and make 100 round trips, one
//!    `block_on` per call, and check every reply.
//! 3. Given `--postgres-url URL`, 20 green threads each open a `tokio-postgres` connection and
//!    run `SELECT pg_sleep(0.05), $1::int + 1`: the server holds all 20 at once, so the whole
//!    takes about 50 ms, not 1 s.
//!
//! ```sh
//! cargo run --release --features tokio --example async_clients
//! cargo run --release --features tokio --example async_clients -- \
//!     --postgres-url postgres://postgres@127.0.0.1:5432/postgres
//! ```
//!
//! It prints what happened and exits with status 1 if a reply is wrong or a step fails.

use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use greenweave::block_on;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const USAGE: &str = "usage: async_clients [--postgres-url URL]

  --postgres-url URL   also run tokio-postgres queries against this server
                       (e.g. postgres://postgres@127.0.0.1:5432/postgres)";

type Result<T> = std::result::Result<T, Box<dyn Error>>;

fn main() -> ExitCode {
    let mut postgres_url = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--postgres-url" => postgres_url = args.next(),
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => {
                eprintln!("async_clients: unknown argument {arg:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    // One worker: every green thread below, and every tokio task, runs on this OS thread.
    let outcome = greenweave::run(|| -> Result<()> {
        sleeps()?;
        echo()?;
        match &postgres_url {
            Some(url) => postgres(url)?,
            None => println!("postgres: skipped (pass --postgres-url URL to run it)"),
        }
        Ok(())
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("async_clients: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Joins every green thread and returns the first error any of them returned.
fn join_all<T>(threads: Vec<greenweave::thread::JoinHandle<Result<T>>>) -> Result<Vec<T>> {
    threads
        .into_iter()
        .map(|thread| thread.join().map_err(|_| "a green thread panicked")?)
        .collect()
}

/// 100 green threads each wait in `tokio::time::sleep`, at the same time.
fn sleeps() -> Result<()> {
    const SLEEPERS: usize = 100;
    const NAP: Duration = Duration::from_millis(20);
    let started = Instant::now();
    let sleepers = (0..SLEEPERS)
        .map(|_| {
            greenweave::spawn(|| -> Result<()> {
                block_on(tokio::time::sleep(NAP));
                Ok(())
            })
        })
        .collect();
    join_all(sleepers)?;
    println!(
        "tokio::time::sleep: {SLEEPERS} green threads slept {NAP:?} each, all done in {:.1?} \
         (one at a time: {:?})",
        started.elapsed(),
        NAP * SLEEPERS as u32
    );
    Ok(())
}

/// A tokio echo server (a tokio task on this worker) and 10 green clients on tokio's sockets.
fn echo() -> Result<()> {
    const CLIENTS: usize = 10;
    const ROUND_TRIPS: usize = 100;
    let listener = block_on(TcpListener::bind("127.0.0.1:0"))?;
    let address = listener.local_addr()?;
    // The server is async code: a tokio task, run by this worker's tokio runtime.
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buffer = [0; 64];
                while let Ok(read @ 1..) = socket.read(&mut buffer).await {
                    if socket.write_all(&buffer[..read]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let started = Instant::now();
    let clients = (0..CLIENTS)
        .map(|client| {
            // A client is straight-line code: each call is an `async fn`, run by `block_on`.
            greenweave::spawn(move || -> Result<()> {
                let mut stream = block_on(TcpStream::connect(address))?;
                for round_trip in 0..ROUND_TRIPS {
                    let message = format!("client {client:2}, message {round_trip:3}");
                    block_on(stream.write_all(message.as_bytes()))?;
                    let mut reply = vec![0; message.len()];
                    block_on(stream.read_exact(&mut reply))?;
                    if reply != message.as_bytes() {
                        return Err(format!("echo: {message:?} came back as {reply:?}").into());
                    }
                }
                Ok(())
            })
        })
        .collect();
    join_all(clients)?;
    println!(
        "tokio::net echo: {CLIENTS} green clients x {ROUND_TRIPS} round trips to a tokio-task \
         server, every reply checked, in {:.1?}",
        started.elapsed()
    );
    server.abort();
    Ok(())
}

/// 20 green threads each run a query that sleeps 50 ms in the server, each on its own
/// `tokio-postgres` connection.
fn postgres(url: &str) -> Result<()> {
    const CLIENTS: usize = 20;
    let started = Instant::now();
    let clients = (0..CLIENTS)
        .map(|client| {
            let url = url.to_owned();
            greenweave::spawn(move || -> Result<i32> {
                let (connection_client, connection) =
                    block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls))?;
                // The connection's I/O is a tokio task on this worker.
                let connection = tokio::spawn(connection);
                let row = block_on(connection_client.query_one(
                    "SELECT pg_sleep(0.05)::text, $1::int + 1",
                    &[&(client as i32)],
                ))?;
                drop(connection_client); // ends the connection's task
                block_on(connection)??;
                Ok(row.get(1))
            })
        })
        .collect();
    let answers = join_all(clients)?;
    for (client, answer) in answers.into_iter().enumerate() {
        if answer != client as i32 + 1 {
            return Err(format!("postgres: client {client} got {answer}").into());
        }
    }
    println!(
        "tokio-postgres: {CLIENTS} green threads, a connection each, ran \
         `SELECT pg_sleep(0.05), $1::int + 1`, every answer checked, in {:.1?} (one at a time: \
         {:?})",
        started.elapsed(),
        Duration::from_millis(50) * CLIENTS as u32
    );
    Ok(())
}
