//! `braid client -c FILE [--check]`: the client daemon (links, session, SOCKS5/HTTP CONNECT inbounds,
//! control socket) until Ctrl-C or SIGTERM (then it closes its session so that the server hears
//! of it, see [`crate::daemon::ClientHandle::shutdown_gracefully`]).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::ClientConfig;

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
    let links: Vec<&str> = config.links.iter().map(|l| l.name.as_str()).collect();
    let mut inbounds = vec![format!("SOCKS5 {}", config.socks_listen)];
    if let Some(http) = config.http_listen {
        inbounds.push(format!("HTTP CONNECT {http}"));
    }
    if let Some(tun) = &config.tun {
        inbounds.push(format!("TUN {}", tun.name));
    }
    format!(
        "a valid client configuration: user {}, {} link{} ({}), scheduler {}, inbounds {}",
        config.user,
        links.len(),
        if links.len() == 1 { "" } else { "s" },
        links.join(", "),
        config.scheduler.kind().name(),
        inbounds.join(", ")
    )
}

/// Starts the tracing subscriber (`RUST_LOG`, default `info`), coloured only on a terminal (so
/// the journal and log files get plain text).
pub(crate) fn init_logging() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// Builds the multi-threaded runtime, or reports why not (exit 1).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("braid: cannot start the async runtime: {e}");
            ExitCode::from(1)
        })
}

/// Waits for Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

/// Runs until Ctrl-C or SIGTERM, calling `on_hangup` at each SIGHUP (`systemctl reload`),
/// whose default action, ending the process, it replaces.
pub(crate) async fn until_shutdown(mut on_hangup: impl AsyncFnMut()) {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            // Never, when SIGHUP cannot be watched.
            Some(()) = async {
                match hup.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            } => on_hangup().await,
        }
    }
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
        println!("{}: {}", args.config.display(), summary(&config));
        return ExitCode::SUCCESS;
    }
    init_logging();
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let mut client = match crate::daemon::start_client(config).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("braid: {e}");
                return ExitCode::from(1);
            }
        };
        tracing::info!(socks = %client.socks_addr, http = ?client.http_addr, control = %client.control_path.display(), "client running");
        until_shutdown(async || {
            tracing::warn!(
                "SIGHUP: the client does not reload its configuration; restart it to apply a \
                 changed file"
            );
        })
        .await;
        tracing::info!("client stopping");
        client.shutdown_gracefully().await;
        ExitCode::SUCCESS
    })
}
