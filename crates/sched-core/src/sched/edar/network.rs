//! EdAR's Q-network (§IV-C, Figs. 5–6), run with sched-core's allocation-free [`crate::nn`] parts.
//!
//! - Representation network: one LSTM1 per feature (10 units, input one value per interval) runs
//!   over that feature's k + 1 = 6 intervals of one path; its hidden states after the last two
//!   intervals (the paper's "last two hidden states", "the average state and trends") give 20
//!   values, so a path becomes 6 × 20 = 120 values. The six LSTM1 are shared by all paths, so
//!   any number of paths fits. LSTM2 (24 units) then runs across the paths in path-id order and
//!   its final hidden state is the representation `h_θ(E^1, …, E^n)`.
//! - Core network: `[M_t, h_θ]` (3 + 24) → 128 → 32 → 2 with ReLU between layers and none on
//!   the output: Q(s, normal) and Q(s, redundant).
//!
//! Paper ambiguities and braid's choices: §IV-C says "Each LSTM1 has 10 LSTM units, and LSTM1
//! has 60 LSTM units" and "the output of LSTM2 is the last 24 hidden states"; braid reads this as
//! LSTM1 = 10 units and LSTM2 = 24 units (its output width). Whether LSTM1 weights are shared
//! across features is not said; braid uses one LSTM1 per feature, shared across paths (the
//! `L × n LSTM1` of §V-C's complexity count, with `L` distinct weight sets).

use crate::nn::{Activation, Linear, Lstm, LstmScratch, LstmState, Mlp, MlpScratch, NnError};

use super::packed::{Kernel, Packed, Prefix, PrefixUse};
use super::state::{CONNECTION_FEATURES, EdarState, FEATURES, HISTORY};

/// Units of each LSTM1.
pub const FEATURE_HIDDEN: usize = 10;
/// Values LSTM1 gives per feature (its last two hidden states).
pub const FEATURE_OUTPUT: usize = 2 * FEATURE_HIDDEN;
/// Values per path entering LSTM2.
pub const PATH_INPUT: usize = FEATURES * FEATURE_OUTPUT;
/// Units of LSTM2 (the representation's width).
pub const ACROSS_HIDDEN: usize = 24;
/// Core network widths: input, 128, 32, Q-values.
pub const CORE_WIDTHS: [usize; 4] = [CONNECTION_FEATURES + ACROSS_HIDDEN, 128, 32, 2];

/// A build of the fast forward pass that this CPU runs: `portable` (any CPU), `avx2` (AVX2 and
/// FMA) or `avx512` (AVX-512F and DQ). Only [`EdarKernel::available`] and [`EdarKernel::best`]
/// make one outside the `edar` module (inside it, only from a `Kernel` that came from those), so
/// a value always names a build this CPU can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdarKernel(pub(super) Kernel);

impl EdarKernel {
    /// Every build this CPU runs, slowest first (portable always).
    pub fn available() -> Vec<EdarKernel> {
        Kernel::available().into_iter().map(EdarKernel).collect()
    }

    /// The build the scheduler uses: the fastest this CPU runs.
    pub fn best() -> EdarKernel {
        EdarKernel(Kernel::best())
    }

    /// `portable`, `avx2` or `avx512`.
    pub fn name(self) -> &'static str {
        self.0.name()
    }
}

/// Why a set of parts is not an EdAR Q-network.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EdarNetworkError {
    /// A part has the wrong shape.
    #[error("EdAR network part `{part}`: {found}, expected {expected}")]
    Shape {
        /// The part (`feature 3`, `across`, `core`).
        part: String,
        /// What EdAR needs.
        expected: String,
        /// What was given.
        found: String,
    },
    /// The weights themselves are invalid.
    #[error(transparent)]
    Weights(#[from] NnError),
}

/// The Q-network: six LSTM1, LSTM2 across paths, and the 128/32 core.
///
/// Besides the parts (kept for export), it holds their weights re-laid out for the fast forward
/// pass of [`EdarNetwork::q_values`] (`packed`, module `super::packed`), built once here.
#[derive(Clone, Debug, PartialEq)]
pub struct EdarNetwork {
    features: Box<[Lstm]>,
    across: Lstm,
    core: Mlp,
    packed: Packed,
}

/// Scratch space for [`EdarNetwork::q_values`]; built once per scheduler.
#[derive(Clone, Debug)]
pub struct EdarScratch {
    feature_state: LstmState,
    feature_scratch: LstmScratch,
    path_input: [f32; PATH_INPUT],
    across_state: LstmState,
    across_scratch: LstmScratch,
    core_input: [f32; CORE_WIDTHS[0]],
    core: MlpScratch,
}

fn shape_error(part: &str, expected: String, found: String) -> EdarNetworkError {
    EdarNetworkError::Shape {
        part: part.to_owned(),
        expected,
        found,
    }
}

impl EdarNetwork {
    /// A network from its parts, checked against EdAR's shapes.
    pub fn new(features: Vec<Lstm>, across: Lstm, core: Mlp) -> Result<Self, EdarNetworkError> {
        if features.len() != FEATURES {
            return Err(shape_error(
                "features",
                format!("{FEATURES} LSTMs"),
                format!("{} LSTMs", features.len()),
            ));
        }
        for (i, lstm) in features.iter().enumerate() {
            if (lstm.input_size(), lstm.hidden_size()) != (1, FEATURE_HIDDEN) {
                return Err(shape_error(
                    &format!("feature {i}"),
                    format!("input 1, hidden {FEATURE_HIDDEN}"),
                    format!("input {}, hidden {}", lstm.input_size(), lstm.hidden_size()),
                ));
            }
        }
        if (across.input_size(), across.hidden_size()) != (PATH_INPUT, ACROSS_HIDDEN) {
            return Err(shape_error(
                "across",
                format!("input {PATH_INPUT}, hidden {ACROSS_HIDDEN}"),
                format!(
                    "input {}, hidden {}",
                    across.input_size(),
                    across.hidden_size()
                ),
            ));
        }
        let widths: Vec<usize> = core.widths().collect();
        if widths != CORE_WIDTHS {
            return Err(shape_error(
                "core",
                format!("widths {CORE_WIDTHS:?}"),
                format!("widths {widths:?}"),
            ));
        }
        let packed = Packed::new(&features, &across, &core);
        Ok(EdarNetwork {
            features: features.into_boxed_slice(),
            across,
            core,
            packed,
        })
    }

    /// A deterministically initialised network of the real size (PyTorch's default init,
    /// uniform in ±1/√fan_in, from a SplitMix64 stream of `seed`). Untrained: for tests, benches
    /// and as the learner's starting point when no shipped weights exist.
    pub fn initial(seed: u64) -> Self {
        let mut rng = SplitMix64(seed);
        let mut lstm = |input: usize, hidden: usize| {
            let bound = 1.0 / (hidden as f32).sqrt();
            let mut draw =
                |n: usize| -> Vec<f32> { (0..n).map(|_| rng.uniform(bound)).collect::<Vec<f32>>() };
            let (w_ih, w_hh) = (draw(4 * hidden * input), draw(4 * hidden * hidden));
            let (b_ih, b_hh) = (draw(4 * hidden), draw(4 * hidden));
            Lstm::new(input, hidden, &w_ih, &w_hh, &b_ih, &b_hh)
        };
        let features: Result<Vec<Lstm>, NnError> =
            (0..FEATURES).map(|_| lstm(1, FEATURE_HIDDEN)).collect();
        let across = lstm(PATH_INPUT, ACROSS_HIDDEN);
        let layers: Result<Vec<Linear>, NnError> = CORE_WIDTHS
            .windows(2)
            .enumerate()
            .map(|(i, pair)| {
                let bound = 1.0 / (pair[0] as f32).sqrt();
                let weight = (0..pair[0] * pair[1]).map(|_| rng.uniform(bound)).collect();
                let bias = (0..pair[1]).map(|_| rng.uniform(bound)).collect();
                Linear::new(&format!("layer {i}"), pair[0], pair[1], weight, bias)
            })
            .collect();
        let built = features.and_then(|f| {
            let core = Mlp::new(layers?, Activation::Relu)?;
            Ok((f, across?, core))
        });
        match built
            .map_err(EdarNetworkError::from)
            .and_then(|(f, a, c)| EdarNetwork::new(f, a, c))
        {
            Ok(network) => network,
            // The shapes above are EdAR's constants and the values finite, so construction cannot
            // fail; reaching this would be a bug in this function.
            Err(e) => unreachable!("EdAR initial network: {e}"),
        }
    }

    /// The six LSTM1, in feature order (RTT, RTO, throughput, cwnd, loss, in-flight).
    pub fn features(&self) -> &[Lstm] {
        &self.features
    }

    /// LSTM2, across paths.
    pub fn across(&self) -> &Lstm {
        &self.across
    }

    /// The core network.
    pub fn core(&self) -> &Mlp {
        &self.core
    }

    /// Scratch space for this network's shapes (every EdAR network has the same shapes, so one
    /// scratch serves every weight version).
    pub fn scratch(&self) -> EdarScratch {
        EdarScratch {
            feature_state: self.features[0].state(),
            feature_scratch: self.features[0].scratch(),
            path_input: [0.0; PATH_INPUT],
            across_state: self.across.state(),
            across_scratch: self.across.scratch(),
            core_input: [0.0; CORE_WIDTHS[0]],
            core: self.core.scratch(),
        }
    }

    /// Q(s, normal) and Q(s, redundant). Allocation-free; the fast pass over the re-laid-out
    /// weights (its results differ from [`EdarNetwork::q_values_reference`]'s by a few ulp: the
    /// order of some sums and the activations' last bits). `scratch` is not needed by this pass
    /// and kept for the signature's stability.
    pub fn q_values(
        &self,
        state: &EdarState,
        scratch: &mut EdarScratch,
    ) -> Result<[f32; 2], NnError> {
        let _ = scratch;
        Ok(self.packed.q_values(state))
    }

    /// The fast pass of [`EdarNetwork::q_values`] run by the build `kernel` instead of the one
    /// the scheduler picks (the fastest this CPU runs), to compare the builds.
    pub fn q_values_with_kernel(&self, kernel: EdarKernel, state: &EdarState) -> [f32; 2] {
        self.packed.q_values_with(kernel.0, state)
    }

    /// Starts `prefix` for the decision after the one on `state`, with these weights (`version`)
    /// and `kernel` (see [`super::packed::Prefix`]); no work runs here.
    pub(super) fn prefix_begin(
        &self,
        state: &EdarState,
        version: u64,
        kernel: Kernel,
        prefix: &mut Prefix,
    ) {
        self.packed.prefix_begin(state, version, kernel, prefix);
    }

    /// Runs `prefix`'s next unit of work with these weights (the caller checks that they are the
    /// version the prefix was begun with); true when one ran.
    pub(super) fn prefix_advance(&self, prefix: &mut Prefix) -> bool {
        self.packed.prefix_advance(prefix)
    }

    /// [`EdarNetwork::q_values`] with `kernel`, from `prefix` when it is valid for `state`
    /// (bit-identical to the full pass either way), and how the prefix was used (tests; the
    /// scheduler uses [`EdarNetwork::q_values_then_begin`]).
    #[cfg(test)]
    pub(super) fn q_values_prefixed(
        &self,
        state: &EdarState,
        version: u64,
        kernel: Kernel,
        prefix: &mut Prefix,
    ) -> ([f32; 2], PrefixUse) {
        self.packed
            .q_values_prefixed(state, version, kernel, prefix)
    }

    /// [`EdarNetwork::q_values_prefixed`], then [`EdarNetwork::prefix_begin`] on the same
    /// `state` (its inputs laid out once for both); `continues`: see
    /// [`super::packed::Prefix::set_lineage`].
    pub(super) fn q_values_then_begin(
        &self,
        state: &EdarState,
        version: u64,
        kernel: Kernel,
        prefix: &mut Prefix,
        continues: Option<u64>,
    ) -> ([f32; 2], PrefixUse) {
        self.packed
            .q_values_then_begin(state, version, kernel, prefix, continues)
    }

    /// The packed pass alone (test timing, x86-64 only).
    #[cfg(all(test, target_arch = "x86_64"))]
    pub(super) fn packed_q(&self, state: &EdarState) -> [f32; 2] {
        self.packed.q_values(state)
    }

    /// Q(s, normal) and Q(s, redundant) layer by layer with the [`crate::nn`] parts: each LSTM1
    /// step one after the other, then LSTM2, then the core (the straightforward evaluation,
    /// several times slower than [`EdarNetwork::q_values`]; for checking it). Allocation-free.
    pub fn q_values_reference(
        &self,
        state: &EdarState,
        scratch: &mut EdarScratch,
    ) -> Result<[f32; 2], NnError> {
        scratch.across_state.reset();
        for path in state.used_paths() {
            for (feature, lstm) in self.features.iter().enumerate() {
                scratch.feature_state.reset();
                let series = &path[feature * HISTORY..(feature + 1) * HISTORY];
                let out = &mut scratch.path_input[feature * FEATURE_OUTPUT..][..FEATURE_OUTPUT];
                for (step, value) in series.iter().enumerate() {
                    lstm.step(
                        std::slice::from_ref(value),
                        &mut scratch.feature_state,
                        &mut scratch.feature_scratch,
                    )?;
                    if step + 2 == HISTORY {
                        out[..FEATURE_HIDDEN].copy_from_slice(scratch.feature_state.hidden());
                    }
                }
                out[FEATURE_HIDDEN..].copy_from_slice(scratch.feature_state.hidden());
            }
            self.across.step(
                &scratch.path_input,
                &mut scratch.across_state,
                &mut scratch.across_scratch,
            )?;
        }
        scratch.core_input[..CONNECTION_FEATURES].copy_from_slice(&state.connection);
        scratch.core_input[CONNECTION_FEATURES..].copy_from_slice(scratch.across_state.hidden());
        let q = self.core.forward(&scratch.core_input, &mut scratch.core)?;
        Ok([q[0], q[1]])
    }
}

/// SplitMix64 (Steele et al.), a tiny seeded generator for initialisation and ε-greedy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [−bound, bound).
    pub fn uniform(&mut self, bound: f32) -> f32 {
        ((self.unit() * 2.0 - 1.0) as f32) * bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::edar::state::EDAR_MAX_PATHS;

    fn state(paths: u8, seed: u64) -> EdarState {
        let mut rng = SplitMix64(seed);
        let mut s = EdarState::EMPTY;
        s.path_count = paths;
        s.connection = [1.0, 0.5, 0.3];
        for p in s.paths.iter_mut() {
            for v in p.iter_mut() {
                *v = rng.unit() as f32;
            }
        }
        s
    }

    #[test]
    fn initial_network_is_deterministic_and_finite() {
        let a = EdarNetwork::initial(7);
        assert_eq!(a, EdarNetwork::initial(7));
        assert_ne!(a, EdarNetwork::initial(8));
        let mut scratch = a.scratch();
        for n in 0..=EDAR_MAX_PATHS as u8 {
            let q = a.q_values(&state(n, 1), &mut scratch).unwrap();
            assert!(q.iter().all(|v| v.is_finite()), "{q:?}");
        }
    }

    #[test]
    fn q_values_match_a_step_by_step_reference() {
        // Recompute by hand with the public parts: LSTM1 per feature, last two hidden states,
        // LSTM2 across paths, then the core.
        let net = EdarNetwork::initial(3);
        let s = state(2, 9);
        let mut across = net.across().state();
        let mut across_scratch = net.across().scratch();
        for path in s.used_paths() {
            let mut input = Vec::new();
            for (f, lstm) in net.features().iter().enumerate() {
                let mut st = lstm.state();
                let mut sc = lstm.scratch();
                let mut hs = Vec::new();
                for step in 0..HISTORY {
                    lstm.step(&[path[f * HISTORY + step]], &mut st, &mut sc)
                        .unwrap();
                    hs.push(st.hidden().to_vec());
                }
                input.extend_from_slice(&hs[HISTORY - 2]);
                input.extend_from_slice(&hs[HISTORY - 1]);
            }
            net.across()
                .step(&input, &mut across, &mut across_scratch)
                .unwrap();
        }
        let mut core_in = s.connection.to_vec();
        core_in.extend_from_slice(across.hidden());
        let mut cs = net.core().scratch();
        let expected = net.core().forward(&core_in, &mut cs).unwrap().to_vec();
        let got = net.q_values_reference(&s, &mut net.scratch()).unwrap();
        assert_eq!(got.to_vec(), expected);
        // The paths matter.
        let other = net
            .q_values_reference(&state(2, 10), &mut net.scratch())
            .unwrap();
        assert_ne!(got, other);
    }

    /// A state with values in ±`scale` (the normalised features reach 10).
    fn wide_state(paths: u8, seed: u64, scale: f64) -> EdarState {
        let mut rng = SplitMix64(seed);
        let mut s = EdarState::EMPTY;
        s.path_count = paths;
        for v in s.connection.iter_mut() {
            *v = ((rng.unit() * 2.0 - 1.0) * scale) as f32;
        }
        for p in s.paths.iter_mut() {
            for v in p.iter_mut() {
                *v = ((rng.unit() * 2.0 - 1.0) * scale) as f32;
            }
        }
        s
    }

    #[test]
    fn fast_pass_matches_the_reference_for_every_path_count() {
        // Every kernel this CPU runs (and the one it picks), on several networks and inputs.
        let mut worst = 0.0f32;
        for seed in 0..4 {
            let net = EdarNetwork::initial(seed);
            let mut scratch = net.scratch();
            for paths in 0..=EDAR_MAX_PATHS as u8 {
                for (trial, scale) in [0.5, 2.0, 10.0, 100.0].into_iter().enumerate() {
                    let s = wide_state(paths, seed * 100 + trial as u64, scale);
                    let want = net.q_values_reference(&s, &mut scratch).unwrap();
                    let fast = net.q_values(&s, &mut scratch).unwrap();
                    let mut kernels = net.packed.q_values_every_kernel(&s);
                    kernels.push(("picked", fast));
                    for (kernel, got) in kernels {
                        for (got, want) in got.iter().zip(want.iter()) {
                            let diff = (got - want).abs() / want.abs().max(1.0);
                            worst = worst.max(diff);
                            assert!(
                                diff <= 2e-6,
                                "{kernel}, {paths} paths, scale {scale}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
        println!("worst relative difference {worst:e}");
        // Not bit-identical by construction, but a few ulp at most.
        assert!(worst < 2e-6, "{worst}");
    }

    #[test]
    fn fast_pass_sees_every_input() {
        // Changing any single value of a used path, or of the connection, changes the Q-values
        // (no lane or weight left out of the re-laid-out pass).
        let net = EdarNetwork::initial(5);
        let mut scratch = net.scratch();
        let base = wide_state(EDAR_MAX_PATHS as u8, 3, 1.0);
        let q0 = net.q_values(&base, &mut scratch).unwrap();
        for path in 0..EDAR_MAX_PATHS {
            for i in 0..FEATURES * HISTORY {
                let mut s = base;
                s.paths[path][i] += 0.5;
                let q = net.q_values(&s, &mut scratch).unwrap();
                let want = net.q_values_reference(&s, &mut scratch).unwrap();
                assert_ne!(q, q0, "path {path} value {i}");
                for (g, w) in q.iter().zip(&want) {
                    assert!((g - w).abs() <= 2e-6 * w.abs().max(1.0), "{g} vs {w}");
                }
            }
        }
        for i in 0..CONNECTION_FEATURES {
            let mut s = base;
            s.connection[i] += 0.5;
            assert_ne!(
                net.q_values(&s, &mut scratch).unwrap(),
                q0,
                "connection {i}"
            );
        }
        // Entries past `path_count` are ignored.
        let mut s = wide_state(2, 4, 1.0);
        let q = net.q_values(&s, &mut scratch).unwrap();
        s.paths[3][0] = 7.0;
        assert_eq!(net.q_values(&s, &mut scratch).unwrap(), q);
    }

    #[test]
    fn wrong_shapes_are_named() {
        let net = EdarNetwork::initial(1);
        let err = EdarNetwork::new(
            net.features()[..5].to_vec(),
            net.across().clone(),
            net.core().clone(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("features"), "{err}");
        let err = EdarNetwork::new(
            net.features().to_vec(),
            net.features()[0].clone(),
            net.core().clone(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("across"), "{err}");
    }
}
