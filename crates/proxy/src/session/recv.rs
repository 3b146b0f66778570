//! The receive path: [`Session::handle_datagram`] validates a whole packet before acting on
//! it, records its packet number for the ACK, then applies each frame: ACKs drive loss
//! detection and the scheduler's feedback hooks, STREAM bytes go to the flow's reorder buffer,
//! DATAGRAMs to the flow's bounded inbox (with the deadline verdict for the receiver report;
//! pieces of a datagram cut into DATAGRAM_FRAGMENT frames through the flow's reassembly),
//! and control frames update flows, credit and paths.

use std::time::Duration;

use braid_sched_core::{AckInfo, FlowId, PathId, PathState, Scheduler, Timestamp};

use super::congestion::Controller;
use super::error::{FLOW_REFUSED_CODE, SessionError};
use super::flow::{Body, Flow};
use super::frame::{
    AckFrame, DatagramDeadline, FlowKind, Fragment, Frame, TargetRef, parse_packet,
};
use super::sent::{Control, Payload, SentPacket};
use super::stream::RecvViolation;
use super::{EARLY_DATAGRAMS, EarlyDatagram, Event, Role, Session, SessionState, Tier};

/// What the frames of one packet would add, for [`Session::overfills`].
#[derive(Default)]
struct Added {
    /// Separate pieces of flows' received bytes.
    pieces: usize,
    /// Gaps in the record of the peer's flows.
    gaps: usize,
}

impl Session {
    /// Processes one datagram received on `path`. A malformed packet is rejected as a whole
    /// (nothing in it is applied) with an error naming the problem. A packet whose STREAM or
    /// OPEN frames would leave the session holding too many separate pieces of a flow's bytes
    /// or gaps among the peer's flows is refused whole, without an error: not applied nor
    /// acknowledged, so the peer sends its frames again ([`Session::packets_refused`]).
    pub fn handle_datagram(
        &mut self,
        path: PathId,
        data: &[u8],
        now: Timestamp,
    ) -> Result<(), SessionError> {
        if self.state == SessionState::Closed {
            return Ok(());
        }
        self.clock = self.clock.max(now);
        let frame_err = |source| SessionError::Frame { path, source };
        let (pn, frames) = parse_packet(data).map_err(frame_err)?;
        let mut added = Added::default();
        let mut overfills = false;
        for f in frames {
            overfills |= self.overfills(&f.map_err(frame_err)?, &mut added);
        }
        let p = self
            .paths
            .get_mut(path.index())
            .and_then(Option::as_mut)
            .ok_or(SessionError::UnknownPath(path))?;
        if overfills {
            // Not recorded, so not acknowledged: the peer declares it lost and sends its frames
            // again, by when the gaps may have filled.
            self.packets_refused += 1;
            return Ok(());
        }
        if !p.on_received(pn, now) {
            self.report.report.duplicate_bytes += data.len() as u64;
            return Ok(());
        }
        let (_, frames) = parse_packet(data).map_err(frame_err)?;
        let mut ack_eliciting = false;
        let mut busy = false;
        for frame in frames.flatten() {
            ack_eliciting |= !matches!(frame, Frame::Ack(_) | Frame::Close { .. });
            busy |= !matches!(frame, Frame::Ack(_) | Frame::Close { .. } | Frame::Ping);
            self.on_frame(path, frame, now)?;
        }
        if busy {
            self.busy_at = self.busy_at.max(now);
        }
        if ack_eliciting && let Some(p) = self.paths[path.index()].as_mut() {
            p.on_ack_eliciting(now, self.config.max_ack_delay);
        }
        Ok(())
    }

    /// True when `frame`, with the frames of its packet before it (counted in `added`), could
    /// leave a flow holding more separate pieces of its received bytes than
    /// [`RecvStream::max_ranges`](super::stream::RecvStream::max_ranges), or the record of the
    /// flows the peer opened with more gaps than
    /// [`SessionConfig::max_peer_flow_ranges`](super::SessionConfig::max_peer_flow_ranges).
    /// Each STREAM frame that neither overlaps nor adjoins bytes held (beyond the read offset)
    /// counts as one piece more, whatever flow it is for and even when it adjoins another
    /// frame of the packet, so the limits hold exactly; an honest peer stays far below them.
    fn overfills(&self, frame: &Frame<'_>, added: &mut Added) -> bool {
        match *frame {
            Frame::Stream {
                flow, offset, data, ..
            } => {
                let (held, max) = match self.flows.get(&flow).map(Flow::stream_recv) {
                    Some(Some(recv)) if recv.adds_range(offset, data.len()) => {
                        (recv.range_count(), recv.max_ranges())
                    }
                    // Nothing added, the frame ignored, or (a datagram flow) an error.
                    Some(_) => return false,
                    // A flow not open yet (its OPEN may come earlier in the packet).
                    None => (0, super::stream::MIN_RECV_RANGES),
                };
                added.pieces += 1;
                held + added.pieces > max
            }
            Frame::Open { flow, .. } if self.peer_flow(flow) => {
                let n = flow.0 >> 1;
                if self.peer_flows_seen.touches(n..n + 1) {
                    return false;
                }
                added.gaps += 1;
                self.peer_flows_seen.range_count() + added.gaps > self.config.max_peer_flow_ranges()
            }
            _ => false,
        }
    }

    fn on_frame(
        &mut self,
        path: PathId,
        frame: Frame<'_>,
        now: Timestamp,
    ) -> Result<(), SessionError> {
        match frame {
            Frame::Ping => {}
            Frame::Ack(ack) => self.on_ack_frame(&ack, now)?,
            Frame::Stream {
                flow,
                offset,
                fin,
                data,
            } => self.on_stream_frame(flow, offset, fin, data)?,
            Frame::Datagram {
                flow,
                seq,
                deadline,
                fragment,
                data,
            } => self.on_datagram_frame(path, flow, (seq, fragment), deadline, data, now),
            Frame::Open {
                flow,
                kind,
                target,
                redundant,
            } => self.on_open(flow, kind, target, redundant),
            Frame::Reset {
                flow,
                code,
                final_size,
            } => self.on_reset_frame(flow, code, final_size)?,
            Frame::MaxData(max) => {
                if max > self.peer_max_data {
                    self.peer_max_data = max;
                    self.requeue_all_senders();
                }
            }
            Frame::MaxFlowData { flow, max } => {
                if let Some(f) = self.flows.get_mut(&flow)
                    && let Body::Stream { send, .. } = &mut f.body
                    && max > send.max_data
                {
                    // More credit may also let the send buffer grow (`SendStream::growing_to`).
                    let before = send.writable();
                    send.max_data = max;
                    if f.write_blocked && send.writable() > before {
                        f.write_blocked = false;
                        self.events.push_back(Event::FlowWritable(flow));
                    }
                    self.enqueue_send(flow);
                }
            }
            Frame::PathStatus {
                path: p, backup, ..
            } => {
                if let Some(target) = self.paths.get_mut(p.index()).and_then(Option::as_mut) {
                    target.set_tier(if backup { Tier::Backup } else { Tier::Primary });
                    let state = target.state;
                    self.scheduler.on_path_state(p, state, now);
                }
            }
            Frame::PathAbandon { path: p } => self.on_path_abandoned(p, now),
            Frame::DatagramLimit { max } => {
                let max = usize::try_from(max).unwrap_or(usize::MAX);
                if self.peer_datagram_limit != Some(max) {
                    self.peer_datagram_limit = Some(max);
                    self.push_event(Event::PeerDatagramLimit(max));
                }
            }
            // The floor governs what this end sends on the client's links: the client's word,
            // not the server's.
            Frame::BackupFloor { rate } => {
                if self.role == Role::Server {
                    self.set_backup_floor(rate);
                }
            }
            // Likewise the controller of what this end sends on one of the client's links.
            Frame::PathCongestion {
                path,
                algorithm,
                seq,
            } => {
                let last = &mut self.peer_path_congestion_seq[path.index()];
                if self.role == Role::Server && seq > *last {
                    *last = seq;
                    if self.path_congestion(path) != algorithm {
                        self.set_path_congestion(path, algorithm);
                        self.push_event(Event::PeerPathCongestion(path, algorithm));
                    }
                }
            }
            // And the rate of what this end sends on one of the client's links.
            Frame::PathRateCap { path, rate, seq } => {
                let last = &mut self.peer_path_rate_cap_seq[path.index()];
                if self.role == Role::Server && seq > *last {
                    *last = seq;
                    let cap = (rate > 0).then_some(rate);
                    if self.path_rate_cap_down[path.index()] != cap {
                        self.path_rate_cap_down[path.index()] = cap;
                        // A path not joined yet takes it at `add_path` (an error here); a cap
                        // of at least one byte a second is valid.
                        let _ = self.set_path_rate_cap(path, cap);
                        self.push_event(Event::PeerPathRateCap(path, cap));
                    }
                }
            }
            Frame::Close { code, .. } => self.finish_close(code, true),
        }
        Ok(())
    }

    /// The peer's end of path `p` is gone: the path fails now, its packets in flight are
    /// reinjected on the others (rather than after its probe timeouts), and it is probed as
    /// any failed path is until the peer joins it again or its connection ends.
    fn on_path_abandoned(&mut self, p: PathId, now: Timestamp) {
        let Some(path) = self.paths.get_mut(p.index()).and_then(Option::as_mut) else {
            return;
        };
        if path.is_failed() {
            return;
        }
        let mut lost = std::mem::take(&mut self.scratch_lost);
        path.fail(now, &mut lost);
        self.on_packets_lost(p, &mut lost, now);
        self.scratch_lost = lost;
        self.scheduler.on_path_state(p, PathState::Failed, now);
        self.push_event(Event::PathFailed(p));
        self.note_path_liveness(now);
    }

    fn requeue_all_senders(&mut self) {
        for (id, f) in self.flows.iter_mut() {
            if let Body::Stream { send, .. } = &f.body
                && send.has_new()
                && !f.in_send_queue
            {
                f.in_send_queue = true;
                self.send_queue.push_back(*id);
            }
        }
    }

    fn on_ack_frame(&mut self, ack: &AckFrame<'_>, now: Timestamp) -> Result<(), SessionError> {
        let coupling = self.coupling_of(ack.path.index());
        let Some(path) = self
            .paths
            .get_mut(ack.path.index())
            .and_then(Option::as_mut)
        else {
            return Ok(());
        };
        if let Some(coupling) = coupling {
            path.cc.on_coupling(&coupling);
        }
        let mut acked = std::mem::take(&mut self.scratch_acked);
        let mut lost = std::mem::take(&mut self.scratch_lost);
        let result = path.on_ack(ack, now, self.config.max_ack_delay, &mut acked, &mut lost);
        let owd_us = path.owd_us;
        let id = path.id;
        let state = path.state;
        let outcome = match result {
            Ok(o) => o,
            Err(e) => {
                acked.clear();
                lost.clear();
                self.scratch_acked = acked;
                self.scratch_lost = lost;
                return Err(e);
            }
        };
        if let Some(report) = ack.report {
            let mut report = report;
            // Our own drops never rode a path: the session-wide total only, no path's count.
            report.deadline_total = report
                .deadline_total
                .saturating_add(self.locally_dropped_deadlines);
            self.locally_dropped_deadlines = 0;
            self.scheduler.on_report(&report, now);
            self.peer_report = Some(report);
        }
        if outcome.recovered {
            self.scheduler.on_path_state(id, state, now);
            self.events.push_back(Event::PathRecovered(id));
            self.all_failed_since = None;
        }
        if outcome.acked_bytes > 0 || outcome.rtt_sample.is_some() {
            let info = AckInfo {
                bytes: outcome.acked_bytes,
                rtt_us: outcome
                    .rtt_sample
                    .map_or(0, |d| u32::try_from(d.as_micros()).unwrap_or(u32::MAX)),
                owd_us,
            };
            self.scheduler.on_ack(id, &info, now);
        }
        for p in acked.drain(..) {
            self.on_packet_acked(&p);
        }
        self.scratch_acked = acked;
        self.on_packets_lost(id, &mut lost, now);
        self.scratch_lost = lost;
        Ok(())
    }

    fn on_packet_acked(&mut self, p: &SentPacket) {
        if let Payload::Stream { flow, chunk } = p.payload {
            if p.carried_open
                && let Some(f) = self.flows.get_mut(&flow)
            {
                f.open_acked = true;
            }
            self.on_chunk_acked(flow, chunk);
        }
        if let Payload::Datagram { flow } = p.payload
            && p.carried_open
            && let Some(f) = self.flows.get_mut(&flow)
        {
            f.open_acked = true;
        }
        for c in p.controls.iter().flatten() {
            match *c {
                Control::Open(id) => {
                    if let Some(f) = self.flows.get_mut(&id) {
                        f.open_acked = true;
                    }
                }
                Control::Reset(id) => {
                    if let Some(f) = self.flows.get_mut(&id) {
                        f.reset_acked = true;
                    }
                    self.maybe_forget(id);
                }
                Control::MaxFlowData(_)
                | Control::MaxData
                | Control::PathStatus(_)
                | Control::PathAbandon(_)
                | Control::DatagramLimit
                | Control::BackupFloor
                | Control::PathCongestion(_)
                | Control::PathRateCap(_)
                | Control::Redundant(_) => {}
            }
        }
    }

    /// Applies losses (from an ACK, a timer or a failed path) and empties `lost`.
    pub(crate) fn on_packets_lost(
        &mut self,
        path: PathId,
        lost: &mut Vec<SentPacket>,
        now: Timestamp,
    ) {
        let mut bytes = 0;
        for p in lost.drain(..) {
            if p.in_flight {
                bytes += u64::from(p.size);
            }
            // A reinjected packet's bytes were queued again already (and their retransmission
            // answers for its own loss).
            if let Payload::Stream { flow, chunk } = p.payload
                && !p.reinjected
            {
                self.on_chunk_lost(flow, chunk);
            }
            for c in p.controls.iter().flatten() {
                self.push_control(*c);
            }
        }
        if bytes > 0 {
            self.scheduler.on_loss(path, bytes, now);
        }
    }

    /// Queues again the stream bytes and control frames of packets still in flight on a path
    /// whose probe timer fired (see `Path::reinject_in_flight`), and empties `packets`. Not a
    /// loss: the congestion controller and the scheduler hear nothing.
    pub(crate) fn reinject(&mut self, packets: &mut Vec<SentPacket>) {
        for p in packets.drain(..) {
            if let Payload::Stream { flow, chunk } = p.payload {
                self.on_chunk_lost(flow, chunk);
            }
            for c in p.controls.iter().flatten() {
                self.push_control(*c);
            }
        }
    }

    fn peer_flow(&self, id: FlowId) -> bool {
        id.0 & 1 != self.role.flow_parity()
    }

    fn on_open(&mut self, id: FlowId, kind: FlowKind, target: TargetRef<'_>, redundant: bool) {
        if !self.peer_flow(id) || self.peer_flows_seen.contains(id.0 >> 1) {
            // An OPEN again, with the mark: the peer marked the flow after its first OPEN.
            if redundant {
                self.mark(id);
            }
            return;
        }
        self.peer_flows_seen.insert((id.0 >> 1)..(id.0 >> 1) + 1);
        if self.flows.len() >= self.config.max_flows {
            // Refused: the flow is kept only until our RESET is acknowledged and answered (at
            // most as many such flows as the limit itself).
            if self.flows.len() < 2 * self.config.max_flows {
                let mut flow = Flow::new(kind, target.to_owned(), false, &self.config);
                flow.local_reset = Some(FLOW_REFUSED_CODE);
                if let Body::Stream { recv, .. } = &mut flow.body {
                    recv.abandon();
                }
                self.flows.insert(id, flow);
                self.push_control(Control::Reset(id));
            }
            self.take_early_datagrams(id);
            return;
        }
        let flow = Flow::new(kind, target.to_owned(), false, &self.config);
        self.add_flow(id, flow, redundant);
        self.events.push_back(Event::FlowOpened {
            flow: id,
            kind,
            target: target.to_owned(),
        });
        self.take_early_datagrams(id);
    }

    fn on_stream_frame(
        &mut self,
        id: FlowId,
        offset: u64,
        fin: bool,
        data: &[u8],
    ) -> Result<(), SessionError> {
        let Some(flow) = self.flows.get_mut(&id) else {
            return Ok(());
        };
        let Body::Stream { recv, .. } = &mut flow.body else {
            return Err(SessionError::WrongFlowKind(id));
        };
        let got = recv
            .on_data(offset, data, fin)
            .map_err(|v| violation(id, v))?;
        self.received_total += got.highest_growth;
        if self.received_total > self.local_max_data {
            return Err(SessionError::FlowControl {
                flow: FlowId(0),
                offset: self.received_total,
                limit: self.local_max_data,
            });
        }
        let report = &mut self.report.report;
        report.duplicate_bytes += got.duplicate_bytes;
        report.ooo_packets += u32::from(got.out_of_order);
        if flow.local_reset.is_some() {
            // Discarded: the bytes count as consumed at once.
            self.consumed_total += got.highest_growth;
            self.update_session_window();
            return Ok(());
        }
        if recv.readable() > 0 && !flow.readable_signalled {
            flow.readable_signalled = true;
            self.events.push_back(Event::FlowReadable(id));
        }
        if recv.fin_received() && !flow.finished_signalled {
            flow.finished_signalled = true;
            self.events.push_back(Event::FlowFinished(id));
        }
        self.maybe_forget(id);
        Ok(())
    }

    /// A datagram, or one piece of one (`piece`: its sequence number and, for a piece, which
    /// one), whose deadline verdict counts for the path it came on either way. One of a flow
    /// the peer has not opened yet (its OPEN overtaken on another path or by reordering) waits
    /// for the OPEN among the [`EARLY_DATAGRAMS`] latest such.
    fn on_datagram_frame(
        &mut self,
        path: PathId,
        id: FlowId,
        piece: (u64, Option<Fragment>),
        deadline: Option<DatagramDeadline>,
        data: &[u8],
        now: Timestamp,
    ) {
        if let Some(d) = deadline {
            let met = self.deadline_met(path, d, now);
            self.report.report.count_deadline(path, met);
        }
        if !self.flows.contains_key(&id)
            && self.peer_flow(id)
            && !self.peer_flows_seen.contains(id.0 >> 1)
        {
            if self.early.len() >= EARLY_DATAGRAMS
                && let Some(old) = self.early.pop_front()
            {
                self.datagrams.recycle(old.data);
            }
            let data = self.datagrams.buffer_with(data);
            self.early.push_back(EarlyDatagram {
                flow: id,
                piece,
                data,
            });
            return;
        }
        self.take_datagram(id, piece, data);
    }

    /// Hands the datagrams that came before the OPEN of `id` to its flow.
    fn take_early_datagrams(&mut self, id: FlowId) {
        let mut i = 0;
        while i < self.early.len() {
            if self.early[i].flow != id {
                i += 1;
                continue;
            }
            if let Some(e) = self.early.remove(i) {
                self.take_datagram(id, e.piece, &e.data);
                self.datagrams.recycle(e.data);
            }
        }
    }

    /// Delivers a datagram (or a piece) to its flow's inbox, once.
    fn take_datagram(&mut self, id: FlowId, piece: (u64, Option<Fragment>), data: &[u8]) {
        let limit = self.config.datagram_receive_queue;
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
        if flow.local_reset.is_some() {
            return;
        }
        let Body::Datagram(d) = &mut flow.body else {
            return;
        };
        let (seq, fragment) = piece;
        if d.seen.contains(seq) {
            self.report.report.duplicate_bytes += data.len() as u64;
            return;
        }
        let buf = match fragment {
            None => self.datagrams.buffer_with(data),
            Some(f) => {
                let max = self.config.max_datagram_payload;
                let Some(whole) = d.pieces.add(seq, f, data, max, &mut self.datagrams) else {
                    return;
                };
                self.datagrams_reassembled += 1;
                whole
            }
        };
        d.seen.insert(seq);
        if d.inbox.len() >= limit
            && let Some(old) = d.inbox.pop_front()
        {
            self.datagrams.recycle(old);
        }
        self.report.report.delivered_bytes += buf.len() as u64;
        d.inbox.push_back(buf);
        self.push_event(Event::DatagramReceived(id));
    }

    /// Whether a datagram arrived within its budget, judged from the sender's timestamp relative
    /// to the running minimum on this path plus half our minimum RTT (clocks never compared).
    fn deadline_met(&mut self, path: PathId, d: DatagramDeadline, now: Timestamp) -> bool {
        let Some(p) = self.paths.get_mut(path.index()).and_then(Option::as_mut) else {
            return false;
        };
        let relative = now.as_micros() as i64 - d.sent_at_us as i64;
        let min = p
            .datagram_min_relative
            .map_or(relative, |m| m.min(relative));
        p.datagram_min_relative = Some(min);
        let queueing = Duration::from_micros((relative - min).unsigned_abs());
        let owd = p.rtt.min_rtt() / 2 + queueing;
        owd <= Duration::from_micros(u64::from(d.budget_us))
    }

    fn on_reset_frame(
        &mut self,
        id: FlowId,
        code: u64,
        final_size: u64,
    ) -> Result<(), SessionError> {
        let Some(flow) = self.flows.get_mut(&id) else {
            return Ok(());
        };
        if flow.peer_reset {
            return Ok(());
        }
        flow.peer_reset = true;
        let mut growth = 0;
        let mut released = 0;
        if let Body::Stream { recv, .. } = &mut flow.body {
            growth = recv
                .on_reset(code, final_size)
                .map_err(|v| violation(id, v))?;
            released = recv.abandon();
        }
        let answer = flow.local_reset.is_none();
        self.received_total += growth;
        self.consumed_total += released;
        if answer {
            self.events.push_back(Event::FlowReset { flow: id, code });
            let _ = self.reset(id, code);
        }
        self.update_session_window();
        self.maybe_forget(id);
        Ok(())
    }
}

fn violation(flow: FlowId, v: RecvViolation) -> SessionError {
    match v {
        RecvViolation::FlowControl { offset, limit } => SessionError::FlowControl {
            flow,
            offset,
            limit,
        },
        RecvViolation::FinalSize { offset, final_size } => SessionError::FinalSize {
            flow,
            offset,
            final_size,
        },
    }
}
