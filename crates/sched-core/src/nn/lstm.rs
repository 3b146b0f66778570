//! One LSTM layer with PyTorch `nn.LSTM` semantics, stepped over a sequence: EdAR §IV-B's
//! representation network runs one over each feature's last k = 5 samples and one across paths.
//!
//! Per step, with `x` the input and `(h, c)` the state:
//! `i = σ(W_ii x + b_ii + W_hi h + b_hi)`, `f = σ(W_if x + b_if + W_hf h + b_hf)`,
//! `g = tanh(W_ig x + b_ig + W_hg h + b_hg)`, `o = σ(W_io x + b_io + W_ho h + b_ho)`,
//! `c' = f ⊙ c + i ⊙ g`, `h' = o ⊙ tanh(c')`. PyTorch stacks the four gates' rows in the order
//! i, f, g, o in `weight_ih` (`4H × I`), `weight_hh` (`4H × H`), `bias_ih` and `bias_hh` (`4H`).
//! Here each gate row of `weight_ih` and `weight_hh` is joined into one `4H × (I + H)` matrix,
//! stored transposed, so that one matrix-vector product over `[x; h]` gives all four gates'
//! pre-activations; the two biases are summed once.

use super::activation::{sigmoid_in_place, tanh_in_place};
use super::{NnError, check_buffer, check_dimension, check_tensor, matvec_transposed, transpose};

/// One LSTM layer (`nn.LSTM` with `num_layers = 1`, `batch_first` irrelevant: one sequence).
#[derive(Clone, Debug, PartialEq)]
pub struct Lstm {
    input_size: usize,
    hidden_size: usize,
    /// `(I + H) × 4H`, row-major: the transpose of the matrix whose gate row `r` is
    /// `[weight_ih[r], weight_hh[r]]`.
    weight_t: Box<[f32]>,
    weight_ih: Box<[f32]>,
    weight_hh: Box<[f32]>,
    /// `bias_ih + bias_hh`, `4H`.
    bias: Box<[f32]>,
    bias_ih: Box<[f32]>,
    bias_hh: Box<[f32]>,
}

/// The recurrent state `(h, c)` of an [`Lstm`], `hidden_size` each; zero at the start of a
/// sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct LstmState {
    h: Box<[f32]>,
    c: Box<[f32]>,
}

impl LstmState {
    /// The hidden state `h` (the layer's output after the last step).
    pub fn hidden(&self) -> &[f32] {
        &self.h
    }

    /// The cell state `c`.
    pub fn cell(&self) -> &[f32] {
        &self.c
    }

    /// Sets both to zero, as at the start of a sequence.
    pub fn reset(&mut self) {
        self.h.fill(0.0);
        self.c.fill(0.0);
    }
}

/// Scratch space for [`Lstm::step`]: `[x; h]` and the four gates. Build it once with
/// [`Lstm::scratch`].
#[derive(Clone, Debug, PartialEq)]
pub struct LstmScratch {
    joined: Box<[f32]>,
    gates: Box<[f32]>,
}

impl Lstm {
    /// A layer from PyTorch's four tensors (see the module docs for their shapes).
    pub fn new(
        input_size: usize,
        hidden_size: usize,
        weight_ih: &[f32],
        weight_hh: &[f32],
        bias_ih: &[f32],
        bias_hh: &[f32],
    ) -> Result<Self, NnError> {
        check_dimension("lstm", "input_size", input_size)?;
        check_dimension("lstm", "hidden_size", hidden_size)?;
        let gates = 4 * hidden_size;
        check_tensor("weight_ih", &[gates, input_size], weight_ih)?;
        check_tensor("weight_hh", &[gates, hidden_size], weight_hh)?;
        check_tensor("bias_ih", &[gates], bias_ih)?;
        check_tensor("bias_hh", &[gates], bias_hh)?;
        let mut weight = Vec::with_capacity(gates * (input_size + hidden_size));
        for (row_ih, row_hh) in weight_ih
            .chunks_exact(input_size)
            .zip(weight_hh.chunks_exact(hidden_size))
        {
            weight.extend_from_slice(row_ih);
            weight.extend_from_slice(row_hh);
        }
        let bias: Vec<f32> = bias_ih.iter().zip(bias_hh).map(|(a, b)| a + b).collect();
        Ok(Lstm {
            input_size,
            hidden_size,
            weight_t: transpose(&weight, gates, input_size + hidden_size),
            weight_ih: weight_ih.into(),
            weight_hh: weight_hh.into(),
            bias: bias.into_boxed_slice(),
            bias_ih: bias_ih.into(),
            bias_hh: bias_hh.into(),
        })
    }

    /// Input width `I`.
    pub fn input_size(&self) -> usize {
        self.input_size
    }

    /// Hidden width `H`.
    pub fn hidden_size(&self) -> usize {
        self.hidden_size
    }

    /// PyTorch's `weight_ih` (`4H × I`), row-major.
    pub fn weight_ih(&self) -> &[f32] {
        &self.weight_ih
    }

    /// PyTorch's `weight_hh` (`4H × H`), row-major.
    pub fn weight_hh(&self) -> &[f32] {
        &self.weight_hh
    }

    /// PyTorch's `bias_ih` (`4H`).
    pub fn bias_ih(&self) -> &[f32] {
        &self.bias_ih
    }

    /// PyTorch's `bias_hh` (`4H`).
    pub fn bias_hh(&self) -> &[f32] {
        &self.bias_hh
    }

    /// A zero state sized for this layer.
    pub fn state(&self) -> LstmState {
        LstmState {
            h: vec![0.0; self.hidden_size].into_boxed_slice(),
            c: vec![0.0; self.hidden_size].into_boxed_slice(),
        }
    }

    /// Scratch space sized for this layer.
    pub fn scratch(&self) -> LstmScratch {
        LstmScratch {
            joined: vec![0.0; self.input_size + self.hidden_size].into_boxed_slice(),
            gates: vec![0.0; 4 * self.hidden_size].into_boxed_slice(),
        }
    }

    fn check_buffers(&self, state: &LstmState, scratch: &LstmScratch) -> Result<(), NnError> {
        check_buffer("state.h", self.hidden_size, state.h.len())?;
        check_buffer("state.c", self.hidden_size, state.c.len())?;
        check_buffer(
            "scratch",
            self.input_size + self.hidden_size,
            scratch.joined.len(),
        )?;
        check_buffer("scratch", 4 * self.hidden_size, scratch.gates.len())
    }

    /// Advances `state` by one input `x` (`input_size` long).
    pub fn step(
        &self,
        x: &[f32],
        state: &mut LstmState,
        scratch: &mut LstmScratch,
    ) -> Result<(), NnError> {
        check_buffer("input", self.input_size, x.len())?;
        self.check_buffers(state, scratch)?;
        self.step_unchecked(x, state, scratch);
        Ok(())
    }

    /// Runs the sequence `inputs` (time-major, `steps × input_size`) from `state` (call
    /// [`LstmState::reset`] first for a fresh sequence) and returns the final hidden state.
    pub fn forward_sequence<'s>(
        &self,
        inputs: &[f32],
        state: &'s mut LstmState,
        scratch: &mut LstmScratch,
    ) -> Result<&'s [f32], NnError> {
        if !inputs.len().is_multiple_of(self.input_size) {
            return Err(NnError::Buffer {
                buffer: "inputs",
                expected: inputs.len().next_multiple_of(self.input_size),
                found: inputs.len(),
            });
        }
        self.check_buffers(state, scratch)?;
        for x in inputs.chunks_exact(self.input_size) {
            self.step_unchecked(x, state, scratch);
        }
        Ok(&state.h)
    }

    fn step_unchecked(&self, x: &[f32], state: &mut LstmState, scratch: &mut LstmScratch) {
        let (joined_x, joined_h) = scratch.joined.split_at_mut(self.input_size);
        joined_x.copy_from_slice(x);
        joined_h.copy_from_slice(&state.h);
        matvec_transposed(
            &self.weight_t,
            &scratch.joined,
            &self.bias,
            &mut scratch.gates,
        );
        let hidden = self.hidden_size;
        // Activations over whole gate vectors (vectorised): σ for i, f, o and tanh for g.
        let (ifg, o) = scratch.gates.split_at_mut(3 * hidden);
        let (i_f, g) = ifg.split_at_mut(2 * hidden);
        sigmoid_in_place(i_f);
        tanh_in_place(g);
        sigmoid_in_place(o);
        let (i, f) = i_f.split_at(hidden);
        for (((c, i), f), g) in state.c.iter_mut().zip(i).zip(f).zip(g.iter()) {
            *c = f * *c + i * g;
        }
        // h = o ⊙ tanh(c').
        state.h.copy_from_slice(&state.c);
        tanh_in_place(&mut state.h);
        for (h, o) in state.h.iter_mut().zip(o.iter()) {
            *h *= o;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 + seed) * 0.613).sin() * 0.4)
            .collect()
    }

    fn layer(input: usize, hidden: usize) -> Lstm {
        let g = 4 * hidden;
        Lstm::new(
            input,
            hidden,
            &values(g * input, 1.),
            &values(g * hidden, 2.),
            &values(g, 3.),
            &values(g, 4.),
        )
        .unwrap()
    }

    /// PyTorch's equations, computed in f64 straight from the four tensors.
    fn reference(l: &Lstm, inputs: &[f32]) -> Vec<f64> {
        let (n, hs) = (l.input_size(), l.hidden_size());
        let (wih, whh) = (l.weight_ih(), l.weight_hh());
        let mut h = vec![0f64; hs];
        let mut c = vec![0f64; hs];
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        for x in inputs.chunks(n) {
            let pre: Vec<f64> = (0..4 * hs)
                .map(|r| {
                    let a: f64 = (0..n).map(|k| f64::from(wih[r * n + k] * x[k])).sum();
                    let b: f64 = (0..hs).map(|k| f64::from(whh[r * hs + k]) * h[k]).sum();
                    a + b + f64::from(l.bias_ih()[r]) + f64::from(l.bias_hh()[r])
                })
                .collect();
            for u in 0..hs {
                c[u] = sig(pre[hs + u]) * c[u] + sig(pre[u]) * pre[2 * hs + u].tanh();
                h[u] = sig(pre[3 * hs + u]) * c[u].tanh();
            }
        }
        h
    }

    #[test]
    fn sequence_matches_pytorch_equations() {
        for (input, hidden) in [(1, 8), (8, 32), (5, 3)] {
            let l = layer(input, hidden);
            let (mut state, mut scratch) = (l.state(), l.scratch());
            let inputs = values(5 * input, 9.);
            let got = l
                .forward_sequence(&inputs, &mut state, &mut scratch)
                .unwrap();
            for (g, w) in got.iter().zip(reference(&l, &inputs)) {
                assert!((f64::from(*g) - w).abs() < 1e-5, "{g} vs {w}");
            }
        }
    }

    #[test]
    fn step_by_step_equals_sequence_and_reset_restarts() {
        let l = layer(4, 6);
        let inputs = values(20, 5.);
        let (mut a, mut b, mut scratch) = (l.state(), l.state(), l.scratch());
        for x in inputs.chunks(4) {
            l.step(x, &mut a, &mut scratch).unwrap();
        }
        l.forward_sequence(&inputs, &mut b, &mut scratch).unwrap();
        assert_eq!(a, b);
        b.reset();
        assert_eq!(b, l.state());
    }

    #[test]
    fn export_round_trips_and_errors_name_tensors() {
        let l = layer(3, 2);
        let again = Lstm::new(3, 2, l.weight_ih(), l.weight_hh(), l.bias_ih(), l.bias_hh());
        assert_eq!(again.unwrap(), l);
        let err = Lstm::new(3, 2, &[0.0; 24], &[0.0; 15], &[0.0; 8], &[0.0; 8]).unwrap_err();
        assert!(err.to_string().starts_with("weight_hh"), "{err}");
        let (mut state, mut scratch) = (l.state(), l.scratch());
        assert!(matches!(
            l.forward_sequence(&[0.0; 4], &mut state, &mut scratch),
            Err(NnError::Buffer {
                buffer: "inputs",
                ..
            })
        ));
        let other = layer(3, 5);
        assert!(matches!(
            l.step(&[0.0; 3], &mut other.state(), &mut scratch),
            Err(NnError::Buffer {
                buffer: "state.h",
                ..
            })
        ));
    }
}
