//! Peekaboo's saved-model format: the learned LinUCB matrices of both actions.
//!
//! All little-endian, [`MODEL_LEN`] (684) bytes:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic [`MODEL_MAGIC`] = `BPKB` |
//! | 4 | 2 | `u16` format version ([`MODEL_VERSION`] = 1) |
//! | 6 | 2 | `u16` context dimension (6) |
//! | 8 | 2 | `u16` number of actions (2: wait, send) |
//! | 10 | 2 | `u16` reserved, 0 |
//! | 12 | 336 | action *wait*: `A` (36 `f64`, row-major), then `b` (6 `f64`) |
//! | 348 | 336 | action *send*: `A`, then `b` |
//!
//! `A⁻¹` is not stored; it is recomputed on load, which rejects a singular `A`.

use crate::sched::linucb::{Arm, FEATURES};

use super::ACTIONS;

/// Magic bytes opening a saved Peekaboo model.
pub const MODEL_MAGIC: [u8; 4] = *b"BPKB";
/// Version of the saved format written by this build.
pub const MODEL_VERSION: u16 = 1;
/// Bytes before the first matrix.
pub const HEADER_LEN: usize = 12;
/// Values stored per action: `A` then `b`.
const VALUES_PER_ACTION: usize = FEATURES * FEATURES + FEATURES;
/// Length in bytes of a saved model.
pub const MODEL_LEN: usize = HEADER_LEN + ACTIONS * VALUES_PER_ACTION * 8;

/// A saved model that cannot be loaded.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The input is not [`MODEL_LEN`] bytes long.
    #[error("peekaboo model is {found} bytes, expected {expected}")]
    Length {
        /// Bytes required.
        expected: usize,
        /// Bytes given.
        found: usize,
    },
    /// The input does not start with [`MODEL_MAGIC`].
    #[error("peekaboo model starts with {found:02x?}, expected the magic {MODEL_MAGIC:02x?}")]
    Magic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// The format version is not [`MODEL_VERSION`].
    #[error("peekaboo model version {found} is not supported (expected {MODEL_VERSION})")]
    Version {
        /// The version in the input.
        found: u16,
    },
    /// The model has another context dimension or number of actions.
    #[error(
        "peekaboo model has {features} features and {actions} actions, expected {FEATURES} and 2"
    )]
    Shape {
        /// Context dimension in the input.
        features: u16,
        /// Number of actions in the input.
        actions: u16,
    },
    /// A matrix entry is NaN or infinite.
    #[error("peekaboo model: value {index} of action {action} is not finite")]
    NotFinite {
        /// Which action's arm.
        action: usize,
        /// Position of the value within that arm (A row-major, then b).
        index: usize,
    },
    /// An arm's matrix A cannot be inverted.
    #[error("peekaboo model: matrix A of action {action} is singular")]
    Singular {
        /// Which action's arm.
        action: usize,
    },
}

/// Serialises both arms' `A` and `b`.
pub(crate) fn encode(arms: &[Arm; ACTIONS]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MODEL_LEN);
    out.extend_from_slice(&MODEL_MAGIC);
    out.extend_from_slice(&MODEL_VERSION.to_le_bytes());
    out.extend_from_slice(&(FEATURES as u16).to_le_bytes());
    out.extend_from_slice(&(ACTIONS as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    for arm in arms {
        for v in arm.a.iter().flatten().chain(arm.b.iter()) {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// Parses a saved model, checking every field.
pub(crate) fn decode(bytes: &[u8]) -> Result<[Arm; ACTIONS], ModelError> {
    if bytes.len() != MODEL_LEN {
        return Err(ModelError::Length {
            expected: MODEL_LEN,
            found: bytes.len(),
        });
    }
    let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
    let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if magic != MODEL_MAGIC {
        return Err(ModelError::Magic { found: magic });
    }
    if u16_at(4) != MODEL_VERSION {
        return Err(ModelError::Version { found: u16_at(4) });
    }
    let (features, actions) = (u16_at(6), u16_at(8));
    if usize::from(features) != FEATURES || usize::from(actions) != ACTIONS {
        return Err(ModelError::Shape { features, actions });
    }
    let mut arms = [Arm::default(), Arm::default()];
    let mut values = bytes[HEADER_LEN..].chunks_exact(8).map(|c| {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        f64::from_le_bytes(b)
    });
    for (action, arm) in arms.iter_mut().enumerate() {
        for index in 0..VALUES_PER_ACTION {
            // The length check above guarantees a value here; NaN would be rejected anyway.
            let v = values.next().unwrap_or(f64::NAN);
            if !v.is_finite() {
                return Err(ModelError::NotFinite { action, index });
            }
            if index < FEATURES * FEATURES {
                arm.a[index / FEATURES][index % FEATURES] = v;
            } else {
                arm.b[index - FEATURES * FEATURES] = v;
            }
        }
        arm.a_inv = Arm::invert(&arm.a).ok_or(ModelError::Singular { action })?;
    }
    Ok(arms)
}
