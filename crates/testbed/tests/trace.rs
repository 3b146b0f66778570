//! Trace parsing: both formats, and malformed input refused with the file and line named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use braid_testbed::trace::{Trace, TraceError, TraceFormat};

fn error(text: &str, name: &str) -> String {
    Trace::parse(text, Path::new(name))
        .expect_err("must be refused")
        .to_string()
}

#[test]
fn the_shipped_traces_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/traces");
    let down = Trace::load(&dir.join("mahimahi-Verizon-LTE-short.down")).unwrap();
    assert_eq!(down.format(), TraceFormat::Mahimahi);
    assert_eq!(down.opportunities_per_period(), 58_655);
    assert_eq!(down.period_micros(), 140_000_000);
    let up = Trace::load(&dir.join("mahimahi-Verizon-LTE-short.up")).unwrap();
    assert_eq!(up.opportunities_per_period(), 69_367);
    let bus = Trace::load(&dir.join("nyu-mets-bus57.csv")).unwrap();
    assert_eq!(bus.format(), TraceFormat::MbpsCsv);
    assert_eq!(bus.period_micros(), 2_403_000_000);
}

#[test]
fn csv_rates_become_evenly_spread_opportunities() {
    // 1.2 Mbit/s = 100 packets of 1500 bytes; 12 Kbit/s = 1; 0.5 Mbit/s = 41.67 -> 42.
    let t = Trace::parse(
        "1.2,Mbits/sec\n12,Kbits/sec\n0.5,Mbits/sec\n",
        Path::new("r.csv"),
    )
    .unwrap();
    assert_eq!(t.opportunities_per_period(), 100 + 1 + 42);
    assert_eq!(t.opportunity_time(1), 10_000);
    assert_eq!(t.opportunity_time(100), 1_000_000);
    assert_eq!(t.opportunity_time(101), 2_000_000);
    assert_eq!(
        t.opportunity_time(143),
        3_000_000,
        "loops after three seconds"
    );
}

#[test]
fn malformed_mahimahi_lines_name_file_and_line() {
    let text = error("0\n1\nabc\n3\n", "bad.down");
    assert!(
        text.contains("bad.down:3") && text.contains("abc"),
        "{text}"
    );
    let decreasing = error("0\n5\n4\n", "dec.down");
    assert!(
        decreasing.contains("dec.down:3") && decreasing.contains("decrease"),
        "{decreasing}"
    );
    let negative = error("0\n-1\n", "neg.down");
    assert!(negative.contains("neg.down:2"), "{negative}");
    assert!(error("", "empty.down").contains("empty.down"));
    assert!(error("0\n0\n", "zero.down").contains("period"));
}

#[test]
fn malformed_csv_lines_name_file_and_line() {
    let text = error("1.0,Mbits/sec\nfast,Mbits/sec\n", "bad.csv");
    assert!(
        text.contains("bad.csv:2") && text.contains("fast"),
        "{text}"
    );
    let unit = error("1.0,Mbits/sec\n1.0,Mbps\n", "unit.csv");
    assert!(
        unit.contains("unit.csv:2") && unit.contains("unit"),
        "{unit}"
    );
    let negative = error("1.0,Mbits/sec\n\n-3,Mbits/sec\n", "neg.csv");
    assert!(negative.contains("neg.csv:3"), "{negative}");
    let nan = error("NaN,Mbits/sec\n", "nan.csv");
    assert!(nan.contains("nan.csv:1"), "{nan}");
    let silent = error("0,Mbits/sec\n0.001,Mbits/sec\n", "silent.csv");
    assert!(silent.contains("silent.csv"), "{silent}");
    // A line without a comma in a CSV file is malformed too.
    let mixed = error("1.0,Mbits/sec\n5\n", "mixed.csv");
    assert!(mixed.contains("mixed.csv:2"), "{mixed}");
}

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let e = Trace::load(Path::new("/nonexistent/x.down")).unwrap_err();
    assert!(matches!(e, TraceError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/x.down"));
}
