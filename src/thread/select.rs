//! How a [`JoinHandle`] takes part in a [`Select`](crate::sync::select::Select): ready once the
//! green thread has finished; waits in its task's joiner slot, as `join` does.

use std::rc::Rc;

use crate::runtime::scheduler::with_scheduler;
use crate::runtime::task::{Joiner, Task};
use crate::sync::select::sealed::{Operand, Sealed};
use crate::sync::select::{Operation, OperationKind};
use crate::sync::wait_queue::Registration;

use super::JoinHandle;

impl<T> Operation for JoinHandle<T> {
    fn is_ready(&self) -> bool {
        self.is_finished()
    }

    fn register(&self, task: &Rc<Task>, park: u64) -> Option<Registration> {
        if with_scheduler("Select::select", |scheduler| {
            scheduler.is_current(&self.task)
        }) {
            panic!(
                "greenweave: a green thread cannot select on joining itself (it would wait \
                 forever)"
            );
        }
        // A green thread has one joiner slot; `join` takes the handle, so only a handle shared
        // through an `Rc` can have two green threads wait on it.
        let joiner = self.task.joiner.take();
        if let Some(Joiner::Green(other, other_park)) = &joiner
            && other.is_in_park(*other_park)
            && !Rc::ptr_eq(other, task)
        {
            self.task.joiner.set(joiner);
            panic!(
                "greenweave: two green threads wait to join green thread {} at once (a \
                 JoinHandle shared through an Rc); only one can",
                self.task.id
            );
        }
        drop(joiner);
        self.task
            .joiner
            .set(Some(Joiner::Green(task.clone(), park)));
        None
    }

    fn deregister(&self, task: &Task, park: u64, _registration: Option<Registration>) -> bool {
        match self.task.joiner.take() {
            Some(Joiner::Green(joiner, joiner_park)) if std::ptr::eq(Rc::as_ptr(&joiner), task) => {
                // Ours, still there (unless from an earlier park, which is stale anyway).
                joiner_park != park
            }
            other => {
                // Taken by the green thread's end (which woke us), or another's: left as it is.
                self.task.joiner.set(other);
                true
            }
        }
    }

    fn kind(&self) -> OperationKind {
        OperationKind::Join(self.task.id)
    }
}

impl<T> Sealed for JoinHandle<T> {
    fn operand(&self) -> Operand<'_> {
        Operand::operation(self, Rc::as_ptr(&self.task).cast())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::sync::select::Select;

    #[test]
    fn a_select_that_gives_up_on_a_join_leaves_the_joiner_slot_empty() {
        crate::run(|| {
            let (tx, rx) = crate::sync::oneshot::channel::<()>();
            let worker = crate::spawn(move || rx.recv().is_ok());
            let mut select = Select::new();
            select.join(&worker);
            assert!(select.select_timeout(Duration::from_millis(1)).is_err());
            let joiner = worker.task.joiner.take();
            assert!(joiner.is_none());
            tx.send(()).unwrap();
            assert!(worker.join().unwrap());
        });
    }
}
