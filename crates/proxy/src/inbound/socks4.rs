//! SOCKS4 and its 4a extension (the de facto protocols of the SOCKS4 and SOCKS4A memos): the
//! CONNECT request an older application (`curl --socks4a`, `proxychains` set to `socks4`, `ssh
//! -o ProxyCommand` helpers) sends instead of a SOCKS5 greeting, and the 8-byte reply. SOCKS4
//! names an IPv4 address; 4a an address `0.0.0.x` (x not 0) and the host name after the user
//! id, which the server resolves. The user id is not a credential (SOCKS4 has no password), so
//! the inbound refuses SOCKS4 when it has users.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use crate::session::frame::Target;

/// The protocol version byte of SOCKS4.
pub const VERSION: u8 = 4;
/// The longest user id or host name braid reads (the memos set no limit; 255 is what SOCKS5
/// allows a host name).
pub const MAX_FIELD: usize = 255;
/// The longest request: header, user id and host name with their terminating zeros.
pub const MAX_REQUEST: usize = 8 + 2 * (MAX_FIELD + 1);

/// Reply code: request granted.
pub const GRANTED: u8 = 90;
/// Reply code: request rejected or failed.
pub const REJECTED: u8 = 91;

/// A SOCKS4 request's command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// 1: a TCP connection to the destination.
    Connect,
    /// 2: a listening socket for an incoming connection (not supported; rejected).
    Bind,
}

/// A parsed SOCKS4 or SOCKS4a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// What the client asks for.
    pub command: Command,
    /// The destination: an IPv4 address, or (4a) a host name.
    pub target: Target,
}

/// Malformed SOCKS4 input, naming what was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Socks4Error {
    /// The version byte is not 4.
    #[error("SOCKS4 version byte {0:#04x} is not 4")]
    BadVersion(u8),
    /// The command byte is neither CONNECT (1) nor BIND (2).
    #[error("SOCKS4 command {0:#04x} is unknown")]
    BadCommand(u8),
    /// The user id is longer than [`MAX_FIELD`] bytes.
    #[error("SOCKS4 user id is longer than {MAX_FIELD} bytes")]
    LongUserId,
    /// A 4a host name is empty, longer than [`MAX_FIELD`] bytes, not UTF-8 or holds control
    /// characters.
    #[error("SOCKS4a host name is empty, too long, not UTF-8 or holds control characters")]
    BadDomain,
}

/// Parses a SOCKS4 or SOCKS4a request; `Ok(None)` until it is complete. On success also
/// returns its length (application bytes may follow in the same buffer).
pub fn parse_request(buf: &[u8]) -> Result<Option<(Request, usize)>, Socks4Error> {
    let Some(&version) = buf.first() else {
        return Ok(None);
    };
    if version != VERSION {
        return Err(Socks4Error::BadVersion(version));
    }
    let Some(&command) = buf.get(1) else {
        return Ok(None);
    };
    let command = match command {
        1 => Command::Connect,
        2 => Command::Bind,
        c => return Err(Socks4Error::BadCommand(c)),
    };
    let Some(header) = buf.get(..8) else {
        return Ok(None);
    };
    let port = u16::from_be_bytes([header[2], header[3]]);
    let ip = Ipv4Addr::new(header[4], header[5], header[6], header[7]);
    let Some(user_end) = field_end(buf, 8).map_err(|()| Socks4Error::LongUserId)? else {
        return Ok(None);
    };
    // 0.0.0.x with x not 0: SOCKS4a, a host name follows the user id.
    if !matches!(ip.octets(), [0, 0, 0, x] if x != 0) {
        let target = Target::Addr(SocketAddr::V4(SocketAddrV4::new(ip, port)));
        return Ok(Some((Request { command, target }, user_end)));
    }
    let Some(name_end) = field_end(buf, user_end).map_err(|()| Socks4Error::BadDomain)? else {
        return Ok(None);
    };
    let name =
        std::str::from_utf8(&buf[user_end..name_end - 1]).map_err(|_| Socks4Error::BadDomain)?;
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(Socks4Error::BadDomain);
    }
    let target = Target::Domain {
        name: name.to_owned(),
        port,
    };
    Ok(Some((Request { command, target }, name_end)))
}

/// Where the zero-terminated field starting at `start` ends (past its zero); `Ok(None)` while
/// it has not, `Err` once it is longer than [`MAX_FIELD`] bytes.
fn field_end(buf: &[u8], start: usize) -> Result<Option<usize>, ()> {
    let rest = buf.get(start..).unwrap_or_default();
    match rest.iter().take(MAX_FIELD + 1).position(|&b| b == 0) {
        Some(i) => Ok(Some(start + i + 1)),
        None if rest.len() > MAX_FIELD => Err(()),
        None => Ok(None),
    }
}

/// The 8-byte reply: version 0, `code`, and a zero port and address (the memos leave them to
/// BIND, which braid does not support).
pub fn encode_reply(code: u8) -> [u8; 8] {
    [0, code, 0, 0, 0, 0, 0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn socks4_and_4a_requests_are_parsed() {
        // SOCKS4: 192.0.2.7:8080, user id "bob", then application bytes.
        let req = b"\x04\x01\x1f\x90\xc0\x00\x02\x07bob\x00GET";
        let (r, n) = parse_request(req).unwrap().unwrap();
        assert_eq!(&req[n..], b"GET");
        assert_eq!(r.command, Command::Connect);
        assert_eq!(r.target, Target::Addr("192.0.2.7:8080".parse().unwrap()));
        // SOCKS4a: 0.0.0.1 and a host name after an empty user id.
        let req = b"\x04\x01\x00\x50\x00\x00\x00\x01\x00example.org\x00";
        let (r, n) = parse_request(req).unwrap().unwrap();
        assert_eq!(n, req.len());
        assert_eq!(
            r.target,
            Target::Domain {
                name: "example.org".into(),
                port: 80
            }
        );
        // 0.0.0.0 is an address, not 4a.
        let (r, _) = parse_request(b"\x04\x02\x00\x15\x00\x00\x00\x00\x00")
            .unwrap()
            .unwrap();
        assert_eq!(r.command, Command::Bind);
        assert_eq!(r.target, Target::Addr("0.0.0.0:21".parse().unwrap()));
    }

    #[test]
    fn incomplete_and_malformed_requests() {
        let whole = b"\x04\x01\x00\x50\x00\x00\x00\x09user\x00host.example\x00";
        for cut in 0..whole.len() {
            assert_eq!(parse_request(&whole[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(parse_request(b"\x05\x01"), Err(Socks4Error::BadVersion(5)));
        assert_eq!(parse_request(b"\x04\x03"), Err(Socks4Error::BadCommand(3)));
        let long_user = [&b"\x04\x01\x00\x50\x01\x02\x03\x04"[..], &[b'u'; 256]].concat();
        assert_eq!(parse_request(&long_user), Err(Socks4Error::LongUserId));
        let mut longest_user = [&b"\x04\x01\x00\x50\x01\x02\x03\x04"[..], &[b'u'; 255]].concat();
        longest_user.push(0);
        assert!(parse_request(&longest_user).unwrap().is_some());
        let a4 = b"\x04\x01\x00\x50\x00\x00\x00\x01\x00";
        for bad in [&b"\x00"[..], b"a\x07b\x00", b"\xff\xfe\x00", &[b'h'; 256]] {
            let req = [&a4[..], bad].concat();
            assert_eq!(parse_request(&req), Err(Socks4Error::BadDomain), "{bad:?}");
        }
        assert_eq!(encode_reply(GRANTED), [0, 90, 0, 0, 0, 0, 0, 0]);
    }

    proptest! {
        #[test]
        fn never_panics_and_never_reads_past_the_input(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            if let Ok(Some((_, n))) = parse_request(&bytes) {
                prop_assert!(n <= bytes.len() && n <= MAX_REQUEST);
            }
        }
    }
}
