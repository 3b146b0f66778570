//! The `braid` command line (see the CLI contract in the design guide). Exit codes: 0 success,
//! 2 bad usage or bad config, 1 runtime error.

use std::process::ExitCode;

use braid_sched_core::SchedulerKind;
use clap::{Parser, Subcommand};

/// braid: a multipath QUIC proxy daemon.
#[derive(Debug, Parser)]
#[command(name = "braid", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the built-in schedulers with their parameters and defaults.
    Schedulers,
}

/// Parses `std::env::args` and runs the command.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Schedulers => {
            print!("{}", scheduler_catalogue());
            ExitCode::SUCCESS
        }
    }
}

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
