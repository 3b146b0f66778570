//! A path's `max_datagram_size` changing mid-session ([`Session::set_max_datagram_size`]): grown
//! paths carry larger packets from the next packet on, shrunk paths lose nothing (stream bytes
//! first framed for the larger size are re-framed), bad sizes are refused with an error, and
//! datagrams that no longer fit move to a path they fit or are dropped. Virtual time over the
//! harness: deterministic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod session_common;

use braid_proxy::session::config::MIN_DATAGRAM_SIZE;
use braid_proxy::session::harness::{CLIENT, Harness, LinkConfig, SERVER};
use braid_proxy::session::{FlowKind, PathConfig, PathError, Session, SessionConfig, Target};
use braid_sched_core::{PathId, SchedulerKind, Timestamp};
use session_common::{Bulk, Driver};

fn secs(s: f64) -> Timestamp {
    Timestamp::from_secs_f64(s)
}

fn config() -> SessionConfig {
    SessionConfig {
        flow_send_buffer: 2 << 20,
        flow_receive_window: 2 << 20,
        session_receive_window: 4 << 20,
        ..SessionConfig::default()
    }
}

/// Packets and bytes `side` has sent on `path` so far.
fn sent(s: &mut Session, path: u8, now: Timestamp) -> (u64, u64) {
    let st = s
        .path_status(now)
        .find(|p| p.view.id == PathId(path))
        .unwrap()
        .stats;
    (st.packets_sent, st.bytes_sent)
}

/// Average size of the packets `side` sent on `path` between two `sent` readings.
fn average(before: (u64, u64), after: (u64, u64)) -> f64 {
    (after.1 - before.1) as f64 / (after.0 - before.0).max(1) as f64
}

#[test]
fn session_set_max_datagram_size_refuses_bad_input() {
    let mut h = Harness::new(
        1,
        SessionConfig::default(),
        SchedulerKind::MinRtt,
        &[LinkConfig::new(10.0, 10.0)],
        PathConfig::default(),
    );
    let err = h
        .client()
        .set_max_datagram_size(PathId(0), MIN_DATAGRAM_SIZE - 1)
        .unwrap_err();
    assert!(
        matches!(&err, PathError::Config { path, source } if *path == PathId(0) && source.field == "max_datagram_size"),
        "{err:?}"
    );
    assert!(err.to_string().contains("max_datagram_size"), "{err}");
    assert_eq!(
        h.client().set_max_datagram_size(PathId(3), 1400),
        Err(PathError::UnknownPath(PathId(3)))
    );
    assert_eq!(
        h.client().set_max_datagram_size(PathId(200), 1400),
        Err(PathError::UnknownPath(PathId(200)))
    );
    // Refused sizes changed nothing; the smallest accepted size and u16::MAX are fine.
    let now = h.now();
    let view = h.client().path_status(now).next().unwrap().view;
    assert_eq!(view.max_datagram_size, 1200);
    h.client()
        .set_max_datagram_size(PathId(0), MIN_DATAGRAM_SIZE)
        .unwrap();
    h.client()
        .set_max_datagram_size(PathId(0), u16::MAX)
        .unwrap();
    let view = h.client().path_status(now).next().unwrap().view;
    assert_eq!(view.max_datagram_size, u16::MAX);
}

/// Two paths carry a bulk transfer each way; path 0 grows to 1452 bytes at 0.5 s (path 1 stays
/// at 1200), then path 1 shrinks to 600 bytes at 1.5 s with its larger packets on the wire lost.
#[test]
fn session_datagram_size_grows_and_shrinks_mid_transfer() {
    let links = [LinkConfig::new(20.0, 10.0), LinkConfig::new(10.0, 20.0)];
    let mut h = Harness::new(
        3,
        config(),
        SchedulerKind::MinRtt,
        &links,
        PathConfig::default(),
    );
    let bytes = 6_000_000u64;
    let mut d = Driver::new(vec![
        Bulk::new(0, CLIENT, bytes),
        Bulk::new(1, SERVER, bytes / 2),
    ]);
    let mut start = None;
    let mut grown = None;
    let mut shrunk = None;
    let mut too_large_after_shrink = 0;
    let mut received_at_shrink = 0;
    h.run_until(secs(30.0), |h| {
        if !d.all_done() {
            d.step(h);
        }
        let now = h.now();
        if start.is_none() && now >= secs(0.1) {
            start = Some(sent(h.client(), 0, now));
        }
        if grown.is_none() && now >= secs(0.5) {
            h.set_max_datagram_size(0, 1452).unwrap();
            grown = Some(sent(h.client(), 0, now));
        }
        if shrunk.is_none() && now >= secs(1.5) {
            received_at_shrink = d.transfers[0].received;
            let before = sent(h.client(), 1, now);
            let grown_path = sent(h.client(), 0, now);
            h.set_max_datagram_size(1, 600).unwrap();
            too_large_after_shrink = h.stats.too_large;
            shrunk = Some((before, grown_path));
        }
    });
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    for t in &d.transfers {
        assert!(t.eof && !t.corrupt && t.received == t.len, "{t:?}");
    }
    assert!(
        received_at_shrink > 0 && received_at_shrink < bytes,
        "the shrink must fall mid-transfer ({received_at_shrink} of {bytes})"
    );
    // Nothing larger than the new limit was offered after the shrink.
    assert_eq!(h.stats.too_large, too_large_after_shrink, "{:?}", h.stats);
    let now = h.now();
    let (before_shrink_1, before_shrink_0) = shrunk.unwrap();
    // Path 0 carried larger packets between the grow and the shrink, though path 1 was still
    // at 1200 (so chunks follow the path they are sent on, not the smallest path). Its packets
    // include ACK-only ones for the server's transfer, so the average is below the size.
    let start_avg = average(start.unwrap(), grown.unwrap());
    let grown_avg = average(grown.unwrap(), before_shrink_0);
    println!("path 0: {start_avg:.0} bytes per packet before growing, {grown_avg:.0} after");
    assert!(
        grown_avg > start_avg * 1.15,
        "path 0 averaged {start_avg:.0} bytes per packet before growing, {grown_avg:.0} after"
    );
    // Path 1 after the shrink: no packet above 600 bytes (the link refuses them, checked
    // above), and its packets are mostly full.
    let shrunk_avg = average(before_shrink_1, sent(h.client(), 1, now));
    assert!(
        shrunk_avg > 400.0 && shrunk_avg <= 600.0,
        "path 1 averaged {shrunk_avg:.0} bytes after shrinking"
    );
    let done = d
        .transfers
        .iter()
        .map(|t| t.done_at.unwrap().as_secs_f64())
        .fold(0.0, f64::max);
    // 6 + 3 MB over 30 Mbit/s of paths takes about 1.6 s in each direction; a stall of a
    // retransmission would take seconds.
    assert!(done < 6.0, "transfers ended at {done:.2} s");
}

/// Both paths shrink to the smallest size while 3 % of packets are lost at random and the
/// packets on the wire that are too large are lost as well: every byte still arrives, once.
#[test]
fn session_shrink_while_packets_are_lost_loses_nothing() {
    let mut lossy = [LinkConfig::new(20.0, 15.0), LinkConfig::new(10.0, 25.0)];
    for l in &mut lossy {
        l.loss = 0.03;
        l.reorder = 0.02;
    }
    let path = PathConfig {
        max_datagram_size: 1400,
        ..PathConfig::default()
    };
    let mut h = Harness::new(5, config(), SchedulerKind::MinRtt, &lossy, path);
    let bytes = 3_000_000u64;
    let mut d = Driver::new(vec![
        Bulk::new(0, CLIENT, bytes),
        Bulk::new(1, SERVER, bytes),
    ]);
    let mut step = 0;
    let mut lost_at_shrink = 0;
    let mut too_large = 0;
    h.run_until(secs(60.0), |h| {
        if !d.all_done() {
            d.step(h);
        }
        let now = h.now();
        // Path 0 shrinks at 0.6 s, path 1 at 0.7 s, and path 0 again at 0.9 s.
        let plan = [
            (0.6, 0, 1000),
            (0.7, 1, MIN_DATAGRAM_SIZE),
            (0.9, 0, MIN_DATAGRAM_SIZE),
        ];
        if let Some(&(at, p, size)) = plan.get(step)
            && now >= secs(at)
        {
            h.set_max_datagram_size(p, size).unwrap();
            step += 1;
            lost_at_shrink = h.stats.too_large;
            too_large = h.stats.too_large;
        }
    });
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert_eq!(step, 3);
    for t in &d.transfers {
        assert!(t.eof && !t.corrupt && t.received == t.len, "{t:?}");
    }
    assert!(
        lost_at_shrink > 0,
        "the shrinks must catch large packets on the wire ({:?})",
        h.stats
    );
    assert_eq!(
        h.stats.too_large, too_large,
        "oversize packets after a shrink"
    );
    assert!(
        h.stats.lost > 100,
        "random loss must hit the transfer: {:?}",
        h.stats
    );
    let done = d
        .transfers
        .iter()
        .map(|t| t.done_at.unwrap().as_secs_f64())
        .fold(0.0, f64::max);
    assert!(done < 30.0, "transfers ended at {done:.2} s");
}

/// A flow to a 255-byte domain name opens and carries data over paths of the smallest size
/// (its OPEN and first stream bytes fit one packet).
#[test]
fn session_longest_open_fits_the_smallest_paths() {
    let path = PathConfig {
        max_datagram_size: MIN_DATAGRAM_SIZE,
        ..PathConfig::default()
    };
    let mut h = Harness::new(
        9,
        SessionConfig::default(),
        SchedulerKind::MinRtt,
        &[LinkConfig::new(10.0, 10.0)],
        path,
    );
    let name = "a".repeat(255);
    let flow = h
        .client()
        .open_flow(FlowKind::Stream, Target::Domain { name, port: 80 })
        .unwrap();
    let data = vec![7u8; 50_000];
    assert_eq!(h.client().write(flow, &data).unwrap(), data.len());
    h.client().finish(flow).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 4096];
    let mut eof = false;
    h.run_until(secs(10.0), |h| {
        while !eof {
            match h.server().read(flow, &mut buf) {
                Ok(Some(0)) | Err(_) => break,
                Ok(Some(n)) => got.extend_from_slice(&buf[..n]),
                Ok(None) => eof = true,
            }
        }
        while h.server().poll_event().is_some() {}
    });
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert!(
        eof,
        "flow never finished ({} of {} bytes)",
        got.len(),
        data.len()
    );
    assert_eq!(got, data);
    assert_eq!(h.stats.too_large, 0);
}

/// Queued datagrams that no longer fit the path the scheduler picks go on a path they fit;
/// when they fit no path they are dropped and the stream beside them keeps flowing.
#[test]
fn session_datagrams_follow_a_shrunk_path() {
    let links = [LinkConfig::new(20.0, 5.0), LinkConfig::new(20.0, 30.0)];
    let mut h = Harness::new(
        11,
        config(),
        SchedulerKind::MinRtt,
        &links,
        PathConfig::default(),
    );
    let flow = h
        .client()
        .open_flow(
            FlowKind::Datagram,
            Target::Domain {
                name: "dgram.example".into(),
                port: 53,
            },
        )
        .unwrap();
    // The fast path (MinRtt's choice) shrinks below the datagrams.
    h.set_max_datagram_size(0, 600).unwrap();
    let payload = vec![1u8; 900];
    let mut delivered = 0;
    let mut buf = vec![0u8; 2048];
    let mut d = Driver::new(vec![Bulk::new(0, CLIENT, 500_000)]);
    let mut queued = 0;
    h.run_until(secs(2.5), |h| {
        d.step(h);
        if queued < 200 && h.now() >= secs(0.01 * queued as f64) {
            let now = h.now();
            h.client().send_datagram(flow, &payload, None, now).unwrap();
            queued += 1;
        }
        while let Some(Ok(Some(n))) = Some(h.server().recv_datagram(flow, &mut buf)) {
            assert_eq!(&buf[..n], &payload[..]);
            delivered += 1;
        }
    });
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert_eq!(queued, 200);
    assert_eq!(delivered, 200, "every datagram goes on the larger path");
    assert_eq!(h.stats.too_large, 0);
    // Now both paths are too small for them: they are dropped, the stream finishes.
    h.set_max_datagram_size(1, 600).unwrap();
    let mut d2 = Driver::new(vec![Bulk::new(1, CLIENT, 500_000)]);
    let start = h.now();
    h.run_until(start + std::time::Duration::from_secs(3), |h| {
        d.step(h);
        d2.step(h);
        if h.now() < start + std::time::Duration::from_millis(500) {
            let now = h.now();
            let _ = h.client().send_datagram(flow, &payload, None, now);
        }
        while let Some(Ok(Some(_))) = Some(h.server().recv_datagram(flow, &mut buf)) {
            delivered += 1;
        }
    });
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert_eq!(delivered, 200, "no datagram fits any path now");
    assert_eq!(h.stats.too_large, 0);
    assert_eq!(
        h.client().memory_usage().datagrams_queued,
        0,
        "dropped, not stuck"
    );
    for t in d.transfers.iter().chain(&d2.transfers) {
        assert!(t.eof && !t.corrupt && t.received == t.len, "{t:?}");
    }
}

/// A stream chunk the scheduler sends on one path fills that path's packet: the headers as
/// encoded for this packet (not their largest sizes) and room for an ACK only while the path
/// has one to piggyback. With 1414-byte packets (the daemon's loopback paths) chunks sized for
/// the largest headers and an ACK left about 45 bytes of every packet empty.
#[test]
fn stream_packets_fill_the_path_datagram_size() {
    let path = PathConfig {
        max_datagram_size: 1414,
        ..PathConfig::default()
    };
    let mut h = Harness::new(
        1,
        config(),
        SchedulerKind::MinRtt,
        &[LinkConfig::new(100.0, 10.0)],
        path,
    );
    let now = h.now();
    let s = h.client();
    let flow = s
        .open_flow(
            FlowKind::Stream,
            Target::Addr("192.0.2.1:9".parse().unwrap()),
        )
        .unwrap();
    let data = vec![7u8; 64 * 1024];
    assert_eq!(s.write(flow, &data).unwrap(), data.len());
    let mut buf = vec![0u8; 2048];
    let mut sizes = Vec::new();
    while let Some(t) = s.poll_transmit(now, &mut buf) {
        sizes.push(t.len);
        if sizes.len() == 8 {
            break;
        }
    }
    assert!(sizes.iter().all(|&n| n <= 1414), "{sizes:?}");
    assert!(
        sizes.iter().filter(|&&n| n == 1414).count() >= 4,
        "data packets are not full: {sizes:?}"
    );
}

/// QUIC-sized datagrams (a 1,200-byte QUIC packet with its SOCKS5 UDP header), with a peer that
/// does not reassemble pieces (`session_fragments` has the other case): dropped and counted
/// while the paths take the packets of a path that just joined (1,200 bytes here, 1,162 in the
/// daemon), carried once their MTU discovery has grown them; the longest datagram that goes
/// whole fits a path at quinn's largest datagram exactly, and the longest the session accepts
/// (a 1,500-byte MTU's UDP payload with a SOCKS5 header) fits no path whole and is dropped.
#[test]
fn quic_sized_datagrams_go_once_a_path_takes_them() {
    use braid_proxy::session::config::{
        DEFAULT_MAX_DATAGRAM_PAYLOAD, LARGEST_QUIC_DATAGRAM, LONGEST_WHOLE_DATAGRAM,
    };
    let links = [LinkConfig::new(20.0, 5.0), LinkConfig::new(20.0, 10.0)];
    let mut h = Harness::new(
        12,
        config(),
        SchedulerKind::MinRtt,
        &links,
        PathConfig::default(),
    );
    let flow = session_common::open_datagram_flow(&mut h);
    let quic = vec![3u8; 1210];
    let longest = vec![4u8; LONGEST_WHOLE_DATAGRAM];
    let mut buf = vec![0u8; 2048];
    let mut received = Vec::new();
    let mut round = |h: &mut Harness, until: f64, received: &mut Vec<usize>| {
        let now = h.now();
        for _ in 0..10 {
            h.client().send_datagram(flow, &quic, None, now).unwrap();
        }
        h.client().send_datagram(flow, &longest, None, now).unwrap();
        h.run_until(secs(until), |h| {
            while let Some(Ok(Some(n))) = Some(h.server().recv_datagram(flow, &mut buf)) {
                received.push(n);
            }
        });
    };
    round(&mut h, 0.5, &mut received);
    assert!(received.is_empty(), "{received:?}");
    assert_eq!(h.client().datagrams_dropped(), 11);
    for p in 0..2 {
        h.set_max_datagram_size(p, LARGEST_QUIC_DATAGRAM as u16)
            .unwrap();
    }
    round(&mut h, 1.0, &mut received);
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert_eq!(h.stats.too_large, 0);
    received.sort_unstable();
    let mut want = vec![1210; 10];
    want.push(LONGEST_WHOLE_DATAGRAM);
    assert_eq!(received, want);
    assert_eq!(h.client().datagrams_dropped(), 11);
    let now = h.now();
    h.client()
        .send_datagram(flow, &vec![5; LONGEST_WHOLE_DATAGRAM + 1], None, now)
        .unwrap();
    h.client()
        .send_datagram(flow, &vec![6; DEFAULT_MAX_DATAGRAM_PAYLOAD], None, now)
        .unwrap();
    h.run_until(secs(1.5), |_| {});
    assert_eq!(h.client().datagrams_dropped(), 13);
    assert_eq!(h.client().datagrams_split(), 0);
    assert!(
        h.client()
            .send_datagram(flow, &vec![0; DEFAULT_MAX_DATAGRAM_PAYLOAD + 1], None, now)
            .is_err()
    );
    assert_eq!(h.client().datagrams_dropped(), 14);
}
