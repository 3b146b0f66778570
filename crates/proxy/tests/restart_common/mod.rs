//! Shared by the tests that end sessions under running flows: an origin server that sends
//! until its connection fails, the server started again at its address, and how an
//! application's connection ended.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use braid_proxy::config::ServerConfig;
use braid_proxy::daemon::{ServerHandle, start_server};
use braid_proxy::tls::ServerIdentity;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

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
            listen: vec![addr],
            ..config.clone()
        };
        match start_server(config, identity.clone()).await {
            Ok(s) => return s,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("the server could not listen at {addr} again");
}

/// Reads `s` until it ends; how it ended: `Ok(bytes)` at a clean end (a FIN), or the error
/// (a reset) and the bytes read before it.
pub async fn read_until_end(
    s: &mut tokio::net::TcpStream,
) -> Result<usize, (std::io::ErrorKind, usize)> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    let work = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) => return Ok(total),
                Ok(n) => total += n,
                Err(e) => return Err((e.kind(), total)),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), work)
        .await
        .expect("the connection never ended")
}
