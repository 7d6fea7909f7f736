//! [`Context`]: primary, created and green contexts, the calling thread's stack of contexts this
//! crate made current (which keeps them alive there, and holds each green context's claim: see
//! [`Green`]), and the context's pool of fence events.

mod current;

pub(crate) use current::green_context_busy;

use super::Device;
use crate::error::Check;
use crate::{CudaError, Result};
use cuda_sys::driver;
use current::Claim;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

/// What a [`Context`] owns, which decides what releasing it destroys: only `Created` reaches
/// `cuCtxDestroy`, only `Green` reaches `cuGreenCtxDestroy` (a green context's `CUcontext` is a
/// view that `cuCtxDestroy` must never be given).
enum Ownership {
    /// A device's primary context, retained for the life of the process: never destroyed.
    Primary,
    /// Made by `cuCtxCreate` (`Context::create`): destroyed by `cuCtxDestroy`.
    Created,
    /// Made by `Device::create_context`: the handle is the `cuCtxFromGreenCtx` view of the
    /// green context, destroyed by `cuGreenCtxDestroy`.
    Green(Green),
    /// Met through a raw handle (made current by other code): neither kept alive nor destroyed.
    Borrowed,
    /// Already released (`release` ran): nothing left to destroy.
    Released,
}

impl Ownership {
    /// Whether the last holder destroys the context.
    fn destroys(&self) -> bool {
        matches!(self, Ownership::Created | Ownership::Green(_))
    }
}

struct ContextInner {
    handle: driver::CUcontext,
    device: Device,
    ownership: Ownership,
    /// Timing-free events made in this context, lent out to order one stream after another
    /// (see [`Context::fence`]). A green context lends its primary context's instead.
    fences: Mutex<Vec<driver::CUevent>>,
}

/// The green context behind a [`Context`] made by [`Device::create_context`].
///
/// The driver's rule for green contexts (CUDA 12.4's `cuGreenCtxCreate`, which CUDA 13.5 narrows
/// to the `CUgreenCtx` handle): one thread at a time, with no internal synchronisation. So calls
/// taking the handle hold `lock`, and the context is current (through this crate) on at most one
/// thread at a time: that thread holds its `claim` from the moment an entry of the thread's stack
/// of current contexts names it until the last such entry goes (`Entry`).
pub(super) struct Green {
    /// Destroyed (`cuGreenCtxDestroy`) with the `Context`; its `CUcontext` is only a view of it.
    pub(super) handle: driver::CUgreenCtx,
    /// Held by every call that takes `handle`.
    pub(super) lock: Mutex<()>,
    /// The thread the context is current on, if any (see `Claim`).
    claim: Mutex<Claim>,
    /// Signalled when the claim is let go of.
    unclaimed: Condvar,
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
        let status = match std::mem::replace(&mut self.ownership, Ownership::Released) {
            // SAFETY: made by cuCtxCreate and destroyed once (the ownership is now `Released`);
            // objects made in it hold this Arc, and every thread it was made current on by this
            // crate holds it too (see `CURRENT`), so neither outlives it.
            Ownership::Created => unsafe { driver::cuCtxDestroy(self.handle) }.check("cuCtxDestroy"),
            Ownership::Green(green) => {
                // SAFETY: made by cuGreenCtxCreate and destroyed once (the ownership is now
                // `Released`); this value is the last holder (objects made in it and threads it
                // is current on through this crate hold it), so nothing else uses the handle.
                let status = unsafe { driver::cuGreenCtxDestroy(green.handle) }.check("cuGreenCtxDestroy");
                // The contexts its resources came from go after it.
                drop(green);
                status
            }
            Ownership::Primary | Ownership::Borrowed | Ownership::Released => Ok(()),
        };
        first.and(status)
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        let destroys = matches!(self.ownership, Ownership::Created | Ownership::Green(_));
        if crate::reaper::in_callback() || (destroys && !crate::reaper::on_release_thread()) {
            // Released on the thread for slow drops (see `reaper::drop_slowly`): never on a driver
            // thread, and a created or green context's destroy never by a drop elsewhere (tearing a
            // context down waits for the work still queued in it, on default streams say, which no
            // object of this crate holds).
            let later = ContextInner {
                handle: self.handle,
                device: self.device,
                ownership: std::mem::replace(&mut self.ownership, Ownership::Released),
                fences: Mutex::new(std::mem::take(self.fences.get_mut().unwrap_or_else(|p| p.into_inner()))),
            };
            crate::reaper::drop_slowly(Box::new(later));
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
// event pool is behind a mutex; a CUgreenCtx is used only under its lock (`Green::lock`), its
// context is current on one thread at a time (`Green::claim`), and the contexts it keeps are
// `Send + Sync`.
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
///
/// A green context is current on at most one thread at a time: the driver does not synchronise
/// threads sharing one (CUDA 12.4's rule for green contexts, "can be current to only one thread
/// at a time"). [`with_current`](Self::with_current) (which this crate's operations use when they
/// need a context current, to create an event in it say) waits while another thread runs one of
/// its own calls with the green context current, and fails while the green context is current on
/// another thread through [`set_current`](Self::set_current) or [`push`](Self::push); those two
/// fail then as well. Its streams are made without making it current, and kernels, copies and
/// waits on them need none: they work from any thread (see [`Device::create_context`]).
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
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

/// The captures begun through this crate on streams of one context, and the synchronisations of
/// that context in progress: a context-wide synchronisation would invalidate those captures.
#[derive(Default)]
struct CaptureCounts {
    /// How many captures run.
    captures: AtomicUsize,
    /// Read-locked across a synchronisation; write-locked (briefly) to count a capture in, so a
    /// capture waits to begin until a synchronisation in progress is done, and a synchronisation
    /// that begins afterwards sees the count. A capture's end takes its count back without the
    /// lock: it never waits for a synchronisation (a drop must not wait for the GPU).
    syncing: RwLock<()>,
}

/// The counts of the context `handle` (by handle, so that every `Context` value naming it shares
/// them).
fn capture_count(handle: driver::CUcontext) -> Arc<CaptureCounts> {
    static COUNTS: Mutex<Option<HashMap<usize, Arc<CaptureCounts>>>> = Mutex::new(None);
    COUNTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .entry(handle as usize)
        .or_default()
        .clone()
}

/// A capture counted in its context by [`Context::count_capture`]; dropping it takes the count
/// back (without waiting for anything).
/// A capture of a green context's stream is counted in the device's primary context too: the
/// primary context's synchronisation waits for its green contexts' work as well.
pub(crate) struct CaptureCount(Arc<CaptureCounts>, Option<Arc<CaptureCounts>>);

impl Drop for CaptureCount {
    fn drop(&mut self) {
        for counts in std::iter::once(&self.0).chain(&self.1) {
            let _ = counts
                .captures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_sub(1)));
        }
    }
}

impl Context {
    fn wrap(handle: driver::CUcontext, device: Device, ownership: Ownership) -> Context {
        Context {
            inner: Arc::new(ContextInner {
                handle,
                device,
                ownership,
                fences: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The primary context `handle` of `device`, just retained (never released).
    pub(super) fn wrap_primary(handle: driver::CUcontext, device: Device) -> Context {
        Context::wrap(handle, device, Ownership::Primary)
    }

    /// The context that owns `green` (destroyed with the last clone); `handle` is its
    /// `cuCtxFromGreenCtx` view. `origins` are kept until then.
    pub(super) fn wrap_green(
        handle: driver::CUcontext,
        device: Device,
        green: driver::CUgreenCtx,
        origins: Vec<Context>,
    ) -> Context {
        Context::wrap(
            handle,
            device,
            Ownership::Green(Green {
                handle: green,
                lock: Mutex::new(()),
                claim: Mutex::new(Claim::default()),
                unclaimed: Condvar::new(),
                _origins: origins,
            }),
        )
    }

    /// The green context behind this one, if it is one made by [`Device::create_context`].
    pub(super) fn green(&self) -> Option<&Green> {
        match &self.inner.ownership {
            Ownership::Green(green) => Some(green),
            _ => None,
        }
    }

    /// Whether this is a green context made by [`Device::create_context`] (`cuda.core`'s
    /// `is_green`). A green context made elsewhere and met through a raw handle
    /// ([`crate::Stream::from_handle`]) is not recognised as one.
    pub fn is_green(&self) -> bool {
        self.green().is_some()
    }

    /// A timing-free event for ordering one stream of this context after another: record it on
    /// one, make the other wait for it. It goes back to its context's pool when dropped.
    ///
    /// A green context lends its device's primary context's events: the driver takes events of
    /// the primary context on the streams of its green contexts (`cuGreenCtxRecordEvent` names
    /// the rule: the event and the green context must belong to the same primary context), and
    /// making them there never makes the green context current (see [`Green`]). Whether the
    /// driver does is asked once (`primary_fences_serve_green`); if it did not, the green
    /// context's own events would be made, with it current for a moment.
    pub(crate) fn fence(&self) -> Result<FenceEvent> {
        if self.is_green() && self.primary_fences_serve_green() {
            return self.inner.device.primary_context()?.fence();
        }
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

    /// Whether an event of the primary context can be recorded on a stream of this green context
    /// (`cuEventRecord` wants the event and the stream "from the same context"; green contexts
    /// count as their primary context's). Asked once per process, of a stream made for the
    /// question; a question that fails (a call refused in a callback, say) is asked again later
    /// and answered `false` meanwhile.
    fn primary_fences_serve_green(&self) -> bool {
        static ANSWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if let Some(answer) = ANSWER.get() {
            return *answer;
        }
        let ask = || -> Result<bool> {
            let primary = self.inner.device.primary_context()?;
            let fence = primary.fence()?;
            let (least, _) = primary.stream_priority_range()?;
            let stream = self.create_green_stream(true, least)?;
            // SAFETY: both handles are live; the stream was just made and nothing else uses it.
            let recorded = unsafe { driver::cuEventRecord(fence.handle(), stream) };
            // SAFETY: made above, destroyed once (what was queued on it still runs).
            let destroyed = unsafe { driver::cuStreamDestroy(stream) }.check("cuStreamDestroy");
            destroyed?;
            match recorded {
                driver::CUresult::CUDA_SUCCESS => Ok(true),
                driver::CUresult::CUDA_ERROR_INVALID_HANDLE | driver::CUresult::CUDA_ERROR_INVALID_CONTEXT => Ok(false),
                other => other.check("cuEventRecord").map(|()| true),
            }
        };
        match ask() {
            Ok(answer) => *ANSWER.get_or_init(|| answer),
            Err(_) => false,
        }
    }

    /// The calling thread's current context, if any: one this crate made current, or a primary
    /// context.
    ///
    /// A context another library made (cudarc's `CudaContext::new_non_primary`, raw
    /// `cuCtxCreate`) and made current is refused with an error: the driver counts no
    /// references to such a context, so this crate could not keep it alive, and that library may
    /// destroy it under anything made in it (memory, events, streams, graphs). Every safe call
    /// that works in the current context (the default streams, allocations on them, graph
    /// nodes) meets the same refusal. Make a context of this crate current first
    /// ([`Device::set_current`], [`Context::set_current`]).
    pub fn current() -> Result<Option<Context>> {
        let handle = Context::current_handle()?;
        if handle.is_null() {
            return Ok(None);
        }
        if let Some(context) = Context::held(handle) {
            return Ok(Some(context));
        }
        // A primary context, found without touching the handle (a context other code made
        // current may have been destroyed since: it must not reach the driver).
        for device in Device::all()? {
            let primary = device.primary_context()?;
            if primary.inner.handle == handle {
                return Ok(Some(primary));
            }
        }
        Err(CudaError::InvalidArgument(format!(
                "the calling thread's current context ({handle:p}) was made outside this crate (by another library, such as cudarc's CudaContext::new_non_primary, or raw calls): this crate cannot keep it alive, and its owner may destroy it under what would be made in it. Make a context of this crate current first (Device::set_current, Context::set_current)"
        )))
    }

    /// The context `handle`: one a thread made current through this crate, a primary context,
    /// or else a wrapper that does not keep it alive.
    ///
    /// # Safety
    /// `handle` is a live context.
    pub(crate) unsafe fn from_raw(handle: driver::CUcontext) -> Result<Context> {
        if let Some(ctx) = Context::held(handle) {
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
        Ok(Context::wrap(handle, device, Ownership::Borrowed))
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
        let context = Context::wrap(ctx, *device, Ownership::Created);
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
            return Err(CudaError::InvalidState(
                "Cannot close a CUDA context while it is current. Restore a previous context before closing this context."
                    .into(),
            ));
        }
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => inner.release(),
            Err(_) => Ok(()),
        }
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
    /// urgent, so `greatest <= priority <= least`. A green context answers with its device's
    /// primary context (same device, same range), so it is not made current for the query.
    pub fn stream_priority_range(&self) -> Result<(i32, i32)> {
        if self.is_green() {
            return self.inner.device.primary_context()?.stream_priority_range();
        }
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
        matches!(self.inner.ownership, Ownership::Primary)
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
        Err(CudaError::InvalidState(
            "synchronize: a stream of this context is being captured into a graph, which a context-wide synchronisation would invalidate: synchronize the streams you use (Stream::sync), or synchronize after the capture ends".into(),
        ))
    }

    /// [`synchronize`](Self::synchronize), or `Ok(false)` without waiting when a stream of the
    /// context is being captured.
    pub(crate) fn try_synchronize(&self) -> Result<bool> {
        crate::reaper::refuse_in_callback()?;
        let counts = capture_count(self.inner.handle);
        // Held across the wait: no capture begins in the context meanwhile (one counted before
        // is seen here: it counted under the write lock).
        let _syncing = counts.syncing.read().unwrap_or_else(|p| p.into_inner());
        if counts.captures.load(Ordering::SeqCst) != 0 {
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
    /// synchronisation of the context in progress; call it holding no lock. A green context's
    /// capture is counted in its device's primary context too (an error when that context cannot
    /// be had: the count would be missing there).
    pub(crate) fn count_capture(&self) -> Result<CaptureCount> {
        let count = capture_count(self.inner.handle);
        // A green context's primary context was made with it (`Device::create_context`).
        let primary = if self.is_green() {
            Some(capture_count(self.inner.device.primary_context()?.inner.handle))
        } else {
            None
        };
        for c in std::iter::once(&count).chain(&primary) {
            // Waits for a synchronisation in progress (it holds the read lock).
            let _counting = c.syncing.write().unwrap_or_else(|p| p.into_inner());
            c.captures.fetch_add(1, Ordering::SeqCst);
        }
        Ok(CaptureCount(count, primary))
    }
}

/// By handle, as `cuda.core` compares and hashes contexts.
impl PartialEq for Context {
    fn eq(&self, other: &Context) -> bool {
        self.inner.handle == other.inner.handle
    }
}

impl Eq for Context {}

impl std::hash::Hash for Context {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(self.inner.handle, state);
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let green = if self.is_green() { ", green" } else { "" };
        write!(f, "Context({:p}, {:?}{green})", self.inner.handle, self.inner.device)
    }
}
