//! The daemons' side of systemd's service notifications (sd_notify(3)), for units of
//! `Type=notify` (the shipped ones in `deploy/`):
//!
//! - `READY=1` once the daemon listens (the server's QUIC endpoints, the client's inbounds and
//!   control socket), so units ordered after it find it listening;
//! - `STATUS=…`, one line of what runs (sessions and paths, links joined), which
//!   `systemctl status` shows; refreshed every 10 s, and saying when the last reload failed;
//! - `RELOADING=1` with `MONOTONIC_USEC` at SIGHUP and `READY=1` when the reload is done, so
//!   that `Type=notify-reload` (systemd 253 and later) waits for it;
//! - `WATCHDOG=1` every third of `WatchdogSec`, each one sent only after a status collection
//!   has answered (every session's task answers it), so a daemon whose sessions stopped
//!   answering is restarted by systemd rather than left hanging;
//! - `STOPPING=1` at Ctrl-C or SIGTERM.
//!
//! Nothing of this runs without `NOTIFY_SOCKET` (a daemon started by hand, by procd on OpenWrt,
//! or by a `Type=simple` unit). A message that cannot be sent is dropped: the daemon never
//! waits for the service manager.

use std::ffi::OsStr;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Mutex;
use std::time::Duration;

use super::process::Signals;
use crate::transport::DaemonStatus;

/// How often the status line is refreshed without a watchdog (and at most, with one).
const STATUS_EVERY: Duration = Duration::from_secs(10);

/// The service manager's notification socket, and the watchdog it asks for.
#[derive(Debug)]
pub(crate) struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
    /// `WatchdogSec`: a `WATCHDOG=1` is due within each such span.
    watchdog: Option<Duration>,
    /// The error of the last reload, while the running configuration is older than the file.
    reload_failure: Mutex<Option<String>>,
    /// The last status line sent (not sent again unchanged).
    last_status: Mutex<String>,
}

impl Notifier {
    /// From the environment systemd gives a `Type=notify` service: `NOTIFY_SOCKET`, and
    /// `WATCHDOG_USEC` with `WATCHDOG_PID`. `None` without `NOTIFY_SOCKET`, or (logged) when
    /// it cannot be used.
    pub(crate) fn from_env() -> Option<Notifier> {
        let socket = std::env::var_os("NOTIFY_SOCKET")?;
        let watchdog = std::env::var("WATCHDOG_USEC").ok();
        let watchdog_pid = std::env::var("WATCHDOG_PID").ok();
        let settings = Settings::parse(
            &socket,
            watchdog.as_deref(),
            watchdog_pid.as_deref(),
            std::process::id(),
        );
        settings
            .and_then(Notifier::open)
            .map_err(|e| tracing::warn!(error = %e, "no notifications to the service manager"))
            .ok()
    }

    /// A socket to send what `settings` ask for.
    fn open(settings: Settings) -> Result<Notifier, String> {
        let socket = UnixDatagram::unbound().map_err(|e| format!("NOTIFY_SOCKET: {e}"))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| format!("NOTIFY_SOCKET: {e}"))?;
        Ok(Notifier {
            socket,
            addr: settings.addr,
            watchdog: settings.watchdog,
            reload_failure: Mutex::new(None),
            last_status: Mutex::new(String::new()),
        })
    }

    /// Sends one notification (newline-separated assignments); dropped, and logged at debug,
    /// when it cannot be sent.
    fn send(&self, message: &str) {
        if let Err(e) = self.socket.send_to_addr(message.as_bytes(), &self.addr) {
            tracing::debug!(error = %e, "notification to the service manager not sent");
        }
    }

    /// The status line for `status`, with the last reload's failure.
    fn status_line(&self, status: &DaemonStatus) -> String {
        let mut line = summary(status);
        if let Some(e) = lock(&self.reload_failure).as_ref() {
            line += &format!("; last reload failed: {e}");
        }
        // One line (the protocol separates assignments by newlines), spaces collapsed.
        line.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// `extra` (assignments, each ending in a newline) and `STATUS=…` of `status`, the latter
    /// only when it changed.
    fn send_status(&self, status: &DaemonStatus, extra: &str) {
        let line = self.status_line(status);
        let mut last = lock(&self.last_status);
        if *last == line {
            if !extra.is_empty() {
                self.send(extra.trim_end());
            }
            return;
        }
        self.send(&format!("{extra}STATUS={line}"));
        *last = line;
    }

    /// The daemon listens: `READY=1` and its status.
    pub(crate) fn ready(&self, status: &DaemonStatus) {
        self.send_status(status, "READY=1\n");
    }

    /// A SIGHUP's reload begins.
    pub(crate) fn reloading(&self) {
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
    }

    /// The reload is done: `Err` with why the file was not put in force; `status` the daemon's
    /// since (`None` when its collection did not answer: the line waits for the next one).
    pub(crate) fn reloaded(&self, outcome: Result<(), String>, status: Option<&DaemonStatus>) {
        *lock(&self.reload_failure) = outcome.err();
        match status {
            Some(status) => self.send_status(status, "READY=1\n"),
            None => self.send("READY=1"),
        }
    }

    /// The daemon is stopping.
    pub(crate) fn stopping(&self) {
        self.send("STOPPING=1");
    }

    /// Refreshes the status line every [`STATUS_EVERY`] (every third of the watchdog's span
    /// when shorter), each time after a status collection answers, and feeds the watchdog then.
    /// A collection that does not answer within that span feeds nothing and is logged. Runs
    /// until dropped.
    pub(crate) async fn heartbeat<F: Future<Output = DaemonStatus>>(
        &self,
        collect: impl Fn() -> F,
    ) {
        let every = self
            .watchdog
            .map_or(STATUS_EVERY, |w| (w / 3).min(STATUS_EVERY));
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match tokio::time::timeout(every, collect()).await {
                Ok(status) => {
                    let feed = match self.watchdog {
                        Some(_) => "WATCHDOG=1\n",
                        None => "",
                    };
                    self.send_status(&status, feed);
                }
                Err(_) => tracing::warn!(
                    within = ?every,
                    "the sessions did not answer a status collection; the service manager's \
                     watchdog is not fed"
                ),
            }
        }
    }
}

/// Runs a daemon until Ctrl-C or SIGTERM, telling the service manager (when the environment
/// names one, [`Notifier::from_env`]) that it is ready, each SIGHUP's `reload` (between
/// `RELOADING=1` and `READY=1`; `Err` with why the file was not put in force), and at the end
/// that it stops; the heartbeat ([`Notifier::heartbeat`]) runs beside. `status` collects the
/// daemon's status.
pub(crate) async fn serve<F: Future<Output = DaemonStatus>>(
    signals: Signals,
    reload: impl AsyncFn() -> Result<(), String>,
    status: impl Fn() -> F,
) {
    let Some(notifier) = Notifier::from_env() else {
        signals
            .until_stopped(async || {
                let _ = reload().await;
            })
            .await;
        return;
    };
    notifier.ready(&status().await);
    let hangup = async || {
        notifier.reloading();
        let outcome = reload().await;
        let now = tokio::time::timeout(STATUS_EVERY, status()).await.ok();
        notifier.reloaded(outcome, now.as_ref());
    };
    tokio::select! {
        () = signals.until_stopped(hangup) => {}
        () = notifier.heartbeat(&status) => {}
    }
    notifier.stopping();
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the environment asks for.
#[derive(Debug)]
struct Settings {
    addr: SocketAddr,
    watchdog: Option<Duration>,
}

impl Settings {
    /// `NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace), `WATCHDOG_USEC` and
    /// `WATCHDOG_PID` (the watchdog is another process's when it names one); an error names
    /// the variable.
    fn parse(
        socket: &OsStr,
        watchdog_usec: Option<&str>,
        watchdog_pid: Option<&str>,
        pid: u32,
    ) -> Result<Settings, String> {
        use std::os::unix::ffi::OsStrExt as _;
        let bytes = socket.as_bytes();
        let addr = match bytes.split_first() {
            Some((b'@', name)) => {
                use std::os::linux::net::SocketAddrExt as _;
                SocketAddr::from_abstract_name(name)
            }
            Some((b'/', _)) => SocketAddr::from_pathname(socket),
            _ => {
                return Err(format!(
                    "NOTIFY_SOCKET: expected a path or @name, not {:?}",
                    socket
                ));
            }
        }
        .map_err(|e| format!("NOTIFY_SOCKET: {e}"))?;
        let ours = watchdog_pid.is_none_or(|p| p.trim().parse::<u32>() == Ok(pid));
        let watchdog = match watchdog_usec {
            Some(usec) if ours => match usec.trim().parse::<u64>() {
                Ok(0) | Err(_) => {
                    return Err(format!(
                        "WATCHDOG_USEC: expected a positive number of microseconds, not {usec:?}"
                    ));
                }
                Ok(us) => Some(Duration::from_micros(us)),
            },
            _ => None,
        };
        Ok(Settings { addr, watchdog })
    }
}

/// `CLOCK_MONOTONIC` in microseconds (what `RELOADING=1` carries).
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000
}

/// One line of what the daemon runs: a server's addresses, sessions and paths; a client's
/// links, joined or why not, and its inbounds; what both send and receive over the last second
/// (while a session carries data).
pub(crate) fn summary(status: &DaemonStatus) -> String {
    let paths = |s: &crate::transport::SessionStatus| {
        s.paths.iter().filter(|p| p.state != "failed").count()
    };
    let plural = |n: usize, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    // A quiet session's rates are those of its last busy second: left out.
    let busy = status.sessions.iter().filter(|s| !s.quiet);
    let (send, recv) = busy
        .flat_map(|s| &s.paths)
        .fold((0.0, 0.0), |(send, recv), p| {
            (send + p.send_mbps, recv + p.recv_mbps)
        });
    let rates = match send + recv > 0.0 {
        true => format!("; sending {send:.1} Mbit/s, receiving {recv:.1} Mbit/s"),
        false => String::new(),
    };
    if status.role == "server" {
        let live: usize = status.sessions.iter().map(paths).sum();
        return format!(
            "listening on {}; {}, {} live; {} accepted, {} refused{rates}",
            status.listen.join(", "),
            plural(status.sessions.len(), "session"),
            plural(live, "path"),
            plural(
                usize::try_from(status.joins_accepted).unwrap_or(usize::MAX),
                "join"
            ),
            status.joins_refused,
        );
    }
    let joined: Vec<&str> = status
        .links
        .iter()
        .filter(|l| l.joined())
        .map(|l| l.name.as_str())
        .collect();
    let mut line = format!(
        "{} of {} joined",
        joined.len(),
        plural(status.links.len(), "link")
    );
    if !joined.is_empty() {
        line += &format!(" ({})", joined.join(", "));
    }
    for link in status.links.iter().filter(|l| !l.joined()) {
        line += &format!("; {} {}", link.name, link.state);
        if let Some(e) = &link.last_error {
            // `budget spent: data budget spent: …` says it twice.
            line += &format!(": {}", e.trim_start_matches("data budget spent: "));
        }
    }
    let inbounds: Vec<String> = status
        .inbounds
        .iter()
        .map(|i| format!("{} {}", i.name, i.listen))
        .chain(status.tun.iter().map(|t| format!("tun {}", t.device)))
        .collect();
    if !inbounds.is_empty() {
        line += &format!("; {}", inbounds.join(", "));
    }
    line + &rates
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::transport::{InboundStatus, LinkStatus};

    fn parse(socket: &str, usec: Option<&str>, pid: Option<&str>) -> Result<Settings, String> {
        Settings::parse(OsStr::new(socket), usec, pid, 42)
    }

    #[test]
    fn the_environment_names_a_path_or_an_abstract_socket_and_the_watchdog() {
        let s = parse("/run/systemd/notify", None, None).unwrap();
        assert_eq!(
            s.addr.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        assert_eq!(s.watchdog, None);
        let s = parse("@braid/notify", Some("30000000"), Some("42")).unwrap();
        {
            use std::os::linux::net::SocketAddrExt as _;
            assert_eq!(s.addr.as_abstract_name(), Some(&b"braid/notify"[..]));
        }
        assert_eq!(s.watchdog, Some(Duration::from_secs(30)));
        // Without WATCHDOG_PID the watchdog is ours; with another process's, it is not.
        assert!(parse("/n", Some("5"), None).unwrap().watchdog.is_some());
        assert_eq!(parse("/n", Some("5"), Some("7")).unwrap().watchdog, None);
    }

    #[test]
    fn a_bad_environment_is_an_error_naming_the_variable() {
        for (socket, usec, want) in [
            ("", None, "NOTIFY_SOCKET: expected a path or @name"),
            (
                "vsock:2:1234",
                None,
                "NOTIFY_SOCKET: expected a path or @name",
            ),
            ("/n", Some("0"), "WATCHDOG_USEC"),
            ("/n", Some("soon"), "WATCHDOG_USEC"),
            (&format!("/{}", "x".repeat(200)), None, "NOTIFY_SOCKET"),
        ] {
            let e = parse(socket, usec, None).unwrap_err();
            assert!(e.starts_with(want), "{socket:?} {usec:?}: {e}");
        }
    }

    /// The watchdog is fed only after a status collection answers.
    #[tokio::test]
    async fn a_status_collection_that_does_not_answer_feeds_no_watchdog() {
        let dir = std::env::temp_dir().join(format!("braid-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let _ = std::fs::remove_file(&path);
        let manager = UnixDatagram::bind(&path).unwrap();
        manager.set_nonblocking(true).unwrap();
        let notifier = Notifier::open(Settings {
            addr: SocketAddr::from_pathname(&path).unwrap(),
            watchdog: Some(Duration::from_millis(30)),
        })
        .unwrap();
        let received = || {
            let mut buf = [0; 512];
            std::iter::from_fn(|| manager.recv(&mut buf).ok().map(|n| buf[..n].to_vec()))
                .collect::<Vec<_>>()
        };
        let stuck = notifier.heartbeat(std::future::pending::<DaemonStatus>);
        let _ = tokio::time::timeout(Duration::from_millis(100), stuck).await;
        assert!(
            received().is_empty(),
            "fed while the sessions did not answer"
        );
        let answering = notifier.heartbeat(|| async { DaemonStatus::default() });
        let _ = tokio::time::timeout(Duration::from_millis(100), answering).await;
        let got = received();
        assert!(
            got.len() >= 3 && got.iter().all(|m| m.starts_with(b"WATCHDOG=1")),
            "{got:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_status_line_says_what_runs() {
        let mut server = DaemonStatus {
            role: "server".into(),
            listen: vec!["0.0.0.0:4433".into(), "0.0.0.0:443".into()],
            joins_accepted: 3,
            joins_refused: 1,
            ..DaemonStatus::default()
        };
        assert_eq!(
            summary(&server),
            "listening on 0.0.0.0:4433, 0.0.0.0:443; 0 sessions, 0 paths live; 3 joins \
             accepted, 1 refused"
        );
        let session = |quiet| crate::transport::SessionStatus {
            paths: [("active", 12.25), ("failed", 0.0), ("backup", 1.0)]
                .iter()
                .map(|&(state, mbps)| crate::transport::PathReport {
                    state: state.into(),
                    send_mbps: mbps,
                    recv_mbps: mbps / 10.0,
                    ..Default::default()
                })
                .collect(),
            quiet,
            ..Default::default()
        };
        server.sessions.push(session(false));
        assert!(
            summary(&server).ends_with(
                "; 1 session, 2 paths live; 3 joins accepted, 1 refused; sending 13.2 Mbit/s, \
                 receiving 1.3 Mbit/s"
            ),
            "{}",
            summary(&server)
        );
        // A quiet session's rates are stale: not counted.
        server.sessions[0] = session(true);
        assert!(
            summary(&server).ends_with("1 refused"),
            "{}",
            summary(&server)
        );
        let link = |name: &str, state: &str, error: Option<&str>| LinkStatus {
            name: name.into(),
            state: state.into(),
            last_error: error.map(Into::into),
            ..Default::default()
        };
        let client = DaemonStatus {
            role: "client".into(),
            links: vec![
                link("wifi", "joined", None),
                link("lte", "retry in 2.0 s", Some("no answer")),
                link(
                    "5g",
                    "budget spent",
                    Some("data budget spent: 1.0 GiB of 1.0 GiB used until 2026-11-26 00:00 UTC"),
                ),
            ],
            inbounds: vec![InboundStatus {
                name: "socks5".into(),
                listen: "127.0.0.1:1080".into(),
                ..Default::default()
            }],
            ..DaemonStatus::default()
        };
        assert_eq!(
            summary(&client),
            "1 of 3 links joined (wifi); lte retry in 2.0 s: no answer; 5g budget spent: 1.0 GiB \
             of 1.0 GiB used until 2026-11-26 00:00 UTC; socks5 127.0.0.1:1080"
        );
    }
}
