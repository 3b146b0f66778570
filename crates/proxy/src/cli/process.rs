//! The process around a command, shared by them all: logging, the async runtime, the signals
//! a daemon answers, and the log of a daemon's reload (so a server's log names this module,
//! not the client's).

use std::path::Path;
use std::process::ExitCode;

use tokio::signal::unix::{Signal, SignalKind};

/// Starts the tracing subscriber (`RUST_LOG`, default `info`), coloured only on a terminal (so
/// log files get plain text). When standard error is the journal's stream (systemd sets
/// `JOURNAL_STREAM` to its device and inode), each line starts with its syslog priority
/// (`<3>` error, `<4>` warn, `<6>` info, `<7>` debug and trace), which journald takes for the
/// entry's priority (`journalctl -p warning`), and carries no time stamp (the journal has its
/// own).
pub(crate) fn init_logging() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match stderr_is_journal() {
        true => builder
            .with_ansi(false)
            .event_format(Journal(tracing_subscriber::fmt::format().without_time()))
            .try_init(),
        false => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

/// Whether standard error is the stream `JOURNAL_STREAM` names (`DEVICE:INODE`, decimal).
fn stderr_is_journal() -> bool {
    let Some(named) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    journal_stream_is(&named.to_string_lossy(), std::io::stderr())
}

/// Whether `fd` is the file `journal_stream` (`DEVICE:INODE`) names.
fn journal_stream_is(journal_stream: &str, fd: impl std::os::fd::AsFd) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Some((dev, ino)) = journal_stream.split_once(':') else {
        return false;
    };
    let Ok(owned) = fd.as_fd().try_clone_to_owned() else {
        return false;
    };
    let Ok(meta) = std::fs::File::from(owned).metadata() else {
        return false;
    };
    dev.parse() == Ok(meta.dev()) && ino.parse() == Ok(meta.ino())
}

/// An event format for the journal: `inner`'s lines, each led by the event's syslog priority
/// (a message of several lines keeps its priority on each).
struct Journal<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for Journal<F>
where
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let priority = syslog_priority(*event.metadata().level());
        let mut text = String::new();
        self.0.format_event(
            ctx,
            tracing_subscriber::fmt::format::Writer::new(&mut text),
            event,
        )?;
        for line in text.lines() {
            writeln!(writer, "<{priority}>{line}")?;
        }
        Ok(())
    }
}

/// The syslog priority of a tracing level.
fn syslog_priority(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        _ => 7,
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_journal_stream_is_recognised_by_device_and_inode() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = std::env::temp_dir().join(format!("braid-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = std::fs::File::create(dir.join("stream")).unwrap();
        let other = std::fs::File::create(dir.join("other")).unwrap();
        let meta = file.metadata().unwrap();
        let named = format!("{}:{}", meta.dev(), meta.ino());
        assert!(journal_stream_is(&named, &file));
        assert!(!journal_stream_is(&named, &other));
        for bad in ["", "12", "a:b", ":"] {
            assert!(!journal_stream_is(bad, &file), "{bad:?}");
        }
        assert_eq!(
            [
                tracing::Level::ERROR,
                tracing::Level::WARN,
                tracing::Level::INFO,
                tracing::Level::TRACE
            ]
            .map(syslog_priority),
            [3, 4, 6, 7]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
