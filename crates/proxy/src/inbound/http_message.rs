//! HTTP/1.1 message framing for the HTTP inbound's forwarded requests (RFC 9112 §6): how a
//! request's or a response's body is delimited and where it ends, so that one client connection,
//! and the flow to the origin server behind it, carries request after request; and the response
//! heads braid hands back, their connection headers replaced by its own. Sans-IO: bytes in,
//! lengths out. Bodies are relayed as they came (a chunked body stays chunked), so only their
//! ends are found, never their content rewritten.

/// Longest response head accepted (status line and headers, through the blank line): larger
/// than a request's, as responses carry cookies and policies.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// Longest chunk-size line (the size, its extensions and line end) of a chunked body.
const MAX_CHUNK_LINE: usize = 4 * 1024;
/// Longest trailer section of a chunked body.
const MAX_TRAILERS: usize = 8 * 1024;

/// How a message's body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyLength {
    /// No body.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`: chunks up to the last, empty one, then the trailers.
    Chunked,
    /// Everything until the sender closes (a response with neither header).
    UntilClose,
}

/// A malformed forwarded message, naming what was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HttpMessageError {
    /// `Content-Length` is not a number, or given twice with different values.
    #[error("HTTP Content-Length is malformed or repeated with different values")]
    BadContentLength,
    /// A request's `Transfer-Encoding` does not end in `chunked` (its length unknowable), or
    /// comes in an HTTP/1.0 request.
    #[error("HTTP request's Transfer-Encoding does not end in chunked")]
    BadTransferEncoding,
    /// A request has both `Transfer-Encoding` and `Content-Length` (a request-smuggling risk,
    /// RFC 9112 §6.3).
    #[error("HTTP request has both Transfer-Encoding and Content-Length")]
    AmbiguousLength,
    /// A chunked body's framing is malformed.
    #[error("HTTP chunked body is malformed")]
    BadChunk,
    /// The response's status line or a header line is malformed.
    #[error("HTTP response head from the origin server is malformed")]
    BadResponse,
    /// The response head did not end within [`MAX_RESPONSE_HEAD`] bytes.
    #[error("HTTP response head from the origin server is longer than {MAX_RESPONSE_HEAD} bytes")]
    ResponseHeadTooLong,
}

/// What a request's headers say of its framing and its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestFraming {
    /// How its body is delimited (never [`BodyLength::UntilClose`]).
    pub body: BodyLength,
    /// The client wants the connection kept for its next request: HTTP/1.1 without `close`,
    /// HTTP/1.0 with `keep-alive` (in `Connection` or the older `Proxy-Connection`).
    pub keep_alive: bool,
}

/// The framing of a request of `version` (`HTTP/1.0` or `HTTP/1.1`) with `headers` (name and
/// value, trimmed or not).
pub fn request_framing<'a>(
    version: &str,
    headers: impl Iterator<Item = (&'a str, &'a str)> + Clone,
) -> Result<RequestFraming, HttpMessageError> {
    let http10 = version == "HTTP/1.0";
    let codings = Fields::of(headers.clone(), "transfer-encoding");
    let lengths = Fields::of(headers.clone(), "content-length");
    let body = match (codings.last(), lengths.any()) {
        (Some(_), true) => return Err(HttpMessageError::AmbiguousLength),
        (Some(last), false) if !http10 && last.eq_ignore_ascii_case("chunked") => {
            BodyLength::Chunked
        }
        (Some(_), false) => return Err(HttpMessageError::BadTransferEncoding),
        (None, true) => BodyLength::Length(content_length(&lengths)?),
        (None, false) => BodyLength::Empty,
    };
    let options = connection_options(headers, true);
    let keep_alive = match http10 {
        true => options.keep_alive,
        false => !options.close,
    };
    Ok(RequestFraming { body, keep_alive })
}

/// The comma-separated values of every header named `name`, in order.
#[derive(Clone)]
struct Fields<I> {
    headers: I,
    name: &'static str,
}

impl<'a, I: Iterator<Item = (&'a str, &'a str)> + Clone> Fields<I> {
    fn of(headers: I, name: &'static str) -> Self {
        Fields { headers, name }
    }

    fn values(&self) -> impl Iterator<Item = &'a str> {
        let name = self.name;
        self.headers
            .clone()
            .filter(move |(n, _)| n.trim().eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    }

    fn any(&self) -> bool {
        self.headers
            .clone()
            .any(|(n, _)| n.trim().eq_ignore_ascii_case(self.name))
    }

    fn last(&self) -> Option<&'a str> {
        match self.any() {
            true => Some(self.values().last().unwrap_or("")),
            false => None,
        }
    }
}

/// The one value of `Content-Length` headers (repeats allowed when equal, RFC 9110 §8.6).
fn content_length<'a, I: Iterator<Item = (&'a str, &'a str)> + Clone>(
    lengths: &Fields<I>,
) -> Result<u64, HttpMessageError> {
    let mut value = None;
    for v in lengths.values() {
        if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(HttpMessageError::BadContentLength);
        }
        let n: u64 = v.parse().map_err(|_| HttpMessageError::BadContentLength)?;
        if value.is_some_and(|m| m != n) {
            return Err(HttpMessageError::BadContentLength);
        }
        value = Some(n);
    }
    value.ok_or(HttpMessageError::BadContentLength)
}

/// The options `Connection` headers name, lowercased: connection options, and the headers
/// meant for this hop only (RFC 9110 §7.6.1).
pub(super) fn connection_tokens<'a>(
    headers: impl Iterator<Item = (&'a str, &'a str)> + Clone,
) -> Vec<String> {
    Fields::of(headers, "connection")
        .values()
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The connection options of `Connection` (and, for a request, `Proxy-Connection`) headers.
#[derive(Clone, Copy, Debug, Default)]
struct ConnectionOptions {
    close: bool,
    keep_alive: bool,
}

fn connection_options<'a>(
    headers: impl Iterator<Item = (&'a str, &'a str)>,
    proxy_connection: bool,
) -> ConnectionOptions {
    let mut options = ConnectionOptions::default();
    for (name, value) in headers {
        let name = name.trim();
        let counts = name.eq_ignore_ascii_case("connection")
            || (proxy_connection && name.eq_ignore_ascii_case("proxy-connection"));
        if counts {
            for token in value.split(',').map(str::trim) {
                options.close |= token.eq_ignore_ascii_case("close");
                options.keep_alive |= token.eq_ignore_ascii_case("keep-alive");
            }
        }
    }
    options
}

/// Finds where a body ends, fed the bytes that follow its head as they come.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyFramer {
    state: Framing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Done,
    /// Bytes left of a `Content-Length` body.
    Length(u64),
    UntilClose,
    /// In a chunk-size's hex digits: the size so far and the line's length.
    Size {
        size: u64,
        line: usize,
    },
    /// Past a chunk-size's digits (an extension, or the line end): the size and line length.
    Extension {
        size: u64,
        line: usize,
    },
    /// Bytes left of a chunk's data.
    Data(u64),
    /// The line end after a chunk's data; whether its CR came.
    DataEnd {
        cr: bool,
    },
    /// In the trailer section: the current line's length and the section's so far.
    Trailers {
        line: usize,
        total: usize,
    },
}

impl BodyFramer {
    /// A framer for a body delimited as `length` says.
    pub fn new(length: BodyLength) -> Self {
        let state = match length {
            BodyLength::Empty | BodyLength::Length(0) => Framing::Done,
            BodyLength::Length(n) => Framing::Length(n),
            BodyLength::Chunked => Framing::Size { size: 0, line: 0 },
            BodyLength::UntilClose => Framing::UntilClose,
        };
        BodyFramer { state }
    }

    /// Whether the body has ended (never, for a body delimited by the close).
    pub fn is_done(&self) -> bool {
        self.state == Framing::Done
    }

    /// Takes the body's share of `input`, the bytes that follow what it was fed before: how
    /// many of them belong to the body (the rest, once it is done, to the next message).
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, HttpMessageError> {
        let mut used = 0;
        while used < input.len() {
            let rest = &input[used..];
            match &mut self.state {
                Framing::Done => break,
                Framing::UntilClose => used = input.len(),
                Framing::Length(left) | Framing::Data(left) => {
                    let take = (*left).min(rest.len() as u64);
                    *left -= take;
                    used += take as usize;
                    if *left == 0 {
                        self.state = match self.state {
                            Framing::Data(_) => Framing::DataEnd { cr: false },
                            _ => Framing::Done,
                        };
                    }
                }
                _ => {
                    self.step(rest[0])?;
                    used += 1;
                }
            }
        }
        Ok(used)
    }

    /// One byte of a chunked body's framing (a size line, a data end or the trailers).
    fn step(&mut self, byte: u8) -> Result<(), HttpMessageError> {
        let bad = Err(HttpMessageError::BadChunk);
        self.state = match self.state {
            Framing::Size { size, line } => match (byte as char).to_digit(16) {
                Some(digit) if line < 16 => Framing::Size {
                    size: size << 4 | u64::from(digit),
                    line: line + 1,
                },
                Some(_) => return bad,
                None if line == 0 => return bad,
                None => return self.end_of_size(size, line, byte),
            },
            Framing::Extension { size, line } => return self.end_of_size(size, line, byte),
            Framing::DataEnd { cr } => match byte {
                b'\r' if !cr => Framing::DataEnd { cr: true },
                b'\n' => Framing::Size { size: 0, line: 0 },
                _ => return bad,
            },
            Framing::Trailers { line, total } => match byte {
                _ if total >= MAX_TRAILERS => return bad,
                b'\n' if line == 0 => Framing::Done,
                b'\n' => Framing::Trailers { line: 0, total },
                b'\r' => Framing::Trailers {
                    line,
                    total: total + 1,
                },
                _ => Framing::Trailers {
                    line: line + 1,
                    total: total + 1,
                },
            },
            Framing::Done | Framing::UntilClose | Framing::Length(_) | Framing::Data(_) => {
                return Ok(());
            }
        };
        Ok(())
    }

    /// A byte after a chunk-size's digits: the line's end, or part of an extension.
    fn end_of_size(&mut self, size: u64, line: usize, byte: u8) -> Result<(), HttpMessageError> {
        if line >= MAX_CHUNK_LINE {
            return Err(HttpMessageError::BadChunk);
        }
        self.state = match (byte, size) {
            (b'\n', 0) => Framing::Trailers { line: 0, total: 0 },
            (b'\n', _) => Framing::Data(size),
            _ => Framing::Extension {
                size,
                line: line + 1,
            },
        };
        Ok(())
    }
}

/// A response head from the origin server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// How its body is delimited, given the request's method.
    pub body: BodyLength,
    /// The origin server keeps the connection for another request once this response's body
    /// has ended: HTTP/1.1 without `close`, or HTTP/1.0 with `keep-alive`, and a body whose end
    /// is known.
    pub persistent: bool,
    /// The status line and the headers braid passes on, each line ending in CRLF.
    kept: Vec<u8>,
    /// The response's minor HTTP version (1.0 or 1.1), for the `Via` braid adds.
    minor: u8,
}

/// Response headers braid does not pass on: the connection's own (RFC 9110 §7.6.1); braid
/// states its connection to the client itself. (`Transfer-Encoding` goes on: the body is
/// relayed as it came.)
const HOP_BY_HOP: [&str; 3] = ["connection", "keep-alive", "proxy-connection"];

/// How braid's connection to the client goes on after a response, in the `Connection` header
/// it adds to the response head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientConnection {
    /// An interim (1xx) response: no header of its own.
    Interim,
    /// Kept for the next request (`Connection: keep-alive`, which HTTP/1.0 clients need).
    KeepAlive,
    /// Closed after the response (`Connection: close`).
    Close,
}

impl Response {
    /// Parses a response head at the start of `buf`; `Ok(None)` until its blank line has
    /// arrived. `head_request`: the request was HEAD (its response has no body). On success
    /// also returns the head's length.
    pub fn parse(
        buf: &[u8],
        head_request: bool,
    ) -> Result<Option<(Response, usize)>, HttpMessageError> {
        let window = &buf[..buf.len().min(MAX_RESPONSE_HEAD)];
        let Some(length) = head_length(window) else {
            return match buf.len() >= MAX_RESPONSE_HEAD {
                true => Err(HttpMessageError::ResponseHeadTooLong),
                false => Ok(None),
            };
        };
        let bad = HttpMessageError::BadResponse;
        let mut lines = buf[..length]
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .take_while(|l| !l.is_empty());
        let status_line = lines.next().ok_or(bad)?;
        let (version, status) = status_line_parts(status_line).ok_or(bad)?;
        let mut headers = Vec::new();
        for line in lines {
            // A folded line (RFC 9112 §5.2) is refused rather than passed on.
            if line.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
                return Err(bad);
            }
            let colon = line.iter().position(|&b| b == b':').ok_or(bad)?;
            // Header values may hold obs-text (bytes above 0x7f); names are tokens.
            let name = std::str::from_utf8(&line[..colon]).map_err(|_| bad)?;
            if name.is_empty() || name.contains([' ', '\t']) {
                return Err(bad);
            }
            let value = String::from_utf8_lossy(&line[colon + 1..]);
            headers.push((name, value, line));
        }
        let pairs = || headers.iter().map(|(n, v, _)| (*n, v.as_ref()));
        let codings = Fields::of(pairs(), "transfer-encoding");
        let lengths = Fields::of(pairs(), "content-length");
        let no_body = head_request || (100..200).contains(&status) || matches!(status, 204 | 304);
        let body = match (no_body, codings.last(), lengths.any()) {
            (true, _, _) => BodyLength::Empty,
            (false, Some(last), _) if last.eq_ignore_ascii_case("chunked") => BodyLength::Chunked,
            (false, Some(_), _) => BodyLength::UntilClose,
            (false, None, true) => BodyLength::Length(content_length(&lengths).map_err(|_| bad)?),
            (false, None, false) => BodyLength::UntilClose,
        };
        let options = connection_options(pairs(), false);
        let persistent = match version {
            0 => options.keep_alive,
            _ => !options.close,
        } && body != BodyLength::UntilClose
            // Both lengths: the coding wins (RFC 9112 §6.3), and the connection is not trusted
            // for another request.
            && !(codings.any() && lengths.any());
        let mut named = connection_tokens(pairs());
        named.retain(|t| t != "transfer-encoding" && t != "content-length");
        let mut kept = Vec::with_capacity(length);
        kept.extend_from_slice(status_line);
        kept.extend_from_slice(b"\r\n");
        for (name, _, line) in &headers {
            let lower = name.to_ascii_lowercase();
            let dropped = HOP_BY_HOP.contains(&lower.as_str())
                || named.contains(&lower)
                || (body == BodyLength::Chunked && lower == "content-length");
            if !dropped {
                kept.extend_from_slice(line);
                kept.extend_from_slice(b"\r\n");
            }
        }
        Ok(Some((
            Response {
                status,
                body,
                persistent,
                kept,
                minor: version,
            },
            length,
        )))
    }

    /// Whether this is an interim (1xx) response, another response following it.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status)
    }

    /// The head to send the client: the status line and the headers kept, `Via: 1.x braid`
    /// (RFC 9110 §7.6.3, the protocol the response came in), `Connection` as `connection`
    /// says, and the blank line.
    pub fn head_for_client(&self, connection: ClientConnection) -> Vec<u8> {
        let mut head = self.kept.clone();
        head.extend_from_slice(
            format!(
                "Via: 1.{} {}\r\n",
                self.minor,
                super::http_connect::VIA_NAME
            )
            .as_bytes(),
        );
        head.extend_from_slice(match connection {
            ClientConnection::Interim => b"\r\n".as_slice(),
            ClientConnection::KeepAlive => b"Connection: keep-alive\r\n\r\n",
            ClientConnection::Close => b"Connection: close\r\n\r\n",
        });
        head
    }
}

/// The minor version and status code of `HTTP/1.x SSS reason` (the reason may be absent).
fn status_line_parts(line: &[u8]) -> Option<(u8, u16)> {
    let minor = match line.get(..9)? {
        b"HTTP/1.0 " => 0,
        b"HTTP/1.1 " => 1,
        _ => return None,
    };
    let code = line.get(9..12)?;
    if !code.iter().all(u8::is_ascii_digit) || line.get(12).is_some_and(|b| *b != b' ') {
        return None;
    }
    let status = code.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    (100..=999).contains(&status).then_some((minor, status))
}

/// Where a head arriving in pieces was scanned to: each call looks for the blank line only in
/// the bytes added since the last (and the two before them, where one may have begun), so a
/// head that arrives a byte at a time costs its length, not its length squared.
#[derive(Debug, Default)]
pub(super) struct HeadScan {
    scanned: usize,
}

impl HeadScan {
    /// Whether `buf` (the last call's bytes and more) holds a whole head, or `limit` bytes
    /// without one: the head can be parsed (or refused) now.
    pub(super) fn ended(&mut self, buf: &[u8], limit: usize) -> bool {
        let ended =
            buf.len() >= limit || head_length(&buf[self.scanned.min(buf.len())..]).is_some();
        self.scanned = buf.len().saturating_sub(2);
        ended
    }
}

/// The length of a head (request or response) through its blank line; lines end in CRLF or,
/// as RFC 9112 §2.2 lets a recipient accept, a bare LF.
pub(super) fn head_length(window: &[u8]) -> Option<usize> {
    window.iter().enumerate().find_map(|(i, &b)| {
        if b != b'\n' {
            return None;
        }
        match &window[i + 1..] {
            [b'\n', ..] => Some(i + 2),
            [b'\r', b'\n', ..] => Some(i + 3),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A head fed a byte at a time, or split anywhere, ends exactly where its blank line does,
    /// whichever line endings it has; a limit reached without one ends it too.
    #[test]
    fn a_head_in_pieces_ends_at_its_blank_line() {
        for head in [
            &b"GET / HTTP/1.1\r\nA: b\r\n\r\n"[..],
            b"GET / HTTP/1.1\nA: b\n\n",
            b"X\n\r\n",
        ] {
            let mut scan = HeadScan::default();
            for n in 1..=head.len() {
                assert_eq!(
                    scan.ended(&head[..n], 1 << 16),
                    n == head.len(),
                    "{head:?} at {n}"
                );
            }
            for split in 1..head.len() {
                let mut scan = HeadScan::default();
                assert!(
                    !scan.ended(&head[..split], 1 << 16),
                    "{head:?} split at {split}"
                );
                assert!(scan.ended(head, 1 << 16), "{head:?} split at {split}");
            }
        }
        let mut scan = HeadScan::default();
        assert!(!scan.ended(b"GET / HTTP/1.1\r\n", 20));
        assert!(scan.ended(b"GET / HTTP/1.1\r\nA: bc", 20));
    }
    use proptest::prelude::*;

    fn framing(
        version: &str,
        headers: &[(&str, &str)],
    ) -> Result<RequestFraming, HttpMessageError> {
        request_framing(version, headers.iter().copied())
    }

    #[test]
    fn a_request_s_framing_comes_from_its_headers() {
        let r = framing("HTTP/1.1", &[("Host", "a")]).unwrap();
        assert_eq!(r.body, BodyLength::Empty);
        assert!(r.keep_alive, "HTTP/1.1 is persistent by default");
        let r = framing(
            "HTTP/1.1",
            &[("content-length", " 12 "), ("Connection", "Close")],
        );
        assert_eq!(
            r.unwrap(),
            RequestFraming {
                body: BodyLength::Length(12),
                keep_alive: false
            }
        );
        // Repeats of one value are one length; different ones are refused.
        let r = framing(
            "HTTP/1.1",
            &[("Content-Length", "5, 5"), ("Content-Length", "5")],
        );
        assert_eq!(r.unwrap().body, BodyLength::Length(5));
        for bad in ["5, 6", "", "-1", "+5", "0x10", "99999999999999999999"] {
            assert_eq!(
                framing("HTTP/1.1", &[("Content-Length", bad)]),
                Err(HttpMessageError::BadContentLength),
                "{bad:?}"
            );
        }
        let r = framing("HTTP/1.1", &[("Transfer-Encoding", "gzip, Chunked")]);
        assert_eq!(r.unwrap().body, BodyLength::Chunked);
        for bad in ["chunked, gzip", "gzip", ""] {
            assert_eq!(
                framing("HTTP/1.1", &[("Transfer-Encoding", bad)]),
                Err(HttpMessageError::BadTransferEncoding),
                "{bad:?}"
            );
        }
        assert_eq!(
            framing("HTTP/1.0", &[("Transfer-Encoding", "chunked")]),
            Err(HttpMessageError::BadTransferEncoding)
        );
        assert_eq!(
            framing(
                "HTTP/1.1",
                &[("Transfer-Encoding", "chunked"), ("Content-Length", "3")]
            ),
            Err(HttpMessageError::AmbiguousLength)
        );
        // HTTP/1.0 keeps the connection only when asked, in either header.
        assert!(!framing("HTTP/1.0", &[]).unwrap().keep_alive);
        assert!(
            framing("HTTP/1.0", &[("Proxy-Connection", "Keep-Alive")])
                .unwrap()
                .keep_alive
        );
        assert!(
            !framing("HTTP/1.1", &[("Proxy-Connection", "keep-alive, close")])
                .unwrap()
                .keep_alive
        );
    }

    /// Feeds `input` to a framer of `length` in pieces of `piece` bytes: the body's length and
    /// whether it ended.
    fn frame(
        length: BodyLength,
        input: &[u8],
        piece: usize,
    ) -> Result<(usize, bool), HttpMessageError> {
        let mut framer = BodyFramer::new(length);
        let mut body = 0;
        for part in input.chunks(piece.max(1)) {
            let used = framer.feed(part)?;
            body += used;
            if used < part.len() {
                assert!(framer.is_done(), "a framer stops short only at the end");
                break;
            }
        }
        Ok((body, framer.is_done()))
    }

    #[test]
    fn bodies_end_where_their_framing_says_in_any_pieces() {
        let chunked = b"5\r\nhello\r\n1A;name=\"v\"\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Sum: 1\r\n\r\nGET / HTTP/1.1";
        let body = chunked.len() - b"GET / HTTP/1.1".len();
        let bare_lf = b"3\nabc\n0\n\nnext";
        for piece in [1, 2, 3, 7, 1000] {
            assert_eq!(frame(BodyLength::Chunked, chunked, piece), Ok((body, true)));
            assert_eq!(frame(BodyLength::Chunked, bare_lf, piece), Ok((9, true)));
            assert_eq!(
                frame(BodyLength::Length(4), b"abcdefg", piece),
                Ok((4, true))
            );
            assert_eq!(
                frame(BodyLength::Chunked, b"0\r\n\r\n", piece),
                Ok((5, true))
            );
        }
        assert_eq!(frame(BodyLength::Empty, b"GET", 3), Ok((0, true)));
        assert_eq!(frame(BodyLength::Length(0), b"GET", 3), Ok((0, true)));
        assert_eq!(frame(BodyLength::UntilClose, b"abc", 1), Ok((3, false)));
        // Not there yet.
        assert_eq!(frame(BodyLength::Length(10), b"abc", 2), Ok((3, false)));
        assert_eq!(frame(BodyLength::Chunked, b"5\r\nhel", 2), Ok((6, false)));
        assert_eq!(
            frame(BodyLength::Chunked, b"0\r\nX: 1\r\n", 2),
            Ok((9, false))
        );
    }

    #[test]
    fn malformed_chunks_are_refused() {
        let too_big = format!("{}\r\n", "f".repeat(17));
        let long_extension = format!("1;{}\r\n", "e".repeat(MAX_CHUNK_LINE));
        let long_trailers = format!("0\r\n{}\r\n\r\n", "t".repeat(MAX_TRAILERS));
        for bad in [
            "\r\n",
            "g\r\n",
            ";x\r\n",
            "2\r\nabc\r\n",
            "2\r\nab\r\r\n",
            too_big.as_str(),
            long_extension.as_str(),
            long_trailers.as_str(),
        ] {
            assert_eq!(
                frame(BodyLength::Chunked, bad.as_bytes(), 1000),
                Err(HttpMessageError::BadChunk),
                "{bad:.40?}"
            );
        }
        // Sixteen hex digits are a size.
        let mut framer = BodyFramer::new(BodyLength::Chunked);
        assert_eq!(framer.feed(b"ffffffffffffffff\r\nab"), Ok(20));
    }

    fn response(head: &str, head_request: bool) -> (Response, usize) {
        Response::parse(head.as_bytes(), head_request)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn responses_say_their_body_and_persistence() {
        let (r, n) = response("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", false);
        assert_eq!(
            (r.status, r.body, r.persistent, n),
            (200, BodyLength::Length(3), true, 38)
        );
        let (r, _) = response(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        );
        assert_eq!((r.body, r.persistent), (BodyLength::Chunked, true));
        // No length: until the close, and the connection is not kept.
        let (r, _) = response("HTTP/1.1 200 OK\r\n\r\n", false);
        assert_eq!((r.body, r.persistent), (BodyLength::UntilClose, false));
        let (r, _) = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false);
        assert_eq!((r.body, r.persistent), (BodyLength::UntilClose, false));
        // No body: HEAD, 1xx, 204, 304, whatever the headers say.
        let (r, _) = response("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true);
        assert_eq!((r.body, r.persistent), (BodyLength::Empty, true));
        for status in ["100 Continue", "204 No Content", "304 Not Modified"] {
            let (r, _) = response(&format!("HTTP/1.1 {status}\r\n\r\n"), false);
            assert_eq!(r.body, BodyLength::Empty, "{status}");
        }
        assert!(
            response("HTTP/1.1 103 Early Hints\r\n\r\n", false)
                .0
                .is_interim()
        );
        // HTTP/1.0 keeps it only when it says so; HTTP/1.1 unless it says close.
        let (r, _) = response("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false);
        assert!(!r.persistent);
        let (r, _) = response(
            "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n",
            false,
        );
        assert!(r.persistent);
        let (r, _) = response(
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
            false,
        );
        assert!(!r.persistent);
        // Both lengths: the coding wins, the Content-Length goes, the connection is not kept.
        let (r, _) = response(
            "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        );
        assert_eq!((r.body, r.persistent), (BodyLength::Chunked, false));
        assert_eq!(
            r.head_for_client(ClientConnection::Close),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nVia: 1.1 braid\r\nConnection: close\r\n\r\n"
        );
        // A status line without a reason.
        assert_eq!(response("HTTP/1.1 404\n\n", false).0.status, 404);
    }

    #[test]
    fn the_client_s_head_has_braid_s_connection_headers() {
        let (r, _) = response(
            "HTTP/1.1 200 OK\r\nServer: x\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\n\
             X-Hop: 1\r\nProxy-Connection: close\r\nSet-Cookie: a=\u{e9}\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        let kept = "HTTP/1.1 200 OK\r\nServer: x\r\nSet-Cookie: a=\u{e9}\r\nContent-Length: 0\r\n";
        assert_eq!(
            r.head_for_client(ClientConnection::KeepAlive),
            format!("{kept}Via: 1.1 braid\r\nConnection: keep-alive\r\n\r\n").into_bytes()
        );
        assert_eq!(
            r.head_for_client(ClientConnection::Close),
            format!("{kept}Via: 1.1 braid\r\nConnection: close\r\n\r\n").into_bytes()
        );
        let (r, _) = response("HTTP/1.1 100 Continue\r\n\r\n", false);
        assert_eq!(
            r.head_for_client(ClientConnection::Interim),
            b"HTTP/1.1 100 Continue\r\nVia: 1.1 braid\r\n\r\n"
        );
        let (r, _) = response("HTTP/1.0 200 OK\r\n\r\n", false);
        assert_eq!(
            r.head_for_client(ClientConnection::Close),
            b"HTTP/1.0 200 OK\r\nVia: 1.0 braid\r\nConnection: close\r\n\r\n"
        );
        // Header values may carry bytes that are not UTF-8; they go on as they came.
        let (r, _) = Response::parse(b"HTTP/1.1 200 \xff\r\nX: \xfe\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert_eq!(
            r.head_for_client(ClientConnection::Interim),
            b"HTTP/1.1 200 \xff\r\nX: \xfe\r\nVia: 1.1 braid\r\n\r\n"
        );
    }

    #[test]
    fn malformed_responses_are_refused() {
        for bad in [
            "HTTP/2 200 OK\r\n\r\n",
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTP/1.1 099 OK\r\n\r\n",
            "ICY 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: 1\r\n folded\r\n\r\n",
            "HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        ] {
            assert_eq!(
                Response::parse(bad.as_bytes(), false),
                Err(HttpMessageError::BadResponse),
                "{bad:?}"
            );
        }
        assert_eq!(
            Response::parse(b"HTTP/1.1 200 OK\r\nX: 1\r\n", false),
            Ok(None)
        );
        let long = format!("HTTP/1.1 200 OK\r\nX: {}", "y".repeat(MAX_RESPONSE_HEAD));
        assert_eq!(
            Response::parse(long.as_bytes(), false),
            Err(HttpMessageError::ResponseHeadTooLong)
        );
    }

    proptest! {
        #[test]
        fn framers_and_parsers_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..400),
            piece in 1usize..50,
        ) {
            let _ = Response::parse(&bytes, false);
            for length in [BodyLength::Chunked, BodyLength::Length(100), BodyLength::UntilClose] {
                let _ = frame(length, &bytes, piece);
            }
        }

        /// A chunked body of any chunks and trailers ends exactly at its end however it is
        /// cut, and what follows is left alone.
        #[test]
        fn a_chunked_body_ends_at_its_end(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 0..6),
            trailers in proptest::collection::vec("[A-Za-z]{1,8}: [ -~]{0,10}", 0..3),
            piece in 1usize..60,
        ) {
            let mut body = Vec::new();
            for chunk in &chunks {
                body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                body.extend_from_slice(chunk);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"0\r\n");
            for trailer in &trailers {
                body.extend_from_slice(format!("{trailer}\r\n").as_bytes());
            }
            body.extend_from_slice(b"\r\n");
            let length = body.len();
            body.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
            prop_assert_eq!(frame(BodyLength::Chunked, &body, piece), Ok((length, true)));
        }
    }
}
