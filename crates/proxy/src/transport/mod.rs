//! The daemons' transport over quinn: path set-up ([`quic`]), the authenticated join
//! ([`join`]), the session driver task ([`driver`]) with its async flow handles ([`flow`]), the
//! client's links ([`client`]), the server's accept loop ([`server`]) and the status document
//! ([`status`]).

mod arena;
pub mod client;
pub mod driver;
pub mod flow;
mod ifwatch;
pub mod join;
pub mod quic;
pub mod relay;
pub mod server;
pub mod status;

pub use flow::{
    FlowHandle, FlowMsg, FlowReader, FlowWriter, OpenError, SessionGone, SessionHandle,
};
pub use status::{
    DaemonStatus, InboundStatus, LinkStatus, PathReport, QuicCounters, SessionCounters,
    SessionStatus,
};

/// The default per-flow receive window (`[session] flow_receive_window_kib` in both daemons'
/// files). 2 MiB covers the bandwidth-delay product plus cross-path reordering of links of some
/// 50 Mbit/s with 100+ ms of queueing (the session's 1 MiB default measured 81% of the link sum
/// over the emulated 30 + 20 Mbit/s links, 4 MiB 91%).
pub const DEFAULT_FLOW_RECEIVE_WINDOW: u64 = 2 << 20;

/// The smallest send buffer of a stream flow in the daemons.
pub const MIN_FLOW_SEND_BUFFER: u64 = 2 << 20;

/// The session limits both daemons use, with the configured per-flow receive window, longest
/// UDP payload and congestion controller. A flow's send buffer is 2 MiB, or the configured
/// window where that is larger: a sender has at most its buffer in flight, so the window the
/// peer grants is used only as far as the buffer holds it (60 MB through a 16 MiB window over a
/// 200 Mbit/s path of 200 ms RTT took 7.17 s with a 2 MiB buffer, 4.13 s with 16 MiB, in
/// virtual time: test `a_raised_window_raises_the_send_buffer_with_it`). Its rings are allocated at first use, so
/// memory grows with the flows that actually move data (1024 flows at most). All flows of a
/// session together may receive 32 MiB ahead of the application, or one flow window where that
/// is larger. A datagram may be the UDP payload with the longest SOCKS5 UDP header of an
/// address.
pub fn session_config(limits: &crate::config::SessionLimits) -> crate::session::SessionConfig {
    crate::session::SessionConfig {
        flow_send_buffer: limits.flow_receive_window.max(MIN_FLOW_SEND_BUFFER),
        flow_receive_window: limits.flow_receive_window,
        session_receive_window: limits.flow_receive_window.max(32 << 20),
        max_datagram_payload: limits.max_udp_payload + crate::inbound::socks5::MAX_REPLY,
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
    use crate::session::harness::{BulkWriter, CLIENT, Harness, LinkConfig, SERVER};
    use crate::session::{FlowKind, PathConfig, Target};
    use braid_sched_core::{SchedulerKind, Timestamp};

    /// Virtual seconds until `len` bytes uploaded through the daemons' session limits with a
    /// `window`-byte flow window have all been read at the server, over one 200 Mbit/s path of
    /// 100 ms one way.
    fn upload_seconds(window: u64, send_buffer: Option<u64>, len: u64) -> f64 {
        let mut config = session_config(&crate::config::SessionLimits {
            flow_receive_window: window,
            ..crate::config::SessionLimits::default()
        });
        if let Some(buffer) = send_buffer {
            config.flow_send_buffer = buffer;
        }
        let links = [LinkConfig::new(200.0, 100.0)];
        let mut h = Harness::new(
            3,
            config,
            SchedulerKind::MinRtt,
            &links,
            PathConfig::default(),
        );
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
        let (mut received, mut done_at) = (0u64, None);
        h.run_until(Timestamp::from_secs_f64(60.0), |h| {
            app.write(&mut h.endpoints[CLIENT]);
            let now = h.now();
            let server = &mut h.endpoints[SERVER];
            while server.poll_event().is_some() {}
            loop {
                match server.read(flow, &mut buf) {
                    Ok(Some(0)) | Err(_) => break,
                    Ok(Some(n)) => received += n as u64,
                    Ok(None) => {
                        done_at.get_or_insert(now);
                        break;
                    }
                }
            }
        });
        assert_eq!(received, len);
        done_at.expect("the upload ends").as_secs_f64()
    }

    /// A flow has at most its send buffer in flight: a window raised past the 2 MiB buffer
    /// must raise the buffer too, or the sender cannot use it (deterministic virtual time).
    #[test]
    fn a_raised_window_raises_the_send_buffer_with_it() {
        let limits = |kib: u64| crate::config::SessionLimits {
            flow_receive_window: kib << 10,
            ..crate::config::SessionLimits::default()
        };
        assert_eq!(session_config(&limits(64)).flow_send_buffer, 2 << 20);
        assert_eq!(session_config(&limits(2048)).flow_send_buffer, 2 << 20);
        assert_eq!(session_config(&limits(16384)).flow_send_buffer, 16 << 20);
        let len = 60_000_000;
        let held_back = upload_seconds(16 << 20, Some(2 << 20), len);
        let matched = upload_seconds(16 << 20, None, len);
        assert!(
            matched * 1.4 < held_back,
            "16 MiB window: {matched:.2} s with a matched buffer, {held_back:.2} s with 2 MiB"
        );
    }
}
