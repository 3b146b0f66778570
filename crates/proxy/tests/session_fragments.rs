//! Datagrams longer than every path takes, cut into DATAGRAM_FRAGMENT pieces when the peer
//! reassembles them (`Session::set_peer_reassembles`): they arrive whole and exactly once, a
//! lost piece loses only its datagram, and without the peer's word they are dropped as before.
//! Beside them, what the same receive and send paths now also guarantee: copies of whole
//! datagrams are delivered once, and a flow's first datagrams arrive when its OPEN does not fit
//! beside them or comes after them. Virtual time over the harness: deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_common;

use braid_proxy::session::config::DEFAULT_MAX_DATAGRAM_PAYLOAD;
use braid_proxy::session::harness::{Harness, LinkConfig};
use braid_proxy::session::{FlowKind, PathConfig, Session, SessionConfig, Target};
use braid_sched_core::{FlowId, SchedulerKind};
use proptest::prelude::*;
use session_common::open_datagram_flow;

/// Datagram `i` of `len` bytes: its number, then a pattern of it.
fn datagram(i: u32, len: usize) -> Vec<u8> {
    let mut d: Vec<u8> = (0..len).map(|k| (k as u32 * 7 + i) as u8).collect();
    d[..4].copy_from_slice(&i.to_be_bytes());
    d
}

struct Run {
    h: Harness,
    flow: FlowId,
    /// Both ends' `memory_bound`.
    bound: u64,
}

impl Run {
    /// Two paths of `sizes` bytes on `links`, the client told the server reassembles or not.
    fn new(scheduler: SchedulerKind, links: &[LinkConfig], sizes: [u16; 2], peer: bool) -> Self {
        Self::with(21, SessionConfig::default(), scheduler, links, sizes, peer)
    }

    fn with(
        seed: u64,
        config: SessionConfig,
        scheduler: SchedulerKind,
        links: &[LinkConfig],
        sizes: [u16; 2],
        peer: bool,
    ) -> Self {
        let bound = config.memory_bound();
        let mut h = Harness::new(seed, config, scheduler, links, PathConfig::default());
        for (p, &size) in sizes.iter().enumerate() {
            h.set_max_datagram_size(p, size).unwrap();
        }
        h.client().set_peer_reassembles(peer);
        let flow = open_datagram_flow(&mut h);
        Run { h, flow, bound }
    }

    /// Sends `count` datagrams of the `lengths` in turn, `gap_ms` apart, with `budget_us`;
    /// returns what the server read, in arrival order.
    fn send(
        &mut self,
        count: u32,
        lengths: &[usize],
        budget_us: Option<u32>,
        gap_ms: u64,
    ) -> Vec<Vec<u8>> {
        let mut received = Vec::new();
        let mut buf = vec![0u8; 4096];
        for i in 0..count {
            let now = self.h.now();
            let d = datagram(i, lengths[i as usize % lengths.len()]);
            self.h
                .client()
                .send_datagram(self.flow, &d, budget_us, now)
                .unwrap();
            self.run(gap_ms, &mut received, &mut buf);
        }
        self.run(500, &mut received, &mut buf);
        assert!(self.h.errors.is_empty(), "{:?}", self.h.errors);
        assert_eq!(self.h.stats.too_large, 0);
        received
    }

    /// Runs `ms` of virtual time, reading what the server receives, and checks at every step
    /// that both ends hold no more memory than their configuration bounds.
    fn run(&mut self, ms: u64, received: &mut Vec<Vec<u8>>, buf: &mut [u8]) {
        let until = self.h.now() + std::time::Duration::from_millis(ms);
        let flow = self.flow;
        let bound = self.bound;
        self.h.run_until(until, |h| {
            while let Ok(Some(n)) = h.server().recv_datagram(flow, buf) {
                received.push(buf[..n].to_vec());
            }
            for s in &h.endpoints {
                let used = s.memory_usage().allocated;
                assert!(used <= bound, "{used} bytes held, bound {bound}");
            }
        });
    }
}

/// Every datagram received is one that was sent, whole, and none twice; returns their numbers.
fn check_whole_and_once(received: &[Vec<u8>], lengths: &[usize]) -> Vec<u32> {
    let mut seen = Vec::new();
    for d in received {
        let i = u32::from_be_bytes(d[..4].try_into().unwrap());
        assert_eq!(
            d,
            &datagram(i, lengths[i as usize % lengths.len()]),
            "datagram {i} came back changed"
        );
        seen.push(i);
    }
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "a datagram came twice: {seen:?}");
    seen
}

const LENGTHS: [usize; 4] = [1210, DEFAULT_MAX_DATAGRAM_PAYLOAD, 1100, 2000];

fn links() -> [LinkConfig; 2] {
    [LinkConfig::new(20.0, 5.0), LinkConfig::new(20.0, 10.0)]
}

#[test]
fn datagrams_longer_than_the_paths_arrive_whole_in_pieces() {
    // Paths as they join in the daemon (1,162 bytes) and an IPv6 path at the 1,280 minimum.
    let mut run = Run::new(SchedulerKind::MinRtt, &links(), [1162, 1232], true);
    let lengths = &LENGTHS[..3];
    let received = run.send(90, lengths, None, 2);
    let seen = check_whole_and_once(&received, lengths);
    assert_eq!(seen.len(), 90, "lossless links: every datagram arrives");
    // 1210 and 1494 bytes fit neither path; 1100 fits both whole.
    let c = run.h.client();
    assert_eq!((c.datagrams_split(), c.datagrams_dropped()), (60, 0));
    assert_eq!(run.h.server().datagrams_reassembled(), 60);
    // Longer than the session takes: refused at the API as before, not cut.
    let now = run.h.now();
    assert!(
        run.h
            .client()
            .send_datagram(run.flow, &datagram(0, LENGTHS[3]), None, now)
            .is_err()
    );
}

#[test]
fn without_the_peers_word_long_datagrams_are_dropped_as_before() {
    let mut run = Run::new(SchedulerKind::MinRtt, &links(), [1162, 1232], false);
    let lengths = &LENGTHS[..3];
    let received = run.send(30, lengths, None, 2);
    let seen = check_whole_and_once(&received, lengths);
    assert!(seen.iter().all(|i| i % 3 == 2), "{seen:?}");
    assert_eq!(seen.len(), 10);
    let c = run.h.client();
    assert_eq!((c.datagrams_split(), c.datagrams_dropped()), (0, 20));
}

#[test]
fn the_smallest_path_sets_the_pieces_and_copies_arrive_once() {
    // A path at the smallest size a path may have: the longest datagram goes in 5 pieces, each
    // of which the redundant scheduler sends on both paths.
    let mut run = Run::new(SchedulerKind::Redundant, &links(), [400, 1400], true);
    let lengths = &LENGTHS[..2];
    let received = run.send(40, lengths, Some(200_000), 2);
    let seen = check_whole_and_once(&received, lengths);
    // 1210 bytes fit the 1400-byte path whole: those go whole on it alone (redundant copies
    // only onto the paths they fit); 1494 do not, so they go in pieces (five of 298-299 bytes).
    assert_eq!(seen.len(), 40);
    assert_eq!(run.h.client().datagrams_split(), 20);
    assert_eq!(run.h.server().datagrams_reassembled(), 20);
}

#[test]
fn a_lost_piece_loses_its_datagram_only() {
    let mut lossy = links();
    for l in &mut lossy {
        l.loss = 0.1;
    }
    let mut run = Run::new(SchedulerKind::MinRtt, &lossy, [1162, 1162], true);
    let lengths = &LENGTHS[..2];
    // 10 ms apart: the windows, shrunk by the losses, carry them all.
    let received = run.send(400, lengths, None, 10);
    let seen = check_whole_and_once(&received, lengths);
    // Two pieces each at 10 % loss: about 81 % arrive.
    assert!(
        (280..=370).contains(&seen.len()),
        "{} of 400 arrived",
        seen.len()
    );
    assert_eq!(run.h.client().datagrams_split(), 400);
    assert_eq!(run.h.server().datagrams_reassembled(), seen.len() as u64);
}

/// Whole datagrams that a redundant scheduler sends on both paths, over links that also
/// duplicate packets: each is delivered once (every copy was, until 23 Nov 2026).
#[test]
fn copies_of_whole_datagrams_arrive_once() {
    let mut dup = links();
    for l in &mut dup {
        l.duplicate = 0.2;
    }
    let mut run = Run::new(SchedulerKind::Redundant, &dup, [1414, 1414], true);
    let received = run.send(50, &[500, 1000], None, 10);
    assert_eq!(check_whole_and_once(&received, &[500, 1000]).len(), 50);
    assert!(run.h.stats.duplicated > 0);
}

/// A flow's first datagrams, each too long for its OPEN (to a 200-byte domain name) to fit
/// beside it on any path, 40 at once on windows grown by another flow: the OPEN goes first on
/// its own, so the peer knows the flow when they come. (It used to go after them, when a packet had room, and the peer dropped
/// the datagrams before it; keeping the 16 latest for a flow not yet opened saves only those.)
#[test]
fn a_first_burst_without_room_for_its_open_still_arrives() {
    for peer in [false, true] {
        let mut run = Run::new(SchedulerKind::MinRtt, &links(), [1261, 1261], peer);
        // Another flow's 2,000 datagrams grow the windows first.
        let warm = run.send(2000, &[1000], None, 1);
        assert_eq!(warm.len(), 2000);
        let now = run.h.now();
        let windows: Vec<u64> = run
            .h
            .client()
            .path_status(now)
            .map(|p| p.view.cwnd)
            .collect();
        let flow = run
            .h
            .client()
            .open_flow(
                FlowKind::Datagram,
                Target::Domain {
                    name: format!("{}.example", "a".repeat(192)),
                    port: 443,
                },
            )
            .unwrap();
        for i in 0..40 {
            run.h
                .client()
                .send_datagram(flow, &datagram(i, 1050), None, now)
                .unwrap();
        }
        run.flow = flow;
        let received = run.send(0, &[1050], None, 10);
        let seen = check_whole_and_once(&received, &[1050]);
        assert_eq!(seen.len(), 40, "windows {windows:?}: {seen:?}");
    }
}

/// The OPEN of a flow overtaken by the flow's first datagram (another path, reordering): the
/// receiver keeps the datagram until the OPEN comes (it used to drop it). Two sessions driven
/// by hand, the client's first two packets (the OPEN, the first datagram) handed over swapped.
#[test]
fn a_datagram_that_overtakes_its_open_waits_for_it() {
    use braid_proxy::session::{Event, Role};
    use braid_sched_core::{PathId, SchedulerConfig, Timestamp};
    let now = Timestamp::ZERO;
    let scheduler = SchedulerConfig::new(SchedulerKind::MinRtt);
    let mut client = Session::new(
        SessionConfig::default(),
        Role::Client,
        scheduler.build(),
        now,
    );
    let mut server = Session::new(
        SessionConfig::default(),
        Role::Server,
        scheduler.build(),
        now,
    );
    let path = PathConfig {
        max_datagram_size: 546,
        ..PathConfig::default()
    };
    client.add_path(PathId(0), path, now).unwrap();
    server.add_path(PathId(0), path, now).unwrap();
    let flow = client
        .open_flow(
            FlowKind::Datagram,
            Target::Addr("192.0.2.1:443".parse().unwrap()),
        )
        .unwrap();
    // 502 bytes fit the path, but not with the OPEN beside them: the OPEN goes first.
    let (first, second) = (datagram(0, 502), datagram(1, 502));
    client.send_datagram(flow, &first, None, now).unwrap();
    client.send_datagram(flow, &second, None, now).unwrap();
    let mut buf = vec![0u8; 2048];
    let mut packets = Vec::new();
    while let Some(t) = client.poll_transmit(now, &mut buf) {
        packets.push(buf[..t.len].to_vec());
    }
    assert_eq!(packets.len(), 3);
    for i in [1, 2, 0] {
        server.handle_datagram(PathId(0), &packets[i], now).unwrap();
    }
    let mut got = Vec::new();
    while let Some(e) = server.poll_event() {
        if let Event::DatagramReceived(f) = e {
            while let Ok(Some(n)) = server.recv_datagram(f, &mut buf) {
                got.push(buf[..n].to_vec());
            }
        }
    }
    got.sort();
    let mut want = vec![first, second];
    want.sort();
    assert_eq!(got, want);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any path sizes, datagram lengths, lossy, reordering and duplicating links, and
    /// schedulers that copy or spread: whatever arrives arrives whole and once, the memory bound
    /// holds, and on lossless links everything arrives.
    #[test]
    fn pieces_always_make_whole_datagrams_once(
        seed in 0u64..1_000,
        sizes in [400u16..1_500, 400u16..1_500],
        lengths in proptest::collection::vec(4usize..=DEFAULT_MAX_DATAGRAM_PAYLOAD, 1..6),
        loss in prop_oneof![Just(0.0), 0.0..0.1f64],
        reorder in prop_oneof![Just(0.0), 0.0..0.3f64],
        duplicate in prop_oneof![Just(0.0), 0.0..0.1f64],
        scheduler in prop_oneof![
            Just(SchedulerKind::MinRtt),
            Just(SchedulerKind::RoundRobin),
            Just(SchedulerKind::Redundant),
        ],
    ) {
        let mut links = links();
        for l in &mut links {
            l.loss = loss;
            l.reorder = reorder;
            l.reorder_delay = std::time::Duration::from_millis(8);
            l.duplicate = duplicate;
        }
        let config = SessionConfig {
            max_flows: 4,
            datagram_send_queue: 16,
            datagram_receive_queue: 8,
            ..SessionConfig::default()
        };
        let mut run = Run::with(seed, config, scheduler, &links, sizes, true);
        // One datagram per 10 ms: well within what the windows carry even when reordering
        // makes the senders declare packets lost (the send queue would fill at 2 ms).
        let received = run.send(60, &lengths, None, 10);
        let seen = check_whole_and_once(&received, &lengths);
        let c = run.h.client();
        prop_assert!(c.datagrams_split() <= 60);
        if loss == 0.0 {
            // Every datagram fits a path whole or in at most 4 pieces of the smallest path.
            prop_assert_eq!(seen.len(), 60, "split {}", c.datagrams_split());
        }
    }
}

/// A client that takes datagrams of up to 9,000 bytes and a server of the default 1,494 (their
/// files differ): once each told the other (DATAGRAM_LIMIT), the client refuses a 4,000-byte
/// datagram at once and counts it, instead of sending pieces the server drops; shorter ones
/// cross. Without the news (an older peer) the same datagram goes out in pieces and is lost at
/// the server without a word.
#[test]
fn each_end_sends_no_datagram_longer_than_the_peer_takes_once_told() {
    use braid_proxy::session::harness::{CLIENT, SERVER};
    use braid_proxy::session::{Event, FlowError};
    use braid_sched_core::SchedulerConfig;
    for announce in [true, false] {
        let long = SessionConfig {
            max_datagram_payload: 9_000,
            ..SessionConfig::default()
        };
        let mut h = Harness::with_configs(
            4,
            [long, SessionConfig::default()],
            &SchedulerConfig::new(SchedulerKind::MinRtt),
            &[LinkConfig::new(20.0, 10.0)],
            PathConfig::default(),
        );
        for side in [CLIENT, SERVER] {
            h.endpoints[side].set_peer_reassembles(true);
            if announce {
                h.endpoints[side].announce_datagram_limit();
            }
        }
        let flow = open_datagram_flow(&mut h);
        h.run_until(h.now() + std::time::Duration::from_millis(100), |_| {});
        let heard: Vec<_> = [CLIENT, SERVER]
            .map(|side| {
                std::iter::from_fn(|| h.endpoints[side].poll_event())
                    .filter_map(|e| match e {
                        Event::PeerDatagramLimit(max) => Some(max),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
            })
            .into();
        let now = h.now();
        let sent = h
            .client()
            .send_datagram(flow, &datagram(1, 4_000), None, now);
        h.client()
            .send_datagram(flow, &datagram(2, 1_000), None, now)
            .unwrap();
        let mut received = Vec::new();
        let mut buf = vec![0u8; 16_384];
        h.run_until(h.now() + std::time::Duration::from_millis(200), |h| {
            while let Ok(Some(n)) = h.server().recv_datagram(flow, &mut buf) {
                received.push(n);
            }
        });
        assert!(h.errors.is_empty(), "{:?}", h.errors);
        if announce {
            assert_eq!(heard, [vec![DEFAULT_MAX_DATAGRAM_PAYLOAD], vec![9_000]]);
            assert_eq!(
                h.client().peer_datagram_limit(),
                Some(DEFAULT_MAX_DATAGRAM_PAYLOAD)
            );
            assert_eq!(
                sent,
                Err(FlowError::DatagramTooLarge {
                    len: 4_000,
                    max: DEFAULT_MAX_DATAGRAM_PAYLOAD
                })
            );
            assert_eq!(h.client().datagrams_dropped(), 1);
            assert_eq!(h.client().datagrams_split(), 0, "nothing cut for nothing");
        } else {
            assert!(heard.iter().all(Vec::is_empty), "{heard:?}");
            assert_eq!(sent, Ok(()));
            assert_eq!(h.client().datagrams_dropped(), 0);
            assert_eq!(h.client().datagrams_split(), 1);
        }
        // Either way only the short one arrives.
        assert_eq!(received, [1_000], "announce {announce}");
    }
}
