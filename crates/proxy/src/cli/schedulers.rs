//! `braid schedulers`: the built-in schedulers with their parameters and defaults.

use braid_sched_core::SchedulerKind;

/// The text `braid schedulers` prints: every scheduler with its source and parameters.
pub fn scheduler_catalogue() -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for &kind in SchedulerKind::ALL {
        let info = kind.info();
        let _ = writeln!(out, "{:<10} {}", kind.name(), info.summary);
        let _ = writeln!(out, "{:<10} source: {}", "", info.source);
        if info.params.is_empty() {
            let _ = writeln!(out, "{:<10} parameters: none", "");
        }
        for p in info.params {
            let _ = writeln!(
                out,
                "{:<10} {} = {} ({})",
                "", p.name, p.default, p.description
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_lists_every_scheduler() {
        let text = scheduler_catalogue();
        for &kind in SchedulerKind::ALL {
            assert!(text.contains(kind.name()), "{} missing", kind.name());
        }
    }
}
