//! The binaries that link libtorch load its CUDA library where the libtorch they were built
//! against has one (feature `torch`): otherwise libtorch registers no CUDA backend and
//! `braid train --device cuda` is refused on a machine with a GPU (crates/learners/link_libtorch.rs).
//! Needs no GPU: it checks what this test binary loaded, not the device.
//!
//! Run: `source scripts/setup-torch.sh && cargo test -p braid-learners --features torch --test torch_link`.
#![cfg(feature = "torch")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn libtorch_cuda_is_loaded_where_libtorch_has_it() {
    let lib_dir = env!("BRAID_LIBTORCH_LIB");
    let has_cuda = Path::new(lib_dir).join("libtorch_cuda.so").exists();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    assert!(
        maps.contains("libtorch_cpu.so"),
        "libtorch_cpu.so is not mapped"
    );
    println!(
        "{lib_dir}: libtorch_cuda.so present: {has_cuda}; CUDA device seen: {}",
        tch::Cuda::is_available()
    );
    if has_cuda {
        assert!(
            maps.contains("libtorch_cuda.so"),
            "{lib_dir} has libtorch_cuda.so but this binary did not load it"
        );
    }
}
