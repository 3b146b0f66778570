//! OLMS unit tests: hand-checked LP choices on the paper's applications, fallback, cycles,
//! monitor resets and determinism.

use super::*;

/// A posterior concentrated on `mean` (a million trials).
fn concentrated(mean: f64) -> Posterior {
    let n = 1_000_000u32;
    Posterior::from_counts((mean * f64::from(n)).round() as u32, n)
}

/// OLMS with every path's posteriors forced to the given means.
fn forced(config: &OlmsConfig, r: &[f64], b: &[f64]) -> Olms {
    let mut s = Olms::new(config);
    for (i, (&ri, &bi)) in r.iter().zip(b).enumerate() {
        s.rtt[i] = concentrated(ri);
        s.bandwidth[i] = concentrated(bi);
    }
    s
}

fn views(k: usize) -> Vec<PathView> {
    (0..k)
        .map(|i| PathView::new(PathId(i as u8), 20_000 + 10_000 * i as u32, 1_000_000))
        .collect()
}

/// Application I (§VI-B): r = (0.2, 0.3, 0.5, 0.6), b = (0.3, 0.2, 0.6, 0.4), C_r = 0.5, L = 2.
const APP1_R: [f64; 4] = [0.2, 0.3, 0.5, 0.6];
const APP1_B: [f64; 4] = [0.3, 0.2, 0.6, 0.4];

#[test]
fn application_one_lp_on_true_means_gives_the_papers_vector() {
    let mut s = forced(&OlmsConfig::default(), &APP1_R, &APP1_B);
    let ids: Vec<PathId> = (0..4).map(PathId).collect();
    let (mut r, mut b) = ([0.0; MAX_PATHS], [0.0; MAX_PATHS]);
    let schedule = s.solve(&ids, &mut r, &mut b).unwrap();
    let expected = [1.0 / 6.0, 0.0, 1.0, 5.0 / 6.0];
    for (v, e) in schedule.weights().iter().zip(expected) {
        assert!((v - e).abs() < 0.01, "{:?}", schedule.weights());
    }
}

#[test]
fn application_one_choice_follows_v_within_the_drawn_set() {
    let p = views(4);
    let pkt = PacketMeta::bulk(1_200);
    let mut s = forced(&OlmsConfig::default(), &APP1_R, &APP1_B);
    // Path 2 (v = 1) is in (nearly) every drawn set and has the highest v: it gets the packet.
    // Its RTT mean sits exactly on C_r, so a sample a hair above 0.5 caps it at v ≈ 0.999 and it
    // misses about one set in a thousand; path 1 (v = 0) never appears.
    let mut counts = [0u32; 4];
    for _ in 0..10_000 {
        match s.select(&p, &pkt, Timestamp::ZERO) {
            Decision::Send(id) => counts[id.index()] += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(counts[2] >= 9_950 && counts[1] == 0, "{counts:?}");
    // Path 2 full: the other member of the set, path 3 with P = 5/6 or path 0 with P = 1/6;
    // path 1 (v = 0) never.
    let mut full = p.clone();
    full[2].bytes_in_flight = full[2].cwnd;
    let mut counts = [0u32; 4];
    let draws = 60_000;
    for _ in 0..draws {
        match s.select(&full, &pkt, Timestamp::ZERO) {
            Decision::Send(id) => counts[id.index()] += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(counts[1], 0, "{counts:?}");
    assert_eq!(counts[2], 0, "{counts:?}");
    let share3 = f64::from(counts[3]) / f64::from(draws);
    // 4.5 standard deviations of a binomial proportion at n = 60,000 is about 0.007.
    assert!((share3 - 5.0 / 6.0).abs() < 0.01, "{counts:?}");
    assert_eq!(
        s.counters().1,
        0,
        "no minRTT fallback while the set has room"
    );
}

#[test]
fn a_full_set_hands_the_packet_to_min_rtt_even_on_a_path_with_v_zero() {
    // Application I on the true means: v = (1/6, 0, 1, 5/6), so the drawn set is {2, 3} with
    // P = 5/6 and {0, 2} with P = 1/6. With paths 2 and 3 full, a {2, 3} set has no room and
    // the packet goes to minRTT's choice: path 1, the lowest srtt, although its v is 0. This is
    // why OLMS sends wherever a window opens, like minRTT, when every path is window-limited
    // (docs/schedulers.md, OLMS).
    let mut p = views(4);
    p[1].srtt_us = 10_000;
    p[2].bytes_in_flight = p[2].cwnd;
    p[3].bytes_in_flight = p[3].cwnd;
    let pkt = PacketMeta::bulk(1_200);
    let mut s = forced(&OlmsConfig::default(), &APP1_R, &APP1_B);
    let mut counts = [0u32; 4];
    let draws = 60_000;
    for _ in 0..draws {
        match s.select(&p, &pkt, Timestamp::ZERO) {
            Decision::Send(id) => counts[id.index()] += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(counts[2] + counts[3], 0, "{counts:?}");
    let share1 = f64::from(counts[1]) / f64::from(draws);
    // 4.5 standard deviations of a binomial proportion at n = 60,000 is about 0.007.
    assert!((share1 - 5.0 / 6.0).abs() < 0.01, "{counts:?}");
    assert_eq!(
        s.counters().1,
        u64::from(counts[1]),
        "every path-1 send is a fallback"
    );
}

#[test]
fn application_two_stays_on_the_two_cheapest_paths() {
    // §VI-C: b = (0.3, 0.1, 0.4, 0.6), r = (0.3, 0.3, 0.4, 0.1), C_b = 0.4 → v* = (1, 1, 0, 0).
    let config = OlmsConfig {
        application: Application::Bandwidth,
        threshold: 0.4,
        ..OlmsConfig::default()
    };
    let mut s = forced(&config, &[0.3, 0.3, 0.4, 0.1], &[0.3, 0.1, 0.4, 0.6]);
    let p = views(4);
    let pkt = PacketMeta::bulk(1_200);
    let mut counts = [0u32; 4];
    for _ in 0..10_000 {
        match s.select(&p, &pkt, Timestamp::ZERO) {
            Decision::Send(id) => counts[id.index()] += 1,
            other => panic!("{other:?}"),
        }
    }
    // v ties at 1: the lower RTT sample wins, and the two RTT means are equal. C_b = 0.4 is
    // exactly b_1 + b_2, so about half of the samples make the LP infeasible, and those
    // decisions fall back to minRTT (path 0, the lowest srtt in the views).
    assert_eq!(counts[2] + counts[3], 0, "{counts:?}");
    assert!(counts[0] > 6_000 && counts[1] > 1_500, "{counts:?}");
    let (solves, fallbacks) = s.counters();
    assert_eq!(solves, 10_000);
    assert!((3_000..7_000).contains(&fallbacks), "{fallbacks}");
}

#[test]
fn infeasible_lp_falls_back_to_min_rtt() {
    // Every RTT above C_r = 0.1 and Σ min(1, C_r / r_i) = 0.25 + 0.5 + 0.33 < L = 2.
    let config = OlmsConfig {
        threshold: 0.1,
        ..OlmsConfig::default()
    };
    let mut s = forced(&config, &[0.4, 0.2, 0.3], &[0.9, 0.1, 0.5]);
    let mut p = views(3);
    p[1].srtt_us = 90_000;
    let pkt = PacketMeta::bulk(1_200);
    assert_eq!(
        s.select(&p, &pkt, Timestamp::ZERO),
        Decision::Send(PathId(0))
    );
    p[0].bytes_in_flight = p[0].cwnd;
    assert_eq!(
        s.select(&p, &pkt, Timestamp::ZERO),
        Decision::Send(PathId(2))
    );
    assert_eq!(s.counters(), (2, 2));
    for v in &mut p {
        v.bytes_in_flight = v.cwnd;
    }
    assert_eq!(s.select(&p, &pkt, Timestamp::ZERO), Decision::Wait);
}

#[test]
fn decision_cycle_reuses_one_solution() {
    let config = OlmsConfig {
        decision_cycle: 5,
        ..OlmsConfig::default()
    };
    let mut s = forced(&config, &APP1_R, &APP1_B);
    let p = views(4);
    for _ in 0..20 {
        s.select(&p, &PacketMeta::bulk(1_200), Timestamp::ZERO);
    }
    assert_eq!(s.counters().0, 4);
    let mut every = forced(&OlmsConfig::default(), &APP1_R, &APP1_B);
    for _ in 0..20 {
        every.select(&p, &PacketMeta::bulk(1_200), Timestamp::ZERO);
    }
    assert_eq!(every.counters().0, 20);
}

#[test]
fn acks_update_posteriors_and_a_step_resets_them() {
    let mut s = Olms::new(&OlmsConfig::default());
    let mut p = views(2);
    p[0].srtt_us = 20_000;
    p[0].cwnd = 250_000; // 100 Mbit/s at 20 ms: bandwidth 1.0
    let ack = AckInfo {
        bytes: 1_200,
        rtt_us: 20_000,
        owd_us: 10_000,
    };
    s.select(&p, &PacketMeta::bulk(1_200), Timestamp::ZERO);
    for _ in 0..500 {
        s.on_ack(PathId(0), &ack, Timestamp::ZERO);
    }
    let r = s.rtt_posterior(PathId(0)).unwrap();
    assert_eq!(r.trials(), 500);
    assert!((r.mean() - 0.2).abs() < 0.05, "{}", r.mean());
    assert!(s.bandwidth_posterior(PathId(0)).unwrap().mean() > 0.95);
    assert_eq!(s.rtt_posterior(PathId(1)).unwrap().trials(), 0);
    // The RTT steps to 80 ms (0.8): after h + 1 = 4 deviating measurements the RTT statistics
    // restart (bandwidth drops to 0.25 as well, so that posterior restarts too).
    p[0].srtt_us = 80_000;
    s.select(&p, &PacketMeta::bulk(1_200), Timestamp::ZERO);
    for _ in 0..4 {
        s.on_ack(PathId(0), &ack, Timestamp::ZERO);
    }
    assert_eq!(s.rtt_posterior(PathId(0)).unwrap().trials(), 1);
    assert_eq!(s.bandwidth_posterior(PathId(0)).unwrap().trials(), 1);
}

#[test]
fn same_seed_same_decisions() {
    let p = views(4);
    let run = |seed: u64| {
        let mut s = Olms::new(&OlmsConfig {
            seed,
            ..OlmsConfig::default()
        });
        (0..200)
            .map(|_| s.select(&p, &PacketMeta::bulk(1_200), Timestamp::ZERO))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(9), run(9));
}

#[test]
fn parameters_are_validated() {
    let mut c = OlmsConfig::default();
    assert_eq!(c.set("application", 1.0), Ok(true));
    assert_eq!(c.application, Application::Bandwidth);
    assert!(c.set("application", 2.0).is_err());
    assert!(c.set("paths_per_decision", 0.0).is_err());
    assert!(c.set("paths_per_decision", 1.5).is_err());
    assert!(c.set("decision_cycle", f64::NAN).is_err());
    assert!(c.set("threshold", -0.1).is_err());
    assert_eq!(c.set("monitor_h", 5.0), Ok(true));
    assert_eq!(c.monitor.h, 5);
    assert_eq!(c.set("nonsense", 1.0), Ok(false));
}
