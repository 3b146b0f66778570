//! curl through the SOCKS5 inbound over two emulated links while one of them goes dark for
//! 5 s in the middle of a 50 MB download: the transfer completes, bytes intact (SHA-256).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod emu_common;

use std::sync::Arc;
use std::time::Duration;

use emu_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_download_survives_a_5_s_outage_of_one_link() {
    require_curl();
    let blob = Arc::new(pattern(50 * MB, 3));
    let expected = sha256_hex(&blob);
    let http = http_server(blob.clone()).await;
    // The Wi-Fi link goes dark from 4 s to 9 s after the emulator starts; the download
    // starts once both links have joined (well under a second) and takes about 10 s.
    let wifi = format!("{WIFI}\noutages = [[4.0, 9.0]]");
    let bed = testbed("outage", &[&wifi, LTE]).await;
    let started = bed.emu.now();
    assert!(started.as_secs_f64() < 3.0, "set-up took {started:?}");

    let (digest, took) = curl_download(bed.client.socks_addr, http, &bed.dir, 80).await;
    assert_eq!(digest, expected, "downloaded bytes differ");
    let ended = bed.emu.now();
    println!(
        "download 50 MB with Wi-Fi dark 4-9 s: {:.1} s, {:.1} Mbit/s goodput",
        took.as_secs_f64(),
        mbps(50 * MB, took)
    );
    let stats = bed.emu.stats();
    for s in &stats {
        println!("{s}");
    }
    print_session(&bed).await;
    // The outage happened inside the transfer and really dropped traffic.
    assert!(
        ended.as_secs_f64() > 9.0,
        "the transfer ended before the outage did"
    );
    assert!(
        stats[0].forward_dir.link.outage + stats[0].reverse_dir.link.outage > 0,
        "nothing met the outage"
    );
    // The client still has both paths after the link came back.
    assert!(bed.client.wait_for_paths(2, Duration::from_secs(10)).await);
}
