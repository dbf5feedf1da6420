//! Shared by the hooks example and the hooks HTTP benchmark: a minimal HTTP/1.1 server on
//! `greenweave::net`, with keep-alive, that answers every `GET /path` with `200 OK` and the
//! path as its body (so a client can check it got its own reply). Included with `#[path]`;
//! not an example itself.
//!
//! It runs on an OS thread of its own with its own runtime, so the program under test has its
//! OS thread to itself: if a call of that program blocked its OS thread, its other green
//! threads would stop while the server went on answering.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

use greenweave::net::{TcpListener, TcpStream};

/// Starts the server on an ephemeral loopback port, on a new OS thread running its own runtime,
/// and returns its address. Each reply waits `delay` first (a green sleep: it holds up that one
/// connection, not the server). It serves until the process exits. With `cpu`, the server's
/// OS thread is pinned to that CPU (where the machine has it).
pub fn spawn(delay: Duration, cpu: Option<usize>) -> SocketAddr {
    let (send_addr, addr) = mpsc::channel();
    std::thread::Builder::new()
        .name("http server".into())
        .spawn(move || {
            if let Some(cpu) = cpu {
                pin_this_thread(cpu);
            }
            greenweave::run(move || {
                let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
                send_addr
                    .send(listener.local_addr().unwrap())
                    .expect("main is waiting for the address");
                for stream in listener.incoming() {
                    match stream {
                        Ok(stream) => drop(greenweave::spawn(move || serve(stream, delay))),
                        Err(error) => eprintln!("http server: accept failed: {error}"),
                    }
                }
            })
        })
        .expect("start the server's OS thread");
    addr.recv().expect("the server thread sends its address")
}

/// Pins the calling OS thread to `cpu`, if the machine has it; says whether it did.
pub fn pin_this_thread(cpu: usize) -> bool {
    // SAFETY: a cpu_set_t is plain data for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return false;
    }
    // SAFETY: `cpu` is within the set's bits (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is the calling thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

/// Answers one connection's requests until the client closes it.
fn serve(stream: TcpStream, delay: Duration) {
    let _ = stream.set_nodelay(true);
    let mut io = &stream;
    let mut pending: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0_u8; 4096];
    loop {
        // Every complete request in the buffer is answered before reading more.
        while let Some(end) = find(&pending, b"\r\n\r\n") {
            let path = request_path(&pending[..end]).unwrap_or("/").to_owned();
            pending.drain(..end + 4);
            if !delay.is_zero() {
                greenweave::thread::sleep(delay);
            }
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{path}",
                path.len()
            );
            if io.write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
        match io.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The path of a request head (`GET /path HTTP/1.1\r\n...`).
fn request_path(head: &[u8]) -> Option<&str> {
    let line = std::str::from_utf8(head).ok()?.lines().next()?;
    line.split(' ').nth(1)
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}
