//! The two halves of a reliable stream flow: [`SendStream`] (a ring of written bytes kept until
//! acknowledged, with the ranges lost and waiting for retransmission) and [`RecvStream`] (a ring
//! of at most the flow-control window that doubles as the reorder buffer). Both rings are
//! allocated at their first use, sized to what they hold (at least [`MIN_RING`] bytes), and grow
//! ([`RING_GROWTH`]-fold) up to their configured size when more must be held: a flow that
//! carries a few kilobytes never touches a window-sized buffer, and a ring stops growing once it
//! holds what the flow keeps outstanding, so nothing here allocates per packet; a ring grown for
//! a window (or a peer's credit) that has since shrunk is moved into a smaller one once what it
//! holds fits (`Ring::shrink_to`). A ring given up
//! (outgrown, or its flow dropped) goes to a small pool ([`POOL_MAX_BYTES`]) that the
//! next ring of a fitting size takes instead of fresh memory, so short flows and back-to-back
//! sessions (the simulator's runs) do not fault in and zero new pages every time. A reused ring
//! holds stale bytes; only offsets written into the ring are ever read back.

use std::ops::Range;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use braid_sched_core::Timestamp;

use super::ranges::RangeSet;

/// Ranges kept before the range sets grow.
const RANGE_CAPACITY: usize = 16;

/// A receive side holds at most one range of out-of-order bytes per this many bytes of its
/// window, and at least [`MIN_RECV_RANGES`], at most [`MAX_RECV_RANGES`] (see
/// [`RecvStream::max_ranges`]).
const RECV_WINDOW_PER_RANGE: u64 = 1024;
/// The fewest ranges a receive side may hold.
pub(crate) const MIN_RECV_RANGES: usize = 32;
/// The most ranges a receive side may hold: inserting into the sorted set moves at most this
/// many ranges (16 KiB).
pub(crate) const MAX_RECV_RANGES: usize = 1024;

/// The most ranges of received bytes a receive side with `window` bytes of window holds.
pub(crate) fn max_recv_ranges(window: u64) -> usize {
    usize::try_from(window / RECV_WINDOW_PER_RANGE)
        .unwrap_or(MAX_RECV_RANGES)
        .clamp(MIN_RECV_RANGES, MAX_RECV_RANGES)
}

/// A receiver advertises new credit once `window / CREDIT_UPDATE_FRACTION` bytes were read:
/// with an eighth the sender's usable credit stays between 7/8 W and W.
///
/// History (figures from `braid sim`, minrtt): an eighth first cut the goodput a second path
/// carries while the first is dark from 15.1 (a half) to 1.4 Mbit/s
/// (`tests/sim_metrics.rs` in braid-testbed). Not the credit itself: the fuller window let
/// CUBIC fill 1000-packet queues, queueing inflated the probe timeout, and what the dark path
/// had in flight (retransmissions of a hole among it) waited for three backed-off probe
/// timeouts or the outage's end while the receiver's window stayed pinned behind the hole and
/// the other path idled. Since a probe timeout reinjects a path's in-flight stream bytes
/// (`Path::reinject_in_flight`), that case gives 9.98 / 15.5 / 18.7 Mbit/s with a half / a
/// quarter / an eighth, and EdAR Table III (`edar-table3-handoff.toml`, minrtt) 8.88 / 9.88 /
/// 10.23 Mbit/s of goodput (handoff 8.62 / 8.49 / 8.41): an eighth is kept. With the later
/// probe cadence of a path closed by a probe timeout, a half against an eighth: the handoff case
/// run for 20 s 25.23 against 26.17 Mbit/s, EdAR Table III 8.88 against 10.23; the FALCON web
/// pages do not all gain (minrtt page time: github 3.36 against 3.49 s, stackoverflow 5.46
/// against 5.88 s, google 0.926 against 0.866 s; not investigated further).
pub(crate) const CREDIT_UPDATE_FRACTION: u64 = 8;

/// A receive window that grows ([`RecvStream::growing_to`]) doubles when the application read
/// a whole window in less than this many round trips: the flow then moved at least half a
/// window per round trip, so the window may be what holds it back (a flow moves at most one
/// window per round trip). It thus settles at about twice the bandwidth-delay product the flow
/// reaches, or at its largest, and a flow whose application reads slowly never grows its own.
pub(crate) const WINDOW_GROWTH_RTTS: u32 = 2;

/// A window that grew halves again (not below its first size) when less than a whole window
/// was read in this many round trips: the application reads slowly now (a burst its socket
/// buffers took at first made the flow look fast, say), or the path slowed, or the flow paused,
/// and the credit granted (what waits unread here, and what the sender buffers for it) falls
/// back. Twice [`WINDOW_GROWTH_RTTS`], as a window doubles or halves: a window that just
/// doubled takes under four round trips to read at the pace that grew it, one that just halved
/// over two, so a steady reader's window does not swing between two sizes.
pub(crate) const WINDOW_SHRINK_RTTS: u32 = 4;

/// Smallest ring allocated.
const MIN_RING: u64 = 4096;
/// Factor by which a ring grows at least (a bulk sender fills its whole buffer at once: few
/// steps, few bytes moved).
const RING_GROWTH: u64 = 4;

/// Most bytes of spare rings the process keeps for reuse (memory outside every session's
/// [`memory_bound`](super::SessionConfig::memory_bound): kept small for a daemon on a router).
pub(crate) const POOL_MAX_BYTES: usize = 16 << 20;
/// Most spare rings the process keeps.
const POOL_MAX_RINGS: usize = 16;

/// Spare ring buffers (see the module docs), each with the time it was given back. One pool for
/// every thread, so that [`release_spare_rings`] can empty it from any thread once the flows
/// that might reuse its rings are gone; it is taken once per ring allocated or given up, never
/// per packet.
static SPARE_RINGS: Mutex<Vec<(Vec<u8>, Instant)>> = Mutex::new(Vec::new());

fn spare_rings() -> std::sync::MutexGuard<'static, Vec<(Vec<u8>, Instant)>> {
    SPARE_RINGS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A buffer of `size` bytes, or a spare one of at least `need` and at most `size` bytes (the
/// largest such); its contents are unspecified.
fn take_ring(need: usize, size: usize) -> Vec<u8> {
    let spare = {
        let mut pool = spare_rings();
        pool.iter()
            .enumerate()
            .filter(|(_, (b, _))| (need..=size).contains(&b.len()))
            .max_by_key(|(_, (b, _))| b.len())
            .map(|(i, _)| i)
            .map(|best| pool.swap_remove(best).0)
    };
    spare.unwrap_or_else(|| vec![0u8; size])
}

/// Hands a buffer to the pool; the smallest spares go when it is over its bounds.
fn give_back_ring(buf: Vec<u8>) {
    if buf.len() < MIN_RING as usize {
        return;
    }
    let now = Instant::now();
    let mut pool = spare_rings();
    if pool.capacity() == 0 {
        pool.reserve_exact(POOL_MAX_RINGS + 1);
    }
    pool.push((buf, now));
    let mut total: usize = pool.iter().map(|(b, _)| b.len()).sum();
    while pool.len() > POOL_MAX_RINGS || total > POOL_MAX_BYTES {
        let Some(smallest) = pool
            .iter()
            .enumerate()
            .min_by_key(|(_, (b, _))| b.len())
            .map(|(i, _)| i)
        else {
            break;
        };
        total -= pool.swap_remove(smallest).0.len();
    }
}

/// Frees the spare rings given back at least `max_age` ago (none is reused after a pause that
/// long: the daemons call this from their heap trim, so that an idle daemon does not keep up
/// to [`POOL_MAX_BYTES`]); returns the bytes freed.
pub fn release_spare_rings(max_age: Duration) -> usize {
    let now = Instant::now();
    let mut freed = 0;
    spare_rings().retain(|(b, given)| {
        let keep = now.saturating_duration_since(*given) < max_age;
        if !keep {
            freed += b.len();
        }
        keep
    });
    freed
}

/// A byte ring indexed by stream offset (the byte at offset `o` lives at `o % len`), holding
/// one window of the stream: `[lo, lo + len)` for the caller's lowest live offset `lo`.
#[derive(Debug, Default)]
struct Ring {
    buf: Vec<u8>,
}

impl Ring {
    /// Makes room for the offsets `[lo, end)` while keeping the bytes at `[lo, live_end)`
    /// (both spans at most `limit`): reallocates to the next power of two at least
    /// [`RING_GROWTH`] times the current size, at most `limit`, and moves the live bytes to
    /// their new places.
    fn reserve(&mut self, lo: u64, live_end: u64, end: u64, limit: u64) {
        let old = self.buf.len() as u64;
        let need = end.max(live_end) - lo;
        if need <= old {
            return;
        }
        let size = need
            .max(old.saturating_mul(RING_GROWTH))
            .max(MIN_RING)
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX)
            .min(limit.max(need));
        self.move_to(lo, live_end, need, size);
    }

    /// Gives the ring back for one of `size` bytes (a power of two at least [`MIN_RING`]) when it
    /// is at least twice that, keeping the bytes at `[lo, live_end)` (at most `size` of them):
    /// a flow that needed a large ring once does not hold it for ever.
    fn shrink_to(&mut self, lo: u64, live_end: u64, size: u64) {
        let size = size
            .max(MIN_RING)
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX);
        if (self.buf.len() as u64) >= size.saturating_mul(2) && live_end - lo <= size {
            self.move_to(lo, live_end, live_end - lo, size);
        }
    }

    /// Moves the bytes at `[lo, live_end)` into a ring of `size` bytes (a spare one of at least
    /// `need` bytes may be taken instead), and gives the old one to the pool.
    fn move_to(&mut self, lo: u64, live_end: u64, need: u64, size: u64) {
        let old = self.buf.len() as u64;
        let mut moved = take_ring(need as usize, size as usize);
        let mut o = lo;
        while old > 0 && o < live_end {
            let start = (o % old) as usize;
            let take = ((live_end - o) as usize).min(self.buf.len() - start);
            ring_copy_in(&mut moved, o, &self.buf[start..start + take]);
            o += take as u64;
        }
        give_back_ring(std::mem::replace(&mut self.buf, moved));
    }

    fn copy_in(&mut self, offset: u64, data: &[u8]) {
        ring_copy_in(&mut self.buf, offset, data);
    }

    fn copy_out(&self, offset: u64, out: &mut [u8]) {
        let (first, second) = self.parts(offset, out.len());
        out[..first.len()].copy_from_slice(first);
        out[first.len()..].copy_from_slice(second);
    }

    /// The `n` bytes from stream offset `offset` on, as the (at most two) contiguous parts of
    /// the ring they occupy, in order; the second is empty unless they wrap around.
    fn parts(&self, offset: u64, n: usize) -> (&[u8], &[u8]) {
        let cap = self.buf.len();
        let start = (offset % cap as u64) as usize;
        let first = n.min(cap - start);
        (&self.buf[start..start + first], &self.buf[..n - first])
    }

    fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    fn release(&mut self) {
        give_back_ring(std::mem::take(&mut self.buf));
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        self.release();
    }
}

fn ring_copy_in(ring: &mut [u8], offset: u64, data: &[u8]) {
    let cap = ring.len();
    let start = (offset % cap as u64) as usize;
    let first = data.len().min(cap - start);
    ring[start..start + first].copy_from_slice(&data[..first]);
    ring[..data.len() - first].copy_from_slice(&data[first..]);
}

/// A chunk of a stream chosen for transmission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub offset: u64,
    pub len: u32,
    pub fin: bool,
    pub retransmit: bool,
}

/// The sending half of a stream flow.
#[derive(Debug)]
pub(crate) struct SendStream {
    ring: Ring,
    /// Bytes the application may always have buffered.
    capacity: u64,
    /// Most bytes it may have buffered while the peer's credit is larger ([`Self::growing_to`]).
    capacity_max: u64,
    /// Every byte below is acknowledged and freed.
    acked_below: u64,
    /// Next byte the application writes.
    write_offset: u64,
    /// Every byte below was sent at least once.
    sent_below: u64,
    acked: RangeSet,
    lost: RangeSet,
    /// The application called finish.
    finished: bool,
    fin_acked: bool,
    /// The FIN went out at least once.
    sent_fin: bool,
    /// The FIN must be sent again (its packet was lost).
    fin_lost: bool,
    /// The peer's MAX_FLOW_DATA.
    pub max_data: u64,
    /// The flow was reset by us: nothing more is sent.
    pub reset: bool,
}

impl SendStream {
    pub fn new(capacity: u64, peer_window: u64) -> Self {
        SendStream {
            ring: Ring::default(),
            capacity: capacity.max(1),
            capacity_max: capacity.max(1),
            acked_below: 0,
            write_offset: 0,
            sent_below: 0,
            acked: RangeSet::with_capacity(RANGE_CAPACITY),
            lost: RangeSet::with_capacity(RANGE_CAPACITY),
            finished: false,
            fin_acked: false,
            sent_fin: false,
            fin_lost: false,
            max_data: peer_window,
            reset: false,
        }
    }

    /// Lets the buffer grow past its capacity, up to `capacity_max` bytes, as far as the peer's
    /// credit reaches beyond the bytes acknowledged: a peer whose receive window grew (see
    /// [`RecvStream::growing_to`]) takes that much in flight, and a buffer smaller than its
    /// window would hold the flow below it. A peer that reads slowly grants little credit, so
    /// the buffer stays at its capacity.
    pub fn growing_to(mut self, capacity_max: u64) -> Self {
        self.capacity_max = capacity_max.max(self.capacity);
        self
    }

    /// Bytes the application may have buffered now: the capacity, or the peer's credit beyond
    /// the bytes acknowledged where that is larger, at most `capacity_max` and at most the
    /// bytes the peer has acknowledged so far. The last bound is for a hostile peer: granting
    /// credit costs it nothing, so without it a peer that never acknowledges could make every
    /// flow buffer its largest; this way a flow's buffer grows only as fast as the peer takes
    /// its bytes (a window grown to 16 MiB has carried some 14 MiB by then).
    fn limit(&self) -> u64 {
        (self.max_data.saturating_sub(self.acked_below))
            .min(self.acked_below)
            .clamp(self.capacity, self.capacity_max)
    }

    /// Bytes the application may still write.
    pub fn writable(&self) -> u64 {
        if self.finished || self.reset {
            return 0;
        }
        self.limit()
            .saturating_sub(self.write_offset - self.acked_below)
    }

    /// Buffers as much of `data` as fits; returns how much.
    pub fn write(&mut self, data: &[u8]) -> usize {
        let n = (self.writable().min(data.len() as u64)) as usize;
        if n == 0 {
            return 0;
        }
        let end = self.write_offset + n as u64;
        self.ring
            .reserve(self.acked_below, self.write_offset, end, self.capacity_max);
        self.ring.copy_in(self.write_offset, &data[..n]);
        self.write_offset += n as u64;
        n
    }

    pub fn finish(&mut self) {
        self.finished = true;
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Bytes written and not yet sent once.
    pub fn unsent(&self) -> u64 {
        self.write_offset - self.sent_below
    }

    /// Bytes held (written, not yet acknowledged).
    pub fn buffered(&self) -> u64 {
        self.write_offset - self.acked_below
    }

    /// Highest offset sent: what the flow has consumed of the session-wide credit.
    pub fn sent_below(&self) -> u64 {
        self.sent_below
    }

    pub fn allocated(&self) -> u64 {
        (self.ring.capacity() + self.acked.capacity_bytes() + self.lost.capacity_bytes()) as u64
    }

    /// True when retransmissions are waiting.
    pub fn has_lost(&self) -> bool {
        !self.reset && (!self.lost.is_empty() || self.fin_lost)
    }

    /// True when new bytes (or a first FIN) could go out, ignoring credit.
    pub fn has_new(&self) -> bool {
        !self.reset && (self.unsent() > 0 || (self.finished && !self.sent_fin))
    }

    /// The next chunk of at most `max_len` bytes: retransmissions first, then new bytes within
    /// `credit` (the smaller of flow and session credit). Returns `None` when nothing can go.
    pub fn peek(&self, max_len: u32, session_credit: u64) -> Option<Chunk> {
        if self.reset {
            return None;
        }
        if let Some(r) = self.lost.first() {
            let len = (r.end - r.start).min(u64::from(max_len)) as u32;
            let end = r.start + u64::from(len);
            return Some(Chunk {
                offset: r.start,
                len,
                fin: self.finished && end == self.write_offset && !self.fin_acked,
                retransmit: true,
            });
        }
        if self.fin_lost {
            return Some(Chunk {
                offset: self.write_offset,
                len: 0,
                fin: true,
                retransmit: true,
            });
        }
        let credit = self
            .max_data
            .saturating_sub(self.sent_below)
            .min(session_credit);
        let len = self.unsent().min(credit).min(u64::from(max_len)) as u32;
        let end = self.sent_below + u64::from(len);
        let fin = self.finished && end == self.write_offset && !self.sent_fin;
        if len == 0 && !fin {
            return None;
        }
        Some(Chunk {
            offset: self.sent_below,
            len,
            fin,
            retransmit: false,
        })
    }

    /// Marks `chunk` (as returned by `peek`) as sent.
    pub fn on_sent(&mut self, chunk: Chunk) {
        let range = chunk.offset..chunk.offset + u64::from(chunk.len);
        if chunk.retransmit {
            self.lost.remove(range);
            if chunk.fin {
                self.fin_lost = false;
            }
        } else {
            self.sent_below = range.end;
        }
        if chunk.fin {
            self.sent_fin = true;
        }
    }

    /// Copies the bytes of `chunk` into `out` (`out.len() == chunk.len`).
    pub fn read_chunk(&self, offset: u64, out: &mut [u8]) {
        if !out.is_empty() {
            self.ring.copy_out(offset, out);
        }
    }

    /// The peer acknowledged `range` (and the FIN when `fin`). Returns lost bytes that no
    /// longer need resending.
    pub fn on_acked(&mut self, range: Range<u64>, fin: bool) -> u64 {
        let was_lost = self.lost.overlap(range.clone());
        self.lost.remove(range.clone());
        if range.start < range.end && range.end > self.acked_below {
            self.acked
                .insert(range.start.max(self.acked_below)..range.end);
            if let Some(first) = self.acked.first()
                && first.start <= self.acked_below
            {
                self.acked_below = first.end;
                self.acked.remove_below(self.acked_below);
            }
        }
        if fin {
            self.fin_acked = true;
            self.fin_lost = false;
        }
        if self.capacity_max > self.capacity && !self.finished {
            // The peer's credit fell back (its window shrank, or its reader paused): so may
            // the ring (not once the flow is finished: it goes at the end anyway).
            self.ring
                .shrink_to(self.acked_below, self.write_offset, self.limit());
        }
        was_lost
    }

    /// The packet carrying `range` was lost; returns bytes newly queued for retransmission.
    pub fn on_lost(&mut self, range: Range<u64>, fin: bool) -> u64 {
        if self.reset {
            return 0;
        }
        if fin && !self.fin_acked && range.start == range.end {
            self.fin_lost = true;
        }
        let start = range.start.max(self.acked_below);
        if start >= range.end {
            return 0;
        }
        let mut added = self.lost.insert(start..range.end);
        for a in self.acked.iter() {
            if a.start >= range.end {
                break;
            }
            if a.end > start {
                let overlap = a.start.max(start)..a.end.min(range.end);
                added -= self.lost.overlap(overlap.clone()).min(added);
                self.lost.remove(overlap);
            }
        }
        if fin && !self.fin_acked && self.lost.max_end() != Some(self.write_offset) {
            self.fin_lost = true;
        }
        added
    }

    /// True while the byte at `offset` is still buffered (not yet acknowledged and freed).
    pub fn still_held(&self, offset: u64) -> bool {
        !self.reset && offset >= self.acked_below
    }

    /// True when some byte of `range` was acknowledged (or the flow was reset).
    pub fn any_acked(&self, range: Range<u64>) -> bool {
        self.reset || range.start < self.acked_below || self.acked.overlap(range) > 0
    }

    /// Every byte and the FIN were acknowledged.
    pub fn is_done(&self) -> bool {
        self.reset || (self.finished && self.fin_acked && self.acked_below == self.write_offset)
    }

    /// Stops sending; returns the final size.
    pub fn reset(&mut self) -> u64 {
        self.reset = true;
        self.lost.clear();
        self.sent_below
    }
}

/// What one received STREAM frame changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Received {
    /// Bytes never seen before.
    pub new_bytes: u64,
    /// Bytes that had arrived already.
    pub duplicate_bytes: u64,
    /// How far the highest received offset grew (session flow-control accounting).
    pub highest_growth: u64,
    /// The frame started beyond the contiguous data (arrived out of order).
    pub out_of_order: bool,
}

/// A receive-side violation; the caller turns it into a `SessionError` naming the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecvViolation {
    FlowControl { offset: u64, limit: u64 },
    FinalSize { offset: u64, final_size: u64 },
}

/// The receiving half of a stream flow.
#[derive(Debug)]
pub(crate) struct RecvStream {
    ring: Ring,
    /// The flow-control window now: the most bytes received beyond the read offset.
    window: u64,
    /// The first window, the least it shrinks back to.
    window_min: u64,
    /// The most the window grows to ([`Self::growing_to`]).
    window_max: u64,
    /// Where and when the window's last growth check began: the read offset and the time.
    epoch: Option<(u64, Timestamp)>,
    /// The most bytes that waited readable (in order, unread) when bytes arrived since the
    /// epoch began: a window grows only while the application kept up.
    epoch_backlog: u64,
    read_offset: u64,
    /// Ranges received at or above `read_offset`.
    received: RangeSet,
    highest: u64,
    final_size: Option<u64>,
    /// The limit we advertised (MAX_FLOW_DATA).
    pub max_data: u64,
    /// The peer reset the flow with this code.
    pub reset: Option<u64>,
    /// We gave the flow up: bytes are counted, not stored.
    discarding: bool,
}

impl RecvStream {
    pub fn new(window: u64) -> Self {
        RecvStream {
            ring: Ring::default(),
            window: window.max(1),
            window_min: window.max(1),
            window_max: window.max(1),
            epoch: None,
            epoch_backlog: 0,
            read_offset: 0,
            received: RangeSet::with_capacity(RANGE_CAPACITY),
            highest: 0,
            final_size: None,
            max_data: window,
            reset: None,
            discarding: false,
        }
    }

    /// Lets the window grow from its first size up to `window_max` bytes: it doubles whenever
    /// the application read a whole window in less than [`WINDOW_GROWTH_RTTS`] round trips
    /// without letting half a window wait unread, and halves, not below the first, when it read
    /// less than a window in [`WINDOW_SHRINK_RTTS`] (checked at [`Self::window_update`]).
    pub fn growing_to(mut self, window_max: u64) -> Self {
        self.window_max = window_max.max(self.window);
        self
    }

    /// The flow-control window now.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Stores a STREAM frame's bytes.
    pub fn on_data(
        &mut self,
        offset: u64,
        data: &[u8],
        fin: bool,
    ) -> Result<Received, RecvViolation> {
        let end = offset + data.len() as u64;
        if end > self.max_data {
            return Err(RecvViolation::FlowControl {
                offset: end,
                limit: self.max_data,
            });
        }
        if let Some(final_size) = self.final_size
            && (end > final_size || (fin && end != final_size))
        {
            return Err(RecvViolation::FinalSize {
                offset: end,
                final_size,
            });
        }
        if fin {
            if end < self.highest {
                return Err(RecvViolation::FinalSize {
                    offset: end,
                    final_size: self.highest,
                });
            }
            self.final_size = Some(end);
        }
        let mut out = Received {
            highest_growth: end.saturating_sub(self.highest),
            ..Received::default()
        };
        let live_end = self.highest;
        self.highest = self.highest.max(end);
        if self.reset.is_some() || self.discarding {
            self.read_offset = self.highest;
            return Ok(out);
        }
        let contiguous_end = self
            .received
            .first()
            .filter(|r| r.start <= self.read_offset)
            .map_or(self.read_offset, |r| r.end);
        out.out_of_order = offset > contiguous_end;
        let start = offset.max(self.read_offset);
        out.duplicate_bytes = data.len() as u64 - end.saturating_sub(start);
        if start < end {
            let new = self.received.insert(start..end);
            out.new_bytes = new;
            out.duplicate_bytes += (end - start) - new;
            if new > 0 {
                // `end <= max_data`: the ring never outgrows the credit given (the window, or
                // a larger one before it shrank).
                self.ring.reserve(
                    self.read_offset,
                    live_end.max(self.read_offset),
                    end,
                    self.window,
                );
                let skip = (start - offset) as usize;
                self.ring.copy_in(start, &data[skip..]);
                if self.window_max > self.window_min {
                    self.epoch_backlog = self.epoch_backlog.max(self.readable());
                }
            }
        }
        Ok(out)
    }

    /// True when storing `len` bytes at `offset` would add a range to the bytes held that
    /// counts against [`RecvStream::max_ranges`]: they neither overlap nor adjoin bytes held,
    /// and start beyond the read offset. (Bytes at the read offset are readable at once and
    /// always taken, so that the flow moves on whatever the set holds; bytes already read,
    /// and a reset or abandoned side, store nothing.)
    pub fn adds_range(&self, offset: u64, len: usize) -> bool {
        let end = offset.saturating_add(len as u64);
        offset > self.read_offset
            && self.reset.is_none()
            && !self.discarding
            && !self.received.touches(offset..end)
    }

    /// Ranges of bytes held now.
    pub fn range_count(&self) -> usize {
        self.received.range_count()
    }

    /// The most ranges of bytes this side holds: a packet whose frames could leave it with more
    /// is refused whole ([`Session::handle_datagram`](super::Session::handle_datagram)), so
    /// that a peer cannot make each STREAM frame cost a move of the whole set (nor the set
    /// outgrow the window many times over) by sending bytes with gaps between them. The
    /// honest peer's holes come from lost and reordered packets: at most one per packet in
    /// flight, a packet carrying about 1 KiB or more of a busy flow. The set may hold one
    /// range more, begun at the read offset.
    pub fn max_ranges(&self) -> usize {
        max_recv_ranges(self.window)
    }

    /// Bytes readable in order now.
    pub fn readable(&self) -> u64 {
        self.received
            .first()
            .filter(|r| r.start <= self.read_offset)
            .map_or(0, |r| r.end - self.read_offset)
    }

    /// Copies readable bytes into `out`; returns how many.
    #[cfg(test)]
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        self.read_with(out.len(), fill(out))
    }

    /// Hands at most `max` readable bytes to `sink`, in order, as the (at most two) contiguous
    /// parts of the ring they occupy; returns how many. The caller copies them once, wherever
    /// it wants them (the daemon: straight into the buffer it hands to the socket writer).
    pub fn read_with(&mut self, max: usize, mut sink: impl FnMut(&[u8])) -> usize {
        let n = self.readable().min(max as u64) as usize;
        if n > 0 {
            let (first, second) = self.ring.parts(self.read_offset, n);
            sink(first);
            if !second.is_empty() {
                sink(second);
            }
            self.read_offset += n as u64;
            self.received.remove_below(self.read_offset);
        }
        n
    }

    /// Every byte up to the FIN was read.
    pub fn is_finished(&self) -> bool {
        self.final_size == Some(self.read_offset)
    }

    /// The FIN arrived (bytes may still be missing or unread).
    pub fn fin_received(&self) -> bool {
        self.final_size.is_some()
    }

    /// Bytes held: received and not yet read (in order or not).
    pub fn buffered(&self) -> u64 {
        self.received.iter().map(|r| r.end - r.start).sum()
    }

    pub fn allocated(&self) -> u64 {
        (self.ring.capacity() + self.received.capacity_bytes()) as u64
    }

    /// A new MAX_FLOW_DATA to advertise once `window / CREDIT_UPDATE_FRACTION` was read, else
    /// `None`. `now` and the round trip `rtt` decide whether the window grows first (see
    /// [`Self::growing_to`]); a window that grew is advertised at once.
    pub fn window_update(&mut self, now: Timestamp, rtt: Duration) -> Option<u64> {
        if self.final_size.is_some() || self.reset.is_some() {
            return None;
        }
        if self.window_max > self.window_min {
            match self.epoch {
                None => self.restart_epoch(now),
                Some((from, since)) => {
                    let took = now - since;
                    let whole = self.read_offset - from >= self.window;
                    let slow = took > rtt.saturating_mul(WINDOW_SHRINK_RTTS);
                    // Half a window or more waiting unread: the application, not the window,
                    // held the flow back (a burst read from a backlog is not a fast flow).
                    let kept_up = self.epoch_backlog <= self.window / 2;
                    if whole && kept_up && took < rtt.saturating_mul(WINDOW_GROWTH_RTTS) {
                        self.window = self.window.saturating_mul(2).min(self.window_max);
                    } else if slow {
                        self.window = (self.window / 2).max(self.window_min);
                    }
                    if whole || slow {
                        self.restart_epoch(now);
                    }
                }
            }
            // Once the credit given fits the window again, a ring grown for a larger one goes.
            if self.max_data - self.read_offset <= self.window {
                self.ring
                    .shrink_to(self.read_offset, self.highest, self.window);
            }
        }
        let target = self.read_offset + self.window;
        if target.saturating_sub(self.max_data) >= (self.window / CREDIT_UPDATE_FRACTION).max(1) {
            self.max_data = target;
            return Some(target);
        }
        None
    }

    /// Begins the window's next growth check at the read offset, at `now`.
    fn restart_epoch(&mut self, now: Timestamp) {
        self.epoch = Some((self.read_offset, now));
        self.epoch_backlog = self.readable();
    }

    /// The peer reset the flow; drops what was buffered. Returns bytes of session credit the
    /// reset settles (final size beyond the highest offset seen).
    pub fn on_reset(&mut self, code: u64, final_size: u64) -> Result<u64, RecvViolation> {
        if final_size < self.highest || self.final_size.is_some_and(|f| f != final_size) {
            return Err(RecvViolation::FinalSize {
                offset: final_size,
                final_size: self.final_size.unwrap_or(self.highest),
            });
        }
        if final_size > self.max_data {
            return Err(RecvViolation::FlowControl {
                offset: final_size,
                limit: self.max_data,
            });
        }
        let growth = final_size - self.highest;
        self.highest = final_size;
        self.final_size = Some(final_size);
        self.reset = Some(code);
        self.received.clear();
        self.ring.release();
        Ok(growth)
    }

    /// Unread bytes given up (flow reset or dropped): returned as session credit.
    pub fn abandon(&mut self) -> u64 {
        let released = self.highest - self.read_offset;
        self.read_offset = self.highest;
        self.received.clear();
        self.discarding = true;
        released
    }
}

/// A `read_with` sink that copies the parts one after the other into `out` (at most
/// `out.len()` bytes are handed to it).
pub(crate) fn fill(out: &mut [u8]) -> impl FnMut(&[u8]) + '_ {
    let mut at = 0;
    move |part| {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
