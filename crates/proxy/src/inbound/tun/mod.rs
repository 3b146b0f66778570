//! The TUN inbound: IP packets from a TUN device become session flows, as a SOCKS5 request
//! would make them. A userspace TCP/IP stack (smoltcp) terminates each TCP connection an
//! application opens through the device, whatever its destination address, and the connection
//! becomes a stream flow to that destination ([`stack`]). Each application UDP socket (source
//! address and port) becomes one datagram flow that carries its datagrams to every destination
//! and brings the answers back as UDP packets ([`udp`]); datagrams the application sends in IP
//! fragments are put back together first ([`reassembly`]). ICMP echo requests (ping) go on ping
//! flows and their replies come back ([`ping`]). Other packets (other ICMP, fragments of other
//! protocols, other protocols) are dropped and counted.
//!
//! The packet source is a [`PacketIo`]: the kernel device ([`device::TunDevice`]) in the daemon,
//! an in-memory pipe in tests.

pub mod device;
mod feeds;
pub mod netconf;
mod ping;
mod reassembly;
mod stack;
mod udp;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use smoltcp::wire::{IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket};
use tokio::sync::watch;

use super::server::InboundContext;

pub use stack::TunCounters;

/// Largest IP packet: the largest MTU, and the largest TCP segment the stack sends to a device
/// with offloads.
pub const MAX_PACKET: usize = 65_535;
/// Room for one packet read from the device: a TCP segment of the kernel's over IPv6 with
/// offloads may be one byte longer than [`MAX_PACKET`] (64 KiB with its IPv6 header).
const READ_BUFFER: usize = 65_536;
/// TCP connections (open or opening) the inbound holds at once by default; SYNs beyond are
/// dropped.
pub const DEFAULT_MAX_TCP: usize = 1024;
/// Each TCP connection's receive and send buffer in the inbound's stack, bytes, by default. The
/// application is on this machine, microseconds away, so a small window keeps it busy;
/// [`DEFAULT_MAX_TCP`] connections hold at most 128 MiB of them.
pub const DEFAULT_TCP_BUFFER: usize = 64 * 1024;
/// UDP sources (flows) the inbound holds at once; datagrams from more are dropped.
pub const MAX_UDP: usize = 256;

/// Where IP packets come from and go to.
pub trait PacketIo {
    /// Waits for the next packet and copies it into `buf`; its length.
    fn recv(&self, buf: &mut [u8]) -> impl std::future::Future<Output = io::Result<usize>> + Send;
    /// The next packet if one is waiting (`WouldBlock` if none).
    fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// Sends one packet (best effort: a packet the device refuses is lost, like any other).
    fn send(&self, packet: &[u8]) -> io::Result<()>;
    /// Whether the device segments and checksums TCP itself (a kernel TUN device with
    /// offloads, [`device`]). Then the packets it hands over may be TCP segments longer than
    /// its MTU, their TCP checksums already checked or partial (not to be checked again), and
    /// the stack sends its TCP segments through [`PacketIo::send_tcp`], as long as 64 KiB,
    /// without TCP checksums.
    fn offloads(&self) -> bool {
        false
    }
    /// Sends one TCP segment of the stack's (only when [`PacketIo::offloads`]): the device
    /// fills in its checksum and cuts it into segments of at most `mss` bytes of TCP payload
    /// and options (`mss` 0: the segment is small enough as it is).
    fn send_tcp(&self, packet: &mut [u8], mss: u16) -> io::Result<()> {
        let _ = mss;
        self.send(packet)
    }
}

/// The sizes the TUN inbound works with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunLimits {
    /// The device's MTU: the largest packet read or written.
    pub mtu: usize,
    /// TCP connections (open or opening) held at once; SYNs beyond are dropped and counted.
    pub max_tcp: usize,
    /// Each TCP connection's receive and send buffer, bytes.
    pub tcp_buffer: usize,
}

impl TunLimits {
    /// The defaults, for a device of `mtu` bytes.
    pub fn with_mtu(mtu: usize) -> Self {
        TunLimits {
            mtu,
            max_tcp: DEFAULT_MAX_TCP,
            tcp_buffer: DEFAULT_TCP_BUFFER,
        }
    }
}

/// Serves the TUN inbound on `io` with `limits` until the task is dropped.
pub async fn serve_tun<D: PacketIo + Send + Sync + 'static>(
    io: D,
    ctx: Arc<InboundContext>,
    limits: TunLimits,
    counters: Arc<TunCounters>,
) {
    let (_fixed, limits) = watch::channel(limits);
    serve_tun_watching(io, ctx, limits, counters).await;
}

/// [`serve_tun`] with the limits `limits` holds, those it is sent later (a reload) taking
/// effect at the inbound's next step: `max_tcp` and `tcp_buffer` for the TCP connections opened
/// from then on, the MTU for the packets written from then on.
pub async fn serve_tun_watching<D: PacketIo + Send + Sync + 'static>(
    io: D,
    ctx: Arc<InboundContext>,
    limits: watch::Receiver<TunLimits>,
    counters: Arc<TunCounters>,
) {
    stack::Stack::new(Arc::new(io), ctx, limits, counters)
        .run()
        .await;
}

/// What the inbound needs to know of a packet before handing it on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Packet<'a> {
    /// A TCP segment; `syn` when it opens a connection (SYN without ACK).
    Tcp {
        src: SocketAddr,
        dst: SocketAddr,
        syn: bool,
    },
    /// A UDP datagram and its payload.
    Udp {
        src: SocketAddr,
        dst: SocketAddr,
        payload: &'a [u8],
    },
    /// An ICMPv4 or ICMPv6 echo request (checksum checked).
    Echo {
        src: IpAddr,
        dst: IpAddr,
        ident: u16,
        seq: u16,
        data: &'a [u8],
    },
    /// Anything else (other ICMP, fragments, other protocols, malformed).
    Other,
}

/// Classifies one IP packet; never panics on any input.
fn classify(packet: &[u8]) -> Packet<'_> {
    let (src, dst, protocol, payload) = match packet.first().map(|b| b >> 4) {
        Some(4) => {
            let Ok(ip) = Ipv4Packet::new_checked(packet) else {
                return Packet::Other;
            };
            if ip.more_frags() || ip.frag_offset() != 0 {
                return Packet::Other;
            }
            let header = usize::from(ip.header_len());
            let total = usize::from(ip.total_len());
            (
                IpAddr::V4(ip.src_addr()),
                IpAddr::V4(ip.dst_addr()),
                ip.next_header(),
                &packet[header..total],
            )
        }
        Some(6) => {
            let Ok(ip) = Ipv6Packet::new_checked(packet) else {
                return Packet::Other;
            };
            let header = ip.header_len();
            let total = header + usize::from(ip.payload_len());
            (
                IpAddr::V6(ip.src_addr()),
                IpAddr::V6(ip.dst_addr()),
                ip.next_header(),
                &packet[header..total],
            )
        }
        _ => return Packet::Other,
    };
    match protocol {
        IpProtocol::Tcp => match TcpPacket::new_checked(payload) {
            Ok(tcp) => Packet::Tcp {
                src: SocketAddr::new(src, tcp.src_port()),
                dst: SocketAddr::new(dst, tcp.dst_port()),
                syn: tcp.syn() && !tcp.ack(),
            },
            Err(_) => Packet::Other,
        },
        IpProtocol::Udp => match UdpPacket::new_checked(payload) {
            Ok(udp) => Packet::Udp {
                src: SocketAddr::new(src, udp.src_port()),
                dst: SocketAddr::new(dst, udp.dst_port()),
                payload: &payload[8..usize::from(udp.len())],
            },
            Err(_) => Packet::Other,
        },
        IpProtocol::Icmp | IpProtocol::Icmpv6 => match ping::echo_request(src, dst, payload) {
            Some((ident, seq, data)) => Packet::Echo {
                src,
                dst,
                ident,
                seq,
                data,
            },
            None => Packet::Other,
        },
        _ => Packet::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn classify_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = classify(&bytes);
        }

        #[test]
        fn classify_never_panics_on_ip_looking_input(
            version in prop_oneof![Just(0x45u8), Just(0x60u8)],
            rest in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let mut p = vec![version];
            p.extend(rest);
            let _ = classify(&p);
        }
    }
}
