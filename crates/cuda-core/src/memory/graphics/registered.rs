//! [`Registered`]: a registered `CUgraphicsResource`, the thread that may map and unmap it, and
//! unmaps waiting for that thread.
//!
//! The driver maps and unmaps an OpenGL resource only on a thread where an OpenGL context of its
//! share group is current (elsewhere it answers `CUDA_ERROR_INVALID_GRAPHICS_CONTEXT`: seen on
//! driver 580). A mapping's release can run on another thread (a graph holding it is let go on
//! the release thread, or wherever its last holder goes): there the unmap is *parked* with its
//! stream, and queued on that stream by the registering thread at its next call on the resource
//! ([`Registered::unmap_parked`]). Stream order keeps it after every use the release ordered
//! before it. An unmap the driver refused for want of a GL context is parked the same way; on
//! driver 580 the refusal has already ended CUDA's side of the mapping (the retry hears
//! `CUDA_ERROR_NOT_MAPPED`, taken as unmapped), and the driver refuses to map that resource again
//! (`CUDA_ERROR_ALREADY_MAPPED`): an error, never a mapping used after it ended. EGL images are never mapped by the driver (NVIDIA's documentation: their frames
//! are read directly, and the application synchronises): releasing one waits for the work
//! instead, from any thread.

use super::{GraphicsRegisterFlags, GraphicsResourceKind};
use crate::device::Context;
use crate::error::{record_drop_error, Check};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread::ThreadId;

/// A registered `CUgraphicsResource`, unregistered with its last holder: the
/// [`GraphicsResource`](super::GraphicsResource) (until it is closed) and every mapping of it.
pub(super) struct Registered {
    raw: driver::CUgraphicsResource,
    /// The CUDA context it was registered in, current for every call on it.
    pub(super) context: Context,
    pub(super) flags: GraphicsRegisterFlags,
    pub(super) kind: GraphicsResourceKind,
    /// The thread that registered it, where the graphics context is current.
    owner: ThreadId,
    /// Set by a map, cleared once the unmap is queued (or, for EGL images, the work is done).
    mapped: AtomicBool,
    /// An unmap to queue on this stream, on the owner thread.
    parked: Mutex<Option<Stream>>,
}

// SAFETY: calls that need the graphics context (map, unmap) are made only on the owner thread
// (checked against `owner`); other threads only park an unmap (a lock), read the atomic, or, as
// the last holder, unregister after waiting for the work queued on the mapping. The handle is
// unregistered once, by the last holder.
unsafe impl Send for Registered {}
// SAFETY: as above: shared access is the lock, the atomic and the checked calls.
unsafe impl Sync for Registered {}

impl Registered {
    pub(super) fn new(
        raw: driver::CUgraphicsResource,
        context: Context,
        flags: GraphicsRegisterFlags,
        kind: GraphicsResourceKind,
    ) -> Registered {
        Registered {
            raw,
            context,
            flags,
            kind,
            owner: std::thread::current().id(),
            mapped: AtomicBool::new(false),
            parked: Mutex::new(None),
        }
    }

    pub(super) fn raw(&self) -> driver::CUgraphicsResource {
        self.raw
    }

    fn on_owner_thread(&self) -> bool {
        std::thread::current().id() == self.owner
    }

    /// Whether the driver maps it (OpenGL), or CUDA reads it directly (EGL).
    pub(super) fn driver_maps(&self) -> bool {
        self.kind != GraphicsResourceKind::EglImage
    }

    pub(super) fn is_mapped(&self) -> bool {
        self.mapped.load(Ordering::Acquire)
    }

    /// Marks it mapped on `stream`: `cuGraphicsMapResources` for OpenGL resources, refused on
    /// a stream being captured (graphs cannot record it) and off the registering thread.
    pub(super) fn map(&self, stream: &Stream) -> Result<()> {
        if self.driver_maps() {
            if !self.on_owner_thread() {
                return Err(CudaError::InvalidArgument(
                    "an OpenGL resource is mapped on the thread that registered it, where its GL context is current"
                        .into(),
                ));
            }
            stream.enqueue(|capture| {
                if capture.is_some() {
                    return Err(CudaError::InvalidArgument(
                        "GraphicsResource cannot be mapped on a stream being captured (a graph cannot record the map): map before the capture begins, then capture the work on the mapping".into(),
                    ));
                }
                let mut raw = self.raw;
                self.context.with_current(|| {
                    // SAFETY: one live registered resource, not mapped (the caller checked under
                    // an exclusive borrow of the resource); the stream is live and not capturing
                    // (inside its operation).
                    unsafe { driver::cuGraphicsMapResources(1, &mut raw, stream.handle()) }
                        .check("cuGraphicsMapResources")
                })
            })?;
        }
        self.mapped.store(true, Ordering::Release);
        Ok(())
    }

    /// `cuGraphicsUnmapResources` on `stream`, after the work queued there so far.
    ///
    /// # Safety
    /// The resource is mapped, on this thread, and nothing uses what the mapping gave after the
    /// work already queued on `stream`.
    unsafe fn unmap_now(&self, stream: &Stream) -> Result<()> {
        let mut raw = self.raw;
        self.context.with_current(|| {
            // SAFETY: forwarded to the caller: mapped, and nothing uses the mapping after the
            // stream's work so far, which the driver completes before any graphics work.
            unsafe { driver::cuGraphicsUnmapResources(1, &mut raw, stream.handle()) }.check("cuGraphicsUnmapResources")
        })?;
        self.mapped.store(false, Ordering::Release);
        Ok(())
    }

    /// Ends the mapping, from its release on `stream` (any thread): unmaps now on the owner
    /// thread, parks the unmap elsewhere (and when it fails, to be tried again; the error is
    /// returned); for EGL images, waits for the stream's work.
    ///
    /// # Safety
    /// The resource is mapped, and nothing uses what the mapping gave after the work already
    /// queued on `stream`.
    pub(super) unsafe fn release_mapping(&self, stream: &Stream) -> Result<()> {
        if !self.driver_maps() {
            crate::memory::wait_before_free(stream)?;
            self.mapped.store(false, Ordering::Release);
            return Ok(());
        }
        if !self.on_owner_thread() {
            *self.parked.lock().unwrap_or_else(|p| p.into_inner()) = Some(stream.clone());
            return Ok(());
        }
        // SAFETY: forwarded to the caller; on the owner thread.
        let unmapped = unsafe { self.unmap_now(stream) };
        if unmapped.is_err() {
            *self.parked.lock().unwrap_or_else(|p| p.into_inner()) = Some(stream.clone());
        }
        unmapped
    }

    /// Queues a parked unmap, on the owner thread (elsewhere nothing is done); `Ok(true)` when
    /// there was one and it is queued. A failed one stays parked. When the driver answers that
    /// the resource is not mapped (`CUDA_ERROR_NOT_MAPPED`: an unmap that failed for want of a
    /// GL context may have ended CUDA's mapping already), it is taken as unmapped.
    pub(super) fn unmap_parked(&self) -> Result<bool> {
        if !self.on_owner_thread() || crate::reaper::in_callback() {
            return Ok(false);
        }
        let mut parked = self.parked.lock().unwrap_or_else(|p| p.into_inner());
        let Some(stream) = parked.as_ref() else {
            return Ok(false);
        };
        // Queued as an operation on the stream: never on a stream being captured (it would be
        // refused, and could invalidate that capture); it stays parked until the capture ends.
        let queued = stream.enqueue(|capture| {
            if capture.is_some() {
                return Ok(false);
            }
            // SAFETY: parked by a release: mapped, and its stream has every use of the mapping
            // queued before (the release ordered them there), and anything queued since is later;
            // the stream is not capturing (inside its operation).
            unsafe { self.unmap_now(stream) }.map(|()| true)
        });
        match queued {
            Ok(false) => return Ok(false),
            Ok(true) => {}
            Err(e) if e.driver_status() == Some(driver::CUresult::CUDA_ERROR_NOT_MAPPED) => {
                self.mapped.store(false, Ordering::Release);
            }
            Err(e) => return Err(e),
        }
        *parked = None;
        Ok(true)
    }

    /// Unregisters (`cuGraphicsUnregisterResource`), once. A parked unmap is queued first (on
    /// the owner thread); elsewhere its stream's work is waited for, so that nothing still uses
    /// the mapping when the registration goes.
    pub(super) fn unregister(&mut self) -> Result<()> {
        if self.raw.is_null() {
            return Ok(());
        }
        if let Err(e) = self.unmap_parked() {
            record_drop_error(e);
        }
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if let Some(stream) = self.parked.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            // Still mapped: the unmap could not be queued here (off the registering thread, the
            // driver refuses it; unregistering a mapped resource it refuses too). What uses the
            // mapping is waited for, and the mapping and the registration are left to the driver.
            crate::memory::wait_before_free(&stream)?;
            return Err(CudaError::InvalidArgument(
                "a GraphicsResource was let go while still mapped, and its unmap could not be queued (its last mapping was released off the registering thread, after the resource was dropped while a graph held the mapping; or no GL context was current): it stays mapped and registered. Keep the resource, with its GL context current, until is_mapped() is false".into(),
            ));
        }
        self.context.with_current(|| {
            // SAFETY: registered by this value and unregistered once, by its last holder (every
            // mapping holds it while it lives); no CUDA work uses a mapping of it any more (the
            // work before a parked unmap was waited for above).
            unsafe { driver::cuGraphicsUnregisterResource(raw) }.check("cuGraphicsUnregisterResource")
        })
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        if crate::reaper::in_callback() {
            // On a driver thread: unregistered on the release thread.
            let later = Registered {
                raw: std::mem::replace(&mut self.raw, std::ptr::null_mut()),
                context: self.context.clone(),
                flags: self.flags,
                kind: self.kind,
                owner: self.owner,
                mapped: AtomicBool::new(self.is_mapped()),
                parked: Mutex::new(self.parked.get_mut().unwrap_or_else(|p| p.into_inner()).take()),
            };
            crate::reaper::drop_later(Box::new(later));
            return;
        }
        if let Err(e) = self.unregister() {
            record_drop_error(e);
        }
    }
}
