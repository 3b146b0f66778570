//! The error type of every solver in this crate. Errors are small `Copy` values that name the
//! offending input, so the hot path can return them without allocating.

/// Which linear program an error or a result belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LpKind {
    /// OLMS eq. (4): maximise bandwidth under a per-path RTT cap.
    OlmsMaxRtt,
    /// OLMS eq. (8): minimise the largest weighted RTT under a bandwidth budget.
    OlmsBandwidth,
    /// DaMPS eq. (1) with `s_ij` relaxed to `[0, 1]`.
    DampsBatch,
    /// Dependent rounding of a scheduling vector (not an LP, but shares the error type).
    DependentRounding,
}

impl LpKind {
    /// A short stable name, used in errors, benchmark ids and docs.
    pub const fn name(self) -> &'static str {
        match self {
            LpKind::OlmsMaxRtt => "olms-maxrtt",
            LpKind::OlmsBandwidth => "olms-bandwidth",
            LpKind::DampsBatch => "damps-batch",
            LpKind::DependentRounding => "dependent-rounding",
        }
    }
}

impl std::fmt::Display for LpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a problem could not be solved.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum LpError {
    /// An entry of an input vector is NaN, infinite, or out of its allowed range.
    #[error("{lp}: {input}[{index}] = {value} is out of range (expected {expected})")]
    InvalidEntry {
        /// The problem being solved.
        lp: LpKind,
        /// The name of the input vector, e.g. `"rtt"`.
        input: &'static str,
        /// The position of the bad entry.
        index: usize,
        /// The bad value.
        value: f64,
        /// The allowed range, in words.
        expected: &'static str,
    },
    /// A scalar input is NaN, infinite, or out of its allowed range.
    #[error("{lp}: {input} = {value} is out of range (expected {expected})")]
    InvalidScalar {
        /// The problem being solved.
        lp: LpKind,
        /// The name of the input, e.g. `"rtt_limit"`.
        input: &'static str,
        /// The bad value.
        value: f64,
        /// The allowed range, in words.
        expected: &'static str,
    },
    /// Two input vectors that must have one entry per path differ in length.
    #[error("{lp}: {input} has {len} entries but {reference} has {expected}")]
    LengthMismatch {
        /// The problem being solved.
        lp: LpKind,
        /// The vector with the unexpected length.
        input: &'static str,
        /// Its length.
        len: usize,
        /// The vector it must match.
        reference: &'static str,
        /// The length of `reference`.
        expected: usize,
    },
    /// An input vector is empty or longer than the fixed capacity of the fast solvers.
    #[error("{lp}: {input} has {len} entries (allowed 1..={max})")]
    BadLength {
        /// The problem being solved.
        lp: LpKind,
        /// The vector with the bad length.
        input: &'static str,
        /// Its length.
        len: usize,
        /// The largest supported length.
        max: usize,
    },
    /// The number of paths to choose, `L`, is not in `1..=K`.
    #[error("{lp}: choose = {choose} is out of range (expected 1..={paths})")]
    InvalidChoose {
        /// The problem being solved.
        lp: LpKind,
        /// The requested `L`.
        choose: usize,
        /// The number of paths `K`.
        paths: usize,
    },
    /// The weights given to dependent rounding do not sum to an integer.
    #[error("{lp}: weights sum to {sum}, which is not an integer")]
    FractionalSum {
        /// Always [`LpKind::DependentRounding`].
        lp: LpKind,
        /// The sum of the weights.
        sum: f64,
    },
    /// The constraints admit no solution (OLMS falls back to minRTT in this case).
    #[error("{lp}: infeasible: {reason}")]
    Infeasible {
        /// The problem being solved.
        lp: LpKind,
        /// Which constraint cannot be met.
        reason: &'static str,
    },
    /// A solver failed for a reason other than infeasibility (good_lp reported an error, or a
    /// fast solver's finite iteration did not settle because of rounding).
    #[error("{lp}: solver failed: {reason}")]
    Solver {
        /// The problem being solved.
        lp: LpKind,
        /// What went wrong.
        reason: &'static str,
    },
}

/// Tolerance used when comparing sums and constraint values computed in floating point.
pub const TOLERANCE: f64 = 1e-9;

/// Checks one vector: length `1..=max`, every entry finite and `>= 0`.
pub(crate) fn check_nonnegative(
    lp: LpKind,
    input: &'static str,
    values: &[f64],
    max: usize,
) -> Result<(), LpError> {
    if values.is_empty() || values.len() > max {
        return Err(LpError::BadLength {
            lp,
            input,
            len: values.len(),
            max,
        });
    }
    // One branch for the whole vector on the hot path (NaN fails both comparisons); the
    // search for the bad entry runs only when there is one.
    let in_range = |value: f64| (0.0..=f64::MAX).contains(&value);
    if values
        .iter()
        .fold(true, |all, &value| all & in_range(value))
    {
        return Ok(());
    }
    for (index, &value) in values.iter().enumerate() {
        if !in_range(value) {
            return Err(LpError::InvalidEntry {
                lp,
                input,
                index,
                value,
                expected: "a finite number >= 0",
            });
        }
    }
    Ok(())
}

/// Checks a scalar: finite and `>= 0`.
pub(crate) fn check_scalar(lp: LpKind, input: &'static str, value: f64) -> Result<(), LpError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(LpError::InvalidScalar {
            lp,
            input,
            value,
            expected: "a finite number >= 0",
        })
    }
}

/// Checks that `values` has as many entries as `reference`.
pub(crate) fn check_same_length(
    lp: LpKind,
    input: &'static str,
    len: usize,
    reference: &'static str,
    expected: usize,
) -> Result<(), LpError> {
    if len == expected {
        Ok(())
    } else {
        Err(LpError::LengthMismatch {
            lp,
            input,
            len,
            reference,
            expected,
        })
    }
}

/// Checks `1 <= choose <= paths`.
pub(crate) fn check_choose(lp: LpKind, choose: usize, paths: usize) -> Result<(), LpError> {
    if (1..=paths).contains(&choose) {
        Ok(())
    } else {
        Err(LpError::InvalidChoose { lp, choose, paths })
    }
}

/// True when an OLMS problem passes every check of [`check_olms`], decided with one branch
/// for the whole input: the solvers call it first and run [`check_olms`], which names the bad
/// input, only when it says no (it is never more lenient than [`check_olms`]).
#[inline(always)]
pub(crate) fn olms_input_ok(bandwidth: &[f64], rtt: &[f64], limit: f64, choose: usize) -> bool {
    let len = bandwidth.len();
    // `&` rather than `&&`: every test runs, and the compiler need not branch on each.
    let shape = (len == rtt.len())
        & (len.wrapping_sub(1) < crate::MAX_PATHS)
        & (choose.wrapping_sub(1) < len);
    let entries = bandwidth.iter().zip(rtt).fold(true, |all, (&b, &r)| {
        all & finite_nonnegative(b) & finite_nonnegative(r)
    });
    shape & entries & finite_nonnegative(limit)
}

/// `0 <= value <= f64::MAX`: false for NaN (which fails both comparisons) and infinities.
#[inline(always)]
fn finite_nonnegative(value: f64) -> bool {
    (0.0..=f64::MAX).contains(&value)
}

/// Checks an OLMS problem: `bandwidth` and `rtt` of one length in `1..=MAX_PATHS` with entries
/// finite and `>= 0`, the named limit finite and `>= 0`, and `1 <= choose <= K`.
///
/// The solvers run it only when [`olms_input_ok`] rejects the input, so it is kept out of line.
#[cold]
#[inline(never)]
pub(crate) fn check_olms(
    lp: LpKind,
    bandwidth: &[f64],
    rtt: &[f64],
    (limit_name, limit): (&'static str, f64),
    choose: usize,
) -> Result<(), LpError> {
    check_nonnegative(lp, "bandwidth", bandwidth, crate::MAX_PATHS)?;
    check_nonnegative(lp, "rtt", rtt, crate::MAX_PATHS)?;
    check_same_length(lp, "rtt", rtt.len(), "bandwidth", bandwidth.len())?;
    check_scalar(lp, limit_name, limit)?;
    check_choose(lp, choose, bandwidth.len())
}

/// Maps a good_lp resolution error onto [`LpError`].
pub(crate) fn from_good_lp(lp: LpKind, error: good_lp::ResolutionError) -> LpError {
    match error {
        good_lp::ResolutionError::Infeasible => LpError::Infeasible {
            lp,
            reason: "good_lp/microlp reports no feasible point",
        },
        good_lp::ResolutionError::Unbounded => LpError::Solver {
            lp,
            reason: "unbounded",
        },
        good_lp::ResolutionError::Other(reason) => LpError::Solver { lp, reason },
        good_lp::ResolutionError::Str(_) => LpError::Solver {
            lp,
            reason: "solver returned an error message",
        },
    }
}
