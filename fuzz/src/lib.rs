//! The bodies of braid's fuzz targets, shared by the libFuzzer binaries (`fuzz_targets/`, run
//! with `cargo +nightly fuzz run <target>`) and the stable-Rust smoke pass (`tests/smoke.rs`, run
//! by `cargo test`), so that both exercise exactly the same code: `frame_decoder` (session
//! packets) and `join_decoder` (the path join message).

use braid_proxy::session::frame::{Frame, parse_packet};
use braid_proxy::session::harness::{Harness, LinkConfig};
use braid_proxy::session::varint::Writer;
use braid_proxy::session::{PathConfig, SessionConfig};
use braid_sched_core::{PathId, SchedulerKind, Timestamp};

/// The `frame_decoder` target: decode a packet; every frame that decodes must re-encode to
/// bytes that decode to the same frame; the decoder must never panic. Then feed the bytes to a
/// live session, which must reject or accept them without panicking.
pub fn frame_decoder(data: &[u8]) {
    if let Ok((_, frames)) = parse_packet(data) {
        for frame in frames {
            let Ok(frame) = frame else { break };
            if let Frame::Ack(ack) = frame {
                // Ranges are validated at decode time: iterating cannot fail or loop forever.
                assert!(ack.ranges().count() <= 65);
            }
            let mut buf = [0u8; 2048];
            let mut w = Writer::new(&mut buf);
            if frame.encode(&mut w).is_ok() {
                let len = w.len();
                let mut r = braid_proxy::session::varint::Reader::new(&buf[..len]);
                let again = Frame::decode(&mut r);
                assert_eq!(again, Ok(frame), "re-encoded frame decodes differently");
            }
        }
    }
    let config = SessionConfig {
        max_flows: 4,
        max_sent_packets: 64,
        datagram_send_queue: 8,
        datagram_receive_queue: 8,
        flow_send_buffer: 4096,
        flow_receive_window: 4096,
        session_receive_window: 8192,
        ..SessionConfig::default()
    };
    let mut h = Harness::new(
        0,
        config,
        SchedulerKind::MinRtt,
        &[LinkConfig::new(0.0, 1.0)],
        PathConfig::default(),
    );
    let now = Timestamp::from_millis(1);
    let _ = h.server().handle_datagram(PathId(0), data, now);
    let _ = h.server().handle_datagram(PathId(1), data, now);
    h.flush();
}

/// The `join_decoder` target: decode a JOIN (the first message of every path connection, sent
/// before the client is authenticated); the decoder must never panic, a decoded JOIN is never
/// longer than [`MAX_JOIN`](braid_proxy::transport::join::MAX_JOIN), re-encodes to a message
/// that decodes to the same JOIN, and its MAC check answers (true only for the right key).
pub fn join_decoder(data: &[u8]) {
    use braid_proxy::transport::join::{Join, MAX_JOIN, compute_mac, verify_mac};
    let Ok(join) = Join::decode(data) else {
        return;
    };
    assert!(data.len() <= MAX_JOIN, "a {}-byte JOIN decoded", data.len());
    assert!(!join.user.is_empty() && !join.link_name.is_empty() && join.weight > 0);
    assert_eq!(
        Join::decode(&join.encode()),
        Ok(join.clone()),
        "re-encoded JOIN differs"
    );
    let key = [0x42; 32];
    let exporter = [0x17; 32];
    // Unknown users are always refused; the MAC in the input is almost never the right one.
    assert!(!verify_mac(None, &exporter, &join));
    let mut signed = join;
    signed.mac = compute_mac(&key, &exporter, &signed.session_id, signed.path);
    assert!(verify_mac(Some(&key), &exporter, &signed));
    assert!(!verify_mac(Some(&[0x43; 32]), &exporter, &signed));
}
