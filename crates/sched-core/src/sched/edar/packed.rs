//! EdAR's Q-network re-laid out at load time for a fast forward pass (same weights, same
//! function; the order of some sums, the activations' last bits and the pre-scaled gate weights
//! differ from the layer-by-layer pass by a few ulp).
//!
//! The layer-by-layer evaluation ([`super::EdarNetwork::q_values_reference`]) runs 6 × 6 = 36
//! tiny LSTM1 steps per path one after the other, each a 40 × 11 matrix-vector product followed
//! by 50 activations, then LSTM2 and the core. Here:
//!
//! - **LSTM1, one SIMD lane per (path, feature) sequence.** The 6 × K sequences are independent
//!   (each starts from a zero state), so they run side by side: lane `8 p + f` of a 16-lane
//!   vector carries path `p` (two paths per vector) and feature `f` (lanes 6, 7, 14, 15 are
//!   padding). Every weight is stored replicated into that pattern (lane `l` holds feature
//!   `l mod 8`'s weight; loading 8 lanes into both halves with `vbroadcastf32x8` halves the bytes
//!   but was 10 % slower), so one step is 40 × (1 + 10) lane-wise fused multiply-adds and the
//!   cell updates for all twelve sequences at once: 6 steps instead of 36 × K, with no shuffles.
//!   The first step skips the recurrent product (the state is zero) and the forget gate; the
//!   input projection is rank 1 (one FMA per gate). With one vector (K ≤ 2) the gate sums run
//!   five units at a time and then the ten cells stage by stage; with two (K = 3, 4), unit by
//!   unit (twenty cells at once spill registers and were 45 % slower).
//! - **LSTM2's input projection batched over paths.** `W_ih x_p` does not depend on the
//!   recurrence, so it runs for all paths in one sweep over `W_ih` (each weight vector loaded
//!   once, used K times); only the 96 × 24 recurrent product is sequential across paths. The 96
//!   gate rows are permuted into six 16-lane vectors (`i₀…₁₅`, `f₀…₁₅`, `g₀…₁₅`, `o₀…₁₅`,
//!   `[i₁₆…₂₃ f₁₆…₂₃]`, `[g₁₆…₂₃ o₁₆…₂₃]`) so that every gate lines up with its cell lane.
//! - **Core** 27 → 128 → 32 → 2 over transposed weights, the 128-long sums split in four
//!   interleaved partial sums so the fused multiply-adds do not wait on each other.
//!
//! **Activations** (`vector` module): every gate row (weights and bias) is multiplied at load
//! time by `−log₂ e` (by `−2 log₂ e` for the cell-input gate `g`), so that a gate's sum `t` is
//! already an exponent: `σ(x) = 1 / (1 + 2^t)`, `tanh(x) = (1 − 2^t) / (1 + 2^t)`. With
//! `Eq = 2^{t_q}` for the gates `q = i, f, g, o`, the cell update needs one reciprocal instead of
//! three, and the hidden state one instead of two:
//!
//! ```text
//! c' = σ(f) c + σ(i) tanh(g) = (c (1+Ei)(1+Eg) + (1−Eg)(1+Ef)) / ((1+Ei)(1+Eg)(1+Ef))
//! h' = σ(o) tanh(c')        = (1−Ec) / ((1+Eo)(1+Ec)),   Ec = 2^{−2 log₂e · c'}
//! ```
//!
//! Exponents are capped at 40 (the products stay below 2¹²¹; the activations are then within
//! 2⁻⁴⁰ of 0 or ±1). Five `2^t` (about 8 instructions each on AVX-512), two reciprocals (3 each)
//! and some 14 other operations per cell, against five separately evaluated sigmoids and tanh of
//! about 19 dependent instructions each before.
//!
//! All weight arrays are 64-byte aligned ([`Aligned`]): a 16-lane load that straddles two cache
//! lines costs the kernel about a fifth of its time on Zen 5.
//!
//! The same generic kernel ([`run`]) is compiled three times: with AVX-512F/DQ intrinsics, with
//! AVX2+FMA auto-vectorised 16-float arrays, and portable; the best the CPU supports is picked
//! at run time. Nothing allocates: the intermediate values live on the stack.

// The kernel walks several arrays in lockstep by index (weights, accumulators, lanes); index
// loops state the layout more plainly than chains of zips.
#![allow(clippy::needless_range_loop)]

mod vector;

use super::network::{ACROSS_HIDDEN, FEATURE_HIDDEN, PATH_INPUT};
use super::state::{CONNECTION_FEATURES, EDAR_MAX_PATHS, EdarState, FEATURES, HISTORY};
use crate::nn::{Linear, Lstm, Mlp};
use vector::{LANES, Lane, Portable, Vector};

/// Lanes per path in an LSTM1 vector (6 features and 2 lanes of padding).
const HALF: usize = LANES / 2;
/// Paths per LSTM1 vector.
const PATHS_PER_GROUP: usize = 2;
/// LSTM2 gate vectors (96 rows).
const ACROSS_VECTORS: usize = 4 * ACROSS_HIDDEN / LANES;
/// Core widths.
const CORE_IN: usize = CONNECTION_FEATURES + ACROSS_HIDDEN;
const CORE_H1: usize = 128;
const CORE_H2: usize = 32;
/// Partial sums of the 128-long core layer.
const SPLIT: usize = 4;

/// `σ(x) = 1 / (1 + 2^{x · SIGMOID_SCALE})`.
const SIGMOID_SCALE: f32 = -std::f32::consts::LOG2_E;
/// `tanh(x) = (1 − 2^{x · TANH_SCALE}) / (1 + 2^{x · TANH_SCALE})`.
const TANH_SCALE: f32 = -2.0 * std::f32::consts::LOG2_E;
/// The factor of each gate's rows, in PyTorch's gate order (i, f, g, o).
const GATE_SCALE: [f32; 4] = [SIGMOID_SCALE, SIGMOID_SCALE, TANH_SCALE, SIGMOID_SCALE];

const _: () = assert!(FEATURES <= HALF && PATHS_PER_GROUP * HALF == LANES);
// `run` handles up to two LSTM1 vectors.
const _: () = assert!(EDAR_MAX_PATHS <= 2 * PATHS_PER_GROUP);
const _: () = assert!(ACROSS_HIDDEN == 24 && FEATURE_HIDDEN == 10 && PATH_INPUT == 120);

/// The input part of one LSTM1 gate row (gate `q`, unit `u`), scaled by `GATE_SCALE[q]`: lane
/// `8 p + f` holds feature `f`'s weight (for either path `p`), lanes 6, 7, 14, 15 are zero.
#[derive(Clone, Copy, PartialEq)]
struct FeatureRow {
    bias: Lane,
    w_ih: Lane,
}

/// 64-byte alignment: every 16-lane row of an `Aligned` array sits in one cache line. (Loads
/// that straddle two lines cost the kernel about a fifth of its time on Zen 5: the same code
/// took 1.40 µs, or 1.65–1.75 µs at K = 2 depending only on where the allocator had put the
/// weights, when they were not aligned.)
#[derive(Clone, Copy, PartialEq)]
#[repr(C, align(64))]
struct Aligned<T>(T);

impl<T> std::ops::Deref for Aligned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

fn aligned<T>(value: T) -> Box<Aligned<T>> {
    Box::new(Aligned(value))
}

/// LSTM1's `W_hh` rows of a block of units: `[hidden input j][unit in the block][gate]`.
type FeatureBlock = [[[Lane; 4]; BLOCK]; FEATURE_HIDDEN];

/// The network's weights in the layouts the kernel reads.
#[derive(Clone, PartialEq)]
pub(super) struct Packed {
    /// `[unit][gate i, f, g, o]`.
    feature: Box<Aligned<[[FeatureRow; 4]; FEATURE_HIDDEN]>>,
    /// LSTM1's `W_hh` in the order the kernel reads it: `[block of 5 units][hidden input j]
    /// [unit in the block][gate]`, lane pattern and scale as in [`FeatureRow`].
    feature_hh: Box<Aligned<[FeatureBlock; FEATURE_HIDDEN / BLOCK]>>,
    across_bias: Aligned<[Lane; ACROSS_VECTORS]>,
    /// `[input][vector]`: `W_ih` transposed, gate rows permuted (module docs) and scaled.
    across_ih: Box<Aligned<[[Lane; ACROSS_VECTORS]; PATH_INPUT]>>,
    /// `[hidden][vector]`: `W_hh` transposed, permuted and scaled the same way.
    across_hh: Box<Aligned<[[Lane; ACROSS_VECTORS]; ACROSS_HIDDEN]>>,
    core1_bias: Aligned<[Lane; CORE_H1 / LANES]>,
    core1: Box<Aligned<[[Lane; CORE_H1 / LANES]; CORE_IN]>>,
    core2_bias: Aligned<[Lane; CORE_H2 / LANES]>,
    core2: Box<Aligned<[[Lane; CORE_H2 / LANES]; CORE_H1]>>,
    /// Output rows (not transposed): `[output][half of the 32 inputs]`.
    core3: Aligned<[[Lane; CORE_H2 / LANES]; 2]>,
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
        // Lane `8 p + f`: feature `f`'s value of gate `gate`, scaled; the padding lanes stay zero.
        let pattern = |gate: usize, value: &dyn Fn(&Lstm) -> f32| -> Lane {
            std::array::from_fn(|l| {
                features
                    .get(l % HALF)
                    .map_or(0.0, |lstm| value(lstm) * GATE_SCALE[gate])
            })
        };
        let feature = aligned(std::array::from_fn(|unit| {
            std::array::from_fn(|gate| {
                let row = gate * FEATURE_HIDDEN + unit;
                FeatureRow {
                    bias: pattern(gate, &|l| l.bias_ih()[row] + l.bias_hh()[row]),
                    w_ih: pattern(gate, &|l| l.weight_ih()[row]),
                }
            })
        }));
        let feature_hh = aligned(std::array::from_fn(|block| {
            std::array::from_fn(|j| {
                std::array::from_fn(|k| {
                    std::array::from_fn(|gate| {
                        let row = gate * FEATURE_HIDDEN + block * BLOCK + k;
                        pattern(gate, &|l| l.weight_hh()[row * FEATURE_HIDDEN + j])
                    })
                })
            })
        }));
        let (ih, hh) = (across.weight_ih(), across.weight_hh());
        let across_scale = |row: usize| GATE_SCALE[row / ACROSS_HIDDEN];
        let across_bias = Aligned(std::array::from_fn(|v| {
            lanes(|l| {
                let r = across_row(v, l);
                (across.bias_ih()[r] + across.bias_hh()[r]) * across_scale(r)
            })
        }));
        let across_ih = aligned(std::array::from_fn(|i| {
            std::array::from_fn(|v| {
                lanes(|l| {
                    let r = across_row(v, l);
                    ih[r * PATH_INPUT + i] * across_scale(r)
                })
            })
        }));
        let across_hh = aligned(std::array::from_fn(|j| {
            std::array::from_fn(|v| {
                lanes(|l| {
                    let r = across_row(v, l);
                    hh[r * ACROSS_HIDDEN + j] * across_scale(r)
                })
            })
        }));
        let layers = core.layers();
        let (l1, l2, l3) = (&layers[0], &layers[1], &layers[2]);
        let transposed =
            |layer: &Linear, i: usize, o: usize| layer.weight()[o * layer.inputs() + i];
        Packed {
            feature,
            feature_hh,
            across_bias,
            across_ih,
            across_hh,
            core1_bias: Aligned(std::array::from_fn(|v| lanes(|l| l1.bias()[v * LANES + l]))),
            core1: aligned(std::array::from_fn(|i| {
                std::array::from_fn(|v| lanes(|l| transposed(l1, i, v * LANES + l)))
            })),
            core2_bias: Aligned(std::array::from_fn(|v| lanes(|l| l2.bias()[v * LANES + l]))),
            core2: aligned(std::array::from_fn(|i| {
                std::array::from_fn(|v| lanes(|l| transposed(l2, i, v * LANES + l)))
            })),
            core3: Aligned(std::array::from_fn(|o| {
                std::array::from_fn(|v| lanes(|l| l3.weight()[o * CORE_H2 + v * LANES + l]))
            })),
            core3_bias: [l3.bias()[0], l3.bias()[1]],
        }
    }

    /// Q(s, normal) and Q(s, redundant) with the fastest kernel this CPU runs.
    pub(super) fn q_values(&self, state: &EdarState) -> [f32; 2] {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512dq")
            {
                // SAFETY: the CPU has AVX-512F and DQ (checked just above; the checks are
                // cached loads).
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
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn run_avx512(packed: &Packed, state: &EdarState) -> [f32; 2] {
    run::<vector::avx512::V>(packed, state)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2_fma(packed: &Packed, state: &EdarState) -> [f32; 2] {
    run::<Portable<true>>(packed, state)
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

/// `N` LSTM cells from their gate sums `t[q][k]` (gate `q` = i, f, g, o, pre-scaled so that
/// `Eq = 2^{t_q}`, module docs) and cell states `c` (updated in place); returns the hidden
/// states. `FIRST`: `c = 0` (the forget gate drops out). Each stage runs over all `N` cells
/// before the next, so that the CPU has `N` independent chains to work on.
#[inline(always)]
fn cells<V: Vector, const N: usize, const FIRST: bool>(t: [[V; N]; 4], c: &mut [V; N]) -> [V; N] {
    let one = V::splat(1.0);
    let ei = V::pow2_n(t[0]);
    let eg = V::pow2_n(t[2]);
    let eo = V::pow2_n(t[3]);
    let mut ab = ei;
    let mut not_g = eg;
    for k in 0..N {
        ab[k] = one.add(ei[k]).mul(one.add(eg[k]));
        not_g[k] = one.sub(eg[k]);
    }
    if FIRST {
        let r = V::recip_n(ab);
        for k in 0..N {
            c[k] = not_g[k].mul(r[k]);
        }
    } else {
        let ef = V::pow2_n(t[1]);
        let mut num = ef;
        let mut den = ef;
        for k in 0..N {
            let d = one.add(ef[k]);
            num[k] = c[k].mul_add(ab[k], not_g[k].mul(d));
            den[k] = ab[k].mul(d);
        }
        let r = V::recip_n(den);
        for k in 0..N {
            c[k] = num[k].mul(r[k]);
        }
    }
    let mut scaled = *c;
    for k in 0..N {
        scaled[k] = c[k].mul(V::splat(TANH_SCALE));
    }
    let ec = V::pow2_n(scaled);
    let mut den = ec;
    for k in 0..N {
        den[k] = one.add(eo[k]).mul(one.add(ec[k]));
    }
    let r = V::recip_n(den);
    let mut h = r;
    for k in 0..N {
        h[k] = one.sub(ec[k]).mul(r[k]);
    }
    h
}

/// Cells per block of the recurrent product (4 accumulators each, kept in registers).
const BLOCK: usize = 5;
const _: () = assert!(FEATURE_HIDDEN.is_multiple_of(BLOCK));

/// One LSTM1 step of one vector of sequences (ten cells, one per unit): input `x`, states `h`,
/// `c` updated in place. The gate sums five units at a time (20 accumulators in registers),
/// then the ten cells stage by stage (`cells`).
#[inline(always)]
fn feature_step<V: Vector, const FIRST: bool>(
    packed: &Packed,
    x: V,
    h: &mut [V; FEATURE_HIDDEN],
    c: &mut [V; FEATURE_HIDDEN],
) {
    let mut acc = [[V::splat(0.0); FEATURE_HIDDEN]; 4];
    for (u, rows) in packed.feature.iter().enumerate() {
        for q in 0..4 {
            acc[q][u] = V::load(&rows[q].w_ih).mul_add(x, V::load(&rows[q].bias));
        }
    }
    if !FIRST {
        for (block, weights) in packed.feature_hh.iter().enumerate() {
            for j in 0..FEATURE_HIDDEN {
                for (i, rows) in weights[j].iter().enumerate() {
                    for q in 0..4 {
                        let u = block * BLOCK + i;
                        acc[q][u] = V::load(&rows[q]).mul_add(h[j], acc[q][u]);
                    }
                }
            }
        }
    }
    *h = cells::<V, FEATURE_HIDDEN, FIRST>(acc, c);
}

/// One LSTM1 step of `G` vectors of sequences unit by unit (`h[unit][vector]`,
/// `c[unit][vector]`): each unit's gate sums for all `G` vectors, then its `G` cells. With two
/// vectors, twenty cells stage by stage would need far more registers than there are; the
/// units are independent within a step, so the CPU overlaps one unit's cells with the next
/// units' multiply-adds instead.
#[inline(always)]
fn feature_step_by_unit<V: Vector, const G: usize, const FIRST: bool>(
    packed: &Packed,
    x: [V; G],
    h: &mut [[V; G]; FEATURE_HIDDEN],
    c: &mut [[V; G]; FEATURE_HIDDEN],
) {
    let mut h_new = *h;
    for (u, rows) in packed.feature.iter().enumerate() {
        let mut acc = [[V::splat(0.0); G]; 4];
        for q in 0..4 {
            let (w, b) = (V::load(&rows[q].w_ih), V::load(&rows[q].bias));
            for g in 0..G {
                acc[q][g] = w.mul_add(x[g], b);
            }
        }
        if !FIRST {
            let weights = &packed.feature_hh[u / BLOCK];
            for j in 0..FEATURE_HIDDEN {
                for q in 0..4 {
                    let w = V::load(&weights[j][u % BLOCK][q]);
                    for g in 0..G {
                        acc[q][g] = w.mul_add(h[j][g], acc[q][g]);
                    }
                }
            }
        }
        h_new[u] = cells::<V, G, FIRST>(acc, &mut c[u]);
    }
    *h = h_new;
}

/// Hidden states of LSTM1 after its last two steps, `[vector][0 or 1][unit]`.
type FeatureOutputs<const G: usize> = Aligned<[[[Lane; FEATURE_HIDDEN]; 2]; G]>;

/// LSTM1 over `G` vectors of sequences (inputs `xs[vector][step]`).
#[inline(always)]
fn features<V: Vector, const G: usize>(
    packed: &Packed,
    xs: &Aligned<[[Lane; HISTORY]; G]>,
) -> FeatureOutputs<G> {
    let mut hs = Aligned([[[[0.0f32; LANES]; FEATURE_HIDDEN]; 2]; G]);
    if G == 1 {
        let mut h = [V::splat(0.0); FEATURE_HIDDEN];
        let mut c = [V::splat(0.0); FEATURE_HIDDEN];
        feature_step::<V, true>(packed, V::load(&xs[0][0]), &mut h, &mut c);
        for t in 1..HISTORY {
            feature_step::<V, false>(packed, V::load(&xs[0][t]), &mut h, &mut c);
            if t + 2 >= HISTORY {
                for u in 0..FEATURE_HIDDEN {
                    h[u].store(&mut hs[0][t + 2 - HISTORY][u]);
                }
            }
        }
    } else {
        let input = |t: usize| -> [V; G] { std::array::from_fn(|g| V::load(&xs[g][t])) };
        let mut h = [[V::splat(0.0); G]; FEATURE_HIDDEN];
        let mut c = [[V::splat(0.0); G]; FEATURE_HIDDEN];
        feature_step_by_unit::<V, G, true>(packed, input(0), &mut h, &mut c);
        for t in 1..HISTORY {
            feature_step_by_unit::<V, G, false>(packed, input(t), &mut h, &mut c);
            if t + 2 >= HISTORY {
                for u in 0..FEATURE_HIDDEN {
                    for g in 0..G {
                        h[u][g].store(&mut hs[g][t + 2 - HISTORY][u]);
                    }
                }
            }
        }
    }
    hs
}

/// LSTM1 over `P` paths (`G` vectors of two paths), then LSTM2 across them; writes LSTM2's
/// final hidden state into `h_out[..24]`.
#[inline(always)]
fn across<V: Vector, const G: usize, const P: usize>(
    packed: &Packed,
    paths: &[[f32; FEATURES * HISTORY]],
    h_out: &mut [f32; 2 * LANES],
) {
    // Inputs in the lane pattern: xs[g][t][8 p + f] = path (2g + p), feature f, step t.
    let mut xs = Aligned([[[0.0f32; LANES]; HISTORY]; G]);
    for (index, path) in paths.iter().take(P).enumerate() {
        let group = &mut xs[index / PATHS_PER_GROUP];
        let base = (index % PATHS_PER_GROUP) * HALF;
        for (f, series) in path.chunks_exact(HISTORY).enumerate() {
            for (t, &value) in series.iter().enumerate() {
                group[t][base + f] = value;
            }
        }
    }
    let hs_all = features::<V, G>(packed, &xs);
    // LSTM2 input projection for every path in one sweep: pre[p] = b + W_ih x_p, with
    // x_p[20 f + 10 s + u] = hs[p / 2][s][u][8 (p mod 2) + f].
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
                        hs_all[p / PATHS_PER_GROUP][s][u][(p % PATHS_PER_GROUP) * HALF + f],
                    );
                    for v in 0..ACROSS_VECTORS {
                        pre[p][v] = wv[v].mul_add(xv, pre[p][v]);
                    }
                }
            }
        }
    }
    // The recurrence across paths: h, c of 24 units as a 16-lane vector and the low half of
    // another (whose high lanes carry unused values).
    let mut c = [V::splat(0.0); 2];
    let mut h = Aligned([[0.0f32; LANES]; 2]);
    for (p, gates) in pre.iter_mut().enumerate() {
        if p > 0 {
            for (j, w) in packed.across_hh.iter().enumerate() {
                let hj = V::splat(h.as_flattened()[j]);
                for v in 0..ACROSS_VECTORS {
                    gates[v] = V::load(&w[v]).mul_add(hj, gates[v]);
                }
            }
        }
        // Head (units 0–15) and tail (16–23 in the low lanes: [i | f] and [g | o] swapped
        // into line) as two cells; the tail's high lanes carry unused, finite values.
        let t = [
            [gates[0], gates[4]],
            [gates[1], gates[4].swap_halves()],
            [gates[2], gates[5]],
            [gates[3], gates[5].swap_halves()],
        ];
        let [h0, h1] = if p == 0 {
            cells::<V, 2, true>(t, &mut c)
        } else {
            cells::<V, 2, false>(t, &mut c)
        };
        h0.store(&mut h[0]);
        h1.store(&mut h[1]);
    }
    h_out.copy_from_slice(h.as_flattened());
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
    let mut h1 = Aligned([[0.0f32; LANES]; CORE_H1 / LANES]);
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
