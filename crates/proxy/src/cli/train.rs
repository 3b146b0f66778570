//! `braid train edar|falcon --scenarios FILE[,FILE…] --out DIR [--device cpu|cuda] [--seed N]
//! [--episodes N] [--steps N] [--duration-s S]`: offline training of a learned scheduler in the
//! simulator (feature `torch`; see `crate::train`). `braid train falcon --evaluate --scenarios …
//! --out DIR [--runs N] [--seed N]` instead measures FALCON's online adaptation in the simulator
//! (`crate::train::falcon::evaluate`). Without the feature it explains how to get it and exits
//! with 2.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[cfg(feature = "torch")]
use crate::train::{TrainError, TrainOptions};

/// Arguments of `braid train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The learned scheduler to train: `edar` or `falcon`.
    pub scheduler: String,
    /// Scenario files (comma-separated or repeated) whose simulations are the episodes.
    #[arg(long, value_delimiter = ',', required = true)]
    pub scenarios: Vec<PathBuf>,
    /// Output directory for the model file and PROVENANCE.md.
    #[arg(long)]
    pub out: PathBuf,
    /// Where libtorch trains: `cpu` or `cuda`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Seed of the episodes, the initialisation and the minibatches.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Episodes per scenario (and per data-collection policy).
    #[arg(long, default_value_t = 4)]
    pub episodes: u32,
    /// Gradient steps.
    #[arg(long, default_value_t = 2_000)]
    pub steps: u64,
    /// Simulated seconds per episode (default: the scenario's duration).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// falcon only: instead of training, measure online adaptation as FALCON §VI-B does (2 MB
    /// downloads, relative score against DQN-Off trained per condition and cached in
    /// `--out`/dqn-off; minRTT, peekaboo, the shipped weights and plain online DQNs beside it;
    /// writes `evaluation.md` into `--out`).
    #[arg(long)]
    pub evaluate: bool,
    /// With `--evaluate`: runs (seeds) per scenario and variant.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
}

/// Runs `braid train`.
#[cfg(feature = "torch")]
pub fn run(args: &TrainArgs) -> ExitCode {
    let options = TrainOptions {
        scenarios: args.scenarios.clone(),
        out: args.out.clone(),
        device: args.device.clone(),
        seed: args.seed,
        episodes: args.episodes,
        steps: args.steps,
        duration_s: args.duration_s,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    if args.evaluate {
        return evaluate(args, &options);
    }
    let result = match args.scheduler.to_ascii_lowercase().as_str() {
        "edar" => crate::train::edar::run(&options),
        "falcon" => crate::train::falcon::run(&options),
        other => Err(TrainError::Usage(format!(
            "braid train {other:?}: expected edar or falcon"
        ))),
    };
    match result {
        Ok(summary) => {
            outln!(
                "trained {} on {} samples: {} steps, final loss {:.5}, {:.1} s",
                summary.model.display(),
                summary.samples,
                summary.steps,
                summary.final_loss,
                summary.seconds
            );
            ExitCode::SUCCESS
        }
        Err(e) => failed(e),
    }
}

/// `braid train falcon --evaluate`.
#[cfg(feature = "torch")]
fn evaluate(args: &TrainArgs, options: &TrainOptions) -> ExitCode {
    if !args.scheduler.eq_ignore_ascii_case("falcon") {
        eprintln!(
            "braid train {}: --evaluate is for falcon only",
            args.scheduler
        );
        return ExitCode::from(2);
    }
    let result = std::fs::create_dir_all(&args.out)
        .map_err(|e| TrainError::Usage(format!("--out {}: {e}", args.out.display())))
        .and_then(|()| crate::train::falcon::evaluate::run(options, args.runs))
        .and_then(|report| {
            let file = args.out.join("evaluation.md");
            std::fs::write(&file, &report)
                .map_err(|e| TrainError::Runtime(format!("{}: {e}", file.display())))?;
            Ok(report)
        });
    match result {
        Ok(report) => {
            out!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => failed(e),
    }
}

/// Reports `error` and gives its exit code: 2 for bad options, 1 for a failed run.
#[cfg(feature = "torch")]
fn failed(error: TrainError) -> ExitCode {
    let code = match error {
        TrainError::Usage(_) => 2,
        TrainError::Runtime(_) => 1,
    };
    eprintln!("braid train: {error}");
    ExitCode::from(code)
}

/// Runs `braid train` in a build without the `torch` feature: explains and exits with 2.
#[cfg(not(feature = "torch"))]
pub fn run(args: &TrainArgs) -> ExitCode {
    eprintln!(
        "braid train {}: this braid was built without the `torch` feature; run \
         `source scripts/setup-torch.sh && cargo build --release -p braid-proxy --features torch`",
        args.scheduler
    );
    ExitCode::from(2)
}
