//! Filling the process's fd table, for tests of what a green server does when `accept` finds
//! no free fd (`EMFILE`). It lowers the fd limit of the whole process, so use it only in a
//! child process (`common::run_in_child`).

use std::fs::{self, File};

/// Lowers the soft `RLIMIT_NOFILE` to a little above the highest fd open now, then opens
/// `/dev/null` until the kernel refuses with `EMFILE`. Returns the files that hold the table
/// full: dropping them frees the fds.
pub fn fill_fd_table() -> Vec<File> {
    let highest = fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd lists the open fds")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .expect("some fd is open");
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-parameter.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    limit.rlim_cur = (highest + 1 + 16).min(limit.rlim_max);
    // SAFETY: `limit` is a valid rlimit; it lowers the soft limit only, which any process may.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    let mut hog = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(file) => hog.push(file),
            Err(error) if error.raw_os_error() == Some(libc::EMFILE) => return hog,
            Err(error) => panic!("filling the fd table: {error}"),
        }
        assert!(hog.len() < 10_000, "the fd table never filled up");
    }
}
