//! Green TCP behaves as `std::net` does, with reads and writes parking only their green
//! thread: echo round trips from 1 byte to 16 MiB with every byte checked, thousands of
//! connections on one OS thread, timeouts, refused connections, EOF, resets, broken pipes
//! (without dying of SIGPIPE), std's `BufRead` on a green stream, hostname lookups that do not
//! stall the other green threads, one green thread reading while another writes the same
//! stream, and `Async` on a pipe.
//!
//! Every test runs both natively and under qemu-user, so sizes are chosen to stay quick there:
//! they exercise partial reads and writes (far beyond socket buffer sizes), not throughput.
//! Durations appear only as lower bounds, or as generous limits that turn a hang into a
//! failure.

mod common;
#[path = "common/fd_table.rs"]
mod fd_table;

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::run_in_child;
use greenweave::io::Async;
use greenweave::net::{TcpListener, TcpStream};
use greenweave::thread::{self, JoinHandle};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// `len` bytes that differ between streams (`seed`) and do not repeat with any short period,
/// so a lost, duplicated or reordered chunk shows up as a mismatch.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 32) as u8
        })
        .collect()
}

/// Asserts two byte strings are equal, reporting the first difference instead of printing
/// megabytes.
fn assert_same_bytes(got: &[u8], expected: &[u8], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    if let Some(at) = got.iter().zip(expected).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {at} of {}: got {:#04x}, expected {:#04x}",
            expected.len(),
            got[at],
            expected[at]
        );
    }
}

/// The message of a panic whose payload is a `&str` or a `String`.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|message| (*message).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// A listener on an ephemeral loopback port.
fn listen() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// Echoes everything read from `stream` back until EOF, then closes it.
fn echo(stream: TcpStream) {
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        match (&stream).read(&mut buf) {
            Ok(0) => return,
            Ok(n) => (&stream).write_all(&buf[..n]).unwrap(),
            Err(error) => panic!("echo: read failed: {error}"),
        }
    }
}

/// Starts an echo server (one green thread per connection) and returns its address. The
/// server runs until the runtime ends.
fn spawn_echo_server() -> SocketAddr {
    let (listener, addr) = listen();
    greenweave::spawn(move || {
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            greenweave::spawn(move || echo(stream));
        }
    });
    addr
}

/// Sets an `int` socket option with `setsockopt`.
fn set_int_option(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) {
    // SAFETY: `value` is a valid c_int for the duration of the call, and its size is passed.
    let result = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(result, 0, "setsockopt: {}", io::Error::last_os_error());
}

/// Makes closing `stream` send a reset instead of a FIN (`SO_LINGER` with a zero timeout).
fn set_linger_zero(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `linger` is a valid `struct linger` for the duration of the call.
    let result = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(result, 0, "setsockopt: {}", io::Error::last_os_error());
}

/// A loopback port nothing listens on (bound, read, released).
fn unused_port() -> SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Echo round trips
// ---------------------------------------------------------------------------------------------

/// Sends `len` bytes through the echo server from one green thread while another reads the
/// echo back on the same stream, and checks every byte.
fn echo_round_trip(len: usize) {
    greenweave::run(move || {
        let addr = spawn_echo_server();
        let stream = Rc::new(TcpStream::connect(addr).unwrap());
        let data = Rc::new(pattern(len as u64, len));

        let (out, sent) = (stream.clone(), data.clone());
        let writer = greenweave::spawn(move || {
            (&*out).write_all(&sent).unwrap();
            out.shutdown(Shutdown::Write).unwrap();
        });
        let mut echoed = vec![0_u8; len];
        (&*stream).read_exact(&mut echoed).unwrap();
        // The server saw our FIN and closed: nothing more, and no error.
        let mut rest = [0_u8; 1];
        assert_eq!((&*stream).read(&mut rest).unwrap(), 0, "EOF after the echo");
        writer.join().unwrap();
        assert_same_bytes(&echoed, &data, &format!("{len}-byte echo"));
    });
}

#[test]
fn echo_round_trip_of_1_byte() {
    echo_round_trip(1);
}

#[test]
fn echo_round_trip_of_1_kib() {
    echo_round_trip(1024);
}

#[test]
fn echo_round_trip_of_64_kib() {
    echo_round_trip(64 * 1024);
}

#[test]
fn echo_round_trip_of_1_mib() {
    echo_round_trip(1024 * 1024);
}

#[test]
fn echo_round_trip_of_16_mib() {
    echo_round_trip(16 * 1024 * 1024);
}

#[test]
fn a_16_mib_write_completes_across_partial_writes() {
    const LEN: usize = 16 * 1024 * 1024;
    greenweave::run(|| {
        let addr = spawn_echo_server();
        let stream = Rc::new(TcpStream::connect(addr).unwrap());
        // A small send buffer: each write() can take only a little of the 16 MiB.
        set_int_option(&*stream, libc::SOL_SOCKET, libc::SO_SNDBUF, 64 * 1024);
        let data = Rc::new(pattern(16, LEN));

        let (out, sent) = (stream.clone(), data.clone());
        let writer = greenweave::spawn(move || {
            let (mut written, mut calls) = (0, 0_usize);
            while written < LEN {
                let n = (&*out).write(&sent[written..]).unwrap();
                assert!(n > 0, "write returned 0 with {} bytes left", LEN - written);
                written += n;
                calls += 1;
            }
            out.shutdown(Shutdown::Write).unwrap();
            (written, calls)
        });
        let mut echoed = Vec::with_capacity(LEN);
        (&*stream).read_to_end(&mut echoed).unwrap();
        let (written, calls) = writer.join().unwrap();
        assert_eq!(written, LEN);
        assert!(
            calls > 1,
            "one write() took all 16 MiB: no partial write was exercised"
        );
        assert_same_bytes(&echoed, &data, "16 MiB written in partial writes");
    });
}

// ---------------------------------------------------------------------------------------------
// Many connections on one OS thread
// ---------------------------------------------------------------------------------------------

/// Raises the soft limit on open fds towards `wanted` (up to the hard limit) and returns the
/// limit now in force.
fn raise_fd_limit(wanted: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-parameter.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    if limit.rlim_cur < wanted {
        let raised = libc::rlimit {
            rlim_cur: wanted.min(limit.rlim_max),
            rlim_max: limit.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit; lowering nothing, raising the soft limit only
        // up to the hard one, which any process may do.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    limit.rlim_cur
}

#[test]
fn two_thousand_concurrent_connections_are_served_by_one_os_thread() {
    const WANTED: usize = 2000;
    /// Connections still in their handshake at once, well under the listen backlog, so the
    /// kernel never drops a SYN (which would cost a one-second retransmission).
    const CONNECTING_AT_ONCE: usize = 64;
    const PAYLOAD: usize = 2048;

    // Two fds per connection (client and server side), plus the listener, epoll, the test
    // harness's own and the emulator's when under qemu.
    let limit = raise_fd_limit(2 * WANTED as u64 + 256);
    let connections = WANTED.min((limit.saturating_sub(256) / 2) as usize);
    if connections < WANTED {
        println!(
            "note: RLIMIT_NOFILE allows only {limit} fds; testing {connections} connections \
             instead of {WANTED}"
        );
    }

    let os_thread = std::thread::current().id();
    let (served, peak) = greenweave::run(move || {
        let addr = spawn_echo_server();
        let open = Rc::new(Cell::new(0_usize));
        let peak = Rc::new(Cell::new(0_usize));
        let established = Rc::new(Cell::new(0_usize));
        // The gate: every client peeks at it, parking until the last client to connect
        // writes to the other end; peeking leaves the byte for all the others. So all the
        // connections are open at the same time.
        let (gate_listener, gate_addr) = listen();
        let gate_opener = greenweave::spawn(move || gate_listener.accept().unwrap().0);
        let gate = Rc::new(TcpStream::connect(gate_addr).unwrap());
        let gate_opener = Rc::new(gate_opener.join().unwrap());

        let mut clients: Vec<JoinHandle<()>> = Vec::with_capacity(connections);
        for i in 0..connections {
            while i - established.get() >= CONNECTING_AT_ONCE {
                thread::yield_now();
            }
            let (open, peak, established) = (open.clone(), peak.clone(), established.clone());
            let (gate, gate_opener) = (gate.clone(), gate_opener.clone());
            clients.push(greenweave::spawn(move || {
                assert_eq!(std::thread::current().id(), os_thread);
                let mut stream = TcpStream::connect(addr).unwrap();
                // One byte there and back: the server has accepted us.
                stream.write_all(&[i as u8]).unwrap();
                let mut byte = [0_u8; 1];
                stream.read_exact(&mut byte).unwrap();
                assert_eq!(byte[0], i as u8);
                open.set(open.get() + 1);
                peak.set(peak.get().max(open.get()));
                established.set(established.get() + 1);
                if established.get() == connections {
                    (&*gate_opener).write_all(b"go").unwrap();
                }
                assert_eq!(gate.peek(&mut byte).unwrap(), 1);

                let data = pattern(i as u64, PAYLOAD);
                stream.write_all(&data).unwrap();
                let mut echoed = vec![0_u8; PAYLOAD];
                stream.read_exact(&mut echoed).unwrap();
                assert_same_bytes(&echoed, &data, &format!("connection {i}"));
                open.set(open.get() - 1);
            }));
        }
        let served = clients.len();
        for client in clients {
            client.join().unwrap();
        }
        (served, peak.get())
    });
    assert_eq!(served, connections);
    assert_eq!(
        peak, connections,
        "every connection was open at the same time"
    );
}

/// How long the backlog tests wait for connects that should complete at once: turns a hang
/// into a failure, not a timing assertion.
const HANG_LIMIT: Duration = Duration::from_secs(60);

/// Connects `burst` green clients to `addr` and waits until every one has connected (its
/// handshake done, held in the listener's backlog) before accepting any; then accepts them
/// all and has each echo one byte. Returns the errors the clients saw.
fn connect_a_burst_then_accept_it(listener: TcpListener, addr: SocketAddr, burst: usize) {
    let connected = Rc::new(Cell::new(0_usize));
    let clients: Vec<JoinHandle<io::Result<()>>> = (0..burst)
        .map(|i| {
            let connected = connected.clone();
            greenweave::spawn(move || {
                let mut stream = TcpStream::connect(addr)?;
                connected.set(connected.get() + 1);
                stream.write_all(&[i as u8])?;
                let mut byte = [0_u8; 1];
                stream.read_exact(&mut byte)?;
                assert_eq!(byte[0], i as u8, "client {i} got another client's byte");
                Ok(())
            })
        })
        .collect();
    let start = Instant::now();
    while connected.get() < burst {
        assert!(
            start.elapsed() < HANG_LIMIT,
            "only {} of {burst} connects completed before the first accept",
            connected.get()
        );
        thread::sleep(Duration::from_millis(1));
    }
    for _ in 0..burst {
        let (mut stream, _) = listener.accept().unwrap();
        let mut byte = [0_u8; 1];
        stream.read_exact(&mut byte).unwrap();
        stream.write_all(&byte).unwrap();
    }
    let errors: Vec<String> = clients
        .into_iter()
        .filter_map(|client| client.join().unwrap().err())
        .map(|error| format!("{:?}: {error}", error.kind()))
        .collect();
    assert!(
        errors.is_empty(),
        "{} of {burst} clients failed: {errors:?}",
        errors.len()
    );
}

/// The kernel's cap on listen backlogs, `net.core.somaxconn`.
fn somaxconn() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .expect("/proc/sys/net/core/somaxconn is readable")
        .trim()
        .parse()
        .expect("somaxconn is a number")
}

/// The backlog a listening TCP socket has, as the kernel reports it: for a listener,
/// `TCP_INFO`'s `tcpi_sacked` is the queue's limit (what `ss -l` shows as Send-Q). `None`
/// under qemu-user, which passes only the first 4 bytes of `TCP_INFO` through.
fn backlog_of(listener: &TcpListener) -> Option<u32> {
    // SAFETY: tcp_info is plain data for which all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are live and describe a buffer of `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", io::Error::last_os_error());
    let sacked_end = std::mem::offset_of!(libc::tcp_info, tcpi_sacked) + 4;
    if (len as usize) < sacked_end {
        println!("note: TCP_INFO came back {len} bytes long (qemu-user?): backlog not checked");
        return None;
    }
    Some(info.tcpi_sacked)
}

#[test]
fn bind_gives_a_listener_the_kernels_longest_backlog_not_stds_128() {
    greenweave::run(|| {
        let (listener, _) = listen();
        if let Some(backlog) = backlog_of(&listener) {
            assert_eq!(backlog, somaxconn());
        }
    });
}

#[test]
fn bind_with_backlog_sets_the_backlog_which_the_kernel_caps_at_somaxconn() {
    greenweave::run(|| {
        let listener = TcpListener::bind_with_backlog("127.0.0.1:0", 16).unwrap();
        if let Some(backlog) = backlog_of(&listener) {
            assert_eq!(backlog, 16);
        }
        let listener = TcpListener::bind_with_backlog("127.0.0.1:0", u32::MAX).unwrap();
        if let Some(backlog) = backlog_of(&listener) {
            assert_eq!(backlog, somaxconn());
        }
    });
}

#[test]
fn a_listener_with_the_default_backlog_holds_a_burst_of_1000_connects_made_before_any_accept() {
    const BURST: usize = 1000;
    if somaxconn() < BURST as u32 {
        println!(
            "note: net.core.somaxconn is {}: no listener can hold {BURST} pending connections",
            somaxconn()
        );
        return;
    }
    let limit = raise_fd_limit(2 * BURST as u64 + 256);
    assert!(
        limit >= 2 * BURST as u64 + 64,
        "RLIMIT_NOFILE allows only {limit} fds; this test needs {}",
        2 * BURST + 64
    );
    greenweave::run(|| {
        let (listener, addr) = listen();
        connect_a_burst_then_accept_it(listener, addr, BURST);
    });
}

// ---------------------------------------------------------------------------------------------
// Timeouts and connection errors
// ---------------------------------------------------------------------------------------------

#[test]
fn a_read_with_nothing_to_read_times_out_with_would_block_as_std_on_linux() {
    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || listener.accept().unwrap().0);
        let mut stream = TcpStream::connect(addr).unwrap();
        let peer = server.join().unwrap();

        let timeout = Duration::from_millis(50);
        stream.set_read_timeout(Some(timeout)).unwrap();
        assert_eq!(stream.read_timeout().unwrap(), Some(timeout));
        let start = Instant::now();
        let error = stream.read(&mut [0_u8; 16]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        assert!(error.to_string().contains("read timeout"), "{error}");
        assert!(start.elapsed() >= timeout);

        // The timeout bounds each read; the stream still works afterwards.
        (&peer).write_all(b"late").unwrap();
        let mut buf = [0_u8; 4];
        stream.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"late");

        stream.set_read_timeout(None).unwrap();
        assert_eq!(stream.read_timeout().unwrap(), None);
    });
}

#[test]
fn a_read_timeout_does_not_hold_up_other_green_threads() {
    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || listener.accept().unwrap().0);
        let stream = TcpStream::connect(addr).unwrap();
        let _peer = server.join().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let ticks = Rc::new(Cell::new(0_u32));
        let t = ticks.clone();
        let ticker = greenweave::spawn(move || {
            for _ in 0..3 {
                thread::sleep(Duration::from_millis(1));
                t.set(t.get() + 1);
            }
        });
        let error = (&stream).read(&mut [0_u8; 1]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::WouldBlock);
        ticker.join().unwrap();
        assert_eq!(ticks.get(), 3);
    });
}

#[test]
fn a_write_to_a_peer_that_never_reads_times_out_with_would_block_as_std_on_linux() {
    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || listener.accept().unwrap().0);
        let mut stream = TcpStream::connect(addr).unwrap();
        let peer = server.join().unwrap(); // held open, never read
        set_int_option(&stream, libc::SOL_SOCKET, libc::SO_SNDBUF, 64 * 1024);

        let timeout = Duration::from_millis(50);
        stream.set_write_timeout(Some(timeout)).unwrap();
        assert_eq!(stream.write_timeout().unwrap(), Some(timeout));
        let chunk = vec![0x5a_u8; 64 * 1024];
        let mut written = 0_usize;
        let error = loop {
            match stream.write(&chunk) {
                Ok(n) => written += n,
                Err(error) => break error,
            }
            assert!(
                written < 256 * 1024 * 1024,
                "256 MiB went into a connection nobody reads"
            );
        };
        assert_eq!(error.kind(), ErrorKind::WouldBlock, "{error}");
        assert!(error.to_string().contains("write timeout"), "{error}");
        assert!(written > 0, "the buffers took something before filling up");
        drop(peer);
    });
}

#[test]
fn zero_timeouts_are_refused_as_std_does() {
    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || listener.accept().unwrap().0);
        let stream = TcpStream::connect(addr).unwrap();
        let _peer = server.join().unwrap();
        let zero = Some(Duration::ZERO);
        assert_eq!(
            stream.set_read_timeout(zero).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            stream.set_write_timeout(zero).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        let error = TcpStream::connect_timeout(&addr, Duration::ZERO).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidInput);
    });
}

#[test]
fn connecting_to_a_loopback_port_nobody_listens_on_is_refused() {
    greenweave::run(|| {
        let addr = unused_port();
        let error = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionRefused, "{error}");
        let error = TcpStream::connect(addr).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionRefused, "{error}");
    });
}

#[test]
fn connect_timeout_to_a_listening_port_connects() {
    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || listener.accept().unwrap());
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        let (_peer, peer_addr) = server.join().unwrap();
        assert_eq!(stream.peer_addr().unwrap(), addr);
        assert_eq!(stream.local_addr().unwrap(), peer_addr);
    });
}

#[test]
fn a_read_after_the_peer_closed_returns_0_for_eof() {
    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || {
            let (mut peer, _) = listener.accept().unwrap();
            peer.write_all(b"bye").unwrap();
            // Dropped here: a FIN after the data.
        });
        let mut stream = TcpStream::connect(addr).unwrap();
        let mut got = Vec::new();
        stream.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"bye");
        assert_eq!(stream.read(&mut [0_u8; 8]).unwrap(), 0, "EOF stays EOF");
        server.join().unwrap();
    });
}

#[test]
fn a_peer_closing_with_unread_data_resets_the_connection() {
    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || {
            let (peer, _) = listener.accept().unwrap();
            // Wait until the data has arrived, then close without reading it: the kernel
            // answers with a reset instead of a FIN.
            let mut buf = [0_u8; 6];
            assert_eq!(peer.peek(&mut buf).unwrap(), 6);
        });
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(b"unread").unwrap();
        server.join().unwrap();
        let error = stream.read(&mut [0_u8; 8]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
    });
}

#[test]
fn a_peer_closing_with_so_linger_zero_resets_the_connection() {
    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || {
            let (peer, _) = listener.accept().unwrap();
            set_linger_zero(&peer);
        });
        let mut stream = TcpStream::connect(addr).unwrap();
        server.join().unwrap();
        let error = stream.read(&mut [0_u8; 8]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
    });
}

/// Writes to `stream` (whose peer has closed) until a write fails with `BrokenPipe`, allowing
/// the `ConnectionReset` Linux reports first when the peer's reset has arrived. Returns the
/// errors seen.
fn write_until_broken_pipe(stream: &TcpStream) -> Vec<ErrorKind> {
    let mut errors = Vec::new();
    for _ in 0..1000 {
        match (&*stream).write(b"are you there?") {
            Ok(_) => {}
            Err(error) if error.kind() == ErrorKind::BrokenPipe => {
                errors.push(error.kind());
                return errors;
            }
            Err(error) if error.kind() == ErrorKind::ConnectionReset => errors.push(error.kind()),
            Err(error) => panic!("unexpected write error: {error}"),
        }
        // Let the peer's reset arrive.
        thread::sleep(Duration::from_millis(1));
    }
    panic!("no BrokenPipe after 1000 writes to a closed connection; errors: {errors:?}");
}

/// Connects to a server that accepts and closes at once, and writes until the pipe breaks.
fn break_a_pipe() -> Vec<ErrorKind> {
    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || drop(listener.accept().unwrap()));
        let stream = TcpStream::connect(addr).unwrap();
        server.join().unwrap();
        write_until_broken_pipe(&stream)
    })
}

#[test]
fn writing_after_the_peer_closed_fails_with_broken_pipe() {
    let errors = break_a_pipe();
    assert_eq!(errors.last(), Some(&ErrorKind::BrokenPipe));
}

#[test]
fn rust_programs_ignore_sigpipe_so_a_broken_pipe_is_an_error_not_a_death() {
    // std sets SIGPIPE to "ignore" before main in every Rust program, test binaries included.
    // SAFETY: a null new action only queries the current one into `current`.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    let result = unsafe { libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut current) };
    assert_eq!(result, 0);
    assert_eq!(current.sa_sigaction, libc::SIG_IGN);

    // And a pipe with its reader gone reports BrokenPipe through Async.
    greenweave::run(|| {
        let (reader, writer) = io::pipe().unwrap();
        drop(reader);
        let mut writer = Async::new(writer).unwrap();
        let error = writer.write(b"nobody reads").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BrokenPipe);
    });
}

#[test]
fn a_broken_tcp_pipe_does_not_raise_sigpipe_even_when_sigpipe_is_not_ignored() {
    // In a child process with SIGPIPE back at its default action (terminate), as in a program
    // built with `-Zon-broken-pipe=kill` or started by a shell that resets it: TCP writes use
    // MSG_NOSIGNAL, so the broken pipe is an error, not a death.
    let outcome = run_in_child(
        "a_broken_tcp_pipe_does_not_raise_sigpipe_even_when_sigpipe_is_not_ignored",
        || {
            // SAFETY: installing the default action for SIGPIPE; no handler is involved.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            let errors = break_a_pipe();
            assert_eq!(errors.last(), Some(&ErrorKind::BrokenPipe));
            std::process::exit(0);
        },
    );
    assert_eq!(outcome.signal(), None, "{}", outcome.describe());
    assert!(outcome.status.success(), "{}", outcome.describe());
}

// ---------------------------------------------------------------------------------------------
// std's I/O traits on green streams
// ---------------------------------------------------------------------------------------------

#[test]
fn a_bufreader_line_protocol_works_unchanged() {
    let replies = greenweave::run(|| {
        let (listener, addr) = listen();
        // The server: one reply line per request line, until the client closes.
        let server = greenweave::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut served = 0;
            for line in BufReader::new(&stream).lines() {
                let line = line.unwrap();
                writeln!(&stream, "{} has {} bytes", line.to_uppercase(), line.len()).unwrap();
                served += 1;
            }
            served
        });
        let stream = TcpStream::connect(addr).unwrap();
        let mut reader = BufReader::new(&stream);
        let mut replies = Vec::new();
        for request in ["hello", "green threads", ""] {
            // Each request in two writes with a pause between, so the server's BufReader
            // sees a partial line first.
            let (head, tail) = request.split_at(request.len() / 2);
            (&stream).write_all(head.as_bytes()).unwrap();
            thread::sleep(Duration::from_millis(1));
            (&stream).write_all(format!("{tail}\n").as_bytes()).unwrap();
            let mut reply = String::new();
            reader.read_line(&mut reply).unwrap();
            replies.push(reply);
        }
        stream.shutdown(Shutdown::Write).unwrap();
        assert_eq!(server.join().unwrap(), 3);
        replies
    });
    assert_eq!(
        replies,
        [
            "HELLO has 5 bytes\n",
            "GREEN THREADS has 13 bytes\n",
            " has 0 bytes\n"
        ]
    );
}

#[test]
fn one_green_thread_reads_while_another_writes_the_same_stream() {
    // Both ends send 4 MiB while receiving 4 MiB: neither side's writes can finish unless its
    // reads go on at the same time, on the same socket, from another green thread.
    const LEN: usize = 4 * 1024 * 1024;

    /// Sends `outgoing` from a second green thread while this one receives; returns what
    /// came in.
    fn full_duplex(stream: Rc<TcpStream>, outgoing: Vec<u8>) -> Vec<u8> {
        let out = stream.clone();
        let writer = greenweave::spawn(move || {
            for chunk in outgoing.chunks(100_000) {
                (&*out).write_all(chunk).unwrap();
            }
            out.shutdown(Shutdown::Write).unwrap();
        });
        let mut incoming = Vec::with_capacity(LEN);
        (&*stream).read_to_end(&mut incoming).unwrap();
        writer.join().unwrap();
        incoming
    }

    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            full_duplex(Rc::new(stream), pattern(2, LEN))
        });
        let client = Rc::new(TcpStream::connect(addr).unwrap());
        let at_client = full_duplex(client, pattern(1, LEN));
        let at_server = server.join().unwrap();
        assert_same_bytes(&at_server, &pattern(1, LEN), "client to server");
        assert_same_bytes(&at_client, &pattern(2, LEN), "server to client");
    });
}

/// `localhost:<port>`, looked up only once `go` says so: a lookup that cannot finish until a
/// green thread has run, which it can only do if the connect parked instead of blocking.
struct GatedLocalhost {
    port: u16,
    started: AtomicBool,
    go: Mutex<mpsc::Receiver<()>>,
}

impl ToSocketAddrs for GatedLocalhost {
    type Iter = std::vec::IntoIter<SocketAddr>;

    fn to_socket_addrs(&self) -> io::Result<Self::Iter> {
        self.started.store(true, Ordering::Release);
        // A generous limit, not a timing assertion: it turns a blocked OS thread (which would
        // wait here forever) into a failed connect.
        let go = self
            .go
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(60));
        if go.is_err() {
            return Err(io::Error::other(
                "no green thread ran while the hostname was being looked up",
            ));
        }
        ("localhost", self.port).to_socket_addrs()
    }
}

#[test]
fn a_hostname_connect_does_not_block_other_green_threads() {
    let (connected_to, listening_on, events) = greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || listener.accept().unwrap().1);
        let (go, gate) = mpsc::channel();
        let target = Arc::new(GatedLocalhost {
            port: addr.port(),
            started: AtomicBool::new(false),
            go: Mutex::new(gate),
        });
        let events: Rc<RefCell<Vec<&str>>> = Rc::default();
        let (t, e) = (target.clone(), events.clone());
        // Runs only while the main green thread is parked in its connect (it does not yield
        // between spawning this and connecting); lets the lookup finish once it has begun.
        let other = greenweave::spawn(move || {
            while !t.started.load(Ordering::Acquire) {
                thread::yield_now();
            }
            e.borrow_mut()
                .push("another green thread ran during the lookup");
            go.send(()).unwrap();
        });
        let stream = TcpStream::connect(&*target).unwrap();
        events.borrow_mut().push("connected");
        other.join().unwrap();
        let accepted_from = server.join().unwrap();
        assert_eq!(stream.local_addr().unwrap(), accepted_from);
        let events = events.borrow().clone();
        (stream.peer_addr().unwrap(), addr, events)
    });
    // `localhost` may resolve to ::1 first; that is refused, and 127.0.0.1 is tried next.
    assert_eq!(connected_to, listening_on);
    assert_eq!(
        events,
        ["another green thread ran during the lookup", "connected"]
    );
}

/// How many failed accepts in a row an accept loop in these tests takes before it gives up:
/// far more than a loop that lets other green threads run ever sees, and reached at once by
/// one that spins.
const ACCEPT_FAILURES_BEFORE_GIVING_UP: u32 = 100_000;

#[test]
fn an_accept_loop_out_of_fds_lets_other_green_threads_run_and_then_serves_the_client() {
    const NAME: &str =
        "an_accept_loop_out_of_fds_lets_other_green_threads_run_and_then_serves_the_client";
    let outcome = run_in_child(NAME, || {
        let events = greenweave::run(|| {
            let (listener, addr) = listen();
            // Queued on the listener while there are fds to spare.
            let _client = std::net::TcpStream::connect(addr).unwrap();
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
                            if failures == ACCEPT_FAILURES_BEFORE_GIVING_UP {
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
fn accepted_and_connected_addresses_agree() {
    greenweave::run(|| {
        let (listener, addr) = listen();
        let server = greenweave::spawn(move || {
            let mut incoming = listener.incoming();
            let a = incoming.next().unwrap().unwrap();
            let b = incoming.next().unwrap().unwrap();
            (a.peer_addr().unwrap(), b.peer_addr().unwrap())
        });
        let first = TcpStream::connect(addr).unwrap();
        let second = TcpStream::connect(addr).unwrap();
        first.set_nodelay(true).unwrap();
        assert!(first.nodelay().unwrap());
        let (a, b) = server.join().unwrap();
        assert_eq!(a, first.local_addr().unwrap());
        assert_eq!(b, second.local_addr().unwrap());
    });
}

// ---------------------------------------------------------------------------------------------
// Async on a pipe
// ---------------------------------------------------------------------------------------------

#[test]
fn async_pipe_carries_a_megabyte_between_green_threads() {
    const LEN: usize = 1024 * 1024;
    let received = greenweave::run(|| {
        let (reader, writer) = io::pipe().unwrap();
        let mut reader = Async::new(reader).unwrap();
        let mut writer = Async::new(writer).unwrap();
        // 1 MiB through a 64 KiB pipe buffer: the writer parks whenever it is full.
        let sender = greenweave::spawn(move || {
            writer.write_all(&pattern(3, LEN)).unwrap();
            // Dropping the writer closes the pipe: the reader then sees EOF.
        });
        let mut received = Vec::new();
        reader.read_to_end(&mut received).unwrap();
        sender.join().unwrap();
        received
    });
    assert_same_bytes(&received, &pattern(3, LEN), "through the pipe");
}

#[test]
fn async_readable_parks_until_another_green_thread_writes() {
    greenweave::run(|| {
        let (reader, writer) = io::pipe().unwrap();
        let reader = Async::new(reader).unwrap();
        let writer = Async::new(writer).unwrap();
        let wrote = Rc::new(Cell::new(false));
        let w = wrote.clone();
        let sender = greenweave::spawn(move || {
            thread::sleep(Duration::from_millis(5));
            w.set(true);
            writer.write_with(|pipe| (&*pipe).write(b"x")).unwrap();
            writer
        });
        // The pipe is empty: the read says WouldBlock, and read_with parks until it is not.
        let mut byte = [0_u8; 1];
        let n = reader.read_with(|pipe| (&*pipe).read(&mut byte)).unwrap();
        assert!(wrote.get(), "read returned before anything was written");
        assert_eq!((n, byte), (1, *b"x"));
        drop(sender.join().unwrap());
    });
}

#[test]
fn async_readable_on_an_empty_pipe_parks_until_data_arrives() {
    greenweave::run(|| {
        let (reader, writer) = io::pipe().unwrap();
        let reader = Async::new(reader).unwrap();
        let mut writer = Async::new(writer).unwrap();
        let wrote = Rc::new(Cell::new(false));
        let w = wrote.clone();
        let sender = greenweave::spawn(move || {
            thread::sleep(Duration::from_millis(5));
            w.set(true);
            writer.write_all(b"x").unwrap();
            writer
        });
        reader.readable().unwrap();
        assert!(wrote.get(), "readable() returned while the pipe was empty");
        drop(sender.join().unwrap());
    });
}

// ---------------------------------------------------------------------------------------------
// Misuse
// ---------------------------------------------------------------------------------------------

#[test]
fn sockets_outside_a_runtime_panic_saying_to_use_run() {
    for (call, result) in [
        (
            "TcpListener::bind",
            catch_unwind(|| TcpListener::bind("127.0.0.1:0").map(drop)),
        ),
        (
            "TcpStream::connect",
            catch_unwind(|| TcpStream::connect("127.0.0.1:9").map(drop)),
        ),
        (
            "TcpStream::from_std",
            catch_unwind(AssertUnwindSafe(|| {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let stream = std::net::TcpStream::connect(listener.local_addr().unwrap());
                TcpStream::from_std(stream.unwrap()).map(drop)
            })),
        ),
    ] {
        let message = panic_message(&*result.expect_err(call));
        assert!(
            message.contains("outside a greenweave runtime"),
            "{call}: {message:?}"
        );
        assert!(message.contains("greenweave::run"), "{call}: {message:?}");
    }
}
