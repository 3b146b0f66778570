//! The client's SOCKS5 inbound (RFC 1928): no authentication or RFC 1929 username/password,
//! CONNECT to IPv4, IPv6 and domain names (resolved by the server), UDP ASSOCIATE (a UDP relay
//! socket on the listener's address; its datagrams travel, header and all, on one datagram flow
//! per association, which lives as long as the TCP control connection), and BIND answered with
//! "command not supported". Server-side failures come back as the matching SOCKS5 reply code.
//! The same listener takes SOCKS4 and 4a CONNECT requests from older applications
//! ([`super::socks4`]), told apart by their first byte, when the inbound has no users.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::{Buf as _, Bytes, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use super::server::{
    Deadline, InboundContext, InboundCounters, InboundError, accept_loop, read_message, relay,
};
use super::socks4;
use super::socks5::{self, Command, Method, Reply};
use crate::session::{FlowKind, Target};
use crate::transport::flow::FlowMsg;

/// Serves SOCKS5 on `listener` until the task is dropped, counting its connections in
/// `counters`.
pub async fn serve_socks5(
    listener: TcpListener,
    ctx: Arc<InboundContext>,
    counters: Arc<InboundCounters>,
) {
    accept_loop(listener, ctx, counters, serve_connection).await;
}

async fn reply(
    stream: &mut TcpStream,
    reply: Reply,
    bound: SocketAddr,
) -> Result<(), InboundError> {
    let mut out = [0u8; socks5::MAX_REPLY];
    let n = socks5::encode_reply(reply, bound, &mut out)?;
    stream.write_all(&out[..n]).await?;
    Ok(())
}

/// Greeting and (optional) authentication; an error when the client is turned away (after
/// it was told).
async fn authenticate(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    ctx: &InboundContext,
    deadline: Deadline,
) -> Result<(), InboundError> {
    let n = match read_message(stream, buf, socks5::MAX_GREETING, deadline, |b| {
        socks5::parse_greeting(b).map(|o| o.map(|(_, n)| n))
    })
    .await
    {
        Ok(n) => n,
        Err(InboundError::Socks5(e @ socks5::Socks5Error::NoMethods)) => {
            // A SOCKS5 greeting that offers nothing: "no acceptable methods" (RFC 1928 §3).
            stream
                .write_all(&socks5::encode_method_selection(None))
                .await?;
            return Err(InboundError::Socks5(e));
        }
        Err(e) => return Err(e),
    };
    let greeting = socks5::parse_greeting(&buf[..n])?
        .map(|(g, _)| g)
        .unwrap_or_default();
    buf.advance(n);
    let method = if !ctx.socks_users.required() {
        greeting.no_auth.then_some(Method::NoAuth)
    } else {
        greeting.user_pass.then_some(Method::UserPass)
    };
    stream
        .write_all(&socks5::encode_method_selection(method))
        .await?;
    match method {
        None => Err(InboundError::NoAcceptableMethod),
        Some(Method::NoAuth) => Ok(()),
        Some(Method::UserPass) => {
            let n = read_message(stream, buf, 3 + 2 * 255, deadline, |b| {
                socks5::parse_credentials(b).map(|o| o.map(|(_, n)| n))
            })
            .await?;
            let ok = match socks5::parse_credentials(&buf[..n])? {
                Some((c, _)) => ctx.credentials_match(c.username, c.password),
                None => false,
            };
            buf.advance(n);
            stream
                .write_all(&socks5::encode_credentials_status(ok))
                .await?;
            if ok {
                Ok(())
            } else {
                Err(InboundError::BadCredentials)
            }
        }
    }
}

pub(super) async fn serve_connection(
    mut stream: TcpStream,
    ctx: Arc<InboundContext>,
) -> Result<(), InboundError> {
    let mut buf = BytesMut::with_capacity(512);
    let deadline = Deadline::start(&ctx);
    // The first byte says which protocol: 4 for a SOCKS4 or 4a request, else a SOCKS5 greeting.
    read_message(&mut stream, &mut buf, 1, deadline, |b| {
        Ok::<_, socks5::Socks5Error>((!b.is_empty()).then_some(0))
    })
    .await?;
    if buf.first() == Some(&socks4::VERSION) {
        return serve_socks4(stream, buf, &ctx, deadline).await;
    }
    authenticate(&mut stream, &mut buf, &ctx, deadline).await?;
    let n = read_message(&mut stream, &mut buf, socks5::MAX_REQUEST, deadline, |b| {
        socks5::parse_request(b).map(|o| o.map(|(_, n)| n))
    })
    .await;
    let n = match n {
        Ok(n) => n,
        Err(InboundError::Socks5(e)) => {
            let code = match e {
                socks5::Socks5Error::BadCommand(_) => Reply::CommandNotSupported,
                socks5::Socks5Error::BadAddressType(_) => Reply::AddressTypeNotSupported,
                _ => Reply::GeneralFailure,
            };
            reply(&mut stream, code, unspecified()).await?;
            return Err(InboundError::Socks5(e));
        }
        Err(e) => return Err(e),
    };
    let Some((request, _)) = socks5::parse_request(&buf[..n])? else {
        return Err(InboundError::Closed);
    };
    buf.advance(n);
    match request.command {
        Command::Bind => reply(&mut stream, Reply::CommandNotSupported, unspecified()).await,
        Command::Connect => connect(stream, buf.freeze(), request.target, &ctx).await,
        Command::UdpAssociate => udp_associate(stream, &ctx).await,
    }
}

/// A SOCKS4 or 4a request: CONNECT relayed as SOCKS5's is, BIND rejected; rejected as a whole
/// when the inbound has users (a SOCKS4 user id is no credential).
async fn serve_socks4(
    mut stream: TcpStream,
    mut buf: BytesMut,
    ctx: &InboundContext,
    deadline: Deadline,
) -> Result<(), InboundError> {
    let rejected = socks4::encode_reply(socks4::REJECTED);
    let n = read_message(&mut stream, &mut buf, socks4::MAX_REQUEST, deadline, |b| {
        socks4::parse_request(b).map(|o| o.map(|(_, n)| n))
    })
    .await;
    let n = match n {
        Ok(n) => n,
        Err(e @ InboundError::Socks4(_)) => {
            stream.write_all(&rejected).await?;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let Some((request, _)) = socks4::parse_request(&buf[..n])? else {
        return Err(InboundError::Closed);
    };
    buf.advance(n);
    if ctx.socks_users.required() {
        stream.write_all(&rejected).await?;
        return Err(InboundError::Socks4WithUsers);
    }
    if request.command == socks4::Command::Bind {
        stream.write_all(&rejected).await?;
        return Ok(());
    }
    let asked = request.target.to_string();
    match ctx.connect(request.target).await {
        Err(code) => {
            stream.write_all(&rejected).await?;
            Err(InboundError::Refused {
                target: asked,
                reason: code.name(),
            })
        }
        Ok((writer, reader, first)) => {
            stream
                .write_all(&socks4::encode_reply(socks4::GRANTED))
                .await?;
            relay(stream, writer, reader, buf.freeze(), first).await
        }
    }
}

/// 0.0.0.0:0: the bound address of replies that name none, and the target of a UDP
/// association's datagram flow (each datagram names its own destination).
pub(crate) fn unspecified() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}

async fn connect(
    mut stream: TcpStream,
    early: Bytes,
    target: Target,
    ctx: &InboundContext,
) -> Result<(), InboundError> {
    let asked = target.to_string();
    match ctx.connect(target).await {
        Err(code) => {
            reply(&mut stream, code, unspecified()).await?;
            Err(InboundError::Refused {
                target: asked,
                reason: code.name(),
            })
        }
        Ok((writer, reader, first)) => {
            reply(&mut stream, Reply::Succeeded, unspecified()).await?;
            relay(stream, writer, reader, early, first).await
        }
    }
}

async fn udp_associate(mut stream: TcpStream, ctx: &InboundContext) -> Result<(), InboundError> {
    let local_ip = stream.local_addr()?.ip();
    let peer_ip = stream.peer_addr()?.ip();
    let udp = UdpSocket::bind((local_ip, 0)).await?;
    let flow = match ctx
        .open(FlowKind::Datagram, Target::Addr(unspecified()))
        .await
    {
        Ok(f) => f,
        Err(_) => return reply(&mut stream, Reply::GeneralFailure, unspecified()).await,
    };
    let (writer, mut reader) = flow.split();
    reply(&mut stream, Reply::Succeeded, udp.local_addr()?).await?;
    let mut client: Option<SocketAddr> = None;
    let mut control = [0u8; 64];
    let mut buf = vec![0u8; 65_536];
    loop {
        tokio::select! {
            r = stream.read(&mut control) => {
                if matches!(r, Ok(0) | Err(_)) {
                    break;
                }
            }
            r = udp.recv_from(&mut buf) => {
                let (n, from) = r?;
                if !same_host(from.ip(), peer_ip) || client.is_some_and(|c| c != from) {
                    continue;
                }
                client = Some(from);
                if socks5::parse_udp_datagram(&buf[..n]).is_ok()
                    && writer.send_datagram(Bytes::copy_from_slice(&buf[..n])).await.is_err()
                {
                    break;
                }
            }
            msg = reader.recv() => match msg {
                Some(FlowMsg::Datagram(d)) => {
                    if let Ok((Target::Addr(from), n)) = socks5::parse_udp_datagram(&d) {
                        ctx.learn_names(from, &d[n..]);
                    }
                    if let Some(c) = client {
                        let _ = udp.send_to(&d, c).await;
                    }
                }
                Some(FlowMsg::Data(_)) => {}
                Some(FlowMsg::Finished | FlowMsg::Reset(_)) | None => break,
            }
        }
    }
    let _ = writer.reset(0).await;
    Ok(())
}

fn same_host(a: IpAddr, b: IpAddr) -> bool {
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    canon(a) == canon(b)
}
