//! `TcpListener::bind_reuse_port` and `UdpSocket::bind_reuse_port`: sockets of several
//! runtimes (OS threads) bound to one address, among which the kernel spreads the traffic;
//! and a plain bind of a taken address still failing with `AddrInUse`.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use greenweave::net::{TcpListener, UdpSocket};
use greenweave::sync::mpsc::RemoteSender;

/// A bound on every wait of the test's own OS threads, so a failure is a failure, not a hang.
const PATIENCE: Duration = Duration::from_secs(30);

/// Connections (or datagrams) tried before concluding that one socket gets none. The kernel
/// hashes each 4-tuple: with two sockets, all of them landing on one has odds of 2^-199.
const ATTEMPTS: usize = 200;

/// A runtime on its own OS thread with a listener bound with `SO_REUSEPORT` to `addr` (port 0:
/// a fresh one), reporting `(worker, peer port)` for every connection it accepts until told to
/// stop. Returns the listener's address and the stop signal's sender.
fn reuse_port_server(
    worker: usize,
    addr: SocketAddr,
    accepted: mpsc::Sender<(usize, u16)>,
) -> (SocketAddr, RemoteSender<()>, thread::JoinHandle<()>) {
    let (ready_tx, ready_rx) = mpsc::channel();
    let thread = thread::spawn(move || {
        greenweave::run(move || {
            let listener = TcpListener::bind_reuse_port(addr).unwrap();
            let (stop_tx, stop_rx) = greenweave::sync::mpsc::channel::<()>();
            ready_tx
                .send((listener.local_addr().unwrap(), stop_tx.remote()))
                .unwrap();
            greenweave::spawn(move || {
                loop {
                    let (_stream, peer) = listener.accept().unwrap();
                    accepted.send((worker, peer.port())).unwrap();
                }
            });
            // Returning ends the runtime, which cancels the accept loop.
            stop_rx.recv().unwrap();
        });
    });
    let (addr, stop) = ready_rx.recv_timeout(PATIENCE).unwrap();
    (addr, stop, thread)
}

#[test]
fn tcp_listeners_bound_with_reuse_port_in_two_runtimes_both_accept_connections() {
    let (accepted_tx, accepted) = mpsc::channel();
    let (addr, stop_first, first) =
        reuse_port_server(0, "127.0.0.1:0".parse().unwrap(), accepted_tx.clone());
    let (same_addr, stop_second, second) = reuse_port_server(1, addr, accepted_tx);
    assert_eq!(same_addr, addr);
    let mut seen = BTreeSet::new();
    let mut source_ports = BTreeSet::new();
    for _ in 0..ATTEMPTS {
        let client = std::net::TcpStream::connect(addr).unwrap();
        let port = client.local_addr().unwrap().port();
        assert!(source_ports.insert(port), "source port {port} reused");
        let (worker, peer_port) = accepted.recv_timeout(PATIENCE).unwrap();
        assert_eq!(
            peer_port, port,
            "the accepted connection is the one just made"
        );
        seen.insert(worker);
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(
        seen.len(),
        2,
        "after {ATTEMPTS} connections from distinct source ports, only listener {seen:?} \
         accepted any: the kernel did not spread them, so SO_REUSEPORT is not in effect"
    );
    stop_first.send(()).unwrap();
    stop_second.send(()).unwrap();
    first.join().unwrap();
    second.join().unwrap();
}

#[test]
fn binding_a_taken_tcp_address_without_reuse_port_fails_with_addr_in_use() {
    greenweave::run(|| {
        let plain = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = plain.local_addr().unwrap();
        assert_eq!(
            TcpListener::bind(addr).unwrap_err().kind(),
            ErrorKind::AddrInUse
        );
        // Sharing takes both sides asking for it.
        let error = TcpListener::bind_reuse_port(addr).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::AddrInUse);

        let shared = TcpListener::bind_reuse_port("127.0.0.1:0").unwrap();
        let addr = shared.local_addr().unwrap();
        assert_eq!(
            TcpListener::bind(addr).unwrap_err().kind(),
            ErrorKind::AddrInUse
        );
        TcpListener::bind_reuse_port(addr).unwrap();
    });
}

#[test]
fn udp_sockets_bound_with_reuse_port_both_receive_datagrams() {
    greenweave::run(|| {
        let first = UdpSocket::bind_reuse_port("127.0.0.1:0").unwrap();
        let addr = first.local_addr().unwrap();
        let second = UdpSocket::bind_reuse_port(addr).unwrap();
        let (received_tx, received) = greenweave::sync::mpsc::channel();
        for (index, socket) in [first, second].into_iter().enumerate() {
            let received_tx = received_tx.clone();
            greenweave::spawn(move || {
                let mut buf = [0; 16];
                loop {
                    let (len, from) = socket.recv_from(&mut buf).unwrap();
                    assert_eq!(&buf[..len], b"hello");
                    if received_tx.send((index, from)).is_err() {
                        break;
                    }
                }
            });
        }
        let mut seen = BTreeSet::new();
        for _ in 0..ATTEMPTS {
            // A fresh socket each time: a new source port, so a new hash.
            let client = UdpSocket::bind("127.0.0.1:0").unwrap();
            client.send_to(b"hello", addr).unwrap();
            let (index, from) = received.recv().unwrap();
            assert_eq!(from, client.local_addr().unwrap());
            seen.insert(index);
            if seen.len() == 2 {
                break;
            }
        }
        assert_eq!(
            seen.len(),
            2,
            "after {ATTEMPTS} datagrams from distinct source ports, only socket {seen:?} got any"
        );
        let plain = UdpSocket::bind(addr).unwrap_err();
        assert_eq!(plain.kind(), ErrorKind::AddrInUse);
    });
}
