//! Reading datagrams from the session's path connections: the driver polls each connection's
//! next datagram itself, with no task and channel hop per datagram.

use braid_sched_core::PathId;
use bytes::Bytes;

use super::PathInput;

/// The next datagram of one path connection.
pub(super) type DatagramFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Bytes, quinn::ConnectionError>> + Send>,
>;

pub(super) fn read_next(conn: &quinn::Connection) -> DatagramFuture {
    let conn = conn.clone();
    Box::pin(async move { conn.read_datagram().await })
}

/// A path connection the driver reads datagrams from (polled by the driver itself: no task hop
/// per datagram).
pub(super) struct PathReader {
    pub id: PathId,
    pub generation: u64,
    pub conn: quinn::Connection,
    pub next: DatagramFuture,
}

/// Polls every path's next datagram, taking up to 64 per path per call.
pub(super) fn poll_readers(
    readers: &mut [PathReader],
    cx: &mut std::task::Context<'_>,
    out: &mut Vec<PathInput>,
) -> std::task::Poll<()> {
    use std::task::Poll;
    for r in readers.iter_mut() {
        for _ in 0..64 {
            match r.next.as_mut().poll(cx) {
                Poll::Ready(Ok(data)) => {
                    out.push(PathInput::Datagram(r.id, r.generation, data));
                    r.next = read_next(&r.conn);
                }
                Poll::Ready(Err(_)) => {
                    out.push(PathInput::Closed(r.id, r.generation));
                    r.next = Box::pin(std::future::pending());
                    break;
                }
                Poll::Pending => break,
            }
        }
    }
    if out.is_empty() {
        Poll::Pending
    } else {
        Poll::Ready(())
    }
}
