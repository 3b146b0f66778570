//! Validation of the simulator driving the real session core: single-link goodput against the
//! link rate, goodput under random loss against CUBIC's response function (RFC 9438 §5.1 with
//! its Reno-friendly region), aggregation of two links, and byte-identical JSON per seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use braid_proxy::session::Session;
use braid_sched_core::{SchedulerConfig, SchedulerKind};
use braid_testbed::ScenarioFile;
use braid_testbed::sim::{self, RunResult, SchedulerSummary, SimOptions};

fn scenario(text: &str) -> ScenarioFile {
    ScenarioFile::parse(text, Path::new("inline.toml")).unwrap()
}

fn run(file: &ScenarioFile, kind: SchedulerKind, seed: u64) -> RunResult {
    let s = file.resolve(seed).unwrap();
    let options = SimOptions::new(SchedulerConfig::new(kind));
    let r = sim::run::<Session>(&s, &options).unwrap();
    assert_eq!(r.protocol_errors, 0);
    r
}

fn bulk(paths: &str, bytes: u64, duration: f64) -> String {
    format!(
        "name = \"v\"\nduration_s = {duration}\n{paths}\n[app]\nkind = \"bulk\"\nbytes = {bytes}\n"
    )
}

fn link(name: &str, rate: f64, delay: f64, loss: f64, queue: u32) -> String {
    format!(
        "[[path]]\nname = \"{name}\"\nrate_mbps = {rate}\ndelay_ms = {delay}\nloss = {loss}\nqueue_packets = {queue}\n"
    )
}

#[test]
fn one_lossless_20_mbps_link_gives_bulk_goodput_within_5_percent() {
    // 10 MB at 20 Mbit/s: 4 s of transfer; queue of one BDP (20 Mbit/s x 40 ms = 67 packets).
    let f = scenario(&bulk(&link("a", 20.0, 20.0, 0.0, 100), 10_000_000, 30.0));
    let r = run(&f, SchedulerKind::MinRtt, 1);
    let goodput = r.metrics.goodput_mbps.unwrap();
    println!(
        "20 Mbit/s lossless: goodput {goodput:.3} Mbit/s, fct {:?} s",
        r.metrics.fct_s
    );
    assert!((goodput - 20.0).abs() <= 1.0, "goodput {goodput}");
}

/// CUBIC's mean rate under random loss p (RFC 9438 §5.1, C = 0.4, β = 0.7), packets per RTT:
/// the larger of the CUBIC window 1.054·(RTT^¾ / p^¾) (RTT in s) and the Reno-friendly window
/// √(3(1+β)/(2(1−β)p))·... which for α = 3(1−β)/(1+β) is 1.22/√p.
fn cubic_model_mbps(p: f64, rtt_s: f64, mss: f64) -> f64 {
    let cubic = 1.054 * rtt_s.powf(0.75) / p.powf(0.75);
    let reno = 1.22 / p.sqrt();
    cubic.max(reno) * mss * 8.0 / rtt_s / 1e6
}

#[test]
fn goodput_under_random_loss_follows_the_cubic_response_function() {
    // 100 Mbit/s (never the limit), 40 ms RTT, loss 0.5 %, 1 %, 2 %; 20 s of bulk transfer.
    let mut previous = f64::INFINITY;
    for p in [0.005, 0.01, 0.02] {
        let f = scenario(&bulk(&link("a", 100.0, 20.0, p, 1000), 1_000_000_000, 20.0));
        let r = run(&f, SchedulerKind::MinRtt, 3);
        let goodput = r.metrics.goodput_mbps.unwrap();
        let model = cubic_model_mbps(p, 0.040, 1300.0);
        println!(
            "loss {p}: goodput {goodput:.3} Mbit/s, CUBIC model {model:.3} Mbit/s, ratio {:.2}",
            goodput / model
        );
        assert!(goodput < previous, "goodput falls as loss rises");
        assert!(
            (0.5..=2.0).contains(&(goodput / model)),
            "loss {p}: goodput {goodput} vs model {model}"
        );
        previous = goodput;
    }
}

#[test]
fn a_30_and_20_mbps_pair_aggregates_to_90_percent_of_50() {
    let paths = link("a", 30.0, 10.0, 0.0, 200) + &link("b", 20.0, 15.0, 0.0, 200);
    let f = scenario(&bulk(&paths, 25_000_000, 30.0));
    for kind in [SchedulerKind::MinRtt, SchedulerKind::RoundRobin] {
        let r = run(&f, kind, 1);
        let goodput = r.metrics.goodput_mbps.unwrap();
        println!(
            "30 + 20 Mbit/s, {}: goodput {goodput:.3} Mbit/s",
            kind.name()
        );
        assert!(goodput >= 45.0, "{}: goodput {goodput}", kind.name());
    }
}

#[test]
fn the_same_seed_gives_byte_identical_json() {
    let paths = link("a", 10.0, 10.0, 0.01, 100) + &link("b", 5.0, 30.0, 0.02, 50);
    let text = format!(
        "name = \"d\"\nduration_s = 2.0\n{paths}\n[app]\nkind = \"realtime\"\npacket_bytes = 1000\ninterval_ms = 2.0\ndeadline_ms = [20.0, 50.0]\n"
    );
    let f = scenario(&text);
    let json = |seed| {
        let runs = [run(&f, SchedulerKind::Peekaboo, seed)];
        sim::format_json(
            "d",
            seed,
            1,
            &[SchedulerSummary {
                scheduler: "peekaboo",
                runs: runs.to_vec(),
            }],
        )
    };
    let a = json(5);
    assert_eq!(a, json(5));
    assert_ne!(a, json(6), "another seed gives another run");
    println!("{a}");
}
