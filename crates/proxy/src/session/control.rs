//! Control frames (OPEN, RESET, MAX_DATA, MAX_FLOW_DATA, PATH_STATUS, PATH_ABANDON, DATAGRAM_LIMIT,
//! BACKUP_FLOOR, PATH_CONGESTION, PATH_RATE_CAP) that ride in packets after the data frame. They are queued once
//! ([`super::Session::push_control`]), written with their value at the time of sending, and
//! queued again when the packet carrying them is lost.

use braid_sched_core::FlowId;

use super::Session;
use super::flow::Body;
use super::frame::{self, Frame};
use super::send::ACK_RESERVE;
use super::sent::{Control, MAX_CONTROLS, SentPacket};
use super::varint::Writer;

impl Session {
    pub(crate) fn write_controls(&mut self, w: &mut Writer<'_>, sent: &mut SentPacket) {
        let mut n = 0;
        while n + 1 < MAX_CONTROLS {
            let Some(&c) = self.controls.front() else {
                break;
            };
            // A RESET of a flow the peer may not know yet travels with its OPEN, so that the
            // peer never sees one without the other.
            let open_first = match c {
                Control::Reset(id) => self.flows.get(&id).is_some_and(|f| !f.open_acked),
                _ => false,
            };
            let open_needed = |id: FlowId| {
                self.flows
                    .get(&id)
                    .map_or(0, |f| frame::open_len(id, f.target.as_ref()))
            };
            let needed = match c {
                Control::Open(id) | Control::Redundant(id) => open_needed(id),
                Control::Reset(id) if open_first => open_needed(id) + 32,
                _ => 32,
            };
            if w.remaining() < needed + ACK_RESERVE / 2 {
                break;
            }
            self.controls.pop_front();
            if let (true, Control::Reset(id)) = (open_first, c)
                && self.write_control(w, Control::Open(id))
            {
                sent.controls[n] = Some(Control::Open(id));
                n += 1;
            }
            if self.write_control(w, c) {
                sent.controls[n] = Some(c);
                n += 1;
            }
        }
    }

    /// Writes `c` if it still applies; returns whether it was written.
    fn write_control(&mut self, w: &mut Writer<'_>, c: Control) -> bool {
        let frame = match c {
            Control::Open(id) => match self.flows.get(&id) {
                Some(f) if !f.open_acked => f.open_frame(id, self.peer_knows_redundant_flows),
                _ => return false,
            },
            Control::Redundant(id) => match self.flows.get(&id) {
                Some(f) if f.redundant && self.peer_knows_redundant_flows => f.open_frame(id, true),
                _ => return false,
            },
            Control::Reset(id) => match self.flows.get(&id) {
                Some(f) if !f.reset_acked => Frame::Reset {
                    flow: id,
                    code: f.local_reset.unwrap_or(0),
                    final_size: match &f.body {
                        Body::Stream { send, .. } => send.sent_below(),
                        Body::Datagram(d) => d.next_seq,
                    },
                },
                _ => return false,
            },
            Control::MaxFlowData(id) => match self.flows.get(&id).map(|f| &f.body) {
                Some(Body::Stream { recv, .. }) if !recv.fin_received() => Frame::MaxFlowData {
                    flow: id,
                    max: recv.max_data,
                },
                _ => return false,
            },
            Control::MaxData => Frame::MaxData(self.local_max_data),
            Control::PathStatus(p) => match self.paths.get(p.index()).and_then(Option::as_ref) {
                Some(path) => {
                    self.path_status_seq += 1;
                    Frame::PathStatus {
                        path: p,
                        backup: path.config.tier == super::Tier::Backup,
                        seq: self.path_status_seq,
                    }
                }
                None => return false,
            },
            // Only while the path is still gone here: once it has joined again, the peer must
            // not fail the new one.
            Control::PathAbandon(p) => match self.paths.get(p.index()) {
                Some(None) => Frame::PathAbandon { path: p },
                _ => return false,
            },
            Control::DatagramLimit => Frame::DatagramLimit {
                max: self.config.max_datagram_payload as u64,
            },
            Control::BackupFloor => Frame::BackupFloor {
                rate: self.config.backup_below_rate,
            },
            Control::PathCongestion(p) => {
                self.path_congestion_seq += 1;
                Frame::PathCongestion {
                    path: p,
                    algorithm: self.path_congestion[p.index()],
                    seq: self.path_congestion_seq,
                }
            }
            Control::PathRateCap(p) => {
                self.path_rate_cap_seq += 1;
                Frame::PathRateCap {
                    path: p,
                    rate: self.path_rate_cap_down[p.index()].unwrap_or(0),
                    seq: self.path_rate_cap_seq,
                }
            }
        };
        // A frame that does not fit leaves the writer unusable; the size was checked above.
        frame.encode(w).is_ok()
    }
}
