//! Validation of a parsed scenario file: every value against its domain, every error naming
//! the file, the field and what was expected.

use std::collections::HashSet;
use std::path::Path;

use braid_sched_core::ParamError;
use braid_sched_core::sched::olms::OlmsConfig;

use super::raw::{Param, RawApp, RawChange, RawPath, RawReverse, RawScenario};
use super::{MAX_CROSS, MAX_SCENARIO_PATHS, ScenarioError};

/// The domain a number must lie in.
#[derive(Clone, Copy)]
enum Domain {
    /// A rate in (0, 1e6] Mbit/s.
    Rate,
    /// A finite value in [0, 1e9].
    NonNegative,
    /// A fraction in [0, 1].
    Fraction,
    /// A whole number in [1, 1e15].
    Count,
    /// A queue size: a whole number in [1, 1e6] packets.
    Queue,
}

impl Domain {
    fn contains(self, v: f64) -> bool {
        match self {
            Domain::Rate => v > 0.0 && v <= 1e6,
            Domain::NonNegative => (0.0..=1e9).contains(&v),
            Domain::Fraction => (0.0..=1.0).contains(&v),
            Domain::Count => (1.0..=1e15).contains(&v) && v.fract() == 0.0,
            Domain::Queue => (1.0..=1e6).contains(&v) && v.fract() == 0.0,
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Domain::Rate => "a rate in (0, 1e6] Mbit/s",
            Domain::NonNegative => "a finite number >= 0",
            Domain::Fraction => "a probability/fraction in [0, 1]",
            Domain::Count => "a whole number in [1, 1e15]",
            Domain::Queue => "a whole number of packets in [1, 1000000]",
        }
    }
}

pub(super) struct Checker<'a> {
    pub file: &'a Path,
}

impl Checker<'_> {
    fn invalid(&self, field: &str, expected: &str, found: impl ToString) -> ScenarioError {
        ScenarioError::Invalid {
            file: self.file.to_path_buf(),
            field: field.to_string(),
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }

    fn param(&self, field: &str, p: Param, domain: Domain) -> Result<(), ScenarioError> {
        let (low, high) = p.bounds();
        for v in [low, high] {
            if !domain.contains(v) {
                return Err(self.invalid(field, domain.expected(), v));
            }
        }
        if low > high {
            return Err(self.invalid(
                field,
                "a range [low, high] with low <= high",
                format!("[{low}, {high}]"),
            ));
        }
        Ok(())
    }

    fn optional(&self, field: &str, p: Option<Param>, domain: Domain) -> Result<(), ScenarioError> {
        p.map_or(Ok(()), |p| self.param(field, p, domain))
    }

    fn period(&self, field: &str, p: Option<f64>) -> Result<f64, ScenarioError> {
        match p {
            None => Ok(f64::INFINITY),
            Some(v) if v > 0.0 && v <= 1e9 => Ok(v),
            Some(v) => Err(self.invalid(field, "a period > 0 s", v)),
        }
    }

    pub fn scenario(&self, raw: &RawScenario) -> Result<(), ScenarioError> {
        if raw.name.trim().is_empty() {
            return Err(self.invalid("name", "a non-empty name", "\"\""));
        }
        if !(raw.duration_s > 0.0 && raw.duration_s <= 1e7) {
            return Err(self.invalid("duration_s", "a duration in (0, 1e7] s", raw.duration_s));
        }
        self.optional(
            "receive_buffer_bytes",
            raw.receive_buffer_bytes,
            Domain::Count,
        )?;
        if raw.paths.is_empty() || raw.paths.len() > MAX_SCENARIO_PATHS {
            let expected = format!("1 to {MAX_SCENARIO_PATHS} [[path]] tables");
            return Err(self.invalid("path", &expected, raw.paths.len()));
        }
        let mut names = HashSet::new();
        for (i, path) in raw.paths.iter().enumerate() {
            if path.name.trim().is_empty() || !names.insert(path.name.as_str()) {
                let field = format!("path[{i}].name");
                return Err(self.invalid(
                    &field,
                    "a non-empty name unique among the paths",
                    format!("{:?}", path.name),
                ));
            }
            if path
                .congestion
                .as_ref()
                .is_some_and(|c| c.trim().is_empty())
            {
                return Err(self.invalid(
                    &format!("path[{i}].congestion"),
                    "a congestion controller's name",
                    "\"\"",
                ));
            }
            self.path(i, path)?;
        }
        self.app(&raw.app)?;
        if raw.cross.len() > MAX_CROSS {
            let expected = format!("at most {MAX_CROSS} [[cross]] tables");
            return Err(self.invalid("cross", &expected, raw.cross.len()));
        }
        for (i, cross) in raw.cross.iter().enumerate() {
            if !raw.paths.iter().any(|p| p.name == cross.path) {
                return Err(self.invalid(
                    &format!("cross[{i}].path"),
                    "the name of a [[path]]",
                    format!("{:?}", cross.path),
                ));
            }
            if cross
                .congestion
                .as_ref()
                .is_some_and(|c| c.trim().is_empty())
            {
                return Err(self.invalid(
                    &format!("cross[{i}].congestion"),
                    "a congestion controller's name",
                    "\"\"",
                ));
            }
        }
        if let Some(o) = &raw.objective {
            if !(o.threshold > 0.0 && o.threshold <= 1.0) {
                return Err(self.invalid(
                    "objective.threshold",
                    "a normalised threshold in (0, 1]",
                    o.threshold,
                ));
            }
            // `braid sim` hands both scales to OLMS: OLMS's own check decides, so that
            // `--scheduler all` cannot fail only when it reaches olms.
            for (field, name, v) in [
                ("objective.rtt_scale_ms", "rtt_scale_ms", o.rtt_scale_ms),
                ("objective.bw_scale_mbps", "bw_scale_mbps", o.bw_scale_mbps),
            ] {
                if let Some(v) = v
                    && let Err(ParamError::OutOfRange { expected, .. }) =
                        OlmsConfig::default().set(name, v)
                {
                    return Err(self.invalid(field, expected, v));
                }
            }
            if let Some(l) = o
                .paths_per_decision
                .filter(|&l| l == 0 || l as usize > raw.paths.len())
            {
                let expected = format!("1 to {} (the number of paths)", raw.paths.len());
                return Err(self.invalid("objective.paths_per_decision", &expected, l));
            }
        }
        Ok(())
    }

    fn path(&self, i: usize, path: &RawPath) -> Result<(), ScenarioError> {
        let field = |name: &str| format!("path[{i}].{name}");
        match (&path.rate_mbps, &path.trace) {
            (Some(_), Some(_)) | (None, None) => {
                let found = if path.trace.is_some() {
                    "both"
                } else {
                    "neither"
                };
                return Err(self.invalid(
                    &field("rate_mbps"),
                    "exactly one of rate_mbps or trace",
                    found,
                ));
            }
            _ => {}
        }
        self.optional(&field("rate_mbps"), path.rate_mbps, Domain::Rate)?;
        self.optional(&field("delay_ms"), path.delay_ms, Domain::NonNegative)?;
        self.optional(&field("jitter_ms"), path.jitter_ms, Domain::NonNegative)?;
        self.optional(
            &field("delay_variation"),
            path.delay_variation,
            Domain::Fraction,
        )?;
        let positive = |p: Option<Param>| p.is_some_and(|p| p.bounds().1 > 0.0);
        if positive(path.jitter_ms) && positive(path.delay_variation) {
            return Err(self.invalid(
                &field("delay_variation"),
                "at most one of jitter_ms or delay_variation",
                "both",
            ));
        }
        self.optional(&field("loss"), path.loss, Domain::Fraction)?;
        self.optional(&field("queue_packets"), path.queue_packets, Domain::Queue)?;
        let period = self.period(&field("outages_period_s"), path.outages_period_s)?;
        let mut previous_end = 0.0;
        for (k, &[start, end]) in path.outages.iter().enumerate() {
            let f = field(&format!("outages[{k}]"));
            if !(start >= previous_end && end > start && end <= period && end <= 1e9) {
                let expected = "[start_s, end_s] windows, sorted, not overlapping, start < end, within outages_period_s";
                return Err(self.invalid(&f, expected, format!("[{start}, {end}]")));
            }
            previous_end = end;
        }
        let period = self.period(&field("changes_period_s"), path.changes_period_s)?;
        let mut previous_at = 0.0;
        for (k, change) in path.changes.iter().enumerate() {
            let f = field(&format!("changes[{k}]"));
            self.change(&f, change, previous_at, period, path.trace.is_some())?;
            previous_at = change.at_s;
        }
        if let Some(reverse) = &path.reverse {
            self.reverse(i, reverse)?;
        }
        Ok(())
    }

    fn change(
        &self,
        f: &str,
        c: &RawChange,
        after: f64,
        period: f64,
        trace: bool,
    ) -> Result<(), ScenarioError> {
        if !(c.at_s >= after && c.at_s < period && c.at_s <= 1e9) {
            return Err(self.invalid(
                &format!("{f}.at_s"),
                "times sorted, >= 0 and below changes_period_s",
                c.at_s,
            ));
        }
        if trace && c.rate_mbps.is_some() {
            return Err(self.invalid(
                &format!("{f}.rate_mbps"),
                "no rate change on a trace path",
                "a rate",
            ));
        }
        self.optional(&format!("{f}.rate_mbps"), c.rate_mbps, Domain::Rate)?;
        self.optional(&format!("{f}.delay_ms"), c.delay_ms, Domain::NonNegative)?;
        self.optional(&format!("{f}.jitter_ms"), c.jitter_ms, Domain::NonNegative)?;
        self.optional(&format!("{f}.loss"), c.loss, Domain::Fraction)?;
        if c.rate_mbps.is_none()
            && c.delay_ms.is_none()
            && c.jitter_ms.is_none()
            && c.loss.is_none()
        {
            return Err(self.invalid(
                f,
                "at least one of rate_mbps, delay_ms, jitter_ms, loss",
                "none",
            ));
        }
        Ok(())
    }

    fn reverse(&self, i: usize, r: &RawReverse) -> Result<(), ScenarioError> {
        let field = |name: &str| format!("path[{i}].reverse.{name}");
        if r.rate_mbps.is_some() && r.trace.is_some() {
            return Err(self.invalid(
                &field("rate_mbps"),
                "at most one of rate_mbps or trace",
                "both",
            ));
        }
        self.optional(&field("rate_mbps"), r.rate_mbps, Domain::Rate)?;
        self.optional(&field("delay_ms"), r.delay_ms, Domain::NonNegative)?;
        self.optional(&field("jitter_ms"), r.jitter_ms, Domain::NonNegative)?;
        self.optional(
            &field("delay_variation"),
            r.delay_variation,
            Domain::Fraction,
        )?;
        self.optional(&field("loss"), r.loss, Domain::Fraction)?;
        self.optional(&field("queue_packets"), r.queue_packets, Domain::Queue)
    }

    fn app(&self, app: &RawApp) -> Result<(), ScenarioError> {
        match app {
            RawApp::Bulk { bytes } => self.param("app.bytes", *bytes, Domain::Count),
            RawApp::Web { objects } => {
                if objects.is_empty() {
                    return Err(self.invalid(
                        "app.objects",
                        "at least one object size in bytes",
                        "[]",
                    ));
                }
                match objects.iter().position(|&size| size == 0) {
                    Some(k) => Err(self.invalid(
                        &format!("app.objects[{k}]"),
                        "an object size >= 1 byte",
                        0,
                    )),
                    None => Ok(()),
                }
            }
            RawApp::Realtime {
                packet_bytes,
                interval_ms,
                deadline_ms,
            } => {
                if !(1..=65_535).contains(packet_bytes) {
                    return Err(self.invalid("app.packet_bytes", "1 to 65535 bytes", packet_bytes));
                }
                if !(*interval_ms > 0.0 && *interval_ms <= 1e6) {
                    return Err(self.invalid(
                        "app.interval_ms",
                        "an interval in (0, 1e6] ms",
                        interval_ms,
                    ));
                }
                self.param("app.deadline_ms", *deadline_ms, Domain::NonNegative)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use braid_sched_core::sched::olms::OlmsConfig;

    use crate::scenario::ScenarioFile;

    fn with_objective(key: &str, value: f64) -> String {
        format!(
            "name = \"t\"\nduration_s = 10.0\n[[path]]\nname = \"a\"\nrate_mbps = 10.0\n\
             [app]\nkind = \"bulk\"\nbytes = 1000\n\
             [objective]\nkind = \"maxrtt\"\nthreshold = 0.5\n{key} = {value:e}\n"
        )
    }

    /// The scenario check and OLMS agree on every scale, inside, at and beyond both bounds.
    #[test]
    fn objective_scales_accept_exactly_what_olms_accepts() {
        for key in ["rtt_scale_ms", "bw_scale_mbps"] {
            for value in [
                1e-9, 1e-7, 1e-6, 5e-4, 1e-3, 1.0, 100.0, 1e7, 1.5e7, 1e9, -1.0, 0.0,
            ] {
                let olms = OlmsConfig::default().set(key, value).is_ok();
                let scenario = ScenarioFile::parse(&with_objective(key, value), "s.toml".as_ref());
                assert_eq!(
                    scenario.is_ok(),
                    olms,
                    "{key} = {value}: scenario {scenario:?}, olms accepts: {olms}"
                );
                if let Err(e) = scenario {
                    let e = e.to_string();
                    assert!(e.contains("s.toml"), "{e}");
                    assert!(e.contains(&format!("objective.{key}")), "{e}");
                }
            }
        }
    }
}
