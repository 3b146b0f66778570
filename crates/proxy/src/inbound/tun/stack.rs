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

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Buf as _, Bytes};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpEndpoint, IpListenEndpoint};
use tokio::sync::{Notify, mpsc};
use tracing::{debug, info, warn};

use super::udp::UdpTable;
use super::{MAX_PACKET, Packet, PacketIo, TunLimits, classify};
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
    /// Packets neither TCP nor UDP (ICMP, fragments, malformed), dropped.
    pub other_dropped: AtomicU64,
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
    /// When the SYN came, until the handshake is done.
    opening: Option<Instant>,
    /// Set once the handshake is done.
    flow: Option<Flow>,
    /// The time (µs since the stack started) registered for it in [`Stack::timers`].
    deadline: Option<i64>,
    /// In [`Stack::ready`] already.
    ready: bool,
}

/// smoltcp's view of the device for one interface: its packets in, everything out.
struct Link<'a> {
    rx: &'a mut VecDeque<Vec<u8>>,
    tx: &'a mut Vec<Vec<u8>>,
    mtu: usize,
}

struct RxToken(Vec<u8>);
struct TxToken<'a>(&'a mut Vec<Vec<u8>>);

impl phy::RxToken for RxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut packet = vec![0; len];
        let r = f(&mut packet);
        self.0.push(packet);
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
        Some((RxToken(packet), TxToken(self.tx)))
    }

    fn transmit(&mut self, _now: smoltcp::time::Instant) -> Option<TxToken<'_>> {
        Some(TxToken(self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = self.mtu;
        caps
    }
}

/// An interface in "any IP" mode (it answers for every destination address).
fn any_ip_interface(mtu: usize, tx: &mut Vec<Vec<u8>>) -> Interface {
    let mut config = Config::new(HardwareAddress::Ip);
    config.random_seed = rand::random();
    let mut rx = VecDeque::new();
    let mut link = Link {
        rx: &mut rx,
        tx,
        mtu,
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
    /// Packets for the device, from every interface.
    tx: Vec<Vec<u8>>,
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
}

impl<D: PacketIo + Send + Sync + 'static> Stack<D> {
    pub(super) fn new(
        io: Arc<D>,
        ctx: Arc<InboundContext>,
        limits: TunLimits,
        counters: Arc<TunCounters>,
    ) -> Self {
        let wake = Arc::new(Wake::default());
        let udp = UdpTable::new(
            ctx.clone(),
            counters.clone(),
            wake.notify.clone(),
            limits.mtu,
        );
        let mut tx = Vec::new();
        let stray = any_ip_interface(limits.mtu, &mut tx);
        Stack {
            io,
            ctx,
            counters,
            wake,
            start: Instant::now(),
            limits,
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
        }
    }

    /// µs since the stack started.
    fn now_us(&self) -> i64 {
        i64::try_from(self.start.elapsed().as_micros()).unwrap_or(i64::MAX)
    }

    pub(super) async fn run(mut self) {
        let mut buf = vec![0u8; MAX_PACKET];
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
            tokio::select! {
                r = io.recv(&mut buf) => match r {
                    Ok(n) => {
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
                () = tokio::time::sleep(delay) => {}
            }
            self.step();
        }
    }

    /// One packet from the device.
    fn on_packet(&mut self, packet: &[u8]) {
        match classify(packet) {
            Packet::Tcp { src, dst, syn } => {
                let id = match self.pairs.get(&(src, dst)) {
                    Some(&id) => id,
                    None if syn => match self.listen_for(src, dst) {
                        Some(id) => id,
                        None => return,
                    },
                    None => {
                        self.stray_rx.push_back(packet.to_vec());
                        return;
                    }
                };
                if let Some(conn) = self.conns.get_mut(&id) {
                    conn.rx.push_back(packet.to_vec());
                    mark_ready(&mut self.ready, conn, id);
                }
            }
            Packet::Udp { src, dst, payload } => self.udp.on_datagram(src, dst, payload),
            Packet::Other => {
                self.counters.other_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A connection whose socket listens on `dst` for the SYN from `src`; `None` when too many
    /// are open.
    fn listen_for(&mut self, src: SocketAddr, dst: SocketAddr) -> Option<u64> {
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
            iface: any_ip_interface(self.limits.mtu, &mut self.tx),
            sockets,
            handle,
            rx: VecDeque::new(),
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
                mtu: self.limits.mtu,
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
        for packet in self.tx.drain(..) {
            let _ = self.io.send(&packet);
        }
        for packet in self.udp.take_replies() {
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
        let mut link = Link {
            rx: &mut conn.rx,
            tx: &mut self.tx,
            mtu: self.limits.mtu,
        };
        conn.iface.poll(now, &mut link, &mut conn.sockets);
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
            // The second poll sends what the pump queued, an aborted socket's RST included.
            let mut link = Link {
                rx: &mut conn.rx,
                tx: &mut self.tx,
                mtu: self.limits.mtu,
            };
            conn.iface.poll(now, &mut link, &mut conn.sockets);
            open = conn.sockets.get::<tcp::Socket<'_>>(conn.handle).state() != tcp::State::Closed;
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
