//! What the search reads from the environment: variables, the platform, the Python
//! site-packages folders, and `CUDA_PATH`/`CUDA_HOME` (cached for the process, as
//! `cuda.pathfinder` does).

use crate::platform::Platform;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
    "LD_LIBRARY_PATH",
    "PROGRAMW6432",
    "PROGRAMFILES",
];

/// What the search reads from the environment, captured once so tests can supply their own.
#[derive(Debug, Clone)]
pub(crate) struct Environment {
    pub(crate) vars: HashMap<String, String>,
    /// Which platform's names and folders to search for.
    pub(crate) platform: Platform,
    /// The last resort after every rule of `cuda.pathfinder` (this crate's addition):
    /// `/usr/local/cuda` on Linux, nothing on Windows.
    pub(crate) default_ctk_root: Option<PathBuf>,
    /// The system loader's cache (`/etc/ld.so.cache`), read by the toolkit-root canary.
    pub(crate) ld_so_cache: Option<PathBuf>,
    /// The folders the system loader searches last (`/lib64`, `/usr/lib64`, ...).
    pub(crate) loader_default_dirs: Vec<PathBuf>,
}

impl Default for Environment {
    fn default() -> Self {
        Environment {
            vars: HashMap::new(),
            platform: Platform::Linux,
            default_ctk_root: Some(PathBuf::from("/usr/local/cuda")),
            ld_so_cache: None,
            loader_default_dirs: Vec::new(),
        }
    }
}

impl Environment {
    /// This process's environment. `CUDA_PATH`/`CUDA_HOME` come from [`get_cuda_path_or_home`]'s
    /// cache, so they are read once per process (until [`crate::cache_clear`]).
    pub(crate) fn from_process() -> Result<Self, crate::UnsupportedArchError> {
        let platform = Platform::current()?;
        let mut vars: HashMap<String, String> = ENV_VARS
            .iter()
            .filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
            .collect();
        vars.remove("CUDA_HOME");
        match get_cuda_path_or_home() {
            Some(root) => vars.insert("CUDA_PATH".into(), root.display().to_string()),
            None => vars.remove("CUDA_PATH"),
        };
        let linux = platform == Platform::Linux;
        let multiarch = format!("{}-linux-gnu", std::env::consts::ARCH);
        Ok(Environment {
            vars,
            platform,
            default_ctk_root: linux.then(|| PathBuf::from("/usr/local/cuda")),
            ld_so_cache: linux.then(|| PathBuf::from("/etc/ld.so.cache")),
            loader_default_dirs: if linux {
                [
                    "/lib64".to_string(),
                    "/usr/lib64".into(),
                    format!("/lib/{multiarch}"),
                    format!("/usr/lib/{multiarch}"),
                    "/lib".into(),
                    "/usr/lib".into(),
                ]
                .iter()
                .map(PathBuf::from)
                .collect()
            } else {
                Vec::new()
            },
        })
    }

    #[cfg(test)]
    pub(crate) fn with(mut self, name: &str, value: impl AsRef<Path>) -> Self {
        self.vars.insert(name.to_string(), value.as_ref().display().to_string());
        self
    }

    /// A variable's value; empty values count as unset.
    pub(crate) fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// A variable as a path; empty values count as unset.
    pub(crate) fn path(&self, name: &str) -> Option<PathBuf> {
        self.var(name).map(PathBuf::from)
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

    /// The conda environment's root for libraries: `$CONDA_PREFIX` on Linux,
    /// `%CONDA_PREFIX%\Library` on Windows.
    pub(crate) fn conda_anchor(&self) -> Option<PathBuf> {
        let prefix = self.path("CONDA_PREFIX")?;
        Some(if self.platform.is_windows() {
            prefix.join("Library")
        } else {
            prefix
        })
    }

    /// Windows: the Program Files folder (`%PROGRAMW6432%`, else `%PROGRAMFILES%`).
    pub(crate) fn program_files(&self) -> Option<PathBuf> {
        self.path("PROGRAMW6432").or_else(|| self.path("PROGRAMFILES"))
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

static CUDA_PATH_OR_HOME: Mutex<Option<Option<PathBuf>>> = Mutex::new(None);

/// The toolkit root the environment names: `$CUDA_PATH`, else `$CUDA_HOME` (empty values count
/// as unset; a warning in [`crate::warnings`] when both are set and differ). Read once and cached
/// for the life of the process, as `cuda.pathfinder`'s `get_cuda_path_or_home` is;
/// [`crate::cache_clear`] forgets it.
pub fn get_cuda_path_or_home() -> Option<PathBuf> {
    let mut cached = CUDA_PATH_OR_HOME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(value) = cached.as_ref() {
        return value.clone();
    }
    let mut env = Environment::default();
    for name in ["CUDA_PATH", "CUDA_HOME"] {
        if let Ok(value) = std::env::var(name) {
            env.vars.insert(name.to_string(), value);
        }
    }
    let (root, warning) = env.cuda_root();
    if let Some(w) = warning {
        crate::warn(w);
    }
    *cached = Some(root.clone());
    root
}

/// Forgets the cached [`get_cuda_path_or_home`].
pub(crate) fn clear_cuda_path_cache() {
    *CUDA_PATH_OR_HOME.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

/// The Python site-packages folders of the active environment: `$VIRTUAL_ENV`, `$CONDA_PREFIX`,
/// the user site (`~/.local/lib/python3*/site-packages`), then the environments of the `python3`
/// and `python` found on `PATH` (no interpreter is run).
pub fn site_packages_dirs() -> Vec<PathBuf> {
    match Environment::from_process() {
        Ok(env) => site_packages_of(&env),
        Err(_) => Vec::new(),
    }
}

pub(crate) fn site_packages_of(env: &Environment) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    prefixes.extend(env.path("VIRTUAL_ENV"));
    prefixes.extend(env.path("CONDA_PREFIX"));
    if !env.platform.is_windows() {
        prefixes.extend(env.path("HOME").map(|h| h.join(".local")));
    }
    prefixes.extend(interpreter_prefixes(env));
    let mut dirs = Vec::new();
    let mut add = |dir: PathBuf| {
        if dir.is_dir() && !dirs.contains(&dir) {
            dirs.push(dir);
        }
    };
    for prefix in prefixes {
        if env.platform.is_windows() {
            add(prefix.join("Lib/site-packages"));
            continue;
        }
        for python in python_dirs(&prefix.join("lib")) {
            for leaf in ["site-packages", "dist-packages"] {
                add(python.join(leaf));
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
    let (names, levels): (&[&str], usize) = if env.platform.is_windows() {
        (&["python.exe"], 1)
    } else {
        (&["python3", "python"], 2)
    };
    for dir in path.split(env.platform.path_list_separator()).map(Path::new) {
        for name in names {
            let exe = dir.join(name);
            if !exe.is_file() {
                continue;
            }
            // A venv's interpreter is in <venv>/bin (Scripts on Windows), beside pyvenv.cfg above.
            if let Some(prefix) = dir.parent() {
                if prefix.join("pyvenv.cfg").is_file() && !out.iter().any(|p: &PathBuf| p == prefix) {
                    out.push(prefix.to_path_buf());
                }
            }
            let real = exe.canonicalize().ok();
            if let Some(prefix) = real.as_deref().and_then(|e| e.ancestors().nth(levels)) {
                if !out.iter().any(|p| p == prefix) {
                    out.push(prefix.to_path_buf());
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
