//! The synchronisation primitives the hand-off is built from, swappable for loom's.
//!
//! With the `loom` feature (tests only: `cargo test -p braid-sched-core --features loom --release
//! --test loom_slot`) every atomic, lock, `Arc` and cell below is loom's model type, so loom can
//! enumerate the interleavings of [`super::weights`] and [`super::experience`]. Otherwise they are
//! the std types (`AtomicU64` portable-atomic's: the std one where the target has 64-bit atomics, a
//! lock-based one on 32-bit MIPS and PowerPC), plus a thin [`UnsafeCell`] with loom's closure-based
//! access methods. On those 32-bit targets a load of the weights' version may wait for a store of
//! it in progress on the learner's thread (a few instructions, longer only if that thread is
//! preempted inside it): the hand-off never blocks a packet only where the target has native
//! 64-bit atomics.

#[cfg(feature = "loom")]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(feature = "loom")]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(feature = "loom")]
pub(crate) use loom::sync::{Arc, Mutex};

#[cfg(not(feature = "loom"))]
pub(crate) use portable_atomic::AtomicU64;
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::{Arc, Mutex};

/// `std::cell::UnsafeCell` with the access methods of `loom::cell::UnsafeCell`, so that the same
/// code compiles against both.
#[cfg(not(feature = "loom"))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(feature = "loom"))]
impl<T> UnsafeCell<T> {
    /// Wraps `value`.
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a mutable raw pointer to the contents.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
