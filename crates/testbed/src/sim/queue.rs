//! The event queue: packets on the wire, ordered by arrival time and then by the order they
//! were sent (a binary heap keyed by `(time, sequence)`), with their bytes in pooled buffers so
//! the steady state allocates nothing per packet.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use braid_sched_core::Timestamp;

/// A packet on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct InFlight {
    /// When it arrives.
    pub at: Timestamp,
    /// Tie-break: the order packets were handed to the links.
    pub seq: u64,
    /// Receiving side (0 client, 1 server).
    pub to: u8,
    /// Path index.
    pub path: u8,
    /// When it was sent.
    pub sent_at: Timestamp,
    /// Index of its buffer in the pool.
    pub buffer: u32,
    /// Bytes.
    pub len: u32,
}

/// Packets on the wire plus the buffers holding their bytes.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Reverse<InFlight>>,
    buffers: Vec<Vec<u8>>,
    free: Vec<u32>,
    seq: u64,
}

impl EventQueue {
    /// An empty queue.
    pub fn new() -> Self {
        EventQueue {
            heap: BinaryHeap::with_capacity(4096),
            buffers: Vec::with_capacity(4096),
            free: Vec::with_capacity(4096),
            seq: 0,
        }
    }

    /// Puts a copy of `data` on the wire, arriving at `at`.
    pub fn push(&mut self, at: Timestamp, to: u8, path: u8, sent_at: Timestamp, data: &[u8]) {
        let buffer = match self.free.pop() {
            Some(i) => i,
            None => {
                self.buffers.push(Vec::with_capacity(data.len().max(1500)));
                (self.buffers.len() - 1) as u32
            }
        };
        let slot = &mut self.buffers[buffer as usize];
        slot.clear();
        slot.extend_from_slice(data);
        self.seq += 1;
        self.heap.push(Reverse(InFlight {
            at,
            seq: self.seq,
            to,
            path,
            sent_at,
            buffer,
            len: data.len() as u32,
        }));
    }

    /// When the next packet arrives.
    pub fn next_at(&self) -> Option<Timestamp> {
        self.heap.peek().map(|Reverse(p)| p.at)
    }

    /// Takes the next packet if it arrives by `now`; read its bytes with [`EventQueue::bytes`]
    /// and hand the buffer back with [`EventQueue::release`].
    pub fn pop_due(&mut self, now: Timestamp) -> Option<InFlight> {
        if self.heap.peek().is_some_and(|Reverse(p)| p.at <= now) {
            self.heap.pop().map(|Reverse(p)| p)
        } else {
            None
        }
    }

    /// The bytes of a popped packet.
    pub fn bytes(&self, packet: &InFlight) -> &[u8] {
        &self.buffers[packet.buffer as usize][..packet.len as usize]
    }

    /// Returns a popped packet's buffer to the pool.
    pub fn release(&mut self, packet: &InFlight) {
        self.free.push(packet.buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_send_order_and_reuses_buffers() {
        let mut q = EventQueue::new();
        let t = Timestamp::from_micros;
        q.push(t(5), 0, 0, t(0), b"b");
        q.push(t(3), 1, 0, t(0), b"a");
        q.push(t(5), 0, 1, t(0), b"c");
        assert_eq!(q.next_at(), Some(t(3)));
        assert!(q.pop_due(t(2)).is_none());
        let mut order = Vec::new();
        while let Some(p) = q.pop_due(t(10)) {
            order.push(q.bytes(&p).to_vec());
            q.release(&p);
        }
        assert_eq!(order, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        q.push(t(11), 0, 0, t(10), b"d");
        assert_eq!(q.buffers.len(), 3, "a freed buffer is reused");
    }
}
