//! Find CUDA libraries on disk the way NVIDIA's `cuda.pathfinder` (1.8) does, and explain the
//! answer.
//!
//! [`load_nvidia_dynamic_lib`] opens a CUDA library by its short name (`"nvrtc"`, `"cuda"`, ...)
//! after searching, in `cuda.pathfinder`'s order:
//!
//! 1. the process itself (a library some other code already loaded),
//! 2. the NVIDIA wheels in Python site-packages (`nvidia/cu13/lib`, then the CUDA 12 per-component
//!    folders) of `$VIRTUAL_ENV`, `$CONDA_PREFIX`, the user site and the Python interpreters on
//!    `PATH` (found without running them),
//! 3. a conda environment (`$CONDA_PREFIX/lib`, `%CONDA_PREFIX%\Library\bin` on Windows),
//! 4. the system loader (`dlopen` of the soname: `LD_LIBRARY_PATH`, the ld.so cache; on Windows
//!    `LoadLibraryExW`, then the absolute folders of `PATH`),
//! 5. the product's own root variable where it has one (`CUDNN_PATH`, `NCCL_HOME`),
//! 6. the toolkit named by `$CUDA_PATH`, else `$CUDA_HOME` ([`get_cuda_path_or_home`]),
//! 7. on Windows, versioned installs under Program Files (cuDNN),
//! 8. for NVVM and CUPTI, which live outside the loader's folders, the toolkit the system
//!    loader's `cudart` belongs to (the toolkit-root canary),
//! 9. and, beyond `cuda.pathfinder`, `/usr/local/cuda` when all of that failed.
//!
//! Driver libraries (`cuda`, `nvml`) come from the process or the system loader only. Every
//! result is cached for the life of the process ([`cache_clear`] forgets it) and the handle is
//! never closed. When nothing is found, the error lists every place searched and why each
//! candidate was rejected, and says how to install the library.
//!
//! Headers ([`locate_nvidia_header_directory`]), tools ([`find_nvidia_binary_utility`]), bitcode
//! ([`find_bitcode_lib`]) and static libraries ([`find_static_lib`]) are found the same way.
//!
//! Every one of these goes through the process-wide [`CompatibilityGuardRails`]: what is found is
//! checked against an optional toolkit-version constraint, against earlier items that must come
//! from the same toolkit release, and against the driver, and rejected with
//! [`CompatibilityCheckError`] when it does not fit. `CUDA_PATHFINDER_COMPATIBILITY_GUARD_RAILS`
//! chooses `off`, `best_effort` (the default: items the rails cannot judge pass) or `strict`.
//! [`unguarded`] has the searches without them. `CUDA_PATHFINDER_LOG_LEVEL=INFO` (or `DEBUG`)
//! logs every search on standard error. `cargo run -p cuda-pathfinder` prints all of it as a
//! table.
//!
//! The Windows rules (DLL names, folders per architecture, `PATH`, `AddDllDirectory`) are pure
//! logic tested on Linux against simulated folders; the crate has never been built on Windows.
//!
//! ```no_run
//! let nvrtc = cuda_pathfinder::load_nvidia_dynamic_lib("nvrtc")?;
//! println!("{:?} via {}", nvrtc.abs_path, nvrtc.found_via);
//! # Ok::<(), cuda_pathfinder::Error>(())
//! ```

#![deny(missing_docs)]

mod canary;
mod catalog;
mod env;
mod error;
mod guard_rails;
mod headers;
mod loader;
mod locate;
mod log;
mod platform;
mod search;
#[cfg(test)]
mod tests;
mod versions;

pub use canary::derive_ctk_root;
pub use catalog::{LibDescriptor, PackagedWith, DESCRIPTORS};
pub use env::{get_cuda_path_or_home, site_packages_dirs};
pub use error::{
    Attempt, BitcodeLibNotFoundError, CompatibilityCheckError, CompatibilityCheckKind,
    CompatibilityInsufficientMetadataError, DynamicLibNotFoundError, Error, NotFoundCause, NotFoundError,
    StaticLibNotFoundError, UnsupportedArchError,
};
pub use guard_rails::{
    process_wide_compatibility_guard_rails, query_driver_cuda_version, query_driver_release_version,
    set_process_wide_compatibility_guard_rails, CompatibilityGuardRails, CtkVersionConstraint, DriverCudaVersion,
    DriverReleaseVersion, GuardRailsMode, ItemKind, ResolvedItem, GUARD_RAILS_ENV_VAR,
};
pub use locate::{
    supported_headers, supported_headers_ctk, LocatedBitcodeLib, LocatedFile, LocatedHeaderDir, LocatedStaticLib,
    SUPPORTED_BINARY_UTILITIES, SUPPORTED_BITCODE_LIBS, SUPPORTED_STATIC_LIBS,
};
pub use log::{parse_level as parse_log_level, LOG_LEVEL_ENV_VAR};
pub use platform::{add_dll_directory_for, pe_matches_arch, windows_supported_arches, Platform, WindowsArch};
pub use search::FoundVia;
pub use versions::{compatibility_warnings, driver_cuda_version, toolkit_version_of, ToolkitVersion};

use std::collections::HashMap;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// This crate's version (`cuda.pathfinder.__version__`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A library that is open in this process. It stays open for the life of the process.
#[derive(Debug)]
pub struct LoadedDl {
    /// The file that was opened, when the loader can tell.
    pub abs_path: Option<PathBuf>,
    /// Whether the library was already in the process before this search.
    pub was_already_loaded_from_elsewhere: bool,
    /// Which rule found it.
    pub found_via: FoundVia,
    /// The places tried before it, in order, and why each was passed over.
    pub searched: Vec<Attempt>,
    handle: usize,
}

impl LoadedDl {
    /// The `dlopen` handle (`HMODULE` on Windows), for `dlsym`. Never pass it to `dlclose`: the
    /// library is shared by everything in the process that asked for it.
    pub fn handle(&self) -> *mut c_void {
        self.handle as *mut c_void
    }
}

/// Every short name [`load_nvidia_dynamic_lib`] knows, on any platform.
pub fn supported_libnames() -> impl Iterator<Item = &'static str> {
    DESCRIPTORS.iter().map(|d| d.name)
}

/// The toolkit's libraries available on this platform (`SUPPORTED_NVIDIA_LIBNAMES`: on Windows,
/// those NVIDIA ships for this process's architecture).
pub fn supported_nvidia_libnames() -> Vec<&'static str> {
    let Ok(platform) = Platform::current() else {
        return Vec::new();
    };
    DESCRIPTORS
        .iter()
        .filter(|d| d.packaged_with == PackagedWith::Toolkit)
        .filter(|d| platform::check_available(d, platform).is_ok())
        .map(|d| d.name)
        .collect()
}

pub(crate) fn unknown_library(libname: &str) -> NotFoundError {
    locate::unknown("library", libname, supported_libnames())
}

static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn warn(message: String) {
    #[cfg(feature = "tracing")]
    tracing::warn!(message = %message, "cuda-pathfinder");
    log::event(log::WARNING, || message.clone());
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

type Cell = &'static OnceLock<Result<LoadedDl, Error>>;

static CACHE: Mutex<Option<HashMap<&'static str, Cell>>> = Mutex::new(None);

/// Forgets every cached answer: the libraries found (they stay loaded: handles are never closed,
/// and a later call searches again), [`get_cuda_path_or_home`], and what the process-wide guard
/// rails accepted (`load_nvidia_dynamic_lib.cache_clear()` of `cuda.pathfinder`).
pub fn cache_clear() {
    *CACHE.lock().unwrap_or_else(|p| p.into_inner()) = None;
    env::clear_cuda_path_cache();
    process_wide_compatibility_guard_rails().reset();
}

/// The searches without the guard rails: what each search found, unchecked.
pub mod unguarded {
    use super::*;
    use crate::env::Environment;
    use crate::loader::NativeLoader;

    /// Finds and opens `libname`, after the libraries it depends on; the answer, found or not, is
    /// cached until [`cache_clear`].
    pub fn load_nvidia_dynamic_lib(libname: &str) -> Result<&'static LoadedDl, Error> {
        let Some(desc) = catalog::find(libname) else {
            return Err(unknown_library(libname).into());
        };
        let cell = {
            let mut map = CACHE.lock().unwrap_or_else(|p| p.into_inner());
            *map.get_or_insert_with(HashMap::new)
                .entry(desc.name)
                .or_insert_with(|| Box::leak(Box::new(OnceLock::new())))
        };
        let mut searched = false;
        let found = cell.get_or_init(|| {
            searched = true;
            let env = Environment::from_process()?;
            let dep = |name: &str| load_nvidia_dynamic_lib(name).map(|_| ());
            let result = search::load(desc, &env, &NativeLoader, &dep);
            log::search(desc.name, &result);
            result.map_err(Error::NotFound)
        });
        // Reported after the search, outside the cache's initialisation (a subscriber that loads
        // a library itself must not re-enter it), once per library.
        #[cfg(feature = "tracing")]
        if searched {
            report(desc.name, found);
        }
        #[cfg(not(feature = "tracing"))]
        let _ = searched;
        found.as_ref().map_err(Clone::clone)
    }

    fn with_env(f: impl FnOnce(&Environment) -> Result<LocatedFile, NotFoundError>) -> Result<LocatedFile, Error> {
        let env = Environment::from_process()?;
        Ok(f(&env)?)
    }

    /// Finds the folder of the headers of `name`.
    pub fn locate_nvidia_header_directory(name: &str) -> Result<LocatedFile, NotFoundError> {
        flatten(
            with_env(|env| locate::locate_header_in(name, env, &NativeLoader)),
            "header directory",
            name,
        )
    }

    /// Finds the tool `name`.
    pub fn find_nvidia_binary_utility(name: &str) -> Result<LocatedFile, NotFoundError> {
        flatten(
            with_env(|env| locate::find_binary_in(name, env, &NativeLoader)),
            "tool",
            name,
        )
    }

    /// Finds the bitcode library `name`.
    pub fn find_bitcode_lib(name: &str) -> Result<LocatedFile, NotFoundError> {
        flatten(
            with_env(|env| locate::find_bitcode_in(name, env, &NativeLoader)),
            "bitcode library",
            name,
        )
    }

    /// Finds the static library `name`.
    pub fn find_static_lib(name: &str) -> Result<LocatedFile, NotFoundError> {
        flatten(
            with_env(|env| locate::find_static_in(name, env, &NativeLoader)),
            "static library",
            name,
        )
    }

    /// An unsupported Windows architecture, as "not available" for the item.
    fn flatten(r: Result<LocatedFile, Error>, kind: &'static str, name: &str) -> Result<LocatedFile, NotFoundError> {
        r.map_err(|e| match e {
            Error::NotFound(e) => e,
            other => NotFoundError {
                kind,
                name: name.to_string(),
                cause: NotFoundCause::NotAvailable,
                attempts: Vec::new(),
                hint: other.to_string(),
            },
        })
    }
}

/// Finds and opens the library `libname` (`"cudart"`, `"nvrtc"`, `"nvJitLink"`, `"nvvm"`,
/// `"cufile"`, `"cuda"`, `"nvml"`, ...), after the libraries it depends on, searching as the
/// crate documentation describes, and checks it with the process-wide guard rails.
///
/// The search's answer, found or not, is cached: later calls return the same library without
/// searching.
pub fn load_nvidia_dynamic_lib(libname: &str) -> Result<&'static LoadedDl, Error> {
    guard_rails::apply(
        |g| g.load_nvidia_dynamic_lib(libname),
        || unguarded::load_nvidia_dynamic_lib(libname),
    )
}

/// Finds the folder that holds the headers of `name` (`"cudart"` holds `cuda_runtime.h`,
/// `"nvrtc"` holds `nvrtc.h`, `"cccl"` holds `cuda/std/version`, ...), checked by the guard rails.
pub fn locate_nvidia_header_directory(name: &str) -> Result<LocatedFile, Error> {
    guard_rails::apply(
        |g| g.locate_nvidia_header_directory(name),
        || Ok(unguarded::locate_nvidia_header_directory(name)?),
    )
}

/// [`locate_nvidia_header_directory`], as `cuda.pathfinder`'s `find_nvidia_header_directory`:
/// the folder, or `None` (not found, or rejected by the guard rails).
pub fn find_nvidia_header_directory(name: &str) -> Option<PathBuf> {
    locate_nvidia_header_directory(name).ok().map(|l| l.abs_path)
}

/// Finds the tool `name` (`"nvcc"`, `"ptxas"`, `"compute-sanitizer"`, ...), checked by the guard
/// rails. Only executable files count; the current folder is never searched.
pub fn find_nvidia_binary_utility(name: &str) -> Result<LocatedFile, Error> {
    guard_rails::apply(
        |g| g.find_nvidia_binary_utility(name),
        || Ok(unguarded::find_nvidia_binary_utility(name)?),
    )
}

/// Finds a bitcode library, checked by the guard rails: `"device"` is `libdevice.10.bc`, which
/// NVVM links for math functions; `"nccl_device"` and `"nvshmem_device"` are NCCL's and NVSHMEM's.
pub fn find_bitcode_lib(name: &str) -> Result<LocatedFile, Error> {
    guard_rails::apply(
        |g| g.locate_bitcode_lib(name),
        || Ok(unguarded::find_bitcode_lib(name)?),
    )
}

/// [`find_bitcode_lib`] under `cuda.pathfinder`'s other name.
pub fn locate_bitcode_lib(name: &str) -> Result<LocatedFile, Error> {
    find_bitcode_lib(name)
}

/// Finds a static library, checked by the guard rails: `"cudadevrt"` is `libcudadevrt.a`, needed
/// to link relocatable device code that uses dynamic parallelism.
pub fn find_static_lib(name: &str) -> Result<LocatedFile, Error> {
    guard_rails::apply(|g| g.locate_static_lib(name), || Ok(unguarded::find_static_lib(name)?))
}

/// [`find_static_lib`] under `cuda.pathfinder`'s other name.
pub fn locate_static_lib(name: &str) -> Result<LocatedFile, Error> {
    find_static_lib(name)
}

/// The search's outcome as `tracing` events: where the library was found, or every candidate
/// rejected and why.
#[cfg(feature = "tracing")]
fn report(library: &str, found: &Result<LoadedDl, Error>) {
    match found {
        Ok(dl) => tracing::debug!(
            library,
            path = ?dl.abs_path,
            via = dl.found_via.as_str(),
            already_loaded = dl.was_already_loaded_from_elsewhere,
            "cuda-pathfinder found a library"
        ),
        Err(e) => {
            for a in e.attempts() {
                tracing::debug!(
                    library,
                    candidate = %a.candidate,
                    via = a.rule.as_str(),
                    rejected_because = %a.rejected_because,
                    "cuda-pathfinder rejected a candidate"
                );
            }
            tracing::debug!(library, error = %e, "cuda-pathfinder found no library");
        }
    }
}
