//! [`PinnedMemoryResource`]: page-locked host memory from a host pool (the host's current pool,
//! or a new one, on a NUMA node, shareable with other processes); [`PortablePinnedMemoryResource`]:
//! whatever pinned memory the driver offers ([`PinnedMemoryResource::portable`]).

use super::{deref_to_pool, MemoryPool};
use crate::device::Device;
use crate::error::Check;
use crate::memory::{location, read_write_access, Buffer, HostAllocFlags, LegacyPinnedMemoryResource, MemoryResource};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::Arc;

/// Options of a new [`PinnedMemoryResource`] pool (`cuda.core`'s
/// `PinnedMemoryResourceOptions`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PinnedMemoryResourceOptions {
    /// Shareable with other processes through POSIX file descriptors. The driver shares host
    /// pools of one NUMA node only: without `numa_id`, the current device's host NUMA node.
    pub ipc_enabled: bool,
    /// The most the pool may hold, in bytes (the driver's default when `None`).
    pub max_size: Option<usize>,
    /// The NUMA node the memory lives on (`None`: where the system places it).
    pub numa_id: Option<u32>,
}

/// Page-locked host memory from a host pool: readable by the host and by kernels on every
/// device, and the fastest way in and out of the GPU. Its pool ([`MemoryPool`]) is reached
/// through `Deref`.
pub struct PinnedMemoryResource {
    pool: MemoryPool,
    numa_id: Option<u32>,
}

deref_to_pool!(PinnedMemoryResource);

impl PinnedMemoryResource {
    /// The host's default pinned pool (`cuMemGetDefaultMemPool`, CUDA 13 drivers; never
    /// destroyed), as `cuda.core`'s `PinnedMemoryResource()` (which takes the current pool: a
    /// pool another library made current is that library's to destroy).
    pub fn default_pool() -> Result<Arc<PinnedMemoryResource>> {
        let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
        let mut loc = location(driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0);
        // SAFETY: out-pointer to a local; the location is passed by pointer for the call.
        unsafe {
            driver::cuMemGetDefaultMemPool(
                &mut handle,
                &mut loc,
                driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            )
        }
        .check("cuMemGetDefaultMemPool")
        .map_err(|e| {
            CudaError::InvalidArgument(format!(
                "{e}: the host's default pinned pool needs a CUDA 13 driver; make a pool with PinnedMemoryResource::new instead"
            ))
        })?;
        let resource = PinnedMemoryResource {
            pool: MemoryPool::borrowed(handle, None),
            numa_id: None,
        };
        resource.grant_every_device()?;
        Ok(Arc::new(resource))
    }

    /// A new host pool, destroyed when the resource and every buffer from it are gone.
    pub fn new(options: PinnedMemoryResourceOptions) -> Result<Arc<PinnedMemoryResource>> {
        let numa_id = match (options.numa_id, options.ipc_enabled) {
            (Some(n), _) => Some(n),
            (None, false) => None,
            (None, true) => {
                let id = Device::current()
                    .and_then(|d| d.properties().host_numa_id())
                    .unwrap_or(-1);
                Some(u32::try_from(id).map_err(|_| {
                    CudaError::InvalidState(
                        "Cannot determine host NUMA ID for IPC-enabled pinned memory pool. The system may not support NUMA, or no CUDA context is active. Set numa_id explicitly or call Device.set_current() first.".into(),
                    )
                })?)
            }
        };
        let loc = match numa_id {
            Some(n) => location(
                driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA,
                i32::try_from(n).map_err(|_| CudaError::InvalidArgument(format!("numa_id {n} is not a NUMA node")))?,
            ),
            None => location(driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0),
        };
        let mut props = driver::CUmemPoolProps {
            allocType: driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            location: loc,
            maxSize: options.max_size.unwrap_or(0),
            ..Default::default()
        };
        if options.ipc_enabled {
            props.handleTypes = driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        }
        let resource = PinnedMemoryResource {
            pool: MemoryPool::create(&props, None, options.ipc_enabled)?,
            numa_id,
        };
        resource.grant_every_device()?;
        Ok(Arc::new(resource))
    }

    /// Opens a host pool another process exported ([`MemoryPool::export_fd`]). Buffers of that
    /// process come in through [`Buffer::from_ipc_descriptor`]; an imported pool cannot
    /// allocate.
    pub fn from_fd(fd: std::os::fd::OwnedFd) -> Result<Arc<PinnedMemoryResource>> {
        let resource = MemoryPool::import_as(&fd, None, |pool| PinnedMemoryResource { pool, numa_id: None })?;
        resource.grant_every_device()?;
        Ok(resource)
    }

    /// Kernels on every device may use the memory (what `is_device_accessible` promises).
    fn grant_every_device(&self) -> Result<()> {
        let descs: Vec<_> = Device::all()?.iter().map(read_write_access).collect();
        self.pool.set_access(&descs)
    }

    /// The NUMA node the memory lives on (`None`: where the system places it; `cuda.core`
    /// says -1).
    pub fn numa_id(&self) -> Option<u32> {
        self.numa_id
    }

    /// `size` bytes ordered on `stream`.
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }
}

// SAFETY: host-pool allocations are stream-ordered (cuMemAllocFromPoolAsync / cuMemFreeAsync),
// page-locked host memory the host can read and write and every device was granted access to.
// An imported pool refuses to allocate; its pointers come from `Buffer::from_ipc_descriptor`,
// which checks each against the driver's allocation range.
unsafe impl MemoryResource for PinnedMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        self.pool.allocate(size, stream, "PinnedMemoryResource")
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { self.pool.free(ptr, stream) }
    }
    fn ipc_pool(&self) -> Option<driver::CUmemoryPool> {
        self.pool.exportable().then_some(self.pool.handle())
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
    fn is_mapped(&self) -> bool {
        self.pool.is_mapped()
    }
    fn frees_in_stream_order(&self) -> bool {
        // An imported pool's free waits for its stream (see `MemoryPool::free`).
        !self.pool.is_mapped()
    }
}

/// Which pinned host memory [`PinnedMemoryResource::portable`] found the driver offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PinnedMemoryKind {
    /// The host's default pinned pool (`cuMemGetDefaultMemPool`, CUDA 13 drivers): allocations
    /// and frees are stream-ordered.
    DefaultPool,
    /// A host pool of its own (`cuMemPoolCreate` with a host location), where the driver makes
    /// host pools but has no default one: stream-ordered too.
    OwnPool,
    /// Page-locked allocations (`cuMemHostAlloc`, what [`LegacyPinnedMemoryResource`] makes),
    /// where the driver makes no host pool: each allocation synchronises, and a free waits for
    /// its stream (on this crate's release thread for a drop).
    Legacy,
}

/// Pinned host memory from whatever the driver offers, behind one constructor
/// ([`PinnedMemoryResource::portable`]): the host's default pinned pool on CUDA 13 drivers, a
/// host pool of its own where the driver makes host pools but has no default one, and
/// page-locked allocations ([`LegacyPinnedMemoryResource`]) before that.
/// [`kind`](Self::kind) says which. The memory is host-accessible and device-accessible
/// whichever it is, so the same program runs everywhere.
pub struct PortablePinnedMemoryResource {
    backing: Backing,
}

enum Backing {
    Pool(Arc<PinnedMemoryResource>, PinnedMemoryKind),
    Legacy(Arc<LegacyPinnedMemoryResource>),
}

impl PinnedMemoryResource {
    /// Pinned host memory from whatever this driver offers, tried in this order: the host's
    /// default pinned pool ([`default_pool`](Self::default_pool), CUDA 13), a new pool of its
    /// own ([`new`](Self::new) with default options), page-locked allocations
    /// ([`LegacyPinnedMemoryResource`]). [`PortablePinnedMemoryResource::kind`] says which.
    /// An error only when there is no driver to ask.
    pub fn portable() -> Result<Arc<PortablePinnedMemoryResource>> {
        crate::memory::driver_version()?;
        let backing = match PinnedMemoryResource::default_pool() {
            Ok(pool) => Backing::Pool(pool, PinnedMemoryKind::DefaultPool),
            Err(_) => match PinnedMemoryResource::new(PinnedMemoryResourceOptions::default()) {
                Ok(pool) => Backing::Pool(pool, PinnedMemoryKind::OwnPool),
                Err(_) => Backing::Legacy(LegacyPinnedMemoryResource::new(HostAllocFlags::empty())),
            },
        };
        Ok(Arc::new(PortablePinnedMemoryResource { backing }))
    }
}

impl PortablePinnedMemoryResource {
    /// Which memory it gives.
    pub fn kind(&self) -> PinnedMemoryKind {
        match &self.backing {
            Backing::Pool(_, kind) => *kind,
            Backing::Legacy(_) => PinnedMemoryKind::Legacy,
        }
    }

    /// The pool resource (attributes, release threshold), unless the memory is page-locked
    /// allocations.
    pub fn pool(&self) -> Option<&Arc<PinnedMemoryResource>> {
        match &self.backing {
            Backing::Pool(pool, _) => Some(pool),
            Backing::Legacy(_) => None,
        }
    }

    /// `size` bytes ordered on `stream` (the deallocation stream; see [`Buffer::allocate`]).
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }

    fn inner(&self) -> &dyn MemoryResource {
        match &self.backing {
            Backing::Pool(pool, _) => pool.as_ref(),
            Backing::Legacy(legacy) => legacy.as_ref(),
        }
    }
}

impl std::fmt::Debug for PortablePinnedMemoryResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortablePinnedMemoryResource")
            .field("kind", &self.kind())
            .finish()
    }
}

// SAFETY: every answer and call is the backing resource's, which keeps the trait's promises
// (both are this crate's resources, and their answers never change); the backing never changes.
// The pool is not shared with other processes (made with default options, or the host's
// default pool, which is not exportable): `ipc_pool` says so through the backing.
unsafe impl MemoryResource for PortablePinnedMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        self.inner().allocate(size, stream)
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, size: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded to the caller (the pointer came from the same backing).
        unsafe { self.inner().deallocate(ptr, size, stream) }
    }
    fn is_device_accessible(&self) -> bool {
        self.inner().is_device_accessible()
    }
    fn is_host_accessible(&self) -> bool {
        self.inner().is_host_accessible()
    }
    fn device(&self) -> Option<Device> {
        self.inner().device()
    }
    fn ipc_pool(&self) -> Option<driver::CUmemoryPool> {
        self.inner().ipc_pool()
    }
    fn is_mapped(&self) -> bool {
        self.inner().is_mapped()
    }
    fn frees_in_stream_order(&self) -> bool {
        self.inner().frees_in_stream_order()
    }
}
