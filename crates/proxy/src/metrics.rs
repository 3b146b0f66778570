//! The daemons' metrics in the Prometheus text exposition format (version 0.0.4): what
//! `braid status` shows, as gauges and counters a Prometheus server scrapes from
//! `metrics_listen` (`GET /metrics`) or a node exporter's textfile collector reads from
//! `braid status --prometheus`. See `docs/cli.md` (the metric names) and `docs/config.md`
//! (`metrics_listen`).
//!
//! With `metrics_token` set, every request must carry `Authorization: Bearer TOKEN` (401
//! otherwise); without it the endpoint has no authentication. With `metrics_tls_cert` and
//! `metrics_tls_key` it speaks HTTPS (TLS 1.3 or 1.2), so the token and the figures do not
//! cross the network in clear; a plain HTTP request to it is answered 400 and told so, without
//! reading its headers. Otherwise it speaks plain HTTP. It names users and sessions, so it
//! belongs on loopback or a management network (the daemons warn when it listens elsewhere with
//! no token, or with a token in clear). It answers `GET` and
//! `HEAD` of `/metrics`, 404 for another path, 405 for another method and 400 for a request it
//! cannot read; the TLS handshake and request head must arrive whole within 5 s and 8 KiB of
//! head, a connection is closed
//! after 30 s whatever it does, and at most [`MAX_CONNECTIONS`] connections are served at once
//! (more are closed at once).

use std::fmt::Write as _;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::debug;

use crate::config::{MetricsTls, MetricsToken};
use crate::control::StatusSource;
use crate::transport::status::{DaemonStatus, PathReport, SessionStatus};

/// Connections served at once; more are closed unanswered.
pub const MAX_CONNECTIONS: usize = 16;
/// Longest request head read, bytes.
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// How long a request head may take to arrive.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may take in all, its answer read by the client included.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A sample's value: counters as exact integers, gauges as floats.
#[derive(Clone, Copy, Debug)]
enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// One sample: its labels and value.
type Sample = (Vec<(&'static str, String)>, Value);
/// A metric family read from each session or path: name, help, and the value of one.
type Family<T, V> = (&'static str, &'static str, fn(&T) -> V);

/// The text being written, one metric family at a time (a family's samples must be together).
struct Exposition {
    out: String,
}

impl Exposition {
    /// Writes family `name` with its samples; a family without samples is left out.
    fn family(&mut self, name: &str, kind: Kind, help: &str, samples: Vec<Sample>) {
        if samples.is_empty() {
            return;
        }
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            self.out.push_str(name);
            if !labels.is_empty() {
                self.out.push('{');
                for (i, (label, text)) in labels.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    let _ = write!(self.out, "{label}=\"");
                    escape_label(&mut self.out, text);
                    self.out.push('"');
                }
                self.out.push('}');
            }
            self.out.push(' ');
            match value {
                Value::Int(v) => {
                    let _ = write!(self.out, "{v}");
                }
                Value::Float(v) if v.is_nan() => self.out.push_str("NaN"),
                Value::Float(v) if v.is_infinite() => {
                    self.out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
                }
                Value::Float(v) => {
                    let _ = write!(self.out, "{v}");
                }
            }
            self.out.push('\n');
        }
    }
}

/// A label value as the format wants it: backslash, double quote and line feed escaped.
fn escape_label(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn session_labels(s: &SessionStatus) -> Vec<(&'static str, String)> {
    vec![("session", s.session.clone()), ("user", s.user.clone())]
}

fn path_labels(s: &SessionStatus, p: &PathReport) -> Vec<(&'static str, String)> {
    let mut labels = session_labels(s);
    labels.push(("path", p.id.to_string()));
    labels.push(("name", p.name.clone()));
    labels
}

/// Per-session samples of `value`.
fn per_session(status: &DaemonStatus, value: impl Fn(&SessionStatus) -> Value) -> Vec<Sample> {
    status
        .sessions
        .iter()
        .map(|s| (session_labels(s), value(s)))
        .collect()
}

/// Per-path samples of `value` (paths for which it gives `None` are left out).
fn per_path(status: &DaemonStatus, value: impl Fn(&PathReport) -> Option<Value>) -> Vec<Sample> {
    let mut samples = Vec::new();
    for s in &status.sessions {
        for p in &s.paths {
            if let Some(v) = value(p) {
                samples.push((path_labels(s, p), v));
            }
        }
    }
    samples
}

fn mbps_to_bits(mbps: f64) -> Value {
    Value::Float(mbps * 1e6)
}

fn ms_to_seconds(ms: f64) -> Value {
    Value::Float(ms / 1e3)
}

/// `status` in the text exposition format.
pub fn render(status: &DaemonStatus) -> String {
    use Kind::{Counter, Gauge};
    let mut e = Exposition { out: String::new() };
    let info = vec![
        ("role", status.role.clone()),
        ("version", status.version.clone()),
    ];
    e.family(
        "braid_info",
        Gauge,
        "This daemon: its role and braid's version (always 1).",
        vec![(info, Value::Int(1))],
    );
    e.family(
        "braid_sessions",
        Gauge,
        "Sessions running now.",
        vec![(Vec::new(), Value::Int(status.sessions.len() as u64))],
    );
    if status.role == "server" {
        e.family(
            "braid_joins_accepted_total",
            Counter,
            "Path joins accepted since the server started.",
            vec![(Vec::new(), status.joins_accepted.into())],
        );
        e.family(
            "braid_joins_refused_total",
            Counter,
            "Path joins refused since the server started.",
            vec![(Vec::new(), status.joins_refused.into())],
        );
        e.family(
            "braid_joins_refused_by_reason_total",
            Counter,
            "Path joins refused since the server started, by reason.",
            status
                .joins_refused_by_reason
                .iter()
                .map(|(reason, n)| (vec![("reason", reason.clone())], (*n).into()))
                .collect(),
        );
    }
    process_families(&mut e, status);
    session_families(&mut e, status);
    path_families(&mut e, status);
    link_and_tun_families(&mut e, status);
    inbound_families(&mut e, status);
    route_families(&mut e, status);
    user_families(&mut e, status);
    e.out
}

/// The server's users, labelled by name.
fn user_families(e: &mut Exposition, status: &DaemonStatus) {
    use Kind::{Counter, Gauge};
    type Field = fn(&crate::transport::status::UserStatus) -> u64;
    let families: [(&str, Kind, &str, Field); 4] = [
        (
            "braid_user_sessions",
            Gauge,
            "The user's sessions running now (server only).",
            |u| u.sessions,
        ),
        (
            "braid_user_sessions_total",
            Counter,
            "The user's sessions started since the server started (server only).",
            |u| u.sessions_started,
        ),
        (
            "braid_user_download_bytes_total",
            Counter,
            "Application bytes the server sent the user, running and ended sessions, since \
             the server started (server only).",
            |u| u.download_bytes,
        ),
        (
            "braid_user_upload_bytes_total",
            Counter,
            "Application bytes the user sent, counted alike (server only).",
            |u| u.upload_bytes,
        ),
    ];
    for (name, kind, help, field) in families {
        let samples = status
            .users
            .iter()
            .map(|u| (vec![("user", u.name.clone())], field(u).into()))
            .collect();
        e.family(name, kind, help, samples);
    }
}

/// The client's `[[route]]` tables, labelled by place in the file and action, and its
/// `fallback`.
fn route_families(e: &mut Exposition, status: &DaemonStatus) {
    type Field = fn(&crate::transport::RouteStatus) -> u64;
    let families: [(&str, &str, Field); 2] = [
        (
            "braid_route_flows_total",
            "Stream flows (TCP connections) and ping runs the route decided, since the client \
             started or a reload changed the routes (client only).",
            |r| r.flows,
        ),
        (
            "braid_route_datagrams_total",
            "UDP datagrams the route decided, counted alike (client only).",
            |r| r.datagrams,
        ),
    ];
    for (name, help, field) in families {
        let samples = status
            .routes
            .iter()
            .map(|r| {
                let labels = vec![("route", r.index.to_string()), ("action", r.action.clone())];
                (labels, field(r).into())
            })
            .collect();
        e.family(name, Kind::Counter, help, samples);
    }
    if let Some(f) = &status.fallback {
        e.family(
            "braid_fallback_flows_total",
            Kind::Counter,
            "Stream flows connected directly by fallback = \"direct\" while no session could \
             take them (client only, while it is set).",
            vec![(Vec::new(), f.flows.into())],
        );
        e.family(
            "braid_fallback_datagrams_total",
            Kind::Counter,
            "UDP datagrams sent directly so (client only, while it is set).",
            vec![(Vec::new(), f.datagrams.into())],
        );
    }
}

/// The client's SOCKS5 and HTTP CONNECT inbounds, labelled by inbound and address.
fn inbound_families(e: &mut Exposition, status: &DaemonStatus) {
    use Kind::{Counter, Gauge};
    type Field = fn(&crate::transport::InboundStatus) -> u64;
    let families: [(&str, Kind, &str, Field); 8] = [
        (
            "braid_inbound_connections_open",
            Gauge,
            "Connections the inbound serves now (client only).",
            |i| i.open,
        ),
        (
            "braid_inbound_connection_limit",
            Gauge,
            "Connections the inbound serves at once, at most (client only).",
            |i| i.limit,
        ),
        (
            "braid_inbound_connections_total",
            Counter,
            "Connections the inbound accepted (client only).",
            |i| i.accepted,
        ),
        (
            "braid_inbound_refused_total",
            Counter,
            "Connections closed at once because the inbound was at its limit (client only).",
            |i| i.refused,
        ),
        (
            "braid_inbound_reset_total",
            Counter,
            "Accepted connections the application broke off: reset by it, or gone when braid \
             wrote to it; not counted as failed (client only).",
            |i| i.reset,
        ),
        (
            "braid_inbound_failed_total",
            Counter,
            "Accepted connections that ended in an error: a bad, late or unauthenticated \
             request, an unreachable destination, a failed relay (client only).",
            |i| i.failed,
        ),
        (
            "braid_inbound_http_forwarded_total",
            Counter,
            "Plain http:// requests answered by their server (HTTP inbound; client only).",
            |i| i.forwarded,
        ),
        (
            "braid_inbound_http_forwarded_kept_total",
            Counter,
            "Forwarded http:// requests sent over a flow kept from an earlier request (client \
             only).",
            |i| i.forwarded_kept,
        ),
    ];
    for (name, kind, help, field) in families {
        let samples = status
            .inbounds
            .iter()
            .map(|i| {
                let labels = vec![("inbound", i.name.clone()), ("listen", i.listen.clone())];
                (labels, field(i).into())
            })
            .collect();
        e.family(name, kind, help, samples);
    }
}

/// The process: the standard `process_*` names of Prometheus's client libraries, and the
/// heap's trims (`crate::process`).
fn process_families(e: &mut Exposition, status: &DaemonStatus) {
    use Kind::{Counter, Gauge};
    let Some(p) = &status.process else {
        return;
    };
    let families: [(&str, Kind, &str, Value); 7] = [
        (
            "process_cpu_seconds_total",
            Counter,
            "Total user and system CPU time spent in seconds.",
            p.cpu_seconds.into(),
        ),
        (
            "process_resident_memory_bytes",
            Gauge,
            "Resident memory size in bytes.",
            p.resident_bytes.into(),
        ),
        (
            "process_virtual_memory_bytes",
            Gauge,
            "Virtual memory size in bytes.",
            p.virtual_bytes.into(),
        ),
        (
            "process_start_time_seconds",
            Gauge,
            "Start time of the process since unix epoch in seconds.",
            p.start_time_seconds.into(),
        ),
        (
            "process_open_fds",
            Gauge,
            "Number of open file descriptors.",
            p.open_fds.into(),
        ),
        (
            "process_max_fds",
            Gauge,
            "Maximum number of open file descriptors.",
            p.max_fds.into(),
        ),
        (
            "process_threads",
            Gauge,
            "Number of OS threads in the process.",
            p.threads.into(),
        ),
    ];
    for (name, kind, help, value) in families {
        e.family(name, kind, help, vec![(Vec::new(), value)]);
    }
    if let Some(free) = p.heap_free_bytes {
        e.family(
            "braid_heap_free_bytes",
            Gauge,
            "Heap memory the allocator holds free (glibc).",
            vec![(Vec::new(), free.into())],
        );
    }
    e.family(
        "braid_heap_trims_total",
        Counter,
        "Times free heap memory was given back to the system.",
        vec![(Vec::new(), p.heap_trims.into())],
    );
    e.family(
        "braid_heap_returned_bytes_total",
        Counter,
        "Resident bytes those trims gave back.",
        vec![(Vec::new(), p.heap_returned_bytes.into())],
    );
}

fn session_families(e: &mut Exposition, status: &DaemonStatus) {
    use Kind::{Counter, Gauge};
    let info = status
        .sessions
        .iter()
        .map(|s| {
            let mut labels = session_labels(s);
            labels.push(("scheduler", s.scheduler.clone()));
            labels.push(("congestion", s.congestion.clone()));
            (labels, Value::Int(1))
        })
        .collect();
    e.family(
        "braid_session_info",
        Gauge,
        "A session: its scheduler and congestion controller (always 1).",
        info,
    );
    e.family(
        "braid_session_uptime_seconds",
        Gauge,
        "Seconds since the session started.",
        per_session(status, |s| s.uptime_s.into()),
    );
    e.family(
        "braid_session_quiet",
        Gauge,
        "1 while no data crossed the session for 10 s (its idle paths checked once per keepalive_s).",
        per_session(status, |s| Value::Int(u64::from(s.quiet))),
    );
    let models = status
        .sessions
        .iter()
        .filter_map(|s| Some((session_labels(s), Value::Int(s.model_version?))))
        .collect();
    e.family(
        "braid_session_model_version",
        Gauge,
        "Version of the learned model the scheduler runs (learned schedulers only).",
        models,
    );
    e.family(
        "braid_session_flows_open",
        Gauge,
        "Flows open now.",
        per_session(status, |s| (s.counters.flows_open as u64).into()),
    );
    e.family(
        "braid_session_flows_redundant",
        Gauge,
        "Flows open now that are sent redundantly ([session] redundant_ports).",
        per_session(status, |s| (s.counters.flows_redundant as u64).into()),
    );
    let gauges: [Family<SessionStatus, u64>; 4] = [
        (
            "braid_session_send_buffered_bytes",
            "Stream bytes written and not yet acknowledged, all flows.",
            |s| s.counters.send_buffered_bytes,
        ),
        (
            "braid_session_receive_buffered_bytes",
            "Stream bytes received and not yet read, all flows.",
            |s| s.counters.receive_buffered_bytes,
        ),
        (
            "braid_session_memory_bytes",
            "Bytes the session's buffers and tables take.",
            |s| s.counters.memory_bytes,
        ),
        (
            "braid_session_largest_flow_window_bytes",
            "The largest receive window of the flows open.",
            |s| s.counters.largest_flow_window,
        ),
    ];
    let counters: [Family<SessionStatus, u64>; 12] = [
        (
            "braid_session_flows_total",
            "Flows opened (both ends).",
            |s| s.counters.flows_total,
        ),
        (
            "braid_session_redundant_capped_packets_total",
            "Packets of redundant flows sent once because [session] redundant_max_mbps was reached.",
            |s| s.counters.redundant_capped,
        ),
        (
            "braid_session_written_bytes_total",
            "Application bytes written into the session.",
            |s| s.counters.bytes_written,
        ),
        (
            "braid_session_read_bytes_total",
            "Application bytes read out of the session.",
            |s| s.counters.bytes_read,
        ),
        (
            "braid_session_datagrams_too_large_total",
            "Datagrams quinn refused as too large.",
            |s| s.counters.datagrams_too_large,
        ),
        (
            "braid_session_datagrams_dropped_total",
            "Application datagrams dropped before sending.",
            |s| s.counters.datagrams_dropped,
        ),
        (
            "braid_session_datagrams_split_total",
            "Application datagrams sent in DATAGRAM_FRAGMENT pieces.",
            |s| s.counters.datagrams_split,
        ),
        (
            "braid_session_datagrams_reassembled_total",
            "Datagrams that arrived in pieces and were put back together.",
            |s| s.counters.datagrams_reassembled,
        ),
        (
            "braid_session_send_errors_total",
            "Datagram send errors (connection gone).",
            |s| s.counters.send_errors,
        ),
        (
            "braid_session_bad_packets_total",
            "Received packets the session rejected.",
            |s| s.counters.bad_packets,
        ),
        (
            "braid_session_packets_refused_total",
            "Received packets refused whole for the reassembly limits.",
            |s| s.counters.packets_refused,
        ),
        (
            "braid_session_path_joins_total",
            "Paths joined, rejoins included.",
            |s| s.counters.path_joins,
        ),
    ];
    for (kind, families) in [(Gauge, &gauges[..]), (Counter, &counters[..])] {
        for (name, help, value) in families {
            e.family(name, kind, help, per_session(status, |s| value(s).into()));
        }
    }
}

fn path_families(e: &mut Exposition, status: &DaemonStatus) {
    use Kind::{Counter, Gauge};
    let mut info = Vec::new();
    for s in &status.sessions {
        for p in &s.paths {
            let mut labels = path_labels(s, p);
            labels.push(("state", p.state.clone()));
            labels.push(("remote", p.remote.clone()));
            labels.push(("congestion", p.congestion.clone()));
            info.push((labels, Value::Int(1)));
        }
    }
    e.family(
        "braid_path_info",
        Gauge,
        "A path: its state (active, backup, failed), peer address and congestion controller (always 1).",
        info,
    );
    let up = per_path(status, |p| Some(Value::Int(u64::from(p.state != "failed"))));
    e.family(
        "braid_path_up",
        Gauge,
        "1 while the path is usable, 0 while it is failed.",
        up,
    );
    let suspect = per_path(status, |p| {
        Some(Value::Int(u64::from(p.potentially_failed)))
    });
    e.family(
        "braid_path_potentially_failed",
        Gauge,
        "1 while a probe timeout on the live path is unanswered (the link may be dark; backup paths take over while no primary is live), else 0.",
        suspect,
    );
    let degraded = per_path(status, |p| Some(Value::Int(u64::from(p.degraded))));
    e.family(
        "braid_path_degraded",
        Gauge,
        "1 while the live path, kept busy, delivers less than [session] backup_below_mbps (backup paths help while no primary is live and not degraded), else 0.",
        degraded,
    );
    let gauges: [Family<PathReport, Option<Value>>; 12] = [
        ("braid_path_srtt_seconds", "Smoothed RTT.", |p| {
            Some(ms_to_seconds(p.srtt_ms))
        }),
        (
            "braid_path_loss_packet_threshold",
            "Loss detection's packet threshold (3; more on a path that reorders).",
            |p| Some(p.packet_threshold.into()),
        ),
        (
            "braid_path_loss_time_slack_seconds",
            "What loss detection's time threshold adds to the RTT (at least 1/8 of it; more on a path that reorders).",
            |p| Some(ms_to_seconds(p.time_slack_ms)),
        ),
        ("braid_path_rttvar_seconds", "RTT variation.", |p| {
            Some(ms_to_seconds(p.rttvar_ms))
        }),
        ("braid_path_min_rtt_seconds", "Smallest RTT seen.", |p| {
            Some(ms_to_seconds(p.min_rtt_ms))
        }),
        ("braid_path_cwnd_bytes", "Congestion window.", |p| {
            Some(p.cwnd.into())
        }),
        ("braid_path_in_flight_bytes", "Bytes in flight.", |p| {
            Some(p.bytes_in_flight.into())
        }),
        ("braid_path_loss_ratio", "Smoothed loss fraction.", |p| {
            Some(f64::from(p.loss_rate).into())
        }),
        (
            "braid_path_delivery_bits_per_second",
            "Delivery rate measured from ACKs.",
            |p| Some(mbps_to_bits(p.delivery_mbps)),
        ),
        (
            "braid_path_send_bits_per_second",
            "Bits sent per second over the last second.",
            |p| Some(mbps_to_bits(p.send_mbps)),
        ),
        (
            "braid_path_receive_bits_per_second",
            "Bits received per second over the last second.",
            |p| Some(mbps_to_bits(p.recv_mbps)),
        ),
        (
            "braid_path_max_datagram_bytes",
            "Largest datagram payload the path carries.",
            |p| Some(u64::from(p.max_datagram_size).into()),
        ),
    ];
    for (name, help, value) in gauges {
        e.family(name, Gauge, help, per_path(status, value));
    }
    let counters: [Family<PathReport, u64>; 13] = [
        ("braid_path_packets_sent_total", "Packets sent.", |p| {
            p.packets_sent
        }),
        (
            "braid_path_packets_received_total",
            "Packets received.",
            |p| p.packets_received,
        ),
        (
            "braid_path_packets_lost_total",
            "Packets declared lost.",
            |p| p.packets_lost,
        ),
        (
            "braid_path_spurious_losses_total",
            "Packets declared lost that were acknowledged afterwards (the link reorders; the loss thresholds grew).",
            |p| p.spurious_losses,
        ),
        (
            "braid_path_failures_total",
            "Times the path was declared failed.",
            |p| u64::from(p.failures),
        ),
        (
            "braid_path_penalties_total",
            "Window cuts because the path's queue held stream bytes back behind flow control while a faster path had room.",
            |p| p.penalties,
        ),
        (
            "braid_path_udp_datagrams_sent_total",
            "UDP datagrams the path's QUIC connection sent.",
            |p| p.quic.udp_sent,
        ),
        (
            "braid_path_udp_send_calls_total",
            "UDP send system calls (fewer than datagrams with GSO).",
            |p| p.quic.udp_send_calls,
        ),
        (
            "braid_path_udp_datagrams_received_total",
            "UDP datagrams the path's QUIC connection received.",
            |p| p.quic.udp_received,
        ),
        (
            "braid_path_quic_acks_sent_total",
            "QUIC ACK frames sent.",
            |p| p.quic.acks_sent,
        ),
        (
            "braid_path_quic_acks_received_total",
            "QUIC ACK frames received.",
            |p| p.quic.acks_received,
        ),
        (
            "braid_path_quic_datagrams_sent_total",
            "QUIC DATAGRAM frames (session packets) sent.",
            |p| p.quic.datagrams_sent,
        ),
        (
            "braid_path_quic_datagrams_received_total",
            "QUIC DATAGRAM frames received.",
            |p| p.quic.datagrams_received,
        ),
    ];
    for (name, help, value) in counters {
        e.family(
            name,
            Counter,
            help,
            per_path(status, |p| Some(value(p).into())),
        );
    }
    let bbr: [Family<PathReport, Option<Value>>; 3] = [
        (
            "braid_path_bbr_bottleneck_bits_per_second",
            "BBR's bottleneck bandwidth (BBR paths only).",
            |p| Some(mbps_to_bits(p.bbr.as_ref()?.btl_bw_mbps)),
        ),
        (
            "braid_path_bbr_rtprop_seconds",
            "BBR's propagation RTT (BBR paths only).",
            |p| Some(ms_to_seconds(p.bbr.as_ref()?.rt_prop_ms?)),
        ),
        (
            "braid_path_bbr_pacing_bits_per_second",
            "BBR's pacing rate (BBR paths only).",
            |p| Some(mbps_to_bits(p.bbr.as_ref()?.pacing_mbps?)),
        ),
    ];
    for (name, help, value) in bbr {
        e.family(name, Gauge, help, per_path(status, value));
    }
    let coupled: [Family<PathReport, Option<Value>>; 2] = [
        (
            "braid_path_coupled_alpha",
            "LIA's alpha or OLIA's alpha_r (LIA and OLIA paths only).",
            |p| Some(p.coupled.as_ref()?.alpha.into()),
        ),
        (
            "braid_path_coupled_loss_interval_bytes",
            "Bytes acknowledged between congestion events, OLIA's l (LIA and OLIA paths only).",
            |p| Some(p.coupled.as_ref()?.loss_interval_bytes.into()),
        ),
    ];
    for (name, help, value) in coupled {
        e.family(name, Gauge, help, per_path(status, value));
    }
}

fn link_and_tun_families(e: &mut Exposition, status: &DaemonStatus) {
    use Kind::{Counter, Gauge};
    let link_labels = |l: &crate::transport::status::LinkStatus| {
        vec![
            ("link", l.name.clone()),
            ("path", l.path.to_string()),
            ("server", l.server.clone()),
        ]
    };
    let joined = status
        .links
        .iter()
        .map(|l| (link_labels(l), Value::Int(u64::from(l.joined()))))
        .collect();
    e.family(
        "braid_link_joined",
        Gauge,
        "1 while the client's link is joined to the session (client only).",
        joined,
    );
    let joins = status
        .links
        .iter()
        .map(|l| (link_labels(l), l.joins.into()))
        .collect();
    e.family(
        "braid_link_joins_total",
        Counter,
        "Times the link joined the session (client only).",
        joins,
    );
    for (name, help, bytes) in [
        (
            "braid_link_sent_bytes_total",
            "Bytes the link's sockets sent, datagrams with their IP and UDP headers, since the client started or a reload replaced the link (client only).",
            (|l| l.sent_bytes) as fn(&crate::transport::status::LinkStatus) -> u64,
        ),
        (
            "braid_link_received_bytes_total",
            "Bytes the link's sockets received, counted alike (client only).",
            |l| l.received_bytes,
        ),
    ] {
        let samples = status
            .links
            .iter()
            .map(|l| (link_labels(l), bytes(l).into()))
            .collect();
        e.family(name, Counter, help, samples);
    }
    let budgets: Vec<_> = status
        .links
        .iter()
        .filter_map(|l| l.budget.map(|b| (link_labels(l), b)))
        .collect();
    e.family(
        "braid_link_budget_bytes",
        Gauge,
        "The link's data budget per period, bytes (client only, links with budget_mib).",
        budgets
            .iter()
            .map(|(labels, b)| (labels.clone(), b.budget_bytes.into()))
            .collect(),
    );
    e.family(
        "braid_link_budget_used_bytes",
        Gauge,
        "What the link's datagrams took on the network in this budget period, both ways, with \
         their IP and UDP headers, bytes (client only, links with budget_mib).",
        budgets
            .iter()
            .map(|(labels, b)| (labels.clone(), b.used_bytes.into()))
            .collect(),
    );
    let Some(tun) = &status.tun else {
        return;
    };
    let counters: [(&str, &str, u64); 15] = [
        (
            "braid_tun_tcp_connections_total",
            "TCP connections handed to a flow.",
            tun.tcp_connections,
        ),
        (
            "braid_tun_tcp_refused_total",
            "SYNs dropped because too many connections were open.",
            tun.tcp_refused,
        ),
        (
            "braid_tun_udp_datagrams_total",
            "UDP datagrams sent into a flow.",
            tun.udp_datagrams,
        ),
        (
            "braid_tun_udp_dropped_total",
            "UDP datagrams dropped.",
            tun.udp_dropped,
        ),
        (
            "braid_tun_other_dropped_total",
            "Other packets dropped (ICMP but echo requests, other protocols).",
            tun.other_dropped,
        ),
        (
            "braid_tun_pings_total",
            "ICMP echo requests sent into a ping flow.",
            tun.pings,
        ),
        (
            "braid_tun_ping_replies_total",
            "ICMP echo replies written to the device.",
            tun.ping_replies,
        ),
        (
            "braid_tun_pings_dropped_total",
            "ICMP echo requests and replies dropped.",
            tun.pings_dropped,
        ),
        (
            "braid_tun_fragments_total",
            "Fragments of UDP datagrams and ICMP echo requests the application sent in pieces.",
            tun.fragments,
        ),
        (
            "braid_tun_reassembled_total",
            "UDP datagrams and echo requests put back together from fragments.",
            tun.reassembled,
        ),
        (
            "braid_tun_fragments_dropped_total",
            "Fragments dropped.",
            tun.fragments_dropped,
        ),
        (
            "braid_tun_long_reads_total",
            "Reads of more than one segment (offloads).",
            tun.long_reads,
        ),
        (
            "braid_tun_udp_cut_total",
            "UDP datagrams cut from such reads.",
            tun.udp_cut,
        ),
        (
            "braid_tun_checksums_checked_total",
            "TCP checksums braid checked.",
            tun.checksums_checked,
        ),
        (
            "braid_tun_checksums_wrong_total",
            "Of those, wrong (the segment dropped).",
            tun.checksums_wrong,
        ),
    ];
    for (name, help, value) in counters {
        let labels = vec![("device", tun.device.clone())];
        e.family(name, Counter, help, vec![(labels, value.into())]);
    }
}

/// How the endpoint is reached now: the token it asks for (none: no authentication) and its
/// TLS identity (none: plain HTTP), each replaced when the daemon reloads its file. A change
/// applies from the next request or connection on.
#[derive(Debug, Default)]
pub struct MetricsAuth {
    token: RwLock<Option<MetricsToken>>,
    tls: RwLock<Option<MetricsTls>>,
}

impl MetricsAuth {
    /// Asks for `token`, when there is one, over TLS with `tls`, when there is one.
    pub fn new(token: Option<MetricsToken>, tls: Option<MetricsTls>) -> Arc<MetricsAuth> {
        Arc::new(MetricsAuth {
            token: RwLock::new(token),
            tls: RwLock::new(tls),
        })
    }

    /// Asks for `token` from the next request on; whether that changed the token.
    pub fn replace(&self, token: Option<MetricsToken>) -> bool {
        let mut current = self.token.write().unwrap_or_else(PoisonError::into_inner);
        let changed = *current != token;
        *current = token;
        changed
    }

    /// Serves the next connections over TLS with `tls` (none: plain HTTP); whether that changed
    /// anything (another file, or the same files holding another certificate or key).
    pub fn replace_tls(&self, tls: Option<MetricsTls>) -> bool {
        let mut current = self.tls.write().unwrap_or_else(PoisonError::into_inner);
        let changed = *current != tls;
        *current = tls;
        changed
    }

    /// The TLS acceptor for a connection accepted now, when the endpoint speaks HTTPS.
    fn acceptor(&self) -> Option<tokio_rustls::TlsAcceptor> {
        let tls = self.tls.read().unwrap_or_else(PoisonError::into_inner);
        tls.as_ref()
            .map(|t| tokio_rustls::TlsAcceptor::from(t.server_config()))
    }

    /// Whether the request with this head (request line and headers) may be answered: no
    /// token is set, or its first `Authorization` header is `Bearer` and the token.
    fn allows(&self, head: &[u8]) -> bool {
        let token = self.token.read().unwrap_or_else(PoisonError::into_inner);
        let Some(token) = token.as_ref() else {
            return true;
        };
        bearer_token(head).is_some_and(|presented| token.matches(presented))
    }
}

/// The credentials of the first `Authorization: Bearer` header of `head` (names and the scheme
/// compared case-insensitively, RFC 9110 §11.1, RFC 6750 §2.1).
fn bearer_token(head: &[u8]) -> Option<&[u8]> {
    let value = head.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(b"authorization")
            .then(|| &line[colon + 1..])
    })?;
    let value = value.trim_ascii();
    let space = value.iter().position(|&b| b == b' ')?;
    if !value[..space].eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    Some(value[space..].trim_ascii_start())
}

/// Serves the metrics of `source` on `listener` until the task is dropped, asking for the
/// token `auth` holds.
pub async fn serve(listener: TcpListener, source: StatusSource, auth: Arc<MetricsAuth>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer, slot) =
            crate::inbound::server::accept_with_slot(&listener, &permits).await;
        let Some(permit) = slot else {
            debug!(%peer, "metrics: too many connections, closed");
            drop(stream);
            continue;
        };
        let source = source.clone();
        let auth = auth.clone();
        tokio::spawn(async move {
            // A client that stops reading must not hold its slot for ever either.
            let answered = connection(stream, &source, &auth);
            match tokio::time::timeout(CONNECTION_TIMEOUT, answered).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(%peer, error = %e, "metrics request not answered"),
                Err(_) => debug!(%peer, "metrics connection timed out"),
            }
            drop(permit);
        });
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// `GET /metrics` (`head`: `HEAD /metrics`).
    Metrics { head: bool },
    /// Another path.
    NotFound,
    /// Another method.
    MethodNotAllowed,
    /// Not an HTTP/1 request line.
    Bad,
    /// A token is set and the request does not carry it.
    Unauthorized,
}

/// Reads the request line of `head` (the bytes up to the blank line).
fn parse_request(head: &[u8]) -> Request {
    let Ok(text) = std::str::from_utf8(head) else {
        return Request::Bad;
    };
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Request::Bad;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Request::Bad;
    }
    let path = target.split('?').next().unwrap_or(target);
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Request::MethodNotAllowed,
    };
    if path == "/metrics" {
        Request::Metrics { head }
    } else {
        Request::NotFound
    }
}

/// The first byte of a TLS handshake record (RFC 8446 §5.1): what a TLS client sends first.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Serves one accepted connection: over TLS when the endpoint speaks HTTPS now, where a
/// client speaking plain HTTP instead is answered 400 and told so.
async fn connection(
    stream: TcpStream,
    source: &StatusSource,
    auth: &MetricsAuth,
) -> std::io::Result<()> {
    // The handshake and the request head share one deadline.
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let Some(acceptor) = auth.acceptor() else {
        return answer(stream, deadline, source, auth).await;
    };
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout_at(deadline, stream.peek(&mut first))
        .await
        .map_err(|_| timed_out("TLS handshake"))??;
    if peeked == 1 && first[0] != TLS_HANDSHAKE_RECORD {
        return refuse_plain_http(stream, deadline).await;
    }
    let stream = tokio::time::timeout_at(deadline, acceptor.accept(stream))
        .await
        .map_err(|_| timed_out("TLS handshake"))??;
    answer(stream, deadline, source, auth).await
}

fn timed_out(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_owned())
}

/// Answers a plain HTTP request sent to the HTTPS endpoint: 400, saying so. The head is read
/// (not parsed, so no token is looked at) so that the answer is not lost to a reset.
async fn refuse_plain_http(mut stream: TcpStream, deadline: Instant) -> std::io::Result<()> {
    tokio::time::timeout_at(deadline, read_head(&mut stream))
        .await
        .map_err(|_| timed_out("request head"))??;
    let body = "this endpoint speaks HTTPS: ask for https://…/metrics\n";
    let response = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(end);
            return Ok(Some(buf));
        }
        if buf.len() > MAX_REQUEST_HEAD {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    deadline: Instant,
    source: &StatusSource,
    auth: &MetricsAuth,
) -> std::io::Result<()> {
    let head = tokio::time::timeout_at(deadline, read_head(&mut stream))
        .await
        .map_err(|_| timed_out("request head"))??;
    let mut request = head.as_deref().map_or(Request::Bad, parse_request);
    if request != Request::Bad && !head.as_deref().is_some_and(|h| auth.allows(h)) {
        request = Request::Unauthorized;
    }
    let (status, extra, body, head_only) = match request {
        Request::Metrics { head } => {
            let body = render(&source.collect().await);
            (
                "200 OK",
                format!("Content-Type: {CONTENT_TYPE}\r\n"),
                body,
                head,
            )
        }
        Request::NotFound => (
            "404 Not Found",
            String::new(),
            "not found: the metrics are at /metrics\n".to_owned(),
            false,
        ),
        Request::MethodNotAllowed => (
            "405 Method Not Allowed",
            "Allow: GET, HEAD\r\n".to_owned(),
            String::new(),
            false,
        ),
        Request::Unauthorized => (
            "401 Unauthorized",
            "WWW-Authenticate: Bearer realm=\"braid\"\r\n".to_owned(),
            "a bearer token is required: Authorization: Bearer TOKEN (metrics_token)\n".to_owned(),
            false,
        ),
        Request::Bad => ("400 Bad Request", String::new(), String::new(), false),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    if !head_only {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::process::ProcessReport;
    use crate::transport::status::{
        BbrReport, CoupledReport, InboundStatus, LinkStatus, SessionCounters, TunStatus,
    };

    fn status() -> DaemonStatus {
        let path = |id: u8, name: &str, state: &str| PathReport {
            id,
            name: name.to_owned(),
            remote: "127.0.0.1:4433".to_owned(),
            state: state.to_owned(),
            srtt_ms: 25.5,
            min_rtt_ms: 20.0,
            cwnd: 120_000,
            packets_sent: u64::MAX,
            send_mbps: 12.5,
            ..PathReport::default()
        };
        let mut wifi = path(0, "wifi", "active");
        wifi.potentially_failed = true;
        wifi.degraded = true;
        wifi.penalties = 3;
        wifi.coupled = Some(CoupledReport {
            kind: "olia".to_owned(),
            alpha: -0.25,
            paths: 2,
            loss_interval_bytes: 1_200_000,
        });
        let mut bbr = path(1, "lte \"2\"\\x", "failed");
        bbr.congestion = "bbr".to_owned();
        bbr.bbr = Some(BbrReport {
            mode: "ProbeBw".to_owned(),
            btl_bw_mbps: 20.0,
            rt_prop_ms: Some(40.0),
            pacing_mbps: None,
        });
        DaemonStatus {
            role: "client".to_owned(),
            version: "0.1.0".to_owned(),
            sessions: vec![SessionStatus {
                session: "00ff".to_owned(),
                user: "alice\nbob".to_owned(),
                role: "client".to_owned(),
                scheduler: "minrtt".to_owned(),
                congestion: "olia".to_owned(),
                backup_below_mbps: 0.0,
                model_version: None,
                uptime_s: 3.25,
                quiet: false,
                paths: vec![wifi, bbr],
                counters: SessionCounters {
                    bytes_written: 1 << 60,
                    largest_flow_window: 16 << 20,
                    ..SessionCounters::default()
                },
            }],
            links: vec![LinkStatus {
                path: 0,
                name: "wifi".to_owned(),
                server: "vps:4433".to_owned(),
                state: "joined".to_owned(),
                joins: 2,
                last_error: None,
                budget: Some(crate::transport::LinkBudgetStatus {
                    used_bytes: 5 << 20,
                    budget_bytes: 2 << 30,
                    period_end: 1_764_547_200,
                    period_end_offset_s: None,
                }),
                sent_bytes: 123_456,
                received_bytes: 7 << 30,
            }],
            tun: Some(TunStatus {
                device: "braid0".to_owned(),
                udp_dropped: 7,
                ..TunStatus::default()
            }),
            inbounds: vec![InboundStatus {
                name: "socks5".to_owned(),
                listen: "127.0.0.1:1080".to_owned(),
                limit: 1024,
                open: 3,
                accepted: 40,
                refused: 5,
                failed: 2,
                ..InboundStatus::default()
            }],
            routes: vec![crate::transport::RouteStatus {
                index: 1,
                action: "direct".to_owned(),
                matches: "1 network".to_owned(),
                flows: 9,
                datagrams: 31,
            }],
            fallback: Some(crate::transport::status::FallbackStatus {
                flows: 4,
                datagrams: 17,
            }),
            process: Some(ProcessReport {
                resident_bytes: 47 << 20,
                cpu_seconds: 12.5,
                start_time_seconds: 1.8e9,
                open_fds: 14,
                max_fds: 1024,
                heap_free_bytes: Some(3 << 20),
                heap_trims: 2,
                heap_returned_bytes: 120 << 20,
                ..ProcessReport::default()
            }),
            ..DaemonStatus::default()
        }
    }

    /// Checks the text against the format: every family's HELP and TYPE come once, before
    /// its samples, which are together; every sample line is `name{labels} value` with a
    /// number for value. Returns the samples as (name, labels text, value).
    fn parse(text: &str) -> Vec<(String, String, String)> {
        let mut typed: Vec<String> = Vec::new();
        let mut samples = Vec::new();
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(["counter", "gauge"].contains(&kind), "{line}");
                assert!(!typed.contains(&name.to_owned()), "{name} typed twice");
                typed.push(name.to_owned());
                current = name.to_owned();
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(
                value.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&value),
                "{line}"
            );
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => {
                    assert!(labels.ends_with('}'), "{line}");
                    (name, labels.trim_end_matches('}'))
                }
                None => (series, ""),
            };
            assert_eq!(name, current, "a sample outside its family: {line}");
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{name}"
            );
            samples.push((name.to_owned(), labels.to_owned(), value.to_owned()));
        }
        samples
    }

    fn value(samples: &[(String, String, String)], name: &str, labels: &str) -> String {
        samples
            .iter()
            .find(|(n, l, _)| n == name && l.contains(labels))
            .unwrap_or_else(|| panic!("no {name} with {labels}"))
            .2
            .clone()
    }

    #[test]
    fn the_status_renders_as_well_formed_families() {
        let text = render(&status());
        let samples = parse(&text);
        assert_eq!(value(&samples, "braid_info", "role=\"client\""), "1");
        assert_eq!(value(&samples, "braid_sessions", ""), "1");
        // Counters keep every digit; times are seconds, rates bits per second.
        assert_eq!(
            value(&samples, "braid_path_packets_sent_total", "path=\"0\""),
            u64::MAX.to_string()
        );
        assert_eq!(
            value(&samples, "braid_session_written_bytes_total", ""),
            (1u64 << 60).to_string()
        );
        assert_eq!(
            value(&samples, "braid_session_largest_flow_window_bytes", ""),
            "16777216"
        );
        assert_eq!(
            value(&samples, "braid_path_srtt_seconds", "name=\"wifi\""),
            "0.0255"
        );
        assert_eq!(
            value(&samples, "braid_path_send_bits_per_second", "path=\"0\""),
            "12500000"
        );
        assert_eq!(
            value(&samples, "braid_path_penalties_total", "path=\"0\""),
            "3"
        );
        for family in [
            "braid_path_up",
            "braid_path_potentially_failed",
            "braid_path_degraded",
        ] {
            assert_eq!(value(&samples, family, "path=\"0\""), "1", "{family}");
            assert_eq!(value(&samples, family, "path=\"1\""), "0", "{family}");
        }
        assert_eq!(
            value(&samples, "braid_session_info", "congestion=\"olia\""),
            "1"
        );
        assert_eq!(
            value(&samples, "braid_path_info", "congestion=\"bbr\""),
            "1"
        );
        // BBR's families hold only the BBR path, and only the values it has.
        assert_eq!(
            value(&samples, "braid_path_bbr_rtprop_seconds", "path=\"1\""),
            "0.04"
        );
        assert!(!text.contains("braid_path_bbr_pacing_bits_per_second"));
        assert_eq!(
            value(&samples, "braid_path_coupled_alpha", "path=\"0\""),
            "-0.25"
        );
        assert_eq!(
            value(
                &samples,
                "braid_path_coupled_loss_interval_bytes",
                "path=\"0\""
            ),
            "1200000"
        );
        assert!(
            !text.contains(
                "braid_path_coupled_alpha{session=\"00ff\",user=\"alice\\nbob\",path=\"1\""
            )
        );
        assert!(!text.contains("braid_session_model_version"));
        // A client has no join counters; its links and TUN device do show.
        assert!(!text.contains("braid_joins_accepted_total"));
        for (family, want) in [
            ("braid_link_joined", "1"),
            ("braid_link_budget_bytes", "2147483648"),
            ("braid_link_budget_used_bytes", "5242880"),
            ("braid_link_sent_bytes_total", "123456"),
            ("braid_link_received_bytes_total", "7516192768"),
        ] {
            assert_eq!(value(&samples, family, "link=\"wifi\""), want, "{family}");
        }
        assert_eq!(
            value(&samples, "braid_tun_udp_dropped_total", "device=\"braid0\""),
            "7"
        );
        // The inbounds' connections.
        let socks = "inbound=\"socks5\",listen=\"127.0.0.1:1080\"";
        assert_eq!(
            value(&samples, "braid_inbound_connections_open", socks),
            "3"
        );
        assert_eq!(
            value(&samples, "braid_inbound_connection_limit", socks),
            "1024"
        );
        assert_eq!(
            value(&samples, "braid_inbound_connections_total", socks),
            "40"
        );
        assert_eq!(value(&samples, "braid_inbound_refused_total", socks), "5");
        assert_eq!(value(&samples, "braid_inbound_failed_total", socks), "2");
        // The routes.
        let route = "route=\"1\",action=\"direct\"";
        assert_eq!(value(&samples, "braid_route_flows_total", route), "9");
        assert_eq!(value(&samples, "braid_route_datagrams_total", route), "31");
        assert_eq!(value(&samples, "braid_fallback_flows_total", ""), "4");
        assert_eq!(value(&samples, "braid_fallback_datagrams_total", ""), "17");
        // The process, under the names Prometheus's client libraries use.
        assert_eq!(value(&samples, "process_cpu_seconds_total", ""), "12.5");
        assert_eq!(
            value(&samples, "process_resident_memory_bytes", ""),
            (47u64 << 20).to_string()
        );
        assert_eq!(
            value(&samples, "process_start_time_seconds", ""),
            "1800000000"
        );
        assert_eq!(value(&samples, "process_open_fds", ""), "14");
        assert_eq!(value(&samples, "process_max_fds", ""), "1024");
        assert_eq!(
            value(&samples, "braid_heap_free_bytes", ""),
            (3u64 << 20).to_string()
        );
        assert_eq!(value(&samples, "braid_heap_trims_total", ""), "2");
        assert_eq!(
            value(&samples, "braid_heap_returned_bytes_total", ""),
            (120u64 << 20).to_string()
        );
        // Label values are escaped.
        assert!(text.contains("user=\"alice\\nbob\""), "{text}");
        assert!(text.contains("name=\"lte \\\"2\\\"\\\\x\""), "{text}");
    }

    #[test]
    fn a_server_with_no_session_still_says_what_it_is() {
        let status = DaemonStatus {
            role: "server".to_owned(),
            version: "0.1.0".to_owned(),
            joins_accepted: 3,
            users: vec![crate::transport::status::UserStatus {
                name: "bob".to_owned(),
                sessions: 0,
                sessions_started: 4,
                download_bytes: 9 << 20,
                upload_bytes: 12_345,
            }],
            ..DaemonStatus::default()
        };
        let samples = parse(&render(&status));
        assert_eq!(value(&samples, "braid_sessions", ""), "0");
        assert_eq!(value(&samples, "braid_joins_accepted_total", ""), "3");
        for (family, want) in [
            ("braid_user_sessions", "0"),
            ("braid_user_sessions_total", "4"),
            ("braid_user_download_bytes_total", "9437184"),
            ("braid_user_upload_bytes_total", "12345"),
        ] {
            assert_eq!(value(&samples, family, "user=\"bob\""), want, "{family}");
        }
        assert!(samples.iter().all(|(n, _, _)| !n.starts_with("braid_path")));
        // Without a process report (no /proc), no process families.
        assert!(samples.iter().all(|(n, _, _)| !n.starts_with("process_")));
    }

    #[test]
    fn request_lines_are_read_strictly() {
        let metrics = Request::Metrics { head: false };
        assert_eq!(parse_request(b"GET /metrics HTTP/1.1\r\nHost: x"), metrics);
        assert_eq!(parse_request(b"GET /metrics?x=1 HTTP/1.0"), metrics);
        assert_eq!(
            parse_request(b"HEAD /metrics HTTP/1.1"),
            Request::Metrics { head: true }
        );
        assert_eq!(parse_request(b"GET / HTTP/1.1"), Request::NotFound);
        assert_eq!(
            parse_request(b"POST /metrics HTTP/1.1"),
            Request::MethodNotAllowed
        );
        for bad in [
            &b"GET /metrics"[..],
            b"GET /metrics HTTP/1.1 extra",
            b"GET metrics HTTP/1.1",
            b"GET /metrics SPDY/3",
            b"\xff\xfe",
            b"",
        ] {
            assert_eq!(parse_request(bad), Request::Bad, "{bad:?}");
        }
    }

    #[test]
    fn a_set_token_must_come_as_the_first_authorization_bearer_header() {
        let open = MetricsAuth::new(None, None);
        assert!(open.allows(b"GET /metrics HTTP/1.1"));
        let token = "0123456789abcdef0123";
        let file = std::path::Path::new("c.toml");
        let auth = MetricsAuth::new(
            crate::config::metrics_token(file, Some(token)).unwrap(),
            None,
        );
        for (head, allowed) in [
            (&b"GET /metrics HTTP/1.1\r\nHost: x"[..], false),
            (b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer 0123456789abcdef0123", true),
            (b"GET /metrics HTTP/1.1\r\nauthorization:bearer   0123456789abcdef0123 ", true),
            (b"GET /metrics HTTP/1.1\r\nHost: x\r\nAUTHORIZATION: BEARER 0123456789abcdef0123\r\nAccept: */*", true),
            (b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer 0123456789abcdef012", false),
            (b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer 0123456789abcdef01234", false),
            (b"GET /metrics HTTP/1.1\r\nAuthorization: Basic 0123456789abcdef0123", false),
            (b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer0123456789abcdef0123", false),
            (b"GET /metrics HTTP/1.1\r\nX-Authorization: Bearer 0123456789abcdef0123", false),
            // The first Authorization header counts.
            (b"GET /metrics HTTP/1.1\r\nAuthorization: Bearer x\r\nAuthorization: Bearer 0123456789abcdef0123", false),
            // Not in the request line.
            (b"GET /metrics?Authorization: Bearer 0123456789abcdef0123 HTTP/1.1", false),
        ] {
            assert_eq!(auth.allows(head), allowed, "{}", String::from_utf8_lossy(head));
        }
        assert!(auth.replace(None));
        assert!(!auth.replace(None));
        assert!(auth.allows(b"GET /metrics HTTP/1.1"));
    }
}
