//! curl through the SOCKS5 inbound over two emulated links while one of them goes dark for
//! 5 s in the middle of a 50 MB download: the transfer completes, bytes intact (SHA-256). And a
//! link that is dark when the client starts joins within about a second of its outage's end.
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

/// A link dark from the emulator's start to 3.5 s joins by 5.5 s. The client's first handshake
/// on it goes unanswered; a single handshake would send its first packet again only at 1, 3
/// and 7 s, so it would join at about 7 s. With a handshake started every 2 s beside the older
/// ones (`transport::client::HANDSHAKE_RESTART`), one leaves at about 4 s and joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_dark_at_start_joins_soon_after_its_outage_ends() {
    use braid_proxy::daemon::{start_client, start_server};
    use braid_proxy::tls::ServerIdentity;
    let dir = temp_dir("dark-start");
    let server = start_server(
        server_config(&dir),
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let wifi = format!("{WIFI}\noutages = [[0.0, 3.5]]");
    let emu = braid_testbed::emu::Emulator::start(&emu_config(server.addr, &[&wifi, LTE]))
        .await
        .unwrap();
    let client = start_client(client_config(
        &dir,
        &server.fingerprint,
        &emu.listen_addrs(),
    ))
    .await
    .unwrap();
    assert!(client.wait_for_paths(1, Duration::from_secs(5)).await);
    assert!(
        client.wait_for_paths(2, Duration::from_secs(15)).await,
        "the link never joined"
    );
    let joined = emu.now();
    println!("link dark 0-3.5 s joined at {:.2} s", joined.as_secs_f64());
    assert!(
        joined.as_secs_f64() > 3.5,
        "joined at {joined:?}, inside its outage"
    );
    assert!(
        joined.as_secs_f64() < 5.5,
        "joined at {joined:?}: more than 2 s after the outage ended"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
