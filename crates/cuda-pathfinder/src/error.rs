//! The errors of every search: not found (with every place tried), not available on this
//! platform, unknown, rejected by the compatibility guard rails, and an unsupported Windows
//! architecture.

use crate::search::FoundVia;
use std::fmt;

/// One place looked at during a search, and why it was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The rule that proposed the place.
    pub rule: FoundVia,
    /// The file, folder or soname tried.
    pub candidate: String,
    /// Why it was not used.
    pub rejected_because: String,
}

/// Why a [`NotFoundError`] was raised. `cuda.pathfinder` has one exception class per cause, each a
/// subclass of `DynamicLibNotFoundError`; here they are one type with this field, so matching on
/// "not found" catches all three as it does there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotFoundCause {
    /// Searched for and not found (`DynamicLibNotFoundError`, `BitcodeLibNotFoundError`, ...).
    Missing,
    /// Not a name `cuda-pathfinder` knows (`DynamicLibUnknownError`).
    Unknown,
    /// A known name that does not exist for this operating system or architecture (cuFile on
    /// Windows, cuDLA on x64 Windows: `DynamicLibNotAvailableError`).
    NotAvailable,
}

/// Something could not be found, is unknown, or does not exist for this platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFoundError {
    /// What was looked for: `"library"`, `"header directory"`, `"tool"`, `"bitcode library"`,
    /// `"static library"`.
    pub kind: &'static str,
    /// The name asked for.
    pub name: String,
    /// Why: not found, unknown, or not available on this platform.
    pub cause: NotFoundCause,
    /// Every place searched, in order.
    pub attempts: Vec<Attempt>,
    /// What to do about it.
    pub hint: String,
}

/// `cuda.pathfinder`'s name for a library that cannot be found.
pub type DynamicLibNotFoundError = NotFoundError;
/// `cuda.pathfinder`'s name for a bitcode library that cannot be found.
pub type BitcodeLibNotFoundError = NotFoundError;
/// `cuda.pathfinder`'s name for a static library that cannot be found.
pub type StaticLibNotFoundError = NotFoundError;

impl NotFoundError {
    /// The short name asked for (for libraries, `cuda.pathfinder`'s `libname`).
    pub fn libname(&self) -> &str {
        &self.name
    }

    /// Whether the name exists but not for this platform (`DynamicLibNotAvailableError`).
    pub fn is_not_available(&self) -> bool {
        self.cause == NotFoundCause::NotAvailable
    }

    /// Whether the name is not one `cuda-pathfinder` knows (`DynamicLibUnknownError`).
    pub fn is_unknown(&self) -> bool {
        self.cause == NotFoundCause::Unknown
    }
}

impl fmt::Display for NotFoundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cause {
            NotFoundCause::Missing => write!(f, "cannot find the CUDA {} \"{}\"", self.kind, self.name)?,
            NotFoundCause::Unknown => write!(f, "unknown CUDA {} \"{}\"", self.kind, self.name)?,
            NotFoundCause::NotAvailable => write!(
                f,
                "the CUDA {} \"{}\" is not available on this platform",
                self.kind, self.name
            )?,
        }
        if self.cause == NotFoundCause::Missing {
            if self.attempts.is_empty() {
                write!(f, ": nothing was searched")?;
            } else {
                write!(f, "; searched:")?;
                for a in &self.attempts {
                    write!(f, "\n  - [{}] {}: {}", a.rule, a.candidate, a.rejected_because)?;
                }
            }
        }
        if !self.hint.is_empty() {
            write!(f, "\n{}", self.hint)?;
        }
        Ok(())
    }
}

impl std::error::Error for NotFoundError {}

/// Which check of the guard rails rejected an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompatibilityCheckKind {
    /// The item's toolkit version does not satisfy the configured constraint.
    Constraint,
    /// Two items that must come from one toolkit release come from different ones.
    Mismatch,
    /// The driver does not support the item's toolkit (`DriverCtkCompatibilityError`).
    Driver,
}

/// The guard rails rejected what a search found (`CompatibilityCheckError`): what was found, and
/// why it does not fit. The search's own result is still cached (a library stays loaded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatibilityCheckError {
    /// Which check failed.
    pub kind: CompatibilityCheckKind,
    /// What was found and why it does not fit.
    pub message: String,
}

impl fmt::Display for CompatibilityCheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CUDA compatibility check failed: {}", self.message)
    }
}

impl std::error::Error for CompatibilityCheckError {}

/// The guard rails cannot decide whether what was found fits, for want of metadata
/// (`CompatibilityInsufficientMetadataError`): no toolkit version for the item, not a toolkit
/// item, or no driver to ask. In `best_effort` mode the search's result is returned instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatibilityInsufficientMetadataError {
    /// What is missing, for which item.
    pub message: String,
}

impl fmt::Display for CompatibilityInsufficientMetadataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CUDA compatibility cannot be checked: {}", self.message)
    }
}

impl std::error::Error for CompatibilityInsufficientMetadataError {}

/// The Windows architecture of this process is neither x64 nor arm64 (`UnsupportedArchError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedArchError {
    /// The platform tag, as Python's `sysconfig.get_platform()` writes it (`win32`, `win-amd64`).
    pub platform_tag: String,
}

impl fmt::Display for UnsupportedArchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unsupported Windows platform tag {:?}; expected \"win-amd64\" or \"win-arm64\"",
            self.platform_tag
        )
    }
}

impl std::error::Error for UnsupportedArchError {}

/// Every error of `cuda-pathfinder`'s searches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Not found, unknown or not available here (see [`NotFoundError::cause`]).
    NotFound(NotFoundError),
    /// Found, and rejected by the compatibility guard rails.
    CompatibilityCheck(CompatibilityCheckError),
    /// Found, and the guard rails (in `strict` mode) cannot tell whether it fits.
    CompatibilityInsufficientMetadata(CompatibilityInsufficientMetadataError),
    /// This process's Windows architecture is not one NVIDIA ships libraries for.
    UnsupportedArch(UnsupportedArchError),
    /// A setting of the environment is invalid (`CUDA_PATHFINDER_COMPATIBILITY_GUARD_RAILS=typo`).
    InvalidSetting {
        /// The environment variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// The values it may take.
        allowed: &'static [&'static str],
    },
}

impl Error {
    /// The not-found error, when that is what this is.
    pub fn as_not_found(&self) -> Option<&NotFoundError> {
        match self {
            Error::NotFound(e) => Some(e),
            _ => None,
        }
    }

    /// Every place searched, for a not-found error (empty otherwise).
    pub fn attempts(&self) -> &[Attempt] {
        self.as_not_found().map(|e| e.attempts.as_slice()).unwrap_or(&[])
    }

    /// Whether the guard rails rejected the item or could not decide.
    pub fn is_compatibility_error(&self) -> bool {
        matches!(
            self,
            Error::CompatibilityCheck(_) | Error::CompatibilityInsufficientMetadata(_)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound(e) => e.fmt(f),
            Error::CompatibilityCheck(e) => e.fmt(f),
            Error::CompatibilityInsufficientMetadata(e) => e.fmt(f),
            Error::UnsupportedArch(e) => e.fmt(f),
            Error::InvalidSetting {
                variable,
                value,
                allowed,
            } => write!(
                f,
                "invalid {variable}={value:?}; allowed values: {} (unset or empty means the default)",
                allowed.join(", ")
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::NotFound(e) => Some(e),
            Error::CompatibilityCheck(e) => Some(e),
            Error::CompatibilityInsufficientMetadata(e) => Some(e),
            Error::UnsupportedArch(e) => Some(e),
            Error::InvalidSetting { .. } => None,
        }
    }
}

impl From<NotFoundError> for Error {
    fn from(e: NotFoundError) -> Self {
        Error::NotFound(e)
    }
}

impl From<CompatibilityCheckError> for Error {
    fn from(e: CompatibilityCheckError) -> Self {
        Error::CompatibilityCheck(e)
    }
}

impl From<CompatibilityInsufficientMetadataError> for Error {
    fn from(e: CompatibilityInsufficientMetadataError) -> Self {
        Error::CompatibilityInsufficientMetadata(e)
    }
}

impl From<UnsupportedArchError> for Error {
    fn from(e: UnsupportedArchError) -> Self {
        Error::UnsupportedArch(e)
    }
}
