//! [`Context`]: primary, created and green contexts, the calling thread's stack of contexts this
//! crate made current (which keeps them alive there), and the context's pool of fence events.

use super::Device;
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};

struct ContextInner {
    handle: driver::CUcontext,
    device: Device,
    /// Made by `Context::create` or `Device::create_context` (destroyed on drop) rather than a
    /// retained primary context.
    owned: bool,
    /// The green context `handle` stands for (`cuCtxFromGreenCtx`), when made by
    /// `Device::create_context`.
    green: Option<Green>,
    /// Timing-free events made in this context, lent out to order one stream after another
    /// (see [`Context::fence`]).
    fences: Mutex<Vec<driver::CUevent>>,
}

/// The green context behind a [`Context`] made by [`Device::create_context`].
pub(super) struct Green {
    /// Destroyed (`cuGreenCtxDestroy`) with the `Context`; its `CUcontext` is only a view of it.
    pub(super) handle: driver::CUgreenCtx,
    /// Held by every call that takes `handle`: the driver lets one thread at a time use a
    /// `CUgreenCtx`.
    pub(super) lock: Mutex<()>,
    /// The contexts the resources it was made from were read from, kept until it is destroyed.
    pub(super) _origins: Vec<Context>,
}

impl ContextInner {
    /// Destroys what this value owns, once: the idle fence events, then a created or green
    /// context. Returns the first error.
    fn release(&mut self) -> Result<()> {
        let mut first = Ok(());
        let fences = std::mem::take(self.fences.get_mut().unwrap_or_else(|p| p.into_inner()));
        for event in fences {
            // SAFETY: made by cuEventCreate in this context, idle in the pool, destroyed once.
            let status = unsafe { driver::cuEventDestroy(event) }.check("cuEventDestroy");
            first = first.and(status);
        }
        if std::mem::take(&mut self.owned) {
            let status = match &self.green {
                // SAFETY: made by cuGreenCtxCreate and destroyed once (`owned` is cleared); this
                // value is the last holder (objects made in it and threads it is current on
                // through this crate hold it), so nothing else uses the handle.
                Some(green) => unsafe { driver::cuGreenCtxDestroy(green.handle) }.check("cuGreenCtxDestroy"),
                // SAFETY: made by cuCtxCreate and destroyed once; objects made in it hold this
                // Arc, and every thread it was made current on by this crate holds it too (see
                // `CURRENT`), so neither outlives it.
                None => unsafe { driver::cuCtxDestroy(self.handle) }.check("cuCtxDestroy"),
            };
            first = first.and(status);
        }
        first
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if crate::reaper::in_callback() {
            // On a driver thread: released on the release thread instead.
            let later = ContextInner {
                handle: self.handle,
                device: self.device,
                owned: std::mem::take(&mut self.owned),
                green: self.green.take(),
                fences: Mutex::new(std::mem::take(self.fences.get_mut().unwrap_or_else(|p| p.into_inner()))),
            };
            crate::reaper::drop_later(Box::new(later));
            return;
        }
        if let Err(e) = self.release() {
            crate::error::record_drop_error(e);
        }
    }
}

bitflags::bitflags! {
    /// Creation flags of an explicit [`Context`] (`CU_CTX_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct ContextFlags: u32 {
        /// Spin while waiting for results (lowest latency, busiest CPU).
        const SCHED_SPIN = 0x01;
        /// Yield the thread while waiting.
        const SCHED_YIELD = 0x02;
        /// Block the thread on a synchronisation primitive while waiting.
        const SCHED_BLOCKING_SYNC = 0x04;
        /// Allow mapped pinned host memory (always on since CUDA 3.2; kept for completeness).
        const MAP_HOST = 0x08;
        /// Keep local memory at its high-water mark after kernels that resized it.
        const LMEM_RESIZE_TO_MAX = 0x10;
        /// Write a core dump when a kernel raises an exception.
        const COREDUMP_ENABLE = 0x20;
        /// Allow user-triggered core dumps.
        const USER_COREDUMP_ENABLE = 0x40;
        /// Make synchronous memory operations synchronise.
        const SYNC_MEMOPS = 0x80;
    }
}

// SAFETY: a CUcontext and CUevents are process-wide handles the driver lets any thread use; the
// event pool is behind a mutex; a CUgreenCtx is used only under its lock (`Green::lock`), and the
// contexts it keeps are `Send + Sync`.
unsafe impl Send for ContextInner {}
// SAFETY: as above; shared access reads the handle or locks the pool or the green context.
unsafe impl Sync for ContextInner {}

/// A CUDA context: a device's primary context, one made by [`Context::create`], or a green
/// context made by [`Device::create_context`] from a partition of the device's SMs.
///
/// A context made current on a thread through this type ([`set_current`](Self::set_current),
/// [`push`](Self::push), [`Device::set_current`]) is held by that thread until another replaces
/// it there or the thread ends, so dropping every other clone cannot destroy a context some
/// thread still uses.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

/// The contexts this crate made current on the calling thread, as the driver's stack holds them
/// (the top is the current one). Holding them keeps a created context alive while current here.
struct CurrentStack(RefCell<Vec<Context>>);

impl Drop for CurrentStack {
    fn drop(&mut self) {
        // The thread is ending. Primary contexts are never destroyed: let go of them here. A
        // created context may be destroyed by its last reference: that happens on the release
        // thread (started when it was made current), not during the thread's teardown.
        let created: Vec<Context> = std::mem::take(self.0.get_mut())
            .into_iter()
            .filter(|c| c.inner.owned)
            .collect();
        if !created.is_empty() {
            crate::reaper::drop_later(Box::new(created));
        }
    }
}

thread_local! {
    static CURRENT: CurrentStack = const { CurrentStack(RefCell::new(Vec::new())) };
}

/// Takes the top of the calling thread's stack of held contexts off when it is `top`; dropped
/// after the stack is released (the drop may destroy a created context).
fn unhold_top(is_top: impl Fn(&Context) -> bool) {
    let popped = CURRENT
        .try_with(|c| {
            let mut stack = c.0.borrow_mut();
            match stack.last() {
                Some(top) if is_top(top) => stack.pop(),
                _ => None,
            }
        })
        .ok()
        .flatten();
    drop(popped);
}

/// An event of a context's fence pool, given back on drop.
pub(crate) struct FenceEvent {
    context: Context,
    event: driver::CUevent,
}

// SAFETY: a CUevent may be used from any thread; the context holds the pool behind a mutex.
unsafe impl Send for FenceEvent {}
// SAFETY: as above; shared access reads the handle.
unsafe impl Sync for FenceEvent {}

impl FenceEvent {
    pub(crate) fn handle(&self) -> driver::CUevent {
        self.event
    }
}

impl Drop for FenceEvent {
    fn drop(&mut self) {
        // A recorded event may be recorded again at once: waits already queued keep what it
        // captured when they were queued.
        self.context
            .inner
            .fences
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.event);
    }
}

/// How many captures begun through this crate run on streams of the context `handle` (by handle,
/// so that every `Context` value naming it shares the count). Read-locked across a context-wide
/// synchronisation, which would invalidate them; write-locked to count one.
fn capture_count(handle: driver::CUcontext) -> Arc<RwLock<usize>> {
    static COUNTS: Mutex<Option<HashMap<usize, Arc<RwLock<usize>>>>> = Mutex::new(None);
    COUNTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .entry(handle as usize)
        .or_default()
        .clone()
}

/// A capture counted in its context by [`Context::count_capture`]; dropping it takes the count
/// back.
/// A capture of a green context's stream is counted in the device's primary context too: the
/// primary context's synchronisation waits for its green contexts' work as well.
pub(crate) struct CaptureCount(Arc<RwLock<usize>>, Option<Arc<RwLock<usize>>>);

impl Drop for CaptureCount {
    fn drop(&mut self) {
        for count in std::iter::once(&self.0).chain(&self.1) {
            let mut n = count.write().unwrap_or_else(|p| p.into_inner());
            *n = n.saturating_sub(1);
        }
    }
}

impl Context {
    pub(super) fn wrap(handle: driver::CUcontext, device: Device, owned: bool) -> Context {
        Context {
            inner: Arc::new(ContextInner {
                handle,
                device,
                owned,
                green: None,
                fences: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The context that owns `green` (destroyed with the last clone); `handle` is its
    /// `cuCtxFromGreenCtx` view. `origins` are kept until then.
    pub(super) fn wrap_green(
        handle: driver::CUcontext,
        device: Device,
        green: driver::CUgreenCtx,
        origins: Vec<Context>,
    ) -> Context {
        Context {
            inner: Arc::new(ContextInner {
                handle,
                device,
                owned: true,
                green: Some(Green {
                    handle: green,
                    lock: Mutex::new(()),
                    _origins: origins,
                }),
                fences: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The green context behind this one, if it is one made by [`Device::create_context`].
    pub(super) fn green(&self) -> Option<&Green> {
        self.inner.green.as_ref()
    }

    /// Whether this is a green context made by [`Device::create_context`] (`cuda.core`'s
    /// `is_green`). A green context made elsewhere and met through a raw handle
    /// ([`crate::Stream::from_handle`]) is not recognised as one.
    pub fn is_green(&self) -> bool {
        self.inner.green.is_some()
    }

    /// A timing-free event of this context, for ordering one stream after another: record it on
    /// one, make the other wait for it. It goes back to the context's pool when dropped.
    pub(crate) fn fence(&self) -> Result<FenceEvent> {
        let pooled = self.inner.fences.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let event = match pooled {
            Some(e) => e,
            None => self.with_current(|| {
                let mut e: driver::CUevent = std::ptr::null_mut();
                // SAFETY: the context is current; out-pointer to a local.
                unsafe { driver::cuEventCreate(&mut e, driver::CUevent_flags::CU_EVENT_DISABLE_TIMING.0) }
                    .check("cuEventCreate")?;
                Ok(e)
            })?,
        };
        Ok(FenceEvent {
            context: self.clone(),
            event,
        })
    }

    /// The calling thread's current context, if any: the one this crate made current, a primary
    /// context, or (made current by raw calls) a context this value does not keep alive.
    pub fn current() -> Result<Option<Context>> {
        let handle = Context::current_handle()?;
        if handle.is_null() {
            return Ok(None);
        }
        // SAFETY: the handle is the calling thread's current context, so it is live.
        unsafe { Context::from_raw(handle) }.map(Some)
    }

    /// The context `handle`: one a thread made current through this crate, a primary context,
    /// or else a wrapper that does not keep it alive.
    ///
    /// # Safety
    /// `handle` is a live context.
    pub(crate) unsafe fn from_raw(handle: driver::CUcontext) -> Result<Context> {
        let held = CURRENT
            .try_with(|c| {
                c.0.borrow()
                    .iter()
                    .rev()
                    .find(|ctx| ctx.inner.handle == handle)
                    .cloned()
            })
            .ok()
            .flatten();
        if let Some(ctx) = held {
            return Ok(ctx);
        }
        let mut dev = 0;
        // SAFETY: the caller vouches for the handle; it is current only for the query.
        unsafe {
            driver::cuCtxPushCurrent(handle).check("cuCtxPushCurrent")?;
            let got = driver::cuCtxGetDevice(&mut dev).check("cuCtxGetDevice");
            let mut popped: driver::CUcontext = std::ptr::null_mut();
            driver::cuCtxPopCurrent(&mut popped).check("cuCtxPopCurrent")?;
            got?;
        }
        let device = Device::all()?
            .into_iter()
            .find(|d| d.handle() == dev)
            .ok_or_else(|| CudaError::InvalidArgument("the context's device is not listed".into()))?;
        let primary = device.primary_context()?;
        if primary.inner.handle == handle {
            return Ok(primary);
        }
        Ok(Context::wrap(handle, device, false))
    }

    /// The `CUcontext`.
    pub fn handle(&self) -> driver::CUcontext {
        self.inner.handle
    }

    /// The context's device.
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// A new context on `device` with `flags`, separate from the primary context. The calling
    /// thread's current context is left as it was; make the new one current with
    /// [`set_current`](Self::set_current) or [`push`](Self::push). Destroyed when the last clone
    /// (and every object made in it) is gone.
    pub fn create(device: &Device, flags: ContextFlags) -> Result<Context> {
        let mut ctx: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; no creation parameters (affinity, CIG) are passed.
        unsafe { driver::cuCtxCreate(&mut ctx, std::ptr::null_mut(), flags.bits(), device.handle()) }
            .check("cuCtxCreate")?;
        let context = Context::wrap(ctx, *device, true);
        // cuCtxCreate pushed it: take it off again so the thread is as it was.
        let mut popped: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the context just pushed is on top.
        unsafe { driver::cuCtxPopCurrent(&mut popped) }.check("cuCtxPopCurrent")?;
        Ok(context)
    }

    /// The handle of the calling thread's current context (null when there is none).
    pub fn current_handle() -> Result<driver::CUcontext> {
        let mut ctx: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuCtxGetCurrent(&mut ctx) }.check("cuCtxGetCurrent")?;
        Ok(ctx)
    }

    /// Makes this context the calling thread's current one (replacing the top of its stack)
    /// and returns the context it replaced (`None` when none was current), as `cuda.core`'s
    /// `Device.set_current(ctx)` does: `previous.set_current()` restores it. The thread holds
    /// this context until it is replaced or popped there, or the thread ends.
    pub fn set_current(&self) -> Result<Option<Context>> {
        if self.inner.owned {
            crate::reaper::start();
        }
        let previous = match Context::current_handle()? {
            h if h.is_null() => None,
            h if h == self.inner.handle => Some(self.clone()),
            // SAFETY: the calling thread's current context is live.
            h => Some(unsafe { Context::from_raw(h) }?),
        };
        // SAFETY: the context is live while self is; the thread holds it from here on.
        unsafe { driver::cuCtxSetCurrent(self.inner.handle) }.check("cuCtxSetCurrent")?;
        // (During the thread's teardown the stack is gone: nothing is held then.)
        let replaced = CURRENT
            .try_with(|c| {
                let mut stack = c.0.borrow_mut();
                let replaced = stack.pop();
                stack.push(self.clone());
                replaced
            })
            .ok()
            .flatten();
        drop(replaced);
        Ok(previous)
    }

    /// Lets go of this context now (`cuda.core`'s `Context.close`): a created or green context
    /// is destroyed here when this is its last holder, and the driver's answer returned (dropping
    /// does the same and records an error for [`crate::take_drop_errors`]). Streams, events and
    /// other objects made in it, and threads it is current on through this crate, keep it alive
    /// otherwise: it is destroyed with the last of them. A primary context is never destroyed.
    ///
    /// Refused while the context is the calling thread's current one, with `cuda.core`'s message:
    /// restore another context first (the one [`set_current`](Self::set_current) returned).
    pub fn close(self) -> Result<()> {
        crate::reaper::refuse_in_callback()?;
        if Context::current_handle()? == self.inner.handle {
            return Err(CudaError::InvalidArgument(
                "Cannot close a CUDA context while it is current. Restore a previous context before closing this context."
                    .into(),
            ));
        }
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => inner.release(),
            Err(_) => Ok(()),
        }
    }

    /// Pushes this context on the calling thread's context stack, making it current. The thread
    /// holds it until it is popped there, or the thread ends.
    pub fn push(&self) -> Result<()> {
        if self.inner.owned {
            crate::reaper::start();
        }
        // SAFETY: the context is live while self is; the thread holds it from here on.
        unsafe { driver::cuCtxPushCurrent(self.inner.handle) }.check("cuCtxPushCurrent")?;
        let _ = CURRENT.try_with(|c| c.0.borrow_mut().push(self.clone()));
        Ok(())
    }

    /// Pops the calling thread's current context off its stack and returns its handle.
    pub fn pop_current() -> Result<driver::CUcontext> {
        let mut ctx: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuCtxPopCurrent(&mut ctx) }.check("cuCtxPopCurrent")?;
        unhold_top(|top| top.inner.handle == ctx);
        Ok(ctx)
    }

    /// The flags the context runs with.
    pub fn flags(&self) -> Result<ContextFlags> {
        self.with_current(|| {
            let mut flags = 0;
            // SAFETY: the context is current; out-pointer to a local.
            unsafe { driver::cuCtxGetFlags(&mut flags) }.check("cuCtxGetFlags")?;
            Ok(ContextFlags::from_bits_truncate(flags))
        })
    }

    /// The stream priorities the context allows, `(least, greatest)`: numerically lower is more
    /// urgent, so `greatest <= priority <= least`.
    pub fn stream_priority_range(&self) -> Result<(i32, i32)> {
        self.with_current(|| {
            let (mut least, mut greatest) = (0, 0);
            // SAFETY: the context is current; out-pointers to locals.
            unsafe { driver::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) }
                .check("cuCtxGetStreamPriorityRange")?;
            Ok((least, greatest))
        })
    }

    /// Whether this is the device's primary context.
    pub fn is_primary(&self) -> bool {
        !self.inner.owned
    }

    /// Waits for all work in the context (for a primary context, its device's green contexts'
    /// work too, as the driver does).
    ///
    /// While a stream of the context is being captured into a graph (a capture begun through
    /// this crate, on any thread; for a primary context, also on a stream of a green context),
    /// this is an error rather than a wait: the driver would invalidate that capture. Synchronise
    /// the streams you use ([`crate::Stream::sync`]) instead, or after the capture ends. A capture
    /// waits to begin until a synchronisation in progress is done.
    pub fn synchronize(&self) -> Result<()> {
        if self.try_synchronize()? {
            return Ok(());
        }
        Err(CudaError::InvalidArgument(
            "synchronize: a stream of this context is being captured into a graph, which a context-wide synchronisation would invalidate: synchronize the streams you use (Stream::sync), or synchronize after the capture ends".into(),
        ))
    }

    /// [`synchronize`](Self::synchronize), or `Ok(false)` without waiting when a stream of the
    /// context is being captured.
    pub(crate) fn try_synchronize(&self) -> Result<bool> {
        crate::reaper::refuse_in_callback()?;
        let count = capture_count(self.inner.handle);
        // Held across the wait: no capture begins in the context meanwhile.
        let captures = count.read().unwrap_or_else(|p| p.into_inner());
        if *captures != 0 {
            return Ok(false);
        }
        self.with_current(|| {
            // SAFETY: the context is current for the call.
            unsafe { driver::cuCtxSynchronize() }.check("cuCtxSynchronize")
        })?;
        Ok(true)
    }

    /// Counts a capture about to begin on a stream of this context, until the returned value is
    /// dropped: meanwhile [`synchronize`](Self::synchronize) is refused. Waits for a
    /// synchronisation of the context in progress; call it holding no lock.
    pub(crate) fn count_capture(&self) -> CaptureCount {
        let count = capture_count(self.inner.handle);
        // A green context's primary context was made with it (`Device::create_context`).
        let primary = self
            .is_green()
            .then(|| self.inner.device.primary_context().ok())
            .flatten()
            .map(|p| capture_count(p.inner.handle));
        for c in std::iter::once(&count).chain(&primary) {
            *c.write().unwrap_or_else(|p| p.into_inner()) += 1;
        }
        CaptureCount(count, primary)
    }

    /// Runs `f` with this context current, restoring the previous one afterwards (also when `f`
    /// fails). `f` should not change the current context itself.
    pub fn with_current<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut previous: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { driver::cuCtxGetCurrent(&mut previous) }.check("cuCtxGetCurrent")?;
        if previous == self.inner.handle {
            return f();
        }
        // Kept alive until it is current again (`f` might let go of every other reference).
        let _previous_held = if previous.is_null() {
            None
        } else {
            // SAFETY: it is the calling thread's current context, so it is live.
            unsafe { Context::from_raw(previous) }.ok()
        };
        // SAFETY: the context is live (self holds it); the previous one is restored below.
        unsafe { driver::cuCtxSetCurrent(self.inner.handle) }.check("cuCtxSetCurrent")?;
        // While current here, the thread's stack names it, so that what `f` hands on keeps this
        // context (see `Context::current`).
        let _ = CURRENT.try_with(|c| c.0.borrow_mut().push(self.clone()));
        let result = f();
        unhold_top(|top| Arc::ptr_eq(&top.inner, &self.inner));
        // SAFETY: restoring what was current before (live: held above, or made current by raw
        // calls whose caller keeps it alive).
        let restored = unsafe { driver::cuCtxSetCurrent(previous) }.check("cuCtxSetCurrent");
        let value = result?;
        restored?;
        Ok(value)
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Context) -> bool {
        self.inner.handle == other.inner.handle
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let green = if self.is_green() { ", green" } else { "" };
        write!(f, "Context({:p}, {:?}{green})", self.inner.handle, self.inner.device)
    }
}
