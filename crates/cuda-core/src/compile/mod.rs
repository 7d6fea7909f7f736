//! Run-time compilation and loading: [`Program`] (CUDA C++ through NVRTC, PTX through the linker,
//! NVVM IR through libNVVM) with [`ProgramOptions`], [`Linker`] with [`LinkerOptions`],
//! [`ObjectCode`] (validated code images, loaded lazily) and its [`Kernel`]s, and program caches
//! (`cache`: in memory and on disk).
//!
//! - `program`, `program_options`: compiling;
//! - `linker`: nvJitLink, with the driver's linker as the fallback (`linker::driver`);
//! - `object_code`: code and its kernels; `object_code::image` checks every image before the
//!   driver reads it;
//! - `cache`: [`ProgramCache`], [`InMemoryProgramCache`], [`FileStreamProgramCache`];
//! - `ffi`: NUL-checked C strings, compiler logs, the default architecture.
//!
//! Compilation uses the error type, the release thread and devices (for the default
//! architecture) only; it knows nothing of streams or memory. Launches and graphs use its
//! kernels.

mod cache;
mod debug_source;
mod ffi;
mod linker;
mod nvrtc;
mod object_code;
mod program;
mod program_options;
mod ptx_isa;

pub use cache::{CacheEntry, FileStreamProgramCache, InMemoryProgramCache, ProgramCache};
pub use linker::{Linker, LinkerBackend, LinkerHandle, LinkerOptions};
pub use object_code::{Code, CodeType, Kernel, LibraryModule, ObjectCode, ParamInfo};
pub use program::{PchStatus, Program, ProgramHandle, SourceType};
pub use program_options::ProgramOptions;
