//! [`SynchronousMemoryResource`]: device memory from `cuMemAlloc` / `cuMemFree`, the default
//! resource `cuda.core` gives a device without memory pools (`_SynchronousMemoryResource`,
//! chosen when `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` is 0: a GPU in TCC mode, some
//! virtualised or embedded ones).

use crate::device::Device;
use crate::error::Check;
use crate::memory::{Buffer, MemoryResource};
use crate::stream::Stream;
use crate::Result;
use cuda_sys::driver;
use std::sync::Arc;

/// Device memory from `cuMemAlloc`, freed with `cuMemFree` once the work queued on the buffer's
/// deallocation stream is done (the free is not stream-ordered, so it waits for that stream;
/// a buffer dropped while that work runs is freed by the release thread afterwards, so no drop
/// waits for the GPU). The allocation itself is immediate: the memory is usable by every stream
/// at once.
///
/// [`Device::allocate`] uses one on a device without memory pools; it works on every device.
///
/// ```no_run
/// # fn main() -> cuda_core::Result<()> {
/// let device = cuda_core::Device::new(0)?;
/// device.set_current()?;
/// let stream = device.create_stream(Default::default())?;
/// let mr = cuda_core::SynchronousMemoryResource::new(&device);
/// let buffer = mr.allocate(1 << 20, &stream)?;
/// buffer.fill_u8(0, &stream)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SynchronousMemoryResource {
    device: Device,
}

impl SynchronousMemoryResource {
    /// A resource allocating on `device`, in its primary context (retained on first use).
    pub fn new(device: &Device) -> Arc<SynchronousMemoryResource> {
        Arc::new(SynchronousMemoryResource { device: *device })
    }

    /// `size` bytes; `stream` becomes the buffer's deallocation stream.
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }
}

// SAFETY: cuMemAlloc returns at least `size` (at least one) bytes of device memory of `device`,
// allocated in its primary context, which is never destroyed (retained for the life of the
// process), usable by every stream as soon as the call returns; it is freed only after the work
// queued on the deallocation stream is done (see `deallocate`). The host cannot touch it.
unsafe impl MemoryResource for SynchronousMemoryResource {
    fn allocate(&self, size: usize, _stream: &Stream) -> Result<driver::CUdeviceptr> {
        self.device.primary_context()?.with_current(|| {
            let mut ptr = 0;
            // In relaxed capture mode: a global or thread-local capture elsewhere is neither
            // refused nor invalidated by the allocation (as for the pools' attribute calls).
            // SAFETY: out-pointer to a local; the device's primary context is current.
            crate::stream::relaxed_capture_mode(|| unsafe { driver::cuMemAlloc(&mut ptr, size.max(1)) })
                .check("cuMemAlloc")?;
            Ok(ptr)
        })
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // Not stream-ordered: the work that may still use the memory is waited for first (in
        // relaxed capture mode: a capture elsewhere is neither refused nor invalidated).
        crate::memory::wait_before_free(stream)?;
        // cuMemFree finds the allocation's context from the pointer (no context needs to be
        // current); the primary context is made current anyway, for drivers that want one.
        self.device.primary_context()?.with_current(|| {
            // SAFETY: forwarded to the caller; the stream's work is done. (Relaxed capture mode:
            // as for the allocation.)
            crate::stream::relaxed_capture_mode(|| unsafe { driver::cuMemFree(ptr) }).check("cuMemFree")
        })
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
