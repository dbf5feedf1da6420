//! Checks that sleepers woke in the order of their deadlines when only bounds on each
//! deadline are known, so that the check holds however slow the machine (Valgrind, qemu, the
//! race detector of `.ci/chaos`).
//!
//! A sleeper records `Instant::now()` just before it sleeps; the sleep reads the clock itself a
//! moment later. Sleepers on one scheduler start one at a time, each only once the one before
//! has parked, so a sleeper's real deadline lies between its own record + its duration and the
//! next sleeper's record + its duration (no upper bound for the last one to start).

use std::time::{Duration, Instant};

/// `started`: each sleeper's name, sleep and record, in the order they started. `woke`: the
/// names in the order the sleeps ended. Panics if one woke before another whose deadline was
/// surely earlier, or if the names differ.
pub fn assert_woke_in_deadline_order(started: &[(u64, Duration, Instant)], woke: &[u64]) {
    let mut names: Vec<u64> = started.iter().map(|&(name, ..)| name).collect();
    let mut woken = woke.to_vec();
    names.sort_unstable();
    woken.sort_unstable();
    assert_eq!(names, woken, "every sleeper wakes once");
    // (earliest, latest) possible deadline of each sleeper.
    let bounds = |name: u64| {
        let i = started.iter().position(|&(n, ..)| n == name).unwrap();
        let (_, duration, before) = started[i];
        let next = started.get(i + 1).map(|&(_, _, next)| next + duration);
        (before + duration, next)
    };
    for (i, &earlier) in woke.iter().enumerate() {
        for &later in &woke[i + 1..] {
            let (earliest, _) = bounds(earlier);
            let (_, latest) = bounds(later);
            assert!(
                latest.is_none_or(|latest| earliest <= latest),
                "sleeper {earlier} woke before sleeper {later}, whose deadline was surely \
                 earlier; woke in order {woke:?}"
            );
        }
    }
}
