//! Output of `braid sim`: per scheduler, one run's metrics or, over several runs, each
//! metric's mean and 95% confidence half-width (Student's t with n − 1 degrees of freedom:
//! `ci95 = t(0.975, n−1) · s / √n`, `s` the sample standard deviation). A metric that is `null`
//! in any run is `null` in the aggregate. JSON is written by hand in the design's field order
//! so the same results always give the same bytes. A scenario with `[[cross]]` downloads adds
//! their goodput after the design's metrics (`cross_goodput_mbps`, column `cross_mbps`); the
//! output of every other scenario is unchanged.

use std::fmt::Write as _;

use super::engine::RunResult;
use super::metrics::Metrics;

/// A metric's mean and 95% confidence half-width over runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// Sample mean.
    pub mean: f64,
    /// Half-width of the 95% confidence interval (0 for one run).
    pub ci95: f64,
}

/// Aggregated metrics: the JSON names with their interval (`None`: not applicable).
pub type Aggregate = [(&'static str, Option<Interval>); 9];

/// One scheduler's runs of one scenario.
#[derive(Clone, Debug)]
pub struct SchedulerSummary {
    /// The scheduler's name.
    pub scheduler: &'static str,
    /// Its runs (run r with seed `seed + r`).
    pub runs: Vec<RunResult>,
}

/// Two-sided 95% Student-t quantiles for 1..=30 degrees of freedom.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

fn t95(dof: usize) -> f64 {
    T95.get(dof.wrapping_sub(1)).copied().unwrap_or(1.96)
}

/// Mean and 95% interval of the values one metric took in every run; `None` when a run had
/// none (or there is no run).
fn interval(values: Option<Vec<f64>>) -> Option<Interval> {
    let values = values.filter(|v| !v.is_empty())?;
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let ci95 = if values.len() > 1 {
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        t95(values.len() - 1) * var.sqrt() / n.sqrt()
    } else {
        0.0
    };
    Some(Interval { mean, ci95 })
}

/// Mean and 95% interval of each metric over `runs`.
pub fn aggregate(runs: &[RunResult]) -> Aggregate {
    let names = Metrics::default().fields().map(|(n, _)| n);
    let mut out: Aggregate = names.map(|n| (n, None));
    for (k, slot) in out.iter_mut().enumerate() {
        slot.1 = interval(runs.iter().map(|r| r.metrics.fields()[k].1).collect());
    }
    out
}

/// Mean and 95% interval of the `[[cross]]` downloads' goodput over `runs` (`None` for a
/// scenario without them).
pub fn cross_aggregate(runs: &[RunResult]) -> Option<Interval> {
    interval(runs.iter().map(|r| r.cross_goodput_mbps).collect())
}

/// Whether the runs had `[[cross]]` downloads (their goodput is then reported).
fn has_cross(summaries: &[SchedulerSummary]) -> bool {
    summaries
        .iter()
        .any(|s| s.runs.iter().any(|r| r.cross_goodput_mbps.is_some()))
}

/// `,"name":value` for one run, or `,"name":{"mean":…,"ci95":…}` over several.
fn write_metric(out: &mut String, name: &str, runs: usize, v: Option<Interval>) {
    match v {
        Some(iv) if runs <= 1 => {
            let _ = write!(out, ",\"{name}\":{}", number(iv.mean));
        }
        Some(iv) => {
            let _ = write!(
                out,
                ",\"{name}\":{{\"mean\":{},\"ci95\":{}}}",
                number(iv.mean),
                number(iv.ci95)
            );
        }
        None => {
            let _ = write!(out, ",\"{name}\":null");
        }
    }
}

fn number(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The design's JSON: `{"scenario":…, "seed":…, "runs":…, "results":[{"scheduler":…, <metrics>}]}`;
/// with more than one run each metric is `{"mean":…, "ci95":…}`.
pub fn format_json(
    scenario: &str,
    seed: u64,
    runs: usize,
    summaries: &[SchedulerSummary],
) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "{{\"scenario\":{},\"seed\":{seed},\"runs\":{runs},\"results\":[",
        json_string(scenario)
    );
    for (i, s) in summaries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{{\"scheduler\":{}", json_string(s.scheduler));
        let one = |v: Option<f64>| v.map(|mean| Interval { mean, ci95: 0.0 });
        if runs <= 1 {
            let metrics = s.runs.first().map(|r| r.metrics).unwrap_or_default();
            for (name, v) in metrics.fields() {
                write_metric(&mut out, name, runs, one(v));
            }
        } else {
            for (name, v) in aggregate(&s.runs) {
                write_metric(&mut out, name, runs, v);
            }
        }
        if has_cross(summaries) {
            let v = if runs <= 1 {
                one(s.runs.first().and_then(|r| r.cross_goodput_mbps))
            } else {
                cross_aggregate(&s.runs)
            };
            write_metric(&mut out, "cross_goodput_mbps", runs, v);
        }
        out.push('}');
    }
    out.push_str("]}\n");
    out
}

/// Short column titles, in [`Metrics::fields`] order.
const TITLES: [&str; 9] = [
    "thr_mbps",
    "good_mbps",
    "fct_s",
    "regret",
    "violation",
    "deadline",
    "ooo_pkts",
    "redund",
    "handoff_mbps",
];

fn cell(v: Option<Interval>, runs: usize) -> String {
    match v {
        None => "-".into(),
        Some(iv) if runs <= 1 => format_value(iv.mean),
        Some(iv) => format!("{}±{}", format_value(iv.mean), format_value(iv.ci95)),
    }
}

fn format_value(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// An aligned text table: one row per scheduler, one column per metric (`-`: not applicable).
pub fn format_table(scenario: &str, runs: usize, summaries: &[SchedulerSummary]) -> String {
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(summaries.len() + 1);
    let mut head = vec!["scheduler".to_string()];
    head.extend(TITLES.iter().map(|t| t.to_string()));
    let cross = has_cross(summaries);
    if cross {
        head.push("cross_mbps".to_string());
    }
    rows.push(head);
    for s in summaries {
        let mut row = vec![s.scheduler.to_string()];
        row.extend(aggregate(&s.runs).iter().map(|(_, v)| cell(*v, runs)));
        if cross {
            row.push(cell(cross_aggregate(&s.runs), runs));
        }
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!(
        "scenario {scenario} ({runs} run{})\n",
        if runs == 1 { "" } else { "s" }
    );
    for row in rows {
        let mut line = String::new();
        for (c, text) in row.iter().enumerate() {
            let pad = widths[c] - text.chars().count();
            if c == 0 {
                let _ = write!(line, "{text}{}", " ".repeat(pad));
            } else {
                let _ = write!(line, "  {}{text}", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::TimeSeries;

    fn run(goodput: f64, fct: Option<f64>) -> RunResult {
        RunResult {
            scheduler: "minrtt",
            seed: 1,
            metrics: Metrics {
                goodput_mbps: Some(goodput),
                fct_s: fct,
                ..Metrics::default()
            },
            series: TimeSeries::default(),
            fcts: Vec::new(),
            virtual_s: 1.0,
            packet_events: 0,
            protocol_errors: 0,
            cross_goodput_mbps: None,
        }
    }

    #[test]
    fn aggregate_uses_student_t_and_nulls_partial_metrics() {
        let agg = aggregate(&[run(10.0, Some(1.0)), run(12.0, None)]);
        let good = agg[1].1.unwrap();
        assert_eq!(good.mean, 11.0);
        // s = sqrt(2), n = 2: 12.706 * sqrt(2) / sqrt(2).
        assert!((good.ci95 - 12.706).abs() < 1e-9);
        assert_eq!(agg[2].1, None, "fct is null in one run");
        assert_eq!(agg[0].1, None);
    }

    #[test]
    fn json_has_the_design_shape() {
        let s = [SchedulerSummary {
            scheduler: "rr",
            runs: vec![run(5.5, Some(2.0))],
        }];
        let json = format_json("x\"y", 3, 1, &s);
        assert!(json.starts_with("{\"scenario\":\"x\\\"y\",\"seed\":3,\"runs\":1,\"results\":[{\"scheduler\":\"rr\",\"throughput_mbps\":null,\"goodput_mbps\":5.5,\"fct_s\":2,"));
        let many = format_json(
            "x",
            3,
            2,
            &[SchedulerSummary {
                scheduler: "rr",
                runs: vec![run(1.0, None), run(3.0, None)],
            }],
        );
        assert!(many.contains("\"goodput_mbps\":{\"mean\":2,\"ci95\":"));
        assert!(many.contains("\"fct_s\":null"));
        let table = format_table("x", 1, &s);
        assert!(table.lines().nth(1).unwrap().starts_with("scheduler"));
        // No cross traffic: neither the JSON nor the table mention it.
        assert!(!json.contains("cross") && !many.contains("cross") && !table.contains("cross"));
    }

    #[test]
    fn cross_traffic_goodput_comes_after_the_design_metrics() {
        let with_cross = |goodput: f64, cross: f64| RunResult {
            cross_goodput_mbps: Some(cross),
            ..run(goodput, None)
        };
        let one = [SchedulerSummary {
            scheduler: "rr",
            runs: vec![with_cross(5.0, 7.25)],
        }];
        let json = format_json("x", 1, 1, &one);
        assert!(
            json.ends_with("\"handoff_goodput_mbps\":null,\"cross_goodput_mbps\":7.25}]}\n"),
            "{json}"
        );
        let table = format_table("x", 1, &one);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].ends_with("handoff_mbps  cross_mbps"), "{table}");
        assert!(lines[2].ends_with("7.25"), "{table}");
        let two = [SchedulerSummary {
            scheduler: "rr",
            runs: vec![with_cross(5.0, 7.0), with_cross(5.0, 9.0)],
        }];
        let json = format_json("x", 1, 2, &two);
        assert!(
            json.contains("\"cross_goodput_mbps\":{\"mean\":8,\"ci95\":"),
            "{json}"
        );
    }
}
