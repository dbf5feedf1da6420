//! `greenweave::net::UdpSocket`: datagrams arrive whole and in order, a receive parks only its
//! green thread, timeouts and socket errors surface as std's `ErrorKind`s.

use std::cell::RefCell;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use greenweave::net::UdpSocket;

fn bind_loopback() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").unwrap()
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap()
}

#[test]
fn send_to_and_recv_from_round_trip_with_the_senders_address() {
    greenweave::run(|| {
        let a = bind_loopback();
        let b = bind_loopback();
        assert_eq!(a.send_to(b"hello", b.local_addr().unwrap()).unwrap(), 5);
        let mut buf = [0; 16];
        let (len, from) = b.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"hello");
        assert_eq!(from, a.local_addr().unwrap());
    });
}

#[test]
fn send_to_a_string_address_resolves_it() {
    greenweave::run(|| {
        let a = bind_loopback();
        let b = bind_loopback();
        let target = format!("127.0.0.1:{}", b.local_addr().unwrap().port());
        a.send_to(b"by name", target.as_str()).unwrap();
        let mut buf = [0; 16];
        let len = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"by name");
    });
}

#[test]
fn connected_sockets_send_and_recv_and_know_their_peer() {
    greenweave::run(|| {
        let a = bind_loopback();
        let b = bind_loopback();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        assert_eq!(a.peer_addr().unwrap(), b.local_addr().unwrap());
        a.send(b"ping").unwrap();
        let mut buf = [0; 16];
        let len = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"ping");
        b.send(b"pong").unwrap();
        let len = a.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"pong");
    });
}

#[test]
fn peer_addr_of_an_unconnected_socket_is_not_connected() {
    greenweave::run(|| {
        let error = bind_loopback().peer_addr().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotConnected);
    });
}

#[test]
fn a_recv_that_waits_past_the_read_timeout_returns_would_block() {
    greenweave::run(|| {
        let socket = bind_loopback();
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut buf = [0; 16];
        assert_eq!(
            socket.recv(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        assert_eq!(
            socket.recv_from(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        assert_eq!(
            socket.peek(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        // The socket still works after a timeout.
        bind_loopback()
            .send_to(b"late", socket.local_addr().unwrap())
            .unwrap();
        let len = socket.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"late");
    });
}

#[test]
fn timeouts_are_stored_and_zero_is_rejected() {
    greenweave::run(|| {
        let socket = bind_loopback();
        assert_eq!(socket.read_timeout().unwrap(), None);
        assert_eq!(socket.write_timeout().unwrap(), None);
        socket
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        socket
            .set_write_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        assert_eq!(socket.read_timeout().unwrap(), Some(Duration::from_secs(1)));
        assert_eq!(
            socket.write_timeout().unwrap(),
            Some(Duration::from_secs(2))
        );
        for error in [
            socket.set_read_timeout(Some(Duration::ZERO)).unwrap_err(),
            socket.set_write_timeout(Some(Duration::ZERO)).unwrap_err(),
        ] {
            assert_eq!(error.kind(), ErrorKind::InvalidInput);
        }
        socket.set_read_timeout(None).unwrap();
        assert_eq!(socket.read_timeout().unwrap(), None);
    });
}

#[test]
fn a_green_thread_parked_in_recv_is_woken_by_a_send_from_another() {
    greenweave::run(|| {
        let receiver = Rc::new(bind_loopback());
        let log = Rc::new(RefCell::new(Vec::new()));
        let handle = {
            let receiver = receiver.clone();
            let log = log.clone();
            greenweave::spawn(move || {
                log.borrow_mut().push("receiver waiting".to_owned());
                let mut buf = [0; 16];
                let (len, _) = receiver.recv_from(&mut buf).unwrap();
                log.borrow_mut()
                    .push(format!("received {}", String::from_utf8_lossy(&buf[..len])));
            })
        };
        // Let the receiver run until it parks: nothing has been sent yet.
        greenweave::thread::yield_now();
        assert!(!handle.is_finished());
        log.borrow_mut().push("sending".to_owned());
        bind_loopback()
            .send_to(b"wake", receiver.local_addr().unwrap())
            .unwrap();
        handle.join().unwrap();
        assert_eq!(
            *log.borrow(),
            ["receiver waiting", "sending", "received wake"]
        );
    });
}

#[test]
fn two_green_threads_parked_on_one_socket_each_receive_one_datagram() {
    greenweave::run(|| {
        let socket = Rc::new(bind_loopback());
        let receivers: Vec<_> = (0..2)
            .map(|_| {
                let socket = socket.clone();
                greenweave::spawn(move || {
                    let mut buf = [0; 16];
                    let len = socket.recv(&mut buf).unwrap();
                    buf[..len].to_vec()
                })
            })
            .collect();
        greenweave::thread::yield_now();
        let sender = bind_loopback();
        sender
            .send_to(b"one", socket.local_addr().unwrap())
            .unwrap();
        sender
            .send_to(b"two", socket.local_addr().unwrap())
            .unwrap();
        let mut got: Vec<Vec<u8>> = receivers
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect();
        got.sort();
        assert_eq!(got, [b"one".to_vec(), b"two".to_vec()]);
    });
}

#[test]
fn many_datagrams_between_green_threads_arrive_in_order() {
    greenweave::run(|| {
        let server = bind_loopback();
        let server_addr = server.local_addr().unwrap();
        let echo = greenweave::spawn(move || {
            let mut buf = [0; 64];
            for _ in 0..200 {
                let (len, from) = server.recv_from(&mut buf).unwrap();
                server.send_to(&buf[..len], from).unwrap();
            }
        });
        let client = bind_loopback();
        client.connect(server_addr).unwrap();
        let mut buf = [0; 64];
        for i in 0..200u32 {
            client.send(&i.to_le_bytes()).unwrap();
            let len = client.recv(&mut buf).unwrap();
            assert_eq!(&buf[..len], i.to_le_bytes());
        }
        echo.join().unwrap();
    });
}

#[test]
fn peek_and_peek_from_leave_the_datagram_queued() {
    greenweave::run(|| {
        let a = bind_loopback();
        let b = bind_loopback();
        a.send_to(b"first", b.local_addr().unwrap()).unwrap();
        let mut buf = [0; 16];
        let (len, from) = b.peek_from(&mut buf).unwrap();
        assert_eq!(
            (&buf[..len], from),
            (&b"first"[..], a.local_addr().unwrap())
        );
        assert_eq!(b.peek(&mut buf).unwrap(), 5);
        let (len, _) = b.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"first");
    });
}

#[test]
fn a_datagram_longer_than_the_buffer_is_truncated() {
    greenweave::run(|| {
        let a = bind_loopback();
        let b = bind_loopback();
        a.send_to(b"0123456789", b.local_addr().unwrap()).unwrap();
        a.send_to(b"next", b.local_addr().unwrap()).unwrap();
        let mut small = [0; 4];
        assert_eq!(b.recv(&mut small).unwrap(), 4);
        assert_eq!(&small, b"0123");
        // The rest of the first datagram is gone: the next receive is the next datagram.
        let mut buf = [0; 16];
        let len = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"next");
    });
}

#[test]
fn recv_after_sending_to_a_closed_port_reports_connection_refused() {
    greenweave::run(|| {
        let socket = bind_loopback();
        socket.connect(closed_port()).unwrap();
        socket.send(b"anyone?").unwrap();
        // The ICMP port-unreachable arrives as a socket error; the parked recv wakes with it.
        let mut buf = [0; 16];
        let error = socket.recv(&mut buf).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionRefused);
    });
}

#[test]
fn a_clone_shares_the_socket_and_its_timeouts() {
    greenweave::run(|| {
        let socket = bind_loopback();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let clone = socket.try_clone().unwrap();
        assert_eq!(clone.local_addr().unwrap(), socket.local_addr().unwrap());
        assert_eq!(clone.read_timeout().unwrap(), Some(Duration::from_secs(5)));
        bind_loopback()
            .send_to(b"to both", socket.local_addr().unwrap())
            .unwrap();
        let mut buf = [0; 16];
        let len = clone.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"to both");
    });
}

#[test]
fn into_std_gives_back_a_blocking_socket_and_from_std_takes_it_again() {
    greenweave::run(|| {
        let green = bind_loopback();
        let addr = green.local_addr().unwrap();
        let std_socket = green.into_std().unwrap();
        bind_loopback().send_to(b"queued", addr).unwrap();
        let mut buf = [0; 16];
        // Blocking mode: with a datagram queued this returns it rather than WouldBlock.
        let len = std_socket.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"queued");
        let green = UdpSocket::from_std(std_socket).unwrap();
        assert_eq!(green.local_addr().unwrap(), addr);
        bind_loopback().send_to(b"again", addr).unwrap();
        let len = green.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"again");
    });
}

#[test]
fn socket_options_read_back_what_was_set() {
    greenweave::run(|| {
        let socket = bind_loopback();
        socket.set_broadcast(true).unwrap();
        assert!(socket.broadcast().unwrap());
        socket.set_ttl(42).unwrap();
        assert_eq!(socket.ttl().unwrap(), 42);
        socket.set_multicast_ttl_v4(3).unwrap();
        assert_eq!(socket.multicast_ttl_v4().unwrap(), 3);
        socket.set_multicast_loop_v4(false).unwrap();
        assert!(!socket.multicast_loop_v4().unwrap());
        assert!(socket.take_error().unwrap().is_none());
    });
}

#[test]
fn a_green_thread_parked_in_recv_can_be_cancelled() {
    greenweave::run(|| {
        let socket = Rc::new(bind_loopback());
        let handle = {
            let socket = socket.clone();
            greenweave::spawn(move || {
                let mut buf = [0; 16];
                socket.recv(&mut buf)
            })
        };
        greenweave::thread::yield_now();
        handle.cancel();
        assert!(handle.join().unwrap_err().is_cancelled());
        // The socket is still usable by others.
        bind_loopback()
            .send_to(b"after", socket.local_addr().unwrap())
            .unwrap();
        let mut buf = [0; 16];
        let len = socket.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"after");
    });
}

#[test]
#[should_panic(expected = "UdpSocket::bind called outside a greenweave runtime")]
fn bind_outside_a_runtime_panics_saying_so() {
    let _ = UdpSocket::bind("127.0.0.1:0");
}
