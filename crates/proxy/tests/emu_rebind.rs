//! curl through the SOCKS5 inbound over two emulated links whose NAT mappings are both lost
//! twice (`rebind_at`, 4 s and 7 s) during a 50 MB download: every datagram of a link then leaves
//! from a new source port and replies to the old one are lost. The transfer completes, bytes
//! intact (SHA-256); the server's path connections follow their peers to the new addresses
//! (QUIC connection migration), and both paths are still in the session at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod emu_common;

use std::sync::Arc;
use std::time::Duration;

use braid_testbed::emu::PathStats;
use emu_common::*;

/// When both links lose their mappings, emulator seconds.
const REBIND_AT: [f64; 2] = [4.0, 7.0];

/// Bytes link `link` delivered towards the client between emulator times `from` and `to`, and
/// the seconds that covers, from the samples (the last one at or before each time); `None` if
/// none is that early.
fn delivered_between(samples: &Samples, link: usize, from: f64, to: f64) -> Option<(u64, f64)> {
    let ((t0, d0), (t1, d1)) = (sample_at(samples, from)?, sample_at(samples, to)?);
    Some((d1[link].saturating_sub(d0[link]), t1 - t0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_download_survives_nat_rebinding_of_both_links() {
    require_curl();
    let blob = Arc::new(pattern(50 * MB, 5));
    let expected = sha256_hex(&blob);
    let http = http_server(blob.clone()).await;
    // The download starts once both links have joined (well under a second) and takes about
    // 10 s, so both rebindings fall inside it.
    let rebind = format!("rebind_at = {REBIND_AT:?}");
    let links = [format!("{WIFI}\n{rebind}"), format!("{LTE}\n{rebind}")];
    let bed = testbed("rebind", &[&links[0], &links[1]]).await;
    let started = bed.emu.now();
    assert!(started.as_secs_f64() < 3.0, "set-up took {started:?}");
    let before = server_remotes(&bed).await;
    assert_eq!(before.len(), 2, "server paths {before:?}");

    let ((digest, took), samples) = curl_download_sampled(&bed, http, 40).await;
    assert_eq!(digest, expected, "downloaded bytes differ");
    let ended = bed.emu.now();
    println!(
        "download 50 MB, both links rebinding at 4 s and 7 s: {:.1} s ({:.1} to {:.1} s), \
         {:.1} Mbit/s goodput",
        took.as_secs_f64(),
        ended.as_secs_f64() - took.as_secs_f64(),
        ended.as_secs_f64(),
        mbps(50 * MB, took)
    );
    let stats = print_counters(&bed).await;
    assert!(
        ended.as_secs_f64() > 7.0,
        "the transfer ended before the second rebinding"
    );
    for (i, s) in stats.iter().enumerate() {
        check_link(s, i, &samples, ended.as_secs_f64());
    }

    // Both paths are still in the session, and the server reaches each at a new address.
    assert!(
        bed.client.wait_for_paths(2, Duration::from_secs(10)).await,
        "a path was lost"
    );
    let after = server_remotes(&bed).await;
    println!("server's peer addresses: before {before:?}, after {after:?}");
    assert_eq!(after.len(), 2, "server paths {after:?}");
    for ((id, old), (_, new)) in before.iter().zip(&after) {
        assert_ne!(
            old, new,
            "path {id}: the server still sends to the lost mapping"
        );
    }
}

/// Prints link `i`'s delivery rate in the second before and after each rebinding, and checks
/// that it carried the download on after each and that the emulator rebound its mappings.
fn check_link(s: &PathStats, i: usize, samples: &Samples, ended: f64) {
    let rates: Vec<String> = REBIND_AT
        .iter()
        .map(|&at| {
            let rate = |from: f64| {
                delivered_between(samples, i, from, from + 1.0)
                    .filter(|(_, secs)| *secs > 0.5)
                    .map_or("-".into(), |(b, secs)| {
                        format!("{:.1}", b as f64 * 8.0 / secs / 1e6)
                    })
            };
            format!("{} -> {} Mbit/s at {at} s", rate(at - 1.0), rate(at))
        })
        .collect();
    println!(
        "{}: delivered in the second before -> after each rebinding: {}",
        s.name,
        rates.join(", ")
    );
    // The path carried the download on after its mapping was lost, beyond the datagrams
    // its link had queued at the time (300 packets, at most 0.2 s).
    for at in REBIND_AT {
        let after = delivered_between(samples, i, at + 0.5, ended);
        assert!(
            after.is_some_and(|(b, _)| b > 0),
            "{} delivered nothing from 0.5 s after its rebinding at {at} s",
            s.name
        );
    }
    // Each rebinding gives every client mapping of the path (one per link socket of the
    // client) a new upstream socket.
    assert!(
        s.rebinds >= REBIND_AT.len() as u64,
        "{} rebound {} mapping(s) of {} client(s)",
        s.name,
        s.rebinds,
        s.clients
    );
}
