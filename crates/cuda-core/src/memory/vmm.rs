//! [`VirtualMemoryResource`]: memory built from the driver's virtual memory management (reserve an
//! address range, create physical chunks, map them, grant access), which can grow in place.

use super::{device_location, read_write_access, Buffer, MemoryResource};
use crate::device::Device;
use crate::error::Check;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Options of a [`VirtualMemoryResource`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VirtualMemoryResourceOptions {
    /// Round sizes to the recommended granularity (faster) instead of the minimum one.
    pub recommended_granularity: bool,
    /// Make the chunks exportable as POSIX file descriptors.
    pub exportable: bool,
    /// Other devices that get read-write access besides the owning one.
    pub peers: Vec<Device>,
}

/// One mapped chunk of physical memory.
struct Chunk {
    handle: driver::CUmemGenericAllocationHandle,
    size: usize,
}

/// What one allocation is made of: address reservations (freed one by one, as reserved) and
/// the chunks mapped one after another from the first reservation's start.
struct Allocation {
    reservations: Vec<(driver::CUdeviceptr, usize)>,
    chunks: Vec<Chunk>,
}

impl Allocation {
    fn reserved(&self) -> usize {
        self.reservations.iter().map(|(_, s)| s).sum()
    }
}

/// Device memory through virtual memory management: sizes round up to the granularity, and a
/// buffer can [`grow`](VirtualMemoryResource::grow) while keeping its contents.
pub struct VirtualMemoryResource {
    device: Device,
    options: VirtualMemoryResourceOptions,
    granularity: usize,
    allocations: Mutex<HashMap<driver::CUdeviceptr, Allocation>>,
}

impl VirtualMemoryResource {
    /// A resource on `device`.
    pub fn new(device: &Device, options: VirtualMemoryResourceOptions) -> Result<Arc<VirtualMemoryResource>> {
        let mut r = VirtualMemoryResource {
            device: *device,
            options,
            granularity: 0,
            allocations: Mutex::new(HashMap::new()),
        };
        let prop = r.prop();
        let flag = if r.options.recommended_granularity {
            driver::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
        } else {
            driver::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
        };
        let mut granularity = 0;
        // SAFETY: prop is fully initialised; out-pointer to a local.
        unsafe { driver::cuMemGetAllocationGranularity(&mut granularity, &prop, flag) }
            .check("cuMemGetAllocationGranularity")?;
        r.granularity = granularity.max(1);
        Ok(Arc::new(r))
    }

    /// The size allocations round up to.
    pub fn granularity(&self) -> usize {
        self.granularity
    }

    /// `size` bytes (rounded up to the granularity).
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }

    fn prop(&self) -> driver::CUmemAllocationProp {
        let mut prop = driver::CUmemAllocationProp {
            type_: driver::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            ..Default::default()
        };
        prop.location = device_location(&self.device);
        if self.options.exportable {
            prop.requestedHandleTypes = driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        }
        prop
    }

    /// `size` rounded up to the granularity (at least one granule); an error when that
    /// overflows.
    fn round(&self, size: usize) -> Result<usize> {
        size.max(1).checked_next_multiple_of(self.granularity).ok_or_else(|| {
            CudaError::InvalidArgument(format!(
                "{size} bytes cannot be rounded up to the granularity of {} bytes",
                self.granularity
            ))
        })
    }

    fn create_chunk(&self, size: usize) -> Result<Chunk> {
        let prop = self.prop();
        let mut handle = 0;
        // SAFETY: prop is fully initialised; size is a multiple of the granularity.
        unsafe { driver::cuMemCreate(&mut handle, size, &prop, 0) }.check("cuMemCreate")?;
        Ok(Chunk { handle, size })
    }

    /// Maps `chunks` one after another from `base` and grants access to them.
    fn map(&self, base: driver::CUdeviceptr, chunks: &[Chunk]) -> Result<()> {
        let mut offset = 0u64;
        for c in chunks {
            // SAFETY: the range [base + offset, + size) lies in a reservation of this resource.
            unsafe { driver::cuMemMap(base + offset, c.size, 0, c.handle, 0) }.check("cuMemMap")?;
            offset += c.size as u64;
        }
        let mut descs = vec![read_write_access(&self.device)];
        descs.extend(self.options.peers.iter().map(read_write_access));
        // SAFETY: the range is mapped; one descriptor per device.
        unsafe { driver::cuMemSetAccess(base, offset as usize, descs.as_ptr(), descs.len()) }.check("cuMemSetAccess")
    }

    fn reserve(&self, size: usize, hint: driver::CUdeviceptr) -> Result<driver::CUdeviceptr> {
        let mut ptr = 0;
        // SAFETY: out-pointer to a local; size is a multiple of the granularity.
        unsafe { driver::cuMemAddressReserve(&mut ptr, size, self.granularity, hint, 0) }
            .check("cuMemAddressReserve")?;
        Ok(ptr)
    }

    /// Unmaps the chunks mapped from `base` and frees the reservations (not the chunks).
    fn unmap(
        &self,
        base: driver::CUdeviceptr,
        chunks: &[Chunk],
        reservations: &[(driver::CUdeviceptr, usize)],
    ) -> Result<()> {
        let mut offset = 0u64;
        for c in chunks {
            // SAFETY: each chunk was mapped at this offset by this resource; nothing uses it now.
            unsafe { driver::cuMemUnmap(base + offset, c.size) }.check("cuMemUnmap")?;
            offset += c.size as u64;
        }
        for (ptr, size) in reservations {
            // SAFETY: reserved by this resource with exactly this size; unmapped above.
            unsafe { driver::cuMemAddressFree(*ptr, *size) }.check("cuMemAddressFree")?;
        }
        Ok(())
    }

    /// Grows `buffer` (from this resource) to at least `new_size` bytes, keeping its contents:
    /// in place when the addresses after it are free, else by mapping its memory at a new
    /// address (the buffer's address then changes). Waits for `stream` first.
    pub fn grow(&self, buffer: &mut Buffer, new_size: usize, stream: &Stream) -> Result<()> {
        if buffer.is_used_by_graph() {
            return Err(CudaError::InvalidArgument(
                "grow: a graph refers to this buffer's memory, which must not move; grow it before recording graph work on it".into(),
            ));
        }
        let new_size = self.round(new_size)?;
        let mut allocations = self.allocations.lock().unwrap_or_else(|p| p.into_inner());
        let Some(mut allocation) = allocations.remove(&buffer.handle()) else {
            return Err(CudaError::InvalidArgument(
                "grow: the buffer does not come from this resource".into(),
            ));
        };
        let grown = self.grow_allocation(&mut allocation, buffer, new_size, stream);
        // Whatever happened, the record goes back under the buffer's address (moved only when
        // the buffer was).
        allocations.insert(buffer.handle(), allocation);
        grown
    }

    /// [`grow`](Self::grow) for `allocation`, taken out of the records: on an error it is left
    /// as it was, and the buffer too.
    fn grow_allocation(
        &self,
        allocation: &mut Allocation,
        buffer: &mut Buffer,
        new_size: usize,
        stream: &Stream,
    ) -> Result<()> {
        let old = buffer.handle();
        let mapped: usize = allocation.chunks.iter().map(|c| c.size).sum();
        if new_size <= mapped {
            return Ok(());
        }
        // The memory may move: no stream may still have work on it (the buffer is borrowed
        // mutably, so nothing queues more meanwhile).
        stream.sync().and_then(|()| buffer.synchronize_uses())?;
        let extra = self.create_chunk(new_size - mapped)?;
        let release_extra = |c: &Chunk| {
            // SAFETY: made above, mapped nowhere (any mapping of it was undone), released once.
            let _ = unsafe { driver::cuMemRelease(c.handle) };
        };
        // In place: reserve the addresses right after the current range.
        let end = old.checked_add(allocation.reserved() as u64);
        let tail = end.and_then(|end| Some((end, self.reserve(new_size - mapped, end).ok()?)));
        if let Some((end, t)) = tail {
            if t == end && allocation.reserved() == mapped {
                if let Err(e) = self.map(t, std::slice::from_ref(&extra)) {
                    // SAFETY: the tail was reserved and (partly) mapped here, and nothing uses it.
                    unsafe { discard_range(t, new_size - mapped) };
                    release_extra(&extra);
                    return Err(e);
                }
                allocation.reservations.push((t, new_size - mapped));
                allocation.chunks.push(extra);
                buffer.rebase(old, new_size);
                return Ok(());
            }
            // SAFETY: reserved just above and unused.
            let _ = unsafe { driver::cuMemAddressFree(t, new_size - mapped) };
        }
        // Elsewhere: a new range holding the old chunks, then the new one. The buffer moves to
        // it once it is whole; the old range goes last (if that fails, only addresses leak).
        let base = match self.reserve(new_size, 0) {
            Ok(b) => b,
            Err(e) => {
                release_extra(&extra);
                return Err(e);
            }
        };
        let mut chunks = std::mem::take(&mut allocation.chunks);
        chunks.push(extra);
        if let Err(e) = self.map(base, &chunks) {
            // SAFETY: the new range was reserved and (partly) mapped here, and nothing uses it;
            // the old chunks stay mapped at the old range.
            unsafe { discard_range(base, new_size) };
            if let Some(c) = chunks.pop() {
                release_extra(&c);
            }
            allocation.chunks = chunks;
            return Err(e);
        }
        let old_reservations = std::mem::replace(&mut allocation.reservations, vec![(base, new_size)]);
        let old_chunks = chunks.len() - 1;
        allocation.chunks = chunks;
        buffer.rebase(base, new_size);
        if let Err(e) = self.unmap(old, &allocation.chunks[..old_chunks], &old_reservations) {
            // The buffer grew; only the old addresses could not all be given back.
            crate::error::record_drop_error(e);
        }
        Ok(())
    }
}

/// Undoes a failed step: unmaps and frees `size` addresses at `base` (errors ignored).
///
/// # Safety
/// The range was reserved by this resource, may be (partly) mapped, and nothing uses it.
unsafe fn discard_range(base: driver::CUdeviceptr, size: usize) {
    // SAFETY: forwarded to the caller.
    unsafe {
        let _ = driver::cuMemUnmap(base, size);
        let _ = driver::cuMemAddressFree(base, size);
    }
}

// SAFETY: `allocate` reserves, maps and grants read-write access to at least `size` bytes of
// device memory of `device` before returning; `deallocate` waits for the stream before unmapping.
// Mappings are found by address, so a pointer of another resource is refused.
unsafe impl MemoryResource for VirtualMemoryResource {
    fn allocate(&self, size: usize, _stream: &Stream) -> Result<driver::CUdeviceptr> {
        let size = self.round(size)?;
        let chunk = self.create_chunk(size)?;
        let base = match self.reserve(size, 0) {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: the chunk was just made and is not mapped.
                let _ = unsafe { driver::cuMemRelease(chunk.handle) };
                return Err(e);
            }
        };
        if let Err(e) = self.map(base, std::slice::from_ref(&chunk)) {
            // SAFETY: undoing the steps above; nothing else knows these handles.
            unsafe {
                discard_range(base, size);
                let _ = driver::cuMemRelease(chunk.handle);
            }
            return Err(e);
        }
        let mut allocations = self.allocations.lock().unwrap_or_else(|p| p.into_inner());
        allocations.insert(
            base,
            Allocation {
                reservations: vec![(base, size)],
                chunks: vec![chunk],
            },
        );
        Ok(base)
    }

    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        let allocation = self.allocations.lock().unwrap_or_else(|p| p.into_inner()).remove(&ptr);
        let Some(allocation) = allocation else {
            return Err(CudaError::InvalidArgument(
                "deallocate: not an allocation of this resource".into(),
            ));
        };
        // Unmapping is not stream-ordered: wait for the work that may still use the memory.
        stream.sync()?;
        self.unmap(ptr, &allocation.chunks, &allocation.reservations)?;
        for c in allocation.chunks {
            // SAFETY: unmapped above; released once.
            unsafe { driver::cuMemRelease(c.handle) }.check("cuMemRelease")?;
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
