//! `braid demo`: the whole system in one process on loopback. A server, the link emulator with
//! an emulated Wi-Fi link (30 Mbit/s, 10 ms one-way) and LTE link (20 Mbit/s, 25 ms one-way,
//! more jitter), a download source on 127.0.0.1 and a client whose SOCKS5 inbound the demo's
//! own downloader uses. Everything binds ephemeral ports on 127.0.0.1 and a temporary state
//! directory that is removed at the end.
//!
//! The run has three phases, so the closing summary compares against measured figures, not
//! configured rates: the download over the Wi-Fi link alone, then over the LTE link alone
//! (each through the same emulated link, with a client that has only that link), then over
//! both with a handoff (the Wi-Fi link dark for a few seconds). Every received byte is checked
//! against the source's pattern.

mod summary;
mod traffic;
mod view;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use braid_sched_core::{SchedulerConfig, SchedulerKind};
use braid_testbed::emu::{EmuConfig, EmuError, EmuHandle, Emulator};

use crate::config::{ClientConfig, EgressPolicy, LinkConfig, ServerConfig, ServerTrust, UserEntry};
use crate::daemon::{ClientHandle, DaemonError, ServerHandle, start_client, start_server};
use crate::session::Tier;
use crate::tls::ServerIdentity;
use traffic::Progress;
use view::{LiveView, PathRow};

/// The demo's emulated Wi-Fi link (the scenario path keys, see docs/emu.md).
pub const WIFI: &str = "rate_mbps = 30.0\ndelay_ms = 10.0\njitter_ms = 1.0\nqueue_packets = 300";
/// The demo's emulated LTE link.
pub const LTE: &str = "rate_mbps = 20.0\ndelay_ms = 25.0\njitter_ms = 2.0\nqueue_packets = 300";

/// The shortest and longest `--duration` accepted, seconds.
pub const DURATION_RANGE_S: (f64, f64) = (10.0, 600.0);

/// What the demo runs.
#[derive(Clone, Copy, Debug)]
pub struct DemoOptions {
    /// Total transfer time over the three phases (set-up adds well under a second per phase).
    pub duration: Duration,
    /// Seed of the emulated links' random draws (jitter).
    pub seed: u64,
    /// Redraw the live view in place (stdout is a terminal).
    pub tty: bool,
    /// The congestion controller of both daemons' paths.
    pub congestion: crate::session::congestion::CongestionAlgorithm,
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A daemon could not start.
    #[error("starting the {what}: {source}")]
    Daemon {
        /// Which.
        what: &'static str,
        /// Why.
        source: DaemonError,
    },
    /// The emulator could not start.
    #[error("starting the emulator: {0}")]
    Emu(#[from] EmuError),
    /// A local resource.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The client's links did not join.
    #[error("phase {phase}: the client's links did not join within 10 s")]
    Join {
        /// The phase.
        phase: String,
    },
    /// The download failed or its bytes differed from the source's.
    #[error("phase {phase}: the download failed: {reason}")]
    Transfer {
        /// The phase.
        phase: String,
        /// Why.
        reason: String,
    },
}

/// One phase's measured result.
#[derive(Clone, Debug)]
pub struct PhaseResult {
    /// `wifi only`, `lte only` or `multipath`.
    pub name: String,
    /// Seconds the download ran.
    pub seconds: f64,
    /// Verified bytes received.
    pub bytes: u64,
    /// Bytes each emulated link delivered towards the client, by path name.
    pub path_bytes: Vec<(String, u64)>,
    /// Goodput inside the handoff window and the window (phase seconds), multipath only.
    pub handoff: Option<(f64, f64, f64)>,
}

impl PhaseResult {
    /// Verified application goodput, Mbit/s.
    pub fn goodput_mbps(&self) -> f64 {
        mbps(self.bytes, self.seconds)
    }
}

fn mbps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds / 1e6
    } else {
        0.0
    }
}

/// What the demo measured.
#[derive(Clone, Debug)]
pub struct DemoSummary {
    /// The single-link phases, then the multipath phase.
    pub phases: Vec<PhaseResult>,
}

/// Removes the demo's state directory when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The phase lengths for a total `duration`: each single link gets a fifth (at least 2 s), the
/// multipath phase the rest; the Wi-Fi handoff starts at 35 % of it and lasts a quarter of it
/// (at most 4 s).
fn plan(duration: Duration) -> (f64, f64, (f64, f64)) {
    let total = duration.as_secs_f64();
    let single = (total * 0.2).max(2.0);
    let multi = total - 2.0 * single;
    let start = (multi * 0.35).round();
    (
        single,
        multi,
        (start, start + (multi * 0.25).min(4.0).round()),
    )
}

/// Runs the demo, printing the live view to `out`; the summary is returned (and printed by
/// the caller).
pub async fn run(options: &DemoOptions, out: &mut dyn Write) -> Result<DemoSummary, DemoError> {
    let dir = TempDir(std::env::temp_dir().join(format!("braid-demo-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let source = traffic::start_source().await?;
    let key = random_key()?;
    let ctx = Context {
        key,
        source,
        dir: dir.0.clone(),
        seed: options.seed,
        session: crate::config::SessionLimits {
            congestion: options.congestion,
            ..crate::config::SessionLimits::default()
        },
    };
    let (single, multi, handoff) = plan(options.duration);
    let mut view = LiveView::new(options.tty);
    let _ = writeln!(
        out,
        "braid demo: server, client and emulator on loopback; emulated wifi (30 Mbit/s, 10 ms \
         one-way) and lte (20 Mbit/s, 25 ms one-way, 2 ms jitter); congestion control {}; \
         download source {source}",
        options.congestion
    );
    let mut phases = Vec::with_capacity(3);
    for (name, link) in [("wifi", WIFI), ("lte", LTE)] {
        let phase = format!("{name} only");
        let _ = writeln!(out, "phase: {phase} ({single:.0} s, one-link client)");
        let paths = [(name.to_string(), link.to_string())];
        phases.push(
            ctx.phase(&phase, &paths, single, None, &mut view, out)
                .await?,
        );
    }
    let _ = writeln!(
        out,
        "phase: multipath ({multi:.0} s; handoff: wifi dark for {:.0} s mid-phase)",
        handoff.1 - handoff.0
    );
    let paths = [
        ("wifi".to_string(), WIFI.to_string()),
        ("lte".to_string(), LTE.to_string()),
    ];
    phases.push(
        ctx.phase("multipath", &paths, multi, Some(handoff), &mut view, out)
            .await?,
    );
    Ok(DemoSummary { phases })
}

/// What every phase shares.
struct Context {
    key: [u8; 32],
    source: SocketAddr,
    dir: PathBuf,
    seed: u64,
    /// Both daemons' `[session]` (the congestion controller chosen).
    session: crate::config::SessionLimits,
}

/// Samples taken during a phase: (phase seconds, verified bytes).
type Samples = Vec<(f64, u64)>;

impl Context {
    /// One phase: an emulator with `paths`, a client with one link per path, a download for
    /// `seconds`, a view sample every second.
    async fn phase(
        &self,
        name: &str,
        paths: &[(String, String)],
        seconds: f64,
        handoff: Option<(f64, f64)>,
        view: &mut LiveView,
        out: &mut dyn Write,
    ) -> Result<PhaseResult, DemoError> {
        let (mut server, mut emu, mut client) = self.set_up(name, paths, handoff).await?;
        let progress = Arc::new(Progress::default());
        let task = tokio::spawn(traffic::download(
            client.socks_addr,
            self.source,
            progress.clone(),
        ));
        let emu_start = emu.now().as_secs_f64();
        let Sampled {
            samples,
            path_bytes,
            stalled,
        } = sample_loop(&emu, &client, &progress, seconds, name, view, out).await;
        view.finish_block();
        task.abort();
        let failure = match task.await {
            Ok(Err(reason)) => Some(reason),
            _ if stalled => Some(format!(
                "no data arrived for {:.1} s (stalled); {}",
                STALL_S.min(seconds / 2.0),
                server_view(&server).await
            )),
            _ => None,
        };
        client.shutdown();
        emu.shutdown();
        server.shutdown();
        if let Some(reason) = failure {
            return Err(DemoError::Transfer {
                phase: name.into(),
                reason,
            });
        }
        let (elapsed, bytes) = samples.last().copied().unwrap_or((0.0, 0));
        // Phase time t is emulator time emu_start + t.
        let handoff = handoff.map(|(a, b)| {
            let shift = SETUP_ALLOWANCE_S - emu_start;
            window_goodput(&samples, a + shift, b + shift)
        });
        Ok(PhaseResult {
            name: name.into(),
            seconds: elapsed,
            bytes,
            path_bytes,
            handoff,
        })
    }

    /// A phase's own server, emulator (with the handoff outage, if any) and client, its links
    /// joined.
    async fn set_up(
        &self,
        name: &str,
        paths: &[(String, String)],
        handoff: Option<(f64, f64)>,
    ) -> Result<(ServerHandle, EmuHandle, ClientHandle), DemoError> {
        // Each phase has its own server, so nothing of an earlier phase (its session, its
        // egress connection) competes with this one.
        let state = self.dir.join(name.replace(' ', "-"));
        let server = self.start_server(&state).await?;
        // The outage is placed in emulator time, shifted by a set-up allowance (the links join
        // in well under it on loopback); the summary reports the window as it fell in the
        // download's own time.
        let config = self.emu_config(server.addr, paths, handoff, SETUP_ALLOWANCE_S)?;
        let emu = Emulator::start(&config).await?;
        let client = start_client(self.client_config(&state, &server.fingerprint, paths, &emu))
            .await
            .map_err(|source| DemoError::Daemon {
                what: "client",
                source,
            })?;
        if !client
            .wait_for_paths(paths.len(), Duration::from_secs(10))
            .await
        {
            return Err(DemoError::Join { phase: name.into() });
        }
        Ok((server, emu, client))
    }

    async fn start_server(&self, state: &Path) -> Result<ServerHandle, DemoError> {
        let identity = ServerIdentity::generate("braid").map_err(|e| DemoError::Daemon {
            what: "server",
            source: e.into(),
        })?;
        start_server(server_config(state, self.key, self.session), identity)
            .await
            .map_err(|source| DemoError::Daemon {
                what: "server",
                source,
            })
    }

    fn emu_config(
        &self,
        server: SocketAddr,
        paths: &[(String, String)],
        handoff: Option<(f64, f64)>,
        shift: f64,
    ) -> Result<EmuConfig, DemoError> {
        let mut text = format!("seed = {}\n", self.seed);
        for (i, (name, keys)) in paths.iter().enumerate() {
            text.push_str(&format!(
                "[[path]]\nname = \"{name}\"\nlisten = \"127.0.0.1:0\"\nforward = \"{server}\"\n{keys}\n"
            ));
            if let (0, Some((a, b))) = (i, handoff) {
                text.push_str(&format!(
                    "outages = [[{:.3}, {:.3}]]\n",
                    a + shift,
                    b + shift
                ));
            }
        }
        EmuConfig::parse(&text, Path::new("(braid demo)"))
            .map_err(|e| DemoError::Emu(EmuError::Config(e)))
    }

    fn client_config(
        &self,
        state: &Path,
        fingerprint: &str,
        paths: &[(String, String)],
        emu: &EmuHandle,
    ) -> ClientConfig {
        let links = paths
            .iter()
            .zip(emu.listen_addrs())
            .map(|((path, _), addr)| LinkConfig {
                name: path.clone(),
                local_addr: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
                interface: None,
                interface_required: false,
                server: vec![addr.to_string()],
                weight: 1,
                tier: Tier::Primary,
                rate_cap_mbps: None,
                rate_cap_down_mbps: None,
                congestion: None,
                fast_rejoin: crate::config::DEFAULT_FAST_REJOIN,
                budget: None,
            })
            .collect();
        ClientConfig {
            user: "demo".into(),
            key: self.key,
            trust: ServerTrust::Fingerprint(
                crate::config::parse_fingerprint(fingerprint).unwrap_or([0; 32]),
            ),
            server_name: "braid".into(),
            state_dir: state.to_path_buf(),
            socks_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            http_listen: None,
            metrics_listen: None,
            metrics_token: None,
            metrics_tls: None,
            socks_users: Vec::new(),
            tun: None,
            scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
            links,
            session: self.session,
            routes: Vec::new(),
            fallback_direct: false,
        }
    }
}

/// Time from the emulator's start to the download's start allowed for when placing the
/// handoff in emulator time.
const SETUP_ALLOWANCE_S: f64 = 0.3;

/// Samples the download every second for `seconds`; returns the samples and the bytes each
/// emulated path delivered towards the client.
async fn sample_loop(
    emu: &EmuHandle,
    client: &ClientHandle,
    progress: &Progress,
    seconds: f64,
    phase: &str,
    view: &mut LiveView,
    out: &mut dyn Write,
) -> Sampled {
    let start = Instant::now();
    let first = emu.stats();
    let mut last_paths: Vec<u64> = first.iter().map(|s| s.reverse_dir.sent_bytes).collect();
    let mut samples: Samples = vec![(0.0, 0)];
    let (mut last_progress, mut stalled) = (0.0, false);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        let t = start.elapsed().as_secs_f64();
        let bytes = progress.bytes.load(Ordering::Relaxed);
        let (prev_t, prev_bytes) = samples.last().copied().unwrap_or((0.0, 0));
        samples.push((t, bytes));
        let status = client.status().await;
        let reports = status
            .sessions
            .first()
            .map(|s| s.paths.clone())
            .unwrap_or_default();
        let rows = path_rows(&emu.stats(), &mut last_paths, &reports, t - prev_t);
        let goodput = mbps(bytes - prev_bytes, t - prev_t);
        let _ = view.render(out, phase, t, &rows, goodput);
        if bytes > prev_bytes {
            last_progress = t;
        }
        if t - last_progress >= STALL_S.min(seconds / 2.0) - 0.05 {
            stalled = true;
            break;
        }
        if t + 0.5 >= seconds || progress.failed.load(Ordering::Relaxed) {
            break;
        }
    }
    let path_bytes = emu
        .stats()
        .iter()
        .zip(first)
        .map(|(s, f)| {
            (
                s.name.clone(),
                s.reverse_dir.sent_bytes - f.reverse_dir.sent_bytes,
            )
        })
        .collect();
    Sampled {
        samples,
        path_bytes,
        stalled,
    }
}

/// The view's rows: per path its state, the bytes its emulated link delivered towards the
/// client since the last sample (`last` is updated) over `dt` seconds, and the client's RTT.
fn path_rows(
    stats: &[braid_testbed::emu::PathStats],
    last: &mut [u64],
    reports: &[crate::transport::status::PathReport],
    dt: f64,
) -> Vec<PathRow> {
    stats
        .iter()
        .zip(last.iter_mut())
        .map(|(s, last)| {
            let delta = s.reverse_dir.sent_bytes.saturating_sub(*last);
            *last = s.reverse_dir.sent_bytes;
            let report = reports.iter().find(|p| p.name == s.name);
            PathRow {
                name: s.name.clone(),
                state: if s.down {
                    "DOWN".into()
                } else {
                    report.map_or("joining".into(), |p| p.state.clone())
                },
                mbps: mbps(delta, dt),
                rtt_ms: report.map_or(0.0, |p| p.srtt_ms),
            }
        })
        .collect()
}

/// What [`sample_loop`] saw.
struct Sampled {
    samples: Samples,
    path_bytes: Vec<(String, u64)>,
    /// No byte arrived for [`STALL_S`].
    stalled: bool,
}

/// Seconds without a verified byte after which a phase counts as failed (half the phase when
/// that is shorter).
const STALL_S: f64 = 5.0;

/// The server's side of a stalled phase, for the error message: per path its state, packets
/// sent and lost and largest datagram, and the session's counters.
async fn server_view(server: &ServerHandle) -> String {
    let status = server.status().await;
    let Some(session) = status.sessions.first() else {
        return "the server has no session".into();
    };
    let paths: Vec<String> = session
        .paths
        .iter()
        .map(|p| {
            format!(
                "path {} {}: {} sent, {} lost, max datagram {} B",
                p.name, p.state, p.packets_sent, p.packets_lost, p.max_datagram_size
            )
        })
        .collect();
    let c = &session.counters;
    format!(
        "server: {}; datagrams quinn refused as too large: {}, send errors: {}",
        paths.join(", "),
        c.datagrams_too_large,
        c.send_errors
    )
}

/// Goodput between the first sample at or after `from` and the last at or before `to`:
/// (Mbit/s, from, to) with the sample times actually used.
fn window_goodput(samples: &[(f64, u64)], from: f64, to: f64) -> (f64, f64, f64) {
    let inside: Vec<&(f64, u64)> = samples
        .iter()
        .filter(|(t, _)| *t >= from - 0.05 && *t <= to + 0.05)
        .collect();
    match (inside.first(), inside.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => (mbps(b.1 - a.1, b.0 - a.0), a.0, b.0),
        _ => (0.0, from, to),
    }
}

fn random_key() -> Result<[u8; 32], DemoError> {
    use ring::rand::SecureRandom as _;
    let mut key = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| DemoError::Io {
            what: "drawing a random user key",
            source: std::io::Error::other("the system random source failed"),
        })?;
    Ok(key)
}

fn server_config(dir: &Path, key: [u8; 32], session: crate::config::SessionLimits) -> ServerConfig {
    ServerConfig {
        listen: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
        metrics_listen: None,
        metrics_token: None,
        metrics_tls: None,
        state_dir: dir.join("server"),
        server_name: "braid".into(),
        users: vec![UserEntry {
            name: "demo".into(),
            key,
        }],
        scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
        egress: EgressPolicy {
            // The demo's download source is on 127.0.0.1; only this in-process server, which
            // no one else can join (random key), allows it.
            allow_loopback: true,
            ..EgressPolicy::default()
        },
        max_sessions: 4,
        max_sessions_per_user: crate::config::DEFAULT_MAX_SESSIONS_PER_USER,
        max_pending_joins: 4,
        session,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_splits_the_duration() {
        let (single, multi, (a, b)) = plan(Duration::from_secs(20));
        assert_eq!((single, multi), (4.0, 12.0));
        assert!(a > 0.0 && b > a && b < multi, "{a} {b}");
        let (single, multi, (a, b)) = plan(Duration::from_secs(10));
        assert_eq!((single, multi), (2.0, 6.0));
        assert!(a > 0.0 && b > a && b < multi, "{a} {b}");
    }

    #[test]
    fn window_goodput_uses_the_samples_inside() {
        let samples = [
            (0.0, 0),
            (1.0, 1_000_000),
            (2.0, 1_500_000),
            (3.0, 2_000_000),
            (4.0, 4_000_000),
        ];
        let (g, a, b) = window_goodput(&samples, 1.0, 3.0);
        assert_eq!((a, b), (1.0, 3.0));
        assert!((g - 4.0).abs() < 1e-9, "{g}");
    }
}
