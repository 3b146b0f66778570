//! The ACK frame (RFC 9000 §19.3 layout, plus a path id, the receiver's clock and an optional
//! receiver report): decoding with validation of every range up front, so that iterating the
//! ranges later cannot fail, and encoding from a [`RangeSet`] of received packet numbers with as
//! many of the highest ranges as fit.
//!
//! The report has two layouts, told apart by the frame type: `ACK_REPORT` (0x03, the first
//! layout: session-wide counts only, still decoded, with every path's counts zero) and
//! `ACK_PATH_REPORT` (0x0e, what this build sends: the same fields, then the deadline counts
//! of each path that had deadline arrivals, for DaMPS's per-path reward).

use braid_sched_core::{MAX_PATHS, PathDeadlines, PathId, ReceiverReport};

use super::error::FrameError;
use super::frame::{MAX_ACK_RANGES, decode_path, kind};
use super::ranges::RangeSet;
use super::varint::{Reader, Writer, varint_len};

/// An ACK frame: which packets of one path's packet-number space arrived.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AckFrame<'a> {
    /// The path whose packets are acknowledged.
    pub path: PathId,
    /// The largest packet number acknowledged.
    pub largest: u64,
    /// Microseconds the receiver held the largest packet before sending this ACK.
    pub ack_delay_us: u64,
    /// The receiver's clock when the largest packet arrived, µs.
    pub receiver_time_us: u64,
    /// Packets below `largest` acknowledged contiguously with it.
    pub first_range: u64,
    /// The receiver's periodic report, when this ACK carries one.
    pub report: Option<ReceiverReport>,
    pub(crate) range_count: u64,
    pub(crate) raw_ranges: &'a [u8],
}

impl<'a> AckFrame<'a> {
    /// Acknowledged packet numbers as inclusive `(smallest, largest)` pairs, highest first.
    pub fn ranges(&self) -> AckRanges<'a> {
        AckRanges {
            reader: Reader::new(self.raw_ranges),
            next: Some((self.largest - self.first_range, self.largest)),
            left: self.range_count,
        }
    }
}

/// Iterator over the ranges of a validated [`AckFrame`].
#[derive(Debug)]
pub struct AckRanges<'a> {
    reader: Reader<'a>,
    next: Option<(u64, u64)>,
    left: u64,
}

impl Iterator for AckRanges<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        let current = self.next.take()?;
        if self.left > 0 {
            self.left -= 1;
            // Validated when the frame was decoded, so these reads and subtractions succeed.
            self.next = next_ack_range(&mut self.reader, current.0).ok();
        }
        Some(current)
    }
}

pub(crate) fn next_ack_range(r: &mut Reader<'_>, smallest: u64) -> Result<(u64, u64), FrameError> {
    let gap = r.varint("ack gap")?;
    let len = r.varint("ack range length")?;
    let largest = smallest
        .checked_sub(gap)
        .and_then(|v| v.checked_sub(2))
        .ok_or(FrameError::AckRangeUnderflow { index: 0 })?;
    let low = largest
        .checked_sub(len)
        .ok_or(FrameError::AckRangeUnderflow { index: 0 })?;
    Ok((low, largest))
}

/// Which receiver report an ACK frame carries, by frame type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReportLayout {
    /// `ACK` (0x02): none.
    None,
    /// `ACK_REPORT` (0x03): session-wide counts only.
    SessionOnly,
    /// `ACK_PATH_REPORT` (0x0e): session-wide counts, then per-path deadline counts.
    PerPath,
}

pub(crate) fn decode_ack<'a>(
    r: &mut Reader<'a>,
    layout: ReportLayout,
) -> Result<AckFrame<'a>, FrameError> {
    let path = decode_path(r, "ack path")?;
    let largest = r.varint("ack largest")?;
    let ack_delay_us = r.varint("ack delay")?;
    let receiver_time_us = r.varint("ack receiver time")?;
    let range_count = r.varint("ack range count")?;
    if range_count > MAX_ACK_RANGES {
        return Err(FrameError::ValueTooLarge {
            field: "ack range count",
            value: range_count,
        });
    }
    let first_range = r.varint("ack first range")?;
    let mut smallest = largest
        .checked_sub(first_range)
        .ok_or(FrameError::AckRangeUnderflow { index: 0 })?;
    // Validate the ranges now so that `AckFrame::ranges` cannot fail later.
    let mut probe = Reader::new(rest_of(r));
    for index in 1..=range_count {
        let (low, _) = next_ack_range(&mut probe, smallest).map_err(|e| match e {
            FrameError::AckRangeUnderflow { .. } => FrameError::AckRangeUnderflow { index },
            other => other,
        })?;
        smallest = low;
    }
    let used = rest_of(r).len() - probe.remaining();
    let raw_ranges = r.bytes(used, "ack ranges")?;
    let report = match layout {
        ReportLayout::None => None,
        ReportLayout::SessionOnly => Some(decode_report(r)?),
        ReportLayout::PerPath => {
            let mut report = decode_report(r)?;
            decode_path_deadlines(r, &mut report.path_deadlines)?;
            Some(report)
        }
    };
    Ok(AckFrame {
        path,
        largest,
        ack_delay_us,
        receiver_time_us,
        first_range,
        report,
        range_count,
        raw_ranges,
    })
}

fn decode_report(r: &mut Reader<'_>) -> Result<ReceiverReport, FrameError> {
    Ok(ReceiverReport {
        interval_us: r.varint_u32("report interval")?,
        delivered_bytes: r.varint("report delivered")?,
        duplicate_bytes: r.varint("report duplicate")?,
        ooo_packets: r.varint_u32("report out-of-order")?,
        deadline_met: r.varint_u32("report deadline met")?,
        deadline_total: r.varint_u32("report deadline total")?,
        path_deadlines: [PathDeadlines::default(); MAX_PATHS],
    })
}

/// The per-path section: a count (≤ `MAX_PATHS`), then per entry a path id (< `MAX_PATHS`,
/// strictly increasing), met and total (met ≤ total ≤ 2^32-1).
fn decode_path_deadlines(
    r: &mut Reader<'_>,
    out: &mut [PathDeadlines; MAX_PATHS],
) -> Result<(), FrameError> {
    let count = r.varint("report path count")?;
    if count > MAX_PATHS as u64 {
        return Err(FrameError::ValueTooLarge {
            field: "report path count",
            value: count,
        });
    }
    let mut next_allowed = 0usize;
    for _ in 0..count {
        let path = decode_path(r, "report path")?;
        if path.index() < next_allowed {
            // Ids must increase: a repeated or out-of-order id is out of range here.
            return Err(FrameError::ValueTooLarge {
                field: "report path (ids must increase)",
                value: u64::from(path.0),
            });
        }
        next_allowed = path.index() + 1;
        let met = r.varint_u32("report path deadline met")?;
        let total = r.varint_u32("report path deadline total")?;
        if met > total {
            return Err(FrameError::ValueTooLarge {
                field: "report path deadline met (above its total)",
                value: u64::from(met),
            });
        }
        out[path.index()] = PathDeadlines { met, total };
    }
    Ok(())
}

fn rest_of<'a>(r: &Reader<'a>) -> &'a [u8] {
    r.peek_rest()
}

pub(crate) fn write_ack_head(
    w: &mut Writer<'_>,
    ack: &AckFrame<'_>,
    range_count: u64,
) -> Result<(), FrameError> {
    w.varint(if ack.report.is_some() {
        kind::ACK_PATH_REPORT
    } else {
        kind::ACK
    })?;
    w.u8(ack.path.0)?;
    w.varint(ack.largest)?;
    w.varint(ack.ack_delay_us)?;
    w.varint(ack.receiver_time_us)?;
    w.varint(range_count)?;
    w.varint(ack.first_range)
}

pub(crate) fn write_report(
    w: &mut Writer<'_>,
    report: Option<&ReceiverReport>,
) -> Result<(), FrameError> {
    if let Some(rep) = report {
        w.varint(u64::from(rep.interval_us))?;
        w.varint(rep.delivered_bytes)?;
        w.varint(rep.duplicate_bytes)?;
        w.varint(u64::from(rep.ooo_packets))?;
        w.varint(u64::from(rep.deadline_met))?;
        w.varint(u64::from(rep.deadline_total))?;
        w.varint(reported_paths(rep).count() as u64)?;
        for (path, counts) in reported_paths(rep) {
            w.u8(path)?;
            w.varint(u64::from(counts.met.min(counts.total)))?;
            w.varint(u64::from(counts.total))?;
        }
    }
    Ok(())
}

/// The paths whose deadline counts go on the wire: those with deadline arrivals.
fn reported_paths(rep: &ReceiverReport) -> impl Iterator<Item = (u8, PathDeadlines)> + '_ {
    (0u8..)
        .zip(rep.path_deadlines.iter().copied())
        .filter(|(_, c)| c.total > 0)
}

/// What [`encode_ack`] writes besides the ranges.
#[derive(Clone, Copy, Debug)]
pub struct AckFields {
    /// The path whose packets are acknowledged.
    pub path: PathId,
    /// Microseconds the largest packet was held.
    pub ack_delay_us: u64,
    /// Our clock when the largest packet arrived, µs.
    pub receiver_time_us: u64,
    /// The report to attach.
    pub report: Option<ReceiverReport>,
}

/// Writes an ACK frame for the packet numbers in `received` (highest ranges first), with as
/// many ranges as fit in `max_len` bytes and [`MAX_ACK_RANGES`]. Returns false (writing nothing)
/// when `received` is empty or not even the first range fits.
pub fn encode_ack(
    w: &mut Writer<'_>,
    received: &RangeSet,
    fields: &AckFields,
    max_len: usize,
) -> Result<bool, FrameError> {
    let Some(top) = received.iter().next_back() else {
        return Ok(false);
    };
    let largest = top.end - 1;
    let head = AckFrame {
        path: fields.path,
        largest,
        ack_delay_us: fields.ack_delay_us,
        receiver_time_us: fields.receiver_time_us,
        first_range: largest - top.start,
        report: fields.report,
        range_count: 0,
        raw_ranges: &[],
    };
    let report_len = fields.report.map_or(0, |r| report_len(&r));
    let mut len = ack_head_len(&head, 0) + report_len;
    if len > max_len.min(w.remaining()) {
        return Ok(false);
    }
    // Count how many further ranges fit.
    let mut count = 0u64;
    let mut smallest = top.start;
    for r in received.iter().rev().skip(1) {
        let gap = smallest - r.end - 1;
        let extra = varint_len(gap) + varint_len(r.end - 1 - r.start);
        let grown = len - ack_head_len(&head, count) + ack_head_len(&head, count + 1) + extra;
        if count == MAX_ACK_RANGES || grown > max_len.min(w.remaining()) {
            break;
        }
        len = grown;
        count += 1;
        smallest = r.start;
    }
    write_ack_head(w, &head, count)?;
    let mut smallest = top.start;
    for r in received.iter().rev().skip(1).take(count as usize) {
        w.varint(smallest - r.end - 1)?;
        w.varint(r.end - 1 - r.start)?;
        smallest = r.start;
    }
    write_report(w, fields.report.as_ref())?;
    Ok(true)
}

fn ack_head_len(a: &AckFrame<'_>, range_count: u64) -> usize {
    1 + 1
        + varint_len(a.largest)
        + varint_len(a.ack_delay_us)
        + varint_len(a.receiver_time_us)
        + varint_len(range_count)
        + varint_len(a.first_range)
}

fn report_len(r: &ReceiverReport) -> usize {
    varint_len(u64::from(r.interval_us))
        + varint_len(r.delivered_bytes)
        + varint_len(r.duplicate_bytes)
        + varint_len(u64::from(r.ooo_packets))
        + varint_len(u64::from(r.deadline_met))
        + varint_len(u64::from(r.deadline_total))
        + varint_len(reported_paths(r).count() as u64)
        + reported_paths(r)
            .map(|(_, c)| {
                1 + varint_len(u64::from(c.met.min(c.total))) + varint_len(u64::from(c.total))
            })
            .sum::<usize>()
}
