//! Unit tests of the FALCON scheduler: safe default, action mapping, fallback, change detection
//! and meta-model deployment, experience, weight hot-swap.

use super::*;
use crate::nn::{Activation, Linear, Mlp};
use crate::path::PathState;
use crate::slot::experience_queue;

fn paths() -> [PathView; 3] {
    [
        PathView::new(PathId(0), 40_000, 20_000),
        PathView::new(PathId(1), 10_000, 20_000),
        PathView::new(PathId(2), 20_000, 20_000),
    ]
}

/// A network of FALCON's shape whose Q-value is `bias[slot]` whatever the input.
fn constant_network(bias: [f32; SLOTS]) -> Mlp {
    let layers = WIDTHS
        .windows(2)
        .enumerate()
        .map(|(i, pair)| {
            let b = if i == 3 {
                bias.to_vec()
            } else {
                vec![0.0; pair[1]]
            };
            Linear::new("l", pair[0], pair[1], vec![0.0; pair[0] * pair[1]], b).unwrap()
        })
        .collect();
    Mlp::new(layers, Activation::Relu).unwrap()
}

#[test]
fn default_decides_as_minrtt() {
    let mut falcon = Falcon::new(&FalconConfig::default());
    let mut p = paths();
    let packet = PacketMeta::bulk(1_200);
    assert_eq!(
        falcon.select(&p, &packet, Timestamp::ZERO),
        Decision::Send(PathId(1))
    );
    p[1].bytes_in_flight = p[1].cwnd;
    assert_eq!(
        falcon.select(&p, &packet, Timestamp::ZERO),
        Decision::Send(PathId(2))
    );
    p[2].state = PathState::Failed;
    assert_eq!(
        falcon.select(&p, &packet, Timestamp::ZERO),
        Decision::Send(PathId(0))
    );
    p[0].rate_limited = true;
    assert_eq!(falcon.select(&p, &packet, Timestamp::ZERO), Decision::Wait);
    assert_eq!(falcon.stats().explored, 0);
}

#[test]
fn q_values_map_to_slots_and_unusable_choices_fall_back() {
    let policy = constant_network([0.0, 0.0, 5.0, 1.0]);
    let weights = FalconWeights::new(policy, Vec::new()).unwrap();
    let config = FalconConfig {
        weights: Some(Arc::new(weights)),
        ..FalconConfig::default()
    };
    let mut falcon = Falcon::new(&config);
    let mut p = paths();
    let packet = PacketMeta::bulk(1_200);
    // Slot 2 holds path 2.
    assert_eq!(
        falcon.select(&p, &packet, Timestamp::ZERO),
        Decision::Send(PathId(2))
    );
    // Path 2 full: the best sendable slot is slot 0 or 1 (equal Q, first wins).
    p[2].bytes_in_flight = p[2].cwnd;
    assert_eq!(
        falcon.select(&p, &packet, Timestamp::ZERO),
        Decision::Send(PathId(0))
    );
    // Backup tier is skipped while a primary has room.
    p[0].state = PathState::Backup;
    assert_eq!(
        falcon.select(&p, &packet, Timestamp::ZERO),
        Decision::Send(PathId(1))
    );
    assert_eq!(falcon.stats().fallbacks, 0);
}

#[test]
fn paths_beyond_the_slots_are_reached_through_the_fallback() {
    let mut falcon = Falcon::new(&FalconConfig::default());
    let mut p: Vec<PathView> = (0..6)
        .map(|i| PathView::new(PathId(i), 10_000 + u32::from(i), 20_000))
        .collect();
    for view in p.iter_mut().take(SLOTS) {
        view.bytes_in_flight = view.cwnd;
    }
    let d = falcon.select(&p, &PacketMeta::bulk(1_200), Timestamp::ZERO);
    assert_eq!(d, Decision::Send(PathId(4)));
    assert_eq!(falcon.stats().fallbacks, 1);
}

#[test]
fn hot_swapped_weights_are_used_at_the_next_decision() {
    let (mut writer, reader) = weight_slot(FalconWeights::minrtt());
    let (sender, mut receiver) = experience_queue(64).unwrap();
    let config = FalconConfig {
        epsilon: 0.0,
        ..FalconConfig::default()
    };
    let mut falcon = Falcon::with_reader(&config, reader.clone());
    falcon.attach_learner(reader, sender);
    let p = paths();
    let packet = PacketMeta::bulk(1_200);
    assert_eq!(
        falcon.select(&p, &packet, Timestamp::ZERO),
        Decision::Send(PathId(1))
    );
    assert_eq!(falcon.stats().model_version, 0);
    let swapped = FalconWeights::new(constant_network([9.0, 0.0, 0.0, 0.0]), Vec::new()).unwrap();
    writer.publish(swapped);
    let later = Timestamp::from_millis(5);
    assert_eq!(falcon.select(&p, &packet, later), Decision::Send(PathId(0)));
    assert_eq!(falcon.stats().model_version, 1);
    // The first decision's transition went out with the second's state.
    let t = receiver.recv().unwrap();
    assert_eq!(t.action, 1);
    assert_eq!(t.at, Timestamp::ZERO);
    assert_eq!(t.state[3], 0.4); // path 0's RTT, 40 ms in units of 100 ms
    assert!(receiver.recv().is_none());
}

#[test]
fn exploration_only_with_a_learner_and_stays_sendable() {
    let (_writer, reader) = weight_slot(FalconWeights::minrtt());
    let (sender, _receiver) = experience_queue(1 << 12).unwrap();
    let config = FalconConfig {
        epsilon: 0.5,
        seed: 9,
        ..FalconConfig::default()
    };
    let mut falcon = Falcon::new(&config);
    falcon.attach_learner(reader, sender);
    let mut p = paths();
    p[0].bytes_in_flight = p[0].cwnd;
    let packet = PacketMeta::bulk(1_200);
    let mut seen = [0u32; 3];
    for i in 0..1_000 {
        match falcon.select(&p, &packet, Timestamp::from_micros(i)) {
            Decision::Send(id) => seen[id.index()] += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen[0], 0);
    assert!(seen[2] > 150 && seen[1] > seen[2], "{seen:?}");
    assert!(falcon.stats().explored > 400);
}

#[test]
fn a_change_in_rtt_deploys_the_matching_meta_model() {
    // Class of a path with 150 ms RTT, small deviation, no loss: 9·0 + 3·1 + 0 = 3.
    let mut meta = vec![None; CLASSES];
    meta[3] = Some(constant_network([0.0, 0.0, 7.0, 0.0]));
    let weights = FalconWeights::new(FalconWeights::minrtt().policy().clone(), meta).unwrap();
    let (sender, mut receiver) = experience_queue(1 << 14).unwrap();
    let (_writer, reader) = weight_slot(weights);
    let config = FalconConfig {
        epsilon: 0.0,
        ..FalconConfig::default()
    };
    let mut falcon = Falcon::with_reader(&config, reader.clone());
    falcon.attach_learner(reader, sender);
    let mut p = paths();
    let packet = PacketMeta::bulk(1_200);
    let mut now = 0u64;
    let ack = |falcon: &mut Falcon, rtt_ms: u32, now: u64| {
        let ack = AckInfo {
            bytes: 1_200,
            rtt_us: rtt_ms * 1_000 + (now % 7) as u32 * 100,
            owd_us: 0,
        };
        falcon.on_ack(PathId(1), &ack, Timestamp::from_micros(now));
    };
    // RTT samples reach the detector in groups of RTT_GROUP ACKs.
    let group = crate::changepoint::RTT_GROUP;
    for _ in 0..300 * group {
        now += 1_000;
        ack(&mut falcon, 10, now);
        assert_eq!(
            falcon.select(&p, &packet, Timestamp::from_micros(now)),
            Decision::Send(PathId(1))
        );
    }
    assert_eq!(falcon.stats().changes, 0);
    p[1].srtt_us = 150_000;
    p[1].rttvar_us = 10_000;
    // The detector reads the windowed minimum RTT: a rise shows once the window has passed
    // (one ACK per ms here), then within a few groups.
    let window_acks = crate::sched::falcon::DEFAULT_RTT_WINDOW_MS as u32;
    for i in 0..window_acks + 10 * group {
        now += 1_000;
        ack(&mut falcon, 150, now);
        if i < window_acks {
            assert_eq!(falcon.stats().changes, 0, "after {i} ACKs");
        }
    }
    assert_eq!(falcon.stats().changes, 1);
    assert_eq!(
        falcon.select(&p, &packet, Timestamp::from_micros(now)),
        Decision::Send(PathId(2))
    );
    let flagged: Vec<_> = std::iter::from_fn(|| receiver.recv())
        .filter(|t| t.change)
        .collect();
    assert_eq!(flagged.len(), 1);
    assert_eq!(flagged[0].condition, 3);
}

#[test]
fn loss_counts_feed_the_loss_detector() {
    let mut falcon = Falcon::new(&FalconConfig::default());
    let packet = PacketMeta::bulk(1_200);
    let mut now = 0;
    for group in 0..400u32 {
        let lossy = group >= 300;
        for i in 0..32u32 {
            now += 100;
            falcon.on_sent(PathId(0), &packet, Timestamp::from_micros(now));
            if lossy && i % 3 == 0 || !lossy && i == 0 && group % 10 == 0 {
                falcon.on_loss(PathId(0), 1_200, Timestamp::from_micros(now));
            }
        }
    }
    assert_eq!(falcon.stats().changes, 1);
}

#[test]
fn reports_set_the_reward() {
    let (sender, mut receiver) = experience_queue(64).unwrap();
    let (_writer, reader) = weight_slot(FalconWeights::minrtt());
    let config = FalconConfig {
        epsilon: 0.0,
        ..FalconConfig::default()
    };
    let mut falcon = Falcon::new(&config);
    falcon.attach_learner(reader, sender);
    let p = paths();
    let packet = PacketMeta::bulk(1_200);
    falcon.select(&p, &packet, Timestamp::ZERO);
    // 1.25 MB in 100 ms = 100 Mbit/s → reward 1.0.
    let report = ReceiverReport {
        interval_us: 100_000,
        delivered_bytes: 1_250_000,
        ..ReceiverReport::default()
    };
    falcon.on_report(&report, Timestamp::from_millis(100));
    falcon.select(&p, &packet, Timestamp::from_millis(100));
    let t = receiver.recv().unwrap();
    assert!((t.reward - 1.0).abs() < 1e-6, "{}", t.reward);
}

#[test]
fn parameters_are_validated() {
    let mut config = FalconConfig::default();
    assert_eq!(config.set("epsilon", 0.3), Ok(true));
    assert!(config.set("epsilon", 1.5).is_err());
    assert!(config.set("loss_group", 0.0).is_err());
    assert!(config.set("seed", 1.5).is_err());
    assert_eq!(config.set("gamma", 0.5), Ok(false));
}
