//! Unit tests of the FALCON scheduler: safe default, action mapping, fallback, change detection
//! and meta-model deployment, experience, weight hot-swap.

use super::*;
use crate::nn::{Activation, Linear, Mlp};
use crate::path::PathState;
use crate::slot::{ExperienceReceiver, SlotWriter, experience_queue};

fn paths() -> [PathView; 3] {
    [
        PathView::new(PathId(0), 40_000, 20_000),
        PathView::new(PathId(1), 10_000, 20_000),
        PathView::new(PathId(2), 20_000, 20_000),
    ]
}

/// A FALCON scheduler under `config` with a learner attached: minRTT weights in the slot and an
/// experience queue of 4096. The slot's writer and the queue's receiver are returned so that
/// they live as long as the caller keeps them.
fn with_learner(
    config: &FalconConfig,
) -> (
    Falcon,
    SlotWriter<FalconWeights>,
    ExperienceReceiver<FalconTransition>,
) {
    let (writer, reader) = weight_slot(FalconWeights::minrtt());
    let (sender, receiver) = experience_queue(1 << 12).unwrap();
    let mut falcon = Falcon::new(config);
    falcon.attach_learner(reader, sender);
    (falcon, writer, receiver)
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
    let (mut falcon, _writer, _receiver) = with_learner(&FalconConfig {
        epsilon: 0.5,
        seed: 9,
        ..FalconConfig::default()
    });
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

#[test]
fn choose_congested_waits_for_the_appointed_path_while_it_has_packets_in_flight() {
    // Slot 0 (path 0, the slowest) has the best Q-value.
    let policy = constant_network([5.0, 1.0, 0.0, 0.0]);
    let weights = Arc::new(FalconWeights::new(policy, Vec::new()).unwrap());
    let packet = PacketMeta::bulk(1_200);
    let mut p = paths();
    p[0].bytes_in_flight = p[0].cwnd;
    // Restricted to paths with room (the default), a full path 0 is passed over.
    let mut restricted = Falcon::new(&FalconConfig {
        weights: Some(Arc::clone(&weights)),
        ..FalconConfig::default()
    });
    assert_eq!(
        restricted.select(&p, &packet, Timestamp::ZERO),
        Decision::Send(PathId(1))
    );
    assert_eq!(restricted.stats().waits, 0);
    // Path 1 is minRTT's choice as well: nothing differs from minRTT.
    assert_eq!(restricted.stats().not_minrtt, 0);
    assert_eq!(restricted.stats().choices, 1);
    // §IV-B's action space: the packet waits for path 0.
    let mut congested = Falcon::new(&FalconConfig {
        weights: Some(Arc::clone(&weights)),
        choose_congested: true,
        ..FalconConfig::default()
    });
    assert_eq!(
        congested.select(&p, &packet, Timestamp::ZERO),
        Decision::Wait
    );
    assert_eq!(congested.stats().waits, 1);
    assert_eq!(congested.stats().not_minrtt, 1);
    // With room on path 0 it is sent there (not minRTT's path either).
    p[0].bytes_in_flight = 0;
    assert_eq!(
        congested.select(&p, &packet, Timestamp::ZERO),
        Decision::Send(PathId(0))
    );
    assert_eq!(congested.stats().not_minrtt, 2);
    // A path without room and nothing in flight would never free its window: the best path
    // with room is used instead (the minRTT fallback).
    p[0].cwnd = 0;
    assert_eq!(
        congested.select(&p, &packet, Timestamp::ZERO),
        Decision::Send(PathId(1))
    );
    assert_eq!(congested.stats().waits, 1);
    assert_eq!(congested.stats().fallbacks, 1);
}

#[test]
fn exploration_with_choose_congested_also_appoints_full_paths() {
    let (mut falcon, _writer, _receiver) = with_learner(&FalconConfig {
        epsilon: 1.0,
        seed: 3,
        choose_congested: true,
        ..FalconConfig::default()
    });
    let mut p = paths();
    p[0].bytes_in_flight = p[0].cwnd;
    let packet = PacketMeta::bulk(1_200);
    let mut waits = 0;
    for i in 0..600 {
        if falcon.select(&p, &packet, Timestamp::from_micros(i)) == Decision::Wait {
            waits += 1;
        }
    }
    // One slot in three holds the full path 0: about 200 waits.
    assert!((120..280).contains(&waits), "{waits}");
    assert_eq!(falcon.stats().waits, waits);
    assert_eq!(falcon.stats().not_minrtt, 0, "exploration is not counted");
}

#[test]
fn start_change_declares_one_change_when_a_path_has_enough_samples() {
    let mut meta = vec![None; CLASSES];
    let class = {
        let view = paths()[1];
        condition_class(view.loss_rate, view.srtt_us, view.rttvar_us)
    };
    meta[usize::from(class)] = Some(constant_network([0.0, 0.0, 7.0, 0.0]));
    let weights = FalconWeights::new(FalconWeights::minrtt().policy().clone(), meta).unwrap();
    let (sender, mut receiver) = experience_queue(1 << 12).unwrap();
    let (_writer, reader) = weight_slot(weights);
    let run = |start_change: bool, sender, reader| {
        let config = FalconConfig {
            epsilon: 0.0,
            start_change,
            ..FalconConfig::default()
        };
        let mut falcon = Falcon::with_reader(&config, SlotReader::clone(&reader));
        falcon.attach_learner(reader, sender);
        let p = paths();
        let packet = PacketMeta::bulk(1_200);
        let mut decisions = Vec::new();
        for i in 0..3 * START_CHANGE_SAMPLES {
            let now = Timestamp::from_micros(u64::from(i) * 1_000);
            let ack = AckInfo {
                bytes: 1_200,
                rtt_us: 10_000,
                owd_us: 0,
            };
            falcon.on_ack(PathId(1), &ack, now);
            decisions.push(falcon.select(&p, &packet, now));
        }
        (falcon.stats().changes, decisions)
    };
    let (changes, decisions) = run(true, sender.clone(), reader.clone());
    assert_eq!(changes, 1);
    // minRTT's path 1 until the change, then the meta-model's slot 2.
    let first = decisions
        .iter()
        .position(|d| *d == Decision::Send(PathId(2)));
    assert_eq!(first, Some(START_CHANGE_SAMPLES as usize - 1));
    let flagged: Vec<_> = std::iter::from_fn(|| receiver.recv())
        .filter(|t| t.change)
        .collect();
    assert_eq!(flagged.len(), 1);
    assert_eq!(flagged[0].condition, class);
    let (changes, decisions) = run(false, sender, reader);
    assert_eq!(changes, 0);
    assert!(decisions.iter().all(|d| *d == Decision::Send(PathId(1))));
}

#[test]
fn flags_are_zero_or_one() {
    let mut config = FalconConfig::default();
    assert_eq!(config.set("choose_congested", 1.0), Ok(true));
    assert!(config.choose_congested);
    assert_eq!(config.set("start_change", 1.0), Ok(true));
    assert!(config.start_change);
    assert_eq!(config.set("start_change", 0.0), Ok(true));
    assert!(!config.start_change);
    assert!(config.set("choose_congested", 0.5).is_err());
    assert!(config.set("start_change", 2.0).is_err());
}
