//! Streams, events and host functions: `Stream`, `StreamOptions`, `Event`, `EventOptions`,
//! `IpcEventDescriptor`, and [`Site`], a stream as an operation used it.
//!
//! - here: [`Stream`] and what every operation goes through ([`Stream::enqueue`]);
//! - `event`: [`Event`], its options and IPC descriptors; `host_fn`: host functions; `future`:
//!   [`Completion`], the future of [`Stream::synchronized`] and [`Event::completed`];
//! - `gate`: the quiet path operations take while no capture runs anywhere;
//! - `capture`: the registry of captures in progress, and the view an operation gets of the one
//!   its stream is in; `graph_core`: the part of a graph that holds what captured work uses
//!   (the public graph types in [`crate::graph`] are built on it);
//! - `site`: [`Site`] and [`Fence`], which order one stream after another across threads;
//!   `retire`: releases after the work queued on some streams, on the release thread.
//!
//! **Captures and operations.** Every operation this crate queues on a stream runs as one
//! *operation* ([`Stream::enqueue`]): no capture begins, ends or is joined on the stream while it
//! runs. While a capture runs anywhere, operations hold the stream's capture lock (shared by
//! operations, exclusive for what begins, ends or joins a capture); while none runs they take the
//! quiet path (`gate`), which a capture beginning waits for. So whether the stream is being
//! captured into a graph cannot change between an operation's check and its enqueue, and captured
//! work always hands the graph what it uses. The default streams are process-wide values, so
//! every `Stream` naming one shares its lock.
//!
//! Streams use devices, contexts and the release thread only; memory, launches and graphs build
//! on them. `Device::create_stream` and `Device::create_event` are defined here.

pub(crate) mod capture;
mod event;
mod future;
mod gate;
pub(crate) mod graph_core;
mod host_fn;
mod retire;
mod shared;
mod site;
pub(crate) mod sync;
mod wait;

use crate::reaper::refuse_in_callback;
pub use event::{Event, EventOptions, IpcEventDescriptor};
pub(crate) use future::Armed;
pub use future::Completion;
pub(crate) use retire::release_after;
pub(crate) use site::{Fence, Site, SiteKey};

use crate::device::{Context, Device};
use crate::error::{record_drop_error, Check};
use crate::{CudaError, Result};
use capture::{with_capture, Capture, CAPTURES};
use cuda_sys::driver;
use shared::{unregister_dead, wrappers};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockWriteGuard};

/// Runs `f` with the calling thread in relaxed capture mode: captures (global-mode ones on other
/// threads, or this thread's own) do not refuse its waits. For waits on work recorded outside any
/// capture only (such a wait never stalls a capture).
pub(crate) fn relaxed_capture_mode<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(driver::CUstreamCaptureMode);
    impl Drop for Restore {
        fn drop(&mut self) {
            let mut mode = self.0;
            // SAFETY: the mode is an in/out local; this only changes the calling thread's mode.
            let _ = unsafe { driver::cuThreadExchangeStreamCaptureMode(&mut mode) };
        }
    }
    let mut mode = driver::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: as above.
    let exchanged = unsafe { driver::cuThreadExchangeStreamCaptureMode(&mut mode) };
    let _restore = (exchanged == driver::CUresult::CUDA_SUCCESS).then_some(Restore(mode));
    f()
}

/// Options of a new [`Stream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamOptions {
    /// Do not synchronise with the legacy default stream (`CU_STREAM_NON_BLOCKING`); `true` by
    /// default, as in `cuda.core`.
    pub nonblocking: bool,
    /// Priority within the context's range (numerically lower is more urgent); the least urgent
    /// when `None`.
    pub priority: Option<i32>,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            nonblocking: true,
            priority: None,
        }
    }
}

struct StreamInner {
    handle: driver::CUstream,
    context: Option<Context>,
    /// The launch limits of the context's device, read when the stream is made (so a launch
    /// reads them here, next to the handle).
    limits: Option<&'static crate::device::Limits>,
    owned: bool,
    /// Shared by every operation queued on the stream, exclusive for beginning, ending or joining
    /// a capture (see the module documentation).
    capture_lock: RwLock<()>,
    /// What keeps a borrowed stream alive (other libraries' stream objects, one per wrapping),
    /// dropped with the last clone.
    owners: Mutex<Vec<Arc<dyn std::any::Any + Send + Sync>>>,
    /// Other code holds the handle (`from_handle`, `from_cudarc`, `to_cudarc`): it may begin,
    /// end or join captures on it that this crate does not count, so every operation asks the
    /// driver (see [`Stream::operation`]).
    shared: std::sync::atomic::AtomicBool,
    /// The stream's `CU_STREAM_NON_BLOCKING` flag once known (`FLAGS_*`): flags never change,
    /// and the driver refuses to tell them while the stream is being captured, when a wait
    /// needs them (see [`Stream::is_nonblocking`]).
    nonblocking: std::sync::atomic::AtomicU8,
}

/// [`StreamInner::nonblocking`] not read yet.
const FLAGS_UNKNOWN: u8 = 0;
/// [`StreamInner::nonblocking`]: a blocking stream.
const FLAGS_BLOCKING: u8 = 1;
/// [`StreamInner::nonblocking`]: a non-blocking stream.
const FLAGS_NONBLOCKING: u8 = 2;

// SAFETY: a CUstream may be used from any thread; the driver orders work on it, and the capture
// lock is a std lock.
unsafe impl Send for StreamInner {}
// SAFETY: as above.
unsafe impl Sync for StreamInner {}

impl StreamInner {
    /// A wrapper of `handle` in `context` (its device's launch limits read now), owning nothing
    /// besides the handle when `owned`.
    fn new(handle: driver::CUstream, context: Option<Context>, owned: bool) -> StreamInner {
        let inner = StreamInner {
            handle,
            limits: context.as_ref().and_then(|c| c.device().limits().ok()),
            context,
            owned,
            capture_lock: RwLock::new(()),
            owners: Mutex::default(),
            shared: Default::default(),
            nonblocking: std::sync::atomic::AtomicU8::new(FLAGS_UNKNOWN),
        };
        if owned {
            // A stream this crate just made: no capture can run on it yet. (A foreign stream is
            // read when first needed: asked while another library captures it, the driver would
            // invalidate that capture.)
            let _ = inner.is_nonblocking();
        }
        inner
    }

    /// The flag if it is known (read), without asking the driver.
    fn known_nonblocking(&self) -> Option<bool> {
        match self.nonblocking.load(std::sync::atomic::Ordering::Relaxed) {
            FLAGS_BLOCKING => Some(false),
            FLAGS_NONBLOCKING => Some(true),
            _ => None,
        }
    }

    /// Whether the stream has `CU_STREAM_NON_BLOCKING`, read once (see `nonblocking`).
    fn is_nonblocking(&self) -> Result<bool> {
        if let Some(known) = self.known_nonblocking() {
            return Ok(known);
        }
        let mut flags = 0;
        // SAFETY: the stream is live (its wrapper is being made or is held); out-pointer to a
        // local.
        unsafe { driver::cuStreamGetFlags(self.handle, &mut flags) }.check("cuStreamGetFlags")?;
        let nonblocking = flags & driver::CUstream_flags::CU_STREAM_NON_BLOCKING.0 != 0;
        let known = if nonblocking { FLAGS_NONBLOCKING } else { FLAGS_BLOCKING };
        self.nonblocking.store(known, std::sync::atomic::Ordering::Relaxed);
        Ok(nonblocking)
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        let owners = std::mem::take(self.owners.get_mut().unwrap_or_else(|p| p.into_inner()));
        if (self.owned || !owners.is_empty()) && crate::reaper::in_callback() {
            // On a driver thread: unregistered, destroyed (or its owners, other libraries'
            // streams, dropped) on the release thread instead (no lock taken here).
            let later = StreamInner {
                handle: self.handle,
                context: self.context.take(),
                limits: self.limits,
                owned: self.owned,
                capture_lock: RwLock::new(()),
                owners: Mutex::new(owners),
                shared: Default::default(),
                nonblocking: std::sync::atomic::AtomicU8::new(*self.nonblocking.get_mut()),
            };
            self.owned = false;
            crate::reaper::drop_later(Box::new(later));
            return;
        }
        if self.handle as usize > PER_THREAD && !crate::reaper::in_callback() {
            unregister_dead(self.handle);
        }
        if !owners.is_empty() {
            // A lent stream's owners (another library's stream, whose drop destroys it, and may
            // wait for work pending there): let go of on the thread for drops that may wait. The
            // stream is not asked about: the other library may be capturing it.
            crate::reaper::drop_slowly(Box::new(owners));
        }
        if self.owned {
            if pending(self.handle) == Some(true) {
                // The driver lets work already queued finish, but its destroy was seen to wait
                // for a host function pending on the stream (30 s, under compute-sanitizer): a
                // stream with work pending is destroyed on the release thread once it is idle.
                // (A stream whose context failed runs nothing more: destroyed here.)
                crate::reaper::retry(Box::new(DestroyWhenIdle {
                    handle: crate::reaper::SendHandle(self.handle),
                    _context: self.context.take(),
                }));
                return;
            }
            // SAFETY: made by cuStreamCreateWithPriority (or cuGreenCtxStreamCreate, for a green
            // context) and destroyed once; no work is queued on it (or its context failed).
            if let Err(e) = unsafe { driver::cuStreamDestroy(self.handle) }.check("cuStreamDestroy") {
                record_drop_error(e);
            }
        }
    }
}

/// Whether work is pending on the created stream `handle`: `Some(true)` while work is queued or
/// the stream is being captured (by another library, through its handle: querying a capturing
/// stream would invalidate the capture), `Some(false)` when it is idle, `None` when the driver
/// answers an error (the context failed: nothing will run there any more). Asked in relaxed
/// capture mode, so that a capture on this or another thread neither refuses nor is
/// invalidated by the query.
pub(crate) fn pending(handle: driver::CUstream) -> Option<bool> {
    // The question and the query with no capture beginning, ending or gaining the stream in
    // between (see `Stream::sync`).
    // SAFETY: the stream is live and not capturing (`serialised`).
    relaxed_capture_mode(|| match sync::serialised(handle, || unsafe { sync::query(handle) }) {
        Ok(None) => Some(true),
        Ok(Some(done)) => Some(!done),
        Err(_) => None,
    })
}

/// An owned stream dropped with work pending: destroyed by the release thread once it is idle.
struct DestroyWhenIdle {
    handle: crate::reaper::SendHandle<driver::CUstream>,
    /// The stream's context, kept until the stream is destroyed.
    _context: Option<Context>,
}

impl crate::reaper::Retry for DestroyWhenIdle {
    fn attempt(&mut self) -> bool {
        if pending(self.handle.0) == Some(true) {
            return false;
        }
        // SAFETY: the dropped stream's handle, handed over here and destroyed once; idle (or
        // its context failed).
        if let Err(e) = unsafe { driver::cuStreamDestroy(self.handle.0) }.check("cuStreamDestroy") {
            record_drop_error(e);
        }
        true
    }
}

/// A CUDA stream: work on it runs in order. Cheap to clone (shared); it keeps its context.
///
/// The default streams ([`legacy_default`](Self::legacy_default),
/// [`per_thread_default`](Self::per_thread_default)) name a different stream depending on the
/// calling thread's current context (and, for the per-thread one, the thread): what they name is
/// resolved where they are used.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

/// `CU_STREAM_LEGACY`.
const LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD`.
const PER_THREAD: usize = 0x2;

impl Stream {
    pub(crate) fn new(context: &Context, options: StreamOptions) -> Result<Stream> {
        refuse_in_callback()?;
        let (least, greatest) = context.stream_priority_range()?;
        let priority = options.priority.unwrap_or(least);
        if priority < greatest || priority > least {
            return Err(CudaError::InvalidArgument(format!(
                "priority={priority} is out of range [{greatest}, {least}]"
            )));
        }
        let flags = if options.nonblocking {
            driver::CUstream_flags::CU_STREAM_NON_BLOCKING.0
        } else {
            0
        };
        // A green context's streams come from cuGreenCtxStreamCreate (non-blocking only).
        let handle = if context.is_green() {
            context.create_green_stream(options.nonblocking, priority)?
        } else {
            context.with_current(|| {
                let mut s: driver::CUstream = std::ptr::null_mut();
                // SAFETY: the context is current; out-pointer to a local.
                unsafe { driver::cuStreamCreateWithPriority(&mut s, flags, priority) }
                    .check("cuStreamCreateWithPriority")?;
                Ok(s)
            })?
        };
        Ok(Stream::wrap(handle, Some(context.clone()), true))
    }

    fn wrap(handle: driver::CUstream, context: Option<Context>, owned: bool) -> Stream {
        let stream = Stream {
            inner: Arc::new(StreamInner::new(handle, context, owned)),
        };
        if owned {
            // A new stream: no wrapper of its handle can be alive.
            wrappers().insert(handle as usize, Arc::downgrade(&stream.inner));
        }
        stream
    }

    /// The process-wide value of a default stream handle (NULL, legacy or per-thread).
    fn default_stream(handle: usize) -> Stream {
        static STREAMS: [OnceLock<Stream>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        STREAMS[handle]
            .get_or_init(|| Stream::wrap(handle as driver::CUstream, None, false))
            .clone()
    }

    /// The legacy default stream (`CU_STREAM_LEGACY`) of whatever context is current where it is
    /// used.
    ///
    /// While a capture of a blocking stream (one made without [`StreamOptions::nonblocking`], or
    /// the per-thread default stream) runs anywhere in the process, work on the legacy stream is
    /// refused with `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`, in every context: the driver refuses it
    /// too during such a capture (in that capture's context), and driver 580 crashes when it
    /// overlaps the capture's beginning or end. Capture non-blocking streams (the default) to
    /// keep the legacy stream usable meanwhile.
    pub fn legacy_default() -> Stream {
        Stream::default_stream(LEGACY)
    }

    /// The per-thread default stream (`CU_STREAM_PER_THREAD`) of the thread using it, in its
    /// current context.
    pub fn per_thread_default() -> Stream {
        Stream::default_stream(PER_THREAD)
    }

    /// The `CUstream`.
    #[inline]
    pub fn handle(&self) -> driver::CUstream {
        self.inner.handle
    }

    /// Whether the handle is a default stream's, whose meaning depends on the thread and its
    /// current context.
    #[inline]
    pub(crate) fn is_default(&self) -> bool {
        self.inner.handle as usize <= PER_THREAD
    }

    /// Whether this is the legacy default stream where the driver sees it: `CU_STREAM_LEGACY`,
    /// or NULL unless this process binds the per-thread default stream (where NULL means that
    /// one). The batch calls (`cuMemcpyBatchAsync`, `cuMemPrefetchBatchAsync`,
    /// `cuMemDiscardBatchAsync`, ...) reject it.
    pub(crate) fn is_legacy_default(&self) -> bool {
        match self.handle() as usize {
            0 => !cuda_sys::per_thread_default_stream(),
            LEGACY => true,
            _ => false,
        }
    }

    /// Destroys the stream now and returns what the driver said (dropping it does the same and
    /// records an error for [`crate::take_drop_errors`]). With other clones alive, only this
    /// reference goes; the last one destroys the stream. Work already queued still runs. A closed
    /// stream cannot be used again: `close` takes it by value.
    pub fn close(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) if inner.owned => {
                // Destroyed here, not again in Drop; unregistered first.
                inner.owned = false;
                unregister_dead(inner.handle);
                // SAFETY: made by cuStreamCreateWithPriority (or cuGreenCtxStreamCreate, for a
                // green context), destroyed once.
                unsafe { driver::cuStreamDestroy(inner.handle) }.check("cuStreamDestroy")
            }
            _ => Ok(()),
        }
    }

    /// The context the stream was made in (`None` for the default streams).
    pub fn context(&self) -> Option<&Context> {
        self.inner.context.as_ref()
    }

    /// The stream's context, or (for the default streams) the calling thread's current one, or
    /// the current device's primary context when none is current.
    pub(crate) fn context_or_current(&self) -> Result<Context> {
        match self.context() {
            Some(c) => Ok(c.clone()),
            None => match Context::current()? {
                Some(c) => Ok(c),
                None => Device::current()?.primary_context(),
            },
        }
    }

    /// The launch limits of the stream's device (`None` for the default streams).
    #[inline]
    pub(crate) fn limits(&self) -> Option<&'static crate::device::Limits> {
        self.inner.limits
    }

    /// The device of the stream's context.
    pub fn device(&self) -> Option<Device> {
        self.inner.context.as_ref().map(Context::device)
    }

    /// The resources of the stream's context (`cuda.core`'s `Stream.resources`): for a stream of
    /// a green context, the SMs (and workqueues) it was made with. The default streams answer for
    /// the context current where this is called.
    pub fn resources(&self) -> Result<crate::device::DeviceResources> {
        Ok(self.context_or_current()?.resources())
    }

    /// Runs `op`, which queues work on this stream, as one operation: no capture begins, ends or
    /// is joined on the stream meanwhile (the stream's capture lock is held shared, or no capture
    /// runs anywhere and none begins before `op` returns). `op` gets the capture the stream
    /// records into (its graph locked), or `None`. `op` should not block: a capture beginning on
    /// any thread waits for it.
    #[inline]
    pub(crate) fn enqueue<T>(&self, op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>) -> Result<T> {
        self.operation(false, op)
    }

    /// [`enqueue`](Self::enqueue) for operations that may make the stream join a capture (waiting
    /// for an event recorded in one): exclusive of every other operation on the stream.
    pub(crate) fn enqueue_exclusive<T>(&self, op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>) -> Result<T> {
        self.operation(true, op)
    }

    /// The quiet path of an operation, for callers that make their one driver call themselves:
    /// `Some` while the guard lives when no capture runs anywhere (none begins before it is
    /// dropped) and the thread is not running a host function; `None` sends the caller to its
    /// general path (through [`enqueue`](Self::enqueue), which refuses or locks as needed).
    ///
    /// Never for a default stream: other code on the thread (another library) can begin a
    /// capture of it that this crate does not count, so its operations ask the driver (see
    /// [`operation_on_default`](Self::operation_on_default)).
    #[inline]
    pub(crate) fn quietly(&self) -> Option<gate::Quiet> {
        if crate::reaper::in_callback()
            || self.is_default()
            || self.inner.shared.load(std::sync::atomic::Ordering::Relaxed)
        {
            return None;
        }
        gate::enter(&CAPTURES)
    }

    #[inline]
    fn operation<T>(&self, exclusive: bool, op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>) -> Result<T> {
        // No capture runs anywhere, and none begins before this is done (see `gate`): nothing
        // is recorded, and nothing can be joined.
        if let Some(_quiet) = self.quietly() {
            return op(None);
        }
        refuse_in_callback()?;
        if self.is_default() {
            return self.operation_on_default(op);
        }
        self.operation_locked(exclusive, op)
    }

    /// An operation on a default stream: the driver is asked whether the stream is being
    /// captured, every time, and a capture this crate did not begin is refused.
    ///
    /// Why not the quiet path: the per-thread default stream (and the NULL handle, which names
    /// it in per-thread mode) is shared with every library on the thread; cudarc's safe
    /// `per_thread_stream().begin_capture()` captures it without this crate's count of captures
    /// moving. Work queued there would be recorded into a graph that holds nothing it uses.
    ///
    /// Why asking once suffices (no lock, no race): the per-thread stream can be named, captured
    /// and queued on only by the calling thread, so no capture begins between the question and
    /// the queued work; the legacy stream cannot be captured at all. A capture this crate began
    /// on the per-thread stream ([`crate::GraphBuilder::begin_building_shared`], `unsafe`) is
    /// found by its graph and recorded into as on any stream.
    #[cold]
    #[inline(never)]
    fn operation_on_default<T>(&self, op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>) -> Result<T> {
        if self.is_legacy_default() {
            // Never while a blocking stream's capture begins, runs or ends (see
            // `capture::BLOCKING_CAPTURES`). The gate's mark also makes every capture's
            // beginning wait for this operation; and the legacy stream cannot be captured, so
            // there is no capture to ask about.
            let _legacy = capture::legacy_stream_gate()?;
            return op(None);
        }
        // In the gate when no capture of this crate runs (one beginning waits for this, as for
        // the quiet path), else marked as an operation (no capture begins inside it).
        let quiet = gate::enter(&CAPTURES);
        let _mark = quiet.is_none().then(gate::enter_locked);
        capture::with_capture_asked(self.inner.handle, op)
    }

    /// An operation while captures run somewhere: under the stream's capture lock, with the
    /// capture the stream records into, if any. (Out of line: the quiet path above is the one
    /// place the common case calls `op`, so it can be inlined there.)
    #[cold]
    #[inline(never)]
    fn operation_locked<T>(
        &self,
        exclusive: bool,
        op: impl FnOnce(Option<&mut Capture<'_>>) -> Result<T>,
    ) -> Result<T> {
        let (_shared, _exclusive);
        if exclusive {
            _exclusive = self.capture_exclusive();
        } else {
            _shared = self.inner.capture_lock.read().unwrap_or_else(|p| p.into_inner());
        }
        let _mark = gate::enter_locked();
        // A wait may make the stream join a capture: a change of the capture's streams, which
        // no question about a capture may overlap (see `capture::CAPTURE_STATE`).
        let op = |capture: Option<&mut Capture<'_>>| {
            let _change = exclusive.then(capture::capture_change);
            op(capture)
        };
        if self.inner.shared.load(std::sync::atomic::Ordering::Relaxed) {
            // Other code may have begun or joined a capture on it: asked, and refused if not ours.
            return capture::with_capture_asked(self.inner.handle, op);
        }
        with_capture(self.inner.handle, op)
    }

    /// The capture lock, shared, for a driver call that names the stream outside an operation
    /// (a query, a synchronisation): the driver crashes when a stream is asked about while
    /// another thread begins or ends a capture on it (seen on an H100, driver 580: a segfault in
    /// `cuStreamGetCaptureInfo`). `None` for default streams (no other thread begins a capture of
    /// what they name here), or when `wait` is false and a capture is beginning or ending.
    pub(crate) fn capture_shared(&self, wait: bool) -> Option<std::sync::RwLockReadGuard<'_, ()>> {
        if self.is_default() {
            return None;
        }
        if wait {
            Some(self.inner.capture_lock.read().unwrap_or_else(|p| p.into_inner()))
        } else {
            self.inner.capture_lock.try_read().ok()
        }
    }

    /// The capture lock, exclusively: for beginning and ending captures.
    pub(crate) fn capture_exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.inner.capture_lock.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The stream's priority.
    pub fn priority(&self) -> Result<i32> {
        let mut p = 0;
        // SAFETY: the stream is live; out-pointer to a local.
        unsafe { driver::cuStreamGetPriority(self.inner.handle, &mut p) }.check("cuStreamGetPriority")?;
        Ok(p)
    }

    /// Whether the stream does not synchronise with the legacy default stream. Read from the
    /// driver once: when this crate makes the stream, else when first asked (the driver does not
    /// tell it while the stream is being captured).
    pub fn is_nonblocking(&self) -> Result<bool> {
        self.inner.is_nonblocking()
    }

    /// Records `event` on the stream (not an event imported from another process). On a stream
    /// being captured this marks a point of the capture, which other streams can wait for to
    /// join it (no node is recorded, and the graph does not use the event afterwards).
    #[inline]
    pub fn record(&self, event: &Event) -> Result<()> {
        if event.is_ipc_imported() {
            return Err(CudaError::InvalidType(
                "an event opened from another process cannot be recorded".into(),
            ));
        }
        // No capture runs anywhere, and none begins meanwhile: not a capture point.
        if let Some(_quiet) = self.quietly() {
            // SAFETY: both handles are live; the stream is not capturing (quiet).
            unsafe { driver::cuEventRecord(event.handle(), self.inner.handle) }.check("cuEventRecord")?;
            event.note_recorded(false);
            return Ok(());
        }
        refuse_in_callback()?;
        // On a default stream, a capture point of another library's capture would let a stream
        // waiting for the event join that capture: refused (see `operation_on_default`). A
        // record into a capture of this crate is noted (a default stream must not join it: see
        // `wait_event`), under the event's lock.
        let record = |capture: Option<&mut Capture<'_>>| {
            let captured = capture.is_some();
            let _records = captured.then(|| event.records());
            // SAFETY: both handles are live; recording changes no capture state of this stream,
            // and the event outlives the capture that names it (held by its graph, below).
            unsafe { driver::cuEventRecord(event.handle(), self.inner.handle) }.check("cuEventRecord")?;
            event.note_recorded(captured);
            if let Some(capture) = capture {
                // The graph holds the event: it is not destroyed while the capture may refer to
                // it (driver 580 crashed when events recorded into a capture were handed back
                // early: see docs/architecture.md, "What a capture names lives until it is over").
                capture.hold_shared(event.keeper());
            }
            Ok(())
        };
        if self.is_default() {
            return self.operation_on_default(record);
        }
        self.operation_locked(false, record)
    }
}

impl Device {
    /// The default stream, as `cuda.core`'s `Device.default_stream`: the per-thread default
    /// stream when `CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM` is a non-zero integer, else the
    /// legacy default stream (either names the stream of the context current where it is used).
    pub fn default_stream(&self) -> Stream {
        if cuda_sys::per_thread_default_stream() {
            Stream::per_thread_default()
        } else {
            Stream::legacy_default()
        }
    }

    /// A new stream in the device's primary context.
    pub fn create_stream(&self, options: StreamOptions) -> Result<Stream> {
        Stream::new(&self.primary_context()?, options)
    }
}

impl Context {
    /// A new stream in this context. A green context's streams are made by
    /// `cuGreenCtxStreamCreate` and must be non-blocking (`StreamOptions::nonblocking`, the
    /// default): a blocking one is refused, as in `cuda.core`.
    pub fn create_stream(&self, options: StreamOptions) -> Result<Stream> {
        Stream::new(self, options)
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream({:p})", self.inner.handle)
    }
}

/// By handle, as `cuda.core` compares and hashes streams (the default-stream tokens compare
/// equal to themselves only).
impl PartialEq for Stream {
    fn eq(&self, other: &Stream) -> bool {
        self.inner.handle == other.inner.handle
    }
}

impl Eq for Stream {}

impl std::hash::Hash for Stream {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(self.inner.handle, state);
    }
}
