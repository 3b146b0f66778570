//! Model-based property tests: random sequences of sends, ACKs, losses and idle time drive each
//! controller, and invariants are checked after every step (in the style of s2n-quic's
//! congestion controller fuzz target).

use std::time::Duration;

use braid_sched_core::time::duration_micros;
use proptest::prelude::*;

use super::*;

const MDS: u64 = 1200;

#[derive(Clone, Debug)]
enum Op {
    Send {
        bytes: u64,
    },
    Ack {
        bytes: u64,
        age_us: u64,
        sample_us: u64,
        ack_delay_us: u64,
        app_limited: bool,
    },
    Loss {
        age_us: u64,
        persistent: bool,
        bytes: u64,
    },
    Idle {
        us: u64,
    },
    /// The path's datagram size changes (the window floor is two of them).
    Resize {
        mds: u64,
    },
    /// The session's other coupled paths become these (window, srtt µs, ℓ); every later ACK is
    /// preceded by the coupling they and this path make, as the session does.
    Others {
        paths: Vec<(u64, u64, u64)>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (1..=65_536u64).prop_map(|bytes| Op::Send { bytes }),
        4 => (1..=200_000u64, 0..=2_000_000u64, 1..=2_000_000u64, 0..=50_000u64, any::<bool>())
            .prop_map(|(bytes, age_us, sample_us, ack_delay_us, app_limited)| Op::Ack {
                bytes, age_us, sample_us, ack_delay_us, app_limited
            }),
        1 => (0..=2_000_000u64, prop::bool::weighted(0.1), 1..=65_536u64)
            .prop_map(|(age_us, persistent, bytes)| Op::Loss { age_us, persistent, bytes }),
        1 => (0..=5_000_000u64).prop_map(|us| Op::Idle { us }),
        1 => (200..=9_000u64).prop_map(|mds| Op::Resize { mds }),
        1 => prop::collection::vec((0..=10_000_000u64, 0..=2_000_000u64, 0..=100_000_000u64), 0..4)
            .prop_map(|paths| Op::Others { paths }),
    ]
}

#[derive(Clone, Debug)]
enum BbrOp {
    /// `count` datagrams leave.
    Send {
        count: u64,
    },
    /// The oldest `count` in flight are acknowledged.
    Ack {
        count: u64,
        ack_delay_us: u64,
    },
    /// The oldest `count` in flight are declared lost.
    Loss {
        count: u64,
        persistent: bool,
    },
    /// The sender runs out of data.
    AppLimited,
    Idle {
        us: u64,
    },
    Resize {
        mds: u64,
    },
}

fn bbr_op() -> impl Strategy<Value = BbrOp> {
    prop_oneof![
        4 => (1..=40u64).prop_map(|count| BbrOp::Send { count }),
        4 => (1..=40u64, 0..=25_000u64)
            .prop_map(|(count, ack_delay_us)| BbrOp::Ack { count, ack_delay_us }),
        1 => (1..=10u64, prop::bool::weighted(0.05))
            .prop_map(|(count, persistent)| BbrOp::Loss { count, persistent }),
        1 => Just(BbrOp::AppLimited),
        2 => (0..=300_000u64).prop_map(|us| BbrOp::Idle { us }),
        1 => (1200..=1500u64).prop_map(|mds| BbrOp::Resize { mds }),
    ]
}

fn algorithm() -> impl Strategy<Value = CongestionAlgorithm> {
    prop_oneof![
        Just(CongestionAlgorithm::NewReno),
        Just(CongestionAlgorithm::Cubic),
        Just(CongestionAlgorithm::Lia),
        Just(CongestionAlgorithm::Olia),
    ]
}

/// The window after a congestion event that starts a new recovery period.
fn reduced(algorithm: CongestionAlgorithm, window: u64, minimum: u64) -> u64 {
    let reduced = match algorithm {
        CongestionAlgorithm::NewReno | CongestionAlgorithm::Lia | CongestionAlgorithm::Olia => {
            window / 2
        }
        CongestionAlgorithm::Cubic => window * 7 / 10,
        CongestionAlgorithm::Bbr => unreachable!("BBR has its own model test"),
    };
    reduced.max(minimum)
}

/// `alone`: no other coupled path (a coupled controller is then NewReno).
fn check_ack(
    cc: &AnyController,
    before: u64,
    bytes: u64,
    mds: u64,
    in_recovery: bool,
    app_limited: bool,
    alone: bool,
) {
    let after = cc.window();
    if app_limited || in_recovery {
        assert_eq!(
            after, before,
            "app-limited or in-recovery ACK changed the window"
        );
    }
    if cc.algorithm() == CongestionAlgorithm::Olia && !alone {
        // OLIA moves window off the largest paths: an ACK may shrink it (to the floor at most,
        // checked after every step).
        return;
    }
    assert!(
        after >= before,
        "an ACK shrank the window {before} -> {after}"
    );
    if cc.algorithm() != CongestionAlgorithm::Cubic {
        // Slow start adds at most the ACKed bytes; avoidance adds one datagram per window of
        // ACKed bytes, and a carried remainder can complete one more window.
        assert!(
            after - before <= bytes + mds,
            "NewReno (or LIA, capped by it) grew by more than the ACKed bytes"
        );
    } else {
        assert!(
            after - before <= bytes + before / 2 + 1,
            "CUBIC grew too fast"
        );
    }
}

fn check_loss(cc: &AnyController, before: u64, in_recovery: bool, persistent: bool) {
    let after = cc.window();
    let minimum = cc.minimum_window();
    if persistent {
        assert_eq!(
            after, minimum,
            "persistent congestion must collapse the window"
        );
    } else if in_recovery {
        assert_eq!(after, before, "second reduction within one recovery period");
    } else {
        assert_eq!(after, reduced(cc.algorithm(), before, minimum));
        assert_eq!(cc.ssthresh(), after);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn controller_invariants_hold_after_every_step(
        algorithm in algorithm(),
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut cc = CongestionConfig::with_datagram_size(algorithm, MDS).build();
        let mut rtt = RttEstimator::new(Duration::from_millis(333));
        let mut now = Timestamp::from_secs_f64(10.0);
        let mut min_sample = Duration::MAX;
        let mut mds = MDS;
        let mut others: Vec<CouplingInput> = Vec::new();
        for op in ops {
            now += Duration::from_micros(1);
            let before = cc.window();
            match op {
                Op::Send { bytes } => {
                    cc.on_sent(now, bytes, 0);
                    prop_assert_eq!(cc.window(), before);
                }
                Op::Ack { bytes, age_us, sample_us, ack_delay_us, app_limited } => {
                    let sample = Duration::from_micros(sample_us);
                    rtt.update(Duration::from_micros(ack_delay_us), sample);
                    min_sample = min_sample.min(sample);
                    prop_assert_eq!(rtt.min_rtt(), min_sample);
                    prop_assert!(rtt.min_rtt() <= rtt.latest());
                    prop_assert!(rtt.pto_base() >= rtt.srtt() + GRANULARITY);
                    let sent = now.saturating_sub(Duration::from_micros(age_us));
                    cc.on_rtt_sample(now, sent, sample);
                    prop_assert_eq!(cc.window(), before, "an RTT sample moved the window");
                    let in_recovery = cc.in_recovery(sent);
                    if let Some(me) = cc.coupling_input(rtt.srtt()) {
                        let paths = others.iter().map(|&p| (false, p));
                        cc.on_coupling(&Coupling::compute(paths.chain([(true, me)])));
                    }
                    cc.on_ack(now, sent, bytes, &rtt, app_limited);
                    let alone = others.is_empty();
                    check_ack(&cc, before, bytes, mds, in_recovery, app_limited, alone);
                }
                Op::Loss { age_us, persistent, bytes } => {
                    let sent = now.saturating_sub(Duration::from_micros(age_us));
                    let in_recovery = cc.in_recovery(sent);
                    cc.on_congestion_event(now, sent, persistent, bytes);
                    check_loss(&cc, before, in_recovery, persistent);
                    if !persistent {
                        prop_assert!(cc.in_recovery(sent), "a loss must start or continue recovery");
                    }
                }
                Op::Idle { us } => now += Duration::from_micros(us),
                Op::Resize { mds: new } => {
                    mds = new;
                    cc.on_max_datagram_size(mds, 2 * mds);
                    prop_assert_eq!(cc.minimum_window(), 2 * mds);
                    prop_assert_eq!(cc.window(), before.max(2 * mds), "a resize moves only the floor");
                }
                Op::Others { paths } => {
                    others = paths
                        .into_iter()
                        .map(|(window, srtt_us, loss_interval)| CouplingInput {
                            window,
                            srtt: Duration::from_micros(srtt_us),
                            loss_interval,
                        })
                        .collect();
                }
            }
            prop_assert!(cc.window() >= cc.minimum_window());
            prop_assert!(cc.window() >= mds * 2);
        }
    }

    #[test]
    fn bbr_keeps_a_window_and_a_finite_pacing_rate_whatever_the_acks_and_losses(
        ops in prop::collection::vec(bbr_op(), 1..400),
    ) {
        let mut cc = CongestionConfig::with_datagram_size(CongestionAlgorithm::Bbr, MDS).build();
        let mut rtt = RttEstimator::new(Duration::from_millis(333));
        let mut delivery = DeliveryRate::new();
        // (sent time, size, snapshot), oldest first.
        let mut flight = std::collections::VecDeque::new();
        let mut in_flight = 0u64;
        let mut now = Timestamp::from_secs_f64(10.0);
        let mut mds = MDS;
        for op in ops {
            now += Duration::from_micros(1);
            match op {
                BbrOp::Send { count } => {
                    for _ in 0..count {
                        let p = delivery.on_sent(now, in_flight);
                        cc.on_sent(now, mds, in_flight);
                        flight.push_back((now, mds, p));
                        in_flight += mds;
                    }
                }
                BbrOp::Ack { count, ack_delay_us } => {
                    let prior = in_flight;
                    let mut newest = None;
                    for _ in 0..count {
                        let Some((sent, size, p)) = flight.pop_front() else { break };
                        delivery.on_acked(now, &p, sent, size);
                        cc.on_ack(now, sent, size, &rtt, false);
                        in_flight -= size;
                        newest = Some(sent);
                    }
                    if let Some(sent) = newest {
                        rtt.update(Duration::from_micros(ack_delay_us), now - sent);
                    }
                    if let Some(rs) = delivery.take_sample(now, rtt.min_rtt(), prior, in_flight) {
                        cc.on_ack_event(now, &rs, &rtt);
                    }
                }
                BbrOp::Loss { count, persistent } => {
                    let mut lost = 0;
                    let mut newest = None;
                    for _ in 0..count {
                        let Some((sent, size, _)) = flight.pop_front() else { break };
                        lost += size;
                        in_flight -= size;
                        newest = Some(sent);
                    }
                    if let Some(sent) = newest {
                        cc.on_congestion_event(now, sent, persistent, lost);
                        if persistent {
                            prop_assert_eq!(cc.window(), cc.minimum_window());
                        }
                    }
                }
                BbrOp::AppLimited => delivery.on_app_limited(in_flight),
                BbrOp::Idle { us } => now += Duration::from_micros(us),
                BbrOp::Resize { mds: new } => {
                    mds = new;
                    cc.on_max_datagram_size(mds, 2 * mds);
                    prop_assert_eq!(cc.minimum_window(), 4 * mds);
                }
            }
            // Packet conservation may hold the window at what is in flight plus one datagram.
            prop_assert!(cc.window() >= mds.min(cc.minimum_window()));
            if let Some(rate) = cc.pacing_rate() {
                prop_assert!(rate > 0);
            }
        }
    }

    #[test]
    fn pacer_never_exceeds_burst_plus_rate_and_always_makes_progress(
        window in 2 * MDS..=2_000_000u64,
        srtt_us in 100..=1_000_000u64,
        min_burst in MDS..=20 * MDS,
        extra_burst in prop_oneof![Just(0u64), 0..=300 * MDS],
        gaps in prop::collection::vec(0..=5_000u64, 1..300),
    ) {
        let srtt = Duration::from_micros(srtt_us);
        let max_burst = min_burst + extra_burst;
        let mut pacer = Pacer::with_burst_range(min_burst, max_burst);
        let start = Timestamp::from_millis(1);
        let mut now = start;
        pacer.delay(now, MDS, window, srtt);
        // The burst is 2 ms of the window, within the bounds.
        let ideal = u128::from(window) * 2_000 / u128::from(srtt_us);
        let capacity = u64::try_from(ideal).unwrap_or(u64::MAX).clamp(min_burst, max_burst);
        prop_assert_eq!(pacer.capacity(), capacity);
        let mut sent: u128 = 0;
        for gap in gaps {
            now += Duration::from_micros(gap);
            match pacer.delay(now, MDS, window, srtt) {
                None => {
                    pacer.on_sent(now, MDS);
                    sent += u128::from(MDS);
                }
                Some(at) => {
                    prop_assert!(at > now);
                    // Waiting until `at` must be enough.
                    let mut probe = pacer.clone();
                    prop_assert_eq!(probe.delay(at, MDS, window, srtt), None);
                }
            }
            prop_assert!(pacer.tokens() <= capacity);
            // rate = 5 * window / (4 * srtt) bytes per µs
            let elapsed = u128::from(duration_micros(now - start));
            let allowed = u128::from(capacity) + elapsed * 5 * u128::from(window) / (4 * u128::from(srtt_us));
            prop_assert!(sent <= allowed, "sent {} > allowed {}", sent, allowed);
        }
    }

    #[test]
    fn token_bucket_conserves_tokens(
        rate in 1..=100_000_000u64,
        burst in 1..=100_000u64,
        steps in prop::collection::vec((0..=10_000u64, 1..=10_000u64), 1..300),
    ) {
        let mut bucket = TokenBucket::new(rate, burst);
        let mut now = Timestamp::ZERO;
        let mut consumed: u128 = 0;
        for (gap, bytes) in steps {
            now += Duration::from_micros(gap);
            let ready = bucket.ready_at(bytes);
            if bucket.has_tokens(now, bytes) {
                bucket.consume(bytes);
                consumed += u128::from(bytes);
            } else if bytes <= burst {
                prop_assert!(ready > now, "ready_at {:?} but refused at {:?}", ready, now);
                let at = bucket.ready_at(bytes);
                let mut probe = bucket.clone();
                prop_assert!(probe.has_tokens(at, bytes));
            } else {
                prop_assert_eq!(bucket.ready_at(bytes), Timestamp::MAX);
            }
            prop_assert!(bucket.tokens() <= burst);
            let allowed = u128::from(burst) + u128::from(now.as_micros()) * u128::from(rate) / 1_000_000;
            prop_assert!(consumed <= allowed, "consumed {} > allowed {}", consumed, allowed);
        }
    }
}
