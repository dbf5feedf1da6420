//! The other direction: async code awaits green threads. `JoinHandle` and `RemoteJoinHandle`
//! are futures, and `Runtime::start` runs a runtime on OS threads of its own, onto which any
//! thread spawns green threads and awaits them without blocking.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::Duration;

use greenweave::{Runtime, block_on, thread};

#[test]
fn a_join_handle_awaited_before_its_green_thread_ends_wakes_with_its_result() {
    greenweave::run(|| {
        let events = Rc::new(RefCell::new(Vec::new()));
        let worker = {
            let events = events.clone();
            greenweave::spawn(move || {
                // Runs only once the awaiting green thread has parked.
                events.borrow_mut().push("worker ran");
                21
            })
        };
        let doubled = block_on(async {
            events.borrow_mut().push("awaiting");
            worker.await.unwrap() * 2
        });
        events.borrow_mut().push("awaited");
        assert_eq!(doubled, 42);
        assert_eq!(*events.borrow(), ["awaiting", "worker ran", "awaited"]);
    });
}

#[test]
fn an_awaited_join_handle_gives_the_panic_and_the_cancellation() {
    greenweave::run(|| {
        let panics = greenweave::spawn(|| -> u32 { panic!("boom") });
        let error = block_on(panics).unwrap_err();
        assert_eq!(error.panic_message(), Some("boom"));
        let sleeper = greenweave::spawn(|| thread::sleep(Duration::from_secs(3600)));
        thread::yield_now();
        sleeper.cancel();
        assert!(block_on(sleeper).unwrap_err().is_cancelled());
    });
}

#[test]
fn a_green_thread_awaiting_its_own_handle_names_the_mistake() {
    greenweave::run(|| {
        let slot: Rc<RefCell<Option<thread::JoinHandle<()>>>> = Rc::new(RefCell::new(None));
        let (sender, receiver) = greenweave::sync::mpsc::channel::<String>();
        let selfish = {
            let slot = slot.clone();
            greenweave::spawn(move || {
                thread::yield_now();
                let own = slot.borrow_mut().take().unwrap();
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    block_on(own).unwrap();
                }));
                let message = outcome.unwrap_err();
                sender
                    .send(message.downcast_ref::<&str>().unwrap().to_string())
                    .unwrap();
            })
        };
        let id = selfish.thread().id();
        *slot.borrow_mut() = Some(selfish);
        let message = receiver.recv().unwrap();
        assert!(
            message.contains("cannot await its own JoinHandle"),
            "{message} ({id:?})"
        );
    });
}

#[test]
fn a_remote_join_handle_is_awaited_on_a_plain_os_thread_without_a_runtime_there() {
    let runtime = Runtime::builder()
        .workers(2)
        .build()
        .unwrap()
        .start()
        .unwrap();
    assert_eq!(runtime.workers(), 2);
    let handles: Vec<_> = (0..6)
        .map(|i| runtime.spawn(move || (i, greenweave::runtime::current_worker())))
        .collect();
    let placed: Vec<_> = handles.into_iter().map(|h| block_on(h).unwrap()).collect();
    assert_eq!(placed, [(0, 0), (1, 1), (2, 0), (3, 1), (4, 0), (5, 1)]);
    runtime.shutdown();
}

#[test]
fn a_tokio_task_awaits_a_green_thread_while_other_tokio_tasks_run() {
    let greenweave = Runtime::builder().build().unwrap().start().unwrap();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (release, released) = mpsc::channel::<()>();
    // The green thread waits until a second tokio task, on the same single tokio thread, has
    // run: were the first task's await blocking that thread, the second could never run.
    let green = greenweave.spawn(move || {
        greenweave::unblock(move || released.recv().unwrap());
        "green done"
    });
    let outcome = tokio.block_on(async move {
        let awaiting = tokio::spawn(async move { green.await.unwrap() });
        let other = tokio::spawn(async move {
            release.send(()).unwrap();
            "other ran"
        });
        (other.await.unwrap(), awaiting.await.unwrap())
    });
    assert_eq!(outcome, ("other ran", "green done"));
    greenweave.shutdown();
}

#[test]
fn shutting_a_started_runtime_down_cancels_its_green_threads() {
    let runtime = Runtime::builder().build().unwrap().start().unwrap();
    let (started, is_started) = mpsc::channel();
    let sleeper = runtime.spawn(move || {
        started.send(()).unwrap();
        thread::sleep(Duration::from_secs(3600));
    });
    is_started.recv().unwrap();
    runtime.shutdown();
    assert!(sleeper.join().unwrap_err().is_cancelled());
}

#[test]
fn spawning_on_a_worker_that_does_not_exist_says_how_many_there_are() {
    let runtime = Runtime::builder()
        .workers(2)
        .build()
        .unwrap()
        .start()
        .unwrap();
    let error = runtime.spawn_on(5, || ()).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("2 workers"), "{error}");
}
