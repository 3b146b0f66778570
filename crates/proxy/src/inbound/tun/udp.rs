//! The TUN inbound's UDP side. Each application UDP socket (source address and port) gets one
//! datagram flow, opened at its first datagram, as a SOCKS5 UDP association would: every
//! datagram travels with the SOCKS5 UDP header that names its destination, and every answer
//! comes back with the header that names its source, which becomes the source of the UDP packet
//! written to the device. A source quiet for [`UDP_IDLE`] loses its flow.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{IpProtocol, IpRepr, UdpPacket, UdpRepr};
use tokio::sync::{Notify, mpsc};
use tracing::debug;

use super::feeds::{Feeds, NotFed, ToDevice, fit_to_mtu, link_only};
use super::{MAX_UDP, TunCounters};
use crate::inbound::server::InboundContext;
use crate::inbound::socks5;
use crate::inbound::socks5_server::unspecified;
use crate::session::{FlowKind, Target};
use crate::transport::flow::FlowMsg;

/// How long a UDP source keeps its flow with nothing sent or received.
pub const UDP_IDLE: Duration = Duration::from_secs(60);
/// Datagrams waiting for one source's flow.
const QUEUE: usize = 64;
/// Answers waiting to be written to the device.
const MAX_REPLIES: usize = 1024;

pub(super) struct UdpTable {
    ctx: Arc<InboundContext>,
    counters: Arc<TunCounters>,
    mtu: Arc<AtomicUsize>,
    sources: Feeds<SocketAddr, (SocketAddr, Bytes)>,
    replies: Arc<ToDevice>,
}

impl UdpTable {
    pub(super) fn new(
        ctx: Arc<InboundContext>,
        counters: Arc<TunCounters>,
        notify: Arc<Notify>,
        mtu: Arc<AtomicUsize>,
    ) -> Self {
        UdpTable {
            ctx,
            counters,
            mtu,
            sources: Feeds::new(MAX_UDP, QUEUE),
            replies: ToDevice::new(MAX_REPLIES, notify),
        }
    }

    /// A datagram from the application socket `src` to `dst`. Multicast and broadcast
    /// destinations (mDNS, SSDP, DHCP the system sends into the device) concern the local link
    /// only: they are dropped, not carried.
    pub(super) fn on_datagram(&mut self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        if link_only(dst.ip()) {
            self.counters.udp_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let datagram = (dst, Bytes::copy_from_slice(payload));
        let fed = self.sources.feed(src, datagram, |queue| {
            associate(
                self.ctx.clone(),
                src,
                queue,
                self.replies.clone(),
                self.counters.clone(),
                self.mtu.clone(),
            )
        });
        if let Err(why) = fed {
            self.counters.udp_dropped.fetch_add(1, Ordering::Relaxed);
            if why == NotFed::TooMany {
                debug!(%src, "TUN inbound: too many UDP sources, datagram dropped");
            }
        }
    }

    /// The answers built since the last call, as IP packets for the device.
    pub(super) fn take_replies(&mut self) -> Vec<Vec<u8>> {
        self.replies.take()
    }
}

/// One source's flow: datagrams up with their destination, answers down as UDP packets.
async fn associate(
    ctx: Arc<InboundContext>,
    local: SocketAddr,
    mut datagrams: mpsc::Receiver<(SocketAddr, Bytes)>,
    replies: Arc<ToDevice>,
    counters: Arc<TunCounters>,
    mtu: Arc<AtomicUsize>,
) {
    let flow = match ctx
        .open(FlowKind::Datagram, Target::Addr(unspecified()))
        .await
    {
        Ok(f) => f,
        Err(e) => {
            debug!(%local, error = %e, "TUN inbound: no UDP flow");
            counters.udp_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let (writer, mut reader) = flow.split();
    // A UDP header naming an address has the layout of a reply naming one.
    let mut header = [0u8; socks5::MAX_REPLY];
    loop {
        tokio::select! {
            d = datagrams.recv() => {
                let Some((dst, payload)) = d else { break };
                let Ok(n) = socks5::encode_udp_header(&Target::Addr(dst), &mut header) else {
                    continue;
                };
                let mut datagram = BytesMut::with_capacity(n + payload.len());
                datagram.put_slice(&header[..n]);
                datagram.put_slice(&payload);
                if writer.send_datagram(datagram.freeze()).await.is_err() {
                    break;
                }
                counters.udp_datagrams.fetch_add(1, Ordering::Relaxed);
            }
            msg = reader.recv() => match msg {
                Some(FlowMsg::Datagram(d)) => {
                    let Ok((Target::Addr(from), n)) = socks5::parse_udp_datagram(&d) else {
                        continue;
                    };
                    ctx.learn_names(from, &d[n..]);
                    let packets = udp_packets(from, local, &d[n..], mtu.load(Ordering::Relaxed));
                    if packets.is_empty() || !replies.push(packets) {
                        counters.udp_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Some(FlowMsg::Data(_)) => {}
                Some(FlowMsg::Finished | FlowMsg::Reset(_)) | None => break,
            },
            () = tokio::time::sleep(UDP_IDLE) => break,
        }
    }
    let _ = writer.reset(0).await;
}

/// The IP packets carrying `payload` from `from` to `to`, none longer than `mtu`: the one
/// packet [`udp_packet`] builds, or, for an answer longer than the MTU allows (a DNS answer
/// with EDNS0, say), its fragments ([`fit_to_mtu`]). Empty when [`udp_packet`] builds none at
/// any size: families that differ, or a datagram longer than IP can carry.
pub(super) fn udp_packets(
    from: SocketAddr,
    to: SocketAddr,
    payload: &[u8],
    mtu: usize,
) -> Vec<Vec<u8>> {
    match udp_packet(from, to, payload, usize::MAX) {
        Some(whole) => fit_to_mtu(whole, mtu),
        None => Vec::new(),
    }
}

/// The IP packet carrying `payload` from `from` to `to`; `None` when the two are of different
/// families (an IPv4-mapped IPv6 source counts as IPv4) or the packet would exceed `mtu` (or
/// what IP can carry).
pub(super) fn udp_packet(
    from: SocketAddr,
    to: SocketAddr,
    payload: &[u8],
    mtu: usize,
) -> Option<Vec<u8>> {
    let src = match (from.ip(), to.ip()) {
        (IpAddr::V6(v6), IpAddr::V4(_)) => IpAddr::V4(v6.to_ipv4_mapped()?),
        (a, b) if a.is_ipv4() == b.is_ipv4() => a,
        _ => return None,
    };
    let udp = UdpRepr {
        src_port: from.port(),
        dst_port: to.port(),
    };
    let udp_len = udp.header_len() + payload.len();
    let ip = IpRepr::new(src.into(), to.ip().into(), IpProtocol::Udp, udp_len, 64);
    let total = ip.header_len() + udp_len;
    // IPv4's total length and IPv6's payload length are 16 bits.
    let ip_limit = if src.is_ipv4() { total } else { udp_len };
    if total > mtu || ip_limit > usize::from(u16::MAX) {
        return None;
    }
    let mut packet = vec![0u8; total];
    let caps = ChecksumCapabilities::default();
    ip.emit(&mut packet[..ip.header_len()], &caps);
    let (_, rest) = packet.split_at_mut(ip.header_len());
    udp.emit(
        &mut UdpPacket::new_unchecked(rest),
        &src.into(),
        &to.ip().into(),
        payload.len(),
        |b| b.copy_from_slice(payload),
        &caps,
    );
    Some(packet)
}

#[cfg(test)]
mod tests {
    use super::super::{Packet, classify};
    use super::*;

    #[test]
    fn answers_parse_back_as_the_datagram_they_carry() {
        for (from, to) in [
            ("93.184.216.34:53", "10.7.0.2:40000"),
            ("[2001:db8::1]:443", "[fd00::2]:5000"),
            ("[::ffff:1.2.3.4]:53", "10.7.0.2:40000"),
        ] {
            let (from, to): (SocketAddr, SocketAddr) = (from.parse().unwrap(), to.parse().unwrap());
            let packet = udp_packet(from, to, b"answer", 1500).unwrap();
            let want_src = match from.ip() {
                IpAddr::V6(v6) => v6
                    .to_ipv4_mapped()
                    .map_or(from, |v4| SocketAddr::new(v4.into(), from.port())),
                IpAddr::V4(_) => from,
            };
            assert_eq!(
                classify(&packet),
                Packet::Udp {
                    src: want_src,
                    dst: to,
                    payload: b"answer"
                }
            );
            // The kernel checks the UDP checksum: smoltcp's parser checks it the same way.
            let ip = match to.ip() {
                IpAddr::V4(_) => 20,
                IpAddr::V6(_) => 40,
            };
            let udp = UdpPacket::new_checked(&packet[ip..]).unwrap();
            assert!(udp.verify_checksum(&want_src.ip().into(), &to.ip().into()));
        }
        let v4: SocketAddr = "1.2.3.4:1".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:1".parse().unwrap();
        assert_eq!(udp_packet(v4, v6, b"x", 1500), None, "families differ");
        assert_eq!(udp_packet(v4, v4, &[0; 1473], 1500), None, "over the MTU");
        assert!(udp_packet(v4, v4, &[0; 1472], 1500).is_some());
    }

    /// Puts `packets` back together as a receiver would, checking each on the way: at most
    /// `mtu` bytes, a valid IPv4 header checksum (DF clear) or an IPv6 Fragment header, one
    /// identification, pieces that follow each other without gap or overlap, "more" on every
    /// piece but the last. Returns the IP payload (the UDP datagram).
    fn reassemble(packets: &[Vec<u8>], mtu: usize) -> Vec<u8> {
        use smoltcp::wire::Ipv4Packet;
        let mut data = Vec::new();
        let mut ident = None;
        for (i, p) in packets.iter().enumerate() {
            assert!(p.len() <= mtu, "piece {i}: {} bytes over {mtu}", p.len());
            let last = i + 1 == packets.len();
            let (id, offset, more, piece) = if p[0] >> 4 == 4 {
                let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
                assert!(ip.verify_checksum(), "piece {i}: IPv4 header checksum");
                assert_eq!(usize::from(ip.total_len()), p.len());
                let flags = u16::from_be_bytes([p[6], p[7]]);
                assert_eq!(flags & 0x4000, 0, "piece {i}: DF set");
                let id = u32::from(u16::from_be_bytes([p[4], p[5]]));
                (
                    id,
                    usize::from(flags & 0x1fff) * 8,
                    flags & 0x2000 != 0,
                    &p[20..],
                )
            } else {
                assert_eq!(p[6], 44, "piece {i}: no Fragment header");
                assert_eq!(usize::from(u16::from_be_bytes([p[4], p[5]])), p.len() - 40);
                assert_eq!(p[40], 17, "piece {i}: the Fragment header names UDP");
                let offset_more = u16::from_be_bytes([p[42], p[43]]);
                let id = u32::from_be_bytes([p[44], p[45], p[46], p[47]]);
                (
                    id,
                    usize::from(offset_more >> 3) * 8,
                    offset_more & 1 == 1,
                    &p[48..],
                )
            };
            assert_eq!(*ident.get_or_insert(id), id, "piece {i}: identification");
            assert_eq!(offset, data.len(), "piece {i}: offset");
            assert_eq!(more, !last, "piece {i}: more fragments");
            assert!(
                last || piece.len() % 8 == 0,
                "piece {i}: {} bytes",
                piece.len()
            );
            data.extend_from_slice(piece);
        }
        data
    }

    #[test]
    fn answers_longer_than_the_mtu_go_as_fragments_that_reassemble_to_the_datagram() {
        let pairs: [(SocketAddr, SocketAddr); 2] = [
            (
                "93.184.216.34:53".parse().unwrap(),
                "10.7.0.2:40000".parse().unwrap(),
            ),
            (
                "[2001:db8::1]:53".parse().unwrap(),
                "[fd00::2]:5000".parse().unwrap(),
            ),
        ];
        for (from, to) in pairs {
            let header = if from.is_ipv4() { 20 } else { 40 };
            let max_payload = if from.is_ipv4() {
                65_535 - 28
            } else {
                65_535 - 8
            };
            for (len, mtu) in [
                (4_000, 1_400),
                (4_000, 1_280),
                (1_500, 1_280),
                (9_000, 9_000),
                (max_payload, 1_500),
                (max_payload, 1_280),
            ] {
                let payload: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
                let whole = udp_packet(from, to, &payload, usize::MAX).unwrap();
                let packets = udp_packets(from, to, &payload, mtu);
                if whole.len() <= mtu {
                    assert_eq!(packets, vec![whole], "{len} bytes fit {mtu}");
                    continue;
                }
                assert!(packets.len() > 1, "{len} bytes at {mtu}");
                assert_eq!(
                    reassemble(&packets, mtu),
                    whole[header..],
                    "{len} bytes at {mtu}"
                );
            }
            // One more byte than IP carries: nothing to send.
            assert!(udp_packets(from, to, &vec![0; max_payload + 1], 1_500).is_empty());
        }
        // Two answers in fragments do not share an identification.
        let (from, to) = pairs[0];
        let (a, b) = (
            udp_packets(from, to, &[1; 3_000], 1_500),
            udp_packets(from, to, &[1; 3_000], 1_500),
        );
        assert_ne!(a[0][4..6], b[0][4..6]);
    }
}
