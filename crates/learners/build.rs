//! Makes binaries that link libtorch find it at run time without `LD_LIBRARY_PATH`.
//!
//! With the `torch` feature, torch-sys (links = "tch") reports the directory it linked libtorch
//! from as `DEP_TCH_LIBTORCH_LIB`. Link arguments only apply to the package's own tests, examples
//! and binaries, so this script (1) bakes that directory into braid-learners' own test binaries
//! as an rpath, and (2) re-exports it (this package has links = "braid_torch") so that a dependant
//! binary crate reads `DEP_BRAID_TORCH_LIBTORCH_LIB` in its own build.rs and does the same. An
//! rpath keeps working when the binary is run directly, not just under `cargo test`/`cargo run`.
//! Without the feature the script does nothing.

include!("link_libtorch.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link_libtorch.rs");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    let Ok(lib_dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!(
            "cargo:warning=feature `torch` is on but torch-sys reported no libtorch directory; \
             run `source scripts/setup-torch.sh` first"
        );
        return;
    };
    link_libtorch(&lib_dir);
    println!("cargo:libtorch_lib={lib_dir}");
}
