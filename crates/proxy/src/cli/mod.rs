//! The `braid` command line (see the CLI contract in the design guide). Exit codes: 0 success,
//! 2 bad usage or bad config, 1 runtime error.
//!
//! One file per subcommand; this module only parses and dispatches.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod client;
mod demo;
mod emu;
mod schedulers;
mod server;
mod sim;
mod status;
mod train;

pub use schedulers::scheduler_catalogue;

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
    /// The client daemon: links to the server, SOCKS5 and HTTP CONNECT inbounds.
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
    match cli.command {
        Command::Schedulers => {
            print!("{}", scheduler_catalogue());
            ExitCode::SUCCESS
        }
        Command::Client(args) => client::run(&args),
        Command::Server(args) => server::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Sim(args) => sim::run(&args),
        Command::Emu(args) => emu::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Train(args) => train::run(&args),
    }
}
