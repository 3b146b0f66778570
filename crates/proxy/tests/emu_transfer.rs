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
    // The client's answers to the download are the session's ACK datagrams, with quinn's own
    // ACKs inside them (one asked per 32 packets, `transport::quic`). Before, quinn ACKed every
    // second packet in UDP packets of their own, and the client sent twice as many.
    let status = bed.client.status().await;
    let paths = &status.sessions[0].paths;
    let session_packets: u64 = paths.iter().map(|p| p.packets_sent).sum();
    let udp_packets: u64 = paths.iter().map(|p| p.quic.udp_sent).sum();
    println!("client during the download: {session_packets} session packets, {udp_packets} UDP");
    assert!(
        udp_packets < session_packets + session_packets / 5,
        "the client sent {udp_packets} UDP packets for {session_packets} session packets"
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

/// Coupled congestion control through the daemons, on a link that two clients share: client A
/// uploads over two emulated links (Wi-Fi and LTE, 20 Mbit/s each, 10 and 20 ms one way,
/// 100-packet queues) while client B, another device on the same Wi-Fi, uploads over the Wi-Fi
/// link alone with NewReno. A runs CUBIC, NewReno, LIA and OLIA in turn; each pair of uploads
/// lasts 20 s and goodput is counted at the receiver from 5 s to 19 s. Coupled, A leaves B more
/// of the shared link (RFC 6356's "balance congestion") and still moves more than the best
/// single link. Real time, about two minutes, so not run by default:
/// `cargo test --release -p braid-proxy --test emu_transfer -- --ignored coupled --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real time, about two minutes: run by hand for the figures"]
async fn coupled_controllers_leave_a_competitor_on_a_shared_link_more() {
    use braid_proxy::session::congestion::CongestionAlgorithm as Cc;
    const SECONDS: f64 = 20.0;
    const LINK: &str = "rate_mbps = 20.0\nqueue_packets = 100\ndelay_ms = ";
    let mut results = Vec::new();
    for cc in [Cc::Cubic, Cc::NewReno, Cc::Lia, Cc::Olia] {
        let dir = temp_dir(&format!("coupled-{}", cc.name()));
        let server = start_server_at(&dir).await;
        let emu = braid_testbed::emu::Emulator::start(&emu_config(
            server.addr,
            &[&format!("{LINK}10.0"), &format!("{LINK}20.0")],
        ))
        .await
        .unwrap();
        let links = emu.listen_addrs();
        let client = |name: &str, links: &[std::net::SocketAddr], cc: Cc| {
            let mut config = client_config(&dir.join(name), &server.fingerprint, links);
            config.session.congestion = cc;
            braid_proxy::daemon::start_client(config)
        };
        let a = client("a", &links, cc).await.unwrap();
        let b = client("b", &links[..1], Cc::NewReno).await.unwrap();
        assert!(a.wait_for_paths(2, Duration::from_secs(15)).await);
        assert!(b.wait_for_paths(1, Duration::from_secs(15)).await);
        let (sink, counts) = byte_sink().await;
        let started = Instant::now();
        let until = started + Duration::from_secs_f64(SECONDS);
        tokio::join!(
            push_through_socks(a.socks_addr, sink, 0, until),
            push_through_socks(b.socks_addr, sink, 1, until)
        );
        let window = (
            Duration::from_secs(5),
            Duration::from_secs_f64(SECONDS - 1.0),
        );
        let goodput = |tag: usize| {
            let counts = counts.lock().unwrap();
            let bytes: usize = counts[tag]
                .iter()
                .filter(|(at, _)| *at >= started + window.0 && *at < started + window.1)
                .map(|(_, n)| n)
                .sum();
            mbps(bytes, window.1 - window.0)
        };
        let (ga, gb) = (goodput(0), goodput(1));
        println!(
            "A {}: A {ga:.2} Mbit/s over Wi-Fi and LTE, B {gb:.2} Mbit/s over the shared Wi-Fi",
            cc.name()
        );
        results.push((cc, ga, gb));
        let _ = std::fs::remove_dir_all(&dir);
    }
    let b_of = |want: Cc| results.iter().find(|(cc, ..)| *cc == want).unwrap().2;
    for coupled in [Cc::Lia, Cc::Olia] {
        assert!(
            b_of(coupled) > b_of(Cc::Cubic),
            "{}: {results:?}",
            coupled.name()
        );
    }
    // Every controller moves more than the best single link would (20 Mbit/s) for A.
    for (cc, ga, _) in &results {
        assert!(*ga > 20.0, "{}: {results:?}", cc.name());
    }
}

async fn start_server_at(dir: &std::path::Path) -> braid_proxy::daemon::ServerHandle {
    braid_proxy::daemon::start_server(
        server_config(dir),
        braid_proxy::tls::ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap()
}

/// Bytes received per connection, with their arrival times: a TCP server on 127.0.0.1 whose
/// connections each start with one tag byte (the index into the counts, 0 or 1).
type Arrivals = Arc<std::sync::Mutex<[Vec<(Instant, usize)>; 2]>>;

async fn byte_sink() -> (std::net::SocketAddr, Arrivals) {
    use tokio::io::AsyncReadExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts: Arrivals = Arc::default();
    let shared = counts.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let counts = shared.clone();
            tokio::spawn(async move {
                let tag = usize::from(conn.read_u8().await.unwrap()).min(1);
                let mut buf = vec![0u8; 64 << 10];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    counts.lock().unwrap()[tag].push((Instant::now(), n));
                }
            });
        }
    });
    (addr, counts)
}

/// Connects to `target` through the SOCKS5 inbound at `socks`, sends `tag`, then writes as fast
/// as the flow takes until `until`.
async fn push_through_socks(
    socks: std::net::SocketAddr,
    target: std::net::SocketAddr,
    tag: u8,
    until: Instant,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(socks).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut choice = [0u8; 2];
    s.read_exact(&mut choice).await.unwrap();
    let std::net::IpAddr::V4(ip) = target.ip() else {
        panic!("an IPv4 sink");
    };
    let mut request = vec![5, 1, 0, 1];
    request.extend_from_slice(&ip.octets());
    request.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&request).await.unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[1], 0, "SOCKS5 connect refused");
    s.write_all(&[tag]).await.unwrap();
    let chunk = vec![0x5a; 64 << 10];
    while Instant::now() < until {
        let left = until.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, s.write_all(&chunk))
            .await
            .is_err()
        {
            break;
        }
    }
}
