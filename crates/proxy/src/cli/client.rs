//! `braid client -c FILE [--check]`: the client daemon (links, session, SOCKS5/HTTP CONNECT inbounds,
//! control socket) until Ctrl-C or SIGTERM (then it closes its session so that the server hears
//! of it, see [`crate::daemon::ClientHandle::shutdown_gracefully`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::notify;
use super::process::{Signals, init_logging, log_reload, reread, runtime};
use crate::config::{BudgetClock, BudgetPeriod, ClientConfig, WhenSpent};

/// Arguments of `braid client`.
#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    /// The client configuration file (see docs/config.md).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: PathBuf,
    /// Check the configuration file, print what it sets up and exit (0 valid, 2 not); nothing
    /// is started, opened or created.
    #[arg(long)]
    pub check: bool,
}

/// What a valid client configuration sets up, in one line (`--check`).
fn summary(config: &ClientConfig) -> String {
    let links: Vec<String> = config
        .links
        .iter()
        .map(|l| {
            let name = match l.interface.as_deref() {
                Some(pattern) if l.is_pattern() => {
                    format!("{} on each device {pattern}", l.name)
                }
                _ => l.name.clone(),
            };
            (name, l.budget)
        })
        .map(|(name, budget)| match budget {
            None => name,
            Some(b) => {
                let per = match b.period {
                    BudgetPeriod::Day => "a day".to_owned(),
                    BudgetPeriod::Month { reset_day: 1 } => "a month".to_owned(),
                    BudgetPeriod::Month { reset_day } => {
                        format!("a month from day {reset_day}")
                    }
                };
                let then = match b.when_spent {
                    WhenSpent::Leave => "",
                    WhenSpent::Backup => ", then backup",
                };
                let utc = match b.clock {
                    BudgetClock::Local => "",
                    BudgetClock::Utc => " (UTC)",
                };
                format!("{name} with {} MiB {per}{utc}{then}", b.bytes >> 20)
            }
        })
        .collect();
    let mut inbounds = vec![format!("SOCKS5 {}", config.socks_listen)];
    if let Some(http) = config.http_listen {
        inbounds.push(format!("HTTP CONNECT {http}"));
    }
    if let Some(tun) = &config.tun {
        inbounds.push(format!("TUN {}", tun.name));
    }
    let routes: Vec<String> = config
        .routes
        .iter()
        .map(|r| format!("{} {}", r.action.name(), r.summary()))
        .collect();
    let routes = match routes.is_empty() {
        true => String::new(),
        false => format!(", routes ({})", routes.join("; ")),
    };
    format!(
        "a valid client configuration: user {}, {} link{} ({}), scheduler {}, inbounds {}{routes}{}",
        config.user,
        links.len(),
        if links.len() == 1 { "" } else { "s" },
        links.join(", "),
        config.scheduler.kind().name(),
        inbounds.join(", "),
        super::metrics_summary(
            config.metrics_listen,
            config.metrics_token.is_some(),
            config.metrics_tls.is_some(),
        ),
    )
}

/// SIGHUP: reads `path` again and puts in force what a running client can take (see
/// [`crate::daemon::ClientHandle::reload`]); a file that does not load changes nothing (the
/// error).
async fn reload(path: &Path, client: &crate::daemon::ClientHandle) -> Result<(), String> {
    let config = reread(ClientConfig::load(path))?;
    let done = client.reload(config).await;
    log_reload(path, &done.changed, &done.needs_restart);
    Ok(())
}

/// Runs `braid client`.
pub fn run(args: &ClientArgs) -> ExitCode {
    let config = match ClientConfig::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("braid: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        for (route, by) in crate::config::shadowed(&config.routes) {
            eprintln!(
                "braid: warning: {}: route[{route}] never matches: route[{by}] takes every \
                 destination it could",
                args.config.display()
            );
        }
        outln!("{}: {}", args.config.display(), summary(&config));
        return ExitCode::SUCCESS;
    }
    init_logging();
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let signals = Signals::watch(true);
        let mut client = match crate::daemon::start_client(config).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("braid: {e}");
                return ExitCode::from(1);
            }
        };
        tracing::info!(socks = %client.socks_addr, http = ?client.http_addr, control = %client.control_path.display(), "client running");
        notify::serve(
            signals,
            async || reload(&args.config, &client).await,
            || client.status(),
        )
        .await;
        tracing::info!("client stopping");
        client.shutdown_gracefully().await;
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_summary_names_each_link_its_pattern_and_its_budget() {
        let text = format!(
            "user = \"a\"\nkey = \"{}\"\nserver_fingerprint = \"{}\"\n\
             [[link]]\nname = \"wifi\"\ninterface = \"wlan0\"\nserver = \"h:1\"\n\
             [[link]]\nname = \"tether\"\ninterface = \"usb*\"\nserver = \"h:1\"\n\
             budget_mib = 1024\nbudget_reset_day = 15\n\
             [[link]]\nname = \"lte\"\nserver = \"h:1\"\nbudget_mib = 50\nbudget_period = \"day\"\n\
             budget_spent = \"backup\"\nbudget_timezone = \"UTC\"\n\
             [[route]]\naction = \"direct\"\nnetworks = [\"192.168.0.0/16\"]\ndomains = [\"lan\"]\n\
             [[route]]\naction = \"block\"\nports = [25]\n",
            "11".repeat(32),
            "22".repeat(32)
        );
        let config = ClientConfig::parse(Path::new("c.toml"), &text).unwrap();
        assert_eq!(
            summary(&config),
            "a valid client configuration: user a, 3 links (wifi, tether on each device usb* \
             with 1024 MiB a month from day 15, lte with 50 MiB a day (UTC), then backup), scheduler minrtt, \
             inbounds SOCKS5 127.0.0.1:1080, routes (direct 1 network, 1 domain; block every \
             destination, ports 25)"
        );
    }
}
