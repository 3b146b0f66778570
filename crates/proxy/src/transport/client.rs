//! The client side of the paths: one quinn endpoint per configured link (bound to the link's
//! local address and device), one connection per link to the server, and the authenticated
//! join that makes it a path of the client's session. A link whose handshake or join fails is
//! retried with exponential backoff ([`BACKOFF_MIN`] doubling to [`BACKOFF_MAX`]) while the other
//! links carry traffic; a link that drops later reconnects the same way and rejoins with its path
//! id. No link is the master: the session lives while any path does, and when it closes (every
//! link down for the session's idle timeout) a new session starts.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use braid_sched_core::{PathId, SchedulerConfig};
use tokio::sync::watch;
use tracing::{info, warn};

use super::driver::{self, Command, DriverSetup};
use super::flow::SessionHandle;
use super::join::{EXPORTER_LABEL, JOIN_OK, JOIN_OK_FRAGMENTS, Join, SessionId, compute_mac};
use super::quic::{BindError, bind_link_socket, datagram_size};
use crate::config::{ClientConfig, LinkConfig};
use crate::session::{PathConfig, Role};

/// First retry delay of a link.
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Longest retry delay of a link.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long a handshake plus join may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a link could not join.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The server name did not resolve.
    #[error("resolving {server}: {reason}")]
    Resolve {
        /// The configured `host:port`.
        server: String,
        /// Why.
        reason: String,
    },
    /// The link's socket could not be bound.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// quinn could not start the endpoint or the connection.
    #[error("connecting: {0}")]
    Connect(String),
    /// The handshake or join timed out.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The server refused the join.
    #[error("the server refused the join (wrong user or key?)")]
    Refused,
    /// The peer does not support datagrams.
    #[error("the server connection does not carry datagrams")]
    NoDatagrams,
}

/// Shared state of the client's links.
#[derive(Debug)]
pub(crate) struct LinkContext {
    /// The file the client started with (a reload changes only `scheduler` below, and the
    /// inbounds' users).
    pub config: Arc<ClientConfig>,
    /// The scheduler of the next session (the file's, or a reload's).
    pub scheduler: std::sync::RwLock<SchedulerConfig>,
    pub crypto: quinn::ClientConfig,
    /// The live connection of each link (for status and for tests that cut a link).
    pub conns: Arc<Mutex<Vec<Option<quinn::Connection>>>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs sessions one after the other, publishing the current one in `slot`.
pub(crate) async fn session_loop(
    ctx: Arc<LinkContext>,
    slot: watch::Sender<Option<SessionHandle>>,
) {
    loop {
        let session_id: SessionId = rand::random();
        let (handle, task) = driver::spawn(DriverSetup {
            role: Role::Client,
            config: super::session_config(&ctx.config.session),
            scheduler: ctx
                .scheduler
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .build(),
            label: hex(&session_id),
            user: ctx.config.user.clone(),
            acceptor: None,
        });
        slot.send_replace(Some(handle.clone()));
        let links: Vec<_> = (0..ctx.config.links.len())
            .map(|i| tokio::spawn(run_link(i, ctx.clone(), session_id, handle.clone())))
            .collect();
        let _ = task.await;
        slot.send_replace(None);
        for l in links {
            l.abort();
        }
        if let Ok(mut conns) = ctx.conns.lock() {
            conns.iter_mut().for_each(|c| *c = None);
        }
        warn!("session closed; starting a new one");
        tokio::time::sleep(BACKOFF_MIN).await;
    }
}

async fn run_link(
    index: usize,
    ctx: Arc<LinkContext>,
    session_id: SessionId,
    session: SessionHandle,
) {
    let link = &ctx.config.links[index];
    let mut backoff = BACKOFF_MIN;
    loop {
        let started = Instant::now();
        match connect_and_join(index, link, &ctx, &session_id).await {
            Ok((endpoint, conn, fragments)) => {
                if let Ok(mut conns) = ctx.conns.lock() {
                    conns[index] = Some(conn.clone());
                }
                let config = PathConfig {
                    tier: link.tier,
                    weight: link.weight,
                    rate_cap: link.rate_cap_mbps.map(|m| (m * 1e6 / 8.0) as u64),
                    max_datagram_size: datagram_size(&conn),
                };
                let attach = Command::AttachPath {
                    id: PathId(index as u8),
                    conn: conn.clone(),
                    config,
                    name: link.name.clone(),
                    fragments,
                };
                if session.commands.send(attach).await.is_err() {
                    return;
                }
                info!(link = %link.name, remote = %conn.remote_address(), "link joined");
                let reason = conn.closed().await;
                warn!(link = %link.name, %reason, "link connection closed; reconnecting");
                drop(endpoint);
                if started.elapsed() > Duration::from_secs(10) {
                    backoff = BACKOFF_MIN;
                }
            }
            Err(e) => warn!(link = %link.name, error = %e, retry_in = ?backoff, "link not joined"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn resolve(link: &LinkConfig) -> Result<SocketAddr, LinkError> {
    let err = |reason: String| LinkError::Resolve {
        server: link.server.clone(),
        reason,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&link.server)
        .await
        .map_err(|e| err(e.to_string()))?
        .collect();
    let want_v4 = link.local_addr.map(|a| a.is_ipv4());
    addrs
        .iter()
        .find(|a| want_v4.is_none_or(|v4| a.is_ipv4() == v4))
        .copied()
        .ok_or_else(|| err("no address of the local address's family".into()))
}

async fn connect_and_join(
    index: usize,
    link: &LinkConfig,
    ctx: &LinkContext,
    session_id: &SessionId,
) -> Result<(quinn::Endpoint, quinn::Connection, bool), LinkError> {
    let server = resolve(link).await?;
    let local = link.local_addr.unwrap_or(if server.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    });
    let socket = bind_link_socket(local, link.interface.as_deref(), link.interface_required)?;
    let runtime =
        quinn::default_runtime().ok_or_else(|| LinkError::Connect("no async runtime".into()))?;
    let endpoint = quinn::Endpoint::new(quinn::EndpointConfig::default(), None, socket, runtime)
        .map_err(|e| LinkError::Connect(e.to_string()))?;
    let connecting = endpoint
        .connect_with(ctx.crypto.clone(), server, &ctx.config.server_name)
        .map_err(|e| LinkError::Connect(e.to_string()))?;
    let work = async {
        let conn = connecting
            .await
            .map_err(|e| LinkError::Connect(e.to_string()))?;
        let fragments = join(&conn, index, link, ctx, session_id).await?;
        Ok::<_, LinkError>((conn, fragments))
    };
    let (conn, fragments) = tokio::time::timeout(CONNECT_TIMEOUT, work)
        .await
        .map_err(|_| LinkError::Timeout(CONNECT_TIMEOUT))??;
    if conn.max_datagram_size().is_none() {
        return Err(LinkError::NoDatagrams);
    }
    Ok((endpoint, conn, fragments))
}

/// Joins the session on `conn`; returns whether the server reassembles DATAGRAM_FRAGMENT frames.
async fn join(
    conn: &quinn::Connection,
    index: usize,
    link: &LinkConfig,
    ctx: &LinkContext,
    session_id: &SessionId,
) -> Result<bool, LinkError> {
    let io = |e: &dyn std::fmt::Display| LinkError::Connect(e.to_string());
    let mut exporter = [0u8; 32];
    conn.export_keying_material(&mut exporter, EXPORTER_LABEL, b"")
        .map_err(|_| LinkError::Connect("TLS exporter unavailable".into()))?;
    let path = PathId(index as u8);
    let msg = Join {
        user: ctx.config.user.clone(),
        session_id: *session_id,
        path,
        tier: link.tier,
        weight: link.weight,
        fragments: true,
        link_name: link.name.clone(),
        mac: compute_mac(&ctx.config.key, &exporter, session_id, path),
    };
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| io(&e))?;
    send.write_all(&msg.encode()).await.map_err(|e| io(&e))?;
    send.finish().map_err(|e| io(&e))?;
    let answer = recv.read_to_end(16).await.map_err(|_| LinkError::Refused)?;
    if answer == [JOIN_OK] {
        Ok(false)
    } else if answer == [JOIN_OK_FRAGMENTS] {
        Ok(true)
    } else {
        conn.close(quinn::VarInt::from_u32(0), b"");
        Err(LinkError::Refused)
    }
}
