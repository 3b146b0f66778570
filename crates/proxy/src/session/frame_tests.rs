//! Per-frame round trips and rejection of malformed input.

use super::*;
use crate::session::ranges::RangeSet;
use braid_sched_core::{MAX_PATHS, PathDeadlines, ReceiverReport};
use proptest::prelude::*;

fn round_trip(frame: Frame<'_>) {
    let mut buf = [0u8; 512];
    let mut w = Writer::new(&mut buf);
    frame.encode(&mut w).unwrap();
    let n = w.len();
    let mut r = Reader::new(&buf[..n]);
    assert_eq!(Frame::decode(&mut r).unwrap(), frame);
    assert_eq!(r.remaining(), 0, "{frame:?} left bytes behind");
    // Every strict prefix is rejected with a typed error, never a panic.
    for cut in 0..n {
        let mut r = Reader::new(&buf[..cut]);
        assert!(Frame::decode(&mut r).is_err(), "{frame:?} cut at {cut}");
    }
}

fn samples() -> Vec<Frame<'static>> {
    vec![
        Frame::Ping,
        Frame::Stream {
            flow: FlowId(4),
            offset: 1 << 40,
            fin: false,
            data: b"hello",
        },
        Frame::Stream {
            flow: FlowId(5),
            offset: 0,
            fin: true,
            data: b"",
        },
        Frame::Datagram {
            flow: FlowId(9),
            seq: 77,
            deadline: None,
            fragment: None,
            data: b"dgram",
        },
        Frame::Datagram {
            flow: FlowId(9),
            seq: 78,
            deadline: Some(DatagramDeadline {
                budget_us: 50_000,
                sent_at_us: 123_456_789,
            }),
            fragment: None,
            data: &[0xff; 40],
        },
        Frame::Datagram {
            flow: FlowId(9),
            seq: 79,
            deadline: None,
            fragment: Some(Fragment { index: 0, count: 2 }),
            data: b"first half",
        },
        Frame::Datagram {
            flow: FlowId(1 << 20),
            seq: 1 << 33,
            deadline: Some(DatagramDeadline {
                budget_us: 7,
                sent_at_us: 1,
            }),
            fragment: Some(Fragment {
                index: MAX_FRAGMENTS - 1,
                count: MAX_FRAGMENTS,
            }),
            data: &[0x5a; 100],
        },
        Frame::Open {
            flow: FlowId(2),
            kind: FlowKind::Stream,
            target: TargetRef::Addr("192.0.2.1:443".parse().unwrap()),
            redundant: false,
        },
        Frame::Open {
            flow: FlowId(3),
            kind: FlowKind::Datagram,
            target: TargetRef::Addr("[2001:db8::1]:53".parse().unwrap()),
            redundant: true,
        },
        Frame::Open {
            flow: FlowId(5),
            kind: FlowKind::Ping,
            target: TargetRef::Addr("192.0.2.9:0".parse().unwrap()),
            redundant: false,
        },
        Frame::Open {
            flow: FlowId(6),
            kind: FlowKind::Stream,
            target: TargetRef::Domain {
                name: "example.org",
                port: 80,
            },
            redundant: true,
        },
        Frame::Reset {
            flow: FlowId(8),
            code: 3,
            final_size: 1_000_000,
        },
        Frame::MaxData(1 << 33),
        Frame::MaxFlowData {
            flow: FlowId(10),
            max: 65_536,
        },
        Frame::PathStatus {
            path: PathId(3),
            backup: true,
            seq: 2,
        },
        Frame::PathAbandon { path: PathId(15) },
        Frame::DatagramLimit { max: 8944 },
        Frame::DatagramLimit { max: (1 << 62) - 1 },
        Frame::BackupFloor { rate: 0 },
        Frame::BackupFloor { rate: 1_250_000 },
        Frame::BackupFloor {
            rate: MAX_BACKUP_FLOOR,
        },
        Frame::PathCongestion {
            path: PathId(0),
            algorithm: None,
            seq: 1,
        },
        Frame::PathCongestion {
            path: PathId(15),
            algorithm: Some(CongestionAlgorithm::Olia),
            seq: (1 << 62) - 1,
        },
        Frame::PathRateCap {
            path: PathId(0),
            rate: 0,
            seq: 1,
        },
        Frame::PathRateCap {
            path: PathId(15),
            rate: MAX_PATH_RATE_CAP,
            seq: (1 << 62) - 1,
        },
        Frame::Close {
            code: 0,
            reason: "bye",
        },
    ]
}

#[test]
fn every_frame_round_trips_and_rejects_truncation() {
    for f in samples() {
        round_trip(f);
    }
}

fn ack_bytes(received: &RangeSet, report: Option<ReceiverReport>, max_len: usize) -> Vec<u8> {
    let mut buf = [0u8; 1500];
    let mut w = Writer::new(&mut buf);
    let fields = AckFields {
        path: PathId(1),
        ack_delay_us: 250,
        receiver_time_us: 9_999,
        report,
    };
    assert!(encode_ack(&mut w, received, &fields, max_len).unwrap());
    let n = w.len();
    buf[..n].to_vec()
}

#[test]
fn ack_round_trips_with_ranges_and_report() {
    let mut received = RangeSet::default();
    for r in [0..5, 7..8, 10..20, 100..101] {
        received.insert(r);
    }
    let report = ReceiverReport {
        interval_us: 100_000,
        delivered_bytes: 12_345,
        duplicate_bytes: 10,
        ooo_packets: 3,
        deadline_met: 4,
        deadline_total: 5,
        ..ReceiverReport::default()
    };
    let mut per_path = report;
    per_path.path_deadlines[0] = PathDeadlines { met: 3, total: 3 };
    per_path.path_deadlines[15] = PathDeadlines {
        met: 0,
        total: 70_000,
    };
    for rep in [None, Some(report), Some(per_path)] {
        let bytes = ack_bytes(&received, rep, 1500);
        let mut r = Reader::new(&bytes);
        let Frame::Ack(ack) = Frame::decode(&mut r).unwrap() else {
            panic!("not an ACK");
        };
        assert_eq!(r.remaining(), 0);
        assert_eq!(ack.largest, 100);
        assert_eq!(ack.report, rep);
        let got: Vec<_> = ack.ranges().collect();
        assert_eq!(got, vec![(100, 100), (10, 19), (7, 7), (0, 4)]);
        // Re-encoding the decoded frame gives the same bytes.
        round_trip(Frame::Ack(ack));
    }
}

/// ACK head of `[type, path 1, largest 9, delay 0, time 0, ranges 0, first 0]` and the
/// session-wide report fields `interval 1, delivered 2, duplicate 0, ooo 0, met 1, total 2`.
fn report_ack(ty: u64, per_path: &[u8]) -> Vec<u8> {
    let mut bytes = vec![ty as u8, 1, 9, 0, 0, 0, 0, 1, 2, 0, 0, 1, 2];
    bytes.extend_from_slice(per_path);
    bytes
}

fn decode_report(bytes: &[u8]) -> Result<Option<ReceiverReport>, FrameError> {
    let mut r = Reader::new(bytes);
    let frame = Frame::decode(&mut r)?;
    assert_eq!(r.remaining(), 0, "{bytes:?} left bytes behind");
    let Frame::Ack(ack) = frame else {
        panic!("not an ACK: {frame:?}");
    };
    Ok(ack.report)
}

#[test]
fn report_carries_per_path_counts_of_paths_with_arrivals_only() {
    let mut report = ReceiverReport {
        interval_us: 1,
        delivered_bytes: 2,
        deadline_met: 1,
        deadline_total: 2,
        ..ReceiverReport::default()
    };
    report.count_deadline(PathId(3), true);
    report.count_deadline(PathId(3), false);
    report.count_deadline(PathId(9), false);
    assert_eq!((report.deadline_met, report.deadline_total), (2, 5));
    assert_eq!(
        report.path_deadlines(PathId(3)),
        PathDeadlines { met: 1, total: 2 }
    );
    let mut received = RangeSet::default();
    received.insert(9..10);
    let bytes = ack_bytes(&received, Some(report), 1500);
    // Type 0x0e; after the six session fields: 2 entries, (3: 1 of 2), (9: 0 of 1).
    assert_eq!(bytes[0] as u64, kind::ACK_PATH_REPORT);
    assert_eq!(&bytes[bytes.len() - 7..], &[2, 3, 1, 2, 9, 0, 1]);
    assert_eq!(decode_report(&bytes), Ok(Some(report)));
    // No deadline arrivals: an empty per-path section, one byte.
    let plain = ReceiverReport {
        interval_us: 1,
        ..ReceiverReport::default()
    };
    let bytes = ack_bytes(&received, Some(plain), 1500);
    assert_eq!(bytes.last(), Some(&0));
    assert_eq!(decode_report(&bytes), Ok(Some(plain)));
}

#[test]
fn first_report_layout_still_decodes_with_no_path_counts() {
    let want = ReceiverReport {
        interval_us: 1,
        delivered_bytes: 2,
        deadline_met: 1,
        deadline_total: 2,
        ..ReceiverReport::default()
    };
    assert_eq!(
        decode_report(&report_ack(kind::ACK_REPORT, &[])),
        Ok(Some(want))
    );
    assert_eq!(
        decode_report(&report_ack(kind::ACK_PATH_REPORT, &[1, 15, 4, 4])),
        Ok(Some(ReceiverReport {
            path_deadlines: {
                let mut p = [PathDeadlines::default(); MAX_PATHS];
                p[15] = PathDeadlines { met: 4, total: 4 };
                p
            },
            ..want
        }))
    );
}

#[test]
fn malformed_per_path_counts_are_typed_errors() {
    let cases: &[(&[u8], FrameError)] = &[
        (
            &[17],
            FrameError::ValueTooLarge {
                field: "report path count",
                value: 17,
            },
        ),
        (
            &[1, 16, 0, 0],
            FrameError::ValueTooLarge {
                field: "report path",
                value: 16,
            },
        ),
        (
            &[2, 4, 0, 1, 4, 0, 1],
            FrameError::ValueTooLarge {
                field: "report path (ids must increase)",
                value: 4,
            },
        ),
        (
            &[2, 5, 0, 1, 4, 0, 1],
            FrameError::ValueTooLarge {
                field: "report path (ids must increase)",
                value: 4,
            },
        ),
        (
            &[1, 2, 3, 2],
            FrameError::ValueTooLarge {
                field: "report path deadline met (above its total)",
                value: 3,
            },
        ),
        (
            &[1, 2, 0, 0xc0, 0, 0, 1, 0, 0, 0, 0],
            FrameError::ValueTooLarge {
                field: "report path deadline total",
                value: 1 << 32,
            },
        ),
        (
            &[],
            FrameError::Truncated {
                field: "report path count",
            },
        ),
        (
            &[2, 1, 1, 1],
            FrameError::Truncated {
                field: "report path",
            },
        ),
        (
            &[1, 1, 1],
            FrameError::Truncated {
                field: "report path deadline total",
            },
        ),
    ];
    for (per_path, want) in cases {
        let bytes = report_ack(kind::ACK_PATH_REPORT, per_path);
        assert_eq!(decode_report(&bytes), Err(*want), "per-path {per_path:?}");
    }
}

#[test]
fn ack_keeps_highest_ranges_that_fit() {
    let mut received = RangeSet::default();
    for i in 0..200u64 {
        received.insert(i * 3..i * 3 + 1);
    }
    let bytes = ack_bytes(&received, None, 40);
    assert!(bytes.len() <= 40);
    let mut r = Reader::new(&bytes);
    let Frame::Ack(ack) = Frame::decode(&mut r).unwrap() else {
        panic!("not an ACK");
    };
    let got: Vec<_> = ack.ranges().collect();
    assert!(got.len() > 1 && got.len() <= MAX_ACK_RANGES as usize + 1);
    assert_eq!(got[0], (597, 597));
    assert_eq!(got[1], (594, 594));
}

#[test]
fn malformed_frames_are_typed_errors() {
    let cases: &[(&[u8], FrameError)] = &[
        (&[0x3f], FrameError::UnknownFrameType(0x3f)),
        (
            &[kind::OPEN as u8, 1, 7],
            FrameError::InvalidEnum {
                field: "open kind",
                value: 7,
            },
        ),
        (
            &[kind::OPEN as u8, 1, 0, 9],
            FrameError::InvalidEnum {
                field: "open address type",
                value: 9,
            },
        ),
        (
            &[kind::OPEN as u8, 1, 0, 3, 0, 0, 80],
            FrameError::InvalidText {
                field: "open domain",
            },
        ),
        (
            &[kind::OPEN as u8, 1, 0, 3, 2, 0xff, 0xfe, 0, 80],
            FrameError::InvalidText {
                field: "open domain",
            },
        ),
        (
            &[kind::PATH_STATUS as u8, 1, 2, 0],
            FrameError::InvalidEnum {
                field: "path status",
                value: 2,
            },
        ),
        (
            &[kind::PATH_STATUS as u8, 200, 0, 0],
            FrameError::ValueTooLarge {
                field: "path status path",
                value: 200,
            },
        ),
        // 100,000 Mbit/s and a byte per second more.
        (
            &[
                kind::BACKUP_FLOOR as u8,
                0xc0,
                0x00,
                0x00,
                0x02,
                0xe9,
                0x0e,
                0xdd,
                0x01,
            ],
            FrameError::ValueTooLarge {
                field: "backup floor",
                value: MAX_BACKUP_FLOOR + 1,
            },
        ),
        (
            &[kind::PATH_RATE_CAP as u8, 16, 0, 1],
            FrameError::ValueTooLarge {
                field: "path rate cap path",
                value: 16,
            },
        ),
        (
            &[kind::PATH_CONGESTION as u8, 16, 3, 1],
            FrameError::ValueTooLarge {
                field: "path congestion path",
                value: 16,
            },
        ),
        (
            &[kind::PATH_CONGESTION as u8, 1, 6, 1],
            FrameError::ValueTooLarge {
                field: "path congestion algorithm",
                value: 6,
            },
        ),
        // ACK whose first range runs below zero.
        (
            &[kind::ACK as u8, 0, 5, 0, 0, 0, 6],
            FrameError::AckRangeUnderflow { index: 0 },
        ),
        // ACK whose second range runs below zero.
        (
            &[kind::ACK as u8, 0, 5, 0, 0, 1, 0, 4, 0],
            FrameError::AckRangeUnderflow { index: 1 },
        ),
        (
            &[kind::ACK as u8, 0, 5, 0, 0, 0x40, 0xff, 0],
            FrameError::ValueTooLarge {
                field: "ack range count",
                value: 255,
            },
        ),
        (
            &[kind::CLOSE as u8, 0, 0x42, 0x00],
            FrameError::ValueTooLarge {
                field: "close reason length",
                value: 512,
            },
        ),
        (
            &[kind::CLOSE as u8, 0, 1, 0xff],
            FrameError::InvalidText {
                field: "close reason",
            },
        ),
        (
            &[kind::STREAM as u8, 1, 0, 5, 1, 2],
            FrameError::Truncated {
                field: "stream data",
            },
        ),
        (
            &[
                kind::DATAGRAM_DEADLINE as u8,
                1,
                1,
                0xc0,
                0xff,
                0xff,
                0xff,
                0xff,
                0,
                0,
                0,
                0,
            ],
            FrameError::ValueTooLarge {
                field: "datagram budget",
                value: 0xff_ffff_ff00_0000,
            },
        ),
        (
            &[kind::DATAGRAM_FRAGMENT as u8, 1, 1, 0, 9, 0],
            FrameError::ValueTooLarge {
                field: "fragment count",
                value: 9,
            },
        ),
        (
            &[kind::DATAGRAM_FRAGMENT as u8, 1, 1, 0, 1, 0],
            FrameError::InvalidEnum {
                field: "fragment count",
                value: 1,
            },
        ),
        (
            &[kind::DATAGRAM_FRAGMENT as u8, 1, 1, 0, 0, 0],
            FrameError::InvalidEnum {
                field: "fragment count",
                value: 0,
            },
        ),
        (
            &[kind::DATAGRAM_FRAGMENT_DEADLINE as u8, 1, 1, 5, 0, 3, 3, 0],
            FrameError::InvalidEnum {
                field: "fragment index",
                value: 3,
            },
        ),
        (
            &[kind::DATAGRAM_FRAGMENT as u8, 1, 1, 1, 2, 4, 1, 2],
            FrameError::Truncated {
                field: "datagram data",
            },
        ),
    ];
    for (bytes, want) in cases {
        let mut r = Reader::new(bytes);
        assert_eq!(Frame::decode(&mut r), Err(*want), "input {bytes:?}");
    }
}

#[test]
fn packet_header_is_checked() {
    assert_eq!(
        parse_packet(&[2, 0, 1]).err(),
        Some(FrameError::UnsupportedVersion(2))
    );
    assert_eq!(parse_packet(&[VERSION, 7]).err(), Some(FrameError::Empty));
    assert_eq!(
        parse_packet(&[]).err(),
        Some(FrameError::Truncated { field: "version" })
    );
    let (pn, mut frames) = parse_packet(&[VERSION, 0x41, 0x00, 1, 1]).unwrap();
    assert_eq!(pn, 256);
    assert_eq!(frames.next(), Some(Ok(Frame::Ping)));
    assert_eq!(frames.next(), Some(Ok(Frame::Ping)));
    assert_eq!(frames.next(), None);
    let (_, mut frames) = parse_packet(&[VERSION, 0, 0x30, 1]).unwrap();
    assert!(matches!(frames.next(), Some(Err(_))));
    assert_eq!(frames.next(), None);
}

fn path_counts() -> impl Strategy<Value = [PathDeadlines; MAX_PATHS]> {
    proptest::array::uniform16((any::<u32>(), any::<u32>(), 0u8..3)).prop_map(|a| {
        a.map(|(x, y, keep)| {
            // A third of the paths have no arrivals; met never exceeds total.
            let (met, total) = if keep == 0 {
                (0, 0)
            } else {
                (x.min(y), x.max(y))
            };
            PathDeadlines { met, total }
        })
    })
}

proptest! {
    #[test]
    fn reports_round_trip(
        interval_us in any::<u32>(),
        delivered_bytes in 0u64..(1 << 62),
        duplicate_bytes in 0u64..(1 << 62),
        ooo_packets in any::<u32>(),
        deadline_met in any::<u32>(),
        deadline_total in any::<u32>(),
        path_deadlines in path_counts(),
    ) {
        let report = ReceiverReport {
            interval_us,
            delivered_bytes,
            duplicate_bytes,
            ooo_packets,
            deadline_met,
            deadline_total,
            path_deadlines,
        };
        let mut received = RangeSet::default();
        received.insert(0..3);
        let bytes = ack_bytes(&received, Some(report), 1500);
        let mut r = Reader::new(&bytes);
        let Ok(Frame::Ack(ack)) = Frame::decode(&mut r) else {
            panic!("{bytes:?} does not decode to an ACK");
        };
        prop_assert_eq!(r.remaining(), 0);
        prop_assert_eq!(ack.report, Some(report));
    }

    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok((_, frames)) = parse_packet(&bytes) {
            for f in frames {
                if let Ok(Frame::Ack(a)) = f {
                    prop_assert!(a.ranges().count() as u64 <= MAX_ACK_RANGES + 1);
                }
            }
        }
    }
}

#[test]
fn the_longest_open_takes_max_open_len_bytes() {
    let name = "x".repeat(255);
    let target = TargetRef::Domain {
        name: &name,
        port: 443,
    };
    let flow = FlowId(u64::MAX >> 2);
    let open = Frame::Open {
        flow,
        kind: FlowKind::Stream,
        target,
        redundant: true,
    };
    let mut buf = [0u8; 512];
    let mut w = Writer::new(&mut buf);
    open.encode(&mut w).unwrap();
    assert_eq!(w.len(), MAX_OPEN_LEN);
    assert_eq!(open_len(flow, target), MAX_OPEN_LEN);
}

#[test]
fn a_path_rate_cap_above_100_gbit_s_is_refused() {
    let mut buf = [0u8; 32];
    let mut w = Writer::new(&mut buf);
    w.varint(kind::PATH_RATE_CAP).unwrap();
    w.u8(3).unwrap();
    w.varint(MAX_PATH_RATE_CAP + 1).unwrap();
    w.varint(1).unwrap();
    let len = w.len();
    assert_eq!(
        Frame::decode(&mut Reader::new(&buf[..len])),
        Err(FrameError::ValueTooLarge {
            field: "path rate cap",
            value: MAX_PATH_RATE_CAP + 1,
        })
    );
}

#[test]
fn path_congestion_carries_every_algorithm() {
    for algorithm in CongestionAlgorithm::ALL.into_iter().map(Some).chain([None]) {
        round_trip(Frame::PathCongestion {
            path: PathId(2),
            algorithm,
            seq: 7,
        });
    }
}
