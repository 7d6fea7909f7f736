//! `cargo xtask`: the project's automation, in Rust so that it runs wherever cargo does.
//!
//! ```text
//! cargo xtask vendor-headers [--version V]   fetch the NVIDIA wheels, unpack headers into headers/
//! cargo xtask bindgen [--check]              regenerate crates/cuda-sys/src/generated/
//! cargo xtask quickstart                    run the quickstart example
//! cargo xtask test [-- ARGS]                 install the compiler wheels locally, run the test suite
//! cargo xtask test-gpu [--bundle DIR]        build (and run, without --bundle) the GPU test suite
//! ```

mod bench;
mod bindings;
mod gpu;
mod test;
mod util;
mod vendor;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  vendor-headers [--version V]   download the NVIDIA CUDA wheels (newest 13.x, pinned in xtask/src/vendor.rs,
                                 or V) from PyPI and unpack the headers the bindings need into headers/
  bindgen [--check]              regenerate crates/cuda-sys/src/generated/ from headers/;
                                 --check regenerates in memory and fails if anything differs
  quickstart                     run the quickstart example (installs NVRTC from its wheel into .cuda-venv/)
  test [-- CARGO_TEST_ARGS]      install the CUDA compiler wheels into .cuda-venv/ and run cargo test --workspace
  test-gpu [--bundle DIR] [-- FILTER]
                                 build the GPU test suite; without --bundle also run it here (needs a GPU)
  bench-gpu [--bundle DIR]       build the safe-versus-raw benchmark; without --bundle also run it here
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("vendor-headers") => vendor::run(&args[1..]),
        Some("bindgen") => bindings::run(&args[1..]),
        Some("test") => test::run(&args[1..]),
        Some("quickstart") => test::quickstart(&args[1..]),
        Some("test-gpu") => gpu::run(&args[1..]),
        Some("bench-gpu") => bench::run(&args[1..]),
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{USAGE}")),
        None => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
