//! Addresses and networks with a prefix length (`10.7.0.1/24`, `fd07::/64`), as the client's
//! `[tun]` and the server's `[egress]` name them.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address or a network with its prefix length: `10.7.0.1/24`, `fd07::/64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    /// The address (for a route, the network: host bits zero).
    pub addr: IpAddr,
    /// The prefix length: 0..=32 for IPv4, 0..=128 for IPv6.
    pub prefix: u8,
}

impl IpNet {
    /// Whether `ip` is in the network (an address of the other family never is).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                (u32::from(net) ^ u32::from(ip)) & mask32(self.prefix) == 0
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                (u128::from(net) ^ u128::from(ip)) & mask128(self.prefix) == 0
            }
            _ => false,
        }
    }

    /// Whether the bits past the prefix are all zero (a network, as a route needs).
    pub fn is_network(&self) -> bool {
        match self.addr {
            IpAddr::V4(a) => u32::from(a) & !mask32(self.prefix) == 0,
            IpAddr::V6(a) => u128::from(a) & !mask128(self.prefix) == 0,
        }
    }
}

pub(crate) fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

pub(crate) fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl FromStr for IpNet {
    type Err = ();

    /// `ADDRESS/PREFIX`, the prefix in range for the address family.
    fn from_str(s: &str) -> Result<IpNet, ()> {
        let (addr, prefix) = s.split_once('/').ok_or(())?;
        let addr: IpAddr = addr.parse().map_err(|_| ())?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(());
        }
        let prefix: u8 = prefix.parse().map_err(|_| ())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(());
        }
        Ok(IpNet { addr, prefix })
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_network_contains_its_own_family_s_addresses_under_its_prefix() {
        let net: IpNet = "192.168.1.0/24".parse().unwrap();
        assert!(net.contains("192.168.1.0".parse().unwrap()));
        assert!(net.contains("192.168.1.255".parse().unwrap()));
        assert!(!net.contains("192.168.2.1".parse().unwrap()));
        assert!(!net.contains("::ffff:192.168.1.1".parse().unwrap()));
        let all: IpNet = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.9".parse().unwrap()));
        assert!(!all.contains("::1".parse().unwrap()));
        let host: IpNet = "10.0.0.7/32".parse().unwrap();
        assert!(host.contains("10.0.0.7".parse().unwrap()));
        assert!(!host.contains("10.0.0.6".parse().unwrap()));
        let v6: IpNet = "fd00:1::/64".parse().unwrap();
        assert!(v6.contains("fd00:1::1234".parse().unwrap()));
        assert!(!v6.contains("fd00:2::1".parse().unwrap()));
        assert!(
            "::/0"
                .parse::<IpNet>()
                .unwrap()
                .contains("::1".parse().unwrap())
        );
    }

    #[test]
    fn networks_parse_with_prefixes_in_range() {
        let n: IpNet = "10.7.0.1/24".parse().unwrap();
        assert_eq!((n.addr, n.prefix), (IpAddr::from([10, 7, 0, 1]), 24));
        assert!(!n.is_network());
        assert!("10.7.0.0/24".parse::<IpNet>().unwrap().is_network());
        assert!("0.0.0.0/0".parse::<IpNet>().unwrap().is_network());
        assert!("10.7.0.1/32".parse::<IpNet>().unwrap().is_network());
        assert!("fd07::/64".parse::<IpNet>().unwrap().is_network());
        assert!(!"fd07::1/64".parse::<IpNet>().unwrap().is_network());
        assert!("::/0".parse::<IpNet>().unwrap().is_network());
        assert_eq!(
            "2001:db8::1/128".parse::<IpNet>().unwrap().to_string(),
            "2001:db8::1/128"
        );
        for bad in [
            "10.7.0.1",
            "10.7.0.1/",
            "10.7.0.1/33",
            "10.7.0.1/+8",
            "10.7.0.1/-1",
            "fd07::/129",
            "braid/24",
            "/24",
            "10.7.0.1/24/1",
            "10.7.0.1/ 24",
            "10.7.0.1/256",
        ] {
            assert!(bad.parse::<IpNet>().is_err(), "{bad}");
        }
        assert_eq!(mask32(0), 0);
        assert_eq!(mask32(24), 0xffff_ff00);
        assert_eq!(mask32(32), u32::MAX);
        assert_eq!(mask128(0), 0);
        assert_eq!(mask128(128), u128::MAX);
    }
}
