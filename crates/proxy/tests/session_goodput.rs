//! Goodput over two lossless simulated paths of 30 and 20 Mbit/s, and a 5 s outage of one
//! path mid-transfer (virtual time: deterministic, not a timed test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_common;

use braid_proxy::session::PathConfig;
use braid_proxy::session::harness::{CLIENT, Harness, LinkConfig};
use braid_sched_core::{SchedulerKind, Timestamp};
use session_common::{Bulk, Driver, bulk_config};

#[test]
fn session_two_paths_reach_ninety_percent_of_fifty_mbits() {
    let links = [LinkConfig::new(30.0, 10.0), LinkConfig::new(20.0, 15.0)];
    let mut h = Harness::new(
        1,
        bulk_config(),
        SchedulerKind::MinRtt,
        &links,
        PathConfig::default(),
    );
    let bytes = 40_000_000u64;
    let mut d = Driver::new(vec![Bulk::new(0, CLIENT, bytes)]);
    h.run_until(Timestamp::from_secs_f64(30.0), |h| {
        if !d.all_done() {
            d.step(h)
        }
    });
    let t = &d.transfers[0];
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert!(t.eof && !t.corrupt && t.received == bytes, "{t:?}");
    let secs = t.done_at.unwrap().as_secs_f64();
    let mbps = bytes as f64 * 8.0 / secs / 1e6;
    println!(
        "goodput over 30+20 Mbit/s: {mbps:.2} Mbit/s ({bytes} bytes in {secs:.3} s virtual), links {:?}",
        h.stats
    );
    assert!(mbps >= 45.0, "goodput {mbps:.2} Mbit/s < 45");
}

#[test]
fn session_survives_a_five_second_outage_and_reuses_the_path() {
    use braid_proxy::session::Event;
    use braid_sched_core::PathId;

    let mut wifi = LinkConfig::new(30.0, 10.0);
    wifi.outages = vec![(Timestamp::from_secs_f64(3.0), Timestamp::from_secs_f64(8.0))];
    let links = [wifi, LinkConfig::new(20.0, 15.0)];
    let mut h = Harness::new(
        2,
        bulk_config(),
        SchedulerKind::MinRtt,
        &links,
        PathConfig::default(),
    );
    let bytes = 60_000_000u64;
    let mut d = Driver::new(vec![Bulk::new(0, CLIENT, bytes)]);
    let mut marks = Vec::new();
    let mut sent_on_wifi_at_8s = None;
    h.run_until(Timestamp::from_secs_f64(60.0), |h| {
        if !d.all_done() {
            d.step(h);
        }
        let now = h.now().as_secs_f64();
        if marks.len() < 3 && now >= [3.5, 5.5, 7.5][marks.len()] {
            marks.push((now, d.transfers[0].received));
        }
        if sent_on_wifi_at_8s.is_none() && now >= 8.0 {
            let now = h.now();
            let sent = h
                .client()
                .path_status(now)
                .next()
                .unwrap()
                .stats
                .packets_sent;
            sent_on_wifi_at_8s = Some(sent);
        }
    });
    let t = &d.transfers[0];
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert!(t.eof && !t.corrupt && t.received == bytes, "{t:?}");
    // The flow kept moving during the outage, on the other path (20 Mbit/s = 2.5 MB/s).
    let during = (marks[2].1 - marks[0].1) as f64 * 8.0 / (marks[2].0 - marks[0].0) / 1e6;
    println!("during the outage: {during:.2} Mbit/s; marks {marks:?}");
    assert!(during >= 15.0, "only {during:.2} Mbit/s during the outage");
    let failed = d
        .events
        .iter()
        .any(|(s, e)| *s == CLIENT && *e == Event::PathFailed(PathId(0)));
    let back = d
        .events
        .iter()
        .any(|(s, e)| *s == CLIENT && *e == Event::PathRecovered(PathId(0)));
    assert!(failed && back, "path 0 should fail and recover");
    let now = h.now();
    let sent_end = h
        .client()
        .path_status(now)
        .next()
        .unwrap()
        .stats
        .packets_sent;
    let after = sent_end - sent_on_wifi_at_8s.unwrap();
    let secs = t.done_at.unwrap().as_secs_f64();
    let mbps = bytes as f64 * 8.0 / secs / 1e6;
    println!(
        "outage run: {bytes} bytes in {secs:.3} s virtual = {mbps:.2} Mbit/s; {after} packets on path 0 after it came back; links {:?}",
        h.stats
    );
    assert!(
        after > 1_000,
        "path 0 not used again after recovering ({after} packets)"
    );
}
