//! Runtime metrics (`greenweave::runtime::metrics`): each counter counts exactly what a scripted
//! workload did, per worker, and can be read from another OS thread.

use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use greenweave::Runtime;
use greenweave::runtime::{ParkReason, RuntimeMetrics, metrics};

fn parks(metrics: &RuntimeMetrics, worker: usize) -> Vec<(ParkReason, u64)> {
    ParkReason::ALL
        .iter()
        .map(|&reason| (reason, metrics.worker_green_park_count(worker, reason)))
        .filter(|&(_, count)| count > 0)
        .collect()
}

fn delay_samples(metrics: &RuntimeMetrics, worker: usize) -> u64 {
    (0..metrics.scheduling_delay_histogram_num_buckets())
        .map(|bucket| metrics.worker_scheduling_delay_histogram_bucket_count(worker, bucket))
        .sum()
}

#[test]
fn polls_yields_and_parks_count_what_a_scripted_workload_did() {
    let (during, after) = {
        let mut during = None;
        let after = greenweave::run(|| {
            // Three green threads yield ten times each, round robin; main parks once, in the
            // join of the first (the other two have finished when it is woken: the first
            // finishes ahead of them, and they finish before main's turn comes).
            let yielders: Vec<_> = (0..3)
                .map(|_| {
                    greenweave::spawn(|| {
                        for _ in 0..10 {
                            greenweave::thread::yield_now();
                        }
                    })
                })
                .collect();
            for yielder in yielders {
                yielder.join().unwrap();
            }
            let metrics = metrics();
            during = Some((
                metrics.worker_poll_count(0),
                metrics.worker_yield_count(0),
                parks(&metrics, 0),
                metrics.num_alive_tasks(),
                metrics.spawned_tasks_count(),
                metrics.worker_local_queue_depth(0),
            ));
            metrics
        });
        (during.unwrap(), after)
    };
    // Read by main before it returns: its run under way is not counted yet. Completed: main's
    // first run (ended in the join's park) and 3 x 11 runs of the yielders (10 yields, then
    // the end).
    assert_eq!(during, (34, 30, vec![(ParkReason::Join, 1)], 1, 4, 0));
    // After the runtime: main's second run (its end) too.
    assert_eq!(after.worker_poll_count(0), 35);
    assert_eq!(after.worker_yield_count(0), 30);
    assert_eq!(parks(&after, 0), [(ParkReason::Join, 1)]);
    assert_eq!(after.num_alive_tasks(), 0);
    assert_eq!(after.spawned_tasks_count(), 4);
    assert_eq!(after.budget_forced_yield_count(), 0);
    assert_eq!(after.worker_local_queue_depth(0), 0);
}

/// Sleeps with `sleep`, from 1 ms on and each try twice as long, until a sleep parked on
/// `worker` (one whose time was up before it could park only yields, or returns at once);
/// returns how many did not park.
fn sleep_until_one_parks_with(worker: usize, sleep: impl Fn(Duration)) -> u64 {
    let mut nap = Duration::from_millis(1);
    for missed in 0..12 {
        sleep(nap);
        if metrics().worker_green_park_count(worker, ParkReason::Sleep) > 0 {
            return missed;
        }
        nap *= 2;
    }
    panic!("no sleep parked, the last of {nap:?}");
}

/// [`sleep_until_one_parks_with`] greenweave's own sleep.
fn sleep_until_one_parks(worker: usize) -> u64 {
    sleep_until_one_parks_with(worker, greenweave::thread::sleep)
}

#[test]
fn parks_are_counted_by_the_reason_of_each_wait() {
    let (missed, metrics) = greenweave::run(|| {
        // Sleep: 1. A sleep whose time is up before it could park only yields (under qemu its
        // millisecond can pass on the way); each try sleeps longer, the tries stop at the
        // first park, and the yields of those that missed are counted below.
        let missed = sleep_until_one_parks(0);
        // Sync (the child's recv) and Join (main's join, the child still parked): 1 each.
        let (sender, receiver) = greenweave::sync::mpsc::channel();
        let child = greenweave::spawn(move || receiver.recv().unwrap());
        greenweave::thread::yield_now();
        sender.send(5).unwrap();
        assert_eq!(child.join().unwrap(), 5);
        // Remote: 1 (unblock parks once, however fast the helper is).
        assert_eq!(greenweave::unblock(|| 6), 6);
        // Io: the read parks once, before the peer writes.
        let near = greenweave::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let address = near.local_addr().unwrap();
        let writer = greenweave::spawn(move || {
            let far = greenweave::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            far.send_to(b"x", address).unwrap();
        });
        let mut byte = [0];
        assert_eq!(near.recv(&mut byte).unwrap(), 1);
        writer.join().unwrap();
        (missed, metrics())
    });
    assert_eq!(
        parks(&metrics, 0),
        [
            (ParkReason::Sleep, 1),
            (ParkReason::Io, 1),
            (ParkReason::Join, 1),
            (ParkReason::Remote, 1),
            (ParkReason::Sync, 1),
        ]
    );
    assert_eq!(metrics.green_park_count(ParkReason::Sync), 1);
    assert_eq!(metrics.worker_yield_count(0), 1 + missed);
    // Main's runs that ended in its yield and its 5 parks (not the one under way, which reads
    // the metrics), the receiver's 2 (a park, its end) and the writer's 1 (its end: its send
    // never parks); and one for each sleep that only yielded.
    assert_eq!(metrics.worker_poll_count(0), 6 + 2 + 1 + missed);
    // The read's readiness event, and the blocking polls of the unblock and the read (the
    // sleep's too, unless its millisecond had passed by the time the worker looked, as it can
    // under qemu: then the timer fires without a wait).
    assert_eq!(metrics.worker_io_ready_count(0), 1);
    assert_eq!(metrics.io_driver_ready_count(), 1);
    assert!(metrics.worker_park_count(0) >= 2);
    assert!(metrics.worker_io_poll_count(0) >= metrics.worker_park_count(0));
}

#[test]
fn a_thread_park_is_counted_under_its_own_reason() {
    let metrics = greenweave::run(|| {
        let child = greenweave::spawn(greenweave::thread::park);
        // The child runs and parks; then it is unparked and ends.
        greenweave::thread::yield_now();
        child.thread().unpark();
        child.join().unwrap();
        metrics()
    });
    assert_eq!(metrics.green_park_count(ParkReason::Park), 1);
}

#[test]
fn a_budget_spent_without_parking_counts_forced_yields() {
    let metrics = greenweave::run(|| {
        let (sender, receiver) = greenweave::sync::mpsc::channel();
        for i in 0..300 {
            sender.send(i).unwrap();
        }
        // 300 receives that never park spend 300 units: the 129th and the 257th find the
        // budget of 128 spent and yield first.
        for i in 0..300 {
            assert_eq!(receiver.recv().unwrap(), i);
        }
        metrics()
    });
    assert_eq!(metrics.budget_forced_yield_count(), 2);
    assert_eq!(metrics.worker_budget_forced_yield_count(0), 2);
    assert_eq!(metrics.worker_yield_count(0), 2);
    assert_eq!(metrics.worker_poll_count(0), 3);
    assert_eq!(parks(&metrics, 0), []);
}

#[test]
fn alive_and_spawned_follow_every_spawn_and_end() {
    greenweave::run(|| {
        let metrics = metrics();
        assert_eq!(
            (metrics.num_alive_tasks(), metrics.spawned_tasks_count()),
            (1, 1)
        );
        let children: Vec<_> = (0..5).map(|_| greenweave::spawn(|| {})).collect();
        assert_eq!(
            (metrics.num_alive_tasks(), metrics.spawned_tasks_count()),
            (6, 6)
        );
        // The queue depth as it is now, from the worker itself.
        assert_eq!(
            greenweave::runtime::metrics().worker_local_queue_depth(0),
            5
        );
        for child in children {
            child.join().unwrap();
        }
        assert_eq!(
            (metrics.num_alive_tasks(), metrics.spawned_tasks_count()),
            (1, 6)
        );
        assert_eq!(
            greenweave::runtime::metrics().worker_local_queue_depth(0),
            0
        );
    });
}

#[test]
fn green_threads_ended_by_shutdown_are_no_longer_alive() {
    let metrics = greenweave::run(|| {
        // Parked for ever: cancelled when main returns.
        let (_sender, receiver) = greenweave::sync::mpsc::channel::<()>();
        drop(greenweave::spawn(move || receiver.recv())); // detached
        greenweave::thread::yield_now();
        let metrics = metrics();
        assert_eq!(metrics.num_alive_tasks(), 2);
        metrics
    });
    assert_eq!(metrics.num_alive_tasks(), 0);
    assert_eq!(metrics.spawned_tasks_count(), 2);
}

#[test]
fn every_worker_counts_its_own_green_threads() {
    let runtime = Runtime::builder().workers(2).build().unwrap();
    let (missed, metrics) = runtime.run(|| {
        let remote = greenweave::thread::spawn_on(1, || {
            // Main must be parked in its join before this ends, or the join finds the result
            // and never parks (under Valgrind main can be held off that long): wait for its
            // park, spinning the OS thread, so that worker 1 counts nothing for the wait.
            let started = Instant::now();
            while metrics().worker_green_park_count(0, ParkReason::OtherWorker) == 0 {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "main never parked"
                );
                std::thread::yield_now();
            }
            for _ in 0..5 {
                greenweave::thread::yield_now();
            }
            // A sleep that only yielded (its time up before it could park, as under qemu) is
            // made again, longer, and counted below.
            sleep_until_one_parks(1)
        });
        let missed = remote.join().unwrap();
        (missed, metrics())
    });
    assert_eq!(metrics.num_workers(), 2);
    assert_eq!(metrics.spawned_tasks_count(), 2);
    assert_eq!(metrics.num_alive_tasks(), 0);
    // Worker 1: 5 yields, one sleep, its end (and a yield for each sleep that missed its park).
    assert_eq!(metrics.worker_yield_count(1), 5 + missed);
    assert_eq!(parks(&metrics, 1), [(ParkReason::Sleep, 1)]);
    assert_eq!(metrics.worker_poll_count(1), 7 + missed);
    // Worker 0: main parked in the join (once or more: a remote join re-checks on wake-up).
    assert_eq!(metrics.worker_yield_count(0), 0);
    let joins = metrics.worker_green_park_count(0, ParkReason::OtherWorker);
    assert!(joins >= 1);
    assert_eq!(parks(&metrics, 0), [(ParkReason::OtherWorker, joins)]);
    assert_eq!(metrics.worker_poll_count(0), joins + 1);
}

#[test]
#[should_panic(expected = "worker 2 does not exist; this runtime has 2 workers")]
fn a_worker_past_the_last_is_refused_with_the_number_of_workers() {
    let runtime = Runtime::builder().workers(2).build().unwrap();
    let metrics = runtime.run(metrics);
    metrics.worker_poll_count(2);
}

#[test]
fn a_monitoring_thread_reads_the_metrics_while_the_runtime_runs() {
    let (to_monitor, monitor_inbox) = std_mpsc::channel::<RuntimeMetrics>();
    let monitor = std::thread::spawn(move || {
        let metrics = monitor_inbox.recv().unwrap();
        (metrics.num_alive_tasks(), metrics.spawned_tasks_count())
    });
    greenweave::run(|| {
        let (_sender, receiver) = greenweave::sync::mpsc::channel::<()>();
        let receiver = std::rc::Rc::new(receiver);
        let parked: Vec<_> = (0..3)
            .map(|_| {
                let receiver = receiver.clone();
                greenweave::spawn(move || receiver.recv())
            })
            .collect();
        to_monitor.send(metrics()).unwrap();
        // The monitor reads while main waits here for it.
        let seen = greenweave::unblock(move || monitor.join().unwrap());
        assert_eq!(seen, (4, 4));
        for thread in parked {
            thread.cancel();
        }
    });
}

#[test]
fn the_blocking_pool_reports_its_busy_threads_and_queued_calls() {
    let runtime = Runtime::builder().max_blocking_threads(1).build().unwrap();
    runtime.run(|| {
        let (release, released) = std_mpsc::channel::<()>();
        let busy = greenweave::spawn(move || greenweave::unblock(move || released.recv()));
        let queued = greenweave::spawn(|| greenweave::unblock(|| 2));
        let metrics = metrics();
        // Wait (green) until the helper has taken the first call: the second then waits.
        let started = Instant::now();
        while metrics.blocking_queue_depth() != 1 || metrics.num_idle_blocking_threads() != 0 {
            assert!(started.elapsed() < Duration::from_secs(60), "{metrics:?}");
            greenweave::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(metrics.num_blocking_threads(), 1);
        release.send(()).unwrap();
        busy.join().unwrap().unwrap();
        assert_eq!(queued.join().unwrap(), 2);
        assert_eq!(metrics.blocking_queue_depth(), 0);
        assert_eq!(metrics.num_blocking_threads(), 1);
    });
}

#[test]
fn a_wake_up_by_a_timer_is_a_scheduling_delay_sample() {
    let metrics = greenweave::run(|| {
        // Until a sleep parked: one whose time was up first (as under qemu) only yields.
        sleep_until_one_parks(0);
        metrics()
    });
    assert!(delay_samples(&metrics, 0) >= 1);
}

#[test]
fn a_busy_ready_queue_is_sampled_for_scheduling_delay() {
    let metrics = greenweave::run(|| {
        let yielders: Vec<_> = (0..4)
            .map(|_| {
                greenweave::spawn(|| {
                    for _ in 0..500 {
                        greenweave::thread::yield_now();
                    }
                })
            })
            .collect();
        for yielder in yielders {
            yielder.join().unwrap();
        }
        metrics()
    });
    // 2000 runs of a queue four deep: a busy queue is polled every 61 runs, and every 8th of
    // those polls starts a sample.
    let samples = delay_samples(&metrics, 0);
    assert!(samples >= 2000 / (61 * 8), "{samples} samples");
}

#[cfg(feature = "hooks")]
#[test]
fn parks_made_by_the_hooks_are_counted_by_reason_too() {
    let metrics = greenweave::run(|| {
        // libc's nanosleep, made green: a Sleep park. A sleep whose time is up before it
        // could park returns without one (under qemu or Valgrind, the first pass through the
        // hook's code can take longer than a millisecond); each try sleeps longer, and the
        // tries stop at the first park, so exactly one is counted.
        sleep_until_one_parks_with(0, std::thread::sleep);
        // A std Mutex held across a yield: the other green thread's lock waits in a futex,
        // made green: a Futex park.
        let lock = std::sync::Arc::new(std::sync::Mutex::new(0));
        let held = lock.lock().unwrap();
        let contender = {
            let lock = lock.clone();
            greenweave::spawn(move || *lock.lock().unwrap() += 1)
        };
        greenweave::thread::yield_now();
        drop(held);
        contender.join().unwrap();
        assert_eq!(*lock.lock().unwrap(), 1);
        metrics()
    });
    assert_eq!(metrics.worker_green_park_count(0, ParkReason::Sleep), 1);
    assert_eq!(metrics.worker_green_park_count(0, ParkReason::Futex), 1);
}

#[test]
fn the_debug_form_of_the_metrics_shows_what_a_log_line_needs() {
    let metrics = greenweave::run(|| {
        greenweave::thread::sleep(std::time::Duration::from_millis(1));
        greenweave::spawn(|| ()).join().unwrap();
        greenweave::runtime::metrics()
    });
    let shown = format!("{metrics:?}");
    for field in [
        "num_workers: 1",
        "num_alive_tasks",
        "spawned_tasks_count",
        "worker_poll_count",
        "worker_yield_count",
        "worker_park_count",
        "green_park_counts: {",
        "Sleep: 1",
        "Join: 1",
        "worker_local_queue_depth",
        "budget_forced_yield_count",
        "worker_io_poll_count",
        "io_driver_ready_count",
        "num_blocking_threads",
        "num_idle_blocking_threads",
        "blocking_queue_depth",
    ] {
        assert!(shown.contains(field), "no {field:?} in {shown}");
    }
}
