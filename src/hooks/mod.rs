//! Making blocking code green: greenweave's `monkey.patch_all` (cargo feature `hooks`).
//!
//! With the feature on, the binary defines libc's blocking functions itself, as gevent patches
//! Python's socket module and libco hooks libc. Code nobody rewrote for greenweave (std's
//! `TcpStream`, `UdpSocket` and `thread::sleep`, a blocking client crate such as `ureq` or
//! `redis`) then parks only its own green thread when it would block, and the other green
//! threads run meanwhile:
//!
//! ```
//! # #[cfg(feature = "hooks")] {
//! use std::io::{Read, Write};
//! use std::time::{Duration, Instant};
//!
//! greenweave::run(|| {
//!     let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
//!     let address = listener.local_addr().unwrap();
//!     // An ordinary std server, in a green thread: its accept and read park, not block.
//!     let server = greenweave::spawn(move || {
//!         let (mut stream, _) = listener.accept().unwrap();
//!         let mut request = [0; 4];
//!         stream.read_exact(&mut request).unwrap();
//!         stream.write_all(&request).unwrap();
//!     });
//!     let started = Instant::now();
//!     let sleeper = greenweave::spawn(|| std::thread::sleep(Duration::from_millis(50)));
//!     let mut client = std::net::TcpStream::connect(address).unwrap();
//!     client.write_all(b"ping").unwrap();
//!     let mut reply = [0; 4];
//!     client.read_exact(&mut reply).unwrap();
//!     assert_eq!(&reply, b"ping");
//!     sleeper.join().unwrap();
//!     server.join().unwrap();
//!     // The sleep did not hold up the exchange, nor the exchange the sleep.
//!     assert!(started.elapsed() < Duration::from_secs(5));
//! });
//! # }
//! ```
//!
//! # What is hooked
//!
//! | functions | in a green thread |
//! |---|---|
//! | `read`, `write`, `readv`, `writev`, `recv`, `recvfrom`, `recvmsg`, `send`, `sendto`, `sendmsg` (and the fortified `__read_chk`, `__recv_chk`, `__recvfrom_chk`) | a call that would block parks until the fd is ready, then is made again; on a blocking socket a send goes on until everything is sent, and a `MSG_WAITALL` receive on a stream until everything came, as libc's; writes to fds 1 and 2 never park (see below) |
//! | `connect` | started non-blocking (`O_NONBLOCK` for that one call); parks until connected (the result from `SO_ERROR`) |
//! | `accept`, `accept4` | parks until the listener is readable, then libc's blocking call takes the connection (the listener's mode is never touched) |
//! | `listen` | std's backlog of 128 becomes the kernel's longest (`somaxconn`), as greenweave's `TcpListener` has it; any other backlog is kept |
//! | `poll`, `ppoll`, `select` (and `__poll_chk`, `__ppoll_chk`) | parks until one of the fds is ready or the timeout |
//! | `epoll_wait`, `epoll_pwait`, `epoll_pwait2` (a foreign event loop: raw `epoll`, `mio`, the `tokio` inside a blocking client such as `postgres`) | parks until the epoll instance has an event or the timeout; returns libc's events, 0 or error |
//! | `nanosleep`, `clock_nanosleep` (std's `thread::sleep`), `usleep`, `sleep` | parks on the runtime's timers |
//! | `getaddrinfo`, `gethostbyname` | runs on the offload pool while the green thread parks |
//! | `read`, `readv`, `pread`/`pread64` of a regular file | the page cache at once; what must come from the disk, on the offload pool while the green thread parks |
//! | `close` | a green thread parked on the fd wakes with `EBADF`; the fd leaves epoll |
//! | `syscall(SYS_futex, ..)`: std's and parking_lot's `Mutex`, `RwLock`, `Condvar`, `Once`/`OnceLock`/`LazyLock`, `Barrier`, mpsc channels, `thread::park` | a wait parks the green thread in a process-wide futex table; a wake from any thread (green, plain, another runtime) wakes the kernel's waiters, then green ones oldest first (`futex.rs`); but see the limits of std's channels and `thread::park` below |
//! | `socket`, `dup`, `dup2`, `dup3`, `setsockopt`, `fcntl`, `ioctl` | unchanged; they keep track of `O_NONBLOCK` and socket timeouts |
//!
//! **Everywhere else** (a plain OS thread, before or after `run`, the scheduler itself, the
//! offload helpers, a green thread that is unwinding) every hooked function is libc's: same
//! results, same `errno`. A coroutine or greenlet running inside a green thread is part of it:
//! its calls park the green thread, and the wake-up resumes that coroutine or greenlet. Inside
//! a green thread the program sees what libc would show it:
//! - A socket the program made non-blocking (`set_nonblocking`, `fcntl`, `ioctl(FIONBIO)`) and a
//!   call with `MSG_DONTWAIT` get `EAGAIN`, never a park. The hooks never change a shared fd's
//!   mode: socket calls are made with `MSG_DONTWAIT`, `accept` waits for readiness and then
//!   makes libc's call, and only `connect` turns `O_NONBLOCK` on, for its one attempt, on a
//!   socket no other thread has a use for until it is connected. Should another thread or
//!   process take a connection between the readiness and the accept, that accept blocks its OS
//!   thread until the next one, as libc's would: a listener accepted from on several OS threads
//!   at once is better a greenweave `net::TcpListener` per worker.
//! - What a call transfers is what libc's would: the added `MSG_DONTWAIT` changes nothing. A
//!   send on a blocking socket parks and goes on until every byte is sent (an 8 MiB `write` returns
//!   8 MiB), a `MSG_WAITALL` receive on a stream socket until every byte asked for came (or the
//!   end of the stream); an error after part of it returns the count moved, as the kernel does.
//! - `SO_RCVTIMEO` / `SO_SNDTIMEO` bound the park; then the call returns what it moved, or fails
//!   as libc's would (`EAGAIN`; `EINPROGRESS` for `connect`).
//! - A cancelled green thread's call fails with `ECANCELED`, and one inside a `time::timeout`
//!   whose deadline passed with `ETIMEDOUT` (a `poll` returns 0; a sleep returns early): the
//!   cancellation or timeout is raised at the green thread's next park in Rust code. An
//!   `extern "C"` function cannot unwind, and an `EINTR` would be retried.
//!
//! # Cancellation
//!
//! A Rust unwind cannot cross the C frames between a hook and the Rust code that called libc
//! (std's own, or a C library's), so a cancellation (`JoinHandle::cancel`, the runtime's
//! shutdown) reaches code parked in a hook as an error: `ECANCELED` from I/O calls, an early
//! end of a sleep. The cancellation stays requested and unwinds the green thread at its next
//! park in Rust code (a greenweave channel, lock, sleep or socket), as it does for any green
//! thread. Code that returns on errors (`?`, `unwrap`) therefore ends promptly; a body that
//! returns a value without parking again ends with that value; a loop that ignores errors and
//! parks only in hooked calls (`loop { std::thread::sleep(..) }`) cannot be stopped, and the
//! runtime's shutdown gives up on it after 64 deliveries (its stack is leaked, with a line on
//! stderr), as for a body that keeps catching the unwind.
//!
//! When the data is ready, a hooked call costs a branch and a table lookup beyond libc's: no
//! extra system call (the would-block path adds the `epoll` registration of a new fd, once).
//! Each hooked call that may park spends one unit of the cooperative budget, as greenweave's own
//! sockets do: a green thread whose std socket always has data lets the others run every 128
//! calls (a std echo server with one flooding client still answers the next).
//!
//! # Standard output, and other locks a green thread cannot hold across a park
//!
//! std's `Stdout` and `Stderr` (`println!`, `eprintln!`) write under an OS-thread-reentrant
//! lock, std's `ReentrantLock` around a `RefCell`: another green thread of the same OS thread
//! would enter it (to the lock it is the same thread) while one is parked inside a write, and
//! panic on the `RefCell` (`already borrowed`). So writes to fds 1 and 2 never park: they go to
//! libc as they are and, to a full pipe or terminal, block the OS thread as libc's do, and lines
//! stay whole. std has no other users of `ReentrantLock`. C's stdio locks each `FILE`
//! recursively per OS thread (`flockfile`): `printf` and `fwrite(stdout)` write fds 1 and 2,
//! so they block too; a `FILE` opened on a socket or pipe (`fdopen`) and used by two green
//! threads of one OS thread can have its buffer entered by the second while the first is parked
//! inside it: give each green thread its own `FILE`, or keep such streams on one green thread.
//!
//! # Limits
//!
//! - **std's channels never wake a receiver on the sender's OS thread.** std's `mpsc`
//!   (`channel`, `sync_channel(n)`, `sync_channel(0)`) and crossbeam-channel pass over a waiting
//!   receiver whose thread id is the sender's own, and every green thread of an OS thread has
//!   that OS thread's id. So between two green threads of **one worker** a send does not wake
//!   the receiver: a `recv` waits until every sender is dropped, a `recv_timeout` returns the
//!   value at its deadline. No futex hook can change that rule. A receive that has waited a
//!   second while other green threads of its OS thread ran gets a report on stderr (once per
//!   process) naming the channel and the way out; a shorter `recv_timeout` gets none. Use
//!   [`greenweave::sync::mpsc`](crate::sync::mpsc) between green threads of one worker and
//!   [`greenweave::sync::shared`](crate::sync::shared) across threads. A std channel is fine
//!   between green threads of different workers, and between a green thread and a plain OS
//!   thread, in either direction (`tests/hooks_futex.rs`).
//! - **std's parker is one per OS thread.** std's `thread::park` (so std's mpsc receivers,
//!   `futures::executor::block_on`, `reqwest::blocking`) waits on one futex word per OS thread,
//!   shared by all its green threads. Any number of them may wait there at once, and an unpark
//!   of the OS thread wakes all of them (`park` may return spuriously; std's callers re-check).
//!   While several wait at once, each also re-checks every 5 ms, because another green
//!   thread's `park` can take an unpark before the scheduler sees it (see `futex.rs`, "One
//!   parker per OS thread"). [`greenweave::sync`](crate::sync) has no such limit.
//! - **Futex waits cannot be unwound.** A cancelled green thread waiting on a std lock,
//!   condvar or channel wakes with a spurious wake-up; std's loop re-checks and, if it must,
//!   waits again; the cancellation is raised at the next park in Rust code. A wait that nothing
//!   will end keeps the green thread: the runtime's shutdown gives up on it after 64 deliveries
//!   (a line on stderr, its stack leaked), as for any green thread that will not end. A
//!   `time::timeout` scope does not end a futex wait either. Priority-inheritance futexes
//!   (`FUTEX_LOCK_PI`, glibc's `PTHREAD_PRIO_INHERIT` mutexes) and `futex_waitv` go to the kernel
//!   and block the OS thread.
//! - **glibc's internal locks** (`pthread_mutex_t`, `stdio`'s `FILE` locks, `malloc`'s arenas)
//!   make their futex calls with an inline `syscall` instruction, not through `syscall()`:
//!   C code waiting on a `pthread_mutex_t` or `pthread_cond_t` blocks the OS thread.
//! - **Raw system calls bypass libc**: crates that make the `syscall` instruction themselves
//!   (`rustix`'s default linux_raw backend, and so the crates built on it) are not seen; every
//!   call through libc's `syscall()` but a futex call goes to libc's unchanged. Their fds are
//!   also not tracked, so an fd whose mode they change behind libc's back may be cached wrongly.
//!   `mio`, and so `tokio`, are not among them: they wait in libc's `epoll_wait`, which is
//!   hooked.
//! - **parking_lot keeps a waiter record per OS thread.** Its `thread_local!` `ThreadData`
//!   (queue link, futex word) is shared by every green thread of the OS thread: one green
//!   thread at a time may wait in a parking_lot `Mutex`, `RwLock` or `Condvar` (and what is
//!   built on them: `r2d2` pools, `memcache`'s client builder). A second has corrupted the
//!   first's record when its futex wait arrives, so the process aborts with a message that says
//!   so and names the way out: [`unblock`](crate::unblock) (each wait on a helper OS thread of
//!   its own) or [`greenweave::sync`](crate::sync) (`futex.rs`; `tests/hooks_futex.rs`).
//! - **A foreign event loop keeps its own per-OS-thread state.** Its wait parks only its green
//!   thread, but what the loop's library keeps per OS thread is shared by every green thread
//!   of the worker: tokio lets one runtime be in `block_on` per OS thread at a time, so of the
//!   green threads of one worker only one may be inside a call of a client built on a hidden
//!   tokio runtime (the synchronous `postgres` crate); a second panics with tokio's "Cannot
//!   start a runtime from within a runtime". When that panic unwinds through a
//!   `postgres::Client` (`r2d2_postgres`: r2d2 drops the connection whose check-out test
//!   panicked), the client's drop closes it through the same runtime and panics again, and Rust
//!   aborts with "panic in a destructor during cleanup": by the language's rule, which no hook
//!   changes. greenweave's panic hook says why and what to do before the abort
//!   (`runtime::panic_report`). Run such clients one per worker
//!   ([`runtime::Builder::workers`](crate::runtime::Builder::workers)). Such a loop also
//!   waits again after an empty return: inside a `time::timeout` whose deadline has passed its
//!   waits return 0 at once, for ever, and a cancelled green thread's `ECANCELED` makes tokio
//!   panic. Bound such calls with the client's own timeouts (`postgres`'s `connect_timeout`,
//!   `statement_timeout`).
//! - **Regular files**: a read is made without waiting for the disk (`preadv2` with
//!   `RWF_NOWAIT`, which serves the page cache in the one system call a read makes); what is
//!   not cached is read on the offload pool while only the green thread parks. Where the kernel
//!   or filesystem does not take `RWF_NOWAIT` (qemu-user, some filesystems), reads block as
//!   libc's do. Writes, `open`, `fsync` and `stat` block (writes normally land in the page
//!   cache); use [`unblock`](crate::unblock) for heavy file work.
//! - **Pipes and terminals**: a read or write is made once `poll` says the fd is ready; a write
//!   larger than the free space of a pipe can still block the OS thread.
//! - **Shared C libraries** (libcurl, libpq), linked or `dlopen`ed, reach the hooks with nothing
//!   to do: the linker (GNU ld, gold, lld; with LTO, after `strip`) exports an executable's
//!   definition of a function that a shared library it links (libc) also defines, and the
//!   dynamic linker binds a library's calls to the executable's definitions first
//!   (`tests/hooks_c_library.rs`). Not seen: a binary linked with `-Wl,--exclude-libs,ALL` or a
//!   version script with `local: *` (they hide the hooks), a library `dlopen`ed with
//!   `RTLD_DEEPBIND` (it binds to libc first). A library built with
//!   `_FORTIFY_SOURCE` calls `__read_chk`, `__recv_chk`, `__recvfrom_chk`, `__poll_chk` and
//!   `__ppoll_chk`: those are hooked too (the size check, then the hook). A static (`crt-static`) build does not link with the feature (`getaddrinfo` is
//!   defined twice).
//! - **Signals do not interrupt a parked call**: a hooked call never fails with `EINTR` (the
//!   runtime's `epoll_wait` takes the interruption and goes on). A program that relies on a
//!   signal handler interrupting a blocking `recv` or `sleep` should wake its green threads
//!   another way (a self-pipe or `signalfd` read in a green thread: signal-hook's pipe). A
//!   green thread's `ppoll` does not swap the signal mask while it parks (the mask is the OS
//!   thread's, shared by every green thread). A hooked call made *inside* a signal handler that
//!   interrupted a green thread counts as that green thread's and could park: keep handlers to
//!   what is async-signal-safe anyway, a write to a non-blocking self-pipe (which the hooks hand
//!   straight to libc).
//!
//! To find blocking calls the hooks do not cover, turn on the stall report:
//! [`runtime::Builder::stall_report`](crate::runtime::Builder::stall_report), or the
//! environment variable `GREENWEAVE_STALL_REPORT_MS`.

// How the hooks get into a program: nothing in it refers to greenweave's `recv` (its calls bind
// to libc's as happily), so the linker would leave them out; `asm/hooks_anchor.S`, linked whole
// (build.rs), refers to every one. No other layer has to know they exist.
mod dns;
mod epoll;
#[cfg(feature = "tokio")]
pub(crate) use epoll::foreign_loops_waiting;
mod file;
mod fortify;
mod futex;
mod futex_table;
pub(crate) use futex::{learn_std_parker, std_parker_after_poll, std_parker_before_sleep};
mod io;
mod offloaded;
mod poll;
mod sleep;
mod wait;
