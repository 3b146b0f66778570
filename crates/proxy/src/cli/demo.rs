//! `braid demo [--duration SECONDS] [--seed N]`: the whole system in one process on loopback
//! (server, client, emulated Wi-Fi and LTE with a handoff, a download through the SOCKS5
//! inbound), a live per-path view and a closing summary against the best single link, measured
//! (see [`crate::demo`]). Exit code 0 when every phase's download ran and verified, 1 when one
//! failed, 2 for bad arguments.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::Duration;

use super::client::runtime;
use crate::demo::{DURATION_RANGE_S, DemoOptions};

/// Arguments of `braid demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Transfer time over all phases, seconds (10 to 600).
    #[arg(long, value_name = "SECONDS", default_value_t = 20.0)]
    pub duration: f64,
    /// Seed of the emulated links' random draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs `braid demo`.
pub fn run(args: &DemoArgs) -> ExitCode {
    let (low, high) = DURATION_RANGE_S;
    if !(low..=high).contains(&args.duration) {
        eprintln!(
            "braid: --duration: expected seconds in [{low}, {high}], got {}",
            args.duration
        );
        return ExitCode::from(2);
    }
    let options = DemoOptions {
        duration: Duration::from_secs_f64(args.duration),
        seed: args.seed,
        tty: std::io::stdout().is_terminal(),
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let mut out = std::io::stdout();
        match crate::demo::run(&options, &mut out).await {
            Ok(summary) => {
                println!("{summary}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("braid demo: {e}");
                ExitCode::from(1)
            }
        }
    })
}
