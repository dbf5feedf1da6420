//! `greenweave::os::unix::net`: Unix-domain streams deliver every byte in order across green
//! threads, the listener serves clients concurrently, connects fail with std's errors (and wait,
//! rather than fail or lie, while the backlog is full), and datagrams arrive whole.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io::{self, ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use common::run_in_child;
use greenweave::os::unix::net::{UnixDatagram, UnixListener, UnixStream};

mod common;
#[path = "common/fd_table.rs"]
mod fd_table;

/// A socket path unique to this process and test, removed (if anything was created there)
/// when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(test: &str) -> TempPath {
        let name = format!("greenweave-{}-{test}.sock", std::process::id());
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_file(&path);
        TempPath(path)
    }
}

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `len` bytes that are not a short repeating pattern, so a lost, doubled or reordered chunk
/// shows up.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3])
        .collect()
}

#[test]
fn a_pair_round_trips_in_both_directions() {
    greenweave::run(|| {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(b"ping").unwrap();
        let mut buf = [0; 4];
        b.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        b.write_all(b"pong").unwrap();
        a.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");
    });
}

#[test]
fn a_mebibyte_through_a_pair_arrives_intact_across_green_threads() {
    greenweave::run(|| {
        let data = pattern(1 << 20);
        let (mut writer, mut reader) = UnixStream::pair().unwrap();
        let expected = data.clone();
        // The socket buffer is far smaller than 1 MiB: the writer parks many times, and only
        // the reader draining it lets it go on.
        let writing = greenweave::spawn(move || {
            writer.write_all(&data).unwrap();
            // Dropping the writer ends the stream: the reader sees EOF.
        });
        let mut received = Vec::new();
        reader.read_to_end(&mut received).unwrap();
        writing.join().unwrap();
        assert_eq!(received.len(), expected.len());
        if let Some(at) = received.iter().zip(&expected).position(|(a, b)| a != b) {
            panic!(
                "byte {at} differs: got {}, sent {}",
                received[at], expected[at]
            );
        }
    });
}

#[test]
fn one_green_thread_reads_while_another_writes_the_same_stream() {
    greenweave::run(|| {
        let data = pattern(1 << 20);
        let (left, right) = UnixStream::pair().unwrap();
        let (left, right) = (Rc::new(left), Rc::new(right));
        // Both ends send 1 MiB at once. Neither write can finish before the other end reads,
        // so each end needs a reader running while its writer is parked.
        let mut handles = Vec::new();
        for stream in [&left, &right] {
            let (stream, data) = (stream.clone(), data.clone());
            handles.push(greenweave::spawn(move || {
                (&*stream).write_all(&data).unwrap();
                stream.shutdown(Shutdown::Write).unwrap();
                Vec::new()
            }));
        }
        for stream in [&left, &right] {
            let stream = stream.clone();
            handles.push(greenweave::spawn(move || {
                let mut received = Vec::new();
                (&*stream).read_to_end(&mut received).unwrap();
                received
            }));
        }
        let results: Vec<Vec<u8>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(results[2] == data, "left received something else");
        assert!(results[3] == data, "right received something else");
    });
}

#[test]
fn a_parked_read_returns_eof_when_the_peer_is_dropped() {
    greenweave::run(|| {
        let (a, b) = UnixStream::pair().unwrap();
        let log = Rc::new(RefCell::new(Vec::new()));
        let reader = {
            let log = log.clone();
            greenweave::spawn(move || {
                log.borrow_mut().push("reading");
                let mut buf = [0; 16];
                let n = (&a).read(&mut buf).unwrap();
                log.borrow_mut().push(if n == 0 { "eof" } else { "data" });
            })
        };
        greenweave::thread::yield_now();
        log.borrow_mut().push("dropping peer");
        drop(b);
        reader.join().unwrap();
        assert_eq!(*log.borrow(), ["reading", "dropping peer", "eof"]);
    });
}

#[test]
fn writing_to_a_dropped_peer_is_a_broken_pipe() {
    greenweave::run(|| {
        let (mut a, b) = UnixStream::pair().unwrap();
        drop(b);
        let error = a.write_all(b"nobody").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BrokenPipe);
    });
}

#[test]
fn shutdown_write_ends_one_direction_only() {
    greenweave::run(|| {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(b"last words").unwrap();
        a.shutdown(Shutdown::Write).unwrap();
        let mut received = String::new();
        b.read_to_string(&mut received).unwrap();
        assert_eq!(received, "last words");
        b.write_all(b"reply").unwrap();
        let mut buf = [0; 5];
        a.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"reply");
    });
}

#[test]
fn a_read_that_waits_past_the_read_timeout_returns_would_block() {
    greenweave::run(|| {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut buf = [0; 4];
        assert_eq!(a.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
        // The stream still works after a timeout.
        b.write_all(b"late").unwrap();
        a.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"late");
    });
}

#[test]
fn stream_timeouts_are_stored_copied_by_clones_and_zero_is_rejected() {
    greenweave::run(|| {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(a.read_timeout().unwrap(), None);
        a.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        a.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let clone = a.try_clone().unwrap();
        assert_eq!(clone.read_timeout().unwrap(), Some(Duration::from_secs(1)));
        assert_eq!(clone.write_timeout().unwrap(), Some(Duration::from_secs(2)));
        for error in [
            a.set_read_timeout(Some(Duration::ZERO)).unwrap_err(),
            a.set_write_timeout(Some(Duration::ZERO)).unwrap_err(),
        ] {
            assert_eq!(error.kind(), ErrorKind::InvalidInput);
        }
    });
}

#[test]
fn a_clone_writes_to_the_same_connection() {
    greenweave::run(|| {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut clone = a.try_clone().unwrap();
        clone.write_all(b"via clone").unwrap();
        drop((a, clone));
        let mut received = String::new();
        b.read_to_string(&mut received).unwrap();
        assert_eq!(received, "via clone");
    });
}

#[test]
fn the_listener_serves_several_clients_concurrently() {
    let path = TempPath::new("several-clients");
    greenweave::run(move || {
        let listener = UnixListener::bind(&path).unwrap();
        const CLIENTS: u32 = 8;
        let server = greenweave::spawn(move || {
            let mut handlers = Vec::new();
            for _ in 0..CLIENTS {
                let (stream, _) = listener.accept().unwrap();
                // One green thread per connection: a slow client holds up nobody.
                handlers.push(greenweave::spawn(move || {
                    let mut request = [0; 4];
                    (&stream).read_exact(&mut request).unwrap();
                    let id = u32::from_le_bytes(request);
                    (&stream).write_all(&(id * 10).to_le_bytes()).unwrap();
                }));
            }
            for handler in handlers {
                handler.join().unwrap();
            }
        });
        let clients: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let path = path.0.clone();
                greenweave::spawn(move || {
                    let mut stream = UnixStream::connect(&path).unwrap();
                    assert_eq!(stream.peer_addr().unwrap().as_pathname(), Some(&*path));
                    stream.write_all(&id.to_le_bytes()).unwrap();
                    let mut reply = [0; 4];
                    stream.read_exact(&mut reply).unwrap();
                    (id, u32::from_le_bytes(reply))
                })
            })
            .collect();
        let replies: BTreeSet<(u32, u32)> =
            clients.into_iter().map(|c| c.join().unwrap()).collect();
        let expected: BTreeSet<(u32, u32)> = (0..CLIENTS).map(|id| (id, id * 10)).collect();
        assert_eq!(replies, expected);
        server.join().unwrap();
    });
}

#[test]
fn incoming_yields_accepted_connections() {
    let path = TempPath::new("incoming");
    greenweave::run(move || {
        let listener = UnixListener::bind(&path).unwrap();
        assert_eq!(
            listener.local_addr().unwrap().as_pathname(),
            Some(path.as_ref())
        );
        let server = greenweave::spawn(move || {
            let mut greetings = Vec::new();
            for stream in listener.incoming().take(3) {
                let mut text = String::new();
                stream.unwrap().read_to_string(&mut text).unwrap();
                greetings.push(text);
            }
            greetings
        });
        for i in 0..3 {
            let mut client = UnixStream::connect(&path).unwrap();
            write!(client, "client {i}").unwrap();
        }
        assert_eq!(server.join().unwrap(), ["client 0", "client 1", "client 2"]);
    });
}

#[test]
fn connect_waits_while_the_backlog_is_full_and_completes_after_an_accept() {
    let path = TempPath::new("backlog-full");
    greenweave::run(move || {
        // A backlog of 0 holds one pending connection.
        let listener = UnixListener::bind_with_backlog(&path, 0).unwrap();
        let first = UnixStream::connect(&path).unwrap();
        let second = {
            let path = path.0.clone();
            greenweave::spawn(move || {
                let mut stream = UnixStream::connect(&path).unwrap();
                stream.write_all(b"second").unwrap();
                stream
            })
        };
        // However long the second client tries, there is no room until an accept.
        greenweave::thread::sleep(Duration::from_millis(30));
        assert!(
            !second.is_finished(),
            "connect returned while the backlog was full"
        );
        let (_accepted_first, _) = listener.accept().unwrap();
        let _second = second.join().unwrap();
        let (mut accepted_second, _) = listener.accept().unwrap();
        let mut buf = [0; 6];
        accepted_second.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"second");
        drop(first);
    });
}

/// Connects a new non-blocking socket to `path` without waiting: `WouldBlock` when the
/// listener's backlog is full (the connect has then not started).
fn connect_without_waiting(path: &Path) -> io::Result<OwnedFd> {
    // SAFETY: no pointers; a non-negative result is a new fd that we own.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned to us.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data for which all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    assert!(
        bytes.len() < addr.sun_path.len(),
        "the test path fits in sun_path"
    );
    for (slot, byte) in addr.sun_path.iter_mut().zip(bytes) {
        *slot = *byte as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    // SAFETY: `addr` is a valid sockaddr_un of at least `len` bytes.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            len as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// How many connects a listener at `path` holds before its backlog is full, up to `most`.
fn pending_connects_held(path: &Path, most: usize) -> usize {
    let mut held = Vec::new();
    while held.len() < most {
        match connect_without_waiting(path) {
            Ok(fd) => held.push(fd),
            Err(error) if error.kind() == ErrorKind::WouldBlock => break,
            Err(error) => panic!("connect: {error}"),
        }
    }
    held.len()
}

#[test]
fn bind_with_backlog_holds_that_many_pending_connects_plus_the_one_linux_adds() {
    let path = TempPath::new("backlog-3");
    greenweave::run(move || {
        let _listener = UnixListener::bind_with_backlog(&path, 3).unwrap();
        assert_eq!(pending_connects_held(path.as_ref(), 100), 4);
    });
}

#[test]
fn bind_addr_with_backlog_sets_the_backlog_of_an_abstract_listener() {
    let name = format!("greenweave-{}-abstract-backlog", std::process::id());
    let addr = SocketAddr::from_abstract_name(name).unwrap();
    greenweave::run(move || {
        let listener = UnixListener::bind_addr_with_backlog(&addr, 1).unwrap();
        let _first = UnixStream::connect_addr(&addr).unwrap();
        let _second = UnixStream::connect_addr(&addr).unwrap();
        // The queue is full: a third connect waits for an accept.
        let third = greenweave::spawn(move || UnixStream::connect_addr(&addr).map(|_| ()));
        greenweave::thread::yield_now(); // it tries, finds no room and waits
        assert!(!third.is_finished());
        let (_accepted, _) = listener.accept().unwrap();
        third.join().unwrap().unwrap();
    });
}

#[test]
fn a_listener_with_the_default_backlog_holds_a_burst_of_1000_connects_made_before_any_accept() {
    const BURST: usize = 1000;
    let path = TempPath::new("backlog-default");
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-parameter.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    if limit.rlim_cur < 2 * BURST as u64 {
        limit.rlim_cur = limit.rlim_max.min(2 * BURST as u64 + 256);
        // SAFETY: `limit` is a valid rlimit raising the soft limit at most to the hard one.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    }
    greenweave::run(move || {
        let _listener = UnixListener::bind(&path).unwrap();
        assert_eq!(pending_connects_held(path.as_ref(), BURST), BURST);
    });
}

#[test]
fn an_accept_loop_out_of_fds_lets_other_green_threads_run_and_then_serves_the_client() {
    const NAME: &str =
        "an_accept_loop_out_of_fds_lets_other_green_threads_run_and_then_serves_the_client";
    // Far more failed accepts than a loop that lets other green threads run ever sees, and
    // reached at once by one that spins.
    const FAILURES_BEFORE_GIVING_UP: u32 = 100_000;
    let outcome = run_in_child(NAME, || {
        let events = greenweave::run(|| {
            // An abstract name: the child exits without running destructors, so no file.
            let name = format!("greenweave-{}-accept-out-of-fds", std::process::id());
            let addr = SocketAddr::from_abstract_name(name).unwrap();
            let listener = UnixListener::bind_addr(&addr).unwrap();
            // Queued on the listener while there are fds to spare.
            let _client = std::os::unix::net::UnixStream::connect_addr(&addr).unwrap();
            let hog = fd_table::fill_fd_table();
            let events: Rc<RefCell<Vec<String>>> = Rc::default();
            let e = events.clone();
            let acceptor = greenweave::spawn(move || {
                let mut failures = 0;
                // The accept loop of std's documentation: report an error and go on.
                for stream in listener.incoming() {
                    match stream {
                        Ok(_) => return e.borrow_mut().push("accepted".to_owned()),
                        Err(error) => {
                            if failures == 0 {
                                let emfile = error.raw_os_error() == Some(libc::EMFILE);
                                e.borrow_mut()
                                    .push(format!("accept failed, EMFILE: {emfile}"));
                            }
                            failures += 1;
                            if failures == FAILURES_BEFORE_GIVING_UP {
                                return e.borrow_mut().push("gave up".to_owned());
                            }
                        }
                    }
                }
            });
            let e = events.clone();
            let janitor = greenweave::spawn(move || {
                e.borrow_mut().push("another green thread ran".to_owned());
                drop(hog);
            });
            janitor.join().unwrap();
            acceptor.join().unwrap();
            events.take()
        });
        assert_eq!(
            events,
            [
                "another green thread ran",
                "accept failed, EMFILE: true",
                "accepted"
            ]
        );
        std::process::exit(0);
    });
    assert!(outcome.status.success(), "{}", outcome.describe());
}

#[test]
fn connecting_to_a_path_with_nothing_there_is_not_found() {
    let path = TempPath::new("nothing-there");
    greenweave::run(move || {
        let error = UnixStream::connect(&path).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotFound);
    });
}

#[test]
fn connecting_to_a_socket_file_nobody_listens_on_is_refused() {
    let path = TempPath::new("stale");
    // A listener that has gone leaves its socket file behind.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    greenweave::run(move || {
        let error = UnixStream::connect(&path).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionRefused);
    });
}

#[test]
fn a_path_too_long_for_sun_path_is_invalid_input() {
    greenweave::run(|| {
        let long = std::env::temp_dir().join("x".repeat(200));
        let error = UnixStream::connect(&long).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidInput);
    });
}

#[test]
fn an_abstract_address_connects_without_a_file() {
    greenweave::run(|| {
        let name = format!("greenweave-{}-abstract", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        let mut client = UnixStream::connect_addr(&addr).unwrap();
        assert_eq!(
            client.peer_addr().unwrap().as_abstract_name(),
            Some(name.as_bytes())
        );
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(b"abstract").unwrap();
        let mut buf = [0; 8];
        server.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"abstract");
    });
}

#[test]
fn connecting_to_an_unnamed_address_is_invalid_input() {
    greenweave::run(|| {
        let unnamed = UnixDatagram::unbound().unwrap().local_addr().unwrap();
        assert!(unnamed.is_unnamed());
        let error = UnixStream::connect_addr(&unnamed).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidInput);
    });
}

#[test]
fn into_std_and_from_std_keep_the_connection() {
    greenweave::run(|| {
        let (a, b) = UnixStream::pair().unwrap();
        let mut std_a = a.into_std().unwrap();
        std_a.write_all(b"from std").unwrap();
        let mut green_b = UnixStream::from_std(b.into_std().unwrap()).unwrap();
        let mut buf = [0; 8];
        green_b.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"from std");
    });
}

#[test]
fn datagrams_sent_to_a_path_arrive_with_the_senders_address() {
    let server_path = TempPath::new("dgram-server");
    let client_path = TempPath::new("dgram-client");
    greenweave::run(move || {
        let server = UnixDatagram::bind(&server_path).unwrap();
        let client = UnixDatagram::bind(&client_path).unwrap();
        assert_eq!(client.send_to(b"request", &server_path).unwrap(), 7);
        let mut buf = [0; 16];
        let (len, from) = server.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"request");
        assert_eq!(from.as_pathname(), Some(client_path.as_ref()));
        server.send_to_addr(b"reply", &from).unwrap();
        let (len, from) = client.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"reply");
        assert_eq!(from.as_pathname(), Some(server_path.as_ref()));
    });
}

#[test]
fn a_datagram_from_an_unbound_socket_has_an_unnamed_sender() {
    let path = TempPath::new("dgram-unbound");
    greenweave::run(move || {
        let server = UnixDatagram::bind(&path).unwrap();
        UnixDatagram::unbound()
            .unwrap()
            .send_to(b"anonymous", &path)
            .unwrap();
        let mut buf = [0; 16];
        let (len, from) = server.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"anonymous");
        assert!(from.is_unnamed());
    });
}

#[test]
fn connected_datagram_sockets_send_and_recv() {
    let a_path = TempPath::new("dgram-connected-a");
    let b_path = TempPath::new("dgram-connected-b");
    greenweave::run(move || {
        let a = UnixDatagram::bind(&a_path).unwrap();
        let b = UnixDatagram::bind(&b_path).unwrap();
        assert_eq!(a.peer_addr().unwrap_err().kind(), ErrorKind::NotConnected);
        a.connect(&b_path).unwrap();
        assert_eq!(a.peer_addr().unwrap().as_pathname(), Some(b_path.as_ref()));
        a.send(b"connected").unwrap();
        let mut buf = [0; 16];
        let len = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"connected");
    });
}

#[test]
fn a_datagram_pair_keeps_message_boundaries() {
    greenweave::run(|| {
        let (a, b) = UnixDatagram::pair().unwrap();
        a.send(b"one").unwrap();
        a.send(b"two!").unwrap();
        let mut buf = [0; 16];
        assert_eq!(b.recv(&mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"one");
        assert_eq!(b.recv(&mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"two!");
    });
}

#[test]
fn a_green_thread_parked_in_datagram_recv_is_woken_by_a_send_from_another() {
    greenweave::run(|| {
        let (a, b) = UnixDatagram::pair().unwrap();
        let log = Rc::new(RefCell::new(Vec::new()));
        let receiver = {
            let log = log.clone();
            greenweave::spawn(move || {
                log.borrow_mut().push("receiver waiting".to_owned());
                let mut buf = [0; 16];
                let len = b.recv(&mut buf).unwrap();
                log.borrow_mut()
                    .push(format!("received {}", String::from_utf8_lossy(&buf[..len])));
            })
        };
        greenweave::thread::yield_now();
        assert!(!receiver.is_finished());
        log.borrow_mut().push("sending".to_owned());
        a.send(b"wake").unwrap();
        receiver.join().unwrap();
        assert_eq!(
            *log.borrow(),
            ["receiver waiting", "sending", "received wake"]
        );
    });
}

#[test]
fn a_datagram_recv_that_waits_past_the_read_timeout_returns_would_block() {
    greenweave::run(|| {
        let (a, _b) = UnixDatagram::pair().unwrap();
        a.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut buf = [0; 16];
        assert_eq!(a.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
        assert_eq!(
            a.recv_from(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        assert_eq!(
            a.set_write_timeout(Some(Duration::ZERO))
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidInput
        );
    });
}

#[test]
fn send_to_a_full_receiver_parks_until_it_reads_and_loses_nothing() {
    let path = TempPath::new("dgram-flood");
    greenweave::run(move || {
        const COUNT: u32 = 1000;
        let receiver = UnixDatagram::bind(&path).unwrap();
        let sender = {
            let path = path.0.clone();
            greenweave::spawn(move || {
                let socket = UnixDatagram::unbound().unwrap();
                let mut datagram = [0u8; 256];
                for i in 0..COUNT {
                    datagram[..4].copy_from_slice(&i.to_le_bytes());
                    socket.send_to(&datagram, &path).unwrap();
                }
            })
        };
        // The receiver's queue holds far fewer than COUNT datagrams: the sender parks.
        greenweave::thread::yield_now();
        assert!(!sender.is_finished(), "the receiver's queue never filled");
        let mut buf = [0u8; 256];
        for i in 0..COUNT {
            assert_eq!(receiver.recv(&mut buf).unwrap(), 256);
            assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), i);
        }
        sender.join().unwrap();
    });
}

#[test]
fn datagram_into_std_and_from_std_keep_the_socket() {
    greenweave::run(|| {
        let (a, b) = UnixDatagram::pair().unwrap();
        let std_a = a.into_std().unwrap();
        std_a.send(b"from std").unwrap();
        let b = UnixDatagram::from_std(b.into_std().unwrap()).unwrap();
        let clone = b.try_clone().unwrap();
        let mut buf = [0; 16];
        let len = clone.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"from std");
        assert!(b.take_error().unwrap().is_none());
    });
}

#[test]
#[should_panic(expected = "UnixStream::connect called outside a greenweave runtime")]
fn connect_outside_a_runtime_panics_saying_so() {
    let _ = UnixStream::connect("/nonexistent/greenweave.sock");
}
