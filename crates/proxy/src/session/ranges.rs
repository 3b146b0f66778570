//! A set of `u64` values stored as sorted, disjoint, non-adjacent half-open ranges. The session
//! uses it for received packet numbers (the source of ACK ranges), for the acknowledged and lost
//! byte ranges of a flow's send side, and for the received byte ranges of its receive side.
//!
//! The storage is a `Vec` reserved when the owner is created; in steady state (few holes) it does
//! not grow, so the per-packet paths do not allocate.

use std::ops::Range;

/// Sorted disjoint ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<Range<u64>>,
}

impl RangeSet {
    /// An empty set with room for `n` ranges before it allocates.
    pub fn with_capacity(n: usize) -> Self {
        RangeSet {
            ranges: Vec::with_capacity(n),
        }
    }

    /// Number of disjoint ranges.
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// True when the set is empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Bytes of storage reserved.
    pub fn capacity_bytes(&self) -> usize {
        self.ranges.capacity() * std::mem::size_of::<Range<u64>>()
    }

    /// The ranges, lowest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Range<u64>> + '_ {
        self.ranges.iter().cloned()
    }

    /// The lowest range.
    pub fn first(&self) -> Option<Range<u64>> {
        self.ranges.first().cloned()
    }

    /// One past the largest value.
    pub fn max_end(&self) -> Option<u64> {
        self.ranges.last().map(|r| r.end)
    }

    /// True when `v` is in the set.
    pub fn contains(&self, v: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= v);
        self.ranges.get(i).is_some_and(|r| r.start <= v)
    }

    /// How many values of `r` are already in the set.
    pub fn overlap(&self, r: Range<u64>) -> u64 {
        let mut total = 0;
        let i = self.ranges.partition_point(|x| x.end <= r.start);
        for x in &self.ranges[i..] {
            if x.start >= r.end {
                break;
            }
            total += x.end.min(r.end) - x.start.max(r.start);
        }
        total
    }

    /// True when adding `r` would not add a range: `r` is empty, or overlaps or adjoins one.
    pub fn touches(&self, r: Range<u64>) -> bool {
        if r.start >= r.end {
            return true;
        }
        let lo = self.ranges.partition_point(|x| x.end < r.start);
        self.ranges.get(lo).is_some_and(|x| x.start <= r.end)
    }

    /// Adds `r`; returns how many of its values were new.
    pub fn insert(&mut self, r: Range<u64>) -> u64 {
        if r.start >= r.end {
            return 0;
        }
        let new = (r.end - r.start) - self.overlap(r.clone());
        if new == 0 {
            return 0;
        }
        // First range that touches or follows r (end >= r.start), last one that touches it.
        let lo = self.ranges.partition_point(|x| x.end < r.start);
        let hi = self.ranges.partition_point(|x| x.start <= r.end);
        if lo == hi {
            self.ranges.insert(lo, r);
        } else {
            let start = self.ranges[lo].start.min(r.start);
            let end = self.ranges[hi - 1].end.max(r.end);
            self.ranges[lo] = start..end;
            self.ranges.drain(lo + 1..hi);
        }
        new
    }

    /// Removes every value of `r`.
    pub fn remove(&mut self, r: Range<u64>) {
        if r.start >= r.end {
            return;
        }
        let mut i = self.ranges.partition_point(|x| x.end <= r.start);
        while i < self.ranges.len() && self.ranges[i].start < r.end {
            let x = self.ranges[i].clone();
            if x.start < r.start && x.end > r.end {
                self.ranges[i] = x.start..r.start;
                self.ranges.insert(i + 1, r.end..x.end);
                return;
            }
            if x.start < r.start {
                self.ranges[i].end = r.start;
                i += 1;
            } else if x.end > r.end {
                self.ranges[i].start = r.end;
                return;
            } else {
                self.ranges.remove(i);
            }
        }
    }

    /// Removes every value below `v`.
    pub fn remove_below(&mut self, v: u64) {
        let i = self.ranges.partition_point(|x| x.end <= v);
        self.ranges.drain(..i);
        if let Some(first) = self.ranges.first_mut() {
            first.start = first.start.max(v);
        }
    }

    /// Drops the lowest ranges until at most `n` remain.
    pub fn keep_highest(&mut self, n: usize) {
        if self.ranges.len() > n {
            let excess = self.ranges.len() - n;
            self.ranges.drain(..excess);
        }
    }

    /// Removes and returns up to `max_len` values from the start of the lowest range.
    pub fn pop_front(&mut self, max_len: u64) -> Option<Range<u64>> {
        let first = self.ranges.first_mut()?;
        let end = first.end.min(first.start.saturating_add(max_len));
        let out = first.start..end;
        first.start = end;
        if first.start >= first.end {
            self.ranges.remove(0);
        }
        Some(out)
    }

    /// Empties the set, keeping its storage.
    pub fn clear(&mut self) {
        self.ranges.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn insert_merges_and_counts_new_values() {
        let mut s = RangeSet::with_capacity(4);
        assert_eq!(s.insert(10..20), 10);
        assert_eq!(s.insert(30..40), 10);
        assert_eq!(s.insert(15..35), 10);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![10..40]);
        assert_eq!(s.insert(40..41), 1);
        assert_eq!(s.insert(12..13), 0);
        assert!(s.contains(40) && !s.contains(41) && !s.contains(9));
    }

    #[test]
    fn remove_splits() {
        let mut s = RangeSet::default();
        s.insert(0..100);
        s.remove(10..20);
        s.remove(95..200);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0..10, 20..95]);
        assert_eq!(s.pop_front(4), Some(0..4));
        s.remove_below(30);
        assert_eq!(s.first(), Some(30..95));
        s.insert(100..101);
        s.keep_highest(1);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![100..101]);
    }

    proptest! {
        #[test]
        fn matches_a_naive_set(ops in proptest::collection::vec((any::<bool>(), 0u64..200, 0u64..30), 1..60)) {
            let mut s = RangeSet::default();
            let mut naive = [false; 256];
            for (add, start, len) in ops {
                let r = start..start + len;
                if add {
                    let new = r.clone().filter(|&v| !naive[v as usize]).count() as u64;
                    prop_assert_eq!(s.insert(r.clone()), new);
                    for v in r { naive[v as usize] = true; }
                } else {
                    s.remove(r.clone());
                    for v in r { naive[v as usize] = false; }
                }
                for v in 0..256u64 {
                    prop_assert_eq!(s.contains(v), naive[v as usize]);
                }
                let v: Vec<_> = s.iter().collect();
                for w in v.windows(2) {
                    prop_assert!(w[0].end < w[1].start);
                }
            }
        }
    }
}
