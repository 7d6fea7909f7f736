//! [`MipmappedArray`]: a `CUmipmappedArray`, whose levels are [`OpaqueArray`]s that keep it
//! alive.

use super::array::{tuple, OpaqueArray};
use super::{check_shape, current_context, device_context, private_stream, ArrayFormat};
use crate::device::{Context, Device};
use crate::error::{record_drop_error, Check};
use crate::stream::Stream;
use crate::{CudaError, Result};
use cuda_sys::driver;
use std::fmt;
use std::sync::Arc;

/// A `CUmipmappedArray`, destroyed with its last holder (the [`MipmappedArray`], a level, or a
/// texture built on it).
pub(super) struct MipmapHandle {
    raw: driver::CUmipmappedArray,
    /// The stream lifelines of its levels and textures are ordered on.
    pub(super) stream: Stream,
    pub(super) device: Device,
}

// SAFETY: a CUmipmappedArray may be used from any thread; it is destroyed once, by the last
// holder.
unsafe impl Send for MipmapHandle {}
// SAFETY: shared access only reads the handle.
unsafe impl Sync for MipmapHandle {}

impl MipmapHandle {
    pub(super) fn raw(&self) -> driver::CUmipmappedArray {
        self.raw
    }
}

impl Drop for MipmapHandle {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        if !crate::reaper::on_release_thread() {
            // Destroyed on the thread for slow drops (see `reaper::drop_slowly`): never on a driver
            // thread, and never by a drop elsewhere, as freeing an array may wait for the work of
            // every stream of the context (other threads' included).
            let later = MipmapHandle {
                raw: std::mem::replace(&mut self.raw, std::ptr::null_mut()),
                stream: self.stream.clone(),
                device: self.device,
            };
            crate::reaper::drop_slowly(Box::new(later));
            return;
        }
        // SAFETY: made by cuMipmappedArrayCreate and destroyed once, by its last holder: every
        // level, texture and the work that used them are done (their lifelines held it).
        if let Err(e) = unsafe { driver::cuMipmappedArrayDestroy(self.raw) }.check("cuMipmappedArrayDestroy") {
            record_drop_error(e);
        }
    }
}

/// The options of a [`MipmappedArray`] (`cuda.core`'s `MipmappedArrayOptions`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MipmappedArrayOptions {
    /// Level 0's extents: `[width]`, `[width, height]` or `[width, height, depth]`.
    pub shape: Vec<usize>,
    /// The element format.
    pub format: ArrayFormat,
    /// Channels per element: 1, 2 or 4.
    pub num_channels: u32,
    /// How many levels (at least 1; the driver allows up to `1 + log2` of the largest extent).
    pub num_levels: u32,
    /// Whether surfaces may be bound to its levels.
    pub is_surface_load_store: bool,
}

impl MipmappedArrayOptions {
    /// `cuda.core`'s checks: those of an array's shape and channels, and at least one level.
    fn check(&self) -> Result<()> {
        check_shape(&self.shape, self.format, self.num_channels)?;
        if self.num_levels < 1 {
            return Err(CudaError::InvalidArgument(format!(
                "num_levels must be >= 1, got {}",
                self.num_levels
            )));
        }
        Ok(())
    }
}

/// A mipmapped CUDA array (`cuda.core`'s `MipmappedArray`): levels of halving extents, sampled
/// together through a [`TextureObject`](super::TextureObject), each reachable as an
/// [`OpaqueArray`] ([`get_level`](Self::get_level)) to copy into or bind a surface to.
/// The storage goes once this value, every level and every texture built on it are gone and
/// their work is done.
pub struct MipmappedArray {
    handle: Arc<MipmapHandle>,
    shape: Vec<usize>,
    format: ArrayFormat,
    num_channels: u32,
    num_levels: u32,
    surface_load_store: bool,
}

impl fmt::Debug for MipmappedArray {
    /// `cuda.core`'s repr.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MipmappedArray(shape={}, format={}, num_channels={}, num_levels={})",
            tuple(&self.shape),
            self.format,
            self.num_channels,
            self.num_levels
        )
    }
}

impl MipmappedArray {
    /// A new mipmapped array in the current context (`cuMipmappedArrayCreate`).
    pub fn new(options: &MipmappedArrayOptions) -> Result<MipmappedArray> {
        options.check()?;
        MipmappedArray::create(&current_context("MipmappedArray")?, options)
    }

    fn create(context: &Context, options: &MipmappedArrayOptions) -> Result<MipmappedArray> {
        let desc = super::array_descriptor(
            &options.shape,
            options.format,
            options.num_channels,
            options.is_surface_load_store,
        );
        let stream = private_stream(context)?;
        let mut raw: driver::CUmipmappedArray = std::ptr::null_mut();
        context.with_current(|| {
            // SAFETY: out-pointer to a local; the descriptor is a local the driver reads.
            unsafe { driver::cuMipmappedArrayCreate(&mut raw, &desc, options.num_levels) }
                .check("cuMipmappedArrayCreate")
        })?;
        Ok(MipmappedArray {
            handle: Arc::new(MipmapHandle {
                raw,
                stream,
                device: context.device(),
            }),
            shape: options.shape.clone(),
            format: options.format,
            num_channels: options.num_channels,
            num_levels: options.num_levels,
            surface_load_store: options.is_surface_load_store,
        })
    }

    /// Level `level` as an array that holds this mipmapped array (`cuMipmappedArrayGetLevel`):
    /// its extents are level 0's halved `level` times (at least 1).
    pub fn get_level(&self, level: u32) -> Result<OpaqueArray> {
        crate::reaper::refuse_in_callback()?;
        if level >= self.num_levels {
            return Err(CudaError::InvalidArgument(format!(
                "level ({level}) must be < num_levels ({})",
                self.num_levels
            )));
        }
        let mut raw: driver::CUarray = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the mipmapped array is live (self holds it).
        unsafe { driver::cuMipmappedArrayGetLevel(&mut raw, self.handle.raw, level) }
            .check("cuMipmappedArrayGetLevel")?;
        OpaqueArray::level(raw, self.handle.clone())
    }

    /// The `CUmipmappedArray`.
    pub fn handle(&self) -> driver::CUmipmappedArray {
        self.handle.raw
    }

    /// Level 0's extents.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element format.
    pub fn format(&self) -> ArrayFormat {
        self.format
    }

    /// Channels per element.
    pub fn num_channels(&self) -> u32 {
        self.num_channels
    }

    /// How many levels.
    pub fn num_levels(&self) -> u32 {
        self.num_levels
    }

    /// Whether surfaces may be bound to its levels.
    pub fn is_surface_load_store(&self) -> bool {
        self.surface_load_store
    }

    /// The device it was made on.
    pub fn device(&self) -> Device {
        self.handle.device
    }

    pub(super) fn shared(&self) -> &Arc<MipmapHandle> {
        &self.handle
    }
}

impl Device {
    /// A new mipmapped array on this device (`cuda.core`'s `Device.create_mipmapped_array`), in
    /// the current context when it is this device's, else in the device's primary context.
    pub fn create_mipmapped_array(&self, options: &MipmappedArrayOptions) -> Result<MipmappedArray> {
        options.check()?;
        MipmappedArray::create(&device_context(self)?, options)
    }
}
