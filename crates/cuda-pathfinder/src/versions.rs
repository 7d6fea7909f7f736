//! Guard rails: which toolkit a file came from, which CUDA version the driver supports, and
//! whether the pieces found fit together.

use std::fmt;
use std::path::{Path, PathBuf};

/// A CUDA toolkit version, and how it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolkitVersion {
    /// The major version: 13 for CUDA 13.0.
    pub major: u32,
    /// The minor version: 0 for CUDA 13.0.
    pub minor: u32,
    /// Where the version came from: a wheel's metadata, a toolkit's `cuda.h`, or the file name.
    pub source: String,
}

impl fmt::Display for ToolkitVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The toolkit version `path` belongs to: for a file from an NVIDIA wheel, the wheel's version
/// when it follows the toolkit's (`nvidia-cuda-nvrtc 13.0.88`), else the toolkit release that pins
/// the wheel's version (from an installed `cuda-toolkit` wheel); for a toolkit install, the
/// `CUDA_VERSION` of its `cuda.h`, found by walking up; else the version in the file's real name
/// (`libnvrtc.so.13.0.88`). `None` when nothing tells (library wheels such as cuBLAS have version
/// numbers of their own).
pub fn toolkit_version_of(path: &Path) -> Option<ToolkitVersion> {
    match site_packages_of(path) {
        Some(site) => wheel_version(path, site),
        None => cuda_h_version(path),
    }
    .or_else(|| file_name_version(path))
}

fn site_packages_of(path: &Path) -> Option<&Path> {
    path.ancestors().find(|a| {
        a.file_name()
            .is_some_and(|n| n == "site-packages" || n == "dist-packages")
    })
}

/// Wheels whose version is the toolkit's.
fn follows_toolkit_version(name: &str) -> bool {
    let name = normalize(name);
    name.starts_with("nvidia-cuda-") || ["nvidia-nvjitlink", "nvidia-nvvm", "nvidia-nvfatbin"].contains(&name.as_str())
}

/// PyPI's name normalisation, without the `-cu12` suffix.
fn normalize(name: &str) -> String {
    let n = name.trim().to_lowercase().replace(['_', '.'], "-");
    n.strip_suffix("-cu12")
        .or_else(|| n.strip_suffix("-cu13"))
        .unwrap_or(&n)
        .to_string()
}

struct Dist {
    name: String,
    version: String,
    record: String,
    requires: Vec<String>,
}

fn dists(site: &Path) -> Vec<Dist> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(site).into_iter().flatten().flatten() {
        let dir = entry.path();
        if dir.extension().is_none_or(|e| e != "dist-info") {
            continue;
        }
        let Ok(metadata) = std::fs::read_to_string(dir.join("METADATA")) else {
            continue;
        };
        let field = |key: &str| metadata.lines().find_map(|l| l.strip_prefix(key)).map(str::to_string);
        let (Some(name), Some(version)) = (field("Name: "), field("Version: ")) else {
            continue;
        };
        out.push(Dist {
            name,
            version,
            record: std::fs::read_to_string(dir.join("RECORD")).unwrap_or_default(),
            requires: metadata
                .lines()
                .filter_map(|l| l.strip_prefix("Requires-Dist: "))
                .map(str::to_string)
                .collect(),
        });
    }
    out
}

fn wheel_version(path: &Path, site: &Path) -> Option<ToolkitVersion> {
    let rel = path.strip_prefix(site).ok()?.to_string_lossy().into_owned();
    let dists = dists(site);
    // The wheel that installed the file (for a folder, the one that installed files in it).
    let owner = dists.iter().find(|d| {
        d.record.lines().any(|l| {
            let file = l.split(',').next().unwrap_or("");
            file == rel || file.starts_with(&format!("{rel}/"))
        })
    })?;
    if follows_toolkit_version(&owner.name) {
        let (major, minor) = major_minor(&owner.version)?;
        return Some(ToolkitVersion {
            major,
            minor,
            source: format!("wheel {} {}", owner.name, owner.version),
        });
    }
    // A cuda-toolkit wheel pins each component to the version of its release.
    let pin = format!("{}=={}", normalize(&owner.name), owner.version);
    let toolkit = dists.iter().find(|d| {
        normalize(&d.name) == "cuda-toolkit"
            && d.requires.iter().any(|r| {
                let spec = r.split(';').next().unwrap_or("").replace(' ', "");
                let (name, version) = spec.split_once("==").unwrap_or((&spec, ""));
                format!("{}=={version}", normalize(name)) == pin
            })
    })?;
    let (major, minor) = major_minor(&toolkit.version)?;
    Some(ToolkitVersion {
        major,
        minor,
        source: format!(
            "wheel {} {}, pinned by cuda-toolkit {}",
            owner.name, owner.version, toolkit.version
        ),
    })
}

fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// `CUDA_VERSION` from `include/cuda.h` or `targets/*/include/cuda.h` in a folder above `path`.
fn cuda_h_version(path: &Path) -> Option<ToolkitVersion> {
    for dir in path.ancestors().skip(1).take(6) {
        let mut headers = vec![dir.join("include/cuda.h")];
        if let Ok(targets) = std::fs::read_dir(dir.join("targets")) {
            headers.extend(targets.flatten().map(|t| t.path().join("include/cuda.h")));
        }
        for header in headers {
            let Ok(text) = std::fs::read_to_string(&header) else {
                continue;
            };
            let version: u32 = text
                .lines()
                .find_map(|l| l.strip_prefix("#define CUDA_VERSION "))
                .and_then(|v| v.trim().parse().ok())?;
            return Some(ToolkitVersion {
                major: version / 1000,
                minor: (version % 1000) / 10,
                source: format!("CUDA_VERSION in {}", header.display()),
            });
        }
    }
    None
}

/// `libnvrtc.so.13.0.88` -> 13.0, for libraries whose soname major is the toolkit's.
fn file_name_version(path: &Path) -> Option<ToolkitVersion> {
    let real: PathBuf = path.canonicalize().ok()?;
    let name = real.file_name()?.to_string_lossy().into_owned();
    let follows_toolkit = ["libcudart.so.", "libnvrtc.so.", "libnvJitLink.so.", "libnvfatbin.so."];
    let rest = follows_toolkit.iter().find_map(|p| name.strip_prefix(p))?;
    let (major, minor) = major_minor(rest)?;
    Some(ToolkitVersion {
        major,
        minor,
        source: format!("file name {name}"),
    })
}

/// The CUDA version the installed driver supports (`cuDriverGetVersion`), as `(major, minor)`;
/// `None` without a driver.
pub fn driver_cuda_version() -> Option<(u32, u32)> {
    let v = crate::query_driver_cuda_version().ok()?;
    Some((v.major, v.minor))
}

/// Warnings about a set of found toolkit pieces: they come from different toolkit versions, or
/// from a toolkit newer than the driver supports (`driver` as `(major, minor)`). A newer minor
/// version of the same major works through CUDA's minor version compatibility, except for code
/// that needs the newer driver (PTX of a newer ISA, for one), which is noted too.
pub fn compatibility_warnings(items: &[(String, ToolkitVersion)], driver: Option<(u32, u32)>) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut versions: Vec<(u32, u32)> = items.iter().map(|(_, v)| (v.major, v.minor)).collect();
    versions.sort();
    versions.dedup();
    if versions.len() > 1 {
        let list: Vec<String> = items.iter().map(|(n, v)| format!("{n} {v}")).collect();
        warnings.push(format!(
            "the CUDA components found come from different toolkit versions ({}); mixing them can fail at run time: \
             point CUDA_PATH or the Python environment at one toolkit",
            list.join(", ")
        ));
    }
    if let Some((dmajor, dminor)) = driver {
        for (name, v) in items {
            if v.major > dmajor {
                warnings.push(format!(
                    "{name} comes from CUDA {v}, newer than the driver supports (CUDA {dmajor}.{dminor}): update the \
                     NVIDIA driver or use a CUDA {dmajor} toolkit"
                ));
            } else if v.major == dmajor && v.minor > dminor {
                warnings.push(format!(
                    "{name} comes from CUDA {v} and the driver supports CUDA {dmajor}.{dminor}: this works through \
                     minor version compatibility, but code that needs the newer driver (such as PTX of a newer ISA) \
                     will not load"
                ));
            }
        }
    }
    warnings
}
