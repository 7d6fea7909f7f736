//! Raw bindings to NVIDIA's CUDA libraries, loaded at run time: the `cuda.bindings` layer.
//!
//! One module per library, generated from the vendored CUDA 13 headers by `cargo xtask bindgen`:
//! [`driver`] (cuda.h, cudaTypedefs.h, the profiler), [`runtime`] (cuda_runtime_api.h),
//! [`nvrtc`], [`nvjitlink`], [`nvvm`], [`cufile`], [`nvml`] and [`nccl`] (from NCCL's own wheel,
//! `nvidia-nccl-cu13`). Every function, type and constant
//! of those headers is here; C enums are `#[repr(transparent)]` newtypes, because a newer library
//! may return a value the headers never listed.
//!
//! Nothing is linked at build time. A library is opened on the first call into it, at the path
//! `cuda-pathfinder` finds; each function is resolved on its first call and called through a
//! cached pointer afterwards (one atomic load, then the indirect call). Driver functions are
//! resolved with `cuGetProcAddress_v2` by base name and CUDA version, so one build serves CUDA 12
//! and CUDA 13 drivers; set `CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1` to bind the
//! per-thread-default-stream variants instead, as CUDA Python does.
//!
//! Nothing panics when something is missing. Functions that return a status code return an
//! encoded error instead, and `.result()` turns any status into a `Result` whose error names the
//! value, describes it and, for a loading failure, says what was searched or which driver version
//! the function needs:
//!
//! ```no_run
//! use cuda_sys::driver;
//!
//! fn device_count() -> Result<i32, cuda_sys::DriverError> {
//!     let mut count = 0;
//!     // SAFETY: `count` is a valid place for the driver to write an int.
//!     unsafe {
//!         driver::cuInit(0).result()?;
//!         driver::cuDeviceGetCount(&mut count).result()?;
//!     }
//!     Ok(count)
//! }
//! ```
//!
//! The names and descriptions of every status value come from the header comments, so an error
//! prints in full even when its library could not be loaded.

mod error;
#[rustfmt::skip]
mod generated;
mod loader;

pub use error::{
    CuFileError, DriverError, Error, NcclError, NvJitLinkError, NvmlError, NvrtcError, NvvmError, RuntimeError,
    StatusInfo,
};
pub use generated::{cufile, driver, nccl, nvjitlink, nvml, nvrtc, nvvm, runtime, HEADER_CUDA_VERSION};
pub use loader::{
    per_thread_default_stream, per_thread_from_env_value, FnInfo, Library, LibraryId, LoadError, LoadErrorKind,
    StatusCode, PER_THREAD_DEFAULT_STREAM_VAR,
};
