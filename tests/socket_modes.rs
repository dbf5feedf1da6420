//! std's socket surface on the green types: `set_nonblocking` (an operation that would park
//! returns `WouldBlock` at once, and only that handle's choice changes, never the fd's mode
//! underneath), `peek`/`peek_from` on the Unix types, and timeouts reported as std on Linux
//! reports them (`WouldBlock` for a read or write timeout, `TimedOut` for `connect_timeout`).

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr as UnixSocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use greenweave::io::Async;
use greenweave::net::{TcpListener, TcpStream, UdpSocket};
use greenweave::os::unix::net::{UnixDatagram, UnixListener, UnixStream};

/// A socket path unique to this process and test, removed when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(test: &str) -> TempPath {
        let name = format!("greenweave-modes-{}-{test}.sock", std::process::id());
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_file(&path);
        TempPath(path)
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A green thread that only records that it ran: if it has not run, nothing has parked.
fn witness() -> Rc<Cell<bool>> {
    let ran = Rc::new(Cell::new(false));
    let flag = ran.clone();
    greenweave::spawn(move || flag.set(true));
    ran
}

fn is_nonblocking_fd(fd: &impl AsRawFd) -> bool {
    // SAFETY: F_GETFL takes no pointer; the fd is live for the call.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    assert!(flags >= 0, "F_GETFL: {}", std::io::Error::last_os_error());
    flags & libc::O_NONBLOCK != 0
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (served, _) = listener.accept().unwrap();
    (client, served)
}

// ---------------------------------------------------------------------------------------------
// set_nonblocking
// ---------------------------------------------------------------------------------------------

#[test]
fn a_non_blocking_tcp_read_returns_would_block_at_once_without_parking() {
    greenweave::run(|| {
        let (client, mut served) = tcp_pair();
        served.set_nonblocking(true).unwrap();
        let ran = witness();
        let error = served.read(&mut [0; 8]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        let error = served.peek(&mut [0; 8]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        assert!(!ran.get(), "the non-blocking read parked");
        // Data is read at once, and blocking mode parks again until data comes.
        (&client).write_all(b"ab").unwrap();
        let mut buf = [0; 8];
        assert_eq!(served.read(&mut buf).unwrap(), 2);
        served.set_nonblocking(false).unwrap();
        let writer = greenweave::spawn(move || (&client).write_all(b"cd").unwrap());
        assert_eq!(served.read(&mut buf).unwrap(), 2);
        assert_eq!(&buf[..2], b"cd");
        writer.join().unwrap();
        assert!(ran.get());
    });
}

#[test]
fn a_non_blocking_tcp_write_to_a_full_connection_returns_would_block_after_filling_it() {
    greenweave::run(|| {
        let (mut client, served) = tcp_pair();
        client.set_nonblocking(true).unwrap();
        let ran = witness();
        let chunk = vec![7_u8; 64 * 1024];
        let mut written = 0_usize;
        let error = loop {
            match client.write(&chunk) {
                Ok(n) => written += n,
                Err(error) => break error,
            }
            assert!(
                written < 256 * 1024 * 1024,
                "256 MiB into a connection nobody reads"
            );
        };
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        assert!(written > 0);
        assert!(!ran.get(), "a non-blocking write parked");
        // Everything written arrives.
        client.set_nonblocking(false).unwrap();
        drop(client);
        let mut received = Vec::new();
        (&served).read_to_end(&mut received).unwrap();
        assert_eq!(received.len(), written);
        assert!(received.iter().all(|&byte| byte == 7));
    });
}

#[test]
fn a_non_blocking_tcp_accept_returns_would_block_then_the_queued_connection() {
    greenweave::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let ran = witness();
        let error = listener.accept().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        let error = listener.incoming().next().unwrap().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        assert!(!ran.get(), "the non-blocking accept parked");
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut served, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        // An accepted stream parks (Linux: accept4 does not pass O_NONBLOCK on).
        let writer = greenweave::spawn(move || client.write_all(b"x").unwrap());
        let mut buf = [0; 1];
        served.read_exact(&mut buf).unwrap();
        writer.join().unwrap();
    });
}

#[test]
fn a_clone_starts_in_the_originals_mode_and_keeps_its_own() {
    greenweave::run(|| {
        let (_client, served) = tcp_pair();
        served.set_nonblocking(true).unwrap();
        let clone = served.try_clone().unwrap();
        assert_eq!(
            (&clone).read(&mut [0; 1]).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        // Switching the original back does not switch the clone (std's share the file's flag;
        // here the fd stays non-blocking and each handle keeps its choice).
        served.set_nonblocking(false).unwrap();
        assert_eq!(
            (&clone).read(&mut [0; 1]).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        let blocking_clone = served.try_clone().unwrap();
        blocking_clone
            .set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let error = (&blocking_clone).read(&mut [0; 1]).unwrap_err();
        assert!(
            error.to_string().contains("read timeout"),
            "parked: {error}"
        );

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let listener_clone = listener.try_clone().unwrap();
        assert_eq!(
            listener_clone.accept().unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
    });
}

#[test]
fn set_nonblocking_false_leaves_the_fd_non_blocking_underneath() {
    greenweave::run(|| {
        let (client, served) = tcp_pair();
        for nonblocking in [true, false] {
            served.set_nonblocking(nonblocking).unwrap();
            assert!(is_nonblocking_fd(&served), "the runtime needs O_NONBLOCK");
        }
        // Still a working, parking stream.
        let reader = greenweave::spawn(move || {
            let mut buf = [0; 3];
            (&served).read_exact(&mut buf).unwrap();
            buf
        });
        (&client).write_all(b"abc").unwrap();
        assert_eq!(&reader.join().unwrap(), b"abc");
    });
}

/// With the hooks, libc's `recv` on a green socket's fd sees the fd as it is (non-blocking),
/// whatever the green handle's own choice: the hooks return `EAGAIN` at once, never park.
#[cfg(feature = "hooks")]
#[test]
fn the_hooks_see_a_green_sockets_fd_as_non_blocking_whatever_the_handles_mode() {
    greenweave::run(|| {
        let (_client, served) = tcp_pair();
        for nonblocking in [false, true, false] {
            served.set_nonblocking(nonblocking).unwrap();
            let ran = witness();
            let mut byte = 0_u8;
            // SAFETY: one writable byte; the fd is live.
            let received = unsafe { libc::recv(served.as_raw_fd(), (&raw mut byte).cast(), 1, 0) };
            let error = std::io::Error::last_os_error();
            assert_eq!(received, -1);
            assert_eq!(error.raw_os_error(), Some(libc::EAGAIN), "{error}");
            assert!(!ran.get(), "the hooked recv parked");
        }
    });
}

#[test]
fn a_non_blocking_udp_receive_returns_would_block_for_each_receive_kind() {
    greenweave::run(|| {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.connect(socket.local_addr().unwrap()).unwrap();
        socket.set_nonblocking(true).unwrap();
        let ran = witness();
        let mut buf = [0; 8];
        for error in [
            socket.recv(&mut buf).unwrap_err(),
            socket.recv_from(&mut buf).unwrap_err(),
            socket.peek(&mut buf).unwrap_err(),
            socket.peek_from(&mut buf).unwrap_err(),
        ] {
            assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        }
        assert!(!ran.get(), "a non-blocking receive parked");
        socket.send(b"hey").unwrap();
        assert_eq!(socket.recv(&mut buf).unwrap(), 3);
    });
}

#[test]
fn non_blocking_unix_types_return_would_block_where_they_would_park() {
    let path = TempPath::new("unix-nonblocking");
    let at = path.0.clone();
    greenweave::run(move || {
        let listener = UnixListener::bind(&at).unwrap();
        listener.set_nonblocking(true).unwrap();
        let (mut left, right) = UnixStream::pair().unwrap();
        right.set_nonblocking(true).unwrap();
        let (dgram_left, dgram_right) = UnixDatagram::pair().unwrap();
        dgram_right.set_nonblocking(true).unwrap();
        let ran = witness();
        let mut buf = [0; 8];
        for error in [
            listener.accept().unwrap_err(),
            (&right).read(&mut buf).unwrap_err(),
            right.peek(&mut buf).unwrap_err(),
            dgram_right.recv(&mut buf).unwrap_err(),
            dgram_right.recv_from(&mut buf).unwrap_err(),
            dgram_right.peek(&mut buf).unwrap_err(),
            dgram_right.peek_from(&mut buf).unwrap_err(),
        ] {
            assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        }
        assert!(!ran.get(), "a non-blocking call parked");
        let _client = UnixStream::connect(&at).unwrap();
        listener.accept().unwrap();
        left.write_all(b"s").unwrap();
        assert_eq!((&right).read(&mut buf).unwrap(), 1);
        dgram_left.send(b"d").unwrap();
        assert_eq!(dgram_right.recv(&mut buf).unwrap(), 1);
    });
}

#[test]
fn a_non_blocking_unix_datagram_send_to_a_full_receiver_returns_would_block() {
    greenweave::run(|| {
        let (sender, receiver) = UnixDatagram::pair().unwrap();
        sender.set_nonblocking(true).unwrap();
        let ran = witness();
        let mut sent = 0_usize;
        let error = loop {
            match sender.send(&[1; 512]) {
                Ok(_) => sent += 1,
                Err(error) => break error,
            }
            assert!(
                sent < 1_000_000,
                "a million datagrams and the receiver is not full"
            );
        };
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        assert!(!ran.get(), "a non-blocking send parked");
        // Every datagram sent is there.
        receiver.set_nonblocking(true).unwrap();
        let mut received = 0_usize;
        let mut buf = [0; 512];
        while receiver.recv(&mut buf).is_ok() {
            received += 1;
        }
        assert_eq!(received, sent);
    });
}

#[test]
fn a_non_blocking_async_returns_would_block_but_readable_still_waits() {
    greenweave::run(|| {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (a, mut b) = (Async::new(a).unwrap(), Async::new(b).unwrap());
        b.set_nonblocking(true);
        let ran = witness();
        assert_eq!(
            b.read(&mut [0; 4]).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        let error = b
            .read_with(|inner| (&*inner).read(&mut [0; 4]))
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WouldBlock);
        assert!(!ran.get(), "a non-blocking Async read parked");
        let writer = greenweave::spawn(move || (&a).write_all(b"late").unwrap());
        b.readable().unwrap(); // an explicit wait parks
        let mut buf = [0; 4];
        b.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"late");
        writer.join().unwrap();
    });
}

#[test]
fn a_non_blocking_socket_returned_from_run_reads_outside_any_runtime() {
    let (left, right) = greenweave::run(|| {
        let (left, right) = UnixStream::pair().unwrap();
        right.set_nonblocking(true).unwrap();
        (left, right)
    });
    // No runtime: a non-blocking call never needs one.
    let error = (&right).read(&mut [0; 4]).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::WouldBlock);
    (&left).write_all(b"out").unwrap();
    let mut buf = [0; 4];
    assert_eq!((&right).read(&mut buf).unwrap(), 3);
    assert_eq!(&buf[..3], b"out");
}

// ---------------------------------------------------------------------------------------------
// peek and peek_from on the Unix types
// ---------------------------------------------------------------------------------------------

#[test]
fn unix_stream_peek_parks_until_data_and_leaves_it_queued() {
    greenweave::run(|| {
        let (left, right) = UnixStream::pair().unwrap();
        let log = Rc::new(std::cell::RefCell::new(Vec::new()));
        let writer_log = log.clone();
        let writer = greenweave::spawn(move || {
            writer_log.borrow_mut().push("writing");
            (&left).write_all(b"peeked").unwrap();
            left
        });
        let mut buf = [0; 16];
        let len = right.peek(&mut buf).unwrap(); // parks until the writer has written
        log.borrow_mut().push("peeked");
        assert_eq!(&buf[..len], b"peeked");
        assert_eq!(right.peek(&mut buf[..3]).unwrap(), 3);
        let mut all = [0; 6];
        (&right).read_exact(&mut all).unwrap();
        assert_eq!(&all, b"peeked");
        assert_eq!(*log.borrow(), ["writing", "peeked"]);
        drop(writer.join().unwrap());
        assert_eq!(right.peek(&mut buf).unwrap(), 0, "end of file peeks as 0");
    });
}

#[test]
fn unix_datagram_peek_from_names_path_abstract_and_unnamed_senders() {
    let receiver_path = TempPath::new("peek-from-receiver");
    let sender_path = TempPath::new("peek-from-sender");
    let (receiver_at, sender_at) = (receiver_path.0.clone(), sender_path.0.clone());
    greenweave::run(move || {
        let receiver = UnixDatagram::bind(&receiver_at).unwrap();
        let named = UnixDatagram::bind(&sender_at).unwrap();
        let abstract_name = format!("greenweave-modes-{}", std::process::id());
        let abstract_addr = UnixSocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let in_abstract = UnixDatagram::bind_addr(&abstract_addr).unwrap();
        let unnamed = UnixDatagram::unbound().unwrap();
        named.send_to(b"from a path", &receiver_at).unwrap();
        in_abstract.send_to(b"from a name", &receiver_at).unwrap();
        unnamed.send_to(b"from nobody", &receiver_at).unwrap();

        let mut buf = [0; 32];
        let (len, from) = receiver.peek_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"from a path");
        assert_eq!(from.as_pathname(), Some(sender_at.as_path()));
        assert_eq!(
            receiver.recv(&mut buf).unwrap(),
            len,
            "the peeked datagram is next"
        );

        let (len, from) = receiver.peek_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"from a name");
        assert_eq!(from.as_abstract_name(), Some(abstract_name.as_bytes()));
        receiver.recv(&mut buf).unwrap();

        let (len, from) = receiver.peek_from(&mut buf[..4]).unwrap();
        assert_eq!(
            (len, &buf[..4]),
            (4, &b"from"[..]),
            "truncated to the buffer"
        );
        assert!(from.is_unnamed(), "{from:?}");
        let (len, _) = receiver.recv_from(&mut buf).unwrap();
        assert_eq!(
            &buf[..len],
            b"from nobody",
            "a truncated peek leaves it whole"
        );
    });
}

#[test]
fn unix_peeks_wait_no_longer_than_the_read_timeout() {
    greenweave::run(|| {
        let (_left, right) = UnixStream::pair().unwrap();
        right
            .set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let error = right.peek(&mut [0; 4]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        let (_sender, receiver) = UnixDatagram::pair().unwrap();
        receiver
            .set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        for error in [
            receiver.peek(&mut [0; 4]).unwrap_err(),
            receiver.peek_from(&mut [0; 4]).unwrap_err(),
        ] {
            assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
            assert!(error.to_string().contains("read timeout"), "{error}");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Timeouts: std on Linux reports a read or write timeout as WouldBlock
// ---------------------------------------------------------------------------------------------

#[test]
fn a_read_timeout_is_would_block_naming_the_read_timeout_and_a_write_timeout_likewise() {
    greenweave::run(|| {
        let (mut left, mut right) = UnixStream::pair().unwrap();
        right
            .set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let error = right.read(&mut [0; 4]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        let message = error.to_string();
        assert!(message.contains("UnixStream::read"), "{message}");
        assert!(message.contains("read timeout (10ms)"), "{message}");

        left.set_write_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let chunk = [0_u8; 16 * 1024];
        let error = loop {
            if let Err(error) = left.write(&chunk) {
                break error;
            }
        };
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        assert!(
            error.to_string().contains("write timeout (10ms)"),
            "{error}"
        );
    });
}

#[test]
fn a_connect_timeout_that_passes_is_timed_out_as_std() {
    greenweave::run(|| {
        // A listener whose queue (backlog 0: one connection on Linux) is full drops SYNs, so
        // a further connect waits until its timeout.
        let listener = TcpListener::bind_with_backlog("127.0.0.1:0", 0).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut connected = Vec::new();
        let error = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
                Ok(stream) => connected.push(stream),
                Err(error) => break error,
            }
            assert!(connected.len() < 64, "the listener's queue never filled");
        };
        assert_eq!(error.kind(), ErrorKind::TimedOut, "{error}");
    });
}
