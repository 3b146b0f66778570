//! Per-frame round trips and rejection of malformed input.

use super::*;
use crate::session::ranges::RangeSet;
use braid_sched_core::ReceiverReport;
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
            data: b"dgram",
        },
        Frame::Datagram {
            flow: FlowId(9),
            seq: 78,
            deadline: Some(DatagramDeadline {
                budget_us: 50_000,
                sent_at_us: 123_456_789,
            }),
            data: &[0xff; 40],
        },
        Frame::Open {
            flow: FlowId(2),
            kind: FlowKind::Stream,
            target: TargetRef::Addr("192.0.2.1:443".parse().unwrap()),
        },
        Frame::Open {
            flow: FlowId(3),
            kind: FlowKind::Datagram,
            target: TargetRef::Addr("[2001:db8::1]:53".parse().unwrap()),
        },
        Frame::Open {
            flow: FlowId(6),
            kind: FlowKind::Stream,
            target: TargetRef::Domain {
                name: "example.org",
                port: 80,
            },
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
    };
    for rep in [None, Some(report)] {
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

proptest! {
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
