//! The 16-lane `f32` operations the packed EdAR kernel is written in ([`Vector`]), with three
//! implementations: [`Portable`] (plain arrays, auto-vectorised where the CPU allows) and, on
//! x86-64, `avx2::V` over two `__m256` (the portable operations with FMA, bit for bit) and
//! `avx512::V` over `__m512`.
//!
//! The activations are built from two primitives: [`Vector::pow2`] (`2^t`) and
//! [`Vector::recip`] (`1 / x`). The kernel's gate weights are pre-scaled at load time by
//! `−log₂ e` (and `−2 log₂ e` for the cell-input gate), so that a gate's accumulated value `t` is
//! already the exponent: `σ(x) = 1 / (1 + 2^t)` and `tanh(x) = (1 − 2^t) / (1 + 2^t)`.
//!
//! `2^t`: `t` is clamped to [−[`POW2_MAX`], `POW2_MAX`] (beyond it the activations are 0 or ±1 to within 2⁻⁴⁰,
//! and the products of up to three `1 + 2^t` the kernel forms stay finite); `t = n + f` with
//! `n = ⌊t⌋` and `f ∈ [0, 1)`, `2^f` by a degree-5 polynomial (relative error 7.5e-8 in exact
//! arithmetic, 1.5e-7 evaluated in `f32`), then scaled by `2^n`. The AVX-512 build instead
//! clamps `t` with one `vrangeps` (`sign(t) · min(|t|, 40)`), rounds it to a multiple of 1/32
//! by adding 1.5 · 2^18 (`t = k + r`, `|r| ≤ 1/64`, `r` from `vreduceps` with the same
//! rounding), reads `2^{frac(k)}` from a 32-entry table with one `vpermt2ps` indexed by the low
//! bits of `t + 1.5 · 2^18`, multiplies it by `1 + r (c₁ + c₂ r)` (relative error 5.3e-8 in
//! exact arithmetic) and scales by `2^⌊k⌋` with `vscalefps`: nine operations, three of them
//! multiply-adds (before 3444bde: ten, with `vminps`/`vmaxps` and a subtraction for `r`). `1/x` is `vrcp14ps` (14 bits) plus one Newton step (about
//! 1 ulp).

/// Lanes per vector.
pub(super) const LANES: usize = 16;
/// One vector's worth of values.
pub(super) type Lane = [f32; LANES];

/// Largest exponent [`Vector::pow2`] uses.
pub(super) const POW2_MAX: f32 = 40.0;
/// Smallest exponent [`Vector::pow2`] uses (below it `1 + 2^t` is 1 to f32 precision and
/// `2^t` is within 2⁻⁴⁰ of 0, like the products above [`POW2_MAX`]).
const POW2_MIN: f32 = -POW2_MAX;

/// `1.5 · 2^23`: `(t + ROUND_MAGIC) − ROUND_MAGIC` is `t` rounded to the nearest integer (ties
/// to even) for `|t| ≤ 2^22`.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// `2^23 + 127`: `n + EXPONENT_MAGIC` holds the biased exponent `n + 127` in its low mantissa
/// bits for an integer `n` in `[−127, 128]`.
const EXPONENT_MAGIC: f32 = 8_388_735.0;

/// `2^f ≈ Σ POW2_POLY[k] f^k` on `[0, 1)` (relative minimax, degree 5).
const POW2_POLY: [f32; 6] = [
    0.999_999_94,
    0.693_153_1,
    0.240_153_61,
    0.055_826_318,
    0.008_989_34,
    0.001_877_577_2,
];

/// The lane-wise operations the kernel needs, on 16 `f32`.
pub(super) trait Vector: Copy {
    /// How many values of this type the CPU's registers hold (the kernel picks loop orders
    /// that keep its accumulators within them).
    const REGISTERS: usize;
    fn splat(value: f32) -> Self;
    fn load(values: &Lane) -> Self;
    fn store(self, out: &mut Lane);
    fn add(self, other: Self) -> Self;
    fn sub(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    /// `self · b + c`.
    fn mul_add(self, b: Self, c: Self) -> Self;
    /// `max(self, 0)`.
    fn relu(self) -> Self;
    /// `2^self` (module docs).
    fn pow2(self) -> Self;
    /// `1 / self` to about 1 ulp, for `self` in `[1, 2^121]`.
    fn recip(self) -> Self;

    /// [`Vector::pow2`] of `N` independent vectors. Implementations may interleave the `N`
    /// evaluations step by step, so that the CPU works on `N` dependency chains at once.
    /// (Plain loops, no closures, here and in the kernel: a closure is not always inlined, and
    /// out of line it loses the kernel's target features.)
    #[inline(always)]
    fn pow2_n<const N: usize>(mut x: [Self; N]) -> [Self; N] {
        for v in x.iter_mut() {
            *v = v.pow2();
        }
        x
    }

    /// [`Vector::recip`] of `N` independent vectors, interleaved like [`Vector::pow2_n`].
    #[inline(always)]
    fn recip_n<const N: usize>(mut x: [Self; N]) -> [Self; N] {
        for v in x.iter_mut() {
            *v = v.recip();
        }
        x
    }
    /// Lanes 8–15 then 0–7.
    fn swap_halves(self) -> Self;
    /// Lane `l` of the result is lane `index[l] mod 16` of `self`.
    fn permute(self, index: &[u32; LANES]) -> Self;
    /// Lane `l` of the result is lane `index[l] mod 32` of `lo` then `hi` (32 lanes).
    fn permute2(lo: Self, hi: Self, index: &[u32; LANES]) -> Self;
    /// The sum of the lanes.
    fn sum(self) -> f32;
}

/// `2^f` on `[0, 1)` by Horner's rule.
#[inline(always)]
fn pow2_poly<V: Vector>(f: V) -> V {
    let mut p = V::splat(POW2_POLY[5]);
    for k in (0..5).rev() {
        p = p.mul_add(f, V::splat(POW2_POLY[k]));
    }
    p
}

/// 16 lanes as a plain array; with `FUSED` (only where the CPU has FMA), `mul_add` is fused.
#[derive(Clone, Copy)]
pub(super) struct Portable<const FUSED: bool>(Lane);

impl<const FUSED: bool> Vector for Portable<FUSED> {
    // The fewest of its targets: x86-64's sixteen 16-byte SSE registers hold four values.
    const REGISTERS: usize = 4;
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
    fn sub(mut self, other: Self) -> Self {
        for i in 0..LANES {
            self.0[i] -= other.0[i];
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
    fn pow2(self) -> Self {
        let mut n = self;
        let mut f = self;
        let mut scale = self;
        for i in 0..LANES {
            let t = self.0[i].clamp(POW2_MIN, POW2_MAX);
            // ⌊t⌋ without `floor`, which is a library call per lane where the CPU has no
            // rounding instruction (x86-64 before SSE4.1): `t` rounded to the nearest integer
            // by adding and subtracting 1.5 · 2^23 (exact for |t| ≤ 2^22), less one where
            // that rounded up.
            let nearest = (t + ROUND_MAGIC) - ROUND_MAGIC;
            n.0[i] = if nearest > t { nearest - 1.0 } else { nearest };
            f.0[i] = t - n.0[i];
            // 2^n for an integer n in [−40, 40]: `n + 127 + 2^23` is exact and its low
            // mantissa bits are `n + 127`, which the shift moves into the exponent field (the
            // sum's own exponent bits fall off the top). Integer operations only, so the loop
            // vectorises; a float-to-int `as` does not (it saturates).
            scale.0[i] = f32::from_bits((n.0[i] + EXPONENT_MAGIC).to_bits() << 23);
        }
        pow2_poly(f).mul(scale)
    }
    #[inline(always)]
    fn recip(mut self) -> Self {
        for v in self.0.iter_mut() {
            *v = 1.0 / *v;
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
    fn permute(self, index: &[u32; LANES]) -> Self {
        let mut out = self;
        for l in 0..LANES {
            out.0[l] = self.0[index[l] as usize % LANES];
        }
        out
    }
    #[inline(always)]
    fn permute2(lo: Self, hi: Self, index: &[u32; LANES]) -> Self {
        let mut out = lo;
        for l in 0..LANES {
            let i = index[l] as usize % (2 * LANES);
            out.0[l] = if i < LANES { lo.0[i] } else { hi.0[i - LANES] };
        }
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
pub(super) mod avx512 {
    //! [`super::Vector`] over `__m512`. Only ever used inside the kernel compiled with
    //! `avx512f,avx512dq`, i.e. after the CPU was found to have both; the methods are
    //! `inline(always)` so that they compile into that function with its target features.

    use super::{LANES, Lane, POW2_MAX, Vector};
    use std::arch::x86_64::*;

    /// `2^{j/32}`, `j` = 0..31, rounded to `f32`.
    #[repr(C, align(64))]
    struct Table([f32; 2 * LANES]);
    static POW2_TABLE: Table = Table([
        1.0,
        1.021_897_2,
        1.044_273_8,
        1.067_140_5,
        1.090_507_7,
        1.114_386_8,
        1.138_788_6,
        1.163_724_9,
        1.189_207_1,
        1.215_247_4,
        1.241_857_8,
        1.269_051,
        1.296_839_6,
        1.325_236_7,
        1.354_255_6,
        1.383_91,
        std::f32::consts::SQRT_2,
        1.445_180_8,
        1.476_826_2,
        1.509_164_5,
        1.542_210_8,
        1.575_981,
        1.610_490_3,
        1.645_755_5,
        1.681_792_9,
        1.718_619_3,
        1.756_252_2,
        1.794_709_1,
        1.834_008_1,
        1.874_167_7,
        1.915_206_6,
        1.957_144_1,
    ]);
    /// `t + SHIFTER` rounds `t` (|t| ≤ 150) to a multiple of 1/32, whose 32nds are the low five
    /// mantissa bits of the sum.
    const SHIFTER: f32 = 393_216.0;
    /// `vreduceps` immediate: keep 5 fraction bits (M = 5), round to nearest even, no
    /// precision exception: `t − round(32 t) / 32`.
    const REDUCE_32NDS: i32 = 0x58;
    /// `2^r ≈ 1 + r (C1 + C2 r)` for `|r| ≤ 1/64` (relative minimax).
    const C1: f32 = 0.693_157_3;
    const C2: f32 = 0.240_226_49;

    #[derive(Clone, Copy)]
    pub(in super::super) struct V(__m512);

    // SAFETY (every `unsafe` block below): `V` values exist only inside the AVX-512 kernel,
    // which runs only on CPUs with AVX-512F and AVX-512DQ; loads and stores go through `&Lane`,
    // or `&mut Lane`, 16 valid `f32` (unaligned access is allowed).
    impl Vector for V {
        // Thirty-two `zmm` registers.
        const REGISTERS: usize = 32;
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
        fn sub(self, other: Self) -> Self {
            V(unsafe { _mm512_sub_ps(self.0, other.0) })
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
        fn pow2(self) -> Self {
            Self::pow2_n([self])[0]
        }
        #[inline(always)]
        fn recip(self) -> Self {
            unsafe {
                let r = _mm512_rcp14_ps(self.0);
                let e = _mm512_fnmadd_ps(self.0, r, _mm512_set1_ps(2.0));
                V(_mm512_mul_ps(r, e))
            }
        }
        #[inline(always)]
        fn pow2_n<const N: usize>(x: [Self; N]) -> [Self; N] {
            unsafe {
                let lo = _mm512_load_ps(POW2_TABLE.0.as_ptr());
                let hi = _mm512_load_ps(POW2_TABLE.0[LANES..].as_ptr());
                let shifter = _mm512_set1_ps(SHIFTER);
                let mut t = x;
                for k in 0..N {
                    // sign(x) · min(|x|, 40): the clamp to [−40, 40] in one `vrangeps`.
                    t[k] = V(_mm512_range_ps::<0b0010>(x[k].0, _mm512_set1_ps(POW2_MAX)));
                }
                // u = t + 1.5 · 2^18 (rounded to 1/32, the 32nds in its low bits),
                // k = u − 1.5 · 2^18, r = t − k (`vreduceps`, the same rounding).
                let mut u = t;
                let mut whole = t;
                let mut r = t;
                for k in 0..N {
                    u[k] = t[k].add(V(shifter));
                    r[k] = V(_mm512_reduce_ps::<REDUCE_32NDS>(t[k].0));
                    whole[k] = u[k].sub(V(shifter));
                }
                let mut y = t;
                for k in 0..N {
                    let table = _mm512_permutex2var_ps(lo, _mm512_castps_si512(u[k].0), hi);
                    let q = V::splat(C2).mul_add(r[k], V::splat(C1)).mul(r[k]);
                    y[k] = V(_mm512_fmadd_ps(table, q.0, table));
                }
                for k in 0..N {
                    y[k] = V(_mm512_scalef_ps(y[k].0, whole[k].0));
                }
                y
            }
        }
        #[inline(always)]
        fn recip_n<const N: usize>(x: [Self; N]) -> [Self; N] {
            unsafe {
                let mut r = x;
                for k in 0..N {
                    r[k] = V(_mm512_rcp14_ps(x[k].0));
                }
                let mut e = x;
                for k in 0..N {
                    e[k] = V(_mm512_fnmadd_ps(x[k].0, r[k].0, _mm512_set1_ps(2.0)));
                }
                for k in 0..N {
                    r[k] = r[k].mul(e[k]);
                }
                r
            }
        }
        #[inline(always)]
        fn swap_halves(self) -> Self {
            V(unsafe { _mm512_shuffle_f32x4::<0b01_00_11_10>(self.0, self.0) })
        }
        #[inline(always)]
        fn permute(self, index: &[u32; LANES]) -> Self {
            unsafe {
                let i = _mm512_loadu_si512(index.as_ptr().cast());
                V(_mm512_permutexvar_ps(i, self.0))
            }
        }
        #[inline(always)]
        fn permute2(lo: Self, hi: Self, index: &[u32; LANES]) -> Self {
            unsafe {
                let i = _mm512_loadu_si512(index.as_ptr().cast());
                V(_mm512_permutex2var_ps(lo.0, i, hi.0))
            }
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

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    //! [`super::Vector`] over two `__m256`, with AVX2 and FMA: the arithmetic of
    //! [`super::Portable`]`<true>` in the same order (so the same values bit for bit; `⌊t⌋` is
    //! `vroundps` here), written with intrinsics because the compiler did not vectorise the
    //! portable form's permutes (an index table: 16 scalar moves each) nor, before its `2^n` was
    //! built from bits, `pow2`'s float-to-int cast. Only ever used inside the kernel builds
    //! compiled with `avx2,fma`; the methods are `inline(always)` so that they compile into those
    //! functions with their features.

    use super::{EXPONENT_MAGIC, LANES, Lane, POW2_MAX, POW2_MIN, POW2_POLY, Vector};
    use std::arch::x86_64::*;

    /// Lanes 0–7 and 8–15.
    #[derive(Clone, Copy)]
    pub(in super::super) struct V([__m256; 2]);

    /// Lane `l` of an output half: lane `index[l] mod 16` of `v` (bit 3 picks the half,
    /// `vpermps` reads bits 0–2).
    #[inline(always)]
    unsafe fn pick(v: &[__m256; 2], index: __m256i) -> __m256 {
        unsafe {
            let lo = _mm256_permutevar8x32_ps(v[0], index);
            let hi = _mm256_permutevar8x32_ps(v[1], index);
            // `vblendvps` takes each lane's sign bit: bit 3 moved there.
            _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32::<28>(index)))
        }
    }

    // SAFETY (every `unsafe` block below): `V` values exist only inside the kernel builds
    // compiled with `avx2,fma`, which run only on CPUs that have both; loads and stores go
    // through `&Lane` or `&mut Lane` (16 valid `f32`) or `&[u32; LANES]`, eight values from
    // offset 0 or 8 (unaligned access is allowed).
    impl Vector for V {
        // Sixteen `ymm` registers, two per value.
        const REGISTERS: usize = 8;
        #[inline(always)]
        fn splat(value: f32) -> Self {
            let v = unsafe { _mm256_set1_ps(value) };
            V([v, v])
        }
        #[inline(always)]
        fn load(values: &Lane) -> Self {
            let p = values.as_ptr();
            V(unsafe { [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))] })
        }
        #[inline(always)]
        fn store(self, out: &mut Lane) {
            let p = out.as_mut_ptr();
            unsafe {
                _mm256_storeu_ps(p, self.0[0]);
                _mm256_storeu_ps(p.add(8), self.0[1]);
            }
        }
        #[inline(always)]
        fn add(self, other: Self) -> Self {
            V(unsafe {
                [
                    _mm256_add_ps(self.0[0], other.0[0]),
                    _mm256_add_ps(self.0[1], other.0[1]),
                ]
            })
        }
        #[inline(always)]
        fn sub(self, other: Self) -> Self {
            V(unsafe {
                [
                    _mm256_sub_ps(self.0[0], other.0[0]),
                    _mm256_sub_ps(self.0[1], other.0[1]),
                ]
            })
        }
        #[inline(always)]
        fn mul(self, other: Self) -> Self {
            V(unsafe {
                [
                    _mm256_mul_ps(self.0[0], other.0[0]),
                    _mm256_mul_ps(self.0[1], other.0[1]),
                ]
            })
        }
        #[inline(always)]
        fn mul_add(self, b: Self, c: Self) -> Self {
            V(unsafe {
                [
                    _mm256_fmadd_ps(self.0[0], b.0[0], c.0[0]),
                    _mm256_fmadd_ps(self.0[1], b.0[1], c.0[1]),
                ]
            })
        }
        #[inline(always)]
        fn relu(self) -> Self {
            V(unsafe {
                let zero = _mm256_setzero_ps();
                [
                    _mm256_max_ps(self.0[0], zero),
                    _mm256_max_ps(self.0[1], zero),
                ]
            })
        }
        #[inline(always)]
        fn pow2(self) -> Self {
            unsafe {
                let (min, max) = (_mm256_set1_ps(POW2_MIN), _mm256_set1_ps(POW2_MAX));
                let mut f = self;
                let mut scale = self;
                for h in 0..2 {
                    let t = _mm256_min_ps(_mm256_max_ps(self.0[h], min), max);
                    let n = _mm256_floor_ps(t);
                    f.0[h] = _mm256_sub_ps(t, n);
                    let biased =
                        _mm256_castps_si256(_mm256_add_ps(n, _mm256_set1_ps(EXPONENT_MAGIC)));
                    scale.0[h] = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(biased));
                }
                let mut p = V::splat(POW2_POLY[5]);
                for k in (0..5).rev() {
                    p = p.mul_add(f, V::splat(POW2_POLY[k]));
                }
                p.mul(scale)
            }
        }
        #[inline(always)]
        fn recip(self) -> Self {
            V(unsafe {
                let one = _mm256_set1_ps(1.0);
                [_mm256_div_ps(one, self.0[0]), _mm256_div_ps(one, self.0[1])]
            })
        }
        #[inline(always)]
        fn swap_halves(self) -> Self {
            V([self.0[1], self.0[0]])
        }
        #[inline(always)]
        fn permute(self, index: &[u32; LANES]) -> Self {
            unsafe {
                let p = index.as_ptr().cast::<__m256i>();
                let (lo, hi) = (_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1)));
                V([pick(&self.0, lo), pick(&self.0, hi)])
            }
        }
        #[inline(always)]
        fn permute2(lo: Self, hi: Self, index: &[u32; LANES]) -> Self {
            unsafe {
                let p = index.as_ptr().cast::<__m256i>();
                let mut out = lo;
                for h in 0..2 {
                    let i = _mm256_loadu_si256(p.add(h));
                    // Bit 4 picks `hi`; moved to the sign bit.
                    let from_hi = _mm256_castsi256_ps(_mm256_slli_epi32::<27>(i));
                    out.0[h] = _mm256_blendv_ps(pick(&lo.0, i), pick(&hi.0, i), from_hi);
                }
                out
            }
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            // Pairwise, as `Portable` does: lanes l + 8, then l + 4, l + 2, l + 1.
            unsafe {
                let eight = _mm256_add_ps(self.0[0], self.0[1]);
                let four = _mm_add_ps(
                    _mm256_castps256_ps128(eight),
                    _mm256_extractf128_ps::<1>(eight),
                );
                let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
                _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `2^t` and `1/x` against f64, lane by lane, for one implementation.
    fn check<V: Vector>(worst_pow2: &mut f64, worst_recip: &mut f64) {
        let mut t = -60.0f32;
        while t <= POW2_MAX {
            let lanes: Lane = std::array::from_fn(|l| t + l as f32 * 0.003_7);
            let mut out = [0.0; LANES];
            V::load(&lanes).pow2().store(&mut out);
            let mut many = [[0.0; LANES]; 3];
            let inputs = [V::load(&lanes); 3];
            for (o, v) in many.iter_mut().zip(V::pow2_n(inputs)) {
                v.store(o);
            }
            for l in 0..LANES {
                let want = 2f64.powf(f64::from(lanes[l].clamp(POW2_MIN, POW2_MAX)));
                let err = (f64::from(out[l]) / want - 1.0).abs();
                *worst_pow2 = worst_pow2.max(err);
                assert_eq!(
                    out[l], many[2][l],
                    "pow2_n differs from pow2 at {}",
                    lanes[l]
                );
            }
            // 1 + 2^t spans the reciprocal's range [1, 2^41].
            let denominators: Lane = std::array::from_fn(|l| 1.0 + 2f32.powf(lanes[l] + 1.0));
            V::load(&denominators).recip().store(&mut out);
            for l in 0..LANES {
                let want = 1.0 / f64::from(denominators[l]);
                *worst_recip = worst_recip.max((f64::from(out[l]) / want - 1.0).abs());
            }
            t += 0.061;
        }
    }

    #[test]
    fn pow2_and_recip_are_accurate() {
        let (mut pow2, mut recip) = (0.0, 0.0);
        check::<Portable<false>>(&mut pow2, &mut recip);
        println!("portable pow2 {pow2:e} recip {recip:e}");
        assert!(pow2 < 3e-7 && recip < 1e-7, "portable: {pow2:e} {recip:e}");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
        {
            #[target_feature(enable = "avx512f,avx512dq")]
            fn check_avx512(pow2: &mut f64, recip: &mut f64) {
                check::<avx512::V>(pow2, recip);
            }
            let (mut pow2, mut recip) = (0.0, 0.0);
            // SAFETY: the CPU has AVX-512F and DQ (checked just above).
            unsafe { check_avx512(&mut pow2, &mut recip) };
            println!("avx512 pow2 {pow2:e} recip {recip:e}");
            assert!(pow2 < 3e-7 && recip < 2e-7, "avx512: {pow2:e} {recip:e}");
        }
    }

    /// Every operation of `V` on `a`, `b`, `c` and the index tables, as bit patterns.
    #[cfg(target_arch = "x86_64")]
    fn every_op<V: Vector>(a: &Lane, b: &Lane, c: &Lane, index: &[u32; LANES]) -> Vec<u32> {
        let (va, vb, vc) = (V::load(a), V::load(b), V::load(c));
        let mut out = Vec::new();
        let mut push = |v: V| {
            let mut lanes = [0.0; LANES];
            v.store(&mut lanes);
            out.extend(lanes.map(f32::to_bits));
        };
        push(V::splat(a[3]));
        push(va.add(vb));
        push(va.sub(vb));
        push(va.mul(vb));
        push(va.mul_add(vb, vc));
        push(va.relu());
        push(va.pow2());
        push(V::pow2_n([va, vb])[1]);
        // 1 / (1 + |b|): inside the reciprocal's range.
        push(V::load(&b.map(|x| 1.0 + x.abs())).recip());
        push(va.swap_halves());
        push(va.permute(index));
        push(V::permute2(va, vb, index));
        out.push(va.sum().to_bits());
        out
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn avx2_is_portable_with_fma_bit_for_bit() {
        if !(std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma"))
        {
            return;
        }
        #[target_feature(enable = "avx2,fma")]
        fn avx2_ops(a: &Lane, b: &Lane, c: &Lane, index: &[u32; LANES]) -> Vec<u32> {
            every_op::<avx2::V>(a, b, c, index)
        }
        let mut rng = crate::sched::edar::network::SplitMix64(17);
        for trial in 0..2_000 {
            let scale = [1.0, 10.0, 60.0][trial % 3];
            let a: Lane = std::array::from_fn(|_| rng.uniform(scale));
            let b: Lane = std::array::from_fn(|_| rng.uniform(scale));
            let c: Lane = std::array::from_fn(|_| rng.uniform(scale));
            // Indexes up to 63: the permutes use them modulo 16 and 32.
            let index: [u32; LANES] = std::array::from_fn(|_| (rng.unit() * 64.0) as u32);
            let want = every_op::<Portable<true>>(&a, &b, &c, &index);
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            let got = unsafe { avx2_ops(&a, &b, &c, &index) };
            assert_eq!(got, want, "trial {trial}: {a:?} {b:?} {c:?} {index:?}");
        }
    }
}
