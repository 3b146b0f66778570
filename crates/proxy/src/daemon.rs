//! The two daemons assembled from their parts, for the command line and for tests:
//! [`start_client`] (links, session, SOCKS5 and HTTP CONNECT inbounds, control socket) and
//! [`start_server`] (QUIC endpoint, joins, sessions, egress, control socket). Each returns a
//! handle whose drop stops everything it started.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{ClientConfig, ServerConfig};
use crate::control::{self, ControlError, StatusSource};
use crate::inbound::server::InboundContext;
use crate::session::Role;
use crate::tls::{self, ServerIdentity, TlsError};
use crate::transport::client::{LinkContext, session_loop};
use crate::transport::quic::transport_config;
use crate::transport::server::{ServerShared, accept_loop};
use crate::transport::{DaemonStatus, SessionHandle};

/// A daemon that could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Certificates or keys.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A listener could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The control socket.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// quinn refused the TLS configuration.
    #[error("QUIC TLS configuration: {0}")]
    Quic(String),
}

/// A running client.
#[derive(Debug)]
pub struct ClientHandle {
    /// Where the SOCKS5 inbound listens.
    pub socks_addr: SocketAddr,
    /// Where the HTTP CONNECT inbound listens, if enabled.
    pub http_addr: Option<SocketAddr>,
    /// The control socket.
    pub control_path: PathBuf,
    session: watch::Receiver<Option<SessionHandle>>,
    conns: Arc<Mutex<Vec<Option<quinn::Connection>>>>,
    tasks: Vec<JoinHandle<()>>,
    created_dir: Option<PathBuf>,
}

impl ClientHandle {
    /// The current session, if any.
    pub fn session(&self) -> Option<SessionHandle> {
        self.session.borrow().clone()
    }

    /// The status as `braid status` would show it.
    pub async fn status(&self) -> DaemonStatus {
        StatusSource::Client(self.session.clone()).collect().await
    }

    /// Waits until at least `paths` paths have joined; false on timeout.
    pub async fn wait_for_paths(&self, paths: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            let status = self.status().await;
            if status
                .sessions
                .first()
                .is_some_and(|s| s.paths.len() >= paths)
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// Closes link `index`'s current connection (as if the link dropped); the link reconnects
    /// and rejoins by itself. False when the link has no connection now.
    pub fn drop_link(&self, index: usize) -> bool {
        let conn = self
            .conns
            .lock()
            .ok()
            .and_then(|c| c.get(index).cloned().flatten());
        match conn {
            Some(c) => {
                c.close(quinn::VarInt::from_u32(0), b"link dropped");
                true
            }
            None => false,
        }
    }

    /// Stops everything and removes the control socket (and the state directory when this
    /// daemon created it and nothing else is left in it).
    pub fn shutdown(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        remove_control(&self.control_path, self.created_dir.take());
    }
}

impl Drop for ClientHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The state directory when it does not exist yet (binding the control socket creates it).
fn missing_dir(dir: &Path) -> Option<PathBuf> {
    (!dir.exists()).then(|| dir.to_owned())
}

/// Removes the control socket, then `created_dir` if it is empty (`remove_dir` refuses a
/// directory that holds anything, e.g. a server's certificate).
fn remove_control(control_path: &Path, created_dir: Option<PathBuf>) {
    let _ = std::fs::remove_file(control_path);
    if let Some(dir) = created_dir {
        let _ = std::fs::remove_dir(dir);
    }
}

async fn bind_tcp(addr: SocketAddr) -> Result<tokio::net::TcpListener, DaemonError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| DaemonError::Bind { addr, source })
}

/// Starts the client: its session and links, inbounds and control socket.
pub async fn start_client(config: ClientConfig) -> Result<ClientHandle, DaemonError> {
    let crypto = tls::client_crypto(&config.trust)?;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(crypto)
        .map_err(|e| DaemonError::Quic(e.to_string()))?;
    let mut client_config = quinn::ClientConfig::new(Arc::new(quic));
    client_config.transport_config(Arc::new(transport_config()));
    let socks = bind_tcp(config.socks_listen).await?;
    let socks_addr = socks.local_addr().map_err(|source| DaemonError::Bind {
        addr: config.socks_listen,
        source,
    })?;
    let http = match config.http_listen {
        Some(addr) => Some(bind_tcp(addr).await?),
        None => None,
    };
    let http_addr = http.as_ref().and_then(|l| l.local_addr().ok());
    let control_path = control::socket_path(&config.state_dir, Role::Client);
    let created_dir = missing_dir(&config.state_dir);
    let control_listener = control::bind(&control_path)?;
    let (slot, session) = watch::channel(None);
    let conns = Arc::new(Mutex::new(vec![None; config.links.len()]));
    let config = Arc::new(config);
    let links = Arc::new(LinkContext {
        config: config.clone(),
        crypto: client_config,
        conns: conns.clone(),
    });
    let ctx = Arc::new(InboundContext {
        session: session.clone(),
        socks_users: config.socks_users.clone(),
        handshake_timeout: crate::inbound::server::HANDSHAKE_TIMEOUT,
    });
    let mut tasks = vec![
        tokio::spawn(session_loop(links, slot)),
        tokio::spawn(crate::inbound::socks5_server::serve_socks5(
            socks,
            ctx.clone(),
        )),
        tokio::spawn(control::serve(
            control_listener,
            StatusSource::Client(session.clone()),
        )),
    ];
    if let Some(l) = http {
        tasks.push(tokio::spawn(
            crate::inbound::http_server::serve_http_connect(l, ctx),
        ));
    }
    Ok(ClientHandle {
        socks_addr,
        http_addr,
        control_path,
        session,
        conns,
        tasks,
        created_dir,
    })
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    /// The UDP address the endpoint listens on.
    pub addr: SocketAddr,
    /// The certificate's SHA-256 fingerprint.
    pub fingerprint: String,
    /// The control socket.
    pub control_path: PathBuf,
    shared: Arc<ServerShared>,
    endpoint: quinn::Endpoint,
    tasks: Vec<JoinHandle<()>>,
    created_dir: Option<PathBuf>,
}

impl ServerHandle {
    /// The status as `braid status` would show it.
    pub async fn status(&self) -> DaemonStatus {
        StatusSource::Server(self.shared.clone()).collect().await
    }

    /// Stops everything and removes the control socket (and the state directory when this
    /// daemon created it and nothing else is left in it).
    pub fn shutdown(&mut self) {
        self.endpoint
            .close(quinn::VarInt::from_u32(0), b"server stopping");
        for t in self.tasks.drain(..) {
            t.abort();
        }
        for s in self.shared.sessions() {
            let commands = s.commands.clone();
            let _ = commands.try_send(crate::transport::driver::Command::Close);
        }
        remove_control(&self.control_path, self.created_dir.take());
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts the server with `identity` (see [`ServerIdentity::load_or_generate`]).
pub async fn start_server(
    config: ServerConfig,
    identity: ServerIdentity,
) -> Result<ServerHandle, DaemonError> {
    let crypto = tls::server_crypto(&identity)?;
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(crypto)
        .map_err(|e| DaemonError::Quic(e.to_string()))?;
    let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    server_config.transport_config(Arc::new(transport_config()));
    let endpoint = quinn::Endpoint::server(server_config, config.listen).map_err(|source| {
        DaemonError::Bind {
            addr: config.listen,
            source,
        }
    })?;
    let addr = endpoint.local_addr().map_err(|source| DaemonError::Bind {
        addr: config.listen,
        source,
    })?;
    let control_path = control::socket_path(&config.state_dir, Role::Server);
    let created_dir = missing_dir(&config.state_dir);
    let control_listener = control::bind(&control_path)?;
    let shared = ServerShared::new(Arc::new(config));
    let tasks = vec![
        tokio::spawn(accept_loop(endpoint.clone(), shared.clone())),
        tokio::spawn(control::serve(
            control_listener,
            StatusSource::Server(shared.clone()),
        )),
    ];
    Ok(ServerHandle {
        addr,
        fingerprint: identity.fingerprint(),
        control_path,
        shared,
        endpoint,
        tasks,
        created_dir,
    })
}
