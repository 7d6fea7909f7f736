//! Typed copies and fills: between typed buffers and views (stream-ordered; with a pinned or
//! managed buffer on the host side, this is the copy that does not block), with host slices
//! (`*_blocking`: they wait for their copy, since the slice is only borrowed for the call), and
//! awaited ones (`to_vec_async`, `copy_from_vec_async`).
//!
//! **Who keeps the memory alive.** Every copy goes through `enqueue_using`: the buffers' memory
//! stays alive until the copy is done (the stream is remembered by each buffer, or a capturing
//! graph holds them), and the buffers' frees wait for it. Host slices are borrowed for the call
//! and the call waits for its copy (`copy_with_host`). Any thread may call these; not a host
//! function (no CUDA call is made there).

use super::super::buffer::{enqueue_using, Buffer, BufferView, Pod, ReadOnlyView};
use super::super::copy::{copy_with_host, memcpy_from_host, memcpy_to_host, HostCopy};
use super::{bytes_of, AllocateBuffer, TypedBuffer};
use crate::error::Check;
use crate::stream::{Completion, Stream};
use crate::{CudaError, Result};
use cuda_sys::driver;

impl<T: Pod> BufferView<'_, T> {
    /// Copies `src` (as many elements as this view has) into this view, ordered on `stream`
    /// (device to device, or any direction the memory kinds allow: a pinned or managed buffer
    /// on either side makes this the host copy that does not block). Views of one buffer must
    /// not overlap.
    pub fn copy_from<'s>(&self, src: impl Into<ReadOnlyView<'s, T>>, stream: &Stream) -> Result<()>
    where
        T: 's,
    {
        let src = src.into();
        if src.len() != self.len() {
            return Err(CudaError::InvalidArgument(format!(
                "copy_from: the source has {} elements, the destination {}",
                src.len(),
                self.len()
            )));
        }
        let bytes = bytes_of::<T>(self.len(), "copy_from")?;
        if std::ptr::eq(src.buffer(), self.buffer()) && overlap(src.handle(), self.handle(), bytes) {
            return Err(CudaError::InvalidArgument(
                "copy_from: the source and destination overlap in one buffer".into(),
            ));
        }
        self.buffer().check_writable("copy_from")?;
        src.buffer().check_device_reads(stream, "copy_from")?;
        if bytes == 0 {
            return Ok(());
        }
        enqueue_using(stream, &[src.buffer(), self.buffer()], |_| {
            // SAFETY: both ranges lie in their buffers (views are checked when made) and do not
            // overlap; the buffers' memory stays alive until the copy is done (`enqueue_using`).
            unsafe { driver::cuMemcpyAsync(self.handle(), src.handle(), bytes, stream.handle()) }.check("cuMemcpyAsync")
        })
    }

    /// Copies `src` (exactly as many elements as the view has) into the view, ordered on
    /// `stream`, and **blocks** until the copy is done (`src` is only borrowed for the call).
    /// For a copy that does not block, copy from a pinned [`TypedBuffer`] with
    /// [`copy_from`](Self::copy_from), or hand a vector over with
    /// [`TypedBuffer::copy_from_vec_async`]. Not on a stream being captured.
    pub fn copy_from_host_blocking(&self, src: &[T], stream: &Stream) -> Result<()> {
        if src.len() != self.len() {
            return Err(CudaError::InvalidArgument(format!(
                "copy_from_host_blocking: the slice has {} elements, the view {}",
                src.len(),
                self.len()
            )));
        }
        let bytes = std::mem::size_of_val(src);
        self.buffer().check_writable("copy_from_host_blocking")?;
        copy_with_host(
            stream,
            &[self.buffer()],
            "copy_from_host_blocking waits for its copy, which a stream being captured never runs: copy before the capture, or from a buffer",
            || {
                if bytes == 0 {
                    return Ok(());
                }
                // SAFETY: `src` is live for the call and the copy is waited for before returning
                // (`copy_with_host`); the view's `bytes` lie in its buffer, held until the copy
                // is done.
                unsafe { memcpy_from_host(self.buffer(), self.handle(), src.as_ptr().cast(), bytes, stream) }
            },
        )
    }

    /// Fills every element with `value`, ordered on `stream`: elements of 1, 2 or 4 bytes (one
    /// `cuMemsetD8/16/32Async`); other sizes are an error.
    pub fn fill(&self, value: T, stream: &Stream) -> Result<()> {
        let bytes = bytemuck::bytes_of(&value);
        let pattern = match *bytes {
            [a] => Pattern::U8(a),
            [a, b] => Pattern::U16(u16::from_ne_bytes([a, b])),
            [a, b, c, d] => Pattern::U32(u32::from_ne_bytes([a, b, c, d])),
            _ => {
                return Err(CudaError::InvalidArgument(format!(
                    "fill: elements of {} bytes ({}) cannot be filled by the driver's memsets (1, 2 or 4 bytes)",
                    bytes.len(),
                    std::any::type_name::<T>()
                )))
            }
        };
        self.buffer().check_writable("fill")?;
        let (ptr, count) = (self.handle(), self.len());
        if count == 0 {
            return Ok(());
        }
        enqueue_using(stream, &[self.buffer()], |_| {
            // SAFETY: `count` elements of the pattern's size at `ptr` lie in the buffer (the view
            // was checked when made), which stays alive until the fill is done.
            unsafe {
                match pattern {
                    Pattern::U8(v) => driver::cuMemsetD8Async(ptr, v, count, stream.handle()).check("cuMemsetD8Async"),
                    Pattern::U16(v) => {
                        driver::cuMemsetD16Async(ptr, v, count, stream.handle()).check("cuMemsetD16Async")
                    }
                    Pattern::U32(v) => {
                        driver::cuMemsetD32Async(ptr, v, count, stream.handle()).check("cuMemsetD32Async")
                    }
                }
            }
        })
    }
}

/// A memset's pattern.
#[derive(Clone, Copy)]
enum Pattern {
    U8(u8),
    U16(u16),
    U32(u32),
}

/// Whether `bytes` bytes at `a` and at `b` overlap.
fn overlap(a: u64, b: u64, bytes: usize) -> bool {
    let bytes = bytes as u64;
    bytes > 0 && a < b.saturating_add(bytes) && b < a.saturating_add(bytes)
}

impl<T: Pod> ReadOnlyView<'_, T> {
    /// Copies the view into `dst` (exactly as many elements), ordered on `stream`, and
    /// **blocks** until the copy is done. For a copy that does not block, copy into a pinned
    /// [`TypedBuffer`] ([`BufferView::copy_from`]) or await [`TypedBuffer::to_vec_async`]. Not
    /// on a stream being captured.
    pub fn copy_to_host_blocking(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        if dst.len() != self.len() {
            return Err(CudaError::InvalidArgument(format!(
                "copy_to_host_blocking: the slice has {} elements, the view {}",
                dst.len(),
                self.len()
            )));
        }
        let bytes = std::mem::size_of_val(dst);
        self.buffer().check_device_reads(stream, "copy_to_host_blocking")?;
        let dst_ptr = dst.as_mut_ptr();
        copy_with_host(
            stream,
            &[self.buffer()],
            "copy_to_host_blocking waits for its copy, which a stream being captured never runs: copy after the graph ran, from a stream that is not capturing",
            || {
                if bytes == 0 {
                    return Ok(());
                }
                // SAFETY: `dst` is live and exclusively borrowed for the call; the copy is waited
                // for before returning (`copy_with_host`); the view's bytes lie in its buffer.
                unsafe { memcpy_to_host(self.buffer(), self.handle(), dst_ptr.cast(), bytes, stream) }
            },
        )
    }

    /// The view's elements as a vector, copied on `stream`; **blocks** until the copy is done.
    /// An error, not an abort, when the host cannot hold that much.
    pub fn to_vec_blocking(&self, stream: &Stream) -> Result<Vec<T>> {
        let mut out = Vec::new();
        out.try_reserve_exact(self.len()).map_err(|e| {
            CudaError::InvalidArgument(format!(
                "to_vec_blocking: cannot hold {} elements on the host: {e}",
                self.len()
            ))
        })?;
        out.resize(self.len(), T::zeroed());
        self.copy_to_host_blocking(&mut out, stream)?;
        Ok(out)
    }
}

impl<T: Pod> TypedBuffer<T> {
    /// A new typed buffer from `resource` holding a copy of `data`, ordered on `stream` (where
    /// the buffer starts, see [`allocate`](Self::allocate)); **blocks** until the copy is done.
    /// For a copy that does not block, fill a pinned buffer ([`host_slice_mut`](Self::host_slice_mut))
    /// and [`copy_from`](Self::copy_from) it.
    pub fn from_host_blocking(resource: &impl AllocateBuffer, data: &[T], stream: &Stream) -> Result<TypedBuffer<T>> {
        let buffer = TypedBuffer::allocate(resource, data.len(), stream)?;
        buffer.view().copy_from_host_blocking(data, stream)?;
        Ok(buffer)
    }

    /// Copies `src` (of the same length) into this buffer, ordered on `stream`, without
    /// blocking (`cuda.core`'s `copy_from`): device to device, or host to device or back when
    /// one side is pinned or managed memory.
    pub fn copy_from(&self, src: &TypedBuffer<T>, stream: &Stream) -> Result<()> {
        self.view().copy_from(src, stream)
    }

    /// Copies this buffer into `dst` (of the same length), ordered on `stream`, without
    /// blocking (`cuda.core`'s `copy_to`).
    pub fn copy_to(&self, dst: &TypedBuffer<T>, stream: &Stream) -> Result<()> {
        dst.view().copy_from(self, stream)
    }

    /// Copies `src` (exactly `len()` elements) into the buffer; **blocks** until the copy is
    /// done (see [`BufferView::copy_from_host_blocking`]).
    pub fn copy_from_host_blocking(&self, src: &[T], stream: &Stream) -> Result<()> {
        self.view().copy_from_host_blocking(src, stream)
    }

    /// Copies the buffer into `dst` (exactly `len()` elements); **blocks** until the copy is
    /// done (see [`ReadOnlyView::copy_to_host_blocking`]).
    pub fn copy_to_host_blocking(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        self.read_only().copy_to_host_blocking(dst, stream)
    }

    /// The elements as a vector; **blocks** until the copy is done (for a future instead:
    /// [`to_vec_async`](Self::to_vec_async)).
    pub fn to_vec_blocking(&self, stream: &Stream) -> Result<Vec<T>> {
        self.read_only().to_vec_blocking(stream)
    }

    /// Fills every element with `value` (elements of 1, 2 or 4 bytes), ordered on `stream`.
    pub fn fill(&self, value: T, stream: &Stream) -> Result<()> {
        self.view().fill(value, stream)
    }

    /// The elements as a vector, without blocking the thread: copied into pinned staging memory
    /// on `stream`, and the future resolves with the vector once the copy is done (see
    /// [`Buffer::to_vec_async`]).
    pub fn to_vec_async(&self, stream: &Stream) -> Result<HostCopy<T>> {
        self.as_buffer().to_vec_async_at(self.handle(), self.len(), stream)
    }

    /// Copies `data` (exactly `len()` elements) into the buffer on `stream`, without blocking
    /// the thread: `data` is kept until the copy is done (see [`Buffer::copy_from_vec_async`]).
    pub fn copy_from_vec_async(&self, data: Vec<T>, stream: &Stream) -> Result<Completion>
    where
        T: Send,
    {
        if data.len() != self.len() {
            return Err(CudaError::InvalidArgument(format!(
                "copy_from_vec_async: the vector has {} elements, the buffer {}",
                data.len(),
                self.len()
            )));
        }
        self.as_buffer().copy_from_vec_async(data, stream)
    }
}

impl Buffer {
    /// The buffer as a typed buffer of `T` (see [`TypedBuffer::from_buffer`]).
    pub fn into_typed<T: Pod>(self) -> Result<TypedBuffer<T>> {
        TypedBuffer::from_buffer(self)
    }
}

#[cfg(test)]
mod tests {
    use super::overlap;

    #[test]
    fn overlapping_ranges_are_found() {
        assert!(overlap(100, 100, 1));
        assert!(overlap(100, 103, 4));
        assert!(overlap(103, 100, 4));
        assert!(!overlap(100, 104, 4));
        assert!(!overlap(104, 100, 4));
        assert!(!overlap(100, 100, 0));
        assert!(overlap(u64::MAX - 2, u64::MAX - 1, 8));
    }
}
