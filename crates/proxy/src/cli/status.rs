//! `braid status [-c FILE | --socket PATH] [--json | --prometheus]`: the running daemon's
//! paths, scheduler, model version and counters, read from its control socket.

use std::path::PathBuf;
use std::process::ExitCode;

use super::process::runtime;
use crate::control;

/// Arguments of `braid status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The daemon's configuration file (its `state_dir` holds the socket).
    #[arg(
        short = 'c',
        long = "config",
        value_name = "FILE",
        conflicts_with = "socket"
    )]
    pub config: Option<PathBuf>,
    /// The control socket itself.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print the JSON document instead of a table.
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// Print the Prometheus text exposition (the metrics endpoint's answer) instead of a table.
    #[arg(long)]
    pub prometheus: bool,
}

/// Runs `braid status`.
pub fn run(args: &StatusArgs) -> ExitCode {
    let path = match (&args.socket, &args.config) {
        (Some(p), _) => p.clone(),
        (None, Some(file)) => match crate::config::detect_role(file) {
            Ok((role, dir)) => control::socket_path(&dir, role),
            Err(e) => {
                eprintln!("braid: {e}");
                return ExitCode::from(2);
            }
        },
        (None, None) => {
            eprintln!("braid: status needs -c FILE or --socket PATH");
            return ExitCode::from(2);
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(control::query(&path)) {
        Ok(status) => {
            if args.json {
                match serde_json::to_string_pretty(&status) {
                    Ok(s) => {
                        outln!("{s}");
                    }
                    Err(e) => {
                        eprintln!("braid: {e}");
                        return ExitCode::from(1);
                    }
                }
            } else if args.prometheus {
                out!("{}", crate::metrics::render(&status));
            } else {
                out!("{}", status.to_table());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "braid: cannot query the daemon's control socket {e}; is the daemon running, \
                 and may this user open its state_dir?"
            );
            ExitCode::from(1)
        }
    }
}
