//! What it costs to learn how deep a parked stack went and to release its pages below the stack
//! pointer: the candidates `runtime::stack_release` chose among, per stack, side by side in one
//! run (issue 32, item 3).
//!
//! ```sh
//! cargo run --release --example stack_release_cost            # 2,000 stacks, 5 rounds
//! cargo run --release --example stack_release_cost -- --quick # 200 stacks, 1 round
//! ```
//!
//! Each stack is a 256 KiB anonymous mapping like a green thread's (without the guard page,
//! which changes nothing here), "parked" either shallow (its top page touched) or after a
//! 128 KiB descent (its top 128 KiB touched). Rows, in nanoseconds per stack (the median of the
//! rounds):
//! - `mincore`: one call over the whole stack, as the sweep makes (how deep it went, and what
//!   is resident below the stack pointer);
//! - blind `MADV_DONTNEED` below the top page, one `madvise` per stack: releases without
//!   knowing, and tells neither the peak nor the bytes;
//! - `MADV_DONTNEED` of the 124 KiB below the stack pointer, one `madvise` per stack, and the
//!   same ranges in one `process_madvise` call per 1024 stacks (the sweep's batch), including
//!   re-touching them between rounds (not timed);
//! - painting: writing a pattern over the whole stack at spawn, the watermark alternative (it
//!   commits every page it paints, which is why it is out).

use std::time::Instant;

const STACK: usize = 256 * 1024;
const DEEP: usize = 128 * 1024;
const PAGE: usize = 4096;
/// `PIDFD_SELF` (Linux 6.15): process_madvise on the calling process without a pidfd.
const PIDFD_SELF: libc::c_int = -10000;

struct Stacks {
    base: usize,
    count: usize,
}

impl Stacks {
    fn new(count: usize) -> Stacks {
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                count * STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap failed");
        Stacks {
            base: base as usize,
            count,
        }
    }

    fn top(&self, index: usize) -> usize {
        self.base + (index + 1) * STACK
    }

    /// Touches the top `bytes` of every stack.
    fn touch(&self, bytes: usize) {
        for index in 0..self.count {
            let top = self.top(index);
            let mut at = top - PAGE;
            while at >= top - bytes {
                // SAFETY: inside our own mapping.
                unsafe { (at as *mut u8).write_volatile(1) };
                at -= PAGE;
            }
        }
    }

    /// Releases everything (between cases).
    fn clear(&self) {
        // SAFETY: our own mapping; nothing lives in it.
        unsafe {
            libc::madvise(
                self.base as *mut libc::c_void,
                self.count * STACK,
                libc::MADV_DONTNEED,
            )
        };
    }
}

impl Drop for Stacks {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer used.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.count * STACK) };
    }
}

/// Median of `rounds` runs of `setup` then timed `body`, in ns per stack.
fn measure(
    stacks: &Stacks,
    rounds: usize,
    mut setup: impl FnMut(&Stacks),
    mut body: impl FnMut(&Stacks),
) -> f64 {
    let mut samples: Vec<f64> = (0..rounds)
        .map(|_| {
            setup(stacks);
            let start = Instant::now();
            body(stacks);
            start.elapsed().as_nanos() as f64 / stacks.count as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn mincore_all(stacks: &Stacks) {
    let mut vector = vec![0u8; STACK / PAGE];
    let mut deepest = 0;
    for index in 0..stacks.count {
        let limit = stacks.top(index) - STACK;
        // SAFETY: a mapped range of ours; the vector has one byte per page.
        unsafe { libc::mincore(limit as *mut libc::c_void, STACK, vector.as_mut_ptr()) };
        let lowest = vector.iter().position(|flag| flag & 1 != 0).unwrap_or(0);
        deepest = deepest.max(STACK - lowest * PAGE);
    }
    std::hint::black_box(deepest);
}

fn dontneed_each(stacks: &Stacks, below_top: usize, length: usize) {
    for index in 0..stacks.count {
        let end = stacks.top(index) - below_top;
        // SAFETY: our own mapping; nothing lives there.
        unsafe {
            libc::madvise(
                (end - length) as *mut libc::c_void,
                length,
                libc::MADV_DONTNEED,
            )
        };
    }
}

/// Returns false if the kernel refuses `process_madvise(MADV_DONTNEED)` on ourselves.
fn dontneed_batched(stacks: &Stacks, below_top: usize, length: usize) -> bool {
    let ranges: Vec<libc::iovec> = (0..stacks.count)
        .map(|index| libc::iovec {
            iov_base: (stacks.top(index) - below_top - length) as *mut libc::c_void,
            iov_len: length,
        })
        .collect();
    for chunk in ranges.chunks(1024) {
        // SAFETY: ranges of our own mapping where nothing lives.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                PIDFD_SELF,
                chunk.as_ptr(),
                chunk.len(),
                libc::MADV_DONTNEED,
                0,
            )
        };
        if rc < 0 {
            return false;
        }
    }
    true
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let (count, rounds) = if quick { (200, 1) } else { (2_000, 5) };
    let stacks = Stacks::new(count);
    let shallow = |stacks: &Stacks| {
        stacks.clear();
        stacks.touch(PAGE);
    };
    let deep = |stacks: &Stacks| {
        stacks.clear();
        stacks.touch(DEEP);
    };
    println!(
        "{count} stacks of {} KiB, median of {rounds} rounds, ns per stack",
        STACK / 1024
    );
    let rows: [(&str, f64); 4] = [
        (
            "mincore over the stack, parked shallow",
            measure(&stacks, rounds, shallow, mincore_all),
        ),
        (
            "mincore over the stack, after a 128 KiB descent",
            measure(&stacks, rounds, deep, mincore_all),
        ),
        (
            "blind MADV_DONTNEED below the top page, parked shallow (nothing to free)",
            measure(&stacks, rounds, shallow, |s| {
                dontneed_each(s, PAGE, STACK - PAGE)
            }),
        ),
        (
            "MADV_DONTNEED of 124 KiB below the stack pointer, one madvise per stack",
            measure(&stacks, rounds, deep, |s| {
                dontneed_each(s, PAGE, DEEP - PAGE)
            }),
        ),
    ];
    for (what, ns) in rows {
        println!("{ns:>10.0}  {what}");
    }
    let mut vectored = true;
    let batched = measure(&stacks, rounds, deep, |s| {
        vectored &= dontneed_batched(s, PAGE, DEEP - PAGE)
    });
    if vectored {
        println!(
            "{batched:>10.0}  MADV_DONTNEED of 124 KiB below the stack pointer, one process_madvise per 1024 stacks"
        );
    } else {
        println!("       n/a  process_madvise(PIDFD_SELF, MADV_DONTNEED) refused by this kernel");
    }
    let paint = measure(
        &stacks,
        rounds,
        |s| s.clear(),
        |s| {
            for index in 0..s.count {
                let limit = s.top(index) - STACK;
                // SAFETY: our own mapping; the paint is the only thing there.
                unsafe { std::ptr::write_bytes(limit as *mut u8, 0xa5, STACK) };
            }
        },
    );
    println!("{paint:>10.0}  painting the whole stack at spawn (commits all of it)");
}
