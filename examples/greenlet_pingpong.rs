//! The classic greenlet demo: two functions hand control back and forth with `switch`.
//!
//! `test1` prints 12 and switches to `test2`, which prints 56 and switches back; `test1`
//! prints 34 and switches again; `test2` prints 78 and returns, which hands control to its
//! parent (main). `test1` never finishes: when its last handle is dropped it is unwound.
//!
//! Run with `cargo run --example greenlet_pingpong`; the output is `12 56 34 78`, one per line.

use std::cell::OnceCell;
use std::rc::Rc;

use greenweave::greenlet::Greenlet;

fn main() {
    // Each greenlet needs a handle to the other; the second is created after the first, so
    // the first reaches it through a shared cell.
    let gr2_slot: Rc<OnceCell<Greenlet<()>>> = Rc::new(OnceCell::new());

    let slot = gr2_slot.clone();
    let gr1 = Greenlet::new(move |()| {
        let gr2 = slot.get().expect("gr2 exists before gr1 runs");
        println!("12");
        gr2.switch(());
        println!("34");
        gr2.switch(());
        unreachable!("gr2 returns to main, its parent, so gr1 is never resumed again");
    });
    let gr1_for_2 = gr1.clone();
    let gr2 = Greenlet::new(move |()| {
        println!("56");
        gr1_for_2.switch(());
        println!("78");
    });
    gr2_slot.set(gr2).expect("set once");

    gr1.switch(());
    // Back in main: gr2 finished and handed its result to its parent. gr1 is still suspended;
    // breaking the cycle of handles and dropping gr1 unwinds it.
    drop(gr2_slot);
    assert!(gr1.is_active());
}
