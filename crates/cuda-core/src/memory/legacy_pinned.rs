//! [`LegacyPinnedMemoryResource`]: page-locked host memory from `cuMemHostAlloc`.

use super::{Buffer, MemoryResource};
use crate::device::Device;
use crate::error::Check;
use crate::stream::Stream;
use crate::Result;
use cuda_sys::driver;
use std::ffi::c_void;
use std::sync::Arc;

/// Page-locked host memory from `cuMemHostAlloc` (not stream-ordered: allocation and freeing
/// synchronise).
pub struct LegacyPinnedMemoryResource {
    flags: u32,
}

bitflags::bitflags! {
    /// `cuMemHostAlloc` flags.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct HostAllocFlags: u32 {
        /// Pinned for every context, not only the current one.
        const PORTABLE = 0x01;
        /// Mapped into the device address space.
        const DEVICEMAP = 0x02;
        /// Write-combined: fast for the host to write and the device to read, slow for the host to read.
        const WRITECOMBINED = 0x04;
    }
}

impl LegacyPinnedMemoryResource {
    /// A resource that allocates pinned host memory with `cuMemHostAlloc` and `flags`
    /// (`cuda.core`'s `LegacyPinnedMemoryResource()`); `PORTABLE` and `DEVICEMAP` are always
    /// added, so a buffer is usable from every context and by kernels.
    pub fn new(flags: HostAllocFlags) -> Arc<LegacyPinnedMemoryResource> {
        // Portable and mapped always: a buffer's pointer is used from any context and by kernels.
        Arc::new(LegacyPinnedMemoryResource {
            flags: (flags | HostAllocFlags::PORTABLE | HostAllocFlags::DEVICEMAP).bits(),
        })
    }

    /// `size` bytes.
    pub fn allocate(self: &Arc<Self>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate(self.clone(), size, stream)
    }
}

impl LegacyPinnedMemoryResource {
    /// The allocation itself, in the current context.
    fn allocate_here(&self, size: usize) -> Result<driver::CUdeviceptr> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the flags are valid cuMemHostAlloc flags.
        unsafe { driver::cuMemHostAlloc(&mut p, size.max(1), self.flags) }.check("cuMemHostAlloc")?;
        // With unified addressing the host pointer is the device pointer.
        Ok(p as driver::CUdeviceptr)
    }
}

// SAFETY: cuMemHostAlloc returns at least `size` (at least one) bytes of page-locked host memory,
// mapped for every context (PORTABLE | DEVICEMAP, always set) under unified addressing, so the
// host pointer is the device pointer; it is freed only after the stream's work is done.
unsafe impl MemoryResource for LegacyPinnedMemoryResource {
    fn allocate(&self, size: usize, stream: &Stream) -> Result<driver::CUdeviceptr> {
        // Made in the stream's context, which the buffer holds (through its stream) for as
        // long as the memory lives: destroying a context frees what was allocated in it.
        stream.context_or_current()?.with_current(|| self.allocate_here(size))
    }
    unsafe fn deallocate(&self, ptr: driver::CUdeviceptr, _size: usize, stream: &Stream) -> Result<()> {
        // Not stream-ordered: wait for the work that may still use it (in the stream's context,
        // which cuMemFreeHost needs current).
        stream.context_or_current()?.with_current(|| {
            super::wait_before_free(stream)?;
            // SAFETY: forwarded to the caller; the stream's work is done.
            unsafe { driver::cuMemFreeHost(ptr as *mut c_void) }.check("cuMemFreeHost")
        })
    }
    fn is_device_accessible(&self) -> bool {
        true
    }
    fn is_host_accessible(&self) -> bool {
        true
    }
    fn device(&self) -> Option<Device> {
        None
    }
}
