//! `runtime::dump` (issue 24): a dump names every green thread on every worker, what each parked
//! one waits for (each kind of wait), how long, who spawned it, and a backtrace of its
//! suspended stack that reaches the green thread's own code; the wait-for edges (joins, a
//! lock's holder) and their cycles, while the rest of the program runs; and
//! `Builder::dump_on_signal`, in a child process that goes on and exits normally.
//!
//! Each waiting green thread parks inside a function of its own (`parks_in_*`, never inlined):
//! the dump's backtrace must name that function, which only a walk of the parked stack itself
//! can find. Nothing here asserts a duration other than lower bounds the clock guarantees.

mod common;

use std::io::Read;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use common::run_in_child;
use greenweave::runtime::{Dump, GreenThread, GreenThreadState};
use greenweave::sync::Mutex;
use greenweave::{Coroutine, Runtime, thread};

const LONG: Duration = Duration::from_secs(3600);

#[inline(never)]
fn parks_in_sleep() {
    thread::sleep(LONG);
    stays_in_the_backtrace(1);
}

#[inline(never)]
fn parks_in_io(mut stream: greenweave::os::unix::net::UnixStream) {
    let mut byte = [0u8];
    let _ = stream.read(&mut byte);
    stays_in_the_backtrace(2);
}

#[inline(never)]
fn parks_in_join(handle: thread::JoinHandle<()>) {
    let _ = handle.join();
    stays_in_the_backtrace(3);
}

#[inline(never)]
fn parks_in_remote(release: std::sync::mpsc::Receiver<()>) {
    greenweave::unblock(move || {
        let _ = release.recv();
    });
    stays_in_the_backtrace(4);
}

#[inline(never)]
fn parks_in_channel(receiver: greenweave::sync::mpsc::Receiver<u8>) {
    let _ = receiver.recv();
    stays_in_the_backtrace(5);
}

#[inline(never)]
fn parks_in_lock(lock: Rc<Mutex<u8>>) {
    let _guard = lock.lock();
    stays_in_the_backtrace(6);
}

#[inline(never)]
fn parks_in_scope() {
    thread::scope(|scope| {
        scope.spawn(parks_in_sleep);
    });
    stays_in_the_backtrace(7);
}

#[inline(never)]
fn parks_in_select(receiver: greenweave::sync::mpsc::Receiver<u8>) {
    let mut select = greenweave::sync::select::Select::new();
    select.recv(&receiver);
    // Completed as a selected receive must be: when the test ends, the sender's drop selects it.
    let _ = select.select().recv(&receiver);
    stays_in_the_backtrace(8);
}

#[inline(never)]
fn parks_in_other_worker_join() {
    let _ = thread::spawn_on(1, parks_in_sleep).join();
    stays_in_the_backtrace(9);
}

#[inline(never)]
fn parks_in_shared_channel(receiver: greenweave::sync::shared::Receiver<u8>) {
    let _ = receiver.recv();
    stays_in_the_backtrace(10);
}

#[cfg(feature = "hooks")]
#[inline(never)]
fn parks_in_futex(lock: std::sync::Arc<std::sync::Mutex<u8>>) {
    let _guard = lock.lock();
    stays_in_the_backtrace(11);
}

#[inline(never)]
fn generator_body_parks() {
    thread::sleep(LONG);
    stays_in_the_backtrace(12);
}

/// Called last, each with its own number, by every `#[inline(never)]` function whose frame a
/// test looks for in a backtrace. Optimised, a function whose last act is a call becomes a jump
/// (a tail call), and its frame is gone from the stack while the callee parks; and two
/// functions with the same code are folded into one, which keeps one name (`parks_in_sleep`
/// for `generator_body_parks`).
#[inline(always)]
fn stays_in_the_backtrace(function: u8) {
    std::hint::black_box(function);
}

/// Spawns `body` as a green thread named `name`.
fn named(name: &str, body: impl FnOnce() + 'static) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .expect("spawn")
}

/// Lets every green thread just spawned run until it parks: looks until none but the caller is
/// ready. (A short sleep here could return before they had: its deadline could pass before it
/// parked, and then it only yielded once.)
fn let_them_park() {
    let me = thread::current().id().as_u64();
    dump_when(|dump| {
        dump.green_threads()
            .iter()
            .all(|thread| thread.id() == me || thread.state() != GreenThreadState::Ready)
    });
}

/// Dumps (without backtraces) until `ready` holds of the dump, for what another worker, another
/// OS thread, must do first: under Valgrind (one thread at a time) that can take long. Gives
/// up after a minute and returns the last dump, for the caller's assertions to explain.
fn dump_when(ready: impl Fn(&Dump) -> bool) -> Dump {
    for _ in 0..6000 {
        let dump = greenweave::runtime::dump_without_backtraces();
        if ready(&dump) {
            return dump;
        }
        thread::sleep(Duration::from_millis(10));
    }
    greenweave::runtime::dump_without_backtraces()
}

fn find<'d>(dump: &'d Dump, name: &str) -> &'d GreenThread {
    dump.green_threads()
        .iter()
        .find(|thread| thread.name() == Some(name))
        .unwrap_or_else(|| panic!("no green thread named {name:?} in the dump:\n{dump}"))
}

fn has_frame(thread: &GreenThread, function: &str) -> bool {
    thread
        .backtrace()
        .is_some_and(|frames| frames.iter().any(|frame| frame.symbol().contains(function)))
}

/// Asserts that `name` is parked in a wait of kind `kind` and that its backtrace names
/// `function`, its own code.
fn assert_parked(dump: &Dump, name: &str, kind: &str, function: &str) {
    let thread = find(dump, name);
    assert_eq!(thread.state(), GreenThreadState::Parked, "{name}:\n{dump}");
    assert_eq!(thread.wait_kind(), Some(kind), "{name}:\n{dump}");
    assert!(thread.waiting_on().is_some(), "{name}:\n{dump}");
    assert!(
        has_frame(thread, function),
        "{name}'s backtrace does not name {function}:\n{dump}"
    );
}

#[test]
fn a_dump_names_each_kind_of_wait_and_a_frame_of_each_green_threads_own_code() {
    let runtime = Runtime::builder().workers(2).build().unwrap();
    runtime.run(|| {
        let sleeper = named("sleep", parks_in_sleep);
        let (reader, _writer) = greenweave::os::unix::net::UnixStream::pair().unwrap();
        let io_fd = std::os::fd::AsRawFd::as_raw_fd(&reader);
        named("io", move || parks_in_io(reader));
        let sleeper_id = sleeper.thread().id().as_u64();
        named("join", move || parks_in_join(sleeper));
        let (release, released) = std::sync::mpsc::channel();
        named("remote", move || parks_in_remote(released));
        let (_sender, receiver) = greenweave::sync::mpsc::channel();
        named("sync", move || parks_in_channel(receiver));
        let lock = Rc::new(Mutex::new(0));
        let held = lock.lock().unwrap();
        let waiter = lock.clone();
        named("lock", move || parks_in_lock(waiter));
        named("scope", parks_in_scope);
        let (_select_sender, select_receiver) = greenweave::sync::mpsc::channel();
        named("select", move || parks_in_select(select_receiver));
        named("other worker", parks_in_other_worker_join);
        let (_shared_sender, shared_receiver) = greenweave::sync::shared::channel();
        named("shared", move || parks_in_shared_channel(shared_receiver));
        #[cfg(feature = "hooks")]
        let std_lock = std::sync::Arc::new(std::sync::Mutex::new(0));
        #[cfg(feature = "hooks")]
        let std_held = std_lock.lock().unwrap();
        #[cfg(feature = "hooks")]
        {
            let std_lock = std_lock.clone();
            named("futex", move || parks_in_futex(std_lock));
        }
        let_them_park();
        // Worker 1 is another OS thread: its green thread may not have reached its sleep yet.
        dump_when(|dump| {
            dump.green_threads()
                .iter()
                .any(|thread| thread.worker() == 1 && thread.wait_kind() == Some("sleep"))
        });

        let dump = greenweave::runtime::dump();
        let me = thread::current().id().as_u64();
        assert_eq!(dump.taken_by(), Some(me));
        assert_eq!(dump.workers(), 2);
        assert!(dump.unanswered_workers().is_empty());

        assert_parked(&dump, "sleep", "sleep", "parks_in_sleep");
        assert!(find(&dump, "sleep").deadline_in().is_some());
        assert_parked(&dump, "io", "io", "parks_in_io");
        let io = find(&dump, "io").waiting_on().unwrap();
        assert!(io.contains(&format!("fd {io_fd} ")), "{io}");
        assert_parked(&dump, "join", "join", "parks_in_join");
        assert_eq!(find(&dump, "join").waits_for(), Some(sleeper_id));
        assert_parked(&dump, "remote", "remote", "parks_in_remote");
        assert_parked(&dump, "sync", "sync", "parks_in_channel");
        assert_parked(&dump, "lock", "lock", "parks_in_lock");
        assert_eq!(find(&dump, "lock").waits_for(), Some(me));
        assert_parked(&dump, "scope", "scope", "parks_in_scope");
        assert_parked(&dump, "select", "select", "parks_in_select");
        assert_parked(
            &dump,
            "other worker",
            "other_worker",
            "parks_in_other_worker_join",
        );
        assert_parked(&dump, "shared", "shared", "parks_in_shared_channel");
        #[cfg(feature = "hooks")]
        assert_parked(&dump, "futex", "futex", "parks_in_futex");

        // Worker 1's green thread, spawned from worker 0, is in the dump, with its own stack.
        let remote_sleeper = dump
            .green_threads()
            .iter()
            .find(|thread| thread.worker() == 1)
            .unwrap_or_else(|| panic!("nothing from worker 1:\n{dump}"));
        assert_eq!(remote_sleeper.wait_kind(), Some("sleep"));
        assert!(has_frame(remote_sleeper, "parks_in_sleep"), "{dump}");
        // Its joiner on worker 0 names it: an edge across workers.
        assert_eq!(
            find(&dump, "other worker").waits_for(),
            Some(remote_sleeper.id()),
            "{dump}"
        );
        // The scope's green thread names the scope's owner as its parent.
        let scope_id = find(&dump, "scope").id();
        assert!(
            dump.green_threads()
                .iter()
                .any(|thread| thread.parent() == Some(scope_id)
                    && has_frame(thread, "parks_in_sleep")),
            "{dump}"
        );
        assert_eq!(find(&dump, "sleep").parent(), Some(me));
        // The dumping green thread itself is parked, in its own code too.
        let dumper = dump.green_threads().iter().find(|t| t.id() == me).unwrap();
        assert!(
            has_frame(dumper, "a_dump_names_each_kind_of_wait"),
            "{dump}"
        );

        let text = dump.to_string();
        for kind in ["sleeping", "joining green thread", "held by green thread"] {
            assert!(text.contains(kind), "{kind:?} missing from:\n{text}");
        }
        let json = dump.to_json();
        assert!(json.contains(r#""kind":"lock""#), "{json}");
        assert!(json.contains(&format!(r#""waits_for":{me}"#)), "{json}");
        assert!(json.contains("parks_in_io"), "{json}");

        drop(held);
        #[cfg(feature = "hooks")]
        drop(std_held);
        release.send(()).unwrap();
    });
}

#[test]
fn a_dump_without_backtraces_has_the_same_green_threads_and_no_frames() {
    greenweave::run(|| {
        named("sleep", parks_in_sleep);
        let_them_park();
        let dump = greenweave::runtime::dump_without_backtraces();
        assert_eq!(find(&dump, "sleep").wait_kind(), Some("sleep"));
        assert!(dump.green_threads().iter().all(|t| t.backtrace().is_none()));
        assert!(dump.to_json().contains(r#""backtrace":null"#));
    });
}

#[test]
fn receivers_on_one_channel_name_one_address_and_another_channel_another() {
    greenweave::run(|| {
        let (_first_sender, first) = greenweave::sync::mpsc::channel::<u8>();
        let (_second_sender, second) = greenweave::sync::mpsc::channel::<u8>();
        let first = Rc::new(first);
        let again = first.clone();
        named("first a", move || {
            let _ = first.recv();
        });
        named("first b", move || {
            let _ = again.recv();
        });
        named("second", move || parks_in_channel(second));
        let_them_park();
        let dump = greenweave::runtime::dump_without_backtraces();
        let on = |name| find(&dump, name).waiting_on().unwrap();
        assert_eq!(on("first a"), on("first b"));
        assert_ne!(on("first a"), on("second"));
        assert!(
            on("second").contains("a channel (recv) (at 0x"),
            "{}",
            on("second")
        );
    });
}

#[test]
fn a_parked_green_thread_has_been_parked_at_least_as_long_as_it_waited() {
    greenweave::run(|| {
        named("sleep", parks_in_sleep);
        let ready = named("ready", || {});
        // The 30 ms are counted from a time when it has parked. (Counted from before, the park
        // could begin late enough, under qemu, to be shorter.)
        let_them_park();
        thread::sleep(Duration::from_millis(30));
        let dump = greenweave::runtime::dump_without_backtraces();
        let parked_for = find(&dump, "sleep").parked_for().unwrap();
        assert!(parked_for >= Duration::from_millis(30), "{parked_for:?}");
        assert!(find(&dump, "sleep").deadline_in().unwrap() <= LONG);
        drop(ready);
    });
}

#[test]
fn a_ready_green_thread_is_listed_as_ready_with_the_stack_it_yielded_from() {
    greenweave::run(|| {
        #[inline(never)]
        fn yields_forever() {
            loop {
                thread::yield_now();
            }
        }
        let spinner = named("spinner", yields_forever);
        thread::yield_now();
        let dump = greenweave::runtime::dump();
        let spinner_entry = find(&dump, "spinner");
        assert_eq!(spinner_entry.state(), GreenThreadState::Ready, "{dump}");
        assert_eq!(spinner_entry.wait_kind(), None);
        assert!(has_frame(spinner_entry, "yields_forever"), "{dump}");
        spinner.cancel();
    });
}

#[test]
fn a_lock_cycle_is_reported_as_a_deadlock_while_the_rest_of_the_program_runs() {
    greenweave::run(|| {
        let first = Rc::new(Mutex::new(()));
        let second = Rc::new(Mutex::new(()));
        let (a1, b1) = (first.clone(), second.clone());
        let one = named("one", move || {
            let _a = a1.lock();
            thread::sleep(Duration::from_millis(5));
            parks_in_lock_unit(b1);
        });
        let (a2, b2) = (first.clone(), second.clone());
        let two = named("two", move || {
            let _b = b2.lock();
            thread::sleep(Duration::from_millis(5));
            parks_in_lock_unit(a2);
        });
        // A bystander waiting for one of them: in a chain, not in the cycle.
        let third = first.clone();
        named("bystander", move || parks_in_lock_unit(third));
        // Until the cycle has formed. (A sleep could end before: its deadline could pass before
        // it parked, with one and two still in theirs.)
        dump_when(|dump| !dump.cycles().is_empty());
        let dump = greenweave::runtime::dump();
        let (one_id, two_id) = (one.thread().id().as_u64(), two.thread().id().as_u64());
        assert_eq!(
            dump.cycles(),
            [vec![one_id.min(two_id), one_id.max(two_id)]]
        );
        assert_eq!(find(&dump, "one").waits_for(), Some(two_id));
        assert_eq!(find(&dump, "two").waits_for(), Some(one_id));
        let bystander = find(&dump, "bystander").id();
        assert_eq!(dump.wait_chain(bystander), [one_id, two_id, one_id]);
        assert!(
            has_frame(find(&dump, "one"), "parks_in_lock_unit"),
            "{dump}"
        );
        let text = dump.to_string();
        assert!(
            text.contains(&format!(
                "deadlock: green threads {} -> {}",
                one_id.min(two_id),
                one_id.max(two_id)
            )),
            "{text}"
        );
        assert!(dump.to_json().contains(&format!(
            r#""cycles":[[{},{}]]"#,
            one_id.min(two_id),
            one_id.max(two_id)
        )));
        one.cancel();
        two.cancel();
    });
}

#[inline(never)]
fn parks_in_lock_unit(lock: Rc<Mutex<()>>) {
    let _guard = lock.lock();
}

#[test]
fn a_join_cycle_is_reported_as_a_deadlock() {
    greenweave::run(|| {
        let slot: Rc<std::cell::RefCell<Option<thread::JoinHandle<()>>>> = Rc::default();
        let joined_by_first = slot.clone();
        let first = named("first", move || {
            thread::yield_now();
            let second = joined_by_first.borrow_mut().take().unwrap();
            parks_in_join(second);
        });
        let first_id = first.thread().id().as_u64();
        let second = named("second", move || parks_in_join(first));
        let second_id = second.thread().id().as_u64();
        *slot.borrow_mut() = Some(second);
        let_them_park();
        let dump = greenweave::runtime::dump_without_backtraces();
        assert_eq!(dump.cycles(), [vec![first_id, second_id]], "{dump}");
        assert_eq!(find(&dump, "second").wait_kind(), Some("join"));
    });
}

#[inline(never)]
fn waits_in_a_scope_holding_a_lock_its_green_thread_wants(lock: &Mutex<u8>) {
    let _held = lock.lock().unwrap();
    let sleeper = named("sleeper", parks_in_sleep);
    thread::scope(|scope| {
        // Spawned first, and waits for a green thread too, but ends once that one does: not
        // the edge the dump should give.
        thread::Builder::new()
            .name("scope bystander".into())
            .spawn_scoped(scope, move || parks_in_join(sleeper))
            .unwrap();
        thread::Builder::new()
            .name("scope locker".into())
            .spawn_scoped(scope, || drop(lock.lock()))
            .unwrap();
    });
}

#[test]
fn a_scope_waiting_for_a_green_thread_that_waits_for_it_is_reported_as_a_deadlock() {
    greenweave::run(|| {
        let owner = named("scope owner", || {
            waits_in_a_scope_holding_a_lock_its_green_thread_wants(&Mutex::new(0));
        });
        let calm = named("calm scope", || {
            thread::scope(|scope| {
                thread::Builder::new()
                    .name("calm child".into())
                    .spawn_scoped(scope, parks_in_sleep)
                    .unwrap();
            });
        });
        let_them_park();
        let dump = greenweave::runtime::dump_without_backtraces();
        let owner_id = find(&dump, "scope owner").id();
        let locker_id = find(&dump, "scope locker").id();
        assert_eq!(
            find(&dump, "scope owner").wait_kind(),
            Some("scope"),
            "{dump}"
        );
        // Of the scope's two green threads, the edge is the one on the cycle.
        assert_eq!(
            find(&dump, "scope owner").waits_for(),
            Some(locker_id),
            "{dump}"
        );
        assert_eq!(
            find(&dump, "scope locker").waits_for(),
            Some(owner_id),
            "{dump}"
        );
        assert_eq!(dump.cycles(), [vec![owner_id, locker_id]], "{dump}");
        // A scope off any cycle still has an edge, to its green thread, and is no deadlock.
        let calm_child = find(&dump, "calm child").id();
        assert_eq!(
            find(&dump, "calm scope").waits_for(),
            Some(calm_child),
            "{dump}"
        );
        let sleeper = find(&dump, "sleeper").id();
        assert_eq!(
            find(&dump, "scope bystander").waits_for(),
            Some(sleeper),
            "{dump}"
        );
        assert!(
            dump.to_json()
                .contains(&format!(r#""waits_for":{locker_id}"#))
        );
        owner.cancel();
        calm.cancel();
    });
}

#[test]
fn a_join_cycle_across_workers_is_reported_as_a_deadlock() {
    let runtime = Runtime::builder().workers(2).build().unwrap();
    runtime.run(|| {
        // The green thread on worker 0 joins the one on worker 1, which joins it back: the
        // second's handle reaches the first through a slot both can see.
        let slot: Arc<std::sync::Mutex<Option<thread::RemoteJoinHandle<()>>>> = Arc::default();
        let from_slot = slot.clone();
        let on_worker_0 = thread::Builder::new()
            .name("on worker 0".into())
            .spawn_on(0, move || {
                let other = loop {
                    if let Some(handle) = from_slot.lock().unwrap().take() {
                        break handle;
                    }
                    thread::sleep(Duration::from_millis(1));
                };
                let _ = other.join();
            })
            .unwrap();
        let on_worker_1 = thread::Builder::new()
            .name("on worker 1".into())
            .spawn_on(1, move || {
                let _ = on_worker_0.join();
            })
            .unwrap();
        *slot.lock().unwrap() = Some(on_worker_1);
        // However slow the machine, both end up parked in their joins: look until they have.
        let dump = dump_when(|dump| !dump.cycles().is_empty());
        let first = find(&dump, "on worker 0");
        let second = find(&dump, "on worker 1");
        assert_eq!((first.worker(), second.worker()), (0, 1), "{dump}");
        assert_eq!(first.wait_kind(), Some("other_worker"), "{dump}");
        assert_eq!(first.waits_for(), Some(second.id()), "{dump}");
        assert_eq!(second.waits_for(), Some(first.id()), "{dump}");
        let mut cycles = dump.cycles().to_vec();
        for cycle in &mut cycles {
            cycle.sort_unstable();
        }
        let mut expected = vec![first.id(), second.id()];
        expected.sort_unstable();
        assert_eq!(cycles, [expected], "{dump}");
        let text = dump.to_string();
        let edge = format!("joining green thread {} on worker 1", second.id());
        assert!(text.contains(&edge), "{edge:?} missing from:\n{text}");
        let json = dump.to_json();
        assert!(
            json.contains(&format!(
                r#""other_worker":1,"green_thread":{}"#,
                second.id()
            )),
            "{json}"
        );
    });
}

#[test]
fn a_generator_a_green_thread_runs_shows_in_its_backtrace() {
    greenweave::run(|| {
        let runner = named("runs a generator", || {
            let mut generator = Coroutine::<(), (), ()>::new(|_, ()| generator_body_parks());
            let _ = generator.resume(());
        });
        let_them_park();
        let dump = greenweave::runtime::dump();
        let entry = find(&dump, "runs a generator");
        assert_eq!(entry.wait_kind(), Some("sleep"));
        assert!(has_frame(entry, "generator_body_parks"), "{dump}");
        runner.cancel();
    });
}

#[inline(never)]
fn greenlet_body_parks() {
    thread::sleep(LONG);
    stays_in_the_backtrace(13);
}

#[test]
fn a_greenlet_a_green_thread_switched_to_shows_in_its_backtrace() {
    greenweave::run(|| {
        let runner = named("runs a greenlet", || {
            let greenlet = greenweave::greenlet::Greenlet::<()>::new(|()| greenlet_body_parks());
            greenlet.switch(());
        });
        let_them_park();
        let dump = greenweave::runtime::dump();
        let entry = find(&dump, "runs a greenlet");
        assert_eq!(entry.wait_kind(), Some("sleep"));
        assert!(has_frame(entry, "greenlet_body_parks"), "{dump}");
        runner.cancel();
    });
}

#[test]
#[should_panic(expected = "outside a green thread")]
fn a_dump_outside_a_green_thread_panics_saying_where_to_call_it() {
    greenweave::runtime::dump();
}

#[test]
fn dump_on_signal_refuses_a_signal_that_cannot_carry_the_dump() {
    for signal in [libc::SIGKILL, libc::SIGSEGV, 0, 1000] {
        let error = Runtime::builder()
            .dump_on_signal(signal)
            .build()
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("dump_on_signal"), "{error}");
    }
}

#[test]
fn dump_on_signal_refuses_the_signals_glibc_keeps_for_itself_naming_them() {
    // 32 and 33 on glibc: real-time signals below SIGRTMIN, which `sigaction` refuses.
    assert!(
        libc::SIGRTMIN() > 32,
        "this C library keeps no real-time signal"
    );
    for signal in 32..libc::SIGRTMIN() {
        let error = Runtime::builder()
            .dump_on_signal(signal)
            .build()
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
        let message = error.to_string();
        assert!(message.contains("dump_on_signal"), "{message}");
        assert!(message.contains(&format!("signal {signal} ")), "{message}");
    }
    // The first real-time signal the program may use is accepted.
    Runtime::builder()
        .dump_on_signal(libc::SIGRTMIN())
        .build()
        .unwrap()
        .run(|| {});
}

const END: &str = "end of greenweave dump";

#[test]
fn a_dump_on_a_signal_in_a_child_leaves_it_running_and_exiting_normally() {
    let outcome = run_in_child(
        "a_dump_on_a_signal_in_a_child_leaves_it_running_and_exiting_normally",
        || {
            let runtime = Runtime::builder()
                .dump_on_signal(libc::SIGUSR1)
                .build()
                .unwrap();
            let captured = runtime.run(|| {
                named("signalled sleeper", parks_in_sleep);
                let_them_park();
                // The dump goes to stderr: catch it through a pipe on fd 2.
                let mut fds = [0; 2];
                // SAFETY: plain descriptor calls on descriptors this test owns.
                let saved = unsafe {
                    assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
                    let saved = libc::dup(2);
                    assert_eq!(libc::dup2(fds[1], 2), 2);
                    libc::close(fds[1]);
                    assert_eq!(libc::raise(libc::SIGUSR1), 0);
                    saved
                };
                // SAFETY: the read end is ours, owned by the File from here on.
                let mut pipe =
                    unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
                let captured = greenweave::unblock(move || {
                    let mut text = String::new();
                    let mut buffer = [0u8; 4096];
                    while !text.contains(END) {
                        let read = pipe.read(&mut buffer).unwrap();
                        assert!(read > 0, "stderr closed before the dump ended: {text}");
                        text.push_str(&String::from_utf8_lossy(&buffer[..read]));
                    }
                    text
                });
                // SAFETY: puts the saved stderr back.
                unsafe {
                    libc::dup2(saved, 2);
                    libc::close(saved);
                }
                // The program goes on: green threads still run after the dump.
                let after = thread::spawn(|| 6 * 7).join().unwrap();
                assert_eq!(after, 42);
                captured
            });
            println!("{captured}");
            println!("the runtime ended normally");
            std::process::exit(0);
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
    assert!(
        outcome.stdout.contains("the runtime ended normally"),
        "{}",
        outcome.describe()
    );
    assert!(
        outcome.stdout.contains("'signalled sleeper'"),
        "{}",
        outcome.describe()
    );
    assert!(
        outcome.stdout.contains("parks_in_sleep"),
        "{}",
        outcome.describe()
    );
}

#[inline(never)]
fn parks_in_thread_park() {
    thread::park();
    stays_in_the_backtrace(14);
}

#[test]
fn a_green_thread_in_thread_park_is_listed_as_parked_in_park() {
    greenweave::run(|| {
        let parked = named("park", parks_in_thread_park);
        let_them_park();
        let dump = greenweave::runtime::dump();
        assert_parked(&dump, "park", "park", "parks_in_thread_park");
        assert!(dump.to_string().contains("thread::park"), "{dump}");
        parked.thread().unpark();
        parked.join().unwrap();
    });
}

/// Spins in user space, never parking and making no system call, until `stop` is set: the
/// worker it runs on cannot answer a dump meanwhile.
#[inline(never)]
fn spins_until(stop: &std::sync::atomic::AtomicBool, started: &std::sync::atomic::AtomicBool) {
    started.store(true, std::sync::atomic::Ordering::Release);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::hint::spin_loop();
    }
    stays_in_the_backtrace(15);
}

#[test]
fn a_dump_on_a_signal_comes_out_while_a_worker_spins_naming_it_and_what_its_thread_does() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let outcome = run_in_child(
        "a_dump_on_a_signal_comes_out_while_a_worker_spins_naming_it_and_what_its_thread_does",
        || {
            // The dump goes to stderr: catch it through a pipe on fd 2, read by a plain OS
            // thread (the only worker is the one that spins).
            let mut fds = [0; 2];
            // SAFETY: plain descriptor calls on descriptors this test owns.
            let saved = unsafe {
                assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
                let saved = libc::dup(2);
                assert_eq!(libc::dup2(fds[1], 2), 2);
                libc::close(fds[1]);
                saved
            };
            // SAFETY: the read end is ours, owned by the File from here on.
            let mut pipe =
                unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
            let stop = Arc::new(AtomicBool::new(false));
            let started = Arc::new(AtomicBool::new(false));
            let reader = {
                let (stop, started) = (stop.clone(), started.clone());
                std::thread::spawn(move || {
                    while !started.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    // SAFETY: kill(2) on this process, with the signal the runtime catches.
                    assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGQUIT) }, 0);
                    let mut text = String::new();
                    let mut buffer = [0u8; 4096];
                    while !text.contains(END) {
                        let read = pipe.read(&mut buffer).unwrap();
                        assert!(read > 0, "stderr closed before the dump ended: {text}");
                        text.push_str(&String::from_utf8_lossy(&buffer[..read]));
                    }
                    stop.store(true, Ordering::Relaxed);
                    text
                })
            };
            let runtime = Runtime::builder()
                .dump_on_signal(libc::SIGQUIT)
                .build()
                .unwrap();
            runtime.run(|| spins_until(&stop, &started));
            let captured = reader.join().unwrap();
            // SAFETY: puts the saved stderr back.
            unsafe {
                libc::dup2(saved, 2);
                libc::close(saved);
            }
            println!("{captured}");
            std::process::exit(0);
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
    // The worker is named, with its OS thread, and what that thread does: no system call,
    // running its own code; and, since the runtime owns a signal to ask it with, where: in the
    // spinner (or, in a build that does not inline, a function it calls).
    let line = outcome
        .stdout
        .lines()
        .find(|line| line.starts_with("worker 0 did not answer within"))
        .unwrap_or_else(|| panic!("no line names worker 0\n{}", outcome.describe()));
    assert!(
        line.contains("its OS thread (tid ")
            && line.contains("is running its own code in user space, in no system call, at 0x"),
        "{line}"
    );
    assert!(
        ["spins_until", "core::sync::atomic", "spin_loop"]
            .iter()
            .any(|function| line.contains(function)),
        "the line should name the spinner's function\n{line}"
    );
}

#[test]
fn a_dump_from_another_worker_names_a_spinning_worker_and_what_its_thread_does() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let outcome = run_in_child(
        "a_dump_from_another_worker_names_a_spinning_worker_and_what_its_thread_does",
        || {
            let runtime = Runtime::builder().workers(2).build().unwrap();
            let text = runtime.run(|| {
                let stop = Arc::new(AtomicBool::new(false));
                let started = Arc::new(AtomicBool::new(false));
                let spinner = {
                    let (stop, started) = (stop.clone(), started.clone());
                    thread::spawn_on(1, move || spins_until(&stop, &started))
                };
                while !started.load(Ordering::Acquire) {
                    thread::sleep(Duration::from_millis(1));
                }
                let dump = greenweave::runtime::dump();
                stop.store(true, Ordering::Relaxed);
                spinner.join().unwrap();
                assert_eq!(dump.unanswered_workers(), [1], "{dump}");
                dump.to_string()
            });
            println!("{text}");
            std::process::exit(0);
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
    // No signal of greenweave's to ask the thread with: what it does, not where.
    let line = outcome
        .stdout
        .lines()
        .find(|line| line.starts_with("worker 1 did not answer within"))
        .unwrap_or_else(|| panic!("no line names worker 1\n{}", outcome.describe()));
    assert!(
        line.contains("its OS thread (tid ")
            && line.ends_with("is running its own code in user space, in no system call"),
        "{line}"
    );
}

#[inline(never)]
fn parks_in_shape_a() {
    thread::sleep(LONG);
    stays_in_the_backtrace(16);
}

#[inline(never)]
fn parks_in_shape_b() {
    thread::sleep(LONG);
    stays_in_the_backtrace(17);
}

/// Parks `depth` calls of itself deep.
#[inline(never)]
fn parks_at_depth(depth: usize) {
    if depth == 0 {
        thread::sleep(LONG);
    } else {
        parks_at_depth(depth - 1);
    }
    stays_in_the_backtrace(18);
}

/// Dumps with backtraces once every green thread but the caller is parked (spawned on other
/// workers, they park in their own time).
fn dump_once_all_parked() -> Dump {
    let me = thread::current().id().as_u64();
    dump_when(|dump| {
        dump.green_threads()
            .iter()
            .all(|thread| thread.id() == me || thread.state() == GreenThreadState::Parked)
    });
    greenweave::runtime::dump()
}

/// How many frames of `thread`'s backtrace are calls of `function` itself. Not a `contains`:
/// under the v0 symbol mangling (nightly's, which the AddressSanitizer run uses) the frames of
/// generic functions name their type arguments, so `catch_unwind::do_call::<AssertUnwindSafe<
/// dump::parks_in_shape_a>, ()>` mentions the function without being it.
fn frames_naming(thread: &GreenThread, function: &str) -> usize {
    thread.backtrace().map_or(0, |frames| {
        frames
            .iter()
            .filter(|frame| is_frame_of(frame.symbol(), function))
            .count()
    })
}

/// Whether `symbol` (a demangled name, with or without its `::h<hash>` suffix) is the path of
/// `function`.
fn is_frame_of(symbol: &str, function: &str) -> bool {
    let path = match symbol.rsplit_once("::h") {
        Some((path, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            path
        }
        _ => symbol,
    };
    path == function || path.ends_with(&format!("::{function}"))
}

fn same_backtrace(first: &GreenThread, second: &GreenThread) -> bool {
    std::ptr::eq(first.backtrace().unwrap(), second.backtrace().unwrap())
}

#[test]
fn green_threads_parked_through_the_same_calls_share_one_backtrace_and_each_names_its_own_function()
{
    let runtime = Runtime::builder().workers(2).build().unwrap();
    runtime.run(|| {
        // Two shapes of the same depth, parked at the same switch, interleaved on both workers:
        // 16 green threads of each, 8 of each on each worker.
        for index in 0..32 {
            let shape_a = (index / 2) % 2 == 0;
            let name = format!("{}{index}", if shape_a { "a" } else { "b" });
            let builder = thread::Builder::new().name(name);
            let spawned = if shape_a {
                builder.spawn_on(index % 2, parks_in_shape_a)
            } else {
                builder.spawn_on(index % 2, parks_in_shape_b)
            };
            spawned.unwrap();
        }
        let dump = dump_once_all_parked();
        let of_shape = |prefix: &str| -> Vec<&GreenThread> {
            dump.green_threads()
                .iter()
                .filter(|thread| thread.name().is_some_and(|name| name.starts_with(prefix)))
                .collect()
        };
        let (shape_a, shape_b) = (of_shape("a"), of_shape("b"));
        assert_eq!((shape_a.len(), shape_b.len()), (16, 16), "{dump}");
        for thread in &shape_a {
            assert_eq!(frames_naming(thread, "parks_in_shape_a"), 1, "{dump}");
            assert_eq!(frames_naming(thread, "parks_in_shape_b"), 0, "{dump}");
            assert!(same_backtrace(thread, shape_a[0]), "{dump}");
        }
        for thread in &shape_b {
            assert_eq!(frames_naming(thread, "parks_in_shape_b"), 1, "{dump}");
            assert_eq!(frames_naming(thread, "parks_in_shape_a"), 0, "{dump}");
            assert!(same_backtrace(thread, shape_b[0]), "{dump}");
        }
        assert!(!same_backtrace(shape_a[0], shape_b[0]), "{dump}");
        for worker in [0, 1] {
            assert!(
                shape_a.iter().any(|thread| thread.worker() == worker),
                "a shared backtrace spans the workers:\n{dump}"
            );
        }

        // The text shows each shared backtrace once, and still lists every green thread.
        let text = dump.to_string();
        assert_eq!(
            text.matches("the same for 16 green threads:").count(),
            2,
            "{text}"
        );
        // The frame of the function itself, once (other frames may name it among their type
        // arguments under the v0 mangling).
        let own_frames = text
            .lines()
            .filter_map(|line| line.trim().split_once(": "))
            .filter(|(number, symbol)| {
                number.parse::<usize>().is_ok() && is_frame_of(symbol, "parks_in_shape_a")
            })
            .count();
        assert_eq!(own_frames, 1, "{text}");
        for shape in [&shape_a, &shape_b] {
            let first = shape[0].id();
            let mentions = format!("as for green thread {first} above");
            assert_eq!(text.matches(&mentions).count(), 15, "{text}");
        }
        for thread in dump.green_threads() {
            assert!(text.contains(&format!("(id {})", thread.id())), "{text}");
        }
        // The JSON keeps every green thread's frames, with one id per distinct backtrace.
        let json = dump.to_json();
        // Each green thread's own frame of its function (a symbol that ends with its name).
        let own = |function: &str| json.matches(&format!("{function}\",\"location\"")).count();
        assert_eq!(own("parks_in_shape_a"), 16, "{json}");
        assert_eq!(own("parks_in_shape_b"), 16, "{json}");
        let id_of = |thread: &GreenThread| {
            let entry = &json[json.find(&format!(r#"{{"id":{},"#, thread.id())).unwrap()..];
            let from = entry.find(r#""backtrace_id":"#).unwrap() + r#""backtrace_id":"#.len();
            entry[from..].split(',').next().unwrap().to_owned()
        };
        assert!(
            shape_a.iter().all(|t| id_of(t) == id_of(shape_a[0])),
            "{json}"
        );
        assert!(
            shape_b.iter().all(|t| id_of(t) == id_of(shape_b[0])),
            "{json}"
        );
        assert_ne!(id_of(shape_a[0]), id_of(shape_b[0]), "{json}");
    });
}

#[test]
fn green_threads_parked_at_different_depths_get_a_backtrace_each_of_their_own_depth() {
    greenweave::run(|| {
        let depths = [1, 3, 2, 1, 3, 2, 1, 3, 2];
        let handles: Vec<_> = depths
            .iter()
            .enumerate()
            .map(|(index, &depth)| named(&format!("{index}"), move || parks_at_depth(depth)))
            .collect();
        let_them_park();
        let dump = greenweave::runtime::dump();
        let entries: Vec<&GreenThread> = (0..depths.len())
            .map(|index| find(&dump, &format!("{index}")))
            .collect();
        for (index, entry) in entries.iter().enumerate() {
            assert_eq!(
                frames_naming(entry, "parks_at_depth"),
                depths[index] + 1,
                "green thread {index}, {} calls deep:\n{dump}",
                depths[index]
            );
            for (other, other_entry) in entries.iter().enumerate() {
                assert_eq!(
                    same_backtrace(entry, other_entry),
                    depths[index] == depths[other],
                    "green threads {index} and {other}:\n{dump}"
                );
            }
        }
        for handle in handles {
            handle.cancel();
        }
    });
}
