//! Two flow handles joined to each other in this process, with no session between them: what
//! one end writes, the other reads. The client's `direct` routes put the server's egress code
//! ([`crate::egress`]) on one end and hand the other to the inbound that asked, which cannot
//! tell it from a session's flow.
//!
//! The same backpressure as a session's flow: a writer's credit ([`WRITE_CREDIT`]) comes back
//! only as the other end's reader takes the bytes, and at most [`DATAGRAMS_IN_FLIGHT`]
//! datagrams wait for a reader (more are dropped, as a session drops them when its queue is
//! full).

use std::collections::VecDeque;
use std::sync::Arc;

use braid_sched_core::FlowId;
use tokio::sync::{Semaphore, mpsc};

use super::driver::Command;
use super::flow::{FlowHandle, FlowMsg, WRITE_CREDIT};
use super::relay::RELAY_ERROR_CODE;

/// Datagrams one end may have waiting for the other's reader.
pub const DATAGRAMS_IN_FLIGHT: usize = 256;

/// Commands waiting for the pipe's task (the writers wait beyond).
const COMMANDS: usize = 64;

/// What one end has handed to the other's reader and not yet seen taken.
enum Handed {
    Bytes(usize),
    Datagram,
}

/// One end's side of the pipe, seen from its task.
struct End {
    /// Where the messages for this end's reader go.
    incoming: mpsc::UnboundedSender<FlowMsg>,
    /// This end's write credit.
    credit: Arc<Semaphore>,
    /// What this end wrote, in order, that the other end's reader has not taken yet.
    handed: VecDeque<Handed>,
    datagrams: usize,
    /// This end finished its side.
    finished: bool,
}

/// A pair of joined flow handles (ids 0 and 1), and the task that moves their messages. An
/// end whose handles are all dropped before the pipe is over resets the other.
pub(crate) fn pipe() -> (FlowHandle, FlowHandle) {
    let end = |id: u64| {
        let (commands, rx) = mpsc::channel::<Command>(COMMANDS);
        let (tx, incoming) = mpsc::unbounded_channel();
        let credit = Arc::new(Semaphore::new(WRITE_CREDIT));
        let end = End {
            incoming: tx,
            credit: credit.clone(),
            handed: VecDeque::new(),
            datagrams: 0,
            finished: false,
        };
        let handle = FlowHandle {
            id: FlowId(id),
            commands,
            incoming,
            credit,
        };
        (end, rx, handle)
    };
    let ((a, mut a_rx, a_handle), (b, mut b_rx, b_handle)) = (end(0), end(1));
    tokio::spawn(async move {
        let mut ends = [a, b];
        loop {
            let (command, from) = tokio::select! {
                c = a_rx.recv() => (c, 0),
                c = b_rx.recv() => (c, 1),
            };
            let going_on = match command {
                Some(command) => step(&mut ends, from, command),
                None => {
                    ends[1 - from].send(FlowMsg::Reset(RELAY_ERROR_CODE));
                    false
                }
            };
            if !going_on {
                break;
            }
        }
        for end in &ends {
            end.credit.close();
        }
    });
    (a_handle, b_handle)
}

impl End {
    fn send(&self, msg: FlowMsg) {
        let _ = self.incoming.send(msg);
    }
}

/// Applies one command of end `from`; false once the pipe is over (a reset, or both sides
/// finished): the readers then see the end of their messages.
fn step(ends: &mut [End; 2], from: usize, command: Command) -> bool {
    let to = 1 - from;
    match command {
        Command::Write { data, .. } if !ends[from].finished && !data.is_empty() => {
            ends[from].handed.push_back(Handed::Bytes(data.len()));
            ends[to].send(FlowMsg::Data(data));
        }
        // Beyond the bound, dropped.
        Command::Datagram { data, .. } if ends[from].datagrams < DATAGRAMS_IN_FLIGHT => {
            ends[from].datagrams += 1;
            ends[from].handed.push_back(Handed::Datagram);
            ends[to].send(FlowMsg::Datagram(data));
        }
        // `from`'s reader took a message `to` wrote: `to` gets the credit back.
        Command::Consumed { .. } => match ends[to].handed.pop_front() {
            Some(Handed::Bytes(n)) => ends[to].credit.add_permits(n),
            Some(Handed::Datagram) => ends[to].datagrams -= 1,
            None => {}
        },
        Command::Finish { .. } => {
            if !ends[from].finished {
                ends[from].finished = true;
                ends[to].send(FlowMsg::Finished);
            }
            if ends[to].finished {
                return false;
            }
        }
        Command::Reset { code, .. } => {
            ends[to].send(FlowMsg::Reset(code));
            return false;
        }
        // Nothing else comes from a flow handle.
        _ => {}
    }
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    #[tokio::test]
    async fn what_one_end_writes_the_other_reads_in_order_with_the_credit_returned() {
        let (a, b) = pipe();
        let (aw, mut ar) = a.split();
        let (bw, mut br) = b.split();
        // More than the credit: the writer waits until the reader takes the bytes.
        let total = 3 * WRITE_CREDIT + 17;
        let writer = tokio::spawn(async move {
            for i in 0..total / 4096 + 1 {
                let n = 4096.min(total - i * 4096);
                if n == 0 {
                    break;
                }
                aw.write(Bytes::from(vec![(i % 251) as u8; n]))
                    .await
                    .unwrap();
            }
            aw.finish().await.unwrap();
            aw
        });
        let mut got = Vec::new();
        loop {
            match br.recv().await.unwrap() {
                FlowMsg::Data(d) => got.extend_from_slice(&d),
                FlowMsg::Finished => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(got.len(), total);
        assert!(
            got.chunks(4096)
                .enumerate()
                .all(|(i, c)| c.iter().all(|&x| x == (i % 251) as u8))
        );
        let aw = writer.await.unwrap();
        // The other way, then both finished: the readers see their end.
        bw.write(Bytes::from_static(b"back")).await.unwrap();
        bw.finish().await.unwrap();
        assert_eq!(
            ar.recv().await,
            Some(FlowMsg::Data(Bytes::from_static(b"back")))
        );
        assert_eq!(ar.recv().await, Some(FlowMsg::Finished));
        assert_eq!(ar.recv().await, None);
        assert_eq!(br.recv().await, None);
        assert!(aw.write(Bytes::from_static(b"late")).await.is_err());
    }

    #[tokio::test]
    async fn the_writer_waits_while_the_reader_takes_nothing() {
        let (a, b) = pipe();
        let (aw, _ar) = a.split();
        let (_bw, mut br) = b.split();
        aw.write(Bytes::from(vec![0; WRITE_CREDIT])).await.unwrap();
        let more = tokio::time::timeout(
            Duration::from_millis(100),
            aw.write(Bytes::from_static(b"x")),
        )
        .await;
        assert!(
            more.is_err(),
            "the credit is spent until the reader takes the bytes"
        );
        assert!(matches!(br.recv().await, Some(FlowMsg::Data(d)) if d.len() == WRITE_CREDIT));
        tokio::time::timeout(Duration::from_secs(5), aw.write(Bytes::from_static(b"x")))
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_reset_reaches_the_other_end_and_ends_both_and_datagrams_are_bounded() {
        let (a, b) = pipe();
        let (aw, mut ar) = a.split();
        let (bw, mut br) = b.split();
        for i in 0..DATAGRAMS_IN_FLIGHT + 10 {
            aw.send_datagram(Bytes::from(vec![i as u8])).await.unwrap();
        }
        // The pipe's task takes every one of them before the reader starts.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut n = 0;
        // The ones beyond the bound were dropped; those taken make room again.
        while let Ok(Some(FlowMsg::Datagram(_))) =
            tokio::time::timeout(Duration::from_millis(50), br.recv()).await
        {
            n += 1;
        }
        assert_eq!(n, DATAGRAMS_IN_FLIGHT);
        aw.send_datagram(Bytes::from_static(b"again"))
            .await
            .unwrap();
        assert_eq!(
            br.recv().await,
            Some(FlowMsg::Datagram(Bytes::from_static(b"again")))
        );
        bw.reset(0x5302).await.unwrap();
        assert_eq!(ar.recv().await, Some(FlowMsg::Reset(0x5302)));
        assert_eq!(ar.recv().await, None);
        assert_eq!(br.recv().await, None);
        assert!(aw.write(Bytes::from_static(b"x")).await.is_err());
    }

    #[tokio::test]
    async fn an_end_dropped_whole_resets_the_other() {
        let (a, b) = pipe();
        let (aw, ar) = a.split();
        let (bw, mut br) = b.split();
        aw.finish().await.unwrap();
        assert_eq!(br.recv().await, Some(FlowMsg::Finished));
        // Half-closed: b may still write, and a's reader alone keeps a's end.
        bw.write(Bytes::from_static(b"more")).await.unwrap();
        drop(aw);
        bw.write(Bytes::from_static(b"more")).await.unwrap();
        drop(ar);
        assert_eq!(br.recv().await, Some(FlowMsg::Reset(RELAY_ERROR_CODE)));
        assert_eq!(br.recv().await, None);
    }
}
