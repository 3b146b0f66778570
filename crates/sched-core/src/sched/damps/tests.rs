//! DaMPS unit tests: drop, keep, preserve, batch LP placement, cold start and the fail-safe.

use std::time::Duration;

use super::*;

/// Path 0: 10 ms srtt, 5 ms owd. Path 1: 60 ms srtt, 30 ms owd. Room for `packets` each.
fn paths(packets: u64) -> [PathView; 2] {
    [
        PathView::new(PathId(0), 10_000, 1_200 * packets),
        PathView::new(PathId(1), 60_000, 1_200 * packets),
    ]
}

fn realtime(now: Timestamp, budget_ms: u64) -> PacketMeta {
    PacketMeta {
        class: TrafficClass::Realtime,
        deadline: Some(now + Duration::from_millis(budget_ms)),
        ..PacketMeta::bulk(1_200)
    }
}

/// α = 1 (monitor off) and both paths past their cold start.
fn warm() -> Damps {
    let mut s = Damps::new(&DampsConfig {
        monitor: false,
        ..DampsConfig::default()
    });
    for i in 0..2 {
        s.on_ack(PathId(i), &AckInfo::default(), Timestamp::ZERO);
    }
    s
}

#[test]
fn drops_what_no_path_can_deliver_and_keeps_what_one_can() {
    let mut s = warm();
    let p = paths(10);
    let now = Timestamp::from_millis(100);
    // 4 ms left: below both delays (5, 30) and below 3τ of both: dropped.
    assert_eq!(s.select(&p, &realtime(now, 4), now), Decision::Drop);
    // 10 ms left: only the 5 ms path makes it.
    assert_eq!(
        s.select(&p, &realtime(now, 10), now),
        Decision::Send(PathId(0))
    );
    // 40 ms left: both make it; the LP leaves the fast path to tighter packets.
    assert_eq!(
        s.select(&p, &realtime(now, 40), now),
        Decision::Send(PathId(1))
    );
    // A reliable packet that no path can deliver in time is still sent, on the fastest path.
    let reliable = PacketMeta {
        class: TrafficClass::Interactive,
        ..realtime(now, 4)
    };
    assert_eq!(s.select(&p, &reliable, now), Decision::Send(PathId(0)));
}

#[test]
fn preserves_for_a_full_path_that_can_deliver() {
    let mut s = warm();
    let mut p = paths(10);
    p[0].bytes_in_flight = p[0].cwnd;
    let now = Timestamp::from_millis(100);
    // 20 ms left: only path 0 (full) is fast enough, and 20 >= 3·5: the paper preserves it.
    let packet = realtime(now, 20);
    let mut out = [Decision::Wait; 1];
    s.select_batch(&p, &[packet], &mut out, now);
    assert_eq!(out[0], Decision::Wait);
    // Per packet too (Alg. 1 lines 10-15), although path 1, too slow for it, has room.
    assert_eq!(s.select(&p, &packet, now), Decision::Wait);
    // 12 ms left: path 0 could still make it (5 < 12) but 12 < 3·5, and path 1 is too slow
    // (30 > 12, 12 < 3·30): not preservable, a real-time packet is dropped.
    assert_eq!(s.select(&p, &realtime(now, 12), now), Decision::Drop);
    // With no room anywhere, select preserves the 20 ms packet too.
    p[1].bytes_in_flight = p[1].cwnd;
    assert_eq!(s.select(&p, &packet, now), Decision::Wait);
}

#[test]
fn batch_lp_sends_loose_packets_on_the_slow_path() {
    let mut s = warm();
    let p = paths(2);
    let now = Timestamp::from_millis(100);
    let budgets = [10, 10, 10, 40, 45, 50];
    let packets = budgets.map(|b| realtime(now, b));
    let mut out = [Decision::Wait; 6];
    s.select_batch(&p, &packets, &mut out, now);
    // Path 1 (30 ms) takes the two loosest (45, 50); path 0 takes 40 and one 10; the other
    // two 10 ms packets fit nowhere and 10 < 3·5, so they are dropped.
    assert_eq!(
        &out[3..],
        &[
            Decision::Send(PathId(0)),
            Decision::Send(PathId(1)),
            Decision::Send(PathId(1))
        ]
    );
    assert_eq!(out[0], Decision::Send(PathId(0)));
    assert_eq!(&out[1..3], &[Decision::Drop, Decision::Drop]);
    assert_eq!(s.counters().0, 1);
}

#[test]
fn cold_start_duplicates_until_a_path_is_acked() {
    let mut s = Damps::new(&DampsConfig {
        monitor: false,
        ..DampsConfig::default()
    });
    let p = paths(10);
    let now = Timestamp::from_millis(100);
    let both: PathSet = [PathId(0), PathId(1)].into_iter().collect();
    assert_eq!(
        s.select(&p, &realtime(now, 40), now),
        Decision::Duplicate(both)
    );
    s.on_ack(PathId(1), &AckInfo::default(), now);
    // Path 1 is known now, path 0 is not: the copy still goes on path 0 too.
    assert_eq!(
        s.select(&p, &realtime(now, 40), now),
        Decision::Duplicate(both)
    );
    // A packet for the new path 0 gets a copy on the known path 1.
    assert_eq!(
        s.select(&p, &realtime(now, 10), now),
        Decision::Duplicate(both)
    );
    s.on_ack(PathId(0), &AckInfo::default(), now);
    assert_eq!(
        s.select(&p, &realtime(now, 40), now),
        Decision::Send(PathId(1))
    );
    // A path that fails is cold again when it comes back.
    s.on_path_state(PathId(0), PathState::Failed, now);
    assert_eq!(
        s.select(&p, &realtime(now, 40), now),
        Decision::Duplicate(both)
    );
}

#[test]
fn failsafe_enters_edf_after_five_impractical_intervals_and_leaves() {
    let mut s = warm();
    let mut p = paths(10);
    let now = Timestamp::from_millis(100);
    let late = PacketMeta {
        deadline: Some(Timestamp::from_millis(90)),
        ..realtime(now, 0)
    };
    // Five intervals of six packets, each dropped although paths have room: impractical.
    for i in 0..5 * 6 {
        assert!(!s.in_failsafe(), "engaged early at decision {i}");
        assert_eq!(s.select(&p, &late, now), Decision::Drop);
    }
    assert!(s.in_failsafe());
    assert_eq!(s.counters(), (5, 1));
    // EDF decides now: it waits for the full fast path that could still make 20 ms.
    p[0].bytes_in_flight = p[0].cwnd;
    for _ in 0..5 * 6 {
        assert!(s.in_failsafe());
        assert_eq!(s.select(&p, &realtime(now, 20), now), Decision::Wait);
    }
    assert!(
        !s.in_failsafe(),
        "EDF holds for five intervals, then DaMPS again"
    );
    // DaMPS again preserves it for path 0 (20 >= 3·5) while path 1 has room.
    assert_eq!(s.select(&p, &realtime(now, 20), now), Decision::Wait);
    // That wait opened an interval: five more make it the first impractical one, three more
    // follow; an interval that sends something then breaks the run.
    p[0].bytes_in_flight = 0;
    for _ in 0..5 + 3 * 6 {
        s.select(&p, &late, now);
    }
    for _ in 0..6 {
        assert_eq!(
            s.select(&p, &realtime(now, 10), now),
            Decision::Send(PathId(0))
        );
    }
    for _ in 0..4 * 6 {
        s.select(&p, &late, now);
    }
    assert!(!s.in_failsafe());
    for _ in 0..6 {
        s.select(&p, &late, now);
    }
    assert!(s.in_failsafe());
    assert_eq!(s.counters().1, 2);
}

#[test]
fn monitor_rewards_every_arm_in_turn_then_exploits() {
    let mut s = Damps::new(&DampsConfig::default());
    for i in 0..2 {
        s.on_ack(PathId(i), &AckInfo::default(), Timestamp::ZERO);
    }
    let p = paths(100);
    let now = Timestamp::from_millis(100);
    for _ in 0..4 * 6 {
        s.select(&p, &realtime(now, 40), now);
    }
    assert_eq!(s.bandit(PathId(0)).unwrap().pulls(), [1, 1, 1, 1]);
    // No deadline report yet (r_DM = 1) and every packet sent (r_UP = 0): reward 1 each.
    let f = s.bandit(PathId(0)).unwrap().discounted();
    assert!(
        (f[3] - 1.0).abs() < 1e-12 && (f[0] - 0.512).abs() < 1e-12,
        "{f:?}"
    );
}

#[test]
fn parameters_are_validated() {
    let mut c = DampsConfig::default();
    assert_eq!(c.set("batch_size", 8.0), Ok(true));
    assert!(c.set("batch_size", 17.0).is_err());
    assert!(c.set("gamma", 0.0).is_err());
    assert!(c.set("window", 2.5).is_err());
    assert!(c.set("monitor", 0.5).is_err());
    assert_eq!(c.set("monitor", 0.0), Ok(true));
    assert!(!c.monitor);
    assert_eq!(c.set("nope", 1.0), Ok(false));
}

/// A report in which path 0's deadline arrivals all met their deadlines and path 1's met them
/// only when its strictness factor is `slow_needs` or more (its delay is underestimated).
fn report_for(s: &Damps, slow_needs: f64) -> ReceiverReport {
    let slow_alpha = s.bandit(PathId(1)).unwrap().alpha();
    let mut report = ReceiverReport {
        interval_us: 100_000,
        ..ReceiverReport::default()
    };
    for _ in 0..6 {
        report.count_deadline(PathId(0), true);
        report.count_deadline(PathId(1), slow_alpha >= slow_needs);
    }
    report
}

#[test]
fn each_path_monitor_learns_from_its_own_deadline_counts() {
    // L = 1 and the report arrives before the interval ends, so each interval's reward is the
    // deadline meeting ratio its own arm produced on the path.
    let mut s = Damps::new(&DampsConfig {
        window: 1,
        ..DampsConfig::default()
    });
    for i in 0..2 {
        s.on_ack(PathId(i), &AckInfo::default(), Timestamp::ZERO);
    }
    let p = paths(100);
    let now = Timestamp::from_millis(100);
    for _ in 0..200 {
        for _ in 0..5 {
            s.select(&p, &realtime(now, 40), now);
        }
        // Path 1 meets deadlines only with α = 1.2; path 0 always.
        let report = report_for(&s, 1.2);
        s.on_report(&report, now);
        s.select(&p, &realtime(now, 40), now);
    }
    let fast = s.bandit(PathId(0)).unwrap();
    let slow = s.bandit(PathId(1)).unwrap();
    assert_eq!(fast.meeting_ratio(), 1.0);
    let (f, n) = (fast.pulls(), slow.pulls());
    // Path 1: α = 1.2 alone earns, so it is pulled most and holds nearly all the reward.
    assert!(n.iter().take(3).all(|&k| k < n[3]), "path 1 pulls {n:?}");
    let g = slow.discounted();
    assert!(g[..3].iter().all(|&x| x < 1e-6) && g[3] > 0.5, "{g:?}");
    // Path 0: every arm earns; its choices differ from path 1's (a session-wide ratio, the
    // same for both paths, would have made the two bandits identical).
    assert!(
        fast.discounted().iter().all(|&x| x > 0.0),
        "{:?}",
        fast.discounted()
    );
    assert_ne!(f, n);
}

#[test]
fn session_wide_counts_alone_give_no_path_feedback() {
    let mut s = Damps::new(&DampsConfig::default());
    let report = ReceiverReport {
        deadline_met: 0,
        deadline_total: 50,
        ..ReceiverReport::default()
    };
    s.on_report(&report, Timestamp::ZERO);
    // Only the sender's drops (or a peer of the first report layout): no path's r_DM moves.
    for i in 0..2 {
        assert_eq!(s.bandit(PathId(i)).unwrap().meeting_ratio(), 1.0);
    }
}
