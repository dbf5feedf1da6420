//! Spreading accepted connections over a runtime's workers by load: [`LeastLoaded`], which
//! hands each connection to the worker with the fewest connections still open (Seastar's
//! choice for its accepting shard, since the kernel's `SO_REUSEPORT` hash spreads
//! connections evenly only on average, whatever they cost).
//!
//! Owns: one count of open connections per worker, shared by every clone (atomics: the
//! counts are raised on the accepting worker and lowered on the serving one), and the
//! rotating start of the search, so that ties (an idle runtime) go round the workers.
//!
//! May not: move a green thread, or hold a connection's registration across workers. A
//! connection for another worker crosses as a [`Detached`](super::Detached) inside the
//! closure of `thread::spawn_on`, and is attached there by the new green thread; one for the
//! accepting worker stays green and is served by a plain spawn.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{TcpListener, TcpStream};
use crate::runtime;

/// Hands connections to the worker of a multi-worker runtime
/// ([`Builder::workers`](crate::runtime::Builder::workers)) that has the fewest still open,
/// where a new green thread serves each one. A connection counts from the hand-off until its
/// handler returns (or unwinds).
///
/// One green thread accepts ([`serve`](Self::serve), or your own loop calling
/// [`hand_off`](Self::hand_off)); the handlers run on every worker. The alternative is a
/// listener per worker, bound with [`TcpListener::bind_reuse_port`], where the kernel picks the
/// worker by a hash: no hand-off at all, but a worker that draws long or busy connections gets
/// no relief.
///
/// Clones share the counts, so several acceptors (on one listener or several) balance
/// together. A choice is made from counts read one at a time, so acceptors running at once on
/// different workers may both pick the same worker: the balance is close, not exact.
///
/// ```
/// use std::io::{Read, Write};
/// use greenweave::net::{LeastLoaded, TcpListener, TcpStream};
/// use greenweave::{Runtime, runtime};
///
/// let runtime = Runtime::builder().workers(2).build()?;
/// runtime.run(|| {
///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
///     let addr = listener.local_addr().unwrap();
///     let balancer = LeastLoaded::new();
///     let acceptor = balancer.clone();
///     greenweave::spawn(move || {
///         // Ends with the runtime: the accept is cancelled at shutdown.
///         acceptor.serve(&listener, |mut stream: TcpStream| {
///             let reply = format!("served on worker {}", runtime::current_worker());
///             stream.write_all(reply.as_bytes()).unwrap();
///         })
///     });
///     let mut replies = Vec::new();
///     for _ in 0..2 {
///         let mut reply = String::new();
///         TcpStream::connect(addr).unwrap().read_to_string(&mut reply).unwrap();
///         replies.push(reply);
///     }
///     // An idle runtime: ties go round the workers.
///     assert_eq!(replies, ["served on worker 0", "served on worker 1"]);
/// });
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct LeastLoaded {
    shared: Arc<Counts>,
}

struct Counts {
    /// Per worker: connections handed to it whose handler has not returned yet.
    open: Box<[AtomicUsize]>,
    /// Where the next search starts: one past the last worker chosen.
    next: AtomicUsize,
}

impl LeastLoaded {
    /// A balancer with a count for each worker of the calling green thread's runtime, all
    /// zero.
    ///
    /// # Panics
    /// Outside a runtime.
    pub fn new() -> LeastLoaded {
        let workers = runtime::worker_count();
        LeastLoaded {
            shared: Arc::new(Counts {
                open: (0..workers).map(|_| AtomicUsize::new(0)).collect(),
                next: AtomicUsize::new(0),
            }),
        }
    }

    /// Accepts connections on `listener` and [hands](Self::hand_off) each one to the worker
    /// with the fewest open, where a new green thread calls `handler` with it. Runs until the
    /// green thread calling it is cancelled (as every green thread is when its runtime ends:
    /// the parked accept unwinds, and the listener's borrow with it), like a
    /// `for stream in listener.incoming()` loop.
    ///
    /// Accept errors that concern one connection (it was reset or aborted before it was taken)
    /// or that pass (out of fds or memory: the accept has already paused, see
    /// [`TcpListener::accept`]) are skipped.
    ///
    /// # Errors
    /// Any other accept error (the listener is unusable), or a hand-off that failed (see
    /// [`hand_off`](Self::hand_off)); the connection in hand is closed.
    ///
    /// # Panics
    /// Outside a runtime, or on a runtime other than the one this balancer was made for (it
    /// has another number of workers).
    pub fn serve<F>(&self, listener: &TcpListener, handler: F) -> io::Result<()>
    where
        F: Fn(TcpStream) + Send + Sync + 'static,
    {
        let handler = Arc::new(handler);
        loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(error) if is_transient(&error) => continue,
                Err(error) => return Err(error),
            };
            let handler = handler.clone();
            self.hand_off(stream, move |stream| handler(stream))?;
        }
    }

    /// Hands `stream` to the worker with the fewest open connections (ties: the next one
    /// after the last chosen), where a new green thread calls `handler` with it; returns that
    /// worker. For the accepting worker itself the stream is spawned on as it is; for another
    /// one it is [detached](super::Detached) and attached there, timeouts and mode included.
    ///
    /// # Errors
    /// When the green thread cannot be started: that worker has ended (the runtime is shutting
    /// down: [`io::ErrorKind::BrokenPipe`]), or no stack could be mapped on this worker. The
    /// stream is closed and not counted. A stream that the chosen worker cannot register
    /// (its epoll's limits) is closed there without calling `handler`.
    ///
    /// # Panics
    /// Outside a runtime, or on a runtime other than the one this balancer was made for.
    pub fn hand_off<F>(&self, stream: TcpStream, handler: F) -> io::Result<usize>
    where
        F: FnOnce(TcpStream) + Send + 'static,
    {
        let here = runtime::current_worker();
        let worker = self.choose();
        let open = OpenConnection::new(self.shared.clone(), worker);
        if worker == here {
            crate::thread::Builder::new().spawn(move || {
                let _open = open;
                handler(stream);
            })?;
        } else {
            let detached = stream.detach();
            crate::thread::Builder::new().spawn_on(worker, move || {
                let _open = open;
                // A registration refused there (epoll's limits) has no one to report to: the
                // connection is closed, as an accept that failed would leave it.
                if let Ok(stream) = detached.attach() {
                    handler(stream);
                }
            })?;
        }
        Ok(worker)
    }

    /// How many connections each worker has open (handed to it, its handler not returned
    /// yet), by worker index.
    ///
    /// ```
    /// use greenweave::Runtime;
    /// use greenweave::net::LeastLoaded;
    ///
    /// Runtime::builder().workers(2).build()?.run(|| {
    ///     assert_eq!(LeastLoaded::new().open_connections(), [0, 0]);
    /// });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn open_connections(&self) -> Vec<usize> {
        let open = &self.shared.open;
        open.iter()
            .map(|count| count.load(Ordering::Relaxed))
            .collect()
    }

    /// The worker with the fewest open connections, searching from `next` (the caller counts
    /// the connection against it).
    fn choose(&self) -> usize {
        let Counts { open, next } = &*self.shared;
        assert_eq!(
            open.len(),
            runtime::worker_count(),
            "LeastLoaded was made for a runtime with {} workers and used in one with {}: make \
             one per runtime",
            open.len(),
            runtime::worker_count()
        );
        let start = next.load(Ordering::Relaxed) % open.len();
        let worker = (start..open.len())
            .chain(0..start)
            .min_by_key(|&worker| open[worker].load(Ordering::Relaxed))
            .expect("a runtime has at least one worker");
        next.store(worker + 1, Ordering::Relaxed);
        worker
    }
}

impl Default for LeastLoaded {
    fn default() -> LeastLoaded {
        LeastLoaded::new()
    }
}

impl fmt::Debug for LeastLoaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeastLoaded")
            .field("open_connections", &self.open_connections())
            .finish()
    }
}

/// One connection counted against a worker, from the hand-off until it is dropped: at the
/// end of the handler's green thread (returned or unwound), or with the closure that carried
/// it if that never ran.
struct OpenConnection {
    counts: Arc<Counts>,
    worker: usize,
}

impl OpenConnection {
    fn new(counts: Arc<Counts>, worker: usize) -> OpenConnection {
        counts.open[worker].fetch_add(1, Ordering::Relaxed);
        OpenConnection { counts, worker }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.counts.open[self.worker].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether an accept error concerns only the connection it was about, or passes by itself.
fn is_transient(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    ) || matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EPROTO)
    )
}
