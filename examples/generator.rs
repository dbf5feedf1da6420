//! A coroutine as a generator: the Fibonacci numbers, consumed as an iterator.
//!
//! Run with `cargo run --example generator [count]`.

use greenweave::Coroutine;

fn main() {
    let count: usize = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(20);

    // The body runs on its own stack; each `suspend` hands one number to the consumer and
    // waits there until the next one is wanted.
    let fibonacci = Coroutine::new(|yielder, ()| {
        let (mut a, mut b) = (0u64, 1u64);
        loop {
            yielder.suspend(a);
            (a, b) = (
                b,
                a.checked_add(b)
                    .expect("u64 overflow: ask for fewer numbers"),
            );
        }
    });

    for (index, number) in fibonacci.take(count).enumerate() {
        println!("fib({index}) = {number}");
    }
    // Dropping the iterator unwinds the suspended coroutine and frees its stack.
}
