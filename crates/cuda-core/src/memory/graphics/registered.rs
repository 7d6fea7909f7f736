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
//! (`CUDA_ERROR_ALREADY_MAPPED`): an error, never a mapping used after it ended. EGL images are
//! never mapped by the driver (NVIDIA's documentation: their frames are read directly, and the
//! application synchronises): releasing one waits for the work instead, from any thread.
//!
//! The registration goes with its last holder. When that is a mapping released off the
//! registering thread (a graph that held the mapping past its resource, let go on the release
//! thread), its unmap is parked and nothing on that thread can unregister it either: the driver
//! refuses to unregister a mapped resource (`CUDA_ERROR_ALREADY_MAPPED`, seen on driver 580) and
//! unmaps only where the GL context is current. So an OpenGL registration whose last holder goes
//! off its thread becomes an *orphan*, kept in a process-wide list until the registering thread's
//! next graphics call ([`release_orphans`]: registering, mapping, `is_mapped`, `close`, dropping
//! a resource, or [`crate::graphics::release_parked`]), which queues its parked unmap on its
//! stream and unregisters it there. A registering thread that makes no further graphics call (or
//! has ended) leaves its orphans registered: the GL context they need is current nowhere else.

use super::{GraphicsRegisterFlags, GraphicsResourceKind};
use crate::device::Context;
use crate::error::{record_drop_error, Check};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread::ThreadId;

/// OpenGL registrations whose last holder went off the registering thread: unregistered by that
/// thread's next graphics call ([`release_orphans`]).
static ORPHANS: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

/// On the calling thread, unmaps and unregisters the orphans it registered (see the module
/// documentation); returns how many were unregistered. An orphan whose unmap cannot be queued
/// yet (its stream is being captured) stays for the next call; a failure (no GL context current,
/// say) is recorded for [`crate::take_drop_errors`] and the orphan stays too. Nothing is done
/// inside a callback on a driver thread, nor while the calling thread registered no orphan.
pub(super) fn release_orphans() -> usize {
    if crate::reaper::in_callback() {
        return 0;
    }
    let me = std::thread::current().id();
    let mine: Vec<Registered> = {
        let mut all = ORPHANS.lock().unwrap_or_else(|p| p.into_inner());
        if !all.iter().any(|r| r.owner == me) {
            return 0;
        }
        let (mine, others) = std::mem::take(&mut *all).into_iter().partition(|r| r.owner == me);
        *all = others;
        mine
    };
    let mut released = 0;
    let mut kept = Vec::new();
    for mut orphan in mine {
        match orphan.unregister_orphan() {
            Ok(true) => released += 1,
            Ok(false) => kept.push(orphan),
            Err(e) => {
                record_drop_error(e);
                if !orphan.raw.is_null() {
                    kept.push(orphan);
                }
            }
        }
    }
    if !kept.is_empty() {
        ORPHANS.lock().unwrap_or_else(|p| p.into_inner()).extend(kept);
    }
    released
}

/// A registered `CUgraphicsResource`, unregistered with its last holder: the
/// [`GraphicsResource`](super::GraphicsResource) (until it is closed) and every mapping of it
/// (an OpenGL one on the registering thread: see the module documentation on orphans).
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

// SAFETY: calls that need the graphics context (map, unmap, and unregistering an OpenGL
// resource) are made only on the owner thread (checked against `owner`); other threads only park
// an unmap (a lock), read the atomic, or, as the last holder, hand an OpenGL registration to the
// owner thread (`ORPHANS`) or unregister an EGL image after waiting for the work queued on it.
// The handle is unregistered once, by the last holder or the owner thread it was handed to.
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
                return Err(CudaError::InvalidState(
                    "an OpenGL resource is mapped on the thread that registered it, where its GL context is current"
                        .into(),
                ));
            }
            stream.enqueue(|capture| {
                if capture.is_some() {
                    return Err(CudaError::InvalidState(
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

    /// An orphan's end, on the owner thread: its parked unmap is queued, then it is unregistered
    /// (`Ok(true)`). `Ok(false)` while the unmap stays parked (its stream is being captured); an
    /// error when the unmap fails (it stays registered, to be tried again) or the unregistration
    /// does (it is gone: the driver keeps what it kept).
    fn unregister_orphan(&mut self) -> Result<bool> {
        self.unmap_parked()?;
        if self.parked.get_mut().unwrap_or_else(|p| p.into_inner()).is_some() {
            return Ok(false);
        }
        self.unregister().map(|()| true)
    }

    /// Moves the registration out into a new value, leaving this one unregistered-looking (a
    /// null handle), for a drop that hands it on.
    fn take(&mut self) -> Registered {
        Registered {
            raw: std::mem::replace(&mut self.raw, std::ptr::null_mut()),
            context: self.context.clone(),
            flags: self.flags,
            kind: self.kind,
            owner: self.owner,
            mapped: AtomicBool::new(self.is_mapped()),
            parked: Mutex::new(self.parked.get_mut().unwrap_or_else(|p| p.into_inner()).take()),
        }
    }

    /// Unregisters (`cuGraphicsUnregisterResource`), once. A parked unmap is queued first (on
    /// the owner thread); elsewhere its stream's work is waited for, so that nothing still uses
    /// the mapping when the registration goes. (An OpenGL registration's last holder off the
    /// owner thread hands it to the owner instead: see `Drop`.)
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
            return Err(CudaError::InvalidState(
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
        if self.driver_maps() && !self.on_owner_thread() {
            // An OpenGL registration off its thread (a driver thread included): neither its
            // parked unmap nor the unregistration can be done here. The owner's next graphics
            // call does both.
            let orphan = self.take();
            ORPHANS.lock().unwrap_or_else(|p| p.into_inner()).push(orphan);
            return;
        }
        if crate::reaper::in_callback() {
            // On a driver thread: unregistered on the release thread.
            crate::reaper::drop_later(Box::new(self.take()));
            return;
        }
        if self.driver_maps() {
            // On the owner thread: an unmap still parked (its stream is being captured, or no GL
            // context is current to queue it) keeps the registration until a later call.
            if let Err(e) = self.unmap_parked() {
                record_drop_error(e);
            }
            if self.parked.get_mut().unwrap_or_else(|p| p.into_inner()).is_some() {
                let orphan = self.take();
                ORPHANS.lock().unwrap_or_else(|p| p.into_inner()).push(orphan);
                return;
            }
        }
        if let Err(e) = self.unregister() {
            record_drop_error(e);
        }
        if self.driver_maps() {
            release_orphans();
        }
    }
}
