//! The HTTP proxy's requests: CONNECT (RFC 9110 §9.3.6), the head a client sends to open a
//! tunnel, and a plain request whose target is an absolute `http://` URL (RFC 9112 §3.2.2), which
//! braid forwards to that URL's server with the head rewritten for it ([`origin_head`]); and the
//! replies braid sends back. Lines may end in CRLF or a bare LF (RFC 9112 §2.2).

use std::net::{IpAddr, SocketAddr};

use super::http_message::{
    HttpMessageError, RequestFraming, connection_tokens, head_length, request_framing,
};
use crate::session::frame::Target;

/// Longest request head accepted (request line and headers, through the blank line): as the
/// longest response head ([`super::http_message::MAX_RESPONSE_HEAD`]), so that a site's cookies
/// that pass without the proxy pass through it too (until 25 Nov 2026 it was 8 KiB, and a
/// request with 8 KiB of cookies was refused). A longer one is answered
/// [`HEADERS_TOO_LARGE`].
pub const MAX_HEAD: usize = 64 * 1024;

/// A parsed proxy request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyRequest<'a> {
    /// The destination: CONNECT's `host:port`, or the URL's host and port (80 by default).
    pub target: Target,
    /// A plain request to forward (its target an absolute `http://` URL), not a tunnel.
    pub forward: bool,
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
    /// A method other than CONNECT whose target is not an absolute `http://` URL (a request
    /// meant for a server, not a proxy; or another scheme).
    #[error("HTTP request target is not an absolute http:// URL (nor a CONNECT)")]
    NotProxyRequest,
    /// The version is not HTTP/1.0 or HTTP/1.1.
    #[error("HTTP version is not 1.0 or 1.1")]
    BadVersion,
    /// The request target's host and port are not `host:port` (or the URL's authority carries
    /// user information).
    #[error("HTTP request target's host or port is malformed")]
    BadTarget,
    /// A header line has no colon.
    #[error("HTTP header line is malformed")]
    BadHeader,
    /// A forwarded request's body framing is malformed.
    #[error(transparent)]
    Framing(#[from] HttpMessageError),
}

/// Parses a proxy request head; `Ok(None)` until the blank line has arrived. On success also
/// returns the length of the head (tunnel bytes, or a request's body, may follow it in the same
/// buffer).
pub fn parse_request(buf: &[u8]) -> Result<Option<(ProxyRequest<'_>, usize)>, HttpConnectError> {
    let window = &buf[..buf.len().min(MAX_HEAD)];
    let Some(length) = head_length(window) else {
        return if buf.len() >= MAX_HEAD {
            Err(HttpConnectError::HeadTooLong)
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&buf[..length]).map_err(|_| HttpConnectError::NotText)?;
    let mut lines = head
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .take_while(|l| !l.is_empty());
    let request_line = lines.next().ok_or(HttpConnectError::BadRequestLine)?;
    let (method, request_target, version) = request_line_parts(request_line)?;
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HttpConnectError::BadVersion);
    }
    // Methods are case-sensitive (RFC 9110 §9.1): `connect` is another method.
    let forward = method != "CONNECT";
    let target = match forward {
        false => parse_authority(request_target)?,
        true => parse_authority(&with_port(http_url(request_target)?.0))?,
    };
    let mut proxy_authorization = None;
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(HttpConnectError::BadHeader)?;
        if name.trim().eq_ignore_ascii_case("proxy-authorization") {
            proxy_authorization = Some(value.trim());
        }
    }
    Ok(Some((
        ProxyRequest {
            target,
            forward,
            proxy_authorization,
        },
        length,
    )))
}

/// The method, target and version of a request line; the method a token (RFC 9110 §5.6.2).
fn request_line_parts(line: &str) -> Result<(&str, &str, &str), HttpConnectError> {
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpConnectError::BadRequestLine);
    };
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if method.is_empty() || !method.chars().all(token) {
        return Err(HttpConnectError::BadRequestLine);
    }
    Ok((method, target, version))
}

/// The authority and the origin-form target (path and query, `/` when the URL has no path) of
/// an absolute `http://` URL (the scheme in any case, a fragment dropped); a URL whose
/// authority carries user information is refused.
fn http_url(target: &str) -> Result<(&str, String), HttpConnectError> {
    let scheme_end = target
        .find("://")
        .ok_or(HttpConnectError::NotProxyRequest)?;
    if !target[..scheme_end].eq_ignore_ascii_case("http") {
        return Err(HttpConnectError::NotProxyRequest);
    }
    let rest = &target[scheme_end + 3..];
    let rest = rest.split('#').next().unwrap_or(rest);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() || authority.contains('@') {
        return Err(HttpConnectError::BadTarget);
    }
    let path = match path.starts_with('/') {
        true => path.to_owned(),
        false => format!("/{path}"),
    };
    Ok((authority, path))
}

/// `authority` with port 80 when it names none.
fn with_port(authority: &str) -> String {
    let has_port = match authority.rfind(']') {
        Some(bracket) => authority[bracket..].contains(':'),
        None => authority.contains(':'),
    };
    match has_port {
        true => authority.to_owned(),
        false => format!("{authority}:80"),
    }
}

/// The name braid gives itself in the `Via` headers it adds to forwarded requests and responses
/// (RFC 9110 §7.6.3's `received-by`, a pseudonym: no host name or address).
pub const VIA_NAME: &str = "braid";

/// Headers a proxy does not pass on (RFC 9110 §7.6.1: hop-by-hop, or meant for the proxy).
const NOT_FORWARDED: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "host",
];

/// A forwarded request as braid sends it to the URL's server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardRequest {
    /// The head, rewritten by [`origin_head`].
    pub head: Vec<u8>,
    /// How the request's body is delimited, and whether the client keeps its connection.
    pub framing: RequestFraming,
    /// The request asks for a protocol upgrade (`Connection: upgrade` and `Upgrade`, a
    /// WebSocket, say): its connection carries that protocol once the server agrees.
    pub upgrade: bool,
    /// The method is HEAD (whose response has no body, whatever its headers say).
    pub head_method: bool,
    /// The method is idempotent (RFC 9110 §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE), so
    /// the request may be sent again when a kept connection closes under it.
    pub idempotent: bool,
    /// An HTTP/1.0 request (not to be sent interim responses, RFC 9110 §15.2).
    pub http10: bool,
}

/// The request to send the URL's server for a forwarded request whose head (through the blank
/// line) [`parse_request`] accepted: the request line with the target in origin form; the
/// headers but the hop-by-hop ones, those the `Connection` header names and those meant for the
/// proxy; `Host` from the URL (RFC 9112 §3.2.2); and `Connection: keep-alive` while the client
/// keeps its connection (braid keeps the server's for the client's next request to it), after
/// `Via: 1.x braid` (RFC 9110 §7.6.3, the client's protocol version; a `Via` the request had
/// goes on before it),
/// `Connection: close` when the client does not, or `Connection: upgrade` with the request's
/// `Upgrade`. A body whose length cannot be known (or is stated two ways) is refused.
pub fn origin_head(head: &[u8]) -> Result<ForwardRequest, HttpConnectError> {
    let text = std::str::from_utf8(head).map_err(|_| HttpConnectError::NotText)?;
    let mut lines = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .take_while(|l| !l.is_empty());
    let request_line = lines.next().ok_or(HttpConnectError::BadRequestLine)?;
    let (method, target, version) = request_line_parts(request_line)?;
    let (authority, path) = http_url(target)?;
    let headers: Vec<(&str, &str)> = lines
        .map(|l| l.split_once(':').ok_or(HttpConnectError::BadHeader))
        .collect::<Result<_, _>>()?;
    let framing = request_framing(version, headers.iter().copied())?;
    let named = connection_tokens(headers.iter().copied());
    let upgrade = named.iter().any(|t| t == "upgrade")
        && headers
            .iter()
            .any(|(name, _)| name.trim().eq_ignore_ascii_case("upgrade"));
    let mut out = format!("{method} {path} {version}\r\nHost: {authority}\r\n");
    for (name, value) in &headers {
        let lower = name.trim().to_ascii_lowercase();
        let dropped = NOT_FORWARDED.contains(&lower.as_str())
            || (named.contains(&lower) && !(upgrade && lower == "upgrade"));
        if !dropped {
            out.push_str(&format!("{}: {}\r\n", name.trim(), value.trim()));
        }
    }
    // RFC 9110 §7.6.3: a proxy says so in each message it forwards, after any Via already
    // there, with the protocol it received the message in.
    let protocol = version.strip_prefix("HTTP/").unwrap_or(version);
    out.push_str(&format!("Via: {protocol} {VIA_NAME}\r\n"));
    out.push_str(match (upgrade, framing.keep_alive) {
        (true, _) => "Connection: upgrade\r\n\r\n",
        (false, true) => "Connection: keep-alive\r\n\r\n",
        (false, false) => "Connection: close\r\n\r\n",
    });
    Ok(ForwardRequest {
        head: out.into_bytes(),
        framing,
        upgrade,
        head_method: method == "HEAD",
        idempotent: matches!(
            method,
            "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
        ),
        http10: version == "HTTP/1.0",
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
/// The reply to a malformed request; the connection is closed after it.
pub const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
/// The reply to a request head longer than [`MAX_HEAD`] (RFC 6585 §5); the connection is closed
/// after it.
pub const HEADERS_TOO_LARGE: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
/// The reply when credentials are missing or wrong; the connection is closed after it, so a
/// client retries with credentials on a new one.
pub const AUTH_REQUIRED: &[u8] = b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"braid\"\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
/// The reply when the server could not reach the target; the connection is closed after it.
pub const BAD_GATEWAY: &[u8] =
    b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

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
    fn absolute_http_urls_are_forwarded_with_an_origin_form_head() {
        let req = b"POST http://Example.org:8080/a/b?q=1#frag HTTP/1.1\r\nHost: elsewhere\r\nUser-Agent: t\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic Ym9iOnB3\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nContent-Length: 5\r\n\r\nhello";
        let (r, n) = parse_request(req).unwrap().unwrap();
        assert_eq!(&req[n..], b"hello");
        assert!(r.forward);
        assert_eq!(
            r.target,
            Target::Domain {
                name: "Example.org".into(),
                port: 8080
            }
        );
        assert_eq!(r.proxy_authorization, Some("Basic Ym9iOnB3"));
        let forwarded = origin_head(&req[..n]).unwrap();
        assert_eq!(
            String::from_utf8(forwarded.head).unwrap(),
            "POST /a/b?q=1 HTTP/1.1\r\nHost: Example.org:8080\r\nUser-Agent: t\r\n\
             Content-Length: 5\r\nVia: 1.1 braid\r\nConnection: keep-alive\r\n\r\n"
        );
        assert_eq!(
            forwarded.framing,
            RequestFraming {
                body: super::super::http_message::BodyLength::Length(5),
                keep_alive: true
            }
        );
        assert!(!forwarded.upgrade && !forwarded.head_method && !forwarded.http10);
        assert!(!forwarded.idempotent, "POST");
        // Port 80 by default, `/` for no path, addresses, bare LF, the scheme in any case.
        for (req, target, head) in [
            (
                &b"GET http://a.b HTTP/1.0\n\n"[..],
                Target::Domain {
                    name: "a.b".into(),
                    port: 80,
                },
                "GET / HTTP/1.0\r\nHost: a.b\r\nVia: 1.0 braid\r\nConnection: close\r\n\r\n",
            ),
            (
                b"GET HTTP://127.0.0.1?x HTTP/1.1\r\n\r\n",
                Target::Addr("127.0.0.1:80".parse().unwrap()),
                "GET /?x HTTP/1.1\r\nHost: 127.0.0.1\r\nVia: 1.1 braid\r\nConnection: keep-alive\r\n\r\n",
            ),
            (
                b"HEAD http://[::1]/ HTTP/1.1\r\nConnection: close\r\n\r\n",
                Target::Addr("[::1]:80".parse().unwrap()),
                "HEAD / HTTP/1.1\r\nHost: [::1]\r\nVia: 1.1 braid\r\nConnection: close\r\n\r\n",
            ),
            (
                b"GET http://[::1]:81/ HTTP/1.1\r\n\r\n",
                Target::Addr("[::1]:81".parse().unwrap()),
                "GET / HTTP/1.1\r\nHost: [::1]:81\r\nVia: 1.1 braid\r\nConnection: keep-alive\r\n\r\n",
            ),
        ] {
            let (r, n) = parse_request(req).unwrap().unwrap();
            assert_eq!(r.target, target);
            let forwarded = origin_head(&req[..n]).unwrap();
            assert_eq!(forwarded.head_method, req.starts_with(b"HEAD"));
            assert!(forwarded.idempotent, "GET and HEAD");
            assert_eq!(forwarded.http10, req.ends_with(b"1.0\n\n"));
            assert_eq!(String::from_utf8(forwarded.head).unwrap(), head);
        }
        // A Via the request had goes on, braid's after it.
        let via = b"GET http://a/ HTTP/1.1\r\nVia: 1.1 squid\r\n\r\n";
        let (_, n) = parse_request(via).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(origin_head(&via[..n]).unwrap().head).unwrap(),
            "GET / HTTP/1.1\r\nHost: a\r\nVia: 1.1 squid\r\nVia: 1.1 braid\r\nConnection: keep-alive\r\n\r\n"
        );
        // An upgrade keeps its Upgrade header and says so.
        let ws = b"GET http://a/chat HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
        let (_, n) = parse_request(ws).unwrap().unwrap();
        let forwarded = origin_head(&ws[..n]).unwrap();
        assert!(forwarded.upgrade);
        assert_eq!(
            String::from_utf8(forwarded.head).unwrap(),
            "GET /chat HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nVia: 1.1 braid\r\nConnection: upgrade\r\n\r\n"
        );
        // A body whose length cannot be known is refused.
        let smuggle =
            b"POST http://a/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
        let (_, n) = parse_request(smuggle).unwrap().unwrap();
        assert_eq!(
            origin_head(&smuggle[..n]),
            Err(HttpConnectError::Framing(HttpMessageError::AmbiguousLength))
        );
        // CONNECT is a tunnel.
        let (r, _) = parse_request(b"CONNECT a:443 HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!r.forward);
    }

    #[test]
    fn rejects_malformed_heads() {
        use HttpConnectError::*;
        let cases: [(&[u8], HttpConnectError); 14] = [
            (b"GET / HTTP/1.1\r\n\r\n", NotProxyRequest),
            (b"connect a:1 HTTP/1.1\r\n\r\n", NotProxyRequest),
            (b"GET https://a/ HTTP/1.1\r\n\r\n", NotProxyRequest),
            (b"GET ftp://a/ HTTP/1.1\r\n\r\n", NotProxyRequest),
            (b"GET http://u:p@a/ HTTP/1.1\r\n\r\n", BadTarget),
            (b"GET http:///x HTTP/1.1\r\n\r\n", BadTarget),
            (b"GET http://a:99999/ HTTP/1.1\r\n\r\n", BadTarget),
            (b"G(T http://a/ HTTP/1.1\r\n\r\n", BadRequestLine),
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
            if let Ok(Some((r, n))) = parse_request(&bytes) {
                prop_assert!(n <= bytes.len());
                if r.forward {
                    let forwarded = origin_head(&bytes[..n]);
                    prop_assert!(matches!(forwarded, Ok(_) | Err(HttpConnectError::Framing(_))));
                }
            }
        }

        #[test]
        fn forwarded_heads_parse_and_rewrite_without_panics(
            path in "[ -~]{0,40}",
            headers in proptest::collection::vec(("[A-Za-z-]{1,12}", "[ -~]{0,20}"), 0..6),
        ) {
            let mut head = format!("GET http://h.example{path} HTTP/1.1\r\n");
            for (name, value) in &headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            if let Ok(Some((r, n))) = parse_request(head.as_bytes()) {
                prop_assert!(r.forward);
                let out = origin_head(&head.as_bytes()[..n]).unwrap();
                let out = String::from_utf8(out.head).unwrap();
                prop_assert!(out.ends_with("\r\n\r\n"));
                prop_assert_eq!(out.matches("\r\nHost: ").count(), 1);
            }
        }
    }
}
