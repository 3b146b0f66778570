//! The daemons end to end on 127.0.0.1: a server and a client with two links, traffic through
//! the SOCKS5 and HTTP CONNECT inbounds, UDP ASSOCIATE, a link dropped mid-transfer, status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod daemon_common;
mod restart_common;

use std::time::Duration;

use braid_proxy::transport::flow::FlowMsg;
use daemon_common::*;
use restart_common::{endless_origin, read_until_end, start_server_again};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MB: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks5_50mb_download_and_upload_match_sha256() {
    let (server, client) = pair("transfer", 2).await;
    let target = test_server().await;
    let work = async {
        let got = download(client.socks_addr, target, (50 * MB) as u32).await;
        assert_eq!(got.len(), 50 * MB);
        assert_eq!(sha256(&got), sha256(&pattern(50 * MB, 7)));
        let data = pattern(50 * MB, 3);
        assert_eq!(
            upload(client.socks_addr, target, &data).await,
            sha256(&data)
        );
    };
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .unwrap();
    let status = client.status().await;
    let session = &status.sessions[0];
    assert_eq!(session.paths.len(), 2);
    assert!(session.counters.bytes_written >= 50 * MB as u64);
    assert_eq!(session.congestion, "cubic");
    assert!(session.paths.iter().all(|p| p.bbr.is_none()));
    let server_status = server.status().await;
    assert_eq!(server_status.sessions.len(), 1);
    assert_eq!(server_status.joins_accepted, 2);
}

/// `[session] congestion = "bbr"` on both daemons: their paths run BBR (a pacing rate of its
/// own, see docs/congestion.md), data crosses whole both ways, and the status says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bbr_sessions_move_data_both_ways_and_the_status_names_the_controller() {
    let limits = braid_proxy::config::SessionLimits {
        congestion: braid_proxy::session::congestion::CongestionAlgorithm::Bbr,
        ..Default::default()
    };
    let (server, client) = pair_with("bbr", 2, limits).await;
    twenty_mb_down_and_up(&client).await;
    for status in [client.status().await, server.status().await] {
        let session = &status.sessions[0];
        assert_eq!(session.congestion, "bbr", "{status:?}");
        assert_eq!(session.paths.len(), 2);
        // Each path shows BBR's model, measured from the transfers both ways.
        for p in &session.paths {
            let bbr = p.bbr.as_ref().expect("a BBR path shows its model");
            assert!(
                ["Startup", "Drain", "ProbeBw", "ProbeRtt"].contains(&bbr.mode.as_str()),
                "{bbr:?}"
            );
            assert!(bbr.btl_bw_mbps > 0.0 && bbr.rt_prop_ms.is_some(), "{bbr:?}");
        }
        assert!(
            status.to_table().contains("      bbr "),
            "{}",
            status.to_table()
        );
    }
}

/// 20 MB downloaded and 20 MB uploaded through the client's SOCKS5 port, checked whole.
async fn twenty_mb_down_and_up(client: &braid_proxy::daemon::ClientHandle) {
    let target = test_server().await;
    let work = async {
        let started = std::time::Instant::now();
        let got = download(client.socks_addr, target, (20 * MB) as u32).await;
        assert_eq!(sha256(&got), sha256(&pattern(20 * MB, 7)));
        let data = pattern(20 * MB, 3);
        assert_eq!(
            upload(client.socks_addr, target, &data).await,
            sha256(&data)
        );
        println!("20 MB down and 20 MB up in {:?}", started.elapsed());
    };
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .unwrap();
}

/// `[session] congestion = "olia"` on both daemons: coupled windows over both paths, data
/// crosses whole both ways over both of them, and the status names the controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn olia_sessions_move_data_both_ways_over_every_path() {
    let limits = braid_proxy::config::SessionLimits {
        congestion: braid_proxy::session::congestion::CongestionAlgorithm::Olia,
        ..Default::default()
    };
    let (server, client) = pair_with("olia", 2, limits).await;
    twenty_mb_down_and_up(&client).await;
    // A path's coupling is the one its last ACK saw: one taken while the other path was briefly
    // failed (a starved test machine) counts one path until the next ACK, a heartbeat's at the
    // latest, so the statuses are read again for up to 3 s until both count two.
    let both_coupled = |s: &braid_proxy::transport::status::DaemonStatus| {
        s.sessions[0]
            .paths
            .iter()
            .all(|p| p.coupled.as_ref().is_some_and(|c| c.paths == 2))
    };
    let mut statuses = [client.status().await, server.status().await];
    for _ in 0..30 {
        if statuses.iter().all(both_coupled) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        statuses = [client.status().await, server.status().await];
    }
    for status in statuses {
        let session = &status.sessions[0];
        assert_eq!(session.congestion, "olia", "{status:?}");
        assert_eq!(session.paths.len(), 2);
        for p in &session.paths {
            // 20 MB is some 17,000 packets each way: both paths carried a share.
            assert!(p.packets_sent > 500, "{p:?}");
            assert!(p.cwnd >= 2_400 && p.bbr.is_none(), "{p:?}");
            // Each path's controller was coupled with the other's.
            let coupled = p.coupled.as_ref().expect("an OLIA path shows its coupling");
            assert_eq!((coupled.kind.as_str(), coupled.paths), ("olia", 2), "{p:?}");
            assert!(
                coupled.loss_interval_bytes > 0 && coupled.alpha.abs() <= 0.5,
                "{p:?}"
            );
        }
        let table = status.to_table();
        assert!(table.contains("      olia: alpha "), "{table}");
    }
}

/// The value of the first sample of `name` whose labels contain every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(series, _)| {
            series.split('{').next() == Some(name) && labels.iter().all(|l| series.contains(l))
        })
        .unwrap_or_else(|| panic!("no {name} {labels:?} in\n{text}"))
        .1
        .parse()
        .unwrap()
}

/// `metrics_listen` on both daemons: `GET /metrics` answers their status in the Prometheus
/// text format (the paths' counters grow with the traffic), `HEAD` the same head, and other
/// requests 404, 405 or 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoints_serve_the_status_as_prometheus_text() {
    let (server, client) = pair("metrics", 2).await;
    let target = test_server().await;
    let got = download(client.socks_addr, target, (4 * MB) as u32).await;
    assert_eq!(sha256(&got), sha256(&pattern(4 * MB, 7)));
    let (client_addr, server_addr) = (client.metrics_addr.unwrap(), server.metrics_addr.unwrap());
    let (status, head, text) = http(client_addr, "GET /metrics HTTP/1.1").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert_eq!(sample(&text, "braid_info", &["role=\"client\""]), 1.0);
    assert_eq!(sample(&text, "braid_sessions", &[]), 1.0);
    for path in ["path=\"0\"", "path=\"1\""] {
        assert_eq!(sample(&text, "braid_path_up", &[path]), 1.0);
        assert_eq!(sample(&text, "braid_link_joined", &[path]), 1.0);
        assert!(sample(&text, "braid_path_srtt_seconds", &[path]) > 0.0);
    }
    let received: f64 = ["0", "1"]
        .iter()
        .map(|p| {
            let label = format!("path=\"{p}\"");
            sample(&text, "braid_path_packets_received_total", &[&label])
        })
        .sum();
    // 4 MiB came down in packets of at most 1,452 bytes (the largest path MTU on loopback):
    // at least 2,889 of them.
    assert!(received >= 2_889.0, "{received}\n{text}");
    assert!(sample(&text, "braid_session_read_bytes_total", &["user=\"alice\""]) >= 4e6);
    assert_eq!(
        sample(
            &text,
            "braid_inbound_connections_total",
            &["inbound=\"socks5\""]
        ),
        1.0
    );
    let (_, _, text) = http(server_addr, "GET /metrics HTTP/1.0").await;
    assert_eq!(sample(&text, "braid_info", &["role=\"server\""]), 1.0);
    assert_eq!(sample(&text, "braid_joins_accepted_total", &[]), 2.0);
    assert!(sample(&text, "braid_session_written_bytes_total", &[]) >= 4e6);
    // The session's tables at least (the download's flow may be gone, and its buffers with it).
    assert!(sample(&text, "braid_session_memory_bytes", &[]) > 0.0);
    // The process (the test binary, which runs both daemons).
    assert!(sample(&text, "process_resident_memory_bytes", &[]) > 1e6);
    assert!(sample(&text, "process_open_fds", &[]) >= 3.0);
    assert!(sample(&text, "process_cpu_seconds_total", &[]) > 0.0);
    // HEAD: the same head, no body.
    let (status, head, body) = http(server_addr, "HEAD /metrics HTTP/1.1").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.contains("Content-Length: ") && body.is_empty(),
        "{head}"
    );
    for (request, answer) in [
        ("GET / HTTP/1.1", "HTTP/1.1 404 Not Found"),
        ("POST /metrics HTTP/1.1", "HTTP/1.1 405 Method Not Allowed"),
        ("hello", "HTTP/1.1 400 Bad Request"),
    ] {
        assert_eq!(http(client_addr, request).await.0, answer, "{request}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domain_names_are_resolved_at_the_server() {
    let (_server, client) = pair("domain", 2).await;
    let target = test_server().await;
    let (code, mut s) = socks_connect(client.socks_addr, "localhost", target.port()).await;
    assert_eq!(code, 0);
    s.write_all(b"Ehello braid").await.unwrap();
    let mut back = [0u8; 11];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"hello braid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connect_tunnel() {
    let (_server, client) = pair("http", 2).await;
    let target = test_server().await;
    let mut s = TcpStream::connect(client.http_addr.unwrap()).await.unwrap();
    let head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut reply = vec![0u8; b"HTTP/1.1 200 Connection Established\r\n\r\n".len()];
    s.read_exact(&mut reply).await.unwrap();
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    s.write_all(b"Eping").await.unwrap();
    let mut back = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"ping");
    let first = s;
    let status = client.status().await;
    let inbound = status.inbounds.iter().find(|i| i.name == "http").unwrap();
    assert_eq!((inbound.open, inbound.accepted), (1, 1), "{inbound:?}");
    // A refused port answers 502.
    let (status, _, _) = http(client.http_addr.unwrap(), "CONNECT 127.0.0.1:1 HTTP/1.1").await;
    assert_eq!(status, "HTTP/1.1 502 Bad Gateway");
    // The status counts both connections, the refused one as failed, and the first as open
    // until it ends.
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let http = loop {
        let status = client.status().await;
        let http = status
            .inbounds
            .iter()
            .find(|i| i.name == "http")
            .unwrap()
            .clone();
        if http.open == 0 || tokio::time::Instant::now() > deadline {
            break http;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        (
            http.open,
            http.accepted,
            http.refused,
            http.failed,
            http.limit
        ),
        (0, 2, 0, 1, 1024),
        "{http:?}"
    );
    assert_eq!(http.listen, client.http_addr.unwrap().to_string());
}

/// An origin server that answers each request with its head (through the blank line) and then
/// `Content-Length` bytes of body, as its body, and closes.
/// An HTTP/1.1 origin server that keeps its connections (counted in the second value) and
/// answers by path: `/echo…` the request's head and body; `/len/N` N bytes (HEAD: the head
/// alone, `Content-Length: 500`); `/chunked` a chunked body with a trailer; `/close` a body
/// delimited by its close; `/quiet-close` an answer, then the connection closed unannounced;
/// `/drop-next` an answer, then the connection closed at the next request, unanswered;
/// `/split-head` an answer whose head's blank line comes in two writes; `/hang` no answer at
/// all.
async fn keep_alive_origin() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut drop_next = false;
                loop {
                    let Some(head_end) = read_until(&mut s, &mut got, b"\r\n\r\n").await else {
                        return;
                    };
                    if drop_next {
                        return;
                    }
                    let head = String::from_utf8(got[..head_end].to_vec()).unwrap();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    let body_end = match head.contains("Transfer-Encoding: chunked") {
                        true => read_until(&mut s, &mut got, b"0\r\n\r\n").await.unwrap(),
                        false => {
                            while got.len() < head_end + length {
                                let n = s.read_buf(&mut got).await.unwrap();
                                assert!(n > 0, "closed mid-body");
                            }
                            head_end + length
                        }
                    };
                    let request: Vec<u8> = got.drain(..body_end).collect();
                    let path = head.split(' ').nth(1).unwrap().to_owned();
                    let answer = match path.as_str() {
                        _ if head.starts_with("HEAD ") => {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n".to_vec()
                        }
                        p if p.starts_with("/echo") => {
                            let mut a = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                                request.len()
                            )
                            .into_bytes();
                            a.extend_from_slice(&request);
                            a
                        }
                        "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                            5\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
                            .to_vec(),
                        "/close" => b"HTTP/1.1 200 OK\r\n\r\nuntil close".to_vec(),
                        "/hang" => {
                            // No answer; gone once the other end has closed.
                            let _ = s.read_buf(&mut got).await;
                            return;
                        }
                        "/quiet-close" | "/drop-next" => {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
                        }
                        "/split-head" => {
                            // The blank line split across two writes, 50 ms apart.
                            let first = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r";
                            s.write_all(first).await.unwrap();
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            b"\nok".to_vec()
                        }
                        p => {
                            let n: usize = p.strip_prefix("/len/").unwrap().parse().unwrap();
                            let mut a = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n")
                                .into_bytes();
                            a.resize(a.len() + n, b'a');
                            a
                        }
                    };
                    s.write_all(&answer).await.unwrap();
                    match path.as_str() {
                        "/close" | "/quiet-close" => {
                            let _ = s.shutdown().await;
                            return;
                        }
                        "/drop-next" => drop_next = true,
                        _ => {}
                    }
                }
            });
        }
    });
    (addr, connections)
}

/// Reads into `got` until it holds `end`: the index just past it; `None` if the peer closed
/// first.
async fn read_until(s: &mut TcpStream, got: &mut Vec<u8>, end: &[u8]) -> Option<usize> {
    loop {
        if let Some(i) = got.windows(end.len()).position(|w| w == end) {
            return Some(i + end.len());
        }
        if s.read_buf(got).await.ok()? == 0 {
            return None;
        }
    }
}

/// One client connection to the HTTP inbound, request after request: each answer's head and
/// body, read by its framing (the bodies `keep_alive_origin` sends).
struct KeptConnection {
    stream: TcpStream,
    got: Vec<u8>,
}

impl KeptConnection {
    async fn open(proxy: std::net::SocketAddr) -> Self {
        let stream = TcpStream::connect(proxy).await.unwrap();
        KeptConnection {
            stream,
            got: Vec::new(),
        }
    }

    async fn ask(&mut self, request: &[u8]) -> (String, Vec<u8>) {
        self.stream.write_all(request).await.unwrap();
        let work = async {
            let head_end = read_until(&mut self.stream, &mut self.got, b"\r\n\r\n")
                .await
                .expect("the connection closed before an answer");
            let head = String::from_utf8(self.got.drain(..head_end).collect()).unwrap();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .map(|v| v.trim().parse::<usize>().unwrap());
            let body_end = if request.starts_with(b"HEAD ") {
                0
            } else if head.contains("Transfer-Encoding: chunked") {
                read_until(
                    &mut self.stream,
                    &mut self.got,
                    b"0\r\nX-Trailer: t\r\n\r\n",
                )
                .await
                .unwrap()
            } else if let Some(length) = length {
                while self.got.len() < length {
                    assert!(self.stream.read_buf(&mut self.got).await.unwrap() > 0);
                }
                length
            } else {
                self.stream.read_to_end(&mut self.got).await.unwrap();
                self.got.len()
            };
            (head, self.got.drain(..body_end).collect())
        };
        tokio::time::timeout(Duration::from_secs(10), work)
            .await
            .expect("an answer within 10 s")
    }

    async fn ask_get(&mut self, url: &str) -> (String, Vec<u8>) {
        self.ask(format!("GET {url} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes())
            .await
    }
}

/// Plain requests to the HTTP inbound whose target is an absolute `http://` URL (what `curl -x`
/// and `http_proxy=` send for `http://` URLs) reach the URL's server with their heads
/// rewritten: the target in origin form, `Host` from the URL, the proxy's and hop-by-hop
/// headers left out; bodies follow, and answers come back whole. One client connection carries
/// request after request, and one flow (one connection of the origin server's) carries those to
/// one server: bodies of every framing, HEAD, a switch to another server and back, a kept
/// connection the server closes, unannounced or at the next request (a GET is sent again, a
/// POST answered 502); a body delimited by its close ends the client's connection too. A head
/// of 40 KB goes on, one past 64 KiB is answered 431. A request meant for a server (origin
/// form) is answered 400, one whose body's length is stated two ways 400, an unreachable server
/// 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_requests_are_forwarded_to_the_url_s_server() {
    use std::sync::atomic::Ordering;
    let (_server, client) = pair("http-forward", 2).await;
    let (origin, connections) = keep_alive_origin().await;
    let (other, other_connections) = keep_alive_origin().await;
    let proxy = client.http_addr.unwrap();
    let mut conn = KeptConnection::open(proxy).await;
    let body = "x".repeat(100_000);
    let request = format!(
        "POST http://{origin}/echo?n=1 HTTP/1.1\r\nHost: wrong.example\r\n\
         Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (head, echoed) = conn.ask(request.as_bytes()).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.ends_with("Via: 1.1 braid\r\nConnection: keep-alive\r\n\r\n"),
        "{head}"
    );
    assert_eq!(
        String::from_utf8(echoed).unwrap(),
        format!(
            "POST /echo?n=1 HTTP/1.1\r\nHost: {origin}\r\nContent-Length: {}\r\n\
             Via: 1.1 braid\r\nConnection: keep-alive\r\n\r\n{body}",
            body.len()
        )
    );
    // A head of 40 KB of cookies (refused at 8 KiB until 25 Nov 2026) goes on whole; its blank
    // line split across two reads, at each place it may be split, is still found.
    let cookie = "c".repeat(40_000);
    for (split, end) in [
        (3, "\r\n\r\n"),
        (2, "\r\n\r\n"),
        (1, "\r\n\r\n"),
        (1, "\n\n"),
    ] {
        let request = format!("GET http://{origin}/echo HTTP/1.1\r\nCookie: {cookie}{end}");
        let (first, rest) = request.as_bytes().split_at(request.len() - split);
        conn.stream.write_all(first).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (head, echoed) = conn.ask(rest).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        let echoed = String::from_utf8(echoed).unwrap();
        assert!(
            echoed.starts_with("GET /echo HTTP/1.1\r\n")
                && echoed.contains(&format!("\r\nCookie: {cookie}\r\n")),
            "split {split} of {end:?}: {}",
            &echoed[..100]
        );
    }
    let (head, got) = conn.ask_get(&format!("http://{origin}/split-head")).await;
    assert!(
        head.starts_with("HTTP/1.1 200 OK\r\n") && got == b"ok",
        "{head}"
    );
    let (_, got) = conn.ask_get(&format!("http://{origin}/len/1000")).await;
    assert_eq!(got, vec![b'a'; 1000]);
    let head_request = format!("HEAD http://{origin}/len/1000 HTTP/1.1\r\nHost: h\r\n\r\n");
    let (head, got) = conn.ask(head_request.as_bytes()).await;
    assert!(
        head.contains("Content-Length: 500\r\n") && got.is_empty(),
        "{head}"
    );
    let chunked = format!(
        "POST http://{origin}/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
         3\r\nabc\r\n0\r\n\r\n"
    );
    let (_, echoed) = conn.ask(chunked.as_bytes()).await;
    assert!(
        echoed.ends_with(
            b"Transfer-Encoding: chunked\r\nVia: 1.1 braid\r\nConnection: keep-alive\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        ),
        "{}",
        String::from_utf8_lossy(&echoed)
    );
    let (head, got) = conn.ask_get(&format!("http://{origin}/chunked")).await;
    assert!(head.contains("Transfer-Encoding: chunked\r\n"), "{head}");
    assert_eq!(
        got,
        b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
    );
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "one origin connection"
    );
    // Another server, and back: a new flow each time.
    let (_, got) = conn.ask_get(&format!("http://{other}/len/10")).await;
    assert_eq!(got.len(), 10);
    let (_, got) = conn.ask_get(&format!("http://{origin}/len/10")).await;
    assert_eq!(got.len(), 10);
    assert_eq!(other_connections.load(Ordering::SeqCst), 1);
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    // The kept connection closed as the next request reaches it: sent again on a new one.
    conn.ask_get(&format!("http://{origin}/drop-next")).await;
    let (_, got) = conn.ask_get(&format!("http://{origin}/len/7")).await;
    assert_eq!(got.len(), 7);
    assert_eq!(connections.load(Ordering::SeqCst), 3);
    // The same for a POST: not sent again (it might have been applied), answered 502.
    conn.ask_get(&format!("http://{origin}/drop-next")).await;
    let post = format!("POST http://{origin}/len/7 HTTP/1.1\r\nHost: h\r\n\r\n");
    let (head, _) = conn.ask(post.as_bytes()).await;
    assert!(head.starts_with("HTTP/1.1 502 "), "{head}");
    let mut conn = KeptConnection::open(proxy).await;
    // Closed by the server between requests: the next one goes on a new connection.
    conn.ask_get(&format!("http://{origin}/quiet-close")).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, got) = conn.ask_get(&format!("http://{origin}/len/5")).await;
    assert_eq!(got.len(), 5);
    assert_eq!(connections.load(Ordering::SeqCst), 5);
    // A body that ends with the server's close ends the client's connection.
    let (head, got) = conn.ask_get(&format!("http://{origin}/close")).await;
    assert!(head.ends_with("Connection: close\r\n\r\n"), "{head}");
    assert_eq!(got, b"until close");
    // An HTTP/1.0 client that does not ask to keep its connection: closed after the answer.
    let (status, head, got) = http(proxy, &format!("GET http://{origin}/len/3 HTTP/1.0")).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.ends_with("Connection: close") && got == "aaa",
        "{head}"
    );
    // Nineteen answered, twelve of them over a kept flow (the second to tenth, the two
    // `/drop-next` and `/close`).
    let inbounds = client.status().await.inbounds;
    let http_inbound = inbounds.iter().find(|i| i.name == "http").unwrap();
    assert_eq!(
        (http_inbound.forwarded, http_inbound.forwarded_kept),
        (19, 12)
    );
    // A client that gives up on a server that does not answer: its close reaches the server,
    // which lets go, and the connection ends.
    let mut gone = TcpStream::connect(proxy).await.unwrap();
    let hang = format!("GET http://{origin}/hang HTTP/1.1\r\nHost: h\r\n\r\n");
    gone.write_all(hang.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(gone);
    let open = async {
        loop {
            let inbounds = client.status().await.inbounds;
            if inbounds.iter().all(|i| i.open == 0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), open)
        .await
        .expect("the connection of a client that left ends");
    // A head that has not ended within 64 KiB: 431.
    let mut long = format!("GET http://{origin}/len/1 HTTP/1.1\r\nCookie: ").into_bytes();
    long.resize(64 * 1024, b'c');
    let (status, _, _) = http_raw(proxy, &long).await;
    assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");
    let (status, _, _) = http(proxy, "GET /index.html HTTP/1.1").await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    let smuggle = format!(
        "POST http://{origin}/echo HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let (status, _, _) = http_raw(proxy, smuggle.as_bytes()).await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    // A destination the server cannot reach: 502.
    let (status, _, _) = http(proxy, "GET http://127.0.0.1:1/ HTTP/1.1").await;
    assert_eq!(status, "HTTP/1.1 502 Bad Gateway");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_associate_echo() {
    let (_server, client) = pair("udp", 2).await;
    let echo = udp_echo().await;
    let association = UdpAssociation::open(client.socks_addr).await;
    let answer = association.ask(echo, b"marco", 20).await;
    assert_eq!(answer.as_deref(), Some(&b"marco"[..]), "no UDP answer");
    // A QUIC packet's size (1,300 bytes, 1,310 with the header), whole once the paths' MTU
    // discovery has grown them past what they join with, in DATAGRAM_FRAGMENT pieces before;
    // and WireGuard's size at its default MTU (1,452 bytes, 1,462 with the header), longer than
    // any path carries whole: in pieces both ways. The default limit, 1,472 bytes, goes too.
    for len in [1300u32, 1452, 1472] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
        let answer = association.ask(echo, &payload, 20).await;
        let answer = answer.unwrap_or_else(|| panic!("no answer to a {len}-byte datagram"));
        assert!(answer == payload, "the {len}-byte datagram came back whole");
    }
    // The limit holds for the longest SOCKS5 header of an address (IPv6, 22 bytes): to an IPv4
    // address (10 bytes) 1,484 bytes go, and one byte more is dropped at the client and counted.
    let answer = association.ask(echo, &[7; 1484], 20).await;
    assert_eq!(answer.map(|a| a.len()), Some(1484));
    let before = client.status().await.sessions[0].counters.datagrams_dropped;
    assert_eq!(association.ask(echo, &[7; 1485], 2).await, None);
    let after = client.status().await.sessions[0].counters.datagrams_dropped;
    assert_eq!(after - before, 2, "both tries dropped and counted");
}

/// Flows to the client's `[session] redundant_ports` go on every link both ways: the client
/// marks the flow in its OPEN, both sessions count it redundant, and each end sent the
/// association's datagrams on both paths (the second path carries nothing else but a heartbeat
/// a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_to_redundant_ports_go_on_every_link_both_ways() {
    let echo = udp_echo().await;
    let mut ports = braid_proxy::config::SessionLimits::default();
    ports.redundant.ports =
        braid_proxy::session::PortSet::new([(echo.port(), echo.port())]).unwrap();
    let (server, client) = pair_with_each("redundant-ports", 2, Default::default(), ports).await;
    let sent = |status| path_fields(status, |p| (p.id, p.packets_sent));
    let before = (sent(client.status().await), sent(server.status().await));
    let association = UdpAssociation::open(client.socks_addr).await;
    for i in 0..100u8 {
        let answer = association.ask(echo, &[i; 100], 20).await;
        assert_eq!(answer.as_deref(), Some(&[i; 100][..]), "datagram {i}");
    }
    let after = (sent(client.status().await), sent(server.status().await));
    for (end, b, a) in [
        ("client", &before.0, &after.0),
        ("server", &before.1, &after.1),
    ] {
        for path in 0..2 {
            assert!(
                a[path].1 - b[path].1 >= 100,
                "{end} path {path}: {} packets sent during 100 datagrams each way",
                a[path].1 - b[path].1
            );
        }
    }
    assert_eq!(
        client.status().await.sessions[0].counters.flows_redundant,
        1
    );
    let status = server.status().await;
    assert_eq!(status.sessions[0].counters.flows_redundant, 1, "{status:?}");
    assert!(
        status.to_table().contains("(1 redundant)"),
        "{}",
        status.to_table()
    );
}

/// A reload of `[session] redundant_ports` reaches the running session, on either daemon: the
/// client's marks an association already open at its next datagram to the port (and tells the
/// server), the server's marks a new association to its port; neither needs a restart. So does
/// one of `redundant_max_mbps`: at 0 the marked association's datagrams go once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_running_session_s_redundant_ports() {
    use braid_proxy::session::PortSet;
    let name = "redundant-reload";
    let (server, client) = pair(name, 2).await;
    let redundant =
        |s: braid_proxy::transport::DaemonStatus| s.sessions[0].counters.flows_redundant;
    let (echo, other_echo) = (udp_echo().await, udp_echo().await);
    let association = UdpAssociation::open(client.socks_addr).await;
    assert!(association.ask(echo, b"a", 20).await.is_some());
    assert_eq!(redundant(client.status().await), 0);
    let mut config = client_config(name, &server, 2, KEY);
    config.session.redundant.ports = PortSet::new([(echo.port(), echo.port())]).unwrap();
    let done = client.reload(config.clone()).await;
    assert!(
        done.changed.contains(&"session.redundant_ports"),
        "{done:?}"
    );
    assert!(!done.needs_restart.contains(&"session"), "{done:?}");
    assert!(association.ask(echo, b"b", 20).await.is_some());
    assert_eq!(redundant(client.status().await), 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while redundant(server.status().await) != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server was not told"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The rate bound: none of the flow's packets went once under the default; at 0, each does.
    let capped = |s: braid_proxy::transport::DaemonStatus| s.sessions[0].counters.redundant_capped;
    assert_eq!(capped(client.status().await), 0);
    config.session.redundant.max_rate = Some(0);
    let done = client.reload(config).await;
    assert_eq!(done.changed, ["session.redundant_max_mbps"], "{done:?}");
    assert!(association.ask(echo, b"d", 20).await.is_some());
    let status = client.status().await;
    assert!(capped(status.clone()) > 0);
    assert_eq!(redundant(status.clone()), 1, "still marked");
    let table = status.to_table();
    assert!(
        table.contains("(1 redundant; ") && table.contains("sent once over the rate bound"),
        "{table}"
    );
    let mut config = server_config(name, true);
    config.session.redundant.ports =
        PortSet::new([(other_echo.port(), other_echo.port())]).unwrap();
    let done = server.reload(config).await;
    assert!(
        done.changed.contains(&"session.redundant_ports"),
        "{done:?}"
    );
    assert!(!done.needs_restart.contains(&"session"), "{done:?}");
    let second = UdpAssociation::open(client.socks_addr).await;
    assert!(second.ask(other_echo, b"c", 20).await.is_some());
    assert_eq!(redundant(server.status().await), 2);
    assert_eq!(
        redundant(client.status().await),
        1,
        "the server's ports are its own"
    );
}

/// `[session] max_udp_payload` at its largest on both daemons: a datagram of that length
/// crosses both ways in eight pieces, or seven once the paths have grown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_payloads_up_to_the_configured_limit_cross() {
    let longest = *braid_proxy::config::MAX_UDP_PAYLOAD.end();
    let limits = braid_proxy::config::SessionLimits {
        max_udp_payload: longest,
        ..Default::default()
    };
    let (_server, client) = pair_with("udp-long", 2, limits).await;
    let echo = udp_echo().await;
    let association = UdpAssociation::open(client.socks_addr).await;
    for len in [4_096usize, longest] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let answer = association.ask(echo, &payload, 20).await;
        let answer = answer.unwrap_or_else(|| panic!("no answer to a {len}-byte datagram"));
        assert!(answer == payload, "the {len}-byte datagram came back whole");
    }
    let status = client.status().await;
    // Cut by the client on the way up, put back together by it on the way down.
    assert!(status.sessions[0].counters.datagrams_split >= 2);
    assert!(status.sessions[0].counters.datagrams_reassembled >= 2);
}

/// The client's file allows UDP payloads of 8,922 bytes, the server's the default 1,472: the
/// server says so (DATAGRAM_LIMIT), and the client drops a 4,000-byte datagram itself and counts
/// it, instead of sending pieces that the server would drop without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_sends_no_datagram_longer_than_the_server_takes() {
    let longest = braid_proxy::config::SessionLimits {
        max_udp_payload: *braid_proxy::config::MAX_UDP_PAYLOAD.end(),
        ..Default::default()
    };
    let (server, client) = pair_with_each("udp-limit", 1, Default::default(), longest).await;
    let echo = udp_echo().await;
    let association = UdpAssociation::open(client.socks_addr).await;
    let short: Vec<u8> = (0..1_000).map(|i| i as u8).collect();
    assert_eq!(association.ask(echo, &short, 20).await, Some(short));
    let long: Vec<u8> = (0..4_000).map(|i| i as u8).collect();
    assert_eq!(association.ask(echo, &long, 2).await, None);
    let counters = client.status().await.sessions[0].counters.clone();
    assert!(counters.datagrams_dropped >= 1, "{counters:?}");
    assert_eq!(
        counters.datagrams_split, 0,
        "pieces sent for nothing: {counters:?}"
    );
    let on_server = server.status().await.sessions[0].counters.clone();
    assert_eq!(on_server.datagrams_reassembled, 0, "{on_server:?}");
}

/// The client's file sets `[session] backup_below_mbps`, the server's leaves it out: the client
/// tells the server (BACKUP_FLOOR), whose session then applies the client's floor to what it
/// sends, and both statuses say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_s_floor_for_backups_governs_the_server_s_session_too() {
    let floor = braid_proxy::config::SessionLimits {
        backup_below: Some(1_000_000),
        ..Default::default()
    };
    let (server, client) = pair_with_each("backup-floor", 1, Default::default(), floor).await;
    assert_eq!(client.status().await.sessions[0].backup_below_mbps, 8.0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        let status = server.status().await;
        if status.sessions.first().map(|s| s.backup_below_mbps) == Some(8.0) {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never took the client's floor: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let table = status.to_table();
    assert!(table.contains("backups help below 8.0 Mb/s"), "{table}");
}

/// A link's own congestion controller (`[[link]] congestion`) runs on both ends of its path:
/// the client's at once, the server's once the client said so; a reload takes it back in place
/// (the path keeps its connection) and the server's path follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_s_own_congestion_controller_runs_on_both_ends_of_its_path() {
    use braid_proxy::session::congestion::CongestionAlgorithm;
    let name = "link-congestion";
    let server = loopback_server(name).await;
    let mut config = client_config(name, &server, 2, KEY);
    config.links[1].congestion = Some(CongestionAlgorithm::Bbr);
    let client = braid_proxy::daemon::start_client(config.clone())
        .await
        .unwrap();
    assert!(client.wait_for_paths(2, Duration::from_secs(10)).await);
    // Each path's controller by id.
    fn controllers(status: braid_proxy::transport::DaemonStatus) -> Vec<(u8, String)> {
        path_fields(status, |p| (p.id, p.congestion.clone()))
    }
    async fn wait_for(server: &braid_proxy::daemon::ServerHandle, want: &[(u8, &str)]) {
        let want: Vec<(u8, String)> = want.iter().map(|&(i, c)| (i, c.to_owned())).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = controllers(server.status().await);
            if got == want {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "server paths {got:?}, want {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let want = [(0, "cubic"), (1, "bbr")];
    wait_for(&server, &want).await;
    let status = client.status().await;
    assert_eq!(
        controllers(status.clone()),
        want.map(|(i, c)| (i, c.to_owned()))
    );
    assert_eq!(status.sessions[0].congestion, "cubic");
    let table = status.to_table();
    assert!(table.contains("congestion bbr (the link's own)"), "{table}");
    let table = server.status().await.to_table();
    assert!(table.contains("congestion bbr (the link's own)"), "{table}");
    let remote = |s: braid_proxy::transport::DaemonStatus| {
        s.sessions[0]
            .paths
            .iter()
            .find(|p| p.id == 1)
            .map(|p| p.remote.clone())
    };
    let before = remote(server.status().await);
    // Taken back by a reload: in place, and the server's path runs its own again.
    config.links[1].congestion = None;
    assert_eq!(client.reload(config).await.links.updated, ["link1"]);
    wait_for(&server, &[(0, "cubic"), (1, "cubic")]).await;
    assert_eq!(remote(server.status().await), before, "kept its connection");
}

/// A flow whose peer's FIN comes alone, after its last bytes were read and after this side's
/// own FIN was acknowledged: the session forgets the flow as that FIN arrives (both directions
/// are over), before the reader was handed the end. The reader must still get `Finished` (it
/// once got nothing: its channel closed, which every reader takes for a lost session, and the
/// TUN inbound answered the application with a reset instead of the answer it had).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fin_that_comes_alone_after_both_sides_are_over_still_ends_the_flow() {
    let (_server, client) = pair("late-fin", 1).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        s.read_to_end(&mut request).await.unwrap();
        s.write_all(&sha256(&request)).await.unwrap();
        // Time for the answer to be read and for the request's FIN to be acknowledged.
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.shutdown().await.unwrap();
    });
    let session = client.session().expect("the client has a session");
    let flow = session
        .open(
            braid_proxy::session::FlowKind::Stream,
            braid_proxy::session::Target::Addr(target),
        )
        .await
        .unwrap();
    let (writer, mut reader) = flow.split();
    writer
        .write(bytes::Bytes::from_static(b"request"))
        .await
        .unwrap();
    writer.finish().await.unwrap();
    let mut answer = Vec::new();
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match reader.recv().await {
                Some(FlowMsg::Data(d)) => answer.extend_from_slice(&d),
                other => return other,
            }
        }
    })
    .await
    .expect("the flow ended");
    // The server's connected mark (a zero byte), then the answer.
    assert_eq!(answer.split_first(), Some((&0, &sha256(b"request")[..])));
    assert_eq!(
        end,
        Some(FlowMsg::Finished),
        "the reader was handed the end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_survives_a_dropped_link_which_rejoins() {
    let (_server, client) = pair("drop", 2).await;
    let target = test_server().await;
    let len = 24 * MB;
    let (code, mut s) = socks_connect(client.socks_addr, "127.0.0.1", target.port()).await;
    assert_eq!(code, 0);
    s.write_all(b"D").await.unwrap();
    s.write_all(&(len as u32).to_be_bytes()).await.unwrap();
    let work = async {
        let mut got = Vec::with_capacity(len);
        let mut buf = vec![0u8; 64 * 1024];
        let mut dropped = false;
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if !dropped && got.len() > 2 * MB {
                assert!(client.drop_link(0), "link 0 had no connection");
                dropped = true;
            }
        }
        assert!(dropped);
        got
    };
    let got = tokio::time::timeout(Duration::from_secs(90), work)
        .await
        .unwrap();
    assert_eq!(got.len(), len);
    assert_eq!(sha256(&got), sha256(&pattern(len, 7)));
    assert!(
        client.wait_for_paths(2, Duration::from_secs(15)).await,
        "link 0 did not rejoin"
    );
    let status = client.status().await;
    assert!(
        status.sessions[0].counters.path_joins >= 3,
        "{:?}",
        status.sessions[0].counters
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_served_on_the_control_socket() {
    use std::os::unix::fs::PermissionsExt as _;
    let (server, client) = pair("status", 2).await;
    let status = braid_proxy::control::query(&client.control_path)
        .await
        .unwrap();
    assert_eq!(status.role, "client");
    assert_eq!(status.sessions[0].paths.len(), 2);
    assert_eq!(status.sessions[0].scheduler, "minrtt");
    // Paths join at QUIC's 1200-byte UDP floor; quinn's MTU discovery then finds loopback's
    // larger MTU (up to its 1452-byte bound) and the driver feeds each path's new limit to the
    // session.
    for p in &status.sessions[0].paths {
        assert!((1100..1452).contains(&p.max_datagram_size), "{p:?}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = client.status().await;
        let sizes: Vec<u16> = status.sessions[0]
            .paths
            .iter()
            .map(|p| p.max_datagram_size)
            .collect();
        if sizes.iter().all(|&s| (1300..1452).contains(&s)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "datagram sizes did not follow MTU discovery: {sizes:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(status.to_table().contains("link1"));
    let mode = std::fs::metadata(&client.control_path)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let status = braid_proxy::control::query(&server.control_path)
        .await
        .unwrap();
    assert_eq!(status.role, "server");
    assert_eq!(status.sessions.len(), 1);
    // The daemons created their state directories; stopping them leaves nothing behind.
    let dirs = [
        client.control_path.parent().unwrap().to_owned(),
        server.control_path.parent().unwrap().to_owned(),
    ];
    assert!(dirs.iter().all(|d| d.is_dir()));
    drop((client, server));
    for d in dirs {
        assert!(!d.exists(), "{} left behind", d.display());
    }
}

/// The client's and the server's paths now, as (id, link name, state), by id.
async fn paths_of(status: braid_proxy::transport::DaemonStatus) -> Vec<(u8, String, String)> {
    path_fields(status, |p| (p.id, p.name.clone(), p.state.clone()))
}

/// Waits until both daemons show `want` as the session's paths; panics with what they show.
/// The client address of each path of the server's session, by path id.
async fn remotes(server: &braid_proxy::daemon::ServerHandle) -> Vec<Option<String>> {
    let mut remotes = vec![None; braid_sched_core::MAX_PATHS];
    for p in &server.status().await.sessions[0].paths {
        remotes[usize::from(p.id)] = Some(p.remote.clone());
    }
    remotes
}

async fn wait_for_paths_on_both(
    server: &braid_proxy::daemon::ServerHandle,
    client: &braid_proxy::daemon::ClientHandle,
    want: &[(u8, &str, &str)],
) {
    let want: Vec<(u8, String, String)> = want
        .iter()
        .map(|&(id, name, state)| (id, name.to_owned(), state.to_owned()))
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let on_client = paths_of(client.status().await).await;
        let on_server = paths_of(server.status().await).await;
        if on_client == want && on_server == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "want {want:?}; client {on_client:?}, server {on_server:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_removes_and_reconnects_links_in_the_running_session() {
    let name = "linkreload";
    let (server, client) = pair(name, 1).await;
    let target = test_server().await;
    let session = client.status().await.sessions[0].session.clone();
    // A connection that stays open through every reload.
    let (code, mut echo) = socks_connect(client.socks_addr, "127.0.0.1", target.port()).await;
    assert_eq!(code, 0);
    let mut back = [0u8; 4];
    echo.write_all(b"Eone!").await.unwrap();
    echo.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"one!");

    // Two links added: they join the running session.
    let mut config = client_config(name, &server, 3, KEY);
    let done = client.reload(config.clone()).await;
    assert_eq!(done.changed, ["link"]);
    assert_eq!(done.links.added, ["link1", "link2"]);
    assert!(done.needs_restart.is_empty(), "{done:?}");
    wait_for_paths_on_both(
        &server,
        &client,
        &[
            (0, "link0", "active"),
            (1, "link1", "active"),
            (2, "link2", "active"),
        ],
    )
    .await;

    // link0 removed in the middle of a download: its path leaves, the bytes arrive whole.
    let len = 16 * MB;
    let (code, mut s) = socks_connect(client.socks_addr, "127.0.0.1", target.port()).await;
    assert_eq!(code, 0);
    s.write_all(b"D").await.unwrap();
    s.write_all(&(len as u32).to_be_bytes()).await.unwrap();
    let mut got = Vec::with_capacity(len);
    let mut buf = vec![0u8; 64 * 1024];
    let mut removed = None;
    let work = async {
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if removed.is_none() && got.len() > 2 * MB {
                config.links.remove(0);
                removed = Some(client.reload(config.clone()).await);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .unwrap();
    assert_eq!(sha256(&got), sha256(&pattern(len, 7)));
    let removed = removed.expect("the download ended before 2 MB");
    assert_eq!(removed.links.removed, ["link0"]);
    assert!(
        removed.links.added.is_empty()
            && removed.links.restarted.is_empty()
            && removed.links.updated.is_empty()
    );
    wait_for_paths_on_both(
        &server,
        &client,
        &[(1, "link1", "active"), (2, "link2", "active")],
    )
    .await;

    // link2 made a backup with a rate cap: its path takes both in place, without a new
    // connection, and the server hears of the tier (PATH_STATUS); link1's weight needs a new
    // JOIN: it reconnects under its path id; a new link takes the free id 0.
    let before = remotes(&server).await;
    config.links[1].tier = braid_proxy::session::Tier::Backup;
    config.links[1].rate_cap_mbps = Some(50.0);
    config.links[0].weight = 3;
    let mut link3 = config.links[0].clone();
    link3.name = "link3".into();
    config.links.push(link3);
    let done = client.reload(config.clone()).await;
    assert_eq!(done.links.updated, ["link2"]);
    assert_eq!(done.links.restarted, ["link1"]);
    assert_eq!(done.links.added, ["link3"]);
    wait_for_paths_on_both(
        &server,
        &client,
        &[
            (0, "link3", "active"),
            (1, "link1", "active"),
            (2, "link2", "backup"),
        ],
    )
    .await;
    // The server sees link2 on the same connection (its client port), link1 on a new one.
    let after = remotes(&server).await;
    assert_eq!(after[2], before[2], "link2 kept its connection");
    assert_ne!(after[1], before[1], "link1 joined again");
    // Back to primary without the cap, and a shorter fast rejoin (the next attempt's), in
    // place too.
    config.links[1].tier = braid_proxy::session::Tier::Primary;
    config.links[1].rate_cap_mbps = None;
    config.links[1].fast_rejoin = Duration::from_secs(5);
    assert_eq!(client.reload(config.clone()).await.links.updated, ["link2"]);
    wait_for_paths_on_both(
        &server,
        &client,
        &[
            (0, "link3", "active"),
            (1, "link1", "active"),
            (2, "link2", "active"),
        ],
    )
    .await;
    assert_eq!(
        remotes(&server).await[2],
        before[2],
        "link2 kept its connection"
    );

    // The same file again changes nothing.
    let again = client.reload(config).await;
    assert!(
        again.changed.is_empty() && again.links.is_empty(),
        "{again:?}"
    );
    // One session throughout, and the first connection still relays.
    let status = client.status().await;
    assert_eq!(status.sessions.len(), 1);
    assert_eq!(status.sessions[0].session, session);
    echo.write_all(b"two!").await.unwrap();
    echo.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"two!");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_shows_each_link_and_why_one_does_not_join() {
    let name = "linkstatus";
    let (server, client) = pair(name, 1).await;
    let mut config = client_config(name, &server, 2, KEY);
    // An IPv6 server for an IPv4 local address: every attempt fails at once.
    config.links[1].server = vec!["[::1]:9".into()];
    assert_eq!(client.reload(config.clone()).await.links.added, ["link1"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = client.status().await;
        if status.links.iter().any(|l| l.last_error.is_some()) {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "{:?}", status.links);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (good, bad) = (&status.links[0], &status.links[1]);
    assert_eq!(
        (
            good.path,
            good.name.as_str(),
            good.state.as_str(),
            good.joins
        ),
        (0, "link0", "joined", 1),
        "{good:?}"
    );
    assert_eq!((bad.path, bad.name.as_str(), bad.joins), (1, "link1", 0));
    assert!(
        bad.state.starts_with("retry in") || bad.state == "connecting",
        "{bad:?}"
    );
    let error = bad.last_error.as_deref().unwrap();
    assert!(
        error.contains("[::1]:9") && error.contains("family"),
        "{error}"
    );
    let table = status.to_table();
    assert!(table.contains("links:") && table.contains(error), "{table}");
    // What `braid status --json` sends carries them; a server's status has none.
    let json = serde_json::to_string(&status).unwrap();
    assert_eq!(
        serde_json::from_str::<braid_proxy::transport::DaemonStatus>(&json).unwrap(),
        status
    );
    assert!(server.status().await.links.is_empty());
    // Removed by a reload, the link is gone from the status.
    config.links.pop();
    assert_eq!(client.reload(config).await.links.removed, ["link1"]);
    let links = client.status().await.links;
    assert_eq!(links.len(), 1, "{links:?}");
}

/// A link bound to an interface leaves the session as soon as the interface goes down (not
/// when quinn's 15 s idle timeout ends its connection) and joins again as soon as the interface
/// is back (not after its retry timer), from the kernel's rtnetlink news; a link bound to a
/// local address does the same when the address is withdrawn and added again; the other links
/// carry on. In a network namespace of the test's own with a veth pair: needs root (or
/// `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`) and `ip`; says so and passes without them.
#[test]
fn a_link_leaves_when_its_interface_or_address_goes_and_joins_when_it_comes_back() {
    let run = std::thread::spawn(|| -> Result<(), String> {
        // SAFETY: plain flags; this thread (and what it starts) alone moves to the namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(format!(
                "no network namespace: {}",
                std::io::Error::last_os_error()
            ));
        }
        let sh = |command: &str| {
            std::process::Command::new("sh")
                .args(["-c", command])
                .status()
                .is_ok_and(|s| s.success())
        };
        if !sh(
            "ip link set lo up && ip link add brl0 type veth peer name brl1 \
                && ip addr add 10.9.1.1/24 dev brl0 && ip link set brl1 up && ip link set brl0 up \
                && ip addr add 10.9.2.1/32 dev lo",
        ) {
            return Err("`ip` or veth is missing or not permitted".into());
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let name = "ifdown";
            let server = any_address_server(name).await;
            let mut config = client_config(name, &server, 3, KEY);
            let port = server.addr.port();
            config.links[0].server = vec![format!("127.0.0.1:{port}")];
            config.links[1].server = vec![format!("10.9.1.1:{port}")];
            config.links[1].local_addr = Some("10.9.1.1:0".parse().unwrap());
            config.links[1].interface = Some("brl0".into());
            config.links[1].interface_required = true;
            config.links[2].server = vec![format!("10.9.2.1:{port}")];
            config.links[2].local_addr = Some("10.9.2.1:0".parse().unwrap());
            let client = braid_proxy::daemon::start_client(config).await.unwrap();
            assert!(client.wait_for_paths(3, Duration::from_secs(10)).await);

            let path_ids = async || -> Vec<u8> {
                let status = client.status().await;
                status.sessions[0].paths.iter().map(|p| p.id).collect()
            };
            let wait_until = async |what: &str, ok: &dyn Fn(&[u8]) -> bool| {
                let start = std::time::Instant::now();
                loop {
                    let ids = path_ids().await;
                    if ok(&ids) {
                        return start.elapsed();
                    }
                    assert!(
                        start.elapsed() < Duration::from_secs(3),
                        "{what}: paths {ids:?}, links {:?}",
                        client.status().await.links
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            // The server hears of a path that left over another one (PATH_ABANDON): it fails
            // the path at once, not after a heartbeat and three probe timeouts.
            let server_failed = async |id: u8| {
                let start = std::time::Instant::now();
                loop {
                    let status = server.status().await;
                    let paths = &status.sessions[0].paths;
                    let state = paths.iter().find(|p| p.id == id).map(|p| p.state.as_str());
                    if state != Some("active") {
                        return start.elapsed();
                    }
                    assert!(
                        start.elapsed() < Duration::from_millis(500),
                        "the server still has path {id} active: {paths:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            assert!(sh("ip link set brl0 down"));
            let left = wait_until("the path did not leave", &|ids| ids == [0, 2]).await;
            let told = server_failed(1).await;
            let links = client.status().await.links;
            assert_eq!(
                links[1].last_error.as_deref(),
                Some("interface brl0 is down"),
                "{links:?}"
            );
            assert_ne!(links[1].state, "joined");
            // Down, it waits: no attempt could succeed.
            tokio::time::sleep(Duration::from_millis(1200)).await;
            assert_eq!(path_ids().await, [0, 2]);
            assert!(sh("ip link set brl0 up"));
            let back = wait_until("the path did not join again", &|ids| ids == [0, 1, 2]).await;
            println!(
                "interface down: path left after {:.0} ms (the server's failed {:.0} ms later); \
                 up: joined after {:.0} ms",
                left.as_secs_f64() * 1e3,
                told.as_secs_f64() * 1e3,
                back.as_secs_f64() * 1e3
            );
            assert_eq!(client.status().await.links[1].joins, 2);

            // link2's address withdrawn, then given back.
            assert!(sh("ip addr del 10.9.2.1/32 dev lo"));
            let left = wait_until("the path did not leave", &|ids| ids == [0, 1]).await;
            let told = server_failed(2).await;
            let links = client.status().await.links;
            assert_eq!(
                links[2].last_error.as_deref(),
                Some("local address 10.9.2.1 is gone"),
                "{links:?}"
            );
            tokio::time::sleep(Duration::from_millis(1200)).await;
            assert_eq!(path_ids().await, [0, 1]);
            assert!(sh("ip addr add 10.9.2.1/32 dev lo"));
            let back = wait_until("the path did not join again", &|ids| ids == [0, 1, 2]).await;
            println!(
                "address withdrawn: path left after {:.0} ms (the server's failed {:.0} ms \
                 later); given back: joined after {:.0} ms",
                left.as_secs_f64() * 1e3,
                told.as_secs_f64() * 1e3,
                back.as_secs_f64() * 1e3
            );
            assert_eq!(client.status().await.links[2].joins, 2);
        });
        Ok(())
    });
    match run.join().unwrap() {
        Ok(()) => {}
        Err(why) => eprintln!("skipped: {why}"),
    }
}

/// Two network namespaces of the test's own (`ip netns`), deleted when dropped.
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .status();
        }
    }
}

/// Moves the calling thread into the network namespace `ns` (made with `ip netns add`).
fn enter_namespace(ns: &str) {
    use std::os::fd::AsRawFd as _;
    let file = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
    // SAFETY: a valid namespace descriptor; this thread (and what it starts) alone moves.
    assert_eq!(
        unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
        0,
        "{}",
        std::io::Error::last_os_error()
    );
}

/// A link whose `interface` is a pattern (`bra*`) gets a link per matching device that is up,
/// as devices come and go while the client runs: the client's namespace has veth devices
/// whose peers are in the server's, each with a default route (a laptop's Wi-Fi and a phone
/// tethered over USB). A device that appears joins the session within a second, one that goes
/// away or down leaves it, the flows carry on over the others, devices that do not match or
/// are down get no link, and a table that names a device takes it from the pattern. Needs
/// root (`ip netns`, veth); says so and passes without.
#[test]
fn a_link_pattern_gives_each_matching_device_a_link_while_it_is_up() {
    let sh = |command: &str| {
        std::process::Command::new("sh")
            .args(["-c", command])
            .status()
            .is_ok_and(|s| s.success())
    };
    let tag = std::process::id();
    let (s, c) = (format!("braid-{tag}-srv"), format!("braid-{tag}-cli"));
    if !sh(&format!("ip netns add {s} && ip netns add {c}")) {
        eprintln!("skipped: `ip netns` is missing or not permitted");
        return;
    }
    let _namespaces = Namespaces(vec![s.clone(), c.clone()]);
    let (s, c) = (s.as_str(), c.as_str());
    assert!(sh(&format!(
        "ip -n {s} link set lo up && ip -n {s} addr add 10.8.0.1/32 dev lo && ip -n {c} link set lo up"
    )));
    // A device of the client's with its peer at the server, on 10.9.NET.0/24, and a default
    // route through it of `metric`.
    let veth = |dev: &str, net: u8, metric: u32| {
        assert!(sh(&format!(
            "ip -n {c} link add {dev} type veth peer name x{dev} netns {s} \
             && ip -n {c} addr add 10.9.{net}.1/24 dev {dev} \
             && ip -n {s} addr add 10.9.{net}.2/24 dev x{dev} && ip -n {s} link set x{dev} up \
             && ip -n {c} link set {dev} up \
             && ip -n {c} route add default via 10.9.{net}.2 dev {dev} metric {metric}"
        )));
    };

    // The server and an echo origin in the server's namespace, on a thread of their own.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server_ns = s.to_owned();
    std::thread::scope(|scope| {
        let server_thread = scope.spawn(move || {
            enter_namespace(&server_ns);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let name = "pattern";
                let server = any_address_server(name).await;
                let echo = test_server().await;
                let mut config = client_config(name, &server, 1, KEY);
                config.links[0].name = "auto".into();
                config.links[0].interface = Some("bra*".into());
                config.links[0].interface_required = true;
                config.links[0].local_addr = None;
                config.links[0].server = vec![format!("10.8.0.1:{}", server.addr.port())];
                ready_tx.send((config, echo)).unwrap();
                let _ = stop_rx.await;
            });
        });
        let (config, echo) = ready_rx.recv().unwrap();

        let client_ns = c.to_owned();
        let client_thread = scope.spawn(move || {
            enter_namespace(&client_ns);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                veth("bra0", 1, 100);
                let mut client = braid_proxy::daemon::start_client(config.clone())
                    .await
                    .unwrap();
                assert!(client.wait_for_paths(1, Duration::from_secs(10)).await);
                let links = async || -> Vec<(String, String)> {
                    let status = client.status().await;
                    status
                        .links
                        .iter()
                        .map(|l| (l.name.clone(), l.state.clone()))
                        .collect()
                };
                let wait_for = async |what: &str, want: &[(&str, &str)]| {
                    let start = std::time::Instant::now();
                    loop {
                        let now = links().await;
                        if now
                            .iter()
                            .map(|(n, s)| (n.as_str(), s.as_str()))
                            .eq(want.iter().copied())
                        {
                            return start.elapsed();
                        }
                        assert!(
                            start.elapsed() < Duration::from_secs(5),
                            "{what}: links {now:?}"
                        );
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                };
                wait_for("the first device", &[("auto@bra0", "joined")]).await;
                let patterns = client.status().await.link_patterns;
                assert_eq!(
                    patterns,
                    [braid_proxy::transport::LinkPatternStatus {
                        name: "auto".into(),
                        pattern: "bra*".into(),
                        links: vec!["auto@bra0".into()],
                        left_out: Vec::new(),
                    }]
                );
                let (code, mut flow) =
                    socks_connect(client.socks_addr, &echo.ip().to_string(), echo.port()).await;
                assert_eq!(code, 0);
                // The origin echoes what follows its first byte.
                flow.write_all(b"E").await.unwrap();
                let mut back = [0u8; 4];
                let mut echoed = async |word: &[u8; 4]| {
                    flow.write_all(word).await.unwrap();
                    tokio::time::timeout(Duration::from_secs(5), flow.read_exact(&mut back))
                        .await
                        .unwrap()
                        .unwrap();
                    assert_eq!(&back, word);
                };
                echoed(b"one!").await;

                // A second matching device joins; one that does not match gets no link.
                veth("bra2", 3, 200);
                assert!(sh(&format!(
                    "ip -n {c} link add brz0 type veth peer name xbrz0 && ip -n {c} link set brz0 up"
                )));
                let joined = wait_for(
                    "a device that appeared",
                    &[("auto@bra0", "joined"), ("auto@bra2", "joined")],
                )
                .await;
                let paths = client.status().await.sessions[0].paths.len();
                assert_eq!(paths, 2);
                // A matching device that is down gets a link once it is up, and loses it when it
                // goes down again.
                assert!(sh(&format!("ip -n {c} link add bra5 type veth peer name xbra5")));
                tokio::time::sleep(Duration::from_millis(300)).await;
                assert_eq!(links().await.len(), 2, "{:?}", links().await);
                assert!(sh(&format!("ip -n {c} link set bra5 up")));
                let start = std::time::Instant::now();
                while !links().await.iter().any(|(n, _)| n == "auto@bra5") {
                    assert!(
                        start.elapsed() < Duration::from_secs(5),
                        "{:?}",
                        links().await
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                assert!(sh(&format!("ip -n {c} link set bra5 down")));
                wait_for(
                    "a device that went down",
                    &[("auto@bra0", "joined"), ("auto@bra2", "joined")],
                )
                .await;

                // The first device goes away: its link leaves and the flow carries on.
                assert!(sh(&format!("ip -n {c} link del bra0")));
                let left = wait_for("a device that went away", &[("auto@bra2", "joined")]).await;
                let start = std::time::Instant::now();
                while client.status().await.sessions[0].paths.len() != 1 {
                    assert!(start.elapsed() < Duration::from_secs(5));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                echoed(b"two!").await;

                // A table naming the device takes it from the pattern.
                let mut file = config.clone();
                let mut fixed = file.links[0].clone();
                fixed.name = "fixed".into();
                fixed.interface = Some("bra2".into());
                file.links.push(fixed);
                let reload = client.reload(file).await;
                assert_eq!(reload.links.added, ["fixed"]);
                assert_eq!(reload.links.removed, ["auto@bra2"]);
                wait_for("a table naming the device", &[("fixed", "joined")]).await;
                // The pattern is left with no device, and says so.
                let table = client.status().await.to_table();
                assert!(
                    table.contains("link pattern auto (bra*): no device up"),
                    "{table}"
                );
                echoed(b"3rd!").await;
                assert_eq!(
                    client.status().await.sessions.len(),
                    1,
                    "one session throughout"
                );
                println!(
                    "device up: joined after {:.0} ms; device gone: link left after {:.0} ms",
                    joined.as_secs_f64() * 1e3,
                    left.as_secs_f64() * 1e3
                );
                client.shutdown();
            });
        });
        let result = client_thread.join();
        let _ = stop_tx.send(());
        server_thread.join().unwrap();
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}

/// A link's `rate_cap_down_mbps` reaches the server (PATH_RATE_CAP), which keeps what it sends
/// on the link's path to it; a reload lifts it in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_s_download_cap_holds_the_server_to_it() {
    let name = "downcap";
    let server = loopback_server(name).await;
    let origin = test_server().await;
    let mut config = client_config(name, &server, 1, KEY);
    config.links[0].rate_cap_down_mbps = Some(16.0);
    let client = braid_proxy::daemon::start_client(config.clone())
        .await
        .unwrap();
    assert!(client.wait_for_paths(1, Duration::from_secs(10)).await);
    let whole = sha256(&pattern(6 * MB, 7));
    let timed = async || {
        let start = std::time::Instant::now();
        let got = download(client.socks_addr, origin, 6 * MB as u32).await;
        assert_eq!(sha256(&got), whole, "a download broke");
        start.elapsed().as_secs_f64()
    };
    // 6 MiB at 16 Mbit/s: 3.1 s (the cap counts packets, headers too; its first burst is
    // a quarter second's worth).
    let capped = timed().await;
    // The server's status shows the cap on its path, the client's none on its own.
    let cap =
        |status: braid_proxy::transport::DaemonStatus| status.sessions[0].paths[0].rate_cap_mbps;
    assert_eq!(cap(server.status().await), Some(16.0));
    assert_eq!(cap(client.status().await), None);
    let table = server.status().await.to_table();
    assert!(table.contains("sending capped at 16.0 Mbit/s"), "{table}");
    // Lifted by a reload, in place.
    config.links[0].rate_cap_down_mbps = None;
    assert_eq!(client.reload(config.clone()).await.links.updated, ["link0"]);
    let mut freed = timed().await;
    assert_eq!(cap(server.status().await), None);
    // The news may cross the first download's start.
    if freed > 1.0 {
        freed = timed().await;
    }
    let mbps = |secs: f64| 6.0 * 8.0 * 1.048_576 / secs;
    eprintln!(
        "6 MiB down: {capped:.2} s ({:.1} Mbit/s) under a 16 Mbit/s cap, {freed:.2} s ({:.0} \
         Mbit/s) without",
        mbps(capped),
        mbps(freed)
    );
    assert!(capped > 2.5, "{capped:.2} s under the cap");
    assert!(freed < 1.0, "{freed:.2} s without the cap");
    // The link's own count: at least the downloads (with their headers) came in on it, and
    // what went out (requests, acknowledgements) is far less.
    let status = client.status().await;
    let link = &status.links[0];
    assert!(
        link.received_bytes > 12 * MB as u64 && link.sent_bytes < link.received_bytes / 4,
        "{link:?}"
    );
    let table = status.to_table();
    assert!(table.contains("      traffic: "), "{table}");
    drop(client);
    let _ = std::fs::remove_dir_all(&config.state_dir);
}

/// A server, an origin, and a client of two joined links whose second (`link1`) has a daily
/// budget of `budget` bytes and does `then` once it is spent; the client's file.
async fn budget_pair(
    name: &str,
    budget: u64,
    then: braid_proxy::config::WhenSpent,
) -> (
    braid_proxy::daemon::ServerHandle,
    std::net::SocketAddr,
    braid_proxy::config::ClientConfig,
    braid_proxy::daemon::ClientHandle,
) {
    let server = loopback_server(name).await;
    let origin = test_server().await;
    let mut config = client_config(name, &server, 2, KEY);
    config.links[1].budget = Some(braid_proxy::config::LinkBudget {
        bytes: budget,
        period: braid_proxy::config::BudgetPeriod::Day,
        when_spent: then,
        clock: Default::default(),
    });
    let client = braid_proxy::daemon::start_client(config.clone())
        .await
        .unwrap();
    assert!(client.wait_for_paths(2, Duration::from_secs(10)).await);
    (server, origin, config, client)
}

/// With `budget_spent = "backup"`, a link whose budget is spent stays in the session as a
/// backup: it carries next to nothing while the other link is live, takes the traffic when that
/// one goes, and is a primary again once its budget has room (a reload here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_whose_budget_is_spent_stays_as_a_backup_when_asked() {
    use braid_proxy::config::{LinkBudget, WhenSpent};
    use braid_proxy::transport::LinkStatus;
    let budget = 2 << 20;
    let (server, origin, config, client) =
        budget_pair("budgetbackup", budget, WhenSpent::Backup).await;
    let link1 = async || -> LinkStatus {
        let links = client.status().await.links;
        links.into_iter().find(|l| l.name == "link1").unwrap()
    };
    let server_state = async |id: u8| -> String {
        let status = server.status().await;
        let path = status.sessions[0].paths.iter().find(|p| p.id == id);
        path.map_or("gone".into(), |p| p.state.clone())
    };
    let whole = sha256(&pattern(8 * MB, 7));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while link1().await.state != "joined as backup: budget spent" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            link1().await
        );
        let got = download(client.socks_addr, origin, 8 * MB as u32).await;
        assert_eq!(sha256(&got), whole, "a download broke");
    }
    // Still in the session on both ends, as a backup.
    let start = tokio::time::Instant::now();
    while server_state(1).await != "backup" {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{}",
            server_state(1).await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(client.status().await.sessions[0].paths.len(), 2);
    // Next to nothing on it while link0 is live: 16 MiB more go by link0 (counted from when
    // what was in flight on it as it became a backup has arrived).
    let spent_at = link1().await.budget.unwrap().used_bytes;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let used = link1().await.budget.unwrap().used_bytes;
    for _ in 0..2 {
        let got = download(client.socks_addr, origin, 8 * MB as u32).await;
        assert_eq!(sha256(&got), whole);
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let idle = link1().await.budget.unwrap().used_bytes - used;
    assert!(
        idle < 64 * 1024,
        "the spent link carried {idle} B beside a live primary"
    );
    // link0 gone: the backup carries the download.
    let mut only = config.clone();
    only.links.remove(0);
    assert_eq!(client.reload(only.clone()).await.links.removed, ["link0"]);
    let got = download(client.socks_addr, origin, 8 * MB as u32).await;
    assert_eq!(sha256(&got), whole, "the download over the backup broke");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let carried = link1().await.budget.unwrap().used_bytes - used - idle;
    assert!(carried > 8 * MB as u64, "the backup carried {carried} B");
    // A bigger budget: a primary again.
    only.links[0].budget = Some(LinkBudget {
        bytes: 1 << 30,
        ..config.links[1].budget.unwrap()
    });
    assert_eq!(client.reload(only).await.links.updated, ["link1"]);
    let start = tokio::time::Instant::now();
    while link1().await.state != "joined" || server_state(1).await != "active" {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?} {}",
            link1().await,
            server_state(1).await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "budget {budget} B: spent at {spent_at} B ({used} B a second later); {idle} B beside a \
         live primary over 16 MiB, {carried} B as the only link over 8 MiB"
    );
    let state_dir = config.state_dir.clone();
    drop(client);
    std::fs::remove_dir_all(&state_dir).unwrap();
}

/// A listener on 127.0.0.1 whose connections get `first` and then `then_bytes` bytes of
/// `x`, and are then reset (`SO_LINGER` 0: a TCP RST, no FIN).
async fn resetting_origin(first: &'static [u8], then_bytes: usize) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request (or the SOCKS client's first bytes) first, so the reset does not
                // come from unread data.
                let mut request = [0u8; 1024];
                let _ = s.read(&mut request).await;
                let _ = s.write_all(first).await;
                let _ = s.write_all(&vec![b'x'; then_bytes]).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                s.set_zero_linger().unwrap();
            });
        }
    });
    addr
}

/// An origin server that resets its connection mid-stream: the application behind the SOCKS5
/// inbound sees a reset too, never a clean end (which would pass a stream delimited by the
/// close, as a raw download is, for whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_s_reset_reaches_the_application_as_a_reset() {
    let (_server, client) = pair("origin-reset", 1).await;
    let origin = resetting_origin(b"", 200_000).await;
    let (code, mut s) = socks_connect(client.socks_addr, "127.0.0.1", origin.port()).await;
    assert_eq!(code, 0);
    s.write_all(b"GET").await.unwrap();
    let ended = read_until_end(&mut s).await;
    assert!(
        matches!(ended, Err((std::io::ErrorKind::ConnectionReset, _))),
        "{ended:?}"
    );
}

/// A session lost mid-download (here the server stops) resets the application's connection:
/// the download does not look complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_resets_the_application_s_connections() {
    let (mut server, client) = pair("session-lost", 1).await;
    // An origin that sends as fast as it can until its connection fails.
    let origin = endless_origin(Duration::ZERO).await;
    let (code, mut s) = socks_connect(client.socks_addr, "127.0.0.1", origin.port()).await;
    assert_eq!(code, 0);
    let mut first = vec![0u8; 1024];
    s.read_exact(&mut first).await.unwrap();
    server.shutdown_gracefully().await;
    let ended = read_until_end(&mut s).await;
    assert!(
        matches!(ended, Err((std::io::ErrorKind::ConnectionReset, _))),
        "{ended:?}"
    );
}

/// A forwarded `http://` response whose body ends with the server's close, broken off by the
/// server's reset: the client's connection is reset, not closed as if the body were whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_delimited_by_the_close_and_broken_off_is_reset_at_the_client() {
    let (_server, client) = pair("http-broken", 1).await;
    let origin = resetting_origin(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", 200_000).await;
    let mut s = TcpStream::connect(client.http_addr.unwrap()).await.unwrap();
    let request = format!(
        "GET http://127.0.0.1:{}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        origin.port()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let ended = read_until_end(&mut s).await;
    assert!(
        matches!(ended, Err((std::io::ErrorKind::ConnectionReset, n)) if n > 0),
        "{ended:?}"
    );
}

/// A server stopped at once (no time for the sessions' CLOSE frames) and started again at the
/// same address: its connections close with the session-closed code, so the client's session
/// ends (the application whose flow it carried sees a reset) and a new one starts and carries
/// traffic. (`emu_outage` has the case where even that close is lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_at_once_ends_the_session_and_a_new_one_starts() {
    use braid_proxy::daemon::start_server;
    use braid_proxy::tls::ServerIdentity;
    let identity = ServerIdentity::generate("braid").unwrap();
    let config = server_config("lost-session", true);
    let mut server = start_server(config.clone(), identity.clone())
        .await
        .unwrap();
    let client = braid_proxy::daemon::start_client(client_config("lost-session", &server, 2, KEY))
        .await
        .unwrap();
    assert!(client.wait_for_paths(2, Duration::from_secs(10)).await);
    let first = client.status().await.sessions[0].session.clone();
    let origin = endless_origin(Duration::from_millis(5)).await;
    let (code, mut s) = socks_connect(client.socks_addr, "127.0.0.1", origin.port()).await;
    assert_eq!(code, 0);
    let mut some = vec![0u8; 1024];
    s.read_exact(&mut some).await.unwrap();

    // Stopped at once (the sessions' CLOSE frames cannot go out), and back at the same address.
    let addr = server.addr;
    server.shutdown();
    drop(server);
    let _server = start_server_again(addr, &config, &identity).await;
    let ended = read_until_end(&mut s).await;
    assert!(
        matches!(ended, Err((std::io::ErrorKind::ConnectionReset, _))),
        "{ended:?}"
    );
    // A new session, with both links, carries a new flow.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let status = client.status().await;
        if status
            .sessions
            .first()
            .is_some_and(|s| s.session != first && s.paths.len() == 2)
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new session: {:?}",
            status
                .sessions
                .iter()
                .map(|s| &s.session)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let target = test_server().await;
    let got = download(client.socks_addr, target, MB as u32).await;
    assert_eq!(sha256(&got), sha256(&pattern(MB, 7)));
}

/// A reload of the server's `listen`: an address added takes joins at once; an address taken
/// out takes no more, while the paths already there go on carrying their session; listed
/// again, it takes joins again. None of it needs a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_moves_the_server_s_listen_and_the_paths_there_go_on() {
    let name = "listen-reload";
    let target = test_server().await;
    let (server, first) = pair(name, 2).await;
    let a = server.addr;
    assert_eq!(server.listening(), [a]);
    // A second address beside the first (the file's first entry, port 0, is the same one).
    let mut config = server_config(name, true);
    config.listen = vec!["127.0.0.1:0".parse().unwrap(); 2];
    let done = server.reload(config).await;
    assert_eq!(done.changed, ["listen"], "{done:?}");
    let now = server.listening();
    assert_eq!(now.len(), 2);
    assert_eq!(now[0], a);
    let b = now[1];
    assert_ne!(b, a);
    let joins = |addr: std::net::SocketAddr, label: &str| {
        let mut config = client_config(&format!("{name}-{label}"), &server, 1, KEY);
        config.links[0].server = vec![addr.to_string()];
        async move {
            let client = braid_proxy::daemon::start_client(config).await.unwrap();
            let joined = client.wait_for_paths(1, Duration::from_secs(3)).await;
            (client, joined)
        }
    };
    let (via_b, joined) = joins(b, "b").await;
    assert!(joined, "no join at the added address");
    assert_eq!(
        download(via_b.socks_addr, target, 10_000).await,
        pattern(10_000, 7)
    );
    // Only the second address: the first takes no joins, but the first client's paths there
    // go on.
    let mut config = server_config(name, true);
    config.listen = vec![b];
    let done = server.reload(config.clone()).await;
    assert_eq!(done.changed, ["listen"], "{done:?}");
    assert_eq!(server.listening(), [b]);
    let status = server.status().await;
    assert_eq!(status.listen, [b.to_string()]);
    assert!(
        status.to_table().contains(&format!("; listening on {b}\n")),
        "{}",
        status.to_table()
    );
    assert_eq!(server.reload(config).await.changed, Vec::<&str>::new());
    let (_refused, joined) = joins(a, "a-off").await;
    assert!(!joined, "a join at an address taken out of listen");
    assert_eq!(
        download(first.socks_addr, target, 100_000).await,
        pattern(100_000, 7)
    );
    let status = first.status().await;
    assert_eq!(status.sessions[0].paths.len(), 2, "{status:?}");
    // Both again: the first address takes joins again.
    let mut config = server_config(name, true);
    config.listen = vec![a, b];
    assert_eq!(server.reload(config).await.changed, ["listen"]);
    let mut now = server.listening();
    now.sort();
    let mut both = [a, b];
    both.sort();
    assert_eq!(now, both);
    let (via_a, joined) = joins(a, "a-on").await;
    assert!(joined, "no join at the address listed again");
    assert_eq!(
        download(via_a.socks_addr, target, 10_000).await,
        pattern(10_000, 7)
    );
    // An address that cannot be bound changes nothing.
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut config = server_config(name, true);
    config.listen = vec![a, taken.local_addr().unwrap()];
    assert_eq!(server.reload(config).await.changed, Vec::<&str>::new());
    let mut still = server.listening();
    still.sort();
    assert_eq!(still, now);
    // Taken out once more, the first address's socket closes once its last path has ended.
    let mut config = server_config(name, true);
    config.listen = vec![b];
    assert_eq!(server.reload(config).await.changed, ["listen"]);
    assert!(
        std::net::UdpSocket::bind(a).is_err(),
        "closed with paths on it"
    );
    let (mut first, mut via_a) = (first, via_a);
    first.shutdown_gracefully().await;
    via_a.shutdown_gracefully().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while std::net::UdpSocket::bind(a).is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the socket outlived its paths"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A link whose `server` lists several addresses tries them in turn, the first here being
/// silent (a port the network drops): a racing attempt sends its second handshake, 2 s in, to
/// the second address and joins there; a link that sends one handshake per attempt (its
/// `fast_rejoin_s` 0) moves on to the second address when the first attempt has had no answer
/// for 10 s, and says so in `braid status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_tries_the_server_s_next_address_when_one_is_silent() {
    let name = "link-servers";
    let server = loopback_server(name).await;
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = test_server().await;
    for (racing, within) in [(true, 1.9..5.0), (false, 9.9..14.0)] {
        let mut config = client_config(&format!("{name}-{racing}"), &server, 1, KEY);
        config.links[0].server = vec![
            silent.local_addr().unwrap().to_string(),
            server.addr.to_string(),
        ];
        if !racing {
            config.links[0].fast_rejoin = Duration::ZERO;
        }
        let started = std::time::Instant::now();
        let client = braid_proxy::daemon::start_client(config).await.unwrap();
        assert!(client.wait_for_paths(1, Duration::from_secs(20)).await);
        let took = started.elapsed().as_secs_f64();
        assert!(
            within.contains(&took),
            "racing {racing}: joined in {took:.2} s"
        );
        let status = client.status().await;
        let link = &status.links[0];
        assert_eq!(
            link.server,
            format!("{}, {}", silent.local_addr().unwrap(), server.addr)
        );
        assert_eq!(status.sessions[0].paths[0].remote, server.addr.to_string());
        if !racing {
            assert!(
                link.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("no answer")),
                "{link:?}"
            );
        }
        assert_eq!(
            download(client.socks_addr, target, 10_000).await,
            pattern(10_000, 7)
        );
        println!("racing {racing}: joined through the second address after {took:.2} s");
    }
}

/// A link without a `local_addr` whose server addresses span both IP families (a dual-stack
/// name, here a list) tries the other family 250 ms after the first (RFC 8305), racing or not:
/// the server listens on IPv4 alone and the first address is IPv6. Until 25 Nov 2026 such a
/// link tried only the first address's family, and joined only through the second entry of
/// the list, after its first attempt timed out (10 s), or, for a name, never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_reaches_a_server_of_the_other_ip_family_a_quarter_second_later() {
    let name = "families";
    let server = loopback_server(name).await;
    let target = test_server().await;
    let port = server.addr.port();
    for racing in [true, false] {
        let mut config = client_config(&format!("{name}-{racing}"), &server, 1, KEY);
        config.links[0].local_addr = None;
        config.links[0].server = vec![format!("[::1]:{port}"), format!("127.0.0.1:{port}")];
        if !racing {
            config.links[0].fast_rejoin = Duration::ZERO;
        }
        let started = std::time::Instant::now();
        let client = braid_proxy::daemon::start_client(config.clone())
            .await
            .unwrap();
        assert!(client.wait_for_paths(1, Duration::from_secs(20)).await);
        let took = started.elapsed().as_secs_f64();
        assert!(took < 1.5, "racing {racing}: joined in {took:.2} s");
        let status = client.status().await;
        assert_eq!(
            status.sessions[0].paths[0].remote,
            format!("127.0.0.1:{port}")
        );
        assert_eq!(
            download(client.socks_addr, target, 10_000).await,
            pattern(10_000, 7)
        );
        println!("racing {racing}: joined over IPv4 after {took:.2} s");
        drop(client);
        let _ = std::fs::remove_dir_all(&config.state_dir);
    }
}

/// A link with a data budget (`budget_mib`) leaves the session once what it carried reaches
/// the budget: a download goes on over the other link and arrives whole, the link shows
/// `budget spent` and its count, and stays out while more is downloaded. The count survives a
/// restart of the client (the link never joins), and a reload that raises the budget lets it
/// join again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_leaves_when_its_data_budget_is_spent_and_its_count_survives_a_restart() {
    use braid_proxy::config::{BudgetPeriod, LinkBudget, WhenSpent};
    use braid_proxy::transport::LinkStatus;
    let budget = 2 << 20;
    let (server, origin, mut config, mut client) =
        budget_pair("budget", budget, WhenSpent::Leave).await;
    let link1 = |links: Vec<LinkStatus>| links.into_iter().find(|l| l.name == "link1").unwrap();
    // Until link1 has left: downloads (the first ones spread over both links).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut downloads = 0;
    while link1(client.status().await.links).state != "budget spent" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            client.status().await.links
        );
        let got = download(client.socks_addr, origin, 8 * MB as u32).await;
        assert_eq!(
            sha256(&got),
            sha256(&pattern(8 * MB, 7)),
            "a download broke"
        );
        downloads += 1;
    }
    let spent = link1(client.status().await.links);
    let used = spent.budget.unwrap().used_bytes;
    // Past the budget by what was in flight as its sockets found it gone (counted once a
    // second instead, a second of loopback traffic: tens of MB).
    assert!(used >= budget && used - budget < MB as u64, "{spent:?}");
    assert!(
        spent
            .last_error
            .as_deref()
            .unwrap()
            .starts_with("data budget spent: "),
        "{spent:?}"
    );
    let table = client.status().await.to_table();
    assert!(table.contains("      data budget: "), "{table}");
    // Out of the session: one path, and more downloads go on without it.
    assert!(
        tokio::time::timeout(Duration::from_secs(5), async {
            while server.status().await.sessions[0].paths.len() != 1 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .is_ok()
    );
    let got = download(client.socks_addr, origin, 8 * MB as u32).await;
    assert_eq!(got.len(), 8 * MB);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = link1(client.status().await.links)
        .budget
        .unwrap()
        .used_bytes;
    assert_eq!(after, used, "the spent link carried more");
    eprintln!(
        "budget {budget} B: spent after {downloads} downloads of 8 MiB, {used} B counted (+{} B)",
        used - budget
    );
    // The count survives a restart: the link stays out.
    client.shutdown_gracefully().await;
    drop(client);
    let ledger = config.state_dir.join(braid_proxy::transport::budget::FILE);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&ledger).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let client = braid_proxy::daemon::start_client(config.clone())
        .await
        .unwrap();
    assert!(client.wait_for_paths(1, Duration::from_secs(10)).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = client.status().await;
    assert_eq!(status.sessions[0].paths.len(), 1, "{:?}", status.links);
    let again = link1(status.links);
    assert_eq!(again.state, "budget spent");
    assert_eq!(again.budget.unwrap().used_bytes, used);
    // A bigger budget: it joins again.
    config.links[1].budget = Some(LinkBudget {
        bytes: 1 << 30,
        period: BudgetPeriod::Day,
        when_spent: WhenSpent::Leave,
        clock: Default::default(),
    });
    let state_dir = config.state_dir.clone();
    assert_eq!(client.reload(config).await.links.updated, ["link1"]);
    assert!(client.wait_for_paths(2, Duration::from_secs(10)).await);
    // The ledger keeps the client's state directory: gone with the test.
    drop(client);
    std::fs::remove_dir_all(&state_dir).unwrap();
}

/// `[[route]]`: a `direct` route's destinations are connected by the client itself (TCP by
/// address and by name, over SOCKS5 and HTTP CONNECT, and a UDP association's datagrams), a
/// `block` route's are refused, and neither reaches the server, whose egress policy here
/// refuses loopback; a reload that takes the routes away sends the same destinations through
/// the session again (and the server refuses them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_and_block_routes_keep_destinations_out_of_the_session() {
    use braid_proxy::config::{DomainPattern, PortRange, Route, RouteAction};
    let name = "routes";
    let server = braid_proxy::daemon::start_server(
        server_config(name, false),
        braid_proxy::tls::ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let (target, blocked, echo) = (test_server().await, test_server().await, udp_echo().await);
    let mut config = client_config(name, &server, 2, KEY);
    config.routes = vec![
        Route {
            ports: vec![PortRange {
                first: blocked.port(),
                last: blocked.port(),
            }],
            ..Route::every(RouteAction::Block)
        },
        Route {
            networks: vec!["127.0.0.0/8".parse().unwrap()],
            domains: vec![DomainPattern {
                name: "localhost".into(),
                below_only: false,
            }],
            ..Route::every(RouteAction::Direct)
        },
    ];
    let client = braid_proxy::daemon::start_client(config.clone())
        .await
        .unwrap();
    assert!(client.wait_for_paths(2, Duration::from_secs(10)).await);
    let proxy = client.socks_addr;
    // Direct, by address: whole both ways.
    let got = download(proxy, target, (4 * MB) as u32).await;
    assert_eq!(sha256(&got), sha256(&pattern(4 * MB, 7)));
    let data = pattern(3 * MB, 5);
    assert_eq!(upload(proxy, target, &data).await, sha256(&data));
    // Direct, by name (resolved by the client).
    let (code, mut s) = socks_connect(proxy, "localhost", target.port()).await;
    assert_eq!(code, 0);
    s.write_all(b"Ehello").await.unwrap();
    let mut back = [0u8; 5];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"hello");
    drop(s);
    // Direct, refused by the destination: the reply says so (5), as the server's would.
    let (code, _) = socks_connect(proxy, "127.0.0.1", 1).await;
    assert_eq!(code, 5, "connection refused");
    // Over HTTP CONNECT too.
    let mut s = TcpStream::connect(client.http_addr.unwrap()).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = vec![0u8; 256];
    let n = s.read(&mut head).await.unwrap();
    assert!(
        head[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&head[..n])
    );
    drop(s);
    // Blocked: "not allowed", whatever the address.
    let (code, _) = socks_connect(proxy, "127.0.0.1", blocked.port()).await;
    assert_eq!(code, 2);
    // UDP: the association's datagrams go direct.
    let association = UdpAssociation::open(proxy).await;
    let answer = association.ask(echo, b"marco", 20).await;
    assert_eq!(answer.as_deref(), Some(&b"marco"[..]));
    let status = client.status().await;
    let routes: Vec<_> = status
        .routes
        .iter()
        .map(|r| (r.action.as_str(), r.flows, r.datagrams))
        .collect();
    assert_eq!(routes[0], ("block", 1, 0));
    assert_eq!((routes[1].0, routes[1].1), ("direct", 5));
    assert!(routes[1].2 >= 1, "{routes:?}");
    assert!(
        status
            .to_table()
            .contains("route 1 direct (1 network, 1 domain): 5 flows"),
        "{}",
        status.to_table()
    );
    // Nothing of it went through the session.
    assert_eq!(status.sessions[0].counters.flows_total, 0);
    assert_eq!(server.status().await.sessions[0].counters.flows_total, 0);
    // Without the routes the same destination goes to the server, whose policy refuses it.
    config.routes.clear();
    let done = client.reload(config).await;
    assert!(done.changed.contains(&"route"), "{done:?}");
    assert!(done.needs_restart.is_empty(), "{done:?}");
    let (code, _) = socks_connect(proxy, "127.0.0.1", target.port()).await;
    assert_eq!(code, 2, "refused by the server's egress policy");
    let (code, _) = socks_connect(proxy, "127.0.0.1", blocked.port()).await;
    assert_eq!(code, 2);
    assert_eq!(client.status().await.sessions[0].counters.flows_total, 2);
    assert!(client.status().await.routes.is_empty());
}

/// The server counts each user's traffic: its running sessions' bytes, and once a session
/// ends, what it moved stays with the user (a client restarted starts a second session whose
/// bytes add to them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_counts_each_user_s_traffic_across_sessions() {
    let name = "user-traffic";
    let (server, mut client) = pair(name, 2).await;
    let target = test_server().await;
    let alice = |s: braid_proxy::transport::DaemonStatus| {
        s.users.into_iter().find(|u| u.name == "alice").unwrap()
    };
    let fresh = alice(server.status().await);
    assert_eq!((fresh.sessions, fresh.sessions_started), (1, 1));
    assert_eq!(
        download(client.socks_addr, target, (2 * MB) as u32)
            .await
            .len(),
        2 * MB
    );
    let data = pattern(MB, 3);
    assert_eq!(
        upload(client.socks_addr, target, &data).await,
        sha256(&data)
    );
    let live = alice(server.status().await);
    assert!(live.download_bytes >= (2 * MB) as u64, "{live:?}");
    assert!(live.upload_bytes >= MB as u64, "{live:?}");
    // The session ends (the client stops): its bytes stay the user's.
    client.shutdown_gracefully().await;
    drop(client);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !server.status().await.sessions.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session did not end"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ended = alice(server.status().await);
    assert_eq!(ended.sessions, 0);
    assert!(
        ended.download_bytes >= live.download_bytes,
        "{ended:?} {live:?}"
    );
    assert!(
        ended.download_bytes < live.download_bytes + 65_536,
        "{ended:?} {live:?}"
    );
    assert!(
        ended.upload_bytes >= live.upload_bytes,
        "{ended:?} {live:?}"
    );
    // A second session adds to them.
    let client = braid_proxy::daemon::start_client(client_config(name, &server, 2, KEY))
        .await
        .unwrap();
    assert!(client.wait_for_paths(2, Duration::from_secs(10)).await);
    assert_eq!(
        download(client.socks_addr, target, MB as u32).await.len(),
        MB
    );
    let status = server.status().await;
    let again = alice(status.clone());
    assert_eq!((again.sessions, again.sessions_started), (1, 2));
    assert!(
        again.download_bytes >= ended.download_bytes + MB as u64,
        "{again:?}"
    );
    assert!(
        status
            .to_table()
            .contains("user alice: 1 session now, 2 since start; "),
        "{}",
        status.to_table()
    );
}

/// `fallback = "direct"`: with the server unreachable (stopped), destinations no route matches
/// are connected directly once the session has had `SESSION_WAIT` to find a path, TCP and UDP
/// alike; a `server` route's destination is still refused; a reload that takes the fallback
/// away refuses the rest again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_server_unreachable_a_fallback_connects_directly() {
    use braid_proxy::config::{PortRange, Route, RouteAction};
    let name = "fallback";
    let server = loopback_server(name).await;
    let mut config = client_config(name, &server, 1, KEY);
    drop(server);
    let (target, kept, echo) = (test_server().await, test_server().await, udp_echo().await);
    config.fallback_direct = true;
    config.routes = vec![Route {
        ports: vec![PortRange {
            first: kept.port(),
            last: kept.port(),
        }],
        ..Route::every(RouteAction::Server)
    }];
    let client = braid_proxy::daemon::start_client(config.clone())
        .await
        .unwrap();
    let proxy = client.socks_addr;
    let started = std::time::Instant::now();
    let got = download(proxy, target, MB as u32).await;
    assert_eq!(sha256(&got), sha256(&pattern(MB, 7)));
    let first = started.elapsed();
    let started = std::time::Instant::now();
    assert_eq!(download(proxy, target, MB as u32).await.len(), MB);
    let second = started.elapsed();
    println!("fallback: first connection after {first:?}, the next in {second:?}");
    assert!(second < Duration::from_secs(2), "{second:?}");
    // A `server` route's destination waits for the server.
    let (code, _) = socks_connect(proxy, "127.0.0.1", kept.port()).await;
    assert_eq!(code, 1, "general failure: no session");
    let association = UdpAssociation::open(proxy).await;
    assert_eq!(
        association.ask(echo, b"polo", 20).await.as_deref(),
        Some(&b"polo"[..])
    );
    let status = client.status().await;
    let fallback = status.fallback.unwrap();
    assert_eq!(fallback.flows, 2);
    assert!(fallback.datagrams >= 1, "{fallback:?}");
    assert!(
        status
            .to_table()
            .contains("fallback direct (while no session): 2 flows"),
        "{}",
        status.to_table()
    );
    config.fallback_direct = false;
    let done = client.reload(config).await;
    assert!(done.changed.contains(&"fallback"), "{done:?}");
    let (code, _) = socks_connect(proxy, "127.0.0.1", target.port()).await;
    assert_eq!(code, 1, "no fallback: refused");
    assert!(client.status().await.fallback.is_none());
}
