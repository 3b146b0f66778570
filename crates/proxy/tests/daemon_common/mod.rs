//! Shared set-up of the daemon tests: a server and a client with two links on 127.0.0.1, local
//! TCP source/sink/echo servers, and a small SOCKS5 client. Everything stays on loopback, is
//! bounded in time, and stops when its handle drops.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use braid_proxy::config::{
    ClientConfig, EgressPolicy, LinkConfig, ServerConfig, ServerTrust, SessionLimits, UserEntry,
};
use braid_proxy::daemon::{ClientHandle, ServerHandle, start_client, start_server};
use braid_proxy::session::Tier;
use braid_proxy::tls::ServerIdentity;
use braid_sched_core::{SchedulerConfig, SchedulerKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

pub const KEY: [u8; 32] = [0x42; 32];

pub fn state_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("braid-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

pub fn server_config(name: &str, allow_loopback: bool) -> ServerConfig {
    ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        metrics_token: None,
        metrics_tls: None,
        state_dir: state_dir(&format!("{name}-server")),
        server_name: "braid".into(),
        users: vec![UserEntry {
            name: "alice".into(),
            key: KEY,
        }],
        scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
        egress: EgressPolicy {
            allow_loopback,
            ..EgressPolicy::default()
        },
        max_sessions: 16,
        max_sessions_per_user: braid_proxy::config::DEFAULT_MAX_SESSIONS_PER_USER,
        max_pending_joins: 16,
        session: braid_proxy::config::SessionLimits::default(),
    }
}

pub fn client_config(
    name: &str,
    server: &ServerHandle,
    links: usize,
    key: [u8; 32],
) -> ClientConfig {
    let pin = braid_proxy::config::parse_fingerprint(&server.fingerprint).unwrap();
    ClientConfig {
        user: "alice".into(),
        key,
        trust: ServerTrust::Fingerprint(pin),
        server_name: "braid".into(),
        state_dir: state_dir(&format!("{name}-client")),
        socks_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: Some("127.0.0.1:0".parse().unwrap()),
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        metrics_token: None,
        metrics_tls: None,
        socks_users: Vec::new(),
        tun: None,
        scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
        links: (0..links)
            .map(|i| LinkConfig {
                name: format!("link{i}"),
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
    }
}

/// A server on 127.0.0.1 allowing loopback egress, with a new identity.
pub async fn loopback_server(name: &str) -> ServerHandle {
    start_server(
        server_config(name, true),
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap()
}

/// [`loopback_server`] listening on every address of its network namespace (`0.0.0.0`).
pub async fn any_address_server(name: &str) -> ServerHandle {
    start_server(
        ServerConfig {
            listen: vec!["0.0.0.0:0".parse().unwrap()],
            ..server_config(name, true)
        },
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap()
}

/// A server allowing loopback egress and a client with `links` links, all joined.
pub async fn pair(name: &str, links: usize) -> (ServerHandle, ClientHandle) {
    pair_with(name, links, SessionLimits::default()).await
}

/// [`pair`] with `session` as both daemons' `[session]` limits.
pub async fn pair_with(
    name: &str,
    links: usize,
    session: SessionLimits,
) -> (ServerHandle, ClientHandle) {
    pair_with_each(name, links, session, session).await
}

/// [`pair`] with `server` as the server's `[session]` limits and `client` as the client's (the
/// two files differ).
pub async fn pair_with_each(
    name: &str,
    links: usize,
    server: SessionLimits,
    client: SessionLimits,
) -> (ServerHandle, ClientHandle) {
    let server = start_server(
        ServerConfig {
            session: server,
            ..server_config(name, true)
        },
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let client = start_client(ClientConfig {
        session: client,
        ..client_config(name, &server, links, KEY)
    })
    .await
    .unwrap();
    assert!(
        client.wait_for_paths(links, Duration::from_secs(10)).await,
        "links did not join"
    );
    (server, client)
}

/// `field` of each path of the first session, sorted (by id when it leads).
pub fn path_fields<T: Ord>(
    status: braid_proxy::transport::DaemonStatus,
    field: impl Fn(&braid_proxy::transport::PathReport) -> T,
) -> Vec<T> {
    let mut paths: Vec<_> = status
        .sessions
        .first()
        .map(|s| s.paths.iter().map(field).collect())
        .unwrap_or_default();
    paths.sort();
    paths
}

/// The flows open at `server` and at `client`, over all their sessions.
pub async fn flows_open(server: &ServerHandle, client: &ClientHandle) -> (usize, usize) {
    let count = |s: braid_proxy::transport::DaemonStatus| {
        s.sessions
            .iter()
            .map(|x| x.counters.flows_open)
            .sum::<usize>()
    };
    (count(server.status().await), count(client.status().await))
}

/// Deterministic test bytes.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    let mut x = u32::from(seed).wrapping_mul(2_654_435_761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

pub fn sha256(data: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .to_vec()
}

/// A TCP server that answers each connection by the first byte: `D` + u32 length: sends that
/// many pattern bytes and closes; `U`: reads to the end and answers the SHA-256 of what it read;
/// `E`: echoes until the end.
pub async fn test_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut cmd = [0u8; 1];
                if s.read_exact(&mut cmd).await.is_err() {
                    return;
                }
                match cmd[0] {
                    b'D' => {
                        let mut len = [0u8; 4];
                        s.read_exact(&mut len).await.unwrap();
                        let data = pattern(u32::from_be_bytes(len) as usize, 7);
                        s.write_all(&data).await.unwrap();
                        s.shutdown().await.unwrap();
                    }
                    b'U' => {
                        let mut all = Vec::new();
                        s.read_to_end(&mut all).await.unwrap();
                        s.write_all(&sha256(&all)).await.unwrap();
                        s.shutdown().await.unwrap();
                    }
                    _ => {
                        let (mut r, mut w) = s.split();
                        let _ = tokio::io::copy(&mut r, &mut w).await;
                    }
                }
            });
        }
    });
    addr
}

/// SOCKS5 CONNECT through `proxy` to `host:port` (a domain name when `host` is not an
/// address); the reply code and, on success, the stream.
pub async fn socks_connect(proxy: SocketAddr, host: &str, port: u16) -> (u8, TcpStream) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel).await.unwrap();
    assert_eq!(sel, [5, 0]);
    let mut req = vec![5, 1, 0];
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(v4)) => {
            req.push(1);
            req.extend_from_slice(&v4.octets());
        }
        Ok(std::net::IpAddr::V6(v6)) => {
            req.push(4);
            req.extend_from_slice(&v6.octets());
        }
        Err(_) => {
            req.push(3);
            req.push(host.len() as u8);
            req.extend_from_slice(host.as_bytes());
        }
    }
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut head = [0u8; 4];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(head[0], 5);
    let rest = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        t => panic!("address type {t} in reply"),
    };
    let mut bound = vec![0u8; rest];
    s.read_exact(&mut bound).await.unwrap();
    (head[1], s)
}

/// Downloads `len` bytes from the test server through the proxy; returns them.
pub async fn download(proxy: SocketAddr, target: SocketAddr, len: u32) -> Vec<u8> {
    let (code, mut s) = socks_connect(proxy, &target.ip().to_string(), target.port()).await;
    assert_eq!(code, 0);
    s.write_all(b"D").await.unwrap();
    s.write_all(&len.to_be_bytes()).await.unwrap();
    let mut got = Vec::with_capacity(len as usize);
    s.read_to_end(&mut got).await.unwrap();
    got
}

/// Uploads `data` to the test server through the proxy; returns the server's SHA-256 of it.
pub async fn upload(proxy: SocketAddr, target: SocketAddr, data: &[u8]) -> Vec<u8> {
    let (code, mut s) = socks_connect(proxy, &target.ip().to_string(), target.port()).await;
    assert_eq!(code, 0);
    s.write_all(b"U").await.unwrap();
    s.write_all(data).await.unwrap();
    s.shutdown().await.unwrap();
    let mut digest = Vec::new();
    s.read_to_end(&mut digest).await.unwrap();
    digest
}

/// A UDP server on 127.0.0.1 that sends every datagram back to its sender (any length).
pub async fn udp_echo() -> SocketAddr {
    let echo = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = echo.recv_from(&mut buf).await {
            let _ = echo.send_to(&buf[..n], from).await;
        }
    });
    addr
}

/// A SOCKS5 UDP association through `proxy`: the control connection (kept open) and the
/// application's socket.
pub struct UdpAssociation {
    _control: TcpStream,
    app: UdpSocket,
    relay: SocketAddr,
}

impl UdpAssociation {
    /// Opens the association (no authentication); panics when refused.
    pub async fn open(proxy: SocketAddr) -> UdpAssociation {
        let mut control = TcpStream::connect(proxy).await.unwrap();
        control.write_all(&[5, 1, 0]).await.unwrap();
        let mut sel = [0u8; 2];
        control.read_exact(&mut sel).await.unwrap();
        control
            .write_all(&[5, 3, 0, 1, 0, 0, 0, 0, 0, 0])
            .await
            .unwrap();
        let mut reply = [0u8; 10];
        control.read_exact(&mut reply).await.unwrap();
        assert_eq!(reply[1], 0, "UDP ASSOCIATE refused");
        let relay = SocketAddr::from((
            [reply[4], reply[5], reply[6], reply[7]],
            u16::from_be_bytes([reply[8], reply[9]]),
        ));
        UdpAssociation {
            _control: control,
            app: UdpSocket::bind("127.0.0.1:0").await.unwrap(),
            relay,
        }
    }

    /// Sends `payload` to the IPv4 `target` and returns the payload of the answer (its SOCKS5
    /// header checked to name `target`). UDP may drop: the datagram is sent up to `tries`
    /// times, 500 ms apart, until answered; `None` when it never was.
    pub async fn ask(&self, target: SocketAddr, payload: &[u8], tries: usize) -> Option<Vec<u8>> {
        let std::net::IpAddr::V4(ip) = target.ip() else {
            panic!("an IPv4 target");
        };
        let mut datagram = vec![0, 0, 0, 1];
        datagram.extend_from_slice(&ip.octets());
        datagram.extend_from_slice(&target.port().to_be_bytes());
        datagram.extend_from_slice(payload);
        let mut buf = vec![0u8; 65_536];
        for _ in 0..tries {
            self.app.send_to(&datagram, self.relay).await.unwrap();
            if let Ok(Ok((n, _))) =
                tokio::time::timeout(Duration::from_millis(500), self.app.recv_from(&mut buf)).await
            {
                assert_eq!(&buf[..4], &[0, 0, 0, 1], "the answer's SOCKS5 header");
                assert_eq!(&buf[4..10], &datagram[4..10], "the answer's source");
                return Some(buf[10..n].to_vec());
            }
        }
        None
    }
}

/// Sends `request` (a request line and headers, without the blank line) to `addr`; the
/// status line, the head and the body of the answer.
pub async fn http(addr: std::net::SocketAddr, request: &str) -> (String, String, String) {
    http_raw(addr, format!("{request}\r\nHost: braid\r\n\r\n").as_bytes()).await
}

/// Sends `bytes` (a whole request) to `addr` and reads until it closes; the status line, the
/// head and the body of the answer.
pub async fn http_raw(addr: std::net::SocketAddr, bytes: &[u8]) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.lines().next().unwrap().to_owned();
    (status, head.to_owned(), body.to_owned())
}
