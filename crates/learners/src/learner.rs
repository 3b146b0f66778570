//! The learner thread: drains the experience queue, batches it, runs a training step, and
//! publishes the weights it returns into the weight slot (DESIGN.md "learners"; EdAR §IV-C's
//! asynchronous online learning and FALCON §4.3's fine-tuning both run this way).
//!
//! Training (tch) is blocking and CPU-heavy, so it runs on a dedicated `std::thread`, never on the
//! async I/O threads. The hot path only ever touches the queue's sender (never blocks) and the
//! slot's reader (never waits). The learner sleeps while the queue is empty, waking every
//! `poll_interval` to look again; [`Learner::stop`] (or dropping the [`Learner`]) wakes it, lets it
//! train on what is still queued, and joins it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use braid_sched_core::slot::{ExperienceReceiver, SlotWriter};

/// One training step: from a batch of experience to, possibly, new weights.
///
/// Implemented by the EdAR and FALCON trainers, and by any `FnMut(&[E]) -> Option<W>` closure.
pub trait TrainStep<E, W>: Send {
    /// Why a step failed; the learner logs it, counts it and goes on with the next batch.
    type Error: std::fmt::Display;

    /// Learns from `batch` (never empty) and returns weights to publish, if it has new ones.
    fn train(&mut self, batch: &[E]) -> Result<Option<W>, Self::Error>;
}

impl<E, W, F> TrainStep<E, W> for F
where
    F: FnMut(&[E]) -> Option<W> + Send,
{
    type Error = std::convert::Infallible;

    fn train(&mut self, batch: &[E]) -> Result<Option<W>, Self::Error> {
        Ok(self(batch))
    }
}

/// How a [`Learner`] batches and waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LearnerConfig {
    /// Thread name (shows in `top -H` and panics).
    pub name: String,
    /// Largest batch handed to one training step.
    pub max_batch: usize,
    /// Smallest batch worth a training step; smaller ones wait for more experience (until stop).
    pub min_batch: usize,
    /// How long the thread sleeps when the queue is empty before looking again.
    pub poll_interval: Duration,
}

impl Default for LearnerConfig {
    fn default() -> Self {
        LearnerConfig {
            name: "braid-learner".to_owned(),
            max_batch: 64,
            min_batch: 1,
            poll_interval: Duration::from_millis(2),
        }
    }
}

/// What a learner did over its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LearnerStats {
    /// Experience items taken from the queue.
    pub experiences: u64,
    /// Training steps run.
    pub steps: u64,
    /// Training steps that failed.
    pub failed_steps: u64,
    /// Weight sets published.
    pub published: u64,
    /// The slot's version after the last publish (0 if none).
    pub version: u64,
}

/// Why a learner could not start or did not end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum LearnerError {
    /// The configuration is unusable.
    #[error("learner config `{field}` = {value}: {expected}")]
    Config {
        /// The field.
        field: &'static str,
        /// Its value.
        value: usize,
        /// What is accepted.
        expected: &'static str,
    },
    /// The OS refused to start the thread.
    #[error("could not start learner thread `{name}`: {source}")]
    Spawn {
        /// The thread name.
        name: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The training step panicked; the thread is gone.
    #[error("learner thread `{name}` panicked")]
    Panicked {
        /// The thread name.
        name: String,
    },
}

/// A running learner thread. Stop it with [`Learner::stop`] to get its statistics; dropping it
/// stops it too.
#[derive(Debug)]
pub struct Learner {
    name: String,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<LearnerStats>>,
}

impl Learner {
    /// Starts a thread that feeds `experience` to `step` and publishes into `weights`.
    pub fn spawn<E, W, T>(
        config: LearnerConfig,
        experience: ExperienceReceiver<E>,
        weights: SlotWriter<W>,
        step: T,
    ) -> Result<Self, LearnerError>
    where
        E: Send + 'static,
        W: Send + Sync + 'static,
        T: TrainStep<E, W> + 'static,
    {
        if config.max_batch == 0 {
            return Err(LearnerError::Config {
                field: "max_batch",
                value: 0,
                expected: "at least 1",
            });
        }
        if config.min_batch == 0 || config.min_batch > config.max_batch {
            return Err(LearnerError::Config {
                field: "min_batch",
                value: config.min_batch,
                expected: "between 1 and max_batch",
            });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            config: config.clone(),
            experience,
            weights,
            step,
            stop: Arc::clone(&stop),
            stats: LearnerStats::default(),
        };
        let handle = std::thread::Builder::new()
            .name(config.name.clone())
            .spawn(move || worker.run())
            .map_err(|source| LearnerError::Spawn {
                name: config.name.clone(),
                source,
            })?;
        Ok(Learner {
            name: config.name,
            stop,
            handle: Some(handle),
        })
    }

    /// Asks the thread to finish (it trains once more on what is queued), waits for it, and
    /// returns what it did.
    pub fn stop(mut self) -> Result<LearnerStats, LearnerError> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<LearnerStats, LearnerError> {
        self.stop.store(true, Ordering::Release);
        let Some(handle) = self.handle.take() else {
            return Ok(LearnerStats::default());
        };
        handle.thread().unpark();
        handle.join().map_err(|_| LearnerError::Panicked {
            name: self.name.clone(),
        })
    }
}

impl Drop for Learner {
    fn drop(&mut self) {
        if let Err(error) = self.shut_down() {
            tracing::error!(%error, "learner ended badly");
        }
    }
}

/// The state that lives on the learner thread.
struct Worker<E, W, T> {
    config: LearnerConfig,
    experience: ExperienceReceiver<E>,
    weights: SlotWriter<W>,
    step: T,
    stop: Arc<AtomicBool>,
    stats: LearnerStats,
}

impl<E, W, T: TrainStep<E, W>> Worker<E, W, T> {
    fn run(mut self) -> LearnerStats {
        let mut batch = Vec::with_capacity(self.config.max_batch);
        loop {
            let stopping = self.stop.load(Ordering::Acquire);
            let room = self.config.max_batch - batch.len();
            let taken = self.experience.drain_into(&mut batch, room);
            self.stats.experiences += taken as u64;
            let full = batch.len() == self.config.max_batch;
            if full || (taken == 0 && batch.len() >= self.config.min_batch) {
                self.train(&mut batch);
                continue;
            }
            if stopping && taken == 0 {
                // Queue drained after the stop request: a last step on the remainder.
                if !batch.is_empty() {
                    self.train(&mut batch);
                }
                return self.stats;
            }
            if taken == 0 {
                std::thread::park_timeout(self.config.poll_interval);
            }
        }
    }

    fn train(&mut self, batch: &mut Vec<E>) {
        self.stats.steps += 1;
        match self.step.train(batch) {
            Ok(Some(weights)) => {
                self.stats.version = self.weights.publish(weights);
                self.stats.published += 1;
            }
            Ok(None) => {}
            Err(error) => {
                self.stats.failed_steps += 1;
                tracing::warn!(%error, batch = batch.len(), "training step failed");
            }
        }
        batch.clear();
        self.weights.reclaim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_sched_core::slot::{experience_queue, weight_slot};

    #[test]
    fn trains_in_batches_and_publishes() {
        let (tx, rx) = experience_queue::<u32>(1024).unwrap();
        let (writer, mut reader) = weight_slot(0u64);
        for i in 1..=100 {
            assert!(tx.send(i));
        }
        let config = LearnerConfig {
            max_batch: 16,
            ..LearnerConfig::default()
        };
        let mut sum = 0u64;
        let learner = Learner::spawn(config, rx, writer, move |batch: &[u32]| {
            assert!(!batch.is_empty() && batch.len() <= 16);
            sum += batch.iter().map(|&v| u64::from(v)).sum::<u64>();
            Some(sum)
        })
        .unwrap();
        let stats = learner.stop().unwrap();
        assert_eq!(stats.experiences, 100);
        assert!(stats.steps >= 7, "{stats:?}");
        assert_eq!(stats.published, stats.steps);
        assert!(reader.refresh());
        assert_eq!(*reader.weights(), 5050);
        assert_eq!(reader.version(), stats.version);
    }

    #[test]
    fn waits_for_min_batch_until_stopped() {
        let (tx, rx) = experience_queue::<u32>(64).unwrap();
        let (writer, _reader) = weight_slot(0usize);
        let config = LearnerConfig {
            max_batch: 32,
            min_batch: 10,
            ..LearnerConfig::default()
        };
        let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&sizes);
        let learner = Learner::spawn(config, rx, writer, move |batch: &[u32]| {
            seen.lock().unwrap().push(batch.len());
            None::<usize>
        })
        .unwrap();
        for i in 0..3 {
            tx.send(i);
        }
        std::thread::sleep(Duration::from_millis(30));
        assert!(sizes.lock().unwrap().is_empty(), "trained below min_batch");
        let stats = learner.stop().unwrap();
        assert_eq!(*sizes.lock().unwrap(), vec![3]);
        assert_eq!((stats.steps, stats.published), (1, 0));
    }

    #[test]
    fn failed_steps_are_counted_and_panics_reported() {
        struct Failing;
        impl TrainStep<u8, u8> for Failing {
            type Error = String;
            fn train(&mut self, _batch: &[u8]) -> Result<Option<u8>, String> {
                Err("diverged".to_owned())
            }
        }
        let (tx, rx) = experience_queue::<u8>(8).unwrap();
        let (writer, _reader) = weight_slot(0u8);
        tx.send(1);
        let learner = Learner::spawn(LearnerConfig::default(), rx, writer, Failing).unwrap();
        let stats = learner.stop().unwrap();
        assert_eq!((stats.steps, stats.failed_steps), (1, 1));

        let (tx, rx) = experience_queue::<u8>(8).unwrap();
        let (writer, _reader) = weight_slot(0u8);
        tx.send(1);
        let learner = Learner::spawn(
            LearnerConfig::default(),
            rx,
            writer,
            |_: &[u8]| -> Option<u8> { panic!("boom") },
        )
        .unwrap();
        assert!(matches!(learner.stop(), Err(LearnerError::Panicked { .. })));
    }

    #[test]
    fn rejects_bad_config_and_drop_stops_the_thread() {
        let (_tx, rx) = experience_queue::<u8>(8).unwrap();
        let (writer, _reader) = weight_slot(0u8);
        let config = LearnerConfig {
            min_batch: 0,
            ..LearnerConfig::default()
        };
        let err = Learner::spawn(config, rx, writer, |_: &[u8]| None::<u8>).unwrap_err();
        assert!(err.to_string().contains("min_batch"), "{err}");

        let (_tx, rx) = experience_queue::<u8>(8).unwrap();
        let (writer, _reader) = weight_slot(0u8);
        let learner =
            Learner::spawn(LearnerConfig::default(), rx, writer, |_: &[u8]| None::<u8>).unwrap();
        // Dropping must join the thread promptly (the test would hang otherwise).
        drop(learner);
    }
}
