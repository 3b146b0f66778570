//! The model store: learned networks with their provenance, saved as versioned safetensors files
//! (`docs/models.md`, format `braid-model` version 1).
//!
//! A [`Model`] is a named set of components, each one of sched-core's inference parts
//! ([`Mlp`], [`Lstm`]), plus a free-form `kind` saying which scheduler it is for and a
//! [`Provenance`] saying where it came from. Loading validates everything (format, version, every
//! tensor's presence, dtype and shape, the chaining of layers, finiteness of weights) and fails
//! with a [`ModelError`] that names the offending field or tensor. Loading needs no torch: the
//! daemon runs learned schedulers from shipped files without the `torch` feature. The
//! `safetensors` crate lives here rather than in sched-core so that sched-core stays free of file
//! formats and of serde.

mod file;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use braid_sched_core::nn::{Lstm, Mlp, NnError};

/// The value of the `format` header field.
pub const FORMAT: &str = "braid-model";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// One network part of a [`Model`].
#[derive(Clone, Debug, PartialEq)]
pub enum Component {
    /// A multilayer perceptron.
    Mlp(Mlp),
    /// One LSTM layer.
    Lstm(Lstm),
}

impl Component {
    /// The component type as written in the `components` field (`mlp`, `lstm`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Component::Mlp(_) => "mlp",
            Component::Lstm(_) => "lstm",
        }
    }
}

/// Where a model came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Provenance {
    /// What wrote the file, e.g. `braid-learners 0.1.0`.
    pub producer: String,
    /// When it was written, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// How the weights were obtained: algorithm, scenario or data set, seed, steps.
    pub source: String,
    /// Further `provenance.<key>` entries, kept as written.
    pub extra: BTreeMap<String, String>,
}

impl Provenance {
    /// Provenance naming this crate as producer, with the given creation time and source.
    pub fn new(created_unix_s: u64, source: impl Into<String>) -> Self {
        Provenance {
            producer: format!("braid-learners {}", env!("CARGO_PKG_VERSION")),
            created_unix_s,
            source: source.into(),
            extra: BTreeMap::new(),
        }
    }
}

/// A learned model: named components, what it is for, and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    kind: String,
    provenance: Provenance,
    components: Vec<(String, Component)>,
}

/// What is wrong with a model file or with a request to a [`Model`].
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The file could not be read or written.
    #[error("model file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a valid safetensors file.
    #[error("not a safetensors file: {0}")]
    Container(#[source] safetensors::SafeTensorError),
    /// A required header metadata field is missing.
    #[error("header field `{field}` is missing")]
    MissingField {
        /// The field.
        field: String,
    },
    /// A header metadata field has a value that is not accepted.
    #[error("header field `{field}` = {value:?}: expected {expected}")]
    BadField {
        /// The field.
        field: String,
        /// Its value.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// A tensor a component needs is missing.
    #[error("tensor `{tensor}` is missing")]
    MissingTensor {
        /// The tensor.
        tensor: String,
    },
    /// A tensor is not F32.
    #[error("tensor `{tensor}` has dtype {found}, expected F32")]
    TensorDtype {
        /// The tensor.
        tensor: String,
        /// Its dtype.
        found: String,
    },
    /// A tensor's shape differs from the one its component's header fields imply.
    #[error("tensor `{tensor}` has shape {found:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor.
        tensor: String,
        /// Shape required.
        expected: Vec<usize>,
        /// Shape found.
        found: Vec<usize>,
    },
    /// The file holds a tensor no component claims.
    #[error("tensor `{tensor}` belongs to no component")]
    UnexpectedTensor {
        /// The tensor.
        tensor: String,
    },
    /// A component's weights do not form a valid network.
    #[error("component `{component}`: {source}")]
    Network {
        /// The component.
        component: String,
        /// What is wrong.
        #[source]
        source: NnError,
    },
    /// A component name is empty or contains a character other than `a-z`, `0-9`, `_`, `-`.
    #[error("component name {name:?}: use 1-64 characters of a-z, 0-9, `_` and `-`")]
    BadName {
        /// The name.
        name: String,
    },
    /// Two components have the same name.
    #[error("component `{name}` appears twice")]
    DuplicateComponent {
        /// The name.
        name: String,
    },
    /// No component of this name.
    #[error("model `{kind}` has no component `{name}` (it has: {known})")]
    MissingComponent {
        /// The model's kind.
        kind: String,
        /// The name asked for.
        name: String,
        /// The names it has, comma-separated.
        known: String,
    },
    /// The component exists but is of another type.
    #[error("component `{name}` is an {found}, not an {expected}")]
    ComponentType {
        /// The name.
        name: String,
        /// The type asked for.
        expected: &'static str,
        /// Its type.
        found: &'static str,
    },
}

impl Model {
    /// An empty model for scheduler `kind` (1-64 characters of `a-z`, `0-9`, `_`, `-`).
    pub fn new(kind: impl Into<String>, provenance: Provenance) -> Result<Self, ModelError> {
        let kind = kind.into();
        if !is_valid_name(&kind) {
            return Err(ModelError::BadField {
                field: "kind".to_owned(),
                value: kind,
                expected: "1-64 characters of a-z, 0-9, `_` and `-`",
            });
        }
        Ok(Model {
            kind,
            provenance,
            components: Vec::new(),
        })
    }

    /// Adds a component; its name follows the same rule as `kind`.
    pub fn with(
        mut self,
        name: impl Into<String>,
        component: Component,
    ) -> Result<Self, ModelError> {
        let name = name.into();
        if !is_valid_name(&name) {
            return Err(ModelError::BadName { name });
        }
        if self.components.iter().any(|(n, _)| *n == name) {
            return Err(ModelError::DuplicateComponent { name });
        }
        self.components.push((name, component));
        Ok(self)
    }

    /// Which scheduler the model is for, e.g. `falcon-dqn`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Where the model came from.
    pub fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    /// The components, in the order they were added.
    pub fn components(&self) -> impl Iterator<Item = (&str, &Component)> {
        self.components.iter().map(|(n, c)| (n.as_str(), c))
    }

    /// The component called `name`.
    pub fn component(&self, name: &str) -> Result<&Component, ModelError> {
        self.components
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c)
            .ok_or_else(|| ModelError::MissingComponent {
                kind: self.kind.clone(),
                name: name.to_owned(),
                known: self
                    .components
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The MLP called `name`.
    pub fn mlp(&self, name: &str) -> Result<&Mlp, ModelError> {
        match self.component(name)? {
            Component::Mlp(mlp) => Ok(mlp),
            other => Err(type_error(name, "mlp", other)),
        }
    }

    /// The LSTM called `name`.
    pub fn lstm(&self, name: &str) -> Result<&Lstm, ModelError> {
        match self.component(name)? {
            Component::Lstm(lstm) => Ok(lstm),
            other => Err(type_error(name, "lstm", other)),
        }
    }

    /// The model as the bytes of a `braid-model` safetensors file.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ModelError> {
        file::encode(self)
    }

    /// A model from the bytes of a `braid-model` safetensors file, fully validated.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ModelError> {
        file::decode(bytes)
    }

    /// Writes the model to `path`.
    pub fn save(&self, path: &Path) -> Result<(), ModelError> {
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|source| ModelError::Io {
            path: path.to_owned(),
            source,
        })
    }

    /// Reads and validates the model at `path`.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let bytes = std::fs::read(path).map_err(|source| ModelError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_bytes(&bytes)
    }
}

fn type_error(name: &str, expected: &'static str, found: &Component) -> ModelError {
    ModelError::ComponentType {
        name: name.to_owned(),
        expected,
        found: found.type_name(),
    }
}

/// 1-64 characters of `a-z`, `0-9`, `_`, `-` (no `.`, `:` or `,`, which the format uses).
fn is_valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}
