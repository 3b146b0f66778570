//! The server side of the paths: one quinn endpoint accepts every client connection, checks its
//! JOIN (bounded number of joins pending at once, each with a deadline) and groups connections of
//! one (user, session id) into one session driver whose flows go to the egress. A refused join
//! gets one generic refusal byte and the connection is closed; the log says "join refused" with
//! the remote address only (the reason is logged at debug level).
//!
//! The pending joins are guarded against a flood of Initial packets, which costs an attacker
//! nothing: once half of `max_pending_joins` is taken, a source must first prove its address
//! with a stateless QUIC Retry (so spoofed sources hold no slot), and one source address holds at
//! most a quarter of the slots (at least 8). Connections turned away count as refused joins and are logged
//! (at most once a second, with how many since the last line).

use portable_atomic::AtomicU64;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::{debug, info};

use super::driver::{self, Command, DriverSetup};
use super::flow::SessionHandle;
use super::join::{
    EXPORTER_LABEL, JOIN_REFUSED, Join, MAX_JOIN, REFUSED_CLOSE_CODE, SessionId, verify_mac,
};
use super::quic::datagram_size;
use crate::config::ServerConfig;
use crate::session::{PathConfig, Role};

/// How long a client has from the first packet to a complete JOIN.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Pending joins one source address may always have (unless `max_pending_joins` is smaller).
const PER_SOURCE_FLOOR: usize = 8;

/// State shared by the accept loop, the join tasks and the control endpoint.
#[derive(Debug)]
pub struct ServerShared {
    /// The configuration in force: the file's at start, replaced by [`ServerShared::reload`].
    config: RwLock<Arc<ServerConfig>>,
    /// Its egress policy, read by every flow of every session (so a reload reaches the flows
    /// of sessions already running; see [`crate::egress::PolicySlot`]).
    egress: crate::egress::PolicySlot,
    sessions: Mutex<HashMap<(String, SessionId), SessionHandle>>,
    pending: Arc<Semaphore>,
    /// Pending joins by source address (entries with none are removed).
    pending_by_source: Mutex<HashMap<IpAddr, usize>>,
    /// Connections turned away since the last log line about them, and when that was.
    turned_away: Mutex<(u64, Option<Instant>)>,
    /// Joins refused since start.
    pub joins_refused: AtomicU64,
    /// Joins accepted since start.
    pub joins_accepted: AtomicU64,
    /// Where the endpoints that take joins are bound ([`ServerShared::set_listen`]).
    listening: RwLock<Vec<SocketAddr>>,
    /// Joins refused since start, by reason (a fixed set of phrases).
    refusals: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    /// Each user's sessions started and the bytes of those that ended, since start.
    users: Arc<Mutex<std::collections::BTreeMap<String, UserTotals>>>,
}

/// A user's sessions started since the server started, and the application bytes of those
/// that have ended (a running session's are in its own counters).
#[derive(Clone, Copy, Debug, Default)]
struct UserTotals {
    sessions_started: u64,
    download_bytes: u64,
    upload_bytes: u64,
}

impl ServerShared {
    /// Shared state for `config`.
    pub fn new(config: Arc<ServerConfig>) -> Arc<ServerShared> {
        Arc::new(ServerShared {
            pending: Arc::new(Semaphore::new(config.max_pending_joins)),
            pending_by_source: Mutex::new(HashMap::new()),
            turned_away: Mutex::new((0, None)),
            egress: Arc::new(RwLock::new(Arc::new(config.egress.clone()))),
            config: RwLock::new(config),
            sessions: Mutex::new(HashMap::new()),
            joins_refused: AtomicU64::new(0),
            joins_accepted: AtomicU64::new(0),
            listening: RwLock::new(Vec::new()),
            refusals: Mutex::new(std::collections::BTreeMap::new()),
            users: Arc::default(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `new` (a configuration file read again) in force, but for what only a restart can
    /// change (the listening address, the metrics endpoint, the state directory, the
    /// certificate's name and `max_pending_joins`, which keep their values). The users, the
    /// scheduler and congestion controller (of new sessions;
    /// [`crate::daemon::ServerHandle::reload`] gives them to running ones), `[session]` limits of
    /// new sessions, `max_sessions` and the egress policy (of every new flow, in
    /// running sessions too) take the new values at once. The sessions of users the new file
    /// no longer lists, or lists with another key, are taken out of the table and returned
    /// for the caller to close: a key removed is a key revoked.
    pub fn reload(&self, mut new: ServerConfig) -> Reload {
        // The session table first, then the configuration, as `session_for` takes them: a join
        // verified under the old users meets the new ones there.
        let mut map = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let mut config = self.config.write().unwrap_or_else(PoisonError::into_inner);
        let old = config.clone();
        let mut needs_restart = Vec::new();
        // The daemon binds the new addresses ([`crate::daemon::ServerHandle::reload`]) and
        // then says so ([`ServerShared::set_listen`]).
        new.listen.clone_from(&old.listen);
        if new.state_dir != old.state_dir {
            needs_restart.push("state_dir");
            new.state_dir.clone_from(&old.state_dir);
        }
        if new.server_name != old.server_name {
            needs_restart.push("server_name");
            new.server_name.clone_from(&old.server_name);
        }
        if new.max_pending_joins != old.max_pending_joins {
            needs_restart.push("limits.max_pending_joins");
            new.max_pending_joins = old.max_pending_joins;
        }
        let mut changed = Vec::new();
        for (name, differs) in [
            ("user", new.users != old.users),
            ("scheduler", new.scheduler != old.scheduler),
            ("egress", new.egress != old.egress),
            ("limits.max_sessions", new.max_sessions != old.max_sessions),
            (
                "limits.max_sessions_per_user",
                new.max_sessions_per_user != old.max_sessions_per_user,
            ),
            ("metrics_token", new.metrics_token != old.metrics_token),
            ("metrics_tls", new.metrics_tls != old.metrics_tls),
            (
                "session.congestion",
                new.session.congestion != old.session.congestion,
            ),
            (
                "session.redundant_ports",
                new.session.redundant.ports != old.session.redundant.ports,
            ),
            (
                "session.redundant_max_mbps",
                new.session.redundant.max_rate != old.session.redundant.max_rate,
            ),
            (
                "session",
                crate::config::SessionLimits {
                    congestion: old.session.congestion,
                    redundant: old.session.redundant,
                    ..new.session
                } != old.session,
            ),
        ] {
            if differs {
                changed.push(name);
            }
        }
        let kept = |user: &str| {
            old.users
                .iter()
                .any(|u| u.name == user && new.users.contains(u))
        };
        let gone: Vec<_> = map.keys().filter(|(u, _)| !kept(u)).cloned().collect();
        let revoked = gone
            .into_iter()
            .filter_map(|k| map.remove(&k))
            .filter(|h| !h.is_closed())
            .collect();
        *self.egress.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(new.egress.clone());
        *config = Arc::new(new);
        Reload {
            changed,
            needs_restart,
            revoked,
        }
    }

    /// `listen` as the endpoints now are (the daemon that bound them, at start or a reload),
    /// and where they are bound (`bound`).
    pub fn set_listen(&self, listen: Vec<SocketAddr>, bound: Vec<SocketAddr>) {
        *self
            .listening
            .write()
            .unwrap_or_else(PoisonError::into_inner) = bound;
        let mut config = self.config.write().unwrap_or_else(PoisonError::into_inner);
        let mut new = (**config).clone();
        new.listen = listen;
        *config = Arc::new(new);
    }

    /// Where the endpoints that take joins are bound.
    pub fn listening(&self) -> Vec<SocketAddr> {
        self.listening
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
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

/// What [`ServerShared::reload`] did.
#[derive(Debug)]
pub struct Reload {
    /// The settings that took new values (names as in the file).
    pub changed: Vec<&'static str>,
    /// The settings that differ in the file but keep their values until a restart.
    pub needs_restart: Vec<&'static str>,
    /// The sessions of users removed or given another key, to close.
    pub revoked: Vec<SessionHandle>,
}

/// One pending join's hold on the limits: a `max_pending_joins` slot and one of its source's.
#[derive(Debug)]
struct PendingSlot {
    _permit: OwnedSemaphorePermit,
    shared: Arc<ServerShared>,
    source: IpAddr,
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        if let Ok(mut by_source) = self.shared.pending_by_source.lock()
            && let Some(n) = by_source.get_mut(&self.source)
        {
            *n -= 1;
            if *n == 0 {
                by_source.remove(&self.source);
            }
        }
    }
}

impl ServerShared {
    /// Whether a source that has not proved its address must do so (a Retry) before it gets a
    /// pending slot: once half the slots are taken.
    fn under_load(&self) -> bool {
        2 * self.pending.available_permits() < self.config().max_pending_joins
    }

    /// Most joins one source address may have pending: a quarter of the slots, but at least
    /// [`PER_SOURCE_FLOOR`] (a client joins all its links at once, and several clients may share
    /// an address) or every slot when there are fewer.
    fn per_source_limit(&self) -> usize {
        let max = self.config().max_pending_joins;
        max.div_ceil(4).max(PER_SOURCE_FLOOR).min(max)
    }

    /// A pending slot for a join from `source`, or why there is none.
    fn try_pending(self: &Arc<Self>, source: IpAddr) -> Result<PendingSlot, &'static str> {
        let source = source.to_canonical();
        let mut by_source = self
            .pending_by_source
            .lock()
            .map_err(|_| "pending joins poisoned")?;
        let held = by_source.get(&source).copied().unwrap_or(0);
        if held >= self.per_source_limit() {
            return Err("too many pending joins from this address");
        }
        let permit = self
            .pending
            .clone()
            .try_acquire_owned()
            .map_err(|_| "too many pending joins")?;
        by_source.insert(source, held + 1);
        Ok(PendingSlot {
            _permit: permit,
            shared: self.clone(),
            source,
        })
    }

    /// Counts a join refused for `reason`.
    fn count_refusal(&self, reason: &'static str) {
        self.joins_refused.fetch_add(1, Ordering::Relaxed);
        *self
            .refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(reason)
            .or_insert(0) += 1;
    }

    /// Each user's traffic since the server started: the users of the file in force, and any
    /// other with sessions since; `sessions` the running sessions' statuses (their bytes are
    /// added to those of the user's sessions that ended).
    pub fn users(&self, sessions: &[super::SessionStatus]) -> Vec<super::status::UserStatus> {
        let totals = self
            .users
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut names: std::collections::BTreeSet<String> =
            self.config().users.iter().map(|u| u.name.clone()).collect();
        names.extend(totals.keys().cloned());
        names
            .into_iter()
            .map(|name| {
                let ended = totals.get(&name).copied().unwrap_or_default();
                let live: Vec<_> = sessions.iter().filter(|s| s.user == name).collect();
                super::status::UserStatus {
                    sessions: live.len() as u64,
                    sessions_started: ended.sessions_started,
                    download_bytes: ended.download_bytes
                        + live.iter().map(|s| s.counters.bytes_written).sum::<u64>(),
                    upload_bytes: ended.upload_bytes
                        + live.iter().map(|s| s.counters.bytes_read).sum::<u64>(),
                    name,
                }
            })
            .collect()
    }

    /// Joins refused since start, by reason.
    pub fn refusals(&self) -> std::collections::BTreeMap<String, u64> {
        self.refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(reason, n)| ((*reason).to_owned(), *n))
            .collect()
    }

    /// Counts a connection turned away before its join and logs it, at most once a second.
    fn turn_away(&self, remote: SocketAddr, reason: &'static str) {
        self.count_refusal(reason);
        let Ok(mut turned) = self.turned_away.lock() else {
            return;
        };
        turned.0 += 1;
        let now = Instant::now();
        if turned
            .1
            .is_none_or(|last| now.duration_since(last) >= Duration::from_secs(1))
        {
            info!(%remote, reason, since_last_line = turned.0, "join refused before the handshake");
            *turned = (0, Some(now));
        }
    }
}

/// Accepts connections until the endpoint is closed.
pub async fn accept_loop(endpoint: quinn::Endpoint, shared: Arc<ServerShared>) {
    while let Some(incoming) = endpoint.accept().await {
        let remote = incoming.remote_address();
        if shared.under_load() && !incoming.remote_address_validated() && incoming.may_retry() {
            // Stateless: the source gets a slot only when it comes back with the token.
            if incoming.retry().is_err() {
                debug!(%remote, "retry not possible");
            }
            continue;
        }
        let slot = match shared.try_pending(remote.ip()) {
            Ok(slot) => slot,
            Err(reason) => {
                shared.turn_away(remote, reason);
                incoming.refuse();
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let result = tokio::time::timeout(JOIN_TIMEOUT, admit(incoming, &shared)).await;
            drop(slot);
            match result {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => refused(&shared, remote, reason),
                Err(_) => refused(&shared, remote, "timed out"),
            }
        });
    }
}

/// Why a join of an authenticated user was refused for want of room (`[limits]
/// max_sessions`, `max_sessions_per_user`): logged as a warning naming the setting, which the
/// operator may want to raise.
const SESSION_LIMIT: &str = "session limit reached";
const USER_SESSION_LIMIT: &str = "the user's session limit reached";

fn refused(shared: &ServerShared, remote: SocketAddr, reason: &'static str) {
    shared.count_refusal(reason);
    let setting = match reason {
        SESSION_LIMIT => Some("[limits] max_sessions"),
        USER_SESSION_LIMIT => Some("[limits] max_sessions_per_user"),
        _ => None,
    };
    if let Some(setting) = setting {
        tracing::warn!(%remote, reason, setting, "join refused");
        return;
    }
    info!(%remote, "join refused");
    debug!(%remote, reason, "join refused");
}

/// Handshake, JOIN, verification, and hand-over to the session. The error is the reason, for the
/// debug log only.
async fn admit(incoming: quinn::Incoming, shared: &ServerShared) -> Result<(), &'static str> {
    let conn = incoming.await.map_err(|_| "handshake failed")?;
    let (mut send, mut recv) = conn.accept_bi().await.map_err(|_| "no join stream")?;
    let verdict = read_join(&conn, &mut recv, shared).await;
    let admitted = verdict.and_then(|(join, key)| Ok((session_for(shared, &join, key)?, join)));
    let ((session, created), join) = match admitted {
        Ok(admitted) => admitted,
        Err(reason) => {
            refuse_and_close(&conn, &mut send).await;
            return Err(reason);
        }
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
        peer: super::join::PeerKnows {
            // The server never sends PATH_ABANDON, nor its floor for backups (the client's
            // governs the session).
            abandon: false,
            backup_floor: false,
            ..join.knows
        },
        // The client says its link's controller by PATH_CONGESTION and its cap by
        // PATH_RATE_CAP, which the server takes.
        congestion: None,
        rate_cap_down: None,
        server_knows: super::join::ServerKnows::default(),
    };
    session
        .commands
        .send(attach)
        .await
        .map_err(|_| "session gone")?;
    send.write_all(&super::join::answer(&join, created))
        .await
        .map_err(|_| "join answer lost")?;
    let _ = send.finish();
    shared.joins_accepted.fetch_add(1, Ordering::Relaxed);
    info!(remote = %conn.remote_address(), user = %join.user, path = join.path.0, link = %join.link_name, "join accepted");
    Ok(())
}

/// Reads and checks the JOIN: the join and the key it was checked with, or the reason for
/// refusing it (debug log only).
async fn read_join(
    conn: &quinn::Connection,
    recv: &mut quinn::RecvStream,
    shared: &ServerShared,
) -> Result<(Join, [u8; 32]), &'static str> {
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
            let config = shared.config();
            let key = config
                .users
                .iter()
                .find(|u| u.name == join.user)
                .map(|u| &u.key);
            let exported = conn
                .export_keying_material(&mut exporter, EXPORTER_LABEL, b"")
                .is_ok();
            // `verify_mac` runs for unknown users too (the same work either way).
            let verified = exported && verify_mac(key, &exporter, &join);
            match key {
                Some(&key) if verified => Ok((join, key)),
                _ => Err("bad user or proof"),
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

/// The session of (user, session id), started if new and the limit allows (then `true`), for a
/// join checked with `user_key`; refused when a reload has meanwhile removed the user or changed
/// its key.
fn session_for(
    shared: &ServerShared,
    join: &Join,
    user_key: [u8; 32],
) -> Result<(SessionHandle, bool), &'static str> {
    let mut map = shared
        .sessions
        .lock()
        .map_err(|_| "session table poisoned")?;
    let config = shared.config();
    if !config
        .users
        .iter()
        .any(|u| u.name == join.user && u.key == user_key)
    {
        return Err("user removed or re-keyed by a reload");
    }
    map.retain(|_, h| !h.is_closed());
    let key = (join.user.clone(), join.session_id);
    if let Some(h) = map.get(&key) {
        return Ok((h.clone(), false));
    }
    if map.len() >= config.max_sessions {
        return Err(SESSION_LIMIT);
    }
    if map.keys().filter(|(user, _)| *user == join.user).count() >= config.max_sessions_per_user {
        return Err(USER_SESSION_LIMIT);
    }
    let policy = shared.egress.clone();
    let users = shared.users.clone();
    users
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(join.user.clone())
        .or_default()
        .sessions_started += 1;
    let user = join.user.clone();
    let (handle, _task) = driver::spawn(DriverSetup {
        role: Role::Server,
        config: super::session_config(&config.session),
        scheduler: config.scheduler.build(),
        label: hex(&join.session_id),
        user: join.user.clone(),
        acceptor: Some(Box::new(move |flow, kind, target| {
            crate::egress::spawn_flow(flow, kind, target, policy.clone());
        })),
        // What the server wrote into the session went down to the user; what it read, up.
        on_end: Some(Box::new(move |counters| {
            let mut users = users.lock().unwrap_or_else(PoisonError::into_inner);
            let totals = users.entry(user).or_default();
            totals.download_bytes += counters.bytes_written;
            totals.upload_bytes += counters.bytes_read;
        })),
    });
    map.insert(key, handle.clone());
    Ok((handle, true))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn shared(max_pending_joins: usize) -> Arc<ServerShared> {
        let key = "ab".repeat(32);
        let text = format!(
            "listen = \"127.0.0.1:0\"\n[[user]]\nname = \"a\"\nkey = \"{key}\"\n\
             [limits]\nmax_pending_joins = {max_pending_joins}\n"
        );
        let config = ServerConfig::parse(std::path::Path::new("s.toml"), &text).unwrap();
        ServerShared::new(Arc::new(config))
    }

    /// Every setting a reload may meet: the restart-only ones keep their values (and are
    /// named), the others take the new ones (and are named); a file unchanged changes nothing.
    /// `listen` is left to the daemon, which binds the new addresses and then says so.
    #[test]
    fn a_reload_applies_what_it_can_and_names_what_needs_a_restart() {
        let s = shared(64);
        let old = s.config();
        let done = s.reload((*old).clone());
        assert!(done.changed.is_empty() && done.needs_restart.is_empty());
        let key = "cd".repeat(32);
        let text = format!(
            "listen = \"127.0.0.1:9\"\nstate_dir = \"/tmp/elsewhere\"\nserver_name = \"x\"\n\
             [[user]]\nname = \"a\"\nkey = \"{key}\"\n\
             [scheduler]\nname = \"rr\"\n[egress]\nallow_private = true\n\
             [limits]\nmax_pending_joins = 8\nmax_sessions = 3\n\
             [session]\nmax_udp_payload = 4000\ncongestion = \"olia\"\n"
        );
        let new = ServerConfig::parse(std::path::Path::new("s.toml"), &text).unwrap();
        let done = s.reload(new.clone());
        assert_eq!(
            done.needs_restart,
            ["state_dir", "server_name", "limits.max_pending_joins"]
        );
        assert_eq!(
            done.changed,
            [
                "user",
                "scheduler",
                "egress",
                "limits.max_sessions",
                "session.congestion",
                "session"
            ]
        );
        let now = s.config();
        assert_eq!((&now.listen, &now.state_dir), (&old.listen, &old.state_dir));
        let moved = vec!["127.0.0.1:9".parse().unwrap()];
        s.set_listen(moved.clone(), moved.clone());
        assert_eq!(s.config().listen, moved);
        assert_eq!(s.listening(), moved);
        assert_eq!(
            (&now.server_name, now.max_pending_joins),
            (&old.server_name, 64)
        );
        assert_eq!((&now.users, now.max_sessions), (&new.users, 3));
        assert_eq!(now.session.max_udp_payload, 4000);
        assert!(s.egress.read().unwrap().allow_private);
    }

    /// A join checked under a key that a reload has since removed or changed gets no session
    /// (the window between the join's check and its session).
    #[test]
    fn a_join_checked_under_a_revoked_key_gets_no_session() {
        let s = shared(64);
        let join = Join {
            user: "a".into(),
            session_id: [7; 16],
            path: braid_sched_core::PathId(0),
            tier: crate::session::Tier::Primary,
            weight: 1,
            knows: super::super::join::PeerKnows::ALL,
            second_answer_byte: true,
            link_name: "w".into(),
            mac: [0; 32],
        };
        let mut rekeyed = (*s.config()).clone();
        rekeyed.users[0].key = [0xcd; 32];
        let _ = s.reload(rekeyed);
        assert_eq!(
            session_for(&s, &join, [0xab; 32]).unwrap_err(),
            "user removed or re-keyed by a reload"
        );
    }

    fn source(i: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, i])
    }

    #[test]
    fn one_source_holds_at_most_its_share_of_the_pending_slots() {
        let s = shared(64);
        assert_eq!(s.per_source_limit(), 16);
        let first: Vec<_> = (0..16).map(|_| s.try_pending(source(1)).unwrap()).collect();
        assert_eq!(
            s.try_pending(source(1)).unwrap_err(),
            "too many pending joins from this address"
        );
        // The IPv4-mapped form is the same source.
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(s.try_pending(mapped).is_err());
        assert!(!s.under_load());
        let mut others: Vec<_> = (2..5)
            .flat_map(|i| (0..16).map(move |_| i))
            .map(|i| s.try_pending(source(i)).unwrap())
            .collect();
        assert!(s.under_load());
        assert_eq!(
            s.try_pending(source(5)).unwrap_err(),
            "too many pending joins"
        );
        // Slots come back when joins end, and the map forgets sources with none.
        others.truncate(8);
        assert!(s.try_pending(source(5)).is_ok());
        drop(first);
        drop(others);
        assert!(s.pending_by_source.lock().unwrap().is_empty());
        assert!(!s.under_load());
    }

    #[test]
    fn small_limits_leave_one_source_every_slot_up_to_eight() {
        assert_eq!(shared(1).per_source_limit(), 1);
        assert_eq!(shared(4).per_source_limit(), 4);
        assert_eq!(shared(16).per_source_limit(), 8);
        assert_eq!(shared(100).per_source_limit(), 25);
        let s = shared(2);
        let _held = s.try_pending(source(1)).unwrap();
        assert!(!s.under_load());
        let _second = s.try_pending(source(1)).unwrap();
        assert!(s.under_load());
    }

    #[test]
    fn turned_away_connections_count_as_refused_joins() {
        let s = shared(4);
        let remote = SocketAddr::from(([10, 0, 0, 1], 5000));
        for _ in 0..3 {
            s.turn_away(remote, "too many pending joins");
        }
        assert_eq!(s.joins_refused.load(Ordering::Relaxed), 3);
        // Logged once (the first); the other two wait for the next line.
        assert_eq!(s.turned_away.lock().unwrap().0, 2);
    }
}
