//! Real blocking client crates, unchanged, in green threads (feature `hooks`): `ureq` against an
//! ordinary `std::net` HTTP/1.1 server, and the `redis` crate's synchronous client against a
//! real `redis-server`.
//!
//! Every reply is checked, and each test shows by the order of events that the clients'
//! blocking calls parked only their own green thread: all run on one OS thread, so two requests
//! can only be in flight at once, a heartbeat can only tick between two responses, and a
//! `BLPOP` waiting in the server can only be answered by another green thread, if the blocking
//! call parked instead of blocking the OS thread. The socket timeouts the clients set
//! (`SO_RCVTIMEO`) bound such a park and come back as each client's own timeout error.
#![cfg(feature = "hooks")]

#[path = "common/http_get.rs"]
mod http_get;
#[path = "common/in_flight.rs"]
mod in_flight;
#[path = "common/redis_server.rs"]
mod redis_server;
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/spawn_watch.rs"]
mod spawn_watch;

use std::cell::{Cell, RefCell};
use std::io::BufReader;
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::time::Duration;

use in_flight::InFlight;
use redis::Commands;
use redis_server::RedisServer;

/// What happened, in order, as the green threads saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Tick,
    Response,
}

/// The body the test server answers `path` with.
fn body_for(path: &str) -> String {
    format!("you asked for {path}")
}

/// Serves HTTP/1.1 GET requests on one keep-alive connection until the client closes it: each
/// response's body names the path asked for (with a correct `Content-Length`). Between reading
/// a request and answering it the handler "works" with `std::thread::sleep`, which the hooks
/// turn into a park, so other connections' requests are in flight meanwhile.
fn serve_connection(stream: TcpStream, in_flight: Rc<InFlight>) {
    let mut reader = BufReader::new(&stream);
    while let Some(get) = http_get::read_get(&mut reader) {
        let _serving = in_flight.enter();
        std::thread::sleep(Duration::from_millis(1));
        http_get::write_ok(&stream, &body_for(&get.path));
        if get.close {
            return;
        }
    }
}

#[test]
fn ureq_in_200_green_threads_gets_every_response_while_requests_overlap_and_a_heartbeat_ticks() {
    const CLIENTS: usize = 200;
    const REQUESTS_EACH: usize = 20;
    greenweave::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let served = Rc::new(InFlight::default());
        let stopping = Rc::new(Cell::new(false));
        // An ordinary std accept loop in a green thread: the hooked accept parks it.
        let server = greenweave::spawn({
            let (served, stopping) = (served.clone(), stopping.clone());
            move || {
                let mut handlers = Vec::new();
                loop {
                    let (stream, _) = listener.accept().unwrap();
                    if stopping.get() {
                        break;
                    }
                    let served = served.clone();
                    handlers.push(greenweave::spawn(move || serve_connection(stream, served)));
                }
                for handler in handlers {
                    handler.join().unwrap();
                }
            }
        });

        let events = Rc::new(RefCell::new(Vec::new()));
        let done = Rc::new(Cell::new(false));
        // Ticks until the clients are done, sleeping between ticks with std's (hooked) sleep.
        let heartbeat = greenweave::spawn({
            let (events, done) = (events.clone(), done.clone());
            move || {
                while !done.get() {
                    events.borrow_mut().push(Event::Tick);
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });

        // One agent for every green thread, as a program would share it; its pool keeps a
        // connection per client alive between requests (the bound turns a hang into a failure).
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .max_idle_connections(CLIENTS)
            .max_idle_connections_per_host(CLIENTS)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        let requesting = Rc::new(InFlight::default());
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let (agent, requesting, events) =
                    (agent.clone(), requesting.clone(), events.clone());
                greenweave::spawn(move || {
                    for request in 0..REQUESTS_EACH {
                        let path = format!("/client/{client}/request/{request}");
                        let body = {
                            let _requesting = requesting.enter();
                            let mut response =
                                agent.get(format!("http://{address}{path}")).call().unwrap();
                            assert_eq!(response.status(), 200);
                            response.body_mut().read_to_string().unwrap()
                        };
                        events.borrow_mut().push(Event::Response);
                        assert_eq!(body, body_for(&path));
                    }
                })
            })
            .collect();
        for client in clients {
            client.join().unwrap();
        }
        done.set(true);
        heartbeat.join().unwrap();
        // Closing the pooled connections ends the handlers; one more connection wakes the
        // accept loop to see it should stop.
        drop(agent);
        stopping.set(true);
        drop(TcpStream::connect(address).unwrap());
        server.join().unwrap();

        let events = events.take();
        let responses = events.iter().filter(|&&event| event == Event::Response);
        assert_eq!(responses.count(), CLIENTS * REQUESTS_EACH);
        // One OS thread: only requests that parked in ureq's blocking calls (connect, send,
        // recv) and in the server's accept, recv and sleep can be in flight together.
        assert!(requesting.most.get() > 1, "ureq requests ran one at a time");
        assert!(
            served.most.get() > 1,
            "the server answered one request at a time"
        );
        let first = events.iter().position(|&event| event == Event::Response);
        let last = events.iter().rposition(|&event| event == Event::Response);
        let between = &events[first.unwrap()..=last.unwrap()];
        let ticks = between
            .iter()
            .filter(|&&event| event == Event::Tick)
            .count();
        assert!(
            ticks > 0,
            "the heartbeat never ran between the first and the last response"
        );
    });
}

#[test]
fn redis_sync_client_in_100_green_threads_sets_and_gets_every_key_while_commands_overlap() {
    const CLIENTS: usize = 100;
    const KEYS_EACH: usize = 10;
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    greenweave::run(move || {
        let client = redis::Client::open(url).unwrap();
        let commanding = Rc::new(InFlight::default());
        let clients: Vec<_> = (0..CLIENTS)
            .map(|writer| {
                let (client, commanding) = (client.clone(), commanding.clone());
                greenweave::spawn(move || {
                    let mut connection = client.get_connection().unwrap();
                    let key = |key| format!("greenweave:{writer}:{key}");
                    let value = |key| format!("value {key} of green thread {writer}");
                    for k in 0..KEYS_EACH {
                        let _commanding = commanding.enter();
                        let () = connection.set(key(k), value(k)).unwrap();
                    }
                    for k in 0..KEYS_EACH {
                        let _commanding = commanding.enter();
                        let stored: String = connection.get(key(k)).unwrap();
                        assert_eq!(stored, value(k));
                    }
                })
            })
            .collect();
        for client in clients {
            client.join().unwrap();
        }
        let mut connection = client.get_connection().unwrap();
        let keys: usize = redis::cmd("DBSIZE").query(&mut connection).unwrap();
        assert_eq!(keys, CLIENTS * KEYS_EACH);
        // One OS thread: only commands whose reply the client parked for can overlap.
        assert!(
            commanding.most.get() > 1,
            "redis commands ran one at a time"
        );
    });
    drop(server);
}

#[test]
fn a_redis_blpop_parks_its_green_thread_so_another_can_push_what_it_waits_for() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    greenweave::run(move || {
        let client = redis::Client::open(url).unwrap();
        let events = Rc::new(RefCell::new(Vec::new()));
        let popper = greenweave::spawn({
            let (client, events) = (client.clone(), events.clone());
            move || {
                let mut connection = client.get_connection().unwrap();
                events.borrow_mut().push("waiting");
                // Bounded, so that a BLPOP that blocked the OS thread returns nothing and the
                // test fails instead of hanging.
                let popped: Option<(String, String)> =
                    connection.blpop("greenweave:queue", 60.0).unwrap();
                events.borrow_mut().push("popped");
                popped
            }
        });
        let mut connection = client.get_connection().unwrap();
        // Waits (bounded) until the server holds the popper's BLPOP: the popper is then inside
        // its blocking recv, and this green thread runs only because that recv parked.
        let mut polls = 0;
        loop {
            let clients: String = redis::cmd("INFO")
                .arg("clients")
                .query(&mut connection)
                .unwrap();
            if clients.contains("blocked_clients:1") {
                break;
            }
            polls += 1;
            assert!(
                polls < 30_000,
                "the BLPOP never reached the server:\n{clients}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        events.borrow_mut().push("pushing");
        let length: usize = connection.rpush("greenweave:queue", "wake up").unwrap();
        assert_eq!(length, 1);
        let popped = popper.join().unwrap();
        assert_eq!(
            popped,
            Some(("greenweave:queue".to_owned(), "wake up".to_owned()))
        );
        assert_eq!(*events.borrow(), ["waiting", "pushing", "popped"]);
    });
    drop(server);
}

/// Records a tick, then sleeps with std's (hooked) sleep, until `done`.
fn tick_until(events: Rc<RefCell<Vec<&'static str>>>, done: Rc<Cell<bool>>) {
    while !done.get() {
        events.borrow_mut().push("tick");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether `events` has a tick between `from` and the later `to`.
fn ticked_between(events: &[&str], from: &str, to: &str) -> bool {
    let start = events.iter().position(|&event| event == from);
    let end = events.iter().position(|&event| event == to);
    let (Some(start), Some(end)) = (start, end) else {
        panic!("{from:?} or {to:?} missing from {events:?}");
    };
    events[start..end].contains(&"tick")
}

#[test]
fn a_ureq_timeout_against_a_server_that_never_answers_is_a_timeout_error_and_others_run_meanwhile()
{
    greenweave::run(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let gave_up = Rc::new(Cell::new(false));
        // Takes the connection and never answers, until the client gave up (or, should the
        // client's timeout not work, for 30 s at most: the client then sees the connection
        // close instead of a timeout, and the test fails instead of hanging). It waits with
        // sleeps, not with a socket timeout of its own, which is what is under test.
        let server = greenweave::spawn({
            let gave_up = gave_up.clone();
            move || {
                let (_stream, _) = listener.accept().unwrap();
                for _ in 0..30_000 {
                    if gave_up.get() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        let events = Rc::new(RefCell::new(Vec::new()));
        let done = Rc::new(Cell::new(false));
        let heartbeat = greenweave::spawn({
            let (events, done) = (events.clone(), done.clone());
            move || tick_until(events, done)
        });
        // ureq bounds each read with SO_RCVTIMEO: the hooks bound the park by it, then EAGAIN,
        // which ureq reports as its timeout. (A per-read timeout starts at the read, so a slow
        // machine cannot use it up before the park, as it could a whole call's.)
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_per_read(Some(Duration::from_millis(200)))
            .build()
            .into();
        events.borrow_mut().push("requesting");
        let error = agent
            .get(format!("http://{address}/silence"))
            .call()
            .unwrap_err();
        events.borrow_mut().push("gave up");
        gave_up.set(true);
        assert!(matches!(error, ureq::Error::Timeout(_)), "{error:?}");
        drop(agent);
        done.set(true);
        heartbeat.join().unwrap();
        server.join().unwrap();
        assert!(
            ticked_between(&events.borrow(), "requesting", "gave up"),
            "the heartbeat did not run while ureq waited: {:?}",
            events.borrow()
        );
    });
}

#[test]
fn a_redis_read_timeout_ends_a_parked_blpop_with_a_timeout_error_and_others_run_meanwhile() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    greenweave::run(move || {
        let client = redis::Client::open(url).unwrap();
        let events = Rc::new(RefCell::new(Vec::new()));
        let done = Rc::new(Cell::new(false));
        let heartbeat = greenweave::spawn({
            let (events, done) = (events.clone(), done.clone());
            move || tick_until(events, done)
        });
        // With a timeout the client connects with std's connect_timeout (a non-blocking
        // connect and a hooked poll) and bounds its handshake with SO_RCVTIMEO.
        let mut connection = client
            .get_connection_with_timeout(Duration::from_secs(30))
            .unwrap();
        connection
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        events.borrow_mut().push("waiting");
        // A BLPOP the server holds for 30 s: the socket's timeout ends the client's wait first
        // (should it not, the BLPOP returns nothing and the test fails instead of hanging).
        let error = connection
            .blpop::<_, Option<(String, String)>>("greenweave:never", 30.0)
            .unwrap_err();
        events.borrow_mut().push("timed out");
        assert!(error.is_timeout(), "{error:?}");
        done.set(true);
        heartbeat.join().unwrap();
        assert!(
            ticked_between(&events.borrow(), "waiting", "timed out"),
            "the heartbeat did not run while the BLPOP waited: {:?}",
            events.borrow()
        );
    });
    drop(server);
}
