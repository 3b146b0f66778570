//! FALCON's models (FALCON §IV-A, §V-A): the deployed policy and the meta-models per coarse
//! condition class, saved as one `braid-model` file (`docs/models.md`, kind `falcon-dqn`) and
//! loaded into sched-core's [`FalconWeights`] without torch.
//!
//! Components: `policy` (the network deployed when no change has been seen) and `meta-<c>` for
//! each condition class `c` in `0..27` that has a meta-model; each is an `mlp` with widths
//! [`WIDTHS`](braid_sched_core::sched::falcon::WIDTHS) and ReLU. With the `torch` feature,
//! [`train`] holds the DQN, Reptile meta-training and the online K-step fine-tuning.

#[cfg(feature = "torch")]
pub mod train;

use std::path::Path;

use braid_sched_core::sched::falcon::{CLASSES, FalconWeights, FalconWeightsError};

use crate::model::{Component, Model, ModelError, Provenance};

/// The `kind` of FALCON model files.
pub const MODEL_KIND: &str = "falcon-dqn";
/// The component holding the deployed policy.
pub const POLICY: &str = "policy";

/// The component name of class `class`'s meta-model.
pub fn meta_component(class: usize) -> String {
    format!("meta-{class}")
}

/// Why a model file does not hold FALCON weights.
#[derive(Debug, thiserror::Error)]
pub enum FalconModelError {
    /// The file itself is unreadable or invalid.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The file is for another scheduler.
    #[error("model kind `{found}` is not `{MODEL_KIND}`")]
    Kind {
        /// The kind in the file.
        found: String,
    },
    /// A component is neither `policy` nor `meta-<class>` with a class below 27.
    #[error("component `{name}` is neither `{POLICY}` nor `meta-<0..27>`")]
    UnknownComponent {
        /// The name.
        name: String,
    },
    /// A network has the wrong shape.
    #[error(transparent)]
    Weights(#[from] FalconWeightsError),
}

/// FALCON's weights as a model file's contents.
pub fn to_model(weights: &FalconWeights, provenance: Provenance) -> Result<Model, ModelError> {
    let mut model = Model::new(MODEL_KIND, provenance)?
        .with(POLICY, Component::Mlp(weights.policy().clone()))?;
    for (class, meta) in weights.meta_models().iter().enumerate() {
        if let Some(meta) = meta {
            model = model.with(meta_component(class), Component::Mlp(meta.clone()))?;
        }
    }
    Ok(model)
}

/// FALCON's weights from a model file's contents.
pub fn from_model(model: &Model) -> Result<FalconWeights, FalconModelError> {
    if model.kind() != MODEL_KIND {
        return Err(FalconModelError::Kind {
            found: model.kind().to_owned(),
        });
    }
    let policy = model.mlp(POLICY)?.clone();
    let mut meta = vec![None; CLASSES];
    for (name, _) in model.components() {
        if name == POLICY {
            continue;
        }
        let class = name
            .strip_prefix("meta-")
            .and_then(|c| c.parse::<usize>().ok())
            .filter(|c| *c < CLASSES && meta_component(*c) == name)
            .ok_or_else(|| FalconModelError::UnknownComponent {
                name: name.to_owned(),
            })?;
        meta[class] = Some(model.mlp(name)?.clone());
    }
    Ok(FalconWeights::new(policy, meta)?)
}

/// Reads FALCON's weights from the model file at `path`.
pub fn load(path: &Path) -> Result<FalconWeights, FalconModelError> {
    from_model(&Model::load(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_sched_core::nn::{Activation, Linear, Mlp};

    #[test]
    fn weights_round_trip_through_a_model_file() {
        let policy = FalconWeights::minrtt().policy().clone();
        let mut meta = vec![None; CLASSES];
        meta[4] = Some(policy.clone());
        meta[26] = Some(policy.clone());
        let weights = FalconWeights::new(policy, meta).unwrap();
        let model = to_model(&weights, Provenance::new(0, "test")).unwrap();
        let bytes = model.to_bytes().unwrap();
        let back = from_model(&Model::from_bytes(&bytes).unwrap()).unwrap();
        assert_eq!(back, weights);
    }

    #[test]
    fn foreign_models_are_refused_with_the_reason() {
        let small = Mlp::new(
            vec![Linear::new("l", 2, 2, vec![0.0; 4], vec![0.0; 2]).unwrap()],
            Activation::Relu,
        )
        .unwrap();
        let other = Model::new("edar-dqn", Provenance::default()).unwrap();
        assert!(
            from_model(&other)
                .unwrap_err()
                .to_string()
                .contains("edar-dqn")
        );
        let wrong = Model::new(MODEL_KIND, Provenance::default())
            .unwrap()
            .with(POLICY, Component::Mlp(small))
            .unwrap();
        assert!(
            from_model(&wrong)
                .unwrap_err()
                .to_string()
                .contains("widths")
        );
        let policy = FalconWeights::minrtt().policy().clone();
        let stray = Model::new(MODEL_KIND, Provenance::default())
            .unwrap()
            .with(POLICY, Component::Mlp(policy.clone()))
            .unwrap()
            .with("meta-27", Component::Mlp(policy))
            .unwrap();
        assert!(
            from_model(&stray)
                .unwrap_err()
                .to_string()
                .contains("meta-27")
        );
    }
}
