//! The bodies of braid's fuzz targets, shared by the libFuzzer binaries (`fuzz_targets/`, run
//! with `cargo +nightly fuzz run --features libfuzzer <target>` from `fuzz/`) and the
//! stable-Rust smoke pass (`tests/smoke.rs`, run by `cargo test`), so that both exercise
//! exactly the same code: `frame_decoder` (session packets), `session_peer` (a broken or
//! hostile peer, packet after packet), `join_decoder` (the path join message),
//! `http_response` (an origin server's answer to a forwarded HTTP request) and `dns_answer`
//! (a DNS answer the client learns names from).

use std::time::Duration;

use braid_proxy::session::config::{DEFAULT_MAX_DATAGRAM_PAYLOAD, LONGEST_FRAGMENTED_DATAGRAM};
use braid_proxy::session::frame::{Frame, parse_packet};
use braid_proxy::session::harness::{Harness, LinkConfig};
use braid_proxy::session::varint::Writer;
use braid_proxy::session::{Event, FlowKind, PathConfig, Role, Session, SessionConfig, Target};
use braid_sched_core::{FlowId, PathId, SchedulerConfig, SchedulerKind, Timestamp};

/// The small session the targets talk to: few flows and short buffers, so that limits are met;
/// flow windows and send buffers that grow (and shrink), as in the daemons.
pub fn fuzz_config() -> SessionConfig {
    SessionConfig {
        max_flows: 4,
        max_sent_packets: 64,
        datagram_send_queue: 8,
        datagram_receive_queue: 8,
        flow_send_buffer: 4096,
        flow_send_buffer_max: 16384,
        flow_receive_window: 4096,
        flow_receive_window_max: 16384,
        session_receive_window: 8192,
        ..SessionConfig::default()
    }
}

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
    let mut h = Harness::new(
        0,
        fuzz_config(),
        SchedulerKind::MinRtt,
        &[LinkConfig::new(0.0, 1.0)],
        PathConfig::default(),
    );
    let now = Timestamp::from_millis(1);
    let _ = h.server().handle_datagram(PathId(0), data, now);
    let _ = h.server().handle_datagram(PathId(1), data, now);
    h.flush();
}

/// The schedulers [`session_peer`] picks from (by the script's first byte).
pub const SESSION_PEER_SCHEDULERS: [SchedulerKind; 8] = [
    SchedulerKind::MinRtt,
    SchedulerKind::RoundRobin,
    SchedulerKind::Redundant,
    SchedulerKind::Edf,
    SchedulerKind::Peekaboo,
    SchedulerKind::Olms,
    SchedulerKind::Edar,
    SchedulerKind::Falcon,
];

/// Steps of a [`session_peer`] script (the low three bits of a step's first byte).
pub mod step {
    /// Ops 0-3: a packet from the peer. Then: the path (bits 3-4 of the op byte: paths 0, 1
    /// and 3 are attached, path 1 comes and goes with [`PATHS`] steps, path 2 is unknown), a
    /// `u16` length (little endian) and that many bytes (fewer at the script's end).
    pub const PACKET_MAX: u8 = 3;
    /// Time passes: one byte, milliseconds (0-255), then 1 ms more.
    pub const WAIT: u8 = 4;
    /// The application writes on one of its flows: a byte choosing the flow, a byte giving the
    /// length (times 8 bytes, or 40 with the daemons' largest datagram limit: some datagrams
    /// are longer than any path, some than the limit).
    pub const WRITE: u8 = 5;
    /// The application finishes (even byte) or resets (odd byte) one of its flows; the byte
    /// also chooses the flow.
    pub const END: u8 = 6;
    /// The application or the daemon does something else, chosen by bits 3-5 of the op byte:
    /// open a stream (0) or datagram (1) flow, remove path 1 (2), attach it again (3), set a
    /// path's datagram size (4, a byte: path in bit 0, size `1000 + 2 × byte`), close the
    /// session (5); 6-7 do nothing. One byte follows in every case.
    pub const PATHS: u8 = 7;
}

/// The `session_peer` target: a session (client or server, by the first byte's bit 0, with a
/// scheduler chosen by bits 1-3 from [`SESSION_PEER_SCHEDULERS`], the peer's reassembly word
/// by bit 4, and by bit 5 the datagram limit: the default, or the largest `[session]
/// max_udp_payload` gives, [`LONGEST_FRAGMENTED_DATAGRAM`]) fed a script of [`step`]s: packets from a peer that may lie about anything
/// (flows it never opened, offsets beyond its credit, ACKs of packets never sent, pieces that
/// disagree, paths that do not exist), time passing, and its own application writing, reading,
/// finishing and resetting flows while paths come and go. After every step, the session answers
/// (everything it wants to send is taken, as the daemon does) and its application reads
/// everything readable. Checked after every step: no panic; the memory the session holds stays
/// within [`SessionConfig::memory_bound`], its flows within twice `max_flows` (refused ones
/// wait for their RESET's acknowledgement) and its received bytes within the session window;
/// the session's sending stops by itself (at most 4,096 packets in one go).
pub fn session_peer(data: &[u8]) {
    let Some((&setup, mut script)) = data.split_first() else {
        return;
    };
    let role = if setup & 1 == 0 {
        Role::Server
    } else {
        Role::Client
    };
    let kind = SESSION_PEER_SCHEDULERS[usize::from(setup >> 1) % SESSION_PEER_SCHEDULERS.len()];
    let large = setup & 0x20 != 0;
    let config = SessionConfig {
        max_datagram_payload: if large {
            LONGEST_FRAGMENTED_DATAGRAM
        } else {
            DEFAULT_MAX_DATAGRAM_PAYLOAD
        },
        ..fuzz_config()
    };
    let write_unit = if large { 40 } else { 8 };
    let bound = config.memory_bound();
    let mut now = Timestamp::from_millis(1);
    let mut s = Session::new(
        config.clone(),
        role,
        SchedulerConfig::new(kind).build(),
        now,
    );
    for id in [PathId(0), PathId(1), PathId(3)] {
        if let Err(e) = s.add_path(id, PathConfig::default(), now) {
            panic!("path {id:?} refused: {e}");
        }
    }
    s.set_peer_reassembles(setup & 0x10 != 0);
    let mut app = App::default();
    while let Some((&op, rest)) = script.split_first() {
        script = rest;
        let mut byte = || {
            let (&b, rest) = script.split_first().unwrap_or((&0, &[]));
            script = rest;
            b
        };
        match op & 7 {
            0..=step::PACKET_MAX => {
                let len = usize::from(u16::from_le_bytes([byte(), byte()])).min(script.len());
                let (packet, rest) = script.split_at(len);
                script = rest;
                let _ = s.handle_datagram(PathId((op >> 3) & 3), packet, now);
            }
            step::WAIT => now += Duration::from_millis(u64::from(byte()) + 1),
            step::WRITE => {
                let (pick, len) = (byte(), usize::from(byte()) * write_unit);
                if let Some(&(flow, kind)) =
                    app.flows.get(usize::from(pick) % app.flows.len().max(1))
                {
                    let data = vec![pick; len];
                    let _ = match kind {
                        FlowKind::Stream => s.write(flow, &data).map(drop),
                        FlowKind::Datagram | FlowKind::Ping => {
                            s.send_datagram(flow, &data, Some(50_000), now)
                        }
                    };
                }
            }
            step::END => {
                let pick = byte();
                if let Some(&(flow, _)) = app.flows.get(usize::from(pick) % app.flows.len().max(1))
                {
                    let _ = if pick & 1 == 0 {
                        s.finish(flow)
                    } else {
                        s.reset(flow, u64::from(pick))
                    };
                }
            }
            _ => {
                let arg = byte();
                match (op >> 3) & 7 {
                    sub @ (0 | 1) => {
                        let kind = if sub == 0 {
                            FlowKind::Stream
                        } else {
                            FlowKind::Datagram
                        };
                        let target = Target::Domain {
                            name: "fuzz.example".into(),
                            port: u16::from(arg),
                        };
                        if let Ok(flow) = s.open_flow(kind, target) {
                            app.flows.push((flow, kind));
                        }
                    }
                    2 => {
                        let _ = s.remove_path(PathId(1), now);
                    }
                    3 => {
                        let _ = s.add_path(PathId(1), PathConfig::default(), now);
                    }
                    4 => {
                        let size = 1000 + 2 * u16::from(arg);
                        let _ = s.set_max_datagram_size(PathId(arg & 1), size);
                    }
                    5 => s.close(u64::from(arg), now),
                    _ => {}
                }
            }
        }
        now += Duration::from_micros(100);
        if s.poll_timeout().is_some_and(|t| t <= now) {
            s.handle_timeout(now);
        }
        app.answer(&mut s, now);
        let used = s.memory_usage();
        assert!(
            used.allocated <= bound,
            "the session holds {} bytes, above its bound of {bound} ({used:?})",
            used.allocated
        );
        assert!(used.flows <= 2 * config.max_flows, "{used:?}");
        assert!(
            used.receive_buffered <= config.session_receive_window,
            "{used:?}"
        );
    }
}

/// The application side of [`session_peer`]: the flows it knows, and a buffer to read into.
#[derive(Default)]
struct App {
    flows: Vec<(FlowId, FlowKind)>,
    buf: Vec<u8>,
}

impl App {
    /// Takes everything the session wants to send (the way the daemon does, without waiting
    /// for the paths), handles its events and reads everything readable.
    fn answer(&mut self, s: &mut Session, now: Timestamp) {
        self.buf.resize(65_536, 0);
        let mut sent = 0;
        while s.poll_transmit(now, &mut self.buf).is_some() {
            sent += 1;
            assert!(
                sent <= 4096,
                "the session keeps sending: {sent} packets at {now:?}"
            );
        }
        while let Some(event) = s.poll_event() {
            match event {
                Event::FlowOpened { flow, kind, .. } => self.flows.push((flow, kind)),
                Event::FlowClosed(flow) => self.flows.retain(|&(f, _)| f != flow),
                _ => {}
            }
        }
        for &(flow, kind) in &self.flows {
            match kind {
                FlowKind::Stream => {
                    while let Ok(Some(n)) = s.read(flow, &mut self.buf) {
                        if n == 0 {
                            break;
                        }
                    }
                }
                FlowKind::Datagram | FlowKind::Ping => {
                    while let Ok(Some(_)) = s.recv_datagram(flow, &mut self.buf) {}
                }
            }
        }
    }
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

/// The `http_response` target: what an origin server sends back to a request the HTTP inbound
/// forwarded, a response head and the body after it. The first byte picks how the body is fed
/// (in pieces of 1 to 128 bytes) and whether the request was HEAD. The parser and the body
/// framer must never panic; a head that parses is no longer than
/// [`MAX_RESPONSE_HEAD`](braid_proxy::inbound::http_message::MAX_RESPONSE_HEAD); the head braid
/// hands the client parses again to the same status and body framing; and the framer finds the
/// same end whether the body comes in pieces or at once, never taking more than it is fed.
pub fn http_response(data: &[u8]) {
    use braid_proxy::inbound::http_message::{
        BodyFramer, ClientConnection, MAX_RESPONSE_HEAD, Response,
    };
    let Some((&control, input)) = data.split_first() else {
        return;
    };
    let head_request = control & 1 == 1;
    let piece = 1 + usize::from(control >> 1);
    let Ok(Some((response, length))) = Response::parse(input, head_request) else {
        return;
    };
    assert!(length <= input.len() && length <= MAX_RESPONSE_HEAD);
    for connection in [ClientConnection::KeepAlive, ClientConnection::Close] {
        let again = response.head_for_client(connection);
        let reparsed = Response::parse(&again, head_request);
        let Ok(Some((reparsed, reparsed_length))) = reparsed else {
            panic!("the client's head does not parse: {reparsed:?}");
        };
        assert_eq!(reparsed_length, again.len());
        assert_eq!(
            (reparsed.status, reparsed.body),
            (response.status, response.body)
        );
    }
    let body = &input[length..];
    let mut whole = BodyFramer::new(response.body);
    let at_once = whole.feed(body);
    let mut framer = BodyFramer::new(response.body);
    let mut used = 0;
    for part in body.chunks(piece) {
        let Ok(taken) = framer.feed(part) else {
            assert!(at_once.is_err(), "refused in pieces, taken at once");
            return;
        };
        assert!(taken <= part.len());
        used += taken;
        if taken < part.len() {
            assert!(
                framer.is_done(),
                "stopped short of its piece before the end"
            );
            break;
        }
    }
    assert_eq!(at_once, Ok(used), "fed in pieces and at once differ");
    assert_eq!(framer.is_done(), whole.is_done());
}

/// The `dns_answer` target: a DNS answer as the client reads the names of its addresses from
/// it (any bytes from a UDP source port 53). Never a panic; a name read is lower-case and at
/// most 253 bytes; no more addresses than the answer count; a table fed it keeps at most
/// [`braid_proxy::inbound::dns_names::MAX_NAMES`] addresses, each under the name read.
pub fn dns_answer(data: &[u8]) {
    use braid_proxy::inbound::dns_names::{LearnedNames, parse_answer};
    let Some((name, records)) = parse_answer(data) else {
        return;
    };
    assert!(!name.is_empty() && name.len() <= 253, "{name:?}");
    assert_eq!(name, name.to_ascii_lowercase());
    let answers = usize::from(u16::from_be_bytes([data[6], data[7]]));
    assert!(records.len() <= answers);
    let names = LearnedNames::default();
    let now = tokio::time::Instant::now();
    assert_eq!(names.learn(data, now), records.len());
    for (ip, _) in records {
        assert_eq!(names.name_of(ip, now).as_deref(), Some(name.as_str()));
    }
}
