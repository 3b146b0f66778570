//! EdAR's Q-network re-laid out at load time for a fast forward pass (same weights, same
//! function; the order of some sums, the activations' last bits and the pre-scaled gate weights
//! differ from the layer-by-layer pass by a few ulp).
//!
//! The layer-by-layer evaluation ([`super::EdarNetwork::q_values_reference`]) runs 6 × 6 = 36
//! tiny LSTM1 steps per path one after the other, each a 40 × 11 matrix-vector product followed
//! by 50 activations, then LSTM2 and the core. Here:
//!
//! - **LSTM1, one SIMD lane per (sequence, unit).** The 6 × K sequences (path `p`, feature `f`)
//!   are independent (each starts from a zero state), so they run side by side in groups of
//!   three sequences: a group is two 16-lane vectors, lane `5 s + u` of vector `half` carrying
//!   sequence `s` of the three and unit `5 half + u` (lane 15 is padding, so 15 of 16 lanes do
//!   work; K = 2 needs 4 groups, 8 vectors). Group `g` holds path `g / 2`, features
//!   `3 (g mod 2)` to `3 (g mod 2) + 2`, so the weights exist in two lane patterns (group
//!   parity), stored pre-expanded per lane. A step of a group is 8 × (1 + 10) fully used fused
//!   multiply-adds: the recurrent product broadcasts `h_j` of each sequence over its five lanes
//!   with one `vpermps` per `j` (`table_index`), the input over the lanes with one `vpermt2ps`
//!   (`input_index`). The first step skips the recurrent product (the state is zero) and the
//!   forget gate. Steps 1–4 add the input term to the bias first, then the recurrent terms;
//!   step 5 adds the recurrent terms first and the input term last, so that `b + W_hh h`,
//!   which reads only step 4's states, can be computed ahead ([`Prefix`]) with the same sums. Groups run in pairs of the same parity (groups `g` and `g + 2`: the same
//!   features of two paths, so each weight vector is loaded once for both), the pair's four cell
//!   vectors interleaved; pairs run one after the other within a step, so the CPU overlaps one
//!   pair's cells with the next pair's multiply-adds (K = 1 and the last path of K = 3 run
//!   their groups alone). (Before: one lane per sequence, lane `8 p + f`,
//!   ten unit vectors per step with 12 of 16 lanes used at K = 2 and 6 of 16 at K = 1.)
//! - **LSTM2's input projection batched over paths.** `W_ih x_p` does not depend on the
//!   recurrence, so it runs for all paths in one sweep over `W_ih` (each weight vector loaded
//!   once, used K times); only the 96 × 24 recurrent product is sequential across paths. The
//!   sweep is split by the LSTM1 step it reads (`x_p` is each feature's hidden state after steps
//!   4 and 5): the first half runs inside LSTM1's last step, after its first pair. The 96
//!   gate rows are permuted into six 16-lane vectors (`i₀…₁₅`, `f₀…₁₅`, `g₀…₁₅`, `o₀…₁₅`,
//!   `[i₁₆…₂₃ f₁₆…₂₃]`, `[g₁₆…₂₃ o₁₆…₂₃]`) so that every gate lines up with its cell lane.
//!   The recurrent product and the core's 24-long product run as two interleaved partial sums
//!   (half the dependent chain).
//! - **Core** 27 → 128 → 32 → 2 over transposed weights; the connection features' columns are
//!   summed before LSTM1 starts (they do not depend on the paths), the 128-long sums split in
//!   eight interleaved partial sums so the fused multiply-adds do not wait on each other.
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
//! The cell state is kept multiplied by `−2 log₂ e` (its `tanh` exponent; the numerator's
//! `1 − Eg` term carries the factor), and `(1 + a)(1 + b)` is formed as `a (1 + b) + (1 + b)`.
//! Exponents are clamped to [−40, 40] (the products stay below 2¹²¹; the activations are then
//! within 2⁻⁴⁰ of 0 or ±1). Five `2^t` (about 10 instructions each on AVX-512, four of them on the FMA
//! pipes: `vector` module), two reciprocals (3 each)
//! and some 14 other operations per cell, against five separately evaluated sigmoids and tanh of
//! about 19 dependent instructions each before.
//!
//! All weight arrays are 64-byte aligned ([`Aligned`]): a 16-lane load that straddles two cache
//! lines costs the kernel about a fifth of its time on Zen 5.
//!
//! The same generic kernel ([`run`]) is compiled three times: with AVX-512F/DQ intrinsics, with
//! AVX2+FMA intrinsics over two 8-lane halves (the portable operations bit for bit), and
//! portable; the best the CPU supports is picked at run time. Loop orders that keep many
//! accumulators live check [`Vector::REGISTERS`] (the AVX2 build holds a quarter as many
//! 16-lane values as the AVX-512 one). Nothing allocates: the intermediate values live on the
//! stack.

// The kernel walks several arrays in lockstep by index (weights, accumulators, lanes); index
// loops state the layout more plainly than chains of zips.
#![allow(clippy::needless_range_loop)]

mod vector;

use super::network::{ACROSS_HIDDEN, FEATURE_HIDDEN, PATH_INPUT};
use super::state::{CONNECTION_FEATURES, EDAR_MAX_PATHS, EdarState, FEATURES, HISTORY};
use crate::nn::{Linear, Lstm, Mlp};
use vector::{LANES, Lane, Portable, Vector};

/// LSTM1 sequences per group: a group is two vectors, lane `5 s + u` of vector `half` holding
/// sequence `s` (of the three) and unit `5 half + u` (lane 15 is padding).
const TRIPLE: usize = 3;
/// LSTM1 units per vector.
const UNITS_PER_VECTOR: usize = FEATURE_HIDDEN / 2;
/// LSTM1 groups per path (features 0–2 and 3–5).
const GROUPS_PER_PATH: usize = FEATURES / TRIPLE;
/// LSTM1 groups at most.
const MAX_GROUPS: usize = EDAR_MAX_PATHS * GROUPS_PER_PATH;
/// LSTM2 gate vectors (96 rows).
const ACROSS_VECTORS: usize = 4 * ACROSS_HIDDEN / LANES;
/// Core widths.
const CORE_IN: usize = CONNECTION_FEATURES + ACROSS_HIDDEN;
const CORE_H1: usize = 128;
const CORE_H2: usize = 32;
/// Partial sums of the 128-long core layer (chains of 16 multiply-adds).
const SPLIT: usize = 8;

/// `σ(x) = 1 / (1 + 2^{x · SIGMOID_SCALE})`.
const SIGMOID_SCALE: f32 = -std::f32::consts::LOG2_E;
/// `tanh(x) = (1 − 2^{x · TANH_SCALE}) / (1 + 2^{x · TANH_SCALE})`.
const TANH_SCALE: f32 = -2.0 * std::f32::consts::LOG2_E;
/// The factor of each gate's rows, in PyTorch's gate order (i, f, g, o).
const GATE_SCALE: [f32; 4] = [SIGMOID_SCALE, SIGMOID_SCALE, TANH_SCALE, SIGMOID_SCALE];

const _: () = assert!(TRIPLE * UNITS_PER_VECTOR < LANES && FEATURES.is_multiple_of(TRIPLE));
// The inputs of every sequence fit in two vectors (`Vector::permute2`).
const _: () = assert!(EDAR_MAX_PATHS * FEATURES <= 2 * LANES);
const _: () = assert!(ACROSS_HIDDEN == 24 && FEATURE_HIDDEN == 10 && PATH_INPUT == 120);

/// The input part of one LSTM1 gate row of a group vector, scaled by `GATE_SCALE[q]`: lane
/// `5 s + u` holds the weight of feature `3 parity + s`, unit `5 half + u` (lane 15 is zero).
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

/// LSTM1's `W_hh` of one group parity: `[half][hidden input j][gate]`.
type FeatureHh = [[[Lane; 4]; FEATURE_HIDDEN]; 2];

/// The network's weights in the layouts the kernel reads.
#[derive(Clone, PartialEq)]
pub(super) struct Packed {
    /// `[group parity][half][gate i, f, g, o]`.
    feature: Box<Aligned<[[[FeatureRow; 4]; 2]; GROUPS_PER_PATH]>>,
    /// LSTM1's `W_hh`: `[group parity][half][hidden input j][gate]`, lane pattern and scale
    /// as in [`FeatureRow`].
    feature_hh: Box<Aligned<[FeatureHh; GROUPS_PER_PATH]>>,
    /// Per group: the lanes of the step's inputs (`6 p + f` of two vectors) each lane reads.
    input_index: Aligned<[[u32; LANES]; MAX_GROUPS]>,
    /// Per `j mod 5`: the lanes of a hidden vector that broadcast `h_j` of each sequence over
    /// its five units.
    table_index: Aligned<[[u32; LANES]; UNITS_PER_VECTOR]>,
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
        // Lane `5 s + u` of vector `half` of a group of parity `parity`: feature
        // `3 parity + s`, unit `5 half + u`; lane 15 stays zero.
        let pattern = |parity: usize, half: usize, value: &dyn Fn(&Lstm, usize) -> f32| -> Lane {
            std::array::from_fn(|l| {
                if l >= TRIPLE * UNITS_PER_VECTOR {
                    return 0.0;
                }
                let feature = &features[parity * TRIPLE + l / UNITS_PER_VECTOR];
                value(feature, half * UNITS_PER_VECTOR + l % UNITS_PER_VECTOR)
            })
        };
        let feature = aligned(std::array::from_fn(|parity| {
            std::array::from_fn(|half| {
                std::array::from_fn(|gate| {
                    let row = |unit: usize| gate * FEATURE_HIDDEN + unit;
                    FeatureRow {
                        bias: pattern(parity, half, &|l, u| {
                            (l.bias_ih()[row(u)] + l.bias_hh()[row(u)]) * GATE_SCALE[gate]
                        }),
                        w_ih: pattern(parity, half, &|l, u| {
                            l.weight_ih()[row(u)] * GATE_SCALE[gate]
                        }),
                    }
                })
            })
        }));
        let feature_hh = aligned(std::array::from_fn(|parity| {
            std::array::from_fn(|half| {
                std::array::from_fn(|j| {
                    std::array::from_fn(|gate| {
                        pattern(parity, half, &|l, u| {
                            let row = gate * FEATURE_HIDDEN + u;
                            l.weight_hh()[row * FEATURE_HIDDEN + j] * GATE_SCALE[gate]
                        })
                    })
                })
            })
        }));
        // Lane `5 s + u` of group `g` reads sequence `3 g + s` (lane 15: that of lane 14).
        let input_index = Aligned(std::array::from_fn(|g| {
            std::array::from_fn(|l| {
                let s = (l / UNITS_PER_VECTOR).min(TRIPLE - 1);
                (TRIPLE * g + s) as u32
            })
        }));
        let table_index = Aligned(std::array::from_fn(|j| {
            std::array::from_fn(|l| {
                let s = (l / UNITS_PER_VECTOR).min(TRIPLE - 1);
                (UNITS_PER_VECTOR * s + j) as u32
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
            input_index,
            table_index,
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
        self.q_values_with(Kernel::best(), state)
    }

    /// The portable kernel (any CPU), for the x86-64 timing probes.
    #[cfg(all(test, target_arch = "x86_64"))]
    pub(super) fn q_values_portable(&self, state: &EdarState) -> [f32; 2] {
        self.q_values_with(Kernel::Portable, state)
    }

    /// Every kernel this CPU can run, by name (portable always; AVX2+FMA and AVX-512 where the
    /// CPU has them), so that tests check each build, not only the one `q_values` picks.
    #[cfg(test)]
    pub(super) fn q_values_every_kernel(&self, state: &EdarState) -> Vec<(&'static str, [f32; 2])> {
        Kernel::available()
            .into_iter()
            .map(|kernel| (kernel.name(), self.q_values_with(kernel, state)))
            .collect()
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
    run::<vector::avx2::V>(packed, state)
}

/// The forward pass (module docs), for any [`Vector`] implementation.
#[inline(always)]
fn run<V: Vector>(packed: &Packed, state: &EdarState) -> [f32; 2] {
    let paths = state.used_paths();
    // The connection features' part of the first core layer does not wait for the paths.
    let start = core_start::<V>(packed, &state.connection);
    let mut across_h: [f32; 2 * LANES] = [0.0; 2 * LANES];
    match paths.len() {
        0 => {}
        1 => across::<V, 2, 1>(packed, paths, &mut across_h),
        2 => across::<V, 4, 2>(packed, paths, &mut across_h),
        3 => across::<V, 6, 3>(packed, paths, &mut across_h),
        _ => across::<V, 8, 4>(packed, paths, &mut across_h),
    }
    let mut h = [0.0f32; ACROSS_HIDDEN];
    h.copy_from_slice(&across_h[..ACROSS_HIDDEN]);
    core::<V>(packed, start, &h)
}

/// Which build of the kernel runs a pass (the runtime dispatch picks the best the CPU has; a
/// [`Prefix`] is finished only by the build that made it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kernel {
    /// Any CPU.
    Portable,
    /// AVX2 + FMA.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    /// AVX-512F/DQ.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
}

impl Kernel {
    /// The build's name: `portable`, `avx2` or `avx512`.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "portable",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512 => "avx512",
        }
    }

    /// The fastest build this CPU runs (what [`Packed::q_values`] uses).
    pub(super) fn best() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512dq")
            {
                return Kernel::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Kernel::Avx2;
            }
        }
        Kernel::Portable
    }

    /// Every build this CPU runs (portable always).
    pub(super) fn available() -> Vec<Kernel> {
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut out = vec![Kernel::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                out.push(Kernel::Avx2);
            }
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512dq")
            {
                out.push(Kernel::Avx512);
            }
        }
        out
    }
}

/// Units of prefix work: LSTM1's steps 0 to 4 (one unit each), the projection's first half,
/// then step 5's recurrent sums `b + W_hh h` (from step 4's states).
pub(super) const PREFIX_UNITS: u8 = HISTORY as u8 + 1;

/// A valid prefix with fewer units done is not finished at the decision: the full pass costs
/// less than its remaining units plus the rest (at K = 4, 5,800 TSC ticks against about
/// 2,650 + 3,980 with no unit done, 2,650 + 3,560 with one; `cycles::prefix_cycles`).
pub(super) const FINISH_FROM: u8 = 2;

/// [`Prefix::lineage`] before the caller names it: matches no decision's `continues`.
const NO_LINEAGE: u64 = u64::MAX;

/// One input layout ([`inputs`]): `[step][vector]`.
type Inputs = [[Lane; 2]; HISTORY];

/// The part of the next decision's pass that reads only older intervals, computed ahead of
/// time (module docs of `super`): LSTM1's states after steps 0–4 of every sequence, step 5's
/// recurrent sums `b + W_hh h` and LSTM2's gate sums `b + W_ih x` over step 4's states, in the
/// kernel's lane layout, with the exact inputs they were computed from, the weights' version
/// and the kernel that made them. A decision uses it only when its own steps 0–4 equal those
/// inputs bit for bit, its path count, weights version and kernel are the same: then the rest
/// of the pass ([`Packed::q_values_prefixed`]) gives the full pass's Q-values bit for bit (the
/// same operations on the same values; only when they run changes).
#[derive(Clone)]
#[repr(C, align(64))]
pub(super) struct Prefix {
    /// LSTM1's hidden and cell states after the units done so far, `[group][half]`.
    h: [[Lane; 2]; MAX_GROUPS],
    c: [[Lane; 2]; MAX_GROUPS],
    /// Step 5's `b + W_hh h` over step 4's states, `[group][half][gate]` (valid once complete).
    recurrent: [[[Lane; 4]; 2]; MAX_GROUPS],
    /// LSTM2's gate sums over step 4's states, `[path][vector]` (valid once complete).
    pre: [[Lane; ACROSS_VECTORS]; EDAR_MAX_PATHS],
    /// Two input layouts: `xs[cur]` is that of the state the prefix was begun from (its steps
    /// 1–5 are the prefix's steps 0–4); the decision lays its own out in the other, which the
    /// next prefix then reads (no copy).
    xs: [Inputs; 2],
    version: u64,
    /// The caller's name for the histories the prefix was begun from ([`Prefix::set_lineage`];
    /// [`NO_LINEAGE`] until it is set).
    lineage: u64,
    /// Whether the last decision took its inputs from the lineage ([`Prefix::continued`]).
    continued: bool,
    cur: u8,
    path_count: u8,
    /// Units done (`PREFIX_UNITS` = complete); meaningful only while `begun`.
    done: u8,
    kernel: Kernel,
    begun: bool,
}

impl std::fmt::Debug for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefix")
            .field("begun", &self.begun)
            .field("done", &self.done)
            .field("path_count", &self.path_count)
            .field("version", &self.version)
            .field("kernel", &self.kernel)
            .finish_non_exhaustive()
    }
}

/// How a decision used its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PrefixUse {
    /// Valid and complete: only the rest of the pass ran.
    Ready,
    /// Valid but incomplete: its remaining units ran first, then the rest.
    Finished,
    /// None, not valid for this state, or fewer than [`FINISH_FROM`] units done: the full pass
    /// ran.
    Missed,
}

impl Prefix {
    /// An empty prefix (not begun).
    pub(super) fn new() -> Box<Prefix> {
        Box::new(Prefix {
            h: [[[0.0; LANES]; 2]; MAX_GROUPS],
            c: [[[0.0; LANES]; 2]; MAX_GROUPS],
            recurrent: [[[[0.0; LANES]; 4]; 2]; MAX_GROUPS],
            pre: [[[0.0; LANES]; ACROSS_VECTORS]; EDAR_MAX_PATHS],
            xs: [[[[0.0; LANES]; 2]; HISTORY]; 2],
            version: 0,
            lineage: NO_LINEAGE,
            continued: false,
            cur: 0,
            path_count: 0,
            done: 0,
            kernel: Kernel::Portable,
            begun: false,
        })
    }

    /// Forgets the prefix (the next decision runs the full pass).
    pub(super) fn clear(&mut self) {
        self.begun = false;
    }

    /// True when begun and not yet complete.
    pub(super) fn pending(&self) -> bool {
        self.begun && self.done < PREFIX_UNITS
    }

    /// The weights' version it was begun with.
    pub(super) fn version(&self) -> Option<u64> {
        self.begun.then_some(self.version)
    }

    /// The inputs the prefix reads: its step `t` is `read()[t + 1]`.
    fn read(&self) -> &Inputs {
        &self.xs[usize::from(self.cur)]
    }

    /// Where the decision lays out its inputs (the next prefix's `read`).
    fn spare(&mut self) -> &mut Inputs {
        &mut self.xs[usize::from(1 - self.cur)]
    }

    /// Begins the prefix from the inputs laid out in `spare` (module docs of `super`).
    fn begin_from_spare(&mut self, path_count: u8, version: u64, kernel: Kernel) {
        self.cur = 1 - self.cur;
        self.lineage = NO_LINEAGE;
        self.path_count = path_count;
        self.version = version;
        self.kernel = kernel;
        self.done = 0;
        // Without paths there is nothing to compute ahead (and the full pass is the core alone).
        self.begun = path_count > 0;
    }

    /// Names the histories the prefix was just begun from. A later decision that passes the same
    /// name as `continues` ([`Packed::q_values_then_begin`]) promises that its state's steps 0–4
    /// are this state's steps 1–5: the input compare is then skipped and only step 5 is laid out.
    pub(super) fn set_lineage(&mut self, lineage: u64) {
        self.lineage = lineage;
    }

    /// True when the last decision's inputs were copied from the prefix (its `continues` named
    /// the prefix's lineage) instead of laid out and compared.
    pub(super) fn continued(&self) -> bool {
        self.continued
    }

    /// Lays out the inputs of a decision whose steps 0–4 are the prefix's (its state's steps
    /// 1–5) into `spare`: those five steps copied, step 5 from `state`.
    fn shift_into_spare(&mut self, state: &EdarState) {
        let [first, second] = &mut self.xs;
        let (read, spare) = if self.cur == 0 {
            (&*first, second)
        } else {
            (&*second, first)
        };
        spare[..HISTORY - 1].copy_from_slice(&read[1..]);
        let newest = &mut spare[HISTORY - 1];
        *newest = [[0.0; LANES]; 2];
        for (p, path) in state.used_paths().iter().take(EDAR_MAX_PATHS).enumerate() {
            for f in 0..FEATURES {
                let s = FEATURES * p + f;
                newest[s / LANES][s % LANES] = path[f * HISTORY + HISTORY - 1];
            }
        }
    }

    /// True when it may serve a decision with `path_count` paths, weights `version` and
    /// `kernel` (the inputs aside).
    fn serves(&self, path_count: u8, version: u64, kernel: Kernel) -> bool {
        self.begun
            && self.path_count == path_count
            && self.version == version
            && self.kernel == kernel
    }

    /// True when it may serve a decision on the inputs `xs` (all six steps) with `path_count`
    /// paths, weights `version` and `kernel`: every input it read equal bit for bit.
    fn valid_for(&self, xs: &Inputs, path_count: u8, version: u64, kernel: Kernel) -> bool {
        self.serves(path_count, version, kernel)
            && self.read()[1..]
                .as_flattened()
                .as_flattened()
                .iter()
                .zip(xs[..HISTORY - 1].as_flattened().as_flattened())
                // No early exit: a plain fold over the 160 values vectorises.
                .fold(true, |same, (a, b)| same & (a.to_bits() == b.to_bits()))
    }
}

impl Packed {
    /// Starts the prefix of the decision after the one on `state`: its steps 0–4 are `state`'s
    /// steps 1–5 (each interval's sample never changes once pushed), for the same paths. No
    /// work runs here but the inputs' layout ([`Packed::prefix_advance`] does it, a unit at a
    /// time).
    pub(super) fn prefix_begin(
        &self,
        state: &EdarState,
        version: u64,
        kernel: Kernel,
        prefix: &mut Prefix,
    ) {
        let paths = state.used_paths();
        inputs_into(paths, prefix.spare());
        prefix.begin_from_spare(paths.len() as u8, version, kernel);
    }

    /// Runs the prefix's next unit of work, if any is left; true when one ran.
    pub(super) fn prefix_advance(&self, prefix: &mut Prefix) -> bool {
        if !prefix.pending() {
            return false;
        }
        match prefix.kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefix gets `Kernel::Avx512` only from `Kernel::best` or
            // `Kernel::available`, which checked that the CPU has AVX-512F and DQ.
            Kernel::Avx512 => unsafe { prefix_unit_avx512(self, prefix) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: likewise for AVX2 and FMA.
            Kernel::Avx2 => unsafe { prefix_unit_avx2_fma(self, prefix) },
            _ => prefix_unit::<Portable<false>>(self, prefix),
        }
        true
    }

    /// Q(s, normal) and Q(s, redundant) with `kernel`, from `prefix` when it is valid for
    /// `state` (its remaining units run first if it is incomplete), else the full pass; the
    /// Q-values are the same bit for bit either way.
    #[cfg(test)]
    pub(super) fn q_values_prefixed(
        &self,
        state: &EdarState,
        version: u64,
        kernel: Kernel,
        prefix: &mut Prefix,
    ) -> ([f32; 2], PrefixUse) {
        self.q_values_continuing(state, version, kernel, prefix, None)
    }

    /// [`Packed::q_values_prefixed`]; with `continues` equal to the prefix's lineage
    /// ([`Prefix::set_lineage`]) the caller vouches that `state`'s steps 0–4 are the prefix's
    /// inputs, so they are copied instead of laid out and compared (checked in debug builds).
    fn q_values_continuing(
        &self,
        state: &EdarState,
        version: u64,
        kernel: Kernel,
        prefix: &mut Prefix,
        continues: Option<u64>,
    ) -> ([f32; 2], PrefixUse) {
        let paths = state.used_paths();
        let path_count = paths.len() as u8;
        let shifted = prefix.begun
            && prefix.path_count == path_count
            && continues.is_some_and(|lineage| lineage == prefix.lineage);
        prefix.continued = shifted;
        // Laid out where the next prefix reads them (`q_values_then_begin`).
        let valid = if shifted {
            prefix.shift_into_spare(state);
            debug_assert!({
                let mut full = [[[0.0f32; LANES]; 2]; HISTORY];
                inputs_into(paths, &mut full);
                let spare = &prefix.xs[usize::from(1 - prefix.cur)];
                full.as_flattened()
                    .as_flattened()
                    .iter()
                    .map(|v| v.to_bits())
                    .eq(spare
                        .as_flattened()
                        .as_flattened()
                        .iter()
                        .map(|v| v.to_bits()))
            });
            prefix.serves(path_count, version, kernel)
        } else {
            inputs_into(paths, prefix.spare());
            let xs = &prefix.xs[usize::from(1 - prefix.cur)];
            prefix.valid_for(xs, path_count, version, kernel)
        };
        let xs = &prefix.xs[usize::from(1 - prefix.cur)];
        if prefix.done < FINISH_FROM || !valid {
            prefix.begun = false;
            return (self.q_values_with(kernel, state), PrefixUse::Missed);
        }
        let x5 = xs[HISTORY - 1];
        let used = if prefix.done == PREFIX_UNITS {
            PrefixUse::Ready
        } else {
            PrefixUse::Finished
        };
        let q = match kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the prefix's kernel (equal to `kernel`, checked by `serves`) came from
            // `Kernel::best` or `Kernel::available`, which checked the CPU's features.
            Kernel::Avx512 => unsafe { rest_avx512(self, state, &x5, prefix) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: likewise.
            Kernel::Avx2 => unsafe { rest_avx2_fma(self, state, &x5, prefix) },
            _ => rest::<Portable<false>>(self, state, &x5, prefix),
        };
        // A prefix serves one decision.
        prefix.begun = false;
        (q, used)
    }

    /// [`Packed::q_values_prefixed`], then [`Packed::prefix_begin`] on the same `state` from
    /// the inputs already laid out (the decision's inputs become the next prefix's without a
    /// copy).
    pub(super) fn q_values_then_begin(
        &self,
        state: &EdarState,
        version: u64,
        kernel: Kernel,
        prefix: &mut Prefix,
        continues: Option<u64>,
    ) -> ([f32; 2], PrefixUse) {
        let out = self.q_values_continuing(state, version, kernel, prefix, continues);
        prefix.begin_from_spare(state.used_paths().len() as u8, version, kernel);
        out
    }

    /// The full pass with `kernel` (one the CPU runs: from `Kernel::best` or
    /// `Kernel::available`).
    pub(super) fn q_values_with(&self, kernel: Kernel, state: &EdarState) -> [f32; 2] {
        match kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Kernel::Avx512` comes only from `Kernel::best` or `Kernel::available`,
            // which checked that the CPU has AVX-512F and DQ.
            Kernel::Avx512 => unsafe { run_avx512(self, state) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: likewise for AVX2 and FMA.
            Kernel::Avx2 => unsafe { run_avx2_fma(self, state) },
            _ => run::<Portable<false>>(self, state),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn prefix_unit_avx512(packed: &Packed, prefix: &mut Prefix) {
    prefix_unit::<vector::avx512::V>(packed, prefix)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn prefix_unit_avx2_fma(packed: &Packed, prefix: &mut Prefix) {
    prefix_unit::<vector::avx2::V>(packed, prefix)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn rest_avx512(
    packed: &Packed,
    state: &EdarState,
    x5: &[Lane; 2],
    prefix: &mut Prefix,
) -> [f32; 2] {
    rest::<vector::avx512::V>(packed, state, x5, prefix)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rest_avx2_fma(
    packed: &Packed,
    state: &EdarState,
    x5: &[Lane; 2],
    prefix: &mut Prefix,
) -> [f32; 2] {
    rest::<vector::avx2::V>(packed, state, x5, prefix)
}

/// The prefix's next unit for its path count.
#[inline(always)]
fn prefix_unit<V: Vector>(packed: &Packed, prefix: &mut Prefix) {
    match prefix.path_count {
        0 => {}
        1 => prefix_unit_paths::<V, 2, 1>(packed, prefix),
        2 => prefix_unit_paths::<V, 4, 2>(packed, prefix),
        3 => prefix_unit_paths::<V, 6, 3>(packed, prefix),
        _ => prefix_unit_paths::<V, 8, 4>(packed, prefix),
    }
    prefix.done += 1;
}

/// Unit `prefix.done` over `P` paths: LSTM1's step `done` (0–4) of every group, from and back
/// to the stored states; unit 5, `pre = b + W_ih x` over step 4's states, as [`project_start`]
/// runs it inside the full pass; unit 6, step 5's `b + W_hh h` ([`lstm1_recurrent`]).
#[inline(always)]
fn prefix_unit_paths<V: Vector, const G: usize, const P: usize>(
    packed: &Packed,
    prefix: &mut Prefix,
) {
    let t = usize::from(prefix.done);
    if t + 1 < HISTORY {
        let mut h = [[V::splat(0.0); 2]; G];
        let mut c = [[V::splat(0.0); 2]; G];
        let xs = &prefix.read()[t + 1];
        let x = (V::load(&xs[0]), V::load(&xs[1]));
        if t == 0 {
            lstm1_step::<V, G, P>(packed, x, &mut h, &mut c, Sums::First, None);
        } else {
            for g in 0..G {
                for half in 0..2 {
                    h[g][half] = V::load(&prefix.h[g][half]);
                    c[g][half] = V::load(&prefix.c[g][half]);
                }
            }
            lstm1_step::<V, G, P>(packed, x, &mut h, &mut c, Sums::InputFirst, None);
        }
        for g in 0..G {
            for half in 0..2 {
                h[g][half].store(&mut prefix.h[g][half]);
                c[g][half].store(&mut prefix.c[g][half]);
            }
        }
    } else if t + 1 == HISTORY {
        let mut step4 = Aligned([[[0.0f32; LANES]; 4]; P]);
        for g in 0..G {
            for half in 0..2 {
                step4[g / GROUPS_PER_PATH][2 * (g % 2) + half] = prefix.h[g][half];
            }
        }
        let mut pre = [[V::splat(0.0); ACROSS_VECTORS]; P];
        project_start::<V, P>(packed, Some((&step4, &mut pre)));
        for p in 0..P {
            for v in 0..ACROSS_VECTORS {
                pre[p][v].store(&mut prefix.pre[p][v]);
            }
        }
    } else {
        let mut h = [[V::splat(0.0); 2]; G];
        for g in 0..G {
            for half in 0..2 {
                h[g][half] = V::load(&prefix.h[g][half]);
            }
        }
        lstm1_recurrent::<V, G>(packed, &h, &mut prefix.recurrent);
    }
}

/// The decision's pass from a valid prefix: its remaining units, then LSTM1's step 5 (inputs
/// `x5`), the projection's second half, LSTM2's recurrence and the core.
#[inline(always)]
fn rest<V: Vector>(
    packed: &Packed,
    state: &EdarState,
    x5: &[Lane; 2],
    prefix: &mut Prefix,
) -> [f32; 2] {
    while prefix.done < PREFIX_UNITS {
        prefix_unit::<V>(packed, prefix);
    }
    let start = core_start::<V>(packed, &state.connection);
    let mut across_h: [f32; 2 * LANES] = [0.0; 2 * LANES];
    match prefix.path_count {
        0 => {}
        1 => rest_paths::<V, 2, 1>(packed, x5, prefix, &mut across_h),
        2 => rest_paths::<V, 4, 2>(packed, x5, prefix, &mut across_h),
        3 => rest_paths::<V, 6, 3>(packed, x5, prefix, &mut across_h),
        _ => rest_paths::<V, 8, 4>(packed, x5, prefix, &mut across_h),
    }
    let mut h = [0.0f32; ACROSS_HIDDEN];
    h.copy_from_slice(&across_h[..ACROSS_HIDDEN]);
    core::<V>(packed, start, &h)
}

/// LSTM1's step 5 from the prefix's cell states and recurrent sums (only the input term and
/// the cells run here), the projection's second half and LSTM2's recurrence, ordered so that
/// LSTM2's dependent steps overlap independent work: step 5 and the projection of paths 0–1,
/// LSTM2's step 0 (program order) beside step 5 of paths 2–3, step 1 beside the projection of
/// paths 2–3, then steps 2 and 3. Every lane's sums keep their order, so the values are those of
/// [`across_tail`] bit for bit. (Timed in place, rotating the orders interval by interval inside
/// one scheduler: 2–6 % faster than step 5 of every path, the whole projection and LSTM2 one
/// after the other; the projection path by path beside each LSTM2 step was slower. Before, timed
/// as separate builds: the projection of paths 0–1 beside step 5 of paths 2–3 2,730 and path by
/// path beside LSTM2's steps 2,860, against 2,650 TSC ticks at K = 4.)
#[inline(always)]
fn rest_paths<V: Vector, const G: usize, const P: usize>(
    packed: &Packed,
    x5: &[Lane; 2],
    prefix: &Prefix,
    h_out: &mut [f32; 2 * LANES],
) {
    // Step 5's hidden states are all written by the step; it reads only the cell states.
    let mut h = [[V::splat(0.0); 2]; G];
    let mut c = [[V::splat(0.0); 2]; G];
    for g in 0..G {
        for half in 0..2 {
            c[g][half] = V::load(&prefix.c[g][half]);
        }
    }
    let mut pre = [[V::splat(0.0); ACROSS_VECTORS]; P];
    for p in 0..P {
        for v in 0..ACROSS_VECTORS {
            pre[p][v] = V::load(&prefix.pre[p][v]);
        }
    }
    let x = (V::load(&x5[0]), V::load(&x5[1]));
    let sums = Sums::Ahead(&prefix.recurrent);
    let mut step5 = Aligned([[[0.0f32; LANES]; 4]; P]);
    let mut c2 = [V::splat(0.0); 2];
    let mut h2 = Aligned([[0.0f32; LANES]; 2]);
    step5_pair::<V, G>(packed, 0, x, &mut h, &mut c, sums);
    snapshot::<V, G, P>(&h, &mut step5);
    let first = P.min(2);
    project_range::<V, P>(packed, 1, &step5, &mut pre, 0, first);
    across_step::<V>(packed, 0, &mut pre[0], &mut c2, &mut h2);
    if P > 2 {
        step5_pair::<V, G>(packed, 1, x, &mut h, &mut c, sums);
        snapshot::<V, G, P>(&h, &mut step5);
    }
    if P > 1 {
        across_step::<V>(packed, 1, &mut pre[1], &mut c2, &mut h2);
    }
    if P > 2 {
        project_range::<V, P>(packed, 1, &step5, &mut pre, 2, P);
    }
    for p in 2..P {
        across_step::<V>(packed, p, &mut pre[p], &mut c2, &mut h2);
    }
    h_out.copy_from_slice(h2.as_flattened());
}

/// Step 5 of pair `i` of paths (`2 i`, `2 i + 1`; or of the last path alone).
#[inline(always)]
fn step5_pair<V: Vector, const G: usize>(
    packed: &Packed,
    i: usize,
    x: (V, V),
    h: &mut [[V; 2]; G],
    c: &mut [[V; 2]; G],
    sums: Sums<'_>,
) {
    if 4 * i + 4 <= G {
        for parity in 0..GROUPS_PER_PATH {
            let groups = [4 * i + parity, 4 * i + 2 + parity];
            groups_step::<V, G, 2, 4>(packed, groups, x, h, c, sums);
        }
    } else {
        for g in 4 * i..G {
            groups_step::<V, G, 1, 2>(packed, [g], x, h, c, sums);
        }
    }
}

/// `N` LSTM cells from their gate sums `t[q][k]` (gate `q` = i, f, g, o, pre-scaled so that
/// `Eq = 2^{t_q}`, module docs) and cell states `c` (updated in place); returns the hidden
/// states. The cell states are kept pre-scaled, `c = TANH_SCALE · c_true`, so that `tanh(c)`'s
/// exponent needs no multiplication. `FIRST`: `c = 0` (the forget gate drops out). Each stage
/// runs over all `N` cells before the next, so that the CPU has `N` independent chains to work
/// on. Products `(1 + a)(1 + b)` are formed as `a (1 + b) + (1 + b)`, one fused multiply-add.
#[inline(always)]
fn cells<V: Vector, const N: usize, const FIRST: bool>(t: [[V; N]; 4], c: &mut [V; N]) -> [V; N] {
    let one = V::splat(1.0);
    let scale = V::splat(TANH_SCALE);
    let ei = V::pow2_n(t[0]);
    let eg = V::pow2_n(t[2]);
    let eo = V::pow2_n(t[3]);
    let mut ab = ei;
    let mut not_g = eg;
    for k in 0..N {
        let b = one.add(eg[k]);
        ab[k] = ei[k].mul_add(b, b);
        // TANH_SCALE · (1 − Eg).
        not_g[k] = eg[k].mul_add(V::splat(-TANH_SCALE), scale);
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
    let ec = V::pow2_n(*c);
    let mut den = ec;
    for k in 0..N {
        let d = one.add(ec[k]);
        den[k] = eo[k].mul_add(d, d);
    }
    let r = V::recip_n(den);
    let mut h = r;
    for k in 0..N {
        h[k] = one.sub(ec[k]).mul(r[k]);
    }
    h
}

/// The gate sums of the `M` groups `groups` (same parity, module docs) start from the bias:
/// `acc[q][2 m + half]`.
#[inline(always)]
fn bias_sums<V: Vector, const M: usize, const N: usize>(
    packed: &Packed,
    groups: [usize; M],
) -> [[V; N]; 4] {
    let rows = &packed.feature[groups[0] % GROUPS_PER_PATH];
    let mut acc = [[V::splat(0.0); N]; 4];
    for m in 0..M {
        for half in 0..2 {
            for q in 0..4 {
                acc[q][2 * m + half] = V::load(&rows[half][q].bias);
            }
        }
    }
    acc
}

/// Adds the input term `W_ih x` of the `M` groups to their gate sums (inputs `lo`, `hi`, lane
/// `6 p + f`, broadcast over each sequence's lanes by one `vpermt2ps`, `input_index`).
#[inline(always)]
fn add_input<V: Vector, const M: usize, const N: usize>(
    packed: &Packed,
    groups: [usize; M],
    (lo, hi): (V, V),
    acc: &mut [[V; N]; 4],
) {
    let rows = &packed.feature[groups[0] % GROUPS_PER_PATH];
    for m in 0..M {
        let x = V::permute2(lo, hi, &packed.input_index[groups[m]]);
        for half in 0..2 {
            for q in 0..4 {
                acc[q][2 * m + half] =
                    V::load(&rows[half][q].w_ih).mul_add(x, acc[q][2 * m + half]);
            }
        }
    }
}

/// Adds the recurrent term `W_hh h` of the `M` groups to their gate sums: each `h_j` of a
/// sequence is broadcast over that sequence's lanes with one permute (`table_index`), so every
/// multiply-add is full (15 of 16 lanes), `j` in order.
#[inline(always)]
fn add_recurrent<V: Vector, const G: usize, const M: usize, const N: usize>(
    packed: &Packed,
    groups: [usize; M],
    h: &[[V; 2]; G],
    acc: &mut [[V; N]; 4],
) {
    let weights = &packed.feature_hh[groups[0] % GROUPS_PER_PATH];
    for j in 0..FEATURE_HIDDEN {
        let mut table = [V::splat(0.0); M];
        for m in 0..M {
            let hj = h[groups[m]][j / UNITS_PER_VECTOR];
            table[m] = hj.permute(&packed.table_index[j % UNITS_PER_VECTOR]);
        }
        for half in 0..2 {
            for q in 0..4 {
                let w = V::load(&weights[half][j][q]);
                for m in 0..M {
                    acc[q][2 * m + half] = w.mul_add(table[m], acc[q][2 * m + half]);
                }
            }
        }
    }
}

/// The `M` groups' cells from their complete gate sums `acc`; states `h[g]`, `c[g]` updated in
/// place (the `N = 2 M` cells interleaved, [`cells`]).
#[inline(always)]
fn groups_cells<V: Vector, const G: usize, const M: usize, const N: usize, const FIRST: bool>(
    groups: [usize; M],
    acc: [[V; N]; 4],
    h: &mut [[V; 2]; G],
    c: &mut [[V; 2]; G],
) {
    let mut cs = [V::splat(0.0); N];
    for m in 0..M {
        cs[2 * m] = c[groups[m]][0];
        cs[2 * m + 1] = c[groups[m]][1];
    }
    let hs = cells::<V, N, FIRST>(acc, &mut cs);
    for m in 0..M {
        c[groups[m]] = [cs[2 * m], cs[2 * m + 1]];
        h[groups[m]] = [hs[2 * m], hs[2 * m + 1]];
    }
}

/// How a step forms its gate sums `b + W_ih x + W_hh h` (the order of the sums; each is
/// `FEATURE_HIDDEN + 1` multiply-adds on the bias).
#[derive(Clone, Copy)]
enum Sums<'a> {
    /// Step 0 (`h = 0`): `b + W_ih x`.
    First,
    /// Steps 1–4: `(b + W_ih x) + W_hh h`, the input term first.
    InputFirst,
    /// Step 5: `(b + W_hh h) + W_ih x`, the input term last, so that the part that reads only
    /// step 4's states can run ahead ([`Prefix`]).
    InputLast,
    /// Step 5 from `b + W_hh h` computed ahead (`[group][half][gate]`): adds `W_ih x` only.
    Ahead(&'a [[[Lane; 4]; 2]; MAX_GROUPS]),
}

/// One LSTM1 step of the `M` groups `groups` (three sequences each, two vectors of five units;
/// all of the same parity, so the same weights: each weight vector is loaded once for the `M`
/// groups; `N = 2 M` vectors): inputs `x` (lane `6 p + f`), states `h[g]`, `c[g]` updated in
/// place, gate sums formed as `sums` says.
#[inline(always)]
fn groups_step<V: Vector, const G: usize, const M: usize, const N: usize>(
    packed: &Packed,
    groups: [usize; M],
    x: (V, V),
    h: &mut [[V; 2]; G],
    c: &mut [[V; 2]; G],
    sums: Sums<'_>,
) {
    const { assert!(N == 2 * M) };
    debug_assert!(
        groups
            .iter()
            .all(|g| g % GROUPS_PER_PATH == groups[0] % GROUPS_PER_PATH)
    );
    let mut acc = match sums {
        Sums::Ahead(ahead) => {
            let mut acc = [[V::splat(0.0); N]; 4];
            for m in 0..M {
                for half in 0..2 {
                    for q in 0..4 {
                        acc[q][2 * m + half] = V::load(&ahead[groups[m]][half][q]);
                    }
                }
            }
            acc
        }
        _ => bias_sums::<V, M, N>(packed, groups),
    };
    match sums {
        Sums::First => add_input::<V, M, N>(packed, groups, x, &mut acc),
        Sums::InputFirst => {
            add_input::<V, M, N>(packed, groups, x, &mut acc);
            add_recurrent::<V, G, M, N>(packed, groups, h, &mut acc);
        }
        Sums::InputLast => {
            add_recurrent::<V, G, M, N>(packed, groups, h, &mut acc);
            add_input::<V, M, N>(packed, groups, x, &mut acc);
        }
        Sums::Ahead(_) => add_input::<V, M, N>(packed, groups, x, &mut acc),
    }
    if matches!(sums, Sums::First) {
        groups_cells::<V, G, M, N, true>(groups, acc, h, c);
    } else {
        groups_cells::<V, G, M, N, false>(groups, acc, h, c);
    }
}

/// `b + W_hh h` of the `M` groups from step 4's states `h` (step 5's gate sums less the input
/// term, [`Sums::InputLast`]), stored into `out[g][half][gate]`.
#[inline(always)]
fn groups_recurrent<V: Vector, const G: usize, const M: usize, const N: usize>(
    packed: &Packed,
    groups: [usize; M],
    h: &[[V; 2]; G],
    out: &mut [[[Lane; 4]; 2]; MAX_GROUPS],
) {
    let mut acc = bias_sums::<V, M, N>(packed, groups);
    add_recurrent::<V, G, M, N>(packed, groups, h, &mut acc);
    for m in 0..M {
        for half in 0..2 {
            for q in 0..4 {
                acc[q][2 * m + half].store(&mut out[groups[m]][half][q]);
            }
        }
    }
}

/// One LSTM1 step of every group: same-parity pairs `(4 i + parity, 4 i + 2 + parity)` (two
/// paths sharing the weights), and the last two groups alone when `G mod 4 = 2`, gate sums
/// formed as `sums` says. With `project_first`, the first half of LSTM2's projection
/// (`pre = b + W_ih x` over step 4's states `step4`) runs after the first pair: independent
/// work that overlaps this step.
#[inline(always)]
fn lstm1_step<V: Vector, const G: usize, const P: usize>(
    packed: &Packed,
    x: (V, V),
    h: &mut [[V; 2]; G],
    c: &mut [[V; 2]; G],
    sums: Sums<'_>,
    project_first: Option<ProjectStart<'_, V, P>>,
) {
    let mut project_first = project_first;
    let mut first = true;
    for i in 0..G / 4 {
        for parity in 0..GROUPS_PER_PATH {
            let groups = [4 * i + parity, 4 * i + 2 + parity];
            groups_step::<V, G, 2, 4>(packed, groups, x, h, c, sums);
            if first {
                project_start::<V, P>(packed, project_first.take());
                first = false;
            }
        }
    }
    if G % 4 == 2 {
        for g in G - 2..G {
            groups_step::<V, G, 1, 2>(packed, [g], x, h, c, sums);
            if first {
                project_start::<V, P>(packed, project_first.take());
                first = false;
            }
        }
    }
}

/// Step 5's `b + W_hh h` of every group from step 4's states `h` ([`Sums::InputLast`]'s first
/// part, the same pairs and operations as [`lstm1_step`]), into `out[g][half][gate]`.
#[inline(always)]
fn lstm1_recurrent<V: Vector, const G: usize>(
    packed: &Packed,
    h: &[[V; 2]; G],
    out: &mut [[[Lane; 4]; 2]; MAX_GROUPS],
) {
    for i in 0..G / 4 {
        for parity in 0..GROUPS_PER_PATH {
            let groups = [4 * i + parity, 4 * i + 2 + parity];
            groups_recurrent::<V, G, 2, 4>(packed, groups, h, out);
        }
    }
    if G % 4 == 2 {
        for g in G - 2..G {
            groups_recurrent::<V, G, 1, 2>(packed, [g], h, out);
        }
    }
}

/// LSTM1 over `P` paths (`G = 2 P` groups, a pair of groups per path), then LSTM2 across
/// them; writes LSTM2's final hidden state into `h_out[..24]`.
///
/// LSTM2's input projection `W_ih x_p` is split by the LSTM1 step it reads (`x_p` holds each
/// feature's last two hidden states) and placed where the out-of-order core can overlap it with
/// dependent work: the half over step 4's states runs inside LSTM1's last step, after each
/// pair's step (beside that pair's cells), the half over step 5's states of path `p` just before
/// LSTM2's step `p`, so that it overlaps LSTM2's cells of path `p − 1`.
#[inline(always)]
fn across<V: Vector, const G: usize, const P: usize>(
    packed: &Packed,
    paths: &[[f32; FEATURES * HISTORY]],
    h_out: &mut [f32; 2 * LANES],
) {
    const { assert!(G == GROUPS_PER_PATH * P && GROUPS_PER_PATH == 2) };
    let xs = inputs(paths);
    // LSTM1 (`lstm1_step`); the projection's first half (step 4's states of every path, one
    // sweep over its weights) runs inside the last step, after its first pair.
    let mut h = [[V::splat(0.0); 2]; G];
    let mut c = [[V::splat(0.0); 2]; G];
    let mut pre = [[V::splat(0.0); ACROSS_VECTORS]; P];
    let mut step4 = Aligned([[[0.0f32; LANES]; 4]; P]);
    let mut step5 = Aligned([[[0.0f32; LANES]; 4]; P]);
    for t in 0..HISTORY {
        let x = (V::load(&xs[t][0]), V::load(&xs[t][1]));
        if t == 0 {
            lstm1_step::<V, G, P>(packed, x, &mut h, &mut c, Sums::First, None);
        } else if t + 1 < HISTORY {
            lstm1_step::<V, G, P>(packed, x, &mut h, &mut c, Sums::InputFirst, None);
        } else {
            snapshot::<V, G, P>(&h, &mut step4);
            let project_first = Some((&step4, &mut pre));
            lstm1_step::<V, G, P>(packed, x, &mut h, &mut c, Sums::InputLast, project_first);
        }
    }
    snapshot::<V, G, P>(&h, &mut step5);
    across_tail::<V, P>(packed, &step5, &mut pre, h_out);
}

/// The sequences' inputs per step: `xs[t][s / 16][s mod 16]` = sequence `s = 6 p + f` at step
/// `t` (zero past the used paths).
#[inline(always)]
fn inputs(paths: &[[f32; FEATURES * HISTORY]]) -> Aligned<Inputs> {
    let mut xs = Aligned([[[0.0f32; LANES]; 2]; HISTORY]);
    inputs_into(paths, &mut xs);
    xs
}

/// [`inputs`] into `xs` (every value written).
#[inline(always)]
fn inputs_into(paths: &[[f32; FEATURES * HISTORY]], xs: &mut Inputs) {
    *xs = [[[0.0f32; LANES]; 2]; HISTORY];
    for (p, path) in paths.iter().take(EDAR_MAX_PATHS).enumerate() {
        for (f, series) in path.chunks_exact(HISTORY).enumerate() {
            let s = FEATURES * p + f;
            for (t, &value) in series.iter().enumerate() {
                xs[t][s / LANES][s % LANES] = value;
            }
        }
    }
}

/// After LSTM1: the projection's second half over step 5's states `step5` (adding to `pre`,
/// which holds `b + W_ih x` over step 4's), then LSTM2's recurrence across the `P` paths;
/// writes its final hidden state into `h_out[..24]`.
#[inline(always)]
fn across_tail<V: Vector, const P: usize>(
    packed: &Packed,
    step5: &PathStates<P>,
    pre: &mut [[V; ACROSS_VECTORS]; P],
    h_out: &mut [f32; 2 * LANES],
) {
    project::<V, P>(packed, 1, step5, pre);
    // The recurrence across paths: h, c of 24 units as a 16-lane vector and the low half of
    // another (whose high lanes carry unused values).
    let mut c2 = [V::splat(0.0); 2];
    let mut h2 = Aligned([[0.0f32; LANES]; 2]);
    for p in 0..P {
        across_step::<V>(packed, p, &mut pre[p], &mut c2, &mut h2);
    }
    h_out.copy_from_slice(h2.as_flattened());
}

/// LSTM2's step over path `p` from its projected gate sums `gates` (the recurrent product of
/// the previous hidden state `h2` added for `p > 0`); updates `c2` and `h2`.
#[inline(always)]
fn across_step<V: Vector>(
    packed: &Packed,
    p: usize,
    gates: &mut [V; ACROSS_VECTORS],
    c2: &mut [V; 2],
    h2: &mut Aligned<[Lane; 2]>,
) {
    if p > 0 {
        // Two interleaved partial sums (even and odd `j`): half the dependent chain.
        let mut odd = [V::splat(0.0); ACROSS_VECTORS];
        for (pair, w) in packed.across_hh.chunks_exact(2).enumerate() {
            let h_even = V::splat(h2.as_flattened()[2 * pair]);
            let h_odd = V::splat(h2.as_flattened()[2 * pair + 1]);
            for v in 0..ACROSS_VECTORS {
                gates[v] = V::load(&w[0][v]).mul_add(h_even, gates[v]);
                odd[v] = V::load(&w[1][v]).mul_add(h_odd, odd[v]);
            }
        }
        for v in 0..ACROSS_VECTORS {
            gates[v] = gates[v].add(odd[v]);
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
        cells::<V, 2, true>(t, c2)
    } else {
        cells::<V, 2, false>(t, c2)
    };
    h0.store(&mut h2[0]);
    h1.store(&mut h2[1]);
}

/// LSTM1's hidden states after one step, by path: `[path][2 m + half]` (group `2 p + m`).
type PathStates<const P: usize> = Aligned<[[Lane; 4]; P]>;

/// The projection's first half to run inside LSTM1's last step: step 4's states and the
/// per-path gate sums to start.
type ProjectStart<'a, V, const P: usize> = (&'a PathStates<P>, &'a mut [[V; ACROSS_VECTORS]; P]);

/// `pre = b + W_ih x` over step 4's states (the projection's first half), if asked for.
#[inline(always)]
fn project_start<V: Vector, const P: usize>(packed: &Packed, work: Option<ProjectStart<'_, V, P>>) {
    if let Some((step4, pre)) = work {
        for q in 0..P {
            for v in 0..ACROSS_VECTORS {
                pre[q][v] = V::load(&packed.across_bias[v]);
            }
        }
        project::<V, P>(packed, 0, step4, pre);
    }
}

/// LSTM1's hidden states by path: `out[p][2 m + half]` = group `2 p + m`, vector `half`.
#[inline(always)]
fn snapshot<V: Vector, const G: usize, const P: usize>(
    h: &[[V; 2]; G],
    out: &mut Aligned<[[Lane; 4]; P]>,
) {
    for g in 0..G {
        for half in 0..2 {
            h[g][half].store(&mut out[g / GROUPS_PER_PATH][2 * (g % 2) + half]);
        }
    }
}

/// [`project_range`] over every path.
#[inline(always)]
fn project<V: Vector, const P: usize>(
    packed: &Packed,
    s: usize,
    hs: &Aligned<[[Lane; 4]; P]>,
    pre: &mut [[V; ACROSS_VECTORS]; P],
) {
    project_range::<V, P>(packed, s, hs, pre, 0, P);
}

/// Half of LSTM2's input projection for the paths `from..to` in one sweep over its weights:
/// `pre[p] += W_ih[:, 20 f + 10 s + u] x_p`, `x_p` = path `p`'s LSTM1 hidden states after step
/// `HISTORY − 2 + s` (`hs[p][2 m + half]`, lane `5 (f mod 3) + u mod 5` of group `m = f / 3`,
/// half `u / 5`); each weight vector is loaded once and used for each of those paths.
#[inline(always)]
fn project_range<V: Vector, const P: usize>(
    packed: &Packed,
    s: usize,
    hs: &Aligned<[[Lane; 4]; P]>,
    pre: &mut [[V; ACROSS_VECTORS]; P],
    from: usize,
    to: usize,
) {
    if (to - from + 1) * ACROSS_VECTORS > V::REGISTERS {
        // The paths' sums and a row of weights do not fit in registers: path by path, each
        // weight read from memory by its multiply-add (the same sums in the same order).
        for p in from..to {
            for f in 0..FEATURES {
                for u in 0..FEATURE_HIDDEN {
                    let w = &packed.across_ih[f * 2 * FEATURE_HIDDEN + s * FEATURE_HIDDEN + u];
                    let (k, lane) = feature_unit_slot(f, u);
                    let xv = V::splat(hs[p][k][lane]);
                    for v in 0..ACROSS_VECTORS {
                        pre[p][v] = V::load(&w[v]).mul_add(xv, pre[p][v]);
                    }
                }
            }
        }
        return;
    }
    for f in 0..FEATURES {
        for u in 0..FEATURE_HIDDEN {
            let w = &packed.across_ih[f * 2 * FEATURE_HIDDEN + s * FEATURE_HIDDEN + u];
            let mut wv = [V::splat(0.0); ACROSS_VECTORS];
            for v in 0..ACROSS_VECTORS {
                wv[v] = V::load(&w[v]);
            }
            let (k, lane) = feature_unit_slot(f, u);
            for p in from..to {
                let xv = V::splat(hs[p][k][lane]);
                for v in 0..ACROSS_VECTORS {
                    pre[p][v] = wv[v].mul_add(xv, pre[p][v]);
                }
            }
        }
    }
}

/// Where unit `u` of feature `f` of a path sits in [`PathStates`]: vector `2 m + half` (group
/// `m = f / 3`, half `u / 5`), lane `5 (f mod 3) + u mod 5`.
#[inline(always)]
fn feature_unit_slot(f: usize, u: usize) -> (usize, usize) {
    (
        2 * (f / TRIPLE) + u / UNITS_PER_VECTOR,
        UNITS_PER_VECTOR * (f % TRIPLE) + u % UNITS_PER_VECTOR,
    )
}

/// The first core layer's bias plus its connection-feature columns (`M_t`).
#[inline(always)]
fn core_start<V: Vector>(
    packed: &Packed,
    connection: &[f32; CONNECTION_FEATURES],
) -> [V; CORE_H1 / LANES] {
    let mut acc1 = [V::splat(0.0); CORE_H1 / LANES];
    for v in 0..CORE_H1 / LANES {
        acc1[v] = V::load(&packed.core1_bias[v]);
    }
    for (x, w) in connection.iter().zip(packed.core1.iter()) {
        let xv = V::splat(*x);
        for v in 0..CORE_H1 / LANES {
            acc1[v] = V::load(&w[v]).mul_add(xv, acc1[v]);
        }
    }
    acc1
}

/// The core 27 → 128 → 32 → 2 (ReLU between layers), from [`core_start`]'s partial first
/// layer and LSTM2's 24 outputs.
#[inline(always)]
fn core<V: Vector>(
    packed: &Packed,
    start: [V; CORE_H1 / LANES],
    across_h: &[f32; ACROSS_HIDDEN],
) -> [f32; 2] {
    // Two interleaved partial sums over the 24 inputs (even and odd), half the chain length.
    let mut acc1 = start;
    let mut odd = [V::splat(0.0); CORE_H1 / LANES];
    let rows = &packed.core1[CONNECTION_FEATURES..];
    for (x, w) in across_h.chunks_exact(2).zip(rows.chunks_exact(2)) {
        let (even_x, odd_x) = (V::splat(x[0]), V::splat(x[1]));
        for v in 0..CORE_H1 / LANES {
            acc1[v] = V::load(&w[0][v]).mul_add(even_x, acc1[v]);
            odd[v] = V::load(&w[1][v]).mul_add(odd_x, odd[v]);
        }
    }
    for v in 0..CORE_H1 / LANES {
        acc1[v] = acc1[v].add(odd[v]);
    }
    let mut h1 = Aligned([[0.0f32; LANES]; CORE_H1 / LANES]);
    for v in 0..CORE_H1 / LANES {
        acc1[v].relu().store(&mut h1[v]);
    }
    let h1 = h1.as_flattened();
    // `SPLIT` interleaved partial sums per output vector: input i goes to sum i mod SPLIT.
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
        let a = &acc2;
        let low = a[0][v].add(a[1][v]).add(a[2][v].add(a[3][v]));
        let high = a[4][v].add(a[5][v]).add(a[6][v].add(a[7][v]));
        h2[v] = low.add(high).relu();
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

#[cfg(all(test, target_arch = "x86_64"))]
mod cycles {
    //! Throw-away stage timing (`cargo test --release -p braid-sched-core --lib
    //! packed::cycles -- --ignored --nocapture`): TSC ticks per call, minimum and median of
    //! batches, of the whole pass and of its stages, AVX-512 kernel, K = 2 and 4.
    use super::*;
    use crate::sched::edar::network::{EdarNetwork, SplitMix64};
    use std::arch::x86_64::_rdtsc;
    use std::hint::black_box;
    type V = vector::avx512::V;

    fn state(k: u8) -> EdarState {
        let mut rng = SplitMix64(3);
        let mut s = EdarState::EMPTY;
        s.path_count = k;
        s.connection = [1.0, 0.5, 0.3];
        for p in s.paths.iter_mut() {
            for v in p.iter_mut() {
                *v = rng.unit() as f32;
            }
        }
        s
    }

    fn time(name: &str, mut f: impl FnMut()) {
        const BATCH: u64 = 20;
        let mut samples = Vec::with_capacity(3000);
        for _ in 0..3000 {
            let t0 = unsafe { _rdtsc() };
            for _ in 0..BATCH {
                f();
            }
            samples.push((unsafe { _rdtsc() } - t0) / BATCH);
        }
        samples.sort_unstable();
        println!(
            "{name:<28} min {:>6} p10 {:>6} median {:>6} TSC ticks",
            samples[0],
            samples[samples.len() / 10],
            samples[samples.len() / 2]
        );
    }

    /// LSTM1 and LSTM2 over `P` paths in `G` groups.
    #[target_feature(enable = "avx512f,avx512dq")]
    fn lstm1_lstm2<const G: usize, const P: usize>(p: &Packed, s: &EdarState) -> [f32; 2 * LANES] {
        let mut h = [0.0; 2 * LANES];
        across::<V, G, P>(p, s.used_paths(), &mut h);
        h
    }
    #[target_feature(enable = "avx512f,avx512dq")]
    fn core_only(p: &Packed, input: &[f32; CORE_IN]) -> [f32; 2] {
        let mut connection = [0.0; CONNECTION_FEATURES];
        connection.copy_from_slice(&input[..CONNECTION_FEATURES]);
        let mut h = [0.0; ACROSS_HIDDEN];
        h.copy_from_slice(&input[CONNECTION_FEATURES..]);
        core::<V>(p, core_start::<V>(p, &connection), &h)
    }

    /// A fixed number of whole passes for `perf stat -e cycles:u,instructions:u` (load-robust:
    /// counts only this thread's cycles): `BRAID_EDAR_LOOP_K` paths (2), `BRAID_EDAR_LOOP_N`
    /// calls (1,000,000), kernel `BRAID_EDAR_LOOP_KERNEL` = `best` (default) or `portable`.
    #[test]
    #[ignore]
    fn pass_loop() {
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let k = var("BRAID_EDAR_LOOP_K", 2) as u8;
        let n = var("BRAID_EDAR_LOOP_N", 1_000_000);
        let portable = std::env::var("BRAID_EDAR_LOOP_KERNEL").is_ok_and(|v| v == "portable");
        let net = EdarNetwork::initial(1);
        let packed = Packed::new(net.features(), net.across(), net.core());
        let s = state(k);
        let mut sum = 0.0f32;
        for _ in 0..n {
            let q = if portable {
                packed.q_values_portable(black_box(&s))
            } else {
                packed.q_values(black_box(&s))
            };
            sum += q[0];
        }
        println!("K={k} n={n} portable={portable} sum={sum}");
    }

    /// Median TSC ticks of `f` timed call by call (`setup` before each, not timed), less the
    /// median of an empty timed section.
    fn time_each<S>(name: &str, mut setup: impl FnMut() -> S, mut f: impl FnMut(S)) {
        fn ticks() -> u64 {
            // SAFETY: `lfence` and `rdtsc` exist on every x86_64 CPU.
            unsafe {
                std::arch::x86_64::_mm_lfence();
                let t = _rdtsc();
                std::arch::x86_64::_mm_lfence();
                t
            }
        }
        let median = |samples: &mut Vec<u64>| {
            samples.sort_unstable();
            (samples[samples.len() / 10], samples[samples.len() / 2])
        };
        let mut empty = Vec::with_capacity(20_000);
        let mut samples = Vec::with_capacity(20_000);
        for _ in 0..20_000 {
            let t0 = ticks();
            empty.push(ticks() - t0);
            let input = setup();
            let t0 = ticks();
            f(input);
            samples.push(ticks() - t0);
        }
        let (_, overhead) = median(&mut empty);
        let (p10, med) = median(&mut samples);
        println!(
            "{name:<28} p10 {:>6} median {:>6} TSC ticks (less {overhead} for the clock)",
            p10.saturating_sub(overhead),
            med.saturating_sub(overhead)
        );
    }

    /// The pass computed ahead (`Prefix`): each unit, the rest at the decision, all units, at
    /// K = 2 and 4 with the AVX-512 kernel (`cargo test --release -p braid-sched-core --lib
    /// packed::cycles::prefix_cycles -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn prefix_cycles() {
        let net = EdarNetwork::initial(1);
        let packed = Packed::new(net.features(), net.across(), net.core());
        let p = &packed;
        // Each SIMD build this CPU runs, twice (the portable one is an order of magnitude slower).
        let kernels = Kernel::available()
            .into_iter()
            .filter(|k| *k != Kernel::Portable);
        for kernel in kernels.flat_map(|kernel| [kernel; 2]) {
            let name = kernel.name();
            for k in [2u8, 4] {
                let s = state(k);
                // The previous decision's state: `s` one interval earlier (steps 1-5 of it are
                // `s`'s steps 0-4).
                let mut previous = s;
                for path in previous.paths.iter_mut() {
                    for series in path.chunks_exact_mut(HISTORY) {
                        series.rotate_right(1);
                    }
                }
                let mut ready = Prefix::new();
                p.prefix_begin(&previous, 0, kernel, &mut ready);
                while p.prefix_advance(&mut ready) {}
                let (q, used) = p.q_values_prefixed(&s, 0, kernel, &mut ready.clone());
                assert_eq!(used, PrefixUse::Ready);
                assert_eq!(
                    q.map(f32::to_bits),
                    p.q_values_with(kernel, &s).map(f32::to_bits)
                );
                let work = std::cell::RefCell::new(ready.clone());
                time_each(
                    &format!("full K={k} {name}"),
                    || (),
                    |()| {
                        black_box(p.q_values_with(kernel, black_box(&s)));
                    },
                );
                time_each(
                    &format!("rest (prefix ready) K={k} {name}"),
                    || work.borrow_mut().clone_from(&ready),
                    |()| {
                        let mut work = work.borrow_mut();
                        black_box(p.q_values_prefixed(black_box(&s), 0, kernel, &mut work));
                    },
                );
                time_each(
                    &format!("rest after the units K={k} {name}"),
                    || {
                        let mut work = work.borrow_mut();
                        p.prefix_begin(&previous, 0, kernel, &mut work);
                        while p.prefix_advance(&mut work) {}
                    },
                    |()| {
                        let mut work = work.borrow_mut();
                        black_box(p.q_values_prefixed(black_box(&s), 0, kernel, &mut work));
                    },
                );
                time_each(
                    &format!("inputs + check K={k} {name}"),
                    || (),
                    |()| {
                        let s = black_box(&s);
                        let xs = inputs(s.used_paths());
                        black_box(ready.valid_for(&xs, k, 0, kernel));
                    },
                );
                for unit in 0..PREFIX_UNITS {
                    time_each(
                        &format!("unit {unit} K={k} {name}"),
                        || {
                            let mut work = work.borrow_mut();
                            work.clone_from(&ready);
                            work.done = unit;
                        },
                        |()| {
                            black_box(p.prefix_advance(&mut work.borrow_mut()));
                        },
                    );
                }
                time_each(
                    &format!("begin + all units K={k} {name}"),
                    || (),
                    |()| {
                        let mut work = work.borrow_mut();
                        p.prefix_begin(black_box(&previous), 0, kernel, &mut work);
                        while p.prefix_advance(&mut work) {}
                    },
                );
            }
        }
    }

    #[test]
    #[ignore]
    fn stage_cycles() {
        if !(std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq"))
        {
            return;
        }
        let net = EdarNetwork::initial(1);
        let packed = Packed::new(net.features(), net.across(), net.core());
        let p = &packed;
        let (s2, s4) = (state(2), state(4));
        let input = [0.3f32; CORE_IN];
        for _ in 0..2 {
            time("full K=2", || {
                black_box(p.q_values(black_box(&s2)));
            });
            time("full K=4", || {
                black_box(p.q_values(black_box(&s4)));
            });
            time("portable K=2", || {
                black_box(p.q_values_portable(black_box(&s2)));
            });
            time("LSTM1+LSTM2 K=2", || unsafe {
                black_box(lstm1_lstm2::<4, 2>(p, black_box(&s2)));
            });
            time("LSTM1+LSTM2 K=4", || unsafe {
                black_box(lstm1_lstm2::<8, 4>(p, black_box(&s4)));
            });
            time("core", || unsafe {
                black_box(core_only(p, black_box(&input)));
            });
        }
    }
}
