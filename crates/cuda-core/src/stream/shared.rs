//! Streams other code holds: the registry that makes every wrapper of one stream handle one
//! [`Stream`] (one capture lock, every owner kept), and [`Stream::from_handle`] and its
//! variant for other libraries' stream objects. Such streams are marked shared: every operation
//! on them asks the driver whether they are being captured (see `Stream::operation`).

use super::{Stream, StreamInner, PER_THREAD};
use crate::device::Context;
use crate::error::Check;
use crate::Result;
use cuda_sys::driver;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The live wrappers of stream handles (not default ones), by handle: see [`Stream::registered`].
static WRAPPERS: Mutex<BTreeMap<usize, Weak<StreamInner>>> = Mutex::new(BTreeMap::new());

pub(super) fn wrappers() -> MutexGuard<'static, BTreeMap<usize, Weak<StreamInner>>> {
    WRAPPERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes the registry's entry for `handle` if no wrapper of it is alive any more (a wrapper
/// made meanwhile for the still-live handle keeps its entry). Called before the handle can be
/// destroyed, so the driver never gives its value to a new stream while the entry names it.
pub(super) fn unregister_dead(handle: driver::CUstream) {
    let mut map = wrappers();
    if map.get(&(handle as usize)).is_some_and(|w| w.strong_count() == 0) {
        map.remove(&(handle as usize));
    }
}

impl Stream {
    /// The live wrapper of `handle` (a stream this crate made, or one wrapped before), or a new
    /// one for it, registered: every `Stream` naming one stream shares its capture lock. The
    /// result is shared with other code (see `StreamInner::shared`) and holds `owner` besides
    /// what it held. (Not for default stream handles, whose values are process-wide.)
    ///
    /// # Safety
    /// `handle` is a live stream while `owner` (or, without one, the caller's promise) lasts.
    unsafe fn registered(
        handle: driver::CUstream,
        owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Result<Stream> {
        let live = wrappers().get(&(handle as usize)).and_then(Weak::upgrade);
        let inner = match live {
            Some(inner) => inner,
            None => {
                // The driver calls outside the registry's lock.
                let mut ctx: driver::CUcontext = std::ptr::null_mut();
                // SAFETY: the caller vouches for the stream; out-pointer to a local.
                unsafe { driver::cuStreamGetCtx(handle, &mut ctx) }.check("cuStreamGetCtx")?;
                // SAFETY: a live stream's context is live.
                let context = unsafe { Context::from_raw(ctx) }?;
                let made = Arc::new(StreamInner::new(handle, Some(context), false));
                let raced = {
                    let mut map = wrappers();
                    match map.get(&(handle as usize)).and_then(Weak::upgrade) {
                        Some(other) => Some(other),
                        None => {
                            map.insert(handle as usize, Arc::downgrade(&made));
                            None
                        }
                    }
                };
                // (A wrapper made meanwhile by another thread wins; `made` goes outside the lock.)
                raced.unwrap_or(made)
            }
        };
        if let Some(owner) = owner {
            inner.owners.lock().unwrap_or_else(|p| p.into_inner()).push(owner);
        }
        let stream = Stream { inner };
        stream.mark_shared();
        Ok(stream)
    }

    /// Marks the stream as reachable by other code (lent to another library): from now on every
    /// operation on it asks the driver whether it is being captured.
    pub(crate) fn mark_shared(&self) {
        self.inner.shared.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Wraps a stream made elsewhere, without taking ownership (it is never destroyed here). The
    /// default stream handles (NULL, `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`) give the same
    /// values as [`legacy_default`](Self::legacy_default) and
    /// [`per_thread_default`](Self::per_thread_default).
    ///
    /// A handle wrapped before (or a stream this crate made) gives that `Stream` again: every
    /// wrapper of one stream shares its capture lock. From then on, every operation on the
    /// stream asks the driver whether it is being captured, and refuses a capture this crate did
    /// not begin (as on the default streams).
    ///
    /// # Safety
    /// `handle` must be a valid stream, and its context a live context, for as long as the
    /// returned `Stream`, its clones and anything made through them (buffers freed on it, events
    /// recorded there, graphs launched on it) are used. Code outside
    /// this crate (another library, raw calls, another copy of this crate linked into the
    /// program) must not, while any of those live: begin, end or make the stream join a capture
    /// (waiting for an event recorded in one, `cudaStreamWaitEvent`, cudarc's `join`) at the same
    /// time as this crate queues work on it; end or join a capture this crate began on it; or
    /// queue work on it while this crate captures it (the graph would replay that work without
    /// holding what it uses).
    pub unsafe fn from_handle(handle: driver::CUstream) -> Result<Stream> {
        if handle as usize <= PER_THREAD {
            return Ok(Stream::default_stream(handle as usize));
        }
        // SAFETY: forwarded to the caller.
        unsafe { Stream::registered(handle, None) }
    }

    /// [`from_handle`](Self::from_handle) for a stream that `owner` keeps alive: the `Stream` and
    /// its clones hold `owner`, which goes with the last of them (for bridges to other libraries'
    /// stream objects). A default stream handle gives the process-wide value, as `from_handle`
    /// does (it is always valid, and `owner` is not needed).
    ///
    /// A handle wrapped before gives that `Stream` again, which then holds `owner` too: every
    /// wrapper of one stream shares its capture lock.
    ///
    /// # Safety
    /// `handle` must be a valid stream while `owner` lives, and the rest of
    /// [`from_handle`](Self::from_handle)'s contract holds.
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    pub(crate) unsafe fn from_handle_with_owner(
        handle: driver::CUstream,
        owner: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Result<Stream> {
        if handle as usize <= PER_THREAD {
            return Ok(Stream::default_stream(handle as usize));
        }
        // SAFETY: forwarded to the caller; the result holds `owner`.
        unsafe { Stream::registered(handle, Some(owner)) }
    }
}
