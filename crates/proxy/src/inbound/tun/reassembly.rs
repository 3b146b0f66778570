//! Putting back together the UDP datagrams and ICMP echo requests an application sends in IP
//! fragments: a datagram longer than the device's MTU (a 4,096-byte DNS answer from a local
//! resolver, a game's or a VPN's jumbo packet, `ping -s 4000`, once `[session] max_udp_payload`
//! allows it) leaves the application's kernel as IPv4 fragments, or IPv6 ones with a Fragment
//! header, and only the whole datagram can become a flow's datagram.
//!
//! What is put back together: fragments of UDP, ICMPv4 and ICMPv6 datagrams, IPv4 ones and IPv6
//! ones whose Fragment header follows the fixed header (what Linux sends; fragments of other
//! protocols, and IPv6 fragments behind other extension headers, stay dropped as any packet the
//! inbound does not carry; a whole ICMP message that is not an echo request is dropped as one
//! that came whole). A datagram is known by its addresses, protocol and identification.
//! Every fragment but the last carries a multiple of 8 bytes; fragments that overlap make the
//! whole datagram dropped (RFC 5722, for IPv4 as well: nothing sends them but an attacker, and
//! guessing which copy is meant is how overlap attacks work); a fragment alone (offset 0, no
//! more fragments: an "atomic fragment", RFC 6946) is a whole datagram at once. The limits:
//! [`MAX_DATAGRAMS`] datagrams in pieces at once and [`MAX_HELD`] bytes held for them (a new
//! datagram beyond either makes the oldest dropped: fragments that never complete cannot shut
//! out the ones that do), [`MAX_PIECES`] fragments per datagram, a datagram no longer than an
//! IP packet can say (65,535 bytes), and [`TIMEOUT`] from a datagram's first fragment to its
//! last (Linux's `ipfrag_time`). The datagram put back together is an unfragmented IP packet
//! (the first fragment's header with its lengths, flags and checksum set) that goes on as any
//! packet from the device.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use smoltcp::wire::{IpProtocol, Ipv4Packet, Ipv6Packet};

/// Datagrams in pieces at once.
pub const MAX_DATAGRAMS: usize = 64;
/// Bytes held for datagrams in pieces, at most: 16 datagrams of the longest kind.
pub const MAX_HELD: usize = 1 << 20;
/// Fragments of one datagram, at most: 64 fragments of a 1,280-byte MTU carry more than the
/// longest datagram.
pub const MAX_PIECES: usize = 64;
/// How long a datagram may take from its first fragment to its last.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// IPv6's Fragment header: next header, reserved, offset and flags, identification.
const FRAGMENT_HEADER: usize = 8;
/// IPv6's fixed header.
const IPV6_HEADER: usize = 40;

/// What tells one datagram's fragments from another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    src: IpAddr,
    dst: IpAddr,
    ident: u32,
    protocol: IpProtocol,
}

/// Whether fragments of `protocol` are put back together.
fn carried(protocol: IpProtocol) -> bool {
    matches!(
        protocol,
        IpProtocol::Udp | IpProtocol::Icmp | IpProtocol::Icmpv6
    )
}

/// One fragment of a UDP or ICMP datagram, as read from the device.
#[derive(Debug)]
pub struct Piece<'a> {
    key: Key,
    /// The IP header to rebuild the datagram with, when this fragment is the first: IPv4's
    /// (with any options), or IPv6's fixed header.
    header: &'a [u8],
    /// Where `data` goes in the datagram's IP payload.
    offset: usize,
    /// More fragments follow this one.
    more: bool,
    data: &'a [u8],
}

/// The fragment `packet` is, if it is one of a UDP or ICMP datagram; `None` for anything else
/// (whole packets, fragments of other protocols, malformed packets: [`super::classify`] judges
/// them).
pub fn piece(packet: &[u8]) -> Option<Piece<'_>> {
    match packet.first()? >> 4 {
        4 => {
            // Most packets are whole: the flags and offset say so before anything is checked.
            let flags = packet.get(6..8)?;
            if u16::from_be_bytes([flags[0], flags[1]]) & 0x3fff == 0 {
                return None;
            }
            let ip = Ipv4Packet::new_checked(packet).ok()?;
            if !carried(ip.next_header()) {
                return None;
            }
            let header = usize::from(ip.header_len());
            Some(Piece {
                key: Key {
                    src: IpAddr::V4(ip.src_addr()),
                    dst: IpAddr::V4(ip.dst_addr()),
                    ident: u32::from(ip.ident()),
                    protocol: ip.next_header(),
                },
                header: &packet[..header],
                offset: usize::from(ip.frag_offset()),
                more: ip.more_frags(),
                data: &packet[header..usize::from(ip.total_len())],
            })
        }
        6 => {
            if *packet.get(6)? != u8::from(IpProtocol::Ipv6Frag) {
                return None;
            }
            let ip = Ipv6Packet::new_checked(packet).ok()?;
            let end = IPV6_HEADER + usize::from(ip.payload_len());
            let fragment = packet.get(IPV6_HEADER..IPV6_HEADER + FRAGMENT_HEADER)?;
            let protocol = IpProtocol::from(fragment[0]);
            if end < IPV6_HEADER + FRAGMENT_HEADER || !carried(protocol) {
                return None;
            }
            let field = u16::from_be_bytes([fragment[2], fragment[3]]);
            Some(Piece {
                key: Key {
                    src: IpAddr::V6(ip.src_addr()),
                    dst: IpAddr::V6(ip.dst_addr()),
                    ident: u32::from_be_bytes([fragment[4], fragment[5], fragment[6], fragment[7]]),
                    protocol,
                },
                header: &packet[..IPV6_HEADER],
                offset: usize::from(field & !7),
                more: field & 1 != 0,
                data: &packet[IPV6_HEADER + FRAGMENT_HEADER..end],
            })
        }
        _ => None,
    }
}

/// A datagram in pieces.
#[derive(Debug)]
struct Partial {
    key: Key,
    first_seen: Instant,
    /// The first fragment's IP header, once it has come.
    header: Vec<u8>,
    /// The IP payload so far (gaps are zeros), as long as the furthest fragment's end.
    data: Vec<u8>,
    /// Where each fragment lies, start..end.
    pieces: Vec<(usize, usize)>,
    /// The payload's length, once the last fragment has come.
    total: Option<usize>,
    received: usize,
}

/// The datagrams in pieces, and what is held for them.
#[derive(Debug, Default)]
pub struct Reassembly {
    partials: Vec<Partial>,
    held: usize,
    /// Fragments dropped since [`Reassembly::take_dropped`] last took them: their datagram
    /// broke a rule or a limit, or took too long.
    dropped: u64,
}

impl Reassembly {
    /// Takes one fragment read at `now`; the whole IP packet when it completes its datagram.
    pub fn push(&mut self, piece: Piece<'_>, now: Instant) -> Option<Vec<u8>> {
        self.expire(now);
        let end = piece.offset + piece.data.len();
        // A payload no IP packet can carry, or a fragment but the last whose length is not a
        // multiple of 8 (the next one could not start where it ends).
        let longest = match piece.key.src {
            IpAddr::V4(_) => usize::from(u16::MAX) - piece.header.len(),
            IpAddr::V6(_) => usize::from(u16::MAX),
        };
        if end > longest
            || (piece.more && (piece.data.is_empty() || !piece.data.len().is_multiple_of(8)))
        {
            self.drop_datagram(piece.key);
            self.dropped += 1;
            return None;
        }
        if piece.offset == 0 && !piece.more {
            // An atomic fragment: the datagram is this one piece (RFC 6946: apart from any
            // datagram in pieces of the same identification).
            return whole(piece.header, piece.data, piece.key.protocol);
        }
        if !self.partials.iter().any(|p| p.key == piece.key) {
            self.make_room(end, None);
            self.partials.push(Partial {
                key: piece.key,
                first_seen: now,
                header: Vec::new(),
                data: Vec::new(),
                pieces: Vec::new(),
                total: None,
                received: 0,
            });
        }
        let p = self.partials.iter().find(|p| p.key == piece.key)?;
        let fits = match p.total {
            Some(total) => end <= total && (piece.more || end == total),
            None => piece.more || p.pieces.iter().all(|&(_, e)| e <= end),
        };
        let overlaps = p.pieces.iter().any(|&(s, e)| piece.offset < e && s < end);
        if !fits || overlaps || p.pieces.len() == MAX_PIECES {
            self.drop_datagram(piece.key);
            self.dropped += 1;
            return None;
        }
        let grow = end.saturating_sub(p.data.len());
        if grow > 0 {
            self.make_room(grow, Some(piece.key));
        }
        let i = self.partials.iter().position(|p| p.key == piece.key)?;
        let p = &mut self.partials[i];
        if grow > 0 {
            // Exactly: what is held is what is counted.
            p.data.reserve_exact(grow);
            p.data.resize(end, 0);
            self.held += grow;
        }
        p.data[piece.offset..end].copy_from_slice(piece.data);
        p.pieces.push((piece.offset, end));
        p.received += piece.data.len();
        if piece.offset == 0 {
            p.header = piece.header.to_vec();
        }
        if !piece.more {
            p.total = Some(end);
        }
        if p.total != Some(p.received) {
            return None;
        }
        // No overlaps, and the bytes received are the payload's length: every byte has come.
        let done = self.partials.swap_remove(i);
        self.held -= done.data.len();
        whole(&done.header, &done.data, done.key.protocol)
    }

    /// Datagrams in pieces now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.partials.len()
    }

    /// Whether no datagram is in pieces.
    pub fn is_empty(&self) -> bool {
        self.partials.is_empty()
    }

    /// Bytes held for them.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held
    }

    /// The fragments dropped since the last call.
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// Drops the datagrams whose first fragment came more than [`TIMEOUT`] before `now`.
    pub fn expire(&mut self, now: Instant) {
        let (held, dropped) = (&mut self.held, &mut self.dropped);
        self.partials.retain(|p| {
            let live = now.saturating_duration_since(p.first_seen) <= TIMEOUT;
            if !live {
                *held -= p.data.len();
                *dropped += p.pieces.len() as u64;
            }
            live
        });
    }

    /// Drops the datagram of `key` if it is in pieces, with the fragments it held.
    fn drop_datagram(&mut self, key: Key) {
        if let Some(i) = self.partials.iter().position(|p| p.key == key) {
            self.drop_at(i);
        }
    }

    fn drop_at(&mut self, i: usize) {
        let gone = self.partials.swap_remove(i);
        self.held -= gone.data.len();
        self.dropped += gone.pieces.len() as u64;
    }

    /// Drops the oldest datagrams (never `keep`) until `bytes` more fit in [`MAX_HELD`] and,
    /// for a new datagram (`keep` is `None`), one more fits in [`MAX_DATAGRAMS`].
    fn make_room(&mut self, bytes: usize, keep: Option<Key>) {
        let count = usize::from(keep.is_none());
        while self.held + bytes > MAX_HELD || self.partials.len() + count > MAX_DATAGRAMS {
            let oldest = self
                .partials
                .iter()
                .enumerate()
                .filter(|(_, p)| Some(p.key) != keep)
                .min_by_key(|(_, p)| p.first_seen)
                .map(|(i, _)| i);
            let Some(i) = oldest else { break };
            self.drop_at(i);
        }
    }
}

/// The unfragmented IP packet of `header` (a first fragment's) and `payload` of `protocol`;
/// `None` when the header is missing or the packet would be too long.
fn whole(header: &[u8], payload: &[u8], protocol: IpProtocol) -> Option<Vec<u8>> {
    let mut packet = Vec::with_capacity(header.len() + payload.len());
    packet.extend_from_slice(header);
    packet.extend_from_slice(payload);
    match header.first()? >> 4 {
        4 => {
            let total = u16::try_from(packet.len()).ok()?;
            let mut ip = Ipv4Packet::new_unchecked(&mut packet[..]);
            ip.set_total_len(total);
            ip.set_more_frags(false);
            ip.set_frag_offset(0);
            ip.fill_checksum();
        }
        _ => {
            let len = u16::try_from(payload.len()).ok()?;
            let mut ip = Ipv6Packet::new_unchecked(&mut packet[..]);
            ip.set_next_header(protocol);
            ip.set_payload_len(len);
        }
    }
    Some(packet)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbound::tun::{Packet, classify};
    use proptest::prelude::*;
    use std::net::SocketAddr;

    const V4: (&str, &str) = ("10.7.0.2:40000", "192.0.2.9:53");
    const V6: (&str, &str) = ("[fd00:7::2]:40000", "[2001:db8::9]:53");

    /// A whole UDP packet from `src` to `dst` carrying `payload` (the UDP checksum is not read).
    fn udp(src: &str, dst: &str, payload: &[u8]) -> Vec<u8> {
        let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let mut udp = Vec::new();
        udp.extend_from_slice(&src.port().to_be_bytes());
        udp.extend_from_slice(&dst.port().to_be_bytes());
        udp.extend_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(payload);
        let mut p = Vec::new();
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                p.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
                p.extend_from_slice(&s.octets());
                p.extend_from_slice(&d.octets());
                p.extend_from_slice(&udp);
                let mut ip = Ipv4Packet::new_unchecked(&mut p[..]);
                ip.set_total_len(u16::try_from(20 + udp.len()).unwrap());
                ip.fill_checksum();
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                p.extend_from_slice(&[0x60, 0, 0, 0]);
                p.extend_from_slice(&u16::try_from(udp.len()).unwrap().to_be_bytes());
                p.extend_from_slice(&[17, 64]);
                p.extend_from_slice(&s.octets());
                p.extend_from_slice(&d.octets());
                p.extend_from_slice(&udp);
            }
            _ => unreachable!("one family"),
        }
        p
    }

    /// The fragment of `whole` (from [`udp`], its protocol maybe changed) carrying its IP
    /// payload's bytes `range`, with
    /// identification `ident`, as Linux writes them (IPv6: a Fragment header after the fixed
    /// header).
    fn fragment(whole: &[u8], range: std::ops::Range<usize>, more: bool, ident: u32) -> Vec<u8> {
        let v4 = whole[0] >> 4 == 4;
        let header = if v4 { 20 } else { IPV6_HEADER };
        let data = &whole[header + range.start..header + range.end];
        let mut p = whole[..header].to_vec();
        if v4 {
            p.extend_from_slice(data);
            let mut ip = Ipv4Packet::new_unchecked(&mut p[..]);
            ip.set_total_len(u16::try_from(20 + data.len()).unwrap());
            ip.set_ident(ident as u16);
            ip.set_dont_frag(false);
            ip.set_more_frags(more);
            ip.set_frag_offset(u16::try_from(range.start).unwrap());
            ip.fill_checksum();
        } else {
            let field = u16::try_from(range.start).unwrap() | u16::from(more);
            p.extend_from_slice(&[whole[6], 0]);
            p.extend_from_slice(&field.to_be_bytes());
            p.extend_from_slice(&ident.to_be_bytes());
            p.extend_from_slice(data);
            p[6] = 44;
            p[4..6].copy_from_slice(&u16::try_from(8 + data.len()).unwrap().to_be_bytes());
        }
        p
    }

    /// `whole` in fragments of `size` payload bytes (the last shorter).
    fn fragments(whole: &[u8], size: usize, ident: u32) -> Vec<Vec<u8>> {
        let header = if whole[0] >> 4 == 4 { 20 } else { IPV6_HEADER };
        let len = whole.len() - header;
        (0..len)
            .step_by(size)
            .map(|s| fragment(whole, s..(s + size).min(len), s + size < len, ident))
            .collect()
    }

    fn push(r: &mut Reassembly, packet: &[u8], now: Instant) -> Option<Vec<u8>> {
        r.push(piece(packet).expect("a fragment"), now)
    }

    fn payload(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn fragments_in_any_order_give_the_datagram_back() {
        for (src, dst) in [V4, V6] {
            let sent = payload(4000);
            let whole = udp(src, dst, &sent);
            let pieces = fragments(&whole, 1480, 7);
            assert_eq!(pieces.len(), 3);
            for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
                let mut r = Reassembly::default();
                let now = Instant::now();
                assert_eq!(push(&mut r, &pieces[order[0]], now), None);
                assert_eq!(push(&mut r, &pieces[order[1]], now), None);
                let packet = push(&mut r, &pieces[order[2]], now).expect("the datagram");
                if src.starts_with('[') {
                    assert_eq!(packet, whole, "{src} {order:?}");
                } else {
                    // The identification stays the fragments'; the rest is the datagram.
                    let ip = Ipv4Packet::new_checked(&packet[..]).unwrap();
                    assert!(ip.verify_checksum() && !ip.more_frags() && ip.frag_offset() == 0);
                    assert_eq!(packet[20..], whole[20..], "{src} {order:?}");
                }
                match classify(&packet) {
                    Packet::Udp {
                        src: s,
                        dst: d,
                        payload,
                    } => {
                        assert_eq!((s, d), (src.parse().unwrap(), dst.parse().unwrap()));
                        assert_eq!(payload, &sent[..]);
                    }
                    other => panic!("{src}: {other:?}"),
                }
                assert_eq!((r.len(), r.held(), r.take_dropped()), (0, 0, 0));
            }
        }
    }

    #[test]
    fn interleaved_datagrams_stay_apart() {
        let (a, b) = (payload(3000), vec![9; 2500]);
        let (wa, wb) = (udp(V4.0, V4.1, &a), udp(V4.0, V4.1, &b));
        let (fa, fb) = (fragments(&wa, 1000, 1), fragments(&wb, 1000, 2));
        assert_eq!((fa.len(), fb.len()), (4, 3));
        let mut r = Reassembly::default();
        let now = Instant::now();
        let mut whole = Vec::new();
        for p in [&fa[0], &fb[0], &fa[1], &fb[1], &fa[2], &fb[2], &fa[3]] {
            whole.extend(push(&mut r, p, now));
        }
        assert_eq!(whole.len(), 2);
        assert_eq!((&whole[0][20..], &whole[1][20..]), (&wb[20..], &wa[20..]));
    }

    #[test]
    fn overlapping_or_impossible_fragments_drop_their_datagram() {
        let whole = udp(V6.0, V6.1, &payload(3000));
        let now = Instant::now();
        let mut r = Reassembly::default();
        let mut check = |first: (std::ops::Range<usize>, bool), second, ident| {
            assert_eq!(
                push(&mut r, &fragment(&whole, first.0, first.1, ident), now),
                None
            );
            let (range, more) = second;
            assert_eq!(
                push(&mut r, &fragment(&whole, range, more, ident), now),
                None
            );
            assert_eq!((r.len(), r.held(), r.take_dropped()), (0, 0, 2), "{ident}");
        };
        // The second fragment starts inside the first.
        check((0..1024, true), (1016..2048, true), 1);
        // The same fragment twice is an overlap too.
        check((0..1024, true), (0..1024, true), 2);
        // A fragment beyond the last one's end, and a last one ending before another's end.
        check((1024..2048, false), (2048..3008, true), 3);
        check((1024..2048, true), (512..1024, false), 4);
        // A fragment with more to come whose length is not a multiple of 8.
        assert_eq!(push(&mut r, &fragment(&whole, 0..1001, true, 5), now), None);
        assert_eq!((r.len(), r.held(), r.take_dropped()), (0, 0, 1));
    }

    #[test]
    fn a_fragment_alone_is_a_whole_datagram_and_other_packets_are_not_fragments() {
        let whole = udp(V6.0, V6.1, b"atomic");
        let atomic = fragment(&whole, 0..whole.len() - IPV6_HEADER, false, 9);
        let mut r = Reassembly::default();
        assert_eq!(push(&mut r, &atomic, Instant::now()), Some(whole.clone()));
        assert!(piece(&whole).is_none(), "a whole packet");
        let v4 = udp(V4.0, V4.1, &payload(3000));
        let mut tcp = fragments(&v4, 1480, 1).remove(0);
        tcp[9] = 6;
        assert!(piece(&tcp).is_none(), "a TCP fragment");
        assert!(matches!(classify(&tcp), Packet::Other));
    }

    /// ICMP datagrams (`ping -s 4000`) are put back together too, apart from a UDP datagram of
    /// the same addresses and identification.
    #[test]
    fn icmp_datagrams_come_back_whole_apart_from_udp_ones() {
        for (src, dst) in [V4, V6] {
            let udp_whole = udp(src, dst, &payload(3000));
            let mut icmp_whole = udp_whole.clone();
            match icmp_whole[0] >> 4 {
                4 => {
                    icmp_whole[9] = 1;
                    let mut ip = Ipv4Packet::new_unchecked(&mut icmp_whole[..]);
                    ip.fill_checksum();
                }
                _ => icmp_whole[6] = 58,
            }
            let (u, i) = (
                fragments(&udp_whole, 1480, 5),
                fragments(&icmp_whole, 1480, 5),
            );
            let now = Instant::now();
            let mut r = Reassembly::default();
            assert_eq!(push(&mut r, &u[0], now), None);
            assert_eq!(push(&mut r, &i[0], now), None);
            assert_eq!(r.len(), 2, "two datagrams");
            // The same as sent after the IP header (IPv4's identification stays the
            // fragments'), and the protocol kept.
            let same = |packet: Option<Vec<u8>>, sent: &[u8]| {
                let packet = packet.expect("the datagram");
                let (header, protocol) = if src.starts_with('[') {
                    (40, 6)
                } else {
                    (20, 9)
                };
                packet[header..] == sent[header..] && packet[protocol] == sent[protocol]
            };
            assert_eq!(push(&mut r, &i[1], now), None);
            assert!(same(push(&mut r, &i[2], now), &icmp_whole), "{src}");
            assert_eq!(push(&mut r, &u[1], now), None);
            assert!(same(push(&mut r, &u[2], now), &udp_whole), "{src}");
            assert_eq!(r.take_dropped(), 0);
        }
    }

    #[test]
    fn datagrams_never_completed_expire_or_make_room() {
        let now = Instant::now();
        let mut r = Reassembly::default();
        let whole = udp(V4.0, V4.1, &payload(3000));
        // Only first fragments: each a datagram in pieces.
        for ident in 0..MAX_DATAGRAMS as u32 {
            assert_eq!(
                push(&mut r, &fragment(&whole, 0..1480, true, ident), now),
                None
            );
        }
        assert_eq!((r.len(), r.held()), (MAX_DATAGRAMS, MAX_DATAGRAMS * 1480));
        assert_eq!(r.take_dropped(), 0);
        // One more makes the oldest go.
        let later = now + Duration::from_millis(1);
        let fs = fragments(&whole, 1480, 1000);
        assert_eq!(push(&mut r, &fs[0], later), None);
        assert_eq!((r.len(), r.take_dropped()), (MAX_DATAGRAMS, 1));
        // The newest completes; the others expire after TIMEOUT.
        assert_eq!(push(&mut r, &fs[1], later), None);
        assert!(push(&mut r, &fs[2], later).is_some());
        r.expire(now + TIMEOUT);
        assert_eq!(r.take_dropped(), 0);
        r.expire(later + TIMEOUT);
        assert_eq!(r.take_dropped(), MAX_DATAGRAMS as u64 - 1);
        assert_eq!((r.len(), r.held()), (0, 0));
        // Fragments far into long datagrams: held bytes stay within MAX_HELD.
        let long = udp(V6.0, V6.1, &payload(65_000));
        for ident in 0..40 {
            assert_eq!(
                push(&mut r, &fragment(&long, 63_000..64_000, true, ident), later),
                None
            );
            assert!(r.held() <= MAX_HELD, "{}", r.held());
        }
        assert_eq!(r.len(), MAX_HELD / 64_000);
        assert_eq!(r.take_dropped(), 40 - (MAX_HELD / 64_000) as u64);
    }

    #[test]
    fn a_datagram_longer_than_an_ip_packet_is_dropped() {
        // An IPv4 fragment whose end lies beyond what a total length can say.
        let whole = udp(V4.0, V4.1, &payload(2000));
        let mut p = fragment(&whole, 0..1480, true, 3);
        Ipv4Packet::new_unchecked(&mut p[..]).set_frag_offset(65_520);
        let mut r = Reassembly::default();
        assert_eq!(push(&mut r, &p, Instant::now()), None);
        assert_eq!((r.len(), r.take_dropped()), (0, 1));
    }

    proptest! {
        /// Any fragments, in any order, with any lengths and offsets: no panic, and the bytes
        /// held stay what the datagrams in pieces hold, within the limits.
        #[test]
        fn reassembly_never_panics_and_stays_within_its_limits(
            steps in proptest::collection::vec(
                (0u32..4, 0usize..9000, 0usize..2000, any::<bool>(), any::<bool>(), 0u64..40_000),
                1..200,
            ),
        ) {
            let whole = udp(V6.0, V6.1, &payload(12_000));
            let whole4 = udp(V4.0, V4.1, &payload(12_000));
            let start = Instant::now();
            let mut r = Reassembly::default();
            for (ident, offset, len, more, v4, ms) in steps {
                let offset = offset & !7;
                let base = if v4 { &whole4 } else { &whole };
                let end = (offset + len).min(base.len() - 40);
                let p = fragment(base, offset.min(end)..end, more, ident);
                if let Some(w) = piece(&p).and_then(|x| r.push(x, start + Duration::from_millis(ms))) {
                    // A whole IP packet whose lengths agree with its bytes.
                    prop_assert!(piece(&w).is_none());
                    let len = match w[0] >> 4 {
                        4 => Ipv4Packet::new_checked(&w[..]).map(|ip| usize::from(ip.total_len())),
                        _ => Ipv6Packet::new_checked(&w[..]).map(|ip| 40 + usize::from(ip.payload_len())),
                    };
                    prop_assert_eq!(len, Ok(w.len()));
                }
                prop_assert!(r.len() <= MAX_DATAGRAMS);
                prop_assert!(r.held() <= MAX_HELD);
                prop_assert_eq!(r.held(), r.partials.iter().map(|p| p.data.len()).sum::<usize>());
            }
        }

        #[test]
        fn piece_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let mut p = bytes;
            if let Some(b) = p.first_mut() {
                *b = if *b & 1 == 0 { 0x45 } else { 0x60 };
            }
            if p.len() > 6 && p[0] == 0x60 {
                p[6] = 44;
            }
            if let Some(piece) = piece(&p) {
                let _ = Reassembly::default().push(piece, Instant::now());
            }
        }
    }
}
