//! The latest-wins, versioned weight slot between a learner and the schedulers that use its
//! weights (DESIGN.md "learners"; EdAR §IV-C and FALCON §4 both train asynchronously and hand
//! fresh weights to the running policy).
//!
//! One [`SlotWriter`] (the learner) publishes immutable weight sets; any number of
//! [`SlotReader`]s (one per scheduler) each hold the set they decide with. Every publish bumps a
//! `u64` version. At each decision a reader calls [`SlotReader::refresh`]: one atomic load when
//! nothing changed; when the version moved, a `try_lock` around a pointer copy. A reader never
//! waits: if the writer (or another reader) holds the lock at that instant, the reader keeps its
//! current weights and takes the new ones at a later decision. Weights are never modified after
//! publication, so a reader can never see a torn set, and versions a reader sees never go back.
//!
//! Memory is freed on the writer's side: a replaced set is kept on the writer's retired list
//! until no reader refers to it, so a reader dropping its old set never runs a deallocation on the
//! hot path (while the writer is alive).

use super::sync::{Arc, AtomicU64, Mutex, Ordering};

/// One published weight set and its version.
#[derive(Debug)]
struct Published<W> {
    version: u64,
    weights: Arc<W>,
}

/// What writer and readers share.
#[derive(Debug)]
struct Shared<W> {
    /// The version of `current`, readable without the lock (a hint: it is written while the lock
    /// is held, after `current` changed).
    version: AtomicU64,
    /// The newest set. Held only for a pointer copy or swap.
    current: Mutex<Published<W>>,
}

/// Creates a slot holding `initial` as version 0, and its writer and a first reader.
pub fn weight_slot<W>(initial: W) -> (SlotWriter<W>, SlotReader<W>) {
    let weights = Arc::new(initial);
    let shared = Arc::new(Shared {
        version: AtomicU64::new(0),
        current: Mutex::new(Published {
            version: 0,
            weights: Arc::clone(&weights),
        }),
    });
    let reader = SlotReader {
        shared: Arc::clone(&shared),
        weights,
        version: 0,
    };
    let writer = SlotWriter {
        shared,
        version: 0,
        retired: Vec::new(),
    };
    (writer, reader)
}

/// The learner's end of a weight slot. There is exactly one per slot.
#[derive(Debug)]
pub struct SlotWriter<W> {
    shared: Arc<Shared<W>>,
    version: u64,
    /// Replaced sets that a reader may still hold; freed here once no reader does.
    retired: Vec<Arc<W>>,
}

impl<W> SlotWriter<W> {
    /// Publishes `weights` as the newest set and returns its version (one more than the last).
    /// Readers pick it up at their next [`SlotReader::refresh`]. May wait for a reader's pointer
    /// copy (a few nanoseconds); never runs on the hot path.
    pub fn publish(&mut self, weights: W) -> u64 {
        let fresh = Arc::new(weights);
        let replaced = {
            // A poisoned lock only means a panic elsewhere while it was held; the data (a version
            // and a pointer) is always consistent, so carry on with it.
            let mut current = self
                .shared
                .current
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.version = current.version + 1;
            let replaced = std::mem::replace(&mut current.weights, fresh);
            current.version = self.version;
            self.shared.version.store(self.version, Ordering::Release);
            replaced
        };
        self.retired.push(replaced);
        self.reclaim();
        self.version
    }

    /// The version of the newest published set (0 for the initial one).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// A new reader, starting from the newest set.
    pub fn reader(&self) -> SlotReader<W> {
        let current = self
            .shared
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        SlotReader {
            shared: Arc::clone(&self.shared),
            weights: Arc::clone(&current.weights),
            version: current.version,
        }
    }

    /// Replaced sets still held by some reader.
    pub fn retired_len(&self) -> usize {
        self.retired.len()
    }

    /// Frees the retired sets no reader holds any more.
    pub fn reclaim(&mut self) {
        // `strong_count == 1`: only this list refers to it, and no reader can obtain it again
        // (it is no longer `current`), so dropping it here is the final release.
        self.retired
            .retain(|weights| Arc::strong_count(weights) > 1);
    }
}

/// A scheduler's end of a weight slot: the set it decides with, and its version.
#[derive(Debug)]
pub struct SlotReader<W> {
    shared: Arc<Shared<W>>,
    weights: Arc<W>,
    version: u64,
}

impl<W> Clone for SlotReader<W> {
    fn clone(&self) -> Self {
        SlotReader {
            shared: Arc::clone(&self.shared),
            weights: Arc::clone(&self.weights),
            version: self.version,
        }
    }
}

impl<W> SlotReader<W> {
    /// Takes the newest set if a newer one was published and the slot is not being written at
    /// this instant; returns true when the weights changed. Never blocks and never allocates;
    /// call it once per decision.
    pub fn refresh(&mut self) -> bool {
        if self.shared.version.load(Ordering::Acquire) == self.version {
            return false;
        }
        let (weights, version) = match self.shared.current.try_lock() {
            Ok(current) => (Arc::clone(&current.weights), current.version),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                let current = poisoned.into_inner();
                (Arc::clone(&current.weights), current.version)
            }
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        if version <= self.version {
            return false;
        }
        self.weights = weights;
        self.version = version;
        true
    }

    /// The set this reader decides with.
    pub fn weights(&self) -> &W {
        &self.weights
    }

    /// The version of [`SlotReader::weights`].
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The newest published version (it may not have been taken yet).
    pub fn latest_version(&self) -> u64 {
        self.shared.version.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn reader_sees_latest_after_publishes() {
        let (mut writer, mut reader) = weight_slot(vec![0u32; 4]);
        assert_eq!(reader.version(), 0);
        assert!(!reader.refresh());
        assert_eq!(writer.publish(vec![1; 4]), 1);
        assert_eq!(writer.publish(vec![2; 4]), 2);
        assert_eq!(reader.latest_version(), 2);
        assert_eq!(reader.version(), 0);
        assert!(reader.refresh());
        assert_eq!(reader.version(), 2);
        assert_eq!(reader.weights(), &vec![2; 4]);
        assert!(!reader.refresh());
        let late = writer.reader();
        assert_eq!((late.version(), late.weights()[0]), (2, 2));
    }

    /// Counts how many sets were dropped, and on which side.
    struct Tracked(Arc<AtomicUsize>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn reader_never_frees_old_sets() {
        let freed = Arc::new(AtomicUsize::new(0));
        let (mut writer, mut reader) = weight_slot(Tracked(Arc::clone(&freed)));
        writer.publish(Tracked(Arc::clone(&freed)));
        // The reader still holds version 0, so it stays on the retired list.
        assert_eq!(writer.retired_len(), 1);
        assert!(reader.refresh());
        // The reader let go of version 0, but the writer still holds it: nothing freed yet.
        assert_eq!(freed.load(Ordering::SeqCst), 0);
        writer.reclaim();
        assert_eq!(freed.load(Ordering::SeqCst), 1);
        assert_eq!(writer.retired_len(), 0);
    }

    #[test]
    fn readers_never_wait_for_a_held_lock() {
        let (mut writer, mut reader) = weight_slot(0u64);
        writer.publish(1);
        let guard = writer.shared.current.lock().unwrap();
        // The lock is held (as if mid-publish): the reader keeps what it has, immediately.
        assert!(!reader.refresh());
        assert_eq!(*reader.weights(), 0);
        drop(guard);
        assert!(reader.refresh());
        assert_eq!(*reader.weights(), 1);
    }

    #[test]
    fn concurrent_publish_and_read_is_monotonic() {
        let (mut writer, reader) = weight_slot([0u64; 8]);
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let mut reader = reader.clone();
                std::thread::spawn(move || {
                    let mut last = 0;
                    while last < 2_000 {
                        reader.refresh();
                        let set = reader.weights();
                        assert!(set.iter().all(|&w| w == reader.version()), "torn set");
                        assert!(reader.version() >= last, "version went back");
                        last = reader.version();
                    }
                })
            })
            .collect();
        for v in 1..=2_000u64 {
            assert_eq!(writer.publish([v; 8]), v);
        }
        for handle in readers {
            handle.join().unwrap();
        }
    }
}
