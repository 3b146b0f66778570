//! The daemons' local control endpoint: a Unix domain socket in the state directory (directory
//! mode 0700, socket mode 0600, so only the daemon's user can use it). Each connection gets one
//! JSON [`DaemonStatus`] document and is closed; `braid status` reads it ([`query`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tracing::debug;

use crate::inbound::server::InboundCounters;
use crate::inbound::tun::TunCounters;
use crate::session::Role;
use crate::transport::client::LinkContext;
use crate::transport::server::ServerShared;
use crate::transport::{DaemonStatus, SessionHandle};

/// Largest status document `query` accepts, bytes.
pub const MAX_STATUS: u64 = 4 << 20;
/// How long `query` waits for the whole document (a live daemon answers in milliseconds; a
/// socket that accepts and never answers would otherwise hold `braid status` for ever).
pub const QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A control endpoint problem.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The socket could not be created, reached or read.
    #[error("{path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The answer is not a status document.
    #[error("{path}: not a status document: {reason}")]
    Malformed {
        /// The socket.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The control socket of `role` in `state_dir`.
pub fn socket_path(state_dir: &Path, role: Role) -> PathBuf {
    state_dir.join(match role {
        Role::Client => "client.sock",
        Role::Server => "server.sock",
    })
}

/// Where a status comes from.
#[derive(Debug, Clone)]
pub enum StatusSource {
    /// The client's.
    Client(ClientSources),
    /// The server's sessions.
    Server(Arc<ServerShared>),
}

/// What a client's status is collected from.
#[derive(Debug, Clone)]
pub struct ClientSources {
    /// The current session.
    pub session: watch::Receiver<Option<SessionHandle>>,
    /// The links.
    pub links: Arc<LinkContext>,
    /// The TUN inbound's device name and counters.
    pub tun: Option<(String, Arc<TunCounters>)>,
    /// The SOCKS5 and HTTP CONNECT inbounds' counters (replaced when a reload moves, adds or
    /// removes a listener).
    pub inbounds: Arc<std::sync::RwLock<Vec<Arc<InboundCounters>>>>,
    /// The routes in force and their counts.
    pub routes: Arc<crate::inbound::route::Routes>,
    /// `fallback` and its counts.
    pub fallback: Arc<crate::inbound::route::Fallback>,
}

impl StatusSource {
    /// Collects the status now.
    pub async fn collect(&self) -> DaemonStatus {
        let tun = match self {
            StatusSource::Client(ClientSources {
                tun: Some((device, counters)),
                ..
            }) => Some(counters.status(device)),
            _ => None,
        };
        let (role, handles, refused, accepted) = match self {
            StatusSource::Client(client) => {
                let handle = client.session.borrow().clone();
                ("client", handle.into_iter().collect::<Vec<_>>(), 0, 0)
            }
            StatusSource::Server(shared) => (
                "server",
                shared.sessions(),
                shared.joins_refused.load(Ordering::Relaxed),
                shared.joins_accepted.load(Ordering::Relaxed),
            ),
        };
        let mut sessions = Vec::with_capacity(handles.len());
        for h in handles {
            if let Ok(s) = h.status().await {
                sessions.push(s);
            }
        }
        let users = match self {
            StatusSource::Client(_) => Vec::new(),
            StatusSource::Server(shared) => shared.users(&sessions),
        };
        DaemonStatus {
            role: role.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            joins_refused: refused,
            joins_accepted: accepted,
            joins_refused_by_reason: match self {
                StatusSource::Client(_) => Default::default(),
                StatusSource::Server(shared) => shared.refusals(),
            },
            listen: match self {
                StatusSource::Client(_) => Vec::new(),
                StatusSource::Server(shared) => {
                    shared.listening().iter().map(ToString::to_string).collect()
                }
            },
            sessions,
            tun,
            links: match self {
                StatusSource::Client(client) => client.links.status(),
                StatusSource::Server(_) => Vec::new(),
            },
            link_patterns: match self {
                StatusSource::Client(client) => client.links.patterns(),
                StatusSource::Server(_) => Vec::new(),
            },
            inbounds: match self {
                StatusSource::Client(client) => client
                    .inbounds
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .iter()
                    .map(|c| c.status())
                    .collect(),
                StatusSource::Server(_) => Vec::new(),
            },
            routes: match self {
                StatusSource::Client(client) => client.routes.current().status(),
                StatusSource::Server(_) => Vec::new(),
            },
            users,
            fallback: match self {
                StatusSource::Client(client) => client.fallback.status(),
                StatusSource::Server(_) => None,
            },
            process: crate::process::ProcessReport::now(),
        }
    }
}

/// Binds the control socket at `path` (replacing a stale one), mode 0600 in a 0700 directory.
pub fn bind(path: &Path) -> Result<UnixListener, ControlError> {
    use std::os::unix::fs::PermissionsExt as _;
    let io = |source| ControlError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        // Named by the directory: that is what could not be made (e.g. `state_dir` is a file).
        let dir_error = |source| ControlError::Io {
            path: dir.to_owned(),
            source,
        };
        crate::tls::create_private_dir(dir).map_err(|e| match e {
            crate::tls::TlsError::Io { source, .. } => dir_error(source),
            other => dir_error(std::io::Error::other(other.to_string())),
        })?;
    }
    if std::fs::symlink_metadata(path).is_ok() {
        std::fs::remove_file(path).map_err(io)?;
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    Ok(listener)
}

/// Answers every connection with the current status.
pub async fn serve(listener: UnixListener, source: StatusSource) {
    loop {
        let mut stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: wait rather than spin.
                debug!(error = %e, "control socket: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let source = source.clone();
        tokio::spawn(async move {
            let status = source.collect().await;
            match serde_json::to_vec(&status) {
                Ok(mut body) => {
                    body.push(b'\n');
                    let _ = stream.write_all(&body).await;
                    let _ = stream.shutdown().await;
                }
                Err(e) => debug!(error = %e, "status not serialised"),
            }
        });
    }
}

/// Asks the daemon behind `path` for its status, waiting at most [`QUERY_TIMEOUT`].
pub async fn query(path: &Path) -> Result<DaemonStatus, ControlError> {
    query_within(path, QUERY_TIMEOUT).await
}

/// [`query`] with its own time limit.
async fn query_within(
    path: &Path,
    limit: std::time::Duration,
) -> Result<DaemonStatus, ControlError> {
    let io = |source| ControlError::Io {
        path: path.to_owned(),
        source,
    };
    let read = async {
        let stream = UnixStream::connect(path).await?;
        let mut body = Vec::new();
        stream.take(MAX_STATUS).read_to_end(&mut body).await?;
        Ok(body)
    };
    let body = tokio::time::timeout(limit, read)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {limit:?}"),
            ))
        })
        .map_err(io)?;
    serde_json::from_slice(&body).map_err(|e| ControlError::Malformed {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("braid-control-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn a_socket_that_never_answers_times_out() {
        let dir = scratch("silent");
        let path = dir.join("client.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                open.push(stream);
            }
        });
        let limit = std::time::Duration::from_millis(200);
        let e = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            query_within(&path, limit),
        )
        .await
        .expect("query returned within 10 s")
        .unwrap_err()
        .to_string();
        assert!(e.contains("client.sock: no answer within 200ms"), "{e}");
        held.abort();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_state_dir_that_is_a_file_is_named_in_the_error() {
        let dir = scratch("file");
        let state_dir = dir.join("state");
        std::fs::write(&state_dir, "").unwrap();
        let e = bind(&socket_path(&state_dir, Role::Client))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(&format!("{}: ", state_dir.display())), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
