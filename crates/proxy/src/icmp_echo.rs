//! ICMP echo (ping) through braid. The TUN inbound hands each echo request an application sends
//! through the device (ICMPv4 type 8, ICMPv6 type 128) to a ping flow to the request's
//! destination ([`crate::session::FlowKind::Ping`], one per source, destination and
//! identifier), the server sends it from its own socket, and the replies come back the same way
//! and become echo replies written to the device with the request's identifier.
//!
//! A ping flow's datagram is the echo's sequence number (2 bytes, big endian) then its data,
//! both ways ([`datagram`], [`parse_datagram`]); the identifier stays at each end (the client
//! keeps the application's, the server's socket has its own).
//!
//! The server's socket ([`EchoSocket`]) is an unprivileged ICMP socket (`SOCK_DGRAM`,
//! `IPPROTO_ICMP` / `IPPROTO_ICMPV6`; Linux allows it to the groups in
//! `net.ipv4.ping_group_range`, which systemd opens to all), or, where that is refused, a raw
//! ICMP socket (`CAP_NET_RAW`: root, or the capability given to the service). It is connected to
//! the destination, so it hears only that address; a raw socket also has a socket filter
//! (`reply_filter`) so that the kernel hands it only the echo replies with its identifier,
//! not every ICMP message from the destination (each of 256 ping flows to one host would
//! otherwise read and pass over the replies of all the others).

use std::io;
use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut as _, Bytes, BytesMut};
use socket2::{Domain, Protocol, Socket, Type};

/// ICMPv4 echo request and reply types.
const V4_REQUEST: u8 = 8;
const V4_REPLY: u8 = 0;
/// ICMPv6 echo request and reply types.
const V6_REQUEST: u8 = 128;
const V6_REPLY: u8 = 129;
/// The echo header: type, code, checksum, identifier, sequence number.
const ECHO_HEADER: usize = 8;
/// Longest echo message read back (an echo's data is at most what a datagram carries).
pub const MAX_ECHO: usize = 65_535;

/// A ping flow's datagram: `seq` then `data`.
pub fn datagram(seq: u16, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(2 + data.len());
    out.put_u16(seq);
    out.put_slice(data);
    out.freeze()
}

/// A ping flow datagram's sequence number and data; `None` when shorter than a sequence number.
pub fn parse_datagram(d: &[u8]) -> Option<(u16, &[u8])> {
    let (seq, data) = d.split_first_chunk::<2>()?;
    Some((u16::from_be_bytes(*seq), data))
}

/// The one's-complement sum of `data`, folded, complemented (RFC 1071).
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Classic BPF (Linux `filter.txt`): the instruction classes, sizes, modes and operations the
/// reply filter uses.
mod bpf {
    pub const LD: u16 = 0x00;
    pub const LDX: u16 = 0x01;
    pub const JMP: u16 = 0x05;
    pub const RET: u16 = 0x06;
    pub const H: u16 = 0x08;
    pub const B: u16 = 0x10;
    pub const ABS: u16 = 0x20;
    pub const IND: u16 = 0x40;
    pub const MSH: u16 = 0xa0;
    pub const JEQ: u16 = 0x10;
    pub const K: u16 = 0x00;
}

/// The socket filter of a raw echo socket: the kernel keeps a message only when it is an echo
/// reply (ICMPv4 type 0, ICMPv6 type 129) with identifier `ident`. A raw IPv4 socket's packet
/// starts with the IP header (its length from the first byte), an IPv6 one's with the ICMPv6
/// message.
fn reply_filter(v6: bool, ident: u16) -> Vec<socket2::SockFilter> {
    use bpf::*;
    use socket2::SockFilter as F;
    let (keep, drop) = (F::new(RET | K, 0, 0, u32::MAX), F::new(RET | K, 0, 0, 0));
    let mut program = match v6 {
        false => vec![
            // X = the IP header's length; A = the ICMP type.
            F::new(LDX | B | MSH, 0, 0, 0),
            F::new(LD | B | IND, 0, 0, 0),
            F::new(JMP | JEQ | K, 0, 3, u32::from(V4_REPLY)),
            F::new(LD | H | IND, 0, 0, 4),
        ],
        true => vec![
            F::new(LD | B | ABS, 0, 0, 0),
            F::new(JMP | JEQ | K, 0, 3, u32::from(V6_REPLY)),
            F::new(LD | H | ABS, 0, 0, 4),
        ],
    };
    program.extend([F::new(JMP | JEQ | K, 0, 1, u32::from(ident)), keep, drop]);
    program
}

/// How the server's socket was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EchoSocketKind {
    /// An unprivileged ICMP socket: the kernel sets the identifier and checksum and hands back
    /// only this socket's replies, without the IP header.
    Ping,
    /// A raw ICMP socket: braid sets the identifier (and the ICMPv4 checksum; the kernel
    /// computes ICMPv6's) and picks its replies out; IPv4 reads carry the IP header.
    Raw,
}

/// The server's socket for the echoes of one ping flow, connected to the destination.
#[derive(Debug)]
pub struct EchoSocket {
    socket: tokio::net::UdpSocket,
    kind: EchoSocketKind,
    v6: bool,
    /// The identifier a raw socket's requests carry (a ping socket's is the kernel's).
    ident: u16,
}

impl EchoSocket {
    /// A socket connected to `to`: an ICMP socket, or a raw one where that is not allowed
    /// (`EACCES`, `EPERM`); the error of the raw socket's attempt when neither is.
    pub fn open(to: IpAddr) -> io::Result<EchoSocket> {
        EchoSocket::open_on(to, None)
    }

    /// [`EchoSocket::open`], the socket bound to `device` when one is named (a client's
    /// `direct` route's `interface`).
    pub fn open_on(to: IpAddr, device: Option<&str>) -> io::Result<EchoSocket> {
        let (domain, protocol) = match to {
            IpAddr::V4(_) => (Domain::IPV4, Protocol::ICMPV4),
            IpAddr::V6(_) => (Domain::IPV6, Protocol::ICMPV6),
        };
        let (socket, kind) = match Socket::new(domain, Type::DGRAM, Some(protocol)) {
            Ok(s) => (s, EchoSocketKind::Ping),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => (
                Socket::new(domain, Type::RAW, Some(protocol))?,
                EchoSocketKind::Raw,
            ),
            Err(e) => return Err(e),
        };
        let ident = rand::random();
        if let Some(device) = device {
            socket.bind_device(Some(device.as_bytes()))?;
        }
        if kind == EchoSocketKind::Raw {
            socket.attach_filter(&reply_filter(to.is_ipv6(), ident))?;
        }
        socket.set_nonblocking(true)?;
        socket.connect(&SocketAddr::new(to, 0).into())?;
        let std: std::net::UdpSocket = socket.into();
        if kind == EchoSocketKind::Raw {
            // What arrived before the filter was in place (from anyone) goes unread.
            let mut scrap = [0u8; 64];
            while std.recv(&mut scrap).is_ok() {}
        }
        Ok(EchoSocket {
            socket: tokio::net::UdpSocket::from_std(std)?,
            kind,
            v6: to.is_ipv6(),
            ident,
        })
    }

    /// How it was opened.
    pub fn kind(&self) -> EchoSocketKind {
        self.kind
    }

    /// Sends an echo request with `seq` and `data`.
    pub async fn send(&self, seq: u16, data: &[u8]) -> io::Result<()> {
        let mut message = Vec::with_capacity(ECHO_HEADER + data.len());
        message.push(if self.v6 { V6_REQUEST } else { V4_REQUEST });
        message.extend_from_slice(&[0, 0, 0]);
        message.extend_from_slice(&self.ident.to_be_bytes());
        message.extend_from_slice(&seq.to_be_bytes());
        message.extend_from_slice(data);
        if self.kind == EchoSocketKind::Raw && !self.v6 {
            let sum = checksum(&message);
            message[2..4].copy_from_slice(&sum.to_be_bytes());
        }
        self.socket.send(&message).await.map(drop)
    }

    /// Waits for the next echo reply (other messages are passed over): its sequence number and
    /// where its data lies in `buf`.
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<(u16, std::ops::Range<usize>)> {
        loop {
            let n = self.socket.recv(buf).await?;
            if let Some(reply) = self.reply(&buf[..n]) {
                return Ok(reply);
            }
        }
    }

    /// The sequence number and data range of `read` when it is one of this socket's echo
    /// replies.
    fn reply(&self, read: &[u8]) -> Option<(u16, std::ops::Range<usize>)> {
        // A raw IPv4 socket reads the IP header too.
        let start = if self.kind == EchoSocketKind::Raw && !self.v6 {
            usize::from(read.first()? & 0x0f) * 4
        } else {
            0
        };
        let message = read.get(start..)?;
        let header = message.get(..ECHO_HEADER)?;
        let reply = if self.v6 { V6_REPLY } else { V4_REPLY };
        if header[0] != reply || header[1] != 0 {
            return None;
        }
        let ident = u16::from_be_bytes([header[4], header[5]]);
        if self.kind == EchoSocketKind::Raw && ident != self.ident {
            return None;
        }
        let seq = u16::from_be_bytes([header[6], header[7]]);
        Some((seq, start + ECHO_HEADER..read.len()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn datagrams_carry_the_sequence_number_then_the_data() {
        let d = datagram(0x0102, b"abc");
        assert_eq!(&d[..], b"\x01\x02abc");
        assert_eq!(parse_datagram(&d), Some((0x0102, &b"abc"[..])));
        assert_eq!(parse_datagram(b"\x00\x07"), Some((7, &b""[..])));
        assert_eq!(parse_datagram(b"\x00"), None);
    }

    #[test]
    fn the_checksum_is_rfc_1071_s() {
        // RFC 1071's example: 0001 f203 f4f5 f6f7 sums to ddf2, so the checksum is 220d.
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
        // A message with its checksum in place sums to zero; an odd length pads with zero.
        let mut m = vec![8, 0, 0, 0, 0x12, 0x34, 0, 1, b'x'];
        let sum = checksum(&m);
        m[2..4].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(checksum(&m), 0);
    }

    /// A raw IPv4 socket's read: a 20-byte IP header, then the ICMP message.
    fn raw_v4_read(kind: u8, ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
        let mut read = vec![0x45];
        read.extend_from_slice(&[0; 19]);
        read.extend_from_slice(&[kind, 0, 0, 0]);
        read.extend_from_slice(&ident.to_be_bytes());
        read.extend_from_slice(&seq.to_be_bytes());
        read.extend_from_slice(data);
        read
    }

    #[tokio::test]
    async fn replies_are_picked_out_by_type_and_a_raw_socket_s_identifier() {
        let Ok(mut socket) = EchoSocket::open("127.0.0.1".parse().unwrap()) else {
            eprintln!("no ICMP socket may be opened here (ping_group_range, CAP_NET_RAW)");
            return;
        };
        socket.kind = EchoSocketKind::Raw;
        socket.ident = 0x4242;
        let read = raw_v4_read(V4_REPLY, 0x4242, 9, b"data");
        assert_eq!(socket.reply(&read), Some((9, 28..32)));
        // Another process's reply, a request, a short read: passed over.
        assert_eq!(socket.reply(&raw_v4_read(V4_REPLY, 0x4243, 9, b"")), None);
        assert_eq!(socket.reply(&raw_v4_read(V4_REQUEST, 0x4242, 9, b"")), None);
        assert_eq!(socket.reply(&read[..27]), None);
        assert_eq!(socket.reply(&[]), None);
        // A ping socket reads the message alone, and any identifier is its own.
        socket.kind = EchoSocketKind::Ping;
        assert_eq!(socket.reply(&read[20..]), Some((9, 8..12)));
        assert_eq!(
            socket.reply(&raw_v4_read(0, 1, 2, b"")[20..]),
            Some((2, 8..8))
        );
    }

    /// A raw socket's filter keeps its own replies in the kernel: beside a socket that pings
    /// 127.0.0.1 and ::1, another raw socket to the same address has nothing to read (without
    /// the filter it holds the request and the reply the loopback delivered to every raw
    /// ICMP socket).
    #[tokio::test]
    async fn a_raw_socket_is_handed_only_its_own_replies() {
        for to in ["127.0.0.1", "::1"] {
            let to: IpAddr = to.parse().unwrap();
            let (Ok(ours), Ok(other)) = (EchoSocket::open(to), EchoSocket::open(to)) else {
                eprintln!("no ICMP socket may be opened here (ping_group_range, CAP_NET_RAW)");
                return;
            };
            if ours.kind() != EchoSocketKind::Raw {
                eprintln!("skipped: unprivileged ICMP sockets here, no filter to check");
                return;
            }
            assert_ne!(
                ours.ident, other.ident,
                "two random identifiers (1 in 65,536)"
            );
            ours.send(5, b"filtered").await.unwrap();
            let mut buf = vec![0u8; MAX_ECHO];
            let (seq, data) =
                tokio::time::timeout(std::time::Duration::from_secs(5), ours.recv(&mut buf))
                    .await
                    .expect("no echo reply within 5 s")
                    .unwrap();
            assert_eq!((seq, &buf[data]), (5, &b"filtered"[..]), "{to}");
            let unread = other.socket.try_recv(&mut buf);
            assert!(
                unread
                    .as_ref()
                    .is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock),
                "{to}: the other socket read {unread:?}"
            );
        }
    }

    /// An echo to 127.0.0.1 and ::1 comes back with its sequence number and data, through
    /// whichever socket this machine allows.
    #[tokio::test]
    async fn an_echo_to_loopback_comes_back() {
        for to in ["127.0.0.1", "::1"] {
            let Ok(socket) = EchoSocket::open(to.parse().unwrap()) else {
                eprintln!("no ICMP socket may be opened here (ping_group_range, CAP_NET_RAW)");
                return;
            };
            socket.send(77, b"braid ping").await.unwrap();
            let mut buf = vec![0u8; MAX_ECHO];
            let (seq, data) =
                tokio::time::timeout(std::time::Duration::from_secs(5), socket.recv(&mut buf))
                    .await
                    .expect("no echo reply within 5 s")
                    .unwrap();
            assert_eq!((seq, &buf[data]), (77, &b"braid ping"[..]), "{to}");
        }
    }
}
