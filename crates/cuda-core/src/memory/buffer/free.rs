//! How a buffer's memory is freed: an [`Allocation`] names the resource, the stream to free on
//! and the streams to wait for; a [`SharedAllocation`] is the memory as graphs hold it; frees
//! that must wait for a capture to end go to the release thread; graph memory is freed by the
//! capture that allocated it.

use super::{Buffer, Holder};
use crate::error::{record_drop_error, Check};
use crate::stream::capture::{capture_info, refused_for_now, Capture};
use crate::stream::graph_core::GraphAllocState;
use crate::stream::{Fence, Site, Stream};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What frees a buffer's memory: the resource, where to free it and what to wait for first.
pub(crate) struct Allocation {
    ptr: driver::CUdeviceptr,
    size: usize,
    resource: Option<Holder>,
    pub(super) dealloc: Site,
    pub(super) uses: Vec<Site>,
    /// Set once the work queued on `uses` and `dealloc` before the release is known to be done
    /// (the release thread waited for fences recorded then): streams it cannot name (another
    /// thread's per-thread default stream) need no context-wide synchronisation any more.
    waited: bool,
}

/// The memory of a [`Buffer`] that graphs refer to: freed (stream-ordered, on the buffer's
/// deallocation stream at the time, after every stream that used it) when the buffer and every
/// graph holding it are gone.
pub(crate) struct SharedAllocation {
    pub(super) allocation: Mutex<Option<Allocation>>,
}

/// Graph memory: the graph whose capture recorded the allocation, and whether it was freed.
pub(super) struct GraphAllocation {
    pub(super) state: Arc<GraphAllocState>,
}

impl Allocation {
    /// Frees the memory, or hands the free to the release thread when it must wait for a
    /// capture to end.
    pub(super) fn release(self) -> Result<()> {
        let mut this = self;
        match this.try_free() {
            Ok(true) => Ok(()),
            Ok(false) => {
                crate::reaper::retry(Box::new(PendingFree(Some(this))));
                Ok(())
            }
            // Also when a green context the free needs current is current on another thread: tried
            // again until it is not.
            Err(e) if refused_for_now(&e) => {
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

    /// Frees the memory on the release thread once the work queued so far on every stream that
    /// used it (the deallocation stream included) is done: for a drop, when the resource's free
    /// waits for the stream (see [`Holder::waits_to_free`]), which a drop must not.
    fn release_later(self) {
        /// The release, when the values handed over are dropped (on the release thread).
        struct Deferred(Option<Allocation>);
        impl Drop for Deferred {
            fn drop(&mut self) {
                // Dropped once the fences of every site passed (see `release_after`).
                let released = self.0.take().map(|mut a| {
                    a.waited = true;
                    a.release()
                });
                if let Some(Err(e)) = released {
                    record_drop_error(e);
                }
            }
        }
        let mut sites = self.uses.clone();
        sites.push(self.dealloc.clone());
        crate::stream::release_after(vec![Box::new(Deferred(Some(self)))], sites);
    }

    /// [`release`](Self::release) for a drop, which must not wait for the GPU: when the
    /// resource's free waits for the stream (see [`Holder::waits_to_free`]), it is done on the
    /// release thread ([`release_later`](Self::release_later)), always: even with its streams
    /// idle, such a free (`cuMemFreeHost`, `cuMemFree`) may wait for the work of every stream of
    /// the context, other threads' included. So is the free of memory used on a stream this
    /// thread cannot name (another thread's per-thread default stream): only a context-wide
    /// synchronisation waits for that, which the release thread makes.
    pub(super) fn release_dropped(self) -> Result<()> {
        if self
            .resource
            .as_ref()
            .is_some_and(|r| frees_later(r, &self.dealloc, &self.uses))
        {
            self.release_later();
            return Ok(());
        }
        self.release()
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
                Fence::Unreachable => {
                    if !self.waited && !site.try_synchronize()? {
                        return Ok(false); // after the captures in its context
                    }
                }
            }
        }
        // Another thread's per-thread default stream cannot be named here: wait for its context
        // (unless its work before the release is known done), then free on that context's
        // legacy default stream.
        let fallback;
        let site = if self.dealloc.reachable() {
            &self.dealloc
        } else {
            if !self.waited && !self.dealloc.try_synchronize()? {
                return Ok(false); // after the captures in its context
            }
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

/// Whether a dropped buffer's free goes to the release thread (see
/// [`Allocation::release_dropped`]): `resource`'s free waits for the stream, or a stream this
/// thread cannot name used the memory.
pub(super) fn frees_later(resource: &Holder, dealloc: &Site, uses: &[Site]) -> bool {
    resource.waits_to_free() || !dealloc.reachable() || uses.iter().any(|u| !u.reachable())
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
            Err(e) if refused_for_now(&e) => false,
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
            // The last graph or buffer let go of the memory: a drop, which must not wait.
            if let Err(e) = a.release_dropped() {
                record_drop_error(e);
            }
        }
    }
}

impl Buffer {
    /// What frees the memory through `resource`, on the deallocation stream after `uses`.
    pub(super) fn allocation(&self, resource: Option<Holder>, uses: Vec<Site>) -> Allocation {
        Allocation {
            ptr: self.ptr,
            size: self.size,
            resource,
            dealloc: self.dealloc.clone(),
            uses,
            waited: false,
        }
    }
}

/// Recognises graph memory: after `resource.allocate` on a capturing stream, the capture's new
/// dependency is an allocation node whose address is `ptr` when the allocation was recorded.
pub(super) fn graph_allocation(
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
        graph: Arc::downgrade(capture.graph),
        freed: AtomicBool::new(false),
    });
    capture.reg.graph_allocations.push(state.clone());
    capture.reg.has_graph_memory = true;
    Ok(Some(GraphAllocation { state }))
}

/// Frees graph memory in the capture that allocated it (a free node), if it still records on
/// `stream` and the memory is live; otherwise the capture freed it when it ended (or it was
/// discarded with its graph).
pub(super) fn free_graph_memory(g: &GraphAllocation, stream: &Stream) -> Result<()> {
    stream.enqueue(|capture| {
        let Some(capture) = capture else {
            return Ok(());
        };
        if !g.state.is_of(capture.graph) || g.state.freed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // SAFETY: the stream is capturing into the graph that allocated ptr (its lock is held),
        // and this is the allocation's only free (`freed`).
        unsafe { crate::memory::free_async(g.state.ptr, stream) }
    })
}

impl Buffer {
    /// Gives the memory up to a new owner that frees it with `cuMemFreeAsync` (see
    /// `MemoryResource::freed_by_mem_free_async`): `wait` is handed a fence after the work so far
    /// of every stream that used the buffer (it must order the new owner's stream after each
    /// before returning), then the buffer lets go of the memory without freeing it and its
    /// address and size are returned. On a refusal the buffer comes back untouched: graph memory,
    /// memory a graph holds, memory of a resource that does not free so (or of another device
    /// than `device`), and buffers a stream being captured has used.
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    #[allow(clippy::result_large_err)]
    pub(crate) fn surrender(
        mut self,
        device: usize,
        wait: &mut dyn FnMut(driver::CUevent) -> Result<()>,
    ) -> std::result::Result<(driver::CUdeviceptr, usize), (CudaError, Buffer)> {
        let refuse = |buffer: Buffer, why: String| Err((CudaError::InvalidArgument(why), buffer));
        if self.graph.is_some() {
            return refuse(
                self,
                "graph memory exists only within the capture that allocated it".into(),
            );
        }
        if self.is_used_by_graph() {
            return refuse(
                self,
                "a graph (it recorded work on it) or an exported DLPack tensor holds this buffer's memory: it frees the memory when the last of them goes".into(),
            );
        }
        let owner = self
            .resource
            .as_ref()
            .and_then(|r| r.freed_by_mem_free_async(crate::memory::sealed::Token));
        match owner {
            Some(d) if d.device_id() == device => {}
            Some(d) => {
                return refuse(
                    self,
                    format!("the buffer is memory of device {}, not of device {device}", d.device_id()),
                )
            }
            None => {
                return refuse(
                    self,
                    "only memory of a DeviceMemoryResource this process allocated (not imported, not foreign) can be handed over: another owner frees it with cuMemFreeAsync".into(),
                )
            }
        }
        if let Err(e) = self.order_after_uses(wait) {
            return Err((e, self));
        }
        // Nothing left to free: Drop finds no resource.
        self.resource = None;
        Ok((self.ptr, self.size))
    }

    /// Hands `wait` a fence after the work so far of every stream that used the buffer (its
    /// deallocation stream included), for a new user of the memory to wait for.
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    pub(crate) fn order_after_uses(&mut self, wait: &mut dyn FnMut(driver::CUevent) -> Result<()>) -> Result<()> {
        let sites: Vec<Site> = {
            let dealloc = self.dealloc.clone();
            let uses: &[Site] = self.uses_mut().map_or(&[][..], |u| &u[..]);
            uses.iter().cloned().chain(std::iter::once(dealloc)).collect()
        };
        for site in &sites {
            match site.fence()? {
                Fence::Event(e) => wait(e.handle())?,
                Fence::Capturing => {
                    return Err(CudaError::InvalidState(
                        "a stream that used the buffer is being captured into a graph: hand the buffer over once the capture has ended".into(),
                    ))
                }
                Fence::Unreachable => {
                    if !site.try_synchronize()? {
                        return Err(CudaError::InvalidState(
                            "another thread's per-thread default stream used the buffer and its context has a capture running: hand the buffer over once the capture has ended".into(),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}
