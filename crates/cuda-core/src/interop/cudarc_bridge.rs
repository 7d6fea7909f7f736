//! The cudarc bridge (feature `cudarc`): cudarc's streams and device slices here, and buffers
//! handed to cudarc, without copies.
//!
//! **Who keeps the memory alive.** A slice taken from cudarc ([`Buffer::from_cudarc`]) is owned
//! by the buffer: cudarc frees it (stream-ordered, on the slice's own stream) when the buffer and
//! every graph that recorded work on it are gone and the work queued on it here is done. A
//! buffer handed to cudarc ([`Buffer::into_cudarc`]) is cudarc's once the work every stream
//! queued on it here is done (the host waits for it), and cudarc frees it.
//!
//! **Captures.** Neither library holds what the other's work uses: work this crate queued on a
//! stream cudarc is capturing would be recorded into cudarc's graph, and cudarc's work on a
//! stream this crate is capturing into this crate's graph, without the graph holding what the
//! work uses. So lending streams across is `unsafe` (the caller promises no capture through
//! cudarc on them, and no cudarc work on them while this crate captures them). The default
//! streams are every library's: this crate's operations on them ask the driver and refuse a
//! capture cudarc began, and a safe call never captures them. The safe memory handovers order
//! the two sides without sharing a stream:
//! taking a slice waits on the host for cudarc's work on it (unless the buffer's stream is the
//! slice's own, lent here), and a slice whose stream cudarc is capturing is handed back
//! untouched; handing a buffer over waits on the host for the work queued on it here.
//!
//! **Elements.** Only plain-data element types ([`Pod`]): memory crosses between the libraries
//! as bytes, and every byte pattern must be a valid `T` (cudarc's `bool`, for one, is refused).
//!
//! **Current contexts.** cudarc makes its context current on the calling thread in every call;
//! the bridge puts back the thread's previous context after the cudarc calls it makes (unless
//! they destroyed it: then the driver's choice stays).

use crate::device::Context;
use crate::error::Check;
use crate::memory::{wait_for_fence, Buffer, Element, Pod, StridedMemoryView};
use crate::stream::capture::is_capturing;
use crate::stream::sync::sync_handle;
use crate::stream::Stream;
use crate::{CudaError, Result};
use ::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut, DeviceRepr, DriverError};
use cuda_sys::driver;
use std::any::Any;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// Restores the thread's current context when dropped (also when a cudarc call panics).
struct Restore {
    previous: Option<driver::CUcontext>,
    /// Held until the restore: the context made current before, when this crate knows it.
    _held: Option<Context>,
    /// The cudarc context the calls used, let go of just before the restore (its last reference
    /// may destroy it, and cudarc makes it current to do so).
    keep: Option<Arc<CudaContext>>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let Some(previous) = self.previous else { return };
        let destroyed = self.keep.take().is_some_and(|keep| {
            // The last reference to a non-primary context destroys it (cudarc pops it then).
            let last = Arc::strong_count(&keep) == 1 && !keep.is_primary();
            let was_previous = keep.cu_ctx() as driver::CUcontext == previous;
            drop(keep);
            last && was_previous
        });
        if destroyed {
            return;
        }
        // SAFETY: restoring what was current before: alive (held above, or made current by the
        // raw calls of whoever keeps it, and not destroyed by the cudarc calls: checked).
        if let Err(e) = unsafe { driver::cuCtxSetCurrent(previous) }.check("cuCtxSetCurrent") {
            crate::error::record_drop_error(e);
        }
    }
}

/// Runs `f`, which calls cudarc (and so makes `keep`'s context current on this thread), then
/// makes the thread's previous context current again (a failure to is recorded for
/// [`crate::take_drop_errors`]). `keep` goes just before the restore: nothing of cudarc's that
/// `f` drops can destroy a context first.
fn keeping_current<T>(keep: Arc<CudaContext>, f: impl FnOnce() -> T) -> T {
    let mut previous: driver::CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    let got = unsafe { driver::cuCtxGetCurrent(&mut previous) }.check("cuCtxGetCurrent");
    let held = if previous.is_null() {
        None
    } else {
        // SAFETY: the calling thread's current context is live.
        unsafe { Context::from_raw(previous) }.ok()
    };
    let _restore = Restore {
        previous: got.is_ok().then_some(previous),
        _held: held,
        keep: Some(keep),
    };
    f()
}

/// A cudarc error as this crate's, naming the cudarc call.
fn cudarc_error(call: &'static str, e: DriverError) -> CudaError {
    match driver::CUresult(e.0 as u32).check(call) {
        Err(err) => err,
        Ok(()) => CudaError::InvalidArgument(format!("{call}: cudarc reported an error with a success code")),
    }
}

/// A cudarc stream as a driver handle of this crate's bindings.
fn raw_stream(stream: &CudaStream) -> driver::CUstream {
    stream.cu_stream() as driver::CUstream
}

impl Stream {
    /// cudarc's `stream` as a [`Stream`] (no new stream): the result and its clones hold the
    /// `Arc`, so the stream lives as long as either side uses it. Work queued through both is
    /// ordered on the one stream. cudarc's default streams give this crate's values of them
    /// ([`legacy_default`](Self::legacy_default) for the NULL stream,
    /// [`per_thread_default`](Self::per_thread_default)), whose context is the calling thread's
    /// current one where they are used.
    ///
    /// Wrapping one cudarc stream twice (or a stream this crate lent with
    /// [`to_cudarc`](Self::to_cudarc)) gives the `Stream` already wrapping it: every wrapper of a
    /// stream shares its capture lock.
    ///
    /// Every operation of this crate on the result asks the driver whether the stream is being
    /// captured and refuses a capture cudarc began (as on the default streams); cudarc's NULL
    /// stream, which cudarc's calls take for the legacy default stream, gives
    /// [`legacy_default`](Self::legacy_default).
    ///
    /// # Safety
    /// While the returned `Stream` or a clone lives, through cudarc (or any code other than this
    /// crate): no capture is begun, ended or joined on the stream (`begin_capture`,
    /// `end_capture`, `join`/`wait` with a capturing stream or an event recorded in a capture)
    /// at the same time as this crate queues work on it; no capture this crate began on it is
    /// ended or joined; and no work is queued on it while this crate captures it (this crate's
    /// graph would replay that work without holding its memory). A default stream needs none of
    /// this: this crate refuses to work in another library's capture of it, and captures it only
    /// through `unsafe` calls with contracts of their own.
    pub unsafe fn from_cudarc(stream: &Arc<CudaStream>) -> Result<Stream> {
        let handle = raw_stream(stream);
        if handle.is_null() {
            return Ok(Stream::legacy_default());
        }
        let owner: Arc<dyn Any + Send + Sync> = Arc::new(CudarcStream(Some(stream.clone())));
        // SAFETY: the handle is valid while the `Arc` lives, which the result holds; the caller
        // promises the captures.
        unsafe { Stream::from_handle_with_owner(handle, owner) }
    }

    /// This stream as a cudarc stream of `context` (which must be the stream's own context, as
    /// cudarc holds it: `CudaContext::new(ordinal)` for a device's primary context), for cudarc's
    /// operations. Default streams are refused: use cudarc's own (`context.default_stream()`,
    /// `per_thread_stream()`).
    ///
    /// # Safety
    /// The returned stream, and every cudarc object holding it (slices allocated on it, events),
    /// must not be used after the last clone of this `Stream` is gone (cudarc does not keep this
    /// crate's stream alive); and what [`from_cudarc`](Self::from_cudarc) asks of cudarc's calls
    /// on the stream holds. From now on, every operation of this crate on the stream asks the
    /// driver whether it is being captured.
    pub unsafe fn to_cudarc(&self, context: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
        if self.is_default() {
            return Err(CudaError::InvalidArgument(
                "a default stream names a different stream in each context and thread: use cudarc's own (CudaContext::default_stream, per_thread_stream)".into(),
            ));
        }
        let own = self.context().map(Context::handle);
        if own != Some(context.cu_ctx() as driver::CUcontext) {
            return Err(CudaError::InvalidArgument(format!(
                "the stream belongs to context {own:?}, not to the cudarc context {:?} of device {}: pass the cudarc context of the stream's context",
                context.cu_ctx(),
                context.ordinal()
            )));
        }
        self.mark_shared();
        // SAFETY: the handle is a live stream of `context`; the caller keeps it alive while cudarc
        // uses it and promises the captures; the wrapper never destroys it.
        Ok(unsafe { context.wrap_borrowed_stream(self.handle() as _) })
    }
}

/// A cudarc stream a lent [`Stream`] holds: dropped with the calling thread's current context
/// kept (cudarc makes its context current to drop it).
struct CudarcStream(Option<Arc<CudaStream>>);

impl Drop for CudarcStream {
    fn drop(&mut self) {
        if let Some(stream) = self.0.take() {
            let context = stream.context().clone();
            keeping_current(context, move || drop(stream));
        }
    }
}

/// A cudarc slice a buffer owns: dropped (so freed by cudarc, on its stream) with the calling
/// thread's current context kept.
///
/// A slice of cudarc's default stream (the legacy stream: cudarc's free queues work there) is
/// freed only through the legacy-stream gate (see `stream::capture::BLOCKING_CAPTURES`: driver
/// 580 crashes on legacy-stream work while a blocking stream's capture begins or ends), and by
/// the release thread when the gate refuses or on a driver thread.
struct CudarcSlice<T: 'static>(ManuallyDrop<CudaSlice<T>>);

impl<T: 'static> Drop for CudarcSlice<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is not used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.0) };
        if !on_legacy_stream(slice.stream()) {
            drop_keeping_current(slice);
            return;
        }
        let mut job = LegacySliceDrop(Some(slice));
        if crate::reaper::in_callback() || !crate::reaper::Retry::attempt(&mut job) {
            crate::reaper::retry(Box::new(job));
        }
    }
}

/// Whether cudarc's work on `stream` goes to the legacy default stream (cudarc names it NULL).
fn on_legacy_stream(stream: &CudaStream) -> bool {
    raw_stream(stream) as usize <= 1
}

/// Drops cudarc's `slice` with the calling thread's current context kept.
fn drop_keeping_current<T>(slice: CudaSlice<T>) {
    let context = slice.context().clone();
    keeping_current(context, move || drop(slice));
}

/// The free of a slice of cudarc's legacy stream, tried under the legacy-stream gate.
struct LegacySliceDrop<T>(Option<CudaSlice<T>>);

impl<T> crate::reaper::Retry for LegacySliceDrop<T> {
    fn attempt(&mut self) -> bool {
        let Ok(_legacy) = crate::stream::capture::legacy_stream_gate() else {
            return false;
        };
        if let Some(slice) = self.0.take() {
            drop_keeping_current(slice);
        }
        true
    }
}

/// A refused [`Buffer::from_cudarc`] or [`StridedMemoryView::from_cudarc`]: why, and the slice,
/// untouched (`.error` alone for `?` into a [`CudaError`]).
pub struct CudarcTakeError<T> {
    /// Why the slice was not taken.
    pub error: CudaError,
    /// The slice, as it was (`None` when it was taken but the view's layout was refused: the
    /// buffer over it was dropped, and cudarc freed the slice).
    pub slice: Option<CudaSlice<T>>,
}

impl<T> std::fmt::Debug for CudarcTakeError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudarcTakeError")
            .field("error", &self.error)
            .field("slice", &self.slice.as_ref().map(|s| s.len()))
            .finish()
    }
}

impl<T> std::fmt::Display for CudarcTakeError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "taking a cudarc slice: {}", self.error)
    }
}

impl<T> std::error::Error for CudarcTakeError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The slice's address, with the work queued on `stream` from now on ordered after cudarc's
/// work on it. Its own stream first waits for the reads and writes cudarc recorded for it (when
/// cudarc tracks them); then, unless `stream` is that very stream (lent here, not a default
/// one), the host waits: for that stream, or for a default stream for cudarc's whole context
/// (a default stream names another stream in each context and thread). A slice whose stream
/// cudarc is capturing is refused before anything touches it.
fn after_cudarc_work<T>(slice: &mut CudaSlice<T>, stream: &Stream) -> Result<driver::CUdeviceptr> {
    crate::reaper::refuse_in_callback()?;
    let own = slice.stream().clone();
    let handle = raw_stream(&own);
    let default = handle as usize <= 2;
    if !default && is_capturing(handle)? {
        return Err(CudaError::InvalidState(
            "the slice's cudarc stream is being captured into a graph: take the slice once the capture has ended"
                .into(),
        ));
    }
    let context = own.context().clone();
    // cudarc's waits and record on its stream: on its default stream (the legacy stream), only
    // through the legacy-stream gate (see `CudarcSlice`).
    let legacy = if on_legacy_stream(&own) {
        Some(crate::stream::capture::legacy_stream_gate()?)
    } else {
        None
    };
    let ptr = keeping_current(context.clone(), || {
        let (ptr, record) = slice.device_ptr_mut(&own);
        drop(record);
        drop(own);
        ptr
    });
    drop(legacy);
    if !default && is_capturing(handle)? {
        // The waits for cudarc's events made the stream join a capture (an event recorded in
        // one): the memory is not ordered for work outside it. (A lent stream refuses this
        // crate's work in that capture anyway.)
        return Err(CudaError::InvalidState(
            "the slice's last use was recorded in a cudarc capture that is still running: take the slice once the capture has ended".into(),
        ));
    }
    if default || handle != stream.handle() || stream.is_default() {
        // SAFETY: cudarc's context is live (the slice holds it).
        let ours = unsafe { Context::from_raw(context.cu_ctx() as driver::CUcontext) }?;
        if default {
            ours.synchronize()?;
        } else {
            // The stream is live (the slice holds it). Waited for as `Stream::sync` waits: the
            // fence is recorded with no capture of this crate beginning, ending or gaining a
            // stream meanwhile (driver 580 crashed on calls naming a stream whose capture ended
            // meanwhile), and refused if the stream is capturing by now.
            sync_handle(&ours, handle).map_err(|e| {
                e.unwrap_or_else(|| {
                    CudaError::InvalidState(
                        "the slice's cudarc stream began a capture: take the slice once the capture has ended".into(),
                    )
                })
            })?;
        }
    }
    Ok(ptr as driver::CUdeviceptr)
}

impl Buffer {
    /// Takes cudarc's `slice` as a buffer of the same memory, without a copy, for work on
    /// `stream` (its deallocation stream, of the slice's device). The buffer owns the slice:
    /// cudarc frees it, on the slice's stream, once the buffer and every graph that recorded work
    /// on it are gone and that work is done ([`cudarc_slice`](Self::cudarc_slice) lends it
    /// meanwhile).
    ///
    /// Work queued on the buffer follows cudarc's work on the slice: if `stream` is the slice's
    /// own stream (lent with [`Stream::from_cudarc`]) in stream order; otherwise the host waits
    /// for it first. A slice whose stream cudarc is capturing is handed back in the error.
    #[allow(clippy::result_large_err)]
    pub fn from_cudarc<T: DeviceRepr + Pod>(
        mut slice: CudaSlice<T>,
        stream: &Stream,
    ) -> std::result::Result<Buffer, CudarcTakeError<T>> {
        let refuse = |error: CudaError, slice: CudaSlice<T>| CudarcTakeError {
            error,
            slice: Some(slice),
        };
        let device = stream.context_or_current().map(|c| c.device().device_id());
        match device {
            Ok(d) if d == slice.ordinal() => {}
            Ok(d) => {
                let error = CudaError::InvalidArgument(format!(
                    "the slice is memory of device {}, the stream's device is {d}: take it for a stream of its device",
                    slice.ordinal()
                ));
                return Err(refuse(error, slice));
            }
            Err(e) => return Err(refuse(e, slice)),
        }
        let bytes = slice.num_bytes();
        let ptr = match after_cudarc_work(&mut slice, stream) {
            Ok(p) => p,
            Err(e) => return Err(refuse(e, slice)),
        };
        let owner = CudarcSlice(ManuallyDrop::new(slice));
        // SAFETY: the slice's `bytes` bytes from `ptr` are device memory for as long as the
        // slice lives, which the buffer owns (the keeper drops it after the work on it). On an
        // error the owner is dropped (the slice freed by cudarc): nothing used it here.
        unsafe { Buffer::from_handle_with_owner(ptr, bytes, owner, stream) }
            .map_err(|error| CudarcTakeError { error, slice: None })
    }

    /// The cudarc slice this buffer took ([`from_cudarc`](Self::from_cudarc)), when its elements
    /// are `T`s: cudarc can read it, ordered by its own streams (work queued on the buffer here
    /// is not ordered with it).
    pub fn cudarc_slice<T: Pod>(&self) -> Option<&CudaSlice<T>> {
        self.owner()
            .and_then(|o| o.downcast_ref::<CudarcSlice<T>>())
            .map(|s| &*s.0)
    }

    /// Hands the memory to cudarc as a slice of `T`s, without a copy, once the work every stream
    /// queued on the buffer here is done (the host waits for it), so that cudarc may use it on
    /// any stream; cudarc frees it when the slice goes.
    ///
    /// - A buffer that took a cudarc slice of `T`s ([`from_cudarc`](Self::from_cudarc)) gives
    ///   that slice back (on its own stream; `stream` is not used).
    /// - Memory of a [`DeviceMemoryResource`](crate::DeviceMemoryResource) this process
    ///   allocated, of `stream`'s device, becomes a slice on `stream` (cudarc frees it with
    ///   `cuMemFreeAsync` there, as the pool would), of whole `T`s at `T`'s alignment.
    ///
    /// Refused, with the buffer handed back untouched in the error: graph memory, memory a graph
    /// holds (it recorded work on it), other foreign, imported or pinned memory, zero bytes
    /// (cudarc has no empty slices), buffers a stream being captured has used (once the capture
    /// ends they can go), and a cudarc context with an error pending.
    #[allow(clippy::result_large_err)]
    pub fn into_cudarc<T: DeviceRepr + Pod>(
        self,
        stream: &Arc<CudaStream>,
    ) -> std::result::Result<CudaSlice<T>, CudarcHandoverError> {
        let refuse = |buffer: Buffer, error: CudaError| Err(CudarcHandoverError { error, buffer });
        if let Err(e) = crate::reaper::refuse_in_callback() {
            return refuse(self, e);
        }
        let mut wait = |fence: driver::CUevent| wait_for_fence(fence);
        if self.cudarc_slice::<T>().is_some() {
            let owner = self
                .reclaim_owner(&mut wait)
                .map_err(|(error, buffer)| CudarcHandoverError { error, buffer })?;
            return match owner.downcast::<CudarcSlice<T>>().map(Arc::try_unwrap) {
                Ok(Ok(slice)) => {
                    let mut slice = ManuallyDrop::new(slice);
                    // SAFETY: taken once; the wrapper is forgotten (its Drop would drop it).
                    Ok(unsafe { ManuallyDrop::take(&mut slice.0) })
                }
                // `reclaim_owner` hands back the only reference, to what `cudarc_slice` found.
                _ => unreachable!("the reclaimed owner is the buffer's cudarc slice, unshared"),
            };
        }
        let item = std::mem::size_of::<T>();
        if item == 0 || self.size() == 0 || !self.size().is_multiple_of(item) {
            let size = self.size();
            let error = CudaError::InvalidArgument(format!(
                "a buffer of {size} bytes is not a whole, non-zero number of {item}-byte elements"
            ));
            return refuse(self, error);
        }
        if !self.handle().is_multiple_of(std::mem::align_of::<T>() as u64) {
            let error = CudaError::InvalidArgument(format!(
                "the memory at {:#x} is not aligned for the element type",
                self.handle()
            ));
            return refuse(self, error);
        }
        // cudarc's slice is made first (it may fail, or panic on an error pending in its
        // context), while the buffer still owns the memory.
        let (ptr, len) = (self.handle(), self.size() / item);
        let made = keeping_current(stream.context().clone(), || {
            stream
                .context()
                .bind_to_thread()
                .map_err(|e| cudarc_error("cudarc", e))?;
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: `ptr` is `len` whole `T`s of device memory, aligned; the slice is
                // given the memory below only once the buffer has let go of it (or leaked
                // without freeing anything); `T` is plain data, so every byte pattern is valid.
                unsafe { stream.upgrade_device_ptr::<T>(ptr as _, len) }
            }))
            .map_err(|_| {
                CudaError::InvalidArgument("cudarc failed to make the slice (an event could not be created)".into())
            })
        });
        let slice = match made {
            Ok(slice) => slice,
            Err(e) => return refuse(self, e),
        };
        match self.surrender(stream.context().ordinal(), &mut wait) {
            // The memory is idle (the host waited for every use) and cudarc's alone now.
            Ok(_) => Ok(slice),
            Err((error, buffer)) => {
                // The buffer keeps the memory: the slice lets go of it without freeing it.
                let _ = keeping_current(stream.context().clone(), || slice.leak());
                Err(CudarcHandoverError { error, buffer })
            }
        }
    }
}

/// A refused [`Buffer::into_cudarc`]: why, and the buffer, untouched (`.error` alone for `?`
/// into a [`CudaError`]; no `From` impl, which would make `?` ambiguous elsewhere).
#[derive(Debug)]
pub struct CudarcHandoverError {
    /// Why the buffer was not handed over.
    pub error: CudaError,
    /// The buffer, as it was.
    pub buffer: Buffer,
}

impl std::fmt::Display for CudarcHandoverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "handing a buffer to cudarc: {}", self.error)
    }
}

impl std::error::Error for CudarcHandoverError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl StridedMemoryView<'static> {
    /// Takes cudarc's `slice` as a view of its elements with `shape` and `strides` (in elements;
    /// `None`: row-major), without a copy: [`Buffer::from_cudarc`] then
    /// [`from_buffer_owned`](Self::from_buffer_owned). A layout outside the slice is checked
    /// before the slice is taken, and refused with the slice handed back.
    #[allow(clippy::result_large_err)]
    pub fn from_cudarc<T: Element + DeviceRepr>(
        slice: CudaSlice<T>,
        shape: &[usize],
        strides: Option<&[isize]>,
        stream: &Stream,
    ) -> std::result::Result<StridedMemoryView<'static>, CudarcTakeError<T>> {
        // The layout, checked against the slice's extent (the same check the view makes).
        let fits = StridedMemoryView::check_layout(shape, strides, T::DTYPE, slice.num_bytes());
        if let Err(error) = fits {
            return Err(CudarcTakeError {
                error,
                slice: Some(slice),
            });
        }
        let buffer = Buffer::from_cudarc(slice, stream)?;
        StridedMemoryView::from_buffer_owned(buffer, shape, strides, T::DTYPE, false)
            .map_err(|error| CudarcTakeError { error, slice: None })
    }
}
