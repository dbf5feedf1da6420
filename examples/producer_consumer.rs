//! Producer and consumer as coroutines: the baozi shop.
//!
//! The consumer is a coroutine that waits for baozi. The producer (plain code on the main
//! stack) makes one at a time and hands it over with `resume(Some(baozi))`; the consumer eats
//! it and suspends with an acknowledgement, which is what that `resume` returns. When the
//! producer is done it sends `None`, and the consumer returns how many it ate. No threads, no
//! locks, no queue: control passes back and forth on one thread, so the output is always the
//! same.
//!
//! Run with `cargo run --example producer_consumer [count]`.

use greenweave::{Coroutine, CoroutineResult};

/// What the producer hands over.
struct Baozi {
    number: u32,
    filling: &'static str,
}

const FILLINGS: [&str; 3] = ["pork", "mushroom", "red bean"];

fn main() {
    let count: u32 = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(5);

    // Input: the next baozi, or `None` when the shop closes. Yield: an acknowledgement.
    // Return: how many were eaten.
    let mut consumer = Coroutine::new(|yielder, first: Option<Baozi>| {
        let mut eaten = 0;
        let mut next = first;
        while let Some(baozi) = next {
            println!(
                "[consumer] eating baozi {} ({})",
                baozi.number, baozi.filling
            );
            eaten += 1;
            // Hand the acknowledgement back and wait here for the next baozi.
            next = yielder.suspend(format!("baozi {} was delicious", baozi.number));
        }
        println!("[consumer] no more baozi, going home");
        eaten
    });

    for number in 1..=count {
        let filling = FILLINGS[(number as usize - 1) % FILLINGS.len()];
        println!("[producer] making baozi {number} ({filling})");
        match consumer.resume(Some(Baozi { number, filling })) {
            CoroutineResult::Yield(ack) => println!("[producer] consumer says: {ack}"),
            CoroutineResult::Return(_) => unreachable!("the consumer stops only when told to"),
        }
    }

    println!("[producer] closing the shop");
    match consumer.resume(None) {
        CoroutineResult::Return(eaten) => println!("[producer] the consumer ate {eaten} baozi"),
        CoroutineResult::Yield(_) => unreachable!("the consumer returns once the shop closes"),
    }
}
