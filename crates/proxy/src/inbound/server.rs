//! What the client's inbound servers share: the current session, the inbound users, opening a
//! stream flow and waiting for the server's verdict, and reading a request head with one of the
//! sans-IO parsers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tracing::{debug, info};

use super::dns_names::LearnedNames;
use super::route::{Fallback, Routes, Way};
use super::socks5::Reply;
use crate::config::SocksUser;
use crate::egress::{CONNECTED, reply_for_reset};
use crate::session::{FlowError, FlowKind, Target};
use crate::transport::InboundStatus;
use crate::transport::flow::{
    FlowHandle, FlowMsg, FlowReader, FlowWriter, OpenError, SessionHandle,
};
use crate::transport::relay::{RelayError, relay_tcp};

/// How long the client waits for the server to connect a flow's destination.
pub const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// How long a request waits for a session when the client has none (between a session that
/// ended and the next), and how long after a session started a request waits for its first
/// path (its links are joining: at start-up, or after the server lost the last session).
pub const SESSION_WAIT: Duration = Duration::from_secs(5);
/// Sessions a request is opened on before it fails: a session that ends before the server's
/// verdict (nothing but the flow's OPEN was sent on it) is no failure of the request.
const CONNECT_ATTEMPTS: usize = 3;
/// Connections an inbound listener serves at once.
pub const MAX_CONNECTIONS: usize = 1024;
/// How long a client has from connecting to the end of its request (SOCKS5 greeting,
/// authentication and request; the HTTP CONNECT head). A client that sends nothing would
/// otherwise hold one of the [`MAX_CONNECTIONS`] slots for as long as it likes.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// A failed inbound connection.
#[derive(Debug, thiserror::Error)]
pub enum InboundError {
    /// The socket failed.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// The client closed before its request was complete.
    #[error("the client closed before its request was complete")]
    Closed,
    /// The request was not complete in time.
    #[error("no complete request within {0:?} of connecting")]
    HandshakeTimeout(Duration),
    /// The SOCKS5 client offered no method this inbound accepts.
    #[error("SOCKS5 client offered no acceptable authentication method")]
    NoAcceptableMethod,
    /// The SOCKS5 username or password was wrong.
    #[error("SOCKS5 username or password refused")]
    BadCredentials,
    /// The HTTP CONNECT request had no `Proxy-Authorization: Basic` credentials, or wrong ones;
    /// the client was answered 407.
    #[error("HTTP CONNECT proxy credentials missing or refused")]
    HttpAuthRequired,
    /// The destination could not be reached; the client was told so.
    #[error("{target}: {reason}")]
    Refused {
        /// The destination asked for.
        target: String,
        /// Why, as the SOCKS5 reply code words it (the server's verdict, or "TTL expired" when
        /// none came within [`CONNECT_WAIT`]).
        reason: &'static str,
    },
    /// A forwarded HTTP exchange broke off after part of the response had reached the client
    /// (the client's connection is closed).
    #[error("{target}: forwarded HTTP exchange broke off: {reason}")]
    ForwardBroken {
        /// The server the request went to.
        target: String,
        /// What happened.
        reason: &'static str,
    },
    /// A SOCKS4 request came to an inbound with users: SOCKS4 carries no password, so it was
    /// rejected.
    #[error("SOCKS4 request refused: the inbound has users, and SOCKS4 carries no password")]
    Socks4WithUsers,
    /// The SOCKS4 input is malformed.
    #[error(transparent)]
    Socks4(#[from] super::socks4::Socks4Error),
    /// The SOCKS5 input is malformed.
    #[error(transparent)]
    Socks5(#[from] super::socks5::Socks5Error),
    /// The HTTP input is malformed.
    #[error(transparent)]
    Http(#[from] super::http_connect::HttpConnectError),
}

impl InboundError {
    /// The application broke its connection off: it reset it, or its end was gone when braid
    /// wrote to it (a browser closing a tab, a download cancelled). Its own doing, counted
    /// apart from the failures.
    pub fn is_broken_off_by_the_client(&self) -> bool {
        use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
        matches!(self, InboundError::Io(e)
            if matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe))
    }
}

/// State shared by the inbound listeners.
#[derive(Debug)]
pub struct InboundContext {
    /// The client's current session (`None` between sessions).
    pub session: watch::Receiver<Option<SessionHandle>>,
    /// The users of the SOCKS5 and HTTP CONNECT inbounds (`[socks] users`); none: no
    /// authentication.
    pub socks_users: SocksUsers,
    /// How long a client has to complete its request ([`HANDSHAKE_TIMEOUT`] in the daemon).
    pub handshake_timeout: Duration,
    /// The `[[route]]` tables in force: which destinations go through the session, which the
    /// client connects itself and which it refuses.
    pub routes: Arc<Routes>,
    /// The names DNS answers gave addresses, so that routes' `domains` match connections made
    /// to those addresses (the TUN inbound's).
    pub names: Arc<LearnedNames>,
    /// `fallback`: whether destinations no route matches go directly while no session takes
    /// them.
    pub fallback: Arc<Fallback>,
}

/// The users of the SOCKS5 and HTTP CONNECT inbounds, replaced as a whole when the client
/// reloads its file: a connection already past its authentication keeps going, the next one
/// meets the new users.
#[derive(Debug, Default)]
pub struct SocksUsers(RwLock<Arc<[SocksUser]>>);

impl SocksUsers {
    /// These users (none: no authentication).
    pub fn new(users: Vec<SocksUser>) -> SocksUsers {
        SocksUsers(RwLock::new(users.into()))
    }

    /// The users in force.
    pub fn current(&self) -> Arc<[SocksUser]> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `users` in force.
    pub fn replace(&self, users: Vec<SocksUser>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = users.into();
    }

    /// Whether clients must authenticate (there are users).
    pub fn required(&self) -> bool {
        !self.current().is_empty()
    }
}

impl InboundContext {
    /// Whether `user` and `password` are those of one of the users, comparing every user in
    /// constant time.
    pub fn credentials_match(&self, user: &[u8], password: &[u8]) -> bool {
        let mut ok = false;
        for u in self.socks_users.current().iter() {
            let name = crate::tls::constant_time_eq(u.name.as_bytes(), user);
            let pass = crate::tls::constant_time_eq(u.password.as_bytes(), password);
            ok |= name & pass;
        }
        ok
    }

    /// Learns the names in `payload`, an answer from `from`, when it is a DNS answer (from port
    /// 53) and some route lists `domains`, so that the application's next connections to those
    /// addresses meet the routes' `domains` ([`super::dns_names`]).
    pub fn learn_names(&self, from: SocketAddr, payload: &[u8]) {
        if from.port() == 53 && self.routes.current().has_domains() {
            self.names.learn(payload, Instant::now());
        }
    }

    /// Opens a datagram or ping flow. A UDP association's (`Datagram`) goes through a router
    /// when a route takes some destinations out of the session (its datagrams then each go
    /// their own route's way, [`super::route::spawn_udp_router`]); a ping flow goes its
    /// destination's route's way (from this host's ICMP socket when `direct`; refused when
    /// `block`); otherwise it is a flow of the current session.
    pub async fn open(&self, kind: FlowKind, target: Target) -> Result<FlowHandle, OpenError> {
        if kind == FlowKind::Ping {
            // A `ping` run counts as a flow of the route.
            match self.routes.current().way_for(&target, &self.names, false) {
                Way::Block => return Err(OpenError::Blocked),
                Way::Direct(device) => {
                    let (inbound, egress) = crate::transport::pipe::pipe();
                    crate::egress::spawn_direct(egress, kind, target, device);
                    return Ok(inbound);
                }
                Way::Server | Way::Unrouted => {}
            }
        }
        if kind == FlowKind::Datagram && (self.routes.current().diverts() || self.fallback.on()) {
            let session = self.session.clone();
            let (routes, names) = (self.routes.clone(), self.names.clone());
            let fallback = self.fallback.clone();
            return Ok(super::route::spawn_udp_router(
                session, routes, names, fallback,
            ));
        }
        let handle = self.session.borrow().clone();
        match handle {
            Some(h) => h.open(kind, target).await,
            None => Err(OpenError::Gone),
        }
    }

    /// Opens a stream flow and waits until the server has connected it: the flow's halves and
    /// the first destination bytes, or the SOCKS5 reply that says why not.
    ///
    /// A destination a `direct` route matches is connected by the client itself (the same
    /// verdict, from this host), one a `block` route matches is refused ("not allowed"). One
    /// no route matches goes through the session, or, with `fallback = "direct"` while there is
    /// no session with a path to take it, is connected directly too.
    pub async fn connect(&self, target: Target) -> Result<(FlowWriter, FlowReader, Bytes), Reply> {
        let deadline = Instant::now() + CONNECT_WAIT;
        let way = self.routes.current().way_for(&target, &self.names, false);
        match way {
            Way::Block => Err(Reply::NotAllowed),
            Way::Direct(device) => direct(target, device, deadline).await,
            Way::Server | Way::Unrouted => {
                match self.through_session(target.clone(), deadline).await {
                    Ok(flow) => Ok(flow),
                    Err(Unreached::Refused(reply)) => Err(reply),
                    Err(Unreached::NoSession) if way == Way::Unrouted && self.fallback.on() => {
                        self.fallback.flows.fetch_add(1, Ordering::Relaxed);
                        debug!(%target, "no session to the server: connected directly (fallback)");
                        direct(target, None, deadline).await
                    }
                    Err(Unreached::NoSession) => Err(Reply::GeneralFailure),
                }
            }
        }
    }

    /// [`InboundContext::connect`] through the session. With no session, it waits up to
    /// [`SESSION_WAIT`] for one; a session without a path, until it is [`SESSION_WAIT`] old. A
    /// session that ends before the server's verdict (the server restarted unheard, and the
    /// client learned it from this request's own packets) only carried the flow's OPEN, so the
    /// request is opened again on the next session ([`CONNECT_ATTEMPTS`] sessions at most,
    /// [`CONNECT_WAIT`] in all).
    async fn through_session(
        &self,
        target: Target,
        deadline: Instant,
    ) -> Result<(FlowWriter, FlowReader, Bytes), Unreached> {
        let mut ended: Option<SessionHandle> = None;
        let mut attempts = 0;
        while attempts < CONNECT_ATTEMPTS {
            let Some(session) = self.next_session(ended.as_ref(), deadline).await else {
                break;
            };
            let flow = match session.open(FlowKind::Stream, target.clone()).await {
                Ok(flow) => flow,
                // The session is over, or closing (the server lost it): the next one takes the
                // request.
                Err(OpenError::Gone | OpenError::Flow(FlowError::SessionClosed)) => {
                    ended = Some(session);
                    attempts += 1;
                    continue;
                }
                // No path yet: while the session is younger than SESSION_WAIT (its links are
                // joining), wait for one. A session without a path for longer (a server down:
                // every link failing to join) refuses at once, as does one whose paths all
                // left.
                Err(OpenError::Flow(FlowError::NoPath)) => {
                    let wait = (session.started + SESSION_WAIT).min(deadline);
                    if Instant::now() >= wait || !session.wait_for_path(wait).await {
                        break;
                    }
                    continue;
                }
                Err(OpenError::Blocked) => return Err(Unreached::Refused(Reply::NotAllowed)),
                Err(OpenError::Flow(_)) => return Err(Unreached::Refused(Reply::GeneralFailure)),
            };
            attempts += 1;
            let (writer, reader) = flow.split();
            match verdict(writer, reader, deadline).await {
                Verdict::Connected(writer, reader, first) => return Ok((writer, reader, first)),
                Verdict::Refused(reply) => return Err(Unreached::Refused(reply)),
                Verdict::Ended => {
                    debug!(%target, "the session ended before the server connected the flow; opening it again on the next");
                    ended = Some(session);
                }
            }
        }
        Err(Unreached::NoSession)
    }

    /// The current session if it is open and not `ended`, else the next one, waited for up to
    /// [`SESSION_WAIT`] (and not past `deadline`).
    async fn next_session(
        &self,
        ended: Option<&SessionHandle>,
        deadline: Instant,
    ) -> Option<SessionHandle> {
        let mut session = self.session.clone();
        let usable = |s: &Option<SessionHandle>| {
            s.as_ref()
                .is_some_and(|h| !h.is_closed() && ended.is_none_or(|e| !e.is_same_session(h)))
        };
        let wait = (Instant::now() + SESSION_WAIT).min(deadline);
        let found = tokio::time::timeout_at(wait, session.wait_for(usable)).await;
        found.ok()?.ok()?.clone()
    }
}

/// Why a stream flow did not go through the session.
enum Unreached {
    /// The server (or the session) answered no.
    Refused(Reply),
    /// No session with a path took it.
    NoSession,
}

/// A stream flow to `target` connected from this host (bound to `device` when named), once
/// connected.
async fn direct(
    target: Target,
    device: Option<String>,
    deadline: Instant,
) -> Result<(FlowWriter, FlowReader, Bytes), Reply> {
    let (writer, reader) = super::route::direct_stream(target, device).split();
    match verdict(writer, reader, deadline).await {
        Verdict::Connected(writer, reader, first) => Ok((writer, reader, first)),
        Verdict::Refused(reply) => Err(reply),
        Verdict::Ended => Err(Reply::GeneralFailure),
    }
}

/// What came back for a stream flow just opened.
enum Verdict {
    /// The destination is connected: the flow's halves and the first destination bytes.
    Connected(FlowWriter, FlowReader, Bytes),
    /// It could not be reached, for this reason.
    Refused(Reply),
    /// The flow ended with no verdict (its session is over).
    Ended,
}

/// Waits until `deadline` for the verdict on a stream flow just opened: the [`CONNECTED`]
/// byte before the destination's bytes, or a reset that says why not.
async fn verdict(writer: FlowWriter, mut reader: FlowReader, deadline: Instant) -> Verdict {
    match tokio::time::timeout_at(deadline, reader.recv()).await {
        Ok(Some(FlowMsg::Data(mut first))) if first.first() == Some(&CONNECTED) => {
            first.advance(1);
            Verdict::Connected(writer, reader, first)
        }
        Ok(Some(FlowMsg::Reset(code))) => Verdict::Refused(reply_for_reset(code)),
        // The driver let the flow go without an end: its session is over.
        Ok(None) => Verdict::Ended,
        Ok(Some(_)) => {
            let _ = writer.reset(0).await;
            Verdict::Refused(Reply::GeneralFailure)
        }
        Err(_) => {
            let _ = writer.reset(0).await;
            Verdict::Refused(Reply::TtlExpired)
        }
    }
}

/// When a client's request must be complete: [`InboundContext::handshake_timeout`] after it
/// connected.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    at: Instant,
    after: Duration,
}

impl Deadline {
    /// The deadline of a client that connects now.
    pub(crate) fn start(ctx: &InboundContext) -> Self {
        Deadline {
            at: Instant::now() + ctx.handshake_timeout,
            after: ctx.handshake_timeout,
        }
    }
}

/// Reads into `buf` until `complete` reports a whole message (its length), or fails; a
/// message not complete by `deadline` is [`InboundError::HandshakeTimeout`].
pub(crate) async fn read_message<E>(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    limit: usize,
    deadline: Deadline,
    mut complete: impl FnMut(&[u8]) -> Result<Option<usize>, E>,
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
        let read = tokio::time::timeout_at(deadline.at, stream.read_buf(buf))
            .await
            .map_err(|_| InboundError::HandshakeTimeout(deadline.after))?;
        if read? == 0 {
            return Err(InboundError::Closed);
        }
    }
}

/// Relays between the client's `stream` and a connected flow (see [`relay_tcp`]): `up` the
/// bytes the client sent after its request, `down` those that came with the server's verdict.
/// Only a socket error is the connection's failure; a flow the server ended or reset is not.
pub(crate) async fn relay(
    stream: TcpStream,
    writer: FlowWriter,
    reader: FlowReader,
    up: Bytes,
    down: Bytes,
) -> Result<(), InboundError> {
    match relay_tcp(stream, writer, reader, up, down).await {
        Err(RelayError::Io(e)) => Err(InboundError::Io(e)),
        _ => Ok(()),
    }
}

/// One inbound listener's connection counts since start, for `braid status` and /metrics.
#[derive(Debug)]
pub struct InboundCounters {
    name: &'static str,
    listen: SocketAddr,
    limit: usize,
    open: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    reset: AtomicU64,
    failed: AtomicU64,
    forwarded: AtomicU64,
    forwarded_kept: AtomicU64,
}

impl InboundCounters {
    /// The counters of inbound `name` (`socks5`, `http`) listening on `listen`, serving at most
    /// `limit` connections at once.
    pub fn new(name: &'static str, listen: SocketAddr, limit: usize) -> Arc<InboundCounters> {
        Arc::new(InboundCounters {
            name,
            listen,
            limit,
            open: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            reset: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            forwarded_kept: AtomicU64::new(0),
        })
    }

    /// The inbound's name (`socks5`, `http`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Counts a plain `http://` request answered by its server; `kept`: over a flow kept from
    /// an earlier request.
    pub(crate) fn count_forwarded(&self, kept: bool) {
        self.forwarded.fetch_add(1, Ordering::Relaxed);
        if kept {
            self.forwarded_kept.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts now.
    pub fn status(&self) -> InboundStatus {
        InboundStatus {
            name: self.name.to_owned(),
            listen: self.listen.to_string(),
            limit: self.limit as u64,
            open: self.open.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            reset: self.reset.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            forwarded: self.forwarded.load(Ordering::Relaxed),
            forwarded_kept: self.forwarded_kept.load(Ordering::Relaxed),
        }
    }
}

/// The next connection on `listener`, with one of `slots` when one is free (`None`: the caller
/// closes it). A failed accept (out of descriptors, say) waits 50 ms rather than spin.
pub(crate) async fn accept_with_slot(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> (
    TcpStream,
    std::net::SocketAddr,
    Option<OwnedSemaphorePermit>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => return (stream, peer, slots.clone().try_acquire_owned().ok()),
            Err(e) => {
                debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// How often, at most, the refusals of a full inbound are logged.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Accepts connections on `listener` and serves each with `serve`, at most `counters`' limit at
/// once, counting them in `counters`. A connection beyond is closed at once, so that its
/// application fails now rather than wait unanswered in the listen backlog until its own
/// timeout; the refusals are logged at `warn`, at most once a minute, with their count.
pub(crate) async fn accept_loop<F, Fut>(
    listener: TcpListener,
    ctx: Arc<InboundContext>,
    counters: Arc<InboundCounters>,
    serve: F,
) where
    F: Fn(TcpStream, Arc<InboundContext>) -> Fut,
    Fut: std::future::Future<Output = Result<(), InboundError>> + Send + 'static,
{
    let limit = counters.limit;
    let slots = Arc::new(Semaphore::new(limit));
    let mut refused: u64 = 0;
    let mut last_log: Option<tokio::time::Instant> = None;
    loop {
        let (stream, peer, slot) = accept_with_slot(&listener, &slots).await;
        let Some(permit) = slot else {
            drop(stream);
            counters.refused.fetch_add(1, Ordering::Relaxed);
            refused += 1;
            if last_log.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_INTERVAL) {
                tracing::warn!(
                    limit,
                    refused,
                    "inbound connection limit reached: new connections are closed at once \
                     (refused since the last such line)"
                );
                last_log = Some(tokio::time::Instant::now());
                refused = 0;
            }
            continue;
        };
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        counters.open.fetch_add(1, Ordering::Relaxed);
        let fut = serve(stream, ctx.clone());
        let counters = counters.clone();
        tokio::spawn(async move {
            // Counted closed however the task ends (a panic, an abort at shutdown included).
            let _open = OpenGuard(&counters.open);
            match fut.await {
                Ok(()) => {}
                Err(e) if e.is_broken_off_by_the_client() => {
                    counters.reset.fetch_add(1, Ordering::Relaxed);
                    debug!(%peer, error = %e, "inbound connection broken off by the client");
                }
                Err(e) => {
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                    info!(%peer, error = %e, "inbound connection failed");
                }
            }
            drop(permit);
        });
    }
}

/// Takes one from an open-connection count when dropped.
struct OpenGuard<'a>(&'a AtomicU64);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    /// No session, no SOCKS5 users.
    fn context(handshake_timeout: Duration) -> Arc<InboundContext> {
        let (_slot, session) = watch::channel(None);
        Arc::new(InboundContext {
            session,
            socks_users: SocksUsers::default(),
            handshake_timeout,
            routes: Default::default(),
            names: Default::default(),
            fallback: Default::default(),
        })
    }

    /// Past the limit a connection is closed at once (not left unanswered in the backlog), and
    /// one closing frees its slot for the next.
    #[tokio::test]
    async fn a_connection_past_the_limit_is_closed_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ctx = context(Duration::from_secs(30));
        let counters = InboundCounters::new("socks5", addr, 2);
        let server = tokio::spawn(accept_loop(
            listener,
            ctx,
            counters.clone(),
            super::super::socks5_server::serve_connection,
        ));
        // Two clients hold the slots: connected, greeting not sent.
        let first = TcpStream::connect(addr).await.unwrap();
        let _second = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut third = TcpStream::connect(addr).await.unwrap();
        let mut answer = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut answer))
            .await
            .expect("the third connection is closed at once");
        assert!(closed.is_err() || answer.is_empty(), "{answer:?}");
        let status = counters.status();
        assert_eq!(
            (status.open, status.accepted, status.refused, status.failed),
            (2, 2, 1, 0)
        );
        drop(first);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The first ended with its greeting incomplete: closed, counted failed.
        let status = counters.status();
        assert_eq!((status.open, status.failed), (1, 1));
        // A slot is free again: a greeting is answered.
        let mut fourth = TcpStream::connect(addr).await.unwrap();
        fourth.write_all(&[5, 1, 0]).await.unwrap();
        let mut choice = [0u8; 2];
        tokio::time::timeout(Duration::from_secs(5), fourth.read_exact(&mut choice))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(choice, [5, 0]);
        let status = counters.status();
        assert_eq!((status.open, status.accepted, status.limit), (2, 3, 2));
        server.abort();
    }

    /// A SOCKS5 greeting offering no methods is answered "no acceptable methods" (05 FF).
    #[tokio::test]
    async fn a_greeting_with_no_methods_is_answered_no_acceptable_method() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ctx = context(Duration::from_secs(10));
        let counters = InboundCounters::new("socks5", addr, MAX_CONNECTIONS);
        let server = tokio::spawn(super::super::socks5_server::serve_socks5(
            listener, ctx, counters,
        ));
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(&[5, 0]).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(answer, [5, 0xff]);
        server.abort();
    }

    /// A client that stops sending before its request is complete is closed at the handshake
    /// deadline (which frees its connection slot), in both inbounds and at every stage.
    #[tokio::test]
    async fn a_client_silent_mid_request_is_closed_at_the_deadline() {
        let timeout = Duration::from_millis(300);
        let cases: [(&str, &[u8]); 4] = [
            ("socks5, nothing sent", b""),
            ("socks5, half a greeting", &[5, 1]),
            ("socks5, half a request", &[5, 1, 0, 5, 1]),
            ("http, half a head", b"CONNECT example.com:443 HTTP/1.1\r\n"),
        ];
        for (case, sent) in cases {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let ctx = context(timeout);
            let counters = InboundCounters::new("test", addr, MAX_CONNECTIONS);
            let server = if case.starts_with("socks5") {
                tokio::spawn(super::super::socks5_server::serve_socks5(
                    listener, ctx, counters,
                ))
            } else {
                tokio::spawn(super::super::http_server::serve_http_connect(
                    listener, ctx, counters,
                ))
            };
            let mut client = TcpStream::connect(addr).await.unwrap();
            client.write_all(sent).await.unwrap();
            let started = Instant::now();
            let mut answer = Vec::new();
            let closed =
                tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer))
                    .await;
            assert!(closed.is_ok(), "{case}: still open after 10 s");
            assert!(
                started.elapsed() >= timeout - Duration::from_millis(50),
                "{case}: closed after {:?}, before the deadline",
                started.elapsed()
            );
            server.abort();
        }
    }
}
