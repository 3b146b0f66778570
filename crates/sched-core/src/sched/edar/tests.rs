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
    assert_eq!(s.select(&p, &pkt(), now), Decision::Wait);
    p[0].potentially_failed = true;
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
    assert_eq!(s.select(&p, &datagram(), now), Decision::Wait);
    p[0].potentially_failed = true;
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

/// A state of `k` paths with values in ±`scale` (the normalised features reach 10).
fn random_state(rng: &mut SplitMix64, k: u8, scale: f64) -> EdarState {
    let mut s = EdarState::EMPTY;
    s.path_count = k;
    for v in s.connection.iter_mut() {
        *v = ((rng.unit() * 2.0 - 1.0) * scale) as f32;
    }
    for p in s.paths.iter_mut() {
        for v in p.iter_mut() {
            *v = ((rng.unit() * 2.0 - 1.0) * scale) as f32;
        }
    }
    s
}

/// `state` one interval later: every used path's history shifted by one step with a random
/// newest sample, new connection features.
fn next_state(rng: &mut SplitMix64, state: &EdarState, scale: f64) -> EdarState {
    let mut next = *state;
    for v in next.connection.iter_mut() {
        *v = ((rng.unit() * 2.0 - 1.0) * scale) as f32;
    }
    for path in next.paths.iter_mut() {
        for series in path.chunks_exact_mut(HISTORY) {
            series.rotate_left(1);
            series[HISTORY - 1] = ((rng.unit() * 2.0 - 1.0) * scale) as f32;
        }
    }
    next
}

fn bits(q: [f32; 2]) -> [u32; 2] {
    q.map(f32::to_bits)
}

#[test]
fn prefix_then_rest_equals_the_full_pass_bit_for_bit_in_every_kernel() {
    use packed::{FINISH_FROM, Kernel, PREFIX_UNITS, Prefix, PrefixUse};
    let nets = [EdarNetwork::initial(11), EdarNetwork::initial(12)];
    let mut rng = SplitMix64(0x5EED_0007);
    let mut prefix = Prefix::new();
    let (mut ready, mut finished, mut missed) = (0, 0, 0);
    let kernels = Kernel::available();
    for (index, &kernel) in kernels.iter().enumerate() {
        // Another build (where the CPU runs more than one): a prefix it did not make is not
        // used (the builds' activations differ in the last bits).
        let other = kernels[(index + 1) % kernels.len()];
        for k in 1..=EDAR_MAX_PATHS as u8 {
            for trial in 0..24 {
                let scale = [0.5, 2.0, 10.0][trial % 3];
                let state = random_state(&mut rng, k, scale);
                let mut next = next_state(&mut rng, &state, scale);
                let net = &nets[0];
                net.prefix_begin(&state, 0, kernel, &mut prefix);
                // Any number of units done ahead, the rest at the decision.
                let units = (rng.next_u64() % (u64::from(PREFIX_UNITS) + 1)) as u8;
                for _ in 0..units {
                    assert!(net.prefix_advance(&mut prefix));
                }
                // One more (true while any was left).
                assert_eq!(net.prefix_advance(&mut prefix), units < PREFIX_UNITS);
                // A quarter of the decisions do not match the prefix: an older sample changed,
                // a path more or fewer, or other weights (version 1).
                let mut finish_kernel = kernel;
                let (net, version, expect) = match trial % 8 {
                    7 if other != kernel => {
                        finish_kernel = other;
                        (net, 0, PrefixUse::Missed)
                    }
                    1 => {
                        let p = (rng.next_u64() % u64::from(k)) as usize;
                        let f = (rng.next_u64() % FEATURES as u64) as usize;
                        let t = (rng.next_u64() % (HISTORY as u64 - 1)) as usize;
                        next.paths[p][f * HISTORY + t] += 0.25;
                        (net, 0, PrefixUse::Missed)
                    }
                    3 if k < EDAR_MAX_PATHS as u8 && trial % 16 == 3 => {
                        // A path joins: no history before its newest sample (steps 0-4 zero,
                        // as the prefix holds past its paths), only the path count differs.
                        let path = &mut next.paths[usize::from(k)];
                        for (i, v) in path.iter_mut().enumerate() {
                            if i % HISTORY != HISTORY - 1 {
                                *v = 0.0;
                            }
                        }
                        next.path_count = k + 1;
                        (net, 0, PrefixUse::Missed)
                    }
                    3 => {
                        next.path_count = if k == 1 { 2 } else { k - 1 };
                        (net, 0, PrefixUse::Missed)
                    }
                    5 => (&nets[1], 1, PrefixUse::Missed),
                    _ if units + 1 >= PREFIX_UNITS => (net, 0, PrefixUse::Ready),
                    // Too little done: the full pass is cheaper.
                    _ if units + 1 < FINISH_FROM => (net, 0, PrefixUse::Missed),
                    _ => (net, 0, PrefixUse::Finished),
                };
                let kernel = finish_kernel;
                let full = net.q_values_with_kernel(EdarKernel(kernel), &next);
                let (q, used) = net.q_values_prefixed(&next, version, kernel, &mut prefix);
                assert_eq!(
                    bits(q),
                    bits(full),
                    "{kernel:?} K={k} trial {trial}: {q:?} {full:?}"
                );
                assert_eq!(used, expect, "{kernel:?} K={k} trial {trial}");
                // A prefix serves one decision.
                let (_, again) = net.q_values_prefixed(&next, version, kernel, &mut prefix);
                assert_eq!(again, PrefixUse::Missed);
                match used {
                    PrefixUse::Ready => ready += 1,
                    PrefixUse::Finished => finished += 1,
                    PrefixUse::Missed => missed += 1,
                }
            }
        }
    }
    assert!(
        ready > 0 && finished > 0 && missed > 0,
        "{ready} {finished} {missed}"
    );
}

/// Two identical EdAR schedulers, the pass computed ahead on in one and off in the other,
/// through one long random run: path changes (paths leave, come back, fail), a weights swap
/// mid-way, intervals with many, one or no packets, ACKs and reports. Every decision and every
/// Q-value must be the same, bit for bit.
#[test]
fn prefix_on_and_off_decide_identically_through_a_random_run() {
    let (mut writer, reader) = weight_slot(EdarNetwork::initial(21));
    let config = EdarConfig {
        weights: Some(reader),
        ..EdarConfig::default()
    };
    let mut on = Edar::new(&config);
    let mut off = Edar::new(&config);
    off.set_prefix_enabled(false);
    let mut rng = SplitMix64(0xB0A7_0007);
    let mut now = Timestamp::from_millis(1);
    let mut present = [true, true, false, false];
    let mut failed = [false; 4];
    let mut decisions_compared = 0;
    for step in 0..6_000 {
        if step == 3_000 {
            writer.publish(EdarNetwork::initial(22));
        }
        // Now and then a path leaves, comes back or fails.
        if rng.unit() < 0.004 {
            let i = (rng.next_u64() % 4) as usize;
            present[i] = !present[i];
            if !present.iter().any(|&p| p) {
                present[0] = true;
            }
        }
        if rng.unit() < 0.002 {
            let i = (rng.next_u64() % 4) as usize;
            failed[i] = !failed[i];
        }
        let views: Vec<PathView> = (0..4u8)
            .filter(|&i| present[usize::from(i)])
            .map(|i| {
                let srtt = 20_000 + 10_000 * u32::from(i) + (rng.next_u64() % 5_000) as u32;
                let mut v = PathView::new(PathId(i), srtt, 20_000 + rng.next_u64() % 200_000);
                v.bytes_in_flight = rng.next_u64() % 150_000;
                v.rttvar_us = (rng.next_u64() % 10_000) as u32;
                v.loss_rate = (rng.unit() * 0.05) as f32;
                if failed[usize::from(i)] {
                    v.state = PathState::Failed;
                }
                v
            })
            .collect();
        // Mostly short gaps (many packets per ~20 ms interval), sometimes a long one (an
        // interval with one packet or none).
        let gap_us = match rng.next_u64() % 100 {
            0..=79 => rng.next_u64() % 3_000,
            80..=94 => rng.next_u64() % 20_000,
            _ => 20_000 + rng.next_u64() % 80_000,
        };
        now += Duration::from_micros(gap_us);
        let packet = if rng.unit() < 0.1 {
            PacketMeta {
                class: TrafficClass::Control,
                ..pkt()
            }
        } else {
            pkt()
        };
        let before = on.decisions();
        let a = on.select(&views, &packet, now);
        let b = off.select(&views, &packet, now);
        assert_eq!(a, b, "step {step}");
        assert_eq!(on.mode(), off.mode(), "step {step}");
        assert_eq!(on.decisions(), off.decisions(), "step {step}");
        if on.decisions() != before {
            let (qa, qb) = (on.last_q, off.last_q);
            assert_eq!(qa.map(bits), qb.map(bits), "step {step}: {qa:?} {qb:?}");
            decisions_compared += 1;
        }
        if rng.unit() < 0.5 && !views.is_empty() {
            let i = (rng.next_u64() % views.len() as u64) as usize;
            let ack = AckInfo {
                bytes: rng.next_u64() % 3_000,
                rtt_us: 30_000,
                owd_us: 15_000,
            };
            on.on_ack(views[i].id, &ack, now);
            off.on_ack(views[i].id, &ack, now);
        }
        if step % 50 == 0 {
            let report = ReceiverReport {
                interval_us: 100_000,
                delivered_bytes: rng.next_u64() % 200_000,
                ..ReceiverReport::default()
            };
            on.on_report(&report, now);
            off.on_report(&report, now);
        }
    }
    let stats = on.prefix_stats();
    println!("{decisions_compared} decisions, {stats:?}");
    assert_eq!(off.prefix_stats().ready + off.prefix_stats().finished, 0);
    assert!(stats.ready > 0, "{stats:?}");
    assert!(stats.finished > 0, "{stats:?}");
    assert!(stats.missed > 0, "{stats:?}");
    // The decisions that used their prefix took its inputs by lineage (a prefix is begun at
    // every decision, so one that serves always continues the one before).
    assert_eq!(stats.continued, stats.ready + stats.finished, "{stats:?}");
    assert!(decisions_compared > 200, "{decisions_compared}");
}

/// Throw-away timing of the scheduler's boundary decision with the prefix ready, call by call
/// with `lfence; rdtsc` (TSC ticks; `cargo test --release -p braid-sched-core --lib
/// edar::tests::boundary_cycles -- --ignored --nocapture`): the decision, the selects that run
/// a unit, and the full-pass decision (no packet in the interval), at K = 2 and 4.
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore]
fn boundary_cycles() {
    fn ticks() -> u64 {
        // SAFETY: `lfence` and `rdtsc` exist on every x86_64 CPU.
        unsafe {
            std::arch::x86_64::_mm_lfence();
            let t = std::arch::x86_64::_rdtsc();
            std::arch::x86_64::_mm_lfence();
            t
        }
    }
    fn median(mut v: Vec<u64>) -> u64 {
        v.sort_unstable();
        v[v.len() / 2]
    }
    let packet = pkt();
    for k in [2u8, 4] {
        let views: Vec<PathView> = (0..k)
            .map(|i| {
                let mut p = PathView::new(PathId(i), 20_000 + 10_000 * u32::from(i), 200_000);
                p.bytes_in_flight = 50_000;
                p.loss_rate = 0.001 * f32::from(i);
                p
            })
            .collect();
        for packets in [usize::from(packed::PREFIX_UNITS), 0] {
            let (_writer, reader) = weight_slot(EdarNetwork::initial(1));
            let mut s = Edar::new(&EdarConfig {
                weights: Some(reader),
                ..EdarConfig::default()
            });
            let mut now = Timestamp::from_millis(1);
            let (mut boundary, mut unit, mut empty) = (Vec::new(), Vec::new(), Vec::new());
            let mut kernel = Vec::new();
            for _ in 0..20_000 {
                for _ in 0..packets {
                    now += Duration::from_micros(100);
                    let t0 = ticks();
                    std::hint::black_box(s.select(&views, &packet, now));
                    unit.push(ticks() - t0);
                }
                now += Duration::from_millis(60);
                let t0 = ticks();
                std::hint::black_box(s.select(&views, &packet, now));
                boundary.push(ticks() - t0);
                let t0 = ticks();
                empty.push(ticks() - t0);
                let state = s.observe_state(&views);
                if let Some(reader) = s.config.weights.as_ref() {
                    let t0 = ticks();
                    std::hint::black_box(reader.weights().packed_q(&state));
                    kernel.push(ticks() - t0);
                }
            }
            println!("  kernel alone in this loop: {}", median(kernel.clone()));
            let stats = s.prefix_stats();
            let clock = median(empty);
            println!(
                "K={k} {packets} packets/interval: decision median {} ticks, unit selects median {} \
                 (less {clock} for the clock), {stats:?}",
                median(boundary).saturating_sub(clock),
                if unit.is_empty() {
                    0
                } else {
                    median(unit).saturating_sub(clock)
                },
            );
        }
    }
}
