//! Headers, tools, bitcode and static libraries: found in the same places as the libraries.

use crate::search::{roots, site_packages_of, Candidates, Environment, FoundVia};
use crate::{Attempt, NotFoundError};
use std::path::{Path, PathBuf};

/// A file or folder that was found, and the rule that found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocatedFile {
    /// The name asked for.
    pub name: String,
    /// Where it is.
    pub abs_path: PathBuf,
    /// Which rule found it.
    pub found_via: FoundVia,
}

/// One header component: the header that marks its folder, and where the folder is.
struct HeaderSpec {
    name: &'static str,
    /// A header the folder must hold.
    marker: &'static str,
    /// Folders below site-packages, CUDA 13 wheel first.
    site_packages_dirs: &'static [&'static str],
    /// Folders below a toolkit root.
    anchor_dirs: &'static [&'static str],
    install_root_vars: &'static [&'static str],
}

const INCLUDE: &[&str] = &["include"];

macro_rules! ctk_header {
    ($name:literal, $marker:literal, $cu12:literal) => {
        HeaderSpec {
            name: $name,
            marker: $marker,
            site_packages_dirs: &["nvidia/cu13/include", $cu12],
            anchor_dirs: INCLUDE,
            install_root_vars: &[],
        }
    };
}

const HEADERS: &[HeaderSpec] = &[
    HeaderSpec {
        name: "cccl",
        marker: "cuda/std/version",
        site_packages_dirs: &["nvidia/cu13/include/cccl", "nvidia/cuda_cccl/include"],
        anchor_dirs: &["include/cccl", "include"],
        install_root_vars: &[],
    },
    ctk_header!("cublas", "cublas.h", "nvidia/cublas/include"),
    ctk_header!("cuda", "cuda.h", "nvidia/cuda_runtime/include"),
    ctk_header!("cudart", "cuda_runtime.h", "nvidia/cuda_runtime/include"),
    ctk_header!("cufft", "cufft.h", "nvidia/cufft/include"),
    ctk_header!("cufile", "cufile.h", "nvidia/cufile/include"),
    ctk_header!("curand", "curand.h", "nvidia/curand/include"),
    ctk_header!("cusolver", "cusolverDn.h", "nvidia/cusolver/include"),
    ctk_header!("cusparse", "cusparse.h", "nvidia/cusparse/include"),
    ctk_header!("npp", "npp.h", "nvidia/npp/include"),
    ctk_header!("nvcc", "fatbinary_section.h", "nvidia/cuda_nvcc/include"),
    ctk_header!("nvfatbin", "nvFatbin.h", "nvidia/nvfatbin/include"),
    ctk_header!("nvjitlink", "nvJitLink.h", "nvidia/nvjitlink/include"),
    ctk_header!("nvjpeg", "nvjpeg.h", "nvidia/nvjpeg/include"),
    ctk_header!("nvml", "nvml.h", "nvidia/cuda_nvml_dev/include"),
    ctk_header!("nvrtc", "nvrtc.h", "nvidia/cuda_nvrtc/include"),
    HeaderSpec {
        name: "nvvm",
        marker: "nvvm.h",
        site_packages_dirs: &[
            "nvidia/cu13/include",
            "nvidia/cu13/nvvm/include",
            "nvidia/cuda_nvcc/nvvm/include",
        ],
        anchor_dirs: &["nvvm/include"],
        install_root_vars: &[],
    },
    HeaderSpec {
        name: "cudnn",
        marker: "cudnn.h",
        site_packages_dirs: &["nvidia/cudnn/include"],
        anchor_dirs: INCLUDE,
        install_root_vars: &["CUDNN_PATH"],
    },
    HeaderSpec {
        name: "nccl",
        marker: "nccl.h",
        site_packages_dirs: &["nvidia/nccl/include"],
        anchor_dirs: INCLUDE,
        install_root_vars: &["NCCL_HOME"],
    },
];

/// The header components [`locate_nvidia_header_directory`] knows, with the header that marks
/// each folder (`("nvrtc", "nvrtc.h")`).
pub fn supported_headers() -> impl Iterator<Item = (&'static str, &'static str)> {
    HEADERS.iter().map(|h| (h.name, h.marker))
}

/// The tools [`find_nvidia_binary_utility`] knows.
pub static SUPPORTED_BINARY_UTILITIES: &[&str] = &[
    "nvcc",
    "ptxas",
    "nvdisasm",
    "cuobjdump",
    "nvprune",
    "fatbinary",
    "bin2c",
    "nvlink",
    "cuda-gdb",
    "cuda-gdbserver",
    "compute-sanitizer",
    "nvprof",
    "nsys",
    "nsight-sys",
    "ncu",
    "nsight-compute",
];

/// The bitcode libraries [`find_bitcode_lib`] knows: `device` is `libdevice.10.bc`.
pub static SUPPORTED_BITCODE_LIBS: &[(&str, &str)] = &[("device", "libdevice.10.bc")];

/// The static libraries [`find_static_lib`] knows: `cudadevrt` is `libcudadevrt.a`.
pub static SUPPORTED_STATIC_LIBS: &[(&str, &str)] = &[("cudadevrt", "libcudadevrt.a")];

/// The first candidate that `accept`s, or the list of every one tried.
fn first_match(
    kind: &'static str,
    name: &str,
    early: Candidates,
    late: Candidates,
    accept: impl Fn(&Path) -> Result<(), String>,
    hint: String,
) -> Result<LocatedFile, NotFoundError> {
    let mut attempts = Vec::new();
    for (rule, path) in early.into_iter().chain(late) {
        match accept(&path) {
            Ok(()) => {
                return Ok(LocatedFile {
                    name: name.to_string(),
                    abs_path: path,
                    found_via: rule,
                });
            }
            Err(why) => attempts.push(Attempt {
                rule,
                candidate: path.display().to_string(),
                rejected_because: why,
            }),
        }
    }
    Err(NotFoundError {
        kind,
        name: name.to_string(),
        attempts,
        hint,
    })
}

/// Candidates under site-packages, then the roots (conda, product variables, CUDA_PATH), then
/// `/usr/local/cuda`; for conda the toolkit also keeps headers under `targets/<triple>/`.
fn candidates(
    env: &Environment,
    site_packages_dirs: &[&str],
    anchor_dirs: &[&str],
    product_vars: &[&str],
    leaf: &str,
) -> (Candidates, Candidates) {
    let mut early = Vec::new();
    for sp in site_packages_of(env) {
        for rel in site_packages_dirs {
            early.push((FoundVia::SitePackages, sp.join(rel).join(leaf)));
        }
    }
    let (roots, warnings) = roots(env, product_vars);
    for w in warnings {
        crate::warn(w);
    }
    let triple = format!("targets/{}-linux", std::env::consts::ARCH);
    let mut late = Vec::new();
    let add = |list: &mut Candidates, rule: FoundVia, root: &Path| {
        for rel in anchor_dirs {
            list.push((rule, root.join(rel).join(leaf)));
            if rel.starts_with("include") {
                list.push((rule, root.join(&triple).join(rel).join(leaf)));
            }
        }
    };
    for (rule, root) in roots {
        add(&mut early, rule, &root);
    }
    add(&mut late, FoundVia::SystemCtkRoot, &env.default_ctk_root);
    (early, late)
}

/// Finds the folder that holds the headers of `name` (`"cudart"` holds `cuda_runtime.h`,
/// `"nvrtc"` holds `nvrtc.h`, `"cccl"` holds `cuda/std/version`, ...).
pub fn locate_nvidia_header_directory(name: &str) -> Result<LocatedFile, NotFoundError> {
    locate_header_in(name, &Environment::from_process())
}

/// [`locate_nvidia_header_directory`], as `cuda.pathfinder`'s `find_nvidia_header_directory`:
/// the folder, or `None`.
pub fn find_nvidia_header_directory(name: &str) -> Option<PathBuf> {
    locate_nvidia_header_directory(name).ok().map(|l| l.abs_path)
}

pub(crate) fn locate_header_in(name: &str, env: &Environment) -> Result<LocatedFile, NotFoundError> {
    let Some(spec) = HEADERS.iter().find(|h| h.name == name) else {
        return Err(unknown("header directory", name, HEADERS.iter().map(|h| h.name)));
    };
    let (early, late) = candidates(
        env,
        spec.site_packages_dirs,
        spec.anchor_dirs,
        spec.install_root_vars,
        "",
    );
    let hint = format!(
        "To fix: install the wheel or toolkit component that ships {}, or set CUDA_PATH.",
        spec.marker
    );
    let mut found = first_match(
        "header directory",
        name,
        early,
        late,
        |dir| {
            if dir.join(spec.marker).is_file() {
                Ok(())
            } else if dir.is_dir() {
                Err(format!("no {} there", spec.marker))
            } else {
                Err("no such folder".into())
            }
        },
        hint,
    )?;
    // Joined with "" the paths end in a separator; report the folder itself.
    found.abs_path = found.abs_path.components().collect();
    Ok(found)
}

/// Finds the tool `name` (`"nvcc"`, `"ptxas"`, `"compute-sanitizer"`, ...). Only executable files
/// count; the current folder is never searched.
pub fn find_nvidia_binary_utility(name: &str) -> Result<LocatedFile, NotFoundError> {
    find_binary_in(name, &Environment::from_process())
}

pub(crate) fn find_binary_in(name: &str, env: &Environment) -> Result<LocatedFile, NotFoundError> {
    if !SUPPORTED_BINARY_UTILITIES.contains(&name) {
        return Err(unknown("tool", name, SUPPORTED_BINARY_UTILITIES.iter().copied()));
    }
    let wheel_dirs = [
        "nvidia/cu13/bin",
        "nvidia/cuda_nvcc/bin",
        "nvidia/nsight_systems/bin",
        "nvidia/nsight_compute/bin",
    ];
    let (early, late) = candidates(env, &wheel_dirs, &["bin", "compute-sanitizer"], &[], name);
    first_match(
        "tool",
        name,
        early,
        late,
        is_executable,
        "To fix: install the CUDA toolkit (or the wheel that ships the tool) and set CUDA_PATH.".into(),
    )
}

fn is_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        Ok(m) if m.is_file() => Err("not executable".into()),
        Ok(_) => Err("not a file".into()),
        Err(_) => Err("no such file".into()),
    }
}

fn is_file(path: &Path) -> Result<(), String> {
    if path.is_file() {
        Ok(())
    } else {
        Err("no such file".into())
    }
}

/// Finds a bitcode library: `"device"` is `libdevice.10.bc`, which NVVM links for math functions.
pub fn find_bitcode_lib(name: &str) -> Result<LocatedFile, NotFoundError> {
    find_bitcode_in(name, &Environment::from_process())
}

pub(crate) fn find_bitcode_in(name: &str, env: &Environment) -> Result<LocatedFile, NotFoundError> {
    let Some((_, file)) = SUPPORTED_BITCODE_LIBS.iter().find(|(n, _)| *n == name) else {
        return Err(unknown(
            "bitcode library",
            name,
            SUPPORTED_BITCODE_LIBS.iter().map(|(n, _)| *n),
        ));
    };
    let (early, late) = candidates(
        env,
        &["nvidia/cu13/nvvm/libdevice", "nvidia/cuda_nvcc/nvvm/libdevice"],
        &["nvvm/libdevice"],
        &[],
        file,
    );
    first_match("bitcode library", name, early, late, is_file, "To fix: `pip install nvidia-nvvm` (CUDA 13) or `pip install nvidia-cuda-nvcc-cu12`, or install the CUDA toolkit and set CUDA_PATH.".into())
}

/// Finds a static library: `"cudadevrt"` is `libcudadevrt.a`, needed to link relocatable device
/// code that uses dynamic parallelism.
pub fn find_static_lib(name: &str) -> Result<LocatedFile, NotFoundError> {
    find_static_in(name, &Environment::from_process())
}

pub(crate) fn find_static_in(name: &str, env: &Environment) -> Result<LocatedFile, NotFoundError> {
    let Some((_, file)) = SUPPORTED_STATIC_LIBS.iter().find(|(n, _)| *n == name) else {
        return Err(unknown(
            "static library",
            name,
            SUPPORTED_STATIC_LIBS.iter().map(|(n, _)| *n),
        ));
    };
    let (early, late) = candidates(
        env,
        &["nvidia/cu13/lib", "nvidia/cuda_runtime/lib"],
        &["lib64", "lib"],
        &[],
        file,
    );
    first_match(
        "static library",
        name,
        early,
        late,
        is_file,
        "To fix: `pip install nvidia-cuda-runtime` (CUDA 13) or install the CUDA toolkit and set CUDA_PATH.".into(),
    )
}

fn unknown<'a>(kind: &'static str, name: &str, known: impl Iterator<Item = &'a str>) -> NotFoundError {
    NotFoundError {
        kind,
        name: name.to_string(),
        attempts: Vec::new(),
        hint: format!(
            "\"{name}\" is not a {kind} cuda-pathfinder knows; known names: {}",
            known.collect::<Vec<_>>().join(", ")
        ),
    }
}
