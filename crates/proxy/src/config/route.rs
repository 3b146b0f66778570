//! The client's `[[route]]` tables: which destinations go through the server (the default),
//! which the client connects itself (`direct`: a printer on the LAN, a site that refuses the
//! server's address) and which it refuses (`block`). The first table that matches a
//! destination decides; see `docs/config.md`, *Routes*.

use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;

use super::{ConfigFileError, IpNet, PortRange, invalid};
#[cfg(test)]
use crate::session::Target;

/// Most `[[route]]` tables.
pub const MAX_ROUTES: usize = 64;
/// Most entries of a route's `networks`, and of its `domains`.
pub const MAX_ROUTE_ENTRIES: usize = 256;
/// Most entries of a route's `ports`.
pub const MAX_ROUTE_PORTS: usize = 64;

/// What a route does with the destinations it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteAction {
    /// Through the session and the server (what no route matches goes this way too).
    Server,
    /// Connected by the client itself, over the host's own routes (or `interface`).
    Direct,
    /// Refused: a stream is answered "not allowed", a datagram dropped.
    Block,
}

impl RouteAction {
    /// The value in the file.
    pub fn name(self) -> &'static str {
        match self {
            RouteAction::Server => "server",
            RouteAction::Direct => "direct",
            RouteAction::Block => "block",
        }
    }
}

/// A `domains` entry: `example.com` matches that name and every name under it,
/// `*.example.com` only the names under it. Kept lower-case, without a final dot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainPattern {
    /// The name, lower-case, without `*.` or a final dot.
    pub name: String,
    /// Only the names under `name` (the entry began with `*.`).
    pub below_only: bool,
}

impl DomainPattern {
    /// Whether `host` (lower-case, no final dot) is matched.
    #[cfg(test)]
    fn matches(&self, host: &str) -> bool {
        match host.strip_suffix(self.name.as_str()) {
            Some("") => !self.below_only,
            Some(head) => head.ends_with('.'),
            None => false,
        }
    }
}

impl std::fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.below_only {
            f.write_str("*.")?;
        }
        f.write_str(&self.name)
    }
}

/// One `[[route]]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// What it does with what it matches.
    pub action: RouteAction,
    /// Destination networks (addresses are matched against these; names never are).
    pub networks: Vec<IpNet>,
    /// Destination names (names are matched against these; addresses never are).
    pub domains: Vec<DomainPattern>,
    /// Destination ports; empty: any.
    pub ports: Vec<PortRange>,
    /// The device a `direct` route's connections are bound to (`SO_BINDTODEVICE`).
    pub interface: Option<String>,
}

impl Route {
    /// A route with `action` for every destination (no networks, domains or ports listed yet).
    pub fn every(action: RouteAction) -> Route {
        Route {
            action,
            networks: Vec::new(),
            domains: Vec::new(),
            ports: Vec::new(),
            interface: None,
        }
    }

    /// Whether `target` is matched: its port is one of `ports` (when listed), and it is an
    /// address in one of `networks` or a name under one of `domains` (when either is listed).
    /// A name that is an address literal counts as the address. IPv6 addresses that stand for
    /// an IPv4 one (`::ffff:a.b.c.d`) match its IPv4 networks too. The rule read entry by
    /// entry: the reference the daemon's index (`inbound::route`) is tested against.
    #[cfg(test)]
    pub fn matches(&self, target: &Target) -> bool {
        self.matches_learned(target, None)
    }

    /// [`Route::matches`], an address target also matching `domains` by `learned`, the name a
    /// DNS answer gave its address (see [`crate::inbound::dns_names`]).
    #[cfg(test)]
    pub fn matches_learned(&self, target: &Target, learned: Option<&str>) -> bool {
        if !self.ports.is_empty() && !self.ports.iter().any(|r| r.contains(target.port())) {
            return false;
        }
        if self.networks.is_empty() && self.domains.is_empty() {
            return true;
        }
        let literal = match target {
            Target::Addr(a) => Some(a.ip()),
            Target::Domain { name, .. } => name.parse::<IpAddr>().ok(),
        };
        match (literal, target) {
            (Some(ip), _) => {
                let v4 = match ip {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
                    IpAddr::V4(_) => None,
                };
                self.networks
                    .iter()
                    .any(|n| n.contains(ip) || v4.is_some_and(|v4| n.contains(v4)))
                    || learned.is_some_and(|name| self.name_matches(name))
            }
            (None, Target::Domain { name, .. }) => self.name_matches(name),
            (None, Target::Addr(_)) => false,
        }
    }

    /// Whether `name` is under one of `domains`.
    #[cfg(test)]
    fn name_matches(&self, name: &str) -> bool {
        let host = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        self.domains.iter().any(|d| d.matches(&host))
    }

    /// A short account of what the route matches: `2 networks, 1 domain, ports 22, 80-90`
    /// (`every destination` when it lists nothing), and its interface.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        let count = |n: usize, one: &str, many: &str| match n {
            1 => format!("1 {one}"),
            n => format!("{n} {many}"),
        };
        if !self.networks.is_empty() {
            parts.push(count(self.networks.len(), "network", "networks"));
        }
        if !self.domains.is_empty() {
            parts.push(count(self.domains.len(), "domain", "domains"));
        }
        if self.networks.is_empty() && self.domains.is_empty() {
            parts.push("every destination".to_owned());
        }
        if !self.ports.is_empty() {
            let ports: Vec<String> = self.ports.iter().map(ToString::to_string).collect();
            parts.push(format!("ports {}", ports.join(", ")));
        }
        let mut text = parts.join(", ");
        if let Some(dev) = &self.interface {
            text.push_str(&format!(" via {dev}"));
        }
        text
    }
}

/// The first of `routes` that matches `target` (an address also by `learned`, the name a DNS
/// answer gave it), with its index, read route by route: the reference of the daemon's index.
#[cfg(test)]
pub fn find_route<'a>(
    routes: &'a [Route],
    target: &Target,
    learned: Option<&str>,
) -> Option<(usize, &'a Route)> {
    routes
        .iter()
        .enumerate()
        .find(|(_, r)| r.matches_learned(target, learned))
}

/// The routes no destination can reach, each with the earlier route that takes every
/// destination it could match (one listing no networks or domains, on every port or on all of
/// its ports): `(shadowed, by)`, indices into `routes`.
pub fn shadowed(routes: &[Route]) -> Vec<(usize, usize)> {
    let covers = |earlier: &Route, later: &Route| {
        earlier.networks.is_empty()
            && earlier.domains.is_empty()
            && (earlier.ports.is_empty()
                || (!later.ports.is_empty()
                    && later.ports.iter().all(|l| {
                        earlier
                            .ports
                            .iter()
                            .any(|e| e.first <= l.first && l.last <= e.last)
                    })))
    };
    (0..routes.len())
        .filter_map(|j| {
            (0..j)
                .find(|&i| covers(&routes[i], &routes[j]))
                .map(|i| (j, i))
        })
        .collect()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    action: String,
    #[serde(default)]
    networks: Vec<String>,
    #[serde(default)]
    domains: Vec<String>,
    #[serde(default)]
    ports: Vec<toml::Value>,
    interface: Option<String>,
}

/// Checks the `[[route]]` tables.
pub(super) fn routes(file: &Path, raw: &[RawRoute]) -> Result<Vec<Route>, ConfigFileError> {
    if raw.len() > MAX_ROUTES {
        return Err(invalid(
            file,
            "route",
            format!("at most {MAX_ROUTES} [[route]] tables"),
            raw.len(),
        ));
    }
    raw.iter()
        .enumerate()
        .map(|(i, r)| route(file, i, r))
        .collect()
}

fn route(file: &Path, i: usize, raw: &RawRoute) -> Result<Route, ConfigFileError> {
    let field = |name: &str| format!("route[{i}].{name}");
    let action = match raw.action.as_str() {
        "server" => RouteAction::Server,
        "direct" => RouteAction::Direct,
        "block" => RouteAction::Block,
        other => {
            return Err(invalid(
                file,
                field("action"),
                "\"server\", \"direct\" or \"block\"",
                other,
            ));
        }
    };
    let networks = super::networks(file, &field("networks"), MAX_ROUTE_ENTRIES, &raw.networks)?;
    if raw.domains.len() > MAX_ROUTE_ENTRIES {
        return Err(invalid(
            file,
            field("domains"),
            format!("at most {MAX_ROUTE_ENTRIES} names"),
            raw.domains.len(),
        ));
    }
    let domains = raw
        .domains
        .iter()
        .enumerate()
        .map(|(j, text)| {
            domain_pattern(text).ok_or_else(|| {
                let expected = match text.parse::<IpAddr>() {
                    Ok(_) => "a name (an address goes in `networks`)",
                    Err(_) => {
                        "a domain name such as \"example.com\" (it and the names under it) or \
                         \"*.example.com\" (only the names under it)"
                    }
                };
                invalid(file, format!("route[{i}].domains[{j}]"), expected, text)
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ports = super::port_ranges(file, &field("ports"), MAX_ROUTE_PORTS, &raw.ports)?
        .into_iter()
        .map(|(first, last)| PortRange { first, last })
        .collect();
    if let Some(dev) = &raw.interface {
        if action != RouteAction::Direct {
            return Err(invalid(
                file,
                field("interface"),
                "no interface beside this action (only a \"direct\" route connects itself)",
                dev,
            ));
        }
        if !crate::inbound::tun::device::valid_name(dev) {
            return Err(invalid(
                file,
                field("interface"),
                "a device name of 1 to 15 printable bytes without '/' or ':'",
                dev,
            ));
        }
    }
    Ok(Route {
        action,
        networks,
        domains,
        ports,
        interface: raw.interface.clone(),
    })
}

/// A `domains` entry checked and normalised: labels of letters, digits, `-` and `_` (1 to 63
/// bytes each, 253 in all), an optional leading `*.` and final dot; not an address.
fn domain_pattern(text: &str) -> Option<DomainPattern> {
    let (rest, below_only) = match text.strip_prefix("*.") {
        Some(rest) => (rest, true),
        None => (text, false),
    };
    let name = rest.strip_suffix('.').unwrap_or(rest).to_ascii_lowercase();
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let ok = (1..=253).contains(&name.len())
        && name.split('.').all(label_ok)
        && name.parse::<IpAddr>().is_err();
    ok.then_some(DomainPattern { name, below_only })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn addr(s: &str) -> Target {
        Target::Addr(s.parse::<SocketAddr>().unwrap())
    }

    fn name(n: &str, port: u16) -> Target {
        Target::Domain {
            name: n.to_owned(),
            port,
        }
    }

    fn route(action: RouteAction) -> Route {
        Route::every(action)
    }

    #[test]
    fn a_domain_entry_covers_the_name_and_those_under_it_at_label_boundaries() {
        let plain = domain_pattern("Example.COM.").unwrap();
        assert_eq!(
            (plain.name.as_str(), plain.below_only),
            ("example.com", false)
        );
        assert!(plain.matches("example.com"));
        assert!(plain.matches("www.example.com"));
        assert!(plain.matches("a.b.example.com"));
        assert!(!plain.matches("badexample.com"));
        assert!(!plain.matches("example.com.evil"));
        let below = domain_pattern("*.example.com").unwrap();
        assert!(!below.matches("example.com"));
        assert!(below.matches("cdn.example.com"));
        assert_eq!(below.to_string(), "*.example.com");
        for bad in [
            "",
            ".",
            "*.",
            "a..b",
            "exa mple.com",
            "*.*.x",
            "10.0.0.1",
            "::1",
            "a/b",
        ] {
            assert!(domain_pattern(bad).is_none(), "{bad:?}");
        }
        assert!(domain_pattern(&"a".repeat(64)).is_none());
        assert!(domain_pattern("printer.lan").is_some());
        assert!(domain_pattern("_sip._udp.example.com").is_some());
    }

    #[test]
    fn addresses_match_networks_and_names_match_domains_under_the_ports() {
        let mut r = route(RouteAction::Direct);
        r.networks = vec![
            "192.168.0.0/16".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ];
        r.domains = vec![domain_pattern("lan").unwrap()];
        assert!(r.matches(&addr("192.168.1.7:80")));
        assert!(r.matches(&addr("[::ffff:192.168.1.7]:80")));
        assert!(r.matches(&addr("[fd12::1]:443")));
        assert!(!r.matches(&addr("10.0.0.1:80")));
        assert!(r.matches(&name("NAS.lan.", 445)));
        assert!(
            r.matches(&name("192.168.4.4", 445)),
            "an address literal as a name"
        );
        assert!(!r.matches(&name("example.com", 80)));
        r.ports = vec![PortRange {
            first: 80,
            last: 90,
        }];
        assert!(r.matches(&addr("192.168.1.7:85")));
        assert!(!r.matches(&addr("192.168.1.7:443")));
        assert!(!r.matches(&name("nas.lan", 445)));
        // Nothing but ports: every destination on them.
        let mut ssh = route(RouteAction::Block);
        ssh.ports = vec![PortRange {
            first: 22,
            last: 22,
        }];
        assert!(ssh.matches(&name("example.com", 22)));
        assert!(ssh.matches(&addr("[2001:db8::1]:22")));
        assert!(!ssh.matches(&addr("[2001:db8::1]:23")));
        assert!(route(RouteAction::Server).matches(&name("x", 1)));
    }

    #[test]
    fn the_first_route_that_matches_decides() {
        let mut server = route(RouteAction::Server);
        server.domains = vec![domain_pattern("example.com").unwrap()];
        let direct = route(RouteAction::Direct);
        let routes = vec![server, direct];
        let first = |target: &Target, learned| find_route(&routes, target, learned).map(|r| r.0);
        assert_eq!(first(&name("www.example.com", 443), None), Some(0));
        assert_eq!(first(&name("other.org", 443), None), Some(1));
        assert!(find_route(&routes[..1], &name("other.org", 443), None).is_none());
        // An address matches the domains by the name a DNS answer gave it.
        let learned = addr("203.0.113.5:443");
        assert_eq!(first(&learned, None), Some(1));
        assert_eq!(first(&learned, Some("CDN.Example.com")), Some(0));
        assert_eq!(first(&learned, Some("example.org")), Some(1));
        assert_eq!(routes[1].summary(), "every destination");
        assert_eq!(routes[0].summary(), "1 domain");
    }

    fn parse(text: &str) -> Result<Vec<Route>, String> {
        #[derive(Deserialize)]
        struct File {
            route: Vec<RawRoute>,
        }
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        routes(Path::new("c.toml"), &file.route).map_err(|e| e.to_string())
    }

    #[test]
    fn route_tables_are_checked_by_name() {
        let ok = parse(
            "[[route]]\naction = \"direct\"\nnetworks = [\"10.0.0.0/8\", \"fd00::1\"]\n\
             domains = [\"*.corp.example\"]\nports = [22, \"8000-8080\"]\ninterface = \"eth0\"\n",
        )
        .unwrap();
        assert_eq!(ok[0].action, RouteAction::Direct);
        assert_eq!(
            ok[0].summary(),
            "2 networks, 1 domain, ports 22, 8000-8080 via eth0"
        );
        for (text, message) in [
            (
                "[[route]]\naction = \"proxy\"\n",
                "c.toml: route[0].action: expected \"server\", \"direct\" or \"block\", got \"proxy\"",
            ),
            (
                "[[route]]\naction = \"block\"\ndomains = [\"ok.example\", \"10.1.1.1\"]\n",
                "c.toml: route[0].domains[1]: expected a name (an address goes in `networks`), \
                 got \"10.1.1.1\"",
            ),
            (
                "[[route]]\naction = \"direct\"\nnetworks = [\"10.0.0.1/8\"]\n",
                "c.toml: route[0].networks[0]: expected a network",
            ),
            (
                "[[route]]\naction = \"server\"\ninterface = \"eth0\"\n",
                "c.toml: route[0].interface: expected no interface beside this action",
            ),
            (
                "[[route]]\naction = \"direct\"\ninterface = \"a/b\"\n",
                "c.toml: route[0].interface: expected a device name",
            ),
            (
                "[[route]]\naction = \"direct\"\nports = [0]\n",
                "c.toml: route[0].ports[0]: expected a port",
            ),
            (
                "[[route]]\naction = \"direct\"\nbogus = 1\n",
                "unknown field",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(message), "{e}\nwanted: {message}");
        }
        let many = "[[route]]\naction = \"block\"\n".repeat(MAX_ROUTES + 1);
        assert!(parse(&many).unwrap_err().contains("at most 64"));
    }

    #[test]
    fn a_route_after_one_that_takes_every_destination_is_found_shadowed() {
        let ports = |p: &[(u16, u16)]| {
            p.iter()
                .map(|&(first, last)| PortRange { first, last })
                .collect()
        };
        let mut lan = route(RouteAction::Direct);
        lan.networks = vec!["10.0.0.0/8".parse().unwrap()];
        let mut mail = route(RouteAction::Block);
        mail.ports = ports(&[(25, 25), (465, 587)]);
        let mut smtp = route(RouteAction::Direct);
        smtp.ports = ports(&[(587, 587)]);
        let mut web = route(RouteAction::Direct);
        web.ports = ports(&[(443, 443)]);
        let all = route(RouteAction::Server);
        let after_all = lan.clone();
        let routes = vec![lan, mail, smtp, web, all, after_all];
        assert_eq!(shadowed(&routes), [(2, 1), (5, 4)]);
        assert!(shadowed(&routes[..2]).is_empty());
    }
}
