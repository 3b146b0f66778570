//! The path model against its specification: rate, queue, loss, outages, step changes,
//! traces and jitter, all in virtual time with fixed seeds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use braid_sched_core::Timestamp;
use braid_testbed::link::{DropReason, JitterDistribution, Link, LinkChange, LinkConfig, Verdict};
use braid_testbed::trace::Trace;

const MTU: u32 = 1500;

fn at(micros: u64) -> Timestamp {
    Timestamp::from_micros(micros)
}

/// Offers packets as fast as the queue takes them (refilling every `step` µs) until `until`;
/// returns the arrival times (µs) of delivered packets.
fn saturate(link: &mut Link, until: u64, step: u64) -> Vec<u64> {
    let mut arrivals = Vec::new();
    let mut now = 0;
    while now < until {
        loop {
            match link.enqueue(at(now), MTU) {
                Verdict::Deliver { at } => arrivals.push(at.as_micros()),
                Verdict::Dropped(DropReason::QueueFull) => break,
                Verdict::Dropped(_) => {}
            }
        }
        now += step;
    }
    arrivals
}

#[test]
fn a_20_mbit_link_carries_20_mbit() {
    let mut config = LinkConfig::with_rate(20.0);
    config.delay_ms = 10.0;
    config.queue_packets = 50;
    let mut link = Link::new(&config, 1).unwrap();
    let arrivals = saturate(&mut link, 12_000_000, 1_000);
    // Count what arrived in [1 s, 11 s).
    let in_window = arrivals
        .iter()
        .filter(|&&a| (1_000_000..11_000_000).contains(&a))
        .count();
    let mbps = in_window as f64 * f64::from(MTU) * 8.0 / 10.0 / 1e6;
    println!("20 Mbit/s link carried {mbps:.4} Mbit/s");
    assert!((mbps - 20.0).abs() <= 0.2, "carried {mbps} Mbit/s");
    // Back-to-back packets are 600 µs apart; the first arrives after serialisation + delay.
    assert_eq!(arrivals[0], 600 + 10_000);
    assert_eq!(arrivals[1] - arrivals[0], 600);
}

#[test]
fn a_fast_link_keeps_its_rate_without_rounding() {
    let mut config = LinkConfig::with_rate(1100.0);
    config.queue_packets = 1000;
    let mut link = Link::new(&config, 1).unwrap();
    let arrivals = saturate(&mut link, 2_000_000, 500);
    let in_window = arrivals
        .iter()
        .filter(|&&a| (500_000..1_500_000).contains(&a))
        .count();
    let mbps = in_window as f64 * f64::from(MTU) * 8.0 / 1e6;
    println!("1100 Mbit/s link carried {mbps:.2} Mbit/s");
    assert!((mbps - 1100.0).abs() <= 11.0, "carried {mbps} Mbit/s");
}

#[test]
fn a_full_queue_drops_and_drains() {
    let mut config = LinkConfig::with_rate(12.0); // 1 ms per 1500-byte packet
    config.queue_packets = 10;
    let mut link = Link::new(&config, 1).unwrap();
    let verdicts: Vec<Verdict> = (0..50).map(|_| link.enqueue(at(0), MTU)).collect();
    let delivered = verdicts
        .iter()
        .filter(|v| matches!(v, Verdict::Deliver { .. }))
        .count();
    assert_eq!(delivered, 10);
    assert!(
        verdicts[10..]
            .iter()
            .all(|v| *v == Verdict::Dropped(DropReason::QueueFull))
    );
    assert_eq!(link.queued_packets(at(0)), 10);
    assert_eq!(link.queued_packets(at(3_000)), 7);
    // Three packets have left by 3 ms, so exactly three more fit.
    let more: Vec<Verdict> = (0..4).map(|_| link.enqueue(at(3_000), MTU)).collect();
    assert!(matches!(more[2], Verdict::Deliver { at } if at == Timestamp::from_millis(13)));
    assert_eq!(more[3], Verdict::Dropped(DropReason::QueueFull));
    assert_eq!(link.stats().queue_full, 41);
}

#[test]
fn random_loss_matches_its_rate_for_a_fixed_seed() {
    let mut config = LinkConfig::with_rate(1000.0);
    config.loss = 0.05;
    config.queue_packets = 1_000_000;
    let n = 200_000u64;
    let run = |seed| {
        let mut link = Link::new(&config, seed).unwrap();
        let lost: Vec<bool> = (0..n)
            .map(|i| link.enqueue(at(i * 20), MTU) == Verdict::Dropped(DropReason::Loss))
            .collect();
        lost
    };
    let a = run(7);
    assert_eq!(a, run(7), "same seed, same losses");
    assert_ne!(a, run(8), "another seed, other losses");
    let rate = a.iter().filter(|&&l| l).count() as f64 / n as f64;
    let sigma = (0.05 * 0.95 / n as f64).sqrt();
    println!(
        "loss 0.05 over {n} packets: observed {rate:.5} (4 sigma = {:.5})",
        4.0 * sigma
    );
    assert!((rate - 0.05).abs() < 4.0 * sigma, "loss rate {rate}");
}

#[test]
fn outages_drop_everything_inside_and_drain_the_queue() {
    let mut config = LinkConfig::with_rate(12.0); // 1 ms per packet
    config.delay_ms = 5.0;
    config.outages = vec![(1.0, 2.0)];
    let mut link = Link::new(&config, 1).unwrap();
    // Five packets at 997 ms: the first three finish serialising by 1 s, the rest would not.
    let before: Vec<Verdict> = (0..5).map(|_| link.enqueue(at(997_000), MTU)).collect();
    assert!(matches!(before[2], Verdict::Deliver { at } if at.as_micros() == 1_005_000));
    assert_eq!(before[3], Verdict::Dropped(DropReason::Outage));
    assert_eq!(before[4], Verdict::Dropped(DropReason::Outage));
    for t in (1_000_000..2_000_000).step_by(997) {
        assert_eq!(
            link.enqueue(at(t), MTU),
            Verdict::Dropped(DropReason::Outage)
        );
        assert!(link.is_down(at(t)));
    }
    assert!(
        matches!(link.enqueue(at(2_000_000), MTU), Verdict::Deliver { at } if at.as_micros() == 2_006_000)
    );
}

#[test]
fn periodic_outages_repeat() {
    let mut config = LinkConfig::with_rate(100.0);
    config.outages = vec![(20.0, 40.0)];
    config.outages_period_s = Some(40.0);
    let link = Link::new(&config, 1).unwrap();
    for (s, down) in [
        (10.0, false),
        (25.0, true),
        (45.0, false),
        (65.0, true),
        (99.0, false),
        (119.9, true),
    ] {
        assert_eq!(link.is_down(Timestamp::from_secs_f64(s)), down, "at {s} s");
    }
}

#[test]
fn step_changes_take_effect_at_their_time() {
    let mut config = LinkConfig::with_rate(12.0);
    config.delay_ms = 10.0;
    config.changes = vec![
        LinkChange {
            at_s: 1.0,
            rate_mbps: Some(1.2),
            ..Default::default()
        },
        LinkChange {
            at_s: 2.0,
            delay_ms: Some(50.0),
            ..Default::default()
        },
        LinkChange {
            at_s: 3.0,
            loss: Some(1.0),
            ..Default::default()
        },
    ];
    let mut link = Link::new(&config, 1).unwrap();
    // Before 1 s: 1 ms per packet.
    let a = link.enqueue(at(500_000), MTU);
    assert_eq!(
        a,
        Verdict::Deliver {
            at: at(500_000 + 1_000 + 10_000)
        }
    );
    // A packet starting 0.5 ms before the change sends half its bits at 12 Mbit/s and the rest
    // at 1.2 Mbit/s: 0.5 ms + 5 ms.
    let b = link.enqueue(at(999_500), MTU);
    assert_eq!(
        b,
        Verdict::Deliver {
            at: at(1_005_000 + 10_000)
        }
    );
    // After 1 s: 10 ms per packet.
    let c = link.enqueue(at(1_500_000), MTU);
    assert_eq!(
        c,
        Verdict::Deliver {
            at: at(1_510_000 + 10_000)
        }
    );
    // After 2 s the delay is 50 ms (taken when the packet leaves the queue).
    let d = link.enqueue(at(2_500_000), MTU);
    assert_eq!(
        d,
        Verdict::Deliver {
            at: at(2_510_000 + 50_000)
        }
    );
    // After 3 s everything is lost.
    assert_eq!(
        link.enqueue(at(3_000_000), MTU),
        Verdict::Dropped(DropReason::Loss)
    );
}

#[test]
fn periodic_changes_repeat_every_period() {
    // OLMS dynamic bandwidth, path 1: 1 Mbit/s for 5 s, 30 Mbit/s for 5 s, repeating.
    let mut config = LinkConfig::with_rate(30.0);
    config.queue_packets = 100_000;
    config.changes = vec![
        LinkChange {
            at_s: 0.0,
            rate_mbps: Some(1.0),
            ..Default::default()
        },
        LinkChange {
            at_s: 5.0,
            rate_mbps: Some(30.0),
            ..Default::default()
        },
    ];
    config.changes_period_s = Some(10.0);
    let mut link = Link::new(&config, 1).unwrap();
    let arrivals = saturate(&mut link, 40_000_000, 1_000);
    let mbps = |from: u64, to: u64| {
        let n = arrivals
            .iter()
            .filter(|&&a| (from..to).contains(&a))
            .count();
        n as f64 * 12_000.0 / (to - from) as f64
    };
    for k in 0..4u64 {
        let base = k * 10_000_000;
        let slow = mbps(base + 500_000, base + 4_500_000);
        let fast = mbps(base + 5_500_000, base + 9_500_000);
        assert!((slow - 1.0).abs() < 0.02, "loop {k}: slow phase {slow}");
        assert!((fast - 30.0).abs() < 0.3, "loop {k}: fast phase {fast}");
    }
}

#[test]
fn trace_delivery_follows_the_opportunities() {
    let trace = Trace::parse("0\n0\n5\n10\n", Path::new("mini.down")).unwrap();
    let mut config = LinkConfig::with_trace(Arc::new(trace));
    config.delay_ms = 1.0;
    let mut link = Link::new(&config, 1).unwrap();
    let arrivals: Vec<u64> = (0..7)
        .map(|_| match link.enqueue(at(0), MTU) {
            Verdict::Deliver { at } => at.as_micros(),
            other => panic!("{other:?}"),
        })
        .collect();
    // Loop k offers 10k, 10k, 10k + 5 and 10k + 10 ms (mahimahi's looping).
    assert_eq!(
        arrivals,
        [1_000, 1_000, 6_000, 11_000, 11_000, 11_000, 16_000]
    );
    // Small packets share an opportunity's 1500 bytes; a larger one spans two.
    let trace = Trace::parse("0\n1\n2\n3\n4\n", Path::new("mini.down")).unwrap();
    let mut link = Link::new(&LinkConfig::with_trace(Arc::new(trace)), 1).unwrap();
    let sends = [500, 1000, 1000, 2000, 100];
    let got: Vec<Verdict> = sends.iter().map(|&len| link.enqueue(at(0), len)).collect();
    let ms = |m| Verdict::Deliver {
        at: Timestamp::from_millis(m),
    };
    assert_eq!(got, [ms(0), ms(0), ms(1), ms(2), ms(3)]);
    // Opportunities nobody waited for are lost: a packet at 3.5 ms waits for 4 ms.
    assert_eq!(link.enqueue(at(3_500), MTU), ms(4));
}

#[test]
fn saturated_trace_links_deliver_exactly_the_trace() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/traces");
    for name in ["mahimahi-Verizon-LTE-short.down", "nyu-mets-bus57.csv"] {
        let trace = Arc::new(Trace::load(&dir.join(name)).unwrap());
        let period = trace.period_micros();
        let per_loop = trace.opportunities_per_period();
        let mut config = LinkConfig::with_trace(Arc::clone(&trace));
        config.queue_packets = 10_000;
        let mut link = Link::new(&config, 1).unwrap();
        let arrivals = saturate(&mut link, 2 * period, 1_000);
        // Any window of one period holds exactly one loop's opportunities.
        let window = period / 2..period / 2 + period;
        let in_loop = arrivals.iter().filter(|&&a| window.contains(&a)).count();
        assert_eq!(in_loop, per_loop, "{name}");
    }
}

#[test]
fn jitter_does_not_reorder_unless_asked() {
    let mut config = LinkConfig::with_rate(100.0);
    config.delay_ms = 20.0;
    config.jitter_ms = 5.0;
    config.queue_packets = 1_000_000;
    let arrivals = |config: &LinkConfig| {
        let mut link = Link::new(config, 3).unwrap();
        (0..20_000u64)
            .map(|i| match link.enqueue(at(i * 200), MTU) {
                Verdict::Deliver { at } => at.as_micros(),
                other => panic!("{other:?}"),
            })
            .collect::<Vec<u64>>()
    };
    let fifo = arrivals(&config);
    assert!(
        fifo.windows(2).all(|w| w[0] <= w[1]),
        "no reordering by default"
    );
    config.jitter_reorders = true;
    let free = arrivals(&config);
    assert!(
        free.windows(2).filter(|w| w[0] > w[1]).count() > 1_000,
        "jitter reorders"
    );
    // Independent normal draws: mean delay 20 ms + 120 µs serialisation, sd 5 ms.
    let delays: Vec<f64> = free
        .iter()
        .enumerate()
        .map(|(i, &a)| (a - i as u64 * 200) as f64)
        .collect();
    let mean = delays.iter().sum::<f64>() / delays.len() as f64;
    let sd = (delays.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / delays.len() as f64).sqrt();
    assert!((mean - 20_120.0).abs() < 100.0, "mean {mean}");
    assert!((sd - 5_000.0).abs() < 150.0, "sd {sd}");
    config.jitter_distribution = JitterDistribution::Uniform;
    let uniform = arrivals(&config);
    let extremes = uniform.iter().enumerate().map(|(i, &a)| a - i as u64 * 200);
    assert!(
        extremes.clone().all(|d| (15_119..=25_121).contains(&d)),
        "uniform stays in +-5 ms"
    );
}

#[test]
fn bad_link_configs_are_refused_naming_the_field() {
    let mut config = LinkConfig::with_rate(0.0);
    assert_eq!(Link::new(&config, 1).unwrap_err().field, "rate_mbps");
    config = LinkConfig::with_rate(1.0);
    config.queue_packets = 0;
    assert_eq!(Link::new(&config, 1).unwrap_err().field, "queue_packets");
    config.queue_packets = u32::MAX;
    assert_eq!(Link::new(&config, 1).unwrap_err().field, "queue_packets");
    config = LinkConfig::with_rate(1.0);
    config.outages = vec![(2.0, 1.0)];
    assert_eq!(Link::new(&config, 1).unwrap_err().field, "outages");
    config = LinkConfig::with_rate(1.0);
    config.loss = f64::NAN;
    assert_eq!(Link::new(&config, 1).unwrap_err().field, "loss");
}

#[test]
fn absurd_but_valid_inputs_do_not_panic() {
    // A crawling link and the end of time: saturating arithmetic, no overflow.
    let mut link = Link::new(&LinkConfig::with_rate(1e-12), 1).unwrap();
    for _ in 0..3 {
        let _ = link.enqueue(at(u64::MAX / 2), u32::MAX);
    }
    let _ = link.enqueue(Timestamp::MAX, 1);
    let trace = Trace::parse("0\n1\n", Path::new("t.down")).unwrap();
    let mut link = Link::new(&LinkConfig::with_trace(Arc::new(trace)), 1).unwrap();
    let _ = link.enqueue(Timestamp::MAX, u32::MAX);
    let _ = link.enqueue(Timestamp::MAX, 1);
    // A slow link whose rate flips every microsecond: bounded work per packet.
    let mut config = LinkConfig::with_rate(0.001);
    config.changes = vec![
        LinkChange {
            at_s: 0.0,
            rate_mbps: Some(0.001),
            ..Default::default()
        },
        LinkChange {
            at_s: 1e-6,
            rate_mbps: Some(0.002),
            ..Default::default()
        },
    ];
    config.changes_period_s = Some(2e-6);
    let mut link = Link::new(&config, 1).unwrap();
    for _ in 0..3 {
        let _ = link.enqueue(at(0), u32::MAX);
    }
}
