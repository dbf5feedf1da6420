//! A three-stage pipeline over bounded green channels:
//!
//! 1. a producer lists the files to process (it writes them first, into a temporary folder);
//! 2. a pool of worker green threads, sharing one receiver, hashes each file; reading and
//!    hashing a file would block, so each worker hands it to `greenweave::unblock` and parks
//!    while a helper OS thread does it;
//! 3. a collector checks every digest against the one computed when the file was written,
//!    and reports throughput.
//!
//! Bounded channels give back-pressure: the producer parks when the workers fall behind.
//!
//! `cargo run --release --example pipeline -- [--files N] [--size BYTES] [--workers W]`

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use greenweave::sync::mpsc;

struct Options {
    files: usize,
    size: usize,
    workers: usize,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        files: 64,
        size: 256 * 1024,
        workers: 4,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            args.next()
                .and_then(|text| text.parse().ok())
                .ok_or_else(|| format!("{name} needs a whole number"))
        };
        match flag.as_str() {
            "--files" => options.files = value("--files")?,
            "--size" => options.size = value("--size")?,
            "--workers" => options.workers = value("--workers")?.max(1),
            "--help" | "-h" => {
                return Err("usage: pipeline [--files N] [--size BYTES] [--workers W]".into());
            }
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    Ok(options)
}

/// A file's digest: 64-bit SipHash of its bytes (std's `DefaultHasher`), enough to check
/// that every file went through the pipeline intact.
fn digest(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

/// Deterministic content for file `index`.
fn content(index: usize, size: usize) -> Vec<u8> {
    let mut state = (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn main() {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let folder = std::env::temp_dir().join(format!("greenweave-pipeline-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("create a temporary folder");
    let mut expected = Vec::with_capacity(options.files);
    for index in 0..options.files {
        let bytes = content(index, options.size);
        expected.push(digest(&bytes));
        std::fs::write(folder.join(format!("{index}.bin")), &bytes).expect("write a test file");
    }

    let (checked, bytes, elapsed) = greenweave::run({
        let folder = folder.clone();
        let workers = options.workers;
        move || {
            let start = Instant::now();
            // Stage 1 -> 2: paths; stage 2 -> 3: (index, size, digest). Small bounds, so the
            // stages run in lockstep instead of buffering everything.
            let (paths_in, paths_out) = mpsc::sync_channel::<(usize, PathBuf)>(8);
            let (digests_in, digests_out) = mpsc::sync_channel::<(usize, u64, u64)>(8);

            let producer = greenweave::spawn(move || {
                for index in 0..expected.len() {
                    let path = folder.join(format!("{index}.bin"));
                    paths_in
                        .send((index, path))
                        .expect("the workers outlive the producer");
                }
                expected
            });

            let paths_out = Rc::new(paths_out);
            for _ in 0..workers {
                let paths_out = paths_out.clone();
                let digests_in = digests_in.clone();
                greenweave::spawn(move || {
                    for (index, path) in paths_out.iter() {
                        // Reading and hashing a file blocks: a helper OS thread does it.
                        let (size, sum) = greenweave::unblock(move || {
                            let bytes = std::fs::read(&path).expect("read a test file");
                            (bytes.len() as u64, digest(&bytes))
                        });
                        digests_in
                            .send((index, size, sum))
                            .expect("the collector is running");
                    }
                });
            }
            drop(digests_in);

            let mut results = Vec::new();
            for (index, size, sum) in digests_out.iter() {
                results.push((index, size, sum));
            }
            let expected = producer.join().expect("the producer does not panic");
            let mut bytes = 0;
            for (index, size, sum) in &results {
                assert_eq!(*sum, expected[*index], "file {index} arrived intact");
                bytes += size;
            }
            (results.len(), bytes, start.elapsed())
        }
    });
    std::fs::remove_dir_all(&folder).expect("remove the temporary folder");

    let seconds = elapsed.as_secs_f64();
    println!(
        "{checked} files ({:.1} MiB) hashed by {} workers in {:.3} s: {:.0} files/s, {:.1} MiB/s, every digest checked",
        bytes as f64 / (1024.0 * 1024.0),
        options.workers,
        seconds,
        checked as f64 / seconds,
        bytes as f64 / (1024.0 * 1024.0) / seconds
    );
}
