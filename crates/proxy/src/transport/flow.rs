//! The async face of a session's flows: [`SessionHandle`] opens flows, and a [`FlowHandle`]
//! (split into [`FlowWriter`] and [`FlowReader`]) moves one flow's bytes between a socket task
//! and the session driver.
//!
//! Backpressure runs all the way to the application: a writer holds a per-flow byte credit
//! ([`WRITE_CREDIT`]) that the driver gives back only as the session's send buffer accepts the
//! bytes, and the driver hands a reader at most [`READ_CHUNKS_IN_FLIGHT`] chunks before the
//! reader reports them consumed.

use std::sync::Arc;

use braid_sched_core::{AnyScheduler, FlowId};
use bytes::Bytes;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::driver::Command;
use super::status::SessionStatus;
use crate::session::{FlowError, FlowKind, Target};

/// Bytes a flow's writer may have handed to the driver and not yet seen accepted.
pub const WRITE_CREDIT: usize = 512 * 1024;
/// Chunks a flow's reader may hold before it reports them consumed (512 KiB with [`CHUNK`]).
pub const READ_CHUNKS_IN_FLIGHT: u32 = 2;
/// Largest chunk moved at once: one socket read or write, one message to the driver and one
/// wake-up of each side per chunk (64 KiB halved those of 32 KiB chunks; 256 KiB cost some 5%
/// less CPU per byte than 64 KiB in the `e2e` bench).
pub const CHUNK: usize = 256 * 1024;

/// What the driver hands a flow's reader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowMsg {
    /// In-order stream bytes.
    Data(Bytes),
    /// A datagram (datagram flows).
    Datagram(Bytes),
    /// The peer finished its side: no more data.
    Finished,
    /// The peer reset the flow with this code.
    Reset(u64),
}

/// The driver is gone (the session closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the session is closed")]
pub struct SessionGone;

/// Opening a flow failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// No session (no link has joined yet, or the session closed).
    #[error("the session is closed")]
    Gone,
    /// The session refused the flow.
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// A `block` route refuses the destination (the client's `[[route]]`).
    #[error("a block route refuses the destination")]
    Blocked,
}

/// A cheap, cloneable handle on a running session driver.
#[derive(Clone, Debug)]
pub struct SessionHandle {
    pub(crate) commands: mpsc::Sender<Command>,
    /// When the session's driver started.
    pub(crate) started: tokio::time::Instant,
    /// How many paths the session has.
    pub(crate) paths: tokio::sync::watch::Receiver<usize>,
}

impl SessionHandle {
    /// Opens a flow towards `target`.
    pub async fn open(&self, kind: FlowKind, target: Target) -> Result<FlowHandle, OpenError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Open {
                kind,
                target,
                reply,
            })
            .await
            .map_err(|_| OpenError::Gone)?;
        rx.await
            .map_err(|_| OpenError::Gone)?
            .map_err(OpenError::Flow)
    }

    /// The session's status.
    pub async fn status(&self) -> Result<SessionStatus, SessionGone> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Status { reply })
            .await
            .map_err(|_| SessionGone)?;
        rx.await.map_err(|_| SessionGone)
    }

    /// Puts `scheduler` in place of the session's (see [`crate::session::Session::replace_scheduler`]).
    pub async fn replace_scheduler(&self, scheduler: AnyScheduler) -> Result<(), SessionGone> {
        self.commands
            .send(Command::Scheduler(scheduler))
            .await
            .map_err(|_| SessionGone)
    }

    /// Switches the session's paths to `algorithm` (see
    /// [`crate::session::Session::set_congestion`]).
    pub async fn set_congestion(
        &self,
        algorithm: crate::session::congestion::CongestionAlgorithm,
    ) -> Result<(), SessionGone> {
        self.commands
            .send(Command::Congestion(algorithm))
            .await
            .map_err(|_| SessionGone)
    }

    /// Replaces the ports whose flows go redundantly and their rate bound (see
    /// [`crate::session::Session::set_redundant`]).
    pub async fn set_redundant(
        &self,
        redundant: crate::session::RedundantFlows,
    ) -> Result<(), SessionGone> {
        self.commands
            .send(Command::Redundant(redundant))
            .await
            .map_err(|_| SessionGone)
    }

    /// Closes the session (CLOSE on every path).
    pub async fn close(&self) {
        let _ = self.commands.send(Command::Close).await;
    }

    /// Waits until the session has a path, or `deadline`; true when it has one (false too when
    /// the driver stopped).
    pub async fn wait_for_path(&self, deadline: tokio::time::Instant) -> bool {
        let mut paths = self.paths.clone();
        matches!(
            tokio::time::timeout_at(deadline, paths.wait_for(|&n| n > 0)).await,
            Ok(Ok(_))
        )
    }

    /// True while the session has a path (and its driver runs).
    pub fn has_path(&self) -> bool {
        *self.paths.borrow() > 0 && !self.is_closed()
    }

    /// True once the driver has stopped.
    pub fn is_closed(&self) -> bool {
        self.commands.is_closed()
    }

    /// True when both handles are on the same session's driver.
    pub fn is_same_session(&self, other: &SessionHandle) -> bool {
        self.commands.same_channel(&other.commands)
    }
}

/// One flow, as handed to the task that serves it.
#[derive(Debug)]
pub struct FlowHandle {
    /// The flow's id.
    pub id: FlowId,
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) incoming: mpsc::UnboundedReceiver<FlowMsg>,
    pub(crate) credit: Arc<Semaphore>,
}

impl FlowHandle {
    /// Splits the handle into its writing and reading halves.
    pub fn split(self) -> (FlowWriter, FlowReader) {
        (
            FlowWriter {
                id: self.id,
                commands: self.commands.clone(),
                credit: self.credit,
            },
            FlowReader {
                id: self.id,
                commands: self.commands,
                incoming: self.incoming,
            },
        )
    }
}

/// The writing half of a flow.
#[derive(Clone, Debug)]
pub struct FlowWriter {
    id: FlowId,
    commands: mpsc::Sender<Command>,
    credit: Arc<Semaphore>,
}

impl FlowWriter {
    /// Queues stream bytes; waits while the flow's credit is used up (backpressure).
    pub async fn write(&self, mut data: Bytes) -> Result<(), SessionGone> {
        while !data.is_empty() {
            let chunk = data.split_to(data.len().min(WRITE_CREDIT));
            let permits = self
                .credit
                .acquire_many(chunk.len() as u32)
                .await
                .map_err(|_| SessionGone)?;
            permits.forget();
            self.commands
                .send(Command::Write {
                    flow: self.id,
                    data: chunk,
                })
                .await
                .map_err(|_| SessionGone)?;
        }
        Ok(())
    }

    /// Finishes the flow once everything written so far has gone into the session.
    pub async fn finish(&self) -> Result<(), SessionGone> {
        self.commands
            .send(Command::Finish { flow: self.id })
            .await
            .map_err(|_| SessionGone)
    }

    /// Resets the flow (both directions) with `code`.
    pub async fn reset(&self, code: u64) -> Result<(), SessionGone> {
        self.commands
            .send(Command::Reset {
                flow: self.id,
                code,
            })
            .await
            .map_err(|_| SessionGone)
    }

    /// Sends a datagram on a datagram flow (dropped by the session when its queue is full).
    pub async fn send_datagram(&self, data: Bytes) -> Result<(), SessionGone> {
        self.commands
            .send(Command::Datagram {
                flow: self.id,
                data,
            })
            .await
            .map_err(|_| SessionGone)
    }
}

/// The reading half of a flow.
#[derive(Debug)]
pub struct FlowReader {
    id: FlowId,
    commands: mpsc::Sender<Command>,
    incoming: mpsc::UnboundedReceiver<FlowMsg>,
}

impl FlowReader {
    /// The next message; `None` once the flow is closed and forgotten by the driver.
    pub async fn recv(&mut self) -> Option<FlowMsg> {
        let msg = self.incoming.recv().await?;
        if matches!(msg, FlowMsg::Data(_) | FlowMsg::Datagram(_)) {
            let _ = self
                .commands
                .send(Command::Consumed { flow: self.id })
                .await;
        }
        Some(msg)
    }
}
