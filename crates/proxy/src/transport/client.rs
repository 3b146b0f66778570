//! The client side of the paths: one quinn endpoint per configured link (bound to the link's
//! local address and device), one connection per link to the server, and the authenticated
//! join that makes it a path of the client's session. While the server does not answer (a link
//! in an outage), an attempt starts a new handshake every [`HANDSHAKE_RESTART`] beside the
//! older ones ([`MAX_HANDSHAKES`] at most), so that a link coming back is heard within about a
//! second, not after the backed-off retransmission of a single handshake. A link whose
//! handshake or join fails is retried with exponential backoff ([`BACKOFF_MIN`] doubling to
//! [`BACKOFF_MAX`], or to [`SILENT_BACKOFF_MAX`] while the server is silent) while the other
//! links carry traffic; a link that drops later reconnects the same way and rejoins with its path
//! id. No link is the master: the session lives while any path does, and when it closes (every
//! link down for the session's idle timeout) a new session starts. A reload
//! ([`LinkContext::reload`]) adds, removes and reconnects links in the running session. A link
//! bound to an interface or to a local address follows it (`transport::ifwatch`): it leaves the
//! session when the interface goes down or the address away, telling the server
//! (PATH_ABANDON), and joins again when it is back; any interface coming up or getting an
//! address cuts a link's retry wait short. A link table whose `interface` is a pattern stands
//! for one link per matching device ([`super::autolink`]): the links come and go with the
//! devices.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use braid_sched_core::{MAX_PATHS, PathId, SchedulerConfig};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tracing::{info, warn};

use super::autolink::{self, Expanded};
use super::budget::{self, Budgets, LinkTraffic};
use super::driver::{self, Command, DriverSetup};
use super::flow::SessionHandle;
use super::ifwatch;
use super::join::{
    EXPORTER_LABEL, Join, JoinAnswer, PeerKnows, SessionId, compute_mac, parse_answer,
};
use super::quic::{BindError, bind_link_socket, datagram_size};
use super::status::{LinkBudgetStatus, LinkPatternStatus, LinkStatus};
use crate::config::{ClientConfig, LinkConfig, WhenSpent};
use crate::session::{PathConfig, Role, Tier};

/// First retry delay of a link.
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Longest retry delay of a link.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A session that ends sooner than this after it started is followed by the next only after
/// [`BACKOFF_MIN`].
const SHORT_SESSION: Duration = Duration::from_secs(5);
/// How long a handshake plus join may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// While no handshake of an attempt has completed, another starts this often (see
/// [`handshake`]).
pub const HANDSHAKE_RESTART: Duration = Duration::from_secs(2);
/// Handshakes of one attempt in flight at once; a new one replaces the oldest.
pub const MAX_HANDSHAKES: usize = 4;
/// When a link's server addresses span both IP families, the first handshake to the other
/// family starts this long after the first handshake, racing or not (RFC 8305's Connection
/// Attempt Delay).
pub const FAMILY_FALLBACK: Duration = Duration::from_millis(250);
/// Longest retry delay after an attempt in which no handshake completed (the server silent: a
/// link in an outage, which may end at any moment). Other failures back off to
/// [`BACKOFF_MAX`].
pub const SILENT_BACKOFF_MAX: Duration = Duration::from_secs(4);

/// The share of its data budget at which a link's use is logged as a warning.
const BUDGET_WARNING: f64 = 0.8;

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
    /// No handshake completed in time: the server did not answer.
    #[error("no answer from the server in {0:?}")]
    NoAnswer(Duration),
    /// The join timed out after the handshake.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The server refused the join.
    #[error("the server refused the join (wrong user or key?)")]
    Refused,
    /// The interface the link is bound to is down, without carrier, or gone.
    #[error("interface {0} is down")]
    InterfaceDown(String),
    /// The link's `local_addr` is no longer an address of this host (a DHCP lease lost, a
    /// modem's address withdrawn).
    #[error("local address {0} is gone")]
    AddressGone(std::net::IpAddr),
    /// The link's data budget for this period is spent ([`super::budget`]).
    #[error("data budget spent: {0}")]
    BudgetSpent(LinkBudgetStatus),
    /// The peer does not support datagrams.
    #[error("the server connection does not carry datagrams")]
    NoDatagrams,
}

/// Shared state of the client's links.
#[derive(Debug)]
pub struct LinkContext {
    /// The file the client started with. A reload changes `scheduler` and `table` below, and
    /// the inbounds' users; its `links` are those the client started with.
    pub(crate) config: Arc<ClientConfig>,
    /// The scheduler of the next session (the file's, or a reload's).
    pub(crate) scheduler: std::sync::RwLock<SchedulerConfig>,
    /// The congestion controller of the sessions' paths (the file's, or a reload's).
    pub(crate) congestion: std::sync::RwLock<crate::session::congestion::CongestionAlgorithm>,
    /// The flows that go redundantly (the file's, or a reload's).
    pub(crate) redundant: std::sync::RwLock<crate::session::RedundantFlows>,
    pub(crate) crypto: quinn::ClientConfig,
    /// The kernel's news of the interfaces.
    interfaces: watch::Receiver<u64>,
    /// The links now, by path id.
    table: Mutex<LinkTable>,
    /// The file's `[[link]]` tables (the start's, then a reload's), patterns and all, and the
    /// pattern links left out at the last look; held while the links are put in force, so that
    /// a reload and the devices' news take turns.
    wanted: tokio::sync::Mutex<WantedLinks>,
    /// The file's tables with a pattern and their links, as last put in force (for status).
    patterns: Mutex<Vec<LinkPatternStatus>>,
    /// What the links with a data budget carried in its period.
    pub(crate) budgets: Budgets,
}

/// The links a file asks for ([`LinkContext::wanted`]).
#[derive(Debug)]
struct WantedLinks {
    file: Vec<LinkConfig>,
    left_out: Vec<String>,
}

impl WantedLinks {
    /// The links wanted with the devices there now, and the tables with a pattern; logs the
    /// pattern links left out when they changed.
    fn expand(&mut self, tun: Option<&str>) -> (Vec<LinkConfig>, Vec<LinkPatternStatus>) {
        let devices = if self.file.iter().any(LinkConfig::is_pattern) {
            autolink::devices()
        } else {
            Vec::new()
        };
        let Expanded {
            links,
            left_out,
            patterns,
        } = autolink::expand(&self.file, &devices, tun);
        if left_out != self.left_out && !left_out.is_empty() {
            warn!(
                left_out = ?left_out,
                "devices matching a link's interface pattern left out: {} links at most, and a \
                 pattern link may not take the name of another link",
                MAX_PATHS
            );
        }
        self.left_out = left_out;
        (links, patterns)
    }
}

/// Why the links are put in force again, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    /// A reload (SIGHUP).
    Reload,
    /// The kernel's news of the devices, for the links of a pattern.
    Devices,
}

/// What the server answered the joins of one session, to tell when it lost the session: it
/// says which join started it ([`JoinAnswer::created`]), and a session is started once.
#[derive(Debug, Default)]
struct JoinHistory {
    /// A join of the session was answered.
    answered: AtomicBool,
    /// A join was answered as starting the session.
    created: AtomicBool,
}

impl JoinHistory {
    /// Records `answer` to a join begun when [`JoinHistory::answered`] read `answered_before`;
    /// whether the server lost the session: it started it again, or started it for a join begun
    /// after another was answered. (Two joins begun together at the start may be answered in
    /// either order, the one that started the session last.)
    fn lost(&self, answer: JoinAnswer, answered_before: bool) -> bool {
        self.answered.store(true, Ordering::Release);
        answer.created && (self.created.swap(true, Ordering::AcqRel) || answered_before)
    }
}

/// The links by path id, and the session they join.
#[derive(Debug)]
struct LinkTable {
    slots: Vec<Option<LinkSlot>>,
    session: Option<(SessionId, SessionHandle, Arc<JoinHistory>)>,
    /// The generation of the next slot made.
    next_generation: u64,
}

impl LinkTable {
    /// A slot for `config`, with a generation no other slot had.
    fn new_slot(&mut self, config: LinkConfig) -> LinkSlot {
        self.next_generation += 1;
        LinkSlot::new(config, self.next_generation)
    }
}

/// One link: its settings, its task in the running session, its live connection and how its
/// joins went (for `braid status`).
#[derive(Debug)]
struct LinkSlot {
    /// Its settings now: a reload may change the tier and rate cap in place.
    config: Arc<LinkConfig>,
    /// Which link this is for its task: a link replaced (settings that need a reconnection)
    /// gets a new slot and generation, and the old task's updates no longer apply.
    generation: u64,
    task: Option<AbortHandle>,
    conn: Option<quinn::Connection>,
    /// Whether its path is in the session now.
    joined: bool,
    /// When not joined: when the next attempt starts (`None`: connecting now).
    retry_at: Option<Instant>,
    joins: u64,
    last_error: Option<String>,
    /// What the link's sockets carried, in bytes on the network ([`budget::CountingSocket`]).
    traffic: Arc<LinkTraffic>,
    /// Bytes of `traffic` already counted against the link's budget.
    counted: u64,
    /// Its budget is spent in this period: it waits for the next (`budget_spent = "leave"`), or
    /// its path is a backup until then (`"backup"`).
    spent: bool,
}

impl LinkSlot {
    fn new(config: LinkConfig, generation: u64) -> Self {
        LinkSlot {
            config: Arc::new(config),
            generation,
            task: None,
            conn: None,
            joined: false,
            retry_at: None,
            joins: 0,
            last_error: None,
            traffic: Arc::default(),
            counted: 0,
            spent: false,
        }
    }

    /// Counts what the link carried since last counted against its budget (when it has one);
    /// where the budget stands.
    fn meter(&mut self, budgets: &Budgets, now: u64) -> Option<LinkBudgetStatus> {
        let total = self.traffic.total();
        let delta = total.saturating_sub(self.counted);
        self.counted = total;
        let Some(budget) = self.config.budget else {
            self.traffic.set_limit(u64::MAX);
            return None;
        };
        let backup_once_spent = budget.when_spent == WhenSpent::Backup;
        let state = budgets.add(&self.config.name, &budget, delta, now);
        let share = |used: u64| used as f64 / state.budget_bytes as f64;
        if share(state.used_bytes - delta.min(state.used_bytes)) < BUDGET_WARNING
            && share(state.used_bytes) >= BUDGET_WARNING
        {
            warn!(link = %self.config.name, budget = %state, "the link has used 80 % of its data budget");
        }
        // The sockets wake the link's task when the rest of the budget is gone (a link that
        // carries on as a backup once it is spent needs no wake then: its period's end is
        // found on the timer).
        let left = state.budget_bytes.saturating_sub(state.used_bytes);
        if backup_once_spent && left == 0 {
            self.traffic.set_limit(u64::MAX);
        } else {
            self.traffic.set_limit(total.saturating_add(left));
        }
        Some(state)
    }

    /// The tier its path has: the file's, or backup while its budget is spent and
    /// `budget_spent = "backup"`.
    fn tier(&self) -> Tier {
        let demoted = self.spent
            && self
                .config
                .budget
                .is_some_and(|b| b.when_spent == WhenSpent::Backup);
        if demoted {
            Tier::Backup
        } else {
            self.config.tier
        }
    }

    fn status(&self, path: usize, now: Instant, budgets: &Budgets) -> LinkStatus {
        let budget = budgets.of(&self.config);
        let state = if self.joined && self.spent {
            "joined as backup: budget spent".to_owned()
        } else if self.joined {
            "joined".to_owned()
        } else if self.spent && when_spent(&self.config) == WhenSpent::Leave {
            "budget spent".to_owned()
        } else if self.task.is_none() {
            "no session".to_owned()
        } else {
            match self.retry_at {
                Some(at) => format!(
                    "retry in {:.1} s",
                    at.saturating_duration_since(now).as_secs_f64()
                ),
                None => "connecting".to_owned(),
            }
        };
        LinkStatus {
            path: path as u8,
            name: self.config.name.clone(),
            server: self.config.server.join(", "),
            state,
            joins: self.joins,
            last_error: self.last_error.clone(),
            budget,
            sent_bytes: self.traffic.sent(),
            received_bytes: self.traffic.received(),
        }
    }

    /// Ends the link's task, its connection's traffic counted; returns its connection.
    fn end_task(&mut self, budgets: &Budgets) -> Option<quinn::Connection> {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.meter(budgets, budget::now_unix());
        self.joined = false;
        self.conn.take()
    }

    /// Ends the link's task and closes its connection: its path leaves the session, which
    /// sends what was in flight on it over the other paths.
    fn stop(&mut self, reason: &'static [u8], budgets: &Budgets) {
        if let Some(conn) = self.end_task(budgets) {
            conn.close(quinn::VarInt::from_u32(0), reason);
        }
    }
}

/// What [`LinkContext::reload`] changed, by link name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkChanges {
    /// Links new in the file: they join the running session.
    pub added: Vec<String>,
    /// Links no longer in the file: their paths left the session.
    pub removed: Vec<String>,
    /// Links whose settings changed: each reconnected and rejoined with the new ones, under
    /// the same path id.
    pub restarted: Vec<String>,
    /// Links whose tier or rate cap alone changed: their paths took the new values in place,
    /// without reconnecting (a tier change reaches the server as PATH_STATUS).
    pub updated: Vec<String>,
}

impl LinkChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.restarted.is_empty()
            && self.updated.is_empty()
    }
}

/// Whether `old` and `new` differ in nothing but the tier, the rate caps, the congestion
/// controller, how long the link rejoins fast and its data budget: the first three a joined
/// path takes in place, the fourth the link's next attempt, the budget its next count.
fn in_place(old: &LinkConfig, new: &LinkConfig) -> bool {
    *old == LinkConfig {
        tier: old.tier,
        rate_cap_mbps: old.rate_cap_mbps,
        rate_cap_down_mbps: old.rate_cap_down_mbps,
        congestion: old.congestion,
        fast_rejoin: old.fast_rejoin,
        budget: old.budget,
        ..new.clone()
    }
}

/// A link's rate cap in bytes per second.
fn rate_cap(link: &LinkConfig) -> Option<u64> {
    bytes_per_second(link.rate_cap_mbps)
}

/// A link's cap on what the server sends on it, bytes per second.
fn rate_cap_down(link: &LinkConfig) -> Option<u64> {
    bytes_per_second(link.rate_cap_down_mbps)
}

/// `mbps` Mbit/s in bytes per second (at least one).
fn bytes_per_second(mbps: Option<f64>) -> Option<u64> {
    mbps.map(|m| ((m * 1e6 / 8.0) as u64).max(1))
}

/// The command that gives the path of `link` its tier (`tier`: the link's, or backup for a
/// spent budget), rate cap and congestion controller, on connection `conn`.
fn update_command(id: PathId, conn: &quinn::Connection, link: &LinkConfig, tier: Tier) -> Command {
    Command::UpdatePath {
        id,
        conn: conn.stable_id(),
        tier,
        rate_cap: rate_cap(link),
        rate_cap_down: rate_cap_down(link),
        congestion: link.congestion,
    }
}

impl LinkContext {
    pub(crate) fn new(config: Arc<ClientConfig>, crypto: quinn::ClientConfig) -> Self {
        let mut table = LinkTable {
            slots: Vec::new(),
            session: None,
            next_generation: 0,
        };
        let mut wanted = WantedLinks {
            file: config.links.clone(),
            left_out: Vec::new(),
        };
        let (links, patterns) = wanted.expand(tun_name(&config));
        let mut slots: Vec<Option<LinkSlot>> =
            links.into_iter().map(|l| Some(table.new_slot(l))).collect();
        slots.resize_with(MAX_PATHS, || None);
        table.slots = slots;
        let budgets = Budgets::load(&config.state_dir);
        LinkContext {
            scheduler: std::sync::RwLock::new(config.scheduler.clone()),
            congestion: std::sync::RwLock::new(config.session.congestion),
            redundant: std::sync::RwLock::new(config.session.redundant),
            config,
            crypto,
            interfaces: ifwatch::watch(),
            table: Mutex::new(table),
            wanted: tokio::sync::Mutex::new(wanted),
            patterns: Mutex::new(patterns),
            budgets,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, LinkTable> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live connection of the link with path id `id`.
    pub(crate) fn conn(&self, id: usize) -> Option<quinn::Connection> {
        self.table()
            .slots
            .get(id)?
            .as_ref()
            .and_then(|s| s.conn.clone())
    }

    /// Every link's live connection.
    pub(crate) fn conns(&self) -> Vec<quinn::Connection> {
        self.table()
            .slots
            .iter()
            .flatten()
            .filter_map(|s| s.conn.clone())
            .collect()
    }

    /// Starts every link's task in a new session.
    fn start_session(self: &Arc<Self>, id: SessionId, session: SessionHandle) {
        let mut table = self.table();
        table.session = Some((id, session, Arc::default()));
        for path in 0..MAX_PATHS {
            self.start_link(&mut table, path);
        }
    }

    /// Stops every link's task (the session has ended, or the client stops), their traffic
    /// counted and the budgets' ledger written.
    pub(crate) fn end_session(&self) {
        let mut table = self.table();
        table.session = None;
        for slot in table.slots.iter_mut().flatten() {
            slot.end_task(&self.budgets);
        }
        drop(table);
        self.budgets.save_logged();
    }

    /// Counts what link `id`'s connection carried since last counted; where its budget stands
    /// (`Some(None)`: it has none; `None`: the link was removed or replaced).
    fn meter(&self, id: PathId, generation: u64) -> Option<Option<LinkBudgetStatus>> {
        let now = budget::now_unix();
        self.update(id, generation, |slot| slot.meter(&self.budgets, now))
    }

    fn start_link(self: &Arc<Self>, table: &mut LinkTable, path: usize) {
        let Some((session_id, session, history)) = table.session.clone() else {
            return;
        };
        if let Some(slot) = table.slots[path].as_mut() {
            slot.joined = false;
            slot.retry_at = None;
            let task = tokio::spawn(run_link(
                PathId(path as u8),
                slot.generation,
                self.clone(),
                session_id,
                session,
                history,
            ));
            slot.task = Some(task.abort_handle());
        }
    }

    /// Applies `f` to the slot of path `id` if it is still generation `generation`; `None`
    /// when the link was removed or replaced meanwhile.
    fn update<R>(
        &self,
        id: PathId,
        generation: u64,
        f: impl FnOnce(&mut LinkSlot) -> R,
    ) -> Option<R> {
        let mut table = self.table();
        match table.slots[id.index()].as_mut() {
            Some(slot) if slot.generation == generation => Some(f(slot)),
            _ => None,
        }
    }

    /// The file's tables with a pattern and the links they stand for now.
    pub fn patterns(&self) -> Vec<LinkPatternStatus> {
        self.patterns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Each link now, by path id: joined, connecting or waiting to retry, and the last error.
    pub fn status(&self) -> Vec<LinkStatus> {
        let now = Instant::now();
        self.table()
            .slots
            .iter()
            .enumerate()
            .filter_map(|(path, slot)| slot.as_ref().map(|s| s.status(path, now, &self.budgets)))
            .collect()
    }

    /// Puts the links of `file` (a reload's `[[link]]` tables, validated: unique names, at most
    /// [`MAX_PATHS`]; a pattern stands for a link per matching device) in place of the running
    /// ones, matched by name: a link no longer wanted leaves the session, a link whose settings
    /// changed reconnects with the new ones under its path id, and a new link takes the lowest
    /// free path id and joins. The other links and their connections are untouched.
    pub(crate) async fn reload(self: &Arc<Self>, file: &[LinkConfig]) -> LinkChanges {
        let mut wanted = self.wanted.lock().await;
        wanted.file = file.to_vec();
        self.put_in_force(&mut wanted, Cause::Reload).await
    }

    /// Follows the devices for the links of the file's patterns: after each change the kernel
    /// reports, a device that appeared or came up gets its link, and the link of one that went
    /// away or down leaves. Runs until aborted.
    pub(crate) async fn follow_devices(self: Arc<Self>) {
        let mut interfaces = self.interfaces.clone();
        loop {
            ifwatch::changed(&mut interfaces).await;
            let mut wanted = self.wanted.lock().await;
            if wanted.file.iter().any(LinkConfig::is_pattern) {
                self.put_in_force(&mut wanted, Cause::Devices).await;
            }
        }
    }

    /// Puts the links `wanted` stands for with the devices there now in place of the running
    /// ones (see [`LinkContext::reload`]).
    async fn put_in_force(self: &Arc<Self>, wanted: &mut WantedLinks, cause: Cause) -> LinkChanges {
        let (links, patterns) = wanted.expand(tun_name(&self.config));
        *self.patterns.lock().unwrap_or_else(PoisonError::into_inner) = patterns;
        let (changes, updates) = self.reload_table(&links, cause);
        // Sent after the table's lock is released, in order; a path that joins meanwhile
        // compares its settings itself (`run_link`).
        for (session, update) in updates {
            let _ = session.commands.send(update).await;
        }
        changes
    }

    /// The table's part of [`LinkContext::reload`]: what changed, and the commands that give
    /// joined paths their new tier or rate cap.
    fn reload_table(
        self: &Arc<Self>,
        links: &[LinkConfig],
        cause: Cause,
    ) -> (LinkChanges, Vec<(SessionHandle, Command)>) {
        let mut changes = LinkChanges::default();
        let mut updates = Vec::new();
        let mut table = self.table();
        let session = table.session.clone();
        for path in 0..MAX_PATHS {
            let Some(slot) = table.slots[path].as_mut() else {
                continue;
            };
            let name = slot.config.name.clone();
            match links.iter().find(|l| l.name == name) {
                None => {
                    slot.stop(b"link removed", &self.budgets);
                    table.slots[path] = None;
                    match cause {
                        Cause::Reload => info!(link = %name, path, "reload: link removed"),
                        Cause::Devices => {
                            info!(link = %name, path, "link removed: its device went away or down");
                        }
                    }
                    changes.removed.push(name);
                }
                Some(new) if *new == *slot.config => {}
                Some(new) if in_place(&slot.config, new) => {
                    slot.config = Arc::new(new.clone());
                    if slot.joined
                        && let (Some(conn), Some((_, session, _))) = (&slot.conn, &session)
                    {
                        updates.push((
                            session.clone(),
                            update_command(PathId(path as u8), conn, new, slot.tier()),
                        ));
                    }
                    info!(link = %name, path, tier = ?new.tier, rate_cap_mbps = ?new.rate_cap_mbps, "reload: link updated in place");
                    changes.updated.push(name);
                }
                Some(new) => {
                    slot.stop(b"link changed", &self.budgets);
                    let new = table.new_slot(new.clone());
                    table.slots[path] = Some(new);
                    self.start_link(&mut table, path);
                    info!(link = %name, path, "reload: link changed; reconnecting");
                    changes.restarted.push(name);
                }
            }
        }
        for new in links {
            if table
                .slots
                .iter()
                .flatten()
                .any(|s| s.config.name == new.name)
            {
                continue;
            }
            // At most MAX_PATHS links, each in one slot: a free one is left.
            let Some(path) = table.slots.iter().position(Option::is_none) else {
                continue;
            };
            table.slots[path] = Some(table.new_slot(new.clone()));
            self.start_link(&mut table, path);
            match cause {
                Cause::Reload => info!(link = %new.name, path, "reload: link added"),
                Cause::Devices => {
                    info!(link = %new.name, path, "link added: a device matching its pattern is up");
                }
            }
            changes.added.push(new.name.clone());
        }
        (changes, updates)
    }
}

/// The client's own TUN device, never a pattern's link.
fn tun_name(config: &ClientConfig) -> Option<&str> {
    config.tun.as_ref().map(|t| t.name.as_str())
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
            config: super::session_config(&crate::config::SessionLimits {
                congestion: *ctx
                    .congestion
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                redundant: *ctx
                    .redundant
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                ..ctx.config.session
            }),
            scheduler: ctx
                .scheduler
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .build(),
            label: hex(&session_id),
            user: ctx.config.user.clone(),
            acceptor: None,
            on_end: None,
        });
        let began = handle.started;
        slot.send_replace(Some(handle.clone()));
        ctx.start_session(session_id, handle);
        let _ = task.await;
        slot.send_replace(None);
        ctx.end_session();
        warn!("session closed; starting a new one");
        // A session that lived for a while (the server lost it, or every link stayed dark for
        // its idle timeout) is followed at once: requests wait for the next one. Only sessions
        // that end as they start are spaced out.
        if began.elapsed() < SHORT_SESSION {
            tokio::time::sleep(BACKOFF_MIN).await;
        }
    }
}

async fn run_link(
    id: PathId,
    generation: u64,
    ctx: Arc<LinkContext>,
    session_id: SessionId,
    session: SessionHandle,
    history: Arc<JoinHistory>,
) {
    let mut interfaces = ctx.interfaces.clone();
    let mut backoff = BACKOFF_MIN;
    // The link's traffic counter, which its sockets add to.
    let Some(traffic) = ctx.update(id, generation, |slot| slot.traffic.clone()) else {
        return;
    };
    // Which of the link's `server` addresses the next attempt starts with (taken modulo their
    // number, which a reload may change): an attempt that fails moves on to the next, a join
    // stays with the one that took it.
    let mut next_server = 0usize;
    // Since when every attempt went unanswered (the server silent: an outage).
    let mut dark_since: Option<Instant> = None;
    loop {
        let started = Instant::now();
        // Whether the attempt failed with the server silent while the link rejoins fast (a
        // shorter wait follows).
        let mut short_wait = false;
        let answered_before = history.answered.load(Ordering::Acquire);
        let mut floor = started + BACKOFF_MIN;
        // What changes from here on ends the wait after a failed attempt early.
        interfaces.mark_unchanged();
        // The settings now (a reload may have changed the tier or rate cap since the last
        // attempt); gone: the link was removed or replaced.
        let Some(link) = ctx.update(id, generation, |slot| {
            slot.retry_at = None;
            slot.config.clone()
        }) else {
            return;
        };
        // What the last attempt sent counts too (a dark link's handshakes).
        ctx.meter(id, generation);
        let spent = ctx.budgets.of(&link).filter(LinkBudgetStatus::spent);
        if let Some(state) = spent
            && when_spent(&link) == WhenSpent::Leave
        {
            if !wait_for_budget(id, generation, &ctx, &link, state).await {
                return;
            }
            backoff = BACKOFF_MIN;
            continue;
        }
        // Spent with `budget_spent = "backup"`: the path joins as a backup.
        let Some((was_spent, tier)) = ctx.update(id, generation, |slot| {
            let was = std::mem::replace(&mut slot.spent, spent.is_some());
            (was, slot.tier())
        }) else {
            return;
        };
        if let Some(state) = spent
            && !was_spent
        {
            demoted_warning(&link, state);
        }
        // A link whose interface is down or whose address is gone waits for it (no attempt
        // could succeed), and an attempt stops when that happens.
        let fast = rejoins_fast(dark_since, link.fast_rejoin);
        let attempt = async {
            if let Some(e) = unusable(&link) {
                return Err(e);
            }
            let mut watch = interfaces.clone();
            tokio::select! {
                joined = connect_and_join(id, &link, next_server, &ctx, &session_id, fast, &traffic) => joined,
                e = became_unusable(&link, &mut watch) => Err(e),
            }
        };
        match attempt.await {
            Ok((endpoint, conn, answer, took)) => {
                dark_since = None;
                // A rejoin starts with the address that took this join.
                next_server = took;
                // The server lost the session (a restart, or its idle timeout while every link
                // was dark) and started it anew for this join: the flows this session carries
                // are unknown there. The session ends, so that its flows fail at once (their
                // applications see a reset) instead of waiting for ever, and a new one starts;
                // this connection never joins it.
                if history.lost(answer, answered_before) {
                    warn!(
                        link = %link.name,
                        "the server no longer knew this session (restarted?): its flows are \
                         lost; starting a new session"
                    );
                    // The server's new session for this join ends with it.
                    conn.close(
                        quinn::VarInt::from_u32(super::join::SESSION_CLOSED_CODE),
                        b"session lost",
                    );
                    session.close().await;
                    return;
                }
                let peer = answer.knows;
                // The path attaches with the settings its JOIN carried (`link`, read before
                // the attempt); a change since is sent after the attach, below.
                if ctx
                    .update(id, generation, |slot| slot.conn = Some(conn.clone()))
                    .is_none()
                {
                    conn.close(quinn::VarInt::from_u32(0), b"link changed");
                    return;
                }
                let config = PathConfig {
                    tier,
                    weight: link.weight,
                    rate_cap: rate_cap(&link),
                    max_datagram_size: datagram_size(&conn),
                };
                let attach = Command::AttachPath {
                    id,
                    conn: conn.clone(),
                    config,
                    name: link.name.clone(),
                    peer,
                    congestion: link.congestion,
                    rate_cap_down: rate_cap_down(&link),
                    server_knows: answer.server,
                };
                if session.commands.send(attach).await.is_err() {
                    return;
                }
                info!(link = %link.name, remote = %super::canonical(conn.remote_address()), "link joined");
                // A reload that changed the tier, rate cap or controller since the attempt began saw the
                // path not joined yet and left the news to this task.
                let now = ctx.update(id, generation, |slot| {
                    slot.joined = true;
                    slot.joins += 1;
                    (slot.config.clone(), slot.tier())
                });
                if let Some((now, now_tier)) = now
                    && (
                        now_tier,
                        now.rate_cap_mbps,
                        now.rate_cap_down_mbps,
                        now.congestion,
                    ) != (
                        tier,
                        link.rate_cap_mbps,
                        link.rate_cap_down_mbps,
                        link.congestion,
                    )
                {
                    let update = update_command(id, &conn, &now, now_tier);
                    let _ = session.commands.send(update).await;
                }
                // The path leaves at once when its interface goes down or its address goes away:
                // the session sends what was in flight on it over the other paths now, not
                // after its probe timeouts.
                let mut watch = interfaces.clone();
                // An ended connection whose link is unusable now went for that reason (quinn
                // may notice first, its socket failing).
                // A spent data budget is such a reason too, unless the path stays as a backup:
                // then its tier changes, and changes back in the next period.
                let gone = loop {
                    let turn = tokio::select! {
                        reason = conn.closed() => break unusable(&link).ok_or(reason),
                        e = became_unusable(&link, &mut watch) => break Ok(e),
                        turn = budget_turn(id, generation, &ctx, &traffic) => turn,
                    };
                    let (now, tier) = match turn {
                        BudgetTurn::Spent(state) => break Ok(LinkError::BudgetSpent(state)),
                        BudgetTurn::Retiered { now, tier, spent } => {
                            match spent {
                                Some(state) => demoted_warning(&now, state),
                                None => {
                                    info!(link = %now.name, ?tier, "the link's data budget has room again: its path takes its tier back");
                                }
                            }
                            (now, tier)
                        }
                    };
                    let _ = session
                        .commands
                        .send(update_command(id, &conn, &now, tier))
                        .await;
                };
                // Gone for good: the session tells the server (PATH_ABANDON over another
                // path), which then stops waiting for this one.
                if gone.is_ok() {
                    let abandon = Command::AbandonPath {
                        id,
                        conn: conn.stable_id(),
                    };
                    let _ = session.commands.send(abandon).await;
                    conn.close(quinn::VarInt::from_u32(0), b"link unusable");
                }
                let reason = match gone {
                    Ok(e) => e.to_string(),
                    Err(reason) => format!("connection closed: {reason}"),
                };
                warn!(link = %link.name, %reason, "link left the session; reconnecting");
                ctx.meter(id, generation);
                ctx.update(id, generation, |slot| {
                    slot.joined = false;
                    slot.last_error = Some(reason);
                });
                drop(endpoint);
                if started.elapsed() > Duration::from_secs(10) {
                    backoff = BACKOFF_MIN;
                }
            }
            Err(e) => {
                let silent = matches!(e, LinkError::NoAnswer(_));
                // Only a server silent on a link that sent something is an outage that goes
                // on (an interface down sends nothing, and finds its end through the kernel).
                if silent {
                    let since = *dark_since.get_or_insert(started);
                    // This attempt was the last fast one.
                    if fast && !rejoins_fast(Some(since), link.fast_rejoin) {
                        warn!(
                            link = %link.name,
                            fast_rejoin_s = link.fast_rejoin.as_secs(),
                            "no answer from the server for fast_rejoin_s: one handshake per \
                             attempt from now on, attempts up to {} s apart",
                            BACKOFF_MAX.as_secs()
                        );
                    }
                } else {
                    dark_since = None;
                }
                short_wait = silent && rejoins_fast(dark_since, link.fast_rejoin);
                let retry_in = retry_delay(backoff, short_wait);
                warn!(link = %link.name, error = %e, ?retry_in, "link not joined");
                // Found unusable before sending anything: the next check costs nothing on the
                // network, so news of the interfaces may bring it at once.
                if matches!(e, LinkError::InterfaceDown(_) | LinkError::AddressGone(_)) {
                    floor = started;
                } else if link.server.len() > 1 {
                    // Another of the server's addresses may get through first (a network that
                    // lets only some ports out).
                    next_server = (next_server + 1) % link.server.len();
                    info!(
                        link = %link.name,
                        first = %link.server[next_server],
                        "the next attempt starts with the server's next address"
                    );
                }
                ctx.update(id, generation, |slot| slot.last_error = Some(e.to_string()));
            }
        }
        let wait = retry_delay(backoff, short_wait);
        ctx.update(id, generation, |slot| {
            slot.retry_at = Some(Instant::now() + wait)
        });
        // An interface that came up or got an address since the attempt started ends the
        // wait early (but an attempt that went to the network is not repeated before
        // BACKOFF_MIN after its start, however busy the kernel's news).
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = ifwatch::changed(&mut interfaces) => {
                tokio::time::sleep_until(floor.into()).await;
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// What happened to a joined link's budget ([`budget_turn`]).
enum BudgetTurn {
    /// Spent: the link leaves (`budget_spent = "leave"`).
    Spent(LinkBudgetStatus),
    /// Its path takes tier `tier` ([`LinkSlot::tier`]; `now`: the link's settings now): backup,
    /// the budget being `spent` (`"backup"`), or its own again, a demoted path's budget having
    /// room (a new period, a reload; `spent` is `None`).
    Retiered {
        now: Arc<LinkConfig>,
        tier: Tier,
        spent: Option<LinkBudgetStatus>,
    },
}

/// Counts link `id`'s traffic against its budget every [`budget::METER_EVERY`], and at once
/// when its sockets find the rest of the budget gone; returns when the budget is spent, and,
/// for a path kept as a backup, when it has room again (never, once the link is removed or
/// replaced).
async fn budget_turn(
    id: PathId,
    generation: u64,
    ctx: &LinkContext,
    traffic: &LinkTraffic,
) -> BudgetTurn {
    loop {
        tokio::select! {
            () = tokio::time::sleep(budget::METER_EVERY) => {}
            () = traffic.reached() => {}
        }
        let now = budget::now_unix();
        let turn = ctx.update(id, generation, |slot| {
            let spent = slot
                .meter(&ctx.budgets, now)
                .filter(LinkBudgetStatus::spent);
            if let Some(state) = spent
                && when_spent(&slot.config) == WhenSpent::Leave
            {
                return Some(BudgetTurn::Spent(state));
            }
            // Spent and kept as a backup, or a kept path's budget has room again.
            (slot.spent != spent.is_some()).then(|| {
                slot.spent = spent.is_some();
                BudgetTurn::Retiered {
                    now: slot.config.clone(),
                    tier: slot.tier(),
                    spent,
                }
            })
        });
        match turn {
            None => std::future::pending::<()>().await,
            Some(Some(turn)) => return turn,
            Some(None) => {}
        }
    }
}

/// What `link` does once its budget is spent (leave when it has none: never asked then).
fn when_spent(link: &LinkConfig) -> WhenSpent {
    link.budget.map_or(WhenSpent::Leave, |b| b.when_spent)
}

fn demoted_warning(link: &LinkConfig, state: LinkBudgetStatus) {
    warn!(
        link = %link.name,
        budget = %state,
        "the link's data budget is spent: it carries traffic only as a backup until its next period"
    );
}

/// Keeps link `id` (`link` its settings now, `state` its spent budget) out of the session until
/// its budget has room again: the next period, or a reload that raised the budget or took it
/// away, or that keeps spent links as backups (checked every [`budget::METER_EVERY`]). False
/// when the link was removed or replaced meanwhile.
async fn wait_for_budget(
    id: PathId,
    generation: u64,
    ctx: &LinkContext,
    link: &LinkConfig,
    state: LinkBudgetStatus,
) -> bool {
    warn!(
        link = %link.name,
        budget = %state,
        "the link's data budget is spent: it stays out of the session until its next period"
    );
    let spent = LinkError::BudgetSpent(state).to_string();
    ctx.update(id, generation, |slot| {
        slot.spent = true;
        slot.retry_at = None;
        slot.last_error = Some(spent);
    });
    loop {
        tokio::time::sleep(budget::METER_EVERY).await;
        let Some(now) = ctx.update(id, generation, |slot| slot.config.clone()) else {
            return false;
        };
        if !ctx.budgets.of(&now).is_some_and(|s| s.spent()) {
            info!(link = %link.name, "the link's data budget has room again: joining");
            ctx.update(id, generation, |slot| slot.spent = false);
            return true;
        }
        // A reload set `budget_spent = "backup"`: it joins as a backup.
        if when_spent(&now) == WhenSpent::Backup {
            ctx.update(id, generation, |slot| slot.spent = false);
            return true;
        }
    }
}

/// Why `link` cannot carry anything now: its interface is not running, or its `local_addr` is
/// not an address of this host. `None` when it can, or when that cannot be told (binding then
/// says what is wrong).
fn unusable(link: &LinkConfig) -> Option<LinkError> {
    if let Some(dev) = link.interface.as_deref()
        && crate::inbound::tun::netconf::is_running(dev).is_ok_and(|up| !up)
    {
        return Some(LinkError::InterfaceDown(dev.to_owned()));
    }
    let ip = link.local_addr?.ip();
    // Binding to an address this host does not have fails with `EADDRNOTAVAIL`.
    let gone = !ip.is_unspecified()
        && std::net::UdpSocket::bind((ip, 0))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::AddrNotAvailable);
    gone.then_some(LinkError::AddressGone(ip))
}

/// Waits until [`unusable`] says why `link` cannot carry anything, checking at each change of
/// the interfaces.
async fn became_unusable(link: &LinkConfig, watch: &mut watch::Receiver<u64>) -> LinkError {
    loop {
        ifwatch::changed(watch).await;
        if let Some(e) = unusable(link) {
            return e;
        }
    }
}

/// `server` (one of `link`'s) resolved: the first address of each IP family, in the
/// resolver's order, or of the local address's family alone when the link has a `local_addr`.
async fn resolve(link: &LinkConfig, server: &str) -> Result<Vec<SocketAddr>, LinkError> {
    let err = |reason: String| LinkError::Resolve {
        server: server.to_owned(),
        reason,
    };
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host(server)
        .await
        .map_err(|e| err(e.to_string()))?
        .collect();
    let want_v4 = link.local_addr.map(|a| a.is_ipv4());
    let mut addrs: Vec<SocketAddr> = Vec::with_capacity(2);
    for a in resolved {
        if want_v4.is_none_or(|v4| a.is_ipv4() == v4)
            && !addrs.iter().any(|b| b.is_ipv4() == a.is_ipv4())
        {
            addrs.push(a);
        }
    }
    if addrs.is_empty() {
        return Err(err("no address of the local address's family".into()));
    }
    Ok(addrs)
}

/// The order in which a link tries the `servers` its `server` entries resolved to (entry index
/// and address, entry by entry): as given, but with the first address of the other IP family,
/// when there is one, second, so that it is tried [`FAMILY_FALLBACK`] after the first (a
/// dual-stack name, or a list with both, on a link that reaches only one family).
fn happy_eyeballs(mut servers: Vec<(usize, SocketAddr)>) -> Vec<(usize, SocketAddr)> {
    if let Some(&(_, first)) = servers.first()
        && let Some(other) = servers
            .iter()
            .position(|&(_, a)| a.is_ipv4() != first.is_ipv4())
        && other > 1
    {
        let moved = servers.remove(other);
        servers.insert(1, moved);
    }
    servers
}

/// Whether `addrs` hold addresses of both IP families.
fn both_families(mut addrs: impl Iterator<Item = SocketAddr>) -> bool {
    let Some(first) = addrs.next() else {
        return false;
    };
    addrs.any(|a| a.is_ipv4() != first.is_ipv4())
}

/// Whether `a` and `b` are the same address, an IPv4 address and its IPv4-mapped IPv6 form
/// alike (what a dual-stack socket's connection reports).
fn same_address(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && a.ip().to_canonical() == b.ip().to_canonical()
}

/// A join over a link: its endpoint and connection, the server's answer, and which of the
/// link's `server` addresses took it.
type Joined = (quinn::Endpoint, quinn::Connection, JoinAnswer, usize);

/// Joins the session over `link`, trying its `server` addresses from the `first` on (see
/// [`handshake`]; those that do not resolve are left out). With no `local_addr`, a name (or
/// a list) with addresses of both IP families is tried over one dual-stack socket, the other
/// family [`FAMILY_FALLBACK`] after the first (RFC 8305), so a link that reaches only IPv4 (or
/// only IPv6) joins whichever the resolver put first; `fast`: racing handshakes.
async fn connect_and_join(
    id: PathId,
    link: &LinkConfig,
    first: usize,
    ctx: &LinkContext,
    session_id: &SessionId,
    fast: bool,
    traffic: &Arc<LinkTraffic>,
) -> Result<Joined, LinkError> {
    let n = link.server.len();
    let mut servers: Vec<(usize, SocketAddr)> = Vec::with_capacity(2 * n);
    let mut unresolved = None;
    for i in (0..n).map(|k| (first + k) % n) {
        match resolve(link, &link.server[i]).await {
            Ok(addrs) => servers.extend(addrs.into_iter().map(|a| (i, a))),
            Err(e) => {
                unresolved.get_or_insert(e);
            }
        }
    }
    let mut servers = happy_eyeballs(servers);
    let Some(&(_, server)) = servers.first() else {
        return Err(unresolved.unwrap_or_else(|| LinkError::Connect("no server address".into())));
    };
    let both = both_families(servers.iter().map(|&(_, a)| a));
    let v4_any = SocketAddr::from(([0, 0, 0, 0], 0));
    let v6_any = SocketAddr::from(([0u16; 8], 0));
    let local = link.local_addr.unwrap_or(if server.is_ipv4() && !both {
        v4_any
    } else {
        v6_any
    });
    let socket = match bind_link_socket(local, link.interface.as_deref(), link.interface_required) {
        // A host without IPv6: IPv4 alone.
        Err(BindError::Bind { source, .. })
            if both && source.raw_os_error() == Some(libc::EAFNOSUPPORT) =>
        {
            servers.retain(|&(_, a)| a.is_ipv4());
            bind_link_socket(v4_any, link.interface.as_deref(), link.interface_required)?
        }
        bound => bound?,
    };
    let runtime =
        quinn::default_runtime().ok_or_else(|| LinkError::Connect("no async runtime".into()))?;
    // Counted for the link's data budget.
    let counted = runtime
        .wrap_udp_socket(socket)
        .map(|inner| budget::CountingSocket::new(inner, traffic.clone()))
        .map_err(|e| LinkError::Connect(e.to_string()))?;
    let endpoint = quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        None,
        Arc::new(counted),
        runtime,
    )
    .map_err(|e| LinkError::Connect(e.to_string()))?;
    let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
    let addrs: Vec<SocketAddr> = servers.iter().map(|&(_, a)| a).collect();
    let conn = tokio::time::timeout_at(deadline, handshake(&endpoint, ctx, &addrs, fast))
        .await
        .map_err(|_| LinkError::NoAnswer(CONNECT_TIMEOUT))??;
    let took = servers
        .iter()
        .find(|&&(_, a)| same_address(a, conn.remote_address()))
        .map_or(first % n.max(1), |&(i, _)| i);
    let answer = tokio::time::timeout_at(deadline, join(&conn, id, link, ctx, session_id))
        .await
        .map_err(|_| LinkError::Timeout(CONNECT_TIMEOUT))??;
    if conn.max_datagram_size().is_none() {
        return Err(LinkError::NoDatagrams);
    }
    Ok((endpoint, conn, answer, took))
}

/// Whether a link whose attempts went unanswered since `dark_since` (`None`: the last one was
/// answered, or found the link unusable) still looks for the server fast: racing handshakes,
/// and at most [`SILENT_BACKOFF_MAX`] between attempts. That costs about 3 kB a second sent
/// into the dark, so it lasts `fast_rejoin` (the link's `fast_rejoin_s`); zero: never.
fn rejoins_fast(dark_since: Option<Instant>, fast_rejoin: Duration) -> bool {
    dark_since.map_or(Duration::ZERO, |since| since.elapsed()) < fast_rejoin
}

/// The wait before the next attempt: `backoff`, or at most [`SILENT_BACKOFF_MAX`] after an
/// attempt the server never answered while the link rejoins fast.
fn retry_delay(backoff: Duration, silent: bool) -> Duration {
    if silent {
        backoff.min(SILENT_BACKOFF_MAX)
    } else {
        backoff
    }
}

/// A QUIC connection to one of `servers` (addresses of one server, in the order to try them)
/// from `endpoint`, its handshake complete; the k-th handshake goes to `servers[k % n]`, so
/// a racing attempt reaches the second address [`HANDSHAKE_RESTART`] after the first. While none has
/// completed, another handshake starts every [`HANDSHAKE_RESTART`] beside the earlier ones (at
/// most [`MAX_HANDSHAKES`], the oldest dropped): a single handshake to a silent server
/// retransmits its first packet after 1, 2 and 4 s more (quinn's probe timeout, doubled each
/// time), so a link whose outage ends would wait up to 4 s for the next one; with a handshake
/// started every 2 s a first packet leaves about every second. The first handshake to complete
/// wins and the others are dropped (closed) before any of them joins, so the server never
/// sees two joins of one attempt. A handshake refused or failed (a wrong certificate, a
/// closed port) ends the attempt with its error; one that times out leaves the others racing.
/// Without `race` (a link dark for longer than its `fast_rejoin_s`), one handshake only. When
/// `servers` span both IP families, `servers[1]` (of the other family, [`happy_eyeballs`])
/// starts [`FAMILY_FALLBACK`] after the first, racing or not.
async fn handshake(
    endpoint: &quinn::Endpoint,
    ctx: &LinkContext,
    servers: &[SocketAddr],
    race: bool,
) -> Result<quinn::Connection, LinkError> {
    let mut started = 0usize;
    let mut racing = tokio::task::JoinSet::new();
    // The handshakes in flight, oldest first.
    let mut order = std::collections::VecDeque::with_capacity(MAX_HANDSHAKES);
    // When the next handshake starts; `None`: no more.
    let mut next = Some(tokio::time::Instant::now());
    let both_families = both_families(servers.iter().copied());
    loop {
        tokio::select! {
            // A result first: a handshake that completed wins over starting another.
            biased;
            Some(done) = racing.join_next_with_id() => match done {
                Ok((_, Ok(conn))) => return Ok(conn),
                // One timed out: the others race on.
                Ok((task, Err(quinn::ConnectionError::TimedOut))) => {
                    order.retain(|h: &tokio::task::AbortHandle| h.id() != task);
                }
                Ok((_, Err(e))) => return Err(LinkError::Connect(e.to_string())),
                // Dropped for a newer one (already out of `order`).
                Err(_) => {}
            },
            () = sleep_until(next) => {
                if order.len() == MAX_HANDSHAKES
                    && let Some(oldest) = order.pop_front()
                {
                    oldest.abort();
                }
                let Some(&server) = servers.get(started % servers.len().max(1)) else {
                    return Err(LinkError::Connect("no server address".into()));
                };
                started += 1;
                let connecting = endpoint
                    .connect_with(ctx.crypto.clone(), server, &ctx.config.server_name)
                    .map_err(|e| LinkError::Connect(e.to_string()))?;
                order.push_back(racing.spawn(connecting));
                next = if started == 1 && both_families {
                    next.map(|at| at + FAMILY_FALLBACK)
                } else {
                    next.filter(|_| race).map(|at| at + HANDSHAKE_RESTART)
                };
            }
        }
    }
}

/// Sleeps until `at`; for ever when `None`.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Joins the session on `conn`; returns what the server's answer says.
async fn join(
    conn: &quinn::Connection,
    path: PathId,
    link: &LinkConfig,
    ctx: &LinkContext,
    session_id: &SessionId,
) -> Result<JoinAnswer, LinkError> {
    let io = |e: &dyn std::fmt::Display| LinkError::Connect(e.to_string());
    let mut exporter = [0u8; 32];
    conn.export_keying_material(&mut exporter, EXPORTER_LABEL, b"")
        .map_err(|_| LinkError::Connect("TLS exporter unavailable".into()))?;
    let msg = Join {
        user: ctx.config.user.clone(),
        session_id: *session_id,
        path,
        tier: link.tier,
        weight: link.weight,
        knows: PeerKnows::ALL,
        second_answer_byte: true,
        link_name: link.name.clone(),
        mac: compute_mac(&ctx.config.key, &exporter, session_id, path),
    };
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| io(&e))?;
    send.write_all(&msg.encode()).await.map_err(|e| io(&e))?;
    send.finish().map_err(|e| io(&e))?;
    let answer = recv.read_to_end(16).await.map_err(|_| LinkError::Refused)?;
    parse_answer(&answer).ok_or_else(|| {
        conn.close(quinn::VarInt::from_u32(0), b"");
        LinkError::Refused
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_rejoins_fast_for_fast_rejoin_s_of_silence() {
        let minute = Duration::from_secs(60);
        let now = Instant::now();
        // Not dark (never, or its last attempt answered): fast, unless told never to be.
        assert!(rejoins_fast(None, minute));
        assert!(!rejoins_fast(None, Duration::ZERO));
        // Dark for less than fast_rejoin_s, then for longer.
        assert!(rejoins_fast(Some(now), minute));
        let long_ago = now.checked_sub(2 * minute).unwrap();
        assert!(!rejoins_fast(Some(long_ago), minute));
        assert!(!rejoins_fast(Some(now), Duration::ZERO));
    }

    #[test]
    fn a_session_is_lost_when_the_server_starts_it_twice_or_for_a_later_join() {
        let created = JoinAnswer {
            created: true,
            ..JoinAnswer::default()
        };
        let found = JoinAnswer::default();
        // Two joins begun together, answered in either order, then a rejoin the server knew.
        for first in [created, found] {
            let h = JoinHistory::default();
            let second = if first.created { found } else { created };
            assert!(!h.lost(first, false) && !h.lost(second, false));
            assert!(!h.lost(found, true));
            // The server restarted: the next join starts the session again.
            assert!(h.lost(created, true));
        }
        // Started again for a join begun before any answer (its own answer lost).
        let h = JoinHistory::default();
        assert!(!h.lost(created, false));
        assert!(h.lost(created, false));
        // A join begun after an answer, the first to say it started the session.
        let h = JoinHistory::default();
        assert!(!h.lost(found, false));
        assert!(h.lost(created, true));
        // An older server never says: never lost.
        let h = JoinHistory::default();
        assert!(!h.lost(found, false) && !h.lost(found, true));
    }

    #[test]
    fn the_other_ip_family_is_tried_second() {
        let a = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let (v6, v4, v4b) = (
            a("[2001:db8::1]:443"),
            a("192.0.2.1:443"),
            a("192.0.2.2:4433"),
        );
        assert_eq!(
            happy_eyeballs(vec![(0, v4), (1, v4b), (1, v6)]),
            [(0, v4), (1, v6), (1, v4b)]
        );
        assert_eq!(
            happy_eyeballs(vec![(0, v6), (0, v4), (1, v4b)]),
            [(0, v6), (0, v4), (1, v4b)]
        );
        assert_eq!(happy_eyeballs(vec![(0, v4), (1, v4b)]), [(0, v4), (1, v4b)]);
        assert_eq!(happy_eyeballs(Vec::new()), []);
        // A dual-stack socket's connection reports IPv4 addresses mapped.
        assert!(same_address(v4, a("[::ffff:192.0.2.1]:443")));
        assert!(!same_address(v4, a("[::ffff:192.0.2.1]:444")));
        assert!(!same_address(v4, v4b));
    }

    #[test]
    fn a_silent_server_is_tried_again_sooner_than_a_refusing_one() {
        let long = BACKOFF_MAX;
        assert_eq!(retry_delay(long, false), BACKOFF_MAX);
        assert_eq!(retry_delay(long, true), SILENT_BACKOFF_MAX);
        assert_eq!(retry_delay(BACKOFF_MIN, true), BACKOFF_MIN);
        assert!(SILENT_BACKOFF_MAX < BACKOFF_MAX && SILENT_BACKOFF_MAX >= BACKOFF_MIN);
    }
}
