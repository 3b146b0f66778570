//! Scenario files (`config/scenarios/*.toml`): the schema of DESIGN.md "Scenario files",
//! its validation, and the per-run draw of parameter ranges.
//!
//! [`ScenarioFile::load`] parses a file (unknown keys are errors), checks every value against
//! its domain and loads the traces it names (relative to the file). [`ScenarioFile::resolve`]
//! then draws every two-element range uniformly from a seed and yields a [`Scenario`]: per
//! path, the [`LinkConfig`] of each direction and the seed of each link's own random draws.
//! The schema, field by field, is documented in `docs/scenarios.md`.

mod check;
mod raw;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use braid_sched_core::MAX_PATHS;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::link::{Capacity, JitterDistribution, Link, LinkChange, LinkConfig, LinkConfigError};
use crate::trace::{Trace, TraceError};
use check::Checker;
pub use raw::Param;
use raw::{JitterName, ObjectiveName, RawApp, RawChange, RawPath, RawReverse, RawScenario};

/// Seed used when a file gives none.
pub const DEFAULT_SEED: u64 = 1;
/// Queue size used when a path gives none: 1000 packets, netem's default limit.
pub const DEFAULT_QUEUE_PACKETS: u32 = 1000;

/// Why a scenario file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("scenario {file}: cannot read: {source}")]
    Io {
        /// The scenario file.
        file: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for the schema (syntax, wrong type, unknown or missing key);
    /// the message names the key and its position.
    #[error("scenario {file}: {message}")]
    Parse {
        /// The scenario file.
        file: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A value is outside its domain.
    #[error("scenario {file}: field `{field}`: expected {expected}, found {found}")]
    Invalid {
        /// The scenario file.
        file: PathBuf,
        /// The field, e.g. `path[1].loss`.
        field: String,
        /// What it must be.
        expected: String,
        /// What it was.
        found: String,
    },
    /// A trace the file names could not be read.
    #[error("scenario {file}: field `{field}`: {source}")]
    Trace {
        /// The scenario file.
        file: PathBuf,
        /// The field naming the trace.
        field: String,
        /// The trace error (names the trace file and line).
        source: TraceError,
    },
}

/// A parsed and validated scenario file whose ranges are not drawn yet.
#[derive(Debug)]
pub struct ScenarioFile {
    file: PathBuf,
    raw: RawScenario,
    /// Traces by the field that names them (`path[0].trace`, `path[0].reverse.trace`).
    traces: HashMap<String, Arc<Trace>>,
}

/// One path of a resolved scenario: both directions of the link.
#[derive(Clone, Debug)]
pub struct PathSpec {
    /// The path's name.
    pub name: String,
    /// Sender to receiver (data) direction.
    pub forward: LinkConfig,
    /// Receiver to sender (acknowledgement) direction.
    pub reverse: LinkConfig,
    /// Seed for the forward link's random draws.
    pub forward_seed: u64,
    /// Seed for the reverse link's random draws.
    pub reverse_seed: u64,
    /// The path's own congestion controller on both endpoints, by a name the endpoint
    /// implementation knows (`None`: the run's, `--congestion` or the endpoint's default).
    pub congestion: Option<String>,
}

impl PathSpec {
    /// Builds the two links `(forward, reverse)`.
    pub fn links(&self) -> Result<(Link, Link), LinkConfigError> {
        Ok((
            Link::new(&self.forward, self.forward_seed)?,
            Link::new(&self.reverse, self.reverse_seed)?,
        ))
    }
}

/// The application a scenario runs.
#[derive(Clone, Debug, PartialEq)]
pub enum App {
    /// One bulk transfer of `bytes`.
    Bulk {
        /// Bytes to transfer.
        bytes: u64,
    },
    /// A web page: objects of the given sizes (bytes), fetched over one session.
    Web {
        /// Object sizes in bytes.
        objects: Vec<u64>,
    },
    /// Real-time packets with deadlines.
    Realtime {
        /// Bytes per packet.
        packet_bytes: u32,
        /// Time between packets.
        interval: Duration,
        /// Deadline budget of each packet, ms: drawn uniformly per packet in `[low, high]`.
        deadline_ms: (f64, f64),
    },
}

/// What OLMS regret and violation are measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectiveKind {
    /// Maximise bandwidth subject to a maximum RTT (OLMS Application I).
    MaxRtt,
    /// Minimise RTT subject to a bandwidth cap (OLMS Application II).
    Bandwidth,
}

/// The optional `[objective]` table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Objective {
    /// Which constraint.
    pub kind: ObjectiveKind,
    /// Normalised threshold (RTT / `rtt_scale_ms` or rate / `bw_scale_mbps`).
    pub threshold: f64,
    /// RTT normalisation scale, ms.
    pub rtt_scale_ms: f64,
    /// Bandwidth normalisation scale, Mbit/s.
    pub bw_scale_mbps: f64,
    /// L, the number of paths chosen per decision.
    pub paths_per_decision: usize,
}

/// A scenario with every range drawn: what one simulation run uses.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The scenario's name.
    pub name: String,
    /// The paper section it encodes, when the file says.
    pub cites: Option<String>,
    /// The file it came from.
    pub file: PathBuf,
    /// Simulated time.
    pub duration: Duration,
    /// The seed the ranges were drawn with.
    pub seed: u64,
    /// Receiver buffer limit in bytes, when the file sets one.
    pub receive_buffer_bytes: Option<u64>,
    /// The paths.
    pub paths: Vec<PathSpec>,
    /// The application.
    pub app: App,
    /// The objective, when given.
    pub objective: Option<Objective>,
    /// Competing single-path downloads (`[[cross]]`), none by default.
    pub cross: Vec<CrossSpec>,
}

/// A competing download (`[[cross]]`): its own client and server, joined by one path over the
/// links of one of the scenario's paths, downloading for the whole run. Its packets queue with
/// braid's in that path's links, both directions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrossSpec {
    /// The index of the path whose links it crosses.
    pub path: usize,
    /// Its congestion controller, by a name the endpoint implementation knows (`None`: the
    /// endpoint's default).
    pub congestion: Option<String>,
}

impl ScenarioFile {
    /// Reads, parses and validates a scenario file, loading the traces it names.
    pub fn load(file: &Path) -> Result<ScenarioFile, ScenarioError> {
        let text = crate::input::read_text_capped(file, crate::input::MAX_INPUT_FILE_BYTES)
            .map_err(|source| ScenarioError::Io {
                file: file.to_path_buf(),
                source,
            })?;
        ScenarioFile::parse(&text, file)
    }

    /// Parses and validates scenario text; `file` names it in errors and anchors relative
    /// trace paths (which are read from disk).
    pub fn parse(text: &str, file: &Path) -> Result<ScenarioFile, ScenarioError> {
        let raw: RawScenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            file: file.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let check = Checker { file };
        check.scenario(&raw)?;
        let traces = load_traces(&raw, file)?;
        Ok(ScenarioFile {
            file: file.to_path_buf(),
            raw,
            traces,
        })
    }

    /// The scenario's name.
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    /// The file's seed (or [`DEFAULT_SEED`]).
    pub fn seed(&self) -> u64 {
        self.raw.seed.unwrap_or(DEFAULT_SEED)
    }

    /// The file it was read from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Draws every range from `seed` and builds the run's configuration. The same seed always
    /// gives the same draws; each field's draw depends only on the seed and the field's name.
    pub fn resolve(&self, seed: u64) -> Result<Scenario, ScenarioError> {
        let draw = Draw { seed };
        let raw = &self.raw;
        let mut paths = Vec::with_capacity(raw.paths.len());
        for (i, path) in raw.paths.iter().enumerate() {
            paths.push(self.resolve_path(&draw, i, path)?);
        }
        let app = match &raw.app {
            RawApp::Bulk { bytes } => App::Bulk {
                bytes: draw.integer("app.bytes", *bytes),
            },
            RawApp::Web { objects } => App::Web {
                objects: objects.clone(),
            },
            RawApp::Realtime {
                packet_bytes,
                interval_ms,
                deadline_ms,
            } => App::Realtime {
                packet_bytes: *packet_bytes,
                interval: Duration::from_secs_f64(interval_ms / 1e3),
                deadline_ms: deadline_ms.bounds(),
            },
        };
        let objective = raw.objective.as_ref().map(|o| Objective {
            kind: match o.kind {
                ObjectiveName::Maxrtt => ObjectiveKind::MaxRtt,
                ObjectiveName::Bandwidth => ObjectiveKind::Bandwidth,
            },
            threshold: o.threshold,
            rtt_scale_ms: o.rtt_scale_ms.unwrap_or(100.0),
            bw_scale_mbps: o.bw_scale_mbps.unwrap_or(100.0),
            paths_per_decision: o.paths_per_decision.unwrap_or(1) as usize,
        });
        Ok(Scenario {
            name: raw.name.clone(),
            cites: raw.cites.clone(),
            file: self.file.clone(),
            duration: Duration::from_secs_f64(raw.duration_s),
            seed,
            receive_buffer_bytes: raw
                .receive_buffer_bytes
                .map(|p| draw.integer("receive_buffer_bytes", p)),
            paths,
            app,
            objective,
            cross: raw
                .cross
                .iter()
                .map(|c| CrossSpec {
                    // Checked at load: the name is a path's.
                    path: raw.paths.iter().position(|p| p.name == c.path).unwrap_or(0),
                    congestion: c.congestion.clone(),
                })
                .collect(),
        })
    }

    fn resolve_path(
        &self,
        draw: &Draw,
        i: usize,
        path: &RawPath,
    ) -> Result<PathSpec, ScenarioError> {
        let field = |name: &str| format!("path[{i}].{name}");
        let capacity = match (&path.rate_mbps, self.traces.get(&field("trace"))) {
            (_, Some(trace)) => Capacity::Trace(Arc::clone(trace)),
            (Some(rate), None) => Capacity::Rate {
                mbps: draw.real(&field("rate_mbps"), *rate),
            },
            (None, None) => missing_capacity(&self.file, &field("rate_mbps"))?,
        };
        let value = |name: &str, p: Option<Param>| p.map_or(0.0, |p| draw.real(&field(name), p));
        let queue = path.queue_packets.map_or(DEFAULT_QUEUE_PACKETS, |p| {
            draw.integer(&field("queue_packets"), p) as u32
        });
        let changes: Vec<LinkChange> = path
            .changes
            .iter()
            .enumerate()
            .map(|(k, c)| resolve_change(draw, &field(&format!("changes[{k}]")), c))
            .collect();
        let forward = LinkConfig {
            capacity,
            delay_ms: value("delay_ms", path.delay_ms),
            jitter_ms: value("jitter_ms", path.jitter_ms),
            delay_variation: value("delay_variation", path.delay_variation),
            jitter_distribution: match path.jitter_distribution {
                Some(JitterName::Uniform) => JitterDistribution::Uniform,
                Some(JitterName::Normal) | None => JitterDistribution::Normal,
            },
            jitter_reorders: path.jitter_reorders.unwrap_or(false),
            loss: value("loss", path.loss),
            queue_packets: queue,
            outages: path.outages.iter().map(|w| (w[0], w[1])).collect(),
            outages_period_s: path.outages_period_s,
            changes,
            changes_period_s: path.changes_period_s,
        };
        let reverse = self.resolve_reverse(draw, i, path.reverse.as_ref(), &forward);
        let invalid = |e: LinkConfigError| ScenarioError::Invalid {
            file: self.file.clone(),
            field: field(e.field),
            expected: e.expected.to_string(),
            found: e.found,
        };
        forward.validate().map_err(invalid)?;
        reverse.validate().map_err(invalid)?;
        Ok(PathSpec {
            name: path.name.clone(),
            forward,
            reverse,
            forward_seed: mix(seed_of(draw.seed, &field("forward"))),
            reverse_seed: mix(seed_of(draw.seed, &field("reverse"))),
            congestion: path.congestion.clone(),
        })
    }

    /// The return direction: each field the `reverse` table does not set copies the forward
    /// value (and follows its step changes), except loss, which is 0 unless set.
    fn resolve_reverse(
        &self,
        draw: &Draw,
        i: usize,
        reverse: Option<&RawReverse>,
        forward: &LinkConfig,
    ) -> LinkConfig {
        let empty = RawReverse::default();
        let r = reverse.unwrap_or(&empty);
        let field = |name: &str| format!("path[{i}].reverse.{name}");
        let pick = |name: &str, p: Option<Param>, inherited: f64| {
            p.map_or(inherited, |p| draw.real(&field(name), p))
        };
        let capacity = match (&r.rate_mbps, self.traces.get(&field("trace"))) {
            (_, Some(trace)) => Capacity::Trace(Arc::clone(trace)),
            (Some(rate), None) => Capacity::Rate {
                mbps: draw.real(&field("rate_mbps"), *rate),
            },
            (None, None) => forward.capacity.clone(),
        };
        let own_capacity = r.rate_mbps.is_some() || r.trace.is_some();
        let changes = forward
            .changes
            .iter()
            .map(|c| LinkChange {
                at_s: c.at_s,
                rate_mbps: c.rate_mbps.filter(|_| !own_capacity),
                delay_ms: c.delay_ms.filter(|_| r.delay_ms.is_none()),
                jitter_ms: c.jitter_ms.filter(|_| r.jitter_ms.is_none()),
                loss: None,
            })
            .collect();
        LinkConfig {
            capacity,
            delay_ms: pick("delay_ms", r.delay_ms, forward.delay_ms),
            jitter_ms: pick("jitter_ms", r.jitter_ms, forward.jitter_ms),
            delay_variation: pick(
                "delay_variation",
                r.delay_variation,
                forward.delay_variation,
            ),
            jitter_distribution: forward.jitter_distribution,
            jitter_reorders: forward.jitter_reorders,
            loss: pick("loss", r.loss, 0.0),
            queue_packets: r.queue_packets.map_or(forward.queue_packets, |p| {
                draw.integer(&field("queue_packets"), p) as u32
            }),
            outages: forward.outages.clone(),
            outages_period_s: forward.outages_period_s,
            changes,
            changes_period_s: forward.changes_period_s,
        }
    }
}

fn missing_capacity(file: &Path, field: &str) -> Result<Capacity, ScenarioError> {
    // Validation already required exactly one of rate_mbps or trace.
    Err(ScenarioError::Invalid {
        file: file.to_path_buf(),
        field: field.to_string(),
        expected: "exactly one of rate_mbps or trace".to_string(),
        found: "neither".to_string(),
    })
}

fn resolve_change(draw: &Draw, field: &str, c: &RawChange) -> LinkChange {
    let value = |name: &str, p: Option<Param>| p.map(|p| draw.real(&format!("{field}.{name}"), p));
    LinkChange {
        at_s: c.at_s,
        rate_mbps: value("rate_mbps", c.rate_mbps),
        delay_ms: value("delay_ms", c.delay_ms),
        jitter_ms: value("jitter_ms", c.jitter_ms),
        loss: value("loss", c.loss),
    }
}

fn load_traces(
    raw: &RawScenario,
    file: &Path,
) -> Result<HashMap<String, Arc<Trace>>, ScenarioError> {
    let base = file.parent().unwrap_or(Path::new(""));
    let mut traces = HashMap::new();
    for (i, path) in raw.paths.iter().enumerate() {
        let reverse = path.reverse.as_ref().and_then(|r| r.trace.as_ref());
        let named = [
            (format!("path[{i}].trace"), path.trace.as_ref()),
            (format!("path[{i}].reverse.trace"), reverse),
        ];
        for (field, name) in named {
            let Some(name) = name else { continue };
            let trace = Trace::load(&base.join(name)).map_err(|source| ScenarioError::Trace {
                file: file.to_path_buf(),
                field: field.clone(),
                source,
            })?;
            traces.insert(field, Arc::new(trace));
        }
    }
    Ok(traces)
}

/// Draws ranges: each field from its own generator, seeded by the run seed and the field name.
struct Draw {
    seed: u64,
}

impl Draw {
    fn real(&self, field: &str, p: Param) -> f64 {
        match p {
            Param::Fixed(v) => v,
            Param::Range(low, high) => {
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed_of(self.seed, field));
                low + (high - low) * rng.random::<f64>()
            }
        }
    }

    fn integer(&self, field: &str, p: Param) -> u64 {
        match p {
            Param::Fixed(v) => v as u64,
            Param::Range(low, high) => {
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed_of(self.seed, field));
                rng.random_range(low as u64..=high as u64)
            }
        }
    }
}

/// A seed for `field` under the run seed (FNV-1a of the name, mixed with the seed).
fn seed_of(seed: u64, field: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in field.bytes() {
        h = (h ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h ^ mix(seed))
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The largest number of paths a scenario may have (sched-core's limit).
pub const MAX_SCENARIO_PATHS: usize = MAX_PATHS;
/// Most `[[cross]]` flows a scenario may run.
pub const MAX_CROSS: usize = 4;
