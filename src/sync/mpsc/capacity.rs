//! How full a channel is, crossbeam's `len`, `is_empty`, `is_full` and `capacity`, on every
//! end of a channel: a snapshot, for logging and back-pressure heuristics, never a promise
//! (another green thread may send or receive before the caller acts on it).
//!
//! The numbers are crossbeam's: an unbounded channel has no capacity (`None`) and is never
//! full; a rendezvous channel (`sync_channel(0)`) has capacity `Some(0)`, holds nothing
//! (`len` 0, empty) and is always full, even while a sender waits with its message (the
//! message is handed over, not stored); a bounded channel counts its queued messages.
//! Messages sent by a [`RemoteSender`](super::RemoteSender) and not received yet count too.
//!
//! May not: change the channel; lock anything but the remote inbox's lock, briefly.

use super::{Receiver, Sender, Shared, SyncSender};

impl<T> Shared<T> {
    fn len(&self) -> usize {
        if self.bound == Some(0) {
            return 0;
        }
        let remote = self
            .inbox
            .get()
            .map_or(0, |inbox| inbox.lock().messages.len());
        self.queue.len() + remote
    }

    fn is_full(&self) -> bool {
        self.bound.is_some_and(|bound| self.len() >= bound)
    }
}

impl<T> Sender<T> {
    /// The number of messages in the channel, sent and not yet received.
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, rx) = mpsc::channel();
    /// tx.send('a').unwrap();
    /// tx.send('b').unwrap();
    /// assert_eq!(tx.len(), 2);
    /// # drop(rx);
    /// ```
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// Whether the channel holds no message.
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, rx) = mpsc::channel();
    /// assert!(tx.is_empty());
    /// tx.send(1).unwrap();
    /// assert!(!tx.is_empty());
    /// # drop(rx);
    /// ```
    pub fn is_empty(&self) -> bool {
        self.shared.len() == 0
    }

    /// Whether the channel is full: never, for an unbounded channel.
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, _rx) = mpsc::channel();
    /// (0..1000).for_each(|n| tx.send(n).unwrap());
    /// assert!(!tx.is_full());
    /// ```
    pub fn is_full(&self) -> bool {
        false
    }

    /// The most messages the channel holds: `None`, it is unbounded.
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, _rx) = mpsc::channel::<u8>();
    /// assert_eq!(tx.capacity(), None);
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        None
    }
}

impl<T> SyncSender<T> {
    /// The number of messages in the channel, sent and not yet received (0 on a rendezvous
    /// channel, which stores none).
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, rx) = mpsc::sync_channel(3);
    /// tx.send(1).unwrap();
    /// tx.send(2).unwrap();
    /// assert_eq!(tx.len(), 2);
    /// # drop(rx);
    /// ```
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// Whether the channel holds no message (always, for a rendezvous channel).
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, rx) = mpsc::sync_channel(1);
    /// assert!(tx.is_empty());
    /// tx.send(1).unwrap();
    /// assert!(!tx.is_empty());
    /// # drop(rx);
    /// ```
    pub fn is_empty(&self) -> bool {
        self.shared.len() == 0
    }

    /// Whether the channel holds as many messages as it can, so that a `send` would wait
    /// (always, for a rendezvous channel: a send there waits for a receiver).
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, rx) = mpsc::sync_channel(1);
    /// assert!(!tx.is_full());
    /// tx.send(1).unwrap();
    /// assert!(tx.is_full());
    /// # drop(rx);
    /// ```
    pub fn is_full(&self) -> bool {
        self.shared.is_full()
    }

    /// The most messages the channel holds: the bound it was made with (`Some(0)` for a
    /// rendezvous channel).
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, _rx) = mpsc::sync_channel::<u8>(4);
    /// assert_eq!(tx.capacity(), Some(4));
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        self.shared.bound
    }
}

impl<T> Receiver<T> {
    /// The number of messages waiting to be received (0 on a rendezvous channel, which
    /// stores none).
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, rx) = mpsc::channel();
    /// tx.send(1).unwrap();
    /// tx.send(2).unwrap();
    /// assert_eq!(rx.len(), 2);
    /// assert_eq!(rx.try_recv(), Ok(1));
    /// assert_eq!(rx.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// Whether no message is waiting to be received.
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, rx) = mpsc::channel();
    /// assert!(rx.is_empty());
    /// tx.send(1).unwrap();
    /// assert!(!rx.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.shared.len() == 0
    }

    /// Whether the channel holds as many messages as it can: never for an unbounded channel,
    /// always for a rendezvous channel.
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (tx, rx) = mpsc::sync_channel(2);
    /// tx.send(1).unwrap();
    /// assert!(!rx.is_full());
    /// tx.send(2).unwrap();
    /// assert!(rx.is_full());
    /// ```
    pub fn is_full(&self) -> bool {
        self.shared.is_full()
    }

    /// The most messages the channel holds: `None` for an unbounded channel, the bound for a
    /// bounded one (`Some(0)` for a rendezvous channel).
    ///
    /// ```
    /// use greenweave::sync::mpsc;
    ///
    /// let (_tx, rx) = mpsc::channel::<u8>();
    /// assert_eq!(rx.capacity(), None);
    /// let (_tx, rx) = mpsc::sync_channel::<u8>(0);
    /// assert_eq!(rx.capacity(), Some(0));
    /// ```
    pub fn capacity(&self) -> Option<usize> {
        self.shared.bound
    }
}
