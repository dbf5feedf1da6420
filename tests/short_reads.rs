//! A TCP read that returns fewer bytes than it asked for (a short read) emptied the kernel's
//! receive queue, so it ends the stream's cached readability: the next read parks until an
//! edge instead of asking the kernel only to hear `EAGAIN`. These tests pin that down by the
//! order of events (a read that parks lets another green thread run first), and pin down that
//! nothing is lost by it: bytes that arrive after a short read wake the reader; the end of the
//! stream and bytes past an urgent mark are still read when the edge that announced them was
//! taken before the short read; a short peek, a short datagram and a short read of a Unix
//! stream end nothing.
//!
//! A read that would wait for an edge that never comes would hang: every reader has a read
//! timeout, so such a bug fails the test with `WouldBlock` instead.

use std::cell::RefCell;
use std::io::{IoSliceMut, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Duration;

use greenweave::net::{TcpListener, TcpStream, UdpSocket};
use greenweave::os::unix::net::UnixStream;
use greenweave::select;
use greenweave::thread;

/// A read that waits this long waited for an edge that never came.
const LIMIT: Duration = Duration::from_secs(20);

/// Long enough for the scheduler to run `epoll_wait` (its ready queue is empty meanwhile), so
/// the edges of everything sent before are taken into the reactor's cache.
const LET_THE_REACTOR_POLL: Duration = Duration::from_millis(10);

/// A connected pair: (the connecting side, the accepted side), both with `LIMIT` as their read
/// timeout and Nagle off (each write is sent at once).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (served, _) = listener.accept().unwrap();
    for stream in [&client, &served] {
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(LIMIT)).unwrap();
    }
    (client, served)
}

type Log = Rc<RefCell<Vec<&'static str>>>;

/// Spawns a green thread that only records that it ran: it runs when the spawner parks.
fn spawn_marker(log: &Log) -> greenweave::thread::JoinHandle<()> {
    let log = log.clone();
    greenweave::spawn(move || log.borrow_mut().push("the other green thread ran"))
}

/// Reads from `reader` after a short read, with bytes `writer` sent since (and no poll in
/// between): the read parks for their edge, and gets them.
fn read_after_short_read_waits_for_the_edge(writer: &TcpStream, reader: &TcpStream) {
    let (mut writer, mut reader) = (writer, reader);
    writer.write_all(b"first").unwrap();
    let mut buf = [0; 64];
    assert_eq!(
        reader.read(&mut buf).unwrap(),
        5,
        "a read of 5 queued bytes"
    );
    // Queued in the kernel now, its edge not yet taken by the reactor: nothing runs between
    // this write and the read below.
    writer.write_all(b"second").unwrap();
    let log: Log = Rc::default();
    let marker = spawn_marker(&log);
    let n = reader.read(&mut buf).unwrap();
    log.borrow_mut()
        .push("the read after the short read returned");
    assert_eq!(&buf[..n], b"second");
    assert_eq!(
        *log.borrow(),
        [
            "the other green thread ran",
            "the read after the short read returned"
        ],
        "the read after a short read parks until the edge instead of reading at once"
    );
    marker.join().unwrap();
}

#[test]
fn a_short_read_on_an_accepted_stream_ends_its_readability_until_the_next_edge() {
    greenweave::run(|| {
        let (client, served) = tcp_pair();
        read_after_short_read_waits_for_the_edge(&client, &served);
    });
}

#[test]
fn a_short_read_on_a_connected_stream_ends_its_readability_until_the_next_edge() {
    // The connecting side was registered before it connected, when epoll reports the socket
    // hung up: that must not count as "read side closed" once it is connected.
    greenweave::run(|| {
        let (client, served) = tcp_pair();
        thread::sleep(LET_THE_REACTOR_POLL);
        read_after_short_read_waits_for_the_edge(&served, &client);
    });
}

#[test]
fn a_read_that_fills_the_buffer_reads_the_rest_without_waiting() {
    greenweave::run(|| {
        let (mut client, mut served) = tcp_pair();
        client.write_all(&[7; 100]).unwrap();
        thread::sleep(LET_THE_REACTOR_POLL);
        let mut buf = [0; 64];
        assert_eq!(served.read(&mut buf).unwrap(), 64);
        let log: Log = Rc::default();
        let marker = spawn_marker(&log);
        assert_eq!(served.read(&mut buf).unwrap(), 36);
        log.borrow_mut().push("the second read returned");
        assert_eq!(
            *log.borrow(),
            ["the second read returned"],
            "a full read is no proof of an empty queue: the next read asks the kernel at once"
        );
        marker.join().unwrap();
        assert_eq!(*log.borrow().last().unwrap(), "the other green thread ran");
    });
}

#[test]
fn a_short_vectored_read_ends_readability_and_the_next_bytes_still_wake_the_reader() {
    greenweave::run(|| {
        let (mut client, mut served) = tcp_pair();
        client.write_all(b"one").unwrap();
        let (mut head, mut tail) = ([0; 2], [0; 30]);
        let read = served
            .read_vectored(&mut [IoSliceMut::new(&mut head), IoSliceMut::new(&mut tail)])
            .unwrap();
        assert_eq!((read, &head, &tail[..1]), (3, b"on", &b"e"[..]));
        client.write_all(b"two").unwrap();
        let read = served
            .read_vectored(&mut [IoSliceMut::new(&mut head), IoSliceMut::new(&mut tail)])
            .unwrap();
        assert_eq!((read, &head, &tail[..1]), (3, b"tw", &b"o"[..]));
    });
}

#[test]
fn bytes_sent_after_a_short_read_wake_a_reader_parked_for_them() {
    greenweave::run(|| {
        let (client, mut served) = tcp_pair();
        let writer = greenweave::spawn(move || {
            let mut client = client;
            for message in [&b"ping"[..], b"pong", b"last"] {
                thread::sleep(Duration::from_millis(1));
                client.write_all(message).unwrap();
            }
            client
        });
        let mut received = Vec::new();
        let mut buf = [0; 64];
        while received.len() < 12 {
            let n = served.read(&mut buf).unwrap();
            received.extend_from_slice(&buf[..n]);
        }
        assert_eq!(received, b"pingponglast");
        drop(writer.join().unwrap());
    });
}

#[test]
fn the_end_of_the_stream_announced_with_the_last_bytes_is_read_after_a_short_read() {
    // Data and FIN arrive together and the reactor takes their one edge before the reads: the
    // short read that follows must not end readability, since no edge will come again.
    greenweave::run(|| {
        let (mut client, mut served) = tcp_pair();
        client.write_all(b"last words").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        thread::sleep(LET_THE_REACTOR_POLL);
        let mut buf = [0; 64];
        assert_eq!(served.read(&mut buf).unwrap(), 10);
        assert_eq!(&buf[..10], b"last words");
        assert_eq!(served.read(&mut buf).unwrap(), 0, "the end of the stream");
        assert_eq!(served.read(&mut buf).unwrap(), 0, "and again, as std");
    });
}

#[test]
fn a_shutdown_after_a_short_read_is_read_as_the_end_of_the_stream() {
    greenweave::run(|| {
        let (mut client, mut served) = tcp_pair();
        client.write_all(b"hello").unwrap();
        thread::sleep(LET_THE_REACTOR_POLL);
        let mut buf = [0; 64];
        assert_eq!(served.read(&mut buf).unwrap(), 5);
        client.shutdown(Shutdown::Write).unwrap();
        assert_eq!(served.read(&mut buf).unwrap(), 0);
    });
}

#[test]
fn a_half_closed_stream_delivers_every_byte_then_carries_the_reply_back() {
    greenweave::run(|| {
        let (mut client, mut served) = tcp_pair();
        let request: Vec<u8> = (0..3000_u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&request).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        thread::sleep(LET_THE_REACTOR_POLL);
        // Reads of a prime size, so most of them fill the buffer and the last one is short.
        let mut received = Vec::new();
        let mut buf = [0; 997];
        loop {
            let n = served.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            received.extend_from_slice(&buf[..n]);
        }
        assert_eq!(received, request);
        served.write_all(b"got it all").unwrap();
        drop(served);
        let mut reply = Vec::new();
        client.read_to_end(&mut reply).unwrap();
        assert_eq!(reply, b"got it all");
    });
}

#[test]
fn bytes_past_an_urgent_mark_are_read_after_the_read_that_stops_at_it() {
    // TCP's read stops short at the urgent mark with bytes still queued after it: the reactor
    // hears of the urgent data (EPOLLPRI) and keeps the stream readable.
    greenweave::run(|| {
        let (mut client, mut served) = tcp_pair();
        client.write_all(b"abc").unwrap();
        // SAFETY: one byte from a live buffer to a socket this test owns.
        let sent =
            unsafe { libc::send(client.as_raw_fd(), b"X".as_ptr().cast(), 1, libc::MSG_OOB) };
        assert_eq!(
            sent,
            1,
            "send(MSG_OOB): {}",
            std::io::Error::last_os_error()
        );
        client.write_all(b"def").unwrap();
        thread::sleep(LET_THE_REACTOR_POLL);
        let mut buf = [0; 64];
        let n = served.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"abc", "the read stops at the urgent mark");
        let n = served.read(&mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            b"def",
            "the urgent byte is out of band; the rest follows"
        );
    });
}

#[test]
fn a_short_peek_leaves_the_bytes_readable_at_once() {
    greenweave::run(|| {
        let (mut client, mut served) = tcp_pair();
        client.write_all(b"peeked").unwrap();
        thread::sleep(LET_THE_REACTOR_POLL);
        let mut buf = [0; 64];
        assert_eq!(served.peek(&mut buf).unwrap(), 6);
        let log: Log = Rc::default();
        let marker = spawn_marker(&log);
        let n = served.read(&mut buf).unwrap();
        log.borrow_mut().push("the read after the peek returned");
        assert_eq!(&buf[..n], b"peeked");
        assert_eq!(*log.borrow(), ["the read after the peek returned"]);
        marker.join().unwrap();
    });
}

#[test]
fn a_datagram_shorter_than_the_buffer_does_not_hide_the_next_one() {
    greenweave::run(|| {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver.set_read_timeout(Some(LIMIT)).unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = receiver.local_addr().unwrap();
        sender.send_to(b"one", to).unwrap();
        sender.send_to(b"two", to).unwrap();
        thread::sleep(LET_THE_REACTOR_POLL);
        let mut buf = [0; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"one");
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"two");
    });
}

#[test]
fn a_unix_stream_read_stopped_by_passed_fds_leaves_the_rest_readable() {
    // A Unix stream read stops after a message that carries fds, with more bytes queued: on a
    // Unix stream a short read proves nothing, and the next read asks the kernel.
    greenweave::run(|| {
        let (left, mut right) = UnixStream::pair().unwrap();
        right.set_read_timeout(Some(LIMIT)).unwrap();
        send_with_fd(&left, b"fd", left.as_raw_fd());
        (&left).write_all(b"after").unwrap();
        thread::sleep(LET_THE_REACTOR_POLL);
        let mut buf = [0; 64];
        let n = right.read(&mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            b"fd",
            "the read stops after the message with the fd"
        );
        let n = right.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"after");
    });
}

/// Sends `bytes` on `stream` with `fd` attached (`SCM_RIGHTS`).
fn send_with_fd(stream: &UnixStream, bytes: &[u8], fd: i32) {
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(size_of::<i32>() as u32) } as usize;
    let mut control = vec![0_u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: all-zero is a valid msghdr.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = space as _;
    // SAFETY: `message` points at a control buffer of CMSG_SPACE(one int) bytes, 8-aligned, so
    // CMSG_FIRSTHDR is a header inside it with room for one fd after it; `iov` and `bytes`
    // outlive the sendmsg.
    let sent = unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(size_of::<i32>() as u32) as _;
        libc::CMSG_DATA(header).cast::<i32>().write_unaligned(fd);
        libc::sendmsg(stream.as_raw_fd(), &message, 0)
    };
    assert_eq!(
        sent,
        bytes.len() as isize,
        "sendmsg: {}",
        std::io::Error::last_os_error()
    );
}

#[test]
fn a_readable_branch_after_a_short_read_waits_for_the_next_bytes() {
    greenweave::run(|| {
        let (client, mut served) = tcp_pair();
        (&client).write_all(b"a").unwrap();
        let mut buf = [0; 64];
        assert_eq!(served.read(&mut buf).unwrap(), 1);
        let log: Log = Rc::default();
        let writer = greenweave::spawn({
            let log = log.clone();
            move || {
                log.borrow_mut().push("the writer sent");
                (&client).write_all(b"b").unwrap();
                client
            }
        });
        select! {
            readable(served) => log.borrow_mut().push("the stream was readable"),
            timeout(LIMIT) => panic!("no edge after the short read"),
        }
        assert_eq!(
            *log.borrow(),
            ["the writer sent", "the stream was readable"]
        );
        assert_eq!(served.read(&mut buf).unwrap(), 1);
        assert_eq!(buf[0], b'b');
        drop(writer.join().unwrap());
    });
}
