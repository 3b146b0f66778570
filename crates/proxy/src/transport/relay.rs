//! Copying between a TCP socket and a stream flow, both directions at once, with backpressure
//! (the flow's write credit and read budget, see [`super::flow`]). Used by the client inbounds
//! and by the server egress.
//!
//! A clean end of either side half-closes the other (TCP FIN ↔ flow FINISH); an error on either
//! side aborts both: the flow is reset with [`RELAY_ERROR_CODE`], and the socket is closed with
//! a TCP RST (`SO_LINGER` 0), never a FIN, so that an application reading until the close (a
//! raw TCP download, an HTTP/1.0 body) sees an error, not a clean end, when its flow was reset
//! or its session lost.

use bytes::Bytes;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::arena::Arena;
use super::flow::{CHUNK, FlowMsg, FlowReader, FlowWriter};

/// Reset code when the relay fails on this end (a socket error).
pub const RELAY_ERROR_CODE: u64 = 0x5301;

/// How a relay ended.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The socket failed.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// The peer reset the flow.
    #[error("flow reset by the peer (code {0:#x})")]
    Reset(u64),
    /// The session closed.
    #[error("the session closed")]
    Gone,
}

/// Relays until both directions are finished or one fails. `initial_up` is sent into the flow
/// first (bytes that arrived with a request head), `initial_down` to the socket first (bytes
/// that arrived with the server's connected marker).
pub async fn relay_tcp(
    stream: TcpStream,
    writer: FlowWriter,
    mut reader: FlowReader,
    initial_up: Bytes,
    initial_down: Bytes,
) -> Result<(), RelayError> {
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let up = async {
        if !initial_up.is_empty() {
            writer
                .write(initial_up)
                .await
                .map_err(|_| RelayError::Gone)?;
        }
        // Up to three buffers: a chunk handed over is usually in the session's send buffer (and
        // dropped) by the next read, so one is reused; while the session's send buffer is full,
        // up to `WRITE_CREDIT` (two chunks) waits in the driver. Only the current one is kept
        // while the socket has nothing to read.
        let mut arena = Arena::<3>::new(CHUNK);
        loop {
            let read = match rd.try_read_buf(arena.room(CHUNK)) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    arena.keep_one();
                    rd.read_buf(arena.room(CHUNK)).await
                }
                other => other,
            };
            match read {
                Ok(0) => {
                    writer.finish().await.map_err(|_| RelayError::Gone)?;
                    return Ok(());
                }
                Ok(_) => writer
                    .write(arena.current().split().freeze())
                    .await
                    .map_err(|_| RelayError::Gone)?,
                Err(e) => {
                    let _ = writer.reset(RELAY_ERROR_CODE).await;
                    return Err(RelayError::Io(e));
                }
            }
        }
    };
    let down = async {
        if !initial_down.is_empty() {
            wr.write_all(&initial_down).await?;
        }
        while let Some(msg) = reader.recv().await {
            match msg {
                FlowMsg::Data(b) => {
                    if let Err(e) = wr.write_all(&b).await {
                        let _ = writer.reset(RELAY_ERROR_CODE).await;
                        return Err(RelayError::Io(e));
                    }
                }
                FlowMsg::Finished => {
                    let _ = wr.shutdown().await;
                    return Ok(());
                }
                FlowMsg::Reset(code) => return Err(RelayError::Reset(code)),
                FlowMsg::Datagram(_) => {}
            }
        }
        Err(RelayError::Gone)
    };
    let ended = tokio::try_join!(up, down).map(|_| ());
    if ended.is_err() {
        abort(rd, wr);
    }
    ended
}

/// Closes the socket of `rd` and `wr` with a TCP RST (`SO_LINGER` 0) instead of a FIN.
fn abort(rd: tokio::net::tcp::OwnedReadHalf, wr: tokio::net::tcp::OwnedWriteHalf) {
    // Reunited, the write half is not shut down (a FIN) when dropped.
    if let Ok(stream) = rd.reunite(wr) {
        let _ = stream.set_zero_linger();
    }
}
