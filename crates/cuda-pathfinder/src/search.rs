//! The search cascade.

use crate::catalog::{LibDescriptor, PackagedWith};
use crate::loader;
use crate::{Attempt, DynamicLibNotFoundError, LoadedDl};
use std::fmt;
use std::path::{Path, PathBuf};

/// The rule that found a library (`cuda.pathfinder`'s `found_via`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FoundVia {
    /// Already loaded in the process by someone else.
    AlreadyLoaded,
    /// An NVIDIA wheel in a Python site-packages folder.
    SitePackages,
    /// `$CONDA_PREFIX`.
    Conda,
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

/// What the search reads from the environment, captured once so tests can supply their own.
#[derive(Debug, Clone, Default)]
pub(crate) struct Environment {
    pub virtual_env: Option<PathBuf>,
    pub conda_prefix: Option<PathBuf>,
    pub home: Option<PathBuf>,
    pub cuda_path: Option<PathBuf>,
    pub cuda_home: Option<PathBuf>,
    pub default_ctk_root: PathBuf,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

impl Environment {
    pub(crate) fn from_process() -> Self {
        Environment {
            virtual_env: env_path("VIRTUAL_ENV"),
            conda_prefix: env_path("CONDA_PREFIX"),
            home: env_path("HOME"),
            cuda_path: env_path("CUDA_PATH"),
            cuda_home: env_path("CUDA_HOME"),
            default_ctk_root: PathBuf::from("/usr/local/cuda"),
        }
    }

    /// `$CUDA_PATH`, else `$CUDA_HOME` (empty values count as unset).
    fn cuda_root(&self) -> Option<&Path> {
        self.cuda_path.as_deref().or(self.cuda_home.as_deref())
    }
}

/// The Python site-packages folders of the active environment: `$VIRTUAL_ENV`, then
/// `$CONDA_PREFIX`, then the user site (`~/.local/lib/python3*/site-packages`).
pub fn site_packages_dirs() -> Vec<PathBuf> {
    site_packages_of(&Environment::from_process())
}

fn site_packages_of(env: &Environment) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let roots = [
        env.virtual_env.clone(),
        env.conda_prefix.clone(),
        env.home.as_ref().map(|h| h.join(".local")),
    ];
    for root in roots.into_iter().flatten() {
        for dir in python_dirs(&root.join("lib")) {
            let sp = dir.join("site-packages");
            if sp.is_dir() && !dirs.contains(&sp) {
                dirs.push(sp);
            }
        }
    }
    dirs
}

/// `lib/python3*` below `lib`, newest Python first.
fn python_dirs(lib: &Path) -> Vec<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let minor = name.strip_prefix("python3.")?.parse().ok()?;
            Some((minor, e.path()))
        })
        .collect();
    found.sort_by_key(|(minor, _)| std::cmp::Reverse(*minor));
    found.into_iter().map(|(_, p)| p).collect()
}

/// Candidate files, each with the rule that proposed it, in search order.
pub(crate) type Candidates = Vec<(FoundVia, PathBuf)>;

/// The files the search would try, in order, before the system loader and after it.
pub(crate) fn file_candidates(desc: &LibDescriptor, env: &Environment) -> (Candidates, Candidates) {
    let mut early = Vec::new();
    let mut late = Vec::new();
    if desc.packaged_with == PackagedWith::Driver {
        return (early, late);
    }
    for sp in site_packages_of(env) {
        for rel in desc.site_packages_dirs {
            for soname in desc.sonames {
                early.push((FoundVia::SitePackages, sp.join(rel).join(soname)));
            }
        }
    }
    if let Some(conda) = &env.conda_prefix {
        for rel in desc.anchor_dirs {
            for soname in desc.sonames {
                early.push((FoundVia::Conda, conda.join(rel).join(soname)));
            }
        }
    }
    if let Some(root) = env.cuda_root() {
        for rel in desc.anchor_dirs {
            for soname in desc.sonames {
                early.push((FoundVia::CudaPath, root.join(rel).join(soname)));
            }
        }
    }
    for rel in desc.anchor_dirs {
        for soname in desc.sonames {
            late.push((FoundVia::SystemCtkRoot, env.default_ctk_root.join(rel).join(soname)));
        }
    }
    (early, late)
}

pub(crate) fn load(desc: &LibDescriptor, env: &Environment) -> Result<LoadedDl, DynamicLibNotFoundError> {
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
    let (early, late) = file_candidates(desc, env);
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

fn not_found(desc: &LibDescriptor, attempts: Vec<Attempt>) -> DynamicLibNotFoundError {
    DynamicLibNotFoundError {
        libname: desc.name.to_string(),
        attempts,
        hint: format!("To fix: {}.", desc.install_hint),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::find;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"").unwrap();
    }

    #[test]
    fn wheel_then_conda_then_cuda_path_then_default_root() {
        let tmp = tempfile::tempdir().unwrap();
        let venv = tmp.path().join("venv");
        let conda = tmp.path().join("conda");
        let ctk = tmp.path().join("ctk");
        touch(&venv.join("lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13"));
        std::fs::create_dir_all(conda.join("lib")).unwrap();
        let env = Environment {
            virtual_env: Some(venv.clone()),
            conda_prefix: Some(conda.clone()),
            cuda_path: Some(ctk.clone()),
            default_ctk_root: tmp.path().join("usr-local-cuda"),
            ..Default::default()
        };
        let (early, late) = file_candidates(find("nvrtc").unwrap(), &env);
        let rules: Vec<FoundVia> = early.iter().map(|(r, _)| *r).collect();
        let first = |rule| rules.iter().position(|r| *r == rule).unwrap();
        assert!(first(FoundVia::SitePackages) < first(FoundVia::Conda));
        assert!(first(FoundVia::Conda) < first(FoundVia::CudaPath));
        assert_eq!(
            early[0].1,
            venv.join("lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13")
        );
        // newest soname first within a folder
        assert!(early[1].1.ends_with("nvidia/cu13/lib/libnvrtc.so.12"));
        assert!(late.iter().all(|(r, _)| *r == FoundVia::SystemCtkRoot));
    }

    #[test]
    fn cuda_path_wins_over_cuda_home() {
        let env = Environment {
            cuda_path: Some("/a".into()),
            cuda_home: Some("/b".into()),
            ..Default::default()
        };
        let (early, _) = file_candidates(find("cudart").unwrap(), &env);
        assert!(early.iter().all(|(_, p)| p.starts_with("/a")));
        let env = Environment {
            cuda_home: Some("/b".into()),
            ..Default::default()
        };
        let (early, _) = file_candidates(find("cudart").unwrap(), &env);
        assert!(early[0].1.starts_with("/b/lib64"));
    }

    #[test]
    fn nvvm_lives_below_nvvm_lib64_in_a_toolkit() {
        let env = Environment {
            cuda_path: Some("/ctk".into()),
            ..Default::default()
        };
        let (early, _) = file_candidates(find("nvvm").unwrap(), &env);
        assert_eq!(early[0].1, PathBuf::from("/ctk/nvvm/lib64/libnvvm.so.4"));
    }

    #[test]
    fn driver_libraries_are_never_looked_for_in_files() {
        let env = Environment {
            virtual_env: Some("/venv".into()),
            cuda_path: Some("/ctk".into()),
            default_ctk_root: "/usr/local/cuda".into(),
            ..Default::default()
        };
        let (early, late) = file_candidates(find("cuda").unwrap(), &env);
        assert!(early.is_empty() && late.is_empty());
    }

    #[test]
    fn empty_files_are_rejected_with_the_loader_message() {
        let tmp = tempfile::tempdir().unwrap();
        touch(&tmp.path().join("ctk/lib64/libcufile.so.0"));
        let env = Environment {
            cuda_path: Some(tmp.path().join("ctk")),
            default_ctk_root: tmp.path().join("none"),
            ..Default::default()
        };
        let desc = find("cufile").unwrap();
        // Only meaningful where the system has no libcufile of its own.
        if loader::open("libcufile.so.0").is_ok() {
            return;
        }
        let err = load(desc, &env).unwrap_err();
        let tried = err
            .attempts
            .iter()
            .find(|a| a.candidate.ends_with("ctk/lib64/libcufile.so.0"))
            .unwrap();
        assert_eq!(tried.rule, FoundVia::CudaPath);
        assert_ne!(tried.rejected_because, "no such file");
        assert!(err.to_string().contains("pip install nvidia-cufile"), "{err}");
    }
}
