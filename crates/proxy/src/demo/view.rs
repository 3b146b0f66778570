//! The demo's live per-path view: one row per path (state, throughput, RTT, share) and the
//! total, printed every second; a block redrawn in place when stdout is a terminal, plain
//! lines otherwise (logs, CI).

use std::io::Write;

/// One path's figures at one sample.
#[derive(Clone, Debug)]
pub(crate) struct PathRow {
    pub name: String,
    /// `up`, `DOWN` (inside an emulated outage) or the session's path state.
    pub state: String,
    /// Bytes the emulated link delivered towards the client per second, Mbit/s.
    pub mbps: f64,
    /// The client's smoothed RTT of the path, ms (0 when unknown).
    pub rtt_ms: f64,
}

/// Draws samples.
#[derive(Debug)]
pub(crate) struct LiveView {
    tty: bool,
    drawn: usize,
}

impl LiveView {
    pub fn new(tty: bool) -> Self {
        LiveView { tty, drawn: 0 }
    }

    /// Ends the current block: the next sample starts a new one below it.
    pub fn finish_block(&mut self) {
        self.drawn = 0;
    }

    /// Prints one sample of `phase` at `t` seconds into it; `total_mbps` is the application's
    /// goodput over the last interval.
    pub fn render(
        &mut self,
        out: &mut dyn Write,
        phase: &str,
        t: f64,
        rows: &[PathRow],
        total_mbps: f64,
    ) -> std::io::Result<()> {
        let link_total: f64 = rows.iter().map(|r| r.mbps).sum();
        let share = |r: &PathRow| {
            if link_total >= 0.1 {
                100.0 * r.mbps / link_total
            } else {
                0.0
            }
        };
        if !self.tty {
            let mut line = format!("[{phase} {t:>5.1}s]");
            for r in rows {
                line.push_str(&format!(
                    " {} {} {:.1} Mbit/s {:.0} ms {:.0}% |",
                    r.name,
                    r.state,
                    r.mbps,
                    r.rtt_ms,
                    share(r)
                ));
            }
            line.push_str(&format!(" total goodput {total_mbps:.1} Mbit/s"));
            writeln!(out, "{line}")?;
            return out.flush();
        }
        if self.drawn > 0 {
            write!(out, "\x1b[{}A", self.drawn)?;
        }
        writeln!(out, "\x1b[2K{phase}  t = {t:.0} s")?;
        writeln!(
            out,
            "\x1b[2K  {:<8} {:<8} {:>12} {:>9} {:>7}",
            "path", "state", "throughput", "RTT", "share"
        )?;
        for r in rows {
            writeln!(
                out,
                "\x1b[2K  {:<8} {:<8} {:>7.1} Mbit/s {:>6.0} ms {:>6.0}%",
                r.name,
                r.state,
                r.mbps,
                r.rtt_ms,
                share(r)
            )?;
        }
        writeln!(out, "\x1b[2K  total goodput {total_mbps:.1} Mbit/s")?;
        self.drawn = rows.len() + 3;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<PathRow> {
        vec![
            PathRow {
                name: "wifi".into(),
                state: "up".into(),
                mbps: 30.0,
                rtt_ms: 21.0,
            },
            PathRow {
                name: "lte".into(),
                state: "DOWN".into(),
                mbps: 10.0,
                rtt_ms: 52.0,
            },
        ]
    }

    #[test]
    fn plain_lines_show_every_path_and_the_total() {
        let mut out = Vec::new();
        let mut view = LiveView::new(false);
        view.render(&mut out, "multipath", 3.0, &rows(), 38.5)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("wifi up 30.0 Mbit/s 21 ms 75%"), "{text}");
        assert!(text.contains("lte DOWN 10.0 Mbit/s 52 ms 25%"), "{text}");
        assert!(text.contains("total goodput 38.5"), "{text}");
        assert!(!text.contains('\x1b'));
    }

    #[test]
    fn a_terminal_block_is_redrawn_in_place() {
        let mut out = Vec::new();
        let mut view = LiveView::new(true);
        view.render(&mut out, "multipath", 1.0, &rows(), 1.0)
            .unwrap();
        assert!(!String::from_utf8_lossy(&out).contains("\x1b[5A"));
        view.render(&mut out, "multipath", 2.0, &rows(), 1.0)
            .unwrap();
        assert!(String::from_utf8_lossy(&out).contains("\x1b[5A"));
    }
}
