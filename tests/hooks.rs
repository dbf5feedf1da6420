//! The `hooks` feature: blocking code nobody rewrote parks only its green thread.
#![cfg(feature = "hooks")]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

#[test]
fn std_sleep_in_green_threads_overlaps() {
    let started = Instant::now();
    greenweave::run(|| {
        let sleepers: Vec<_> = (0..10)
            .map(|_| greenweave::spawn(|| std::thread::sleep(Duration::from_millis(100))))
            .collect();
        for sleeper in sleepers {
            sleeper.join().unwrap();
        }
    });
    eprintln!("elapsed {:?}", started.elapsed());
}

#[test]
fn std_tcp_echo_in_green_threads() {
    greenweave::run(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = greenweave::spawn(move || {
            for _ in 0..3 {
                let (mut stream, _) = listener.accept().unwrap();
                greenweave::spawn(move || {
                    let mut buffer = [0; 5];
                    stream.read_exact(&mut buffer).unwrap();
                    stream.write_all(&buffer).unwrap();
                });
            }
        });
        let clients: Vec<_> = (0..3)
            .map(|_| {
                greenweave::spawn(move || {
                    let mut stream = std::net::TcpStream::connect(address).unwrap();
                    stream.write_all(b"hello").unwrap();
                    let mut reply = [0; 5];
                    stream.read_exact(&mut reply).unwrap();
                    reply
                })
            })
            .collect();
        for client in clients {
            assert_eq!(&client.join().unwrap(), b"hello");
        }
        server.join().unwrap();
    });
}
