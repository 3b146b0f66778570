//! Learned schedulers in the daemon and the simulator: shipped weights (`models/<name>/`), the
//! options and results of `braid train` (offline training, feature `torch`), and one module per
//! learned scheduler ([`edar`]; FALCON adds `falcon`).
//!
//! Shipped weights are looked up in `$BRAID_MODELS` when set, else in the repository's `models/`
//! directory this binary was built from. A missing file is not an error: the scheduler then runs
//! its documented safe default (EdAR: normal transmission, i.e. minRTT), and
//! [`scheduler_config`] says so on stderr once per process.

pub mod edar;
pub mod falcon;

use std::path::PathBuf;

use braid_sched_core::{SchedulerConfig, SchedulerKind};

/// The libtorch device named by `--device`: `cpu`, or `cuda` when libtorch sees a GPU.
#[cfg(feature = "torch")]
pub(crate) fn device(name: &str) -> Result<braid_learners::torch::tch::Device, TrainError> {
    use braid_learners::torch::tch::{Cuda, Device};
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" if Cuda::is_available() => Ok(Device::Cuda(0)),
        "cuda" => Err(TrainError::Usage(
            "--device cuda: no CUDA device is available to libtorch".into(),
        )),
        other => Err(TrainError::Usage(format!(
            "--device {other:?}: expected cpu or cuda"
        ))),
    }
}

/// The process's one online learner of a kind, started by `start` on first use (`cell` holds
/// it for the life of the process); `None`, with the reason on stderr once, if it could not
/// start: the daemon then runs the shipped weights.
#[cfg(feature = "torch")]
pub(crate) fn process_learner<T>(
    cell: &'static std::sync::OnceLock<Option<T>>,
    scheduler: &str,
    start: impl FnOnce() -> Result<T, String>,
) -> Option<&'static T> {
    cell.get_or_init(|| match start() {
        Ok(online) => Some(online),
        Err(e) => {
            eprintln!(
                "braid: {scheduler} online learning could not start ({e}); shipped weights only"
            );
            None
        }
    })
    .as_ref()
}

/// The process's learner threads ([`keep_until_stopped`]).
#[cfg(feature = "torch")]
static LEARNERS: std::sync::Mutex<Vec<braid_learners::Learner>> = std::sync::Mutex::new(Vec::new());

/// Keeps `learner` running until [`stop_learners`]. That must run before the process exits:
/// a learner inside a training step while libtorch's exit-time destructors ran crashed the
/// process (a SIGSEGV after a test binary's tests had all passed). An `atexit` handler cannot
/// do it: libtorch registers some of its destructors lazily, after any handler braid could
/// register, so they ran first and the joined learner's last step crashed every time.
#[cfg(feature = "torch")]
pub(crate) fn keep_until_stopped(learner: braid_learners::Learner) {
    LEARNERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(learner);
}

/// Stops the process's online learners: each finishes its step and its thread is joined. The
/// schedulers keep the last weights they took, and a learner stopped is not started again in
/// this process. `braid` calls it after every command (a daemon stopped, a `--check` done); a
/// program that runs the daemons of this library with `torch` calls it before it exits. A
/// no-op without learners (or without the feature `torch`).
pub fn stop_learners() {
    #[cfg(feature = "torch")]
    {
        // Dropping a learner stops it and joins its thread (`Learner`'s `Drop`, which logs a
        // learner that ended badly).
        drop(std::mem::take(
            &mut *LEARNERS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        ));
    }
}

/// Where shipped models live: `$BRAID_MODELS`, else `<repository>/models`.
pub fn models_dir() -> PathBuf {
    match std::env::var_os("BRAID_MODELS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models")),
    }
}

/// The default configuration of `kind`, with the shipped weights of a learned scheduler loaded
/// into it (a fresh weight slot per call). Other kinds get [`SchedulerConfig::new`].
pub fn scheduler_config(kind: SchedulerKind) -> SchedulerConfig {
    match kind {
        SchedulerKind::Edar => edar::shipped_config(),
        SchedulerKind::Falcon => falcon::shipped_config(),
        _ => SchedulerConfig::new(kind),
    }
}

/// The daemon's configuration of `kind`: like [`scheduler_config`], and with the `torch`
/// feature a learned scheduler also learns online (EdAR Alg. 2: see [`edar::daemon_config`]).
pub fn daemon_scheduler_config(kind: SchedulerKind) -> SchedulerConfig {
    match kind {
        SchedulerKind::Edar => edar::daemon_config(),
        SchedulerKind::Falcon => falcon::daemon_config(),
        _ => scheduler_config(kind),
    }
}

/// What `braid train` is asked to do (shared by every learned scheduler).
#[derive(Clone, Debug, PartialEq)]
pub struct TrainOptions {
    /// Scenario files whose simulations provide the training episodes.
    pub scenarios: Vec<PathBuf>,
    /// Directory the model and its provenance are written to.
    pub out: PathBuf,
    /// `cpu` or `cuda`.
    pub device: String,
    /// Seed of the episodes, the initialisation and the minibatches.
    pub seed: u64,
    /// Simulated episodes per scenario and data-collection policy.
    pub episodes: u32,
    /// Gradient steps.
    pub steps: u64,
    /// Simulated seconds per episode (`None`: the scenario's own duration).
    pub duration_s: Option<f64>,
    /// The command line as typed, for the provenance file.
    pub command: String,
}

/// What a training run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainSummary {
    /// The model file written.
    pub model: PathBuf,
    /// Transitions (or tasks) learned from.
    pub samples: u64,
    /// Gradient steps taken.
    pub steps: u64,
    /// Mean loss over the last 100 steps.
    pub final_loss: f64,
    /// Wall-clock seconds, simulation and training.
    pub seconds: f64,
}

/// Why training failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// Bad options (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// The run itself failed (exit code 1).
    #[error("{0}")]
    Runtime(String),
}

/// The lines every `PROVENANCE.md` of `braid train` starts with: the `# <title>: provenance`
/// heading, the command, the time written, the device, the seed (with `seed_note` after it),
/// and the scenario files under `- <scenarios_heading>:`.
#[cfg(feature = "torch")]
pub(crate) fn provenance_header(
    title: &str,
    options: &TrainOptions,
    created: u64,
    seed_note: &str,
    scenarios_heading: &str,
) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let _ = writeln!(text, "# {title}: provenance\n");
    let _ = writeln!(text, "- command: `{}`", options.command);
    let _ = writeln!(text, "- written: {created} (Unix seconds, UTC)");
    let _ = writeln!(text, "- device: {}", options.device);
    let _ = writeln!(text, "- seed: {} ({seed_note})", options.seed);
    let _ = writeln!(text, "- {scenarios_heading}:");
    for s in &options.scenarios {
        let _ = writeln!(text, "  - `{}`", s.display());
    }
    text
}

/// Appends the wall-clock line of a `PROVENANCE.md` (`first` names the non-training part:
/// collecting, simulating) and writes the file into `options.out`; its path.
#[cfg(feature = "torch")]
pub(crate) fn write_provenance_file(
    options: &TrainOptions,
    mut text: String,
    summary: &TrainSummary,
    first: (&str, f64),
) -> Result<PathBuf, TrainError> {
    use std::fmt::Write as _;
    let (what, first_s) = first;
    let _ = writeln!(
        text,
        "- wall clock: {:.1} s ({first_s:.1} s {what}, {:.1} s training)",
        summary.seconds,
        summary.seconds - first_s
    );
    let path = options.out.join("PROVENANCE.md");
    std::fs::write(&path, text)
        .map_err(|e| TrainError::Runtime(format!("{}: {e}", path.display())))?;
    Ok(path)
}
