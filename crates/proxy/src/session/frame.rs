//! The wire format (documented field by field in `docs/protocol.md`): a packet is one QUIC
//! DATAGRAM payload made of a header (version byte, per-path packet number) followed by frames.
//!
//! Decoding borrows from the received buffer and never allocates; every malformed input is a
//! [`FrameError`] naming the field, never a panic. Encoding writes into the caller's buffer.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use braid_sched_core::{FlowId, PathId};

pub use super::ack::{AckFields, AckFrame, AckRanges, encode_ack};
use super::ack::{ReportLayout, decode_ack, write_ack_head, write_report};
use super::congestion::CongestionAlgorithm;
use super::error::FrameError;
use super::varint::{Reader, Writer, varint_len};

/// The protocol version this build speaks (first byte of every packet).
pub const VERSION: u8 = 1;
/// The most additional ACK ranges a decoder accepts in one ACK frame.
pub const MAX_ACK_RANGES: u64 = 64;
/// The longest CLOSE reason, bytes.
pub const MAX_REASON_LEN: usize = 256;

/// Frame type bytes.
pub mod kind {
    /// PING: elicits an ACK (heartbeat, probe).
    pub const PING: u64 = 0x01;
    /// ACK without a receiver report.
    pub const ACK: u64 = 0x02;
    /// ACK with a receiver report, first layout (session-wide counts only); decoded, not sent.
    pub const ACK_REPORT: u64 = 0x03;
    /// STREAM bytes.
    pub const STREAM: u64 = 0x04;
    /// STREAM bytes, the last of the flow (FIN).
    pub const STREAM_FIN: u64 = 0x05;
    /// DATAGRAM without deadline.
    pub const DATAGRAM: u64 = 0x06;
    /// DATAGRAM with a deadline budget.
    pub const DATAGRAM_DEADLINE: u64 = 0x07;
    /// OPEN a flow.
    pub const OPEN: u64 = 0x08;
    /// RESET a flow.
    pub const RESET: u64 = 0x09;
    /// MAX_DATA (session-wide credit).
    pub const MAX_DATA: u64 = 0x0a;
    /// MAX_FLOW_DATA (one flow's credit).
    pub const MAX_FLOW_DATA: u64 = 0x0b;
    /// PATH_STATUS (tier of a path).
    pub const PATH_STATUS: u64 = 0x0c;
    /// CLOSE the session.
    pub const CLOSE: u64 = 0x0d;
    /// ACK with a receiver report that also carries per-path deadline counts.
    pub const ACK_PATH_REPORT: u64 = 0x0e;
    /// One fragment of a DATAGRAM too long for the paths, without deadline.
    pub const DATAGRAM_FRAGMENT: u64 = 0x0f;
    /// One fragment of a DATAGRAM too long for the paths, with a deadline budget.
    pub const DATAGRAM_FRAGMENT_DEADLINE: u64 = 0x10;
    /// PATH_ABANDON (the sender's end of a path is gone).
    pub const PATH_ABANDON: u64 = 0x11;
    /// DATAGRAM_LIMIT (the longest datagram payload the sender takes).
    pub const DATAGRAM_LIMIT: u64 = 0x12;
    /// BACKUP_FLOOR (the rate below which the receiver's busy primaries let backups help).
    pub const BACKUP_FLOOR: u64 = 0x13;
    /// PATH_CONGESTION (the congestion controller the client chose for one of its links).
    pub const PATH_CONGESTION: u64 = 0x14;
    /// PATH_RATE_CAP (the rate the client's link takes from the server on one path).
    pub const PATH_RATE_CAP: u64 = 0x15;
}

/// The largest PATH_RATE_CAP rate a decoder takes, bytes per second: 100,000 Mbit/s, the largest
/// `[[link]] rate_cap_down_mbps`.
pub const MAX_PATH_RATE_CAP: u64 = 12_500_000_000;

/// The largest BACKUP_FLOOR rate a decoder takes, bytes per second: 100,000 Mbit/s, the largest
/// `[session] backup_below_mbps`.
pub const MAX_BACKUP_FLOOR: u64 = 12_500_000_000;

/// The most fragments one datagram is cut into.
pub const MAX_FRAGMENTS: u8 = 8;

/// Which piece of a fragmented datagram a DATAGRAM frame carries: piece `index` of `count`
/// (`2 ..= MAX_FRAGMENTS`), the pieces in order making the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// The piece, from 0.
    pub index: u8,
    /// How many pieces the datagram has.
    pub count: u8,
}

/// Whether a flow carries reliable ordered bytes or unreliable datagrams, and which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowKind {
    /// Reliable, ordered bytes (a proxied TCP connection).
    Stream,
    /// Unreliable datagrams (a proxied UDP association).
    Datagram,
    /// Unreliable datagrams that are ICMP echoes to the target's address (ping through the
    /// TUN inbound): each a sequence number and the echo's data ([`crate::icmp_echo`]). Opened
    /// only towards a peer that said it relays them (JOIN bit 4).
    Ping,
}

impl FlowKind {
    /// Whether the flow carries datagrams (a datagram or ping flow).
    pub fn is_datagram(self) -> bool {
        matches!(self, FlowKind::Datagram | FlowKind::Ping)
    }
}

/// Where the peer should connect a flow: an address, or a domain name it resolves.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// An IPv4 or IPv6 socket address.
    Addr(SocketAddr),
    /// A domain name (1..=255 bytes of text) and port.
    Domain {
        /// The name.
        name: String,
        /// The port.
        port: u16,
    },
}

impl Target {
    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            Target::Addr(a) => a.port(),
            Target::Domain { port, .. } => *port,
        }
    }

    /// Borrows the target for encoding.
    pub fn as_ref(&self) -> TargetRef<'_> {
        match self {
            Target::Addr(a) => TargetRef::Addr(*a),
            Target::Domain { name, port } => TargetRef::Domain { name, port: *port },
        }
    }
}

/// `ip:port` (IPv6 in brackets) or `name:port`, the name's control characters escaped (it
/// came from a client).
impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Addr(a) => write!(f, "{a}"),
            Target::Domain { name, port } => write!(f, "{}:{port}", name.escape_debug()),
        }
    }
}

/// A target as decoded from a packet (borrowing its domain name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetRef<'a> {
    /// An address.
    Addr(SocketAddr),
    /// A domain name and port.
    Domain {
        /// The name.
        name: &'a str,
        /// The port.
        port: u16,
    },
}

impl TargetRef<'_> {
    /// An owned copy.
    pub fn to_owned(self) -> Target {
        match self {
            TargetRef::Addr(a) => Target::Addr(a),
            TargetRef::Domain { name, port } => Target::Domain {
                name: name.to_owned(),
                port,
            },
        }
    }
}

/// A deadline carried by a DATAGRAM frame: the budget left when it was sent and the sender's
/// clock at that moment (used only relative to a running minimum, never compared across clocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatagramDeadline {
    /// Microseconds the datagram had left to arrive when sent.
    pub budget_us: u32,
    /// The sender's clock when it was sent, µs.
    pub sent_at_us: u64,
}

/// One decoded frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Frame<'a> {
    /// Elicits an ACK.
    Ping,
    /// Acknowledges packets of one path.
    Ack(AckFrame<'a>),
    /// Bytes of a stream flow at `offset`.
    Stream {
        /// The flow.
        flow: FlowId,
        /// Byte offset of `data` in the flow.
        offset: u64,
        /// True when `offset + data.len()` is the flow's final size.
        fin: bool,
        /// The bytes.
        data: &'a [u8],
    },
    /// One unreliable datagram of a datagram flow.
    Datagram {
        /// The flow.
        flow: FlowId,
        /// Sequence number within the flow.
        seq: u64,
        /// Its deadline, if it has one.
        deadline: Option<DatagramDeadline>,
        /// The piece it is, when the datagram was cut into fragments.
        fragment: Option<Fragment>,
        /// The payload (the piece's bytes for a fragment).
        data: &'a [u8],
    },
    /// Opens a flow towards a target.
    Open {
        /// The new flow.
        flow: FlowId,
        /// Stream or datagram.
        kind: FlowKind,
        /// Where the peer should connect it.
        target: TargetRef<'a>,
        /// The opener sends it redundantly and asks the receiver to ([`OPEN_REDUNDANT`]).
        redundant: bool,
    },
    /// Abandons a flow.
    Reset {
        /// The flow.
        flow: FlowId,
        /// Application error code.
        code: u64,
        /// Bytes the sender had sent on the flow.
        final_size: u64,
    },
    /// The session-wide limit on stream bytes the peer may send (sum of flows' highest offsets).
    MaxData(u64),
    /// One flow's limit: the peer may send bytes below `max`.
    MaxFlowData {
        /// The flow.
        flow: FlowId,
        /// The limit.
        max: u64,
    },
    /// The sender's view of a path's tier.
    PathStatus {
        /// The path.
        path: PathId,
        /// True for backup, false for primary.
        backup: bool,
        /// Sequence number; the highest wins.
        seq: u64,
    },
    /// The sender's end of the path is gone (its interface went down, its address away): the
    /// receiver fails the path at once. Sent only to a peer that said in the JOIN exchange
    /// that it knows the frame.
    PathAbandon {
        /// The path.
        path: PathId,
    },
    /// The longest datagram payload the sender takes (puts back together and delivers): the
    /// receiver sends none longer. Sent once per session, only to a peer that said in the
    /// JOIN exchange that it knows the frame.
    DatagramLimit {
        /// Bytes.
        max: u64,
    },
    /// The rate, bytes per second, below which a primary path of the receiver's, kept busy,
    /// counts as degraded and lets backup paths help with what the receiver sends (the sender's
    /// `[session] backup_below_mbps`; 0: backups only when no primary is live). Sent by a client
    /// whose file sets the key, once per session, only to a server that said in the JOIN
    /// exchange that it knows the frame; a client ignores one.
    BackupFloor {
        /// Bytes per second, at most [`MAX_BACKUP_FLOOR`].
        rate: u64,
    },
    /// The congestion controller the sender (a client) chose for its link on `path`, for what
    /// the receiver sends on that path; `None`: the receiver's own choice. The highest `seq`
    /// wins. Sent by a client whose link sets `congestion` (again after each join of the path,
    /// and when a reload changes it), only to a server that said in the JOIN exchange that it
    /// knows the frame; a client ignores one.
    PathCongestion {
        /// The path.
        path: PathId,
        /// The controller (`None`: the receiver's `[session] congestion`).
        algorithm: Option<CongestionAlgorithm>,
        /// Sequence number; the highest wins.
        seq: u64,
    },
    /// The most the receiver (a server) may send on `path`, bytes per second (0: no cap of the
    /// sender's), for the sender's link there (`rate_cap_down_mbps`). The highest `seq` wins.
    /// Sent by a client after each join of the path and when a reload changes the cap, only to
    /// a server that said in the JOIN exchange that it knows the frame; a client ignores one.
    PathRateCap {
        /// The path.
        path: PathId,
        /// Bytes per second, at most [`MAX_PATH_RATE_CAP`]; 0: none.
        rate: u64,
        /// Sequence number; the highest wins.
        seq: u64,
    },
    /// Closes the session.
    Close {
        /// Error code (0: normal).
        code: u64,
        /// Human-readable reason.
        reason: &'a str,
    },
}

/// Writes a packet header; returns its length.
pub fn encode_header(w: &mut Writer<'_>, packet_number: u64) -> Result<(), FrameError> {
    w.u8(VERSION)?;
    w.varint(packet_number)
}

/// The most bytes a header takes.
pub const MAX_HEADER_LEN: usize = 1 + 8;

/// Parses a packet header and returns the packet number and an iterator over its frames.
pub fn parse_packet(buf: &[u8]) -> Result<(u64, Frames<'_>), FrameError> {
    let mut r = Reader::new(buf);
    let version = r.u8("version")?;
    if version != VERSION {
        return Err(FrameError::UnsupportedVersion(version));
    }
    let pn = r.varint("packet number")?;
    if r.remaining() == 0 {
        return Err(FrameError::Empty);
    }
    Ok((pn, Frames { reader: r }))
}

/// The frames of a packet, in order; stops at the first malformed one.
#[derive(Debug)]
pub struct Frames<'a> {
    reader: Reader<'a>,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.reader.remaining() == 0 {
            return None;
        }
        let frame = Frame::decode(&mut self.reader);
        if frame.is_err() {
            // Consume the rest so iteration ends after the error.
            let rest = self.reader.remaining();
            let _ = self.reader.bytes(rest, "rest");
        }
        Some(frame)
    }
}

impl<'a> Frame<'a> {
    /// Decodes one frame from `r`.
    pub fn decode(r: &mut Reader<'a>) -> Result<Frame<'a>, FrameError> {
        let ty = r.varint("frame type")?;
        Ok(match ty {
            kind::PING => Frame::Ping,
            kind::ACK => Frame::Ack(decode_ack(r, ReportLayout::None)?),
            kind::ACK_REPORT => Frame::Ack(decode_ack(r, ReportLayout::SessionOnly)?),
            kind::ACK_PATH_REPORT => Frame::Ack(decode_ack(r, ReportLayout::PerPath)?),
            kind::STREAM | kind::STREAM_FIN => decode_stream(r, ty == kind::STREAM_FIN)?,
            kind::DATAGRAM | kind::DATAGRAM_DEADLINE => {
                decode_datagram(r, ty == kind::DATAGRAM_DEADLINE, false)?
            }
            kind::DATAGRAM_FRAGMENT | kind::DATAGRAM_FRAGMENT_DEADLINE => {
                decode_datagram(r, ty == kind::DATAGRAM_FRAGMENT_DEADLINE, true)?
            }
            kind::OPEN => decode_open(r)?,
            kind::RESET => Frame::Reset {
                flow: FlowId(r.varint("reset flow")?),
                code: r.varint("reset code")?,
                final_size: r.varint("reset final size")?,
            },
            kind::MAX_DATA => Frame::MaxData(r.varint("max data")?),
            kind::MAX_FLOW_DATA => Frame::MaxFlowData {
                flow: FlowId(r.varint("max flow data flow")?),
                max: r.varint("max flow data")?,
            },
            kind::PATH_STATUS => decode_path_status(r)?,
            kind::PATH_ABANDON => Frame::PathAbandon {
                path: decode_path(r, "path abandon path")?,
            },
            kind::DATAGRAM_LIMIT => Frame::DatagramLimit {
                max: r.varint("datagram limit")?,
            },
            kind::BACKUP_FLOOR => match r.varint("backup floor")? {
                rate if rate <= MAX_BACKUP_FLOOR => Frame::BackupFloor { rate },
                value => {
                    return Err(FrameError::ValueTooLarge {
                        field: "backup floor",
                        value,
                    });
                }
            },
            kind::PATH_CONGESTION => Frame::PathCongestion {
                path: decode_path(r, "path congestion path")?,
                algorithm: match r.u8("path congestion algorithm")? {
                    0 => None,
                    code => Some(congestion_algorithm(code).ok_or(FrameError::ValueTooLarge {
                        field: "path congestion algorithm",
                        value: u64::from(code),
                    })?),
                },
                seq: r.varint("path congestion seq")?,
            },
            kind::PATH_RATE_CAP => Frame::PathRateCap {
                path: decode_path(r, "path rate cap path")?,
                rate: match r.varint("path rate cap")? {
                    rate if rate <= MAX_PATH_RATE_CAP => rate,
                    value => {
                        return Err(FrameError::ValueTooLarge {
                            field: "path rate cap",
                            value,
                        });
                    }
                },
                seq: r.varint("path rate cap seq")?,
            },
            kind::CLOSE => decode_close(r)?,
            other => return Err(FrameError::UnknownFrameType(other)),
        })
    }

    /// Writes the frame. ACK frames are written with [`encode_ack`] from a [`RangeSet`]; writing
    /// a decoded ACK re-emits its ranges unchanged.
    pub fn encode(&self, w: &mut Writer<'_>) -> Result<(), FrameError> {
        match *self {
            Frame::Ping => w.varint(kind::PING),
            Frame::Ack(ack) => {
                write_ack_head(w, &ack, ack.range_count)?;
                w.bytes(ack.raw_ranges)?;
                write_report(w, ack.report.as_ref())
            }
            Frame::Stream {
                flow,
                offset,
                fin,
                data,
            } => {
                encode_stream_header(w, flow, offset, data.len(), fin)?;
                w.bytes(data)
            }
            Frame::Datagram {
                flow,
                seq,
                deadline,
                fragment,
                data,
            } => {
                encode_datagram_header(w, flow, seq, deadline, fragment, data.len())?;
                w.bytes(data)
            }
            Frame::Open {
                flow,
                kind,
                target,
                redundant,
            } => encode_open(w, flow, kind, target, redundant),
            Frame::Reset {
                flow,
                code,
                final_size,
            } => {
                w.varint(kind::RESET)?;
                w.varint(flow.0)?;
                w.varint(code)?;
                w.varint(final_size)
            }
            Frame::MaxData(max) => {
                w.varint(kind::MAX_DATA)?;
                w.varint(max)
            }
            Frame::MaxFlowData { flow, max } => {
                w.varint(kind::MAX_FLOW_DATA)?;
                w.varint(flow.0)?;
                w.varint(max)
            }
            Frame::PathStatus { path, backup, seq } => {
                w.varint(kind::PATH_STATUS)?;
                w.u8(path.0)?;
                w.u8(u8::from(backup))?;
                w.varint(seq)
            }
            Frame::PathAbandon { path } => {
                w.varint(kind::PATH_ABANDON)?;
                w.u8(path.0)
            }
            Frame::DatagramLimit { max } => {
                w.varint(kind::DATAGRAM_LIMIT)?;
                w.varint(max)
            }
            Frame::BackupFloor { rate } => {
                w.varint(kind::BACKUP_FLOOR)?;
                w.varint(rate)
            }
            Frame::PathCongestion {
                path,
                algorithm,
                seq,
            } => {
                w.varint(kind::PATH_CONGESTION)?;
                w.u8(path.0)?;
                w.u8(algorithm.map_or(0, congestion_code))?;
                w.varint(seq)
            }
            Frame::PathRateCap { path, rate, seq } => {
                w.varint(kind::PATH_RATE_CAP)?;
                w.u8(path.0)?;
                w.varint(rate)?;
                w.varint(seq)
            }
            Frame::Close { code, reason } => {
                let reason = truncate_text(reason, MAX_REASON_LEN);
                w.varint(kind::CLOSE)?;
                w.varint(code)?;
                w.varint(reason.len() as u64)?;
                w.bytes(reason.as_bytes())
            }
        }
    }
}

fn decode_stream<'a>(r: &mut Reader<'a>, fin: bool) -> Result<Frame<'a>, FrameError> {
    let flow = FlowId(r.varint("stream flow")?);
    let offset = r.varint("stream offset")?;
    let len = r.varint("stream length")?;
    if offset
        .checked_add(len)
        .is_none_or(|e| e > super::varint::VARINT_MAX)
    {
        return Err(FrameError::ValueTooLarge {
            field: "stream length",
            value: len,
        });
    }
    let data = r.bytes(usize::try_from(len).unwrap_or(usize::MAX), "stream data")?;
    Ok(Frame::Stream {
        flow,
        offset,
        fin,
        data,
    })
}

fn decode_datagram<'a>(
    r: &mut Reader<'a>,
    with_deadline: bool,
    fragmented: bool,
) -> Result<Frame<'a>, FrameError> {
    let flow = FlowId(r.varint("datagram flow")?);
    let seq = r.varint("datagram seq")?;
    let deadline = if with_deadline {
        Some(DatagramDeadline {
            budget_us: r.varint_u32("datagram budget")?,
            sent_at_us: r.varint("datagram sent_at")?,
        })
    } else {
        None
    };
    let fragment = if fragmented {
        Some(decode_fragment(r)?)
    } else {
        None
    };
    let len = r.varint("datagram length")?;
    let data = r.bytes(usize::try_from(len).unwrap_or(usize::MAX), "datagram data")?;
    Ok(Frame::Datagram {
        flow,
        seq,
        deadline,
        fragment,
        data,
    })
}

fn decode_fragment(r: &mut Reader<'_>) -> Result<Fragment, FrameError> {
    let index = r.u8("fragment index")?;
    let count = r.u8("fragment count")?;
    if count > MAX_FRAGMENTS {
        return Err(FrameError::ValueTooLarge {
            field: "fragment count",
            value: u64::from(count),
        });
    }
    if count < 2 {
        return Err(FrameError::InvalidEnum {
            field: "fragment count",
            value: count,
        });
    }
    if index >= count {
        return Err(FrameError::InvalidEnum {
            field: "fragment index",
            value: index,
        });
    }
    Ok(Fragment { index, count })
}

fn decode_path_status<'a>(r: &mut Reader<'a>) -> Result<Frame<'a>, FrameError> {
    let path = decode_path(r, "path status path")?;
    let status = r.u8("path status")?;
    if status > 1 {
        return Err(FrameError::InvalidEnum {
            field: "path status",
            value: status,
        });
    }
    Ok(Frame::PathStatus {
        path,
        backup: status == 1,
        seq: r.varint("path status seq")?,
    })
}

fn decode_close<'a>(r: &mut Reader<'a>) -> Result<Frame<'a>, FrameError> {
    let code = r.varint("close code")?;
    let len = r.varint("close reason length")?;
    if len > MAX_REASON_LEN as u64 {
        return Err(FrameError::ValueTooLarge {
            field: "close reason length",
            value: len,
        });
    }
    let bytes = r.bytes(len as usize, "close reason")?;
    let reason = std::str::from_utf8(bytes).map_err(|_| FrameError::InvalidText {
        field: "close reason",
    })?;
    Ok(Frame::Close { code, reason })
}

fn truncate_text(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// PATH_CONGESTION's code of `algorithm` (0 is "the receiver's own").
pub fn congestion_code(algorithm: CongestionAlgorithm) -> u8 {
    match algorithm {
        CongestionAlgorithm::NewReno => 1,
        CongestionAlgorithm::Cubic => 2,
        CongestionAlgorithm::Bbr => 3,
        CongestionAlgorithm::Lia => 4,
        CongestionAlgorithm::Olia => 5,
    }
}

/// The algorithm of a PATH_CONGESTION code other than 0; `None` for a code no build sends.
fn congestion_algorithm(code: u8) -> Option<CongestionAlgorithm> {
    CongestionAlgorithm::ALL
        .into_iter()
        .find(|&a| congestion_code(a) == code)
}

pub(crate) fn decode_path(r: &mut Reader<'_>, field: &'static str) -> Result<PathId, FrameError> {
    let p = r.u8(field)?;
    if usize::from(p) >= braid_sched_core::MAX_PATHS {
        return Err(FrameError::ValueTooLarge {
            field,
            value: u64::from(p),
        });
    }
    Ok(PathId(p))
}

/// Writes a STREAM frame header for `len` bytes that the caller writes right after.
pub fn encode_stream_header(
    w: &mut Writer<'_>,
    flow: FlowId,
    offset: u64,
    len: usize,
    fin: bool,
) -> Result<(), FrameError> {
    w.varint(if fin { kind::STREAM_FIN } else { kind::STREAM })?;
    w.varint(flow.0)?;
    w.varint(offset)?;
    w.varint(len as u64)
}

/// The most bytes a STREAM frame header takes.
pub const MAX_STREAM_HEADER_LEN: usize = 1 + 8 + 8 + 4;

/// Writes a DATAGRAM frame header (a DATAGRAM_FRAGMENT one for a fragment) for `len` bytes that
/// the caller writes right after.
pub fn encode_datagram_header(
    w: &mut Writer<'_>,
    flow: FlowId,
    seq: u64,
    deadline: Option<DatagramDeadline>,
    fragment: Option<Fragment>,
    len: usize,
) -> Result<(), FrameError> {
    let ty = match (deadline.is_some(), fragment.is_some()) {
        (false, false) => kind::DATAGRAM,
        (true, false) => kind::DATAGRAM_DEADLINE,
        (false, true) => kind::DATAGRAM_FRAGMENT,
        (true, true) => kind::DATAGRAM_FRAGMENT_DEADLINE,
    };
    w.varint(ty)?;
    w.varint(flow.0)?;
    w.varint(seq)?;
    if let Some(d) = deadline {
        w.varint(u64::from(d.budget_us))?;
        w.varint(d.sent_at_us)?;
    }
    if let Some(f) = fragment {
        w.u8(f.index)?;
        w.u8(f.count)?;
    }
    w.varint(len as u64)
}

/// The most bytes a DATAGRAM frame header takes.
pub const MAX_DATAGRAM_HEADER_LEN: usize = 1 + 8 + 8 + 4 + 8 + 4;
/// The most bytes a DATAGRAM_FRAGMENT frame header takes (a DATAGRAM one and the piece's index
/// and count).
pub const MAX_FRAGMENT_HEADER_LEN: usize = MAX_DATAGRAM_HEADER_LEN + 2;

fn encode_open(
    w: &mut Writer<'_>,
    flow: FlowId,
    kind: FlowKind,
    target: TargetRef<'_>,
    redundant: bool,
) -> Result<(), FrameError> {
    w.varint(kind::OPEN)?;
    w.varint(flow.0)?;
    let mark = if redundant { OPEN_REDUNDANT } else { 0 };
    w.u8(mark
        | match kind {
            FlowKind::Stream => 0,
            FlowKind::Datagram => 1,
            FlowKind::Ping => 2,
        })?;
    match target {
        TargetRef::Addr(SocketAddr::V4(a)) => {
            w.u8(4)?;
            w.bytes(&a.ip().octets())?;
            w.u16(a.port())
        }
        TargetRef::Addr(SocketAddr::V6(a)) => {
            w.u8(6)?;
            w.bytes(&a.ip().octets())?;
            w.u16(a.port())
        }
        TargetRef::Domain { name, port } => {
            let len = u8::try_from(name.len()).ok().filter(|&l| l > 0).ok_or(
                FrameError::ValueTooLarge {
                    field: "open domain length",
                    value: name.len() as u64,
                },
            )?;
            w.u8(3)?;
            w.u8(len)?;
            w.bytes(name.as_bytes())?;
            w.u16(port)
        }
    }
}

fn decode_open<'a>(r: &mut Reader<'a>) -> Result<Frame<'a>, FrameError> {
    let flow = FlowId(r.varint("open flow")?);
    let byte = r.u8("open kind")?;
    let redundant = byte & OPEN_REDUNDANT != 0;
    let kind = match byte & !OPEN_REDUNDANT {
        0 => FlowKind::Stream,
        1 => FlowKind::Datagram,
        2 => FlowKind::Ping,
        value => {
            return Err(FrameError::InvalidEnum {
                field: "open kind",
                value,
            });
        }
    };
    let target = match r.u8("open address type")? {
        4 => {
            let b = r.bytes(4, "open ipv4")?;
            let ip = Ipv4Addr::new(b[0], b[1], b[2], b[3]);
            TargetRef::Addr(SocketAddr::new(ip.into(), r.u16("open port")?))
        }
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(r.bytes(16, "open ipv6")?);
            TargetRef::Addr(SocketAddr::new(
                Ipv6Addr::from(o).into(),
                r.u16("open port")?,
            ))
        }
        3 => {
            let len = r.u8("open domain length")?;
            let b = r.bytes(usize::from(len), "open domain")?;
            let name = std::str::from_utf8(b)
                .ok()
                .filter(|n| !n.is_empty())
                .ok_or(FrameError::InvalidText {
                    field: "open domain",
                })?;
            TargetRef::Domain {
                name,
                port: r.u16("open port")?,
            }
        }
        value => {
            return Err(FrameError::InvalidEnum {
                field: "open address type",
                value,
            });
        }
    };
    Ok(Frame::Open {
        flow,
        kind,
        target,
        redundant,
    })
}

/// OPEN's kind byte, bit 7: the opener sends the flow redundantly and asks the receiver to do
/// the same (sent only to a peer that said it knows the bit: the JOIN answer's second byte,
/// bit 1; an older peer refuses the kind as `InvalidEnum`).
pub const OPEN_REDUNDANT: u8 = 0x80;

/// The most bytes an OPEN frame takes (a 255-byte domain name and an 8-byte flow id).
pub const MAX_OPEN_LEN: usize = 1 + 8 + 2 + 1 + 255 + 2;

/// Bytes an OPEN frame for `target` takes.
pub fn open_len(flow: FlowId, target: TargetRef<'_>) -> usize {
    1 + varint_len(flow.0)
        + 2
        + match target {
            TargetRef::Addr(SocketAddr::V4(_)) => 4 + 2,
            TargetRef::Addr(SocketAddr::V6(_)) => 16 + 2,
            TargetRef::Domain { name, .. } => 1 + name.len() + 2,
        }
}

/// Bytes a STREAM frame's header takes (type, flow id, offset and a length of `len`), the
/// longest type byte counted.
pub fn stream_header_len(flow: FlowId, offset: u64, len: u64) -> usize {
    varint_len(kind::STREAM_FIN) + varint_len(flow.0) + varint_len(offset) + varint_len(len)
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
