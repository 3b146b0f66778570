//! `braid sim --scenario FILE [--scheduler a,b,…|all] [--seed N] [--runs N] [--json]
//! [--report DIR]`: the deterministic simulation of a scenario per scheduler (braid-testbed's
//! simulator driving the real session core, see `crate::sim_endpoint`). Prints a table or the
//! design's JSON; `--report` writes SVG plots and `summary.md`. Simulator speed (packet events
//! per wall-clock second) goes to stderr only, so stdout stays byte-identical per seed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use braid_sched_core::{SchedulerConfig, SchedulerKind};
use braid_testbed::ScenarioFile;
use braid_testbed::report::write_report;
use braid_testbed::scenario::{Objective, ObjectiveKind};
use braid_testbed::sim::{self, SchedulerSummary, SimOptions};

use crate::session::Session;

/// The most runs per scheduler `--runs` accepts.
pub const MAX_RUNS: u64 = 10_000;

/// Arguments of `braid sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// The scenario file (config/scenarios/*.toml).
    #[arg(long)]
    pub scenario: PathBuf,
    /// Schedulers to compare: comma-separated names, or `all`.
    #[arg(long, default_value = "all")]
    pub scheduler: String,
    /// Seed of the first run (default: the scenario's); run r uses seed + r.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub seed: Option<u64>,
    /// Runs per scheduler; above 1 each metric is reported as mean and 95% interval.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub runs: u64,
    /// Print the JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write plots and a markdown summary into this directory.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// The congestion controller of both ends' paths: cubic (the default), newreno, bbr, lia or
    /// olia.
    #[arg(long, value_name = "NAME")]
    pub congestion: Option<String>,
}

/// Parses `--scheduler`: `all` or a comma-separated list of known names.
pub fn parse_schedulers(text: &str) -> Result<Vec<SchedulerKind>, String> {
    if text.trim().eq_ignore_ascii_case("all") {
        return Ok(SchedulerKind::ALL.to_vec());
    }
    let mut kinds = Vec::new();
    for name in text.split(',') {
        let kind: SchedulerKind = name
            .parse()
            .map_err(|e| format!("--scheduler {text:?}: {e}"))?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

/// The configuration `kind` runs with in a scenario: OLMS takes its application, threshold,
/// scales and L from the scenario's `[objective]` (OLMS §VI: the objective the run is judged
/// against is the one the scheduler optimises); every other scheduler, and OLMS without an
/// objective, keeps its defaults (learned ones their shipped weights).
pub fn scheduler_for(
    kind: SchedulerKind,
    objective: Option<&Objective>,
) -> Result<SchedulerConfig, braid_sched_core::ParamError> {
    let mut config = crate::train::scheduler_config(kind);
    if let (SchedulerKind::Olms, Some(o)) = (kind, objective) {
        let application = match o.kind {
            ObjectiveKind::MaxRtt => 0.0,
            ObjectiveKind::Bandwidth => 1.0,
        };
        config.set("application", application)?;
        config.set("threshold", o.threshold)?;
        config.set("rtt_scale_ms", o.rtt_scale_ms)?;
        config.set("bw_scale_mbps", o.bw_scale_mbps)?;
        config.set("paths_per_decision", o.paths_per_decision as f64)?;
    }
    Ok(config)
}

/// Runs `braid sim`.
pub fn run(args: &SimArgs) -> ExitCode {
    let usage = |message: String| {
        eprintln!("braid sim: {message}");
        ExitCode::from(2)
    };
    let kinds = match parse_schedulers(&args.scheduler) {
        Ok(k) => k,
        Err(e) => return usage(e),
    };
    if args.runs == 0 || args.runs > MAX_RUNS {
        return usage(format!("--runs {}: expected 1..={MAX_RUNS}", args.runs));
    }
    let congestion = match args
        .congestion
        .as_deref()
        .map(str::parse::<crate::session::congestion::CongestionAlgorithm>)
        .transpose()
    {
        Ok(c) => c,
        Err(e) => return usage(format!("--congestion: {e}")),
    };
    let file = match ScenarioFile::load(&args.scenario) {
        Ok(f) => f,
        Err(e) => return usage(e.to_string()),
    };
    let seed = args.seed.unwrap_or_else(|| file.seed());
    let objective = match file.resolve(seed) {
        Ok(s) => s.objective,
        Err(e) => return usage(e.to_string()),
    };
    // The report directory is created before simulating, so that a path that cannot be one
    // is a usage error now rather than a failure after the whole simulation has run.
    if let Some(dir) = &args.report
        && let Err(e) = writable_dir(dir)
    {
        return usage(format!("--report {}: {e}", dir.display()));
    }
    let mut summaries = Vec::with_capacity(kinds.len());
    let started = Instant::now();
    let mut events = 0u64;
    for kind in kinds {
        let scheduler = match scheduler_for(kind, objective.as_ref()) {
            Ok(c) => c,
            Err(e) => return usage(format!("{}: [objective]: {e}", args.scenario.display())),
        };
        let options = SimOptions {
            congestion: congestion.map(|c| c.name().to_owned()),
            ..SimOptions::new(scheduler)
        };
        let mut runs = Vec::with_capacity(args.runs as usize);
        for r in 0..args.runs {
            let scenario = match file.resolve(seed.wrapping_add(r)) {
                Ok(s) => s,
                Err(e) => return usage(e.to_string()),
            };
            match sim::run::<Session>(&scenario, &options) {
                Ok(result) => {
                    events += result.packet_events;
                    if result.protocol_errors > 0 {
                        eprintln!(
                            "braid sim: {} seed {}: {} datagrams rejected by a session",
                            kind.name(),
                            seed.wrapping_add(r),
                            result.protocol_errors
                        );
                    }
                    runs.push(result);
                }
                Err(e) => {
                    eprintln!("braid sim: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        summaries.push(SchedulerSummary {
            scheduler: kind.name(),
            runs,
        });
    }
    let wall = started.elapsed().as_secs_f64();
    eprintln!(
        "braid sim: {events} packet events in {wall:.2} s wall clock ({:.0} events/s)",
        events as f64 / wall.max(1e-9)
    );
    let runs = args.runs as usize;
    if args.json {
        out!("{}", sim::format_json(file.name(), seed, runs, &summaries));
    } else {
        out!("{}", sim::format_table(file.name(), runs, &summaries));
    }
    if let Some(dir) = &args.report {
        match write_report(dir, file.name(), runs, &summaries) {
            Ok(files) => eprintln!(
                "braid sim: wrote {} files to {}",
                files.len(),
                dir.display()
            ),
            Err(e) => {
                eprintln!("braid sim: {e}");
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}

/// Creates `dir` if needed and checks that a file can be written in it (a probe file, removed
/// again), so that a report that cannot be written is found before the simulation runs.
fn writable_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create the directory: {e}"))?;
    let probe = dir.join(format!(".braid-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| format!("cannot write in the directory: {e}"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_lists_parse_and_unknown_names_are_named() {
        assert_eq!(
            parse_schedulers("all").unwrap().len(),
            SchedulerKind::ALL.len()
        );
        assert_eq!(
            parse_schedulers("minrtt,RR,minrtt").unwrap(),
            [SchedulerKind::MinRtt, SchedulerKind::RoundRobin]
        );
        let e = parse_schedulers("minrtt,bogus").unwrap_err();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn olms_follows_the_scenario_objective() {
        let objective = Objective {
            kind: ObjectiveKind::Bandwidth,
            threshold: 0.4,
            rtt_scale_ms: 200.0,
            bw_scale_mbps: 50.0,
            paths_per_decision: 3,
        };
        let mut expected = SchedulerConfig::new(SchedulerKind::Olms);
        for (name, value) in [
            ("application", 1.0),
            ("threshold", 0.4),
            ("rtt_scale_ms", 200.0),
            ("bw_scale_mbps", 50.0),
            ("paths_per_decision", 3.0),
        ] {
            expected.set(name, value).unwrap();
        }
        let olms = scheduler_for(SchedulerKind::Olms, Some(&objective)).unwrap();
        assert_eq!(olms, expected);
        assert_ne!(olms, SchedulerConfig::new(SchedulerKind::Olms));
        assert_eq!(
            scheduler_for(SchedulerKind::Olms, None).unwrap(),
            SchedulerConfig::new(SchedulerKind::Olms)
        );
        assert_eq!(
            scheduler_for(SchedulerKind::MinRtt, Some(&objective)).unwrap(),
            SchedulerConfig::new(SchedulerKind::MinRtt)
        );
    }

    /// `braid sim` runs a seeded scheduler (here OLMS) with a seed derived from the run's
    /// (the simulator sets the `seed` parameter: client 2·seed, server 2·seed + 1), so runs
    /// with different seeds draw differently even where the links draw nothing: on loss- and
    /// jitter-free links minRTT gives the same run for seeds 1 and 2 and OLMS does not; with
    /// OLMS's seed kept at its default in every run ([`sim::run_keeping_scheduler_seed`]), its
    /// two runs are identical too.
    #[test]
    fn seeded_schedulers_follow_the_run_seed() {
        let text = r#"
name = "three-equal-paths"
duration_s = 1.0
seed = 1
[[path]]
name = "a"
rate_mbps = 20.0
delay_ms = 10.0
[[path]]
name = "b"
rate_mbps = 20.0
delay_ms = 12.0
[[path]]
name = "c"
rate_mbps = 20.0
delay_ms = 14.0
[app]
kind = "bulk"
bytes = 1_000_000
[objective]
kind = "bandwidth"
threshold = 0.1
rtt_scale_ms = 100.0
bw_scale_mbps = 100.0
paths_per_decision = 2
"#;
        let file = ScenarioFile::parse(text, std::path::Path::new("inline.toml")).unwrap();
        let objective = file.resolve(1).unwrap().objective;
        let run_with = |kind: SchedulerKind, seed: u64| {
            let options = SimOptions::new(scheduler_for(kind, objective.as_ref()).unwrap());
            let mut result = sim::run::<Session>(&file.resolve(seed).unwrap(), &options).unwrap();
            result.seed = 0;
            result
        };
        assert_eq!(
            run_with(SchedulerKind::MinRtt, 1),
            run_with(SchedulerKind::MinRtt, 2),
            "the links draw nothing, so minRTT's runs must not depend on the seed"
        );
        let (one, two) = (
            run_with(SchedulerKind::Olms, 1),
            run_with(SchedulerKind::Olms, 2),
        );
        assert_eq!(
            one,
            run_with(SchedulerKind::Olms, 1),
            "a run is deterministic"
        );
        assert_ne!(one, two, "OLMS's draws must follow the run seed");
        // The same runs with OLMS's seed kept at its default on both ends (what `braid sim`
        // would run without the simulator's seeding) are identical: the difference above is
        // the scheduler's seed, nothing else.
        let pinned = |seed: u64| {
            let options =
                SimOptions::new(scheduler_for(SchedulerKind::Olms, objective.as_ref()).unwrap());
            let scenario = file.resolve(seed).unwrap();
            let mut result =
                sim::run_keeping_scheduler_seed::<Session>(&scenario, &options).unwrap();
            result.seed = 0;
            result
        };
        assert_eq!(pinned(1), pinned(2));
    }

    #[test]
    fn bad_input_exits_with_2() {
        let args = |scenario: &str, scheduler: &str, runs: u64| SimArgs {
            scenario: PathBuf::from(scenario),
            scheduler: scheduler.into(),
            seed: None,
            runs,
            json: false,
            report: None,
            congestion: None,
        };
        let good = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/scenarios/damps-table1-0-0.toml"
        );
        assert_eq!(
            run(&args("/nonexistent/x.toml", "all", 1)),
            ExitCode::from(2)
        );
        assert_eq!(run(&args(good, "nope", 1)), ExitCode::from(2));
        assert_eq!(run(&args(good, "minrtt", 0)), ExitCode::from(2));
        let congestion = |name: &str| SimArgs {
            congestion: Some(name.into()),
            ..args(good, "minrtt", 1)
        };
        // An unknown controller is a usage error found before anything is simulated.
        assert_eq!(run(&congestion("vegas")), ExitCode::from(2));
    }

    /// A `--report` directory that cannot be created, or that exists and cannot be written, is a usage error found before any
    /// simulation runs (exit 2), not a write failure after it (exit 1); the directory is
    /// created up front, and the run then writes the report into it.
    #[test]
    fn report_directory_is_created_before_simulating() {
        let scratch = std::env::temp_dir().join(format!("braid-sim-report-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).unwrap();
        // A regular file where a directory should be: no directory can be made under it.
        let file = scratch.join("not-a-directory");
        std::fs::write(&file, b"x").unwrap();
        let scenario = scratch.join("short.toml");
        std::fs::write(
            &scenario,
            "name = \"short\"\nduration_s = 0.5\n[[path]]\nname = \"a\"\nrate_mbps = 10.0\n\
             delay_ms = 10.0\n[app]\nkind = \"bulk\"\nbytes = 100_000\n",
        )
        .unwrap();
        let args = |report: PathBuf| SimArgs {
            scenario: scenario.clone(),
            scheduler: "minrtt".into(),
            seed: None,
            runs: 1,
            json: false,
            report: Some(report),
            congestion: None,
        };
        assert_eq!(run(&args(file.join("report"))), ExitCode::from(2));
        assert_eq!(run(&args(PathBuf::from("/proc/x"))), ExitCode::from(2));
        // A directory that exists and cannot be written, even by root.
        assert_eq!(run(&args(PathBuf::from("/proc/self"))), ExitCode::from(2));
        let nested = scratch.join("a/b/report");
        assert_eq!(run(&args(nested.clone())), ExitCode::SUCCESS);
        assert!(nested.join("summary.md").is_file());
        std::fs::remove_dir_all(&scratch).unwrap();
    }
}
