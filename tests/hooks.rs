//! The `hooks` feature: blocking code nobody rewrote parks only its green thread.
#![cfg(feature = "hooks")]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

#[test]
fn std_sleep_in_green_threads_overlaps() {
    let started = Instant::now();
    greenweave::run(|| {
        let sleepers: Vec<_> = (0..10)
            .map(|_| greenweave::spawn(|| std::thread::sleep(Duration::from_millis(100))))
            .collect();
        for sleeper in sleepers {
            sleeper.join().unwrap();
        }
    });
    eprintln!("elapsed {:?}", started.elapsed());
}

#[test]
fn std_tcp_echo_in_green_threads() {
    greenweave::run(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = greenweave::spawn(move || {
            for _ in 0..3 {
                let (mut stream, _) = listener.accept().unwrap();
                greenweave::spawn(move || {
                    let mut buffer = [0; 5];
                    stream.read_exact(&mut buffer).unwrap();
                    stream.write_all(&buffer).unwrap();
                });
            }
        });
        let clients: Vec<_> = (0..3)
            .map(|_| {
                greenweave::spawn(move || {
                    let mut stream = std::net::TcpStream::connect(address).unwrap();
                    stream.write_all(b"hello").unwrap();
                    let mut reply = [0; 5];
                    stream.read_exact(&mut reply).unwrap();
                    reply
                })
            })
            .collect();
        for client in clients {
            assert_eq!(&client.join().unwrap(), b"hello");
        }
        server.join().unwrap();
    });
}

#[test]
fn a_std_stream_the_hooks_parked_on_can_become_a_green_stream() {
    greenweave::run(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let server = greenweave::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream.write_all(b"one").unwrap();
            let mut ack = [0; 1];
            stream.read_exact(&mut ack).unwrap();
            stream.write_all(b"two").unwrap();
        });
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        let mut first = [0; 3];
        // Parks in the hooked recv: the fd is registered on the program's behalf.
        stream.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"one");
        stream.write_all(b"k").unwrap();
        let mut green = greenweave::net::TcpStream::from_std(stream).unwrap();
        let mut second = [0; 3];
        green.read_exact(&mut second).unwrap();
        assert_eq!(&second, b"two");
        server.join().unwrap();
    });
}

// ---------------------------------------------------------------------------------------------
// Behaviour of the hooks with std's own types and raw libc calls. A hooked call "parks" when
// another green thread, spawned just before it and so queued behind the caller, runs before
// the call returns: on one OS thread, that can only happen if the caller's green thread gave
// way. Each test pins that order (or its absence) rather than how long anything took.
// ---------------------------------------------------------------------------------------------

use std::cell::{Cell, RefCell};
use std::ffi::{CStr, CString};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

mod common;
#[path = "common/sleep_order.rs"]
mod sleep_order;

/// An ordered record of what the green threads of one test did.
#[derive(Clone, Default)]
struct Log(Rc<RefCell<Vec<String>>>);

impl Log {
    fn push(&self, event: impl Into<String>) {
        self.0.borrow_mut().push(event.into());
    }

    fn events(&self) -> Vec<String> {
        self.0.borrow().clone()
    }
}

/// Runs `call` in the calling green thread right after spawning another green thread that
/// logs "other ran", then logs `done`: the log says whether `call` parked (the other green
/// thread ran first) or not.
fn with_other_green_thread<T>(log: &Log, done: &str, call: impl FnOnce() -> T) -> T {
    let other_log = log.clone();
    let other = greenweave::spawn(move || other_log.push("other ran"));
    let result = call();
    log.push(done);
    other.join().unwrap();
    result
}

/// Whether `call`, made in a green thread, parked it (see [`with_other_green_thread`]).
fn parks<T>(call: impl FnOnce() -> T) -> (bool, T) {
    let log = Log::default();
    let result = with_other_green_thread(&log, "returned", call);
    (log.events() == ["other ran", "returned"], result)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

/// A port on loopback where nothing listens (a listener's, closed again).
fn refused_address() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

// 1. TCP echo with many clients ---------------------------------------------------------------

#[test]
fn fifty_std_tcp_clients_get_every_byte_echoed_while_a_heartbeat_ticks_between_requests() {
    const CLIENTS: usize = 50;
    const MESSAGES: usize = 5;
    let log = Log::default();
    greenweave::run({
        let log = log.clone();
        move || {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let address = listener.local_addr().unwrap();
            let done = Rc::new(Cell::new(false));
            let heartbeat = greenweave::spawn({
                let (log, done) = (log.clone(), done.clone());
                move || {
                    while !done.get() {
                        std::thread::sleep(Duration::from_micros(100));
                        log.push("tick");
                    }
                }
            });
            let server = greenweave::spawn(move || {
                let handlers: Vec<_> = (0..CLIENTS)
                    .map(|_| {
                        let (mut stream, _) = listener.accept().unwrap();
                        greenweave::spawn(move || {
                            let mut buffer = [0; 4096];
                            let mut echoed = 0;
                            loop {
                                match stream.read(&mut buffer).unwrap() {
                                    0 => return echoed,
                                    n => {
                                        stream.write_all(&buffer[..n]).unwrap();
                                        echoed += n;
                                    }
                                }
                            }
                        })
                    })
                    .collect();
                handlers
                    .into_iter()
                    .map(|h| h.join().unwrap())
                    .sum::<usize>()
            });
            let clients: Vec<_> = (0..CLIENTS)
                .map(|client| {
                    let log = log.clone();
                    greenweave::spawn(move || {
                        let mut stream = TcpStream::connect(address).unwrap();
                        let mut sent = 0;
                        for message in 0..MESSAGES {
                            let request = format!("client {client} message {message};")
                                .repeat(1 + client * message);
                            log.push(format!("sent {client}"));
                            stream.write_all(request.as_bytes()).unwrap();
                            let mut reply = vec![0; request.len()];
                            stream.read_exact(&mut reply).unwrap();
                            log.push(format!("replied {client}"));
                            assert_eq!(reply, request.as_bytes(), "client {client} #{message}");
                            sent += request.len();
                        }
                        stream.shutdown(std::net::Shutdown::Write).unwrap();
                        let mut rest = Vec::new();
                        stream.read_to_end(&mut rest).unwrap();
                        assert!(rest.is_empty());
                        sent
                    })
                })
                .collect();
            let sent: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
            done.set(true);
            heartbeat.join().unwrap();
            assert_eq!(server.join().unwrap(), sent, "every byte sent was echoed");
        }
    });
    // The heartbeat ticked while requests were waiting for their replies.
    let mut in_flight = 0usize;
    let mut ticks_in_flight = 0;
    for event in log.events() {
        if event.starts_with("sent") {
            in_flight += 1;
        } else if event.starts_with("replied") {
            in_flight -= 1;
        } else if in_flight > 0 {
            ticks_in_flight += 1;
        }
    }
    assert_eq!(in_flight, 0);
    assert!(ticks_in_flight > 0, "no tick while a request was in flight");
}

// 2. UDP echo ---------------------------------------------------------------------------------

#[test]
fn std_udp_echo_in_green_threads_answers_every_datagram_to_its_sender() {
    const CLIENTS: usize = 10;
    const MESSAGES: usize = 3;
    let log = Log::default();
    greenweave::run({
        let log = log.clone();
        move || {
            let server = UdpSocket::bind("127.0.0.1:0").unwrap();
            let address = server.local_addr().unwrap();
            let server = greenweave::spawn({
                let log = log.clone();
                move || {
                    let mut buffer = [0; 512];
                    for _ in 0..CLIENTS * MESSAGES {
                        let (n, from) = server.recv_from(&mut buffer).unwrap();
                        log.push("received");
                        let mut reply = b"echo ".to_vec();
                        reply.extend_from_slice(&buffer[..n]);
                        assert_eq!(server.send_to(&reply, from).unwrap(), reply.len());
                    }
                }
            });
            let clients: Vec<_> = (0..CLIENTS)
                .map(|client| {
                    let log = log.clone();
                    greenweave::spawn(move || {
                        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
                        for message in 0..MESSAGES {
                            let request = format!("{client}/{message}");
                            log.push("sent");
                            socket.send_to(request.as_bytes(), address).unwrap();
                            let mut buffer = [0; 512];
                            let (n, from) = socket.recv_from(&mut buffer).unwrap();
                            assert_eq!(from, address);
                            assert_eq!(&buffer[..n], format!("echo {request}").as_bytes());
                        }
                    })
                })
                .collect();
            for client in clients {
                client.join().unwrap();
            }
            server.join().unwrap();
        }
    });
    let events = log.events();
    // The server's first recv_from parked until a client sent.
    assert_eq!(events[0], "sent");
    assert_eq!(
        events.iter().filter(|e| *e == "received").count(),
        CLIENTS * MESSAGES
    );
}

// 3. Sleeps -----------------------------------------------------------------------------------

/// The deadlines are compared through bounds (`assert_woke_in_deadline_order`): with 40 ms
/// steps between them, a sleeper that started late (by more than a step, as under the race
/// detector of `.ci/chaos`) may rightly end after a longer one spawned before it.
#[test]
fn std_sleeps_in_green_threads_end_in_order_of_duration_not_of_spawn() {
    let order = Rc::new(RefCell::new(Vec::new()));
    let started = Rc::new(RefCell::new(Vec::new()));
    greenweave::run({
        let (order, started) = (order.clone(), started.clone());
        move || {
            let sleepers: Vec<_> = [5u64, 1, 4, 2, 3]
                .into_iter()
                .map(|steps| {
                    let (order, started) = (order.clone(), started.clone());
                    greenweave::spawn(move || {
                        let nap = Duration::from_millis(40 * steps);
                        started.borrow_mut().push((steps, nap, Instant::now()));
                        std::thread::sleep(nap);
                        order.borrow_mut().push(steps);
                    })
                })
                .collect();
            for sleeper in sleepers {
                sleeper.join().unwrap();
            }
        }
    });
    sleep_order::assert_woke_in_deadline_order(&started.borrow(), &order.borrow());
}

/// The log of a green thread in a std sleep of `nap` beside a ticker that yields three times.
fn std_sleep_beside_a_ticker(nap: Duration) -> Vec<String> {
    let log = Log::default();
    greenweave::run({
        let log = log.clone();
        move || {
            let sleeper = greenweave::spawn({
                let log = log.clone();
                move || {
                    log.push("sleep starts");
                    std::thread::sleep(nap);
                    log.push("sleep ends");
                }
            });
            let ticker = greenweave::spawn({
                let log = log.clone();
                move || {
                    for _ in 0..3 {
                        log.push("tick");
                        greenweave::thread::yield_now();
                    }
                }
            });
            sleeper.join().unwrap();
            ticker.join().unwrap();
        }
    });
    log.events()
}

#[test]
fn a_ticker_green_thread_runs_while_another_is_in_std_sleep() {
    // A sleep whose time is up before the hook could park returns without a park (under qemu
    // or Valgrind the first pass through the hook can take 30 ms): such a try is made again,
    // longer.
    let expected = ["sleep starts", "tick", "tick", "tick", "sleep ends"];
    let mut events = Vec::new();
    for nap in [30, 300, 3000].map(Duration::from_millis) {
        events = std_sleep_beside_a_ticker(nap);
        if events == expected {
            break;
        }
    }
    assert_eq!(events, expected);
}

/// Asserts that `sleep`, called in a green thread, parks it and returns `0` no sooner than
/// `duration` after it was called.
///
/// The sleeps and timeouts that must park in these tests are 100 ms: a wait whose time is up
/// before the hook gets to park returns without a park (as it should), and under qemu or
/// Valgrind the first pass through a hook's code can take several milliseconds.
fn assert_sleep_parks(
    what: &'static str,
    duration: Duration,
    sleep: impl FnOnce() -> i64 + 'static,
) {
    greenweave::run(move || {
        let started = Instant::now();
        let (parked, result) = parks(sleep);
        assert_eq!(result, 0, "{what} returns 0");
        assert!(parked, "{what} let another green thread run");
        assert!(started.elapsed() >= duration, "{what} slept its full time");
    });
}

#[test]
fn libc_nanosleep_in_a_green_thread_parks_it() {
    let duration = Duration::from_millis(100);
    assert_sleep_parks("nanosleep", duration, move || {
        let request = libc::timespec {
            tv_sec: 0,
            tv_nsec: duration.as_nanos() as _,
        };
        let mut left = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: two live timespecs.
        i64::from(unsafe { libc::nanosleep(&request, &mut left) })
    });
}

#[test]
fn libc_usleep_in_a_green_thread_parks_it() {
    assert_sleep_parks("usleep", Duration::from_millis(100), || {
        // SAFETY: no preconditions.
        i64::from(unsafe { libc::usleep(100_000) })
    });
}

#[test]
fn libc_sleep_of_one_second_in_a_green_thread_parks_it() {
    assert_sleep_parks("sleep(1)", Duration::from_secs(1), || {
        // SAFETY: no preconditions.
        i64::from(unsafe { libc::sleep(1) })
    });
}

#[test]
fn libc_sleep_of_zero_seconds_returns_zero_at_once() {
    greenweave::run(|| {
        // SAFETY: no preconditions.
        let (parked, left) = parks(|| unsafe { libc::sleep(0) });
        assert_eq!(left, 0);
        assert!(!parked, "a zero sleep is libc's: it returns without a park");
    });
}

/// `clock`'s time now plus `duration`, as an absolute `timespec`.
fn clock_after(clock: libc::clockid_t, duration: Duration) -> libc::timespec {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a live timespec.
    assert_eq!(unsafe { libc::clock_gettime(clock, &mut now) }, 0);
    let nanos = now.tv_nsec as u64 + duration.subsec_nanos() as u64;
    libc::timespec {
        tv_sec: now.tv_sec
            + duration.as_secs() as libc::time_t
            + (nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as _,
    }
}

/// Whether `clock` has reached `deadline`.
fn clock_reached(clock: libc::clockid_t, deadline: &libc::timespec) -> bool {
    let now = clock_after(clock, Duration::ZERO);
    (now.tv_sec, now.tv_nsec) >= (deadline.tv_sec, deadline.tv_nsec)
}

#[test]
fn libc_clock_nanosleep_with_timer_abstime_parks_until_the_deadline_on_that_clock() {
    for clock in [libc::CLOCK_MONOTONIC, libc::CLOCK_REALTIME] {
        greenweave::run(move || {
            // A deadline that passed before the call returns at once, as it should, and shows
            // nothing about parking: under Valgrind on a loaded machine even 100 ms can pass
            // between taking the deadline and the call. Such a try is made again, longer.
            for wait in [100, 1_000, 10_000].map(Duration::from_millis) {
                let deadline = clock_after(clock, wait);
                let (parked, (ahead_at_call, result)) = parks(|| {
                    let ahead_at_call = !clock_reached(clock, &deadline);
                    // SAFETY: a live timespec; no remainder is asked for.
                    let result = unsafe {
                        libc::clock_nanosleep(
                            clock,
                            libc::TIMER_ABSTIME,
                            &deadline,
                            std::ptr::null_mut(),
                        )
                    };
                    (ahead_at_call, result)
                });
                assert_eq!(result, 0);
                assert!(
                    clock_reached(clock, &deadline),
                    "clock {clock} reached the deadline"
                );
                if !parked && !ahead_at_call {
                    continue;
                }
                assert!(parked, "clock {clock} let another green thread run");
                return;
            }
            panic!("clock {clock}: every deadline had passed before its call was made");
        });
    }
}

#[test]
fn libc_clock_nanosleep_relative_parks_and_a_past_absolute_deadline_returns_at_once() {
    greenweave::run(|| {
        let started = Instant::now();
        let request = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        let (parked, result) = parks(|| {
            // SAFETY: a live timespec; no remainder is asked for.
            unsafe {
                libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &request, std::ptr::null_mut())
            }
        });
        assert_eq!((result, parked), (0, true));
        assert!(started.elapsed() >= Duration::from_millis(100));
        let past = libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        let (parked, result) = parks(|| {
            // SAFETY: as above.
            unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &past,
                    std::ptr::null_mut(),
                )
            }
        });
        assert_eq!((result, parked), (0, false));
        let invalid = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000_000,
        };
        // SAFETY: as above.
        let result = unsafe {
            libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &invalid, std::ptr::null_mut())
        };
        assert_eq!(
            result,
            libc::EINVAL,
            "an invalid request is refused as libc does"
        );
    });
}

// 4. Name resolution --------------------------------------------------------------------------

/// Whether one of `LOOKUPS` calls of `lookup` parked its green thread. A lookup runs on a
/// helper OS thread, and the green thread parks only if the helper has not finished by the time
/// it looks: reading `/etc/hosts` can win that race, so one lookup may not park, but not all.
fn some_lookup_parks<T>(mut lookup: impl FnMut() -> T) -> bool {
    const LOOKUPS: usize = 20;
    (0..LOOKUPS).any(|_| parks(&mut lookup).0)
}

#[test]
fn to_socket_addrs_of_localhost_in_a_green_thread_resolves_while_another_runs() {
    greenweave::run(|| {
        let addresses: Vec<SocketAddr> = ("localhost", 4321).to_socket_addrs().unwrap().collect();
        assert!(!addresses.is_empty());
        assert!(
            addresses
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 4321),
            "{addresses:?}"
        );
        assert!(some_lookup_parks(|| ("localhost", 4321)
            .to_socket_addrs()
            .unwrap()
            .count()));
    });
}

/// `getaddrinfo(node, service)` for IPv4 TCP: the addresses, or the error code.
fn getaddrinfo_v4(node: &str, service: &str, flags: i32) -> Result<Vec<SocketAddr>, i32> {
    let (node, service) = (CString::new(node).unwrap(), CString::new(service).unwrap());
    // SAFETY: all zeroes is a valid addrinfo (no pointers set).
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = libc::AF_INET;
    hints.ai_socktype = libc::SOCK_STREAM;
    hints.ai_flags = flags;
    let mut result = std::ptr::null_mut();
    // SAFETY: live NUL-terminated strings and hints; `result` receives the list.
    let rc = unsafe { libc::getaddrinfo(node.as_ptr(), service.as_ptr(), &hints, &mut result) };
    if rc != 0 {
        return Err(rc);
    }
    let mut addresses = Vec::new();
    let mut entry = result;
    while !entry.is_null() {
        // SAFETY: a node of the list getaddrinfo returned, freed below; AF_INET entries hold a
        // sockaddr_in.
        unsafe {
            let address = &*(*entry).ai_addr.cast::<libc::sockaddr_in>();
            let ip = std::net::Ipv4Addr::from(u32::from_be(address.sin_addr.s_addr));
            addresses.push(SocketAddr::from((ip, u16::from_be(address.sin_port))));
            entry = (*entry).ai_next;
        }
    }
    // SAFETY: the list getaddrinfo returned, freed once.
    unsafe { libc::freeaddrinfo(result) };
    Ok(addresses)
}

#[test]
fn libc_getaddrinfo_in_a_green_thread_parks_it_and_returns_libcs_results_and_errors() {
    greenweave::run(|| {
        let found = getaddrinfo_v4("localhost", "80", 0).unwrap();
        assert!(
            found.contains(&"127.0.0.1:80".parse().unwrap()),
            "{found:?}"
        );
        let refused = getaddrinfo_v4("not a number", "80", libc::AI_NUMERICHOST);
        assert_eq!(refused, Err(libc::EAI_NONAME));
        let name = CString::new("localhost").unwrap();
        // SAFETY: a live NUL-terminated string.
        let entry = unsafe { gethostbyname(name.as_ptr()) };
        assert!(!entry.is_null());
        // SAFETY: a hostent from libc's static storage, read before any other lookup.
        let official = unsafe { CStr::from_ptr((*entry).h_name) };
        assert!(!official.to_bytes().is_empty());
        assert!(some_lookup_parks(|| getaddrinfo_v4("localhost", "80", 0)));
        // SAFETY: as above.
        assert!(some_lookup_parks(|| unsafe {
            gethostbyname(name.as_ptr())
        }));
    });
}

unsafe extern "C" {
    /// Not in the `libc` crate for Linux.
    fn gethostbyname(name: *const libc::c_char) -> *mut libc::hostent;
}

// 5. poll, ppoll, select ----------------------------------------------------------------------

fn pollfds(fds: &[RawFd], events: libc::c_short) -> Vec<libc::pollfd> {
    fds.iter()
        .map(|&fd| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect()
}

/// Three connected pairs; the green thread spawned by the call writes a byte into the second
/// pair's far end.
fn three_pairs() -> Vec<(UnixStream, UnixStream)> {
    (0..3).map(|_| UnixStream::pair().unwrap()).collect()
}

/// Spawns a green thread that logs "writer ran" and writes one byte to `stream`.
fn spawn_writer(log: &Log, mut stream: UnixStream) -> greenweave::thread::JoinHandle<UnixStream> {
    let log = log.clone();
    greenweave::spawn(move || {
        log.push("writer ran");
        stream.write_all(b"x").unwrap();
        stream
    })
}

#[test]
fn poll_over_three_fds_parks_until_the_second_is_written_and_reports_only_it() {
    greenweave::run(|| {
        let pairs = three_pairs();
        let log = Log::default();
        let writer = spawn_writer(&log, pairs[1].1.try_clone().unwrap());
        let fds: Vec<RawFd> = pairs.iter().map(|(near, _)| near.as_raw_fd()).collect();
        let mut entries = pollfds(&fds, libc::POLLIN);
        // SAFETY: three live pollfds.
        let ready = unsafe { libc::poll(entries.as_mut_ptr(), 3, -1) };
        log.push("poll returned");
        assert_eq!(ready, 1);
        let revents: Vec<_> = entries.iter().map(|e| e.revents).collect();
        assert_eq!(revents, [0, libc::POLLIN, 0]);
        assert_eq!(log.events(), ["writer ran", "poll returned"]);
        writer.join().unwrap();
    });
}

#[test]
fn poll_with_a_timeout_and_nothing_ready_returns_zero_after_parking() {
    greenweave::run(|| {
        let pairs = three_pairs();
        let fds: Vec<RawFd> = pairs.iter().map(|(near, _)| near.as_raw_fd()).collect();
        let mut entries = pollfds(&fds, libc::POLLIN);
        let started = Instant::now();
        // SAFETY: three live pollfds.
        let (parked, ready) = parks(|| unsafe { libc::poll(entries.as_mut_ptr(), 3, 100) });
        assert_eq!(ready, 0);
        assert!(parked);
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(entries.iter().all(|e| e.revents == 0));
        // No fds at all: a sleep.
        // SAFETY: no pollfds are read.
        let (parked, ready) = parks(|| unsafe { libc::poll(std::ptr::null_mut(), 0, 100) });
        assert_eq!((ready, parked), (0, true));
    });
}

#[test]
fn ppoll_over_three_fds_parks_until_the_second_is_written_and_reports_only_it() {
    greenweave::run(|| {
        let pairs = three_pairs();
        let log = Log::default();
        let writer = spawn_writer(&log, pairs[1].1.try_clone().unwrap());
        let fds: Vec<RawFd> = pairs.iter().map(|(near, _)| near.as_raw_fd()).collect();
        let mut entries = pollfds(&fds, libc::POLLIN);
        let timeout = libc::timespec {
            tv_sec: 60,
            tv_nsec: 0,
        };
        // SAFETY: three live pollfds and a live timespec; no signal mask.
        let ready = unsafe { libc::ppoll(entries.as_mut_ptr(), 3, &timeout, std::ptr::null()) };
        log.push("ppoll returned");
        assert_eq!(ready, 1);
        let revents: Vec<_> = entries.iter().map(|e| e.revents).collect();
        assert_eq!(revents, [0, libc::POLLIN, 0]);
        assert_eq!(log.events(), ["writer ran", "ppoll returned"]);
        writer.join().unwrap();
        // A short timeout with nothing ready: 0.
        let short = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        let mut quiet = pollfds(&fds[..1], libc::POLLIN);
        // SAFETY: as above.
        let (parked, ready) =
            parks(|| unsafe { libc::ppoll(quiet.as_mut_ptr(), 1, &short, std::ptr::null()) });
        assert_eq!((ready, parked), (0, true));
    });
}

/// Fills `stream`'s send buffer (the stream is left non-blocking); returns the bytes written.
fn fill_send_buffer(stream: &mut UnixStream) -> usize {
    stream.set_nonblocking(true).unwrap();
    let chunk = [7u8; 65536];
    let mut written = 0;
    loop {
        match stream.write(&chunk) {
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return written,
            Err(e) => panic!("filling the send buffer: {e}"),
        }
    }
}

#[test]
fn select_parks_until_a_read_set_fd_is_readable_and_leaves_an_unwritable_write_set_fd_out() {
    greenweave::run(|| {
        let mut pairs = three_pairs();
        fill_send_buffer(&mut pairs[2].0);
        let log = Log::default();
        let writer = spawn_writer(&log, pairs[1].1.try_clone().unwrap());
        let fds: Vec<RawFd> = pairs.iter().map(|(near, _)| near.as_raw_fd()).collect();
        // SAFETY: fd_sets are plain data, emptied by FD_ZERO before use.
        let (mut reads, mut writes): (libc::fd_set, libc::fd_set) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: live sets; every fd is below FD_SETSIZE.
        unsafe {
            libc::FD_ZERO(&mut reads);
            libc::FD_ZERO(&mut writes);
            libc::FD_SET(fds[0], &mut reads);
            libc::FD_SET(fds[1], &mut reads);
            libc::FD_SET(fds[2], &mut writes);
        }
        let mut timeout = libc::timeval {
            tv_sec: 60,
            tv_usec: 0,
        };
        let nfds = fds.iter().max().unwrap() + 1;
        // SAFETY: live sets and timeval.
        let ready = unsafe {
            libc::select(
                nfds,
                &mut reads,
                &mut writes,
                std::ptr::null_mut(),
                &mut timeout,
            )
        };
        log.push("select returned");
        assert_eq!(ready, 1);
        // SAFETY: live sets.
        let marked = unsafe {
            [
                libc::FD_ISSET(fds[0], &reads),
                libc::FD_ISSET(fds[1], &reads),
                libc::FD_ISSET(fds[2], &writes),
            ]
        };
        assert_eq!(marked, [false, true, false]);
        assert_eq!(log.events(), ["writer ran", "select returned"]);
        assert!(
            timeout.tv_sec <= 60,
            "the timeout holds what was left of it"
        );
        writer.join().unwrap();
    });
}

#[test]
fn select_reports_a_writable_fd_at_once_and_times_out_with_empty_sets() {
    greenweave::run(|| {
        let pairs = three_pairs();
        let fds: Vec<RawFd> = pairs.iter().map(|(near, _)| near.as_raw_fd()).collect();
        let nfds = fds.iter().max().unwrap() + 1;
        // SAFETY: fd_sets are plain data, emptied by FD_ZERO before use.
        let (mut reads, mut writes): (libc::fd_set, libc::fd_set) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: live sets; every fd is below FD_SETSIZE.
        unsafe {
            libc::FD_ZERO(&mut reads);
            libc::FD_ZERO(&mut writes);
            libc::FD_SET(fds[0], &mut reads);
            libc::FD_SET(fds[1], &mut reads);
            libc::FD_SET(fds[2], &mut writes);
        }
        let mut timeout = libc::timeval {
            tv_sec: 60,
            tv_usec: 0,
        };
        // SAFETY: live sets and timeval.
        let (parked, ready) = parks(|| unsafe {
            libc::select(
                nfds,
                &mut reads,
                &mut writes,
                std::ptr::null_mut(),
                &mut timeout,
            )
        });
        assert_eq!((ready, parked), (1, false));
        // SAFETY: live sets.
        unsafe {
            assert!(!libc::FD_ISSET(fds[0], &reads) && !libc::FD_ISSET(fds[1], &reads));
            assert!(libc::FD_ISSET(fds[2], &writes));
            libc::FD_ZERO(&mut writes);
            libc::FD_SET(fds[0], &mut reads);
        }
        let mut short = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        // SAFETY: as above.
        let (parked, ready) = parks(|| unsafe {
            libc::select(
                nfds,
                &mut reads,
                &mut writes,
                std::ptr::null_mut(),
                &mut short,
            )
        });
        assert_eq!((ready, parked), (0, true));
        // SAFETY: a live set.
        assert!(!unsafe { libc::FD_ISSET(fds[0], &reads) });
        assert_eq!(
            (short.tv_sec, short.tv_usec),
            (0, 0),
            "nothing left of the timeout"
        );
    });
}

// 6. Non-blocking fds -------------------------------------------------------------------------

#[test]
fn a_std_socket_set_nonblocking_gets_would_block_at_once_without_parking() {
    greenweave::run(|| {
        let (mut near, _far) = UnixStream::pair().unwrap();
        near.set_nonblocking(true).unwrap();
        let (parked, result) = parks(|| near.read(&mut [0; 8]));
        assert_eq!(result.unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
        assert!(!parked);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let (parked, result) = parks(|| listener.accept());
        assert_eq!(result.unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
        assert!(!parked);
    });
}

#[test]
fn libc_recv_with_msg_dontwait_gets_eagain_at_once_on_a_blocking_socket() {
    greenweave::run(|| {
        let (near, _far) = UnixStream::pair().unwrap();
        let mut buffer = [0u8; 8];
        let (parked, (result, error)) = parks(|| {
            // SAFETY: a live buffer of that length.
            let result = unsafe {
                libc::recv(
                    near.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    8,
                    libc::MSG_DONTWAIT,
                )
            };
            (result, errno())
        });
        assert_eq!((result, error), (-1, libc::EAGAIN));
        assert!(!parked);
    });
}

#[test]
fn fcntl_o_nonblock_makes_reads_fail_at_once_and_ioctl_fionbio_zero_makes_them_park_again() {
    greenweave::run(|| {
        let (mut near, far) = UnixStream::pair().unwrap();
        let fd = near.as_raw_fd();
        // A first read that parks, so the fd's state is known to the hooks before it changes.
        let log = Log::default();
        let writer = spawn_writer(&log, far.try_clone().unwrap());
        near.read_exact(&mut [0; 1]).unwrap();
        writer.join().unwrap();
        // SAFETY: F_GETFL/F_SETFL take an int.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK), 0);
        }
        let (parked, result) = parks(|| near.read(&mut [0; 1]));
        assert_eq!(result.unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
        assert!(!parked, "non-blocking through fcntl: no park");
        let blocking: libc::c_int = 0;
        // SAFETY: FIONBIO reads an int.
        assert_eq!(unsafe { libc::ioctl(fd, libc::FIONBIO, &blocking) }, 0);
        let log = Log::default();
        let writer = spawn_writer(&log, far.try_clone().unwrap());
        let mut byte = [0; 1];
        near.read_exact(&mut byte).unwrap();
        log.push("read returned");
        assert_eq!(&byte, b"x");
        assert_eq!(log.events(), ["writer ran", "read returned"]);
        writer.join().unwrap();
    });
}

// 7. Socket timeouts --------------------------------------------------------------------------

#[test]
fn a_std_read_timeout_ends_a_parked_read_with_would_block() {
    greenweave::run(|| {
        // A timeout that is up before the hook could park ends the read without a park (under
        // qemu or Valgrind the first pass through the hook can take that long): such a read is
        // made again, with a longer timeout.
        let (mut near, _far) = UnixStream::pair().unwrap();
        let mut parked = false;
        for timeout in [50, 500, 5000].map(Duration::from_millis) {
            near.set_read_timeout(Some(timeout)).unwrap();
            let started = Instant::now();
            let result;
            (parked, result) = parks(|| near.read(&mut [0; 8]));
            let error = result.unwrap_err();
            assert_eq!(error.kind(), std::io::ErrorKind::WouldBlock);
            assert_eq!(error.raw_os_error(), Some(libc::EAGAIN));
            assert!(started.elapsed() >= timeout);
            if parked {
                break;
            }
        }
        assert!(parked);
        // The same on a TCP stream, whose socket the hooks saw created.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        for timeout in [20, 200, 2000].map(Duration::from_millis) {
            client.set_read_timeout(Some(timeout)).unwrap();
            let result;
            (parked, result) = parks(|| client.read(&mut [0; 8]));
            assert_eq!(result.unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
            if parked {
                break;
            }
        }
        assert!(parked);
    });
}

#[test]
fn a_std_write_timeout_ends_a_write_parked_on_a_full_buffer_with_would_block_and_loses_nothing() {
    greenweave::run(|| {
        let (mut near, mut far) = UnixStream::pair().unwrap();
        let chunk = [7u8; 65536];
        let mut written = 0;
        // A timeout that is up before the hook could park ends the write without a park (under
        // qemu or Valgrind the first pass through the hook can take that long): such a write is
        // made again, with a longer timeout.
        let mut events = Vec::new();
        for timeout in [50, 500, 5000].map(Duration::from_millis) {
            near.set_write_timeout(Some(timeout)).unwrap();
            let log = Log::default();
            let error = with_other_green_thread(&log, "write failed", || {
                loop {
                    match near.write(&chunk) {
                        Ok(n) => written += n,
                        Err(e) => break e,
                    }
                }
            });
            assert_eq!(error.kind(), std::io::ErrorKind::WouldBlock);
            events = log.events();
            if events == ["other ran", "write failed"] {
                break;
            }
        }
        assert_eq!(events, ["other ran", "write failed"]);
        drop(near);
        let mut received = Vec::new();
        far.read_to_end(&mut received).unwrap();
        assert_eq!(received.len(), written);
        assert!(received.iter().all(|&b| b == 7));
    });
}

// 8. close while another green thread waits ---------------------------------------------------

#[test]
fn closing_an_fd_wakes_the_green_thread_parked_reading_it_with_ebadf() {
    greenweave::run(|| {
        let (near, _far) = UnixStream::pair().unwrap();
        let fd = near.into_raw_fd();
        let log = Log::default();
        let reader = greenweave::spawn({
            let log = log.clone();
            move || {
                log.push("read starts");
                let mut buffer = [0u8; 8];
                // SAFETY: a live buffer of that length.
                let result = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), 8) };
                log.push("read returned");
                (result, errno())
            }
        });
        greenweave::thread::yield_now();
        log.push("closing");
        // SAFETY: the fd is ours (taken out of `near`), closed once.
        assert_eq!(unsafe { libc::close(fd) }, 0);
        assert_eq!(reader.join().unwrap(), (-1, libc::EBADF));
        assert_eq!(log.events(), ["read starts", "closing", "read returned"]);
    });
}

#[test]
fn a_socket_reusing_the_number_of_a_closed_parked_on_fd_parks_and_wakes_normally() {
    // In a child process: there, nothing else opens fds, so the new socket gets the number.
    let outcome = common::run_in_child(
        "a_socket_reusing_the_number_of_a_closed_parked_on_fd_parks_and_wakes_normally",
        || {
            greenweave::run(|| {
                let (near, _far) = UnixStream::pair().unwrap();
                let fd = near.into_raw_fd();
                let reader = greenweave::spawn(move || {
                    // SAFETY: a live buffer of that length.
                    unsafe { libc::read(fd, [0u8; 8].as_mut_ptr().cast(), 8) }
                });
                greenweave::thread::yield_now();
                // SAFETY: the fd is ours, closed once.
                unsafe { libc::close(fd) };
                assert_eq!(reader.join().unwrap(), -1);
                let (mut again, mut far) = UnixStream::pair().unwrap();
                assert_eq!(
                    again.as_raw_fd(),
                    fd,
                    "the new socket has the closed one's number"
                );
                // Bounded, so a lost wake-up fails instead of hanging.
                again
                    .set_read_timeout(Some(Duration::from_secs(20)))
                    .unwrap();
                let log = Log::default();
                let writer = greenweave::spawn({
                    let log = log.clone();
                    move || {
                        log.push("writer ran");
                        far.write_all(b"fresh").unwrap();
                    }
                });
                let mut buffer = [0; 5];
                again.read_exact(&mut buffer).unwrap();
                log.push("read returned");
                assert_eq!(&buffer, b"fresh");
                assert_eq!(log.events(), ["writer ran", "read returned"]);
                writer.join().unwrap();
            });
            std::process::exit(0);
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
}

// 9. Outside a green thread every hook is libc's ----------------------------------------------

/// Makes each hooked call the way a program outside any runtime would, and checks libc's
/// results: a read that blocks until another OS thread writes, a read timeout, sleeps, polls,
/// a refused connect, a close of a bad fd, a name lookup.
fn libc_behaviour_everywhere_else() {
    let (mut near, far) = UnixStream::pair().unwrap();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        (&far).write_all(b"late").unwrap();
        far
    });
    let mut buffer = [0; 4];
    near.read_exact(&mut buffer).unwrap();
    assert_eq!(&buffer, b"late");
    let _far = writer.join().unwrap();

    near.set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let error = near.read(&mut buffer).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::WouldBlock);

    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(5));
    assert!(started.elapsed() >= Duration::from_millis(5));

    let mut entries = pollfds(&[near.as_raw_fd()], libc::POLLIN);
    // SAFETY: one live pollfd.
    assert_eq!(unsafe { libc::poll(entries.as_mut_ptr(), 1, 0) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::poll(entries.as_mut_ptr(), 1, 10) }, 0);

    let error = TcpStream::connect(refused_address()).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ECONNREFUSED));

    // SAFETY: closing a number far above any open fd: nothing of anyone's is closed.
    assert_eq!(unsafe { libc::close(1 << 20) }, -1);
    assert_eq!(errno(), libc::EBADF);

    let found = getaddrinfo_v4("localhost", "80", 0).unwrap();
    assert!(
        found.contains(&"127.0.0.1:80".parse().unwrap()),
        "{found:?}"
    );
}

#[test]
fn hooked_calls_on_a_plain_os_thread_are_libcs() {
    std::thread::spawn(libc_behaviour_everywhere_else)
        .join()
        .unwrap();
}

#[test]
fn hooked_calls_before_and_after_a_runtime_are_libcs() {
    libc_behaviour_everywhere_else();
    greenweave::run(|| {});
    libc_behaviour_everywhere_else();
}

#[test]
fn hooked_calls_on_the_unblock_pool_are_libcs() {
    greenweave::run(|| greenweave::unblock(libc_behaviour_everywhere_else));
}

#[test]
fn hooked_calls_on_another_os_thread_while_a_runtime_runs_are_libcs() {
    greenweave::run(|| {
        std::thread::spawn(libc_behaviour_everywhere_else)
            .join()
            .unwrap();
    });
}

// 10. Cancellation, scoped timeouts, shutdown -------------------------------------------------

#[test]
fn a_green_thread_cancelled_in_a_std_read_gets_ecanceled_and_ends_cancelled_at_its_next_park() {
    greenweave::run(|| {
        let (mut near, _far) = UnixStream::pair().unwrap();
        let log = Log::default();
        let reader = greenweave::spawn({
            let log = log.clone();
            move || {
                let error = near.read(&mut [0; 8]).unwrap_err();
                log.push(format!("read failed: {:?}", error.raw_os_error()));
                greenweave::thread::yield_now();
                log.push("ran past its next park");
            }
        });
        greenweave::thread::yield_now();
        reader.cancel();
        assert!(reader.join().unwrap_err().is_cancelled());
        assert_eq!(
            log.events(),
            [format!("read failed: {:?}", Some(libc::ECANCELED))]
        );
    });
}

/// A hook cannot unwind (it is an `extern "C"` function), so a body that returns after its
/// cancelled read, without a park in Rust code, finishes normally: the cancellation is only an
/// error its read returned.
#[test]
fn a_green_thread_cancelled_in_a_std_read_that_then_returns_without_a_park_finishes_with_its_value()
{
    greenweave::run(|| {
        let (mut near, _far) = UnixStream::pair().unwrap();
        let reader =
            greenweave::spawn(move || near.read(&mut [0; 8]).map_err(|e| e.raw_os_error()));
        greenweave::thread::yield_now();
        reader.cancel();
        assert_eq!(reader.join().unwrap(), Err(Some(libc::ECANCELED)));
    });
}

#[test]
fn a_std_read_in_a_time_timeout_scope_that_elapses_fails_with_timed_out() {
    greenweave::run(|| {
        let (mut near, _far) = UnixStream::pair().unwrap();
        // The read fails; the body returns before any park in Rust code, so the scope's end is
        // not raised: the body's own result comes back.
        let result =
            greenweave::time::timeout(Duration::from_millis(20), || near.read(&mut [0; 8]));
        let error = result.unwrap().unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(error.raw_os_error(), Some(libc::ETIMEDOUT));
        // A body that parks after the failed read is ended there: Elapsed. The read fails only
        // once the deadline has passed, so the park after it ends the scope at once; its sleep
        // is long, so that a read that failed too soon shows in the log, not as a sleep that
        // happened to outlast the deadline.
        let log = Log::default();
        let deadline = Instant::now() + Duration::from_millis(20);
        let result = greenweave::time::timeout_at(deadline, || {
            let read = near.read(&mut [0; 8]);
            log.push(if Instant::now() >= deadline {
                "read failed at the deadline"
            } else {
                "read failed before the deadline"
            });
            greenweave::thread::sleep(Duration::from_secs(60));
            log.push("ran past its next park");
            read
        });
        assert!(result.is_err(), "{result:?}, {:?}", log.events());
        assert_eq!(log.events(), ["read failed at the deadline"]);
        // A std sleep in a scope returns early, and the scope ends at the next park.
        let started = Instant::now();
        let result = greenweave::time::timeout(Duration::from_millis(20), || {
            std::thread::sleep(Duration::from_secs(3600));
            greenweave::thread::sleep(Duration::from_millis(1));
        });
        assert!(result.is_err());
        assert!(started.elapsed() < Duration::from_secs(3600));
    });
}

/// Counts its drops in a counter that outlives the runtime.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn runtime_shutdown_ends_green_threads_parked_in_hooked_reads_and_sleeps_and_runs_their_destructors()
 {
    let dropped = Arc::new(AtomicUsize::new(0));
    greenweave::run({
        let dropped = dropped.clone();
        move || {
            let (near, far) = UnixStream::pair().unwrap();
            let guard = Counted(dropped.clone());
            greenweave::spawn(move || {
                let _guard = guard;
                let mut near = near;
                let _ = near.read(&mut [0; 8]);
            });
            let guard = Counted(dropped.clone());
            greenweave::spawn(move || {
                let _guard = guard;
                std::thread::sleep(Duration::from_secs(3600));
            });
            let guard = Counted(dropped.clone());
            greenweave::spawn(move || {
                let _guard = guard;
                let mut entries = pollfds(&[far.as_raw_fd()], libc::POLLIN);
                // SAFETY: one live pollfd.
                unsafe { libc::poll(entries.as_mut_ptr(), 1, -1) };
            });
            // Let each of them park, then end the runtime with them parked.
            greenweave::thread::yield_now();
        }
    });
    assert_eq!(dropped.load(Ordering::SeqCst), 3);
}

// 11. Coroutines and greenlets inside green threads park; unwinding gets libc ----------------

#[test]
fn a_coroutine_resumed_in_a_green_thread_parks_it_on_std_sleeps_and_reads() {
    greenweave::run(|| {
        let (mut near, mut far) = UnixStream::pair().unwrap();
        far.write_all(b"data").unwrap();
        let (parked, (slept, data, timed_out)) = parks(|| {
            let mut coroutine = greenweave::Coroutine::<(), (), _>::new(move |_, ()| {
                // 100 ms, as the waits that must park here are: a shorter one could be up before
                // the hook parked, under qemu.
                let started = Instant::now();
                std::thread::sleep(Duration::from_millis(100));
                let slept = started.elapsed() >= Duration::from_millis(100);
                let mut data = [0; 4];
                near.read_exact(&mut data).unwrap();
                near.set_read_timeout(Some(Duration::from_millis(100)))
                    .unwrap();
                let timed_out = near.read(&mut [0; 1]).unwrap_err().kind();
                (slept, data, timed_out)
            });
            coroutine.resume(()).into_return().unwrap()
        });
        assert!(slept);
        assert_eq!(&data, b"data");
        assert_eq!(timed_out, std::io::ErrorKind::WouldBlock);
        // The coroutine parked its green thread: the other green thread ran meanwhile.
        assert!(
            parked,
            "the coroutine's sleep blocked the OS thread instead of parking"
        );
    });
}

#[test]
fn a_greenlet_switched_to_in_a_green_thread_parks_it_on_a_std_sleep() {
    greenweave::run(|| {
        let (parked, value) = parks(|| {
            let child = greenweave::greenlet::Greenlet::new(|x: Option<u32>| {
                // Long enough that its time is not up before it parks, even on the first, slow
                // pass of an emulator through the hook (which would return without a park).
                std::thread::sleep(Duration::from_millis(50));
                x.map(|x| x + 1)
            });
            child.switch(Some(41))
        });
        assert_eq!(value, Some(42));
        assert!(
            parked,
            "the greenlet's sleep blocked the OS thread instead of parking"
        );
    });
}

/// Sleeps and writes in its destructor, and logs how that went.
struct SleepsAndWritesOnDrop {
    stream: UnixStream,
    log: Log,
}

impl Drop for SleepsAndWritesOnDrop {
    fn drop(&mut self) {
        let started = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        self.log
            .push(if started.elapsed() >= Duration::from_millis(20) {
                "slept in full"
            } else {
                "sleep cut short"
            });
        self.stream.write_all(b"bye").unwrap();
        self.log.push("wrote");
    }
}

#[test]
fn a_green_thread_unwinding_gets_libc_sleeps_and_writes_in_its_destructors() {
    greenweave::run(|| {
        let (near, mut far) = UnixStream::pair().unwrap();
        let log = Log::default();
        let panicker = greenweave::spawn({
            let log = log.clone();
            move || {
                let _guard = SleepsAndWritesOnDrop { stream: near, log };
                panic!("unwinding on purpose");
            }
        });
        let other = greenweave::spawn({
            let log = log.clone();
            move || log.push("other ran")
        });
        assert!(panicker.join().unwrap_err().is_panic());
        other.join().unwrap();
        assert_eq!(log.events(), ["slept in full", "wrote", "other ran"]);
        let mut bye = [0; 3];
        far.read_exact(&mut bye).unwrap();
        assert_eq!(&bye, b"bye");
    });
}

// 12. connect ---------------------------------------------------------------------------------

#[test]
fn a_std_connect_completes_from_the_backlog_before_the_listener_accepts() {
    greenweave::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let log = Log::default();
        let client = greenweave::spawn({
            let log = log.clone();
            move || {
                let mut stream = TcpStream::connect(address).unwrap();
                log.push("connected");
                stream.write_all(b"early").unwrap();
                stream
            }
        });
        let _client = client.join().unwrap();
        log.push("accepting");
        let (mut accepted, _) = listener.accept().unwrap();
        let mut buffer = [0; 5];
        accepted.read_exact(&mut buffer).unwrap();
        assert_eq!(&buffer, b"early");
        assert_eq!(log.events(), ["connected", "accepting"]);
    });
}

#[test]
fn a_std_connect_to_a_refused_port_fails_with_econnrefused_in_a_green_thread() {
    greenweave::run(|| {
        let address = refused_address();
        let error = greenweave::spawn(move || TcpStream::connect(address).unwrap_err())
            .join()
            .unwrap();
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
        assert_eq!(error.raw_os_error(), Some(libc::ECONNREFUSED));
        let error = TcpStream::connect_timeout(&address, Duration::from_secs(10)).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ECONNREFUSED));
    });
}

#[test]
fn std_connect_timeout_in_a_green_thread_leaves_a_blocking_stream_whose_reads_park() {
    greenweave::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let (go, wait_for_go) = greenweave::sync::mpsc::channel::<()>();
        let log = Log::default();
        let server = greenweave::spawn({
            let log = log.clone();
            move || {
                let (mut stream, _) = listener.accept().unwrap();
                wait_for_go.recv().unwrap();
                log.push("server writes");
                stream.write_all(b"late").unwrap();
            }
        });
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(10)).unwrap();
        // SAFETY: F_GETFL takes no argument.
        let flags = unsafe { libc::fcntl(stream.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0, "the stream is blocking again");
        go.send(()).unwrap();
        let mut buffer = [0; 4];
        stream.read_exact(&mut buffer).unwrap();
        log.push("read returned");
        assert_eq!(&buffer, b"late");
        assert_eq!(log.events(), ["server writes", "read returned"]);
        server.join().unwrap();
    });
}

/// Parks on `stream` once (a read another green thread satisfies), so that the hooks have
/// registered its fd with the runtime's reactor.
fn park_on_once(stream: &mut UnixStream, far: &UnixStream) {
    let log = Log::default();
    let writer = spawn_writer(&log, far.try_clone().unwrap());
    let mut byte = [0; 1];
    stream.read_exact(&mut byte).unwrap();
    assert_eq!(log.events(), ["writer ran"], "the read parked");
    writer.join().unwrap();
}

#[test]
fn a_socket_reusing_the_number_of_one_closed_on_another_os_thread_parks_and_wakes_normally() {
    // In a child process: there, nothing else opens fds, so the new socket gets the number.
    let outcome = common::run_in_child(
        "a_socket_reusing_the_number_of_one_closed_on_another_os_thread_parks_and_wakes_normally",
        || {
            greenweave::run(|| {
                let (mut near, far) = UnixStream::pair().unwrap();
                let fd = near.as_raw_fd();
                park_on_once(&mut near, &far);
                // Closed where this runtime cannot see it: on the unblock pool.
                greenweave::unblock(move || drop(near));
                let (mut again, far) = UnixStream::pair().unwrap();
                assert_eq!(
                    again.as_raw_fd(),
                    fd,
                    "the new socket has the closed one's number"
                );
                // Bounded, so a lost wake-up fails instead of hanging.
                again
                    .set_read_timeout(Some(Duration::from_secs(20)))
                    .unwrap();
                park_on_once(&mut again, &far);
            });
            std::process::exit(0);
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
}

#[test]
fn poll_on_the_fd_of_a_green_socket_parks_until_another_green_thread_writes_to_it() {
    greenweave::run(|| {
        let (near, mut far) = greenweave::os::unix::net::UnixStream::pair().unwrap();
        let log = Log::default();
        let writer = greenweave::spawn({
            let log = log.clone();
            move || {
                log.push("writer ran");
                far.write_all(b"x").unwrap();
                far
            }
        });
        let mut entries = pollfds(&[near.as_raw_fd()], libc::POLLIN);
        // Bounded, so that a poll blocking the OS thread fails instead of hanging.
        // SAFETY: one live pollfd.
        let ready = unsafe { libc::poll(entries.as_mut_ptr(), 1, 10_000) };
        log.push("poll returned");
        assert_eq!((ready, entries[0].revents), (1, libc::POLLIN));
        assert_eq!(log.events(), ["writer ran", "poll returned"]);
        writer.join().unwrap();
    });
}

#[test]
fn poll_for_pollout_on_a_full_socket_parks_until_another_green_thread_drains_it() {
    greenweave::run(|| {
        let (mut near, mut far) = UnixStream::pair().unwrap();
        let written = fill_send_buffer(&mut near);
        let log = Log::default();
        let drainer = greenweave::spawn({
            let log = log.clone();
            move || {
                log.push("drainer ran");
                let mut buffer = vec![0; written];
                far.read_exact(&mut buffer).unwrap();
                far
            }
        });
        let mut entries = pollfds(&[near.as_raw_fd()], libc::POLLOUT);
        // SAFETY: one live pollfd.
        let ready = unsafe { libc::poll(entries.as_mut_ptr(), 1, -1) };
        log.push("poll returned");
        assert_eq!((ready, entries[0].revents), (1, libc::POLLOUT));
        assert_eq!(log.events(), ["drainer ran", "poll returned"]);
        drainer.join().unwrap();
    });
}

#[test]
fn a_std_pipe_read_in_a_green_thread_parks_until_another_writes() {
    greenweave::run(|| {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let log = Log::default();
        let writing = greenweave::spawn({
            let log = log.clone();
            move || {
                log.push("writer ran");
                let mut writer = writer;
                writer.write_all(b"piped").unwrap();
            }
        });
        let mut received = String::new();
        reader.read_to_string(&mut received).unwrap();
        log.push("read to the end");
        assert_eq!(received, "piped");
        assert_eq!(log.events(), ["writer ran", "read to the end"]);
        writing.join().unwrap();
    });
}

#[test]
fn runtime_shutdown_completes_with_a_green_thread_looping_on_std_sleep() {
    // Its cancellation cannot unwind through the hooked sleep, and the loop never parks in
    // Rust code: shutdown gives up on it after its deliveries rather than spin for ever.
    let loops = Rc::new(Cell::new(0u64));
    greenweave::run({
        let loops = loops.clone();
        move || {
            greenweave::spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                    loops.set(loops.get() + 1);
                }
            });
            greenweave::thread::yield_now();
        }
    });
    assert!(loops.get() > 0, "the sleeps were cut short");
}

#[test]
fn the_crawl_example_written_with_std_sleep_starts_every_page_before_any_finishes() {
    // examples/crawl.rs with std::thread::sleep: pages that wait 1 to 4 units overlap, so the
    // crawl takes the longest wait, not the sum (shown by order: every page starts first).
    let log = Log::default();
    greenweave::run({
        let log = log.clone();
        move || {
            let pages: Vec<_> = (1..=4u64)
                .map(|page| {
                    let log = log.clone();
                    greenweave::spawn(move || {
                        log.push(format!("crawling url_{page}"));
                        std::thread::sleep(Duration::from_millis(20 * page));
                        log.push(format!("OK url_{page}"));
                    })
                })
                .collect();
            for page in pages {
                page.join().unwrap();
            }
        }
    });
    assert_eq!(
        log.events(),
        [
            "crawling url_1",
            "crawling url_2",
            "crawling url_3",
            "crawling url_4",
            "OK url_1",
            "OK url_2",
            "OK url_3",
            "OK url_4",
        ]
    );
}
