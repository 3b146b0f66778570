//! The demo's traffic: an HTTP-ish source on 127.0.0.1 that streams a known byte pattern for as
//! long as the connection stays open, and a downloader that reaches it through the client's
//! SOCKS5 inbound, checks every byte against the pattern and counts them.

use portable_atomic::AtomicU64;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::DemoError;

/// The pattern's period: byte `i` of a stream is `i % PERIOD`.
const PERIOD: usize = 251;

/// One write of the source: a whole number of periods, so every write starts at offset 0 of
/// the pattern.
fn pattern_block() -> Vec<u8> {
    (0..PERIOD * 256).map(|i| (i % PERIOD) as u8).collect()
}

/// Starts the source; returns its address. It serves until the runtime stops.
pub(crate) async fn start_source() -> Result<SocketAddr, DemoError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|source| DemoError::Io {
            what: "binding the download source on 127.0.0.1",
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| DemoError::Io {
        what: "the download source's address",
        source,
    })?;
    let block: Arc<[u8]> = pattern_block().into();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, block.clone()));
        }
    });
    Ok(addr)
}

/// Reads the request head, answers 200 and streams the pattern until the peer goes away.
async fn serve(mut stream: TcpStream, block: Arc<[u8]>) {
    let mut head = Vec::with_capacity(512);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let answer =
        b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n";
    if stream.write_all(answer).await.is_err() {
        return;
    }
    while stream.write_all(&block).await.is_ok() {}
}

/// What a running download shares with the view.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Body bytes received and verified.
    pub bytes: AtomicU64,
    /// Set when the download failed (the reason is the task's result).
    pub failed: AtomicBool,
}

/// SOCKS5 CONNECT (no authentication) through `proxy` to `target`.
async fn socks_connect(proxy: SocketAddr, target: SocketAddr) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(proxy)
        .await
        .map_err(|e| format!("connecting to the SOCKS5 inbound {proxy}: {e}"))?;
    let io = |e: std::io::Error| format!("SOCKS5 exchange: {e}");
    s.write_all(&[5, 1, 0]).await.map_err(io)?;
    let mut choice = [0u8; 2];
    s.read_exact(&mut choice).await.map_err(io)?;
    if choice != [5, 0] {
        return Err(format!("SOCKS5 method refused: {choice:?}"));
    }
    let mut request = vec![5, 1, 0];
    match target.ip() {
        std::net::IpAddr::V4(ip) => {
            request.push(1);
            request.extend_from_slice(&ip.octets());
        }
        std::net::IpAddr::V6(ip) => {
            request.push(4);
            request.extend_from_slice(&ip.octets());
        }
    }
    request.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&request).await.map_err(io)?;
    let mut reply = [0u8; 4];
    s.read_exact(&mut reply).await.map_err(io)?;
    if reply[1] != 0 {
        return Err(format!(
            "SOCKS5 CONNECT refused with reply code {}",
            reply[1]
        ));
    }
    let rest = match reply[3] {
        1 => 6,
        4 => 18,
        t => return Err(format!("SOCKS5 reply with address type {t}")),
    };
    let mut bound = [0u8; 18];
    s.read_exact(&mut bound[..rest]).await.map_err(io)?;
    Ok(s)
}

/// Downloads from `source` through `proxy` until the task is aborted, verifying every byte;
/// returns an error when the stream ends, fails or differs from the pattern.
pub(crate) async fn download(
    proxy: SocketAddr,
    source: SocketAddr,
    progress: Arc<Progress>,
) -> Result<(), String> {
    let result = download_inner(proxy, source, &progress).await;
    if result.is_err() {
        progress.failed.store(true, Ordering::Relaxed);
    }
    result
}

async fn download_inner(
    proxy: SocketAddr,
    source: SocketAddr,
    progress: &Progress,
) -> Result<(), String> {
    let mut s = socks_connect(proxy, source).await?;
    let request = format!("GET /stream HTTP/1.1\r\nHost: {source}\r\n\r\n");
    s.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    let block = pattern_block();
    let mut buf = vec![0u8; 64 * 1024];
    let mut head = Vec::with_capacity(256);
    let mut offset: u64 = 0;
    loop {
        let n = s
            .read(&mut buf)
            .await
            .map_err(|e| format!("after {offset} bytes: {e}"))?;
        if n == 0 {
            return Err(format!("the stream ended after {offset} bytes"));
        }
        let mut body = &buf[..n];
        if !head.ends_with(b"\r\n\r\n") {
            let end = body.len().min(8192);
            let mut used = 0;
            for &b in &body[..end] {
                head.push(b);
                used += 1;
                if head.ends_with(b"\r\n\r\n") {
                    break;
                }
            }
            body = &body[used..];
            if head.ends_with(b"\r\n\r\n") && !head.starts_with(b"HTTP/1.1 200") {
                return Err("the source did not answer 200".into());
            }
        }
        verify(&block, offset, body)?;
        offset += body.len() as u64;
        progress
            .bytes
            .fetch_add(body.len() as u64, Ordering::Relaxed);
    }
}

/// Checks that `data` is the pattern starting at stream offset `offset`.
fn verify(block: &[u8], offset: u64, data: &[u8]) -> Result<(), String> {
    let mut at = offset;
    let mut rest = data;
    while !rest.is_empty() {
        let start = (at % PERIOD as u64) as usize;
        let take = rest.len().min(block.len() - start);
        if rest[..take] != block[start..start + take] {
            return Err(format!("byte pattern differs near offset {at}"));
        }
        rest = &rest[take..];
        at += take as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_accepts_the_pattern_at_any_offset_and_rejects_a_flip() {
        let block = pattern_block();
        let stream: Vec<u8> = (0..200_000u64).map(|i| (i % PERIOD as u64) as u8).collect();
        assert!(verify(&block, 0, &stream).is_ok());
        assert!(verify(&block, 1234, &stream[1234..99_999]).is_ok());
        let mut bad = stream[500..70_000].to_vec();
        bad[65_000] ^= 1;
        assert!(verify(&block, 500, &bad).is_err());
    }
}
