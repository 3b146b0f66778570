//! The status of a running session as `braid status` shows it (serialised as JSON by the control
//! endpoint): its paths (state, RTT, window, throughput, loss), scheduler and counters.

use serde::{Deserialize, Serialize};

/// One path of a session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathReport {
    /// The path id.
    pub id: u8,
    /// The link's name.
    pub name: String,
    /// The peer's address.
    pub remote: String,
    /// `active`, `backup` or `failed`.
    pub state: String,
    /// A probe timeout fired on the live path and nothing was acknowledged since: the link may
    /// have gone dark. Backup paths take over while no primary is live but potentially failed
    /// ones (`docs/schedulers.md`, Tiers).
    #[serde(default)]
    pub potentially_failed: bool,
    /// The live path has been kept busy for a while yet delivered less than `[session]
    /// backup_below_mbps`: backup paths help while no primary is live and not degraded
    /// (`docs/schedulers.md`, Tiers).
    #[serde(default)]
    pub degraded: bool,
    /// Smoothed RTT, ms.
    pub srtt_ms: f64,
    /// RTT variation, ms.
    pub rttvar_ms: f64,
    /// Smallest RTT seen, ms.
    pub min_rtt_ms: f64,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Bytes in flight.
    pub bytes_in_flight: u64,
    /// Smoothed loss fraction.
    pub loss_rate: f32,
    /// Delivery rate from ACKs, Mbit/s.
    pub delivery_mbps: f64,
    /// Bytes sent per second over the last second, Mbit/s (a quiet session's: over its last
    /// busy second, when it carried no data either).
    pub send_mbps: f64,
    /// Bytes received per second over the last second, Mbit/s (as `send_mbps`).
    pub recv_mbps: f64,
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets received.
    pub packets_received: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Packets declared lost that were acknowledged afterwards: the link reorders (or delays
    /// some packets far more than others), and the loss thresholds below grew to wait for them.
    #[serde(default)]
    pub spurious_losses: u64,
    /// Window reductions undone because every loss that caused one proved spurious.
    #[serde(default)]
    pub undone_reductions: u64,
    /// The loss detection's packet threshold: a packet is lost once one sent this many later
    /// was acknowledged (3, more on a path that reorders).
    #[serde(default)]
    pub packet_threshold: u64,
    /// What the loss detection's time threshold adds to the RTT, ms (at least 1/8 of it).
    #[serde(default)]
    pub time_slack_ms: f64,
    /// Times the path's window was cut because its queue held stream bytes back behind flow
    /// control while a path at most half as slow had room (MPTCP's penalisation,
    /// `docs/congestion.md`).
    #[serde(default)]
    pub penalties: u64,
    /// Times the path was declared failed.
    pub failures: u32,
    /// Largest datagram payload, bytes.
    pub max_datagram_size: u16,
    /// What the path's quinn connection counted (packets per byte, ACK traffic).
    #[serde(default)]
    pub quic: QuicCounters,
    /// The path's congestion controller: the session's (`congestion` of the session), or its
    /// link's own (a client's `[[link]] congestion`; on the server, what the client said of it).
    #[serde(default)]
    pub congestion: String,
    /// The cap on what this end sends on the path, Mbit/s (the client's link's
    /// `rate_cap_mbps`; on a server, its `rate_cap_down_mbps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_cap_mbps: Option<f64>,
    /// The BBR model of a path whose controller is BBR (`[session] congestion = "bbr"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbr: Option<BbrReport>,
    /// The coupling of a path whose controller is LIA or OLIA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coupled: Option<CoupledReport>,
}

/// A coupled controller's view of its path (LIA, OLIA).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CoupledReport {
    /// `lia` or `olia`.
    pub kind: String,
    /// LIA's `α` (1 for a path alone) or OLIA's `α_r` (negative: window moved off this path).
    pub alpha: f64,
    /// The coupled paths the last coupling counted (this one included).
    pub paths: u32,
    /// OLIA's `ℓ`: bytes acknowledged between the last two congestion events, or since the
    /// last one when that is more.
    pub loss_interval_bytes: u64,
}

impl CoupledReport {
    /// The report of `cc`, when it is LIA or OLIA.
    pub fn of(cc: &crate::session::congestion::AnyController) -> Option<CoupledReport> {
        let crate::session::congestion::AnyController::Coupled(c) = cc else {
            return None;
        };
        Some(CoupledReport {
            kind: cc.algorithm().name().to_owned(),
            alpha: c.alpha(),
            paths: c.coupling().paths,
            loss_interval_bytes: c.loss_interval(),
        })
    }
}

/// A path connection's own counters, from quinn's connection statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuicCounters {
    /// UDP datagrams sent.
    pub udp_sent: u64,
    /// UDP send system calls (fewer than `udp_sent` with GSO).
    pub udp_send_calls: u64,
    /// UDP datagrams received.
    pub udp_received: u64,
    /// QUIC ACK frames sent.
    pub acks_sent: u64,
    /// QUIC ACK frames received.
    pub acks_received: u64,
    /// QUIC DATAGRAM frames (session packets) sent.
    pub datagrams_sent: u64,
    /// QUIC DATAGRAM frames received.
    pub datagrams_received: u64,
}

impl QuicCounters {
    /// The counters of `conn` now.
    pub fn of(conn: &quinn::Connection) -> Self {
        let s = conn.stats();
        Self {
            udp_sent: s.udp_tx.datagrams,
            udp_send_calls: s.udp_tx.ios,
            udp_received: s.udp_rx.datagrams,
            acks_sent: s.frame_tx.acks,
            acks_received: s.frame_rx.acks,
            datagrams_sent: s.frame_tx.datagram,
            datagrams_received: s.frame_rx.datagram,
        }
    }
}

/// Counters of one session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCounters {
    /// Flows open now.
    pub flows_open: usize,
    /// Flows open now that are sent redundantly (`[session] redundant_ports`, either end's).
    #[serde(default)]
    pub flows_redundant: usize,
    /// Packets of those flows sent once, where the scheduler placed them, because
    /// `[session] redundant_max_mbps` was reached.
    #[serde(default)]
    pub redundant_capped: u64,
    /// Flows opened since the session started (both ends).
    pub flows_total: u64,
    /// Application bytes written into the session.
    pub bytes_written: u64,
    /// Application bytes read out of the session.
    pub bytes_read: u64,
    /// Datagrams quinn refused as too large.
    pub datagrams_too_large: u64,
    /// Application datagrams (UDP) dropped before sending: longer than the session carries or
    /// than every path takes, or the send queue full.
    #[serde(default)]
    pub datagrams_dropped: u64,
    /// Application datagrams longer than every path took, sent cut into DATAGRAM_FRAGMENT
    /// pieces (only when the peer reassembles them).
    #[serde(default)]
    pub datagrams_split: u64,
    /// Datagrams that arrived in pieces and were put back together.
    #[serde(default)]
    pub datagrams_reassembled: u64,
    /// Other datagram send errors (connection gone).
    pub send_errors: u64,
    /// Received packets the session rejected.
    pub bad_packets: u64,
    /// Received packets refused whole, unacknowledged, because they would have left a flow
    /// holding too many separate pieces of its bytes or too many gaps among the peer's flows
    /// (the peer sends them again; an honest peer hardly ever meets the limits).
    #[serde(default)]
    pub packets_refused: u64,
    /// Paths joined (rejoins included).
    pub path_joins: u64,
    /// Stream bytes written and not yet acknowledged by the peer, all flows, now.
    #[serde(default)]
    pub send_buffered_bytes: u64,
    /// Stream bytes received and not yet read (in order or waiting to be reordered), now.
    #[serde(default)]
    pub receive_buffered_bytes: u64,
    /// Bytes the session's buffers and tables take now (`Session::memory_usage`).
    #[serde(default)]
    pub memory_bytes: u64,
    /// The largest receive window of the flows open now (flows' windows grow from the first
    /// window while their application keeps up: `[session] flow_receive_window_max_kib`).
    #[serde(default)]
    pub largest_flow_window: u64,
}

/// One session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionStatus {
    /// The session id, hex.
    pub session: String,
    /// The user.
    pub user: String,
    /// `client` or `server`.
    pub role: String,
    /// The scheduler's name.
    pub scheduler: String,
    /// The congestion controller of the paths this end sends on (`cubic`, `newreno`, `bbr`,
    /// `lia`, `olia`).
    #[serde(default)]
    pub congestion: String,
    /// The rate below which a busy primary path lets backup paths help with what this end
    /// sends, Mbit/s (`[session] backup_below_mbps`; on a server, the client's when its file
    /// sets the key; 0: backups only when no primary is live).
    #[serde(default)]
    pub backup_below_mbps: f64,
    /// Version of the learned model in use (learned schedulers only).
    pub model_version: Option<u64>,
    /// Seconds since the session started.
    pub uptime_s: f64,
    /// No data crossed the session for 10 s: its idle paths are checked once per
    /// `[session] keepalive_s` (`docs/config.md`, *Quiet sessions*).
    #[serde(default)]
    pub quiet: bool,
    /// The paths.
    pub paths: Vec<PathReport>,
    /// Counters.
    pub counters: SessionCounters,
}

/// BBR's view of a path: its phase and the model it paces by.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BbrReport {
    /// `Startup`, `Drain`, `ProbeBw` or `ProbeRtt`.
    pub mode: String,
    /// `BtlBw`, the bottleneck bandwidth it measured, Mbit/s.
    pub btl_bw_mbps: f64,
    /// `RTprop`, the propagation RTT it measured, ms (none before the first ACK).
    pub rt_prop_ms: Option<f64>,
    /// The rate it paces at, Mbit/s (none before the first ACK).
    pub pacing_mbps: Option<f64>,
}

impl BbrReport {
    /// The report of `cc`, when it is BBR.
    pub fn of(cc: &crate::session::congestion::AnyController) -> Option<BbrReport> {
        use crate::session::congestion::{AnyController, Controller};
        let AnyController::Bbr(bbr) = cc else {
            return None;
        };
        Some(BbrReport {
            mode: format!("{:?}", bbr.mode()),
            btl_bw_mbps: bbr.btl_bw() as f64 * 8.0 / 1e6,
            rt_prop_ms: bbr.rt_prop().map(|d| d.as_secs_f64() * 1e3),
            pacing_mbps: bbr.pacing_rate().map(|r| r as f64 * 8.0 / 1e6),
        })
    }
}

/// What a daemon's control endpoint answers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// `client` or `server`.
    pub role: String,
    /// braid's version.
    pub version: String,
    /// Joins refused since start (server).
    pub joins_refused: u64,
    /// Joins accepted since start (server).
    pub joins_accepted: u64,
    /// Joins refused since start, by reason (server; e.g. `bad user or proof`, `the user's
    /// session limit reached`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub joins_refused_by_reason: std::collections::BTreeMap<String, u64>,
    /// The addresses the server takes joins on (its file's `listen`, as reloads changed it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listen: Vec<String>,
    /// The sessions.
    pub sessions: Vec<SessionStatus>,
    /// The client's TUN inbound, when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tun: Option<TunStatus>,
    /// The client's links, joined or not (a link that cannot join shows why here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkStatus>,
    /// The client's `[[link]]` tables whose `interface` is a pattern, and the links they stand
    /// for now (a pattern no device matches shows here alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub link_patterns: Vec<LinkPatternStatus>,
    /// The client's SOCKS5 and HTTP CONNECT inbounds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inbounds: Vec<InboundStatus>,
    /// The server's users: their sessions and what their applications moved since the server
    /// started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<UserStatus>,
    /// The client's `[[route]]` tables, with what each has matched since the client started
    /// or a reload changed them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteStatus>,
    /// The client's `fallback = "direct"`, while it is set, with what it connected directly
    /// since the client started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackStatus>,
    /// The daemon's process: memory, CPU time, open files (absent where `/proc` is not
    /// readable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<crate::process::ProcessReport>,
}

/// One of the client's links.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkStatus {
    /// Its path id.
    pub path: u8,
    /// Its name.
    pub name: String,
    /// The server it connects to, as configured.
    pub server: String,
    /// `joined`, `joined as backup: budget spent`, `connecting`, `retry in N s`, `budget
    /// spent` or `no session` (between two sessions).
    pub state: String,
    /// Times it joined the session.
    pub joins: u64,
    /// Why its last attempt failed or its last connection closed.
    pub last_error: Option<String>,
    /// Its data budget, when it has one (`[[link]] budget_mib`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<LinkBudgetStatus>,
    /// Bytes its sockets sent on the network (datagrams with their IP and UDP headers, failed
    /// handshakes too) since the client started or the link was added or reconnected by a
    /// reload.
    #[serde(default)]
    pub sent_bytes: u64,
    /// Bytes its sockets received, counted so.
    #[serde(default)]
    pub received_bytes: u64,
}

/// A `[[link]]` table whose `interface` is a pattern of device names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkPatternStatus {
    /// The table's `name`.
    pub name: String,
    /// Its `interface` pattern.
    pub pattern: String,
    /// The links it stands for now (`NAME@DEVICE`), by device name.
    pub links: Vec<String>,
    /// Those of its devices left out (beyond the 16 links, or named as another link).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
}

/// One of the server's users (`[[user]]`, or one a reload removed that had sessions).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserStatus {
    /// The user's name.
    pub name: String,
    /// Sessions running now.
    pub sessions: u64,
    /// Sessions started since the server started.
    pub sessions_started: u64,
    /// Application bytes the server sent the user (written into the user's sessions: what its
    /// destinations answered), running and ended sessions, since the server started.
    pub download_bytes: u64,
    /// Application bytes the user sent (read out of its sessions), counted alike.
    pub upload_bytes: u64,
}

/// The client's `fallback = "direct"`: what it connected directly while no session took it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FallbackStatus {
    /// Stream flows (TCP connections).
    pub flows: u64,
    /// UDP datagrams.
    pub datagrams: u64,
}

/// One of the client's `[[route]]` tables.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteStatus {
    /// Its place in the file, from 0 (`route[0]`).
    pub index: u32,
    /// `server`, `direct` or `block`.
    pub action: String,
    /// What it matches, in short (`2 networks, 1 domain, ports 22`, `every destination`), and
    /// its interface.
    pub matches: String,
    /// Stream flows (TCP connections) and the TUN inbound's ping runs it decided.
    pub flows: u64,
    /// UDP datagrams it decided.
    pub datagrams: u64,
}

impl LinkStatus {
    /// Whether its path is in the session (as a backup too, for a spent budget).
    pub fn joined(&self) -> bool {
        self.state.starts_with("joined")
    }
}

/// Where a link's data budget stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkBudgetStatus {
    /// Bytes its datagrams took on the network in this period, both ways, with their headers.
    pub used_bytes: u64,
    /// The budget, bytes.
    pub budget_bytes: u64,
    /// When the period ends, seconds since the Unix epoch (UTC).
    pub period_end: u64,
    /// The host's offset from UTC then, seconds, for a budget in local time (shown so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_end_offset_s: Option<i64>,
}

/// One of the client's listening inbounds (SOCKS5, HTTP CONNECT): its connections since start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundStatus {
    /// `socks5` or `http`.
    pub name: String,
    /// The address it listens on.
    pub listen: String,
    /// The connections it serves at once, at most.
    pub limit: u64,
    /// Connections open now.
    pub open: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed at once because `limit` were open.
    pub refused: u64,
    /// Accepted connections the application broke off: reset by it, or gone when braid wrote
    /// to it (not counted in `failed`).
    #[serde(default)]
    pub reset: u64,
    /// Accepted connections that ended in an error: a request malformed, incomplete in time or
    /// not authenticated, a destination the server could not reach, a relay that failed.
    pub failed: u64,
    /// Plain `http://` requests answered by their server (the HTTP inbound; a connection may
    /// carry many).
    #[serde(default)]
    pub forwarded: u64,
    /// Of those, the requests sent over a flow (and server connection) kept from an earlier
    /// request.
    #[serde(default)]
    pub forwarded_kept: u64,
}

/// The TUN inbound's counters since start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunStatus {
    /// The device's name.
    pub device: String,
    /// TCP connections handed to a flow.
    pub tcp_connections: u64,
    /// SYNs dropped because too many connections were open.
    pub tcp_refused: u64,
    /// UDP datagrams sent into a flow.
    pub udp_datagrams: u64,
    /// UDP datagrams dropped.
    pub udp_dropped: u64,
    /// Other packets (ICMP but echo requests, fragments, other protocols), dropped.
    pub other_dropped: u64,
    /// ICMP echo requests sent into a ping flow.
    #[serde(default)]
    pub pings: u64,
    /// ICMP echo replies written to the device.
    #[serde(default)]
    pub ping_replies: u64,
    /// ICMP echo requests and replies dropped.
    #[serde(default)]
    pub pings_dropped: u64,
    /// Fragments of UDP datagrams and ICMP echo requests the application sent in pieces.
    #[serde(default)]
    pub fragments: u64,
    /// UDP datagrams and echo requests put back together from them.
    #[serde(default)]
    pub reassembled: u64,
    /// Of those fragments, dropped.
    #[serde(default)]
    pub fragments_dropped: u64,
    /// Reads of more than one segment (TCP and UDP segmentation offload).
    #[serde(default)]
    pub long_reads: u64,
    /// UDP datagrams cut from such reads.
    #[serde(default)]
    pub udp_cut: u64,
    /// TCP checksums checked by braid (segments forwarded from another host).
    #[serde(default)]
    pub checksums_checked: u64,
    /// Of those, wrong (the segment dropped).
    #[serde(default)]
    pub checksums_wrong: u64,
}

impl DaemonStatus {
    /// A human-readable table.
    pub fn to_table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = write!(
            out,
            "braid {} {} — {} session(s)",
            self.role,
            self.version,
            self.sessions.len()
        );
        // Joins are the server's to count.
        let _ = match self.role.as_str() {
            "server" => writeln!(
                out,
                ", joins accepted {}, refused {}{}",
                self.joins_accepted,
                self.joins_refused,
                if self.listen.is_empty() {
                    String::new()
                } else {
                    format!("; listening on {}", self.listen.join(", "))
                }
            ),
            _ => writeln!(out),
        };
        if !self.joins_refused_by_reason.is_empty() {
            let reasons: Vec<String> = self
                .joins_refused_by_reason
                .iter()
                .map(|(reason, n)| format!("{reason} {n}"))
                .collect();
            let _ = writeln!(out, "joins refused by reason: {}", reasons.join(", "));
        }
        for u in &self.users {
            let _ = writeln!(
                out,
                "user {}: {} session{} now, {} since start; {} down, {} up",
                u.name,
                u.sessions,
                if u.sessions == 1 { "" } else { "s" },
                u.sessions_started,
                super::budget::size(u.download_bytes),
                super::budget::size(u.upload_bytes)
            );
        }
        if let Some(p) = &self.process {
            let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
            let _ = write!(
                out,
                "process: resident {:.1} MiB, CPU {:.1} s, {} threads, {} of {} files open",
                mib(p.resident_bytes),
                p.cpu_seconds,
                p.threads,
                p.open_fds,
                p.max_fds
            );
            if let Some(free) = p.heap_free_bytes {
                let _ = write!(out, "; heap free {:.1} MiB", mib(free));
            }
            let _ = writeln!(
                out,
                ", {:.1} MiB given back in {} trims",
                mib(p.heap_returned_bytes),
                p.heap_trims
            );
        }
        for i in &self.inbounds {
            let _ = write!(
                out,
                "{} on {}: {} open (limit {}), {} accepted, {} refused at the limit, {} reset by \
                 the application, {} failed",
                i.name, i.listen, i.open, i.limit, i.accepted, i.refused, i.reset, i.failed
            );
            if i.forwarded > 0 {
                let _ = write!(
                    out,
                    "; {} http:// requests forwarded, {} over a kept connection",
                    i.forwarded, i.forwarded_kept
                );
            }
            out.push('\n');
        }
        if let Some(t) = &self.tun {
            let _ = writeln!(
                out,
                "TUN {}: {} TCP connections ({} refused), {} UDP datagrams ({} dropped), \
                 {} pings, {} replies ({} dropped), {} other packets dropped; {} UDP and ICMP fragments ({} dropped) made {} datagrams; offloads: {} long reads, {} UDP datagrams cut from \
                 them, {} TCP checksums checked ({} wrong)",
                t.device,
                t.tcp_connections,
                t.tcp_refused,
                t.udp_datagrams,
                t.udp_dropped,
                t.pings,
                t.ping_replies,
                t.pings_dropped,
                t.other_dropped,
                t.fragments,
                t.fragments_dropped,
                t.reassembled,
                t.long_reads,
                t.udp_cut,
                t.checksums_checked,
                t.checksums_wrong
            );
        }
        if !self.links.is_empty() {
            let _ = writeln!(
                out,
                "links:\n  {:<3} {:<10} {:<16} {:>5}  last error",
                "id", "link", "state", "joins"
            );
            for l in &self.links {
                let _ = writeln!(
                    out,
                    "  {:<3} {:<10} {:<16} {:>5}  {}",
                    l.path,
                    l.name,
                    l.state,
                    l.joins,
                    l.last_error.as_deref().unwrap_or("-")
                );
                let _ = writeln!(
                    out,
                    "      traffic: {} sent, {} received",
                    super::budget::size(l.sent_bytes),
                    super::budget::size(l.received_bytes)
                );
                if let Some(b) = &l.budget {
                    let _ = writeln!(out, "      data budget: {b}");
                }
            }
        }
        for p in &self.link_patterns {
            let links = if p.links.is_empty() {
                "no device up".to_owned()
            } else {
                p.links.join(", ")
            };
            let _ = write!(out, "link pattern {} ({}): {links}", p.name, p.pattern);
            if !p.left_out.is_empty() {
                let _ = write!(out, "; left out: {}", p.left_out.join(", "));
            }
            let _ = writeln!(out);
        }
        for r in &self.routes {
            let _ = writeln!(
                out,
                "route {} {} ({}): {} flows, {} datagrams",
                r.index, r.action, r.matches, r.flows, r.datagrams
            );
        }
        if let Some(f) = &self.fallback {
            let _ = writeln!(
                out,
                "fallback direct (while no session): {} flows, {} datagrams",
                f.flows, f.datagrams
            );
        }
        for s in &self.sessions {
            let c = &s.counters;
            let _ = writeln!(
                out,
                "\nsession {} user {} scheduler {}{} congestion {}{} up {:.0}s{}: flows {} open{} / {} total, written {} B, read {} B, datagrams dropped {}, split {}, reassembled {}, packets bad {}, refused {}\n  memory {} KiB ({} KiB to send, {} KiB received), largest flow window {} KiB",
                s.session,
                s.user,
                s.scheduler,
                s.model_version
                    .map(|v| format!(" (model v{v})"))
                    .unwrap_or_default(),
                s.congestion,
                if s.backup_below_mbps > 0.0 {
                    format!(" backups help below {:.1} Mb/s", s.backup_below_mbps)
                } else {
                    String::new()
                },
                s.uptime_s,
                if s.quiet { " (quiet)" } else { "" },
                c.flows_open,
                match (c.flows_redundant, c.redundant_capped) {
                    (0, 0) => String::new(),
                    (n, 0) => format!(" ({n} redundant)"),
                    (n, capped) => format!(
                        " ({n} redundant; {capped} packets of redundant flows sent once over the rate bound)"
                    ),
                },
                c.flows_total,
                c.bytes_written,
                c.bytes_read,
                c.datagrams_dropped,
                c.datagrams_split,
                c.datagrams_reassembled,
                c.bad_packets,
                c.packets_refused,
                c.memory_bytes / 1024,
                c.send_buffered_bytes / 1024,
                c.receive_buffered_bytes / 1024,
                c.largest_flow_window / 1024
            );
            let _ = writeln!(
                out,
                "  {:<3} {:<10} {:<8} {:>8} {:>8} {:>10} {:>9} {:>9} {:>7} {:>9}",
                "id",
                "link",
                "state",
                "srtt ms",
                "min ms",
                "cwnd",
                "send Mb/s",
                "recv Mb/s",
                "loss %",
                "lost pkts"
            );
            for p in &s.paths {
                let _ = writeln!(
                    out,
                    "  {:<3} {:<10} {:<8} {:>8.2} {:>8.2} {:>10} {:>9.2} {:>9.2} {:>7.2} {:>9}",
                    p.id,
                    p.name,
                    p.state,
                    p.srtt_ms,
                    p.min_rtt_ms,
                    p.cwnd,
                    p.send_mbps,
                    p.recv_mbps,
                    p.loss_rate * 100.0,
                    p.packets_lost
                );
                if p.potentially_failed {
                    let _ = writeln!(
                        out,
                        "      unanswered since a probe timeout: the link may be dark"
                    );
                }
                if !p.congestion.is_empty() && p.congestion != s.congestion {
                    let _ = writeln!(out, "      congestion {} (the link's own)", p.congestion);
                }
                if let Some(cap) = p.rate_cap_mbps {
                    let _ = writeln!(out, "      sending capped at {cap:.1} Mbit/s");
                }
                if p.spurious_losses > 0 {
                    let _ = writeln!(
                        out,
                        "      reorders: {} packets declared lost arrived late ({} window cuts \
                         undone); a packet is lost {} packets or RTT + {:.1} ms on",
                        p.spurious_losses, p.undone_reductions, p.packet_threshold, p.time_slack_ms
                    );
                }
                if p.degraded {
                    let _ = writeln!(
                        out,
                        "      busy below [session] backup_below_mbps: backup links help"
                    );
                }
                if p.penalties > 0 {
                    let _ = writeln!(
                        out,
                        "      window cut {} times: its queue held the flows back while a faster link had room",
                        p.penalties
                    );
                }
                if let Some(b) = &p.bbr {
                    let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
                    let _ = writeln!(
                        out,
                        "      bbr {}: bottleneck {:.2} Mb/s, RTprop {} ms, pacing {} Mb/s",
                        b.mode,
                        b.btl_bw_mbps,
                        ms(b.rt_prop_ms),
                        ms(b.pacing_mbps)
                    );
                }
                if let Some(c) = &p.coupled {
                    let _ = writeln!(
                        out,
                        "      {}: alpha {:.3} over {} path(s), loss interval {} B",
                        c.kind, c.alpha, c.paths, c.loss_interval_bytes
                    );
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_inbound_has_a_line_with_its_connections() {
        let status = DaemonStatus {
            role: "client".into(),
            version: "0".into(),
            inbounds: vec![
                InboundStatus {
                    name: "socks5".into(),
                    listen: "127.0.0.1:1080".into(),
                    limit: 1024,
                    open: 3,
                    accepted: 40,
                    refused: 5,
                    reset: 7,
                    failed: 2,
                    ..InboundStatus::default()
                },
                InboundStatus {
                    name: "http".into(),
                    listen: "127.0.0.1:8080".into(),
                    limit: 1024,
                    forwarded: 12,
                    forwarded_kept: 9,
                    ..InboundStatus::default()
                },
            ],
            ..DaemonStatus::default()
        };
        let table = status.to_table();
        assert!(
            table.contains(
                "\nsocks5 on 127.0.0.1:1080: 3 open (limit 1024), 40 accepted, 5 refused at the \
                 limit, 7 reset by the application, 2 failed\nhttp on 127.0.0.1:8080: 0 open \
                 (limit 1024), 0 accepted, 0 refused at the limit, 0 reset by the application, 0 \
                 failed; 12 http:// requests forwarded, 9 over a kept connection\n"
            ),
            "{table}"
        );
        let wire = serde_json::to_string(&status).unwrap();
        assert_eq!(serde_json::from_str::<DaemonStatus>(&wire).unwrap(), status);
    }

    #[test]
    fn a_path_says_when_it_may_be_dark_is_degraded_or_reorders() {
        let path = |id: u8| PathReport {
            id,
            name: format!("link{id}"),
            state: "active".into(),
            packet_threshold: 3,
            ..PathReport::default()
        };
        let mut status = DaemonStatus {
            role: "client".into(),
            version: "0".into(),
            sessions: vec![SessionStatus {
                paths: vec![path(0), path(1)],
                ..SessionStatus::default()
            }],
            ..DaemonStatus::default()
        };
        let plain = status.to_table();
        for line in [
            "unanswered since",
            "busy below",
            "reorders:",
            "backups help",
        ] {
            assert!(!plain.contains(line), "{plain}");
        }
        status.sessions[0].backup_below_mbps = 10.0;
        let p = &mut status.sessions[0].paths[1];
        p.potentially_failed = true;
        p.degraded = true;
        p.penalties = 4;
        p.spurious_losses = 11;
        p.undone_reductions = 6;
        p.packet_threshold = 22;
        p.time_slack_ms = 13.6;
        let table = status.to_table();
        assert!(
            table.contains(" backups help below 10.0 Mb/s up 0s"),
            "{table}"
        );
        let under_link1 = table.split_once("link1").unwrap().1;
        for line in [
            "unanswered since a probe timeout: the link may be dark",
            "busy below [session] backup_below_mbps: backup links help",
            "window cut 4 times: its queue held the flows back while a faster link had room",
            "reorders: 11 packets declared lost arrived late (6 window cuts undone); a packet \
             is lost 22 packets or RTT + 13.6 ms on",
        ] {
            assert!(under_link1.contains(line), "{table}");
        }
        let wire = serde_json::to_string(&status).unwrap();
        assert_eq!(serde_json::from_str::<DaemonStatus>(&wire).unwrap(), status);
    }

    #[test]
    fn the_tun_line_is_shown_and_optional_on_the_wire() {
        let mut status = DaemonStatus {
            role: "client".into(),
            version: "0".into(),
            ..DaemonStatus::default()
        };
        let plain = serde_json::to_string(&status).unwrap();
        assert!(
            !plain.contains("tun") && !plain.contains("links"),
            "{plain}"
        );
        assert!(!status.to_table().contains("TUN"));
        // A client counts no joins.
        assert!(
            status
                .to_table()
                .starts_with("braid client 0 — 0 session(s)\n")
        );
        assert!(!plain.contains("process") && !status.to_table().contains("process"));
        assert!(!plain.contains("inbounds") && !status.to_table().contains(" on "));
        // A status without the field (from an older daemon) still parses.
        assert_eq!(
            serde_json::from_str::<DaemonStatus>(&plain).unwrap(),
            status
        );
        status.tun = Some(TunStatus {
            device: "braid0".into(),
            tcp_connections: 3,
            tcp_refused: 1,
            udp_datagrams: 40,
            udp_dropped: 2,
            other_dropped: 5,
            pings: 6,
            ping_replies: 4,
            pings_dropped: 1,
            fragments: 9,
            reassembled: 3,
            fragments_dropped: 2,
            long_reads: 7,
            udp_cut: 30,
            checksums_checked: 11,
            checksums_wrong: 1,
        });
        let json = serde_json::to_string(&status).unwrap();
        assert_eq!(serde_json::from_str::<DaemonStatus>(&json).unwrap(), status);
        assert!(
            status.to_table().contains(
                "TUN braid0: 3 TCP connections (1 refused), 40 UDP datagrams (2 dropped), \
                 6 pings, 4 replies (1 dropped), 5 other packets dropped; 9 UDP and ICMP fragments (2 dropped) made 3 datagrams; offloads: 7 long reads, 30 UDP datagrams cut from \
                 them, 11 TCP checksums checked (1 wrong)"
            ),
            "{}",
            status.to_table()
        );
    }

    #[test]
    fn the_process_line_shows_memory_cpu_files_and_trims() {
        let mut status = DaemonStatus {
            role: "server".into(),
            version: "0".into(),
            process: Some(crate::process::ProcessReport {
                resident_bytes: 47 << 20,
                cpu_seconds: 12.25,
                threads: 3,
                open_fds: 14,
                max_fds: 1024,
                heap_free_bytes: Some(3 << 19),
                heap_trims: 2,
                heap_returned_bytes: 115 << 20,
                ..Default::default()
            }),
            ..DaemonStatus::default()
        };
        let table = status.to_table();
        assert!(
            table.starts_with("braid server 0 — 0 session(s), joins accepted 0, refused 0\n"),
            "{table}"
        );
        assert!(
            table.contains(
                "process: resident 47.0 MiB, CPU 12.2 s, 3 threads, 14 of 1024 files open; \
                 heap free 1.5 MiB, 115.0 MiB given back in 2 trims\n"
            ),
            "{table}"
        );
        let json = serde_json::to_string(&status).unwrap();
        assert_eq!(serde_json::from_str::<DaemonStatus>(&json).unwrap(), status);
        // Without glibc's figures the heap's free memory is left out.
        status.process.as_mut().unwrap().heap_free_bytes = None;
        assert!(
            status
                .to_table()
                .contains("files open, 115.0 MiB given back")
        );
        assert!(
            !serde_json::to_string(&status)
                .unwrap()
                .contains("heap_free")
        );
    }
}
