//! What a scheduler knows about the packet it is placing.

use crate::time::Timestamp;

/// A flow within a session: one proxied TCP connection or UDP association.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u64);

/// The kind of traffic a packet belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TrafficClass {
    /// Reliable stream bytes where throughput matters most (downloads, uploads).
    #[default]
    Bulk,
    /// Reliable stream bytes where latency matters (interactive, web).
    Interactive,
    /// Unreliable datagrams, usually with a deadline (real-time media, games).
    Realtime,
    /// Session control (ACKs, heartbeats, flow control) that the session sends itself.
    Control,
}

/// Per-packet metadata handed to [`crate::Scheduler::select`]. `Copy` and small: the session
/// builds one per packet on the stack.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PacketMeta {
    /// The flow the packet belongs to.
    pub flow: FlowId,
    /// Bytes the packet occupies on the wire (datagram payload).
    pub len: u32,
    /// Its traffic class.
    pub class: TrafficClass,
    /// The local time by which it must arrive to be useful, if any. The session turns the relative
    /// budget it was given into a local deadline; clocks of the two ends are never compared.
    pub deadline: Option<Timestamp>,
    /// True when this is a retransmission or reinjection of data sent before.
    pub retransmit: bool,
    /// Bytes queued in the session waiting to be sent, this packet included (ECF's and BLEST's
    /// send-buffer term).
    pub backlog_bytes: u64,
    /// Bytes the peer's connection-level flow-control window still admits (BLEST's send window).
    pub send_window: u64,
}

impl PacketMeta {
    /// A bulk packet of `len` bytes on flow 0 with no deadline; handy for tests and benches.
    pub fn bulk(len: u32) -> Self {
        PacketMeta {
            len,
            backlog_bytes: u64::from(len),
            send_window: u64::MAX,
            ..PacketMeta::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_stays_small() {
        assert!(std::mem::size_of::<PacketMeta>() <= 56);
    }
}
