//! Loss detection thresholds, probe timeouts, failure and recovery of one path in isolation.

use super::*;
use crate::session::frame::{AckFields, Frame, encode_ack};
use crate::session::reorder::{FORGET_AFTER_REDUCTIONS, PACKET_THRESHOLD};
use crate::session::sent::Payload;
use crate::session::varint::{Reader, Writer};

/// The heartbeats of a session that never goes quiet.
fn busy(config: &SessionConfig) -> Heartbeat {
    Heartbeat {
        quiet_from: Timestamp::MAX,
        ..Heartbeat::new(config, Timestamp::ZERO)
    }
}

#[test]
fn a_heartbeat_slows_down_once_the_session_is_quiet_and_comes_back_with_data() {
    let config = SessionConfig::default();
    let s = Timestamp::from_millis;
    let never = Timestamp::ZERO;
    // Data last at 50 s: quiet from 60 s (`quiet_after` 10 s).
    let h = Heartbeat::new(&config, s(50_000));
    assert_eq!(h.quiet_from, s(60_000));
    // A heartbeat due while busy keeps the busy interval (1 s), whatever came from the peer.
    assert_eq!(h.due(s(55_000), s(55_500)), s(56_000));
    assert_eq!(h.due(s(58_999), never), s(59_999));
    // One that would fall at or after the session went quiet waits the quiet interval (25 s).
    assert_eq!(h.due(s(59_000), never), s(84_000));
    assert_eq!(h.due(s(70_000), never), s(95_000));
    // ... after the peer's PING, when that came later: one exchange per interval for both.
    assert_eq!(h.due(s(70_000), s(80_000)), s(105_000));
    // Data again at 90 s: the path whose last PING went at 70 s is due at once (71 s passed).
    let again = Heartbeat::new(&config, s(90_000));
    assert_eq!(again.due(s(70_000), s(80_000)), s(71_000));
    // A quiet interval below the busy one is the busy one.
    let odd = SessionConfig {
        quiet_heartbeat_interval: Duration::from_millis(10),
        ..SessionConfig::default()
    };
    assert_eq!(Heartbeat::new(&odd, s(0)).due(s(20_000), never), s(21_000));
}

fn ack_bytes(path: PathId, ranges: &[(u64, u64)]) -> Vec<u8> {
    let mut set = RangeSet::default();
    for r in ranges {
        set.insert(r.0..r.1);
    }
    let mut buf = [0u8; 512];
    let mut w = Writer::new(&mut buf);
    let fields = AckFields {
        path,
        ack_delay_us: 0,
        receiver_time_us: 1_000_000,
        report: None,
    };
    assert!(encode_ack(&mut w, &set, &fields, 512).unwrap());
    let n = w.len();
    buf[..n].to_vec()
}

fn apply_ack(
    p: &mut Path,
    ranges: &[(u64, u64)],
    now: Timestamp,
) -> (Vec<u64>, Vec<u64>, AckOutcome) {
    let bytes = ack_bytes(p.id, ranges);
    let Ok(Frame::Ack(ack)) = Frame::decode(&mut Reader::new(&bytes)) else {
        panic!("not an ACK");
    };
    let (mut acked, mut lost) = (Vec::new(), Vec::new());
    let out = p
        .on_ack(&ack, now, Duration::from_millis(5), &mut acked, &mut lost)
        .unwrap();
    (
        acked.iter().map(|s| s.pn).collect(),
        lost.iter().map(|s| s.pn).collect(),
        out,
    )
}

fn path() -> (Path, SessionConfig) {
    let config = SessionConfig::default();
    (
        Path::new(PathId(2), PathConfig::default(), &config, Timestamp::ZERO),
        config,
    )
}

fn send(p: &mut Path, pn: u64, at: Timestamp) {
    p.on_sent(SentPacket::new(pn, at, 1_200, Payload::None), at);
}

#[test]
fn packet_threshold_declares_older_packets_lost() {
    let (mut p, _) = path();
    for pn in 0..10 {
        send(&mut p, pn, Timestamp::from_millis(pn));
    }
    assert_eq!(p.bytes_in_flight, 12_000);
    let (acked, lost, out) = apply_ack(&mut p, &[(5, 10)], Timestamp::from_millis(30));
    assert_eq!(acked, vec![5, 6, 7, 8, 9]);
    // 9 - 3 = 6: packets 0..=4 are lost (5 and 6 were acknowledged).
    assert_eq!(lost, vec![0, 1, 2, 3, 4]);
    assert_eq!(out.lost_bytes, 6_000);
    assert_eq!(p.bytes_in_flight, 0);
    assert!(out.rtt_sample.is_some());
}

#[test]
fn time_threshold_declares_old_packets_lost_and_arms_a_timer() {
    let (mut p, config) = path();
    send(&mut p, 0, Timestamp::ZERO);
    send(&mut p, 1, Timestamp::from_millis(40));
    send(&mut p, 2, Timestamp::from_millis(41));
    let (_, lost, _) = apply_ack(&mut p, &[(2, 3)], Timestamp::from_millis(91));
    // RTT 50 ms: 9/8 of it is 56.25 ms; packet 0 (91 ms old) is lost, packet 1 (51 ms) not yet.
    assert_eq!(lost, vec![0]);
    let timer = p.next_timeout(&config, busy(&config)).unwrap();
    assert!(
        timer <= Timestamp::from_micros(40_000 + 56_250),
        "{timer:?}"
    );
    let mut later = Vec::new();
    p.on_timeout(
        Timestamp::from_millis(97),
        &config,
        busy(&config),
        &mut later,
        &mut Vec::new(),
    );
    assert_eq!(later.iter().map(|s| s.pn).collect::<Vec<_>>(), vec![1]);
}

#[test]
fn silent_path_fails_reinjects_and_recovers_on_a_probe_ack() {
    let (mut p, config) = path();
    for pn in 0..4 {
        send(&mut p, pn, Timestamp::ZERO);
    }
    let mut lost = Vec::new();
    let mut now = Timestamp::ZERO;
    let mut failed_at = None;
    while failed_at.is_none() && now < Timestamp::from_secs_f64(10.0) {
        now = p.next_timeout(&config, busy(&config)).unwrap().max(now);
        if p.on_timeout(now, &config, busy(&config), &mut lost, &mut Vec::new()) {
            failed_at = Some(now);
        }
        if p.probe_due {
            p.probe_due = false;
            let pn = p.next_pn;
            send(&mut p, pn, now);
        }
    }
    assert!(p.is_failed(), "never failed");
    // Every packet in flight came back for reinjection (the 4 and the probes).
    assert!(lost.len() >= 4);
    assert_eq!(p.bytes_in_flight, 0);
    // Failed paths are probed; an ACK of the probe brings the path back.
    let probe_at = p.next_timeout(&config, busy(&config)).unwrap();
    assert!(probe_at <= failed_at.unwrap() + config.failed_probe_interval);
    p.on_timeout(probe_at, &config, busy(&config), &mut lost, &mut Vec::new());
    assert!(p.probe_due);
    let pn = p.next_pn;
    let mut probe = SentPacket::new(pn, probe_at, 30, Payload::None);
    probe.in_flight = false;
    p.on_sent(probe, probe_at);
    let (acked, _, out) = apply_ack(
        &mut p,
        &[(pn, pn + 1)],
        probe_at + Duration::from_millis(20),
    );
    assert_eq!(acked, vec![pn]);
    assert!(out.recovered && !p.is_failed());
    assert_eq!(p.state, PathState::Active);
}

#[test]
fn ack_of_an_unsent_packet_is_an_error() {
    let (mut p, _) = path();
    send(&mut p, 0, Timestamp::ZERO);
    let bytes = ack_bytes(p.id, &[(0, 5)]);
    let Ok(Frame::Ack(ack)) = Frame::decode(&mut Reader::new(&bytes)) else {
        panic!("not an ACK");
    };
    let err = p
        .on_ack(
            &ack,
            Timestamp::ZERO,
            Duration::ZERO,
            &mut Vec::new(),
            &mut Vec::new(),
        )
        .unwrap_err();
    assert_eq!(
        err,
        SessionError::AckOfUnsent {
            path: PathId(2),
            packet: 4
        }
    );
}

#[test]
fn received_packets_drive_ack_timing() {
    let (mut p, _) = path();
    let now = Timestamp::from_millis(1);
    assert!(p.on_received(0, now));
    p.on_ack_eliciting(now, Duration::from_millis(5));
    assert!(p.ack_pending() && !p.ack_due());
    assert!(!p.on_received(0, now), "duplicate");
    assert!(p.on_received(2, now), "gap");
    assert!(p.ack_due(), "a gap is acknowledged at once");
    p.on_ack_sent();
    assert!(!p.ack_pending());
}

#[test]
fn a_long_run_of_losses_is_persistent_congestion() {
    let (mut p, _) = path();
    let initial = p.cc.window();
    // One RTT sample of 20 ms first.
    send(&mut p, 0, Timestamp::ZERO);
    apply_ack(&mut p, &[(0, 1)], Timestamp::from_millis(20));
    // Packets over 1 s, all lost, then one acknowledged.
    for pn in 1..=11 {
        send(&mut p, pn, Timestamp::from_millis(20 + 100 * pn));
    }
    send(&mut p, 12, Timestamp::from_millis(1_200));
    let (_, lost, _) = apply_ack(&mut p, &[(12, 13)], Timestamp::from_millis(1_220));
    assert_eq!(lost.len(), 11);
    // Persistent congestion collapses the window to the minimum.
    assert!(
        p.cc.window() < initial / 2,
        "window {} after persistent congestion",
        p.cc.window()
    );
}

#[test]
fn a_new_datagram_size_reaches_the_view_window_floor_pacer_and_rate_cap() {
    let config = SessionConfig::default();
    let capped = PathConfig {
        rate_cap: Some(1_000_000),
        ..PathConfig::default()
    };
    let mut p = Path::new(PathId(1), capped, &config, Timestamp::ZERO);
    let mut wake = None;
    let now = Timestamp::from_millis(1);
    assert_eq!(p.cc.minimum_window(), 2_400);
    // Shrink: the floor keeps two datagrams, the window keeps its bytes.
    let window = p.cc.window();
    p.set_max_datagram_size(500);
    assert_eq!(p.view(now, &mut wake).max_datagram_size, 500);
    assert_eq!(p.cc.minimum_window(), 1_000);
    assert_eq!(p.cc.window(), window);
    // The rate cap's burst and the pacer's burst range are counted in the new datagrams.
    assert_eq!(p.bucket.as_ref().unwrap().burst_bytes(), 2_000);
    assert!(!p.view(now, &mut wake).rate_limited);
    assert_eq!(p.pacing_delay(now), None);
    assert_eq!(p.pacer.capacity(), 10 * 500);
    // Grow: the floor rises to two datagrams; a window below it is raised.
    p.set_max_datagram_size(9_000);
    assert_eq!(p.cc.minimum_window(), 18_000);
    assert!(p.cc.window() >= 18_000);
    // A path that fails and recovers rebuilds its controller for the current size.
    let mut lost = Vec::new();
    p.fail(now, &mut lost);
    p.recover(now);
    assert_eq!(p.cc.minimum_window(), 18_000);
    assert_eq!(
        p.cc.window(),
        90_000,
        "initial window: ten datagrams of 9000"
    );
}

#[test]
fn a_probe_timeout_reinjects_stream_packets_once_and_closes_the_window_until_an_ack() {
    use crate::session::stream::Chunk;
    let (mut p, config) = path();
    let chunk = |offset| Chunk {
        offset,
        len: 1_000,
        fin: false,
        retransmit: false,
    };
    let flow = braid_sched_core::FlowId(4);
    for pn in 0..3 {
        let payload = Payload::Stream {
            flow,
            chunk: chunk(pn * 1_000),
        };
        p.on_sent(
            SentPacket::new(pn, Timestamp::ZERO, 1_100, payload),
            Timestamp::ZERO,
        );
    }
    // A packet with neither stream bytes nor control frames is not reinjected.
    send(&mut p, 3, Timestamp::ZERO);
    let mut wake = None;
    let view = p.view(Timestamp::ZERO, &mut wake);
    assert!(view.cwnd > view.bytes_in_flight, "room before the timeout");
    let (mut lost, mut reinject) = (Vec::new(), Vec::new());
    let pto = p.next_timeout(&config, busy(&config)).unwrap();
    assert!(!p.on_timeout(pto, &config, busy(&config), &mut lost, &mut reinject));
    assert!(lost.is_empty(), "a probe timeout declares nothing lost");
    assert_eq!(
        reinject.iter().map(|s| s.pn).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert!(p.probe_due);
    // Still in flight, but no room for data until an ACK.
    assert_eq!(p.bytes_in_flight, 3 * 1_100 + 1_200);
    let view = p.view(pto, &mut wake);
    assert_eq!(view.cwnd, view.bytes_in_flight);
    // The next timeout reinjects nothing twice.
    p.probe_due = false;
    send(&mut p, 4, pto);
    let mut again = Vec::new();
    let next = p.next_timeout(&config, busy(&config)).unwrap();
    p.on_timeout(next, &config, busy(&config), &mut lost, &mut again);
    assert!(again.is_empty(), "{again:?}");
    // An ACK of the probe opens the window again (and settles the older packets).
    let (_, _, _) = apply_ack(&mut p, &[(4, 5)], next + Duration::from_millis(1));
    let view = p.view(next, &mut wake);
    assert!(view.cwnd > view.bytes_in_flight);
}

#[test]
fn a_path_closed_by_a_probe_timeout_is_probed_at_the_failed_path_cadence() {
    let (mut p, mut config) = path();
    config.failed_probe_interval = Duration::from_millis(1);
    send(&mut p, 0, Timestamp::ZERO);
    let (mut lost, mut reinject) = (Vec::new(), Vec::new());
    let pto = p.next_timeout(&config, busy(&config)).unwrap();
    assert!(!p.on_timeout(pto, &config, busy(&config), &mut lost, &mut reinject));
    assert_eq!(p.pto_count, 1);
    p.probe_due = false;
    send(&mut p, 1, pto);
    // The backed-off probe timeout is two periods away; the closed path is probed sooner.
    let next = p.next_timeout(&config, busy(&config)).unwrap();
    assert_eq!(next, pto + Duration::from_millis(1));
    assert!(!p.on_timeout(next, &config, busy(&config), &mut lost, &mut reinject));
    assert!(
        p.probe_due,
        "a probe is due one failed-probe interval after the last"
    );
    assert_eq!(p.pto_count, 1, "the extra probe is not a probe timeout");
    // Probing does not postpone failure: it comes at the same deadline as without probes.
    let mut quiet = path().0;
    send(&mut quiet, 0, Timestamp::ZERO);
    let mut failed_quiet = None;
    while failed_quiet.is_none() {
        let now = quiet.next_timeout(&config, busy(&config)).unwrap();
        if quiet.on_timeout(now, &config, busy(&config), &mut lost, &mut reinject) {
            failed_quiet = Some(now);
        }
    }
    let (mut now, mut pn, mut failed) = (next, 2, None);
    while failed.is_none() {
        if p.probe_due {
            p.probe_due = false;
            send(&mut p, pn, now);
            pn += 1;
        }
        now = p.next_timeout(&config, busy(&config)).unwrap();
        if p.on_timeout(now, &config, busy(&config), &mut lost, &mut reinject) {
            failed = Some(now);
        }
    }
    assert!(
        pn > 10,
        "probed every millisecond until failure ({pn} packets)"
    );
    assert_eq!(failed, failed_quiet);
}

#[test]
fn a_path_kept_busy_below_the_floor_is_degraded_after_a_second_until_it_passes_a_quarter_more() {
    let config = SessionConfig {
        backup_below_rate: 1_200_000,
        ..SessionConfig::default()
    };
    let mut p = Path::new(PathId(0), PathConfig::default(), &config, Timestamp::ZERO);
    let mut unfloored = Path::new(
        PathId(1),
        PathConfig::default(),
        &SessionConfig::default(),
        Timestamp::ZERO,
    );
    let ms = Timestamp::from_millis;
    // Every 10 ms, what was sent 10 ms before is acknowledged and `per_tick` packets of 1,200
    // bytes go out: 5 a tick is 0.6 MB/s, half the floor; 11 is 1.32 MB/s, 10 % above it; 16 is
    // 1.92 MB/s, 60 % above. `idle`: the path also had room with nothing to send.
    let mut t = 0;
    let mut run = |paths: &mut [&mut Path], until: u64, per_tick: u64, idle: bool| {
        while t < until {
            for p in paths.iter_mut() {
                if p.next_pn > 0 {
                    apply_ack(p, &[(0, p.next_pn)], ms(t));
                }
                let first = p.next_pn;
                for pn in first..first + per_tick {
                    send(p, pn, ms(t));
                }
                if idle {
                    p.on_app_limited();
                }
            }
            t += 10;
        }
    };
    run(&mut [&mut p, &mut unfloored], 900, 5, false);
    assert!(!p.is_degraded(ms(900)), "degraded before a second");
    run(&mut [&mut p, &mut unfloored], 1_100, 5, false);
    assert!(p.is_degraded(ms(1_100)) && p.view(ms(1_100), &mut None).degraded);
    assert!(!p.is_live_primary(ms(1_100)));
    // Without a floor, never.
    assert!(!unfloored.is_degraded(ms(1_100)));
    // Just above the floor: still degraded, so that a rate near it does not flap.
    run(&mut [&mut p], 1_600, 11, false);
    assert!(p.is_degraded(ms(1_600)));
    // A quarter more: live again within a rate window.
    run(&mut [&mut p], 1_700, 16, false);
    assert!(!p.is_degraded(ms(1_700)) && p.is_live_primary(ms(1_700)));
    // Slow again, but with room and nothing to send part of the time: asked for little, not
    // degraded.
    run(&mut [&mut p], 2_200, 5, false);
    run(&mut [&mut p], 3_000, 5, true);
    assert!(!p.is_degraded(ms(3_000)));
    // Kept busy again: a new second starts.
    run(&mut [&mut p], 3_900, 5, false);
    assert!(!p.is_degraded(ms(3_900)));
    run(&mut [&mut p], 4_100, 5, false);
    assert!(p.is_degraded(ms(4_100)));
}

#[test]
fn losses_that_prove_spurious_widen_the_thresholds_and_undo_the_reduction_they_caused() {
    let (mut p, _) = path();
    let ms = Timestamp::from_millis;
    for pn in 0..20 {
        send(&mut p, pn, ms(0));
    }
    // 3 and 4 overtaken by 15 packets: lost by the packet threshold, and the window reduced.
    let (_, lost, _) = apply_ack(&mut p, &[(0, 3), (5, 20)], ms(20));
    assert_eq!(lost, [3, 4]);
    let reduced = p.cc.window();
    assert_eq!(p.reordering().packet_threshold, 3);
    // Both arrive after all, 30 ms after they were sent, on a path of 20 ms: the thresholds grow
    // past what they met, and the reduction is undone.
    apply_ack(&mut p, &[(0, 20)], ms(30));
    let r = p.reordering();
    assert_eq!(
        (r.spurious_losses, r.packet_threshold, r.undone_reductions),
        (2, 17, 1)
    );
    assert!(
        r.time_slack >= Duration::from_millis(9) && r.time_slack <= Duration::from_millis(11),
        "{r:?}"
    );
    let restored = p.cc.window();
    assert!(restored > reduced, "{reduced} -> {restored}");
    // Overtaken as far again, and as late: no longer lost.
    for pn in 20..40 {
        send(&mut p, pn, ms(40));
    }
    let (_, lost, _) = apply_ack(&mut p, &[(20, 25), (26, 40)], ms(61));
    assert!(lost.is_empty(), "{lost:?}");
    apply_ack(&mut p, &[(20, 40)], ms(65));
    // Overtaken farther: lost; one of the two arrives, the other does not: the reduction stays.
    for pn in 40..80 {
        send(&mut p, pn, ms(100));
    }
    let (_, lost, _) = apply_ack(&mut p, &[(40, 41), (43, 80)], ms(121));
    assert_eq!(lost, [41, 42]);
    let reduced = p.cc.window();
    apply_ack(&mut p, &[(40, 42), (43, 80)], ms(125));
    let r = p.reordering();
    assert_eq!((r.spurious_losses, r.undone_reductions), (3, 1));
    assert_eq!(p.cc.window(), reduced);
    // The other comes two probe periods later: as good as lost, nothing learned from it.
    let late = ms(100) + p.rtt.pto_base() * 2 + Duration::from_millis(1);
    apply_ack(&mut p, &[(40, 80)], late);
    assert_eq!(p.reordering().spurious_losses, 3);
    // Losses that are real, one window reduction after another: after the 16th in a row since
    // the last spurious loss the thresholds are RFC 9002's again.
    let mut t = late + Duration::from_millis(100);
    let mut pn = 80;
    for reduction in 1..=FORGET_AFTER_REDUCTIONS {
        assert_eq!(
            p.reordering().packet_threshold,
            39,
            "before reduction {reduction}"
        );
        for k in pn..pn + 50 {
            send(&mut p, k, t);
        }
        let before = p.cc.window();
        let (_, lost, _) = apply_ack(&mut p, &[(pn + 1, pn + 50)], t + Duration::from_millis(20));
        assert_eq!(lost, [pn], "reduction {reduction}");
        assert!(p.cc.window() < before, "reduction {reduction}");
        pn += 50;
        t += Duration::from_millis(100);
    }
    let r = p.reordering();
    assert_eq!(
        (r.packet_threshold, r.time_slack, r.spurious_losses),
        (PACKET_THRESHOLD, Duration::ZERO, 3)
    );
}
