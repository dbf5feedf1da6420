#![cfg(feature = "hooks")]
//! The hooks give exactly libc's results (issue 22): a blocking call in a green thread returns
//! what libc's would have (a whole send, a `MSG_WAITALL` receive, a close that wakes the
//! parked reader), shares nothing with other threads that libc's would not (a listener's
//! `O_NONBLOCK`), lets other green threads run (the cooperative budget) and never parks where
//! a lock of the OS thread's is held (std's stdout).
//!
//! Every outcome is decided by the order of events (parks, counts of bytes); no duration is
//! asserted. The few sleeps below only give a call time to reach the state the test is about;
//! when one is too short, the test still passes with the fix (it only fails to show the bug).

#[path = "common/spawn_watch.rs"]
mod spawn_watch;

use std::cell::{Cell, RefCell};
use std::env;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

/// Runs `body` on a runtime on another OS thread and returns its result; fails the test if it
/// has not finished within a minute (a green thread that is never woken hangs the runtime: this
/// turns that hang into a failure).
fn run_bounded<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let result = greenweave::run(body);
        let _ = sender.send(result);
    });
    receiver
        .recv_timeout(Duration::from_secs(60))
        .expect("the runtime finished (a parked green thread was never woken)")
}

// Item 3: std's stdout -------------------------------------------------------------------------

/// Set in the child process to the name of the part it runs.
const CHILD: &str = "GREENWEAVE_HOOKS_EXACT_CHILD";

/// Written by the child to stderr once its stdout pipe is full.
const PIPE_FULL: &str = "stdout-pipe-full";

const LINES_PER_THREAD: usize = 4;
const LINE_LEN: usize = 100_000;

/// The `index`th line of green thread `tag`: longer than a pipe's buffer (64 KiB).
fn long_line(tag: char, index: usize) -> String {
    let head = format!("{tag}{index}:");
    let tail: String = std::iter::repeat_n(tag, LINE_LEN - head.len()).collect();
    head + &tail
}

/// This test binary, to be run again as a child (through qemu-user when the kernel cannot
/// run it itself, as under `cargo test --target aarch64-unknown-linux-gnu`).
fn this_binary() -> Command {
    let exe = env::current_exe().expect("the test binary knows its own path");
    let arch = env::consts::ARCH;
    match std::fs::read_to_string("/proc/sys/kernel/arch") {
        Ok(kernel) if kernel.trim() != arch => {
            let mut command = Command::new(format!("qemu-{arch}"));
            command
                .args(["-L", &format!("/usr/{arch}-linux-gnu")])
                .arg(exe);
            command
        }
        _ => Command::new(exe),
    }
}

/// The child: fills its stdout pipe (nobody reads it yet), then two green threads `println!`
/// lines longer than the pipe's buffer. Exits with status 0 if nothing panicked.
fn println_to_a_full_pipe_child() -> ! {
    // Fill the pipe: non-blocking for the filling only, then blocking again.
    // SAFETY: F_GETFL/F_SETFL on fd 1, which is open (a pipe).
    let flags = unsafe { libc::fcntl(1, libc::F_GETFL) };
    // SAFETY: as above.
    unsafe { libc::fcntl(1, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    let filler = [b'#'; 4096];
    for size in [filler.len(), 1] {
        // SAFETY: `filler` is live for `size` bytes.
        while unsafe { libc::write(1, filler.as_ptr().cast(), size) } > 0 {}
    }
    // SAFETY: as above.
    unsafe { libc::fcntl(1, libc::F_SETFL, flags) };
    eprintln!("{PIPE_FULL}");
    greenweave::run(|| {
        let writers: Vec<_> = ['a', 'b']
            .into_iter()
            .map(|tag| {
                greenweave::spawn(move || {
                    for index in 0..LINES_PER_THREAD {
                        println!("{}", long_line(tag, index));
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
    });
    std::process::exit(0);
}

#[test]
fn two_green_threads_println_to_a_full_stdout_pipe_without_panicking_and_every_line_arrives_whole()
{
    const NAME: &str = "two_green_threads_println_to_a_full_stdout_pipe_without_panicking_and_every_line_arrives_whole";
    if env::var_os(CHILD).is_some_and(|name| name == NAME) {
        println_to_a_full_pipe_child();
    }
    let mut command = this_binary();
    command
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, NAME)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn_watch::spawn(&mut command).expect("the child starts");
    let mut stderr = child.stderr.take().unwrap();
    let (full_sender, full) = mpsc::channel();
    let stderr = std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut chunk = [0; 4096];
        let mut told = false;
        while let Ok(read @ 1..) = stderr.read(&mut chunk) {
            text.extend_from_slice(&chunk[..read]);
            if !told && String::from_utf8_lossy(&text).contains(PIPE_FULL) {
                told = full_sender.send(()).is_ok();
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    });
    // Nobody reads the pipe until both green threads have had time to reach their writes.
    let _ = full.recv_timeout(Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(300));
    let mut stdout = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    let status = child.wait().unwrap();
    let stderr = stderr.join().unwrap();
    let stdout = String::from_utf8(stdout).expect("the child's stdout is text");
    assert!(
        status.success() && !stderr.contains("panicked"),
        "status {status:?}\n--- stderr ---\n{stderr}"
    );
    // The lines follow the filler (the test harness's own lines come before it).
    let after_filler = &stdout[stdout.rfind('#').expect("the filler arrived") + 1..];
    let mut lines: Vec<&str> = after_filler.lines().collect();
    lines.sort_unstable();
    let mut expected: Vec<String> = ['a', 'b']
        .into_iter()
        .flat_map(|tag| (0..LINES_PER_THREAD).map(move |index| long_line(tag, index)))
        .collect();
    expected.sort_unstable();
    assert!(
        lines == expected,
        "{} lines arrived, of lengths {:?}",
        lines.len(),
        lines.iter().map(|line| line.len()).collect::<Vec<_>>()
    );
}

// Item 4a: whole transfers ---------------------------------------------------------------------

#[test]
fn recv_with_msg_waitall_parks_until_every_byte_asked_for_has_come() {
    let (n, buffer) = run_bounded(|| {
        let (mut near, far) = UnixStream::pair().unwrap();
        let reader = greenweave::spawn(move || {
            let mut buffer = [0u8; 11];
            // SAFETY: a live buffer of that length; `far` outlives the call.
            let n = unsafe {
                libc::recv(
                    far.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    11,
                    libc::MSG_WAITALL,
                )
            };
            (n, buffer)
        });
        near.write_all(b"hello").unwrap();
        // Parks this green thread on a timer: the scheduler polls, and the reader takes the
        // first five bytes before the rest is written.
        greenweave::thread::sleep(Duration::from_millis(5));
        near.write_all(b" world").unwrap();
        reader.join().unwrap()
    });
    assert_eq!(n, 11);
    assert_eq!(&buffer, b"hello world");
}

#[test]
fn recvmsg_with_msg_waitall_fills_every_iovec_and_stops_early_only_at_the_end_of_the_stream() {
    let (n, first, second, at_end) = run_bounded(|| {
        let (mut near, far) = UnixStream::pair().unwrap();
        let reader = greenweave::spawn(move || {
            let (mut first, mut second) = ([0u8; 4], [0u8; 7]);
            let mut iov = [
                libc::iovec {
                    iov_base: first.as_mut_ptr().cast(),
                    iov_len: 4,
                },
                libc::iovec {
                    iov_base: second.as_mut_ptr().cast(),
                    iov_len: 7,
                },
            ];
            // SAFETY: all zeroes is a valid msghdr (no name, no control data).
            let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
            message.msg_iov = iov.as_mut_ptr();
            message.msg_iovlen = 2;
            // SAFETY: the message's iovecs point to live buffers of those lengths.
            let n = unsafe { libc::recvmsg(far.as_raw_fd(), &mut message, libc::MSG_WAITALL) };
            // The stream ends after 3 more bytes: a MSG_WAITALL receive returns those.
            let mut rest = [0u8; 8];
            // SAFETY: as above.
            let at_end = unsafe {
                libc::recv(
                    far.as_raw_fd(),
                    rest.as_mut_ptr().cast(),
                    8,
                    libc::MSG_WAITALL,
                )
            };
            (n, first, second, at_end)
        });
        near.write_all(b"hello").unwrap();
        greenweave::thread::sleep(Duration::from_millis(5));
        near.write_all(b" world").unwrap();
        greenweave::thread::sleep(Duration::from_millis(5));
        near.write_all(b"end").unwrap();
        drop(near);
        reader.join().unwrap()
    });
    assert_eq!(n, 11);
    assert_eq!((&first, &second), (b"hell", b"o world"));
    assert_eq!(at_end, 3);
}

#[test]
fn recv_with_msg_peek_and_msg_waitall_parks_until_all_can_be_peeked_and_leaves_them_queued() {
    let (peeked, read) = run_bounded(|| {
        let (mut near, mut far) = UnixStream::pair().unwrap();
        let reader = greenweave::spawn(move || {
            let mut buffer = [0u8; 11];
            // SAFETY: a live buffer of that length.
            let n = unsafe {
                libc::recv(
                    far.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    11,
                    libc::MSG_PEEK | libc::MSG_WAITALL,
                )
            };
            let mut again = [0u8; 11];
            far.read_exact(&mut again).unwrap();
            ((n, buffer), again)
        });
        near.write_all(b"hello").unwrap();
        greenweave::thread::sleep(Duration::from_millis(5));
        near.write_all(b" world").unwrap();
        reader.join().unwrap()
    });
    assert_eq!(peeked, (11, *b"hello world"));
    assert_eq!(&read, b"hello world");
}

#[test]
fn msg_waitall_on_a_datagram_socket_returns_the_one_datagram() {
    let n = run_bounded(|| {
        let (near, far) = UnixDatagram::pair().unwrap();
        let reader = greenweave::spawn(move || {
            let mut buffer = [0u8; 11];
            // SAFETY: a live buffer of that length.
            unsafe {
                libc::recv(
                    far.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    11,
                    libc::MSG_WAITALL,
                )
            }
        });
        greenweave::thread::sleep(Duration::from_millis(5));
        near.send(b"abc").unwrap();
        reader.join().unwrap()
    });
    assert_eq!(n, 3);
}

const BIG: usize = 8 << 20;

/// The ways a program sends a buffer in one call.
#[derive(Clone, Copy, Debug)]
enum OneCall {
    Write,
    Send,
    SendTo,
    Writev,
    Sendmsg,
}

/// Sends `data` on `fd` in one call of kind `how` (the vectored ones in three pieces).
fn send_in_one_call(how: OneCall, fd: i32, data: &[u8]) -> isize {
    let (a, rest) = data.split_at(3 << 20);
    let (b, c) = rest.split_at(1);
    let iov = [a, b, c].map(|piece| libc::iovec {
        iov_base: piece.as_ptr().cast_mut().cast(),
        iov_len: piece.len(),
    });
    // SAFETY: all zeroes is a valid msghdr (no name, no control data).
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = iov.as_ptr().cast_mut();
    message.msg_iovlen = 3;
    let (buf, len) = (data.as_ptr().cast(), data.len());
    // SAFETY: every pointer is to live memory of the length given.
    unsafe {
        match how {
            OneCall::Write => libc::write(fd, buf, len),
            OneCall::Send => libc::send(fd, buf, len, 0),
            OneCall::SendTo => libc::sendto(fd, buf, len, 0, std::ptr::null(), 0),
            OneCall::Writev => libc::writev(fd, iov.as_ptr(), 3),
            OneCall::Sendmsg => libc::sendmsg(fd, &message, 0),
        }
    }
}

/// 8 MiB, no two neighbouring 4 KiB pages alike, so a piece sent twice or skipped shows.
fn big_data() -> Vec<u8> {
    (0..BIG).map(|i| (i / 4096 % 251) as u8).collect()
}

#[test]
fn one_send_of_8_mib_on_a_blocking_socket_sends_everything_in_order_whatever_the_call() {
    for how in [
        OneCall::Write,
        OneCall::Send,
        OneCall::SendTo,
        OneCall::Writev,
        OneCall::Sendmsg,
    ] {
        let (sent, received) = run_bounded(move || {
            let (near, far) = UnixStream::pair().unwrap();
            let reader = greenweave::spawn(move || {
                let mut far = far;
                let mut received = Vec::new();
                far.read_to_end(&mut received).unwrap();
                received
            });
            let data = big_data();
            let sent = send_in_one_call(how, near.as_raw_fd(), &data);
            drop(near);
            let received = reader.join().unwrap();
            (sent, received == data)
        });
        assert_eq!(sent, BIG as isize, "{how:?}");
        assert!(received, "{how:?}: the bytes arrived in order");
    }
}

#[test]
fn a_send_timeout_ends_a_whole_send_with_the_count_sent_then_eagain() {
    let (first, second, second_errno) = run_bounded(|| {
        let (near, _far) = UnixStream::pair().unwrap();
        near.set_write_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let data = big_data();
        let first = send_in_one_call(OneCall::Write, near.as_raw_fd(), &data);
        let second = send_in_one_call(OneCall::Send, near.as_raw_fd(), &data);
        (first, second, errno())
    });
    assert!(first > 0 && first < BIG as isize, "{first}");
    assert_eq!((second, second_errno), (-1, libc::EAGAIN));
}

#[test]
fn a_peer_that_goes_away_ends_a_whole_send_with_the_count_sent_and_the_next_send_fails() {
    let (first, second, second_errno, received) = run_bounded(|| {
        let (near, far) = UnixStream::pair().unwrap();
        let reader = greenweave::spawn(move || {
            let mut far = far;
            let mut buffer = vec![0; 65536];
            far.read_exact(&mut buffer).unwrap();
            // `far` is dropped here: the peer goes away with the rest unread.
            buffer.len()
        });
        let data = big_data();
        let first = send_in_one_call(OneCall::Writev, near.as_raw_fd(), &data);
        let second = send_in_one_call(OneCall::Write, near.as_raw_fd(), &data);
        let second_errno = errno();
        (first, second, second_errno, reader.join().unwrap())
    });
    assert!(
        first as usize >= received && first < BIG as isize,
        "{first}"
    );
    assert_eq!((second, second_errno), (-1, libc::EPIPE));
}

// Item 4b: accept leaves the listener's mode alone ---------------------------------------------

#[test]
fn a_plain_threads_blocking_accept_never_sees_would_block_while_green_threads_accept_on_the_same_listener()
 {
    // Each connection is a chance for the race the old hook lost (a green accept turning
    // O_NONBLOCK on just as the plain thread enters accept): enough of them to meet it.
    const CONNECTIONS: usize = 4000;
    const GREEN_ACCEPTORS: usize = 4;
    let listener = Arc::new(TcpListener::bind("127.0.0.1:0").unwrap());
    let address = listener.local_addr().unwrap();
    // Each acceptor takes connections until one says 'q'; there is one 'q' per acceptor.
    fn accept_until_quit(listener: &TcpListener) -> (usize, Vec<std::io::ErrorKind>) {
        let (mut taken, mut errors) = (0, Vec::new());
        loop {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    taken += 1;
                    let mut byte = [0];
                    stream.read_exact(&mut byte).unwrap();
                    if byte[0] == b'q' {
                        return (taken, errors);
                    }
                }
                Err(error) => errors.push(error.kind()),
            }
        }
    }
    let plain = std::thread::spawn({
        let listener = listener.clone();
        move || accept_until_quit(&listener)
    });
    let green = std::thread::spawn({
        let listener = listener.clone();
        move || {
            greenweave::run(move || {
                let acceptors: Vec<_> = (0..GREEN_ACCEPTORS)
                    .map(|_| {
                        let listener = listener.clone();
                        greenweave::spawn(move || accept_until_quit(&listener))
                    })
                    .collect();
                acceptors
                    .into_iter()
                    .map(|acceptor| acceptor.join().unwrap())
                    .collect::<Vec<_>>()
            })
        }
    });
    for index in 0..CONNECTIONS + GREEN_ACCEPTORS + 1 {
        let mut stream = TcpStream::connect(address).unwrap();
        let byte = if index < CONNECTIONS { b'n' } else { b'q' };
        stream.write_all(&[byte]).unwrap();
    }
    let (plain_taken, plain_errors) = plain.join().unwrap();
    let green = green.join().unwrap();
    assert!(
        plain_errors.is_empty(),
        "the plain thread's accept failed {} times ({:?}) in {plain_taken} connections",
        plain_errors.len(),
        plain_errors.first()
    );
    for (taken, errors) in &green {
        assert!(errors.is_empty(), "a green accept failed: {errors:?}");
        assert!(*taken >= 1);
    }
    let total: usize = plain_taken + green.iter().map(|(taken, _)| taken).sum::<usize>();
    assert_eq!(total, CONNECTIONS + GREEN_ACCEPTORS + 1);
}

// Item 4c: the cooperative budget --------------------------------------------------------------

#[test]
fn a_std_echo_server_busy_with_a_flooding_client_answers_a_second_client_before_the_flood_is_echoed()
 {
    const FLOOD: usize = 32 * 1024;
    const CHUNK: usize = 16;
    let answered_after = run_bounded(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let (flood_written, wait_for_flood) = mpsc::channel::<()>();
        let (pinged, wait_for_ping) = mpsc::channel::<()>();
        let flooder = std::thread::spawn(move || {
            let mut stream = TcpStream::connect(address).unwrap();
            stream.write_all(&[b'f'; FLOOD]).unwrap();
            flood_written.send(()).unwrap();
            let mut echoed = vec![0; FLOOD];
            stream.read_exact(&mut echoed).unwrap();
        });
        let pinger = std::thread::spawn(move || {
            wait_for_flood.recv().unwrap();
            let mut stream = TcpStream::connect(address).unwrap();
            stream.write_all(b"ping").unwrap();
            pinged.send(()).unwrap();
            let mut reply = [0; 4];
            stream.read_exact(&mut reply).unwrap();
            reply
        });
        let (mut flood, _) = listener.accept().unwrap();
        // Blocks this OS thread (nothing green has to run meanwhile) until the flood is queued
        // on the server's socket and the second client's request is on its way.
        wait_for_ping.recv().unwrap();
        let echoed = Rc::new(Cell::new(0));
        let flood_server = greenweave::spawn({
            let echoed = echoed.clone();
            move || {
                let mut buffer = [0; CHUNK];
                while echoed.get() < FLOOD {
                    let n = flood.read(&mut buffer).unwrap();
                    flood.write_all(&buffer[..n]).unwrap();
                    echoed.set(echoed.get() + n);
                }
            }
        });
        let (mut second, _) = listener.accept().unwrap();
        let answered_after = Rc::new(RefCell::new(None));
        let ping_server = greenweave::spawn({
            let answered_after = answered_after.clone();
            move || {
                let mut request = [0; 4];
                second.read_exact(&mut request).unwrap();
                second.write_all(&request).unwrap();
                *answered_after.borrow_mut() = Some(echoed.get());
            }
        });
        flood_server.join().unwrap();
        ping_server.join().unwrap();
        assert_eq!(&pinger.join().unwrap(), b"ping");
        flooder.join().unwrap();
        answered_after.take()
    });
    let answered_after = answered_after.expect("the second client was answered");
    assert!(
        answered_after < FLOOD,
        "the second client was answered only after all {answered_after} bytes of the flood"
    );
}

/// What a heartbeat and a std accept loop did, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    Tick,
    Accepted,
}

#[test]
fn a_std_accept_loop_in_a_green_thread_takes_every_pending_connection_in_one_turn() {
    // More than two budgets' worth; each connection is two fds, so a default open-file limit
    // of 1024 holds them.
    const PENDING: usize = 300;
    let turns = run_bounded(|| {
        // In a green thread std's backlog of 128 becomes the kernel's longest (item 4e).
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        // Every connection is queued (handshake done) before the accept loop starts.
        let clients: Vec<TcpStream> = (0..PENDING)
            .map(|_| TcpStream::connect(address).unwrap())
            .collect();
        let turns = Rc::new(RefCell::new(Vec::new()));
        let stop = Rc::new(Cell::new(false));
        let heartbeat = {
            let (turns, stop) = (turns.clone(), stop.clone());
            greenweave::spawn(move || {
                while !stop.get() {
                    turns.borrow_mut().push(Turn::Tick);
                    greenweave::thread::yield_now();
                }
            })
        };
        greenweave::thread::yield_now();
        let mut served = Vec::new();
        for _ in 0..PENDING {
            served.push(listener.accept().unwrap().0);
            turns.borrow_mut().push(Turn::Accepted);
        }
        stop.set(true);
        heartbeat.join().unwrap();
        drop((clients, served));
        Rc::try_unwrap(turns).unwrap().into_inner()
    });
    let first = turns
        .iter()
        .position(|&turn| turn == Turn::Accepted)
        .unwrap();
    let last = turns
        .iter()
        .rposition(|&turn| turn == Turn::Accepted)
        .unwrap();
    let ticks_between = turns[first..=last]
        .iter()
        .filter(|&&turn| turn == Turn::Tick)
        .count();
    assert_eq!(
        ticks_between, 0,
        "the heartbeat ran {ticks_between} times between the first and the last of {PENDING} \
         accepts of connections already queued: the accept loop stopped before EAGAIN"
    );
}

// Item 4d: close wakes a reader on an fd first met in its read ---------------------------------

#[test]
fn closing_an_fd_wakes_the_green_thread_parked_reading_it_even_with_no_other_event_to_come() {
    let events = run_bounded(|| {
        // A first park on the timers: the runtime's own start-up events are used up, so only
        // the close can end the read's park.
        greenweave::thread::sleep(Duration::from_millis(1));
        // socketpair is not hooked: the read is the first the hooks hear of the fd.
        let (near, _far) = UnixStream::pair().unwrap();
        let fd = near.as_raw_fd();
        std::mem::forget(near);
        let log = Rc::new(RefCell::new(Vec::new()));
        let reader = greenweave::spawn({
            let log = log.clone();
            move || {
                log.borrow_mut().push("read starts");
                let mut buffer = [0u8; 8];
                // SAFETY: a live buffer of that length.
                let n = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), 8) };
                let failed = errno();
                log.borrow_mut().push("read returned");
                (n, failed)
            }
        });
        let closer = greenweave::spawn({
            let log = log.clone();
            move || {
                log.borrow_mut().push("closing");
                // SAFETY: the fd was `near`'s, forgotten above; closed once.
                assert_eq!(unsafe { libc::close(fd) }, 0);
            }
        });
        let read = reader.join().unwrap();
        closer.join().unwrap();
        let events = log.borrow().clone();
        (read, events)
    });
    assert_eq!(events.0, (-1, libc::EBADF));
    assert_eq!(events.1, ["read starts", "closing", "read returned"]);
}

// Item 4e: std's listeners get the kernel's longest backlog in green threads -------------------

/// The backlog `listener` listens with (`tcp_info.tcpi_sacked` of a listening socket), if the
/// kernel (or emulator) says.
fn backlog_of(listener: &TcpListener) -> Option<u32> {
    // SAFETY: all zeroes is a valid tcp_info.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are live and sized for a tcp_info.
    let rc = unsafe {
        libc::getsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    let whole = std::mem::offset_of!(libc::tcp_info, tcpi_sacked) + 4;
    (rc == 0 && len as usize >= whole).then_some(info.tcpi_sacked)
}

#[test]
fn a_std_listener_bound_in_a_green_thread_has_the_kernels_longest_backlog_and_elsewhere_stds() {
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (green, chosen) = run_bounded(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let green = backlog_of(&listener);
        // A backlog the program chose is kept.
        // SAFETY: listen on a live socket.
        assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 16) }, 0);
        (green, backlog_of(&listener))
    });
    let plain = backlog_of(&TcpListener::bind("127.0.0.1:0").unwrap());
    match (green, chosen, plain) {
        (Some(green), Some(chosen), Some(plain)) => {
            assert_eq!(green, somaxconn);
            assert_eq!(chosen, 16);
            assert_eq!(plain, 128);
        }
        // qemu-user hands back only the first word of TCP_INFO: nothing to compare.
        _ => eprintln!("TCP_INFO does not say a listener's backlog here: not checked"),
    }
}
