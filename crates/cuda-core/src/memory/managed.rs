//! [`ManagedMemoryResource`] and the operations on managed memory (advice, prefetch, discard,
//! host slices).

use super::{enqueue_using, location, Buffer, MemoryResource, Pod};
use crate::device::Device;
use crate::error::Check;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::Arc;

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

impl ManagedMemoryResource {
    /// The allocation itself, in the current context.
    fn allocate_here(&self, size: usize) -> Result<driver::CUdeviceptr> {
        let mut ptr = 0;
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuMemAllocManaged(&mut ptr, size.max(1), driver::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL.0) }
            .check("cuMemAllocManaged")?;
        if let Some(d) = self.preferred_location {
            // SAFETY: ptr is a live managed allocation of at least size bytes.
            let advised = unsafe {
                driver::cuMemAdvise(
                    ptr,
                    size.max(1),
                    driver::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                    super::device_location(&d),
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

// SAFETY: cuMemAllocManaged returns at least `size` (at least one) bytes of managed memory, which
// the host and every device may use; it is freed only after the stream's work is done.
unsafe impl MemoryResource for ManagedMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        // Made in the stream's context, which the buffer holds (through its stream) for as
        // long as the memory lives: destroying a context frees what was allocated in it.
        stream.context_or_current()?.with_current(|| self.allocate_here(size))
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // cuMemFree needs a current context: the stream's.
        stream.context_or_current()?.with_current(|| {
            stream.sync()?;
            // SAFETY: forwarded to the caller; the stream's work is done.
            unsafe { driver::cuMemFree(ptr) }.check("cuMemFree")
        })
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
            MemoryLocation::Device(d) => super::device_location(&d),
        }
    }
}

/// Operations on managed memory (from a [`ManagedMemoryResource`]).
impl Buffer {
    fn managed(&self, what: &str) -> Result<()> {
        let managed = self
            .memory_resource()
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
        // SAFETY: the buffer is a live allocation of size bytes; advice changes no contents.
        unsafe { driver::cuMemAdvise(self.handle(), self.size(), advice, location.to_driver()) }.check("cuMemAdvise")
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
        enqueue_using(stream, &[self], |_| {
            // SAFETY: the buffer is a live allocation of size bytes, held until the prefetch is
            // done (`enqueue_using`); the stream is live.
            unsafe { driver::cuMemPrefetchAsync(self.handle(), self.size(), location.to_driver(), 0, stream.handle()) }
                .check("cuMemPrefetchAsync")
        })
    }

    /// Tells the driver the contents are no longer needed (it may drop them instead of migrating
    /// them), ordered on `stream`; the next reads see unspecified values (CUDA 13 drivers).
    pub fn discard(&self, stream: &Stream) -> Result<()> {
        self.managed("discard")?;
        enqueue_using(stream, &[self], |_| {
            let (mut ptr, mut size) = (self.handle(), self.size());
            // SAFETY: one range, passed by pointer for the call; the buffer is held until the
            // discard is done (`enqueue_using`).
            unsafe { driver::cuMemDiscardBatchAsync(&mut ptr, &mut size, 1, 0, stream.handle()) }
                .check("cuMemDiscardBatchAsync")
        })
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
        if !(self.handle() as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(CudaError::InvalidArgument(
                "as_host_slice: the buffer is not aligned for T".into(),
            ));
        }
        // SAFETY: host-accessible memory of size bytes, aligned for T, not written meanwhile (the
        // caller's promise).
        Ok(unsafe {
            std::slice::from_raw_parts(self.handle() as *const T, self.size() / std::mem::size_of::<T>().max(1))
        })
    }
}
