//! Operations on managed buffers: advice (set and read back), prefetch, discard, their batch
//! forms, and host slices. Each checks first that the memory is managed (a [`Buffer`] from a
//! managed resource, or foreign memory the driver calls managed), with `cuda.core`'s message.

use super::MemoryLocation;
use crate::device::Device;
use crate::error::Check;
use crate::memory::{enqueue_using, Buffer, Pod};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use driver::CUmem_advise as Advice;
use driver::CUmem_range_attribute as Range;

/// The placeholder location of advice that ignores it.
const ANYWHERE: MemoryLocation = MemoryLocation::Host;

/// Operations on managed memory (from a [`super::ManagedMemoryResource`], or foreign managed
/// memory).
impl Buffer {
    fn require_managed(&self, what: &str) -> Result<()> {
        if !self.is_managed() {
            return Err(CudaError::InvalidArgument(format!(
                "{what} requires a managed-memory allocation"
            )));
        }
        Ok(())
    }

    fn advise(&self, advice: Advice, location: MemoryLocation, what: &str) -> Result<()> {
        self.require_managed(what)?;
        // SAFETY: the buffer is a live allocation of size bytes; advice changes no contents.
        unsafe { driver::cuMemAdvise(self.handle(), self.size(), advice, location.to_driver()) }.check("cuMemAdvise")
    }

    /// One 32-bit range attribute of the whole buffer.
    fn range_attribute(&self, attribute: Range, what: &str) -> Result<i32> {
        self.require_managed(what)?;
        let mut v: i32 = 0;
        // SAFETY: a 4-byte attribute written into a 4-byte local; the range is the buffer's.
        unsafe {
            driver::cuMemRangeGetAttribute(
                (&mut v as *mut i32).cast(),
                std::mem::size_of::<i32>(),
                attribute,
                self.handle(),
                self.size(),
            )
        }
        .check("cuMemRangeGetAttribute")?;
        Ok(v)
    }

    /// A location read back as a (type, id) pair of range attributes.
    fn range_location(&self, kind: Range, id: Range, what: &str) -> Result<Option<MemoryLocation>> {
        let k = self.range_attribute(kind, what)?;
        let i = self.range_attribute(id, what)?;
        Ok(MemoryLocation::from_driver(k, i))
    }

    /// Advises that the memory is mostly read (copies may then live on several devices).
    pub fn advise_read_mostly(&self, on: bool) -> Result<()> {
        let advice = if on {
            Advice::CU_MEM_ADVISE_SET_READ_MOSTLY
        } else {
            Advice::CU_MEM_ADVISE_UNSET_READ_MOSTLY
        };
        self.advise(advice, ANYWHERE, "advise")
    }

    /// Whether the memory is advised to be mostly read (`cuda.core`'s `read_mostly`).
    pub fn read_mostly(&self) -> Result<bool> {
        Ok(self.range_attribute(Range::CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, "advise")? != 0)
    }

    /// Advises where the memory should preferably live (`None` removes the advice).
    pub fn advise_preferred_location(&self, location: Option<MemoryLocation>) -> Result<()> {
        match location {
            Some(l) => self.advise(Advice::CU_MEM_ADVISE_SET_PREFERRED_LOCATION, l, "advise"),
            None => self.advise(Advice::CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, ANYWHERE, "advise"),
        }
    }

    /// Where the memory is advised to live (`cuda.core`'s `preferred_location`; `None`: no
    /// advice).
    pub fn preferred_location(&self) -> Result<Option<MemoryLocation>> {
        self.range_location(
            Range::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE,
            Range::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID,
            "advise",
        )
    }

    /// Checks that `location` can be named in accessed-by advice (a device or the host).
    fn accessed_by_location(location: MemoryLocation, advice: Advice) -> Result<MemoryLocation> {
        match location {
            MemoryLocation::Device(_) | MemoryLocation::Host => Ok(location),
            other => Err(CudaError::InvalidArgument(format!(
                "advise {} does not support location_type='{}'",
                if advice == Advice::CU_MEM_ADVISE_SET_ACCESSED_BY {
                    "CU_MEM_ADVISE_SET_ACCESSED_BY"
                } else {
                    "CU_MEM_ADVISE_UNSET_ACCESSED_BY"
                },
                other.kind_name()
            ))),
        }
    }

    /// Advises that a device (or the host) will access the memory: it is kept mapped there.
    pub fn advise_accessed_by(&self, location: impl Into<MemoryLocation>, on: bool) -> Result<()> {
        let advice = if on {
            Advice::CU_MEM_ADVISE_SET_ACCESSED_BY
        } else {
            Advice::CU_MEM_ADVISE_UNSET_ACCESSED_BY
        };
        let location = Buffer::accessed_by_location(location.into(), advice)?;
        self.advise(advice, location, "advise")
    }

    /// The devices (and the host) advised to access the memory (`cuda.core`'s `accessed_by`),
    /// devices in order, the host last.
    pub fn accessed_by(&self) -> Result<Vec<MemoryLocation>> {
        self.require_managed("advise")?;
        // One entry per device and one for the host; the driver fills unused ones with -2.
        let n = crate::device_count()?
            .checked_add(1)
            .ok_or_else(|| CudaError::InvalidArgument("accessed_by: too many devices".into()))?;
        let mut entries = vec![-2i32; n];
        let bytes = n
            .checked_mul(std::mem::size_of::<i32>())
            .ok_or_else(|| CudaError::InvalidArgument("accessed_by: too many devices".into()))?;
        // SAFETY: the driver writes at most `bytes` bytes, the size of `entries`.
        unsafe {
            driver::cuMemRangeGetAttribute(
                entries.as_mut_ptr().cast(),
                bytes,
                Range::CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
                self.handle(),
                self.size(),
            )
        }
        .check("cuMemRangeGetAttribute")?;
        let mut out: Vec<MemoryLocation> = entries
            .iter()
            .filter_map(|&e| usize::try_from(e).ok().and_then(|i| Device::new(i).ok()))
            .map(MemoryLocation::Device)
            .collect();
        out.sort_by_key(|l| match l {
            MemoryLocation::Device(d) => d.device_id(),
            _ => usize::MAX,
        });
        out.dedup();
        if entries.contains(&-1) {
            out.push(MemoryLocation::Host);
        }
        Ok(out)
    }

    /// Makes `locations` exactly the devices (and host) advised to access the memory
    /// (`cuda.core`'s `accessed_by = ...`): every location is checked before any advice changes.
    pub fn set_accessed_by(&self, locations: &[MemoryLocation]) -> Result<()> {
        for l in locations {
            Buffer::accessed_by_location(*l, Advice::CU_MEM_ADVISE_SET_ACCESSED_BY)?;
        }
        let current = self.accessed_by()?;
        for l in current.iter().filter(|l| !locations.contains(l)) {
            self.advise(Advice::CU_MEM_ADVISE_UNSET_ACCESSED_BY, *l, "advise")?;
        }
        for l in locations.iter().filter(|l| !current.contains(l)) {
            self.advise(Advice::CU_MEM_ADVISE_SET_ACCESSED_BY, *l, "advise")?;
        }
        Ok(())
    }

    /// Where the last prefetch asked the memory to go (`None`: never prefetched, or its pages
    /// were last prefetched to different places). The request, not its completion: synchronise
    /// the prefetch's stream to know the pages arrived.
    pub fn last_prefetch_location(&self) -> Result<Option<MemoryLocation>> {
        self.range_location(
            Range::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE,
            Range::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID,
            "prefetch",
        )
    }

    /// Moves the memory to `location`, ordered on `stream`.
    pub fn prefetch(&self, location: impl Into<MemoryLocation>, stream: &Stream) -> Result<()> {
        self.require_managed("prefetch")?;
        let location = location.into();
        enqueue_using(stream, &[self], |_| {
            // SAFETY: the buffer is a live allocation of size bytes, held until the prefetch is
            // done (`enqueue_using`); the stream is live.
            unsafe { driver::cuMemPrefetchAsync(self.handle(), self.size(), location.to_driver(), 0, stream.handle()) }
                .check("cuMemPrefetchAsync")
        })
    }

    /// Tells the driver the contents are no longer needed (it may drop them instead of migrating
    /// them), ordered on `stream`; the next reads see unspecified values (CUDA 13 drivers).
    ///
    /// The driver leaves work using the memory meanwhile undefined: the buffer is borrowed
    /// exclusively, the streams that used it are waited for first, and a buffer a graph holds
    /// (whose launches may run at any time) is refused, and so is the legacy default stream
    /// (which the driver's discard rejects).
    pub fn discard(&mut self, stream: &Stream) -> Result<()> {
        Buffer::discard_batch(&mut [self], stream).map_err(|e| rename(e, "discard_batch", "discard"))
    }

    /// Discards the contents and places the memory at `location` (without migrating the old
    /// contents), ordered on `stream`; the contents are then unspecified (CUDA 13 drivers). As
    /// [`discard`](Self::discard), the buffer is used by nothing else meanwhile.
    pub fn discard_prefetch(&mut self, location: impl Into<MemoryLocation>, stream: &Stream) -> Result<()> {
        Buffer::discard_prefetch_batch(&mut [self], &[location.into()], stream)
            .map_err(|e| rename(e, "discard_prefetch_batch", "discard_prefetch"))
    }

    /// Before a discard: nothing else uses the memory (see [`discard`](Self::discard)).
    fn quiesce_for_discard(&mut self, what: &str) -> Result<()> {
        if self.is_used_by_graph() {
            return Err(CudaError::InvalidState(format!(
                "{what}: a graph (or an exported DLPack tensor) holds this buffer, and may use the memory at any time: discard a buffer nothing else holds"
            )));
        }
        self.synchronize_uses()
    }

    /// Prefetches every buffer, in one driver call (`cuMemPrefetchBatchAsync`, CUDA 13
    /// drivers), to one location for all (`locations` of length 1) or one each.
    pub fn prefetch_batch(buffers: &[&Buffer], locations: &[MemoryLocation], stream: &Stream) -> Result<()> {
        refuse_legacy("prefetch_batch", "cuMemPrefetchBatchAsync", stream)?;
        let batch = Batch::new("prefetch_batch", buffers, Some(locations))?;
        enqueue_using(stream, buffers, |_| {
            let mut b = batch;
            // SAFETY: the arrays hold `count` entries each (the locations and their indices one
            // per buffer) and live for the call; every buffer is held until the prefetch is done
            // (`enqueue_using`).
            unsafe {
                driver::cuMemPrefetchBatchAsync(
                    b.ptrs.as_mut_ptr(),
                    b.sizes.as_mut_ptr(),
                    b.ptrs.len(),
                    b.locations.as_mut_ptr(),
                    b.indices.as_mut_ptr(),
                    b.locations.len(),
                    0,
                    stream.handle(),
                )
            }
            .check("cuMemPrefetchBatchAsync")
        })
    }

    /// Discards every buffer's contents, in one driver call (`cuMemDiscardBatchAsync`, CUDA 13
    /// drivers), each used by nothing else meanwhile (see [`discard`](Self::discard)).
    pub fn discard_batch(buffers: &mut [&mut Buffer], stream: &Stream) -> Result<()> {
        refuse_legacy("discard_batch", "cuMemDiscardBatchAsync", stream)?;
        let (batch, buffers) = Batch::for_discard("discard_batch", buffers, None)?;
        enqueue_using(stream, &buffers, |_| {
            let mut b = batch;
            // SAFETY: the arrays hold one entry per buffer and live for the call; every buffer is
            // held until the discard is done (`enqueue_using`).
            unsafe {
                driver::cuMemDiscardBatchAsync(
                    b.ptrs.as_mut_ptr(),
                    b.sizes.as_mut_ptr(),
                    b.ptrs.len(),
                    0,
                    stream.handle(),
                )
            }
            .check("cuMemDiscardBatchAsync")
        })
    }

    /// Discards every buffer's contents and places it at its location, in one driver call
    /// (`cuMemDiscardAndPrefetchBatchAsync`, CUDA 13 drivers), each used by nothing else
    /// meanwhile (see [`discard`](Self::discard)).
    pub fn discard_prefetch_batch(
        buffers: &mut [&mut Buffer],
        locations: &[MemoryLocation],
        stream: &Stream,
    ) -> Result<()> {
        refuse_legacy("discard_prefetch_batch", "cuMemDiscardAndPrefetchBatchAsync", stream)?;
        let (batch, buffers) = Batch::for_discard("discard_prefetch_batch", buffers, Some(locations))?;
        enqueue_using(stream, &buffers, |_| {
            let mut b = batch;
            // SAFETY: as in `prefetch_batch`.
            unsafe {
                driver::cuMemDiscardAndPrefetchBatchAsync(
                    b.ptrs.as_mut_ptr(),
                    b.sizes.as_mut_ptr(),
                    b.ptrs.len(),
                    b.locations.as_mut_ptr(),
                    b.indices.as_mut_ptr(),
                    b.locations.len(),
                    0,
                    stream.handle(),
                )
            }
            .check("cuMemDiscardAndPrefetchBatchAsync")
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

/// The batch calls reject the legacy default stream (`CUDA_ERROR_INVALID_VALUE`): refused first,
/// with what to use instead.
fn refuse_legacy(what: &str, call: &str, stream: &Stream) -> Result<()> {
    if stream.is_legacy_default() {
        return Err(CudaError::InvalidArgument(format!(
            "{what}: {call} does not accept the legacy default stream; use a stream of your own or the per-thread default stream"
        )));
    }
    Ok(())
}

/// The arrays of a batch operation, checked as `cuda.core` checks them.
struct Batch {
    ptrs: Vec<driver::CUdeviceptr>,
    sizes: Vec<usize>,
    locations: Vec<driver::CUmemLocation>,
    indices: Vec<usize>,
}

impl Batch {
    fn new(what: &str, buffers: &[&Buffer], locations: Option<&[MemoryLocation]>) -> Result<Batch> {
        if buffers.is_empty() {
            return Err(CudaError::InvalidArgument(format!("{what}: empty buffers sequence")));
        }
        for b in buffers {
            b.require_managed(what)?;
        }
        let (locations, indices) = match locations {
            None => (Vec::new(), Vec::new()),
            Some(l) if l.len() == 1 => (vec![l[0].to_driver(); buffers.len()], (0..buffers.len()).collect()),
            Some(l) if l.len() == buffers.len() => (l.iter().map(|l| l.to_driver()).collect(), (0..l.len()).collect()),
            Some(l) => {
                return Err(CudaError::InvalidArgument(format!(
                    "{what}: location length {} does not match targets length {}",
                    l.len(),
                    buffers.len()
                )))
            }
        };
        Ok(Batch {
            ptrs: buffers.iter().map(|b| b.handle()).collect(),
            sizes: buffers.iter().map(|b| b.size()).collect(),
            locations,
            indices,
        })
    }
}

impl Batch {
    /// A discard's batch: checked, then every buffer quiesced (see [`Buffer::discard`]); with
    /// the buffers, shared again for the operation.
    fn for_discard<'b>(
        what: &str,
        buffers: &'b mut [&mut Buffer],
        locations: Option<&[MemoryLocation]>,
    ) -> Result<(Batch, Vec<&'b Buffer>)> {
        let batch = Batch::new(what, &shared(buffers), locations)?;
        for b in buffers.iter_mut() {
            b.quiesce_for_discard(what)?;
        }
        Ok((batch, shared(buffers)))
    }
}

/// A batch operation's error, named after the single-buffer operation that made it.
fn rename(e: CudaError, batch: &str, single: &str) -> CudaError {
    match e {
        CudaError::InvalidArgument(m) => CudaError::InvalidArgument(m.replace(batch, single)),
        CudaError::InvalidState(m) => CudaError::InvalidState(m.replace(batch, single)),
        CudaError::InvalidType(m) => CudaError::InvalidType(m.replace(batch, single)),
        other => other,
    }
}

/// Shared references to exclusively borrowed buffers.
fn shared<'a>(buffers: &'a [&mut Buffer]) -> Vec<&'a Buffer> {
    buffers.iter().map(|b| &**b).collect()
}
