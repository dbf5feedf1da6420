//! The keep-alive HTTP/1.1 server of `examples/http_server.rs` (its connection loop and
//! protocol, included from `examples/support`), served in-process on a loopback port and
//! driven by a plain blocking client on another OS thread; and the `SO_REUSEPORT` listeners
//! its workers use.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::Duration;

#[path = "../examples/support/cpus.rs"]
#[allow(dead_code)] // pin_this_thread is the tokio peers'
mod cpus;
#[path = "../examples/support/http_connection.rs"]
mod http_connection;
#[path = "../examples/support/http_reply.rs"]
mod http_reply;
#[path = "../examples/support/workers.rs"]
mod workers;

const OK: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\n";
const OK_CLOSE: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\nConnection: close\r\n\r\n";
const BODY: &str = "Hello, World!";
const BAD_REQUEST: &str =
    "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Bounds every read of the client, so that a server that fails to answer fails the test
/// instead of hanging it (generous: qemu-user is slow).
const READ_LIMIT: Duration = Duration::from_secs(60);

/// Starts the server on a loopback port, on an OS thread with its own runtime, to serve
/// exactly `connections` connections with the example's connection loop. The handle returns
/// how many requests each connection had answered, in the order they were accepted, or the
/// connection's error.
fn start_server(connections: usize) -> (SocketAddr, thread::JoinHandle<Vec<Result<u64, String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = thread::spawn(move || {
        greenweave::run(move || {
            let listener = greenweave::net::TcpListener::from_std(listener).unwrap();
            let handlers: Vec<_> = (0..connections)
                .map(|_| {
                    let (stream, _) = listener.accept().unwrap();
                    greenweave::spawn(move || {
                        http_connection::serve_connection(&stream)
                            .map_err(|error| error.to_string())
                    })
                })
                .collect();
            handlers
                .into_iter()
                .map(|handler| handler.join().unwrap())
                .collect()
        })
    });
    (addr, server)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let client = TcpStream::connect(addr).unwrap();
    client.set_read_timeout(Some(READ_LIMIT)).unwrap();
    client
}

/// Reads until the server closes the connection.
fn read_to_close(client: &mut TcpStream) -> String {
    let mut received = Vec::new();
    client
        .read_to_end(&mut received)
        .expect("the server closes the connection");
    String::from_utf8(received).unwrap()
}

#[test]
fn keep_alive_answers_every_request_on_one_connection_in_turn() {
    let (addr, server) = start_server(1);
    let mut client = connect(addr);
    for i in 0..20 {
        write!(client, "GET /{i} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
        let mut reply = vec![0; OK.len() + BODY.len()];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(
            String::from_utf8(reply).unwrap(),
            format!("{OK}{BODY}"),
            "request {i}"
        );
    }
    drop(client);
    assert_eq!(server.join().unwrap(), [Ok(20)]);
}

#[test]
fn pipelined_requests_are_answered_in_the_order_they_were_sent() {
    let (addr, server) = start_server(1);
    let mut client = connect(addr);
    // HEAD's reply has no body, so the replies' order shows in the bytes.
    client
        .write_all(
            b"GET /1 HTTP/1.1\r\nHost: test\r\n\r\n\
              HEAD /2 HTTP/1.1\r\nHost: test\r\n\r\n\
              HEAD /3 HTTP/1.1\r\nHost: test\r\n\r\n\
              GET /4 HTTP/1.1\r\nHost: test\r\n\r\n\
              HEAD /5 HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    let head_close = OK_CLOSE;
    assert_eq!(
        read_to_close(&mut client),
        format!("{OK}{BODY}{OK}{OK}{OK}{BODY}{head_close}")
    );
    drop(client);
    assert_eq!(server.join().unwrap(), [Ok(5)]);
}

#[test]
fn a_request_split_across_writes_is_answered_once_it_is_complete() {
    let (addr, server) = start_server(1);
    let mut client = connect(addr);
    let request: &[u8] = b"POST /form HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello";
    for piece in request.chunks(7) {
        client.write_all(piece).unwrap();
        client.flush().unwrap();
        thread::sleep(Duration::from_millis(5)); // let each piece arrive on its own
    }
    // The body was taken as the body, not as the start of the next request.
    client
        .write_all(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_to_close(&mut client),
        format!("{OK}{BODY}{OK_CLOSE}{BODY}")
    );
    drop(client);
    assert_eq!(server.join().unwrap(), [Ok(2)]);
}

#[test]
fn connection_close_ends_the_connection_after_its_reply() {
    let (addr, server) = start_server(1);
    let mut client = connect(addr);
    // The request after the one that asks to close is never answered.
    client
        .write_all(
            b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n\
              GET /never HTTP/1.1\r\nHost: test\r\n\r\n",
        )
        .unwrap();
    assert_eq!(read_to_close(&mut client), format!("{OK_CLOSE}{BODY}"));
    drop(client);
    assert_eq!(server.join().unwrap(), [Ok(1)]);
}

#[test]
fn http_1_0_closes_unless_the_client_asks_for_keep_alive() {
    let (addr, server) = start_server(2);
    let mut plain = connect(addr);
    plain.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(read_to_close(&mut plain), format!("{OK_CLOSE}{BODY}"));

    let mut kept = connect(addr);
    kept.write_all(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n")
        .unwrap();
    let keep_alive = OK.replace("\r\n\r\n", "\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(
        read_to_close(&mut kept),
        format!("{keep_alive}{BODY}{OK_CLOSE}{BODY}")
    );
    drop((plain, kept));
    assert_eq!(server.join().unwrap(), [Ok(1), Ok(2)]);
}

#[test]
fn a_malformed_request_gets_400_and_the_connection_closes() {
    let (addr, server) = start_server(2);
    let mut garbled = connect(addr);
    garbled
        .write_all(b"GET / HTTP/1.1\r\n\r\nthis is not http\r\n\r\nGET / HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_to_close(&mut garbled),
        format!("{OK}{BODY}{BAD_REQUEST}")
    );

    // A Content-Length that is not a number makes the framing unknown: refused too.
    let mut unframed = connect(addr);
    unframed
        .write_all(b"POST / HTTP/1.1\r\nContent-Length: five\r\n\r\nhello")
        .unwrap();
    assert_eq!(read_to_close(&mut unframed), BAD_REQUEST);
    // The server waits for each client to close its side too (see `linger`).
    drop((garbled, unframed));
    assert_eq!(server.join().unwrap(), [Ok(2), Ok(1)]);
}

#[test]
fn a_head_longer_than_the_limit_is_refused_with_431() {
    let (addr, server) = start_server(1);
    let mut client = connect(addr);
    let long = "x".repeat(http_reply::MAX_HEAD);
    write!(client, "GET / HTTP/1.1\r\nX-Long: {long}\r\n\r\n").unwrap();
    let reply = read_to_close(&mut client);
    assert!(
        reply.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{reply:?}"
    );
    drop(client);
    assert_eq!(server.join().unwrap(), [Ok(1)]);
}

#[test]
fn every_reuse_port_listener_is_bound_to_the_one_port_and_together_they_take_every_connection() {
    let listeners = workers::reuse_port_listeners("127.0.0.1:0".parse().unwrap(), 3).unwrap();
    let addr = listeners[0].local_addr().unwrap();
    assert_ne!(addr.port(), 0);
    for listener in &listeners {
        assert_eq!(listener.local_addr().unwrap(), addr);
        listener.set_nonblocking(true).unwrap();
    }
    let clients: Vec<_> = (0..30).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut accepted = 0;
    for _ in 0..6000 {
        for listener in &listeners {
            while listener.accept().is_ok() {
                accepted += 1;
            }
        }
        if accepted == clients.len() {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(accepted, clients.len());
}

#[test]
fn every_worker_runs_the_server_once_on_its_own_worker_with_its_own_listener() {
    let listeners = workers::reuse_port_listeners("127.0.0.1:0".parse().unwrap(), 2).unwrap();
    let addr = listeners[0].local_addr().unwrap();
    let fds: Vec<_> = listeners
        .iter()
        .map(|listener| listener.as_raw_fd())
        .collect();
    // Both workers pinned to CPU 0, which every machine has.
    let served = workers::run_workers(listeners, &[0], |worker, listener| {
        (
            worker,
            greenweave::runtime::current_worker(),
            listener.as_raw_fd(),
            listener.local_addr().unwrap(),
        )
    })
    .unwrap();
    assert_eq!(served, [(0, 0, fds[0], addr), (1, 1, fds[1], addr)]);
}

#[test]
fn a_cpu_list_reads_as_taskset_writes_it() {
    assert_eq!(cpus::parse_cpu_list("0"), Ok(vec![0]));
    assert_eq!(cpus::parse_cpu_list("0,2"), Ok(vec![0, 2]));
    assert_eq!(cpus::parse_cpu_list("0-3,8"), Ok(vec![0, 1, 2, 3, 8]));
    assert!(cpus::parse_cpu_list("3-1").is_err());
    assert!(cpus::parse_cpu_list("one").is_err());
    assert!(cpus::parse_cpu_list("").is_err());
}
