//! A datagram flow's receive bookkeeping: the sequence numbers seen lately, so that copies of a
//! datagram (a redundant scheduler's, a duplicating link's) are delivered once, and datagrams
//! that arrive cut into DATAGRAM_FRAGMENT frames, put back together.
//!
//! A flow keeps at most [`MAX_PARTIALS`] datagrams by sequence number, oldest first: a piece of a
//! new one when all are taken evicts the oldest (its pieces so far are lost, like a datagram
//! whose packet was lost). A datagram delivered whole keeps its entry (without bytes) until
//! evicted, so copies of its pieces (a redundant scheduler sends each piece on several paths)
//! do not deliver it again. Pieces whose count disagrees with the first piece's, pieces already
//! held, and datagrams that would grow past the session's `max_datagram_payload` are ignored.

use std::collections::VecDeque;

use super::datagram::DatagramQueue;
use super::frame::{Fragment, MAX_FRAGMENTS};

/// Datagrams a flow reassembles at once.
pub(crate) const MAX_PARTIALS: usize = 4;

/// The sequence numbers a flow has delivered lately: the highest and the 63 below it.
#[derive(Debug, Default)]
pub(crate) struct SeqWindow {
    /// The highest seen plus one (0: none yet).
    next: u64,
    /// Bit `i`: `next - 1 - i` was seen.
    bits: u64,
}

impl SeqWindow {
    /// Whether `seq` was seen (false for a number more than 63 below the highest: too old to
    /// tell).
    pub fn contains(&self, seq: u64) -> bool {
        seq < self.next && {
            let age = self.next - 1 - seq;
            age < 64 && self.bits & (1u64 << age) != 0
        }
    }

    /// Records `seq`; false when it was seen already. A number more than 63 below the highest
    /// is too old to tell and counts as new.
    pub fn insert(&mut self, seq: u64) -> bool {
        if seq >= self.next {
            let shift = (seq - self.next).saturating_add(1);
            self.bits = if shift >= 64 { 0 } else { self.bits << shift } | 1;
            self.next = seq.saturating_add(1);
            return true;
        }
        let age = self.next - 1 - seq;
        if age >= 64 {
            return true;
        }
        let bit = 1u64 << age;
        let new = self.bits & bit == 0;
        self.bits |= bit;
        new
    }
}

/// One datagram being put back together.
#[derive(Debug)]
struct Partial {
    seq: u64,
    count: u8,
    /// Bit `i`: piece `i` is held (or, once `done`, was).
    have: u8,
    /// Where piece `i` lies in `bytes`: start and length.
    spans: [(usize, usize); MAX_FRAGMENTS as usize],
    /// The pieces in arrival order; empty (returned to the pool) once done.
    bytes: Vec<u8>,
    /// Delivered, or given up (too long).
    done: bool,
}

/// A flow's datagrams in pieces.
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    partials: VecDeque<Partial>,
}

impl Reassembly {
    /// Takes one piece of datagram `seq`; returns the datagram once it is whole. Buffers come
    /// from and go back to `pool`.
    pub fn add(
        &mut self,
        seq: u64,
        piece: Fragment,
        data: &[u8],
        max_len: usize,
        pool: &mut DatagramQueue,
    ) -> Option<Vec<u8>> {
        let at = match self.partials.iter().position(|p| p.seq == seq) {
            Some(at) => at,
            None => {
                if self.partials.len() >= MAX_PARTIALS
                    && let Some(old) = self.partials.pop_front()
                {
                    pool.recycle(old.bytes);
                }
                self.partials.push_back(Partial {
                    seq,
                    count: piece.count,
                    have: 0,
                    spans: [(0, 0); MAX_FRAGMENTS as usize],
                    bytes: pool.buffer_with(&[]),
                    done: false,
                });
                self.partials.len() - 1
            }
        };
        let p = &mut self.partials[at];
        let bit = 1u8 << piece.index;
        if p.done || p.count != piece.count || p.have & bit != 0 {
            return None;
        }
        if p.bytes.len() + data.len() > max_len {
            p.done = true;
            pool.recycle(std::mem::take(&mut p.bytes));
            return None;
        }
        p.spans[usize::from(piece.index)] = (p.bytes.len(), data.len());
        p.bytes.extend_from_slice(data);
        p.have |= bit;
        if u32::from(p.have) != (1u32 << p.count) - 1 {
            return None;
        }
        let mut whole = pool.buffer_with(&[]);
        for &(start, len) in &p.spans[..usize::from(p.count)] {
            whole.extend_from_slice(&p.bytes[start..start + len]);
        }
        p.done = true;
        pool.recycle(std::mem::take(&mut p.bytes));
        Some(whole)
    }

    /// Bytes allocated.
    pub fn allocated(&self) -> u64 {
        self.partials
            .iter()
            .map(|p| p.bytes.capacity() as u64)
            .sum::<u64>()
            + (self.partials.capacity() * std::mem::size_of::<Partial>()) as u64
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::session::SessionConfig;

    fn piece(index: u8, count: u8) -> Fragment {
        Fragment { index, count }
    }

    #[test]
    fn each_sequence_number_is_new_once_within_the_window() {
        let mut w = SeqWindow::default();
        assert!(!w.contains(0));
        assert!(w.insert(0));
        assert!(w.contains(0));
        assert!(!w.insert(0));
        assert!(w.insert(5));
        assert!(w.insert(3));
        assert!(!w.insert(3));
        assert!(!w.insert(5));
        assert!(w.insert(1));
        assert!(w.insert(68));
        // 5 is 63 below 68: still remembered; 4 (64 below) is too old to tell.
        assert!(w.contains(5) && !w.contains(4) && !w.contains(67) && w.contains(68));
        assert!(!w.insert(5));
        assert!(w.insert(4));
        assert!(w.insert(4));
        assert!(w.insert(1000));
        assert!(!w.insert(1000));
        assert!(w.insert(999));
        assert!(w.insert(u64::MAX - 1));
        assert!(!w.insert(u64::MAX - 1));
    }

    #[test]
    fn pieces_in_any_order_make_the_datagram_once() {
        let mut pool = DatagramQueue::new(&SessionConfig::default());
        let mut r = Reassembly::default();
        assert_eq!(r.add(7, piece(2, 3), b"ghi", 100, &mut pool), None);
        assert_eq!(r.add(7, piece(0, 3), b"abc", 100, &mut pool), None);
        assert_eq!(r.add(7, piece(0, 3), b"xyz", 100, &mut pool), None);
        assert_eq!(
            r.add(7, piece(1, 3), b"def", 100, &mut pool).as_deref(),
            Some(&b"abcdefghi"[..])
        );
        // Copies of its pieces do not deliver it again.
        for i in 0..3 {
            assert_eq!(r.add(7, piece(i, 3), b"abc", 100, &mut pool), None);
        }
    }

    #[test]
    fn a_piece_disagreeing_on_the_count_or_past_the_limit_is_ignored() {
        let mut pool = DatagramQueue::new(&SessionConfig::default());
        let mut r = Reassembly::default();
        assert_eq!(r.add(1, piece(0, 2), b"ab", 4, &mut pool), None);
        assert_eq!(r.add(1, piece(1, 3), b"cd", 4, &mut pool), None);
        assert_eq!(
            r.add(1, piece(1, 2), b"cd", 4, &mut pool).as_deref(),
            Some(&b"abcd"[..])
        );
        // Five bytes in pieces against a limit of four: given up, even when the rest comes.
        assert_eq!(r.add(2, piece(0, 2), b"abc", 4, &mut pool), None);
        assert_eq!(r.add(2, piece(1, 2), b"de", 4, &mut pool), None);
        assert_eq!(r.add(2, piece(1, 2), b"d", 4, &mut pool), None);
    }

    #[test]
    fn at_most_four_datagrams_wait_and_the_oldest_goes_first() {
        let mut pool = DatagramQueue::new(&SessionConfig::default());
        let mut r = Reassembly::default();
        for seq in 0..5 {
            assert_eq!(r.add(seq, piece(0, 2), b"a", 100, &mut pool), None);
        }
        assert_eq!(r.partials.len(), MAX_PARTIALS);
        // Datagram 0 was evicted: its second piece starts it anew and does not complete it.
        assert_eq!(r.add(0, piece(1, 2), b"b", 100, &mut pool), None);
        // Datagram 4 is still held (1 was evicted for 0 just now).
        assert_eq!(
            r.add(4, piece(1, 2), b"b", 100, &mut pool).as_deref(),
            Some(&b"ab"[..])
        );
        assert!(r.allocated() > 0);
    }
}
