//! Application models: what the endpoints' users do. Data flows server → client.
//!
//! - **bulk**: the client opens one stream and writes an 8-byte request (the size); the server
//!   answers with that many bytes and finishes. FCT: from the request (t = 0) to the client
//!   reading the end of the flow.
//! - **web**: one stream per object, requested like bulk, at most [`WEB_CONCURRENCY`] at once
//!   (a browser's six connections per host), the next object requested when one completes.
//!   Page load time: when the last object completes.
//! - **realtime**: the server opens a datagram flow at t = 0 and sends `packet_bytes` every
//!   `interval`; each packet's deadline budget is drawn uniformly from `deadline_ms` with the
//!   run's application RNG. A packet meets its deadline when the client reads it no later than
//!   send time + budget (DaMPS §V).

use std::collections::BTreeMap;
use std::time::Duration;

use braid_sched_core::{FlowId, Timestamp};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use super::metrics::Recorder;
use super::{Endpoint, EndpointError, EndpointEvent};
use crate::scenario::App;

/// Web objects in flight at once.
pub const WEB_CONCURRENCY: usize = 6;
/// Bytes of the application header in each real-time datagram (seq, send time, budget).
const RT_HEADER: usize = 20;

const CLIENT: usize = 0;
const SERVER: usize = 1;

static ZEROS: [u8; 65_536] = [0; 65_536];

#[derive(Debug)]
struct Upload {
    request: [u8; 8],
    request_len: usize,
    remaining: u64,
    finished: bool,
}

#[derive(Debug)]
struct Download {
    opened_at: Timestamp,
}

/// The running application of one simulation.
#[derive(Debug)]
pub struct AppModel {
    app: App,
    rng: Xoshiro256PlusPlus,
    started: bool,
    next_object: usize,
    downloads: BTreeMap<FlowId, Download>,
    uploads: BTreeMap<FlowId, Upload>,
    /// Completion time of each finished stream, s.
    pub fcts: Vec<f64>,
    completed: usize,
    done_at: Option<Timestamp>,
    rt_flow: Option<FlowId>,
    rt_next: Timestamp,
    rt_seq: u64,
    rt_sent: u64,
    /// Real-time packets sent: (send time, deadline budget) by sequence number.
    rt_deadlines: Vec<(Timestamp, u32)>,
    rt_on_time: Vec<bool>,
    buf: Vec<u8>,
}

impl AppModel {
    /// A model of `app`, drawing with `seed`.
    pub fn new(app: &App, seed: u64) -> Self {
        AppModel {
            app: app.clone(),
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            started: false,
            next_object: 0,
            downloads: BTreeMap::new(),
            uploads: BTreeMap::new(),
            fcts: Vec::new(),
            completed: 0,
            done_at: None,
            rt_flow: None,
            rt_next: Timestamp::ZERO,
            rt_seq: 0,
            rt_sent: 0,
            rt_deadlines: Vec::new(),
            rt_on_time: Vec::new(),
            buf: vec![0; 65_536],
        }
    }

    /// When every object or the bulk flow has been received (never for realtime).
    pub fn done_at(&self) -> Option<Timestamp> {
        self.done_at
    }

    /// When the model next wants to act by itself (the next real-time packet).
    pub fn next_wakeup(&self, end: Timestamp) -> Option<Timestamp> {
        (self.rt_flow.is_some() && self.rt_next < end).then_some(self.rt_next)
    }

    fn object_sizes(&self) -> &[u64] {
        match &self.app {
            App::Bulk { bytes } => std::slice::from_ref(bytes),
            App::Web { objects } => objects,
            App::Realtime { .. } => &[],
        }
    }

    fn request_next<E: Endpoint>(
        &mut self,
        client: &mut E,
        now: Timestamp,
    ) -> Result<(), EndpointError> {
        let Some(&size) = self.object_sizes().get(self.next_object) else {
            return Ok(());
        };
        self.next_object += 1;
        let flow = client.open_flow(false)?;
        let written = client.write(flow, &size.to_be_bytes())?;
        if written != 8 {
            return Err(EndpointError(format!(
                "flow {flow:?}: request of 8 bytes took {written}"
            )));
        }
        client.finish(flow)?;
        self.downloads.insert(flow, Download { opened_at: now });
        Ok(())
    }

    /// Runs the model at `now`: starts it, reacts to both endpoints' events, sends what is due.
    pub fn step<E: Endpoint>(
        &mut self,
        eps: &mut [E; 2],
        rec: &mut Recorder,
        now: Timestamp,
        end: Timestamp,
    ) -> Result<(), EndpointError> {
        if !self.started {
            self.started = true;
            match self.app {
                App::Realtime { .. } => self.rt_flow = Some(eps[SERVER].open_flow(true)?),
                App::Web { .. } => {
                    for _ in 0..WEB_CONCURRENCY {
                        self.request_next(&mut eps[CLIENT], now)?;
                    }
                }
                App::Bulk { .. } => self.request_next(&mut eps[CLIENT], now)?,
            }
        }
        while let Some(event) = eps[SERVER].poll_event() {
            match event {
                EndpointEvent::FlowOpened {
                    flow,
                    datagram: false,
                } => {
                    self.uploads.insert(
                        flow,
                        Upload {
                            request: [0; 8],
                            request_len: 0,
                            remaining: 0,
                            finished: false,
                        },
                    );
                    self.serve(&mut eps[SERVER], flow)?;
                }
                EndpointEvent::Readable(flow)
                | EndpointEvent::Writable(flow)
                | EndpointEvent::Finished(flow) => {
                    self.serve(&mut eps[SERVER], flow)?;
                }
                _ => {}
            }
        }
        while let Some(event) = eps[CLIENT].poll_event() {
            match event {
                EndpointEvent::Readable(flow) | EndpointEvent::Finished(flow) => {
                    self.receive(eps, rec, flow, now)?;
                }
                EndpointEvent::DatagramReceived(flow) => {
                    self.receive_datagrams(&mut eps[CLIENT], rec, flow, now)?
                }
                _ => {}
            }
        }
        self.send_realtime(&mut eps[SERVER], now, end);
        Ok(())
    }

    /// Server side of one stream: read the request, then write the answer.
    fn serve<E: Endpoint>(&mut self, server: &mut E, flow: FlowId) -> Result<(), EndpointError> {
        let Some(up) = self.uploads.get_mut(&flow) else {
            return Ok(());
        };
        while up.request_len < 8 {
            let want = 8 - up.request_len;
            match server.read(flow, &mut up.request[up.request_len..])? {
                Some(0) | None => break,
                Some(n) => {
                    up.request_len += n.min(want);
                    if up.request_len == 8 {
                        up.remaining = u64::from_be_bytes(up.request);
                    }
                }
            }
        }
        if up.request_len < 8 {
            return Ok(());
        }
        // Drain the end of the request side so the flow can close; a flow already forgotten
        // has nothing left to read.
        let _ = server.read(flow, &mut self.buf[..64]);
        while up.remaining > 0 {
            let chunk = up.remaining.min(ZEROS.len() as u64) as usize;
            let n = server.write(flow, &ZEROS[..chunk])?;
            if n == 0 {
                return Ok(());
            }
            up.remaining -= n as u64;
        }
        if !up.finished {
            up.finished = true;
            server.finish(flow)?;
        }
        self.uploads.remove(&flow);
        Ok(())
    }

    /// Client side of one stream: read everything, note completion.
    fn receive<E: Endpoint>(
        &mut self,
        eps: &mut [E; 2],
        rec: &mut Recorder,
        flow: FlowId,
        now: Timestamp,
    ) -> Result<(), EndpointError> {
        if !self.downloads.contains_key(&flow) {
            return Ok(());
        }
        loop {
            match eps[CLIENT].read(flow, &mut self.buf)? {
                Some(0) => return Ok(()),
                Some(n) => rec.on_app_bytes(now, n),
                None => break,
            }
        }
        if let Some(d) = self.downloads.remove(&flow) {
            self.fcts.push((now - d.opened_at).as_secs_f64());
            self.completed += 1;
            if self.completed == self.object_sizes().len() {
                self.done_at = Some(now);
            } else {
                self.request_next(&mut eps[CLIENT], now)?;
            }
        }
        Ok(())
    }

    fn receive_datagrams<E: Endpoint>(
        &mut self,
        client: &mut E,
        rec: &mut Recorder,
        flow: FlowId,
        now: Timestamp,
    ) -> Result<(), EndpointError> {
        while let Some(n) = client.recv_datagram(flow, &mut self.buf)? {
            rec.on_app_bytes(now, n);
            if n < RT_HEADER {
                continue;
            }
            let mut seq = [0u8; 8];
            seq.copy_from_slice(&self.buf[..8]);
            let seq = u64::from_be_bytes(seq) as usize;
            if let (Some(&(sent, budget)), Some(on_time)) =
                (self.rt_deadlines.get(seq), self.rt_on_time.get_mut(seq))
            {
                *on_time |= now <= sent + Duration::from_micros(u64::from(budget));
            }
        }
        Ok(())
    }

    fn send_realtime<E: Endpoint>(&mut self, server: &mut E, now: Timestamp, end: Timestamp) {
        let (
            Some(flow),
            App::Realtime {
                packet_bytes,
                interval,
                deadline_ms,
            },
        ) = (self.rt_flow, &self.app)
        else {
            return;
        };
        let len = (*packet_bytes as usize).clamp(RT_HEADER, self.buf.len());
        let interval = (*interval).max(Duration::from_micros(1));
        let (low, high) = *deadline_ms;
        while self.rt_next <= now && self.rt_next < end {
            let budget_ms = if high > low {
                self.rng.random_range(low..=high)
            } else {
                low
            };
            let budget = (budget_ms * 1e3).round().clamp(0.0, f64::from(u32::MAX)) as u32;
            let sent = self.rt_next;
            self.buf[..8].copy_from_slice(&self.rt_seq.to_be_bytes());
            self.buf[8..16].copy_from_slice(&sent.as_micros().to_be_bytes());
            self.buf[16..20].copy_from_slice(&budget.to_be_bytes());
            self.rt_deadlines.push((sent, budget));
            self.rt_on_time.push(false);
            // A full send queue drops the packet: it counts as dropped (never received).
            let _ = server.send_datagram(flow, &self.buf[..len], Some(budget), now);
            self.rt_seq += 1;
            self.rt_sent += 1;
            self.rt_next += interval;
        }
    }

    /// DaMPS deadline meeting ratio inputs at the end of the run: packets read by their
    /// deadline, over packets whose deadline passed by `end` (received or dropped) plus
    /// packets received before their deadline passed.
    pub fn deadline_counts(&self, end: Timestamp) -> (u64, u64) {
        let mut on_time = 0;
        let mut total = 0;
        for (&(sent, budget), &ok) in self.rt_deadlines.iter().zip(&self.rt_on_time) {
            let expired = sent + Duration::from_micros(u64::from(budget)) <= end;
            if ok {
                on_time += 1;
            }
            if ok || expired {
                total += 1;
            }
        }
        (on_time, total)
    }
}
