// Shared by the build scripts of braid-learners, braid-proxy and braid-benches (each
// `include!`s this file): the link arguments a binary that uses libtorch needs.

/// Bakes `lib_dir` (where torch-sys linked libtorch from) into the binary as an rpath, so that
/// it runs without `LD_LIBRARY_PATH`; and, where that directory holds `libtorch_cuda.so`, links
/// that library even though nothing calls into it. libtorch's CUDA backend registers itself
/// from that library's static initialisers, so with the linker's default `--as-needed` the
/// library is dropped and libtorch sees no GPU (`Cuda::is_available()` false, `braid train
/// --device cuda` refused) on a machine that has one.
fn link_libtorch(lib_dir: &str) {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" || target_os == "macos" {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    }
    // For braid-learners' test of this very link (tests/torch_link.rs).
    println!("cargo:rustc-env=BRAID_LIBTORCH_LIB={lib_dir}");
    let cuda = std::path::Path::new(lib_dir).join("libtorch_cuda.so");
    println!("cargo:rerun-if-changed={}", cuda.display());
    if target_os == "linux" && cuda.exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
