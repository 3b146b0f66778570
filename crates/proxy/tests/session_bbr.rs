//! BBR over two simulated paths with deep (bufferbloated) queues, against CUBIC on the same
//! links: the same goodput, without the queues (virtual time: deterministic, not a timed test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_common;

use braid_proxy::session::PathConfig;
use braid_proxy::session::congestion::{CongestionAlgorithm, CongestionConfig};
use braid_proxy::session::harness::{CLIENT, Harness, LinkConfig};
use braid_sched_core::{SchedulerKind, Timestamp};
use session_common::{Bulk, Driver, bulk_config};

/// What one run measured.
#[derive(Debug)]
struct Run {
    goodput_mbps: f64,
    /// Per path: the median smoothed RTT the sender saw from 2 s on, ms.
    median_srtt_ms: Vec<f64>,
    /// Per path: the smallest RTT seen, ms.
    min_rtt_ms: Vec<f64>,
    /// Per path: packets sent.
    packets: Vec<u64>,
    queue_drops: u64,
}

/// 30 Mbit/s with 10 ms and 20 Mbit/s with 20 ms one way, each with a 500-packet queue (160 and
/// 240 ms at those rates: a bloated home router and LTE modem); a 40 MB upload.
fn run(algorithm: CongestionAlgorithm, scheduler: SchedulerKind) -> Run {
    let mut links = [LinkConfig::new(30.0, 10.0), LinkConfig::new(20.0, 20.0)];
    for link in &mut links {
        link.queue_packets = 500;
    }
    let mut config = bulk_config();
    config.congestion = CongestionConfig {
        algorithm,
        ..config.congestion
    };
    let mut h = Harness::new(1, config, scheduler, &links, PathConfig::default());
    let bytes = 40_000_000u64;
    let mut d = Driver::new(vec![Bulk::new(0, CLIENT, bytes)]);
    let mut srtts: Vec<Vec<f64>> = vec![Vec::new(); 2];
    let mut next_sample = 2.0;
    h.run_until(Timestamp::from_secs_f64(30.0), |h| {
        if d.all_done() {
            return;
        }
        d.step(h);
        let now = h.now();
        if now.as_secs_f64() >= next_sample {
            next_sample += 0.05;
            for (i, p) in h.client().path_status(now).enumerate() {
                srtts[i].push(f64::from(p.view.srtt_us) / 1e3);
            }
        }
    });
    let t = &d.transfers[0];
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert!(t.eof && !t.corrupt && t.received == bytes, "{t:?}");
    let secs = t.done_at.unwrap().as_secs_f64();
    let now = h.now();
    let status: Vec<_> = h.client().path_status(now).collect();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Run {
        goodput_mbps: bytes as f64 * 8.0 / secs / 1e6,
        median_srtt_ms: srtts.iter_mut().map(median).collect(),
        min_rtt_ms: status
            .iter()
            .map(|p| f64::from(p.view.min_rtt_us) / 1e3)
            .collect(),
        packets: status.iter().map(|p| p.stats.packets_sent).collect(),
        queue_drops: h.stats.queue_drops,
    }
}

#[test]
fn bbr_keeps_both_paths_busy_without_filling_their_queues() {
    let bbr = run(CongestionAlgorithm::Bbr, SchedulerKind::MinRtt);
    let cubic = run(CongestionAlgorithm::Cubic, SchedulerKind::MinRtt);
    println!("bbr:   {bbr:?}\ncubic: {cubic:?}");
    // The same goodput: at least 90 % of the 50 Mbit/s the two paths carry (so a paced path
    // hands packets to the other instead of holding them back).
    assert!(bbr.goodput_mbps >= 45.0, "bbr {bbr:?}");
    assert!(
        bbr.packets.iter().all(|&n| n > 5_000),
        "a path left idle: {bbr:?}"
    );
    // Startup's overshoot fits the queues, and afterwards nothing queues up to a drop.
    assert_eq!(bbr.queue_drops, 0, "{bbr:?}");
    // BBR's window is two bandwidth-delay products, so its RTT stays below twice the
    // propagation RTT (measured: 1.54x and 1.01x); CUBIC fills the queues, several times it.
    for i in 0..2 {
        assert!(
            bbr.median_srtt_ms[i] < 2.0 * bbr.min_rtt_ms[i],
            "path {i}: bbr {bbr:?}"
        );
        assert!(
            cubic.median_srtt_ms[i] >= 3.0 * cubic.min_rtt_ms[i],
            "path {i}: cubic {cubic:?}"
        );
    }
}

/// An application that sent slowly before sending in bulk: the trickle's rate samples are
/// application-limited, so BBR's Startup does not take the trickle's rate for the path's and
/// still doubles its way up when the bulk comes. Returns the seconds the bulk part took.
fn trickle_then_bulk() -> f64 {
    let links = [LinkConfig::new(30.0, 40.0)];
    let mut config = bulk_config();
    config.congestion = CongestionConfig {
        algorithm: CongestionAlgorithm::Bbr,
        ..config.congestion
    };
    let mut h = Harness::new(
        3,
        config,
        SchedulerKind::MinRtt,
        &links,
        PathConfig::default(),
    );
    let bytes = 20_000_000u64;
    let mut transfer = Bulk::new(0, CLIENT, bytes);
    // 1.5 kB every 20 ms (0.6 Mbit/s, a fiftieth of the link) for 2 s, then everything.
    transfer.write_limit = Some(0);
    let mut d = Driver::new(vec![transfer]);
    let bulk_from = 2.0;
    h.run_until(Timestamp::from_secs_f64(30.0), |h| {
        if d.all_done() {
            return;
        }
        let now = h.now().as_secs_f64();
        d.transfers[0].write_limit = (now < bulk_from).then(|| {
            let ticks = (now / 0.02) as u64 + 1;
            ticks * 1_500
        });
        d.step(h);
    });
    let t = &d.transfers[0];
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert!(t.eof && !t.corrupt && t.received == bytes, "{t:?}");
    t.done_at.unwrap().as_secs_f64() - bulk_from
}

#[test]
fn a_slow_start_of_the_application_does_not_hold_bbr_at_its_rate() {
    let secs = trickle_then_bulk();
    println!("the bulk after a 2 s trickle took {secs:.2} s");
    // About 19.85 MB were left after the trickle: 5.3 s at the link's 30 Mbit/s. Measured
    // 5.60 s; without the application-limited marking 11.52 s (Startup ended at the trickle's
    // rate, and ProbeBW raises it by a quarter per eight round trips).
    assert!(secs <= 6.5, "{secs:.2} s");
}

/// Goodput (Mbit/s) of a 10 MB upload over one 20 Mbit/s link, 20 ms one way, that loses 1 % of
/// its packets at random.
fn lossy_goodput(algorithm: CongestionAlgorithm) -> f64 {
    let mut link = LinkConfig::new(20.0, 20.0);
    link.loss = 0.01;
    let mut config = bulk_config();
    config.congestion = CongestionConfig {
        algorithm,
        ..config.congestion
    };
    let mut h = Harness::new(
        5,
        config,
        SchedulerKind::MinRtt,
        &[link],
        PathConfig::default(),
    );
    let bytes = 10_000_000u64;
    let mut d = Driver::new(vec![Bulk::new(0, CLIENT, bytes)]);
    h.run_until(Timestamp::from_secs_f64(120.0), |h| {
        if !d.all_done() {
            d.step(h)
        }
    });
    let t = &d.transfers[0];
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert!(t.eof && !t.corrupt && t.received == bytes, "{t:?}");
    bytes as f64 * 8.0 / t.done_at.unwrap().as_secs_f64() / 1e6
}

#[test]
fn random_loss_does_not_hold_bbr_back_as_it_holds_cubic() {
    let bbr = lossy_goodput(CongestionAlgorithm::Bbr);
    let cubic = lossy_goodput(CongestionAlgorithm::Cubic);
    println!("1 % random loss on 20 Mbit/s: bbr {bbr:.2} Mbit/s, cubic {cubic:.2} Mbit/s");
    // Measured 18.82 and 2.86 Mbit/s: CUBIC reads each loss as congestion; BBR's model of the
    // path does not move for a loss that does not come with a full queue.
    assert!(bbr >= 15.0, "bbr {bbr:.2} Mbit/s");
    assert!(cubic < bbr / 2.0, "cubic {cubic:.2} vs bbr {bbr:.2} Mbit/s");
}
