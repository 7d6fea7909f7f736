//! What the device may do with a buffer's memory, checked before the driver is asked to fill it
//! or to copy into or out of it.
//!
//! Fills (`cuMemsetD*Async`), copies between buffers or with host slices (`cuMemcpy*Async`,
//! batches, 2D and 3D copies), graph memset and memcpy nodes, array copies and copies between
//! strided views (the strided copy kernel's included) are run by the device: its engines (or its
//! threads) read and write the memory through the device's own mapping of it. Memory the device
//! has no mapping of faults the GPU, and the fault loses the context (every later call of the
//! process on it fails): host-location virtual memory granted to the host alone, or virtual
//! memory whose `self_access` is `None`. These checks refuse such work before the driver
//! sees it, on what the buffer knows:
//!
//! - a write needs memory kernels may read and write ([`Buffer::is_device_accessible`], what its
//!   resource, or for foreign memory the driver, says); memory only the host may write is refused
//!   as memory nobody may write is;
//! - a read needs memory the device may at least read: device-accessible memory, or memory the
//!   driver says the executing device (the stream's) may read (`cuMemGetAccess`: read-only virtual
//!   memory). Host memory whose resource says kernels may not use it, and whose mapping the driver
//!   cannot describe, is refused too; other memory the driver cannot describe (a read-only
//!   graphics mapping, which the device reads) is read;
//! - both accept foreign host memory the driver does not know (pageable memory under
//!   `Buffer::from_handle`): the device never maps it, the driver copies it through staging
//!   memory of its own or answers with an error.
//!
//! Memory that is no buffer's (a host slice, or a strided view of host or raw memory not said
//! to be device-accessible) is checked on what the driver alone says
//! (`Stream::check_device_reads_memory`, `Stream::check_device_writes_memory`): refused where it
//! grants the executing device no access (for a read), or no read-write access (for a write), to
//! virtual memory mapped there; left to the driver where it does not describe the memory
//! (pageable memory it stages, pinned, managed or ordinary device memory).

use super::super::buffer::Buffer;
use crate::device::Device;
use crate::stream::{relaxed_capture_mode, Stream};
use crate::{CudaError, Result};
use cuda_sys::driver;

/// Who may reach a buffer's memory, as far as the checks need to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reach {
    /// Kernels may read and write it.
    device: bool,
    /// The host may read and write it.
    host: bool,
    /// Host memory the driver does not know: a foreign buffer over pageable memory (foreign
    /// memory the driver knows, device, pinned or managed, is device-accessible).
    unknown_to_driver: bool,
}

impl Reach {
    fn of(buffer: &Buffer) -> Reach {
        let device = buffer.is_device_accessible();
        Reach {
            device,
            host: buffer.is_host_accessible(),
            unknown_to_driver: !device && buffer.memory_resource().is_none(),
        }
    }
}

/// Why a write by the device into memory reached as `reach` is refused (`None`: it is not).
fn write_refusal(reach: Reach, what: &str) -> Option<String> {
    if reach.device || reach.unknown_to_driver {
        return None;
    }
    Some(if reach.host {
        format!(
            "{what}: the device may not write this buffer's memory, which only the host may reach (host-location virtual memory without read-write device peers, for one), and fills and copies are run by the device, whose write would fault the context: grant the device read-write access (peers), or write the memory on the host"
        )
    } else {
        format!(
            "{what}: neither kernels nor the host may write this buffer's memory (its resource says so: read-only virtual memory, for one); write into a buffer with read-write access"
        )
    })
}

/// What the driver grants a device on memory mapped through virtual memory management
/// (`cuMemGetAccess`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Granted {
    Nothing,
    Read,
    ReadWrite,
}

/// Why a read (or, with `write`, a write) by device `device` of memory on which the driver
/// grants it `granted` is refused (`None`: it is not); `granted` is `None` when the driver does
/// not describe the memory (not mapped through virtual memory management), which is left to the
/// driver.
fn granted_refusal(granted: Option<Granted>, write: bool, device: usize, what: &str) -> Option<String> {
    match (granted?, write) {
        (Granted::ReadWrite, _) | (Granted::Read, false) => None,
        (Granted::Nothing, false) => Some(format!(
            "{what}: device {device} may not read this memory (the driver grants it no access: host-location virtual memory without device peers, or virtual memory whose self_access is None, for two), and copies are run by the device, whose read would fault the context: grant the device access, or read the memory on the host"
        )),
        (granted, true) => Some(format!(
            "{what}: device {device} may not write this memory (the driver grants it {}: host-location virtual memory without read-write device peers, or read-only virtual memory, for two), and copies are run by the device, whose write would fault the context: grant the device read-write access, or write the memory on the host",
            if granted == Granted::Read { "read access only" } else { "no access" }
        )),
    }
}

/// Why a read by device `device` of memory reached as `reach` is refused (`None`: it is not);
/// `granted` is what the driver says that device may do with it (`None` when the driver cannot
/// say: memory not mapped through virtual memory management).
fn read_refusal(reach: Reach, granted: Option<Granted>, device: usize, what: &str) -> Option<String> {
    if reach.device || reach.unknown_to_driver {
        return None;
    }
    match granted {
        Some(_) => granted_refusal(granted, false, device, what),
        None if reach.host => Some(format!(
            "{what}: device {device} may not be able to read this buffer's memory (host memory its resource says kernels may not use, whose access the driver does not describe), and copies are run by the device, whose read would fault the context: read the memory on the host"
        )),
        None => None,
    }
}

/// What the driver says `device` may do with the memory at `ptr`: for memory of a memory pool,
/// what the pool grants it (`cuMemPoolGetAccess`); for other memory mapped through virtual
/// memory management, what the mapping grants (`cuMemGetAccess`); `None` when the driver does
/// not say (memory of neither kind).
///
/// Pool memory is asked about through its pool: `cuMemGetAccess` describes its mapping too, but
/// reports no access for the pool's own device (which a pool always grants), so a copy from a
/// DLPack tensor of pool memory was refused on an H200 (driver 580).
fn granted(ptr: driver::CUdeviceptr, device: &Device) -> Option<Granted> {
    let mut location = crate::memory::device_location(device);
    if let Some(answer) = granted_by_pool(ptr, &mut location) {
        return answer;
    }
    let mut flags: std::ffi::c_ulonglong = 0;
    // SAFETY: out-pointer to a local, the location a local; the driver only reads its mapping
    // records for `ptr` (an unknown address is an error). In relaxed capture mode: a global
    // capture on another thread neither refuses the query nor is invalidated by it.
    let status = relaxed_capture_mode(|| unsafe { driver::cuMemGetAccess(&mut flags, &location, ptr) });
    if status != driver::CUresult::CUDA_SUCCESS {
        return None;
    }
    Some(Granted::of(flags))
}

impl Granted {
    /// The grant that access flags (`CU_MEM_ACCESS_FLAGS_PROT_*` bits) name.
    fn of(flags: std::ffi::c_ulonglong) -> Granted {
        let bit = |f: driver::CUmemAccess_flags| f.0 as std::ffi::c_ulonglong;
        let read_write = bit(driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        let read = bit(driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ);
        if flags & read_write == read_write {
            Granted::ReadWrite
        } else if flags & read != 0 {
            Granted::Read
        } else {
            Granted::Nothing
        }
    }
}

/// For memory of a pool, the answer of [`granted`]: what the pool the memory at `ptr` came from
/// grants `location` (`cuMemPoolGetAccess`), or `Some(None)` (left to the driver) for managed
/// memory, which kernels and copies may use wherever it lives. `None` for memory of no pool, or
/// when the driver does not say (the mapping is asked then, as for other memory).
fn granted_by_pool(ptr: driver::CUdeviceptr, location: &mut driver::CUmemLocation) -> Option<Option<Granted>> {
    let mut pool: driver::CUmemoryPool = std::ptr::null_mut();
    let mut managed: std::ffi::c_uint = 0;
    // SAFETY: the out-pointers are locals of the attributes' types (a `CUmemoryPool`, an
    // unsigned int); the driver only reads its records for `ptr` (memory no pool made answers
    // null or an error). In relaxed capture mode: a global capture on another thread neither
    // refuses the queries nor is invalidated by them.
    let asked = relaxed_capture_mode(|| unsafe {
        match driver::cuPointerGetAttribute(
            (&mut pool as *mut driver::CUmemoryPool).cast(),
            driver::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            ptr,
        ) {
            driver::CUresult::CUDA_SUCCESS if !pool.is_null() => driver::cuPointerGetAttribute(
                (&mut managed as *mut std::ffi::c_uint).cast(),
                driver::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
                ptr,
            ),
            driver::CUresult::CUDA_SUCCESS => driver::CUresult::CUDA_ERROR_INVALID_VALUE,
            e => e,
        }
    });
    if asked != driver::CUresult::CUDA_SUCCESS {
        return None;
    }
    if managed != 0 {
        return Some(None);
    }
    let mut flags = driver::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
    // SAFETY: out-pointer and location are locals. The pool is the one the live memory at `ptr`
    // came from (the caller holds that memory): a pool destroyed while memory from it is still
    // allocated is released by the driver only once that memory is freed.
    let status = relaxed_capture_mode(|| unsafe { driver::cuMemPoolGetAccess(&mut flags, pool, location) });
    if status != driver::CUresult::CUDA_SUCCESS {
        return None;
    }
    Some(Some(Granted::of(flags.0 as std::ffi::c_ulonglong)))
}

impl Buffer {
    /// Refuses a write the device makes into the buffer (fills, copies, graph memset and memcpy
    /// nodes, array copies) where the device may not write its memory: memory nobody may write
    /// (read-only virtual memory) and memory only the host may reach (host-location virtual
    /// memory without read-write device peers), whose write by the device would fault the GPU
    /// and lose its context. See the `reach` module.
    pub(crate) fn check_writable(&self, what: &str) -> Result<()> {
        if self.is_device_accessible() {
            return Ok(());
        }
        match write_refusal(Reach::of(self), what) {
            Some(refusal) => Err(CudaError::InvalidArgument(refusal)),
            None => Ok(()),
        }
    }

    /// Refuses a read of the buffer by the device of `stream` (a copy from it) where that device
    /// may not read its memory, as far as the buffer and the driver know (see the `reach`
    /// module). Device-accessible memory is accepted without asking the driver.
    pub(crate) fn check_device_reads(&self, stream: &Stream, what: &str) -> Result<()> {
        self.check_read_by(|| Ok(stream.context_or_current()?.device()), what)
    }

    /// Refuses a read of the buffer by the device of the current context (a graph node's copy
    /// from it, which runs in the context the node was added in), as
    /// [`check_device_reads`](Self::check_device_reads) does for a stream's device.
    pub(crate) fn check_current_device_reads(&self, what: &str) -> Result<()> {
        self.check_read_by(Device::current, what)
    }

    /// The read check, by `device` (asked for only when the buffer is not device-accessible).
    fn check_read_by(&self, device: impl FnOnce() -> Result<Device>, what: &str) -> Result<()> {
        if self.is_device_accessible() {
            return Ok(());
        }
        let reach = Reach::of(self);
        if reach.unknown_to_driver {
            return Ok(());
        }
        let device = device()?;
        match read_refusal(reach, granted(self.handle(), &device), device.device_id(), what) {
            Some(refusal) => Err(CudaError::InvalidArgument(refusal)),
            None => Ok(()),
        }
    }
}

impl Stream {
    /// Refuses a read by this stream's device (a copy it runs) of memory at `ptr` that is no
    /// buffer's (a host slice, a strided view of host or raw memory) where the driver grants the
    /// device no access to it (virtual memory mapped there without the device as a peer); memory
    /// the driver does not describe is left to the driver (see the `reach` module). `ptr` is the
    /// memory's lowest address.
    pub(crate) fn check_device_reads_memory(&self, ptr: u64, what: &str) -> Result<()> {
        self.check_memory(ptr, false, what)
    }

    /// Refuses a write by this stream's device into memory at `ptr` that is no buffer's where
    /// the driver grants the device no read-write access to it, as
    /// [`check_device_reads_memory`](Self::check_device_reads_memory) does for reads.
    pub(crate) fn check_device_writes_memory(&self, ptr: u64, what: &str) -> Result<()> {
        self.check_memory(ptr, true, what)
    }

    fn check_memory(&self, ptr: u64, write: bool, what: &str) -> Result<()> {
        let device = self.context_or_current()?.device();
        match granted_refusal(granted(ptr, &device), write, device.device_id(), what) {
            Some(refusal) => Err(CudaError::InvalidArgument(refusal)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(device: bool, host: bool, unknown_to_driver: bool) -> Reach {
        Reach {
            device,
            host,
            unknown_to_driver,
        }
    }

    #[test]
    fn device_writes_need_memory_the_device_may_write() {
        // Device, pinned, managed memory; host memory with read-write device peers.
        assert_eq!(write_refusal(reach(true, false, false), "fill_u8"), None);
        assert_eq!(write_refusal(reach(true, true, false), "copy_to"), None);
        // Pageable memory the driver does not know: the driver stages it (or refuses).
        assert_eq!(write_refusal(reach(false, true, true), "copy_to"), None);
        // Host-location virtual memory without device peers: the host may write it, the device
        // may not (finding 3 of the third audit: this passed the old check).
        let host_only = write_refusal(reach(false, true, false), "fill_u8").unwrap();
        assert!(
            host_only.starts_with("fill_u8: the device may not write"),
            "{host_only}"
        );
        assert!(host_only.contains("host-location virtual memory"), "{host_only}");
        // Read-only virtual memory: nobody may write it.
        let nobody = write_refusal(reach(false, false, false), "copy_2d").unwrap();
        assert!(
            nobody.starts_with("copy_2d: neither kernels nor the host may write"),
            "{nobody}"
        );
    }

    #[test]
    fn device_reads_need_memory_the_device_may_read() {
        use Granted::*;
        // Device-accessible memory is read without asking the driver.
        for granted in [None, Some(Nothing), Some(Read), Some(ReadWrite)] {
            assert_eq!(read_refusal(reach(true, false, false), granted, 0, "copy_to"), None);
            assert_eq!(read_refusal(reach(false, true, true), granted, 0, "copy_to"), None);
        }
        // Read-only virtual memory: the driver grants the device reads.
        assert_eq!(read_refusal(reach(false, false, false), Some(Read), 0, "copy_to"), None);
        assert_eq!(
            read_refusal(reach(false, true, false), Some(ReadWrite), 0, "copy_to"),
            None
        );
        // Memory the driver grants the device nothing on: refused, host memory or not.
        for host in [false, true] {
            let e = read_refusal(reach(false, host, false), Some(Nothing), 3, "to_vec").unwrap();
            assert!(e.starts_with("to_vec: device 3 may not read"), "{e}");
        }
        // The driver cannot say: host memory kernels may not use is refused, the rest (a
        // read-only graphics mapping) read.
        let e = read_refusal(reach(false, true, false), None, 0, "copy_batch").unwrap();
        assert!(e.starts_with("copy_batch: device 0 may not be able to read"), "{e}");
        assert_eq!(read_refusal(reach(false, false, false), None, 0, "copy_to"), None);
    }

    #[test]
    fn memory_that_is_no_buffers_is_refused_on_what_the_driver_grants() {
        use Granted::*;
        // Reads: refused only where the driver grants the device nothing (host-location
        // virtual memory without device peers under a host slice or a strided view).
        assert_eq!(granted_refusal(Some(Read), false, 0, "copy"), None);
        assert_eq!(granted_refusal(Some(ReadWrite), false, 0, "copy"), None);
        let e = granted_refusal(Some(Nothing), false, 1, "copy between strided views").unwrap();
        assert!(
            e.starts_with("copy between strided views: device 1 may not read this memory"),
            "{e}"
        );
        // Writes: refused unless the driver grants read-write access.
        assert_eq!(granted_refusal(Some(ReadWrite), true, 0, "copy"), None);
        let e = granted_refusal(Some(Read), true, 0, "OpaqueArray::copy_to_host").unwrap();
        assert!(
            e.starts_with(
                "OpaqueArray::copy_to_host: device 0 may not write this memory (the driver grants it read access only"
            ),
            "{e}"
        );
        let e = granted_refusal(Some(Nothing), true, 2, "copy").unwrap();
        assert!(
            e.starts_with("copy: device 2 may not write this memory (the driver grants it no access"),
            "{e}"
        );
        // Memory the driver does not describe (pageable memory it stages, pinned, managed or
        // ordinary device memory): left to the driver, either way.
        assert_eq!(granted_refusal(None, false, 0, "copy"), None);
        assert_eq!(granted_refusal(None, true, 0, "copy"), None);
    }
}
