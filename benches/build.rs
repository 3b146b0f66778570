//! With the `torch` feature, makes the bench binaries find libtorch without `LD_LIBRARY_PATH`:
//! braid-learners (links = "braid_torch") hands on the directory torch-sys linked against, and
//! this script bakes it into braid-benches' own binaries as an rpath (link arguments from a
//! dependency's build script do not reach a dependant's binaries).

include!("../crates/learners/link_libtorch.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../crates/learners/link_libtorch.rs");
    println!("cargo:rerun-if-env-changed=DEP_BRAID_TORCH_LIBTORCH_LIB");
    if let Ok(lib_dir) = std::env::var("DEP_BRAID_TORCH_LIBTORCH_LIB") {
        link_libtorch(&lib_dir);
    }
}
