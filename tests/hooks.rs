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

#[test]
fn a_std_stream_the_hooks_parked_on_can_become_a_green_stream() {
    greenweave::run(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = greenweave::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream.write_all(b"one").unwrap();
            let mut ack = [0; 1];
            stream.read_exact(&mut ack).unwrap();
            stream.write_all(b"two").unwrap();
        });
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        let mut first = [0; 3];
        // Parks in the hooked recv: the fd is registered on the program's behalf.
        stream.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"one");
        stream.write_all(b"k").unwrap();
        let mut green = greenweave::net::TcpStream::from_std(stream).unwrap();
        let mut second = [0; 3];
        green.read_exact(&mut second).unwrap();
        assert_eq!(&second, b"two");
        server.join().unwrap();
    });
}
