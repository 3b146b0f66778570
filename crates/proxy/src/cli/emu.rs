//! `braid emu -c FILE [--stats-interval SECONDS]`: the real-time link emulator
//! ([`braid_testbed::emu`], format in `docs/emu.md`) until Ctrl-C or SIGTERM, printing every
//! path's counters periodically.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use braid_testbed::emu::{EmuConfig, Emulator};

use super::process::{Signals, runtime};

/// Arguments of `braid emu`.
#[derive(Debug, clap::Args)]
pub struct EmuArgs {
    /// The emulator configuration file (see docs/emu.md).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: PathBuf,
    /// Seconds between counter reports (overrides the file's `stats_interval_s`).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub stats_interval: Option<f64>,
}

/// Runs `braid emu`.
pub fn run(args: &EmuArgs) -> ExitCode {
    let config = match EmuConfig::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("braid: {e}");
            return ExitCode::from(2);
        }
    };
    let interval = match args.stats_interval {
        None => config.stats_interval,
        Some(s) if (0.1..=3600.0).contains(&s) => Duration::from_secs_f64(s),
        Some(s) => {
            eprintln!("braid: --stats-interval: expected seconds in [0.1, 3600], got {s}");
            return ExitCode::from(2);
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let mut signals = Signals::watch(false);
        let mut emu = match Emulator::start(&config).await {
            Ok(e) => e,
            Err(e) => {
                eprintln!("braid: {}: {e}", config.file.display());
                return ExitCode::from(1);
            }
        };
        for (path, listen) in config.paths.iter().zip(emu.listen_addrs()) {
            let rebinds: Vec<String> = path
                .rebind_at
                .iter()
                .map(|t| format!("{}", t.as_secs_f64()))
                .collect();
            let rebinds = if rebinds.is_empty() {
                String::new()
            } else {
                format!("; NAT rebinding at {} s", rebinds.join(", "))
            };
            outln!(
                "braid emu: path {} {listen} -> {} (forward: {}; reverse: {}{rebinds})",
                path.link.name,
                path.forward,
                describe(&path.link.forward),
                describe(&path.link.reverse)
            );
        }
        let mut tick = tokio::time::interval(interval);
        tick.tick().await;
        loop {
            tokio::select! {
                // Standard output gone (`braid emu | head`): nobody reads the counters.
                _ = tick.tick() => if !print_stats(&emu) {
                    break;
                },
                () = signals.stopped() => break,
            }
        }
        print_stats(&emu);
        emu.shutdown();
        ExitCode::SUCCESS
    })
}

/// Prints every path's counters and the delivery lateness; `false` when standard output
/// failed.
fn print_stats(emu: &braid_testbed::emu::EmuHandle) -> bool {
    let mut printed = true;
    for s in emu.stats() {
        printed &= outln!("{s}");
    }
    let late = emu.lateness();
    printed
        & outln!(
            "  delivery lateness: mean {:.0} us, max {} us over {} datagrams",
            late.mean_us(),
            late.max_us,
            late.count
        )
}

/// A one-line summary of a link direction.
fn describe(link: &braid_testbed::LinkConfig) -> String {
    let capacity = match &link.capacity {
        braid_testbed::Capacity::Rate { mbps } => format!("{mbps} Mbit/s"),
        braid_testbed::Capacity::Trace(_) => "trace".to_string(),
    };
    format!(
        "{capacity}, {} ms, jitter {} ms, loss {}, queue {} pkts, {} outage(s), {} change(s)",
        link.delay_ms,
        link.jitter_ms,
        link.loss,
        link.queue_packets,
        link.outages.len(),
        link.changes.len()
    )
}
