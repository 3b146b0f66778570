//! The session's error types: malformed frames ([`FrameError`], small and `Copy` because the
//! decoder returns them per packet), protocol violations by the peer ([`SessionError`]), misuse of
//! the flow and path API ([`FlowError`], [`PathError`]) and bad configuration ([`ConfigError`]).
//! Every variant names the offending input.

use braid_sched_core::{FlowId, PathId};

/// A received packet that does not parse, or a frame that does not fit the buffer it is being
/// written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The packet's version byte is not one this build speaks.
    #[error("unsupported protocol version {0} (this build speaks {supported})", supported = super::frame::VERSION)]
    UnsupportedVersion(u8),
    /// The input ended in the middle of `field`.
    #[error("packet truncated while reading `{field}`")]
    Truncated {
        /// The field being read.
        field: &'static str,
    },
    /// A frame type this version does not define.
    #[error("unknown frame type {0:#x}")]
    UnknownFrameType(u64),
    /// A field holds a value outside its documented range.
    #[error("field `{field}` = {value} is out of range")]
    ValueTooLarge {
        /// The field.
        field: &'static str,
        /// The offending value.
        value: u64,
    },
    /// An ACK frame's ranges run below packet number zero.
    #[error("ACK range {index} runs below packet number 0")]
    AckRangeUnderflow {
        /// Which range (0 is the first).
        index: u64,
    },
    /// An enumerated byte (flow kind, address family, path status) has an undefined value.
    #[error("field `{field}` has undefined value {value}")]
    InvalidEnum {
        /// The field.
        field: &'static str,
        /// The offending value.
        value: u8,
    },
    /// A text field (domain name, close reason) is not valid UTF-8 or is empty.
    #[error("field `{field}` is not valid text")]
    InvalidText {
        /// The field.
        field: &'static str,
    },
    /// A packet header with no frame after it.
    #[error("packet carries no frames")]
    Empty,
    /// The output buffer is too small for the frame being written.
    #[error("buffer too small: {needed} bytes needed, {available} available")]
    BufferTooSmall {
        /// Bytes the write needed.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
}

/// Something the peer sent that breaks the protocol; the session closes when it sees one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The datagram does not parse.
    #[error("malformed packet on path {path:?}: {source}")]
    Frame {
        /// The path it arrived on.
        path: PathId,
        /// What is wrong with it.
        source: FrameError,
    },
    /// A datagram arrived on a path the session does not know.
    #[error("datagram on unknown path {0:?}")]
    UnknownPath(PathId),
    /// The peer sent beyond the flow-control limit we advertised.
    #[error("flow {flow:?}: peer sent up to byte {offset}, beyond the advertised limit {limit}")]
    FlowControl {
        /// The flow (flow 0 for the session-wide limit).
        flow: FlowId,
        /// The offending end offset.
        offset: u64,
        /// Our limit.
        limit: u64,
    },
    /// A flow's final size changed, or data arrived beyond it.
    #[error("flow {flow:?}: data at {offset} contradicts final size {final_size}")]
    FinalSize {
        /// The flow.
        flow: FlowId,
        /// The offending offset.
        offset: u64,
        /// The final size announced before.
        final_size: u64,
    },
    /// The peer acknowledged a packet number that was never sent on the path.
    #[error("path {path:?}: ACK of unsent packet {packet}")]
    AckOfUnsent {
        /// The path.
        path: PathId,
        /// The packet number.
        packet: u64,
    },
    /// A frame referred to a flow of the wrong kind (stream bytes on a datagram flow, …).
    #[error("flow {0:?}: frame does not match the flow's kind")]
    WrongFlowKind(FlowId),
    /// The session was closed (by us, the peer, or the idle timeout).
    #[error("session closed (code {0})")]
    Closed(u64),
}

/// A flow API call that cannot be honoured.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// No such flow (never opened, or already closed).
    #[error("unknown flow {0:?}")]
    UnknownFlow(FlowId),
    /// The session already has `max` flows.
    #[error("flow limit reached ({max} flows)")]
    TooManyFlows {
        /// The configured limit.
        max: usize,
    },
    /// The peer reset the flow; what it had sent is discarded.
    #[error("flow {flow:?} was reset by the peer (code {code})")]
    Reset {
        /// The flow.
        flow: FlowId,
        /// The peer's code.
        code: u64,
    },
    /// The flow's sending side was finished or reset.
    #[error("flow {0:?} is closed for writing")]
    ClosedForWriting(FlowId),
    /// A ping flow opened towards a peer that did not say it relays ICMP echoes.
    #[error("the peer does not relay ICMP echoes")]
    PingNotRelayed,
    /// A stream call on a datagram flow, or the reverse.
    #[error("flow {0:?} is not of the kind this call needs")]
    WrongKind(FlowId),
    /// A datagram larger than any path can carry.
    #[error("datagram of {len} bytes exceeds the limit of {max}")]
    DatagramTooLarge {
        /// Its length.
        len: usize,
        /// The largest accepted.
        max: usize,
    },
    /// The domain name of a target is empty, longer than 255 bytes, or not text.
    #[error("invalid target domain `{0}`")]
    InvalidDomain(String),
    /// The datagram send queue is full.
    #[error("datagram queue full ({max} datagrams)")]
    DatagramQueueFull {
        /// The configured limit.
        max: usize,
    },
    /// The session is closed.
    #[error("session closed")]
    SessionClosed,
    /// The session has no path (none joined yet, or every one left): the client's driver
    /// refuses new flows then rather than let them wait.
    #[error("the session has no path")]
    NoPath,
}

/// A path API call that cannot be honoured.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path id is not below `MAX_PATHS`.
    #[error("path id {0:?} out of range")]
    OutOfRange(PathId),
    /// The path is already joined.
    #[error("path {0:?} already joined")]
    AlreadyJoined(PathId),
    /// The path is not joined.
    #[error("unknown path {0:?}")]
    UnknownPath(PathId),
    /// Its configuration is invalid.
    #[error("path {path:?}: {source}")]
    Config {
        /// The path.
        path: PathId,
        /// What is wrong.
        source: ConfigError,
    },
}

/// A configuration value outside its range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("config field `{field}` = {value}: {expected}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// The offending value, printed.
    pub value: String,
    /// What is accepted.
    pub expected: &'static str,
}

/// Close code used when every path has been dead for the idle timeout.
pub const IDLE_TIMEOUT_CODE: u64 = 0x1d1e;
/// Reset code sent for a peer-opened flow refused because the flow limit was reached.
pub const FLOW_REFUSED_CODE: u64 = 0xf10;
