//! The `hooks` feature and regular files: a read is served from the page cache at once, and
//! what must come from the disk is read on the offload pool while only its green thread parks.
#![cfg(feature = "hooks")]

use std::cell::RefCell;
use std::fs::File;
use std::io::{IoSliceMut, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::rc::Rc;

/// A file of `len` bytes whose byte at offset `i` is `i % 251`, in the target's temporary
/// directory, under a name of its own.
fn patterned_file(name: &str, len: usize) -> (PathBuf, Vec<u8>) {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{name}-{}-{}",
        std::env::consts::ARCH,
        std::process::id()
    ));
    let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let mut file = File::create(&path).unwrap();
    file.write_all(&bytes).unwrap();
    file.sync_all().unwrap();
    (path, bytes)
}

/// The bytes of a patterned file at `offset`.
fn bytes_at(offset: usize, len: usize) -> Vec<u8> {
    (offset..offset + len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn regular_file_reads_in_a_green_thread_return_the_files_bytes_and_keep_its_position() {
    let (path, bytes) = patterned_file("hooks-files-read", 300_000);
    let read_back = greenweave::run({
        let path = path.clone();
        move || {
            let mut file = File::open(&path).unwrap();
            let mut all = Vec::new();
            // Chunks of odd sizes, then whatever is left, then a read at the end of the file.
            for size in [1, 4095, 4097, 65_536, 100_003] {
                let mut chunk = vec![0; size];
                file.read_exact(&mut chunk).unwrap();
                all.extend_from_slice(&chunk);
            }
            // Vectored: readv over three buffers.
            let (mut a, mut b, mut c) = (vec![0; 10], vec![0; 20_000], vec![0; 7]);
            let mut buffers = [
                IoSliceMut::new(&mut a),
                IoSliceMut::new(&mut b),
                IoSliceMut::new(&mut c),
            ];
            let read = file.read_vectored(&mut buffers).unwrap();
            assert_eq!(read, 20_017);
            all.extend_from_slice(&a);
            all.extend_from_slice(&b);
            all.extend_from_slice(&c);
            file.read_to_end(&mut all).unwrap();
            let mut past_end = [0; 16];
            assert_eq!(file.read(&mut past_end).unwrap(), 0);
            // At an offset (pread64): the bytes there, and the position stays where it was.
            let mut at = [0; 5];
            file.read_exact_at(&mut at, 123_456).unwrap();
            assert_eq!(at.to_vec(), bytes_at(123_456, 5));
            assert_eq!(
                file.read(&mut past_end).unwrap(),
                0,
                "the position did not move"
            );
            // The position is the file's: a seek back is honoured.
            file.seek(SeekFrom::Start(1000)).unwrap();
            let mut again = [0; 3];
            file.read_exact(&mut again).unwrap();
            assert_eq!(
                again,
                [(1000 % 251) as u8, (1001 % 251) as u8, (1002 % 251) as u8]
            );
            all
        }
    });
    std::fs::remove_file(&path).unwrap();
    assert_eq!(read_back.len(), bytes.len());
    assert!(read_back == bytes, "the bytes read differ from the file's");
}

/// Whether every page of `file` (of `len` bytes) is out of the page cache.
fn evicted(file: &File, len: usize) -> bool {
    // SAFETY: maps the file read-only and shared; unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    let page = 4096;
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: `map` is a mapping of `len` bytes; `resident` has a byte per page.
    let rc = unsafe { libc::mincore(map, len, resident.as_mut_ptr()) };
    // SAFETY: unmaps what was mapped above.
    unsafe { libc::munmap(map, len) };
    rc == 0 && resident.iter().all(|page| page & 1 == 0)
}

/// Whether this kernel (or qemu-user) takes `RWF_NOWAIT` for reads of `file` (read at
/// offset 0, which the caller has just read so it is cached).
fn takes_nowait(file: &File) -> bool {
    let mut byte = 0u8;
    let buffer = libc::iovec {
        iov_base: (&raw mut byte).cast(),
        iov_len: 1,
    };
    // SAFETY: one iovec over a live byte; an explicit offset leaves the position alone.
    let rc = unsafe { libc::preadv2(file.as_raw_fd(), &buffer, 1, 0, libc::RWF_NOWAIT) };
    rc == 1
}

#[test]
fn a_file_read_that_misses_the_page_cache_parks_only_its_green_thread() {
    cold_read_parks("hooks-files-cold", |file, all| {
        let mut file = file;
        file.read_exact(all).unwrap();
    });
}

#[test]
fn a_file_read_at_an_offset_that_misses_the_page_cache_parks_only_its_green_thread() {
    // `read_exact_at` is `pread64`; read in two halves, the second first.
    cold_read_parks("hooks-files-cold-at", |file, all| {
        let half = all.len() / 2;
        let (low, high) = all.split_at_mut(half);
        file.read_exact_at(high, half as u64).unwrap();
        file.read_exact_at(low, 0).unwrap();
    });
}

/// Drops a 1 MiB file from the page cache, reads it all in a green thread with `read` while
/// another green thread is ready, and checks the bytes and (where the page cache could be
/// dropped and `RWF_NOWAIT` works) that the other green thread ran before the read returned.
fn cold_read_parks(name: &str, read: fn(File, &mut [u8])) {
    const LEN: usize = 1 << 20;
    let (path, bytes) = patterned_file(name, LEN);
    let (probe_path, _) = patterned_file(&format!("{name}-probe"), 4096);
    let probe = File::open(&probe_path).unwrap();
    let mut first = [0u8; 1];
    (&probe).read_exact(&mut first).unwrap();
    let nowait = takes_nowait(&probe);
    drop(probe);
    std::fs::remove_file(&probe_path).unwrap();

    let file = File::open(&path).unwrap();
    // SAFETY: advice on a live fd: drop its clean (synced) pages from the page cache.
    let advised = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(advised, 0);
    let cold = evicted(&file, LEN);
    let events = Rc::new(RefCell::new(Vec::new()));
    let read_back = greenweave::run({
        let events = events.clone();
        move || {
            let other_events = events.clone();
            let other = greenweave::spawn(move || other_events.borrow_mut().push("other ran"));
            let mut all = vec![0; LEN];
            read(file, &mut all);
            events.borrow_mut().push("read returned");
            other.join().unwrap();
            all
        }
    });
    std::fs::remove_file(&path).unwrap();
    assert!(read_back == bytes, "the bytes read differ from the file's");
    if nowait && cold {
        assert_eq!(*events.borrow(), ["other ran", "read returned"]);
    } else {
        // Nothing to show here: the read was served from the cache, or read as libc does.
        eprintln!(
            "note: RWF_NOWAIT {} and the file {} out of the page cache; the ordering was not checked",
            if nowait { "works" } else { "is not supported" },
            if cold { "was" } else { "could not be put" }
        );
    }
}

#[test]
fn a_file_read_in_a_green_thread_is_libcs_when_the_program_asks_for_a_directory() {
    greenweave::run(|| {
        let directory = File::open(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let mut buffer = [0; 8];
        let error = (&directory).read(&mut buffer).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EISDIR));
    });
}
