//! `net::LeastLoaded` on a two-worker runtime: connections go to the worker with the fewest
//! still open (ties round the workers), a connection counts until its handler returns, and
//! the accept loop ends with the runtime.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use greenweave::net::{LeastLoaded, TcpListener, TcpStream};
use greenweave::sync::mpsc::{Receiver, RemoteSender, channel};
use greenweave::{Runtime, runtime};

/// A bound on the waits for another worker, so a failure is a failure, not a hang.
const PATIENCE: Duration = Duration::from_secs(30);

fn two_workers() -> Runtime {
    Runtime::builder().workers(2).build().unwrap()
}

/// Starts an accept loop on a new listener, handing connections off with `balancer`; each
/// handler reports the worker it runs on, then holds its connection until the client closes
/// it. Returns the listener's address and the reports.
fn serve_and_report(balancer: &LeastLoaded) -> (std::net::SocketAddr, Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (report_tx, reports) = channel();
    let report: Mutex<RemoteSender<usize>> = Mutex::new(report_tx.remote());
    let acceptor = balancer.clone();
    greenweave::spawn(move || {
        acceptor.serve(&listener, move |mut stream: TcpStream| {
            report
                .lock()
                .unwrap()
                .send(runtime::current_worker())
                .unwrap();
            // Held until the client closes its end.
            let mut rest = Vec::new();
            stream.read_to_end(&mut rest).unwrap();
        })
    });
    (addr, reports)
}

/// Connects and returns the client's end and the worker whose handler reported it.
fn connect(addr: std::net::SocketAddr, reports: &Receiver<usize>) -> (TcpStream, usize) {
    let client = TcpStream::connect(addr).unwrap();
    let worker = reports.recv_timeout(PATIENCE).unwrap();
    (client, worker)
}

/// Waits (yielding, bounded) until the balancer's counts are `expected`: a handler lowers its
/// worker's count only after it returns, which the client cannot see.
fn wait_for_counts(balancer: &LeastLoaded, expected: &[usize]) {
    let start = Instant::now();
    while balancer.open_connections() != expected {
        assert!(
            start.elapsed() < PATIENCE,
            "open connections stayed {:?}, expected {expected:?}",
            balancer.open_connections()
        );
        greenweave::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn connections_held_open_are_spread_one_per_worker_alternately() {
    two_workers().run(|| {
        let balancer = LeastLoaded::new();
        let (addr, reports) = serve_and_report(&balancer);
        let mut clients = Vec::new();
        let mut placed = Vec::new();
        for _ in 0..4 {
            let (client, worker) = connect(addr, &reports);
            clients.push(client);
            placed.push(worker);
        }
        assert_eq!(placed, [0, 1, 0, 1]);
        assert_eq!(balancer.open_connections(), [2, 2]);
    });
}

#[test]
fn closed_connections_free_their_workers_count_so_it_gets_the_next_ones() {
    two_workers().run(|| {
        let balancer = LeastLoaded::new();
        let (addr, reports) = serve_and_report(&balancer);
        let mut clients = Vec::new();
        for expected in [0, 1, 0, 1] {
            let (client, worker) = connect(addr, &reports);
            assert_eq!(worker, expected);
            clients.push(client);
        }
        // Close both of worker 1's connections: its handlers return.
        drop(clients.remove(3));
        drop(clients.remove(1));
        wait_for_counts(&balancer, &[2, 0]);
        // Taking turns would send the next one to worker 0; the counts send both to 1.
        let (_fifth, fifth_worker) = connect(addr, &reports);
        let (_sixth, sixth_worker) = connect(addr, &reports);
        assert_eq!((fifth_worker, sixth_worker), (1, 1));
        assert_eq!(balancer.open_connections(), [2, 2]);
    });
}

#[test]
fn the_accept_loop_and_the_held_connections_end_with_the_runtime() {
    /// Set when the accept loop's green thread is unwound.
    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let loop_unwound = Arc::new(AtomicBool::new(false));
    let flag = loop_unwound.clone();
    let (balancer, addr) = two_workers().run(move || {
        let balancer = LeastLoaded::new();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (report_tx, reports) = channel();
        let report = Mutex::new(report_tx.remote());
        let acceptor = balancer.clone();
        greenweave::spawn(move || {
            let _unwound = SetOnDrop(flag);
            let result = acceptor.serve(&listener, move |mut stream: TcpStream| {
                report
                    .lock()
                    .unwrap()
                    .send(runtime::current_worker())
                    .unwrap();
                let mut rest = Vec::new();
                let _ = stream.read_to_end(&mut rest);
            });
            panic!("serve returned {result:?} instead of parking until shutdown");
        });
        // One connection held open on each worker when the runtime ends.
        let first = connect(addr, &reports);
        let second = connect(addr, &reports);
        assert_eq!((first.1, second.1), (0, 1));
        (balancer, addr)
    });
    assert!(loop_unwound.load(Ordering::SeqCst));
    assert_eq!(balancer.open_connections(), [0, 0]);
    let refused = std::net::TcpStream::connect(addr).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
}

#[test]
fn hand_off_returns_the_worker_and_keeps_a_one_worker_runtime_on_its_only_worker() {
    Runtime::builder().workers(1).build().unwrap().run(|| {
        let balancer = LeastLoaded::new();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        let (done_tx, done) = channel();
        let done_tx = done_tx.remote();
        let worker = balancer
            .hand_off(stream, move |_stream| {
                done_tx.send(runtime::current_worker()).unwrap();
            })
            .unwrap();
        assert_eq!(worker, 0);
        assert_eq!(done.recv().unwrap(), 0);
    });
}
