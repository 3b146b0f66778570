//! Unit tests of the EdAR scheduler: action mapping, interval timing, transitions and rewards,
//! fixed policies, hot-swapped weights.

use super::*;
use crate::path::PathState;
use crate::slot::{ExperienceReceiver, experience_queue, weight_slot};

fn two_paths() -> [PathView; 2] {
    [
        PathView::new(PathId(0), 50_000, 100_000),
        PathView::new(PathId(1), 100_000, 100_000),
    ]
}

fn pkt() -> PacketMeta {
    PacketMeta::bulk(1_200)
}

/// A datagram (copied at placement in redundant mode: the redundant buffer holds stream data).
fn datagram() -> PacketMeta {
    PacketMeta {
        class: TrafficClass::Realtime,
        ..PacketMeta::bulk(1_200)
    }
}

/// An EdAR scheduler under `policy` that sends its transitions to a queue of `capacity`, and
/// the queue's receiving end.
fn recording(policy: EdarPolicy, capacity: usize) -> (Edar, ExperienceReceiver<EdarTransition>) {
    let (sender, receiver) = experience_queue::<EdarTransition>(capacity).unwrap();
    let config = EdarConfig {
        policy,
        experience: Some(sender),
        ..EdarConfig::default()
    };
    (Edar::new(&config), receiver)
}

/// A network whose core output is a constant: Q(normal) = `normal`, Q(redundant) = `redundant`
/// (all core weights zero, last-layer bias set).
fn constant_network(normal: f32, redundant: f32) -> EdarNetwork {
    use crate::nn::{Activation, Linear, Mlp};
    let base = EdarNetwork::initial(1);
    let widths = network::CORE_WIDTHS;
    let layers = widths
        .windows(2)
        .enumerate()
        .map(|(i, pair)| {
            let mut bias = vec![0.0; pair[1]];
            if i == widths.len() - 2 {
                bias = vec![normal, redundant];
            }
            Linear::new("l", pair[0], pair[1], vec![0.0; pair[0] * pair[1]], bias).unwrap()
        })
        .collect();
    let core = Mlp::new(layers, Activation::Relu).unwrap();
    EdarNetwork::new(base.features().to_vec(), base.across().clone(), core).unwrap()
}

#[test]
fn action_indices_round_trip() {
    for a in [EdarAction::Normal, EdarAction::Redundant] {
        assert_eq!(EdarAction::from_index(a.index()), a);
    }
    assert_eq!(EdarAction::from_index(7), EdarAction::Normal);
}

/// EdAR with the session's redundant buffer (`redundant_buffer = 1`, the default).
fn with_buffer() -> EdarConfig {
    EdarConfig::default()
}

/// EdAR whose redundant mode only copies at placement (`redundant_buffer = 0`).
fn placement_only() -> EdarConfig {
    EdarConfig {
        redundant_buffer: false,
        ..EdarConfig::default()
    }
}

#[test]
fn first_interval_is_redundant_then_normal_without_weights() {
    // `redundant_buffer = 0`: redundant mode copies at placement, the buffer is never linked.
    let mut s = Edar::new(&placement_only());
    let p = two_paths();
    let t0 = Timestamp::from_millis(1);
    assert!(!s.link_redundant_buffer());
    assert_eq!(
        s.select(&p, &pkt(), t0),
        Decision::Duplicate([PathId(0), PathId(1)].into_iter().collect())
    );
    assert!(!s.link_redundant_buffer());
    // TI = min srtt = 50 ms; after it the default (no weights) policy is normal = minRTT.
    assert_eq!(
        s.select(&p, &pkt(), t0 + Duration::from_millis(49))
            .paths()
            .len(),
        2
    );
    assert_eq!(
        s.select(&p, &pkt(), t0 + Duration::from_millis(50)),
        Decision::Send(PathId(0))
    );
    assert!(!s.link_redundant_buffer());
    assert_eq!(s.decisions(), (1, 0));
}

#[test]
fn first_interval_links_the_buffer_when_configured() {
    let mut s = Edar::new(&with_buffer());
    let p = two_paths();
    let t0 = Timestamp::from_millis(1);
    assert!(s.link_redundant_buffer());
    // Redundant: stream data and datagrams are copied at placement onto the paths with room,
    // and the redundant buffer is linked (the session copies the rest later).
    assert_eq!(
        s.select(&p, &pkt(), t0),
        Decision::Duplicate([PathId(0), PathId(1)].into_iter().collect())
    );
    assert!(s.link_redundant_buffer());
    assert_eq!(
        s.select(&p, &datagram(), t0 + Duration::from_millis(49)),
        Decision::Duplicate([PathId(0), PathId(1)].into_iter().collect())
    );
    assert!(s.link_redundant_buffer());
    // TI = min srtt = 50 ms; after it the default (no weights) policy is normal = minRTT.
    assert_eq!(
        s.select(&p, &datagram(), t0 + Duration::from_millis(50)),
        Decision::Send(PathId(0))
    );
    assert!(!s.link_redundant_buffer());
    assert_eq!(s.decisions(), (1, 0));
}

#[test]
fn weights_choose_the_mode_and_hot_swap_takes_effect() {
    let (mut writer, reader) = weight_slot(constant_network(1.0, 0.0));
    let config = EdarConfig {
        weights: Some(reader),
        ..with_buffer()
    };
    let mut s = Edar::new(&config);
    let p = two_paths();
    let mut now = Timestamp::from_millis(1);
    s.select(&p, &pkt(), now);
    now += Duration::from_millis(60);
    assert_eq!(s.select(&p, &pkt(), now), Decision::Send(PathId(0)));
    assert_eq!(s.weights_version(), Some(0));
    assert_eq!(writer.publish(constant_network(0.0, 1.0)), 1);
    // Picked up at the next call; the mode changes at the next interval.
    now += Duration::from_millis(60);
    assert!(!s.link_redundant_buffer());
    // Redundant with the buffer: stream packets and datagrams are also copied at placement.
    assert!(s.select(&p, &pkt(), now).paths().len() == 2);
    assert!(s.select(&p, &datagram(), now).paths().len() == 2);
    assert_eq!(s.weights_version(), Some(1));
    assert_eq!(s.mode(), EdarAction::Redundant);
    assert!(s.link_redundant_buffer());
}

#[test]
fn transitions_carry_state_action_and_reward() {
    let (mut s, mut receiver) = recording(EdarPolicy::Redundant, 16);
    let p = two_paths();
    let mut now = Timestamp::from_millis(1);
    s.select(&p, &pkt(), now);
    // The first interval [1, 51) ms (redundant, §IV-B) had no state: no transition. Interval 1
    // starts at 51 ms with the first observed state.
    now += Duration::from_millis(50);
    s.select(&p, &pkt(), now);
    assert!(receiver.recv().is_none());
    s.on_ack(
        PathId(0),
        &AckInfo {
            bytes: 62_500,
            rtt_us: 50_000,
            owd_us: 25_000,
        },
        now,
    );
    // Interval 1 [51, 101) ms closes, then interval 2 [101, 151) ms.
    now += Duration::from_millis(50);
    s.select(&p, &pkt(), now);
    now += Duration::from_millis(50);
    s.select(&p, &pkt(), now);
    assert!(receiver.recv().is_none());
    // One RTT (TI = 50 ms) after interval 1's sends, a report on them: 10 Mbit/s goodput, no
    // waste, no disorder → r = 1.0, credited to interval 1 (not to the one it arrived in).
    s.on_report(
        &ReceiverReport {
            interval_us: 50_000,
            delivered_bytes: 62_500,
            ..ReceiverReport::default()
        },
        now,
    );
    let t = receiver.recv().unwrap();
    assert!(receiver.recv().is_none(), "interval 2 is not covered yet");
    assert_eq!(t.action, EdarAction::Redundant);
    assert!((t.reward - 1.0).abs() < 1e-6, "{}", t.reward);
    assert_eq!(t.state.path_count, 2);
    assert_eq!(t.next_state.connection[0], 1.0);
    // The state: interval 1's sample (no ACK yet); the next state: interval 2's, whose
    // 62 500 acknowledged bytes in 50 ms are 10 Mbit/s = 1.0.
    let newest = HISTORY - 1;
    assert_eq!(t.state.value(0, 2, newest), 0.0);
    assert!((t.next_state.value(0, 2, newest) - 1.0).abs() < 1e-6);
    assert!(
        (t.next_state.value(0, 0, newest) - 0.5).abs() < 1e-6,
        "rtt 50 ms"
    );
    assert_eq!(t.next_state.value(1, 2, newest), 0.0);
    assert!(!t.terminal);
}

#[test]
fn reports_coarser_than_the_interval_are_split_over_the_intervals_they_cover() {
    let (mut s, mut receiver) = recording(EdarPolicy::Normal, 64);
    let p = two_paths();
    // TI = 50 ms; a report every 100 ms, covering the sends of [now − 150, now − 50) ms.
    // The first 100 ms of sends deliver at 10 Mbit/s, the next 100 ms at 5 Mbit/s.
    for ms in (0..=400u64).step_by(10) {
        let now = Timestamp::from_millis(ms);
        s.select(&p, &pkt(), now);
        if ms >= 150 && ms % 100 == 50 {
            let rate = if ms == 150 { 125_000 } else { 62_500 };
            s.on_report(
                &ReceiverReport {
                    interval_us: 100_000,
                    delivered_bytes: rate,
                    ..ReceiverReport::default()
                },
                now,
            );
        }
    }
    let mut rewards = Vec::new();
    while let Some(t) = receiver.recv() {
        rewards.push(t.reward);
    }
    // Intervals [0,50) (the first, stateless: no transition), [50,100) ← the first report;
    // [100,150), [150,200) ← the second; [200,250), [250,300) ← the third (5 Mbit/s): every
    // interval with a state yields one transition.
    assert_eq!(rewards.len(), 5, "{rewards:?}");
    for (i, r) in rewards.iter().enumerate() {
        let expected = if i < 1 { 1.0 } else { 0.5 };
        assert!((r - expected).abs() < 1e-3, "{rewards:?}");
    }
}

#[test]
fn an_interval_straddling_two_reports_gets_the_overlap_weighted_mix() {
    let (mut s, mut receiver) = recording(EdarPolicy::Normal, 64);
    // TI = 60 ms: intervals [0,60), [60,120), ...; reports of 100 ms at 10 then 0 Mbit/s.
    let p = [
        PathView::new(PathId(0), 60_000, 100_000),
        PathView::new(PathId(1), 100_000, 100_000),
    ];
    for ms in (0..=400u64).step_by(10) {
        let now = Timestamp::from_millis(ms);
        s.select(&p, &pkt(), now);
        if ms == 160 || ms == 260 {
            s.on_report(
                &ReceiverReport {
                    interval_us: 100_000,
                    delivered_bytes: if ms == 160 { 125_000 } else { 0 },
                    ..ReceiverReport::default()
                },
                now,
            );
        }
    }
    let first = receiver.recv().unwrap();
    let second = receiver.recv().unwrap();
    // ([0,60) is the stateless first interval.) [60,120) has 40 ms of the first report's span
    // [0,100) at 10 Mbit/s and 20 ms of the second's [100,200) at 0; [120,180) lies in the
    // second.
    assert!(
        (first.reward - 40.0 / 60.0).abs() < 1e-3,
        "{}",
        first.reward
    );
    assert!(second.reward.abs() < 1e-3, "{}", second.reward);
}

#[test]
fn switching_policy_takes_both_actions_deterministically() {
    let p = two_paths();
    let run = |seed: u64| {
        let mut s = Edar::new(&EdarConfig {
            policy: EdarPolicy::Switching,
            seed,
            ..EdarConfig::default()
        });
        let mut modes = Vec::new();
        for i in 0..400u64 {
            s.select(&p, &pkt(), Timestamp::from_millis(1 + 50 * i));
            modes.push(s.mode());
        }
        modes
    };
    let a = run(5);
    assert_eq!(a, run(5));
    let redundant = a.iter().filter(|&&m| m == EdarAction::Redundant).count();
    // 400 fair coin flips: far outside 120..=280 has probability < 1e-15.
    assert!((120..=280).contains(&redundant), "{redundant}");
    let switches = a.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(switches >= 100, "{switches}");
}

#[test]
fn fixed_policies_and_epsilon_are_deterministic() {
    let p = two_paths();
    let run = |config: &EdarConfig| {
        let mut s = Edar::new(config);
        let mut modes = Vec::new();
        for i in 0..200u64 {
            s.select(&p, &pkt(), Timestamp::from_millis(1 + 50 * i));
            modes.push(s.mode());
        }
        modes
    };
    let normal = run(&EdarConfig {
        policy: EdarPolicy::Normal,
        ..EdarConfig::default()
    });
    assert!(normal[1..].iter().all(|&m| m == EdarAction::Normal));
    let (_w, reader) = weight_slot(constant_network(1.0, 0.0));
    let explore = EdarConfig {
        epsilon: 0.5,
        seed: 3,
        weights: Some(reader),
        ..EdarConfig::default()
    };
    let a = run(&explore);
    assert_eq!(a, run(&explore));
    let redundant = a.iter().filter(|&&m| m == EdarAction::Redundant).count();
    // ε = 0.5 and a random pick half the time: about a quarter redundant.
    assert!((25..=80).contains(&redundant), "{redundant}");
}

/// Paths 0 and 1 primary (srtt 50 and 100 ms), path 2 a backup (20 ms).
fn tiered_paths() -> [PathView; 3] {
    let mut p = [
        PathView::new(PathId(0), 50_000, 100_000),
        PathView::new(PathId(1), 100_000, 100_000),
        PathView::new(PathId(2), 20_000, 100_000),
    ];
    p[2].state = PathState::Backup;
    p
}

#[test]
fn redundant_mode_honours_tiers_and_failures() {
    // `redundant_buffer = 0`: copies at placement only.
    let mut s = Edar::new(&EdarConfig {
        policy: EdarPolicy::Redundant,
        ..placement_only()
    });
    let mut p = tiered_paths();
    let now = Timestamp::from_millis(1);
    assert_eq!(
        s.select(&p, &pkt(), now),
        Decision::Duplicate([PathId(0), PathId(1)].into_iter().collect())
    );
    assert!(!s.link_redundant_buffer());
    p[1].state = PathState::Failed;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Send(PathId(0)));
    p[0].bytes_in_flight = 100_000;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Send(PathId(2)));
    p[2].rate_limited = true;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Wait);
}

#[test]
fn redundant_mode_with_the_buffer_honours_tiers_and_failures() {
    let mut s = Edar::new(&EdarConfig {
        policy: EdarPolicy::Redundant,
        ..with_buffer()
    });
    let mut p = tiered_paths();
    let now = Timestamp::from_millis(1);
    assert_eq!(
        s.select(&p, &datagram(), now),
        Decision::Duplicate([PathId(0), PathId(1)].into_iter().collect())
    );
    assert_eq!(
        s.select(&p, &pkt(), now),
        Decision::Duplicate([PathId(0), PathId(1)].into_iter().collect())
    );
    assert!(s.link_redundant_buffer());
    p[1].state = PathState::Failed;
    assert_eq!(s.select(&p, &datagram(), now), Decision::Send(PathId(0)));
    p[0].bytes_in_flight = 100_000;
    assert_eq!(s.select(&p, &datagram(), now), Decision::Send(PathId(2)));
    assert_eq!(s.select(&p, &pkt(), now), Decision::Send(PathId(2)));
    p[2].rate_limited = true;
    assert_eq!(s.select(&p, &datagram(), now), Decision::Wait);
}

#[test]
fn parameters_are_validated() {
    let mut c = EdarConfig::default();
    assert!(c.set("epsilon", 0.1).unwrap());
    assert!(c.set("epsilon", 1.5).is_err());
    assert!(c.set("policy", 2.0).unwrap());
    assert_eq!(c.policy, EdarPolicy::Redundant);
    assert!(c.redundant_buffer);
    assert!(c.set("redundant_buffer", 0.0).unwrap());
    assert!(!c.redundant_buffer);
    assert!(c.set("redundant_buffer", 1.0).unwrap());
    assert!(c.redundant_buffer);
    assert!(c.set("redundant_buffer", 0.5).is_err());
    assert!(c.set("policy", 3.0).unwrap());
    assert_eq!(c.policy, EdarPolicy::Switching);
    let e = c.set("policy", 4.0).unwrap_err();
    assert!(e.to_string().contains("policy"));
    assert!(c.set("seed", 1.5).is_err());
    assert!(!c.set("gamma", 0.6).unwrap());
}

#[test]
fn model_version_is_visible_through_any_scheduler() {
    use crate::scheduler::{AnyScheduler, SchedulerConfig, SchedulerKind};
    assert_eq!(
        SchedulerConfig::new(SchedulerKind::Edar)
            .build()
            .model_version(),
        None
    );
    let (mut writer, reader) = weight_slot(constant_network(1.0, 0.0));
    let mut any = SchedulerConfig::Edar(EdarConfig {
        weights: Some(reader),
        ..EdarConfig::default()
    })
    .build();
    assert_eq!(any.model_version(), Some(0));
    writer.publish(constant_network(0.0, 1.0));
    writer.publish(constant_network(0.0, 1.0));
    any.select(&two_paths(), &pkt(), Timestamp::from_millis(1));
    assert_eq!(any.model_version(), Some(2));
    assert!(matches!(any, AnyScheduler::Edar(_)));
}
