//! A FIFO ring buffer whose capacity is a power of two, for the queues on the hottest paths:
//! the scheduler's ready queue and a channel's messages.
//!
//! Owns: [`Ring`], a growable queue like `VecDeque`, but wrapping its indices with a mask
//! instead of a compare-and-subtract (`VecDeque` keeps capacities that are not powers of two),
//! so a push or a pop is a handful of instructions: a channel ping-pong round trip makes eight
//! of them.
//! May not: run code of its users while it is being modified (it only moves values in and
//! out; it drops values only in its own `Drop`), so that callers may keep it in an
//! `UnsafeCell` and hand out no reference into it.

use std::mem::MaybeUninit;

/// A first-in first-out queue in a ring of `2^k` slots (or none, before the first push).
pub(crate) struct Ring<T> {
    /// The slots; `slots.len()` is zero or a power of two. Slots `head`, `head + 1`, ...,
    /// `head + len - 1` (each modulo the capacity) hold values; the others are uninitialised.
    slots: Box<[MaybeUninit<T>]>,
    /// The capacity minus one, which wraps an index into it: a field of its own, so a push or
    /// a pop need not compute it (with no slots it is `usize::MAX`, and never used: a push
    /// grows first, and nothing else touches a slot of an empty ring).
    mask: usize,
    head: usize,
    len: usize,
}

impl<T> Ring<T> {
    /// An empty ring; allocates nothing until the first push.
    pub(crate) fn new() -> Ring<T> {
        Ring {
            slots: Box::new([]),
            mask: usize::MAX,
            head: 0,
            len: 0,
        }
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot of the value `offset` places behind the front (which may be unfilled).
    #[inline(always)]
    fn slot(&mut self, offset: usize) -> *mut MaybeUninit<T> {
        // The capacity is a power of two, so the mask wraps the index into it; with no slots
        // at all callers never get here (`push_back` grows first, the others find `len` 0).
        let index = (self.head + offset) & self.mask;
        // SAFETY: `index` is below the capacity (masked, and the capacity is not zero here).
        unsafe { self.slots.as_mut_ptr().add(index) }
    }

    /// Queues `value` at the back.
    #[inline(always)]
    pub(crate) fn push_back(&mut self, value: T) {
        if self.len == self.slots.len() {
            self.grow();
        }
        let slot = self.slot(self.len);
        // SAFETY: the slot `len` places behind the front is free (the ring is not full).
        unsafe { (*slot).write(value) };
        self.len += 1;
    }

    /// Takes the value at the front.
    #[inline(always)]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let slot = self.slot(0);
        // SAFETY: the front slot holds a value (`len` > 0), read once: it is free from here.
        let value = unsafe { (*slot).assume_init_read() };
        self.head = (self.head + 1) & self.mask;
        self.len -= 1;
        Some(value)
    }

    /// The value `offset` places behind the front, if there is one.
    #[inline(always)]
    pub(crate) fn get(&self, offset: usize) -> Option<&T> {
        if offset >= self.len {
            return None;
        }
        // SAFETY: the first `len` slots from the front hold values; `offset` is below it.
        Some(unsafe { self.slots[(self.head + offset) & self.mask].assume_init_ref() })
    }

    /// The values, front to back.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        (0..self.len).map(move |offset| {
            // SAFETY: the first `len` slots from the front hold values.
            unsafe { self.slots[(self.head + offset) & self.mask].assume_init_ref() }
        })
    }

    /// Takes out the value `at` places behind the front, keeping the others' order.
    pub(crate) fn remove(&mut self, at: usize) -> Option<T> {
        if at >= self.len {
            return None;
        }
        let slot = self.slot(at);
        // SAFETY: the slot holds a value (`at` < `len`), read once and replaced below.
        let value = unsafe { (*slot).assume_init_read() };
        for offset in at..self.len - 1 {
            let (to, from) = (self.slot(offset), self.slot(offset + 1));
            // SAFETY: `from` holds a value, moved down into `to`, which was just emptied; it
            // is the next one emptied.
            unsafe { (*to).write((*from).assume_init_read()) };
        }
        self.len -= 1;
        Some(value)
    }

    /// Doubles the capacity (to 4 from none), moving the values to the front of the new slots.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let capacity = (self.slots.len() * 2).max(4);
        let mut slots: Box<[MaybeUninit<T>]> = Box::new_uninit_slice(capacity);
        for (offset, to) in slots.iter_mut().enumerate().take(self.len) {
            let from = self.slot(offset);
            // SAFETY: the first `len` slots from the front hold values, each moved once.
            unsafe { to.write((*from).assume_init_read()) };
        }
        self.slots = slots;
        self.mask = capacity - 1;
        self.head = 0;
    }
}

impl<T> Default for Ring<T> {
    fn default() -> Ring<T> {
        Ring::new()
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        while let Some(value) = self.pop_front() {
            drop(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::Ring;
    use crate::test_support::DropCounter;

    #[test]
    fn a_ring_hands_values_back_in_arrival_order_across_growth_and_wrap_around() {
        let mut ring = Ring::new();
        let mut expected = std::collections::VecDeque::new();
        let mut next = 0u32;
        // Pushes outpace pops, so the ring wraps at every capacity it grows through.
        for round in 0..200 {
            for _ in 0..3 {
                ring.push_back(next);
                expected.push_back(next);
                next += 1;
            }
            for _ in 0..(round % 3) {
                assert_eq!(ring.pop_front(), expected.pop_front());
            }
            assert_eq!(ring.len(), expected.len());
            assert!(ring.iter().eq(expected.iter()));
        }
        while let Some(value) = expected.pop_front() {
            assert_eq!(ring.pop_front(), Some(value));
        }
        assert!(ring.is_empty());
        assert_eq!(ring.pop_front(), None);
    }

    #[test]
    fn removing_from_a_wrapped_ring_keeps_the_others_in_order() {
        let mut ring = Ring::new();
        for value in 0..6 {
            ring.push_back(value);
        }
        for _ in 0..4 {
            ring.pop_front();
        }
        for value in 6..11 {
            ring.push_back(value); // 4..=10 now, wrapped in 8 slots
        }
        assert_eq!(ring.remove(3), Some(7));
        assert_eq!(ring.remove(0), Some(4));
        assert_eq!(ring.remove(9), None);
        assert_eq!(ring.iter().copied().collect::<Vec<_>>(), [5, 6, 8, 9, 10]);
    }

    #[test]
    fn a_dropped_ring_drops_each_value_it_still_holds_once() {
        let drops = Rc::new(Cell::new(0));
        let mut ring = Ring::new();
        for _ in 0..10 {
            ring.push_back(DropCounter(drops.clone()));
        }
        drop(ring.pop_front());
        assert_eq!(drops.get(), 1);
        drop(ring.remove(4));
        assert_eq!(drops.get(), 2);
        drop(ring);
        assert_eq!(drops.get(), 10);
    }
}
