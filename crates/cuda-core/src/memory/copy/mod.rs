//! Copies and fills of [`Buffer`]s: to and from host slices, between buffers (whole, 2D, 3D,
//! batched, peer), and memsets. Every region is checked against its buffer with checked
//! arithmetic before the driver sees it, and every operation goes through
//! [`enqueue_using`], which keeps the buffers' memory alive until the work is done.
//!
//! - here: host copies, whole-buffer, 2D, 3D and peer copies, fills;
//! - `options`: [`CopyOptions`] and its enums, [`BatchCopyOptions`], their driver form;
//! - `batch`: batched copies and copies with options (`copy_batch`, `copy_to_with`, ...);
//! - `host_async`: awaited copies with host memory (`to_vec_async`, `copy_from_vec_async`);
//! - `reach`: what the device may do with a buffer's memory, checked before every fill and copy
//!   (`check_writable`, `check_device_reads`): the device runs them, and memory it cannot reach
//!   would fault the context.

mod batch;
mod host_async;
mod options;
mod reach;

pub use host_async::HostCopy;
pub use options::{BatchCopyOptions, CopyOptions, MemcpyOverlapMode, MemcpySrcAccessOrder};

use super::buffer::{enqueue_using, Buffer, Pod};
use super::{address, MemoryResource};
use crate::device::Device;
use crate::error::Check;
use crate::stream::{relaxed_capture_mode, Stream};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::sync::Arc;

/// Polls `done` until it reports anything but "not ready" (in relaxed capture mode, so that no
/// capture elsewhere refuses it): a failed wait must still not return before the work is done
/// or can no longer run (an error stops a context's work). A refusal because of a capture is
/// not an answer either: while a blocking stream of the context is captured (by this crate or
/// another library), the legacy default stream is unusable and its queries say so
/// (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`), although a copy queued on it before is still running.
fn poll_until_settled(done: impl Fn() -> driver::CUresult) {
    use driver::CUresult as R;
    relaxed_capture_mode(|| {
        let mut pause = std::time::Duration::from_micros(50);
        while matches!(
            done(),
            R::CUDA_ERROR_NOT_READY | R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT | R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        ) {
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(1));
        }
    })
}

/// Queues `copy`, which reads or writes host memory borrowed for the call, on `stream` (with
/// `buffers` held, as every operation holds its buffers), and waits for it before returning, so
/// that the host memory may be used again at once. The copy is refused on a stream being
/// captured (`refusal` says why). The wait happens after the operation (a capture beginning
/// elsewhere does not wait for it), on a fence recorded after the copy, in relaxed capture mode
/// (a capture on another thread does not refuse it). When a wait fails, the work is still
/// polled until it is done or stopped by an error: the copy never outlives the borrow.
///
/// When no context of the stream's device is current, a context of that device is made current
/// for the call: the driver refuses a copy with pageable host memory on a stream of another
/// device than the current context's (`CUDA_ERROR_INVALID_VALUE`, seen with two H100s), so a
/// program that works with streams of several devices need not make each current first. That
/// context is the stream's, or for a green context's stream the device's primary context (a
/// green context's streams take copies with it current, and making the green context current
/// would hold its claim, which other threads wait for, through the blocking wait). A context
/// of the stream's device that is current already stays current. As with
/// [`Context::with_current`](crate::Context::with_current), a context another library made
/// current is not made current again afterwards when it was of another device (the thread is
/// left with none).
pub(super) fn copy_with_host(
    stream: &Stream,
    buffers: &[&Buffer],
    refusal: &str,
    copy: impl FnOnce() -> Result<()>,
) -> Result<()> {
    // Before any CUDA call: none on a driver thread.
    crate::reaper::refuse_in_callback()?;
    let context = stream.context_or_current()?;
    let mut current: driver::CUdevice = 0;
    // SAFETY: out-pointer to a local; fails when no context is current.
    let same_device =
        unsafe { driver::cuCtxGetDevice(&mut current) }.result().is_ok() && current == context.device().handle();
    if same_device {
        return copy_with_host_here(&context, stream, buffers, refusal, copy);
    }
    let here = || copy_with_host_here(&context, stream, buffers, refusal, copy);
    if context.is_green() {
        context.device().primary_context()?.with_current(here)
    } else {
        context.with_current(here)
    }
}

/// [`copy_with_host`] with a context of the stream's device current.
fn copy_with_host_here(
    context: &crate::device::Context,
    stream: &Stream,
    buffers: &[&Buffer],
    refusal: &str,
    copy: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let fence = context.fence()?;
    enqueue_using(stream, buffers, |capture| {
        if capture.is_some() {
            return Err(CudaError::InvalidState(refusal.into()));
        }
        copy()?;
        // SAFETY: both handles are live; the event belongs to the stream's context; the
        // stream is not capturing (inside its operation).
        let recorded = unsafe { driver::cuEventRecord(fence.handle(), stream.handle()) }.check("cuEventRecord");
        if recorded.is_err() {
            // SAFETY: the stream is live.
            poll_until_settled(|| unsafe { driver::cuStreamQuery(stream.handle()) });
        }
        recorded
    })?;
    wait_for_fence(fence.handle())
}

/// Queues a copy of `bytes` from host memory at `src` to `dst` in `buffer`'s memory on
/// `stream`: with the direction inferred from the addresses (unified addressing) when the
/// buffer is host-accessible, else host to device.
///
/// # Safety
/// `src` is readable for `bytes` until the copy is done (the caller waits for it), and
/// `dst..dst + bytes` lies in `buffer`'s memory, held until then.
pub(super) unsafe fn memcpy_from_host(
    buffer: &Buffer,
    dst: driver::CUdeviceptr,
    src: *const std::ffi::c_void,
    bytes: usize,
    stream: &Stream,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe {
        if buffer.is_host_accessible() {
            driver::cuMemcpyAsync(dst, src as driver::CUdeviceptr, bytes, stream.handle()).check("cuMemcpyAsync")
        } else {
            driver::cuMemcpyHtoDAsync(dst, src, bytes, stream.handle()).check("cuMemcpyHtoDAsync")
        }
    }
}

/// Queues a copy of `bytes` from `src` in `buffer`'s memory to host memory at `dst` on
/// `stream`, the direction chosen as by [`memcpy_from_host`].
///
/// # Safety
/// `dst` is writable for `bytes`, and used by nothing else, until the copy is done (the caller
/// waits for it); `src..src + bytes` lies in `buffer`'s memory, held until then.
pub(super) unsafe fn memcpy_to_host(
    buffer: &Buffer,
    src: driver::CUdeviceptr,
    dst: *mut std::ffi::c_void,
    bytes: usize,
    stream: &Stream,
) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe {
        if buffer.is_host_accessible() {
            driver::cuMemcpyAsync(dst as driver::CUdeviceptr, src, bytes, stream.handle()).check("cuMemcpyAsync")
        } else {
            driver::cuMemcpyDtoHAsync(dst, src, bytes, stream.handle()).check("cuMemcpyDtoHAsync")
        }
    }
}

/// Waits on the host until the work before `fence`'s record is done, in relaxed capture mode
/// (a capture on another thread does not refuse it); when the wait fails, the work is still
/// polled until it is done or stopped by an error, so that what the work uses is never let go
/// of early. `fence` must be live and recorded outside any capture.
pub(crate) fn wait_for_fence(fence: driver::CUevent) -> Result<()> {
    // SAFETY: the caller's event, live and recorded outside any capture.
    let waited = relaxed_capture_mode(|| unsafe { driver::cuEventSynchronize(fence) }).check("cuEventSynchronize");
    if waited.is_err() {
        // SAFETY: as above.
        poll_until_settled(|| unsafe { driver::cuEventQuery(fence) });
    }
    waited
}

impl Buffer {
    /// Copies `src` into the start of the buffer, ordered on `stream`, and waits for the copy
    /// (so `src` may be reused at once). Not on a stream being captured (the graph would copy
    /// from `src` at every launch, long after this call).
    ///
    /// **Blocks** the thread (`TypedBuffer::copy_from_host_blocking` is the typed form); for a
    /// copy that does not, see the `host_async` module notes (a pinned buffer and
    /// [`copy_from`](Self::copy_from), or [`copy_from_vec_async`](Self::copy_from_vec_async)).
    #[doc(alias = "copy_from_host_blocking")]
    pub fn copy_from_host<T: Pod>(&self, src: &[T], stream: &Stream) -> Result<()> {
        let bytes = std::mem::size_of_val(src);
        self.check_fits(bytes, "copy_from_host")?;
        self.check_writable("copy_from_host")?;
        copy_with_host(
            stream,
            &[self],
            "copy_from_host waits for its copy, which a stream being captured never runs: copy before the capture, or from a buffer",
            || {
                // SAFETY: src is live for the call and the copy is waited for before returning
                // (`copy_with_host`); the buffer holds `bytes` (checked).
                unsafe { memcpy_from_host(self, self.handle(), src.as_ptr().cast(), bytes, stream) }
            },
        )
    }

    /// Copies the start of the buffer into `dst`, ordered on `stream`, and waits for the copy.
    /// Not on a stream being captured. **Blocks** the thread (for a copy that does not: a
    /// pinned buffer and [`copy_to`](Self::copy_to), or [`to_vec_async`](Self::to_vec_async)).
    #[doc(alias = "copy_to_host_blocking")]
    pub fn copy_to_host<T: Pod>(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        let bytes = std::mem::size_of_val(dst);
        self.check_fits(bytes, "copy_to_host")?;
        self.check_device_reads(stream, "copy_to_host")?;
        let dst_ptr = dst.as_mut_ptr();
        copy_with_host(
            stream,
            &[self],
            "copy_to_host waits for its copy, which a stream being captured never runs: copy after the graph ran, into a host slice, from a stream that is not capturing",
            || {
                // SAFETY: dst is live and exclusively borrowed for the call; the copy is waited
                // for before returning (`copy_with_host`); the buffer holds `bytes` (checked).
                unsafe { memcpy_to_host(self, self.handle(), dst_ptr.cast(), bytes, stream) }
            },
        )
    }

    /// The buffer's contents as a vector of `T` (**blocks** until the copy is done; the future
    /// form is [`to_vec_async`](Self::to_vec_async)). An error, not an abort, when the host
    /// cannot hold that much.
    #[doc(alias = "to_vec_blocking")]
    pub fn to_vec<T: Pod>(&self, stream: &Stream) -> Result<Vec<T>> {
        let n = self.size() / std::mem::size_of::<T>().max(1);
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|e| {
            CudaError::InvalidArgument(format!("to_vec: cannot hold {} bytes on the host: {e}", self.size()))
        })?;
        out.resize(n, T::zeroed());
        self.copy_to_host(&mut out, stream)?;
        Ok(out)
    }

    /// A new buffer of `size_of_val(data)` bytes from `resource` holding a copy of `data`,
    /// ordered on `stream` (which becomes its deallocation stream). Waits for the copy, so `data`
    /// may be reused at once. Not on a stream being captured: the copy is refused there (see
    /// [`copy_from_host`](Self::copy_from_host)).
    pub fn from_slice<T: Pod>(resource: Arc<dyn MemoryResource>, data: &[T], stream: &Stream) -> Result<Buffer> {
        let buffer = Buffer::allocate(resource, std::mem::size_of_val(data), stream)?;
        buffer.copy_from_host(data, stream)?;
        Ok(buffer)
    }

    /// Copies this whole buffer into `dst`, ordered on `stream` (device to device, or any
    /// direction the memory kinds allow). The two must have the same size, as in `cuda.core`
    /// (copy part of a buffer with [`Buffer::copy_2d`] or [`Buffer::copy_3d`]).
    ///
    /// With options (source access order, location hints, overlap): [`Buffer::copy_to_with`].
    pub fn copy_to(&self, dst: &Buffer, stream: &Stream) -> Result<()> {
        check_same_size(self, dst)?;
        dst.check_writable("copy_to")?;
        self.check_device_reads(stream, "copy_to")?;
        enqueue_using(stream, &[self, dst], |_| {
            // SAFETY: both ranges lie in their buffers, whose memory stays alive until the copy
            // is done (`enqueue_using`).
            unsafe { driver::cuMemcpyAsync(dst.handle(), self.handle(), self.size(), stream.handle()) }
                .check("cuMemcpyAsync")
        })
    }

    /// A copy of this buffer in a new buffer from its memory resource, ordered on `stream`
    /// (`cuda.core`'s `copy_to(None, stream=...)`). Foreign memory has no resource to allocate
    /// from: allocate the destination and use [`copy_to`](Self::copy_to).
    pub fn copy_to_new(&self, stream: &Stream) -> Result<Buffer> {
        let Some(resource) = self.memory_resource() else {
            return Err(CudaError::InvalidArgument(
                "a destination buffer must be provided (this buffer does not have a memory_resource)".into(),
            ));
        };
        let dst = Buffer::allocate(resource.clone(), self.size(), stream)?;
        self.copy_to(&dst, stream)?;
        Ok(dst)
    }

    /// Copies `src` (whole, of the same size) into this buffer, ordered on `stream`.
    pub fn copy_from(&self, src: &Buffer, stream: &Stream) -> Result<()> {
        src.copy_to(self, stream)
    }

    /// Fills every byte with `value`, ordered on `stream`.
    pub fn fill_u8(&self, value: u8, stream: &Stream) -> Result<()> {
        self.check_writable("fill_u8")?;
        enqueue_using(stream, &[self], |_| {
            // SAFETY: size bytes of the buffer, alive until the fill is done (`enqueue_using`).
            unsafe { driver::cuMemsetD8Async(self.handle(), value, self.size(), stream.handle()) }
                .check("cuMemsetD8Async")
        })
    }

    /// Fills with a 2-byte pattern (the size must be a multiple of 2), ordered on `stream`.
    pub fn fill_u16(&self, value: u16, stream: &Stream) -> Result<()> {
        let count = self.elements(2, "fill_u16")?;
        self.check_writable("fill_u16")?;
        enqueue_using(stream, &[self], |_| {
            // SAFETY: count 2-byte elements of the buffer, alive until the fill is done.
            unsafe { driver::cuMemsetD16Async(self.handle(), value, count, stream.handle()) }.check("cuMemsetD16Async")
        })
    }

    /// Fills with a 4-byte pattern (the size must be a multiple of 4), ordered on `stream`.
    pub fn fill_u32(&self, value: u32, stream: &Stream) -> Result<()> {
        let count = self.elements(4, "fill_u32")?;
        self.check_writable("fill_u32")?;
        enqueue_using(stream, &[self], |_| {
            // SAFETY: count 4-byte elements of the buffer, alive until the fill is done.
            unsafe { driver::cuMemsetD32Async(self.handle(), value, count, stream.handle()) }.check("cuMemsetD32Async")
        })
    }

    /// How many `element`-byte elements fill the buffer exactly; an error naming `what` when its
    /// size is not a multiple of `element`.
    fn elements(&self, element: usize, what: &str) -> Result<usize> {
        if !self.size().is_multiple_of(element) {
            return Err(CudaError::InvalidArgument(format!(
                "{what}: {} bytes is not a multiple of {element}",
                self.size()
            )));
        }
        Ok(self.size() / element)
    }
}

/// `cuda.core`'s refusal of a whole-buffer copy between buffers of different sizes.
fn check_same_size(src: &Buffer, dst: &Buffer) -> Result<()> {
    if src.size() != dst.size() {
        return Err(CudaError::InvalidArgument(format!(
            "buffer sizes mismatch between src and dst (sizes are: src={}, dst={})",
            src.size(),
            dst.size()
        )));
    }
    Ok(())
}

/// One past the last byte a box of `depth` slices of `height` rows of `width` bytes reaches,
/// starting at `offset`, with rows `pitch` bytes and slices `rows_per_slice` rows apart: `offset`
/// for an empty box, `None` when the figures overflow.
pub(crate) fn region_end(
    offset: usize,
    pitch: usize,
    rows_per_slice: usize,
    width: usize,
    height: usize,
    depth: usize,
) -> Option<usize> {
    if width == 0 || height == 0 || depth == 0 {
        return Some(offset);
    }
    (depth - 1)
        .checked_mul(rows_per_slice)?
        .checked_add(height - 1)?
        .checked_mul(pitch)?
        .checked_add(offset)?
        .checked_add(width)
}

/// One region of a 2D copy: a buffer, the byte offset of the first row, and the pitch (bytes
/// from one row to the next).
#[derive(Debug, Clone, Copy)]
pub struct Region2D<'a> {
    /// The buffer the region lies in.
    pub buffer: &'a Buffer,
    /// The byte offset of the region's first row in the buffer.
    pub offset: usize,
    /// The bytes from the start of one row to the start of the next (at least the copy's width).
    pub pitch: usize,
}

impl Region2D<'_> {
    /// Checks that `height` rows of `width` bytes lie in the buffer (checked arithmetic: a wrap
    /// is an error) and returns the address of the first byte.
    pub(crate) fn check(&self, width: usize, height: usize, what: &str) -> Result<driver::CUdeviceptr> {
        let bad = || {
            CudaError::InvalidArgument(format!(
                "copy_2d: the {what} region ({height} rows of {width} bytes, pitch {}, offset {}) does not fit its buffer of {} bytes",
                self.pitch,
                self.offset,
                self.buffer.size()
            ))
        };
        if width > self.pitch || self.offset > self.buffer.size() {
            return Err(bad());
        }
        if region_end(self.offset, self.pitch, 1, width, height, 1).ok_or_else(bad)? > self.buffer.size() {
            return Err(bad());
        }
        address(self.buffer.handle(), self.offset, "copy_2d")
    }
}

/// One region of a 3D copy: a buffer, the byte offset of the first row of the first slice, the
/// pitch (bytes from one row to the next) and the rows from one slice to the next.
#[derive(Debug, Clone, Copy)]
pub struct Region3D<'a> {
    /// The buffer the region lies in.
    pub buffer: &'a Buffer,
    /// The byte offset of the first row of the first slice in the buffer.
    pub offset: usize,
    /// The bytes from the start of one row to the start of the next (at least the copy's width).
    pub pitch: usize,
    /// The rows from the start of one slice to the start of the next (at least the copy's
    /// height).
    pub rows_per_slice: usize,
}

impl Region3D<'_> {
    /// Checks that the box lies in the buffer (checked arithmetic) and returns the address of
    /// its first byte.
    pub(crate) fn check(&self, width: usize, height: usize, depth: usize, what: &str) -> Result<driver::CUdeviceptr> {
        let bad = || {
            CudaError::InvalidArgument(format!(
                "copy_3d: the {what} region ({depth} slices of {height} rows of {width} bytes, pitch {}, {} rows per slice, offset {}) does not fit its buffer of {} bytes",
                self.pitch,
                self.rows_per_slice,
                self.offset,
                self.buffer.size()
            ))
        };
        if width > self.pitch || height > self.rows_per_slice || self.offset > self.buffer.size() {
            return Err(bad());
        }
        let end = region_end(self.offset, self.pitch, self.rows_per_slice, width, height, depth).ok_or_else(bad)?;
        if end > self.buffer.size() {
            return Err(bad());
        }
        address(self.buffer.handle(), self.offset, "copy_3d")
    }
}

impl Buffer {
    /// Copies a box of `depth` slices of `height` rows of `width` bytes from `src` to `dst`
    /// (each with its own pitch and slice height), ordered on `stream` (`cuMemcpy3DAsync`).
    pub fn copy_3d(dst: Region3D<'_>, src: Region3D<'_>, extent: (usize, usize, usize), stream: &Stream) -> Result<()> {
        let (width, height, depth) = extent;
        let dst_ptr = dst.check(width, height, depth, "destination")?;
        dst.buffer.check_writable("copy_3d")?;
        let src_ptr = src.check(width, height, depth, "source")?;
        src.buffer.check_device_reads(stream, "copy_3d")?;
        let copy = driver::CUDA_MEMCPY3D {
            srcMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            srcDevice: src_ptr,
            srcPitch: src.pitch,
            srcHeight: src.rows_per_slice,
            dstMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            dstDevice: dst_ptr,
            dstPitch: dst.pitch,
            dstHeight: dst.rows_per_slice,
            WidthInBytes: width,
            Height: height,
            Depth: depth,
            ..Default::default()
        };
        enqueue_using(stream, &[dst.buffer, src.buffer], |_| {
            // SAFETY: both boxes were checked to lie within their buffers, alive until the copy
            // is done (`enqueue_using`).
            unsafe { driver::cuMemcpy3DAsync(&copy, stream.handle()) }.check("cuMemcpy3DAsync")
        })
    }

    /// Copies `height` rows of `width` bytes from `src` to `dst` (each with its own pitch),
    /// ordered on `stream`.
    pub fn copy_2d(dst: Region2D<'_>, src: Region2D<'_>, width: usize, height: usize, stream: &Stream) -> Result<()> {
        let dst_ptr = dst.check(width, height, "destination")?;
        dst.buffer.check_writable("copy_2d")?;
        let src_ptr = src.check(width, height, "source")?;
        src.buffer.check_device_reads(stream, "copy_2d")?;
        let copy = driver::CUDA_MEMCPY2D {
            srcMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            srcDevice: src_ptr,
            srcPitch: src.pitch,
            dstMemoryType: driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            dstDevice: dst_ptr,
            dstPitch: dst.pitch,
            WidthInBytes: width,
            Height: height,
            ..Default::default()
        };
        enqueue_using(stream, &[dst.buffer, src.buffer], |_| {
            // SAFETY: both regions were checked to lie within their buffers, alive until the copy
            // is done (`enqueue_using`).
            unsafe { driver::cuMemcpy2DAsync(&copy, stream.handle()) }.check("cuMemcpy2DAsync")
        })
    }

    /// Copies this buffer into `dst` on another device's memory (peer to peer), ordered on `stream`.
    pub fn copy_to_peer(&self, dst: &Buffer, stream: &Stream) -> Result<()> {
        dst.check_fits(self.size(), "copy_to_peer")?;
        dst.check_writable("copy_to_peer")?;
        self.check_device_reads(stream, "copy_to_peer")?;
        let context = |b: &Buffer| -> Result<driver::CUcontext> {
            let device = b
                .memory_resource()
                .and_then(|r| r.device())
                .map_or_else(Device::current, Ok)?;
            Ok(device.primary_context()?.handle())
        };
        let (dst_ctx, src_ctx) = (context(dst)?, context(self)?);
        enqueue_using(stream, &[self, dst], |_| {
            // SAFETY: both buffers are alive until the copy is done; the contexts are retained
            // primary contexts.
            unsafe {
                driver::cuMemcpyPeerAsync(
                    dst.handle(),
                    dst_ctx,
                    self.handle(),
                    src_ctx,
                    self.size(),
                    stream.handle(),
                )
            }
            .check("cuMemcpyPeerAsync")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{address, region_end};
    use proptest::prelude::*;

    // Review of round 3: a copy queued on the legacy stream, whose fence could not be recorded
    // because a blocking stream began a capture meanwhile, was polled once and left running
    // (the query answered "capture implicit"): capture refusals are no answer.
    #[test]
    fn polling_outlasts_capture_refusals() {
        use cuda_sys::driver::CUresult as R;
        let answers = [
            R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
            R::CUDA_ERROR_NOT_READY,
            R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            R::CUDA_SUCCESS,
            R::CUDA_ERROR_NOT_READY,
        ];
        let asked = std::cell::Cell::new(0);
        super::poll_until_settled(|| {
            asked.set(asked.get() + 1);
            answers[asked.get() - 1]
        });
        assert_eq!(asked.get(), 4, "polled until the work was done");
        // A sticky error ends the polling too: nothing runs any more.
        asked.set(0);
        super::poll_until_settled(|| {
            asked.set(asked.get() + 1);
            [R::CUDA_ERROR_NOT_READY, R::CUDA_ERROR_ILLEGAL_ADDRESS][asked.get() - 1]
        });
        assert_eq!(asked.get(), 2);
    }

    #[test]
    fn addresses_do_not_wrap() {
        assert_eq!(address(0x1000, 16, "t").unwrap(), 0x1010);
        assert!(address(u64::MAX - 4, 16, "t").is_err());
        assert!(address(1, usize::MAX, "t").is_err());
    }

    #[test]
    fn the_audits_wrapping_regions_do_not_fit() {
        let d = 1usize << 20;
        // A negative offset: offset + width wraps to 0.
        assert_eq!(region_end(0usize.wrapping_sub(d), d, 1, d, 1, 1), None);
        // (height - 1) * pitch wraps.
        assert_eq!(region_end(0, usize::MAX / 2 + 1, 1, 16, 3, 1), None);
        assert_eq!(region_end(0, 16, usize::MAX / 8, 16, 2, 2), None);
        assert_eq!(region_end(16, 64, 1, 32, 4, 1), Some(16 + 3 * 64 + 32));
        assert_eq!(region_end(7, 64, 1, 0, 4, 1), Some(7));
    }

    /// Sizes near the edges of `usize` as well as ordinary ones.
    fn size() -> impl Strategy<Value = usize> {
        prop_oneof![
            0usize..4096,
            Just(usize::MAX),
            Just(usize::MAX / 2 + 1),
            (0usize..64).prop_map(|d| usize::MAX - d),
            (0usize..64).prop_map(|d| 0usize.wrapping_sub(d)),
            (0u32..64).prop_map(|b| 1usize << b),
            any::<usize>(),
        ]
    }

    proptest! {
        #[test]
        fn region_ends_are_exact_or_refused(
            offset in size(), pitch in size(), rows in size(), width in size(), height in size(), depth in size()
        ) {
            let exact = if width == 0 || height == 0 || depth == 0 {
                Some(offset as u128)
            } else {
                ((depth as u128 - 1) * rows as u128 + height as u128 - 1)
                    .checked_mul(pitch as u128)
                    .and_then(|b| b.checked_add(offset as u128 + width as u128))
            };
            match region_end(offset, pitch, rows, width, height, depth) {
                Some(end) => prop_assert_eq!(Some(end as u128), exact),
                None => prop_assert!(exact.is_none_or(|e| e > usize::MAX as u128 || (depth as u128 - 1) * rows as u128 + height as u128 - 1 > usize::MAX as u128 || ((depth as u128 - 1) * rows as u128 + height as u128 - 1) * pitch as u128 > usize::MAX as u128)),
            }
        }
    }
}
