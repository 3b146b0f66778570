//! The TUN inbound's TCP side: a smoltcp interface in "any IP" mode terminates every TCP
//! connection an application opens through the device. A SYN to a new address and port gets a
//! listening socket for exactly that endpoint before the stack sees it; once the handshake is
//! done, the connection is handed to a task that opens a stream flow to that endpoint and moves
//! bytes between the flow and the stack through two small bounded channels. Backpressure holds
//! both ways: the stack reads from a socket only while its channel to the flow has room (the
//! application then sees TCP's window close), and the flow's task waits while the socket's send
//! buffer and the channel to the stack are full.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf as _, Bytes};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpEndpoint, IpListenEndpoint};
use tokio::sync::{Notify, mpsc};
use tracing::{debug, info, warn};

use super::udp::UdpTable;
use super::{MAX_PACKET, MAX_TCP, Packet, PacketIo, classify};
use crate::inbound::server::InboundContext;
use crate::session::Target;
use crate::transport::flow::FlowMsg;

/// Each TCP socket's receive and send buffers. The application is on this machine, microseconds
/// away, so a small window keeps it busy; [`MAX_TCP`] connections hold at most 128 MiB of them.
const SOCKET_BUFFER: usize = 64 * 1024;
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
    /// SYNs dropped because [`MAX_TCP`] connections were open.
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

/// A connection handed to a flow.
#[derive(Debug)]
struct Conn {
    /// The SYN's (source, destination).
    pair: (SocketAddr, SocketAddr),
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

/// smoltcp's view of the device: packets queued in memory either way.
#[derive(Debug, Default)]
struct Queues {
    rx: std::collections::VecDeque<Vec<u8>>,
    tx: Vec<Vec<u8>>,
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

impl phy::Device for Queues {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: smoltcp::time::Instant) -> Option<(RxToken, TxToken<'_>)> {
        let packet = self.rx.pop_front()?;
        Some((RxToken(packet), TxToken(&mut self.tx)))
    }

    fn transmit(&mut self, _now: smoltcp::time::Instant) -> Option<TxToken<'_>> {
        Some(TxToken(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = self.mtu;
        caps
    }
}

pub(super) struct Stack<D> {
    io: Arc<D>,
    ctx: Arc<InboundContext>,
    counters: Arc<TunCounters>,
    notify: Arc<Notify>,
    start: Instant,
    queues: Queues,
    iface: Interface,
    sockets: SocketSet<'static>,
    /// Sockets made for a SYN, not yet connected: the SYN's (source, destination) and when.
    opening: HashMap<SocketHandle, ((SocketAddr, SocketAddr), Instant)>,
    /// The (source, destination) pairs of `opening` and `conns`, so a repeated SYN makes no
    /// second socket.
    pairs: HashSet<(SocketAddr, SocketAddr)>,
    conns: HashMap<SocketHandle, Conn>,
    udp: UdpTable,
}

impl<D: PacketIo + Send + Sync + 'static> Stack<D> {
    pub(super) fn new(
        io: Arc<D>,
        ctx: Arc<InboundContext>,
        mtu: usize,
        counters: Arc<TunCounters>,
    ) -> Self {
        let mut queues = Queues {
            mtu,
            ..Queues::default()
        };
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = rand::random();
        let mut iface = Interface::new(config, &mut queues, smoltcp::time::Instant::ZERO);
        iface.set_any_ip(true);
        let notify = Arc::new(Notify::new());
        let udp = UdpTable::new(ctx.clone(), counters.clone(), notify.clone(), mtu);
        Stack {
            io,
            ctx,
            counters,
            notify,
            start: Instant::now(),
            queues,
            iface,
            sockets: SocketSet::new(Vec::new()),
            opening: HashMap::new(),
            pairs: HashSet::new(),
            conns: HashMap::new(),
            udp,
        }
    }

    fn now(&self) -> smoltcp::time::Instant {
        let micros = i64::try_from(self.start.elapsed().as_micros()).unwrap_or(i64::MAX);
        smoltcp::time::Instant::from_micros(micros)
    }

    pub(super) async fn run(mut self) {
        let mut buf = vec![0u8; MAX_PACKET];
        loop {
            let now = self.now();
            let delay = self
                .iface
                .poll_delay(now, &self.sockets)
                .map_or(Duration::from_secs(1), |d| {
                    Duration::from_micros(d.total_micros()).min(Duration::from_secs(1))
                });
            let io = self.io.clone();
            let notify = self.notify.clone();
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
                if syn && !self.pairs.contains(&(src, dst)) && !self.listen_for(src, dst) {
                    return;
                }
                self.queues.rx.push_back(packet.to_vec());
            }
            Packet::Udp { src, dst, payload } => self.udp.on_datagram(src, dst, payload),
            Packet::Other => {
                self.counters.other_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Makes a socket listen on `dst` for the SYN from `src`; false when too many are open.
    fn listen_for(&mut self, src: SocketAddr, dst: SocketAddr) -> bool {
        if self.opening.len() + self.conns.len() >= MAX_TCP {
            self.counters.tcp_refused.fetch_add(1, Ordering::Relaxed);
            debug!(%src, %dst, "TUN inbound: too many TCP connections, SYN dropped");
            return false;
        }
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
        );
        socket.set_nagle_enabled(false);
        let endpoint = IpListenEndpoint {
            addr: Some(dst.ip().into()),
            port: dst.port(),
        };
        if socket.listen(endpoint).is_err() {
            return false;
        }
        let handle = self.sockets.add(socket);
        self.opening.insert(handle, ((src, dst), Instant::now()));
        self.pairs.insert((src, dst));
        true
    }

    /// Runs the stack: packets in, connections handed over, bytes moved, packets out.
    fn step(&mut self) {
        let now = self.now();
        self.iface.poll(now, &mut self.queues, &mut self.sockets);
        self.hand_over();
        let closed = self.pump();
        // The second poll sends what the pump queued, an aborted socket's RST included, so the
        // closed sockets are removed only after it.
        self.iface.poll(now, &mut self.queues, &mut self.sockets);
        for handle in closed {
            // Dropping the channels ends the connection's task (a flow not finished is reset).
            if let Some(conn) = self.conns.remove(&handle) {
                self.pairs.remove(&conn.pair);
            }
            self.sockets.remove(handle);
        }
        for packet in self.queues.tx.drain(..) {
            let _ = self.io.send(&packet);
        }
        for packet in self.udp.take_replies() {
            let _ = self.io.send(&packet);
        }
    }

    /// Connections whose handshake is done go to a flow; stale listeners are removed.
    fn hand_over(&mut self) {
        let mut done = Vec::new();
        for (&handle, &(pair, since)) in &self.opening {
            let socket = self.sockets.get_mut::<tcp::Socket<'_>>(handle);
            match socket.state() {
                tcp::State::Listen | tcp::State::SynReceived if since.elapsed() < HANDSHAKE => {}
                tcp::State::Listen | tcp::State::SynReceived | tcp::State::Closed => {
                    done.push((handle, pair, false));
                }
                _ => done.push((handle, pair, true)),
            }
        }
        for (handle, pair, connected) in done {
            self.opening.remove(&handle);
            let socket = self.sockets.get_mut::<tcp::Socket<'_>>(handle);
            let target = socket.local_endpoint().map(endpoint_addr);
            let Some(target) = target.filter(|_| connected) else {
                self.pairs.remove(&pair);
                self.sockets.remove(handle);
                continue;
            };
            let (up_tx, up_rx) = mpsc::channel(CHANNEL);
            let (down_tx, down_rx) = mpsc::channel(CHANNEL);
            self.counters
                .tcp_connections
                .fetch_add(1, Ordering::Relaxed);
            tokio::spawn(relay(
                self.ctx.clone(),
                pair.0,
                target,
                up_rx,
                down_tx,
                self.notify.clone(),
            ));
            self.conns.insert(
                handle,
                Conn {
                    pair,
                    up: up_tx,
                    down: down_rx,
                    pending: Bytes::new(),
                    fin_up: false,
                    down_done: false,
                    close_wanted: false,
                },
            );
        }
    }

    /// Moves bytes between every connection's socket and its flow task; the connections whose
    /// socket is closed.
    fn pump(&mut self) -> Vec<SocketHandle> {
        let mut closed = Vec::new();
        for (&handle, conn) in &mut self.conns {
            let socket = self.sockets.get_mut::<tcp::Socket<'_>>(handle);
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
            // The application's FIN: its state says so (smoltcp's `may_recv` is also false
            // after a reset, which must not look like a FIN).
            let fin_received = matches!(
                socket.state(),
                tcp::State::CloseWait
                    | tcp::State::LastAck
                    | tcp::State::Closing
                    | tcp::State::TimeWait
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
            if socket.state() == tcp::State::Closed {
                closed.push(handle);
            }
        }
        closed
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
    notify: Arc<Notify>,
) {
    let (writer, mut reader, first) = match ctx.connect(Target::Addr(target)).await {
        Ok(flow) => flow,
        Err(reply) => {
            info!(%app, %target, reason = reply.name(), "TUN inbound: connection refused");
            let _ = down.send(Down::Reset).await;
            notify.notify_one();
            return;
        }
    };
    let downward = async {
        if !first.is_empty() {
            if down.send(Down::Data(first)).await.is_err() {
                return;
            }
            notify.notify_one();
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
            notify.notify_one();
            if end {
                return;
            }
        }
        // The session is gone.
        let _ = down.send(Down::Reset).await;
        notify.notify_one();
    };
    let upward = async {
        while let Some(msg) = up.recv().await {
            // The stack may have held bytes back for want of room in this channel.
            notify.notify_one();
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
