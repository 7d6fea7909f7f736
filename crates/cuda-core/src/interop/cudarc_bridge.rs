//! The cudarc bridge (feature `cudarc`): cudarc's streams and device slices here, and buffers
//! handed to cudarc, without copies.
//!
//! **Who keeps the memory alive.** A slice taken from cudarc ([`Buffer::from_cudarc`]) is owned
//! by the buffer: cudarc frees it (stream-ordered, on the slice's own stream) when the buffer and
//! every graph that recorded work on it are gone and the work queued on it here is done. A
//! buffer handed to cudarc ([`Buffer::into_cudarc`]) is cudarc's: cudarc's stream waits for the
//! work every stream queued on it here, and cudarc frees it.
//!
//! **Captures.** Neither library sees the other's captures: work this crate queues on a stream
//! cudarc is capturing would be recorded into cudarc's graph without the graph holding what the
//! work uses. So lending streams across is `unsafe` (the caller promises no capture through
//! cudarc on them), and the safe memory handovers order the two sides without sharing a stream:
//! taking a slice waits on the host for cudarc's work on it (a stream cudarc is capturing
//! refuses that wait), handing a buffer over makes cudarc's stream wait for fences recorded here
//! outside any capture.
//!
//! **Current contexts.** cudarc makes its context current on the calling thread in every call;
//! the bridge puts back the thread's previous context after the cudarc calls it makes.

use crate::device::Context;
use crate::error::Check;
use crate::memory::{Buffer, Element, StridedMemoryView};
use crate::stream::Stream;
use crate::{CudaError, Result};
use ::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut, DeviceRepr, DriverError};
use cuda_sys::driver;
use std::any::Any;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// A cudarc error as this crate's, naming the cudarc call.
fn cudarc_error(call: &'static str, e: DriverError) -> CudaError {
    match driver::CUresult(e.0 as u32).check(call) {
        Err(err) => err,
        Ok(()) => CudaError::InvalidArgument(format!("{call}: cudarc reported an error with a success code")),
    }
}

/// Runs `f`, which calls cudarc (and so makes cudarc's context current on this thread), then
/// makes the thread's previous context current again (a failure to is recorded for
/// [`crate::take_drop_errors`]). `keep` is held until then: the cudarc context, so that
/// dropping cudarc objects inside `f` cannot destroy a context made current before.
fn keeping_current<T>(keep: &Arc<CudaContext>, f: impl FnOnce() -> T) -> T {
    let _keep = keep.clone();
    let mut previous: driver::CUcontext = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    let got = unsafe { driver::cuCtxGetCurrent(&mut previous) }.check("cuCtxGetCurrent");
    // What this crate made current stays alive while current (the thread's stack holds it); a
    // context made current by a raw call is its maker's to keep.
    let _held = if previous.is_null() {
        None
    } else {
        // SAFETY: the calling thread's current context is live.
        unsafe { Context::from_raw(previous) }.ok()
    };
    let value = f();
    // SAFETY: restoring what was current before, kept alive as above.
    let restored = got.and_then(|()| unsafe { driver::cuCtxSetCurrent(previous) }.check("cuCtxSetCurrent"));
    if let Err(e) = restored {
        crate::error::record_drop_error(e);
    }
    value
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
    /// # Safety
    /// No capture may be begun on the stream through cudarc (`CudaStream::begin_capture`) or any
    /// way other than this crate while the returned `Stream` or a clone lives: this crate would
    /// not know its work is being recorded into a graph, which would then use memory that is
    /// freed meanwhile.
    pub unsafe fn from_cudarc(stream: &Arc<CudaStream>) -> Result<Stream> {
        let owner: Arc<dyn Any + Send + Sync> = stream.clone();
        // SAFETY: the handle is valid while the `Arc` lives, which the result holds; the caller
        // promises the captures.
        unsafe { Stream::from_handle_with_owner(raw_stream(stream), owner) }
    }

    /// This stream as a cudarc stream of `context` (which must be the stream's own context, as
    /// cudarc holds it: `CudaContext::new(ordinal)` for a device's primary context), for cudarc's
    /// operations. Default streams are refused: use cudarc's own (`context.default_stream()`,
    /// `per_thread_stream()`).
    ///
    /// # Safety
    /// The returned stream, and every cudarc object holding it (slices allocated on it, events),
    /// must not be used after the last clone of this `Stream` is gone (cudarc does not keep this
    /// crate's stream alive); and no capture may be begun on it through cudarc (see
    /// [`from_cudarc`](Self::from_cudarc)).
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
        // SAFETY: the handle is a live stream of `context`; the caller keeps it alive while cudarc
        // uses it and promises the captures; the wrapper never destroys it.
        Ok(unsafe { context.wrap_borrowed_stream(self.handle() as _) })
    }
}

/// A cudarc slice a buffer owns: dropped (so freed by cudarc, on its stream) with the calling
/// thread's current context kept.
struct CudarcSlice<T>(ManuallyDrop<CudaSlice<T>>);

impl<T> Drop for CudarcSlice<T> {
    fn drop(&mut self) {
        let context = self.0.context().clone();
        keeping_current(&context, || {
            // SAFETY: dropped once, here; the field is not used again.
            unsafe { ManuallyDrop::drop(&mut self.0) }
        });
    }
}

/// The slice's address, with the work queued from now on ordered after cudarc's work on it:
/// its stream waits for the reads and writes cudarc recorded for it (when cudarc tracks them);
/// then, unless `stream` is that very stream (not a default one), the host waits for cudarc's
/// stream.
fn after_cudarc_work<T>(slice: &mut CudaSlice<T>, stream: &Stream) -> Result<driver::CUdeviceptr> {
    let own = slice.stream().clone();
    let ptr = keeping_current(own.context(), || {
        let (ptr, record) = slice.device_ptr_mut(&own);
        drop(record);
        ptr
    });
    own.context()
        .check_err()
        .map_err(|e| cudarc_error("cudarc (ordering after the slice's reads and writes)", e))?;
    let handle = raw_stream(&own);
    if handle != stream.handle() || stream.is_default() {
        // A stream being captured refuses the wait (which ends that capture): it is never joined.
        // SAFETY: the stream is live (the slice holds it).
        unsafe { driver::cuStreamSynchronize(handle) }.check("cuStreamSynchronize (the cudarc slice's stream)")?;
    }
    Ok(ptr as driver::CUdeviceptr)
}

impl Buffer {
    /// Takes cudarc's `slice` as a buffer of the same memory, without a copy, for work on
    /// `stream` (its deallocation stream). The buffer owns the slice: cudarc frees it, on the
    /// slice's stream, once the buffer and every graph that recorded work on it are gone and
    /// that work is done ([`cudarc_slice`](Self::cudarc_slice) lends it meanwhile).
    ///
    /// Work queued on the buffer follows cudarc's work on the slice: if `stream` is the slice's
    /// own stream (lent with [`Stream::from_cudarc`]) in stream order; otherwise the host waits
    /// for the slice's stream first, and a slice whose stream cudarc is capturing is refused.
    pub fn from_cudarc<T: DeviceRepr + 'static>(mut slice: CudaSlice<T>, stream: &Stream) -> Result<Buffer> {
        let bytes = slice.num_bytes();
        let ptr = after_cudarc_work(&mut slice, stream)?;
        let owner = CudarcSlice(ManuallyDrop::new(slice));
        // SAFETY: the slice's `bytes` bytes from `ptr` are device memory for as long as the
        // slice lives, which the buffer owns (the keeper drops it after the work on it).
        unsafe { Buffer::from_handle_with_owner(ptr, bytes, owner, stream) }
    }

    /// The cudarc slice this buffer took ([`from_cudarc`](Self::from_cudarc)), when its elements
    /// are `T`s: cudarc can read it, ordered by its own streams (work queued on the buffer here
    /// is not ordered with it).
    pub fn cudarc_slice<T: 'static>(&self) -> Option<&CudaSlice<T>> {
        self.owner()
            .and_then(|o| o.downcast_ref::<CudarcSlice<T>>())
            .map(|s| &*s.0)
    }

    /// Hands the memory to cudarc as a slice of `T`s, without a copy: cudarc's stream first
    /// waits for the work every stream queued on the buffer here, and cudarc frees the memory
    /// when the slice goes.
    ///
    /// - A buffer that took a cudarc slice of `T`s ([`from_cudarc`](Self::from_cudarc)) gives
    ///   that slice back (its own stream, and `stream`, wait for the work queued here).
    /// - Memory of a [`DeviceMemoryResource`](crate::DeviceMemoryResource) this process
    ///   allocated, of `stream`'s device, becomes a slice on `stream` (which frees it with
    ///   `cuMemFreeAsync`, as the pool would), of whole `T`s at `T`'s alignment.
    ///
    /// Refused, with the buffer handed back untouched in the error: graph memory, memory a graph
    /// holds (it recorded work on it), other foreign, imported or pinned memory, zero bytes
    /// (cudarc has no empty slices), buffers a stream being captured has used (once the capture
    /// ends they can go), and a `stream` cudarc is capturing.
    #[allow(clippy::result_large_err)]
    pub fn into_cudarc<T: DeviceRepr + 'static>(
        self,
        stream: &Arc<CudaStream>,
    ) -> std::result::Result<CudaSlice<T>, CudarcHandoverError> {
        let refuse = |buffer: Buffer, why: String| {
            Err(CudarcHandoverError {
                error: CudaError::InvalidArgument(why),
                buffer,
            })
        };
        let target = raw_stream(stream);
        let mut capturing = driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the stream is live (the `Arc`); out-pointer to a local.
        let status = unsafe { driver::cuStreamIsCapturing(target, &mut capturing) }.check("cuStreamIsCapturing");
        if let Err(error) = status {
            return Err(CudarcHandoverError { error, buffer: self });
        }
        if capturing != driver::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return refuse(
                self,
                "the cudarc stream is being captured into a graph: hand the buffer over once the capture has ended"
                    .into(),
            );
        }
        if let Some(own) = self.cudarc_slice::<T>().map(|s| raw_stream(s.stream())) {
            let mut wait = |fence: driver::CUevent| {
                for s in [target, own] {
                    // SAFETY: both are live (the slice holds its stream); the wait orders the
                    // stream after the fence's work.
                    unsafe { driver::cuStreamWaitEvent(s, fence, 0) }.check("cuStreamWaitEvent")?;
                }
                Ok(())
            };
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
            return refuse(
                self,
                format!("a buffer of {size} bytes is not a whole, non-zero number of {item}-byte elements"),
            );
        }
        if !self.handle().is_multiple_of(std::mem::align_of::<T>() as u64) {
            let at = self.handle();
            return refuse(
                self,
                format!("the memory at {at:#x} is not aligned for the element type"),
            );
        }
        let mut wait = |fence: driver::CUevent| {
            // SAFETY: both are live; the wait orders cudarc's stream after the fence's work.
            unsafe { driver::cuStreamWaitEvent(target, fence, 0) }.check("cuStreamWaitEvent")
        };
        let (ptr, size) = self
            .surrender(stream.context().ordinal(), &mut wait)
            .map_err(|(error, buffer)| CudarcHandoverError { error, buffer })?;
        let len = size / item;
        // SAFETY: `ptr` is one whole allocation of `size` bytes of a pool of the stream's device
        // that nothing else frees now (the buffer let go of it), which `cuMemFreeAsync` on
        // cudarc's stream frees; cudarc's stream follows every use made of it here (the waits);
        // the bytes were initialised or not as the buffer's were, and `T` is plain device data.
        Ok(keeping_current(stream.context(), || unsafe {
            stream.upgrade_device_ptr::<T>(ptr as _, len)
        }))
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
    /// [`from_buffer_owned`](Self::from_buffer_owned). The layout must stay inside the slice; on
    /// an error the slice is dropped (cudarc frees it).
    pub fn from_cudarc<T: Element + DeviceRepr>(
        slice: CudaSlice<T>,
        shape: &[usize],
        strides: Option<&[isize]>,
        stream: &Stream,
    ) -> Result<StridedMemoryView<'static>> {
        let buffer = Buffer::from_cudarc(slice, stream)?;
        StridedMemoryView::from_buffer_owned(buffer, shape, strides, T::DTYPE, false)
    }
}
