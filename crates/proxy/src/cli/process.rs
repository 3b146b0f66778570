//! The process around a command, shared by them all: logging, the async runtime, the signals
//! a daemon answers, and the log of a daemon's reload (so a server's log names this module,
//! not the client's).

use std::path::Path;
use std::process::ExitCode;

use tokio::signal::unix::{Signal, SignalKind};

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

/// The signals a daemon answers, watched from the moment this is made (so that one sent as
/// soon as the daemon says it runs is not missed): Ctrl-C (SIGINT) and SIGTERM end it; SIGHUP
/// (`systemctl reload`), whose default action would end the process, goes to the daemon when
/// watched.
pub(crate) struct Signals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
    hangup: Option<Signal>,
}

impl Signals {
    /// Starts watching (inside the runtime); SIGHUP only with `hangup` (a daemon's; a tool in
    /// a terminal keeps the default, so that closing the terminal ends it).
    pub(crate) fn watch(hangup: bool) -> Signals {
        let watch = |kind| tokio::signal::unix::signal(kind).ok();
        Signals {
            interrupt: watch(SignalKind::interrupt()),
            terminate: watch(SignalKind::terminate()),
            hangup: if hangup {
                watch(SignalKind::hangup())
            } else {
                None
            },
        }
    }

    /// Waits for Ctrl-C or SIGTERM.
    pub(crate) async fn stopped(&mut self) {
        tokio::select! {
            () = next(&mut self.interrupt) => {}
            () = next(&mut self.terminate) => {}
        }
    }

    /// Runs until Ctrl-C or SIGTERM, calling `on_hangup` at each SIGHUP.
    pub(crate) async fn until_stopped(mut self, mut on_hangup: impl AsyncFnMut()) {
        loop {
            tokio::select! {
                () = next(&mut self.interrupt) => return,
                () = next(&mut self.terminate) => return,
                () = next(&mut self.hangup) => on_hangup().await,
            }
        }
    }
}

/// The next delivery of a watched signal (never, when it could not be watched or the watch
/// has ended).
async fn next(signal: &mut Option<Signal>) {
    let delivered = match signal.as_mut() {
        Some(s) => s.recv().await.is_some(),
        None => false,
    };
    if !delivered {
        std::future::pending::<()>().await;
    }
}

/// A daemon's file read again at SIGHUP; the error, logged, when it does not load (the running
/// configuration then stays in force).
pub(crate) fn reread<C, E: std::fmt::Display>(loaded: Result<C, E>) -> Result<C, String> {
    loaded.map_err(|e| {
        tracing::error!(
            error = %e,
            "SIGHUP: configuration not reloaded; the running one stays in force"
        );
        e.to_string()
    })
}

/// A daemon's reload of `path` done: what took new values, and what waits for a restart.
pub(crate) fn log_reload(path: &Path, changed: &[&str], needs_restart: &[&str]) {
    tracing::info!(
        file = %path.display(),
        changed = ?changed,
        "SIGHUP: configuration reloaded"
    );
    if !needs_restart.is_empty() {
        tracing::warn!(
            settings = ?needs_restart,
            "SIGHUP: these settings changed in the file but take effect only at a restart"
        );
    }
}
