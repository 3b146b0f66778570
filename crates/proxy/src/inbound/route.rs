//! The client's routes in force (`[[route]]`, see [`crate::config::route`]) and what they do
//! to the inbounds' flows: a stream whose destination a `direct` route matches is connected by
//! the client itself ([`crate::egress::spawn_direct`] on one end of a
//! [`crate::transport::pipe`]), one a `block` route matches is refused, and the rest go
//! through the session. A UDP association's datagrams each name their own destination, so
//! where a route could take some of them out of the session, the association's flow is a
//! router ([`spawn_udp_router`]) that sends each datagram the way its route says and brings
//! every answer back on the one flow.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use tokio::sync::watch;
use tracing::debug;

use super::dns_names::LearnedNames;
use super::socks5;
use super::socks5_server::unspecified;
mod index;

use crate::config::{Route, RouteAction};
use crate::session::{FlowKind, Target};
use crate::transport::flow::{FlowHandle, FlowMsg, FlowReader, FlowWriter, SessionHandle};
use crate::transport::pipe::pipe;
use crate::transport::status::RouteStatus;

/// The routes of one reading of the file, with what each has matched since.
#[derive(Debug, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
    index: index::Index,
    /// Some route lists `domains`.
    has_domains: bool,
    /// Some route is `direct` or `block`.
    diverts: bool,
    flows: Vec<AtomicU64>,
    datagrams: Vec<AtomicU64>,
}

/// Where a destination goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Way {
    /// Through the session, as a `server` route says.
    Server,
    /// Through the session, no route having matched (or directly, with `fallback = "direct"`,
    /// while there is no session to take it).
    Unrouted,
    /// From this host, bound to the device when one is named.
    Direct(Option<String>),
    /// Refused.
    Block,
}

impl RouteTable {
    fn new(routes: Vec<Route>) -> RouteTable {
        let zeros = || routes.iter().map(|_| AtomicU64::new(0)).collect();
        RouteTable {
            flows: zeros(),
            datagrams: zeros(),
            index: index::Index::new(&routes),
            has_domains: routes.iter().any(|r| !r.domains.is_empty()),
            diverts: routes.iter().any(|r| r.action != RouteAction::Server),
            routes,
        }
    }

    /// Whether some route lists `domains` (then the names DNS answers give addresses are worth
    /// learning, see [`super::dns_names`]).
    pub fn has_domains(&self) -> bool {
        self.has_domains
    }

    /// Whether some route takes destinations out of the session (`direct` or `block`).
    pub fn diverts(&self) -> bool {
        self.diverts
    }

    /// Where `target` goes (an address also matched by `learned`, the name a DNS answer gave
    /// it), counted as a stream flow (`datagram` false) or a datagram of the route that decided.
    pub fn way(&self, target: &Target, learned: Option<&str>, datagram: bool) -> Way {
        let Some(i) = self.index.find(&self.routes, target, learned) else {
            return Way::Unrouted;
        };
        let route = &self.routes[i];
        let count = if datagram {
            &self.datagrams
        } else {
            &self.flows
        };
        count[i].fetch_add(1, Ordering::Relaxed);
        match route.action {
            RouteAction::Server => Way::Server,
            RouteAction::Direct => Way::Direct(route.interface.clone()),
            RouteAction::Block => Way::Block,
        }
    }

    /// [`RouteTable::way`], an address matched also by the name `names` learned for it (looked
    /// up only when some route lists `domains`).
    pub fn way_for(&self, target: &Target, names: &LearnedNames, datagram: bool) -> Way {
        let learned = match target {
            Target::Addr(a) if self.has_domains => {
                names.name_of(a.ip(), tokio::time::Instant::now())
            }
            _ => None,
        };
        self.way(target, learned.as_deref(), datagram)
    }

    /// The routes and their counts, for `braid status`.
    pub fn status(&self) -> Vec<RouteStatus> {
        self.routes
            .iter()
            .enumerate()
            .map(|(i, r)| RouteStatus {
                index: i as u32,
                action: r.action.name().to_owned(),
                matches: r.summary(),
                flows: self.flows[i].load(Ordering::Relaxed),
                datagrams: self.datagrams[i].load(Ordering::Relaxed),
            })
            .collect()
    }
}

/// `fallback` (the client's file): whether destinations no route matches are connected
/// directly while there is no session to take them, and how many were.
#[derive(Debug, Default)]
pub struct Fallback {
    on: std::sync::atomic::AtomicBool,
    /// Stream flows connected directly so.
    pub flows: AtomicU64,
    /// Datagrams sent directly so.
    pub datagrams: AtomicU64,
}

impl Fallback {
    /// Off, or `direct` when `on`.
    pub fn new(on: bool) -> Fallback {
        let fallback = Fallback::default();
        fallback.set(on);
        fallback
    }

    /// Whether it is `direct`.
    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Puts `direct` (`on`) or none in force (a reload); true when that changed it.
    pub fn set(&self, on: bool) -> bool {
        self.on.swap(on, Ordering::Relaxed) != on
    }

    /// For `braid status`: the counts, while it is `direct`.
    pub fn status(&self) -> Option<crate::transport::status::FallbackStatus> {
        self.on().then(|| crate::transport::status::FallbackStatus {
            flows: self.flows.load(Ordering::Relaxed),
            datagrams: self.datagrams.load(Ordering::Relaxed),
        })
    }
}

/// The routes in force, replaced as a whole when the client reloads its file: a flow is routed
/// when it opens, a datagram when it is sent.
#[derive(Debug, Default)]
pub struct Routes(RwLock<Arc<RouteTable>>);

impl Routes {
    /// These routes, counts at zero.
    pub fn new(routes: Vec<Route>) -> Routes {
        Routes(RwLock::new(Arc::new(RouteTable::new(routes))))
    }

    /// The table in force.
    pub fn current(&self) -> Arc<RouteTable> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `routes` in force, counts at zero, unless they are the ones in force; true when
    /// they changed.
    pub fn replace(&self, routes: Vec<Route>) -> bool {
        let mut slot = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if slot.routes == routes {
            return false;
        }
        *slot = Arc::new(RouteTable::new(routes));
        true
    }
}

/// A stream flow to `target` connected from this host (bound to `device` when named): the
/// inbound's end; the verdict comes on it as it would from the server.
pub(crate) fn direct_stream(target: Target, device: Option<String>) -> FlowHandle {
    let (inbound, egress) = pipe();
    crate::egress::spawn_direct(egress, FlowKind::Stream, target, device);
    inbound
}

/// A UDP association's flow whose datagrams go each the way the routes in force say: the
/// inbound's end. Datagrams for the server go on a datagram flow of the session (opened at the
/// first one, and again on the next session), those of a `direct` route out of a UDP relay of
/// this host (one per device, opened at the first one, and again after its idle timeout), and
/// a `block` route's are dropped. Every answer comes back on the inbound's flow.
pub(crate) fn spawn_udp_router(
    session: watch::Receiver<Option<SessionHandle>>,
    routes: Arc<Routes>,
    names: Arc<LearnedNames>,
    fallback: Arc<Fallback>,
) -> FlowHandle {
    let (inbound, router) = pipe();
    tokio::spawn(udp_router(router, session, routes, names, fallback));
    inbound
}

/// One way out of a UDP router ([`Way::Server`] or a [`Way::Direct`]): the writer of its flow.
struct Exit {
    way: Way,
    writer: FlowWriter,
}

async fn udp_router(
    flow: FlowHandle,
    session: watch::Receiver<Option<SessionHandle>>,
    routes: Arc<Routes>,
    names: Arc<LearnedNames>,
    fallback: Arc<Fallback>,
) {
    let (to_app, mut from_app) = flow.split();
    let mut exits: Vec<Exit> = Vec::new();
    while let Some(msg) = from_app.recv().await {
        let datagram = match msg {
            FlowMsg::Datagram(d) => d,
            FlowMsg::Data(_) => continue,
            FlowMsg::Finished | FlowMsg::Reset(_) => break,
        };
        let Ok((target, _)) = socks5::parse_udp_datagram(&datagram) else {
            continue;
        };
        let mut way = routes.current().way_for(&target, &names, true);
        if way == Way::Block {
            continue;
        }
        if way == Way::Unrouted {
            // No session to take it (none, or one without a path past its first
            // SESSION_WAIT, as a stream flow would find): directly, with `fallback = "direct"`.
            let no_session = session.borrow().as_ref().is_none_or(|h| {
                !h.has_path() && h.started.elapsed() >= super::server::SESSION_WAIT
            });
            if no_session && fallback.on() {
                fallback.datagrams.fetch_add(1, Ordering::Relaxed);
                way = Way::Direct(None);
            } else {
                way = Way::Server;
            }
        }
        // An exit whose flow ended (the session's, or a relay idle too long) is opened again.
        for attempt in 0..2 {
            let at = match exits.iter().position(|e| e.way == way) {
                Some(at) => at,
                None => match open_exit(&way, &session, &to_app).await {
                    Some(writer) => {
                        exits.push(Exit {
                            way: way.clone(),
                            writer,
                        });
                        exits.len() - 1
                    }
                    None => break,
                },
            };
            if exits[at]
                .writer
                .send_datagram(datagram.clone())
                .await
                .is_ok()
            {
                break;
            }
            exits.swap_remove(at);
            if attempt == 1 {
                debug!(%target, "UDP router: no way out for a datagram");
            }
        }
    }
    for exit in exits {
        let _ = exit.writer.reset(0).await;
    }
}

/// Opens the exit `way` goes by and starts bringing its answers back to `to_app`.
async fn open_exit(
    way: &Way,
    session: &watch::Receiver<Option<SessionHandle>>,
    to_app: &FlowWriter,
) -> Option<FlowWriter> {
    let flow = match way {
        Way::Block => return None,
        Way::Server | Way::Unrouted => {
            let handle = session.borrow().clone()?;
            handle
                .open(FlowKind::Datagram, Target::Addr(unspecified()))
                .await
                .ok()?
        }
        Way::Direct(device) => {
            let (exit, egress) = pipe();
            crate::egress::spawn_direct(
                egress,
                FlowKind::Datagram,
                Target::Addr(unspecified()),
                device.clone(),
            );
            exit
        }
    };
    let (writer, reader) = flow.split();
    tokio::spawn(answers(reader, to_app.clone()));
    Some(writer)
}

/// Brings an exit's answers back to the application's flow until either ends.
async fn answers(mut from: FlowReader, to_app: FlowWriter) {
    while let Some(msg) = from.recv().await {
        match msg {
            FlowMsg::Datagram(d) => {
                if to_app.send_datagram(d).await.is_err() {
                    return;
                }
            }
            FlowMsg::Data(_) => {}
            FlowMsg::Finished | FlowMsg::Reset(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::config::{DomainPattern, PortRange};
    use bytes::Bytes;
    use std::net::SocketAddr;
    use std::time::Duration;
    use tokio::net::UdpSocket;

    /// A datagram as an association's flow carries it: the SOCKS5 UDP header naming `target`,
    /// then `payload`.
    pub(crate) fn datagram(target: &Target, payload: &[u8]) -> Bytes {
        let mut header = [0u8; socks5::MAX_REPLY];
        let n = socks5::encode_udp_header(target, &mut header).unwrap_or(0);
        let mut out = header[..n].to_vec();
        out.extend_from_slice(payload);
        Bytes::from(out)
    }

    fn route(action: RouteAction, networks: &[&str], ports: &[u16]) -> Route {
        Route {
            networks: networks.iter().map(|n| n.parse().unwrap()).collect(),
            ports: ports
                .iter()
                .map(|&p| PortRange { first: p, last: p })
                .collect(),
            ..Route::every(action)
        }
    }

    #[test]
    fn a_table_counts_what_each_route_decided_and_a_reload_starts_it_again() {
        let mut lan = route(RouteAction::Direct, &["192.168.0.0/16"], &[]);
        lan.domains = vec![DomainPattern {
            name: "lan".into(),
            below_only: false,
        }];
        let routes = Routes::new(vec![lan.clone(), route(RouteAction::Block, &[], &[25])]);
        let table = routes.current();
        assert!(table.diverts());
        let at = |s: &str| Target::Addr(s.parse::<SocketAddr>().unwrap());
        assert_eq!(
            table.way(&at("192.168.1.2:80"), None, false),
            Way::Direct(None)
        );
        assert_eq!(table.way(&at("203.0.113.1:25"), None, true), Way::Block);
        assert_eq!(
            table.way(&at("203.0.113.1:443"), None, false),
            Way::Unrouted
        );
        let status = table.status();
        assert_eq!((status[0].flows, status[0].datagrams), (1, 0));
        assert_eq!((status[1].flows, status[1].datagrams), (0, 1));
        assert_eq!(status[1].matches, "every destination, ports 25");
        assert!(!routes.replace(vec![lan.clone(), route(RouteAction::Block, &[], &[25])]));
        assert_eq!(
            routes.current().status()[0].flows,
            1,
            "the same routes keep their counts"
        );
        assert!(routes.replace(vec![route(RouteAction::Server, &[], &[])]));
        assert!(!routes.current().diverts());
        assert_eq!(routes.current().status()[0].flows, 0);
    }

    /// A UDP echo server on loopback; answers each datagram with `tag` then the payload.
    async fn echo(tag: &'static [u8]) -> SocketAddr {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let mut out = tag.to_vec();
                out.extend_from_slice(&buf[..n]);
                let _ = socket.send_to(&out, from).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_router_sends_direct_datagrams_itself_drops_blocked_ones_and_brings_answers_back() {
        let (a, b) = (echo(b"a:").await, echo(b"b:").await);
        let routes = Arc::new(Routes::new(vec![
            route(RouteAction::Block, &[], &[b.port()]),
            route(RouteAction::Direct, &["127.0.0.0/8"], &[]),
        ]));
        // No session at all: what goes direct does not need one.
        let (_slot, session) = watch::channel(None);
        let (writer, mut reader) = spawn_udp_router(
            session,
            routes.clone(),
            Default::default(),
            Default::default(),
        )
        .split();
        for (to, payload) in [(b, &b"blocked"[..]), (a, b"one"), (a, b"two")] {
            writer
                .send_datagram(datagram(&Target::Addr(to), payload))
                .await
                .unwrap();
        }
        let mut answers = Vec::new();
        while answers.len() < 2 {
            let msg = tokio::time::timeout(Duration::from_secs(5), reader.recv())
                .await
                .expect("an answer")
                .unwrap();
            let FlowMsg::Datagram(d) = msg else {
                panic!("{msg:?}")
            };
            let (from, n) = socks5::parse_udp_datagram(&d).unwrap();
            assert_eq!(from, Target::Addr(a));
            answers.push(d[n..].to_vec());
        }
        assert_eq!(answers, [b"a:one".to_vec(), b"a:two".to_vec()]);
        let nothing = tokio::time::timeout(Duration::from_millis(200), reader.recv()).await;
        assert!(
            nothing.is_err(),
            "the blocked datagram got no answer: {nothing:?}"
        );
        let status = routes.current().status();
        assert_eq!((status[0].datagrams, status[1].datagrams), (1, 2));
        writer.reset(0).await.unwrap();
    }

    /// The first message on a direct stream's inbound end: the connected marker or a reset.
    async fn first(target: &Target, device: Option<&str>) -> FlowMsg {
        let (_writer, mut reader) = direct_stream(target.clone(), device.map(Into::into)).split();
        tokio::time::timeout(Duration::from_secs(5), reader.recv())
            .await
            .expect("a verdict")
            .expect("a message")
    }

    #[tokio::test]
    async fn a_direct_stream_connects_from_its_interface_and_fails_without_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = Target::Addr(listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let _ = tokio::io::AsyncWriteExt::write_all(&mut s, b"hi").await;
            }
        });
        let connected =
            |m: &FlowMsg| matches!(m, FlowMsg::Data(d) if d[0] == crate::egress::CONNECTED);
        assert!(connected(&first(&target, None).await));
        let refused = first(&target, Some("braid-nodev9")).await;
        assert!(matches!(refused, FlowMsg::Reset(_)), "{refused:?}");
        // Binding to a device takes CAP_NET_RAW: checked where the test may.
        let permitted = tokio::net::TcpSocket::new_v4()
            .and_then(|s| s.bind_device(Some(b"lo")))
            .is_ok();
        if permitted {
            assert!(connected(&first(&target, Some("lo")).await));
        } else {
            eprintln!("no CAP_NET_RAW: the bound connection was not tried");
        }
    }

    /// Every task a router starts (its pipe, its exits' relays and answer tasks) ends with the
    /// association.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_router_leaves_no_task_behind() {
        let echo = echo(b"").await;
        let routes = Arc::new(Routes::new(vec![route(
            RouteAction::Direct,
            &["127.0.0.0/8"],
            &[],
        )]));
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        for i in 0..20u8 {
            let (_slot, session) = watch::channel(None);
            let router = spawn_udp_router(
                session,
                routes.clone(),
                Default::default(),
                Default::default(),
            );
            let (writer, mut reader) = router.split();
            writer
                .send_datagram(datagram(&Target::Addr(echo), &[i]))
                .await
                .unwrap();
            let answer = tokio::time::timeout(Duration::from_secs(5), reader.recv()).await;
            assert!(
                matches!(answer, Ok(Some(FlowMsg::Datagram(_)))),
                "{answer:?}"
            );
            writer.reset(0).await.unwrap();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tasks() > before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} tasks left of {before}",
                tasks()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
