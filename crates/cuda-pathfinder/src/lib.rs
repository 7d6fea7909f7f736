//! Find CUDA libraries on disk the way NVIDIA's `cuda.pathfinder` does, and explain the answer.
//!
//! [`load_nvidia_dynamic_lib`] opens a CUDA library by its short name (`"nvrtc"`, `"cuda"`, ...)
//! after searching, in order:
//!
//! 1. the process itself (a library some other code already loaded),
//! 2. the NVIDIA wheels in Python site-packages (`nvidia/cu13/lib`, then the CUDA 12 per-component
//!    folders) of `$VIRTUAL_ENV`, `$CONDA_PREFIX`, the user site and the Python interpreters on
//!    `PATH` (found without running them),
//! 3. a conda environment (`$CONDA_PREFIX/lib`),
//! 4. the product's own root variable where it has one (`CUDNN_PATH`, `NCCL_HOME`),
//! 5. the toolkit named by `$CUDA_PATH`, else `$CUDA_HOME` (with a warning when they differ),
//! 6. the system loader (`dlopen` of the soname: `LD_LIBRARY_PATH`, the ld.so cache),
//! 7. `/usr/local/cuda`.
//!
//! Driver libraries (`cuda`, `nvml`) come from the process or the system loader only, as the
//! driver installs them. Every result is cached for the life of the process and the handle is
//! never closed. When nothing is found, the error lists every place searched and why each
//! candidate was rejected, and says how to install the library.
//!
//! Headers ([`locate_nvidia_header_directory`]), tools ([`find_nvidia_binary_utility`]),
//! `libdevice.10.bc` ([`find_bitcode_lib`]) and `libcudadevrt.a` ([`find_static_lib`]) are found
//! the same way. [`toolkit_version_of`] reads which toolkit a file came from, and
//! [`compatibility_warnings`] says when found pieces come from different toolkits or need a newer
//! driver than the one installed. `cargo run -p cuda-pathfinder` prints all of it as a table.
//!
//! ```no_run
//! let nvrtc = cuda_pathfinder::load_nvidia_dynamic_lib("nvrtc")?;
//! println!("{} via {}", nvrtc.abs_path.as_deref().unwrap().display(), nvrtc.found_via);
//! # Ok::<(), cuda_pathfinder::DynamicLibNotFoundError>(())
//! ```

mod catalog;
mod loader;
mod locate;
mod search;
#[cfg(test)]
mod tests;
mod versions;

pub use catalog::{LibDescriptor, PackagedWith, DESCRIPTORS};
pub use locate::{
    find_bitcode_lib, find_nvidia_binary_utility, find_nvidia_header_directory, find_static_lib,
    locate_nvidia_header_directory, supported_headers, LocatedFile, SUPPORTED_BINARY_UTILITIES, SUPPORTED_BITCODE_LIBS,
    SUPPORTED_STATIC_LIBS,
};
pub use search::{site_packages_dirs, FoundVia};
pub use versions::{compatibility_warnings, driver_cuda_version, toolkit_version_of, ToolkitVersion};

use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// A library that is open in this process. It stays open for the life of the process.
#[derive(Debug)]
pub struct LoadedDl {
    /// The file that was opened, when the loader can tell.
    pub abs_path: Option<PathBuf>,
    /// Whether the library was already in the process before this search.
    pub was_already_loaded_from_elsewhere: bool,
    /// Which rule found it.
    pub found_via: FoundVia,
    handle: usize,
}

impl LoadedDl {
    /// The `dlopen` handle, for `dlsym`. Never pass it to `dlclose`: the library is shared by
    /// everything in the process that asked for it.
    pub fn handle(&self) -> *mut c_void {
        self.handle as *mut c_void
    }
}

/// One place looked at during a search, and what was found there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The rule that proposed the place.
    pub rule: FoundVia,
    /// The file, folder or soname tried.
    pub candidate: String,
    /// Why it was not used.
    pub rejected_because: String,
}

/// Something could not be found (or is not something `cuda-pathfinder` knows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFoundError {
    /// What was looked for: `"library"`, `"header directory"`, `"tool"`, `"bitcode library"`,
    /// `"static library"`.
    pub kind: &'static str,
    /// The name asked for.
    pub name: String,
    /// Every place searched, in order.
    pub attempts: Vec<Attempt>,
    /// What to do about it.
    pub hint: String,
}

/// `cuda.pathfinder`'s name for a library that cannot be found.
pub type DynamicLibNotFoundError = NotFoundError;

impl NotFoundError {
    /// The short name asked for (for libraries, `cuda.pathfinder`'s `libname`).
    pub fn libname(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for NotFoundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot find the CUDA {} \"{}\"", self.kind, self.name)?;
        if self.attempts.is_empty() {
            write!(f, ": nothing was searched")?;
        } else {
            write!(f, "; searched:")?;
            for a in &self.attempts {
                write!(f, "\n  - [{}] {}: {}", a.rule, a.candidate, a.rejected_because)?;
            }
        }
        if !self.hint.is_empty() {
            write!(f, "\n{}", self.hint)?;
        }
        Ok(())
    }
}

impl std::error::Error for NotFoundError {}

/// The short names [`load_nvidia_dynamic_lib`] accepts.
pub fn supported_libnames() -> impl Iterator<Item = &'static str> {
    DESCRIPTORS.iter().map(|d| d.name)
}

static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn warn(message: String) {
    #[cfg(feature = "tracing")]
    tracing::warn!(message = %message, "cuda-pathfinder");
    let mut warnings = WARNINGS.lock().unwrap_or_else(|p| p.into_inner());
    if !warnings.contains(&message) {
        warnings.push(message);
    }
}

/// Warnings about the environment met while searching (such as `CUDA_PATH` and `CUDA_HOME`
/// naming different folders), each once.
pub fn warnings() -> Vec<String> {
    WARNINGS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

type Cache = Mutex<HashMap<&'static str, &'static OnceLock<Result<LoadedDl, NotFoundError>>>>;

/// Finds and opens the library `libname` (`"cudart"`, `"nvrtc"`, `"nvJitLink"`, `"nvvm"`,
/// `"cufile"`, `"cuda"`, `"nvml"`, ...), after the libraries it depends on, searching as the
/// crate documentation describes.
///
/// The answer, found or not, is cached: later calls return the same result without searching.
pub fn load_nvidia_dynamic_lib(libname: &str) -> Result<&'static LoadedDl, NotFoundError> {
    let Some(desc) = catalog::find(libname) else {
        return Err(NotFoundError {
            kind: "library",
            name: libname.to_string(),
            attempts: Vec::new(),
            hint: format!(
                "\"{libname}\" is not a library cuda-pathfinder knows; known names: {}",
                supported_libnames().collect::<Vec<_>>().join(", ")
            ),
        });
    };
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cell = {
        let mut map = CACHE
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *map.entry(desc.name)
            .or_insert_with(|| Box::leak(Box::new(OnceLock::new())))
    };
    let mut searched = false;
    let found = cell.get_or_init(|| {
        searched = true;
        search::load(desc, &search::Environment::from_process())
    });
    // Reported after the search, outside the cache's initialisation (a subscriber that loads a
    // library itself must not re-enter it), once per library.
    #[cfg(feature = "tracing")]
    if searched {
        report(desc.name, found);
    }
    #[cfg(not(feature = "tracing"))]
    let _ = searched;
    found.as_ref().map_err(Clone::clone)
}

/// The search's outcome as `tracing` events: where the library was found, or every candidate
/// rejected and why.
#[cfg(feature = "tracing")]
fn report(library: &str, found: &Result<LoadedDl, NotFoundError>) {
    match found {
        Ok(dl) => tracing::debug!(
            library,
            path = ?dl.abs_path,
            via = dl.found_via.as_str(),
            already_loaded = dl.was_already_loaded_from_elsewhere,
            "cuda-pathfinder found a library"
        ),
        Err(e) => {
            for a in &e.attempts {
                tracing::debug!(
                    library,
                    candidate = %a.candidate,
                    via = a.rule.as_str(),
                    rejected_because = %a.rejected_because,
                    "cuda-pathfinder rejected a candidate"
                );
            }
            tracing::debug!(library, hint = %e.hint, "cuda-pathfinder found no library");
        }
    }
}
