//! Whole-array copies (`cuMemcpy3DAsync`) between a CUDA array and a buffer or host memory,
//! shared by [`OpaqueArray`](super::OpaqueArray) and the graphics module's mapped arrays: the
//! array's rows (`shape[0]` elements), then its slices, densely packed on the other side.
//!
//! The device runs every copy: the memory on the other side is refused where the device may not
//! read it (a copy into the array) or write it (a copy out of the array), as buffers' own copies
//! refuse it (`memory/copy/reach.rs`): host-location virtual memory without device peers, for
//! one, whose access would fault the context.
//!
//! Every copy is work on the array's lifeline (a buffer whose free is what ends the array: its
//! destruction, or its unmap), so the array outlives the copy as any buffer outlives its work.

use crate::error::Check;
use crate::memory::buffer::{enqueue_using, Buffer, Pod};
use crate::memory::copy::copy_with_host;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;

/// How `method` of the array type that `copy_to_what` names (`OpaqueArray::copy_to`,
/// `MappedArray::copy_to`) names itself in errors: `OpaqueArray::copy_from`, ...
pub(super) fn method_name(copy_to_what: &str, method: &str) -> String {
    match copy_to_what.rsplit_once("::") {
        Some((owner, _)) => format!("{owner}::{method}"),
        None => method.to_string(),
    }
}

/// An array as whole-array copies see it.
pub(crate) struct WholeArray<'a> {
    pub(crate) raw: driver::CUarray,
    /// Extents in elements (1 to 3 of them), whose product times `element_bytes` is `size_bytes`.
    pub(crate) shape: &'a [usize],
    pub(crate) element_bytes: usize,
    pub(crate) size_bytes: usize,
    /// What keeps the array alive (see the module documentation).
    pub(crate) lifeline: &'a Buffer,
    /// How `copy_to` names itself in errors (`OpaqueArray::copy_to`, `MappedArray::copy_to`).
    pub(crate) copy_to_what: &'static str,
}

impl WholeArray<'_> {
    /// A whole-array copy with the array on one side; `other` fills in the other side.
    fn params(
        &self,
        into_array: bool,
        other: impl FnOnce(&mut driver::CUDA_MEMCPY3D, usize, usize),
    ) -> driver::CUDA_MEMCPY3D {
        // The product of these is `size_bytes`, which fits in usize.
        let (width, height, depth) = (
            self.shape[0] * self.element_bytes,
            self.shape.get(1).copied().unwrap_or(1),
            self.shape.get(2).copied().unwrap_or(1),
        );
        let mut p = driver::CUDA_MEMCPY3D {
            WidthInBytes: width,
            Height: height,
            Depth: depth,
            ..Default::default()
        };
        if into_array {
            p.dstMemoryType = driver::CUmemorytype::CU_MEMORYTYPE_ARRAY;
            p.dstArray = self.raw;
        } else {
            p.srcMemoryType = driver::CUmemorytype::CU_MEMORYTYPE_ARRAY;
            p.srcArray = self.raw;
        }
        other(&mut p, width, height);
        p
    }

    /// How the array's method `method` names itself in errors (see [`method_name`]).
    fn what(&self, method: &str) -> String {
        method_name(self.copy_to_what, method)
    }

    fn check_room(&self, have: usize, what: &str) -> Result<()> {
        if have < self.size_bytes {
            return Err(CudaError::InvalidArgument(format!(
                "{what} has {have} bytes, smaller than the array extent ({} bytes)",
                self.size_bytes
            )));
        }
        Ok(())
    }

    /// Copies the first `size_bytes` bytes of `src` into the array, ordered on `stream`
    /// (recorded into a graph on a capturing stream: the graph then holds both).
    pub(crate) fn copy_from(&self, src: &Buffer, stream: &Stream) -> Result<()> {
        self.check_room(src.size(), "the source buffer")?;
        src.check_device_reads(stream, &self.what("copy_from"))?;
        let p = self.params(true, |p, pitch, height| {
            p.srcMemoryType = driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED;
            p.srcDevice = src.handle();
            p.srcPitch = pitch;
            p.srcHeight = height;
        });
        enqueue_using(stream, &[self.lifeline, src], |_| {
            // SAFETY: the array (its lifeline) and the buffer's first size_bytes bytes stay alive
            // until the copy is done (`enqueue_using` holds both); the parameters are a local.
            unsafe { driver::cuMemcpy3DAsync(&p, stream.handle()) }.check("cuMemcpy3DAsync")
        })
    }

    /// Copies the whole array into the first `size_bytes` bytes of `dst`, ordered on `stream`.
    pub(crate) fn copy_to(&self, dst: &Buffer, stream: &Stream) -> Result<()> {
        self.check_room(dst.size(), "the destination buffer")?;
        dst.check_writable(self.copy_to_what)?;
        let p = self.params(false, |p, pitch, height| {
            p.dstMemoryType = driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED;
            p.dstDevice = dst.handle();
            p.dstPitch = pitch;
            p.dstHeight = height;
        });
        enqueue_using(stream, &[self.lifeline, dst], |_| {
            // SAFETY: as in `copy_from`.
            unsafe { driver::cuMemcpy3DAsync(&p, stream.handle()) }.check("cuMemcpy3DAsync")
        })
    }

    /// Copies host data into the array, ordered on `stream`, and waits for the copy; refused on
    /// a capturing stream with `refusal`.
    pub(crate) fn copy_from_host<T: Pod>(&self, src: &[T], stream: &Stream, refusal: &str) -> Result<()> {
        self.check_room(std::mem::size_of_val(src), "the host slice")?;
        stream.check_device_reads_memory(src.as_ptr() as u64, &self.what("copy_from_host"))?;
        let p = self.params(true, |p, pitch, height| {
            p.srcMemoryType = driver::CUmemorytype::CU_MEMORYTYPE_HOST;
            p.srcHost = src.as_ptr().cast();
            p.srcPitch = pitch;
            p.srcHeight = height;
        });
        copy_with_host(stream, &[self.lifeline], refusal, || {
            // SAFETY: src holds size_bytes bytes and is borrowed until the copy is waited for
            // (`copy_with_host`); the array is held by its lifeline.
            unsafe { driver::cuMemcpy3DAsync(&p, stream.handle()) }.check("cuMemcpy3DAsync")
        })
    }

    /// Copies the whole array into host memory, ordered on `stream`, and waits for the copy;
    /// refused on a capturing stream with `refusal`.
    pub(crate) fn copy_to_host<T: Pod>(&self, dst: &mut [T], stream: &Stream, refusal: &str) -> Result<()> {
        self.check_room(std::mem::size_of_val(dst), "the host slice")?;
        stream.check_device_writes_memory(dst.as_ptr() as u64, &self.what("copy_to_host"))?;
        let dst_ptr = dst.as_mut_ptr();
        let p = self.params(false, |p, pitch, height| {
            p.dstMemoryType = driver::CUmemorytype::CU_MEMORYTYPE_HOST;
            p.dstHost = dst_ptr.cast();
            p.dstPitch = pitch;
            p.dstHeight = height;
        });
        copy_with_host(stream, &[self.lifeline], refusal, || {
            // SAFETY: dst holds size_bytes bytes, exclusively borrowed until the copy is waited
            // for (`copy_with_host`); the array is held by its lifeline.
            unsafe { driver::cuMemcpy3DAsync(&p, stream.handle()) }.check("cuMemcpy3DAsync")
        })
    }

    /// The whole array as a vector of `T` (waits for the copy).
    pub(crate) fn to_vec<T: Pod>(&self, stream: &Stream, refusal: &str) -> Result<Vec<T>> {
        let size = std::mem::size_of::<T>().max(1);
        let n = self.size_bytes.div_ceil(size);
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|e| {
            CudaError::InvalidArgument(format!(
                "to_vec: cannot hold {} bytes on the host: {e}",
                self.size_bytes
            ))
        })?;
        out.resize(n, T::zeroed());
        self.copy_to_host(&mut out, stream, refusal)?;
        Ok(out)
    }
}
