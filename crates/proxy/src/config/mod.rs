//! The daemons' TOML configuration files (`docs/config.md` documents every field): the raw
//! serde shapes with `deny_unknown_fields`, and their validation into [`ClientConfig`] and
//! [`ServerConfig`]. Every error names the file, the field path and what was expected; the
//! command line turns them into exit code 2.

pub(crate) mod client;
pub(crate) mod ipnet;
pub(crate) mod route;
mod server;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use braid_sched_core::{ParamError, SchedulerConfig, SchedulerKind};
use serde::Deserialize;

pub use client::{
    BudgetClock, BudgetPeriod, ClientConfig, DEFAULT_FAST_REJOIN, DEFAULT_TUN_MTU, LinkBudget,
    LinkConfig, ServerTrust, SocksUser, TunConfig, WhenSpent, parse_fingerprint,
};
pub use ipnet::IpNet;
pub use route::{DomainPattern, Route, RouteAction, shadowed};
pub use server::{
    DEFAULT_MAX_SESSIONS_PER_USER, EgressPolicy, MAX_LISTEN, PortRange, ServerConfig, UserEntry,
};

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML of the expected shape (unknown field, wrong type, missing field).
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: PathBuf,
        /// The TOML parser's message (it names the line, the key and what was expected).
        message: String,
    },
    /// A field holds a value that parses but cannot be used.
    #[error("{file}: {field}: expected {expected}, got {got}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// The field path, e.g. `link[1].server`.
        field: String,
        /// What is accepted.
        expected: String,
        /// The offending value, printed.
        got: String,
    },
}

/// A shortcut for building [`ConfigFileError::Invalid`].
pub(crate) fn invalid(
    file: &Path,
    field: impl Into<String>,
    expected: impl Into<String>,
    got: impl std::fmt::Display,
) -> ConfigFileError {
    ConfigFileError::Invalid {
        file: file.to_owned(),
        field: field.into(),
        expected: expected.into(),
        got: format!("{got:?}", got = got.to_string()),
    }
}

/// Reads `file` (at most [`braid_testbed::input::MAX_INPUT_FILE_BYTES`]).
fn read_text(file: &Path) -> Result<String, ConfigFileError> {
    use braid_testbed::input::{MAX_INPUT_FILE_BYTES, read_text_capped};
    read_text_capped(file, MAX_INPUT_FILE_BYTES).map_err(|source| ConfigFileError::Read {
        file: file.to_owned(),
        source,
    })
}

/// Reads `file` and parses it as `T`.
pub(crate) fn read_toml<T: for<'de> Deserialize<'de>>(file: &Path) -> Result<T, ConfigFileError> {
    let text = read_text(file)?;
    parse_toml(file, &text)
}

/// Parses `text` (the contents of `file`) as `T`.
pub(crate) fn parse_toml<T: for<'de> Deserialize<'de>>(
    file: &Path,
    text: &str,
) -> Result<T, ConfigFileError> {
    toml::from_str(text).map_err(|e| ConfigFileError::Parse {
        file: file.to_owned(),
        message: e.to_string().trim_end().to_owned(),
    })
}

/// `[scheduler]`: a name and optional parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScheduler {
    name: String,
    #[serde(default)]
    params: BTreeMap<String, f64>,
}

/// Validates `[scheduler]` (default: minrtt).
pub(crate) fn scheduler(
    file: &Path,
    raw: Option<&RawScheduler>,
) -> Result<SchedulerConfig, ConfigFileError> {
    let Some(raw) = raw else {
        return Ok(SchedulerConfig::new(SchedulerKind::MinRtt));
    };
    let names: Vec<&str> = SchedulerKind::ALL.iter().map(|k| k.name()).collect();
    let kind: SchedulerKind = raw.name.parse().map_err(|_| {
        invalid(
            file,
            "scheduler.name",
            format!("one of {}", names.join(", ")),
            &raw.name,
        )
    })?;
    // Learned schedulers get their shipped weights (and, with `torch`, online learning).
    let mut config = crate::train::daemon_scheduler_config(kind);
    for (name, &value) in &raw.params {
        let field = format!("scheduler.params.{name}");
        config.set(name, value).map_err(|e| match e {
            ParamError::Unknown {
                scheduler, known, ..
            } => {
                let expected = if known.is_empty() {
                    format!("no parameters (`{scheduler}` has none)")
                } else {
                    format!("a parameter of `{scheduler}` (one of: {known})")
                };
                invalid(file, "scheduler.params", expected, name)
            }
            ParamError::OutOfRange { expected, .. } => invalid(file, &field, expected, value),
        })?;
    }
    config.validate().map_err(|e| match e {
        ParamError::OutOfRange {
            name,
            value,
            expected,
        } => invalid(file, format!("scheduler.params.{name}"), expected, value),
        unknown => invalid(file, "scheduler.params", "known parameters", unknown),
    })?;
    Ok(config)
}

/// `[session]`: per-session limits shared by both daemons' files.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSession {
    /// Signed, so that a negative value is refused by name with its range.
    flow_receive_window_kib: Option<i64>,
    /// Signed, like the window.
    flow_receive_window_max_kib: Option<i64>,
    /// Signed, like the window.
    max_udp_payload: Option<i64>,
    /// The congestion controller of every path, by name.
    congestion: Option<String>,
    /// Signed, like the window.
    idle_timeout_s: Option<i64>,
    /// Signed, like the window.
    keepalive_s: Option<i64>,
    /// A float, checked by name with its range.
    backup_below_mbps: Option<f64>,
    /// Ports and `"FIRST-LAST"` ranges, checked by name.
    #[serde(default)]
    redundant_ports: Vec<toml::Value>,
    /// A float, checked by name with its range.
    redundant_max_mbps: Option<f64>,
}

/// The session limits a daemon's file sets (`[session]`, the same keys in both files).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// Each stream flow's first receive window, bytes (`flow_receive_window_kib`).
    pub flow_receive_window: u64,
    /// The most a flow's receive window grows to, bytes (`flow_receive_window_max_kib`; at
    /// least `flow_receive_window`).
    pub flow_receive_window_max: u64,
    /// The longest UDP payload carried, bytes (`max_udp_payload`): the session's
    /// `max_datagram_payload` less the longest SOCKS5 UDP header of an address.
    pub max_udp_payload: usize,
    /// The congestion controller of the paths this end sends on (`congestion`).
    pub congestion: crate::session::congestion::CongestionAlgorithm,
    /// How long a session outlives its last live path (`idle_timeout_s`).
    pub idle_timeout: std::time::Duration,
    /// How often an idle path of a quiet session sends a heartbeat (`keepalive_s`).
    pub keepalive: std::time::Duration,
    /// Bytes per second below which a busy primary path lets backup paths help
    /// (`backup_below_mbps`; 0: backups only when no primary is live). `None` where the file
    /// leaves the key out: 0 on this end, and a server takes the client's word for the
    /// session when it says one (a client that sets the key tells the server).
    pub backup_below: Option<u64>,
    /// The flows sent redundantly: their destination ports (`redundant_ports`) and the most
    /// bytes per second sent so (`redundant_max_mbps`).
    pub redundant: crate::session::RedundantFlows,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            flow_receive_window: crate::transport::DEFAULT_FLOW_RECEIVE_WINDOW,
            flow_receive_window_max: crate::transport::DEFAULT_FLOW_RECEIVE_WINDOW_MAX,
            max_udp_payload: DEFAULT_MAX_UDP_PAYLOAD,
            congestion: crate::session::congestion::CongestionAlgorithm::default(),
            idle_timeout: DEFAULT_SESSION_IDLE_TIMEOUT,
            keepalive: crate::session::config::DEFAULT_QUIET_HEARTBEAT_INTERVAL,
            backup_below: None,
            redundant: crate::session::RedundantFlows {
                ports: crate::session::PortSet::default(),
                max_rate: Some((DEFAULT_REDUNDANT_MAX_MBPS * 1e6 / 8.0) as u64),
            },
        }
    }
}

/// The default `[session] idle_timeout_s`: a session ends 30 s after its last live path.
pub const DEFAULT_SESSION_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Shortest and longest accepted `[session] idle_timeout_s`, seconds.
pub const SESSION_IDLE_TIMEOUT_S: std::ops::RangeInclusive<u64> = 5..=3600;

/// Shortest and longest accepted `[session] keepalive_s`, seconds: at most 25, well inside
/// the paths' QUIC idle timeout ([`crate::transport::quic::PATH_IDLE_TIMEOUT_MS`]).
pub const KEEPALIVE_S: std::ops::RangeInclusive<u64> = 1..=25;

/// Smallest and largest accepted `[session] flow_receive_window_kib` (64 KiB ..= 1 GiB, the
/// session's buffer limit).
pub const FLOW_RECEIVE_WINDOW_KIB: std::ops::RangeInclusive<u64> = 64..=(1 << 20);

/// The default `[session] max_udp_payload`, 1,472 bytes: the UDP payload of a 1,500-byte IPv4
/// packet.
pub const DEFAULT_MAX_UDP_PAYLOAD: usize =
    crate::session::config::DEFAULT_MAX_DATAGRAM_PAYLOAD - crate::inbound::socks5::MAX_REPLY;

/// Smallest and largest accepted `[session] max_udp_payload`, bytes: from QUIC's smallest
/// packet (1,200 bytes: HTTP/3 must cross) to what eight pieces carry on a path that has just
/// joined (8,922 bytes: [`crate::session::config::LONGEST_FRAGMENTED_DATAGRAM`] less the SOCKS5
/// header).
pub const MAX_UDP_PAYLOAD: std::ops::RangeInclusive<usize> = 1200
    ..=(crate::session::config::LONGEST_FRAGMENTED_DATAGRAM - crate::inbound::socks5::MAX_REPLY);

/// Largest accepted `[session] backup_below_mbps` and `redundant_max_mbps`, Mbit/s (as a
/// link's `rate_cap_mbps`).
pub const BACKUP_BELOW_MBPS_MAX: f64 = 100_000.0;

/// `[session] redundant_max_mbps` where the file leaves it out: 10 Mbit/s, far above a call's or
/// a game's rate, so a port list that catches bulk traffic (or a client marking its flows
/// freely) costs each extra link at most that.
pub const DEFAULT_REDUNDANT_MAX_MBPS: f64 = 10.0;

/// Validates `[session]`: the per-flow receive window, the longest UDP payload, the
/// congestion controller, the idle timeout, the keepalive and the backups' floor.
pub(crate) fn session_limits(
    file: &Path,
    raw: &RawSession,
) -> Result<SessionLimits, ConfigFileError> {
    let window_kib = |field: &str, kib: i64, least: u64| match u64::try_from(kib) {
        Ok(kib) if kib >= least && FLOW_RECEIVE_WINDOW_KIB.contains(&kib) => Ok(kib * 1024),
        _ => Err(invalid(
            file,
            format!("session.{field}"),
            format!("KiB in {least}..={}", FLOW_RECEIVE_WINDOW_KIB.end()),
            kib,
        )),
    };
    let flow_receive_window = match raw.flow_receive_window_kib {
        None => crate::transport::DEFAULT_FLOW_RECEIVE_WINDOW,
        Some(kib) => window_kib(
            "flow_receive_window_kib",
            kib,
            *FLOW_RECEIVE_WINDOW_KIB.start(),
        )?,
    };
    // Unset, the window grows to the default largest, or not at all from a larger first one.
    let flow_receive_window_max = match raw.flow_receive_window_max_kib {
        None => crate::transport::DEFAULT_FLOW_RECEIVE_WINDOW_MAX.max(flow_receive_window),
        Some(kib) => window_kib(
            "flow_receive_window_max_kib",
            kib,
            (flow_receive_window / 1024).max(*FLOW_RECEIVE_WINDOW_KIB.start()),
        )?,
    };
    let max_udp_payload = match raw.max_udp_payload {
        None => DEFAULT_MAX_UDP_PAYLOAD,
        Some(bytes) => match usize::try_from(bytes) {
            Ok(bytes) if MAX_UDP_PAYLOAD.contains(&bytes) => bytes,
            _ => {
                return Err(invalid(
                    file,
                    "session.max_udp_payload",
                    format!(
                        "bytes in {}..={}",
                        MAX_UDP_PAYLOAD.start(),
                        MAX_UDP_PAYLOAD.end()
                    ),
                    bytes,
                ));
            }
        },
    };
    let congestion = match &raw.congestion {
        None => crate::session::congestion::CongestionAlgorithm::default(),
        Some(name) => name.parse().map_err(|_| {
            invalid(
                file,
                "session.congestion",
                "\"cubic\", \"newreno\", \"bbr\", \"lia\" or \"olia\"",
                name,
            )
        })?,
    };
    let seconds = |field: &str, value: Option<i64>, range: std::ops::RangeInclusive<u64>| {
        value.map_or(Ok(None), |s| match u64::try_from(s) {
            Ok(s) if range.contains(&s) => Ok(Some(std::time::Duration::from_secs(s))),
            _ => Err(invalid(
                file,
                format!("session.{field}"),
                format!("seconds in {}..={}", range.start(), range.end()),
                s,
            )),
        })
    };
    let idle_timeout = seconds("idle_timeout_s", raw.idle_timeout_s, SESSION_IDLE_TIMEOUT_S)?
        .unwrap_or(DEFAULT_SESSION_IDLE_TIMEOUT);
    let keepalive = seconds("keepalive_s", raw.keepalive_s, KEEPALIVE_S)?
        .unwrap_or(crate::session::config::DEFAULT_QUIET_HEARTBEAT_INTERVAL);
    // A rate in Mbit/s as bytes per second.
    let rate = |field: &str, value: Option<f64>| match value {
        None => Ok(None),
        Some(mbps) if mbps.is_finite() && (0.0..=BACKUP_BELOW_MBPS_MAX).contains(&mbps) => {
            Ok(Some((mbps * 1e6 / 8.0).round() as u64))
        }
        Some(mbps) => Err(invalid(
            file,
            format!("session.{field}"),
            "a rate in [0, 100000] Mbit/s",
            mbps,
        )),
    };
    let backup_below = rate("backup_below_mbps", raw.backup_below_mbps)?;
    let redundant_max = rate(
        "redundant_max_mbps",
        Some(raw.redundant_max_mbps.unwrap_or(DEFAULT_REDUNDANT_MAX_MBPS)),
    )?;
    let redundant_ports = port_ranges(
        file,
        "session.redundant_ports",
        crate::session::config::MAX_PORT_RANGES,
        &raw.redundant_ports,
    )?;
    Ok(SessionLimits {
        flow_receive_window,
        flow_receive_window_max,
        max_udp_payload,
        congestion,
        idle_timeout,
        keepalive,
        backup_below,
        redundant: crate::session::RedundantFlows {
            // At most `MAX_PORT_RANGES`, checked above.
            ports: crate::session::PortSet::new(redundant_ports).unwrap_or_default(),
            max_rate: redundant_max,
        },
    })
}

/// A list of networks `NETWORK/PREFIX` with no host bits set, or single addresses (at most
/// `max`); an error names the entry (`field[i]`).
pub(crate) fn networks(
    file: &Path,
    field: &str,
    max: usize,
    raw: &[String],
) -> Result<Vec<IpNet>, ConfigFileError> {
    if raw.len() > max {
        return Err(invalid(
            file,
            field,
            format!("at most {max} networks"),
            raw.len(),
        ));
    }
    raw.iter()
        .enumerate()
        .map(|(i, text)| {
            let net = match text.parse::<std::net::IpAddr>() {
                Ok(addr) => Some(IpNet {
                    addr,
                    prefix: if addr.is_ipv4() { 32 } else { 128 },
                }),
                Err(_) => text.parse::<IpNet>().ok().filter(IpNet::is_network),
            };
            net.ok_or_else(|| {
                invalid(
                    file,
                    format!("{field}[{i}]"),
                    "a network NETWORK/PREFIX with no host bits set (e.g. \"203.0.113.0/24\") \
                     or an address",
                    text,
                )
            })
        })
        .collect()
}

/// A list of ports 1..=65535 and ranges `"FIRST-LAST"` (at most `max` entries) as inclusive
/// ranges; an error names the entry (`field[i]`).
pub(crate) fn port_ranges(
    file: &Path,
    field: &str,
    max: usize,
    raw: &[toml::Value],
) -> Result<Vec<(u16, u16)>, ConfigFileError> {
    if raw.len() > max {
        return Err(invalid(
            file,
            field,
            format!("at most {max} ports or ranges"),
            raw.len(),
        ));
    }
    let port = |text: &str| {
        text.parse::<u16>()
            .ok()
            .filter(|&p| p > 0 && text.bytes().all(|b| b.is_ascii_digit()))
    };
    raw.iter()
        .enumerate()
        .map(|(i, value)| {
            let range = match value {
                toml::Value::Integer(n) => {
                    u16::try_from(*n).ok().filter(|&p| p > 0).map(|p| (p, p))
                }
                toml::Value::String(text) => text
                    .split_once('-')
                    .and_then(|(a, b)| Some((port(a)?, port(b)?)))
                    .filter(|(a, b)| a <= b),
                _ => None,
            };
            range.ok_or_else(|| {
                invalid(
                    file,
                    format!("{field}[{i}]"),
                    "a port 1..=65535 or a range \"FIRST-LAST\" (e.g. 25 or \"6881-6889\")",
                    value,
                )
            })
        })
        .collect()
}

/// Parses a socket address field (`ip:port`, IPv6 in brackets).
pub(crate) fn socket_addr(
    file: &Path,
    field: &str,
    value: &str,
) -> Result<SocketAddr, ConfigFileError> {
    value
        .parse()
        .map_err(|_| invalid(file, field, "ip:port (IPv6 as [addr]:port)", value))
}

/// A field that names one address or a list of 1 to `max` (`listen`, a link's `server`): each
/// checked by `parse` (given its field name, `field` or `field[i]`, and its text), none twice
/// unless `may_repeat` says so; `expected` names one entry's form in the errors.
pub(crate) fn one_or_list<T: PartialEq>(
    file: &Path,
    field: &str,
    raw: &toml::Value,
    max: usize,
    expected: &str,
    parse: impl Fn(&str, &str) -> Result<T, ConfigFileError>,
    may_repeat: impl Fn(&T) -> bool,
) -> Result<Vec<T>, ConfigFileError> {
    let list = match raw {
        toml::Value::String(one) => return Ok(vec![parse(field, one)?]),
        toml::Value::Array(list) if !list.is_empty() && list.len() <= max => list,
        toml::Value::Array(list) => {
            return Err(invalid(
                file,
                field,
                format!("1 to {max} addresses"),
                format!("{} addresses", list.len()),
            ));
        }
        other => {
            return Err(invalid(
                file,
                field,
                format!("{expected}, or a list of them"),
                other,
            ));
        }
    };
    let mut entries: Vec<T> = Vec::with_capacity(list.len());
    for (i, value) in list.iter().enumerate() {
        let entry_field = format!("{field}[{i}]");
        let entry = match value {
            toml::Value::String(text) => parse(&entry_field, text)?,
            other => return Err(invalid(file, entry_field, expected, other)),
        };
        if !may_repeat(&entry) && entries.contains(&entry) {
            return Err(invalid(
                file,
                entry_field,
                "an address not listed before",
                value,
            ));
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// Checks a `host:port` field (a name or address; the port must be 1..=65535).
pub(crate) fn host_port(file: &Path, field: &str, value: &str) -> Result<String, ConfigFileError> {
    let bad = || invalid(file, field, "host:port", value);
    if let Ok(address) = value.parse::<SocketAddr>() {
        return if address.port() == 0 {
            Err(bad())
        } else {
            Ok(value.to_owned())
        };
    }
    let (host, port) = value.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
    if port == 0 || !host_ok {
        return Err(bad());
    }
    Ok(value.to_owned())
}

/// The bearer token the metrics endpoint asks for (`metrics_token`): a request must carry
/// `Authorization: Bearer TOKEN`. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct MetricsToken(std::sync::Arc<str>);

impl MetricsToken {
    /// `value` as a token: [`METRICS_TOKEN_LENGTH`] characters of a bearer token (RFC 6750:
    /// letters, digits, `-._~+/`, then `=` padding); or why not, without the value.
    pub fn new(value: &str) -> Result<MetricsToken, String> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "-._~+/".contains(c);
        let body = value.trim_end_matches('=');
        if !METRICS_TOKEN_LENGTH.contains(&value.len()) {
            return Err(format!("{} characters", value.chars().count()));
        }
        if let Some(position) = body.chars().position(|c| !allowed(c)) {
            return Err(format!(
                "a character not allowed at position {}",
                position + 1
            ));
        }
        if body.is_empty() {
            return Err("only padding".to_owned());
        }
        Ok(MetricsToken(value.into()))
    }

    /// Whether `presented` is this token, compared in constant time.
    pub fn matches(&self, presented: &[u8]) -> bool {
        crate::tls::constant_time_eq(self.0.as_bytes(), presented)
    }
}

impl std::fmt::Debug for MetricsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsToken(<redacted>)")
    }
}

/// Shortest and longest `metrics_token`, characters.
pub const METRICS_TOKEN_LENGTH: std::ops::RangeInclusive<usize> = 16..=512;

/// Checks a `metrics_token` ([`MetricsToken::new`]); an error never shows the value.
pub(crate) fn metrics_token(
    file: &Path,
    value: Option<&str>,
) -> Result<Option<MetricsToken>, ConfigFileError> {
    let expected = "16 to 512 characters: letters, digits, - . _ ~ + / and = at the end \
                    (e.g. the output of `openssl rand -hex 32`)";
    value
        .map(|v| {
            MetricsToken::new(v).map_err(|why| {
                invalid(
                    file,
                    "metrics_token",
                    expected,
                    format!("<redacted>, {why}"),
                )
            })
        })
        .transpose()
}

/// The metrics endpoint's TLS identity (`metrics_tls_cert`, `metrics_tls_key`): the PEM files
/// are read with the configuration file, at start and at each reload, so a renewed certificate
/// is taken up by a reload. Two are equal when they name the same files holding the same
/// certificates and key. Its `Debug` shows the files and the certificate's fingerprint, never
/// the key.
#[derive(Clone)]
pub struct MetricsTls {
    /// The certificate chain's file.
    pub cert_file: PathBuf,
    /// The private key's file.
    pub key_file: PathBuf,
    /// The end-entity certificate's SHA-256 fingerprint.
    pub fingerprint: String,
    /// SHA-256 over the chain and the key, for comparing one reading with the next.
    digest: [u8; 32],
    server: std::sync::Arc<rustls::ServerConfig>,
}

impl MetricsTls {
    /// Reads the certificate chain (PEM, the endpoint's certificate first) and its private key
    /// (PEM: PKCS#8, PKCS#1 or SEC1); errors name `file`, the setting and the file read.
    pub fn read(
        file: &Path,
        cert_file: &Path,
        key_file: &Path,
    ) -> Result<MetricsTls, ConfigFileError> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let cert_expected = "a readable PEM file of certificates, the endpoint's first";
        let bad_cert = |why: &dyn std::fmt::Display| {
            invalid(
                file,
                "metrics_tls_cert",
                cert_expected,
                format!("{}: {why}", cert_file.display()),
            )
        };
        let pem = read_pem(cert_file).map_err(|e| bad_cert(&e))?;
        let chain = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad_cert(&e))?;
        let Some(leaf) = chain.first() else {
            return Err(bad_cert(&"no CERTIFICATE block"));
        };
        let fingerprint = crate::tls::fingerprint(leaf);
        let bad_key = |why: &dyn std::fmt::Display| {
            invalid(
                file,
                "metrics_tls_key",
                "a readable PEM file with the private key of metrics_tls_cert's first \
                 certificate (PKCS#8, PKCS#1 or SEC1)",
                format!("{}: {why}", key_file.display()),
            )
        };
        let pem = read_pem(key_file).map_err(|e| bad_key(&e))?;
        let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| bad_key(&e))?;
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        for cert in &chain {
            digest.update(&(cert.len() as u64).to_le_bytes());
            digest.update(cert);
        }
        digest.update(key.secret_der());
        let mut sum = [0u8; 32];
        sum.copy_from_slice(digest.finish().as_ref());
        let server = crate::tls::metrics_crypto(chain, key).map_err(|e| match e {
            crate::tls::TlsError::Rustls(rustls::Error::InconsistentKeys(_)) => {
                bad_key(&"the key of another certificate")
            }
            e => bad_key(&e),
        })?;
        Ok(MetricsTls {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            fingerprint,
            digest: sum,
            server: std::sync::Arc::new(server),
        })
    }

    /// The rustls configuration that serves it.
    pub fn server_config(&self) -> std::sync::Arc<rustls::ServerConfig> {
        self.server.clone()
    }
}

impl PartialEq for MetricsTls {
    fn eq(&self, other: &MetricsTls) -> bool {
        self.cert_file == other.cert_file
            && self.key_file == other.key_file
            && self.digest == other.digest
    }
}

impl std::fmt::Debug for MetricsTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsTls")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// The longest PEM file `metrics_tls_cert` and `metrics_tls_key` may name.
pub const MAX_PEM_FILE: u64 = 1 << 20;

/// The bytes of `path`, a regular file of at most [`MAX_PEM_FILE`] bytes (not a device or a
/// pipe, which could be read for ever).
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    if meta.len() > MAX_PEM_FILE {
        return Err(format!("{} bytes, more than {MAX_PEM_FILE}", meta.len()));
    }
    std::fs::read(path).map_err(|e| e.to_string())
}

/// The metrics endpoint's settings, the same keys in both files: `metrics_listen`,
/// `metrics_token`, and `metrics_tls_cert` with `metrics_tls_key`.
pub(crate) type MetricsSettings = (Option<SocketAddr>, Option<MetricsToken>, Option<MetricsTls>);

/// Checks the metrics endpoint's settings ([`MetricsSettings`]); every error names its key.
pub(crate) fn metrics_settings(
    file: &Path,
    listen: Option<&str>,
    token: Option<&str>,
    tls_cert: Option<&Path>,
    tls_key: Option<&Path>,
) -> Result<MetricsSettings, ConfigFileError> {
    let listen = listen
        .map(|s| socket_addr(file, "metrics_listen", s))
        .transpose()?;
    let token = metrics_token(file, token)?;
    let tls = metrics_tls(file, tls_cert, tls_key, listen.is_some())?;
    Ok((listen, token, tls))
}

/// Reads `metrics_tls_cert` and `metrics_tls_key` (given together, and only with a
/// `metrics_listen`); every error names the setting and the file.
pub(crate) fn metrics_tls(
    file: &Path,
    cert: Option<&Path>,
    key: Option<&Path>,
    listen: bool,
) -> Result<Option<MetricsTls>, ConfigFileError> {
    let (cert_file, key_file) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(c), Some(k)) => (c, k),
        (Some(_), None) => {
            return Err(invalid(
                file,
                "metrics_tls_key",
                "a PEM private key file, set together with metrics_tls_cert",
                "(not set)",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                file,
                "metrics_tls_cert",
                "a PEM certificate file, set together with metrics_tls_key",
                "(not set)",
            ));
        }
    };
    if !listen {
        return Err(invalid(
            file,
            "metrics_tls_cert",
            "metrics_listen set too (the certificate is the metrics endpoint's)",
            cert_file.display(),
        ));
    }
    MetricsTls::read(file, cert_file, key_file).map(Some)
}

/// Parses a 32-byte key written as 64 hex digits.
pub(crate) fn key_hex(file: &Path, field: &str, value: &str) -> Result<[u8; 32], ConfigFileError> {
    let mut out = [0u8; 32];
    let bytes = value.as_bytes();
    if bytes.len() != 64 {
        return Err(invalid(
            file,
            field,
            "64 hex digits (32 bytes)",
            "<redacted>",
        ));
    }
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let hi = hex_digit(pair[0]);
        let lo = hex_digit(pair[1]);
        match (hi, lo) {
            (Some(h), Some(l)) => out[i] = h << 4 | l,
            _ => {
                return Err(invalid(
                    file,
                    field,
                    "64 hex digits (32 bytes)",
                    "<redacted>",
                ));
            }
        }
    }
    if out == [0; 32] {
        // The example configs' placeholder: a daemon started from an unedited example must
        // not run with a key that everyone knows.
        return Err(invalid(
            file,
            field,
            "a key of your own, not the example's 64 zeros (generate one with \
             head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')",
            "<redacted>",
        ));
    }
    Ok(out)
}

pub(crate) fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Which daemon a configuration file is for, told by its fields (`listen` or `[[user]]`:
/// server; otherwise client), and its state directory. The file is validated as that daemon's
/// configuration, so a file the daemon would refuse is refused here too. Used by
/// `braid status -c FILE`.
pub fn detect_role(file: &Path) -> Result<(crate::session::Role, PathBuf), ConfigFileError> {
    #[derive(Deserialize)]
    struct Probe {
        listen: Option<toml::Value>,
        user: Option<toml::Value>,
    }
    let text = read_text(file)?;
    let probe: Probe = parse_toml(file, &text).unwrap_or(Probe {
        listen: None,
        user: None,
    });
    if probe.listen.is_some() || matches!(probe.user, Some(toml::Value::Array(_))) {
        let config = ServerConfig::parse(file, &text)?;
        Ok((crate::session::Role::Server, config.state_dir))
    } else {
        let config = ClientConfig::parse(file, &text)?;
        Ok((crate::session::Role::Client, config.state_dir))
    }
}

/// The state directory used when a file names none.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/braid";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_role_validates_the_file_as_that_daemon_would() {
        let dir = std::env::temp_dir().join(format!("braid-detect-role-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = "ab".repeat(32);
        let client = format!(
            "user = \"a\"\nkey = \"{key}\"\nserver_fingerprint = \"{key}\"\n\
             state_dir = \"/run/c\"\n[[link]]\nname = \"w\"\nserver = \"h:1\"\n"
        );
        let server = format!(
            "listen = \"0.0.0.0:1\"\nstate_dir = \"/run/s\"\n[[user]]\nname = \"a\"\nkey = \"{key}\"\n"
        );
        let role = |text: &str| {
            let file = dir.join("f.toml");
            std::fs::write(&file, text).unwrap();
            detect_role(&file).map_err(|e| e.to_string())
        };
        use crate::session::Role;
        assert_eq!(role(&client), Ok((Role::Client, PathBuf::from("/run/c"))));
        assert_eq!(role(&server), Ok((Role::Server, PathBuf::from("/run/s"))));
        // Files the daemons refuse: empty, a scenario, a bad value in either kind.
        for (text, want) in [
            (String::new(), "missing field `user`"),
            (
                "name = \"x\"\nduration_s = 1.0\n".to_owned(),
                "unknown field `duration_s`",
            ),
            (
                client.replace("server = \"h:1\"", "server = \"h:1\"\nweight = 0"),
                "link[0].weight",
            ),
            (server.replace("0.0.0.0:1", "nowhere"), "listen"),
        ] {
            let e = role(&text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn session_limits_are_checked() {
        use crate::session::congestion::CongestionAlgorithm;
        let f = Path::new("f.toml");
        let raw = |kib, bytes| RawSession {
            flow_receive_window_kib: kib,
            flow_receive_window_max_kib: None,
            max_udp_payload: bytes,
            congestion: None,
            idle_timeout_s: None,
            keepalive_s: None,
            backup_below_mbps: None,
            redundant_ports: Vec::new(),
            redundant_max_mbps: None,
        };
        assert_eq!(
            session_limits(f, &raw(None, None)).unwrap(),
            SessionLimits::default()
        );
        assert_eq!(SessionLimits::default().max_udp_payload, 1472);
        assert_eq!(MAX_UDP_PAYLOAD, 1200..=8922);
        assert_eq!(
            session_limits(f, &raw(Some(4096), Some(8922))).unwrap(),
            SessionLimits {
                flow_receive_window: 4 << 20,
                flow_receive_window_max: 16 << 20,
                max_udp_payload: 8922,
                congestion: CongestionAlgorithm::Cubic,
                idle_timeout: std::time::Duration::from_secs(30),
                keepalive: std::time::Duration::from_secs(25),
                backup_below: None,
                redundant: SessionLimits::default().redundant,
            }
        );
        // How long a session outlives its last path.
        let idle = |s| {
            session_limits(
                f,
                &RawSession {
                    idle_timeout_s: Some(s),
                    ..raw(None, None)
                },
            )
        };
        assert_eq!(idle(300).unwrap().idle_timeout.as_secs(), 300);
        assert_eq!(idle(5).unwrap().idle_timeout.as_secs(), 5);
        assert_eq!(idle(3600).unwrap().idle_timeout.as_secs(), 3600);
        for bad in [4, 3601, -1, 0] {
            let e = idle(bad).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "f.toml: session.idle_timeout_s: expected seconds in 5..=3600, got \"{bad}\""
                )
            );
        }
        // How often a quiet session's idle paths send a heartbeat.
        let keepalive = |s| {
            session_limits(
                f,
                &RawSession {
                    keepalive_s: Some(s),
                    ..raw(None, None)
                },
            )
        };
        assert_eq!(keepalive(1).unwrap().keepalive.as_secs(), 1);
        assert_eq!(keepalive(25).unwrap().keepalive.as_secs(), 25);
        for bad in [0, 26, -3] {
            let e = keepalive(bad).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("f.toml: session.keepalive_s: expected seconds in 1..=25, got \"{bad}\"")
            );
        }
        // The rate below which a busy primary lets the backups help, in bytes per second.
        let floor = |mbps| {
            session_limits(
                f,
                &RawSession {
                    backup_below_mbps: Some(mbps),
                    ..raw(None, None)
                },
            )
        };
        assert_eq!(floor(8.0).unwrap().backup_below, Some(1_000_000));
        assert_eq!(floor(0.0).unwrap().backup_below, Some(0));
        assert_eq!(floor(0.5).unwrap().backup_below, Some(62_500));
        for bad in [-1.0, 100_001.0, f64::NAN, f64::INFINITY] {
            let e = floor(bad).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "f.toml: session.backup_below_mbps: expected a rate in [0, 100000] Mbit/s, \
                     got \"{bad}\""
                )
            );
        }
        // The largest window: by default 16 MiB, or the first window where that is larger;
        // never below the first window.
        let grown = |kib, max| {
            session_limits(
                f,
                &RawSession {
                    flow_receive_window_max_kib: max,
                    ..raw(kib, None)
                },
            )
        };
        assert_eq!(
            grown(Some(32768), None).unwrap().flow_receive_window_max,
            32 << 20
        );
        assert_eq!(
            grown(None, Some(2048)).unwrap().flow_receive_window_max,
            2 << 20
        );
        assert_eq!(
            grown(Some(64), Some(1 << 20))
                .unwrap()
                .flow_receive_window_max,
            1 << 30
        );
        assert_eq!(
            grown(Some(4096), Some(2048)).unwrap_err().to_string(),
            "f.toml: session.flow_receive_window_max_kib: expected KiB in 4096..=1048576, got \"2048\""
        );
        assert_eq!(
            grown(None, Some(-5)).unwrap_err().to_string(),
            "f.toml: session.flow_receive_window_max_kib: expected KiB in 2048..=1048576, got \"-5\""
        );
        let named = |name: &str| {
            session_limits(
                f,
                &RawSession {
                    congestion: Some(name.to_owned()),
                    ..raw(None, None)
                },
            )
        };
        // Ports sent redundantly: ports and ranges, at most 16, each checked by name.
        let ports = |text: &str| {
            let value: toml::Value = toml::from_str(&format!("p = {text}")).unwrap();
            let list = value["p"].as_array().unwrap().clone();
            session_limits(
                f,
                &RawSession {
                    redundant_ports: list,
                    ..raw(None, None)
                },
            )
        };
        let set = ports("[53, \"3478-3481\", 5060]").unwrap().redundant.ports;
        assert_eq!(set.ranges(), [(53, 53), (3478, 3481), (5060, 5060)]);
        assert!(set.contains(3480) && !set.contains(3482) && !set.contains(443));
        for (bad, field) in [
            ("[0]", "session.redundant_ports[0]"),
            ("[53, \"9-1\"]", "session.redundant_ports[1]"),
            ("[\"x\"]", "session.redundant_ports[0]"),
            ("[70000]", "session.redundant_ports[0]"),
        ] {
            let e = ports(bad).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("f.toml: {field}: expected a port")),
                "{e}"
            );
        }
        let many = format!(
            "[{}]",
            (1..=17)
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let e = ports(&many).unwrap_err().to_string();
        assert!(
            e.starts_with("f.toml: session.redundant_ports: expected at most 16 ports or ranges"),
            "{e}"
        );
        // The bound on what goes redundantly: 10 Mbit/s unless the file says, 0 sends none so.
        let bound = |mbps: f64| {
            session_limits(
                f,
                &RawSession {
                    redundant_max_mbps: Some(mbps),
                    ..raw(None, None)
                },
            )
        };
        assert_eq!(SessionLimits::default().redundant.max_rate, Some(1_250_000));
        assert_eq!(bound(0.5).unwrap().redundant.max_rate, Some(62_500));
        assert_eq!(bound(0.0).unwrap().redundant.max_rate, Some(0));
        for bad in [-1.0, 100_001.0, f64::NAN] {
            let e = bound(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("f.toml: session.redundant_max_mbps: expected a rate in [0, 100000]"),
                "{e}"
            );
        }
        assert_eq!(named("BBR").unwrap().congestion, CongestionAlgorithm::Bbr);
        assert_eq!(named("olia").unwrap().congestion, CongestionAlgorithm::Olia);
        assert_eq!(
            named("newreno").unwrap().congestion,
            CongestionAlgorithm::NewReno
        );
        assert_eq!(
            named("vegas").unwrap_err().to_string(),
            "f.toml: session.congestion: expected \"cubic\", \"newreno\", \"bbr\", \"lia\" or \"olia\", got \"vegas\""
        );
        for bad in [-1, 0, 63, (1 << 20) + 1] {
            let e = session_limits(f, &raw(Some(bad), None))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(
                    "f.toml: session.flow_receive_window_kib: expected KiB in 64..=1048576"
                ),
                "{e}"
            );
        }
        for bad in [-1, 0, 1199, 8923, 65_535] {
            let e = session_limits(f, &raw(None, Some(bad)))
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                format!(
                    "f.toml: session.max_udp_payload: expected bytes in 1200..=8922, got \"{bad}\""
                ),
            );
        }
    }

    #[test]
    fn host_port_accepts_names_and_addresses() {
        let f = Path::new("f.toml");
        assert!(host_port(f, "x", "vps.example.net:4433").is_ok());
        assert!(host_port(f, "x", "127.0.0.1:1").is_ok());
        assert!(host_port(f, "x", "[::1]:4433").is_ok());
        for bad in [
            "x",
            "host:",
            ":80",
            "host:0",
            "127.0.0.1:0",
            "[::1]:0",
            "host:70000",
            "a b:1",
        ] {
            let e = host_port(f, "link[1].server", bad).unwrap_err().to_string();
            assert!(
                e.contains("f.toml: link[1].server: expected host:port"),
                "{e}"
            );
        }
    }

    /// A fresh self-signed certificate and its key, PEM, written to `dir`.
    fn write_identity(dir: &Path, cert: &str, key: &str) -> String {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(dir.join(cert), ck.cert.pem()).unwrap();
        std::fs::write(dir.join(key), ck.signing_key.serialize_pem()).unwrap();
        crate::tls::fingerprint(ck.cert.der())
    }

    #[test]
    fn the_metrics_tls_files_are_read_together_and_every_error_names_its_setting() {
        let dir = std::env::temp_dir().join(format!("braid-metrics-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = Path::new("f.toml");
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let fingerprint = write_identity(&dir, "cert.pem", "key.pem");
        let read = |c: Option<&Path>, k: Option<&Path>, listen: bool| metrics_tls(f, c, k, listen);
        assert_eq!(read(None, None, true).unwrap(), None);
        assert_eq!(read(None, None, false).unwrap(), None);
        let first = read(Some(&cert), Some(&key), true).unwrap().unwrap();
        assert_eq!(first.fingerprint, fingerprint);
        assert_eq!(first.server_config().alpn_protocols, [b"http/1.1".to_vec()]);
        let shown = format!("{first:?}");
        let key_pem = std::fs::read_to_string(&key).unwrap();
        let key_body = key_pem.lines().nth(1).unwrap();
        assert!(
            shown.contains(&fingerprint) && !shown.contains(key_body),
            "{shown}"
        );
        // Read again: equal. The same files renewed: not equal (a reload takes them up).
        assert_eq!(read(Some(&cert), Some(&key), true).unwrap().unwrap(), first);
        write_identity(&dir, "cert.pem", "key.pem");
        let renewed = read(Some(&cert), Some(&key), true).unwrap().unwrap();
        assert_ne!(renewed, first);
        assert_ne!(renewed.fingerprint, first.fingerprint);

        let error = |c: Option<&Path>, k: Option<&Path>, listen: bool| {
            read(c, k, listen).unwrap_err().to_string()
        };
        let e = error(Some(&cert), None, true);
        assert!(e.starts_with("f.toml: metrics_tls_key: expected a PEM private key file, set together with metrics_tls_cert, got \"(not set)\""), "{e}");
        let e = error(None, Some(&key), true);
        assert!(
            e.starts_with("f.toml: metrics_tls_cert: expected a PEM certificate file"),
            "{e}"
        );
        let e = error(Some(&cert), Some(&key), false);
        assert!(
            e.starts_with("f.toml: metrics_tls_cert: expected metrics_listen set too"),
            "{e}"
        );
        let missing = dir.join("missing.pem");
        let e = error(Some(&missing), Some(&key), true);
        assert!(
            e.starts_with("f.toml: metrics_tls_cert: expected a readable PEM file")
                && e.contains("missing.pem"),
            "{e}"
        );
        let e = error(Some(Path::new("/dev/zero")), Some(&key), true);
        assert!(e.contains("/dev/zero: not a regular file"), "{e}");
        std::fs::write(dir.join("big.pem"), vec![b'a'; MAX_PEM_FILE as usize + 1]).unwrap();
        let e = error(Some(&cert), Some(&dir.join("big.pem")), true);
        assert!(
            e.contains("big.pem: 1048577 bytes, more than 1048576"),
            "{e}"
        );
        // A key where the certificate should be: no certificate in it.
        let e = error(Some(&key), Some(&key), true);
        assert!(
            e.contains("metrics_tls_cert") && e.contains("no CERTIFICATE block"),
            "{e}"
        );
        // A certificate where the key should be, an empty file, another certificate's key.
        let e = error(Some(&cert), Some(&cert), true);
        assert!(
            e.starts_with("f.toml: metrics_tls_key: expected a readable PEM file"),
            "{e}"
        );
        std::fs::write(dir.join("empty.pem"), "").unwrap();
        let e = error(Some(&cert), Some(&dir.join("empty.pem")), true);
        assert!(
            e.starts_with("f.toml: metrics_tls_key:") && e.contains("empty.pem"),
            "{e}"
        );
        write_identity(&dir, "other-cert.pem", "other-key.pem");
        let e = error(Some(&cert), Some(&dir.join("other-key.pem")), true);
        assert!(
            e.starts_with("f.toml: metrics_tls_key: expected a readable PEM file with the private key of metrics_tls_cert's first certificate")
                && e.contains("other-key.pem: the key of another certificate"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn metrics_tokens_are_bearer_tokens_and_never_echoed() {
        let f = Path::new("f.toml");
        assert_eq!(metrics_token(f, None).unwrap(), None);
        let token = "Zm9vYmFyYmF6cXV4LXRva2Vu_~.+/==";
        let t = metrics_token(f, Some(token)).unwrap().unwrap();
        assert!(t.matches(token.as_bytes()));
        assert!(!t.matches(b"Zm9vYmFyYmF6cXV4LXRva2Vu_~.+/="));
        assert!(!format!("{t:?}").contains("Zm9v"));
        for (bad, why) in [
            ("short-secret", "12 characters"),
            (
                "0123456789abcdef ghij",
                "a character not allowed at position 17",
            ),
            (
                "0123456789abcdef=ghij",
                "a character not allowed at position 17",
            ),
            ("0123456789abcdé", "a character not allowed at position 15"),
            ("================", "only padding"),
        ] {
            let e = metrics_token(f, Some(bad)).unwrap_err().to_string();
            assert!(
                e.starts_with("f.toml: metrics_token: expected 16 to 512 characters")
                    && e.contains(why)
                    && !e.contains(&bad[..6]),
                "{bad}: {e}"
            );
        }
        assert!(metrics_token(f, Some(&"a".repeat(513))).is_err());
        assert!(metrics_token(f, Some(&"a".repeat(512))).is_ok());
    }

    #[test]
    fn keys_are_64_hex_digits_and_never_echoed() {
        let f = Path::new("f.toml");
        let k = key_hex(f, "key", &"ab".repeat(32)).unwrap();
        assert_eq!(k, [0xab; 32]);
        let e = key_hex(f, "user[0].key", &"zz".repeat(32))
            .unwrap_err()
            .to_string();
        assert!(e.contains("user[0].key") && !e.contains("zz"), "{e}");
        let e = key_hex(f, "key", &"0".repeat(64)).unwrap_err().to_string();
        assert!(e.contains("key") && e.contains("64 zeros"), "{e}");
        assert_eq!(key_hex(f, "key", &"00".repeat(31)).map(|_| ()).ok(), None);
        let mut one = "0".repeat(63);
        one.push('1');
        assert_eq!(key_hex(f, "key", &one).unwrap()[31], 1);
    }

    #[test]
    fn scheduler_names_and_params_are_checked() {
        let f = Path::new("f.toml");
        let raw = RawScheduler {
            name: "nope".into(),
            params: BTreeMap::new(),
        };
        let e = scheduler(f, Some(&raw)).unwrap_err().to_string();
        assert!(e.contains("scheduler.name") && e.contains("minrtt"), "{e}");
        let raw = RawScheduler {
            name: "minrtt".into(),
            params: BTreeMap::from([("bogus".to_owned(), 1.0)]),
        };
        let e = scheduler(f, Some(&raw)).unwrap_err().to_string();
        assert_eq!(
            e,
            "f.toml: scheduler.params: expected no parameters (`minrtt` has none), got \"bogus\""
        );
        let raw = RawScheduler {
            name: "olms".into(),
            params: BTreeMap::from([("paths_per_decision".to_owned(), 0.0)]),
        };
        let e = scheduler(f, Some(&raw)).unwrap_err().to_string();
        assert_eq!(
            e,
            "f.toml: scheduler.params.paths_per_decision: expected an integer in [1, 16], got \"0\""
        );
        // A pair checked once both are set (in any order), and a good pair accepted.
        let blest = |min: f64, max: f64| RawScheduler {
            name: "blest".into(),
            params: BTreeMap::from([
                ("min_lambda".to_owned(), min),
                ("max_lambda".to_owned(), max),
            ]),
        };
        let e = scheduler(f, Some(&blest(5.0, 1.0)))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "f.toml: scheduler.params.max_lambda: expected a factor >= min_lambda, got \"1\""
        );
        assert!(scheduler(f, Some(&blest(0.5, 0.8))).is_ok());
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;

    /// The field names serde lists when `text` holds an unknown field `bogus_field`.
    fn known_fields(text: &str, server: bool) -> Vec<String> {
        let f = Path::new("f.toml");
        let e = if server {
            ServerConfig::parse(f, text).unwrap_err().to_string()
        } else {
            ClientConfig::parse(f, text).unwrap_err().to_string()
        };
        let (_, list) = e
            .split_once("unknown field `bogus_field`, expected ")
            .unwrap_or_else(|| panic!("{text:?}: {e}"));
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn docs_config_md_documents_every_field() {
        let doc = include_str!("../../../../docs/config.md");
        // Every word inside a code span (`[egress] allow_private`, `{ name, password }`).
        let documented: std::collections::BTreeSet<&str> = doc
            .split('`')
            .skip(1)
            .step_by(2)
            .flat_map(|code| code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
            .collect();
        let key = "ab".repeat(32);
        let client = format!(
            "user = \"a\"\nkey = \"{key}\"\nserver_fingerprint = \"{key}\"\n\
             [[link]]\nname = \"w\"\nserver = \"h:1\"\n"
        );
        let server = format!("listen = \"0.0.0.0:1\"\n[[user]]\nname = \"a\"\nkey = \"{key}\"\n");
        let cases = [
            (format!("bogus_field = 1\n{client}"), false),
            (format!("{client}bogus_field = 1\n"), false),
            (format!("{client}[socks]\nbogus_field = 1\n"), false),
            (
                format!("{client}[socks]\nusers = [{{ bogus_field = 1 }}]\n"),
                false,
            ),
            (format!("{client}[scheduler]\nbogus_field = 1\n"), false),
            (format!("{client}[session]\nbogus_field = 1\n"), false),
            (
                format!("{client}[[route]]\naction = \"direct\"\nbogus_field = 1\n"),
                false,
            ),
            (format!("bogus_field = 1\n{server}"), true),
            (format!("{server}bogus_field = 1\n"), true),
            (format!("{server}[egress]\nbogus_field = 1\n"), true),
            (format!("{server}[limits]\nbogus_field = 1\n"), true),
        ];
        let mut checked = 0;
        for (text, is_server) in cases {
            for field in known_fields(&text, is_server) {
                assert!(
                    documented.contains(field.as_str()),
                    "docs/config.md does not document `{field}`"
                );
                checked += 1;
            }
        }
        assert!(checked >= 30, "{checked}");
    }

    fn example(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../config")
            .join(name)
    }

    /// The examples hold placeholders (a key and a pin of zeros) that the daemons refuse, naming
    /// the field; with those replaced, they are valid as shipped.
    #[test]
    fn shipped_examples_are_valid_once_their_placeholders_are_replaced() {
        let zero_key = "0".repeat(64);
        let zero_pin = "00:".repeat(31) + "00";
        let client_file = example("client.toml");
        let client = std::fs::read_to_string(&client_file).unwrap();
        let e = ClientConfig::parse(&client_file, &client)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("client.toml: key") && e.contains("64 zeros"),
            "{e}"
        );
        let keyed = client.replace(&zero_key, &"5a".repeat(32));
        let e = ClientConfig::parse(&client_file, &keyed)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("server_fingerprint") && e.contains("zeros"),
            "{e}"
        );
        let edited = keyed.replace(&zero_pin, &("AB:".repeat(31) + "AB"));
        let c = ClientConfig::parse(&client_file, &edited).unwrap();
        assert_eq!(c.links.len(), 2);
        assert_eq!(c.links[1].tier, crate::session::Tier::Backup);
        let server_file = example("server.toml");
        let server = std::fs::read_to_string(&server_file).unwrap();
        let e = ServerConfig::parse(&server_file, &server)
            .unwrap_err()
            .to_string();
        assert!(e.contains("user[0].key") && e.contains("64 zeros"), "{e}");
        let server = server.replace(&zero_key, &"5a".repeat(32));
        let s = ServerConfig::parse(&server_file, &server).unwrap();
        assert!(!s.egress.allow_loopback && !s.egress.allow_private);
        // The client's file leaves the floor for backups out (so the server's applies to
        // downloads); the server's states its default.
        assert_eq!(c.session, SessionLimits::default());
        assert_eq!(
            s.session,
            SessionLimits {
                backup_below: Some(0),
                ..SessionLimits::default()
            }
        );
    }
}
