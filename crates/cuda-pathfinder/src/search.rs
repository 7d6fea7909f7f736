//! The search cascade for dynamic libraries, and the places it shares with headers and tools.

use crate::catalog::{LibDescriptor, PackagedWith};
use crate::loader;
use crate::{Attempt, LoadedDl, NotFoundError};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The rule that found something (`cuda.pathfinder`'s `found_via`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FoundVia {
    /// Already loaded in the process by someone else.
    AlreadyLoaded,
    /// An NVIDIA wheel in a Python site-packages folder.
    SitePackages,
    /// `$CONDA_PREFIX`.
    Conda,
    /// A product's own install root variable (`CUDNN_PATH`, `NCCL_HOME`).
    InstallRootVar,
    /// `$CUDA_PATH` or `$CUDA_HOME`.
    CudaPath,
    /// The system loader (`dlopen` of the soname).
    SystemSearch,
    /// The default toolkit location, `/usr/local/cuda`.
    SystemCtkRoot,
}

impl FoundVia {
    /// The label `cuda.pathfinder` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            FoundVia::AlreadyLoaded => "was-already-loaded-from-elsewhere",
            FoundVia::SitePackages => "site-packages",
            FoundVia::Conda => "conda",
            FoundVia::InstallRootVar => "install-root-env-var",
            FoundVia::CudaPath => "CUDA_PATH",
            FoundVia::SystemSearch => "system-search",
            FoundVia::SystemCtkRoot => "system-ctk-root",
        }
    }
}

impl fmt::Display for FoundVia {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The environment variables the search reads.
pub(crate) const ENV_VARS: &[&str] = &[
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "HOME",
    "CUDA_PATH",
    "CUDA_HOME",
    "CUDNN_PATH",
    "NCCL_HOME",
    "PATH",
];

/// What the search reads from the environment, captured once so tests can supply their own.
#[derive(Debug, Clone)]
pub(crate) struct Environment {
    pub(crate) vars: HashMap<String, String>,
    /// Where the toolkit is when nothing says otherwise.
    pub default_ctk_root: PathBuf,
}

impl Default for Environment {
    fn default() -> Self {
        Environment {
            vars: HashMap::new(),
            default_ctk_root: PathBuf::from("/usr/local/cuda"),
        }
    }
}

impl Environment {
    pub(crate) fn from_process() -> Self {
        let vars = ENV_VARS
            .iter()
            .filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
            .collect();
        Environment {
            vars,
            ..Default::default()
        }
    }

    #[cfg(test)]
    pub(crate) fn with(mut self, name: &str, value: impl AsRef<Path>) -> Self {
        self.vars.insert(name.to_string(), value.as_ref().display().to_string());
        self
    }

    /// A variable as a path; empty values count as unset.
    pub(crate) fn path(&self, name: &str) -> Option<PathBuf> {
        self.vars.get(name).filter(|v| !v.is_empty()).map(PathBuf::from)
    }

    /// `$CUDA_PATH`, else `$CUDA_HOME`, with a warning when both are set and name different
    /// folders.
    pub(crate) fn cuda_root(&self) -> (Option<PathBuf>, Option<String>) {
        let (path, home) = (self.path("CUDA_PATH"), self.path("CUDA_HOME"));
        let warning = match (&path, &home) {
            (Some(p), Some(h)) if paths_differ(p, h) => Some(format!(
                "CUDA_PATH ({}) and CUDA_HOME ({}) name different folders; CUDA_PATH is used",
                p.display(),
                h.display()
            )),
            _ => None,
        };
        (path.or(home), warning)
    }
}

/// Whether two paths name different folders: textually after normalisation, then by identity.
fn paths_differ(a: &Path, b: &Path) -> bool {
    let normal = |p: &Path| p.components().collect::<PathBuf>();
    if normal(a) == normal(b) {
        return false;
    }
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x != y,
        _ => true,
    }
}

/// The Python site-packages folders of the active environment: `$VIRTUAL_ENV`, `$CONDA_PREFIX`,
/// the user site (`~/.local/lib/python3*/site-packages`), then the environments of the `python3`
/// and `python` found on `PATH` (no interpreter is run).
pub fn site_packages_dirs() -> Vec<PathBuf> {
    site_packages_of(&Environment::from_process())
}

pub(crate) fn site_packages_of(env: &Environment) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    prefixes.extend(env.path("VIRTUAL_ENV"));
    prefixes.extend(env.path("CONDA_PREFIX"));
    prefixes.extend(env.path("HOME").map(|h| h.join(".local")));
    prefixes.extend(interpreter_prefixes(env));
    let mut dirs = Vec::new();
    for prefix in prefixes {
        for python in python_dirs(&prefix.join("lib")) {
            for leaf in ["site-packages", "dist-packages"] {
                let dir = python.join(leaf);
                if dir.is_dir() && !dirs.contains(&dir) {
                    dirs.push(dir);
                }
            }
        }
    }
    dirs
}

/// The prefixes of the Python interpreters on `PATH`: a virtual environment's own (it has a
/// `pyvenv.cfg`), then the installation it runs from.
fn interpreter_prefixes(env: &Environment) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Some(path) = env.vars.get("PATH") else { return out };
    for dir in std::env::split_paths(path) {
        for name in ["python3", "python"] {
            let exe = dir.join(name);
            if !exe.is_file() {
                continue;
            }
            if let Some(prefix) = dir.parent() {
                if prefix.join("pyvenv.cfg").is_file() && !out.iter().any(|p: &PathBuf| p == prefix) {
                    out.push(prefix.to_path_buf());
                }
            }
            if let Some(prefix) = exe
                .canonicalize()
                .ok()
                .and_then(|e| Some(e.parent()?.parent()?.to_path_buf()))
            {
                if !out.contains(&prefix) {
                    out.push(prefix);
                }
            }
        }
    }
    out
}

/// `lib/python3*` below `lib`, newest Python first.
fn python_dirs(lib: &Path) -> Vec<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let minor = if name == "python3" {
                0
            } else {
                name.strip_prefix("python3.")?.parse().ok()?
            };
            Some((minor, e.path()))
        })
        .collect();
    found.sort_by_key(|(minor, _)| std::cmp::Reverse(*minor));
    found.into_iter().map(|(_, p)| p).collect()
}

/// The toolkit-like roots searched after the wheels, in order, with their rule: conda, the
/// product's own variables, `CUDA_PATH`/`CUDA_HOME`. (`/usr/local/cuda` comes after the system
/// loader.) Warnings found on the way are returned too.
pub(crate) fn roots(env: &Environment, product_vars: &[&str]) -> (Vec<(FoundVia, PathBuf)>, Vec<String>) {
    let mut roots = Vec::new();
    if let Some(conda) = env.path("CONDA_PREFIX") {
        roots.push((FoundVia::Conda, conda));
    }
    for var in product_vars {
        if let Some(root) = env.path(var) {
            roots.push((FoundVia::InstallRootVar, root));
        }
    }
    let (cuda, warning) = env.cuda_root();
    if let Some(cuda) = cuda {
        roots.push((FoundVia::CudaPath, cuda));
    }
    (roots, warning.into_iter().collect())
}

/// Candidate files, each with the rule that proposed it, in search order.
pub(crate) type Candidates = Vec<(FoundVia, PathBuf)>;

/// The files the search tries for a library, before the system loader and after it, and any
/// warnings about the environment.
pub(crate) fn file_candidates(desc: &LibDescriptor, env: &Environment) -> (Candidates, Candidates, Vec<String>) {
    let (mut early, mut late) = (Vec::new(), Vec::new());
    if desc.packaged_with == PackagedWith::Driver {
        return (early, late, Vec::new());
    }
    for sp in site_packages_of(env) {
        for rel in desc.site_packages_dirs {
            for soname in desc.sonames {
                early.push((FoundVia::SitePackages, sp.join(rel).join(soname)));
            }
        }
    }
    let (roots, warnings) = roots(env, desc.install_root_vars);
    for (rule, root) in roots {
        for rel in desc.anchor_dirs {
            for soname in desc.sonames {
                early.push((rule, root.join(rel).join(soname)));
            }
        }
    }
    for rel in desc.anchor_dirs {
        for soname in desc.sonames {
            late.push((FoundVia::SystemCtkRoot, env.default_ctk_root.join(rel).join(soname)));
        }
    }
    (early, late, warnings)
}

pub(crate) fn load(desc: &LibDescriptor, env: &Environment) -> Result<LoadedDl, NotFoundError> {
    let mut attempts = Vec::new();
    for dep in desc.dependencies {
        if let Err(e) = crate::load_nvidia_dynamic_lib(dep) {
            attempts.push(Attempt {
                rule: FoundVia::SystemSearch,
                candidate: format!("dependency {dep}"),
                rejected_because: e.to_string(),
            });
            return Err(not_found(desc, attempts));
        }
    }
    for soname in desc.sonames {
        if let Some(handle) = loader::already_loaded(soname) {
            return Ok(loaded(handle, FoundVia::AlreadyLoaded, true));
        }
    }
    let (early, late, warnings) = file_candidates(desc, env);
    for w in warnings {
        crate::warn(w);
    }
    let try_files = |list: Candidates, attempts: &mut Vec<Attempt>| -> Option<LoadedDl> {
        for (rule, path) in list {
            let shown = path.display().to_string();
            if !path.is_file() {
                attempts.push(Attempt {
                    rule,
                    candidate: shown,
                    rejected_because: "no such file".into(),
                });
                continue;
            }
            preload_companions(desc, &path);
            match loader::open(&shown) {
                Ok(handle) => return Some(loaded(handle, rule, false)),
                Err(e) => attempts.push(Attempt {
                    rule,
                    candidate: shown,
                    rejected_because: e,
                }),
            }
        }
        None
    };
    if let Some(found) = try_files(early, &mut attempts) {
        return Ok(found);
    }
    for soname in desc.sonames {
        match loader::open(soname) {
            Ok(handle) => return Ok(loaded(handle, FoundVia::SystemSearch, false)),
            Err(e) => attempts.push(Attempt {
                rule: FoundVia::SystemSearch,
                candidate: format!("dlopen(\"{soname}\")"),
                rejected_because: e,
            }),
        }
    }
    if let Some(found) = try_files(late, &mut attempts) {
        return Ok(found);
    }
    Err(not_found(desc, attempts))
}

/// The `nvidia-cuda-nvrtc 13.0.48` wheel ships `libnvrtc.so.13` without a RUNPATH, so its
/// builtins library is opened first from the same folder (failure is harmless).
fn preload_companions(desc: &LibDescriptor, path: &Path) {
    if desc.name != "nvrtc" {
        return;
    }
    let Some(dir) = path.parent() else { return };
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("libnvrtc-builtins.so.") {
            let _ = loader::open(&entry.path().display().to_string());
        }
    }
}

fn loaded(handle: loader::Handle, found_via: FoundVia, already: bool) -> LoadedDl {
    LoadedDl {
        abs_path: loader::path_of(&handle),
        was_already_loaded_from_elsewhere: already,
        found_via,
        handle: handle.0 as usize,
    }
}

fn not_found(desc: &LibDescriptor, attempts: Vec<Attempt>) -> NotFoundError {
    NotFoundError {
        kind: "library",
        name: desc.name.to_string(),
        attempts,
        hint: format!("To fix: {}.", desc.install_hint),
    }
}
