//! The error type of `cuda-core`.

/// What went wrong in a CUDA call, with the call that failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// A driver call returned an error; `call` names it.
    #[error("{call}: {source}")]
    Driver {
        call: &'static str,
        #[source]
        source: cuda_sys::DriverError,
    },
    /// An NVML call returned an error.
    #[error("{call}: {source}")]
    Nvml {
        call: &'static str,
        #[source]
        source: cuda_sys::NvmlError,
    },
    /// A compiler (NVRTC or libNVVM) rejected the program; `log` is the compiler's full log.
    #[error("{backend} compilation of {program} failed: {status}\n{log}")]
    Compile {
        backend: &'static str,
        program: String,
        status: String,
        log: String,
    },
    /// A linker (nvJitLink or the driver's) failed; `log` is its full error log.
    #[error("{backend} link of {name} failed: {status}\n{log}")]
    Link {
        backend: &'static str,
        name: String,
        status: String,
        log: String,
    },
    /// A compiler library call other than the compile itself failed.
    #[error("{call}: {message}")]
    Toolchain { call: &'static str, message: String },
    /// An argument or option is not valid; the message says which and why.
    #[error("{0}")]
    InvalidArgument(String),
    /// The program cache could not be read or written.
    #[error("program cache: {0}")]
    Cache(String),
}

impl CudaError {
    /// The driver's status, for driver errors.
    pub fn driver_status(&self) -> Option<cuda_sys::driver::CUresult> {
        match self {
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
        matches!(self, CudaError::Compile { .. })
    }

    /// The loading failure behind the error, when a library or function could not be loaded
    /// (no driver installed, a driver too old for the function, ...).
    pub fn load_error(&self) -> Option<cuda_sys::LoadError> {
        match self {
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

pub(crate) fn record_drop_error(e: CudaError) {
    // A subscriber's panic must not unwind out of here: callers record, then keep (forget)
    // what may still be in use.
    #[cfg(feature = "tracing")]
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        event!(warn, error = %e, "an error while releasing a resource (kept for cuda_core::take_drop_errors)");
    }));
    let mut errors = DROP_ERRORS.lock().unwrap_or_else(|p| p.into_inner());
    if errors.len() == 64 {
        errors.remove(0);
    }
    errors.push(e);
}

/// The errors that releasing resources in `Drop` met since the last call (a `Drop` cannot
/// return them). Call it where a program checks its state, such as after a synchronisation.
pub fn take_drop_errors() -> Vec<CudaError> {
    std::mem::take(&mut *DROP_ERRORS.lock().unwrap_or_else(|p| p.into_inner()))
}
