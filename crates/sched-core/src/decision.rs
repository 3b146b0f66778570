//! A scheduler's answer for one packet.

use crate::path::{MAX_PATHS, PathId};

/// A set of paths as a bit set over [`PathId`]s; `Copy`, never allocates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PathSet(u32);

const _: () = assert!(MAX_PATHS <= 32, "PathSet holds at most 32 paths");

impl PathSet {
    /// The empty set.
    pub const EMPTY: PathSet = PathSet(0);

    /// Adds `path` to the set.
    pub fn insert(&mut self, path: PathId) {
        self.0 |= 1 << (path.0 as u32 % 32);
    }

    /// True when `path` is in the set.
    pub fn contains(self, path: PathId) -> bool {
        self.0 & (1 << (path.0 as u32 % 32)) != 0
    }

    /// Number of paths in the set.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// True when no path is in the set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The paths in the set, lowest id first.
    pub fn iter(self) -> impl Iterator<Item = PathId> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let i = bits.trailing_zeros();
            bits &= bits - 1;
            Some(PathId(i as u8))
        })
    }
}

impl FromIterator<PathId> for PathSet {
    fn from_iter<I: IntoIterator<Item = PathId>>(iter: I) -> Self {
        let mut set = PathSet::EMPTY;
        for p in iter {
            set.insert(p);
        }
        set
    }
}

/// What to do with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Send it on this path.
    Send(PathId),
    /// Send a copy on every path of the set (redundant transmission).
    Duplicate(PathSet),
    /// Keep it queued; ask again when a path's window opens or a timer fires.
    Wait,
    /// Discard it (only for unreliable packets that can no longer meet their deadline).
    Drop,
}

impl Decision {
    /// The paths this decision sends on (empty for `Wait` and `Drop`).
    pub fn paths(self) -> PathSet {
        match self {
            Decision::Send(p) => PathSet::from_iter([p]),
            Decision::Duplicate(set) => set,
            Decision::Wait | Decision::Drop => PathSet::EMPTY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_set_round_trips() {
        let set: PathSet = [PathId(0), PathId(3), PathId(15)].into_iter().collect();
        assert_eq!(set.len(), 3);
        assert!(set.contains(PathId(3)));
        assert!(!set.contains(PathId(2)));
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            vec![PathId(0), PathId(3), PathId(15)]
        );
        assert_eq!(Decision::Duplicate(set).paths(), set);
        assert!(Decision::Wait.paths().is_empty());
        assert_eq!(Decision::Send(PathId(2)).paths().len(), 1);
    }

    #[test]
    fn decision_is_small() {
        assert!(std::mem::size_of::<Decision>() <= 8);
    }
}
