//! Disjoint LinUCB (Li et al., "A Contextual-Bandit Approach to Personalized News Article
//! Recommendation", WWW 2010, Alg. 1) with fixed-size matrices, the learner inside Peekaboo.
//!
//! Each arm keeps `A = I + Σ x xᵀ`, `b = Σ r x` and `A⁻¹`, all in fixed arrays of
//! [`FEATURES`] so nothing is allocated. `A⁻¹` is kept current with the Sherman–Morrison
//! identity, `(A + x xᵀ)⁻¹ = A⁻¹ − (A⁻¹x)(A⁻¹x)ᵀ / (1 + xᵀA⁻¹x)`, so scoring an arm costs two
//! d×d matrix-vector products and an update O(d²), never an inversion. Scores are
//! `θᵀx + α·√(xᵀA⁻¹x)` with `θ = A⁻¹b`.

/// Context dimension d.
pub const FEATURES: usize = 6;

/// A context vector.
pub type Context = [f64; FEATURES];

/// One LinUCB arm.
#[derive(Clone, Debug, PartialEq)]
pub struct Arm {
    /// `A = I + Σ x xᵀ`, row-major.
    pub(crate) a: [[f64; FEATURES]; FEATURES],
    /// `A⁻¹`, kept in step with `a`.
    pub(crate) a_inv: [[f64; FEATURES]; FEATURES],
    /// `b = Σ r x`.
    pub(crate) b: [f64; FEATURES],
}

impl Default for Arm {
    fn default() -> Self {
        Arm {
            a: identity(),
            a_inv: identity(),
            b: [0.0; FEATURES],
        }
    }
}

fn identity() -> [[f64; FEATURES]; FEATURES] {
    let mut m = [[0.0; FEATURES]; FEATURES];
    for (i, row) in m.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    m
}

fn mat_vec(m: &[[f64; FEATURES]; FEATURES], x: &Context) -> Context {
    let mut out = [0.0; FEATURES];
    for (o, row) in out.iter_mut().zip(m) {
        *o = row.iter().zip(x).map(|(a, b)| a * b).sum();
    }
    out
}

fn dot(x: &Context, y: &Context) -> f64 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

impl Arm {
    /// The upper confidence bound of this arm's reward for context `x` with exploration `alpha`.
    #[inline]
    pub fn score(&self, x: &Context, alpha: f64) -> f64 {
        let a_inv_x = mat_vec(&self.a_inv, x);
        let mean = dot(&a_inv_x, &self.b); // θᵀx = (A⁻¹b)ᵀx = bᵀ(A⁻¹x), A⁻¹ symmetric
        let width = dot(x, &a_inv_x).max(0.0).sqrt();
        mean + alpha * width
    }

    /// Learns reward `r` for context `x` (Sherman–Morrison update of `A⁻¹`).
    pub fn update(&mut self, x: &Context, r: f64) {
        let u = mat_vec(&self.a_inv, x);
        let denom = 1.0 + dot(x, &u);
        if !denom.is_finite() || denom <= 0.0 || !r.is_finite() {
            return; // cannot happen for a positive-definite A and finite inputs; stay safe
        }
        for i in 0..FEATURES {
            for j in 0..FEATURES {
                self.a_inv[i][j] -= u[i] * u[j] / denom;
                self.a[i][j] += x[i] * x[j];
            }
            self.b[i] += r * x[i];
        }
    }

    /// Recomputes `A⁻¹` from `A` by Gauss–Jordan elimination with partial pivoting; `None` when
    /// `A` is singular (used when loading saved matrices).
    pub(crate) fn invert(a: &[[f64; FEATURES]; FEATURES]) -> Option<[[f64; FEATURES]; FEATURES]> {
        let mut m = *a;
        let mut inv = identity();
        for col in 0..FEATURES {
            let pivot =
                (col..FEATURES).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
            if m[pivot][col].abs() < 1e-12 {
                return None;
            }
            m.swap(col, pivot);
            inv.swap(col, pivot);
            let p = m[col][col];
            for k in 0..FEATURES {
                m[col][k] /= p;
                inv[col][k] /= p;
            }
            for row in 0..FEATURES {
                if row != col {
                    let f = m[row][col];
                    for k in 0..FEATURES {
                        m[row][k] -= f * m[col][k];
                        inv[row][k] -= f * inv[col][k];
                    }
                }
            }
        }
        Some(inv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sherman_morrison_matches_direct_inverse() {
        let mut arm = Arm::default();
        let contexts = [
            [1.0, 0.2, 0.5, 0.1, 0.9, 0.0],
            [1.0, 0.8, 0.1, 0.7, 0.3, 0.05],
            [1.0, 0.5, 0.5, 0.5, 0.5, 0.5],
        ];
        for (i, x) in contexts.iter().enumerate() {
            arm.update(x, i as f64 * 0.3);
        }
        let direct = Arm::invert(&arm.a).unwrap();
        for (direct_row, kept_row) in direct.iter().zip(&arm.a_inv) {
            for (d, k) in direct_row.iter().zip(kept_row) {
                assert!((d - k).abs() < 1e-9);
            }
        }
    }

    #[test]
    fn learns_which_context_pays() {
        // Reward 1 when feature 1 is high, 0 when low: the score must follow.
        let mut arm = Arm::default();
        for _ in 0..200 {
            arm.update(&[1.0, 1.0, 0.0, 0.0, 0.0, 0.0], 1.0);
            arm.update(&[1.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0.0);
        }
        let high = arm.score(&[1.0, 1.0, 0.0, 0.0, 0.0, 0.0], 0.0);
        let low = arm.score(&[1.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0.0);
        assert!((high - 1.0).abs() < 0.02, "{high}");
        assert!(low.abs() < 0.02, "{low}");
        assert!(Arm::invert(&[[0.0; FEATURES]; FEATURES]).is_none());
    }
}
