//! Managed (unified) memory: [`ManagedMemoryResource`] (a stream-ordered managed pool, or
//! `cuMemAllocManaged`), [`MemoryLocation`], and in `ops` the operations on managed buffers
//! (advice set and read back, prefetch, discard, their batch forms, host slices).

mod ops;

use super::pool::MemoryPool;
use super::{location, Buffer, MemoryResource};
use crate::device::Device;
use crate::error::Check;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::Arc;

/// Where memory lives or should be moved to: a device or the host (cuda.core's `Device` and
/// `Host` locations: `Host()`, `Host(numa_id=n)`, `Host.numa_current()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryLocation {
    /// The host, wherever the system places the memory.
    Host,
    /// The host memory of one NUMA node (`CU_MEM_LOCATION_TYPE_HOST_NUMA`).
    HostNuma(u32),
    /// The host memory of the NUMA node of the thread using it
    /// (`CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT`).
    HostNumaCurrent,
    /// A device.
    Device(Device),
}

impl From<Device> for MemoryLocation {
    fn from(d: Device) -> MemoryLocation {
        MemoryLocation::Device(d)
    }
}

impl From<&Device> for MemoryLocation {
    fn from(d: &Device) -> MemoryLocation {
        MemoryLocation::Device(*d)
    }
}

impl MemoryLocation {
    /// The driver's `CUmemLocation`.
    pub(crate) fn to_driver(self) -> driver::CUmemLocation {
        use driver::CUmemLocationType as T;
        match self {
            MemoryLocation::Host => location(T::CU_MEM_LOCATION_TYPE_HOST, 0),
            // NUMA node ids are small; the driver's field is an int.
            MemoryLocation::HostNuma(n) => location(T::CU_MEM_LOCATION_TYPE_HOST_NUMA, n.min(i32::MAX as u32) as i32),
            MemoryLocation::HostNumaCurrent => location(T::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0),
            MemoryLocation::Device(d) => super::device_location(&d),
        }
    }

    /// The location a driver's `(type, id)` pair names; `None` for "no location"
    /// (`CU_MEM_LOCATION_TYPE_INVALID`) and for types this crate does not know.
    pub(crate) fn from_driver(kind: i32, id: i32) -> Option<MemoryLocation> {
        use driver::CUmemLocationType as T;
        match kind {
            k if k == T::CU_MEM_LOCATION_TYPE_DEVICE.0 as i32 => usize::try_from(id)
                .ok()
                .and_then(|i| Device::new(i).ok())
                .map(MemoryLocation::Device),
            k if k == T::CU_MEM_LOCATION_TYPE_HOST.0 as i32 => Some(MemoryLocation::Host),
            k if k == T::CU_MEM_LOCATION_TYPE_HOST_NUMA.0 as i32 => {
                u32::try_from(id).ok().map(MemoryLocation::HostNuma)
            }
            k if k == T::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT.0 as i32 => Some(MemoryLocation::HostNumaCurrent),
            _ => None,
        }
    }

    /// cuda.core's name of the location's kind, for messages.
    pub(crate) fn kind_name(self) -> &'static str {
        match self {
            MemoryLocation::Host => "host",
            MemoryLocation::HostNuma(_) => "host_numa",
            MemoryLocation::HostNumaCurrent => "host_numa_current",
            MemoryLocation::Device(_) => "device",
        }
    }
}

/// Options of a new [`ManagedMemoryResource`] pool (`cuda.core`'s
/// `ManagedMemoryResourceOptions`: its `preferred_location` and `preferred_location_type` are
/// one [`MemoryLocation`] here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ManagedMemoryResourceOptions {
    /// Where the pool's memory should preferably live (a device, the host, or a host NUMA node;
    /// `None`: no preference).
    pub preferred_location: Option<MemoryLocation>,
}

enum Backend {
    /// A stream-ordered managed pool (CUDA 13 drivers).
    Pool(MemoryPool),
    /// `cuMemAllocManaged`, freed after the stream's work.
    Unpooled,
}

/// `cuda.core`'s `UserWarning`, once per process: the current device lacks concurrent managed
/// access, so the host must not touch managed memory while kernels run.
fn warn_without_concurrent_access() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let Ok(device) = Device::current() else {
        return;
    };
    if device.properties().concurrent_managed_access().unwrap_or(1) != 0 {
        return;
    }
    crate::error::warn_once(&ONCE, || {
        crate::Warning::new(
            crate::WarningCategory::User,
            format!(
                "device {} does not support concurrent managed access: the host must not touch managed memory \
                 while any kernel runs on the device (synchronise first)",
                device.device_id()
            ),
        )
    });
}

/// Managed (unified) memory: one address for host and devices, migrated on demand. On CUDA 13
/// drivers it comes from a stream-ordered managed pool, as in `cuda.core`; see
/// [`unpooled`](Self::unpooled) for `cuMemAllocManaged`. Drivers refuse some advice on pool
/// memory (`CUDA_ERROR_NOT_SUPPORTED`; CUDA 13.0 refuses read-mostly advice there); unpooled
/// memory takes every piece of advice.
///
/// Where a device lacks concurrent managed access
/// (`device.properties().concurrent_managed_access()` is 0), the host must not touch managed
/// memory while any kernel runs: `cuda.core` warns about it; here the host slices of a buffer
/// are `unsafe` and say so, and copies go through the driver.
pub struct ManagedMemoryResource {
    backend: Backend,
    preferred_location: Option<MemoryLocation>,
}

impl ManagedMemoryResource {
    /// `cuda.core`'s `ManagedMemoryResource(options)`: without options, the driver's default
    /// managed pool (`cuMemGetDefaultMemPool`, never destroyed; not the current pool, which
    /// another library may have made current and destroy); with options, a new managed pool
    /// preferring their location (`cuMemPoolCreate`, destroyed with the resource and its
    /// buffers). Drivers older than CUDA 13 have no managed pools: there the resource is
    /// [`unpooled`](Self::unpooled), with the options' preferred location.
    pub fn new(options: Option<ManagedMemoryResourceOptions>) -> Result<Arc<ManagedMemoryResource>> {
        let preferred = options.and_then(|o| o.preferred_location);
        if preferred == Some(MemoryLocation::HostNumaCurrent) {
            return Err(CudaError::InvalidArgument(
                "ManagedMemoryResourceOptions: a pool cannot prefer HostNumaCurrent (it names no node); name the node with MemoryLocation::HostNuma".into(),
            ));
        }
        if super::driver_version().map_or(true, |v| v < (13, 0)) {
            return Ok(ManagedMemoryResource::unpooled(preferred));
        }
        let loc = match preferred {
            Some(l) => l.to_driver(),
            None => location(driver::CUmemLocationType::CU_MEM_LOCATION_TYPE_NONE, -1),
        };
        let pool = match options {
            None => {
                let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
                let mut loc = loc;
                // SAFETY: out-pointer to a local; the location is passed by pointer for the call.
                let got = unsafe {
                    driver::cuMemGetDefaultMemPool(
                        &mut handle,
                        &mut loc,
                        driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_MANAGED,
                    )
                }
                .check("cuMemGetDefaultMemPool");
                if let Err(e) = got {
                    let concurrent = Device::current()
                        .and_then(|d| d.properties().concurrent_managed_access())
                        .unwrap_or(0);
                    if e.driver_status() == Some(driver::CUresult::CUDA_ERROR_NOT_SUPPORTED) && concurrent == 0 {
                        return Err(CudaError::InvalidState(format!(
                            "{e}: The default memory pool on this device does not support managed allocations (concurrent managed access is not available). Use ManagedMemoryResource::new(Some(ManagedMemoryResourceOptions {{ .. }})) to create a dedicated managed pool."
                        )));
                    }
                    return Err(e);
                }
                MemoryPool::borrowed(handle, None)
            }
            Some(_) => {
                let props = driver::CUmemPoolProps {
                    allocType: driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_MANAGED,
                    location: loc,
                    ..Default::default()
                };
                MemoryPool::create(&props, None, false)?
            }
        };
        warn_without_concurrent_access();
        Ok(Arc::new(ManagedMemoryResource {
            backend: Backend::Pool(pool),
            preferred_location: preferred,
        }))
    }

    /// Managed memory from `cuMemAllocManaged` (attached globally), advised to prefer
    /// `preferred_location` when given, and freed (`cuMemFree`) after the work of its
    /// deallocation stream. Every driver has it, and every piece of advice applies to it (some
    /// drivers refuse some advice on pool memory).
    pub fn unpooled(preferred_location: Option<MemoryLocation>) -> Arc<ManagedMemoryResource> {
        warn_without_concurrent_access();
        Arc::new(ManagedMemoryResource {
            backend: Backend::Unpooled,
            preferred_location,
        })
    }

    /// The pool the memory comes from (`None` for [`unpooled`](Self::unpooled) memory): its
    /// attributes, handle and ownership, as `cuda.core`'s `_MemPool`.
    pub fn pool(&self) -> Option<&MemoryPool> {
        match &self.backend {
            Backend::Pool(p) => Some(p),
            Backend::Unpooled => None,
        }
    }

    /// Where the memory should preferably live (`None`: no preference).
    pub fn preferred_location(&self) -> Option<MemoryLocation> {
        self.preferred_location
    }

    /// `size` bytes, ordered on `stream`.
    ///
    /// Pool memory is prefetched to the stream's device as it is allocated (stream-ordered, no
    /// wait): a workaround for a driver bug (driver 580) where memory from managed pools, written
    /// by the GPU, synchronised and then read by the host (prefetched there, or touched) showed
    /// an earlier allocation's contents in about 1 in 30 allocations. With the prefetch, no
    /// stale read was seen (`tests/tests/managed.rs` checks both the workaround and whether the
    /// driver still needs it).
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }

    /// A `cuMemAllocManaged` allocation, in the current context.
    fn allocate_unpooled(&self, size: usize) -> Result<driver::CUdeviceptr> {
        let mut ptr = 0;
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuMemAllocManaged(&mut ptr, size.max(1), driver::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL.0) }
            .check("cuMemAllocManaged")?;
        if let Some(l) = self.preferred_location {
            // SAFETY: ptr is a live managed allocation of at least size bytes.
            let advised = unsafe {
                driver::cuMemAdvise(
                    ptr,
                    size.max(1),
                    driver::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                    l.to_driver(),
                )
            }
            .check("cuMemAdvise");
            if let Err(e) = advised {
                // SAFETY: allocated just above and used by nothing yet.
                let _ = unsafe { driver::cuMemFree(ptr) };
                return Err(e);
            }
        }
        Ok(ptr)
    }
}

// SAFETY: pool memory is stream-ordered (cuMemAllocFromPoolAsync / cuMemFreeAsync, refused on a
// capturing stream by `MemoryPool::allocate`); unpooled memory is allocated before the call
// returns (usable by any later work) and freed only after the deallocation stream's work is
// done (`stream.sync()` first). Managed memory is reachable from the host and every device
// with unified addressing.
unsafe impl MemoryResource for ManagedMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        match &self.backend {
            Backend::Pool(p) => {
                let ptr = p.allocate(size, stream, "ManagedMemoryResource")?;
                place_on_device(ptr, size, stream);
                Ok(ptr)
            }
            // Made in the stream's context, which the buffer holds (through its stream) for as
            // long as the memory lives: destroying a context frees what was allocated in it.
            Backend::Unpooled => stream
                .context_or_current()?
                .with_current(|| self.allocate_unpooled(size)),
        }
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        match &self.backend {
            // SAFETY: forwarded to the caller.
            Backend::Pool(p) => unsafe { p.free(ptr, stream) },
            // cuMemFree needs a current context: the stream's.
            Backend::Unpooled => stream.context_or_current()?.with_current(|| {
                super::wait_before_free(stream)?;
                // SAFETY: forwarded to the caller; the stream's work is done.
                unsafe { driver::cuMemFree(ptr) }.check("cuMemFree")
            }),
        }
    }
    fn frees_in_stream_order(&self) -> bool {
        // (An imported pool's free waits for its stream: see `MemoryPool::free`.)
        matches!(&self.backend, Backend::Pool(p) if !p.is_mapped())
    }
    fn is_device_accessible(&self) -> bool {
        true
    }
    fn is_host_accessible(&self) -> bool {
        true
    }
    fn device(&self) -> Option<Device> {
        match self.preferred_location {
            Some(MemoryLocation::Device(d)) => Some(d),
            _ => None,
        }
    }
    fn is_managed(&self) -> bool {
        true
    }
}

/// Prefetches new managed-pool memory to the device of `stream` (the current one for a default
/// stream), ordered on `stream`: the workaround described at [`ManagedMemoryResource::allocate`].
/// Called inside the allocation's operation on the stream, which is not capturing (pools refuse
/// capturing streams). A refused prefetch (a device without concurrent managed access, where
/// the bug was not seen) leaves the memory as the driver placed it: it is valid either way.
fn place_on_device(ptr: driver::CUdeviceptr, size: usize, stream: &Stream) {
    if size == 0 {
        return;
    }
    let device = match stream.device() {
        Some(d) => d,
        None => match Device::current() {
            Ok(d) => d,
            Err(_) => return,
        },
    };
    let at = MemoryLocation::Device(device).to_driver();
    // SAFETY: ptr is a live managed allocation of size bytes, made on `stream` just now (the
    // buffer that will own it is not made yet, so nothing else uses it); the stream is live.
    let _ = unsafe { driver::cuMemPrefetchAsync(ptr, size, at, 0, stream.handle()) };
}
