//! EdAR's learner side (Han et al., §IV-C and §V): the Q-network as a `braid-model` file
//! (`docs/models.md`, kind `edar-dqn`) and, with the `torch` feature, its DQN training
//! ([`train`]: replay buffer, target network with soft updates τ, Adam, γ; Alg. 1 offline and
//! Alg. 2 online).
//!
//! Components of an `edar-dqn` model: `feature0` … `feature5` (LSTM1 per feature: RTT, RTO,
//! throughput, cwnd, loss, in-flight; input 1, hidden 10), `across` (LSTM2, input 120, hidden
//! 24) and `core` (MLP 27-128-32-2, ReLU). See [`braid_sched_core::sched::edar::network`].

#[cfg(feature = "torch")]
pub mod train;

use braid_sched_core::sched::edar::{EdarNetwork, EdarNetworkError, FEATURES};

use crate::model::{Component, Model, ModelError, Provenance};

/// The `kind` of an EdAR model file.
pub const MODEL_KIND: &str = "edar-dqn";

/// The component name of LSTM1 for `feature` (0..6).
pub fn feature_component(feature: usize) -> String {
    format!("feature{feature}")
}

/// Why a model is not a usable EdAR network.
#[derive(Debug, thiserror::Error)]
pub enum EdarModelError {
    /// The file or one of its components is wrong.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The parts do not have EdAR's shapes.
    #[error(transparent)]
    Network(#[from] EdarNetworkError),
}

/// `network` as an `edar-dqn` model with `provenance`.
pub fn to_model(network: &EdarNetwork, provenance: Provenance) -> Result<Model, ModelError> {
    let mut model = Model::new(MODEL_KIND, provenance)?;
    for (i, lstm) in network.features().iter().enumerate() {
        model = model.with(feature_component(i), Component::Lstm(lstm.clone()))?;
    }
    model
        .with("across", Component::Lstm(network.across().clone()))?
        .with("core", Component::Mlp(network.core().clone()))
}

/// The EdAR network in `model` (kind `edar-dqn`), shape-checked.
pub fn from_model(model: &Model) -> Result<EdarNetwork, EdarModelError> {
    if model.kind() != MODEL_KIND {
        return Err(ModelError::BadField {
            field: "kind".to_owned(),
            value: model.kind().to_owned(),
            expected: "edar-dqn",
        }
        .into());
    }
    let mut features = Vec::with_capacity(FEATURES);
    for i in 0..FEATURES {
        features.push(model.lstm(&feature_component(i))?.clone());
    }
    let across = model.lstm("across")?.clone();
    let core = model.mlp("core")?.clone();
    Ok(EdarNetwork::new(features, across, core)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_round_trips_through_the_file_format() {
        let network = EdarNetwork::initial(5);
        let model = to_model(&network, Provenance::new(1, "test")).unwrap();
        let bytes = model.to_bytes().unwrap();
        let back = from_model(&Model::from_bytes(&bytes).unwrap()).unwrap();
        assert_eq!(back, network);
    }

    #[test]
    fn wrong_kind_and_missing_parts_are_named() {
        let network = EdarNetwork::initial(5);
        let other = Model::new("falcon-dqn", Provenance::default())
            .unwrap()
            .with("core", Component::Mlp(network.core().clone()))
            .unwrap();
        let err = from_model(&other).unwrap_err().to_string();
        assert!(err.contains("kind") && err.contains("falcon-dqn"), "{err}");
        let partial = Model::new(MODEL_KIND, Provenance::default())
            .unwrap()
            .with("core", Component::Mlp(network.core().clone()))
            .unwrap();
        let err = from_model(&partial).unwrap_err().to_string();
        assert!(err.contains("feature0"), "{err}");
    }
}
