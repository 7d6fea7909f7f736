//! The idiomatic, safe CUDA API for Rust, after NVIDIA's `cuda.core`.
//!
//! Names follow `cuda.core` so its documentation maps one to one (see
//! `docs/porting-from-cuda-python.md`). Everything here is built on the raw bindings of
//! [`cuda_sys`], which load the CUDA libraries at run time: a program using this crate builds
//! and starts on machines without CUDA, and reports what is missing as an error.
//!
//! What is here today: [`system`] (driver and NVML queries) and the [`CudaError`] type. Devices,
//! streams, memory, compilation and graphs follow (see the issues in the repository).
//!
//! ```no_run
//! let (major, minor) = cuda_core::system::get_user_mode_driver_version()?;
//! println!("CUDA driver {major}.{minor}, {} device(s)", cuda_core::system::get_num_devices()?);
//! # Ok::<(), cuda_core::CudaError>(())
//! ```

mod error;
pub mod system;

pub use error::{CudaError, Result};
