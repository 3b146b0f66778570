//! A multilayer perceptron: [`Linear`] layers with an activation between them and none after the
//! last, as `tch::nn::seq().add(linear).add_fn(relu)…` builds it. FALCON §4.2's DQN is one
//! (per-path state in, one Q-value per path out, three hidden layers); so is EdAR §IV-B's core
//! (128 and 32 units, two Q-values out).

use super::{Activation, Linear, NnError, check_buffer};

/// A chain of [`Linear`] layers; `hidden` is applied after every layer but the last.
#[derive(Clone, Debug, PartialEq)]
pub struct Mlp {
    layers: Box<[Linear]>,
    hidden: Activation,
    max_width: usize,
}

/// Scratch space for [`Mlp::forward`]: two buffers as wide as the MLP's widest layer. Build it
/// once with [`Mlp::scratch`] and reuse it for every decision.
#[derive(Clone, Debug, PartialEq)]
pub struct MlpScratch {
    front: Box<[f32]>,
    back: Box<[f32]>,
}

impl Mlp {
    /// An MLP from its layers, in order; each layer's `inputs` must equal the previous layer's
    /// `outputs`.
    pub fn new(layers: Vec<Linear>, hidden: Activation) -> Result<Self, NnError> {
        if layers.is_empty() {
            return Err(NnError::NoLayers);
        }
        for (layer, pair) in layers.windows(2).enumerate() {
            if pair[1].inputs() != pair[0].outputs() {
                return Err(NnError::Chain {
                    layer: layer + 1,
                    inputs: pair[1].inputs(),
                    outputs: pair[0].outputs(),
                });
            }
        }
        let max_width = layers
            .iter()
            .map(|l| l.inputs().max(l.outputs()))
            .max()
            .unwrap_or(0);
        Ok(Mlp {
            layers: layers.into_boxed_slice(),
            hidden,
            max_width,
        })
    }

    /// The layers, input side first.
    pub fn layers(&self) -> &[Linear] {
        &self.layers
    }

    /// The activation between layers.
    pub fn hidden_activation(&self) -> Activation {
        self.hidden
    }

    /// Input width.
    pub fn inputs(&self) -> usize {
        self.layers.first().map_or(0, Linear::inputs)
    }

    /// Output width.
    pub fn outputs(&self) -> usize {
        self.layers.last().map_or(0, Linear::outputs)
    }

    /// Widths from input to output, e.g. `[16, 64, 64, 64, 4]`.
    pub fn widths(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.inputs()).chain(self.layers.iter().map(Linear::outputs))
    }

    /// Scratch space sized for this MLP.
    pub fn scratch(&self) -> MlpScratch {
        MlpScratch {
            front: vec![0.0; self.max_width].into_boxed_slice(),
            back: vec![0.0; self.max_width].into_boxed_slice(),
        }
    }

    /// Runs `input` through the network; the result lives in `scratch` until its next use.
    pub fn forward<'s>(
        &self,
        input: &[f32],
        scratch: &'s mut MlpScratch,
    ) -> Result<&'s [f32], NnError> {
        check_buffer("input", self.inputs(), input.len())?;
        check_buffer("scratch", self.max_width, scratch.front.len())?;
        check_buffer("scratch", self.max_width, scratch.back.len())?;
        let MlpScratch { front, back } = scratch;
        let (mut current, mut next): (&mut [f32], &mut [f32]) = (front, back);
        let last = self.layers.len() - 1;
        for (index, layer) in self.layers.iter().enumerate() {
            let source: &[f32] = if index == 0 {
                input
            } else {
                &current[..layer.inputs()]
            };
            let target = &mut next[..layer.outputs()];
            layer.forward_unchecked(source, target);
            if index != last {
                self.hidden.apply(target);
            }
            std::mem::swap(&mut current, &mut next);
        }
        Ok(&current[..self.outputs()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(inputs: usize, outputs: usize, seed: f32) -> Linear {
        let weight = (0..inputs * outputs)
            // PyTorch's default scale, ±1/√inputs, keeps activations O(1) as in a real network.
            .map(|i| ((i as f32 + seed) * 0.731).sin() / (inputs as f32).sqrt())
            .collect();
        let bias = (0..outputs)
            .map(|i| ((i as f32 + seed) * 0.113).cos() * 0.1)
            .collect();
        Linear::new("test", inputs, outputs, weight, bias).unwrap()
    }

    /// The same network computed with fresh vectors, layer by layer.
    fn reference(mlp: &Mlp, input: &[f32]) -> Vec<f32> {
        let mut x = input.to_vec();
        for (i, l) in mlp.layers().iter().enumerate() {
            let mut y: Vec<f32> = (0..l.outputs())
                .map(|o| {
                    let row = &l.weight()[o * l.inputs()..(o + 1) * l.inputs()];
                    let sum: f64 = row.iter().zip(&x).map(|(w, v)| f64::from(w * v)).sum();
                    (sum + f64::from(l.bias()[o])) as f32
                })
                .collect();
            if i + 1 != mlp.layers().len() {
                mlp.hidden_activation().apply(&mut y);
            }
            x = y;
        }
        x
    }

    #[test]
    fn forward_matches_reference() {
        let mlp = Mlp::new(
            vec![
                layer(16, 64, 1.),
                layer(64, 64, 2.),
                layer(64, 64, 3.),
                layer(64, 4, 4.),
            ],
            Activation::Relu,
        )
        .unwrap();
        assert_eq!(mlp.widths().collect::<Vec<_>>(), [16, 64, 64, 64, 4]);
        let mut scratch = mlp.scratch();
        for trial in 0..20 {
            let input: Vec<f32> = (0..16).map(|i| ((i * 7 + trial) as f32).sin()).collect();
            let want = reference(&mlp, &input);
            let got = mlp.forward(&input, &mut scratch).unwrap();
            for (g, w) in got.iter().zip(&want) {
                // Only the summation order differs: a few ulps of the output's magnitude.
                assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
            }
        }
    }

    #[test]
    fn widening_then_narrowing_layers() {
        let mlp = Mlp::new(vec![layer(3, 50, 0.), layer(50, 1, 1.)], Activation::Tanh).unwrap();
        let mut scratch = mlp.scratch();
        let input = [0.1, -0.2, 0.3];
        let got = mlp.forward(&input, &mut scratch).unwrap().to_vec();
        assert_eq!(got.len(), 1);
        assert!((got[0] - reference(&mlp, &input)[0]).abs() < 1e-5);
    }

    #[test]
    fn rejects_bad_chains_and_buffers() {
        assert_eq!(Mlp::new(vec![], Activation::Relu), Err(NnError::NoLayers));
        assert_eq!(
            Mlp::new(vec![layer(4, 8, 0.), layer(7, 2, 0.)], Activation::Relu),
            Err(NnError::Chain {
                layer: 1,
                inputs: 7,
                outputs: 8
            })
        );
        let mlp = Mlp::new(vec![layer(4, 8, 0.)], Activation::Relu).unwrap();
        let small = Mlp::new(vec![layer(2, 2, 0.)], Activation::Relu).unwrap();
        assert!(matches!(
            mlp.forward(&[0.0; 3], &mut mlp.scratch()),
            Err(NnError::Buffer {
                buffer: "input",
                ..
            })
        ));
        assert!(matches!(
            mlp.forward(&[0.0; 4], &mut small.scratch()),
            Err(NnError::Buffer {
                buffer: "scratch",
                ..
            })
        ));
    }
}
