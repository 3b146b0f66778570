//! The server side of the paths: one quinn endpoint accepts every client connection, checks its
//! JOIN (bounded number of joins pending at once, each with a deadline) and groups connections of
//! one (user, session id) into one session driver whose flows go to the egress. A refused join
//! gets one generic refusal byte and the connection is closed; the log says "join refused" with
//! the remote address only (the reason is logged at debug level).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tracing::{debug, info};

use super::driver::{self, Command, DriverSetup};
use super::flow::SessionHandle;
use super::join::{
    EXPORTER_LABEL, JOIN_OK, JOIN_REFUSED, Join, MAX_JOIN, REFUSED_CLOSE_CODE, SessionId,
    verify_mac,
};
use super::quic::datagram_size;
use crate::config::ServerConfig;
use crate::session::{PathConfig, Role};

/// How long a client has from the first packet to a complete JOIN.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// State shared by the accept loop, the join tasks and the control endpoint.
#[derive(Debug)]
pub struct ServerShared {
    pub(crate) config: Arc<ServerConfig>,
    sessions: Mutex<HashMap<(String, SessionId), SessionHandle>>,
    pending: Arc<Semaphore>,
    /// Joins refused since start.
    pub joins_refused: AtomicU64,
    /// Joins accepted since start.
    pub joins_accepted: AtomicU64,
}

impl ServerShared {
    /// Shared state for `config`.
    pub fn new(config: Arc<ServerConfig>) -> Arc<ServerShared> {
        Arc::new(ServerShared {
            pending: Arc::new(Semaphore::new(config.max_pending_joins)),
            config,
            sessions: Mutex::new(HashMap::new()),
            joins_refused: AtomicU64::new(0),
            joins_accepted: AtomicU64::new(0),
        })
    }

    /// Handles of the sessions alive now.
    pub fn sessions(&self) -> Vec<SessionHandle> {
        match self.sessions.lock() {
            Ok(mut map) => {
                map.retain(|_, h| !h.is_closed());
                map.values().cloned().collect()
            }
            Err(_) => Vec::new(),
        }
    }
}

/// Accepts connections until the endpoint is closed.
pub async fn accept_loop(endpoint: quinn::Endpoint, shared: Arc<ServerShared>) {
    while let Some(incoming) = endpoint.accept().await {
        let Ok(permit) = shared.pending.clone().try_acquire_owned() else {
            debug!(remote = %incoming.remote_address(), "too many pending joins");
            incoming.refuse();
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            let result = tokio::time::timeout(JOIN_TIMEOUT, admit(incoming, &shared)).await;
            drop(permit);
            match result {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => refused(&shared, remote, reason),
                Err(_) => refused(&shared, remote, "timed out"),
            }
        });
    }
}

fn refused(shared: &ServerShared, remote: SocketAddr, reason: &'static str) {
    shared.joins_refused.fetch_add(1, Ordering::Relaxed);
    info!(%remote, "join refused");
    debug!(%remote, reason, "join refused");
}

/// Handshake, JOIN, verification, and hand-over to the session. The error is the reason, for the
/// debug log only.
async fn admit(incoming: quinn::Incoming, shared: &ServerShared) -> Result<(), &'static str> {
    let conn = incoming.await.map_err(|_| "handshake failed")?;
    let (mut send, mut recv) = conn.accept_bi().await.map_err(|_| "no join stream")?;
    let verdict = read_join(&conn, &mut recv, shared).await;
    let join = match verdict {
        Ok(j) => j,
        Err(reason) => {
            refuse_and_close(&conn, &mut send).await;
            return Err(reason);
        }
    };
    let Some(session) = session_for(shared, &join) else {
        refuse_and_close(&conn, &mut send).await;
        return Err("session limit reached");
    };
    let config = PathConfig {
        tier: join.tier,
        weight: join.weight,
        rate_cap: None,
        max_datagram_size: datagram_size(&conn),
    };
    let attach = Command::AttachPath {
        id: join.path,
        conn: conn.clone(),
        config,
        name: join.link_name.clone(),
    };
    session
        .commands
        .send(attach)
        .await
        .map_err(|_| "session gone")?;
    send.write_all(&[JOIN_OK])
        .await
        .map_err(|_| "join answer lost")?;
    let _ = send.finish();
    shared.joins_accepted.fetch_add(1, Ordering::Relaxed);
    info!(remote = %conn.remote_address(), user = %join.user, path = join.path.0, link = %join.link_name, "join accepted");
    Ok(())
}

/// Reads and checks the JOIN: the join, or the reason for refusing it (debug log only).
async fn read_join(
    conn: &quinn::Connection,
    recv: &mut quinn::RecvStream,
    shared: &ServerShared,
) -> Result<Join, &'static str> {
    let bytes = match recv.read_to_end(MAX_JOIN).await {
        Ok(b) => b,
        Err(_) => {
            conn.close(quinn::VarInt::from_u32(REFUSED_CLOSE_CODE), b"");
            return Err("join unreadable or too long");
        }
    };
    let mut exporter = [0u8; 32];
    match Join::decode(&bytes) {
        Err(_) => Err("malformed join"),
        Ok(join) => {
            let key = shared
                .config
                .users
                .iter()
                .find(|u| u.name == join.user)
                .map(|u| &u.key);
            let exported = conn
                .export_keying_material(&mut exporter, EXPORTER_LABEL, b"")
                .is_ok();
            if exported && verify_mac(key, &exporter, &join) {
                Ok(join)
            } else {
                Err("bad user or proof")
            }
        }
    }
}

async fn refuse_and_close(conn: &quinn::Connection, send: &mut quinn::SendStream) {
    let _ = send.write_all(&[JOIN_REFUSED]).await;
    let _ = send.finish();
    // Give the answer a moment to reach the client, which closes on reading it.
    let _ = tokio::time::timeout(Duration::from_secs(1), conn.closed()).await;
    conn.close(quinn::VarInt::from_u32(REFUSED_CLOSE_CODE), b"");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The session of (user, session id), started if new and the limit allows.
fn session_for(shared: &ServerShared, join: &Join) -> Option<SessionHandle> {
    let mut map = shared.sessions.lock().ok()?;
    map.retain(|_, h| !h.is_closed());
    let key = (join.user.clone(), join.session_id);
    if let Some(h) = map.get(&key) {
        return Some(h.clone());
    }
    if map.len() >= shared.config.max_sessions {
        return None;
    }
    let policy = Arc::new(shared.config.egress.clone());
    let (handle, _task) = driver::spawn(DriverSetup {
        role: Role::Server,
        config: super::session_config(shared.config.flow_receive_window),
        scheduler: shared.config.scheduler.build(),
        label: hex(&join.session_id),
        user: join.user.clone(),
        acceptor: Some(Box::new(move |flow, kind, target| {
            crate::egress::spawn_flow(flow, kind, target, policy.clone());
        })),
    });
    map.insert(key, handle.clone());
    Some(handle)
}
