//! A blocking HTTP client made concurrent by the `hooks` feature alone.
//!
//! [`ureq`](https://docs.rs/ureq/2) knows nothing of greenweave: it connects, writes and reads
//! with `std::net::TcpStream`, which blocks. Here N green threads each make M `ureq` GETs to an
//! in-process HTTP server (another OS thread; each reply waits a few milliseconds), while a
//! ticker green thread calls `std::thread::sleep(1 ms)` in a loop and counts its ticks. With the
//! `hooks` feature, `ureq`'s `recv` and the ticker's `nanosleep` park only their green thread:
//! the requests overlap and the ticker ticks while they are in flight, which it could not do if
//! any call blocked the OS thread. No line of this file differs from what one would write for
//! OS threads, but `greenweave::run` and `greenweave::spawn`.
//!
//! Hence `required-features = ["hooks"]`: without the feature, `ureq`'s calls would block the OS
//! thread and the ticker's sleep would never yield, so the ticker, once running, would keep the
//! OS thread for ever and the program would not finish.
//!
//! ```sh
//! cargo run --release --features hooks --example hooks
//! cargo run --release --features hooks --example hooks -- --clients 100 --requests 50
//! cargo run --features hooks --example hooks -- --quick     # tiny counts, for CI and qemu
//! ```
//!
//! It prints the requests made, the time they took against the time the replies' delays alone
//! would take one at a time, and the ticks; it fails (exit status 1) if a reply is not the one
//! asked for, or if the ticker never ticked while a request was in flight.

use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

#[path = "support/http_server.rs"]
mod http_server;

const USAGE: &str = "usage: hooks [--clients N] [--requests M] [--delay-ms D] [--quick]

  --clients N     green threads making requests at once (default 10)
  --requests M    GETs per green thread, one after another (default 20)
  --delay-ms D    milliseconds the server waits before each reply (default 2)
  --quick         4 clients x 5 requests, for CI and qemu";

struct Options {
    clients: usize,
    requests: usize,
    delay: Duration,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        clients: 10,
        requests: 20,
        delay: Duration::from_millis(2),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut count = || -> Result<usize, String> {
            let text = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            text.parse()
                .map_err(|_| format!("{flag}: not a whole number: {text:?}"))
        };
        match flag.as_str() {
            "--clients" => options.clients = count()?.max(1),
            "--requests" => options.requests = count()?.max(1),
            "--delay-ms" => options.delay = Duration::from_millis(count()? as u64),
            "--quick" => (options.clients, options.requests) = (4, 5),
            "-h" | "--help" => {
                println!("{USAGE}");
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
            eprintln!("hooks: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let server = http_server::spawn(options.delay, None);
    greenweave::run(move || fetch_all(&format!("http://{server}"), &options))
}

/// What the run saw, shared by the green threads of this one OS thread.
#[derive(Default)]
struct Counters {
    in_flight: Cell<usize>,
    ticks: Cell<u64>,
    ticks_in_flight: Cell<u64>,
    wrong_replies: Cell<u64>,
    done: Cell<bool>,
}

fn fetch_all(base: &str, options: &Options) -> ExitCode {
    // One agent, shared as one would share it between OS threads; it keeps a connection per
    // client alive between requests.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .max_idle_connections(options.clients)
        .max_idle_connections_per_host(options.clients)
        .build()
        .into();
    let counters = Rc::new(Counters::default());

    let ticker = {
        let counters = counters.clone();
        greenweave::spawn(move || {
            while !counters.done.get() {
                std::thread::sleep(Duration::from_millis(1)); // a hooked nanosleep
                counters.ticks.set(counters.ticks.get() + 1);
                if counters.in_flight.get() > 0 {
                    counters
                        .ticks_in_flight
                        .set(counters.ticks_in_flight.get() + 1);
                }
            }
        })
    };

    let started = Instant::now();
    let clients: Vec<_> = (0..options.clients)
        .map(|client| {
            let (agent, counters, base) = (agent.clone(), counters.clone(), base.to_owned());
            let requests = options.requests;
            greenweave::spawn(move || {
                for request in 0..requests {
                    let path = format!("/client/{client}/request/{request}");
                    counters.in_flight.set(counters.in_flight.get() + 1);
                    let reply = agent
                        .get(&format!("{base}{path}"))
                        .call()
                        .map_err(std::io::Error::other)
                        .and_then(|mut response| {
                            response
                                .body_mut()
                                .read_to_string()
                                .map_err(std::io::Error::other)
                        });
                    counters.in_flight.set(counters.in_flight.get() - 1);
                    match reply {
                        Ok(body) if body == path => {}
                        Ok(body) => {
                            eprintln!("hooks: asked for {path}, got {body:?}");
                            counters.wrong_replies.set(counters.wrong_replies.get() + 1);
                        }
                        Err(error) => {
                            eprintln!("hooks: GET {path}: {error}");
                            counters.wrong_replies.set(counters.wrong_replies.get() + 1);
                        }
                    }
                }
            })
        })
        .collect();
    for client in clients {
        client.join().expect("a client does not panic");
    }
    let elapsed = started.elapsed();
    counters.done.set(true);
    ticker.join().expect("the ticker does not panic");

    let total = options.clients * options.requests;
    println!(
        "hooks: {} green threads x {} ureq GETs = {total} requests in {:.1} ms \
         (the replies' {} ms delays alone, one at a time: {} ms)",
        options.clients,
        options.requests,
        elapsed.as_secs_f64() * 1e3,
        options.delay.as_millis(),
        options.delay.as_millis() * total as u128,
    );
    println!(
        "hooks: the ticker (std::thread::sleep(1 ms) in a loop) ticked {} times, {} of them \
         while requests were in flight",
        counters.ticks.get(),
        counters.ticks_in_flight.get()
    );
    let mut status = ExitCode::SUCCESS;
    if counters.wrong_replies.get() > 0 {
        eprintln!(
            "hooks: {} of {total} requests failed or got another's reply",
            counters.wrong_replies.get()
        );
        status = ExitCode::FAILURE;
    }
    if counters.ticks_in_flight.get() == 0 {
        eprintln!(
            "hooks: the ticker never ran while a request was in flight: a call blocked the OS \
             thread"
        );
        status = ExitCode::FAILURE;
    }
    status
}
