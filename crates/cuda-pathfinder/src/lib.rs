//! Find CUDA libraries on disk the way NVIDIA's `cuda.pathfinder` does, and explain the answer.
//!
//! [`load_nvidia_dynamic_lib`] opens a CUDA library by its short name (`"nvrtc"`, `"cuda"`, ...)
//! after searching, in order:
//!
//! 1. the process itself (a library some other code already loaded),
//! 2. the NVIDIA wheels in Python site-packages (`nvidia/cu13/lib`, then the CUDA 12 per-component
//!    folders) of `$VIRTUAL_ENV`, `$CONDA_PREFIX` and the user site,
//! 3. a conda environment (`$CONDA_PREFIX/lib`),
//! 4. the toolkit named by `$CUDA_PATH`, else `$CUDA_HOME`,
//! 5. the system loader (`dlopen` of the soname: `LD_LIBRARY_PATH`, the ld.so cache),
//! 6. `/usr/local/cuda`.
//!
//! Driver libraries (`cuda`, `nvml`) come from the process or the system loader only, as the
//! driver installs them. Every result is cached for the life of the process and the handle is
//! never closed. When nothing is found, the error lists every place searched and why each
//! candidate was rejected, and says how to install the library.
//!
//! ```no_run
//! let nvrtc = cuda_pathfinder::load_nvidia_dynamic_lib("nvrtc")?;
//! println!("{} via {}", nvrtc.abs_path.as_deref().unwrap().display(), nvrtc.found_via);
//! # Ok::<(), cuda_pathfinder::DynamicLibNotFoundError>(())
//! ```

mod catalog;
mod loader;
mod search;

pub use catalog::{LibDescriptor, PackagedWith, DESCRIPTORS};
pub use search::{site_packages_dirs, FoundVia};

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
    /// The file or soname tried.
    pub candidate: String,
    /// Why it was not used.
    pub rejected_because: String,
}

/// A library could not be found (or is not one `cuda-pathfinder` knows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicLibNotFoundError {
    /// The short name asked for.
    pub libname: String,
    /// Every place searched, in order.
    pub attempts: Vec<Attempt>,
    /// What to do about it.
    pub hint: String,
}

impl fmt::Display for DynamicLibNotFoundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot find the CUDA library \"{}\"", self.libname)?;
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

impl std::error::Error for DynamicLibNotFoundError {}

/// The short names [`load_nvidia_dynamic_lib`] accepts.
pub fn supported_libnames() -> impl Iterator<Item = &'static str> {
    DESCRIPTORS.iter().map(|d| d.name)
}

type Cache = Mutex<HashMap<&'static str, &'static OnceLock<Result<LoadedDl, DynamicLibNotFoundError>>>>;

/// Finds and opens the library `libname` (`"cudart"`, `"nvrtc"`, `"nvJitLink"`, `"nvvm"`,
/// `"cufile"`, `"cuda"`, `"nvml"`, ...), searching as the crate documentation describes.
///
/// The answer, found or not, is cached: later calls return the same result without searching.
pub fn load_nvidia_dynamic_lib(libname: &str) -> Result<&'static LoadedDl, DynamicLibNotFoundError> {
    let Some(desc) = catalog::find(libname) else {
        return Err(DynamicLibNotFoundError {
            libname: libname.to_string(),
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
    cell.get_or_init(|| search::load(desc, &search::Environment::from_process()))
        .as_ref()
        .map_err(Clone::clone)
}
