//! `cargo xtask test-gpu [--bundle DIR] [-- FILTER...]`: the GPU test suite.
//!
//! The suite is the `cuda-tests` package (`tests/`): every test there needs a GPU and is
//! `#[ignore]`d in ordinary runs. With `--bundle DIR` this builds the test executables (lean
//! profile, stripped) into `DIR/bin` with a `run.sh` that runs them anywhere with an NVIDIA
//! driver (see ../shared/GPU.md, "The bundle contract"); without it, it builds the bundle in
//! `target/gpu-bundle` and runs it here.

use crate::util::{self, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

const PROFILE: &str = "gpu-test";
const PACKAGE: &str = "cuda-tests";

pub fn run(args: &[String]) -> Result {
    let mut args = args.to_vec();
    let bundle = util::take_option(&mut args, "--bundle")?;
    let filters: Vec<String> = match args.iter().position(|a| a == "--") {
        Some(i) => args.drain(i..).skip(1).collect(),
        None => Vec::new(),
    };
    util::no_more(&args)?;
    let run_here = bundle.is_none();
    let dir = bundle_dir(bundle, "target/gpu-bundle")?;
    build_bundle(&dir)?;
    if run_here {
        run_bundle(&dir, &filters)
    } else {
        println!(
            "bundle ready: copy {} to the GPU machine and run its run.sh",
            dir.display()
        );
        Ok(())
    }
}

fn build_bundle(dir: &Path) -> Result {
    let executables = build_tests()?;
    if executables.is_empty() {
        return Err(format!("cargo built no test executable for {PACKAGE}"));
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    let mut total = 0u64;
    for exe in &executables {
        // target/gpu-test/deps/raw_driver-0123abcd -> raw_driver
        let stem = exe.file_name().unwrap().to_string_lossy().into_owned();
        let name = stem.rsplit_once('-').map(|(n, _)| n.to_string()).unwrap_or(stem);
        let dest = bin.join(&name);
        std::fs::copy(exe, &dest).map_err(|e| format!("copy {}: {e}", exe.display()))?;
        total += std::fs::metadata(&dest).map(|m| m.len()).unwrap_or(0);
    }
    // The examples: run.sh runs each, and counts it as a test.
    let examples = dir.join("examples");
    std::fs::create_dir_all(&examples).map_err(|e| format!("{}: {e}", examples.display()))?;
    for example in build_examples()? {
        let name = example.file_name().unwrap().to_owned();
        std::fs::copy(&example, examples.join(&name)).map_err(|e| format!("copy {}: {e}", example.display()))?;
    }
    // The pathfinder report, printed by run.sh first: what the machine has, for reading failures.
    let report = build_report()?;
    std::fs::copy(&report, dir.join("cuda-pathfinder")).map_err(|e| format!("copy {}: {e}", report.display()))?;
    util::write(&dir.join("run.sh"), RUN_SH.as_bytes())?;
    make_executable(&dir.join("run.sh"))?;
    println!(
        "bundled {} test executables ({:.1} MiB) into {}",
        executables.len(),
        total as f64 / (1024.0 * 1024.0),
        dir.display()
    );
    if total > 48 << 20 {
        return Err(format!(
            "the bundle is {} MiB; it must stay well under 64 MiB",
            total >> 20
        ));
    }
    Ok(())
}

/// Builds the suite's test executables and returns their paths.
fn build_tests() -> Result<Vec<PathBuf>> {
    let artifacts = cargo_artifacts(
        &[
            "test",
            "--package",
            PACKAGE,
            "--test",
            "*",
            "--profile",
            PROFILE,
            "--no-run",
        ],
        "the GPU tests",
    )?;
    Ok(executables(&artifacts, |m| m["profile"]["test"] == true))
}

/// Runs cargo with `args`, and returns the `compiler-artifact` messages it printed.
pub(crate) fn cargo_artifacts(args: &[&str], what: &str) -> Result<Vec<serde_json::Value>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(util::root())
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("building {what} failed"));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .collect())
}

/// The executables among `artifacts` that `keep` selects.
pub(crate) fn executables(artifacts: &[serde_json::Value], keep: impl Fn(&serde_json::Value) -> bool) -> Vec<PathBuf> {
    artifacts
        .iter()
        .filter(|m| keep(m))
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .collect()
}

/// The bundle folder: `bundle` (made absolute) or `default` under the workspace.
pub(crate) fn bundle_dir(bundle: Option<String>, default: &str) -> Result<PathBuf> {
    let dir = bundle.map(PathBuf::from).unwrap_or_else(|| util::root().join(default));
    if dir.is_absolute() {
        Ok(dir)
    } else {
        Ok(std::env::current_dir().map_err(|e| e.to_string())?.join(dir))
    }
}

/// Runs a bundle's `run.sh` here, with NVRTC and friends from the wheels unless the environment
/// already names a Python environment.
pub(crate) fn run_bundle(dir: &Path, args: &[String]) -> Result {
    let mut cmd = Command::new(dir.join("run.sh"));
    if std::env::var_os("VIRTUAL_ENV").is_none() {
        let venv = util::root().join(".cuda-venv");
        crate::test::install_wheels(&venv)?;
        cmd.env("VIRTUAL_ENV", venv);
    }
    util::run(cmd.args(args))
}

/// Builds cuda-core's examples in the bundle's profile and returns their paths.
fn build_examples() -> Result<Vec<PathBuf>> {
    let artifacts = cargo_artifacts(
        &["build", "--package", "cuda-core", "--examples", "--profile", PROFILE],
        "the examples",
    )?;
    Ok(executables(&artifacts, |m| m["target"]["kind"][0] == "example"))
}

/// Builds the `cuda-pathfinder` report binary in the bundle's profile.
fn build_report() -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    util::run(Command::new(cargo).current_dir(util::root()).args([
        "build",
        "--quiet",
        "--package",
        "cuda-pathfinder",
        "--bin",
        "cuda-pathfinder",
        "--profile",
        PROFILE,
    ]))?;
    Ok(util::root().join("target").join(PROFILE).join("cuda-pathfinder"))
}

#[cfg(unix)]
pub(crate) fn make_executable(path: &Path) -> Result {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(not(unix))]
pub(crate) fn make_executable(_: &Path) -> Result {
    Ok(())
}

const RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs every GPU test executable of this bundle (written by cargo xtask test-gpu).
#   run.sh [--sanitize] [FILTER...]
# --sanitize runs them under compute-sanitizer (memcheck with leak check, racecheck, synccheck).
# With OUT set, the full log is written to $OUT/gpu-tests.log. Ends with "N passed, N failed".
set -u
here=$(cd "$(dirname "$0")" && pwd)
sanitize=0
filters=()
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    *) filters+=("$arg") ;;
  esac
done
log=/dev/null
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT"; log="$OUT/gpu-tests.log"; : >"$log"; fi

if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >>"$log" 2>&1; } && [ ! -e /dev/nvidiactl ]; then
  echo "no NVIDIA GPU found: the GPU tests cannot run here" | tee -a "$log"
  echo "0 passed, 1 failed"
  exit 1
fi

if [ -x "$here/cuda-pathfinder" ]; then
  echo "== what cuda-pathfinder finds here" >>"$log"
  "$here/cuda-pathfinder" >>"$log" 2>&1 || true
fi

passed=0; failed=0; skipped=0
run_one() {
  local label=$1; shift
  local output status
  output=$("$@" --include-ignored ${filters[@]+"${filters[@]}"} 2>&1); status=$?
  printf '%s\n' "== $label" "$output" | tee -a "$log"
  local summary
  summary=$(printf '%s\n' "$output" | grep -E '^test result:' | tail -n 1)
  if [ -z "$summary" ]; then
    echo "!! $label exited with status $status without a test summary" | tee -a "$log"
    failed=$((failed + 1)); return
  fi
  local p f i
  p=$(sed -E 's/.* ([0-9]+) passed.*/\1/' <<<"$summary")
  f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$summary")
  i=$(sed -E 's/.* ([0-9]+) ignored.*/\1/' <<<"$summary")
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + i))
  if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
    # tests that make no instrumented CUDA call (NVML queries, say) leave the sanitizer nothing to check
    if grep -q 'terminated before first instrumented API call' <<<"$output" && ! grep -q 'ERROR SUMMARY: [1-9]' <<<"$output"; then
      echo "   ($label made no CUDA call the sanitizer instruments)" | tee -a "$log"
    else
      failed=$((failed + 1))
    fi
  fi
}

if [ "$sanitize" -eq 1 ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$sanitizer" ] || { echo "compute-sanitizer not found"; echo "0 passed, 1 failed"; exit 1; }
fi

for exe in "$here"/bin/*; do
  name=$(basename "$exe")
  # an executable none of whose tests match the filters has nothing to run
  if ! "$exe" --list --include-ignored ${filters[@]+"${filters[@]}"} 2>/dev/null | grep -q ': test$'; then
    continue
  fi
  if [ "$sanitize" -eq 1 ]; then
    # API errors are left to the tests: error-path tests provoke them on purpose. Child processes
    # are helpers of error-path tests (a deliberately faulting kernel among them): not checked.
    run_one "$name (memcheck)" "$sanitizer" --tool memcheck --leak-check full --report-api-errors no --target-processes application-only --error-exitcode 1 "$exe" --test-threads=1
    run_one "$name (racecheck)" "$sanitizer" --tool racecheck --target-processes application-only --error-exitcode 1 "$exe" --test-threads=1
    run_one "$name (synccheck)" "$sanitizer" --tool synccheck --target-processes application-only --error-exitcode 1 "$exe" --test-threads=1
  else
    run_one "$name" "$exe"
  fi
done

# The examples: each must exit 0 (none takes a filter; skipped when filters are given).
if [ "$sanitize" -eq 0 ] && [ "${#filters[@]}" -eq 0 ] && [ -d "$here/examples" ]; then
  for example in "$here"/examples/*; do
    name=$(basename "$example")
    if output=$("$example" 2>&1); then
      passed=$((passed + 1)); printf '%s\n' "== example $name: ok" "$output" | tee -a "$log"
    else
      failed=$((failed + 1)); printf '%s\n' "== example $name: FAILED" "$output" | tee -a "$log"
    fi
  done
fi

line="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && line="$line, $skipped skipped"
echo "$line" | tee -a "$log"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
"#;
