//! `Event`, `EventOptions` and `IpcEventDescriptor`.

use super::Stream;
use crate::device::{Context, Device};
use crate::error::{record_drop_error, Check};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::sync::Arc;

/// Options of a new [`Event`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventOptions {
    /// Record timestamps, for [`Event::elapsed_time_since`] (off by default: cheaper).
    #[serde(alias = "enable_timing")]
    pub timing_enabled: bool,
    /// Block the waiting thread instead of spinning in [`Event::sync`].
    #[serde(alias = "busy_waited_sync")]
    pub blocking_sync: bool,
    /// Shareable with other processes (needs timing off).
    pub ipc_enabled: bool,
}

struct EventInner {
    handle: driver::CUevent,
    _context: Context,
    options: EventOptions,
    /// Opened from another process's IPC descriptor: it can be waited for, not recorded.
    imported: bool,
    /// Whether its last record by this crate was into a capture (see [`Event::recorded_in_capture`]).
    in_capture: std::sync::atomic::AtomicBool,
    /// Held across a record into a capture and across a default stream's wait (see
    /// `Stream::wait_event`), so the wait never follows a record it did not see.
    records: std::sync::Mutex<()>,
}

/// What another process needs to open an IPC event: 64 opaque bytes, serializable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct IpcEventDescriptor {
    /// The driver's `CUipcEventHandle` bytes, to send to the other process as they are.
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

    /// Reads [`to_hex`](Self::to_hex)'s output: exactly 128 hex digits (either case), nothing
    /// else (no signs, spaces or other characters); anything else is an error, never a panic.
    pub fn from_hex(text: &str) -> Result<IpcEventDescriptor> {
        let bad = || {
            CudaError::InvalidArgument(format!(
                "an IPC event descriptor is 128 hex digits (as IpcEventDescriptor::to_hex writes it); got {} bytes{}",
                text.len(),
                if text.bytes().all(|c| c.is_ascii_hexdigit()) {
                    ""
                } else {
                    " with characters that are not hex digits"
                }
            ))
        };
        let digits = text.as_bytes();
        if digits.len() != 128 || !digits.iter().all(u8::is_ascii_hexdigit) {
            return Err(bad());
        }
        let value = |c: u8| match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => c - b'A' + 10, // checked above: an upper-case hex letter
        };
        let mut bytes = [0u8; 64];
        for (b, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            *b = (value(pair[0]) << 4) | value(pair[1]);
        }
        Ok(IpcEventDescriptor { bytes })
    }
}

// SAFETY: a CUevent may be used from any thread.
unsafe impl Send for EventInner {}
// SAFETY: as above.
unsafe impl Sync for EventInner {}

/// Destroys an event.
///
/// # Safety
/// `handle` was made by cuEventCreate (or opened from IPC) and is destroyed once, here.
unsafe fn destroy(handle: driver::CUevent) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { driver::cuEventDestroy(handle) }.check("cuEventDestroy")
}

impl Drop for EventInner {
    fn drop(&mut self) {
        if self.handle.is_null() {
            return; // closed explicitly
        }
        if crate::reaper::in_callback() {
            // On a driver thread: destroyed on the release thread instead.
            let handle = crate::reaper::SendHandle(self.handle);
            crate::reaper::run_later(move || {
                let handle = handle;
                // SAFETY: this inner's handle, handed over here and destroyed nowhere else.
                if let Err(e) = unsafe { destroy(handle.0) } {
                    record_drop_error(e);
                }
            });
            return;
        }
        // SAFETY: the inner's own handle, destroyed once.
        if let Err(e) = unsafe { destroy(self.handle) } {
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
    /// A new event; `bound`: made to be recorded at once ([`Stream::record_new`]), which
    /// `cuda.core` requires of events shared with other processes.
    pub(crate) fn new(context: &Context, options: EventOptions, bound: bool) -> Result<Event> {
        if options.ipc_enabled && !bound {
            return Err(CudaError::InvalidType(
                "IPC-enabled events must be bound; use Stream.record for creation (Stream::record_new here)".into(),
            ));
        }
        if options.ipc_enabled && options.timing_enabled {
            return Err(CudaError::InvalidType("IPC-enabled events cannot use timing.".into()));
        }
        let mut flags = 0;
        if !options.timing_enabled {
            flags |= driver::CUevent_flags::CU_EVENT_DISABLE_TIMING.0;
        }
        if options.blocking_sync {
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
                in_capture: Default::default(),
                records: Default::default(),
            }),
        })
    }

    /// The descriptor another process opens this event with (the event must be `ipc_enabled`).
    pub fn ipc_descriptor(&self) -> Result<IpcEventDescriptor> {
        if !self.inner.options.ipc_enabled {
            return Err(CudaError::InvalidState(
                "Event is not IPC-enabled: only events made with ipc_enabled can be shared".into(),
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
                in_capture: Default::default(),
                records: Default::default(),
            }),
        })
    }

    /// Notes where the event was last recorded: into a capture, or not (the caller holds
    /// [`records`](Self::records) for a record into a capture).
    pub(crate) fn note_recorded(&self, in_capture: bool) {
        self.inner
            .in_capture
            .store(in_capture, std::sync::atomic::Ordering::Release);
    }

    /// Whether this crate last recorded the event into a capture: a stream that waits for it
    /// joins that capture.
    pub(crate) fn recorded_in_capture(&self) -> bool {
        self.inner.in_capture.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The lock a record into a capture and a default stream's wait for the event hold.
    pub(crate) fn records(&self) -> std::sync::MutexGuard<'_, ()> {
        self.inner.records.lock().unwrap_or_else(|p| p.into_inner())
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

    /// What keeps the event alive, for a graph whose capture recorded it (held once however
    /// often it is recorded: see `Stream::record`).
    pub(crate) fn keeper(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        self.inner.clone()
    }

    /// Destroys the event now and returns what the driver said; with other clones alive, only
    /// this reference goes. A graph whose capture recorded the event holds it too: then the
    /// event is destroyed with the last of them (a capture may still name it).
    pub fn close(self) -> Result<()> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                let handle = std::mem::replace(&mut inner.handle, std::ptr::null_mut());
                // SAFETY: destroyed once: the nulled handle tells Drop there is nothing left to
                // destroy.
                unsafe { destroy(handle) }
            }
            Err(_) => Ok(()),
        }
    }

    /// The options it was made with.
    pub fn options(&self) -> EventOptions {
        self.inner.options
    }

    /// The context the event was made in (for an event opened from another process, the
    /// context it was opened in).
    pub fn context(&self) -> &Context {
        &self.inner._context
    }

    /// The device of the event's [`context`](Self::context).
    pub fn device(&self) -> crate::device::Device {
        self.inner._context.device()
    }

    /// Waits until the work before the event's last record is done.
    ///
    /// An event this crate last recorded into a capture is refused: that record runs only in the
    /// graph's launches, and the driver answers from the capture, which may end meanwhile on
    /// another thread (driver 580 crashed on such calls in a raw experiment). The check holds
    /// the event's record lock; the wait does not (a record of the same event into a capture
    /// on another thread meanwhile races with this wait in any case).
    pub fn sync(&self) -> Result<()> {
        super::refuse_in_callback()?;
        self.refuse_captured_now("sync")?;
        // SAFETY: the event is live.
        unsafe { driver::cuEventSynchronize(self.inner.handle) }.check("cuEventSynchronize")
    }

    /// [`refuse_captured`](Self::refuse_captured) under the event's record lock.
    fn refuse_captured_now(&self, what: &str) -> Result<()> {
        let _records = self.records();
        self.refuse_captured(what)
    }

    /// The refusal of a question about an event last recorded into a capture (the caller holds
    /// [`records`](Self::records)).
    fn refuse_captured(&self, what: &str) -> Result<()> {
        if self.recorded_in_capture() {
            return Err(CudaError::InvalidState(format!(
                "Event::{what}: the event was last recorded into a graph capture, where it completes only in the graph's launches; record it on a stream that is not capturing to wait for it"
            )));
        }
        Ok(())
    }

    /// Whether the work before the event's last record is done. An event last recorded into a
    /// capture is refused, as by [`sync`](Self::sync).
    pub fn is_done(&self) -> Result<bool> {
        super::refuse_in_callback()?;
        let _records = self.records();
        self.refuse_captured("is_done")?;
        // SAFETY: the event is live.
        let status = unsafe { driver::cuEventQuery(self.inner.handle) };
        if status == driver::CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        status.check("cuEventQuery").map(|()| true)
    }

    /// Milliseconds from `start` to this event (both recorded with timing, both complete): what
    /// `cuda.core` writes as `end - start`, with its errors.
    pub fn elapsed_time_since(&self, start: &Event) -> Result<f32> {
        if !self.inner.options.timing_enabled || !start.inner.options.timing_enabled {
            return Err(CudaError::InvalidState(
                "Both Events must be created with timing enabled in order to subtract them; use EventOptions { timing_enabled: true, .. } when creating both events.".into(),
            ));
        }
        // Neither last recorded into a capture (see `sync`): both record locks, in address
        // order, across the check and the (non-blocking) call.
        let (first, second) = if Arc::as_ptr(&self.inner) <= Arc::as_ptr(&start.inner) {
            (self, start)
        } else {
            (start, self)
        };
        let _first = first.records();
        let _second = (!Arc::ptr_eq(&first.inner, &second.inner)).then(|| second.records());
        self.refuse_captured("elapsed_time_since")?;
        start.refuse_captured("elapsed_time_since")?;
        let mut ms = 0f32;
        // SAFETY: both events are live; out-pointer to a local.
        let status = unsafe { driver::cuEventElapsedTime(&mut ms, start.inner.handle, self.inner.handle) };
        match status {
            driver::CUresult::CUDA_ERROR_INVALID_HANDLE => Err(CudaError::InvalidState(
                "Both Events must be recorded before they can be subtracted; use Stream::record to record both events to a stream.".into(),
            )),
            driver::CUresult::CUDA_ERROR_NOT_READY => Err(CudaError::InvalidState(
                "One or both events have not completed; use Event::sync, Stream::sync, or Device::sync to wait for the events to complete before subtracting them.".into(),
            )),
            // (Driver 580 answers this for an event whose last record was into a capture,
            // which takes no time; seen in the stress test.)
            driver::CUresult::CUDA_ERROR_INVALID_VALUE => Err(CudaError::InvalidState(
                "One or both events were last recorded into a graph capture, where no time is taken (cuEventElapsedTime: CUDA_ERROR_INVALID_VALUE); record both on a stream that is not capturing.".into(),
            )),
            _ => status.check("cuEventElapsedTime").map(|()| ms),
        }
    }
}

impl Stream {
    /// Records a new event made with `options` in the stream's context and returns it: what
    /// `cuda.core`'s `Stream.record()` does when given no event (IPC-enabled events included).
    pub fn record_new(&self, options: EventOptions) -> Result<Event> {
        let event = Event::new(&self.context_or_current()?, options, true)?;
        self.record(&event)?;
        Ok(event)
    }
}

impl Device {
    /// A new event in the device's primary context. Events shared with other processes are made
    /// by [`Stream::record_new`], as in `cuda.core`.
    pub fn create_event(&self, options: EventOptions) -> Result<Event> {
        Event::new(&self.primary_context()?, options, false)
    }
}

impl Context {
    /// A new event in this context (not an IPC one: see [`Device::create_event`]).
    pub fn create_event(&self, options: EventOptions) -> Result<Event> {
        Event::new(self, options, false)
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Event({:p})", self.inner.handle)
    }
}

/// By handle, as `cuda.core` compares and hashes events (clones of one event are equal).
impl PartialEq for Event {
    fn eq(&self, other: &Event) -> bool {
        self.handle() == other.handle()
    }
}

impl Eq for Event {}

impl std::hash::Hash for Event {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(self.handle(), state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipc_event_descriptors_round_trip_through_hex() {
        let d = IpcEventDescriptor {
            bytes: std::array::from_fn(|i| (i * 37 % 256) as u8),
        };
        let hex = d.to_hex();
        assert_eq!(hex.len(), 128);
        assert_eq!(IpcEventDescriptor::from_hex(&hex).unwrap(), d);
        assert_eq!(IpcEventDescriptor::from_hex(&hex.to_uppercase()).unwrap(), d);
    }

    #[test]
    fn malformed_hex_is_an_error_never_a_panic() {
        // 128 bytes of text whose characters straddle the even offsets a byte-slicing parser cuts.
        let multibyte = "é".repeat(64);
        assert_eq!(multibyte.len(), 128);
        let e = IpcEventDescriptor::from_hex(&multibyte).unwrap_err();
        assert!(e.to_string().contains("not hex digits"), "{e}");
        // Signs parse as numbers for from_str_radix, not here.
        let signed = format!("+f{}", "0".repeat(126));
        assert!(IpcEventDescriptor::from_hex(&signed).is_err());
        assert!(IpcEventDescriptor::from_hex(&"0".repeat(127)).is_err());
        assert!(IpcEventDescriptor::from_hex(&"0".repeat(130)).is_err());
        assert!(IpcEventDescriptor::from_hex(&format!("{} {}", "0".repeat(63), "0".repeat(64))).is_err());
        assert!(IpcEventDescriptor::from_hex("").is_err());
        let mut mixed = "0".repeat(127);
        mixed.push('ß'); // 129 bytes
        assert!(IpcEventDescriptor::from_hex(&mixed).is_err());
    }
}
