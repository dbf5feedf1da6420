//! How a timer channel's receiver takes part in a [`Select`](crate::sync::select::Select):
//! ready once its message is due, and, since nobody sends, waited for through the select's own
//! park: its instant bounds the park's deadline (`Operation::ready_at`), so the scheduler's
//! timer wakes the select. The chosen receive completes with the receiver's own `recv`.
//!
//! May not: register anywhere (there is no queue to wake it).

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use crate::runtime::task::Task;
use crate::sync::select::sealed::{Operand, Sealed};
use crate::sync::select::{Operation, OperationKind, ReceiveEnd};
use crate::sync::wait_queue::Registration;

use super::{Receiver, RecvError};

impl Operation for Receiver {
    fn is_ready(&self) -> bool {
        self.has_message()
    }

    fn register(&self, _task: &Rc<Task>, _park: u64) -> Option<Registration> {
        None
    }

    fn deregister(&self, _task: &Task, _park: u64, _registration: Option<Registration>) -> bool {
        false
    }

    fn kind(&self) -> OperationKind {
        OperationKind::Recv
    }

    fn ready_at(&self) -> Option<Instant> {
        self.due()
    }
}

impl Sealed for Receiver {
    fn operand(&self) -> Operand<'_> {
        Operand::operation(self, Arc::as_ptr(&self.timer).cast())
    }
}

impl ReceiveEnd for Receiver {
    type Message = Instant;

    /// Takes the message the select found without spending the cooperative budget (`recv`
    /// does, and a spent budget yields: another green thread sharing the receiver could take
    /// the message meanwhile). Only if a clone on another OS thread took it first does this
    /// wait, as `recv` does, for the next one.
    fn recv_selected(&self) -> Result<Instant, RecvError> {
        match self.take(Instant::now()) {
            Some(message) => Ok(message),
            None => self.recv(),
        }
    }
}
