//! `net::Detached`: a green socket taken out of one OS thread's runtime, sent to another OS
//! thread, and attached to that thread's runtime, where it works as before: bytes, timeouts
//! and mode carried over, the old epoll left, clones left working, the fd closed on drop.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr as UnixSocketAddr;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use greenweave::net::{Detach, Detached, TcpListener, TcpStream, UdpSocket};
use greenweave::os::unix::net::{UnixDatagram, UnixListener, UnixStream};

/// A bound on every wait of a test's own OS threads, so a failure is a failure, not a hang.
const PATIENCE: Duration = Duration::from_secs(30);

/// Runs `serve` on a new OS thread, in that thread's own runtime, on the socket `detached`
/// names, attached there; returns what `serve` returns.
fn serve_elsewhere<T: Detach + 'static, R: Send + 'static>(
    detached: Detached<T>,
    serve: impl FnOnce(T) -> R + Send + 'static,
) -> R {
    thread::spawn(move || greenweave::run(move || serve(detached.attach().unwrap())))
        .join()
        .unwrap()
}

/// A blocking std client connected to a green listener's address, and the green end of it.
fn std_client_and_served() -> (std::net::TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    client.set_read_timeout(Some(PATIENCE)).unwrap();
    let (served, _) = listener.accept().unwrap();
    (client, served)
}

/// The fds that some epoll instance of this process watches (from `/proc/self/fdinfo`).
fn fds_watched_by_any_epoll() -> Vec<i32> {
    let mut watched = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fdinfo").unwrap() {
        // An fd may close between the listing and the read: skip it.
        let Ok(info) = std::fs::read_to_string(entry.unwrap().path()) else {
            continue;
        };
        for line in info.lines() {
            if let Some(rest) = line.strip_prefix("tfd:") {
                let fd = rest.split_whitespace().next().unwrap();
                watched.push(fd.parse().unwrap());
            }
        }
    }
    watched
}

#[test]
fn a_stream_accepted_in_one_runtime_echoes_bytes_after_moving_to_another_os_threads_runtime() {
    let (to_server, server_inbox) = mpsc::channel::<Detached<TcpStream>>();
    let server = thread::spawn(move || {
        let detached = server_inbox.recv_timeout(PATIENCE).unwrap();
        greenweave::run(move || {
            let mut served = detached.attach().unwrap();
            let mut buf = [0; 64];
            loop {
                let len = served.read(&mut buf).unwrap();
                if len == 0 {
                    break;
                }
                served.write_all(&buf[..len]).unwrap();
            }
        });
    });
    let (addr_tx, addr_rx) = mpsc::channel();
    let acceptor = thread::spawn(move || {
        greenweave::run(move || {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            let (served, _) = listener.accept().unwrap();
            to_server.send(served.detach()).unwrap();
        });
    });
    let mut client = std::net::TcpStream::connect(addr_rx.recv_timeout(PATIENCE).unwrap()).unwrap();
    client.set_read_timeout(Some(PATIENCE)).unwrap();
    for message in [&b"first"[..], b"second", b"third"] {
        client.write_all(message).unwrap();
        let mut echoed = vec![0; message.len()];
        client.read_exact(&mut echoed).unwrap();
        assert_eq!(echoed, message);
    }
    client.shutdown(std::net::Shutdown::Write).unwrap();
    acceptor.join().unwrap();
    server.join().unwrap();
}

#[test]
fn the_timeouts_and_the_nonblocking_mode_survive_the_move() {
    greenweave::run(|| {
        let (_client, served) = std_client_and_served();
        served
            .set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        served
            .set_write_timeout(Some(Duration::from_millis(2500)))
            .unwrap();
        served.set_nonblocking(true).unwrap();
        let (read_timeout, write_timeout, read_error) =
            serve_elsewhere(served.detach(), |mut s| {
                let error = s.read(&mut [0; 8]).unwrap_err().kind(); // nothing sent: no parking
                (s.read_timeout().unwrap(), s.write_timeout().unwrap(), error)
            });
        assert_eq!(read_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(write_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(read_error, ErrorKind::WouldBlock);
    });
}

#[test]
fn a_stream_detached_while_data_is_pending_reads_it_after_attaching() {
    greenweave::run(|| {
        let (mut client, served) = std_client_and_served();
        client.write_all(b"queued before the move").unwrap();
        // The bytes have arrived, and this runtime's epoll has taken their edge: the new
        // runtime will get no new one for them.
        let mut first = [0; 6];
        assert_eq!(served.peek(&mut first).unwrap(), 6);
        let received = serve_elsewhere(served.detach(), |mut served| {
            let mut buf = [0; 22];
            served.read_exact(&mut buf).unwrap();
            buf
        });
        assert_eq!(&received, b"queued before the move");
    });
}

#[test]
fn dropping_a_detached_stream_closes_it_and_the_peer_sees_end_of_file() {
    greenweave::run(|| {
        let (mut client, served) = std_client_and_served();
        let detached = served.detach();
        thread::spawn(move || drop(detached)).join().unwrap();
        assert_eq!(client.read(&mut [0; 8]).unwrap(), 0);
    });
}

#[test]
fn detaching_takes_the_fd_out_of_its_runtimes_epoll() {
    greenweave::run(|| {
        let (_client, served) = std_client_and_served();
        let fd = served.as_raw_fd();
        assert!(
            fds_watched_by_any_epoll().contains(&fd),
            "a registered green socket's fd {fd} should be in the runtime's epoll"
        );
        let detached = served.detach();
        assert_eq!(detached.as_raw_fd(), fd);
        assert!(
            !fds_watched_by_any_epoll().contains(&fd),
            "the detached fd {fd} is still in an epoll"
        );
    });
}

#[test]
fn a_try_cloned_handle_keeps_working_in_its_runtime_after_the_original_moves() {
    greenweave::run(|| {
        let (mut client, served) = std_client_and_served();
        let clone = served.try_clone().unwrap();
        serve_elsewhere(served.detach(), |mut served| {
            served.write_all(b"moved ").unwrap();
        });
        (&clone).write_all(b"stayed").unwrap();
        let mut received = [0; 12];
        client.read_exact(&mut received).unwrap();
        assert_eq!(&received, b"moved stayed");
        // The clone still parks and wakes on this runtime's epoll.
        let reader = greenweave::spawn(move || {
            let mut buf = [0; 5];
            (&clone).read_exact(&mut buf).unwrap();
            buf
        });
        greenweave::thread::yield_now(); // the reader parks: nothing has been sent
        client.write_all(b"later").unwrap();
        assert_eq!(&reader.join().unwrap(), b"later");
    });
}

#[test]
fn attaching_outside_a_runtime_is_an_error_that_says_to_call_it_inside_one() {
    let detached = greenweave::run(|| {
        let (_client, served) = std_client_and_served();
        // Kept alive past the runtime: the client's end, so the socket stays connected.
        (served.detach(), _client)
    });
    let error = detached.0.attach().unwrap_err();
    assert!(
        error.to_string().contains("greenweave::run"),
        "unexpected message: {error}"
    );
}

#[test]
fn a_detached_tcp_listener_accepts_in_the_runtime_it_is_attached_to() {
    greenweave::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let detached = listener.detach();
        let server = thread::spawn(move || {
            greenweave::run(move || {
                let listener = detached.attach().unwrap();
                let (mut stream, _) = listener.accept().unwrap();
                stream.write_all(b"accepted over there").unwrap();
            })
        });
        let mut client = TcpStream::connect(addr).unwrap();
        let mut reply = String::new();
        client.read_to_string(&mut reply).unwrap();
        assert_eq!(reply, "accepted over there");
        server.join().unwrap();
    });
}

#[test]
fn a_detached_udp_socket_receives_a_datagram_sent_before_the_move() {
    greenweave::run(|| {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver.set_read_timeout(Some(PATIENCE)).unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender
            .send_to(b"datagram", receiver.local_addr().unwrap())
            .unwrap();
        let (received, from) = serve_elsewhere(receiver.detach(), |receiver| {
            let mut buf = [0; 16];
            let (len, from) = receiver.recv_from(&mut buf).unwrap();
            (buf[..len].to_vec(), from)
        });
        assert_eq!(received, b"datagram");
        assert_eq!(from, sender.local_addr().unwrap());
    });
}

#[test]
fn detached_unix_streams_and_datagrams_carry_bytes_after_the_move() {
    greenweave::run(|| {
        let (mut here, there) = UnixStream::pair().unwrap();
        here.write_all(b"ping").unwrap();
        serve_elsewhere(there.detach(), |mut there| {
            let mut buf = [0; 4];
            there.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"ping");
            there.write_all(b"pong").unwrap();
        });
        let mut reply = [0; 4];
        here.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"pong");

        let (here, there) = UnixDatagram::pair().unwrap();
        here.send(b"one datagram").unwrap();
        let received = serve_elsewhere(there.detach(), |there| {
            let mut buf = [0; 32];
            let len = there.recv(&mut buf).unwrap();
            there.send(b"reply").unwrap();
            buf[..len].to_vec()
        });
        assert_eq!(received, b"one datagram");
        let mut reply = [0; 8];
        assert_eq!(here.recv(&mut reply).unwrap(), 5);
    });
}

#[test]
fn a_detached_unix_listener_accepts_in_the_runtime_it_is_attached_to() {
    let name = format!("greenweave-detached-listener-{}", std::process::id());
    let addr = UnixSocketAddr::from_abstract_name(name).unwrap();
    greenweave::run(|| {
        let listener = UnixListener::bind_addr(&addr).unwrap();
        let detached = listener.detach();
        let server = thread::spawn(move || {
            greenweave::run(move || {
                let listener = detached.attach().unwrap();
                let (mut stream, _) = listener.accept().unwrap();
                stream.write_all(b"accepted").unwrap();
            })
        });
        let mut client = UnixStream::connect_addr(&addr).unwrap();
        let mut reply = String::new();
        client.read_to_string(&mut reply).unwrap();
        assert_eq!(reply, "accepted");
        server.join().unwrap();
    });
}

#[test]
fn detached_is_send_and_sync_and_debug_names_the_type() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    greenweave::run(|| {
        let (_client, served) = std_client_and_served();
        let fd = served.as_raw_fd();
        let detached = served.detach();
        assert_send_sync(&detached);
        let text = format!("{detached:?}");
        assert!(text.contains("TcpStream"), "{text}");
        assert!(text.contains(&format!("fd: {fd}")), "{text}");
    });
}
