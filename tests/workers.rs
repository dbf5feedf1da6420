//! Runtimes with several workers: each a single-thread scheduler on its own OS thread.
//! `spawn_on` and its join across workers, `run_on_every_worker`, pinning, shutdown with green
//! threads parked on every worker, a panic on one worker, and the deadlock report across
//! workers (raised when it should be, never while a job between workers is in flight).

mod common;

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use greenweave::sync::mpsc;
use greenweave::thread::{self, JoinError};
use greenweave::{Runtime, runtime};

fn workers(n: usize) -> Runtime {
    Runtime::builder().workers(n).build().unwrap()
}

#[test]
fn a_green_thread_spawned_on_another_worker_runs_on_that_workers_os_thread_and_joins_with_its_value()
 {
    let (here, there, value) = workers(2).run(|| {
        let here = (runtime::current_worker(), std::thread::current().id());
        let handle = thread::spawn_on(1, || {
            let there = (runtime::current_worker(), std::thread::current().id());
            // It stays there across parks.
            thread::sleep(Duration::from_millis(1));
            thread::yield_now();
            assert_eq!(there.1, std::thread::current().id());
            (there, String::from("from worker 1"))
        });
        let (there, value) = handle.join().unwrap();
        (here, there, value)
    });
    assert_eq!(here.0, 0);
    assert_eq!(there.0, 1);
    assert_ne!(here.1, there.1, "worker 1 is another OS thread");
    assert_eq!(
        here.1,
        std::thread::current().id(),
        "worker 0 is the caller"
    );
    assert_eq!(value, "from worker 1");
}

#[test]
fn green_threads_on_a_worker_keep_running_while_a_green_thread_of_another_worker_waits_in_join() {
    let ticks = workers(2).run(|| {
        let ticker = greenweave::spawn(|| {
            let mut ticks = 0;
            for _ in 0..5 {
                thread::sleep(Duration::from_millis(1));
                ticks += 1;
            }
            ticks
        });
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let remote = thread::spawn_on(1, move || {
            started_tx.send(()).unwrap();
            thread::sleep(Duration::from_millis(30));
        });
        // The ticker finishes while this green thread waits for the remote one.
        remote.join().unwrap();
        started_rx.recv().unwrap();
        ticker.join().unwrap()
    });
    assert_eq!(ticks, 5);
}

#[test]
fn many_spawns_each_way_between_two_workers_never_raise_a_false_deadlock() {
    // Each round: worker 0 joins a green thread on worker 1, which joins one back on worker 0.
    // Both workers are often idle with only the other able to wake them: the jobs in flight
    // between them must keep the deadlock verdict away.
    let total = workers(2).run(|| {
        let mut total = 0u64;
        for round in 0..300u64 {
            total += thread::spawn_on(1, move || {
                let back = thread::spawn_on(0, move || round * 2);
                back.join().unwrap() + 1
            })
            .join()
            .unwrap();
        }
        total
    });
    assert_eq!(total, (0..300u64).map(|round| round * 2 + 1).sum());
}

#[test]
fn a_remote_join_handle_can_be_joined_from_an_os_thread_outside_the_runtime() {
    let (handles_tx, handles_rx) = std::sync::mpsc::channel();
    let outside = std::thread::spawn(move || {
        let handle: thread::RemoteJoinHandle<usize> = handles_rx.recv().unwrap();
        handle.join().unwrap()
    });
    let joined = workers(2).run(|| {
        let handle = thread::spawn_on(1, move || {
            thread::sleep(Duration::from_millis(5));
            runtime::current_worker() + 41
        });
        handles_tx.send(handle).unwrap();
        // Keep the runtime alive (parked in unblock) until the outside thread has its value.
        greenweave::unblock(move || outside.join().unwrap())
    });
    assert_eq!(joined, 42);
}

#[test]
fn join_timeout_hands_back_a_handle_still_joinable() {
    let value = workers(2).run(|| {
        // It waits until told to finish. (A 40 ms sleep could end before the join timed out,
        // were worker 0 held up that long, as under Valgrind it can be.)
        let (finish, told_to_finish) = greenweave::sync::shared::channel::<()>();
        let slow = thread::spawn_on(1, move || {
            told_to_finish.recv().unwrap();
            7
        });
        let slow = slow
            .join_timeout(Duration::from_millis(1))
            .expect_err("the remote green thread is still waiting");
        assert!(!slow.is_finished());
        finish.send(()).unwrap();
        slow.join().unwrap()
    });
    assert_eq!(value, 7);
}

#[test]
fn spawning_on_a_worker_that_does_not_exist_is_an_invalid_input_error_naming_the_count() {
    workers(2).run(|| {
        let error = thread::Builder::new().spawn_on(2, || ()).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("2 workers"), "{error}");
    });
}

#[test]
fn a_panic_on_another_worker_reaches_the_joiner_as_its_payload() {
    let payload = workers(2).run(|| {
        let handle = thread::spawn_on(1, || -> () { panic!("worker one gave up") });
        match handle.join() {
            Err(JoinError::Panicked(payload)) => *payload.downcast::<&str>().unwrap(),
            other => panic!("expected a panic, got {:?}", other.map(|_| ())),
        }
    });
    assert_eq!(payload, "worker one gave up");
}

#[test]
fn a_panic_on_a_worker_is_reported_with_its_worker_and_green_thread_name() {
    let outcome = common::run_in_child(
        "a_panic_on_a_worker_is_reported_with_its_worker_and_green_thread_name",
        || {
            let joined = workers(2).run(|| {
                thread::Builder::new()
                    .name("parser".into())
                    .spawn_on(1, || -> () { panic!("bad input") })
                    .unwrap()
                    .join()
                    .is_err()
            });
            std::process::exit(if joined { 0 } else { 1 });
        },
    );
    assert!(outcome.status.success(), "{}", outcome.describe());
    let report = outcome
        .stderr
        .lines()
        .find(|line| line.contains("panicked at"))
        .unwrap_or_else(|| panic!("no panic report\n{}", outcome.describe()));
    assert!(
        report.starts_with("thread 'greenweave-worker-1' (")
            && report.contains("green thread 'parser' (id ")
            && report.contains(") on worker 1, panicked at tests/workers.rs:"),
        "{}",
        outcome.describe()
    );
    assert!(
        outcome.stderr.contains("bad input"),
        "{}",
        outcome.describe()
    );
}

/// Records, when dropped, which worker and OS thread dropped it.
struct DropRecorder {
    log: Arc<Mutex<Vec<(usize, usize, ThreadId)>>>,
    created_on: usize,
}

impl Drop for DropRecorder {
    fn drop(&mut self) {
        self.log.lock().unwrap().push((
            self.created_on,
            runtime::current_worker(),
            std::thread::current().id(),
        ));
    }
}

#[test]
fn when_main_returns_green_threads_parked_on_every_worker_are_unwound_on_their_own_workers() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let runtime = workers(3);
    let os_threads = runtime.run(|| {
        let mut os_threads = Vec::new();
        for worker in 0..3 {
            let log = log.clone();
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            // Each parks for ever on a channel nobody sends on, holding a recorder.
            let handle = thread::spawn_on(worker, move || {
                let _recorder = DropRecorder {
                    log,
                    created_on: runtime::current_worker(),
                };
                let (_keep, never) = mpsc::channel::<()>();
                ready_tx.send(std::thread::current().id()).unwrap();
                let _ = never.recv();
            });
            // Wait (parking) until it is parked on its worker.
            let id = greenweave::unblock(move || ready_rx.recv().unwrap());
            os_threads.push(id);
            drop(handle); // detached: the green thread stays parked
        }
        os_threads
    });
    let mut log = log.lock().unwrap().clone();
    log.sort_by_key(|entry| entry.0);
    assert_eq!(log.len(), 3, "every recorder was dropped: {log:?}");
    for (worker, (created_on, dropped_on, os_thread)) in log.into_iter().enumerate() {
        assert_eq!(created_on, worker);
        assert_eq!(dropped_on, worker, "unwound on its own worker");
        assert_eq!(os_thread, os_threads[worker], "on that worker's OS thread");
    }
}

#[test]
fn a_deadlock_across_two_workers_is_reported_with_the_green_threads_of_both() {
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        workers(2).run(|| {
            let stuck = thread::Builder::new()
                .name("forever".into())
                .spawn_on(1, || {
                    let (_keep, never) = mpsc::channel::<()>();
                    let _ = never.recv();
                })
                .unwrap();
            let _ = stuck.join();
        })
    }));
    let payload = outcome.expect_err("the runtime deadlocked");
    let report = payload
        .downcast_ref::<String>()
        .expect("the report is a String");
    assert!(
        report.starts_with("greenweave: deadlock: every green thread on all 2 workers is parked"),
        "{report}"
    );
    assert!(
        report.contains(
            "green thread 'main' (id 1) on worker 0: joining a green thread spawned on worker 1"
        ),
        "{report}"
    );
    assert!(
        report.contains("green thread 'forever' (id ")
            && report.contains(") on worker 1: waiting on"),
        "{report}"
    );
}

#[test]
fn green_thread_ids_are_unique_across_workers() {
    let ids = workers(2).run_on_every_worker(|_| {
        let mut ids: Vec<_> = (0..5)
            .map(|_| greenweave::spawn(|| thread::current().id()).join().unwrap())
            .collect();
        ids.push(thread::current().id());
        ids
    });
    let mut all: Vec<_> = ids.into_iter().flatten().collect();
    let count = all.len();
    all.sort_by_key(|id| format!("{id:?}"));
    all.dedup();
    assert_eq!(all.len(), count, "no id appears twice");
}

#[test]
fn run_on_every_worker_runs_the_closure_once_per_worker_each_on_its_own_os_thread() {
    let caller = std::thread::current().id();
    let seen = workers(3).run_on_every_worker(|worker| {
        assert_eq!(runtime::current_worker(), worker);
        assert_eq!(runtime::worker_count(), 3);
        thread::yield_now();
        std::thread::current().id()
    });
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0], caller, "worker 0 is the calling thread");
    assert_ne!(seen[1], seen[2]);
    assert!(!seen[1..].contains(&caller));
}

#[test]
fn run_on_every_worker_keeps_every_worker_running_until_the_last_closure_returns() {
    // Worker 0's closure returns at once; worker 1's then still uses worker 0 through spawn_on.
    let results = workers(2).run_on_every_worker(|worker| {
        if worker == 0 {
            return 0;
        }
        thread::sleep(Duration::from_millis(5));
        thread::spawn_on(0, || runtime::current_worker() + 100)
            .join()
            .unwrap()
    });
    assert_eq!(results, [0, 100]);
}

#[test]
fn a_panic_in_one_workers_closure_is_raised_from_run_on_every_worker_after_the_others_return() {
    let finished = Arc::new(Mutex::new(Vec::new()));
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        workers(2).run_on_every_worker(|worker| {
            if worker == 1 {
                panic!("worker 1 failed");
            }
            thread::sleep(Duration::from_millis(5));
            finished.lock().unwrap().push(worker);
        })
    }));
    let payload = outcome.expect_err("the panic is raised again");
    assert_eq!(*payload.downcast::<&str>().unwrap(), "worker 1 failed");
    assert_eq!(*finished.lock().unwrap(), [0]);
}

#[test]
fn pinned_workers_each_run_on_their_cpu_and_the_caller_gets_its_cpus_back() {
    let allowed = cpus_of_this_thread();
    let first = allowed[0];
    let last = *allowed.last().unwrap();
    let runtime = Runtime::builder()
        .workers(2)
        .pin_workers([last, first])
        .build()
        .unwrap();
    let seen = runtime.run_on_every_worker(|_| cpus_of_this_thread());
    assert_eq!(seen, [vec![last], vec![first]]);
    assert_eq!(
        cpus_of_this_thread(),
        allowed,
        "worker 0's thread has its CPUs back"
    );
}

#[test]
fn pinning_lists_that_do_not_fit_are_refused_by_build_saying_why() {
    let error = Runtime::builder()
        .workers(2)
        .pin_workers([0])
        .build()
        .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("1 CPU for 2 workers"), "{error}");
    let error = Runtime::builder()
        .workers(1)
        .pin_workers([1023])
        .build()
        .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("CPU 1023"), "{error}");
    let error = Runtime::builder().workers(0).build().unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn multi_worker_starts_one_worker_per_available_cpu() {
    let runtime = Runtime::multi_worker().build().unwrap();
    assert_eq!(
        runtime.workers(),
        std::thread::available_parallelism().unwrap().get()
    );
    assert_eq!(
        greenweave::run(runtime::worker_count),
        1,
        "run stays single-threaded"
    );
}

/// The CPUs the calling OS thread may run on.
fn cpus_of_this_thread() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is the empty set; sched_getaffinity fills the live set of
    // the size passed, for the calling thread (pid 0).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: every index is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}
