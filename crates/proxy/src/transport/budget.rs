//! Links' data budgets (`[[link]] budget_mib`, `budget_period`, `budget_reset_day`,
//! `budget_timezone`): how many bytes a metered link (an LTE modem on a monthly plan) may put on
//! the network per day or month, from midnight of the host's local time (or UTC). What counts is what the carrier counts: every datagram the link's sockets
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
use crate::config::{BudgetClock, BudgetPeriod, LinkBudget, LinkConfig};

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

/// How far apart the starts of one period under two clocks may be for a count to carry over:
/// UTC and a local time start one period at most 14 hours apart (offsets run from −12 to
/// +14 h), two time zones up to 26; two periods of one clock start at least 23 hours apart (a
/// day that daylight saving shortened).
const CLOCK_CHANGE: u64 = 22 * 3600;

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
    /// `1.2 GiB of 2.0 GiB used until 2026-12-01 00:00 UTC`, or in local time
    /// `… until 2026-12-01 00:00 +01:00`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let end = match self.period_end_offset_s {
            None => utc(self.period_end),
            Some(offset) => civil_with_offset(self.period_end, offset),
        };
        write!(
            f,
            "{} of {} used until {end}",
            size(self.used_bytes),
            size(self.budget_bytes),
        )
    }
}

/// `2026-12-01 00:00 +01:00`: the civil time `offset` seconds from UTC at `unix`.
fn civil_with_offset(unix: u64, offset: i64) -> String {
    let local = unix.saturating_add_signed(offset);
    let (y, m, d) = civil_from_days((local / DAY) as i64);
    let s = local % DAY;
    let sign = if offset < 0 { '-' } else { '+' };
    let minutes = offset.unsigned_abs() / 60;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} {sign}{:02}:{:02}",
        s / 3600,
        s % 3600 / 60,
        minutes / 60,
        minutes % 60
    )
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

/// The bounds of the period that holds `now` (seconds since the Unix epoch) under `clock`: its
/// start and end. Local time comes from the host's time zone (`TZ`, else `/etc/localtime`), with
/// its daylight saving (a day may last 23 or 25 hours); where the C library cannot say, UTC.
pub fn period_bounds(period: BudgetPeriod, clock: BudgetClock, now: u64) -> (u64, u64) {
    match clock {
        BudgetClock::Utc => utc_bounds(period, now),
        BudgetClock::Local => local_bounds(period, now).unwrap_or_else(|| utc_bounds(period, now)),
    }
}

/// [`period_bounds`] in UTC.
fn utc_bounds(period: BudgetPeriod, now: u64) -> (u64, u64) {
    let today = now / DAY;
    match period {
        BudgetPeriod::Day => (today * DAY, (today + 1) * DAY),
        BudgetPeriod::Month { reset_day } => {
            let (y, m, d) = civil_from_days(today as i64);
            let ((y, m), (ny, nm)) = month_from(y, m, d, reset_day);
            let day = |y, m| days_from_civil(y, m, u32::from(reset_day)) as u64 * DAY;
            (day(y, m), day(ny, nm))
        }
    }
}

/// The month (year, month) whose `reset_day` began the period holding day `d` of month `m`,
/// and the next.
fn month_from(y: i64, m: u32, d: u32, reset_day: u8) -> ((i64, u32), (i64, u32)) {
    let (y, m) = match d >= u32::from(reset_day) {
        true => (y, m),
        false if m == 1 => (y - 1, 12),
        false => (y, m - 1),
    };
    let next = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    ((y, m), next)
}

/// [`period_bounds`] in local time; `None` where the C library cannot convert, or its answer
/// does not hold `now`.
fn local_bounds(period: BudgetPeriod, now: u64) -> Option<(u64, u64)> {
    let (y, m, d, _) = local_date(now)?;
    let (start, end) = match period {
        // mktime takes day d + 1 past the month's end into the next month.
        BudgetPeriod::Day => (local_midnight(y, m, d)?, local_midnight(y, m, d + 1)?),
        BudgetPeriod::Month { reset_day } => {
            let ((y, m), (ny, nm)) = month_from(y, m, d, reset_day);
            let day = u32::from(reset_day);
            (local_midnight(y, m, day)?, local_midnight(ny, nm, day)?)
        }
    };
    (start <= now && now < end).then_some((start, end))
}

/// The host's civil date at `unix` and its offset from UTC then, seconds.
fn local_date(unix: u64) -> Option<(i64, u32, u32, i64)> {
    let t = libc::time_t::try_from(unix).ok()?;
    // SAFETY: `tm` is plain data, for which all zeros is a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: `localtime_r` reads `t` and writes `tm`, both alive through the call; it is the
    // thread-safe form.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return None;
    }
    let month = u32::try_from(tm.tm_mon + 1).ok()?;
    let day = u32::try_from(tm.tm_mday).ok()?;
    // `c_long`: 32 bits on the 32-bit routers (armv7, mipsel), 64 here.
    #[allow(clippy::useless_conversion)]
    let offset = i64::from(tm.tm_gmtoff);
    Some((i64::from(tm.tm_year) + 1900, month, day, offset))
}

/// The instant local midnight begins day `d` of month `m` of year `y` (a day or month past the
/// end carries into the next, as `mktime` does; a midnight a daylight-saving change skips is
/// the first instant of that day).
fn local_midnight(y: i64, m: u32, d: u32) -> Option<u64> {
    // SAFETY: as in `local_date`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = i32::try_from(y - 1900).ok()?;
    tm.tm_mon = i32::try_from(m).ok()? - 1;
    tm.tm_mday = i32::try_from(d).ok()?;
    tm.tm_isdst = -1;
    // SAFETY: `mktime` reads and normalises `tm`, alive through the call.
    let t = unsafe { libc::mktime(&mut tm) };
    u64::try_from(t).ok()
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
        let (start, end) = period_bounds(budget.period, budget.clock, now);
        let name = period_name(budget.period);
        let entry = ledger.links.entry(link.to_owned()).or_default();
        // The same period under another clock (the file's `budget_timezone`, or the host's
        // time zone, changed; or a count from before local time was the default): kept, from
        // the new start (see CLOCK_CHANGE).
        if entry.period == name
            && entry.period_start != start
            && entry.period_start.abs_diff(start) <= CLOCK_CHANGE
        {
            entry.period_start = start;
        }
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
            true => period_bounds(budget.period, budget.clock, entry.period_start).1,
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
            period_end_offset_s: match budget.clock {
                BudgetClock::Utc => None,
                BudgetClock::Local => local_date(period_end).map(|(.., offset)| offset),
            },
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

    /// A budget of `bytes` a `period` under `clock`, the link leaving once it is spent.
    fn budget(bytes: u64, period: BudgetPeriod, clock: BudgetClock) -> LinkBudget {
        LinkBudget {
            bytes,
            period,
            when_spent: WhenSpent::Leave,
            clock,
        }
    }

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
            utc_bounds(BudgetPeriod::Day, now),
            (at(2026, 11, 25, 0), at(2026, 11, 26, 0))
        );
        let month = |d| BudgetPeriod::Month { reset_day: d };
        assert_eq!(
            utc_bounds(month(1), now),
            (at(2026, 11, 1, 0), at(2026, 12, 1, 0))
        );
        assert_eq!(
            utc_bounds(month(25), now),
            (at(2026, 11, 25, 0), at(2026, 12, 25, 0))
        );
        assert_eq!(
            utc_bounds(month(26), now),
            (at(2026, 10, 26, 0), at(2026, 11, 26, 0))
        );
        // Across the year, both ways.
        assert_eq!(
            utc_bounds(month(15), at(2027, 1, 3, 5)),
            (at(2026, 12, 15, 0), at(2027, 1, 15, 0))
        );
        assert_eq!(
            utc_bounds(month(15), at(2026, 12, 20, 5)),
            (at(2026, 12, 15, 0), at(2027, 1, 15, 0))
        );
        // The last second of a period, and the first of the next.
        let end = at(2026, 12, 1, 0);
        assert_eq!(utc_bounds(month(1), end - 1).1, end);
        assert_eq!(utc_bounds(month(1), end).0, end);
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
        let budget = budget(1000, BudgetPeriod::Day, BudgetClock::Utc);
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
        let budget = budget(
            1 << 20,
            BudgetPeriod::Month { reset_day: 1 },
            BudgetClock::Utc,
        );
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

    #[test]
    fn a_count_carries_over_to_the_same_period_under_another_clock() {
        let b = Budgets::in_memory();
        let utc = budget(
            1 << 30,
            BudgetPeriod::Month { reset_day: 15 },
            BudgetClock::Utc,
        );
        let now = at(2026, 11, 25, 10);
        // Counted from a local midnight five hours behind UTC (New York's, in winter).
        b.ledger.lock().unwrap().links.insert(
            "lte".to_owned(),
            Entry {
                period: period_name(utc.period),
                period_start: at(2026, 11, 15, 5),
                used_bytes: 777,
            },
        );
        let state = b.state("lte", &utc, now);
        assert_eq!(
            (state.used_bytes, state.period_end),
            (777, at(2026, 12, 15, 0))
        );
        assert_eq!(
            b.ledger.lock().unwrap().links["lte"].period_start,
            at(2026, 11, 15, 0)
        );
        // A day apart is another period, not another clock: a new one starts from zero.
        let daily = LinkBudget {
            period: BudgetPeriod::Day,
            ..utc
        };
        b.add("wifi", &daily, 5, at(2026, 11, 24, 23));
        assert_eq!(b.state("wifi", &daily, at(2026, 11, 25, 1)).used_bytes, 0);
    }

    #[test]
    fn a_local_period_end_is_shown_with_its_offset() {
        assert_eq!(
            civil_with_offset(at(2026, 11, 25, 5), -5 * 3600),
            "2026-11-25 00:00 -05:00"
        );
        assert_eq!(
            civil_with_offset(at(2026, 11, 30, 23), 3600 + 1800),
            "2026-12-01 00:30 +01:30"
        );
        let status = LinkBudgetStatus {
            used_bytes: 1 << 20,
            budget_bytes: 1 << 30,
            period_end: at(2026, 12, 1, 0) - 3600,
            period_end_offset_s: Some(3600),
        };
        assert_eq!(
            status.to_string(),
            "1.0 MiB of 1.0 GiB used until 2026-12-01 00:00 +01:00"
        );
    }

    /// The time zone [`local_periods_in_new_york`] runs under: US Eastern, as a POSIX rule
    /// (no zone file needed): UTC−5, and UTC−4 from the second Sunday of March to the first
    /// of November.
    const NEW_YORK: &str = "EST5EDT,M3.2.0,M11.1.0";

    /// Local periods follow the host's time zone: this test binary run again with `TZ` set
    /// (the C library reads it at the first conversion of the process).
    #[test]
    fn local_periods_follow_the_host_s_time_zone() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "transport::budget::tests::local_periods_in_new_york",
                "--ignored",
                "--nocapture",
            ])
            .env("TZ", NEW_YORK)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("1 passed"), "{text}");
        assert!(text.contains("checked under EST5EDT"), "{text}");
    }

    #[test]
    #[ignore = "run by local_periods_follow_the_host_s_time_zone, under TZ"]
    fn local_periods_in_new_york() {
        if std::env::var("TZ").as_deref() != Ok(NEW_YORK) {
            return;
        }
        let local = |p, now| period_bounds(p, BudgetClock::Local, now);
        // 22:00 on 24 November in New York (EST): its day, midnight to midnight EST.
        assert_eq!(
            local(BudgetPeriod::Day, at(2026, 11, 25, 3)),
            (at(2026, 11, 24, 5), at(2026, 11, 25, 5))
        );
        // The day daylight saving begins (8 March 2026) has 23 hours.
        assert_eq!(
            local(BudgetPeriod::Day, at(2026, 3, 8, 12)),
            (at(2026, 3, 8, 5), at(2026, 3, 9, 4))
        );
        // A month from 1 March (EST) to 1 April (EDT).
        let month = BudgetPeriod::Month { reset_day: 1 };
        assert_eq!(
            local(month, at(2026, 3, 15, 12)),
            (at(2026, 3, 1, 5), at(2026, 4, 1, 4))
        );
        // 1 December 02:00 UTC is still 30 November in New York: November's period.
        assert_eq!(
            local(month, at(2026, 12, 1, 2)),
            (at(2026, 11, 1, 4), at(2026, 12, 1, 5))
        );
        let b = Budgets::in_memory();
        let budget = budget(1 << 30, month, BudgetClock::Local);
        assert_eq!(
            b.state("lte", &budget, at(2026, 11, 20, 0)).to_string(),
            "0.0 KiB of 1.0 GiB used until 2026-12-01 00:00 -05:00"
        );
        println!("checked under EST5EDT");
    }
}
