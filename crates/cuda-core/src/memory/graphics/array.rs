//! [`MappedArray`]: a CUDA array of a mapped image, borrowed from its mapping, and whole-array
//! copies between it and buffers or host memory (`cuMemcpy3DAsync`), as
//! [`OpaqueArray`](crate::texture::OpaqueArray) has them.

use super::{GraphicsRegisterFlags, Registered};
use crate::device::{Context, Device};
use crate::error::Check;
use crate::memory::buffer::{Buffer, Pod};
use crate::memory::texture::copies::WholeArray;
use crate::memory::texture::{descriptor_shape, element_bytes, ArrayFormat, ResourceDescriptor};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::sync::Arc;

const FROM_HOST_REFUSAL: &str =
    "MappedArray::copy_from_host waits for its copy, which a stream being captured never runs: copy from a buffer";
const TO_HOST_REFUSAL: &str =
    "MappedArray::copy_to_host waits for its copy, which a stream being captured never runs: copy into a buffer";

/// A CUDA array of a mapped OpenGL image or EGL frame ([`super::MappedImage::array`],
/// [`super::EglFrame::array`]): the driver owns it, and it is valid while the mapping lives, which
/// the borrow `'m` guarantees. Data moves by whole-array copies, `shape[0]` elements per row, rows
/// then slices, densely packed on the other side (as for
/// [`OpaqueArray`](crate::texture::OpaqueArray)); every copy is work on the mapping, so the unmap
/// waits for it.
pub struct MappedArray<'m> {
    raw: driver::CUarray,
    /// The mapping's lifeline: copies use it as any operation uses a buffer, and textures and
    /// surfaces hold it.
    lifeline: &'m Arc<Buffer>,
    /// The registration's context.
    context: Context,
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
        lifeline: &'m Arc<Buffer>,
        registered: &Registered,
    ) -> Result<MappedArray<'m>> {
        let mut desc = driver::CUDA_ARRAY3D_DESCRIPTOR::default();
        registered.context.with_current(|| {
            // SAFETY: out-pointer to a local; the array belongs to the live mapping.
            unsafe { driver::cuArray3DGetDescriptor(&mut desc, raw) }.check("cuArray3DGetDescriptor")
        })?;
        let shape = descriptor_shape(&desc);
        let format = ArrayFormat::from_driver(desc.Format)?;
        if !matches!(desc.NumChannels, 1 | 2 | 4) {
            return Err(CudaError::InvalidArgument(format!(
                "the mapped array has {} channels; arrays here have 1, 2 or 4",
                desc.NumChannels
            )));
        }
        let size_bytes = shape
            .iter()
            .try_fold(element_bytes(format, desc.NumChannels), |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                CudaError::InvalidArgument(format!(
                    "a mapped array of shape {shape:?} has more bytes than fit in usize"
                ))
            })?;
        Ok(MappedArray {
            raw,
            lifeline,
            context: registered.context.clone(),
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
        element_bytes(self.format, self.num_channels)
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

    /// Whether CUDA may write it (the resource was not registered
    /// [`GraphicsRegisterFlags::READ_ONLY`]).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The device of the registration's context.
    pub fn device(&self) -> Device {
        self.context.device()
    }

    /// The array as whole-array copies see it (every copy is work on the mapping's lifeline,
    /// so the unmap waits for it).
    fn whole(&self) -> WholeArray<'_> {
        WholeArray {
            raw: self.raw,
            shape: &self.shape,
            element_bytes: self.element_bytes(),
            size_bytes: self.size_bytes,
            lifeline: self.lifeline,
            copy_to_what: "MappedArray::copy_to",
        }
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
        self.whole().copy_from(src, stream)
    }

    /// Copies the whole array into the first [`size_bytes`](Self::size_bytes) bytes of `dst`,
    /// ordered on `stream`.
    pub fn copy_to(&self, dst: &Buffer, stream: &Stream) -> Result<()> {
        self.whole().copy_to(dst, stream)
    }

    /// Copies host data into the array, ordered on `stream`, and waits for the copy. `src` must
    /// hold at least [`size_bytes`](Self::size_bytes) bytes. Not on a stream being captured.
    pub fn copy_from_host<T: Pod>(&self, src: &[T], stream: &Stream) -> Result<()> {
        self.check_writable("MappedArray::copy_from_host")?;
        self.whole().copy_from_host(src, stream, FROM_HOST_REFUSAL)
    }

    /// Copies the whole array into host memory, ordered on `stream`, and waits for the copy.
    /// `dst` must hold at least [`size_bytes`](Self::size_bytes) bytes. Not on a stream being
    /// captured.
    pub fn copy_to_host<T: Pod>(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        self.whole().copy_to_host(dst, stream, TO_HOST_REFUSAL)
    }

    /// The whole array as a vector of `T` (waits for the copy).
    pub fn to_vec<T: Pod>(&self, stream: &Stream) -> Result<Vec<T>> {
        self.whole().to_vec(stream, TO_HOST_REFUSAL)
    }
}

impl ResourceDescriptor {
    /// A mapped graphics array as a texture's or surface's memory (`cuda.core` wraps such an
    /// array with `OpaqueArray._from_handle(owning=False)`): a [`TextureObject`] of it samples the
    /// OpenGL image or EGL frame in place, and a [`SurfaceObject`] reads and writes it where the
    /// resource was registered with [`GraphicsRegisterFlags::SURFACE_LOAD_STORE`] and without
    /// [`GraphicsRegisterFlags::READ_ONLY`].
    ///
    /// The descriptor, and every texture and surface made from it, hold the mapping: while any of
    /// them lives (and until the launches and graphs that used them are done) the image stays
    /// mapped ([`GraphicsResource::is_mapped`](super::GraphicsResource::is_mapped) says so, and
    /// mapping it again is refused), and the guard's unmap, or its drop, lets go of the mapping
    /// instead of ending it. Once the last of them is released (on the release thread, after its
    /// work), the unmap is queued on the stream the image was mapped on by the registering
    /// thread's next graphics call (any resource's `is_mapped`, `map`, `close`, or
    /// [`release_parked`](super::release_parked)), as for a graph that held the mapping; an EGL
    /// image's ends there at once.
    ///
    /// Kernels reading the texture on any stream are ordered after the map: the array's work is
    /// ordered on a private stream of the registration's context, which follows the mapping
    /// stream's work so far (errors: making that stream, or ordering it, fails).
    ///
    /// [`TextureObject`]: crate::texture::TextureObject
    /// [`SurfaceObject`]: crate::texture::SurfaceObject
    pub fn from_mapped_array(array: &MappedArray<'_>) -> Result<ResourceDescriptor> {
        // SAFETY: the array belongs to the mapping whose lifeline the descriptor holds: the
        // driver keeps it valid until the unmap, which is the lifeline's free, queued (on the
        // mapping stream, after every stream that used the lifeline) only once every holder of
        // the lifeline is gone and the work of every stream and graph that used it is done; work
        // ordered after the mapping stream follows the map. The context is the registration's.
        unsafe {
            ResourceDescriptor::from_borrowed_array(
                array.raw,
                array.lifeline.clone(),
                &array.context,
                array.surface_load_store,
                array.writable,
            )
        }
    }
}
