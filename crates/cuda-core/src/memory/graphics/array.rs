//! [`MappedArray`]: a CUDA array of a mapped image, borrowed from its mapping, and whole-array
//! copies between it and buffers or host memory (`cuMemcpy3DAsync`), as
//! [`OpaqueArray`](crate::texture::OpaqueArray) has them.

use super::{GraphicsRegisterFlags, Registered};
use crate::error::Check;
use crate::memory::buffer::{enqueue_using, Buffer, Pod};
use crate::memory::copy::copy_with_host;
use crate::memory::texture::ArrayFormat;
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;

/// A CUDA array of a mapped OpenGL image or EGL frame ([`super::MappedImage::array`],
/// [`super::EglFrame::array`]): the driver owns it, and it is valid while the mapping lives, which
/// the borrow `'m` guarantees. Data moves by whole-array copies, `shape[0]` elements per row, rows
/// then slices, densely packed on the other side (as for
/// [`OpaqueArray`](crate::texture::OpaqueArray)); every copy is work on the mapping, so the unmap
/// waits for it.
pub struct MappedArray<'m> {
    raw: driver::CUarray,
    /// The mapping's lifeline: copies use it as any operation uses a buffer.
    lifeline: &'m Buffer,
    shape: Vec<usize>,
    format: ArrayFormat,
    num_channels: u32,
    surface_load_store: bool,
    size_bytes: usize,
    writable: bool,
}

impl fmt::Debug for MappedArray<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MappedArray(shape={:?}, format={}, num_channels={})",
            self.shape, self.format, self.num_channels
        )
    }
}

impl<'m> MappedArray<'m> {
    /// The mapped array `raw` of `registered`, covered by `lifeline`, as the driver describes it.
    pub(super) fn describe(
        raw: driver::CUarray,
        lifeline: &'m Buffer,
        registered: &Registered,
    ) -> Result<MappedArray<'m>> {
        let mut desc = driver::CUDA_ARRAY3D_DESCRIPTOR::default();
        registered.context.with_current(|| {
            // SAFETY: out-pointer to a local; the array belongs to the live mapping.
            unsafe { driver::cuArray3DGetDescriptor(&mut desc, raw) }.check("cuArray3DGetDescriptor")
        })?;
        let shape = match (desc.Height, desc.Depth) {
            (_, d) if d > 0 => vec![desc.Width, desc.Height, d],
            (h, _) if h > 0 => vec![desc.Width, h],
            _ => vec![desc.Width],
        };
        let format = ArrayFormat::from_driver(desc.Format)?;
        if !matches!(desc.NumChannels, 1 | 2 | 4) {
            return Err(CudaError::InvalidArgument(format!(
                "the mapped array has {} channels; arrays here have 1, 2 or 4",
                desc.NumChannels
            )));
        }
        let size_bytes = shape
            .iter()
            .try_fold(format.bytes() * desc.NumChannels as usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                CudaError::InvalidArgument(format!(
                    "a mapped array of shape {shape:?} has more bytes than fit in usize"
                ))
            })?;
        Ok(MappedArray {
            raw,
            lifeline,
            shape,
            format,
            num_channels: desc.NumChannels,
            surface_load_store: desc.Flags & driver::CUDA_ARRAY3D_SURFACE_LDST != 0,
            size_bytes,
            writable: !registered.flags.contains(GraphicsRegisterFlags::READ_ONLY),
        })
    }

    /// The `CUarray` (valid while the mapping lives).
    pub fn handle(&self) -> driver::CUarray {
        self.raw
    }

    /// The extents, in elements (`[width]`, `[width, height]` or `[width, height, depth]`).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element format.
    pub fn format(&self) -> ArrayFormat {
        self.format
    }

    /// Channels per element (1, 2 or 4).
    pub fn num_channels(&self) -> u32 {
        self.num_channels
    }

    /// Bytes per element.
    pub fn element_bytes(&self) -> usize {
        self.format.bytes() * self.num_channels as usize
    }

    /// The array's bytes.
    pub fn size_bytes(&self) -> usize {
        self.size_bytes
    }

    /// Whether surfaces may be bound to it (registered with
    /// [`GraphicsRegisterFlags::SURFACE_LOAD_STORE`]).
    pub fn is_surface_load_store(&self) -> bool {
        self.surface_load_store
    }

    /// `(width in bytes, height, depth)` of a whole-array copy (their product is `size_bytes`).
    fn extent(&self) -> (usize, usize, usize) {
        (
            self.shape[0] * self.element_bytes(),
            self.shape.get(1).copied().unwrap_or(1),
            self.shape.get(2).copied().unwrap_or(1),
        )
    }

    /// A whole-array copy with the array on one side; `other` fills in the other side.
    fn params(
        &self,
        into_array: bool,
        other: impl FnOnce(&mut driver::CUDA_MEMCPY3D, usize, usize),
    ) -> driver::CUDA_MEMCPY3D {
        let (width, height, depth) = self.extent();
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

    fn check_room(&self, have: usize, what: &str) -> Result<()> {
        if have < self.size_bytes {
            return Err(CudaError::InvalidArgument(format!(
                "{what} has {have} bytes, smaller than the array extent ({} bytes)",
                self.size_bytes
            )));
        }
        Ok(())
    }

    fn check_writable(&self, what: &str) -> Result<()> {
        if !self.writable {
            return Err(CudaError::InvalidArgument(format!(
                "{what}: the resource was registered read-only (GraphicsRegisterFlags::READ_ONLY): CUDA promised not to write it"
            )));
        }
        Ok(())
    }

    /// Copies the first [`size_bytes`](Self::size_bytes) bytes of `src` into the array, ordered on
    /// `stream`. Recorded into a graph when `stream` is being captured (the graph then holds the
    /// mapping, and the unmap waits for it).
    pub fn copy_from(&self, src: &Buffer, stream: &Stream) -> Result<()> {
        self.check_writable("MappedArray::copy_from")?;
        self.check_room(src.size(), "the source buffer")?;
        let p = self.params(true, |p, pitch, height| {
            p.srcMemoryType = driver::CUmemorytype::CU_MEMORYTYPE_UNIFIED;
            p.srcDevice = src.handle();
            p.srcPitch = pitch;
            p.srcHeight = height;
        });
        enqueue_using(stream, &[self.lifeline, src], |_| {
            // SAFETY: the array stays mapped until the copy is done (the lifeline's free, the
            // unmap, is ordered after it), the buffer's first size_bytes bytes stay alive
            // (`enqueue_using` holds it); the parameters are a local.
            unsafe { driver::cuMemcpy3DAsync(&p, stream.handle()) }.check("cuMemcpy3DAsync")
        })
    }

    /// Copies the whole array into the first [`size_bytes`](Self::size_bytes) bytes of `dst`,
    /// ordered on `stream`.
    pub fn copy_to(&self, dst: &Buffer, stream: &Stream) -> Result<()> {
        self.check_room(dst.size(), "the destination buffer")?;
        dst.check_writable("MappedArray::copy_to")?;
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

    /// Copies host data into the array, ordered on `stream`, and waits for the copy. `src` must
    /// hold at least [`size_bytes`](Self::size_bytes) bytes. Not on a stream being captured.
    pub fn copy_from_host<T: Pod>(&self, src: &[T], stream: &Stream) -> Result<()> {
        self.check_writable("MappedArray::copy_from_host")?;
        self.check_room(std::mem::size_of_val(src), "the host slice")?;
        let p = self.params(true, |p, pitch, height| {
            p.srcMemoryType = driver::CUmemorytype::CU_MEMORYTYPE_HOST;
            p.srcHost = src.as_ptr().cast();
            p.srcPitch = pitch;
            p.srcHeight = height;
        });
        copy_with_host(
            stream,
            &[self.lifeline],
            "MappedArray::copy_from_host waits for its copy, which a stream being captured never runs: copy from a buffer",
            || {
                // SAFETY: src holds size_bytes bytes and is borrowed until the copy is waited for
                // (`copy_with_host`); the array stays mapped (the lifeline orders the unmap after).
                unsafe { driver::cuMemcpy3DAsync(&p, stream.handle()) }.check("cuMemcpy3DAsync")
            },
        )
    }

    /// Copies the whole array into host memory, ordered on `stream`, and waits for the copy.
    /// `dst` must hold at least [`size_bytes`](Self::size_bytes) bytes. Not on a stream being
    /// captured.
    pub fn copy_to_host<T: Pod>(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        self.check_room(std::mem::size_of_val(dst), "the host slice")?;
        let dst_ptr = dst.as_mut_ptr();
        let p = self.params(false, |p, pitch, height| {
            p.dstMemoryType = driver::CUmemorytype::CU_MEMORYTYPE_HOST;
            p.dstHost = dst_ptr.cast();
            p.dstPitch = pitch;
            p.dstHeight = height;
        });
        copy_with_host(
            stream,
            &[self.lifeline],
            "MappedArray::copy_to_host waits for its copy, which a stream being captured never runs: copy into a buffer",
            || {
                // SAFETY: dst holds size_bytes bytes, exclusively borrowed until the copy is
                // waited for (`copy_with_host`); the array stays mapped.
                unsafe { driver::cuMemcpy3DAsync(&p, stream.handle()) }.check("cuMemcpy3DAsync")
            },
        )
    }

    /// The whole array as a vector of `T` (waits for the copy).
    pub fn to_vec<T: Pod>(&self, stream: &Stream) -> Result<Vec<T>> {
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
        self.copy_to_host(&mut out, stream)?;
        Ok(out)
    }
}
