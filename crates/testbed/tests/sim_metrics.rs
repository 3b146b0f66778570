//! The simulator's metrics on small scenarios whose answer is known, and every scenario file
//! of config/scenarios run for one virtual second with the real session core.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use braid_proxy::session::Session;
use braid_sched_core::{SchedulerConfig, SchedulerKind};
use braid_testbed::ScenarioFile;
use braid_testbed::sim::{self, RunResult, SimOptions};

fn run_text(text: &str, kind: SchedulerKind) -> RunResult {
    let s = ScenarioFile::parse(text, Path::new("inline.toml"))
        .unwrap()
        .resolve(1)
        .unwrap();
    let options = SimOptions::new(SchedulerConfig::new(kind));
    let r = sim::run::<Session>(&s, &options).unwrap();
    assert_eq!(r.protocol_errors, 0);
    r
}

fn realtime(delay_ms: f64) -> String {
    format!(
        "name = \"rt\"\nduration_s = 2.0\n[[path]]\nname = \"a\"\nrate_mbps = 20.0\ndelay_ms = {delay_ms}\n[app]\nkind = \"realtime\"\npacket_bytes = 1250\ninterval_ms = 2.0\ndeadline_ms = [20.0, 50.0]\n"
    )
}

#[test]
fn deadline_meeting_ratio_is_one_on_a_fast_path_and_zero_on_a_slow_one() {
    let fast = run_text(&realtime(5.0), SchedulerKind::MinRtt).metrics;
    let slow = run_text(&realtime(100.0), SchedulerKind::MinRtt).metrics;
    println!(
        "deadline ratio: 5 ms path {:?}, 100 ms path {:?}",
        fast.deadline_meeting_ratio, slow.deadline_meeting_ratio
    );
    assert!(fast.deadline_meeting_ratio.unwrap() > 0.99);
    assert!(slow.deadline_meeting_ratio.unwrap() < 0.01);
    assert_eq!(fast.fct_s, None, "realtime has no FCT");
    // 1250-byte packets every 2 ms: 5 Mbit/s of goodput over the 2 s run (minus the tail).
    let goodput = fast.goodput_mbps.unwrap();
    assert!((4.8..=5.01).contains(&goodput), "goodput {goodput}");
}

const TWO_PATHS: &str = "[[path]]\nname = \"a\"\nrate_mbps = 20.0\ndelay_ms = 10.0\n[[path]]\nname = \"b\"\nrate_mbps = 20.0\ndelay_ms = 30.0\n";

#[test]
fn redundant_copies_show_in_the_redundant_ratio_and_reordering_in_ooo_packets() {
    let text = format!(
        "name = \"r\"\nduration_s = 10.0\n{TWO_PATHS}[app]\nkind = \"bulk\"\nbytes = 3_000_000\n"
    );
    let redundant = run_text(&text, SchedulerKind::Redundant).metrics;
    let rr = run_text(&text, SchedulerKind::RoundRobin).metrics;
    println!("redundant: {redundant:?}\nrr: {rr:?}");
    assert!(
        redundant.redundant_ratio.unwrap() > 0.02,
        "copies arrive twice"
    );
    assert!(rr.redundant_ratio.unwrap() < 0.01);
    assert!(
        rr.ooo_packets.unwrap() > 100.0,
        "rr over 10 and 30 ms paths reorders"
    );
    for m in [redundant, rr] {
        assert!(m.goodput_mbps.unwrap() <= m.throughput_mbps.unwrap());
        assert!(m.fct_s.is_some());
        assert_eq!(m.handoff_goodput_mbps, None);
        assert_eq!(m.regret, None);
    }
}

#[test]
fn handoff_goodput_is_what_the_other_path_carries_during_an_outage() {
    let one = "[[path]]\nname = \"a\"\nrate_mbps = 20.0\ndelay_ms = 10.0\noutages = [[2.0, 4.0]]\n";
    let text = |paths: &str| {
        format!(
            "name = \"h\"\nduration_s = 6.0\n{paths}[app]\nkind = \"bulk\"\nbytes = 1_000_000_000\n"
        )
    };
    let alone = run_text(&text(one), SchedulerKind::MinRtt).metrics;
    let paired = format!("{one}[[path]]\nname = \"b\"\nrate_mbps = 10.0\ndelay_ms = 20.0\n");
    let with_backup = run_text(&text(&paired), SchedulerKind::MinRtt).metrics;
    println!(
        "handoff goodput: alone {:?}, with a second path {:?}",
        alone.handoff_goodput_mbps, with_backup.handoff_goodput_mbps
    );
    assert!(alone.handoff_goodput_mbps.unwrap() < 0.5);
    assert!(with_backup.handoff_goodput_mbps.unwrap() > 3.0);
}

#[test]
fn objective_metrics_separate_a_feasible_from_an_infeasible_path() {
    // Path a: 20 ms, 10 Mbit/s (meets RTT <= 50 ms); path b: 80 ms, 50 Mbit/s (does not).
    let text = |rate_b: f64| {
        format!(
            "name = \"o\"\nduration_s = 3.0\n[[path]]\nname = \"a\"\nrate_mbps = 10.0\ndelay_ms = 20.0\nreverse = {{ delay_ms = 0.0 }}\n[[path]]\nname = \"b\"\nrate_mbps = {rate_b}\ndelay_ms = 80.0\nreverse = {{ delay_ms = 0.0 }}\n[app]\nkind = \"bulk\"\nbytes = 1_000_000_000\n[objective]\nkind = \"maxrtt\"\nthreshold = 0.5\nrtt_scale_ms = 100.0\nbw_scale_mbps = 100.0\n"
        )
    };
    let m = run_text(&text(50.0), SchedulerKind::RoundRobin).metrics;
    println!(
        "rr over a feasible and an infeasible path: regret {:?}, violation {:?}",
        m.regret, m.violation
    );
    // Packets on b violate by at least 0.8 - 0.5; packets on a have regret 0 (OPT = 0.1 = b_a),
    // packets on b have regret (0.1 - 0.5)+ = 0.
    assert!(m.violation.unwrap() > 0.05);
    assert!(m.regret.unwrap() < 1e-9);
    // Where the load fits the 20 ms path (a 0.8 Mbit/s stream of datagrams), minRTT keeps it
    // there and violates nothing, while round-robin still puts half of it on the 80 ms path.
    // (Under a bulk load both paths fill whichever the scheduler, and what tips the balance
    // is how far slow start overshoots: with HyStart++ minRTT's violation was 1.99 against
    // round-robin's 1.92.)
    let stream = text(50.0).replace(
        "kind = \"bulk\"\nbytes = 1_000_000_000",
        "kind = \"realtime\"\npacket_bytes = 1000\ninterval_ms = 10.0\ndeadline_ms = 1000.0",
    );
    let rr = run_text(&stream, SchedulerKind::RoundRobin).metrics;
    let lone = run_text(&stream, SchedulerKind::MinRtt).metrics;
    println!(
        "a 0.8 Mbit/s stream: violation rr {:?}, minrtt {:?}",
        rr.violation, lone.violation
    );
    assert!(
        lone.violation.unwrap() < 1e-9 && rr.violation.unwrap() > 0.05,
        "minrtt prefers the 20 ms path"
    );
}

#[test]
fn every_scenario_file_runs_one_virtual_second() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 30);
    for file in files {
        let mut s = ScenarioFile::load(&file).unwrap().resolve(1).unwrap();
        s.duration = s.duration.min(Duration::from_secs(1));
        let options = SimOptions::new(SchedulerConfig::new(SchedulerKind::MinRtt));
        let r = sim::run::<Session>(&s, &options).unwrap();
        let m = r.metrics;
        assert_eq!(r.protocol_errors, 0, "{}", file.display());
        assert!(m.throughput_mbps.unwrap() > 0.0, "{}", file.display());
        assert_eq!(
            m.regret.is_some() || m.violation.is_some(),
            s.objective.is_some(),
            "{}",
            file.display()
        );
        if let Some(d) = m.deadline_meeting_ratio {
            assert!((0.0..=1.0).contains(&d), "{}", file.display());
        }
    }
}

/// A `[[cross]]` download shares the one link with braid's: the two goodputs add up to the
/// link, each gets a share, and the table and JSON report the cross goodput; an unknown
/// controller for it is refused naming the table.
#[test]
fn a_cross_download_shares_the_link_it_crosses() {
    let text = |cross: &str| {
        format!(
            "name = \"x\"\nduration_s = 20.0\n[[path]]\nname = \"a\"\nrate_mbps = 20.0\ndelay_ms = 10.0\nqueue_packets = 100\n[app]\nkind = \"bulk\"\nbytes = 200_000_000\n{cross}"
        )
    };
    let alone = run_text(&text(""), SchedulerKind::MinRtt);
    let shared = run_text(
        &text("[[cross]]\npath = \"a\"\ncongestion = \"cubic\"\n"),
        SchedulerKind::MinRtt,
    );
    let (braid_alone, braid, cross) = (
        alone.metrics.goodput_mbps.unwrap(),
        shared.metrics.goodput_mbps.unwrap(),
        shared.cross_goodput_mbps.unwrap(),
    );
    println!("alone {braid_alone:.2} Mbit/s; shared: braid {braid:.2}, cross {cross:.2}");
    assert_eq!(alone.cross_goodput_mbps, None);
    assert!(braid_alone > 18.5, "{braid_alone}");
    assert!(braid + cross > 18.5, "{braid} + {cross}");
    assert!(braid > 5.0 && cross > 5.0, "{braid} {cross}");
    let s = ScenarioFile::parse(
        &text("[[cross]]\npath = \"a\"\ncongestion = \"vegas\"\n"),
        Path::new("inline.toml"),
    )
    .unwrap()
    .resolve(1)
    .unwrap();
    let options = SimOptions::new(SchedulerConfig::new(SchedulerKind::MinRtt));
    let err = sim::run::<Session>(&s, &options).unwrap_err().to_string();
    assert!(
        err.starts_with("cross[0]: ") && err.contains("vegas"),
        "{err}"
    );
}
