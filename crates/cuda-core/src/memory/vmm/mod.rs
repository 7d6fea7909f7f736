//! [`VirtualMemoryResource`]: memory built from the driver's virtual memory management (reserve
//! an address range, create physical chunks, map them, grant access), which can grow, lie on the
//! device or in host memory, and be shared with other processes chunk by chunk.
//!
//! - `options`: [`VirtualMemoryResourceOptions`] and its enums;
//! - `raw`: the driver steps, each undone on drop unless kept;
//! - `grow`: [`VirtualMemoryResource::modify_allocation`] and [`VirtualMemoryResource::grow`];
//! - `ipc`: [`VirtualMemoryIpcDescriptor`], export and import between processes.
//!
//! **Who keeps the memory alive.** A buffer of this resource holds the resource (an `Arc`); the
//! memory is mapped before `allocate` returns, so it is usable at once by work on any stream.
//! Each chunk's own handle is released as soon as it is mapped: from then on its mappings keep
//! it alive, and nothing else can release it. Unmapping is not stream-ordered: the free
//! ([`MemoryResource::deallocate`], called by the buffer on its deallocation stream after
//! ordering every other stream that used it before that one) synchronises that stream, then
//! unmaps the chunks and frees the address reservations. A growth that must move the memory
//! waits for every stream the buffer knows before unmapping the old range (see
//! [`VirtualMemoryResource::modify_allocation`]). Exported file descriptors hold their own
//! reference to the physical memory until they are closed.
//!
//! **Read-only and inaccessible memory.** `self_access` other than read-write (or host memory
//! without read-write peers, for the device) makes the resource report its memory as not
//! device- (or host-) accessible, since the crate's promise is read *and* write. Fills, copies
//! and graph memory nodes are run by the device, so they refuse to write memory the device may
//! not write (read-only memory, and host memory only the host may reach), and copies refuse to
//! read memory the driver grants the copying device no access to (`cuMemGetAccess`), before the
//! driver sees them: the device's access would fault the context (see `memory/copy/reach.rs`).
//! Read-only memory is read as usual. A growth's own options must grant the owner at least what
//! the resource reports, so the answers stay true for every chunk.

mod grow;
mod ipc;
mod options;
mod raw;

pub use ipc::VirtualMemoryIpcDescriptor;
pub use options::{
    VirtualMemoryAccessType, VirtualMemoryAllocationType, VirtualMemoryGranularityType, VirtualMemoryHandleType,
    VirtualMemoryLocationType, VirtualMemoryResourceOptions,
};

use super::{Buffer, MemoryResource};
use crate::device::Device;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use options::invalid;
use raw::{Handle, Mapping, Reservation};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// One mapped piece of physical memory.
#[derive(Clone)]
struct Chunk {
    size: usize,
    /// The access granted on it (granted again when it is mapped elsewhere).
    access: Vec<driver::CUmemAccessDesc>,
    /// Whether it can be exported as a POSIX file descriptor.
    posix_fd: bool,
    /// Opened from another process's export (the driver refuses to export it again).
    imported: bool,
}

/// What one buffer's memory is made of: address reservations (freed one by one, as reserved)
/// and the chunks mapped one after another from the first reservation's start, which the
/// reservations cover exactly.
struct Allocation {
    reservations: Vec<(driver::CUdeviceptr, usize)>,
    chunks: Vec<Chunk>,
}

impl Allocation {
    fn mapped(&self) -> usize {
        self.chunks.iter().fold(0usize, |n, c| n.saturating_add(c.size))
    }

    fn reserved(&self) -> usize {
        self.reservations.iter().fold(0usize, |n, r| n.saturating_add(r.1))
    }
}

type Records = Arc<Mutex<HashMap<driver::CUdeviceptr, Allocation>>>;

/// Memory through the driver's virtual memory management (`cuda.core`'s
/// `VirtualMemoryResource`): sizes round up to the granularity, a buffer can
/// [`grow`](Self::grow) keeping its contents, the memory may lie on the device or in host memory,
/// and buffers of a resource with a POSIX handle type can be shared with other processes
/// ([`ipc_descriptor`](Self::ipc_descriptor), [`from_ipc_descriptor`](Self::from_ipc_descriptor)).
///
/// Mapping and unmapping are synchronous: allocating returns memory usable at once, and freeing
/// waits for the buffer's deallocation stream (which the buffer orders after every other stream
/// that used it) before unmapping. A buffer is freed on a stream that is not being captured (a
/// free during a capture waits for it to end). See the module documentation for read-only memory.
pub struct VirtualMemoryResource {
    /// The device the resource was made for: the memory's owner for the device location, the
    /// device whose attributes were checked for host locations.
    device: Device,
    options: VirtualMemoryResourceOptions,
    granularity: usize,
    /// The reservations' alignment (`addr_align`, or the granularity).
    alignment: usize,
    /// Every live buffer's memory, by address (shared with the import face).
    records: Records,
    /// This value is the face imported buffers name as their resource (`is_mapped`).
    imported: bool,
    import_face: OnceLock<Arc<VirtualMemoryResource>>,
}

/// `Ok(v)` with `v != 0`; an attribute this driver does not know counts as not supported.
fn supported(v: Result<i32>) -> bool {
    matches!(v, Ok(v) if v != 0)
}

/// What the device cannot do: a runtime error, as cuda.core raises it ("requires CUDA VMM API
/// support", "GPU Direct RDMA is not supported on this device").
fn unsupported(message: impl Into<String>) -> CudaError {
    CudaError::InvalidState(message.into())
}

/// The checks of `options` that need `device`, before any allocation.
fn check_device(device: &Device, options: &VirtualMemoryResourceOptions) -> Result<()> {
    let p = device.properties();
    let n = device.device_id();
    match options.location_type {
        VirtualMemoryLocationType::Device => {
            if !supported(p.virtual_memory_management_supported()) {
                return Err(unsupported("VirtualMemoryResource requires CUDA VMM API support"));
            }
            if options.peers.contains(device) {
                return Err(invalid(format!(
                    "peers lists the resource's own device {n}: its access is self_access"
                )));
            }
        }
        VirtualMemoryLocationType::Host => {
            if !supported(p.host_virtual_memory_management_supported()) {
                return Err(unsupported(format!(
                    "VirtualMemoryResource requires CUDA VMM API support for host memory: device {n} does not report host_virtual_memory_management_supported"
                )));
            }
        }
        VirtualMemoryLocationType::HostNuma(_) | VirtualMemoryLocationType::HostNumaCurrent => {
            if !supported(p.host_numa_virtual_memory_management_supported()) {
                return Err(unsupported(format!(
                    "VirtualMemoryResource requires CUDA VMM API support for host NUMA memory: device {n} does not report host_numa_virtual_memory_management_supported (host_numa_id is {})",
                    p.host_numa_id().unwrap_or(-1)
                )));
            }
        }
    }
    match options.handle_type {
        Some(VirtualMemoryHandleType::PosixFd) if !supported(p.handle_type_posix_file_descriptor_supported()) => {
            return Err(invalid(format!(
                "handle_type PosixFd is not supported on device {n} (handle_type_posix_file_descriptor_supported is not set): use handle_type None"
            )));
        }
        Some(VirtualMemoryHandleType::Fabric) if !supported(p.handle_type_fabric_supported()) => {
            return Err(invalid(format!(
                "handle_type Fabric is not supported on device {n} (handle_type_fabric_supported is not set): use PosixFd or None"
            )));
        }
        Some(VirtualMemoryHandleType::Fabric) if !imex_channel_available() => {
            return Err(invalid(format!(
                "handle_type Fabric is not supported here: fabric handles need an IMEX channel this process can open ({IMEX_CHANNELS}/channel*, see cuMemCreate), and there is none: use PosixFd or None"
            )));
        }
        _ => {}
    }
    if options.gpu_direct_rdma && options.location_type == VirtualMemoryLocationType::Device {
        if !supported(p.gpu_direct_rdma_supported()) {
            return Err(unsupported("GPU Direct RDMA is not supported on this device"));
        }
        if !supported(p.gpu_direct_rdma_with_cuda_vmm_supported()) {
            return Err(unsupported(
                "GPU Direct RDMA is not supported on this device for virtual memory (gpu_direct_rdma_with_cuda_vmm_supported is not set)",
            ));
        }
    }
    Ok(())
}

/// Where the driver makes the IMEX channels fabric handles need.
const IMEX_CHANNELS: &str = "/dev/nvidia-caps-imex-channels";

/// Whether this process can open an IMEX channel (what `cuMemCreate` needs for fabric handles).
fn imex_channel_available() -> bool {
    let Ok(entries) = std::fs::read_dir(IMEX_CHANNELS) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let Some(name) = name.to_str().filter(|n| n.starts_with("channel")) else {
            return false;
        };
        let Ok(path) = std::ffi::CString::new(format!("{IMEX_CHANNELS}/{name}")) else {
            return false;
        };
        // SAFETY: access reads the NUL-terminated path, which lives for the call.
        unsafe { libc::access(path.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
    })
}

/// `size` rounded up to a multiple of `granularity`; an error when that overflows.
fn round(size: usize, granularity: usize) -> Result<usize> {
    size.checked_next_multiple_of(granularity).ok_or_else(|| {
        invalid(format!(
            "{size} bytes cannot be rounded up to the granularity of {granularity} bytes"
        ))
    })
}

/// `base + offset`, checked.
fn at(base: driver::CUdeviceptr, offset: usize) -> Result<driver::CUdeviceptr> {
    crate::memory::address(base, offset, "VirtualMemoryResource")
}

/// Unmaps `chunks` (mapped one after another from `base`) and frees `reservations`; every step
/// is tried, and the first error is returned.
///
/// # Safety
/// The chunks are mapped there by this resource and nothing uses them any more.
unsafe fn unmap(
    base: driver::CUdeviceptr,
    chunks: &[Chunk],
    reservations: &[(driver::CUdeviceptr, usize)],
) -> Result<()> {
    use crate::error::Check;
    let mut first = Ok(());
    let mut offset = 0usize;
    for c in chunks {
        let done = at(base, offset).and_then(|p| {
            // SAFETY: forwarded to the caller.
            unsafe { driver::cuMemUnmap(p, c.size) }.check("cuMemUnmap")
        });
        first = first.and(done);
        offset = offset.saturating_add(c.size);
    }
    for (ptr, size) in reservations {
        // SAFETY: reserved by this resource with exactly this size; its mappings are gone.
        let done = unsafe { driver::cuMemAddressFree(*ptr, *size) }.check("cuMemAddressFree");
        first = first.and(done);
    }
    first
}

impl VirtualMemoryResource {
    /// A resource for `device` (for host locations, the device whose support is checked; the
    /// memory then belongs to no device). Refused before any allocation: options
    /// `cuda.core` refuses (with its messages), a device without virtual memory management
    /// ("VirtualMemoryResource requires CUDA VMM API support"; for host locations, without host
    /// or host NUMA support), a handle type the device cannot export, GPUDirect RDMA where the
    /// device has none ("GPU Direct RDMA is not supported on this device"), and alignments or
    /// hints that do not fit the granularity.
    pub fn new(device: &Device, options: VirtualMemoryResourceOptions) -> Result<Arc<VirtualMemoryResource>> {
        options.validate()?;
        check_device(device, &options)?;
        let prop = options.prop(options.location(device)?);
        let granularity = raw::granularity(&prop, options.granularity.driver())?;
        let alignment = options.alignment(granularity)?;
        Ok(Arc::new(VirtualMemoryResource {
            device: *device,
            options,
            granularity,
            alignment,
            records: Arc::new(Mutex::new(HashMap::new())),
            imported: false,
            import_face: OnceLock::new(),
        }))
    }

    /// The options it was made with (`cuda.core`'s `config`).
    pub fn options(&self) -> &VirtualMemoryResourceOptions {
        &self.options
    }

    /// The size allocations round up to.
    pub fn granularity(&self) -> usize {
        self.granularity
    }

    /// Whether its buffers can be shared with other processes (a POSIX handle type).
    pub fn is_ipc_enabled(&self) -> bool {
        self.options.handle_type == Some(VirtualMemoryHandleType::PosixFd)
    }

    /// `size` bytes rounded up to the granularity: the buffer reports the rounded size, as in
    /// `cuda.core` (0 stays 0, with one granule behind it). `stream` becomes the deallocation
    /// stream; the memory is usable at once.
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        let size = if size == 0 { 0 } else { round(size, self.granularity)? };
        Buffer::allocate(self.clone(), size, stream)
    }

    fn records(&self) -> MutexGuard<'_, HashMap<driver::CUdeviceptr, Allocation>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `buffer`'s resource is this one (or the face its imports name).
    fn owns(&self, buffer: &Buffer) -> bool {
        let Some(r) = buffer.memory_resource() else {
            return false;
        };
        let r = Arc::as_ptr(r) as *const u8;
        std::ptr::eq(r, (self as *const Self).cast())
            || self
                .import_face
                .get()
                .is_some_and(|f| std::ptr::eq(r, Arc::as_ptr(f).cast()))
    }

    /// The resource imported buffers name: the same options and records, but `is_mapped`.
    fn import_face(&self) -> Arc<VirtualMemoryResource> {
        self.import_face
            .get_or_init(|| {
                Arc::new(VirtualMemoryResource {
                    device: self.device,
                    options: self.options.clone(),
                    granularity: self.granularity,
                    alignment: self.alignment,
                    records: self.records.clone(),
                    imported: true,
                    import_face: OnceLock::new(),
                })
            })
            .clone()
    }

    /// The location of memory mapped with `options`, as the owner's access names it.
    fn owner_location(&self, options: &VirtualMemoryResourceOptions) -> Result<driver::CUmemLocation> {
        options.location(&self.device)
    }
}

// SAFETY: `allocate` reserves, maps and grants the configured access to at least `size` bytes
// (rounded up, one granule for 0) before returning, and the reservation belongs to no other
// allocation; read-write device access is reported only when the owner (the device) has it, host
// access only for host memory whose owner (the host) has it (module documentation). `deallocate`
// synchronises its stream before unmapping, and finds mappings by address among this resource's
// records, so a pointer it does not know is refused and a pointer is unmapped once (its record
// is removed first). Neither queues work on a stream nor begins or ends a capture.
unsafe impl MemoryResource for VirtualMemoryResource {
    fn allocate(&self, size: usize, _stream: &Stream) -> Result<driver::CUdeviceptr> {
        if self.imported {
            return Err(invalid(
                "this resource names memory imported from another process: allocate from the VirtualMemoryResource that imported it",
            ));
        }
        let size = round(size.max(1), self.granularity)?;
        let owner = self.owner_location(&self.options)?;
        let prop = self.options.prop(owner);
        let access = self.options.access(owner);
        let reservation = Reservation::new(size, self.alignment, self.options.addr_hint.unwrap_or(0))?;
        let handle = Handle::create(size, &prop)?;
        // SAFETY: the reservation was just made, nothing maps it, and it is declared before the
        // mapping (so dropped after it), or kept with it.
        let mapping = unsafe { Mapping::new(reservation.ptr, size, &handle) }?;
        raw::set_access(reservation.ptr, size, &access)?;
        // Every step succeeded: the mapping now owns the memory (the handle is released on
        // return) and the records own the mapping and the reservation.
        mapping.keep();
        let (base, size) = reservation.keep();
        let chunk = Chunk {
            size,
            access,
            posix_fd: self.is_ipc_enabled(),
            imported: false,
        };
        self.records().insert(
            base,
            Allocation {
                reservations: vec![(base, size)],
                chunks: vec![chunk],
            },
        );
        Ok(base)
    }

    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        let Some(allocation) = self.records().remove(&ptr) else {
            return Err(CudaError::InvalidArgument(
                "deallocate: not an allocation of this VirtualMemoryResource".into(),
            ));
        };
        // Unmapping is not stream-ordered: wait for the work that may still use the memory (the
        // buffer ordered every other stream that used it before this one). If the wait fails the
        // memory may still be in use: it stays mapped, and recorded.
        if let Err(e) = crate::memory::wait_before_free(stream) {
            self.records().insert(ptr, allocation);
            return Err(e);
        }
        // SAFETY: mapped by this resource from ptr; the wait above covers every use (the caller
        // promises nothing uses it after the work queued on `stream`).
        // (In relaxed capture mode: a capture on another thread neither refuses the unmapping
        // nor is invalidated by it.)
        crate::stream::relaxed_capture_mode(|| unsafe { unmap(ptr, &allocation.chunks, &allocation.reservations) })
    }

    fn is_device_accessible(&self) -> bool {
        match self.options.location_type {
            VirtualMemoryLocationType::Device => self.options.owner_writes(),
            _ => self.options.peers_write(),
        }
    }

    fn is_host_accessible(&self) -> bool {
        self.options.location_type.is_host() && self.options.owner_writes()
    }

    fn device(&self) -> Option<Device> {
        match self.options.location_type {
            VirtualMemoryLocationType::Device => Some(self.device),
            _ => None,
        }
    }

    fn is_mapped(&self) -> bool {
        self.imported
    }
}

impl std::fmt::Debug for VirtualMemoryResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtualMemoryResource")
            .field("device", &self.device)
            .field("options", &self.options)
            .field("granularity", &self.granularity)
            .field("imported", &self.imported)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::round;

    #[test]
    fn rounding_is_checked() {
        assert_eq!(round(1, 4096).unwrap(), 4096);
        assert_eq!(round(4096, 4096).unwrap(), 4096);
        assert_eq!(round(0, 4096).unwrap(), 0);
        assert!(round(usize::MAX, 2 << 20)
            .unwrap_err()
            .to_string()
            .contains("granularity"));
        assert_eq!(round(7, 3).unwrap(), 9, "a granularity that is not a power of two");
    }
}
