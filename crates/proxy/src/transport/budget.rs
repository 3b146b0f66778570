//! Links' data budgets (`[[link]] budget_mib`, `budget_period`, `budget_reset_day`): how many
//! bytes a metered link (an LTE modem on a monthly plan) may put on the network per day or
//! month, in UTC. What counts is what the carrier counts: every datagram the link's sockets
//! send and receive, with its IP and UDP headers, the handshakes of attempts that never join
//! included ([`CountingSocket`]). A link whose budget is spent leaves the session as a link
//! whose interface went down does (the server is told, and sends what was in flight on it
//! elsewhere) and stays out until the next period begins or a reload raises its budget. The
//! sockets wake the link's task as the count reaches the budget ([`LinkTraffic`]), so the link
//! goes past it only by what is in flight then; the count is also read once a second.
//!
//! The counts survive restarts: they are kept in `link-budgets.json` in the client's
//! `state_dir`, written every 10 s while they change and when the daemon stops (a crash loses
//! at most the last 10 s). A link's count starts again at zero when a new period begins, and
//! when a link of that name appears with another period; a clock set back (a router without a
//! real-time clock, before its time is synchronised) never starts it again.

use std::collections::BTreeMap;
use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

use serde::{Deserialize, Serialize};

use super::status::LinkBudgetStatus;
use crate::config::{BudgetPeriod, LinkBudget, LinkConfig};

/// The ledger's file in the state directory.
pub const FILE: &str = "link-budgets.json";
/// How often a joined link's counters are read.
pub const METER_EVERY: Duration = Duration::from_secs(1);
/// How often the ledger is written while it changes.
pub const SAVE_EVERY: Duration = Duration::from_secs(10);
/// Bytes of IP and UDP header a datagram carries on the network besides its payload.
fn header_bytes(ipv6: bool) -> u64 {
    if ipv6 { 48 } else { 28 }
}

const DAY: u64 = 86_400;

/// What a link's sockets carried, in bytes on the network, each way, and the count at which
/// its budget is spent.
#[derive(Debug)]
pub(crate) struct LinkTraffic {
    sent: AtomicU64,
    received: AtomicU64,
    /// The total (sent and received) at which the budget is spent (`u64::MAX`: no budget).
    limit: AtomicU64,
    /// Woken when the total reaches `limit`.
    reached: tokio::sync::Notify,
}

impl Default for LinkTraffic {
    fn default() -> Self {
        LinkTraffic {
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            reached: tokio::sync::Notify::new(),
        }
    }
}

impl LinkTraffic {
    fn add(&self, way: &AtomicU64, bytes: u64) {
        way.fetch_add(bytes, Ordering::Relaxed);
        // Most links have no budget: the total is read only against a limit.
        let limit = self.limit.load(Ordering::Relaxed);
        if limit != u64::MAX && self.total() >= limit {
            self.reached.notify_one();
        }
    }

    /// Bytes so far, both ways.
    pub(crate) fn total(&self) -> u64 {
        self.sent().wrapping_add(self.received())
    }

    /// Bytes sent so far.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Bytes received so far.
    pub(crate) fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// The budget is spent when the count reaches `at` (`u64::MAX`: never).
    pub(crate) fn set_limit(&self, at: u64) {
        self.limit.store(at, Ordering::Relaxed);
    }

    /// Returns once the count has reached the limit (at once when it did since last asked).
    pub(crate) async fn reached(&self) {
        self.reached.notified().await;
    }
}

/// A link's UDP socket that counts what it sends and receives, in bytes on the network (each
/// datagram with its IP and UDP headers), into the link's [`LinkTraffic`]; every socket of the
/// link's attempts adds to it, so handshakes that never join count too.
#[derive(Debug)]
pub(crate) struct CountingSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    traffic: Arc<LinkTraffic>,
}

impl CountingSocket {
    /// `inner`, counted into `bytes`.
    pub(crate) fn new(inner: Arc<dyn AsyncUdpSocket>, traffic: Arc<LinkTraffic>) -> Self {
        CountingSocket { inner, traffic }
    }

    /// The bytes on the network of `len` bytes of payload cut into datagrams of at most
    /// `segment` bytes, exchanged with `peer` (an IPv4-mapped address, on a dual-stack socket,
    /// travels as IPv4).
    fn on_network(len: usize, segment: usize, peer: SocketAddr) -> u64 {
        let datagrams = len.div_ceil(segment.max(1)) as u64;
        let header = header_bytes(peer.ip().to_canonical().is_ipv6());
        len as u64 + datagrams * header
    }
}

impl AsyncUdpSocket for CountingSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> std::io::Result<()> {
        self.inner.try_send(transmit)?;
        let len = transmit.contents.len();
        let segment = transmit.segment_size.unwrap_or(len);
        let bytes = Self::on_network(len, segment, transmit.destination);
        self.traffic.add(&self.traffic.sent, bytes);
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<std::io::Result<usize>> {
        let polled = self.inner.poll_recv(cx, bufs, meta);
        if let Poll::Ready(Ok(n)) = &polled {
            for m in &meta[..*n] {
                let bytes = Self::on_network(m.len, m.stride, m.addr);
                self.traffic.add(&self.traffic.received, bytes);
            }
        }
        polled
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// One link's count in the ledger.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    /// The kind of period counted: `day`, or `month` and its reset day (`month-15`).
    #[serde(default)]
    period: String,
    /// The start of the period counted, seconds since the Unix epoch.
    period_start: u64,
    /// Bytes counted in it.
    used_bytes: u64,
}

/// How [`Entry::period`] names `period`.
fn period_name(period: BudgetPeriod) -> String {
    match period {
        BudgetPeriod::Day => "day".to_owned(),
        BudgetPeriod::Month { reset_day } => format!("month-{reset_day}"),
    }
}

/// The file's contents.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Ledger {
    /// The links' counts, by name.
    links: BTreeMap<String, Entry>,
}

impl LinkBudgetStatus {
    /// Whether the link may carry nothing more in this period.
    pub fn spent(&self) -> bool {
        self.used_bytes >= self.budget_bytes
    }
}

impl std::fmt::Display for LinkBudgetStatus {
    /// `1.2 GiB of 2.0 GiB used until 2026-12-01 00:00 UTC`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} used until {}",
            size(self.used_bytes),
            size(self.budget_bytes),
            utc(self.period_end)
        )
    }
}

/// Bytes for people, in KiB, MiB or GiB.
pub(crate) fn size(bytes: u64) -> String {
    let kib = bytes as f64 / 1024.0;
    if kib < 1024.0 {
        format!("{kib:.1} KiB")
    } else if kib < 1024.0 * 1024.0 {
        format!("{:.1} MiB", kib / 1024.0)
    } else {
        format!("{:.1} GiB", kib / (1024.0 * 1024.0))
    }
}

/// `2026-12-01 00:00 UTC` of seconds since the Unix epoch.
pub fn utc(unix: u64) -> String {
    let (y, m, d) = civil_from_days((unix / DAY) as i64);
    let s = unix % DAY;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        s / 3600,
        s % 3600 / 60
    )
}

/// The bounds of the period that holds `now` (seconds since the Unix epoch): its start and
/// end.
pub fn period_bounds(period: BudgetPeriod, now: u64) -> (u64, u64) {
    let today = now / DAY;
    match period {
        BudgetPeriod::Day => (today * DAY, (today + 1) * DAY),
        BudgetPeriod::Month { reset_day } => {
            let (y, m, d) = civil_from_days(today as i64);
            let (y, m) = match d >= u32::from(reset_day) {
                true => (y, m),
                false if m == 1 => (y - 1, 12),
                false => (y, m - 1),
            };
            let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            let day = |y, m| days_from_civil(y, m, u32::from(reset_day)) as u64 * DAY;
            (day(y, m), day(ny, nm))
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Seconds since the Unix epoch now.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The links' counts, shared by their tasks, and where they are kept.
#[derive(Debug)]
pub struct Budgets {
    /// The ledger's file (`None`: kept in memory only).
    path: Option<PathBuf>,
    ledger: Mutex<Ledger>,
    /// Changed since last written.
    dirty: AtomicBool,
    /// Held while the file is written: one write at a time, and a save that finds another
    /// under way waits for it (so the daemon never stops in the middle of one).
    writing: Mutex<()>,
}

impl Budgets {
    /// The ledger in `state_dir`, as the last run left it; a file that cannot be read is logged
    /// and the counts start at zero (it is written anew at the next save).
    pub fn load(state_dir: &Path) -> Budgets {
        let path = state_dir.join(FILE);
        let ledger = match std::fs::read(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ledger::default(),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "links' data budgets: counts start at zero");
                Ledger::default()
            }
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %path.display(), error = %e, "links' data budgets: not a ledger; counts start at zero");
                Ledger::default()
            }),
        };
        Budgets {
            path: Some(path),
            ledger: Mutex::new(ledger),
            dirty: AtomicBool::new(false),
            writing: Mutex::new(()),
        }
    }

    /// Counts kept in memory only.
    pub fn in_memory() -> Budgets {
        Budgets {
            path: None,
            ledger: Mutex::new(Ledger::default()),
            dirty: AtomicBool::new(false),
            writing: Mutex::new(()),
        }
    }

    /// `link`'s entry for the period of `budget` that holds `now`: the stored one, started
    /// again at zero when a later period has begun.
    fn entry<'a>(
        ledger: &'a mut Ledger,
        link: &str,
        budget: &LinkBudget,
        now: u64,
    ) -> (&'a mut Entry, u64) {
        let (start, end) = period_bounds(budget.period, now);
        let name = period_name(budget.period);
        let entry = ledger.links.entry(link.to_owned()).or_default();
        // A clock set back finds a stored period later than its own: kept. A period of
        // another kind starts again.
        if entry.period_start < start || entry.period != name {
            *entry = Entry {
                period: name,
                period_start: start,
                used_bytes: 0,
            };
        }
        let end = match entry.period_start > start {
            true => period_bounds(budget.period, entry.period_start).1,
            false => end,
        };
        (entry, end)
    }

    /// Adds `bytes` to `link`'s count; where its budget stands now.
    pub fn add(&self, link: &str, budget: &LinkBudget, bytes: u64, now: u64) -> LinkBudgetStatus {
        let mut ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        let (entry, period_end) = Self::entry(&mut ledger, link, budget, now);
        let before = entry.clone();
        entry.used_bytes = entry.used_bytes.saturating_add(bytes);
        if *entry != before {
            self.dirty.store(true, Ordering::Relaxed);
        }
        LinkBudgetStatus {
            used_bytes: entry.used_bytes,
            budget_bytes: budget.bytes,
            period_end,
        }
    }

    /// Where `link`'s budget stands now.
    pub fn state(&self, link: &str, budget: &LinkBudget, now: u64) -> LinkBudgetStatus {
        self.add(link, budget, 0, now)
    }

    /// Where `link`'s budget stands now, when it has one.
    pub fn of(&self, link: &LinkConfig) -> Option<LinkBudgetStatus> {
        let budget = link.budget?;
        Some(self.state(&link.name, &budget, now_unix()))
    }

    /// Writes the ledger when it changed since the last write (to a temporary file renamed over
    /// the old one, mode 0600).
    pub fn save(&self) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        if !self.dirty.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        let text = {
            let ledger = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
            serde_json::to_vec_pretty(&*ledger).map_err(std::io::Error::other)?
        };
        let written = write_private(path, &text);
        if written.is_err() {
            self.dirty.store(true, Ordering::Relaxed);
        }
        written
    }

    /// [`Budgets::save`], a failure logged.
    pub fn save_logged(&self) {
        if let Err(e) = self.save() {
            tracing::warn!(error = %e, "links' data budgets not written");
        }
    }
}

/// Writes `bytes` to `path` through a temporary file beside it, mode 0600.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(named)?;
    }
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(named)?;
    file.write_all(bytes).map_err(named)?;
    file.sync_all().map_err(named)?;
    std::fs::rename(&tmp, path).map_err(named)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::config::WhenSpent;

    fn at(y: i64, m: u32, d: u32, h: u64) -> u64 {
        days_from_civil(y, m, d) as u64 * DAY + h * 3600
    }

    /// Every datagram counts with its IP and UDP headers, each segment of a GSO batch as one.
    #[tokio::test]
    async fn the_socket_counts_datagrams_with_their_headers() {
        use quinn::Runtime as _;
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let inner = quinn::TokioRuntime.wrap_udp_socket(socket).unwrap();
        let traffic = Arc::new(LinkTraffic::default());
        let counting = Arc::new(CountingSocket::new(inner, traffic.clone()));
        let mut poller = counting.clone().create_io_poller();
        let segments = counting.max_transmit_segments().min(3);
        let contents = vec![7u8; 1200 * segments - 100];
        let transmit = Transmit {
            destination: peer.local_addr().unwrap(),
            ecn: None,
            contents: &contents,
            segment_size: (segments > 1).then_some(1200),
            src_ip: None,
        };
        // The socket's readiness is known once polled.
        loop {
            std::future::poll_fn(|cx| poller.as_mut().poll_writable(cx))
                .await
                .unwrap();
            match counting.try_send(&transmit) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                sent => break sent.unwrap(),
            }
        }
        let sent = contents.len() as u64 + 28 * segments as u64;
        assert_eq!((traffic.sent(), traffic.received()), (sent, 0));
        // The limit reached wakes the waiter (at once: the wake is kept).
        traffic.set_limit(sent + 100);
        peer.send_to(&[1; 500], addr).unwrap();
        let mut buf = vec![0u8; 65536];
        let mut meta = [RecvMeta::default()];
        std::future::poll_fn(|cx| {
            let mut bufs = [IoSliceMut::new(&mut buf)];
            counting.poll_recv(cx, &mut bufs, &mut meta)
        })
        .await
        .unwrap();
        assert_eq!((traffic.sent(), traffic.received()), (sent, 528));
        assert_eq!(traffic.total(), sent + 528);
        tokio::time::timeout(Duration::from_secs(1), traffic.reached())
            .await
            .expect("the limit was reached");
    }

    #[test]
    fn dates_round_trip() {
        for z in -800_000..800_000 {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z, "{y}-{m}-{d}");
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(utc(at(2026, 11, 25, 16)), "2026-11-25 16:00 UTC");
        assert_eq!(utc(at(2024, 2, 29, 0) + 61), "2024-02-29 00:01 UTC");
    }

    #[test]
    fn periods_start_at_midnight_utc_of_the_day_or_the_reset_day() {
        let now = at(2026, 11, 25, 16);
        assert_eq!(
            period_bounds(BudgetPeriod::Day, now),
            (at(2026, 11, 25, 0), at(2026, 11, 26, 0))
        );
        let month = |d| BudgetPeriod::Month { reset_day: d };
        assert_eq!(
            period_bounds(month(1), now),
            (at(2026, 11, 1, 0), at(2026, 12, 1, 0))
        );
        assert_eq!(
            period_bounds(month(25), now),
            (at(2026, 11, 25, 0), at(2026, 12, 25, 0))
        );
        assert_eq!(
            period_bounds(month(26), now),
            (at(2026, 10, 26, 0), at(2026, 11, 26, 0))
        );
        // Across the year, both ways.
        assert_eq!(
            period_bounds(month(15), at(2027, 1, 3, 5)),
            (at(2026, 12, 15, 0), at(2027, 1, 15, 0))
        );
        assert_eq!(
            period_bounds(month(15), at(2026, 12, 20, 5)),
            (at(2026, 12, 15, 0), at(2027, 1, 15, 0))
        );
        // The last second of a period, and the first of the next.
        let end = at(2026, 12, 1, 0);
        assert_eq!(period_bounds(month(1), end - 1).1, end);
        assert_eq!(period_bounds(month(1), end).0, end);
    }

    #[test]
    fn headers_are_counted_by_the_family_a_datagram_travels_in() {
        let at = |s: &str| -> SocketAddr { s.parse().unwrap() };
        // Three segments of 1,200 bytes and one of 400.
        assert_eq!(
            CountingSocket::on_network(4000, 1200, at("192.0.2.1:443")),
            4000 + 4 * 28
        );
        // An IPv4-mapped address (a dual-stack socket's) travels as IPv4.
        assert_eq!(
            CountingSocket::on_network(1200, 1200, at("[::ffff:192.0.2.1]:443")),
            1200 + 28
        );
        assert_eq!(
            CountingSocket::on_network(1200, 1200, at("[2001:db8::1]:443")),
            1200 + 48
        );
    }

    #[test]
    fn a_count_starts_again_in_a_new_period_but_not_when_the_clock_goes_back() {
        let b = Budgets::in_memory();
        let budget = LinkBudget {
            bytes: 1000,
            period: BudgetPeriod::Day,
            when_spent: WhenSpent::Leave,
        };
        let day1 = at(2026, 11, 25, 10);
        assert!(!b.add("lte", &budget, 600, day1).spent());
        let state = b.add("lte", &budget, 400, day1 + 60);
        assert!(state.spent(), "{state:?}");
        assert_eq!(
            state.to_string(),
            "1.0 KiB of 1.0 KiB used until 2026-11-26 00:00 UTC"
        );
        assert!(
            !b.state("wifi", &budget, day1).spent(),
            "links counted apart"
        );
        // The clock set back a day: the later period is kept, spent.
        assert!(b.state("lte", &budget, day1 - DAY).spent());
        // The next day: zero again.
        let next = b.state("lte", &budget, day1 + DAY);
        assert_eq!((next.used_bytes, next.period_end), (0, at(2026, 11, 27, 0)));
        // Another period (a reload): counted from zero.
        let monthly = LinkBudget {
            period: BudgetPeriod::Month { reset_day: 1 },
            ..budget
        };
        b.add("wifi", &budget, 5, day1 + DAY);
        assert_eq!(b.state("wifi", &monthly, day1 + DAY).used_bytes, 0);
        // A bigger budget (a reload): no longer spent.
        b.add("lte", &budget, 1000, day1 + DAY);
        let bigger = LinkBudget {
            bytes: 2000,
            ..budget
        };
        assert!(!b.state("lte", &bigger, day1 + DAY).spent());
    }

    #[test]
    fn the_ledger_survives_a_restart_and_a_bad_file_starts_at_zero() {
        let dir = std::env::temp_dir().join(format!("braid-budget-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let budget = LinkBudget {
            bytes: 1 << 20,
            period: BudgetPeriod::Month { reset_day: 1 },
            when_spent: WhenSpent::Leave,
        };
        let now = at(2026, 11, 25, 10);
        let b = Budgets::load(&dir);
        b.add("lte", &budget, 12_345, now);
        b.save().unwrap();
        let mode = {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::metadata(dir.join(FILE))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode, 0o600);
        assert_eq!(
            Budgets::load(&dir).state("lte", &budget, now).used_bytes,
            12_345
        );
        // Unchanged since: not written again.
        std::fs::write(dir.join(FILE), "{").unwrap();
        b.save().unwrap();
        assert_eq!(std::fs::read_to_string(dir.join(FILE)).unwrap(), "{");
        // Not a ledger: zero, and the next save writes a good one.
        let fresh = Budgets::load(&dir);
        assert_eq!(fresh.state("lte", &budget, now).used_bytes, 0);
        fresh.add("lte", &budget, 7, now);
        fresh.save().unwrap();
        assert_eq!(Budgets::load(&dir).state("lte", &budget, now).used_bytes, 7);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
