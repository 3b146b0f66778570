//! curl through the SOCKS5 inbound over the two emulated links of `config/local` (30 Mbit/s
//! RTT 20 ms and 20 Mbit/s RTT 40 ms): a 50 MB download and a 50 MB upload, each checked by
//! SHA-256, in real time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod emu_common;

use std::sync::Arc;

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
