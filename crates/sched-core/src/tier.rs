//! Priority tiers: backup paths carry traffic only when no primary path can.
//!
//! Every scheduler applies the same rule through [`TierGate`]: when some live primary path has
//! window headroom for the packet, only primary paths may be chosen; otherwise (every primary is
//! failed, rate-limited or saturated: overflow) backup paths may be chosen too.

use crate::path::PathView;

/// Which tiers may carry the packet being placed; computed once per decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierGate {
    backups_allowed: bool,
}

impl TierGate {
    /// Looks at every path once and decides whether backups may be used for a packet of `len`
    /// bytes.
    pub fn new(paths: &[PathView], len: u32) -> Self {
        let primary_has_room = paths.iter().any(|p| !p.is_backup() && p.can_send(len));
        TierGate {
            backups_allowed: !primary_has_room,
        }
    }

    /// True when `path`'s tier may carry the packet (its own usability is checked separately).
    pub fn admits(self, path: &PathView) -> bool {
        self.backups_allowed || !path.is_backup()
    }

    /// True when the packet may go to backup paths.
    pub fn backups_allowed(self) -> bool {
        self.backups_allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{PathId, PathState};

    #[test]
    fn backups_only_on_overflow_or_failure() {
        let mut primary = PathView::new(PathId(0), 10_000, 10_000);
        let mut backup = PathView::new(PathId(1), 5_000, 10_000);
        backup.state = PathState::Backup;
        let gate = TierGate::new(&[primary, backup], 1_200);
        assert!(gate.admits(&primary));
        assert!(!gate.admits(&backup));

        primary.bytes_in_flight = 9_500; // saturated: overflow to backup
        assert!(TierGate::new(&[primary, backup], 1_200).admits(&backup));

        primary.bytes_in_flight = 0;
        primary.state = PathState::Failed;
        assert!(TierGate::new(&[primary, backup], 1_200).admits(&backup));
    }
}
