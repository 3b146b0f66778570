//! Stopping a daemon tells the other one (the path `braid server`/`braid client` take on SIGTERM):
//! after the server's graceful shutdown the client's open SOCKS5 flow ends at once, instead of
//! hanging until the session's 30 s idle timeout; after the client's, the server's session and
//! its egress connection end. All on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod daemon_common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use braid_proxy::daemon::{ClientHandle, ServerHandle};
use daemon_common::*;
use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Well under the session's 30 s idle timeout, well over the ~2 s a graceful shutdown may take.
const TOLD_WITHIN: Duration = Duration::from_secs(5);

/// A TCP server that accepts and hands over each connection, sending nothing.
async fn silent_server() -> (SocketAddr, mpsc::UnboundedReceiver<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            if tx.send(s).is_err() {
                return;
            }
        }
    });
    (addr, rx)
}

/// Starts waiting for EOF or an error on `s` (which must see no data); the task answers how long
/// after `since` it came.
fn time_to_end(mut s: TcpStream, since: Instant) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let mut buf = [0u8; 16];
        match tokio::time::timeout_at((since + TOLD_WITHIN).into(), s.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => since.elapsed(),
            Ok(Ok(n)) => panic!("{n} unexpected bytes"),
            Err(_) => panic!("no EOF or reset within {TOLD_WITHIN:?}"),
        }
    })
}

/// A server and a client over two links with one SOCKS5 flow open through them to a silent
/// server: the daemons, the flow's client end and the server's egress connection.
async fn pair_with_a_flow(name: &str) -> (ServerHandle, ClientHandle, TcpStream, TcpStream) {
    let (server, client) = pair(name, 2).await;
    let (target, mut accepted) = silent_server().await;
    let (code, flow) = socks_connect(client.socks_addr, "127.0.0.1", target.port()).await;
    assert_eq!(code, 0);
    let egress = tokio::time::timeout(TOLD_WITHIN, accepted.recv())
        .await
        .unwrap()
        .unwrap();
    (server, client, flow, egress)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_shutdown_ends_the_clients_open_flow_at_once() {
    let (mut server, client, flow, _egress) = pair_with_a_flow("stop-server").await;
    let session = client.session().expect("client session");

    let started = Instant::now();
    let eof = time_to_end(flow, started);
    server.shutdown_gracefully().await;
    let shutdown_took = started.elapsed();
    let eof_after = eof.await.unwrap();
    eprintln!("server shutdown took {shutdown_took:?}; client flow ended after {eof_after:?}");
    assert!(
        shutdown_took < Duration::from_millis(2500),
        "{shutdown_took:?}"
    );

    // The session the flow ran in is gone, not waiting for its idle timeout.
    let deadline = Instant::now() + TOLD_WITHIN;
    while !session.is_closed() {
        assert!(Instant::now() < deadline, "client session still open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_shutdown_ends_the_servers_session_and_egress() {
    let (server, mut client, _flow, egress) = pair_with_a_flow("stop-client").await;
    assert_eq!(server.status().await.sessions.len(), 1);

    let started = Instant::now();
    let eof = time_to_end(egress, started);
    client.shutdown_gracefully().await;
    let shutdown_took = started.elapsed();
    let eof_after = eof.await.unwrap();
    eprintln!("client shutdown took {shutdown_took:?}; server egress ended after {eof_after:?}");
    assert!(
        shutdown_took < Duration::from_millis(2500),
        "{shutdown_took:?}"
    );

    let deadline = Instant::now() + TOLD_WITHIN;
    while !server.status().await.sessions.is_empty() {
        assert!(Instant::now() < deadline, "server session still open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
