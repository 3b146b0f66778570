//! `braid sim --report DIR`: SVG plots written by hand (no plotting dependency) and a markdown
//! summary that embeds them. Plots: throughput over time per scheduler, cumulative violation
//! (scenarios with an `[objective]`), and the flow completion time distribution (bulk and web).

mod svg;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::sim::{Interval, SchedulerSummary, aggregate, cross_aggregate};
pub use svg::{Series, line_chart};

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
#[error("report {path}: {source}")]
pub struct ReportError {
    /// The file or directory.
    pub path: PathBuf,
    /// The I/O error.
    pub source: std::io::Error,
}

fn write(path: PathBuf, text: &str) -> Result<PathBuf, ReportError> {
    std::fs::write(&path, text).map_err(|source| ReportError {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// Writes the plots and `summary.md` for one scenario into `dir` (created if missing); returns
/// the files written. Series come from each scheduler's first run; FCTs from all runs.
pub fn write_report(
    dir: &Path,
    scenario: &str,
    runs: usize,
    summaries: &[SchedulerSummary],
) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files = Vec::new();
    let mut images = Vec::new();
    let throughput: Vec<Series> = summaries
        .iter()
        .filter_map(|s| {
            let r = s.runs.first()?;
            let bin = r.series.bin_s;
            let bins = r.series.goodput_mbps.len();
            let points = (0..bins)
                .filter(|&b| (b as f64) * bin <= r.virtual_s)
                .map(|b| {
                    let total: f64 = r.series.path_mbps.iter().map(|p| p[b]).sum();
                    ((b as f64 + 0.5) * bin, total)
                })
                .collect();
            Some(Series {
                name: s.scheduler.to_string(),
                points,
            })
        })
        .collect();
    let svg = line_chart(
        &format!("{scenario}: throughput"),
        "time (s)",
        "Mbit/s",
        &throughput,
    );
    files.push(write(dir.join("throughput.svg"), &svg)?);
    images.push((
        "Throughput over time (all paths, first run)",
        "throughput.svg",
    ));
    let violation: Vec<Series> = summaries
        .iter()
        .filter_map(|s| {
            let r = s.runs.first()?;
            (!r.series.cumulative_violation.is_empty()).then(|| Series {
                name: s.scheduler.to_string(),
                points: r
                    .series
                    .cumulative_violation
                    .iter()
                    .enumerate()
                    .filter(|&(b, _)| (b as f64) * r.series.bin_s <= r.virtual_s)
                    .map(|(b, v)| ((b as f64 + 1.0) * r.series.bin_s, *v))
                    .collect(),
            })
        })
        .collect();
    if !violation.is_empty() {
        let svg = line_chart(
            &format!("{scenario}: cumulative violation"),
            "time (s)",
            "sum of per-packet violation",
            &violation,
        );
        files.push(write(dir.join("violation.svg"), &svg)?);
        images.push(("Cumulative violation (first run)", "violation.svg"));
    }
    let fct: Vec<Series> = summaries
        .iter()
        .filter_map(|s| {
            let mut all: Vec<f64> = s.runs.iter().flat_map(|r| r.fcts.iter().copied()).collect();
            if all.is_empty() {
                return None;
            }
            all.sort_by(f64::total_cmp);
            let n = all.len() as f64;
            let points = all
                .iter()
                .enumerate()
                .map(|(i, &t)| (t, (i + 1) as f64 / n))
                .collect();
            Some(Series {
                name: s.scheduler.to_string(),
                points,
            })
        })
        .collect();
    if !fct.is_empty() {
        let svg = line_chart(
            &format!("{scenario}: flow completion time CDF"),
            "FCT (s)",
            "fraction of flows",
            &fct,
        );
        files.push(write(dir.join("fct_cdf.svg"), &svg)?);
        images.push((
            "Flow completion time distribution (all runs)",
            "fct_cdf.svg",
        ));
    }
    let md = summary_markdown(scenario, runs, summaries, &images);
    files.push(write(dir.join("summary.md"), &md)?);
    Ok(files)
}

/// The markdown summary: a table of every metric per scheduler and the embedded plots.
pub fn summary_markdown(
    scenario: &str,
    runs: usize,
    summaries: &[SchedulerSummary],
    images: &[(&str, &str)],
) -> String {
    let mut out = format!(
        "# {scenario}\n\n{runs} run(s) per scheduler; `-`: metric not applicable. Definitions: docs/metrics.md.\n\n"
    );
    // `[[cross]]` downloads' goodput, after the design's metrics, when the scenario has them.
    let cross = summaries
        .iter()
        .any(|s| s.runs.iter().any(|r| r.cross_goodput_mbps.is_some()));
    if let Some(first) = summaries.first() {
        let agg = aggregate(&first.runs);
        out.push_str("| scheduler |");
        for (name, _) in agg {
            let _ = write!(out, " {name} |");
        }
        if cross {
            out.push_str(" cross_goodput_mbps |");
        }
        out.push_str("\n|---|");
        out.push_str(&"---:|".repeat(agg.len() + usize::from(cross)));
        out.push('\n');
    }
    let cell = |out: &mut String, v: Option<Interval>| match v {
        None => out.push_str(" - |"),
        Some(iv) if runs <= 1 => {
            let _ = write!(out, " {:.4} |", iv.mean);
        }
        Some(iv) => {
            let _ = write!(out, " {:.4} ± {:.4} |", iv.mean, iv.ci95);
        }
    };
    for s in summaries {
        let _ = write!(out, "| {} |", s.scheduler);
        for (_, v) in aggregate(&s.runs) {
            cell(&mut out, v);
        }
        if cross {
            cell(&mut out, cross_aggregate(&s.runs));
        }
        out.push('\n');
    }
    for (title, file) in images {
        let _ = write!(out, "\n## {title}\n\n![{title}]({file})\n");
    }
    out
}
