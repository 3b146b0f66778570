//! Shared by the tests that stop a server under a running client and start it again: an origin
//! server that sends until its connection fails, and the server started again at its address.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use braid_proxy::config::ServerConfig;
use braid_proxy::daemon::{ServerHandle, start_server};
use braid_proxy::tls::ServerIdentity;
use tokio::io::AsyncWriteExt as _;

/// A TCP server on 127.0.0.1 whose connections are sent 16 KiB every `pause` (zero: as fast as
/// they take it) until they fail.
pub async fn endless_origin(pause: Duration) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let chunk = vec![b'x'; 16 * 1024];
                while s.write_all(&chunk).await.is_ok() {
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                }
            });
        }
    });
    origin
}

/// The server of `config` and `identity` started again at `addr` (where a stopped one
/// listened), trying for up to 5 s while the port is not free yet.
pub async fn start_server_again(
    addr: SocketAddr,
    config: &ServerConfig,
    identity: &ServerIdentity,
) -> ServerHandle {
    for _ in 0..50 {
        let config = ServerConfig {
            listen: addr,
            ..config.clone()
        };
        match start_server(config, identity.clone()).await {
            Ok(s) => return s,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("the server could not listen at {addr} again");
}
