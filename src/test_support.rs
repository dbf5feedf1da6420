//! Helpers shared by the crate's unit tests (compiled only for them).

use std::cell::Cell;
use std::rc::Rc;

/// Counts its drops in a shared cell.
pub(crate) struct DropCounter(pub(crate) Rc<Cell<usize>>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}
