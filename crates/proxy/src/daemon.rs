//! The two daemons assembled from their parts, for the command line and for tests:
//! [`start_client`] (links, session, SOCKS5, HTTP CONNECT and TUN inbounds, control socket) and
//! [`start_server`] (QUIC endpoint, joins, sessions, egress, control socket). Each returns a
//! handle whose drop stops everything it started; `shutdown_gracefully` first tells the peers
//! (session CLOSE, then QUIC CONNECTION_CLOSE), bounded by [`CLOSE_GRACE`] and [`DRAIN_TIMEOUT`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{ClientConfig, IpNet, LinkConfig, ServerConfig, SessionLimits, TunConfig};
use crate::control::{self, ClientSources, ControlError, StatusSource};
use crate::inbound::route::{Fallback, Routes};
use crate::inbound::server::{InboundContext, InboundCounters, MAX_CONNECTIONS, SocksUsers};
use crate::inbound::tun::device::TunDevice;
use crate::inbound::tun::{PacketIo as _, TunCounters, serve_tun_watching};
use crate::metrics::MetricsAuth;
use crate::session::Role;
use crate::tls::{self, ServerIdentity, TlsError};
use crate::transport::client::{LinkChanges, LinkContext, session_loop};
use crate::transport::quic::transport_config;
use crate::transport::server::{Reload, ServerShared, accept_loop};
use crate::transport::{DaemonStatus, SessionHandle};

/// How long a graceful shutdown waits for its sessions to send their CLOSE and stop. A driver
/// that sent CLOSE stops when the peer answers by closing the paths (one round trip) or at its
/// next one-second tick, whichever comes first.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// How long a graceful shutdown then waits for the QUIC connections' CONNECTION_CLOSE to leave.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a graceful shutdown looks whether the sessions have stopped.
const CLOSE_POLL: Duration = Duration::from_millis(10);

/// A daemon that could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Certificates or keys.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A listener could not be bound.
    #[error("binding {addr}: {source}{hint}", hint = low_port_hint(*addr, source))]
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
    /// The TUN device could not be opened.
    #[error("TUN device {name:?} (config [tun] name): {source}")]
    Tun {
        /// The name asked for.
        name: String,
        /// Why (e.g. no `CAP_NET_ADMIN` to create it).
        source: std::io::Error,
    },
    /// An address, the link state or a route of the TUN device could not be set.
    #[error("TUN device {name:?} (config {what}): {source}")]
    TunSetup {
        /// The device.
        name: String,
        /// What failed, as configured (e.g. `[tun] address[0] = 10.7.0.1/24`).
        what: String,
        /// Why (e.g. no `CAP_NET_ADMIN`).
        source: std::io::Error,
    },
}

/// Sets the TUN device's configured addresses, brings it up and adds the configured routes
/// (nothing when `[tun]` lists neither).
fn configure_tun(name: &str, t: &crate::config::TunConfig) -> Result<(), DaemonError> {
    use crate::inbound::tun::netconf;
    if t.address.is_empty() && t.routes.is_empty() {
        return Ok(());
    }
    let failed = |what: String| {
        let name = name.to_owned();
        move |source| DaemonError::TunSetup { name, what, source }
    };
    for (i, net) in t.address.iter().enumerate() {
        netconf::add_address(name, *net).map_err(failed(format!("[tun] address[{i}] = {net}")))?;
    }
    netconf::set_up(name).map_err(failed("[tun]: bringing the device up".to_owned()))?;
    for (i, net) in t.routes.iter().enumerate() {
        netconf::add_route(name, *net).map_err(failed(format!("[tun] routes[{i}] = {net}")))?;
    }
    tracing::info!(
        device = name,
        addresses = t.address.len(),
        routes = t.routes.len(),
        "TUN device configured and up"
    );
    Ok(())
}

/// A running client.
#[derive(Debug)]
pub struct ClientHandle {
    /// Where the SOCKS5 inbound listened at start ([`ClientHandle::listening`] after reloads).
    pub socks_addr: SocketAddr,
    /// Where the HTTP CONNECT inbound listened at start, if enabled.
    pub http_addr: Option<SocketAddr>,
    /// Where the metrics endpoint listened at start, if enabled.
    pub metrics_addr: Option<SocketAddr>,
    /// The listeners now, as reloads moved, added or removed them.
    listeners: std::sync::Mutex<Listeners>,
    /// What the listeners' tasks are started with.
    sources: ClientSources,
    /// The control socket.
    pub control_path: PathBuf,
    /// The TUN inbound's device name and counters, if enabled.
    pub tun: Option<(String, Arc<TunCounters>)>,
    /// The routes braid has set on the TUN device now (`[tun] routes`, as reloads changed them).
    tun_routes: std::sync::Mutex<Vec<IpNet>>,
    /// The addresses braid has given the TUN device now (`[tun] address`, as reloads changed
    /// them).
    tun_addresses: std::sync::Mutex<Vec<IpNet>>,
    session: watch::Receiver<Option<SessionHandle>>,
    tasks: Vec<JoinHandle<()>>,
    created_dir: Option<PathBuf>,
    inbound: Arc<InboundContext>,
    metrics_auth: Arc<MetricsAuth>,
    /// The TUN inbound's limits, as reloads changed them.
    tun_limits: Option<watch::Sender<crate::inbound::tun::TunLimits>>,
    links: Arc<LinkContext>,
}

/// What [`ClientHandle::reload`] did.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientReload {
    /// The settings that took new values (names as in the file).
    pub changed: Vec<&'static str>,
    /// The settings that differ in the file but keep their values until a restart.
    pub needs_restart: Vec<&'static str>,
    /// The links added, removed and reconnected (`link` in `changed` when any).
    pub links: LinkChanges,
}

/// Where the client's listeners listen now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listening {
    /// The SOCKS5 inbound.
    pub socks: SocketAddr,
    /// The HTTP inbound, if enabled.
    pub http: Option<SocketAddr>,
    /// The metrics endpoint, if enabled.
    pub metrics: Option<SocketAddr>,
}

/// One of the client's TCP listeners: the address the file names (port 0: any), where it
/// listens, and the task accepting on it (aborted when the listener goes; the connections it
/// accepted are tasks of their own and carry on).
#[derive(Debug)]
struct Listener {
    configured: SocketAddr,
    bound: SocketAddr,
    task: JoinHandle<()>,
}

impl Listener {
    /// The metrics endpoint on `listener` (bound to `bound`, as the file's `configured` says),
    /// answering `source`'s status.
    fn metrics(
        listener: tokio::net::TcpListener,
        configured: SocketAddr,
        bound: SocketAddr,
        source: StatusSource,
        auth: &Arc<MetricsAuth>,
    ) -> Listener {
        Listener {
            configured,
            bound,
            task: tokio::spawn(crate::metrics::serve(listener, source, auth.clone())),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The client's listeners.
#[derive(Debug)]
struct Listeners {
    socks: Listener,
    http: Option<Listener>,
    metrics: Option<Listener>,
}

/// Which listener, for [`ClientHandle::start_listener`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListenerKind {
    Socks,
    Http,
    Metrics,
}

impl ListenerKind {
    /// The setting's name in the file.
    fn setting(self) -> &'static str {
        match self {
            ListenerKind::Socks => "socks_listen",
            ListenerKind::Http => "http_listen",
            ListenerKind::Metrics => "metrics_listen",
        }
    }

    /// The inbound's name in the status (`None`: the metrics endpoint, which has no counters).
    fn inbound(self) -> Option<&'static str> {
        match self {
            ListenerKind::Socks => Some("socks5"),
            ListenerKind::Http => Some("http"),
            ListenerKind::Metrics => None,
        }
    }
}

/// Starts serving `kind` on `listener` (bound to `bound`, as the file's `configured` says):
/// the inbound with new counters, listed in the status, or the metrics endpoint.
fn serve_listener(
    kind: ListenerKind,
    listener: tokio::net::TcpListener,
    configured: SocketAddr,
    bound: SocketAddr,
    ctx: &Arc<InboundContext>,
    sources: &ClientSources,
    metrics_auth: &Arc<MetricsAuth>,
) -> Listener {
    let Some(name) = kind.inbound() else {
        let source = StatusSource::Client(sources.clone());
        return Listener::metrics(listener, configured, bound, source, metrics_auth);
    };
    let counters = InboundCounters::new(name, bound, MAX_CONNECTIONS);
    let task = match kind {
        ListenerKind::Http => tokio::spawn(crate::inbound::http_server::serve_http_connect(
            listener,
            ctx.clone(),
            counters.clone(),
        )),
        _ => tokio::spawn(crate::inbound::socks5_server::serve_socks5(
            listener,
            ctx.clone(),
            counters.clone(),
        )),
    };
    let mut inbounds = sources
        .inbounds
        .write()
        .unwrap_or_else(PoisonError::into_inner);
    inbounds.retain(|c| c.name() != name);
    inbounds.push(counters);
    // SOCKS5 first, as at start.
    inbounds.sort_by_key(|c| c.name() != "socks5");
    drop(inbounds);
    Listener {
        configured,
        bound,
        task,
    }
}

impl ClientHandle {
    /// Stops accepting on every listener.
    fn stop_listeners(&self) {
        let listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let all = [
            Some(&listeners.socks),
            listeners.http.as_ref(),
            listeners.metrics.as_ref(),
        ];
        for listener in all.into_iter().flatten() {
            listener.task.abort();
        }
    }

    /// Where the listeners listen now (moved, added or removed by reloads).
    pub fn listening(&self) -> Listening {
        let listeners = self
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Listening {
            socks: listeners.socks.bound,
            http: listeners.http.as_ref().map(|l| l.bound),
            metrics: listeners.metrics.as_ref().map(|l| l.bound),
        }
    }

    /// Brings the listeners to `new` (the file read again): one whose address changed listens
    /// on the new one from now on, one added starts, one removed stops. The connections already
    /// accepted carry on. An address that cannot be bound is logged and the listener left as it
    /// was. The names of the settings put in force.
    async fn reload_listeners(&self, new: &ClientConfig) -> Vec<&'static str> {
        let wanted = [
            (ListenerKind::Socks, Some(new.socks_listen)),
            (ListenerKind::Http, new.http_listen),
            (ListenerKind::Metrics, new.metrics_listen),
        ];
        let mut changed = Vec::new();
        for (kind, addr) in wanted {
            let current = {
                let listeners = self
                    .listeners
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                match kind {
                    ListenerKind::Socks => Some(listeners.socks.configured),
                    ListenerKind::Http => listeners.http.as_ref().map(|l| l.configured),
                    ListenerKind::Metrics => listeners.metrics.as_ref().map(|l| l.configured),
                }
            };
            if current == addr {
                continue;
            }
            let started = match addr {
                None => None,
                Some(addr) => match bind_tcp(addr).await {
                    Ok((listener, bound)) => Some(serve_listener(
                        kind,
                        listener,
                        addr,
                        bound,
                        &self.inbound,
                        &self.sources,
                        &self.metrics_auth,
                    )),
                    Err(e) => {
                        tracing::warn!(
                            setting = kind.setting(),
                            error = %e,
                            "reload: could not listen on the new address; the listener \
                             stays as it was"
                        );
                        continue;
                    }
                },
            };
            if kind == ListenerKind::Metrics {
                warn_open_metrics(addr, new.metrics_token.is_some(), new.metrics_tls.is_some());
            }
            let gone = {
                let mut listeners = self
                    .listeners
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                match (kind, started) {
                    (ListenerKind::Socks, Some(l)) => {
                        Some(std::mem::replace(&mut listeners.socks, l))
                    }
                    (ListenerKind::Socks, None) => None,
                    (ListenerKind::Http, l) => std::mem::replace(&mut listeners.http, l),
                    (ListenerKind::Metrics, l) => std::mem::replace(&mut listeners.metrics, l),
                }
            };
            if addr.is_none()
                && let Some(name) = kind.inbound()
            {
                self.sources
                    .inbounds
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|c| c.name() != name);
            }
            tracing::info!(
                setting = kind.setting(),
                from = ?gone.as_ref().map(|l| l.bound),
                to = ?addr,
                "reload: listener changed"
            );
            // Closed before the reload answers: its address refuses from then on.
            if let Some(mut gone) = gone {
                gone.task.abort();
                let _ = (&mut gone.task).await;
            }
            changed.push(kind.setting());
        }
        changed
    }

    /// Puts `new` (the configuration file read again) in force as far as a running client can:
    /// the SOCKS5 and HTTP CONNECT users (`[socks] users`) apply to every connection from now on
    /// (those already past their authentication keep going); the scheduler replaces the
    /// running session's at its next packet (see [`crate::session::Session::replace_scheduler`])
    /// and is the next session's; `[session] congestion` switches the running session's paths
    /// (see [`crate::session::Session::set_congestion`]) and is the next session's; the links,
    /// matched by name, are added to, removed from or reconnected in the running session (see
    /// [`ClientReload::links`]) while the others keep their connections and the flows carry on.
    /// `[tun] address`, `routes`, `mtu`, `max_tcp` and `tcp_buffer` are put on the running device
    /// and inbound (see `reload_tun_addresses`, `reload_tun_routes`, `reload_tun_limits`).
    /// `socks_listen`, `http_listen` and `metrics_listen` move, start or stop their listeners
    /// (the connections already accepted carry on; see `reload_listeners`).
    /// Everything else (the server and the keys, `[tun] name` and `offload`, the
    /// rest of `[session]`) is named
    /// in [`ClientReload::needs_restart`] and keeps its value: the session and its connections
    /// are not dropped for it.
    pub async fn reload(&self, new: ClientConfig) -> ClientReload {
        // What a reload changes lives where it is used (the inbounds' users, the links' table
        // and next scheduler); the rest is compared with the file the client started with.
        let mut changed = Vec::new();
        changed.extend(self.reload_listeners(&new).await);
        if *new.socks_users != *self.inbound.socks_users.current() {
            warn_open_inbounds(&new);
            self.inbound.socks_users.replace(new.socks_users.clone());
            changed.push("socks.users");
        }
        let routes = self.inbound.routes.replace(new.routes.clone());
        let fallback = self.inbound.fallback.set(new.fallback_direct);
        if routes || fallback {
            warn_routes(&new);
        }
        if routes {
            changed.push("route");
        }
        if fallback {
            changed.push("fallback");
        }
        let token = self.metrics_auth.replace(new.metrics_token.clone());
        let tls = self.metrics_auth.replace_tls(new.metrics_tls.clone());
        if token || tls {
            let (has_token, has_tls) = (new.metrics_token.is_some(), new.metrics_tls.is_some());
            warn_open_metrics(new.metrics_listen, has_token, has_tls);
        }
        if token {
            changed.push("metrics_token");
        }
        if tls {
            changed.push("metrics_tls");
        }
        let scheduler = {
            let mut next = self
                .links
                .scheduler
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            (new.scheduler != *next).then(|| {
                *next = new.scheduler.clone();
                new.scheduler.build()
            })
        };
        if let Some(scheduler) = scheduler {
            changed.push("scheduler");
            // A session that ends meanwhile is followed by one with the new scheduler.
            if let Some(session) = self.session() {
                let _ = session.replace_scheduler(scheduler).await;
            }
        }
        if let Some(algorithm) = replace_if_changed(&self.links.congestion, new.session.congestion)
        {
            changed.push("session.congestion");
            if let Some(session) = self.session() {
                let _ = session.set_congestion(algorithm).await;
            }
        }
        let old_redundant = *self
            .links
            .redundant
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(redundant) = replace_if_changed(&self.links.redundant, new.session.redundant) {
            if redundant.ports != old_redundant.ports {
                changed.push("session.redundant_ports");
            }
            if redundant.max_rate != old_redundant.max_rate {
                changed.push("session.redundant_max_mbps");
            }
            if let Some(session) = self.session() {
                let _ = session.set_redundant(redundant).await;
            }
        }
        let links = self.links.reload(&new.links).await;
        if !links.is_empty() {
            changed.push("link");
            let renewed = new
                .links
                .iter()
                .filter(|l| links.added.contains(&l.name) || links.restarted.contains(&l.name));
            if let Some((device, _)) = &self.tun {
                warn_links_under_a_default_tun_route(
                    self.links.config.tun.as_ref(),
                    device,
                    renewed,
                );
            }
        }
        changed.extend(self.reload_tun_limits(new.tun.as_ref()));
        if self.reload_tun_addresses(new.tun.as_ref()) {
            changed.push("tun.address");
        }
        if self.reload_tun_routes(new.tun.as_ref()) {
            changed.push("tun.routes");
            if let Some((device, _)) = &self.tun {
                warn_links_under_a_default_tun_route(new.tun.as_ref(), device, &new.links);
            }
        }
        let old = &self.links.config;
        let needs_restart = [
            ("user", new.user != old.user),
            ("key", new.key != old.key),
            ("server_fingerprint / ca_file", new.trust != old.trust),
            ("server_name", new.server_name != old.server_name),
            ("state_dir", new.state_dir != old.state_dir),
            // The routes are reloaded in place (above); the rest waits.
            ("tun", restart_part(&new.tun) != restart_part(&old.tun)),
            (
                "session",
                SessionLimits {
                    congestion: old.session.congestion,
                    redundant: old.session.redundant,
                    ..new.session
                } != old.session,
            ),
        ]
        .into_iter()
        .filter_map(|(name, differs)| differs.then_some(name))
        .collect();
        ClientReload {
            changed,
            needs_restart,
            links,
        }
    }

    /// Puts `[tun] mtu`, `max_tcp` and `tcp_buffer` of `new` (the file read again) in force on
    /// the running TUN inbound: the device's MTU is set (kept, with a warning, when the kernel
    /// refuses it) and the inbound takes the limits at its next step ([`serve_tun_watching`]).
    /// The names of those that changed; none without a TUN inbound, or when the file names
    /// another device or none.
    fn reload_tun_limits(&self, new: Option<&TunConfig>) -> Vec<&'static str> {
        let (Some((device, new)), Some(sender)) = (self.same_tun_device(new), &self.tun_limits)
        else {
            return Vec::new();
        };
        let old = *sender.borrow();
        let mut next = new.limits();
        if next.mtu != old.mtu
            && let Err(e) = crate::inbound::tun::netconf::set_mtu(device, new.mtu)
        {
            tracing::warn!(
                device = %device, mtu = new.mtu, error = %e,
                "reload: the TUN device's MTU was not changed"
            );
            next.mtu = old.mtu;
        }
        let changed: Vec<_> = [
            ("tun.mtu", next.mtu != old.mtu),
            ("tun.max_tcp", next.max_tcp != old.max_tcp),
            ("tun.tcp_buffer", next.tcp_buffer != old.tcp_buffer),
        ]
        .into_iter()
        .filter_map(|(name, differs)| differs.then_some(name))
        .collect();
        if !changed.is_empty() {
            sender.send_replace(next);
        }
        changed
    }

    /// The running TUN device's name and `new` (the file's `[tun]` read again), when there is
    /// a TUN inbound and the file names the same device (another device, or none, waits for a
    /// restart and is named as `tun`).
    fn same_tun_device<'a>(
        &'a self,
        new: Option<&'a TunConfig>,
    ) -> Option<(&'a str, &'a TunConfig)> {
        let (Some((device, _)), Some(new)) = (&self.tun, new) else {
            return None;
        };
        (self.links.config.tun.as_ref().map(|t| &t.name) == Some(&new.name))
            .then_some((device.as_str(), new))
    }

    /// Gives the running TUN device the addresses of `new` (`[tun] address` of the file read
    /// again), as [`sync_tun_set`] does, then puts back the routes braid set (Linux drops a
    /// device's IPv4 routes with its last IPv4 address). True when an address changed.
    fn reload_tun_addresses(&self, new: Option<&TunConfig>) -> bool {
        use crate::inbound::tun::netconf;
        let Some((device, new)) = self.same_tun_device(new) else {
            return false;
        };
        let mut addresses = self
            .tun_addresses
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (remove, add) = (netconf::del_address, netconf::add_address);
        if !sync_tun_set(device, "address", &mut addresses, &new.address, remove, add) {
            return false;
        }
        let routes = self
            .tun_routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for net in routes.iter() {
            if let Err(e) = netconf::add_route(device, *net) {
                tracing::warn!(
                    device = %device, route = %net, error = %e,
                    "reload: TUN route not put back after the address change"
                );
            }
        }
        true
    }

    /// Puts the routes of `new` (`[tun] routes` of the file read again) on the running TUN
    /// device, as [`sync_tun_set`] does. True when a route changed.
    fn reload_tun_routes(&self, new: Option<&TunConfig>) -> bool {
        use crate::inbound::tun::netconf;
        let Some((device, new)) = self.same_tun_device(new) else {
            return false;
        };
        let mut routes = self
            .tun_routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (remove, add) = (netconf::del_route, netconf::add_route);
        sync_tun_set(device, "route", &mut routes, &new.routes, remove, add)
    }

    /// The current session, if any.
    pub fn session(&self) -> Option<SessionHandle> {
        self.session.borrow().clone()
    }

    /// The status as `braid status` would show it.
    pub async fn status(&self) -> DaemonStatus {
        StatusSource::Client(self.sources.clone()).collect().await
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
        match self.links.conn(index) {
            Some(c) => {
                c.close(quinn::VarInt::from_u32(0), b"link dropped");
                true
            }
            None => false,
        }
    }

    /// Closes the session so that the server hears of it (session CLOSE on every path, then
    /// QUIC CONNECTION_CLOSE), then does what [`ClientHandle::shutdown`] does. Takes at most
    /// [`CLOSE_GRACE`] plus [`DRAIN_TIMEOUT`], about a round trip when the server answers.
    pub async fn shutdown_gracefully(&mut self) {
        let conns = self.links.conns();
        if let Some(session) = self.session() {
            // The session loop publishes `None` once the driver has stopped, and stops the
            // links in the same step; it starts a new session only after `BACKOFF_MIN`, by
            // when its task is aborted below.
            let slot = &mut self.session;
            let stopped = async {
                session.close().await;
                let _ = slot
                    .wait_for(|s| {
                        s.as_ref()
                            .is_none_or(|h| !h.commands.same_channel(&session.commands))
                    })
                    .await;
            };
            if tokio::time::timeout(CLOSE_GRACE, stopped).await.is_err() {
                tracing::warn!(grace = ?CLOSE_GRACE, "session did not stop in time");
            }
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.stop_listeners();
        if tokio::time::timeout(DRAIN_TIMEOUT, close_links(&conns))
            .await
            .is_err()
        {
            tracing::warn!(timeout = ?DRAIN_TIMEOUT, "CONNECTION_CLOSE not sent on every link");
        }
        self.shutdown();
    }

    /// Stops everything at once and removes the control socket (and the state directory when
    /// this daemon created it and nothing else is left in it). Nothing waits for the server to be
    /// told: were the process to exit now, the server's session would end only by its idle
    /// timeout. The fallback of [`ClientHandle::shutdown_gracefully`].
    pub fn shutdown(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.stop_listeners();
        // Aborting the session loop leaves its driver and link tasks running: the links are
        // stopped here, and closing the session ends the driver.
        self.links.end_session();
        if let Some(s) = self.session() {
            let _ = s
                .commands
                .try_send(crate::transport::driver::Command::Close);
        }
        remove_control(&self.control_path, self.created_dir.take());
    }
}

impl Drop for ClientHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Closes the links' connections still open and waits until each is closed and nothing is left
/// to send on it: the peer closed it (it sends nothing more then), or this end closed it and a
/// datagram, its CONNECTION_CLOSE, has gone out since. (The link endpoints live in the link
/// tasks, so there is no endpoint to `wait_idle` on; quinn counts no CONNECTION_CLOSE frames
/// sent, but a closed connection sends nothing else.) A connection the session driver closed
/// before the count was taken, on a server that does not answer, waits for the caller's timeout.
async fn close_links(conns: &[quinn::Connection]) {
    let sent_before: Vec<u64> = conns.iter().map(|c| c.stats().udp_tx.datagrams).collect();
    // Only those still open: closing one the server has closed would make it look closed by
    // this end.
    for c in conns.iter().filter(|c| c.close_reason().is_none()) {
        c.close(
            quinn::VarInt::from_u32(crate::transport::join::SESSION_CLOSED_CODE),
            b"client stopping",
        );
    }
    let done = |(c, before): (&quinn::Connection, &u64)| match c.close_reason() {
        None => false,
        Some(quinn::ConnectionError::LocallyClosed) => {
            let stats = c.stats();
            stats.frame_rx.connection_close > 0 || stats.udp_tx.datagrams > *before
        }
        Some(_) => true,
    };
    while !conns.iter().zip(&sent_before).all(done) {
        tokio::time::sleep(CLOSE_POLL).await;
    }
}

/// Sends CLOSE to every session in `sessions` and waits until their drivers have stopped, at
/// most [`CLOSE_GRACE`].
async fn close_sessions(sessions: &[SessionHandle]) {
    let stopped = async {
        for s in sessions {
            s.close().await;
        }
        while !sessions.iter().all(SessionHandle::is_closed) {
            tokio::time::sleep(CLOSE_POLL).await;
        }
    };
    if tokio::time::timeout(CLOSE_GRACE, stopped).await.is_err() {
        let open = sessions.iter().filter(|s| !s.is_closed()).count();
        tracing::warn!(open, grace = ?CLOSE_GRACE, "sessions did not stop in time");
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

/// What to do about `error` binding `addr` when it is a port below 1024 refused for want of
/// privilege; empty otherwise.
fn low_port_hint(addr: SocketAddr, error: &std::io::Error) -> &'static str {
    if addr.port() != 0
        && addr.port() < 1024
        && error.kind() == std::io::ErrorKind::PermissionDenied
    {
        " (a port below 1024 needs root or CAP_NET_BIND_SERVICE, which the shipped \
         braid-server.service grants)"
    } else {
        ""
    }
}

/// A TCP listener bound to `addr`, and the address it took (the port, when `addr` names 0).
async fn bind_tcp(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), DaemonError> {
    let bind = async {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        Ok((listener, bound))
    };
    bind.await
        .map_err(|source| DaemonError::Bind { addr, source })
}

/// Brings `current` (the addresses or routes, `what`, braid has set on the TUN device `device`)
/// to `wanted`: those no longer wanted are taken away with `remove`, then, the device brought
/// up (as at start), the new ones set with `add`. One the kernel refuses is logged and left as
/// it was. True when one changed.
fn sync_tun_set(
    device: &str,
    what: &'static str,
    current: &mut Vec<IpNet>,
    wanted: &[IpNet],
    remove: fn(&str, IpNet) -> std::io::Result<()>,
    add: fn(&str, IpNet) -> std::io::Result<()>,
) -> bool {
    let mut changed = false;
    let gone: Vec<_> = current
        .iter()
        .filter(|n| !wanted.contains(n))
        .copied()
        .collect();
    for net in gone {
        match remove(device, net) {
            Ok(()) => {
                current.retain(|n| *n != net);
                changed = true;
                tracing::info!(device, %net, "reload: TUN {what} removed");
            }
            Err(e) => tracing::warn!(device, %net, error = %e, "reload: TUN {what} not removed"),
        }
    }
    let added: Vec<_> = wanted
        .iter()
        .filter(|n| !current.contains(n))
        .copied()
        .collect();
    if !added.is_empty()
        && let Err(e) = crate::inbound::tun::netconf::set_up(device)
    {
        tracing::warn!(device, error = %e, "reload: TUN device not brought up");
    }
    for net in added {
        match add(device, net) {
            Ok(()) => {
                current.push(net);
                changed = true;
                tracing::info!(device, %net, "reload: TUN {what} added");
            }
            Err(e) => tracing::warn!(device, %net, error = %e, "reload: TUN {what} not added"),
        }
    }
    changed
}

/// What of `tun` a reload cannot change: its name and offloads.
fn restart_part(tun: &Option<TunConfig>) -> Option<TunConfig> {
    tun.as_ref().map(|t| TunConfig {
        routes: Vec::new(),
        address: Vec::new(),
        mtu: crate::config::DEFAULT_TUN_MTU,
        max_tcp: crate::inbound::tun::DEFAULT_MAX_TCP,
        tcp_buffer: crate::inbound::tun::DEFAULT_TCP_BUFFER,
        ..t.clone()
    })
}

/// Binds the metrics endpoint at `addr`, if configured, warning when it listens beyond
/// loopback with no `token` (it names users and sessions); the listener and the address it
/// took.
async fn bind_metrics(
    addr: Option<SocketAddr>,
    token: bool,
    tls: bool,
) -> Result<Option<(tokio::net::TcpListener, SocketAddr)>, DaemonError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let bound = bind_tcp(addr).await?;
    warn_open_metrics(Some(addr), token, tls);
    Ok(Some(bound))
}

/// Warns when the metrics endpoint listens beyond loopback with no token, or with a token
/// that crosses the network in clear (no TLS).
fn warn_open_metrics(addr: Option<SocketAddr>, token: bool, tls: bool) {
    let Some(addr) = addr.filter(|a| !a.ip().is_loopback()) else {
        return;
    };
    if !token {
        tracing::warn!(
            %addr,
            "the metrics endpoint listens beyond loopback with no authentication and names \
             users and sessions: set metrics_token, or keep it on a management network"
        );
    } else if !tls {
        tracing::warn!(
            %addr,
            "the metrics endpoint listens beyond loopback over plain HTTP: its token and \
             figures cross the network in clear; set metrics_tls_cert and metrics_tls_key"
        );
    }
}

/// The inbounds that listen beyond loopback with no users (`[socks] users` empty): anyone who
/// can reach them can use the proxy. Named by inbound for the warning at start.
fn open_inbounds(config: &ClientConfig) -> Vec<(&'static str, SocketAddr)> {
    if !config.socks_users.is_empty() {
        return Vec::new();
    }
    [
        ("SOCKS5", Some(config.socks_listen)),
        ("HTTP CONNECT", config.http_listen),
    ]
    .into_iter()
    .filter_map(|(name, addr)| addr.filter(|a| !a.ip().is_loopback()).map(|a| (name, a)))
    .collect()
}

/// The links whose own packets a default route in `[tun] routes` (prefix 0) would take into
/// the device: those not bound to an interface. Named for the warning at start.
fn links_under_a_default_tun_route<'a>(
    tun: Option<&TunConfig>,
    links: impl IntoIterator<Item = &'a LinkConfig>,
) -> Vec<&'a str> {
    let Some(tun) = tun else {
        return Vec::new();
    };
    if !tun.routes.iter().any(|r| r.prefix == 0) {
        return Vec::new();
    }
    links
        .into_iter()
        .filter(|l| l.interface.is_none())
        .map(|l| l.name.as_str())
        .collect()
}

/// Warns of each of [`links_under_a_default_tun_route`].
fn warn_links_under_a_default_tun_route<'a>(
    tun: Option<&TunConfig>,
    device: &str,
    links: impl IntoIterator<Item = &'a LinkConfig>,
) {
    for link in links_under_a_default_tun_route(tun, links) {
        tracing::warn!(
            link,
            device,
            "[tun] routes sends everything into the device and this link has no `interface`: \
             its packets to the server loop into the device unless a policy route for its \
             local_addr keeps them out (docs/config.md)"
        );
    }
}

/// Warns of each of [`open_inbounds`].
fn warn_open_inbounds(config: &ClientConfig) {
    for (inbound, addr) in open_inbounds(config) {
        tracing::warn!(
            %addr,
            "the {inbound} inbound listens beyond loopback with no users: anyone who can reach \
             it can use the proxy (set [socks] users)"
        );
    }
}

/// Warns of each route an earlier one leaves no destination to (see
/// [`crate::config::shadowed`]), and of each `direct` route without an `interface` (and of
/// `fallback = "direct"`) while `[tun] routes` send traffic into the TUN device: its
/// connections to destinations inside those routes would go into the device, back to braid,
/// and round again.
fn warn_routes(config: &ClientConfig) {
    for (route, by) in crate::config::shadowed(&config.routes) {
        tracing::warn!(
            route,
            by,
            "a route that never matches: an earlier one takes every destination it could"
        );
    }
    let Some(tun) = config.tun.as_ref().filter(|t| !t.routes.is_empty()) else {
        return;
    };
    if config.fallback_direct {
        tracing::warn!(
            device = %tun.name,
            "fallback = \"direct\" while [tun] routes send traffic into the TUN device: while \
             there is no session, connections to destinations inside those routes would come \
             back into braid"
        );
    }
    for (i, r) in config.routes.iter().enumerate() {
        if r.action == crate::config::RouteAction::Direct && r.interface.is_none() {
            tracing::warn!(
                route = i,
                device = %tun.name,
                "a direct route without an interface while [tun] routes send traffic into the \
                 TUN device: its connections to destinations inside those routes would come back \
                 into braid (set the route's interface to the device they should leave by)"
            );
        }
    }
}

/// Writes the links' data budget counts every [`crate::transport::budget::SAVE_EVERY`] while
/// they change (also when the session ends and the client stops).
async fn save_budgets(links: Arc<LinkContext>) {
    let mut ticks = tokio::time::interval(crate::transport::budget::SAVE_EVERY);
    loop {
        ticks.tick().await;
        links.budgets.save_logged();
    }
}

/// Starts the client: its session and links, inbounds and control socket.
pub async fn start_client(config: ClientConfig) -> Result<ClientHandle, DaemonError> {
    warn_open_inbounds(&config);
    warn_routes(&config);
    let crypto = tls::client_crypto(&config.trust)?;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(crypto)
        .map_err(|e| DaemonError::Quic(e.to_string()))?;
    let mut client_config = quinn::ClientConfig::new(Arc::new(quic));
    client_config.transport_config(Arc::new(transport_config()));
    let (socks, socks_addr) = bind_tcp(config.socks_listen).await?;
    let http = match config.http_listen {
        Some(addr) => Some(bind_tcp(addr).await?),
        None => None,
    };
    let http_addr = http.as_ref().map(|(_, addr)| *addr);
    let metrics = bind_metrics(
        config.metrics_listen,
        config.metrics_token.is_some(),
        config.metrics_tls.is_some(),
    )
    .await?;
    let metrics_addr = metrics.as_ref().map(|(_, addr)| *addr);
    let tun = match &config.tun {
        Some(t) => {
            let device =
                TunDevice::open_with(&t.name, t.offload).map_err(|source| DaemonError::Tun {
                    name: t.name.clone(),
                    source,
                })?;
            if let Err(e) = device.set_mtu(t.mtu) {
                tracing::warn!(
                    device = device.name(),
                    mtu = t.mtu,
                    error = %e,
                    "could not set the TUN device's MTU; set it with `ip link set NAME mtu N`"
                );
            }
            configure_tun(device.name(), t)?;
            warn_links_under_a_default_tun_route(Some(t), device.name(), &config.links);
            tracing::info!(
                device = device.name(),
                mtu = t.mtu,
                max_tcp = t.max_tcp,
                tcp_buffer = t.tcp_buffer,
                offload = device.offloads(),
                udp_offload = device.udp_offload(),
                "TUN inbound open"
            );
            let counters = device.counters();
            Some((device, t.limits(), counters))
        }
        None => None,
    };
    let tun_status = tun
        .as_ref()
        .map(|(device, _, counters)| (device.name().to_owned(), counters.clone()));
    let control_path = control::socket_path(&config.state_dir, Role::Client);
    let created_dir = missing_dir(&config.state_dir);
    let control_listener = control::bind(&control_path)?;
    let (slot, session) = watch::channel(None);
    let config = Arc::new(config);
    let links = Arc::new(LinkContext::new(config.clone(), client_config));
    let link_context = links.clone();
    let routes = Arc::new(Routes::new(config.routes.clone()));
    let fallback = Arc::new(Fallback::new(config.fallback_direct));
    let ctx = Arc::new(InboundContext {
        session: session.clone(),
        socks_users: SocksUsers::new(config.socks_users.clone()),
        handshake_timeout: crate::inbound::server::HANDSHAKE_TIMEOUT,
        routes: routes.clone(),
        names: Default::default(),
        fallback: fallback.clone(),
    });
    let sources = ClientSources {
        session: session.clone(),
        links: link_context.clone(),
        tun: tun_status.clone(),
        inbounds: Arc::default(),
        routes,
        fallback,
    };
    let metrics_auth = MetricsAuth::new(config.metrics_token.clone(), config.metrics_tls.clone());
    let serve = |kind, (listener, bound), configured| {
        serve_listener(
            kind,
            listener,
            configured,
            bound,
            &ctx,
            &sources,
            &metrics_auth,
        )
    };
    let listeners = Listeners {
        socks: serve(
            ListenerKind::Socks,
            (socks, socks_addr),
            config.socks_listen,
        ),
        http: http
            .zip(config.http_listen)
            .map(|(l, configured)| serve(ListenerKind::Http, l, configured)),
        metrics: metrics
            .zip(config.metrics_listen)
            .map(|(l, configured)| serve(ListenerKind::Metrics, l, configured)),
    };
    let mut tasks = vec![
        tokio::spawn(session_loop(links, slot)),
        tokio::spawn(control::serve(
            control_listener,
            StatusSource::Client(sources.clone()),
        )),
        tokio::spawn(crate::process::trim_loop()),
        tokio::spawn(save_budgets(link_context.clone())),
        tokio::spawn(link_context.clone().follow_devices()),
    ];
    let tun_limits = tun.map(|(device, limits, counters)| {
        let (sender, limits) = watch::channel(limits);
        tasks.push(tokio::spawn(serve_tun_watching(
            device,
            ctx.clone(),
            limits,
            counters,
        )));
        sender
    });
    Ok(ClientHandle {
        socks_addr,
        http_addr,
        metrics_addr,
        listeners: std::sync::Mutex::new(listeners),
        sources,
        control_path,
        tun: tun_status,
        tun_routes: std::sync::Mutex::new(
            config
                .tun
                .as_ref()
                .map(|t| t.routes.clone())
                .unwrap_or_default(),
        ),
        tun_addresses: std::sync::Mutex::new(
            config
                .tun
                .as_ref()
                .map(|t| t.address.clone())
                .unwrap_or_default(),
        ),
        session,
        tasks,
        created_dir,
        inbound: ctx,
        metrics_auth,
        tun_limits,
        links: link_context,
    })
}

/// One of the server's QUIC endpoints: the address the file names (port 0: any), where it is
/// bound, and the task accepting joins on it (`None` once a reload took the address out of
/// `listen`: the endpoint then only carries the connections it has, until they end).
#[derive(Debug)]
struct QuicListener {
    configured: SocketAddr,
    bound: SocketAddr,
    endpoint: quinn::Endpoint,
    accept: Option<JoinHandle<()>>,
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    /// The UDP address the first endpoint listened on at start (the first of `listen`;
    /// [`ServerHandle::listening`] after reloads).
    pub addr: SocketAddr,
    /// The certificate's SHA-256 fingerprint.
    pub fingerprint: String,
    /// The control socket.
    pub control_path: PathBuf,
    /// Where the metrics endpoint listened at start, if enabled
    /// ([`ServerHandle::metrics_listening`] after reloads).
    pub metrics_addr: Option<SocketAddr>,
    /// The metrics endpoint now, as reloads moved, started or stopped it.
    metrics: std::sync::Mutex<Option<Listener>>,
    metrics_auth: Arc<MetricsAuth>,
    shared: Arc<ServerShared>,
    /// The QUIC endpoints, one per `listen` address, and those a reload took out of it while
    /// they still carry connections.
    quic: Arc<std::sync::Mutex<Vec<QuicListener>>>,
    /// What a reload binds a new endpoint with.
    endpoint_config: quinn::EndpointConfig,
    server_config: quinn::ServerConfig,
    tasks: Vec<JoinHandle<()>>,
    created_dir: Option<PathBuf>,
}

impl ServerHandle {
    /// The status as `braid status` would show it.
    pub async fn status(&self) -> DaemonStatus {
        StatusSource::Server(self.shared.clone()).collect().await
    }

    /// Puts `config` (the configuration file read again) in force, as
    /// [`ServerShared::reload`] says, closes the sessions of the users it removes or gives
    /// another key (their clients are told, as at shutdown; their joins are refused from now
    /// on), gives the running sessions a new scheduler when the file changed it, and moves,
    /// starts or stops the metrics endpoint as `metrics_listen` says (with the token and TLS
    /// identity the file gives it); what changed.
    pub async fn reload(&self, config: ServerConfig) -> Reload {
        let metrics_listen = config.metrics_listen;
        let listen = config.listen.clone();
        let mut reload = self.shared.reload(config);
        if self.reload_listen(&listen) {
            reload.changed.push("listen");
        }
        if self.reload_metrics_listen(metrics_listen).await {
            reload.changed.push("metrics_listen");
        }
        close_sessions(&reload.revoked).await;
        if reload.changed.contains(&"scheduler") {
            let scheduler = self.shared.config().scheduler.clone();
            for session in self.shared.sessions() {
                let _ = session.replace_scheduler(scheduler.build()).await;
            }
        }
        if reload.changed.contains(&"metrics_token") || reload.changed.contains(&"metrics_tls") {
            let config = self.shared.config();
            self.metrics_auth.replace(config.metrics_token.clone());
            self.metrics_auth.replace_tls(config.metrics_tls.clone());
            let (token, tls) = (config.metrics_token.is_some(), config.metrics_tls.is_some());
            warn_open_metrics(config.metrics_listen, token, tls);
        }
        if reload.changed.contains(&"session.congestion") {
            let algorithm = self.shared.config().session.congestion;
            for session in self.shared.sessions() {
                let _ = session.set_congestion(algorithm).await;
            }
        }
        if reload.changed.contains(&"session.redundant_ports")
            || reload.changed.contains(&"session.redundant_max_mbps")
        {
            let redundant = self.shared.config().session.redundant;
            for session in self.shared.sessions() {
                let _ = session.set_redundant(redundant).await;
            }
        }
        reload
    }

    /// Where the QUIC endpoints that take joins listen now (as reloads changed `listen`).
    pub fn listening(&self) -> Vec<SocketAddr> {
        self.shared.listening()
    }

    /// Makes the QUIC endpoints those of `wanted` (the reloaded file's `listen`; an address
    /// is an endpoint's when the file named it so before or when the endpoint is bound there):
    /// the new addresses bound first; an address no longer listed stops taking joins, its endpoint
    /// kept for the connections it carries (their paths go on) until they end; an address
    /// listed again takes joins again on that endpoint. True when it changed; an address that
    /// cannot be bound is logged and every endpoint left as it was.
    fn reload_listen(&self, wanted: &[SocketAddr]) -> bool {
        let mut listeners = self.quic.lock().unwrap_or_else(PoisonError::into_inner);
        let mut keep = vec![false; listeners.len()];
        let mut fresh = Vec::new();
        for &addr in wanted {
            // The file's address, or where it is bound (a port 0 named by its port now).
            let same = |l: &QuicListener| l.configured == addr || l.bound == addr;
            match (0..listeners.len()).find(|&i| !keep[i] && same(&listeners[i])) {
                Some(i) => keep[i] = true,
                None => fresh.push(addr),
            }
        }
        let unchanged = fresh.is_empty()
            && listeners
                .iter()
                .zip(&keep)
                .all(|(l, &kept)| l.accept.is_some() == kept);
        if unchanged {
            return false;
        }
        let mut bound = Vec::with_capacity(fresh.len());
        for addr in fresh {
            match bind_quic(addr, &self.endpoint_config, &self.server_config) {
                Ok(listener) => bound.push(listener),
                Err(e) => {
                    tracing::warn!(
                        setting = "listen",
                        error = %e,
                        "reload: could not listen on the new address; the endpoints stay as they were"
                    );
                    return false;
                }
            }
        }
        for (listener, kept) in listeners.iter_mut().zip(keep) {
            match (kept, listener.accept.take()) {
                (true, Some(task)) => listener.accept = Some(task),
                (true, None) => {
                    listener
                        .endpoint
                        .set_server_config(Some(self.server_config.clone()));
                    listener.accept = Some(self.accept_on(&listener.endpoint));
                    tracing::info!(addr = %listener.bound, "reload: taking joins again");
                }
                (false, Some(task)) => {
                    task.abort();
                    listener.endpoint.set_server_config(None);
                    tracing::info!(
                        addr = %listener.bound,
                        connections = listener.endpoint.open_connections(),
                        "reload: no longer taking joins; the paths there go on until they end"
                    );
                    self.close_when_idle(listener);
                }
                (false, None) => {}
            }
        }
        listeners.retain(|l| l.accept.is_some() || l.endpoint.open_connections() > 0);
        for (configured, endpoint, addr) in bound {
            tracing::info!(%addr, "reload: listening");
            let accept = Some(self.accept_on(&endpoint));
            listeners.push(QuicListener {
                configured,
                bound: addr,
                endpoint,
                accept,
            });
        }
        let bound = listeners
            .iter()
            .filter(|l| l.accept.is_some())
            .map(|l| l.bound)
            .collect();
        self.shared.set_listen(wanted.to_vec(), bound);
        true
    }

    /// Once the last connection of `retired` (an endpoint no longer taking joins) has ended,
    /// drops it, so its socket closes then and not at the next reload, unless a reload has
    /// meanwhile named its address again.
    fn close_when_idle(&self, retired: &QuicListener) {
        let endpoint = retired.endpoint.clone();
        let quic = Arc::downgrade(&self.quic);
        tokio::spawn(async move {
            endpoint.wait_idle().await;
            if let Some(quic) = quic.upgrade() {
                quic.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|l| l.accept.is_some() || l.endpoint.open_connections() > 0);
            }
        });
    }

    /// Starts taking joins on `endpoint`.
    fn accept_on(&self, endpoint: &quinn::Endpoint) -> JoinHandle<()> {
        tokio::spawn(accept_loop(endpoint.clone(), self.shared.clone()))
    }

    /// Every QUIC endpoint, those a reload retired too.
    fn endpoints(&self) -> Vec<quinn::Endpoint> {
        self.quic
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|l| l.endpoint.clone())
            .collect()
    }

    /// Stops taking joins on every endpoint.
    fn stop_accepting(&self) {
        for listener in self
            .quic
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter_mut()
        {
            if let Some(task) = listener.accept.take() {
                task.abort();
            }
        }
    }

    /// Closes every QUIC endpoint (their connections with it).
    fn close_endpoints(&self) {
        for endpoint in self.endpoints() {
            endpoint.close(
                quinn::VarInt::from_u32(crate::transport::join::SESSION_CLOSED_CODE),
                b"server stopping",
            );
        }
    }

    /// Where the metrics endpoint listens now (moved, started or stopped by reloads).
    pub fn metrics_listening(&self) -> Option<SocketAddr> {
        self.metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|l| l.bound)
    }

    /// Moves, starts or stops the metrics endpoint as `wanted` (the reloaded file's
    /// `metrics_listen`) says: the new address bound first, the old endpoint closed before the
    /// reload answers. True when it changed; an address that cannot be bound is logged and the
    /// endpoint left as it was.
    async fn reload_metrics_listen(&self, wanted: Option<SocketAddr>) -> bool {
        let current = self
            .metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|l| l.configured);
        if current == wanted {
            return false;
        }
        let config = self.shared.config();
        let started = match wanted {
            None => None,
            Some(addr) => match bind_metrics(
                Some(addr),
                config.metrics_token.is_some(),
                config.metrics_tls.is_some(),
            )
            .await
            {
                Ok(Some((listener, bound))) => Some(Listener::metrics(
                    listener,
                    addr,
                    bound,
                    StatusSource::Server(self.shared.clone()),
                    &self.metrics_auth,
                )),
                Ok(None) => None,
                Err(e) => {
                    tracing::warn!(
                        setting = "metrics_listen",
                        error = %e,
                        "reload: could not listen on the new address; the listener stays as it was"
                    );
                    return false;
                }
            },
        };
        let gone = std::mem::replace(
            &mut *self.metrics.lock().unwrap_or_else(PoisonError::into_inner),
            started,
        );
        if let Some(mut gone) = gone {
            gone.task.abort();
            let _ = (&mut gone.task).await;
        }
        true
    }

    /// Tells every client before stopping: no new joins, CLOSE on every session (waiting until
    /// their drivers have stopped, at most [`CLOSE_GRACE`]), then the endpoint closes and its
    /// CONNECTION_CLOSE frames leave (at most [`DRAIN_TIMEOUT`]), then [`ServerHandle::shutdown`].
    pub async fn shutdown_gracefully(&mut self) {
        // The accept loops and the control socket first, so no session starts meanwhile.
        self.stop_accepting();
        for t in self.tasks.drain(..) {
            t.abort();
        }
        close_sessions(&self.shared.sessions()).await;
        self.close_endpoints();
        let drained = async {
            for endpoint in self.endpoints() {
                endpoint.wait_idle().await;
            }
        };
        if tokio::time::timeout(DRAIN_TIMEOUT, drained).await.is_err() {
            tracing::warn!(timeout = ?DRAIN_TIMEOUT, "QUIC connections not drained in time");
        }
        self.shutdown();
    }

    /// Stops everything at once and removes the control socket (and the state directory when
    /// this daemon created it and nothing else is left in it). Clients are not reliably told
    /// (the endpoint closes before the sessions' CLOSE can go out); the fallback of
    /// [`ServerHandle::shutdown_gracefully`].
    pub fn shutdown(&mut self) {
        self.close_endpoints();
        self.stop_accepting();
        for t in self.tasks.drain(..) {
            t.abort();
        }
        if let Some(metrics) = &*self.metrics.lock().unwrap_or_else(PoisonError::into_inner) {
            metrics.task.abort();
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
    let endpoint_config = tls::server_endpoint_config(&identity);
    let mut endpoints = Vec::with_capacity(config.listen.len());
    for &addr in &config.listen {
        endpoints.push(bind_quic(addr, &endpoint_config, &server_config)?);
    }
    let addr = endpoints
        .first()
        .map(|(_, _, bound)| *bound)
        .ok_or_else(|| DaemonError::Quic("no listen address".to_owned()))?;
    let metrics = bind_metrics(
        config.metrics_listen,
        config.metrics_token.is_some(),
        config.metrics_tls.is_some(),
    )
    .await?;
    let metrics_addr = metrics.as_ref().map(|(_, addr)| *addr);
    let control_path = control::socket_path(&config.state_dir, Role::Server);
    let created_dir = missing_dir(&config.state_dir);
    let control_listener = control::bind(&control_path)?;
    let metrics_auth = MetricsAuth::new(config.metrics_token.clone(), config.metrics_tls.clone());
    let listen = config.listen.clone();
    let shared = ServerShared::new(Arc::new(config));
    shared.set_listen(
        listen,
        endpoints.iter().map(|(_, _, bound)| *bound).collect(),
    );
    let quic = endpoints
        .into_iter()
        .map(|(configured, endpoint, bound)| QuicListener {
            configured,
            bound,
            accept: Some(tokio::spawn(accept_loop(endpoint.clone(), shared.clone()))),
            endpoint,
        })
        .collect();
    let tasks = vec![
        tokio::spawn(control::serve(
            control_listener,
            StatusSource::Server(shared.clone()),
        )),
        tokio::spawn(crate::process::trim_loop()),
    ];
    let metrics =
        metrics
            .zip(shared.config().metrics_listen)
            .map(|((listener, bound), configured)| {
                Listener::metrics(
                    listener,
                    configured,
                    bound,
                    StatusSource::Server(shared.clone()),
                    &metrics_auth,
                )
            });
    Ok(ServerHandle {
        addr,
        fingerprint: identity.fingerprint(),
        control_path,
        metrics_addr,
        metrics: std::sync::Mutex::new(metrics),
        metrics_auth,
        shared,
        quic: Arc::new(std::sync::Mutex::new(quic)),
        endpoint_config,
        server_config,
        tasks,
        created_dir,
    })
}

/// Binds a QUIC server endpoint at `addr`: (`addr`, the endpoint, where it is bound).
fn bind_quic(
    addr: SocketAddr,
    endpoint_config: &quinn::EndpointConfig,
    server_config: &quinn::ServerConfig,
) -> Result<(SocketAddr, quinn::Endpoint, SocketAddr), DaemonError> {
    let bind_error = |source| DaemonError::Bind { addr, source };
    let socket = std::net::UdpSocket::bind(addr).map_err(bind_error)?;
    let runtime =
        quinn::default_runtime().ok_or_else(|| DaemonError::Quic("no async runtime".to_owned()))?;
    let endpoint = quinn::Endpoint::new(
        endpoint_config.clone(),
        Some(server_config.clone()),
        socket,
        runtime,
    )
    .map_err(bind_error)?;
    let bound = endpoint.local_addr().map_err(bind_error)?;
    Ok((addr, endpoint, bound))
}

/// Puts `new` in `slot` when it differs from what is there; returns it then (a reload's change).
fn replace_if_changed<T: PartialEq + Copy>(slot: &std::sync::RwLock<T>, new: T) -> Option<T> {
    let mut current = slot.write().unwrap_or_else(PoisonError::into_inner);
    (*current != new).then(|| {
        *current = new;
        new
    })
}
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_low_port_refused_says_what_it_needs() {
        let denied = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let error = |addr: &str, source| DaemonError::Bind {
            addr: addr.parse().unwrap(),
            source,
        };
        assert_eq!(
            error("0.0.0.0:443", denied()).to_string(),
            "binding 0.0.0.0:443: permission denied (a port below 1024 needs root or \
             CAP_NET_BIND_SERVICE, which the shipped braid-server.service grants)"
        );
        assert_eq!(
            error("0.0.0.0:4433", denied()).to_string(),
            "binding 0.0.0.0:4433: permission denied"
        );
        let in_use = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        assert_eq!(
            error("[::]:443", in_use).to_string(),
            "binding [::]:443: address in use"
        );
        // For real, where this runs unprivileged (root may bind it: nothing to check then).
        if let Err(e) = std::net::UdpSocket::bind("127.0.0.1:1")
            && e.kind() == std::io::ErrorKind::PermissionDenied
        {
            let message = error("127.0.0.1:1", e).to_string();
            assert!(message.contains("CAP_NET_BIND_SERVICE"), "{message}");
        }
    }

    fn client(extra: &str) -> ClientConfig {
        let key = "ab".repeat(32);
        let text = format!(
            "user = \"a\"\nkey = \"{key}\"\nserver_fingerprint = \"{key}\"\n{extra}\n\
             [[link]]\nname = \"w\"\nserver = \"127.0.0.1:1\"\n"
        );
        ClientConfig::parse(Path::new("client.toml"), &text).unwrap()
    }

    #[test]
    fn inbounds_beyond_loopback_without_users_are_named() {
        assert!(open_inbounds(&client("")).is_empty(), "the defaults");
        let http = "http_listen = \"127.0.0.1:8080\"";
        assert!(open_inbounds(&client(http)).is_empty());
        let lan = "socks_listen = \"192.168.1.1:1080\"\nhttp_listen = \"[::]:8080\"";
        assert_eq!(
            open_inbounds(&client(lan)),
            vec![
                ("SOCKS5", "192.168.1.1:1080".parse().unwrap()),
                ("HTTP CONNECT", "[::]:8080".parse().unwrap()),
            ]
        );
        let users = format!("{lan}\n[socks]\nusers = [{{ name = \"u\", password = \"p\" }}]");
        assert!(open_inbounds(&client(&users)).is_empty());
    }

    #[test]
    fn links_a_default_tun_route_would_loop_are_named() {
        let tun = |routes: &str| format!("[tun]\nname = \"t\"\nroutes = [{routes}]");
        let named = |c: &ClientConfig| -> Vec<String> {
            links_under_a_default_tun_route(c.tun.as_ref(), &c.links)
                .into_iter()
                .map(str::to_owned)
                .collect()
        };
        assert!(named(&client("")).is_empty());
        let narrow = client(&tun("\"203.0.113.0/24\", \"2001:db8::/32\""));
        assert!(named(&narrow).is_empty());
        for default in ["\"0.0.0.0/0\"", "\"10.0.0.0/8\", \"::/0\""] {
            let config = client(&tun(default));
            assert_eq!(named(&config), ["w"], "{default}");
        }
        let mut bound = client(&tun("\"0.0.0.0/0\""));
        bound.links[0].interface = Some("wlan0".into());
        assert!(named(&bound).is_empty());
    }
}
