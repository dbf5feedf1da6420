//! How the ends of a channel take part in a [`Select`](crate::sync::select::Select): when each
//! is ready, where a select waits for it (the channel's own wait queues, and the remote inbox's
//! list of waiting receivers), and how the chosen one completes (the end's own `recv`/`send`).
//!
//! May not: change what the plain operations do; a select waits in the same queues as they do.

use std::cell::Cell;
use std::rc::Rc;

use crate::runtime::scheduler::{self, with_scheduler};
use crate::runtime::task::Task;
use crate::sync::select::sealed::{Operand, Sealed};
use crate::sync::select::{Operation, OperationKind, ReceiveEnd, SendEnd};
use crate::sync::wait_queue::Registration;

use super::{Receiver, RecvError, SendError, Sender, Shared, SyncSender};

impl<T> Operation for Receiver<T> {
    fn is_ready(&self) -> bool {
        let shared = &self.shared;
        !shared.queue.is_empty()
            || shared
                .inbox
                .get()
                .is_some_and(|inbox| !inbox.lock().messages.is_empty())
            || self.is_disconnected()
    }

    fn register(&self, task: &Rc<Task>, park: u64) -> Option<Registration> {
        let shared = &self.shared;
        let registration = shared.receivers_waiting.push(task.clone(), park);
        if let Some(inbox) = shared.inbox.get() {
            // As `Receiver::recv` does: be woken by remote sends, through this runtime.
            let mut state = inbox.lock();
            with_scheduler("Select::select", |scheduler| {
                state.follow(&scheduler.remote)
            });
            state.waiting.push(task.key());
            if !state.messages.is_empty() || state.senders == 0 {
                state.remote.wake(task.key());
            }
        }
        if shared.bound == Some(0) {
            // A select waiting to send on this rendezvous channel waits for a receiver.
            shared.senders_waiting.notify_one();
        }
        Some(registration)
    }

    fn deregister(&self, task: &Task, _park: u64, registration: Option<Registration>) -> bool {
        let shared = &self.shared;
        let consumed =
            registration.is_some_and(|registration| !shared.receivers_waiting.remove(registration));
        if let Some(inbox) = shared.inbox.get() {
            let me = task.key();
            inbox.lock().waiting.retain(|&key| key != me);
        }
        consumed
    }

    fn pass_on(&self) {
        self.shared.receivers_waiting.notify_one();
    }

    fn kind(&self) -> OperationKind {
        OperationKind::Recv
    }

    fn hand_off(&self) -> bool {
        self.hand_off()
    }
}

impl<T> Receiver<T> {
    /// A receive that does not park, on a rendezvous channel whose queue is empty: if a
    /// select is parked waiting to send here, wakes it with this receive counted as a
    /// receiver present, and yields once. The ready queue is FIFO, so that select runs
    /// before this green thread resumes: it either sends (its message is then in the
    /// channel, and this returns true) or takes another operation. A try_ call switches
    /// only here, and only when such a select exists.
    pub(super) fn hand_off(&self) -> bool {
        let shared = &self.shared;
        if shared.bound != Some(0)
            || !shared.queue.is_empty()
            || !scheduler::in_green_thread()
            || std::thread::panicking()
        {
            return false;
        }
        /// Counts the receive as present for the select's look, until it has looked (and on
        /// the way out of an unwind: the yield is a cancellation point).
        struct Present<'a>(&'a Cell<usize>);
        impl Drop for Present<'_> {
            fn drop(&mut self) {
                self.0.set(self.0.get() - 1);
            }
        }
        shared
            .receivers_handing_off
            .set(shared.receivers_handing_off.get() + 1);
        let present = Present(&shared.receivers_handing_off);
        // With the queue empty, the parked waiters of a rendezvous channel's senders are
        // selects (a plain sender's message is in the queue while it waits).
        if !shared.senders_waiting.notify_one() {
            return false;
        }
        scheduler::yield_now("Receiver::try_recv");
        drop(present);
        !shared.queue.is_empty()
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
        // The select found a message: take it without spending the cooperative budget, whose
        // end would yield first and let another receiver of this channel take it (the select
        // then waiting for one that may never come). Only what the select could not see ends
        // up in `recv`: a rendezvous sender that has yet to hand its message over.
        match self.try_recv() {
            Ok(message) => Ok(message),
            Err(super::TryRecvError::Disconnected) => Err(RecvError),
            Err(super::TryRecvError::Empty) => self.recv(),
        }
    }
}

/// An unbounded send never waits: always ready.
impl<T> Operation for Sender<T> {
    fn is_ready(&self) -> bool {
        true
    }

    fn register(&self, _task: &Rc<Task>, _park: u64) -> Option<Registration> {
        None
    }

    fn deregister(&self, _task: &Task, _park: u64, _registration: Option<Registration>) -> bool {
        false
    }

    fn kind(&self) -> OperationKind {
        OperationKind::Send
    }
}

impl<T> Sealed for Sender<T> {
    fn operand(&self) -> Operand<'_> {
        Operand::operation(self, Rc::as_ptr(&self.shared).cast())
    }
}

impl<T> SendEnd for Sender<T> {
    type Message = T;

    fn send_selected(&self, message: T) -> Result<(), SendError<T>> {
        self.send(message)
    }
}

impl<T> Shared<T> {
    /// Whether a bounded send would not wait: room (for a rendezvous, a receiver waiting and
    /// no message ahead of this one), or no receiver (the send fails at once).
    fn can_send_now(&self) -> bool {
        if !self.receiver_alive.get() {
            return true;
        }
        match self.bound {
            None => true,
            Some(0) => {
                self.queue.is_empty()
                    && (self.receivers_waiting.has_parked_waiter()
                        || self.receivers_handing_off.get() > 0)
            }
            Some(bound) => self.queue.len() < bound,
        }
    }
}

impl<T> Operation for SyncSender<T> {
    fn is_ready(&self) -> bool {
        self.shared.can_send_now()
    }

    fn register(&self, task: &Rc<Task>, park: u64) -> Option<Registration> {
        Some(self.shared.senders_waiting.push(task.clone(), park))
    }

    fn deregister(&self, _task: &Task, _park: u64, registration: Option<Registration>) -> bool {
        registration.is_some_and(|registration| !self.shared.senders_waiting.remove(registration))
    }

    fn pass_on(&self) {
        self.shared.senders_waiting.notify_one();
    }

    fn kind(&self) -> OperationKind {
        OperationKind::Send
    }
}

impl<T> Sealed for SyncSender<T> {
    fn operand(&self) -> Operand<'_> {
        Operand::operation(self, Rc::as_ptr(&self.shared).cast())
    }
}

impl<T> SendEnd for SyncSender<T> {
    type Message = T;

    fn send_selected(&self, message: T) -> Result<(), SendError<T>> {
        self.send(message)
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;
    use std::time::Duration;

    use crate::sync::mpsc;
    use crate::sync::select::Select;

    /// Waits on a receive from `rx` and a send on the full `tx`: the entries it leaves.
    fn entries<T>(rx: &mpsc::Receiver<T>, tx: &mpsc::SyncSender<T>) -> (usize, usize) {
        (
            rx.shared.receivers_waiting.entries(),
            tx.shared.senders_waiting.entries(),
        )
    }

    #[test]
    fn a_select_that_times_out_is_cancelled_or_is_ended_by_a_scope_leaves_no_entry_behind() {
        crate::run(|| {
            let (_idle_tx, rx) = mpsc::channel::<u8>();
            let (tx, _full_rx) = mpsc::sync_channel::<u8>(1);
            tx.send(0).unwrap();
            let (rx, tx) = (Rc::new(rx), Rc::new(tx));

            let mut select = Select::new();
            select.recv(&rx);
            select.send(&tx);
            assert!(select.select_timeout(Duration::from_millis(1)).is_err());
            assert_eq!(entries(&rx, &tx), (0, 0));

            let ended = crate::time::timeout(Duration::from_millis(1), || {
                let mut select = Select::new();
                select.recv(&rx);
                select.send(&tx);
                let _ = select.select();
                unreachable!("nothing becomes ready");
            });
            assert!(ended.is_err());
            assert_eq!(entries(&rx, &tx), (0, 0));

            let selecting = {
                let (rx, tx) = (rx.clone(), tx.clone());
                crate::spawn(move || {
                    let mut select = Select::new();
                    select.recv(&rx);
                    select.send(&tx);
                    let _ = select.select();
                })
            };
            crate::thread::yield_now(); // it parks
            assert_eq!(entries(&rx, &tx), (1, 1));
            selecting.cancel();
            assert!(selecting.join().unwrap_err().is_cancelled());
            assert_eq!(entries(&rx, &tx), (0, 0));
        });
    }
}
