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
//! is allocated per decision. Matrix-vector products run over a transposed copy of each weight
//! matrix, sixteen outputs at a time held in registers ([`matvec_transposed`]), which the
//! compiler vectorises without reordering any sum; activations use a vectorisable `exp`
//! ([`activation`]).
//!
//! Loading these parts from files is `braid-learners`' job (`docs/models.md`); this module keeps
//! sched-core free of file formats.

pub mod activation;
mod lstm;
mod mlp;

pub use activation::Activation;
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

/// `y = W x + b` with PyTorch's `nn.Linear` layout: `weight` is `outputs × inputs`, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    inputs: usize,
    outputs: usize,
    weight: Box<[f32]>,
    /// `weight` transposed (`inputs × outputs`, row-major), the layout the forward pass reads.
    weight_t: Box<[f32]>,
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
            weight_t: transpose(&weight, outputs, inputs),
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
        matvec_transposed(&self.weight_t, input, &self.bias, output);
    }
}

/// `rows × cols` row-major `matrix`, transposed (`cols × rows`, row-major).
pub(crate) fn transpose(matrix: &[f32], rows: usize, cols: usize) -> Box<[f32]> {
    let mut out = vec![0.0; rows * cols];
    for (r, row) in matrix.chunks_exact(cols).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            out[c * rows + r] = v;
        }
    }
    out.into_boxed_slice()
}

/// `output = W x + bias` given `weight_t` = Wᵀ (`x.len() × output.len()`, row-major), i.e.
/// `output[j] = bias[j] + Σᵢ x[i] · weight_t[i][j]`; `bias` is as long as `output`.
///
/// Outputs are computed in tiles of 16 (then 8, 4, 1) kept in registers while the inputs stream
/// by; each output's sum runs over the inputs in order, so vectorising reorders nothing. On
/// x86-64 CPUs with AVX2 and FMA (detected at run time) an 8-wide, fused build of the same loop
/// runs.
/// Mismatched lengths compute fewer outputs or terms; nothing panics or goes out of bounds.
pub fn matvec_transposed(weight_t: &[f32], x: &[f32], bias: &[f32], output: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked just above; the check is a cached load).
        unsafe { matvec_avx2_fma(weight_t, x, bias, output) };
        return;
    }
    matvec_all_tiles::<false>(weight_t, x, bias, output);
}

/// [`matvec_transposed`] compiled for AVX2 with fused multiply-adds (8-wide vectors; each product
/// is added without an intermediate rounding, which only makes the sums more exact).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn matvec_avx2_fma(weight_t: &[f32], x: &[f32], bias: &[f32], output: &mut [f32]) {
    matvec_all_tiles::<true>(weight_t, x, bias, output);
}

#[inline(always)]
fn matvec_all_tiles<const FUSED: bool>(
    weight_t: &[f32],
    x: &[f32],
    bias: &[f32],
    output: &mut [f32],
) {
    let mut start = 0;
    start = matvec_tiles::<16, FUSED>(weight_t, x, bias, output, start);
    start = matvec_tiles::<8, FUSED>(weight_t, x, bias, output, start);
    start = matvec_tiles::<4, FUSED>(weight_t, x, bias, output, start);
    matvec_tiles::<1, FUSED>(weight_t, x, bias, output, start);
}

/// Computes outputs `start..` in tiles of `T` while a whole tile fits; returns where it stopped.
/// With `FUSED`, uses `mul_add` (only where the CPU has FMA: elsewhere it is a slow libm call).
#[inline(always)]
fn matvec_tiles<const T: usize, const FUSED: bool>(
    weight_t: &[f32],
    x: &[f32],
    bias: &[f32],
    output: &mut [f32],
    mut start: usize,
) -> usize {
    let width = output.len();
    while start + T <= width {
        let mut acc = [0.0f32; T];
        if let Some(b) = bias.get(start..).and_then(<[f32]>::first_chunk::<T>) {
            acc = *b;
        }
        for (xi, row) in x.iter().zip(weight_t.chunks_exact(width)) {
            if let Some(w) = row.get(start..).and_then(<[f32]>::first_chunk::<T>) {
                for k in 0..T {
                    acc[k] = if FUSED {
                        xi.mul_add(w[k], acc[k])
                    } else {
                        acc[k] + xi * w[k]
                    };
                }
            }
        }
        output[start..start + T].copy_from_slice(&acc);
        start += T;
    }
    start
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
    fn matvec_matches_naive_sums_for_every_tile_remainder() {
        for (inputs, outputs) in [(1, 1), (3, 5), (7, 16), (9, 29), (16, 64), (40, 37)] {
            let w: Vec<f32> = (0..inputs * outputs)
                .map(|i| (i as f32 * 0.37).sin())
                .collect();
            let x: Vec<f32> = (0..inputs).map(|i| (i as f32 * 0.11).cos()).collect();
            let b: Vec<f32> = (0..outputs).map(|i| i as f32 * 0.01).collect();
            let w_t = transpose(&w, outputs, inputs);
            let mut out = vec![0.0; outputs];
            matvec_transposed(&w_t, &x, &b, &mut out);
            // The portable build too, whatever this CPU has.
            let mut portable = vec![0.0; outputs];
            matvec_all_tiles::<false>(&w_t, &x, &b, &mut portable);
            for (j, got) in out.iter().chain(&portable).enumerate() {
                let j = j % outputs;
                let row = &w[j * inputs..(j + 1) * inputs];
                let want: f64 = f64::from(b[j])
                    + row
                        .iter()
                        .zip(&x)
                        .map(|(a, c)| f64::from(*a) * f64::from(*c))
                        .sum::<f64>();
                assert!(
                    (f64::from(*got) - want).abs() < 1e-5,
                    "{inputs}x{outputs} [{j}]"
                );
            }
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
}
