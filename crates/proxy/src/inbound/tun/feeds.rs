//! What the TUN inbound's UDP and ICMP echo sides share: a task per key (a UDP source, a `ping`
//! run) fed from the stack through a bounded queue and started at the key's first message
//! ([`Feeds`]), the queue of packets those tasks build for the device ([`ToDevice`]), and the
//! fragments of a packet longer than the device's MTU ([`fit_to_mtu`]).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, mpsc};

/// Whether `dst` concerns the local link only (multicast, broadcast: mDNS, SSDP, DHCP the
/// system sends into the device): such packets are dropped, not carried.
pub(super) fn link_only(dst: IpAddr) -> bool {
    match dst {
        IpAddr::V4(v4) => v4.is_multicast() || v4.is_broadcast(),
        IpAddr::V6(v6) => v6.is_multicast(),
    }
}

/// Identification of the next packet sent in fragments (IPv4 uses its low 16 bits).
static NEXT_FRAGMENT_ID: AtomicU32 = AtomicU32::new(1);

/// `whole`, an IP packet braid built for the device (no options or extension headers), as
/// packets none longer than `mtu`: itself, or its fragments, which the kernel puts back
/// together: IPv4 fragments, or IPv6 ones with a Fragment header (braid is the packet's source
/// on the device's side, and a source may fragment). Each fragment but the last carries a
/// multiple of 8 bytes.
pub(super) fn fit_to_mtu(whole: Vec<u8>, mtu: usize) -> Vec<Vec<u8>> {
    if whole.len() <= mtu {
        return vec![whole];
    }
    fragments(
        &whole,
        mtu,
        NEXT_FRAGMENT_ID.fetch_add(1, Ordering::Relaxed),
    )
}

/// The fragments of `whole`, an IP packet with no options or extension headers (as
/// as braid writes them), each at most `mtu` bytes: the header with its lengths, flags and
/// identification set (IPv4; DF clear), or the fixed header followed by a Fragment header
/// (IPv6), then the next piece of the payload.
fn fragments(whole: &[u8], mtu: usize, ident: u32) -> Vec<Vec<u8>> {
    const NEXT_HEADER_FRAGMENT: u8 = 44;
    let v4 = whole[0] >> 4 == 4;
    let (header, extra) = if v4 { (20, 0) } else { (40, 8) };
    let (fixed, data) = whole.split_at(header);
    let step = (mtu.saturating_sub(header + extra) & !7).max(8);
    data.chunks(step)
        .enumerate()
        .map(|(i, chunk)| {
            let offset = i * step;
            // The offset in 8-byte units (13 bits), and whether more pieces follow.
            let units = u16::try_from(offset / 8).unwrap_or(0x1fff);
            let more = offset + chunk.len() < data.len();
            let mut packet = Vec::with_capacity(header + extra + chunk.len());
            packet.extend_from_slice(fixed);
            if v4 {
                let total = u16::try_from(header + chunk.len()).unwrap_or(u16::MAX);
                packet[2..4].copy_from_slice(&total.to_be_bytes());
                packet[4..6].copy_from_slice(&ident.to_be_bytes()[2..]);
                packet[6..8].copy_from_slice(&((u16::from(more) << 13) | units).to_be_bytes());
                packet[10..12].fill(0);
                let checksum = !smoltcp::wire::checksum::data(&packet);
                packet[10..12].copy_from_slice(&checksum.to_be_bytes());
            } else {
                let payload_len = u16::try_from(extra + chunk.len()).unwrap_or(u16::MAX);
                packet[4..6].copy_from_slice(&payload_len.to_be_bytes());
                let next_header = std::mem::replace(&mut packet[6], NEXT_HEADER_FRAGMENT);
                // Next header, reserved, offset with M, identification.
                packet.extend_from_slice(&[next_header, 0]);
                packet.extend_from_slice(&((units << 3) | u16::from(more)).to_be_bytes());
                packet.extend_from_slice(&ident.to_be_bytes());
            }
            packet.extend_from_slice(chunk);
            packet
        })
        .collect()
}

/// Why a message was not handed to its task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NotFed {
    /// Its key would need a task beyond the limit.
    TooMany,
    /// Its task's queue is full.
    QueueFull,
}

/// Tasks by key, each fed through a queue of `queue` messages; at most `max` at once.
pub(super) struct Feeds<K, M> {
    senders: HashMap<K, mpsc::Sender<M>>,
    max: usize,
    queue: usize,
}

impl<K: Eq + Hash + Copy, M> Feeds<K, M> {
    pub(super) fn new(max: usize, queue: usize) -> Self {
        Feeds {
            senders: HashMap::new(),
            max,
            queue,
        }
    }

    /// Hands `msg` to `key`'s task, first spawning `start(queue)` when the key has none or its
    /// task has ended (the tasks of ended keys are forgotten before one is counted against the
    /// limit).
    pub(super) fn feed<F>(
        &mut self,
        key: K,
        msg: M,
        start: impl FnOnce(mpsc::Receiver<M>) -> F,
    ) -> Result<(), NotFed>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let sender = match self.senders.get(&key) {
            Some(s) if !s.is_closed() => s,
            _ => {
                self.senders.retain(|_, s| !s.is_closed());
                if self.senders.len() >= self.max {
                    return Err(NotFed::TooMany);
                }
                let (tx, rx) = mpsc::channel(self.queue);
                tokio::spawn(start(rx));
                self.senders.entry(key).insert_entry(tx).into_mut()
            }
        };
        sender.try_send(msg).map_err(|_| NotFed::QueueFull)
    }
}

/// Packets the tasks built for the device, at most `max` waiting; the stack is woken for them.
#[derive(Debug)]
pub(super) struct ToDevice {
    packets: Mutex<VecDeque<Vec<u8>>>,
    max: usize,
    notify: Arc<Notify>,
}

impl ToDevice {
    pub(super) fn new(max: usize, notify: Arc<Notify>) -> Arc<Self> {
        Arc::new(ToDevice {
            packets: Mutex::new(VecDeque::new()),
            max,
            notify,
        })
    }

    /// Queues `packets` (all, or none when they would pass the limit) and wakes the stack;
    /// whether they were queued.
    pub(super) fn push(&self, packets: Vec<Vec<u8>>) -> bool {
        let mut q = self.packets.lock().unwrap_or_else(PoisonError::into_inner);
        let room = q.len() + packets.len() <= self.max;
        if room {
            q.extend(packets);
        }
        drop(q);
        self.notify.notify_one();
        room
    }

    /// The packets queued since the last call.
    pub(super) fn take(&self) -> Vec<Vec<u8>> {
        let mut q = self.packets.lock().unwrap_or_else(PoisonError::into_inner);
        q.drain(..).collect()
    }
}
