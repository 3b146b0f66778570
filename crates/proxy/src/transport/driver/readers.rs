//! Reading datagrams from the session's path connections: the driver polls each connection's
//! next datagram itself, with no task and channel hop per datagram.

use std::future::Future as _;
use std::task::{Context, Poll};

use braid_sched_core::PathId;
use bytes::Bytes;

use super::PathInput;

/// Datagrams taken from one path per call of [`poll_readers`] (then the other paths, the
/// commands and the timer get their turn).
const DATAGRAMS_PER_POLL: usize = 64;

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
    /// The registered wait for the next datagram; replaced only after it completes, so a burst
    /// costs one boxed future, not one per datagram.
    pub next: DatagramFuture,
}

/// Whether `e` says that the peer closed the connection because its session is over
/// ([`crate::transport::join::SESSION_CLOSED_CODE`]).
fn session_over(e: &quinn::ConnectionError) -> bool {
    matches!(e, quinn::ConnectionError::ApplicationClosed(close)
        if close.error_code == quinn::VarInt::from_u32(crate::transport::join::SESSION_CLOSED_CODE))
}

/// Polls every path's next datagram, taking up to [`DATAGRAMS_PER_POLL`] per path per call.
///
/// Once a path's boxed future yields, the datagrams quinn has already buffered are taken with
/// futures on the stack (each ready at its first poll); only when none is left is a new boxed
/// future made and polled, which registers the wake-up for the next one.
pub(super) fn poll_readers(
    readers: &mut [PathReader],
    cx: &mut Context<'_>,
    out: &mut Vec<PathInput>,
) -> Poll<()> {
    for r in readers.iter_mut() {
        let mut taken = 0;
        while taken < DATAGRAMS_PER_POLL {
            match r.next.as_mut().poll(cx) {
                Poll::Ready(Ok(data)) => {
                    out.push(PathInput::Datagram(r.id, r.generation, data));
                    taken += 1;
                }
                Poll::Ready(Err(e)) => {
                    out.push(PathInput::Closed(r.id, r.generation, session_over(&e)));
                    r.next = Box::pin(std::future::pending());
                    break;
                }
                Poll::Pending => break,
            }
            let mut closed = false;
            while taken < DATAGRAMS_PER_POLL {
                let buffered = std::pin::pin!(r.conn.read_datagram());
                match buffered.poll(cx) {
                    Poll::Ready(Ok(data)) => {
                        out.push(PathInput::Datagram(r.id, r.generation, data));
                        taken += 1;
                    }
                    Poll::Ready(Err(e)) => {
                        out.push(PathInput::Closed(r.id, r.generation, session_over(&e)));
                        closed = true;
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            if closed {
                r.next = Box::pin(std::future::pending());
                break;
            }
            // Polled at the top of the loop (registering the wake-up) unless the budget is
            // spent; then the next call polls it first.
            r.next = read_next(&r.conn);
        }
    }
    if out.is_empty() {
        Poll::Pending
    } else {
        Poll::Ready(())
    }
}
