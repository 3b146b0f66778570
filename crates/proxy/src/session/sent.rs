//! What the session remembers about each packet it sent, so that an acknowledgement or a loss
//! can be applied to the flows and control frames it carried. `Copy` and fixed-size: the per-path
//! tables of these are allocated once.

use braid_sched_core::{FlowId, PathId, PathSet, Timestamp};

use super::congestion::PacketDelivery;
use super::stream::Chunk;

/// Most control frames carried by one packet.
pub(crate) const MAX_CONTROLS: usize = 4;

/// A control frame that must be delivered reliably; on loss it is queued again (with the then
/// current value, e.g. the latest MAX_DATA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    /// OPEN of a local flow (also repeated with its data until acknowledged).
    Open(FlowId),
    /// RESET of a flow.
    Reset(FlowId),
    /// MAX_FLOW_DATA of a flow.
    MaxFlowData(FlowId),
    /// MAX_DATA.
    MaxData,
    /// PATH_STATUS of a path.
    PathStatus(PathId),
    /// PATH_ABANDON of a path this end removed (`Session::abandon_path`).
    PathAbandon(PathId),
    /// DATAGRAM_LIMIT: this end's `max_datagram_payload` (`Session::announce_datagram_limit`).
    DatagramLimit,
    /// BACKUP_FLOOR: this end's `backup_below_rate` (`Session::announce_backup_floor`).
    BackupFloor,
    /// PATH_CONGESTION: the controller this end (a client) chose for a path's link
    /// (`Session::announce_path_congestion`).
    PathCongestion(PathId),
    /// PATH_RATE_CAP: the cap this end (a client) asks for on what the server sends on a path
    /// (`Session::announce_path_rate_cap`).
    PathRateCap(PathId),
    /// The OPEN of a flow again, with the redundant mark: the flow was marked after its first
    /// OPEN (`Session::mark_redundant`).
    Redundant(FlowId),
}

/// The data frame a packet carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Payload {
    /// Control frames only (or a PING).
    None,
    /// A chunk of a stream flow.
    Stream { flow: FlowId, chunk: Chunk },
    /// A datagram (not retransmitted).
    Datagram { flow: FlowId },
}

/// One sent packet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SentPacket {
    pub pn: u64,
    pub time_sent: Timestamp,
    pub size: u16,
    pub ack_eliciting: bool,
    /// Counts towards bytes in flight (everything but failed-path probes).
    pub in_flight: bool,
    /// Acknowledged or declared lost.
    pub done: bool,
    /// Its stream bytes and control frames were queued again after a probe timeout while it
    /// stayed in flight (so a later loss does not queue them a second time).
    pub reinjected: bool,
    /// A copy from the redundant buffer (see `Session::transmit_redundant`): never copied again.
    /// Its bytes are answered for by the original (it is sent `reinjected`).
    pub copy: bool,
    /// A copy sent at placement by a `Duplicate` decision: never copied by the redundant buffer
    /// (the original is). Its loss queues its bytes again, as an original's does.
    pub placement_copy: bool,
    /// The other paths a `Duplicate` decision placed copies of this packet on: the redundant
    /// buffer does not copy it onto them again.
    pub copied_to: PathSet,
    pub payload: Payload,
    /// The packet also carried the OPEN of the payload's flow.
    pub carried_open: bool,
    pub controls: [Option<Control>; MAX_CONTROLS],
    /// The path's delivery counters when it was sent (for the delivery-rate sample of its ACK).
    pub delivery: PacketDelivery,
}

impl SentPacket {
    pub fn new(pn: u64, time_sent: Timestamp, size: u16, payload: Payload) -> Self {
        SentPacket {
            pn,
            time_sent,
            size,
            ack_eliciting: true,
            in_flight: true,
            done: false,
            reinjected: false,
            copy: false,
            placement_copy: false,
            copied_to: PathSet::EMPTY,
            payload,
            carried_open: false,
            controls: [None; MAX_CONTROLS],
            delivery: PacketDelivery::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sent_packet_stays_small() {
        assert!(
            std::mem::size_of::<SentPacket>() <= super::super::config::SENT_PACKET_SIZE as usize
        );
    }
}
