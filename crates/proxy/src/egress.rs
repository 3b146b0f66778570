//! The server's egress: every flow a client opens becomes a TCP connection (stream flows) or a
//! UDP relay (datagram flows) to the destination, under an address policy.
//!
//! Policy: the *resolved* address is checked, never the name. Loopback and unspecified
//! addresses (which reach loopback) need `allow_loopback`; private (RFC 1918), CGNAT
//! (100.64.0.0/10), link-local, ULA (fc00::/7), multicast, broadcast and reserved (240/4)
//! addresses need `allow_private`. IPv4-mapped IPv6 addresses are checked as IPv4.
//!
//! Convention on a stream flow: once the TCP connection is up the server writes one byte
//! [`CONNECTED`] before the destination's bytes; a failure resets the flow with
//! `RESET_BASE | <SOCKS5 reply code>` ([`reset_code`]), which the client maps back to a SOCKS5
//! reply or an HTTP 502. Datagram flows carry SOCKS5 UDP datagrams (RFC 1928 §7 header, then the
//! payload) in both directions: the destination on the way out, the source on the way back.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use tokio::net::{TcpStream, UdpSocket};
use tracing::{debug, info};

use crate::config::EgressPolicy;
use crate::icmp_echo::{self, EchoSocket, MAX_ECHO};
use crate::inbound::socks5::{self, Reply};
use crate::session::{FlowKind, Target};
use crate::transport::flow::{FlowHandle, FlowMsg, FlowWriter};
use crate::transport::relay::relay_tcp;

/// The byte a stream flow starts with once the destination is connected.
pub const CONNECTED: u8 = 0x00;
/// Reset codes carrying a SOCKS5 reply are `RESET_BASE | reply byte`.
pub const RESET_BASE: u64 = 0x5200;
/// Largest UDP payload relayed.
const MAX_UDP: usize = 65_536;
/// Names cached per UDP association.
const DNS_CACHE: usize = 64;

/// The reset code that tells the client `reply`.
pub fn reset_code(reply: Reply) -> u64 {
    RESET_BASE | u64::from(reply.byte())
}

/// The SOCKS5 reply a reset code stands for (general failure for unknown codes).
pub fn reply_for_reset(code: u64) -> Reply {
    const ALL: [Reply; 8] = [
        Reply::GeneralFailure,
        Reply::NotAllowed,
        Reply::NetworkUnreachable,
        Reply::HostUnreachable,
        Reply::ConnectionRefused,
        Reply::TtlExpired,
        Reply::CommandNotSupported,
        Reply::AddressTypeNotSupported,
    ];
    ALL.into_iter()
        .find(|r| reset_code(*r) == code)
        .unwrap_or(Reply::GeneralFailure)
}

fn v4_private(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || (o[0] == 100 && (o[1] & 0xc0) == 64)
        || o[0] >= 240
}

/// The IPv4 address an IPv6 address reaches on hosts that translate it: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated; not `::` or `::1`) and the
/// NAT64 well-known prefix (`64:ff9b::/96`, RFC 6052).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    match s[..6] {
        [0, 0, 0, 0, 0, 0xffff] | [0x64, 0xff9b, 0, 0, 0, 0] => Some(tail),
        [0, 0, 0, 0, 0, 0] if !v6.is_loopback() && !v6.is_unspecified() => Some(tail),
        _ => None,
    }
}

/// True when `policy` lets the server send to `addr`. In order: a port in `deny_ports` is
/// refused; an address in `deny_networks` is refused; one in `allow_networks` is allowed;
/// otherwise `allow_loopback` and `allow_private` decide for their ranges and the rest is
/// allowed. An IPv6 address that stands for an IPv4 one is matched against the networks in
/// both forms, and its ranges are the IPv4 address's.
pub fn allowed(policy: &EgressPolicy, addr: SocketAddr) -> bool {
    if policy.deny_ports.iter().any(|r| r.contains(addr.port())) {
        return false;
    }
    let raw = addr.ip();
    let ip = match raw {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(raw, IpAddr::V4),
        v4 => v4,
    };
    let listed =
        |nets: &[crate::config::IpNet]| nets.iter().any(|n| n.contains(ip) || n.contains(raw));
    if listed(&policy.deny_networks) {
        return false;
    }
    if listed(&policy.allow_networks) {
        return true;
    }
    let (loopback, private) = match ip {
        IpAddr::V4(v4) => (
            v4.is_loopback() || v4.is_unspecified() || v4.octets()[0] == 0,
            v4_private(v4),
        ),
        IpAddr::V6(v6) => (v6.is_loopback() || v6.is_unspecified(), v6_private(v6)),
    };
    (!loopback || policy.allow_loopback) && (!private || policy.allow_private)
}

fn v6_private(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || ip.is_multicast()
        // The NAT64 local-use prefix (64:ff9b:1::/48, RFC 8215): a site's own translator.
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1)
}

/// Resolves `target` and keeps the addresses the policy allows; `Err` carries the SOCKS5 reply.
pub async fn resolve(target: &Target, policy: &EgressPolicy) -> Result<Vec<SocketAddr>, Reply> {
    let all: Vec<SocketAddr> = match target {
        Target::Addr(a) => vec![*a],
        Target::Domain { name, port } => tokio::net::lookup_host((name.as_str(), *port))
            .await
            .map_err(|_| Reply::HostUnreachable)?
            .collect(),
    };
    if all.is_empty() {
        return Err(Reply::HostUnreachable);
    }
    let ok: Vec<SocketAddr> = all.into_iter().filter(|a| allowed(policy, *a)).collect();
    if ok.is_empty() {
        Err(Reply::NotAllowed)
    } else {
        Ok(ok)
    }
}

fn connect_reply(e: &std::io::Error) -> Reply {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => Reply::ConnectionRefused,
        std::io::ErrorKind::NetworkUnreachable => Reply::NetworkUnreachable,
        std::io::ErrorKind::HostUnreachable => Reply::HostUnreachable,
        std::io::ErrorKind::TimedOut => Reply::TtlExpired,
        _ => Reply::GeneralFailure,
    }
}

/// A TCP connection to `addr`, from a socket bound to `device` when one is named.
async fn tcp_connect(addr: SocketAddr, device: Option<&str>) -> std::io::Result<TcpStream> {
    let Some(device) = device else {
        return TcpStream::connect(addr).await;
    };
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    bind_device_logged(device, |d| socket.bind_device(d))?;
    socket.connect(addr).await
}

/// When a device could last not be bound to, seconds since the Unix epoch (0: never).
static DEVICE_WARNED_AT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Binds a socket to `device` with `bind`; a failure (no such device, or no `CAP_NET_RAW`) is
/// logged at `warn`, at most once a minute, naming the device (each flow that meets it fails
/// alike, and is counted by its inbound).
fn bind_device_logged(
    device: &str,
    bind: impl FnOnce(Option<&[u8]>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    let result = bind(Some(device.as_bytes()));
    if let Err(e) = &result {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = DEVICE_WARNED_AT.load(Ordering::Relaxed);
        if now >= last + 60
            && DEVICE_WARNED_AT
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                device,
                error = %e,
                "a direct route's interface cannot be used: its flows fail (binding a socket \
                 to a device needs the device up and CAP_NET_RAW; logged at most once a minute)"
            );
        }
    }
    result
}

async fn connect(
    target: &Target,
    policy: &EgressPolicy,
    device: Option<&str>,
) -> Result<TcpStream, Reply> {
    let work = async {
        let addrs = resolve(target, policy).await?;
        let mut last = Reply::HostUnreachable;
        for addr in addrs {
            match tcp_connect(addr, device).await {
                Ok(s) => return Ok(s),
                Err(e) => last = connect_reply(&e),
            }
        }
        Err(last)
    };
    tokio::time::timeout(policy.connect_timeout, work)
        .await
        .unwrap_or(Err(Reply::TtlExpired))
}

/// The server's egress policy as the last reload left it: a stream flow reads it once, when it
/// connects; a UDP association at every datagram it sends (so a reload that refuses a
/// destination stops the datagrams of associations already open) and for its idle timeout.
pub type PolicySlot = Arc<RwLock<Arc<EgressPolicy>>>;

fn current(slot: &PolicySlot) -> Arc<EgressPolicy> {
    slot.read().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Serves a flow the client opened (called by the session driver; spawns a task).
pub fn spawn_flow(flow: FlowHandle, kind: FlowKind, target: Target, policy: PolicySlot) {
    tokio::spawn(async move {
        match kind {
            FlowKind::Stream => stream_flow(flow, target, &current(&policy), Origin::Server).await,
            FlowKind::Datagram => udp_flow(flow, policy, Origin::Server).await,
            FlowKind::Ping => ping_flow(flow, target, policy, Origin::Server).await,
        }
    });
}

/// The policy of a client's `direct` route: every destination (the client's own network
/// included, which is what such routes are for), the server's default timeouts.
fn direct_policy() -> EgressPolicy {
    EgressPolicy {
        allow_private: true,
        allow_loopback: true,
        ..EgressPolicy::default()
    }
}

/// [`direct_policy`] in a slot of its own (a direct UDP relay or ping reads it as the server's
/// read theirs).
fn direct_slot() -> PolicySlot {
    Arc::new(RwLock::new(Arc::new(direct_policy())))
}

/// Serves, from this host, a flow a client's `direct` route took out of the session: a TCP
/// connection or UDP relay as the server's egress makes them, to any destination, from sockets
/// bound to `device` when one is named (spawns a task). The flow's other end is the inbound's
/// (a [`crate::transport::pipe`]); a failure reaches it as the reset the server would send.
pub(crate) fn spawn_direct(
    flow: FlowHandle,
    kind: FlowKind,
    target: Target,
    device: Option<String>,
) {
    tokio::spawn(async move {
        let device = device.as_deref();
        match kind {
            FlowKind::Stream => {
                stream_flow(flow, target, &direct_policy(), Origin::Direct(device)).await
            }
            FlowKind::Datagram => udp_flow(flow, direct_slot(), Origin::Direct(device)).await,
            FlowKind::Ping => ping_flow(flow, target, direct_slot(), Origin::Direct(device)).await,
        }
    });
}

/// Where an egress flow is connected from.
#[derive(Clone, Copy, Debug)]
enum Origin<'a> {
    /// The server, for a client's flow.
    Server,
    /// A client, for its own `direct` route, from sockets bound to this device when named.
    Direct(Option<&'a str>),
}

impl<'a> Origin<'a> {
    /// The device its sockets are bound to, if any.
    fn device(self) -> Option<&'a str> {
        match self {
            Origin::Server => None,
            Origin::Direct(device) => device,
        }
    }
}

async fn stream_flow(flow: FlowHandle, target: Target, policy: &EgressPolicy, origin: Origin<'_>) {
    let id = flow.id;
    let (writer, reader) = flow.split();
    let device = origin.device();
    let stream = match connect(&target, policy, device).await {
        Ok(s) => s,
        Err(reply) => {
            match origin {
                Origin::Server => {
                    info!(flow = id.0, %target, reason = reply.name(), "egress refused or failed");
                }
                // Logged by the client's inbound, with the application's request.
                Origin::Direct(_) => {}
            }
            let _ = writer.reset(reset_code(reply)).await;
            return;
        }
    };
    if writer
        .write(Bytes::from_static(&[CONNECTED]))
        .await
        .is_err()
    {
        return;
    }
    if let Err(e) = relay_tcp(stream, writer, reader, Bytes::new(), Bytes::new()).await {
        debug!(flow = id.0, error = %e, "egress relay ended");
    }
}

struct UdpEgress {
    v4: UdpSocket,
    v6: Option<UdpSocket>,
    names: HashMap<(String, u16), SocketAddr>,
    /// Whether a refused destination was logged (once per association: datagrams are many).
    refusal_logged: bool,
}

impl UdpEgress {
    /// Sends `datagram` under `policy` (the slot's as the datagram came).
    async fn send(&mut self, datagram: &[u8], policy: &EgressPolicy) {
        let Ok((target, offset)) = socks5::parse_udp_datagram(datagram) else {
            return;
        };
        let addr = match &target {
            // A name resolved before: its address checked again (a reload may refuse it now).
            Target::Domain { name, port } if self.names.contains_key(&(name.clone(), *port)) => {
                self.names
                    .get(&(name.clone(), *port))
                    .copied()
                    .filter(|a| allowed(policy, *a))
            }
            _ => match resolve(&target, policy).await {
                Ok(addrs) => {
                    let a = addrs.first().copied();
                    if let (Target::Domain { name, port }, Some(a)) = (&target, a)
                        && self.names.len() < DNS_CACHE
                    {
                        self.names.insert((name.clone(), *port), a);
                    }
                    a
                }
                Err(reply) => {
                    if !self.refusal_logged {
                        self.refusal_logged = true;
                        info!(%target, reason = reply.name(), "UDP egress refused or failed (further ones on this association are not logged)");
                    }
                    None
                }
            },
        };
        let Some(addr) = addr else {
            return;
        };
        let socket = if addr.is_ipv4() {
            Some(&self.v4)
        } else {
            self.v6.as_ref()
        };
        if let Some(s) = socket {
            let _ = s.send_to(&datagram[offset..], addr).await;
        }
    }
}

async fn forward_back(writer: &FlowWriter, buf: &mut [u8], n: usize, from: SocketAddr) {
    let mut out = vec![0u8; socks5::MAX_REPLY + 4 + n];
    let Ok(h) = socks5::encode_udp_header(&Target::Addr(from), &mut out) else {
        return;
    };
    out[h..h + n].copy_from_slice(&buf[..n]);
    out.truncate(h + n);
    let _ = writer.send_datagram(Bytes::from(out)).await;
}

/// A UDP socket on `ip`'s any-port, bound to `device` when one is named.
async fn udp_socket(ip: IpAddr, device: Option<&str>) -> std::io::Result<UdpSocket> {
    let socket = UdpSocket::bind((ip, 0)).await?;
    if let Some(device) = device {
        bind_device_logged(device, |d| socket.bind_device(d))?;
    }
    Ok(socket)
}

async fn udp_flow(flow: FlowHandle, slot: PolicySlot, origin: Origin<'_>) {
    let (writer, mut reader) = flow.split();
    let device = origin.device();
    let Ok(v4) = udp_socket(Ipv4Addr::UNSPECIFIED.into(), device).await else {
        let _ = writer.reset(reset_code(Reply::GeneralFailure)).await;
        return;
    };
    let v6 = udp_socket(Ipv6Addr::UNSPECIFIED.into(), device).await.ok();
    let mut egress = UdpEgress {
        v4,
        v6,
        names: HashMap::new(),
        // A client's direct relay leaves its refusals unlogged (the inbound counts them).
        refusal_logged: matches!(origin, Origin::Direct(_)),
    };
    let mut buf4 = vec![0u8; MAX_UDP];
    let mut buf6 = vec![0u8; MAX_UDP];
    loop {
        // The idle timeout before the wait; the policy when a datagram has come (a reload may
        // have happened during the wait).
        let idle = current(&slot).udp_idle_timeout;
        let v6_recv = async {
            match &egress.v6 {
                Some(s) => s.recv_from(&mut buf6).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            msg = tokio::time::timeout(idle, reader.recv()) => match msg {
                Ok(Some(FlowMsg::Datagram(d))) => egress.send(&d, &current(&slot)).await,
                Ok(Some(FlowMsg::Data(_))) => {}
                Ok(Some(FlowMsg::Finished | FlowMsg::Reset(_)) | None) => return,
                Err(_) => {
                    let _ = writer.reset(reset_code(Reply::TtlExpired)).await;
                    return;
                }
            },
            r = egress.v4.recv_from(&mut buf4) => {
                if let Ok((n, from)) = r {
                    forward_back(&writer, &mut buf4, n, from).await;
                }
            }
            r = v6_recv => {
                if let Ok((n, from)) = r {
                    forward_back(&writer, &mut buf6, n, from).await;
                }
            }
        }
    }
}

/// Whether no ICMP socket could be opened yet (warned once per process).
static ECHO_SOCKET_WARNED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether `policy` lets echoes go to `to`.
fn echo_allowed(policy: &EgressPolicy, to: IpAddr) -> bool {
    policy.icmp_echo && allowed(policy, SocketAddr::new(to, 0))
}

/// A ping flow: its echo requests sent to the target's address from an [`EchoSocket`], the
/// replies sent back, until the client ends the flow or nothing moves for the policy's
/// `udp_idle_timeout`. A destination the policy refuses (or `icmp_echo = false`) resets the
/// flow, and a reload that refuses it later stops its requests.
async fn ping_flow(flow: FlowHandle, target: Target, slot: PolicySlot, origin: Origin<'_>) {
    let id = flow.id;
    let (writer, mut reader) = flow.split();
    let to = match target {
        Target::Addr(a) => match a.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        },
        Target::Domain { .. } => {
            let _ = writer
                .reset(reset_code(Reply::AddressTypeNotSupported))
                .await;
            return;
        }
    };
    if !echo_allowed(&current(&slot), to) {
        info!(flow = id.0, %to, "ICMP echo refused by the egress policy");
        let _ = writer.reset(reset_code(Reply::NotAllowed)).await;
        return;
    }
    let device = origin.device();
    let socket = match EchoSocket::open_on(to, device) {
        Ok(s) => s,
        Err(e) => {
            if !ECHO_SOCKET_WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    error = %e,
                    "no ICMP socket can be opened, so pings are dropped: allow this user's \
                     group in net.ipv4.ping_group_range, or give the daemon CAP_NET_RAW (logged \
                     once)"
                );
            }
            let _ = writer.reset(reset_code(Reply::GeneralFailure)).await;
            return;
        }
    };
    debug!(flow = id.0, %to, kind = ?socket.kind(), "ICMP echo flow");
    let mut buf = vec![0u8; MAX_ECHO];
    loop {
        let idle = current(&slot).udp_idle_timeout;
        tokio::select! {
            msg = tokio::time::timeout(idle, reader.recv()) => match msg {
                Ok(Some(FlowMsg::Datagram(d))) => {
                    if !echo_allowed(&current(&slot), to) {
                        continue;
                    }
                    if let Some((seq, data)) = icmp_echo::parse_datagram(&d) {
                        let _ = socket.send(seq, data).await;
                    }
                }
                Ok(Some(FlowMsg::Data(_))) => {}
                Ok(Some(FlowMsg::Finished | FlowMsg::Reset(_)) | None) => return,
                Err(_) => {
                    let _ = writer.reset(reset_code(Reply::TtlExpired)).await;
                    return;
                }
            },
            r = socket.recv(&mut buf) => {
                if let Ok((seq, data)) = r {
                    let _ = writer.send_datagram(icmp_echo::datagram(seq, &buf[data])).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 443)
    }

    #[test]
    fn default_policy_refuses_local_ranges() {
        let p = EgressPolicy::default();
        for ip in [
            "127.0.0.1",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.1.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "::10.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b::a00:1",
            "64:ff9b::192.168.1.1",
            "64:ff9b:1::8.8.8.8",
        ] {
            assert!(!allowed(&p, at(ip)), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "100.128.0.1",
            "2001:db8::1",
            "172.32.0.1",
            "64:ff9b::8.8.8.8",
            "::8.8.8.8",
        ] {
            assert!(allowed(&p, at(ip)), "{ip}");
        }
    }

    #[test]
    fn switches_open_their_ranges_only() {
        let lo = EgressPolicy {
            allow_loopback: true,
            ..EgressPolicy::default()
        };
        assert!(allowed(&lo, at("127.0.0.1")));
        assert!(!allowed(&lo, at("10.0.0.1")));
        let private = EgressPolicy {
            allow_private: true,
            ..EgressPolicy::default()
        };
        assert!(allowed(&private, at("10.0.0.1")));
        assert!(!allowed(&private, at("::1")));
    }

    #[test]
    fn listed_networks_and_ports_come_before_the_ranges() {
        let net = |s: &str| s.parse::<crate::config::IpNet>().unwrap();
        let p = EgressPolicy {
            allow_networks: vec![
                net("192.168.1.0/24"),
                net("127.0.0.53/32"),
                net("fd00:1::/64"),
            ],
            deny_networks: vec![
                net("192.168.1.1/32"),
                net("203.0.113.0/24"),
                net("64:ff9b::/96"),
            ],
            deny_ports: vec![
                crate::config::PortRange {
                    first: 25,
                    last: 25,
                },
                crate::config::PortRange {
                    first: 6881,
                    last: 6889,
                },
            ],
            ..EgressPolicy::default()
        };
        // Allowed by the list, though private or loopback.
        for ip in [
            "192.168.1.10",
            "127.0.0.53",
            "fd00:1::7",
            "::ffff:192.168.1.10",
        ] {
            assert!(allowed(&p, at(ip)), "{ip}");
        }
        // The ranges still hold outside the list.
        for ip in ["192.168.2.1", "127.0.0.1", "fd00:2::1", "10.0.0.1"] {
            assert!(!allowed(&p, at(ip)), "{ip}");
        }
        // Denied: a deny wins over an allow, matches the IPv4 form of a mapped address, and
        // an IPv6 prefix in its own form (NAT64's, whatever IPv4 address it carries).
        for ip in [
            "192.168.1.1",
            "203.0.113.9",
            "::ffff:203.0.113.9",
            "64:ff9b::8.8.8.8",
        ] {
            assert!(!allowed(&p, at(ip)), "{ip}");
        }
        assert!(allowed(&p, at("8.8.8.8")));
        // Ports: refused wherever they go, an allowed network included.
        for port in [25, 6881, 6885, 6889] {
            assert!(
                !allowed(&p, SocketAddr::new([8, 8, 8, 8].into(), port)),
                "{port}"
            );
            assert!(
                !allowed(&p, SocketAddr::new([192, 168, 1, 10].into(), port)),
                "{port}"
            );
        }
        for port in [24, 26, 6880, 6890, 443] {
            assert!(
                allowed(&p, SocketAddr::new([8, 8, 8, 8].into(), port)),
                "{port}"
            );
        }
    }

    #[test]
    fn reset_codes_round_trip() {
        for r in [
            Reply::NotAllowed,
            Reply::ConnectionRefused,
            Reply::HostUnreachable,
            Reply::TtlExpired,
        ] {
            assert_eq!(reply_for_reset(reset_code(r)), r);
        }
        assert_eq!(reply_for_reset(7), Reply::GeneralFailure);
    }
}
