//! Status codes as Rust errors, with names and descriptions that need no library loaded.

use crate::loader::{LoadError, StatusCode};
use std::fmt;

/// The name and description of one status value, from the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusInfo {
    pub value: i64,
    pub name: &'static str,
    pub description: &'static str,
}

impl StatusInfo {
    /// The entry for `value` in a table sorted by value.
    pub fn find(table: &'static [StatusInfo], value: i64) -> Option<&'static StatusInfo> {
        table.binary_search_by_key(&value, |s| s.value).ok().map(|i| &table[i])
    }
}

macro_rules! status_error {
    ($(#[$doc:meta])* $error:ident, $status:ty, $enum:ty, $module:ident, $success:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $error(pub $status);

        impl $error {
            /// The status value.
            pub fn code(&self) -> $status {
                self.0
            }

            /// The value's name in the header (`UNKNOWN` for a value the headers do not list,
            /// `LOAD_ERROR` when the function could not be loaded).
            pub fn name(&self) -> &'static str {
                if self.load_error().is_some() {
                    return "LOAD_ERROR";
                }
                self.status_enum().name().unwrap_or("UNKNOWN")
            }

            /// The header's description of the value.
            pub fn description(&self) -> String {
                if let Some(e) = self.load_error() {
                    return e.to_string();
                }
                self.status_enum()
                    .description()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("a status value ({}) the headers do not list; the library may be newer than these bindings", self.raw()))
            }

            /// Set when the function could not be loaded rather than failing in the library.
            pub fn load_error(&self) -> Option<LoadError> {
                self.0.load_error()
            }
        }

        impl fmt::Display for $error {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.load_error() {
                    Some(e) => fmt::Display::fmt(&e, f),
                    None => write!(f, "{} ({}): {}", self.name(), self.raw(), self.description()),
                }
            }
        }

        impl fmt::Debug for $error {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($error), self)
            }
        }

        impl std::error::Error for $error {}

        impl From<$error> for Error {
            fn from(e: $error) -> Error {
                Error::$module(e)
            }
        }
    };
}

macro_rules! enum_status {
    ($error:ident, $enum:ty, $success:ident, $module:ident) => {
        impl StatusCode for $enum {
            fn from_load_error(error: LoadError) -> Self {
                Self(error.to_status() as _)
            }
            fn load_error(&self) -> Option<LoadError> {
                LoadError::from_status(self.0 as u32)
            }
        }

        impl $enum {
            /// `Ok(())` for success, else the error with its name and description.
            #[inline]
            pub fn result(self) -> Result<(), $error> {
                if self == <$enum>::$success {
                    Ok(())
                } else {
                    Err($error(self))
                }
            }
        }

        impl $error {
            fn status_enum(&self) -> $enum {
                self.0
            }
            fn raw(&self) -> i64 {
                self.0 .0 as i64
            }
        }
    };
}

status_error!(
    /// A `CUresult` other than `CUDA_SUCCESS`.
    DriverError, crate::driver::CUresult, crate::driver::cudaError_enum, Driver, CUDA_SUCCESS
);
enum_status!(DriverError, crate::driver::cudaError_enum, CUDA_SUCCESS, Driver);

status_error!(
    /// A `cudaError_t` other than `cudaSuccess`.
    RuntimeError, crate::runtime::cudaError_t, crate::runtime::cudaError, Runtime, cudaSuccess
);
enum_status!(RuntimeError, crate::runtime::cudaError, cudaSuccess, Runtime);

status_error!(
    /// An `nvrtcResult` other than `NVRTC_SUCCESS`.
    NvrtcError, crate::nvrtc::nvrtcResult, crate::nvrtc::nvrtcResult, Nvrtc, NVRTC_SUCCESS
);
enum_status!(NvrtcError, crate::nvrtc::nvrtcResult, NVRTC_SUCCESS, Nvrtc);

status_error!(
    /// An `nvJitLinkResult` other than `NVJITLINK_SUCCESS`.
    NvJitLinkError, crate::nvjitlink::nvJitLinkResult, crate::nvjitlink::nvJitLinkResult, NvJitLink, NVJITLINK_SUCCESS
);
enum_status!(
    NvJitLinkError,
    crate::nvjitlink::nvJitLinkResult,
    NVJITLINK_SUCCESS,
    NvJitLink
);

status_error!(
    /// An `nvvmResult` other than `NVVM_SUCCESS`.
    NvvmError, crate::nvvm::nvvmResult, crate::nvvm::nvvmResult, Nvvm, NVVM_SUCCESS
);
enum_status!(NvvmError, crate::nvvm::nvvmResult, NVVM_SUCCESS, Nvvm);

status_error!(
    /// An `nvmlReturn_t` other than `NVML_SUCCESS`.
    NvmlError, crate::nvml::nvmlReturn_t, crate::nvml::nvmlReturn_enum, Nvml, NVML_SUCCESS
);
enum_status!(NvmlError, crate::nvml::nvmlReturn_enum, NVML_SUCCESS, Nvml);

status_error!(
    /// An `ncclResult_t` other than `ncclSuccess`.
    NcclError, crate::nccl::ncclResult_t, crate::nccl::ncclResult_t, Nccl, ncclSuccess
);
enum_status!(NcclError, crate::nccl::ncclResult_t, ncclSuccess, Nccl);

status_error!(
    /// A `CUfileError_t` whose `err` is not `CU_FILE_SUCCESS` (its `cu_err` may hold a driver error).
    CuFileError, crate::cufile::CUfileError_t, crate::cufile::CUfileOpError, CuFile, CU_FILE_SUCCESS
);

impl StatusCode for crate::cufile::CUfileError_t {
    fn from_load_error(error: LoadError) -> Self {
        crate::cufile::CUfileError_t {
            err: crate::cufile::CUfileOpError(error.to_status() as _),
            cu_err: crate::cufile::CUresult::CUDA_SUCCESS,
        }
    }
    fn load_error(&self) -> Option<LoadError> {
        LoadError::from_status(self.err.0)
    }
}

impl crate::cufile::CUfileError_t {
    /// `Ok(())` for success, else the error with its name and description.
    #[inline]
    pub fn result(self) -> Result<(), CuFileError> {
        if self.err == crate::cufile::CUfileOpError::CU_FILE_SUCCESS {
            Ok(())
        } else {
            Err(CuFileError(self))
        }
    }
}

impl CuFileError {
    fn status_enum(&self) -> crate::cufile::CUfileOpError {
        self.0.err
    }
    fn raw(&self) -> i64 {
        self.0.err.0 as i64
    }
}

/// Any error the raw bindings report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Driver(DriverError),
    Runtime(RuntimeError),
    Nvrtc(NvrtcError),
    NvJitLink(NvJitLinkError),
    Nvvm(NvvmError),
    CuFile(CuFileError),
    Nvml(NvmlError),
    Nccl(NcclError),
    /// A library or function could not be loaded (from a binding that returns no status code).
    Load(LoadError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Driver(e) => e.fmt(f),
            Error::Runtime(e) => e.fmt(f),
            Error::Nvrtc(e) => e.fmt(f),
            Error::NvJitLink(e) => e.fmt(f),
            Error::Nvvm(e) => e.fmt(f),
            Error::CuFile(e) => e.fmt(f),
            Error::Nvml(e) => e.fmt(f),
            Error::Nccl(e) => e.fmt(f),
            Error::Load(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

impl From<LoadError> for Error {
    fn from(e: LoadError) -> Error {
        Error::Load(e)
    }
}
