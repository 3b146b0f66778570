//! The routes laid out so that a decision does not read every entry of every table: each
//! route's networks as sorted address ranges (a binary search per route), and every route's
//! names in one map from name to the set of routes listing it (a bit per route: at most 64),
//! looked up once per suffix of the destination's name. The same answer as
//! `config::route::find_route`, the rule read route by route (a test compares them on random
//! tables). The `routes` bench
//! (`route/way/*`, a destination no route matches, 25 Nov 2026, load 1.5, two runs): 64 tables
//! of 256 networks 14.1 µs by the scan, 0.61 µs here; 64 tables of 256 domains 47.6 µs and
//! 0.105 µs; no routes 10-12 ns, three small tables 14-17 ns either way.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::config::route::MAX_ROUTES;
use crate::config::{IpNet, Route};
use crate::session::Target;

const _: () = assert!(MAX_ROUTES <= 64);

/// A set of routes, by index: bit `i` is route `i`.
type Routes = u64;

/// The routes' networks and names, for [`Index::find`].
#[derive(Debug, Default)]
pub(super) struct Index {
    /// Routes that list neither networks nor domains: every destination (on their ports).
    every: Routes,
    /// Each route's IPv4 networks, as merged sorted inclusive ranges.
    v4: Vec<Vec<(u32, u32)>>,
    /// Each route's IPv6 networks, likewise.
    v6: Vec<Vec<(u128, u128)>>,
    /// The routes listing a name, for it and the names under it.
    names: HashMap<String, Routes>,
    /// The routes listing a name as `*.name`, for the names under it only.
    below: HashMap<String, Routes>,
}

impl Index {
    pub(super) fn new(routes: &[Route]) -> Index {
        let mut index = Index::default();
        for (i, r) in routes.iter().enumerate() {
            let bit = 1 << i;
            if r.networks.is_empty() && r.domains.is_empty() {
                index.every |= bit;
            }
            index.v4.push(ranges(&r.networks, |ip| match ip {
                IpAddr::V4(v4) => Some((u32::from(v4), 32)),
                IpAddr::V6(_) => None,
            }));
            index.v6.push(ranges(&r.networks, |ip| match ip {
                IpAddr::V6(v6) => Some((u128::from(v6), 128)),
                IpAddr::V4(_) => None,
            }));
            for d in &r.domains {
                let map = if d.below_only {
                    &mut index.below
                } else {
                    &mut index.names
                };
                *map.entry(d.name.clone()).or_default() |= bit;
            }
        }
        index
    }

    /// The first of `routes` (the routes this index was made of) that matches `target`, an
    /// address also by `learned`: as `config::route::find_route`.
    pub(super) fn find(
        &self,
        routes: &[Route],
        target: &Target,
        learned: Option<&str>,
    ) -> Option<usize> {
        let literal = match target {
            Target::Addr(a) => Some(a.ip()),
            Target::Domain { name, .. } => name.parse::<IpAddr>().ok(),
        };
        let mut candidates = self.every;
        match (literal, target) {
            (Some(ip), _) => {
                candidates |= self.by_address(ip);
                if let IpAddr::V6(v6) = ip
                    && let Some(v4) = v6.to_ipv4_mapped()
                {
                    candidates |= self.by_address(IpAddr::V4(v4));
                }
                if let Some(name) = learned {
                    candidates |= self.by_name(name);
                }
            }
            (None, Target::Domain { name, .. }) => candidates |= self.by_name(name),
            (None, Target::Addr(_)) => {}
        }
        let port = target.port();
        let mut left = candidates;
        while left != 0 {
            let i = left.trailing_zeros() as usize;
            left &= left - 1;
            let ports = &routes[i].ports;
            if ports.is_empty() || ports.iter().any(|r| r.contains(port)) {
                return Some(i);
            }
        }
        None
    }

    /// The routes whose networks hold `ip`.
    fn by_address(&self, ip: IpAddr) -> Routes {
        let mut found = 0;
        match ip {
            IpAddr::V4(v4) => {
                let x = u32::from(v4);
                for (i, r) in self.v4.iter().enumerate() {
                    found |= Routes::from(holds(r, x)) << i;
                }
            }
            IpAddr::V6(v6) => {
                let x = u128::from(v6);
                for (i, r) in self.v6.iter().enumerate() {
                    found |= Routes::from(holds(r, x)) << i;
                }
            }
        }
        found
    }

    /// The routes whose domains take `name` (any case, a final dot or not).
    fn by_name(&self, name: &str) -> Routes {
        if self.names.is_empty() && self.below.is_empty() {
            return 0;
        }
        let name = name.strip_suffix('.').unwrap_or(name);
        let lower;
        let mut host = match name.bytes().any(|b| b.is_ascii_uppercase()) {
            true => {
                lower = name.to_ascii_lowercase();
                lower.as_str()
            }
            false => name,
        };
        let mut found = self.names.get(host).copied().unwrap_or(0);
        while let Some(dot) = host.find('.') {
            host = &host[dot + 1..];
            found |= self.names.get(host).copied().unwrap_or(0);
            found |= self.below.get(host).copied().unwrap_or(0);
        }
        found
    }
}

/// The networks of one family (`bits` picks the address and its width) as sorted inclusive
/// ranges, those that overlap merged.
fn ranges<T>(networks: &[IpNet], bits: impl Fn(IpAddr) -> Option<(T, u32)>) -> Vec<(T, T)>
where
    T: Copy + Ord + std::ops::BitOr<Output = T> + std::ops::Shr<u32, Output = T> + Max,
{
    let mut all: Vec<(T, T)> = networks
        .iter()
        .filter_map(|n| {
            let (start, width) = bits(n.addr)?;
            let prefix = u32::from(n.prefix).min(width);
            let span = match prefix {
                p if p == width => T::ZERO,
                p => T::MAX >> p,
            };
            Some((start, start | span))
        })
        .collect();
    all.sort_unstable();
    let mut merged: Vec<(T, T)> = Vec::with_capacity(all.len());
    for (start, end) in all {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// The largest value and zero of an address's integer.
trait Max {
    const MAX: Self;
    const ZERO: Self;
}

impl Max for u32 {
    const MAX: u32 = u32::MAX;
    const ZERO: u32 = 0;
}

impl Max for u128 {
    const MAX: u128 = u128::MAX;
    const ZERO: u128 = 0;
}

/// Whether one of the sorted, disjoint `ranges` holds `x`.
fn holds<T: Copy + Ord>(ranges: &[(T, T)], x: T) -> bool {
    let after = ranges.partition_point(|&(start, _)| start <= x);
    after > 0 && x <= ranges[after - 1].1
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::config::route::find_route;
    use crate::config::{DomainPattern, PortRange, RouteAction};

    /// xorshift64*: a seeded stream.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as usize % n
        }
    }

    const NETWORKS: [&str; 10] = [
        "10.0.0.0/8",
        "10.1.0.0/16",
        "10.1.2.3/32",
        "192.168.0.0/24",
        "0.0.0.0/0",
        "128.0.0.0/1",
        "fd00::/8",
        "::/0",
        "2001:db8::/32",
        "::ffff:10.0.0.0/104",
    ];
    const NAMES: [&str; 6] = [
        "example.com",
        "www.example.com",
        "com",
        "lan",
        "a.lan",
        "x.y.z",
    ];
    const ADDRESSES: [&str; 9] = [
        "10.1.2.3",
        "10.9.9.9",
        "192.168.0.77",
        "192.168.1.1",
        "200.1.1.1",
        "fd12::1",
        "2001:db8::5",
        "::ffff:10.1.2.3",
        "::1",
    ];
    const HOSTS: [&str; 8] = [
        "example.com",
        "WWW.Example.COM.",
        "deep.www.example.com",
        "badexample.com",
        "printer.lan",
        "lan",
        "x.y.z",
        "10.1.2.3",
    ];

    /// Random tables and destinations: the index finds what the table-by-table scan finds.
    #[test]
    fn the_index_decides_as_the_scan_does() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2_000 {
            let routes: Vec<Route> = (0..1 + rng.below(8))
                .map(|_| Route {
                    action: RouteAction::Direct,
                    networks: (0..rng.below(3))
                        .map(|_| NETWORKS[rng.below(NETWORKS.len())].parse().unwrap())
                        .collect(),
                    domains: (0..rng.below(3))
                        .map(|_| DomainPattern {
                            name: NAMES[rng.below(NAMES.len())].to_owned(),
                            below_only: rng.below(3) == 0,
                        })
                        .collect(),
                    ports: (0..rng.below(2))
                        .map(|_| {
                            let first = [22, 80, 443][rng.below(3)];
                            PortRange {
                                first,
                                last: first + [0, 100][rng.below(2)],
                            }
                        })
                        .collect(),
                    interface: None,
                })
                .collect();
            let index = Index::new(&routes);
            let port = [22, 80, 150, 443, 8080][rng.below(5)];
            let target = match rng.below(2) {
                0 => Target::Addr(std::net::SocketAddr::new(
                    ADDRESSES[rng.below(ADDRESSES.len())].parse().unwrap(),
                    port,
                )),
                _ => Target::Domain {
                    name: HOSTS[rng.below(HOSTS.len())].to_owned(),
                    port,
                },
            };
            let learned = [None, Some("www.example.com"), Some("Printer.LAN")][rng.below(3)];
            let scan = find_route(&routes, &target, learned).map(|(i, _)| i);
            assert_eq!(
                index.find(&routes, &target, learned),
                scan,
                "{target:?} {learned:?} {routes:#?}"
            );
        }
    }

    #[test]
    fn ranges_merge_and_hold_their_bounds() {
        let nets: Vec<IpNet> = ["10.0.0.0/8", "10.1.0.0/16", "11.0.0.0/8", "12.0.0.1/32"]
            .iter()
            .map(|n| n.parse().unwrap())
            .collect();
        let v4 = ranges(&nets, |ip| match ip {
            IpAddr::V4(v4) => Some((u32::from(v4), 32)),
            IpAddr::V6(_) => None,
        });
        // 10.1/16 inside 10/8 merged; 11/8 beside it kept apart (both are searched alike).
        let want = [
            (0x0a00_0000, 0x0aff_ffff),
            (0x0b00_0000, 0x0bff_ffff),
            (0x0c00_0001, 0x0c00_0001),
        ];
        assert_eq!(v4, want);
        assert!(holds(&v4, 0x0a00_0000) && holds(&v4, 0x0bff_ffff));
        assert!(!holds(&v4, 0x09ff_ffff) && !holds(&v4, 0x0c00_0000));
        assert!(holds(&v4, 0x0c00_0001) && !holds(&v4, 0x0c00_0002));
        let all: Vec<IpNet> = vec!["0.0.0.0/0".parse().unwrap()];
        let every = ranges(&all, |ip| match ip {
            IpAddr::V4(v4) => Some((u32::from(v4), 32)),
            IpAddr::V6(_) => None,
        });
        assert_eq!(every, [(0, u32::MAX)]);
    }
}
