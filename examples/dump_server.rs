//! A line-echo server that prints a dump of every green thread on `SIGQUIT`
//! (`Builder::dump_on_signal`), and keeps serving. With `--stuck` it also starts two green
//! threads that deadlock on two locks, and a third that waits for one of them: the dump shows
//! each one's wait, who holds the lock it wants, the chain, and the cycle, while the server
//! goes on answering.
//!
//! ```sh
//! cargo run --example dump_server -- --stuck &        # says the port and pid it has
//! kill -QUIT %1                                       # the dump goes to the server's stderr
//! cargo run --example dump_server -- --stuck --self-signal   # signals itself once, then exits
//! ```
//!
//! `--self-signal` raises `SIGQUIT` itself after a moment, waits for the dump to be written,
//! and ends: what the docs show (ARCHITECTURE.md, "Dumping every green thread").

use std::io::{BufRead, BufReader, Write};
use std::rc::Rc;
use std::time::Duration;

use greenweave::net::{TcpListener, TcpStream};
use greenweave::sync::Mutex;
use greenweave::{Runtime, thread};

fn main() -> std::io::Result<()> {
    let stuck = std::env::args().any(|arg| arg == "--stuck");
    let self_signal = std::env::args().any(|arg| arg == "--self-signal");
    let runtime = Runtime::builder().dump_on_signal(libc::SIGQUIT).build()?;
    runtime.run(move || {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        eprintln!(
            "dump_server: echoing lines on {}; kill -QUIT {} prints every green thread",
            listener.local_addr()?,
            std::process::id()
        );
        if stuck {
            start_stuck_pair();
        }
        let accepting = thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || accept_loop(listener))?;
        if self_signal {
            thread::sleep(Duration::from_millis(100));
            // SAFETY: raise(3) has no preconditions.
            unsafe { libc::raise(libc::SIGQUIT) };
            // The watcher thread writes the dump meanwhile; the server keeps running.
            thread::sleep(Duration::from_millis(500));
            eprintln!("dump_server: still serving after the dump; exiting");
            accepting.cancel();
        } else {
            let _ = accepting.join();
        }
        Ok(())
    })
}

fn accept_loop(listener: TcpListener) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                thread::spawn(move || serve(stream));
            }
            Err(error) => eprintln!("dump_server: accept: {error}"),
        }
    }
}

/// Echoes each line back.
fn serve(stream: TcpStream) {
    let mut reader = BufReader::new(&stream);
    let mut writer = &stream;
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|read| read > 0) {
        if writer.write_all(line.as_bytes()).is_err() {
            return;
        }
        line.clear();
    }
}

/// Two green threads that take two locks in opposite orders (a partial deadlock the runtime's
/// own deadlock report cannot see: the server still runs), and a third queued behind one.
fn start_stuck_pair() {
    let accounts = Rc::new(Mutex::new("accounts"));
    let ledger = Rc::new(Mutex::new("ledger"));
    let (a, l) = (accounts.clone(), ledger.clone());
    spawn_named("transfer", move || {
        let _accounts = a.lock();
        thread::sleep(Duration::from_millis(10));
        update(&l);
    });
    let (a, l) = (accounts.clone(), ledger);
    spawn_named("audit", move || {
        let _ledger = l.lock();
        thread::sleep(Duration::from_millis(10));
        update(&a);
    });
    spawn_named("report", move || {
        thread::sleep(Duration::from_millis(20));
        update(&accounts);
    });
}

#[inline(never)]
fn update(lock: &Mutex<&'static str>) {
    let _guard = lock.lock();
}

fn spawn_named(name: &str, body: impl FnOnce() + 'static) {
    thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .expect("spawn a green thread");
}
