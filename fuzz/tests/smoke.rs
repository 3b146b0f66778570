//! Stable-Rust smoke pass of the fuzz targets `frame_decoder`, `session_peer`, `join_decoder`,
//! `http_response` and `dns_answer`, run by `cargo test` (the workspace's test suite): each
//! target body over valid inputs (packets, scripts of a hostile peer's packets, JOIN messages,
//! HTTP responses, DNS answers),
//! random bytes and
//! mutations of valid inputs (bit flips, truncations, insertions, splices), from a fixed seed. `BRAID_FUZZ_SMOKE_ITERATIONS` (default 200000) inputs per
//! target; a target that panics fails its test. More at once: `BRAID_FUZZ_SMOKE_ITERATIONS=5000000
//! cargo test --release -p braid-fuzz -- --nocapture`. With `BRAID_FUZZ_SEEDS=DIR`, each target's
//! valid inputs are also written to `DIR/<target>/` as libFuzzer's starting corpus (from
//! `fuzz/`: `BRAID_FUZZ_SEEDS=$PWD/corpus cargo test -p braid-fuzz`), so that it starts past the
//! packet and frame headers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use braid_proxy::session::frame::{
    AckFields, DatagramDeadline, FlowKind, Fragment, Frame, TargetRef, encode_ack, encode_header,
};
use braid_proxy::session::ranges::RangeSet;
use braid_proxy::session::varint::Writer;
use braid_sched_core::{FlowId, PathId, ReceiverReport};

/// xorshift64*: deterministic, no dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn sample_frames() -> Vec<Frame<'static>> {
    let addr: SocketAddr = "198.51.100.9:8443"
        .parse()
        .unwrap_or(SocketAddr::from(([0; 4], 0)));
    vec![
        Frame::Ping,
        Frame::Stream {
            flow: FlowId(2),
            offset: 0,
            fin: false,
            data: b"GET / HTTP/1.1\r\n",
        },
        Frame::Stream {
            flow: FlowId(4),
            offset: 70_000,
            fin: true,
            data: b"",
        },
        Frame::Datagram {
            flow: FlowId(6),
            seq: 3,
            deadline: None,
            fragment: None,
            data: b"rtp",
        },
        Frame::Datagram {
            flow: FlowId(6),
            seq: 4,
            deadline: Some(DatagramDeadline {
                budget_us: 30_000,
                sent_at_us: 99,
            }),
            fragment: None,
            data: b"rtp2",
        },
        Frame::Datagram {
            flow: FlowId(6),
            seq: 5,
            deadline: Some(DatagramDeadline {
                budget_us: 30_000,
                sent_at_us: 120,
            }),
            fragment: Some(Fragment { index: 1, count: 3 }),
            data: b"middle piece",
        },
        Frame::Open {
            flow: FlowId(2),
            kind: FlowKind::Stream,
            target: TargetRef::Addr(addr),
            redundant: false,
        },
        Frame::Open {
            flow: FlowId(8),
            kind: FlowKind::Datagram,
            target: TargetRef::Domain {
                name: "media.example",
                port: 3478,
            },
            redundant: true,
        },
        Frame::Reset {
            flow: FlowId(2),
            code: 1,
            final_size: 16,
        },
        Frame::MaxData(1 << 24),
        Frame::MaxFlowData {
            flow: FlowId(2),
            max: 1 << 20,
        },
        Frame::PathStatus {
            path: PathId(1),
            backup: true,
            seq: 1,
        },
        Frame::DatagramLimit { max: 1494 },
        Frame::PathRateCap {
            path: PathId(1),
            rate: 625_000,
            seq: 1,
        },
        Frame::Close {
            code: 0,
            reason: "done",
        },
    ]
}

fn valid_packet(rng: &mut Rng, frames: &[Frame<'static>]) -> Vec<u8> {
    let mut buf = [0u8; 1500];
    let mut w = Writer::new(&mut buf);
    let _ = encode_header(&mut w, rng.next() % 100_000);
    for _ in 0..1 + rng.below(4) {
        if rng.below(4) == 0 {
            let mut received = RangeSet::default();
            let mut pn = 0;
            for _ in 0..1 + rng.below(10) {
                pn += rng.next() % 20;
                let len = 1 + rng.next() % 5;
                received.insert(pn..pn + len);
                pn += len;
            }
            let mut report = (rng.below(2) == 0).then_some(ReceiverReport {
                interval_us: 100_000,
                delivered_bytes: rng.next() % 1_000_000,
                ..ReceiverReport::default()
            });
            if let Some(r) = report.as_mut() {
                // Per-path deadline counts on a few paths (the 0x0e layout's section).
                for _ in 0..rng.below(4) {
                    let path = PathId((rng.next() % 16) as u8);
                    for _ in 0..rng.below(300) {
                        r.count_deadline(path, rng.below(3) > 0);
                    }
                }
            }
            let fields = AckFields {
                path: PathId((rng.next() % 3) as u8),
                ack_delay_us: rng.next() % 10_000,
                receiver_time_us: rng.next() % (1 << 40),
                report,
            };
            let room = w.remaining();
            let _ = encode_ack(&mut w, &received, &fields, room);
        } else {
            let _ = frames[rng.below(frames.len())].encode(&mut w);
        }
    }
    let n = w.len();
    buf[..n].to_vec()
}

/// Bytes for frames' payloads.
static FILL: [u8; 1600] = [0x5a; 1600];

/// A flow number a hostile peer might use: mostly small ones of either parity, sometimes
/// spread out (each its own range of flows seen) or huge.
fn hostile_flow(rng: &mut Rng) -> FlowId {
    FlowId(match rng.below(8) {
        0 => rng.next() % (1 << 62),
        1 | 2 => 4 * (rng.next() % 4000) + rng.next() % 2,
        _ => rng.next() % 12,
    })
}

/// An offset or limit: around the 4,096-byte windows of `fuzz_config`, or anywhere.
fn hostile_offset(rng: &mut Rng) -> u64 {
    match rng.below(6) {
        0 => rng.next() % (1 << 62),
        1 => 4096 + rng.next() % 8,
        2 => 8192 - rng.next() % 8,
        _ => rng.next() % 4600,
    }
}

/// One frame with values chosen to break things, written to `w` (nothing if it does not fit).
fn hostile_frame(rng: &mut Rng, w: &mut Writer<'_>) {
    let flow = hostile_flow(rng);
    let data = |rng: &mut Rng| -> &'static [u8] {
        let n = match rng.below(4) {
            0 => 1,
            1 => rng.below(1600),
            _ => rng.below(80),
        };
        &FILL[..n]
    };
    let frame = match rng.below(12) {
        0 => {
            let mut received = RangeSet::default();
            let mut pn = rng.next() % 8;
            for _ in 0..1 + rng.below(8) {
                let len = 1 + rng.next() % 12;
                received.insert(pn..pn + len);
                pn += len + rng.next() % 4;
            }
            let report = (rng.below(2) == 0).then(|| ReceiverReport {
                interval_us: (rng.next() % 2_000_000) as u32,
                delivered_bytes: rng.next() % (1 << 40),
                ..ReceiverReport::default()
            });
            let fields = AckFields {
                path: PathId((rng.next() % 4) as u8),
                ack_delay_us: rng.next() % 100_000,
                receiver_time_us: rng.next() % (1 << 40),
                report,
            };
            let room = w.remaining();
            let _ = encode_ack(w, &received, &fields, room);
            return;
        }
        1..=3 => Frame::Stream {
            flow,
            offset: hostile_offset(rng),
            fin: rng.below(5) == 0,
            data: data(rng),
        },
        4..=6 => {
            let count = 2 + rng.below(7) as u8;
            Frame::Datagram {
                flow,
                seq: rng.next() % 80,
                deadline: (rng.below(3) == 0).then(|| DatagramDeadline {
                    budget_us: (rng.next() % 100_000) as u32,
                    sent_at_us: rng.next() % (1 << 40),
                }),
                fragment: (rng.below(2) == 0).then(|| Fragment {
                    index: rng.below(usize::from(count)) as u8,
                    count,
                }),
                data: data(rng),
            }
        }
        7 => Frame::Open {
            flow,
            kind: if rng.below(2) == 0 {
                FlowKind::Stream
            } else {
                FlowKind::Datagram
            },
            target: TargetRef::Domain {
                name: "hostile.example",
                port: 443,
            },
            redundant: rng.below(2) == 0,
        },
        8 => Frame::Reset {
            flow,
            code: rng.next() % 4,
            final_size: hostile_offset(rng),
        },
        9 => match rng.below(6) {
            0 => Frame::MaxData(hostile_offset(rng)),
            1 => Frame::MaxFlowData {
                flow,
                max: hostile_offset(rng),
            },
            2 => Frame::DatagramLimit {
                max: hostile_offset(rng),
            },
            3 => Frame::PathCongestion {
                path: PathId((rng.next() % 5) as u8),
                algorithm: braid_proxy::session::congestion::CongestionAlgorithm::ALL
                    .get(rng.below(6))
                    .copied(),
                seq: rng.next() % 4,
            },
            4 => Frame::PathRateCap {
                path: PathId((rng.next() % 5) as u8),
                // Mostly small (a path paced to a trickle), sometimes none or the largest.
                rate: match rng.below(4) {
                    0 => 0,
                    1 => braid_proxy::session::frame::MAX_PATH_RATE_CAP,
                    _ => rng.next() % 100_000,
                },
                seq: rng.next() % 4,
            },
            _ => Frame::PathStatus {
                path: PathId((rng.next() % 5) as u8),
                backup: rng.below(2) == 0,
                seq: rng.next() % 4,
            },
        },
        10 if rng.below(100) == 0 => Frame::Close {
            code: 7,
            reason: "hostile",
        },
        _ => Frame::Ping,
    };
    let _ = frame.encode(w);
}

/// A `session_peer` script (see `braid_fuzz::step`): packets of hostile frames with packet
/// numbers that mostly grow (sometimes repeat or jump), time passing, and the application's
/// writes, ends, opens and path changes.
fn hostile_script(rng: &mut Rng) -> Vec<u8> {
    use braid_fuzz::step;
    let mut script = vec![rng.next() as u8];
    let mut pn = [0u64; 4];
    for i in 0..1 + rng.below(80) {
        // The first step is a packet (what the smoke pass counts as valid).
        match if i == 0 { 0 } else { rng.below(16) } {
            0..=9 => {
                let path = match rng.below(10) {
                    0 => 2,
                    1 => 3,
                    2..=4 => 1,
                    _ => 0,
                };
                let number = match rng.below(12) {
                    0 => pn[path].saturating_sub(1 + rng.next() % 4),
                    1 => pn[path] + 2 + rng.next() % 100,
                    _ => pn[path],
                };
                pn[path] = pn[path].max(number + 1);
                let mut buf = [0u8; 1500];
                let mut w = Writer::new(&mut buf);
                let _ = encode_header(&mut w, number);
                match rng.below(12) {
                    // Bytes with a gap after each, to one flow (pieces up to its limit).
                    0 => {
                        let (flow, base) = (FlowId(rng.next() % 6), rng.next() % 4000);
                        for k in 0..rng.below(90) as u64 {
                            let frame = Frame::Stream {
                                flow,
                                offset: (base + 2 * k) % 4096,
                                fin: false,
                                data: &FILL[..1],
                            };
                            let _ = frame.encode(&mut w);
                        }
                    }
                    // OPENs of flows with gaps between them (the record's limit, 64 gaps).
                    1 => {
                        let first = rng.next() % 1000;
                        for k in 0..rng.below(100) as u64 {
                            let frame = Frame::Open {
                                flow: FlowId(4 * (first + k) + rng.next() % 2),
                                kind: FlowKind::Datagram,
                                target: TargetRef::Addr(SocketAddr::from(([192, 0, 2, 1], 53))),
                                redundant: false,
                            };
                            let _ = frame.encode(&mut w);
                        }
                    }
                    _ => {
                        for _ in 0..1 + rng.below(6) {
                            hostile_frame(rng, &mut w);
                        }
                    }
                }
                let n = w.len();
                script.push(rng.below(4) as u8 | (path as u8) << 3);
                script.extend_from_slice(&(n as u16).to_le_bytes());
                script.extend_from_slice(&buf[..n]);
            }
            10 => script.extend_from_slice(&[step::WAIT, [0, 1, 5, 30, 255][rng.below(5)]]),
            11 | 12 => script.extend_from_slice(&[step::WRITE, rng.next() as u8, rng.next() as u8]),
            13 => script.extend_from_slice(&[step::END, rng.next() as u8]),
            _ => {
                // Closing the session ends the script's interest: rarely.
                let sub = if rng.below(40) == 0 {
                    5
                } else {
                    [0, 1, 2, 3, 4, 6][rng.below(6)]
                };
                script.extend_from_slice(&[step::PATHS | sub << 3, rng.next() as u8]);
            }
        }
    }
    script
}

fn valid_join(rng: &mut Rng) -> Vec<u8> {
    use braid_proxy::session::Tier;
    use braid_proxy::transport::join::Join;
    let text = |rng: &mut Rng| -> String {
        let alphabet = ["a", "z", "0", "-", "é", "漢", "🦀"];
        (0..1 + rng.below(90))
            .map(|_| alphabet[rng.below(alphabet.len())])
            .collect()
    };
    let mut session_id = [0u8; 16];
    session_id.iter_mut().for_each(|b| *b = rng.next() as u8);
    let mut mac = [0u8; 32];
    mac.iter_mut().for_each(|b| *b = rng.next() as u8);
    Join {
        user: text(rng),
        session_id,
        path: PathId((rng.next() % braid_sched_core::MAX_PATHS as u64) as u8),
        tier: if rng.below(2) == 0 {
            Tier::Primary
        } else {
            Tier::Backup
        },
        weight: 1 + (rng.next() % 65_535) as u16,
        knows: braid_proxy::transport::join::PeerKnows::from_bits(rng.next() as u8),
        second_answer_byte: rng.below(2) == 0,
        link_name: text(rng),
        mac,
    }
    .encode()
}

fn mutate(rng: &mut Rng, mut p: Vec<u8>, corpus: &[Vec<u8>]) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !p.is_empty() => {
                let i = rng.below(p.len());
                p[i] ^= 1 << rng.below(8);
            }
            1 if !p.is_empty() => {
                let i = rng.below(p.len());
                p[i] = rng.next() as u8;
            }
            2 => p.truncate(rng.below(p.len() + 1)),
            3 => {
                let i = rng.below(p.len() + 1);
                p.insert(
                    i,
                    [0x00, 0x3f, 0x40, 0x7f, 0x80, 0xbf, 0xc0, 0xff][rng.below(8)],
                );
            }
            4 => {
                let other = &corpus[rng.below(corpus.len())];
                let from = rng.below(other.len() + 1);
                p.extend_from_slice(&other[from..]);
            }
            _ => {
                if p.len() > 1 {
                    let i = rng.below(p.len() - 1);
                    p.swap(i, i + 1);
                }
            }
        }
    }
    p
}

fn iterations() -> u64 {
    std::env::var("BRAID_FUZZ_SMOKE_ITERATIONS")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000)
}

/// Runs `target` over `iterations()` inputs: a quarter from `corpus`, a quarter random bytes
/// (up to `random_len`), half mutations of `corpus`; counts those `valid` accepts, which must
/// be at least a fifth (the pass reaches past the first bytes); prints the figures.
fn smoke(
    name: &str,
    corpus: &[Vec<u8>],
    random_len: usize,
    rng: &mut Rng,
    valid: impl Fn(&[u8]) -> bool,
    target: impl Fn(&[u8]),
) {
    if let Some(dir) = std::env::var_os("BRAID_FUZZ_SEEDS") {
        let dir = std::path::Path::new(&dir).join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, input) in corpus.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:03}")), input).unwrap();
        }
    }
    let iterations = iterations();
    let start = std::time::Instant::now();
    let mut accepted = 0u64;
    for i in 0..iterations {
        let input = match i % 4 {
            0 => corpus[rng.below(corpus.len())].clone(),
            1 => (0..rng.below(random_len))
                .map(|_| rng.next() as u8)
                .collect(),
            _ => {
                let base = corpus[rng.below(corpus.len())].clone();
                mutate(rng, base, corpus)
            }
        };
        if valid(&input) {
            accepted += 1;
        }
        target(&input);
    }
    assert!(
        accepted >= iterations / 5,
        "{name}: {accepted} of {iterations} valid"
    );
    println!(
        "{name} smoke pass: {iterations} inputs ({accepted} valid) in {:.1} s, no panic",
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn frame_decoder_smoke_pass() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let frames = sample_frames();
    let corpus: Vec<Vec<u8>> = (0..256).map(|_| valid_packet(&mut rng, &frames)).collect();
    // Valid: the packet and every frame in it decode.
    let valid = |input: &[u8]| {
        braid_proxy::session::frame::parse_packet(input)
            .map(|(_, mut f)| f.all(|x| x.is_ok()))
            .unwrap_or(false)
    };
    smoke(
        "frame_decoder",
        &corpus,
        64,
        &mut rng,
        valid,
        braid_fuzz::frame_decoder,
    );
}

#[test]
fn session_peer_smoke_pass() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let corpus: Vec<Vec<u8>> = (0..256).map(|_| hostile_script(&mut rng)).collect();
    // Valid: a script that starts with a packet whose frames all decode.
    let valid = |input: &[u8]| {
        let Some(len) = input
            .get(2..4)
            .map(|l| usize::from(u16::from_le_bytes([l[0], l[1]])))
        else {
            return false;
        };
        input[1] & 7 <= braid_fuzz::step::PACKET_MAX
            && input.len() >= 4 + len
            && braid_proxy::session::frame::parse_packet(&input[4..4 + len])
                .map(|(_, mut f)| f.all(|x| x.is_ok()))
                .unwrap_or(false)
    };
    smoke(
        "session_peer",
        &corpus,
        256,
        &mut rng,
        valid,
        braid_fuzz::session_peer,
    );
}

#[test]
fn join_decoder_smoke_pass() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let joins: Vec<Vec<u8>> = (0..256).map(|_| valid_join(&mut rng)).collect();
    let valid = |input: &[u8]| braid_proxy::transport::join::Join::decode(input).is_ok();
    smoke(
        "join_decoder",
        &joins,
        400,
        &mut rng,
        valid,
        braid_fuzz::join_decoder,
    );
}

/// An HTTP response as an origin server may send it, with the control byte
/// `braid_fuzz::http_response` reads first: a status, headers that frame its body in one of the
/// ways (a length, chunks with extensions and trailers, the close), and the body.
fn valid_response(rng: &mut Rng) -> Vec<u8> {
    let mut out = vec![rng.next() as u8];
    let status = [200, 204, 304, 101, 100, 404, 500, 206][rng.below(8)];
    let version = ["HTTP/1.1", "HTTP/1.0"][rng.below(2)];
    let eol = ["\r\n", "\n"][rng.below(2)];
    out.extend_from_slice(format!("{version} {status} Reason{eol}").as_bytes());
    for header in [
        "Server: x",
        "Connection: keep-alive, X-A",
        "X-A: 1",
        "Keep-Alive: 5",
    ] {
        if rng.below(2) == 0 {
            out.extend_from_slice(format!("{header}{eol}").as_bytes());
        }
    }
    let data: Vec<u8> = (0..rng.below(300)).map(|_| rng.next() as u8).collect();
    match rng.below(3) {
        0 => {
            out.extend_from_slice(format!("Content-Length: {}{eol}{eol}", data.len()).as_bytes());
            out.extend_from_slice(&data);
        }
        1 => {
            out.extend_from_slice(format!("Transfer-Encoding: chunked{eol}{eol}").as_bytes());
            for chunk in data.chunks(1 + rng.below(100)) {
                let extension = [";", ";a=b", ""][rng.below(3)];
                out.extend_from_slice(format!("{:x}{extension}{eol}", chunk.len()).as_bytes());
                out.extend_from_slice(chunk);
                out.extend_from_slice(eol.as_bytes());
            }
            out.extend_from_slice(format!("0{eol}").as_bytes());
            if rng.below(2) == 0 {
                out.extend_from_slice(format!("X-Trailer: t{eol}").as_bytes());
            }
            out.extend_from_slice(eol.as_bytes());
        }
        _ => {
            out.extend_from_slice(eol.as_bytes());
            out.extend_from_slice(&data);
        }
    }
    // Sometimes the next response right behind.
    if rng.below(4) == 0 {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
    }
    out
}

#[test]
fn http_response_smoke_pass() {
    use braid_proxy::inbound::http_message::Response;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let responses: Vec<Vec<u8>> = (0..256).map(|_| valid_response(&mut rng)).collect();
    let valid = |input: &[u8]| {
        input
            .split_first()
            .is_some_and(|(&c, rest)| matches!(Response::parse(rest, c & 1 == 1), Ok(Some(_))))
    };
    smoke(
        "http_response",
        &responses,
        400,
        &mut rng,
        valid,
        braid_fuzz::http_response,
    );
}

/// A DNS answer as a resolver sends it: one question, then CNAME, A and AAAA records whose
/// owners are the question's name by a pointer, a name of their own, or a pointer to one.
fn valid_dns_answer(rng: &mut Rng) -> Vec<u8> {
    let records = rng.below(6);
    let mut m = vec![
        rng.next() as u8,
        rng.next() as u8,
        0x81,
        0x80,
        0,
        1,
        0,
        records as u8,
    ];
    m.extend_from_slice(&[0, 0, 0, 0]);
    let labels = 1 + rng.below(4);
    for i in 0..labels {
        let len = 1 + rng.below(12);
        m.push(len as u8);
        m.extend((0..len).map(|j| [b'a', b'Z', b'-', b'0'][(i + j + rng.below(4)) % 4]));
    }
    m.extend_from_slice(&[0, 0, 1, 0, 1]);
    for _ in 0..records {
        match rng.below(3) {
            0 => m.extend_from_slice(&[0xc0, 12]),
            1 => m.extend_from_slice(&[3, b'c', b'd', b'n', 0xc0, 12]),
            _ => m.extend_from_slice(&[3, b'w', b'w', b'w', 0]),
        }
        let (kind, len) = [(1u16, 4usize), (28, 16), (5, 5)][rng.below(3)];
        m.extend_from_slice(&kind.to_be_bytes());
        m.extend_from_slice(&[0, 1]);
        m.extend_from_slice(&(rng.next() as u32).to_be_bytes());
        m.extend_from_slice(&(len as u16).to_be_bytes());
        m.extend((0..len).map(|_| rng.next() as u8));
    }
    m
}

#[test]
fn dns_answer_smoke_pass() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let answers: Vec<Vec<u8>> = (0..256).map(|_| valid_dns_answer(&mut rng)).collect();
    let valid = |input: &[u8]| braid_proxy::inbound::dns_names::parse_answer(input).is_some();
    smoke(
        "dns_answer",
        &answers,
        400,
        &mut rng,
        valid,
        braid_fuzz::dns_answer,
    );
}
