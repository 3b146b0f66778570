//! Unit tests of the EdAR scheduler: action mapping, interval timing, transitions and rewards,
//! fixed policies, hot-swapped weights.

use super::*;
use crate::path::PathState;
use crate::slot::{experience_queue, weight_slot};

fn two_paths() -> [PathView; 2] {
    [
        PathView::new(PathId(0), 50_000, 100_000),
        PathView::new(PathId(1), 100_000, 100_000),
    ]
}

fn pkt() -> PacketMeta {
    PacketMeta::bulk(1_200)
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

#[test]
fn first_interval_is_redundant_then_normal_without_weights() {
    let mut s = Edar::new(&EdarConfig::default());
    let p = two_paths();
    let t0 = Timestamp::from_millis(1);
    assert_eq!(
        s.select(&p, &pkt(), t0),
        Decision::Duplicate([PathId(0), PathId(1)].into_iter().collect())
    );
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
    assert_eq!(s.decisions(), (1, 0));
}

#[test]
fn weights_choose_the_mode_and_hot_swap_takes_effect() {
    let (mut writer, reader) = weight_slot(constant_network(1.0, 0.0));
    let config = EdarConfig {
        weights: Some(reader),
        ..EdarConfig::default()
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
    assert!(s.select(&p, &pkt(), now).paths().len() == 2);
    assert_eq!(s.weights_version(), Some(1));
    assert_eq!(s.mode(), EdarAction::Redundant);
}

#[test]
fn transitions_carry_state_action_and_reward() {
    let (sender, mut receiver) = experience_queue::<EdarTransition>(16).unwrap();
    let config = EdarConfig {
        policy: EdarPolicy::Redundant,
        experience: Some(sender),
        ..EdarConfig::default()
    };
    let mut s = Edar::new(&config);
    let p = two_paths();
    let mut now = Timestamp::from_millis(1);
    s.select(&p, &pkt(), now);
    // Interval 1 closes with no report: no transition (nothing to reward).
    now += Duration::from_millis(50);
    s.select(&p, &pkt(), now);
    assert!(receiver.recv().is_none());
    // Interval 2: 10 Mbit/s goodput, no waste, no disorder → r = 1.0.
    s.on_ack(
        PathId(0),
        &AckInfo {
            bytes: 62_500,
            rtt_us: 50_000,
            owd_us: 25_000,
        },
        now,
    );
    s.on_report(
        &ReceiverReport {
            interval_us: 50_000,
            delivered_bytes: 62_500,
            ..ReceiverReport::default()
        },
        now,
    );
    now += Duration::from_millis(50);
    s.select(&p, &pkt(), now);
    let t = receiver.recv().unwrap();
    assert_eq!(t.action, EdarAction::Redundant);
    assert!((t.reward - 1.0).abs() < 1e-6, "{}", t.reward);
    assert_eq!(t.state.path_count, 2);
    assert_eq!(t.next_state.connection[0], 1.0);
    // Path 0's newest throughput: 62 500 bytes in 50 ms = 10 Mbit/s = 1.0.
    let newest = HISTORY - 1;
    assert!((t.next_state.value(0, 2, newest) - 1.0).abs() < 1e-6);
    assert!(
        (t.next_state.value(0, 0, newest) - 0.5).abs() < 1e-6,
        "rtt 50 ms"
    );
    assert_eq!(t.next_state.value(1, 2, newest), 0.0);
    assert!(!t.terminal);
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

#[test]
fn redundant_mode_honours_tiers_and_failures() {
    let mut s = Edar::new(&EdarConfig {
        policy: EdarPolicy::Redundant,
        ..EdarConfig::default()
    });
    let mut p = [
        PathView::new(PathId(0), 50_000, 100_000),
        PathView::new(PathId(1), 100_000, 100_000),
        PathView::new(PathId(2), 20_000, 100_000),
    ];
    p[2].state = PathState::Backup;
    let now = Timestamp::from_millis(1);
    assert_eq!(
        s.select(&p, &pkt(), now),
        Decision::Duplicate([PathId(0), PathId(1)].into_iter().collect())
    );
    p[1].state = PathState::Failed;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Send(PathId(0)));
    p[0].bytes_in_flight = 100_000;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Send(PathId(2)));
    p[2].rate_limited = true;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Wait);
}

#[test]
fn parameters_are_validated() {
    let mut c = EdarConfig::default();
    assert!(c.set("epsilon", 0.1).unwrap());
    assert!(c.set("epsilon", 1.5).is_err());
    assert!(c.set("policy", 2.0).unwrap());
    assert_eq!(c.policy, EdarPolicy::Redundant);
    let e = c.set("policy", 3.0).unwrap_err();
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
