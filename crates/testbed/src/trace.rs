//! Link capacity traces: delivery opportunities read from a file.
//!
//! Two formats are understood (see `docs/scenarios.md` and `config/traces/README.md`):
//!
//! - **mahimahi** (Netravali et al., "Mahimahi: accurate record-and-replay for HTTP", USENIX ATC
//!   2015; Winstein et al., NSDI 2013 for the cellular traces): one integer per line, a
//!   millisecond timestamp at which one 1500-byte packet may cross the link. A repeated
//!   timestamp gives several opportunities in that millisecond. The file loops with a period
//!   equal to its last timestamp.
//! - **CSV of rates per second** (the NYU METS format, `value,Mbits/sec`; the unit may also be
//!   `bits/sec`, `Kbits/sec` or `Gbits/sec`, as iperf writes): one line per second; a rate of
//!   r Mbit/s becomes `round(r * 1e6 / (8 * 1500))` opportunities spread evenly over
//!   that second. The file loops with a period of one second per line.
//!
//! The format is chosen by content: a line containing a comma makes the file CSV, otherwise it
//! is mahimahi. Parsing errors name the file and the 1-based line number.

use std::fmt;
use std::path::{Path, PathBuf};

/// Bytes one delivery opportunity carries (the MTU both trace formats assume).
pub const OPPORTUNITY_BYTES: u32 = 1500;

const MICROS_PER_SECOND: u64 = 1_000_000;
/// The largest trace file read (a mahimahi trace of a day at 100 Mbit/s is about 40 MB).
pub const MAX_TRACE_BYTES: u64 = 64 << 20;

/// Which of the two trace formats a file was read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// One millisecond timestamp per line, one 1500-byte opportunity each.
    Mahimahi,
    /// `value,Mbits/sec`, one line per second.
    MbpsCsv,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("trace {file}: cannot read: {source}")]
    Io {
        /// The trace file.
        file: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A line is not what the format expects.
    #[error("trace {file}:{line}: {problem} (found {found:?})")]
    Malformed {
        /// The trace file.
        file: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was expected.
        problem: &'static str,
        /// The offending text.
        found: String,
    },
    /// The trace holds no delivery opportunity, or its loop period is zero.
    #[error("trace {file}: {problem}")]
    Empty {
        /// The trace file.
        file: PathBuf,
        /// What is wrong.
        problem: &'static str,
    },
}

/// A looping schedule of delivery opportunities, each carrying [`OPPORTUNITY_BYTES`].
///
/// Times are microseconds from the start of one loop, sorted, none above
/// [`Trace::period_micros`]; loop k offers each of them shifted by k periods.
#[derive(Clone, PartialEq, Eq)]
pub struct Trace {
    source: PathBuf,
    format: TraceFormat,
    opportunities: Vec<u64>,
    period_micros: u64,
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trace")
            .field("source", &self.source)
            .field("format", &self.format)
            .field("opportunities", &self.opportunities.len())
            .field("period_micros", &self.period_micros)
            .finish()
    }
}

impl Trace {
    /// Reads and parses a trace file (format chosen by content, see the module docs).
    pub fn load(file: &Path) -> Result<Trace, TraceError> {
        let text = crate::input::read_text_capped(file, MAX_TRACE_BYTES).map_err(|source| {
            TraceError::Io {
                file: file.to_path_buf(),
                source,
            }
        })?;
        Trace::parse(&text, file)
    }

    /// Parses trace text; `file` is only used to name the source in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Trace, TraceError> {
        if text.lines().any(|line| line.contains(',')) {
            Trace::parse_csv(text, file)
        } else {
            Trace::parse_mahimahi(text, file)
        }
    }

    /// Parses the mahimahi format: one non-decreasing millisecond timestamp per line.
    pub fn parse_mahimahi(text: &str, file: &Path) -> Result<Trace, TraceError> {
        let mut opportunities = Vec::new();
        let mut last_ms = 0u64;
        for line in lines(text, file) {
            let malformed = |problem| line.malformed(problem);
            let ms: u64 = line
                .text
                .parse()
                .map_err(|_| malformed("expected a millisecond timestamp (unsigned integer)"))?;
            if ms < last_ms {
                return Err(malformed("timestamps must not decrease"));
            }
            if ms > u64::MAX / 1_000 {
                return Err(malformed("timestamp too large"));
            }
            last_ms = ms;
            opportunities.push(ms * 1_000);
        }
        // mahimahi loops with a period equal to the last timestamp: loop k offers the
        // opportunities at k * period + t for every t in the file, so the last timestamp of
        // one loop and the first of the next may be the same instant.
        let period_micros = last_ms * 1_000;
        if opportunities.is_empty() {
            return Err(empty(file, "no delivery opportunity in the trace"));
        }
        if period_micros == 0 {
            return Err(empty(
                file,
                "the last timestamp is 0, so the trace has no period",
            ));
        }
        Ok(Trace {
            source: file.to_path_buf(),
            format: TraceFormat::Mahimahi,
            opportunities,
            period_micros,
        })
    }

    /// Parses the CSV format: `value,unit` (`Mbits/sec` and the other iperf units), one line
    /// per second.
    pub fn parse_csv(text: &str, file: &Path) -> Result<Trace, TraceError> {
        let mut opportunities = Vec::new();
        let mut seconds = 0u64;
        for line in lines(text, file) {
            let malformed = |problem| line.malformed(problem);
            let (value, unit) = line
                .text
                .split_once(',')
                .ok_or_else(|| malformed("expected `value,Mbits/sec`"))?;
            let scale = unit_scale(unit.trim()).ok_or_else(|| {
                malformed("expected a unit `bits/sec`, `Kbits/sec`, `Mbits/sec` or `Gbits/sec`")
            })?;
            let value: f64 = value
                .trim()
                .parse()
                .map_err(|_| malformed("expected a number before the comma"))?;
            let mbps = value * scale;
            if !(0.0..=1e6).contains(&mbps) {
                return Err(malformed("expected a finite rate between 0 and 1e6 Mbit/s"));
            }
            let count = (mbps * 1e6 / (8.0 * f64::from(OPPORTUNITY_BYTES))).round() as u64;
            let start = seconds * MICROS_PER_SECOND;
            for k in 0..count {
                opportunities.push(start + k * MICROS_PER_SECOND / count);
            }
            seconds += 1;
        }
        if seconds == 0 {
            return Err(empty(file, "no sample in the trace"));
        }
        if opportunities.is_empty() {
            return Err(empty(
                file,
                "every sample is too small to give a delivery opportunity",
            ));
        }
        Ok(Trace {
            source: file.to_path_buf(),
            format: TraceFormat::MbpsCsv,
            opportunities,
            period_micros: seconds * MICROS_PER_SECOND,
        })
    }

    /// The file the trace was read from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The format the trace was read as.
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// Length of one loop, in microseconds.
    pub fn period_micros(&self) -> u64 {
        self.period_micros
    }

    /// Delivery opportunities in one loop.
    pub fn opportunities_per_period(&self) -> usize {
        self.opportunities.len()
    }

    /// Mean capacity over one loop, in Mbit/s.
    pub fn mean_rate_mbps(&self) -> f64 {
        let bits = self.opportunities.len() as f64 * f64::from(OPPORTUNITY_BYTES) * 8.0;
        bits / self.period_micros as f64
    }

    /// Time (µs from the origin) of the opportunity with absolute index `index`, counting
    /// through the loops.
    pub fn opportunity_time(&self, index: u64) -> u64 {
        let per_loop = self.opportunities.len() as u64;
        let loops = index / per_loop;
        // `index % per_loop` is below the length, so the index is in range.
        let offset = self.opportunities[(index % per_loop) as usize];
        loops
            .saturating_mul(self.period_micros)
            .saturating_add(offset)
    }

    /// Absolute index of the first opportunity at or after `micros`.
    pub fn first_opportunity_at_or_after(&self, micros: u64) -> u64 {
        let per_loop = self.opportunities.len() as u64;
        let loops = micros / self.period_micros;
        let offset = micros % self.period_micros;
        let within = self.opportunities.partition_point(|&t| t < offset) as u64;
        let index = loops.saturating_mul(per_loop).saturating_add(within);
        if offset == 0 && loops > 0 {
            // The previous loop's opportunities at exactly `period` fall at `micros` too.
            let at_period = self.opportunities.len()
                - self
                    .opportunities
                    .partition_point(|&t| t < self.period_micros);
            return index.saturating_sub(at_period as u64);
        }
        index
    }
}

/// Mbit/s per unit of an iperf-style rate unit (the NYU METS files mix them).
fn unit_scale(unit: &str) -> Option<f64> {
    const UNITS: [(&str, f64); 4] = [
        ("bits/sec", 1e-6),
        ("kbits/sec", 1e-3),
        ("mbits/sec", 1.0),
        ("gbits/sec", 1e3),
    ];
    UNITS
        .iter()
        .find(|(name, _)| unit.eq_ignore_ascii_case(name))
        .map(|&(_, scale)| scale)
}

fn empty(file: &Path, problem: &'static str) -> TraceError {
    TraceError::Empty {
        file: file.to_path_buf(),
        problem,
    }
}

/// A non-empty line of a trace file, trimmed.
struct Line<'a> {
    file: &'a Path,
    /// 1-based.
    number: usize,
    text: &'a str,
}

impl Line<'_> {
    fn malformed(&self, problem: &'static str) -> TraceError {
        TraceError::Malformed {
            file: self.file.to_path_buf(),
            line: self.number,
            problem,
            found: self.text.to_string(),
        }
    }
}

/// The non-empty lines of `text`, trimmed, with their 1-based numbers in the file.
fn lines<'a>(text: &'a str, file: &'a Path) -> impl Iterator<Item = Line<'a>> {
    text.lines().enumerate().filter_map(move |(index, raw)| {
        let text = raw.trim();
        (!text.is_empty()).then_some(Line {
            file,
            number: index + 1,
            text,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mahimahi_loops_with_the_last_timestamp_as_period() {
        let t = Trace::parse("0\n5\n5\n10\n", Path::new("x")).unwrap();
        assert_eq!(t.format(), TraceFormat::Mahimahi);
        assert_eq!(t.period_micros(), 10_000);
        assert_eq!(t.opportunities, vec![0, 5_000, 5_000, 10_000]);
        // Loop 1 starts with the instant loop 0 ended on.
        assert_eq!(t.opportunity_time(3), 10_000);
        assert_eq!(t.opportunity_time(4), 10_000);
        assert_eq!(t.opportunity_time(5), 15_000);
        assert_eq!(t.first_opportunity_at_or_after(5_001), 3);
        assert_eq!(t.first_opportunity_at_or_after(5_000), 1);
        assert_eq!(t.first_opportunity_at_or_after(10_000), 3);
        assert_eq!(t.first_opportunity_at_or_after(0), 0);
    }

    #[test]
    fn csv_spreads_opportunities_evenly() {
        let t = Trace::parse("36,Kbits/sec\r\n0,Mbits/sec\r\n", Path::new("x")).unwrap();
        // 0.036 Mbit/s = 3 packets of 1500 bytes per second.
        assert_eq!(t.opportunities, vec![0, 333_333, 666_666]);
        assert_eq!(t.period_micros(), 2_000_000);
    }
}
