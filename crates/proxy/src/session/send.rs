//! The send path: [`Session::poll_transmit`] builds one packet per call straight into the
//! caller's buffer. Order: a pending CLOSE; path-bound packets (ACKs that are due, probes and
//! heartbeats, which belong to one path and bypass the scheduler); copies left over from a
//! `Duplicate` decision; then the next data item (retransmissions, datagrams, new stream bytes
//! round-robin over flows, control frames), placed by one call to
//! [`braid_sched_core::Scheduler::select`]; when there is none while stream bytes are held by
//! flow control and the scheduler links the redundant buffer, a copy of a stream packet in
//! flight on another path ([`Session::transmit_redundant`]). Nothing here allocates.

use braid_sched_core::tier::TierGate;
use braid_sched_core::{
    Decision, FlowId, PacketMeta, PathId, PathSet, PathState, Scheduler, Timestamp, TrafficClass,
};

use super::config::MIN_DATAGRAM_SIZE;
use super::datagram::QueuedDatagram;
use super::flow::Body;
use super::frame::{
    self, AckFields, DatagramDeadline, Fragment, Frame, MAX_FRAGMENT_HEADER_LEN, MAX_FRAGMENTS,
    MAX_HEADER_LEN, MAX_OPEN_LEN, MAX_STREAM_HEADER_LEN, encode_ack, encode_datagram_header,
    encode_header, encode_stream_header,
};
use super::path::Path;
use super::sent::{Control, Payload, SentPacket};
use super::stream::Chunk;
use super::varint::{Writer, varint_len};
use super::{Session, SessionState, Transmit};

/// Room left in every data packet for a piggybacked ACK.
pub(crate) const ACK_RESERVE: usize = 32;
/// Room kept in a widened data packet while control frames are queued: one control frame (at
/// most 32 bytes but an OPEN) with the margin `write_controls` asks for.
const CONTROL_ROOM: usize = 32 + ACK_RESERVE / 2;
/// Bytes charged for a control-only packet when asking the scheduler.
const CONTROL_PACKET_LEN: u32 = 48;

// The smallest path still carries the largest OPEN with its flow's first stream byte, so a
// stream chunk always fits the packet it is framed for (see `MIN_DATAGRAM_SIZE`).
const _: () = assert!(
    MIN_DATAGRAM_SIZE as usize
        > MAX_HEADER_LEN + MAX_OPEN_LEN + MAX_STREAM_HEADER_LEN + ACK_RESERVE
);

/// The largest stream chunk a packet of `max_datagram_size` bytes carries.
fn chunk_limit(max_datagram_size: u16) -> usize {
    usize::from(max_datagram_size)
        .saturating_sub(MAX_HEADER_LEN + MAX_STREAM_HEADER_LEN + ACK_RESERVE)
}

/// Where the datagram at the front of the queue goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DatagramRoute {
    /// On this path.
    Path(PathId),
    /// It fits a live path that cannot take a packet now.
    Wait,
    /// No live path takes it: none lives (one longer than every live path was cut into pieces
    /// or dropped before the scheduler saw it, in `next_item`).
    Drop,
}

/// The next thing to send, chosen before the scheduler places it.
#[derive(Clone, Copy, Debug)]
enum Item {
    Stream {
        flow: FlowId,
        chunk: Chunk,
    },
    Datagram,
    Control,
    /// A redundant-buffer copy of stream bytes already sent (never chosen by `next_item`).
    Copy {
        flow: FlowId,
        chunk: Chunk,
    },
}

/// Copies still to send after a `Duplicate` decision.
#[derive(Debug)]
pub(crate) struct PendingCopy {
    remaining: PathSet,
    meta: PacketMeta,
    what: CopyOf,
}

#[derive(Debug)]
enum CopyOf {
    Stream { flow: FlowId, chunk: Chunk },
    Datagram(QueuedDatagram),
}

/// How much slower than the fastest path with room a path must be, besides twice as slow, for
/// its queue to count as holding the flows back ([`Session::penalise_blocking_path`]): 10 ms,
/// so that the jitter of paths a fraction of a millisecond long (loopback, a LAN) cuts nothing.
const PENALTY_MARGIN_US: u64 = 10_000;

impl Session {
    /// Writes the next packet into `buf` and says on which path to send it; `None` when
    /// nothing can be sent now (see [`Session::poll_timeout`]).
    pub fn poll_transmit(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<Transmit> {
        self.clock = self.clock.max(now);
        match self.state {
            SessionState::Closed => None,
            SessionState::Closing { code, pending } => self.transmit_close(buf, code, pending),
            SessionState::Open => self
                .transmit_path_bound(now, buf)
                .or_else(|| self.transmit_copy(now, buf))
                .or_else(|| self.transmit_scheduled(now, buf)),
        }
    }

    fn transmit_close(&mut self, buf: &mut [u8], code: u64, pending: u32) -> Option<Transmit> {
        let bit = pending.trailing_zeros();
        let rest = pending & !(1u32 << bit);
        self.state = SessionState::Closing {
            code,
            pending: rest,
        };
        if rest == 0 {
            self.finish_close(code, false);
        }
        let path = self.paths.get_mut(bit as usize)?.as_mut()?;
        let mut w = Writer::new(buf);
        encode_header(&mut w, path.next_pn).ok()?;
        Frame::Close { code, reason: "" }.encode(&mut w).ok()?;
        let mut sent =
            SentPacket::new(path.next_pn, Timestamp::ZERO, w.len() as u16, Payload::None);
        sent.ack_eliciting = false;
        path.on_sent(sent, Timestamp::ZERO);
        Some(Transmit {
            path: path.id,
            len: w.len(),
        })
    }

    fn take_report(&mut self, now: Timestamp) -> Option<braid_sched_core::ReceiverReport> {
        if now < self.next_report_at {
            return None;
        }
        let mut report = self.report.report;
        report.interval_us =
            u32::try_from((now - self.report.since).as_micros()).unwrap_or(u32::MAX);
        self.report.report = Default::default();
        self.report.since = now;
        self.next_report_at = now + self.config.report_interval;
        Some(report)
    }

    fn transmit_path_bound(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<Transmit> {
        let i = self.paths[..self.path_end]
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.ack_due() || p.probe_due))?;
        let report = self.take_report(now);
        let path = self.paths[i].as_mut()?;
        let mds = usize::from(path.config.max_datagram_size).min(buf.len());
        let mut w = Writer::new(&mut buf[..mds]);
        let pn = path.next_pn;
        encode_header(&mut w, pn).ok()?;
        if path.ack_pending() {
            write_ack(path, &mut w, now, report);
        }
        let probe = path.probe_due;
        if probe {
            Frame::Ping.encode(&mut w).ok()?;
            path.probe_due = false;
        }
        let mut sent = SentPacket::new(pn, now, w.len() as u16, Payload::None);
        sent.ack_eliciting = probe;
        sent.in_flight = probe && !path.is_failed();
        path.on_sent(sent, now);
        Some(Transmit {
            path: path.id,
            len: w.len(),
        })
    }

    fn transmit_copy(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<Transmit> {
        loop {
            let copy = self.pending_copy.as_mut()?;
            let Some(p) = copy.remaining.iter().next() else {
                if let Some(PendingCopy {
                    what: CopyOf::Datagram(d),
                    ..
                }) = self.pending_copy.take()
                {
                    self.datagrams.recycle(d.data);
                }
                return None;
            };
            let mut rest = PathSet::EMPTY;
            for q in copy.remaining.iter().skip(1) {
                rest.insert(q);
            }
            copy.remaining = rest;
            let meta = copy.meta;
            if !self.path_usable(p) {
                continue;
            }
            if let Some(t) = self.emit(now, buf, p, None, &meta) {
                return Some(t);
            }
        }
    }

    /// MPTCP's penalisation (Raiciu et al., "How hard can it be? Designing and implementing a
    /// deployable multipath TCP", NSDI 2012, §4.2): stream bytes wait for flow control (a flow's
    /// window or the session's) while an admitted path has window room, and the oldest stream
    /// packet in flight is on a path whose smoothed RTT is over twice the fastest such path's
    /// and [`PENALTY_MARGIN_US`] above it.
    /// That slower path's queue holds the window back: the bytes the fast path brings wait at
    /// the receiver for the ones queued there, and the fast path idles. Its window is cut as
    /// by a congestion event, at most once per its smoothed RTT ([`Path::penalise`]), so that
    /// its queue drains. Over 30 Mbit/s beside 1 Mbit/s with a 300-packet queue (about 2.9 s),
    /// a 30 MB upload under minRTT took 15.5 s before, 8.9 s now, against 8.1 s over the fast
    /// path alone.
    fn penalise_blocking_path(&mut self, now: Timestamp) {
        // While the scheduler links the redundant buffer (EdAR's redundant mode), its copies
        // cover the holes instead (`transmit_redundant`); a cut then only slowed them down (in
        // `session_redundant`, a dark path's longest stall went from 0.5 to 61 ms).
        if self.lost_bytes > 0 || self.unsent_bytes == 0 || self.scheduler.link_redundant_buffer() {
            return;
        }
        // The path holding the oldest stream packet in flight, unless it was cut within its
        // last round trip: only then are the paths' views worth refreshing (this runs at every
        // poll that finds the flows held back).
        let Some((_, i)) = self.paths[..self.path_end]
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((p.as_ref()?.oldest_stream_in_flight()?, i)))
            .min()
        else {
            return;
        };
        if self.paths[i]
            .as_ref()
            .is_none_or(|p| p.penalised_recently(now))
        {
            return;
        }
        self.refresh_views(now);
        let views = &self.views[..self.view_count];
        let gate = TierGate::new(views);
        let Some(fast_us) = views
            .iter()
            .filter(|v| v.is_usable() && gate.admits(v) && v.can_send(MIN_DATAGRAM_SIZE.into()))
            .map(|v| u64::from(v.srtt_us))
            .min()
        else {
            return;
        };
        let slow_from =
            std::time::Duration::from_micros((2 * fast_us).max(fast_us + PENALTY_MARGIN_US));
        if let Some(path) = self.paths[i].as_mut()
            && path.rtt.srtt() > slow_from
        {
            path.penalise(now);
        }
    }

    /// The redundant buffer (EdAR's redundant mode, §IV-A), while the scheduler links it
    /// ([`Scheduler::link_redundant_buffer`]), at low priority: it runs only when no data item
    /// can be sent (no lost bytes, datagram or control frame waits, every stream flow is empty
    /// or held by its send window or the session credit) while some stream bytes are still
    /// unsent, i.e. held by flow control (in a handoff, the holes a lossy path leaves hold the
    /// flow window back while the other path has room). So it never takes window room new data
    /// can use, nor room left idle between transfers (copies queued into a deep bottleneck
    /// buffer there delay the next transfer). Then the first live primary path with window room
    /// for it gets a copy of the oldest stream packet in flight on another path (sent, neither
    /// acknowledged nor declared lost) that was not yet copied onto it. The copy re-reads the
    /// bytes by offset from the send buffer, as a retransmission does; it is an ordinary
    /// ack-eliciting packet with its own packet number on its path, under that path's congestion
    /// control and pacing. Each packet is copied at most once per path (a cursor per pair of
    /// paths; a copy a `Duplicate` decision placed on a path counts, `SentPacket::copied_to`),
    /// copies and reinjected packets are never copied, and a packet with any acknowledged byte
    /// is skipped. A copy's loss queues nothing: the
    /// original answers for its bytes (the copy is marked `reinjected`).
    fn transmit_redundant(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<Transmit> {
        // Held new bytes (`unsent_bytes`) are what makes room idle; with none, the room is
        // left for the next bytes the application writes.
        if !self.scheduler.link_redundant_buffer() || self.lost_bytes > 0 || self.unsent_bytes == 0
        {
            return None;
        }
        self.copy_wakeup = None;
        for q in 0..self.path_end {
            let Some((p, original)) = self.oldest_to_copy(q, buf.len()) else {
                continue;
            };
            let Payload::Stream { flow, chunk } = original.payload else {
                continue;
            };
            let Some(target) = self.paths[q].as_mut() else {
                continue;
            };
            let id = target.id;
            let mut wake = None;
            let view = target.view(now, &mut wake);
            let room = view.state == PathState::Active && view.can_send(u32::from(original.size));
            let held = match wake {
                Some(at) => Some(at),
                None if room => target.pacing_delay(now),
                None => None,
            };
            if let Some(at) = held {
                self.copy_wakeup = Some(self.copy_wakeup.map_or(at, |w| w.min(at)));
                continue;
            }
            if !room {
                continue;
            }
            self.copy_from[q][p] = original.pn + 1;
            let item = Item::Copy { flow, chunk };
            let meta = self.meta_for(item);
            if let Some(t) = self.emit(now, buf, id, Some((item, PathSet::EMPTY)), &meta) {
                return Some(t);
            }
        }
        None
    }

    /// The redundant buffer's candidate for path slot `q`: the oldest (by send time) packet to
    /// copy on any other path, with that path's slot. Candidates that can never be copied onto
    /// `q` (an acknowledged byte, a closed flow, too large for `q`, copied onto `q` at placement)
    /// move the cursor past them.
    fn oldest_to_copy(&mut self, q: usize, buf_len: usize) -> Option<(usize, SentPacket)> {
        let target = self.paths.get(q)?.as_ref()?;
        if target.is_failed() {
            return None;
        }
        let id = target.id;
        let mds = usize::from(target.config.max_datagram_size).min(buf_len);
        let header = 1 + varint_len(target.next_pn);
        let mut best: Option<(usize, SentPacket)> = None;
        for p in 0..self.path_end {
            if p == q {
                continue;
            }
            let Some(source) = self.paths[p].as_ref() else {
                continue;
            };
            loop {
                let Some(cand) = source.next_to_copy(self.copy_from[q][p]) else {
                    // Nothing up to the newest packet can ever be copied onto `q`: the
                    // packets skipped were settled, copies, reinjected or not stream data.
                    self.copy_from[q][p] = source.next_pn;
                    break;
                };
                // A copy placed on `q` with the packet (a `Duplicate` decision) counts as its
                // one copy there.
                let placed_on_q = cand.copied_to.contains(id);
                if !placed_on_q && self.copyable(&cand, mds.saturating_sub(header)) {
                    self.copy_from[q][p] = cand.pn;
                    if best.is_none_or(|(_, b)| cand.time_sent < b.time_sent) {
                        best = Some((p, cand));
                    }
                    break;
                }
                self.copy_from[q][p] = cand.pn + 1;
            }
        }
        best
    }

    /// True when `packet`'s stream bytes are all unacknowledged and their frames fit `room`
    /// bytes (a packet less its header).
    fn copyable(&self, packet: &SentPacket, room: usize) -> bool {
        let Payload::Stream { flow, chunk } = packet.payload else {
            return false;
        };
        let Some(f) = self.flows.get(&flow) else {
            return false;
        };
        let Body::Stream { send, .. } = &f.body else {
            return false;
        };
        let open = if f.open_acked {
            0
        } else {
            frame::open_len(flow, f.target.as_ref())
        };
        let stream_header = frame::stream_header_len(flow, chunk.offset, u64::from(chunk.len));
        chunk.len > 0
            && !send.any_acked(chunk.offset..chunk.offset + u64::from(chunk.len))
            && open + stream_header + chunk.len as usize <= room
    }

    /// True when `p`'s pacer holds the next packet back; the release time becomes a timer.
    fn paced(&mut self, p: PathId, now: Timestamp) -> bool {
        let Some(at) = self
            .paths
            .get_mut(p.index())
            .and_then(Option::as_mut)
            .and_then(|path| path.pacing_delay(now))
        else {
            return false;
        };
        self.pacing_wakeup = Some(self.pacing_wakeup.map_or(at, |w| w.min(at)));
        true
    }

    fn path_usable(&self, p: PathId) -> bool {
        self.paths
            .get(p.index())
            .and_then(Option::as_ref)
            .is_some_and(|path| !path.is_failed() && path.can_track())
    }

    /// Largest stream chunk every live path can carry (so that a chunk fits whichever path the
    /// scheduler picks, and every copy of a duplicated one).
    fn max_chunk(&self) -> usize {
        self.paths[..self.path_end]
            .iter()
            .flatten()
            .filter(|p| !p.is_failed())
            .map(|p| p.config.max_datagram_size)
            .min()
            .map_or(0, chunk_limit)
    }

    /// The stream chunk `chunk` grown to fill the packet path `p` builds next, once the
    /// scheduler sent it there alone. `max_chunk` holds room for the largest headers and an ACK
    /// on the smallest live path (a chunk must fit whichever path is picked, and every copy of a
    /// duplicated one); here the headers are the real ones of this packet (its packet number, the
    /// flow id and the chunk's offset as encoded), and room for an ACK is kept only when the path
    /// has one to piggyback, for a control frame only while one is queued (while the redundant
    /// buffer is linked, for the smallest live path and a 4-byte packet number, so that a copy
    /// fits whichever path takes it). On the loopback paths
    /// of the `e2e` bench that is 49 payload bytes more per 1414-byte packet (1401 instead of
    /// 1352: 3.5% fewer packets per byte).
    fn widen_chunk(&self, flow: FlowId, chunk: Chunk, p: PathId, max_chunk: usize) -> Chunk {
        let Some(path) = self.paths.get(p.index()).and_then(Option::as_ref) else {
            return chunk;
        };
        let mut mds = usize::from(path.config.max_datagram_size);
        let mut header = 1 + varint_len(path.next_pn);
        if self.scheduler.link_redundant_buffer() {
            // A copy of this packet may go on any live path later (see `transmit_redundant`):
            // sized for the smallest one and a packet number of up to 4 bytes (below 2^30).
            mds = self.paths[..self.path_end]
                .iter()
                .flatten()
                .filter(|q| !q.is_failed())
                .map(|q| usize::from(q.config.max_datagram_size))
                .min()
                .map_or(mds, |m| m.min(mds));
            header = header.max(1 + 4);
        }
        let mut reserve = if path.ack_pending() { ACK_RESERVE } else { 0 };
        if !self.controls.is_empty() {
            // Room for a queued control frame (a credit update) to ride along, as
            // `write_controls` asks: without it, controls would wait behind all stream data.
            reserve += CONTROL_ROOM;
        }
        // The length field is written for at most `mds` bytes, so its varint is no longer.
        let stream_header = frame::stream_header_len(flow, chunk.offset, mds as u64);
        let limit = mds.saturating_sub(header + stream_header + reserve);
        if limit <= max_chunk {
            return chunk;
        }
        // Peeking is deterministic: the same flow gives the same start, only longer.
        match self.peek_chunk(flow, limit, self.session_credit(), chunk.retransmit) {
            Some(wide) if wide.offset == chunk.offset && wide.retransmit == chunk.retransmit => {
                wide
            }
            _ => chunk,
        }
    }

    /// Where the queued front datagram goes: `preferred` (the scheduler's pick) when it fits
    /// there, else the usable path with the largest datagrams it fits.
    fn datagram_route(&self, preferred: Option<PathId>) -> DatagramRoute {
        let Some(d) = self.datagrams.front() else {
            return DatagramRoute::Drop;
        };
        let need = MAX_HEADER_LEN + d.header_len() + d.data.len();
        let fits = |p: &Path| usize::from(p.config.max_datagram_size) >= need;
        let path = |p: PathId| self.paths.get(p.index()).and_then(Option::as_ref);
        if let Some(p) = preferred
            && path(p).is_some_and(fits)
            && self.path_usable(p)
        {
            return DatagramRoute::Path(p);
        }
        let live = || {
            self.paths[..self.path_end]
                .iter()
                .flatten()
                .filter(|p| !p.is_failed() && fits(p))
        };
        match live()
            .filter(|p| p.can_track())
            .max_by_key(|p| p.config.max_datagram_size)
        {
            Some(p) => DatagramRoute::Path(p.id),
            None if live().next().is_some() => DatagramRoute::Wait,
            None => DatagramRoute::Drop,
        }
    }

    /// Drops the front datagram (the scheduler said so, its deadline passed, or no path takes
    /// it), with the pieces of it still queued when it is a fragment: one datagram dropped.
    fn drop_front_datagram(&mut self) {
        let Some(d) = self.datagrams.pop() else {
            return;
        };
        if d.deadline.is_some() {
            self.locally_dropped_deadlines += 1;
        }
        self.datagrams_dropped += 1;
        if d.fragment.is_some() {
            while let Some(next) = self.datagrams.front()
                && next.fragment.is_some()
                && (next.flow, next.seq) == (d.flow, d.seq)
            {
                if let Some(piece) = self.datagrams.pop() {
                    self.datagrams.recycle(piece.data);
                }
            }
        }
        self.datagrams.recycle(d.data);
    }

    /// Whether the front datagram fits no live path while one lives. Such a datagram is cut or
    /// dropped before the scheduler sees it: it may be longer than every path's window can
    /// ever be (two packets of a small path), and the scheduler would wait for room forever.
    fn front_fits_no_live_path(&self) -> bool {
        let Some(d) = self.datagrams.front() else {
            return false;
        };
        let need = MAX_HEADER_LEN + d.header_len() + d.data.len();
        let mut live = self.paths[..self.path_end]
            .iter()
            .flatten()
            .filter(|p| !p.is_failed())
            .peekable();
        live.peek().is_some() && live.all(|p| usize::from(p.config.max_datagram_size) < need)
    }

    /// Whether the front datagram's flow still has its first OPEN queued and no live path takes
    /// the OPEN beside the datagram: then the OPEN goes first, in a packet of control frames.
    /// (Sent alone, the datagram would reach a peer that does not know its flow, which drops
    /// it: the first datagram of a flow, often a QUIC Initial.)
    fn open_goes_first(&self) -> bool {
        let Some(d) = self.datagrams.front() else {
            return false;
        };
        // Mostly no control frame waits: the flow's lookup is skipped.
        if !self.controls.contains(&Control::Open(d.flow)) {
            return false;
        }
        let Some(flow) = self.flows.get(&d.flow).filter(|f| !f.open_acked) else {
            return false;
        };
        let beside = MAX_HEADER_LEN
            + frame::open_len(d.flow, flow.target.as_ref())
            + d.header_len()
            + d.data.len();
        let fits_beside = self.paths[..self.path_end]
            .iter()
            .flatten()
            .any(|p| !p.is_failed() && usize::from(p.config.max_datagram_size) >= beside);
        !fits_beside
    }

    /// Replaces the front datagram, which fits no live path, by its pieces, of nearly equal sizes,
    /// each of which fits every live path (so the scheduler places them freely); false when the
    /// peer does not reassemble them or more than [`MAX_FRAGMENTS`] would be needed.
    fn split_front_datagram(&mut self) -> bool {
        if !self.peer_reassembles {
            return false;
        }
        let Some(len) = self
            .datagrams
            .front()
            .filter(|d| d.fragment.is_none())
            .map(|d| d.data.len())
        else {
            return false;
        };
        let Some(smallest) = self.paths[..self.path_end]
            .iter()
            .flatten()
            .filter(|p| !p.is_failed())
            .map(|p| usize::from(p.config.max_datagram_size))
            .min()
        else {
            return false;
        };
        let room = smallest.saturating_sub(MAX_HEADER_LEN + MAX_FRAGMENT_HEADER_LEN);
        if room == 0 {
            return false;
        }
        let count = len.div_ceil(room);
        let Ok(count) = u8::try_from(count) else {
            return false;
        };
        if !(2..=MAX_FRAGMENTS).contains(&count) {
            return false;
        }
        let Some(d) = self.datagrams.pop() else {
            return false;
        };
        let n = usize::from(count);
        for index in (0..count).rev() {
            let i = usize::from(index);
            let data = self
                .datagrams
                .buffer_with(&d.data[i * len / n..(i + 1) * len / n]);
            self.datagrams.push_front(QueuedDatagram {
                flow: d.flow,
                seq: d.seq,
                deadline: d.deadline,
                fragment: Some(Fragment { index, count }),
                data,
            });
        }
        self.datagrams.recycle(d.data);
        self.datagrams_split += 1;
        true
    }

    fn session_credit(&self) -> u64 {
        self.peer_max_data.saturating_sub(self.sent_total)
    }

    fn next_item(&mut self, now: Timestamp, max_chunk: usize) -> Option<Item> {
        let credit = self.session_credit();
        while let Some(&id) = self.retransmit_queue.front() {
            if let Some(chunk) = self.peek_chunk(id, max_chunk, credit, true) {
                return Some(Item::Stream { flow: id, chunk });
            }
            self.retransmit_queue.pop_front();
            if let Some(f) = self.flows.get_mut(&id) {
                f.in_retransmit_queue = false;
            }
        }
        while let Some(d) = self.datagrams.front() {
            if d.deadline.is_some_and(|dl| dl <= now) {
                self.drop_front_datagram();
            } else if self.front_fits_no_live_path() {
                if !self.split_front_datagram() {
                    self.drop_front_datagram();
                }
            } else if self.open_goes_first() {
                return Some(Item::Control);
            } else {
                return Some(Item::Datagram);
            }
        }
        while let Some(&id) = self.send_queue.front() {
            if let Some(chunk) = self.peek_chunk(id, max_chunk, credit, false) {
                return Some(Item::Stream { flow: id, chunk });
            }
            self.send_queue.pop_front();
            if let Some(f) = self.flows.get_mut(&id) {
                f.in_send_queue = false;
            }
        }
        (!self.controls.is_empty()).then_some(Item::Control)
    }

    fn peek_chunk(
        &self,
        id: FlowId,
        max_chunk: usize,
        credit: u64,
        lost_only: bool,
    ) -> Option<Chunk> {
        let flow = self.flows.get(&id)?;
        let Body::Stream { send, .. } = &flow.body else {
            return None;
        };
        if lost_only && !send.has_lost() {
            return None;
        }
        let open = if flow.open_acked {
            0
        } else {
            frame::open_len(id, flow.target.as_ref())
        };
        let max_len = u32::try_from(max_chunk.saturating_sub(open)).unwrap_or(u32::MAX);
        send.peek(max_len.max(1), credit)
    }

    fn meta_for(&self, item: Item) -> PacketMeta {
        let backlog = self.unsent_bytes + self.lost_bytes + self.datagrams.queued_bytes();
        let mut meta = PacketMeta {
            backlog_bytes: backlog,
            send_window: self.session_credit(),
            ..PacketMeta::default()
        };
        match item {
            Item::Stream { flow, chunk } | Item::Copy { flow, chunk } => {
                meta.flow = flow;
                meta.len = chunk.len + (MAX_HEADER_LEN + MAX_STREAM_HEADER_LEN) as u32 / 2;
                meta.class = TrafficClass::Bulk;
                meta.retransmit = chunk.retransmit;
            }
            Item::Datagram => {
                if let Some(d) = self.datagrams.front() {
                    meta.flow = d.flow;
                    meta.len = (d.data.len() + d.header_len()) as u32;
                    meta.deadline = d.deadline;
                }
                meta.class = TrafficClass::Realtime;
            }
            Item::Control => {
                meta.flow = FlowId(u64::MAX);
                meta.len = CONTROL_PACKET_LEN;
                meta.class = TrafficClass::Control;
            }
        }
        meta
    }

    fn refresh_views(&mut self, now: Timestamp) {
        self.view_count = 0;
        self.pacing_wakeup = None;
        for path in self.paths[..self.path_end].iter_mut().flatten() {
            self.views[self.view_count] = path.view(now, &mut self.pacing_wakeup);
            self.view_count += 1;
        }
    }

    fn transmit_scheduled(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<Transmit> {
        let max_chunk = self.max_chunk();
        if max_chunk == 0 {
            return None;
        }
        loop {
            let Some(item) = self.next_item(now, max_chunk) else {
                // Nothing can be sent now (no lost bytes, datagram or control frame queued, and
                // every flow empty or held by its send window or the session credit): only now
                // may the redundant buffer take the window room left. Paths with window room
                // are application-limited from here on.
                for path in self.paths[..self.path_end].iter_mut().flatten() {
                    path.on_app_limited();
                }
                self.penalise_blocking_path(now);
                return self.transmit_redundant(now, buf);
            };
            let meta = self.meta_for(item);
            // A flow sent redundantly goes on every path with room, whatever the scheduler
            // (within its rate bound).
            let marked = self.redundant_flows > 0
                && matches!(item, Item::Stream { .. } | Item::Datagram)
                && self.flows.get(&meta.flow).is_some_and(|f| f.redundant);
            let redundant = marked && self.redundant_room(now);
            // Counted as the packet goes on one path (a packet held back is judged again).
            let capped = u64::from(marked && !redundant);
            self.refresh_views(now);
            let views = &self.views[..self.view_count];
            let decision = if redundant {
                braid_sched_core::sched::redundant::Redundant::default().select(views, &meta, now)
            } else {
                self.scheduler.select(views, &meta, now)
            };
            match decision {
                Decision::Send(p) if self.path_usable(p) => {
                    let (p, item) = match item {
                        Item::Stream { flow, chunk } => {
                            let chunk = self.widen_chunk(flow, chunk, p, max_chunk);
                            (p, Item::Stream { flow, chunk })
                        }
                        Item::Datagram => match self.datagram_route(Some(p)) {
                            DatagramRoute::Path(q) => (q, item),
                            DatagramRoute::Wait => return None,
                            DatagramRoute::Drop => {
                                self.drop_front_datagram();
                                continue;
                            }
                        },
                        Item::Control | Item::Copy { .. } => (p, item),
                    };
                    if self.paced(p, now) {
                        return None;
                    }
                    let meta = self.meta_for(item);
                    self.redundant_capped += capped;
                    return self.emit(now, buf, p, Some((item, PathSet::EMPTY)), &meta);
                }
                Decision::Duplicate(set) => {
                    let mut usable = PathSet::EMPTY;
                    for p in set.iter().filter(|&p| self.path_usable(p)) {
                        usable.insert(p);
                    }
                    if matches!(item, Item::Datagram) {
                        // Only the copies that fit; none: as if sent to the first alone.
                        let mut fitting = PathSet::EMPTY;
                        for p in usable.iter() {
                            if self.datagram_route(Some(p)) == DatagramRoute::Path(p) {
                                fitting.insert(p);
                            }
                        }
                        if fitting.is_empty() && !usable.is_empty() {
                            match self.datagram_route(None) {
                                DatagramRoute::Path(q) => fitting.insert(q),
                                DatagramRoute::Wait => return None,
                                DatagramRoute::Drop => {
                                    self.drop_front_datagram();
                                    continue;
                                }
                            }
                        }
                        usable = fitting;
                    }
                    let first = usable.iter().next()?;
                    if self.paced(first, now) {
                        return None;
                    }
                    let mut rest = PathSet::EMPTY;
                    for p in usable.iter().skip(1) {
                        rest.insert(p);
                    }
                    if redundant && !rest.is_empty() {
                        self.spend_redundant(meta.len, now);
                    }
                    return self.emit(now, buf, first, Some((item, rest)), &meta);
                }
                Decision::Drop if matches!(item, Item::Datagram) => self.drop_front_datagram(),
                _ => return None,
            }
        }
    }

    /// Builds one packet on `p`: the item (or, with `None`, the pending copy), control frames,
    /// and a piggybacked ACK.
    fn emit(
        &mut self,
        now: Timestamp,
        buf: &mut [u8],
        p: PathId,
        item: Option<(Item, PathSet)>,
        meta: &PacketMeta,
    ) -> Option<Transmit> {
        let path = self.paths.get(p.index())?.as_ref()?;
        let mds = usize::from(path.config.max_datagram_size).min(buf.len());
        let pn = path.next_pn;
        let mut w = Writer::new(&mut buf[..mds]);
        encode_header(&mut w, pn).ok()?;
        let mut sent = SentPacket::new(pn, now, 0, Payload::None);
        self.write_item(&mut w, item, &mut sent, meta, now)?;
        self.write_controls(&mut w, &mut sent);
        let report = if self.paths[p.index()].as_ref()?.ack_pending() {
            self.take_report(now)
        } else {
            None
        };
        let path = self.paths[p.index()].as_mut()?;
        if path.ack_pending() {
            write_ack(path, &mut w, now, report);
        }
        if w.len() <= MAX_HEADER_LEN
            && matches!(sent.payload, Payload::None)
            && sent.controls[0].is_none()
        {
            Frame::Ping.encode(&mut w).ok()?;
        }
        if !matches!(sent.payload, Payload::None) || sent.controls[0].is_some() {
            self.busy_at = self.busy_at.max(now);
        }
        sent.size = w.len() as u16;
        let len = w.len();
        path.on_sent(sent, now);
        self.scheduler.on_sent(p, meta, now);
        Some(Transmit { path: p, len })
    }

    /// Writes the packet's data frame: the item (or, with `None`, the pending copy).
    fn write_item(
        &mut self,
        w: &mut Writer<'_>,
        item: Option<(Item, PathSet)>,
        sent: &mut SentPacket,
        meta: &PacketMeta,
        now: Timestamp,
    ) -> Option<()> {
        match item {
            Some((Item::Stream { flow, chunk }, copies)) => {
                self.write_stream(w, flow, chunk, sent, true)?;
                sent.copied_to = copies;
                if !copies.is_empty() {
                    self.pending_copy = Some(PendingCopy {
                        remaining: copies,
                        meta: *meta,
                        what: CopyOf::Stream { flow, chunk },
                    });
                }
            }
            Some((Item::Datagram, copies)) => {
                let d = self.datagrams.pop()?;
                sent.carried_open = self.write_open_for_datagram(w, &d);
                write_datagram(w, &d, now)?;
                sent.payload = Payload::Datagram { flow: d.flow };
                if copies.is_empty() {
                    self.datagrams.recycle(d.data);
                } else {
                    self.pending_copy = Some(PendingCopy {
                        remaining: copies,
                        meta: *meta,
                        what: CopyOf::Datagram(d),
                    });
                }
            }
            Some((Item::Control, _)) => {}
            Some((Item::Copy { flow, chunk }, _)) => {
                self.write_stream(w, flow, chunk, sent, false)?;
                sent.copy = true;
                sent.reinjected = true;
            }
            None => match self.pending_copy.as_ref().map(|c| &c.what) {
                Some(CopyOf::Stream { flow, chunk }) => {
                    let (flow, chunk) = (*flow, *chunk);
                    self.write_stream(w, flow, chunk, sent, false)?;
                    sent.placement_copy = true;
                }
                Some(CopyOf::Datagram(d)) => {
                    sent.carried_open = self.write_open_for_datagram(w, d);
                    write_datagram(w, d, now)?;
                    sent.payload = Payload::Datagram { flow: d.flow };
                }
                None => return None,
            },
        }
        Some(())
    }

    /// Writes the OPEN of a datagram's flow in front of it while the peer may not know the flow
    /// (when it fits next to the payload); returns whether it did.
    fn write_open_for_datagram(&self, w: &mut Writer<'_>, d: &QueuedDatagram) -> bool {
        let Some(flow) = self.flows.get(&d.flow).filter(|f| !f.open_acked) else {
            return false;
        };
        let target = flow.target.as_ref();
        let needed = frame::open_len(d.flow, target) + d.header_len() + d.data.len();
        if w.remaining() < needed {
            return false;
        }
        flow.open_frame(d.flow, self.peer_knows_redundant_flows)
            .encode(w)
            .is_ok()
    }

    fn write_stream(
        &mut self,
        w: &mut Writer<'_>,
        id: FlowId,
        chunk: Chunk,
        sent: &mut SentPacket,
        first_copy: bool,
    ) -> Option<()> {
        let tell_redundant = self.peer_knows_redundant_flows;
        let flow = self.flows.get_mut(&id)?;
        if !flow.open_acked {
            flow.open_frame(id, tell_redundant).encode(w).ok()?;
            sent.carried_open = true;
        }
        let Body::Stream { send, .. } = &mut flow.body else {
            return None;
        };
        if !first_copy && !send.still_held(chunk.offset) {
            return None;
        }
        encode_stream_header(w, id, chunk.offset, chunk.len as usize, chunk.fin).ok()?;
        send.read_chunk(chunk.offset, w.reserve(chunk.len as usize).ok()?);
        sent.payload = Payload::Stream { flow: id, chunk };
        if !first_copy {
            return Some(());
        }
        send.on_sent(chunk);
        let more = send.has_new();
        let len = u64::from(chunk.len);
        if chunk.retransmit {
            self.lost_bytes = self.lost_bytes.saturating_sub(len);
        } else {
            self.unsent_bytes = self.unsent_bytes.saturating_sub(len);
            self.sent_total += len;
            // Round-robin: the flow goes to the back of the queue.
            if self.send_queue.front() == Some(&id) {
                self.send_queue.pop_front();
                if more {
                    self.send_queue.push_back(id);
                } else if let Some(f) = self.flows.get_mut(&id) {
                    f.in_send_queue = false;
                }
            }
        }
        Some(())
    }
}

fn write_ack(
    path: &mut Path,
    w: &mut Writer<'_>,
    now: Timestamp,
    report: Option<braid_sched_core::ReceiverReport>,
) {
    let (ack_delay_us, receiver_time_us) = path.ack_timing(now);
    let fields = AckFields {
        path: path.id,
        ack_delay_us,
        receiver_time_us,
        report,
    };
    let room = w.remaining();
    if let Ok(true) = encode_ack(w, &path.received, &fields, room) {
        path.on_ack_sent();
    }
}

fn write_datagram(w: &mut Writer<'_>, d: &QueuedDatagram, now: Timestamp) -> Option<()> {
    let deadline = d.deadline.map(|dl| DatagramDeadline {
        budget_us: u32::try_from((dl - now).as_micros()).unwrap_or(u32::MAX),
        sent_at_us: now.as_micros(),
    });
    encode_datagram_header(w, d.flow, d.seq, deadline, d.fragment, d.data.len()).ok()?;
    w.bytes(&d.data).ok()
}

#[cfg(test)]
#[path = "send_tests.rs"]
mod tests;
