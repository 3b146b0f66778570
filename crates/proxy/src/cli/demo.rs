//! `braid demo [--duration SECONDS] [--seed N] [--congestion NAME]`: the whole system in one process on loopback
//! (server, client, emulated Wi-Fi and LTE with a handoff, a download through the SOCKS5
//! inbound), a live per-path view and a closing summary against the best single link, measured
//! (see [`crate::demo`]). Exit code 0 when every phase's download ran and verified, 1 when one
//! failed, 2 for bad arguments.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::Duration;

use super::process::runtime;
use crate::demo::{DURATION_RANGE_S, DemoOptions};

/// Arguments of `braid demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Transfer time over all phases, seconds (10 to 600).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 20.0,
        allow_negative_numbers = true
    )]
    pub duration: f64,
    /// Seed of the emulated links' random draws.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub seed: u64,
    /// The congestion controller of both daemons' paths: cubic (the default), newreno, bbr,
    /// lia or olia.
    #[arg(long, value_name = "NAME", default_value = "cubic")]
    pub congestion: String,
}

/// Checks `--duration` (seconds in [`DURATION_RANGE_S`]).
fn duration(seconds: f64) -> Result<Duration, String> {
    let (low, high) = DURATION_RANGE_S;
    if (low..=high).contains(&seconds) {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(format!(
            "--duration: expected seconds in [{low}, {high}], got {seconds}"
        ))
    }
}

/// Runs `braid demo`.
pub fn run(args: &DemoArgs) -> ExitCode {
    let duration = match duration(args.duration) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("braid: {e}");
            return ExitCode::from(2);
        }
    };
    let congestion = match args.congestion.parse() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("braid: --congestion: {e}");
            return ExitCode::from(2);
        }
    };
    let options = DemoOptions {
        congestion,
        duration,
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
                outln!("{summary}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("braid demo: {e}");
                ExitCode::from(1)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};
    use crate::session::congestion::CongestionAlgorithm;

    fn parsed(args: &[&str]) -> DemoArgs {
        match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Demo(a)) => a,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn duration_is_range_checked_negative_included() {
        let a = parsed(&["braid", "demo", "--duration", "-1"]);
        assert_eq!(
            duration(a.duration).unwrap_err(),
            "--duration: expected seconds in [10, 600], got -1"
        );
        for bad in [9.99, 600.5, f64::NAN, f64::INFINITY] {
            assert!(duration(bad).is_err(), "{bad}");
        }
        let a = parsed(&["braid", "demo", "--duration", "10"]);
        assert_eq!(duration(a.duration).unwrap(), Duration::from_secs(10));
        assert_eq!(parsed(&["braid", "demo"]).duration, 20.0);
    }

    #[test]
    fn an_unknown_congestion_controller_exits_2_before_anything_starts() {
        assert_eq!(parsed(&["braid", "demo"]).congestion, "cubic");
        let a = parsed(&["braid", "demo", "--congestion", "vegas"]);
        assert_eq!(run(&a), ExitCode::from(2));
        let a = parsed(&["braid", "demo", "--congestion", "OLIA"]);
        assert_eq!(a.congestion.parse(), Ok(CongestionAlgorithm::Olia));
    }

    #[test]
    fn negative_seed_names_the_flag() {
        let e = Cli::try_parse_from(["braid", "demo", "--seed", "-3"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid value '-3' for '--seed <N>'"), "{e}");
    }
}
