//! The daemons' transport over quinn: path set-up ([`quic`]), the authenticated join
//! ([`join`]), the session driver task ([`driver`]) with its async flow handles ([`flow`]), the
//! client's links ([`client`]), the server's accept loop ([`server`]) and the status document
//! ([`status`]).

mod arena;
mod autolink;
pub mod budget;
pub mod client;
pub mod driver;
pub mod flow;
mod ifwatch;
pub mod join;
pub(crate) mod pipe;
pub mod quic;
pub mod relay;
pub mod server;
pub mod status;

pub use flow::{
    FlowHandle, FlowMsg, FlowReader, FlowWriter, OpenError, SessionGone, SessionHandle,
};
pub use status::{
    DaemonStatus, InboundStatus, LinkBudgetStatus, LinkPatternStatus, LinkStatus, PathReport,
    QuicCounters, RouteStatus, SessionCounters, SessionStatus,
};

/// The default per-flow receive window (`[session] flow_receive_window_kib` in both daemons'
/// files). 2 MiB covers the bandwidth-delay product plus cross-path reordering of links of some
/// 50 Mbit/s with 100+ ms of queueing (the session's 1 MiB default measured 81% of the link sum
/// over the emulated 30 + 20 Mbit/s links, 4 MiB 91%).
pub const DEFAULT_FLOW_RECEIVE_WINDOW: u64 = 2 << 20;

/// The default largest per-flow receive window (`[session] flow_receive_window_max_kib`): a
/// flow whose application keeps up grows its window from 2 MiB to this, enough for some
/// 300 Mbit/s over 200 ms of round trip.
pub const DEFAULT_FLOW_RECEIVE_WINDOW_MAX: u64 = 16 << 20;

/// The smallest send buffer of a stream flow in the daemons.
pub const MIN_FLOW_SEND_BUFFER: u64 = 2 << 20;

/// `addr` with an IPv4-mapped IPv6 address (what a dual-stack socket reports) as the IPv4
/// address it stands for, for logs and status.
pub(crate) fn canonical(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    std::net::SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// The session limits both daemons use, with the configured per-flow receive windows, longest
/// UDP payload and congestion controller.
///
/// A flow's receive window starts at the configured first window and doubles while its
/// application reads a whole window in less than two round trips, up to the configured largest
/// (the window is what a flow moves per round trip at most, so a fixed one holds a flow below
/// the bandwidth-delay product of a fast, long path; growing only when the reader keeps up, it
/// costs memory only where the flow uses it), and halves again when less than a window was read
/// in four round trips. A flow's send buffer is 2 MiB, or the first
/// window where that is larger, and grows as far as the peer's credit reaches, up to the largest
/// window: a sender has at most its buffer in flight, so a window larger than the buffer is used
/// only as far as the buffer holds it (60 MB through a 16 MiB window over a 200 Mbit/s path of
/// 200 ms RTT took 7.17 s with a 2 MiB buffer, 4.13 s with 16 MiB, in virtual time). Rings are
/// allocated at first use and grow with what they hold, so memory grows with the flows that
/// actually move data (1024 flows at most). All flows of a session together may receive
/// 32 MiB ahead of the application, or one largest flow window where that is larger. A
/// datagram may be the UDP payload with the longest SOCKS5 UDP header of an address.
pub fn session_config(limits: &crate::config::SessionLimits) -> crate::session::SessionConfig {
    let send_buffer = limits.flow_receive_window.max(MIN_FLOW_SEND_BUFFER);
    crate::session::SessionConfig {
        flow_send_buffer: send_buffer,
        flow_send_buffer_max: limits.flow_receive_window_max.max(send_buffer),
        flow_receive_window: limits.flow_receive_window,
        flow_receive_window_max: limits.flow_receive_window_max,
        session_receive_window: limits.flow_receive_window_max.max(32 << 20),
        max_datagram_payload: limits.max_udp_payload + crate::inbound::socks5::MAX_REPLY,
        idle_timeout: limits.idle_timeout,
        quiet_heartbeat_interval: limits.keepalive,
        backup_below_rate: limits.backup_below.unwrap_or(0),
        tell_backup_floor: limits.backup_below.is_some(),
        redundant: limits.redundant,
        congestion: crate::session::congestion::CongestionConfig {
            algorithm: limits.congestion,
            ..crate::session::congestion::CongestionConfig::default()
        },
        ..crate::session::SessionConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SessionLimits;
    use crate::session::congestion::CongestionAlgorithm;
    use crate::session::harness::{BulkWriter, CLIENT, Harness, LinkConfig, SERVER};
    use crate::session::{FlowKind, PathConfig, SessionConfig, Target};
    use braid_sched_core::{SchedulerKind, Timestamp};

    /// What one upload did.
    #[derive(Debug)]
    struct Upload {
        /// Virtual seconds until every byte was read at the server.
        seconds: f64,
        /// The flow's receive window at the server at the end.
        window: u64,
        /// Its largest receive window.
        largest_window: u64,
        /// The most bytes the client's send buffer held.
        send_buffered: u64,
        /// The client's and the server's session memory at the last read, bytes.
        memory_at_end: u64,
        /// The client's window cuts for a queue that held the flow back, per path.
        penalties: Vec<u64>,
        /// The client's packets declared lost, per path.
        lost: Vec<u64>,
    }

    /// Uploads `len` bytes under `config` over one 200 Mbit/s path of 100 ms one way, the
    /// server's application reading as fast as the bytes come, or with `paced: Some((rate,
    /// from))` at most `rate` bytes per second from `from` seconds on.
    fn upload(config: SessionConfig, len: u64, paced: Option<(f64, f64)>) -> Upload {
        let links = [LinkConfig::new(200.0, 100.0)];
        upload_over(&links, SchedulerKind::MinRtt, config, len, paced)
    }

    /// As [`upload`], over `links`, each end scheduling with `scheduler`.
    fn upload_over(
        links: &[LinkConfig],
        scheduler: SchedulerKind,
        config: SessionConfig,
        len: u64,
        paced: Option<(f64, f64)>,
    ) -> Upload {
        let mut h = Harness::new(3, config, scheduler, links, PathConfig::default());
        let target = Target::Domain {
            name: "bulk.example".into(),
            port: 443,
        };
        let flow = h
            .client()
            .open_flow(FlowKind::Stream, target)
            .expect("open");
        let mut app = BulkWriter::new(flow, len, 64 * 1024);
        let mut buf = vec![0u8; 256 * 1024];
        let (mut received, mut done_at, mut window) = (0u64, None, 0);
        let (mut send_buffered, mut tokens, mut paced_at) = (0, 0.0, Timestamp::ZERO);
        let (mut largest_window, mut memory_at_end) = (0, 0);
        h.run_until(Timestamp::from_secs_f64(60.0), |h| {
            app.write(&mut h.endpoints[CLIENT]);
            let client = h.endpoints[CLIENT].memory_usage();
            send_buffered = send_buffered.max(client.send_buffered);
            let now = h.now();
            let server = &mut h.endpoints[SERVER];
            while server.poll_event().is_some() {}
            loop {
                // A paced reader takes at most a quarter second's worth at once (a token bucket:
                // it reads only at the simulation's events).
                let read_rate = paced.filter(|&(_, from)| now.as_secs_f64() >= from);
                let allowed = read_rate.map_or(u64::MAX, |(rate, _)| {
                    let elapsed = (now - std::mem::replace(&mut paced_at, now)).as_secs_f64();
                    tokens = (tokens + elapsed * rate).min(rate / 4.0);
                    tokens as u64
                });
                let take = allowed.min(buf.len() as u64) as usize;
                if take == 0 {
                    break;
                }
                window = server.flow_receive_window(flow).unwrap_or(window);
                largest_window = largest_window.max(window);
                match server.read(flow, &mut buf[..take]) {
                    Ok(Some(0)) | Err(_) => break,
                    Ok(Some(n)) => {
                        received += n as u64;
                        tokens -= n as f64;
                        memory_at_end = server.memory_usage().allocated + client.allocated;
                    }
                    Ok(None) => {
                        done_at.get_or_insert(now);
                        break;
                    }
                }
            }
        });
        assert_eq!(received, len);
        let now = h.now();
        let stats: Vec<_> = h.client().path_status(now).map(|p| p.stats).collect();
        Upload {
            seconds: done_at.expect("the upload ends").as_secs_f64(),
            window,
            largest_window,
            send_buffered,
            memory_at_end,
            penalties: stats.iter().map(|s| s.penalties).collect(),
            lost: stats.iter().map(|s| s.packets_lost).collect(),
        }
    }

    /// The daemons' session limits with a first window of `kib` KiB growing to `max_kib`.
    fn limits(kib: u64, max_kib: u64) -> SessionLimits {
        SessionLimits {
            flow_receive_window: kib << 10,
            flow_receive_window_max: max_kib << 10,
            ..SessionLimits::default()
        }
    }

    /// A slow path whose queue holds seconds of data (1 Mbit/s, 300 packets) beside a fast one
    /// (30 Mbit/s): what the fast path brings waits in the flow's window for the bytes queued on
    /// the slow one. The slow path's window is cut while its queue holds the flow back
    /// (`Session::penalise_blocking_path`), and the two paths together stay near the fast one
    /// alone. Without the cut minRTT took 15.5 s (13.5 s beside 2 Mbit/s) against 8.13 s alone,
    /// and ECF 8.52 s (`docs/congestion.md`, *A slow link's queue*).
    #[test]
    fn a_slow_deeply_queued_path_does_not_hold_the_fast_one_back() {
        let fast = LinkConfig::new(30.0, 10.0);
        let len = 30_000_000;
        let config = session_config(&SessionLimits::default());
        let alone = upload_over(
            std::slice::from_ref(&fast),
            SchedulerKind::MinRtt,
            config.clone(),
            len,
            None,
        );
        for rate in [1.0, 2.0] {
            let mut slow = LinkConfig::new(rate, 20.0);
            slow.queue_packets = 300;
            for scheduler in [SchedulerKind::MinRtt, SchedulerKind::Ecf] {
                let links = [fast.clone(), slow.clone()];
                let both = upload_over(&links, scheduler, config.clone(), len, None);
                println!(
                    "30 MB beside {rate} Mbit/s, {scheduler:?}: {:.2} s against {:.2} s over \
                     the fast path alone; window cuts per path {:?}",
                    both.seconds, alone.seconds, both.penalties
                );
                assert!(
                    both.seconds < alone.seconds * 1.15,
                    "{scheduler:?} beside {rate} Mbit/s: {both:?}, alone {alone:?}"
                );
                assert!(both.penalties[0] == 0 && both.penalties[1] > 0, "{both:?}");
            }
        }
    }

    /// Slow start slows down when the RTT rises (HyStart++, RFC 9406), not only when a deep
    /// queue overflows: a 10 MB upload over 30 Mbit/s with 10 ms one way and a 300-packet queue
    /// (96 ms at that rate). Without HyStart++ CUBIC lost 520 packets and NewReno 367, in one
    /// burst at the end of slow start; with it 97 and 91, late in its conservative phase (it
    /// began at 174 packets of window, the path holding 362).
    #[test]
    fn slow_start_stops_before_a_deep_queue_overflows() {
        let mut link = LinkConfig::new(30.0, 10.0);
        link.queue_packets = 300;
        for algorithm in [CongestionAlgorithm::Cubic, CongestionAlgorithm::NewReno] {
            let limits = SessionLimits {
                congestion: algorithm,
                ..SessionLimits::default()
            };
            let up = upload_over(
                std::slice::from_ref(&link),
                SchedulerKind::MinRtt,
                session_config(&limits),
                10_000_000,
                None,
            );
            println!(
                "{algorithm}: 10 MB in {:.3} s, {} packets lost",
                up.seconds, up.lost[0]
            );
            assert!(up.lost[0] < 150, "{algorithm}: {up:?}");
        }
    }

    /// `[session] idle_timeout_s` is the session's idle timeout.
    #[test]
    fn the_idle_timeout_reaches_the_session() {
        let limits = SessionLimits {
            idle_timeout: std::time::Duration::from_secs(300),
            ..SessionLimits::default()
        };
        assert_eq!(session_config(&limits).idle_timeout.as_secs(), 300);
        assert_eq!(
            session_config(&SessionLimits::default()).idle_timeout,
            SessionConfig::default().idle_timeout
        );
    }

    /// A flow has at most its send buffer in flight: a window raised past the 2 MiB buffer
    /// must raise the buffer too, or the sender cannot use it (deterministic virtual time).
    #[test]
    fn a_raised_window_raises_the_send_buffer_with_it() {
        assert_eq!(session_config(&limits(64, 64)).flow_send_buffer, 2 << 20);
        assert_eq!(
            session_config(&limits(2048, 2048)).flow_send_buffer,
            2 << 20
        );
        let fixed = session_config(&limits(16384, 16384));
        assert_eq!(
            (fixed.flow_send_buffer, fixed.flow_send_buffer_max),
            (16 << 20, 16 << 20)
        );
        let len = 60_000_000;
        let held_back = upload(
            SessionConfig {
                flow_send_buffer: 2 << 20,
                flow_send_buffer_max: 2 << 20,
                ..fixed.clone()
            },
            len,
            None,
        );
        let matched = upload(fixed, len, None);
        assert!(
            matched.seconds * 1.4 < held_back.seconds,
            "16 MiB window: {matched:?} with a matched buffer, {held_back:?} with 2 MiB"
        );
    }

    /// With the default limits a flow's window and send buffer grow from 2 MiB as far as a
    /// long fast path needs (an upload as quick as with 16 MiB fixed on both ends, much quicker
    /// than with 2 MiB fixed), while a flow whose reader is slower than the path keeps both at
    /// 2 MiB, and one whose reader slows down after its window grew goes back to 2 MiB and
    /// gives the memory back (deterministic virtual time).
    #[test]
    fn windows_grow_only_for_a_flow_that_uses_them() {
        let defaults = session_config(&SessionLimits::default());
        assert_eq!(
            (
                defaults.flow_receive_window,
                defaults.flow_receive_window_max
            ),
            (2 << 20, 16 << 20)
        );
        let len = 60_000_000;
        let fixed_small = upload(session_config(&limits(2048, 2048)), len, None);
        let fixed_large = upload(session_config(&limits(16384, 16384)), len, None);
        let growing = upload(defaults.clone(), len, None);
        assert_eq!(fixed_small.window, 2 << 20);
        assert_eq!(growing.window, 16 << 20, "{growing:?}");
        assert!(
            growing.seconds * 1.4 < fixed_small.seconds
                && growing.seconds < fixed_large.seconds * 1.15,
            "growing {growing:?}, 2 MiB fixed {fixed_small:?}, 16 MiB fixed {fixed_large:?}"
        );
        // A reader paced at 20 Mbit/s, a tenth of the path (it reads only at the simulation's
        // events, so less on average): a 2 MiB window takes it over two round trips to read.
        let slow = upload(defaults.clone(), 10_000_000, Some((2.5e6, 0.0)));
        assert!(slow.seconds > 4.0, "{slow:?}");
        assert_eq!(slow.window, 2 << 20, "{slow:?}");
        assert!(slow.send_buffered <= 2 << 20, "{slow:?}");
        // A reader that keeps up for 2 s, then slows to 20 Mbit/s: the window grew, and falls
        // back to 2 MiB, and the buffers grown for it are given back.
        let slowed = upload(defaults, 60_000_000, Some((2.5e6, 3.0)));
        assert_eq!(slowed.largest_window, 16 << 20, "{slowed:?}");
        assert_eq!(slowed.window, 2 << 20, "{slowed:?}");
        assert!(
            slowed.memory_at_end < slow.memory_at_end + (2 << 20)
                && slowed.memory_at_end + (8 << 20) < growing.memory_at_end,
            "memory at the last read: slowed {slowed:?}, never grown {slow:?}, grown {growing:?}"
        );
    }
}
