//! Pure-Rust, allocation-free f32 inference for the learned schedulers' networks (DESIGN.md
//! "sched-core": the forward pass matches the tch model it was exported from).
//!
//! The parts are those the papers' networks are made of, so that each model composes from them:
//! - [`Linear`]: `y = W x + b`, with PyTorch's `nn.Linear` layout (`W` is `out × in`, row-major);
//! - [`Mlp`]: a chain of [`Linear`] layers with an activation between them and none after the
//!   last (FALCON §4.2's DQN: three hidden layers; EdAR §IV-B's 128/32 core);
//! - [`Lstm`]: one `nn.LSTM` layer (PyTorch gate order i, f, g, o; `weight_ih`, `weight_hh`,
//!   `bias_ih`, `bias_hh`), stepped over a sequence (EdAR §IV-B's representation network runs an
//!   LSTM per feature over the last k = 5 samples, then an LSTM across paths).
//!
//! Weights are validated once, at construction ([`NnError`] names the offending tensor); after
//! that a forward pass only checks the lengths of the slices it is given, and writes into scratch
//! space the caller built beforehand ([`MlpScratch`], [`LstmState`], [`LstmScratch`]), so nothing
//! is allocated per decision. Inner loops are dot products over contiguous rows with eight
//! independent accumulators, which the compiler turns into SIMD code.
//!
//! Loading these parts from files is `braid-learners`' job (`docs/models.md`); this module keeps
//! sched-core free of file formats.

mod lstm;
mod mlp;

pub use lstm::{Lstm, LstmScratch, LstmState};
pub use mlp::{Mlp, MlpScratch};

/// What is wrong with a network's weights or with the buffers handed to a forward pass.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NnError {
    /// A tensor has the wrong number of values for the declared shape.
    #[error("{tensor}: {found} values, expected {expected} for shape {shape:?}")]
    Length {
        /// The tensor (e.g. `layer 2 weight`, `weight_hh`).
        tensor: String,
        /// The declared shape.
        shape: Vec<usize>,
        /// Values the shape calls for.
        expected: usize,
        /// Values given.
        found: usize,
    },
    /// A dimension is zero, or so large that the tensor cannot be indexed.
    #[error("{tensor}: dimension {dimension} = {value} is out of range 1..={max}")]
    Dimension {
        /// The tensor.
        tensor: String,
        /// Which dimension (e.g. `inputs`, `hidden_size`).
        dimension: &'static str,
        /// The offending value.
        value: usize,
        /// The largest accepted.
        max: usize,
    },
    /// A weight is NaN or infinite.
    #[error("{tensor}: value {index} is not finite ({value})")]
    NotFinite {
        /// The tensor.
        tensor: String,
        /// Index of the value in the flattened tensor.
        index: usize,
        /// The value.
        value: f32,
    },
    /// Consecutive layers do not chain (`outputs` of one differs from `inputs` of the next).
    #[error("layer {layer} takes {inputs} inputs but layer {previous} gives {outputs}", previous = layer - 1)]
    Chain {
        /// The layer whose input width is wrong.
        layer: usize,
        /// Its input width.
        inputs: usize,
        /// The previous layer's output width.
        outputs: usize,
    },
    /// An MLP needs at least one layer.
    #[error("an MLP needs at least one layer")]
    NoLayers,
    /// A buffer handed to a forward pass has the wrong length.
    #[error("{buffer}: length {found}, expected {expected}")]
    Buffer {
        /// The buffer (e.g. `input`, `output`, `state.h`).
        buffer: &'static str,
        /// Length required.
        expected: usize,
        /// Length given.
        found: usize,
    },
}

/// The largest width of any dimension the loaders accept (keeps `rows × cols` far from overflow).
pub const MAX_DIMENSION: usize = 1 << 16;

/// The nonlinearity between the layers of an [`Mlp`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Activation {
    /// `max(x, 0)` (PyTorch `relu`).
    #[default]
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// No nonlinearity.
    Identity,
}

impl Activation {
    /// Applies the activation in place.
    pub fn apply(self, values: &mut [f32]) {
        match self {
            Activation::Relu => values.iter_mut().for_each(|v| *v = v.max(0.0)),
            Activation::Tanh => values.iter_mut().for_each(|v| *v = v.tanh()),
            Activation::Identity => {}
        }
    }

    /// The name used in model files (`relu`, `tanh`, `identity`).
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Tanh => "tanh",
            Activation::Identity => "identity",
        }
    }

    /// The activation named `name` (as [`Activation::name`] writes it), if any.
    pub fn from_name(name: &str) -> Option<Activation> {
        match name {
            "relu" => Some(Activation::Relu),
            "tanh" => Some(Activation::Tanh),
            "identity" => Some(Activation::Identity),
            _ => None,
        }
    }
}

/// `y = W x + b` with PyTorch's `nn.Linear` layout: `weight` is `outputs × inputs`, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    inputs: usize,
    outputs: usize,
    weight: Box<[f32]>,
    bias: Box<[f32]>,
}

impl Linear {
    /// A layer from its weights; `name` is used in errors (e.g. `layer 0`).
    pub fn new(
        name: &str,
        inputs: usize,
        outputs: usize,
        weight: Vec<f32>,
        bias: Vec<f32>,
    ) -> Result<Self, NnError> {
        check_dimension(name, "inputs", inputs)?;
        check_dimension(name, "outputs", outputs)?;
        check_tensor(&format!("{name} weight"), &[outputs, inputs], &weight)?;
        check_tensor(&format!("{name} bias"), &[outputs], &bias)?;
        Ok(Linear {
            inputs,
            outputs,
            weight: weight.into_boxed_slice(),
            bias: bias.into_boxed_slice(),
        })
    }

    /// Input width.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Output width.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// The weight matrix, `outputs × inputs`, row-major.
    pub fn weight(&self) -> &[f32] {
        &self.weight
    }

    /// The bias, `outputs` long.
    pub fn bias(&self) -> &[f32] {
        &self.bias
    }

    /// Writes `W input + b` into `output`.
    pub fn forward(&self, input: &[f32], output: &mut [f32]) -> Result<(), NnError> {
        check_buffer("input", self.inputs, input.len())?;
        check_buffer("output", self.outputs, output.len())?;
        self.forward_unchecked(input, output);
        Ok(())
    }

    /// [`Linear::forward`] for callers that checked the lengths already (shorter slices would only
    /// produce fewer outputs; nothing can go out of bounds).
    pub(crate) fn forward_unchecked(&self, input: &[f32], output: &mut [f32]) {
        for ((out, row), b) in output
            .iter_mut()
            .zip(self.weight.chunks_exact(self.inputs))
            .zip(self.bias.iter())
        {
            *out = dot(row, input) + b;
        }
    }
}

/// The dot product of two equally long slices, with eight independent partial sums so that the
/// loop vectorises (a single running sum would force sequential, scalar additions).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut acc = [0.0f32; LANES];
    let a_chunks = a.chunks_exact(LANES);
    let b_chunks = b.chunks_exact(LANES);
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..LANES {
            acc[lane] += x[lane] * y[lane];
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Checks that a dimension is within `1..=MAX_DIMENSION`.
pub(crate) fn check_dimension(
    tensor: &str,
    dimension: &'static str,
    value: usize,
) -> Result<(), NnError> {
    if value == 0 || value > MAX_DIMENSION {
        return Err(NnError::Dimension {
            tensor: tensor.to_owned(),
            dimension,
            value,
            max: MAX_DIMENSION,
        });
    }
    Ok(())
}

/// Checks that `values` has the length `shape` calls for and holds only finite numbers.
pub(crate) fn check_tensor(tensor: &str, shape: &[usize], values: &[f32]) -> Result<(), NnError> {
    let expected = shape.iter().product::<usize>();
    if values.len() != expected {
        return Err(NnError::Length {
            tensor: tensor.to_owned(),
            shape: shape.to_vec(),
            expected,
            found: values.len(),
        });
    }
    if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(NnError::NotFinite {
            tensor: tensor.to_owned(),
            index,
            value,
        });
    }
    Ok(())
}

/// Checks a forward-pass buffer's length.
pub(crate) fn check_buffer(
    buffer: &'static str,
    expected: usize,
    found: usize,
) -> Result<(), NnError> {
    if expected != found {
        return Err(NnError::Buffer {
            buffer,
            expected,
            found,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_naive_sum_for_all_tail_lengths() {
        for len in 0..40 {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let naive: f64 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum();
            assert!((f64::from(dot(&a, &b)) - naive).abs() < 1e-5, "len {len}");
        }
    }

    #[test]
    fn linear_forward_and_errors() {
        let layer = Linear::new("l", 3, 2, vec![1., 2., 3., 4., 5., 6.], vec![0.5, -1.]).unwrap();
        let mut out = [0.0; 2];
        layer.forward(&[1., 0., -1.], &mut out).unwrap();
        assert_eq!(out, [1. - 3. + 0.5, 4. - 6. - 1.]);
        assert_eq!(
            layer.forward(&[1., 0.], &mut out),
            Err(NnError::Buffer {
                buffer: "input",
                expected: 3,
                found: 2
            })
        );
        let err = Linear::new("layer 1", 3, 2, vec![0.; 5], vec![0.; 2]).unwrap_err();
        assert!(err.to_string().contains("layer 1 weight"), "{err}");
        let err = Linear::new("l", 0, 2, vec![], vec![0.; 2]).unwrap_err();
        assert!(matches!(
            err,
            NnError::Dimension {
                dimension: "inputs",
                ..
            }
        ));
        let err = Linear::new("l", 1, 1, vec![f32::NAN], vec![0.]).unwrap_err();
        assert!(matches!(err, NnError::NotFinite { index: 0, .. }));
    }

    #[test]
    fn activations_round_trip_names() {
        for a in [Activation::Relu, Activation::Tanh, Activation::Identity] {
            assert_eq!(Activation::from_name(a.name()), Some(a));
        }
        assert_eq!(Activation::from_name("gelu"), None);
        let mut v = [-1.0, 2.0];
        Activation::Relu.apply(&mut v);
        assert_eq!(v, [0.0, 2.0]);
    }
}
