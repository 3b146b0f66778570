//! The server daemon's configuration (`config/server.toml`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use braid_sched_core::SchedulerConfig;
use serde::Deserialize;

use super::{ConfigFileError, IpNet, RawScheduler, RawSession, invalid, key_hex, socket_addr};

/// A user allowed to join.
#[derive(Clone, PartialEq, Eq)]
pub struct UserEntry {
    /// The name the client sends.
    pub name: String,
    /// The 32-byte key the client proves it holds.
    pub key: [u8; 32],
}

impl std::fmt::Debug for UserEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserEntry")
            .field("name", &self.name)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Where the server may send traffic, and its timeouts (`[egress]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Allow private, link-local, CGNAT, ULA, multicast and broadcast destinations.
    pub allow_private: bool,
    /// Allow loopback (and unspecified, which reaches loopback) destinations.
    pub allow_loopback: bool,
    /// Networks allowed even where `allow_private` or `allow_loopback` would refuse them (at
    /// most [`MAX_EGRESS_NETWORKS`]).
    pub allow_networks: Vec<IpNet>,
    /// Networks refused whatever else allows them (at most [`MAX_EGRESS_NETWORKS`]).
    pub deny_networks: Vec<IpNet>,
    /// Destination ports refused, TCP and UDP (at most [`MAX_EGRESS_PORTS`] ranges).
    pub deny_ports: Vec<PortRange>,
    /// How long a TCP connect (with name resolution) may take.
    pub connect_timeout: Duration,
    /// A UDP association with no traffic for this long is closed (a ping flow too).
    pub udp_idle_timeout: Duration,
    /// Relay the ICMP echoes (pings) of clients' TUN inbounds, to the destinations the rest of
    /// the policy allows.
    pub icmp_echo: bool,
}

impl Default for EgressPolicy {
    fn default() -> Self {
        EgressPolicy {
            allow_private: false,
            allow_loopback: false,
            allow_networks: Vec::new(),
            deny_networks: Vec::new(),
            deny_ports: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            udp_idle_timeout: Duration::from_secs(60),
            icmp_echo: true,
        }
    }
}

/// Most networks `[egress] allow_networks` and `deny_networks` may each list.
pub const MAX_EGRESS_NETWORKS: usize = 256;
/// Most entries `[egress] deny_ports` may list.
pub const MAX_EGRESS_PORTS: usize = 64;

/// Destination ports `first..=last` (one port: `first == last`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// The first port, at least 1.
    pub first: u16,
    /// The last port, at least `first`.
    pub last: u16,
}

impl PortRange {
    /// Whether `port` is in the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.first == self.last {
            true => write!(f, "{}", self.first),
            false => write!(f, "{}-{}", self.first, self.last),
        }
    }
}

/// Most addresses `listen` names.
pub const MAX_LISTEN: usize = 8;

/// Checks `listen`, an address or a list of 1 to [`MAX_LISTEN`] addresses, none twice (but
/// for port 0, any port).
fn listen_addresses(file: &Path, raw: &toml::Value) -> Result<Vec<SocketAddr>, ConfigFileError> {
    super::one_or_list(
        file,
        "listen",
        raw,
        MAX_LISTEN,
        "ip:port",
        |field, text| socket_addr(file, field, text),
        |address: &SocketAddr| address.port() == 0,
    )
}

/// The validated server configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    /// The UDP addresses the QUIC endpoints listen on (one endpoint each, 1 to
    /// [`MAX_LISTEN`]; the file's `listen`, an address or a list of them).
    pub listen: Vec<SocketAddr>,
    /// The Prometheus metrics listener (`GET /metrics`), when enabled.
    pub metrics_listen: Option<SocketAddr>,
    /// The bearer token a metrics request must carry, when one is set.
    pub metrics_token: Option<super::MetricsToken>,
    /// The metrics endpoint's certificate and key, when it speaks HTTPS.
    pub metrics_tls: Option<super::MetricsTls>,
    /// Where the certificate, key and status socket live.
    pub state_dir: PathBuf,
    /// The name in the self-signed certificate.
    pub server_name: String,
    /// The users allowed to join.
    pub users: Vec<UserEntry>,
    /// The downstream scheduler.
    pub scheduler: SchedulerConfig,
    /// Egress policy and timeouts.
    pub egress: EgressPolicy,
    /// Most sessions at once.
    pub max_sessions: usize,
    /// Most sessions of one user at once (so one user's clients cannot take every session).
    pub max_sessions_per_user: usize,
    /// Most connections between handshake and an answered join at once.
    pub max_pending_joins: usize,
    /// The session limits (`[session]`).
    pub session: super::SessionLimits,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: toml::Value,
    metrics_listen: Option<String>,
    metrics_token: Option<String>,
    metrics_tls_cert: Option<PathBuf>,
    metrics_tls_key: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    server_name: Option<String>,
    #[serde(default)]
    user: Vec<RawUser>,
    scheduler: Option<RawScheduler>,
    #[serde(default)]
    egress: RawEgress,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    session: RawSession,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUser {
    name: String,
    key: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEgress {
    #[serde(default)]
    allow_private: bool,
    #[serde(default)]
    allow_loopback: bool,
    #[serde(default)]
    allow_networks: Vec<String>,
    #[serde(default)]
    deny_networks: Vec<String>,
    /// Numbers and `"FIRST-LAST"` strings, checked one by one so that an error names its entry.
    #[serde(default)]
    deny_ports: Vec<toml::Value>,
    connect_timeout_s: Option<f64>,
    udp_idle_timeout_s: Option<f64>,
    icmp_echo: Option<bool>,
}

/// `[egress] deny_ports`: ports 1..=65535 and ranges `"FIRST-LAST"`.
fn port_ranges(file: &Path, raw: &[toml::Value]) -> Result<Vec<PortRange>, ConfigFileError> {
    let ranges = super::port_ranges(file, "egress.deny_ports", MAX_EGRESS_PORTS, raw)?;
    Ok(ranges
        .into_iter()
        .map(|(first, last)| PortRange { first, last })
        .collect())
}

/// `[limits] max_sessions_per_user` where the file leaves it out: 16, room for a household's
/// devices sharing a user and for the sessions a client that crashed leaves behind (each ends
/// `[session] idle_timeout_s` after its links went quiet).
pub const DEFAULT_MAX_SESSIONS_PER_USER: usize = 16;

/// Signed, so that a negative value is refused by name with its range.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_sessions: Option<i64>,
    max_sessions_per_user: Option<i64>,
    max_pending_joins: Option<i64>,
}

fn seconds(
    file: &Path,
    field: &str,
    v: Option<f64>,
    default: u64,
) -> Result<Duration, ConfigFileError> {
    match v {
        None => Ok(Duration::from_secs(default)),
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(invalid(file, field, "seconds in (0, 86400]", s)),
    }
}

fn limit(
    file: &Path,
    field: &str,
    v: Option<i64>,
    default: usize,
) -> Result<usize, ConfigFileError> {
    match v {
        None => Ok(default),
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|n| (1..=100_000).contains(n))
            .ok_or_else(|| invalid(file, field, "1..=100000", n)),
    }
}

impl ServerConfig {
    /// Reads and validates a server configuration file.
    pub fn load(file: &Path) -> Result<ServerConfig, ConfigFileError> {
        let raw: RawServer = super::read_toml(file)?;
        Self::validate(file, raw)
    }

    /// Parses and validates `text` as if read from `file`.
    pub fn parse(file: &Path, text: &str) -> Result<ServerConfig, ConfigFileError> {
        Self::validate(file, super::parse_toml(file, text)?)
    }

    fn validate(file: &Path, raw: RawServer) -> Result<ServerConfig, ConfigFileError> {
        let listen = listen_addresses(file, &raw.listen)?;
        let (metrics_listen, metrics_token, metrics_tls) = super::metrics_settings(
            file,
            raw.metrics_listen.as_deref(),
            raw.metrics_token.as_deref(),
            raw.metrics_tls_cert.as_deref(),
            raw.metrics_tls_key.as_deref(),
        )?;
        let mut users = Vec::with_capacity(raw.user.len());
        for (i, u) in raw.user.iter().enumerate() {
            if u.name.is_empty() || u.name.len() > 64 {
                return Err(invalid(
                    file,
                    format!("user[{i}].name"),
                    "a name of 1..=64 bytes",
                    &u.name,
                ));
            }
            if users.iter().any(|o: &UserEntry| o.name == u.name) {
                return Err(invalid(
                    file,
                    format!("user[{i}].name"),
                    "a unique name",
                    &u.name,
                ));
            }
            let key = key_hex(file, &format!("user[{i}].key"), &u.key)?;
            users.push(UserEntry {
                name: u.name.clone(),
                key,
            });
        }
        if users.is_empty() {
            return Err(invalid(file, "user", "at least one [[user]] table", 0));
        }
        let egress = EgressPolicy {
            allow_private: raw.egress.allow_private,
            allow_loopback: raw.egress.allow_loopback,
            allow_networks: super::networks(
                file,
                "egress.allow_networks",
                MAX_EGRESS_NETWORKS,
                &raw.egress.allow_networks,
            )?,
            deny_networks: super::networks(
                file,
                "egress.deny_networks",
                MAX_EGRESS_NETWORKS,
                &raw.egress.deny_networks,
            )?,
            deny_ports: port_ranges(file, &raw.egress.deny_ports)?,
            connect_timeout: seconds(
                file,
                "egress.connect_timeout_s",
                raw.egress.connect_timeout_s,
                10,
            )?,
            udp_idle_timeout: seconds(
                file,
                "egress.udp_idle_timeout_s",
                raw.egress.udp_idle_timeout_s,
                60,
            )?,
            icmp_echo: raw.egress.icmp_echo.unwrap_or(true),
        };
        Ok(ServerConfig {
            listen,
            metrics_listen,
            metrics_token,
            metrics_tls,
            state_dir: raw
                .state_dir
                .unwrap_or_else(|| PathBuf::from(super::DEFAULT_STATE_DIR)),
            server_name: raw.server_name.unwrap_or_else(|| "braid".to_owned()),
            users,
            scheduler: super::scheduler(file, raw.scheduler.as_ref())?,
            egress,
            max_sessions: limit(file, "limits.max_sessions", raw.limits.max_sessions, 256)?,
            max_sessions_per_user: limit(
                file,
                "limits.max_sessions_per_user",
                raw.limits.max_sessions_per_user,
                DEFAULT_MAX_SESSIONS_PER_USER,
            )?,
            max_pending_joins: limit(
                file,
                "limits.max_pending_joins",
                raw.limits.max_pending_joins,
                64,
            )?,
            session: super::session_limits(file, &raw.session)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> String {
        format!(
            "listen = \"0.0.0.0:4433\"\n[[user]]\nname = \"alice\"\nkey = \"{}\"\n",
            "22".repeat(32)
        )
    }

    #[test]
    fn defaults_refuse_private_and_loopback() {
        let c = ServerConfig::parse(Path::new("s.toml"), &base()).unwrap();
        assert!(!c.egress.allow_private && !c.egress.allow_loopback);
        assert_eq!(c.egress.connect_timeout, Duration::from_secs(10));
        assert_eq!(c.users[0].key, [0x22; 32]);
        assert!(!format!("{:?}", c.users[0]).contains("22"));
        assert_eq!(c.metrics_listen, None);
        let text = format!("metrics_listen = \"127.0.0.1:9464\"\n{}", base());
        let c = ServerConfig::parse(Path::new("s.toml"), &text).unwrap();
        assert_eq!(
            c.metrics_listen,
            Some(SocketAddr::from(([127, 0, 0, 1], 9464)))
        );
    }

    #[test]
    fn egress_lists_parse_networks_addresses_ports_and_ranges() {
        let text = base()
            + "[egress]\nallow_networks = [\"192.168.1.0/24\", \"fd00::7\"]\n\
               deny_networks = [\"192.168.1.1\"]\ndeny_ports = [25, \"6881-6889\", \"465-465\"]\n";
        let c = ServerConfig::parse(Path::new("s.toml"), &text).unwrap();
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        assert_eq!(
            c.egress.allow_networks,
            [net("192.168.1.0/24"), net("fd00::7/128")]
        );
        assert_eq!(c.egress.deny_networks, [net("192.168.1.1/32")]);
        let ranges: Vec<String> = c.egress.deny_ports.iter().map(|r| r.to_string()).collect();
        assert_eq!(ranges, ["25", "6881-6889", "465"]);
        assert!(c.egress.deny_ports[1].contains(6885) && !c.egress.deny_ports[1].contains(6890));
        // None by default.
        let c = ServerConfig::parse(Path::new("s.toml"), &base()).unwrap();
        assert!(c.egress.allow_networks.is_empty() && c.egress.deny_ports.is_empty());
    }

    #[test]
    fn listen_is_an_address_or_a_list_of_them() {
        let with = |listen: &str| {
            ServerConfig::parse(
                Path::new("s.toml"),
                &base().replace("\"0.0.0.0:4433\"", listen),
            )
        };
        let one = with("\"0.0.0.0:4433\"").unwrap().listen;
        assert_eq!(one, ["0.0.0.0:4433".parse().unwrap()]);
        let two = with("[\"0.0.0.0:443\", \"[::]:4433\"]").unwrap().listen;
        let want: Vec<SocketAddr> =
            vec!["0.0.0.0:443".parse().unwrap(), "[::]:4433".parse().unwrap()];
        assert_eq!(two, want);
        // Port 0 (any port) may be named twice: two endpoints.
        assert_eq!(
            with("[\"127.0.0.1:0\", \"127.0.0.1:0\"]")
                .unwrap()
                .listen
                .len(),
            2
        );
        let nine = format!(
            "[{}]",
            (1..=9)
                .map(|p| format!("\"127.0.0.1:{p}\""))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for (listen, error) in [
            (
                "[]",
                "s.toml: listen: expected 1 to 8 addresses, got \"0 addresses\"",
            ),
            (
                nine.as_str(),
                "s.toml: listen: expected 1 to 8 addresses, got \"9 addresses\"",
            ),
            (
                "[\"0.0.0.0:443\", \"nowhere\"]",
                "s.toml: listen[1]: expected ip:port",
            ),
            (
                "[\"0.0.0.0:443\", 443]",
                "s.toml: listen[1]: expected ip:port",
            ),
            (
                "[\"0.0.0.0:443\", \"0.0.0.0:443\"]",
                "s.toml: listen[1]: expected an address not listed before",
            ),
            (
                "4433",
                "s.toml: listen: expected ip:port, or a list of them",
            ),
        ] {
            let e = with(listen).unwrap_err().to_string();
            assert!(e.starts_with(error), "{listen}: {e}");
        }
    }

    #[test]
    fn errors_name_file_and_field() {
        let cases = [
            (
                base().replace("0.0.0.0:4433", "nowhere"),
                "listen: expected ip:port",
            ),
            (
                format!("metrics_listen = \"localhost:9464\"\n{}", base()),
                "metrics_listen: expected ip:port",
            ),
            (
                base() + "[egress]\nconnect_timeout_s = 0.0\n",
                "egress.connect_timeout_s",
            ),
            (
                base() + "[scheduler]\nname = \"fastest\"\n",
                "scheduler.name",
            ),
            (
                base() + "[egress]\ndeny_networks = [\"10.0.0.0/8\", \"10.0.0.1/8\"]\n",
                "egress.deny_networks[1]: expected a network NETWORK/PREFIX with no host bits \
                 set (e.g. \"203.0.113.0/24\") or an address, got \"10.0.0.1/8\"",
            ),
            (
                base() + "[egress]\nallow_networks = [\"nas.local\"]\n",
                "egress.allow_networks[0]: expected a network",
            ),
            (
                base() + "[egress]\ndeny_ports = [25, 0]\n",
                "egress.deny_ports[1]: expected a port 1..=65535 or a range \"FIRST-LAST\" \
                 (e.g. 25 or \"6881-6889\"), got \"0\"",
            ),
            (
                base() + "[egress]\ndeny_ports = [\"6889-6881\"]\n",
                "egress.deny_ports[0]: expected a port",
            ),
            (
                base() + "[egress]\ndeny_ports = [\"25\", 70000]\n",
                "egress.deny_ports[0]: expected a port",
            ),
            (
                base() + "[egress]\ndeny_ports = [25, 70000]\n",
                "egress.deny_ports[1]: expected a port 1..=65535 or a range \"FIRST-LAST\" \
                 (e.g. 25 or \"6881-6889\"), got \"70000\"",
            ),
            (
                base() + "[egress]\ndeny_ports = [true]\n",
                "egress.deny_ports[0]: expected a port",
            ),
            (
                base()
                    + &format!(
                        "[egress]\ndeny_ports = [{}]\n",
                        vec!["1"; MAX_EGRESS_PORTS + 1].join(", ")
                    ),
                "egress.deny_ports: expected at most 64 ports or ranges, got \"65\"",
            ),
            (
                base() + "[[user]]\nname = \"alice\"\nkey = \"\"\n",
                "user[1].name",
            ),
            (
                base() + "[limits]\nmax_sessions = 0\n",
                "limits.max_sessions",
            ),
            (
                base() + "[limits]\nmax_sessions_per_user = -1\n",
                "limits.max_sessions_per_user: expected 1..=100000",
            ),
            (
                base() + "[limits]\nmax_pending_joins = -1\n",
                "limits.max_pending_joins: expected 1..=100000, got \"-1\"",
            ),
            (
                base() + "[session]\nflow_receive_window_kib = 8\n",
                "session.flow_receive_window_kib: expected KiB in 64..=1048576, got \"8\"",
            ),
            (
                "listen = \"0.0.0.0:1\"\n".to_owned(),
                "user: expected at least one",
            ),
        ];
        for (text, want) in cases {
            let e = ServerConfig::parse(Path::new("s.toml"), &text)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("s.toml: ") && e.contains(want), "{e}");
        }
    }
}
