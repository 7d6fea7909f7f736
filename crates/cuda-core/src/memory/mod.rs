//! Memory: the [`MemoryResource`] trait and its resources, and [`Buffer`], a stream-ordered
//! allocation that frees itself.
//!
//! - `buffer`: [`Buffer`], [`BufferView`] and [`ReadOnlyView`] (element-indexed views; a kernel
//!   gets `*mut T` or `*const T`), safe host access to host-accessible memory, and what keeps a
//!   buffer's memory alive (the streams that used it, graphs holding it) until its free;
//! - `typed`: [`TypedBuffer`], a buffer of `len` elements of `T` allocated by element count
//!   from any resource ([`AllocateBuffer`]), with typed copies;
//! - `copy`: copies and fills (host, device, 2D, 3D, batched, peer), with checked regions;
//! - `pool`: [`MemoryPool`] (what every pool shares: attributes, sharing between processes),
//!   [`DeviceMemoryResource`] and [`PinnedMemoryResource`] (with [`PortablePinnedMemoryResource`],
//!   whatever pinned memory the driver offers);
//! - `legacy_pinned`, `managed`: [`LegacyPinnedMemoryResource`], [`ManagedMemoryResource`]
//!   (managed pools), [`MemoryLocation`] and managed-memory operations;
//! - `graph_memory`: [`GraphMemoryResource`];
//! - `vmm`: [`VirtualMemoryResource`];
//! - `ipc`: [`IpcBufferDescriptor`] and buffers shared between processes; `ipc::fd` passes file
//!   descriptors between processes (public as [`crate::ipc`]);
//! - `dlpack`: DLPack export and import of buffers (public as [`crate::dlpack`]);
//! - `strided`: [`StridedMemoryView`], typed strided views of buffers, DLPack tensors and host
//!   slices, and copies between them; TMA tensor maps of views ([`TensorMapDescriptor`]);
//! - `texture`: CUDA arrays, textures and surfaces (public as [`crate::texture`]).
//! - `graphics`: OpenGL and EGL interop, [`GraphicsResource`](graphics::GraphicsResource) (public as
//!   [`crate::graphics`]).
//!
//! Memory uses devices and streams (with the capture registry and graph core of
//! [`crate::stream`]); launches (buffers as kernel arguments) and graphs build on it.

mod buffer;
mod copy;
pub mod dlpack;
mod graph_memory;
pub mod graphics;
pub(crate) mod ipc;
mod legacy_pinned;
mod managed;
mod pool;
mod strided;
pub mod texture;
mod typed;
mod vmm;

pub(crate) use buffer::{enqueue_using, Holder, PointerInfo, SharedAllocation};
pub use buffer::{Buffer, BufferView, Pod, ReadOnlyView};
#[cfg(feature = "cudarc")]
pub(crate) use copy::wait_for_fence;
pub use copy::{BatchCopyOptions, CopyOptions, HostCopy, MemcpyOverlapMode, MemcpySrcAccessOrder, Region2D, Region3D};
pub use graph_memory::GraphMemoryResource;
pub use ipc::{IpcBufferDescriptor, IpcPoolResource};
pub use legacy_pinned::{HostAllocFlags, LegacyPinnedMemoryResource};
pub use managed::{ManagedMemoryResource, ManagedMemoryResourceOptions, MemoryLocation};
pub use pool::{
    DeviceMemoryResource, DeviceMemoryResourceOptions, MemoryPool, MemoryPoolAttributes, PinnedMemoryKind,
    PinnedMemoryResource, PinnedMemoryResourceOptions, PortablePinnedMemoryResource, SynchronousMemoryResource,
};
pub use strided::{AsStridedView, DType, Element, StridedMemoryView};
pub use strided::{
    TensorMapDataType, TensorMapDescriptor, TensorMapDescriptorOptions, TensorMapIm2ColWideMode,
    TensorMapIm2colOptions, TensorMapIm2colWideOptions, TensorMapInterleave, TensorMapL2Promotion, TensorMapOOBFill,
    TensorMapSwizzle,
};
pub use typed::{AllocateBuffer, TypedBuffer};
pub use vmm::{
    VirtualMemoryAccessType, VirtualMemoryAllocationType, VirtualMemoryGranularityType, VirtualMemoryHandleType,
    VirtualMemoryIpcDescriptor, VirtualMemoryLocationType, VirtualMemoryResource, VirtualMemoryResourceOptions,
};

use crate::device::Device;
use crate::stream::Stream;
use crate::Result;
use cuda_sys::driver;

/// Something that hands out memory, ordered on streams (`cuda.core`'s `MemoryResource`).
///
/// [`Buffer::allocate`] turns a resource into buffers that free themselves through
/// [`deallocate`](MemoryResource::deallocate). Safe code copies, fills and hands to the driver
/// as many bytes as a buffer says it has, on the host too when the resource says its memory is
/// host-accessible: so implementing the trait is `unsafe`, and these are the promises made.
///
/// # Safety
/// For a resource `r`:
/// - A pointer `p` returned by `r.allocate(size, stream)` is the start of at least `size` bytes
///   (at least one byte when `size` is 0) that belong to no other live allocation, usable by
///   work queued on `stream` after the call returns until `r.deallocate(p, size, s)` is called
///   and the work queued on `s` before that call is done. Kernels may use the memory when
///   [`is_device_accessible`](Self::is_device_accessible) says so, and the host may read and
///   write it through `p` when [`is_host_accessible`](Self::is_host_accessible) says so; it lies
///   on [`device`](Self::device) when that names a device. These answers never change.
/// - `deallocate` releases the memory no earlier than the work queued on its `stream` before the
///   call is done (stream-ordered, or by waiting for the stream first).
/// - When `stream` is being captured into a graph, `allocate` either returns memory that is
///   valid at once, or records a stream-ordered allocation on `stream` itself (graph memory,
///   which [`Buffer`] recognises and confines to that capture).
/// - [`ipc_pool`](Self::ipc_pool) names the pool `allocate` takes memory from, if it names one.
/// - [`is_managed`](Self::is_managed) is true only for managed memory (`cuMemAllocManaged`, or a
///   managed pool's): advice, prefetches and discards are given to the driver on its word.
/// - `allocate` and `deallocate` are called inside an operation on `stream` (no capture begins or
///   ends on it meanwhile, see [`Stream`]): they must not queue work on a stream, nor begin or
///   end a capture, through this crate's API (raw driver calls on the stream, and
///   [`Stream::sync`], are fine). They should not block for long: a capture beginning on any
///   thread waits for them.
///
/// Implementing it without `unsafe` does not compile:
///
/// ```compile_fail,E0200
/// use cuda_core::{Device, MemoryResource, Result, Stream};
/// use cuda_sys::driver::CUdeviceptr;
/// struct Liar;
/// impl MemoryResource for Liar {
///     fn allocate(&self, _: usize, _: &Stream) -> Result<CUdeviceptr> { Ok(0x1000) }
///     unsafe fn deallocate(&self, _: CUdeviceptr, _: usize, _: &Stream) -> Result<()> { Ok(()) }
///     fn is_device_accessible(&self) -> bool { true }
///     fn is_host_accessible(&self) -> bool { true }
///     fn device(&self) -> Option<Device> { None }
/// }
/// ```
pub unsafe trait MemoryResource: Send + Sync + 'static {
    /// `size` bytes, usable by work on `stream` after this call.
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr>;
    /// Frees `ptr` once the work queued on `stream` so far is done.
    ///
    /// # Safety
    /// `ptr` came from [`allocate`](MemoryResource::allocate) of this resource with this `size`,
    /// is freed once, and nothing uses it after the work already queued on `stream`.
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, size: usize, stream: &Stream) -> Result<()>;
    /// Whether kernels can read and write the memory.
    fn is_device_accessible(&self) -> bool;
    /// Whether the host can read and write the memory directly.
    fn is_host_accessible(&self) -> bool;
    /// The device the memory belongs to, if one.
    fn device(&self) -> Option<Device>;
    /// The pool, when the memory comes from one shareable with other processes.
    fn ipc_pool(&self) -> Option<driver::CUmemoryPool> {
        None
    }
    /// Whether the memory is managed (unified) memory: managed-memory operations (advice,
    /// prefetch, discard) apply to it.
    fn is_managed(&self) -> bool {
        false
    }
    /// Whether the memory was opened from another process (`cuda.core`'s `is_mapped`).
    fn is_mapped(&self) -> bool {
        false
    }
    /// Whether [`deallocate`](Self::deallocate) only queues the free on the stream and returns
    /// (a stream-ordered pool's `cuMemFreeAsync`), rather than waiting for the stream's work
    /// and then freeing. When `false` (the default, right for a resource that waits), a
    /// [`crate::Buffer`] dropped while its memory may still be in use (another stream used it,
    /// or its deallocation stream is busy) is freed on a background thread once that work is
    /// done, so the drop never waits for the GPU; [`crate::Buffer::close`] calls `deallocate` at
    /// once, as `cuda.core` does. Either answer is sound (the free is ordered after the work
    /// either way): a wrong `true` makes drops wait, a wrong `false` defers frees.
    fn frees_in_stream_order(&self) -> bool {
        false
    }
    /// Not for other implementations (they cannot name the argument's type, so keep this
    /// default): the device whose memory this resource allocates from a stream-ordered pool
    /// this process owns, one allocation per buffer, so that `cuMemFreeAsync` on any stream of
    /// that device frees it as [`deallocate`](Self::deallocate) would (which lets the memory
    /// be handed to another library that frees it so).
    #[doc(hidden)]
    fn freed_by_mem_free_async(&self, _: sealed::Token) -> Option<Device> {
        None
    }
}

pub(crate) mod sealed {
    /// Names what only this crate's resources answer (see `freed_by_mem_free_async`).
    pub struct Token;
}

pub(crate) fn location(kind: driver::CUmemLocationType, id: i32) -> driver::CUmemLocation {
    let mut loc = driver::CUmemLocation {
        type_: kind,
        ..Default::default()
    };
    loc.__bindgen_anon_1.id = id;
    loc
}

/// The driver's location of `device`.
pub(crate) fn device_location(device: &Device) -> driver::CUmemLocation {
    location(
        driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        device.device_id() as i32,
    )
}

/// Read-write access for `device`, as pools and mappings grant it.
pub(crate) fn read_write_access(device: &Device) -> driver::CUmemAccessDesc {
    driver::CUmemAccessDesc {
        location: device_location(device),
        flags: driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    }
}

/// `ptr + offset`, checked (an error naming `what` when it overflows).
pub(crate) fn address(ptr: driver::CUdeviceptr, offset: usize, what: &str) -> Result<driver::CUdeviceptr> {
    u64::try_from(offset)
        .ok()
        .and_then(|o| ptr.checked_add(o))
        .ok_or_else(|| crate::CudaError::InvalidArgument(format!("{what}: offset {offset} overflows the address")))
}

/// The CUDA version of the installed driver, `(major, minor)`, read once: memory features that
/// need a newer driver choose their path by it.
pub(crate) fn driver_version() -> Result<(u32, u32)> {
    static VERSION: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    if let Some(v) = VERSION.get() {
        return Ok(*v);
    }
    let v = crate::system::get_user_mode_driver_version()?;
    Ok(*VERSION.get_or_init(|| v))
}

/// Waits for the work queued on `stream`, from a resource's `deallocate` (a free that is not
/// stream-ordered), in relaxed capture mode: a capture elsewhere (or begun by the dropping
/// thread on another stream) is neither refused nor invalidated by the wait.
pub(crate) fn wait_before_free(stream: &Stream) -> Result<()> {
    crate::stream::relaxed_capture_mode(|| stream.sync())
}

/// Frees stream-ordered memory (pool or graph allocations) after the work queued on `stream`.
///
/// # Safety
/// `ptr` came from a stream-ordered allocation and nothing uses it after that work.
#[inline]
pub(crate) unsafe fn free_async(ptr: driver::CUdeviceptr, stream: &Stream) -> Result<()> {
    use crate::error::Check;
    // SAFETY: forwarded to the caller.
    unsafe { driver::cuMemFreeAsync(ptr, stream.handle()) }.check("cuMemFreeAsync")
}
