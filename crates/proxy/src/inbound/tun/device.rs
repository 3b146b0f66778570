//! A Linux TUN device, opened by name through `/dev/net/tun` with `IFF_TUN | IFF_NO_PI` (whole
//! IP packets, no packet-information header) and read and written without blocking through
//! tokio's `AsyncFd`. Creating a device needs `CAP_NET_ADMIN`; opening a persistent one made
//! beforehand for the daemon's user (`ip tuntap add mode tun user braid name braid0`) does not.
//! The device's addresses, routes and link state are set by [`netconf`] when configured, else
//! left to the system (docs/config.md).
//!
//! **Offloads** (the default): the device is opened with `IFF_VNET_HDR`, so every packet read or
//! written starts with a `struct virtio_net_hdr`, and asks the kernel (`TUNSETOFFLOAD`) for
//! checksum and TCP segmentation offload. The kernel then hands over a local application's TCP
//! data in segments of up to 64 KiB with a partial checksum (the pseudo-header's sum, as a NIC
//! would get it), and takes such segments from braid, cutting them into segments of the
//! connection's MSS itself ([`PacketIo::send_tcp`]). One read, one write and one pass of the
//! userspace stack then move up to 64 KiB instead of one MTU's worth. TCP segments the kernel
//! did not make (forwarded from another host) come with a full checksum, which is checked here:
//! a segment whose checksum is wrong is dropped, as the stack dropped it before. The kernel is
//! also asked for UDP segmentation offload (Linux 6.2 and later; without it, the TCP offloads
//! alone): the datagrams an application sends in one `sendmsg` with `UDP_SEGMENT` then come as
//! one packet, which the device cuts into its datagrams and hands over one per read
//! ([`cut_datagram`]). What it drops, checks and cuts is counted in the inbound's
//! [`TunCounters`].

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use smoltcp::wire::{IpAddress, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket};
use tokio::io::unix::AsyncFd;

use super::{PacketIo, TunCounters, netconf};

/// Longest interface name the kernel takes (`IFNAMSIZ` less the terminating NUL).
pub const MAX_NAME: usize = 15;

/// `struct ifreq`: the interface name, then the union the request reads or writes (flags for
/// `TUNSETIFF` and `SIOC[GS]IFFLAGS`, the MTU for `SIOCSIFMTU`, a `struct sockaddr` for
/// `SIOCSIFADDR` and `SIOCSIFNETMASK`) in native byte order.
#[repr(C)]
pub(super) struct IfReq {
    name: [u8; MAX_NAME + 1],
    pub(super) value: [u8; 24],
}

impl IfReq {
    /// `name` (at most [`MAX_NAME`] bytes) and the start of the union.
    pub(super) fn new(name: &str, value: &[u8]) -> IfReq {
        let mut req = IfReq {
            name: [0; MAX_NAME + 1],
            value: [0; 24],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        req.value[..value.len()].copy_from_slice(value);
        req
    }
}

/// An open TUN device.
#[derive(Debug)]
pub struct TunDevice {
    fd: AsyncFd<OwnedFd>,
    name: String,
    /// Opened with `IFF_VNET_HDR`: each packet read or written starts with a [`VnetHeader`].
    vnet: bool,
    /// The kernel took the offloads (`TUNSETOFFLOAD`): it may hand over TCP segments longer
    /// than the MTU, with partial checksums.
    offload: bool,
    /// It took UDP segmentation offload too (Linux 6.2 and later): it may hand over several
    /// UDP datagrams as one packet.
    udp_offload: bool,
    /// Such a packet being cut, one datagram per read.
    cutting: Mutex<Cutting>,
    /// Whether `cutting` holds datagrams not handed over yet (so that a read with none to
    /// hand over does not take the lock).
    cut_pending: AtomicBool,
    /// The inbound's counters; the device counts what it drops, checks and cuts.
    counters: Arc<TunCounters>,
}

/// A UDP packet of the kernel's (`GSO_UDP_L4`) being cut into its datagrams ([`cut_datagram`]).
#[derive(Debug, Default)]
struct Cutting {
    /// The packet (its buffer kept from one to the next).
    packet: Vec<u8>,
    ip_header: usize,
    gso_size: usize,
    /// Where the next datagram's payload starts in `packet`; none is left at its end.
    next: usize,
}

/// Length of `struct virtio_net_hdr`, the header `IFF_VNET_HDR` puts before each packet.
const VNET_HEADER: usize = 10;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start + csum_offset` holds only the
/// pseudo-header's sum; the rest is to be added by whoever sends the packet on.
const NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the checksum was checked.
const DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_*`: none, TCP over IPv4, TCP over IPv6, UDP datagrams of `gso_size`
/// payload bytes each sent as one packet (an application's `UDP_SEGMENT`, over IPv4 or IPv6),
/// and the ECN bit.
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_UDP_L4: u8 = 5;
const GSO_ECN: u8 = 0x80;
/// Length of a UDP header.
const UDP_HEADER: usize = 8;
/// Offset of the checksum in a TCP header.
const TCP_CHECKSUM: u16 = 16;

/// `struct virtio_net_hdr` (native byte order: the device is opened without `TUNSETVNETLE`,
/// so the kernel uses its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct VnetHeader {
    /// [`NEEDS_CSUM`], [`DATA_VALID`].
    flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`.
    gso_type: u8,
    /// Bytes of headers (IP and TCP) that each segment repeats.
    hdr_len: u16,
    /// Payload bytes per segment when `gso_type` is not none.
    gso_size: u16,
    /// Where the checksummed part starts (the TCP header).
    csum_start: u16,
    /// Where the checksum sits from `csum_start`.
    csum_offset: u16,
}

impl VnetHeader {
    fn parse(bytes: &[u8; VNET_HEADER]) -> Self {
        let u16_at = |i: usize| u16::from_ne_bytes([bytes[i], bytes[i + 1]]);
        VnetHeader {
            flags: bytes[0],
            gso_type: bytes[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        }
    }

    fn bytes(&self) -> [u8; VNET_HEADER] {
        let mut out = [0u8; VNET_HEADER];
        out[0] = self.flags;
        out[1] = self.gso_type;
        for (i, v) in [
            self.hdr_len,
            self.gso_size,
            self.csum_start,
            self.csum_offset,
        ]
        .into_iter()
        .enumerate()
        {
            out[2 + 2 * i..4 + 2 * i].copy_from_slice(&v.to_ne_bytes());
        }
        out
    }
}

/// A TCP segment's place in its IP packet: the IP header's length, the TCP header's length
/// and the addresses of the pseudo-header. `None` for anything but an unfragmented TCP segment
/// whose lengths hold together.
struct TcpLayout {
    ip_header: usize,
    tcp_header: usize,
    src: IpAddress,
    dst: IpAddress,
}

impl TcpLayout {
    fn v6(&self) -> bool {
        matches!(self.src, IpAddress::Ipv6(_))
    }
}

fn tcp_layout(packet: &[u8]) -> Option<TcpLayout> {
    let (ip_header, src, dst) = ip_layout(packet, IpProtocol::Tcp)?;
    let tcp = TcpPacket::new_checked(&packet[ip_header..]).ok()?;
    Some(TcpLayout {
        ip_header,
        tcp_header: usize::from(tcp.header_len()),
        src,
        dst,
    })
}

/// The IP header's length and the addresses of an unfragmented IP packet of `protocol` (IPv6:
/// with no extension header) whose IP length fields agree with its bytes.
fn ip_layout(packet: &[u8], protocol: IpProtocol) -> Option<(usize, IpAddress, IpAddress)> {
    Some(match packet.first()? >> 4 {
        4 => {
            let ip = Ipv4Packet::new_checked(packet).ok()?;
            if ip.next_header() != protocol
                || ip.more_frags()
                || ip.frag_offset() != 0
                || usize::from(ip.total_len()) != packet.len()
            {
                return None;
            }
            let header = usize::from(ip.header_len());
            (header, ip.src_addr().into(), ip.dst_addr().into())
        }
        6 => {
            let ip = Ipv6Packet::new_checked(packet).ok()?;
            if ip.next_header() != protocol
                || ip.header_len() + usize::from(ip.payload_len()) != packet.len()
            {
                return None;
            }
            (ip.header_len(), ip.src_addr().into(), ip.dst_addr().into())
        }
        _ => return None,
    })
}

/// The IP header's length of `packet` if it is an unfragmented UDP datagram, its IP lengths
/// agreeing with its bytes (the UDP length field is not read: the kernel's `GSO_UDP_L4`
/// packets are cut by [`cut_datagram`], which rewrites it).
fn udp_ip_header(packet: &[u8]) -> Option<usize> {
    let (ip_header, _, _) = ip_layout(packet, IpProtocol::Udp)?;
    (packet.len() >= ip_header + UDP_HEADER).then_some(ip_header)
}

/// Datagram by datagram, a UDP packet of the kernel's (`GSO_UDP_L4`: one IP and UDP header,
/// then the payloads of several datagrams of `gso_size` bytes, the last one shorter or not):
/// writes into `out` the datagram whose payload starts at `at` in `packet` (the first at the
/// end of the headers), with the IP and UDP headers copied and their lengths (and an IPv4
/// header's checksum) set to its own. Its length and where the next payload starts; `None`
/// when none starts at `at` or it does not fit in `out`. The UDP checksum is left as the
/// kernel's partial one: the UDP path never checks UDP checksums, as for any packet marked
/// `NEEDS_CSUM`.
fn cut_datagram(
    packet: &[u8],
    ip_header: usize,
    gso_size: usize,
    at: usize,
    out: &mut [u8],
) -> Option<(usize, usize)> {
    let headers = ip_header + UDP_HEADER;
    if at < headers || at >= packet.len() || gso_size == 0 {
        return None;
    }
    let payload = &packet[at..packet.len().min(at.saturating_add(gso_size))];
    let len = headers + payload.len();
    let udp_len = u16::try_from(UDP_HEADER + payload.len()).ok()?;
    let out = out.get_mut(..len)?;
    out[..headers].copy_from_slice(packet.get(..headers)?);
    out[headers..].copy_from_slice(payload);
    out[ip_header + 4..ip_header + 6].copy_from_slice(&udp_len.to_be_bytes());
    if packet.first()? >> 4 == 4 {
        let mut ip = Ipv4Packet::new_unchecked(&mut *out);
        ip.set_total_len(u16::try_from(len).ok()?);
        ip.fill_checksum();
    } else {
        // No extension header (`udp_ip_header`): the payload length is the UDP length.
        out[4..6].copy_from_slice(&udp_len.to_be_bytes());
    }
    Some((len, at + payload.len()))
}

/// The one's-complement sum (folded, not inverted) of the TCP pseudo-header of `packet`, whose
/// TCP segment (header and payload) is `length` bytes: what a partial checksum holds.
fn pseudo_header_sum(packet: &[u8], layout: &TcpLayout, length: usize) -> u16 {
    let (src, dst): (&[u8], &[u8]) = if layout.v6() {
        (&packet[8..24], &packet[24..40])
    } else {
        (&packet[12..16], &packet[16..20])
    };
    let mut sum: u64 = 6 + length as u64;
    for word in src.chunks_exact(2).chain(dst.chunks_exact(2)) {
        sum += u64::from(u16::from_be_bytes([word[0], word[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Whether the TCP checksum of `packet` (a TCP segment per [`tcp_layout`]) is right.
fn tcp_checksum_ok(packet: &[u8], layout: &TcpLayout) -> bool {
    TcpPacket::new_unchecked(&packet[layout.ip_header..]).verify_checksum(&layout.src, &layout.dst)
}

/// What becomes of a packet read with a [`VnetHeader`] ([`read_verdict`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadVerdict {
    /// On to the stack as it is.
    Pass,
    /// On to the stack: a TCP segment with a full checksum (one the kernel did not make:
    /// forwarded from another host), checked here and right.
    Checked,
    /// On to the stack: a TCP segment longer than the MTU allows, which the kernel did not cut.
    Long,
    /// UDP datagrams of `gso_size` payload bytes each sent as one packet, its IP header
    /// `ip_header` bytes: cut here, one datagram per read ([`cut_datagram`]).
    Cut { ip_header: usize, gso_size: usize },
    /// Dropped: a TCP segment with a full checksum that is wrong.
    WrongChecksum,
    /// Dropped: segmentation braid did not ask for, or on headers that do not hold together.
    Refused,
}

/// What becomes of a packet read with header `header` (module docs).
fn read_verdict(header: &VnetHeader, packet: &[u8]) -> ReadVerdict {
    match header.gso_type & !GSO_ECN {
        GSO_NONE => {}
        GSO_TCPV4 | GSO_TCPV6 => {
            return match tcp_layout(packet) {
                Some(_) => ReadVerdict::Long,
                None => ReadVerdict::Refused,
            };
        }
        GSO_UDP_L4 => {
            return match udp_ip_header(packet) {
                Some(ip_header) if header.gso_size > 0 => ReadVerdict::Cut {
                    ip_header,
                    gso_size: usize::from(header.gso_size),
                },
                _ => ReadVerdict::Refused,
            };
        }
        _ => return ReadVerdict::Refused,
    }
    if header.flags & (NEEDS_CSUM | DATA_VALID) != 0 {
        return ReadVerdict::Pass;
    }
    match tcp_layout(packet) {
        Some(layout) if tcp_checksum_ok(packet, &layout) => ReadVerdict::Checked,
        Some(_) => ReadVerdict::WrongChecksum,
        None => ReadVerdict::Pass,
    }
}

/// The header for writing TCP segment `packet` (per `layout`) with a partial checksum, cut by
/// the kernel into segments of at most `mss` bytes of payload and options (none when `mss` is
/// 0 or the payload fits in one); writes the pseudo-header's sum into the checksum field.
fn tcp_header_for(packet: &mut [u8], layout: &TcpLayout, mss: u16) -> VnetHeader {
    let segment = packet.len() - layout.ip_header;
    let sum = pseudo_header_sum(packet, layout, segment);
    let at = layout.ip_header + usize::from(TCP_CHECKSUM);
    packet[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    let headers = layout.ip_header + layout.tcp_header;
    let options = layout.tcp_header - 20;
    let gso_size = usize::from(mss).saturating_sub(options);
    let payload = packet.len() - headers;
    let (gso_type, gso_size) = if gso_size > 0 && payload > gso_size {
        (if layout.v6() { GSO_TCPV6 } else { GSO_TCPV4 }, gso_size)
    } else {
        (GSO_NONE, 0)
    };
    VnetHeader {
        flags: NEEDS_CSUM,
        gso_type,
        hdr_len: u16::try_from(headers).unwrap_or(u16::MAX),
        gso_size: u16::try_from(gso_size).unwrap_or(u16::MAX),
        csum_start: u16::try_from(layout.ip_header).unwrap_or(u16::MAX),
        csum_offset: TCP_CHECKSUM,
    }
}

/// Makes each `send` on UDP socket `socket` go as datagrams of `size` payload bytes (the last
/// one shorter or not) handed to the kernel as one (`UDP_SEGMENT`), as QUIC stacks send: what an
/// application behind the device does, for the tests and the bench.
pub fn send_as_one(socket: &impl std::os::fd::AsRawFd, size: u16) -> io::Result<()> {
    let size = libc::c_int::from(size);
    // SAFETY: `UDP_SEGMENT` reads a `c_int` that lives across the call.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&raw const size).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `name` can name a network interface: 1 to 15 bytes, no NUL, `/`, `:` or white space.
pub fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':')
}

impl TunDevice {
    /// Opens (creating it if needed) the TUN device `name` with offloads (module docs). Must be
    /// called inside a tokio runtime.
    pub fn open(name: &str) -> io::Result<TunDevice> {
        TunDevice::open_with(name, true)
    }

    /// [`TunDevice::open`], with the offloads only if `offload` (without them, each packet
    /// read or written is one plain IP packet of at most the MTU). Where the kernel refuses
    /// them, the device works without.
    pub fn open_with(name: &str, offload: bool) -> io::Result<TunDevice> {
        if !valid_name(name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not an interface name (1 to {MAX_NAME} printable bytes)"),
            ));
        }
        // SAFETY: a NUL-terminated path and plain flags; the result is checked below.
        let raw = unsafe {
            libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a file descriptor just opened and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let vnet_flag = if offload { libc::IFF_VNET_HDR } else { 0 };
        let flags = (libc::IFF_TUN | libc::IFF_NO_PI | vnet_flag) as libc::c_short;
        let mut req = IfReq::new(name, &flags.to_ne_bytes());
        // SAFETY: `req` is a valid `struct ifreq` layout that lives across the call.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let len = req.name.iter().position(|&b| b == 0).unwrap_or(MAX_NAME);
        let name = String::from_utf8_lossy(&req.name[..len]).into_owned();
        let vnet = offload;
        let set_offload = |features: libc::c_uint| {
            // SAFETY: `TUNSETOFFLOAD` takes the feature bits by value.
            let r = unsafe {
                libc::ioctl(
                    fd.as_raw_fd(),
                    libc::TUNSETOFFLOAD,
                    libc::c_ulong::from(features),
                )
            };
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        let tcp = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
        let udp = libc::TUN_F_USO4 | libc::TUN_F_USO6;
        let (offload, udp_offload) = if !vnet {
            (false, false)
        } else if set_offload(tcp | udp).is_ok() {
            (true, true)
        } else {
            match set_offload(tcp) {
                Ok(()) => {
                    tracing::info!(
                        device = %name,
                        "the kernel refused UDP segmentation offload (Linux before 6.2); TCP \
                         offloads on"
                    );
                    (true, false)
                }
                Err(error) => {
                    tracing::info!(
                        device = %name,
                        %error,
                        "the kernel refused TUN offloads; the device works without"
                    );
                    (false, false)
                }
            }
        };
        // SAFETY: `fd` owns a valid descriptor that is neither replaced nor closed while the
        // `AsyncFd` holds it.
        let fd = unsafe { AsyncFd::register(fd)? };
        Ok(TunDevice {
            fd,
            name,
            vnet,
            offload,
            udp_offload,
            cutting: Mutex::new(Cutting::default()),
            cut_pending: AtomicBool::new(false),
            counters: Arc::new(TunCounters::default()),
        })
    }

    /// The counters the device adds to (to be handed to the inbound with it).
    pub fn counters(&self) -> Arc<TunCounters> {
        self.counters.clone()
    }

    /// Whether the kernel hands over several UDP datagrams as one packet (cut by braid).
    pub fn udp_offload(&self) -> bool {
        self.udp_offload
    }

    /// The next datagram of the packet being cut into `buf`, if one is left.
    fn next_cut(&self, buf: &mut [u8]) -> Option<usize> {
        if !self.cut_pending.load(Ordering::Relaxed) {
            return None;
        }
        let mut cutting = self.cutting.lock().unwrap_or_else(PoisonError::into_inner);
        let c = &mut *cutting;
        let cut = cut_datagram(&c.packet, c.ip_header, c.gso_size, c.next, buf);
        c.next = cut.map_or(c.packet.len(), |(_, next)| next);
        if c.next >= c.packet.len() {
            self.cut_pending.store(false, Ordering::Relaxed);
        }
        let (len, _) = cut?;
        self.counters.udp_cut.fetch_add(1, Ordering::Relaxed);
        Some(len)
    }

    /// Sets the interface's MTU (`SIOCSIFMTU`; needs `CAP_NET_ADMIN`).
    pub fn set_mtu(&self, mtu: u16) -> io::Result<()> {
        netconf::set_mtu(&self.name, mtu)
    }

    /// The interface's name as the kernel has it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next packet into `buf` (its header stripped and checked, [`read_verdict`]; packets
    /// it refuses are skipped, several datagrams sent as one are handed over one by one);
    /// `WouldBlock` when none is waiting.
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.fd.get_ref().as_raw_fd();
        if !self.vnet {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            return usize::try_from(n).map_err(|_| io::Error::last_os_error());
        }
        loop {
            if let Some(len) = self.next_cut(buf) {
                return Ok(len);
            }
            let mut header = [0u8; VNET_HEADER];
            let iov = [
                libc::iovec {
                    iov_base: header.as_mut_ptr().cast(),
                    iov_len: VNET_HEADER,
                },
                libc::iovec {
                    iov_base: buf.as_mut_ptr().cast(),
                    iov_len: buf.len(),
                },
            ];
            // SAFETY: both buffers are writable for the lengths given and outlive the call.
            let n = unsafe { libc::readv(fd, iov.as_ptr(), 2) };
            let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
            // Shorter than its header (never seen): an empty packet, which the stack drops.
            let Some(len) = n.checked_sub(VNET_HEADER) else {
                return Ok(0);
            };
            let counters = &self.counters;
            let count = |counter: &portable_atomic::AtomicU64| {
                counter.fetch_add(1, Ordering::Relaxed);
            };
            match read_verdict(&VnetHeader::parse(&header), &buf[..len]) {
                ReadVerdict::Pass => return Ok(len),
                ReadVerdict::Checked => {
                    count(&counters.checksums_checked);
                    return Ok(len);
                }
                ReadVerdict::Long => {
                    count(&counters.long_reads);
                    return Ok(len);
                }
                ReadVerdict::Cut {
                    ip_header,
                    gso_size,
                } => {
                    count(&counters.long_reads);
                    let mut cutting = self.cutting.lock().unwrap_or_else(PoisonError::into_inner);
                    cutting.packet.clear();
                    cutting.packet.extend_from_slice(&buf[..len]);
                    cutting.ip_header = ip_header;
                    cutting.gso_size = gso_size;
                    cutting.next = ip_header + UDP_HEADER;
                    self.cut_pending.store(true, Ordering::Relaxed);
                }
                ReadVerdict::WrongChecksum => {
                    count(&counters.checksums_checked);
                    count(&counters.checksums_wrong);
                }
                ReadVerdict::Refused => count(&counters.other_dropped),
            }
        }
    }

    /// Writes `header` and `packet` as one packet.
    fn write_with(&self, header: &VnetHeader, packet: &[u8]) -> io::Result<()> {
        let header = header.bytes();
        let iov = [
            libc::iovec {
                iov_base: header.as_ptr().cast_mut().cast(),
                iov_len: VNET_HEADER,
            },
            libc::iovec {
                iov_base: packet.as_ptr().cast_mut().cast(),
                iov_len: packet.len(),
            },
        ];
        // SAFETY: both buffers are readable for the lengths given and outlive the call;
        // `writev` does not write through them.
        let n = unsafe { libc::writev(self.fd.get_ref().as_raw_fd(), iov.as_ptr(), 2) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl PacketIo for TunDevice {
    async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(len) = self.next_cut(buf) {
            return Ok(len);
        }
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|_| self.read(buf)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read(buf)
    }

    fn offloads(&self) -> bool {
        self.offload
    }

    fn send_tcp(&self, packet: &mut [u8], mss: u16) -> io::Result<()> {
        match tcp_layout(packet) {
            Some(layout) if self.vnet => {
                let header = tcp_header_for(packet, &layout, mss);
                self.write_with(&header, packet)
            }
            _ => self.send(packet),
        }
    }

    fn send(&self, packet: &[u8]) -> io::Result<()> {
        if self.vnet {
            return self.write_with(&VnetHeader::default(), packet);
        }
        // SAFETY: `packet` is readable for its length.
        let n = unsafe {
            libc::write(
                self.fd.get_ref().as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Helpers for tests that need a kernel TUN device.
#[cfg(test)]
pub(super) mod testing {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::inbound::tun::{Packet, classify};
    use std::net::SocketAddr;
    use std::time::Duration;

    /// Runs `test` on a thread of its own in a network namespace of its own (so nothing outside
    /// it is touched), inside a tokio runtime, with the TUN device `name` opened there. Needs
    /// root (or `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`); where the namespace, the device or
    /// something `test` needs (its `Err`) is missing, says why and passes.
    pub(in crate::inbound::tun) fn in_own_netns(
        name: &'static str,
        test: impl FnOnce(&tokio::runtime::Runtime, TunDevice) -> Result<(), String> + Send + 'static,
    ) {
        let run = std::thread::spawn(move || {
            // SAFETY: plain flags; this thread alone moves to the new namespace.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(format!(
                    "no network namespace: {}",
                    io::Error::last_os_error()
                ));
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let device = {
                let _guard = rt.enter();
                TunDevice::open(name).map_err(|e| format!("no TUN device: {e}"))?
            };
            test(&rt, device)
        });
        match run.join().unwrap() {
            Ok(()) => {}
            Err(why) => eprintln!("skipped: {why}"),
        }
    }

    /// An IP packet from `from` to `to` holding a TCP segment (ACK, sequence numbers fixed)
    /// with TCP options `options` (a multiple of 4 bytes) and `payload` bytes of payload, its
    /// checksums filled in.
    pub(in crate::inbound::tun) fn tcp_packet(
        from: SocketAddr,
        to: SocketAddr,
        options: &[u8],
        payload: usize,
    ) -> Vec<u8> {
        use smoltcp::phy::ChecksumCapabilities;
        use smoltcp::wire::IpRepr;
        let tcp_len = 20 + options.len() + payload;
        let ip = IpRepr::new(
            from.ip().into(),
            to.ip().into(),
            IpProtocol::Tcp,
            tcp_len,
            64,
        );
        let mut packet = vec![0u8; ip.header_len() + tcp_len];
        ip.emit(
            &mut packet[..ip.header_len()],
            &ChecksumCapabilities::default(),
        );
        let tcp = &mut packet[ip.header_len()..];
        tcp[0..2].copy_from_slice(&from.port().to_be_bytes());
        tcp[2..4].copy_from_slice(&to.port().to_be_bytes());
        tcp[4..8].copy_from_slice(&1000u32.to_be_bytes());
        tcp[8..12].copy_from_slice(&2000u32.to_be_bytes());
        tcp[12] = u8::try_from((20 + options.len()) / 4).unwrap() << 4;
        tcp[13] = 0x10;
        tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
        tcp[20..20 + options.len()].copy_from_slice(options);
        for (i, b) in tcp[20 + options.len()..].iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let mut segment = TcpPacket::new_unchecked(tcp);
        segment.fill_checksum(&from.ip().into(), &to.ip().into());
        packet
    }

    /// The next UDP datagram out of `device` within 5 s, as (source, destination, payload);
    /// other packets (the kernel's own, e.g. IPv6 router solicitations) are skipped.
    pub(in crate::inbound::tun) fn next_udp(
        rt: &tokio::runtime::Runtime,
        device: &TunDevice,
    ) -> (SocketAddr, SocketAddr, Vec<u8>) {
        // Room for the longest packet a device with offloads hands over.
        let mut buf = vec![0u8; crate::inbound::tun::READ_BUFFER];
        rt.block_on(async {
            loop {
                let n = tokio::time::timeout(Duration::from_secs(5), device.recv(&mut buf))
                    .await
                    .expect("no packet from the device")
                    .unwrap();
                if let Packet::Udp { src, dst, payload } = classify(&buf[..n]) {
                    break (src, dst, payload.to_vec());
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::testing::{in_own_netns, next_udp, tcp_packet};
    use super::*;
    use crate::inbound::tun::udp::{udp_packet, udp_packets};
    use std::net::{SocketAddr, UdpSocket};
    use std::process::Command;
    use std::time::Duration;

    /// Gives device `name` the address 10.7.0.1/24 and brings it up (in the calling thread's
    /// network namespace), or says why not.
    fn up(name: &str) -> Result<(), String> {
        if ip(&["addr", "add", "10.7.0.1/24", "dev", name]) && ip(&["link", "set", name, "up"]) {
            Ok(())
        } else {
            Err("`ip` could not set the device up".into())
        }
    }

    /// [`up`], with fd00:7::1/64 on the device too.
    fn up_dual(name: &str) -> Result<(), String> {
        up(name)?;
        let v6 = ["-6", "addr", "add", "fd00:7::1/64", "dev", name, "nodad"];
        match ip(&v6) {
            true => Ok(()),
            false => Err("`ip` could not give the device an IPv6 address".into()),
        }
    }

    /// Runs `ip ARGS` (in the calling thread's network namespace).
    fn ip(args: &[&str]) -> bool {
        Command::new("ip")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The kernel's device end to end, in a network namespace of this test's own: a UDP
    /// datagram an application sends to an address routed into the device is read as that IP
    /// packet, and a packet written to the device reaches the application. Needs root (or
    /// `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`) and `ip`; says so and passes without them.
    #[test]
    fn a_kernel_tun_device_carries_packets_both_ways() {
        in_own_netns("braidtest0", |rt, device| {
            assert_eq!(device.name(), "braidtest0");
            device.set_mtu(1400).unwrap();
            let link = Command::new("ip")
                .args(["link", "show", "braidtest0"])
                .output()
                .map_err(|e| format!("no `ip`: {e}"))?;
            let link = String::from_utf8_lossy(&link.stdout).into_owned();
            assert!(link.contains(" mtu 1400 "), "{link}");
            up("braidtest0")?;
            let app = UdpSocket::bind("10.7.0.1:0").unwrap();
            app.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let app_addr = app.local_addr().unwrap();
            let remote: SocketAddr = "10.7.0.9:5300".parse().unwrap();
            app.send_to(b"query", remote).unwrap();
            let query = next_udp(rt, &device);
            assert_eq!(query, (app_addr, remote, b"query".to_vec()));
            let answer = udp_packet(remote, app_addr, b"answer", 1500).unwrap();
            device.send(&answer).unwrap();
            let mut got = [0u8; 64];
            let (n, from) = app.recv_from(&mut got).expect("the answer did not arrive");
            assert_eq!((&got[..n], from), (&b"answer"[..], remote));
            Ok(())
        });
    }

    /// A UDP answer longer than the device's MTU (4,000 bytes at MTU 1,400: a large DNS answer,
    /// say) reaches the application whole, over IPv4 and IPv6: written as the fragments
    /// `udp_packets` cuts, which the kernel puts back together. Needs root and `ip`; says so
    /// and passes without them.
    #[test]
    fn a_udp_answer_longer_than_the_mtu_reaches_the_application_whole() {
        in_own_netns("braidtest3", |_rt, device| {
            device.set_mtu(1400).unwrap();
            up_dual("braidtest3")?;
            let payload: Vec<u8> = (0..4_000u32).map(|i| (i % 251) as u8).collect();
            for (local, remote) in [
                ("10.7.0.1:0", "10.7.0.9:5300"),
                ("[fd00:7::1]:0", "[fd00:7::9]:5300"),
            ] {
                let app = UdpSocket::bind(local).unwrap();
                app.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                let app_addr = app.local_addr().unwrap();
                let remote: SocketAddr = remote.parse().unwrap();
                let packets = udp_packets(remote, app_addr, &payload, 1400);
                assert!(packets.len() >= 3, "{remote}: {} packets", packets.len());
                let mut got = [0u8; 8192];
                // Written again when nothing came in a second, up to five times: once (a CI run
                // on 25 Nov 2026, the machine loaded with a build beside it) the IPv6 answer of
                // a device just brought up did not arrive in 5 s; alone, it always has.
                let mut tries = 0;
                let (n, from) = loop {
                    for p in &packets {
                        device.send(p).unwrap();
                    }
                    tries += 1;
                    match app.recv_from(&mut got) {
                        Ok(answer) => break answer,
                        Err(e) if tries == 5 => {
                            panic!("{remote}: the answer did not arrive in {tries} tries: {e}")
                        }
                        Err(_) => {}
                    }
                };
                assert_eq!((n, from), (payload.len(), remote));
                assert_eq!(&got[..n], &payload[..], "{remote}");
            }
            Ok(())
        });
    }

    /// A UDP datagram an application sends longer than the device's MTU (4,000 bytes at MTU
    /// 1,400) is read as the kernel's fragments, IPv4 or IPv6, which the TUN inbound's
    /// reassembly puts back together into the datagram sent. Needs root and `ip`; says so and
    /// passes without them.
    #[test]
    fn a_udp_datagram_longer_than_the_mtu_is_read_as_fragments_that_make_it_whole() {
        use crate::inbound::tun::reassembly::{Reassembly, piece};
        use crate::inbound::tun::{Packet, classify};
        in_own_netns("braidtest4", |rt, device| {
            device.set_mtu(1400).unwrap();
            up_dual("braidtest4")?;
            let sent: Vec<u8> = (0..4_000u32).map(|i| (i % 249) as u8).collect();
            for (local, remote) in [
                ("10.7.0.1:0", "10.7.0.9:5300"),
                ("[fd00:7::1]:0", "[fd00:7::9]:5300"),
            ] {
                let app = UdpSocket::bind(local).unwrap();
                let app_addr = app.local_addr().unwrap();
                let remote: SocketAddr = remote.parse().unwrap();
                app.send_to(&sent, remote).unwrap();
                let mut reassembly = Reassembly::default();
                let mut buf = vec![0u8; crate::inbound::tun::READ_BUFFER];
                let mut fragments = 0;
                let whole = rt.block_on(async {
                    loop {
                        let n = tokio::time::timeout(Duration::from_secs(5), device.recv(&mut buf))
                            .await
                            .map_err(|_| format!("{remote}: the datagram did not come whole"))?
                            .unwrap();
                        let packet = &buf[..n];
                        assert!(n <= 1400, "{remote}: a {n}-byte packet");
                        let Some(p) = piece(packet) else { continue };
                        fragments += 1;
                        if let Some(whole) = reassembly.push(p, std::time::Instant::now()) {
                            break Ok::<_, String>(whole);
                        }
                    }
                })?;
                assert!(fragments >= 3, "{remote}: {fragments} fragments");
                assert_eq!(reassembly.take_dropped(), 0);
                match classify(&whole) {
                    Packet::Udp { src, dst, payload } => {
                        assert_eq!((src, dst), (app_addr, remote));
                        assert!(payload == &sent[..], "{remote}: the datagram differs");
                    }
                    other => panic!("{remote}: {other:?}"),
                }
            }
            Ok(())
        });
    }

    /// An application's UDP datagrams sent as one (`UDP_SEGMENT`, 1,000 bytes each: 5,500
    /// bytes make six) reach the stack one by one, whole and in order, and the device counts
    /// one long read and six datagrams cut from it. Needs root and `ip`, and Linux 6.2 or later
    /// for the kernel to hand the datagrams over as one (before, it cuts them itself, and the
    /// test checks only that they arrive).
    #[test]
    fn udp_datagrams_an_application_sends_as_one_are_read_one_by_one() {
        in_own_netns("braidtest1", |rt, device| {
            up("braidtest1")?;
            let app = UdpSocket::bind("10.7.0.1:0").unwrap();
            let app_addr = app.local_addr().unwrap();
            send_as_one(&app, 1000).map_err(|e| format!("no UDP_SEGMENT: {e}"))?;
            let remote: SocketAddr = "10.7.0.9:5300".parse().unwrap();
            let sent: Vec<u8> = (0..5500).map(|i| (i * 7 + i / 256) as u8).collect();
            app.send_to(&sent, remote).unwrap();
            let counters = device.counters();
            let mut got = Vec::new();
            for i in 0..6 {
                let (from, to, payload) = next_udp(rt, &device);
                assert_eq!((from, to), (app_addr, remote), "datagram {i}");
                assert_eq!(
                    payload.len(),
                    if i < 5 { 1000 } else { 500 },
                    "datagram {i}"
                );
                got.extend_from_slice(&payload);
            }
            assert!(got == sent, "the datagrams arrived whole and in order");
            let (long, cut) = (
                counters.long_reads.load(Ordering::Relaxed),
                counters.udp_cut.load(Ordering::Relaxed),
            );
            println!(
                "udp_offload {}: long reads {long}, cut {cut}",
                device.udp_offload()
            );
            if device.udp_offload() {
                assert_eq!((long, cut), (1, 6));
            } else {
                assert_eq!((long, cut), (0, 0));
            }
            Ok(())
        });
    }

    /// A TCP segment the kernel did not make (sent from a raw socket, as a segment forwarded
    /// from another host arrives: a full checksum and no flag) is checked: one with a right
    /// checksum is read, one with a wrong one is dropped and counted. Needs root and `ip`.
    #[test]
    fn tcp_segments_with_a_full_checksum_are_checked_on_a_kernel_device() {
        in_own_netns("braidtest2", |rt, device| {
            up("braidtest2")?;
            if !device.offloads() {
                return Err("the kernel refused the offloads".into());
            }
            let (from, to): (SocketAddr, SocketAddr) = (
                "10.7.0.1:40000".parse().unwrap(),
                "10.7.0.9:443".parse().unwrap(),
            );
            let sockaddr = |addr: SocketAddr| {
                let SocketAddr::V4(v4) = addr else {
                    unreachable!()
                };
                libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: 0,
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(v4.ip().octets()),
                    },
                    sin_zero: [0; 8],
                }
            };
            // SAFETY: plain arguments; the result is checked.
            let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_TCP) };
            if raw < 0 {
                return Err(format!("no raw socket: {}", io::Error::last_os_error()));
            }
            // SAFETY: `raw` was just opened and is owned by nothing else.
            let raw = unsafe { OwnedFd::from_raw_fd(raw) };
            let local = sockaddr(from);
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            // SAFETY: `local` is a `sockaddr_in` of `len` bytes that lives across the call.
            let r = unsafe { libc::bind(raw.as_raw_fd(), (&raw const local).cast(), len) };
            assert_eq!(r, 0, "bind: {}", io::Error::last_os_error());
            let good = tcp_packet(from, to, &[], 100);
            let mut bad = tcp_packet(from, to, &[], 101);
            bad[60] ^= 1;
            let remote = sockaddr(to);
            // The wrong one first: the read then returns the right one, or nothing.
            for segment in [&bad, &good] {
                let tcp = &segment[20..];
                // SAFETY: `tcp` and `remote` are readable for the lengths given.
                let n = unsafe {
                    libc::sendto(
                        raw.as_raw_fd(),
                        tcp.as_ptr().cast(),
                        tcp.len(),
                        0,
                        (&raw const remote).cast(),
                        len,
                    )
                };
                assert_eq!(n, tcp.len() as isize, "{}", io::Error::last_os_error());
            }
            let counters = device.counters();
            let mut buf = vec![0u8; crate::inbound::tun::READ_BUFFER];
            let read = rt.block_on(async {
                loop {
                    let n = tokio::time::timeout(Duration::from_secs(5), device.recv(&mut buf))
                        .await
                        .expect("no packet from the device")
                        .unwrap();
                    // Skip the kernel's own packets, if any.
                    if tcp_layout(&buf[..n]).is_some() {
                        break buf[..n].to_vec();
                    }
                }
            });
            assert_eq!(read[20..], good[20..], "the right one is read");
            assert_eq!(
                (
                    counters.checksums_checked.load(Ordering::Relaxed),
                    counters.checksums_wrong.load(Ordering::Relaxed)
                ),
                (2, 1)
            );
            Ok(())
        });
    }

    /// The checksum a device completing `packet`'s partial checksum (from the TCP header on,
    /// the field holding the pseudo-header's sum) writes.
    fn complete(packet: &[u8], start: usize) -> u16 {
        let mut sum: u64 = 0;
        for chunk in packet[start..].chunks(2) {
            let word = [chunk[0], chunk.get(1).copied().unwrap_or(0)];
            sum += u64::from(u16::from_be_bytes(word));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn segments_written_with_offloads_carry_a_partial_checksum_and_their_cut() {
        let v4 = (
            "10.7.0.9:443".parse().unwrap(),
            "10.7.0.1:40000".parse().unwrap(),
        );
        let v6 = (
            "[fd07::9]:443".parse().unwrap(),
            "[fd07::1]:40000".parse().unwrap(),
        );
        let timestamps = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        for ((from, to), ip_header) in [(v4, 20), (v6, 40)] {
            for (options, payload, mss) in [
                (&[][..], 3000, 1460u16),
                (&timestamps[..], 60_000, 1460),
                (&[][..], 1460, 1460),
                (&[][..], 3000, 0),
                (&timestamps[..], 0, 1460),
            ] {
                let case = format!(
                    "{from} options {} payload {payload} mss {mss}",
                    options.len()
                );
                let full = tcp_packet(from, to, options, payload);
                let at = ip_header + 16;
                let want = u16::from_be_bytes([full[at], full[at + 1]]);
                let mut packet = full.clone();
                packet[at..at + 2].fill(0);
                let layout = tcp_layout(&packet).expect(&case);
                let header = tcp_header_for(&mut packet, &layout, mss);
                assert_eq!(complete(&packet, ip_header), want, "{case}");
                assert_eq!(&packet[..at], &full[..at], "{case}");
                assert_eq!(&packet[at + 2..], &full[at + 2..], "{case}");
                let headers = ip_header + 20 + options.len();
                let cut = usize::from(mss).saturating_sub(options.len());
                let gso = if mss > 0 && payload > cut {
                    (
                        if ip_header == 40 {
                            GSO_TCPV6
                        } else {
                            GSO_TCPV4
                        },
                        cut,
                    )
                } else {
                    (GSO_NONE, 0)
                };
                assert_eq!(
                    header,
                    VnetHeader {
                        flags: NEEDS_CSUM,
                        gso_type: gso.0,
                        hdr_len: headers as u16,
                        gso_size: gso.1 as u16,
                        csum_start: ip_header as u16,
                        csum_offset: 16,
                    },
                    "{case}"
                );
                assert_eq!(VnetHeader::parse(&header.bytes()), header, "{case}");
            }
        }
    }

    #[test]
    fn packets_read_with_offloads_are_checked_unless_the_kernel_vouches_for_them() {
        let (from, to) = (
            "10.7.0.1:40000".parse().unwrap(),
            "10.7.0.9:443".parse().unwrap(),
        );
        let good = tcp_packet(from, to, &[], 100);
        let mut bad = good.clone();
        bad[50] ^= 1;
        let plain = VnetHeader::default();
        let partial = VnetHeader {
            flags: NEEDS_CSUM,
            csum_start: 20,
            csum_offset: 16,
            ..plain
        };
        let valid = VnetHeader {
            flags: DATA_VALID,
            ..plain
        };
        let tso = VnetHeader {
            gso_type: GSO_TCPV4,
            gso_size: 40,
            ..partial
        };
        let uso = VnetHeader {
            gso_type: 5,
            gso_size: 40,
            ..partial
        };
        let no_size = VnetHeader { gso_size: 0, ..uso };
        let ecn = VnetHeader {
            gso_type: 3 | GSO_ECN,
            ..tso
        };
        let udp = crate::inbound::tun::udp::udp_packet(from, to, b"x", 1500).unwrap();
        let cut = ReadVerdict::Cut {
            ip_header: 20,
            gso_size: 40,
        };
        use ReadVerdict::{Checked, Long, Pass, Refused, WrongChecksum};
        for (header, packet, verdict, case) in [
            (&plain, &good, Checked, "a full checksum, right"),
            (&plain, &bad, WrongChecksum, "a full checksum, wrong"),
            (
                &partial,
                &bad,
                Pass,
                "a partial checksum (the kernel's own segment)",
            ),
            (&valid, &bad, Pass, "checked by the kernel"),
            (&tso, &bad, Long, "a TCP segment to cut"),
            (&tso, &udp, Refused, "a TCP cut on a UDP datagram"),
            (&uso, &udp, cut, "UDP datagrams sent as one"),
            (&no_size, &udp, Refused, "UDP datagrams of no size"),
            (&uso, &good, Refused, "a UDP cut on a TCP segment"),
            (
                &ecn,
                &good,
                Refused,
                "UDP fragmentation offload (never asked for)",
            ),
            (&plain, &udp, Pass, "a UDP datagram"),
            (&plain, &vec![0x45; 3], Pass, "not TCP: the stack drops it"),
        ] {
            assert_eq!(read_verdict(header, packet), verdict, "{case}");
        }
    }

    /// A UDP packet of `datagrams` payloads of `size` bytes each, the last `last` bytes long,
    /// sent as one (its IP and UDP lengths those of the whole, as the kernel writes them).
    fn udp_gso_packet(v6: bool, size: usize, datagrams: usize, last: usize) -> Vec<u8> {
        let (from, to): (SocketAddr, SocketAddr) = match v6 {
            false => (
                "10.7.0.1:5000".parse().unwrap(),
                "10.7.0.9:443".parse().unwrap(),
            ),
            true => (
                "[fd07::1]:5000".parse().unwrap(),
                "[fd07::9]:443".parse().unwrap(),
            ),
        };
        let total = size * (datagrams - 1) + last;
        let payload: Vec<u8> = (0..total).map(|i| (i * 13 + i / 251) as u8).collect();
        crate::inbound::tun::udp::udp_packet(from, to, &payload, 65_535).unwrap()
    }

    #[test]
    fn udp_datagrams_sent_as_one_are_cut_into_whole_datagrams() {
        for v6 in [false, true] {
            let ip_header = if v6 { 40 } else { 20 };
            for (size, datagrams, last) in
                [(1200, 5, 1200), (1200, 5, 7), (1000, 1, 300), (1, 3, 1)]
            {
                let case = format!("v6 {v6} size {size} datagrams {datagrams} last {last}");
                let packet = udp_gso_packet(v6, size, datagrams, last);
                assert_eq!(udp_ip_header(&packet), Some(ip_header), "{case}");
                let mut at = ip_header + UDP_HEADER;
                let mut out = vec![0u8; 65_536];
                let mut payload = Vec::new();
                let mut count = 0;
                while let Some((len, next)) = cut_datagram(&packet, ip_header, size, at, &mut out) {
                    let datagram = &out[..len];
                    let want = if next == packet.len() { last } else { size };
                    assert_eq!(len, ip_header + UDP_HEADER + want, "{case}");
                    // The stack reads it as a UDP datagram of its own payload, between the
                    // same addresses and ports.
                    match crate::inbound::tun::classify(datagram) {
                        crate::inbound::tun::Packet::Udp {
                            src,
                            dst,
                            payload: p,
                        } => {
                            assert_eq!((src.port(), dst.port()), (5000, 443), "{case}");
                            payload.extend_from_slice(p);
                        }
                        other => panic!("{case}: {other:?}"),
                    }
                    if !v6 {
                        assert!(Ipv4Packet::new_checked(datagram).unwrap().verify_checksum());
                    }
                    at = next;
                    count += 1;
                }
                assert_eq!(count, datagrams, "{case}");
                assert_eq!(payload, packet[ip_header + UDP_HEADER..], "{case}");
            }
        }
        // A buffer too small for the next datagram, or nothing left: none.
        let packet = udp_gso_packet(false, 1200, 3, 1200);
        assert_eq!(cut_datagram(&packet, 20, 1200, 28, &mut [0u8; 1000]), None);
        assert_eq!(
            cut_datagram(&packet, 20, 1200, packet.len(), &mut [0u8; 2000]),
            None
        );
        assert_eq!(cut_datagram(&packet, 20, 0, 28, &mut [0u8; 2000]), None);
        assert_eq!(cut_datagram(&packet, 20, 1200, 3, &mut [0u8; 2000]), None);
    }

    proptest::proptest! {
        /// Whatever a read brings (the kernel's header and packet bytes), checking it never
        /// panics; nor does writing a segment that parses as TCP.
        #[test]
        fn reads_and_writes_never_panic_on_any_bytes(
            header in proptest::array::uniform10(proptest::prelude::any::<u8>()),
            mut packet in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            mss in proptest::prelude::any::<u16>(),
        ) {
            let _ = read_verdict(&VnetHeader::parse(&header), &packet);
            cut_all(&packet, u16::from_ne_bytes([header[4], header[5]]));
            if let Some(layout) = tcp_layout(&packet) {
                let _ = tcp_header_for(&mut packet, &layout, mss);
            }
        }

        /// The same over bytes that begin as an IPv4 or IPv6 header of a TCP segment, so that
        /// the TCP parts are reached.
        #[test]
        fn tcp_looking_reads_and_writes_never_panic(
            v6 in proptest::prelude::any::<bool>(),
            flags in 0u8..4,
            gso in proptest::prelude::prop_oneof![
                proptest::prelude::Just(GSO_NONE),
                proptest::prelude::Just(GSO_TCPV4),
                proptest::prelude::Just(GSO_TCPV6),
            ],
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
            mss in proptest::prelude::any::<u16>(),
        ) {
            let (from, to): (SocketAddr, SocketAddr) = match v6 {
                false => ("10.7.0.1:1".parse().unwrap(), "10.7.0.9:2".parse().unwrap()),
                true => ("[fd07::1]:1".parse().unwrap(), "[fd07::9]:2".parse().unwrap()),
            };
            let mut packet = tcp_packet(from, to, &[], 0);
            let ip_header = if v6 { 40 } else { 20 };
            packet.truncate(ip_header);
            packet.extend_from_slice(&tail);
            // The IP length fields agree with the bytes, so the TCP header is parsed.
            let len = packet.len() as u16;
            match v6 {
                false => packet[2..4].copy_from_slice(&len.to_be_bytes()),
                true => packet[4..6].copy_from_slice(&(len - 40).to_be_bytes()),
            }
            let header = VnetHeader { flags, gso_type: gso, ..VnetHeader::default() };
            let _ = read_verdict(&header, &packet);
            if let Some(layout) = tcp_layout(&packet) {
                let _ = tcp_header_for(&mut packet, &layout, mss);
            }
        }
    }

    /// Cuts `packet` as a read does when the kernel marks it `GSO_UDP_L4` with `gso_size`.
    fn cut_all(packet: &[u8], gso_size: u16) {
        let header = VnetHeader {
            gso_type: GSO_UDP_L4,
            gso_size,
            ..VnetHeader::default()
        };
        if let ReadVerdict::Cut {
            ip_header,
            gso_size,
        } = read_verdict(&header, packet)
        {
            let mut out = vec![0u8; 65_536];
            let mut at = ip_header + UDP_HEADER;
            while let Some((_, next)) = cut_datagram(packet, ip_header, gso_size, at, &mut out) {
                assert!(next > at);
                at = next;
            }
        }
    }

    proptest::proptest! {
        /// Bytes that begin as an IPv4 or IPv6 header of a UDP datagram (its IP lengths
        /// agreeing with them), marked as several datagrams of any size: cutting never panics
        /// and always ends.
        #[test]
        fn udp_looking_cuts_never_panic(
            v6 in proptest::prelude::any::<bool>(),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            gso_size in proptest::prelude::any::<u16>(),
        ) {
            let mut packet = udp_gso_packet(v6, 1, 1, 1);
            let ip_header = if v6 { 40 } else { 20 };
            packet.truncate(ip_header);
            packet.extend_from_slice(&tail);
            let len = packet.len() as u16;
            match v6 {
                false => packet[2..4].copy_from_slice(&len.to_be_bytes()),
                true => packet[4..6].copy_from_slice(&(len - 40).to_be_bytes()),
            }
            cut_all(&packet, gso_size);
        }
    }

    #[test]
    fn interface_names_are_checked() {
        for good in ["braid0", "tun-lte.1", "a", "fifteen-bytes-x"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "sixteen-bytes-xx", "a/b", "a b", "a:1", "a\0", "é"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
