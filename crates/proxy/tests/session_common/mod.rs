//! Shared drivers for the session integration tests: bulk stream transfers in both directions
//! checked byte for byte, over the in-memory harness.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use braid_proxy::session::harness::{CLIENT, Harness, SERVER};
use braid_proxy::session::{Event, FlowKind, Session, SessionConfig, Target};
use braid_sched_core::{FlowId, Timestamp};

/// Send buffers and receive windows (4 MiB per flow, 8 MiB per session) large enough that
/// a bulk transfer over the test paths is limited by the paths, not by flow control.
pub fn bulk_config() -> SessionConfig {
    SessionConfig {
        flow_send_buffer: 4 << 20,
        flow_receive_window: 4 << 20,
        session_receive_window: 8 << 20,
        ..SessionConfig::default()
    }
}

/// The byte at offset `i` of transfer `n` (position-dependent, so misplaced bytes are caught).
pub fn pattern(n: usize, i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761).wrapping_add(n as u64 * 97) >> 11) as u8
}

/// One bulk flow: the opener writes `len` bytes then finishes; the other end reads them.
#[derive(Debug)]
pub struct Bulk {
    pub n: usize,
    pub from: usize,
    pub len: u64,
    pub flow: Option<FlowId>,
    pub written: u64,
    pub finished: bool,
    pub received: u64,
    pub eof: bool,
    pub corrupt: bool,
    /// The receiver saw the flow reset with this code.
    pub reset_code: Option<u64>,
    /// The sender resets the flow with `code` once it has written `bytes`.
    pub reset_after: Option<(u64, u64)>,
    pub reset_sent: bool,
    /// The sender writes no further than this many bytes (a test raises it over time to play an
    /// application that produces data slowly); `None`: as fast as the flow takes it.
    pub write_limit: Option<u64>,
    pub done_at: Option<Timestamp>,
}

impl Bulk {
    pub fn new(n: usize, from: usize, len: u64) -> Self {
        Bulk {
            n,
            from,
            len,
            flow: None,
            written: 0,
            finished: false,
            received: 0,
            eof: false,
            corrupt: false,
            reset_code: None,
            reset_after: None,
            reset_sent: false,
            write_limit: None,
            done_at: None,
        }
    }
}

/// Drives bulk transfers on a harness: open, write, finish on the sending side; read and check
/// on the receiving side; each side also finishes its own direction once the peer finished.
#[derive(Debug, Default)]
pub struct Driver {
    pub transfers: Vec<Bulk>,
    pub opened_by_peer: Vec<(usize, FlowId)>,
    pub events: Vec<(usize, Event)>,
    buf: Vec<u8>,
}

impl Driver {
    pub fn new(transfers: Vec<Bulk>) -> Self {
        Driver {
            transfers,
            buf: vec![0; 64 * 1024],
            ..Driver::default()
        }
    }

    pub fn all_done(&self) -> bool {
        self.transfers
            .iter()
            .all(|t| t.eof || t.reset_code.is_some())
    }

    pub fn step(&mut self, h: &mut Harness) {
        let now = h.now();
        self.step_sessions(&mut h.endpoints, now);
    }

    /// As [`Driver::step`], on a client and server other than the harness's main pair (one of
    /// its competitors).
    pub fn step_sessions(&mut self, endpoints: &mut [Session; 2], now: Timestamp) {
        for t in &mut self.transfers {
            let s = &mut endpoints[t.from];
            if t.flow.is_none() {
                let target = Target::Domain {
                    name: format!("bulk{}.example", t.n),
                    port: 443,
                };
                t.flow = s.open_flow(FlowKind::Stream, target).ok();
            }
            let Some(flow) = t.flow else { continue };
            if let Some((after, code)) = t.reset_after
                && t.written >= after
                && !t.reset_sent
            {
                s.reset(flow, code).unwrap();
                t.reset_sent = true;
            }
            if t.reset_sent {
                continue;
            }
            let cap = t.reset_after.map_or(t.len, |(after, _)| after.min(t.len));
            let cap = t.write_limit.map_or(cap, |limit| limit.min(cap));
            while t.written < cap {
                let n = (cap - t.written).min(16 * 1024) as usize;
                let chunk: Vec<u8> = (0..n as u64).map(|i| pattern(t.n, t.written + i)).collect();
                match s.write(flow, &chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(w) => t.written += w as u64,
                }
            }
            if t.written == t.len && !t.finished && s.finish(flow).is_ok() {
                t.finished = true;
            }
        }
        for side in [CLIENT, SERVER] {
            while let Some(e) = endpoints[side].poll_event() {
                if let Event::FlowOpened { flow, .. } = &e {
                    self.opened_by_peer.push((side, *flow));
                }
                if let Event::FlowReset { flow, code } = &e {
                    for t in &mut self.transfers {
                        if t.flow == Some(*flow) && t.from != side {
                            t.reset_code = Some(*code);
                        }
                    }
                }
                self.events.push((side, e));
            }
        }
        for t in &mut self.transfers {
            let Some(flow) = t.flow else { continue };
            let s = &mut endpoints[1 - t.from];
            read_all(s, flow, t, &mut self.buf, now);
        }
    }
}

fn read_all(s: &mut Session, flow: FlowId, t: &mut Bulk, buf: &mut [u8], now: Timestamp) {
    if t.eof {
        return;
    }
    loop {
        match s.read(flow, buf) {
            Ok(Some(0)) | Err(_) => return,
            Ok(Some(n)) => {
                for (i, b) in buf[..n].iter().enumerate() {
                    if *b != pattern(t.n, t.received + i as u64) {
                        t.corrupt = true;
                    }
                }
                t.received += n as u64;
            }
            Ok(None) => {
                t.eof = true;
                t.done_at = Some(now);
                // Close our own direction too so the flow can be forgotten.
                let _ = s.finish(flow);
                return;
            }
        }
    }
}

/// Opens a datagram flow from the client to a documentation address (the harness delivers it to
/// the server's session; nothing is sent on a real network).
pub fn open_datagram_flow(h: &mut Harness) -> FlowId {
    h.client()
        .open_flow(
            FlowKind::Datagram,
            Target::Addr("203.0.113.5:9".parse().unwrap()),
        )
        .unwrap()
}

/// Runs the harness until `t`, the server reading and discarding every datagram of `flow`.
pub fn run_draining(h: &mut Harness, flow: FlowId, t: Timestamp) {
    let mut buf = [0u8; 2048];
    h.run_until(t, |h| {
        while let Ok(Some(_)) = h.server().recv_datagram(flow, &mut buf) {}
    });
}
