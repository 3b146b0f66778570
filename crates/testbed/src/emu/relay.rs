//! One emulated path: the UDP relay tasks around its two link models.
//!
//! A datagram from a client arrives at the path's listen socket, goes through the forward
//! [`Link`] at the current emulator time, and, when the model delivers it, is handed to the
//! clock for sending at its arrival time from that client's own upstream socket (one per client
//! address, connected to the server, so the server sees one peer per client). A datagram from
//! the server arrives at an upstream socket, goes through the reverse [`Link`] and is sent back
//! to its client from the listen socket. Every client of a path shares the path's two links,
//! as the users of one physical link would.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::net::UdpSocket;
use tokio::task::JoinSet;

use super::clock::{Clock, DirIndex, Target};
use crate::link::{Link, LinkStats, Verdict};

/// Clients (distinct source addresses) one path relays for at most; datagrams from more are
/// dropped and counted.
pub const MAX_CLIENTS: usize = 256;

/// Socket buffer size asked for (the kernel may cap it), so bursts are shaped by the link
/// model, not lost in a socket.
const SOCKET_BUFFER: usize = 4 << 20;

/// Largest UDP payload.
const MAX_DATAGRAM: usize = 65_535;

/// Counters of one direction kept beside its link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiveCounters {
    /// Datagrams that arrived at the relay.
    pub packets: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Datagrams the link delivered but the clock had no room for ([`super::clock::MAX_PENDING`]),
    /// or from a client beyond [`MAX_CLIENTS`].
    pub overflow: u64,
}

#[derive(Debug)]
pub(crate) struct Direction {
    pub link: Link,
    pub received: ReceiveCounters,
}

/// What the relay tasks of one path share with the handle.
#[derive(Debug)]
pub(crate) struct PathShared {
    pub index: usize,
    pub forward_addr: SocketAddr,
    pub directions: [Mutex<Direction>; 2],
    pub clients: AtomicUsize,
}

impl PathShared {
    pub fn new(index: usize, forward_addr: SocketAddr, forward: Link, reverse: Link) -> Self {
        let dir = |link| {
            Mutex::new(Direction {
                link,
                received: ReceiveCounters::default(),
            })
        };
        PathShared {
            index,
            forward_addr,
            directions: [dir(forward), dir(reverse)],
            clients: AtomicUsize::new(0),
        }
    }

    pub fn direction(&self, dir: DirIndex) -> MutexGuard<'_, Direction> {
        // Each update is a single call into the link or a counter: a poisoned lock still holds
        // a consistent state.
        self.directions[dir & 1]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn link_stats(&self, dir: DirIndex) -> (LinkStats, ReceiveCounters) {
        let d = self.direction(dir);
        (d.link.stats(), d.received)
    }
}

/// IP and UDP header bytes counted on the wire for each datagram (the link serialises whole
/// IP packets, as netem on an interface does).
fn header_bytes(addr: SocketAddr) -> u32 {
    if addr.is_ipv4() { 28 } else { 48 }
}

/// A UDP socket bound to `addr` with large buffers, as a std socket (non-blocking) and its
/// tokio twin sharing the same file description.
pub(crate) fn bind_udp(addr: SocketAddr) -> std::io::Result<(Arc<std::net::UdpSocket>, UdpSocket)> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    // Best effort: the kernel caps the sizes at its limits.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    let std: std::net::UdpSocket = socket.into();
    let twin = std.try_clone()?;
    Ok((Arc::new(std), UdpSocket::from_std(twin)?))
}

/// Passes one datagram through direction `dir` of `path` and hands it to the clock.
fn relay(path: &PathShared, clock: &Clock, dir: DirIndex, target: Target, data: &[u8]) {
    let now = clock.now();
    let wire = data.len() as u32 + header_bytes(path.forward_addr);
    let verdict = {
        let mut d = path.direction(dir);
        d.received.packets += 1;
        d.received.bytes += data.len() as u64;
        d.link.enqueue(now, wire)
    };
    if let Verdict::Deliver { at } = verdict
        && !clock.schedule(at, path.index, dir, target, data)
    {
        path.direction(dir).received.overflow += 1;
    }
}

/// Receives clients' datagrams on `listen` for ever; spawns one upstream task per client.
pub(crate) async fn listen_loop(
    path: Arc<PathShared>,
    clock: Arc<Clock>,
    listen_std: Arc<std::net::UdpSocket>,
    listen: UdpSocket,
) {
    let mut upstreams: HashMap<SocketAddr, Arc<std::net::UdpSocket>> = HashMap::new();
    let mut tasks = JoinSet::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let Ok((len, from)) = listen.recv_from(&mut buf).await else {
            // ICMP errors surface as receive errors on Linux; they concern one peer only.
            tokio::task::yield_now().await;
            continue;
        };
        let upstream = match upstreams.get(&from) {
            Some(u) => u.clone(),
            None => match open_upstream(&path, &clock, &listen_std, from, &mut tasks) {
                Some(u) => {
                    upstreams.insert(from, u.clone());
                    u
                }
                None => {
                    path.direction(0).received.overflow += 1;
                    continue;
                }
            },
        };
        relay(&path, &clock, 0, Target::Upstream(upstream), &buf[..len]);
    }
}

/// Binds and connects the upstream socket of a new client and starts its receive task; `None`
/// when the path has [`MAX_CLIENTS`] clients or the socket cannot be opened.
fn open_upstream(
    path: &Arc<PathShared>,
    clock: &Arc<Clock>,
    listen_std: &Arc<std::net::UdpSocket>,
    client: SocketAddr,
    tasks: &mut JoinSet<()>,
) -> Option<Arc<std::net::UdpSocket>> {
    if path.clients.load(AtomicOrdering::Relaxed) >= MAX_CLIENTS {
        return None;
    }
    let local = match path.forward_addr.ip() {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 0),
    };
    let (std_socket, socket) = bind_udp(local).ok()?;
    std_socket.connect(path.forward_addr).ok()?;
    path.clients.fetch_add(1, AtomicOrdering::Relaxed);
    let (path, clock, back) = (path.clone(), clock.clone(), listen_std.clone());
    tasks.spawn(async move {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let Ok(len) = socket.recv(&mut buf).await else {
                // e.g. ECONNREFUSED while the server is not up yet: keep relaying.
                tokio::task::yield_now().await;
                continue;
            };
            let target = Target::Client(back.clone(), client);
            relay(&path, &clock, 1, target, &buf[..len]);
        }
    });
    Some(std_socket)
}
