//! HTTP CONNECT (RFC 9110 §9.3.6): the request head a client sends to open a tunnel, and the
//! replies braid sends back. Lines may end in CRLF or a bare LF (RFC 9112 §2.2).

use std::net::{IpAddr, SocketAddr};

use crate::session::frame::Target;

/// Longest request head accepted (request line and headers, through the blank line).
pub const MAX_HEAD: usize = 8 * 1024;

/// A parsed CONNECT request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest<'a> {
    /// The tunnel's destination from the request target (`host:port`).
    pub target: Target,
    /// The raw value of a `Proxy-Authorization` header, if any.
    pub proxy_authorization: Option<&'a str>,
}

/// Malformed HTTP CONNECT input, naming what was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HttpConnectError {
    /// The head did not end within [`MAX_HEAD`] bytes.
    #[error("HTTP request head is longer than {MAX_HEAD} bytes")]
    HeadTooLong,
    /// The head is not UTF-8 text.
    #[error("HTTP request head is not text")]
    NotText,
    /// The request line is not `METHOD TARGET VERSION`.
    #[error("HTTP request line is malformed")]
    BadRequestLine,
    /// The method is not CONNECT (braid is not a forward HTTP proxy).
    #[error("HTTP method is not CONNECT")]
    NotConnect,
    /// The version is not HTTP/1.0 or HTTP/1.1.
    #[error("HTTP version is not 1.0 or 1.1")]
    BadVersion,
    /// The request target is not `host:port`.
    #[error("HTTP CONNECT target is not host:port")]
    BadTarget,
    /// A header line has no colon.
    #[error("HTTP header line is malformed")]
    BadHeader,
}

/// Parses a CONNECT request head; `Ok(None)` until the blank line has arrived. On success also
/// returns the length of the head (tunnel bytes may follow it in the same buffer).
pub fn parse_request(buf: &[u8]) -> Result<Option<(ConnectRequest<'_>, usize)>, HttpConnectError> {
    let window = &buf[..buf.len().min(MAX_HEAD)];
    let Some((end, length)) = head_end(window) else {
        return if buf.len() >= MAX_HEAD {
            Err(HttpConnectError::HeadTooLong)
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| HttpConnectError::NotText)?;
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request_line = lines.next().ok_or(HttpConnectError::BadRequestLine)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(authority), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpConnectError::BadRequestLine);
    };
    // Methods are case-sensitive (RFC 9110 §9.1): `connect` is another method.
    if method != "CONNECT" {
        return Err(HttpConnectError::NotConnect);
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HttpConnectError::BadVersion);
    }
    let target = parse_authority(authority)?;
    let mut proxy_authorization = None;
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(HttpConnectError::BadHeader)?;
        if name.trim().eq_ignore_ascii_case("proxy-authorization") {
            proxy_authorization = Some(value.trim());
        }
    }
    Ok(Some((
        ConnectRequest {
            target,
            proxy_authorization,
        },
        length,
    )))
}

/// Where the head ends: the index of its last line's terminating LF and the length through the
/// blank line. Lines end in CRLF or, as RFC 9112 §2.2 lets a recipient accept, a bare LF.
fn head_end(window: &[u8]) -> Option<(usize, usize)> {
    window.iter().enumerate().find_map(|(i, &b)| {
        if b != b'\n' {
            return None;
        }
        match &window[i + 1..] {
            [b'\n', ..] => Some((i, i + 2)),
            [b'\r', b'\n', ..] => Some((i, i + 3)),
            _ => None,
        }
    })
}

/// `host:port`, `a.b.c.d:port` or `[v6]:port`.
fn parse_authority(authority: &str) -> Result<Target, HttpConnectError> {
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or(HttpConnectError::BadTarget)?;
    let port: u16 = port.parse().map_err(|_| HttpConnectError::BadTarget)?;
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let ip: IpAddr = v6.parse().map_err(|_| HttpConnectError::BadTarget)?;
        return Ok(Target::Addr(SocketAddr::new(ip, port)));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Target::Addr(SocketAddr::new(ip, port)));
    }
    let valid = !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if !valid {
        return Err(HttpConnectError::BadTarget);
    }
    Ok(Target::Domain {
        name: host.to_owned(),
        port,
    })
}

/// The user name and password of a `Proxy-Authorization: Basic` value (RFC 7617: base64 of
/// `user:password`, the scheme name in any case); `None` for another scheme or bad encoding.
pub fn basic_credentials(value: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    let (scheme, token) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = decode_base64(token.trim())?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some((decoded[..colon].to_vec(), decoded[colon + 1..].to_vec()))
}

/// Standard base64 (RFC 4648 §4) with its padding; `None` on any other character, a length
/// that is not a multiple of four, or padding anywhere but at the end.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.len() / 4;
    for (i, quad) in bytes.chunks_exact(4).enumerate() {
        let pad = match quad {
            [_, _, b'=', b'='] => 2,
            [_, _, _, b'='] => 1,
            _ => 0,
        };
        if pad > 0 && i + 1 != quads {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad;
        let [_, a, b, c] = n.to_be_bytes();
        out.extend_from_slice(&[a, b, c][..3 - pad]);
    }
    Some(out)
}

/// The reply once the tunnel is open.
pub const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";
/// The reply to a malformed request.
pub const BAD_REQUEST: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
/// The reply to a method other than CONNECT (braid is not a forward HTTP proxy).
pub const METHOD_NOT_ALLOWED: &[u8] =
    b"HTTP/1.1 405 Method Not Allowed\r\nAllow: CONNECT\r\nContent-Length: 0\r\n\r\n";
/// The reply when credentials are missing or wrong; the connection is closed after it, so a
/// client retries with credentials on a new one.
pub const AUTH_REQUIRED: &[u8] = b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"braid\"\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
/// The reply when the server could not reach the target.
pub const BAD_GATEWAY: &[u8] = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_targets_and_auth() {
        let req = b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\nProxy-Authorization: Basic Ym9iOnB3\r\n\r\nTLS";
        let (r, n) = parse_request(req).unwrap().unwrap();
        assert_eq!(&req[n..], b"TLS");
        assert_eq!(
            r.target,
            Target::Domain {
                name: "example.org".into(),
                port: 443
            }
        );
        assert_eq!(r.proxy_authorization, Some("Basic Ym9iOnB3"));

        let (r, _) = parse_request(b"CONNECT [::1]:8443 HTTP/1.0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.target, Target::Addr("[::1]:8443".parse().unwrap()));
        let (r, _) = parse_request(b"CONNECT 127.0.0.1:80 HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.target, Target::Addr("127.0.0.1:80".parse().unwrap()));
        assert_eq!(
            parse_request(b"CONNECT 127.0.0.1:80 HTTP/1.1\r\n"),
            Ok(None)
        );
        // Bare LF line ends (RFC 9112 §2.2), alone or mixed with CRLF.
        for req in [
            &b"CONNECT a.b:443 HTTP/1.1\nHost: a.b\nProxy-Authorization: x\n\nTLS"[..],
            b"CONNECT a.b:443 HTTP/1.1\r\nHost: a.b\nProxy-Authorization: x\r\n\r\nTLS",
            b"CONNECT a.b:443 HTTP/1.1\nHost: a.b\r\nProxy-Authorization: x\n\r\nTLS",
        ] {
            let (r, n) = parse_request(req).unwrap().unwrap();
            assert_eq!(&req[n..], b"TLS", "{:?}", String::from_utf8_lossy(req));
            assert_eq!(r.proxy_authorization, Some("x"));
        }
        assert_eq!(
            parse_request(b"CONNECT a.b:443 HTTP/1.1\nHost: a.b\n"),
            Ok(None)
        );
    }

    #[test]
    fn rejects_malformed_heads() {
        use HttpConnectError::*;
        let cases: [(&[u8], HttpConnectError); 8] = [
            (b"GET / HTTP/1.1\r\n\r\n", NotConnect),
            (b"connect a:1 HTTP/1.1\r\n\r\n", NotConnect),
            (b"CONNECT a:1 HTTP/2\r\n\r\n", BadVersion),
            (b"CONNECT a HTTP/1.1\r\n\r\n", BadTarget),
            (b"CONNECT a:99999 HTTP/1.1\r\n\r\n", BadTarget),
            (b"CONNECT a b:1 HTTP/1.1\r\n\r\n", BadRequestLine),
            (b"CONNECT a:1 HTTP/1.1\r\nnocolon\r\n\r\n", BadHeader),
            (b"CONNECT a:1 HTTP/1.1\r\nX: \xff\r\n\r\n", NotText),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_request(input),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        let long = vec![b'a'; MAX_HEAD + 10];
        assert_eq!(parse_request(&long), Err(HeadTooLong));
    }

    #[test]
    fn basic_credentials_are_decoded() {
        // RFC 7617 §2's example, and the scheme name in another case.
        let aladdin = (b"Aladdin".to_vec(), b"open sesame".to_vec());
        assert_eq!(
            basic_credentials("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="),
            Some(aladdin.clone())
        );
        assert_eq!(
            basic_credentials(" bAsIc  QWxhZGRpbjpvcGVuIHNlc2FtZQ== "),
            Some(aladdin)
        );
        // One and two bytes of padding; a colon in the password stays in it.
        assert_eq!(
            basic_credentials("Basic Ym9iOnB3"),
            Some((b"bob".to_vec(), b"pw".to_vec()))
        );
        assert_eq!(
            basic_credentials("Basic Ym9iOnB3eA=="),
            Some((b"bob".to_vec(), b"pwx".to_vec()))
        );
        assert_eq!(
            basic_credentials("Basic Ym9iOmE6Yg=="),
            Some((b"bob".to_vec(), b"a:b".to_vec()))
        );
        for bad in [
            "Bearer Ym9iOnB3",
            "Basic",
            "Basic Ym9iOnB3e",
            "Basic Ym9i",
            "Basic Ym9=OnB3",
            "Basic Ym9iOnB3eA==Ym9i",
            "Basic Ym9*OnB3",
        ] {
            assert_eq!(basic_credentials(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn base64_decodes_what_was_encoded(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            // A plain encoder, written the way RFC 4648 §4 states it.
            const ALPHABET: &[u8; 64] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut text = String::new();
            for chunk in bytes.chunks(3) {
                let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
                for i in 0..4 {
                    if i <= chunk.len() {
                        text.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
                    } else {
                        text.push('=');
                    }
                }
            }
            prop_assert_eq!(decode_base64(&text), Some(bytes));
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(Some((_, n))) = parse_request(&bytes) {
                prop_assert!(n <= bytes.len());
            }
        }
    }
}
