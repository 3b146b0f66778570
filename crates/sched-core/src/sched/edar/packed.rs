//! EdAR's Q-network re-laid out at load time for a fast forward pass (same weights, same
//! maths; only the order of some sums differs, by a few ulp).
//!
//! The layer-by-layer evaluation ([`super::EdarNetwork::q_values_reference`]) runs 6 × 6 = 36
//! tiny LSTM1 steps per path one after the other, each a 40 × 11 matrix-vector product followed
//! by 50 activations, then LSTM2 and the core. Here:
//!
//! - **LSTM1, one SIMD lane per (path, feature) sequence.** The 6 × K sequences are independent
//!   (each starts from a zero state), so they run side by side: lane `6 p + f` of a 16-lane
//!   vector carries path `p` (two paths per vector) and feature `f`. Every weight is stored
//!   replicated into the lane pattern (lane `l` holds feature `l mod 6`'s weight), so one step
//!   is 40 × (1 + 10) lane-wise fused multiply-adds and 50 lane-wise activations for all twelve
//!   sequences at once: 6 steps instead of 36 × K, with no shuffles. The first step skips the
//!   recurrent product (the state is zero) and the input projection is rank 1 (one FMA per gate).
//! - **LSTM2's input projection batched over paths.** `W_ih x_p` does not depend on the
//!   recurrence, so it runs for all paths in one sweep over `W_ih` (each weight vector loaded
//!   once, used K times); only the 96 × 24 recurrent product is sequential across paths. The 96
//!   gate rows are permuted into six 16-lane vectors (`i₀…₁₅`, `f₀…₁₅`, `g₀…₁₅`, `o₀…₁₅`,
//!   `[i₁₆…₂₃ f₁₆…₂₃]`, `[g₁₆…₂₃ o₁₆…₂₃]`) so that every gate lines up with its cell lane.
//! - **Core** 27 → 128 → 32 → 2 over transposed weights, the 128-long sums split in four
//!   interleaved partial sums so the fused multiply-adds do not wait on each other.
//!
//! Activations: `σ(x) = 1 / (1 + e^{−x})` and `tanh(x) = 2σ(2x) − 1`, with `e^x` by Cody–Waite
//! reduction and the same degree-7 polynomial as [`crate::nn::activation::exp`]; the AVX-512
//! build scales by `2^n` with `vscalefps` and divides with `vrcp14ps` plus one Newton step
//! (≈ 1 ulp). Inputs are clamped to ±80 (σ is then 0 or 1 to f32 precision).
//!
//! The same generic kernel ([`run`]) is compiled three times: with AVX-512F intrinsics, with
//! AVX2+FMA auto-vectorised 16-float arrays, and portable; the best the CPU supports is picked
//! at run time. Nothing allocates: the intermediate values live on the stack.

// The kernel walks several arrays in lockstep by index (weights, accumulators, lanes); index
// loops state the layout more plainly than chains of zips.
#![allow(clippy::needless_range_loop)]
use super::network::{ACROSS_HIDDEN, FEATURE_HIDDEN, PATH_INPUT};
use super::state::{CONNECTION_FEATURES, EDAR_MAX_PATHS, EdarState, FEATURES, HISTORY};
use crate::nn::{Linear, Lstm, Mlp};

/// Lanes per vector.
const LANES: usize = 16;
/// One vector's worth of values.
type Lane = [f32; LANES];
/// Paths per LSTM1 vector (6 features each; lanes 12–15 are padding).
const PATHS_PER_GROUP: usize = 2;
/// LSTM2 gate vectors (96 rows).
const ACROSS_VECTORS: usize = 4 * ACROSS_HIDDEN / LANES;
/// Core widths.
const CORE_IN: usize = CONNECTION_FEATURES + ACROSS_HIDDEN;
const CORE_H1: usize = 128;
const CORE_H2: usize = 32;
/// Partial sums of the 128-long core layer.
const SPLIT: usize = 4;

const _: () = assert!(PATHS_PER_GROUP * FEATURES <= LANES);
// `run` handles up to two LSTM1 vectors.
const _: () = assert!(EDAR_MAX_PATHS <= 2 * PATHS_PER_GROUP);
const _: () = assert!(ACROSS_HIDDEN == 24 && FEATURE_HIDDEN == 10 && PATH_INPUT == 120);

/// One LSTM1 gate row (gate `q`, unit `u`) in the lane pattern.
#[derive(Clone, Copy, PartialEq)]
struct FeatureRow {
    bias: Lane,
    w_ih: Lane,
    w_hh: [Lane; FEATURE_HIDDEN],
}

/// The network's weights in the layouts the kernel reads.
#[derive(Clone, PartialEq)]
pub(super) struct Packed {
    /// `[unit][gate i, f, g, o]`.
    feature: Box<[[FeatureRow; 4]; FEATURE_HIDDEN]>,
    across_bias: [Lane; ACROSS_VECTORS],
    /// `[input][vector]`: `W_ih` transposed, gate rows permuted (module docs).
    across_ih: Box<[[Lane; ACROSS_VECTORS]; PATH_INPUT]>,
    /// `[hidden][vector]`: `W_hh` transposed, permuted the same way.
    across_hh: Box<[[Lane; ACROSS_VECTORS]; ACROSS_HIDDEN]>,
    core1_bias: [Lane; CORE_H1 / LANES],
    core1: Box<[[Lane; CORE_H1 / LANES]; CORE_IN]>,
    core2_bias: [Lane; CORE_H2 / LANES],
    core2: Box<[[Lane; CORE_H2 / LANES]; CORE_H1]>,
    /// Output rows (not transposed): `[output][half of the 32 inputs]`.
    core3: [[Lane; CORE_H2 / LANES]; 2],
    core3_bias: [f32; 2],
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed").finish_non_exhaustive()
    }
}

/// PyTorch gate row of LSTM2 held by lane `lane` of gate vector `vector`.
fn across_row(vector: usize, lane: usize) -> usize {
    if vector < 4 {
        vector * ACROSS_HIDDEN + lane
    } else {
        let gate = (vector - 4) * 2 + lane / 8;
        gate * ACROSS_HIDDEN + 16 + lane % 8
    }
}

fn lanes(value: impl Fn(usize) -> f32) -> Lane {
    std::array::from_fn(value)
}

impl Packed {
    /// Re-lays out the parts' weights; their shapes were checked by
    /// [`super::EdarNetwork::new`].
    pub(super) fn new(features: &[Lstm], across: &Lstm, core: &Mlp) -> Self {
        let feature = Box::new(std::array::from_fn(|unit| {
            std::array::from_fn(|gate| {
                let row = gate * FEATURE_HIDDEN + unit;
                let lstm = |lane: usize| &features[lane % FEATURES];
                FeatureRow {
                    bias: lanes(|l| lstm(l).bias_ih()[row] + lstm(l).bias_hh()[row]),
                    w_ih: lanes(|l| lstm(l).weight_ih()[row]),
                    w_hh: std::array::from_fn(|j| {
                        lanes(|l| lstm(l).weight_hh()[row * FEATURE_HIDDEN + j])
                    }),
                }
            })
        }));
        let (ih, hh) = (across.weight_ih(), across.weight_hh());
        let across_bias = std::array::from_fn(|v| {
            lanes(|l| {
                let r = across_row(v, l);
                across.bias_ih()[r] + across.bias_hh()[r]
            })
        });
        let across_ih = Box::new(std::array::from_fn(|i| {
            std::array::from_fn(|v| lanes(|l| ih[across_row(v, l) * PATH_INPUT + i]))
        }));
        let across_hh = Box::new(std::array::from_fn(|j| {
            std::array::from_fn(|v| lanes(|l| hh[across_row(v, l) * ACROSS_HIDDEN + j]))
        }));
        let layers = core.layers();
        let (l1, l2, l3) = (&layers[0], &layers[1], &layers[2]);
        let transposed =
            |layer: &Linear, i: usize, o: usize| layer.weight()[o * layer.inputs() + i];
        Packed {
            feature,
            across_bias,
            across_ih,
            across_hh,
            core1_bias: std::array::from_fn(|v| lanes(|l| l1.bias()[v * LANES + l])),
            core1: Box::new(std::array::from_fn(|i| {
                std::array::from_fn(|v| lanes(|l| transposed(l1, i, v * LANES + l)))
            })),
            core2_bias: std::array::from_fn(|v| lanes(|l| l2.bias()[v * LANES + l])),
            core2: Box::new(std::array::from_fn(|i| {
                std::array::from_fn(|v| lanes(|l| transposed(l2, i, v * LANES + l)))
            })),
            core3: std::array::from_fn(|o| {
                std::array::from_fn(|v| lanes(|l| l3.weight()[o * CORE_H2 + v * LANES + l]))
            }),
            core3_bias: [l3.bias()[0], l3.bias()[1]],
        }
    }

    /// Q(s, normal) and Q(s, redundant) with the fastest kernel this CPU runs.
    pub(super) fn q_values(&self, state: &EdarState) -> [f32; 2] {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F (checked just above; the check is a cached load).
                return unsafe { run_avx512(self, state) };
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the CPU has AVX2 and FMA (checked just above).
                return unsafe { run_avx2_fma(self, state) };
            }
        }
        run::<Portable<false>>(self, state)
    }

    /// The portable kernel (any CPU), for tests of the kernel itself.
    #[cfg(test)]
    pub(super) fn q_values_portable(&self, state: &EdarState) -> [f32; 2] {
        run::<Portable<false>>(self, state)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn run_avx512(packed: &Packed, state: &EdarState) -> [f32; 2] {
    run::<avx512::V>(packed, state)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2_fma(packed: &Packed, state: &EdarState) -> [f32; 2] {
    run::<Portable<true>>(packed, state)
}

/// The lane-wise operations the kernel needs, on 16 `f32`.
trait Vector: Copy {
    fn splat(value: f32) -> Self;
    fn load(values: &Lane) -> Self;
    fn store(self, out: &mut Lane);
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    /// `self · b + c`.
    fn mul_add(self, b: Self, c: Self) -> Self;
    /// `max(self, 0)`.
    fn relu(self) -> Self;
    /// The logistic function.
    fn sigmoid(self) -> Self;
    /// Lanes 8–15 then 0–7.
    fn swap_halves(self) -> Self;
    /// The sum of the lanes.
    fn sum(self) -> f32;

    /// [`Vector::sigmoid`] of `N` independent vectors. Implementations interleave the `N`
    /// evaluations step by step, so that the CPU works on `N` dependency chains at once instead
    /// of waiting on one (an activation is a chain of some 19 dependent operations).
    /// (Plain loops, no closures, here and in the kernel: a closure is not always inlined, and
    /// out of line it loses the kernel's target features.)
    #[inline(always)]
    fn sigmoid_n<const N: usize>(mut x: [Self; N]) -> [Self; N] {
        for v in x.iter_mut() {
            *v = v.sigmoid();
        }
        x
    }

    /// `tanh(x) = 2σ(2x) − 1` of `N` independent vectors.
    #[inline(always)]
    fn tanh_n<const N: usize>(mut x: [Self; N]) -> [Self; N] {
        for v in x.iter_mut() {
            *v = v.add(*v);
        }
        let mut y = Self::sigmoid_n(x);
        for v in y.iter_mut() {
            *v = Self::splat(2.0).mul_add(*v, Self::splat(-1.0));
        }
        y
    }
}

/// Bounds of the activations' argument (σ(±80) is 0 or 1 to f32 precision).
const CLAMP: f32 = 80.0;

/// 16 lanes as a plain array; with `FUSED` (only where the CPU has FMA), `mul_add` is fused.
#[derive(Clone, Copy)]
struct Portable<const FUSED: bool>(Lane);

impl<const FUSED: bool> Vector for Portable<FUSED> {
    #[inline(always)]
    fn splat(value: f32) -> Self {
        Portable([value; LANES])
    }
    #[inline(always)]
    fn load(values: &Lane) -> Self {
        Portable(*values)
    }
    #[inline(always)]
    fn store(self, out: &mut Lane) {
        *out = self.0;
    }
    #[inline(always)]
    fn add(mut self, other: Self) -> Self {
        for i in 0..LANES {
            self.0[i] += other.0[i];
        }
        self
    }
    #[inline(always)]
    fn mul(mut self, other: Self) -> Self {
        for i in 0..LANES {
            self.0[i] *= other.0[i];
        }
        self
    }
    #[inline(always)]
    fn mul_add(mut self, b: Self, c: Self) -> Self {
        for i in 0..LANES {
            self.0[i] = if FUSED {
                self.0[i].mul_add(b.0[i], c.0[i])
            } else {
                self.0[i] * b.0[i] + c.0[i]
            };
        }
        self
    }
    #[inline(always)]
    fn relu(mut self) -> Self {
        for v in self.0.iter_mut() {
            *v = v.max(0.0);
        }
        self
    }
    #[inline(always)]
    fn sigmoid(mut self) -> Self {
        for v in self.0.iter_mut() {
            *v = crate::nn::activation::sigmoid(v.clamp(-CLAMP, CLAMP));
        }
        self
    }
    #[inline(always)]
    fn swap_halves(self) -> Self {
        let mut out = self;
        out.0[..8].copy_from_slice(&self.0[8..]);
        out.0[8..].copy_from_slice(&self.0[..8]);
        out
    }
    #[inline(always)]
    fn sum(self) -> f32 {
        // Pairwise, as the AVX-512 reduction does.
        let mut v = self.0;
        let mut width = LANES / 2;
        while width > 0 {
            for i in 0..width {
                v[i] += v[i + width];
            }
            width /= 2;
        }
        v[0]
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    //! [`super::Vector`] over `__m512`. Only ever used inside `run_avx512`, i.e. after the
    //! CPU was found to have AVX-512F; the methods are `inline(always)` so that they compile
    //! into that function with its target features.

    use super::{CLAMP, LANES, Lane, Vector};
    use std::arch::x86_64::*;

    #[derive(Clone, Copy)]
    pub(super) struct V(__m512);

    // SAFETY (every `unsafe` block below): `V` values exist only inside `run_avx512`, which runs
    // only on CPUs with AVX-512F; loads and stores go through `&Lane` / `&mut Lane`, 16 valid
    // `f32` (unaligned access is allowed).
    impl Vector for V {
        #[inline(always)]
        fn splat(value: f32) -> Self {
            V(unsafe { _mm512_set1_ps(value) })
        }
        #[inline(always)]
        fn load(values: &Lane) -> Self {
            V(unsafe { _mm512_loadu_ps(values.as_ptr()) })
        }
        #[inline(always)]
        fn store(self, out: &mut Lane) {
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), self.0) }
        }
        #[inline(always)]
        fn add(self, other: Self) -> Self {
            V(unsafe { _mm512_add_ps(self.0, other.0) })
        }
        #[inline(always)]
        fn mul(self, other: Self) -> Self {
            V(unsafe { _mm512_mul_ps(self.0, other.0) })
        }
        #[inline(always)]
        fn mul_add(self, b: Self, c: Self) -> Self {
            V(unsafe { _mm512_fmadd_ps(self.0, b.0, c.0) })
        }
        #[inline(always)]
        fn relu(self) -> Self {
            V(unsafe { _mm512_max_ps(self.0, _mm512_setzero_ps()) })
        }
        #[inline(always)]
        fn sigmoid(self) -> Self {
            let [y] = Self::sigmoid_n([self]);
            y
        }
        #[inline(always)]
        fn sigmoid_n<const N: usize>(x: [Self; N]) -> [Self; N] {
            // σ(x) = 1 / (1 + e^{−x}). With −x = n ln 2 + r (Cody–Waite), r' = −r = x + n ln 2
            // and e^{−x} = 2^n e^{−r'}. Each step runs over all N inputs before the next.
            unsafe {
                let zero = _mm512_setzero_ps();
                let (mut n, mut r, mut p) = ([zero; N], [zero; N], [zero; N]);
                for k in 0..N {
                    let v = _mm512_max_ps(x[k].0, _mm512_set1_ps(-CLAMP));
                    r[k] = _mm512_min_ps(v, _mm512_set1_ps(CLAMP));
                }
                for k in 0..N {
                    let t = _mm512_mul_ps(r[k], _mm512_set1_ps(-std::f32::consts::LOG2_E));
                    n[k] = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                        t,
                    );
                }
                for k in 0..N {
                    r[k] = _mm512_fmadd_ps(n[k], _mm512_set1_ps(0.693_359_4), r[k]);
                }
                for k in 0..N {
                    r[k] = _mm512_fmadd_ps(n[k], _mm512_set1_ps(-2.121_944_4e-4), r[k]);
                }
                // e^{−r'} = 1 − r' + r'² p(−r') with the coefficients of
                // `crate::nn::activation::exp`, as one Horner chain.
                for k in 0..N {
                    p[k] = _mm512_set1_ps(-1.987_569_1e-4);
                }
                for coefficient in [
                    1.398_199_9e-3,
                    -8.333_452e-3,
                    4.166_579_6e-2,
                    -1.666_666_5e-1,
                    5e-1,
                    -1.0,
                    1.0,
                ] {
                    for k in 0..N {
                        p[k] = _mm512_fmadd_ps(p[k], r[k], _mm512_set1_ps(coefficient));
                    }
                }
                // d = 1 + e^{−x}; 1/d from a 14-bit estimate and one Newton step.
                for k in 0..N {
                    p[k] = _mm512_add_ps(_mm512_set1_ps(1.0), _mm512_scalef_ps(p[k], n[k]));
                }
                for k in 0..N {
                    r[k] = _mm512_rcp14_ps(p[k]);
                }
                let mut y = x;
                for k in 0..N {
                    let e = _mm512_fnmadd_ps(p[k], r[k], _mm512_set1_ps(2.0));
                    y[k] = V(_mm512_mul_ps(r[k], e));
                }
                y
            }
        }
        #[inline(always)]
        fn swap_halves(self) -> Self {
            V(unsafe { _mm512_shuffle_f32x4::<0b01_00_11_10>(self.0, self.0) })
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            let mut v: Lane = [0.0; LANES];
            self.store(&mut v);
            let mut width = LANES / 2;
            while width > 0 {
                for i in 0..width {
                    v[i] += v[i + width];
                }
                width /= 2;
            }
            v[0]
        }
    }
}

/// The forward pass (module docs), for any [`Vector`] implementation.
#[inline(always)]
fn run<V: Vector>(packed: &Packed, state: &EdarState) -> [f32; 2] {
    let paths = state.used_paths();
    let mut across_h: [f32; 2 * LANES] = [0.0; 2 * LANES];
    match paths.len() {
        0 => {}
        1 => across::<V, 1, 1>(packed, paths, &mut across_h),
        2 => across::<V, 1, 2>(packed, paths, &mut across_h),
        3 => across::<V, 2, 3>(packed, paths, &mut across_h),
        _ => across::<V, 2, 4>(packed, paths, &mut across_h),
    }
    let mut input = [0.0f32; CORE_IN];
    input[..CONNECTION_FEATURES].copy_from_slice(&state.connection);
    input[CONNECTION_FEATURES..].copy_from_slice(&across_h[..ACROSS_HIDDEN]);
    core::<V>(packed, &input)
}

/// LSTM1 over `P` paths (`G` vectors of two paths), then LSTM2 across them; writes LSTM2's
/// final hidden state into `h[..24]`.
#[inline(always)]
fn across<V: Vector, const G: usize, const P: usize>(
    packed: &Packed,
    paths: &[[f32; FEATURES * HISTORY]],
    h_out: &mut [f32; 2 * LANES],
) {
    // Inputs in the lane pattern: xs[g][t][6 p + f] = path (2g + p), feature f, step t.
    let mut xs = [[[0.0f32; LANES]; HISTORY]; G];
    for (index, path) in paths.iter().take(P).enumerate() {
        let group = &mut xs[index / PATHS_PER_GROUP];
        let base = (index % PATHS_PER_GROUP) * FEATURES;
        for (f, series) in path.chunks_exact(HISTORY).enumerate() {
            for (t, &value) in series.iter().enumerate() {
                group[t][base + f] = value;
            }
        }
    }
    // LSTM1: hidden states after the last two steps, hs[g][0 or 1][unit].
    let mut hs_all = [[[[0.0f32; LANES]; FEATURE_HIDDEN]; 2]; G];
    {
        // h before and after the step, alternating (no copy between steps).
        let mut h_both = [[[V::splat(0.0); FEATURE_HIDDEN]; G]; 2];
        let mut c = [[V::splat(0.0); FEATURE_HIDDEN]; G];
        for t in 0..HISTORY {
            let mut x = [V::splat(0.0); G];
            for g in 0..G {
                x[g] = V::load(&xs[g][t]);
            }
            let (first, second) = h_both.split_at_mut(1);
            let (h, h_new) = if t % 2 == 0 {
                (&first[0], &mut second[0])
            } else {
                (&second[0], &mut first[0])
            };
            // σ(o) per unit until tanh(c') is known.
            let mut out_gate = [[V::splat(0.0); FEATURE_HIDDEN]; G];
            for (u, rows) in packed.feature.iter().enumerate() {
                for g in 0..G {
                    let mut acc = [x[g]; 4];
                    for q in 0..4 {
                        acc[q] = V::load(&rows[q].w_ih).mul_add(x[g], V::load(&rows[q].bias));
                    }
                    if t > 0 {
                        for j in 0..FEATURE_HIDDEN {
                            for q in 0..4 {
                                acc[q] = V::load(&rows[q].w_hh[j]).mul_add(h[g][j], acc[q]);
                            }
                        }
                    }
                    // σ(i), σ(f), tanh(g) = 2σ(2g) − 1, σ(o), interleaved.
                    let [i, f, gg, o] = V::sigmoid_n([acc[0], acc[1], acc[2].add(acc[2]), acc[3]]);
                    let gg = V::splat(2.0).mul_add(gg, V::splat(-1.0));
                    // c' = f ⊙ c + i ⊙ g (c = 0 at the first step).
                    c[g][u] = f.mul_add(c[g][u], i.mul(gg));
                    out_gate[g][u] = o;
                }
            }
            // h' = o ⊙ tanh(c'), five units at a time.
            for g in 0..G {
                for half in 0..2 {
                    let mut cells = [V::splat(0.0); 5];
                    cells.copy_from_slice(&c[g][half * 5..half * 5 + 5]);
                    let th = V::tanh_n(cells);
                    for k in 0..5 {
                        h_new[g][half * 5 + k] = out_gate[g][half * 5 + k].mul(th[k]);
                    }
                }
            }
            if t + 2 >= HISTORY {
                for g in 0..G {
                    for u in 0..FEATURE_HIDDEN {
                        h_new[g][u].store(&mut hs_all[g][t + 2 - HISTORY][u]);
                    }
                }
            }
        }
    }
    // LSTM2 input projection for every path in one sweep: pre[p] = b + W_ih x_p, with
    // x_p[20 f + 10 s + u] = hs[p / 2][s][u][6 (p mod 2) + f].
    let mut bias = [V::splat(0.0); ACROSS_VECTORS];
    for v in 0..ACROSS_VECTORS {
        bias[v] = V::load(&packed.across_bias[v]);
    }
    let mut pre = [bias; P];
    for f in 0..FEATURES {
        for s in 0..2 {
            for u in 0..FEATURE_HIDDEN {
                let w = &packed.across_ih[f * 2 * FEATURE_HIDDEN + s * FEATURE_HIDDEN + u];
                let mut wv = [V::splat(0.0); ACROSS_VECTORS];
                for v in 0..ACROSS_VECTORS {
                    wv[v] = V::load(&w[v]);
                }
                for p in 0..P {
                    let xv = V::splat(
                        hs_all[p / PATHS_PER_GROUP][s][u][(p % PATHS_PER_GROUP) * FEATURES + f],
                    );
                    for v in 0..ACROSS_VECTORS {
                        pre[p][v] = wv[v].mul_add(xv, pre[p][v]);
                    }
                }
            }
        }
    }
    // The recurrence across paths: h, c of 24 units as a 16-lane vector and the low half of
    // another.
    let mut c = [V::splat(0.0); 2];
    let mut h = [0.0f32; 2 * LANES];
    let mixed_scale = V::load(&lanes_const(2.0, 1.0));
    let mixed_a = V::load(&lanes_const(2.0, 1.0));
    let mixed_b = V::load(&lanes_const(-1.0, 0.0));
    for (p, gates) in pre.iter_mut().enumerate() {
        if p > 0 {
            for (j, w) in packed.across_hh.iter().enumerate() {
                let hj = V::splat(h[j]);
                for v in 0..ACROSS_VECTORS {
                    gates[v] = V::load(&w[v]).mul_add(hj, gates[v]);
                }
            }
        }
        // σ of all six gate vectors at once; g (and the g half of the last vector) as
        // tanh(x) = 2σ(2x) − 1.
        let [i, f, g, o, if_tail, go_tail] = V::sigmoid_n([
            gates[0],
            gates[1],
            gates[2].add(gates[2]),
            gates[3],
            gates[4],
            gates[5].mul(mixed_scale),
        ]);
        let g = V::splat(2.0).mul_add(g, V::splat(-1.0));
        let go_tail = mixed_a.mul_add(go_tail, mixed_b);
        c[0] = f.mul_add(c[0], i.mul(g));
        // [i | f] and [g | o] of units 16–23: the low lanes of c[1] are the cells.
        c[1] = if_tail.swap_halves().mul_add(c[1], if_tail.mul(go_tail));
        let [th_head, th_tail] = V::tanh_n([c[0], c[1]]);
        let head = o.mul(th_head);
        let tail = go_tail.swap_halves().mul(th_tail);
        let (h_head, h_tail) = h.split_at_mut(LANES);
        if let (Ok(h_head), Ok(h_tail)) =
            (<&mut Lane>::try_from(h_head), <&mut Lane>::try_from(h_tail))
        {
            head.store(h_head);
            tail.store(h_tail);
        }
    }
    *h_out = h;
}

/// Eight lanes of `low` then eight of `high`.
#[inline(always)]
fn lanes_const(low: f32, high: f32) -> Lane {
    std::array::from_fn(|l| if l < 8 { low } else { high })
}

/// The core 27 → 128 → 32 → 2 (ReLU between layers).
#[inline(always)]
fn core<V: Vector>(packed: &Packed, input: &[f32; CORE_IN]) -> [f32; 2] {
    let mut acc1 = [V::splat(0.0); CORE_H1 / LANES];
    for v in 0..CORE_H1 / LANES {
        acc1[v] = V::load(&packed.core1_bias[v]);
    }
    for (x, w) in input.iter().zip(packed.core1.iter()) {
        let xv = V::splat(*x);
        for v in 0..CORE_H1 / LANES {
            acc1[v] = V::load(&w[v]).mul_add(xv, acc1[v]);
        }
    }
    let mut h1 = [[0.0f32; LANES]; CORE_H1 / LANES];
    for v in 0..CORE_H1 / LANES {
        acc1[v].relu().store(&mut h1[v]);
    }
    let h1 = h1.as_flattened();
    // Four interleaved partial sums per output vector: input i goes to sum i mod 4.
    let mut acc2 = [[V::splat(0.0); CORE_H2 / LANES]; SPLIT];
    for v in 0..CORE_H2 / LANES {
        acc2[0][v] = V::load(&packed.core2_bias[v]);
    }
    for (chunk, rows) in h1.chunks_exact(SPLIT).zip(packed.core2.chunks_exact(SPLIT)) {
        for k in 0..SPLIT {
            let xv = V::splat(chunk[k]);
            for v in 0..CORE_H2 / LANES {
                acc2[k][v] = V::load(&rows[k][v]).mul_add(xv, acc2[k][v]);
            }
        }
    }
    let mut h2 = [V::splat(0.0); CORE_H2 / LANES];
    for v in 0..CORE_H2 / LANES {
        h2[v] = acc2[0][v]
            .add(acc2[1][v])
            .add(acc2[2][v].add(acc2[3][v]))
            .relu();
    }
    let mut q = [0.0; 2];
    for (o, w) in packed.core3.iter().enumerate() {
        q[o] = V::load(&w[0])
            .mul(h2[0])
            .add(V::load(&w[1]).mul(h2[1]))
            .sum()
            + packed.core3_bias[o];
    }
    q
}
