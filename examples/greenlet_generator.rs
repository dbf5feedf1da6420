//! Generators built from greenlets, as Python greenlet's documentation shows with `genlet`.
//!
//! A [`Genlet`] is a greenlet running the generator's body. `Iterator::next` makes the
//! greenlet that asks for a value the generator's parent, then switches into the generator;
//! [`yield_value`] switches a value to the parent of the current greenlet, that is, to
//! whoever asked. When the body returns, the greenlet dies, its `None` goes to the parent, and
//! the iteration ends.
//!
//! Because the parent is set on every `next`, generators nest: `primes` below iterates over
//! `naturals_from(2)` from inside its own greenlet, so the inner generator's values go to the
//! outer one, and the outer one's to `main`. Dropping an unfinished generator kills its
//! greenlet, so destructors on its stack run, including those of the generators it holds.
//!
//! Run with `cargo run --example greenlet_generator`; the output is:
//!
//! ```text
//! fibonacci: 0 1 1 2 3 5 8 13 21 34
//! (fibonacci unwound after 10 values)
//! countdown: 5 4 3 2 1 liftoff
//! primes: 2 3 5 7 11 13 17 19 23 29 31 37
//! (naturals unwound at 37)
//! ```

use std::cell::Cell;

use greenweave::greenlet::{self, Greenlet};

/// A generator of `V`s: a greenlet whose body hands values out with [`yield_value`].
struct Genlet<V: 'static> {
    greenlet: Greenlet<Option<V>>,
}

impl<V: 'static> Genlet<V> {
    fn new(body: impl FnOnce() + 'static) -> Self {
        Genlet {
            // The value that starts the body (a `None` from `next`) carries nothing; the
            // `None` it returns when done tells `next` that the generator is exhausted.
            greenlet: Greenlet::new(move |_: Option<V>| {
                body();
                None
            }),
        }
    }
}

impl<V: 'static> Iterator for Genlet<V> {
    type Item = V;

    fn next(&mut self) -> Option<V> {
        if self.greenlet.is_dead() {
            return None;
        }
        // Whoever asks for the next value is where `yield_value` sends it.
        self.greenlet
            .set_parent(&greenlet::current())
            .expect("a generator cannot ask itself for its next value");
        self.greenlet.switch(None)
    }
}

/// Closes an unfinished generator, as Python's `generator.close()` does: `GreenletExit` is
/// raised at its `yield_value`, so the destructors on its stack run.
///
/// Dropping the last handle of a suspended greenlet would do that by itself, but a suspended
/// generator is not always held by this handle alone: while it waits in `yield_value`, its
/// stack holds a handle to its asker, and when the asker is a generator that holds it in
/// turn (`primes` below), the two keep each other alive. So the kill is explicit, except while
/// this thread unwinds (a generator being closed drops the generators it draws from): a
/// greenlet does not switch while unwinding, so `throw` would be refused, and the handle this
/// drop lets go is the inner generator's last, which kills it as it goes.
impl<V: 'static> Drop for Genlet<V> {
    fn drop(&mut self) {
        if self.greenlet.is_active() && !std::thread::panicking() {
            // The generator's result (a `None`) comes back here rather than to its last asker.
            let _ = self.greenlet.set_parent(&greenlet::current());
            self.greenlet.throw();
        }
    }
}

/// Hands `value` to whoever called `next` on the running generator, and waits to be asked for
/// the next one.
fn yield_value<V: 'static>(value: V) {
    let asker = greenlet::current::<Option<V>>()
        .parent()
        .expect("yield_value called outside a generator");
    asker.switch(Some(value));
}

/// Prints a message when dropped: shows when a generator's stack is unwound.
struct OnUnwind<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnUnwind<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

fn fibonacci() -> Genlet<u64> {
    Genlet::new(|| {
        let yielded = Cell::new(0);
        let _note = OnUnwind(|| println!("(fibonacci unwound after {} values)", yielded.get()));
        let (mut a, mut b) = (0u64, 1u64);
        loop {
            yielded.set(yielded.get() + 1);
            yield_value(a);
            (a, b) = (b, a + b);
        }
    })
}

fn countdown(from: u32) -> Genlet<String> {
    Genlet::new(move || {
        for n in (1..=from).rev() {
            yield_value(n.to_string());
        }
        yield_value("liftoff".to_owned());
    })
}

fn naturals_from(start: u64) -> Genlet<u64> {
    Genlet::new(move || {
        let last = Cell::new(0);
        let _note = OnUnwind(|| println!("(naturals unwound at {})", last.get()));
        for n in start.. {
            last.set(n);
            yield_value(n);
        }
    })
}

/// Primes by trial division, drawing candidates from a nested generator.
fn primes() -> Genlet<u64> {
    Genlet::new(|| {
        let mut found: Vec<u64> = Vec::new();
        for n in naturals_from(2) {
            if found.iter().all(|p| n % p != 0) {
                found.push(n);
                yield_value(n);
            }
        }
    })
}

fn line<T: ToString>(label: &str, values: impl Iterator<Item = T>) {
    let values: Vec<String> = values.map(|value| value.to_string()).collect();
    println!("{label}: {}", values.join(" "));
}

fn main() {
    // Infinite: take what is needed; dropping the generator unwinds its stack.
    let mut fib = fibonacci();
    line("fibonacci", fib.by_ref().take(10));
    drop(fib);

    // Finite: the iteration ends when the body returns.
    line("countdown", countdown(5));

    // Nested: `primes` iterates `naturals_from(2)` inside its own greenlet.
    let mut primes = primes();
    line("primes", primes.by_ref().take(12));
    drop(primes);
}
