//! Makes the `braid` binary and braid-proxy's tests find libtorch at run time without
//! `LD_LIBRARY_PATH` when the `torch` feature is on: braid-learners (links = "braid_torch")
//! hands on the directory torch-sys linked libtorch from as `DEP_BRAID_TORCH_LIBTORCH_LIB`, and
//! this script bakes it in as an rpath (see crates/learners/build.rs). Without the feature it
//! does nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
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
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" || target_os == "macos" {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    }
}
