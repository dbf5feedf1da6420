//! One fiber core, composed: a generator reading a green socket inside a green thread, and a
//! `select!` over a channel, a timeout and a join.
//!
//! A "sensor" green thread writes readings, one line each, to a TCP connection on loopback,
//! pausing now and then. A "parser" green thread turns the connection into a stream of numbers
//! with a generator (a `Coroutine` whose body reads lines from the green socket: each read that
//! would block parks the parser's green thread, and the wake-up resumes the generator) and
//! forwards them on a channel. The main green thread waits with `select!` for the first of: a
//! reading on the channel, a quiet spell of 30 ms, or the parser finishing.
//!
//! ```sh
//! cargo run --example sensor_feed
//! ```

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use greenweave::net::{TcpListener, TcpStream};
use greenweave::select;
use greenweave::sync::mpsc;
use greenweave::{Coroutine, CoroutineResult};

/// What the sensor sends: readings, with a pause (in ms) after some of them.
const READINGS: [(f64, u64); 6] = [
    (20.5, 0),
    (20.7, 0),
    (21.0, 60),
    (21.4, 0),
    (21.9, 60),
    (22.3, 0),
];

/// A generator of the readings on `stream`, one per line, until the sensor hangs up.
fn readings(stream: TcpStream) -> Coroutine<(), f64, usize> {
    Coroutine::new(move |yielder, ()| {
        let mut skipped = 0;
        for line in BufReader::new(stream).lines() {
            // `lines` reads the green socket: when no full line is there yet, the read parks
            // this green thread (not the OS thread), right here inside the generator.
            let line = line.expect("the sensor's connection failed");
            match line.trim().parse() {
                Ok(value) => {
                    yielder.suspend(value);
                }
                Err(_) => skipped += 1,
            }
        }
        skipped
    })
}

fn main() {
    greenweave::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind on loopback");
        let address = listener.local_addr().expect("the listener's address");

        let sensor = greenweave::thread::Builder::new()
            .name("sensor".into())
            .spawn(move || {
                let mut connection = TcpStream::connect(address).expect("connect to the parser");
                for (value, pause_ms) in READINGS {
                    writeln!(connection, "{value}").expect("send a reading");
                    greenweave::thread::sleep(Duration::from_millis(pause_ms));
                }
                writeln!(connection, "not a number").expect("send a bad line");
            })
            .expect("spawn the sensor");

        let (numbers, received) = mpsc::channel::<f64>();
        let parser = greenweave::thread::Builder::new()
            .name("parser".into())
            .spawn(move || {
                let (stream, _) = listener.accept().expect("accept the sensor");
                let mut feed = readings(stream);
                loop {
                    match feed.resume(()) {
                        CoroutineResult::Yield(value) => {
                            numbers.send(value).expect("main is listening")
                        }
                        CoroutineResult::Return(skipped) => return skipped,
                    }
                }
            })
            .expect("spawn the parser");

        let mut total = 0.0;
        let mut count = 0;
        let mut quiet_spells = 0;
        let skipped = loop {
            select! {
                // Err once the parser has finished and the channel is empty: its join branch
                // is ready then too.
                recv(received) -> reading => if let Ok(value) = reading {
                    count += 1;
                    total += value;
                    println!("reading {count}: {value:.1}");
                },
                timeout(Duration::from_millis(30)) => {
                    quiet_spells += 1;
                    println!("(quiet for 30 ms)");
                },
                join(parser) -> skipped => break skipped.expect("the parser panicked"),
            }
        };
        // A reading may still be queued when the join is taken: nothing is lost.
        for value in received.try_iter() {
            count += 1;
            total += value;
            println!("reading {count}: {value:.1}");
        }
        sensor.join().expect("the sensor panicked");
        println!(
            "{count} readings, mean {:.2}, {skipped} line skipped, {quiet_spells} quiet spells",
            total / f64::from(count)
        );
        assert_eq!(count, READINGS.len() as u32);
        assert_eq!(skipped, 1);
    });
}
