//! SOCKS5 (RFC 1928) with username/password authentication (RFC 1929): the greeting, the
//! sub-negotiation, the request, the reply and the UDP ASSOCIATE datagram header.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::session::frame::Target;

/// The protocol version byte of SOCKS5.
pub const VERSION: u8 = 5;
/// Version byte of the RFC 1929 username/password sub-negotiation.
pub const USERPASS_VERSION: u8 = 1;

/// Longest greeting: version, count, 255 methods.
pub const MAX_GREETING: usize = 2 + 255;
/// Longest request: header, domain of 255 bytes, port.
pub const MAX_REQUEST: usize = 4 + 1 + 255 + 2;
/// Longest reply we encode (IPv6 bound address).
pub const MAX_REPLY: usize = 4 + 16 + 2;

/// Authentication methods braid speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// 0x00: no authentication.
    NoAuth,
    /// 0x02: username/password (RFC 1929).
    UserPass,
}

impl Method {
    /// The method's byte on the wire.
    pub fn byte(self) -> u8 {
        match self {
            Method::NoAuth => 0x00,
            Method::UserPass => 0x02,
        }
    }
}

/// The method byte meaning "no acceptable methods".
pub const NO_ACCEPTABLE_METHOD: u8 = 0xff;

/// A client's greeting: which of braid's methods it offers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Greeting {
    /// It offers no authentication.
    pub no_auth: bool,
    /// It offers username/password.
    pub user_pass: bool,
}

impl Greeting {
    /// True when the client offers `method`.
    pub fn offers(&self, method: Method) -> bool {
        match method {
            Method::NoAuth => self.no_auth,
            Method::UserPass => self.user_pass,
        }
    }
}

/// RFC 1929 credentials, borrowed from the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credentials<'a> {
    /// User name (1..=255 bytes).
    pub username: &'a [u8],
    /// Password (1..=255 bytes).
    pub password: &'a [u8],
}

/// The request's command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// 0x01: open a TCP connection to the target.
    Connect,
    /// 0x02: accept one inbound connection (not supported by braid; answered with
    /// [`Reply::CommandNotSupported`]).
    Bind,
    /// 0x03: relay UDP datagrams.
    UdpAssociate,
}

/// A client's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// What to do.
    pub command: Command,
    /// Where to (for UDP ASSOCIATE: the address the client will send from, often all zeros).
    pub target: Target,
}

/// Reply codes (RFC 1928 §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// 0x00
    Succeeded,
    /// 0x01
    GeneralFailure,
    /// 0x02
    NotAllowed,
    /// 0x03
    NetworkUnreachable,
    /// 0x04
    HostUnreachable,
    /// 0x05
    ConnectionRefused,
    /// 0x06
    TtlExpired,
    /// 0x07
    CommandNotSupported,
    /// 0x08
    AddressTypeNotSupported,
}

impl Reply {
    /// The reply's byte on the wire.
    pub fn byte(self) -> u8 {
        match self {
            Reply::Succeeded => 0,
            Reply::GeneralFailure => 1,
            Reply::NotAllowed => 2,
            Reply::NetworkUnreachable => 3,
            Reply::HostUnreachable => 4,
            Reply::ConnectionRefused => 5,
            Reply::TtlExpired => 6,
            Reply::CommandNotSupported => 7,
            Reply::AddressTypeNotSupported => 8,
        }
    }

    /// The reply's meaning, as RFC 1928 words it.
    pub fn name(self) -> &'static str {
        match self {
            Reply::Succeeded => "succeeded",
            Reply::GeneralFailure => "general SOCKS server failure",
            Reply::NotAllowed => "connection not allowed by ruleset",
            Reply::NetworkUnreachable => "network unreachable",
            Reply::HostUnreachable => "host unreachable",
            Reply::ConnectionRefused => "connection refused",
            Reply::TtlExpired => "TTL expired",
            Reply::CommandNotSupported => "command not supported",
            Reply::AddressTypeNotSupported => "address type not supported",
        }
    }
}

/// Malformed SOCKS5 input, naming what was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Socks5Error {
    /// The version byte is not 5 (or 1 in the RFC 1929 sub-negotiation).
    #[error("SOCKS version byte {0:#04x} is not supported")]
    BadVersion(u8),
    /// The greeting lists no methods.
    #[error("SOCKS greeting offers no authentication methods")]
    NoMethods,
    /// The command byte is unknown.
    #[error("SOCKS command {0:#04x} is unknown")]
    BadCommand(u8),
    /// The reserved byte is not zero.
    #[error("SOCKS reserved byte is {0:#04x}, expected 0")]
    BadReserved(u8),
    /// The address type byte is unknown.
    #[error("SOCKS address type {0:#04x} is unknown")]
    BadAddressType(u8),
    /// A domain name is empty or not valid UTF-8 text.
    #[error("SOCKS domain name is empty, not UTF-8 or holds control characters")]
    BadDomain,
    /// A username or password is empty.
    #[error("SOCKS username/password field is empty")]
    EmptyCredential,
    /// A UDP datagram is a fragment (braid does not reassemble SOCKS fragments).
    #[error("SOCKS UDP fragment {0} is not supported")]
    Fragmented(u8),
    /// A UDP datagram is shorter than its header.
    #[error("SOCKS UDP datagram is truncated")]
    Truncated,
    /// The output buffer is too small.
    #[error("buffer too small for SOCKS message")]
    BufferTooSmall,
}

/// Parses the greeting `VER NMETHODS METHODS…`.
pub fn parse_greeting(buf: &[u8]) -> Result<Option<(Greeting, usize)>, Socks5Error> {
    let Some(&version) = buf.first() else {
        return Ok(None);
    };
    if version != VERSION {
        return Err(Socks5Error::BadVersion(version));
    }
    let Some(&count) = buf.get(1) else {
        return Ok(None);
    };
    if count == 0 {
        return Err(Socks5Error::NoMethods);
    }
    let end = 2 + usize::from(count);
    let Some(methods) = buf.get(2..end) else {
        return Ok(None);
    };
    let mut greeting = Greeting::default();
    for &m in methods {
        greeting.no_auth |= m == Method::NoAuth.byte();
        greeting.user_pass |= m == Method::UserPass.byte();
    }
    Ok(Some((greeting, end)))
}

/// Encodes the method selection `VER METHOD` (`None`: no acceptable method).
pub fn encode_method_selection(method: Option<Method>) -> [u8; 2] {
    [VERSION, method.map_or(NO_ACCEPTABLE_METHOD, Method::byte)]
}

/// Parses the RFC 1929 sub-negotiation `VER ULEN UNAME PLEN PASSWD`.
pub fn parse_credentials(buf: &[u8]) -> Result<Option<(Credentials<'_>, usize)>, Socks5Error> {
    let Some(&version) = buf.first() else {
        return Ok(None);
    };
    if version != USERPASS_VERSION {
        return Err(Socks5Error::BadVersion(version));
    }
    let Some((username, after_user)) = length_prefixed(buf, 1) else {
        return Ok(None);
    };
    let Some((password, end)) = length_prefixed(buf, after_user) else {
        return Ok(None);
    };
    if username.is_empty() || password.is_empty() {
        return Err(Socks5Error::EmptyCredential);
    }
    Ok(Some((Credentials { username, password }, end)))
}

/// The RFC 1929 status reply: `01 00` on success, `01 01` on failure.
pub fn encode_credentials_status(ok: bool) -> [u8; 2] {
    [USERPASS_VERSION, u8::from(!ok)]
}

/// A one-byte length and that many bytes at `at`, and the offset after them.
fn length_prefixed(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let len = usize::from(*buf.get(at)?);
    let end = at + 1 + len;
    Some((buf.get(at + 1..end)?, end))
}

/// Parses the request `VER CMD RSV ATYP DST.ADDR DST.PORT`.
pub fn parse_request(buf: &[u8]) -> Result<Option<(Request, usize)>, Socks5Error> {
    let Some(header) = buf.get(..3) else {
        return Ok(None);
    };
    if header[0] != VERSION {
        return Err(Socks5Error::BadVersion(header[0]));
    }
    let command = match header[1] {
        1 => Command::Connect,
        2 => Command::Bind,
        3 => Command::UdpAssociate,
        other => return Err(Socks5Error::BadCommand(other)),
    };
    if header[2] != 0 {
        return Err(Socks5Error::BadReserved(header[2]));
    }
    Ok(parse_address(buf, 3)?.map(|(target, end)| (Request { command, target }, end)))
}

/// Parses `ATYP ADDR PORT` at `at`; `Ok(None)` when more bytes are needed.
fn parse_address(buf: &[u8], at: usize) -> Result<Option<(Target, usize)>, Socks5Error> {
    let Some(&atyp) = buf.get(at) else {
        return Ok(None);
    };
    let start = at + 1;
    let (host, after): (Option<Host<'_>>, usize) = match atyp {
        1 => (
            buf.get(start..start + 4)
                .map(|b| Host::Ip(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))),
            start + 4,
        ),
        4 => (
            buf.get(start..start + 16).map(|b| {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(b);
                Host::Ip(IpAddr::V6(Ipv6Addr::from(octets)))
            }),
            start + 16,
        ),
        3 => match length_prefixed(buf, start) {
            Some((name, end)) => {
                let name = std::str::from_utf8(name).map_err(|_| Socks5Error::BadDomain)?;
                if name.is_empty() || name.chars().any(char::is_control) {
                    return Err(Socks5Error::BadDomain);
                }
                (Some(Host::Domain(name)), end)
            }
            None => (None, start + 1),
        },
        other => return Err(Socks5Error::BadAddressType(other)),
    };
    let (Some(host), Some(port)) = (host, buf.get(after..after + 2)) else {
        return Ok(None);
    };
    let port = u16::from_be_bytes([port[0], port[1]]);
    let target = match host {
        Host::Ip(ip) => Target::Addr(SocketAddr::new(ip, port)),
        Host::Domain(name) => Target::Domain {
            name: name.to_owned(),
            port,
        },
    };
    Ok(Some((target, after + 2)))
}

enum Host<'a> {
    Ip(IpAddr),
    Domain(&'a str),
}

/// Writes `ATYP ADDR PORT` for `target` into `out`; returns the bytes written.
fn encode_address(target: &Target, out: &mut [u8]) -> Result<usize, Socks5Error> {
    let mut w = Cursor { out, at: 0 };
    match target {
        Target::Addr(SocketAddr::V4(a)) => {
            w.put(&[1])?;
            w.put(&a.ip().octets())?;
            w.put(&a.port().to_be_bytes())?;
        }
        Target::Addr(SocketAddr::V6(a)) => {
            w.put(&[4])?;
            w.put(&a.ip().octets())?;
            w.put(&a.port().to_be_bytes())?;
        }
        Target::Domain { name, port } => {
            let len = u8::try_from(name.len()).map_err(|_| Socks5Error::BadDomain)?;
            if len == 0 {
                return Err(Socks5Error::BadDomain);
            }
            w.put(&[3, len])?;
            w.put(name.as_bytes())?;
            w.put(&port.to_be_bytes())?;
        }
    }
    Ok(w.at)
}

struct Cursor<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Cursor<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), Socks5Error> {
        let end = self.at + bytes.len();
        let dst = self
            .out
            .get_mut(self.at..end)
            .ok_or(Socks5Error::BufferTooSmall)?;
        dst.copy_from_slice(bytes);
        self.at = end;
        Ok(())
    }
}

/// Encodes the reply `VER REP RSV ATYP BND.ADDR BND.PORT` into `out`; returns its length.
pub fn encode_reply(reply: Reply, bound: SocketAddr, out: &mut [u8]) -> Result<usize, Socks5Error> {
    let head = out.get_mut(..3).ok_or(Socks5Error::BufferTooSmall)?;
    head.copy_from_slice(&[VERSION, reply.byte(), 0]);
    let rest = out.get_mut(3..).ok_or(Socks5Error::BufferTooSmall)?;
    Ok(3 + encode_address(&Target::Addr(bound), rest)?)
}

/// Parses a UDP ASSOCIATE datagram `RSV(2) FRAG ATYP DST.ADDR DST.PORT DATA`: the destination
/// and the offset where the payload starts.
pub fn parse_udp_datagram(buf: &[u8]) -> Result<(Target, usize), Socks5Error> {
    let header = buf.get(..3).ok_or(Socks5Error::Truncated)?;
    if header[0] != 0 || header[1] != 0 {
        return Err(Socks5Error::BadReserved(header[0] | header[1]));
    }
    if header[2] != 0 {
        return Err(Socks5Error::Fragmented(header[2]));
    }
    parse_address(buf, 3)?.ok_or(Socks5Error::Truncated)
}

/// Writes the UDP ASSOCIATE header for a datagram from `source` into `out`; returns its length
/// (the payload follows).
pub fn encode_udp_header(source: &Target, out: &mut [u8]) -> Result<usize, Socks5Error> {
    let head = out.get_mut(..3).ok_or(Socks5Error::BufferTooSmall)?;
    head.copy_from_slice(&[0, 0, 0]);
    let rest = out.get_mut(3..).ok_or(Socks5Error::BufferTooSmall)?;
    Ok(3 + encode_address(source, rest)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn greeting_and_method_selection() {
        assert_eq!(parse_greeting(&[5]), Ok(None));
        assert_eq!(parse_greeting(&[5, 2, 0]), Ok(None));
        let (g, n) = parse_greeting(&[5, 2, 0, 2, 0xaa]).unwrap().unwrap();
        assert_eq!(n, 4);
        assert!(g.offers(Method::NoAuth) && g.offers(Method::UserPass));
        assert_eq!(parse_greeting(&[4, 1, 0]), Err(Socks5Error::BadVersion(4)));
        assert_eq!(parse_greeting(&[5, 0]), Err(Socks5Error::NoMethods));
        assert_eq!(encode_method_selection(None), [5, 0xff]);
        assert_eq!(encode_method_selection(Some(Method::UserPass)), [5, 2]);
    }

    #[test]
    fn credentials() {
        let msg = [1, 3, b'b', b'o', b'b', 2, b'p', b'w'];
        for cut in 0..msg.len() {
            assert_eq!(parse_credentials(&msg[..cut]), Ok(None), "cut at {cut}");
        }
        let (c, n) = parse_credentials(&msg).unwrap().unwrap();
        assert_eq!((c.username, c.password, n), (&b"bob"[..], &b"pw"[..], 8));
        assert_eq!(
            parse_credentials(&[1, 0, 1, b'x']),
            Err(Socks5Error::EmptyCredential)
        );
        assert_eq!(parse_credentials(&[5, 1]), Err(Socks5Error::BadVersion(5)));
        assert_eq!(encode_credentials_status(false), [1, 1]);
    }

    #[test]
    fn requests_of_every_address_type() {
        let v4 = [5, 1, 0, 1, 127, 0, 0, 1, 0x1f, 0x90];
        let (r, n) = parse_request(&v4).unwrap().unwrap();
        assert_eq!(n, v4.len());
        assert_eq!(r.command, Command::Connect);
        assert_eq!(r.target, Target::Addr("127.0.0.1:8080".parse().unwrap()));

        let mut v6 = vec![5, 3, 0, 4];
        v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&443u16.to_be_bytes());
        let (r, _) = parse_request(&v6).unwrap().unwrap();
        assert_eq!(r.command, Command::UdpAssociate);
        assert_eq!(r.target, Target::Addr("[::1]:443".parse().unwrap()));

        let mut dom = vec![5, 1, 0, 3, 11];
        dom.extend_from_slice(b"example.org");
        dom.extend_from_slice(&80u16.to_be_bytes());
        for cut in 0..dom.len() {
            assert_eq!(parse_request(&dom[..cut]), Ok(None), "cut at {cut}");
        }
        let (r, _) = parse_request(&dom).unwrap().unwrap();
        assert_eq!(
            r.target,
            Target::Domain {
                name: "example.org".into(),
                port: 80
            }
        );
    }

    #[test]
    fn malformed_requests_are_typed_errors() {
        assert_eq!(
            parse_request(&[4, 1, 0, 1]),
            Err(Socks5Error::BadVersion(4))
        );
        assert_eq!(
            parse_request(&[5, 9, 0, 1]),
            Err(Socks5Error::BadCommand(9))
        );
        assert_eq!(
            parse_request(&[5, 1, 7, 1]),
            Err(Socks5Error::BadReserved(7))
        );
        assert_eq!(
            parse_request(&[5, 1, 0, 2]),
            Err(Socks5Error::BadAddressType(2))
        );
        assert_eq!(
            parse_request(&[5, 1, 0, 3, 0, 0, 80]),
            Err(Socks5Error::BadDomain)
        );
        assert_eq!(
            parse_request(&[5, 1, 0, 3, 2, 0xff, 0xfe, 0, 80]),
            Err(Socks5Error::BadDomain)
        );
        // A NUL or other control character is no part of a name to resolve.
        for bad in [0u8, b'\n', 0x7f] {
            assert_eq!(
                parse_request(&[5, 1, 0, 3, 3, b'a', bad, b'b', 0, 80]),
                Err(Socks5Error::BadDomain)
            );
        }
    }

    #[test]
    fn replies_and_udp_headers_round_trip() {
        let mut out = [0u8; MAX_REPLY];
        let n = encode_reply(Reply::Succeeded, "10.1.2.3:1080".parse().unwrap(), &mut out).unwrap();
        assert_eq!(&out[..n], &[5, 0, 0, 1, 10, 1, 2, 3, 0x04, 0x38]);
        assert_eq!(
            encode_reply(Reply::Succeeded, "[::1]:1".parse().unwrap(), &mut [0u8; 8]),
            Err(Socks5Error::BufferTooSmall)
        );

        let target = Target::Domain {
            name: "example.org".into(),
            port: 53,
        };
        let mut dgram = [0u8; 64];
        let n = encode_udp_header(&target, &mut dgram).unwrap();
        dgram[n..n + 3].copy_from_slice(b"abc");
        let (parsed, at) = parse_udp_datagram(&dgram[..n + 3]).unwrap();
        assert_eq!((parsed, at), (target, n));
        assert_eq!(
            parse_udp_datagram(&[0, 0, 1, 1]),
            Err(Socks5Error::Fragmented(1))
        );
        assert_eq!(parse_udp_datagram(&[0, 0]), Err(Socks5Error::Truncated));
        assert_eq!(
            parse_udp_datagram(&[0, 0, 0, 1, 1, 2]),
            Err(Socks5Error::Truncated)
        );
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_greeting(&bytes);
            let _ = parse_credentials(&bytes);
            let _ = parse_request(&bytes);
            let _ = parse_udp_datagram(&bytes);
        }

        #[test]
        fn consumed_never_exceeds_input(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(Some((_, n))) = parse_request(&bytes) {
                prop_assert!(n <= bytes.len());
            }
            if let Ok(Some((_, n))) = parse_greeting(&bytes) {
                prop_assert!(n <= bytes.len());
            }
        }

        #[test]
        fn udp_header_round_trips(a in any::<[u8; 4]>(), port in any::<u16>()) {
            let target = Target::Addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), port));
            let mut buf = [0u8; 32];
            let n = encode_udp_header(&target, &mut buf).unwrap();
            prop_assert_eq!(parse_udp_datagram(&buf[..n]).unwrap(), (target, n));
        }
    }
}
