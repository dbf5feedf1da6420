//! How a oneshot receiver takes part in a [`Select`](crate::sync::select::Select): ready once
//! the value is there or the sender is gone; waits in the channel's queue.

use std::rc::Rc;

use crate::runtime::task::Task;
use crate::sync::select::sealed::{Operand, Sealed};
use crate::sync::select::{Operation, OperationKind, ReceiveEnd};
use crate::sync::wait_queue::Registration;

use super::{Receiver, RecvError};

impl<T> Operation for Receiver<T> {
    fn is_ready(&self) -> bool {
        self.shared.value.borrow().is_some() || !self.shared.sender_alive.get()
    }

    fn register(&self, task: &Rc<Task>, park: u64) -> Option<Registration> {
        Some(self.shared.receiver_waiting.push(task.clone(), park))
    }

    fn deregister(&self, _task: &Task, _park: u64, registration: Option<Registration>) -> bool {
        registration.is_some_and(|registration| !self.shared.receiver_waiting.remove(registration))
    }

    fn pass_on(&self) {
        self.shared.receiver_waiting.notify_one();
    }

    fn kind(&self) -> OperationKind {
        OperationKind::Recv
    }
}

impl<T> Sealed for Receiver<T> {
    fn operand(&self) -> Operand<'_> {
        Operand::operation(self, Rc::as_ptr(&self.shared).cast())
    }
}

impl<T> ReceiveEnd for Receiver<T> {
    type Message = T;

    fn recv_selected(&self) -> Result<T, RecvError> {
        self.recv()
    }
}
