//! The driver's contribution to `braid status`: per-path figures from the session and the
//! connections, and throughput over the last second.

use braid_sched_core::PathState;

use super::Driver;
use crate::session::Role;
use crate::transport::status::{BbrReport, CoupledReport, PathReport, QuicCounters, SessionStatus};

impl Driver {
    pub(super) fn update_rates(&mut self) {
        let now = self.now();
        let stats: Vec<_> = self
            .session
            .path_status(now)
            .map(|s| (s.view.id, s.stats.bytes_sent))
            .collect();
        for (id, sent) in stats {
            if let Some(p) = self.paths[id.index()].as_mut() {
                p.send_mbps = (sent.saturating_sub(p.last_sent)) as f64 * 8.0 / 1e6;
                p.recv_mbps = (p.recv_bytes.saturating_sub(p.last_recv)) as f64 * 8.0 / 1e6;
                p.last_sent = sent;
                p.last_recv = p.recv_bytes;
            }
        }
    }

    pub(super) fn status(&mut self) -> SessionStatus {
        let now = self.now();
        let mut paths = Vec::new();
        let views: Vec<_> = self.session.path_status(now).collect();
        for s in views {
            let v = s.view;
            let Some(p) = self.paths[v.id.index()].as_ref() else {
                continue;
            };
            let state = match v.state {
                PathState::Active => "active",
                PathState::Backup => "backup",
                PathState::Failed => "failed",
            };
            paths.push(PathReport {
                id: v.id.0,
                name: p.name.clone(),
                remote: crate::transport::canonical(p.conn.remote_address()).to_string(),
                state: state.to_owned(),
                potentially_failed: v.potentially_failed,
                degraded: v.degraded,
                srtt_ms: f64::from(v.srtt_us) / 1e3,
                rttvar_ms: f64::from(v.rttvar_us) / 1e3,
                min_rtt_ms: f64::from(v.min_rtt_us) / 1e3,
                cwnd: v.cwnd,
                bytes_in_flight: v.bytes_in_flight,
                loss_rate: v.loss_rate,
                delivery_mbps: v.delivery_rate as f64 * 8.0 / 1e6,
                send_mbps: p.send_mbps,
                recv_mbps: p.recv_mbps,
                packets_sent: s.stats.packets_sent,
                packets_received: s.stats.packets_received,
                packets_lost: s.stats.packets_lost,
                spurious_losses: s.reordering.spurious_losses,
                undone_reductions: s.reordering.undone_reductions,
                packet_threshold: s.reordering.packet_threshold,
                time_slack_ms: s.reordering.time_slack.as_secs_f64() * 1e3,
                penalties: s.stats.penalties,
                failures: s.stats.failures,
                max_datagram_size: v.max_datagram_size,
                quic: QuicCounters::of(&p.conn),
                congestion: self
                    .session
                    .path_controller(v.id)
                    .map_or_else(String::new, |cc| cc.algorithm().name().to_owned()),
                rate_cap_mbps: self
                    .session
                    .path_rate_cap(v.id)
                    .map(|r| r as f64 * 8.0 / 1e6),
                bbr: self.session.path_controller(v.id).and_then(BbrReport::of),
                coupled: self
                    .session
                    .path_controller(v.id)
                    .and_then(CoupledReport::of),
            });
        }
        let mut counters = self.counters.clone();
        let memory = self.session.memory_usage();
        counters.flows_open = memory.flows;
        counters.flows_redundant = memory.redundant_flows;
        counters.redundant_capped = self.session.redundant_capped();
        counters.send_buffered_bytes = memory.send_buffered;
        counters.receive_buffered_bytes = memory.receive_buffered;
        counters.memory_bytes = memory.allocated;
        counters.largest_flow_window = self.session.largest_flow_window();
        counters.datagrams_dropped = self.session.datagrams_dropped();
        counters.datagrams_split = self.session.datagrams_split();
        counters.datagrams_reassembled = self.session.datagrams_reassembled();
        counters.packets_refused = self.session.packets_refused();
        SessionStatus {
            session: self.label.clone(),
            user: self.user.clone(),
            role: match self.session.role() {
                Role::Client => "client".to_owned(),
                Role::Server => "server".to_owned(),
            },
            scheduler: self.session.scheduler().kind().name().to_owned(),
            model_version: self.session.scheduler().model_version(),
            congestion: self.session.config().congestion.algorithm.name().to_owned(),
            backup_below_mbps: self.session.backup_floor() as f64 * 8.0 / 1e6,
            uptime_s: self.epoch.elapsed().as_secs_f64(),
            quiet: self.session.is_quiet(now),
            paths,
            counters,
        }
    }
}
