//! The path model: one direction of one simulated link, deterministic and IO-free.
//!
//! The simulator (and the real-time emulator) hands every packet to [`Link::enqueue`] with the
//! current time and gets a [`Verdict`]: dropped (and why), or delivered at a given time. The
//! model, in the order a packet meets it (the order of Linux netem, which the OLMS, DaMPS and
//! FALCON testbeds used; EdAR used NS-3 point-to-point links, which this also approximates):
//!
//! 1. **Outage**: while the link is down (an outage window), every arriving packet is lost.
//!    Outages *drain* the link: a queued packet that cannot finish serialisation before the
//!    outage starts is lost too. Packets already serialised keep propagating and arrive.
//! 2. **Random loss** with the probability in force, drawn from the link's seeded RNG. As in
//!    netem, a lost packet is dropped on arrival and uses no capacity.
//! 3. **Droptail queue** of `queue_packets`, counting every accepted packet whose
//!    serialisation has not finished (the one on the wire included); a packet arriving to a
//!    full queue is dropped.
//! 4. **Serialisation**: at the rate in force (integrated across step changes, so a rate change
//!    during a packet takes effect mid-packet), or on a trace's delivery opportunities, each
//!    carrying 1500 bytes; as in mahimahi, a packet may use the remainder of an opportunity and
//!    the following ones, and opportunities nobody waits for are lost.
//! 5. **Propagation**: the one-way delay in force when the packet leaves the queue, plus a
//!    per-packet jitter draw (normal with standard deviation `jitter`, or uniform in
//!    `±jitter`); the total never goes below zero. By default jitter does not reorder: a
//!    packet never arrives before the one sent ahead of it on the same link (a FIFO link
//!    whose delay varies, which is what a physical link does), so jitter delays packets
//!    behind a slow one instead of overtaking it. `jitter_reorders` lets draws overtake
//!    (netem's behaviour).
//!
//! Step changes to rate, delay, jitter and loss take effect at their time (optionally
//! repeating with a period); so do outage windows. Internally time is kept in nanoseconds so
//! fast links (FALCON's 1.1 Gbit/s 5G) serialise without rounding error; verdicts are
//! [`Timestamp`]s (µs, rounded up). `enqueue` never allocates.

mod schedule;

use std::collections::VecDeque;
use std::sync::Arc;

use braid_sched_core::Timestamp;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;

use crate::trace::{OPPORTUNITY_BYTES, Trace};
use schedule::{Outages, Params, Timeline};

/// The largest droptail queue a link accepts (its slots are reserved up front).
pub const MAX_QUEUE_PACKETS: u32 = 1_000_000;

/// How a link's capacity is given.
#[derive(Clone, Debug)]
pub enum Capacity {
    /// A constant serialisation rate in Mbit/s (step changes may alter it).
    Rate {
        /// Mbit/s, finite and above zero.
        mbps: f64,
    },
    /// Delivery opportunities from a trace.
    Trace(Arc<Trace>),
}

/// The distribution of the per-packet jitter draw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JitterDistribution {
    /// Normal with mean 0 and standard deviation `jitter`.
    #[default]
    Normal,
    /// Uniform in `[-jitter, +jitter]` (netem's default when no distribution is named).
    Uniform,
}

/// A step change at a point in time; `None` fields keep their value.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkChange {
    /// Seconds from the origin (or from the start of each period).
    pub at_s: f64,
    /// New rate, Mbit/s (rate links only).
    pub rate_mbps: Option<f64>,
    /// New one-way delay, ms.
    pub delay_ms: Option<f64>,
    /// New jitter, ms.
    pub jitter_ms: Option<f64>,
    /// New loss probability.
    pub loss: Option<f64>,
}

/// Everything that defines one direction of a link.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// Rate or trace.
    pub capacity: Capacity,
    /// One-way propagation delay, ms.
    pub delay_ms: f64,
    /// Jitter scale, ms (see [`JitterDistribution`]).
    pub jitter_ms: f64,
    /// Jitter as a fraction of the delay in force (DaMPS's "RTT variation rate"); added to
    /// `jitter_ms` (the scenario schema allows only one of the two).
    pub delay_variation: f64,
    /// Distribution of the jitter draw.
    pub jitter_distribution: JitterDistribution,
    /// Whether a jitter draw may make a packet overtake an earlier one.
    pub jitter_reorders: bool,
    /// Random loss probability in `[0, 1]`.
    pub loss: f64,
    /// Droptail queue size in packets, 1 to [`MAX_QUEUE_PACKETS`].
    pub queue_packets: u32,
    /// Windows `[start_s, end_s)` during which the link is down; sorted, not overlapping.
    pub outages: Vec<(f64, f64)>,
    /// When set, the outage windows repeat with this period (s); they must end within it.
    pub outages_period_s: Option<f64>,
    /// Step changes, sorted by `at_s`.
    pub changes: Vec<LinkChange>,
    /// When set, the changes repeat with this period (s); they must lie within it.
    pub changes_period_s: Option<f64>,
}

impl LinkConfig {
    /// A constant-rate link with no delay, jitter, loss, outage or change and a queue of
    /// 1000 packets (netem's default limit).
    pub fn with_rate(mbps: f64) -> Self {
        LinkConfig {
            capacity: Capacity::Rate { mbps },
            delay_ms: 0.0,
            jitter_ms: 0.0,
            delay_variation: 0.0,
            jitter_distribution: JitterDistribution::Normal,
            jitter_reorders: false,
            loss: 0.0,
            queue_packets: 1000,
            outages: Vec::new(),
            outages_period_s: None,
            changes: Vec::new(),
            changes_period_s: None,
        }
    }

    /// A trace-driven link, otherwise as [`LinkConfig::with_rate`].
    pub fn with_trace(trace: Arc<Trace>) -> Self {
        LinkConfig {
            capacity: Capacity::Trace(trace),
            ..LinkConfig::with_rate(1.0)
        }
    }

    /// Checks the invariants [`Link::new`] relies on, naming the first field that breaks one.
    pub fn validate(&self) -> Result<(), LinkConfigError> {
        let bad = |field: &'static str, expected: &'static str, found: f64| {
            Err(LinkConfigError {
                field,
                expected,
                found: found.to_string(),
            })
        };
        if let Capacity::Rate { mbps } = self.capacity {
            check_rate(mbps, "rate_mbps")?;
        }
        check_non_negative(self.delay_ms, "delay_ms")?;
        check_non_negative(self.jitter_ms, "jitter_ms")?;
        check_fraction(self.delay_variation, "delay_variation")?;
        check_fraction(self.loss, "loss")?;
        if !(1..=MAX_QUEUE_PACKETS).contains(&self.queue_packets) {
            let found = f64::from(self.queue_packets);
            return bad("queue_packets", "1 to 1000000 packets", found);
        }
        let outage_period = check_period(self.outages_period_s, "outages_period_s")?;
        let mut previous_end = 0.0;
        for &(start, end) in &self.outages {
            check_non_negative(start, "outages")?;
            if end.partial_cmp(&start) != Some(std::cmp::Ordering::Greater)
                || end.is_infinite()
                || start < previous_end
            {
                return bad(
                    "outages",
                    "sorted, non-overlapping [start, end] with end > start",
                    start,
                );
            }
            if end > outage_period {
                return bad("outages", "windows that end within outages_period_s", end);
            }
            previous_end = end;
        }
        self.validate_changes()
    }

    fn validate_changes(&self) -> Result<(), LinkConfigError> {
        let bad = |field: &'static str, expected: &'static str, found: f64| {
            Err(LinkConfigError {
                field,
                expected,
                found: found.to_string(),
            })
        };
        let change_period = check_period(self.changes_period_s, "changes_period_s")?;
        let mut previous_at = 0.0;
        for change in &self.changes {
            check_non_negative(change.at_s, "changes.at_s")?;
            if change.at_s < previous_at {
                return bad("changes.at_s", "changes sorted by time", change.at_s);
            }
            if change.at_s >= change_period {
                return bad("changes.at_s", "a time below changes_period_s", change.at_s);
            }
            previous_at = change.at_s;
            if let Some(mbps) = change.rate_mbps {
                if matches!(self.capacity, Capacity::Trace(_)) {
                    return bad("changes.rate_mbps", "no rate change on a trace link", mbps);
                }
                check_rate(mbps, "changes.rate_mbps")?;
            }
            change
                .delay_ms
                .map_or(Ok(()), |v| check_non_negative(v, "changes.delay_ms"))?;
            change
                .jitter_ms
                .map_or(Ok(()), |v| check_non_negative(v, "changes.jitter_ms"))?;
            change
                .loss
                .map_or(Ok(()), |v| check_fraction(v, "changes.loss"))?;
        }
        Ok(())
    }
}

/// A [`LinkConfig`] field outside its domain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("link {field}: expected {expected}, found {found}")]
pub struct LinkConfigError {
    /// The field.
    pub field: &'static str,
    /// What it must be.
    pub expected: &'static str,
    /// What it was.
    pub found: String,
}

fn check_rate(v: f64, field: &'static str) -> Result<(), LinkConfigError> {
    if v.is_finite() && v > 0.0 && v <= 1e6 {
        return Ok(());
    }
    Err(LinkConfigError {
        field,
        expected: "a rate in (0, 1e6] Mbit/s",
        found: v.to_string(),
    })
}

fn check_non_negative(v: f64, field: &'static str) -> Result<(), LinkConfigError> {
    if (0.0..=1e9).contains(&v) {
        return Ok(());
    }
    Err(LinkConfigError {
        field,
        expected: "a finite value >= 0",
        found: v.to_string(),
    })
}

fn check_fraction(v: f64, field: &'static str) -> Result<(), LinkConfigError> {
    if (0.0..=1.0).contains(&v) {
        return Ok(());
    }
    Err(LinkConfigError {
        field,
        expected: "a fraction in [0, 1]",
        found: v.to_string(),
    })
}

fn check_period(period: Option<f64>, field: &'static str) -> Result<f64, LinkConfigError> {
    match period {
        None => Ok(f64::INFINITY),
        Some(p) if p.is_finite() && p > 0.0 && p <= 1e9 => Ok(p),
        Some(p) => Err(LinkConfigError {
            field,
            expected: "a period > 0 s",
            found: p.to_string(),
        }),
    }
}

/// Why a link dropped a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The random loss draw.
    Loss,
    /// The droptail queue was full.
    QueueFull,
    /// The link was down (or went down before the packet could be serialised).
    Outage,
}

/// What happens to a packet handed to a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The packet is lost.
    Dropped(DropReason),
    /// The packet arrives at the far end at `at`.
    Deliver {
        /// Arrival time.
        at: Timestamp,
    },
}

/// Counters of what a link did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets delivered (or to be delivered).
    pub delivered: u64,
    /// Bytes delivered (or to be delivered).
    pub delivered_bytes: u64,
    /// Packets lost to the random loss draw.
    pub lost: u64,
    /// Packets dropped by the full queue.
    pub queue_full: u64,
    /// Packets lost to an outage.
    pub outage: u64,
}

/// Where the next trace packet will take bytes from.
#[derive(Clone, Copy, Debug)]
struct TraceCursor {
    /// Absolute index (through the loops) of the current opportunity.
    index: u64,
    /// Bytes still free in it.
    bytes_left: u32,
}

/// One direction of one simulated link. See the module docs for the model.
#[derive(Debug)]
pub struct Link {
    capacity: Capacity,
    timeline: Timeline,
    outages: Outages,
    delay_variation: f64,
    jitter_distribution: JitterDistribution,
    jitter_reorders: bool,
    queue_limit: usize,
    /// Serialisation end times (ns) of accepted packets still in the queue, oldest first.
    queue: VecDeque<u64>,
    /// When the transmitter finishes the last accepted packet (ns).
    busy_until: u64,
    cursor: TraceCursor,
    last_arrival: u64,
    last_now: u64,
    rng: Xoshiro256PlusPlus,
    stats: LinkStats,
}

const NS_PER_S: f64 = 1e9;

/// Change points one packet's serialisation is integrated across at most.
const MAX_SEGMENTS: u32 = 10_000;

fn secs_to_ns(s: f64) -> u64 {
    (s * NS_PER_S).round() as u64
}

impl Link {
    /// Builds a link from a validated configuration and a seed for its random draws.
    pub fn new(config: &LinkConfig, seed: u64) -> Result<Link, LinkConfigError> {
        config.validate()?;
        let base = Params {
            bits_per_ns: match config.capacity {
                Capacity::Rate { mbps } => mbps / 1e3,
                Capacity::Trace(_) => 0.0,
            },
            delay_ns: config.delay_ms * 1e6,
            jitter_ns: config.jitter_ms * 1e6,
            loss: config.loss,
        };
        let mut state = base;
        let mut points = Vec::with_capacity(config.changes.len());
        for change in &config.changes {
            if let Some(v) = change.rate_mbps {
                state.bits_per_ns = v / 1e3;
            }
            if let Some(v) = change.delay_ms {
                state.delay_ns = v * 1e6;
            }
            if let Some(v) = change.jitter_ms {
                state.jitter_ns = v * 1e6;
            }
            if let Some(v) = change.loss {
                state.loss = v;
            }
            points.push((secs_to_ns(change.at_s), state));
        }
        let windows = config
            .outages
            .iter()
            .map(|&(s, e)| (secs_to_ns(s), secs_to_ns(e)));
        let queue_limit = config.queue_packets as usize;
        Ok(Link {
            capacity: config.capacity.clone(),
            timeline: Timeline::new(base, points, config.changes_period_s.map(secs_to_ns)),
            outages: Outages::new(windows.collect(), config.outages_period_s.map(secs_to_ns)),
            delay_variation: config.delay_variation,
            jitter_distribution: config.jitter_distribution,
            jitter_reorders: config.jitter_reorders,
            queue_limit,
            queue: VecDeque::with_capacity(queue_limit),
            busy_until: 0,
            cursor: TraceCursor {
                index: 0,
                bytes_left: OPPORTUNITY_BYTES,
            },
            last_arrival: 0,
            last_now: 0,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            stats: LinkStats::default(),
        })
    }

    /// Hands a packet of `len` bytes to the link at `now` and says what becomes of it.
    ///
    /// Calls must come in non-decreasing `now`; an earlier `now` is taken as the latest seen.
    pub fn enqueue(&mut self, now: Timestamp, len: u32) -> Verdict {
        let now_ns = now.as_micros().saturating_mul(1_000).max(self.last_now);
        self.last_now = now_ns;
        if self.outages.down_until(now_ns).is_some() {
            return self.drop(DropReason::Outage);
        }
        let params = *self.timeline.at(now_ns);
        if params.loss > 0.0 && self.rng.random::<f64>() < params.loss {
            return self.drop(DropReason::Loss);
        }
        while self.queue.front().is_some_and(|&done| done <= now_ns) {
            self.queue.pop_front();
        }
        if self.queue.len() >= self.queue_limit {
            return self.drop(DropReason::QueueFull);
        }
        let start = now_ns.max(self.busy_until);
        let (first_used, departure, cursor) = match &self.capacity {
            Capacity::Rate { .. } => (start, self.serialised_at(start, len), self.cursor),
            Capacity::Trace(trace) => trace_departure(trace, self.cursor, start, len),
        };
        if self
            .outages
            .overlaps(first_used, departure.max(first_used.saturating_add(1)))
        {
            return self.drop(DropReason::Outage);
        }
        self.cursor = cursor;
        self.busy_until = departure;
        // The queue never holds more than `queue_limit` entries, its reserved capacity, so
        // this push does not allocate.
        self.queue.push_back(departure);
        let arrival = self.arrival(departure);
        self.stats.delivered += 1;
        self.stats.delivered_bytes += u64::from(len);
        Verdict::Deliver {
            at: Timestamp::from_micros(arrival.div_ceil(1_000)),
        }
    }

    /// Packets accepted and not yet serialised at `now` (the one on the wire included).
    pub fn queued_packets(&self, now: Timestamp) -> usize {
        let now_ns = now.as_micros().saturating_mul(1_000);
        self.queue.iter().filter(|&&done| done > now_ns).count()
    }

    /// When the transmitter will have finished every accepted packet.
    pub fn busy_until(&self) -> Timestamp {
        Timestamp::from_micros(self.busy_until.div_ceil(1_000))
    }

    /// Whether the link is down (inside an outage window) at `now`.
    pub fn is_down(&self, now: Timestamp) -> bool {
        self.outages
            .down_until(now.as_micros().saturating_mul(1_000))
            .is_some()
    }

    /// What the link has done so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    fn drop(&mut self, reason: DropReason) -> Verdict {
        match reason {
            DropReason::Loss => self.stats.lost += 1,
            DropReason::QueueFull => self.stats.queue_full += 1,
            DropReason::Outage => self.stats.outage += 1,
        }
        Verdict::Dropped(reason)
    }

    /// When a packet of `len` bytes starting serialisation at `start` has left, integrating the
    /// rate across step changes. A packet spanning more than [`MAX_SEGMENTS`] change points
    /// (only absurd configurations do) finishes at the rate of the last one.
    fn serialised_at(&self, start: u64, len: u32) -> u64 {
        let mut t = start;
        let mut bits = f64::from(len) * 8.0;
        for segment in 0.. {
            let rate = self.timeline.at(t).bits_per_ns;
            let boundary = self.timeline.next_change_after(t);
            let needed = bits / rate;
            if boundary == u64::MAX
                || segment >= MAX_SEGMENTS
                || t as f64 + needed <= boundary as f64
            {
                return t.saturating_add(needed.ceil() as u64);
            }
            bits -= (boundary - t) as f64 * rate;
            t = boundary;
        }
        t
    }

    /// Arrival time (ns) of a packet leaving the queue at `departure`.
    fn arrival(&mut self, departure: u64) -> u64 {
        let params = *self.timeline.at(departure);
        let scale = params.jitter_ns + self.delay_variation * params.delay_ns;
        let jitter = if scale > 0.0 {
            let draw: f64 = match self.jitter_distribution {
                JitterDistribution::Normal => self.rng.sample(StandardNormal),
                JitterDistribution::Uniform => self.rng.random::<f64>() * 2.0 - 1.0,
            };
            draw * scale
        } else {
            0.0
        };
        let delay = (params.delay_ns + jitter).max(0.0);
        let mut arrival = departure.saturating_add(delay.round() as u64);
        if !self.jitter_reorders {
            arrival = arrival.max(self.last_arrival);
        }
        self.last_arrival = self.last_arrival.max(arrival);
        arrival
    }
}

/// Takes `len` bytes from the trace's opportunities, starting at the first one at or after
/// `start`. Returns the time of the first opportunity used, the departure time (ns) and the
/// cursor after this packet.
fn trace_departure(
    trace: &Trace,
    mut cursor: TraceCursor,
    start: u64,
    len: u32,
) -> (u64, u64, TraceCursor) {
    let time_ns = |index: u64| trace.opportunity_time(index).saturating_mul(1_000);
    if time_ns(cursor.index) < start {
        cursor = TraceCursor {
            index: trace.first_opportunity_at_or_after(start.div_ceil(1_000)),
            bytes_left: OPPORTUNITY_BYTES,
        };
    }
    let first = time_ns(cursor.index);
    let mut need = len;
    loop {
        let take = need.min(cursor.bytes_left);
        need -= take;
        cursor.bytes_left -= take;
        if need == 0 {
            let departure = time_ns(cursor.index);
            if cursor.bytes_left == 0 {
                cursor = TraceCursor {
                    index: cursor.index.saturating_add(1),
                    bytes_left: OPPORTUNITY_BYTES,
                };
            }
            return (first, departure, cursor);
        }
        cursor = TraceCursor {
            index: cursor.index.saturating_add(1),
            bytes_left: OPPORTUNITY_BYTES,
        };
    }
}
