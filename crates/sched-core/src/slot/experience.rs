//! The bounded experience queue from the hot path to a learner thread (DESIGN.md "learners":
//! the producer never blocks; it drops and counts when full).
//!
//! A preallocated ring of `capacity` cells (a power of two) with a per-cell sequence number, in
//! the manner of Dmitry Vyukov's bounded MPMC queue: a producer claims a cell with one
//! compare-and-swap on the tail and publishes it with a release store of the cell's sequence; the
//! consumer does the same on the head. Nothing is allocated after [`experience_queue`], no lock is
//! taken, and a full ring makes [`ExperienceSender::send`] return at once after counting the drop.
//! Senders are `Clone` (one per session or path); there is one [`ExperienceReceiver`], owned by
//! the learner.

use std::mem::MaybeUninit;

use super::sync::{Arc, AtomicU64, AtomicUsize, Ordering, UnsafeCell};

/// The largest ring [`experience_queue`] builds (cells).
pub const MAX_QUEUE_CAPACITY: usize = 1 << 24;

/// A capacity [`experience_queue`] refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("experience queue capacity {requested}: must be 1..={max}")]
pub struct QueueCapacityError {
    /// The capacity asked for.
    pub requested: usize,
    /// The largest accepted.
    pub max: usize,
}

/// One cell: its sequence number says whose turn it is (producer at `pos`, consumer at `pos + 1`).
struct Cell<T> {
    sequence: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// The ring shared by senders and the receiver.
struct Ring<T> {
    cells: Box<[Cell<T>]>,
    mask: usize,
    tail: AtomicUsize,
    head: AtomicUsize,
    sent: AtomicU64,
    dropped: AtomicU64,
}

// SAFETY: a cell's value is written only by the producer that won the tail CAS for it and read
// only by the consumer that won the head CAS for it, and the sequence number's release/acquire
// pair orders the two; `T: Send` is all that moving values across threads needs.
unsafe impl<T: Send> Send for Ring<T> {}
// SAFETY: as above; shared access goes through atomics and the sequence protocol.
unsafe impl<T: Send> Sync for Ring<T> {}

impl<T> std::fmt::Debug for Ring<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("capacity", &self.cells.len())
            .field("sent", &self.sent.load(Ordering::Relaxed))
            .field("dropped", &self.dropped.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Creates a queue holding at most `capacity` items, rounded up to a power of two.
pub fn experience_queue<T: Send>(
    capacity: usize,
) -> Result<(ExperienceSender<T>, ExperienceReceiver<T>), QueueCapacityError> {
    if capacity == 0 || capacity > MAX_QUEUE_CAPACITY {
        return Err(QueueCapacityError {
            requested: capacity,
            max: MAX_QUEUE_CAPACITY,
        });
    }
    let capacity = capacity.next_power_of_two();
    let cells: Box<[Cell<T>]> = (0..capacity)
        .map(|i| Cell {
            sequence: AtomicUsize::new(i),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        })
        .collect();
    let ring = Arc::new(Ring {
        cells,
        mask: capacity - 1,
        tail: AtomicUsize::new(0),
        head: AtomicUsize::new(0),
        sent: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
    });
    Ok((
        ExperienceSender {
            ring: Arc::clone(&ring),
        },
        ExperienceReceiver { ring },
    ))
}

impl<T> Ring<T> {
    fn cell(&self, pos: usize) -> &Cell<T> {
        &self.cells[pos & self.mask]
    }

    fn push(&self, value: T) -> Result<(), T> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let cell = self.cell(pos);
            let sequence = cell.sequence.load(Ordering::Acquire);
            let lag = sequence.wrapping_sub(pos) as isize;
            if lag == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the CAS for `pos` while the cell's sequence equals
                        // `pos` gives this producer exclusive access to the cell until the
                        // release store below hands it to the consumer.
                        cell.value.with_mut(|slot| unsafe { (*slot).write(value) });
                        cell.sequence.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(actual) => pos = actual,
                }
            } else if lag < 0 {
                // The cell still holds an item from one lap ago: the ring is full.
                return Err(value);
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    fn pop(&self) -> Option<T> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let cell = self.cell(pos);
            let sequence = cell.sequence.load(Ordering::Acquire);
            let lag = sequence.wrapping_sub(pos.wrapping_add(1)) as isize;
            if lag == 0 {
                match self.head.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the sequence `pos + 1` (acquired above) says a producer wrote
                        // the cell and released it; winning the CAS makes this the only reader.
                        let value = cell
                            .value
                            .with_mut(|slot| unsafe { (*slot).assume_init_read() });
                        cell.sequence
                            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(value);
                    }
                    Err(actual) => pos = actual,
                }
            } else if lag < 0 {
                return None;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // Drop the items still queued (no other handle exists any more).
        while self.pop().is_some() {}
    }
}

/// The hot path's end of the queue. `Clone`; every clone feeds the same receiver.
#[derive(Debug)]
pub struct ExperienceSender<T> {
    ring: Arc<Ring<T>>,
}

impl<T> Clone for ExperienceSender<T> {
    fn clone(&self) -> Self {
        ExperienceSender {
            ring: Arc::clone(&self.ring),
        }
    }
}

impl<T> ExperienceSender<T> {
    /// Queues `item`; when the ring is full the item is dropped, counted, and false returned.
    /// Never blocks, never allocates.
    pub fn send(&self, item: T) -> bool {
        match self.ring.push(item) {
            Ok(()) => {
                self.ring.sent.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_dropped) => {
                self.ring.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Items dropped because the ring was full, over the queue's life.
    pub fn dropped(&self) -> u64 {
        self.ring.dropped.load(Ordering::Relaxed)
    }

    /// Items queued successfully, over the queue's life.
    pub fn sent(&self) -> u64 {
        self.ring.sent.load(Ordering::Relaxed)
    }

    /// Cells in the ring.
    pub fn capacity(&self) -> usize {
        self.ring.cells.len()
    }
}

/// The learner's end of the queue. There is exactly one per queue.
#[derive(Debug)]
pub struct ExperienceReceiver<T> {
    ring: Arc<Ring<T>>,
}

impl<T> ExperienceReceiver<T> {
    /// Takes the oldest queued item, if any. Never blocks.
    pub fn recv(&mut self) -> Option<T> {
        self.ring.pop()
    }

    /// Moves up to `max` queued items onto the end of `batch`; returns how many.
    pub fn drain_into(&mut self, batch: &mut Vec<T>, max: usize) -> usize {
        let mut moved = 0;
        while moved < max {
            match self.ring.pop() {
                Some(item) => {
                    batch.push(item);
                    moved += 1;
                }
                None => break,
            }
        }
        moved
    }

    /// Items dropped because the ring was full, over the queue's life.
    pub fn dropped(&self) -> u64 {
        self.ring.dropped.load(Ordering::Relaxed)
    }

    /// Items queued successfully, over the queue's life.
    pub fn sent(&self) -> u64 {
        self.ring.sent.load(Ordering::Relaxed)
    }

    /// Cells in the ring.
    pub fn capacity(&self) -> usize {
        self.ring.cells.len()
    }

    /// True when no sender is left (every [`ExperienceSender`] was dropped).
    pub fn is_disconnected(&self) -> bool {
        Arc::strong_count(&self.ring) == 1
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_capacity() {
        assert_eq!(
            experience_queue::<u32>(0).unwrap_err().requested,
            0,
            "zero capacity"
        );
        assert!(experience_queue::<u32>(MAX_QUEUE_CAPACITY + 1).is_err());
        let (tx, _rx) = experience_queue::<u32>(5).unwrap();
        assert_eq!(tx.capacity(), 8);
    }

    #[test]
    fn fifo_then_drops_and_counts_when_full() {
        let (tx, mut rx) = experience_queue::<u32>(4).unwrap();
        for i in 0..4 {
            assert!(tx.send(i));
        }
        // Full: these return at once, dropped and counted.
        for i in 4..10 {
            assert!(!tx.send(i));
        }
        assert_eq!((tx.sent(), tx.dropped()), (4, 6));
        assert_eq!(rx.recv(), Some(0));
        assert!(tx.send(100));
        let mut batch = Vec::new();
        assert_eq!(rx.drain_into(&mut batch, 16), 4);
        assert_eq!(batch, vec![1, 2, 3, 100]);
        assert_eq!(rx.recv(), None);
        assert!(!rx.is_disconnected());
        drop(tx);
        assert!(rx.is_disconnected());
    }

    #[test]
    fn queued_items_are_dropped_with_the_queue() {
        let item = Arc::new(());
        let (tx, rx) = experience_queue::<Arc<()>>(8).unwrap();
        tx.send(Arc::clone(&item));
        tx.send(Arc::clone(&item));
        assert_eq!(Arc::strong_count(&item), 3);
        drop((tx, rx));
        assert_eq!(Arc::strong_count(&item), 1);
    }

    #[test]
    fn producers_never_block_on_a_stalled_consumer() {
        // Nobody consumes: four producers each push 100k items into a 64-cell ring. If a push
        // could block, this test would hang; instead everything past 64 is dropped and counted.
        let (tx, mut rx) = experience_queue::<u64>(64).unwrap();
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..100_000u64 {
                        tx.send(p * 1_000_000 + i);
                    }
                })
            })
            .collect();
        for handle in producers {
            handle.join().unwrap();
        }
        assert_eq!(tx.sent(), 64);
        assert_eq!(tx.dropped(), 400_000 - 64);
        let mut batch = Vec::new();
        assert_eq!(rx.drain_into(&mut batch, usize::MAX), 64);
    }

    #[test]
    fn concurrent_producers_and_consumer_lose_nothing_unaccounted() {
        let (tx, mut rx) = experience_queue::<u64>(256).unwrap();
        let producers: Vec<_> = (0..3u64)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..50_000u64 {
                        tx.send((p << 32) | i);
                    }
                })
            })
            .collect();
        let mut received = 0u64;
        let mut last = [None::<u64>; 3];
        let mut finished = false;
        while !finished {
            finished = producers.iter().all(|h| h.is_finished());
            while let Some(item) = rx.recv() {
                let (p, i) = ((item >> 32) as usize, item & 0xffff_ffff);
                // Per producer, items arrive in the order they were sent.
                assert!(last[p].is_none_or(|prev| prev < i));
                last[p] = Some(i);
                received += 1;
            }
        }
        for handle in producers {
            handle.join().unwrap();
        }
        while rx.recv().is_some() {
            received += 1;
        }
        assert_eq!(received, tx.sent());
        assert_eq!(tx.sent() + tx.dropped(), 150_000);
    }
}
