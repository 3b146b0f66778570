//! The receiver report end to end over the harness: deadline datagrams are counted per path of
//! arrival at the receiver, the counts reach the sender in ACKs, and the sender's own drops go
//! to the session-wide total only (DaMPS's per-path reward, eq. 3 and 5).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_common;

use braid_proxy::session::harness::{Harness, LinkConfig};
use braid_proxy::session::{PathConfig, SessionConfig};
use braid_sched_core::{MAX_PATHS, PathId, ReceiverReport, SchedulerKind, Timestamp};

fn secs(s: f64) -> Timestamp {
    Timestamp::from_secs_f64(s)
}

/// Adds every new report the client's sender got since the last call (a report is new when it
/// differs from the last one seen; two identical reports in a row count once, which only
/// under-counts).
fn collect(h: &mut Harness, last: &mut Option<ReceiverReport>, sum: &mut ReceiverReport) {
    let Some(report) = h.client().peer_report() else {
        return;
    };
    if *last == Some(report) {
        return;
    }
    *last = Some(report);
    sum.deadline_met += report.deadline_met;
    sum.deadline_total += report.deadline_total;
    for (s, p) in sum.path_deadlines.iter_mut().zip(&report.path_deadlines) {
        s.met += p.met;
        s.total += p.total;
    }
}

#[test]
fn per_path_deadline_counts_reach_the_sender() {
    // Path 0: 10 ms one way, path 1: 25 ms. Round robin puts datagrams on both; a 17 ms budget
    // is met on path 0 only.
    let mut h = Harness::new(
        11,
        SessionConfig::default(),
        SchedulerKind::RoundRobin,
        &[LinkConfig::new(20.0, 10.0), LinkConfig::new(20.0, 25.0)],
        PathConfig::default(),
    );
    let flow = session_common::open_datagram_flow(&mut h);
    let mut last = None;
    let mut sum = ReceiverReport::default();
    let mut expired = 0;
    // 1 s of warm-up (RTT samples, cold windows), then 2 s that are counted.
    for tick in 1..=150u32 {
        let now = h.now();
        for _ in 0..4 {
            h.client()
                .send_datagram(flow, &[7; 200], Some(17_000), now)
                .unwrap();
        }
        if tick > 50 && tick % 10 == 0 {
            // Budget 0: expired before it can be sent, dropped by the sender itself.
            h.client()
                .send_datagram(flow, b"late", Some(0), now)
                .unwrap();
            expired += 1;
        }
        session_common::run_draining(&mut h, flow, secs(f64::from(tick) * 0.02));
        if tick == 50 {
            sum = ReceiverReport::default();
            last = h.client().peer_report();
        } else if tick > 50 {
            collect(&mut h, &mut last, &mut sum);
        }
    }
    session_common::run_draining(&mut h, flow, secs(3.5));
    collect(&mut h, &mut last, &mut sum);

    let fast = sum.path_deadlines(PathId(0));
    let slow = sum.path_deadlines(PathId(1));
    // Each path carried about half of 400 datagrams; allow for reports lost to the dedup above.
    assert!(fast.total > 100 && slow.total > 100, "{sum:?}");
    assert!(fast.met * 100 >= fast.total * 95, "fast path: {fast:?}");
    assert_eq!(slow.met, 0, "slow path: {slow:?}");
    assert!(
        sum.path_deadlines[2..MAX_PATHS]
            .iter()
            .all(|p| p.total == 0),
        "{sum:?}"
    );
    // Session-wide: what arrived on the paths plus the sender's own drops, which no path has.
    let arrived = fast.total + slow.total;
    assert_eq!(sum.deadline_met, fast.met + slow.met, "{sum:?}");
    assert!(
        sum.deadline_total > arrived && sum.deadline_total <= arrived + expired,
        "{sum:?}, {expired} dropped by the sender"
    );
}
