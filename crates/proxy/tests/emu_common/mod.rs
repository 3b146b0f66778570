//! Shared set-up of the emulator tests: a braid server, the link emulator in front of it and a
//! braid client whose links go through the emulator, all in-process on 127.0.0.1; a tiny
//! HTTP/1.1 server (GET /blob, PUT /upload answering the SHA-256); and curl through the SOCKS5
//! inbound. Every wait is bounded so a hang fails the test instead of blocking CI.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_proxy::config::{
    ClientConfig, EgressPolicy, LinkConfig, ServerConfig, ServerTrust, UserEntry,
};
use braid_proxy::daemon::{ClientHandle, ServerHandle, start_client, start_server};
use braid_proxy::session::Tier;
use braid_proxy::tls::ServerIdentity;
use braid_sched_core::{SchedulerConfig, SchedulerKind};
use braid_testbed::emu::{EmuConfig, EmuHandle, Emulator, PathStats};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

pub const KEY: [u8; 32] = [0x5a; 32];
pub const MB: usize = 1_000_000;

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("braid-emu-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn server_config(dir: &Path) -> ServerConfig {
    ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        metrics_listen: None,
        metrics_token: None,
        metrics_tls: None,
        state_dir: dir.join("server"),
        server_name: "braid".into(),
        users: vec![UserEntry {
            name: "alice".into(),
            key: KEY,
        }],
        scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
        egress: EgressPolicy {
            allow_loopback: true,
            ..EgressPolicy::default()
        },
        max_sessions: 16,
        max_sessions_per_user: braid_proxy::config::DEFAULT_MAX_SESSIONS_PER_USER,
        max_pending_joins: 16,
        session: braid_proxy::config::SessionLimits::default(),
    }
}

pub fn client_config(dir: &Path, fingerprint: &str, links: &[SocketAddr]) -> ClientConfig {
    ClientConfig {
        user: "alice".into(),
        key: KEY,
        trust: ServerTrust::Fingerprint(
            braid_proxy::config::parse_fingerprint(fingerprint).unwrap(),
        ),
        server_name: "braid".into(),
        state_dir: dir.join("client"),
        socks_listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: None,
        metrics_listen: None,
        metrics_token: None,
        metrics_tls: None,
        socks_users: Vec::new(),
        tun: None,
        scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
        links: links
            .iter()
            .enumerate()
            .map(|(i, addr)| LinkConfig {
                name: format!("link{i}"),
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
    }
}

/// An emulator file body: one `[[path]]` per entry of `links` (the link keys), each
/// forwarding to `server`.
pub fn emu_config(server: SocketAddr, links: &[&str]) -> EmuConfig {
    let mut text = String::new();
    for (i, keys) in links.iter().enumerate() {
        text.push_str(&format!(
            "[[path]]\nname = \"link{i}\"\nlisten = \"127.0.0.1:0\"\nforward = \"{server}\"\n{keys}\n"
        ));
    }
    EmuConfig::parse(&text, Path::new("emu-test.toml")).unwrap()
}

/// The two shaped links of config/local: 30 Mbit/s RTT 20 ms, 20 Mbit/s RTT 40 ms.
pub const WIFI: &str = "rate_mbps = 30.0\ndelay_ms = 10.0\nqueue_packets = 300";
pub const LTE: &str = "rate_mbps = 20.0\ndelay_ms = 20.0\nqueue_packets = 300";

/// Server, emulator and client, with every link joined.
pub struct Testbed {
    pub server: ServerHandle,
    pub emu: EmuHandle,
    pub client: ClientHandle,
    pub dir: PathBuf,
}

/// A server with `identity` (and state in `dir`), the emulator with `links` in front of it and
/// a client through them, started and not waited for.
pub async fn start_three(
    dir: &Path,
    identity: ServerIdentity,
    links: &[&str],
) -> (ServerHandle, EmuHandle, ClientHandle) {
    start_three_with(dir, identity, links, |_| {}).await
}

/// As [`start_three`], with the client's configuration changed by `edit` first.
pub async fn start_three_with(
    dir: &Path,
    identity: ServerIdentity,
    links: &[&str],
    edit: impl FnOnce(&mut ClientConfig),
) -> (ServerHandle, EmuHandle, ClientHandle) {
    let server = start_server(server_config(dir), identity).await.unwrap();
    let emu = Emulator::start(&emu_config(server.addr, links))
        .await
        .unwrap();
    let mut config = client_config(dir, &server.fingerprint, &emu.listen_addrs());
    edit(&mut config);
    let client = start_client(config).await.unwrap();
    (server, emu, client)
}

pub async fn testbed(name: &str, links: &[&str]) -> Testbed {
    testbed_with(name, links, |_| {}).await
}

/// As [`testbed`], with the client's configuration changed by `edit` first.
pub async fn testbed_with(
    name: &str,
    links: &[&str],
    edit: impl FnOnce(&mut ClientConfig),
) -> Testbed {
    let dir = temp_dir(name);
    let identity = ServerIdentity::generate("braid").unwrap();
    let (server, emu, client) = start_three_with(&dir, identity, links, edit).await;
    assert!(
        client
            .wait_for_paths(links.len(), Duration::from_secs(15))
            .await,
        "links did not join through the emulator"
    );
    Testbed {
        server,
        emu,
        client,
        dir,
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Deterministic bytes (xorshift), the same for the same `seed`.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

pub fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A tiny HTTP/1.1 server: `GET /blob` answers `blob`; `PUT /upload` (or POST) reads the body
/// (honouring `Expect: 100-continue`) and answers its SHA-256 in hex. One request per
/// connection.
pub async fn http_server(blob: Arc<Vec<u8>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let blob = blob.clone();
            tokio::spawn(async move {
                let _ = serve_one(stream, &blob).await;
            });
        }
    });
    addr
}

async fn serve_one(stream: tokio::net::TcpStream, blob: &[u8]) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    let mut request = String::new();
    stream.read_line(&mut request).await?;
    let mut length = 0usize;
    let mut expect_continue = false;
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await? == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("expect:") && lower.contains("100-continue") {
            expect_continue = true;
        }
    }
    if request.starts_with("GET /blob ") {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
            blob.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(blob).await?;
    } else if request.starts_with("PUT /upload ") || request.starts_with("POST /upload ") {
        if expect_continue {
            stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await?;
        let digest = sha256_hex(&body);
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{digest}",
            digest.len()
        );
        stream.write_all(head.as_bytes()).await?;
    } else {
        stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await?;
    }
    stream.shutdown().await
}

/// curl must be installed (scripts/test.sh installs it); a clear failure otherwise.
pub fn require_curl() {
    let ok = Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "curl is required (scripts/test.sh installs it: apt-get install -y curl)"
    );
}

/// Runs curl through the SOCKS5 inbound with `args`, bounded by `max_s` seconds; returns
/// stdout and the wall time.
pub async fn curl(socks: SocketAddr, args: &[String], max_s: u64) -> (Vec<u8>, Duration) {
    let mut cmd = Command::new("curl");
    cmd.arg("--silent")
        .arg("--show-error")
        .arg("--fail")
        .arg("--max-time")
        .arg(max_s.to_string())
        .arg("--socks5-hostname")
        .arg(socks.to_string())
        .args(args);
    let start = Instant::now();
    // curl's --max-time bounds the run; the outer timeout only guards against curl itself
    // hanging.
    let run = tokio::task::spawn_blocking(move || cmd.output());
    let out = tokio::time::timeout(Duration::from_secs(max_s + 10), run)
        .await
        .expect("curl did not finish in time")
        .unwrap()
        .expect("curl could not run");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "curl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.stdout, took)
}

/// Downloads `/blob` from `http` with curl into a file; its SHA-256 and the time it took.
pub async fn curl_download(
    socks: SocketAddr,
    http: SocketAddr,
    dir: &Path,
    max_s: u64,
) -> (String, Duration) {
    let file = dir.join("download.bin");
    let args = vec![
        "--output".to_string(),
        file.display().to_string(),
        format!("http://{http}/blob"),
    ];
    let (_, took) = curl(socks, &args, max_s).await;
    let data = std::fs::read(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    (sha256_hex(&data), took)
}

/// Bytes each link delivered towards the client (`reverse_dir.sent_bytes`), sampled at an
/// emulator time (seconds).
pub type Samples = Vec<(f64, Vec<u64>)>;

/// As [`curl_download`] through `bed`, sampling every 50 ms what each link delivered towards
/// the client.
pub async fn curl_download_sampled(
    bed: &Testbed,
    http: SocketAddr,
    max_s: u64,
) -> ((String, Duration), Samples) {
    let download = curl_download(bed.client.socks_addr, http, &bed.dir, max_s);
    tokio::pin!(download);
    let mut samples = Vec::new();
    loop {
        tokio::select! {
            done = &mut download => return (done, samples),
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                let delivered = bed.emu.stats().iter().map(|s| s.reverse_dir.sent_bytes).collect();
                samples.push((bed.emu.now().as_secs_f64(), delivered));
            }
        }
    }
}

/// The last sample at or before emulator time `time`.
pub fn sample_at(samples: &Samples, time: f64) -> Option<&(f64, Vec<u64>)> {
    samples.iter().rfind(|(t, _)| *t <= time)
}

/// Uploads `data` to `/upload` with curl (`PUT`); the server's SHA-256 and the time it took.
pub async fn curl_upload(
    socks: SocketAddr,
    http: SocketAddr,
    dir: &Path,
    data: &[u8],
    max_s: u64,
) -> (String, Duration) {
    let file = dir.join("upload.bin");
    std::fs::write(&file, data).unwrap();
    let args = vec![
        "--upload-file".to_string(),
        file.display().to_string(),
        format!("http://{http}/upload"),
    ];
    let (out, took) = curl(socks, &args, max_s).await;
    let _ = std::fs::remove_file(&file);
    (String::from_utf8_lossy(&out).into_owned(), took)
}

/// A SOCKS5 CONNECT (no authentication) to the IPv4 `target` through `socks`: the stream and
/// the 12 bytes answered (method choice, then the reply's first 10 bytes; `reply[3]` is its
/// code), waited for up to 10 s.
pub async fn socks5_connect(
    socks: SocketAddr,
    target: SocketAddr,
) -> (tokio::net::TcpStream, [u8; 12]) {
    let SocketAddr::V4(target) = target else {
        panic!("an IPv4 target, not {target}");
    };
    let mut s = tokio::net::TcpStream::connect(socks).await.unwrap();
    let mut request = vec![5, 1, 0, 5, 1, 0, 1];
    request.extend_from_slice(&target.ip().octets());
    request.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&request).await.unwrap();
    let mut reply = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut reply))
        .await
        .expect("no answer to the SOCKS5 request")
        .unwrap();
    (s, reply)
}

pub fn mbps(bytes: usize, took: Duration) -> f64 {
    bytes as f64 * 8.0 / took.as_secs_f64() / 1e6
}

/// Prints the server's view of each path and the session counters (for diagnosing a slow run).
pub async fn print_session(bed: &Testbed) {
    for session in bed.server.status().await.sessions {
        for p in &session.paths {
            println!(
                "server path {} ({}): {} sent, {} lost, srtt {:.1} ms, cwnd {} B, max datagram {} B",
                p.id,
                p.state,
                p.packets_sent,
                p.packets_lost,
                p.srtt_ms,
                p.cwnd,
                p.max_datagram_size
            );
        }
        println!("server session counters: {:?}", session.counters);
    }
}

/// The server's peer address of every path of its sessions (`(path id, address)`, by id): the
/// address it sends that path's packets to.
pub async fn server_remotes(bed: &Testbed) -> Vec<(u8, String)> {
    let mut remotes: Vec<(u8, String)> = bed
        .server
        .status()
        .await
        .sessions
        .iter()
        .flat_map(|s| s.paths.iter().map(|p| (p.id, p.remote.clone())))
        .collect();
    remotes.sort();
    remotes
}

/// Prints every path's emulator counters and the session's status; returns the counters.
pub async fn print_counters(bed: &Testbed) -> Vec<PathStats> {
    let stats = bed.emu.stats();
    for s in &stats {
        println!("{s}");
    }
    print_session(bed).await;
    stats
}
