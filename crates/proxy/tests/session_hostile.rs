//! A peer that sends what no honest peer would, to make the session hold or work without
//! bound: STREAM bytes with a gap after every byte (each a separate piece of the flow's
//! received bytes, each inserted into a sorted table), and OPENs of flow numbers with gaps
//! between them (each a separate range of the flows seen). Such packets are refused whole,
//! unacknowledged, once a flow holds `max_ranges` pieces or the record of the peer's flows
//! `max_peer_flow_ranges` gaps; the flow still moves on (bytes at its read offset are always
//! taken) and an honest peer that loses a whole path's packets in flight is never refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_common;

use braid_proxy::session::frame::{Frame, TargetRef, encode_header, parse_packet};
use braid_proxy::session::harness::{CLIENT, Harness, LinkConfig, SERVER};
use braid_proxy::session::varint::Writer;
use braid_proxy::session::{Event, FlowKind, PathConfig, Role, Session, SessionConfig};
use braid_sched_core::{FlowId, PathId, SchedulerConfig, SchedulerKind, Timestamp};
use session_common::{Bulk, Driver, bulk_config};

/// A server session with one path, and the packets a hostile client sends it.
struct Peer {
    server: Session,
    pn: u64,
    now: Timestamp,
    /// Packet numbers the server acknowledged, from the ACK frames it sent.
    acked: Vec<u64>,
}

impl Peer {
    fn new(config: SessionConfig) -> Self {
        let now = Timestamp::from_millis(1);
        let scheduler = SchedulerConfig::new(SchedulerKind::MinRtt).build();
        let mut server = Session::new(config, Role::Server, scheduler, now);
        server
            .add_path(PathId(0), PathConfig::default(), now)
            .unwrap();
        Peer {
            server,
            pn: 0,
            now,
            acked: Vec::new(),
        }
    }

    /// Sends one packet of `frames` (which must fit 1,400 bytes); returns its number.
    fn send(&mut self, frames: &[Frame<'_>]) -> u64 {
        let mut buf = [0u8; 1400];
        let mut w = Writer::new(&mut buf);
        encode_header(&mut w, self.pn).unwrap();
        for f in frames {
            f.encode(&mut w).unwrap();
        }
        let n = w.len();
        self.now += std::time::Duration::from_micros(50);
        self.server
            .handle_datagram(PathId(0), &buf[..n], self.now)
            .unwrap();
        self.pn += 1;
        self.pn - 1
    }

    /// Takes what the server sends, noting the packet numbers its ACKs cover.
    fn drain(&mut self) {
        if self.server.poll_timeout().is_some_and(|t| t <= self.now) {
            self.server.handle_timeout(self.now);
        }
        let mut buf = vec![0u8; 65_536];
        while let Some(t) = self.server.poll_transmit(self.now, &mut buf) {
            let (_, frames) = parse_packet(&buf[..t.len]).unwrap();
            for frame in frames {
                if let Ok(Frame::Ack(ack)) = frame {
                    for r in ack.ranges() {
                        self.acked.extend(r.0..=r.1);
                    }
                }
            }
        }
    }

    /// Reads everything readable on `flow`, appending it to `out`.
    fn read(&mut self, flow: FlowId, out: &mut Vec<u8>) {
        let mut buf = [0u8; 4096];
        while let Ok(Some(n)) = self.server.read(flow, &mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }
}

fn open(flow: FlowId) -> Frame<'static> {
    Frame::Open {
        flow,
        kind: FlowKind::Stream,
        target: TargetRef::Domain {
            name: "hostile.example",
            port: 443,
        },
        redundant: false,
    }
}

/// The byte at offset `i` of the test stream.
fn byte(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

#[test]
fn stream_bytes_with_gaps_are_refused_once_the_flow_holds_its_limit_and_the_flow_moves_on() {
    // Default windows (1 MiB per flow): at most 1,024 pieces. (Before the limit, 524,288
    // one-byte frames with a gap after each, sent from the top of the window down, took 88 s
    // of this machine's time, each moving the sorted table, and held 12.7 MB for the window.)
    let config = SessionConfig::default();
    let window = config.flow_receive_window;
    let mut peer = Peer::new(config);
    let flow = FlowId(0);
    peer.send(&[open(flow)]);
    let bytes: Vec<u8> = (0..window).map(byte).collect();
    // From the top of the window down: every odd offset, 150 one-byte frames a packet, 100
    // packets.
    let mut refused_pns = Vec::new();
    let mut offsets = (1..window).rev().step_by(2);
    let mut frames_sent = 0u64;
    for _ in 0..100 {
        let frames: Vec<Frame<'_>> = offsets
            .by_ref()
            .take(150)
            .map(|o| Frame::Stream {
                flow,
                offset: o,
                fin: false,
                data: &bytes[o as usize..o as usize + 1],
            })
            .collect();
        frames_sent += frames.len() as u64;
        let before = peer.server.packets_refused();
        let pn = peer.send(&frames);
        if peer.server.packets_refused() > before {
            refused_pns.push(pn);
        }
        peer.drain();
        let held = peer.server.memory_usage().receive_buffered;
        assert!(held <= 1025, "{held} one-byte pieces held");
    }
    let held = peer.server.memory_usage().receive_buffered;
    println!(
        "{frames_sent} one-byte frames with gaps: {held} held, {} of {} packets refused",
        refused_pns.len(),
        peer.pn - 1
    );
    // 1,024 pieces at most: six packets (900 pieces) taken, the seventh (1,050) and all
    // after it refused whole.
    assert_eq!(held, 900);
    assert_eq!(peer.server.packets_refused(), 94);
    // No refused packet was acknowledged; the ones taken were (once the ACK delay passed).
    peer.now += std::time::Duration::from_millis(100);
    peer.drain();
    assert!(refused_pns.iter().all(|pn| !peer.acked.contains(pn)));
    assert!((1..7).all(|pn| peer.acked.contains(&pn)));
    // One piece a packet fills the table to its limit; the packet after is refused.
    let mut pieces = 0;
    loop {
        let o = offsets.next().unwrap();
        let before = peer.server.packets_refused();
        peer.send(&[Frame::Stream {
            flow,
            offset: o,
            fin: false,
            data: &bytes[o as usize..o as usize + 1],
        }]);
        if peer.server.packets_refused() > before {
            break;
        }
        pieces += 1;
    }
    assert_eq!(pieces, 124);
    assert_eq!(peer.server.memory_usage().receive_buffered, 1024);
    // The flow moves on: bytes at the read offset are always taken, whatever the table holds
    // (here: full), and then the rest in order, each packet's frames adjoining what is held.
    let mut got = Vec::new();
    for chunk in bytes.chunks(1000).enumerate() {
        let (i, data) = chunk;
        let before = peer.server.packets_refused();
        peer.send(&[Frame::Stream {
            flow,
            offset: i as u64 * 1000,
            fin: false,
            data,
        }]);
        assert_eq!(peer.server.packets_refused(), before, "chunk {i} refused");
        peer.drain();
        peer.read(flow, &mut got);
    }
    assert_eq!(got.len(), bytes.len());
    assert!(got == bytes, "the flow's bytes differ");
}

#[test]
fn opens_of_flow_numbers_with_gaps_are_refused_once_the_record_holds_its_limit() {
    // Ten flows at most: the record of the peer's flows holds 64 ranges (at least 64).
    let config = SessionConfig {
        max_flows: 10,
        ..SessionConfig::default()
    };
    let bound = config.memory_bound();
    let mut peer = Peer::new(config);
    // Client flows are even; flows 0, 4, 8, … leave a gap (flow 2, 6, …) between each two.
    let mut refused = 0;
    for k in 0..200u64 {
        let before = peer.server.packets_refused();
        peer.send(&[open(FlowId(4 * k))]);
        if peer.server.packets_refused() > before {
            refused += 1;
        }
        peer.drain();
    }
    let opened = std::iter::from_fn(|| peer.server.poll_event())
        .filter(|e| matches!(e, Event::FlowOpened { .. }))
        .count();
    println!("200 OPENs with gaps: {opened} opened, {refused} refused");
    // Ten opened; the next ones refused by the flow limit (RESET), but recorded as seen until
    // the record holds 64 ranges; the packets of the 136 after that are refused.
    assert_eq!(opened, 10);
    assert_eq!(refused, 200 - 64);
    // An OPEN that fills a gap adds no range: taken.
    let before = peer.server.packets_refused();
    peer.send(&[open(FlowId(2))]);
    assert_eq!(peer.server.packets_refused(), before);
    assert!(peer.server.memory_usage().allocated <= bound);
}

#[test]
fn an_honest_peer_losing_a_path_with_a_full_window_in_flight_is_never_refused() {
    // Round robin over two fast paths with 4 MiB windows: when path 1 goes down, every other
    // packet in flight is lost, a hole after each packet the other path delivered.
    let mut lossy = LinkConfig::new(200.0, 40.0);
    lossy.outages = vec![(Timestamp::from_secs_f64(1.5), Timestamp::from_secs_f64(4.0))];
    let links = [LinkConfig::new(200.0, 40.0), lossy];
    let mut h = Harness::new(
        3,
        bulk_config(),
        SchedulerKind::RoundRobin,
        &links,
        PathConfig::default(),
    );
    let bytes = 120_000_000;
    let mut d = Driver::new(vec![
        Bulk::new(0, CLIENT, bytes),
        Bulk::new(1, SERVER, bytes),
    ]);
    h.run_until(Timestamp::from_secs_f64(30.0), |h| {
        if !d.all_done() {
            d.step(h);
        }
    });
    for t in &d.transfers {
        assert!(t.eof && !t.corrupt && t.received == bytes, "{t:?}");
    }
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    println!(
        "outage drops {}, refused {} / {}",
        h.stats.outage_drops,
        h.endpoints[CLIENT].packets_refused(),
        h.endpoints[SERVER].packets_refused()
    );
    assert!(h.stats.outage_drops > 1000, "{:?}", h.stats);
    assert_eq!(h.endpoints[CLIENT].packets_refused(), 0);
    assert_eq!(h.endpoints[SERVER].packets_refused(), 0);
}
