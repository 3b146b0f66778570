//! The client's HTTP proxy inbound: a tunnel per CONNECT request (RFC 9110 §9.3.6), and a
//! plain request whose target is an absolute `http://` URL forwarded to that URL's server, its
//! head rewritten for it and `Connection: close`, so one request per connection (RFC 9112
//! §3.2.2; `curl -x`, `http_proxy=` for `http://` URLs); a destination the server cannot or may
//! not reach answers 502 Bad Gateway, a request that is neither 400.
//! With users configured (`[socks] users`, shared with the SOCKS5 inbound) a request must carry
//! one user's `Proxy-Authorization: Basic` credentials (RFC 7617), or is answered 407; without
//! users it has no authentication and should listen on loopback only (the default).

use std::sync::Arc;

use bytes::{Buf as _, Bytes, BytesMut};
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};

use super::http_connect::{self, AUTH_REQUIRED, BAD_GATEWAY, BAD_REQUEST, ESTABLISHED, MAX_HEAD};
use super::server::{
    Deadline, InboundContext, InboundCounters, InboundError, accept_loop, read_message,
};
use crate::transport::relay::{RelayError, relay_tcp};

/// Serves the HTTP proxy (CONNECT and `http://` requests) on `listener` until the task is
/// dropped, counting its connections in `counters`.
pub async fn serve_http_connect(
    listener: TcpListener,
    ctx: Arc<InboundContext>,
    counters: Arc<InboundCounters>,
) {
    accept_loop(listener, ctx, counters, serve_connection).await;
}

async fn serve_connection(
    mut stream: TcpStream,
    ctx: Arc<InboundContext>,
) -> Result<(), InboundError> {
    let mut buf = BytesMut::with_capacity(1024);
    let deadline = Deadline::start(&ctx);
    let n = read_message(&mut stream, &mut buf, MAX_HEAD + 1, deadline, |b| {
        http_connect::parse_request(b).map(|o| o.map(|(_, n)| n))
    })
    .await;
    let n = match n {
        Ok(n) => n,
        Err(InboundError::Http(e)) => {
            stream.write_all(BAD_REQUEST).await?;
            return Err(InboundError::Http(e));
        }
        Err(e) => return Err(e),
    };
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
    let (target, forward) = (request.target, request.forward);
    let asked = target.to_string();
    // A forwarded request goes with its head rewritten for the URL's server, then whatever
    // followed it (its body); a tunnel's bytes go as they came.
    let upstream = match forward {
        true => {
            let mut head = http_connect::origin_head(&buf[..n])?;
            head.extend_from_slice(&buf[n..]);
            Bytes::from(head)
        }
        false => {
            buf.advance(n);
            buf.split().freeze()
        }
    };
    match ctx.connect(target).await {
        Err(code) => {
            stream.write_all(BAD_GATEWAY).await?;
            Err(InboundError::Refused {
                target: asked,
                reason: code.name(),
            })
        }
        Ok((writer, reader, first)) => {
            if !forward {
                stream.write_all(ESTABLISHED).await?;
            }
            match relay_tcp(stream, writer, reader, upstream, first).await {
                Err(RelayError::Io(e)) => Err(InboundError::Io(e)),
                _ => Ok(()),
            }
        }
    }
}
