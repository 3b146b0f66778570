//! `braid server -c FILE [--print-fingerprint | --check]`: the server daemon until Ctrl-C or SIGTERM (then
//! it closes its sessions so that clients hear of it, see
//! [`crate::daemon::ServerHandle::shutdown_gracefully`]), or just the certificate fingerprint
//! clients pin (the certificate is generated on first use).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::notify;
use super::process::{Signals, init_logging, log_reload, reread, runtime};
use crate::config::ServerConfig;
use crate::tls::ServerIdentity;

/// Arguments of `braid server`.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// The server configuration file (see docs/config.md).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: PathBuf,
    /// Print the certificate's SHA-256 fingerprint (for clients' `server_fingerprint`) and exit.
    #[arg(long, conflicts_with = "check")]
    pub print_fingerprint: bool,
    /// Check the configuration file, print what it sets up and exit (0 valid, 2 not); nothing
    /// is started, opened or created (not even the certificate).
    #[arg(long)]
    pub check: bool,
}

/// What a valid server configuration sets up, in one line (`--check`).
fn summary(config: &ServerConfig) -> String {
    let egress = match (config.egress.allow_private, config.egress.allow_loopback) {
        (false, false) => "public addresses only",
        (true, false) => "private addresses allowed",
        (false, true) => "loopback allowed",
        (true, true) => "private and loopback addresses allowed",
    };
    let e = &config.egress;
    let mut lists = String::new();
    let networks = |n: usize| format!("{n} network{}", if n == 1 { "" } else { "s" });
    if !e.allow_networks.is_empty() {
        lists += &format!(", {} allowed", networks(e.allow_networks.len()));
    }
    if !e.deny_networks.is_empty() {
        lists += &format!(", {} denied", networks(e.deny_networks.len()));
    }
    if !e.deny_ports.is_empty() {
        let ports: Vec<String> = e.deny_ports.iter().map(ToString::to_string).collect();
        lists += &format!(", ports {} denied", ports.join(", "));
    }
    format!(
        "a valid server configuration: listen {}, {} user{}, scheduler {}, egress \
         {egress}{lists}{}",
        addresses(&config.listen),
        config.users.len(),
        if config.users.len() == 1 { "" } else { "s" },
        config.scheduler.kind().name(),
        super::metrics_summary(
            config.metrics_listen,
            config.metrics_token.is_some(),
            config.metrics_tls.is_some(),
        ),
    )
}

/// SIGHUP: reads `path` again and puts it in force (see [`crate::daemon::ServerHandle::reload`]);
/// a file that does not load changes nothing (the error).
async fn reload(path: &Path, server: &crate::daemon::ServerHandle) -> Result<(), String> {
    let config = reread(ServerConfig::load(path))?;
    let done = server.reload(config).await;
    log_reload(path, &done.changed, &done.needs_restart);
    if !done.revoked.is_empty() {
        tracing::info!(
            sessions = done.revoked.len(),
            "SIGHUP: the sessions of users removed or given another key were closed"
        );
    }
    Ok(())
}

/// Addresses as a list for people: `a, b and c`.
fn addresses(list: &[std::net::SocketAddr]) -> String {
    let text: Vec<String> = list.iter().map(ToString::to_string).collect();
    match text.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => text.join(""),
    }
}

/// Runs `braid server`.
pub fn run(args: &ServerArgs) -> ExitCode {
    let config = match ServerConfig::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("braid: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        outln!("{}: {}", args.config.display(), summary(&config));
        return ExitCode::SUCCESS;
    }
    let identity = match ServerIdentity::load_or_generate(&config.state_dir, &config.server_name) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("braid: {e}");
            return ExitCode::from(1);
        }
    };
    if args.print_fingerprint {
        outln!("{}", identity.fingerprint());
        return ExitCode::SUCCESS;
    }
    init_logging();
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let signals = Signals::watch(true);
        let mut server = match crate::daemon::start_server(config, identity).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("braid: {e}");
                return ExitCode::from(1);
            }
        };
        let listening = addresses(&server.listening());
        outln!("braid server listening on {listening}");
        outln!(
            "certificate fingerprint (server_fingerprint): {}",
            server.fingerprint
        );
        tracing::info!(addr = %listening, fingerprint = %server.fingerprint, "server running");
        notify::serve(
            signals,
            async || reload(&args.config, &server).await,
            || server.status(),
        )
        .await;
        tracing::info!("server stopping");
        server.shutdown_gracefully().await;
        ExitCode::SUCCESS
    })
}
