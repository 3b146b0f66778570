//! The tch side of the learned schedulers (feature `torch`): trainable networks built with
//! `tch::nn` that mirror sched-core's inference parts one to one, and their export into those
//! parts, so that what a learner trains is exactly what the hot path runs (DESIGN.md "learners").
//!
//! - [`TchMlp`] mirrors [`braid_sched_core::nn::Mlp`] (FALCON §4.2's DQN, EdAR §IV-B's core);
//! - [`TchLstm`] mirrors [`braid_sched_core::nn::Lstm`] (one `nn.LSTM` layer, batch first).
//!
//! The parity tests (`tests/parity.rs`) check that both forward passes agree to 1e-5.

pub use tch;

use braid_sched_core::nn::{Activation, Linear, Lstm, Mlp, NnError};
use tch::nn::{self, Module, RNN};
use tch::{Kind, Tensor};

/// Why a tch network could not be built or exported.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A tensor could not be read back from tch.
    #[error("tensor `{tensor}`: {source}")]
    Tch {
        /// The tensor.
        tensor: String,
        /// Why.
        #[source]
        source: tch::TchError,
    },
    /// The weights do not form a valid sched-core network.
    #[error(transparent)]
    Network(#[from] NnError),
    /// An MLP needs at least an input and an output width.
    #[error("MLP widths {widths:?}: need at least two, each in 1..=65536")]
    Widths {
        /// The widths given.
        widths: Vec<usize>,
    },
}

/// The f32 values of `tensor`, flattened row-major.
fn values(tensor: &Tensor, name: &str) -> Result<Vec<f32>, ExportError> {
    let flat = tensor
        .detach()
        .to_device(tch::Device::Cpu)
        .to_kind(Kind::Float)
        .contiguous()
        .view(-1);
    Vec::<f32>::try_from(&flat).map_err(|source| ExportError::Tch {
        tensor: name.to_owned(),
        source,
    })
}

/// Copies `values` (row-major, as many as `variable` holds) into `variable` in place.
fn copy_into(variable: &Tensor, values: &[f32]) {
    let mut v = variable.shallow_clone();
    let source = Tensor::from_slice(values)
        .view(variable.size().as_slice())
        .to_device(variable.device());
    v.copy_(&source);
}

fn dim(value: usize) -> i64 {
    // Widths are checked against MAX_DIMENSION (2^16) before they get here.
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A tch MLP: linear layers with `activation` between them, none after the last.
#[derive(Debug)]
pub struct TchMlp {
    layers: Vec<nn::Linear>,
    widths: Vec<usize>,
    activation: Activation,
}

impl TchMlp {
    /// Creates the layers under `path` (variables `0.weight`, `0.bias`, `1.weight`, …) for
    /// `widths` (input, hidden…, output).
    pub fn new(
        path: &nn::Path<'_>,
        widths: &[usize],
        activation: Activation,
    ) -> Result<Self, ExportError> {
        let max = braid_sched_core::nn::MAX_DIMENSION;
        if widths.len() < 2 || widths.iter().any(|&w| w == 0 || w > max) {
            return Err(ExportError::Widths {
                widths: widths.to_vec(),
            });
        }
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, pair)| {
                nn::linear(
                    path / i.to_string(),
                    dim(pair[0]),
                    dim(pair[1]),
                    Default::default(),
                )
            })
            .collect();
        Ok(TchMlp {
            layers,
            widths: widths.to_vec(),
            activation,
        })
    }

    /// The layers (for optimisers and weight surgery).
    pub fn layers(&self) -> &[nn::Linear] {
        &self.layers
    }

    /// Overwrites the variables with `mlp`'s weights (layer by layer; `mlp` has this network's
    /// widths). Runs without recording gradients.
    pub fn load(&self, mlp: &Mlp) {
        tch::no_grad(|| {
            for (layer, linear) in self.layers.iter().zip(mlp.layers()) {
                copy_into(&layer.ws, linear.weight());
                if let Some(bs) = &layer.bs {
                    copy_into(bs, linear.bias());
                }
            }
        });
    }

    /// The same network as a sched-core [`Mlp`].
    pub fn export(&self) -> Result<Mlp, ExportError> {
        let mut layers = Vec::with_capacity(self.layers.len());
        for (i, (layer, pair)) in self.layers.iter().zip(self.widths.windows(2)).enumerate() {
            let name = format!("layer {i}");
            let weight = values(&layer.ws, &format!("{name} weight"))?;
            let bias = match &layer.bs {
                Some(bs) => values(bs, &format!("{name} bias"))?,
                None => vec![0.0; pair[1]],
            };
            layers.push(Linear::new(&name, pair[0], pair[1], weight, bias)?);
        }
        Ok(Mlp::new(layers, self.activation)?)
    }
}

impl Module for TchMlp {
    fn forward(&self, xs: &Tensor) -> Tensor {
        let last = self.layers.len().saturating_sub(1);
        let mut x = xs.shallow_clone();
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x);
            if i != last {
                x = match self.activation {
                    Activation::Relu => x.relu(),
                    Activation::Tanh => x.tanh(),
                    Activation::Identity => x,
                };
            }
        }
        x
    }
}

/// A tch LSTM layer (`nn.LSTM`, one layer, batch first) whose final hidden state is its output.
#[derive(Debug)]
pub struct TchLstm {
    lstm: nn::LSTM,
    input_size: usize,
    hidden_size: usize,
    /// weight_ih, weight_hh, bias_ih, bias_hh (shallow clones of the variables).
    tensors: [Tensor; 4],
}

/// The variable names tch gives a one-layer LSTM's tensors, in [`TchLstm::tensors`] order.
const LSTM_VARIABLES: [&str; 4] = ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"];

impl TchLstm {
    /// Creates the layer under `path` (variables `weight_ih_l0`, `weight_hh_l0`, `bias_ih_l0`,
    /// `bias_hh_l0`, as PyTorch names them).
    pub fn new(
        path: &nn::Path<'_>,
        input_size: usize,
        hidden_size: usize,
    ) -> Result<Self, ExportError> {
        let max = braid_sched_core::nn::MAX_DIMENSION;
        if !(1..=max).contains(&input_size) || !(1..=max).contains(&hidden_size) {
            return Err(ExportError::Widths {
                widths: vec![input_size, hidden_size],
            });
        }
        let lstm = nn::lstm(path, dim(input_size), dim(hidden_size), Default::default());
        let mut tensors = Vec::with_capacity(4);
        for name in LSTM_VARIABLES {
            let tensor = path.get(name).ok_or_else(|| ExportError::Tch {
                tensor: name.to_owned(),
                source: tch::TchError::Kind(format!("tch created no variable `{name}`")),
            })?;
            tensors.push(tensor);
        }
        let tensors: [Tensor; 4] = tensors.try_into().map_err(|_| ExportError::Tch {
            tensor: "lstm".to_owned(),
            source: tch::TchError::Kind("expected four LSTM variables".to_owned()),
        })?;
        Ok(TchLstm {
            lstm,
            input_size,
            hidden_size,
            tensors,
        })
    }

    /// The four variables: `weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`.
    pub fn tensors(&self) -> &[Tensor; 4] {
        &self.tensors
    }

    /// Runs `xs` (`[batch, steps, input_size]`) from a zero state; returns the final hidden
    /// state, `[batch, hidden_size]`.
    pub fn forward_sequence(&self, xs: &Tensor) -> Tensor {
        let (_, state) = self.lstm.seq(xs);
        // h is [num_layers = 1, batch, hidden].
        state.h().squeeze_dim(0)
    }

    /// Overwrites the four variables with `lstm`'s weights (same sizes). Runs without recording
    /// gradients.
    pub fn load(&self, lstm: &Lstm) {
        let sources = [
            lstm.weight_ih(),
            lstm.weight_hh(),
            lstm.bias_ih(),
            lstm.bias_hh(),
        ];
        tch::no_grad(|| {
            for (t, src) in self.tensors.iter().zip(sources) {
                copy_into(t, src);
            }
        });
    }

    /// The same layer as a sched-core [`Lstm`].
    pub fn export(&self) -> Result<Lstm, ExportError> {
        let [w_ih, w_hh, b_ih, b_hh] = &self.tensors;
        Ok(Lstm::new(
            self.input_size,
            self.hidden_size,
            &values(w_ih, "weight_ih")?,
            &values(w_hh, "weight_hh")?,
            &values(b_ih, "bias_ih")?,
            &values(b_hh, "bias_hh")?,
        )?)
    }
}
