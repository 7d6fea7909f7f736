//! Copies with [`CopyOptions`]: batches (`cuMemcpyBatchAsync`) and single copies
//! (`cuMemcpyWithAttributesAsync`), with `cuda.core`'s checks, refusals and fallbacks for drivers
//! without those entry points.
//!
//! Whatever the options say of when the source is read, every buffer of a copy (sources and
//! destinations) is handed to [`enqueue_using`], which keeps its memory alive until the copy is
//! done in stream order: reading the source earlier (`DURING_API_CALL`, `ANY`) reads live memory.

use super::super::buffer::{enqueue_using, Buffer};
use super::super::driver_version;
use super::options::{during_api_call_refusal, BatchCopyOptions, CopyOptions, MemcpySrcAccessOrder};
use crate::error::Check;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;

/// The oldest driver whose `cuMemcpyBatchAsync` the bindings bind (the 13.0 signature, without
/// `failIdx`).
const BATCH_DRIVER: (u32, u32) = (13, 0);
/// The oldest driver with `cuMemcpyWithAttributesAsync`.
const WITH_ATTRIBUTES_DRIVER: (u32, u32) = (13, 2);

const BATCH_LEGACY: &str = "copy_batch does not accept LEGACY_DEFAULT_STREAM; cuMemcpyBatchAsync rejects it \
    outright, unlike PER_THREAD_DEFAULT_STREAM, which is a real stream to the driver and is accepted. Pass an \
    explicit stream or PER_THREAD_DEFAULT_STREAM.";
const BATCH_CAPTURE: &str =
    "copy_batch does not support graph capture; use GraphNode.memcpy or per-buffer Buffer.copy_to instead";
const BATCH_REQUIREMENT: &str = "cuda.core built against CUDA 13 headers and cuda.bindings/driver 13.0 or newer \
    (cuMemcpyBatchAsync is unavailable here)";
const SINGLE_REQUIREMENT: &str = "cuda.bindings and the driver to both report CUDA 13.2 or newer \
    (cuMemcpyWithAttributesAsync is unavailable here)";

fn single_legacy(method: &str) -> CudaError {
    CudaError::InvalidType(format!(
        "{method} does not accept LEGACY_DEFAULT_STREAM with options (matches copy_batch); \
         cuMemcpyWithAttributesAsync rejects it outright, unlike PER_THREAD_DEFAULT_STREAM, which is a real \
         stream to the driver and is accepted. Pass an explicit stream, PER_THREAD_DEFAULT_STREAM, or \
         options=None."
    ))
}

fn single_capture(method: &str) -> String {
    format!(
        "{method} does not support graph capture with options (matches copy_batch); the driver has no \
         graph-node form of cuMemcpyWithAttributesAsync, so options cannot be honored in a graph. Use \
         GraphNode.memcpy for a plain (non-attributed) copy node, or pass options=None."
    )
}

/// Refuses (with `refusal`) a stream being captured: `recording` says whether the operation got
/// a capture; the driver is asked too, for a capture this crate did not begin. Called inside an
/// operation on the stream, so no capture begins or ends on it before the work is queued.
fn refuse_capturing(recording: bool, stream: &Stream, refusal: &str) -> Result<()> {
    // (The stream is live, not the legacy default stream: refused before.)
    if recording || crate::stream::capture::is_capturing(stream.handle())? {
        // (A type error, as cuda.core raises for these refusals.)
        return Err(CudaError::InvalidType(refusal.into()));
    }
    Ok(())
}

/// The same check as an operation of its own, before any buffer is handed to the stream (or to
/// a graph it records into): the operation that queues the copy checks again.
fn refuse_capturing_now(stream: &Stream, refusal: &str) -> Result<()> {
    stream.enqueue(|capture| refuse_capturing(capture.is_some(), stream, refusal))
}

impl Buffer {
    /// Copies each `(src, dst)` pair (whole source into the whole destination, of the same size)
    /// in one batched call, ordered on `stream`, with stream-ordered reads
    /// ([`copy_batch_with`](Self::copy_batch_with) with [`CopyOptions::default`]).
    ///
    /// Drivers of CUDA 13.0 and newer run `cuMemcpyBatchAsync`; older ones one `cuMemcpyAsync`
    /// per copy. Refused, before the driver sees it, for an empty batch, sizes that differ, the
    /// legacy default stream ([`Stream::legacy_default`], which `cuMemcpyBatchAsync` rejects; the
    /// per-thread default stream is fine) and a stream being captured (the driver has no graph
    /// node for it: record [`copy_to`](Self::copy_to)s instead). The driver may run the copies
    /// of a batch concurrently and in any order, and leaves copies that depend on each other
    /// undefined: a destination overlapping any other range of the batch (another copy's
    /// source or destination, or its own source) is refused too. The call itself may wait for
    /// the stream's earlier work (seen on CUDA 13.0 with pinned sources), so do not hold the
    /// stream behind something this thread does after the call.
    pub fn copy_batch(pairs: &[(&Buffer, &Buffer)], stream: &Stream) -> Result<()> {
        Buffer::copy_batch_with(pairs, stream, CopyOptions::default())
    }

    /// [`copy_batch`](Self::copy_batch) with options: one [`CopyOptions`] for every copy, or a
    /// slice of one per copy (`cuda.core`'s `copy_batch(stream, srcs, dsts, options=...)`).
    /// Equal neighbouring options reach the driver once.
    ///
    /// On drivers older than CUDA 13.0 the copies are stream-ordered `cuMemcpyAsync`s, which
    /// honour [`MemcpySrcAccessOrder::Stream`] and [`MemcpySrcAccessOrder::Any`] but not
    /// [`MemcpySrcAccessOrder::DuringApiCall`]: a batch asking for it is refused there. Empty
    /// copies are skipped.
    pub fn copy_batch_with<'a>(
        pairs: &[(&Buffer, &Buffer)],
        stream: &Stream,
        options: impl Into<BatchCopyOptions<'a>>,
    ) -> Result<()> {
        let options = options.into();
        let n = pairs.len();
        if n == 0 {
            return Err(CudaError::InvalidArgument("copy_batch: empty buffers sequence".into()));
        }
        if stream.is_legacy_default() {
            return Err(CudaError::InvalidType(BATCH_LEGACY.into()));
        }
        refuse_capturing_now(stream, BATCH_CAPTURE)?;
        for (i, (src, dst)) in pairs.iter().enumerate() {
            if src.size() != dst.size() {
                return Err(CudaError::InvalidArgument(format!(
                    "copy_batch: buffer size mismatch at index {i} (src={}, dst={})",
                    src.size(),
                    dst.size()
                )));
            }
            dst.check_writable("copy_batch")?;
            src.check_device_reads(stream, "copy_batch")?;
        }
        refuse_dependent_copies(pairs)?;
        options.check(n)?;
        let native = driver_version()? >= BATCH_DRIVER;
        if !native {
            if let Some(i) = options.first_during_api_call(n) {
                return Err(during_api_call_refusal(BATCH_REQUIREMENT, Some(i)));
            }
        }
        // The copies that move bytes, by index.
        let copies: Vec<usize> = (0..n).filter(|&i| pairs[i].0.size() > 0).collect();
        let mut dsts: Vec<driver::CUdeviceptr> = copies.iter().map(|&i| pairs[i].1.handle()).collect();
        let mut srcs: Vec<driver::CUdeviceptr> = copies.iter().map(|&i| pairs[i].0.handle()).collect();
        let mut sizes: Vec<usize> = copies.iter().map(|&i| pairs[i].0.size()).collect();
        let (mut attrs, mut attr_starts) = options.runs(&copies);
        let buffers: Vec<&Buffer> = pairs.iter().flat_map(|(s, d)| [*s, *d]).collect();
        enqueue_using(stream, &buffers, |capture| {
            refuse_capturing(capture.is_some(), stream, BATCH_CAPTURE)?;
            if copies.is_empty() {
                return Ok(());
            }
            if native {
                // SAFETY: dsts, srcs and sizes have one entry per copy (copies.len() of them),
                // each a whole buffer of that size (sizes checked equal), alive until the copies
                // are done in stream order (`enqueue_using`), which is also the latest any
                // source is read; attrs and attr_starts have one entry per run, the first
                // starting at 0, all below the count; the stream is not capturing (checked in
                // this operation) and not the legacy default stream.
                unsafe {
                    driver::cuMemcpyBatchAsync(
                        dsts.as_mut_ptr(),
                        srcs.as_mut_ptr(),
                        sizes.as_mut_ptr(),
                        copies.len(),
                        attrs.as_mut_ptr(),
                        attr_starts.as_mut_ptr(),
                        attrs.len(),
                        stream.handle(),
                    )
                }
                .check("cuMemcpyBatchAsync")
            } else {
                for ((dst, src), size) in dsts.iter().zip(&srcs).zip(&sizes) {
                    // SAFETY: as above: a whole buffer of `size` bytes each side, alive until
                    // the copy is done (`enqueue_using`).
                    unsafe { driver::cuMemcpyAsync(*dst, *src, *size, stream.handle()) }.check("cuMemcpyAsync")?;
                }
                Ok(())
            }
        })
    }

    /// [`copy_to`](Self::copy_to) with options (`cuda.core`'s `copy_to(dst, stream=...,
    /// options=...)`): `cuMemcpyWithAttributesAsync` on drivers of CUDA 13.2 and newer. On older
    /// drivers [`MemcpySrcAccessOrder::DuringApiCall`] is refused and the other options fall back
    /// to the plain copy. Refused, before the driver sees it, with the legacy default stream and
    /// on a stream being captured (a graph cannot hold the attributes: use
    /// [`copy_to`](Self::copy_to) there).
    pub fn copy_to_with(&self, dst: &Buffer, stream: &Stream, options: &CopyOptions) -> Result<()> {
        copy_with_options(dst, self, stream, options, "copy_to")
    }

    /// [`copy_from`](Self::copy_from) with options: as [`copy_to_with`](Self::copy_to_with).
    pub fn copy_from_with(&self, src: &Buffer, stream: &Stream, options: &CopyOptions) -> Result<()> {
        copy_with_options(self, src, stream, options, "copy_from")
    }
}

/// One copy of the whole of `src` into `dst` with `options`; `method` names the caller in
/// refusals.
/// The copies of one batch may run in any order, so the driver leaves copies that depend on
/// each other undefined: refused when a destination overlaps another copy's source or
/// destination (its own source too). Sorted by start, each range is compared with the furthest
/// reaching one before it.
fn refuse_dependent_copies(pairs: &[(&Buffer, &Buffer)]) -> Result<()> {
    // (start, end, copy, is destination); empty ranges overlap nothing.
    let mut ranges: Vec<(u64, u64, usize, bool)> = Vec::with_capacity(pairs.len() * 2);
    for (i, (src, dst)) in pairs.iter().enumerate() {
        for (b, is_dst) in [(src, false), (dst, true)] {
            if b.size() > 0 {
                let end = b.handle().checked_add(b.size() as u64).ok_or_else(|| {
                    CudaError::InvalidArgument("copy_batch: a buffer's range overflows the address space".into())
                })?;
                ranges.push((b.handle(), end, i, is_dst));
            }
        }
    }
    ranges.sort_unstable();
    // The ranges seen so far that reach furthest: the furthest one, and the furthest destination.
    let mut furthest: Option<(u64, usize, bool)> = None;
    let mut furthest_dst: Option<(u64, usize)> = None;
    for &(start, end, i, is_dst) in &ranges {
        let clash = if is_dst {
            furthest.filter(|&(reach, _, _)| reach > start).map(|(_, j, _)| j)
        } else {
            furthest_dst.filter(|&(reach, _)| reach > start).map(|(_, j)| j)
        };
        if let Some(j) = clash {
            return Err(CudaError::InvalidArgument(format!(
                "copy_batch: copies {} and {} overlap (a destination overlaps another range of the batch), and the copies of a batch may run in any order: copy them in separate calls",
                j.min(i),
                j.max(i)
            )));
        }
        if furthest.is_none_or(|(reach, _, _)| end > reach) {
            furthest = Some((end, i, is_dst));
        }
        if is_dst && furthest_dst.is_none_or(|(reach, _)| end > reach) {
            furthest_dst = Some((end, i));
        }
    }
    Ok(())
}

fn copy_with_options(dst: &Buffer, src: &Buffer, stream: &Stream, options: &CopyOptions, method: &str) -> Result<()> {
    super::check_same_size(src, dst)?;
    dst.check_writable(method)?;
    src.check_device_reads(stream, method)?;
    if stream.is_legacy_default() {
        return Err(single_legacy(method));
    }
    let capture_refusal = single_capture(method);
    refuse_capturing_now(stream, &capture_refusal)?;
    let native = driver_version()? >= WITH_ATTRIBUTES_DRIVER;
    if !native && options.src_access_order == MemcpySrcAccessOrder::DuringApiCall {
        return Err(during_api_call_refusal(SINGLE_REQUIREMENT, None));
    }
    let mut attrs = options.to_driver();
    let size = src.size();
    enqueue_using(stream, &[src, dst], |capture| {
        refuse_capturing(capture.is_some(), stream, &capture_refusal)?;
        if size == 0 {
            return Ok(());
        }
        if native {
            // SAFETY: both buffers are `size` bytes (checked equal) and alive until the copy is
            // done in stream order (`enqueue_using`), the latest the source is read; the
            // attributes are a local passed for the call; the stream is neither capturing
            // (checked in this operation) nor the legacy default stream.
            unsafe {
                driver::cuMemcpyWithAttributesAsync(dst.handle(), src.handle(), size, &mut attrs, stream.handle())
            }
            .check("cuMemcpyWithAttributesAsync")
        } else {
            // SAFETY: as above; a stream-ordered copy, which honours STREAM and ANY.
            unsafe { driver::cuMemcpyAsync(dst.handle(), src.handle(), size, stream.handle()) }.check("cuMemcpyAsync")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_carry_cuda_cores_words() {
        assert!(BATCH_LEGACY.starts_with("copy_batch does not accept LEGACY_DEFAULT_STREAM; cuMemcpyBatchAsync rejects it outright, unlike PER_THREAD_DEFAULT_STREAM, which is a real stream"));
        assert!(BATCH_LEGACY.ends_with("Pass an explicit stream or PER_THREAD_DEFAULT_STREAM."));
        assert!(!BATCH_LEGACY.contains("  "), "{BATCH_LEGACY}");
        let legacy = single_legacy("copy_to").to_string();
        assert!(legacy.starts_with("copy_to does not accept LEGACY_DEFAULT_STREAM with options (matches copy_batch); cuMemcpyWithAttributesAsync rejects it outright"), "{legacy}");
        assert!(legacy.ends_with("Pass an explicit stream, PER_THREAD_DEFAULT_STREAM, or options=None."));
        let capture = single_capture("copy_from");
        assert!(capture.starts_with("copy_from does not support graph capture with options (matches copy_batch); the driver has no graph-node form"), "{capture}");
        assert!(capture.ends_with("Use GraphNode.memcpy for a plain (non-attributed) copy node, or pass options=None."));
        for text in [BATCH_REQUIREMENT, SINGLE_REQUIREMENT, &legacy, &capture] {
            assert!(!text.contains("  "), "{text}");
        }
        let batch = during_api_call_refusal(BATCH_REQUIREMENT, Some(2)).to_string();
        assert!(batch.starts_with("src_access_order=DURING_API_CALL at index 2 requires cuda.core built against CUDA 13 headers and cuda.bindings/driver 13.0 or newer (cuMemcpyBatchAsync is unavailable here). A plain"), "{batch}");
    }

    #[test]
    fn the_legacy_default_stream_is_named_by_its_handles() {
        assert!(Stream::legacy_default().is_legacy_default());
        assert!(!Stream::per_thread_default().is_legacy_default());
        // NULL is the legacy stream unless the per-thread default stream is bound.
        // SAFETY: a default stream handle, never used here.
        let null = unsafe { Stream::from_handle(std::ptr::null_mut()) }.unwrap();
        assert_eq!(null.is_legacy_default(), !cuda_sys::per_thread_default_stream());
    }
}
