//! The idiomatic, safe CUDA API for Rust, after NVIDIA's `cuda.core`.
//!
//! Names follow `cuda.core` so its documentation maps one to one (see
//! `docs/porting-from-cuda-python.md`). Everything here is built on the raw bindings of
//! [`cuda_sys`], which load the CUDA libraries at run time: a program using this crate builds
//! and starts on machines without CUDA, and reports what is missing as an error.
//!
//! What is here: run-time compilation ([`Program`], [`ProgramOptions`], [`Linker`],
//! [`LinkerOptions`], [`ObjectCode`], [`Kernel`], program caches in memory and on disk), devices,
//! contexts, streams and events ([`Device`], [`Context`], [`Stream`], [`Event`]), launches
//! ([`launch`], [`TypedKernel`]), memory resources and buffers ([`MemoryResource`], [`Buffer`],
//! typed buffers and views ([`TypedBuffer`], [`BufferView`], [`ReadOnlyView`]), pools, pinned,
//! managed, virtual and graph memory, IPC), CUDA graphs ([`graph`]), [`system`]
//! (driver and NVML queries) and the [`CudaError`] type.
//!
//! ```no_run
//! let (major, minor) = cuda_core::system::get_user_mode_driver_version()?;
//! println!("CUDA driver {major}.{minor}, {} device(s)", cuda_core::system::get_num_devices()?);
//! # Ok::<(), cuda_core::CudaError>(())
//! ```

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
    PinnedMemoryResource, Pod, Region2D, Region3D, VirtualMemoryResource, VirtualMemoryResourceOptions,
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
pub use stream::{Completion, Event, EventOptions, IpcEventDescriptor, Stream, StreamOptions};

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
        send_and_sync::<crate::Kernel>();
        send_and_sync::<crate::graph::GraphDefinition>();
        send_and_sync::<crate::graph::GraphNode>();
        send_and_sync::<crate::graph::Graph>();
        send::<crate::Linker>();
    }
}
