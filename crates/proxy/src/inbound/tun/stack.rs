//! The TUN inbound's TCP side: smoltcp terminates every TCP connection an application opens
//! through the device. A SYN to a new address and port gets a connection of its own: a smoltcp
//! interface in "any IP" mode with one socket listening on exactly that endpoint, to which the
//! stack hands that connection's packets and no others (so a packet costs the same however many
//! connections are open; smoltcp walks every socket of an interface for each segment). Once the
//! handshake is done, the connection is handed to a task that opens a stream flow to that
//! endpoint and moves bytes between the flow and the socket through two small bounded channels.
//! Backpressure holds both ways: the stack reads from a socket only while its channel to the
//! flow has room (the application then sees TCP's window close), and the flow's task waits while
//! the socket's send buffer and the channel to the stack are full. A step runs only the
//! connections with something to do: packets, news from their task, or a smoltcp timer due.
//! With a device that offloads TCP ([`PacketIo::offloads`]), the interfaces are told an MTU of
//! 64 KiB and no TCP checksums; each application's SYN shows smoltcp an MSS to match
//! ([`raise_mss`]) and the real one goes with the connection's segments to the device, which cuts
//! them to it.

use portable_atomic::AtomicU64;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Buf as _, Bytes};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, Checksum, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpEndpoint, IpListenEndpoint};
use tokio::sync::{Notify, mpsc, watch};
use tracing::{debug, info, warn};

use super::ping::PingTable;
use super::reassembly::{self, Reassembly};
use super::udp::UdpTable;
use super::{MAX_PACKET, Packet, PacketIo, READ_BUFFER, TunLimits, classify};
use crate::inbound::server::InboundContext;
use crate::session::Target;
use crate::transport::flow::FlowMsg;

/// Largest chunk moved between a socket and its flow at once.
const CHUNK: usize = 64 * 1024;
/// Messages each way between the stack and a connection's task.
const CHANNEL: usize = 4;
/// How long a socket made for a SYN may take to complete its handshake.
const HANDSHAKE: Duration = Duration::from_secs(20);
/// Packets read from the device per wake-up before the stack runs.
const BURST: usize = 64;

/// What the TUN inbound counted (shown by tests and logs).
#[derive(Debug, Default)]
pub struct TunCounters {
    /// TCP connections handed to a flow.
    pub tcp_connections: AtomicU64,
    /// SYNs dropped because [`TunLimits::max_tcp`] connections were open.
    pub tcp_refused: AtomicU64,
    /// UDP datagrams sent into a flow.
    pub udp_datagrams: AtomicU64,
    /// UDP datagrams dropped (too many sources, a flow that could not open, a full queue).
    pub udp_dropped: AtomicU64,
    /// Packets neither TCP, UDP nor ICMP echo requests (other ICMP, fragments of other
    /// protocols, malformed), dropped.
    pub other_dropped: AtomicU64,
    /// ICMP echo requests sent into a ping flow.
    pub pings: AtomicU64,
    /// ICMP echo replies written to the device.
    pub ping_replies: AtomicU64,
    /// ICMP echo requests and replies dropped (too many ping flows, a flow that could not
    /// open, e.g. with a server that does not relay them, a full queue).
    pub pings_dropped: AtomicU64,
    /// Fragments of UDP datagrams the application sent in pieces (longer than the MTU).
    pub fragments: AtomicU64,
    /// UDP datagrams put back together from them.
    pub reassembled: AtomicU64,
    /// Of those fragments, dropped: their datagram overlapped, could not be, took longer than
    /// 30 s or was the oldest when too many were in pieces.
    pub fragments_dropped: AtomicU64,
    /// Packets read from a device with offloads that held more than one segment: TCP segments
    /// the kernel did not cut, and UDP packets holding several datagrams.
    pub long_reads: AtomicU64,
    /// UDP datagrams cut from such packets.
    pub udp_cut: AtomicU64,
    /// TCP segments with a full checksum (not the kernel's own: forwarded from another host)
    /// checked by braid.
    pub checksums_checked: AtomicU64,
    /// Of those, dropped for a wrong checksum.
    pub checksums_wrong: AtomicU64,
}

impl TunCounters {
    /// The counters now, for `braid status`.
    pub fn status(&self, device: &str) -> crate::transport::status::TunStatus {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        crate::transport::status::TunStatus {
            device: device.to_owned(),
            tcp_connections: get(&self.tcp_connections),
            tcp_refused: get(&self.tcp_refused),
            udp_datagrams: get(&self.udp_datagrams),
            udp_dropped: get(&self.udp_dropped),
            other_dropped: get(&self.other_dropped),
            pings: get(&self.pings),
            ping_replies: get(&self.ping_replies),
            pings_dropped: get(&self.pings_dropped),
            fragments: get(&self.fragments),
            reassembled: get(&self.reassembled),
            fragments_dropped: get(&self.fragments_dropped),
            long_reads: get(&self.long_reads),
            udp_cut: get(&self.udp_cut),
            checksums_checked: get(&self.checksums_checked),
            checksums_wrong: get(&self.checksums_wrong),
        }
    }
}

/// Bytes from the application to the flow.
#[derive(Debug)]
enum Up {
    Data(Bytes),
    Fin,
}

/// Bytes from the flow to the application.
#[derive(Debug)]
enum Down {
    Data(Bytes),
    Fin,
    Reset,
}

/// A connection handed to a flow: its side of the channels to the flow's task.
#[derive(Debug)]
struct Flow {
    up: mpsc::Sender<Up>,
    down: mpsc::Receiver<Down>,
    /// Flow bytes the socket's send buffer had no room for yet.
    pending: Bytes,
    /// The application's FIN went up.
    fin_up: bool,
    /// The flow finished or reset: nothing more comes down.
    down_done: bool,
    /// The flow finished: the socket closes once `pending` is sent and, if the application
    /// has closed too, everything it sent has gone up (so no byte is left in the socket).
    close_wanted: bool,
}

/// One TCP connection, with a smoltcp interface and socket of its own (see the module's notes).
struct Conn {
    /// The SYN's (source, destination).
    pair: (SocketAddr, SocketAddr),
    iface: Interface,
    sockets: SocketSet<'static>,
    handle: SocketHandle,
    /// Packets from the device for this connection, not yet given to smoltcp.
    rx: VecDeque<Vec<u8>>,
    /// With offloads: the most TCP payload and options per segment the application takes
    /// (its SYN's MSS, at most the device's MTU's worth), for the device to cut segments to.
    mss: u16,
    /// When the SYN came, until the handshake is done.
    opening: Option<Instant>,
    /// Set once the handshake is done.
    flow: Option<Flow>,
    /// The time (µs since the stack started) registered for it in [`Stack::timers`].
    deadline: Option<i64>,
    /// In [`Stack::ready`] already.
    ready: bool,
}

/// Packets for the device, each with the MSS the device cuts it to (with offloads; 0 for the
/// stray interface's).
type Outgoing = Vec<(Vec<u8>, u16)>;

/// smoltcp's view of the device for one interface: its packets in, everything out.
struct Link<'a> {
    rx: &'a mut VecDeque<Vec<u8>>,
    tx: &'a mut Outgoing,
    /// The MSS each outgoing packet is tagged with.
    mss: u16,
    shape: Shape,
}

/// What smoltcp is told of the device: the largest packet, and whether it computes and checks
/// TCP checksums (not with offloads: the device does, `PacketIo::offloads`).
#[derive(Clone, Copy)]
struct Shape {
    mtu: usize,
    tcp_checksums: bool,
}

struct RxToken(Vec<u8>);
struct TxToken<'a>(&'a mut Outgoing, u16);

impl phy::RxToken for RxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut packet = vec![0; len];
        let r = f(&mut packet);
        self.0.push((packet, self.1));
        r
    }
}

impl phy::Device for Link<'_> {
    type RxToken<'b>
        = RxToken
    where
        Self: 'b;
    type TxToken<'b>
        = TxToken<'b>
    where
        Self: 'b;

    fn receive(&mut self, _now: smoltcp::time::Instant) -> Option<(RxToken, TxToken<'_>)> {
        let packet = self.rx.pop_front()?;
        Some((RxToken(packet), TxToken(self.tx, self.mss)))
    }

    fn transmit(&mut self, _now: smoltcp::time::Instant) -> Option<TxToken<'_>> {
        Some(TxToken(self.tx, self.mss))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = self.shape.mtu;
        if !self.shape.tcp_checksums {
            caps.checksum.tcp = Checksum::None;
        }
        caps
    }
}

/// An interface in "any IP" mode (it answers for every destination address).
fn any_ip_interface(shape: Shape, tx: &mut Outgoing) -> Interface {
    let mut config = Config::new(HardwareAddress::Ip);
    config.random_seed = rand::random();
    let mut rx = VecDeque::new();
    let mut link = Link {
        rx: &mut rx,
        tx,
        mss: 0,
        shape,
    };
    let mut iface = Interface::new(config, &mut link, smoltcp::time::Instant::ZERO);
    iface.set_any_ip(true);
    iface
}

/// Which connections have news from their flow's task, and the wake-up for the stack.
#[derive(Default)]
struct Wake {
    ids: Mutex<Vec<u64>>,
    notify: Arc<Notify>,
}

impl Wake {
    /// Connection `id`'s task sent something down or took something up.
    fn wake(&self, id: u64) {
        self.ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(id);
        self.notify.notify_one();
    }

    /// Moves the connections woken since the last call into `into`.
    fn take(&self, into: &mut Vec<u64>) {
        into.append(&mut self.ids.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

pub(super) struct Stack<D> {
    io: Arc<D>,
    ctx: Arc<InboundContext>,
    counters: Arc<TunCounters>,
    wake: Arc<Wake>,
    start: Instant,
    limits: TunLimits,
    /// The limits a reload puts in force ([`Stack::take_limits`]).
    limits_rx: watch::Receiver<TunLimits>,
    /// The device's MTU, shared with the UDP and ping tables' tasks.
    mtu: Arc<AtomicUsize>,
    /// The device segments and checksums TCP ([`PacketIo::offloads`]).
    offload: bool,
    /// What the interfaces are told of the device.
    shape: Shape,
    /// Packets for the device, from every interface.
    tx: Outgoing,
    /// An interface with no socket: it answers segments of no connection with a reset, as
    /// smoltcp does when no socket accepts a segment.
    stray: Interface,
    stray_sockets: SocketSet<'static>,
    stray_rx: VecDeque<Vec<u8>>,
    conns: HashMap<u64, Conn>,
    /// The connection of each (source, destination) pair, so a repeated SYN makes no second
    /// socket.
    pairs: HashMap<(SocketAddr, SocketAddr), u64>,
    next_id: u64,
    /// Connections to run at the next step (packets, news from their task, a timer).
    ready: Vec<u64>,
    /// Connections' next timers (smoltcp's retransmissions and delayed ACKs, handshakes that
    /// take too long), by time in µs since the stack started.
    timers: BTreeSet<(i64, u64)>,
    /// Room for the connections [`Wake::take`] hands over at each step.
    woken: Vec<u64>,
    udp: UdpTable,
    ping: PingTable,
    /// UDP datagrams the application sent in fragments, until they are whole.
    reassembly: Reassembly,
}

impl<D: PacketIo + Send + Sync + 'static> Stack<D> {
    pub(super) fn new(
        io: Arc<D>,
        ctx: Arc<InboundContext>,
        mut limits_rx: watch::Receiver<TunLimits>,
        counters: Arc<TunCounters>,
    ) -> Self {
        let limits = *limits_rx.borrow_and_update();
        let wake = Arc::new(Wake::default());
        let mtu = Arc::new(AtomicUsize::new(limits.mtu));
        let udp = UdpTable::new(
            ctx.clone(),
            counters.clone(),
            wake.notify.clone(),
            mtu.clone(),
        );
        let ping = PingTable::new(
            ctx.clone(),
            counters.clone(),
            wake.notify.clone(),
            mtu.clone(),
        );
        let offload = io.offloads();
        let shape = Shape {
            mtu: if offload { MAX_PACKET } else { limits.mtu },
            tcp_checksums: !offload,
        };
        let mut tx = Vec::new();
        let stray = any_ip_interface(shape, &mut tx);
        Stack {
            io,
            ctx,
            counters,
            wake,
            start: Instant::now(),
            limits,
            limits_rx,
            mtu,
            offload,
            shape,
            tx,
            stray,
            stray_sockets: SocketSet::new(Vec::new()),
            stray_rx: VecDeque::new(),
            conns: HashMap::new(),
            pairs: HashMap::new(),
            next_id: 0,
            ready: Vec::new(),
            timers: BTreeSet::new(),
            woken: Vec::new(),
            udp,
            ping,
            reassembly: Reassembly::default(),
        }
    }

    /// Puts the limits a reload sent in force: `max_tcp` and `tcp_buffer` for the connections
    /// opened from now on, the MTU for the packets written from now on (connections already
    /// open keep the segment size their handshake agreed).
    fn take_limits(&mut self) {
        if !self.limits_rx.has_changed().unwrap_or(false) {
            return;
        }
        let new = *self.limits_rx.borrow_and_update();
        self.mtu.store(new.mtu, Ordering::Relaxed);
        if !self.offload {
            self.shape.mtu = new.mtu;
        }
        info!(
            mtu = new.mtu,
            max_tcp = new.max_tcp,
            tcp_buffer = new.tcp_buffer,
            "TUN inbound: new limits"
        );
        self.limits = new;
    }

    /// µs since the stack started.
    fn now_us(&self) -> i64 {
        i64::try_from(self.start.elapsed().as_micros()).unwrap_or(i64::MAX)
    }

    pub(super) async fn run(mut self) {
        let mut buf = vec![0u8; READ_BUFFER];
        loop {
            let delay = self
                .timers
                .first()
                .map_or(Duration::from_secs(1), |&(at, _)| {
                    let us = u64::try_from(at.saturating_sub(self.now_us())).unwrap_or(0);
                    Duration::from_micros(us).min(Duration::from_secs(1))
                });
            let io = self.io.clone();
            let notify = self.wake.notify.clone();
            // New limits wake the stack, which takes them at its step.
            let mut limits = self.limits_rx.clone();
            tokio::select! {
                r = io.recv(&mut buf) => match r {
                    Ok(n) => {
                        // Limits sent meanwhile first: they may have come with the packets.
                        self.take_limits();
                        self.on_packet(&buf[..n]);
                        for _ in 1..BURST {
                            match io.try_recv(&mut buf) {
                                Ok(n) => self.on_packet(&buf[..n]),
                                Err(_) => break,
                            }
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "TUN device read failed; the TUN inbound stops");
                        return;
                    }
                },
                () = notify.notified() => {}
                Ok(()) = limits.changed() => {}
                () = tokio::time::sleep(delay) => {}
            }
            self.step();
        }
    }

    /// One packet from the device.
    fn on_packet(&mut self, packet: &[u8]) {
        let Some(piece) = reassembly::piece(packet) else {
            return self.on_whole(packet);
        };
        self.counters.fragments.fetch_add(1, Ordering::Relaxed);
        let whole = self.reassembly.push(piece, Instant::now());
        self.count_fragments_dropped();
        if let Some(whole) = whole {
            self.counters.reassembled.fetch_add(1, Ordering::Relaxed);
            self.on_whole(&whole);
        }
    }

    fn count_fragments_dropped(&mut self) {
        let dropped = self.reassembly.take_dropped();
        if dropped > 0 {
            self.counters
                .fragments_dropped
                .fetch_add(dropped, Ordering::Relaxed);
        }
    }

    /// One whole packet: from the device, or put back together from fragments.
    fn on_whole(&mut self, packet: &[u8]) {
        match classify(packet) {
            Packet::Tcp { src, dst, syn } => {
                let mut packet = packet.to_vec();
                // With offloads, smoltcp is told that the application takes segments as long
                // as its own MTU (the device cuts them to the SYN's MSS, kept here).
                let mss = match syn && self.offload {
                    true => raise_mss(&mut packet, self.shape.mtu, self.limits.mtu),
                    false => 0,
                };
                let id = match self.pairs.get(&(src, dst)) {
                    Some(&id) => id,
                    None if syn => match self.listen_for(src, dst, mss) {
                        Some(id) => id,
                        None => return,
                    },
                    None => {
                        self.stray_rx.push_back(packet);
                        return;
                    }
                };
                if let Some(conn) = self.conns.get_mut(&id) {
                    conn.rx.push_back(packet);
                    mark_ready(&mut self.ready, conn, id);
                }
            }
            Packet::Udp { src, dst, payload } => self.udp.on_datagram(src, dst, payload),
            Packet::Echo {
                src,
                dst,
                ident,
                seq,
                data,
            } => self.ping.on_request(src, dst, ident, seq, data),
            Packet::Other => {
                self.counters.other_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A connection whose socket listens on `dst` for the SYN from `src` (whose MSS for the
    /// device is `mss`); `None` when too many are open.
    fn listen_for(&mut self, src: SocketAddr, dst: SocketAddr, mss: u16) -> Option<u64> {
        if self.conns.len() >= self.limits.max_tcp {
            self.counters.tcp_refused.fetch_add(1, Ordering::Relaxed);
            debug!(%src, %dst, "TUN inbound: too many TCP connections, SYN dropped");
            return None;
        }
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; self.limits.tcp_buffer]),
            tcp::SocketBuffer::new(vec![0; self.limits.tcp_buffer]),
        );
        socket.set_nagle_enabled(false);
        if self.offload {
            // smoltcp acknowledges at once only when more than an MSS is unacknowledged, else
            // after its delayed-ACK timer (10 ms); the MSS it was shown (`raise_mss`) is more
            // than its buffer holds, so the application would wait for that timer or for a
            // window update. Each segment (up to 64 KiB) is acknowledged at once instead.
            socket.set_ack_delay(None);
        }
        let endpoint = IpListenEndpoint {
            addr: Some(dst.ip().into()),
            port: dst.port(),
        };
        socket.listen(endpoint).ok()?;
        let mut sockets = SocketSet::new(Vec::with_capacity(1));
        let handle = sockets.add(socket);
        let id = self.next_id;
        self.next_id += 1;
        let conn = Conn {
            pair: (src, dst),
            iface: any_ip_interface(self.shape, &mut self.tx),
            sockets,
            handle,
            rx: VecDeque::new(),
            mss,
            opening: Some(Instant::now()),
            flow: None,
            deadline: None,
            ready: false,
        };
        self.conns.insert(id, conn);
        self.pairs.insert((src, dst), id);
        Some(id)
    }

    /// Runs the connections with something to do, then writes what they sent to the device.
    fn step(&mut self) {
        self.take_limits();
        // Datagrams in pieces too long go now, not at the next fragment (a step comes at least
        // once a second).
        if !self.reassembly.is_empty() {
            self.reassembly.expire(Instant::now());
            self.count_fragments_dropped();
        }
        let now_us = self.now_us();
        let now = smoltcp::time::Instant::from_micros(now_us);
        self.wake.take(&mut self.woken);
        for id in self.woken.drain(..) {
            if let Some(conn) = self.conns.get_mut(&id) {
                mark_ready(&mut self.ready, conn, id);
            }
        }
        while let Some(&(at, id)) = self.timers.first()
            && at <= now_us
        {
            self.timers.pop_first();
            if let Some(conn) = self.conns.get_mut(&id) {
                conn.deadline = None;
                mark_ready(&mut self.ready, conn, id);
            }
        }
        if !self.stray_rx.is_empty() {
            let mut link = Link {
                rx: &mut self.stray_rx,
                tx: &mut self.tx,
                mss: 0,
                shape: self.shape,
            };
            self.stray.poll(now, &mut link, &mut self.stray_sockets);
            self.stray_rx.clear();
        }
        let ready = std::mem::take(&mut self.ready);
        for &id in &ready {
            self.run_conn(id, now);
        }
        self.ready = ready;
        self.ready.clear();
        for (mut packet, mss) in self.tx.drain(..) {
            let _ = match self.offload {
                true => {
                    lower_mss(&mut packet, self.limits.mtu);
                    self.io.send_tcp(&mut packet, mss)
                }
                false => self.io.send(&packet),
            };
        }
        for packet in self.udp.take_replies() {
            let _ = self.io.send(&packet);
        }
        for packet in self.ping.take_replies() {
            let _ = self.io.send(&packet);
        }
    }

    /// Runs one connection: its packets in, its handshake or its bytes moved, its packets out;
    /// removes it once closed, else sets its next timer.
    fn run_conn(&mut self, id: u64, now: smoltcp::time::Instant) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        conn.ready = false;
        poll_conn(conn, &mut self.tx, self.shape, now);
        let mut open = true;
        if let Some(since) = conn.opening {
            let socket = conn.sockets.get_mut::<tcp::Socket<'_>>(conn.handle);
            match socket.state() {
                tcp::State::Listen | tcp::State::SynReceived if since.elapsed() < HANDSHAKE => {}
                tcp::State::Listen | tcp::State::SynReceived | tcp::State::Closed => open = false,
                _ => match socket.local_endpoint().map(endpoint_addr) {
                    Some(target) => {
                        conn.opening = None;
                        conn.flow = Some(start_flow(
                            &self.ctx,
                            &self.counters,
                            &self.wake,
                            id,
                            conn.pair.0,
                            target,
                        ));
                    }
                    None => open = false,
                },
            }
        }
        if let Some(flow) = &mut conn.flow {
            let socket = conn.sockets.get_mut::<tcp::Socket<'_>>(conn.handle);
            pump(socket, flow);
            let fin_up = flow.fin_up;
            // The second poll sends what the pump queued, an aborted socket's RST included.
            poll_conn(conn, &mut self.tx, self.shape, now);
            // TIME-WAIT (the inbound closed first) is over too once everything the application
            // sent went up to the flow: both FINs are through and acknowledged. smoltcp would
            // hold the socket, its slot of `max_tcp` and its buffers for 10 s more, to answer a
            // FIN sent again after a lost ACK; on the device nothing is lost, and such a FIN
            // would meet a reset, which ends the application's closed socket as well.
            open = match conn.sockets.get::<tcp::Socket<'_>>(conn.handle).state() {
                tcp::State::Closed => false,
                tcp::State::TimeWait => !fin_up,
                _ => true,
            };
        }
        if let Some(at) = conn.deadline.take() {
            self.timers.remove(&(at, id));
        }
        if !open {
            // Dropping the channels ends the connection's task (a flow not finished is reset).
            let pair = conn.pair;
            self.conns.remove(&id);
            self.pairs.remove(&pair);
            return;
        }
        let mut at = conn
            .iface
            .poll_at(now, &conn.sockets)
            .map(|t| t.total_micros());
        if let Some(since) = conn.opening {
            let until = now.total_micros()
                + i64::try_from(HANDSHAKE.saturating_sub(since.elapsed()).as_micros())
                    .unwrap_or(i64::MAX / 2);
            at = Some(at.map_or(until, |a| a.min(until)));
        }
        if let Some(at) = at {
            conn.deadline = Some(at);
            self.timers.insert((at, id));
        }
    }
}

/// The MSS of a TCP segment in a packet of `mtu` bytes with an IP header of `ip_header`.
fn mss_for(mtu: usize, ip_header: usize) -> u16 {
    u16::try_from(mtu.saturating_sub(ip_header + 20)).unwrap_or(u16::MAX)
}

/// The length of the IP header of `packet` (an IP packet holding a TCP segment, [`classify`])
/// and whether the segment's SYN flag is set.
fn tcp_syn(packet: &[u8]) -> (usize, bool) {
    let ip_header = match packet.first().map(|b| b >> 4) {
        Some(4) => usize::from(packet[0] & 0x0f) * 4,
        _ => 40,
    };
    let syn = packet.get(ip_header + 13).is_some_and(|f| f & 0x02 != 0);
    (ip_header, syn)
}

/// Sets the MSS option of the TCP segment in `packet` (its IP header `ip_header` bytes) to
/// `mss`; returns the option's value before, or `None` (nothing changed) when the segment has
/// no MSS option or its options do not parse.
fn rewrite_mss(packet: &mut [u8], ip_header: usize, mss: u16) -> Option<u16> {
    let tcp = packet.get_mut(ip_header..)?;
    let header = usize::from(tcp.get(12)? >> 4) * 4;
    let options = tcp.get_mut(20..header)?;
    let mut i = 0;
    while i < options.len() {
        match options[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let len = usize::from(*options.get(i + 1)?);
                if len < 2 || i + len > options.len() {
                    break;
                }
                if kind == 2 && len == 4 {
                    let before = u16::from_be_bytes([options[i + 2], options[i + 3]]);
                    options[i + 2..i + 4].copy_from_slice(&mss.to_be_bytes());
                    return Some(before);
                }
                i += len;
            }
        }
    }
    None
}

/// With offloads, an application's SYN `packet` goes to smoltcp with the MSS that a packet of
/// `stack_mtu` bytes holds, so that smoltcp sends segments that long (smoltcp 0.14's own
/// `segmentation-offload` feature would keep the MSS, but it drops IPv6 packets longer than the
/// interface's MTU, so the interfaces are told an MTU of 64 KiB instead); returns the MSS the
/// device cuts them to: the SYN's, at most what a packet of `device_mtu` bytes holds (0 when
/// the SYN has no MSS option, left as it is: smoltcp then sends the default's 536 bytes,
/// which need no cutting).
fn raise_mss(packet: &mut [u8], stack_mtu: usize, device_mtu: usize) -> u16 {
    let (ip_header, _) = tcp_syn(packet);
    rewrite_mss(packet, ip_header, mss_for(stack_mtu, ip_header))
        .map_or(0, |theirs| theirs.min(mss_for(device_mtu, ip_header)))
}

/// With offloads, smoltcp's SYN-ACK `packet` offers the MSS of its own MTU: lowered to what a
/// packet of `device_mtu` bytes holds, as without offloads, so that an application (or a
/// host whose traffic the system forwards into the device) sends segments that fit the device.
fn lower_mss(packet: &mut [u8], device_mtu: usize) {
    let (ip_header, syn) = tcp_syn(packet);
    if syn {
        let _ = rewrite_mss(packet, ip_header, mss_for(device_mtu, ip_header));
    }
}

/// Polls `conn`'s interface: its packets from the device in, what it sends into `tx`.
fn poll_conn(conn: &mut Conn, tx: &mut Outgoing, shape: Shape, now: smoltcp::time::Instant) {
    let mut link = Link {
        rx: &mut conn.rx,
        tx,
        mss: conn.mss,
        shape,
    };
    conn.iface.poll(now, &mut link, &mut conn.sockets);
}

/// Puts connection `id` in `ready` once.
fn mark_ready(ready: &mut Vec<u64>, conn: &mut Conn, id: u64) {
    if !conn.ready {
        conn.ready = true;
        ready.push(id);
    }
}

/// Starts the task of a connection whose handshake is done: it opens the stream flow.
fn start_flow(
    ctx: &Arc<InboundContext>,
    counters: &TunCounters,
    wake: &Arc<Wake>,
    id: u64,
    app: SocketAddr,
    target: SocketAddr,
) -> Flow {
    let (up_tx, up_rx) = mpsc::channel(CHANNEL);
    let (down_tx, down_rx) = mpsc::channel(CHANNEL);
    counters.tcp_connections.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(relay(
        ctx.clone(),
        app,
        target,
        up_rx,
        down_tx,
        wake.clone(),
        id,
    ));
    Flow {
        up: up_tx,
        down: down_rx,
        pending: Bytes::new(),
        fin_up: false,
        down_done: false,
        close_wanted: false,
    }
}

/// Moves bytes between a connection's socket and its flow task.
fn pump(socket: &mut tcp::Socket<'_>, conn: &mut Flow) {
    // Application to flow, while the channel has room.
    while socket.can_recv() {
        let Ok(permit) = conn.up.try_reserve() else {
            break;
        };
        let data = socket.recv(|b| {
            let n = b.len().min(CHUNK);
            (n, Bytes::copy_from_slice(&b[..n]))
        });
        match data {
            Ok(d) => permit.send(Up::Data(d)),
            Err(_) => break,
        }
    }
    // The application's FIN: its state says so (smoltcp's `may_recv` is also false after a
    // reset, which must not look like a FIN).
    let fin_received = matches!(
        socket.state(),
        tcp::State::CloseWait | tcp::State::LastAck | tcp::State::Closing | tcp::State::TimeWait
    );
    if fin_received
        && !conn.fin_up
        && !socket.can_recv()
        && let Ok(permit) = conn.up.try_reserve()
    {
        permit.send(Up::Fin);
        conn.fin_up = true;
    }
    // Flow to application, while the socket has room.
    loop {
        if !conn.pending.is_empty() {
            match socket.send_slice(&conn.pending) {
                Ok(n) => conn.pending.advance(n),
                Err(_) => break,
            }
            if !conn.pending.is_empty() {
                break;
            }
        }
        if conn.down_done {
            break;
        }
        match conn.down.try_recv() {
            Ok(Down::Data(d)) => conn.pending = d,
            Ok(Down::Fin) => {
                conn.down_done = true;
                conn.close_wanted = true;
            }
            Ok(Down::Reset) | Err(mpsc::error::TryRecvError::Disconnected) => {
                conn.down_done = true;
                socket.abort();
            }
            Err(mpsc::error::TryRecvError::Empty) => break,
        }
    }
    if conn.close_wanted && conn.pending.is_empty() && (!fin_received || conn.fin_up) {
        conn.close_wanted = false;
        // The ACK of the application's FIN then goes out at once: the connection is dropped
        // in TIME-WAIT (`Stack::step`), and a delayed ACK would go with it.
        socket.set_ack_delay(None);
        socket.close();
    }
}

fn endpoint_addr(e: IpEndpoint) -> SocketAddr {
    SocketAddr::new(e.addr.into(), e.port)
}

/// One connection's task: opens the stream flow to `target`, then moves bytes both ways until
/// both sides are finished or either resets.
async fn relay(
    ctx: Arc<InboundContext>,
    app: SocketAddr,
    target: SocketAddr,
    mut up: mpsc::Receiver<Up>,
    down: mpsc::Sender<Down>,
    wake: Arc<Wake>,
    id: u64,
) {
    let (writer, mut reader, first) = match ctx.connect(Target::Addr(target)).await {
        Ok(flow) => flow,
        Err(reply) => {
            info!(%app, %target, reason = reply.name(), "TUN inbound: connection refused");
            let _ = down.send(Down::Reset).await;
            wake.wake(id);
            return;
        }
    };
    let downward = async {
        if !first.is_empty() {
            if down.send(Down::Data(first)).await.is_err() {
                return;
            }
            wake.wake(id);
        }
        while let Some(msg) = reader.recv().await {
            let last = match msg {
                FlowMsg::Data(d) => Down::Data(d),
                FlowMsg::Finished => Down::Fin,
                FlowMsg::Reset(_) => Down::Reset,
                FlowMsg::Datagram(_) => continue,
            };
            let end = !matches!(last, Down::Data(_));
            if down.send(last).await.is_err() {
                return;
            }
            wake.wake(id);
            if end {
                return;
            }
        }
        // The session is gone.
        let _ = down.send(Down::Reset).await;
        wake.wake(id);
    };
    let upward = async {
        while let Some(msg) = up.recv().await {
            // The stack may have held bytes back for want of room in this channel.
            wake.wake(id);
            match msg {
                Up::Data(d) => {
                    if writer.write(d).await.is_err() {
                        return;
                    }
                }
                Up::Fin => {
                    let _ = writer.finish().await;
                    return;
                }
            }
        }
        // The stack dropped the connection (the application reset it, or it closed).
        let _ = writer.reset(0).await;
    };
    tokio::join!(downward, upward);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::inbound::tun::device::testing::tcp_packet;
    use proptest::prelude::*;

    /// The MSS option of the TCP segment in `packet` (IP header `ip_header` bytes), if any.
    fn mss_option(packet: &[u8], ip_header: usize) -> Option<u16> {
        let tcp = &packet[ip_header..];
        let options = &tcp[20..usize::from(tcp[12] >> 4) * 4];
        let at = options.windows(2).position(|w| w == [2, 4])?;
        Some(u16::from_be_bytes([options[at + 2], options[at + 3]]))
    }

    #[test]
    fn a_syn_s_mss_is_raised_for_smoltcp_and_kept_for_the_device() {
        let v4 = (
            "10.7.0.1:40000".parse().unwrap(),
            "10.7.0.9:443".parse().unwrap(),
        );
        let v6 = (
            "[fd07::1]:40000".parse().unwrap(),
            "[fd07::9]:443".parse().unwrap(),
        );
        // MSS 1460, SACK permitted, timestamps, NOP, window scale: what Linux sends.
        let linux = [
            2, 4, 5, 180, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        // The MSS after other options, with NOPs before it.
        let late = [1, 1, 4, 2, 1, 1, 2, 4, 2, 0, 0, 0];
        for ((from, to), ip_header) in [(v4, 20usize), (v6, 40)] {
            for (options, device_mtu, want) in [
                (&linux[..], 1500, 1460u16),
                (&linux[..], 1400, 1460 - 100),
                (&late[..], 9000, 512),
            ] {
                let mut packet = tcp_packet(from, to, options, 0);
                let before = packet.clone();
                let want = want.min((device_mtu - ip_header - 20) as u16);
                assert_eq!(raise_mss(&mut packet, MAX_PACKET, device_mtu), want);
                let raised = (MAX_PACKET - ip_header - 20) as u16;
                assert_eq!(mss_option(&packet, ip_header), Some(raised));
                let changed = packet.iter().zip(&before).filter(|(a, b)| a != b).count();
                assert!(changed <= 2, "only the option's value changes");
            }
            // No MSS option, or options that do not parse: nothing changes, no cut.
            for options in [
                &[1, 1, 1, 0][..],
                &[3, 0, 2, 4, 5, 180, 0, 0],
                &[3, 9, 1, 1],
            ] {
                let mut packet = tcp_packet(from, to, options, 0);
                let before = packet.clone();
                assert_eq!(raise_mss(&mut packet, MAX_PACKET, 1500), 0);
                assert_eq!(packet, before);
            }
        }
    }

    #[test]
    fn smoltcp_s_syn_ack_offers_the_device_s_mss() {
        let (from, to) = (
            "10.7.0.9:443".parse().unwrap(),
            "10.7.0.1:40000".parse().unwrap(),
        );
        let mut syn_ack = tcp_packet(from, to, &[2, 4, 0xff, 0xd7], 0);
        syn_ack[33] |= 0x02;
        let mut ack = syn_ack.clone();
        ack[33] &= !0x02;
        let before = ack.clone();
        lower_mss(&mut syn_ack, 1500);
        lower_mss(&mut ack, 1500);
        assert_eq!(mss_option(&syn_ack, 20), Some(1460));
        assert_eq!(ack, before, "only a SYN's MSS is lowered");
    }

    proptest! {
        #[test]
        fn raising_the_mss_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = raise_mss(&mut bytes, MAX_PACKET, 1500);
            lower_mss(&mut bytes, 1500);
        }
    }
}
