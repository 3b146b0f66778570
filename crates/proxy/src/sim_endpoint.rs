//! The real session core as an endpoint of braid-testbed's deterministic simulator: the
//! [`braid_testbed::sim::Endpoint`] trait implemented for [`Session`], so `braid sim` and the
//! testbed's tests drive exactly the code the daemon runs (same scheduler, same per-path
//! congestion controller, same loss detection and reinjection).
//!
//! Simulated paths carry 1500-byte Ethernet frames: a QUIC DATAGRAM payload of
//! [`SIM_MAX_DATAGRAM_SIZE`] bytes (1500 − 20 IPv4 − 8 UDP − 72 bytes of QUIC short header,
//! frame header and AEAD tag, rounded down), so a real-time packet of 1250 bytes fits. Flow send
//! buffers and receive windows follow the simulator's `window_hint_bytes` (4 × the paths' total
//! rate × (largest RTT + 200 ms), 2 to 16 MiB; the session allocates a flow's buffer whole on
//! first use, so an oversized one costs time) unless the scenario sets `receive_buffer_bytes`.

use std::net::{Ipv4Addr, SocketAddr};

use braid_sched_core::{FlowId, PathId, Timestamp};
use braid_testbed::sim::{DataFrame, Endpoint, EndpointError, EndpointEvent, EndpointSetup, Side};

use crate::session::frame::{Frame, parse_packet};
use crate::session::{
    Event, FlowError, FlowKind, PathConfig, Role, Session, SessionConfig, Target,
};

/// Largest datagram a simulated path carries, bytes.
pub const SIM_MAX_DATAGRAM_SIZE: u16 = 1400;

/// The target every simulated flow names (TEST-NET-1, never connected to).
const SIM_TARGET: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 80);

fn err(e: impl std::fmt::Display) -> EndpointError {
    EndpointError(e.to_string())
}

/// The session configuration the simulator uses for one endpoint: flow buffers of
/// `window_hint_bytes`, the receive window limited to `receive_buffer_bytes` when set.
pub fn sim_session_config(
    receive_buffer_bytes: Option<u64>,
    window_hint_bytes: u64,
) -> SessionConfig {
    let buffer = window_hint_bytes.max(1);
    let window = receive_buffer_bytes.unwrap_or(buffer).max(1);
    SessionConfig {
        flow_send_buffer: buffer,
        flow_receive_window: window,
        // Session-wide credit is accounting only (buffers are per flow): never the limit here.
        session_receive_window: window.max(64 << 20),
        max_datagram_payload: usize::from(SIM_MAX_DATAGRAM_SIZE) - 100,
        max_sent_packets: 65_536,
        ..SessionConfig::default()
    }
}

impl Endpoint for Session {
    fn create(setup: &EndpointSetup) -> Result<Self, EndpointError> {
        let role = match setup.side {
            Side::Client => Role::Client,
            Side::Server => Role::Server,
        };
        let mut config = sim_session_config(setup.receive_buffer_bytes, setup.window_hint_bytes);
        if let Some(name) = &setup.congestion {
            config.congestion.algorithm = name.parse().map_err(err)?;
        }
        config.validate().map_err(err)?;
        let mut session = Session::new(config, role, setup.scheduler.build(), setup.now);
        let path = PathConfig {
            max_datagram_size: SIM_MAX_DATAGRAM_SIZE,
            ..PathConfig::default()
        };
        for i in 0..setup.paths {
            let id = u8::try_from(i)
                .map_err(|_| EndpointError(format!("path index {i} does not fit a path id")))?;
            if let Some(Some(name)) = setup.path_congestion.get(i) {
                let algorithm = name
                    .parse()
                    .map_err(|e| EndpointError(format!("path[{i}].congestion: {e}")))?;
                session.set_path_congestion(PathId(id), Some(algorithm));
            }
            session.add_path(PathId(id), path, setup.now).map_err(err)?;
        }
        Ok(session)
    }

    fn handle_datagram(
        &mut self,
        path: PathId,
        data: &[u8],
        now: Timestamp,
    ) -> Result<(), EndpointError> {
        Session::handle_datagram(self, path, data, now).map_err(err)
    }

    fn poll_transmit(&mut self, now: Timestamp, buf: &mut [u8]) -> Option<(PathId, usize)> {
        Session::poll_transmit(self, now, buf).map(|t| (t.path, t.len))
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        Session::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        Session::handle_timeout(self, now);
    }

    fn poll_event(&mut self) -> Option<EndpointEvent> {
        Session::poll_event(self).map(|e| match e {
            Event::FlowOpened { flow, kind, .. } => EndpointEvent::FlowOpened {
                flow,
                datagram: kind.is_datagram(),
            },
            Event::FlowReadable(f) => EndpointEvent::Readable(f),
            Event::FlowWritable(f) => EndpointEvent::Writable(f),
            Event::FlowFinished(f) => EndpointEvent::Finished(f),
            Event::DatagramReceived(f) => EndpointEvent::DatagramReceived(f),
            _ => EndpointEvent::Other,
        })
    }

    fn open_flow(&mut self, datagram: bool) -> Result<FlowId, EndpointError> {
        let kind = if datagram {
            FlowKind::Datagram
        } else {
            FlowKind::Stream
        };
        Session::open_flow(self, kind, Target::Addr(SIM_TARGET)).map_err(err)
    }

    fn write(&mut self, flow: FlowId, data: &[u8]) -> Result<usize, EndpointError> {
        Session::write(self, flow, data).map_err(err)
    }

    fn finish(&mut self, flow: FlowId) -> Result<(), EndpointError> {
        Session::finish(self, flow).map_err(err)
    }

    fn read(&mut self, flow: FlowId, out: &mut [u8]) -> Result<Option<usize>, EndpointError> {
        match Session::read(self, flow, out) {
            // The session forgets a flow once both sides are done, possibly on the read that
            // took its last bytes: to the reader it is finished and drained.
            Err(FlowError::UnknownFlow(_)) => Ok(None),
            other => other.map_err(err),
        }
    }

    fn send_datagram(
        &mut self,
        flow: FlowId,
        data: &[u8],
        budget_us: Option<u32>,
        now: Timestamp,
    ) -> Result<(), EndpointError> {
        Session::send_datagram(self, flow, data, budget_us, now).map_err(err)
    }

    fn recv_datagram(
        &mut self,
        flow: FlowId,
        out: &mut [u8],
    ) -> Result<Option<usize>, EndpointError> {
        Session::recv_datagram(self, flow, out).map_err(err)
    }

    fn inspect(packet: &[u8], mut visit: impl FnMut(DataFrame)) {
        let Ok((_, frames)) = parse_packet(packet) else {
            return;
        };
        for frame in frames {
            match frame {
                Ok(Frame::Stream {
                    flow, offset, data, ..
                }) if !data.is_empty() => {
                    visit(DataFrame::Stream {
                        flow,
                        offset,
                        len: data.len() as u64,
                    });
                }
                Ok(Frame::Datagram {
                    flow, seq, data, ..
                }) => {
                    visit(DataFrame::Datagram {
                        flow,
                        seq,
                        len: data.len() as u64,
                    });
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::congestion::CongestionAlgorithm;
    use braid_sched_core::{SchedulerConfig, SchedulerKind};

    #[test]
    fn the_congestion_controller_is_the_one_named_or_the_default() {
        let setup = |congestion: Option<&str>| EndpointSetup {
            side: Side::Client,
            scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
            paths: 2,
            receive_buffer_bytes: None,
            window_hint_bytes: 1 << 20,
            congestion: congestion.map(str::to_owned),
            path_congestion: Vec::new(),
            now: Timestamp::ZERO,
        };
        let algorithm = |session: &Session| {
            session
                .path_controller(PathId(1))
                .map(crate::session::congestion::AnyController::algorithm)
        };
        let bbr = <Session as Endpoint>::create(&setup(Some("bbr"))).unwrap();
        assert_eq!(algorithm(&bbr), Some(CongestionAlgorithm::Bbr));
        let olia = <Session as Endpoint>::create(&setup(Some("OLIA"))).unwrap();
        assert_eq!(algorithm(&olia), Some(CongestionAlgorithm::Olia));
        let default = <Session as Endpoint>::create(&setup(None)).unwrap();
        assert_eq!(algorithm(&default), Some(CongestionAlgorithm::Cubic));
        let err = <Session as Endpoint>::create(&setup(Some("vegas"))).unwrap_err();
        assert!(err.to_string().contains("`vegas`"), "{err}");
        // A path's own, on both ends, over the run's.
        for side in [Side::Client, Side::Server] {
            let own = EndpointSetup {
                side,
                path_congestion: vec![None, Some("bbr".into())],
                ..setup(Some("newreno"))
            };
            let s = <Session as Endpoint>::create(&own).unwrap();
            let runs = |p: u8| s.path_controller(PathId(p)).map(|c| c.algorithm());
            assert_eq!(
                (runs(0), runs(1)),
                (
                    Some(CongestionAlgorithm::NewReno),
                    Some(CongestionAlgorithm::Bbr)
                )
            );
        }
        let bad = EndpointSetup {
            path_congestion: vec![None, Some("vegas".into())],
            ..setup(None)
        };
        let err = <Session as Endpoint>::create(&bad).unwrap_err();
        assert!(err.to_string().starts_with("path[1].congestion: "), "{err}");
    }

    #[test]
    fn endpoints_build_and_inspect_their_own_packets() {
        let setup = |side| EndpointSetup {
            side,
            scheduler: SchedulerConfig::new(SchedulerKind::MinRtt),
            paths: 2,
            receive_buffer_bytes: None,
            window_hint_bytes: 1 << 20,
            congestion: None,
            path_congestion: Vec::new(),
            now: Timestamp::ZERO,
        };
        let mut client = <Session as Endpoint>::create(&setup(Side::Client)).unwrap();
        let flow = Endpoint::open_flow(&mut client, false).unwrap();
        assert_eq!(
            Endpoint::write(&mut client, flow, &[7; 3000]).unwrap(),
            3000
        );
        let mut buf = vec![0; 2000];
        let mut seen = Vec::new();
        while let Some((_, len)) = Endpoint::poll_transmit(&mut client, Timestamp::ZERO, &mut buf) {
            <Session as Endpoint>::inspect(&buf[..len], |f| seen.push(f));
        }
        let bytes: u64 = seen
            .iter()
            .map(|f| match f {
                DataFrame::Stream { len, .. } => *len,
                DataFrame::Datagram { .. } => 0,
            })
            .sum();
        assert_eq!(bytes, 3000);
        let mut none = true;
        <Session as Endpoint>::inspect(&[0xff, 1, 2], |_| none = false);
        assert!(none, "a packet that does not decode is skipped");
    }
}
