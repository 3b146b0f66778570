//! Property tests: the parsers never panic on arbitrary or mutated input, and the link model
//! keeps its invariants under random configurations and packet sequences.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use braid_sched_core::Timestamp;
use braid_testbed::link::{DropReason, JitterDistribution, Link, LinkChange, LinkConfig, Verdict};
use braid_testbed::scenario::ScenarioFile;
use braid_testbed::trace::Trace;
use proptest::prelude::*;

const SHIPPED: &str = include_str!("../../../config/scenarios/olms-dynamic-bandwidth.toml");

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn trace_parsing_never_panics(text in "[0-9,.\\-a-zA-Z/\\r\\n ]{0,200}") {
        let _ = Trace::parse(&text, Path::new("p.trace"));
    }

    #[test]
    fn sorted_timestamps_parse_to_as_many_opportunities(mut stamps in prop::collection::vec(0u64..100_000, 1..200)) {
        stamps.sort_unstable();
        prop_assume!(*stamps.last().unwrap() > 0);
        let text: String = stamps.iter().map(|s| format!("{s}\n")).collect();
        let trace = Trace::parse(&text, Path::new("p.down")).unwrap();
        prop_assert_eq!(trace.opportunities_per_period(), stamps.len());
        prop_assert_eq!(trace.period_micros(), stamps.last().unwrap() * 1_000);
    }

    #[test]
    fn scenario_parsing_never_panics(text in "[a-z_\\[\\]=\\.0-9\"{}, \\n-]{0,300}") {
        if let Ok(file) = ScenarioFile::parse(&text, Path::new("/nonexistent/p.toml")) {
            let _ = file.resolve(3);
        }
    }

    #[test]
    fn mutated_scenarios_never_panic(edits in prop::collection::vec((0usize..4000, any::<u8>()), 1..8)) {
        let mut bytes = SHIPPED.as_bytes().to_vec();
        for (at, byte) in edits {
            let at = at % bytes.len();
            bytes[at] = byte;
        }
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(file) = ScenarioFile::parse(&text, Path::new("/nonexistent/p.toml")) {
            for seed in 0..3 {
                if let Ok(s) = file.resolve(seed) {
                    for path in &s.paths {
                        let _ = path.links();
                    }
                }
            }
        }
    }

    #[test]
    fn the_link_keeps_its_invariants(
        rate in 0.5f64..200.0,
        delay in 0.0f64..50.0,
        jitter in 0.0f64..10.0,
        uniform in any::<bool>(),
        loss in 0.0f64..0.3,
        queue in 1u32..50,
        outage in (0.0f64..1.0, 0.001f64..0.5),
        change in (0.0f64..1.0, 0.5f64..100.0, 0.0f64..80.0),
        gaps in prop::collection::vec((0u64..3_000, 40u32..1500), 1..400),
        seed in any::<u64>(),
    ) {
        let mut config = LinkConfig::with_rate(rate);
        config.delay_ms = delay;
        config.jitter_ms = jitter;
        config.jitter_distribution = if uniform { JitterDistribution::Uniform } else { JitterDistribution::Normal };
        config.loss = loss;
        config.queue_packets = queue;
        config.outages = vec![(outage.0, outage.0 + outage.1)];
        config.changes = vec![LinkChange { at_s: change.0, rate_mbps: Some(change.1), delay_ms: Some(change.2), ..Default::default() }];
        let mut link = Link::new(&config, seed).unwrap();
        let mut now = 0u64;
        let mut last_arrival = 0u64;
        let mut calls = 0u64;
        for (gap, len) in gaps {
            now += gap;
            calls += 1;
            let t = Timestamp::from_micros(now);
            let was_down = link.is_down(t);
            match link.enqueue(t, len) {
                Verdict::Deliver { at } => {
                    prop_assert!(!was_down, "delivered while down");
                    prop_assert!(at.as_micros() >= now, "arrives before it was sent");
                    prop_assert!(at.as_micros() >= last_arrival, "reordered without jitter_reorders");
                    last_arrival = at.as_micros();
                    prop_assert!(link.queued_packets(t) <= queue as usize);
                }
                Verdict::Dropped(DropReason::QueueFull) => {
                    prop_assert_eq!(link.queued_packets(t), queue as usize);
                }
                Verdict::Dropped(DropReason::Outage) | Verdict::Dropped(DropReason::Loss) => {}
            }
        }
        let s = link.stats();
        prop_assert_eq!(s.delivered + s.lost + s.queue_full + s.outage, calls);
    }
}
