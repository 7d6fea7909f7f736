//! The driver's virtual memory steps, each undone by `Drop` unless kept: a physical allocation
//! handle (released on drop: a mapping keeps the memory alive without it), an address
//! reservation and a mapping. A function that builds memory out of them declares them in order
//! and keeps them only once every step succeeded, so a failure anywhere undoes the steps
//! before it in reverse order.

use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::os::fd::{AsRawFd, BorrowedFd};

/// A reference to a physical allocation (made, imported or retained), released on drop.
///
/// The memory lives while any reference or mapping of it does (`cuMemRelease`), so releasing
/// a handle once its memory is mapped frees nothing: the mapping owns the memory from then on.
pub(super) struct Handle(driver::CUmemGenericAllocationHandle);

impl Handle {
    /// `size` bytes (a multiple of the granularity) of new physical memory.
    pub(super) fn create(size: usize, prop: &driver::CUmemAllocationProp) -> Result<Handle> {
        let mut h = 0;
        // SAFETY: prop is a fully initialised local of the caller; out-pointer to a local.
        unsafe { driver::cuMemCreate(&mut h, size, prop, 0) }.check("cuMemCreate")?;
        Ok(Handle(h))
    }

    /// The allocation another process exported as `fd`.
    pub(super) fn import(fd: BorrowedFd<'_>) -> Result<Handle> {
        let mut h = 0;
        // SAFETY: for POSIX descriptors the driver takes the descriptor's number in place of the
        // pointer and only reads it (it neither closes nor keeps it); the descriptor is open for
        // the call (borrowed). A descriptor that is not a CUDA allocation is refused by the driver.
        unsafe {
            driver::cuMemImportFromShareableHandle(
                &mut h,
                fd.as_raw_fd() as usize as *mut std::ffi::c_void,
                driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        }
        .check("cuMemImportFromShareableHandle")?;
        Ok(Handle(h))
    }

    /// A new reference to the allocation mapped at `addr`.
    pub(super) fn retain(addr: driver::CUdeviceptr) -> Result<Handle> {
        let mut h = 0;
        // SAFETY: the driver only looks the address up (it fails for an unmapped one); out-pointer
        // to a local.
        unsafe { driver::cuMemRetainAllocationHandle(&mut h, addr as usize as *mut std::ffi::c_void) }
            .check("cuMemRetainAllocationHandle")?;
        Ok(Handle(h))
    }

    pub(super) fn raw(&self) -> driver::CUmemGenericAllocationHandle {
        self.0
    }

    /// The properties the allocation was made with.
    pub(super) fn properties(&self) -> Result<driver::CUmemAllocationProp> {
        let mut prop = driver::CUmemAllocationProp::default();
        // SAFETY: the handle is a live reference (owned by self); out-pointer to a local.
        unsafe { driver::cuMemGetAllocationPropertiesFromHandle(&mut prop, self.0) }
            .check("cuMemGetAllocationPropertiesFromHandle")?;
        Ok(prop)
    }

    /// A new POSIX file descriptor for the allocation (close-on-exec), which keeps the memory
    /// alive until it is closed.
    pub(super) fn export_fd(&self) -> Result<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        let mut fd: libc::c_int = -1;
        // SAFETY: for POSIX descriptors the driver writes one int through the pointer, a local;
        // the handle is a live reference.
        unsafe {
            driver::cuMemExportToShareableHandle(
                (&mut fd as *mut libc::c_int).cast(),
                self.0,
                driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        }
        .check("cuMemExportToShareableHandle")?;
        if fd < 0 {
            return Err(CudaError::InvalidArgument(format!(
                "cuMemExportToShareableHandle returned the invalid descriptor {fd}"
            )));
        }
        // SAFETY: the driver made a new descriptor for this process, which nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: fcntl on an open descriptor; failing to set the flag only leaks it to children.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        Ok(fd)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: this value owns one reference to the allocation and gives it back once; a
        // mapping of the memory keeps it alive on its own.
        let _ = unsafe { driver::cuMemRelease(self.0) };
    }
}

/// The granularity of allocations with `prop`.
pub(super) fn granularity(
    prop: &driver::CUmemAllocationProp,
    flag: driver::CUmemAllocationGranularity_flags,
) -> Result<usize> {
    let mut g = 0;
    // SAFETY: prop is fully initialised; out-pointer to a local.
    unsafe { driver::cuMemGetAllocationGranularity(&mut g, prop, flag) }.check("cuMemGetAllocationGranularity")?;
    if g == 0 {
        return Err(CudaError::InvalidArgument(
            "cuMemGetAllocationGranularity reported a granularity of 0".into(),
        ));
    }
    Ok(g)
}

/// An address range reservation, freed on drop unless kept.
pub(super) struct Reservation {
    pub(super) ptr: driver::CUdeviceptr,
    pub(super) size: usize,
    keep: bool,
}

impl Reservation {
    /// `size` addresses aligned to `align` (0: the driver's default), at `hint` if the driver can.
    pub(super) fn new(size: usize, align: usize, hint: driver::CUdeviceptr) -> Result<Reservation> {
        let mut ptr = 0;
        // SAFETY: out-pointer to a local; the driver checks sizes, alignment and hint.
        unsafe { driver::cuMemAddressReserve(&mut ptr, size, align, hint, 0) }.check("cuMemAddressReserve")?;
        Ok(Reservation { ptr, size, keep: false })
    }

    /// From now on the caller frees it (through the allocation's records).
    pub(super) fn keep(mut self) -> (driver::CUdeviceptr, usize) {
        self.keep = true;
        (self.ptr, self.size)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.keep {
            // SAFETY: reserved by `new` with this size and not kept; whatever was mapped in it
            // was unmapped first (mappings are declared after their reservation, so they drop
            // first).
            let _ = unsafe { driver::cuMemAddressFree(self.ptr, self.size) };
        }
    }
}

/// A mapping of physical memory, unmapped on drop unless kept.
pub(super) struct Mapping {
    ptr: driver::CUdeviceptr,
    size: usize,
    keep: bool,
}

impl Mapping {
    /// Maps the first `size` bytes of `handle`'s memory at `ptr`.
    ///
    /// # Safety
    /// `[ptr, ptr + size)` lies in a reservation of the caller's that nothing else maps, and
    /// outlives the mapping (or the mapping is kept and unmapped by the caller).
    pub(super) unsafe fn new(ptr: driver::CUdeviceptr, size: usize, handle: &Handle) -> Result<Mapping> {
        // SAFETY: the range is the caller's (above); the driver refuses a size larger than the
        // allocation, or not a multiple of its granularity.
        unsafe { driver::cuMemMap(ptr, size, 0, handle.raw(), 0) }.check("cuMemMap")?;
        Ok(Mapping { ptr, size, keep: false })
    }

    pub(super) fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if !self.keep {
            // SAFETY: mapped by `new` and not kept: nothing was handed this memory.
            let _ = unsafe { driver::cuMemUnmap(self.ptr, self.size) };
        }
    }
}

/// Grants `descs` on the mapped range `[ptr, ptr + size)` (nothing when there are none).
pub(super) fn set_access(ptr: driver::CUdeviceptr, size: usize, descs: &[driver::CUmemAccessDesc]) -> Result<()> {
    if descs.is_empty() {
        return Ok(());
    }
    // SAFETY: the range is mapped by the caller; descs is a live slice of `len` descriptors.
    unsafe { driver::cuMemSetAccess(ptr, size, descs.as_ptr(), descs.len()) }.check("cuMemSetAccess")
}
