//! Flows: the per-flow state ([`Flow`]) and the application-facing flow API of [`Session`]
//! (open, write, read, finish, reset, datagrams), plus the bookkeeping when a flow's data is
//! acknowledged or lost and when a flow is done and forgotten.
//!
//! Resetting a flow aborts both directions: the resetting end sends RESET with its final size,
//! the other end answers with its own RESET, and each settles session-wide flow-control credit
//! from the other's final size before forgetting the flow.

use std::collections::VecDeque;

use braid_sched_core::{FlowId, Timestamp};

use super::datagram::QueuedDatagram;
use super::error::FlowError;
use super::frame::{FlowKind, Target};
use super::reassembly::{Reassembly, SeqWindow};
use super::sent::Control;
use super::stream::{Chunk, RecvStream, SendStream};
use super::{Event, Session};

/// A datagram flow's state.
#[derive(Debug)]
pub(crate) struct DatagramFlow {
    pub next_seq: u64,
    pub inbox: VecDeque<Vec<u8>>,
    /// Datagrams arriving in pieces.
    pub pieces: Reassembly,
    /// Sequence numbers delivered lately (copies are delivered once).
    pub seen: SeqWindow,
}

/// The two kinds of flow.
// The stream halves stay inline: they are reached on every packet of a stream flow, and a box
// would add a pointer chase there; a datagram flow's unused bytes (some 200) are cheap beside
// its queues.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Body {
    Stream { send: SendStream, recv: RecvStream },
    Datagram(DatagramFlow),
}

/// One flow.
#[derive(Debug)]
pub(crate) struct Flow {
    pub target: Target,
    pub kind: FlowKind,
    /// The peer has acknowledged our OPEN (always true for peer-opened flows).
    pub open_acked: bool,
    pub body: Body,
    pub in_send_queue: bool,
    pub in_retransmit_queue: bool,
    pub readable_signalled: bool,
    pub write_blocked: bool,
    pub finished_signalled: bool,
    /// We reset the flow with this code.
    pub local_reset: Option<u64>,
    pub reset_acked: bool,
    /// The peer reset the flow (its RESET arrived).
    pub peer_reset: bool,
    /// Sent redundantly: a copy of each packet on every path with room, whatever the scheduler
    /// ([`super::RedundantFlows::ports`], or the peer's mark in its OPEN).
    pub redundant: bool,
}

impl Flow {
    pub fn new(kind: FlowKind, target: Target, local: bool, config: &super::SessionConfig) -> Self {
        let body = match kind {
            FlowKind::Stream => Body::Stream {
                send: SendStream::new(config.flow_send_buffer, config.flow_receive_window)
                    .growing_to(config.flow_send_buffer_max),
                recv: RecvStream::new(config.flow_receive_window)
                    .growing_to(config.flow_receive_window_max),
            },
            FlowKind::Datagram | FlowKind::Ping => Body::Datagram(DatagramFlow {
                next_seq: 0,
                inbox: VecDeque::new(),
                pieces: Reassembly::default(),
                seen: SeqWindow::default(),
            }),
        };
        Flow {
            target,
            kind,
            open_acked: !local,
            body,
            in_send_queue: false,
            in_retransmit_queue: false,
            readable_signalled: false,
            write_blocked: false,
            finished_signalled: false,
            local_reset: None,
            reset_acked: false,
            peer_reset: false,
            redundant: false,
        }
    }

    /// The flow's OPEN, as flow `id`; with the redundant mark when the flow is marked and
    /// `tell` (the peer knows the mark).
    pub fn open_frame(&self, id: FlowId, tell: bool) -> super::frame::Frame<'_> {
        super::frame::Frame::Open {
            flow: id,
            kind: self.kind,
            target: self.target.as_ref(),
            redundant: self.redundant && tell,
        }
    }

    /// (allocated, send buffered, receive buffered, datagrams queued).
    pub fn memory(&self) -> (u64, u64, u64, usize) {
        match &self.body {
            Body::Stream { send, recv } => (
                send.allocated() + recv.allocated(),
                send.buffered(),
                recv.buffered(),
                0,
            ),
            Body::Datagram(d) => (
                d.inbox.iter().map(|b| b.capacity() as u64).sum::<u64>()
                    + (d.inbox.capacity() * std::mem::size_of::<Vec<u8>>()) as u64
                    + d.pieces.allocated(),
                0,
                0,
                d.inbox.len(),
            ),
        }
    }

    pub fn stream_recv(&self) -> Option<&RecvStream> {
        match &self.body {
            Body::Stream { recv, .. } => Some(recv),
            Body::Datagram(_) => None,
        }
    }

    pub fn stream_send(&mut self) -> Option<&mut SendStream> {
        match &mut self.body {
            Body::Stream { send, .. } => Some(send),
            Body::Datagram(_) => None,
        }
    }

    /// Both directions are over and nothing is left to deliver reliably.
    pub fn is_done(&self) -> bool {
        let send_done = match self.local_reset {
            Some(_) => self.reset_acked,
            None => match &self.body {
                Body::Stream { send, .. } => send.is_done(),
                Body::Datagram(_) => false,
            },
        };
        let recv_done = self.peer_reset
            || match &self.body {
                Body::Stream { recv, .. } => recv.is_finished(),
                Body::Datagram(_) => false,
            };
        send_done && recv_done
    }
}

impl Session {
    /// Opens a flow towards `target`; the peer learns of it with the flow's first packet.
    pub fn open_flow(&mut self, kind: FlowKind, target: Target) -> Result<FlowId, FlowError> {
        if self.state != super::SessionState::Open {
            return Err(FlowError::SessionClosed);
        }
        if let Target::Domain { name, .. } = &target
            && (name.is_empty() || name.len() > 255)
        {
            return Err(FlowError::InvalidDomain(name.clone()));
        }
        if kind == FlowKind::Ping && !self.peer_relays_ping {
            return Err(FlowError::PingNotRelayed);
        }
        if self.flows.len() >= self.config.max_flows {
            return Err(FlowError::TooManyFlows {
                max: self.config.max_flows,
            });
        }
        let id = FlowId(self.next_local_flow);
        self.next_local_flow += 2;
        self.add_flow(id, Flow::new(kind, target, true, &self.config), false);
        self.push_control(Control::Open(id));
        Ok(id)
    }

    /// Holds `flow` as `id`, sent redundantly when `marked` (the peer's OPEN said so) or when
    /// its target's port is one of [`super::RedundantFlows::ports`].
    pub(crate) fn add_flow(&mut self, id: FlowId, mut flow: Flow, marked: bool) {
        flow.redundant = marked || self.config.redundant.ports.contains(flow.target.port());
        self.redundant_flows += usize::from(flow.redundant);
        self.flows.insert(id, flow);
    }

    /// Marks flow `id` redundant; whether it was not before (an unknown flow: false).
    pub(crate) fn mark(&mut self, id: FlowId) -> bool {
        match self.flows.get_mut(&id) {
            Some(flow) if !flow.redundant => {
                flow.redundant = true;
                self.redundant_flows += 1;
                true
            }
            _ => false,
        }
    }

    /// Sends flow `id` redundantly from now on, as a flow to one of
    /// [`super::RedundantFlows::ports`] is (a datagram flow whose target is not its
    /// datagrams' destination: the daemons mark it at its first datagram to such a port). The
    /// peer, when it knows the mark, is told by the flow's OPEN sent again with it (a peer
    /// that still has the flow marks it; one that has forgotten it ignores the OPEN). Unknown
    /// flows: nothing.
    pub fn mark_redundant(&mut self, id: FlowId) {
        // Its OPEN may have gone already (a datagram flow's goes at once): the peer hears of
        // the mark from an OPEN sent again with it.
        if self.mark(id) && self.peer_knows_redundant_flows {
            self.push_control(Control::Redundant(id));
        }
    }

    /// Replaces [`super::SessionConfig::redundant`] (a daemon's reload): flows opened from now
    /// on, and datagram flows not marked yet, are judged by the new ports; a flow already
    /// marked stays so. A new rate bound holds from the next packet.
    pub fn set_redundant(&mut self, redundant: super::RedundantFlows) {
        self.config.redundant = redundant;
    }

    /// Whether [`super::RedundantFlows::max_rate`] lets a packet of a redundant flow go
    /// redundantly now.
    pub(crate) fn redundant_room(&self, now: Timestamp) -> bool {
        match self.config.redundant.max_rate {
            None => true,
            Some(0) => false,
            Some(_) => self.redundant_budget_at <= now + super::config::REDUNDANT_BURST,
        }
    }

    /// Counts a packet of `len` bytes sent redundantly against
    /// [`super::RedundantFlows::max_rate`].
    pub(crate) fn spend_redundant(&mut self, len: u32, now: Timestamp) {
        if let Some(rate) = self.config.redundant.max_rate.filter(|&r| r > 0) {
            let micros = u64::from(len) * 1_000_000 / rate;
            self.redundant_budget_at =
                self.redundant_budget_at.max(now) + std::time::Duration::from_micros(micros);
        }
    }

    /// Packets of redundant flows sent once, where the scheduler placed them, because
    /// [`super::RedundantFlows::max_rate`] was reached.
    pub fn redundant_capped(&self) -> u64 {
        self.redundant_capped
    }

    /// Whether flow `id` is sent redundantly ([`Session::mark_redundant`]).
    pub fn is_redundant(&self, id: FlowId) -> bool {
        self.flows.get(&id).is_some_and(|f| f.redundant)
    }

    fn flow_mut(&mut self, id: FlowId) -> Result<&mut Flow, FlowError> {
        self.flows.get_mut(&id).ok_or(FlowError::UnknownFlow(id))
    }

    /// Buffers as much of `data` as the flow's send buffer takes; returns how much (0 when
    /// full: a [`Event::FlowWritable`] follows when space frees up).
    pub fn write(&mut self, id: FlowId, data: &[u8]) -> Result<usize, FlowError> {
        let flow = self.flow_mut(id)?;
        if flow.local_reset.is_some() {
            return Err(FlowError::ClosedForWriting(id));
        }
        let Body::Stream { send, .. } = &mut flow.body else {
            return Err(FlowError::WrongKind(id));
        };
        if send.is_finished() {
            return Err(FlowError::ClosedForWriting(id));
        }
        let n = send.write(data);
        flow.write_blocked = n < data.len();
        self.unsent_bytes += n as u64;
        if n > 0 {
            self.enqueue_send(id);
        }
        Ok(n)
    }

    /// Bytes `write` would accept now.
    pub fn writable(&self, id: FlowId) -> Result<u64, FlowError> {
        match &self.flows.get(&id).ok_or(FlowError::UnknownFlow(id))?.body {
            Body::Stream { send, .. } => Ok(send.writable()),
            Body::Datagram(_) => Err(FlowError::WrongKind(id)),
        }
    }

    /// The flow's receive window now: the configured first window, or more once it grew
    /// ([`SessionConfig::flow_receive_window_max`](super::SessionConfig::flow_receive_window_max)).
    pub fn flow_receive_window(&self, id: FlowId) -> Result<u64, FlowError> {
        match &self.flows.get(&id).ok_or(FlowError::UnknownFlow(id))?.body {
            Body::Stream { recv, .. } => Ok(recv.window()),
            Body::Datagram(_) => Err(FlowError::WrongKind(id)),
        }
    }

    /// The largest receive window of the stream flows open now (0 without any).
    pub fn largest_flow_window(&self) -> u64 {
        self.flows
            .values()
            .filter_map(Flow::stream_recv)
            .map(RecvStream::window)
            .max()
            .unwrap_or(0)
    }

    /// Reads in-order bytes. `Ok(Some(0))`: nothing yet; `Ok(None)`: the peer finished and
    /// everything was read.
    pub fn read(&mut self, id: FlowId, out: &mut [u8]) -> Result<Option<usize>, FlowError> {
        self.read_with(id, out.len(), super::stream::fill(out))
    }

    /// As [`Session::read`], but hands at most `max` in-order bytes to `sink` (in one or two
    /// contiguous parts, in order) instead of copying them into a slice: the caller copies
    /// them once, straight to where they go.
    pub fn read_with(
        &mut self,
        id: FlowId,
        max: usize,
        sink: impl FnMut(&[u8]),
    ) -> Result<Option<usize>, FlowError> {
        let (now, rtt) = (self.clock, self.longest_rtt());
        let flow = self.flows.get_mut(&id).ok_or(FlowError::UnknownFlow(id))?;
        let Body::Stream { recv, .. } = &mut flow.body else {
            return Err(FlowError::WrongKind(id));
        };
        if let Some(code) = recv.reset {
            return Err(FlowError::Reset { flow: id, code });
        }
        let n = recv.read_with(max, sink);
        flow.readable_signalled = false;
        let update = recv.window_update(now, rtt);
        let finished = recv.is_finished();
        self.consumed_total += n as u64;
        self.report.report.delivered_bytes += n as u64;
        if update.is_some() {
            self.push_control(Control::MaxFlowData(id));
        }
        self.update_session_window();
        if n == 0 && finished {
            self.maybe_forget(id);
            return Ok(None);
        }
        // A read that takes the last bytes does not forget the flow yet, even when both
        // directions are over: the reader must still be able to read the end (`Ok(None)`);
        // forgotten here, its next read would find no flow.
        Ok(Some(n))
    }

    /// The longest minimum RTT of the paths that have not failed (the initial RTT without
    /// any): a flow's bytes take every path, so a window covers the slowest one's round trip.
    /// The minimum, not the smoothed RTT: queueing delay needs no window, and a window judged
    /// by the queue it fills would grow the queue it is judged by.
    fn longest_rtt(&self) -> std::time::Duration {
        self.paths[..self.path_end]
            .iter()
            .flatten()
            .filter(|p| !p.is_failed())
            .map(|p| p.rtt.min_rtt())
            .max()
            .unwrap_or(self.config.initial_rtt)
    }

    pub(crate) fn update_session_window(&mut self) {
        let window = self.config.session_receive_window;
        let target = self.consumed_total + window;
        if target - self.local_max_data >= (window / super::stream::CREDIT_UPDATE_FRACTION).max(1) {
            self.local_max_data = target;
            self.push_control(Control::MaxData);
        }
    }

    /// Half-closes the flow: the peer reads to the end of what was written, then sees the end.
    pub fn finish(&mut self, id: FlowId) -> Result<(), FlowError> {
        let flow = self.flow_mut(id)?;
        if flow.local_reset.is_some() {
            return Err(FlowError::ClosedForWriting(id));
        }
        let Body::Stream { send, .. } = &mut flow.body else {
            return Err(FlowError::WrongKind(id));
        };
        send.finish();
        self.enqueue_send(id);
        Ok(())
    }

    /// Aborts the flow in both directions with `code` (also how a datagram flow is closed).
    pub fn reset(&mut self, id: FlowId, code: u64) -> Result<(), FlowError> {
        let flow = self.flow_mut(id)?;
        if flow.local_reset.is_some() {
            return Ok(());
        }
        flow.local_reset = Some(code);
        let mut released = 0;
        let mut unsent = 0;
        if let Body::Stream { send, recv } = &mut flow.body {
            unsent = send.unsent();
            send.reset();
            released = recv.abandon();
        }
        self.unsent_bytes = self.unsent_bytes.saturating_sub(unsent);
        self.consumed_total += released;
        self.datagrams.remove_flow(id);
        self.push_control(Control::Reset(id));
        self.update_session_window();
        Ok(())
    }

    /// Queues a datagram on a datagram flow; `budget_us` is how long it stays useful from now.
    pub fn send_datagram(
        &mut self,
        id: FlowId,
        data: &[u8],
        budget_us: Option<u32>,
        now: Timestamp,
    ) -> Result<(), FlowError> {
        let max = self.datagram_limit();
        if data.len() > max {
            self.datagrams_dropped += 1;
            return Err(FlowError::DatagramTooLarge {
                len: data.len(),
                max,
            });
        }
        let flow = self.flows.get_mut(&id).ok_or(FlowError::UnknownFlow(id))?;
        if flow.local_reset.is_some() {
            return Err(FlowError::ClosedForWriting(id));
        }
        let Body::Datagram(d) = &mut flow.body else {
            return Err(FlowError::WrongKind(id));
        };
        let seq = d.next_seq;
        d.next_seq += 1;
        let data = self.datagrams.buffer_with(data);
        let pushed = self.datagrams.push(QueuedDatagram {
            flow: id,
            seq,
            deadline: budget_us.map(|b| now + std::time::Duration::from_micros(u64::from(b))),
            fragment: None,
            data,
        });
        if pushed.is_err() {
            self.datagrams_dropped += 1;
        }
        pushed
    }

    /// Takes the oldest received datagram of the flow into `out`; returns its length (cut to
    /// `out.len()`), or `None` when none is waiting.
    pub fn recv_datagram(
        &mut self,
        id: FlowId,
        out: &mut [u8],
    ) -> Result<Option<usize>, FlowError> {
        let flow = self.flows.get_mut(&id).ok_or(FlowError::UnknownFlow(id))?;
        let Body::Datagram(d) = &mut flow.body else {
            return Err(FlowError::WrongKind(id));
        };
        let Some(buf) = d.inbox.pop_front() else {
            return Ok(None);
        };
        let n = buf.len().min(out.len());
        out[..n].copy_from_slice(&buf[..n]);
        self.datagrams.recycle(buf);
        Ok(Some(n))
    }

    /// The flows open now.
    pub fn flow_ids(&self) -> impl Iterator<Item = FlowId> + '_ {
        self.flows.keys().copied()
    }

    pub(crate) fn enqueue_send(&mut self, id: FlowId) {
        if let Some(flow) = self.flows.get_mut(&id)
            && !flow.in_send_queue
        {
            flow.in_send_queue = true;
            self.send_queue.push_back(id);
        }
    }

    pub(crate) fn enqueue_retransmit(&mut self, id: FlowId) {
        if let Some(flow) = self.flows.get_mut(&id)
            && !flow.in_retransmit_queue
        {
            flow.in_retransmit_queue = true;
            self.retransmit_queue.push_back(id);
        }
    }

    /// A packet carrying `chunk` of `id` was acknowledged.
    pub(crate) fn on_chunk_acked(&mut self, id: FlowId, chunk: Chunk) {
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
        let Body::Stream { send, .. } = &mut flow.body else {
            return;
        };
        let before = send.writable();
        let range = chunk.offset..chunk.offset + u64::from(chunk.len);
        let was_lost = send.on_acked(range, chunk.fin);
        self.lost_bytes = self.lost_bytes.saturating_sub(was_lost);
        if flow.write_blocked && send.writable() > before {
            flow.write_blocked = false;
            self.events.push_back(Event::FlowWritable(id));
        }
        self.maybe_forget(id);
    }

    /// A packet carrying `chunk` of `id` was lost (or its path failed).
    pub(crate) fn on_chunk_lost(&mut self, id: FlowId, chunk: Chunk) {
        let Some(send) = self.flows.get_mut(&id).and_then(Flow::stream_send) else {
            return;
        };
        let range = chunk.offset..chunk.offset + u64::from(chunk.len);
        let added = send.on_lost(range, chunk.fin);
        self.lost_bytes += added;
        if send.has_lost() {
            self.enqueue_retransmit(id);
        }
    }

    /// Forgets the flow when both directions are over.
    pub(crate) fn maybe_forget(&mut self, id: FlowId) {
        if !self.flows.get(&id).is_some_and(Flow::is_done) {
            return;
        }
        if let Some(mut flow) = self.flows.remove(&id) {
            self.redundant_flows -= usize::from(flow.redundant);
            if let Body::Stream { recv, .. } = &mut flow.body {
                self.consumed_total += recv.abandon();
            }
            if let Body::Datagram(d) = &mut flow.body {
                while let Some(buf) = d.inbox.pop_front() {
                    self.datagrams.recycle(buf);
                }
            }
            self.events.push_back(Event::FlowClosed(id));
            self.update_session_window();
        }
    }
}
