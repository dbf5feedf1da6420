//! Waiting on a green lock allocates nothing once its queue has grown: a wait's entry lives
//! in a slot the queue reuses, not in a heap allocation of its own.
//!
//! This binary counts the heap allocations made on each OS thread (its own global allocator),
//! so it is kept apart from the other tests.
//!
//! In the compaction checking mode (`--cfg greenweave_compact_check`, `.ci/run`) every park is
//! compacted at once, and a compaction puts the parked frames in a heap buffer: there the
//! counts are printed, not asserted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::rc::Rc;

use greenweave::sync::{Condvar, Mutex};
use greenweave::thread;

/// The system allocator, counting the allocations made on each OS thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: the count is gone once the thread's locals are being destroyed.
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every call is passed on to the system allocator unchanged; counting touches only a
// const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Two green threads take turns with `mutex`, each holding it across a yield, so that every
/// `lock` but the first waits for the other to hand it over; `rounds` turns each.
fn take_turns(mutex: &Rc<Mutex<u64>>, rounds: u64) -> thread::JoinHandle<()> {
    let other = {
        let mutex = mutex.clone();
        greenweave::spawn(move || {
            for _ in 0..rounds {
                let mut guard = mutex.lock().unwrap();
                *guard += 1;
                thread::yield_now();
            }
        })
    };
    for _ in 0..rounds {
        let mut guard = mutex.lock().unwrap();
        *guard += 1;
        thread::yield_now();
    }
    other
}

#[test]
fn waiting_for_a_contended_mutex_allocates_nothing_once_warm() {
    greenweave::run(|| {
        let mutex = Rc::new(Mutex::new(0));
        take_turns(&mutex, 100).join().unwrap();
        let before = allocations();
        let other = take_turns(&mutex, 1_000);
        let during = allocations() - before;
        other.join().unwrap();
        assert_eq!(*mutex.lock().unwrap(), 2_200);
        // The spawn of the other green thread may allocate (its task is usually reused); the
        // 2,000 waits must not.
        if !cfg!(greenweave_compact_check) {
            assert!(during <= 2, "{during} allocations for 2,000 waits");
        }
    });
}

#[test]
fn waiting_on_a_condvar_behind_another_waiter_allocates_nothing_once_warm() {
    greenweave::run(|| {
        let pair = Rc::new((Mutex::new(0u64), Condvar::new()));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let pair = pair.clone();
                greenweave::spawn(move || {
                    let (mutex, condvar) = &*pair;
                    let mut guard = mutex.lock().unwrap();
                    while *guard < 2_000 {
                        guard = condvar.wait(guard).unwrap();
                    }
                })
            })
            .collect();
        let (mutex, condvar) = &*pair;
        let mut before = 0;
        for round in 1..=2_000 {
            if round == 100 {
                before = allocations();
            }
            thread::yield_now(); // every waiter is queued again
            *mutex.lock().unwrap() = round;
            condvar.notify_one();
        }
        let during = allocations() - before;
        condvar.notify_all();
        for waiter in waiters {
            waiter.join().unwrap();
        }
        if cfg!(greenweave_compact_check) {
            println!("{during} allocations for 1,900 notified waits, compacted at each park");
        } else {
            assert_eq!(during, 0, "{during} allocations for 1,900 notified waits");
        }
    });
}
