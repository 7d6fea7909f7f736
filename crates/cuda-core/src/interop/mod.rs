//! Bridges to other Rust CUDA libraries, each behind a cargo feature that is off by default.
//!
//! - `cudarc` (feature `cudarc`): cudarc's streams as [`Stream`](crate::Stream)s and back
//!   (`unsafe`: neither library sees the other's captures), its device slices taken as
//!   [`Buffer`](crate::Buffer)s and [`StridedMemoryView`](crate::StridedMemoryView)s, and buffers
//!   handed to cudarc as slices, without copies. The `cudarc` crate is re-exported here, so that
//!   both sides name the same version.
//!
//! Interop uses devices, streams and memory; nothing below it uses interop.

#[cfg(feature = "cudarc")]
mod cudarc_bridge;

#[cfg(feature = "cudarc")]
pub use ::cudarc;
#[cfg(feature = "cudarc")]
pub use cudarc_bridge::{CudarcHandoverError, CudarcTakeError};
