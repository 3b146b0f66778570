//! Datagram storage: the session-wide send queue (bounded by `datagram_send_queue`) and a pool
//! of payload buffers shared with the per-flow receive queues, so that steady-state datagram
//! traffic reuses buffers instead of allocating one per datagram.

use std::collections::VecDeque;

use braid_sched_core::{FlowId, Timestamp};

use super::config::SessionConfig;
use super::error::FlowError;
use super::frame::{Fragment, MAX_DATAGRAM_HEADER_LEN, MAX_FRAGMENT_HEADER_LEN};

/// A datagram waiting to be sent (or one piece of a datagram cut into fragments).
#[derive(Debug)]
pub(crate) struct QueuedDatagram {
    pub flow: FlowId,
    pub seq: u64,
    /// Local time by which it must arrive, if any.
    pub deadline: Option<Timestamp>,
    /// The piece this is, when the datagram was cut for paths too small to take it whole.
    pub fragment: Option<Fragment>,
    pub data: Vec<u8>,
}

impl QueuedDatagram {
    /// The most bytes its DATAGRAM (or DATAGRAM_FRAGMENT) frame header takes.
    pub fn header_len(&self) -> usize {
        if self.fragment.is_some() {
            MAX_FRAGMENT_HEADER_LEN
        } else {
            MAX_DATAGRAM_HEADER_LEN
        }
    }
}

/// The send queue and the buffer pool.
#[derive(Debug)]
pub(crate) struct DatagramQueue {
    queue: VecDeque<QueuedDatagram>,
    pool: Vec<Vec<u8>>,
    capacity: usize,
    pool_limit: usize,
    max_payload: usize,
    queued_bytes: u64,
}

impl DatagramQueue {
    pub fn new(config: &SessionConfig) -> Self {
        DatagramQueue {
            queue: VecDeque::with_capacity(config.datagram_send_queue),
            pool: Vec::with_capacity(config.datagram_send_queue),
            capacity: config.datagram_send_queue,
            pool_limit: config.datagram_send_queue,
            max_payload: config.max_datagram_payload,
            queued_bytes: 0,
        }
    }

    /// A buffer holding a copy of `data`, from the pool when it has one.
    pub fn buffer_with(&mut self, data: &[u8]) -> Vec<u8> {
        let mut buf = self
            .pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.max_payload));
        buf.clear();
        buf.extend_from_slice(data);
        buf
    }

    /// Returns a buffer to the pool.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < self.pool_limit && buf.capacity() <= self.max_payload {
            self.pool.push(buf);
        }
    }

    pub fn push(&mut self, d: QueuedDatagram) -> Result<(), FlowError> {
        if self.queue.len() >= self.capacity {
            self.recycle(d.data);
            return Err(FlowError::DatagramQueueFull { max: self.capacity });
        }
        self.queued_bytes += d.data.len() as u64;
        self.queue.push_back(d);
        Ok(())
    }

    /// Puts `d` at the front, whatever the queue holds: the pieces of the datagram just taken
    /// from the front (at most [`super::frame::MAX_FRAGMENTS`] for one), so the queue holds at
    /// most `capacity + MAX_FRAGMENTS - 1`.
    pub fn push_front(&mut self, d: QueuedDatagram) {
        self.queued_bytes += d.data.len() as u64;
        self.queue.push_front(d);
    }

    pub fn front(&self) -> Option<&QueuedDatagram> {
        self.queue.front()
    }

    pub fn pop(&mut self) -> Option<QueuedDatagram> {
        let d = self.queue.pop_front()?;
        self.queued_bytes -= d.data.len() as u64;
        Some(d)
    }

    /// Drops every queued datagram of `flow`.
    pub fn remove_flow(&mut self, flow: FlowId) {
        let mut i = 0;
        while i < self.queue.len() {
            if self.queue[i].flow == flow {
                if let Some(d) = self.queue.remove(i) {
                    self.queued_bytes -= d.data.len() as u64;
                    self.recycle(d.data);
                }
            } else {
                i += 1;
            }
        }
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    pub fn allocated(&self) -> u64 {
        let payloads: usize = self
            .queue
            .iter()
            .map(|d| d.data.capacity())
            .chain(self.pool.iter().map(Vec::capacity))
            .sum();
        (payloads
            + self.queue.capacity() * std::mem::size_of::<QueuedDatagram>()
            + self.pool.capacity() * std::mem::size_of::<Vec<u8>>()) as u64
    }
}
