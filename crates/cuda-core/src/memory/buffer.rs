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
//! launch of the graph: the graph holds the memory (a [`SharedAllocation`] handed to it as a CUDA
//! user object), and the memory is freed when the buffer and every graph holding it are gone.
//! Memory a graph allocates (graph memory: an allocation node recorded by a capture) exists only
//! while the graph runs: such a buffer is usable only on its stream while it captures into that
//! graph, and the capture frees it (a free node) when the buffer is dropped or the capture ends.
//!
//! **Frees that must wait.** A free cannot be queued on a stream being captured (it would be
//! recorded into the graph instead), nor ordered after one; such frees are handed to the release
//! thread ([`crate::reaper`]) and done when the capture is over.

use super::MemoryResource;
use crate::device::FenceEvent;
use crate::error::{record_drop_error, Check};
use crate::graph::attach::{before_capture, capture_info, Capture, GraphAllocState};
use crate::stream::{Fence, Site, Stream};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
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
    resource: Option<Arc<dyn MemoryResource>>,
    /// Where the buffer is freed; its first uses elsewhere are ordered after it.
    dealloc: Site,
    /// Other streams that queued work on the buffer: its free waits for them.
    uses: Mutex<Vec<Site>>,
    /// Set once a graph records work on the buffer: from then on the memory is freed when the
    /// last of the buffer and those graphs goes.
    shared: OnceLock<Arc<SharedAllocation>>,
    /// For graph memory: the capture that allocated it.
    graph: Option<GraphAllocation>,
    /// Set the first time a graph uses the buffer: a fence after its allocation, which launches
    /// of such graphs wait for (`None`: the allocation was known to be done).
    ready: OnceLock<Option<Arc<FenceEvent>>>,
}

/// What frees a buffer's memory: the resource, where to free it and what to wait for first.
pub(crate) struct Allocation {
    ptr: driver::CUdeviceptr,
    size: usize,
    resource: Option<Arc<dyn MemoryResource>>,
    dealloc: Site,
    uses: Vec<Site>,
}

/// The memory of a [`Buffer`] that graphs refer to: freed (stream-ordered, on the buffer's
/// deallocation stream at the time, after every stream that used it) when the buffer and every
/// graph holding it are gone.
pub(crate) struct SharedAllocation {
    allocation: Mutex<Option<Allocation>>,
}

/// Graph memory: the graph whose capture recorded the allocation, and whether it was freed.
struct GraphAllocation {
    graph: driver::CUgraph,
    state: Arc<GraphAllocState>,
}

// SAFETY: the CUgraph is only compared, never used to call the driver.
unsafe impl Send for GraphAllocation {}
// SAFETY: as above.
unsafe impl Sync for GraphAllocation {}

fn capture_refusal(e: &CudaError) -> bool {
    use driver::CUresult as R;
    matches!(
        e.driver_status(),
        Some(
            R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
                | R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                | R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        )
    ) || matches!(e, CudaError::InvalidArgument(m) if m.contains("capture was invalidated"))
}

impl Allocation {
    /// Frees the memory, or hands the free to the release thread when it must wait for a
    /// capture to end.
    fn release(self) -> Result<()> {
        let mut this = self;
        match this.try_free() {
            Ok(true) => Ok(()),
            Ok(false) => {
                crate::reaper::retry(Box::new(PendingFree(Some(this))));
                Ok(())
            }
            Err(e) if capture_refusal(&e) => {
                crate::reaper::retry(Box::new(PendingFree(Some(this))));
                Ok(())
            }
            Err(e) => {
                // The memory may still be in use: keep it rather than free it.
                std::mem::forget(this);
                Err(e)
            }
        }
    }

    /// One attempt at the free: `Ok(false)` when a stream involved is being captured.
    fn try_free(&mut self) -> Result<bool> {
        let Some(resource) = self.resource.clone() else {
            return Ok(true);
        };
        // Every stream that used the memory: a fence after its work so far.
        let mut fences = Vec::with_capacity(self.uses.len());
        for site in &self.uses {
            match site.fence()? {
                Fence::Event(e) => fences.push(e),
                Fence::Capturing => return Ok(false),
                Fence::Unreachable => site.synchronize()?,
            }
        }
        // Another thread's per-thread default stream cannot be named here: wait for its context,
        // then free on that context's legacy default stream.
        let fallback;
        let site = if self.dealloc.reachable() {
            &self.dealloc
        } else {
            self.dealloc.synchronize()?;
            fallback = Site::of_legacy(self.dealloc.context()?);
            &fallback
        };
        let freed = site.enqueue(|capture| {
            if capture.is_some() {
                return Ok(false);
            }
            for fence in &fences {
                // SAFETY: both handles are live; the stream is not capturing (inside its operation).
                unsafe { driver::cuStreamWaitEvent(site.stream().handle(), fence.handle(), 0) }
                    .check("cuStreamWaitEvent")?;
            }
            // SAFETY: ptr came from this resource with this size and is freed once (the resource
            // is taken below); the free is ordered after the work of every stream that used the
            // memory (the waits above), and no graph holds it any more.
            unsafe { resource.deallocate(self.ptr, self.size, site.stream()) }?;
            Ok(true)
        })?;
        if freed {
            self.resource = None;
        }
        Ok(freed)
    }
}

/// A free waiting on the release thread for a capture to end.
struct PendingFree(Option<Allocation>);

impl crate::reaper::Retry for PendingFree {
    fn attempt(&mut self) -> bool {
        let Some(allocation) = self.0.as_mut() else {
            return true;
        };
        match allocation.try_free() {
            Ok(done) => done,
            Err(e) if capture_refusal(&e) => false,
            Err(e) => {
                record_drop_error(e);
                // Keep the memory: it may still be in use.
                std::mem::forget(self.0.take());
                true
            }
        }
    }
}

impl Drop for SharedAllocation {
    fn drop(&mut self) {
        let allocation = self.allocation.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if crate::reaper::in_callback() {
            if let Some(a) = allocation {
                // On a driver thread: freed on the release thread.
                crate::reaper::drop_later(Box::new(SharedAllocation {
                    allocation: Mutex::new(Some(a)),
                }));
            }
            return;
        }
        if let Some(a) = allocation {
            if let Err(e) = a.release() {
                record_drop_error(e);
            }
        }
    }
}

impl Buffer {
    /// `size` bytes from `resource`, ordered on `stream`, which also becomes the deallocation
    /// stream. On a stream being captured, a resource that records a stream-ordered allocation
    /// gives graph memory (see [`Buffer`]).
    #[inline]
    pub fn allocate(resource: Arc<dyn MemoryResource>, size: usize, stream: &Stream) -> Result<Buffer> {
        let dealloc = Site::of(stream)?;
        stream.enqueue(move |capture| {
            let ptr = resource.allocate(size, stream)?;
            let graph = match capture {
                Some(capture) => graph_allocation(capture, stream, ptr)?,
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
        resource: Option<Arc<dyn MemoryResource>>,
        dealloc: Site,
        graph: Option<GraphAllocation>,
    ) -> Buffer {
        Buffer {
            ptr,
            size,
            resource,
            dealloc,
            uses: Mutex::new(Vec::new()),
            shared: OnceLock::new(),
            graph,
            ready: OnceLock::new(),
        }
    }

    /// A buffer over `ptr` that `resource` frees (or, without one, nobody does).
    #[inline]
    pub(crate) fn from_parts(
        ptr: driver::CUdeviceptr,
        size: usize,
        resource: Option<Arc<dyn MemoryResource>>,
        stream: &Stream,
    ) -> Result<Buffer> {
        Ok(Buffer::new(ptr, size, resource, Site::of(stream)?, None))
    }

    /// Wraps memory allocated elsewhere; it is never freed here.
    ///
    /// # Safety
    /// `ptr` must point to `size` bytes of memory usable by the device (or host, as it is used)
    /// for as long as the buffer, and every graph that records work on it, live.
    pub unsafe fn from_handle(ptr: driver::CUdeviceptr, size: usize, stream: &Stream) -> Result<Buffer> {
        Buffer::from_parts(ptr, size, None, stream)
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

    /// The resource it came from (`None` for foreign memory).
    pub fn memory_resource(&self) -> Option<&Arc<dyn MemoryResource>> {
        self.resource.as_ref()
    }

    /// Whether kernels can read and write the memory.
    pub fn is_device_accessible(&self) -> bool {
        self.resource.as_ref().is_none_or(|r| r.is_device_accessible())
    }

    /// Whether the host can read and write the memory directly.
    pub fn is_host_accessible(&self) -> bool {
        self.resource.as_ref().is_some_and(|r| r.is_host_accessible())
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
            return Err(CudaError::InvalidArgument(
                "graph memory is freed by the capture that allocated it, on its stream: its deallocation stream cannot change".into(),
            ));
        }
        match self.dealloc.fence()? {
            Fence::Event(e) => {
                if !site.wait(&e)? {
                    return Err(CudaError::InvalidArgument(
                        "set_deallocation_stream: the stream is being captured into a graph; free on a stream that is not".into(),
                    ));
                }
            }
            Fence::Capturing => {
                return Err(CudaError::InvalidArgument(
                    "set_deallocation_stream: the current deallocation stream is being captured into a graph; change it after the capture ends".into(),
                ))
            }
            Fence::Unreachable => self.dealloc.synchronize()?,
        }
        let uses = self.uses.get_mut().unwrap_or_else(|p| p.into_inner());
        uses.retain(|u| !u.same(&site));
        let old = std::mem::replace(&mut self.dealloc, site);
        // The free waits for the old stream too (unless it is another thread's per-thread
        // stream, synchronised above: this thread cannot name it).
        if old.reachable() {
            uses.push(old);
        }
        Ok(())
    }

    /// The memory as graphs hold it: from the first call on, the buffer no longer frees it
    /// alone; the last of the buffer and the graphs holding the returned value does.
    pub(crate) fn share(&self) -> Arc<SharedAllocation> {
        self.shared
            .get_or_init(|| {
                Arc::new(SharedAllocation {
                    allocation: Mutex::new(Some(self.allocation(self.resource.clone(), Vec::new()))),
                })
            })
            .clone()
    }

    /// Whether a graph holds the memory (see [`crate::graph`]): it then cannot move.
    pub fn is_used_by_graph(&self) -> bool {
        self.shared.get().is_some()
    }

    /// A fence after the buffer's allocation, for graphs that use the buffer: their launches
    /// wait for it, so their work follows the allocation (on a stream the graph does not order
    /// itself after). Recorded once, on the deallocation stream, or taken from the fence
    /// recorded just before that stream began the capture it is in. Call it holding no stream
    /// or graph lock.
    pub(crate) fn graph_fence(&self) -> Result<Option<Arc<FenceEvent>>> {
        if let Some(f) = self.ready.get() {
            return Ok(f.clone());
        }
        let fence = match self.dealloc.fence()? {
            Fence::Event(e) => Some(Arc::new(e)),
            Fence::Capturing => match before_capture(self.dealloc.stream().handle()) {
                Some(f) => Some(f),
                None => {
                    return Err(CudaError::InvalidArgument(
                        "the buffer's deallocation stream joined a capture: use the buffer in a graph after that capture ends".into(),
                    ))
                }
            },
            Fence::Unreachable => {
                self.dealloc.synchronize()?;
                None
            }
        };
        Ok(self.ready.get_or_init(|| fence).clone())
    }

    /// Whether work the calling thread queues on `stream` is already ordered for this buffer (it
    /// is the deallocation stream, or one the buffer remembers).
    #[inline]
    fn knows(&self, stream: &Stream) -> Result<bool> {
        if self.dealloc.is_plainly(stream) {
            return Ok(true);
        }
        self.knows_slow(stream)
    }

    #[cold]
    fn knows_slow(&self, stream: &Stream) -> Result<bool> {
        let site = Site::of(stream)?;
        if site.same(&self.dealloc) {
            return Ok(true);
        }
        Ok(self
            .uses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|u| u.same(&site)))
    }

    /// Makes `stream` known: ordered after the buffer's deallocation stream (and so after the
    /// allocation), and remembered so that the free waits for it. Nothing is done while
    /// `stream` is being captured (captured work is held by the graph instead).
    fn learn(&self, stream: &Stream) -> Result<()> {
        if self.graph.is_some() || self.knows(stream)? {
            return Ok(());
        }
        let site = Site::of(stream)?;
        match self.dealloc.fence()? {
            Fence::Event(e) => {
                if !site.wait(&e)? {
                    return Ok(()); // capturing: the operation will be recorded and held
                }
            }
            Fence::Capturing => {
                return Err(CudaError::InvalidArgument(
                    "the buffer's deallocation stream is being captured into a graph: until the capture ends, use the buffer on that stream only".into(),
                ))
            }
            Fence::Unreachable => self.dealloc.synchronize()?,
        }
        let mut uses = self.uses.lock().unwrap_or_else(|p| p.into_inner());
        if !uses.iter().any(|u| u.same(&site)) {
            uses.push(site);
        }
        Ok(())
    }

    /// Hands the memory to the graph `capture` records into, for an operation on `stream`;
    /// graph memory is checked to belong to this capture instead. `Ok(false)` when the buffer's
    /// graph fence is not recorded yet (it must be, outside the locks: see `enqueue_using`).
    fn hold_in(&self, capture: &mut Capture<'_>, stream: &Stream) -> Result<bool> {
        match &self.graph {
            Some(g) => {
                if g.state.freed.load(Ordering::Acquire) {
                    return Err(CudaError::InvalidArgument(
                        "the graph memory was freed by its capture".into(),
                    ));
                }
                if g.graph != capture.handle() || !self.dealloc.is_plainly(stream) {
                    return Err(CudaError::InvalidArgument(
                        "graph memory is usable only on the stream whose capture allocated it, while that capture records"
                            .into(),
                    ));
                }
                Ok(true)
            }
            None => {
                let Some(ready) = self.ready.get() else {
                    return Ok(false);
                };
                if let Some(f) = ready {
                    capture.reg.note_ready(f);
                }
                capture.attach(self.share())?;
                Ok(true)
            }
        }
    }

    /// Frees the buffer now (stream-ordered on `stream`, or its deallocation stream, after every
    /// stream that used it) and returns what the driver said.
    pub fn close(mut self, stream: Option<&Stream>) -> Result<()> {
        if let Some(s) = stream {
            self.set_deallocation_stream(s)?;
        }
        // Drop then finds nothing left to free.
        self.release()
    }

    #[inline]
    fn release(&mut self) -> Result<()> {
        if let Some(g) = &self.graph {
            self.resource = None;
            return free_graph_memory(g, self.dealloc.stream());
        }
        let uses = std::mem::take(self.uses.get_mut().unwrap_or_else(|p| p.into_inner()));
        if let Some(shared) = self.shared.get() {
            // Graphs hold the memory: the shared allocation frees it, after this buffer's uses,
            // when the last of them goes.
            let mut slot = shared.allocation.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(a) = slot.as_mut() {
                a.dealloc = self.dealloc.clone();
                a.uses = uses;
            }
            self.resource = None;
            return Ok(());
        }
        let Some(resource) = self.resource.take() else {
            return Ok(());
        };
        if uses.is_empty() {
            // The common case: freed where it was used.
            let stream = self.dealloc.stream();
            if self.dealloc.is_plainly(stream) {
                let ptr = self.ptr;
                let size = self.size;
                // (A plain stream names its context: no context needs to be made current.)
                let done = stream.enqueue(|capture| {
                    if capture.is_some() {
                        return Ok(false);
                    }
                    // SAFETY: ptr came from this resource with this size and is freed once (the
                    // resource was taken); the only stream that used it is this one, not
                    // capturing (inside its operation), so the free follows all that work.
                    unsafe { resource.deallocate(ptr, size, stream) }?;
                    Ok(true)
                });
                match done {
                    Ok(true) => return Ok(()),
                    Err(e) if !capture_refusal(&e) => return Err(e),
                    _ => {} // must wait for a capture: the general path hands it on
                }
            }
        }
        self.allocation(Some(resource), uses).release()
    }

    /// What frees the memory through `resource`, on the deallocation stream after `uses`.
    fn allocation(&self, resource: Option<Arc<dyn MemoryResource>>, uses: Vec<Site>) -> Allocation {
        Allocation {
            ptr: self.ptr,
            size: self.size,
            resource,
            dealloc: self.dealloc.clone(),
            uses,
        }
    }

    pub(crate) fn check_fits(&self, bytes: usize, what: &str) -> Result<()> {
        if bytes > self.size {
            return Err(CudaError::InvalidArgument(format!(
                "{what}: {bytes} bytes do not fit in a buffer of {}",
                self.size
            )));
        }
        Ok(())
    }

    /// A view of `len` bytes at `offset`, borrowing the buffer (it cannot be freed meanwhile).
    pub fn view(&self, offset: usize, len: usize) -> Result<BufferView<'_>> {
        let outside = || {
            CudaError::InvalidArgument(format!(
                "view of {len} bytes at {offset} is outside a buffer of {}",
                self.size
            ))
        };
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(outside());
        }
        let ptr = u64::try_from(offset)
            .ok()
            .and_then(|o| self.ptr.checked_add(o))
            .ok_or_else(outside)?;
        Ok(BufferView {
            ptr,
            len,
            _buffer: std::marker::PhantomData,
        })
    }

    /// Waits until no stream has work queued on the buffer (before memory moves: see
    /// [`super::VirtualMemoryResource::grow`]); afterwards only the deallocation stream is
    /// remembered.
    pub(crate) fn synchronize_uses(&mut self) -> Result<()> {
        for site in self.uses.get_mut().unwrap_or_else(|p| p.into_inner()).iter() {
            site.synchronize()?;
        }
        self.dealloc.synchronize()?;
        self.uses.get_mut().unwrap_or_else(|p| p.into_inner()).clear();
        Ok(())
    }
}

/// Recognises graph memory: after `resource.allocate` on a capturing stream, the capture's new
/// dependency is an allocation node whose address is `ptr` when the allocation was recorded.
fn graph_allocation(
    capture: &mut Capture<'_>,
    stream: &Stream,
    ptr: driver::CUdeviceptr,
) -> Result<Option<GraphAllocation>> {
    let Some(info) = capture_info(stream.handle())? else {
        return Ok(None);
    };
    let [node] = info.dependencies[..] else {
        return Ok(None);
    };
    let mut kind = driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
    // SAFETY: a node of the capture's graph, whose lock is held; out-value is a local.
    unsafe { driver::cuGraphNodeGetType(node, &mut kind) }.check("cuGraphNodeGetType")?;
    if kind != driver::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC {
        return Ok(None);
    }
    // SAFETY: plain data; the driver fills it in.
    let mut params: driver::CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { std::mem::zeroed() };
    // SAFETY: an allocation node of the locked graph; out-value is a local.
    unsafe { driver::cuGraphMemAllocNodeGetParams(node, &mut params) }.check("cuGraphMemAllocNodeGetParams")?;
    if params.dptr != ptr {
        return Ok(None);
    }
    let state = Arc::new(GraphAllocState {
        ptr,
        graph: capture.handle(),
        freed: AtomicBool::new(false),
    });
    capture.reg.graph_allocations.push(state.clone());
    capture.reg.has_graph_memory = true;
    Ok(Some(GraphAllocation {
        graph: capture.handle(),
        state,
    }))
}

/// Frees graph memory in the capture that allocated it (a free node), if it still records on
/// `stream` and the memory is live; otherwise the capture freed it when it ended (or it was
/// discarded with its graph).
fn free_graph_memory(g: &GraphAllocation, stream: &Stream) -> Result<()> {
    stream.enqueue(|capture| {
        let Some(capture) = capture else {
            return Ok(());
        };
        if capture.handle() != g.graph || g.state.freed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // SAFETY: the stream is capturing into the graph that allocated ptr (its lock is held),
        // and this is the allocation's only free (`freed`).
        unsafe { super::free_async(g.state.ptr, stream) }
    })
}

/// Queues `op` on `stream`, which uses `buffers`: each buffer's memory stays alive until the work
/// is done (the stream is remembered by the buffer, or the graph being captured holds the
/// buffer), and graph memory is refused outside its capture. `op` gets the capture, if any.
pub(crate) fn enqueue_using<T>(
    stream: &Stream,
    buffers: &[&Buffer],
    op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>,
) -> Result<T> {
    let mut op = Some(op);
    let mut for_graphs = false;
    loop {
        for b in buffers {
            b.learn(stream)?;
            if for_graphs && b.graph.is_none() {
                b.graph_fence()?;
            }
        }
        let outcome = stream.enqueue(|capture| {
            match capture {
                Some(capture) => {
                    for b in buffers {
                        if !b.hold_in(capture, stream)? {
                            // Recorded into a graph: first the fences graph launches wait for.
                            for_graphs = true;
                            return Ok(None);
                        }
                    }
                    run_once(&mut op, Some(capture)).map(Some)
                }
                None => {
                    for b in buffers {
                        if b.graph.is_some() {
                            return Err(CudaError::InvalidArgument(
                                "graph memory is usable only on the stream whose capture allocated it, while that capture records"
                                    .into(),
                            ));
                        }
                        if !b.knows(stream)? {
                            // A capture ended since `learn` skipped the stream: learn it now.
                            return Ok(None);
                        }
                    }
                    run_once(&mut op, None).map(Some)
                }
            }
        })?;
        if let Some(value) = outcome {
            return Ok(value);
        }
    }
}

fn run_once<T, F: FnOnce(Option<&mut Capture<'_>>) -> Result<T>>(
    op: &mut Option<F>,
    capture: Option<&mut Capture<'_>>,
) -> Result<T> {
    match op.take() {
        Some(f) => f(capture),
        None => Err(CudaError::InvalidArgument(
            "internal: an operation was queued twice".into(),
        )),
    }
}

/// Part of a [`Buffer`], alive no longer than it.
#[derive(Debug, Clone, Copy)]
pub struct BufferView<'a> {
    ptr: driver::CUdeviceptr,
    len: usize,
    _buffer: std::marker::PhantomData<&'a Buffer>,
}

impl BufferView<'_> {
    /// The device address of the view's first byte.
    pub fn handle(&self) -> driver::CUdeviceptr {
        self.ptr
    }

    /// The view's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if crate::reaper::in_callback() && (self.resource.is_some() || self.graph.is_some()) {
            // On a driver thread (a host function let go of it): freed on the release thread.
            let later = Buffer {
                ptr: self.ptr,
                size: self.size,
                resource: self.resource.take(),
                dealloc: self.dealloc.clone(),
                uses: Mutex::new(std::mem::take(self.uses.get_mut().unwrap_or_else(|p| p.into_inner()))),
                shared: std::mem::take(&mut self.shared),
                graph: self.graph.take(),
                ready: std::mem::take(&mut self.ready),
            };
            crate::reaper::drop_later(Box::new(later));
            return;
        }
        if let Err(e) = self.release() {
            record_drop_error(e);
        }
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buffer({:#x}, {} bytes)", self.ptr, self.size)
    }
}

// SAFETY: device addresses are process-wide; the resource, sites and locks are Send + Sync (the
// graph handle is only compared).
unsafe impl Send for Buffer {}
// SAFETY: shared access reads the address and size, locks `uses`, or queues driver work.
unsafe impl Sync for Buffer {}
