//! The driver's memory pools: [`DeviceMemoryResource`] and [`PinnedMemoryResource`].

use super::{device_location, free_async, location, read_write_access, Buffer, MemoryResource};
use crate::device::Device;
use crate::error::{record_drop_error, Check};
use crate::stream::capture::{capture_info, captures_running};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, Weak};

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
        if self.owned && crate::reaper::in_callback() {
            // On a driver thread: destroyed on the release thread instead.
            crate::reaper::drop_later(Box::new(Pool {
                handle: self.handle,
                owned: true,
            }));
            self.owned = false;
            return;
        }
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
    #[inline]
    /// `size` bytes on `stream`; refused on a stream being captured, as in `cuda.core` (the
    /// driver would record graph memory, which is [`GraphMemoryResource`]'s to make). `what`
    /// names the resource in the error.
    fn allocate(&self, size: usize, stream: &Stream, what: &str) -> Result<driver::CUdeviceptr> {
        if captures_running() && capture_info(stream.handle())?.is_some() {
            return Err(CudaError::InvalidArgument(format!(
                "{what} cannot perform memory operations on a capturing stream (consider using GraphMemoryResource)."
            )));
        }
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
    /// For a pool opened from another process: the pointers imported from it and not yet freed
    /// (one buffer each: a second import of a live pointer would give two owners of one mapping).
    imports: Mutex<HashSet<driver::CUdeviceptr>>,
}

impl DeviceMemoryResource {
    /// The device's default pool (`cuDeviceGetDefaultMemPool`; not destroyed). As in `cuda.core`,
    /// its release threshold is raised to `u64::MAX` when it is 0, so that freed memory stays in
    /// the pool across synchronisations.
    pub fn default_pool(device: &Device) -> Result<Arc<DeviceMemoryResource>> {
        let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuDeviceGetDefaultMemPool(&mut handle, device.handle()) }
            .check("cuDeviceGetDefaultMemPool")?;
        let resource = DeviceMemoryResource::wrap(Pool { handle, owned: false }, device, false, false);
        // As cuda.core does: freed memory stays in the default pool across synchronisations
        // (the driver's threshold of 0 returns it to the system at every one), unless someone
        // chose a threshold already.
        if resource.release_threshold()? == 0 {
            resource.set_release_threshold(u64::MAX)?;
        }
        Ok(Arc::new(resource))
    }

    fn wrap(pool: Pool, device: &Device, ipc: bool, imported: bool) -> DeviceMemoryResource {
        DeviceMemoryResource {
            pool,
            device: *device,
            ipc,
            imported,
            exported: false.into(),
            imports: Mutex::default(),
        }
    }

    /// A new pool on `device`, destroyed when the resource and every buffer from it are gone.
    pub fn new(device: &Device, options: DeviceMemoryResourceOptions) -> Result<Arc<DeviceMemoryResource>> {
        let mut props = driver::CUmemPoolProps {
            allocType: driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            location: device_location(device),
            maxSize: options.max_size.unwrap_or(0),
            ..Default::default()
        };
        if options.ipc_enabled {
            props.handleTypes = driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        }
        let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: props is fully initialised; out-pointer to a local.
        unsafe { driver::cuMemPoolCreate(&mut handle, &props) }.check("cuMemPoolCreate")?;
        Ok(Arc::new(DeviceMemoryResource::wrap(
            Pool { handle, owned: true },
            device,
            options.ipc_enabled,
            false,
        )))
    }

    /// A file descriptor another process can open this pool with (the pool must be made with
    /// `ipc_enabled`). Send it with [`crate::ipc::send_fd`].
    pub fn export_fd(&self) -> Result<std::os::fd::OwnedFd> {
        if self.imported {
            return Err(CudaError::InvalidArgument(
                "export_fd: this pool was opened from another process (from_fd): export it in the process that made it, or pass on the file descriptor it was opened with".into(),
            ));
        }
        if !self.ipc {
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
        // Importing a pool again may give the handle already imported: one resource owns it (a
        // second would destroy it twice, and its buffers would escape the first's import checks).
        static IMPORTED: Mutex<Option<HashMap<usize, Weak<DeviceMemoryResource>>>> = Mutex::new(None);
        let mut imported = IMPORTED.lock().unwrap_or_else(|p| p.into_inner());
        let map = imported.get_or_insert_with(HashMap::new);
        map.retain(|_, w| w.strong_count() > 0);
        if let Some(existing) = map.get(&(handle as usize)).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        let resource = Arc::new(DeviceMemoryResource::wrap(
            Pool { handle, owned: true },
            device,
            true,
            true,
        ));
        map.insert(handle as usize, Arc::downgrade(&resource));
        Ok(resource)
    }

    /// Whether the pool was opened from another process.
    pub fn is_imported(&self) -> bool {
        self.imported
    }

    /// Records `ptr` as imported into this (imported) pool; `false` when it already is (and not
    /// yet freed).
    pub(crate) fn note_import(&self, ptr: driver::CUdeviceptr) -> bool {
        self.imports.lock().unwrap_or_else(|p| p.into_inner()).insert(ptr)
    }

    /// Forgets an import that did not become a buffer.
    pub(crate) fn forget_import(&self, ptr: driver::CUdeviceptr) {
        self.imports.lock().unwrap_or_else(|p| p.into_inner()).remove(&ptr);
    }

    /// `size` bytes ordered on `stream`, freed on the same stream when the buffer goes.
    #[inline]
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
            location: device_location(peer),
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

// SAFETY: pool allocations are stream-ordered (usable after the allocation in `stream`'s order,
// freed stream-ordered by cuMemFreeAsync), device memory of `device` that the host cannot touch.
// An imported pool refuses to allocate; its pointers come from `Buffer::from_ipc_descriptor`,
// which checks each against the driver's allocation range. A stream being captured is refused
// (see `Pool::allocate`).
unsafe impl MemoryResource for DeviceMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        if self.imported {
            return Err(CudaError::InvalidArgument(
                "a pool opened from another process cannot allocate".into(),
            ));
        }
        self.pool.allocate(size, stream, "DeviceMemoryResource").map_err(|e| {
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
        unsafe { free_async(ptr, stream) }?;
        if self.imported {
            // The mapping goes when the free runs: wait for it before the pointer may be imported
            // again, so a new buffer never gets a mapping that is about to go.
            stream.sync()?;
            self.forget_import(ptr);
        }
        Ok(())
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
            Some(n) if n < 0 => {
                return Err(CudaError::InvalidArgument(format!(
                    "PinnedMemoryResource: numa_node must not be negative, got {n}"
                )))
            }
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

// SAFETY: host-pool allocations are stream-ordered (cuMemAllocFromPoolAsync / cuMemFreeAsync),
// page-locked host memory the host can read and write and every device was granted access to.
unsafe impl MemoryResource for PinnedMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        self.pool.allocate(size, stream, "PinnedMemoryResource")
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

    /// A buffer from the default pool holding a copy of `data`, ordered on `stream`; waits for
    /// the copy (see [`Buffer::from_slice`]).
    pub fn allocate_from_slice<T: crate::Pod>(&self, data: &[T], stream: &Stream) -> Result<Buffer> {
        Buffer::from_slice(self.memory_resource()?, data, stream)
    }
}
