//! The TUN inbound's ICMP echo side (ping). Each echo request an application sends through the
//! device (ICMPv4 or ICMPv6, one whole packet) goes on a ping flow to its destination, one flow
//! per source, destination and identifier (one `ping` run), opened at its first request; the
//! replies the server's socket hears come back on it and are written to the device as echo
//! replies from the destination, with the request's identifier and the reply's sequence number
//! and data ([`crate::icmp_echo`]). A flow quiet for [`PING_IDLE`] ends. A server that does not
//! relay echoes (an older one, or `[egress] icmp_echo = false`) gets none: the requests are
//! dropped and counted.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{Icmpv4Packet, Icmpv4Repr, Icmpv6Packet, Icmpv6Repr, IpProtocol, IpRepr};
use tokio::sync::{Notify, mpsc};
use tracing::debug;

use super::TunCounters;
use super::feeds::{Feeds, NotFed, ToDevice, fit_to_mtu, link_only};
use crate::icmp_echo;
use crate::inbound::server::InboundContext;
use crate::session::{FlowKind, Target};
use crate::transport::flow::FlowMsg;

/// How long a ping flow lasts with no request or reply.
pub const PING_IDLE: Duration = Duration::from_secs(30);
/// Ping flows (source, destination, identifier) held at once; requests for more are dropped.
pub const MAX_PINGS: usize = 256;
/// Requests waiting for one flow.
const QUEUE: usize = 16;
/// Replies waiting to be written to the device.
const MAX_REPLIES: usize = 256;

/// One `ping` run: who asks whom, under which identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    src: IpAddr,
    dst: IpAddr,
    ident: u16,
}

pub(super) struct PingTable {
    ctx: Arc<InboundContext>,
    counters: Arc<TunCounters>,
    mtu: Arc<AtomicUsize>,
    flows: Feeds<Key, (u16, Bytes)>,
    replies: Arc<ToDevice>,
}

impl PingTable {
    pub(super) fn new(
        ctx: Arc<InboundContext>,
        counters: Arc<TunCounters>,
        notify: Arc<Notify>,
        mtu: Arc<AtomicUsize>,
    ) -> Self {
        PingTable {
            ctx,
            counters,
            mtu,
            flows: Feeds::new(MAX_PINGS, QUEUE),
            replies: ToDevice::new(MAX_REPLIES, notify),
        }
    }

    /// An echo request from `src` to `dst`. Multicast and broadcast destinations concern the
    /// local link only: dropped, not carried.
    pub(super) fn on_request(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        ident: u16,
        seq: u16,
        data: &[u8],
    ) {
        if link_only(dst) {
            self.counters.pings_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let key = Key { src, dst, ident };
        let fed = self
            .flows
            .feed(key, (seq, Bytes::copy_from_slice(data)), |queue| {
                echo_flow(
                    self.ctx.clone(),
                    key,
                    queue,
                    self.replies.clone(),
                    self.counters.clone(),
                    self.mtu.clone(),
                )
            });
        if let Err(why) = fed {
            self.counters.pings_dropped.fetch_add(1, Ordering::Relaxed);
            if why == NotFed::TooMany {
                debug!(%src, %dst, "TUN inbound: too many ping flows, echo request dropped");
            }
        }
    }

    /// The echo replies built since the last call, as IP packets for the device.
    pub(super) fn take_replies(&mut self) -> Vec<Vec<u8>> {
        self.replies.take()
    }
}

/// One `ping` run's flow: requests up, replies down as echo reply packets.
async fn echo_flow(
    ctx: Arc<InboundContext>,
    key: Key,
    mut requests: mpsc::Receiver<(u16, Bytes)>,
    replies: Arc<ToDevice>,
    counters: Arc<TunCounters>,
    mtu: Arc<AtomicUsize>,
) {
    let flow = match ctx
        .open(FlowKind::Ping, Target::Addr(SocketAddr::new(key.dst, 0)))
        .await
    {
        Ok(f) => f,
        Err(e) => {
            debug!(src = %key.src, dst = %key.dst, error = %e, "TUN inbound: no ping flow");
            counters.pings_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let (writer, mut reader) = flow.split();
    loop {
        tokio::select! {
            r = requests.recv() => {
                let Some((seq, data)) = r else { break };
                if writer.send_datagram(icmp_echo::datagram(seq, &data)).await.is_err() {
                    counters.pings_dropped.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                counters.pings.fetch_add(1, Ordering::Relaxed);
            }
            msg = reader.recv() => match msg {
                Some(FlowMsg::Datagram(d)) => {
                    let Some((seq, data)) = icmp_echo::parse_datagram(&d) else {
                        continue;
                    };
                    let mtu = mtu.load(Ordering::Relaxed);
                    let reply = echo_reply(key.dst, key.src, key.ident, seq, data)
                        .map(|packet| fit_to_mtu(packet, mtu));
                    match reply.is_some_and(|packets| replies.push(packets)) {
                        true => counters.ping_replies.fetch_add(1, Ordering::Relaxed),
                        false => counters.pings_dropped.fetch_add(1, Ordering::Relaxed),
                    };
                }
                Some(FlowMsg::Data(_)) => {}
                Some(FlowMsg::Finished | FlowMsg::Reset(_)) | None => break,
            },
            () = tokio::time::sleep(PING_IDLE) => break,
        }
    }
    let _ = writer.reset(0).await;
}

/// The echo reply packet from `from` to `to` (identifier `ident`, sequence number `seq`, `data`):
/// ICMPv4 or ICMPv6 after the families, hop limit 64; `None` when the families differ or the
/// packet would be longer than IP can carry (a longer one than the device's MTU goes in
/// fragments, [`fit_to_mtu`]).
pub(super) fn echo_reply(
    from: IpAddr,
    to: IpAddr,
    ident: u16,
    seq: u16,
    data: &[u8],
) -> Option<Vec<u8>> {
    let caps = ChecksumCapabilities::default();
    match (from, to) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let icmp = Icmpv4Repr::EchoReply {
                ident,
                seq_no: seq,
                data,
            };
            let ip = IpRepr::new(
                src.into(),
                dst.into(),
                IpProtocol::Icmp,
                icmp.buffer_len(),
                64,
            );
            let mut packet = vec![0u8; ip.header_len() + icmp.buffer_len()];
            if packet.len() > usize::from(u16::MAX) {
                return None;
            }
            ip.emit(&mut packet[..ip.header_len()], &caps);
            let (_, rest) = packet.split_at_mut(ip.header_len());
            icmp.emit(&mut Icmpv4Packet::new_unchecked(rest), &caps);
            Some(packet)
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let icmp = Icmpv6Repr::EchoReply {
                ident,
                seq_no: seq,
                data,
            };
            let len = icmp.buffer_len();
            let ip = IpRepr::new(src.into(), dst.into(), IpProtocol::Icmpv6, len, 64);
            let mut packet = vec![0u8; ip.header_len() + len];
            if len > usize::from(u16::MAX) {
                return None;
            }
            ip.emit(&mut packet[..ip.header_len()], &caps);
            let (_, rest) = packet.split_at_mut(ip.header_len());
            icmp.emit(&src, &dst, &mut Icmpv6Packet::new_unchecked(rest), &caps);
            Some(packet)
        }
        _ => None,
    }
}

/// The echo request `payload` is (the ICMPv4 or ICMPv6 message of a packet from `src` to
/// `dst`), checksum checked: its identifier, sequence number and data.
pub(super) fn echo_request(src: IpAddr, dst: IpAddr, payload: &[u8]) -> Option<(u16, u16, &[u8])> {
    let caps = ChecksumCapabilities::default();
    match (src, dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => {
            let packet = Icmpv4Packet::new_checked(payload).ok()?;
            match Icmpv4Repr::parse(&packet, &caps).ok()? {
                Icmpv4Repr::EchoRequest {
                    ident,
                    seq_no,
                    data,
                } => Some((ident, seq_no, data)),
                _ => None,
            }
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let packet = Icmpv6Packet::new_checked(payload).ok()?;
            match Icmpv6Repr::parse(&s, &d, &packet, &caps).ok()? {
                Icmpv6Repr::EchoRequest {
                    ident,
                    seq_no,
                    data,
                } => Some((ident, seq_no, data)),
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::reassembly::{self, Reassembly};
    use super::super::{Packet, classify};
    use super::*;

    /// An echo request packet, as `ping` sends it through the device.
    fn request(src: &str, dst: &str, ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
        let (src, dst): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let caps = ChecksumCapabilities::default();
        let (protocol, len) = match src {
            IpAddr::V4(_) => (IpProtocol::Icmp, 8 + data.len()),
            IpAddr::V6(_) => (IpProtocol::Icmpv6, 8 + data.len()),
        };
        let ip = IpRepr::new(src.into(), dst.into(), protocol, len, 64);
        let mut packet = vec![0u8; ip.header_len() + len];
        ip.emit(&mut packet[..ip.header_len()], &caps);
        let (_, rest) = packet.split_at_mut(ip.header_len());
        match (src, dst) {
            (IpAddr::V4(_), _) => Icmpv4Repr::EchoRequest {
                ident,
                seq_no: seq,
                data,
            }
            .emit(&mut Icmpv4Packet::new_unchecked(rest), &caps),
            (IpAddr::V6(s), IpAddr::V6(d)) => Icmpv6Repr::EchoRequest {
                ident,
                seq_no: seq,
                data,
            }
            .emit(&s, &d, &mut Icmpv6Packet::new_unchecked(rest), &caps),
            _ => unreachable!("families differ"),
        }
        packet
    }

    #[test]
    fn requests_are_classified_and_replies_answer_them() {
        for (a, b) in [("10.0.0.2", "192.0.2.7"), ("fd00::2", "2001:db8::7")] {
            let packet = request(a, b, 0x1234, 5, b"payload");
            let (src, dst) = (a.parse().unwrap(), b.parse().unwrap());
            assert_eq!(
                classify(&packet),
                Packet::Echo {
                    src,
                    dst,
                    ident: 0x1234,
                    seq: 5,
                    data: b"payload"
                },
                "{a}"
            );
            // A wrong checksum, or a reply instead of a request: not an echo request.
            let mut bad = packet.clone();
            *bad.last_mut().unwrap() ^= 1;
            assert_eq!(classify(&bad), Packet::Other);
            let reply = echo_reply(dst, src, 0x1234, 5, b"payload").unwrap();
            assert_eq!(classify(&reply), Packet::Other, "{a}");
            // The reply is well formed: its checksums hold (smoltcp checks them in parsing).
            let header = if src.is_ipv4() { 20 } else { 40 };
            let caps = ChecksumCapabilities::default();
            match (dst, src) {
                (IpAddr::V4(_), _) => {
                    let ip = smoltcp::wire::Ipv4Packet::new_checked(&reply[..]).unwrap();
                    assert!(ip.verify_checksum());
                    let icmp = Icmpv4Packet::new_checked(&reply[header..]).unwrap();
                    assert_eq!(
                        Icmpv4Repr::parse(&icmp, &caps).unwrap(),
                        Icmpv4Repr::EchoReply {
                            ident: 0x1234,
                            seq_no: 5,
                            data: b"payload"
                        }
                    );
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    let icmp = Icmpv6Packet::new_checked(&reply[header..]).unwrap();
                    assert_eq!(
                        Icmpv6Repr::parse(&s, &d, &icmp, &caps).unwrap(),
                        Icmpv6Repr::EchoReply {
                            ident: 0x1234,
                            seq_no: 5,
                            data: b"payload"
                        }
                    );
                }
                _ => unreachable!(),
            }
        }
        // Families that differ, and a reply longer than IP carries: none.
        let (v4, v6): (IpAddr, IpAddr) = ("10.0.0.2".parse().unwrap(), "::1".parse().unwrap());
        assert_eq!(echo_reply(v4, v6, 1, 1, b""), None);
        assert_eq!(
            echo_reply(v4, v4, 1, 1, &[0; 65_508]),
            None,
            "longer than IPv4 carries"
        );
        // Longer than the MTU: in fragments that put the reply back together.
        let long: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        for (from, to) in [(v4, v4), (v6, v6)] {
            let whole = echo_reply(from, to, 9, 3, &long).unwrap();
            let pieces = fit_to_mtu(whole.clone(), 1280);
            assert_eq!(pieces.len(), 3);
            assert!(pieces.iter().all(|p| p.len() <= 1280));
            let mut again = Reassembly::default();
            let now = std::time::Instant::now();
            let back = pieces
                .iter()
                .filter_map(|p| again.push(reassembly::piece(p).unwrap(), now))
                .next()
                .unwrap();
            // The same ICMP message (the IPv4 header's identification and flags differ).
            let header = if from.is_ipv4() { 20 } else { 40 };
            assert_eq!(back.len(), whole.len());
            assert!(
                back[header..] == whole[header..],
                "{from}: the reply put back together"
            );
        }
    }
}
