//! Activations and the elementwise maths under them, written so that the compiler vectorises
//! them: `exp` by range reduction and a polynomial (no libm call per value), and `sigmoid` and
//! `tanh` from it, each in slice form (`*_in_place`) for whole gate vectors.
//!
//! Accuracy: `exp` is within 2 ulp of the correctly rounded value over the clamped range
//! (Cody–Waite reduction `x = n ln 2 + r`, |r| ≤ ln 2 / 2, degree-6 Taylor/minimax polynomial);
//! `sigmoid` and `tanh` built on it are within 1e-7 absolute, far inside the 1e-5 the tch parity
//! tests allow.

/// The nonlinearity between the layers of an [`super::Mlp`].
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
            Activation::Tanh => tanh_in_place(values),
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

/// `e^x` for f32, branch-free. Inputs are clamped to [-87.3, 88.3] (results stay normal and
/// finite); NaN is not expected (weights and inputs are finite).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in a part exact in f32 and a remainder (Cody–Waite).
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 × 2^23 rounds to the nearest integer without a libm call.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    let n = (x * LOG2_E + ROUND) - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // e^r on |r| ≤ ln2/2: the Taylor coefficients 1/k!, as in Cephes' expf.
    let p = 1.987_569_1e-4_f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 5e-1;
    let er = p * r * r + r + 1.0;
    // 2^n by building the exponent bits; n ∈ [-126, 127] after the clamp.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    er * scale
}

/// The logistic function `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `tanh(x)` as `sign(x) · (1 − e^{-2|x|}) / (1 + e^{-2|x|})`.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let e = exp(-2.0 * x.abs());
    ((1.0 - e) / (1.0 + e)).copysign(x)
}

/// [`sigmoid`] over a slice.
pub fn sigmoid_in_place(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked just above; the check is a cached load).
        unsafe { sigmoid_avx2_fma(values) };
        return;
    }
    values.iter_mut().for_each(|v| *v = sigmoid(*v));
}

/// [`tanh`] over a slice.
pub fn tanh_in_place(values: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: as in `sigmoid_in_place`.
        unsafe { tanh_avx2_fma(values) };
        return;
    }
    values.iter_mut().for_each(|v| *v = tanh(*v));
}

/// [`sigmoid_in_place`] compiled for 8-wide AVX2 vectors (same arithmetic, no fusing).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sigmoid_avx2_fma(values: &mut [f32]) {
    values.iter_mut().for_each(|v| *v = sigmoid(*v));
}

/// [`tanh_in_place`] compiled for 8-wide AVX2 vectors (same arithmetic, no fusing).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tanh_avx2_fma(values: &mut [f32]) {
    values.iter_mut().for_each(|v| *v = tanh(*v));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 400,001 points over [-87, 87], zero included.
    fn points() -> impl Iterator<Item = f32> {
        (-200_000..=200_000).map(|i| i as f32 * 4.35e-4)
    }

    #[test]
    fn exp_is_within_a_few_ulp() {
        for x in points().chain([-87.0, -50.0, 50.0, 88.0]) {
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            assert!(
                ((got - want) / want).abs() < 2.5e-7,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert!(exp(-1e9) > 0.0 && exp(1e9).is_finite());
    }

    #[test]
    fn sigmoid_and_tanh_are_within_1e7() {
        for x in points() {
            let xd = f64::from(x);
            let want_s = 1.0 / (1.0 + (-xd).exp());
            let want_t = xd.tanh();
            assert!(
                (f64::from(sigmoid(x)) - want_s).abs() < 1e-7,
                "sigmoid({x})"
            );
            assert!((f64::from(tanh(x)) - want_t).abs() < 1e-7, "tanh({x})");
        }
        assert_eq!(tanh(0.0), 0.0);
        assert_eq!(tanh(-1e9), -1.0);
        assert!(sigmoid(-1e9) < 1e-37 && sigmoid(1e9) == 1.0);
        let mut v = [0.0, 100.0];
        sigmoid_in_place(&mut v);
        assert_eq!(v, [0.5, 1.0]);
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
