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
}

impl CudaError {
    /// The driver's status, for driver errors.
    pub fn driver_status(&self) -> Option<cuda_sys::driver::CUresult> {
        match self {
            CudaError::Driver { source, .. } => Some(source.code()),
            _ => None,
        }
    }

    /// The loading failure behind the error, when a library or function could not be loaded
    /// (no driver installed, a driver too old for the function, ...).
    pub fn load_error(&self) -> Option<cuda_sys::LoadError> {
        match self {
            CudaError::Driver { source, .. } => source.load_error(),
            CudaError::Nvml { source, .. } => source.load_error(),
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

impl Check for cuda_sys::nvml::nvmlReturn_t {
    #[inline]
    fn check(self, call: &'static str) -> Result<()> {
        self.result().map_err(|source| CudaError::Nvml { call, source })
    }
}
