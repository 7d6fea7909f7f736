//! Safe host access to host-accessible memory (pinned pools, legacy pinned, managed memory):
//! [`Buffer::host_slice`] and [`Buffer::host_slice_mut`].
//!
//! **Why it is sound.** The slice borrows the buffer exclusively (`&mut self`), so no safe call
//! can queue work on it, free it, or lend it to a graph while the slice lives. Before the slice
//! is made, the work already queued on it is waited for on the host: a fence after the work of
//! the deallocation stream (which covers a stream-ordered pool allocation itself: the memory is
//! the buffer's only once its allocation has run) and of every other stream that used the buffer.
//! Memory that something outside this crate's bookkeeping may still write is refused: memory a
//! graph holds (its launches may run at any time), graph memory, memory shared with another
//! process (opened from one, of a pool exported to others, or virtual memory made shareable),
//! and foreign memory (wrapped with
//! `from_handle*`, DLPack or cudarc: its owner may write it). On a system where some device
//! cannot touch managed memory concurrently with the host, managed memory is refused too (the
//! host would fault while any kernel runs).
//!
//! **Threads.** Any thread may call it (the waits are host waits on events, in relaxed capture
//! mode, so a capture on another thread neither refuses nor is invalidated by them); not a host
//! function or a [`crate::Completion`]'s waker (no CUDA call is made there).

use super::Buffer;
use crate::device::Device;
use crate::stream::capture::before_capture;
use crate::stream::{Fence, Site};
use crate::{CudaError, Result};
use bytemuck::Pod;
use std::sync::OnceLock;

impl Buffer {
    /// The buffer's memory as a host slice of `T`, to read and write, once every stream that
    /// used the buffer (and its allocation) is done with it: this waits on the host for that
    /// work first, and the buffer stays borrowed (nothing can be queued on it) while the slice
    /// lives. The buffer's size must be a whole number of `T`, and its address aligned for `T`.
    ///
    /// Refused (an error, with nothing waited for) for memory the host cannot reach, memory a
    /// graph holds or allocated, memory shared with another process, and foreign memory; see
    /// the module notes. GPU work queued after the slice is gone sees what the host wrote.
    ///
    /// ```no_run
    /// # use cuda_core::*;
    /// # fn demo(s: &Stream) -> Result<()> {
    /// let pinned = PinnedMemoryResource::portable()?;
    /// let mut staging = pinned.allocate(4096, s)?;
    /// staging.host_slice_mut::<f32>()?.fill(1.5);
    /// # Ok(()) }
    /// ```
    pub fn host_slice_mut<T: Pod>(&mut self) -> Result<&mut [T]> {
        let len = self.whole_elements::<T>("host_slice_mut")?;
        self.host_elements_mut(len, "host_slice_mut")
    }

    /// The first `len` elements of `T` of the buffer as a host slice, after the checks and
    /// waits of [`host_slice_mut`](Self::host_slice_mut) (for it and the typed buffers').
    pub(crate) fn host_elements_mut<T: Pod>(&mut self, len: usize, what: &str) -> Result<&mut [T]> {
        let ptr = self.quiesce_for_host::<T>(len, what)?;
        if len == 0 {
            return Ok(&mut []);
        }
        // SAFETY: `quiesce_for_host` checked that the memory is host-accessible (the resource's
        // promise, or the driver's answer), holds `len` elements of `T`, and is aligned for
        // `T`; every `T: Pod` bit pattern is valid. No GPU work queued so far uses it any more
        // (waited for), nothing outside this crate's bookkeeping writes it (refused), and
        // `&mut self` keeps safe code from queueing work on it, freeing it or making another
        // slice of it for the slice's lifetime.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr as usize as *mut T, len) })
    }

    /// The buffer's memory as a host slice of `T`, to read, once every stream that used the
    /// buffer is done with it (see [`host_slice_mut`](Self::host_slice_mut), whose checks and
    /// waits it shares). The buffer is borrowed exclusively for reading too: a shared borrow
    /// would let a copy into the buffer be queued while the slice is read.
    pub fn host_slice<T: Pod>(&mut self) -> Result<&[T]> {
        Ok(self.host_slice_mut::<T>()?)
    }

    /// How many whole `T` the buffer holds: an error naming `what` when its size is not a whole
    /// number of them, or `T` has no size.
    pub(crate) fn whole_elements<T>(&self, what: &str) -> Result<usize> {
        let item = std::mem::size_of::<T>();
        if item == 0 || !self.size().is_multiple_of(item) {
            return Err(CudaError::InvalidArgument(format!(
                "{what}: a buffer of {} bytes is not a whole number of {} ({item} bytes each)",
                self.size(),
                std::any::type_name::<T>()
            )));
        }
        Ok(self.size() / item)
    }

    /// Before the host touches `len` elements of `T` at the start of the buffer: refuses what
    /// the module notes say, then waits until no work queued so far on any stream uses the
    /// memory. Returns the address. `what` names the caller in errors.
    pub(crate) fn quiesce_for_host<T>(&mut self, len: usize, what: &str) -> Result<u64> {
        crate::reaper::refuse_in_callback()?;
        let refuse = |why: &str| Err(CudaError::InvalidArgument(format!("{what}: {why}")));
        let bytes = len.checked_mul(std::mem::size_of::<T>());
        if bytes.is_none_or(|b| b > self.size()) {
            return refuse("the elements do not fit in the buffer");
        }
        if !self.is_host_accessible() {
            return refuse(
                "the buffer is not host-accessible (device memory): copy it to a host slice or a pinned buffer instead",
            );
        }
        if self.is_graph_memory() {
            return refuse("graph memory exists only while its graph runs");
        }
        if self.foreign.is_some() {
            return refuse("the memory was wrapped from elsewhere (from_handle, DLPack or cudarc) and its owner may write it: the unsafe as_host_slice_mut is for that");
        }
        if self.is_mapped()
            || self.memory_resource().is_some_and(|r| r.ipc_pool().is_some())
            || exportable_allocation(self.handle())
        {
            return refuse("the memory is shared with another process, which may write it at any time");
        }
        if self.is_used_by_graph() {
            return refuse("a graph (or an exported DLPack tensor) holds this buffer, and may use the memory at any time: use a buffer nothing else holds");
        }
        if self.is_managed() && !managed_memory_is_concurrent()? {
            return refuse("a device of this system cannot use managed memory while the host does (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS is 0): the host would fault while any kernel runs; copy instead");
        }
        if !(self.handle() as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return refuse(&format!(
                "the buffer at {:#x} is not aligned for {}",
                self.handle(),
                std::any::type_name::<T>()
            ));
        }
        // The deallocation stream first (the allocation), then every other stream that used it.
        wait_for_site(&self.dealloc, what)?;
        for site in self.uses_mut().map_or(&[][..], |u| &u[..]) {
            wait_for_site(site, what)?;
        }
        Ok(self.handle())
    }
}

/// Waits on the host until the work queued on `site` so far is done: through a fence recorded
/// now; for a stream being captured (whose new records would join the capture), through the
/// fence recorded just before this crate began that capture (the work on the buffer since would
/// have made a graph hold it, which is refused before); for another thread's per-thread default
/// stream, by synchronising its context.
fn wait_for_site(site: &Site, what: &str) -> Result<()> {
    match site.fence()? {
        Fence::Event(fence) => crate::memory::copy::wait_for_fence(fence.handle()),
        Fence::Capturing => match before_capture(site) {
            Some(fence) => crate::memory::copy::wait_for_fence(fence.handle()),
            None => Err(CudaError::InvalidState(format!(
                "{what}: a stream that used the buffer joined a capture this crate did not begin, and its earlier work cannot be waited for: retry after the capture ends"
            ))),
        },
        Fence::Unreachable => site.synchronize(),
    }
}

/// Whether `ptr` starts a virtual-memory allocation made shareable with other processes (its
/// handle types are not none: virtual memory exported through a file descriptor or a fabric
/// handle, which the other process may write at any time). Memory that is no virtual-memory
/// allocation (the driver keeps no handle for it) is not.
fn exportable_allocation(ptr: u64) -> bool {
    use crate::error::Check;
    use cuda_sys::driver;
    let mut handle: driver::CUmemGenericAllocationHandle = 0;
    // SAFETY: the driver only looks the address up (an error for memory that is no virtual-memory
    // allocation); out-pointer to a local.
    let retained = unsafe { driver::cuMemRetainAllocationHandle(&mut handle, ptr as usize as *mut std::ffi::c_void) }
        .check("cuMemRetainAllocationHandle");
    if retained.is_err() {
        return false;
    }
    let mut prop = driver::CUmemAllocationProp::default();
    // SAFETY: `handle` is the reference just retained; out-pointer to a local.
    let read = unsafe { driver::cuMemGetAllocationPropertiesFromHandle(&mut prop, handle) }
        .check("cuMemGetAllocationPropertiesFromHandle");
    // SAFETY: releases the reference retained above, once (the mapping keeps its own).
    let _ = unsafe { driver::cuMemRelease(handle) };
    // Unreadable properties: counted as shared (refused), not guessed.
    read.is_err() || prop.requestedHandleTypes != driver::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE
}

/// Whether every device of the system may use managed memory while the host does (asked once).
fn managed_memory_is_concurrent() -> Result<bool> {
    static CONCURRENT: OnceLock<bool> = OnceLock::new();
    if let Some(c) = CONCURRENT.get() {
        return Ok(*c);
    }
    let mut all = true;
    for d in Device::all()? {
        all &= d.properties().concurrent_managed_access()? != 0;
    }
    Ok(*CONCURRENT.get_or_init(|| all))
}
