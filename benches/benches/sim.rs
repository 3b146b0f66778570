//! `sim/run/<scenario>`: one whole deterministic simulation (the real session core on both
//! ends, minrtt, modelled links) per iteration; criterion's throughput is in packet events
//! (packets handed to a link plus packets delivered), so the report reads as events/s. The
//! design's goal is at least 1,000,000 events/s. `sim/run/bulk-2path` is the baseline shape
//! (two clean links); the others add loss and jitter, web objects, or real-time datagrams.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::Path;

use braid_proxy::session::Session;
use braid_sched_core::{SchedulerConfig, SchedulerKind};
use braid_testbed::ScenarioFile;
use braid_testbed::sim::{self, SimOptions};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const SCENARIOS: [(&str, &str); 4] = [
    (
        "bulk-2path",
        r#"name = "bulk-2path"
duration_s = 10.0
[[path]]
name = "a"
rate_mbps = 30.0
delay_ms = 10.0
queue_packets = 200
[[path]]
name = "b"
rate_mbps = 20.0
delay_ms = 20.0
queue_packets = 200
[app]
kind = "bulk"
bytes = 20_000_000
"#,
    ),
    (
        "bulk-4path-lossy",
        r#"name = "bulk-4path-lossy"
duration_s = 5.0
[[path]]
name = "p1"
rate_mbps = 30.0
delay_ms = 20.0
jitter_ms = 5.0
loss = 0.01
[[path]]
name = "p2"
rate_mbps = 20.0
delay_ms = 30.0
jitter_ms = 5.0
loss = 0.0119
[[path]]
name = "p3"
rate_mbps = 60.0
delay_ms = 50.0
jitter_ms = 5.0
loss = 0.015
[[path]]
name = "p4"
rate_mbps = 40.0
delay_ms = 60.0
jitter_ms = 5.0
loss = 0.0156
[app]
kind = "bulk"
bytes = 1_000_000_000
"#,
    ),
    (
        "web-2path",
        r#"name = "web-2path"
duration_s = 30.0
[[path]]
name = "wifi"
rate_mbps = 20.0
delay_ms = 15.0
[[path]]
name = "lte"
rate_mbps = 10.0
delay_ms = 40.0
[app]
kind = "web"
objects = [500_000, 400_000, 300_000, 200_000, 100_000, 80_000, 60_000, 40_000, 20_000, 10_000]
"#,
    ),
    (
        "realtime-2path",
        r#"name = "realtime-2path"
duration_s = 5.0
[[path]]
name = "a"
rate_mbps = 20.0
delay_ms = 10.0
loss = 0.01
[[path]]
name = "b"
rate_mbps = 20.0
delay_ms = 30.0
[app]
kind = "realtime"
packet_bytes = 1250
interval_ms = 1.0
deadline_ms = [20.0, 50.0]
"#,
    ),
];

fn run(c: &mut Criterion) {
    let mut group = c.benchmark_group("sim/run");
    group.sample_size(10);
    let options = SimOptions::new(SchedulerConfig::new(SchedulerKind::MinRtt));
    for (name, text) in SCENARIOS {
        let scenario = ScenarioFile::parse(text, Path::new("bench.toml"))
            .unwrap()
            .resolve(1)
            .unwrap();
        let events = sim::run::<Session>(&scenario, &options)
            .unwrap()
            .packet_events;
        group.throughput(Throughput::Elements(events));
        group.bench_with_input(BenchmarkId::from_parameter(name), &scenario, |b, s| {
            b.iter(|| black_box(sim::run::<Session>(black_box(s), &options).unwrap()))
        });
    }
    group.finish();
}

criterion_group!(benches, run);
criterion_main!(benches);
