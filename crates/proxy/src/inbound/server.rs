//! What the client's inbound servers share: the current session, the SOCKS5 users, opening a
//! stream flow and waiting for the server's verdict, and reading a request head with one of the
//! sans-IO parsers.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tracing::debug;

use super::socks5::Reply;
use crate::config::SocksUser;
use crate::egress::{CONNECTED, reply_for_reset};
use crate::session::{FlowKind, Target};
use crate::transport::flow::{
    FlowHandle, FlowMsg, FlowReader, FlowWriter, OpenError, SessionHandle,
};

/// How long the client waits for the server to connect a flow's destination.
pub const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// Connections an inbound listener serves at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// A failed inbound connection.
#[derive(Debug, thiserror::Error)]
pub enum InboundError {
    /// The socket failed.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// The client closed before its request was complete.
    #[error("the client closed during its request")]
    Closed,
    /// The SOCKS5 input is malformed.
    #[error(transparent)]
    Socks5(#[from] super::socks5::Socks5Error),
    /// The HTTP input is malformed.
    #[error(transparent)]
    Http(#[from] super::http_connect::HttpConnectError),
}

/// State shared by the inbound listeners.
#[derive(Debug)]
pub struct InboundContext {
    /// The client's current session (`None` between sessions).
    pub session: watch::Receiver<Option<SessionHandle>>,
    /// SOCKS5 users; empty: no authentication.
    pub socks_users: Vec<SocksUser>,
}

impl InboundContext {
    /// Opens a flow on the current session.
    pub async fn open(&self, kind: FlowKind, target: Target) -> Result<FlowHandle, OpenError> {
        let handle = self.session.borrow().clone();
        match handle {
            Some(h) => h.open(kind, target).await,
            None => Err(OpenError::Gone),
        }
    }

    /// Opens a stream flow and waits until the server has connected it: the flow's halves and
    /// the first destination bytes, or the SOCKS5 reply that says why not.
    pub async fn connect(&self, target: Target) -> Result<(FlowWriter, FlowReader, Bytes), Reply> {
        let flow = self
            .open(FlowKind::Stream, target)
            .await
            .map_err(|_| Reply::GeneralFailure)?;
        let (writer, mut reader) = flow.split();
        match tokio::time::timeout(CONNECT_WAIT, reader.recv()).await {
            Ok(Some(FlowMsg::Data(mut first))) if first.first() == Some(&CONNECTED) => {
                first.advance(1);
                Ok((writer, reader, first))
            }
            Ok(Some(FlowMsg::Reset(code))) => Err(reply_for_reset(code)),
            Ok(_) => {
                let _ = writer.reset(0).await;
                Err(Reply::GeneralFailure)
            }
            Err(_) => {
                let _ = writer.reset(0).await;
                Err(Reply::TtlExpired)
            }
        }
    }
}

/// Reads into `buf` until `complete` reports a whole message (its length), or fails.
pub(crate) async fn read_message<E>(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    limit: usize,
    complete: impl Fn(&[u8]) -> Result<Option<usize>, E>,
) -> Result<usize, InboundError>
where
    InboundError: From<E>,
{
    loop {
        if let Some(n) = complete(buf)? {
            return Ok(n);
        }
        if buf.len() >= limit {
            // The parser wants more than its own limit allows: it reports the error itself on
            // the next call with the full buffer, so this only guards a parser bug.
            return Err(InboundError::Closed);
        }
        buf.reserve(512);
        if stream.read_buf(buf).await? == 0 {
            return Err(InboundError::Closed);
        }
    }
}

/// Accepts connections on `listener` and serves each with `serve`, at most
/// [`MAX_CONNECTIONS`] at once.
pub(crate) async fn accept_loop<F, Fut>(listener: TcpListener, ctx: Arc<InboundContext>, serve: F)
where
    F: Fn(TcpStream, Arc<InboundContext>) -> Fut,
    Fut: std::future::Future<Output = Result<(), InboundError>> + Send + 'static,
{
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let fut = serve(stream, ctx.clone());
        tokio::spawn(async move {
            if let Err(e) = fut.await {
                debug!(%peer, error = %e, "inbound connection ended");
            }
            drop(permit);
        });
    }
}
