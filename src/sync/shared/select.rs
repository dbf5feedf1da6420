//! How the ends of a shared channel take part in a [`Select`](crate::sync::select::Select):
//! when each is ready, where a select waits for it (the channel's own lists of waiters, as a
//! green thread of its runtime that any thread may wake), and how the chosen one completes
//! (the end's own `recv`/`send`).
//!
//! Every such operation tells the select it may be made ready by another OS thread, so the
//! deadlock report leaves the select alone, as it does a plain wait on a shared channel.
//!
//! May not: change what the plain operations do; hold the channel's lock while waking.

use std::rc::Rc;
use std::sync::Arc;

use crate::runtime::scheduler::with_scheduler;
use crate::runtime::task::{Task, TaskKey};
use crate::sync::select::sealed::{Operand, Sealed};
use crate::sync::select::{Operation, OperationKind, ReceiveEnd, SendEnd};
use crate::sync::wait_queue::Registration;

use super::{
    Chan, HAND_OFF_SEQ, Receiver, RecvError, Registration as ChannelRegistration, SELECT_SEQ,
    SendError, Sender, Side, State, SyncSender, Waiter, Waker, wake, wake_all,
};

impl<T> Chan<T> {
    /// Enters the running green thread, about to park in park number `park`, in `side`'s list
    /// as a select's entry; or, if `ready` holds already (another OS thread changed the
    /// channel since the select looked), makes sure it wakes at once.
    fn register_select(
        &self,
        side: Side,
        task: &Task,
        park: u64,
        ready: impl Fn(&Chan<T>, &State<T>) -> bool,
    ) {
        let remote = with_scheduler("Select::select", |scheduler| scheduler.remote.clone());
        let mut state = self.lock();
        if ready(self, &state) {
            drop(state);
            // The scheduler reads its wake-up queue only after this green thread's switch.
            remote.wake(task.key());
            return;
        }
        let id = state.next_waiter;
        state.next_waiter += 1;
        let waker = Waker::Green {
            remote,
            task: task.key(),
            park,
        };
        state.waiters(side).push_back(Waiter {
            id,
            seq: SELECT_SEQ,
            waker,
        });
        let select = if side == Side::Receive && self.bound == Some(0) {
            // A select waiting to send on this rendezvous channel waits for a receiver.
            state.select_sender()
        } else {
            None
        };
        drop(state);
        wake(select);
    }

    /// Takes the select's entry out of `side`'s list; returns whether it was gone already (a
    /// wake-up through this channel was consumed).
    fn deregister_select(&self, side: Side, task: &Task, park: u64) -> bool {
        let key = task.key();
        let mut state = self.lock();
        let waiters = state.waiters(side);
        let entry = waiters
            .iter()
            .position(|waiter| is_entry_of(waiter, key, park));
        match entry {
            Some(at) => {
                waiters.remove(at);
                false
            }
            None => {
                if side == Side::Send && self.bound == Some(0) && std::thread::panicking() {
                    // Woken by a receiver's arrival, and unwound before its look: the look
                    // that would have sent or passed the turn on never comes.
                    let next = self.receiver_not_met(&mut state);
                    drop(state);
                    wake_all(next);
                }
                true
            }
        }
    }

    /// A select waiting to send on this rendezvous channel, woken by a receiver's arrival,
    /// will not send (it took another operation, or is unwinding): the next select waiting to
    /// send gets the turn, or, if there is none, every receive that does not park and waits
    /// for such a select (`Receiver::hand_off`) is told that no message comes.
    fn receiver_not_met(&self, state: &mut State<T>) -> Vec<Waker> {
        if let Some(next) = state.select_sender() {
            return vec![next];
        }
        let (hand_offs, others) = std::mem::take(&mut state.receivers)
            .into_iter()
            .partition::<Vec<_>, _>(|waiter| waiter.seq == HAND_OFF_SEQ);
        state.receivers = others.into();
        hand_offs.into_iter().map(|waiter| waiter.waker).collect()
    }
}

impl<T> Receiver<T> {
    /// A receive that does not park, on a rendezvous channel whose queue is empty: if a
    /// select is waiting to send here, wakes it as a receiver's arrival does, with this
    /// receive first in line for its message, and waits (parking this green thread, or
    /// blocking this OS thread) until that select has sent (then returns true: the message is
    /// in the channel) or has taken another operation and no other select waiting to send
    /// takes the turn. The select may run on any OS thread, so this cannot be a yield.
    pub(super) fn hand_off(&self) -> bool {
        const WHAT: &str = "a shared rendezvous channel (try_recv, handing off to a select)";
        let chan = &*self.chan;
        if chan.bound != Some(0) || std::thread::panicking() {
            return false;
        }
        let select_waits = |state: &State<T>| {
            state
                .senders_waiting
                .iter()
                .any(|waiter| waiter.seq == SELECT_SEQ)
        };
        let mut registration = ChannelRegistration::new(chan, Side::Receive);
        let mut state = chan.lock();
        if !state.queue.is_empty() || state.senders == 0 || !select_waits(&state) {
            return false;
        }
        drop(state);
        loop {
            registration.wait(WHAT, HAND_OFF_SEQ, None, |state| {
                !state.queue.is_empty() || state.senders == 0 || !select_waits(state)
            });
            state = chan.lock();
            // Still in the list: not woken by the select or by its passing the turn on (a
            // spurious wake-up, or a `time::timeout` scope's look): wait again.
            let waiting = registration
                .id
                .is_some_and(|id| state.receivers.iter().any(|waiter| waiter.id == id));
            if !waiting || !state.queue.is_empty() || state.senders == 0 {
                break;
            }
            drop(state);
        }
        registration.leave(&mut state);
        !state.queue.is_empty()
    }
}

fn is_entry_of(waiter: &Waiter, key: TaskKey, park: u64) -> bool {
    waiter.seq == SELECT_SEQ
        && matches!(waiter.waker, Waker::Green { task, park: parked, .. }
            if task == key && parked == park)
}

fn receive_ready<T>(_chan: &Chan<T>, state: &State<T>) -> bool {
    !state.queue.is_empty() || state.senders == 0
}

/// Whether a send would not wait: room (on a rendezvous channel, a receiver waiting and no
/// message ahead), or no receiver (the send fails at once).
fn send_ready<T>(chan: &Chan<T>, state: &State<T>) -> bool {
    if !state.receiver_alive {
        return true;
    }
    match chan.bound {
        None => true,
        Some(0) => state.queue.is_empty() && !state.receivers.is_empty(),
        Some(_) => chan.has_room(state),
    }
}

impl<T> Operation for Receiver<T> {
    fn is_ready(&self) -> bool {
        receive_ready(&self.chan, &self.chan.lock())
    }

    fn register(&self, task: &Rc<Task>, park: u64) -> Option<Registration> {
        self.chan
            .register_select(Side::Receive, task, park, receive_ready);
        None
    }

    fn deregister(&self, task: &Task, park: u64, _registration: Option<Registration>) -> bool {
        self.chan.deregister_select(Side::Receive, task, park)
    }

    fn pass_on(&self) {
        let mut state = self.chan.lock();
        let next = if state.queue.is_empty() {
            None
        } else {
            state.receivers.pop_front()
        };
        drop(state);
        wake(next.map(|waiter| waiter.waker));
    }

    fn kind(&self) -> OperationKind {
        OperationKind::Recv
    }

    fn may_be_woken_from_another_thread(&self) -> bool {
        true
    }

    fn hand_off(&self) -> bool {
        self.hand_off()
    }
}

impl<T> Sealed for Receiver<T> {
    fn operand(&self) -> Operand<'_> {
        Operand::operation(self, Arc::as_ptr(&self.chan).cast())
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

    fn may_be_woken_from_another_thread(&self) -> bool {
        true
    }
}

impl<T> Sealed for Sender<T> {
    fn operand(&self) -> Operand<'_> {
        Operand::operation(self, Arc::as_ptr(&self.chan).cast())
    }
}

impl<T> SendEnd for Sender<T> {
    type Message = T;

    fn send_selected(&self, message: T) -> Result<(), SendError<T>> {
        self.send(message)
    }
}

impl<T> Operation for SyncSender<T> {
    fn is_ready(&self) -> bool {
        send_ready(&self.chan, &self.chan.lock())
    }

    fn register(&self, task: &Rc<Task>, park: u64) -> Option<Registration> {
        self.chan
            .register_select(Side::Send, task, park, send_ready);
        None
    }

    fn deregister(&self, task: &Task, park: u64, _registration: Option<Registration>) -> bool {
        self.chan.deregister_select(Side::Send, task, park)
    }

    fn pass_on(&self) {
        let mut state = self.chan.lock();
        let next = match self.chan.bound {
            // A receiver's arrival woke this select, which took another operation.
            Some(0) => self.chan.receiver_not_met(&mut state),
            _ if self.chan.has_room(&state) => {
                let next = state.senders_waiting.pop_front();
                next.map(|waiter| waiter.waker).into_iter().collect()
            }
            _ => Vec::new(),
        };
        drop(state);
        wake_all(next);
    }

    fn kind(&self) -> OperationKind {
        OperationKind::Send
    }

    fn may_be_woken_from_another_thread(&self) -> bool {
        true
    }
}

impl<T> Sealed for SyncSender<T> {
    fn operand(&self) -> Operand<'_> {
        Operand::operation(self, Arc::as_ptr(&self.chan).cast())
    }
}

impl<T> SendEnd for SyncSender<T> {
    type Message = T;

    /// Sends as [`SyncSender::send`] does. The select found room, but a sender on another OS
    /// thread may have taken it since: then this waits for room, as the plain send does.
    fn send_selected(&self, message: T) -> Result<(), SendError<T>> {
        self.send(message)
    }
}
