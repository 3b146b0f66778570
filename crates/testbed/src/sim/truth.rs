//! The configured ("true") path characteristics over time, which OLMS's regret and violation
//! are measured against (OLMS §II-C, §IV, normalised as in §VI-B), and the outage windows that
//! the handoff goodput is measured inside.
//!
//! The true mean RTT of a path at time t is the forward one-way delay plus the reverse one-way
//! delay in force at t (base values and step changes; jitter has mean zero; queueing is
//! excluded, as the paper's r = netem delay / 100 ms). The true bandwidth is the forward rate
//! in force (a trace link: the trace's mean rate).

use crate::link::{Capacity, LinkConfig};
use crate::scenario::{Objective, ObjectiveKind, PathSpec};

/// The value of a stepped parameter at `t_s`, with the link schedule's semantics (a periodic
/// schedule repeats; before its first change in a later period the previous period's last
/// value holds).
fn stepped(config: &LinkConfig, t_s: f64, base: f64, pick: impl Fn(usize) -> Option<f64>) -> f64 {
    let (offset, later_loop) = match config.changes_period_s {
        Some(p) if p > 0.0 => (t_s % p, t_s >= p),
        _ => (t_s, false),
    };
    let mut value = base;
    let mut last_in_loop = base;
    for (i, change) in config.changes.iter().enumerate() {
        if let Some(v) = pick(i) {
            last_in_loop = v;
            if change.at_s <= offset {
                value = v;
            }
        }
    }
    let any_before = config
        .changes
        .iter()
        .enumerate()
        .any(|(i, c)| c.at_s <= offset && pick(i).is_some());
    if !any_before && later_loop {
        last_in_loop
    } else {
        value
    }
}

/// Forward rate in force at `t_s`, Mbit/s.
pub fn rate_mbps(path: &PathSpec, t_s: f64) -> f64 {
    let c = &path.forward;
    match &c.capacity {
        Capacity::Rate { mbps } => stepped(c, t_s, *mbps, |i| c.changes[i].rate_mbps),
        Capacity::Trace(trace) => trace.mean_rate_mbps(),
    }
}

/// One-way delay of a link in force at `t_s`, ms.
pub fn delay_ms(link: &LinkConfig, t_s: f64) -> f64 {
    stepped(link, t_s, link.delay_ms, |i| link.changes[i].delay_ms)
}

/// True mean RTT of a path at `t_s`, ms.
pub fn rtt_ms(path: &PathSpec, t_s: f64) -> f64 {
    delay_ms(&path.forward, t_s) + delay_ms(&path.reverse, t_s)
}

/// The per-packet optimum of an objective at `t_s` over all paths (normalised), or `None`
/// when no path meets the constraint:
/// - maxRTT: the highest normalised bandwidth among paths whose normalised RTT ≤ threshold;
/// - bandwidth: the lowest normalised RTT among paths whose normalised bandwidth ≤ threshold.
pub fn optimum(objective: &Objective, paths: &[PathSpec], t_s: f64) -> Option<f64> {
    let mut best: Option<f64> = None;
    for p in paths {
        let b = rate_mbps(p, t_s) / objective.bw_scale_mbps;
        let r = rtt_ms(p, t_s) / objective.rtt_scale_ms;
        let candidate = match objective.kind {
            ObjectiveKind::MaxRtt => (r <= objective.threshold).then_some(b),
            ObjectiveKind::Bandwidth => (b <= objective.threshold).then_some(r),
        };
        if let Some(v) = candidate {
            best = Some(match (best, objective.kind) {
                (None, _) => v,
                (Some(x), ObjectiveKind::MaxRtt) => x.max(v),
                (Some(x), ObjectiveKind::Bandwidth) => x.min(v),
            });
        }
    }
    best
}

/// Every path's forward outage windows that start before `end_s`, clipped to `[0, end_s)`,
/// merged into a sorted union.
pub fn outage_union(paths: &[PathSpec], end_s: f64) -> Vec<(f64, f64)> {
    let mut windows = Vec::new();
    for p in paths {
        let c = &p.forward;
        let period = c.outages_period_s.filter(|&p| p > 0.0);
        let mut base = 0.0;
        loop {
            for &(s, e) in &c.outages {
                let (s, e) = (base + s, (base + e).min(end_s));
                if s < end_s && e > s {
                    windows.push((s, e));
                }
            }
            match period {
                Some(p) if base + p < end_s && windows.len() < 100_000 => base += p,
                _ => break,
            }
        }
    }
    windows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut union: Vec<(f64, f64)> = Vec::with_capacity(windows.len());
    for (s, e) in windows {
        match union.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => union.push((s, e)),
        }
    }
    union
}

/// The true values of every path, recomputed only when time crosses a step change (the
/// values are piecewise constant), so the per-packet cost is a comparison.
#[derive(Debug)]
pub struct TruthCache {
    paths: Vec<PathSpec>,
    objective: Objective,
    /// Every step-change instant of any link within the run, sorted.
    instants: Vec<f64>,
    valid_from: f64,
    valid_until: f64,
    /// The optimum in force.
    pub optimum: Option<f64>,
    /// Per path: normalised true bandwidth.
    pub bandwidth: Vec<f64>,
    /// Per path: normalised true RTT.
    pub rtt: Vec<f64>,
    /// Per path: reverse one-way delay, ms.
    pub reverse_delay_ms: Vec<f64>,
}

impl TruthCache {
    /// A cache for a run of `duration_s`.
    pub fn new(paths: &[PathSpec], objective: Objective, duration_s: f64) -> Self {
        let mut instants = Vec::new();
        for link in paths.iter().flat_map(|p| [&p.forward, &p.reverse]) {
            let period = link.changes_period_s.filter(|&p| p > 0.0);
            let mut base = 0.0;
            loop {
                instants.extend(
                    link.changes
                        .iter()
                        .map(|c| base + c.at_s)
                        .filter(|&t| t <= duration_s),
                );
                match period {
                    Some(p) if base + p <= duration_s && instants.len() < 1_000_000 => base += p,
                    _ => break,
                }
            }
        }
        instants.sort_by(f64::total_cmp);
        instants.dedup();
        TruthCache {
            paths: paths.to_vec(),
            objective,
            instants,
            valid_from: f64::INFINITY,
            valid_until: f64::NEG_INFINITY,
            optimum: None,
            bandwidth: vec![0.0; paths.len()],
            rtt: vec![0.0; paths.len()],
            reverse_delay_ms: vec![0.0; paths.len()],
        }
    }

    /// Brings the cached values to time `t_s`.
    pub fn at(&mut self, t_s: f64) -> &Self {
        if t_s >= self.valid_from && t_s < self.valid_until {
            return self;
        }
        let i = self.instants.partition_point(|&x| x <= t_s);
        self.valid_from = if i == 0 {
            f64::NEG_INFINITY
        } else {
            self.instants[i - 1]
        };
        self.valid_until = self.instants.get(i).copied().unwrap_or(f64::INFINITY);
        let o = self.objective;
        for (k, p) in self.paths.iter().enumerate() {
            self.bandwidth[k] = rate_mbps(p, t_s) / o.bw_scale_mbps;
            self.rtt[k] = rtt_ms(p, t_s) / o.rtt_scale_ms;
            self.reverse_delay_ms[k] = delay_ms(&p.reverse, t_s);
        }
        self.optimum = optimum(&o, &self.paths, t_s);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::LinkChange;

    fn path(rate: f64, delay: f64) -> PathSpec {
        let mut forward = LinkConfig::with_rate(rate);
        forward.delay_ms = delay;
        let mut reverse = forward.clone();
        reverse.delay_ms = 0.0;
        PathSpec {
            name: "p".into(),
            forward,
            reverse,
            forward_seed: 1,
            reverse_seed: 2,
            congestion: None,
        }
    }

    #[test]
    fn olms_app1_optimum_is_the_best_bandwidth_under_the_rtt_threshold() {
        let paths = [
            path(30.0, 20.0),
            path(20.0, 30.0),
            path(60.0, 50.0),
            path(40.0, 60.0),
        ];
        let objective = Objective {
            kind: ObjectiveKind::MaxRtt,
            threshold: 0.5,
            rtt_scale_ms: 100.0,
            bw_scale_mbps: 100.0,
            paths_per_decision: 2,
        };
        assert_eq!(optimum(&objective, &paths, 1.0), Some(0.6));
        let bw = Objective {
            kind: ObjectiveKind::Bandwidth,
            threshold: 0.25,
            ..objective
        };
        assert_eq!(optimum(&bw, &paths, 1.0), Some(0.3));
    }

    #[test]
    fn step_changes_and_periods_apply() {
        let mut p = path(10.0, 10.0);
        p.forward.changes = vec![LinkChange {
            at_s: 5.0,
            rate_mbps: Some(1.0),
            ..LinkChange::default()
        }];
        assert_eq!(rate_mbps(&p, 4.9), 10.0);
        assert_eq!(rate_mbps(&p, 5.0), 1.0);
        p.forward.changes_period_s = Some(10.0);
        assert_eq!(
            rate_mbps(&p, 12.0),
            1.0,
            "previous period's last value holds"
        );
        p.forward.outages = vec![(1.0, 2.0)];
        p.forward.outages_period_s = Some(10.0);
        let objective = Objective {
            kind: ObjectiveKind::MaxRtt,
            threshold: 0.5,
            rtt_scale_ms: 100.0,
            bw_scale_mbps: 100.0,
            paths_per_decision: 1,
        };
        let mut cache = TruthCache::new(std::slice::from_ref(&p), objective, 30.0);
        for t in [0.0, 4.0, 5.0, 7.0, 12.0, 15.0, 25.5] {
            assert_eq!(
                cache.at(t).bandwidth[0],
                rate_mbps(&p, t) / 100.0,
                "t = {t}"
            );
        }
        assert_eq!(outage_union(&[p], 15.0), vec![(1.0, 2.0), (11.0, 12.0)]);
    }
}
