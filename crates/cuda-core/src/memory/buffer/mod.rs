//! [`Buffer`]: memory from a [`MemoryResource`], and what keeps it alive until its free.
//!
//! **Who keeps the memory alive.** A buffer frees its memory when dropped (or
//! [`close`](Buffer::close)d), stream-ordered on its deallocation stream. Work queued on other
//! streams is covered too: the first time a stream other than the deallocation stream queues
//! work on a buffer, that stream waits for the deallocation stream (so the work follows the
//! allocation) and the buffer remembers it; the free then waits for every stream it remembers.
//! Work on the deallocation stream itself costs one comparison. A stream is remembered as a
//! [`Site`]: for the default streams, with the context and thread that give the handle its
//! meaning.
//!
//! **Graphs.** Work recorded into a graph is not run by the stream it was queued on but by every
//! launch of the graph: the graph holds the memory (a [`SharedAllocation`], shared by every graph
//! and node that uses the buffer), and the memory is freed when the buffer and every graph holding
//! it (and their launches) are gone.
//! Memory a graph allocates (graph memory: an allocation node recorded by a capture) exists only
//! while the graph runs: such a buffer is usable only on its stream while it captures into that
//! graph, and the capture frees it (a free node) when the buffer is dropped or the capture ends.
//!
//! **Frees that must wait.** A free cannot be queued on a stream being captured (it would be
//! recorded into the graph instead), nor ordered after one; such frees are handed to the release
//! thread ([`crate::reaper`]) and done when the capture is over.

mod foreign;
mod free;
mod holder;
mod host_access;
mod lazy;
mod uses;
mod view;

pub(crate) use foreign::Keeper;
pub(crate) use free::SharedAllocation;
pub(crate) use holder::Holder;
pub(crate) use uses::enqueue_using;
pub(crate) use view::sub_range;
pub use view::{BufferView, ReadOnlyView};

use super::MemoryResource;
use crate::device::FenceEvent;
use crate::error::{record_drop_error, Check};
use crate::stream::capture::{capture_refusal, refused_for_now};
use crate::stream::{Fence, Site, Stream};
use crate::{CudaError, Result};
use cuda_sys::driver;
use free::{free_graph_memory, graph_allocation, GraphAllocation};
use lazy::LazyBox;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

/// Plain-data element types buffers copy to and from host slices.
pub use bytemuck::Pod;

/// Memory from a [`MemoryResource`], freed (stream-ordered, on its deallocation stream, after
/// the work of every stream that used it) when dropped. It keeps its resource and its
/// deallocation stream alive.
///
/// Any stream may use a buffer: the first time a stream other than the deallocation stream
/// queues work on it, that stream waits for the allocation, and the free waits for every such
/// stream. Work recorded into a graph is held by the graph: the memory is freed when the buffer
/// and every graph holding it are gone. Graph memory (allocated by a capture) is usable only on
/// its stream while that capture records, and the capture frees it. Frees that cannot be queued
/// yet (their stream is being captured) are done on a thread of this crate when the capture ends.
pub struct Buffer {
    ptr: driver::CUdeviceptr,
    size: usize,
    resource: Option<Holder>,
    /// Where the buffer is freed; its first uses elsewhere are ordered after it.
    dealloc: Site,
    /// What the buffer learns once another stream or a graph uses it (or its deallocation
    /// stream changes); made on first need (boxed: a buffer used only on its deallocation stream
    /// moves and drops cheaply).
    track: LazyBox<Tracking>,
    /// For graph memory: the capture that allocated it (boxed: rare).
    graph: Option<Box<GraphAllocation>>,
    /// For foreign memory (`from_handle`, `from_handle_with_owner`): what the driver says of it
    /// and what keeps it alive (boxed: most buffers are not foreign, and a small buffer moves
    /// and drops cheaply).
    foreign: Option<Box<Foreign>>,
}

/// What a buffer learns once a stream other than its deallocation stream, or a graph, uses it.
#[derive(Default)]
struct Tracking {
    /// Other streams that queued work on the buffer: its free waits for them.
    uses: Mutex<Vec<Site>>,
    /// Set once a graph records work on the buffer: from then on the memory is freed when the
    /// last of the buffer and those graphs goes.
    shared: OnceLock<Arc<SharedAllocation>>,
    /// Set the first time a graph uses the buffer: a fence after its allocation, which launches
    /// of such graphs wait for (`None`: the allocation was known to be done).
    ready: OnceLock<Option<Arc<FenceEvent>>>,
}

/// What a buffer over foreign memory knows of it.
struct Foreign {
    /// Who can reach it, as the driver says.
    access: Access,
    /// What keeps it alive (`from_handle_with_owner`), handed back by `owner()`; the last
    /// reference goes after the last work on the memory is done.
    owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

/// Who can reach a buffer's memory, and what the driver says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Access {
    device: bool,
    host: bool,
    managed: bool,
    /// The device it belongs to (`None` for host memory the driver does not know).
    ordinal: Option<usize>,
}

/// What the driver says of a pointer (`cuPointerGetAttributes`, one call).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PointerInfo {
    /// `CUmemorytype`, 0 for memory the driver does not know (unregistered host memory).
    kind: u32,
    /// Managed memory.
    pub(crate) managed: bool,
    /// The device the memory belongs to.
    pub(crate) ordinal: i32,
}

impl PointerInfo {
    pub(crate) fn of(ptr: driver::CUdeviceptr) -> Result<PointerInfo> {
        let (mut kind, mut managed, mut ordinal) = (0u32, 0u32, 0i32);
        let mut attributes = [
            driver::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            driver::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            driver::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        ];
        let mut data: [*mut std::ffi::c_void; 3] = [
            (&mut kind as *mut u32).cast(),
            (&mut managed as *mut u32).cast(),
            (&mut ordinal as *mut i32).cast(),
        ];
        // SAFETY: three attributes, each written into a 32-bit local the matching data entry
        // points to; the driver reports unknown (host) pointers as memory type 0 rather than
        // failing.
        unsafe { driver::cuPointerGetAttributes(3, attributes.as_mut_ptr(), data.as_mut_ptr(), ptr) }
            .check("cuPointerGetAttributes")?;
        Ok(PointerInfo {
            kind,
            managed: managed != 0,
            ordinal,
        })
    }

    /// Whether the driver calls it device memory of device `ordinal`.
    pub(crate) fn is_device_memory_of(&self, ordinal: usize) -> bool {
        self.kind == driver::CUmemorytype::CU_MEMORYTYPE_DEVICE.0 && usize::try_from(self.ordinal) == Ok(ordinal)
    }

    /// Whether the driver calls it (page-locked) host memory.
    pub(crate) fn is_host_memory(&self) -> bool {
        self.kind == driver::CUmemorytype::CU_MEMORYTYPE_HOST.0
    }

    /// Who can reach the memory, as `cuda.core` reads the attributes: unregistered host memory
    /// is host-only, pinned and managed memory both, device memory device-only.
    fn access(self) -> Result<Access> {
        let host = driver::CUmemorytype::CU_MEMORYTYPE_HOST.0;
        let device = driver::CUmemorytype::CU_MEMORYTYPE_DEVICE.0;
        let (device, host) = match self.kind {
            _ if self.managed => (true, true),
            0 => (false, true),
            k if k == host => (true, true),
            k if k == device => (true, false),
            other => return Err(CudaError::InvalidArgument(format!("Unsupported memory type: {other}"))),
        };
        Ok(Access {
            device,
            host,
            managed: self.managed,
            ordinal: if self.kind == 0 && !self.managed {
                None
            } else {
                usize::try_from(self.ordinal).ok()
            },
        })
    }
}

impl Buffer {
    /// `size` bytes from `resource`, ordered on `stream`, which also becomes the deallocation
    /// stream. On a stream being captured, a resource that records a stream-ordered allocation
    /// gives graph memory (see [`Buffer`]).
    ///
    /// **The buffer starts on `stream`.** Work queued there needs no ordering; the first time
    /// another stream uses the buffer, that stream waits for everything queued on `stream` so
    /// far (the allocation is among it). Allocate on the stream that uses the buffer first, or
    /// see [`assume_ordered_on`](Self::assume_ordered_on).
    #[inline]
    pub fn allocate(resource: Arc<dyn MemoryResource>, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::allocate_with(Holder::Counted(resource), size, stream, |resource, stream| {
            resource.allocate(size, stream)
        })
    }

    /// [`allocate`](Self::allocate), holding the resource as `resource` says, with the
    /// allocation made by `allocate` (the resource's own `allocate`, called without dynamic
    /// dispatch by resources that know their type), inside the stream's operation.
    #[inline]
    pub(crate) fn allocate_with(
        resource: Holder,
        size: usize,
        stream: &Stream,
        allocate: impl FnOnce(&Holder, &Stream) -> Result<driver::CUdeviceptr>,
    ) -> Result<Buffer> {
        let dealloc = Site::of(stream)?;
        stream.enqueue(move |capture| {
            let ptr = allocate(&resource, stream)?;
            let graph = match capture {
                Some(capture) => graph_allocation(capture, stream, ptr)?.map(Box::new),
                None => None,
            };
            Ok(Buffer::new(ptr, size, Some(resource), dealloc, graph))
        })
    }

    /// A buffer no stream other than `dealloc`'s and no graph has used yet.
    #[inline]
    fn new(
        ptr: driver::CUdeviceptr,
        size: usize,
        resource: Option<Holder>,
        dealloc: Site,
        graph: Option<Box<GraphAllocation>>,
    ) -> Buffer {
        Buffer {
            ptr,
            size,
            resource,
            dealloc,
            track: LazyBox::default(),
            graph,
            foreign: None,
        }
    }

    /// A buffer of memory `resource`, whose pool was made in this process, just allocated on
    /// `dealloc` (its only use so far).
    #[inline]
    pub(crate) fn from_local_pool(
        ptr: driver::CUdeviceptr,
        size: usize,
        resource: &Arc<crate::memory::DeviceMemoryResource>,
        dealloc: Site,
    ) -> Buffer {
        Buffer::new(ptr, size, Some(Holder::of_local_pool(resource)), dealloc, None)
    }

    /// A buffer over `ptr` that `resource` frees (or, without one, nobody does).
    #[inline]
    pub(crate) fn from_parts(
        ptr: driver::CUdeviceptr,
        size: usize,
        resource: Option<Arc<dyn MemoryResource>>,
        stream: &Stream,
    ) -> Result<Buffer> {
        Ok(Buffer::new(
            ptr,
            size,
            resource.map(Holder::Counted),
            Site::of(stream)?,
            None,
        ))
    }

    /// The device address.
    #[inline]
    pub fn handle(&self) -> driver::CUdeviceptr {
        self.ptr
    }

    /// After a resource moved or grew the memory (virtual memory management).
    pub(crate) fn rebase(&mut self, ptr: driver::CUdeviceptr, size: usize) {
        self.ptr = ptr;
        self.size = size;
    }

    /// The size in bytes.
    #[inline]
    pub fn size(&self) -> usize {
        self.size
    }

    /// What the buffer has learnt of its uses, made now if nothing was yet.
    #[inline]
    fn tracking(&self) -> &Tracking {
        self.track.get_or_init()
    }

    /// What the buffer has learnt of its uses, if anything.
    #[inline]
    fn tracked(&self) -> Option<&Tracking> {
        self.track.get()
    }

    /// The other streams that used the buffer (through `&mut self`: no lock taken).
    fn uses_mut(&mut self) -> Option<&mut Vec<Site>> {
        let t = self.track.get_mut()?;
        Some(t.uses.get_mut().unwrap_or_else(|p| p.into_inner()))
    }

    /// What the driver says of foreign memory (`None` for memory of a resource).
    #[inline]
    fn access(&self) -> Option<&Access> {
        self.foreign.as_ref().map(|f| &f.access)
    }

    /// The resource it came from (`None` for foreign memory).
    pub fn memory_resource(&self) -> Option<&Arc<dyn MemoryResource>> {
        match self.access() {
            Some(_) => None,
            None => self.resource.as_ref().map(Holder::arc),
        }
    }

    /// Whether kernels can read and write the memory.
    pub fn is_device_accessible(&self) -> bool {
        match (self.access(), &self.resource) {
            (Some(a), _) => a.device,
            (None, Some(r)) => r.is_device_accessible(),
            (None, None) => true,
        }
    }

    /// Whether the host can read and write the memory directly.
    pub fn is_host_accessible(&self) -> bool {
        match (self.access(), &self.resource) {
            (Some(a), _) => a.host,
            (None, Some(r)) => r.is_host_accessible(),
            (None, None) => false,
        }
    }

    /// The device the memory belongs to (`cuda.core`'s `device_id`; `None`, where `cuda.core`
    /// says -1, for host memory of no device): its resource's device, or for foreign memory the
    /// driver's answer.
    pub fn device_id(&self) -> Option<usize> {
        match (self.access(), &self.resource) {
            (Some(a), _) => a.ordinal,
            (None, Some(r)) => r.device().map(|d| d.device_id()),
            (None, None) => None,
        }
    }

    /// Whether the memory is managed (unified) memory: managed-memory operations apply to it.
    pub fn is_managed(&self) -> bool {
        match (self.access(), &self.resource) {
            (Some(a), _) => a.managed,
            (None, Some(r)) => r.is_managed(),
            (None, None) => false,
        }
    }

    /// Whether the memory was opened from another process (`Buffer::from_ipc_descriptor`).
    pub fn is_mapped(&self) -> bool {
        self.foreign.is_none() && self.resource.as_ref().is_some_and(|r| r.is_mapped())
    }

    /// What keeps foreign memory alive ([`Buffer::from_handle_with_owner`]), if anything.
    pub fn owner(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.foreign.as_ref()?.owner.as_deref()
    }

    /// Whether the buffer is graph memory: allocated by the capture of a graph, and usable only
    /// on its stream while that capture records.
    pub fn is_graph_memory(&self) -> bool {
        self.graph.is_some()
    }

    /// The stream the buffer is freed on.
    pub fn deallocation_stream(&self) -> &Stream {
        self.dealloc.stream()
    }

    /// Frees the buffer on `stream` from now on (after the work queued there, and on every
    /// stream that used the buffer). `stream` is first ordered after the current deallocation
    /// stream. Graph memory is freed by its capture: its deallocation stream cannot change.
    pub fn set_deallocation_stream(&mut self, stream: &Stream) -> Result<()> {
        let site = Site::of(stream)?;
        if site.same(&self.dealloc) {
            return Ok(());
        }
        if self.graph.is_some() {
            return Err(CudaError::InvalidState(
                "graph memory is freed by the capture that allocated it, on its stream: its deallocation stream cannot change".into(),
            ));
        }
        match self.dealloc.fence()? {
            Fence::Event(e) => {
                if !site.wait(&e)? {
                    return Err(CudaError::InvalidState(
                        "set_deallocation_stream: the stream is being captured into a graph; free on a stream that is not".into(),
                    ));
                }
            }
            Fence::Capturing => {
                return Err(CudaError::InvalidState(
                    "set_deallocation_stream: the current deallocation stream is being captured into a graph; change it after the capture ends".into(),
                ))
            }
            Fence::Unreachable => self.dealloc.synchronize()?,
        }
        if let Some(uses) = self.uses_mut() {
            uses.retain(|u| !u.same(&site));
        }
        let old = std::mem::replace(&mut self.dealloc, site);
        // The free waits for the old stream too (unless it is another thread's per-thread
        // stream, synchronised above: this thread cannot name it).
        if old.reachable() {
            // (Through the lock, uncontended here: `&mut self`.)
            self.tracking().uses.lock().unwrap_or_else(|p| p.into_inner()).push(old);
        }
        Ok(())
    }

    /// Whether a graph holds the memory (see [`crate::graph`]), or a DLPack tensor exported from
    /// a view of the buffer does: the memory may then be used at any time, so it cannot move,
    /// be discarded or be read through host slices.
    pub fn is_used_by_graph(&self) -> bool {
        self.tracked().is_some_and(|t| t.shared.get().is_some())
    }

    /// Frees the buffer now (stream-ordered on `stream`, or its deallocation stream, after every
    /// stream that used it) and returns what the driver said.
    pub fn close(mut self, stream: Option<&Stream>) -> Result<()> {
        if crate::reaper::in_callback() {
            // On a driver thread no CUDA call may be made: freed on the release thread, as a
            // drop there is (`stream` is not used: nothing may be queued here).
            drop(self);
            return Ok(());
        }
        if let Some(s) = stream {
            self.set_deallocation_stream(s)?;
        }
        // Drop then finds nothing left to free.
        self.release(false)
    }

    /// Whether only the deallocation stream used the memory (no other stream, no graph, and it
    /// is not graph memory): then its free is queued there with nothing to wait for.
    #[inline]
    fn used_only_where_freed(&mut self) -> bool {
        self.graph.is_none() && self.track.is_empty()
    }

    /// Frees the memory (see [`free_where_used`](Self::free_where_used)); `on_drop`: for a
    /// drop, which must not wait for the GPU.
    #[inline]
    fn release(&mut self, on_drop: bool) -> Result<()> {
        if !self.used_only_where_freed() {
            return self.release_tracked(on_drop);
        }
        // The common case: no other stream and no graph used the buffer.
        let Some(resource) = self.resource.take() else {
            return Ok(());
        };
        self.free_where_used(resource, Vec::new(), on_drop)
    }

    /// [`free_here`](Self::free_here), and what follows from it: `None` when freed,
    /// `Some(resource)` when the general path must take the free on (a capture, or a green
    /// context current on another thread, is in the way), and an error when the free failed (the
    /// memory may still be in use: it and its resource are kept).
    #[inline]
    fn try_free_here(&self, resource: Holder) -> Result<Option<Holder>> {
        match self.free_here(&resource) {
            Ok(true) => Ok(None),
            Ok(false) => Ok(Some(resource)),
            Err(e) if refused_for_now(&e) => Ok(Some(resource)),
            Err(e) => {
                std::mem::forget(resource);
                Err(e)
            }
        }
    }

    /// Frees the memory on the deallocation stream now, when that is a plain stream being
    /// captured by nothing and the only one that used the memory: `Ok(false)` when it is not (the
    /// caller takes the general path).
    #[inline]
    fn free_here(&self, resource: &Holder) -> Result<bool> {
        if !self.dealloc.is_plain() {
            return Ok(false);
        }
        let stream = self.dealloc.stream();
        let (ptr, size) = (self.ptr, self.size);
        // (A plain stream names its context: no context needs to be made current.)
        stream.enqueue(|capture| {
            if capture.is_some() {
                return Ok(false);
            }
            // SAFETY: ptr came from this resource with this size and is freed once (the caller
            // took the resource); the only stream that used it is this one, not capturing
            // (inside its operation), so the free follows all that work.
            unsafe { resource.deallocate(ptr, size, stream) }?;
            Ok(true)
        })
    }

    /// [`release`](Self::release) of graph memory, or of a buffer that other streams or graphs
    /// used.
    #[cold]
    #[inline(never)]
    fn release_tracked(&mut self, on_drop: bool) -> Result<()> {
        if let Some(g) = &self.graph {
            self.resource = None;
            return free_graph_memory(g, self.dealloc.stream());
        }
        let Some(resource) = self.resource.take() else {
            // Released already (`close`, then the drop), or never ours to free: what the buffer
            // knew was handed on then.
            return Ok(());
        };
        let uses = self.uses_mut().map(std::mem::take).unwrap_or_default();
        if let Some(shared) = self.tracked().and_then(|t| t.shared.get()) {
            // Graphs hold the memory: the shared allocation frees it, after this buffer's uses,
            // when the last of them goes. (Added to what it has: it never forgets a stream.)
            let mut slot = shared.allocation.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(a) = slot.as_mut() {
                a.dealloc = self.dealloc.clone();
                for u in uses {
                    if !a.uses.iter().any(|known| known.same(&u)) {
                        a.uses.push(u);
                    }
                }
            }
            // The shared allocation holds the resource; this buffer's reference goes.
            return Ok(());
        }
        self.free_where_used(resource, uses, on_drop)
    }

    /// Frees the memory through `resource` on the deallocation stream after `uses`: queued here
    /// when only that stream used it, else through an [`free::Allocation`] (which waits for the
    /// other streams, or hands the free to the release thread during a capture). For a drop
    /// (`on_drop`), a resource whose free waits for the stream, or memory used on a stream this
    /// thread cannot name (another thread's per-thread default stream, which only a context-wide
    /// synchronisation waits for), frees on the release thread, once the work of every stream that
    /// used the memory is done: the drop returns at once.
    fn free_where_used(&mut self, resource: Holder, uses: Vec<Site>, on_drop: bool) -> Result<()> {
        if on_drop && free::frees_later(&resource, &self.dealloc, &uses) {
            return self.allocation(Some(resource), uses).release_dropped();
        }
        let resource = if uses.is_empty() {
            match self.try_free_here(resource)? {
                None => return Ok(()),
                Some(resource) => resource,
            }
        } else {
            resource
        };
        self.allocation(Some(resource), uses).release()
    }

    /// (What the device may do with the memory, `check_writable` and `check_device_reads`, is
    /// checked in `memory/copy/reach.rs`.)
    pub(crate) fn check_fits(&self, bytes: usize, what: &str) -> Result<()> {
        if bytes > self.size {
            return Err(CudaError::InvalidArgument(format!(
                "{what}: {bytes} bytes do not fit in a buffer of {}",
                self.size
            )));
        }
        Ok(())
    }

    /// Waits until no stream has work queued on the buffer (before memory moves: see
    /// [`super::VirtualMemoryResource::grow`]); afterwards only the deallocation stream is
    /// remembered.
    pub(crate) fn synchronize_uses(&mut self) -> Result<()> {
        for site in self.uses_mut().map_or(&[][..], |u| &u[..]) {
            site.synchronize()?;
        }
        self.dealloc.synchronize()?;
        if let Some(uses) = self.uses_mut() {
            uses.clear();
        }
        Ok(())
    }
}

impl Drop for Buffer {
    #[inline]
    fn drop(&mut self) {
        // The common case, in one driver call: pool memory used only on its deallocation stream,
        // a plain stream, and no capture anywhere (none begins until `quiet` goes).
        let frees_async = self.resource.as_ref().is_some_and(Holder::frees_async);
        if frees_async && self.used_only_where_freed() && self.dealloc.is_plain() {
            let stream = self.dealloc.stream();
            if let Some(quiet) = stream.quietly() {
                // SAFETY: ptr came from a pool with `cuMemFreeAsync` as its free (see
                // `Holder::frees_async`) and is freed once (on success the buffer is gone: its
                // fields drop next, its resource with them). Work on it was queued on this
                // stream, which is not capturing (quiet), or on streams that were synchronised
                // (`set_deallocation_stream` from another thread's per-thread stream): other
                // streams and graphs would be in `track`, which is empty. So the free follows
                // all that work; the resource keeps the pool alive until it is queued.
                let status = unsafe { driver::cuMemFreeAsync(self.ptr, stream.handle()) };
                if status == driver::CUresult::CUDA_SUCCESS {
                    return;
                }
                drop(quiet);
                return self.fast_free_failed(status);
            }
        }
        self.drop_in_general();
    }
}

impl Buffer {
    /// After the fast free in [`Drop`] failed: the general path when a capture was in the way
    /// (one this crate did not begin: it hands the free to the release thread), else the error
    /// is recorded and the memory kept with its resource (it may still be in use), as the
    /// general path does with an error it does not retry.
    #[cold]
    #[inline(never)]
    fn fast_free_failed(&mut self, status: driver::CUresult) {
        let Err(e) = status.check("cuMemFreeAsync") else {
            return;
        };
        if capture_refusal(&e) {
            return self.drop_in_general();
        }
        std::mem::forget(self.resource.take());
        record_drop_error(e);
    }

    /// [`Drop`] of graph memory, of memory other streams or graphs used, on a host function's
    /// thread or during a capture somewhere.
    #[cold]
    #[inline(never)]
    fn drop_in_general(&mut self) {
        if crate::reaper::in_callback() && (self.resource.is_some() || self.graph.is_some()) {
            // On a driver thread (a host function let go of it): freed on the release thread.
            let later = Buffer {
                ptr: self.ptr,
                size: self.size,
                resource: self.resource.take(),
                dealloc: self.dealloc.clone(),
                track: std::mem::take(&mut self.track),
                graph: self.graph.take(),
                foreign: self.foreign.take(),
            };
            crate::reaper::drop_later(Box::new(later));
            return;
        }
        if let Err(e) = self.release(true) {
            record_drop_error(e);
        }
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buffer({:#x}, {} bytes)", self.ptr, self.size)
    }
}

/// By address and size, as `cuda.core` compares and hashes buffers.
impl PartialEq for Buffer {
    fn eq(&self, other: &Buffer) -> bool {
        (self.ptr, self.size) == (other.ptr, other.size)
    }
}

impl Eq for Buffer {}

impl std::hash::Hash for Buffer {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.ptr, self.size).hash(state);
    }
}

// Every field is `Send + Sync` (device addresses are process-wide; the resource, sites, locks
// and lazy records are thread-safe; the graph handle is only compared): a buffer is both by
// construction, and a field that is not fails this assertion instead of being vouched for.
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Buffer>();
};
