//! The `braid` binary: parses the command line and hands over to [`braid_proxy::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    braid_proxy::cli::main()
}
