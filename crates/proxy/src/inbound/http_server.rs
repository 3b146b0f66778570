//! The client's HTTP proxy inbound: a tunnel per CONNECT request (RFC 9110 §9.3.6), and plain
//! requests whose target is an absolute `http://` URL forwarded to that URL's server, their heads
//! rewritten for it (RFC 9112 §3.2.2; `curl -x`, `http_proxy=` for `http://` URLs), one after
//! another on a kept-alive client connection, the flow to the server kept for the next request to
//! the same host and port ([`http_forward`]); a destination the server cannot or may not reach
//! answers 502 Bad Gateway, a request that is neither 400.
//! With users configured (`[socks] users`, shared with the SOCKS5 inbound) a request must carry
//! one user's `Proxy-Authorization: Basic` credentials (RFC 7617), or is answered 407; without
//! users it has no authentication and should listen on loopback only (the default).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::http_connect::{
    self, AUTH_REQUIRED, BAD_GATEWAY, BAD_REQUEST, ESTABLISHED, HEADERS_TOO_LARGE,
    HttpConnectError, MAX_HEAD,
};
use super::http_forward::{self, Next, Origin};
use super::http_message::HeadScan;
use super::server::{
    Deadline, InboundContext, InboundCounters, InboundError, accept_loop, read_message, relay,
};
use crate::session::Target;

/// How long a client connection may wait between forwarded requests before braid closes it
/// (browsers keep an idle proxy connection for up to two minutes, and open another when braid
/// has closed it).
pub const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(60);

/// Serves the HTTP proxy (CONNECT and `http://` requests) on `listener` until the task is
/// dropped, counting its connections in `counters`.
pub async fn serve_http_connect(
    listener: TcpListener,
    ctx: Arc<InboundContext>,
    counters: Arc<InboundCounters>,
) {
    let counted = counters.clone();
    accept_loop(listener, ctx, counters, move |stream, ctx| {
        serve_connection(stream, ctx, counted.clone())
    })
    .await;
}

async fn serve_connection(
    stream: TcpStream,
    ctx: Arc<InboundContext>,
    counters: Arc<InboundCounters>,
) -> Result<(), InboundError> {
    // A response's head and body go in separate writes: Nagle's algorithm would hold the body
    // back until the head's ACK, a delayed one (40 ms) on many clients.
    let _ = stream.set_nodelay(true);
    let mut origin = None;
    let result = serve_requests(stream, &ctx, &counters, &mut origin).await;
    if let Some(kept) = origin {
        kept.close().await;
    }
    result
}

/// Serves the connection's requests one after another, the flow to the last origin server
/// kept in `origin` (let go by the caller when they end).
async fn serve_requests(
    mut stream: TcpStream,
    ctx: &InboundContext,
    counters: &InboundCounters,
    origin: &mut Option<Origin>,
) -> Result<(), InboundError> {
    let mut buf = BytesMut::with_capacity(1024);
    let mut first = true;
    loop {
        let n = match next_request(&mut stream, &mut buf, ctx, first, origin).await {
            Ok(Some(n)) => n,
            Ok(None) => return Ok(()),
            Err(InboundError::Http(e)) => {
                let reply = match e {
                    HttpConnectError::HeadTooLong => HEADERS_TOO_LARGE,
                    _ => BAD_REQUEST,
                };
                stream.write_all(reply).await?;
                return Err(InboundError::Http(e));
            }
            Err(e) => return Err(e),
        };
        first = false;
        let Some((request, _)) = http_connect::parse_request(&buf[..n])? else {
            return Err(InboundError::Closed);
        };
        if ctx.socks_users.required() {
            let ok = request
                .proxy_authorization
                .and_then(http_connect::basic_credentials)
                .is_some_and(|(user, password)| ctx.credentials_match(&user, &password));
            if !ok {
                stream.write_all(AUTH_REQUIRED).await?;
                return Err(InboundError::HttpAuthRequired);
            }
        }
        let target = request.target;
        if !request.forward {
            if let Some(kept) = origin.take() {
                kept.close().await;
            }
            buf.advance(n);
            return tunnel(stream, ctx, target, buf.split().freeze()).await;
        }
        let forwarded = match http_connect::origin_head(&buf[..n]) {
            Ok(forwarded) => forwarded,
            Err(e) => {
                stream.write_all(BAD_REQUEST).await?;
                return Err(InboundError::Http(e));
            }
        };
        buf.advance(n);
        match http_forward::exchange(
            &mut stream,
            &mut buf,
            ctx,
            counters,
            origin,
            target,
            forwarded,
        )
        .await?
        {
            Next::Request => {}
            Next::Close => return Ok(()),
            Next::Tunnel => {
                let Some((writer, reader, down)) = origin.take().map(Origin::into_parts) else {
                    return Ok(());
                };
                return relay(stream, writer, reader, buf.split().freeze(), down).await;
            }
        }
    }
}

/// The length of the client's next request head in `buf`; `None` when the client closes, or
/// stays silent for [`KEEP_ALIVE_IDLE`], between requests. The first must be complete within
/// the handshake timeout of connecting, the next ones within it of their first byte. A kept
/// flow to an origin that ends meanwhile is let go.
async fn next_request(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    ctx: &InboundContext,
    first: bool,
    origin: &mut Option<Origin>,
) -> Result<Option<usize>, InboundError> {
    let idle_until = Instant::now() + KEEP_ALIVE_IDLE;
    while !first && buf.is_empty() {
        let ended = async {
            match origin.as_mut() {
                Some(kept) => kept.ended().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            read = tokio::time::timeout_at(idle_until, stream.read_buf(buf)) => match read {
                Err(_) | Ok(Ok(0)) => return Ok(None),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e.into()),
            },
            () = ended => {
                if let Some(kept) = origin.take() {
                    kept.close().await;
                }
            }
        }
    }
    // Parsed once it has ended.
    let mut scan = HeadScan::default();
    read_message(stream, buf, MAX_HEAD + 1, Deadline::start(ctx), |b| {
        if !scan.ended(b, MAX_HEAD) {
            return Ok(None);
        }
        http_connect::parse_request(b).map(|o| o.map(|(_, n)| n))
    })
    .await
    .map(Some)
}

/// A CONNECT tunnel to `target`, `up` the bytes that came after the request head.
async fn tunnel(
    mut stream: TcpStream,
    ctx: &InboundContext,
    target: Target,
    up: Bytes,
) -> Result<(), InboundError> {
    match ctx.connect(target.clone()).await {
        Err(code) => {
            stream.write_all(BAD_GATEWAY).await?;
            Err(InboundError::Refused {
                target: target.to_string(),
                reason: code.name(),
            })
        }
        Ok((writer, reader, first)) => {
            stream.write_all(ESTABLISHED).await?;
            relay(stream, writer, reader, up, first).await
        }
    }
}
