//! asyncio's `crawl_page` example, with green threads: four "page fetches" that each wait
//! 1, 2, 3 and 4 seconds run at the same time, so the whole crawl takes about 4 seconds, not
//! 10.
//!
//! The Python original:
//!
//! ```python
//! async def crawl_page(url):
//!     print('crawling', url)
//!     await asyncio.sleep(int(url.split('_')[-1]))
//!     print('OK', url)
//!
//! async def main(urls):
//!     tasks = [asyncio.create_task(crawl_page(url)) for url in urls]
//!     for task in tasks:
//!         await task
//!
//! asyncio.run(main(['url_1', 'url_2', 'url_3', 'url_4']))
//! ```
//!
//! Here `crawl_page` is an ordinary function: `sleep` parks only its own green thread, so no
//! `async`/`await` colouring is needed, and `spawn` plus `join` play `create_task` and
//! `await task`.
//!
//! ```sh
//! cargo run --example crawl                  # about 4 s
//! cargo run --example crawl -- --scale 0.01  # every wait scaled down: about 40 ms
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use greenweave::thread;

const USAGE: &str = "usage: crawl [--scale FACTOR]

  --scale FACTOR   multiply every page's wait (1 to 4 s) by FACTOR (default 1.0)";

fn parse_scale() -> Result<f64, String> {
    let mut scale = 1.0;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        match flag.as_str() {
            "--scale" => {
                let text = inline
                    .or_else(|| args.next())
                    .ok_or("--scale needs a value")?;
                scale = text
                    .parse::<f64>()
                    .ok()
                    .filter(|scale| scale.is_finite() && *scale >= 0.0)
                    .ok_or_else(|| format!("--scale: not a factor >= 0: {text:?}"))?;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    Ok(scale)
}

/// Pretends to fetch `url`, which takes `seconds`; returns what it "fetched".
fn crawl_page(url: &str, seconds: f64, start: Instant) -> String {
    println!("crawling {url}");
    thread::sleep(Duration::from_secs_f64(seconds));
    println!(
        "OK {url} ({:.3} s after the start)",
        start.elapsed().as_secs_f64()
    );
    format!("<html>{url}</html>")
}

fn main() -> ExitCode {
    let scale = match parse_scale() {
        Ok(scale) => scale,
        Err(message) => {
            eprintln!("crawl: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let urls = ["url_1", "url_2", "url_3", "url_4"];
    greenweave::run(move || {
        let start = Instant::now();
        let tasks: Vec<_> = urls
            .into_iter()
            .map(|url| {
                // The page's wait is the number at the end of its name.
                let seconds = url.rsplit('_').next().unwrap().parse::<f64>().unwrap() * scale;
                greenweave::spawn(move || crawl_page(url, seconds, start))
            })
            .collect();
        for task in tasks {
            let page = task.join().expect("crawl_page does not panic");
            assert!(page.starts_with("<html>"));
        }
        let sequential: f64 = (1..=urls.len()).map(|n| n as f64 * scale).sum();
        println!(
            "all {} pages crawled in {:.3} s (one after another it would take {:.3} s)",
            urls.len(),
            start.elapsed().as_secs_f64(),
            sequential
        );
    });
    ExitCode::SUCCESS
}
