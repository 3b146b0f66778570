//! Priority tiers: backup paths carry traffic only when no primary path is live.
//!
//! Every scheduler applies the same rule through [`TierGate`]: while some primary path is live
//! (neither failed, potentially failed nor degraded, see [`PathView::is_live_primary`]), only
//! primary paths may be chosen, even when their windows are full, their rate caps hold them back
//! or their pacers do: the packet waits for them. Once every primary path has failed, or had a
//! probe timeout with nothing acknowledged since, backup paths may be chosen too. This is the
//! failover rule of Linux MPTCP's default scheduler (v0.95: a backup subflow is used only when
//! every active one is unavailable for good or potentially failed, not while one is only
//! temporarily full), and what a metered standby link (LTE behind Wi-Fi) needs: a transfer that
//! fills the primaries does not spill onto it.
//!
//! One addition, off unless the daemon is given a floor: a primary that stays busy yet delivers
//! less than the floor ([`PathView::degraded`]: a Wi-Fi link losing packets at the edge of its
//! range, where a loss-based controller's window collapses) no longer keeps the backups out.
//! Backups then share the traffic with the primaries that still carry what they can.

use crate::path::PathView;

/// Which tiers may carry the packet being placed; computed once per decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierGate {
    backups_allowed: bool,
}

impl TierGate {
    /// Looks at every path once and decides whether backups may be used.
    pub fn new(paths: &[PathView]) -> Self {
        TierGate {
            backups_allowed: !paths.iter().any(PathView::is_live_primary),
        }
    }

    /// True when `path`'s tier may carry the packet (its own usability is checked separately).
    pub fn admits(self, path: &PathView) -> bool {
        self.backups_allowed || !path.is_backup()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{PathId, PathState};

    #[test]
    fn backups_only_when_no_primary_is_live() {
        let mut primary = PathView::new(PathId(0), 10_000, 10_000);
        let mut backup = PathView::new(PathId(1), 5_000, 10_000);
        backup.state = PathState::Backup;
        let gate = TierGate::new(&[primary, backup]);
        assert!(gate.admits(&primary));
        assert!(!gate.admits(&backup));

        // A full window, a rate cap or a pacer only hold the primary back for a while.
        primary.bytes_in_flight = 9_500;
        primary.rate_limited = true;
        assert!(!TierGate::new(&[primary, backup]).admits(&backup));

        // A probe timeout with nothing acknowledged since: the primary may be dark.
        primary.potentially_failed = true;
        assert!(TierGate::new(&[primary, backup]).admits(&backup));

        primary.potentially_failed = false;
        primary.state = PathState::Failed;
        assert!(TierGate::new(&[primary, backup]).admits(&backup));

        // A primary that stays busy below its floor lets the backups help, and is still chosen.
        primary.state = PathState::Active;
        primary.degraded = true;
        let gate = TierGate::new(&[primary, backup]);
        assert!(gate.admits(&backup) && gate.admits(&primary));

        // Only backups: they carry everything.
        assert!(TierGate::new(&[backup]).admits(&backup));
        // Two primaries: one live one keeps the backups out.
        let other = PathView::new(PathId(2), 20_000, 10_000);
        assert!(!TierGate::new(&[primary, other, backup]).admits(&backup));
    }
}
