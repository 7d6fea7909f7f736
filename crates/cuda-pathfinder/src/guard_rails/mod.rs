//! Compatibility guard rails (`cuda.pathfinder`'s `CompatibilityGuardRails`): every item a search
//! resolves is checked against a toolkit-version constraint, against the items resolved before
//! it that must come from the same toolkit release, and against the installed driver, and is
//! rejected with [`CompatibilityCheckError`] (or [`CompatibilityInsufficientMetadataError`] when
//! it cannot be decided) saying what was found and why it does not fit.

mod constraint;
mod driver;

pub use constraint::CtkVersionConstraint;
pub use driver::{query_driver_cuda_version, query_driver_release_version, DriverCudaVersion, DriverReleaseVersion};

use crate::catalog::PackagedWith;
use crate::error::{
    CompatibilityCheckError, CompatibilityCheckKind, CompatibilityInsufficientMetadataError, Error, NotFoundError,
};
use crate::locate::LocatedFile;
use crate::search::FoundVia;
use crate::versions::{toolkit_version_of, ToolkitVersion};
use crate::LoadedDl;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

/// What kind of item was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemKind {
    /// A dynamic library ([`crate::load_nvidia_dynamic_lib`]).
    DynamicLib,
    /// A header folder.
    HeaderDir,
    /// A static library.
    StaticLib,
    /// A bitcode library.
    BitcodeLib,
    /// A tool.
    Binary,
}

impl ItemKind {
    /// `cuda.pathfinder`'s name (`"dynamic-lib"`, `"header-dir"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::DynamicLib => "dynamic-lib",
            ItemKind::HeaderDir => "header-dir",
            ItemKind::StaticLib => "static-lib",
            ItemKind::BitcodeLib => "bitcode-lib",
            ItemKind::Binary => "binary",
        }
    }
}

/// Something a search found, with what the guard rails need to judge it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedItem {
    /// The name asked for.
    pub name: String,
    /// What it is.
    pub kind: ItemKind,
    /// Who ships it.
    pub packaged_with: PackagedWith,
    /// The file the version is read from (for a header folder, its marker header).
    pub abs_path: PathBuf,
    /// The rule that found it.
    pub found_via: Option<FoundVia>,
    /// The toolkit release it belongs to, when that can be told.
    pub ctk_version: Option<ToolkitVersion>,
    /// Items of one dynamic-link component must come from one toolkit release.
    pub dynamic_link_component: Option<&'static str>,
    /// Items sharing a tag must come from one toolkit release.
    pub companion_tags: &'static [&'static str],
}

impl ResolvedItem {
    /// A loaded library; insufficient metadata when the loader cannot tell its file.
    pub fn dynamic_lib(name: &str, loaded: &LoadedDl) -> Result<ResolvedItem, Error> {
        let Some(path) = &loaded.abs_path else {
            return Err(insufficient(format!(
                "could not determine an absolute path for dynamic library {name:?}"
            )));
        };
        let desc = crate::catalog::find(name).ok_or_else(|| Error::NotFound(crate::unknown_library(name)))?;
        Ok(ResolvedItem {
            name: name.to_string(),
            kind: ItemKind::DynamicLib,
            packaged_with: desc.packaged_with,
            abs_path: path.clone(),
            found_via: Some(loaded.found_via),
            ctk_version: toolkit_version_of(path),
            dynamic_link_component: desc.dynamic_link_component,
            companion_tags: desc.companion_tags,
        })
    }

    /// A located header folder, tool, bitcode or static library (`kind` as [`NotFoundError::kind`]).
    pub fn located(kind: &str, located: &LocatedFile) -> Result<ResolvedItem, Error> {
        let (packaged_with, companion_tags) = crate::locate::item_metadata(kind, &located.name)
            .ok_or_else(|| insufficient(format!("{kind} {:?} is not in the catalog", located.name)))?;
        let (item_kind, abs_path) = match kind {
            "header directory" => {
                let marker = crate::supported_headers()
                    .find(|(n, _)| *n == located.name)
                    .map(|(_, m)| m)
                    .unwrap_or_default();
                (ItemKind::HeaderDir, located.abs_path.join(marker))
            }
            "tool" => (ItemKind::Binary, located.abs_path.clone()),
            "bitcode library" => (ItemKind::BitcodeLib, located.abs_path.clone()),
            _ => (ItemKind::StaticLib, located.abs_path.clone()),
        };
        Ok(ResolvedItem {
            name: located.name.clone(),
            kind: item_kind,
            packaged_with,
            ctk_version: toolkit_version_of(&abs_path),
            abs_path,
            found_via: Some(located.found_via),
            dynamic_link_component: None,
            companion_tags,
        })
    }

    /// `dynamic-lib "nvrtc" via site-packages at "/…/libnvrtc.so.13"`.
    pub fn describe(&self) -> String {
        let via = self.found_via.map(|v| format!(" via {v}")).unwrap_or_default();
        format!(
            "{} {:?}{via} at {:?}",
            self.kind.as_str(),
            self.name,
            self.abs_path.display().to_string()
        )
    }
}

fn insufficient(message: String) -> Error {
    Error::CompatibilityInsufficientMetadata(CompatibilityInsufficientMetadataError { message })
}

fn rejected(kind: CompatibilityCheckKind, message: String) -> Error {
    Error::CompatibilityCheck(CompatibilityCheckError { kind, message })
}

/// The oldest display-driver branch that runs a newer minor release of each toolkit major
/// (NVIDIA's minor-version compatibility).
const MIN_BRANCH_FOR_MINOR_VERSION_COMPATIBILITY: &[(u32, u32)] = &[(11, 450), (12, 525), (13, 580)];

#[derive(Debug, Default)]
struct State {
    driver: Option<Result<DriverCudaVersion, String>>,
    release: Option<Result<DriverReleaseVersion, String>>,
    items: Vec<ResolvedItem>,
}

/// Resolves CUDA artifacts and rejects combinations that do not fit: a toolkit version outside
/// the constraint, items that must share a toolkit release and do not, a driver too old for the
/// toolkit. Driver libraries are exempt. One instance remembers what it resolved; the
/// process-wide one ([`process_wide_compatibility_guard_rails`]) serves the crate's free
/// functions.
#[derive(Debug, Default)]
pub struct CompatibilityGuardRails {
    ctk_version: Option<CtkVersionConstraint>,
    configured_driver: Option<DriverCudaVersion>,
    configured_release: Option<DriverReleaseVersion>,
    state: Mutex<State>,
}

impl CompatibilityGuardRails {
    /// Guard rails with no toolkit constraint that ask the installed driver.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires every toolkit item to satisfy `constraint` (`">=13.2,<14"`).
    pub fn with_ctk_version(mut self, constraint: CtkVersionConstraint) -> Self {
        self.ctk_version = Some(constraint);
        self
    }

    /// Uses this driver CUDA version instead of asking the driver.
    pub fn with_driver_cuda_version(mut self, version: DriverCudaVersion) -> Self {
        self.configured_driver = Some(version);
        self
    }

    /// Uses this display-driver release instead of asking NVML.
    pub fn with_driver_release_version(mut self, version: DriverReleaseVersion) -> Self {
        self.configured_release = Some(version);
        self
    }

    /// The toolkit constraint, if any.
    pub fn ctk_version(&self) -> Option<&CtkVersionConstraint> {
        self.ctk_version.as_ref()
    }

    /// The items accepted so far, in order.
    pub fn resolved_items(&self) -> Vec<ResolvedItem> {
        self.lock().items.clone()
    }

    /// Forgets the accepted items and the driver versions asked for (configured ones stay).
    pub fn reset(&self) {
        *self.lock() = State::default();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks `item` against the constraint, the items accepted before and the driver, and
    /// remembers it when it fits.
    pub fn register_and_check(&self, item: ResolvedItem) -> Result<(), Error> {
        if item.packaged_with == PackagedWith::Driver {
            let mut state = self.lock();
            if !state.items.contains(&item) {
                state.items.push(item);
            }
            return Ok(());
        }
        if item.packaged_with != PackagedWith::Toolkit {
            return Err(insufficient(format!(
                "the guard rails only give definitive answers for toolkit items (and driver libraries); {} \
                 is packaged with {:?}",
                item.describe(),
                item.packaged_with.as_str()
            )));
        }
        let Some(version) = item.ctk_version.clone() else {
            return Err(insufficient(format!(
                "could not determine the toolkit version of {}: there is no cuda.h in a folder above it, and no \
                 wheel metadata that names a toolkit release",
                item.describe()
            )));
        };
        if let Some(c) = &self.ctk_version {
            if !c.matches(version.major, version.minor) {
                return Err(rejected(
                    CompatibilityCheckKind::Constraint,
                    format!(
                        "{} resolves to CUDA {version} ({}), which does not satisfy ctk_version {c}",
                        item.describe(),
                        version.source
                    ),
                ));
            }
        }
        for prior in self.lock().items.iter() {
            pairwise(prior, &item)?;
        }
        self.check_driver(&item, &version)?;
        let mut state = self.lock();
        if !state.items.contains(&item) {
            state.items.push(item);
        }
        Ok(())
    }

    fn driver_version(&self) -> Result<DriverCudaVersion, String> {
        if let Some(v) = self.configured_driver {
            return Ok(v);
        }
        let mut state = self.lock();
        state.driver.get_or_insert_with(query_driver_cuda_version).clone()
    }

    fn release_version(&self) -> Result<DriverReleaseVersion, String> {
        if let Some(v) = &self.configured_release {
            return Ok(v.clone());
        }
        let mut state = self.lock();
        state.release.get_or_insert_with(query_driver_release_version).clone()
    }

    fn check_driver(&self, item: &ResolvedItem, v: &ToolkitVersion) -> Result<(), Error> {
        // No driver: nothing to check against (cuda.pathfinder raises CompatibilityCheckError;
        // here a machine without a GPU may still compile, so it is a lack of metadata).
        let driver = self
            .driver_version()
            .map_err(|e| insufficient(format!("cannot check {} against the driver: {e}", item.describe())))?;
        if (driver.major, driver.minor) >= (v.major, v.minor) {
            return Ok(());
        }
        if driver.major != v.major {
            return Err(rejected(
                CompatibilityCheckKind::Driver,
                format!(
                    "the driver (cuDriverGetVersion {}) supports CUDA {} only up to {driver}, but {} needs CUDA {v}: \
                     update the NVIDIA driver or use a CUDA {} toolkit",
                    driver.encoded,
                    driver.major,
                    item.describe(),
                    driver.major
                ),
            ));
        }
        let Some(&(_, branch)) = MIN_BRANCH_FOR_MINOR_VERSION_COMPATIBILITY
            .iter()
            .find(|(major, _)| *major == v.major)
        else {
            return Err(rejected(
                CompatibilityCheckKind::Driver,
                format!(
                    "the driver supports CUDA {driver}, older than CUDA {v} of {}, and minor-version compatibility \
                     is not published for CUDA {}",
                    item.describe(),
                    v.major
                ),
            ));
        };
        let release = self.release_version().map_err(|e| {
            insufficient(format!(
                "the driver supports older CUDA {driver} than {} needs (CUDA {v}); whether minor-version \
                 compatibility applies needs the display-driver release, which is unknown: {e}",
                item.describe()
            ))
        })?;
        if release.branch >= branch {
            return Ok(());
        }
        Err(rejected(
            CompatibilityCheckKind::Driver,
            format!(
                "the driver supports CUDA {driver} and its release {} (branch {}) is below branch {branch}, the \
                 oldest that runs CUDA {}.x through minor-version compatibility, so {} (CUDA {v}) cannot run: \
                 update the NVIDIA driver",
                release.text,
                release.branch,
                v.major,
                item.describe()
            ),
        ))
    }

    /// Loads a library ([`crate::unguarded::load_nvidia_dynamic_lib`]) and checks it. A rejected
    /// library stays loaded: the load already happened.
    pub fn load_nvidia_dynamic_lib(&self, libname: &str) -> Result<&'static LoadedDl, Error> {
        let loaded = crate::unguarded::load_nvidia_dynamic_lib(libname)?;
        let checked = ResolvedItem::dynamic_lib(libname, loaded).and_then(|item| self.register_and_check(item));
        match checked {
            Ok(()) => Ok(loaded),
            Err(Error::CompatibilityCheck(mut e)) => {
                e.message.push_str(
                    " (the library was loaded before it was checked, and stays loaded for the rest of the process)",
                );
                Err(Error::CompatibilityCheck(e))
            }
            Err(e) => Err(e),
        }
    }

    fn located(&self, kind: &str, found: Result<LocatedFile, NotFoundError>) -> Result<LocatedFile, Error> {
        let found = found?;
        self.register_and_check(ResolvedItem::located(kind, &found)?)?;
        Ok(found)
    }

    /// Locates a header folder and checks it.
    pub fn locate_nvidia_header_directory(&self, libname: &str) -> Result<LocatedFile, Error> {
        self.located(
            "header directory",
            crate::unguarded::locate_nvidia_header_directory(libname),
        )
    }

    /// Locates a static library and checks it.
    pub fn locate_static_lib(&self, name: &str) -> Result<LocatedFile, Error> {
        self.located("static library", crate::unguarded::find_static_lib(name))
    }

    /// Locates a bitcode library and checks it.
    pub fn locate_bitcode_lib(&self, name: &str) -> Result<LocatedFile, Error> {
        self.located("bitcode library", crate::unguarded::find_bitcode_lib(name))
    }

    /// Finds a tool and checks it.
    pub fn find_nvidia_binary_utility(&self, name: &str) -> Result<LocatedFile, Error> {
        self.located("tool", crate::unguarded::find_nvidia_binary_utility(name))
    }
}

/// Items that must come from one toolkit release (same dynamic-link component, or a shared
/// companion tag) and do not.
fn pairwise(a: &ResolvedItem, b: &ResolvedItem) -> Result<(), Error> {
    if a.packaged_with == PackagedWith::Driver || b.packaged_with == PackagedWith::Driver {
        return Ok(());
    }
    let reason = match (a.dynamic_link_component, b.dynamic_link_component) {
        (Some(x), Some(y)) if x == y => format!("they are in the same dynamic-link component {x:?}"),
        _ => {
            let shared: Vec<&str> = a
                .companion_tags
                .iter()
                .filter(|t| b.companion_tags.contains(t))
                .copied()
                .collect();
            if shared.is_empty() {
                return Ok(());
            }
            format!("they share the companion tag(s) {}", shared.join(", "))
        }
    };
    let (Some(va), Some(vb)) = (&a.ctk_version, &b.ctk_version) else {
        return Ok(());
    };
    if (va.major, va.minor) == (vb.major, vb.minor) {
        return Ok(());
    }
    Err(rejected(
        CompatibilityCheckKind::Mismatch,
        format!(
            "{} resolves to CUDA {va} ({}), while {} resolves to CUDA {vb} ({}); {reason}, so they must come from one \
             toolkit release: point CUDA_PATH or the Python environment at one toolkit",
            a.describe(),
            va.source,
            b.describe(),
            vb.source
        ),
    ))
}

/// How the crate's free functions apply the process-wide guard rails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuardRailsMode {
    /// No checks: the searches' results as they are.
    Off,
    /// Rejections are errors; items the guard rails cannot judge are returned unchecked (the
    /// default here).
    BestEffort,
    /// Rejections and items that cannot be judged are errors (`cuda.pathfinder`'s default).
    Strict,
}

/// The variable that sets [`GuardRailsMode`]: `off`, `best_effort` or `strict`.
pub const GUARD_RAILS_ENV_VAR: &str = "CUDA_PATHFINDER_COMPATIBILITY_GUARD_RAILS";

impl GuardRailsMode {
    /// The mode `value` of [`GUARD_RAILS_ENV_VAR`] names; unset or empty is `best_effort`.
    pub fn from_value(value: Option<&str>) -> Result<GuardRailsMode, Error> {
        match value.unwrap_or("") {
            "" | "best_effort" => Ok(GuardRailsMode::BestEffort),
            "off" => Ok(GuardRailsMode::Off),
            "strict" => Ok(GuardRailsMode::Strict),
            other => Err(Error::InvalidSetting {
                variable: GUARD_RAILS_ENV_VAR,
                value: other.to_string(),
                allowed: &["off", "best_effort", "strict"],
            }),
        }
    }

    /// The mode this process's environment sets (read at every call, as `cuda.pathfinder` does).
    pub fn from_env() -> Result<GuardRailsMode, Error> {
        Self::from_value(std::env::var(GUARD_RAILS_ENV_VAR).ok().as_deref())
    }
}

static PROCESS_WIDE: RwLock<Option<Arc<CompatibilityGuardRails>>> = RwLock::new(None);

/// The guard rails the crate's free functions use (`process_wide_compatibility_guard_rails`).
pub fn process_wide_compatibility_guard_rails() -> Arc<CompatibilityGuardRails> {
    if let Some(g) = PROCESS_WIDE.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
        return g.clone();
    }
    let mut slot = PROCESS_WIDE.write().unwrap_or_else(|p| p.into_inner());
    slot.get_or_insert_with(|| Arc::new(CompatibilityGuardRails::new()))
        .clone()
}

/// Replaces the process-wide guard rails (to set a toolkit constraint for every search of the
/// process, cuda-core's included).
pub fn set_process_wide_compatibility_guard_rails(guard_rails: CompatibilityGuardRails) {
    *PROCESS_WIDE.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(guard_rails));
}

/// Runs `guarded` through the process-wide guard rails as [`GuardRailsMode::from_env`] says,
/// falling back to `raw` when they are off, or cannot judge the item in `best_effort` mode.
pub(crate) fn apply<T>(
    guarded: impl FnOnce(&CompatibilityGuardRails) -> Result<T, Error>,
    raw: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    let mode = GuardRailsMode::from_env()?;
    if mode == GuardRailsMode::Off {
        return raw();
    }
    match guarded(&process_wide_compatibility_guard_rails()) {
        Err(Error::CompatibilityInsufficientMetadata(e)) => {
            crate::log::event(crate::log::DEBUG, || {
                format!("guard rails could not judge: {}", e.message)
            });
            if mode == GuardRailsMode::BestEffort {
                raw()
            } else {
                Err(Error::CompatibilityInsufficientMetadata(e))
            }
        }
        Err(Error::CompatibilityCheck(e)) => {
            crate::log::event(crate::log::WARNING, || format!("guard rails rejected: {}", e.message));
            Err(Error::CompatibilityCheck(e))
        }
        other => other,
    }
}
