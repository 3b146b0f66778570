//! End to end goodput (`e2e/goodput`): braid (server and client in this process, two unshaped
//! loopback links, a download through the SOCKS5 inbound from a local TCP source via the
//! server's egress) beside two plain quinn baselines in the same run, so the ratios read straight
//! off the report:
//!
//! - `quinn_tcp_tunnel`: the same end-to-end TCP download as braid (the same source and request,
//!   a TCP client reading it), carried by one plain quinn connection (default config) as a
//!   minimal tunnel with 256 KiB relay reads as braid's relays use. The design goal (braid ≥ 80%
//!   of one plain quinn connection in the same run) is measured against this row: the same job,
//!   so braid / this is what braid's multipath layer costs (docs/congestion.md, "The goal's
//!   baseline").
//! - `quinn_1conn`: one plain quinn connection moving the same bytes from a stream writer
//!   straight to a stream reader, with no TCP at either end: quinn's own ceiling on this machine,
//!   reported beside the others (until issue #3's last session the goal was read against it).
//!
//! Also `e2e/shaped` (braid over the emulator's two shaped links) and `e2e/tun` (the TUN inbound
//! beside the SOCKS5 inbound, in a network namespace of its own; needs root), below.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_proxy::config::{
    ClientConfig, EgressPolicy, LinkConfig, ServerConfig, ServerTrust, TunConfig, UserEntry,
};
use braid_proxy::daemon::{ClientHandle, ServerHandle, start_client, start_server};
use braid_proxy::session::Tier;
use braid_proxy::tls::{self, ServerIdentity};
use braid_sched_core::{SchedulerConfig, SchedulerKind};
use bytes::{BufMut as _, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BYTES: u64 = 64 << 20;
/// Read size of the tunnel's relays and of the downloading client: braid's relay chunk.
const CHUNK: usize = 256 * 1024;
const KEY: [u8; 32] = [0x5a; 32];

/// The top bit of a request to [`source`]: the client uploads the length instead.
const UPLOAD: u64 = 1 << 63;

/// A TCP source: each connection sends the u64 length it asks for; or, with [`UPLOAD`] set in
/// the request, reads that many bytes and answers with the count it read.
async fn source() -> SocketAddr {
    source_on("127.0.0.1:0".parse().unwrap()).await
}

/// [`source`] on `bind`.
async fn source_on(bind: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let chunk = vec![0x61u8; 64 * 1024];
        while let Ok((mut s, _)) = listener.accept().await {
            let chunk = chunk.clone();
            tokio::spawn(async move {
                let mut len = [0u8; 8];
                if s.read_exact(&mut len).await.is_err() {
                    return;
                }
                let mut left = u64::from_be_bytes(len);
                if left & UPLOAD != 0 {
                    let mut buf = vec![0u8; CHUNK];
                    let mut got = 0u64;
                    while got < left & !UPLOAD {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got += n as u64,
                        }
                    }
                    let _ = s.write_all(&got.to_be_bytes()).await;
                    let _ = s.shutdown().await;
                    return;
                }
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if s.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n as u64;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

fn state_dir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("braid-bench-{}-{name}", std::process::id()))
}

async fn braid_pair(links: usize) -> (ServerHandle, ClientHandle) {
    braid_pair_with(links, None).await
}

/// [`braid_pair`] with the client's `[tun]` (and the server's egress allowing private
/// addresses, where the TUN bench's source lives).
async fn braid_pair_with(links: usize, tun: Option<TunConfig>) -> (ServerHandle, ClientHandle) {
    let server = start_server(
        ServerConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            metrics_listen: None,
            metrics_token: None,
            metrics_tls: None,
            state_dir: state_dir("server"),
            server_name: "braid".into(),
            users: vec![UserEntry {
                name: "bench".into(),
                key: KEY,
            }],
            scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
            egress: EgressPolicy {
                allow_loopback: true,
                allow_private: tun.is_some(),
                ..EgressPolicy::default()
            },
            max_sessions: 4,
            max_sessions_per_user: braid_proxy::config::DEFAULT_MAX_SESSIONS_PER_USER,
            max_pending_joins: 4,
            session: braid_proxy::config::SessionLimits::default(),
        },
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let pin = braid_proxy::config::parse_fingerprint(&server.fingerprint).unwrap();
    let client = start_client(ClientConfig {
        user: "bench".into(),
        key: KEY,
        trust: ServerTrust::Fingerprint(pin),
        server_name: "braid".into(),
        state_dir: state_dir("client"),
        socks_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: None,
        metrics_listen: None,
        metrics_token: None,
        metrics_tls: None,
        socks_users: Vec::new(),
        tun,
        scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
        links: (0..links)
            .map(|i| LinkConfig {
                name: format!("lo{i}"),
                local_addr: Some("127.0.0.1:0".parse().unwrap()),
                interface: None,
                interface_required: false,
                server: vec![server.addr.to_string()],
                weight: 1,
                tier: Tier::Primary,
                rate_cap_mbps: None,
                rate_cap_down_mbps: None,
                congestion: None,
                fast_rejoin: braid_proxy::config::DEFAULT_FAST_REJOIN,
                budget: None,
            })
            .collect(),
        session: braid_proxy::config::SessionLimits::default(),
        routes: Vec::new(),
        fallback_direct: false,
    })
    .await
    .unwrap();
    assert!(client.wait_for_paths(links, Duration::from_secs(10)).await);
    (server, client)
}

async fn braid_download(proxy: SocketAddr, target: SocketAddr, bytes: u64) {
    tcp_download(socks_connect(proxy, target).await, bytes).await;
}

/// A connection to `target` through the SOCKS5 proxy `proxy`.
async fn socks_connect(proxy: SocketAddr, target: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel).await.unwrap();
    let std::net::IpAddr::V4(ip) = target.ip() else {
        unreachable!()
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&ip.octets());
    req.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[1], 0);
    s
}

/// Sends `bytes` to the source (at the other end of `s`) and waits for its count of them.
async fn tcp_upload(mut s: TcpStream, bytes: u64) {
    s.write_all(&(bytes | UPLOAD).to_be_bytes()).await.unwrap();
    let chunk = vec![0x62u8; CHUNK];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        s.write_all(&chunk[..n]).await.unwrap();
        left -= n as u64;
    }
    let mut count = [0u8; 8];
    s.read_exact(&mut count).await.unwrap();
    assert_eq!(u64::from_be_bytes(count), bytes);
}

/// Asks the source (at the other end of `s`) for `bytes` and reads them to the end.
async fn tcp_download(mut s: TcpStream, bytes: u64) {
    s.write_all(&bytes.to_be_bytes()).await.unwrap();
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    assert_eq!(got, bytes);
}

/// One plain quinn connection (default transport config) over loopback: its server side and
/// its client side. The endpoints live as long as the process.
async fn quinn_connection() -> (quinn::Connection, quinn::Connection) {
    let identity = ServerIdentity::generate("braid").unwrap();
    let server_crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(tls::server_crypto(&identity).unwrap())
            .unwrap();
    let server = quinn::Endpoint::server(
        quinn::ServerConfig::with_crypto(Arc::new(server_crypto)),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let addr = server.local_addr().unwrap();
    let pin = braid_proxy::config::parse_fingerprint(&identity.fingerprint()).unwrap();
    let client_crypto = quinn::crypto::rustls::QuicClientConfig::try_from(
        tls::client_crypto(&ServerTrust::Fingerprint(pin)).unwrap(),
    )
    .unwrap();
    let mut client = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    client.set_default_client_config(quinn::ClientConfig::new(Arc::new(client_crypto)));
    let (server_side, client_side) = tokio::join!(
        async { server.accept().await.unwrap().await.unwrap() },
        async { client.connect(addr, "braid").unwrap().await.unwrap() }
    );
    std::mem::forget(server);
    std::mem::forget(client);
    (server_side, client_side)
}

/// One plain quinn connection (default transport) serving downloads on bidirectional streams.
async fn quinn_pair() -> quinn::Connection {
    let (server, client) = quinn_connection().await;
    tokio::spawn(async move {
        let chunk = bytes::Bytes::from(vec![0x61u8; 64 * 1024]);
        while let Ok((mut send, mut recv)) = server.accept_bi().await {
            let chunk = chunk.clone();
            tokio::spawn(async move {
                let mut len = [0u8; 8];
                recv.read_exact(&mut len).await.unwrap();
                let mut left = u64::from_be_bytes(len);
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    send.write_chunk(chunk.slice(..n)).await.unwrap();
                    left -= n as u64;
                }
                send.finish().unwrap();
                let _ = send.stopped().await;
            });
        }
    });
    client
}

async fn quinn_download(conn: &quinn::Connection, bytes: u64) {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&bytes.to_be_bytes()).await.unwrap();
    send.finish().unwrap();
    let mut got = 0u64;
    while let Some(chunk) = recv.read_chunk(usize::MAX, true).await.unwrap() {
        got += chunk.bytes.len() as u64;
    }
    assert_eq!(got, bytes);
}

/// A minimal TCP tunnel over one plain quinn connection (default transport config): its client
/// side accepts local TCP connections and carries each on a new bidirectional stream, its server
/// side connects each stream to `target`. Returns the tunnel's local TCP address and the client
/// side's connection (for its counters).
async fn quinn_tunnel(target: SocketAddr) -> (SocketAddr, quinn::Connection) {
    let (server, client) = quinn_connection().await;
    tokio::spawn(async move {
        while let Ok((send, recv)) = server.accept_bi().await {
            tokio::spawn(async move {
                let relayed =
                    async { relay_stream(TcpStream::connect(target).await?, send, recv).await };
                if let Err(e) = relayed.await {
                    eprintln!("quinn_tcp_tunnel server side: {e}");
                }
            });
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let conn = client.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let conn = conn.clone();
            tokio::spawn(async move {
                let relayed = async {
                    let (send, recv) = conn.open_bi().await?;
                    relay_stream(tcp, send, recv).await
                };
                if let Err(e) = relayed.await {
                    eprintln!("quinn_tcp_tunnel client side: {e}");
                }
            });
        }
    });
    (addr, client)
}

/// Copies a TCP connection onto a quinn stream and back until both directions end, reading at
/// most [`CHUNK`] bytes at a time each way (as braid's relays do). A TCP end finishes the
/// stream; the stream's end shuts the TCP connection's write side.
async fn relay_stream(
    tcp: TcpStream,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) -> std::io::Result<()> {
    tcp.set_nodelay(true)?;
    let (mut rd, mut wr) = tcp.into_split();
    let up = async {
        let mut buf = BytesMut::new();
        loop {
            // Takes back the buffer once quinn has dropped every chunk split off it.
            buf.reserve(CHUNK);
            if rd.read_buf(&mut (&mut buf).limit(CHUNK)).await? == 0 {
                send.finish()?;
                return Ok::<_, std::io::Error>(());
            }
            send.write_chunk(buf.split().freeze()).await?;
        }
    };
    let down = async {
        let mut buf = vec![0u8; CHUNK];
        while let Some(n) = recv.read(&mut buf).await? {
            wr.write_all(&buf[..n]).await?;
        }
        wr.shutdown().await
    };
    tokio::try_join!(up, down).map(|_| ())
}

/// CPU seconds (user + system) this process has used so far, from /proc/self/stat.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    ticks as f64 / 100.0
}

fn goodput(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (server, client, target) = rt.block_on(async {
        let (s, c) = braid_pair(2).await;
        (s, c, source().await)
    });
    let conn = rt.block_on(quinn_pair());
    // Set up when its benchmark starts: with the default transport config (idle timeout 30 s,
    // no keep-alive) the connection would time out while the benchmark before it runs.
    let tunnel = std::cell::OnceCell::new();
    let socks = client.socks_addr;
    let mut group = c.benchmark_group("e2e/goodput");
    group.throughput(Throughput::Bytes(BYTES));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("quinn_1conn", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let cpu = cpu_seconds();
                let start = Instant::now();
                for _ in 0..iters {
                    quinn_download(&conn, BYTES).await;
                }
                let wall = start.elapsed();
                report_cpu("quinn_1conn", iters, cpu, wall);
                wall
            })
        })
    });
    group.bench_function("quinn_tcp_tunnel", |b| {
        b.iter_custom(|iters| {
            let (addr, _) = tunnel.get_or_init(|| rt.block_on(quinn_tunnel(target)));
            rt.block_on(async {
                let cpu = cpu_seconds();
                let start = Instant::now();
                for _ in 0..iters {
                    let s = TcpStream::connect(*addr).await.unwrap();
                    tcp_download(s, BYTES).await;
                }
                let wall = start.elapsed();
                report_cpu("quinn_tcp_tunnel", iters, cpu, wall);
                wall
            })
        })
    });
    group.bench_function("braid_2paths", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let cpu = cpu_seconds();
                let start = Instant::now();
                for _ in 0..iters {
                    braid_download(socks, target, BYTES).await;
                }
                let wall = start.elapsed();
                report_cpu("braid_2paths", iters, cpu, wall);
                wall
            })
        })
    });
    group.finish();
    // Packet counts behind the CPU figures: session packets per path, and what each path's quinn
    // connection put on the wire (UDP datagrams, send calls, QUIC ACK frames, DATAGRAM frames).
    for (end, status) in [
        ("client", rt.block_on(client.status())),
        ("server", rt.block_on(server.status())),
    ] {
        for s in &status.sessions {
            for p in &s.paths {
                let q = &p.quic;
                eprintln!(
                    "braid {end} path {} ({}): {} packets sent, {} received, {} lost, srtt {:.3} ms, cwnd {} B, max datagram {} B; quinn: {} UDP sent in {} calls, {} received, {} ACK frames sent, {} received, {} DATAGRAM frames sent, {} received",
                    p.id,
                    p.name,
                    p.packets_sent,
                    p.packets_received,
                    p.packets_lost,
                    p.srtt_ms,
                    p.cwnd,
                    p.max_datagram_size,
                    q.udp_sent,
                    q.udp_send_calls,
                    q.udp_received,
                    q.acks_sent,
                    q.acks_received,
                    q.datagrams_sent,
                    q.datagrams_received,
                );
            }
        }
    }
    let tunnel_conn = tunnel.get().map(|(_, conn)| ("quinn_tcp_tunnel", conn));
    for (name, conn) in std::iter::once(("quinn_1conn", &conn)).chain(tunnel_conn) {
        let q = conn.stats();
        eprintln!(
            "{name} client: {} UDP sent in {} calls, {} received in {} calls, {} ACK frames sent, {} received",
            q.udp_tx.datagrams,
            q.udp_tx.ios,
            q.udp_rx.datagrams,
            q.udp_rx.ios,
            q.frame_tx.acks,
            q.frame_rx.acks
        );
    }
}

/// Prints CPU seconds per GiB moved when `BRAID_BENCH_CPU` is set (long samples only).
fn report_cpu(name: &str, iters: u64, cpu_before: f64, wall: Duration) {
    if std::env::var_os("BRAID_BENCH_CPU").is_none() || wall < Duration::from_millis(500) {
        return;
    }
    let gib = (iters * BYTES) as f64 / (1u64 << 30) as f64;
    let cpu = cpu_seconds() - cpu_before;
    eprintln!(
        "{name}: {:.2} CPU s/GiB, {:.2} cores busy",
        cpu / gib,
        cpu / wall.as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// `e2e/tun`: the same 64 MiB download through the client's TUN inbound (a kernel TUN device)
// beside the same download through its SOCKS5 inbound, on the same daemons in the same run, so
// the TUN inbound's cost reads as a ratio; then 64 MiB uploaded to the source through each
// (`…_upload`); then 64 MiB delivered to a UDP sink in datagrams sent 32 per `send` with
// `UDP_SEGMENT` (`braid_tun_udp_upload`: the goodput, what is lost being made up by more
// datagrams); then both downloads again while 256 other connections through the device stay
// open and silent (`…_256_idle`). Everything runs in a network namespace this bench
// creates (`unshare(CLONE_NEWNET)` on a thread that then builds the runtime, whose threads
// inherit it): the source on 10.7.0.9 (an address on the namespace's loopback), the device
// braid0 with 10.7.0.1/24 set by braid from `[tun] address`, and a policy rule that sends what
// the application sends from 10.7.0.1 into the device. Needs root (or CAP_SYS_ADMIN and
// CAP_NET_ADMIN) and `ip`; without them the group says why and measures nothing.
// `BRAID_BENCH_TUN_MTU` and `BRAID_BENCH_TUN_BUFFER` set `[tun] mtu` and `tcp_buffer`;
// `BRAID_BENCH_TUN_OFFLOAD=0` sets `[tun] offload = false`; `BRAID_BENCH_UDP_PAYLOAD` the UDP
// upload's datagram size (default 1200).

/// A runtime whose threads live in a new network namespace set up for the TUN bench, or why
/// not.
fn tun_namespace() -> Result<tokio::runtime::Runtime, String> {
    std::thread::spawn(|| {
        // SAFETY: plain flags; only this thread (and the threads it starts) moves.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(format!(
                "no network namespace: {}",
                std::io::Error::last_os_error()
            ));
        }
        if !sh("ip link set lo up && ip addr add 10.7.0.9/32 dev lo") {
            return Err("`ip` is missing or not permitted".into());
        }
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .join()
    .unwrap()
}

/// Routes what is sent from 10.7.0.1 into the TUN device (the local table, which would deliver
/// 10.7.0.9 at once, is consulted after), in the calling thread's namespace.
fn route_into_tun() -> bool {
    [
        "echo 1 > /proc/sys/net/ipv4/conf/all/accept_local",
        "echo 1 > /proc/sys/net/ipv4/conf/braid0/accept_local",
        "echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter",
        "echo 0 > /proc/sys/net/ipv4/conf/braid0/rp_filter",
        "ip route add default dev braid0 table 100",
        "ip rule add pref 100 from 10.7.0.1 lookup 100",
        "ip rule add pref 200 lookup local",
        "ip rule del pref 0 lookup local",
    ]
    .iter()
    .all(|command| sh(command))
}

/// Runs `command` with `sh -c` (in the calling thread's network namespace); whether it worked.
fn sh(command: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", command])
        .status()
        .is_ok_and(|s| s.success())
}

/// Idle connections held open through the TUN device in `e2e/tun`'s `…_idle` rows.
const TUN_IDLE: usize = 256;

/// A TCP download from `target` by an application whose socket is bound to the device's
/// address, so that it goes through the TUN inbound.
async fn tun_download(target: SocketAddr, bytes: u64) {
    tcp_download(tun_connect(target).await, bytes).await;
}

/// Payload bytes per datagram of `e2e/tun`'s `braid_tun_udp_upload`: 1200 (a QUIC packet's size,
/// which the paths carry once their MTU discovery has grown them) unless
/// `BRAID_BENCH_UDP_PAYLOAD` says otherwise (above 1372 they go in DATAGRAM_FRAGMENT pieces).
fn udp_payload() -> usize {
    std::env::var("BRAID_BENCH_UDP_PAYLOAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| (16..=1472).contains(&n))
        .unwrap_or(1200)
}
/// Datagrams per `send` (`UDP_SEGMENT`: with UDP segmentation offload the device hands the
/// burst over as one packet).
const UDP_BURST: usize = 32;
/// Datagrams the uploader sends beyond the highest index the sink has acknowledged.
const UDP_WINDOW: u64 = 128;

/// A UDP sink for [`tun_udp_upload`]: each datagram starts with its run and its index (u64
/// each); every 32nd datagram of a run is answered with the run, the highest index seen and
/// the datagrams received.
async fn udp_sink_on(bind: SocketAddr) -> SocketAddr {
    let socket = tokio::net::UdpSocket::bind(bind).await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        let (mut run, mut highest, mut count) = (u64::MAX, 0u64, 0u64);
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            if n < 16 {
                continue;
            }
            let word = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().unwrap());
            let (this_run, index) = (word(0), word(8));
            if this_run != run {
                (run, highest, count) = (this_run, 0, 0);
            }
            count += 1;
            highest = highest.max(index);
            if count % 32 == 0 {
                let mut ack = [0u8; 24];
                for (i, v) in [run, highest, count].into_iter().enumerate() {
                    ack[8 * i..8 * i + 8].copy_from_slice(&v.to_be_bytes());
                }
                let _ = socket.send_to(&ack, from).await;
            }
        }
    });
    addr
}

/// Uploads [`BYTES`] to `sink` in datagrams of [`udp_payload`] bytes from the device's
/// address, [`UDP_BURST`] per `send` (`UDP_SEGMENT`), at most [`UDP_WINDOW`] beyond the highest
/// index the sink acknowledged (after 20 ms without an answer, half the window is taken as lost
/// and the upload goes on), until the sink counted [`BYTES`] of them: what is lost is sent
/// again as new datagrams, so the time is that of delivering [`BYTES`]. The datagrams sent.
async fn tun_udp_upload(socket: &tokio::net::UdpSocket, sink: SocketAddr, run: u64) -> u64 {
    let payload = udp_payload();
    let total = BYTES / payload as u64;
    let mut burst = vec![0u8; payload * UDP_BURST];
    let mut ack = [0u8; 64];
    // The next index, one past the highest acknowledged, and the datagrams the sink counted.
    let (mut next, mut acked, mut received) = (0u64, 0u64, 0u64);
    let take_ack = |ack: &[u8], acked: &mut u64, received: &mut u64| {
        let word = |i: usize| u64::from_be_bytes(ack[i..i + 8].try_into().unwrap());
        if ack.len() == 24 && word(0) == run {
            *acked = (*acked).max(word(8) + 1);
            *received = (*received).max(word(16));
        }
    };
    while received < total {
        while let Ok((n, _)) = socket.try_recv_from(&mut ack) {
            take_ack(&ack[..n], &mut acked, &mut received);
        }
        if next - acked.min(next) < UDP_WINDOW {
            for i in 0..UDP_BURST {
                let d = &mut burst[i * payload..];
                d[..8].copy_from_slice(&run.to_be_bytes());
                d[8..16].copy_from_slice(&(next + i as u64).to_be_bytes());
            }
            // A full socket buffer (ENOBUFS) loses the burst, as a full queue anywhere would.
            let _ = socket.send_to(&burst, sink).await;
            next += UDP_BURST as u64;
        } else {
            match tokio::time::timeout(Duration::from_millis(20), socket.recv_from(&mut ack)).await
            {
                Ok(Ok((n, _))) => take_ack(&ack[..n], &mut acked, &mut received),
                _ => acked = next - UDP_WINDOW / 2,
            }
        }
    }
    next
}

/// A UDP socket on the device's address that sends [`UDP_BURST`] datagrams per `send`.
fn tun_udp_socket() -> tokio::net::UdpSocket {
    let socket = std::net::UdpSocket::bind("10.7.0.1:0").unwrap();
    braid_proxy::inbound::tun::device::send_as_one(&socket, udp_payload() as u16).unwrap();
    socket.set_nonblocking(true).unwrap();
    tokio::net::UdpSocket::from_std(socket).unwrap()
}

/// A connection to `target` from the device's address, so that it goes through the TUN inbound.
async fn tun_connect(target: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("10.7.0.1:0".parse().unwrap()).unwrap();
    socket.connect(target).await.unwrap()
}

fn tun(c: &mut Criterion) {
    let rt = match tun_namespace() {
        Ok(rt) => rt,
        Err(why) => {
            eprintln!("e2e/tun skipped: {why}");
            return;
        }
    };
    // Everything below runs on the runtime's threads (spawned), inside the namespace.
    let set_up = rt.spawn(async {
        let config = TunConfig {
            mtu: std::env::var("BRAID_BENCH_TUN_MTU")
                .ok()
                .and_then(|m| m.parse().ok())
                .unwrap_or(braid_proxy::config::DEFAULT_TUN_MTU),
            tcp_buffer: std::env::var("BRAID_BENCH_TUN_BUFFER")
                .ok()
                .and_then(|b| b.parse().ok())
                .unwrap_or(braid_proxy::inbound::tun::DEFAULT_TCP_BUFFER),
            offload: std::env::var("BRAID_BENCH_TUN_OFFLOAD").map_or(true, |v| v != "0"),
            address: vec!["10.7.0.1/24".parse().unwrap()],
            ..TunConfig::named("braid0")
        };
        let (server, client) = braid_pair_with(2, Some(config)).await;
        let source = source_on("10.7.0.9:0".parse().unwrap()).await;
        let sink = udp_sink_on("10.7.0.9:0".parse().unwrap()).await;
        let routed = tokio::task::spawn_blocking(route_into_tun).await.unwrap();
        (server, client, (source, sink), routed)
    });
    let (_server, client, (target, sink), routed) = rt.block_on(set_up).unwrap();
    if !routed {
        eprintln!("e2e/tun skipped: `ip` could not route into the device");
        return;
    }
    let socks = client.socks_addr;
    let mut group = c.benchmark_group("e2e/tun");
    group.throughput(Throughput::Bytes(BYTES));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));
    group.bench_function("braid_socks5", |b| {
        b.iter_custom(|iters| {
            rt.block_on(rt.spawn(async move {
                let start = Instant::now();
                for _ in 0..iters {
                    braid_download(socks, target, BYTES).await;
                }
                start.elapsed()
            }))
            .unwrap()
        })
    });
    group.bench_function("braid_tun", |b| {
        b.iter_custom(|iters| {
            rt.block_on(rt.spawn(async move {
                let start = Instant::now();
                for _ in 0..iters {
                    tun_download(target, BYTES).await;
                }
                start.elapsed()
            }))
            .unwrap()
        })
    });
    // The other way: 64 MiB uploaded to the source, through each inbound.
    for (name, through_tun) in [("braid_socks5_upload", false), ("braid_tun_upload", true)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(rt.spawn(async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let s = match through_tun {
                            true => tun_connect(target).await,
                            false => socks_connect(socks, target).await,
                        };
                        tcp_upload(s, BYTES).await;
                    }
                    start.elapsed()
                }))
                .unwrap()
            })
        });
    }
    // UDP: 64 MiB delivered in datagrams of `udp_payload()` bytes, 32 per `send`, to a sink that
    // acknowledges them (a window keeps the uploader from running far ahead of what arrives).
    let udp = rt
        .block_on(rt.spawn(async { Arc::new(tun_udp_socket()) }))
        .unwrap();
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let runs = Arc::new(std::sync::atomic::AtomicU64::new(0));
    group.bench_function("braid_tun_udp_upload", |b| {
        b.iter_custom(|iters| {
            let (udp, sent, runs) = (udp.clone(), sent.clone(), runs.clone());
            rt.block_on(rt.spawn(async move {
                let start = Instant::now();
                for _ in 0..iters {
                    let run = runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let n = tun_udp_upload(&udp, sink, run).await;
                    sent.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
                start.elapsed()
            }))
            .unwrap()
        })
    });
    let (sent, runs) = (
        sent.load(std::sync::atomic::Ordering::Relaxed),
        runs.load(std::sync::atomic::Ordering::Relaxed),
    );
    let delivered = runs * (BYTES / udp_payload() as u64);
    eprintln!(
        "e2e/tun: braid_tun_udp_upload sent {sent} datagrams to deliver {delivered} ({runs} runs, \
         {:.1} % lost)",
        100.0 * sent.saturating_sub(delivered) as f64 / sent.max(1) as f64
    );
    // The same two downloads while `TUN_IDLE` other connections through the device stay open
    // and silent (a router's browsers keep many): what each open connection costs the rest.
    let idle = rt
        .block_on(rt.spawn(async move {
            let mut idle = Vec::with_capacity(TUN_IDLE);
            for _ in 0..TUN_IDLE {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind("10.7.0.1:0".parse().unwrap()).unwrap();
                idle.push(socket.connect(target).await.unwrap());
            }
            idle
        }))
        .unwrap();
    for (name, through_tun) in [
        (format!("braid_socks5_{TUN_IDLE}_idle"), false),
        (format!("braid_tun_{TUN_IDLE}_idle"), true),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(rt.spawn(async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        if through_tun {
                            tun_download(target, BYTES).await;
                        } else {
                            braid_download(socks, target, BYTES).await;
                        }
                    }
                    start.elapsed()
                }))
                .unwrap()
            })
        });
    }
    drop(idle);
    group.finish();
    if let Some((device, counters)) = &client.tun {
        let connections = counters
            .tcp_connections
            .load(std::sync::atomic::Ordering::Relaxed);
        eprintln!("e2e/tun: {connections} TCP connections through {device}");
    }
}

// ---------------------------------------------------------------------------------------
// `e2e/shaped` (the emulator's part): the same braid download, but over the two shaped links of
// `config/local/emu.toml` (30 Mbit/s RTT 20 ms and 20 Mbit/s RTT 40 ms) through the real-time
// link emulator in this process. Goal: goodput >= 90% of the 50 Mbit/s the two links carry
// (the links count IP and UDP headers, so the payload ceiling is a little under 50).

/// Bytes per shaped download: about 2.7 s at 48 Mbit/s.
const SHAPED_BYTES: u64 = 16 << 20;

async fn shaped_pair() -> (ServerHandle, braid_testbed::emu::EmuHandle, ClientHandle) {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/local/emu.toml");
    let mut config = braid_testbed::emu::EmuConfig::load(&file).unwrap();
    let server = start_server(
        ServerConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            metrics_listen: None,
            metrics_token: None,
            metrics_tls: None,
            state_dir: state_dir("shaped-server"),
            server_name: "braid".into(),
            users: vec![UserEntry {
                name: "bench".into(),
                key: KEY,
            }],
            scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
            egress: EgressPolicy {
                allow_loopback: true,
                ..EgressPolicy::default()
            },
            max_sessions: 4,
            max_sessions_per_user: braid_proxy::config::DEFAULT_MAX_SESSIONS_PER_USER,
            max_pending_joins: 4,
            session: braid_proxy::config::SessionLimits::default(),
        },
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    for path in &mut config.paths {
        path.listen = "127.0.0.1:0".parse().unwrap();
        path.forward = server.addr;
    }
    let emu = braid_testbed::emu::Emulator::start(&config).await.unwrap();
    let pin = braid_proxy::config::parse_fingerprint(&server.fingerprint).unwrap();
    let client = start_client(ClientConfig {
        user: "bench".into(),
        key: KEY,
        trust: ServerTrust::Fingerprint(pin),
        server_name: "braid".into(),
        state_dir: state_dir("shaped-client"),
        socks_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: None,
        metrics_listen: None,
        metrics_token: None,
        metrics_tls: None,
        socks_users: Vec::new(),
        tun: None,
        scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
        links: emu
            .listen_addrs()
            .iter()
            .zip(&config.paths)
            .map(|(addr, path)| LinkConfig {
                name: path.link.name.clone(),
                local_addr: Some("127.0.0.1:0".parse().unwrap()),
                interface: None,
                interface_required: false,
                server: vec![addr.to_string()],
                weight: 1,
                tier: Tier::Primary,
                rate_cap_mbps: None,
                rate_cap_down_mbps: None,
                congestion: None,
                fast_rejoin: braid_proxy::config::DEFAULT_FAST_REJOIN,
                budget: None,
            })
            .collect(),
        session: braid_proxy::config::SessionLimits::default(),
        routes: Vec::new(),
        fallback_direct: false,
    })
    .await
    .unwrap();
    assert!(client.wait_for_paths(2, Duration::from_secs(10)).await);
    (server, emu, client)
}

fn shaped(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (_server, emu, client, target) = rt.block_on(async {
        let (s, e, c) = shaped_pair().await;
        (s, e, c, source().await)
    });
    let socks = client.socks_addr;
    let mut group = c.benchmark_group("e2e/shaped");
    group.throughput(Throughput::Bytes(SHAPED_BYTES));
    group.sampling_mode(criterion::SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(3));
    group.measurement_time(Duration::from_secs(25));
    group.bench_function("braid_local_30+20mbps", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let before = emu.stats();
                let start = Instant::now();
                for _ in 0..iters {
                    braid_download(socks, target, SHAPED_BYTES).await;
                }
                let wall = start.elapsed();
                let mbps = (iters * SHAPED_BYTES) as f64 * 8.0 / wall.as_secs_f64() / 1e6;
                // How busy each emulated link was towards the client (IP + UDP headers included).
                let busy: Vec<String> = emu
                    .stats()
                    .iter()
                    .zip(&before)
                    .map(|(path, b)| {
                        let (a, b) = (&path.reverse_dir, &b.reverse_dir);
                        let wire = (a.sent_bytes - b.sent_bytes) + 28 * (a.sent_packets - b.sent_packets);
                        let drops = a.link.queue_full - b.link.queue_full;
                        let link_mbps = wire as f64 * 8.0 / wall.as_secs_f64() / 1e6;
                        format!("{} {link_mbps:.1} Mbit/s on the wire, {drops} queue drops", path.name)
                    })
                    .collect();
                eprintln!(
                    "e2e/shaped: {iters} x {} MiB in {:.2} s: {mbps:.1} Mbit/s = {:.0}% of 50 Mbit/s; links: {}",
                    SHAPED_BYTES >> 20,
                    wall.as_secs_f64(),
                    mbps / 50.0 * 100.0,
                    busy.join("; ")
                );
                wall
            })
        })
    });
    group.finish();
}

criterion_group!(benches, goodput, shaped, tun);
criterion_main!(benches);
