//! Headers, tools, bitcode and static libraries: found in the wheels, conda, the product's root
//! variable, `CUDA_PATH`/`CUDA_HOME`, the toolkit-root canary's toolkit, system folders and
//! `/usr/local/cuda`, in that order. These are the searches without guard rails; the public
//! functions in the crate root run them through [`crate::CompatibilityGuardRails`].

use crate::catalog::PackagedWith;
use crate::env::{site_packages_of, Environment};
use crate::error::{Attempt, NotFoundCause, NotFoundError};
use crate::headers::{FileSpec, HeaderSpec, BITCODE, HEADERS, STATIC, TOOLS};
use crate::loader::Loader;
use crate::platform::{glob_dirs, Platform};
use crate::search::FoundVia;
use std::path::{Path, PathBuf};

/// A file or folder that was found, the rule that found it, and what was tried before it
/// (`cuda.pathfinder`'s `LocatedHeaderDir`, `LocatedBitcodeLib`, `LocatedStaticLib`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocatedFile {
    /// The name asked for.
    pub name: String,
    /// Where it is.
    pub abs_path: PathBuf,
    /// Which rule found it.
    pub found_via: FoundVia,
    /// The places tried before it, in order, and why each was passed over.
    pub searched: Vec<Attempt>,
}

impl LocatedFile {
    /// The file name (`libdevice.10.bc`), or the folder's name for a header directory.
    pub fn filename(&self) -> String {
        self.abs_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// `cuda.pathfinder`'s name for a located header folder.
pub type LocatedHeaderDir = LocatedFile;
/// `cuda.pathfinder`'s name for a located bitcode library.
pub type LocatedBitcodeLib = LocatedFile;
/// `cuda.pathfinder`'s name for a located static library.
pub type LocatedStaticLib = LocatedFile;

/// The header components [`crate::locate_nvidia_header_directory`] knows, with the header that
/// marks each folder (`("nvrtc", "nvrtc.h")`), on every platform.
pub fn supported_headers() -> impl Iterator<Item = (&'static str, &'static str)> {
    HEADERS.iter().map(|h| (h.name, h.marker))
}

/// The toolkit's header components and their marker headers (`SUPPORTED_HEADERS_CTK`).
pub fn supported_headers_ctk() -> impl Iterator<Item = (&'static str, &'static str)> {
    HEADERS
        .iter()
        .filter(|h| h.packaged_with == PackagedWith::Toolkit)
        .map(|h| (h.name, h.marker))
}

/// The tools [`crate::find_nvidia_binary_utility`] knows.
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

/// The bitcode libraries [`crate::find_bitcode_lib`] knows and their files (Linux names).
pub static SUPPORTED_BITCODE_LIBS: &[(&str, &str)] = &[
    ("device", "libdevice.10.bc"),
    ("nccl_device", "libnccl_device.bc"),
    ("nvshmem_device", "libnvshmem_device.bc"),
];

/// The static libraries [`crate::find_static_lib`] knows: `cudadevrt` is `libcudadevrt.a`
/// (`cudadevrt.lib` on Windows).
pub static SUPPORTED_STATIC_LIBS: &[(&str, &str)] = &[("cudadevrt", "libcudadevrt.a")];

/// Who ships an item and its guard-rail tags: `(kind, name)` with kind `"header directory"`,
/// `"tool"`, `"bitcode library"` or `"static library"`.
pub(crate) fn item_metadata(kind: &str, name: &str) -> Option<(PackagedWith, &'static [&'static str])> {
    match kind {
        "header directory" => HEADERS
            .iter()
            .find(|h| h.name == name)
            .map(|h| (h.packaged_with, h.companion_tags)),
        "tool" => TOOLS
            .iter()
            .find(|t| t.name == name)
            .map(|t| (t.packaged_with, t.companion_tags)),
        "bitcode library" => BITCODE
            .iter()
            .find(|t| t.name == name)
            .map(|t| (t.packaged_with, t.companion_tags)),
        "static library" => STATIC
            .iter()
            .find(|t| t.name == name)
            .map(|t| (t.packaged_with, t.companion_tags)),
        _ => None,
    }
}

/// Candidates in order, and in their place the steps that could not propose any (why).
type Steps = Vec<Result<(FoundVia, PathBuf), Attempt>>;

/// The first candidate that `accept`s, or the list of every one tried.
fn first_match(
    kind: &'static str,
    name: &str,
    list: Steps,
    accept: impl Fn(&Path) -> Result<(), String>,
    hint: String,
) -> Result<LocatedFile, NotFoundError> {
    let mut searched = Vec::new();
    for step in list {
        let (rule, path) = match step {
            Ok(candidate) => candidate,
            Err(note) => {
                searched.push(note);
                continue;
            }
        };
        match accept(&path) {
            Ok(()) => {
                return Ok(LocatedFile {
                    name: name.to_string(),
                    abs_path: path,
                    found_via: rule,
                    searched,
                });
            }
            Err(why) => searched.push(Attempt {
                rule,
                candidate: path.display().to_string(),
                rejected_because: why,
            }),
        }
    }
    Err(NotFoundError {
        kind,
        name: name.to_string(),
        cause: NotFoundCause::Missing,
        attempts: searched,
        hint,
    })
}

/// The roots after the wheels: conda, the product's variables, `CUDA_PATH`/`CUDA_HOME`, and with
/// `toolkit_roots` the canary's toolkit and `/usr/local/cuda` (the canary's failure, in its place).
fn roots(
    env: &Environment,
    loader: &dyn Loader,
    product_vars: &'static [&'static str],
    toolkit_roots: bool,
) -> Vec<Result<(FoundVia, PathBuf), Attempt>> {
    let mut out = Vec::new();
    out.extend(env.conda_anchor().map(|c| Ok((FoundVia::Conda, c))));
    for var in product_vars {
        out.extend(env.path(var).map(|r| Ok((FoundVia::InstallRootVar(var), r))));
    }
    let (cuda, warning) = env.cuda_root();
    if let Some(w) = warning {
        crate::warn(w);
    }
    out.extend(cuda.map(|r| Ok((FoundVia::CudaPath, r))));
    if toolkit_roots {
        out.push(match crate::canary::ctk_root(env, loader) {
            Ok((root, _)) => Ok((FoundVia::SystemCtkRoot, root)),
            Err(why) => Err(Attempt {
                rule: FoundVia::SystemCtkRoot,
                candidate: "toolkit-root canary".into(),
                rejected_because: why,
            }),
        });
        out.extend(env.default_ctk_root.clone().map(|r| Ok((FoundVia::DefaultCtkRoot, r))));
    }
    out
}

fn unavailable(kind: &'static str, name: &str) -> NotFoundError {
    NotFoundError {
        kind,
        name: name.to_string(),
        cause: NotFoundCause::NotAvailable,
        attempts: Vec::new(),
        hint: format!("\"{name}\" does not exist on Windows"),
    }
}

/// The include folders to try below `root` for `spec`.
fn header_dirs(spec: &HeaderSpec, env: &Environment, rule: FoundVia, root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let targets = rule == FoundVia::Conda && spec.conda_targets_layout && env.platform == Platform::Linux;
    for rel in spec.anchor_dirs {
        let bases = if targets && *rel == "include" {
            glob_dirs(root, "targets/*/include")
        } else {
            vec![root.join(rel)]
        };
        for base in bases {
            out.extend(spec.include_subdirs.iter().map(|s| base.join(s)));
            if env.platform.is_windows() {
                out.extend(spec.include_subdirs_windows.iter().map(|s| base.join(s)));
            }
            out.push(base);
        }
    }
    out
}

pub(crate) fn locate_header_in(
    name: &str,
    env: &Environment,
    loader: &dyn Loader,
) -> Result<LocatedFile, NotFoundError> {
    let Some(spec) = HEADERS.iter().find(|h| h.name == name) else {
        return Err(unknown("header directory", name, HEADERS.iter().map(|h| h.name)));
    };
    if env.platform.is_windows() && !spec.available_on_windows {
        return Err(unavailable("header directory", name));
    }
    let mut list: Steps = Vec::new();
    for sp in site_packages_of(env) {
        for rel in spec.site_packages_dirs {
            list.extend(glob_dirs(&sp, rel).into_iter().map(|d| Ok((FoundVia::SitePackages, d))));
        }
    }
    let toolkit = spec.packaged_with == PackagedWith::Toolkit && spec.use_ctk_root_canary;
    for root in roots(env, loader, spec.install_root_vars, toolkit) {
        match root {
            Ok((rule, root)) => list.extend(header_dirs(spec, env, rule, &root).into_iter().map(|d| Ok((rule, d)))),
            Err(note) => list.push(Err(note)),
        }
    }
    if env.platform == Platform::Linux {
        for pattern in spec.system_install_dirs {
            let (base, rel) = pattern.split_once("/include").unwrap_or(("", pattern));
            let dirs = glob_dirs(Path::new(&format!("{base}/include")), rel.trim_start_matches('/'));
            list.extend(dirs.into_iter().map(|d| Ok((FoundVia::SystemInstallDir, d))));
        }
    }
    let hint = format!(
        "To fix: install the wheel or toolkit component that ships {}, or set CUDA_PATH.",
        spec.marker
    );
    first_match(
        "header directory",
        name,
        list,
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
    )
}

/// Candidates for a tool, bitcode or static library (`Err` when it does not exist on Windows).
fn file_candidates(spec: &FileSpec, env: &Environment, loader: &dyn Loader) -> Result<Steps, ()> {
    let windows = env.platform.is_windows();
    let file = if windows {
        spec.windows_file.ok_or(())?
    } else {
        spec.file
    };
    let (wheel_dirs, rels) = if windows {
        (spec.site_packages_windows, spec.anchor_dirs_windows)
    } else {
        (spec.site_packages_dirs, spec.anchor_dirs)
    };
    let mut list: Steps = Vec::new();
    for sp in site_packages_of(env) {
        list.extend(
            crate::search::under(FoundVia::SitePackages, &sp, wheel_dirs, &[file])
                .into_iter()
                .map(Ok),
        );
    }
    for root in roots(env, loader, &[], spec.toolkit_roots) {
        match root {
            Ok((rule, root)) => list.extend(crate::search::under(rule, &root, rels, &[file]).into_iter().map(Ok)),
            Err(note) => list.push(Err(note)),
        }
    }
    Ok(list)
}

fn locate_file(
    kind: &'static str,
    specs: &[FileSpec],
    name: &str,
    env: &Environment,
    loader: &dyn Loader,
    accept: impl Fn(&Path) -> Result<(), String>,
    hint: &str,
) -> Result<LocatedFile, NotFoundError> {
    let Some(spec) = specs.iter().find(|s| s.name == name) else {
        return Err(unknown(kind, name, specs.iter().map(|s| s.name)));
    };
    let list = file_candidates(spec, env, loader).map_err(|()| unavailable(kind, name))?;
    first_match(kind, name, list, accept, hint.to_string())
}

pub(crate) fn find_binary_in(name: &str, env: &Environment, loader: &dyn Loader) -> Result<LocatedFile, NotFoundError> {
    let hint = "To fix: install the CUDA toolkit (or the wheel that ships the tool) and set CUDA_PATH.";
    // Windows has no executable bit: a file is enough there.
    let windows = env.platform.is_windows();
    let accept = |p: &Path| if windows { is_file(p) } else { is_executable(p) };
    locate_file("tool", TOOLS, name, env, loader, accept, hint)
}

#[cfg(unix)]
fn is_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        Ok(m) if m.is_file() => Err("not executable".into()),
        Ok(_) => Err("not a file".into()),
        Err(_) => Err("no such file".into()),
    }
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> Result<(), String> {
    is_file(path)
}

fn is_file(path: &Path) -> Result<(), String> {
    if path.is_file() {
        Ok(())
    } else {
        Err("no such file".into())
    }
}

pub(crate) fn find_bitcode_in(
    name: &str,
    env: &Environment,
    loader: &dyn Loader,
) -> Result<LocatedFile, NotFoundError> {
    let hint = match name {
        "nccl_device" => "To fix: `pip install nvidia-nccl-cu13` (or -cu12).",
        "nvshmem_device" => "To fix: `pip install nvidia-nvshmem-cu13` (or -cu12).",
        _ => "To fix: `pip install nvidia-nvvm` (CUDA 13) or `pip install nvidia-cuda-nvcc-cu12`, or install the CUDA toolkit and set CUDA_PATH.",
    };
    locate_file("bitcode library", BITCODE, name, env, loader, is_file, hint)
}

pub(crate) fn find_static_in(name: &str, env: &Environment, loader: &dyn Loader) -> Result<LocatedFile, NotFoundError> {
    let hint = "To fix: `pip install nvidia-cuda-runtime` (CUDA 13) or install the CUDA toolkit and set CUDA_PATH.";
    locate_file("static library", STATIC, name, env, loader, is_file, hint)
}

pub(crate) fn unknown<'a>(kind: &'static str, name: &str, known: impl Iterator<Item = &'a str>) -> NotFoundError {
    NotFoundError {
        kind,
        name: name.to_string(),
        cause: NotFoundCause::Unknown,
        attempts: Vec::new(),
        hint: format!(
            "\"{name}\" is not a {kind} cuda-pathfinder knows; known names: {}",
            known.collect::<Vec<_>>().join(", ")
        ),
    }
}
