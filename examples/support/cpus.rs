//! CPU lists and pinning, for the servers' `--pin CPU-LIST` flag: greenweave's servers hand the
//! list to the runtime (`Builder::pin_workers`), the tokio peers pin their runtime's threads
//! with [`pin_this_thread`] as they start. Included with `#[path]`; not an example itself.

use std::io;

/// Parses a CPU list as `taskset -c` takes it: `0`, `0,2`, `0-3`, `0-3,8-11`.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let not_a_list = || format!("--pin: not a CPU list like 0,1 or 0-3: {text:?}");
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (first, last),
            None => (part, part),
        };
        let first: usize = first.trim().parse().map_err(|_| not_a_list())?;
        let last: usize = last.trim().parse().map_err(|_| not_a_list())?;
        if first > last {
            return Err(not_a_list());
        }
        cpus.extend(first..=last);
    }
    Ok(cpus)
}

/// Pins the calling OS thread to `cpu`.
///
/// # Errors
/// That of `sched_setaffinity(2)`: `EINVAL` when the machine has no such CPU, or when the
/// process may not run there (a `taskset` around it that leaves it out).
pub fn pin_this_thread(cpu: usize) -> io::Result<()> {
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot pin to CPU {cpu}: a cpu_set_t holds fewer CPUs"),
        ));
    }
    // SAFETY: a cpu_set_t is plain data for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is within the set's bits (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is the calling thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        let error = io::Error::last_os_error();
        return Err(io::Error::new(
            error.kind(),
            format!(
                "cannot pin to CPU {cpu} ({error}): see `nproc` and the process's `taskset -p`"
            ),
        ));
    }
    Ok(())
}
