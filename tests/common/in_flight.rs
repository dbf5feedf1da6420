//! A count of things in progress at once and the most ever seen, shared by the green threads of
//! one runtime (one OS thread: `Cell` is enough). For the tests that show concurrency by how
//! many requests were in flight together, never by elapsed time.

use std::cell::Cell;
use std::rc::Rc;

#[derive(Default)]
pub struct InFlight {
    pub now: Cell<usize>,
    pub most: Cell<usize>,
}

impl InFlight {
    /// Counts one more in progress until the returned guard drops.
    pub fn enter(self: &Rc<Self>) -> impl Drop {
        self.now.set(self.now.get() + 1);
        self.most.set(self.most.get().max(self.now.get()));
        struct Leave(Rc<InFlight>);
        impl Drop for Leave {
            fn drop(&mut self) {
                self.0.now.set(self.0.now.get() - 1);
            }
        }
        Leave(self.clone())
    }
}
