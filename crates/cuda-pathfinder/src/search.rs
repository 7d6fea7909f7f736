//! The search cascade for dynamic libraries, in `cuda.pathfinder`'s order: already loaded, the
//! wheels in site-packages, conda, the system loader (with the explicit `PATH` scan on Windows),
//! the product's own root variable, `CUDA_PATH`/`CUDA_HOME`, Program Files (Windows), the
//! toolkit-root canary (for the libraries that ask for it), and last this crate's addition,
//! `/usr/local/cuda`.

use crate::catalog::{LibDescriptor, PackagedWith};
use crate::env::{site_packages_of, Environment};
use crate::error::{Attempt, NotFoundCause, NotFoundError};
use crate::loader::{Loader, Opened};
use crate::platform::{check_available, glob_dirs, is_suppressed_dll, pe_matches_arch, Platform};
use crate::LoadedDl;
use std::fmt;
use std::path::{Path, PathBuf};

/// The rule that found something (`cuda.pathfinder`'s `found_via`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FoundVia {
    /// Already loaded in the process by someone else.
    AlreadyLoaded,
    /// An NVIDIA wheel in a Python site-packages folder.
    SitePackages,
    /// `$CONDA_PREFIX` (`%CONDA_PREFIX%\Library` on Windows).
    Conda,
    /// The system loader (`dlopen` of the soname; on Windows `LoadLibraryExW`, then `PATH`).
    SystemSearch,
    /// A product's own install root variable (`CUDNN_PATH`, `NCCL_HOME`), which names it.
    InstallRootVar(&'static str),
    /// `$CUDA_PATH` or `$CUDA_HOME`.
    CudaPath,
    /// Windows: a versioned install under Program Files (cuDNN).
    ProgramFiles,
    /// The toolkit the system loader's `cudart` belongs to (the toolkit-root canary).
    SystemCtkRoot,
    /// `/usr/local/cuda`, after every rule `cuda.pathfinder` has (this crate's addition).
    DefaultCtkRoot,
    /// A system include folder (`/usr/include/nvshmem_*`, `/usr/include` for cuDNN and NCCL).
    SystemInstallDir,
}

impl FoundVia {
    /// The label `cuda.pathfinder` uses (the variable's name for a product's root variable).
    pub fn as_str(self) -> &'static str {
        match self {
            FoundVia::AlreadyLoaded => "was-already-loaded-from-elsewhere",
            FoundVia::SitePackages => "site-packages",
            FoundVia::Conda => "conda",
            FoundVia::SystemSearch => "system-search",
            FoundVia::InstallRootVar(var) => var,
            FoundVia::CudaPath => "CUDA_PATH",
            FoundVia::ProgramFiles => "ProgramFiles",
            FoundVia::SystemCtkRoot => "system-ctk-root",
            FoundVia::DefaultCtkRoot => "default-ctk-root",
            FoundVia::SystemInstallDir => "supported_install_dir",
        }
    }
}

impl fmt::Display for FoundVia {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Candidate files, each with the rule that proposed it, in search order.
pub(crate) type Candidates = Vec<(FoundVia, PathBuf)>;

/// The library's file names on `platform`, newest first.
pub(crate) fn file_names(desc: &LibDescriptor, platform: Platform) -> &'static [&'static str] {
    match platform {
        Platform::Linux => desc.sonames,
        Platform::Windows(_) => desc.windows_dlls,
    }
}

fn anchor_dirs(desc: &LibDescriptor, platform: Platform) -> &'static [&'static str] {
    match platform {
        Platform::Linux => desc.anchor_dirs,
        Platform::Windows(arch) => desc.anchor_dirs_windows(arch),
    }
}

/// `names` in each folder `rel` (which may hold `*`) below `root`.
pub(crate) fn under(rule: FoundVia, root: &Path, rels: &[&str], names: &[&str]) -> Candidates {
    let mut out = Vec::new();
    for rel in rels {
        for dir in glob_dirs(root, rel) {
            out.extend(names.iter().map(|n| (rule, dir.join(n))));
        }
    }
    out
}

/// The wheel and conda candidates (`cuda.pathfinder`'s early steps).
pub(crate) fn early_candidates(desc: &LibDescriptor, env: &Environment) -> Candidates {
    let names = file_names(desc, env.platform);
    let wheel_dirs = match env.platform {
        Platform::Linux => desc.site_packages_dirs,
        Platform::Windows(arch) => desc.site_packages_windows(arch),
    };
    let mut out = Vec::new();
    for sp in site_packages_of(env) {
        out.extend(under(FoundVia::SitePackages, &sp, wheel_dirs, names));
    }
    if let Some(conda) = env.conda_anchor() {
        out.extend(under(FoundVia::Conda, &conda, anchor_dirs(desc, env.platform), names));
    }
    out
}

/// The candidates after the system loader (`cuda.pathfinder`'s late steps): product roots,
/// `CUDA_PATH`/`CUDA_HOME`, Program Files. Warnings about the environment are reported.
pub(crate) fn late_candidates(desc: &LibDescriptor, env: &Environment) -> Candidates {
    let names = file_names(desc, env.platform);
    let rels = anchor_dirs(desc, env.platform);
    let mut out = Vec::new();
    for var in desc.install_root_vars {
        if let Some(root) = env.path(var) {
            out.extend(under(FoundVia::InstallRootVar(var), &root, rels, names));
        }
    }
    let (cuda, warning) = env.cuda_root();
    if let Some(w) = warning {
        crate::warn(w);
    }
    if let Some(root) = cuda {
        out.extend(under(FoundVia::CudaPath, &root, rels, names));
    }
    if let (Platform::Windows(crate::WindowsArch::X64), Some(pf)) = (env.platform, env.program_files()) {
        for glob in desc.program_files_globs_windows {
            for root in glob_dirs(&pf, glob) {
                out.extend(under(FoundVia::ProgramFiles, &root, rels, names));
            }
        }
    }
    out
}

/// Why `path` cannot be the library, or `None` when it can.
fn reject(desc: &LibDescriptor, path: &Path, platform: Platform) -> Option<String> {
    if !path.is_file() {
        return Some("no such file".into());
    }
    let Platform::Windows(arch) = platform else { return None };
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if is_suppressed_dll(&file) {
        return Some("not the library (a companion DLL of the same prefix)".into());
    }
    let dir = path
        .parent()
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let qualified = ["x64", "x86_64", "arm64"].contains(&dir.as_str());
    if desc.requires_windows_binary_arch_check && !qualified && !pe_matches_arch(path, arch) {
        return Some(format!("not an {arch} PE image"));
    }
    None
}

/// One search: what was tried, and the loader to open with.
struct Search<'a> {
    desc: &'a LibDescriptor,
    env: &'a Environment,
    loader: &'a dyn Loader,
    attempts: Vec<Attempt>,
}

impl Search<'_> {
    fn note(&mut self, rule: FoundVia, candidate: String, why: String) {
        self.attempts.push(Attempt {
            rule,
            candidate,
            rejected_because: why,
        });
    }

    /// The first candidate that exists (and fits the platform), noting the others.
    fn first_file(&mut self, list: &[(FoundVia, PathBuf)]) -> Option<usize> {
        for (i, (rule, path)) in list.iter().enumerate() {
            match reject(self.desc, path, self.env.platform) {
                None => return Some(i),
                Some(why) => self.note(*rule, path.display().to_string(), why),
            }
        }
        None
    }

    /// Opens the first candidate that exists and loads, from `list`.
    fn open_first(&mut self, list: &[(FoundVia, PathBuf)]) -> Option<LoadedDl> {
        let mut rest = list;
        while let Some(i) = self.first_file(rest) {
            let (rule, path) = &rest[i];
            match self.loader.open(self.desc, path) {
                Ok(o) => return Some(self.loaded(o, *rule, false, Some(path))),
                Err(e) => self.note(*rule, path.display().to_string(), e),
            }
            rest = &rest[i + 1..];
        }
        None
    }

    fn system_search(&mut self) -> Option<LoadedDl> {
        for name in file_names(self.desc, self.env.platform) {
            match self.loader.system_search(self.desc, name) {
                Ok(o) => return Some(self.loaded(o, FoundVia::SystemSearch, false, None)),
                Err(e) => {
                    let call = if self.env.platform.is_windows() {
                        format!("LoadLibraryExW(\"{name}\")")
                    } else {
                        format!("dlopen(\"{name}\")")
                    };
                    self.note(FoundVia::SystemSearch, call, e);
                }
            }
        }
        None
    }

    fn loaded(&mut self, o: Opened, rule: FoundVia, already: bool, path: Option<&Path>) -> LoadedDl {
        LoadedDl {
            abs_path: o.path.or_else(|| path.map(Path::to_path_buf)),
            was_already_loaded_from_elsewhere: already,
            found_via: rule,
            handle: o.handle,
            searched: std::mem::take(&mut self.attempts),
        }
    }

    fn not_found(&mut self) -> NotFoundError {
        NotFoundError {
            kind: "library",
            name: self.desc.name.to_string(),
            cause: NotFoundCause::Missing,
            attempts: std::mem::take(&mut self.attempts),
            hint: format!("To fix: {}.", self.desc.install_hint),
        }
    }
}

/// Finds and opens `desc` as the crate documentation describes; `load_dep` loads a dependency
/// (through the cache, so each is loaded once).
pub(crate) fn load(
    desc: &LibDescriptor,
    env: &Environment,
    loader: &dyn Loader,
    load_dep: &dyn Fn(&str) -> Result<(), crate::Error>,
) -> Result<LoadedDl, NotFoundError> {
    check_available(desc, env.platform)?;
    let names = file_names(desc, env.platform);
    let mut s = Search {
        desc,
        env,
        loader,
        attempts: Vec::new(),
    };
    if desc.packaged_with == PackagedWith::Driver {
        if let Some(o) = loader.already_loaded(desc, names) {
            return Ok(s.loaded(o, FoundVia::AlreadyLoaded, true, None));
        }
        if let Some(found) = s.system_search() {
            return Ok(found);
        }
        return Err(s.not_found());
    }
    let early = early_candidates(desc, env);
    let hit = s.first_file(&early);
    let already = loader.already_loaded(desc, names);
    // Dependencies are loaded even when the library itself already is.
    for dep in desc.dependencies {
        if let Err(e) = load_dep(dep) {
            s.note(FoundVia::SystemSearch, format!("dependency {dep}"), e.to_string());
            return Err(s.not_found());
        }
    }
    for dep in desc.optional_dependencies {
        let _ = load_dep(dep);
    }
    if let Some(o) = already {
        return Ok(s.loaded(o, FoundVia::AlreadyLoaded, true, None));
    }
    if let Some(i) = hit {
        if let Some(found) = s.open_first(&early[i..]) {
            return Ok(found);
        }
    }
    if let Some(found) = s.system_search() {
        return Ok(found);
    }
    if env.platform.is_windows() {
        let path = env.var("PATH").unwrap_or_default().to_string();
        let scan: Candidates = crate::platform::windows_path_candidates(&path, names)
            .into_iter()
            .map(|p| (FoundVia::SystemSearch, p))
            .collect();
        if let Some(found) = s.open_first(&scan) {
            return Ok(found);
        }
    }
    if let Some(found) = s.open_first(&late_candidates(desc, env)) {
        return Ok(found);
    }
    if desc.ctk_root_canary {
        match crate::canary::ctk_root(env, loader) {
            Ok((root, _)) => {
                let list = under(FoundVia::SystemCtkRoot, &root, anchor_dirs(desc, env.platform), names);
                if let Some(found) = s.open_first(&list) {
                    return Ok(found);
                }
            }
            Err(why) => s.note(FoundVia::SystemCtkRoot, "toolkit-root canary".into(), why),
        }
    }
    if let Some(root) = &env.default_ctk_root {
        let list = under(FoundVia::DefaultCtkRoot, root, anchor_dirs(desc, env.platform), names);
        if let Some(found) = s.open_first(&list) {
            return Ok(found);
        }
    }
    Err(s.not_found())
}
