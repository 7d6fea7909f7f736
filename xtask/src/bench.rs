//! `cargo xtask bench-gpu [--bundle DIR]`: the benchmark bundle (`crates/cuda-core/benches/`),
//! built like the GPU test bundle (see `gpu`) and run on the machine with the GPU. The bundle
//! carries the comparison's C program and Python script as sources: its run.sh compiles the C
//! program against the GPU machine's toolkit and finds a Python with cuda.core there.

use crate::gpu::{bundle_dir, cargo_artifacts, executables, fresh_stage, make_executable, pack_bundle, run_bundle};
use crate::util::{self, Result};
use std::path::PathBuf;

/// `cargo xtask bench-gpu [--bundle DIR]`: the comparison (`crates/cuda-core/benches/compare/`)
/// of the safe API with C, raw Rust, cudarc and cuda.core, bundled like the tests, or run here.
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
            "--bench",
            "nccl_busbw",
            // The cudarc column.
            "--features",
            "cudarc",
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
    let nccl = executable("nccl_busbw")?;
    // Put together where it runs, or in a stage that is packed into `dir` to be carried.
    let stage = fresh_stage(&dir, !run_here)?;
    let benches = util::root().join("crates/cuda-core/benches");
    for (from, to) in [
        (exe, "compare"),
        (criterion, "criterion"),
        (nccl, "nccl_busbw"),
        (benches.join("c/compare.c"), "compare.c"),
        (benches.join("python/compare.py"), "compare.py"),
    ] {
        std::fs::copy(&from, stage.join(to)).map_err(|e| format!("copy {}: {e}", from.display()))?;
    }
    util::write(&stage.join("run.sh"), BENCH_RUN_SH.as_bytes())?;
    make_executable(&stage.join("run.sh"))?;
    if run_here {
        run_bundle(&dir, &[])
    } else {
        pack_bundle(&stage, &dir)?;
        println!(
            "bench bundle ready: copy {} to the GPU machine and run its run.sh",
            dir.display()
        );
        Ok(())
    }
}

const BENCH_RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs the comparison (written by cargo xtask bench-gpu): the safe API against C, raw Rust, cudarc
# and cuda.core, each in a process of its own (compare starts them as servers), in one table.
# With OUT set, writes $OUT/bench.json and $OUT/bench.log too.
# Rounds: CUDA_CORE_BENCH_ROUNDS (default 151), CUDA_CORE_BENCH_PROCESS_ROUNDS (default 15); every
# server restarts after CUDA_CORE_BENCH_RESTART_EVERY rounds of a row (default 12), so that each
# row's samples come from many process instances per side.
# A column whose program is missing here (gcc and the toolkit for C, a Python with cuda.core)
# shows "-" and the run goes on. `run.sh --criterion` runs the Criterion benchmarks instead
# (reports under $OUT/criterion, or /tmp/criterion).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "--criterion" ]; then
  shift
  export CRITERION_HOME="${OUT:-/tmp}/criterion"
  exec "$here/criterion" --bench "$@"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The C column, built against this machine's toolkit. The stub libcuda.so only resolves the
# link: at run time the driver's libcuda.so.1 loads (the stubs folder is not in the rpath).
cuda=${CUDA_HOME:-/usr/local/cuda}
if command -v gcc >/dev/null 2>&1 && [ -e "$cuda/include/cuda.h" ] &&
  gcc -O2 -std=c11 -Wall -Wextra -o "$work/compare_c" "$here/compare.c" -I"$cuda/include" \
    -L"$cuda/lib64" -L"$cuda/lib64/stubs" -Wl,-rpath,"$cuda/lib64" -lnvrtc -lcuda; then
  export CUDA_CORE_BENCH_C="$work/compare_c"
else
  echo "run.sh: no C column: gcc, or the CUDA toolkit at $cuda, is missing or failed" >&2
fi

# The cuda.core column: the first Python that imports cuda.core.
python=
for candidate in ${CUDA_CORE_BENCH_PYTHON:-} /opt/torch/.venv/bin/python3 python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import cuda.core, numpy" 2>/dev/null; then
    python=$candidate
    break
  fi
done
if [ -n "$python" ]; then
  export CUDA_CORE_BENCH_PYTHON="$python" CUDA_CORE_BENCH_PYTHON_SCRIPT="$here/compare.py"
  echo "cuda.core $("$python" -c 'import cuda.core; print(cuda.core.__version__)') from $python"
else
  unset CUDA_CORE_BENCH_PYTHON
  echo "run.sh: no cuda.core column: no Python here imports cuda.core" >&2
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  "$here/compare" "$@" 2>&1 | tee "$OUT/bench.log"
else
  "$here/compare" "$@"
fi

# NCCL all-reduce bus bandwidth on two GPUs against raw NCCL calls (skips itself on one GPU or
# without NCCL; NVLink multicast stays off). `CUDA_CORE_BENCH_NCCL=0` leaves it out.
if [ "${CUDA_CORE_BENCH_NCCL:-1}" != 0 ]; then
  NCCL_NVLS_ENABLE=0 VIRTUAL_ENV=${VIRTUAL_ENV:-/opt/torch/.venv} "$here/nccl_busbw"
fi
"#;
