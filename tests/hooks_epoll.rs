//! Foreign event loops in green threads (feature `hooks`): a loop the program runs itself on
//! its own epoll instance, with raw libc `epoll_wait`/`epoll_pwait`/`epoll_pwait2` or with
//! `mio`, parks only its green thread while it waits, and gets what libc would give it.
//!
//! Every test runs its green threads on one OS thread, so the order of events proves the park:
//! a heartbeat can only tick while a loop waits, and an event written by another green thread
//! can only reach the loop, if the wait parked instead of blocking the OS thread. The waits
//! have long timeouts only so that a wait that blocked would end (with 0, failing the test)
//! instead of hanging it.
#![cfg(feature = "hooks")]

use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

/// Long enough never to pass in a passing test: a wait that blocked the OS thread ends after it
/// with no event, and the test fails instead of hanging.
const NEVER_MS: libc::c_int = 30_000;

/// What happened, in order, as the green threads of one runtime saw it.
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

/// What a wait returned: the events' data, or the errno.
type Waited = Result<Vec<u64>, i32>;

/// One of the three waits on an epoll fd.
type WaitFn = fn(RawFd) -> Waited;

/// A foreign epoll instance, used through libc alone (as a C library or a hand-written loop
/// would).
struct ForeignEpoll(OwnedFd);

impl ForeignEpoll {
    fn new() -> ForeignEpoll {
        // SAFETY: no memory preconditions; a non-negative result is a new fd we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(
            fd >= 0,
            "epoll_create1: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: just created, owned by nothing else.
        ForeignEpoll(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Watches `fd` for reading (level-triggered), reporting `data`.
    fn watch(&self, fd: RawFd, data: u64) {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: data,
        };
        // SAFETY: a live epoll_event for the call.
        let rc =
            unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) };
        assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
    }

    /// `epoll_wait` for up to `max` events: their data, or the errno.
    fn wait(&self, max: usize, timeout: libc::c_int) -> Waited {
        wait_on(self.0.as_raw_fd(), max, timeout)
    }
}

/// `epoll_wait(epfd, .., max, timeout)`: the events' data, or the errno.
fn wait_on(epfd: RawFd, max: usize, timeout: libc::c_int) -> Waited {
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; max.max(1)];
    // SAFETY: `events` holds at least `max` entries.
    let n = unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), max as libc::c_int, timeout) };
    collect(n, &events)
}

/// `epoll_pwait2(epfd, .., max, timeout, NULL)`: the events' data, or the errno.
fn pwait2_on(epfd: RawFd, max: usize, timeout: Option<libc::timespec>) -> Waited {
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; max.max(1)];
    let timeout_ptr = timeout
        .as_ref()
        .map_or(std::ptr::null(), |timeout| timeout as *const libc::timespec);
    // SAFETY: `events` holds at least `max` entries; the timeout is live or NULL.
    let n = unsafe {
        epoll_pwait2(
            epfd,
            events.as_mut_ptr(),
            max as libc::c_int,
            timeout_ptr,
            std::ptr::null(),
        )
    };
    collect(n, &events)
}

/// `epoll_pwait(epfd, .., max, timeout, &empty mask)`: the events' data, or the errno.
fn pwait_on(epfd: RawFd, max: usize, timeout: libc::c_int) -> Waited {
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; max.max(1)];
    // SAFETY: an all-zero sigset_t is a valid (empty) set, filled by sigemptyset anyway.
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `mask` is a live sigset_t.
    unsafe { libc::sigemptyset(&mut mask) };
    // SAFETY: `events` holds at least `max` entries; `mask` is live.
    let n = unsafe {
        libc::epoll_pwait(
            epfd,
            events.as_mut_ptr(),
            max as libc::c_int,
            timeout,
            &mask,
        )
    };
    collect(n, &events)
}

fn collect(n: libc::c_int, events: &[libc::epoll_event]) -> Waited {
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    // `epoll_event` is packed on x86_64: copy the field out rather than borrow it.
    Ok(events[..n as usize].iter().map(|event| event.u64).collect())
}

/// Whether this system has `epoll_pwait2` (Linux 5.11; qemu-user 7.2, which runs the aarch64
/// tests, does not): where it has not, libc's, and so the hook's, fails with `ENOSYS`.
fn has_pwait2() -> bool {
    let epoll = ForeignEpoll::new();
    let has = pwait2_on(epoll.0.as_raw_fd(), 1, Some(millis(0))) != Err(libc::ENOSYS);
    if !has {
        eprintln!("epoll_pwait2 is not implemented here (ENOSYS): its waits are not tested");
    }
    has
}

unsafe extern "C" {
    // The `libc` crate may not declare it (glibc 2.35+); the binary defines it (the hook).
    fn epoll_pwait2(
        epfd: libc::c_int,
        events: *mut libc::epoll_event,
        maxevents: libc::c_int,
        timeout: *const libc::timespec,
        sigmask: *const libc::sigset_t,
    ) -> libc::c_int;
}

fn millis(ms: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    }
}

/// A pipe: (read end, write end).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both were just created and are owned by nothing else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn write_byte(fd: &OwnedFd) {
    // SAFETY: writes one byte from a live buffer.
    assert_eq!(
        unsafe { libc::write(fd.as_raw_fd(), b"x".as_ptr().cast(), 1) },
        1
    );
}

/// A green thread that ticks `ticks` times, yielding to the others between ticks with a std
/// sleep (itself hooked), then runs `then`.
fn heartbeat(
    log: &Log,
    ticks: usize,
    then: impl FnOnce() + 'static,
) -> greenweave::thread::JoinHandle<()> {
    let log = log.clone();
    greenweave::spawn(move || {
        for _ in 0..ticks {
            std::thread::sleep(Duration::from_millis(1));
            log.push("tick");
        }
        then();
    })
}

/// A green thread that counts ticks, one per millisecond (a hooked std sleep), until stopped:
/// it can only tick while the green thread that started it is parked.
struct Ticker {
    ticks: Rc<Cell<usize>>,
    running: Rc<Cell<bool>>,
    handle: greenweave::thread::JoinHandle<()>,
}

impl Ticker {
    fn start() -> Ticker {
        let ticks = Rc::new(Cell::new(0));
        let running = Rc::new(Cell::new(true));
        let handle = greenweave::spawn({
            let (ticks, running) = (ticks.clone(), running.clone());
            move || {
                while running.get() {
                    std::thread::sleep(Duration::from_millis(1));
                    ticks.set(ticks.get() + 1);
                }
            }
        });
        Ticker {
            ticks,
            running,
            handle,
        }
    }

    /// Stops it; returns how many times it ticked.
    fn stop(self) -> usize {
        self.running.set(false);
        self.handle.join().unwrap();
        self.ticks.get()
    }
}

#[test]
fn a_raw_epoll_wait_in_a_green_thread_parks_while_a_heartbeat_ticks_and_returns_the_event() {
    greenweave::run(|| {
        let log = Log::default();
        let (reader, writer) = pipe();
        let epoll = ForeignEpoll::new();
        epoll.watch(reader.as_raw_fd(), 42);
        let waiter = greenweave::spawn({
            let log = log.clone();
            move || {
                log.push("waiting");
                let events = epoll.wait(8, -1);
                log.push(format!("woke with {events:?}"));
                drop(reader);
            }
        });
        let beat = heartbeat(&log, 3, {
            let log = log.clone();
            move || {
                log.push("write");
                write_byte(&writer);
            }
        });
        beat.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(
            log.events(),
            [
                "waiting",
                "tick",
                "tick",
                "tick",
                "write",
                "woke with Ok([42])"
            ]
        );
    });
}

#[test]
fn a_foreign_epoll_wait_with_a_timeout_returns_zero_after_it_while_others_run() {
    greenweave::run(|| {
        let (reader, _writer) = pipe();
        let epoll = ForeignEpoll::new();
        epoll.watch(reader.as_raw_fd(), 7);
        let ticker = Ticker::start();
        let ticks = ticker.ticks.clone();
        // Each flavour times out with 0 and no error, and the heartbeat ran meanwhile.
        let fd = epoll.0.as_raw_fd();
        let waits: [(&str, WaitFn); 3] = [
            ("epoll_wait", |fd| wait_on(fd, 4, 100)),
            ("epoll_pwait", |fd| pwait_on(fd, 4, 100)),
            ("epoll_pwait2", |fd| pwait2_on(fd, 4, Some(millis(100)))),
        ];
        let count = if has_pwait2() { 3 } else { 2 };
        for (name, wait) in waits.into_iter().take(count) {
            let before = ticks.get();
            assert_eq!(wait(fd), Ok(vec![]), "{name}");
            assert!(ticks.get() > before, "{name}: no heartbeat during the wait");
        }
        // A zero timeout never parks, and reports nothing when nothing is ready.
        let before = ticks.get();
        assert_eq!(epoll.wait(4, 0), Ok(vec![]));
        if has_pwait2() {
            assert_eq!(pwait2_on(fd, 4, Some(millis(0))), Ok(vec![]));
        }
        assert_eq!(ticks.get(), before);
        ticker.stop();
    });
}

/// Events, partial reads of the ready list, and errors are libc's, in a green thread and
/// outside a runtime alike.
fn libc_results() -> Vec<String> {
    let mut results = Vec::new();
    let epoll = ForeignEpoll::new();
    let fd = epoll.0.as_raw_fd();
    let pipes: Vec<_> = (0..3).map(|_| pipe()).collect();
    for (i, (reader, writer)) in pipes.iter().enumerate() {
        epoll.watch(reader.as_raw_fd(), 100 + i as u64);
        write_byte(writer);
    }
    // Three ready, level-triggered: at most `max` come back each call.
    let mut two = epoll.wait(2, -1).unwrap();
    two.sort();
    results.push(format!("two of three: {}", two.len()));
    let mut all = epoll.wait(8, NEVER_MS).unwrap();
    all.sort();
    results.push(format!("all: {all:?}"));
    let mut all = pwait2_on(fd, 8, None);
    if let Ok(all) = &mut all {
        all.sort();
    }
    results.push(format!("pwait2, no timeout: {all:?}"));
    let mut all = pwait_on(fd, 8, -1).unwrap();
    all.sort();
    results.push(format!("pwait: {all:?}"));
    // Errors, at once, with libc's errno.
    let (not_epoll, _keep) = pipe();
    results.push(format!("bad fd: {:?}", wait_on(-1, 4, -1)));
    results.push(format!(
        "not an epoll fd: {:?}",
        wait_on(not_epoll.as_raw_fd(), 4, -1)
    ));
    results.push(format!("maxevents 0: {:?}", wait_on(fd, 0, -1)));
    results.push(format!(
        "pwait2 bad timespec: {:?}",
        pwait2_on(
            fd,
            4,
            Some(libc::timespec {
                tv_sec: 0,
                tv_nsec: 2_000_000_000
            })
        )
    ));
    results.push(format!("pwait2 bad fd: {:?}", pwait2_on(-1, 4, None)));
    results.push(format!("pwait bad fd: {:?}", pwait_on(-1, 4, -1)));
    results
}

#[test]
fn a_foreign_epoll_gets_libcs_events_and_errors_in_a_green_thread_as_outside_a_runtime() {
    let outside = libc_results();
    // Without epoll_pwait2, every call of it fails with ENOSYS, in a green thread too.
    let pwait2 = |result: &str| {
        if has_pwait2() {
            result.to_owned()
        } else {
            format!("Err({})", libc::ENOSYS)
        }
    };
    assert_eq!(
        outside,
        [
            "two of three: 2".to_owned(),
            "all: [100, 101, 102]".to_owned(),
            format!("pwait2, no timeout: {}", pwait2("Ok([100, 101, 102])")),
            "pwait: [100, 101, 102]".to_owned(),
            format!("bad fd: Err({})", libc::EBADF),
            format!("not an epoll fd: Err({})", libc::EINVAL),
            format!("maxevents 0: Err({})", libc::EINVAL),
            format!(
                "pwait2 bad timespec: {}",
                pwait2(&format!("Err({})", libc::EINVAL))
            ),
            format!(
                "pwait2 bad fd: {}",
                pwait2(&format!("Err({})", libc::EBADF))
            ),
            format!("pwait bad fd: Err({})", libc::EBADF),
        ]
    );
    let inside = greenweave::run(|| greenweave::spawn(libc_results).join().unwrap());
    assert_eq!(inside, outside);
}

#[test]
fn a_foreign_epoll_wait_outside_a_runtime_blocks_and_times_out_as_libcs() {
    let (reader, writer) = pipe();
    let epoll = ForeignEpoll::new();
    epoll.watch(reader.as_raw_fd(), 5);
    assert_eq!(epoll.wait(4, 20), Ok(vec![]));
    if has_pwait2() {
        assert_eq!(
            pwait2_on(epoll.0.as_raw_fd(), 4, Some(millis(20))),
            Ok(vec![])
        );
    }
    // On another OS thread while a runtime runs, too: the write comes from this thread while
    // the other one blocks in libc.
    greenweave::run(move || {
        let fd = epoll.0.as_raw_fd();
        let blocked = std::thread::spawn(move || wait_on(fd, 4, NEVER_MS));
        std::thread::sleep(Duration::from_millis(20));
        write_byte(&writer);
        assert_eq!(blocked.join().unwrap(), Ok(vec![5]));
        drop(epoll);
    });
}

#[test]
fn green_threads_each_in_their_own_foreign_epoll_all_wait_at_once_and_each_gets_its_event() {
    const LOOPS: usize = 10;
    greenweave::run(|| {
        let log = Log::default();
        let waiting = Rc::new(Cell::new(0));
        let mut writers = Vec::new();
        let loops: Vec<_> = (0..LOOPS)
            .map(|i| {
                let (reader, writer) = pipe();
                writers.push(writer);
                let (log, waiting) = (log.clone(), waiting.clone());
                greenweave::spawn(move || {
                    let epoll = ForeignEpoll::new();
                    epoll.watch(reader.as_raw_fd(), i as u64);
                    waiting.set(waiting.get() + 1);
                    let events = epoll.wait(4, NEVER_MS);
                    log.push(format!("loop {i} woke with {events:?}"));
                })
            })
            .collect();
        // Let every loop reach its wait: on one OS thread they can only all be waiting at once
        // if each parked.
        while waiting.get() < LOOPS {
            greenweave::thread::yield_now();
        }
        log.push(format!("{} waiting", waiting.get()));
        // Wake them in reverse order, one at a time: each wakes with its own event.
        // Each write waits (napping, bounded) until its loop has woken. (One 1 ms nap could be
        // too short: under qemu its time could be up before it parked, or pass before the
        // reactor saw the write.)
        for (i, writer) in writers.iter().enumerate().rev() {
            write_byte(writer);
            let woke = format!("loop {i} woke with Ok([{i}])");
            for _ in 0..60_000 {
                if log.events().contains(&woke) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            log.push(format!("wrote {i}"));
        }
        for each in loops {
            each.join().unwrap();
        }
        let mut expected = vec![format!("{LOOPS} waiting")];
        for i in (0..LOOPS).rev() {
            expected.push(format!("loop {i} woke with Ok([{i}])"));
            expected.push(format!("wrote {i}"));
        }
        assert_eq!(log.events(), expected);
    });
}

#[test]
fn a_mio_poll_in_a_green_thread_parks_while_a_heartbeat_ticks_and_times_out_as_asked() {
    use mio::net::UdpSocket;
    use mio::{Events, Interest, Poll, Token};

    greenweave::run(|| {
        let log = Log::default();
        let mut socket = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = socket.local_addr().unwrap();
        let waiter = greenweave::spawn({
            let log = log.clone();
            move || {
                let mut poll = Poll::new().unwrap();
                poll.registry()
                    .register(&mut socket, Token(9), Interest::READABLE)
                    .unwrap();
                let mut events = Events::with_capacity(8);
                // Nothing comes within the timeout: an empty poll, after it.
                log.push("polling with a timeout");
                poll.poll(&mut events, Some(Duration::from_millis(100)))
                    .unwrap();
                log.push(format!("timed out with {} events", events.iter().count()));
                // Then for ever, until the heartbeat sends a datagram.
                log.push("polling");
                poll.poll(&mut events, None).unwrap();
                let tokens: Vec<_> = events.iter().map(|event| event.token()).collect();
                let mut datagram = [0; 8];
                let read = socket.recv(&mut datagram).unwrap();
                log.push(format!(
                    "woke with {tokens:?}, read {:?}",
                    &datagram[..read]
                ));
            }
        });
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let beat = heartbeat(&log, 3, {
            let log = log.clone();
            move || {
                // Until the poll has moved on to waiting for ever.
                while !log.events().iter().any(|event| event == "polling") {
                    std::thread::sleep(Duration::from_millis(1));
                }
                log.push("send");
                sender.send_to(b"hi", address).unwrap();
            }
        });
        beat.join().unwrap();
        waiter.join().unwrap();
        let events = log.events();
        // The ticks came while the timed poll waited (it started first and lasted 100 ms) or
        // after it; the endless poll ended only with the datagram.
        let ticks_before_timeout = events
            .iter()
            .take_while(|event| !event.starts_with("timed out"))
            .filter(|event| *event == "tick")
            .count();
        assert!(ticks_before_timeout > 0, "{events:?}");
        let without_ticks: Vec<_> = events.iter().filter(|event| *event != "tick").collect();
        assert_eq!(
            without_ticks,
            [
                "polling with a timeout",
                "timed out with 0 events",
                "polling",
                "send",
                "woke with [Token(9)], read [104, 105]",
            ]
        );
    });
}

#[test]
fn a_green_thread_cancelled_in_a_foreign_epoll_wait_gets_ecanceled() {
    greenweave::run(|| {
        let (reader, _writer) = pipe();
        let epoll = ForeignEpoll::new();
        epoll.watch(reader.as_raw_fd(), 1);
        let waiter = greenweave::spawn(move || epoll.wait(4, NEVER_MS));
        greenweave::thread::yield_now();
        waiter.cancel();
        // The hook cannot unwind: the wait fails with ECANCELED, and the body, which returns
        // without parking again, finishes with it.
        assert_eq!(waiter.join().unwrap(), Err(libc::ECANCELED));
    });
}

#[test]
fn a_foreign_epoll_wait_in_a_time_timeout_scope_that_elapses_returns_zero() {
    greenweave::run(|| {
        let (reader, _writer) = pipe();
        let epoll = ForeignEpoll::new();
        epoll.watch(reader.as_raw_fd(), 1);
        let ticker = Ticker::start();
        // The scope's end shows as the wait timing out; the body returns before any park in
        // Rust code, so its own result comes back.
        let result = greenweave::time::timeout(Duration::from_millis(100), || epoll.wait(4, -1));
        assert_eq!(result.unwrap(), Ok(vec![]));
        assert!(ticker.stop() > 0, "no heartbeat during the wait");
    });
}
