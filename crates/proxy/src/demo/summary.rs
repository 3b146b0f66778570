//! The demo's closing summary: each single link's measured goodput, the multipath goodput,
//! bytes and per-path share, the goodput inside the handoff window and the ratio to the best
//! single link.

use super::{DemoSummary, PhaseResult};

impl std::fmt::Display for DemoSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "braid demo summary")?;
        let singles: Vec<&PhaseResult> = self
            .phases
            .iter()
            .filter(|p| p.handoff.is_none() && p.name != "multipath")
            .collect();
        writeln!(
            f,
            "  best single link, measured: the same download through each emulated link alone \
             (a client with only that link):"
        )?;
        for p in &singles {
            writeln!(
                f,
                "    {:<10} {:>6.1} Mbit/s  ({:.1} MB in {:.1} s)",
                p.name,
                p.goodput_mbps(),
                p.bytes as f64 / 1e6,
                p.seconds
            )?;
        }
        let best = singles
            .iter()
            .map(|p| (p.name.as_str(), p.goodput_mbps()))
            .fold(("none", 0.0), |a, b| if b.1 > a.1 { b } else { a });
        let Some(multi) = self.phases.iter().find(|p| p.name == "multipath") else {
            return Ok(());
        };
        let total: u64 = multi.path_bytes.iter().map(|(_, b)| b).sum();
        writeln!(
            f,
            "  multipath (wifi + lte):  {:>6.1} Mbit/s  ({:.1} MB in {:.1} s, every byte verified)",
            multi.goodput_mbps(),
            multi.bytes as f64 / 1e6,
            multi.seconds
        )?;
        let shares: Vec<String> = multi
            .path_bytes
            .iter()
            .map(|(n, b)| format!("{n} {:.0}%", 100.0 * *b as f64 / total.max(1) as f64))
            .collect();
        writeln!(
            f,
            "    per-path share of bytes delivered to the client: {}",
            shares.join(", ")
        )?;
        if let Some((g, a, b)) = multi.handoff {
            writeln!(
                f,
                "    during the handoff (wifi dark, {a:.1} s to {b:.1} s of the transfer): {g:.1} Mbit/s"
            )?;
        }
        if best.1 > 0.0 {
            writeln!(
                f,
                "  multipath vs best single link ({}): {:.2}x",
                best.0,
                multi.goodput_mbps() / best.1
            )?;
        }
        Ok(())
    }
}
