//! Unit tests of EdAR's redundant placement (`redundant_placement`): which path carries a
//! packet placed in redundant mode and where its copies go.

use super::*;
use crate::path::PathState;

fn pkt() -> PacketMeta {
    PacketMeta::bulk(1_200)
}

/// Always-redundant EdAR with the given placement (the buffer as by default).
fn redundant(placement: RedundantPlacement) -> Edar {
    Edar::new(&EdarConfig {
        policy: EdarPolicy::Redundant,
        redundant_placement: placement,
        ..EdarConfig::default()
    })
}

/// Path 0 fast (20 ms), path 1 slow (80 ms), both with room.
fn fast_and_slow() -> [PathView; 2] {
    [
        PathView::new(PathId(0), 20_000, 100_000),
        PathView::new(PathId(1), 80_000, 100_000),
    ]
}

fn both() -> Decision {
    Decision::Duplicate([PathId(0), PathId(1)].into_iter().collect())
}

#[test]
fn the_parameter_is_validated_and_defaults_to_fastest_when_lossy() {
    let mut c = EdarConfig::default();
    assert_eq!(c.redundant_placement, RedundantPlacement::FastestWhenLossy);
    for (v, want) in [
        (0.0, RedundantPlacement::LowestRttWithRoom),
        (1.0, RedundantPlacement::Fastest),
        (2.0, RedundantPlacement::FastestWhenLossier),
        (3.0, RedundantPlacement::FastestWhenLossy),
    ] {
        assert_eq!(c.set("redundant_placement", v), Ok(true));
        assert_eq!(c.redundant_placement, want);
    }
    for bad in [0.5, 4.0, -1.0, f64::NAN] {
        assert!(c.set("redundant_placement", bad).is_err(), "{bad}");
        assert_eq!(c.redundant_placement, RedundantPlacement::FastestWhenLossy);
    }
    let mut lowest = EdarConfig::default();
    lowest.set("redundant_placement", 0.0).unwrap();
    assert_ne!(lowest, EdarConfig::default());
}

#[test]
fn both_placements_copy_onto_every_path_with_room() {
    for placement in [
        RedundantPlacement::LowestRttWithRoom,
        RedundantPlacement::Fastest,
    ] {
        let mut s = redundant(placement);
        assert_eq!(
            s.select(&fast_and_slow(), &pkt(), Timestamp::from_millis(1)),
            both()
        );
    }
}

#[test]
fn fastest_placement_waits_for_the_fastest_path_lowest_rtt_does_not() {
    // The fast path's window is full: the default places the packet on the slow path; the
    // fastest placement waits, so the slow path never carries a packet of its own.
    let mut p = fast_and_slow();
    p[0].bytes_in_flight = 100_000;
    let now = Timestamp::from_millis(1);
    let mut lowest = redundant(RedundantPlacement::LowestRttWithRoom);
    assert_eq!(lowest.select(&p, &pkt(), now), Decision::Send(PathId(1)));
    let mut fastest = redundant(RedundantPlacement::Fastest);
    assert_eq!(fastest.select(&p, &pkt(), now), Decision::Wait);
    // Room on the fast path again: the packet goes there, with a copy on the slow one.
    p[0].bytes_in_flight = 0;
    assert_eq!(fastest.select(&p, &pkt(), now), both());
    // The slow path full: the fast path alone.
    p[1].bytes_in_flight = 100_000;
    assert_eq!(fastest.select(&p, &pkt(), now), Decision::Send(PathId(0)));
}

#[test]
fn fastest_placement_follows_the_rtts_and_skips_failed_paths() {
    let now = Timestamp::from_millis(1);
    let mut s = redundant(RedundantPlacement::Fastest);
    // The RTTs swap: path 1 is now the fastest, and path 0 full gets no copy.
    let mut p = fast_and_slow();
    p[0].srtt_us = 90_000;
    p[0].bytes_in_flight = 100_000;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Send(PathId(1)));
    // Path 1 (fastest) full, path 0 has room: wait.
    p[0].bytes_in_flight = 0;
    p[1].bytes_in_flight = 100_000;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Wait);
    // The fastest path failed or rate-capped: it no longer holds packets back.
    for cut in [0, 1] {
        let mut q = p;
        if cut == 0 {
            q[1].state = PathState::Failed;
        } else {
            q[1].rate_limited = true;
        }
        assert_eq!(s.select(&q, &pkt(), now), Decision::Send(PathId(0)));
    }
}

#[test]
fn fastest_placement_honours_tiers() {
    // Paths 0 and 1 primary (50 and 100 ms), path 2 a backup (20 ms).
    let mut p = [
        PathView::new(PathId(0), 50_000, 100_000),
        PathView::new(PathId(1), 100_000, 100_000),
        PathView::new(PathId(2), 20_000, 100_000),
    ];
    p[2].state = PathState::Backup;
    let now = Timestamp::from_millis(1);
    let mut s = redundant(RedundantPlacement::Fastest);
    // A primary has room: the backup is not admitted, the fastest primary carries it.
    assert_eq!(
        s.select(&p, &pkt(), now),
        Decision::Duplicate([PathId(0), PathId(1)].into_iter().collect())
    );
    // The fastest primary full, the other primary with room: wait (not the backup).
    p[0].bytes_in_flight = 100_000;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Wait);
    // Both primaries full: they are live, so still wait.
    p[1].bytes_in_flight = 100_000;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Wait);
    // Both potentially failed: the backup tier opens and the backup is the fastest.
    p[0].potentially_failed = true;
    p[1].potentially_failed = true;
    assert_eq!(s.select(&p, &pkt(), now), Decision::Send(PathId(2)));
}

#[test]
fn loss_aware_placements_wait_for_the_fastest_only_when_the_path_with_room_loses_more() {
    let now = Timestamp::from_millis(1);
    let mut p = fast_and_slow();
    p[0].bytes_in_flight = 100_000;
    p[0].loss_rate = 0.01;
    let mut lossier = redundant(RedundantPlacement::FastestWhenLossier);
    let mut lossy = redundant(RedundantPlacement::FastestWhenLossy);
    // The slow path with room loses no more than the fast one: both use it.
    p[1].loss_rate = 0.01;
    assert_eq!(lossier.select(&p, &pkt(), now), Decision::Send(PathId(1)));
    assert_eq!(lossy.select(&p, &pkt(), now), Decision::Send(PathId(1)));
    // A little more (below the margin): only `FastestWhenLossier` waits.
    p[1].loss_rate = 0.03;
    assert_eq!(lossier.select(&p, &pkt(), now), Decision::Wait);
    assert_eq!(lossy.select(&p, &pkt(), now), Decision::Send(PathId(1)));
    // The margin or more above the fast path's: both wait.
    p[1].loss_rate = 0.01 + LOSSY_MARGIN + 0.001;
    assert_eq!(lossier.select(&p, &pkt(), now), Decision::Wait);
    assert_eq!(lossy.select(&p, &pkt(), now), Decision::Wait);
    // Room on the fast path again: the packet goes there, with a copy on the lossy path.
    p[0].bytes_in_flight = 0;
    assert_eq!(lossy.select(&p, &pkt(), now), both());
    // The lossy path is the fastest one: a slower path with room that loses less is used.
    let mut q = fast_and_slow();
    q[0].loss_rate = 0.2;
    q[0].bytes_in_flight = 100_000;
    assert_eq!(lossy.select(&q, &pkt(), now), Decision::Send(PathId(1)));
}

#[test]
fn normal_mode_ignores_the_placement() {
    let mut p = fast_and_slow();
    p[0].bytes_in_flight = 100_000;
    let mut s = Edar::new(&EdarConfig {
        policy: EdarPolicy::Normal,
        redundant_placement: RedundantPlacement::Fastest,
        ..EdarConfig::default()
    });
    // The first interval of a connection is redundant (§IV-B): Fastest waits there.
    assert_eq!(
        s.select(&p, &pkt(), Timestamp::from_millis(1)),
        Decision::Wait
    );
    // After the first interval, normal mode: minRTT, the slow path with room.
    assert_eq!(
        s.select(&p, &pkt(), Timestamp::from_millis(500)),
        Decision::Send(PathId(1))
    );
}
