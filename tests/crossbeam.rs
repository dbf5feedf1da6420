//! Tests ported from crossbeam-channel's own (github.com/crossbeam-rs/crossbeam, directory
//! crossbeam-channel/tests), for the part of crossbeam's surface greenweave has: `len`,
//! `is_empty`, `is_full` and `capacity` (from `zero.rs`, `array.rs`, `list.rs`), `Select::ready`,
//! `try_ready` and `ready_timeout` (`ready.rs`), the timer channels (`after.rs`, `tick.rs`,
//! `never.rs`), and a select's send meeting a receive that does not park (`select_macro.rs`).
//!
//! Each test keeps crossbeam's name, in a module named after crossbeam's file; the channel
//! tests run once per channel kind (`mpsc::…` and `shared::…`). What changed in the port:
//! crossbeam's OS threads are green threads of one runtime (`greenweave::thread::scope`),
//! except in `shared_across_os_threads`, whose ends live on different OS threads; crossbeam's
//! `unbounded`/`bounded` are `channel`/`sync_channel`; most durations are shorter; crossbeam's
//! upper bounds on elapsed time are left out (these tests pin behaviour, not speed), and where
//! crossbeam assumes a sleep is never late, the checks allow for a late look (a wide margin,
//! or `timers::try_recv_around`), so that a loaded machine does not fail them. The tests of
//! what greenweave does not have (`send_timeout`, `same_channel`, a `never` channel of any
//! message type) are left out.

use std::time::{Duration, Instant};

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The channel tests, for one channel kind (`mpsc` or `shared`, whose API is the same).
macro_rules! channel_kind {
    ($kind:ident) => {
        mod $kind {
            pub(super) use super::{Instant, ms};
            pub(super) use greenweave::select;
            pub(super) use greenweave::sync::select::Select;
            pub(super) use greenweave::sync::$kind::{
                RecvError, TryRecvError, TrySendError, channel as unbounded,
                sync_channel as bounded,
            };
            pub(super) use greenweave::thread::{scope, sleep};

            /// crossbeam-channel/tests/zero.rs
            mod zero {
                use super::*;

                #[test]
                fn capacity() {
                    let (s, r) = bounded::<()>(0);
                    assert_eq!(s.capacity(), Some(0));
                    assert_eq!(r.capacity(), Some(0));
                }

                #[test]
                fn len_empty_full() {
                    greenweave::run(|| {
                        let (s, r) = bounded(0);

                        assert_eq!(s.len(), 0);
                        assert!(s.is_empty());
                        assert!(s.is_full());
                        assert_eq!(r.len(), 0);
                        assert!(r.is_empty());
                        assert!(r.is_full());

                        scope(|scope| {
                            scope.spawn(|| s.send(0).unwrap());
                            scope.spawn(|| r.recv().unwrap());
                        });

                        assert_eq!(s.len(), 0);
                        assert!(s.is_empty());
                        assert!(s.is_full());
                        assert_eq!(r.len(), 0);
                        assert!(r.is_empty());
                        assert!(r.is_full());
                    });
                }

                #[test]
                fn len() {
                    const COUNT: usize = 2_000;
                    greenweave::run(|| {
                        let (s, r) = bounded(0);

                        assert_eq!(s.len(), 0);
                        assert_eq!(r.len(), 0);

                        scope(|scope| {
                            scope.spawn(|| {
                                for i in 0..COUNT {
                                    assert_eq!(r.recv(), Ok(i));
                                    assert_eq!(r.len(), 0);
                                }
                            });
                            scope.spawn(|| {
                                for i in 0..COUNT {
                                    s.send(i).unwrap();
                                    // A sender waiting with its message does not make it stored.
                                    assert_eq!(s.len(), 0);
                                }
                            });
                        });

                        assert_eq!(s.len(), 0);
                        assert_eq!(r.len(), 0);
                    });
                }
            }

            /// crossbeam-channel/tests/array.rs
            mod array {
                use super::*;

                #[test]
                fn capacity() {
                    for i in 1..10 {
                        let (s, r) = bounded::<()>(i);
                        assert_eq!(s.capacity(), Some(i));
                        assert_eq!(r.capacity(), Some(i));
                    }
                }

                #[test]
                fn len_empty_full() {
                    greenweave::run(|| {
                        let (s, r) = bounded(2);

                        assert_eq!(s.len(), 0);
                        assert!(s.is_empty());
                        assert!(!s.is_full());
                        assert_eq!(r.len(), 0);
                        assert!(r.is_empty());
                        assert!(!r.is_full());

                        s.send(()).unwrap();

                        assert_eq!(s.len(), 1);
                        assert!(!s.is_empty());
                        assert!(!s.is_full());
                        assert_eq!(r.len(), 1);
                        assert!(!r.is_empty());
                        assert!(!r.is_full());

                        s.send(()).unwrap();

                        assert_eq!(s.len(), 2);
                        assert!(!s.is_empty());
                        assert!(s.is_full());
                        assert_eq!(r.len(), 2);
                        assert!(!r.is_empty());
                        assert!(r.is_full());

                        r.recv().unwrap();

                        assert_eq!(s.len(), 1);
                        assert!(!s.is_empty());
                        assert!(!s.is_full());
                        assert_eq!(r.len(), 1);
                        assert!(!r.is_empty());
                        assert!(!r.is_full());
                    });
                }

                #[test]
                fn len() {
                    const COUNT: usize = 2_000;
                    const CAP: usize = 50;
                    greenweave::run(|| {
                        let (s, r) = bounded(CAP);

                        assert_eq!(s.len(), 0);
                        assert_eq!(r.len(), 0);

                        for _ in 0..CAP / 10 {
                            for i in 0..50 {
                                s.send(i).unwrap();
                                assert_eq!(s.len(), i + 1);
                            }
                            for i in 0..50 {
                                r.recv().unwrap();
                                assert_eq!(r.len(), 50 - i - 1);
                            }
                        }

                        assert_eq!(s.len(), 0);
                        assert_eq!(r.len(), 0);

                        for i in 0..CAP {
                            s.send(i).unwrap();
                            assert_eq!(s.len(), i + 1);
                        }
                        for _ in 0..CAP {
                            r.recv().unwrap();
                        }

                        assert_eq!(s.len(), 0);
                        assert_eq!(r.len(), 0);

                        scope(|scope| {
                            scope.spawn(|| {
                                for i in 0..COUNT {
                                    assert_eq!(r.recv(), Ok(i));
                                    let len = r.len();
                                    assert!(len <= CAP);
                                }
                            });
                            scope.spawn(|| {
                                for i in 0..COUNT {
                                    s.send(i).unwrap();
                                    let len = s.len();
                                    assert!(len <= CAP);
                                }
                            });
                        });

                        assert_eq!(s.len(), 0);
                        assert_eq!(r.len(), 0);
                    });
                }
            }

            /// crossbeam-channel/tests/list.rs
            mod list {
                use super::*;

                #[test]
                fn capacity() {
                    let (s, r) = unbounded::<()>();
                    assert_eq!(s.capacity(), None);
                    assert_eq!(r.capacity(), None);
                }

                #[test]
                fn len_empty_full() {
                    greenweave::run(|| {
                        let (s, r) = unbounded();

                        assert_eq!(s.len(), 0);
                        assert!(s.is_empty());
                        assert!(!s.is_full());
                        assert_eq!(r.len(), 0);
                        assert!(r.is_empty());
                        assert!(!r.is_full());

                        s.send(()).unwrap();

                        assert_eq!(s.len(), 1);
                        assert!(!s.is_empty());
                        assert!(!s.is_full());
                        assert_eq!(r.len(), 1);
                        assert!(!r.is_empty());
                        assert!(!r.is_full());

                        r.recv().unwrap();

                        assert_eq!(s.len(), 0);
                        assert!(s.is_empty());
                        assert!(!s.is_full());
                        assert_eq!(r.len(), 0);
                        assert!(r.is_empty());
                        assert!(!r.is_full());
                    });
                }

                #[test]
                fn len() {
                    const COUNT: usize = 2_000;
                    greenweave::run(|| {
                        let (s, r) = unbounded();

                        assert_eq!(s.len(), 0);
                        assert_eq!(r.len(), 0);

                        for i in 0..50 {
                            s.send(i).unwrap();
                            assert_eq!(s.len(), i + 1);
                        }
                        for i in 0..50 {
                            r.recv().unwrap();
                            assert_eq!(r.len(), 50 - i - 1);
                        }

                        scope(|scope| {
                            scope.spawn(|| {
                                for i in 0..COUNT {
                                    assert_eq!(r.recv(), Ok(i));
                                }
                            });
                            scope.spawn(|| {
                                for i in 0..COUNT {
                                    s.send(i).unwrap();
                                }
                            });
                        });

                        assert_eq!(s.len(), 0);
                        assert_eq!(r.len(), 0);
                    });
                }
            }

            /// crossbeam-channel/tests/select_macro.rs
            mod select_macro {
                use super::*;

                /// Issue 25, item 3: a select parked waiting to send on a rendezvous channel
                /// meets a receive that does not park (here `select!` with `default`).
                #[test]
                fn try_recv() {
                    greenweave::run(|| {
                        let (s, r) = bounded(0);

                        scope(|scope| {
                            scope.spawn(move || {
                                select! {
                                    recv(r) -> _ => panic!(),
                                    default => {}
                                }
                                sleep(ms(100));
                                select! {
                                    recv(r) -> v => assert_eq!(v, Ok(7)),
                                    default => panic!(),
                                }
                                sleep(ms(10));
                                select! {
                                    recv(r) -> v => assert_eq!(v, Err(RecvError)),
                                    default => panic!(),
                                }
                            });
                            scope.spawn(move || {
                                sleep(ms(20));
                                select! {
                                    send(s, 7) -> res => res.unwrap(),
                                }
                            });
                        });
                    });
                }
            }

            /// crossbeam-channel/tests/ready.rs
            mod ready {
                use super::*;

                #[test]
                fn smoke1() {
                    greenweave::run(|| {
                        let (s1, r1) = unbounded::<usize>();
                        let (s2, r2) = unbounded::<usize>();

                        s1.send(1).unwrap();

                        let mut sel = Select::new();
                        sel.recv(&r1);
                        sel.recv(&r2);
                        assert_eq!(sel.ready(), 0);
                        assert_eq!(r1.try_recv(), Ok(1));

                        s2.send(2).unwrap();

                        let mut sel = Select::new();
                        sel.recv(&r1);
                        sel.recv(&r2);
                        assert_eq!(sel.ready(), 1);
                        assert_eq!(r2.try_recv(), Ok(2));
                    });
                }

                #[test]
                fn smoke2() {
                    greenweave::run(|| {
                        let (_s1, r1) = unbounded::<i32>();
                        let (_s2, r2) = unbounded::<i32>();
                        let (_s3, r3) = unbounded::<i32>();
                        let (_s4, r4) = unbounded::<i32>();
                        let (s5, r5) = unbounded::<i32>();

                        s5.send(5).unwrap();

                        let mut sel = Select::new();
                        sel.recv(&r1);
                        sel.recv(&r2);
                        sel.recv(&r3);
                        sel.recv(&r4);
                        sel.recv(&r5);
                        assert_eq!(sel.ready(), 4);
                        assert_eq!(r5.try_recv(), Ok(5));
                    });
                }

                #[test]
                fn disconnected() {
                    greenweave::run(|| {
                        let (s1, r1) = unbounded::<i32>();
                        let (s2, r2) = unbounded::<i32>();

                        scope(|scope| {
                            scope.spawn(|| {
                                drop(s1);
                                sleep(ms(10));
                                s2.send(5).unwrap();
                            });

                            let mut sel = Select::new();
                            sel.recv(&r1);
                            sel.recv(&r2);
                            match sel.ready_timeout(ms(1000)) {
                                Ok(0) => {
                                    assert_eq!(r1.try_recv(), Err(TryRecvError::Disconnected))
                                }
                                _ => panic!(),
                            }

                            r2.recv().unwrap();
                        });

                        let mut sel = Select::new();
                        sel.recv(&r1);
                        sel.recv(&r2);
                        match sel.ready_timeout(ms(1000)) {
                            Ok(0) => assert_eq!(r1.try_recv(), Err(TryRecvError::Disconnected)),
                            _ => panic!(),
                        }

                        scope(|scope| {
                            scope.spawn(|| {
                                sleep(ms(10));
                                drop(s2);
                            });

                            let mut sel = Select::new();
                            sel.recv(&r2);
                            match sel.ready_timeout(ms(1000)) {
                                Ok(0) => {
                                    assert_eq!(r2.try_recv(), Err(TryRecvError::Disconnected))
                                }
                                _ => panic!(),
                            }
                        });
                    });
                }

                #[test]
                fn default() {
                    greenweave::run(|| {
                        let (s1, r1) = unbounded::<i32>();
                        let (s2, r2) = unbounded::<i32>();

                        let mut sel = Select::new();
                        sel.recv(&r1);
                        sel.recv(&r2);
                        assert!(sel.try_ready().is_err());

                        drop(s1);

                        let mut sel = Select::new();
                        sel.recv(&r1);
                        sel.recv(&r2);
                        match sel.try_ready() {
                            Ok(0) => assert!(r1.try_recv().is_err()),
                            _ => panic!(),
                        }

                        s2.send(2).unwrap();

                        let mut sel = Select::new();
                        sel.recv(&r2);
                        match sel.try_ready() {
                            Ok(0) => assert_eq!(r2.try_recv(), Ok(2)),
                            _ => panic!(),
                        }

                        let mut sel = Select::new();
                        sel.recv(&r2);
                        assert!(sel.try_ready().is_err());

                        let mut sel = Select::new();
                        assert!(sel.try_ready().is_err());
                    });
                }

                #[test]
                fn timeout() {
                    greenweave::run(|| {
                        let (_s1, r1) = unbounded::<i32>();
                        let (s2, r2) = unbounded::<i32>();

                        scope(|scope| {
                            scope.spawn(|| {
                                sleep(ms(30));
                                s2.send(2).unwrap();
                            });

                            let mut sel = Select::new();
                            sel.recv(&r1);
                            sel.recv(&r2);
                            assert!(sel.ready_timeout(ms(20)).is_err());

                            let mut sel = Select::new();
                            sel.recv(&r1);
                            sel.recv(&r2);
                            match sel.ready_timeout(ms(1000)) {
                                Ok(1) => assert_eq!(r2.try_recv(), Ok(2)),
                                _ => panic!(),
                            }
                        });

                        scope(|scope| {
                            let (s, r) = unbounded::<i32>();

                            let dropper = scope.spawn(move || {
                                sleep(ms(10));
                                drop(s);
                            });

                            let mut sel = Select::new();
                            assert!(sel.ready_timeout(ms(20)).is_err());
                            // Not in crossbeam's test, which counts on the 20 ms outlasting
                            // the 10 (not so when the dropper starts late, as under Valgrind).
                            dropper.join().unwrap();

                            let mut sel = Select::new();
                            sel.recv(&r);
                            match sel.try_ready() {
                                Ok(0) => assert_eq!(r.try_recv(), Err(TryRecvError::Disconnected)),
                                _ => panic!(),
                            }
                        });
                    });
                }

                #[test]
                fn default_when_disconnected() {
                    greenweave::run(|| {
                        let (_, r) = unbounded::<i32>();

                        let mut sel = Select::new();
                        sel.recv(&r);
                        match sel.try_ready() {
                            Ok(0) => assert_eq!(r.try_recv(), Err(TryRecvError::Disconnected)),
                            _ => panic!(),
                        }

                        let (_, r) = unbounded::<i32>();

                        let mut sel = Select::new();
                        sel.recv(&r);
                        match sel.ready_timeout(ms(1000)) {
                            Ok(0) => assert_eq!(r.try_recv(), Err(TryRecvError::Disconnected)),
                            _ => panic!(),
                        }

                        let (s, _) = bounded::<i32>(0);

                        let mut sel = Select::new();
                        sel.send(&s);
                        match sel.try_ready() {
                            Ok(0) => assert_eq!(s.try_send(0), Err(TrySendError::Disconnected(0))),
                            _ => panic!(),
                        }

                        let (s, _) = bounded::<i32>(0);

                        let mut sel = Select::new();
                        sel.send(&s);
                        match sel.ready_timeout(ms(1000)) {
                            Ok(0) => assert_eq!(s.try_send(0), Err(TrySendError::Disconnected(0))),
                            _ => panic!(),
                        }
                    });
                }

                #[test]
                fn default_only() {
                    greenweave::run(|| {
                        let mut sel = Select::new();
                        assert!(sel.try_ready().is_err());

                        let start = Instant::now();
                        let mut sel = Select::new();
                        assert!(sel.ready_timeout(ms(20)).is_err());
                        assert!(start.elapsed() >= ms(20));
                    });
                }

                #[test]
                fn unblocks() {
                    greenweave::run(|| {
                        let (s1, r1) = bounded::<i32>(0);
                        let (s2, r2) = bounded::<i32>(0);

                        scope(|scope| {
                            scope.spawn(|| {
                                sleep(ms(10));
                                s2.send(2).unwrap();
                            });

                            let mut sel = Select::new();
                            sel.recv(&r1);
                            sel.recv(&r2);
                            match sel.ready_timeout(ms(1000)) {
                                Ok(1) => assert_eq!(r2.try_recv(), Ok(2)),
                                _ => panic!(),
                            }
                        });

                        scope(|scope| {
                            scope.spawn(|| {
                                sleep(ms(10));
                                assert_eq!(r1.recv().unwrap(), 1);
                            });

                            let mut sel = Select::new();
                            let oper1 = sel.send(&s1);
                            let oper2 = sel.send(&s2);
                            let oper = sel.select_timeout(ms(1000));
                            match oper {
                                Err(_) => panic!(),
                                Ok(oper) => match oper.index() {
                                    i if i == oper1 => oper.send(&s1, 1).unwrap(),
                                    i if i == oper2 => panic!(),
                                    _ => unreachable!(),
                                },
                            }
                        });
                    });
                }

                #[test]
                fn both_ready() {
                    greenweave::run(|| {
                        let (s1, r1) = bounded(0);
                        let (s2, r2) = bounded(0);

                        scope(|scope| {
                            scope.spawn(|| {
                                sleep(ms(10));
                                s1.send(1).unwrap();
                                assert_eq!(r2.recv().unwrap(), 2);
                            });

                            for _ in 0..2 {
                                let mut sel = Select::new();
                                sel.recv(&r1);
                                sel.send(&s2);
                                match sel.ready() {
                                    0 => assert_eq!(r1.try_recv(), Ok(1)),
                                    1 => s2.try_send(2).unwrap(),
                                    _ => panic!(),
                                }
                            }
                        });
                    });
                }

                #[test]
                fn preflight1() {
                    greenweave::run(|| {
                        let (s, r) = unbounded();
                        s.send(()).unwrap();

                        let mut sel = Select::new();
                        sel.recv(&r);
                        match sel.ready() {
                            0 => drop(r.try_recv()),
                            _ => panic!(),
                        }
                    });
                }

                #[test]
                fn preflight2() {
                    greenweave::run(|| {
                        let (s, r) = unbounded();
                        drop(s.clone());
                        s.send(()).unwrap();
                        drop(s);

                        let mut sel = Select::new();
                        sel.recv(&r);
                        match sel.ready() {
                            0 => assert_eq!(r.try_recv(), Ok(())),
                            _ => panic!(),
                        }

                        assert_eq!(r.try_recv(), Err(TryRecvError::Disconnected));
                    });
                }

                #[test]
                fn preflight3() {
                    greenweave::run(|| {
                        let (s, r) = unbounded();
                        drop(s.clone());
                        s.send(()).unwrap();
                        drop(s);
                        r.recv().unwrap();

                        let mut sel = Select::new();
                        sel.recv(&r);
                        match sel.ready() {
                            0 => assert_eq!(r.try_recv(), Err(TryRecvError::Disconnected)),
                            _ => panic!(),
                        }
                    });
                }

                #[test]
                fn duplicate_operations() {
                    greenweave::run(|| {
                        let (s, r) = unbounded::<i32>();
                        let mut hit = [false; 4];

                        while hit.iter().any(|hit| !hit) {
                            let mut sel = Select::new();
                            sel.recv(&r);
                            sel.recv(&r);
                            sel.send(&s);
                            sel.send(&s);
                            let index = sel.ready();
                            match index {
                                0 | 1 => assert!(r.try_recv().is_ok()),
                                2 | 3 => assert!(s.send(0).is_ok()),
                                _ => panic!(),
                            }
                            hit[index] = true;
                        }
                    });
                }

                #[test]
                fn nesting() {
                    greenweave::run(|| {
                        let (s, r) = unbounded::<i32>();

                        let mut sel = Select::new();
                        sel.send(&s);
                        assert_eq!(sel.ready(), 0);
                        assert!(s.send(0).is_ok());

                        let mut sel = Select::new();
                        sel.recv(&r);
                        assert_eq!(sel.ready(), 0);
                        assert_eq!(r.try_recv(), Ok(0));

                        let mut sel = Select::new();
                        sel.send(&s);
                        assert_eq!(sel.ready(), 0);
                        assert!(s.send(1).is_ok());

                        let mut sel = Select::new();
                        sel.recv(&r);
                        assert_eq!(sel.ready(), 0);
                        assert_eq!(r.try_recv(), Ok(1));
                    });
                }

                #[test]
                fn stress_recv() {
                    const COUNT: usize = 1_000;
                    greenweave::run(|| {
                        let (s1, r1) = unbounded();
                        let (s2, r2) = bounded(5);
                        let (s3, r3) = bounded(0);

                        scope(|scope| {
                            scope.spawn(|| {
                                for i in 0..COUNT {
                                    s1.send(i).unwrap();
                                    r3.recv().unwrap();

                                    s2.send(i).unwrap();
                                    r3.recv().unwrap();
                                }
                            });

                            for i in 0..COUNT {
                                for _ in 0..2 {
                                    let mut sel = Select::new();
                                    sel.recv(&r1);
                                    sel.recv(&r2);
                                    match sel.ready() {
                                        0 => assert_eq!(r1.try_recv(), Ok(i)),
                                        1 => assert_eq!(r2.try_recv(), Ok(i)),
                                        _ => panic!(),
                                    }

                                    s3.send(()).unwrap();
                                }
                            }
                        });
                    });
                }

                #[test]
                fn stress_send() {
                    const COUNT: usize = 1_000;
                    greenweave::run(|| {
                        let (s1, r1) = bounded(0);
                        let (s2, r2) = bounded(0);
                        let (s3, r3) = bounded(100);

                        scope(|scope| {
                            scope.spawn(|| {
                                for i in 0..COUNT {
                                    assert_eq!(r1.recv().unwrap(), i);
                                    assert_eq!(r2.recv().unwrap(), i);
                                    r3.recv().unwrap();
                                }
                            });

                            for i in 0..COUNT {
                                for _ in 0..2 {
                                    let mut sel = Select::new();
                                    sel.send(&s1);
                                    sel.send(&s2);
                                    match sel.ready() {
                                        0 => assert!(s1.try_send(i).is_ok()),
                                        1 => assert!(s2.try_send(i).is_ok()),
                                        _ => panic!(),
                                    }
                                }
                                s3.send(()).unwrap();
                            }
                        });
                    });
                }

                #[test]
                fn stress_mixed() {
                    const COUNT: usize = 1_000;
                    greenweave::run(|| {
                        let (s1, r1) = bounded(0);
                        let (s2, r2) = bounded(0);
                        let (s3, r3) = bounded(100);

                        scope(|scope| {
                            scope.spawn(|| {
                                for i in 0..COUNT {
                                    s1.send(i).unwrap();
                                    assert_eq!(r2.recv().unwrap(), i);
                                    r3.recv().unwrap();
                                }
                            });

                            for i in 0..COUNT {
                                for _ in 0..2 {
                                    let mut sel = Select::new();
                                    sel.recv(&r1);
                                    sel.send(&s2);
                                    match sel.ready() {
                                        0 => assert_eq!(r1.try_recv(), Ok(i)),
                                        1 => assert!(s2.try_send(i).is_ok()),
                                        _ => panic!(),
                                    }
                                }
                                s3.send(()).unwrap();
                            }
                        });
                    });
                }

                #[test]
                fn send_recv_same_channel() {
                    greenweave::run(|| {
                        let (s, r) = bounded::<i32>(0);
                        let mut sel = Select::new();
                        sel.send(&s);
                        sel.recv(&r);
                        assert!(sel.ready_timeout(ms(10)).is_err());

                        let (s, r) = unbounded::<i32>();
                        let mut sel = Select::new();
                        sel.send(&s);
                        sel.recv(&r);
                        match sel.ready_timeout(ms(10)) {
                            Err(_) => panic!(),
                            Ok(0) => assert!(s.send(0).is_ok()),
                            Ok(_) => panic!(),
                        }
                    });
                }
            }
        }
    };
}

channel_kind!(mpsc);
channel_kind!(shared);

/// The timer channels' tests, in a green thread: their waits park on the scheduler's timer.
mod timers {
    pub(super) use super::{Instant, ms};
    pub(super) use greenweave::select;
    pub(super) use greenweave::sync::select::Select;
    pub(super) use greenweave::sync::timer_channel::{Receiver, at};
    pub(super) use greenweave::sync::timer_channel::{TryRecvError, after, never, tick};
    pub(super) use greenweave::thread::{scope, sleep};
    pub(super) use std::cell::{Cell, RefCell};
    pub(super) use std::ops::RangeInclusive;

    /// `r.try_recv()`, checked against `due`, the instants the message may be due at (known up
    /// to the moments around its creation): it must be there if it was due before the call, and
    /// must not if it is due after the call returned; in between, either is right. crossbeam's
    /// own tests sleep and assume a sleep is never late, which a loaded machine breaks.
    pub(super) fn try_recv_around(
        r: &Receiver,
        due: RangeInclusive<Instant>,
    ) -> Result<Instant, TryRecvError> {
        let before = Instant::now();
        let got = r.try_recv();
        let after = Instant::now();
        if before >= *due.end() {
            assert!(got.is_ok(), "due by {:?}, not received", due.end());
        }
        if after < *due.start() {
            assert!(got.is_err(), "received before {:?}", due.start());
        }
        if let Ok(fired) = got {
            assert!(due.contains(&fired), "{fired:?} is not in {due:?}");
        }
        got
    }

    /// Calls `make` and returns what it made with the moments around the call.
    pub(super) fn timed<T>(make: impl FnOnce() -> T) -> (Instant, T, Instant) {
        let before = Instant::now();
        let made = make();
        (before, made, Instant::now())
    }

    /// crossbeam-channel/tests/after.rs
    mod after {
        use super::*;

        #[test]
        fn fire() {
            greenweave::run(|| {
                let start = Instant::now();
                let r = after(ms(100));

                assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
                sleep(ms(120));

                let fired = r.try_recv().unwrap();
                assert!(start < fired);
                assert!(fired - start >= ms(100));

                let now = Instant::now();
                assert!(fired < now);
                assert!(now - fired >= ms(20));

                assert_eq!(r.try_recv(), Err(TryRecvError::Empty));

                select! {
                    recv(r) -> _ => panic!(),
                    default => {}
                }

                select! {
                    recv(r) -> _ => panic!(),
                    recv(after(ms(20))) -> _ => {}
                }
            });
        }

        #[test]
        fn capacity() {
            const COUNT: usize = 10;

            for i in 0..COUNT {
                let r = after(ms(i as u64));
                assert_eq!(r.capacity(), Some(1));
            }
        }

        #[test]
        fn len_empty_full() {
            greenweave::run(|| {
                let r = after(ms(100));

                assert_eq!(r.len(), 0);
                assert!(r.is_empty());
                assert!(!r.is_full());

                sleep(ms(120));

                assert_eq!(r.len(), 1);
                assert!(!r.is_empty());
                assert!(r.is_full());

                r.try_recv().unwrap();

                assert_eq!(r.len(), 0);
                assert!(r.is_empty());
                assert!(!r.is_full());
            });
        }

        #[test]
        fn try_recv() {
            greenweave::run(|| {
                let (before, r, after) = timed(|| after(ms(40)));
                let due = before + ms(40)..=after + ms(40);
                let mut received = 0;
                // crossbeam's sleeps, with a look after each (and one right after the receive).
                for pause in [0, 20, 40, 0, 40] {
                    sleep(ms(pause));
                    if received == 0 {
                        received += usize::from(try_recv_around(&r, due.clone()).is_ok());
                    } else {
                        assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
                    }
                }
                assert_eq!(received, 1);
            });
        }

        #[test]
        fn recv() {
            greenweave::run(|| {
                let start = Instant::now();
                let r = after(ms(10));

                let fired = r.recv().unwrap();
                assert!(start < fired);
                assert!(fired - start >= ms(10));

                let now = Instant::now();
                assert!(fired <= now);

                assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
            });
        }

        #[test]
        fn recv_timeout() {
            greenweave::run(|| {
                let start = Instant::now();
                let r = after(ms(200));

                // Margins of 180 ms against a late look on a loaded machine.
                assert!(r.recv_timeout(ms(20)).is_err());
                let now = Instant::now();
                assert!(now - start >= ms(20));

                let fired = r.recv_timeout(ms(1000)).unwrap();
                assert!(fired - start >= ms(200));

                let received = Instant::now();
                assert!(r.recv_timeout(ms(20)).is_err());
                assert!(Instant::now() - received >= ms(20));

                assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
            });
        }

        #[test]
        fn recv_two() {
            greenweave::run(|| {
                let r1 = after(ms(10));
                let r2 = after(ms(10));

                scope(|scope| {
                    scope.spawn(|| {
                        select! {
                            recv(r1) -> _ => {}
                            recv(r2) -> _ => {}
                        }
                    });
                    scope.spawn(|| {
                        select! {
                            recv(r1) -> _ => {}
                            recv(r2) -> _ => {}
                        }
                    });
                });
            });
        }

        #[test]
        fn recv_race() {
            greenweave::run(|| {
                select! {
                    recv(after(ms(10))) -> _ => {}
                    recv(after(ms(1000))) -> _ => panic!(),
                }

                select! {
                    recv(after(ms(1000))) -> _ => panic!(),
                    recv(after(ms(10))) -> _ => {}
                }
            });
        }

        #[test]
        fn stress_default() {
            const COUNT: usize = 10;

            greenweave::run(|| {
                for _ in 0..COUNT {
                    select! {
                        recv(after(ms(0))) -> _ => {}
                        default => panic!(),
                    }
                }

                for _ in 0..COUNT {
                    select! {
                        recv(after(ms(1000))) -> _ => panic!(),
                        default => {}
                    }
                }
            });
        }

        #[test]
        fn select() {
            const THREADS: usize = 4;
            const COUNT: usize = 1000;
            const TIMEOUT_MS: u64 = 100;

            greenweave::run(|| {
                let v = (0..COUNT)
                    .map(|i| after(ms(i as u64 / TIMEOUT_MS / 2)))
                    .collect::<Vec<_>>();
                let hits = Cell::new(0);

                scope(|scope| {
                    for _ in 0..THREADS {
                        scope.spawn(|| {
                            let v: Vec<&_> = v.iter().collect();

                            loop {
                                let timeout = after(ms(TIMEOUT_MS));
                                let mut sel = Select::new();
                                for r in &v {
                                    sel.recv(*r);
                                }
                                let oper_timeout = sel.recv(&timeout);

                                let oper = sel.select();
                                match oper.index() {
                                    i if i == oper_timeout => {
                                        oper.recv(&timeout).unwrap();
                                        break;
                                    }
                                    i => {
                                        oper.recv(v[i]).unwrap();
                                        hits.set(hits.get() + 1);
                                    }
                                }
                            }
                        });
                    }
                });

                assert_eq!(hits.get(), COUNT);
            });
        }

        #[test]
        fn ready() {
            const THREADS: usize = 4;
            const COUNT: usize = 1000;
            const TIMEOUT_MS: u64 = 100;

            greenweave::run(|| {
                let v = (0..COUNT)
                    .map(|i| after(ms(i as u64 / TIMEOUT_MS / 2)))
                    .collect::<Vec<_>>();
                let hits = Cell::new(0);

                scope(|scope| {
                    for _ in 0..THREADS {
                        scope.spawn(|| {
                            let v: Vec<&_> = v.iter().collect();

                            loop {
                                let timeout = after(ms(TIMEOUT_MS));
                                let mut sel = Select::new();
                                for r in &v {
                                    sel.recv(*r);
                                }
                                let oper_timeout = sel.recv(&timeout);

                                loop {
                                    let i = sel.ready();
                                    if i == oper_timeout {
                                        timeout.try_recv().unwrap();
                                        return;
                                    } else if v[i].try_recv().is_ok() {
                                        hits.set(hits.get() + 1);
                                        break;
                                    }
                                }
                            }
                        });
                    }
                });

                assert_eq!(hits.get(), COUNT);
            });
        }

        #[test]
        fn stress_clone() {
            const RUNS: usize = 100;
            const THREADS: usize = 10;
            const COUNT: usize = 50;

            greenweave::run(|| {
                for i in 0..RUNS {
                    let r = after(ms(i as u64 % 3));

                    scope(|scope| {
                        for _ in 0..THREADS {
                            scope.spawn(|| {
                                let r = r.clone();
                                let _ = r.try_recv();

                                for _ in 0..COUNT {
                                    drop(r.clone());
                                    greenweave::thread::yield_now();
                                }
                            });
                        }
                    });
                }
            });
        }

        #[test]
        fn fairness() {
            const COUNT: usize = 1000;

            greenweave::run(|| {
                for &dur in &[0, 1] {
                    let mut hits = [0usize; 2];

                    for _ in 0..COUNT {
                        select! {
                            recv(after(ms(dur))) -> _ => hits[0] += 1,
                            recv(after(ms(dur))) -> _ => hits[1] += 1,
                        }
                    }

                    assert!(hits.iter().all(|x| *x >= COUNT / hits.len() / 2));
                }
            });
        }

        #[test]
        fn fairness_duplicates() {
            const COUNT: usize = 1000;

            greenweave::run(|| {
                for &dur in &[0, 1] {
                    let mut hits = [0usize; 5];

                    for _ in 0..COUNT {
                        let r = after(ms(dur));
                        select! {
                            recv(r) -> _ => hits[0] += 1,
                            recv(r) -> _ => hits[1] += 1,
                            recv(r) -> _ => hits[2] += 1,
                            recv(r) -> _ => hits[3] += 1,
                            recv(r) -> _ => hits[4] += 1,
                        }
                    }

                    assert!(hits.iter().all(|x| *x >= COUNT / hits.len() / 2));
                }
            });
        }
    }

    /// crossbeam-channel/tests/tick.rs
    mod tick {
        use super::*;

        #[test]
        fn fire() {
            greenweave::run(|| {
                let start = Instant::now();
                let r = tick(ms(100));

                assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
                sleep(ms(120));

                let fired = r.try_recv().unwrap();
                assert!(start < fired);
                assert!(fired - start >= ms(100));

                let now = Instant::now();
                assert!(fired < now);
                assert!(now - fired >= ms(20));

                assert_eq!(r.try_recv(), Err(TryRecvError::Empty));

                select! {
                    recv(r) -> _ => panic!(),
                    default => {}
                }

                select! {
                    recv(r) -> _ => {}
                    recv(tick(ms(200))) -> _ => panic!(),
                }
            });
        }

        /// crossbeam's bounds on each tick's instant, as what they mean: a tick is never early,
        /// the ticks that nobody received while it slept are dropped (one message at most), and
        /// after a late receive the next tick is due a period after it.
        #[test]
        fn intervals() {
            greenweave::run(|| {
                let start = Instant::now();
                let r = tick(ms(10));

                let t1 = r.recv().unwrap();
                assert!(start + ms(10) <= t1);

                sleep(ms(60));
                let late = Instant::now();
                let t2 = r.try_recv().unwrap();
                assert!(t1 + ms(10) <= t2);
                assert!(
                    t2 < late - ms(20),
                    "the tick was due long before: {t2:?} {late:?}"
                );

                assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
                let t3 = r.recv().unwrap();
                assert!(late + ms(10) <= t3);

                assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
            });
        }

        #[test]
        fn capacity() {
            const COUNT: usize = 10;

            for i in 0..COUNT {
                let r = tick(ms(i as u64));
                assert_eq!(r.capacity(), Some(1));
            }
        }

        #[test]
        fn len_empty_full() {
            greenweave::run(|| {
                let r = tick(ms(100));

                assert_eq!(r.len(), 0);
                assert!(r.is_empty());
                assert!(!r.is_full());

                sleep(ms(120));

                assert_eq!(r.len(), 1);
                assert!(!r.is_empty());
                assert!(r.is_full());

                r.try_recv().unwrap();

                assert_eq!(r.len(), 0);
                assert!(r.is_empty());
                assert!(!r.is_full());
            });
        }

        #[test]
        fn try_recv() {
            greenweave::run(|| {
                let (before, r, after) = timed(|| tick(ms(40)));
                let mut due = before + ms(40)..=after + ms(40);
                let mut received = 0;
                // crossbeam's sleeps, with a look after each (and one right after a receive).
                for pause in [0, 20, 40, 0, 20, 40, 0] {
                    sleep(ms(pause));
                    let (before, got, after) = timed(|| try_recv_around(&r, due.clone()));
                    if got.is_ok() {
                        received += 1;
                        // One message at most: the next is due a period after this receive.
                        due = before + ms(40)..=after + ms(40);
                    }
                }
                assert!((2..=3).contains(&received), "{received} ticks in 120 ms");
            });
        }

        #[test]
        fn recv() {
            greenweave::run(|| {
                let start = Instant::now();
                let r = tick(ms(10));

                let fired = r.recv().unwrap();
                assert!(start < fired);
                assert!(fired - start >= ms(10));

                let now = Instant::now();
                assert!(fired <= now);

                assert_eq!(r.try_recv(), Err(TryRecvError::Empty));
            });
        }

        #[test]
        fn recv_timeout() {
            greenweave::run(|| {
                let start = Instant::now();
                let r = tick(ms(200));

                // Margins of 180 ms against a late look on a loaded machine.
                assert!(r.recv_timeout(ms(20)).is_err());
                let now = Instant::now();
                assert!(now - start >= ms(20));

                let fired = r.recv_timeout(ms(1000)).unwrap();
                assert!(fired - start >= ms(200));

                let received = Instant::now();
                assert!(r.recv_timeout(ms(20)).is_err());
                assert!(Instant::now() - received >= ms(20));

                let fired_again = r.recv_timeout(ms(1000)).unwrap();
                assert!(fired_again - fired >= ms(200));
            });
        }

        #[test]
        fn recv_two() {
            greenweave::run(|| {
                let r1 = tick(ms(5));
                let r2 = tick(ms(5));

                scope(|scope| {
                    scope.spawn(|| {
                        for _ in 0..10 {
                            select! {
                                recv(r1) -> _ => {}
                                recv(r2) -> _ => {}
                            }
                        }
                    });
                    scope.spawn(|| {
                        for _ in 0..10 {
                            select! {
                                recv(r1) -> _ => {}
                                recv(r2) -> _ => {}
                            }
                        }
                    });
                });
            });
        }

        #[test]
        fn recv_race() {
            greenweave::run(|| {
                select! {
                    recv(tick(ms(10))) -> _ => {}
                    recv(tick(ms(1000))) -> _ => panic!(),
                }

                select! {
                    recv(tick(ms(1000))) -> _ => panic!(),
                    recv(tick(ms(10))) -> _ => {}
                }
            });
        }

        #[test]
        fn stress_default() {
            const COUNT: usize = 10;

            greenweave::run(|| {
                for _ in 0..COUNT {
                    select! {
                        recv(tick(ms(0))) -> _ => {}
                        default => panic!(),
                    }
                }

                for _ in 0..COUNT {
                    select! {
                        recv(tick(ms(1000))) -> _ => panic!(),
                        default => {}
                    }
                }
            });
        }

        /// Four green threads share two tickers until a deadline (20 and 30 ms periods, 110
        /// ms; crossbeam's are ten times longer).
        #[test]
        fn select() {
            const THREADS: usize = 4;

            greenweave::run(|| {
                let hits = Cell::new(0);
                let r1 = tick(ms(20));
                let r2 = tick(ms(30));
                let deadline = Instant::now() + ms(110);
                let (dues1, dues2) = (RefCell::new(Vec::new()), RefCell::new(Vec::new()));

                scope(|scope| {
                    for _ in 0..THREADS {
                        scope.spawn(|| {
                            let timeout = at(deadline);
                            loop {
                                let mut sel = Select::new();
                                let oper1 = sel.recv(&r1);
                                let oper2 = sel.recv(&r2);
                                let oper3 = sel.recv(&timeout);
                                let oper = sel.select();
                                match oper.index() {
                                    i if i == oper1 => {
                                        dues1.borrow_mut().push(oper.recv(&r1).unwrap());
                                        hits.set(hits.get() + 1);
                                    }
                                    i if i == oper2 => {
                                        dues2.borrow_mut().push(oper.recv(&r2).unwrap());
                                        hits.set(hits.get() + 1);
                                    }
                                    i if i == oper3 => {
                                        oper.recv(&timeout).unwrap();
                                        break;
                                    }
                                    _ => unreachable!(),
                                }
                            }
                        });
                    }
                });

                // Each tick is received once, in order, a period or more after the one before
                // (crossbeam counts exactly 8: 5 + 3 ticks before its deadline, which holds
                // only when no look is late).
                assert_eq!(hits.get(), dues1.borrow().len() + dues2.borrow().len());
                for (dues, period) in [(dues1, ms(20)), (dues2, ms(30))] {
                    let dues = dues.into_inner();
                    assert!(
                        dues.windows(2).all(|pair| pair[1] >= pair[0] + period),
                        "{dues:?}"
                    );
                }
            });
        }

        #[test]
        fn ready() {
            const THREADS: usize = 4;

            greenweave::run(|| {
                let hits = Cell::new(0);
                let r1 = tick(ms(20));
                let r2 = tick(ms(30));
                let deadline = Instant::now() + ms(110);
                let (dues1, dues2) = (RefCell::new(Vec::new()), RefCell::new(Vec::new()));

                scope(|scope| {
                    for _ in 0..THREADS {
                        scope.spawn(|| {
                            let timeout = at(deadline);
                            'outer: loop {
                                let mut sel = Select::new();
                                sel.recv(&r1);
                                sel.recv(&r2);
                                sel.recv(&timeout);
                                loop {
                                    match sel.ready() {
                                        0 => {
                                            if let Ok(due) = r1.try_recv() {
                                                dues1.borrow_mut().push(due);
                                                hits.set(hits.get() + 1);
                                                break;
                                            }
                                        }
                                        1 => {
                                            if let Ok(due) = r2.try_recv() {
                                                dues2.borrow_mut().push(due);
                                                hits.set(hits.get() + 1);
                                                break;
                                            }
                                        }
                                        2 => {
                                            if timeout.try_recv().is_ok() {
                                                break 'outer;
                                            }
                                        }
                                        _ => unreachable!(),
                                    }
                                }
                            }
                        });
                    }
                });

                // Each tick is received once, in order, a period or more after the one before
                // (crossbeam counts exactly 8: 5 + 3 ticks before its deadline, which holds
                // only when no look is late).
                assert_eq!(hits.get(), dues1.borrow().len() + dues2.borrow().len());
                for (dues, period) in [(dues1, ms(20)), (dues2, ms(30))] {
                    let dues = dues.into_inner();
                    assert!(
                        dues.windows(2).all(|pair| pair[1] >= pair[0] + period),
                        "{dues:?}"
                    );
                }
            });
        }

        #[test]
        fn fairness() {
            const COUNT: usize = 30;

            greenweave::run(|| {
                for &dur in &[0, 1] {
                    let mut hits = [0usize; 2];

                    for _ in 0..COUNT {
                        let r1 = tick(ms(dur));
                        let r2 = tick(ms(dur));

                        for _ in 0..COUNT {
                            select! {
                                recv(r1) -> _ => hits[0] += 1,
                                recv(r2) -> _ => hits[1] += 1,
                            }
                        }
                    }

                    assert!(hits.iter().all(|x| *x >= COUNT / hits.len() / 2));
                }
            });
        }

        #[test]
        fn fairness_duplicates() {
            const COUNT: usize = 30;

            greenweave::run(|| {
                for &dur in &[0, 1] {
                    let mut hits = [0usize; 5];

                    for _ in 0..COUNT {
                        let r = tick(ms(dur));

                        for _ in 0..COUNT {
                            select! {
                                recv(r) -> _ => hits[0] += 1,
                                recv(r) -> _ => hits[1] += 1,
                                recv(r) -> _ => hits[2] += 1,
                                recv(r) -> _ => hits[3] += 1,
                                recv(r) -> _ => hits[4] += 1,
                            }
                        }
                    }

                    assert!(hits.iter().all(|x| *x >= COUNT / hits.len() / 2));
                }
            });
        }
    }

    /// crossbeam-channel/tests/never.rs (`optional` and `same_channel` are not ported: a
    /// never channel here receives instants, not any type, and channels have no
    /// `same_channel`).
    mod never {
        use super::*;

        #[test]
        fn smoke() {
            greenweave::run(|| {
                select! {
                    recv(never()) -> _ => panic!(),
                    default => {}
                }
            });
        }

        #[test]
        fn tick_n() {
            greenweave::run(|| {
                let mut r = tick(ms(2));
                let mut step = 0;

                loop {
                    select! {
                        recv(r) -> _ => step += 1,
                        timeout(ms(20)) => break,
                    }

                    if step == 10 {
                        r = never();
                    }
                }

                assert_eq!(step, 10);
            });
        }

        #[test]
        fn capacity() {
            let r = never();
            assert_eq!(r.capacity(), Some(0));
        }

        #[test]
        fn len_empty_full() {
            let r = never();
            assert_eq!(r.len(), 0);
            assert!(r.is_empty());
            assert!(r.is_full());
        }

        #[test]
        fn try_recv() {
            greenweave::run(|| {
                let r = never();
                assert!(r.try_recv().is_err());

                sleep(ms(10));
                assert!(r.try_recv().is_err());
            });
        }

        #[test]
        fn recv_timeout() {
            greenweave::run(|| {
                let start = Instant::now();
                let r = never();

                assert!(r.recv_timeout(ms(10)).is_err());
                let now = Instant::now();
                assert!(now - start >= ms(10));

                assert!(r.recv_timeout(ms(10)).is_err());
                let now = Instant::now();
                assert!(now - start >= ms(20));
            });
        }
    }
}

/// crossbeam-channel/tests/select_macro.rs's `try_recv` once more, for `sync::shared` with its
/// ends on two OS threads as crossbeam's are, each in a runtime of its own (issue 25, item 3).
mod shared_across_os_threads {
    mod select_macro {
        use greenweave::select;
        use greenweave::sync::shared::{RecvError, sync_channel as bounded};
        use greenweave::thread::sleep;

        use super::super::ms;

        /// crossbeam's test orders the two threads by sleeps (300, 200 and 20 ms), which a
        /// thread that starts late (under Valgrind, on a loaded machine) overruns. Here the
        /// first empty select says "go" to the sender, and the later selects with `default`
        /// try again (bounded) until the sender has parked, then until it has gone: each try
        /// still meets the parked sender without parking itself, which is what is tested.
        #[test]
        fn try_recv() {
            let (s, r) = bounded(0);
            let (go, gone) = std::sync::mpsc::channel();

            std::thread::scope(|scope| {
                scope.spawn(move || {
                    greenweave::run(move || {
                        select! {
                            recv(r) -> _ => panic!(),
                            default => {}
                        }
                        go.send(()).unwrap();
                        assert_eq!(recv_with_default_until_ready(&r), Ok(7));
                        assert_eq!(recv_with_default_until_ready(&r), Err(RecvError));
                    })
                });
                scope.spawn(move || {
                    greenweave::run(move || {
                        gone.recv().unwrap();
                        select! {
                            send(s, 7) -> res => res.unwrap(),
                        }
                    })
                });
            });
        }

        /// `select!` with `default` until the receive is ready, sleeping 1 ms between tries;
        /// gives up (panics) after 60 s.
        fn recv_with_default_until_ready<T>(
            r: &greenweave::sync::shared::Receiver<T>,
        ) -> Result<T, RecvError> {
            let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                select! {
                    recv(r) -> v => return v,
                    default => {
                        assert!(std::time::Instant::now() < give_up, "the sender never came");
                        sleep(ms(1));
                    }
                }
            }
        }
    }
}
