//! CPU affinity: which CPUs the calling OS thread may run on (`sched_getaffinity`,
//! `sched_setaffinity`), for pinning a runtime's workers.

use std::io;
use std::mem::MaybeUninit;

use super::check;

/// A set of CPUs, as the kernel's `cpu_set_t` holds it (CPUs 0 to 1023).
#[derive(Clone, Copy)]
pub(crate) struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    /// The most CPUs a set can name.
    pub(crate) const CAPACITY: usize = libc::CPU_SETSIZE as usize;

    /// The set holding only `cpu`.
    ///
    /// # Panics
    /// If `cpu` is not below [`CpuSet::CAPACITY`] (callers check first).
    pub(crate) fn only(cpu: usize) -> CpuSet {
        assert!(cpu < Self::CAPACITY, "CPU {cpu} is beyond cpu_set_t");
        // SAFETY: an all-zero cpu_set_t is the empty set, a valid value of this plain C struct.
        let mut set: libc::cpu_set_t = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: `cpu` is below CPU_SETSIZE (asserted), so the bit is inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
        CpuSet(set)
    }

    /// The CPUs the calling OS thread may run on now.
    pub(crate) fn of_this_thread() -> io::Result<CpuSet> {
        // SAFETY: as in `only`.
        let mut set: libc::cpu_set_t = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is the calling thread.
        check(unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) })?;
        Ok(CpuSet(set))
    }

    /// Restricts the calling OS thread to these CPUs.
    pub(crate) fn apply_to_this_thread(&self) -> io::Result<()> {
        // SAFETY: reads a live cpu_set_t of the size passed; pid 0 is the calling thread.
        check(unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &self.0) })
            .map(drop)
    }

    /// Whether `cpu` is in the set.
    pub(crate) fn contains(&self, cpu: usize) -> bool {
        // SAFETY: the bit is read only for a `cpu` below CPU_SETSIZE, so inside the set.
        cpu < Self::CAPACITY && unsafe { libc::CPU_ISSET(cpu, &self.0) }
    }

    /// The CPUs in the set, in increasing order.
    pub(crate) fn cpus(&self) -> Vec<usize> {
        (0..Self::CAPACITY)
            .filter(|&cpu| self.contains(cpu))
            .collect()
    }
}
