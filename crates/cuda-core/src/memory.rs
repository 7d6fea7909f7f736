//! Memory resources and `Buffer`: stream-ordered allocations that free themselves.

use crate::device::Device;
use crate::error::{record_drop_error, Check};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::ffi::c_void;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

/// Something that hands out memory, ordered on streams (`cuda.core`'s `MemoryResource`).
///
/// Implement it to plug in an allocator of your own; [`Buffer::allocate`] turns it into buffers
/// that free themselves through [`deallocate`](MemoryResource::deallocate).
pub trait MemoryResource: Send + Sync + 'static {
    /// `size` bytes, usable by work on `stream` after this call.
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr>;
    /// Frees `ptr` once the work queued on `stream` so far is done.
    ///
    /// # Safety
    /// `ptr` came from [`allocate`](MemoryResource::allocate) of this resource with this `size`,
    /// and nothing uses it after the work already queued on `stream`.
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
}

pub(crate) fn location(kind: driver::CUmemLocationType, id: i32) -> driver::CUmemLocation {
    let mut loc = driver::CUmemLocation {
        type_: kind,
        ..Default::default()
    };
    loc.__bindgen_anon_1.id = id;
    loc
}

/// Read-write access for `device`, as pools and mappings grant it.
pub(crate) fn read_write_access(device: &Device) -> driver::CUmemAccessDesc {
    driver::CUmemAccessDesc {
        location: location(
            driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            device.device_id() as i32,
        ),
        flags: driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    }
}

/// Frees stream-ordered memory (pool or graph allocations) after the work queued on `stream`.
///
/// # Safety
/// `ptr` came from a stream-ordered allocation and nothing uses it after that work.
unsafe fn free_async(ptr: driver::CUdeviceptr, stream: &Stream) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { driver::cuMemFreeAsync(ptr, stream.handle()) }.check("cuMemFreeAsync")
}

/// A memory pool, the driver's stream-ordered allocator (`cuMemAllocFromPoolAsync`).
struct Pool {
    handle: driver::CUmemoryPool,
    owned: bool,
}

// SAFETY: a CUmemoryPool is a process-wide handle the driver lets any thread use.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: made by cuMemPoolCreate, destroyed once; buffers from it hold the resource
            // (and so this pool) until they are freed.
            if let Err(e) = unsafe { driver::cuMemPoolDestroy(self.handle) }.check("cuMemPoolDestroy") {
                record_drop_error(e);
            }
        }
    }
}

impl Pool {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        let mut ptr = 0;
        // SAFETY: the pool and stream are live; out-pointer to a local.
        unsafe { driver::cuMemAllocFromPoolAsync(&mut ptr, size, self.handle, stream.handle()) }
            .check("cuMemAllocFromPoolAsync")?;
        Ok(ptr)
    }

    fn attribute(&self, attr: driver::CUmemPool_attribute) -> Result<u64> {
        let mut v = 0u64;
        // SAFETY: the attributes read here are all 64-bit values.
        unsafe { driver::cuMemPoolGetAttribute(self.handle, attr, (&mut v as *mut u64).cast()) }
            .check("cuMemPoolGetAttribute")?;
        Ok(v)
    }

    fn set_attribute(&self, attr: driver::CUmemPool_attribute, value: u64) -> Result<()> {
        let mut v = value;
        // SAFETY: the attributes written here are all 64-bit values.
        unsafe { driver::cuMemPoolSetAttribute(self.handle, attr, (&mut v as *mut u64).cast()) }
            .check("cuMemPoolSetAttribute")
    }
}

/// Options of a new [`DeviceMemoryResource`] pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceMemoryResourceOptions {
    /// The most the pool may hold, in bytes (the driver's default when `None`).
    pub max_size: Option<usize>,
    /// Shareable with other processes through POSIX file descriptors.
    pub ipc_enabled: bool,
}

/// Device memory from a pool: the device's default pool, or a new one.
///
/// ```no_run
/// # fn main() -> cuda_core::Result<()> {
/// let device = cuda_core::Device::new(0)?;
/// device.set_current()?;
/// let stream = device.create_stream(Default::default())?;
/// let buffer = device.allocate(1 << 20, &stream)?; // from the default pool
/// buffer.fill_u8(0, &stream)?;
/// # Ok(()) }
/// ```
pub struct DeviceMemoryResource {
    pool: Pool,
    device: Device,
    ipc: bool,
    imported: bool,
    /// Set by `export_fd`: the driver shares pointers only of a pool already shared.
    exported: std::sync::atomic::AtomicBool,
}

impl DeviceMemoryResource {
    /// The device's default pool (`cuDeviceGetDefaultMemPool`; not destroyed).
    pub fn default_pool(device: &Device) -> Result<Arc<DeviceMemoryResource>> {
        let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuDeviceGetDefaultMemPool(&mut handle, device.handle()) }
            .check("cuDeviceGetDefaultMemPool")?;
        Ok(Arc::new(DeviceMemoryResource {
            pool: Pool { handle, owned: false },
            device: *device,
            ipc: false,
            imported: false,
            exported: false.into(),
        }))
    }

    /// A new pool on `device`, destroyed when the resource and every buffer from it are gone.
    pub fn new(device: &Device, options: DeviceMemoryResourceOptions) -> Result<Arc<DeviceMemoryResource>> {
        let mut props = driver::CUmemPoolProps {
            allocType: driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            location: location(
                driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                device.device_id() as i32,
            ),
            maxSize: options.max_size.unwrap_or(0),
            ..Default::default()
        };
        if options.ipc_enabled {
            props.handleTypes = driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        }
        let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: props is fully initialised; out-pointer to a local.
        unsafe { driver::cuMemPoolCreate(&mut handle, &props) }.check("cuMemPoolCreate")?;
        Ok(Arc::new(DeviceMemoryResource {
            pool: Pool { handle, owned: true },
            device: *device,
            ipc: options.ipc_enabled,
            imported: false,
            exported: false.into(),
        }))
    }

    /// A file descriptor another process can open this pool with (the pool must be made with
    /// `ipc_enabled`). Send it with [`crate::ipc::send_fd`].
    pub fn export_fd(&self) -> Result<std::os::fd::OwnedFd> {
        if !self.ipc || self.imported {
            return Err(CudaError::InvalidArgument(
                "only pools made with ipc_enabled can be exported".into(),
            ));
        }
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: for POSIX file descriptors the driver writes an int through the pointer.
        unsafe {
            driver::cuMemPoolExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast(),
                self.pool.handle,
                driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        }
        .check("cuMemPoolExportToShareableHandle")?;
        self.exported.store(true, std::sync::atomic::Ordering::Release);
        // SAFETY: the driver made a new descriptor for the caller to own.
        Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    /// Opens a pool another process exported, on `device`. Buffers of that process come in
    /// through [`Buffer::from_ipc_descriptor`]; an imported pool cannot allocate.
    pub fn from_fd(device: &Device, fd: std::os::fd::OwnedFd) -> Result<Arc<DeviceMemoryResource>> {
        use std::os::fd::AsRawFd;
        let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
        device.primary_context()?.with_current(|| {
            // SAFETY: for POSIX file descriptors the handle is the descriptor's value itself.
            unsafe {
                driver::cuMemPoolImportFromShareableHandle(
                    &mut handle,
                    fd.as_raw_fd() as isize as *mut c_void,
                    driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                    0,
                )
            }
            .check("cuMemPoolImportFromShareableHandle")
        })?;
        Ok(Arc::new(DeviceMemoryResource {
            pool: Pool { handle, owned: true },
            device: *device,
            ipc: true,
            imported: true,
            exported: false.into(),
        }))
    }

    /// Whether the pool was opened from another process.
    pub fn is_imported(&self) -> bool {
        self.imported
    }

    /// `size` bytes ordered on `stream`, freed on the same stream when the buffer goes.
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }

    /// The `CUmemoryPool`.
    pub fn handle(&self) -> driver::CUmemoryPool {
        self.pool.handle
    }

    /// Whether this is a pool made here (not the device's default one).
    pub fn is_owned(&self) -> bool {
        self.pool.owned
    }

    /// Memory the pool keeps after a synchronisation instead of returning it to the system.
    pub fn release_threshold(&self) -> Result<u64> {
        self.pool
            .attribute(driver::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    }

    /// Sets [`release_threshold`](Self::release_threshold).
    pub fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        self.pool
            .set_attribute(driver::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, bytes)
    }

    /// Memory the pool holds from the system now.
    pub fn reserved_mem_current(&self) -> Result<u64> {
        self.pool
            .attribute(driver::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    /// The most memory the pool has held since the last reset.
    pub fn reserved_mem_high(&self) -> Result<u64> {
        self.pool
            .attribute(driver::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
    }

    /// Memory handed out and not yet freed.
    pub fn used_mem_current(&self) -> Result<u64> {
        self.pool
            .attribute(driver::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    }

    /// The most memory handed out at once since the last reset.
    pub fn used_mem_high(&self) -> Result<u64> {
        self.pool
            .attribute(driver::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    }

    /// Resets the high-water marks to the current values.
    pub fn reset_high_water_marks(&self) -> Result<()> {
        self.pool
            .set_attribute(driver::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)?;
        self.pool
            .set_attribute(driver::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)
    }

    /// Lets kernels on `peer` read and write this pool's memory.
    pub fn set_peer_access(&self, peer: &Device, enabled: bool) -> Result<()> {
        let desc = driver::CUmemAccessDesc {
            location: location(
                driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                peer.device_id() as i32,
            ),
            flags: if enabled {
                driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            } else {
                driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE
            },
        };
        // SAFETY: one descriptor, passed by pointer for the call.
        unsafe { driver::cuMemPoolSetAccess(self.pool.handle, &desc, 1) }.check("cuMemPoolSetAccess")
    }
}

impl MemoryResource for DeviceMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        if self.imported {
            return Err(CudaError::InvalidArgument(
                "a pool opened from another process cannot allocate".into(),
            ));
        }
        self.pool.allocate(size, stream).map_err(|e| {
            if e.driver_status() == Some(driver::CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
                CudaError::InvalidArgument(format!(
                    "{e}: a memory pool cannot allocate on a stream being captured, nor while the calling thread captures one (such a capture is now invalidated): allocate graph memory with GraphMemoryResource, other memory before the capture"
                ))
            } else {
                e
            }
        })
    }
    fn ipc_pool(&self) -> Option<driver::CUmemoryPool> {
        (self.ipc && self.exported.load(std::sync::atomic::Ordering::Acquire)).then_some(self.pool.handle)
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { free_async(ptr, stream) }
    }
    fn is_device_accessible(&self) -> bool {
        true
    }
    fn is_host_accessible(&self) -> bool {
        false
    }
    fn device(&self) -> Option<Device> {
        Some(self.device)
    }
}

/// Page-locked host memory from a host pool: readable by the host and by kernels, and the
/// fastest way in and out of the GPU.
pub struct PinnedMemoryResource {
    pool: Pool,
}

impl PinnedMemoryResource {
    /// A host pool; `numa_node` places it on one NUMA node.
    pub fn new(numa_node: Option<i32>) -> Result<Arc<PinnedMemoryResource>> {
        let loc = match numa_node {
            Some(n) => location(driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA, n),
            None => location(driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0),
        };
        let props = driver::CUmemPoolProps {
            allocType: driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            location: loc,
            ..Default::default()
        };
        let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: props is fully initialised; out-pointer to a local.
        unsafe { driver::cuMemPoolCreate(&mut handle, &props) }.check("cuMemPoolCreate")?;
        let resource = PinnedMemoryResource {
            pool: Pool { handle, owned: true },
        };
        // Kernels on every device may use it.
        for device in Device::all()? {
            let desc = read_write_access(&device);
            // SAFETY: one descriptor, passed by pointer for the call.
            unsafe { driver::cuMemPoolSetAccess(handle, &desc, 1) }.check("cuMemPoolSetAccess")?;
        }
        Ok(Arc::new(resource))
    }

    /// `size` bytes ordered on `stream`.
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }
}

impl MemoryResource for PinnedMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        self.pool.allocate(size, stream)
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { free_async(ptr, stream) }
    }
    fn is_device_accessible(&self) -> bool {
        true
    }
    fn is_host_accessible(&self) -> bool {
        true
    }
    fn device(&self) -> Option<Device> {
        None
    }
}

/// Page-locked host memory from `cuMemHostAlloc` (not stream-ordered: allocation and freeing
/// synchronise).
pub struct LegacyPinnedMemoryResource {
    flags: u32,
}

bitflags::bitflags! {
    /// `cuMemHostAlloc` flags.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct HostAllocFlags: u32 {
        /// Pinned for every context, not only the current one.
        const PORTABLE = 0x01;
        /// Mapped into the device address space.
        const DEVICEMAP = 0x02;
        /// Write-combined: fast for the host to write and the device to read, slow for the host to read.
        const WRITECOMBINED = 0x04;
    }
}

impl LegacyPinnedMemoryResource {
    pub fn new(flags: HostAllocFlags) -> Arc<LegacyPinnedMemoryResource> {
        // Portable and mapped always: a buffer's pointer is used from any context and by kernels.
        Arc::new(LegacyPinnedMemoryResource {
            flags: (flags | HostAllocFlags::PORTABLE | HostAllocFlags::DEVICEMAP).bits(),
        })
    }

    /// `size` bytes.
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }
}

impl MemoryResource for LegacyPinnedMemoryResource {
    fn allocate(&self, size: usize, _stream: &Stream) -> Result<driver::CUdeviceptr> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the flags are valid cuMemHostAlloc flags.
        unsafe { driver::cuMemHostAlloc(&mut p, size.max(1), self.flags) }.check("cuMemHostAlloc")?;
        // With unified addressing the host pointer is the device pointer.
        Ok(p as driver::CUdeviceptr)
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // Not stream-ordered: wait for the work that may still use it.
        stream.sync()?;
        // SAFETY: forwarded to the caller; the stream's work is done.
        unsafe { driver::cuMemFreeHost(ptr as *mut c_void) }.check("cuMemFreeHost")
    }
    fn is_device_accessible(&self) -> bool {
        true
    }
    fn is_host_accessible(&self) -> bool {
        true
    }
    fn device(&self) -> Option<Device> {
        None
    }
}

/// Managed (unified) memory: one address for host and devices, migrated on demand.
pub struct ManagedMemoryResource {
    preferred_location: Option<Device>,
}

impl ManagedMemoryResource {
    /// Managed memory, preferably resident on `preferred_location` (the host when `None`... or
    /// wherever it is used, when not advised).
    pub fn new(preferred_location: Option<Device>) -> Arc<ManagedMemoryResource> {
        Arc::new(ManagedMemoryResource { preferred_location })
    }

    /// `size` bytes.
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }
}

impl MemoryResource for ManagedMemoryResource {
    fn allocate(&self, size: usize, _stream: &Stream) -> Result<driver::CUdeviceptr> {
        let mut ptr = 0;
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuMemAllocManaged(&mut ptr, size.max(1), driver::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL.0) }
            .check("cuMemAllocManaged")?;
        if let Some(d) = self.preferred_location {
            let loc = location(
                driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                d.device_id() as i32,
            );
            // SAFETY: ptr is a live managed allocation of at least size bytes.
            unsafe {
                driver::cuMemAdvise(
                    ptr,
                    size.max(1),
                    driver::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                    loc,
                )
            }
            .check("cuMemAdvise")?;
        }
        Ok(ptr)
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        stream.sync()?;
        // SAFETY: forwarded to the caller; the stream's work is done.
        unsafe { driver::cuMemFree(ptr) }.check("cuMemFree")
    }
    fn is_device_accessible(&self) -> bool {
        true
    }
    fn is_host_accessible(&self) -> bool {
        true
    }
    fn device(&self) -> Option<Device> {
        self.preferred_location
    }
}

/// Plain-data element types buffers copy to and from host slices.
pub use bytemuck::Pod;

/// Memory from a [`MemoryResource`], freed (stream-ordered, on its deallocation stream) when
/// dropped. It keeps its resource and its deallocation stream alive.
pub struct Buffer {
    ptr: driver::CUdeviceptr,
    size: usize,
    resource: Option<Arc<dyn MemoryResource>>,
    stream: Stream,
    /// Set once a graph records work on the buffer: from then on the memory is freed when the
    /// last of the buffer and those graphs goes.
    shared: OnceLock<Arc<SharedAllocation>>,
    /// Allocated while its stream was being captured: graph memory, whose life the graph's own
    /// allocation and free nodes decide.
    graph_memory: bool,
}

/// The memory of a [`Buffer`] that graphs refer to: freed (stream-ordered, on the buffer's
/// deallocation stream at the time) when the buffer and every graph holding it are gone.
pub(crate) struct SharedAllocation {
    ptr: driver::CUdeviceptr,
    size: usize,
    resource: Option<Arc<dyn MemoryResource>>,
    stream: Mutex<Stream>,
}

impl SharedAllocation {
    fn set_stream(&self, stream: &Stream) {
        *self.stream.lock().unwrap_or_else(|p| p.into_inner()) = stream.clone();
    }
}

impl Drop for SharedAllocation {
    fn drop(&mut self) {
        if let Some(r) = self.resource.take() {
            let stream = self.stream.get_mut().unwrap_or_else(|p| p.into_inner());
            // SAFETY: ptr came from this resource with this size; the buffer and every graph
            // that used it are gone, and graph launches finished before the driver released them.
            if let Err(e) = unsafe { r.deallocate(self.ptr, self.size, stream) } {
                record_drop_error(e);
            }
        }
    }
}

impl Buffer {
    /// `size` bytes from `resource`, ordered on `stream`, which also becomes the deallocation
    /// stream.
    pub fn allocate(resource: Arc<dyn MemoryResource>, size: usize, stream: &Stream) -> Result<Buffer> {
        let graph_memory = crate::graph::capture_target(stream)?.is_some();
        let ptr = resource.allocate(size, stream)?;
        let mut buffer = Buffer::from_parts(ptr, size, Some(resource), stream);
        buffer.graph_memory = graph_memory;
        Ok(buffer)
    }

    /// A buffer over `ptr` that `resource` frees (or, without one, nobody does).
    pub(crate) fn from_parts(
        ptr: driver::CUdeviceptr,
        size: usize,
        resource: Option<Arc<dyn MemoryResource>>,
        stream: &Stream,
    ) -> Buffer {
        Buffer {
            ptr,
            size,
            resource,
            stream: stream.clone(),
            shared: OnceLock::new(),
            graph_memory: false,
        }
    }

    /// Wraps memory allocated elsewhere; it is never freed here.
    ///
    /// # Safety
    /// `ptr` must point to `size` bytes of memory usable by the device (or host, as it is used)
    /// for as long as the buffer lives.
    pub unsafe fn from_handle(ptr: driver::CUdeviceptr, size: usize, stream: &Stream) -> Buffer {
        Buffer::from_parts(ptr, size, None, stream)
    }

    /// The device address.
    #[inline]
    pub fn handle(&self) -> driver::CUdeviceptr {
        self.ptr
    }

    /// After a resource moved or grew the memory (virtual memory management).
    pub(crate) fn rebase(&mut self, ptr: driver::CUdeviceptr, size: usize) {
        self.ptr = ptr;
        self.size = size;
    }

    /// The size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The resource it came from (`None` for foreign memory).
    pub fn memory_resource(&self) -> Option<&Arc<dyn MemoryResource>> {
        self.resource.as_ref()
    }

    pub fn is_device_accessible(&self) -> bool {
        self.resource.as_ref().is_none_or(|r| r.is_device_accessible())
    }

    pub fn is_host_accessible(&self) -> bool {
        self.resource.as_ref().is_some_and(|r| r.is_host_accessible())
    }

    /// The stream the buffer is freed on.
    pub fn deallocation_stream(&self) -> &Stream {
        &self.stream
    }

    /// Frees the buffer on `stream` from now on (after the work queued there).
    pub fn set_deallocation_stream(&mut self, stream: &Stream) {
        self.stream = stream.clone();
        if let Some(shared) = self.shared.get() {
            shared.set_stream(stream);
        }
    }

    /// The memory as graphs hold it: from the first call on, the buffer no longer frees it
    /// alone; the last of the buffer and the graphs holding the returned value does.
    pub(crate) fn share(&self) -> Arc<SharedAllocation> {
        self.shared
            .get_or_init(|| {
                Arc::new(SharedAllocation {
                    ptr: self.ptr,
                    size: self.size,
                    resource: self.resource.clone(),
                    stream: Mutex::new(self.stream.clone()),
                })
            })
            .clone()
    }

    /// Whether a graph holds the memory (see [`crate::graph`]): it then cannot move.
    pub fn is_used_by_graph(&self) -> bool {
        self.shared.get().is_some()
    }

    /// When `stream` is being captured into a graph, hands the graph a reference to the memory
    /// so that it outlives every launch of the graph.
    #[inline]
    pub(crate) fn keep_alive_for(&self, stream: &Stream) -> Result<()> {
        if let Some(graph) = crate::graph::capture_target(stream)? {
            if self.resource.is_some() && !self.graph_memory {
                crate::graph::attach(graph, self.share())?;
            }
        }
        Ok(())
    }

    /// Frees the buffer now (stream-ordered on `stream`, or its deallocation stream) and returns
    /// what the driver said.
    pub fn close(mut self, stream: Option<&Stream>) -> Result<()> {
        if let Some(s) = stream {
            self.stream = s.clone();
        }
        // Drop then finds nothing left to free.
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        if let Some(shared) = self.shared.get() {
            // Graphs hold the memory: the shared allocation frees it, on this stream, when the
            // last of them goes.
            shared.set_stream(&self.stream);
            self.resource = None;
            return Ok(());
        }
        match self.resource.take() {
            // SAFETY: ptr came from this resource with this size; the buffer is going, so nothing
            // uses it after the work already queued on its deallocation stream.
            Some(r) => unsafe { r.deallocate(self.ptr, self.size, &self.stream) },
            None => Ok(()),
        }
    }

    pub(crate) fn check_fits(&self, bytes: usize, what: &str) -> Result<()> {
        if bytes > self.size {
            return Err(CudaError::InvalidArgument(format!(
                "{what}: {bytes} bytes do not fit in a buffer of {}",
                self.size
            )));
        }
        Ok(())
    }

    /// Copies `src` into the start of the buffer, ordered on `stream`, and waits for the copy
    /// (so `src` may be reused at once).
    pub fn copy_from_host<T: Pod>(&self, src: &[T], stream: &Stream) -> Result<()> {
        let bytes = std::mem::size_of_val(src);
        self.check_fits(bytes, "copy_from_host")?;
        // SAFETY: src is live for the call and the copy is waited for before returning. Host
        // memory is copied with the direction inferred from the addresses (unified addressing).
        unsafe {
            if self.is_host_accessible() {
                driver::cuMemcpyAsync(self.ptr, src.as_ptr() as driver::CUdeviceptr, bytes, stream.handle())
                    .check("cuMemcpyAsync")?;
            } else {
                driver::cuMemcpyHtoDAsync(self.ptr, src.as_ptr().cast(), bytes, stream.handle())
                    .check("cuMemcpyHtoDAsync")?;
            }
        }
        stream.sync()
    }

    /// Copies the start of the buffer into `dst`, ordered on `stream`, and waits for the copy.
    pub fn copy_to_host<T: Pod>(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        let bytes = std::mem::size_of_val(dst);
        self.check_fits(bytes, "copy_to_host")?;
        // SAFETY: dst is live and exclusively borrowed for the call; the copy is waited for.
        unsafe {
            if self.is_host_accessible() {
                driver::cuMemcpyAsync(
                    dst.as_mut_ptr() as driver::CUdeviceptr,
                    self.ptr,
                    bytes,
                    stream.handle(),
                )
                .check("cuMemcpyAsync")?;
            } else {
                driver::cuMemcpyDtoHAsync(dst.as_mut_ptr().cast(), self.ptr, bytes, stream.handle())
                    .check("cuMemcpyDtoHAsync")?;
            }
        }
        stream.sync()
    }

    /// The buffer's contents as a vector of `T` (waits for the copy).
    pub fn to_vec<T: Pod>(&self, stream: &Stream) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.size / std::mem::size_of::<T>().max(1)];
        self.copy_to_host(&mut out, stream)?;
        Ok(out)
    }

    /// Copies this whole buffer into `dst`, ordered on `stream` (device to device, or any
    /// direction the memory kinds allow).
    pub fn copy_to(&self, dst: &Buffer, stream: &Stream) -> Result<()> {
        dst.check_fits(self.size, "copy_to")?;
        self.keep_alive_for(stream)?;
        dst.keep_alive_for(stream)?;
        // SAFETY: both buffers are live; their lifetimes end stream-ordered after this copy when
        // freed on the same stream.
        unsafe { driver::cuMemcpyAsync(dst.ptr, self.ptr, self.size, stream.handle()) }.check("cuMemcpyAsync")
    }

    /// Copies `src` (whole) into this buffer, ordered on `stream`.
    pub fn copy_from(&self, src: &Buffer, stream: &Stream) -> Result<()> {
        src.copy_to(self, stream)
    }

    /// Fills every byte with `value`, ordered on `stream`.
    pub fn fill_u8(&self, value: u8, stream: &Stream) -> Result<()> {
        self.keep_alive_for(stream)?;
        // SAFETY: the buffer is live; size bytes.
        unsafe { driver::cuMemsetD8Async(self.ptr, value, self.size, stream.handle()) }.check("cuMemsetD8Async")
    }

    /// Fills with a 2-byte pattern (the size must be a multiple of 2), ordered on `stream`.
    pub fn fill_u16(&self, value: u16, stream: &Stream) -> Result<()> {
        if !self.size.is_multiple_of(2) {
            return Err(CudaError::InvalidArgument(format!(
                "fill_u16: {} bytes is not a multiple of 2",
                self.size
            )));
        }
        self.keep_alive_for(stream)?;
        // SAFETY: the buffer is live; size / 2 elements.
        unsafe { driver::cuMemsetD16Async(self.ptr, value, self.size / 2, stream.handle()) }.check("cuMemsetD16Async")
    }

    /// Fills with a 4-byte pattern (the size must be a multiple of 4), ordered on `stream`.
    pub fn fill_u32(&self, value: u32, stream: &Stream) -> Result<()> {
        if !self.size.is_multiple_of(4) {
            return Err(CudaError::InvalidArgument(format!(
                "fill_u32: {} bytes is not a multiple of 4",
                self.size
            )));
        }
        self.keep_alive_for(stream)?;
        // SAFETY: the buffer is live; size / 4 elements.
        unsafe { driver::cuMemsetD32Async(self.ptr, value, self.size / 4, stream.handle()) }.check("cuMemsetD32Async")
    }

    /// A view of `len` bytes at `offset`, borrowing the buffer (it cannot be freed meanwhile).
    pub fn view(&self, offset: usize, len: usize) -> Result<BufferView<'_>> {
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(CudaError::InvalidArgument(format!(
                "view of {len} bytes at {offset} is outside a buffer of {}",
                self.size
            )));
        }
        Ok(BufferView {
            ptr: self.ptr + offset as u64,
            len,
            _buffer: std::marker::PhantomData,
        })
    }
}

/// Where managed memory should live or be moved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryLocation {
    /// The host.
    Host,
    /// A device.
    Device(Device),
}

impl MemoryLocation {
    fn to_driver(self) -> driver::CUmemLocation {
        match self {
            MemoryLocation::Host => location(driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0),
            MemoryLocation::Device(d) => location(
                driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                d.device_id() as i32,
            ),
        }
    }
}

/// Operations on managed memory (from a [`ManagedMemoryResource`]).
impl Buffer {
    fn managed(&self, what: &str) -> Result<()> {
        let managed = self
            .resource
            .as_ref()
            .is_some_and(|r| r.is_host_accessible() && r.is_device_accessible());
        if !managed {
            return Err(CudaError::InvalidArgument(format!(
                "{what} applies to managed (or host-accessible) memory"
            )));
        }
        Ok(())
    }

    fn advise(&self, advice: driver::CUmem_advise, location: MemoryLocation, what: &str) -> Result<()> {
        self.managed(what)?;
        // SAFETY: the buffer is a live allocation of size bytes.
        unsafe { driver::cuMemAdvise(self.ptr, self.size, advice, location.to_driver()) }.check("cuMemAdvise")
    }

    /// Advises that the memory is mostly read (copies may then live on several devices).
    pub fn advise_read_mostly(&self, on: bool) -> Result<()> {
        let advice = if on {
            driver::CUmem_advise::CU_MEM_ADVISE_SET_READ_MOSTLY
        } else {
            driver::CUmem_advise::CU_MEM_ADVISE_UNSET_READ_MOSTLY
        };
        self.advise(advice, MemoryLocation::Host, "advise_read_mostly")
    }

    /// Advises where the memory should preferably live.
    pub fn advise_preferred_location(&self, location: Option<MemoryLocation>) -> Result<()> {
        match location {
            Some(l) => self.advise(
                driver::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                l,
                "advise_preferred_location",
            ),
            None => self.advise(
                driver::CUmem_advise::CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
                MemoryLocation::Host,
                "advise_preferred_location",
            ),
        }
    }

    /// Advises that `device` will access the memory (kept mapped for it).
    pub fn advise_accessed_by(&self, device: &Device, on: bool) -> Result<()> {
        let advice = if on {
            driver::CUmem_advise::CU_MEM_ADVISE_SET_ACCESSED_BY
        } else {
            driver::CUmem_advise::CU_MEM_ADVISE_UNSET_ACCESSED_BY
        };
        self.advise(advice, MemoryLocation::Device(*device), "advise_accessed_by")
    }

    /// Moves the memory to `location`, ordered on `stream`.
    pub fn prefetch(&self, location: MemoryLocation, stream: &Stream) -> Result<()> {
        self.managed("prefetch")?;
        self.keep_alive_for(stream)?;
        // SAFETY: the buffer is a live allocation of size bytes; the stream is live.
        unsafe { driver::cuMemPrefetchAsync(self.ptr, self.size, location.to_driver(), 0, stream.handle()) }
            .check("cuMemPrefetchAsync")
    }

    /// Tells the driver the contents are no longer needed (it may drop them instead of migrating
    /// them), ordered on `stream`; the next reads see unspecified values (CUDA 13 drivers).
    pub fn discard(&self, stream: &Stream) -> Result<()> {
        self.managed("discard")?;
        self.keep_alive_for(stream)?;
        let (mut ptr, mut size) = (self.ptr, self.size);
        // SAFETY: one range, passed by pointer for the call; the buffer is live.
        unsafe { driver::cuMemDiscardBatchAsync(&mut ptr, &mut size, 1, 0, stream.handle()) }
            .check("cuMemDiscardBatchAsync")
    }

    /// The buffer's bytes as a mutable host slice of `T`.
    ///
    /// # Safety
    /// Nothing else may read or write the memory while the slice is used (no kernel or copy in
    /// flight on any stream, no other slice of it).
    pub unsafe fn as_host_slice_mut<T: Pod>(&mut self) -> Result<&mut [T]> {
        // SAFETY: the caller's promise covers the shared slice's conditions and exclusivity.
        let shared = unsafe { self.as_host_slice::<T>() }?;
        let (ptr, len) = (shared.as_ptr() as *mut T, shared.len());
        // SAFETY: &mut self and the caller's promise make this the only access.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
    }

    /// The buffer's bytes as a host slice of `T`.
    ///
    /// # Safety
    /// Nothing may write the memory while the slice is used (no kernel or copy in flight on any
    /// stream), and the bytes must be valid `T`s (any bit pattern is, for `Pod` types).
    pub unsafe fn as_host_slice<T: Pod>(&self) -> Result<&[T]> {
        if !self.is_host_accessible() {
            return Err(CudaError::InvalidArgument(
                "as_host_slice: the buffer is not host-accessible".into(),
            ));
        }
        if !(self.ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(CudaError::InvalidArgument(
                "as_host_slice: the buffer is not aligned for T".into(),
            ));
        }
        // SAFETY: host-accessible memory of size bytes, aligned for T, not written meanwhile (the
        // caller's promise).
        Ok(unsafe { std::slice::from_raw_parts(self.ptr as *const T, self.size / std::mem::size_of::<T>().max(1)) })
    }
}

/// What another process needs to open a buffer of a shared pool: 64 opaque bytes and the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcBufferDescriptor {
    pub data: [u8; 64],
    pub size: usize,
}

impl IpcBufferDescriptor {
    /// 72 bytes: the data, then the size (little-endian).
    pub fn to_bytes(&self) -> [u8; 72] {
        let mut out = [0u8; 72];
        out[..64].copy_from_slice(&self.data);
        out[64..].copy_from_slice(&(self.size as u64).to_le_bytes());
        out
    }

    /// Reads [`to_bytes`](Self::to_bytes)'s output.
    pub fn from_bytes(bytes: &[u8]) -> Result<IpcBufferDescriptor> {
        if bytes.len() != 72 {
            return Err(CudaError::InvalidArgument(
                "an IPC buffer descriptor has 72 bytes".into(),
            ));
        }
        let mut data = [0u8; 64];
        data.copy_from_slice(&bytes[..64]);
        let size = u64::from_le_bytes(bytes[64..].try_into().unwrap_or_default()) as usize;
        Ok(IpcBufferDescriptor { data, size })
    }
}

impl Buffer {
    /// The descriptor another process opens this buffer with, through the pool it imported.
    pub fn ipc_descriptor(&self) -> Result<IpcBufferDescriptor> {
        if self.resource.as_ref().and_then(|r| r.ipc_pool()).is_none() {
            return Err(CudaError::InvalidArgument(
                "only buffers of an ipc_enabled pool that was exported (export_fd) can be shared".into(),
            ));
        }
        let mut data = driver::CUmemPoolPtrExportData::default();
        // SAFETY: the buffer is a live allocation of an IPC pool; out-pointer to a local.
        unsafe { driver::cuMemPoolExportPointer(&mut data, self.ptr) }.check("cuMemPoolExportPointer")?;
        Ok(IpcBufferDescriptor {
            data: data.reserved,
            size: self.size,
        })
    }

    /// Opens a buffer another process shared, from the pool imported from it. Freeing it (on
    /// drop) releases this process's mapping; the exporting process owns the memory.
    pub fn from_ipc_descriptor(
        pool: &Arc<DeviceMemoryResource>,
        descriptor: &IpcBufferDescriptor,
        stream: &Stream,
    ) -> Result<Buffer> {
        if !pool.imported {
            return Err(CudaError::InvalidArgument(
                "open shared buffers through the pool imported with from_fd".into(),
            ));
        }
        let mut data = driver::CUmemPoolPtrExportData {
            reserved: descriptor.data,
        };
        let mut ptr = 0;
        // SAFETY: the pool is live; the export data came from the exporting process.
        unsafe { driver::cuMemPoolImportPointer(&mut ptr, pool.pool.handle, &mut data) }
            .check("cuMemPoolImportPointer")?;
        Ok(Buffer::from_parts(ptr, descriptor.size, Some(pool.clone()), stream))
    }
}

/// One region of a 2D copy: a buffer, the byte offset of the first row, and the pitch (bytes
/// from one row to the next).
#[derive(Debug, Clone, Copy)]
pub struct Region2D<'a> {
    pub buffer: &'a Buffer,
    pub offset: usize,
    pub pitch: usize,
}

impl Region2D<'_> {
    fn check(&self, width: usize, height: usize, what: &str) -> Result<()> {
        let end = if height == 0 {
            0
        } else {
            self.offset + (height - 1) * self.pitch + width
        };
        if width > self.pitch || end > self.buffer.size {
            return Err(CudaError::InvalidArgument(format!(
                "copy_2d: the {what} region ({height} rows of {width} bytes, pitch {}, offset {}) does not fit its buffer of {} bytes",
                self.pitch, self.offset, self.buffer.size
            )));
        }
        Ok(())
    }
}

/// One region of a 3D copy: a buffer, the byte offset of the first row of the first slice, the
/// pitch (bytes from one row to the next) and the rows from one slice to the next.
#[derive(Debug, Clone, Copy)]
pub struct Region3D<'a> {
    pub buffer: &'a Buffer,
    pub offset: usize,
    pub pitch: usize,
    pub rows_per_slice: usize,
}

impl Region3D<'_> {
    fn check(&self, width: usize, height: usize, depth: usize, what: &str) -> Result<()> {
        let bad = || {
            CudaError::InvalidArgument(format!(
                "copy_3d: the {what} region ({depth} slices of {height} rows of {width} bytes, pitch {}, {} rows per slice, offset {}) does not fit its buffer of {} bytes",
                self.pitch, self.rows_per_slice, self.offset, self.buffer.size
            ))
        };
        if width > self.pitch || height > self.rows_per_slice {
            return Err(bad());
        }
        if width == 0 || height == 0 || depth == 0 {
            return Ok(());
        }
        let end = (depth - 1)
            .checked_mul(self.rows_per_slice)
            .and_then(|r| r.checked_add(height - 1))
            .and_then(|r| r.checked_mul(self.pitch))
            .and_then(|b| b.checked_add(self.offset))
            .and_then(|b| b.checked_add(width))
            .ok_or_else(bad)?;
        if end > self.buffer.size {
            return Err(bad());
        }
        Ok(())
    }
}

impl Buffer {
    /// Copies a box of `depth` slices of `height` rows of `width` bytes from `src` to `dst`
    /// (each with its own pitch and slice height), ordered on `stream` (`cuMemcpy3DAsync`).
    pub fn copy_3d(dst: Region3D<'_>, src: Region3D<'_>, extent: (usize, usize, usize), stream: &Stream) -> Result<()> {
        let (width, height, depth) = extent;
        dst.check(width, height, depth, "destination")?;
        src.check(width, height, depth, "source")?;
        dst.buffer.keep_alive_for(stream)?;
        src.buffer.keep_alive_for(stream)?;
        let copy = driver::CUDA_MEMCPY3D {
            srcMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            srcDevice: src.buffer.ptr + src.offset as u64,
            srcPitch: src.pitch,
            srcHeight: src.rows_per_slice,
            dstMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            dstDevice: dst.buffer.ptr + dst.offset as u64,
            dstPitch: dst.pitch,
            dstHeight: dst.rows_per_slice,
            WidthInBytes: width,
            Height: height,
            Depth: depth,
            ..Default::default()
        };
        // SAFETY: both boxes were checked to lie within their live buffers.
        unsafe { driver::cuMemcpy3DAsync(&copy, stream.handle()) }.check("cuMemcpy3DAsync")
    }

    /// Copies `height` rows of `width` bytes from `src` to `dst` (each with its own pitch),
    /// ordered on `stream`.
    pub fn copy_2d(dst: Region2D<'_>, src: Region2D<'_>, width: usize, height: usize, stream: &Stream) -> Result<()> {
        dst.check(width, height, "destination")?;
        src.check(width, height, "source")?;
        dst.buffer.keep_alive_for(stream)?;
        src.buffer.keep_alive_for(stream)?;
        let copy = driver::CUDA_MEMCPY2D {
            srcMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            srcDevice: src.buffer.ptr + src.offset as u64,
            srcPitch: src.pitch,
            dstMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            dstDevice: dst.buffer.ptr + dst.offset as u64,
            dstPitch: dst.pitch,
            WidthInBytes: width,
            Height: height,
            ..Default::default()
        };
        // SAFETY: both regions were checked to lie within their live buffers.
        unsafe { driver::cuMemcpy2DAsync(&copy, stream.handle()) }.check("cuMemcpy2DAsync")
    }

    /// Copies each `(src, dst)` pair (whole source into the start of the destination) in one
    /// batched call, ordered on `stream` (`cuMemcpyBatchAsync`, CUDA 12.8+ drivers).
    pub fn copy_batch(pairs: &[(&Buffer, &Buffer)], stream: &Stream) -> Result<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let mut dsts = Vec::with_capacity(pairs.len());
        let mut srcs = Vec::with_capacity(pairs.len());
        let mut sizes = Vec::with_capacity(pairs.len());
        for (src, dst) in pairs {
            dst.check_fits(src.size, "copy_batch")?;
            src.keep_alive_for(stream)?;
            dst.keep_alive_for(stream)?;
            dsts.push(dst.ptr);
            srcs.push(src.ptr);
            sizes.push(src.size);
        }
        let mut attrs = driver::CUmemcpyAttributes {
            srcAccessOrder: driver::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
            ..Default::default()
        };
        let mut attr_index = 0usize;
        // SAFETY: the arrays have pairs.len() entries each and every range lies in a live buffer;
        // one attribute applies to all copies (index 0).
        unsafe {
            driver::cuMemcpyBatchAsync(
                dsts.as_mut_ptr(),
                srcs.as_mut_ptr(),
                sizes.as_mut_ptr(),
                pairs.len(),
                &mut attrs,
                &mut attr_index,
                1,
                stream.handle(),
            )
        }
        .check("cuMemcpyBatchAsync")
    }

    /// Copies this buffer into `dst` on another device's memory (peer to peer), ordered on `stream`.
    pub fn copy_to_peer(&self, dst: &Buffer, stream: &Stream) -> Result<()> {
        dst.check_fits(self.size, "copy_to_peer")?;
        self.keep_alive_for(stream)?;
        dst.keep_alive_for(stream)?;
        let context = |b: &Buffer| -> Result<driver::CUcontext> {
            let device = b
                .resource
                .as_ref()
                .and_then(|r| r.device())
                .map_or_else(Device::current, Ok)?;
            Ok(device.primary_context()?.handle())
        };
        // SAFETY: both buffers are live; the contexts are retained primary contexts.
        unsafe {
            driver::cuMemcpyPeerAsync(
                dst.ptr,
                context(dst)?,
                self.ptr,
                context(self)?,
                self.size,
                stream.handle(),
            )
        }
        .check("cuMemcpyPeerAsync")
    }
}

/// Part of a [`Buffer`], alive no longer than it.
#[derive(Debug, Clone, Copy)]
pub struct BufferView<'a> {
    ptr: driver::CUdeviceptr,
    len: usize,
    _buffer: std::marker::PhantomData<&'a Buffer>,
}

impl BufferView<'_> {
    /// The device address of the view's first byte.
    pub fn handle(&self) -> driver::CUdeviceptr {
        self.ptr
    }

    /// The view's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            record_drop_error(e);
        }
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buffer({:#x}, {} bytes)", self.ptr, self.size)
    }
}

// SAFETY: device addresses are process-wide; the resource and stream are Send + Sync.
unsafe impl Send for Buffer {}
// SAFETY: shared access only reads the address and size, or queues driver work.
unsafe impl Sync for Buffer {}

impl Device {
    /// The device's default memory resource (its default pool), made once per device.
    pub fn memory_resource(&self) -> Result<Arc<DeviceMemoryResource>> {
        static DEFAULTS: std::sync::OnceLock<Vec<std::sync::OnceLock<Arc<DeviceMemoryResource>>>> =
            std::sync::OnceLock::new();
        let slots = DEFAULTS.get_or_init(|| {
            (0..crate::device_count().unwrap_or(0))
                .map(|_| std::sync::OnceLock::new())
                .collect()
        });
        let Some(slot) = slots.get(self.device_id()) else {
            return DeviceMemoryResource::default_pool(self);
        };
        if let Some(r) = slot.get() {
            return Ok(r.clone());
        }
        let r = DeviceMemoryResource::default_pool(self)?;
        Ok(slot.get_or_init(|| r).clone())
    }

    /// `size` bytes from the default pool, ordered on `stream`.
    pub fn allocate(&self, size: usize, stream: &Stream) -> Result<Buffer> {
        self.memory_resource()?.allocate(size, stream)
    }
}

/// The memory graphs allocate on a device (allocation nodes, and allocations captured into
/// graphs): its usage figures, and a resource that allocates only while a stream is being
/// captured (each allocation becomes an allocation node of the graph recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphMemoryResource {
    device: Device,
}

impl GraphMemoryResource {
    /// The graph memory of `device`.
    pub fn new(device: &Device) -> Arc<GraphMemoryResource> {
        Arc::new(GraphMemoryResource { device: *device })
    }

    /// `size` bytes of graph memory, as an allocation node of the graph `stream` is recording.
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }

    fn attribute(&self, attr: driver::CUgraphMem_attribute) -> Result<u64> {
        let mut v = 0u64;
        // SAFETY: the graph memory attributes are 64-bit values; out-pointer to a local.
        unsafe { driver::cuDeviceGetGraphMemAttribute(self.device.handle(), attr, (&mut v as *mut u64).cast()) }
            .check("cuDeviceGetGraphMemAttribute")?;
        Ok(v)
    }

    /// Bytes of graph allocations live now.
    pub fn used_mem_current(&self) -> Result<u64> {
        self.attribute(driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)
    }

    /// The most bytes of graph allocations live at once since the last reset.
    pub fn used_mem_high(&self) -> Result<u64> {
        self.attribute(driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
    }

    /// Bytes the driver holds for graph allocations.
    pub fn reserved_mem_current(&self) -> Result<u64> {
        self.attribute(driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)
    }

    /// The most bytes held for graph allocations since the last reset.
    pub fn reserved_mem_high(&self) -> Result<u64> {
        self.attribute(driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
    }

    /// Resets both high-water marks to the current figures.
    pub fn reset_high_water_marks(&self) -> Result<()> {
        for attr in [
            driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
            driver::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH,
        ] {
            let mut zero = 0u64;
            // SAFETY: the only value these attributes accept is 0, passed as a 64-bit value.
            unsafe { driver::cuDeviceSetGraphMemAttribute(self.device.handle(), attr, (&mut zero as *mut u64).cast()) }
                .check("cuDeviceSetGraphMemAttribute")?;
        }
        Ok(())
    }

    /// Gives memory held for graph allocations but unused back to the system
    /// (`cuDeviceGraphMemTrim`).
    pub fn trim(&self) -> Result<()> {
        // SAFETY: a valid device handle.
        unsafe { driver::cuDeviceGraphMemTrim(self.device.handle()) }.check("cuDeviceGraphMemTrim")
    }
}

impl MemoryResource for GraphMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        if crate::graph::capture_target(stream)?.is_none() {
            return Err(CudaError::InvalidArgument(
                "GraphMemoryResource allocates only on a stream being captured into a graph (a GraphBuilder's stream)"
                    .into(),
            ));
        }
        let mut ptr = 0;
        // SAFETY: the stream is capturing; out-pointer to a local.
        unsafe { driver::cuMemAllocAsync(&mut ptr, size, stream.handle()) }.check("cuMemAllocAsync")?;
        Ok(ptr)
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded to the caller; graph memory may be freed in the graph or outside it.
        unsafe { free_async(ptr, stream) }
    }
    fn is_device_accessible(&self) -> bool {
        true
    }
    fn is_host_accessible(&self) -> bool {
        false
    }
    fn device(&self) -> Option<Device> {
        Some(self.device)
    }
}
