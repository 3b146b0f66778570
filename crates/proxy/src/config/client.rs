//! The client daemon's configuration (`config/client.toml`).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use braid_sched_core::SchedulerConfig;
use serde::Deserialize;

use super::IpNet;
use super::{ConfigFileError, RawScheduler, RawSession, host_port, invalid, key_hex, socket_addr};
use crate::session::Tier;

/// How the client checks the server's certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerTrust {
    /// The SHA-256 of the server's DER certificate (`server_fingerprint`).
    Fingerprint([u8; 32]),
    /// A PEM file of CA certificates (`ca_file`), verified the usual webpki way.
    CaFile(PathBuf),
}

/// A SOCKS5 username/password pair (RFC 1929).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocksUser {
    /// The user name.
    pub name: String,
    /// The password.
    pub password: String,
}

/// One link (one path of the session).
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// A name for logs and status.
    pub name: String,
    /// The local address its UDP socket binds to (`None`: any address of the server's family).
    pub local_addr: Option<SocketAddr>,
    /// A network device to bind to (`SO_BINDTODEVICE`), or a pattern of device names
    /// ([`LinkConfig::is_pattern`]): then the table stands for one link per matching device
    /// (`crate::transport::autolink`).
    pub interface: Option<String>,
    /// Fail the link (instead of warning and carrying on unbound) when binding to the device is
    /// not permitted.
    pub interface_required: bool,
    /// The server, `host:port`, or several of its addresses tried in turn (1 to
    /// [`MAX_LINK_SERVERS`]): an attempt that fails moves the link on to the next one, and a
    /// join stays with the one that took it.
    pub server: Vec<String>,
    /// Weight for weighted schedulers (at least 1).
    pub weight: u16,
    /// Primary or backup.
    pub tier: Tier,
    /// Optional upstream rate cap, Mbit/s.
    pub rate_cap_mbps: Option<f64>,
    /// Optional downstream rate cap, Mbit/s: what the server may send on the link's path (told
    /// by PATH_RATE_CAP).
    pub rate_cap_down_mbps: Option<f64>,
    /// The link's own congestion controller, for both directions: the client's uploads on it,
    /// and (told by PATH_CONGESTION) the server's downloads (`None`: each end's
    /// `[session] congestion`).
    pub congestion: Option<crate::session::congestion::CongestionAlgorithm>,
    /// How long after the server stopped answering on this link (an outage) the link keeps
    /// looking for it about once a second ([`crate::transport::client::HANDSHAKE_RESTART`]);
    /// afterwards it tries once every [`crate::transport::client::BACKOFF_MAX`]. Zero: never.
    pub fast_rejoin: Duration,
    /// How much the link may carry per day or month (`budget_mib`, `budget_period`,
    /// `budget_reset_day`); `None`: no limit. See [`crate::transport::budget`].
    pub budget: Option<LinkBudget>,
}

impl LinkConfig {
    /// Whether `interface` is a pattern (holds `*` or `?`): the table stands for one link per
    /// network device whose name matches, named `NAME@DEVICE`.
    pub fn is_pattern(&self) -> bool {
        self.interface.as_deref().is_some_and(is_device_pattern)
    }
}

/// Whether a `[[link]] interface` value is a pattern of device names rather than one name.
fn is_device_pattern(interface: &str) -> bool {
    interface.contains(['*', '?'])
}

/// A link's data budget: the bytes its packets may take on the network (both ways, with their
/// IP and UDP headers) in each period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkBudget {
    /// Bytes per period.
    pub bytes: u64,
    /// The period.
    pub period: BudgetPeriod,
    /// What the link does once the budget is spent (`budget_spent`).
    pub when_spent: WhenSpent,
    /// The clock whose midnights begin the periods (`budget_timezone`).
    pub clock: BudgetClock,
}

/// The clock whose midnights begin a link's budget periods (`budget_timezone`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BudgetClock {
    /// The host's local time, as its time zone says (`"local"`, the carriers' way: their
    /// days and billing months begin at their customers' midnight), daylight saving included.
    #[default]
    Local,
    /// UTC (`"UTC"`).
    Utc,
}

/// What a link does once its data budget for the period is spent (`budget_spent`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhenSpent {
    /// It leaves the session until the next period (`"leave"`).
    #[default]
    Leave,
    /// It stays in the session as a backup link, carrying traffic only while no primary link is
    /// live, until the next period (`"backup"`).
    Backup,
}

/// The period a link's budget is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetPeriod {
    /// From midnight to midnight.
    Day,
    /// From midnight of `reset_day` (1 to 28) of one month to the same of the next.
    Month {
        /// The day of the month the budget starts again.
        reset_day: u8,
    },
}

/// Largest `budget_mib`: a pebibyte.
pub const MAX_BUDGET_MIB: i64 = 1 << 30;

/// Default of a link's `fast_rejoin_s`.
pub const DEFAULT_FAST_REJOIN: Duration = Duration::from_secs(300);
/// Largest `fast_rejoin_s`: a day.
pub const MAX_FAST_REJOIN_S: u64 = 86_400;

/// Most addresses a link's `server` names.
pub const MAX_LINK_SERVERS: usize = 4;

/// Checks a link's `server`: a `host:port`, or a list of 1 to [`MAX_LINK_SERVERS`] of them,
/// none twice.
fn link_servers(
    file: &Path,
    field: &str,
    raw: &toml::Value,
) -> Result<Vec<String>, ConfigFileError> {
    super::one_or_list(
        file,
        field,
        raw,
        MAX_LINK_SERVERS,
        "host:port",
        |field, text| host_port(file, field, text),
        |_| false,
    )
}

/// The validated client configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientConfig {
    /// The user name the server knows this client by.
    pub user: String,
    /// The user's 32-byte key.
    pub key: [u8; 32],
    /// How the server certificate is checked.
    pub trust: ServerTrust,
    /// The TLS server name sent and (with a CA file) verified.
    pub server_name: String,
    /// Where the status socket lives.
    pub state_dir: PathBuf,
    /// The SOCKS5 listener.
    pub socks_listen: SocketAddr,
    /// The HTTP CONNECT listener, when enabled.
    pub http_listen: Option<SocketAddr>,
    /// The Prometheus metrics listener (`GET /metrics`), when enabled.
    pub metrics_listen: Option<SocketAddr>,
    /// The bearer token a metrics request must carry, when one is set.
    pub metrics_token: Option<super::MetricsToken>,
    /// The metrics endpoint's certificate and key, when it speaks HTTPS.
    pub metrics_tls: Option<super::MetricsTls>,
    /// SOCKS5 users; empty means no authentication.
    pub socks_users: Vec<SocksUser>,
    /// The TUN inbound (`[tun]`), when enabled.
    pub tun: Option<TunConfig>,
    /// The upstream scheduler.
    pub scheduler: SchedulerConfig,
    /// The links, in path-id order.
    pub links: Vec<LinkConfig>,
    /// The session limits (`[session]`).
    pub session: super::SessionLimits,
    /// The `[[route]]` tables, in order: the first that matches a destination decides.
    pub routes: Vec<super::Route>,
    /// `fallback = "direct"`: destinations no route matches are connected directly while there
    /// is no session to take them (`"none"`, the default: they are refused).
    pub fallback_direct: bool,
}

/// The TUN inbound's device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunConfig {
    /// The interface name (opened, or created with `CAP_NET_ADMIN`).
    pub name: String,
    /// Its MTU, bytes: the largest packet read or written.
    pub mtu: u16,
    /// Addresses braid gives the device (at most one IPv4 and one IPv6); with these or
    /// `routes`, braid also brings the device up. Empty: the system configures it.
    pub address: Vec<IpNet>,
    /// Networks braid routes into the device (at most [`MAX_TUN_ROUTES`]).
    pub routes: Vec<IpNet>,
    /// TCP connections held at once; SYNs beyond are dropped.
    pub max_tcp: usize,
    /// Each TCP connection's receive and send buffer in braid's stack, bytes.
    pub tcp_buffer: usize,
    /// Checksum and TCP segmentation offload between braid and the kernel (the device then
    /// moves TCP in segments of up to 64 KiB); on by default.
    pub offload: bool,
}

impl TunConfig {
    /// A device `name` of the default MTU and limits, set up by the system.
    pub fn named(name: &str) -> Self {
        TunConfig {
            name: name.to_owned(),
            mtu: DEFAULT_TUN_MTU,
            address: Vec::new(),
            routes: Vec::new(),
            max_tcp: crate::inbound::tun::DEFAULT_MAX_TCP,
            tcp_buffer: crate::inbound::tun::DEFAULT_TCP_BUFFER,
            offload: true,
        }
    }

    /// The sizes the inbound works with.
    pub fn limits(&self) -> crate::inbound::tun::TunLimits {
        crate::inbound::tun::TunLimits {
            mtu: usize::from(self.mtu),
            max_tcp: self.max_tcp,
            tcp_buffer: self.tcp_buffer,
        }
    }
}

/// Bounds of `[tun] max_tcp`.
pub const TUN_MAX_TCP_RANGE: std::ops::RangeInclusive<i64> = 1..=65_536;
/// Bounds of `[tun] tcp_buffer`, bytes.
pub const TUN_TCP_BUFFER_RANGE: std::ops::RangeInclusive<i64> = 4_096..=4 << 20;

/// Most routes `[tun] routes` may list.
pub const MAX_TUN_ROUTES: usize = 64;

/// The default MTU of the TUN device.
pub const DEFAULT_TUN_MTU: u16 = 1500;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTun {
    name: String,
    /// Wider than the `u16` it becomes, so an out-of-range value is refused by name.
    mtu: Option<i64>,
    #[serde(default)]
    address: Vec<String>,
    #[serde(default)]
    routes: Vec<String>,
    max_tcp: Option<i64>,
    tcp_buffer: Option<i64>,
    offload: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    user: String,
    key: String,
    server_fingerprint: Option<String>,
    ca_file: Option<PathBuf>,
    server_name: Option<String>,
    state_dir: Option<PathBuf>,
    socks_listen: Option<String>,
    http_listen: Option<String>,
    metrics_listen: Option<String>,
    metrics_token: Option<String>,
    metrics_tls_cert: Option<PathBuf>,
    metrics_tls_key: Option<PathBuf>,
    #[serde(default)]
    socks: RawSocks,
    tun: Option<RawTun>,
    scheduler: Option<RawScheduler>,
    #[serde(default)]
    session: RawSession,
    #[serde(default)]
    link: Vec<RawLink>,
    #[serde(default)]
    route: Vec<super::route::RawRoute>,
    fallback: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSocks {
    #[serde(default)]
    users: Vec<RawSocksUser>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSocksUser {
    name: String,
    password: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    name: String,
    local_addr: Option<String>,
    interface: Option<String>,
    #[serde(default)]
    interface_required: bool,
    /// A `host:port` or a list of them, checked by name.
    server: toml::Value,
    /// Wider than the `u16` it becomes, so an out-of-range value is refused by name.
    #[serde(default = "one")]
    weight: i64,
    #[serde(default = "primary")]
    tier: String,
    rate_cap_mbps: Option<f64>,
    rate_cap_down_mbps: Option<f64>,
    congestion: Option<String>,
    /// Wider than the range it must fall in, so an out-of-range value is refused by name.
    fast_rejoin_s: Option<i64>,
    budget_mib: Option<i64>,
    budget_period: Option<String>,
    budget_reset_day: Option<i64>,
    budget_spent: Option<String>,
    budget_timezone: Option<String>,
}

fn one() -> i64 {
    1
}

fn primary() -> String {
    "primary".to_owned()
}

/// Parses a SHA-256 fingerprint: 32 bytes as hex, with or without colons.
pub fn parse_fingerprint(value: &str) -> Option<[u8; 32]> {
    let digits: Vec<u8> = value.bytes().filter(|&b| b != b':').collect();
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = super::hex_digit(pair[0])? << 4 | super::hex_digit(pair[1])?;
    }
    Some(out)
}

impl ClientConfig {
    /// Reads and validates a client configuration file.
    pub fn load(file: &Path) -> Result<ClientConfig, ConfigFileError> {
        let raw: RawClient = super::read_toml(file)?;
        Self::validate(file, raw)
    }

    /// Parses and validates `text` as if read from `file`.
    pub fn parse(file: &Path, text: &str) -> Result<ClientConfig, ConfigFileError> {
        Self::validate(file, super::parse_toml(file, text)?)
    }

    fn validate(file: &Path, raw: RawClient) -> Result<ClientConfig, ConfigFileError> {
        if raw.user.is_empty() || raw.user.len() > 64 {
            return Err(invalid(file, "user", "a name of 1..=64 bytes", &raw.user));
        }
        let key = key_hex(file, "key", &raw.key)?;
        let trust = match (&raw.server_fingerprint, &raw.ca_file) {
            (Some(fp), None) => match parse_fingerprint(fp) {
                // All zeros is the example config's placeholder, never a certificate's hash.
                Some(pin) if pin == [0; 32] => {
                    return Err(invalid(
                        file,
                        "server_fingerprint",
                        "the server's fingerprint (`braid server --print-fingerprint`), not the \
                         example's zeros",
                        fp,
                    ));
                }
                Some(pin) => ServerTrust::Fingerprint(pin),
                None => {
                    return Err(invalid(
                        file,
                        "server_fingerprint",
                        "64 hex digits, colons optional",
                        fp,
                    ));
                }
            },
            (None, Some(ca)) => ServerTrust::CaFile(ca.clone()),
            _ => {
                return Err(invalid(
                    file,
                    "server_fingerprint/ca_file",
                    "exactly one of the two",
                    "both or neither",
                ));
            }
        };
        let socks_listen = match &raw.socks_listen {
            Some(s) => socket_addr(file, "socks_listen", s)?,
            None => SocketAddr::from(([127, 0, 0, 1], 1080)),
        };
        let http_listen = match &raw.http_listen {
            Some(s) => Some(socket_addr(file, "http_listen", s)?),
            None => None,
        };
        let (metrics_listen, metrics_token, metrics_tls) = super::metrics_settings(
            file,
            raw.metrics_listen.as_deref(),
            raw.metrics_token.as_deref(),
            raw.metrics_tls_cert.as_deref(),
            raw.metrics_tls_key.as_deref(),
        )?;
        let socks_users = socks_users(file, &raw.socks)?;
        let tun = raw.tun.as_ref().map(|t| tun(file, t)).transpose()?;
        if raw.link.is_empty() || raw.link.len() > braid_sched_core::MAX_PATHS {
            return Err(invalid(
                file,
                "link",
                format!("1..={} [[link]] tables", braid_sched_core::MAX_PATHS),
                raw.link.len(),
            ));
        }
        let links = raw
            .link
            .iter()
            .enumerate()
            .map(|(i, l)| link(file, i, l))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, l) in links.iter().enumerate() {
            if links[..i].iter().any(|o| o.name == l.name) {
                return Err(invalid(
                    file,
                    format!("link[{i}].name"),
                    "a unique name",
                    &l.name,
                ));
            }
        }
        Ok(ClientConfig {
            user: raw.user,
            key,
            trust,
            server_name: server_name(file, raw.server_name)?,
            state_dir: raw
                .state_dir
                .unwrap_or_else(|| PathBuf::from(super::DEFAULT_STATE_DIR)),
            socks_listen,
            http_listen,
            metrics_listen,
            metrics_token,
            metrics_tls,
            socks_users,
            tun,
            scheduler: super::scheduler(file, raw.scheduler.as_ref())?,
            links,
            session: super::session_limits(file, &raw.session)?,
            routes: super::route::routes(file, &raw.route)?,
            fallback_direct: match raw.fallback.as_deref() {
                None | Some("none") => false,
                Some("direct") => true,
                Some(other) => {
                    return Err(invalid(file, "fallback", "\"none\" or \"direct\"", other));
                }
            },
        })
    }
}

/// Whether `net` can be an interface's own address: a unicast address, and a prefix that does
/// not cover every destination (the kernel adds a route for the prefix).
fn usable_interface_address(net: &IpNet) -> bool {
    let special = match net.addr {
        IpAddr::V4(a) => {
            a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.is_broadcast()
        }
        IpAddr::V6(a) => a.is_unspecified() || a.is_loopback() || a.is_multicast(),
    };
    net.prefix > 0 && !special
}

/// `[tun]`: an interface name, an MTU from 576 (the least IPv4 host MTU) to 65535, and the
/// addresses and routes braid sets, if any.
fn tun(file: &Path, raw: &RawTun) -> Result<TunConfig, ConfigFileError> {
    if !crate::inbound::tun::device::valid_name(&raw.name) {
        return Err(invalid(
            file,
            "tun.name",
            "an interface name of 1 to 15 printable bytes without '/' or ':'",
            format!("{:?}", raw.name),
        ));
    }
    let mtu = raw.mtu.unwrap_or(i64::from(DEFAULT_TUN_MTU));
    let mtu = u16::try_from(mtu)
        .ok()
        .filter(|m| *m >= 576)
        .ok_or_else(|| invalid(file, "tun.mtu", "576..=65535 bytes", mtu))?;
    let mut address = Vec::with_capacity(raw.address.len());
    for (i, text) in raw.address.iter().enumerate() {
        let field = format!("tun.address[{i}]");
        let net: IpNet = text
            .parse()
            .map_err(|()| invalid(file, &field, "ADDRESS/PREFIX, e.g. \"10.7.0.1/24\"", text))?;
        if !usable_interface_address(&net) {
            return Err(invalid(
                file,
                &field,
                "a unicast address (not unspecified, loopback, multicast or broadcast) with a \
                 prefix of at least 1 (a /0 address would route every destination into the device)",
                text,
            ));
        }
        if address
            .iter()
            .any(|a: &IpNet| a.addr.is_ipv4() == net.addr.is_ipv4())
        {
            return Err(invalid(
                file,
                &field,
                "at most one IPv4 and one IPv6 address",
                text,
            ));
        }
        address.push(net);
    }
    if raw.routes.len() > MAX_TUN_ROUTES {
        return Err(invalid(
            file,
            "tun.routes",
            format!("at most {MAX_TUN_ROUTES} networks"),
            raw.routes.len(),
        ));
    }
    let mut routes = Vec::with_capacity(raw.routes.len());
    for (i, text) in raw.routes.iter().enumerate() {
        let net = text
            .parse::<IpNet>()
            .ok()
            .filter(IpNet::is_network)
            .ok_or_else(|| {
                invalid(
                    file,
                    format!("tun.routes[{i}]"),
                    "a network NETWORK/PREFIX with no host bits set, e.g. \"203.0.113.0/24\"",
                    text,
                )
            })?;
        routes.push(net);
    }
    let bounded = |field: &str, value: Option<i64>, default: usize, range| {
        let value = value.unwrap_or(i64::try_from(default).unwrap_or(i64::MAX));
        if !std::ops::RangeInclusive::contains(&range, &value) {
            return Err(invalid(
                file,
                field,
                format!("{}..={}", range.start(), range.end()),
                value,
            ));
        }
        usize::try_from(value).map_err(|_| invalid(file, field, "a size", value))
    };
    Ok(TunConfig {
        name: raw.name.clone(),
        mtu,
        address,
        routes,
        max_tcp: bounded(
            "tun.max_tcp",
            raw.max_tcp,
            crate::inbound::tun::DEFAULT_MAX_TCP,
            TUN_MAX_TCP_RANGE,
        )?,
        tcp_buffer: bounded(
            "tun.tcp_buffer",
            raw.tcp_buffer,
            crate::inbound::tun::DEFAULT_TCP_BUFFER,
            TUN_TCP_BUFFER_RANGE,
        )?,
        offload: raw.offload.unwrap_or(true),
    })
}

/// `server_name` (default `braid`): a name TLS can send, a DNS name or an IP address.
fn server_name(file: &Path, raw: Option<String>) -> Result<String, ConfigFileError> {
    let name = raw.unwrap_or_else(|| "braid".to_owned());
    if rustls::pki_types::ServerName::try_from(name.as_str()).is_err() {
        return Err(invalid(
            file,
            "server_name",
            "a DNS name or an IP address",
            &name,
        ));
    }
    Ok(name)
}

fn socks_users(file: &Path, raw: &RawSocks) -> Result<Vec<SocksUser>, ConfigFileError> {
    let mut socks_users = Vec::new();
    for (i, u) in raw.users.iter().enumerate() {
        if u.name.is_empty() || u.name.len() > 255 {
            return Err(invalid(
                file,
                format!("socks.users[{i}].name"),
                "1..=255 bytes",
                &u.name,
            ));
        }
        if u.password.is_empty() || u.password.len() > 255 {
            return Err(invalid(
                file,
                format!("socks.users[{i}].password"),
                "1..=255 bytes",
                "<redacted>",
            ));
        }
        socks_users.push(SocksUser {
            name: u.name.clone(),
            password: u.password.clone(),
        });
    }
    Ok(socks_users)
}

fn link(file: &Path, i: usize, raw: &RawLink) -> Result<LinkConfig, ConfigFileError> {
    let field = |f: &str| format!("link[{i}].{f}");
    if raw.name.is_empty() || raw.name.len() > 64 {
        return Err(invalid(
            file,
            field("name"),
            "a name of 1..=64 bytes",
            &raw.name,
        ));
    }
    let local_addr = match &raw.local_addr {
        Some(s) => Some(socket_addr(file, &field("local_addr"), s)?),
        None => None,
    };
    if let Some(dev) = &raw.interface
        && (dev.is_empty() || dev.len() > 15 || dev.contains('/'))
    {
        return Err(invalid(
            file,
            field("interface"),
            "a device name of 1..=15 bytes",
            dev,
        ));
    }
    if let (Some(dev), Some(addr)) = (&raw.interface, local_addr)
        && is_device_pattern(dev)
        && (!addr.ip().is_unspecified() || addr.port() != 0)
    {
        // Each device's link binds a socket of its own: one address or port cannot serve them.
        return Err(invalid(
            file,
            field("local_addr"),
            "0.0.0.0:0 or [::]:0 beside an interface pattern",
            addr,
        ));
    }
    let server = link_servers(file, &field("server"), &raw.server)?;
    let weight = u16::try_from(raw.weight)
        .ok()
        .filter(|&w| w >= 1)
        .ok_or_else(|| invalid(file, field("weight"), "1..=65535", raw.weight))?;
    let tier = match raw.tier.to_ascii_lowercase().as_str() {
        "primary" => Tier::Primary,
        "backup" => Tier::Backup,
        _ => {
            return Err(invalid(
                file,
                field("tier"),
                "\"primary\" or \"backup\"",
                &raw.tier,
            ));
        }
    };
    for (name, cap) in [
        ("rate_cap_mbps", raw.rate_cap_mbps),
        ("rate_cap_down_mbps", raw.rate_cap_down_mbps),
    ] {
        if let Some(cap) = cap
            && !(cap.is_finite() && cap > 0.0 && cap <= 100_000.0)
        {
            return Err(invalid(
                file,
                field(name),
                "a rate in (0, 100000] Mbit/s",
                cap,
            ));
        }
    }
    let congestion = match &raw.congestion {
        None => None,
        Some(name) => Some(name.parse().map_err(|_| {
            invalid(
                file,
                field("congestion"),
                "\"cubic\", \"newreno\", \"bbr\", \"lia\" or \"olia\"",
                name,
            )
        })?),
    };
    let fast_rejoin = match raw.fast_rejoin_s {
        None => DEFAULT_FAST_REJOIN,
        Some(s) => u64::try_from(s)
            .ok()
            .filter(|&s| s <= MAX_FAST_REJOIN_S)
            .map(Duration::from_secs)
            .ok_or_else(|| {
                invalid(
                    file,
                    field("fast_rejoin_s"),
                    format!("seconds in 0..={MAX_FAST_REJOIN_S}"),
                    s,
                )
            })?,
    };
    let budget = link_budget(file, &field, raw)?;
    Ok(LinkConfig {
        name: raw.name.clone(),
        local_addr,
        interface: raw.interface.clone(),
        interface_required: raw.interface_required,
        server,
        weight,
        tier,
        rate_cap_mbps: raw.rate_cap_mbps,
        rate_cap_down_mbps: raw.rate_cap_down_mbps,
        congestion,
        fast_rejoin,
        budget,
    })
}

/// A link's `budget_mib`, `budget_period` and `budget_reset_day`: the last two only with the
/// first, the day only for a monthly budget.
fn link_budget(
    file: &Path,
    field: &impl Fn(&str) -> String,
    raw: &RawLink,
) -> Result<Option<LinkBudget>, ConfigFileError> {
    let Some(mib) = raw.budget_mib else {
        if let Some(period) = &raw.budget_period {
            return Err(invalid(
                file,
                field("budget_period"),
                "budget_mib beside it",
                period,
            ));
        }
        if let Some(day) = raw.budget_reset_day {
            return Err(invalid(
                file,
                field("budget_reset_day"),
                "budget_mib beside it",
                day,
            ));
        }
        if let Some(then) = &raw.budget_spent {
            return Err(invalid(
                file,
                field("budget_spent"),
                "budget_mib beside it",
                then,
            ));
        }
        if let Some(zone) = &raw.budget_timezone {
            return Err(invalid(
                file,
                field("budget_timezone"),
                "budget_mib beside it",
                zone,
            ));
        }
        return Ok(None);
    };
    if !(1..=MAX_BUDGET_MIB).contains(&mib) {
        return Err(invalid(
            file,
            field("budget_mib"),
            format!("MiB in 1..={MAX_BUDGET_MIB}"),
            mib,
        ));
    }
    let period = raw.budget_period.as_deref().unwrap_or("month");
    let period = match (period, raw.budget_reset_day) {
        ("day", None) => BudgetPeriod::Day,
        ("day", Some(day)) => {
            return Err(invalid(
                file,
                field("budget_reset_day"),
                "budget_period = \"month\" beside it",
                day,
            ));
        }
        ("month", day) => BudgetPeriod::Month {
            reset_day: u8::try_from(day.unwrap_or(1))
                .ok()
                .filter(|d| (1..=28).contains(d))
                .ok_or_else(|| {
                    invalid(file, field("budget_reset_day"), "1..=28", day.unwrap_or(1))
                })?,
        },
        (other, _) => {
            return Err(invalid(
                file,
                field("budget_period"),
                "\"month\" or \"day\"",
                other,
            ));
        }
    };
    let when_spent = match raw.budget_spent.as_deref() {
        None | Some("leave") => WhenSpent::Leave,
        Some("backup") => WhenSpent::Backup,
        Some(other) => {
            return Err(invalid(
                file,
                field("budget_spent"),
                "\"leave\" or \"backup\"",
                other,
            ));
        }
    };
    let clock = match raw.budget_timezone.as_deref() {
        None | Some("local") => BudgetClock::Local,
        Some("UTC") => BudgetClock::Utc,
        Some(other) => {
            return Err(invalid(
                file,
                field("budget_timezone"),
                "\"local\" (the host's time zone) or \"UTC\"",
                other,
            ));
        }
    };
    Ok(Some(LinkBudget {
        bytes: mib as u64 * 1024 * 1024,
        period,
        when_spent,
        clock,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> String {
        format!(
            "user = \"alice\"\nkey = \"{}\"\nserver_fingerprint = \"{}\"\n\
             [[link]]\nname = \"wifi\"\nserver = \"127.0.0.1:4433\"\n",
            "11".repeat(32),
            "AB:".repeat(31) + "AB"
        )
    }

    #[test]
    fn an_interface_pattern_takes_no_local_address_of_its_own() {
        let with =
            |extra: &str| ClientConfig::parse(Path::new("c.toml"), &format!("{}{extra}", base()));
        let c = with("interface = \"usb*\"\n").unwrap();
        assert!(c.links[0].is_pattern());
        assert!(!with("interface = \"usb0\"\n").unwrap().links[0].is_pattern());
        assert!(with("interface = \"wlan?\"\n").unwrap().links[0].is_pattern());
        for ok in ["0.0.0.0:0", "[::]:0"] {
            let c = with(&format!("interface = \"usb*\"\nlocal_addr = \"{ok}\"\n")).unwrap();
            assert_eq!(c.links[0].local_addr, Some(ok.parse().unwrap()));
        }
        for bad in ["10.0.0.1:0", "0.0.0.0:5000"] {
            let e = with(&format!("interface = \"usb*\"\nlocal_addr = \"{bad}\"\n"))
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                format!(
                    "c.toml: link[0].local_addr: expected 0.0.0.0:0 or [::]:0 beside an \
                     interface pattern, got \"{bad}\""
                )
            );
        }
    }

    #[test]
    fn minimal_file_gets_defaults() {
        let c = ClientConfig::parse(Path::new("c.toml"), &base()).unwrap();
        assert_eq!(c.socks_listen, SocketAddr::from(([127, 0, 0, 1], 1080)));
        assert_eq!(c.http_listen, None);
        assert_eq!(c.metrics_listen, None);
        let metrics = |addr: &str| {
            let text = format!("metrics_listen = \"{addr}\"\n{}", base());
            ClientConfig::parse(Path::new("c.toml"), &text)
        };
        let on = metrics("[::1]:9464").unwrap().metrics_listen;
        assert_eq!(on, Some("[::1]:9464".parse().unwrap()));
        let e = metrics("9464").unwrap_err().to_string();
        assert!(
            e.starts_with("c.toml: metrics_listen: expected ip:port"),
            "{e}"
        );
        assert_eq!(c.links[0].tier, Tier::Primary);
        assert_eq!(c.links[0].weight, 1);
        assert_eq!(c.links[0].fast_rejoin, DEFAULT_FAST_REJOIN);
        let text = format!("{}fast_rejoin_s = 0\n", base());
        let c0 = ClientConfig::parse(Path::new("c.toml"), &text).unwrap();
        assert_eq!(c0.links[0].fast_rejoin, Duration::ZERO);
        assert_eq!(c.trust, ServerTrust::Fingerprint([0xab; 32]));
    }

    #[test]
    fn a_link_s_budget_is_mib_per_day_or_per_month_from_a_reset_day() {
        let with = |extra: &str| {
            let text = format!("{}{extra}\n", base());
            ClientConfig::parse(Path::new("c.toml"), &text)
        };
        assert_eq!(with("").unwrap().links[0].budget, None);
        assert_eq!(
            with("budget_mib = 2048").unwrap().links[0].budget,
            Some(LinkBudget {
                bytes: 2 << 30,
                period: BudgetPeriod::Month { reset_day: 1 },
                when_spent: WhenSpent::Leave,
                clock: BudgetClock::Local,
            })
        );
        assert_eq!(
            with(
                "budget_mib = 1\nbudget_period = \"month\"\nbudget_reset_day = 28\n\
                 budget_spent = \"backup\"\nbudget_timezone = \"UTC\""
            )
            .unwrap()
            .links[0]
                .budget,
            Some(LinkBudget {
                bytes: 1 << 20,
                period: BudgetPeriod::Month { reset_day: 28 },
                when_spent: WhenSpent::Backup,
                clock: BudgetClock::Utc,
            })
        );
        assert_eq!(
            with("budget_mib = 100\nbudget_period = \"day\"")
                .unwrap()
                .links[0]
                .budget
                .unwrap()
                .period,
            BudgetPeriod::Day
        );
        for (extra, error) in [
            (
                "budget_mib = 0",
                "link[0].budget_mib: expected MiB in 1..=1073741824, got \"0\"",
            ),
            (
                "budget_mib = -5",
                "link[0].budget_mib: expected MiB in 1..=",
            ),
            (
                "budget_mib = 1073741825",
                "link[0].budget_mib: expected MiB in 1..=",
            ),
            ("budget_mib = 1.5", "budget_mib"),
            (
                "budget_period = \"day\"",
                "link[0].budget_period: expected budget_mib beside it, got \"day\"",
            ),
            (
                "budget_reset_day = 3",
                "link[0].budget_reset_day: expected budget_mib beside it",
            ),
            (
                "budget_spent = \"backup\"",
                "link[0].budget_spent: expected budget_mib beside it, got \"backup\"",
            ),
            (
                "budget_timezone = \"UTC\"",
                "link[0].budget_timezone: expected budget_mib beside it, got \"UTC\"",
            ),
            (
                "budget_mib = 9\nbudget_timezone = \"Europe/Berlin\"",
                "link[0].budget_timezone: expected \"local\" (the host's time zone) or \"UTC\", \
                 got \"Europe/Berlin\"",
            ),
            (
                "budget_mib = 9\nbudget_spent = \"stop\"",
                "link[0].budget_spent: expected \"leave\" or \"backup\", got \"stop\"",
            ),
            (
                "budget_mib = 9\nbudget_period = \"week\"",
                "link[0].budget_period: expected \"month\" or \"day\", got \"week\"",
            ),
            (
                "budget_mib = 9\nbudget_reset_day = 29",
                "link[0].budget_reset_day: expected 1..=28, got \"29\"",
            ),
            (
                "budget_mib = 9\nbudget_reset_day = 0",
                "link[0].budget_reset_day: expected 1..=28",
            ),
            (
                "budget_mib = 9\nbudget_period = \"day\"\nbudget_reset_day = 2",
                "link[0].budget_reset_day: expected budget_period = \"month\" beside it",
            ),
        ] {
            let e = with(extra).unwrap_err().to_string();
            assert!(
                e.starts_with("c.toml: ") && e.contains(error),
                "{extra}: {e}"
            );
        }
    }

    #[test]
    fn a_link_s_server_is_an_address_or_a_list_of_them() {
        let with = |server: &str| {
            let text = base().replace("\"127.0.0.1:4433\"", server);
            ClientConfig::parse(Path::new("c.toml"), &text)
        };
        assert_eq!(
            with("[\"vps.example.net:443\", \"vps.example.net:4433\"]")
                .unwrap()
                .links[0]
                .server,
            ["vps.example.net:443", "vps.example.net:4433"]
        );
        for (server, error) in [
            ("[]", "c.toml: link[0].server: expected 1 to 4 addresses"),
            (
                "[\"a:1\", \"b:1\", \"c:1\", \"d:1\", \"e:1\"]",
                "c.toml: link[0].server: expected 1 to 4 addresses",
            ),
            (
                "[\"a:1\", \"b\"]",
                "c.toml: link[0].server[1]: expected host:port",
            ),
            (
                "[\"a:1\", 1]",
                "c.toml: link[0].server[1]: expected host:port",
            ),
            (
                "[\"a:1\", \"a:1\"]",
                "c.toml: link[0].server[1]: expected an address not listed before",
            ),
            (
                "4433",
                "c.toml: link[0].server: expected host:port, or a list of them",
            ),
        ] {
            let e = with(server).unwrap_err().to_string();
            assert!(e.starts_with(error), "{server}: {e}");
        }
    }

    #[test]
    fn errors_name_file_and_field() {
        let cases = [
            (
                "[[link]]\nname = \"lte\"\nserver = \"x\"\n",
                "link[1].server: expected host:port",
            ),
            (
                "[[link]]\nname = \"lte\"\nserver = \"h:1\"\ntier = \"gold\"\n",
                "link[1].tier",
            ),
            (
                "[[link]]\nname = \"wifi\"\nserver = \"h:1\"\n",
                "link[1].name",
            ),
            (
                "[[link]]\nname = \"lte\"\nserver = \"h:1\"\nrate_cap_mbps = -1.0\n",
                "link[1].rate_cap_mbps",
            ),
            (
                "[[link]]\nname = \"lte\"\nserver = \"h:1\"\ncongestion = \"vegas\"\n",
                "link[1].congestion: expected \"cubic\", \"newreno\", \"bbr\", \"lia\" or \"olia\", got \"vegas\"",
            ),
            (
                "[[link]]\nname = \"lte\"\nserver = \"h:1\"\nweight = 70000\n",
                "link[1].weight: expected 1..=65535, got \"70000\"",
            ),
            (
                "[[link]]\nname = \"lte\"\nserver = \"h:1\"\nweight = 0\n",
                "link[1].weight: expected 1..=65535, got \"0\"",
            ),
            (
                "[[link]]\nname = \"lte\"\nserver = \"h:1\"\nfast_rejoin_s = -1\n",
                "link[1].fast_rejoin_s: expected seconds in 0..=86400, got \"-1\"",
            ),
            (
                "[[link]]\nname = \"lte\"\nserver = \"h:1\"\nfast_rejoin_s = 86401\n",
                "link[1].fast_rejoin_s: expected seconds in 0..=86400, got \"86401\"",
            ),
            (
                "[[link]]\nname = \"lte\"\nserver = \"h:1\"\nfast_rejoin_s = 1.5\n",
                "fast_rejoin_s = 1.5\n   |                 ^^^\ninvalid type: floating point",
            ),
            ("bogus = 1\n", "bogus"),
            (
                "server_name = \"\"\n",
                "server_name: expected a DNS name or an IP address, got \"\"",
            ),
            ("server_name = \"a b\"\n", "server_name"),
        ];
        for (extra, want) in cases {
            let text = if !extra.starts_with("[[link]]") {
                format!("{extra}{}", base())
            } else {
                format!("{}{extra}", base())
            };
            let e = ClientConfig::parse(Path::new("c.toml"), &text)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("c.toml: ") && e.contains(want), "{e}");
        }
    }

    #[test]
    fn tun_table_is_checked() {
        let parse = |tun: &str| {
            ClientConfig::parse(Path::new("c.toml"), &format!("{}{tun}", base()))
                .map(|c| c.tun)
                .map_err(|e| e.to_string())
        };
        assert_eq!(parse(""), Ok(None));
        assert_eq!(
            parse("[tun]\nname = \"braid0\"\n"),
            Ok(Some(TunConfig::named("braid0")))
        );
        let small = parse("[tun]\nname = \"t\"\nmax_tcp = 64\ntcp_buffer = 16384\n")
            .unwrap()
            .unwrap();
        assert_eq!((small.max_tcp, small.tcp_buffer), (64, 16_384));
        assert!(small.offload);
        let plain = parse("[tun]\nname = \"t\"\noffload = false\n")
            .unwrap()
            .unwrap();
        assert!(!plain.offload);
        let err = parse("[tun]\nname = \"t\"\noffload = \"yes\"\n").unwrap_err();
        assert!(err.contains("offload"), "{err}");
        let full = parse(
            "[tun]\nname = \"braid0\"\naddress = [\"10.7.0.1/24\", \"fd07::1/64\"]\n\
             routes = [\"203.0.113.0/24\", \"2001:db8::/32\", \"0.0.0.0/0\"]\n",
        )
        .unwrap()
        .unwrap();
        let nets = |list: &[IpNet]| list.iter().map(IpNet::to_string).collect::<Vec<_>>();
        assert_eq!(nets(&full.address), ["10.7.0.1/24", "fd07::1/64"]);
        assert_eq!(
            nets(&full.routes),
            ["203.0.113.0/24", "2001:db8::/32", "0.0.0.0/0"]
        );
        let many = (0..=MAX_TUN_ROUTES)
            .map(|i| format!("\"10.{i}.0.0/16\""))
            .collect::<Vec<_>>()
            .join(", ");
        let many = format!("[tun]\nname = \"t\"\nroutes = [{many}]\n");
        assert_eq!(
            parse("[tun]\nname = \"braid0\"\nmtu = 1280\n")
                .unwrap()
                .unwrap()
                .mtu,
            1280
        );
        for (tun, want) in [
            (
                "[tun]\nname = \"a/b\"\n",
                "c.toml: tun.name: expected an interface name",
            ),
            ("[tun]\nname = \"\"\n", "tun.name"),
            ("[tun]\nname = \"sixteen-bytes-xx\"\n", "tun.name"),
            (
                "[tun]\nname = \"t\"\nmtu = 575\n",
                "tun.mtu: expected 576..=65535 bytes, got \"575\"",
            ),
            ("[tun]\nname = \"t\"\nmtu = 65536\n", "tun.mtu"),
            ("[tun]\nname = \"t\"\nmtu = -1\n", "tun.mtu"),
            ("[tun]\nmtu = 1500\n", "name"),
            ("[tun]\nname = \"t\"\naddress = \"10.0.0.1/8\"\n", "address"),
            (
                "[tun]\nname = \"t\"\naddress = [\"10.0.0.1\"]\n",
                "tun.address[0]: expected ADDRESS/PREFIX",
            ),
            (
                "[tun]\nname = \"t\"\naddress = [\"fd07::1/64\", \"10.0.0.1/33\"]\n",
                "tun.address[1]: expected ADDRESS/PREFIX",
            ),
            (
                "[tun]\nname = \"t\"\nmax_tcp = 0\n",
                "tun.max_tcp: expected 1..=65536, got \"0\"",
            ),
            (
                "[tun]\nname = \"t\"\ntcp_buffer = 4095\n",
                "tun.tcp_buffer: expected 4096..=4194304, got \"4095\"",
            ),
            (
                "[tun]\nname = \"t\"\ntcp_buffer = 4194305\n",
                "tun.tcp_buffer: expected 4096..=4194304",
            ),
            (
                "[tun]\nname = \"t\"\naddress = [\"10.0.0.1/0\"]\n",
                "tun.address[0]: expected a unicast address",
            ),
            (
                "[tun]\nname = \"t\"\naddress = [\"10.0.0.1/24\", \"fd07::1/0\"]\n",
                "tun.address[1]: expected a unicast address",
            ),
            (
                "[tun]\nname = \"t\"\naddress = [\"0.0.0.0/24\"]\n",
                "tun.address[0]: expected a unicast address",
            ),
            (
                "[tun]\nname = \"t\"\naddress = [\"127.0.0.2/8\"]\n",
                "tun.address[0]: expected a unicast address",
            ),
            (
                "[tun]\nname = \"t\"\naddress = [\"ff02::1/64\"]\n",
                "tun.address[0]: expected a unicast address",
            ),
            (
                "[tun]\nname = \"t\"\naddress = [\"255.255.255.255/32\"]\n",
                "tun.address[0]: expected a unicast address",
            ),
            (
                "[tun]\nname = \"t\"\naddress = [\"10.0.0.1/8\", \"10.0.0.2/8\"]\n",
                "tun.address[1]: expected at most one IPv4 and one IPv6 address",
            ),
            (
                "[tun]\nname = \"t\"\nroutes = [\"10.0.0.0/8\", \"10.0.0.1/8\"]\n",
                "tun.routes[1]: expected a network NETWORK/PREFIX with no host bits set",
            ),
            (
                "[tun]\nname = \"t\"\nroutes = [\"default\"]\n",
                "tun.routes[0]",
            ),
            (
                many.as_str(),
                "tun.routes: expected at most 64 networks, got \"65\"",
            ),
            (
                "[tun]\nname = \"t\"\nroute = [\"10.0.0.0/8\"]\n",
                "unknown field `route`",
            ),
        ] {
            let e = parse(tun).unwrap_err();
            assert!(e.contains(want), "{tun:?}: {e}");
        }
    }

    #[test]
    fn exactly_one_trust_anchor() {
        let text = base().replace(
            "server_fingerprint",
            "ca_file = \"ca.pem\"\nserver_fingerprint",
        );
        let e = ClientConfig::parse(Path::new("c.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("server_fingerprint/ca_file"), "{e}");
    }
}
