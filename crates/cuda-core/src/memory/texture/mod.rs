//! Textures and surfaces (`cuda.core.texture`, public as [`crate::texture`]): CUDA arrays
//! ([`OpaqueArray`], [`MipmappedArray`]), what backs a texture ([`ResourceDescriptor`]), how it
//! is sampled ([`TextureDescriptor`]), and the bindless handles kernels take
//! ([`TextureObject`], [`SurfaceObject`]).
//!
//! - here: [`ArrayFormat`], the checks the constructors share, and the *lifeline* every handle
//!   carries;
//! - `array`: [`OpaqueArray`] and its copies to and from buffers and host memory;
//! - `mipmap`: [`MipmappedArray`], whose levels are arrays that keep it alive;
//! - `resource`: [`ResourceDescriptor`];
//! - `descriptor`: [`TextureDescriptor`] and its enums;
//! - `object`: [`TextureObject`] and [`SurfaceObject`].
//!
//! **Who keeps what alive.** Each driver handle lives in a shared box destroyed with its last
//! holder: a level holds its mipmapped array, a texture or surface holds what backs it (an
//! array, a mipmapped array, or a buffer). Work on the GPU is covered by a *lifeline*: a
//! zero-byte [`Buffer`] whose owner is the box. Copies and launches use the lifeline as any
//! operation uses a buffer (`enqueue_using`): the stream is remembered, or the graph being
//! captured holds it. The box is let go only once the lifeline is dropped and the work of every
//! stream, and every graph, that used it is done: dropping a handle waits for the work of the
//! streams that used it (as a buffer's owner does; a stream being captured defers this to the
//! release thread instead), and a graph lets go when it and its launches are done. Lifelines are
//! ordered on a private stream of the array (or texture), which never runs anything but the
//! fences of that bookkeeping.
//!
//! Textures use memory (buffers as linear and pitched resources): the module lives in `memory`
//! so that launches (a layer above) can take its handles as kernel arguments.

mod array;
pub(crate) mod copies;
mod descriptor;
mod mipmap;
mod object;
mod resource;
#[cfg(test)]
mod tests;

pub use array::{OpaqueArray, OpaqueArrayOptions};
pub use descriptor::{AddressMode, FilterMode, ReadMode, TextureDescriptor};
pub use mipmap::{MipmappedArray, MipmappedArrayOptions};
pub use object::{SurfaceObject, TextureObject};
pub use resource::ResourceDescriptor;

use super::buffer::{Buffer, Keeper};
use super::MemoryResource;
use crate::device::{Context, Device};
use crate::stream::{Stream, StreamOptions};
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::any::Any;
use std::sync::Arc;

/// The element format of a CUDA array or a linear texture (`cuda.core`'s `ArrayFormat`; each
/// discriminant is the driver's `CU_AD_FORMAT_*` value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u32)]
pub enum ArrayFormat {
    /// `u8`.
    Uint8 = driver::CUarray_format_enum::CU_AD_FORMAT_UNSIGNED_INT8.0,
    /// `u16`.
    Uint16 = driver::CUarray_format_enum::CU_AD_FORMAT_UNSIGNED_INT16.0,
    /// `u32`.
    Uint32 = driver::CUarray_format_enum::CU_AD_FORMAT_UNSIGNED_INT32.0,
    /// `i8`.
    Int8 = driver::CUarray_format_enum::CU_AD_FORMAT_SIGNED_INT8.0,
    /// `i16`.
    Int16 = driver::CUarray_format_enum::CU_AD_FORMAT_SIGNED_INT16.0,
    /// `i32`.
    Int32 = driver::CUarray_format_enum::CU_AD_FORMAT_SIGNED_INT32.0,
    /// `half::f16`.
    Float16 = driver::CUarray_format_enum::CU_AD_FORMAT_HALF.0,
    /// `f32`.
    Float32 = driver::CUarray_format_enum::CU_AD_FORMAT_FLOAT.0,
}

impl ArrayFormat {
    /// Every format.
    pub const ALL: [ArrayFormat; 8] = [
        ArrayFormat::Uint8,
        ArrayFormat::Uint16,
        ArrayFormat::Uint32,
        ArrayFormat::Int8,
        ArrayFormat::Int16,
        ArrayFormat::Int32,
        ArrayFormat::Float16,
        ArrayFormat::Float32,
    ];

    /// Bytes per channel.
    pub const fn bytes(self) -> usize {
        match self {
            ArrayFormat::Uint8 | ArrayFormat::Int8 => 1,
            ArrayFormat::Uint16 | ArrayFormat::Int16 | ArrayFormat::Float16 => 2,
            ArrayFormat::Uint32 | ArrayFormat::Int32 | ArrayFormat::Float32 => 4,
        }
    }

    /// `cuda.core`'s name: `UINT8`, `FLOAT32`.
    pub const fn name(self) -> &'static str {
        match self {
            ArrayFormat::Uint8 => "UINT8",
            ArrayFormat::Uint16 => "UINT16",
            ArrayFormat::Uint32 => "UINT32",
            ArrayFormat::Int8 => "INT8",
            ArrayFormat::Int16 => "INT16",
            ArrayFormat::Int32 => "INT32",
            ArrayFormat::Float16 => "FLOAT16",
            ArrayFormat::Float32 => "FLOAT32",
        }
    }

    /// The driver's value.
    pub const fn to_driver(self) -> driver::CUarray_format {
        driver::CUarray_format_enum(self as u32)
    }

    /// The format of a driver value (an error for formats `cuda.core` does not list, such as
    /// the video and block-compressed ones).
    pub fn from_driver(format: driver::CUarray_format) -> Result<ArrayFormat> {
        ArrayFormat::ALL
            .into_iter()
            .find(|f| f.to_driver() == format)
            .ok_or_else(|| {
                CudaError::InvalidArgument(format!(
                    "array format {} is not one of cuda.core's ArrayFormat values",
                    format.0
                ))
            })
    }

    /// The format of elements of `dtype` (`cuda.core`'s `ArrayFormatType` accepts NumPy dtypes).
    pub fn from_dtype(dtype: super::DType) -> Result<ArrayFormat> {
        use super::DType as D;
        Ok(match dtype {
            D::U8 => ArrayFormat::Uint8,
            D::U16 => ArrayFormat::Uint16,
            D::U32 => ArrayFormat::Uint32,
            D::I8 => ArrayFormat::Int8,
            D::I16 => ArrayFormat::Int16,
            D::I32 => ArrayFormat::Int32,
            D::F16 => ArrayFormat::Float16,
            D::F32 => ArrayFormat::Float32,
            other => {
                return Err(CudaError::InvalidArgument(format!(
                    "no array format holds {other} elements (uint8, uint16, uint32, int8, int16, int32, float16 and float32 do)"
                )))
            }
        })
    }
}

impl std::fmt::Display for ArrayFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `cuda.core`'s check of a channel count.
fn check_channels(num_channels: u32) -> Result<()> {
    if !matches!(num_channels, 1 | 2 | 4) {
        return Err(CudaError::InvalidArgument(format!(
            "num_channels must be 1, 2, or 4, got {num_channels}"
        )));
    }
    Ok(())
}

/// Bytes per element: the format's size times the channels.
pub(crate) fn element_bytes(format: ArrayFormat, num_channels: u32) -> usize {
    format.bytes() * num_channels as usize
}

/// The extents a driver's array descriptor gives (`[width]`, `[width, height]` or `[width,
/// height, depth]`: the missing ones are 0 there).
pub(crate) fn descriptor_shape(desc: &driver::CUDA_ARRAY3D_DESCRIPTOR) -> Vec<usize> {
    match (desc.Height, desc.Depth) {
        (_, d) if d > 0 => vec![desc.Width, desc.Height, d],
        (h, _) if h > 0 => vec![desc.Width, h],
        _ => vec![desc.Width],
    }
}

/// `cuda.core`'s check of an array shape (rank 1 to 3, every extent at least 1), and the
/// array's size in bytes, which must fit in `usize`.
fn check_shape(shape: &[usize], format: ArrayFormat, num_channels: u32) -> Result<usize> {
    check_channels(num_channels)?;
    if !(1..=3).contains(&shape.len()) {
        return Err(CudaError::InvalidArgument(format!(
            "shape rank must be 1, 2, or 3, got {}",
            shape.len()
        )));
    }
    if let Some((i, d)) = shape.iter().enumerate().find(|(_, &d)| d < 1) {
        return Err(CudaError::InvalidArgument(format!("shape[{i}] must be >= 1, got {d}")));
    }
    shape
        .iter()
        .try_fold(element_bytes(format, num_channels), |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            CudaError::InvalidArgument(format!("an array of shape {shape:?} has more bytes than fit in usize"))
        })
}

/// The driver's descriptor of an array (or a mipmapped array's level 0): lower ranks use 0 for
/// the missing extents, as `cuArray3DCreate` asks.
fn array_descriptor(
    shape: &[usize],
    format: ArrayFormat,
    num_channels: u32,
    surface_load_store: bool,
) -> driver::CUDA_ARRAY3D_DESCRIPTOR {
    driver::CUDA_ARRAY3D_DESCRIPTOR {
        Width: shape[0],
        Height: shape.get(1).copied().unwrap_or(0),
        Depth: shape.get(2).copied().unwrap_or(0),
        Format: format.to_driver(),
        NumChannels: num_channels,
        Flags: if surface_load_store {
            driver::CUDA_ARRAY3D_SURFACE_LDST
        } else {
            0
        },
    }
}

/// The calling thread's current context, which `what` is made in.
fn current_context(what: &str) -> Result<Context> {
    crate::reaper::refuse_in_callback()?;
    Context::current()?.ok_or_else(|| {
        CudaError::InvalidState(format!(
            "{what} is made in the current CUDA context, and none is current: make a device current first (Device::set_current)"
        ))
    })
}

/// The context `Device::create_*` make things in: the current one when it is this device's,
/// else the device's primary context.
fn device_context(device: &Device) -> Result<Context> {
    crate::reaper::refuse_in_callback()?;
    match Context::current()? {
        Some(c) if c.device() == *device => Ok(c),
        _ => device.primary_context(),
    }
}

/// A private stream of `context` for lifelines to be ordered on (it runs nothing else).
fn private_stream(context: &Context) -> Result<Stream> {
    context.create_stream(StreamOptions::default())
}

/// A private stream of `context` ordered after `buffer`'s allocation (its first use there waits
/// for the buffer's stream), and which the buffer's free waits for: what a texture of a buffer,
/// or of an array a buffer keeps valid, is ordered on.
fn private_stream_after(context: &Context, buffer: &Buffer) -> Result<Stream> {
    let stream = private_stream(context)?;
    super::buffer::enqueue_using(&stream, &[buffer], |_| Ok(()))?;
    Ok(stream)
}

/// A lifeline: a zero-byte buffer ordered on `stream` whose owner is `owner`, let go once the
/// buffer is dropped and the work of every stream and graph that used it is done.
fn lifeline<O: Any + Send + Sync>(owner: Arc<O>, device: Device, stream: &Stream) -> Result<Buffer> {
    let keeper: Arc<dyn MemoryResource> = Arc::new(Keeper::new(owner, Some(device), (true, false)));
    Buffer::from_parts(0, 0, Some(keeper), stream)
}
