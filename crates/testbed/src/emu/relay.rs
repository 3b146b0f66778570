//! One emulated path: the UDP relay tasks around its two link models.
//!
//! A datagram from a client arrives at the path's listen socket, goes through the forward
//! [`Link`] at the current emulator time, and, when the model delivers it, is handed to the
//! clock for sending at its arrival time from that client's own upstream socket (one per client
//! address, connected to the server, so the server sees one peer per client). A datagram from
//! the server arrives at an upstream socket, goes through the reverse [`Link`] and is sent back
//! to its client from the listen socket. Every client of a path shares the path's two links,
//! as the users of one physical link would.
//!
//! At each of the path's `rebind_at` times every client mapping gets a new upstream socket (a
//! new source port as the server sees it, as a NAT that lost its mappings) and the old one is
//! closed, so what the server sends to the old address is lost. The clock looks the socket up
//! when it sends, so datagrams already queued on the forward link leave from the new one.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use braid_sched_core::Timestamp;
use portable_atomic::AtomicU64;
use tokio::net::UdpSocket;
use tokio::task::{AbortHandle, JoinSet};

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
    /// When every client mapping gets a new upstream socket, ascending.
    pub rebind_at: Vec<Timestamp>,
    /// Client mappings given a new upstream socket so far.
    pub rebinds: AtomicU64,
}

impl PathShared {
    pub fn new(
        index: usize,
        forward_addr: SocketAddr,
        forward: Link,
        reverse: Link,
        rebind_at: Vec<Timestamp>,
    ) -> Self {
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
            rebind_at,
            rebinds: AtomicU64::new(0),
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

/// The socket one client's datagrams leave from towards the server, connected to it. A
/// rebinding replaces it; the clock sends through [`Upstream::send`] at delivery time, so a
/// datagram queued before a rebinding leaves from the new socket, as a NAT rewrites the source
/// when it forwards.
#[derive(Debug)]
pub(crate) struct Upstream {
    socket: Mutex<std::net::UdpSocket>,
}

impl Upstream {
    fn new(socket: std::net::UdpSocket) -> Self {
        Upstream {
            socket: Mutex::new(socket),
        }
    }

    fn lock(&self) -> MutexGuard<'_, std::net::UdpSocket> {
        // Every change is one swap of the socket: a poisoned lock still holds a usable one.
        self.socket.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `data` to the server from the current socket.
    pub fn send(&self, data: &[u8]) -> std::io::Result<usize> {
        self.lock().send(data)
    }

    /// Puts `socket` in place of the current one, which is returned.
    fn replace(&self, socket: std::net::UdpSocket) -> std::net::UdpSocket {
        std::mem::replace(&mut *self.lock(), socket)
    }
}

/// One client's mapping: its upstream socket and the task receiving the server's replies on it.
struct Mapping {
    upstream: Arc<Upstream>,
    receiver: AbortHandle,
}

/// A UDP socket bound to `addr` with large buffers, as a std socket (non-blocking) and its
/// tokio twin sharing the same file description.
pub(crate) fn bind_udp(addr: SocketAddr) -> std::io::Result<(std::net::UdpSocket, UdpSocket)> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    // Best effort: the kernel caps the sizes at its limits.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    let std: std::net::UdpSocket = socket.into();
    let twin = std.try_clone()?;
    Ok((std, UdpSocket::from_std(twin)?))
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

/// Receives clients' datagrams on `listen` for ever, opening one upstream mapping per client,
/// and rebinds every mapping at the path's `rebind_at` times.
pub(crate) async fn listen_loop(
    path: Arc<PathShared>,
    clock: Arc<Clock>,
    listen_std: Arc<std::net::UdpSocket>,
    listen: UdpSocket,
) {
    let mut mappings: HashMap<SocketAddr, Mapping> = HashMap::new();
    let mut tasks = JoinSet::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut next_rebind = 0;
    let rebind_timer = tokio::time::sleep(until(&path, &clock, next_rebind));
    tokio::pin!(rebind_timer);
    loop {
        tokio::select! {
            received = listen.recv_from(&mut buf) => {
                let Ok((len, from)) = received else {
                    // ICMP errors surface as receive errors on Linux; they concern one peer only.
                    tokio::task::yield_now().await;
                    continue;
                };
                let upstream = match mappings.get(&from) {
                    Some(m) => m.upstream.clone(),
                    None => match open_mapping(&path, &clock, &listen_std, from, &mut tasks) {
                        Some(m) => {
                            let upstream = m.upstream.clone();
                            mappings.insert(from, m);
                            upstream
                        }
                        None => {
                            path.direction(0).received.overflow += 1;
                            continue;
                        }
                    },
                };
                relay(&path, &clock, 0, Target::Upstream(upstream), &buf[..len]);
            }
            () = &mut rebind_timer, if next_rebind < path.rebind_at.len() => {
                for (&client, mapping) in &mut mappings {
                    rebind(&path, &clock, &listen_std, client, mapping, &mut tasks);
                }
                next_rebind += 1;
                let at = tokio::time::Instant::now() + until(&path, &clock, next_rebind);
                rebind_timer.as_mut().reset(at);
            }
            // Reaps the receive tasks that rebinding aborted (the others run for ever).
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

/// How long until rebinding number `next` of `path` (zero when it is due or there is none).
fn until(path: &PathShared, clock: &Clock, next: usize) -> std::time::Duration {
    path.rebind_at
        .get(next)
        .map_or(std::time::Duration::ZERO, |&at| at - clock.now())
}

/// A new upstream socket towards the path's server: bound to an ephemeral loopback port and
/// connected.
fn connected_upstream(path: &PathShared) -> Option<(std::net::UdpSocket, UdpSocket)> {
    let local = match path.forward_addr.ip() {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 0),
    };
    let (std_socket, socket) = bind_udp(local).ok()?;
    std_socket.connect(path.forward_addr).ok()?;
    Some((std_socket, socket))
}

/// Binds and connects the upstream socket of a new client and starts its receive task; `None`
/// when the path has [`MAX_CLIENTS`] clients or the socket cannot be opened.
fn open_mapping(
    path: &Arc<PathShared>,
    clock: &Arc<Clock>,
    listen_std: &Arc<std::net::UdpSocket>,
    client: SocketAddr,
    tasks: &mut JoinSet<()>,
) -> Option<Mapping> {
    if path.clients.load(AtomicOrdering::Relaxed) >= MAX_CLIENTS {
        return None;
    }
    let (std_socket, socket) = connected_upstream(path)?;
    path.clients.fetch_add(1, AtomicOrdering::Relaxed);
    let receiver = spawn_receiver(path, clock, listen_std, client, socket, tasks);
    Some(Mapping {
        upstream: Arc::new(Upstream::new(std_socket)),
        receiver,
    })
}

/// Gives `client`'s mapping a new upstream socket and closes the old one: its receive task is
/// aborted (its twin of the socket closes with it), so replies to the old address are lost.
/// When no new socket can be opened the mapping keeps its old one (and is not counted).
fn rebind(
    path: &Arc<PathShared>,
    clock: &Arc<Clock>,
    listen_std: &Arc<std::net::UdpSocket>,
    client: SocketAddr,
    mapping: &mut Mapping,
    tasks: &mut JoinSet<()>,
) {
    // Bound before the old socket closes, so the new port cannot be the old one.
    let Some((std_socket, socket)) = connected_upstream(path) else {
        return;
    };
    mapping.receiver.abort();
    drop(mapping.upstream.replace(std_socket));
    mapping.receiver = spawn_receiver(path, clock, listen_std, client, socket, tasks);
    path.rebinds.fetch_add(1, AtomicOrdering::Relaxed);
}

/// Starts the task relaying what the server sends to `socket` back to `client`.
fn spawn_receiver(
    path: &Arc<PathShared>,
    clock: &Arc<Clock>,
    listen_std: &Arc<std::net::UdpSocket>,
    client: SocketAddr,
    socket: UdpSocket,
    tasks: &mut JoinSet<()>,
) -> AbortHandle {
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
    })
}
