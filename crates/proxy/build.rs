//! Makes the `braid` binary and braid-proxy's tests find libtorch at run time without
//! `LD_LIBRARY_PATH` when the `torch` feature is on: braid-learners (links = "braid_torch")
//! hands on the directory torch-sys linked libtorch from as `DEP_BRAID_TORCH_LIBTORCH_LIB`, and
//! this script bakes it in as an rpath (see crates/learners/build.rs). Without the feature it
//! does nothing.

include!("../learners/link_libtorch.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../learners/link_libtorch.rs");
    println!("cargo:rerun-if-env-changed=DEP_BRAID_TORCH_LIBTORCH_LIB");
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    let Ok(lib_dir) = std::env::var("DEP_BRAID_TORCH_LIBTORCH_LIB") else {
        println!(
            "cargo:warning=feature `torch` is on but braid-learners reported no libtorch \
             directory; run `source scripts/setup-torch.sh` first"
        );
        return;
    };
    link_libtorch(&lib_dir);
}
