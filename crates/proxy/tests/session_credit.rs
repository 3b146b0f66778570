//! Regression: a path going dark must not hold a stream hole (and with it every flow window)
//! until it is declared failed or comes back. Two paths with deep droptail queues (1000
//! packets, the simulator's default) fill up under CUBIC, so queueing inflates the RTT and the
//! probe timeout to a large fraction of a second; path 0 then goes dark for 2 s. Before the
//! fix, what path 0 had in flight when it went dark (retransmissions of earlier queue drops
//! among it) waited for three backed-off probe timeouts or the end of the outage, the
//! receiver's window stayed pinned behind the hole, and path 1 idled: nothing was delivered
//! from 2.5 s to 5.2 s with credit re-advertised every eighth of the window. Now a probe
//! timeout reinjects the path's in-flight stream bytes onto the other path. Virtual time,
//! seeded: deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_common;

use braid_proxy::session::harness::{CLIENT, Harness, LinkConfig};
use braid_proxy::session::{PathConfig, SessionConfig};
use braid_sched_core::{SchedulerKind, Timestamp};
use session_common::{Bulk, Driver};

fn secs(s: f64) -> Timestamp {
    Timestamp::from_secs_f64(s)
}

#[test]
fn session_outage_on_a_bloated_path_does_not_stall_the_other_path() {
    let mut a = LinkConfig::new(20.0, 10.0);
    a.outages = vec![(secs(2.0), secs(4.0))];
    let mut b = LinkConfig::new(10.0, 20.0);
    a.queue_packets = 1000;
    b.queue_packets = 1000;
    // The simulator's set-up for these paths: windows of 4 x 30 Mbit/s x 240 ms.
    let config = SessionConfig {
        flow_send_buffer: 3_600_000,
        flow_receive_window: 3_600_000,
        session_receive_window: 64 << 20,
        max_sent_packets: 65_536,
        ..SessionConfig::default()
    };
    let path = PathConfig {
        max_datagram_size: 1400,
        ..PathConfig::default()
    };
    let mut h = Harness::new(1, config, SchedulerKind::MinRtt, &[a, b], path);
    let mut d = Driver::new(vec![Bulk::new(0, CLIENT, 1_000_000_000)]);
    // (time, bytes received) whenever the receiver made progress during the outage.
    let mut progress = vec![(2.0, 0u64)];
    let mut at_start = None;
    h.run_until(secs(4.0), |h| {
        d.step(h);
        let now = h.now().as_secs_f64();
        let received = d.transfers[0].received;
        if now >= 2.0 {
            let start = *at_start.get_or_insert(received);
            if received > start + progress.last().unwrap().1 {
                progress.push((now, received - start));
            }
        }
    });
    progress.push((4.0, progress.last().unwrap().1));
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    let t = &d.transfers[0];
    assert!(!t.corrupt, "{t:?}");
    let longest_gap = progress
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .fold(0.0, f64::max);
    let delivered = progress.last().unwrap().1;
    println!(
        "during the 2 s outage: {delivered} bytes delivered ({:.2} Mbit/s), longest stall {longest_gap:.2} s; links {:?}",
        delivered as f64 * 8.0 / 2.0 / 1e6,
        h.stats
    );
    // Path 1 carries 10 Mbit/s (2.5 MB in 2 s).
    assert!(
        delivered >= 1_000_000,
        "only {delivered} bytes during the outage"
    );
    assert!(longest_gap < 1.0, "stalled for {longest_gap:.2} s");
}
