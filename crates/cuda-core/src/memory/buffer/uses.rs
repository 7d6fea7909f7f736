//! Which streams and graphs use a buffer: a stream other than the deallocation stream is ordered
//! after the allocation the first time it uses the buffer and remembered, so the free waits for
//! it; a graph recording work on the buffer is handed the memory ([`SharedAllocation`]) and its
//! launches wait for the allocation. Every operation on buffers goes through [`enqueue_using`].

use super::free::SharedAllocation;
use super::Buffer;
use crate::device::FenceEvent;
use crate::stream::capture::{before_capture, Capture};
use crate::stream::{Fence, Site, Stream};
use crate::{CudaError, Result};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

impl Buffer {
    /// The memory as graphs hold it: from the first call on, the buffer no longer frees it
    /// alone; the last of the buffer and the graphs holding the returned value does.
    pub(crate) fn share(&self) -> Arc<SharedAllocation> {
        self.tracking()
            .shared
            .get_or_init(|| {
                Arc::new(SharedAllocation {
                    allocation: Mutex::new(Some(self.allocation(self.resource.clone(), Vec::new()))),
                })
            })
            .clone()
    }

    /// A fence after the buffer's allocation, for graphs that use the buffer: their launches
    /// wait for it, so their work follows the allocation (on a stream the graph does not order
    /// itself after). Recorded once, on the deallocation stream, or taken from the fence
    /// recorded just before that stream began the capture it is in. Call it holding no stream
    /// or graph lock.
    pub(crate) fn graph_fence(&self) -> Result<Option<Arc<FenceEvent>>> {
        if let Some(f) = self.tracked().and_then(|t| t.ready.get()) {
            return Ok(f.clone());
        }
        let fence = match self.dealloc.fence()? {
            Fence::Event(e) => Some(Arc::new(e)),
            Fence::Capturing => match before_capture(&self.dealloc) {
                Some(f) => Some(f),
                None => {
                    return Err(CudaError::InvalidState(
                        "the buffer's deallocation stream joined a capture: use the buffer in a graph after that capture ends".into(),
                    ))
                }
            },
            Fence::Unreachable => {
                self.dealloc.synchronize()?;
                None
            }
        };
        Ok(self.tracking().ready.get_or_init(|| fence).clone())
    }

    /// Tells the buffer that `stream` is already ordered after its allocation, so that its first
    /// use there does not wait for the deallocation stream (which would wait for everything
    /// queued there so far, not only the allocation); the stream is remembered, and the free
    /// still waits for it. For a buffer handed to a stream that was already made to wait for an
    /// event recorded after the allocation, or allocated before the deallocation stream was
    /// synchronised.
    ///
    /// Graph memory is refused (it is usable on its capture's stream only).
    ///
    /// # Safety
    /// Work queued on `stream` (as the calling thread names it) after this call runs after the
    /// buffer's allocation is complete: otherwise it may touch memory that earlier work of
    /// another buffer still uses.
    pub unsafe fn assume_ordered_on(&self, stream: &Stream) -> Result<()> {
        if self.graph.is_some() {
            return Err(CudaError::InvalidState(
                "assume_ordered_on: graph memory is usable only on the stream whose capture allocated it".into(),
            ));
        }
        if self.knows(stream)? {
            return Ok(());
        }
        self.remember(Site::of(stream)?);
        Ok(())
    }

    /// Notes that work on `site` is ordered after the allocation (once per site).
    fn remember(&self, site: Site) {
        let mut uses = self.tracking().uses.lock().unwrap_or_else(|p| p.into_inner());
        if !uses.iter().any(|u| u.same(&site)) {
            uses.push(site);
        }
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
        Ok(self.tracked().is_some_and(|t| {
            t.uses
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .any(|u| u.same(&site))
        }))
    }

    /// Makes `stream` known: ordered after the buffer's deallocation stream (and so after the
    /// allocation), and remembered so that the free waits for it. Nothing is done while
    /// `stream` is being captured (captured work is held by the graph instead). `true` when the
    /// stream is known now (it stays known: streams are only ever added while the buffer is
    /// shared), so work queued outside a capture needs no further check; `false` for graph
    /// memory and for a stream being captured.
    fn learn(&self, stream: &Stream) -> Result<bool> {
        if self.graph.is_some() {
            return Ok(false);
        }
        if self.knows(stream)? {
            return Ok(true);
        }
        let site = Site::of(stream)?;
        match self.dealloc.fence()? {
            Fence::Event(e) => {
                if !site.wait(&e)? {
                    return Ok(false); // capturing: the operation will be recorded and held
                }
            }
            Fence::Capturing => {
                return Err(CudaError::InvalidState(
                    "the buffer's deallocation stream is being captured into a graph: until the capture ends, use the buffer on that stream only".into(),
                ))
            }
            Fence::Unreachable => self.dealloc.synchronize()?,
        }
        self.remember(site);
        Ok(true)
    }

    /// Hands the memory to the graph `capture` records into, for an operation on `stream`;
    /// graph memory is checked to belong to this capture instead. `Ok(false)` when the buffer's
    /// graph fence is not recorded yet (it must be, outside the locks: see `enqueue_using`).
    fn hold_in(&self, capture: &mut Capture<'_>, stream: &Stream) -> Result<bool> {
        match &self.graph {
            Some(g) => {
                if g.state.freed.load(Ordering::Acquire) {
                    return Err(CudaError::InvalidState(
                        "the graph memory was freed by its capture".into(),
                    ));
                }
                if !g.state.is_of(capture.graph) || !self.dealloc.is_plainly(stream) {
                    return Err(CudaError::InvalidState(
                        "graph memory is usable only on the stream whose capture allocated it, while that capture records"
                            .into(),
                    ));
                }
                Ok(true)
            }
            None => {
                let Some(ready) = self.tracked().and_then(|t| t.ready.get()) else {
                    return Ok(false);
                };
                if let Some(f) = ready {
                    capture.reg.note_ready(f);
                }
                capture.hold_shared(self.share());
                Ok(true)
            }
        }
    }
}

/// Queues `op` on `stream`, which uses `buffers`: each buffer's memory stays alive until the work
/// is done (the stream is remembered by the buffer, or the graph being captured holds the
/// buffer), and graph memory is refused outside its capture. `op` gets the capture, if any.
/// A buffer, or a slot that may hold one (kernel arguments that are plain values hold none).
pub(crate) trait BufferRef {
    fn get(&self) -> Option<&Buffer>;
}

impl BufferRef for &Buffer {
    #[inline(always)]
    fn get(&self) -> Option<&Buffer> {
        Some(self)
    }
}

impl BufferRef for Option<&Buffer> {
    #[inline(always)]
    fn get(&self) -> Option<&Buffer> {
        *self
    }
}

pub(crate) fn enqueue_using<T, B: BufferRef>(
    stream: &Stream,
    buffers: &[B],
    op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>,
) -> Result<T> {
    let mut op = Some(op);
    let mut for_graphs = false;
    loop {
        // Whether every buffer knows the stream (then uncaptured work needs no second look).
        let mut known = true;
        for b in buffers.iter().filter_map(BufferRef::get) {
            known &= b.learn(stream)?;
            if for_graphs && b.graph.is_none() {
                b.graph_fence()?;
            }
        }
        let outcome = stream.enqueue(|capture| {
            match capture {
                Some(capture) => {
                    for b in buffers.iter().filter_map(BufferRef::get) {
                        if !b.hold_in(capture, stream)? {
                            // Recorded into a graph: first the fences graph launches wait for.
                            for_graphs = true;
                            return Ok(None);
                        }
                    }
                    run_once(&mut op, Some(capture)).map(Some)
                }
                None => {
                    if !known {
                        for b in buffers.iter().filter_map(BufferRef::get) {
                            if b.graph.is_some() {
                                return Err(CudaError::InvalidState(
                                    "graph memory is usable only on the stream whose capture allocated it, while that capture records"
                                        .into(),
                                ));
                            }
                            if !b.knows(stream)? {
                                // A capture ended since `learn` skipped the stream: learn it now.
                                return Ok(None);
                            }
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
        None => Err(CudaError::InvalidState(
            "internal: an operation was queued twice".into(),
        )),
    }
}
