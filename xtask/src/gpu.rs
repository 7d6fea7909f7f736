//! `cargo xtask test-gpu [--bundle DIR] [-- FILTER...]`: the GPU test suite.
//!
//! The suite is the `cuda-tests` package (`tests/`): every test there needs a GPU and is
//! `#[ignore]`d in ordinary runs. With `--bundle DIR` this builds the test executables (lean
//! profile, stripped), the examples and the pathfinder report, with a `run.sh` that runs them
//! anywhere with an NVIDIA driver (see ../shared/GPU.md, "The bundle contract"), and packs them
//! into `DIR` (see [`pack_bundle`]); without it, it builds the bundle in `target/gpu-bundle` and
//! runs it there, unpacked.

use crate::util::{self, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

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
    let stage = fresh_stage(&dir, !run_here)?;
    build_bundle(&stage)?;
    if run_here {
        run_bundle(&dir, &filters)
    } else {
        pack_bundle(&stage, &dir)?;
        println!(
            "bundle ready: copy {} to the GPU machine and run its run.sh",
            dir.display()
        );
        Ok(())
    }
}

/// Builds the suite into `dir` (empty): `bin/` (the test executables), `examples/`, the
/// pathfinder report and `run.sh`.
fn build_bundle(dir: &Path) -> Result {
    let executables = build_tests()?;
    if executables.is_empty() {
        return Err(format!("cargo built no test executable for {PACKAGE}"));
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
        "bundled {} test executables ({}) into {}",
        executables.len(),
        mib(total),
        dir.display()
    );
    Ok(())
}

/// The folder a bundle is put together in, empty: `dir` itself for a bundle run where it is built;
/// for one to carry (`packed`), a folder under `target/bundle-stage/` that [`pack_bundle`] then
/// packs into `dir`. A bundle to carry needs `tar` and `xz`: checked here, before the build.
pub(crate) fn fresh_stage(dir: &Path, packed: bool) -> Result<PathBuf> {
    let stage = if packed {
        for tool in ["tar", "xz"] {
            let found = Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                return Err(format!(
                    "packing the bundle needs the `{tool}` command (Debian and Ubuntu: apt-get install tar xz-utils)"
                ));
            }
        }
        let name = dir.file_name().map_or("bundle".into(), |n| n.to_string_lossy());
        util::root().join("target/bundle-stage").join(&*name)
    } else {
        dir.to_path_buf()
    };
    if stage.exists() {
        std::fs::remove_dir_all(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
    }
    std::fs::create_dir_all(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
    Ok(stage)
}

/// The archive a packed bundle holds its files in, and the `xz` level it is compressed at. The GPU
/// bundle (66.5 MiB of stripped executables) on the 2 cores of the build machine: level 6 gives
/// 6.3 MiB in 17-23 s with both cores free (its blocks are 24 MiB, compressed in parallel); level
/// 9 gives 5.3 MiB in 36-41 s, on one core (its blocks are 192 MiB). Either is far under the
/// limit, so the faster one. Unpacking takes under a second either way.
const ARCHIVE: &str = "bundle.tar.xz";
const XZ_LEVEL: &str = "-6";

/// What may be carried to the GPU machine is 64 MiB; the archive stays well under it.
const ARCHIVE_LIMIT: u64 = 48 << 20;

/// Unpacked, the bundle goes to the GPU machine's temporary folder: only a size far beyond
/// today's (67 MiB) is worth a word.
const UNPACKED_WARNING: u64 = 1 << 30;

/// Packs the bundle put together in `stage` (its `run.sh` and everything that runs) into `dir`,
/// which then holds only [`ARCHIVE`] and a `run.sh` that unpacks it into a temporary folder (the
/// copy in `dir` may be read-only), runs the staged `run.sh` there with the arguments it was
/// given, and removes the folder as it exits. Stripped executables compress about tenfold with
/// xz, which a 64 MiB limit on what is carried makes worth it. Fails where the archive is not
/// well under the limit; `stage` is removed once packed.
pub(crate) fn pack_bundle(stage: &Path, dir: &Path) -> Result {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let archive = dir.join(ARCHIVE);
    let file = std::fs::File::create(&archive).map_err(|e| format!("{}: {e}", archive.display()))?;
    let started = Instant::now();
    // tar | xz: xz compresses on every core (-T0), which tar -J would not ask it to.
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(stage)
        .args(["-cf", "-", "."])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run tar: {e}"))?;
    let xz = Command::new("xz")
        .args(["-T0", XZ_LEVEL, "-c"])
        .stdin(tar.stdout.take().expect("tar's stdout is piped"))
        .stdout(file)
        .status()
        .map_err(|e| format!("cannot run xz: {e}"));
    let tar = tar.wait().map_err(|e| format!("tar: {e}"))?;
    let xz = xz?;
    if !tar.success() || !xz.success() {
        return Err(format!("packing {} failed: tar {tar}, xz {xz}", stage.display()));
    }
    let packed = std::fs::metadata(&archive)
        .map_err(|e| format!("{}: {e}", archive.display()))?
        .len();
    let unpacked = tree_size(stage)?;
    println!(
        "packed {} into {} ({}, from {}; xz {XZ_LEVEL} in {:.1} s)",
        stage.display(),
        archive.display(),
        mib(packed),
        mib(unpacked),
        started.elapsed().as_secs_f64()
    );
    if unpacked > UNPACKED_WARNING {
        println!(
            "warning: run.sh unpacks the bundle into the GPU machine's temporary folder: {} there",
            mib(unpacked)
        );
    }
    if packed > ARCHIVE_LIMIT {
        return Err(format!(
            "{} is {}: it must stay well under the 64 MiB that can be carried (at most {})",
            archive.display(),
            mib(packed),
            mib(ARCHIVE_LIMIT)
        ));
    }
    util::write(&dir.join("run.sh"), UNPACK_RUN_SH.as_bytes())?;
    make_executable(&dir.join("run.sh"))?;
    std::fs::remove_dir_all(stage).map_err(|e| format!("{}: {e}", stage.display()))
}

/// The size of the files under `path`.
fn tree_size(path: &Path) -> Result<u64> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_dir() {
        return Ok(meta.len());
    }
    let mut total = 0;
    for entry in std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))? {
        total += tree_size(&entry.map_err(|e| format!("{}: {e}", path.display()))?.path())?;
    }
    Ok(total)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
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

/// Builds cuda-core's examples in the bundle's profile and returns their paths, with the bridges
/// (`ndarray`, `cudarc`) on, so that the guide's interop example runs all of its parts.
fn build_examples() -> Result<Vec<PathBuf>> {
    let artifacts = cargo_artifacts(
        &[
            "build",
            "--package",
            "cuda-core",
            "--examples",
            "--features",
            "ndarray,cudarc",
            "--profile",
            PROFILE,
        ],
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

/// The `run.sh` of a packed bundle (see [`pack_bundle`]). It runs the bundle's own `run.sh`
/// without `exec`, so that its EXIT trap removes the unpacked files afterwards.
const UNPACK_RUN_SH: &str = r#"#!/usr/bin/env bash
# Unpacks bundle.tar.xz (written by cargo xtask test-gpu or bench-gpu --bundle) into a temporary
# folder, runs the run.sh inside it with the arguments given here, and removes the folder again.
set -u
here=$(cd "$(dirname "$0")" && pwd)
unpacked=$(mktemp -d "${TMPDIR:-/tmp}/cuda-bundle.XXXXXX") || exit 1
trap 'rm -rf "$unpacked"' EXIT
# Interrupted or killed: exit, through the EXIT trap.
trap 'exit 130' INT TERM HUP
if ! tar -xJf "$here/bundle.tar.xz" -C "$unpacked"; then
  echo "cannot unpack $here/bundle.tar.xz into $unpacked (tar and xz are needed)"
  exit 1
fi
"$unpacked/run.sh" "$@"
"#;

const RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs every GPU test executable of this bundle (written by cargo xtask test-gpu).
#   run.sh [--sanitize] [FILTER...]
# --sanitize runs them under compute-sanitizer (memcheck with leak check, racecheck, synccheck).
# With OUT set, the full log is written to $OUT/gpu-tests.log. Ends with
# "N passed, N failed, N skipped": a test that finds the machine lacks what it needs (a second
# GPU, a newer driver, ...) records why (cuda_tests::skip) and counts as skipped, not passed.
# An executable still running after CUDA_TESTS_TIMEOUT seconds (300 unless set) is killed and
# counts as failed.
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
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi

# The tests' skip records (one file per run of an executable) and the lists made of them.
work=$(mktemp -d "${TMPDIR:-/tmp}/cuda-tests.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
# Interrupted or killed: exit, through the EXIT trap.
trap 'exit 130' INT TERM HUP

if [ -x "$here/cuda-pathfinder" ]; then
  echo "== what cuda-pathfinder finds here" >>"$log"
  "$here/cuda-pathfinder" >>"$log" 2>&1 || true
fi

passed=0; failed=0; skipped=0; runs=0; tool=
run_one() {
  local label=$1; shift
  local output status
  runs=$((runs + 1))
  local skips="$work/skips.$runs"
  # One executable that hangs (a test waiting on a peer process that died, say) must not take
  # the rest of the run with it: each gets CUDA_TESTS_TIMEOUT seconds (three times that under the
  # sanitizer), after which it and the processes it started are killed and it counts as failed.
  local limit=${CUDA_TESTS_TIMEOUT:-300}
  [ "$sanitize" -eq 1 ] && limit=$((limit * 3))
  output=$(CUDA_TESTS_SKIPS="$skips" CUDA_TESTS_SANITIZER_TOOL="$tool" timeout -k 10 "$limit" "$@" --include-ignored ${filters[@]+"${filters[@]}"} 2>&1); status=$?
  printf '%s\n' "== $label" "$output" | tee -a "$log"
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "!! $label ran past ${limit} s (CUDA_TESTS_TIMEOUT) and was killed" | tee -a "$log"
    failed=$((failed + 1)); return
  fi
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
  [ -s "$skips" ] && count_skips "$label" "$skips" "$output"
  if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
    # tests that make no instrumented CUDA call (NVML queries, say) leave the sanitizer nothing to check
    if grep -q 'terminated before first instrumented API call' <<<"$output" && ! grep -q 'ERROR SUMMARY: [1-9]' <<<"$output"; then
      echo "   ($label made no CUDA call the sanitizer instruments)" | tee -a "$log"
    else
      failed=$((failed + 1))
    fi
  fi
}

# The records of one run (lines "skip|part<TAB>test<TAB>reason", from cuda_tests::skip and
# skip_part): a test that skipped and passed moves from passed to skipped; every record goes to
# $work/skipped for the list at the end. A skip of a test that did not pass is listed, not counted.
count_skips() {
  local label=$1 skips=$2 output=$3 n
  printf '%s\n' "$output" | sed -n -E 's/^test (.+) \.\.\. ok$/\1/p' >"$skips.ok"
  n=$(awk -F '\t' -v label="$label" -v list="$work/skipped" '
    FILENAME == ARGV[1] { ok[$0] = 1; next }
    $1 == "skip" && ($2 in ok) { if (!counted[$2]++) { print "skip\t" label ": " $2 ": " $3 >>list; n++ } next }
    $1 == "skip" { $3 = $3 " (not counted: the test did not pass)" }
    !seen[$1 FS $2 FS $3]++ { print $1 "\t" label ": " $2 ": " $3 >>list }
    END { print n + 0 }' "$skips.ok" "$skips")
  passed=$((passed - n)); skipped=$((skipped + n))
}

if [ "$sanitize" -eq 1 ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$sanitizer" ] || { echo "compute-sanitizer not found"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
  # Tests that scale with time (the stress test) run shorter under the sanitizer.
  export CUDA_TESTS_SANITIZE=1
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
    # CUDA_TESTS_SANITIZER_TOOL names the tool, for tests it cannot run (they skip, saying why).
    tool=memcheck; run_one "$name (memcheck)" "$sanitizer" --tool memcheck --leak-check full --report-api-errors no --target-processes application-only --error-exitcode 1 "$exe" --test-threads=1
    tool=racecheck; run_one "$name (racecheck)" "$sanitizer" --tool racecheck --target-processes application-only --error-exitcode 1 "$exe" --test-threads=1
    tool=synccheck; run_one "$name (synccheck)" "$sanitizer" --tool synccheck --target-processes application-only --error-exitcode 1 "$exe" --test-threads=1
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

if [ -s "$work/skipped" ]; then
  awk -F '\t' '
    { list[$1] = list[$1] "   " $2 "\n" }
    END {
      if ("skip" in list) printf "== skipped: what this machine lacks for these tests\n%s", list["skip"]
      if ("part" in list) printf "== skipped in part: checks these tests left out (the rest ran)\n%s", list["part"]
    }' "$work/skipped" | tee -a "$log"
fi
echo "$passed passed, $failed failed, $skipped skipped" | tee -a "$log"
# Success is no failure and some test run (a filter that matches nothing is a failure).
[ "$failed" -eq 0 ] && [ $((passed + skipped)) -gt 0 ]
"#;
