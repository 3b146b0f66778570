//! curl through the SOCKS5 inbound over the two emulated links of `config/local` (30 Mbit/s
//! RTT 20 ms and 20 Mbit/s RTT 40 ms): a 50 MB download and a 50 MB upload, each checked by
//! SHA-256, in real time; and a path starting from its handshake RTT.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod emu_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_proxy::transport::status::PathReport;

use emu_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_download_and_upload_50_mb_over_two_shaped_links() {
    require_curl();
    let blob = Arc::new(pattern(50 * MB, 1));
    let expected = sha256_hex(&blob);
    let http = http_server(blob.clone()).await;
    let bed = testbed("transfer", &[WIFI, LTE]).await;
    let socks = bed.client.socks_addr;

    let (digest, took) = curl_download(socks, http, &bed.dir, 60).await;
    assert_eq!(digest, expected, "downloaded bytes differ");
    println!(
        "download 50 MB over 30+20 Mbit/s: {:.1} s, {:.1} Mbit/s goodput",
        took.as_secs_f64(),
        mbps(50 * MB, took)
    );

    let upload = pattern(50 * MB, 2);
    let (digest, took) = curl_upload(socks, http, &bed.dir, &upload, 60).await;
    assert_eq!(digest, sha256_hex(&upload), "uploaded bytes differ");
    println!(
        "upload 50 MB over 30+20 Mbit/s: {:.1} s, {:.1} Mbit/s goodput",
        took.as_secs_f64(),
        mbps(50 * MB, took)
    );
    for s in bed.emu.stats() {
        println!("{s}");
    }
    print_session(&bed).await;
    // Both links carried data in both directions.
    for s in bed.emu.stats() {
        assert!(s.forward_dir.sent_bytes > MB as u64, "{s}");
        assert!(s.reverse_dir.sent_bytes > MB as u64, "{s}");
    }
}

/// A path starts from the round trip its QUIC handshake measured, on both ends, before it
/// carried a packet; so the first request of a session goes on the fast link even when the slow
/// one is listed first. Before, every path started at the session's 100 ms guess and minRTT,
/// seeing two equal paths, sent the first packets on the first one listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_start_from_their_handshake_rtt_and_a_first_request_takes_the_fast_link() {
    require_curl();
    // Small enough to fit in one path's first window (10 datagrams).
    let blob = Arc::new(pattern(6_000, 4));
    let http = http_server(blob.clone()).await;
    // link0: RTT 400 ms; link1: RTT 10 ms.
    let slow = "rate_mbps = 20.0\ndelay_ms = 200.0\nqueue_packets = 300";
    let fast = "rate_mbps = 20.0\ndelay_ms = 5.0\nqueue_packets = 300";
    let joining = Instant::now();
    let bed = testbed("handshake-rtt", &[slow, fast]).await;

    // No traffic yet: each end's view of each path is its link's round trip.
    let deadline = Instant::now() + Duration::from_secs(5);
    let server_paths = loop {
        let status = bed.server.status().await;
        let paths = status.sessions.first().map(|s| s.paths.clone());
        match paths {
            Some(paths) if paths.len() == 2 => break paths,
            _ if Instant::now() > deadline => panic!("server has no 2 paths"),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    let client_paths = bed.client.status().await.sessions[0].paths.clone();
    let srtt = |paths: &[PathReport], id: u8| paths.iter().find(|p| p.id == id).unwrap().srtt_ms;
    for (end, paths) in [("client", &client_paths), ("server", &server_paths)] {
        let (slow, fast) = (srtt(paths, 0), srtt(paths, 1));
        println!("{end}: srtt link0 {slow:.1} ms, link1 {fast:.1} ms");
        assert!(
            (380.0..1000.0).contains(&slow),
            "{end}: slow path's srtt {slow:.1} ms, its link's RTT is 400 ms"
        );
        assert!(
            fast < 100.0,
            "{end}: fast path's srtt {fast:.1} ms, its link's RTT is 10 ms"
        );
    }

    // A small download: request and answer cross on the fast link.
    let (digest, took) = curl_download(bed.client.socks_addr, http, &bed.dir, 30).await;
    assert_eq!(digest, sha256_hex(&blob));
    println!("6 kB download: {:.0} ms", took.as_secs_f64() * 1e3);
    let sent_on =
        |paths: &[PathReport], id: u8| paths.iter().find(|p| p.id == id).unwrap().packets_sent;
    let client_paths = bed.client.status().await.sessions[0].paths.clone();
    let server_paths = bed.server.status().await.sessions[0].paths.clone();
    println!(
        "packets sent on link0/link1: client {}/{}, server {}/{}",
        sent_on(&client_paths, 0),
        sent_on(&client_paths, 1),
        sent_on(&server_paths, 0),
        sent_on(&server_paths, 1)
    );
    assert!(
        sent_on(&server_paths, 1) >= 5,
        "the answer did not cross on link1"
    );
    // An idle path carries a heartbeat PING each second (none in a quick run); the answer
    // and the request themselves went on link1.
    let heartbeats = joining.elapsed().as_secs();
    for (end, paths) in [("client", &client_paths), ("server", &server_paths)] {
        assert!(
            sent_on(paths, 0) <= heartbeats,
            "{end}: the slow link carried part of the exchange ({} packets, {heartbeats} s since the join began)",
            sent_on(paths, 0)
        );
    }
}
