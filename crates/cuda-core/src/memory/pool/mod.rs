//! The driver's memory pools (`cuMemAllocFromPoolAsync`): [`MemoryPool`], what every pool
//! resource shares (attributes, sharing with other processes), and the resources built on one:
//! [`DeviceMemoryResource`] (`device`), [`PinnedMemoryResource`] (`pinned`), and the managed
//! pool of [`super::ManagedMemoryResource`]. A device's own resource (`defaults`: the chosen one,
//! its default pool, or on a device without pools the synchronous fallback of `synchronous`).

mod defaults;
mod device;
mod pinned;
mod synchronous;

pub use device::{DeviceMemoryResource, DeviceMemoryResourceOptions};
pub use pinned::{PinnedMemoryKind, PinnedMemoryResource, PinnedMemoryResourceOptions, PortablePinnedMemoryResource};
pub use synchronous::SynchronousMemoryResource;

mod destroy;

use crate::device::Device;
use crate::error::{record_drop_error, Check};
use crate::stream::capture::{capture_info, captures_running};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use destroy::DestroyWhenUnused;
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A memory pool and what `cuda.core`'s `_MemPool` says of it: its handle, attributes, and
/// whether it is shared with other processes. [`DeviceMemoryResource`],
/// [`PinnedMemoryResource`] and [`super::ManagedMemoryResource`] dereference to theirs, so
/// `mr.attributes()`, `mr.release_threshold()` or `mr.is_ipc_enabled()` read as in `cuda.core`.
pub struct MemoryPool {
    handle: driver::CUmemoryPool,
    /// Made here (`cuMemPoolCreate` or an import): destroyed with the resource.
    owned: bool,
    /// Made shareable with other processes (POSIX file descriptors), or opened from one.
    ipc: bool,
    /// Opened from another process's export.
    imported: bool,
    /// A managed pool made here: destroyed only once the frees queued into it ran (see
    /// `DestroyWhenUnused`).
    managed: bool,
    /// The device whose memory it is (`None` for host and managed pools).
    device: Option<Device>,
    /// Set by `export_fd`: the driver shares pointers only of a pool already shared.
    exported: AtomicBool,
    /// For a pool opened from another process: its entry in the registry of imported pools
    /// (which import of the handle owns it now).
    import_id: u64,
    /// For a pool opened from another process: the pointers imported from it and not yet freed
    /// (one buffer each: a second import of a live pointer would give two owners of one mapping).
    imports: Mutex<HashSet<driver::CUdeviceptr>>,
}

/// The pools opened from other processes, by handle: importing a pool the process already has
/// open gives the same handle (the driver counts no references), so one resource owns each
/// handle. An entry names the import that owns the handle and a weak reference to its resource;
/// a pool destroys its handle only while its entry is still its own, under this lock, so a new
/// import of the same handle never races the old owner's destruction.
type ImportRegistry = Vec<(usize, u64, std::sync::Weak<dyn std::any::Any + Send + Sync>)>;
static IMPORTED: Mutex<ImportRegistry> = Mutex::new(Vec::new());

/// The live pools this process made (`cuMemPoolCreate`), by handle: importing one of them (this
/// process's own export) gives its handle back, which the import must never destroy. The lock
/// is held across a create and its insertion and across a destroy and its removal, so a handle
/// the driver reuses is never missing while live.
static MADE: Mutex<std::collections::BTreeSet<usize>> = Mutex::new(std::collections::BTreeSet::new());

fn made() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<usize>> {
    MADE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A 64-bit attribute of the live pool `handle`.
fn attribute_u64(handle: driver::CUmemoryPool, attr: Attr) -> Result<u64> {
    let mut v = 0u64;
    // SAFETY: the caller's pool is live; the attributes read here are 64-bit values
    // (`cuuint64_t`).
    unsafe { driver::cuMemPoolGetAttribute(handle, attr, (&mut v as *mut u64).cast()) }
        .check("cuMemPoolGetAttribute")?;
    Ok(v)
}

// SAFETY: a CUmemoryPool is a process-wide handle the driver lets any thread use; the rest is
// atomics and a lock.
unsafe impl Send for MemoryPool {}
// SAFETY: as above.
unsafe impl Sync for MemoryPool {}

impl Drop for MemoryPool {
    fn drop(&mut self) {
        if self.owned && !crate::reaper::on_release_thread() {
            // Destroyed on the thread for slow drops (see `reaper::drop_slowly`): never on a driver
            // thread, and never by a drop elsewhere, as destroying a pool gives its memory back to
            // the device, which may wait for the work of the context's streams (other threads'
            // included).
            let later = MemoryPool {
                handle: self.handle,
                owned: true,
                ipc: self.ipc,
                imported: self.imported,
                managed: self.managed,
                device: self.device,
                exported: AtomicBool::new(false),
                import_id: self.import_id,
                imports: Mutex::default(),
            };
            crate::reaper::drop_slowly(Box::new(later));
            self.owned = false;
            return;
        }
        if !self.owned {
            return;
        }
        if !self.imported {
            // A pool made here (on the release thread now): destroyed once the frees queued
            // into it are done (see `DestroyWhenUnused`), at once when nothing is outstanding.
            let mut job = DestroyWhenUnused::new(self.handle, self.managed);
            if !crate::reaper::Retry::attempt(&mut job) {
                crate::reaper::retry(Box::new(job));
            }
            return;
        }
        // (Peer access is not revoked here: that takes effect at once, while the work queued on
        // the pool's memory may still run. A new device pool revokes what it may inherit.)
        let _registry = if self.imported {
            let mut registry = IMPORTED.lock().unwrap_or_else(|p| p.into_inner());
            let Some(at) = registry
                .iter()
                .position(|(h, id, _)| *h == self.handle as usize && *id == self.import_id)
            else {
                // A newer import of the handle owns it now.
                return;
            };
            registry.swap_remove(at);
            Some(registry)
        } else {
            None
        };
        // SAFETY: made by cuMemPoolCreate (or imported, and still ours in the registry, whose
        // lock is held so that no import takes the handle meanwhile), destroyed once; buffers
        // from it hold the resource (and so this pool) until they are freed.
        if let Err(e) = unsafe { driver::cuMemPoolDestroy(self.handle) }.check("cuMemPoolDestroy") {
            record_drop_error(e);
        }
    }
}

/// The attributes of a pool, read together (`cuda.core`'s `mr.attributes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryPoolAttributes {
    /// Freed memory may be reused by an allocation on another stream whose work depends on the
    /// free (`CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES`).
    pub reuse_follow_event_dependencies: bool,
    /// Freed memory may be reused once the free is known to be done, without a dependency
    /// (`CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC`).
    pub reuse_allow_opportunistic: bool,
    /// The driver may add dependencies to reuse freed memory
    /// (`CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES`).
    pub reuse_allow_internal_dependencies: bool,
    /// Memory the pool keeps across synchronisations instead of returning it to the system.
    pub release_threshold: u64,
    /// Memory the pool holds from the system now.
    pub reserved_mem_current: u64,
    /// The most memory the pool has held since the last reset.
    pub reserved_mem_high: u64,
    /// Memory handed out and not yet freed.
    pub used_mem_current: u64,
    /// The most memory handed out at once since the last reset.
    pub used_mem_high: u64,
}

use driver::CUmemPool_attribute as Attr;

impl MemoryPool {
    /// A pool this crate made with `props`. A device pool starts with no peer access: the
    /// driver may hand out the handle of a pool destroyed earlier, with the access it had.
    pub(crate) fn create(props: &driver::CUmemPoolProps, device: Option<Device>, ipc: bool) -> Result<MemoryPool> {
        let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
        {
            let mut made = made();
            // SAFETY: props is fully initialised; out-pointer to a local.
            unsafe { driver::cuMemPoolCreate(&mut handle, props) }.check("cuMemPoolCreate")?;
            made.insert(handle as usize);
        }
        let mut pool = MemoryPool::wrap(handle, true, device, ipc, false);
        pool.managed = props.allocType == driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_MANAGED;
        if device.is_some() && crate::device_count()? > 1 {
            pool.revoke_peers()?;
        }
        Ok(pool)
    }

    /// A pool of the driver's (a device's or the host's current pool): never destroyed here.
    pub(crate) fn borrowed(handle: driver::CUmemoryPool, device: Option<Device>) -> MemoryPool {
        MemoryPool::wrap(handle, false, device, false, false)
    }

    /// Opens a pool another process exported (`fd` from [`MemoryPool::export_fd`]), in the
    /// primary context of `device` (or of device 0 for host pools), as the resource `make`
    /// builds: or the resource that has it open already, when it is of type `R` (an error
    /// otherwise). One resource owns each imported handle (see `IMPORTED`).
    pub(crate) fn import_as<R: std::any::Any + Send + Sync>(
        fd: &std::os::fd::OwnedFd,
        device: Option<Device>,
        make: impl FnOnce(MemoryPool) -> R,
    ) -> Result<std::sync::Arc<R>> {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mut registry = IMPORTED.lock().unwrap_or_else(|p| p.into_inner());
        let mut pool = MemoryPool::import(fd, device)?;
        let key = pool.handle as usize;
        if made().contains(&key) {
            // This process's own pool: the import gave its handle, which its resource owns.
            pool.owned = false;
            return Err(CudaError::InvalidArgument(
                "the descriptor names a pool this process made (its own export): use that memory resource itself, not an import of it".into(),
            ));
        }
        if let Some(at) = registry.iter().position(|(h, _, _)| *h == key) {
            if let Some(live) = registry[at].2.upgrade() {
                // Already open: the import gave the same handle, which the live resource owns.
                pool.owned = false;
                return live.downcast::<R>().map_err(|_| {
                    CudaError::InvalidArgument(
                        "this pool is already open in this process as another kind of memory resource (a device pool opened as a pinned one, or the reverse)".into(),
                    )
                });
            }
            // Its resource is gone but its pool not yet destroyed: this import owns the handle
            // from now on, and the old pool leaves it alone.
            registry.swap_remove(at);
        }
        pool.import_id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let id = pool.import_id;
        // (`make` cannot fail: a pool dropped here would take the registry's lock again.)
        let resource = std::sync::Arc::new(make(pool));
        let weak: std::sync::Weak<dyn std::any::Any + Send + Sync> = {
            let any: std::sync::Arc<dyn std::any::Any + Send + Sync> = resource.clone();
            std::sync::Arc::downgrade(&any)
        };
        registry.push((key, id, weak));
        Ok(resource)
    }

    fn import(fd: &std::os::fd::OwnedFd, device: Option<Device>) -> Result<MemoryPool> {
        use std::os::fd::AsRawFd;
        let mut handle: driver::CUmemoryPool = std::ptr::null_mut();
        let context = match device {
            Some(d) => d.primary_context()?,
            None => Device::new(0)?.primary_context()?,
        };
        context.with_current(|| {
            // SAFETY: for POSIX file descriptors the handle is the descriptor's value itself; the
            // driver checks that it names an exported pool.
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
        Ok(MemoryPool::wrap(handle, true, device, true, true))
    }

    fn wrap(
        handle: driver::CUmemoryPool,
        owned: bool,
        device: Option<Device>,
        ipc: bool,
        imported: bool,
    ) -> MemoryPool {
        MemoryPool {
            handle,
            owned,
            ipc,
            imported,
            managed: false,
            device,
            exported: AtomicBool::new(false),
            import_id: 0,
            imports: Mutex::default(),
        }
    }

    /// `size` bytes on `stream`. Refused for a pool opened from another process, and on a
    /// stream being captured, as in `cuda.core` (the driver would record graph memory, which is
    /// [`super::GraphMemoryResource`]'s to make). `what` names the resource in the error.
    #[inline]
    pub(crate) fn allocate(&self, size: usize, stream: &Stream, what: &str) -> Result<driver::CUdeviceptr> {
        if self.imported {
            return Err(CudaError::InvalidType(format!(
                "Cannot allocate from a mapped IPC-enabled memory resource ({what} opened from another process: allocate in the process that made the pool)"
            )));
        }
        if captures_running() && capture_info(stream.handle())?.is_some() {
            return Err(CudaError::InvalidState(format!(
                "{what} cannot perform memory operations on a capturing stream (consider using GraphMemoryResource)."
            )));
        }
        let mut ptr = 0;
        // SAFETY: the pool and stream are live; out-pointer to a local.
        unsafe { driver::cuMemAllocFromPoolAsync(&mut ptr, size, self.handle, stream.handle()) }
            .check("cuMemAllocFromPoolAsync")
            .map_err(allocation_error)?;
        Ok(ptr)
    }

    /// Frees `ptr` stream-ordered on `stream` (`cuMemFreeAsync`). For a pool opened from
    /// another process, the mapping goes when the free runs: it is waited for before the
    /// pointer may be imported again, so a new buffer never gets a mapping that is about to go.
    /// After the free is queued, a failed wait is recorded, not returned (the caller would free
    /// again); the pointer then stays recorded and cannot be imported again.
    ///
    /// # Safety
    /// As [`super::MemoryResource::deallocate`]: `ptr` came from this pool, is freed once, and
    /// nothing uses it after the work queued on `stream`.
    #[inline]
    pub(crate) unsafe fn free(&self, ptr: driver::CUdeviceptr, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded to the caller.
        unsafe { super::free_async(ptr, stream) }?;
        if self.imported {
            self.forget_freed_import(ptr, stream);
        }
        Ok(())
    }

    /// After the free of an imported pointer was queued: waits for it, then lets the pointer be
    /// imported again (see [`free`](Self::free)).
    #[cold]
    fn forget_freed_import(&self, ptr: driver::CUdeviceptr, stream: &Stream) {
        match super::wait_before_free(stream) {
            Ok(()) => self.forget_import(ptr),
            Err(e) => record_drop_error(e),
        }
    }

    /// The `CUmemoryPool`.
    pub fn handle(&self) -> driver::CUmemoryPool {
        self.handle
    }

    /// Whether the pool was made here (and is destroyed with its resource), not a pool of the
    /// driver's.
    pub fn is_handle_owned(&self) -> bool {
        self.owned
    }

    /// Whether the pool can be shared with other processes (made with `ipc_enabled`, or opened
    /// from another process).
    pub fn is_ipc_enabled(&self) -> bool {
        self.ipc
    }

    /// Whether the pool was opened from another process (its memory is mapped here, and it
    /// cannot allocate).
    pub fn is_mapped(&self) -> bool {
        self.imported
    }

    /// Whether buffers of this pool can be exported now (shareable, and the pool exported).
    pub(crate) fn exportable(&self) -> bool {
        self.ipc && self.exported.load(Ordering::Acquire)
    }

    fn attribute_u64(&self, attr: Attr) -> Result<u64> {
        attribute_u64(self.handle, attr)
    }

    fn set_attribute_u64(&self, attr: Attr, value: u64) -> Result<()> {
        let mut v = value;
        // SAFETY: the attributes written here are 64-bit values (`cuuint64_t`).
        unsafe { driver::cuMemPoolSetAttribute(self.handle, attr, (&mut v as *mut u64).cast()) }
            .check("cuMemPoolSetAttribute")
    }

    fn attribute_bool(&self, attr: Attr) -> Result<bool> {
        let mut v: std::ffi::c_int = 0;
        // SAFETY: the reuse attributes are `int`s.
        unsafe { driver::cuMemPoolGetAttribute(self.handle, attr, (&mut v as *mut std::ffi::c_int).cast()) }
            .check("cuMemPoolGetAttribute")?;
        Ok(v != 0)
    }

    fn set_attribute_bool(&self, attr: Attr, value: bool) -> Result<()> {
        let mut v = std::ffi::c_int::from(value);
        // SAFETY: the reuse attributes are `int`s.
        unsafe { driver::cuMemPoolSetAttribute(self.handle, attr, (&mut v as *mut std::ffi::c_int).cast()) }
            .check("cuMemPoolSetAttribute")
    }

    /// Every attribute, read now.
    pub fn attributes(&self) -> Result<MemoryPoolAttributes> {
        Ok(MemoryPoolAttributes {
            reuse_follow_event_dependencies: self.reuse_follow_event_dependencies()?,
            reuse_allow_opportunistic: self.reuse_allow_opportunistic()?,
            reuse_allow_internal_dependencies: self.reuse_allow_internal_dependencies()?,
            release_threshold: self.release_threshold()?,
            reserved_mem_current: self.reserved_mem_current()?,
            reserved_mem_high: self.reserved_mem_high()?,
            used_mem_current: self.used_mem_current()?,
            used_mem_high: self.used_mem_high()?,
        })
    }

    /// See [`MemoryPoolAttributes::reuse_follow_event_dependencies`].
    pub fn reuse_follow_event_dependencies(&self) -> Result<bool> {
        self.attribute_bool(Attr::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES)
    }

    /// Sets [`reuse_follow_event_dependencies`](Self::reuse_follow_event_dependencies).
    pub fn set_reuse_follow_event_dependencies(&self, on: bool) -> Result<()> {
        self.set_attribute_bool(Attr::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, on)
    }

    /// See [`MemoryPoolAttributes::reuse_allow_opportunistic`].
    pub fn reuse_allow_opportunistic(&self) -> Result<bool> {
        self.attribute_bool(Attr::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC)
    }

    /// Sets [`reuse_allow_opportunistic`](Self::reuse_allow_opportunistic).
    pub fn set_reuse_allow_opportunistic(&self, on: bool) -> Result<()> {
        self.set_attribute_bool(Attr::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, on)
    }

    /// See [`MemoryPoolAttributes::reuse_allow_internal_dependencies`].
    pub fn reuse_allow_internal_dependencies(&self) -> Result<bool> {
        self.attribute_bool(Attr::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
    }

    /// Sets [`reuse_allow_internal_dependencies`](Self::reuse_allow_internal_dependencies).
    pub fn set_reuse_allow_internal_dependencies(&self, on: bool) -> Result<()> {
        self.set_attribute_bool(Attr::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, on)
    }

    /// Memory the pool keeps after a synchronisation instead of returning it to the system.
    pub fn release_threshold(&self) -> Result<u64> {
        self.attribute_u64(Attr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    }

    /// Sets [`release_threshold`](Self::release_threshold).
    pub fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        self.set_attribute_u64(Attr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, bytes)
    }

    /// Memory the pool holds from the system now.
    pub fn reserved_mem_current(&self) -> Result<u64> {
        self.attribute_u64(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    /// The most memory the pool has held since the last reset.
    pub fn reserved_mem_high(&self) -> Result<u64> {
        self.attribute_u64(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
    }

    /// Memory handed out and not yet freed.
    pub fn used_mem_current(&self) -> Result<u64> {
        self.attribute_u64(Attr::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    }

    /// The most memory handed out at once since the last reset.
    pub fn used_mem_high(&self) -> Result<u64> {
        self.attribute_u64(Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    }

    /// Resets the high-water marks to the current values.
    pub fn reset_high_water_marks(&self) -> Result<()> {
        self.set_attribute_u64(Attr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)?;
        self.set_attribute_u64(Attr::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)
    }

    /// A file descriptor another process opens this pool with (`cuda.core`'s
    /// `allocation_handle`; the pool must be made with `ipc_enabled`). Send it with
    /// [`crate::ipc::send_fd`]. Buffers of the pool can be shared once it was exported.
    pub fn export_fd(&self) -> Result<std::os::fd::OwnedFd> {
        if self.imported {
            return Err(CudaError::InvalidState(
                "Imported memory resource cannot be exported: this pool was opened from another process (from_fd); export it in the process that made it, or pass on the file descriptor it was opened with".into(),
            ));
        }
        if !self.ipc {
            return Err(CudaError::InvalidState(
                "Memory resource is not IPC-enabled (make the pool with ipc_enabled to share it)".into(),
            ));
        }
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: for POSIX file descriptors the driver writes an int through the pointer.
        unsafe {
            driver::cuMemPoolExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast(),
                self.handle,
                driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        }
        .check("cuMemPoolExportToShareableHandle")?;
        self.exported.store(true, Ordering::Release);
        // SAFETY: the driver made a new descriptor for the caller to own.
        Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    /// Records `ptr` as imported into this (imported) pool; `false` when it already is (and not
    /// yet freed).
    pub(crate) fn note_import(&self, ptr: driver::CUdeviceptr) -> bool {
        self.imports.lock().unwrap_or_else(|p| p.into_inner()).insert(ptr)
    }

    /// Forgets an import that did not become a buffer, or was freed.
    pub(crate) fn forget_import(&self, ptr: driver::CUdeviceptr) {
        self.imports.lock().unwrap_or_else(|p| p.into_inner()).remove(&ptr);
    }

    /// The access of `device` to the pool's memory.
    fn access(&self, device: &Device) -> Result<driver::CUmemAccess_flags> {
        let mut flags = driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
        let mut loc = super::device_location(device);
        // SAFETY: out-pointer to a local; the location is passed by pointer for the call.
        unsafe { driver::cuMemPoolGetAccess(&mut flags, self.handle, &mut loc) }.check("cuMemPoolGetAccess")?;
        Ok(flags)
    }

    /// Sets the access of several devices in one driver call.
    fn set_access(&self, descs: &[driver::CUmemAccessDesc]) -> Result<()> {
        if descs.is_empty() {
            return Ok(());
        }
        // SAFETY: the descriptors live for the call; their count is that of the slice (a few
        // devices, far below usize::MAX).
        unsafe { driver::cuMemPoolSetAccess(self.handle, descs.as_ptr(), descs.len()) }.check("cuMemPoolSetAccess")
    }

    /// Revokes every other device's access (of a new pool, which may have inherited some).
    fn revoke_peers(&self) -> Result<()> {
        let descs: Vec<_> = Device::all()?
            .iter()
            .filter(|d| Some(**d) != self.device)
            .map(|d| driver::CUmemAccessDesc {
                location: super::device_location(d),
                flags: driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE,
            })
            .collect();
        self.set_access(&descs)
    }
}

/// Where a pool's resource dereferences to its pool.
macro_rules! deref_to_pool {
    ($ty:ty) => {
        impl std::ops::Deref for $ty {
            type Target = $crate::memory::MemoryPool;
            fn deref(&self) -> &$crate::memory::MemoryPool {
                &self.pool
            }
        }
    };
}
pub(crate) use deref_to_pool;

/// `e`, from `cuMemAllocFromPoolAsync`, with what to do when a capture was in the way.
#[cold]
fn allocation_error(e: CudaError) -> CudaError {
    if e.driver_status() == Some(driver::CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
        CudaError::InvalidState(format!(
            "{e}: a memory pool cannot allocate on a stream being captured, nor while the calling thread captures one (such a capture is now invalidated): allocate graph memory with GraphMemoryResource, other memory before the capture"
        ))
    } else {
        e
    }
}
