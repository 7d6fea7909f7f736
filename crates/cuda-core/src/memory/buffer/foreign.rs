//! Buffers over memory this crate did not allocate (`cuda.core`'s `Buffer.from_handle(ptr,
//! size, mr=None, owner=None)`): a plain view, memory a resource frees, or memory an owner
//! keeps alive until the last work on it is done.

use super::{Buffer, Foreign, Holder, PointerInfo};
use crate::device::Device;
use crate::memory::MemoryResource;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::any::Any;
use std::sync::Arc;

impl Buffer {
    /// Wraps memory allocated elsewhere; it is never freed here. Whether the device and the
    /// host can reach it, its device and whether it is managed come from the driver's pointer
    /// attributes, as in `cuda.core` (unregistered host memory is host-only; pinned, registered
    /// and managed memory both; device memory device-only).
    ///
    /// # Safety
    /// `ptr` must point to `size` bytes of memory usable by the device (or host, as it is used)
    /// for as long as the buffer, and every graph that records work on it, live.
    pub unsafe fn from_handle(ptr: driver::CUdeviceptr, size: usize, stream: &Stream) -> Result<Buffer> {
        let access = PointerInfo::of(ptr)?.access()?;
        let mut buffer = Buffer::from_parts(ptr, size, None, stream)?;
        buffer.foreign = Some(Box::new(Foreign { access, owner: None }));
        Ok(buffer)
    }

    /// Wraps memory allocated elsewhere that `owner` keeps alive (`cuda.core`'s
    /// `from_handle(ptr, size, owner=...)`): the buffer holds `owner`, and lets it go once the
    /// buffer is dropped and the work of every stream (and graph) that used the memory is done.
    /// The owner is dropped then, never inside an operation on a stream. [`owner`](Buffer::owner)
    /// lends it.
    /// (`cuda.core` refuses an owner together with a memory resource; here they are different
    /// constructors.)
    ///
    /// # Safety
    /// `ptr` must point to `size` bytes of memory usable by the device (or host, as it is used)
    /// for as long as `owner` lives.
    pub unsafe fn from_handle_with_owner<O: Any + Send + Sync>(
        ptr: driver::CUdeviceptr,
        size: usize,
        owner: O,
        stream: &Stream,
    ) -> Result<Buffer> {
        let access = PointerInfo::of(ptr)?.access()?;
        let owner: Arc<dyn Any + Send + Sync> = Arc::new(owner);
        let keeper = Arc::new(Keeper::new(
            owner.clone(),
            access.ordinal.and_then(|o| Device::new(o).ok()),
            (access.device, access.host),
        ));
        let mut buffer = Buffer::from_parts(ptr, size, Some(keeper), stream)?;
        buffer.foreign = Some(Box::new(Foreign {
            access,
            owner: Some(owner),
        }));
        Ok(buffer)
    }

    /// Takes ownership of memory `resource` allocated (`cuda.core`'s `from_handle(ptr, size,
    /// mr=...)`): the buffer frees it through the resource, as if it had allocated it, on
    /// `stream` (its deallocation stream).
    ///
    /// # Safety
    /// `ptr` must come from `resource.allocate(size, _)`, be usable by work queued on `stream`
    /// (allocated in its order, or before), be owned by nothing else (nothing else frees it),
    /// and no work may use it once the buffer frees it.
    pub unsafe fn from_handle_with_resource(
        ptr: driver::CUdeviceptr,
        size: usize,
        resource: Arc<dyn MemoryResource>,
        stream: &Stream,
    ) -> Result<Buffer> {
        Buffer::from_parts(ptr, size, Some(resource), stream)
    }
}

impl Buffer {
    /// Hands back the owner of foreign memory ([`Buffer::from_handle_with_owner`]) once `wait`
    /// has ordered its next user after every stream that used the buffer: the buffer and its
    /// keeper let go of it (the memory is not waited for nor freed here) and the owner comes back
    /// as the only reference to it. Refused, with the buffer back untouched: memory without an
    /// owner, memory a graph holds, and buffers a stream being captured has used.
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    #[allow(clippy::result_large_err)]
    pub(crate) fn reclaim_owner(
        mut self,
        wait: &mut dyn FnMut(driver::CUevent) -> Result<()>,
    ) -> std::result::Result<Arc<dyn Any + Send + Sync>, (CudaError, Buffer)> {
        let refuse = |buffer: Buffer, why: &str| Err((CudaError::InvalidArgument(why.into()), buffer));
        if self.owner().is_none() {
            return refuse(self, "the buffer has no owner to hand back");
        }
        if self.is_used_by_graph() {
            return refuse(
                self,
                "a graph (it recorded work on it) or an exported DLPack tensor holds this buffer's memory: its owner goes when the last of them does",
            );
        }
        // The buffer's owner and its keeper's are the only references (no graph holds the keeper).
        let unique = self.resource.as_ref().is_some_and(Holder::is_unique)
            && self
                .foreign
                .as_ref()
                .and_then(|f| f.owner.as_ref())
                .is_some_and(|o| Arc::strong_count(o) == 2);
        if !unique {
            return refuse(self, "the buffer's memory is still held elsewhere (a pending free)");
        }
        if let Err(e) = self.order_after_uses(wait) {
            return Err((e, self));
        }
        // The keeper goes without its wait (the next user was ordered above), then the owner is
        // the only reference; Drop finds nothing left.
        self.resource = None;
        match self.foreign.as_mut().and_then(|f| f.owner.take()) {
            Some(owner) => Ok(owner),
            None => Err((
                CudaError::InvalidArgument("the buffer has no owner to hand back".into()),
                self,
            )),
        }
    }
}

/// The resource of a buffer whose memory an owner keeps (a user's value, or an imported DLPack
/// tensor): it never allocates, and "frees" by waiting for the work queued on the buffer's
/// deallocation stream; the owner goes with the keeper, once the buffer and every graph holding
/// its memory are gone (outside any operation on a stream).
pub(crate) struct Keeper {
    _owner: Arc<dyn Any + Send + Sync>,
    device: Option<Device>,
    access: (bool, bool),
}

impl Keeper {
    /// Keeps `owner` for memory of `device` that the device and the host reach as `access`
    /// says (`(device, host)`; read-only memory answers neither, so that no safe write
    /// reaches it).
    pub(crate) fn new(owner: Arc<dyn Any + Send + Sync>, device: Option<Device>, access: (bool, bool)) -> Keeper {
        Keeper {
            _owner: owner,
            device,
            access,
        }
    }
}

// SAFETY: a keeper allocates nothing (its buffers' makers vouch for the memory while the owner
// lives: `from_handle_with_owner`'s caller, or the producer of a DLPack tensor, which needed
// `unsafe` code to make it); its `deallocate` waits for the stream's work, and the owner lives
// as long as the keeper, which outlives that call: the memory outlives every use the buffer
// ordered before it (the buffer orders every other stream's first). Its answers are fixed for
// the buffer's life.
unsafe impl MemoryResource for Keeper {
    fn allocate(&self, _size: usize, _stream: &Stream) -> Result<driver::CUdeviceptr> {
        Err(CudaError::InvalidArgument(
            "a buffer's owner allocates nothing: allocate from a memory resource".into(),
        ))
    }
    unsafe fn deallocate(&self, _ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // The owner (a producer's deleter, a user's drop) may free at once when it goes: let the
        // queued work finish first.
        crate::memory::wait_before_free(stream)
    }
    fn is_device_accessible(&self) -> bool {
        self.access.0
    }
    fn is_host_accessible(&self) -> bool {
        self.access.1
    }
    fn device(&self) -> Option<Device> {
        self.device
    }
}
