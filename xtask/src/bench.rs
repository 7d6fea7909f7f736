//! `cargo xtask bench-gpu [--bundle DIR]`: the benchmark bundle (`crates/cuda-core/benches/`),
//! built like the GPU test bundle (see `gpu`) and run on the machine with the GPU.

use crate::gpu::{bundle_dir, cargo_artifacts, executables, make_executable, run_bundle};
use crate::util::{self, Result};
use std::path::PathBuf;

/// `cargo xtask bench-gpu [--bundle DIR]`: the safe-versus-raw comparison
/// (`crates/cuda-core/benches/compare.rs`), bundled like the tests, or run here.
pub fn run(args: &[String]) -> Result {
    let mut args = args.to_vec();
    let bundle = util::take_option(&mut args, "--bundle")?;
    util::no_more(&args)?;
    let run_here = bundle.is_none();
    let dir = bundle_dir(bundle, "target/bench-bundle")?;
    let artifacts = cargo_artifacts(
        &[
            "bench",
            "--package",
            "cuda-core",
            "--bench",
            "compare",
            "--bench",
            "criterion",
            "--no-run",
        ],
        "the benchmarks",
    )?;
    let executable = |name: &str| -> Result<PathBuf> {
        executables(&artifacts, |m| m["target"]["name"] == name)
            .pop()
            .ok_or_else(|| format!("cargo built no `{name}` benchmark executable"))
    };
    let exe = executable("compare")?;
    let criterion = executable("criterion")?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (from, to) in [(&exe, "compare"), (&criterion, "criterion")] {
        std::fs::copy(from, dir.join(to)).map_err(|e| format!("copy {}: {e}", from.display()))?;
    }
    util::write(&dir.join("run.sh"), BENCH_RUN_SH.as_bytes())?;
    make_executable(&dir.join("run.sh"))?;
    if run_here {
        run_bundle(&dir, &[])
    } else {
        println!(
            "bench bundle ready: copy {} to the GPU machine and run its run.sh",
            dir.display()
        );
        Ok(())
    }
}

const BENCH_RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs the safe-versus-raw comparison (written by cargo xtask bench-gpu). Prints one table;
# with OUT set, writes $OUT/bench.json too. `run.sh --criterion` runs the Criterion benchmarks
# instead (reports under $OUT/criterion, or /tmp/criterion).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "--criterion" ]; then
  shift
  export CRITERION_HOME="${OUT:-/tmp}/criterion"
  exec "$here/criterion" --bench "$@"
fi
exec "$here/compare" "$@"
"#;
