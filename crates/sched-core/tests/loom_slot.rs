//! Exhaustive interleavings of the learner hand-off (src/slot) under loom.
//!
//! Run: `cargo test -p braid-sched-core --features loom --release --test loom_slot`.
//! Only built with the `loom` feature (see Cargo.toml `required-features`).
#![cfg(feature = "loom")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use braid_sched_core::slot::{experience_queue, weight_slot};
use loom::thread;

/// A weight set whose every value equals its version: a torn read would show mixed values.
#[derive(Debug)]
struct Set([u64; 4]);

impl Set {
    fn new(version: u64) -> Self {
        Set([version; 4])
    }
}

fn assert_consistent(set: &Set, version: u64) {
    assert!(
        set.0.iter().all(|&v| v == version),
        "torn set {set:?} at version {version}"
    );
}

#[test]
fn slot_reader_sees_whole_sets_in_order() {
    loom::model(|| {
        let (mut writer, mut reader) = weight_slot(Set::new(0));
        let learner = thread::spawn(move || {
            assert_eq!(writer.publish(Set::new(1)), 1);
            assert_eq!(writer.publish(Set::new(2)), 2);
            writer
        });
        let mut last = 0;
        for _ in 0..3 {
            reader.refresh();
            assert_consistent(reader.weights(), reader.version());
            assert!(reader.version() >= last, "version went back");
            last = reader.version();
        }
        let writer = learner.join().unwrap();
        // Once the writer is done the slot is free: the next refresh must take the newest set.
        reader.refresh();
        assert_eq!(reader.version(), 2);
        assert_consistent(reader.weights(), 2);
        drop(writer);
    });
}

#[test]
fn two_readers_and_a_writer() {
    loom::model(|| {
        let (mut writer, mut first) = weight_slot(Set::new(0));
        let mut second = first.clone();
        let other = thread::spawn(move || {
            second.refresh();
            assert_consistent(second.weights(), second.version());
            second.version()
        });
        writer.publish(Set::new(1));
        first.refresh();
        assert_eq!(
            first.version(),
            1,
            "no writer in flight: the refresh must succeed"
        );
        assert_consistent(first.weights(), 1);
        let seen = other.join().unwrap();
        assert!(seen <= 1);
        writer.reclaim();
    });
}

#[test]
fn queue_two_producers_one_consumer_accounts_for_every_item() {
    loom::model(|| {
        let (tx, mut rx) = experience_queue::<u32>(2).unwrap();
        let tx2 = tx.clone();
        let producer = thread::spawn(move || {
            tx2.send(10);
            tx2.send(11);
        });
        tx.send(20);
        let mut got = Vec::new();
        if let Some(item) = rx.recv() {
            got.push(item);
        }
        producer.join().unwrap();
        while let Some(item) = rx.recv() {
            got.push(item);
        }
        // Every item was either delivered or counted as dropped, never both, never lost.
        assert_eq!(got.len() as u64, tx.sent());
        assert_eq!(tx.sent() + tx.dropped(), 3);
        // Per producer, order is kept.
        let ours: Vec<_> = got.iter().filter(|&&v| (10..20).contains(&v)).collect();
        assert!(ours.windows(2).all(|w| w[0] < w[1]), "{got:?}");
    });
}

#[test]
fn queue_consumer_sees_complete_items() {
    loom::model(|| {
        let (tx, mut rx) = experience_queue::<[u32; 3]>(2).unwrap();
        let producer = thread::spawn(move || {
            for v in 1..=3u32 {
                tx.send([v; 3]);
            }
            tx
        });
        let mut seen = 0;
        for _ in 0..2 {
            if let Some(item) = rx.recv() {
                assert!(item.iter().all(|&x| x == item[0]), "torn item {item:?}");
                assert!(item[0] > seen, "out of order");
                seen = item[0];
            }
        }
        let tx = producer.join().unwrap();
        assert_eq!(tx.sent() + tx.dropped(), 3);
    });
}
