//! Scenario files: every shipped file validates; unknown keys and bad values are refused with
//! errors naming the file and the field; ranges are drawn deterministically from the seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use braid_testbed::link::{Capacity, JitterDistribution};
use braid_testbed::scenario::{App, ObjectiveKind, ScenarioError, ScenarioFile};

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/scenarios")
}

fn shipped() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

const MINIMAL: &str = r#"
name = "t"
duration_s = 10.0
seed = 7
[[path]]
name = "a"
rate_mbps = 10.0
[app]
kind = "bulk"
bytes = 1000
"#;

fn parse(text: &str) -> Result<ScenarioFile, ScenarioError> {
    ScenarioFile::parse(text, &scenarios_dir().join("inline-test.toml"))
}

fn error_text(text: &str) -> String {
    parse(text).expect_err("must be refused").to_string()
}

#[test]
fn every_shipped_scenario_parses_validates_and_resolves() {
    let files = shipped();
    assert!(
        files.len() >= 25,
        "expected the papers' scenarios, found {}",
        files.len()
    );
    for file in files {
        let scenario = ScenarioFile::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let stem = file.file_stem().unwrap().to_str().unwrap();
        assert_eq!(scenario.name(), stem, "name must match the file name");
        // A paper's experiment, or (`braid-`) one of braid's own, which cites what it tests.
        let paper = ["olms-", "damps-", "edar-", "falcon-", "braid-"];
        assert!(
            paper.iter().any(|p| stem.starts_with(p)),
            "{stem}: must start with a paper name or braid-"
        );
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("# "),
            "{stem}: must start with a comment citing the paper"
        );
        let resolved = scenario.resolve(scenario.seed()).unwrap();
        assert!(resolved.cites.is_some(), "{stem}: cites");
        for path in &resolved.paths {
            let (_forward, _reverse) = path.links().unwrap();
        }
    }
}

#[test]
fn the_required_scenarios_exist() {
    let names: Vec<String> = shipped()
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for required in [
        "olms-app1-maxrtt",
        "olms-app2-bandwidth",
        "olms-dynamic-bandwidth",
        "olms-dynamic-rtt",
        "olms-web-google",
        "olms-web-youtube",
        "damps-table1-0-0",
        "damps-table1-5-10",
        "damps-table1-5-20",
        "damps-table1-10-30",
        "damps-table1-10-40",
        "damps-abrupt-bandwidth",
        "damps-abrupt-rtt",
        "edar-table3-handoff",
        "edar-table2-setting-i",
        "edar-table2-setting-ii",
        "edar-table2-setting-iii",
        "edar-table2-setting-iv",
        "edar-table2-setting-v",
        "falcon-static-4g-5g",
        "falcon-static-4g-wlan",
        "falcon-static-5g-wlan",
        "falcon-mobile-trace",
    ] {
        assert!(names.iter().any(|n| n == required), "missing {required}");
    }
}

#[test]
fn olms_app1_encodes_the_paper_numbers() {
    let file = ScenarioFile::load(&scenarios_dir().join("olms-app1-maxrtt.toml")).unwrap();
    let s = file.resolve(file.seed()).unwrap();
    let rates: Vec<f64> = s
        .paths
        .iter()
        .map(|p| match p.forward.capacity {
            Capacity::Rate { mbps } => mbps,
            Capacity::Trace(_) => panic!("rate path"),
        })
        .collect();
    assert_eq!(rates, [30.0, 20.0, 60.0, 40.0]);
    let delays: Vec<f64> = s.paths.iter().map(|p| p.forward.delay_ms).collect();
    assert_eq!(delays, [20.0, 30.0, 50.0, 60.0]);
    assert!(
        s.paths
            .iter()
            .all(|p| p.reverse.delay_ms == 0.0 && p.reverse.loss == 0.0)
    );
    assert!(
        s.paths
            .iter()
            .all(|p| p.forward.jitter_distribution == JitterDistribution::Uniform)
    );
    let objective = s.objective.unwrap();
    assert_eq!(objective.kind, ObjectiveKind::MaxRtt);
    assert_eq!(
        (objective.threshold, objective.paths_per_decision),
        (0.5, 2)
    );
    assert_eq!(
        s.app,
        App::Bulk {
            bytes: 5_000_000_000
        }
    );
}

#[test]
fn unknown_keys_are_refused_naming_key_and_file() {
    let top = error_text(&MINIMAL.replace("seed = 7", "seed = 7\ncolour = 1"));
    assert!(
        top.contains("colour") && top.contains("inline-test.toml"),
        "{top}"
    );
    let in_path =
        error_text(&MINIMAL.replace("rate_mbps = 10.0", "rate_mbps = 10.0\nbandwith = 3"));
    assert!(
        in_path.contains("bandwith") && in_path.contains("inline-test.toml"),
        "{in_path}"
    );
    let in_app = error_text(&MINIMAL.replace("bytes = 1000", "bytes = 1000\nobjcts = [1]"));
    assert!(in_app.contains("objcts"), "{in_app}");
    let in_change = error_text(&MINIMAL.replace(
        "rate_mbps = 10.0",
        "rate_mbps = 10.0\nchanges = [{ at_s = 1.0, rate = 2.0 }]",
    ));
    assert!(in_change.contains("rate"), "{in_change}");
    let in_reverse = error_text(&MINIMAL.replace(
        "rate_mbps = 10.0",
        "rate_mbps = 10.0\nreverse = { outages = [] }",
    ));
    assert!(in_reverse.contains("outages"), "{in_reverse}");
}

#[test]
fn bad_values_are_refused_naming_the_field() {
    let cases = [
        ("rate_mbps = 10.0", "rate_mbps = -1.0", "path[0].rate_mbps"),
        (
            "rate_mbps = 10.0",
            "rate_mbps = 10.0\nloss = 1.5",
            "path[0].loss",
        ),
        (
            "rate_mbps = 10.0",
            "rate_mbps = [10.0, 5.0]",
            "path[0].rate_mbps",
        ),
        (
            "rate_mbps = 10.0",
            "rate_mbps = 10.0\nqueue_packets = 0",
            "path[0].queue_packets",
        ),
        (
            "rate_mbps = 10.0",
            "rate_mbps = 10.0\nqueue_packets = 2.5",
            "path[0].queue_packets",
        ),
        (
            "rate_mbps = 10.0",
            "trace = \"x.csv\"\nrate_mbps = 10.0",
            "path[0].rate_mbps",
        ),
        ("rate_mbps = 10.0", "delay_ms = 5.0", "path[0].rate_mbps"),
        (
            "rate_mbps = 10.0",
            "rate_mbps = 10.0\noutages = [[5.0, 2.0]]",
            "path[0].outages[0]",
        ),
        (
            "rate_mbps = 10.0",
            "rate_mbps = 10.0\nchanges = [{ at_s = 3.0, loss = 0.1 }, { at_s = 1.0, loss = 0.2 }]",
            "path[0].changes[1].at_s",
        ),
        (
            "rate_mbps = 10.0",
            "rate_mbps = 10.0\nchanges = [{ at_s = 3.0, delay_ms = 1.0 }]\nchanges_period_s = 2.0",
            "path[0].changes[0].at_s",
        ),
        (
            "rate_mbps = 10.0",
            "rate_mbps = 10.0\njitter_ms = 1.0\ndelay_variation = 0.1",
            "path[0].delay_variation",
        ),
        ("duration_s = 10.0", "duration_s = 0.0", "duration_s"),
        ("bytes = 1000", "bytes = 0", "app.bytes"),
    ];
    for (from, to, field) in cases {
        let text = error_text(&MINIMAL.replace(from, to));
        assert!(text.contains(&format!("`{field}`")), "{to:?}: {text}");
        assert!(
            text.contains("inline-test.toml") && text.contains("expected"),
            "{text}"
        );
    }
    // A whole number above the bound: the message states the bound it broke.
    let huge = error_text(&MINIMAL.replace("bytes = 1000", "bytes = 9223372036854775807"));
    assert!(
        huge.contains("`app.bytes`") && huge.contains("[1, 1e15]"),
        "{huge}"
    );
    let wrong_type = error_text(&MINIMAL.replace("rate_mbps = 10.0", "rate_mbps = \"fast\""));
    assert!(
        wrong_type.contains("rate_mbps") && wrong_type.contains("two-element"),
        "{wrong_type}"
    );
    let three = error_text(&MINIMAL.replace("rate_mbps = 10.0", "rate_mbps = [1.0, 2.0, 3.0]"));
    assert!(three.contains("rate_mbps"), "{three}");
    let objective = error_text(&format!(
        "{MINIMAL}\n[objective]\nkind = \"maxrtt\"\nthreshold = 0.5\npaths_per_decision = 2\n"
    ));
    assert!(
        objective.contains("objective.paths_per_decision"),
        "{objective}"
    );
    // [[cross]] downloads: over a path the file has, at most four, with a named controller.
    let cross = |tables: &str| error_text(&format!("{MINIMAL}\n{tables}"));
    let unknown = cross("[[cross]]\npath = \"b\"\n");
    assert!(
        unknown.contains("`cross[0].path`") && unknown.contains("\"b\""),
        "{unknown}"
    );
    let many = cross(&"[[cross]]\npath = \"a\"\n".repeat(5));
    assert!(
        many.contains("`cross`") && many.contains("at most 4"),
        "{many}"
    );
    let unnamed = cross("[[cross]]\npath = \"a\"\ncongestion = \" \"\n");
    assert!(unnamed.contains("`cross[0].congestion`"), "{unnamed}");
    let stray = cross("[[cross]]\npath = \"a\"\nrate_mbps = 1.0\n");
    assert!(stray.contains("rate_mbps"), "{stray}");
    let ok = parse(&format!(
        "{MINIMAL}\n[[cross]]\npath = \"a\"\ncongestion = \"newreno\"\n"
    ))
    .unwrap()
    .resolve(1)
    .unwrap();
    assert_eq!(ok.cross.len(), 1);
    assert_eq!(
        (ok.cross[0].path, ok.cross[0].congestion.as_deref()),
        (0, Some("newreno"))
    );
    // A path's own controller: named, or the run's.
    let unnamed =
        error_text(&MINIMAL.replace("rate_mbps = 10.0", "rate_mbps = 10.0\ncongestion = \"\""));
    assert!(unnamed.contains("`path[0].congestion`"), "{unnamed}");
    let own = parse(&MINIMAL.replace("rate_mbps = 10.0", "rate_mbps = 10.0\ncongestion = \"bbr\""))
        .unwrap()
        .resolve(1)
        .unwrap();
    assert_eq!(own.paths[0].congestion.as_deref(), Some("bbr"));
    let run_s = parse(MINIMAL).unwrap().resolve(1).unwrap();
    assert_eq!(run_s.paths[0].congestion, None);
    let kind = error_text(&MINIMAL.replace("kind = \"bulk\"", "kind = \"video\""));
    assert!(kind.contains("video"), "{kind}");
    let missing_trace =
        error_text(&MINIMAL.replace("rate_mbps = 10.0", "trace = \"missing.down\""));
    assert!(
        missing_trace.contains("path[0].trace") && missing_trace.contains("missing.down"),
        "{missing_trace}"
    );
}

const RANGED: &str = r#"
name = "ranged"
duration_s = 10.0
[[path]]
name = "a"
rate_mbps = [5.0, 10.0]
delay_ms = [20.0, 50.0]
loss = [0.001, 0.005]
queue_packets = [50, 150]
changes = [{ at_s = 1.0, delay_ms = [1.0, 2.0] }]
[[path]]
name = "b"
rate_mbps = [5.0, 10.0]
delay_ms = 3.0
[app]
kind = "bulk"
bytes = [10_000_000, 100_000_000]
"#;

fn draws(file: &ScenarioFile, seed: u64) -> Vec<f64> {
    let s = file.resolve(seed).unwrap();
    let mut out = Vec::new();
    for p in &s.paths {
        if let Capacity::Rate { mbps } = p.forward.capacity {
            out.push(mbps);
        }
        out.extend([
            p.forward.delay_ms,
            p.forward.loss,
            f64::from(p.forward.queue_packets),
        ]);
        out.extend(p.forward.changes.iter().filter_map(|c| c.delay_ms));
    }
    if let App::Bulk { bytes } = s.app {
        out.push(bytes as f64);
    }
    out
}

#[test]
fn ranges_are_drawn_from_the_seed_within_bounds() {
    let file = parse(RANGED).unwrap();
    assert_eq!(file.seed(), 1, "default seed");
    assert_eq!(draws(&file, 42), draws(&file, 42), "same seed, same draw");
    assert_ne!(draws(&file, 42), draws(&file, 43), "different seeds differ");
    let mut distinct_paths = 0;
    for seed in 0..500 {
        let s = file.resolve(seed).unwrap();
        let a = &s.paths[0].forward;
        let Capacity::Rate { mbps } = a.capacity else {
            panic!()
        };
        assert!((5.0..=10.0).contains(&mbps));
        assert!((20.0..=50.0).contains(&a.delay_ms));
        assert!((0.001..=0.005).contains(&a.loss));
        assert!((50..=150).contains(&a.queue_packets));
        let change = a.changes[0].delay_ms.unwrap();
        assert!((1.0..=2.0).contains(&change));
        // The reverse direction follows the forward delay change.
        assert_eq!(s.paths[0].reverse.changes[0].delay_ms, Some(change));
        let App::Bulk { bytes } = s.app else { panic!() };
        assert!((10_000_000..=100_000_000).contains(&bytes));
        let Capacity::Rate { mbps: b } = s.paths[1].forward.capacity else {
            panic!()
        };
        distinct_paths += usize::from(b != mbps);
        assert_eq!(s.paths[1].forward.delay_ms, 3.0);
    }
    assert!(distinct_paths > 490, "each path draws its own value");
    // Draws spread over the range rather than sticking to one end.
    let mean: f64 = (0..1000).map(|seed| draws(&file, seed)[0]).sum::<f64>() / 1000.0;
    assert!(
        (7.3..7.7).contains(&mean),
        "mean of U[5,10] draws was {mean}"
    );
}

#[test]
fn reverse_defaults_copy_forward_except_loss() {
    let text = MINIMAL.replace(
        "rate_mbps = 10.0",
        "rate_mbps = 10.0\ndelay_ms = 7.0\njitter_ms = 1.0\nloss = 0.02\nqueue_packets = 40",
    );
    let s = parse(&text).unwrap().resolve(1).unwrap();
    let (f, r) = (&s.paths[0].forward, &s.paths[0].reverse);
    assert_eq!((r.delay_ms, r.jitter_ms, r.queue_packets), (7.0, 1.0, 40));
    assert_eq!((f.loss, r.loss), (0.02, 0.0));
    assert!(matches!(r.capacity, Capacity::Rate { mbps } if mbps == 10.0));
    assert_ne!(s.paths[0].forward_seed, s.paths[0].reverse_seed);
}

#[test]
fn traces_are_relative_to_the_scenario_file() {
    let file = ScenarioFile::load(&scenarios_dir().join("falcon-mobile-trace.toml")).unwrap();
    let s = file.resolve(1).unwrap();
    let Capacity::Trace(down) = &s.paths[0].forward.capacity else {
        panic!("trace")
    };
    let Capacity::Trace(up) = &s.paths[0].reverse.capacity else {
        panic!("trace")
    };
    assert!(down.source().ends_with("mahimahi-Verizon-LTE-short.down"));
    assert!(up.source().ends_with("mahimahi-Verizon-LTE-short.up"));
    let Capacity::Trace(bus) = &s.paths[1].forward.capacity else {
        panic!("trace")
    };
    assert!(
        (bus.mean_rate_mbps() - 7.21).abs() < 0.01,
        "{}",
        bus.mean_rate_mbps()
    );
    assert!(
        (down.mean_rate_mbps() - 5.03).abs() < 0.01,
        "{}",
        down.mean_rate_mbps()
    );
}

#[test]
fn edar_handoff_windows_reach_the_links() {
    let file = ScenarioFile::load(&scenarios_dir().join("edar-table3-handoff.toml")).unwrap();
    let s = file.resolve(1).unwrap();
    let (path1, _) = s.paths[0].links().unwrap();
    let (path2, path2_back) = s.paths[1].links().unwrap();
    for (t, down) in [
        (10.0, false),
        (20.0, true),
        (39.9, true),
        (40.0, false),
        (70.0, true),
        (90.0, false),
    ] {
        let now = braid_sched_core::Timestamp::from_secs_f64(t);
        assert_eq!(path2.is_down(now), down, "path 2 at {t} s");
        assert_eq!(path2_back.is_down(now), down, "path 2 return at {t} s");
        assert!(!path1.is_down(now));
    }
    assert_eq!(s.receive_buffer_bytes, Some(131_072));
    assert_eq!(s.duration.as_secs(), 100);
}

#[test]
fn damps_variation_pairs_and_deadlines_are_encoded() {
    for (p1, p2) in [(0, 0), (5, 10), (5, 20), (10, 30), (10, 40)] {
        let name = format!("damps-table1-{p1}-{p2}.toml");
        let s = ScenarioFile::load(&scenarios_dir().join(name))
            .unwrap()
            .resolve(1)
            .unwrap();
        let variation: Vec<f64> = s.paths.iter().map(|p| p.forward.delay_variation).collect();
        assert_eq!(variation, [f64::from(p1) / 100.0, f64::from(p2) / 100.0]);
        assert_eq!(s.paths[0].forward.delay_ms, 30.0);
        assert_eq!(s.paths[1].reverse.delay_ms, 10.0);
        let App::Realtime { deadline_ms, .. } = s.app else {
            panic!("realtime")
        };
        assert_eq!(deadline_ms, (20.0, 50.0));
    }
}

#[test]
fn the_design_example_parses_with_every_name_kept() {
    let design = r#"
name = "olms-app1-maxrtt"
duration_s = 20.0
seed = 1
[[path]]                 # one table per path
name = "wifi"
rate_mbps = 30.0         # or trace = "path/to/file"
delay_ms = 10.0          # one-way propagation delay
jitter_ms = 2.5
loss = 0.01              # random loss probability
queue_packets = 100
outages = [[20.0, 40.0]] # seconds during which the path is down (handoff)
changes = [{ at_s = 5.0, rate_mbps = 1.0 }, { at_s = 10.0, delay_ms = 50.0 }]
[app]
kind = "bulk"            # bulk | web | realtime
bytes = 200_000_000
[objective]              # optional: what OLMS regret/violation is measured against
kind = "maxrtt"          # maxrtt | bandwidth
threshold = 0.5
rtt_scale_ms = 100.0
bw_scale_mbps = 100.0
paths_per_decision = 1   # L
"#;
    let s = parse(design).unwrap().resolve(1).unwrap();
    let wifi = &s.paths[0].forward;
    assert_eq!(
        (wifi.delay_ms, wifi.jitter_ms, wifi.loss, wifi.queue_packets),
        (10.0, 2.5, 0.01, 100)
    );
    assert_eq!(wifi.outages, [(20.0, 40.0)]);
    assert_eq!(wifi.changes[0].rate_mbps, Some(1.0));
    assert_eq!(wifi.changes[1].delay_ms, Some(50.0));
    assert_eq!(s.app, App::Bulk { bytes: 200_000_000 });
    let web = parse(
        &design
            .replace("kind = \"bulk\"", "kind = \"web\"")
            .replace("bytes = 200_000_000", "objects = [1000, 2000]"),
    )
    .unwrap();
    assert_eq!(
        web.resolve(1).unwrap().app,
        App::Web {
            objects: vec![1000, 2000]
        }
    );
    let realtime = design
        .replace("kind = \"bulk\"", "kind = \"realtime\"")
        .replace(
            "bytes = 200_000_000",
            "packet_bytes = 1200\ninterval_ms = 10.0\ndeadline_ms = [20, 50]",
        );
    let App::Realtime {
        packet_bytes,
        interval,
        deadline_ms,
    } = parse(&realtime).unwrap().resolve(1).unwrap().app
    else {
        panic!("realtime")
    };
    assert_eq!(
        (packet_bytes, interval.as_millis(), deadline_ms),
        (1200, 10, (20.0, 50.0))
    );
}

#[test]
fn print_sample_errors() {
    // Not an assertion on wording beyond the other tests: shows what a user sees.
    for text in [
        MINIMAL.replace("seed = 7", "seed = 7\ncolour = 1"),
        MINIMAL.replace("rate_mbps = 10.0", "rate_mbps = 10.0\nloss = 1.5"),
        MINIMAL.replace("rate_mbps = 10.0", "rate_mbps = [10.0, 5.0]"),
    ] {
        println!("{}", error_text(&text));
    }
}
