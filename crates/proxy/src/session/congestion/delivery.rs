//! Delivery rate estimation (draft-cheng-iccrg-delivery-rate-estimation-02): for every ACK, the
//! rate at which the path delivered data over the interval the newest acknowledged packet spans.
//!
//! Each packet sent carries a [`PacketDelivery`] snapshot of the path's delivery counters. When
//! packets are acknowledged, the newest of them (the one sent with the most bytes already
//! delivered) gives the sample: the bytes delivered since it was sent, over the longer of its
//! send interval (`send_time - first_sent_time`, how fast the sender put the data out) and its
//! ACK interval (`now - delivered_time`, how fast the ACKs came back), so a burst of sends does
//! not inflate the rate, nor do ACKs bunched together while the sends were paced (both at once
//! still can: BBR's window cap bounds what that costs). A sample whose interval is shorter than the path's
//! minimum RTT is not taken (as Linux's `tcp_rate_gen`).
//!
//! A sample is application-limited when the packet was sent while the sender had nothing to
//! send ([`DeliveryRate::on_app_limited`] marks the bubble until the data in flight at that
//! moment is delivered): such a sample says the path delivered at least this much, not at most.
//! Plain counters, no allocation, no clock.

use std::time::Duration;

use braid_sched_core::Timestamp;

/// The path's delivery counters when a packet was sent (`P.delivered`, `P.delivered_time`,
/// `P.first_sent_time`, `P.is_app_limited` of the draft), in 12 bytes (a sent packet's record
/// is 136): the delivered count as its low 32 bits (the full count is
/// recovered from the path's, which cannot run 4 GiB ahead while the packet is in flight), the
/// two times as microseconds before the packet's own send time (up to 35 minutes; older counts
/// as that), the flag in the top bit of the second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketDelivery {
    /// The low 32 bits of the bytes delivered on the path before the packet was sent.
    delivered_low: u32,
    /// µs from the last of those bytes' acknowledgement to the send.
    delivered_age_us: u32,
    /// µs from the send of the packet that started the current send interval to this send;
    /// the top bit: sent inside an application-limited bubble.
    first_sent_age_us: u32,
}

const APP_LIMITED_BIT: u32 = 1 << 31;

/// Microseconds from `earlier` to `later`, at most 2^31 - 1.
fn age_us(later: Timestamp, earlier: Timestamp) -> u32 {
    let us = later.saturating_duration_since(earlier).as_micros();
    u32::try_from(us)
        .unwrap_or(u32::MAX)
        .min(APP_LIMITED_BIT - 1)
}

impl PacketDelivery {
    /// The bytes delivered on the path before the packet was sent, given the path's count now
    /// (`now_delivered`, less than 4 GiB more).
    pub fn delivered(&self, now_delivered: u64) -> u64 {
        let since = (now_delivered as u32).wrapping_sub(self.delivered_low);
        now_delivered.saturating_sub(u64::from(since))
    }

    /// When the bytes delivered before the packet (sent at `sent_time`) were acknowledged.
    pub fn delivered_time(&self, sent_time: Timestamp) -> Timestamp {
        sent_time.saturating_sub(Duration::from_micros(u64::from(self.delivered_age_us)))
    }

    /// The send time of the packet that started the packet's send interval.
    pub fn first_sent_time(&self, sent_time: Timestamp) -> Timestamp {
        let age = self.first_sent_age_us & !APP_LIMITED_BIT;
        sent_time.saturating_sub(Duration::from_micros(u64::from(age)))
    }

    /// Sent inside an application-limited bubble.
    pub fn app_limited(&self) -> bool {
        self.first_sent_age_us & APP_LIMITED_BIT != 0
    }
}

/// One ACK's delivery-rate sample and what the congestion controller needs with it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateSample {
    /// Bytes per second delivered over `interval`; `None` when this ACK gives no valid sample
    /// (nothing newly acknowledged in flight, or an interval shorter than the minimum RTT).
    pub delivery_rate: Option<u64>,
    /// The newest acknowledged packet was sent in an application-limited bubble.
    pub app_limited: bool,
    /// The interval the rate was measured over.
    pub interval: Duration,
    /// Bytes delivered on the path in total, this ACK included.
    pub delivered: u64,
    /// Bytes delivered when the newest acknowledged packet was sent (its `delivered`).
    pub prior_delivered: u64,
    /// Bytes this ACK newly acknowledged.
    pub newly_acked: u64,
    /// The send time of the newest acknowledged packet.
    pub newest_sent_time: Timestamp,
    /// The RTT of the newest acknowledged packet (`now` less its send time).
    pub rtt: Duration,
    /// Bytes in flight before the ACK.
    pub prior_in_flight: u64,
    /// Bytes in flight after the ACK (and the losses it revealed).
    pub bytes_in_flight: u64,
}

/// A path's delivery counters (`C.delivered`, `C.delivered_time`, `C.first_sent_time`,
/// `C.app_limited` of the draft) and the sample being built from one ACK.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeliveryRate {
    delivered: u64,
    delivered_time: Timestamp,
    first_sent_time: Timestamp,
    /// Non-zero while application-limited: the `delivered` count that ends the bubble.
    app_limited_until: u64,
    /// The newest packet acknowledged by the ACK being processed, if any: its snapshot, its
    /// full delivered count and its send time.
    newest: Option<(PacketDelivery, u64, Timestamp)>,
    newly_acked: u64,
}

impl DeliveryRate {
    /// Fresh counters.
    pub fn new() -> Self {
        DeliveryRate::default()
    }

    /// Bytes delivered on the path so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// A packet is sent at `now` with `bytes_in_flight` bytes already in flight: the snapshot it
    /// carries. Sending into an empty path starts a new send and ACK interval.
    pub fn on_sent(&mut self, now: Timestamp, bytes_in_flight: u64) -> PacketDelivery {
        if bytes_in_flight == 0 {
            self.first_sent_time = now;
            self.delivered_time = now;
        }
        let app_limited = if self.app_limited_until != 0 {
            APP_LIMITED_BIT
        } else {
            0
        };
        PacketDelivery {
            delivered_low: self.delivered as u32,
            delivered_age_us: age_us(now, self.delivered_time),
            first_sent_age_us: age_us(now, self.first_sent_time) | app_limited,
        }
    }

    /// The sender has nothing to send while the path's window has room: the packets sent from
    /// now until the `bytes_in_flight` now in flight are delivered are application-limited.
    pub fn on_app_limited(&mut self, bytes_in_flight: u64) {
        self.app_limited_until = (self.delivered + bytes_in_flight).max(1);
    }

    /// Whether packets sent now are marked application-limited.
    pub fn is_app_limited(&self) -> bool {
        self.app_limited_until != 0
    }

    /// A packet of `bytes` sent at `sent_time` with snapshot `p` is acknowledged at `now`.
    pub fn on_acked(
        &mut self,
        now: Timestamp,
        p: &PacketDelivery,
        sent_time: Timestamp,
        bytes: u64,
    ) {
        let delivered = p.delivered(self.delivered);
        self.delivered += bytes;
        self.delivered_time = now;
        self.newly_acked += bytes;
        let newer = self
            .newest
            .is_none_or(|(_, d, t)| delivered > d || (delivered == d && sent_time > t));
        if newer {
            self.newest = Some((*p, delivered, sent_time));
            // The next send interval starts at this packet's send.
            self.first_sent_time = sent_time;
        }
    }

    /// Ends the ACK: the sample from the packets [`DeliveryRate::on_acked`] saw since the last
    /// call, or `None` when the ACK acknowledged nothing in flight. `min_rtt` bounds the
    /// interval from below (zero: no bound).
    pub fn take_sample(
        &mut self,
        now: Timestamp,
        min_rtt: Duration,
        prior_in_flight: u64,
        bytes_in_flight: u64,
    ) -> Option<RateSample> {
        let (p, prior_delivered, sent_time) = self.newest.take()?;
        let newly_acked = std::mem::take(&mut self.newly_acked);
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        let send_elapsed = sent_time.saturating_duration_since(p.first_sent_time(sent_time));
        let ack_elapsed = now.saturating_duration_since(p.delivered_time(sent_time));
        let interval = send_elapsed.max(ack_elapsed);
        let bytes = self.delivered - prior_delivered;
        let delivery_rate = (!interval.is_zero() && interval >= min_rtt).then(|| {
            let micros = interval.as_micros().max(1);
            u64::try_from(u128::from(bytes) * 1_000_000 / micros).unwrap_or(u64::MAX)
        });
        Some(RateSample {
            delivery_rate,
            app_limited: p.app_limited(),
            interval,
            delivered: self.delivered,
            prior_delivered,
            newly_acked,
            newest_sent_time: sent_time,
            rtt: now.saturating_duration_since(sent_time),
            prior_in_flight,
            bytes_in_flight,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Timestamp {
        Timestamp::from_millis(x)
    }

    /// Sends `n` packets of 1000 bytes every `gap` ms from `start`, returning the snapshots.
    fn send(
        d: &mut DeliveryRate,
        start: u64,
        gap: u64,
        n: u64,
        in_flight: &mut u64,
    ) -> Vec<(PacketDelivery, Timestamp)> {
        (0..n)
            .map(|i| {
                let t = ms(start + i * gap);
                let p = d.on_sent(t, *in_flight);
                *in_flight += 1000;
                (p, t)
            })
            .collect()
    }

    #[test]
    fn a_paced_flight_gives_the_rate_it_was_sent_and_acknowledged_at() {
        // One 1000-byte packet per ms (1 MB/s), each acknowledged 50 ms after it left.
        let mut d = DeliveryRate::new();
        let mut in_flight = 0;
        let mut sent = std::collections::VecDeque::new();
        let mut samples = Vec::new();
        for t in 0..200 {
            let now = ms(t);
            if t >= 50 {
                let (p, at) = sent.pop_front().unwrap();
                d.on_acked(now, &p, at, 1000);
                let before = in_flight;
                in_flight -= 1000;
                samples.push(d.take_sample(now, Duration::from_millis(20), before, in_flight));
            }
            sent.push_back((d.on_sent(now, in_flight), now));
            in_flight += 1000;
        }
        // The first packet: 1000 bytes over its 50 ms ACK interval.
        let first = samples[0].unwrap();
        assert_eq!((first.prior_delivered, first.delivered), (0, 1000));
        assert_eq!(first.interval, Duration::from_millis(50));
        assert_eq!(first.delivery_rate, Some(20_000));
        // Once ACKs come back while packets leave, each packet measures the 50 ms before it was
        // acknowledged: exactly the sending rate.
        let last = samples.last().unwrap().unwrap();
        assert_eq!(last.delivered - last.prior_delivered, 50_000);
        assert_eq!(last.interval, Duration::from_millis(50));
        assert_eq!(last.delivery_rate, Some(1_000_000));
        assert_eq!(last.rtt, Duration::from_millis(50));
        assert_eq!(
            (last.prior_in_flight, last.bytes_in_flight),
            (50_000, 49_000)
        );
        assert!(!last.app_limited);
    }

    #[test]
    fn the_delivered_count_is_recovered_from_its_low_bits_across_a_wrap() {
        let mut d = DeliveryRate {
            delivered: (1 << 32) - 1000,
            ..DeliveryRate::new()
        };
        let p = d.on_sent(ms(0), 0);
        assert_eq!(p.delivered(d.delivered), (1 << 32) - 1000);
        // 3000 more bytes arrive: the low bits wrap, the full count does not.
        let q = d.on_sent(ms(1), 1000);
        d.on_acked(ms(2), &q, ms(1), 3000);
        assert_eq!(p.delivered(d.delivered), (1 << 32) - 1000);
        d.on_acked(ms(40), &p, ms(0), 1200);
        let s = d.take_sample(ms(40), Duration::ZERO, 4200, 0).unwrap();
        assert_eq!(s.prior_delivered, (1 << 32) - 1000);
        assert_eq!(s.delivered, (1 << 32) + 3200);
    }

    #[test]
    fn an_interval_shorter_than_the_minimum_rtt_gives_no_rate() {
        let mut d = DeliveryRate::new();
        let p = d.on_sent(ms(0), 0);
        d.on_acked(ms(5), &p, ms(0), 1200);
        let s = d
            .take_sample(ms(5), Duration::from_millis(10), 1200, 0)
            .unwrap();
        assert_eq!(s.delivery_rate, None);
        assert_eq!(s.newly_acked, 1200);
        // An ACK that acknowledged nothing gives no sample at all.
        assert_eq!(d.take_sample(ms(6), Duration::ZERO, 0, 0), None);
    }

    #[test]
    fn packets_sent_in_an_application_limited_bubble_are_marked_until_it_is_delivered() {
        let mut d = DeliveryRate::new();
        let mut in_flight = 0;
        let first = send(&mut d, 0, 1, 2, &mut in_flight);
        // Nothing more to send with 2000 bytes in flight: the bubble lasts until 2000 bytes
        // are delivered.
        d.on_app_limited(in_flight);
        assert!(d.is_app_limited());
        let bubble = send(&mut d, 2, 1, 1, &mut in_flight);
        assert!(bubble[0].0.app_limited());
        for (p, t) in first.iter().chain(&bubble) {
            d.on_acked(ms(40), p, *t, 1000);
        }
        let s = d.take_sample(ms(40), Duration::ZERO, 3000, 0).unwrap();
        // The newest packet acknowledged was sent in the bubble, and the bubble is over.
        assert!(s.app_limited);
        assert!(!d.is_app_limited());
        assert!(!d.on_sent(ms(41), 0).app_limited());
    }
}
