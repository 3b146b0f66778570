//! What the TUN inbound's UDP and ICMP echo sides share: a task per key (a UDP source, a `ping`
//! run) fed from the stack through a bounded queue and started at the key's first message
//! ([`Feeds`]), and the queue of packets those tasks build for the device ([`ToDevice`]).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, mpsc};

/// Whether `dst` concerns the local link only (multicast, broadcast: mDNS, SSDP, DHCP the
/// system sends into the device): such packets are dropped, not carried.
pub(super) fn link_only(dst: IpAddr) -> bool {
    match dst {
        IpAddr::V4(v4) => v4.is_multicast() || v4.is_broadcast(),
        IpAddr::V6(v6) => v6.is_multicast(),
    }
}

/// Why a message was not handed to its task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NotFed {
    /// Its key would need a task beyond the limit.
    TooMany,
    /// Its task's queue is full.
    QueueFull,
}

/// Tasks by key, each fed through a queue of `queue` messages; at most `max` at once.
pub(super) struct Feeds<K, M> {
    senders: HashMap<K, mpsc::Sender<M>>,
    max: usize,
    queue: usize,
}

impl<K: Eq + Hash + Copy, M> Feeds<K, M> {
    pub(super) fn new(max: usize, queue: usize) -> Self {
        Feeds {
            senders: HashMap::new(),
            max,
            queue,
        }
    }

    /// Hands `msg` to `key`'s task, first spawning `start(queue)` when the key has none or its
    /// task has ended (the tasks of ended keys are forgotten before one is counted against the
    /// limit).
    pub(super) fn feed<F>(
        &mut self,
        key: K,
        msg: M,
        start: impl FnOnce(mpsc::Receiver<M>) -> F,
    ) -> Result<(), NotFed>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let sender = match self.senders.get(&key) {
            Some(s) if !s.is_closed() => s,
            _ => {
                self.senders.retain(|_, s| !s.is_closed());
                if self.senders.len() >= self.max {
                    return Err(NotFed::TooMany);
                }
                let (tx, rx) = mpsc::channel(self.queue);
                tokio::spawn(start(rx));
                self.senders.entry(key).insert_entry(tx).into_mut()
            }
        };
        sender.try_send(msg).map_err(|_| NotFed::QueueFull)
    }
}

/// Packets the tasks built for the device, at most `max` waiting; the stack is woken for them.
#[derive(Debug)]
pub(super) struct ToDevice {
    packets: Mutex<VecDeque<Vec<u8>>>,
    max: usize,
    notify: Arc<Notify>,
}

impl ToDevice {
    pub(super) fn new(max: usize, notify: Arc<Notify>) -> Arc<Self> {
        Arc::new(ToDevice {
            packets: Mutex::new(VecDeque::new()),
            max,
            notify,
        })
    }

    /// Queues `packets` (all, or none when they would pass the limit) and wakes the stack;
    /// whether they were queued.
    pub(super) fn push(&self, packets: Vec<Vec<u8>>) -> bool {
        let mut q = self.packets.lock().unwrap_or_else(PoisonError::into_inner);
        let room = q.len() + packets.len() <= self.max;
        if room {
            q.extend(packets);
        }
        drop(q);
        self.notify.notify_one();
        room
    }

    /// The packets queued since the last call.
    pub(super) fn take(&self) -> Vec<Vec<u8>> {
        let mut q = self.packets.lock().unwrap_or_else(PoisonError::into_inner);
        q.drain(..).collect()
    }
}
