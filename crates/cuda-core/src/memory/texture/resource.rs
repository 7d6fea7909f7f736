//! [`ResourceDescriptor`]: the memory a texture (or surface) reads, and what keeps it alive.

use super::array::{ArrayHandle, OpaqueArray};
use super::mipmap::{MipmapHandle, MipmappedArray};
use super::{check_channels, element_bytes, ArrayFormat};
use crate::device::Device;
use crate::memory::buffer::Buffer;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::sync::Arc;

/// What backs a resource, held as long as the descriptor (and every texture made from it).
#[derive(Clone)]
pub(super) enum Kind {
    Array {
        handle: Arc<ArrayHandle>,
        surface_load_store: bool,
    },
    Mipmapped {
        handle: Arc<MipmapHandle>,
    },
    Linear {
        buffer: Arc<Buffer>,
        format: ArrayFormat,
        num_channels: u32,
        size_bytes: usize,
    },
    Pitch2D {
        buffer: Arc<Buffer>,
        format: ArrayFormat,
        num_channels: u32,
        width: usize,
        height: usize,
        pitch_bytes: usize,
    },
}

/// The memory behind a [`TextureObject`](super::TextureObject) or
/// [`SurfaceObject`](super::SurfaceObject) (`cuda.core`'s `ResourceDescriptor`): an array, a
/// mipmapped array, or a buffer read as a 1D typed array (linear) or a row-pitched 2D image.
///
/// The descriptor holds what it describes: an array's storage, or the buffer (an
/// `Arc<Buffer>`: keep a clone to write it). Textures made from it hold it too, until their
/// work is done. Linear and pitched resources cannot back surfaces.
#[derive(Clone)]
pub struct ResourceDescriptor {
    pub(super) kind: Kind,
}

impl fmt::Debug for ResourceDescriptor {
    /// `cuda.core`'s repr.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Linear {
                format,
                num_channels,
                size_bytes,
                ..
            } => write!(
                f,
                "ResourceDescriptor(kind='linear', format={format}, num_channels={num_channels}, size_bytes={size_bytes})"
            ),
            Kind::Pitch2D {
                format,
                num_channels,
                width,
                height,
                pitch_bytes,
                ..
            } => write!(
                f,
                "ResourceDescriptor(kind='pitch2d', format={format}, num_channels={num_channels}, width={width}, height={height}, pitch_bytes={pitch_bytes})"
            ),
            _ => write!(f, "ResourceDescriptor(kind='{}')", self.kind()),
        }
    }
}

/// `cuda.core`'s requirement on a buffer backing a texture, and this crate's: kernels must
/// reach it.
fn check_buffer(buffer: &Buffer) -> Result<()> {
    if !buffer.is_device_accessible() {
        return Err(CudaError::InvalidArgument(
            "a texture's buffer must be device-accessible (device, pinned or managed memory)".into(),
        ));
    }
    Ok(())
}

impl ResourceDescriptor {
    /// An array (`cuda.core`'s `from_opaque_array`): backs textures, and surfaces when the
    /// array allows surface access.
    pub fn from_opaque_array(array: &OpaqueArray) -> ResourceDescriptor {
        ResourceDescriptor {
            kind: Kind::Array {
                handle: array.shared().clone(),
                surface_load_store: array.is_surface_load_store(),
            },
        }
    }

    /// An array this crate does not own (`cuda.core`'s `OpaqueArray._from_handle(owning=False)`,
    /// made public by [`ResourceDescriptor::from_mapped_array`]): the descriptor, and every texture
    /// and surface made from it, hold `owner`, which keeps `raw` valid; their work is ordered on a
    /// private stream of `context` that follows `owner`'s stream (and that `owner`'s free waits
    /// for); surfaces need `surface_load_store` and `writable`.
    ///
    /// # Safety
    /// As for `ArrayHandle::borrowed`: `raw` is an array of `context`'s device, valid until
    /// `owner` is dropped and the work of every stream and graph that used it is done, and usable
    /// by work ordered after what `owner`'s stream has queued.
    pub(crate) unsafe fn from_borrowed_array(
        raw: driver::CUarray,
        owner: Arc<Buffer>,
        context: &crate::device::Context,
        surface_load_store: bool,
        writable: bool,
    ) -> Result<ResourceDescriptor> {
        let stream = super::private_stream_after(context, &owner)?;
        Ok(ResourceDescriptor {
            kind: Kind::Array {
                // SAFETY: forwarded to the caller; `stream` follows `owner`'s stream.
                handle: unsafe { ArrayHandle::borrowed(raw, owner, stream, context.device(), writable) },
                surface_load_store,
            },
        })
    }

    /// A mipmapped array (`cuda.core`'s `from_mipmapped_array`): backs textures sampled across
    /// levels, not surfaces (bind a surface to a level instead).
    pub fn from_mipmapped_array(array: &MipmappedArray) -> ResourceDescriptor {
        ResourceDescriptor {
            kind: Kind::Mipmapped {
                handle: array.shared().clone(),
            },
        }
    }

    /// A buffer read as a 1D typed array (`cuda.core`'s `from_linear`): `size_bytes` of it
    /// (all of it when `None`), a whole number of elements, at least one. Textures of a linear
    /// resource ignore addressing and filtering (kernels fetch by index).
    pub fn from_linear(
        buffer: impl Into<Arc<Buffer>>,
        format: ArrayFormat,
        num_channels: u32,
        size_bytes: Option<usize>,
    ) -> Result<ResourceDescriptor> {
        let buffer = buffer.into();
        check_channels(num_channels)?;
        check_buffer(&buffer)?;
        let elem = element_bytes(format, num_channels);
        let size = match size_bytes {
            None => buffer.size(),
            Some(s) if s > buffer.size() => {
                return Err(CudaError::InvalidArgument(format!(
                    "size_bytes ({s}) exceeds buffer.size ({})",
                    buffer.size()
                )))
            }
            Some(s) => s,
        };
        if size < elem {
            return Err(CudaError::InvalidArgument(format!(
                "size_bytes ({size}) must be at least one element ({elem} bytes)"
            )));
        }
        if !size.is_multiple_of(elem) {
            return Err(CudaError::InvalidArgument(format!(
                "size_bytes ({size}) must be a multiple of element size ({elem} bytes for {format} x {num_channels})"
            )));
        }
        Ok(ResourceDescriptor {
            kind: Kind::Linear {
                buffer,
                format,
                num_channels,
                size_bytes: size,
            },
        })
    }

    /// A buffer read as a row-pitched 2D image (`cuda.core`'s `from_pitch2d`): `height` rows of
    /// `width` elements, `pitch_bytes` apart. The pitch must hold a row and, where a texture is
    /// made, be a multiple of the device's texture pitch alignment; the rows must fit in the
    /// buffer.
    pub fn from_pitch2d(
        buffer: impl Into<Arc<Buffer>>,
        format: ArrayFormat,
        num_channels: u32,
        width: usize,
        height: usize,
        pitch_bytes: usize,
    ) -> Result<ResourceDescriptor> {
        let buffer = buffer.into();
        check_channels(num_channels)?;
        check_buffer(&buffer)?;
        if width < 1 {
            return Err(CudaError::InvalidArgument(format!("width must be >= 1, got {width}")));
        }
        if height < 1 {
            return Err(CudaError::InvalidArgument(format!("height must be >= 1, got {height}")));
        }
        let row = width
            .checked_mul(element_bytes(format, num_channels))
            .ok_or_else(|| CudaError::InvalidArgument(format!("a row of {width} elements overflows usize")))?;
        if pitch_bytes < row {
            return Err(CudaError::InvalidArgument(format!(
                "pitch_bytes ({pitch_bytes}) must be >= width * element_size ({row})"
            )));
        }
        // The last row needs only its own bytes, but cuda.core asks for whole pitches.
        let total = pitch_bytes.checked_mul(height).ok_or_else(|| {
            CudaError::InvalidArgument(format!(
                "pitch_bytes * height ({pitch_bytes} * {height}) overflows usize"
            ))
        })?;
        if total > buffer.size() {
            return Err(CudaError::InvalidArgument(format!(
                "pitch_bytes * height ({total}) exceeds buffer.size ({})",
                buffer.size()
            )));
        }
        Ok(ResourceDescriptor {
            kind: Kind::Pitch2D {
                buffer,
                format,
                num_channels,
                width,
                height,
                pitch_bytes,
            },
        })
    }

    /// `"array"`, `"mipmapped_array"`, `"linear"` or `"pitch2d"`, as `cuda.core` names them.
    pub fn kind(&self) -> &'static str {
        match self.kind {
            Kind::Array { .. } => "array",
            Kind::Mipmapped { .. } => "mipmapped_array",
            Kind::Linear { .. } => "linear",
            Kind::Pitch2D { .. } => "pitch2d",
        }
    }

    /// The element format of a buffer resource (`None` for arrays, whose format is their own).
    pub fn format(&self) -> Option<ArrayFormat> {
        match self.kind {
            Kind::Linear { format, .. } | Kind::Pitch2D { format, .. } => Some(format),
            _ => None,
        }
    }

    /// Channels per element of a buffer resource.
    pub fn num_channels(&self) -> Option<u32> {
        match self.kind {
            Kind::Linear { num_channels, .. } | Kind::Pitch2D { num_channels, .. } => Some(num_channels),
            _ => None,
        }
    }

    /// The bytes a linear resource binds.
    pub fn size_bytes(&self) -> Option<usize> {
        match self.kind {
            Kind::Linear { size_bytes, .. } => Some(size_bytes),
            _ => None,
        }
    }

    /// A pitched image's width, in elements.
    pub fn width(&self) -> Option<usize> {
        match self.kind {
            Kind::Pitch2D { width, .. } => Some(width),
            _ => None,
        }
    }

    /// A pitched image's height, in rows.
    pub fn height(&self) -> Option<usize> {
        match self.kind {
            Kind::Pitch2D { height, .. } => Some(height),
            _ => None,
        }
    }

    /// A pitched image's row pitch, in bytes.
    pub fn pitch_bytes(&self) -> Option<usize> {
        match self.kind {
            Kind::Pitch2D { pitch_bytes, .. } => Some(pitch_bytes),
            _ => None,
        }
    }

    /// The buffer of a linear or pitched resource (`cuda.core`'s `source` for those kinds).
    pub fn buffer(&self) -> Option<&Arc<Buffer>> {
        match &self.kind {
            Kind::Linear { buffer, .. } | Kind::Pitch2D { buffer, .. } => Some(buffer),
            _ => None,
        }
    }

    /// Whether the resource is an array that allows surface access.
    pub(super) fn surface_array(&self) -> Option<&Arc<ArrayHandle>> {
        match &self.kind {
            Kind::Array {
                handle,
                surface_load_store: true,
            } => Some(handle),
            _ => None,
        }
    }

    /// Checks the resource against the device a texture of it is made on: arrays of that
    /// device; buffers of it (or host memory it reaches), aligned to its texture alignment, and
    /// pitches aligned to its texture pitch alignment.
    pub(super) fn check_for(&self, device: &Device) -> Result<()> {
        let on = |d: Device, what: &str| {
            if d != *device {
                return Err(CudaError::InvalidArgument(format!(
                    "the {what} is on device {}, but the texture is made on device {}: make the {what}'s device current",
                    d.device_id(),
                    device.device_id()
                )));
            }
            Ok(())
        };
        match &self.kind {
            Kind::Array { handle, .. } => on(handle.device, "array"),
            Kind::Mipmapped { handle } => on(handle.device, "mipmapped array"),
            Kind::Linear { buffer, .. } | Kind::Pitch2D { buffer, .. } => {
                if let Some(id) = buffer.device_id() {
                    on(Device::new(id)?, "buffer")?;
                }
                let align = attribute(
                    device,
                    driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT,
                )?;
                if !buffer.handle().is_multiple_of(align) {
                    return Err(CudaError::InvalidArgument(format!(
                        "the buffer at {:#x} is not aligned to the device's texture alignment ({align} bytes): use a buffer from a memory resource, which aligns its allocations",
                        buffer.handle()
                    )));
                }
                if let Kind::Pitch2D { pitch_bytes, .. } = &self.kind {
                    let align = attribute(
                        device,
                        driver::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT,
                    )?;
                    if !(*pitch_bytes as u64).is_multiple_of(align) {
                        return Err(CudaError::InvalidArgument(format!(
                            "pitch_bytes ({pitch_bytes}) must be a multiple of the device's texture pitch alignment ({align} bytes): pad each row"
                        )));
                    }
                }
                Ok(())
            }
        }
    }

    /// The driver's description (the handles and addresses stay valid while `self` lives).
    pub(super) fn to_driver(&self) -> driver::CUDA_RESOURCE_DESC {
        let mut d = driver::CUDA_RESOURCE_DESC::default();
        match &self.kind {
            Kind::Array { handle, .. } => {
                d.resType = driver::CUresourcetype::CU_RESOURCE_TYPE_ARRAY;
                d.res.array.hArray = handle.raw();
            }
            Kind::Mipmapped { handle } => {
                d.resType = driver::CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
                d.res.mipmap.hMipmappedArray = handle.raw();
            }
            Kind::Linear {
                buffer,
                format,
                num_channels,
                size_bytes,
            } => {
                d.resType = driver::CUresourcetype::CU_RESOURCE_TYPE_LINEAR;
                d.res.linear = driver::CUDA_RESOURCE_DESC_st__bindgen_ty_1__bindgen_ty_3 {
                    devPtr: buffer.handle(),
                    format: format.to_driver(),
                    numChannels: *num_channels,
                    sizeInBytes: *size_bytes,
                };
            }
            Kind::Pitch2D {
                buffer,
                format,
                num_channels,
                width,
                height,
                pitch_bytes,
            } => {
                d.resType = driver::CUresourcetype::CU_RESOURCE_TYPE_PITCH2D;
                d.res.pitch2D = driver::CUDA_RESOURCE_DESC_st__bindgen_ty_1__bindgen_ty_4 {
                    devPtr: buffer.handle(),
                    format: format.to_driver(),
                    numChannels: *num_channels,
                    width: *width,
                    height: *height,
                    pitchInBytes: *pitch_bytes,
                };
            }
        }
        d
    }
}

/// A device attribute that must be positive (an alignment).
fn attribute(device: &Device, attribute: driver::CUdevice_attribute) -> Result<u64> {
    let v = device.attribute(attribute)?;
    u64::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| CudaError::InvalidArgument(format!("the driver reports {v} for {attribute:?}")))
}
