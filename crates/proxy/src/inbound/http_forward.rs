//! The HTTP inbound's forwarded requests on the wire: one request's exchange with the URL's
//! server (its head, its body and the response, both ways at once), over a stream flow that is
//! kept, with its server-side connection, for the client's next request to the same host and
//! port. Where each body ends comes from [`super::http_message`].

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{Buf as _, Bytes, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};

use super::http_connect::{BAD_GATEWAY, ForwardRequest, MAX_HEAD};
use super::http_message::{
    BodyFramer, BodyLength, ClientConnection, HeadScan, HttpMessageError, MAX_RESPONSE_HEAD,
    Response,
};
use super::server::{InboundContext, InboundCounters, InboundError};
use crate::session::Target;
use crate::transport::flow::{FlowMsg, FlowReader, FlowWriter};

/// Reset code of a kept flow braid lets go (the client left, or asked elsewhere).
const ORIGIN_DONE: u64 = 0;
/// Most bytes read from the client at once while relaying a request body.
const BODY_READ: usize = 64 * 1024;

/// A stream flow to an origin server, kept between requests.
#[derive(Debug)]
pub(crate) struct Origin {
    target: Target,
    writer: FlowWriter,
    reader: FlowReader,
    /// Bytes from the server not yet relayed (the start of a response).
    pending: BytesMut,
    /// It has carried a whole exchange before: a request on it may meet a connection the
    /// server has just closed, and is tried again on a new one.
    reused: bool,
}

impl Origin {
    /// Lets the flow go: the server closes its connection to the origin.
    pub(crate) async fn close(self) {
        let _ = self.writer.reset(ORIGIN_DONE).await;
    }

    /// The flow's halves and what came from the server, for a tunnel from here on.
    pub(crate) fn into_parts(self) -> (FlowWriter, FlowReader, Bytes) {
        (self.writer, self.reader, self.pending.freeze())
    }

    /// Waits until the kept flow can no longer serve a request: the server closed it, reset
    /// it, or sent bytes nobody asked for.
    pub(crate) async fn ended(&mut self) {
        let _ = self.reader.recv().await;
    }
}

/// What the client connection does after an exchange.
#[derive(Debug)]
pub(crate) enum Next {
    /// Reads the client's next request.
    Request,
    /// Closes (the client or the response asked for it, or the exchange broke off).
    Close,
    /// Relays bytes as they come both ways (an upgrade was asked for).
    Tunnel,
}

/// How relaying a response ended.
enum ResponseEnd {
    /// The response and its body went to the client; whether the server keeps its connection
    /// and whether the client's is closed now.
    Done { reusable: bool, close: bool },
    /// Nothing reached the client: the server closed, reset or answered in a way braid does not
    /// pass on (`reason`); `closed_early`: it closed before sending a byte.
    Unanswered {
        reason: &'static str,
        closed_early: bool,
    },
    /// The exchange broke off with part of the response sent.
    Broken(&'static str),
}

/// Forwards `request` (its head parsed out of `buf`; its body, and maybe the next request,
/// in `buf` and on `stream` after it) to `target` over `origin`: the kept flow when it goes to
/// the same host and port, else a new one. An idempotent request without a body that meets a
/// kept connection the server has just closed is sent again on a new one.
pub(crate) async fn exchange(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    ctx: &InboundContext,
    counters: &InboundCounters,
    origin: &mut Option<Origin>,
    target: Target,
    request: ForwardRequest,
) -> Result<Next, InboundError> {
    if let Some(kept) = origin.take_if(|o| o.target != target) {
        kept.close().await;
    }
    // Sent again only when nothing of it can have been applied twice: an idempotent method
    // (RFC 9110 §9.2.2) and no body to replay.
    let mut retry = request.idempotent && request.framing.body == BodyLength::Empty;
    loop {
        let o = match origin {
            Some(o) => o,
            None => match ctx.connect(target.clone()).await {
                Ok((writer, reader, first)) => origin.insert(Origin {
                    target: target.clone(),
                    writer,
                    reader,
                    pending: BytesMut::from(&first[..]),
                    reused: false,
                }),
                Err(code) => {
                    stream.write_all(BAD_GATEWAY).await?;
                    return Err(InboundError::Refused {
                        target: target.to_string(),
                        reason: code.name(),
                    });
                }
            },
        };
        if o.writer
            .write(Bytes::from(request.head.clone()))
            .await
            .is_err()
        {
            stream.write_all(BAD_GATEWAY).await?;
            return Err(InboundError::Refused {
                target: target.to_string(),
                reason: "the session closed",
            });
        }
        if request.upgrade {
            return Ok(Next::Tunnel);
        }
        let reused = o.reused;
        // The body goes up while the response comes down: a server may answer before the whole
        // body is there (an interim 100 Continue, or an early error).
        let outcome = {
            let (mut rd, mut wr) = stream.split();
            let body_sent = AtomicBool::new(false);
            let up = send_body(&mut rd, buf, &o.writer, request.framing.body, &body_sent);
            let down = relay_response(&mut wr, &mut o.reader, &mut o.pending, &request, &body_sent);
            tokio::pin!(up, down);
            let mut client_closed = false;
            loop {
                // The body first: what it can send of the bytes at hand is sent (and, once all
                // is, `body_sent` set) before a response is looked at, or a quick response would
                // look early.
                tokio::select! {
                    biased;
                    result = &mut up, if !client_closed => match result {
                        Ok(()) => client_closed = true,
                        Err(e) => break Err(e),
                    },
                    end = &mut down => break Ok((end, client_closed)),
                }
            }
        };
        let (end, client_closed) = match outcome {
            Ok(done) => done,
            Err(e) => {
                if let Some(done) = origin.take() {
                    done.close().await;
                }
                return Err(e);
            }
        };
        match end {
            ResponseEnd::Done { reusable, close } => {
                counters.count_forwarded(reused);
                o.reused = true;
                // A client that closed its side had it passed on: the flow is finished.
                if (!reusable || client_closed)
                    && let Some(done) = origin.take()
                {
                    done.close().await;
                }
                return Ok(match close || client_closed {
                    true => Next::Close,
                    false => Next::Request,
                });
            }
            ResponseEnd::Unanswered {
                reason,
                closed_early,
            } => {
                if let Some(done) = origin.take() {
                    done.close().await;
                }
                if retry && reused && closed_early && !client_closed {
                    retry = false;
                    continue;
                }
                stream.write_all(BAD_GATEWAY).await?;
                return Err(InboundError::Refused {
                    target: target.to_string(),
                    reason,
                });
            }
            ResponseEnd::Broken(reason) => {
                if let Some(done) = origin.take() {
                    done.close().await;
                }
                // Part of the response went out: the client's connection ends with a TCP RST,
                // not a FIN, which would pass a body delimited by the close for whole.
                let _ = stream.set_zero_linger();
                return Err(InboundError::ForwardBroken {
                    target: target.to_string(),
                    reason,
                });
            }
        }
    }
}

/// Sends a request body of `length` to the flow: what `buf` holds of it first, then what the
/// client sends, leaving whatever follows the body (a next request) in `buf`; then says so in
/// `body_sent` and watches the client while the response comes: what it sends ahead is kept in
/// `buf` (up to a request head's worth), and its close is passed on to the server as the flow's
/// end (as a tunnel would), so that a server waiting on a client that has gone can let go.
/// Returns once the client has closed (and never while it stays).
async fn send_body(
    rd: &mut ReadHalf<'_>,
    buf: &mut BytesMut,
    writer: &FlowWriter,
    length: BodyLength,
    body_sent: &AtomicBool,
) -> Result<(), InboundError> {
    let mut framer = BodyFramer::new(length);
    loop {
        let body = framer.feed(buf).map_err(bad_request_body)?;
        if body > 0 && writer.write(buf.split_to(body).freeze()).await.is_err() {
            return Err(InboundError::Closed);
        }
        if framer.is_done() {
            break;
        }
        buf.reserve(BODY_READ);
        if rd.read_buf(buf).await? == 0 {
            return Err(InboundError::Closed);
        }
    }
    body_sent.store(true, Ordering::Relaxed);
    loop {
        if buf.len() > MAX_HEAD {
            return std::future::pending().await;
        }
        buf.reserve(1024);
        if rd.read_buf(buf).await? == 0 {
            let _ = writer.finish().await;
            return Ok(());
        }
    }
}

fn bad_request_body(e: HttpMessageError) -> InboundError {
    InboundError::Http(e.into())
}

/// Relays the response to `request` from the flow to the client: interim responses, then the
/// final one, its head with braid's connection header and its body up to its end (bytes past
/// it stay in `pending`).
async fn relay_response(
    wr: &mut WriteHalf<'_>,
    reader: &mut FlowReader,
    pending: &mut BytesMut,
    request: &ForwardRequest,
    body_sent: &AtomicBool,
) -> ResponseEnd {
    let mut received = !pending.is_empty();
    let mut written = false;
    let broken = |written: bool, reason| match written {
        true => ResponseEnd::Broken(reason),
        false => ResponseEnd::Unanswered {
            reason,
            closed_early: false,
        },
    };
    loop {
        // Parsed once it has ended.
        let mut scan = HeadScan::default();
        let (response, length) = loop {
            if scan.ended(pending, MAX_RESPONSE_HEAD) {
                match Response::parse(pending, request.head_method) {
                    Ok(Some(parsed)) => break parsed,
                    Ok(None) => {}
                    Err(HttpMessageError::ResponseHeadTooLong) => {
                        return broken(written, "response head too long");
                    }
                    Err(_) => return broken(written, "malformed response head"),
                }
            }
            match reader.recv().await {
                Some(FlowMsg::Data(data)) => {
                    received = true;
                    pending.extend_from_slice(&data);
                }
                Some(FlowMsg::Datagram(_)) => {}
                end => {
                    return match (written, received) {
                        (true, _) => ResponseEnd::Broken("the origin server closed mid-response"),
                        (false, received) => ResponseEnd::Unanswered {
                            reason: match end {
                                Some(FlowMsg::Reset(_)) => "the origin server reset the connection",
                                _ => "the origin server closed without a response",
                            },
                            closed_early: !received,
                        },
                    };
                }
            }
        };
        pending.advance(length);
        if response.status == 101 {
            // Switching protocols without being asked (an upgrade is relayed as a tunnel).
            return broken(written, "unrequested 101 response");
        }
        if response.is_interim() {
            // Interim responses are not for HTTP/1.0 clients (RFC 9110 §15.2).
            if !request.http10 {
                let head = response.head_for_client(ClientConnection::Interim);
                if wr.write_all(&head).await.is_err() {
                    return ResponseEnd::Broken("the client closed");
                }
                written = true;
            }
            continue;
        }
        // A response that comes before the request's body was all sent (an early error) leaves
        // the client mid-body: its connection ends with the response, and the server's too.
        let early = !body_sent.load(Ordering::Relaxed);
        let close = !request.framing.keep_alive || response.body == BodyLength::UntilClose || early;
        let connection = match close {
            true => ClientConnection::Close,
            false => ClientConnection::KeepAlive,
        };
        if wr
            .write_all(&response.head_for_client(connection))
            .await
            .is_err()
        {
            return ResponseEnd::Broken("the client closed");
        }
        let mut framer = BodyFramer::new(response.body);
        let mut chunk = pending.split().freeze();
        loop {
            let body = match framer.feed(&chunk) {
                Ok(body) => body,
                Err(_) => return ResponseEnd::Broken("malformed chunked response body"),
            };
            if wr.write_all(&chunk[..body]).await.is_err() {
                return ResponseEnd::Broken("the client closed");
            }
            if framer.is_done() {
                pending.extend_from_slice(&chunk[body..]);
                return ResponseEnd::Done {
                    // Bytes after the response that nobody asked for: the connection is not
                    // trusted with another request.
                    reusable: response.persistent && pending.is_empty() && !early,
                    close,
                };
            }
            chunk = match reader.recv().await {
                Some(FlowMsg::Data(data)) => data,
                Some(FlowMsg::Datagram(_)) => Bytes::new(),
                // The server's close ends such a body; a lost session (no FINISH) does not.
                Some(FlowMsg::Finished) if response.body == BodyLength::UntilClose => {
                    let _ = wr.shutdown().await;
                    return ResponseEnd::Done {
                        reusable: false,
                        close: true,
                    };
                }
                _ => return ResponseEnd::Broken("the origin server closed mid-response"),
            };
        }
    }
}
