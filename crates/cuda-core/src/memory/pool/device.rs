//! [`DeviceMemoryResource`]: device memory from a pool (the device's current pool, or a new one,
//! shareable with other processes), with the peers that may use it.

use super::{deref_to_pool, MemoryPool};
use crate::device::Device;
use crate::error::Check;
use crate::memory::{device_location, Buffer, Holder, MemoryResource};
use crate::stream::{Site, Stream};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::{Arc, Mutex, OnceLock};

/// Options of a new [`DeviceMemoryResource`] pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceMemoryResourceOptions {
    /// The most the pool may hold, in bytes (the driver's default when `None`).
    pub max_size: Option<usize>,
    /// Shareable with other processes through POSIX file descriptors.
    pub ipc_enabled: bool,
}

/// Device memory from a pool: the device's current pool, or a new one. Its pool's attributes
/// and sharing ([`MemoryPool`]) are reached through `Deref`: `mr.release_threshold()`,
/// `mr.attributes()`, `mr.export_fd()`.
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
    pool: MemoryPool,
    device: Device,
    /// Serialises changes of the peers' access (read, compare, set).
    peers: Mutex<()>,
    /// Set for a device's default resource ([`Device::memory_resource`]), which lives in a
    /// `static`: its buffers hold it without counting (see [`Holder`]).
    process: OnceLock<&'static Arc<dyn MemoryResource>>,
}

deref_to_pool!(DeviceMemoryResource);

impl DeviceMemoryResource {
    /// The device's default pool (`cuDeviceGetDefaultMemPool`; never destroyed). Not the
    /// device's current pool, as `cuda.core` takes: a pool another library made current with
    /// `cuDeviceSetMemPool` is that library's to destroy, and this crate keeps its default
    /// resource for the life of the process. As in `cuda.core`, its release threshold is
    /// raised to `u64::MAX` when it is 0, so that freed memory stays in the pool across
    /// synchronisations.
    ///
    /// The pool's calls are made in relaxed capture mode, as `cuda.core` 1.3 makes them: made
    /// first inside a `Global` or `ThreadLocal` capture (on this thread or another), they would
    /// otherwise be refused and invalidate that capture; they record nothing into it.
    pub fn default_pool(device: &Device) -> Result<Arc<DeviceMemoryResource>> {
        crate::stream::relaxed_capture_mode(|| {
            let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
            // SAFETY: out-pointer to a local.
            unsafe { driver::cuDeviceGetDefaultMemPool(&mut handle, device.handle()) }
                .check("cuDeviceGetDefaultMemPool")?;
            let resource = DeviceMemoryResource::wrap(MemoryPool::borrowed(handle, Some(*device)), device);
            // As cuda.core does: freed memory stays in the default pool across synchronisations
            // (the driver's threshold of 0 returns it to the system at every one), unless
            // someone chose a threshold already.
            if resource.release_threshold()? == 0 {
                resource.set_release_threshold(u64::MAX)?;
            }
            Ok(Arc::new(resource))
        })
    }

    /// For a device's default resource: where the resource lives (see `process_resource`).
    pub(super) fn set_process(&self, lives_in: &'static Arc<dyn MemoryResource>) {
        self.process.get_or_init(|| lives_in);
    }

    fn wrap(pool: MemoryPool, device: &Device) -> DeviceMemoryResource {
        DeviceMemoryResource {
            pool,
            device: *device,
            peers: Mutex::new(()),
            process: OnceLock::new(),
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
        let pool = MemoryPool::create(&props, Some(*device), options.ipc_enabled)?;
        Ok(Arc::new(DeviceMemoryResource::wrap(pool, device)))
    }

    /// Opens a pool another process exported ([`MemoryPool::export_fd`]), on `device`. Buffers
    /// of that process come in through [`Buffer::from_ipc_descriptor`]; an imported pool cannot
    /// allocate.
    pub fn from_fd(device: &Device, fd: std::os::fd::OwnedFd) -> Result<Arc<DeviceMemoryResource>> {
        MemoryPool::import_as(&fd, Some(*device), |pool| DeviceMemoryResource::wrap(pool, device))
    }

    /// Whether the pool was opened from another process (`cuda.core`'s `is_mapped`).
    pub fn is_imported(&self) -> bool {
        self.pool.is_mapped()
    }

    /// `size` bytes ordered on `stream`, freed on the same stream when the buffer goes.
    #[inline]
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        // The common case, in one driver call: a plain stream (the buffer's deallocation site,
        // the same on every thread), no capture anywhere (none begins until `quiet` goes, so the
        // allocation is not recorded into a graph), a pool made in this process.
        if !self.pool.imported && Site::is_plain_stream(stream) {
            if let Some(quiet) = stream.quietly() {
                let mut ptr = 0;
                // SAFETY: the pool and the stream are live (held by `self` and `stream`);
                // out-pointer to a local.
                let status =
                    unsafe { driver::cuMemAllocFromPoolAsync(&mut ptr, size, self.pool.handle, stream.handle()) };
                drop(quiet);
                status
                    .check("cuMemAllocFromPoolAsync")
                    .map_err(super::allocation_error)?;
                // The buffer's references (on the stream, and on this resource unless it is a
                // device's default one) are taken after the call: nothing to undo when it fails,
                // and no atomic read-modify-write right before it.
                return Ok(Buffer::from_local_pool(ptr, size, self, Site::of_plain(stream)));
            }
        }
        self.allocate_in_general(size, stream)
    }

    /// [`allocate`](Self::allocate) on a default stream, during a capture somewhere, on a host
    /// function's thread, or from an imported pool (refused).
    #[cold]
    #[inline(never)]
    fn allocate_in_general(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        // (`self` is the holder's resource: its pool allocates, without a dynamic call.)
        Buffer::allocate_with(Holder::of_device_pool(self), size, stream, |_, stream| {
            self.pool.allocate(size, stream, "DeviceMemoryResource")
        })
    }

    /// For a device's default resource, which lives in a `static`: itself as its buffers hold
    /// it (uncounted; see [`Holder`]).
    #[inline]
    pub(crate) fn process_resource(&self) -> Option<&'static Arc<dyn MemoryResource>> {
        self.process.get().copied()
    }

    /// The other devices whose kernels may read and write the pool's memory (`cuda.core`'s
    /// `peer_accessible_by`), in device order. Read-only access does not count.
    pub fn peer_accessible_by(&self) -> Result<Vec<Device>> {
        let mut peers = Vec::new();
        for d in Device::all()? {
            if d != self.device
                && self.pool.access(&d)? == driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            {
                peers.push(d);
            }
        }
        Ok(peers)
    }

    /// Makes `devices` exactly the peers that may use the pool's memory (`cuda.core`'s
    /// `peer_accessible_by = devices`): grants the new ones and revokes the others, in one
    /// driver call (after the work queued by the peers losing access is done). The pool's own device is ignored. Every device must be able to reach this
    /// one ([`Device::can_access_peer`]); otherwise nothing changes and the error names them.
    pub fn set_peer_accessible_by(&self, devices: &[Device]) -> Result<()> {
        let mut wanted: Vec<Device> = devices.iter().copied().filter(|d| *d != self.device).collect();
        wanted.sort_by_key(Device::device_id);
        wanted.dedup();
        let mut unreachable = Vec::new();
        for d in &wanted {
            if !self.device.can_access_peer(d)? {
                unreachable.push(d.device_id().to_string());
            }
        }
        if !unreachable.is_empty() {
            return Err(CudaError::InvalidArgument(format!(
                "Device {} cannot access peer(s): {}",
                self.device.device_id(),
                unreachable.join(", ")
            )));
        }
        let _serial = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.peer_accessible_by()?;
        let mut descs = Vec::new();
        for d in wanted.iter().filter(|d| !current.contains(d)) {
            descs.push(access_desc(d, true));
        }
        for d in current.iter().filter(|d| !wanted.contains(d)) {
            revoking(d)?;
            descs.push(access_desc(d, false));
        }
        self.pool.set_access(&descs)
    }

    /// Grants or revokes one peer's access (`peer_accessible_by.add` / `.discard`); the pool's
    /// own device is ignored.
    pub fn set_peer_access(&self, peer: &Device, enabled: bool) -> Result<()> {
        if *peer == self.device {
            return Ok(());
        }
        if enabled && !self.device.can_access_peer(peer)? {
            return Err(CudaError::InvalidArgument(format!(
                "Device {} cannot access peer: {}",
                self.device.device_id(),
                peer.device_id()
            )));
        }
        let _serial = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if !enabled && self.peer_accessible_by()?.contains(peer) {
            revoking(peer)?;
        }
        self.pool.set_access(&[access_desc(peer, enabled)])
    }
}

/// Before a peer loses access: its work queued so far (in its primary context) is waited for,
/// since the revocation takes effect at once. Work the caller queued in contexts it created on
/// the peer must be synchronised by the caller (otherwise it faults, an error of that context).
fn revoking(peer: &Device) -> Result<()> {
    peer.primary_context()?.synchronize()
}

fn access_desc(device: &Device, enabled: bool) -> driver::CUmemAccessDesc {
    driver::CUmemAccessDesc {
        location: device_location(device),
        flags: if enabled {
            driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        } else {
            driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE
        },
    }
}

// SAFETY: pool allocations are stream-ordered (usable after the allocation in `stream`'s order,
// freed stream-ordered by cuMemFreeAsync), device memory of `device` that the host cannot touch.
// An imported pool refuses to allocate; its pointers come from `Buffer::from_ipc_descriptor`,
// which checks each against the driver's allocation range. A stream being captured is refused
// (see `MemoryPool::allocate`).
unsafe impl MemoryResource for DeviceMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        self.pool.allocate(size, stream, "DeviceMemoryResource")
    }
    fn ipc_pool(&self) -> Option<driver::CUmemoryPool> {
        self.pool.exportable().then_some(self.pool.handle())
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { self.pool.free(ptr, stream) }
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
    fn is_mapped(&self) -> bool {
        self.pool.is_mapped()
    }
    fn frees_in_stream_order(&self) -> bool {
        // An imported pool's free waits for its stream (see `MemoryPool::free`).
        !self.pool.is_mapped()
    }
    fn freed_by_mem_free_async(&self, _: crate::memory::sealed::Token) -> Option<Device> {
        // Imported pointers are tracked in the registry of imported pools and freed through it.
        (!self.pool.is_mapped()).then_some(self.device)
    }
}
