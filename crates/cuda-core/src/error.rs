//! The error type of `cuda-core`, its kinds ([`ErrorKind`]), and the warnings channel
//! (`warnings`: [`Warning`], [`set_warning_handler`]).

mod warnings;

pub(crate) use warnings::{
    any_held, deliver_held, forget_payload, on_driver_thread, set_on_driver_thread, warn, warn_once,
};
pub use warnings::{set_warning_handler, Warning, WarningCategory, WarningHandler};

/// What went wrong in a CUDA call, with the call that failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// A driver call returned an error; `call` names it.
    #[error("{call}: {source}")]
    Driver {
        /// The driver function that failed, e.g. `"cuMemAlloc"`.
        call: &'static str,
        /// The driver's status (`CUresult`), with its name and description.
        #[source]
        source: cuda_sys::DriverError,
    },
    /// An NVML call returned an error.
    #[error("{call}: {source}")]
    Nvml {
        /// The NVML function that failed, e.g. `"nvmlDeviceGetFanSpeed"`.
        call: &'static str,
        /// NVML's status (`nvmlReturn_t`); [`CudaError::nvml_kind`] sorts it into
        /// `cuda.core.system`'s exception classes.
        #[source]
        source: cuda_sys::NvmlError,
    },
    /// A compiler (NVRTC or libNVVM) rejected the program; `log` is the compiler's full log.
    #[error("{backend} compilation of {program} failed: {status}\n{log}")]
    Compile {
        /// The compiler: `"NVRTC"` or `"NVVM"`.
        backend: &'static str,
        /// The program's name ([`ProgramOptions::name`](crate::ProgramOptions::name)).
        program: String,
        /// The compiler's status, as text.
        status: String,
        /// The compiler's log: the diagnostics to show the user.
        log: String,
    },
    /// A linker (nvJitLink or the driver's) failed; `log` is its full error log.
    #[error("{backend} link of {name} failed: {status}\n{log}")]
    Link {
        /// The linker: `"nvJitLink"` or `"driver"`.
        backend: &'static str,
        /// The link's name, and the input being added when adding it failed.
        name: String,
        /// The linker's status, as text.
        status: String,
        /// The linker's error log (for nvJitLink option errors, the options given).
        log: String,
    },
    /// A compiler library call other than the compile itself failed.
    #[error("{call}: {message}")]
    Toolchain {
        /// The library function that failed, e.g. `"nvrtcCreateProgram"` or `"ncclCommInitRank"`.
        call: &'static str,
        /// What the library said went wrong.
        message: String,
    },
    /// An argument or option has a value that is not valid; the message says which and why
    /// (`cuda.core`'s `ValueError`; [`ErrorKind::Value`]).
    #[error("{0}")]
    InvalidArgument(String),
    /// The program cache could not be read or written.
    #[error("program cache: {0}")]
    Cache(String),
    /// An argument is of a kind the operation does not take (`cuda.core`'s `TypeError`: an
    /// unsupported kernel argument, an IPC event with timing, an imported pool asked to
    /// allocate); [`ErrorKind::Type`].
    #[error("{0}")]
    InvalidType(String),
    /// The object is not in a state that allows the operation (`cuda.core`'s `RuntimeError`:
    /// closed, not capturing, not initialised, called from a driver thread);
    /// [`ErrorKind::Runtime`].
    #[error("{0}")]
    InvalidState(String),
    /// The installed driver, bindings or device cannot do it (`cuda.core`'s
    /// `NotImplementedError`); [`ErrorKind::NotImplemented`].
    #[error("{0}")]
    NotSupported(String),
    /// An error with a note on what else went wrong while handling it (`cuda.core` adds such
    /// notes to an exception's `__notes__`: a context that could not be made current again
    /// after the operation failed). Every question asked of the error is answered by `source`.
    #[error("{source}\n(note: {note})")]
    Noted {
        /// The error the operation itself ended with.
        #[source]
        source: Box<CudaError>,
        /// What else went wrong while handling it.
        note: String,
    },
}

/// What kind of error a [`CudaError`] is, in the terms of `cuda.core`'s exception classes
/// ([`CudaError::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A driver call failed (`CUDAError`).
    Driver,
    /// An NVML call failed (`cuda.core.system`'s `NvmlError`).
    Nvml,
    /// A compiler rejected the program (`NVRTCError`, `nvvmError`).
    Compile,
    /// A linker failed (`nvJitLinkError`, or `CUDAError` of the driver's linker).
    Link,
    /// A compiler library call other than the compile failed.
    Toolchain,
    /// A value is out of range or inconsistent (`ValueError`).
    Value,
    /// An argument is of the wrong kind (`TypeError`).
    Type,
    /// The object's state does not allow the operation (`RuntimeError`).
    Runtime,
    /// The driver, bindings or device are too old or lack the feature (`NotImplementedError`).
    NotImplemented,
    /// The program cache failed (an `OSError` in `cuda.core`).
    Cache,
}

impl CudaError {
    /// What kind of error this is, as `cuda.core`'s exception classes say it (a value error, a
    /// type error, a runtime error, not implemented, a driver error, ...).
    pub fn kind(&self) -> ErrorKind {
        match self {
            CudaError::Driver { .. } => ErrorKind::Driver,
            CudaError::Nvml { .. } => ErrorKind::Nvml,
            CudaError::Compile { .. } => ErrorKind::Compile,
            CudaError::Link { .. } => ErrorKind::Link,
            CudaError::Toolchain { .. } => ErrorKind::Toolchain,
            CudaError::InvalidArgument(_) => ErrorKind::Value,
            CudaError::Cache(_) => ErrorKind::Cache,
            CudaError::InvalidType(_) => ErrorKind::Type,
            CudaError::InvalidState(_) => ErrorKind::Runtime,
            CudaError::NotSupported(_) => ErrorKind::NotImplemented,
            CudaError::Noted { source, .. } => source.kind(),
        }
    }

    /// The error without its notes (itself when it has none).
    pub fn without_notes(&self) -> &CudaError {
        match self {
            CudaError::Noted { source, .. } => source.without_notes(),
            other => other,
        }
    }

    /// The notes added to the error while it was handled, oldest first.
    pub fn notes(&self) -> Vec<&str> {
        match self {
            CudaError::Noted { source, note } => {
                let mut notes = source.notes();
                notes.push(note);
                notes
            }
            _ => Vec::new(),
        }
    }

    /// The error with `note` added (`cuda.core`'s `add_note`).
    pub fn with_note(self, note: impl Into<String>) -> CudaError {
        CudaError::Noted {
            source: Box::new(self),
            note: note.into(),
        }
    }

    /// The driver's status, for driver errors.
    pub fn driver_status(&self) -> Option<cuda_sys::driver::CUresult> {
        match self.without_notes() {
            CudaError::Driver { source, .. } => Some(source.code()),
            _ => None,
        }
    }

    /// Whether the driver ran out of memory.
    pub fn is_out_of_memory(&self) -> bool {
        self.driver_status() == Some(cuda_sys::driver::CUresult::CUDA_ERROR_OUT_OF_MEMORY)
    }

    /// Whether a kernel failed while running (an illegal address, a trap or assertion, a timeout):
    /// such errors are sticky, the context is unusable afterwards and every later call in it
    /// fails too; the process must create a new context (or exit).
    pub fn is_launch_failure(&self) -> bool {
        use cuda_sys::driver::CUresult as R;
        matches!(
            self.driver_status(),
            Some(
                R::CUDA_ERROR_LAUNCH_FAILED
                    | R::CUDA_ERROR_ILLEGAL_ADDRESS
                    | R::CUDA_ERROR_LAUNCH_TIMEOUT
                    | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
                    | R::CUDA_ERROR_MISALIGNED_ADDRESS
                    | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
                    | R::CUDA_ERROR_INVALID_PC
                    | R::CUDA_ERROR_HARDWARE_STACK_ERROR
                    | R::CUDA_ERROR_ASSERT
            )
        )
    }

    /// Whether a compile failed (the error then carries the compiler log).
    pub fn is_compile_error(&self) -> bool {
        matches!(self.without_notes(), CudaError::Compile { .. })
    }

    /// The loading failure behind the error, when a library or function could not be loaded
    /// (no driver installed, a driver too old for the function, ...).
    pub fn load_error(&self) -> Option<cuda_sys::LoadError> {
        match self.without_notes() {
            CudaError::Driver { source, .. } => source.load_error(),
            CudaError::Nvml { source, .. } => source.load_error(),
            _ => None,
        }
    }
}

/// `Result` with [`CudaError`].
pub type Result<T, E = CudaError> = std::result::Result<T, E>;

pub(crate) trait Check {
    fn check(self, call: &'static str) -> Result<()>;
}

impl Check for cuda_sys::driver::CUresult {
    #[inline]
    fn check(self, call: &'static str) -> Result<()> {
        self.result().map_err(|source| CudaError::Driver { call, source })
    }
}

macro_rules! toolchain_check {
    ($($status:ty),*) => {$(
        impl Check for $status {
            #[inline]
            fn check(self, call: &'static str) -> Result<()> {
                self.result().map_err(|e| CudaError::Toolchain { call, message: e.to_string() })
            }
        }
    )*};
}

toolchain_check!(
    cuda_sys::nvrtc::nvrtcResult,
    cuda_sys::nvjitlink::nvJitLinkResult,
    cuda_sys::nvvm::nvvmResult
);

impl Check for cuda_sys::nvml::nvmlReturn_t {
    #[inline]
    fn check(self, call: &'static str) -> Result<()> {
        self.result().map_err(|source| CudaError::Nvml { call, source })
    }
}

/// Errors raised while dropping resources, kept until [`take_drop_errors`] collects them (at most
/// 64; older ones give way to newer ones).
static DROP_ERRORS: std::sync::Mutex<Vec<CudaError>> = std::sync::Mutex::new(Vec::new());

/// Whether `e` says the driver is shutting down (`CUDA_ERROR_DEINITIALIZED`): releases that fail
/// so at exit are not reported, as `cuda.core` never reports them.
pub(crate) fn is_driver_shutdown(e: &CudaError) -> bool {
    e.driver_status() == Some(cuda_sys::driver::CUresult::CUDA_ERROR_DEINITIALIZED)
}

/// Records an error a `Drop` (or a release on the release thread) met: kept for
/// [`take_drop_errors`] and delivered as a [`WarningCategory::Cuda`] warning (`cuda.core`'s
/// `CUDAWarning`) to the installed handler and as a `tracing` event. Errors saying that the
/// driver is shutting down are dropped.
pub(crate) fn record_drop_error(e: CudaError) {
    if is_driver_shutdown(&e) {
        return;
    }
    {
        let mut errors = DROP_ERRORS.lock().unwrap_or_else(|p| p.into_inner());
        if errors.len() == 64 {
            errors.remove(0);
        }
        errors.push(e.clone());
    }
    // (After the lock: a handler may call `take_drop_errors`.)
    warn(Warning::with_error(
        WarningCategory::Cuda,
        format!("an error while releasing a resource: {e}"),
        e,
    ));
}

/// The errors that releasing resources in `Drop` met since the last call (a `Drop` cannot
/// return them). Call it where a program checks its state, such as after a synchronisation;
/// or install a [`set_warning_handler`] to hear of each as it happens.
pub fn take_drop_errors() -> Vec<CudaError> {
    std::mem::take(&mut *DROP_ERRORS.lock().unwrap_or_else(|p| p.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_say_what_cuda_core_exception_classes_say() {
        assert_eq!(CudaError::InvalidArgument("x".into()).kind(), ErrorKind::Value);
        assert_eq!(CudaError::InvalidType("x".into()).kind(), ErrorKind::Type);
        assert_eq!(CudaError::InvalidState("x".into()).kind(), ErrorKind::Runtime);
        assert_eq!(CudaError::NotSupported("x".into()).kind(), ErrorKind::NotImplemented);
        let driver = CudaError::Driver {
            call: "cuMemAlloc",
            source: cuda_sys::driver::CUresult::CUDA_ERROR_OUT_OF_MEMORY
                .result()
                .unwrap_err(),
        };
        assert_eq!(driver.kind(), ErrorKind::Driver);
        // A note changes no answer, and is kept.
        let noted = driver.with_note("restoring the previous context failed too");
        assert_eq!(noted.kind(), ErrorKind::Driver);
        assert!(noted.is_out_of_memory());
        assert_eq!(noted.notes(), vec!["restoring the previous context failed too"]);
        assert!(noted.to_string().contains("cuMemAlloc") && noted.to_string().contains("restoring"));
    }
}
