//! `Stream`, `StreamOptions`, `Event`, `EventOptions`.

use crate::device::{Context, Device};
use crate::error::{record_drop_error, Check};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

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
    owned: bool,
}

// SAFETY: a CUstream may be used from any thread; the driver orders work on it.
unsafe impl Send for StreamInner {}
// SAFETY: as above.
unsafe impl Sync for StreamInner {}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: made by cuStreamCreateWithPriority and destroyed once; the driver lets work
            // already queued finish.
            if let Err(e) = unsafe { driver::cuStreamDestroy(self.handle) }.check("cuStreamDestroy") {
                record_drop_error(e);
            }
        }
    }
}

/// A CUDA stream: work on it runs in order. Cheap to clone (shared); it keeps its context.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

impl Stream {
    pub(crate) fn new(context: &Context, options: StreamOptions) -> Result<Stream> {
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
        let handle = context.with_current(|| {
            let mut s: driver::CUstream = std::ptr::null_mut();
            // SAFETY: the context is current; out-pointer to a local.
            unsafe { driver::cuStreamCreateWithPriority(&mut s, flags, priority) }
                .check("cuStreamCreateWithPriority")?;
            Ok(s)
        })?;
        Ok(Stream {
            inner: Arc::new(StreamInner {
                handle,
                context: Some(context.clone()),
                owned: true,
            }),
        })
    }

    /// Wraps a stream made elsewhere, without taking ownership (it is never destroyed here).
    ///
    /// # Safety
    /// `handle` must be a valid stream (or `CU_STREAM_LEGACY`/`CU_STREAM_PER_THREAD`) for as long
    /// as the returned `Stream` and its clones are used.
    pub unsafe fn from_handle(handle: driver::CUstream) -> Stream {
        Stream {
            inner: Arc::new(StreamInner {
                handle,
                context: None,
                owned: false,
            }),
        }
    }

    /// The legacy default stream (`CU_STREAM_LEGACY`), of whatever context is current.
    pub fn legacy_default() -> Stream {
        // SAFETY: CU_STREAM_LEGACY is a valid stream handle in every context.
        unsafe { Stream::from_handle(1 as driver::CUstream) }
    }

    /// The per-thread default stream (`CU_STREAM_PER_THREAD`), of whatever context is current.
    pub fn per_thread_default() -> Stream {
        // SAFETY: CU_STREAM_PER_THREAD is a valid stream handle in every context.
        unsafe { Stream::from_handle(2 as driver::CUstream) }
    }

    /// The `CUstream`.
    #[inline]
    pub fn handle(&self) -> driver::CUstream {
        self.inner.handle
    }

    /// Destroys the stream now and returns what the driver said (dropping it does the same and
    /// records an error for [`crate::take_drop_errors`]). With other clones alive, only this
    /// reference goes; the last one destroys the stream. Work already queued still runs. A closed
    /// stream cannot be used again: `close` takes it by value.
    pub fn close(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) if inner.owned => {
                inner.owned = false; // destroyed here, not again in Drop
                                     // SAFETY: made by cuStreamCreateWithPriority, destroyed once.
                unsafe { driver::cuStreamDestroy(inner.handle) }.check("cuStreamDestroy")
            }
            _ => Ok(()),
        }
    }

    /// The context the stream was made in (`None` for a wrapped foreign stream).
    pub fn context(&self) -> Option<&Context> {
        self.inner.context.as_ref()
    }

    /// The stream's context, or (for the default streams and foreign ones) the current device's
    /// primary context.
    pub(crate) fn context_or_current(&self) -> Result<Context> {
        match self.context() {
            Some(c) => Ok(c.clone()),
            None => Device::current()?.primary_context(),
        }
    }

    /// The device of the stream's context.
    pub fn device(&self) -> Option<Device> {
        self.inner.context.as_ref().map(Context::device)
    }

    /// Waits until all work on the stream is done.
    pub fn sync(&self) -> Result<()> {
        // SAFETY: the stream is live.
        unsafe { driver::cuStreamSynchronize(self.inner.handle) }.check("cuStreamSynchronize")
    }

    /// Whether all work on the stream is done.
    pub fn is_done(&self) -> Result<bool> {
        // SAFETY: the stream is live.
        let status = unsafe { driver::cuStreamQuery(self.inner.handle) };
        if status == driver::CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        status.check("cuStreamQuery").map(|()| true)
    }

    /// The stream's priority.
    pub fn priority(&self) -> Result<i32> {
        let mut p = 0;
        // SAFETY: the stream is live; out-pointer to a local.
        unsafe { driver::cuStreamGetPriority(self.inner.handle, &mut p) }.check("cuStreamGetPriority")?;
        Ok(p)
    }

    /// Whether the stream does not synchronise with the legacy default stream.
    pub fn is_nonblocking(&self) -> Result<bool> {
        let mut flags = 0;
        // SAFETY: the stream is live; out-pointer to a local.
        unsafe { driver::cuStreamGetFlags(self.inner.handle, &mut flags) }.check("cuStreamGetFlags")?;
        Ok(flags & driver::CUstream_flags::CU_STREAM_NON_BLOCKING.0 != 0)
    }

    /// Records `event` on the stream (not an event imported from another process).
    pub fn record(&self, event: &Event) -> Result<()> {
        if event.is_ipc_imported() {
            return Err(CudaError::InvalidArgument(
                "an event opened from another process cannot be recorded".into(),
            ));
        }
        if let Some(graph) = crate::graph::capture_target(self)? {
            crate::graph::attach(graph, event.clone())?;
        }
        // SAFETY: both handles are live.
        unsafe { driver::cuEventRecord(event.handle(), self.inner.handle) }.check("cuEventRecord")
    }

    /// Makes later work on this stream wait for `event`.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        if let Some(graph) = crate::graph::capture_target(self)? {
            crate::graph::attach(graph, event.clone())?;
        }
        // SAFETY: both handles are live.
        unsafe { driver::cuStreamWaitEvent(self.inner.handle, event.handle(), 0) }.check("cuStreamWaitEvent")
    }

    /// Makes later work on this stream wait for the work queued on `other` so far (also across
    /// devices): a timing-free event recorded on `other`.
    pub fn wait(&self, other: &Stream) -> Result<()> {
        let event = Event::new(&other.context_or_current()?, EventOptions::default())?;
        other.record(&event)?;
        self.wait_event(&event)
    }

    /// Runs `f` on a driver thread once the work queued so far is done. A panic in `f` is caught
    /// (never unwinds into the driver) and recorded as an error for [`crate::take_drop_errors`].
    /// `f` must not call CUDA. On a stream being captured into a graph this is an error: a graph
    /// runs its callbacks at every launch, so use [`crate::graph::GraphBuilder::callback`].
    pub fn launch_host_func(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        if crate::graph::capture_target(self)?.is_some() {
            return Err(CudaError::InvalidArgument(
                "launch_host_func runs its closure once, but a captured graph calls it at every launch: use GraphBuilder::callback".into(),
            ));
        }
        type Callback = Box<dyn FnOnce() + Send + 'static>;
        unsafe extern "C" fn trampoline(data: *mut c_void) {
            // SAFETY: data is the Box<Callback> leaked below, handed to the driver exactly once.
            let f = unsafe { Box::from_raw(data as *mut Callback) };
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
                record_drop_error(CudaError::InvalidArgument("a stream host callback panicked".into()));
            }
        }
        let data = Box::into_raw(Box::new(Box::new(f) as Callback));
        // SAFETY: the stream is live; the driver calls trampoline once with data.
        let status = unsafe { driver::cuLaunchHostFunc(self.inner.handle, Some(trampoline), data.cast()) };
        if let Err(e) = status.check("cuLaunchHostFunc") {
            // SAFETY: the driver did not take data: reclaim it.
            drop(unsafe { Box::from_raw(data) });
            return Err(e);
        }
        Ok(())
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream({:p})", self.inner.handle)
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Stream) -> bool {
        self.inner.handle == other.inner.handle
    }
}

/// Options of a new [`Event`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventOptions {
    /// Record timestamps, for [`Event::elapsed_time_since`] (off by default: cheaper).
    pub enable_timing: bool,
    /// Block the waiting thread instead of spinning in [`Event::sync`].
    pub busy_waited_sync: bool,
    /// Shareable with other processes (needs timing off).
    pub ipc_enabled: bool,
}

struct EventInner {
    handle: driver::CUevent,
    _context: Context,
    options: EventOptions,
    /// Opened from another process's IPC descriptor: it can be waited for, not recorded.
    imported: bool,
}

/// What another process needs to open an IPC event: 64 opaque bytes, serializable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct IpcEventDescriptor {
    #[serde(with = "serde_bytes_64")]
    pub bytes: [u8; 64],
}

mod serde_bytes_64 {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    pub fn serialize<S: Serializer>(b: &[u8; 64], s: S) -> Result<S::Ok, S::Error> {
        b.as_slice().serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 64], D::Error> {
        let v = Vec::<u8>::deserialize(d)?;
        v.try_into()
            .map_err(|_| serde::de::Error::custom("an IPC event descriptor has 64 bytes"))
    }
}

impl IpcEventDescriptor {
    /// The descriptor as 128 hex digits, for an environment variable or a command line.
    pub fn to_hex(&self) -> String {
        self.bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads [`to_hex`](Self::to_hex)'s output.
    pub fn from_hex(text: &str) -> Result<IpcEventDescriptor> {
        let bad = || CudaError::InvalidArgument("an IPC event descriptor is 128 hex digits".into());
        if text.len() != 128 {
            return Err(bad());
        }
        let mut bytes = [0u8; 64];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(IpcEventDescriptor { bytes })
    }
}

// SAFETY: a CUevent may be used from any thread.
unsafe impl Send for EventInner {}
// SAFETY: as above.
unsafe impl Sync for EventInner {}

impl Drop for EventInner {
    fn drop(&mut self) {
        if self.handle.is_null() {
            return; // closed explicitly
        }
        // SAFETY: made by cuEventCreate, destroyed once.
        if let Err(e) = unsafe { driver::cuEventDestroy(self.handle) }.check("cuEventDestroy") {
            record_drop_error(e);
        }
    }
}

/// A CUDA event: a point in a stream to wait for or time. Cheap to clone (shared).
#[derive(Clone)]
pub struct Event {
    inner: Arc<EventInner>,
}

impl Event {
    pub(crate) fn new(context: &Context, options: EventOptions) -> Result<Event> {
        if options.ipc_enabled && options.enable_timing {
            return Err(CudaError::InvalidArgument(
                "EventOptions: an IPC event cannot record timing".into(),
            ));
        }
        let mut flags = 0;
        if !options.enable_timing {
            flags |= driver::CUevent_flags::CU_EVENT_DISABLE_TIMING.0;
        }
        if options.busy_waited_sync {
            flags |= driver::CUevent_flags::CU_EVENT_BLOCKING_SYNC.0;
        }
        if options.ipc_enabled {
            flags |= driver::CUevent_flags::CU_EVENT_INTERPROCESS.0;
        }
        let handle = context.with_current(|| {
            let mut e: driver::CUevent = std::ptr::null_mut();
            // SAFETY: the context is current; out-pointer to a local.
            unsafe { driver::cuEventCreate(&mut e, flags) }.check("cuEventCreate")?;
            Ok(e)
        })?;
        Ok(Event {
            inner: Arc::new(EventInner {
                handle,
                _context: context.clone(),
                options,
                imported: false,
            }),
        })
    }

    /// The descriptor another process opens this event with (the event must be `ipc_enabled`).
    pub fn ipc_descriptor(&self) -> Result<IpcEventDescriptor> {
        if !self.inner.options.ipc_enabled {
            return Err(CudaError::InvalidArgument(
                "only events made with ipc_enabled can be shared".into(),
            ));
        }
        let mut handle = driver::CUipcEventHandle::default();
        // SAFETY: the event is live; out-pointer to a local.
        unsafe { driver::cuIpcGetEventHandle(&mut handle, self.inner.handle) }.check("cuIpcGetEventHandle")?;
        Ok(IpcEventDescriptor {
            bytes: handle.reserved.map(|c| c as u8),
        })
    }

    /// Opens an event another process shared, in `context`. It can be waited for and queried,
    /// not recorded.
    pub fn from_ipc_descriptor(context: &Context, descriptor: &IpcEventDescriptor) -> Result<Event> {
        let handle = driver::CUipcEventHandle {
            reserved: descriptor.bytes.map(|b| b as std::ffi::c_char),
        };
        let event = context.with_current(|| {
            let mut e: driver::CUevent = std::ptr::null_mut();
            // SAFETY: the context is current; out-pointer to a local.
            unsafe { driver::cuIpcOpenEventHandle(&mut e, handle) }.check("cuIpcOpenEventHandle")?;
            Ok(e)
        })?;
        let options = EventOptions {
            ipc_enabled: true,
            ..Default::default()
        };
        Ok(Event {
            inner: Arc::new(EventInner {
                handle: event,
                _context: context.clone(),
                options,
                imported: true,
            }),
        })
    }

    /// Whether the event was opened from another process.
    pub fn is_ipc_imported(&self) -> bool {
        self.inner.imported
    }

    /// The `CUevent`.
    #[inline]
    pub fn handle(&self) -> driver::CUevent {
        self.inner.handle
    }

    /// Destroys the event now and returns what the driver said; with other clones alive, only
    /// this reference goes.
    pub fn close(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                let handle = std::mem::replace(&mut inner.handle, std::ptr::null_mut());
                // SAFETY: made by cuEventCreate (or opened from IPC) and destroyed once: the
                // nulled handle tells Drop there is nothing left to destroy.
                unsafe { driver::cuEventDestroy(handle) }.check("cuEventDestroy")
            }
            Err(_) => Ok(()),
        }
    }

    /// The options it was made with.
    pub fn options(&self) -> EventOptions {
        self.inner.options
    }

    /// Waits until the work before the event's last record is done.
    pub fn sync(&self) -> Result<()> {
        // SAFETY: the event is live.
        unsafe { driver::cuEventSynchronize(self.inner.handle) }.check("cuEventSynchronize")
    }

    /// Whether the work before the event's last record is done.
    pub fn is_done(&self) -> Result<bool> {
        // SAFETY: the event is live.
        let status = unsafe { driver::cuEventQuery(self.inner.handle) };
        if status == driver::CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        status.check("cuEventQuery").map(|()| true)
    }

    /// Milliseconds from `start` to this event (both recorded with timing, both complete): what
    /// `cuda.core` writes as `end - start`.
    pub fn elapsed_time_since(&self, start: &Event) -> Result<f32> {
        if !self.inner.options.enable_timing || !start.inner.options.enable_timing {
            return Err(CudaError::InvalidArgument(
                "elapsed time needs events made with enable_timing".into(),
            ));
        }
        let mut ms = 0f32;
        // SAFETY: both events are live; out-pointer to a local.
        unsafe { driver::cuEventElapsedTime(&mut ms, start.inner.handle, self.inner.handle) }
            .check("cuEventElapsedTime")?;
        Ok(ms)
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Event({:p})", self.inner.handle)
    }
}
