//! Security defaults of the daemons: a wrong key is refused without detail, a wrong pin never
//! joins, loopback egress is refused by the default policy, SOCKS5 username/password and the
//! HTTP CONNECT inbound's Basic credentials are enforced, reloads put new users in force, and the
//! metrics endpoint asks for its bearer token and speaks HTTPS with its certificate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod daemon_common;

use std::net::SocketAddr;
use std::time::Duration;

use braid_proxy::config::{ClientConfig, SocksUser};
use braid_proxy::daemon::{ClientHandle, ServerHandle, start_client, start_server};
use braid_proxy::tls::ServerIdentity;
use braid_sched_core::{SchedulerConfig, SchedulerKind};
use daemon_common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_key_is_refused_and_nothing_leaks() {
    let server = start_server(
        server_config("wrongkey", true),
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let client = start_client(client_config("wrongkey", &server, 2, [0x13; 32]))
        .await
        .unwrap();
    assert!(
        !client.wait_for_paths(1, Duration::from_secs(2)).await,
        "a wrong key joined"
    );
    let status = server.status().await;
    assert!(status.joins_refused >= 2, "{status:?}");
    let for_the_key = status.joins_refused_by_reason.get("bad user or proof");
    assert!(for_the_key.is_some_and(|&n| n >= 2), "{status:?}");
    assert_eq!(status.joins_accepted, 0);
    assert!(status.sessions.is_empty());
    // The refusal itself is one generic byte on a fresh connection: check it by hand.
    use braid_proxy::transport::join::{
        ANSWER2_ALL, JOIN_OK, JOIN_OK_ABANDON, JOIN_OK_BACKUP_FLOOR, JOIN_OK_CREATED,
        JOIN_OK_DATAGRAM_LIMIT, JOIN_OK_FRAGMENTS, JOIN_OK_PING, JOIN_OK_SESSION_NEWS,
        JOIN_REFUSED, PeerKnows,
    };
    let refusal = raw_join_answer(&server, [0x13; 32], PeerKnows::ALL, [1; 16]).await;
    assert_eq!(refusal, vec![JOIN_REFUSED]);
    let refusal = raw_join_answer_2(&server, [0x13; 32], PeerKnows::ALL, [1; 16], true).await;
    assert_eq!(refusal, vec![JOIN_REFUSED], "a refusal has no second byte");
    // A client that does not say it reassembles DATAGRAM_FRAGMENT frames, may send
    // PATH_ABANDON, knows DATAGRAM_LIMIT, opens ping flows, wants to hear whether its join
    // started the session or knows BACKUP_FLOOR (an older one) gets the old answer; one that
    // does learns that the server knows them too.
    for bits in 0..64u8 {
        let knows = PeerKnows {
            fragments: bits & 1 != 0,
            abandon: bits & 2 != 0,
            datagram_limit: bits & 4 != 0,
            ping: bits & 8 != 0,
            session_news: bits & 16 != 0,
            backup_floor: bits & 32 != 0,
        };
        let mut answer = JOIN_OK;
        for (known, bit) in [
            (knows.fragments, JOIN_OK_FRAGMENTS),
            (knows.abandon, JOIN_OK_ABANDON),
            (knows.datagram_limit, JOIN_OK_DATAGRAM_LIMIT),
            (knows.ping, JOIN_OK_PING),
            (knows.session_news, JOIN_OK_SESSION_NEWS),
            (knows.backup_floor, JOIN_OK_BACKUP_FLOOR),
        ] {
            if known {
                answer |= bit;
            }
        }
        // The session was started by the first of these joins (bits 0: not told).
        let accepted = raw_join_answer(&server, KEY, knows, [1; 16]).await;
        assert_eq!(accepted, vec![answer], "{knows:?}");
    }
    // A join that starts a session is told so when it asks, and only then.
    let all = PeerKnows::ALL.bits();
    let started = raw_join_answer(&server, KEY, PeerKnows::ALL, [2; 16]).await;
    assert_eq!(started, vec![all | JOIN_OK_CREATED]);
    let again = raw_join_answer(&server, KEY, PeerKnows::ALL, [2; 16]).await;
    assert_eq!(again, vec![all]);
    let unasked = PeerKnows {
        session_news: false,
        ..PeerKnows::ALL
    };
    let started = raw_join_answer(&server, KEY, unasked, [3; 16]).await;
    assert_eq!(started, vec![unasked.bits()]);
    // A client that reads a second answer byte (flag bit 6) gets one: the server knows
    // PATH_CONGESTION, OPEN's redundant mark and PATH_RATE_CAP.
    let second = raw_join_answer_2(&server, KEY, PeerKnows::ALL, [2; 16], true).await;
    assert_eq!(second, vec![all, ANSWER2_ALL]);
    assert_eq!(ANSWER2_ALL, 0b111);
    // Through the proxy nothing gets out.
    let (code, _) = socks_connect(client.socks_addr, "127.0.0.1", 9).await;
    assert_ne!(code, 0);
}

/// Connects once, sends a JOIN under `key` (saying what it knows: `knows`; not that it reads
/// a second answer byte, as an older client), returns the server's whole answer.
async fn raw_join_answer(
    server: &braid_proxy::daemon::ServerHandle,
    key: [u8; 32],
    knows: braid_proxy::transport::join::PeerKnows,
    session_id: [u8; 16],
) -> Vec<u8> {
    raw_join_answer_2(server, key, knows, session_id, false).await
}

/// [`raw_join_answer`], saying whether the client reads a second answer byte.
async fn raw_join_answer_2(
    server: &braid_proxy::daemon::ServerHandle,
    key: [u8; 32],
    knows: braid_proxy::transport::join::PeerKnows,
    session_id: [u8; 16],
    second_answer_byte: bool,
) -> Vec<u8> {
    use braid_proxy::transport::join::{EXPORTER_LABEL, Join, compute_mac};
    use braid_sched_core::PathId;
    let pin = braid_proxy::config::parse_fingerprint(&server.fingerprint).unwrap();
    let crypto =
        braid_proxy::tls::client_crypto(&braid_proxy::config::ServerTrust::Fingerprint(pin))
            .unwrap();
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(crypto).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(std::sync::Arc::new(quic)));
    let conn = endpoint
        .connect(server.addr, "braid")
        .unwrap()
        .await
        .unwrap();
    let mut exporter = [0u8; 32];
    conn.export_keying_material(&mut exporter, EXPORTER_LABEL, b"")
        .unwrap();
    let join = Join {
        user: "alice".into(),
        session_id,
        path: PathId(0),
        tier: braid_proxy::session::Tier::Primary,
        weight: 1,
        knows,
        second_answer_byte,
        link_name: "raw".into(),
        mac: compute_mac(&key, &exporter, &session_id, PathId(0)),
    };
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&join.encode()).await.unwrap();
    send.finish().unwrap();
    let answer = recv.read_to_end(64).await.unwrap();
    conn.close(0u32.into(), b"");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_pin_never_joins() {
    let server = start_server(
        server_config("wrongpin", true),
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let mut config = client_config("wrongpin", &server, 1, KEY);
    config.trust = braid_proxy::config::ServerTrust::Fingerprint([0; 32]);
    let client = start_client(config).await.unwrap();
    assert!(!client.wait_for_paths(1, Duration::from_secs(2)).await);
    assert_eq!(server.status().await.joins_accepted, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_policy_refuses_loopback_egress() {
    let server = start_server(
        server_config("policy", false),
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let client = start_client(client_config("policy", &server, 2, KEY))
        .await
        .unwrap();
    assert!(client.wait_for_paths(2, Duration::from_secs(10)).await);
    let target = test_server().await;
    for host in ["127.0.0.1", "localhost", "::1"] {
        let (code, _) = socks_connect(client.socks_addr, host, target.port()).await;
        assert_eq!(
            code, 0x02,
            "{host}: expected 'connection not allowed by ruleset'"
        );
    }
}

/// `[egress] allow_networks`, `deny_networks` and `deny_ports`: a listed network opens
/// loopback, a denied one wins over it, a denied port is refused everywhere; a reload that
/// denies a port stops the datagrams of a UDP association already open, and one that lifts it
/// lets them through again, on the same association.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_lists_refuse_ports_and_networks_and_reach_open_udp_associations() {
    use braid_proxy::config::{IpNet, PortRange};
    let net = |s: &str| s.parse::<IpNet>().unwrap();
    let target = test_server().await;
    let echo = udp_echo().await;
    let mut config = server_config("egresslists", false);
    config.egress.allow_networks = vec![net("127.0.0.0/8")];
    config.egress.deny_networks = vec![net("127.0.0.2/32")];
    let server = start_server(config.clone(), ServerIdentity::generate("braid").unwrap())
        .await
        .unwrap();
    let client = start_client(client_config("egresslists", &server, 2, KEY))
        .await
        .unwrap();
    assert!(client.wait_for_paths(2, Duration::from_secs(10)).await);
    // Loopback through the allowed network; ::1 is not in it.
    assert_eq!(
        download(client.socks_addr, target, 1000).await,
        pattern(1000, 7)
    );
    assert_eq!(
        socks_connect(client.socks_addr, "::1", target.port())
            .await
            .0,
        0x02
    );
    // 127.0.0.2 is in both lists: refused (not "connection refused", 0x05, as a connect to it
    // would answer).
    assert_eq!(
        socks_connect(client.socks_addr, "127.0.0.2", target.port())
            .await
            .0,
        0x02
    );
    let udp = UdpAssociation::open(client.socks_addr).await;
    assert_eq!(
        udp.ask(echo, b"before", 5).await.as_deref(),
        Some(&b"before"[..])
    );
    // The echo's port denied by a reload: the open association's next datagrams are dropped,
    // and a TCP connect to a denied port is refused.
    let mut denied = config.clone();
    denied.egress.deny_ports = vec![
        PortRange {
            first: echo.port(),
            last: echo.port(),
        },
        PortRange {
            first: target.port(),
            last: target.port(),
        },
    ];
    assert_eq!(server.reload(denied).await.changed, ["egress"]);
    assert_eq!(udp.ask(echo, b"denied", 3).await, None);
    assert_eq!(
        socks_connect(client.socks_addr, "127.0.0.1", target.port())
            .await
            .0,
        0x02
    );
    // Lifted again: the same association carries datagrams again.
    assert_eq!(server.reload(config).await.changed, ["egress"]);
    assert_eq!(
        udp.ask(echo, b"after", 5).await.as_deref(),
        Some(&b"after"[..])
    );
}

/// A server and a client whose inbounds have one user, bob (password "s3cret"); the client's
/// configuration.
async fn pair_with_user_bob(name: &str) -> (ServerHandle, ClientHandle, ClientConfig) {
    let server = start_server(
        server_config(name, true),
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let mut config = client_config(name, &server, 1, KEY);
    config.socks_users = vec![socks_user("bob", "s3cret")];
    let client = start_client(config.clone()).await.unwrap();
    assert!(client.wait_for_paths(1, Duration::from_secs(10)).await);
    (server, client, config)
}

fn socks_user(name: &str, password: &str) -> SocksUser {
    SocksUser {
        name: name.into(),
        password: password.into(),
    }
}

/// The method the SOCKS5 inbound at `proxy` selects for a greeting that offers `method` alone,
/// and the connection.
async fn socks_method(proxy: SocketAddr, method: u8) -> (u8, TcpStream) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(&[5, 1, method]).await.unwrap();
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel).await.unwrap();
    assert_eq!(sel[0], 5);
    (sel[1], s)
}

/// Username/password authentication (RFC 1929) at the SOCKS5 inbound at `proxy`: its status
/// (0 accepted) and the connection.
async fn socks_login(proxy: SocketAddr, user: &str, password: &str) -> (u8, TcpStream) {
    let (method, mut s) = socks_method(proxy, 2).await;
    assert_eq!(method, 2, "username/password selected");
    let mut auth = vec![1, user.len() as u8];
    auth.extend_from_slice(user.as_bytes());
    auth.push(password.len() as u8);
    auth.extend_from_slice(password.as_bytes());
    s.write_all(&auth).await.unwrap();
    let mut status = [0u8; 2];
    s.read_exact(&mut status).await.unwrap();
    assert_eq!(status[0], 1);
    (status[1], s)
}

/// With users, SOCKS5 asks for their username and password, and SOCKS4 is rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks_username_password_is_enforced() {
    let (_server, client, _) = pair_with_user_bob("socksauth").await;
    // No-auth only: no acceptable method.
    assert_eq!(socks_method(client.socks_addr, 0).await.0, 0xff);
    assert_eq!(socks_login(client.socks_addr, "bob", "wrong").await.0, 1);
    assert_eq!(socks_login(client.socks_addr, "bob", "s3cret").await.0, 0);
    // SOCKS4 and 4a carry no password: rejected (91), even with a user's name as the user id,
    // and the connection closed.
    for request in [
        &b"\x04\x01\x00\x50\x7f\x00\x00\x01bob\x00"[..],
        b"\x04\x01\x00\x50\x00\x00\x00\x01bob\x00localhost\x00",
    ] {
        let mut s = TcpStream::connect(client.socks_addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut reply))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(reply, [0, 91, 0, 0, 0, 0, 0, 0]);
    }
}

/// The HTTP CONNECT head for `target` with an optional `Proxy-Authorization` value, sent on a
/// fresh connection to `proxy`; the status line of the answer.
async fn http_status(
    proxy: std::net::SocketAddr,
    target: &str,
    authorization: Option<&str>,
) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let auth = authorization.map_or(String::new(), |a| format!("Proxy-Authorization: {a}\r\n"));
    let head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut reply))
        .await
        .unwrap()
        .unwrap();
    let reply = String::from_utf8_lossy(&reply).into_owned();
    reply.lines().next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connect_basic_credentials_are_enforced_with_users() {
    let (_server, client, _) = pair_with_user_bob("httpauth").await;
    let proxy = client.http_addr.unwrap();
    // Port 1 on loopback: nothing listens, so a request that gets past the credentials is
    // answered 502 by the egress, and one that does not, 407 before any flow is opened.
    let target = "127.0.0.1:1";
    // "bob:s3cret", "bob:wrong", "eve:s3cret" in base64.
    for (authorization, want) in [
        (None, "407"),
        (Some("Basic Ym9iOndyb25n"), "407"),
        (Some("Basic ZXZlOnMzY3JldA=="), "407"),
        (Some("Bearer Ym9iOnMzY3JldA=="), "407"),
        (Some("Basic Ym9iOnMzY3JldA=="), "502"),
        (Some("basic Ym9iOnMzY3JldA=="), "502"),
    ] {
        let status = http_status(proxy, target, authorization).await;
        assert!(
            status.starts_with(&format!("HTTP/1.1 {want} ")),
            "{authorization:?}: {status}"
        );
    }
    // A plain request to forward needs the credentials too.
    for (authorization, want) in [
        ("", "HTTP/1.1 407 "),
        (
            "\r\nProxy-Authorization: Basic Ym9iOnMzY3JldA==",
            "HTTP/1.1 502 ",
        ),
    ] {
        let request = format!("GET http://{target}/ HTTP/1.1{authorization}");
        let (status, head, _) = http(proxy, &request).await;
        assert!(status.starts_with(want), "{authorization:?}: {head}");
    }
}

/// A reload (what SIGHUP does to `braid server`) puts users, the egress policy and the
/// scheduler in force at once: a user added joins; a user removed loses the session it had (its
/// client is told, and its joins are refused); the egress policy changes for new flows of
/// running sessions, and the scheduler for running sessions too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_and_revokes_users_and_changes_the_egress_policy() {
    let target = test_server().await;
    let first = server_config("reload", true);
    let server = start_server(first.clone(), ServerIdentity::generate("braid").unwrap())
        .await
        .unwrap();
    let alice = start_client(client_config("reload-alice", &server, 2, KEY))
        .await
        .unwrap();
    assert!(alice.wait_for_paths(2, Duration::from_secs(10)).await);
    let bob_key = [0x77; 32];
    let bob_config = || braid_proxy::config::ClientConfig {
        user: "bob".into(),
        ..client_config("reload-bob", &server, 2, bob_key)
    };
    // Before: bob is refused.
    let mut early = start_client(bob_config()).await.unwrap();
    assert!(!early.wait_for_paths(1, Duration::from_secs(2)).await);
    early.shutdown();
    // Bob added (the server's `listen` is reloaded too: `daemon_e2e`'s
    // `a_reload_moves_the_server_s_listen_and_the_paths_there_go_on`).
    let mut second = first.clone();
    second.users.push(braid_proxy::config::UserEntry {
        name: "bob".into(),
        key: bob_key,
    });
    // And another congestion controller, which the running sessions take at once.
    second.session.congestion = braid_proxy::session::congestion::CongestionAlgorithm::NewReno;
    let done = server.reload(second.clone()).await;
    assert_eq!(done.changed, ["user", "session.congestion"]);
    assert!(done.needs_restart.is_empty(), "{done:?}");
    assert!(done.revoked.is_empty());
    let running = server.status().await;
    assert_eq!(running.sessions.len(), 1);
    assert_eq!(running.sessions[0].congestion, "newreno", "{running:?}");
    let bob = start_client(bob_config()).await.unwrap();
    assert!(
        bob.wait_for_paths(2, Duration::from_secs(10)).await,
        "bob did not join"
    );
    assert_eq!(
        download(bob.socks_addr, target, 1000).await,
        pattern(1000, 7)
    );
    // Alice removed and loopback egress forbidden: alice's session ends, bob's stays but its
    // new flows meet the new policy.
    let mut third = second.clone();
    third.users.retain(|u| u.name != "alice");
    third.egress.allow_loopback = false;
    third.scheduler = SchedulerConfig::new(SchedulerKind::RoundRobin);
    let done = server.reload(third).await;
    assert_eq!(done.changed, ["user", "scheduler", "egress"]);
    assert_eq!(done.revoked.len(), 1);
    assert!(done.revoked.iter().all(|s| s.is_closed()));
    let status = server.status().await;
    assert_eq!(status.sessions.len(), 1, "{status:?}");
    assert_eq!(status.sessions[0].scheduler, "rr", "bob's running session");
    let (code, _) = socks_connect(bob.socks_addr, "127.0.0.1", target.port()).await;
    assert_ne!(code, 0, "loopback egress after the reload");
    assert!(bob.wait_for_paths(2, Duration::from_secs(1)).await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _) = socks_connect(alice.socks_addr, "127.0.0.1", target.port()).await;
        if code != 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "alice still gets through"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.status().await.sessions.len(), 1);
}

/// A client reload (what SIGHUP does to `braid client`) puts new SOCKS5 and HTTP CONNECT users
/// in force for every new connection and a new scheduler in the running session; a connection
/// already relaying keeps going; what only a restart can change is named and keeps its value;
/// a file with no users opens the inbounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reload_changes_the_inbound_users_and_names_what_needs_a_restart() {
    let (_server, client, config) = pair_with_user_bob("clientreload").await;
    let target = test_server().await;
    let (status, mut relaying) = socks_login(client.socks_addr, "bob", "s3cret").await;
    assert_eq!(status, 0);
    let mut request = vec![5, 1, 0, 1, 127, 0, 0, 1];
    request.extend_from_slice(&target.port().to_be_bytes());
    relaying.write_all(&request).await.unwrap();
    let mut reply = [0u8; 10];
    relaying.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[1], 0, "connected");
    let mut echo = [0u8; 4];
    // The test server echoes what follows a first byte other than 'D' or 'U'.
    relaying.write_all(b"Eone!").await.unwrap();
    relaying.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"one!");

    let mut next = config.clone();
    next.socks_users = vec![socks_user("carol", "n3w")];
    next.scheduler = SchedulerConfig::new(SchedulerKind::RoundRobin);
    next.session.flow_receive_window *= 2;
    next.session.congestion = braid_proxy::session::congestion::CongestionAlgorithm::Bbr;
    let session = client.status().await.sessions[0].session.clone();
    let done = client.reload(next.clone()).await;
    assert_eq!(
        done.changed,
        ["socks.users", "scheduler", "session.congestion"]
    );
    assert_eq!(done.needs_restart, ["session"]);
    // The running session took the new scheduler and congestion controller.
    let status = client.status().await;
    assert_eq!(status.sessions[0].session, session);
    assert_eq!(status.sessions[0].scheduler, "rr", "{status:?}");
    assert_eq!(status.sessions[0].congestion, "bbr", "{status:?}");
    assert!(status.sessions[0].paths.iter().all(|p| p.bbr.is_some()));
    // The connection that was relaying still is.
    relaying.write_all(b"two!").await.unwrap();
    relaying.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"two!");
    assert_eq!(socks_login(client.socks_addr, "bob", "s3cret").await.0, 1);
    assert_eq!(socks_login(client.socks_addr, "carol", "n3w").await.0, 0);
    // "bob:s3cret" and "carol:n3w" in base64; port 1 on loopback: past the credentials, 502.
    let proxy = client.http_addr.unwrap();
    let status = http_status(proxy, "127.0.0.1:1", Some("Basic Ym9iOnMzY3JldA==")).await;
    assert!(status.starts_with("HTTP/1.1 407 "), "{status}");
    let status = http_status(proxy, "127.0.0.1:1", Some("Basic Y2Fyb2w6bjN3")).await;
    assert!(status.starts_with("HTTP/1.1 502 "), "{status}");

    // The same file again: nothing changes, and what needs a restart is still named.
    let again = client.reload(next.clone()).await;
    assert!(again.changed.is_empty(), "{again:?}");
    assert_eq!(again.needs_restart, ["session"]);
    // No users: no authentication.
    next.socks_users.clear();
    assert_eq!(client.reload(next).await.changed, ["socks.users"]);
    assert_eq!(socks_method(client.socks_addr, 0).await.0, 0);
}

/// `GET /metrics` on `addr` with `token` as the bearer token (none: no Authorization header);
/// the status line and the head of the answer.
async fn metrics_with(addr: SocketAddr, token: Option<&str>) -> (String, String) {
    let auth = token.map_or(String::new(), |t| format!("\r\nAuthorization: Bearer {t}"));
    let (status, head, _) = http(addr, &format!("GET /metrics HTTP/1.1{auth}")).await;
    (status, head)
}

/// With `metrics_token` set, a metrics request without the token, or with another, is answered
/// 401 with the Bearer challenge, and one with it gets the metrics; a reload changes the token
/// (or lifts it) from the next request on, in both daemons.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_asks_for_its_token_and_a_reload_changes_it() {
    use braid_proxy::config::{MetricsToken, ServerConfig};
    let first = "first-token-0123456789";
    let second = "second-token-0123456789";
    let token = |t: &str| Some(MetricsToken::new(t).unwrap());
    let server_conf = ServerConfig {
        metrics_token: token(first),
        ..server_config("metricsauth", true)
    };
    let server = start_server(
        server_conf.clone(),
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let client_conf = client_config("metricsauth", &server, 1, KEY);
    let client = start_client(client_conf.clone()).await.unwrap();
    assert!(client.wait_for_paths(1, Duration::from_secs(10)).await);
    let (on_server, on_client) = (server.metrics_addr.unwrap(), client.metrics_addr.unwrap());
    const OK: &str = "HTTP/1.1 200 OK";
    const REFUSED: &str = "HTTP/1.1 401 Unauthorized";
    for presented in [None, Some(second), Some("first-token-012345678")] {
        let (status, head) = metrics_with(on_server, presented).await;
        assert_eq!(status, REFUSED, "{presented:?}");
        assert!(
            head.contains("WWW-Authenticate: Bearer realm=\"braid\""),
            "{head}"
        );
    }
    assert_eq!(metrics_with(on_server, Some(first)).await.0, OK);
    // The client has no token: open.
    assert_eq!(metrics_with(on_client, None).await.0, OK);
    // Reloads: the server's token replaced, the client's set.
    let done = server
        .reload(ServerConfig {
            metrics_token: token(second),
            ..server_conf.clone()
        })
        .await;
    assert_eq!(done.changed, ["metrics_token"]);
    assert_eq!(metrics_with(on_server, Some(first)).await.0, REFUSED);
    assert_eq!(metrics_with(on_server, Some(second)).await.0, OK);
    let done = client
        .reload(ClientConfig {
            metrics_token: token(first),
            ..client_conf.clone()
        })
        .await;
    assert_eq!(done.changed, ["metrics_token"]);
    assert!(done.needs_restart.is_empty(), "{:?}", done.needs_restart);
    assert_eq!(metrics_with(on_client, None).await.0, REFUSED);
    assert_eq!(metrics_with(on_client, Some(first)).await.0, OK);
    // Lifted again.
    let done = server
        .reload(ServerConfig {
            metrics_token: None,
            ..server_conf
        })
        .await;
    assert_eq!(done.changed, ["metrics_token"]);
    assert_eq!(metrics_with(on_server, None).await.0, OK);
}

/// A fresh self-signed certificate for `localhost` and its key, written as PEM to `dir/cert.pem`
/// and `dir/key.pem` (replacing what was there); the certificate (DER).
fn write_metrics_identity(dir: &std::path::Path) -> rustls::pki_types::CertificateDer<'static> {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.join("cert.pem"), ck.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), ck.signing_key.serialize_pem()).unwrap();
    ck.cert.der().clone()
}

/// `GET /metrics` over TLS on `addr`, trusting only `trusted` (as `localhost`), with `token`
/// as the bearer token; the status line and the body, or the handshake's error.
async fn metrics_over_tls(
    addr: SocketAddr,
    trusted: &rustls::pki_types::CertificateDer<'static>,
    token: Option<&str>,
) -> Result<(String, String), std::io::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .unwrap()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET /metrics HTTP/1.1\r\nHost: braid\r\n{auth}\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    Ok((head.lines().next().unwrap().to_owned(), body.to_owned()))
}

/// With `metrics_tls_cert` and `metrics_tls_key` the endpoint speaks HTTPS: a client trusting
/// the certificate gets the metrics (with the token), one trusting another certificate does
/// not get past the handshake, and a plain HTTP request is answered 400 and told to use HTTPS.
/// A reload of the same files with a renewed certificate serves the new one from the next
/// connection on; a reload turns HTTPS on in the client and off in the server, without moving
/// the endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_speaks_https_with_its_certificate_and_a_reload_renews_it() {
    use braid_proxy::config::{MetricsTls, MetricsToken, ServerConfig};
    let dir = std::env::temp_dir().join(format!("braid-test-metrics-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let read = || MetricsTls::read(std::path::Path::new("test.toml"), &cert, &key).unwrap();
    let first = write_metrics_identity(&dir);
    let token = "https-token-0123456789";
    let server_conf = ServerConfig {
        metrics_token: Some(MetricsToken::new(token).unwrap()),
        metrics_tls: Some(read()),
        ..server_config("metricstls", true)
    };
    let server = start_server(
        server_conf.clone(),
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let client_conf = client_config("metricstls", &server, 1, KEY);
    let client = start_client(client_conf.clone()).await.unwrap();
    assert!(client.wait_for_paths(1, Duration::from_secs(10)).await);
    let on_server = server.metrics_addr.unwrap();
    const OK: &str = "HTTP/1.1 200 OK";

    let (status, body) = metrics_over_tls(on_server, &first, Some(token))
        .await
        .unwrap();
    assert_eq!(status, OK);
    assert!(body.contains("braid_joins_accepted_total 1"), "{body}");
    let (status, _) = metrics_over_tls(on_server, &first, None).await.unwrap();
    assert_eq!(status, "HTTP/1.1 401 Unauthorized");
    let (status, head) = metrics_with(on_server, Some(token)).await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    assert!(!head.contains("braid_"), "{head}");
    let (_, _, said) = http(on_server, "GET /metrics HTTP/1.1").await;
    assert!(said.contains("speaks HTTPS"), "{said}");
    let elsewhere = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let other = elsewhere.cert.der().clone();
    assert!(
        metrics_over_tls(on_server, &other, Some(token))
            .await
            .is_err()
    );

    // The same files renewed: the next connection gets the new certificate.
    let renewed = write_metrics_identity(&dir);
    let done = server
        .reload(ServerConfig {
            metrics_tls: Some(read()),
            ..server_conf.clone()
        })
        .await;
    assert_eq!(done.changed, ["metrics_tls"]);
    assert!(
        metrics_over_tls(on_server, &first, Some(token))
            .await
            .is_err()
    );
    let (status, _) = metrics_over_tls(on_server, &renewed, Some(token))
        .await
        .unwrap();
    assert_eq!(status, OK);
    assert_eq!(server.metrics_listening(), Some(on_server));

    // The client's endpoint turns HTTPS on; the server's off.
    let on_client = client.metrics_addr.unwrap();
    assert_eq!(metrics_with(on_client, None).await.0, OK);
    let done = client
        .reload(ClientConfig {
            metrics_tls: Some(read()),
            ..client_conf.clone()
        })
        .await;
    assert_eq!(done.changed, ["metrics_tls"]);
    assert!(done.needs_restart.is_empty(), "{:?}", done.needs_restart);
    let (status, body) = metrics_over_tls(on_client, &renewed, None).await.unwrap();
    assert_eq!(status, OK);
    assert!(body.contains("braid_link_joined"), "{body}");
    assert_eq!(
        metrics_with(on_client, None).await.0,
        "HTTP/1.1 400 Bad Request"
    );
    let done = server
        .reload(ServerConfig {
            metrics_tls: None,
            ..server_conf
        })
        .await;
    assert_eq!(done.changed, ["metrics_tls"]);
    assert_eq!(metrics_with(on_server, Some(token)).await.0, OK);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reload moves the SOCKS5 listener, starts the HTTP inbound and stops the metrics endpoint
/// (then starts it again elsewhere) without a restart, and moves and stops the server's metrics
/// endpoint: the new addresses serve, the old ones
/// refuse, an echo connection accepted on the old SOCKS5 listener carries on, the status lists
/// the inbounds where they listen now, and an address that cannot be bound leaves its listener
/// as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_moves_starts_and_stops_the_listeners() {
    let server_conf = server_config("listeners", true);
    let server = start_server(
        server_conf.clone(),
        ServerIdentity::generate("braid").unwrap(),
    )
    .await
    .unwrap();
    let start = ClientConfig {
        http_listen: None,
        ..client_config("listeners", &server, 1, KEY)
    };
    let client = start_client(start.clone()).await.unwrap();
    assert!(client.wait_for_paths(1, Duration::from_secs(10)).await);
    let target = test_server().await;
    let before = client.listening();
    assert_eq!(before.http, None);
    let (code, mut echo) =
        socks_connect(before.socks, &target.ip().to_string(), target.port()).await;
    assert_eq!(code, 0);
    echo.write_all(b"Ebefore").await.unwrap();
    // Another loopback address, any port: a new address for the same setting.
    let moved = ClientConfig {
        socks_listen: "127.0.0.2:0".parse().unwrap(),
        http_listen: Some("127.0.0.1:0".parse().unwrap()),
        metrics_listen: None,
        ..start.clone()
    };
    let done = client.reload(moved.clone()).await;
    assert_eq!(
        done.changed,
        ["socks_listen", "http_listen", "metrics_listen"]
    );
    assert!(done.needs_restart.is_empty(), "{done:?}");
    let now = client.listening();
    assert_eq!(now.socks.ip().to_string(), "127.0.0.2");
    assert_eq!(now.metrics, None);
    let http_addr = now.http.expect("the HTTP inbound started");
    // The old listeners refuse, the new ones serve.
    assert!(TcpStream::connect(before.socks).await.is_err());
    assert!(TcpStream::connect(before.metrics.unwrap()).await.is_err());
    let got = download(now.socks, target, 100_000).await;
    assert_eq!(got, pattern(100_000, 7));
    let (status, _, _) = http(http_addr, "GET http://127.0.0.1:1/ HTTP/1.1").await;
    assert_eq!(status, "HTTP/1.1 502 Bad Gateway");
    // The connection accepted before the move carries on.
    echo.write_all(b"after").await.unwrap();
    let mut back = [0u8; 11];
    echo.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"beforeafter");
    let inbounds = client.status().await.inbounds;
    let listed: Vec<_> = inbounds
        .iter()
        .map(|i| (i.name.as_str(), i.listen.clone()))
        .collect();
    assert_eq!(
        listed,
        [
            ("socks5", now.socks.to_string()),
            ("http", http_addr.to_string())
        ]
    );
    assert_eq!(inbounds[0].accepted, 1, "counted from the move on");
    // An address in use: the listener stays where it is.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let done = client
        .reload(ClientConfig {
            socks_listen: taken.local_addr().unwrap(),
            metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
            ..moved.clone()
        })
        .await;
    assert_eq!(done.changed, ["metrics_listen"]);
    assert_eq!(client.listening().socks, now.socks);
    let metrics = client
        .listening()
        .metrics
        .expect("the endpoint started again");
    let (status, _, _) = http(metrics, "GET /metrics HTTP/1.1").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    // Removed: the HTTP inbound stops and leaves the status.
    let done = client
        .reload(ClientConfig {
            http_listen: None,
            metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
            ..moved
        })
        .await;
    assert_eq!(done.changed, ["http_listen"]);
    assert!(TcpStream::connect(http_addr).await.is_err());
    // The server's metrics endpoint moves, then stops.
    let old_metrics = server.metrics_listening().expect("the server's endpoint");
    let done = server
        .reload(braid_proxy::config::ServerConfig {
            metrics_listen: Some("127.0.0.2:0".parse().unwrap()),
            ..server_conf.clone()
        })
        .await;
    assert_eq!(done.changed, ["metrics_listen"]);
    assert!(done.needs_restart.is_empty(), "{:?}", done.needs_restart);
    let moved_metrics = server.metrics_listening().unwrap();
    assert_eq!(moved_metrics.ip().to_string(), "127.0.0.2");
    assert!(TcpStream::connect(old_metrics).await.is_err());
    let (status, _, _) = http(moved_metrics, "GET /metrics HTTP/1.1").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let done = server
        .reload(braid_proxy::config::ServerConfig {
            metrics_listen: None,
            ..server_conf
        })
        .await;
    assert_eq!(done.changed, ["metrics_listen"]);
    assert_eq!(server.metrics_listening(), None);
    assert!(TcpStream::connect(moved_metrics).await.is_err());
    let names: Vec<_> = client
        .status()
        .await
        .inbounds
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(names, ["socks5"]);
}

/// `[limits] max_sessions_per_user`: one user's clients beyond it are refused while another
/// user still joins, and a reload that raises it lets the next one in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_user_s_clients_cannot_take_every_session() {
    let bob_key = [0x77; 32];
    let mut config = server_config("per-user", true);
    config.users.push(braid_proxy::config::UserEntry {
        name: "bob".into(),
        key: bob_key,
    });
    config.max_sessions_per_user = 2;
    let server = start_server(config.clone(), ServerIdentity::generate("braid").unwrap())
        .await
        .unwrap();
    let alice = |i: usize| {
        let config = client_config(&format!("per-user-alice{i}"), &server, 1, KEY);
        async move { start_client(config).await.unwrap() }
    };
    let mut joined = Vec::new();
    for i in 0..2 {
        let client = alice(i).await;
        assert!(client.wait_for_paths(1, Duration::from_secs(10)).await);
        joined.push(client);
    }
    let mut third = alice(2).await;
    assert!(!third.wait_for_paths(1, Duration::from_secs(2)).await);
    third.shutdown();
    let status = server.status().await;
    assert_eq!(status.sessions.len(), 2);
    assert!(status.joins_refused >= 1, "{status:?}");
    let by_limit = status.joins_refused_by_reason["the user's session limit reached"];
    assert!(by_limit >= 1, "{status:?}");
    assert!(
        status.to_table().contains(&format!(
            "joins refused by reason: the user's session limit reached {by_limit}\n"
        )),
        "{}",
        status.to_table()
    );
    let prometheus = braid_proxy::metrics::render(&status);
    assert!(
        prometheus.contains(&format!(
            "braid_joins_refused_by_reason_total{{reason=\"the user's session limit reached\"}} {by_limit}"
        )),
        "{prometheus}"
    );
    let bob = start_client(ClientConfig {
        user: "bob".into(),
        ..client_config("per-user-bob", &server, 1, bob_key)
    })
    .await
    .unwrap();
    assert!(
        bob.wait_for_paths(1, Duration::from_secs(10)).await,
        "another user was refused"
    );
    config.max_sessions_per_user = 3;
    let done = server.reload(config).await;
    assert_eq!(done.changed, ["limits.max_sessions_per_user"], "{done:?}");
    let again = alice(3).await;
    assert!(again.wait_for_paths(1, Duration::from_secs(10)).await);
    assert_eq!(server.status().await.sessions.len(), 4);
}
