//! Flows that end every way a proxied connection can end, many at once, and UDP associations:
//! afterwards neither daemon keeps a flow and the server keeps no connection to the origin.
//! (A daemon on a router runs for months; a flow or socket left behind per odd ending adds up.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod daemon_common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use daemon_common::{
    UdpAssociation, flows_open, pair_with, path_fields, pattern, sha256, socks_connect, udp_echo,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Flows started at once, and rounds of them.
const AT_ONCE: usize = 16;
const ROUNDS: usize = 30;

/// The origin's connections: accepted and still open.
#[derive(Default)]
struct Counts {
    accepted: AtomicUsize,
    open: AtomicUsize,
}

/// Counts a connection open until dropped.
struct Open(Arc<Counts>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An origin answering by the first byte: `D` + u32: that many pattern bytes, then a clean
/// close; `R` + u32: that many, then a reset; `U`: reads to the end, answers the SHA-256 of
/// what it read and closes; `H`: reads to the end (the peer's close or reset) and closes.
async fn origin() -> (SocketAddr, Arc<Counts>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts = Arc::new(Counts::default());
    let shared = Arc::clone(&counts);
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            shared.accepted.fetch_add(1, Ordering::SeqCst);
            shared.open.fetch_add(1, Ordering::SeqCst);
            let open = Open(Arc::clone(&shared));
            tokio::spawn(async move {
                let _open = open;
                let _ = answer(s).await;
            });
        }
    });
    (addr, counts)
}

async fn answer(mut s: TcpStream) -> std::io::Result<()> {
    let mut cmd = [0u8; 1];
    s.read_exact(&mut cmd).await?;
    match cmd[0] {
        b'D' | b'R' => {
            let mut len = [0u8; 4];
            s.read_exact(&mut len).await?;
            s.write_all(&pattern(u32::from_be_bytes(len) as usize, 3))
                .await?;
            if cmd[0] == b'R' {
                s.set_zero_linger()?;
            } else {
                s.shutdown().await?;
            }
        }
        b'U' => {
            let mut all = Vec::new();
            s.read_to_end(&mut all).await?;
            s.write_all(&sha256(&all)).await?;
            s.shutdown().await?;
        }
        _ => {
            let mut sink = [0u8; 4096];
            while s.read(&mut sink).await? > 0 {}
        }
    }
    Ok(())
}

/// One flow, ending the way `kind` picks; panics only where the proxy changed the bytes.
async fn flow(socks: SocketAddr, origin: SocketAddr, kind: usize, n: usize) {
    let (code, mut s) = socks_connect(socks, "127.0.0.1", origin.port()).await;
    assert_eq!(code, 0, "SOCKS5 CONNECT refused (flow {n})");
    let len = 1 + (n * 7919) % 100_000;
    match kind {
        // A download read whole, then closed.
        0 => {
            s.write_all(b"D").await.unwrap();
            s.write_all(&(len as u32).to_be_bytes()).await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            assert!(
                got == pattern(len, 3),
                "flow {n}: download of {len} bytes changed"
            );
        }
        // An upload half-closed by the application, the answer read after it.
        1 => {
            let data = pattern(len, 5);
            s.write_all(b"U").await.unwrap();
            s.write_all(&data).await.unwrap();
            s.shutdown().await.unwrap();
            let mut digest = Vec::new();
            s.read_to_end(&mut digest).await.unwrap();
            assert_eq!(
                digest,
                sha256(&data),
                "flow {n}: upload of {len} bytes changed"
            );
        }
        // A large download broken off by the application's reset after its first bytes.
        2 => {
            s.write_all(b"D").await.unwrap();
            s.write_all(&2_000_000u32.to_be_bytes()).await.unwrap();
            let mut first = vec![0u8; 1 + len % 65_536];
            s.read_exact(&mut first).await.unwrap();
            s.set_zero_linger().unwrap();
        }
        // The origin's reset after its bytes: whatever arrives is a prefix of them.
        3 => {
            s.write_all(b"R").await.unwrap();
            s.write_all(&(len as u32).to_be_bytes()).await.unwrap();
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got).await;
            assert!(
                got.len() <= len && got == pattern(len, 3)[..got.len()],
                "flow {n}: bytes before the origin's reset changed"
            );
        }
        // A connection to an origin that waits, closed by the application unread.
        4 => {
            s.write_all(b"H").await.unwrap();
            tokio::time::sleep(Duration::from_millis((n % 20) as u64)).await;
        }
        // The same, reset by the application.
        5 => {
            s.write_all(b"H").await.unwrap();
            s.set_zero_linger().unwrap();
        }
        // Connected and closed without a byte either way.
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_ended_every_way_leave_no_flow_or_origin_connection_behind() {
    churn("churn", false).await;
}

/// The same with every flow sent redundantly (`[session] redundant_ports` naming the origin's
/// and the echo's ports on both daemons): each ending still reaches both ends, and no marked
/// flow is left counted (the sessions check their count against their flows in debug builds
/// at every status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redundant_flows_ended_every_way_leave_nothing_behind_either() {
    churn("churn-redundant", true).await;
}

/// 480 flows ended seven ways and 30 UDP associations, each end's flows sent redundantly when
/// `redundant`; then nothing may be left open at either end or at the origin.
async fn churn(name: &str, redundant: bool) {
    let (origin, counts) = origin().await;
    let echo = udp_echo().await;
    let ports = [(origin.port(), origin.port()), (echo.port(), echo.port())];
    let defaults = braid_proxy::config::SessionLimits::default();
    let limits = braid_proxy::config::SessionLimits {
        redundant: braid_proxy::session::RedundantFlows {
            ports: braid_proxy::session::PortSet::new(ports.into_iter().filter(|_| redundant))
                .unwrap(),
            ..defaults.redundant
        },
        ..defaults
    };
    let (server, client) = pair_with(name, 2, limits).await;
    let mut n = 0;
    let mut most_marked = 0;
    for r in 0..ROUNDS {
        let mut round = Vec::with_capacity(AT_ONCE + 1);
        // And a UDP association per round, answered once, ended by its control connection.
        let socks = client.socks_addr;
        round.push(tokio::spawn(async move {
            let udp = UdpAssociation::open(socks).await;
            let payload = pattern(1 + r * 37, 9);
            assert_eq!(
                udp.ask(echo, &payload, 10).await,
                Some(payload),
                "round {r}'s UDP echo"
            );
        }));
        for _ in 0..AT_ONCE {
            let socks = client.socks_addr;
            round.push(tokio::spawn(async move {
                let ended =
                    tokio::time::timeout(Duration::from_secs(20), flow(socks, origin, n % 7, n));
                assert!(
                    ended.await.is_ok(),
                    "flow {n} (kind {}) did not end in 20 s",
                    n % 7
                );
            }));
            n += 1;
        }
        // Mid-round, every flow open at either end is marked when redundant (the UDP
        // association from its first datagram on: it may not have sent one yet), none otherwise.
        for _ in 0..3 {
            for status in [client.status().await, server.status().await] {
                let c = &status.sessions[0].counters;
                let ok = match redundant {
                    true => c.flows_redundant + 1 >= c.flows_open,
                    false => c.flows_redundant == 0,
                };
                assert!(
                    ok,
                    "{} round {r}: {} of {} flows open redundant",
                    status.role, c.flows_redundant, c.flows_open
                );
                most_marked = most_marked.max(c.flows_redundant);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for task in round {
            task.await.unwrap();
        }
    }
    // Every ending reaches both sessions and the origin within a few round trips on loopback;
    // a reset or close lost on the way would leave a flow or a connection open for good.
    let mut last = (usize::MAX, usize::MAX, usize::MAX);
    for _ in 0..100 {
        let (server_flows, client_flows) = flows_open(&server, &client).await;
        last = (
            server_flows,
            client_flows,
            counts.open.load(Ordering::SeqCst),
        );
        if last == (0, 0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        last,
        (0, 0, 0),
        "flows open at the server and the client, origin connections open, 10 s after {n} flows"
    );
    // Every flow reached the origin (none was refused on the way).
    assert_eq!(counts.accepted.load(Ordering::SeqCst), n);
    // The SOCKS5 inbound counts the connections the application reset (kinds 2 and 5) apart
    // from its failures, of which there were none.
    let reset_by_the_application = (0..n).filter(|i| matches!(i % 7, 2 | 5)).count() as u64;
    let socks = client.status().await.inbounds.remove(0);
    assert_eq!(
        (socks.name.as_str(), socks.reset, socks.failed),
        ("socks5", reset_by_the_application, 0),
        "{socks:?}"
    );
    // What each session sent on each path, (id, packets).
    let sent = |status| path_fields(status, |p| (p.id, p.packets_sent));
    let (on_client, on_server) = (sent(client.status().await), sent(server.status().await));
    println!("{name}: packets sent per path: client {on_client:?}, server {on_server:?}");
    println!("{name}: at most {most_marked} flows open redundant at a time");
    assert_eq!(most_marked > 0, redundant);
}
