//! The send path with EdAR's redundant buffer linked beside its copies at placement (virtual
//! time over the in-memory harness: deterministic, not a timed test).

use std::collections::{BTreeSet, HashMap};

use braid_sched_core::{SchedulerConfig, SchedulerKind, Timestamp};

use super::super::harness::{BulkWriter, CLIENT, Harness, LinkConfig, SERVER};
use super::super::sent::Payload;
use super::super::{FlowKind, PathConfig, SessionConfig, Target};

/// What [`bulk`] saw of the client's packets.
struct Seen {
    /// The (path slot, stream offset) pairs a path carried in two packets.
    twice: BTreeSet<(usize, u64)>,
    placement_copies: u64,
    buffer_copies: u64,
    /// Send time of the last new-data packet (neither a copy nor a retransmission).
    last_new: Timestamp,
    /// Send time of the first buffer copy.
    first_buffer_copy: Option<Timestamp>,
}

/// A 2 MB upload with EdAR always redundant and the buffer linked, on two lossless paths
/// (20 Mbit/s at 10 ms and 20 Mbit/s at 25 ms); the receiver grants `flow_window` bytes of
/// flow credit. Every packet in the client's sent tables is seen once at each step.
fn bulk(flow_window: u64) -> Seen {
    let mut edar = SchedulerConfig::new(SchedulerKind::Edar);
    edar.set("policy", 2.0).expect("policy");
    edar.set("redundant_buffer", 1.0).expect("redundant_buffer");
    let config = SessionConfig {
        flow_send_buffer: 4 << 20,
        flow_receive_window: flow_window,
        session_receive_window: 8 << 20,
        ..SessionConfig::default()
    };
    let links = [LinkConfig::new(20.0, 10.0), LinkConfig::new(20.0, 25.0)];
    let mut h = Harness::with_scheduler(2, config, &edar, &links, PathConfig::default());
    let target = Target::Domain {
        name: "bulk.example".into(),
        port: 443,
    };
    let flow = h
        .client()
        .open_flow(FlowKind::Stream, target)
        .expect("open");
    let len = 2_000_000u64;
    let mut app = BulkWriter::new(flow, len, 16 * 1024);
    let mut buf = vec![0u8; 64 * 1024];
    let (mut received, mut eof) = (0u64, false);
    // (path slot, stream offset) of each new-data packet seen -> its packet number.
    let mut seen: HashMap<(usize, u64), u64> = HashMap::new();
    let mut out = Seen {
        twice: BTreeSet::new(),
        placement_copies: 0,
        buffer_copies: 0,
        last_new: Timestamp::ZERO,
        first_buffer_copy: None,
    };
    h.run_until(Timestamp::from_secs_f64(30.0), |h| {
        let s = &mut h.endpoints[CLIENT];
        app.write(s);
        for (slot, path) in s.paths[..s.path_end].iter().enumerate() {
            let Some(path) = path else { continue };
            for p in path.sent_packets() {
                let Payload::Stream { chunk, .. } = p.payload else {
                    continue;
                };
                if chunk.retransmit {
                    continue;
                }
                match seen.insert((slot, chunk.offset), p.pn) {
                    None => {
                        out.placement_copies += u64::from(p.placement_copy);
                        if p.copy {
                            out.buffer_copies += 1;
                            let first = out.first_buffer_copy.get_or_insert(p.time_sent);
                            *first = (*first).min(p.time_sent);
                        } else if !p.placement_copy {
                            out.last_new = out.last_new.max(p.time_sent);
                        }
                    }
                    Some(pn) if pn != p.pn => {
                        out.twice.insert((slot, chunk.offset));
                    }
                    Some(_) => {}
                }
            }
        }
        let server = &mut h.endpoints[SERVER];
        while server.poll_event().is_some() {}
        while !eof {
            match server.read(flow, &mut buf) {
                Ok(Some(0)) | Err(_) => break,
                Ok(Some(n)) => received += n as u64,
                Ok(None) => eof = true,
            }
        }
    });
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    assert!(
        eof && received == len,
        "received {received} of {len}, eof {eof}"
    );
    out
}

/// The flow window (64 KB) holds the transfer back while the paths have room: new packets are
/// copied at placement onto the path with room, and the buffer copies the rest. A packet copied
/// onto a path at placement is not copied there again by the buffer: no path carries the same
/// new stream bytes in two packets, while both kinds of copy are made.
#[test]
fn a_packet_copied_at_placement_is_not_copied_there_again_by_the_buffer() {
    let seen = bulk(64 << 10);
    assert!(
        seen.placement_copies > 0 && seen.buffer_copies > 0,
        "placement copies {}, buffer copies {}",
        seen.placement_copies,
        seen.buffer_copies
    );
    assert!(
        seen.twice.is_empty(),
        "{} packets carried bytes already on their path, first (slot, offset): {:?}",
        seen.twice.len(),
        seen.twice.iter().take(5).collect::<Vec<_>>()
    );
}

/// The buffer only takes window room no new data can use, and only while flow control holds
/// new bytes back. With a flow window larger than the transfer, new bytes can always be sent
/// until the last one is, and then none wait: the buffer sends nothing (placement still copies).
#[test]
fn the_buffer_never_takes_room_new_data_can_use() {
    let seen = bulk(4 << 20);
    assert!(seen.placement_copies > 0, "no placement copy");
    assert_eq!(
        seen.buffer_copies, 0,
        "buffer copies, the first at {:?}, the last new packet at {:?}",
        seen.first_buffer_copy, seen.last_new
    );
}

/// With a flow window below the paths' joint bandwidth-delay product, the flow is held by its
/// window while the paths have room: the buffer fills that room with copies before the
/// transfer's last new packet.
#[test]
fn the_buffer_fills_room_left_while_the_flow_window_holds_new_data() {
    let seen = bulk(64 << 10);
    let first = seen.first_buffer_copy.expect("buffer copies");
    assert!(
        first < seen.last_new,
        "first buffer copy at {first:?}, not before the last new packet at {:?}",
        seen.last_new
    );
}
