//! curl through the SOCKS5 inbound over two emulated links while one of them goes dark for
//! 5 s in the middle of a 50 MB download: the transfer completes, bytes intact (SHA-256). A
//! link that is dark when the client starts joins within about a second of its outage's end.
//! A link told not to rejoin fast (`fast_rejoin_s = 0`) sends a fraction of what a fast one
//! sends into an outage. A server that stops and comes back while the links are dark is found
//! to have lost the session by its answer to the next join, and a request it had not answered
//! goes through on the next session. A request made before any link joined waits for one,
//! until the session is 5 s old; after that, a session without a path refuses at once. A
//! backup link carries a download only once the primary goes dark.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod emu_common;
mod restart_common;

use std::sync::Arc;
use std::time::Duration;

use emu_common::*;
use restart_common::{endless_origin, read_until_end, start_server_again};

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
    let stats = print_counters(&bed).await;
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

/// A backup link (LTE behind Wi-Fi) during a 30 MB download. While Wi-Fi is up the backup
/// delivers none of the download, though it fills Wi-Fi's window (the failover rule,
/// `docs/schedulers.md`); the server, told by the JOIN that the link is a backup, applies it
/// to what it sends. When Wi-Fi goes dark for good at 6 s, the download moves to the backup
/// within 2 s and completes, bytes intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_link_carries_a_download_only_once_the_primary_goes_dark() {
    const DARK_AT: f64 = 6.0;
    require_curl();
    let blob = Arc::new(pattern(30 * MB, 9));
    let expected = sha256_hex(&blob);
    let http = http_server(blob.clone()).await;
    let wifi = format!("{WIFI}\noutages = [[{DARK_AT:.1}, 600.0]]");
    let bed = testbed_with("backup", &[&wifi, LTE], |config| {
        config.links[1].tier = braid_proxy::session::Tier::Backup;
    })
    .await;
    let started = bed.emu.now().as_secs_f64();
    assert!(started < 3.0, "set-up took {started:.1} s");
    let ((digest, took), samples) = curl_download_sampled(&bed, http, 60).await;
    assert_eq!(digest, expected, "downloaded bytes differ");
    let (_, before) = sample_at(&samples, DARK_AT).expect("no sample before the outage");
    let took_over = samples
        .iter()
        .find(|(t, d)| *t > DARK_AT && d[1] > before[1] + MB as u64)
        .map(|(t, _)| t - DARK_AT);
    let (_, end) = samples.last().unwrap();
    println!(
        "download 30 MB, Wi-Fi dark from {DARK_AT} s: {:.1} s; delivered by {DARK_AT} s: Wi-Fi \
         {} B, backup {} B; the backup carried 1 MB more {took_over:.2?} s into the outage; \
         at the end: {end:?}",
        took.as_secs_f64(),
        before[0],
        before[1]
    );
    print_counters(&bed).await;
    assert!(
        before[0] > 3 * MB as u64,
        "the download had not started well before the outage"
    );
    // Heartbeats and ACKs only: one heartbeat exchange per 25 s on an idle backup.
    assert!(
        before[1] < 20_000,
        "the backup delivered {} B while Wi-Fi was up",
        before[1]
    );
    assert!(
        took_over.is_some_and(|t| t < 2.0),
        "the backup took over {took_over:?} s into the outage"
    );
}

/// A link dark from the emulator's start to 3.5 s joins by 5.5 s. The client's first handshake
/// on it goes unanswered; a single handshake would send its first packet again only at 1, 3
/// and 7 s, so it would join at about 7 s. With a handshake started every 2 s beside the older
/// ones (`transport::client::HANDSHAKE_RESTART`), one leaves at about 4 s and joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_dark_at_start_joins_soon_after_its_outage_ends() {
    let dir = temp_dir("dark-start");
    let wifi = format!("{WIFI}\noutages = [[0.0, 3.5]]");
    let identity = braid_proxy::tls::ServerIdentity::generate("braid").unwrap();
    let (_server, emu, client) = start_three(&dir, identity, &[&wifi, LTE]).await;
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

/// A SOCKS5 request made the moment the client starts, its only link dark until 1 s: the
/// session has no path yet, so the request waits for the link to join (up to `SESSION_WAIT`,
/// 5 s) and is connected, where it used to be refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_made_before_any_link_joined_waits_for_one() {
    use tokio::io::AsyncReadExt as _;
    let dir = temp_dir("no-path-yet");
    let wifi = format!("{WIFI}\noutages = [[0.0, 1.0]]");
    let identity = braid_proxy::tls::ServerIdentity::generate("braid").unwrap();
    let (_server, emu, client) = start_three(&dir, identity, &[&wifi]).await;
    let origin = restart_common::endless_origin(Duration::from_millis(10)).await;
    let asked_at = emu.now().as_secs_f64();
    let (mut s, reply) = socks5_connect(client.socks_addr, origin).await;
    let answered_at = emu.now().as_secs_f64();
    println!(
        "asked at {asked_at:.2} s, answered {:?} at {answered_at:.2} s",
        &reply[2..4]
    );
    assert!(asked_at < 1.0, "the request was made at {asked_at:.2} s");
    assert_eq!(reply[..4], [5, 0, 5, 0], "the request was refused");
    assert!(
        answered_at > 1.0,
        "answered at {answered_at:.2} s, inside the outage"
    );
    let mut some = vec![0u8; 1024];
    s.read_exact(&mut some).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client whose only link stays dark (as with its server down): a request made as it starts
/// waits for the session's first path until the session is 5 s old (`SESSION_WAIT`) and is
/// refused then; the next request is refused at once instead of waiting too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_wait_for_a_new_sessions_links_but_not_for_a_session_that_never_joined() {
    let dir = temp_dir("never-joins");
    let wifi = format!("{WIFI}\noutages = [[0.0, 60.0]]");
    let identity = braid_proxy::tls::ServerIdentity::generate("braid").unwrap();
    let (_server, _emu, client) = start_three(&dir, identity, &[&wifi]).await;
    let request = |socks| async move {
        let started = std::time::Instant::now();
        let (_, reply) = socks5_connect(socks, "127.0.0.1:9".parse().unwrap()).await;
        (reply[3], started.elapsed())
    };
    let (first, first_took) = request(client.socks_addr).await;
    let (second, second_took) = request(client.socks_addr).await;
    println!(
        "no path: the first request answered {first} after {first_took:?}, the next {second} \
         after {second_took:?}"
    );
    assert_eq!((first, second), (1, 1), "not refused (general failure)");
    assert!(
        (4.0..7.0).contains(&first_took.as_secs_f64()),
        "the first request waited {first_took:?}"
    );
    assert!(
        second_took < Duration::from_millis(500),
        "the next request waited {second_took:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two links dark from the start to 16 s beside a third that carries the session: the first
/// with the default `fast_rejoin_s` (300 s) races a handshake every 2 s; the second, with
/// `fast_rejoin_s = 0`, sends one handshake per attempt, backing off. By the outage's end the
/// second sent at most a third of the first's datagrams and bytes into the dark, and both join
/// once it is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_that_does_not_rejoin_fast_sends_little_into_an_outage() {
    let dir = temp_dir("slow-rejoin");
    let identity = braid_proxy::tls::ServerIdentity::generate("braid").unwrap();
    let dark = "outages = [[0.0, 16.0]]";
    let links = [format!("{WIFI}\n{dark}"), format!("{LTE}\n{dark}")];
    let (_server, emu, client) =
        start_three_with(&dir, identity, &[&links[0], &links[1], LTE], |config| {
            config.links[1].fast_rejoin = Duration::ZERO;
        })
        .await;
    assert!(client.wait_for_paths(1, Duration::from_secs(5)).await);
    while emu.now().as_secs_f64() < 15.9 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sent = |s: &braid_testbed::emu::PathStats| s.forward_dir.received;
    let stats = emu.stats();
    let (fast, slow) = (sent(&stats[0]), sent(&stats[1]));
    println!(
        "into a 16 s outage: fast {} datagrams {} bytes, fast_rejoin_s = 0 {} datagrams {} bytes",
        fast.packets, fast.bytes, slow.packets, slow.bytes
    );
    assert!(fast.packets >= 16, "the fast link sent {fast:?}");
    assert!(
        slow.packets > 0 && slow.packets * 3 <= fast.packets && slow.bytes * 3 <= fast.bytes,
        "fast {fast:?}, fast_rejoin_s = 0 {slow:?}"
    );
    assert!(
        client.wait_for_paths(3, Duration::from_secs(20)).await,
        "a link never joined after its outage"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server stops and starts again at its address while both links are dark (1.5-3.5 s), so
/// the client hears nothing of it: no session CLOSE, no connection close. Once the links are
/// back, the new server answers the client's packets with stateless resets it can check (the
/// reset key derives from the server's private key), the links reconnect at once and join again
/// under the session's id; the new server answers that the join started the session
/// (`JOIN_OK_CREATED`), and the client, whose session had joined before, ends it: the
/// application whose flow it carried gets a reset within seconds, not a flow that waits for
/// ever, and a new session carries traffic. A request made just after the restart, whose OPEN
/// the old session sent and the server never answered, is opened again on the new session and
/// connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_lost_the_session_unheard_is_found_out_by_the_next_join() {
    use tokio::io::AsyncReadExt as _;
    let dir = temp_dir("lost-session");
    let identity = braid_proxy::tls::ServerIdentity::generate("braid").unwrap();
    let dark = "outages = [[1.5, 3.5]]";
    let links = [format!("{WIFI}\n{dark}"), format!("{LTE}\n{dark}")];
    let (mut server, emu, client) =
        start_three(&dir, identity.clone(), &[&links[0], &links[1]]).await;
    let addr = server.addr;
    assert!(client.wait_for_paths(2, Duration::from_secs(10)).await);
    let first = client.status().await.sessions[0].session.clone();
    let origin = endless_origin(Duration::from_millis(10)).await;
    let (mut s, reply) = socks5_connect(client.socks_addr, origin).await;
    assert_eq!(reply[..4], [5, 0, 5, 0], "SOCKS5 CONNECT refused");
    let mut some = vec![0u8; 1024];
    s.read_exact(&mut some).await.unwrap();
    assert!(
        emu.now().as_secs_f64() < 1.4,
        "set-up took until {:?}",
        emu.now()
    );

    // Inside the outage: stopped, unheard, and started again at its address.
    while emu.now().as_secs_f64() < 1.7 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.shutdown();
    drop(server);
    let _server = start_server_again(addr, &server_config(&dir), &identity).await;
    assert!(
        emu.now().as_secs_f64() < 3.4,
        "restarted at {:?}",
        emu.now()
    );
    // A request made now, still inside the outage: its OPEN goes out on the old session, and
    // its own packets are what the restarted server answers. That session ends before any
    // verdict, so the request is opened again on the next one and goes through.
    let later = tokio::spawn(socks5_connect(client.socks_addr, origin));
    let ended = read_until_end(&mut s).await;
    assert!(
        matches!(ended, Err((std::io::ErrorKind::ConnectionReset, _))),
        "{ended:?}"
    );
    let reset_at = emu.now().as_secs_f64();
    println!("the application's connection was reset at {reset_at:.2} s");
    // The connections' idle timeout (60 s) would have taken until about 61.5 s.
    assert!(reset_at < 8.0, "reset at {reset_at:.2} s");
    let (mut s, reply) = later.await.unwrap();
    let connected_at = emu.now().as_secs_f64();
    println!("the request made at the restart was connected by {connected_at:.2} s");
    assert_eq!(
        reply[..4],
        [5, 0, 5, 0],
        "the request made at the restart was refused"
    );
    s.read_exact(&mut some).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !client
        .status()
        .await
        .sessions
        .first()
        .is_some_and(|s| s.session != first && s.paths.len() == 2)
    {
        assert!(tokio::time::Instant::now() < deadline, "no new session");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
