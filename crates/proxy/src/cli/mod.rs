//! The `braid` command line (see the CLI contract in the design guide). Exit codes: 0 success,
//! 2 bad usage or bad config, 1 runtime error.
//!
//! One file per subcommand; this module only parses and dispatches.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `print!` that never panics: writes to standard output and says whether that worked. It fails
/// when standard output is a pipe whose reader has gone (`braid emu | head`), where `print!`
/// panics; a command that prints for as long as it runs stops then.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!($($arg)*))
    };
}

/// `println!` that never panics (see [`out!`]).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod client;
mod demo;
mod emu;
mod notify;
mod process;
mod schedulers;
mod server;
mod sim;
mod status;
mod train;

pub use schedulers::scheduler_catalogue;

/// braid: a multipath QUIC proxy daemon (docs/cli.md documents every command and flag).
#[derive(Debug, Parser)]
#[command(
    name = "braid",
    version,
    after_help = "Exit codes: 0 success, 2 bad usage or bad configuration, 1 runtime error."
)]
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
    /// The client daemon: links to the server, SOCKS5, HTTP CONNECT and TUN inbounds.
    Client(client::ClientArgs),
    /// The server daemon: accepts clients' paths and sends their traffic on.
    Server(server::ServerArgs),
    /// The running daemon's paths, scheduler and counters.
    Status(status::StatusArgs),
    /// Deterministic simulation of a scenario file per scheduler (table, JSON, report).
    Sim(sim::SimArgs),
    /// The real-time link emulator: a shaped UDP relay per path on loopback (docs/emu.md).
    Emu(emu::EmuArgs),
    /// The whole system in one process on loopback, with a live per-path view and a summary.
    Demo(demo::DemoArgs),
    /// Offline training of a learned scheduler (edar, falcon) in the simulator (feature `torch`).
    Train(train::TrainArgs),
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
    let code = match cli.command {
        Command::Schedulers => {
            out!("{}", scheduler_catalogue());
            ExitCode::SUCCESS
        }
        Command::Client(args) => client::run(&args),
        Command::Server(args) => server::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Sim(args) => sim::run(&args),
        Command::Emu(args) => emu::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Train(args) => train::run(&args),
    };
    // Online learners (a daemon's, or one that reading a learned `[scheduler]` for `--check`
    // started) stop before the process exits (`train::stop_learners`).
    crate::train::stop_learners();
    code
}

/// Writes `args` to standard output and flushes it; `false` when that failed (see [`out!`]).
pub(crate) fn write_out(args: std::fmt::Arguments<'_>) -> bool {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    stdout.write_fmt(args).and_then(|()| stdout.flush()).is_ok()
}

/// The metrics endpoint's part of a `--check` line: `, metrics ADDR (bearer token)` or
/// `(no authentication)`; nothing when it is off.
pub(crate) fn metrics_summary(
    listen: Option<std::net::SocketAddr>,
    token: bool,
    tls: bool,
) -> String {
    listen.map_or_else(String::new, |addr| {
        let auth = if token {
            "bearer token"
        } else {
            "no authentication"
        };
        let scheme = if tls { "https" } else { "http" };
        format!(", metrics {scheme}://{addr}/metrics ({auth})")
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use clap::CommandFactory as _;

    use super::*;

    /// The `## braid <name>` section of docs/cli.md.
    fn section<'a>(doc: &'a str, name: &str) -> &'a str {
        let head = format!("\n## braid {name}\n");
        let start = doc
            .find(&head)
            .unwrap_or_else(|| panic!("docs/cli.md has no section {head:?}"))
            + head.len();
        let end = doc[start..].find("\n## ").map_or(doc.len(), |e| start + e);
        &doc[start..end]
    }

    /// The `--flag` names in the code spans of `text` that are a flag or a `braid` command line.
    fn documented_flags(text: &str) -> BTreeSet<String> {
        text.split('`')
            .skip(1)
            .step_by(2)
            .filter(|code| code.starts_with("--") || code.starts_with("braid "))
            .flat_map(|code| code.split(|c: char| c.is_whitespace() || "[]()|,".contains(c)))
            .filter_map(|w| w.strip_prefix("--"))
            .filter(|f| !f.is_empty() && f.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn docs_cli_md_lists_exactly_the_real_flags() {
        let doc = include_str!("../../../../docs/cli.md");
        let cli = Cli::command();
        let mut seen = 0;
        for sub in cli.get_subcommands() {
            let name = sub.get_name();
            let real: BTreeSet<String> = sub
                .get_arguments()
                .filter_map(|a| a.get_long())
                .filter(|l| *l != "help")
                .map(str::to_owned)
                .collect();
            let text = section(doc, name);
            let documented = documented_flags(text);
            assert_eq!(documented, real, "docs/cli.md section `braid {name}`");
            for short in sub.get_arguments().filter_map(|a| a.get_short()) {
                assert!(text.contains(&format!("`-{short}`")), "{name}: -{short}");
            }
            seen += 1;
        }
        assert_eq!(
            seen, 8,
            "a subcommand was added: document it in docs/cli.md"
        );
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        for args in [
            &["braid", "demo", "--bogus"][..],
            &["braid", "demo", "--duration", "abc"],
            &["braid", "client"],
            &["braid", "status", "-c", "a.toml", "--socket", "s"],
            &["braid", "emu", "-c", "e.toml", "--stats-interval", "x"],
            &["braid", "nope"],
        ] {
            let e = Cli::try_parse_from(args).unwrap_err();
            assert!(e.use_stderr(), "{args:?}");
        }
    }
}
