//! The TUN inbound's UDP side. Each application UDP socket (source address and port) gets one
//! datagram flow, opened at its first datagram, as a SOCKS5 UDP association would: every
//! datagram travels with the SOCKS5 UDP header that names its destination, and every answer
//! comes back with the header that names its source, which becomes the source of the UDP packet
//! written to the device. A source quiet for [`UDP_IDLE`] loses its flow.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{IpProtocol, IpRepr, UdpPacket, UdpRepr};
use tokio::sync::{Notify, mpsc};
use tracing::debug;

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

type Replies = Arc<Mutex<VecDeque<Vec<u8>>>>;

pub(super) struct UdpTable {
    ctx: Arc<InboundContext>,
    counters: Arc<TunCounters>,
    notify: Arc<Notify>,
    mtu: usize,
    sources: HashMap<SocketAddr, mpsc::Sender<(SocketAddr, Bytes)>>,
    replies: Replies,
}

impl UdpTable {
    pub(super) fn new(
        ctx: Arc<InboundContext>,
        counters: Arc<TunCounters>,
        notify: Arc<Notify>,
        mtu: usize,
    ) -> Self {
        UdpTable {
            ctx,
            counters,
            notify,
            mtu,
            sources: HashMap::new(),
            replies: Arc::new(Mutex::new(VecDeque::new())),
        }
    }

    /// A datagram from the application socket `src` to `dst`. Multicast and broadcast
    /// destinations (mDNS, SSDP, DHCP the system sends into the device) concern the local link
    /// only: they are dropped, not carried.
    pub(super) fn on_datagram(&mut self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        let link_only = match dst.ip() {
            IpAddr::V4(v4) => v4.is_multicast() || v4.is_broadcast(),
            IpAddr::V6(v6) => v6.is_multicast(),
        };
        if link_only {
            self.counters.udp_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let sender = match self.sources.get(&src) {
            Some(s) if !s.is_closed() => s,
            _ => {
                self.expire();
                if self.sources.len() >= MAX_UDP {
                    self.counters.udp_dropped.fetch_add(1, Ordering::Relaxed);
                    debug!(%src, "TUN inbound: too many UDP sources, datagram dropped");
                    return;
                }
                let (tx, rx) = mpsc::channel(QUEUE);
                tokio::spawn(associate(
                    self.ctx.clone(),
                    src,
                    rx,
                    self.replies.clone(),
                    self.notify.clone(),
                    self.counters.clone(),
                    self.mtu,
                ));
                self.sources.entry(src).insert_entry(tx).into_mut()
            }
        };
        if sender
            .try_send((dst, Bytes::copy_from_slice(payload)))
            .is_err()
        {
            self.counters.udp_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The answers built since the last call, as IP packets for the device.
    pub(super) fn take_replies(&mut self) -> Vec<Vec<u8>> {
        let mut q = self.replies.lock().unwrap_or_else(PoisonError::into_inner);
        q.drain(..).collect()
    }

    /// Forgets sources whose flow has ended (before a new source is counted against
    /// [`MAX_UDP`]; an ended flow's entry is otherwise replaced by its source's next datagram).
    fn expire(&mut self) {
        self.sources.retain(|_, s| !s.is_closed());
    }
}

/// One source's flow: datagrams up with their destination, answers down as UDP packets.
async fn associate(
    ctx: Arc<InboundContext>,
    local: SocketAddr,
    mut datagrams: mpsc::Receiver<(SocketAddr, Bytes)>,
    replies: Replies,
    notify: Arc<Notify>,
    counters: Arc<TunCounters>,
    mtu: usize,
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
                    let Some(packet) = udp_packet(from, local, &d[n..], mtu) else {
                        counters.udp_dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let mut q = replies.lock().unwrap_or_else(PoisonError::into_inner);
                    if q.len() < MAX_REPLIES {
                        q.push_back(packet);
                    } else {
                        counters.udp_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(q);
                    notify.notify_one();
                }
                Some(FlowMsg::Data(_)) => {}
                Some(FlowMsg::Finished | FlowMsg::Reset(_)) | None => break,
            },
            () = tokio::time::sleep(UDP_IDLE) => break,
        }
    }
    let _ = writer.reset(0).await;
}

/// The IP packet carrying `payload` from `from` to `to`; `None` when the two are of different
/// families (an IPv4-mapped IPv6 source counts as IPv4) or the packet would exceed `mtu`.
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
    if total > mtu || udp_len > usize::from(u16::MAX) {
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
}
