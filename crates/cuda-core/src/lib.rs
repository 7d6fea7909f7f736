//! The idiomatic, safe CUDA API for Rust, after NVIDIA's `cuda.core`.
//!
//! Names follow `cuda.core` so its documentation maps one to one (see
//! `docs/porting-from-cuda-python.md`). Everything here is built on the raw bindings of
//! [`cuda_sys`], which load the CUDA libraries at run time: a program using this crate builds
//! and starts on machines without CUDA, and reports what is missing as an error. The guide
//! (`docs/guide/`, chapters named below) teaches it from the first kernel on.
//!
//! # Map of the API
//!
//! | concern | key items | guide chapter |
//! | --- | --- | --- |
//! | devices and contexts | [`Device`] (`set_current`, `create_stream`, `allocate`, `properties`), [`Context`], [`device_count`]; green contexts: [`DeviceResources`], [`SMResource`], [`ContextOptions`] | 1, 7 |
//! | compiling and loading | [`Program`], [`ProgramOptions`], [`Linker`], [`ObjectCode`], [`Kernel`]; caches [`FileStreamProgramCache`], [`InMemoryProgramCache`] | 1, 9 |
//! | launching | [`TypedKernel`] (`kernel.typed::<(..)>()?.launch`), [`launch`], [`LaunchConfig`], [`DeviceRepr`] (derive it for `#[repr(C)]` structs) | 1 |
//! | streams and events | [`Stream`] (`sync`, `wait_event`, `wait`, `record_new`, `launch_host_func`), [`Event`] (`elapsed_time_since`), [`StreamOptions`], [`EventOptions`] | 2 |
//! | memory | resources [`DeviceMemoryResource`], [`PinnedMemoryResource`], [`ManagedMemoryResource`], [`VirtualMemoryResource`], [`GraphMemoryResource`] (trait [`MemoryResource`]); [`Buffer`], [`TypedBuffer`], views [`BufferView`], [`ReadOnlyView`]; host access (`host_slice_mut`); `Buffer::assume_ordered_on` | 3 |
//! | graphs | [`Stream::capture_graph`] (capture in one call), [`graph::GraphBuilder`] (step by step, conditionals), [`graph::GraphDefinition`] (explicit), [`graph::Graph`] (launch, `set_kernel_args`, `update`) | 4 |
//! | async | futures: [`Stream::synchronized`] and [`Event::completed`] ([`Completion`]), `Buffer::to_vec_async` ([`HostCopy`]), `copy_from_vec_async` | 5 |
//! | interop | [`StridedMemoryView`], [`dlpack`] (`Buffer::to_dlpack`, `from_dlpack`), `ndarray` (feature), [`interop`] (cudarc, feature) | 6 |
//! | several GPUs and processes | `Device::all`, `Buffer::copy_to_peer`, `enable_peer_access`, pool peer access; IPC: [`ipc`], [`IpcBufferDescriptor`] | 7 |
//! | errors | [`CudaError`] (`is_out_of_memory`, `is_launch_failure`, `is_compile_error`), [`take_drop_errors`], [`pending_releases`]; `tracing` spans and events (feature, on by default) | 8 |
//! | the rest of `cuda.core` | [`system`] (driver and NVML queries), [`checkpoint`], [`texture`], [`graphics`] (OpenGL/EGL), TMA ([`TensorMapDescriptor`]) | porting table |
//!
//! Chapters (in `docs/guide/`): 1 the first kernel, 2 streams and events, 3 memory, 4 graphs,
//! 5 async, 6 interop, 7 several GPUs, 8 errors and debugging, 9 performance. Each has an
//! example program, `examples/guide_*.rs`.
//!
//! Two costs to know from the start: a buffer's first use on a stream other than the one it was
//! allocated on waits for everything queued on that stream so far (`Buffer::assume_ordered_on`
//! skips it where you ordered the streams yourself), and copies with a borrowed host slice
//! (`*_blocking`, `copy_from_host`, `to_vec`) block until done, where copies between buffers,
//! pinned host memory included, are stream-ordered.
//!
//! ```no_run
//! let (major, minor) = cuda_core::system::get_user_mode_driver_version()?;
//! println!("CUDA driver {major}.{minor}, {} device(s)", cuda_core::system::get_num_devices()?);
//! # Ok::<(), cuda_core::CudaError>(())
//! ```

#![deny(missing_docs)]

// The derive names `::cuda_core`; make that path work inside this crate too.
extern crate self as cuda_core;

#[macro_use]
mod trace;

pub mod checkpoint;
mod compile;
mod device;
mod error;
pub mod graph;
pub mod interop;
mod launch;
mod memory;
pub mod nccl;
mod reaper;
mod stream;
pub mod system;

pub use compile::{LibraryModule, LinkerHandle, ProgramHandle};

pub use compile::{
    CacheEntry, Code, CodeType, FileStreamProgramCache, InMemoryProgramCache, Kernel, Linker, LinkerBackend,
    LinkerOptions, ObjectCode, ParamInfo, PchStatus, Program, ProgramCache, ProgramOptions, SourceType,
};
pub use cuda_core_derive::DeviceRepr;
pub use device::{device_count, ComputeCapability, Context, ContextFlags, Device, DeviceProperties};
pub use device::{
    ContextOptions, ContextResource, DeviceResources, PerGroup, SMResource, SMResourceFlags, SMResourceOptions,
    WorkqueueResource, WorkqueueResourceOptions, WorkqueueSharingScope,
};
pub use error::{
    set_warning_handler, take_drop_errors, CudaError, ErrorKind, Result, Warning, WarningCategory, WarningHandler,
};
pub use launch::{
    launch, ArgFor, ArgsFor, DeviceRepr, Dim3, KernelArg, KernelArgs, LaunchConfig, MaxPotentialBlockSize, TypedKernel,
};
pub use memory::dlpack;
pub use memory::graphics;
pub use memory::graphics::{GraphicsRegisterFlags, GraphicsResource};
pub use memory::ipc::fd as ipc;
pub use memory::texture;
pub use memory::{AllocateBuffer, PinnedMemoryKind, PortablePinnedMemoryResource, ReadOnlyView, TypedBuffer};
pub use memory::{AsStridedView, DType, Element, StridedMemoryView};
pub use memory::{BatchCopyOptions, CopyOptions, HostCopy, MemcpyOverlapMode, MemcpySrcAccessOrder};
pub use memory::{
    Buffer, BufferView, DeviceMemoryResource, DeviceMemoryResourceOptions, GraphMemoryResource, HostAllocFlags,
    IpcBufferDescriptor, LegacyPinnedMemoryResource, ManagedMemoryResource, MemoryLocation, MemoryResource,
    PinnedMemoryResource, Pod, Region2D, Region3D, SynchronousMemoryResource, VirtualMemoryResource,
    VirtualMemoryResourceOptions,
};
pub use memory::{
    IpcPoolResource, ManagedMemoryResourceOptions, MemoryPool, MemoryPoolAttributes, PinnedMemoryResourceOptions,
};
pub use memory::{
    TensorMapDataType, TensorMapDescriptor, TensorMapDescriptorOptions, TensorMapIm2ColWideMode,
    TensorMapIm2colOptions, TensorMapIm2colWideOptions, TensorMapInterleave, TensorMapL2Promotion, TensorMapOOBFill,
    TensorMapSwizzle,
};
pub use memory::{
    VirtualMemoryAccessType, VirtualMemoryAllocationType, VirtualMemoryGranularityType, VirtualMemoryHandleType,
    VirtualMemoryIpcDescriptor, VirtualMemoryLocationType,
};
pub use reaper::pending_releases;
pub use stream::{Completion, Event, EventOptions, IpcEventDescriptor, Stream, StreamOptions};

/// This crate's version (`cuda.core.__version__`), as Cargo knows it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The guide's chapters (`docs/guide/`), compiled as doc tests so that every Rust block in them
/// builds against this crate. Blocks that need a GPU are `no_run` here; the example each
/// chapter names runs the same code in the GPU bundle (`tests/guide.rs` checks they agree).
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../../docs/guide/01-first-kernel.md")]
    pub struct FirstKernel;
    #[doc = include_str!("../../../docs/guide/02-streams-and-events.md")]
    pub struct StreamsAndEvents;
    #[doc = include_str!("../../../docs/guide/03-memory.md")]
    pub struct Memory;
    #[doc = include_str!("../../../docs/guide/04-graphs.md")]
    pub struct Graphs;
    #[doc = include_str!("../../../docs/guide/05-async.md")]
    pub struct Async;
    #[cfg(all(feature = "ndarray", feature = "cudarc"))]
    #[doc = include_str!("../../../docs/guide/06-interop.md")]
    pub struct Interop;
    #[doc = include_str!("../../../docs/guide/07-multi-gpu.md")]
    pub struct MultiGpu;
    #[doc = include_str!("../../../docs/guide/08-errors-and-debugging.md")]
    pub struct ErrorsAndDebugging;
    #[doc = include_str!("../../../docs/guide/09-performance.md")]
    pub struct Performance;
}

#[cfg(test)]
mod version {
    #[test]
    fn the_crate_version_is_cargos() {
        assert_eq!(crate::VERSION, env!("CARGO_PKG_VERSION"));
        assert!(!crate::VERSION.is_empty());
    }
}

#[cfg(test)]
mod thread_safety {
    //! Which types cross threads: the compile-time half of the soundness table in
    //! `docs/architecture.md` (the types that must not are `compile_fail` doctests on them).

    fn send_and_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    #[test]
    fn shared_handles_are_send_and_sync() {
        send_and_sync::<crate::Device>();
        send_and_sync::<crate::Context>();
        send_and_sync::<crate::DeviceResources>();
        send_and_sync::<crate::SMResource>();
        send_and_sync::<crate::WorkqueueResource>();
        send_and_sync::<crate::ContextOptions>();
        send_and_sync::<crate::Stream>();
        send_and_sync::<crate::Event>();
        send_and_sync::<crate::Buffer>();
        send_and_sync::<crate::DeviceMemoryResource>();
        send_and_sync::<crate::PinnedMemoryResource>();
        send_and_sync::<crate::ManagedMemoryResource>();
        send_and_sync::<crate::VirtualMemoryResource>();
        send_and_sync::<crate::GraphMemoryResource>();
        send_and_sync::<crate::ObjectCode>();
        send_and_sync::<crate::Program>();
        send_and_sync::<crate::Kernel>();
        send_and_sync::<crate::graph::GraphDefinition>();
        send_and_sync::<crate::graph::GraphNode>();
        send_and_sync::<crate::graph::Graph>();
        send::<crate::Linker>();
    }
}
