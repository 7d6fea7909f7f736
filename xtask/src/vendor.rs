//! `cargo xtask vendor-headers`: fetch NVIDIA's CUDA wheels from PyPI and unpack the headers the
//! bindings are generated from into `headers/cuda-<major>.<minor>/`, with a provenance note.
//!
//! pip does the downloading (it knows PyPI's index and wheel tags); this command pins the versions,
//! records each wheel's sha256, and copies only the headers reachable from the binding roots.

use crate::util::{self, Result};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The CUDA toolkit wheels and the version vendored. `--version` replaces the toolkit version.
pub const TOOLKIT_VERSION: &str = "13.5.37";
const TOOLKIT_WHEELS: &[&str] = &[
    "nvidia-cuda-runtime",
    "nvidia-cuda-crt",
    "nvidia-cuda-nvrtc",
    "nvidia-nvjitlink",
    "nvidia-nvvm",
    "nvidia-nvml-dev",
];
/// Wheels versioned apart from the toolkit: cuFile has its own numbering, and the profiler API
/// wheel is not republished for every toolkit patch release.
const OTHER_WHEELS: &[(&str, &str)] = &[
    ("nvidia-cufile", "1.20.0.107"),
    ("nvidia-cuda-profiler-api", "13.5.25"),
    ("nvidia-nccl-cu13", "2.32.3"),
];

/// The headers bindgen starts from; everything they include (transitively) is vendored too.
pub const ROOT_HEADERS: &[&str] = &[
    "cuda.h",
    "cudaTypedefs.h",
    "cudaProfiler.h",
    "cudaProfilerTypedefs.h",
    "cuda_runtime_api.h",
    "nvrtc.h",
    "nvJitLink.h",
    "nvvm.h",
    "cufile.h",
    "nvml.h",
    "cudaGL.h",
    "cudaGLTypedefs.h",
    "cudaEGL.h",
    "cudaEGLTypedefs.h",
    "cudaVDPAU.h",
    "cudaVDPAUTypedefs.h",
    "nccl.h",
];

/// Toolkit headers that `nccl.h` includes and the NCCL bindings do not need: its C declarations
/// use `cudaStream_t` and `cudaEvent_t` (from `cuda_runtime_api.h`, vendored anyway) and no half,
/// bfloat16 or fp8 type. They are not followed from `nccl.h` (`cuda_runtime.h` alone would pull
/// in most of the runtime's C++ headers); `cargo xtask bindgen` puts small stand-ins in their
/// place (see `bindings::NCCL_STAND_INS`).
pub const NCCL_UNFOLLOWED_HEADERS: &[&str] = &["cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h"];

/// Headers of the graphics APIs that the interop roots (`cudaGL.h`, `cudaEGL.h`, `cudaVDPAU.h`
/// and their typedef headers) include and no wheel ships. They are not vendored: the bindings need
/// only a few of their types, which `cargo xtask bindgen` declares itself (see
/// `bindings::GRAPHICS_STAND_INS`), so no GL, EGL or VDPAU headers are needed at build time.
pub const GRAPHICS_API_HEADERS: &[&str] = &["GL/gl.h", "EGL/egl.h", "EGL/eglext.h", "vdpau/vdpau.h"];

/// Where headers live inside the CUDA 13 wheels.
const WHEEL_INCLUDE_PREFIX: &str = "nvidia/cu13/include/";

/// Where headers live inside a wheel: NCCL's wheel keeps its own folder.
fn include_prefix(wheel: &str) -> &'static str {
    if wheel.starts_with("nvidia-nccl") {
        "nvidia/nccl/include/"
    } else {
        WHEEL_INCLUDE_PREFIX
    }
}

/// The platform tags pip may pick from (the wheels are manylinux x86-64; headers are the same
/// on every platform).
const PLATFORMS: &[&str] = &[
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_12_x86_64",
];

pub fn run(args: &[String]) -> Result {
    let mut args = args.to_vec();
    let version = util::take_option(&mut args, "--version")?.unwrap_or(TOOLKIT_VERSION.into());
    util::no_more(&args)?;

    let mut wheels: Vec<(String, String)> = TOOLKIT_WHEELS
        .iter()
        .map(|w| (w.to_string(), version.clone()))
        .collect();
    wheels.extend(OTHER_WHEELS.iter().map(|(n, v)| (n.to_string(), v.to_string())));

    let download = util::root().join("target/xtask/wheels");
    std::fs::create_dir_all(&download).map_err(|e| format!("{}: {e}", download.display()))?;

    // Every header of every wheel, by its path below include/.
    let mut headers: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut provenance = Vec::new();
    for (name, version) in &wheels {
        let wheel = fetch_wheel(&download, name, version)?;
        let bytes = std::fs::read(&wheel).map_err(|e| format!("{}: {e}", wheel.display()))?;
        let sha = hex(&Sha256::digest(&bytes));
        let file_name = wheel.file_name().unwrap().to_string_lossy().into_owned();
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(&bytes))
            .map_err(|e| format!("{file_name} is not a readable wheel: {e}"))?;
        let mut count = 0;
        for i in 0..archive.len() {
            let mut entry = archive.by_index(i).map_err(|e| format!("{file_name}: {e}"))?;
            let Some(rel) = entry.name().strip_prefix(include_prefix(name)) else {
                continue;
            };
            if entry.is_dir() {
                continue;
            }
            let rel = rel.to_string();
            let mut data = Vec::new();
            entry
                .read_to_end(&mut data)
                .map_err(|e| format!("{file_name}: {rel}: {e}"))?;
            headers.insert(rel, data);
            count += 1;
        }
        println!("{file_name}: {count} headers, sha256 {sha}");
        provenance.push((name.clone(), version.clone(), file_name, sha));
    }

    let needed = include_closure(&headers)?;
    let cuda_h = String::from_utf8_lossy(&headers["cuda.h"]).into_owned();
    let cuda_version = parse_cuda_version(&cuda_h)?;
    let dir_name = format!("cuda-{}.{}", cuda_version / 1000, (cuda_version % 1000) / 10);
    let out = util::root().join("headers").join(&dir_name);
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    for rel in &needed {
        util::write(&out.join("include").join(rel), &headers[rel])?;
    }
    util::write(
        &out.join("PROVENANCE.md"),
        provenance_note(cuda_version, &provenance, &needed).as_bytes(),
    )?;
    println!(
        "vendored {} headers into headers/{dir_name} (CUDA_VERSION {cuda_version})",
        needed.len()
    );
    Ok(())
}

fn fetch_wheel(dir: &Path, name: &str, version: &str) -> Result<PathBuf> {
    let prefix = format!("{}-{version}-", name.replace('-', "_"));
    let find = || -> Option<PathBuf> {
        std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.file_name()
                .map(|f| f.to_string_lossy().starts_with(&prefix))
                .unwrap_or(false)
                && p.extension().is_some_and(|e| e == "whl")
        })
    };
    if let Some(found) = find() {
        return Ok(found);
    }
    let mut cmd = Command::new(util::python());
    cmd.args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]);
    for platform in PLATFORMS {
        cmd.args(["--platform", platform]);
    }
    cmd.args(["--python-version", "3.11", "--dest"])
        .arg(dir)
        .arg(format!("{name}=={version}"));
    util::run(&mut cmd).map_err(|e| format!("{e}\n(vendor-headers needs python3 with pip and access to PyPI)"))?;
    find().ok_or_else(|| format!("pip reported success but no {prefix}*.whl is in {}", dir.display()))
}

/// The headers reachable from [`ROOT_HEADERS`] through `#include` lines that name a header the
/// wheels ship (system headers such as `<stdlib.h>` are left to the C library).
fn include_closure(headers: &BTreeMap<String, Vec<u8>>) -> Result<BTreeSet<String>> {
    let include = regex::Regex::new(r#"(?m)^\s*#\s*include\s*[<"]([^>"]+)[>"]"#).unwrap();
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<String> = VecDeque::new();
    for root in ROOT_HEADERS {
        if !headers.contains_key(*root) {
            return Err(format!("no wheel ships {root}"));
        }
        queue.push_back(root.to_string());
    }
    while let Some(name) = queue.pop_front() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let text = String::from_utf8_lossy(&headers[&name]);
        let unfollowed: &[&str] = if name == "nccl.h" { NCCL_UNFOLLOWED_HEADERS } else { &[] };
        let dir = Path::new(&name).parent().map(|p| p.to_string_lossy().into_owned());
        for cap in include.captures_iter(&text) {
            let target = cap[1].to_string();
            if unfollowed.contains(&target.as_str()) {
                continue;
            }
            // Relative to the including header first (as "..." does), then to include/.
            let relative = dir
                .as_deref()
                .filter(|d| !d.is_empty())
                .map(|d| format!("{d}/{target}"));
            if let Some(rel) = relative.filter(|r| headers.contains_key(r)) {
                queue.push_back(rel);
            } else if headers.contains_key(&target) {
                queue.push_back(target);
            }
        }
    }
    Ok(seen)
}

pub fn parse_cuda_version(cuda_h: &str) -> Result<u32> {
    let re = regex::Regex::new(r"(?m)^#define CUDA_VERSION (\d+)").unwrap();
    re.captures(cuda_h)
        .and_then(|c| c[1].parse().ok())
        .ok_or_else(|| "cuda.h has no `#define CUDA_VERSION`".to_string())
}

fn provenance_note(
    cuda_version: u32,
    wheels: &[(String, String, String, String)],
    headers: &BTreeSet<String>,
) -> String {
    let mut s = String::new();
    s.push_str("# Provenance of these headers\n\n");
    s.push_str(&format!(
        "Written by `cargo xtask vendor-headers`; do not edit. `cuda.h` declares `CUDA_VERSION {cuda_version}`.\n\n"
    ));
    s.push_str(
        "The headers were unpacked, unmodified, from these wheels on PyPI (`nvidia/cu13/include/`; NCCL's from `nvidia/nccl/include/`):\n\n",
    );
    s.push_str("| package | version | wheel | sha256 |\n| --- | --- | --- | --- |\n");
    for (name, version, file, sha) in wheels {
        s.push_str(&format!("| {name} | {version} | {file} | `{sha}` |\n"));
    }
    s.push_str(&format!(
        "\nOnly the {} headers reachable through `#include` from the binding roots ({}) are kept:\n\n",
        headers.len(),
        ROOT_HEADERS.join(", ")
    ));
    for h in headers {
        s.push_str(&format!("- `{h}`\n"));
    }
    s.push_str(&format!(
        "\nThe graphics interop headers include {}, which no wheel ships: they are not vendored, and \
         `cargo xtask bindgen` declares the few GL, EGL and VDPAU types the bindings need itself.\n",
        GRAPHICS_API_HEADERS
            .iter()
            .map(|h| format!("`{h}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    s.push_str(&format!(
        "\n`nccl.h` includes {}, which its C declarations do not use: they are not vendored, and `cargo xtask bindgen` puts \
         small stand-ins in their place (`cuda_runtime.h` includes `cuda_runtime_api.h`, the others are empty).\n",
        NCCL_UNFOLLOWED_HEADERS
            .iter()
            .map(|h| format!("`{h}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    s.push_str("\nThe headers are NVIDIA's, under the license terms stated at the top of each file.\n");
    s
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
