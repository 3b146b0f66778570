//! The scenario file exactly as written: serde types with `deny_unknown_fields`, and the
//! number-or-range value. Validation and drawing live in the parent module.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, SeqAccess, Visitor};

/// A number, or a two-element list `[low, high]` drawn uniformly per run from the seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Param {
    /// A fixed value.
    Fixed(f64),
    /// A uniform range, both ends included.
    Range(f64, f64),
}

impl Param {
    /// Both ends (equal for a fixed value).
    pub fn bounds(self) -> (f64, f64) {
        match self {
            Param::Fixed(v) => (v, v),
            Param::Range(low, high) => (low, high),
        }
    }
}

impl<'de> Deserialize<'de> for Param {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ParamVisitor)
    }
}

struct ParamVisitor;

const PARAM_EXPECTED: &str = "a number or a two-element list [low, high]";

impl<'de> Visitor<'de> for ParamVisitor {
    type Value = Param;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PARAM_EXPECTED)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Param, E> {
        Ok(Param::Fixed(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Param, E> {
        Ok(Param::Fixed(v as f64))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Param, E> {
        Ok(Param::Fixed(v as f64))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Param, A::Error> {
        let low: Number = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(0, &PARAM_EXPECTED))?;
        let high: Number = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(1, &PARAM_EXPECTED))?;
        if seq.next_element::<Number>()?.is_some() {
            return Err(de::Error::invalid_length(3, &PARAM_EXPECTED));
        }
        Ok(Param::Range(low.0, high.0))
    }
}

/// A TOML integer or float.
struct Number(f64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NumberVisitor;
        impl Visitor<'_> for NumberVisitor {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
        }
        deserializer.deserialize_any(NumberVisitor)
    }
}

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    pub name: String,
    #[serde(default)]
    pub cites: Option<String>,
    pub duration_s: f64,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub receive_buffer_bytes: Option<Param>,
    #[serde(rename = "path")]
    pub paths: Vec<RawPath>,
    pub app: RawApp,
    #[serde(default)]
    pub objective: Option<RawObjective>,
    #[serde(default, rename = "cross")]
    pub cross: Vec<RawCross>,
}

/// One `[[cross]]` table: a competing single-path download over a path's link.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCross {
    pub path: String,
    pub congestion: Option<String>,
}

/// One `[[path]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPath {
    pub name: String,
    pub rate_mbps: Option<Param>,
    pub trace: Option<String>,
    pub delay_ms: Option<Param>,
    pub jitter_ms: Option<Param>,
    pub delay_variation: Option<Param>,
    pub jitter_distribution: Option<JitterName>,
    pub jitter_reorders: Option<bool>,
    pub loss: Option<Param>,
    pub queue_packets: Option<Param>,
    #[serde(default)]
    pub outages: Vec<[f64; 2]>,
    pub outages_period_s: Option<f64>,
    #[serde(default)]
    pub changes: Vec<RawChange>,
    pub changes_period_s: Option<f64>,
    pub reverse: Option<RawReverse>,
    pub congestion: Option<String>,
}

/// One entry of `changes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChange {
    pub at_s: f64,
    pub rate_mbps: Option<Param>,
    pub delay_ms: Option<Param>,
    pub jitter_ms: Option<Param>,
    pub loss: Option<Param>,
}

/// The optional `reverse` table: overrides for the return (receiver to sender) direction.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReverse {
    pub rate_mbps: Option<Param>,
    pub trace: Option<String>,
    pub delay_ms: Option<Param>,
    pub jitter_ms: Option<Param>,
    pub delay_variation: Option<Param>,
    pub loss: Option<Param>,
    pub queue_packets: Option<Param>,
}

/// `jitter_distribution` values.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterName {
    Normal,
    Uniform,
}

/// The `[app]` table, chosen by `kind`.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum RawApp {
    Bulk {
        bytes: Param,
    },
    Web {
        objects: Vec<u64>,
    },
    Realtime {
        packet_bytes: u32,
        interval_ms: f64,
        deadline_ms: Param,
    },
}

/// The `[objective]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawObjective {
    pub kind: ObjectiveName,
    pub threshold: f64,
    pub rtt_scale_ms: Option<f64>,
    pub bw_scale_mbps: Option<f64>,
    pub paths_per_decision: Option<u32>,
}

/// `objective.kind` values.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectiveName {
    Maxrtt,
    Bandwidth,
}
